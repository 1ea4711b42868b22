#!/usr/bin/env bash
# Builds allot's Debian packages with cargo-deb, one per supported Slurm
# release (the plugins must match slurmctld to the micro version):
#
#   target/debian/allot_VERSION-1~deb12_amd64.deb   Debian 12, Slurm 22.05.8
#   target/debian/allot_VERSION-1~deb13_amd64.deb   Debian 13, Slurm 24.11.5
#   and beside each, allot-dbgsym_..._amd64.ddeb: the debug info, stripped
#   from the shipped objects.
#
# Each holds the `allot` command (/usr/bin), the four plugins in Debian's
# PluginDir (/usr/lib/x86_64-linux-gnu/slurm-wlm), the example configuration
# (/etc/allot, and /usr/share/doc/allot/examples), the allot-watch systemd
# unit (installed, not enabled), man pages and bash/zsh/fish completions.
#
# Usage: scripts/package.sh [--slurm RELEASE]...   (default: every release)
# Needs what scripts/install-deps.sh --slurm RELEASE --packaging installs
# (it does not run it), and builds in release mode first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
# shellcheck source=scripts/release.sh
. scripts/release.sh

say() { printf 'package: %s\n' "$*"; }
die() { printf 'package: ERROR: %s\n' "$*" >&2; exit 1; }

cargo_bin=${HOME:-/root}/.cargo/bin
command -v cargo >/dev/null || export PATH="$cargo_bin:$PATH"
command -v cargo-deb >/dev/null || die "cargo-deb not found: run scripts/install-deps.sh --packaging"

releases=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --slurm) [[ $# -ge 2 ]] || die "--slurm needs a release"; release_check "$2"; releases+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
[[ ${#releases[@]} -gt 0 ]] || releases=("${ALLOT_CI_RELEASES[@]}")

# The `allot` command links no Slurm: one build serves every release. The
# documents are generated from its own clap definitions.
cargo build --release --locked -q -p allot-cli
docs=$repo/target/package-docs
rm -rf "$docs"
target/release/allot generate man "$docs/man"
target/release/allot generate completions "$docs/completions"

mkdir -p target/debian
for release in "${releases[@]}"; do
    target=$repo/$(release_field "$release" target)
    suite=$(release_field "$release" suite)
    say "Slurm $(release_field "$release" version) (Debian $suite): building the plugins into $target"
    ALLOT_SLURM_RELEASE=$release CARGO_TARGET_DIR=$target cargo build --release --locked -q \
        -p priority-allot -p job-submit-allot -p preempt-allot -p jobcomp-allot
    if [[ $target != "$repo/target" ]]; then
        # cargo-deb takes every built asset from one target directory.
        install -m 0755 target/release/allot "$target/release/allot"
    fi
    # --no-build: the objects are those just built for this release;
    # --dbgsym: their debug info goes into allot-dbgsym, not the package.
    out=$(CARGO_TARGET_DIR=$target cargo deb -p allot-cli --variant "$suite" --no-build --dbgsym \
        --output target/debian/ 2>&1) || { echo "$out" >&2; die "cargo deb failed for Slurm $release"; }
    deb=$(grep -o '[^ ]*allot_[^ ]*_amd64\.deb' <<<"$out" | tail -n 1)
    [[ -f $deb ]] || { echo "$out" >&2; die "cargo deb printed no package path"; }
    say "$deb ($(du -k "$deb" | cut -f1) KiB)"
done
