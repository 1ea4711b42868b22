//! From a workload and a budget to what the engine needs per job: its leaf,
//! its contract as `job_submit/allot` would accept it, the GPUs it holds, or
//! why it is refused.

use std::collections::HashMap;

use allot::budget::{BudgetTree, LeafRefusal};
use allot::contract::{parse_comment, Contract, ContractRules, PriorityLevel};
use allot::duration::format_duration;

use crate::cluster::ClusterSpec;
use crate::workload::Workload;

/// Per job, by index into [`Workload::jobs`].
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The budget leaf the job charges (`None`: refused).
    pub leaf: Vec<Option<u32>>,
    pub contract: Vec<Contract>,
    /// GPUs held while running (whole nodes for jobs larger than a node).
    pub held: Vec<u32>,
    /// Why the job never enters the queue.
    pub refused: Vec<Option<String>>,
    /// The same, by kind of reason (for [`Prepared::refusals`]).
    pub refusal: Vec<Option<Refusal>>,
    /// Jobs whose declared minimum runtime exceeded the cap and were run
    /// with the cap instead (job_submit would refuse them; we assume their
    /// users resubmit with the largest allowed value).
    pub clamped_to_cap: u32,
}

/// Why a job is refused before it is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// No budget leaf charges its team (the account).
    UnknownTeam,
    /// It wants more GPUs than the cluster has.
    LargerThanCluster,
    /// It wants more GPUs than the nodes not kept for small jobs have, and may not use those.
    LargerThanOpenNodes,
    /// Its declared contract is one job_submit refuses.
    Contract,
}

/// The jobs refused at preparation, by reason: what a run says about them
/// before it simulates (see [`Prepared::refusals`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusals {
    /// Jobs in the workload.
    pub jobs: usize,
    /// Of them, refused.
    pub refused: usize,
    /// One per reason that refused any job, in [`Refusal`] order.
    pub groups: Vec<RefusalGroup>,
}

/// The jobs refused for one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalGroup {
    pub why: Refusal,
    /// How many.
    pub jobs: usize,
    /// The first few (in submit order), by job id.
    pub first: Vec<u32>,
    /// The reason in words, with what the jobs have in common
    /// (`2 jobs of teams no budget leaf charges: zz (2 jobs); ...`).
    pub text: String,
}

/// Job ids shown per reason.
const FIRST_SHOWN: usize = 5;

impl Refusals {
    /// Every job of the workload is refused: there is nothing to simulate.
    pub fn all(&self) -> bool {
        self.jobs > 0 && self.refused == self.jobs
    }

    /// One line per reason: the reason, then the first job ids.
    pub fn lines(&self) -> Vec<String> {
        self.groups
            .iter()
            .map(|g| {
                let ids: Vec<String> = g.first.iter().map(u32::to_string).collect();
                let more = if g.jobs > g.first.len() { format!(" and {} more", g.jobs - g.first.len()) } else { String::new() };
                let noun = if g.first.len() == 1 { "job" } else { "jobs" };
                format!("{}; {noun} {}{more}", g.text, ids.join(", "))
            })
            .collect()
    }
}

/// `1 job`, `2 jobs`.
fn jobs(n: usize) -> String {
    if n == 1 {
        "1 job".to_owned()
    } else {
        format!("{n} jobs")
    }
}

/// At most `shown` items, then `and N more`.
fn some_of(items: &[String], shown: usize) -> String {
    let mut out = items.iter().take(shown).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > shown {
        out.push_str(&format!(" and {} more", items.len() - shown));
    }
    out
}

