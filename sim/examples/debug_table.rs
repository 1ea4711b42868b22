//! The debug-under-overload table of docs/src/simulator/debug-overload.md: every variant of the
//! scenario under each preemption mechanism, and the baseline.
//!
//! ```sh
//! cargo run --release -p allot-sim --example debug_table [-- SEED [VARIANT...]]
//! ```
use allot::budget::BudgetTree;
use allot_sim::generate::{debug_scenario, DebugParams, DEBUG_VARIANTS};
use allot_sim::metrics::{human, Report};
use allot_sim::{simulate, Config, PolicyKind};

type Tweak = fn(&mut Config);

/// A mechanism: its name and what it changes from the shipped defaults.
struct Mechanism {
    name: &'static str,
    apply: fn(&mut Config),
}

fn mechanisms() -> Vec<Mechanism> {
    fn before(c: &mut Config) {
        let s = &mut c.tree.settings;
        s.preempt_within_team = false;
        s.preempt_smallest_first = false;
        s.unallocated_grace = s.grace;
        s.small_job_gpus = 0;
    }
    /// The first three mechanisms of the debug-overload page, without small jobs across teams.
    fn three(c: &mut Config) {
        c.tree.settings.small_job_gpus = 0;
    }
    vec![
        Mechanism { name: "allot before (none of the below)", apply: before },
        Mechanism {
            name: "+ within team",
            apply: |c| {
                before(c);
                c.tree.settings.preempt_within_team = true;
            },
        },
        Mechanism {
            name: "+ within team + smallest first",
            apply: |c| {
                before(c);
                c.tree.settings.preempt_within_team = true;
                c.tree.settings.preempt_smallest_first = true;
            },
        },
        Mechanism {
            name: "+ within team + unallocated grace 0",
            apply: |c| {
                before(c);
                c.tree.settings.preempt_within_team = true;
                c.tree.settings.unallocated_grace = 0;
            },
        },
        Mechanism { name: "+ within team + smallest first + unallocated grace 0", apply: three },
        Mechanism {
            name: "+ small jobs across teams (8 GPUs, 30m)",
            apply: |c| {
                before(c);
                let d = allot::budget::ClusterSettings::default();
                c.tree.settings.small_job_gpus = d.small_job_gpus;
            },
        },
        Mechanism { name: "shipped: all four", apply: |_| {} },
        Mechanism {
            name: "shipped, small jobs 2 GPUs 15m",
            apply: |c| {
                c.tree.settings.small_job_gpus = 2;
                c.tree.settings.small_job_min_runtime = 15 * 60;
            },
        },
        Mechanism { name: "shipped, bf_max_job_test 5000", apply: |c| c.bf_max_job_test = 5000 },
        Mechanism { name: "shipped, Slurm's default reach (500 / 100 / 30 s)", apply: |c| c.set_reach(allot_sim::Reach::SLURM_DEFAULTS) },
        Mechanism {
            name: "shipped + 1 small-job node, Slurm's default reach",
            apply: |c| {
                c.small_job_nodes = 1;
                c.set_reach(allot_sim::Reach::SLURM_DEFAULTS);
            },
        },
        Mechanism { name: "shipped, checkpoint in grace", apply: |c| c.checkpoint_interval = 0 },
        Mechanism { name: "shipped, margin 0.05", apply: |c| c.tree.settings.preempt_margin = 0.05 },
        Mechanism { name: "shipped, margin 0.02", apply: |c| c.tree.settings.preempt_margin = 0.02 },
        Mechanism { name: "shipped + 1 small-job node", apply: |c| c.small_job_nodes = 1 },
        Mechanism { name: "shipped + 2 small-job nodes", apply: |c| c.small_job_nodes = 2 },
        Mechanism { name: "within team off, rest shipped", apply: |c| c.tree.settings.preempt_within_team = false },
        Mechanism {
            name: "shipped + 1 small-job node + large_job_wait 1d",
            apply: |c| {
                c.small_job_nodes = 1;
                c.tree.settings.large_job_wait = 86_400;
            },
        },
        Mechanism {
            name: "shipped + 1 small-job node + large_job_wait 6h",
            apply: |c| {
                c.small_job_nodes = 1;
                c.tree.settings.large_job_wait = 6 * 3600;
            },
        },
    ]
}

