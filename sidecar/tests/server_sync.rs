//! `allot sync` into a server ledger (a private MariaDB): refusals write
//! nothing, not even the schema. The MariaDB half of the suite: needs
//! Debian's mariadb-server; `scripts/test.sh` runs it (`--ignored`).

use allot_cli::identity::Actor;
use allot_cli::sync::{sync_text, SyncError};
use allot_ledger::testing::MariaDb;
use allot_ledger::{Ledger, LedgerError, Location};

const EXAMPLE: &str = include_str!("../../conf/budgets.toml");

#[test]
#[ignore = "needs mariadbd (Debian's mariadb-server); scripts/test.sh installs it and runs this"]
fn a_refused_first_sync_leaves_a_server_database_untouched_and_an_admin_creates_it() {
    let server = MariaDb::start();
    server.create_database("allot");
    let ledger = Location::parse(&server.url("allot", "allot")).unwrap();
    // A manager who is no admin cannot create the first version, and the
    // database is left without even allot's schema.
    let manager = Actor { name: "owner1".into(), is_admin: false };
    let refused = sync_text(&ledger, EXAMPLE, "budgets.toml", &manager, 1);
    assert!(matches!(refused, Err(SyncError::Refused(_))), "{refused:?}");
    assert!(matches!(Ledger::connect_read_only(&ledger), Err(LedgerError::Missing { .. })), "the refused sync created the schema");
    // An admin's sync creates the schema and version 1.
    let admin = Actor { name: "root".into(), is_admin: true };
    sync_text(&ledger, EXAMPLE, "budgets.toml", &admin, 2).unwrap();
    assert_eq!(Ledger::connect_read_only(&ledger).unwrap().current_budget_version().unwrap(), Some(1));
}
