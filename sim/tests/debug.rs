//! The debug-under-overload scenario class (docs/src/simulator/debug-overload.md, "Debug jobs
//! under overload"): the shipped preemption rules keep small debug jobs'
//! waits short for every team while training runs at 2.5 to 3 times the
//! cluster, without costing any team its share; and what each mechanism
//! contributes. The full scenario (32x8, 14 days) simulates in well under a
//! second, so the tests run it as documented, over three seeds.

use allot::budget::BudgetTree;
use allot::contract::PriorityLevel;
use allot_sim::check::invariants;
use allot_sim::generate::{debug_scenario, DebugParams};
use allot_sim::{simulate, ClusterSpec, Config, PolicyKind, Report, RunEnd};

const MIN: i64 = 60;

/// Lowest team's delivered/owed over the loaded days with one kept node, on
/// the variants whose teams submit steadily (measured 0.92-0.94 as the
/// lowest of 5 seeds; `bursty`'s late bursts are owed within the window and
/// served after it, 0.58, and `pinned`'s pinned team is owed its demand at
/// once and served as nodes free up).
const LOADED_OWED_FLOOR: f64 = 0.90;

fn run(p: &DebugParams, tweak: impl Fn(&mut Config)) -> Report {
    let s = debug_scenario(p);
    let tree = BudgetTree::parse(&s.budget_toml).unwrap();
    let mut cfg = Config::new(p.cluster, tree, PolicyKind::Allot);
    tweak(&mut cfg);
    let sim = simulate(&s.workload, &cfg, &mut |_| {});
    let broken = invariants(&s.workload, &cfg, &sim);
    assert!(broken.is_empty(), "{broken:#?}");
    sim.report
}

fn debug_p90(r: &Report) -> i64 {
    r.by_kind["debug"].wait_p90_s
}

fn worst_team_debug_p90(r: &Report) -> i64 {
    r.teams.iter().map(|t| t.by_kind["debug"].wait_p90_s).max().unwrap()
}

fn lowest_delivered_over_owed(r: &Report) -> f64 {
    r.teams.iter().filter_map(|t| t.delivered_over_owed).fold(f64::INFINITY, f64::min)
}

fn summary(name: &str, r: &Report) -> String {
    format!(
        "{name}: debug p50 {} p90 {} worst team p90 {}, delivered/owed >= {:.3}, occupancy {:.3}, preemptions {} ({} within team, {} by small jobs), lost {:.0} GPU-h, ping-pongs {}",
        r.by_kind["debug"].wait_p50_s,
        debug_p90(r),
        worst_team_debug_p90(r),
        lowest_delivered_over_owed(r),
        r.occupancy,
        r.preemptions,
        r.preemptions_within_team,
        r.preemptions_by_small_jobs,
        r.gpu_hours_lost_to_preemption,
        r.ping_pongs
    )
}

fn before(c: &mut Config) {
    let s = &mut c.tree.settings;
    s.preempt_within_team = false;
    s.preempt_smallest_first = false;
    s.unallocated_grace = s.grace;
    s.small_job_gpus = 0;
}

/// The shipped rules without small jobs across teams.
fn no_small_jobs(c: &mut Config) {
    c.tree.settings.small_job_gpus = 0;
}

