#!/usr/bin/env bash
# The Slurm releases allot supports, in one table for the scripts (and, through
# `scripts/release.sh RELEASE FIELD`, for the cluster tests). slurm-sys/build.rs
# holds the same versions for the build; adding a release means a row in both.
#
#   release  version  Debian suite  where the test cluster's Slurm runs
#   22.05    22.05.8  bookworm      this host (Debian 12's packages)
#   24.11    24.11.5  trixie        a Debian 13 root under $ALLOT_TRIXIE_ROOT
#                                   (default /var/cache/allot/trixie-root), made
#                                   by scripts/install-deps.sh --slurm 24.11;
#                                   the daemons run chrooted into it
#
# Usage, as a command:   scripts/release.sh RELEASE FIELD
# or sourced:            . scripts/release.sh; release_field 24.11 version
# FIELD: version, suite, root (empty for this host), target (cargo's target
#        directory for that release's plugins, relative to the repository),
#        src (the source tree slurm-sys reads), include (its libslurm-dev
#        headers), plugindir (Debian's PluginDir, as seen inside the root),
#        deb (the package's revision suffix: allot_VERSION-1~deb12_amd64.deb).
# RELEASE may also be `all` as a command: the supported releases, one a line.

ALLOT_RELEASES=(22.05 24.11)
ALLOT_DEFAULT_RELEASE=22.05

release_field() {
    local release=$1 field=$2
    case $release:$field in
        22.05:version) echo 22.05.8 ;;
        22.05:suite) echo bookworm ;;
        22.05:root) echo "" ;;
        22.05:target) echo target ;;
        22.05:src) echo "${ALLOT_SLURM_SRC_ROOT:-/usr/local/src/allot}/slurm-wlm-22.05.8" ;;
        22.05:include) echo /usr/include ;;
        22.05:deb) echo deb12 ;;
        24.11:version) echo 24.11.5 ;;
        24.11:suite) echo trixie ;;
        24.11:root) echo "${ALLOT_TRIXIE_ROOT:-/var/cache/allot/trixie-root}" ;;
        24.11:target) echo target/slurm-24.11 ;;
        24.11:src) echo "${ALLOT_SLURM_SRC_ROOT:-/usr/local/src/allot}/slurm-24.11.5" ;;
        24.11:include) echo "${ALLOT_SLURM_SRC_ROOT:-/usr/local/src/allot}/libslurm-dev-24.11.5/usr/include" ;;
        24.11:deb) echo deb13 ;;
        22.05:plugindir | 24.11:plugindir) echo /usr/lib/x86_64-linux-gnu/slurm-wlm ;;
        *:version | *:suite | *:root | *:target | *:src | *:include | *:plugindir | *:deb)
            echo "release: Slurm release '$release' is not supported (supported: ${ALLOT_RELEASES[*]})" >&2
            return 1 ;;
        *)
            echo "release: unknown field '$field' (version, suite, root, target, src, include, plugindir, deb)" >&2
            return 2 ;;
    esac
}

# Exits with a clear message unless RELEASE is supported.
release_check() {
    local r
    for r in "${ALLOT_RELEASES[@]}"; do [[ $1 == "$r" ]] && return 0; done
    echo "Slurm release '$1' is not supported: use one of ${ALLOT_RELEASES[*]}" >&2
    exit 2
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    if [[ ${1:-} == all && $# -eq 1 ]]; then
        printf '%s\n' "${ALLOT_RELEASES[@]}"
        exit 0
    fi
    [[ $# -eq 2 ]] || { sed -n '2,/^$/{s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
    release_field "$1" "$2"
fi