impl Prepared {
    /// The jobs refused at preparation, counted by reason, with the first
    /// few of each and what they have in common (their teams, the largest
    /// size, the contract's error).
    pub fn refusals(&self, workload: &Workload, tree: &BudgetTree, cluster: ClusterSpec, small_job_nodes: u32) -> Refusals {
        let mut by_why: std::collections::BTreeMap<Refusal, Vec<usize>> = std::collections::BTreeMap::new();
        for (i, why) in self.refusal.iter().enumerate() {
            if let Some(why) = why {
                by_why.entry(*why).or_default().push(i);
            }
        }
        let groups = by_why
            .into_iter()
            .map(|(why, idx)| {
                let n = idx.len();
                let text = match why {
                    Refusal::UnknownTeam => {
                        let mut per_team: Vec<(u32, usize)> = Vec::new();
                        for &i in &idx {
                            let team = workload.jobs[i].team;
                            match per_team.iter_mut().find(|(t, _)| *t == team) {
                                Some((_, c)) => *c += 1,
                                None => per_team.push((team, 1)),
                            }
                        }
                        per_team.sort_by_key(|&(t, c)| (std::cmp::Reverse(c), t));
                        let teams: Vec<String> = per_team.iter().map(|&(t, c)| format!("'{}' ({})", workload.teams[t as usize], jobs(c))).collect();
                        let accounts: Vec<String> = tree.leaves.iter().flat_map(|&l| tree.node(l).accounts.iter().map(|a| format!("'{a}'"))).collect();
                        format!(
                            "{} of {} no budget leaf charges: {}; the budget's accounts are {}",
                            jobs(n),
                            if per_team.len() == 1 { "a team" } else { "teams" },
                            some_of(&teams, 5),
                            some_of(&accounts, 10)
                        )
                    }
                    Refusal::LargerThanCluster => {
                        let largest = idx.iter().map(|&i| workload.jobs[i].gpus).max().unwrap_or(0);
                        format!("{} larger than the cluster's {} GPUs (the largest wants {largest})", jobs(n), cluster.capacity())
                    }
                    Refusal::LargerThanOpenNodes => format!(
                        "{} larger than the {} GPUs outside the {small_job_nodes} node(s) kept for small jobs, which they may not use",
                        jobs(n),
                        cluster.nodes.saturating_sub(small_job_nodes) * cluster.gpus_per_node
                    ),
                    Refusal::Contract => {
                        format!("{} whose contract job_submit refuses ({})", jobs(n), self.refused[idx[0]].as_deref().unwrap_or_default())
                    }
                };
                RefusalGroup { why, jobs: n, first: idx.iter().take(FIRST_SHOWN).map(|&i| workload.jobs[i].job_id).collect(), text }
            })
            .collect::<Vec<_>>();
        Refusals { jobs: workload.jobs.len(), refused: groups.iter().map(|g| g.jobs).sum(), groups }
    }
}

/// A budget with one leaf per team, equal shares: the default when the
/// simulation is given no budget file.
pub fn equal_share_budget(workload: &Workload) -> Result<BudgetTree, String> {
    let mut text = String::from("[budget]\n");
    let mut used = std::collections::HashSet::new();
    for team in &workload.teams {
        // Node names allow letters, digits, '_' and '-'; accounts keep the team's own spelling.
        let mut name: String = team.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
        while !used.insert(name.to_ascii_lowercase()) {
            name.push('_');
        }
        let account = team.replace('\\', "\\\\").replace('"', "\\\"");
        text.push_str(&format!("[budget.{name}]\nshare = 1\naccounts = [\"{account}\"]\n"));
    }
    BudgetTree::parse(&text).map_err(|e| format!("cannot build a one-leaf-per-team budget from the workload's teams:\n{}", e.render("(generated budget)")))
}