#[test]
fn the_shipped_rules_keep_debug_waits_short_for_every_team() {
    let (mut p90_now, mut p90_three) = (0, 0);
    for variant in ["base", "load3", "unequal", "bursty"] {
        for seed in 1..=3 {
            let p = DebugParams::variant(variant, seed).unwrap();
            let now = run(&p, |_| {});
            let old = run(&p, before);
            let three = run(&p, no_small_jobs);
            let what = format!("{variant} seed {seed}\n  {}\n  {}\n  {}", summary("shipped", &now), summary("no small", &three), summary("before", &old));
            println!("{what}");
            // Debug jobs: a median under a minute, a 90th percentile under
            // 30 minutes (measured 5-24 min) and under 45 minutes for every
            // team (measured 5-44 min); before the mechanisms, p90 57 min
            // (bursty) to 2.4 hours.
            assert!(now.by_kind["debug"].wait_p50_s <= MIN, "{what}");
            assert!(debug_p90(&now) <= 30 * MIN, "{what}");
            assert!(worst_team_debug_p90(&now) <= 45 * MIN, "{what}");
            assert!(debug_p90(&now) * 3 <= debug_p90(&old) * 2, "{what}");
            // Small jobs across teams: a shorter tail than the three other
            // mechanisms alone (over all seeds at least two fifths shorter:
            // measured 45%; per seed 0 to 20 minutes shorter but for
            // unequal seed 1, 4.5 minutes longer: its smallest team, over
            // its share, has its training preempted by other teams' small
            // jobs and restarted inside a new protection, so its own debug
            // jobs find nothing to take; hence within 5 minutes), and every
            // such preemption crossed teams.
            assert!(debug_p90(&now) <= debug_p90(&three) + 5 * MIN, "{what}");
            assert!(now.preemptions_by_small_jobs > 0 && three.preemptions_by_small_jobs == 0, "{what}");
            p90_now += debug_p90(&now);
            p90_three += debug_p90(&three);
            // What it costs: the victims' work since their last checkpoint
            // (measured 0.90 to 1.15 times the loss without it).
            assert!(now.gpu_hours_lost_to_preemption <= 1.25 * three.gpu_hours_lost_to_preemption, "{what}");
            // Nothing else pays for it: shares, occupancy, thrashing.
            assert!(lowest_delivered_over_owed(&now) >= 0.85, "{what}");
            assert!(lowest_delivered_over_owed(&now) >= lowest_delivered_over_owed(&old) - 0.03, "{what}");
            assert!(now.occupancy >= 0.96, "{what}");
            assert!(now.gpu_hours_lost_to_preemption <= 1.6 * old.gpu_hours_lost_to_preemption, "{what}"); // measured 1.01-1.42
            assert!(now.ping_pongs <= old.ping_pongs + 8, "{what}");
            assert!(now.preemptions_within_team > 0 && old.preemptions_within_team == 0, "{what}");
        }
    }
    assert!(p90_now * 5 <= p90_three * 3, "debug p90 summed over the cases: {p90_now} s with small jobs across teams, {p90_three} s without");
}

#[test]
fn a_team_with_nothing_to_preempt_still_gains_and_undeclared_debug_jobs_gain_from_small_jobs() {
    // pinned: one team's training is never past its minimum runtime.
    let p = DebugParams::variant("pinned", 1).unwrap();
    let now = run(&p, |_| {});
    let old = run(&p, before);
    println!("{}\n{}", summary("pinned shipped", &now), summary("pinned before", &old));
    assert!(debug_p90(&now) <= 45 * MIN && debug_p90(&now) * 3 <= debug_p90(&old));
    // Undeclared: debug jobs at normal priority never preempt teammates;
    // the unallocated grace helps their median, and small jobs across
    // teams their tail (without: p90 above an hour, 2.8 h measured).
    let p = DebugParams::variant("undeclared", 1).unwrap();
    let now = run(&p, |_| {});
    let three = run(&p, no_small_jobs);
    let what = format!("{}\n{}", summary("undeclared", &now), summary("undeclared, no small jobs", &three));
    assert_eq!(now.preemptions_within_team, 0, "{what}");
    assert!(now.by_kind["debug"].wait_p50_s <= 2 * MIN, "{what}");
    assert!(debug_p90(&three) >= 60 * MIN, "{what}");
    assert!(debug_p90(&now) <= 30 * MIN && now.preemptions_by_small_jobs > 0, "{what}");
}

/// Preemption within a team (rule 5) changes nothing where it cannot take
/// anything: where no job declares a priority, with the rule on or off, the
/// same jobs start and are preempted at the same moments. (Before, the
/// engine counted searches that only rule 5 could have made succeed
/// toward its per-pass bound, and read a smaller teammate's failure more
/// narrowly: on the undeclared variant, seed 1, 2,443 preemptions with the
/// rule on and 2,241 with it off, debug p90 20.6 minutes against 11.9.)
#[test]
fn rule_5_with_nothing_to_take_changes_nothing() {
    for seed in 1..=3 {
        let p = DebugParams::variant("undeclared", seed).unwrap();
        let unclocked = |mut r: Report| {
            r.sim_seconds = None;
            r.simulated_days_per_second = None;
            r
        };
        let on = unclocked(run(&p, |c| c.tree.settings.preempt_within_team = true));
        let off = unclocked(run(&p, |c| c.tree.settings.preempt_within_team = false));
        assert_eq!(on.preemptions_within_team, 0, "seed {seed}");
        assert!(on.preemptions > 1000, "seed {seed}: {}", summary("on", &on));
        assert!(on == off, "seed {seed}\n{}\n{}", summary("rule 5 on", &on), summary("rule 5 off", &off));
    }
}

