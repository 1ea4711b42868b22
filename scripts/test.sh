#!/usr/bin/env bash
# allot's whole test suite, from a fresh Debian bookworm machine, as root, for
# every supported Slurm release (22.05.8, Debian 12's, on this host; 24.11.5,
# Debian 13's, in a Debian 13 root):
#   1. installs what the tests need (scripts/install-deps.sh --slurm RELEASE
#      --accounting --packaging --docs --browser --debugger: Slurm and its
#      source for each release, slurmdbd and MariaDB, munge, libclang, fonts,
#      cargo-deb, mdBook, Chromium, gdb);
#   2. builds everything in release mode, and each other release's plugins
#      into that release's own target directory (scripts/release.sh);
#   3. runs the tests that need neither root nor Slurm: the policy core's
#      unit and property tests, the ledger's (SQLite), the CLI's, the
#      simulator's, and the bindings' layout tests of every release;
#   4. builds the Debian packages (scripts/package.sh);
#   5. for each release, the cluster tests (tests/cluster): real 4-node
#      Slurm clusters with the plugins loaded (cluster.rs, hostile.rs, and
#      faults.rs: allot's own faults injected in slurmctld), with
#      slurmdbd and MariaDB (accounting.rs), and the Debian package installed
#      and the demo run from it (package.rs);
#   6. fuzzes the parsers, about 10 seconds each (scripts/fuzz.sh --short).
#
# Usage: scripts/test.sh [--slurm RELEASE]... [CARGO TEST ARGS...]
#   --slurm RELEASE   run the cluster tests against this release only
#                     (repeatable; default: 22.05 and 24.11, the CI releases;
#                     25.05, 25.11 or 26.05 once scripts/build-slurm.sh has
#                     built that site build: no package is made for those).
#   Other arguments go to every test binary (libtest's), e.g. a test name
#   filter: scripts/test.sh --slurm 24.11 t12_
# Needs a Rust toolchain (Rust >= 1.91): cargo on PATH or in ~/.cargo/bin.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/release.sh
. scripts/release.sh

[[ $(id -u) -eq 0 ]] || { echo "test: run as root (the cluster tests run slurmd and submit as test users)" >&2; exit 1; }

releases=() cargo_args=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --slurm) [[ $# -ge 2 ]] || { echo "test: --slurm needs a release" >&2; exit 2; }; release_check "$2"; releases+=("$2"); shift 2 ;;
        --slurm=*) release_check "${1#*=}"; releases+=("${1#*=}"); shift ;;
        *) cargo_args+=("$1"); shift ;;
    esac