/// Resolves every job against `tree` (whose settings hold the cap and the
/// default minimum runtime) and the cluster, whose last `small_job_nodes`
/// nodes are kept for small jobs.
pub fn prepare(workload: &Workload, tree: &BudgetTree, cluster: ClusterSpec, small_job_nodes: u32) -> Prepared {
    let rules = ContractRules::from(&tree.settings);
    let preempt_rules = allot::preempt::PreemptRules::from_settings(&tree.settings);
    let open_nodes = cluster.nodes.saturating_sub(small_job_nodes);
    let n = workload.jobs.len();
    let mut out = Prepared {
        leaf: vec![None; n],
        contract: Vec::with_capacity(n),
        held: Vec::with_capacity(n),
        refused: vec![None; n],
        refusal: vec![None; n],
        clamped_to_cap: 0,
    };
    // Few distinct (min_runtime, priority) pairs: parse each once.
    type Parsed = Result<(Contract, bool), String>;
    let mut contracts: HashMap<(Option<i64>, PriorityLevel), Parsed> = HashMap::new();
    let leaf_of_team: Vec<Result<u32, String>> = workload
        .teams
        .iter()
        .map(|team| {
            tree.leaf_of_account(team).ok_or_else(|| {
                LeafRefusal::UnknownAccount { account: team.clone(), allowed: tree.leaves.iter().flat_map(|&id| tree.node(id).accounts.clone()).collect() }
                    .to_string()
            })
        })
        .collect();
    for (i, job) in workload.jobs.iter().enumerate() {
        let parsed = contracts.entry((job.min_runtime, job.priority)).or_insert_with(|| contract_for(job.min_runtime, job.priority, rules)).clone();
        out.held.push(cluster.held_gpus(job.gpus));
        match parsed {
            Ok((c, clamped)) => {
                out.contract.push(c);
                out.clamped_to_cap += u32::from(clamped);
            }
            Err(e) => {
                out.contract.push(Contract { min_runtime: 0, priority: job.priority });
                out.refused[i] = Some(format!("contract refused: {e}"));
                out.refusal[i] = Some(Refusal::Contract);
                continue;
            }
        }
        match &leaf_of_team[job.team as usize] {
            Ok(leaf) => out.leaf[i] = Some(*leaf),
            Err(e) => {
                out.refused[i] = Some(e.clone());
                out.refusal[i] = Some(Refusal::UnknownTeam);
                continue;
            }
        }
        if job.gpus > cluster.capacity() || out.held[i] > cluster.capacity() {
            out.refused[i] = Some(format!("needs {} GPUs; the cluster has {}", job.gpus, cluster.capacity()));
            out.refusal[i] = Some(Refusal::LargerThanCluster);
            out.leaf[i] = None;
        } else if small_job_nodes > 0 && out.held[i] > open_nodes * cluster.gpus_per_node {
            let waiting = allot::preempt::WaitingJob { leaf: out.leaf[i], contract: out.contract[i], gpus: out.held[i], queued_since: None };
            if !preempt_rules.may_use_small_job_nodes(&waiting) {
                out.refused[i] = Some(format!(
                    "needs {} GPUs; outside the {small_job_nodes} node(s) kept for small jobs the cluster has {}",
                    job.gpus,
                    open_nodes * cluster.gpus_per_node
                ));
                out.refusal[i] = Some(Refusal::LargerThanOpenNodes);
                out.leaf[i] = None;
            }
        }
    }
    out
}

