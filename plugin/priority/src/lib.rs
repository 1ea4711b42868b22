//! `priority/allot`: job priorities from allot's budget-aware hierarchical
//! fair-share order.
//!
//! A job's priority encodes its place in the order (allocated before
//! unallocated work, then its leaf's fair-share rank, then its declared
//! priority, then first come first served), with no two pending jobs sharing
//! a value. New jobs get their place at submission (`priority_p_set`); a
//! background thread recomputes everything each RecomputePeriod (see
//! `worker`). The thread runs only inside slurmctld; client commands that
//! load this plugin (sshare) get the symbols and nothing else.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use allot_slurm::ctld::{in_slurmctld, Slurmctld};
use allot_slurm::job::JobMut;
use allot_slurm::{Plugin, PriorityPlugin};

mod runs;
mod worker;

use worker::{OrderState, RunEnd, RunEnds, Signal, Worker};

pub struct PriorityAllot {
    order: Arc<Mutex<OrderState>>,
    signal: Arc<Signal>,
    run_ends: Arc<RunEnds>,
    /// The recompute thread's work, made in `init`, until `thread_start`
    /// runs it (inside slurmctld only).
    worker: Mutex<Option<(Worker, &'static Slurmctld)>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

allot_slurm::slurm_plugin!(priority, "priority/allot", "allot budget fair-share priority", PriorityAllot);

// The C shim (shim/calc_fs_factor.c) is called by Slurm, never by Rust; this
// reference makes the linker keep it. Its real parameters are `long double`s
// (not expressible here): the address is taken, the function never called.
extern "C" {
    fn priority_p_calc_fs_factor();
}
#[used]
static KEEP_CALC_FS_FACTOR_SHIM: unsafe extern "C" fn() = priority_p_calc_fs_factor;

impl Plugin for PriorityAllot {
    fn init() -> Result<Self, String> {
        let order = Arc::new(Mutex::new(OrderState::default()));
        let signal = Arc::new(Signal::default());
        let run_ends = Arc::new(RunEnds::default());
        let mut worker = None;
        if in_slurmctld() {
            let conf = allot_slurm::load_allot_conf()?;
            let ctld = Slurmctld::get().ok_or("cannot reach slurmctld's job table")?;
            log::info!(
                "{}: ledger {} as cluster {}, recompute every {} s",
                allot::BUILD,
                conf.ledger,
                allot_slurm::cluster_name().as_deref().unwrap_or("(no ClusterName)"),
                conf.recompute_period.as_secs()
            );
            let jobcomp = allot_slurm::jobcomp_type().unwrap_or_default();
            if jobcomp != "jobcomp/allot" {
                log::error!(
                    "JobCompType is {jobcomp:?}, not jobcomp/allot: runs are charged only as the recompute thread sees them, so runs shorter than RecomputePeriod can go uncharged"
                );
            }
            worker = Some((Worker::new(conf.ledger.clone(), conf.recompute_period, order.clone(), signal.clone(), run_ends.clone()), ctld));
        }
        Ok(PriorityAllot { order, signal, run_ends, worker: Mutex::new(worker), thread: Mutex::new(None) })
    }

    fn fini(&self) {
        self.signal.stop();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl PriorityPlugin for PriorityAllot {
    fn thread_start(&self) {
        let Some((worker, ctld)) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        match std::thread::Builder::new().name("allot-priority".into()).spawn(move || worker.run(ctld)) {
            Ok(handle) => *self.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle),
            // Scheduling goes on with the priorities jobs get at submission.
            Err(e) => log::error!("cannot start the recompute thread: {e}; job priorities will not be recomputed"),
        }
    }

    fn set_priority(&self, _last_prio: u32, job: JobMut<'_>) -> u32 {
        let view = job.view();
        // An admin's `scontrol update priority=` stands, as in priority/basic.
        if view.priority_set_by_admin() && view.priority() > 1 {
            return view.priority();
        }
        let (priority, exhausted) = self.order.lock().unwrap_or_else(|p| p.into_inner()).assign(&view);
        if exhausted {
            // A burst of submissions used up a group's reserved values.
            self.signal.wake();
        }
        priority
    }

    fn reconfig(&self) {
        self.signal.wake();
    }

    fn run_ended(&self, job: allot_slurm::job::Job<'_>) {
        self.run_ends.push(RunEnd::of(&job));
    }

    fn fairshare_factor(&self, job: allot_slurm::job::Job<'_>) -> Option<f64> {
        let order = self.order.lock().unwrap_or_else(|p| p.into_inner());
        let (Some(tree), Some(ranking)) = (&order.tree, &order.ranking) else { return None };
        let leaf = allot_slurm::policy::leaf_of(&job, tree)?;
        let ratio = ranking.standings[ranking.node_of(leaf) as usize].ratio;
        Some(2f64.powf(-ratio))
    }
}
