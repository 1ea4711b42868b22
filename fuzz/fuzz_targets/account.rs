//! Account mapping (`BudgetTree::leaf_for_job`, `leaf_of_account`) on a fixed
//! small valid tree, with fuzzed user and account names. The input is split
//! at its first 0xff byte into user and account (no 0xff: no account); both
//! are turned into strings lossily, as the plugins do with Slurm's C strings.
//!
//! Properties: a job is mapped only to a leaf its user may charge; a named
//! account maps exactly to `leaf_of_account`'s leaf, case-insensitively and
//! regardless of surrounding spaces; an empty or blank account means the
//! user's default leaf; a refusal names the user or the account and lists
//! only leaves the user may charge.
#![no_main]

use std::sync::OnceLock;

use allot::budget::{BudgetTree, LeafRefusal};
use libfuzzer_sys::fuzz_target;

const TREE: &str = r#"
[default_leaf]
mia = "vision/tracking"

[budget]
owners = ["director"]

[budget.vision]
share = 3
owners = ["vera"]

[budget.vision.tracking]
share = 1
accounts = ["tracking", "Track2"]
members = ["tomas", "mia"]

[budget.vision.segment]
share = 2
accounts = ["segment"]
members = ["mia", "ömer"]

[budget.shared]
share = 1
accounts = ["shared"]
members = ["*"]
"#;

fn tree() -> &'static BudgetTree {
    static TREE_CELL: OnceLock<BudgetTree> = OnceLock::new();
    TREE_CELL.get_or_init(|| BudgetTree::parse(TREE).unwrap_or_else(|e| panic!("{}", e.render("fuzz tree"))))
}

fuzz_target!(|data: &[u8]| {
    let t = tree();
    let (user, account) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (String::from_utf8_lossy(&data[..i]), Some(String::from_utf8_lossy(&data[i + 1..]))),
        None => (String::from_utf8_lossy(data), None),
    };
    let result = t.leaf_for_job(&user, account.as_deref());
    let allowed: Vec<String> = t.leaves_of(&user).iter().map(|&l| t.leaf_node(l).accounts[0].clone()).collect();
    // Everyone may charge the open leaf.
    assert!(allowed.iter().any(|a| a == "shared"));
    match &result {
        Ok(leaf) => assert!(t.may_charge(&user, *leaf), "{user:?} mapped to a leaf they may not charge"),
        Err(LeafRefusal::UnknownAccount { allowed: a, .. } | LeafRefusal::NotMember { allowed: a, .. } | LeafRefusal::NoDefault { allowed: a, .. }) => {
            assert_eq!(a, &allowed);
            assert!(!result.as_ref().unwrap_err().to_string().is_empty());
        }
    }
    match account.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        Some(acct) => {
            let by_account = t.leaf_of_account(acct);
            match (&result, by_account) {
                (Ok(leaf), Some(l)) => assert_eq!(*leaf, l),
                (Err(LeafRefusal::NotMember { user: u, .. }), Some(l)) => {
                    assert_eq!(u, &*user);
                    assert!(!t.may_charge(&user, l));
                }
                (Err(LeafRefusal::UnknownAccount { account: a, .. }), None) => assert_eq!(a, &acct.to_lowercase()),
                (r, l) => panic!("account {acct:?}: leaf_for_job {r:?} but leaf_of_account {l:?}"),
            }
            assert_eq!(t.leaf_of_account(&acct.to_ascii_uppercase()), by_account, "case matters for {acct:?}");
            assert_eq!(t.leaf_for_job(&user, Some(&format!("  {acct}\t"))), result);
        }
        None => {
            assert_eq!(result, t.default_leaf(&user).ok_or_else(|| LeafRefusal::NoDefault { user: user.to_string(), allowed: allowed.clone() }));
            assert_eq!(t.leaf_for_job(&user, None), result);
            assert_eq!(t.leaf_for_job(&user, Some(" ")), result);
        }
    }
    // Only the default_leaf entry, the single-membership rule and the open leaf decide.
    if let Ok(leaf) = t.leaf_for_job(&user, None) {
        let path = &t.leaf_node(leaf).path;
        match &*user {
            "mia" | "tomas" => assert_eq!(path, "vision/tracking"),
            "ömer" => assert_eq!(path, "vision/segment"),
            _ => assert_eq!(path, "shared"),
        }
    }
});
