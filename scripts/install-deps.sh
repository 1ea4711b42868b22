#!/usr/bin/env bash
# Install everything allot needs to build its Slurm plugins and to run a real
# Slurm cluster on this host, on Debian 12 (bookworm), as root:
#
#   * Slurm 22.05.8 daemons, clients and public headers, munge;
#   * libclang (bindgen, in slurm-sys/build.rs) and a C toolchain (the cc crate);
#   * the Slurm source tree, because job_record_t and friends live only in its
#     internal headers (src/slurmctld/slurmctld.h), which libslurm-dev lacks.
#
# Idempotent: a re-run on a ready machine touches no network and takes well
# under a second. Prints one line per step.
#
# Environment:
#   ALLOT_SLURM_SRC_ROOT  where the source tree goes (default /usr/local/src/allot);
#                         the tree ends up at $ALLOT_SLURM_SRC_ROOT/slurm-wlm-22.05.8,
#                         which is slurm-sys's default SLURM_SRC_DIR.
set -euo pipefail

readonly SLURM_UPSTREAM_VERSION=22.05.8
readonly SRC_ROOT="${ALLOT_SLURM_SRC_ROOT:-/usr/local/src/allot}"
readonly SRC_TREE="$SRC_ROOT/slurm-wlm-$SLURM_UPSTREAM_VERSION"
readonly DEB_SRC_FILE=/etc/apt/sources.list.d/allot-src.sources
readonly APT_OPTS=(-y -q -o DPkg::Lock::Timeout=900 --no-install-recommends)

# What each package is for:
#   slurm-wlm slurmctld slurmd slurm-client  the daemons and sbatch/squeue/...
#   munge                 the authentication daemon every Slurm RPC goes through
#   libslurm-dev          slurm/slurm.h, slurm_version.h and libslurm for bindgen
#   libclang-dev          libclang, which bindgen loads to parse the headers
#   build-essential       the C compiler the cc crate uses for the layout probe
#                         and for the SQLite that rusqlite bundles (no pkg-config),
#                         and g++ for libFuzzer's C++ (libfuzzer-sys, scripts/fuzz.sh)
#   dpkg-dev              dpkg-source, which `apt-get source` needs to unpack
#   procps util-linux     pgrep/pkill and runuser/setsid, used by scripts/cluster.sh
#   coreutils             timeout/mknod (essential, listed so the check is explicit)
#   fonts-dejavu-core     the font `allot simulate` draws its pictures' text with
readonly PACKAGES=(
    slurm-wlm slurmctld slurmd slurm-client munge libslurm-dev
    libclang-dev build-essential dpkg-dev
    procps util-linux coreutils
    fonts-dejavu-core
)

step() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: ERROR: %s\n' "$*" >&2; exit 1; }
# The "Version:" field of a Slurm source tree's META file.
meta_version() { awk '$1 == "Version:" { print $2; exit }' "$1"; }

[[ $(id -u) -eq 0 ]] || die "must run as root (try: sudo $0)"
# shellcheck source=/dev/null
[[ -r /etc/os-release ]] && . /etc/os-release
[[ ${VERSION_CODENAME:-} == bookworm ]] \
    || die "this script targets Debian 12 (bookworm); found '${PRETTY_NAME:-unknown OS}'"

export DEBIAN_FRONTEND=noninteractive

# Run a chatty command quietly; on failure show the end of what it said.
run_logged() {
    local log
    log=$(mktemp)
    if ! "$@" >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        rm -f "$log"
        die "failed: $*"
    fi
    rm -f "$log"
}

# apt-get update at most once per run, and only when something is missing.
apt_updated=0
apt_update_once() {
    if [[ $apt_updated -eq 0 ]]; then
        step "apt-get update"
        run_logged apt-get -q -o DPkg::Lock::Timeout=900 update
        apt_updated=1
    fi
}

# --- 1. packages ---------------------------------------------------------------
# One dpkg-query for all of them (fast): status abbreviation "ii" means
# installed; packages dpkg has never heard of are simply absent from its output
# (it then exits non-zero, hence the `|| true`).
declare -A have=()
while read -r pkg abbrev; do
    if [[ $abbrev == ii ]]; then have[$pkg]=1; fi
