#!/usr/bin/env bash
# Install everything allot needs to build its Slurm plugins for each supported
# Slurm release and to run real Slurm clusters of those releases on this host,
# on Debian 12 (bookworm), as root.
#
# Usage: scripts/install-deps.sh [--slurm RELEASE]... [--accounting] [--sessions] [--packaging] [--docs] [--browser] [--debugger]
#   --slurm RELEASE  22.05 (the default), 24.11, or all (both); may be repeated.
#                    25.05, 25.11, 26.05: only checks that scripts/build-slurm.sh
#                      has built and installed that site build.
#                    22.05: Debian 12's Slurm 22.05.8 daemons, clients and
#                      headers on this host, and its source tree (apt-get source).
#                    24.11: Debian 13's Slurm 24.11.5: the upstream source tree
#                      Debian builds from and Debian 13's libslurm-dev headers,
#                      for the build; and, for the test clusters, a Debian 13
#                      root ($ALLOT_TRIXIE_ROOT, default
#                      /var/cache/allot/trixie-root) with Debian's own Slurm
#                      24.11.5 packages, which scripts/cluster.sh runs chrooted.
#                      Debian 13's packages are fetched with a private apt
#                      configuration: this host's sources are not touched.
#   --accounting     also slurmdbd and MariaDB (Debian's), on the host for
#                    22.05 and in the Debian 13 root for 24.11: the test
#                    clusters with accounting (scripts/cluster.sh ALLOT_ACCOUNTING=1).
#   --sessions       also what `allot session` runs on a node, for its tests:
#                    dtach, python3, and criu: Debian 13's 4.1.1 (Debian 12's
#                    3.17 cannot dump on recent kernels), taken with the
#                    libraries it loads from the Debian 13 root (made if
#                    missing) into /usr/local/lib/allot/criu.d, with
#                    CAP_CHECKPOINT_RESTORE (and CAP_SETPCAP) so that it runs
#                    as the session's owner.
#   --packaging      also cargo-deb (cargo install --locked), for scripts/package.sh.
#   --docs           also mdBook (cargo install --locked), to build the book in docs/.
#   --browser        also Debian's Chromium, which the test of `allot serve`
#                    drives headless (loads the page, keeps a screenshot).
#   --debugger       also gdb, with which the cluster tests print the stack of
#                    any daemon that left a core file (in the test's output,
#                    so a crash in CI can be read without the machine).
# Always: libclang (bindgen, in slurm-sys/build.rs), a C toolchain (the cc
# crate), munge, the system's SQLite, and a font for the simulator's pictures.
#
# Idempotent: a re-run on a ready machine touches no network and takes about a
# second. Prints one line per step.
#
# Environment:
#   ALLOT_SLURM_SRC_ROOT  where the source trees go (default /usr/local/src/allot),
#                         which is where slurm-sys looks by default.
#   ALLOT_TRIXIE_ROOT     the Debian 13 root for 24.11's test clusters.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/release.sh
. scripts/release.sh

readonly DEB_SRC_FILE=/etc/apt/sources.list.d/allot-src.sources
readonly APT_OPTS=(-y -q -o DPkg::Lock::Timeout=900 --no-install-recommends)
readonly CARGO_DEB_VERSION=3.8.0
readonly MDBOOK_VERSION=0.5.4

step() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: ERROR: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
# The "Version:" field of a Slurm source tree's META file.
meta_version() { awk '$1 == "Version:" { print $2; exit }' "$1"; }
# A Debian version's upstream part: no epoch, no Debian revision.
upstream_of() { local v=${1#*:}; echo "${v%-*}"; }

releases=() accounting=0 sessions=0 packaging=0 docs=0 browser=0 debugger=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --slurm) [[ $# -ge 2 ]] || usage; releases+=("$2"); shift 2 ;;
        --slurm=*) releases+=("${1#*=}"); shift ;;
        --accounting) accounting=1; shift ;;
        --sessions) sessions=1; shift ;;
        --packaging) packaging=1; shift ;;
        --docs) docs=1; shift ;;
        --browser) browser=1; shift ;;
        --debugger) debugger=1; shift ;;
        -h|--help) usage ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ ${#releases[@]} -gt 0 ]] || releases=("$ALLOT_DEFAULT_RELEASE")
asked=()
for r in "${releases[@]}"; do
    if [[ $r == all ]]; then asked+=("${ALLOT_CI_RELEASES[@]}"); else release_check "$r"; asked+=("$r"); fi
done
# Each once, in the table's order.
want=()
for r in "${ALLOT_RELEASES[@]}"; do
    for a in "${asked[@]}"; do [[ $a == "$r" ]] && { want+=("$r"); break; }; done
done
has_release() { local r; for r in "${want[@]}"; do [[ $r == "$1" ]] && return 0; done; return 1; }

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

# Keep packages' init scripts from starting daemons (allot runs its own,
# under private directories; a system slurmctld or mariadb started by a
# package would take ports and files). Docker-style images already have
# such a policy-rc.d. ROOT: "" for this host, else a chroot.
with_no_service_starts() {
    local root=$1; shift
    local policy=$root/usr/sbin/policy-rc.d temp=0 rc=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\n# temporary, from allot scripts/install-deps.sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        temp=1
    fi
    "$@" || rc=$?
    ((temp)) && rm -f "$policy"
    return $rc
}

# The deb822 URIs of this host's bookworm and bookworm-security stanzas, so a
# site mirror is honoured; Debian's defaults otherwise. Sets main_uri, sec_uri.
host_mirrors() {
    main_uri=http://deb.debian.org/debian
    sec_uri=http://deb.debian.org/debian-security
    [[ -r /etc/apt/sources.list.d/debian.sources ]] || return 0
    local found_main found_sec
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
    return 0
}
host_mirrors

# --- 1. this host's packages ---------------------------------------------------
# What each package is for:
#   munge                 the authentication daemon every Slurm RPC goes through
#   libclang-dev          libclang, which bindgen loads to parse the headers
#   build-essential       the C compiler the cc crate uses for the layout probe
#                         and for the SQLite that rusqlite bundles (no pkg-config),
#                         and g++ for libFuzzer's C++ (libfuzzer-sys, scripts/fuzz.sh)
#   dpkg-dev              dpkg-source, which `apt-get source` needs to unpack;
#                         dpkg-shlibdeps, which cargo-deb uses for Depends
#   procps util-linux     pgrep/pkill and runuser/setsid, used by scripts/cluster.sh
#   coreutils             timeout/mknod (essential, listed so the check is explicit)
#   fonts-dejavu-core     the font `allot simulate` draws its pictures' text with
#   libsqlite3-dev        the system's SQLite, which the ledger links (one copy
#                         per process: the plugins share it inside slurmctld)
#   22.05: slurm-wlm slurmctld slurmd slurm-client libslurm-dev
#                         the daemons, sbatch/squeue/..., headers and libslurm
#   24.11: debootstrap    makes the Debian 13 root
#   --accounting (22.05): slurmdbd mariadb-server
#   --sessions:           dtach python3-minimal (the session's program
#                         in the tests), patchelf libcap2-bin (criu's copy)
#   --browser:            chromium
#   --debugger:           gdb
packages=(munge libclang-dev build-essential dpkg-dev procps util-linux coreutils fonts-dejavu-core libsqlite3-dev)
has_release 22.05 && packages+=(slurm-wlm slurmctld slurmd slurm-client libslurm-dev)
has_release 24.11 && packages+=(debootstrap)
((accounting)) && has_release 22.05 && packages+=(slurmdbd mariadb-server)
# Site builds (25.05, 25.11, 26.05): what scripts/build-slurm.sh needs to
# configure SchedMD's source as a site does (munge for auth/munge, the MariaDB
# client library for slurmdbd's accounting_storage/mysql), and the server the
# accounting tests run slurmdbd against.
for r in "${ALLOT_SITE_RELEASES[@]}"; do
    has_release "$r" && { packages+=(libmunge-dev libmariadb-dev python3); ((accounting)) && packages+=(mariadb-server); break; }
done
((sessions)) && packages+=(dtach python3-minimal patchelf libcap2-bin)
((browser)) && packages+=(chromium)
((debugger)) && packages+=(gdb)

# One dpkg-query for all of them (fast): status abbreviation "ii" means
# installed; packages dpkg has never heard of are simply absent from its output
# (it then exits non-zero, hence the `|| true`).
declare -A have=()
while read -r pkg abbrev; do
    if [[ $abbrev == ii ]]; then have[$pkg]=1; fi
done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for p in "${packages[@]}"; do
    [[ -n ${have[$p]:-} ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    step "packages: all ${#packages[@]} present"
else
    apt_update_once
    step "packages: installing ${missing[*]}"
    with_no_service_starts "" run_logged apt-get install "${APT_OPTS[@]}" "${missing[@]}"
fi

# bindgen finds libclang through clang-sys; Debian puts it in /usr/lib/llvm-N/lib.
compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null \
    || die "libclang not found under /usr/lib/llvm-*/lib although libclang-dev is installed"
command -v cc >/dev/null || die "no C compiler (cc) although build-essential is installed"

# --- 2. Slurm 22.05.8, this host's --------------------------------------------
install_22_05() {
    local version src
    version=$(release_field 22.05 version)
    src=$(release_field 22.05 src)
    # allot's plugins are built against 22.05.8's internal struct layouts and
    # must report plugin_version 0x160508: any other Slurm would refuse them
    # (fatal) or, worse, load them and misread job_record_t. Check both the
    # package database and the binary itself.
    local p v ctld_version
    for p in slurmctld slurmd libslurm-dev; do
        v=$(dpkg-query -W -f='${Version}' "$p")
        [[ $(upstream_of "$v") == "$version" ]] \
            || die "$p is version $v; allot's 22.05 build needs Slurm $version exactly (Debian bookworm's slurm-wlm). Remove it and re-run, or pin the bookworm package."
    done
    ctld_version=$(slurmctld -V 2>&1 || true)
    [[ $ctld_version == "slurm-wlm $version" || $ctld_version == "slurm $version" ]] \
        || die "slurmctld -V says '$ctld_version'; allot needs Slurm $version exactly"
    grep -q '^#define SLURM_VERSION_NUMBER 0x160508$' /usr/include/slurm/slurm_version.h \
        || die "/usr/include/slurm/slurm_version.h is not Slurm $version (expected SLURM_VERSION_NUMBER 0x160508)"
    if ((accounting)); then
        v=$(dpkg-query -W -f='${Version}' slurmdbd)
        [[ $(upstream_of "$v") == "$version" ]] || die "slurmdbd is version $v, not $version"
    fi
    step "slurm 22.05: $ctld_version ($(dpkg-query -W -f='${Version}' slurmctld))"

    # The layout-bearing headers (job_record_t, part_record_t, job_queue_rec_t...)
    # are not packaged anywhere; the Debian source package is the way to get the
    # exact tree Debian built from. Debian's patches do not change struct layouts.
    if [[ -f $src/src/slurmctld/slurmctld.h && -f $src/META ]]; then
        step "source 22.05: $src already present"
    else
        local want
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
        local root scratch installed
        root=$(dirname "$src")
        mkdir -p "$root"
        scratch=$(mktemp -d "$root/.apt-source.XXXXXX")
        # Prefer the source of exactly the installed binary version; fall back to
        # whatever the archive has if that revision was superseded (the upstream
        # version is checked below either way).
        installed=$(dpkg-query -W -f='${Version}' slurmctld)
        step "source 22.05: apt-get source slurm-wlm=$installed into $root"
        if ! (cd "$scratch" && apt-get -q source "slurm-wlm=$installed" >apt-source.log 2>&1); then
            step "source 22.05: $installed not in the archive, trying the current slurm-wlm"
            (cd "$scratch" && apt-get -q source slurm-wlm >apt-source.log 2>&1) \
                || { tail -n 20 "$scratch/apt-source.log" >&2; rm -rf "$scratch"; die "apt-get source slurm-wlm failed"; }
        fi
        local tree=$scratch/slurm-wlm-$version
        if [[ ! -f $tree/META || $(meta_version "$tree/META") != "$version" ]]; then
            local got
            got=$(cd "$scratch" && echo *)
            rm -rf "$scratch"
            die "apt-get source did not produce a Slurm $version tree (got: $got)"
        fi
        rm -rf "$src"
        mv "$tree" "$src"
        rm -rf "$scratch"
        step "source 22.05: unpacked $src"
    fi
    [[ $(meta_version "$src/META") == "$version" ]] \
        || die "$src/META is not Slurm $version; remove the tree and re-run"
}

# --- 3. Slurm 24.11.5, Debian 13's ---------------------------------------------
# A private apt configuration for Debian 13 (trixie): its indexes and
# downloads live under /var/cache/allot/apt-trixie, and this host's own
# sources.list is never given a trixie entry (an upgrade would then pull
# Debian 13 packages into Debian 12).
readonly TRIXIE_APT=/var/cache/allot/apt-trixie
trixie_apt_opts=()
# Writes the configuration and downloads the indexes once; call it in this
# shell (not in a $(...) subshell) before trixie_apt.
trixie_apt_init() {
    if [[ ${#trixie_apt_opts[@]} -eq 0 ]]; then
        mkdir -p "$TRIXIE_APT/lists/partial" "$TRIXIE_APT/archives/partial"
        cat >"$TRIXIE_APT/sources.list" <<EOF
# allot's scripts/install-deps.sh: Debian 13 (trixie), for Slurm 24.11.5's
# source tree and headers; used only through this directory's apt options.
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $main_uri trixie main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $main_uri trixie main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $sec_uri trixie-security main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $sec_uri trixie-security main
EOF
        trixie_apt_opts=(-o "Dir::Etc::SourceList=$TRIXIE_APT/sources.list" -o Dir::Etc::SourceParts=/nonexistent
            -o "Dir::State::Lists=$TRIXIE_APT/lists" -o "Dir::Cache=$TRIXIE_APT" -o "Dir::Cache::Archives=$TRIXIE_APT/archives"
            -o APT::Sandbox::User=root)
        step "apt-get update (Debian 13 indexes, private)"
        run_logged apt-get -q "${trixie_apt_opts[@]}" update
    fi
}
# trixie_apt apt-get|apt-cache ARGS...
trixie_apt() {
    [[ ${#trixie_apt_opts[@]} -gt 0 ]] || die "trixie_apt_init first"
    local tool=$1; shift
    "$tool" -q "${trixie_apt_opts[@]}" "$@"
}

# A file of a source package, checked against the SHA256 its index entry
# gives. The main archive's entry comes first, the security archive's after
# (its files live under pool/updates there).
# Usage: fetch_source_file PACKAGE VERSION NAME DEST
fetch_source_file() {
    local package=$1 version=$2 name=$3 dest=$4 record dir sha uri
    while IFS= read -r -d '' record; do
        dir=$(awk '/^Directory:/ { print $2 }' <<<"$record")
        sha=$(awk -v f="$name" '/^Checksums-Sha256:/ { on = 1; next } /^[^ ]/ { on = 0 } on && $3 == f { print $1 }' <<<"$record")
        [[ -n $dir && -n $sha ]] || continue
        for uri in "$main_uri" "$sec_uri"; do
            if /usr/lib/apt/apt-helper download-file "$uri/$dir/$name" "$dest" "SHA256:$sha" >/dev/null 2>&1; then
                return 0
            fi
        done
    done < <(trixie_apt apt-cache showsrc "$package" 2>/dev/null \
        | awk -v v="$version" 'BEGIN { RS = ""; ORS = "\0" } index($0 "\n", "\nVersion: " v "\n") { print }')
    die "cannot download $name of $package $version from Debian 13 ($main_uri, $sec_uri)"
}

# ensure_trixie_root ROOT PACKAGE...: debootstrap's minimal Debian 13 system
# in ROOT (the marker says it completed), plus the packages, installed when
# missing. Used by the 24.11 test clusters and for criu (--sessions).
ensure_trixie_root() {
    local root=$1; shift
    local root_packages=("$@")
    local marker=$root/.allot-root
    if [[ -f $marker && -x $root/usr/bin/apt-get ]]; then
        step "root: $root present"
    else
        command -v debootstrap >/dev/null || { apt_update_once; run_logged apt-get install "${APT_OPTS[@]}" debootstrap; }
        step "root: debootstrap trixie into $root (about 30 s)"
        # Never delete through a mount left over from an interrupted run.
        umount_root "$root"
        rm -rf --one-file-system "$root"
        mkdir -p "$(dirname "$root")"
        run_logged debootstrap --variant=minbase trixie "$root" "$main_uri"
        echo "allot test root: Debian 13 (trixie) for Slurm 24.11's test clusters and criu (scripts/install-deps.sh)" >"$marker"
    fi
    local root_missing=() p
    declare -A in_root=()
    while read -r p abbrev; do
        [[ $abbrev == ii ]] && in_root[$p]=1
    done < <(chroot "$root" dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${root_packages[@]}" 2>/dev/null || true)
    for p in "${root_packages[@]}"; do [[ -n ${in_root[$p]:-} ]] || root_missing+=("$p"); done
    if [[ ${#root_missing[@]} -gt 0 ]]; then
        step "root: installing ${root_missing[*]} into $root"
        mount_proc "$root"
        local rc=0
        with_no_service_starts "$root" run_logged chroot "$root" /bin/sh -c \
            "export DEBIAN_FRONTEND=noninteractive; apt-get -q update && apt-get install ${APT_OPTS[*]} ${root_missing[*]}" || rc=$?
        umount_root "$root"
        ((rc == 0)) || die "installing ${root_missing[*]} into the Debian 13 root failed"
    fi
}

install_24_11() {
    local version src include root
    version=$(release_field 24.11 version)
    src=$(release_field 24.11 src)
    include=$(release_field 24.11 include)
    root=$(release_field 24.11 root)

    # The source tree: the upstream tarball Debian 13 builds from (its .dsc
    # and Debian patches are not always served; the patches of 24.11.5-4 do
    # not touch the structs the plugins read, and the layout test compares
    # against a configured tree).
    if [[ -f $src/src/slurmctld/slurmctld.h && -f $src/META ]]; then
        step "source 24.11: $src already present"
    else
        local parent scratch srcpkg
        parent=$(dirname "$src")
        mkdir -p "$parent"
        trixie_apt_init
        scratch=$(mktemp -d "$parent/.trixie-source.XXXXXX")
        srcpkg=$(trixie_apt apt-cache showsrc slurm-wlm 2>/dev/null | awk '/^Version:/ { print $2 }' | while read -r v; do
            [[ $(upstream_of "$v") == "$version" ]] && { echo "$v"; break; }; done)
        [[ -n $srcpkg ]] || { rm -rf "$scratch"; die "Debian 13's source index has no slurm-wlm $version"; }
        step "source 24.11: slurm-wlm_$version.orig.tar.gz (slurm-wlm $srcpkg) into $parent"
        fetch_source_file slurm-wlm "$srcpkg" "slurm-wlm_$version.orig.tar.gz" "$scratch/orig.tar.gz"
        tar -xzf "$scratch/orig.tar.gz" -C "$scratch"
        local tree
        tree=$(find "$scratch" -mindepth 1 -maxdepth 1 -type d | head -n 1)
        if [[ -z $tree || ! -f $tree/META || $(meta_version "$tree/META") != "$version" ]]; then
            rm -rf "$scratch"
            die "the tarball did not unpack to a Slurm $version tree"
        fi
        rm -rf "$src"
        mv "$tree" "$src"
        rm -rf "$scratch"
        step "source 24.11: unpacked $src"
    fi
    [[ $(meta_version "$src/META") == "$version" ]] || die "$src/META is not Slurm $version; remove the tree and re-run"

    # The public headers as Debian 13 installs them (libslurm-dev), unpacked
    # beside the source tree, not installed: this host's libslurm-dev is 22.05's.
    local version_h=$include/slurm/slurm_version.h
    if [[ -f $version_h ]] && grep -q '^#define SLURM_VERSION_NUMBER 0x180b05$' "$version_h"; then
        step "headers 24.11: $include already present"
    else
        local dest scratch deb
        dest=${include%/usr/include}
        [[ $dest != "$include" ]] || die "ALLOT_SLURM_SRC_ROOT layout: $include must end in /usr/include"
        trixie_apt_init
        scratch=$(mktemp -d)
        step "headers 24.11: Debian 13's libslurm-dev into $dest"
        (cd "$scratch" && trixie_apt apt-get download libslurm-dev >download.log 2>&1) \
            || { cat "$scratch/download.log" >&2; rm -rf "$scratch"; die "cannot download Debian 13's libslurm-dev"; }
        deb=$(find "$scratch" -name 'libslurm-dev_*.deb' | head -n 1)
        [[ $(upstream_of "$(dpkg-deb -f "$deb" Version)") == "$version" ]] \
            || { rm -rf "$scratch"; die "Debian 13's libslurm-dev is not $version"; }
        rm -rf "$dest"
        mkdir -p "$dest"
        dpkg-deb -x "$deb" "$dest"
        rm -rf "$scratch"
        grep -q '^#define SLURM_VERSION_NUMBER 0x180b05$' "$version_h" || die "$version_h is not Slurm $version"
    fi

    # The Debian 13 root the test clusters' daemons run in, with Debian's Slurm.
    # The font: the package's allot draws its pictures in the root; SQLite:
    # the ledger's, which the plugins and allot link (the package depends on it).
    local root_packages=(slurmctld slurmd slurm-client munge fonts-dejavu-core libsqlite3-0)
    ((accounting)) && root_packages+=(slurmdbd mariadb-server)
    ensure_trixie_root "$root" "${root_packages[@]}"
    local v
    v=$(chroot "$root" dpkg-query -W -f='${Version}' slurmctld)
    [[ $(upstream_of "$v") == "$version" ]] || die "Debian 13's slurmctld in $root is $v, not $version"
    step "slurm 24.11: $(chroot "$root" slurmctld -V 2>&1) ($(chroot "$root" dpkg-query -W -f='${Version}' slurmctld)) in $root"
}

mount_proc() {
    mountpoint -q "$1/proc" || mount -t proc proc "$1/proc"
}
umount_root() {
    [[ -d $1/proc ]] && mountpoint -q "$1/proc" && umount "$1/proc"
    return 0
}

has_release 22.05 && install_22_05
has_release 24.11 && install_24_11

# --- 3b. site builds (25.05, 25.11, 26.05): SchedMD's source, built by hand ----
# No registry here serves SchedMD's trees, so nothing is fetched: the build
# must be there already (scripts/build-slurm.sh SOURCE).
for r in "${ALLOT_SITE_RELEASES[@]}"; do
    has_release "$r" || continue
    prefix=$(release_field "$r" prefix) src=$(release_field "$r" src) version=$(release_field "$r" version)
    if [[ -x $prefix/sbin/slurmctld && -f $src/config.h ]]; then
        step "slurm $r: $("$prefix/sbin/slurmctld" -V) in $prefix, configured tree $src"
    else
        die "Slurm $version is a site build that no package registry here serves: get SchedMD's slurm-$version.tar.bz2 (or \`git archive slurm-${version//./-}-1\` of SchedMD's repository) and run \`sudo scripts/build-slurm.sh SOURCE\` (it installs into $prefix and keeps the configured tree in $src)"
    fi
done

# --- 3c. criu, for `allot session` (--sessions) -------------------------------
# Debian 13's criu with every library it loads and its own loader, copied
# into one directory (patchelf points the program at them), so that it runs
# on this Debian 12 host; file capabilities let it checkpoint and restore
# the caller's own processes: CAP_CHECKPOINT_RESTORE (Linux 5.9+), and
# CAP_SETPCAP where the bounding set is not full (containers, this kind of
# test machine): a restore drops from it what the image's lacks.
# It cannot dump or restore another user's processes (the kernel's ptrace
# check), nor restore as another uid (no CAP_SETUID).
readonly CRIU_DIR=/usr/local/lib/allot/criu.d
install_criu() {
    local root version
    root=$(release_field 24.11 root)
    ensure_trixie_root "$root" criu
    version=$(chroot "$root" dpkg-query -W -f='${Version}' criu)
    # CAP_SETPCAP only where a restore needs it: a bounding set that is not
    # full (criu drops from it what the image's lacks, and the kernel asks
    # for CAP_SETPCAP even to drop what is already gone).
    local caps=cap_checkpoint_restore bnd full
    bnd=$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)
    full=$(printf '%016x' $(((1 << ($(cat /proc/sys/kernel/cap_last_cap) + 1)) - 1)))
    [[ $bnd == "$full" ]] || caps=cap_setpcap,cap_checkpoint_restore # getcap's order
    if [[ -x $CRIU_DIR/criu && -f $CRIU_DIR/VERSION && $(cat "$CRIU_DIR/VERSION") == "$version" ]] \
        && [[ $(getcap "$CRIU_DIR/criu" | cut -d' ' -f2) == "$caps=ep" ]]; then
        step "criu $version present in $CRIU_DIR"
        return 0
    fi
    step "criu $version from $root into $CRIU_DIR"
    local scratch lib libs name
    mkdir -p "$(dirname "$CRIU_DIR")" # a fresh machine has no /usr/local/lib/allot yet
    scratch=$(mktemp -d "$(dirname "$CRIU_DIR")/criu.XXXXXX")
    cp "$root/usr/sbin/criu" "$scratch/criu"
    cp -L "$root/lib64/ld-linux-x86-64.so.2" "$scratch/ld-linux-x86-64.so.2"
    # What the Debian 13 loader loads for criu, from the root.
    libs=$("$root/lib64/ld-linux-x86-64.so.2" --library-path "$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu" --list "$root/usr/sbin/criu" \
        | awk '$1 !~ /\// && $2 == "=>" && $3 ~ /^\// { print $1 " " $3 }')
    while read -r name lib; do
        [[ -n $name ]] && cp -L "$lib" "$scratch/$name"
    done <<<"$libs"
    patchelf --set-interpreter "$CRIU_DIR/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$CRIU_DIR" "$scratch/criu"
    echo "$version" >"$scratch/VERSION"
    chmod 755 "$scratch"
    rm -rf "$CRIU_DIR"
    mv "$scratch" "$CRIU_DIR"
    setcap "$caps+ep" "$CRIU_DIR/criu"
    ln -sfn criu.d/criu "$(dirname "$CRIU_DIR")/criu"
    "$CRIU_DIR/criu" check >/dev/null 2>&1 || die "$CRIU_DIR/criu check fails on this kernel: $("$CRIU_DIR/criu" check 2>&1 | tail -n 3)"
    step "criu: $("$CRIU_DIR/criu" --version | head -n 1), capabilities $(getcap "$CRIU_DIR/criu" | cut -d' ' -f2)"
}
((sessions)) && install_criu

# --- 4. packaging tools -----------------------------------------------------------
if ((packaging)); then
    cargo_bin=${HOME:-/root}/.cargo/bin
    command -v cargo >/dev/null || export PATH="$cargo_bin:$PATH"
    if command -v cargo-deb >/dev/null && [[ $(cargo-deb --version 2>/dev/null) == *"$CARGO_DEB_VERSION"* ]]; then
        step "cargo-deb $CARGO_DEB_VERSION present"
    else
        step "cargo install cargo-deb $CARGO_DEB_VERSION (a few minutes on 2 cores)"
        run_logged cargo install --locked --version "$CARGO_DEB_VERSION" cargo-deb
    fi
fi
if ((docs)); then
    cargo_bin=${HOME:-/root}/.cargo/bin
    command -v cargo >/dev/null || export PATH="$cargo_bin:$PATH"
    if command -v mdbook >/dev/null && [[ $(mdbook --version 2>/dev/null) == *"$MDBOOK_VERSION"* ]]; then
        step "mdbook $MDBOOK_VERSION present"
    else
        step "cargo install mdbook $MDBOOK_VERSION (about two minutes on 2 cores)"
        run_logged cargo install --locked --version "$MDBOOK_VERSION" mdbook
    fi
fi

step "ok: Slurm ${want[*]}$( ((accounting)) && echo ' with slurmdbd and MariaDB'), munge, libclang, C compiler and source trees are ready"
