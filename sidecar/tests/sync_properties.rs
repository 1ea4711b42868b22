//! Random corruptions of a good budget file: each either syncs (it is still
//! valid) or is refused, and a refused one leaves the ledger byte for byte
//! as it was.

use allot_cli::identity::Actor;
use allot_cli::sync::{sync_text, SyncError};
use common::fingerprint;
use proptest::prelude::*;

mod common;

const EXAMPLE: &str = include_str!("../../conf/budgets.toml");

#[derive(Debug, Clone)]
enum Corruption {
    DeleteLine(usize),
    DuplicateLine(usize),
    ZeroNumbers(usize),
    InsertLine(usize, String),
    Truncate(usize),
}

fn corrupt(text: &str, c: &Corruption) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let n = lines.len();
    if n == 0 {
        // An earlier truncation left nothing: only insertion has a place.
        return match c {
            Corruption::InsertLine(_, s) => s.clone(),
            _ => String::new(),
        };
    }
    match c {
        Corruption::DeleteLine(i) => {
            lines.remove(i % n);
        }
        Corruption::DuplicateLine(i) => {
            let l = lines[i % n].clone();
            lines.insert(i % n, l);
        }
        Corruption::ZeroNumbers(i) => {
            let l = &mut lines[i % n];
            *l = l.chars().map(|ch| if ch.is_ascii_digit() { '0' } else { ch }).collect();
        }
        Corruption::InsertLine(i, s) => lines.insert(i % n, s.clone()),
        Corruption::Truncate(i) => return text[..(i % text.len().max(1)).min(text.len())].to_owned(),
    }
    lines.join("\n")
}

fn arb_corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        any::<usize>().prop_map(Corruption::DeleteLine),
        any::<usize>().prop_map(Corruption::DuplicateLine),
        any::<usize>().prop_map(Corruption::ZeroNumbers),
        (
            any::<usize>(),
            prop_oneof![
                Just("share = -1".to_owned()),
                Just("[budget.vision.detection.tracking.x]".to_owned()),
                Just("accounts = [\"rlhf\"]".to_owned()),
                Just("members = [\"mia\"]".to_owned()),
                "[a-z_]{1,8} = [0-9]{1,3}",
                "[\\[\\]=\" a-z.]{1,20}",
            ]
        )
            .prop_map(|(i, s)| Corruption::InsertLine(i, s)),
        any::<usize>().prop_map(Corruption::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn refused_files_leave_the_ledger_unchanged(corruptions in prop::collection::vec(arb_corruption(), 1..4)) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = allot_ledger::Location::File(dir.path().join("ledger.db"));
        let admin = Actor { name: "root".into(), is_admin: true };
        sync_text(&ledger, EXAMPLE, "budgets.toml", &admin, 1).unwrap();
        let before = fingerprint(ledger.file().unwrap());
        let text = corruptions.iter().fold(EXAMPLE.to_owned(), |t, c| corrupt(&t, c));
        match sync_text(&ledger, &text, "bad.toml", &admin, 2) {
            Ok(_) => {}
            Err(SyncError::Invalid { errors, rendered, .. }) => {
                prop_assert!(!errors.0.is_empty());
                prop_assert!(rendered.starts_with("bad.toml"), "{}", rendered);
                prop_assert_eq!(fingerprint(ledger.file().unwrap()), before);
            }
            Err(other) => prop_assert!(false, "unexpected error: {}", other),
        }
    }
}