/// The contract job_submit would record for this declaration, through the
/// policy's own parser. Over the cap: run with the cap (flagged `true`).
fn contract_for(min_runtime: Option<i64>, priority: PriorityLevel, rules: ContractRules) -> Result<(Contract, bool), String> {
    let comment = |m: Option<i64>| match m {
        Some(m) => format!("min_runtime={} priority={priority}", format_duration(m)),
        None => format!("priority={priority}"),
    };
    match parse_comment(&comment(min_runtime), rules) {
        Ok(p) => Ok((p.contract, false)),
        Err(_) if min_runtime.is_some_and(|m| m > rules.min_runtime_cap) => {
            parse_comment(&comment(Some(rules.min_runtime_cap)), rules).map(|p| (p.contract, true)).map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contracts_go_through_the_policy_parser() {
        let csv = "submit_s,gpus,runtime_s,team,min_runtime_s,priority\n0,1,10,a,,high\n0,1,10,a,0,normal\n0,1,10,b,36000,low\n0,64,10,a,3600,low\n0,4,10,zz,60,low\n";
        let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
        let tree = BudgetTree::parse("[cluster]\ndefault_min_runtime=\"30m\"\nmin_runtime_cap=\"8h\"\n[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n").unwrap();
        let p = prepare(&w, &tree, ClusterSpec { nodes: 2, gpus_per_node: 8 }, 0);
        assert_eq!(p.contract[0].min_runtime, 1800, "the budget's default");
        assert_eq!(p.contract[0].priority, PriorityLevel::High);
        assert!(!p.contract[1].is_allocated());
        assert_eq!(p.contract[2].min_runtime, 8 * 3600, "clamped to the cap");
        assert_eq!(p.clamped_to_cap, 1);
        assert!(p.refused[3].as_deref().unwrap().contains("needs 64 GPUs"));
        assert!(p.refused[4].as_deref().unwrap().contains("account 'zz' is not in the allot budget tree"), "{:?}", p.refused[4]);
        assert_eq!(p.leaf[2], Some(1));
    }

    #[test]
    fn jobs_too_large_for_the_nodes_not_kept_for_small_jobs_are_refused() {
        let csv = "submit_s,gpus,runtime_s,team,min_runtime_s\n0,16,10,a,3600\n0,16,10,a,0\n0,8,10,a,3600\n0,24,10,a,0\n";
        let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
        let tree = BudgetTree::parse("[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n").unwrap();
        let p = prepare(&w, &tree, ClusterSpec { nodes: 2, gpus_per_node: 8 }, 1);
        assert_eq!(p.refused[0].as_deref(), Some("needs 16 GPUs; outside the 1 node(s) kept for small jobs the cluster has 8"));
        // Unallocated: it may use the kept node too.
        assert_eq!((p.refused[1].as_deref(), p.refused[2].as_deref()), (None, None));
        assert!(p.refused[3].as_deref().unwrap().contains("the cluster has 16"));
        assert!(prepare(&w, &tree, ClusterSpec { nodes: 2, gpus_per_node: 8 }, 0).refused[0].is_none());
    }

    #[test]
    fn refusals_are_counted_by_reason_with_the_first_jobs() {
        let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s\n\
                   1,0,1,10,a,\n2,1,1,10,zz,\n3,2,64,10,a,\n4,3,1,10,yy,\n5,4,16,10,a,3600\n\
                   6,5,1,10,zz,\n7,6,1,10,zz,\n8,7,1,10,zz,\n9,8,1,10,zz,\n10,9,1,10,zz,\n";
        let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
        let tree = BudgetTree::parse("[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n").unwrap();
        let cluster = ClusterSpec { nodes: 2, gpus_per_node: 8 };
        let p = prepare(&w, &tree, cluster, 1);
        let r = p.refusals(&w, &tree, cluster, 1);
        assert_eq!((r.jobs, r.refused, r.all()), (10, 9, false));
        let whys: Vec<(Refusal, usize)> = r.groups.iter().map(|g| (g.why, g.jobs)).collect();
        assert_eq!(whys, [(Refusal::UnknownTeam, 7), (Refusal::LargerThanCluster, 1), (Refusal::LargerThanOpenNodes, 1)]);
        assert_eq!(
            r.lines(),
            [
                "7 jobs of teams no budget leaf charges: 'zz' (6 jobs), 'yy' (1 job); the budget's accounts are 'a'; jobs 2, 4, 6, 7, 8 and 2 more",
                "1 job larger than the cluster's 16 GPUs (the largest wants 64); job 3",
                "1 job larger than the 8 GPUs outside the 1 node(s) kept for small jobs, which they may not use; job 5",
            ]
        );
        // Every job refused: nothing to simulate.
        let w = Workload::from_csv("submit_s,gpus,runtime_s,team\n0,1,1,zz\n".as_bytes(), false).unwrap();
        let r = prepare(&w, &tree, cluster, 0).refusals(&w, &tree, cluster, 0);
        assert!(r.all(), "{r:?}");
        assert_eq!(r.lines(), ["1 job of a team no budget leaf charges: 'zz' (1 job); the budget's accounts are 'a'; job 0"]);
    }

    #[test]
    fn equal_shares_per_team() {
        let w = Workload::from_csv("submit_s,gpus,runtime_s,team\n0,1,1,x.y\n0,1,1,x_y\n0,1,1,z\n".as_bytes(), false).unwrap();
        let t = equal_share_budget(&w).unwrap();
        assert_eq!(t.leaves.len(), 3);
        assert!(t.leaf_of_account("x.y").is_some());
        assert!((t.leaf_node(0).effective_share - 1.0 / 3.0).abs() < 1e-12);
    }
}
