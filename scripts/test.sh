#!/usr/bin/env bash
# allot's whole test suite, from a fresh Debian bookworm machine, as root:
#   1. installs what the tests need (Slurm 22.05.8, munge, the Slurm source,
#      libclang, fonts for the simulator's pictures): scripts/install-deps.sh;
#   2. builds everything in release mode (the Slurm plugins, the `allot`
#      command, the simulator);
#   3. runs every test: the policy core's unit and property tests, the
#      ledger's (SQLite) tests, the CLI's, the simulator's, and the cluster
#      tests, which bring up real 4-node Slurm clusters with the plugins
#      loaded (tests/cluster.rs) and tear them down again.
# Extra arguments go to `cargo test` (e.g. `scripts/test.sh -p allot`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[[ $(id -u) -eq 0 ]] || { echo "test: run as root (the cluster tests run slurmd and submit as test users)" >&2; exit 1; }

echo "test: installing dependencies"
scripts/install-deps.sh

echo "test: building (release)"
cargo build --release --workspace --locked

echo "test: running the tests"
# One test binary at a time keeps the cluster tests' timings honest on small
# machines; inside the cluster binary the harness serializes clusters too.
cargo test --release --workspace --locked "$@" -- --test-threads=2

# Nothing may be left running.
if pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; then
    echo "test: ERROR: Slurm daemons were left running:" >&2
    pgrep -a 'slurmctld|slurmd|slurmstepd' >&2 || true
    exit 1
fi
echo "test: all tests passed"
