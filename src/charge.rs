//! What a running job is charged: the GPUs it takes out of use.
//!
//! A job that asks for one GPU and all of a node's CPUs or memory
//! (`-c 32`, `--mem=0`, `--cpus-per-gpu=32`) keeps the node's other GPUs from
//! every other job as surely as if it held them. So a job is charged the
//! largest of its GPUs and the GPU-equivalents of its CPU and memory shares
//! of the nodes it holds, as Slurm's `PriorityFlags=MAX_TRES` billing
//! counts: on an 8-GPU, 32-CPU node, 16 CPUs are 4 GPUs' worth. A share is
//! rounded up (a GPU that lacks the CPUs or memory to run a job is out of
//! use too) and never exceeds the nodes' GPUs. A job on nodes without GPUs
//! is charged nothing: it blocks no GPU. On a cluster that shares CPUs
//! (`charge = "cpus"`), the same rule in CPUs: [`charged_cpus`].

/// The nodes a job holds, summed: their GPUs, usable CPUs and usable memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Nodes {
    pub gpus: u32,
    pub cpus: u64,
    pub memory_mb: u64,
}

/// What a job holds on those nodes (0 where Slurm did not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub gpus: u32,
    pub cpus: u64,
    pub memory_mb: u64,
}

/// The GPUs a job is charged for holding `held` on `nodes`.
pub fn charged_gpus(held: Held, nodes: Nodes) -> u32 {
    // The GPU-equivalent of `part` of `whole`, rounded up.
    let share = |part: u64, whole: u64| -> u64 {
        if whole == 0 {
            0
        } else {
            (nodes.gpus as u128 * part.min(whole) as u128).div_ceil(whole as u128) as u64
        }
    };
    let most = share(held.cpus, nodes.cpus).max(share(held.memory_mb, nodes.memory_mb)).min(nodes.gpus as u64) as u32;
    held.gpus.max(most)
}

/// The CPUs a job is charged on a cluster that shares CPUs
/// (`charge = "cpus"`): the largest of its CPUs and the CPU-equivalent of
/// its memory on the nodes it holds, rounded up, never more than their CPUs.
pub fn charged_cpus(cpus: u64, memory_mb: u64, nodes: Nodes) -> u32 {
    let node_cpus = nodes.cpus.min(u32::MAX as u64) as u32;
    // The GPU rule with CPUs in the place of GPUs.
    charged_gpus(Held { gpus: cpus.min(u32::MAX as u64) as u32, cpus: 0, memory_mb }, Nodes { gpus: node_cpus, cpus: 0, memory_mb: nodes.memory_mb })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: Nodes = Nodes { gpus: 8, cpus: 32, memory_mb: 64_000 };

    fn held(gpus: u32, cpus: u64, memory_mb: u64) -> Held {
        Held { gpus, cpus, memory_mb }
    }

    #[test]
    fn a_job_pays_for_the_gpus_its_cpus_or_memory_block() {
        // An ordinary job: its GPUs.
        assert_eq!(charged_gpus(held(1, 1, 1000), NODE), 1);
        assert_eq!(charged_gpus(held(8, 1, 1000), NODE), 8);
        // One GPU and the whole node's CPUs or memory: the node.
        assert_eq!(charged_gpus(held(1, 32, 1000), NODE), 8);
        assert_eq!(charged_gpus(held(1, 1, 64_000), NODE), 8);
        // No GPU at all, the node's CPUs: still the node.
        assert_eq!(charged_gpus(held(0, 32, 1000), NODE), 8);
        assert_eq!(charged_gpus(held(0, 1, 64_000), NODE), 8);
        // Half the CPUs: half the GPUs; a part of a GPU's worth counts whole.
        assert_eq!(charged_gpus(held(1, 16, 1000), NODE), 4);
        assert_eq!(charged_gpus(held(2, 9, 1000), NODE), 3);
        // Never more than the nodes' GPUs, even if Slurm's counts disagree.
        assert_eq!(charged_gpus(held(1, 99, 999_999), NODE), 8);
        // Two nodes: the sums.
        let two = Nodes { gpus: 16, cpus: 64, memory_mb: 128_000 };
        assert_eq!(charged_gpus(held(2, 64, 2000), two), 16);
        // Nodes without GPUs, or counts Slurm did not give: nothing blocked.
        assert_eq!(charged_gpus(held(0, 32, 64_000), Nodes { gpus: 0, cpus: 32, memory_mb: 64_000 }), 0);
        assert_eq!(charged_gpus(held(3, 0, 0), Nodes::default()), 3);
    }

    #[test]
    fn on_a_cpu_cluster_a_job_pays_for_the_cpus_its_memory_blocks() {
        let node = Nodes { gpus: 0, cpus: 32, memory_mb: 64_000 };
        assert_eq!(charged_cpus(4, 4000, node), 4);
        assert_eq!(charged_cpus(1, 64_000, node), 32);
        assert_eq!(charged_cpus(1, 32_000, node), 16);
        assert_eq!(charged_cpus(32, 1000, node), 32);
        assert_eq!(charged_cpus(5, 0, Nodes::default()), 5, "node counts Slurm did not give: the CPUs");
    }
}