done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${PACKAGES[@]}" 2>/dev/null || true)
missing=()
for p in "${PACKAGES[@]}"; do
    [[ -n ${have[$p]:-} ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    step "packages: all ${#PACKAGES[@]} present"
else
    apt_update_once
    step "packages: installing ${missing[*]}"
    # Keep the packages' init scripts from starting the system-wide munged,
    # slurmctld and slurmd (allot runs its own, under a private directory; a
    # system slurmctld without /etc/slurm/slurm.conf fails and can fail the
    # install). Docker-style images already have such a policy-rc.d.
    temp_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\n# temporary, from allot scripts/install-deps.sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        temp_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    run_logged apt-get install "${APT_OPTS[@]}" "${missing[@]}"
    if ((temp_policy)); then
        rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    fi
fi

# --- 2. Slurm version ----------------------------------------------------------
# allot's plugins are built against 22.05.8's internal struct layouts and must
# report plugin_version 0x160508: any other Slurm would refuse them (fatal) or,
# worse, load them and misread job_record_t. Check both the package database and
# the binary itself.
for p in slurmctld slurmd libslurm-dev; do
    v=$(dpkg-query -W -f='${Version}' "$p")
    upstream=${v#*:}          # strip an epoch, if any
    upstream=${upstream%-*}   # strip the Debian revision
    [[ $upstream == "$SLURM_UPSTREAM_VERSION" ]] \
        || die "$p is version $v; allot needs Slurm $SLURM_UPSTREAM_VERSION exactly (Debian bookworm's slurm-wlm). Remove it and re-run, or pin the bookworm package."
done
ctld_version=$(slurmctld -V 2>&1 || true)
[[ $ctld_version == "slurm-wlm $SLURM_UPSTREAM_VERSION" || $ctld_version == "slurm $SLURM_UPSTREAM_VERSION" ]] \
    || die "slurmctld -V says '$ctld_version'; allot needs Slurm $SLURM_UPSTREAM_VERSION exactly"
grep -q '^#define SLURM_VERSION_NUMBER 0x160508$' /usr/include/slurm/slurm_version.h \
    || die "/usr/include/slurm/slurm_version.h is not Slurm $SLURM_UPSTREAM_VERSION (expected SLURM_VERSION_NUMBER 0x160508)"
step "slurm: $ctld_version ($(dpkg-query -W -f='${Version}' slurmctld))"

# --- 3. Slurm source tree --------------------------------------------------------
# The layout-bearing headers (job_record_t, part_record_t, job_queue_rec_t...) are
# not packaged anywhere; the Debian source package is the way to get the exact
# tree Debian built from. Debian's patches do not change struct layouts.
if [[ -f $SRC_TREE/src/slurmctld/slurmctld.h && -f $SRC_TREE/META ]]; then
    step "source: $SRC_TREE already present"
else
    # deb-src entries mirroring the machine's deb entries: take the URIs of the
    # existing bookworm and bookworm-security stanzas so a site mirror is honoured,
    # falling back to the Debian defaults.
    main_uri=http://deb.debian.org/debian
    sec_uri=http://deb.debian.org/debian-security
    if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
        read -r found_main found_sec < <(awk '
            BEGIN { RS = ""; FS = "\n" }          # one deb822 stanza per record
            {
                types = ""; uris = ""; suites = ""
                for (i = 1; i <= NF; i++) {
                    if ($i ~ /^Types:/)  types  = $i
                    if ($i ~ /^URIs:/)   { uris = $i; sub(/^URIs:[ \t]*/, "", uris); sub(/[ \t].*/, "", uris) }
                    if ($i ~ /^Suites:/) suites = $i
                }
                if (types !~ /[ \t]deb([ \t]|$)/) next
                if (suites ~ /bookworm-security/) sec = uris
                else if (suites ~ /[ \t]bookworm([ \t]|$)/) main = uris
            }
            END { print (main == "" ? "-" : main), (sec == "" ? "-" : sec) }
        ' /etc/apt/sources.list.d/debian.sources) || true
        [[ ${found_main:--} != - ]] && main_uri=$found_main
        [[ ${found_sec:--} != - ]] && sec_uri=$found_sec
    fi
    want=$(cat <<EOF
# Added by allot's scripts/install-deps.sh: source packages, for Slurm's
# internal headers (apt-get source slurm-wlm).
Types: deb-src
URIs: $main_uri
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: $sec_uri
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
)
    if [[ -f $DEB_SRC_FILE ]] && [[ $(cat "$DEB_SRC_FILE") == "$want" ]]; then
        step "deb-src: $DEB_SRC_FILE up to date"
    else
        step "deb-src: writing $DEB_SRC_FILE ($main_uri, $sec_uri)"
        printf '%s\n' "$want" >"$DEB_SRC_FILE.tmp"
        mv "$DEB_SRC_FILE.tmp" "$DEB_SRC_FILE"
        apt_updated=0   # the new entries need an index download
    fi
    # The source index may be absent even with the entry present (fresh lists).
    if [[ $apt_updated -eq 0 ]] || ! apt-cache showsrc slurm-wlm 2>/dev/null | grep -q '^Package: slurm-wlm'; then
        apt_updated=0
        apt_update_once
    fi

    # Download into a scratch directory beside the destination and move the
    # tree into place only once it is complete, so an interrupted run never
    # leaves a half-unpacked tree that a later run would take as done.
    mkdir -p "$SRC_ROOT"
    scratch=$(mktemp -d "$SRC_ROOT/.apt-source.XXXXXX")
    trap 'rm -rf "$scratch"' EXIT
    # Prefer the source of exactly the installed binary version; fall back to
    # whatever the archive has if that revision was superseded (the upstream
    # version is checked below either way).
    installed=$(dpkg-query -W -f='${Version}' slurmctld)
    step "source: apt-get source slurm-wlm=$installed into $SRC_ROOT"
    if ! (cd "$scratch" && apt-get -q source "slurm-wlm=$installed" >apt-source.log 2>&1); then
        step "source: $installed not in the archive, trying the current slurm-wlm"
        (cd "$scratch" && apt-get -q source slurm-wlm >apt-source.log 2>&1) \
            || die "apt-get source slurm-wlm failed:
$(tail -n 20 "$scratch/apt-source.log")"
    fi
    [[ -f $scratch/slurm-wlm-$SLURM_UPSTREAM_VERSION/META ]] \
        || die "apt-get source did not produce slurm-wlm-$SLURM_UPSTREAM_VERSION (got: $(cd "$scratch" && echo *))"
    [[ $(meta_version "$scratch/slurm-wlm-$SLURM_UPSTREAM_VERSION/META") == "$SLURM_UPSTREAM_VERSION" ]] \
        || die "the fetched source tree's META is not version $SLURM_UPSTREAM_VERSION"
    rm -rf "$SRC_TREE"
    mv "$scratch/slurm-wlm-$SLURM_UPSTREAM_VERSION" "$SRC_TREE"
    rm -rf "$scratch"
    trap - EXIT
    step "source: unpacked $SRC_TREE"
fi

# The tree that is there (old or new) must be the right version too.
[[ $(meta_version "$SRC_TREE/META") == "$SLURM_UPSTREAM_VERSION" ]] \
    || die "$SRC_TREE/META is not Slurm $SLURM_UPSTREAM_VERSION; remove the tree and re-run"

# --- 4. build prerequisites the plugins' build checks for ---------------------------
# bindgen finds libclang through clang-sys; Debian puts it in /usr/lib/llvm-N/lib.
compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null \
    || die "libclang not found under /usr/lib/llvm-*/lib although libclang-dev is installed"
command -v cc >/dev/null || die "no C compiler (cc) although build-essential is installed"
step "ok: Slurm $SLURM_UPSTREAM_VERSION, munge, libclang, C compiler and source tree are ready"
