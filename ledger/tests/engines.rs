//! The ledger's behaviour, case by case, on both engines: a SQLite file and
//! a real MariaDB server (a private `mariadbd` in a temporary directory,
//! stopped on drop). Each case runs on each engine and must give the same
//! answers: the plugins and the CLI cannot tell which one they write to.
//!
//! The server half needs Debian's `mariadb-server` (`mariadbd`,
//! `mariadb-install-db`); `scripts/test.sh` installs it and runs the
//! ignored tests. The SQLite half runs everywhere.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use allot::budget::BudgetTree;
use allot_ledger::testing::MariaDb;
use allot_ledger::{ContractRow, DemandRow, EventRow, JobEnd, LeafUsage, Ledger, LedgerError, Location, Period, RunRow, RunUpdate, SyncOutcome, UsageSnapshot};

/// Where one case's ledger lives.
enum Engine {
    File(tempfile::TempDir),
    Server { writer: String, reader: String },
}

impl Engine {
    fn file() -> Engine {
        Engine::File(tempfile::tempdir().unwrap())
    }
    fn server(server: &MariaDb, database: &str) -> Engine {
        server.create_database(database);
        Engine::Server { writer: server.url("allot", database), reader: server.url("reader", database) }
    }
    fn path(dir: &Path) -> PathBuf {
        dir.join("ledger.db")
    }
    fn location(&self, writable: bool) -> Location {
        match self {
            Engine::File(dir) => Location::File(Self::path(dir.path())),
            Engine::Server { writer, reader } => Location::parse(if writable { writer } else { reader }).unwrap(),
        }
    }
    fn writer(&self) -> Ledger {
        Ledger::connect(&self.location(true), true).unwrap()
    }
    fn reader(&self) -> allot_ledger::Result<Ledger> {
        Ledger::connect(&self.location(false), false)
    }
}

const V1: &str = "[budget]\nowners=[\"boss\"]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n";

fn run(job_id: u32, start: i64, gpus: u32, allocated: bool) -> RunRow {
    RunRow {
        job_id,
        run_start: start,
        run_end: None,
        leaf: Some("a".into()),
        account: Some("a".into()),
        user: Some("u".into()),
        gpus,
        allocated,
        end_reason: None,
    }
}

fn contract(job_id: u32, submit_time: i64, gpus: u32) -> ContractRow {
    ContractRow {
        job_id,
        user: "u".into(),
        account: Some("a".into()),
        leaf: Some("a".into()),
        min_runtime: 60,
        priority: "normal".into(),
        resumable: true,
        submit_time,
        comment: "min_runtime=1m".into(),
        gpus: Some(gpus),
    }
}

fn a_reader_sees_no_ledger_before_the_first_write(e: &Engine) {
    let err = e.reader().err().expect("nothing was written yet");
    assert!(matches!(err, LedgerError::Missing { .. }), "{err}");
    assert!(err.to_string().contains("sync a budget first"), "{err}");
}

fn budget_versions_are_appended_and_history_is_append_only(e: &Engine) {
    let mut l = e.writer();
    let t1 = BudgetTree::parse(V1).unwrap();
    assert_eq!(l.sync_budget(V1, &t1, "boss", "b.toml", 100).unwrap(), SyncOutcome::Written { version: 1, changes: vec!["+ a".into(), "+ b".into()] });
    assert_eq!(l.sync_budget(V1, &t1, "boss", "b.toml", 101).unwrap(), SyncOutcome::Unchanged { version: 1 });
    let v2 = V1.replace("[budget.b]\nshare=1", "[budget.b]\nshare=3");
    let t2 = BudgetTree::parse(&v2).unwrap();
    assert_eq!(l.sync_budget(&v2, &t2, "boss", "b.toml", 200).unwrap(), SyncOutcome::Written { version: 2, changes: vec!["~ b share 1 -> 3".into()] });
    // A refused sync writes nothing and saw the version it would replace.
    let v3 = V1.replace("[budget.a]\nshare=1", "[budget.a]\nshare=5");
    let mut seen = None;
    let refused = l.sync_budget_authorized(&v3, &BudgetTree::parse(&v3).unwrap(), "eve", "b.toml", 300, |c| {
        seen = c.map(|c| c.version);
        Err("eve may not".into())
    });
    assert_eq!(refused.unwrap_err().to_string(), "eve may not");
    assert_eq!(seen, Some(2));
    let r = e.reader().unwrap();
    assert_eq!(r.current_budget_version().unwrap(), Some(2));
    assert_eq!(r.budget_history().unwrap().iter().map(|v| (v.version, v.synced_at)).collect::<Vec<_>>(), vec![(2, 200), (1, 100)]);
    let current = r.current_budget().unwrap().unwrap();
    assert_eq!((current.toml.as_str(), current.author.as_str()), (v2.as_str(), "boss"));
    let (v, nodes) = r.current_budget_with_nodes().unwrap().unwrap();
    assert_eq!(v.version, 2);
    assert_eq!(nodes.iter().map(|n| n.0.as_str()).collect::<Vec<_>>(), vec!["", "a", "b"]);
    assert!((nodes[2].2 - 0.75).abs() < 1e-12 && nodes[2].3);
    assert_eq!(r.budget_version(1).unwrap().unwrap().toml, V1);
    assert_eq!(r.earlier_versions_since(2, 150).unwrap().iter().map(|v| v.version).collect::<Vec<_>>(), vec![1]);
    assert!(r.budget_nodes(3).unwrap().is_empty());
    // History cannot be rewritten, even with SQL by hand.
    let err = l.execute_raw("UPDATE budget_versions SET author = 'mallory'").unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    assert!(l.execute_raw("DELETE FROM budget_nodes").unwrap_err().to_string().contains("append-only"));
}