/// One node of 32 kept for small and unallocated jobs (a Slurm partition;
/// allot.conf's `SmallJobPartition`) meets the goal on every variant: every
/// team's debug p90 within a minute (measured 26-27 s: the next backfill
/// pass), at no cost in occupancy, share or lost work, since free fillers
/// keep the node busy and debug jobs take their GPUs at once.
#[test]
fn one_small_job_node_starts_every_teams_debug_jobs_within_30_seconds() {
    for v in ["base", "load3", "unequal", "bursty", "pinned", "undeclared"] {
        for seed in 1..=2 {
            let p = DebugParams::variant(v, seed).unwrap();
            let kept = run(&p, |c| c.small_job_nodes = 1);
            let shipped = run(&p, |_| {});
            let what = format!("{v} seed {seed}\n{}\n{}", summary("1 small-job node", &kept), summary("shipped", &shipped));
            // The seed's stretch goal: 30 s (measured 8-9 s with the shipped
            // scheduler reach, a backfill pass every 10 s).
            assert!(worst_team_debug_p90(&kept) <= 30, "{what}");
            assert!(kept.by_kind["debug"].wait_p99_s <= 2 * MIN, "{what}");
            assert!(worst_team_debug_p90(&shipped) > 5 * MIN, "{what}"); // what the node is for
            assert!(kept.occupancy >= shipped.occupancy - 0.005 && kept.occupancy >= 0.96, "{what}");
            assert!(lowest_delivered_over_owed(&kept) >= lowest_delivered_over_owed(&shipped) - 0.03, "{what}");
            assert!(kept.gpu_hours_lost_to_preemption <= shipped.gpu_hours_lost_to_preemption, "{what}");
            assert!(kept.ping_pongs <= shipped.ping_pongs + 8, "{what}");
            // Over the 14 loaded days alone (the whole run adds the drain of
            // a finite workload), every team within a few points of owed.
            let loaded = run(&p, |c| {
                c.small_job_nodes = 1;
                c.horizon = Some((p.days * 86_400.0) as i64);
            });
            if !["pinned", "bursty"].contains(&v) {
                assert!(lowest_delivered_over_owed(&loaded) >= LOADED_OWED_FLOOR, "{v} seed {seed}: {}", summary("1 small-job node, loaded days", &loaded));
            }
        }
    }
    // Slurm's own plugins with the same node: debug jobs wait out the
    // fillers' grace time (allot takes an unallocated job's GPUs at once).
    let p = DebugParams::variant("base", 1).unwrap();
    let s = debug_scenario(&p);
    let mut cfg = Config::new(p.cluster, BudgetTree::parse(&s.budget_toml).unwrap(), PolicyKind::Baseline);
    cfg.small_job_nodes = 1;
    let sim = simulate(&s.workload, &cfg, &mut |_| {});
    assert!(invariants(&s.workload, &cfg, &sim).is_empty());
    let kept = run(&p, |c| c.small_job_nodes = 1);
    assert!(debug_p90(&sim.report) > 2 * debug_p90(&kept), "{}\n{}", summary("baseline + node", &sim.report), summary("allot + node", &kept));
}