fn debug_of(r: &Report) -> (i64, i64, i64, i64) {
    let d = &r.by_kind["debug"];
    let worst = r.teams.iter().filter_map(|t| t.by_kind.get("debug")).map(|k| k.wait_p90_s).max().unwrap_or(0);
    (d.wait_p50_s, d.wait_p90_s, d.wait_p99_s, worst)
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// The lowest and highest team's delivered/owed of any seed's report.
fn owed_range(rs: &[Report]) -> (f64, f64) {
    let ratios: Vec<f64> = rs.iter().flat_map(|r| r.teams.iter().filter_map(|t| t.delivered_over_owed)).collect();
    (ratios.iter().copied().fold(f64::INFINITY, f64::min), ratios.iter().copied().fold(0.0, f64::max))
}

/// One row: medians over the seeds' reports (delivered/owed: the lowest
/// and highest team of any seed, over the whole run and over the loaded
/// days alone, from `loaded`: the same runs stopped when submissions end;
/// ping-pongs: the total).
fn row(variant: &str, name: &str, rs: &[Report], loaded: &[Report]) -> String {
    let d: Vec<(i64, i64, i64, i64)> = rs.iter().map(debug_of).collect();
    let (lo, hi) = owed_range(rs);
    let (llo, lhi) = owed_range(loaded);
    format!(
        "| {variant} | {name} | {} / {} / {} | {} | {:.0}-{:.0}% | {:.0}-{:.0}% | {:.1}% | {} ({} within team, {} by small jobs across teams, {} unallocated) | {:.0} | {} |",
        human(median(d.iter().map(|x| x.0).collect())),
        human(median(d.iter().map(|x| x.1).collect())),
        human(median(d.iter().map(|x| x.2).collect())),
        human(median(d.iter().map(|x| x.3).collect())),
        100.0 * lo,
        100.0 * hi,
        100.0 * llo,
        100.0 * lhi,
        100.0 * median(rs.iter().map(|r| r.occupancy).collect()),
        median(rs.iter().map(|r| r.preemptions).collect()),
        median(rs.iter().map(|r| r.preemptions_within_team).collect()),
        median(rs.iter().map(|r| r.preemptions_by_small_jobs).collect()),
        median(rs.iter().map(|r| r.preemptions_of_unallocated).collect()),
        median(rs.iter().map(|r| r.gpu_hours_lost_to_preemption).collect()),
        rs.iter().map(|r| r.ping_pongs).sum::<usize>()
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // SEEDS: one seed, or a range `1-5` (rows then give medians over the seeds).
    let seeds: Vec<u64> = match args.first().map(|s| s.split_once('-')) {
        Some(Some((a, b))) => (a.parse().expect("seed")..=b.parse().expect("seed")).collect(),
        Some(None) => vec![args[0].parse().expect("seed")],
        None => vec![1],
    };
    let variants: Vec<&str> = if args.len() > 1 { args[1..].iter().map(String::as_str).collect() } else { DEBUG_VARIANTS.to_vec() };
    println!("| variant | mechanism | debug wait p50 / p90 / p99 | worst team's debug p90 | delivered/owed (all teams, whole run) | delivered/owed (loaded days) | occupancy | preemptions | GPU-h lost | ping-pongs |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for v in variants {
        let cases: Vec<_> = seeds
            .iter()
            .map(|&seed| {
                let p = DebugParams::variant(v, seed).unwrap_or_else(|| panic!("unknown variant {v}"));
                let s = debug_scenario(&p);
                let tree = BudgetTree::parse(&s.budget_toml).expect("generated budget");
                (p, s, tree)
            })
            .collect();
        let mut all: Vec<(&str, PolicyKind, Tweak)> = mechanisms().iter().map(|m| (m.name, PolicyKind::Allot, m.apply)).collect();
        all.push(("baseline", PolicyKind::Baseline, |_| {}));
        // Slurm's own answer: a debug partition, without allot's rules.
        all.push(("baseline + 1 small-job node", PolicyKind::Baseline, |c| c.small_job_nodes = 1));
        let only: Option<Vec<String>> = std::env::var("DEBUG_TABLE_ONLY").ok().map(|v| v.split(';').map(str::to_owned).collect());
        for (name, policy, apply) in all {
            if only.as_ref().is_some_and(|o| !o.iter().any(|x| x == name)) {
                continue;
            }
            let run = |loaded_only: bool| -> Vec<Report> {
                cases
                    .iter()
                    .map(|(p, s, tree)| {
                        let mut cfg = Config::new(p.cluster, tree.clone(), policy);
                        apply(&mut cfg);
                        if loaded_only {
                            // Stop when the submissions stop: a sustained load, not the drain of a finite one.
                            cfg.horizon = Some(s.workload.span().0 + (p.days * 86_400.0).round() as i64);
                        }
                        simulate(&s.workload, &cfg, &mut |_| {}).report
                    })
                    .collect()
            };
            println!("{}", row(v, name, &run(false), &run(true)));
        }
    }
}