fn runs_open_close_charge_and_give_way(e: &Engine) {
    let mut l = e.writer();
    let ended = |job_id, start, end| RunRow { run_end: Some(end), end_reason: Some("x".into()), ..run(job_id, start, 2, true) };
    let period = Period {
        runs: vec![
            RunUpdate::Open(run(1, 100, 2, true)),
            RunUpdate::Open(run(2, 100, 4, false)),
            RunUpdate::Open(run(1, 100, 2, true)),
            // A run of 0 s, then the real run that started in the same second.
            RunUpdate::Open(ended(3, 100, 100)),
            RunUpdate::Open(run(3, 100, 2, true)),
        ],
        ..Default::default()
    };
    l.record_period(&period).unwrap();
    assert_eq!(l.open_runs().unwrap().iter().map(|r| r.job_id).collect::<Vec<_>>(), vec![1, 2, 3]);
    let close = |job_id, end, reason: &str| RunUpdate::Close { job_id, run_start: 100, run_end: end, reason: reason.into() };
    l.record_period(&Period { runs: vec![close(1, 200, "completed"), close(3, 160, "completed")], ..Default::default() }).unwrap();
    // Closing twice keeps the first end.
    l.record_period(&Period { runs: vec![close(1, 999, "again")], ..Default::default() }).unwrap();
    let r = e.reader().unwrap();
    let runs = r.runs_of_job(1).unwrap();
    assert_eq!((runs[0].run_end, runs[0].end_reason.as_deref()), (Some(200), Some("completed")));
    assert_eq!(r.runs_of_job(3).unwrap().iter().map(|r| (r.run_start, r.run_end)).collect::<Vec<_>>(), vec![(100, Some(160))]);
    // [150, 300]: job 1 charged 2 GPUs x 50 s, job 3 2 x 10 s; job 2 is unallocated.
    assert_eq!(r.charged_by_leaf(150, 300).unwrap(), vec![("a".to_owned(), 120)]);
    assert_eq!(r.runs_since(250).unwrap().iter().map(|r| r.job_id).collect::<Vec<_>>(), vec![2]);
    assert_eq!(r.runs_of_job(2).unwrap()[0], run(2, 100, 4, false), "every field comes back as written");
}

