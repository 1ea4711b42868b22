#!/usr/bin/env bash
# Builds a Slurm release from SchedMD's source as a site does, for allot's
# tests of the releases no registry here serves (25.05, 25.11, 26.05: see
# scripts/release.sh): configures it in place (so the tree is the configured
# tree slurm-sys reads), builds it and installs it under its own prefix.
#
# Usage: scripts/build-slurm.sh SOURCE
#   SOURCE  a SchedMD tarball (slurm-25.11.7.tar.bz2), an unpacked tree, or
#           a git checkout of SchedMD's repository at a release tag.
# The tree is copied to $ALLOT_SLURM_SRC_ROOT/schedmd/slurm-VERSION (default
# /usr/local/src/allot/schedmd) unless it is already there, configured with
#   --prefix=/opt/slurm-VERSION --sysconfdir=/etc/slurm-VERSION
#   --disable-debug --enable-multiple-slurmd
# (several slurmd on one host: the test clusters), built with make -j$(nproc)
# and installed. About 4 minutes on 2 cores. Needs root and build tools:
# gcc, make, python3, munge's headers and the MariaDB (or MySQL) client
# library for slurmdbd (on Debian `scripts/install-deps.sh --slurm 26.05`
# installs them, or apt-get install build-essential python3 libmunge-dev
# libmariadb-dev); they are checked before anything is built.
# Idempotent: an installed prefix whose slurmctld -V says VERSION is kept.
set -euo pipefail
say() { printf 'build-slurm: %s\n' "$*"; }
die() { printf 'build-slurm: ERROR: %s\n' "$*" >&2; exit 1; }
[[ $# -eq 1 ]] || { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || die "must run as root (it installs under /opt)"
source=$1
# What configure would otherwise find missing only minutes in, or not at all:
# without a MySQL client library Slurm builds without accounting_storage/mysql
# and slurmdbd fails at start.
missing=()
for tool in gcc make python3; do command -v "$tool" >/dev/null || missing+=("$tool"); done
# Where Slurm's configure looks for munge (auxdir/x_ac_munge.m4).
munge_h=""
for d in /usr /usr/local /opt/freeware /opt/munge; do [[ -f $d/include/munge.h ]] && munge_h=$d/include/munge.h; done
[[ -n $munge_h ]] || missing+=("munge's headers (munge.h: Debian libmunge-dev, RHEL munge-devel)")
command -v mariadb_config >/dev/null || command -v mysql_config >/dev/null \
    || missing+=("a MariaDB or MySQL client library (mariadb_config: Debian libmariadb-dev, RHEL mariadb-devel)")
((${#missing[@]} == 0)) || die "cannot build Slurm here, missing: $(IFS=';'; echo "${missing[*]}")"
srcroot=${ALLOT_SLURM_SRC_ROOT:-/usr/local/src/allot}/schedmd
mkdir -p "$srcroot"

meta_version() { awk '$1 == "Version:" { print $2; exit }' "$1"; }

scratch=""
trap '[[ -n $scratch ]] && rm -rf "$scratch"' EXIT
if [[ -f $source ]]; then
    scratch=$(mktemp -d "$srcroot/.unpack.XXXXXX")
    tar -xf "$source" -C "$scratch" || die "cannot unpack $source"
    tree=$(find "$scratch" -mindepth 1 -maxdepth 1 -type d | head -n 1)
elif [[ -d $source ]]; then
    tree=$(cd "$source" && pwd -P)
else
    die "$source is neither a tarball nor a directory"
fi
[[ -f $tree/META && -f $tree/src/slurmctld/slurmctld.h ]] || die "$source is not a Slurm source tree (no META, no src/slurmctld/slurmctld.h)"
version=$(meta_version "$tree/META")
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$tree/META names no version (found '$version')"
prefix=${ALLOT_SITE_PREFIX_ROOT:-/opt}/slurm-$version
dest=$srcroot/slurm-$version

if [[ -x $prefix/sbin/slurmctld ]] && [[ $("$prefix/sbin/slurmctld" -V 2>&1) == "slurm $version" ]] \
    && [[ -f $dest/config.h ]] && grep -q '^#define MULTIPLE_SLURMD 1' "$dest/config.h"; then
    say "Slurm $version already installed in $prefix (tree $dest)"
    exit 0
fi
if [[ $tree != "$dest" ]]; then
    rm -rf "$dest"
    mkdir -p "$dest"
    # A git checkout: the tracked files only (no .git, no stale build).
    if [[ -e $tree/.git ]]; then
        git -C "$tree" archive HEAD | tar -x -C "$dest"
    else
        cp -a "$tree/." "$dest/"
    fi
fi
cd "$dest"
started=$SECONDS
say "Slurm $version: configure (prefix $prefix; log $dest/configure.log)"
./configure --prefix="$prefix" --sysconfdir="/etc/slurm-$version" --disable-debug --enable-multiple-slurmd \
    >configure.log 2>&1 || { tail -n 30 configure.log >&2; die "configure failed (see $dest/configure.log)"; }
say "Slurm $version: make -j$(nproc) (log $dest/make.log)"
make -j"$(nproc)" >make.log 2>&1 || { tail -n 30 make.log >&2; die "make failed (see $dest/make.log)"; }
make install >install.log 2>&1 || { tail -n 30 install.log >&2; die "make install failed (see $dest/install.log)"; }
got=$("$prefix/sbin/slurmctld" -V 2>&1)
[[ $got == "slurm $version" ]] || die "the installed slurmctld says '$got', not 'slurm $version'"
say "Slurm $version installed in $prefix in $((SECONDS - started)) s; its configured tree: $dest"