#[test]
fn a_lookahead_evens_out_what_teams_hold_by_the_hour_at_no_cost_to_debug_jobs() {
    // The budget's lookahead (4h): a team's running GPUs count as used 4
    // hours more in its standing, so the team that just took the freed GPUs
    // stops ranking first at once. Smoothness: the share of the hours a
    // team wanted its share and held less than half of it.
    for v in ["base", "load3", "unequal"] {
        for seed in 1..=2 {
            let p = DebugParams::variant(v, seed).unwrap();
            let without = run(&p, |c| c.small_job_nodes = 1);
            let with = run(&p, |c| {
                c.small_job_nodes = 1;
                c.tree.settings.lookahead = 4 * 3600;
            });
            let what = format!(
                "{v} seed {seed}: below half share {:.3} -> {:.3}\n{}\n{}",
                without.worst_team_hours_below_half_share,
                with.worst_team_hours_below_half_share,
                summary("1 small-job node", &without),
                summary("+ lookahead 4h", &with)
            );
            // Equal teams: at least a third fewer such hours (measured about
            // half); unequal shares, where a small team's share is one job of
            // its training, fewer.
            let cut = if v == "unequal" { 0.95 } else { 0.67 };
            assert!(with.worst_team_hours_below_half_share <= cut * without.worst_team_hours_below_half_share, "{what}");
            assert!(worst_team_debug_p90(&with) <= MIN, "{what}");
            assert!(lowest_delivered_over_owed(&with) >= lowest_delivered_over_owed(&without) - 0.02, "{what}");
            assert!(with.occupancy >= without.occupancy - 0.005, "{what}");
            assert!(with.gpu_hours_lost_to_preemption <= without.gpu_hours_lost_to_preemption, "{what}");
        }
    }
}

#[test]
fn every_preemption_within_a_team_follows_rule_5() {
    let p = DebugParams { cluster: ClusterSpec { nodes: 12, gpus_per_node: 8 }, days: 5.0, debug_per_team: 150, fillers_per_team: 40, ..DebugParams::base(4) };
    let s = debug_scenario(&p);
    let tree = BudgetTree::parse(&s.budget_toml).unwrap();
    let mut cfg = Config::new(p.cluster, tree, PolicyKind::Allot);
    // Every shortcut of the engine checked against the policy core at every pass.
    cfg.check_policy = true;
    let sim = simulate(&s.workload, &cfg, &mut |_| {});
    assert!(invariants(&s.workload, &cfg, &sim).is_empty());
    let prepared = &sim.outcome.prepared;
    let mut within = 0;
    for r in &sim.outcome.runs {
        let (RunEnd::Preempted { signal }, Some(by)) = (r.ended, r.preempted_by) else { continue };
        let (victim, preemptor) = (prepared.contract[r.job as usize], prepared.contract[by as usize]);
        if victim.is_allocated() && prepared.leaf[r.job as usize] == prepared.leaf[by as usize] {
            within += 1;
            assert!(preemptor.priority > victim.priority && preemptor.min_runtime <= victim.min_runtime);
            assert!(signal >= r.start + victim.min_runtime);
            assert_eq!(preemptor.priority, PriorityLevel::High);
        }
    }
    assert!(within > 0);
    assert_eq!(within, sim.report.preemptions_within_team);
}

#[test]
fn the_generator_makes_the_documented_class() {
    let p = DebugParams::base(1);
    let s = debug_scenario(&p);
    let w = &s.workload;
    assert_eq!(debug_scenario(&p).workload, s.workload);
    let kind = |j: &allot_sim::Job| w.kinds[j.kind as usize].as_str();
    let count = |k: &str| w.jobs.iter().filter(|j| kind(j) == k).count();
    assert_eq!((count("debug"), count("filler")), (6 * 300, 6 * 100));
    let training: Vec<_> = w.jobs.iter().filter(|j| kind(j) == "training").collect();
    assert!(training.iter().all(|j| (16..=64).contains(&j.gpus) && j.gpus % 8 == 0 && j.resumable));
    assert!(training.iter().all(|j| (4 * 3600..=24 * 3600).contains(&j.runtime) && (2 * 3600..=8 * 3600).contains(&j.min_runtime.unwrap())));
    let wanted: f64 = training.iter().map(|j| j.gpus as f64 * j.runtime as f64).sum();
    let load = wanted / (256.0 * 14.0 * 86_400.0);
    assert!((2.2..2.8).contains(&load), "training load {load}");
    assert!(w.jobs.iter().filter(|j| kind(j) == "debug").all(|j| j.gpus <= 2 && j.min_runtime == Some(600) && j.priority == PriorityLevel::High));
    assert!(w.jobs.iter().filter(|j| kind(j) == "filler").all(|j| j.min_runtime == Some(0)));
    for v in allot_sim::generate::DEBUG_VARIANTS {
        assert!(DebugParams::variant(v, 1).is_some());
    }
}

