#!/usr/bin/env bash
# allot's whole test suite, from a fresh Debian bookworm machine, as root:
#   1. installs what the tests need (Slurm 22.05.8, munge, the Slurm source,
#      libclang, fonts for the simulator's pictures): scripts/install-deps.sh;
#   2. builds everything in release mode (the Slurm plugins, the `allot`
#      command, the simulator);
#   3. runs every test: the policy core's unit and property tests, the
#      ledger's (SQLite) tests, the CLI's, the simulator's, and the cluster
#      tests, which bring up real 4-node Slurm clusters with the plugins
#      loaded (tests/cluster.rs) and tear them down again;
#   4. fuzzes the parsers, about 10 seconds each (scripts/fuzz.sh --short).
# Extra arguments go to `cargo test` (e.g. `scripts/test.sh -p allot`).
# Needs a Rust toolchain (Rust >= 1.91): cargo on PATH or in ~/.cargo/bin.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[[ $(id -u) -eq 0 ]] || { echo "test: run as root (the cluster tests run slurmd and submit as test users)" >&2; exit 1; }

# rustup installs cargo in ~/.cargo/bin, which a minimal PATH (CI, sudo) lacks.
cargo_bin=${HOME:-/root}/.cargo/bin
if ! command -v cargo >/dev/null && [[ -d $cargo_bin ]]; then
    export PATH="$cargo_bin:$PATH"
fi
command -v cargo >/dev/null \
    || { echo "test: ERROR: cargo not found (neither on PATH nor in \$HOME/.cargo/bin): install a Rust toolchain (>= 1.91), e.g. with rustup" >&2; exit 1; }

echo "test: installing dependencies"
scripts/install-deps.sh

echo "test: building (release)"
cargo build --release --workspace --locked

echo "test: running the tests"
# cargo runs the test binaries one after another; --test-threads=2 caps the
# threads inside each binary (a 2-core machine's worth). Inside
# tests/cluster.rs the harness runs one cluster at a time regardless
# (tests/support/mod.rs).
cargo test --release --workspace --locked "$@" -- --test-threads=2

# ---- fuzzing (short) ------------------------------------------------------
# About 10 seconds of libFuzzer per target over fuzz/corpus/ (contract,
# duration, budget, account mapping, workload CSV): catches a regression the
# corpus already reaches. Fails on any crash or broken property. The
# instrumented build is its own workspace (fuzz/); long runs: scripts/fuzz.sh.
echo "test: fuzzing (short)"
scripts/fuzz.sh --short
# ---------------------------------------------------------------------------

# Nothing of the test clusters may be left running. Their directories are
# $TMPDIR/allot-test-NAME (tests/support/mod.rs), which every daemon's
# command line names (-f DIR/etc/slurm.conf, munged's --socket=DIR/...);
# clusters elsewhere (a demo or a benchmark) are not our business here.
test_dirs=$(cd "${TMPDIR:-/tmp}" && pwd -P)/allot-test-
left=$(for daemon in slurmctld slurmd munged; do pgrep -a -x "$daemon" || true; done | grep -F -- "$test_dirs" || true)
if [[ -n $left ]]; then
    echo "test: ERROR: daemons of the test clusters were left running:" >&2
    echo "$left" >&2
    exit 1
fi
echo "test: all tests passed"
