//! Shared by the lookback study's examples (`lookback_table`, `lookback_probe`):
//! the two budgets of tests/invariants.rs's convergence test, and its
//! workload and measure (from the library).
#![allow(dead_code)]
use allot::budget::BudgetTree;
use allot_sim::{ClusterSpec, Workload};

pub const H: i64 = 3600;
pub const DAY: i64 = 86_400;

pub const FLAT: &str = "[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=2\naccounts=[\"b\"]\n[budget.c]\nshare=3\naccounts=[\"c\"]\n[budget.d]\nshare=4\naccounts=[\"d\"]\n";
pub const TWO_LEVEL: &str = "[budget]\n[budget.x]\nshare=3\n[budget.x.p]\nshare=2\naccounts=[\"p\"]\n[budget.x.q]\nshare=1\naccounts=[\"q\"]\n[budget.y]\nshare=2\n[budget.y.r]\nshare=1\naccounts=[\"r\"]\n[budget.y.s]\nshare=1\naccounts=[\"s\"]\n";

pub use allot_sim::generate::{steady_shaped, Shape};
pub use allot_sim::metrics::delivered_shares;

/// The convergence test's workload: `steady_shaped` with `Shape::steady()`.
pub fn steady(tree: &BudgetTree, cluster: ClusterSpec, days: i64) -> Workload {
    steady_shaped(tree, cluster, days, &Shape::steady())
}

pub fn parse_lookback(s: &str) -> i64 {
    allot::duration::parse_duration(s).unwrap_or_else(|e| panic!("lookback {s}: {e}"))
}