fn contracts_keep_the_first_submission_and_the_last_end(e: &Engine) {
    let mut l = e.writer();
    let c = contract(7, 1000, 4);
    l.record_period(&Period { contracts: vec![c.clone()], ..Default::default() }).unwrap();
    // Requeued: Slurm says it was submitted at 1400.
    l.record_period(&Period { contracts: vec![contract(7, 1400, 4)], ..Default::default() }).unwrap();
    l.record_period(&Period { job_ends: vec![JobEnd { job_id: 7, at: 1500 }], ..Default::default() }).unwrap();
    l.record_period(&Period { job_ends: vec![JobEnd { job_id: 7, at: 1700 }], ..Default::default() }).unwrap();
    let r = e.reader().unwrap();
    assert_eq!(r.contracts_submitted(0, 2000).unwrap(), vec![(c.clone(), Some(1700))]);
    assert_eq!(r.contract(7).unwrap(), Some(c));
    assert!(r.contract(8).unwrap().is_none());
    // The id is used again by a new job: its own submit time.
    l.record_period(&Period { contracts: vec![contract(7, 5000, 1)], ..Default::default() }).unwrap();
    assert_eq!(r.contracts_submitted(0, 10_000).unwrap()[0].0.submit_time, 5000);
    // Waiting: recorded, no end and no run going on (job 9 runs; job 7's
    // row keeps its old end until the new job ends).
    l.record_period(&Period { contracts: vec![contract(8, 6000, 2)], runs: vec![RunUpdate::Open(run(9, 6000, 1, true))], ..Default::default() }).unwrap();
    l.record_period(&Period { contracts: vec![contract(9, 6000, 1)], ..Default::default() }).unwrap();
    assert_eq!(r.waiting_contracts().unwrap().iter().map(|c| c.job_id).collect::<Vec<_>>(), vec![8]);
}

fn demand_snapshot_events_and_identity(e: &Engine) {
    let mut l = e.writer();
    let d = |leaf: &str, at, pending| DemandRow {
        leaf: leaf.into(),
        at,
        pending_allocated: pending,
        pending_unallocated: 1,
        running_allocated: 0,
        running_unallocated: 0,
    };
    let snapshot = |at| UsageSnapshot {
        computed_at: at,
        budget_version: 1,
        capacity_gpus: 32,
        leaves: vec![
            LeafUsage { leaf: "a".into(), charged: 7200, unallocated: 5, running: 3 },
            LeafUsage { leaf: "b".into(), charged: 0, unallocated: 0, running: 0 },
        ],
    };
    let event = |at, job_id, kind: &str| EventRow { at, job_id, kind: kind.into(), detail: format!("{kind} at {at}") };
    l.record_period(&Period {
        demand: vec![d("a", 100, 4), d("a", 200, 2), d("a", 300, 0), d("b", 250, 8)],
        events: vec![event(100, 1, "preempted"), event(150, 2, "requeued"), event(120, 1, "preempted")],
        snapshot: Some(snapshot(100)),
        ..Default::default()
    })
    .unwrap();
    // The same demand row again replaces it; the snapshot is replaced whole.
    l.record_period(&Period { demand: vec![d("a", 300, 3)], snapshot: Some(UsageSnapshot { leaves: vec![], ..snapshot(400) }), ..Default::default() }).unwrap();
    let r = e.reader().unwrap();
    let at = |rows: Vec<DemandRow>| rows.iter().map(|d| (d.leaf.clone(), d.at, d.pending_allocated)).collect::<Vec<_>>();
    assert_eq!(at(r.demand_since(220).unwrap()), vec![("a".into(), 200, 2), ("a".into(), 300, 3), ("b".into(), 250, 8)]);
    assert_eq!(r.usage_snapshot().unwrap(), Some(UsageSnapshot { leaves: vec![], ..snapshot(400) }));
    l.record_period(&Period { snapshot: Some(snapshot(500)), ..Default::default() }).unwrap();
    assert_eq!(r.usage_snapshot().unwrap(), Some(snapshot(500)));
    assert_eq!(r.events_between("preempted", 0, 1000).unwrap().iter().map(|e| e.at).collect::<Vec<_>>(), vec![100, 120]);
    assert_eq!(r.events_of_job(1).unwrap().iter().map(|e| e.at).collect::<Vec<_>>(), vec![100, 120], "in the order written");
    let id = l.identity().unwrap();
    assert_eq!(id.len(), 32);
    assert_eq!(r.identity().unwrap(), id);
    assert!(l.check().unwrap().is_empty());
}

fn text_compares_byte_for_byte(e: &Engine) {
    let mut l = e.writer();
    let toml = V1.replace("[budget.b]", "[budget.B]");
    let tree = BudgetTree::parse(&toml).unwrap();
    l.sync_budget(&toml, &tree, "boss", "b.toml", 100).unwrap();
    l.record_period(&Period { runs: vec![RunUpdate::Open(RunRow { leaf: Some("B".into()), ..run(1, 0, 1, true) })], ..Default::default() }).unwrap();
    l.record_period(&Period { runs: vec![RunUpdate::Open(RunRow { leaf: Some("b".into()), ..run(2, 0, 1, true) })], ..Default::default() }).unwrap();
    // 'B' and 'b' are two leaves, not one (a case-insensitive collation
    // would merge them), and 'é' comes back as written.
    assert_eq!(l.charged_by_leaf(0, 10).unwrap(), vec![("B".to_owned(), 10), ("b".to_owned(), 10)]);
    l.record_period(&Period {
        events: vec![EventRow { at: 1, job_id: 1, kind: "note".into(), detail: "équipe ünïcode 🚀".into() }], ..Default::default()
    })
    .unwrap();
    assert_eq!(l.events_of_job(1).unwrap()[0].detail, "équipe ünïcode 🚀");
}

