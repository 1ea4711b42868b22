//! The budget file parser (`allot::budget::BudgetTree::parse`).
//!
//! Properties of an accepted tree: the root is node 0 with effective share 1;
//! every child's effective share is its parent's times its normalized share
//! and the leaves' effective shares sum to 1; every leaf has an account, each
//! account maps back to its leaf and each path to its node; the settings
//! validate. A refused file has at least one error, and rendering them works.
#![no_main]

use allot::budget::BudgetTree;
use libfuzzer_sys::fuzz_target;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let tree = match BudgetTree::parse(&text) {
        Ok(tree) => tree,
        Err(errors) => {
            assert!(!errors.0.is_empty(), "refused without a reason");
            let shown = errors.render("budgets.toml");
            assert!(shown.contains("budgets.toml"), "{shown}");
            return;
        }
    };
    assert!(tree.settings.validate().is_ok(), "{:?}", tree.settings);
    assert_eq!(tree.root().effective_share, 1.0);
    assert!(!tree.leaves.is_empty());
    for (id, node) in tree.nodes.iter().enumerate() {
        assert_eq!(tree.find(&node.path), Some(id as u32), "path {:?}", node.path);
        if !node.children.is_empty() {
            // share / sum of the siblings' shares, each scaled by the largest
            // first so that the sum stays finite.
            let largest = node.children.iter().map(|&c| tree.node(c).share).fold(0.0, f64::max);
            let total: f64 = node.children.iter().map(|&c| tree.node(c).share / largest).sum();
            for &c in &node.children {
                let child = tree.node(c);
                assert!(child.share.is_finite() && child.share > 0.0);
                let normalized = child.share / largest / total;
                assert!(close(child.effective_share, node.effective_share * normalized), "{}", child.path);
            }
        }
    }
    let sum: f64 = tree.leaves.iter().map(|&l| tree.node(l).effective_share).sum();
    assert!((sum - 1.0).abs() < 1e-9, "leaf shares sum to {sum}");
    for (leaf, &node_id) in tree.leaves.iter().enumerate() {
        let node = tree.node(node_id);
        assert!(node.is_leaf());
        assert_eq!(node.leaf, Some(leaf as u32));
        assert!(!node.accounts.is_empty(), "leaf {} has no account", node.path);
        for account in &node.accounts {
            assert_eq!(tree.leaf_of_account(account), Some(leaf as u32), "account {account}");
        }
    }
    // The tree is its own reference: no changes against itself.
    assert!(tree.diff(&tree).is_empty());
});