done
[[ ${#releases[@]} -gt 0 ]] || releases=("${ALLOT_CI_RELEASES[@]}")

# rustup installs cargo in ~/.cargo/bin, which a minimal PATH (CI, sudo) lacks.
cargo_bin=${HOME:-/root}/.cargo/bin
if ! command -v cargo >/dev/null && [[ -d $cargo_bin ]]; then
    export PATH="$cargo_bin:$PATH"
fi
command -v cargo >/dev/null \
    || { echo "test: ERROR: cargo not found (neither on PATH nor in \$HOME/.cargo/bin): install a Rust toolchain (>= 1.91), e.g. with rustup" >&2; exit 1; }

started=$SECONDS
phase() { printf '\ntest: [%4ds] %s\n' "$((SECONDS - started))" "$*"; }

phase "installing dependencies (Slurm ${releases[*]})"
# The default release's headers are always needed: the workspace builds for it.
deps=(--slurm "$ALLOT_DEFAULT_RELEASE")
for r in "${releases[@]}"; do deps+=(--slurm "$r"); done
scripts/install-deps.sh "${deps[@]}" --accounting --sessions --packaging --docs --browser --debugger

phase "format and lints (rustfmt.toml; the workspace lints in Cargo.toml, warnings denied)"
for tool in fmt clippy; do
    cargo "$tool" --version >/dev/null 2>&1 && continue
    command -v rustup >/dev/null && rustup component add "${tool/fmt/rustfmt}" && cargo "$tool" --version >/dev/null 2>&1 \
        || { echo "test: ERROR: cargo $tool is missing: install it (rustup component add ${tool/fmt/rustfmt})" >&2; exit 1; }
done
cargo fmt --all --check \
    || { echo "test: ERROR: the code is not formatted as rustfmt.toml says: run cargo fmt --all" >&2; exit 1; }
cargo clippy --workspace --all-targets --locked -- -D warnings

phase "building (release; Slurm $ALLOT_DEFAULT_RELEASE)"
cargo build --release --workspace --locked
for r in "${releases[@]}"; do
    [[ $r == "$ALLOT_DEFAULT_RELEASE" ]] && continue
    phase "building the plugins for Slurm $(release_field "$r" version)"
    ALLOT_SLURM_RELEASE=$r CARGO_TARGET_DIR=$(release_field "$r" target) cargo build --release --locked \
        -p priority-allot -p job-submit-allot -p preempt-allot -p jobcomp-allot
done

# cargo runs the test binaries one after another; --test-threads=2 caps the
# threads inside each binary (a 2-core machine's worth). Inside the cluster
# tests the harness runs one cluster at a time regardless (tests/cluster).
phase "unit, property, ledger, CLI and simulator tests"
cargo test --release --workspace --locked --exclude allot-cluster-tests -- --test-threads=2 "${cargo_args[@]}"
# The tests a plain `cargo test` leaves out (#[ignore], with the reason):
# those that need a MariaDB server (installed above, --accounting; the
# ledger's engine tests start a private one) and those that need root (the
# CLI acting for other users under sudo, in a private mount namespace), and
# the book's build (mdBook, installed above, --docs).
cargo test --release --locked -p allot-ledger --test engines -p allot-cli --test server_sync --test cli --test book -- --ignored "${cargo_args[@]}"
for r in "${releases[@]}"; do
    [[ $r == "$ALLOT_DEFAULT_RELEASE" ]] && continue
    phase "the bindings' layout tests for Slurm $(release_field "$r" version)"
    ALLOT_SLURM_RELEASE=$r CARGO_TARGET_DIR=$(release_field "$r" target) cargo test --release --locked -p slurm-sys -- --test-threads=2 "${cargo_args[@]}"
done

phase "Debian packages (${releases[*]})"
# A site build (no `deb` in scripts/release.sh) has no package: its own site packages it.
package_args=()
for r in "${releases[@]}"; do [[ -n $(release_field "$r" deb) ]] && package_args+=(--slurm "$r"); done
if [[ ${#package_args[@]} -gt 0 ]]; then scripts/package.sh "${package_args[@]}"; fi

for r in "${releases[@]}"; do
    phase "cluster tests on Slurm $(release_field "$r" version) (Debian $(release_field "$r" suite))"
    suites=(--test cluster --test hostile --test faults --test accounting --test server_ledger)
    [[ -n $(release_field "$r" deb) ]] && suites+=(--test package) # a site build has no package
    # Slurm's own failover works on 22.05 only here (tests/cluster/tests/failover.rs).
    [[ $r == 22.05 ]] && suites+=(--test failover)
    # Sessions (criu) on 22.05 only here: 24.11's test daemons run chrooted in
    # the Debian 13 root, where criu cannot see the host's mounts (tests/cluster/tests/sessions.rs).
    [[ $r == 22.05 ]] && suites+=(--test sessions)
    # allot replay against the simulator (about 4 minutes) on one release.
    [[ $r == 22.05 ]] && suites+=(--test replay)
    ALLOT_SLURM_RELEASE=$r cargo test --release --locked -p allot-cluster-tests "${suites[@]}" -- --test-threads=2 "${cargo_args[@]}"
done

# ---- fuzzing (short) ------------------------------------------------------
# About 10 seconds of libFuzzer per target over fuzz/corpus/ (contract,
# duration, budget, account mapping, workload CSV): catches a regression the
# corpus already reaches. Fails on any crash or broken property. The
# instrumented build is its own workspace (fuzz/); long runs: scripts/fuzz.sh.
phase "fuzzing (short)"
scripts/fuzz.sh --short
# ---------------------------------------------------------------------------

# Nothing of the test clusters may be left running: every daemon's command
# line names its cluster's directory (-f DIR/etc/slurm.conf, munged's
# --socket=DIR/..., mariadbd's --datadir=DIR/db/...), which is
# $TMPDIR/allot-test-NAME on this host and /tmp/allot-test-NAME as a release
# root's daemons see it (tests/cluster). Clusters elsewhere (a demo, a
# benchmark) are not our business here.
phase "checking that nothing was left running"
left=$(pgrep -a -f -- '/allot-test-[^ ]*/(etc|munge|db|run)/' | grep -v -- "pgrep" || true)
if [[ -n $left ]]; then
    echo "test: ERROR: daemons of the test clusters were left running:" >&2
    echo "$left" >&2
    exit 1
fi
# The release roots' /proc, mounted by scripts/cluster.sh for their daemons.
for r in "${releases[@]}"; do
    root=$(release_field "$r" root)
    if [[ -n $root ]] && mountpoint -q "$root/proc"; then umount "$root/proc"; fi
done
phase "all tests passed (Slurm ${releases[*]})"