fn two_writers_at_once_write_every_version_once(e: &Engine) {
    let loc = e.location(true);
    std::thread::scope(|s| {
        for writer in 0..4 {
            let loc = loc.clone();
            s.spawn(move || {
                let mut l = Ledger::connect(&loc, true).unwrap();
                for i in 0..10 {
                    let toml = format!("{V1}# writer {writer} edit {i}\n");
                    l.sync_budget(&toml, &BudgetTree::parse(&toml).unwrap(), "boss", "b.toml", 100).unwrap();
                    l.record_period(&Period { runs: vec![RunUpdate::Open(run(writer * 100 + i, 0, 1, true))], ..Default::default() }).unwrap();
                }
            });
        }
    });
    let r = e.reader().unwrap();
    let versions: Vec<i64> = r.budget_history().unwrap().iter().map(|v| v.version).collect();
    assert_eq!(versions, (1..=40).rev().collect::<Vec<_>>());
    assert_eq!(r.open_runs().unwrap().len(), 40);
}

/// Two clusters write one ledger: job 1 of each is its own job, each reads
/// its own rows, and the unscoped (lab) reader sums them.
fn two_clusters_share_one_ledger(e: &Engine) {
    let snapshot = |gpus, charged| UsageSnapshot {
        computed_at: 500,
        budget_version: 1,
        capacity_gpus: gpus,
        leaves: vec![LeafUsage { leaf: "a".into(), charged, unallocated: 0, running: 0 }],
    };
    for (cluster, gpus, end) in [("alpha", 8, 200), ("beta", 4, 300)] {
        let mut l = e.writer().for_cluster(Some(cluster)).unwrap();
        l.record_period(&Period {
            runs: vec![RunUpdate::Open(run(1, 100, 2, true)), RunUpdate::Close { job_id: 1, run_start: 100, run_end: end, reason: "completed".into() }],
            contracts: vec![contract(1, 90, 2)],
            demand: vec![DemandRow {
                leaf: "a".into(),
                at: 100,
                pending_allocated: gpus,
                pending_unallocated: 0,
                running_allocated: 0,
                running_unallocated: 0,
            }],
            job_ends: vec![JobEnd { job_id: 1, at: end }],
            snapshot: Some(snapshot(gpus, 100 * i64::from(gpus))),
            ..Default::default()
        })
        .unwrap();
    }
    let alpha = e.reader().unwrap().for_cluster(Some("alpha")).unwrap();
    let beta = e.reader().unwrap().for_cluster(Some("beta")).unwrap();
    assert_eq!(alpha.runs_of_job(1).unwrap()[0].run_end, Some(200));
    assert_eq!(beta.runs_of_job(1).unwrap()[0].run_end, Some(300));
    assert_eq!(beta.charged_by_leaf(0, 1000).unwrap(), vec![("a".to_owned(), 400)]);
    assert_eq!(alpha.usage_snapshot().unwrap().unwrap().capacity_gpus, 8);
    let lab = e.reader().unwrap();
    assert_eq!(lab.clusters().unwrap(), vec!["alpha".to_owned(), "beta".to_owned()]);
    assert_eq!(lab.charged_by_leaf(0, 1000).unwrap(), vec![("a".to_owned(), 600)]);
    let sum = lab.usage_snapshot().unwrap().unwrap();
    assert_eq!((sum.capacity_gpus, sum.leaves[0].charged), (12, 1200));
    assert_eq!(lab.demand_since(0).unwrap().iter().map(|d| d.pending_allocated).collect::<Vec<_>>(), vec![12]);
    assert_eq!(lab.contracts_submitted(0, 1000).unwrap().len(), 2);
    assert!(lab.check().unwrap().is_empty());

    // What each cluster ranks by: its own usage, or with fair_share_usage =
    // "lab" every cluster's (a snapshot older than the window left out).
    let own = BudgetTree::parse(V1).unwrap();
    let lab_wide = BudgetTree::parse(&format!("[cluster]\nfair_share_usage = \"lab\"\nlookback = \"100s\"\n{V1}")).unwrap();
    let ranked = |l: &Ledger, tree: &BudgetTree| l.ranked_usage(tree).unwrap().map(|s| (s.capacity_gpus, s.leaves[0].charged));
    assert_eq!(ranked(&alpha, &own), Some((8, 800)));
    assert_eq!(ranked(&alpha, &lab_wide), Some((12, 1200)));
    assert_eq!(ranked(&beta, &lab_wide), Some((12, 1200)));
    assert_eq!(alpha.usage_of_other_clusters(0).unwrap().map(|s| s.capacity_gpus), Some(4));
    assert_eq!(alpha.usage_of_other_clusters(501).unwrap(), None, "beta's snapshot of t=500 is not fresh at 501");
    let mut beta_writer = e.writer().for_cluster(Some("beta")).unwrap();
    beta_writer.record_period(&Period { snapshot: Some(UsageSnapshot { computed_at: 390, ..snapshot(4, 400) }), ..Default::default() }).unwrap();
    assert_eq!(ranked(&alpha, &lab_wide), Some((8, 800)), "beta's usage computed 110 s before alpha's, past the 100-s window");
    assert_eq!(ranked(&lab, &lab_wide), Some((12, 1200)), "the lab sums every cluster's snapshot");
}

