#!/usr/bin/env bash
# The Slurm installations allot's own tests, demo and packages run against, in
# one table read by the scripts, by the cluster tests (`scripts/release.sh
# RELEASE FIELD`) and by slurm-sys/build.rs (its default tree when
# SLURM_SRC_DIR is not set). A site's own build needs no row: slurm-sys reads
# the version and the ABI from the tree it is given (docs/src/admin/slurm-releases.md, "Build for your site").
#
#   release  version  how the test cluster's Slurm is installed
#   22.05    22.05.8  Debian 12's packages on this host                  (CI)
#   24.11    24.11.5  Debian 13's packages in a Debian 13 root under     (CI)
#                     $ALLOT_TRIXIE_ROOT (default /var/cache/allot/trixie-root),
#                     made by scripts/install-deps.sh --slurm 24.11; the
#                     daemons run chrooted into it
#   25.05    25.05.8  SchedMD's tag slurm-25-05-8-1, built by             (by hand)
#   25.11    25.11.7  scripts/build-slurm.sh into /opt/slurm-VERSION,   (by hand)
#   26.05    26.05.3  as a site builds it; no registry serves these      (by hand)
#                     trees, so CI cannot: see the release table of docs/src/admin/slurm-releases.md
#
# Usage, as a command:   scripts/release.sh RELEASE FIELD
#                        scripts/release.sh RELEASE       (every field, FIELD=value a line)
#                        scripts/release.sh all|ci|site   (releases, one a line)
#                        scripts/release.sh default       (the default release)
# or sourced:            . scripts/release.sh; release_field 24.11 version
# RELEASE `default` is the default release (ALLOT_DEFAULT_RELEASE).
# FIELD: version; suite (the Debian suite, empty for a site build); root
#        (a root its daemons run chrooted into, empty for this host);
#        prefix (its installation prefix, empty for Debian's /usr); target
#        (cargo's target directory for its plugins, relative to the
#        repository); src (the source tree slurm-sys reads); include (its
#        installed public headers, empty for a configured tree); plugindir
#        (its PluginDir, as seen inside the root); deb (the package's
#        revision suffix: allot_VERSION-1~deb12_amd64.deb; empty: no package);
#        tested (ci or hand).

ALLOT_CI_RELEASES=(22.05 24.11)
ALLOT_SITE_RELEASES=(25.05 25.11 26.05)
ALLOT_RELEASES=("${ALLOT_CI_RELEASES[@]}" "${ALLOT_SITE_RELEASES[@]}")
ALLOT_DEFAULT_RELEASE=22.05

# release_field RELEASE FIELD
release_field() {
    local release=$1 field=$2 srcroot=${ALLOT_SLURM_SRC_ROOT:-/usr/local/src/allot}
    [[ $release == default ]] && release=$ALLOT_DEFAULT_RELEASE
    local version suite="" root="" prefix="" target src include="" plugindir deb="" tested=hand
    case $release in
        22.05)
            version=22.05.8 suite=bookworm target=target deb=deb12 tested=ci
            src=$srcroot/slurm-wlm-22.05.8 include=/usr/include
            plugindir=/usr/lib/x86_64-linux-gnu/slurm-wlm ;;
        24.11)
            version=24.11.5 suite=trixie target=target/slurm-24.11 deb=deb13 tested=ci
            root=${ALLOT_TRIXIE_ROOT:-/var/cache/allot/trixie-root}
            src=$srcroot/slurm-24.11.5 include=$srcroot/libslurm-dev-24.11.5/usr/include
            plugindir=/usr/lib/x86_64-linux-gnu/slurm-wlm ;;
        25.05) version=25.05.8 ;;
        25.11) version=25.11.7 ;;
        26.05) version=26.05.3 ;;
        *)
            echo "release: Slurm release '$release' is not in allot's test table (${ALLOT_RELEASES[*]}); to build for a Slurm of your own, set SLURM_SRC_DIR (docs/src/admin/slurm-releases.md, \"Build for your site\")" >&2
            return 1 ;;
    esac
    if [[ $tested == hand ]]; then
        # A site build: SchedMD's tree, configured and built in place by
        # scripts/build-slurm.sh, installed under its own prefix.
        prefix=${ALLOT_SITE_PREFIX_ROOT:-/opt}/slurm-$version
        src=$srcroot/schedmd/slurm-$version
        target=target/slurm-$release
        plugindir=$prefix/lib/slurm
    fi
    case $field in
        version) echo "$version" ;;
        suite) echo "$suite" ;;
        root) echo "$root" ;;
        prefix) echo "$prefix" ;;
        target) echo "$target" ;;
        src) echo "$src" ;;
        include) echo "$include" ;;
        plugindir) echo "$plugindir" ;;
        deb) echo "$deb" ;;
        tested) echo "$tested" ;;
        *)
            echo "release: unknown field '$field' (version, suite, root, prefix, target, src, include, plugindir, deb, tested)" >&2
            return 2 ;;
    esac
}

# Exits with a clear message unless RELEASE is in the table.
release_check() {
    local r
    for r in "${ALLOT_RELEASES[@]}"; do [[ $1 == "$r" ]] && return 0; done
    echo "Slurm release '$1' is not in allot's test table: use one of ${ALLOT_RELEASES[*]}" >&2
    exit 2
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    if [[ $# -eq 1 ]]; then
        case $1 in
            all) printf '%s\n' "${ALLOT_RELEASES[@]}"; exit 0 ;;
            ci) printf '%s\n' "${ALLOT_CI_RELEASES[@]}"; exit 0 ;;
            site) printf '%s\n' "${ALLOT_SITE_RELEASES[@]}"; exit 0 ;;
            default) echo "$ALLOT_DEFAULT_RELEASE"; exit 0 ;;
        esac
        for field in version suite root prefix target src include plugindir deb tested; do
            value=$(release_field "$1" "$field")
            echo "$field=$value"
        done
        exit 0
    fi
    [[ $# -eq 2 ]] || { sed -n '2,/^$/{s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
    release_field "$1" "$2"
fi
