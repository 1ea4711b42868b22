//! Two teams with equal shares, each always wanting the whole cluster: with
//! the anti-thrash margin they do not take turns preempting each other every
//! time a minimum runtime ends; without it they would.
//!
//! A small model driven by the policy core only (occupancy window, ranking,
//! may_preempt): one 8-GPU job of one team runs, the other team's 8-GPU job
//! waits, and every minute the waiting job asks whether it may preempt.

use allot::budget::BudgetTree;
use allot::contract::{Contract, PriorityLevel};
use allot::fairshare::Ranking;
use allot::occupancy::OccupancyWindow;
use allot::preempt::{may_preempt, RunningJob, WaitingJob};

const GPUS: u32 = 8;
const HOUR: i64 = 3600;

fn tree(margin: f64) -> BudgetTree {
    BudgetTree::parse(&format!(
        "[cluster]\ngpus = {GPUS}\nlookback = \"7d\"\npreempt_margin = {margin}\n[budget]\n\
         [budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n"
    ))
    .unwrap()
}

/// Runs `days` of the two-team contest; returns the start times of each tenure.
fn contest(margin: f64, days: i64) -> Vec<i64> {
    let tree = tree(margin);
    let contract = Contract { min_runtime: HOUR, priority: PriorityLevel::Normal };
    let mut window = OccupancyWindow::new(2, tree.settings.lookback, 0);
    let mut usage = Vec::new();
    let (mut running, mut since) = (0u32, 0i64);
    window.change(running, 0, GPUS as i64);
    let mut tenures = vec![0];
    let mut now = 0;
    while now < days * 24 * HOUR {
        now += 60;
        window.usage_all(now, &mut usage);
        let ranking = Ranking::compute(&tree, &usage, GPUS, now);
        let holder = RunningJob { leaf: Some(running), contract, run_start: since };
        let waiter = WaitingJob { leaf: Some(1 - running), contract, gpus: GPUS, queued_since: None };
        if may_preempt(&holder, &waiter, now, &ranking).allowed() {
            window.change(running, now, -(GPUS as i64));
            running = 1 - running;
            window.change(running, now, GPUS as i64);
            since = now;
            tenures.push(now);
        }
    }
    tenures
}

#[test]
fn equal_teams_do_not_ping_pong() {
    let days = 14;
    let tenures = contest(0.1, days);
    // Each allocation is half of 8 GPUs over 7 days: 672 GPU-hours, so the
    // margin of 0.1 is 67.2 GPU-hours. After a swap the new holder is 0.1
    // behind and must get 0.1 ahead: its ratio minus the waiter's moves by
    // at most 16 GPUs / 672 GPU-hours per hour (its own running plus the
    // waiter's old use leaving the window), so a tenure lasts at least
    // 0.2 / (16/672) = 8.4 hours: eight minimum runtimes.
    let lengths: Vec<i64> = tenures.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(!lengths.is_empty(), "the teams never traded places: the waiting team starved");
    let shortest = *lengths.iter().skip(1).min().unwrap_or(&lengths[0]);
    assert!(shortest >= 8 * HOUR, "a tenure lasted {} min: ping-pong", shortest / 60);
    eprintln!("margin 0.1: {} swaps in {days} days, shortest tenure {:.1} h", lengths.len(), shortest as f64 / HOUR as f64);

    // Without the margin the same teams swap as soon as each minimum runtime ends.
    let thrash = contest(0.0, days);
    let thrash_lengths: Vec<i64> = thrash.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(thrash.len() > 10 * tenures.len(), "margin 0: {} swaps, margin 0.1: {}", thrash.len(), tenures.len());
    assert!(thrash_lengths.iter().skip(1).all(|&l| l <= HOUR + 60), "without a margin each tenure is one minimum runtime");
}

#[test]
fn the_margin_does_not_starve_the_waiting_team() {
    // Over two weeks each team holds the cluster about half the time.
    let tenures = contest(0.1, 14);
    let end = 14 * 24 * HOUR;
    let mut held = [0i64; 2];
    for (i, w) in tenures.iter().chain(std::iter::once(&end)).collect::<Vec<_>>().windows(2).enumerate() {
        held[i % 2] += w[1] - w[0];
    }
    let share_a = held[0] as f64 / end as f64;
    assert!((share_a - 0.5).abs() < 0.1, "team a held the cluster {:.0}% of the time", share_a * 100.0);
}