type Case = fn(&Engine);
const CASES: &[(&str, Case)] = &[
    ("a_reader_sees_no_ledger_before_the_first_write", a_reader_sees_no_ledger_before_the_first_write),
    ("budget_versions_are_appended_and_history_is_append_only", budget_versions_are_appended_and_history_is_append_only),
    ("runs_open_close_charge_and_give_way", runs_open_close_charge_and_give_way),
    ("contracts_keep_the_first_submission_and_the_last_end", contracts_keep_the_first_submission_and_the_last_end),
    ("demand_snapshot_events_and_identity", demand_snapshot_events_and_identity),
    ("text_compares_byte_for_byte", text_compares_byte_for_byte),
    ("two_writers_at_once_write_every_version_once", two_writers_at_once_write_every_version_once),
    ("two_clusters_share_one_ledger", two_clusters_share_one_ledger),
];

#[test]
fn every_case_on_a_sqlite_file() {
    for (name, case) in CASES {
        eprintln!("sqlite: {name}");
        case(&Engine::file());
    }
}

/// Writers that open one brand-new SQLite file at the same moment (the
/// plugins and `allot sync` on a fresh controller) all get a ledger: SQLite
/// answers BUSY at once, without its busy handler, to the one that loses the
/// race to switch the file to WAL or to migrate it (CI saw this as "database
/// is locked" about once in 40 runs of the case above).
#[test]
fn writers_opening_a_new_file_at_once_all_get_the_ledger() {
    for round in 0..30 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let start = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    start.wait();
                    let l = Ledger::open(&path).unwrap_or_else(|e| panic!("round {round}: {e:?}"));
                    assert_eq!(l.budget_history().unwrap().len(), 0);
                });
            }
        });
    }
}

#[test]
#[ignore = "needs mariadbd (Debian's mariadb-server); scripts/test.sh installs it and runs this"]
fn every_case_on_a_mariadb_server() {
    let mut server = MariaDb::start();
    for (i, (name, case)) in CASES.iter().enumerate() {
        eprintln!("mariadb: {name}");
        case(&Engine::server(&server, &format!("case{i}")));
    }
    server_only_checks(&server);
    a_schema_3_server_ledger_migrates_and_is_adopted(&server);
    a_server_that_dies_fails_fast_and_is_there_again_after_a_restart(&mut server);
}

/// The server killed under an open connection: every call fails (within
/// the client's timeouts, never hanging), a new connection is refused
/// while it is down, and after its restart everything committed is there.
fn a_server_that_dies_fails_fast_and_is_there_again_after_a_restart(server: &mut MariaDb) {
    let e = Engine::server(server, "restart");
    let mut l = e.writer();
    l.sync_budget(V1, &BudgetTree::parse(V1).unwrap(), "boss", "b.toml", 1).unwrap();
    l.record_period(&Period { runs: vec![RunUpdate::Open(run(1, 10, 2, true))], ..Default::default() }).unwrap();
    server.kill();
    let t = std::time::Instant::now();
    assert!(l.record_period(&Period { runs: vec![RunUpdate::Open(run(2, 20, 2, true))], ..Default::default() }).is_err());
    assert!(l.current_budget_version().is_err());
    let err = Ledger::connect(&e.location(true), true).err().expect("the server is down");
    assert!(matches!(err, LedgerError::Server { .. }), "{err}");
    assert!(t.elapsed() < std::time::Duration::from_secs(10), "failing took {:?}", t.elapsed());
    server.restart();
    let r = e.reader().unwrap();
    assert_eq!(r.current_budget_version().unwrap(), Some(1));
    assert_eq!(r.open_runs().unwrap().iter().map(|r| r.job_id).collect::<Vec<_>>(), vec![1], "the write that failed left nothing");
}