/// Where training jobs are a node or two (`narrow`: 8-16 GPUs, at most 3/8
/// of a team's share), the shipped layout with the budget's `lookahead` at
/// 8 hours gives every goal of the seed at once: every team's debug p90
/// within 30 s, every team at 95% of what it was owed over the whole run
/// and the loaded days, occupancy at least 98%, and fewer than 5% of the
/// hours a team wanted its share spent below half of it (measured 0-2.4%,
/// 41-50% without the lookahead).
#[test]
fn with_small_training_jobs_and_a_lookahead_the_shipped_layout_meets_every_goal() {
    for seed in 1..=3 {
        let p = DebugParams::variant("narrow", seed).unwrap();
        let kept = |lookahead: i64, horizon: Option<i64>| {
            run(&p, move |c| {
                c.small_job_nodes = 1;
                c.tree.settings.lookahead = lookahead;
                c.horizon = horizon;
            })
        };
        let with = kept(8 * 3600, None);
        let loaded = kept(8 * 3600, Some((p.days * 86_400.0) as i64));
        let without = kept(0, None);
        let what = format!(
            "narrow seed {seed}: below half share {:.3} (without lookahead {:.3})\n{}\n{}",
            with.worst_team_hours_below_half_share,
            without.worst_team_hours_below_half_share,
            summary("1 node kept, lookahead 8h", &with),
            summary("the same, loaded days", &loaded)
        );
        assert!(worst_team_debug_p90(&with) <= 30, "{what}");
        assert!(lowest_delivered_over_owed(&with) >= 0.95, "{what}");
        assert!(lowest_delivered_over_owed(&loaded) >= 0.95, "{what}");
        assert!(with.occupancy >= 0.98, "{what}");
        assert!(with.worst_team_hours_below_half_share < 0.05, "{what}");
        assert!(without.worst_team_hours_below_half_share > 0.3, "{what}"); // what the lookahead is for
    }
}

fn lowest_delivered_over_owed_allocated_first(r: &Report) -> f64 {
    r.teams.iter().filter_map(|t| t.delivered_over_owed_allocated_first).fold(f64::INFINITY, f64::min)
}

/// Owed as the contract owes it (allocated work first, free work only what
/// is left) takes out what the report's owed blames on free work: the
/// pinned team's run-long shortfall and the loaded days in which a bursty
/// team had only free fillers (docs/src/simulator/debug-overload.md, "Owed
/// by the contract"). Delivered is the same in both counts.
#[test]
fn owed_allocated_first_does_not_count_free_work_as_owed_like_allocated_work() {
    for seed in 1..=2 {
        let kept = |c: &mut Config| c.small_job_nodes = 1;
        let pinned = run(&DebugParams::variant("pinned", seed).unwrap(), kept);
        let (today, first) = (lowest_delivered_over_owed(&pinned), lowest_delivered_over_owed_allocated_first(&pinned));
        assert!(today < 0.65 && first >= 0.90, "pinned seed {seed}: lowest {today:.3} as today, {first:.3} allocated first");
        let p = DebugParams::variant("bursty", seed).unwrap();
        let loaded = run(&p, |c| {
            c.small_job_nodes = 1;
            c.horizon = Some((p.days * 86_400.0) as i64);
        });
        let (today, first) = (lowest_delivered_over_owed(&loaded), lowest_delivered_over_owed_allocated_first(&loaded));
        assert!(today < 0.70 && first >= 0.80, "bursty seed {seed}, loaded days: lowest {today:.3} as today, {first:.3} allocated first");
        for r in [&pinned, &loaded] {
            // The two counts share out the same GPU-hours each hour (the
            // cluster's, or all that was wanted), only among other claims.
            let total = |f: fn(&allot_sim::metrics::TeamStats) -> f64| r.teams.iter().map(f).sum::<f64>();
            let (a, b) = (total(|t| t.owed_gpu_hours), total(|t| t.owed_allocated_first_gpu_hours));
            assert!((a - b).abs() <= 1e-6 * a.max(1.0) + 0.01 * r.teams.len() as f64, "seed {seed}: owed {a} as today, {b} allocated first");
        }
    }
}
