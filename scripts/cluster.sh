#!/usr/bin/env bash
# A real Slurm cluster of any size (four nodes by default) on this one machine, for allot's demo,
# benchmarks and tests: the allot-cluster command (tests/cluster/src/bin,
# over tests/cluster/src/local_cluster, which the cluster tests use as a
# library). This wrapper builds it when it is missing or older than its
# sources, then runs it. Usage and environment: scripts/cluster.sh --help.
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The command is built once, whichever Slurm release it runs (it links no
# Slurm): in the repository's own target directory. CARGO_TARGET_DIR is the
# caller's, for the plugins it installs (--plugins allot).
bin=$repo_root/target/release/allot-cluster
if [[ ! -x $bin || -n $(find "$repo_root/tests/cluster/src" "$repo_root/tests/cluster/Cargo.toml" -newer "$bin" -print -quit) ]]; then
    command -v cargo >/dev/null || { echo "cluster: ERROR: $bin is missing and cargo is not installed: run scripts/install-deps.sh, then cargo build --release -p allot-cluster-tests" >&2; exit 1; }
    CARGO_TARGET_DIR=$repo_root/target cargo build --release --locked --quiet --manifest-path "$repo_root/Cargo.toml" -p allot-cluster-tests --bin allot-cluster >&2
fi
exec "$bin" "$@"