/// A server ledger of one cluster from before schema 4 keeps its history,
/// and the first cluster to write adopts it.
fn a_schema_3_server_ledger_migrates_and_is_adopted(server: &MariaDb) {
    let e = Engine::server(server, "schema3");
    let old = Ledger::create_server_schema_version(&e.location(true), 3).unwrap();
    for sql in [
        "INSERT INTO runs (job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason) VALUES (5, 100, 300, 'a', 'a', 'u', 2, 1, 'completed')",
        "INSERT INTO usage_snapshot (leaf, charged, unallocated) VALUES ('a', 400, 0)",
        "INSERT INTO usage_snapshot_meta (id, computed_at, budget_version, capacity_gpus) VALUES (1, 300, 1, 8)",
        "INSERT INTO events (at, job_id, kind, detail) VALUES (200, 5, 'preempted', 'x')",
    ] {
        old.execute_raw(sql).unwrap();
    }
    drop(old);
    let older = e.reader().err();
    assert!(matches!(older, Some(LedgerError::SchemaMismatch { found: 3, .. })));
    assert!(older.unwrap().to_string().contains("run `allot sync`"));
    let mut alpha = e.writer().for_cluster(Some("alpha")).unwrap();
    assert!(alpha.runs_of_job(5).unwrap().is_empty(), "not adopted yet");
    assert_eq!(alpha.adopt_unclustered().unwrap(), 4);
    assert_eq!(alpha.usage_snapshot().unwrap().unwrap().capacity_gpus, 8);
    assert_eq!(alpha.events_of_job(5).unwrap().len(), 1);
    assert_eq!(alpha.charged_by_leaf(0, 1000).unwrap(), vec![("a".to_owned(), 400)]);
    assert!(alpha.check().unwrap().is_empty());
}

/// What only a server has: accounts, grants, a schema another allot wrote.
fn server_only_checks(server: &MariaDb) {
    let e = Engine::server(server, "serveronly");
    drop(e.writer());
    // The read-only account reads, and its writes are refused by the server.
    let mut r = e.reader().unwrap();
    assert_eq!(r.current_budget_version().unwrap(), None);
    let err = r.sync_budget(V1, &BudgetTree::parse(V1).unwrap(), "boss", "b.toml", 1).unwrap_err();
    assert!(err.to_string().contains("denied"), "{err}");
    // A wrong password: the server's refusal, never the password.
    let Engine::Server { writer, .. } = &e else { unreachable!() };
    let wrong = server.dir().join("wrong.pass");
    std::fs::write(&wrong, "not-it\n").unwrap();
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = writer.replace("writer.pass", "wrong.pass");
    let err = Ledger::connect(&Location::parse(&url).unwrap(), true).err().unwrap().to_string();
    assert!(err.contains("Access denied") && !err.contains("not-it") && !err.contains("w-secret"), "{err}");
    // A writer's password file readable by everyone is refused before connecting.
    let open = server.dir().join("reader.pass");
    let err = Ledger::connect(&Location::parse(&writer.replace("writer.pass", "reader.pass")).unwrap(), true).err().unwrap().to_string();
    assert!(err.contains("readable by every user") && err.contains(&open.display().to_string()), "{err}");
    // A schema from a newer allot is refused, not misread.
    let w = e.writer();
    w.execute_raw("UPDATE allot_schema_version SET version = 99").unwrap();
    let err = Ledger::connect(&e.location(true), true).err().unwrap();
    assert!(matches!(err, LedgerError::SchemaMismatch { found: 99, .. }), "{err}");
    let err = e.reader().err().unwrap();
    assert!(matches!(err, LedgerError::SchemaMismatch { found: 99, .. }), "{err}");
    assert!(err.to_string().contains("a newer allot migrated it: restart slurmctld"), "{err}");
}
