#!/usr/bin/env bash
# Install allot's four Slurm plugins, built by
#     cargo build --release -p priority-allot -p job-submit-allot -p preempt-allot -p jobcomp-allot
# into a Slurm PluginDir, under the names slurmctld looks for:
#     libpriority_allot.so   -> PLUGINDIR/priority_allot.so    (PriorityType=priority/allot)
#     libjob_submit_allot.so -> PLUGINDIR/job_submit_allot.so  (JobSubmitPlugins=allot)
#     libpreempt_allot.so    -> PLUGINDIR/preempt_allot.so     (PreemptType=preempt/allot)
#     libjobcomp_allot.so    -> PLUGINDIR/jobcomp_allot.so     (JobCompType=jobcomp/allot)
#
# Usage: scripts/install-plugins.sh PLUGINDIR
#   The .so files are taken from cargo's target directory ($CARGO_TARGET_DIR,
#   else the repository's target/), under release/.
#
# Each file is copied to a temporary name in PLUGINDIR and then renamed over
# the old one: a running slurmctld (or sshare) that has the old file mapped
# keeps its copy intact, whereas overwriting in place can crash it. Renaming
# does not make slurmctld load the new code: restart it (scontrol reconfigure
# does not reload plugins).
set -euo pipefail

readonly PLUGINS=(priority_allot job_submit_allot preempt_allot jobcomp_allot)
readonly CRATES=(priority-allot job-submit-allot preempt-allot jobcomp-allot)

die() { printf 'install-plugins: ERROR: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo_root/target}
plugin_dir=
while [[ $# -gt 0 ]]; do
    case $1 in
        -h|--help) usage ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [[ -z $plugin_dir ]] || die "one PLUGINDIR only (got '$plugin_dir' and '$1')"; plugin_dir=$1; shift ;;
    esac
done
[[ -n $plugin_dir ]] || usage
# A relative CARGO_TARGET_DIR is relative to where cargo ran, normally the repo.
[[ $target_dir == /* ]] || target_dir=$repo_root/$target_dir
release_dir=$target_dir/release

# Check all of them before touching PLUGINDIR: never install a partial set.
missing=()
for p in "${PLUGINS[@]}"; do
    [[ -f $release_dir/lib$p.so ]] || missing+=("$release_dir/lib$p.so")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    build_args=$(printf -- ' -p %s' "${CRATES[@]}")
    die "missing ${missing[*]}
  build them first: (cd $repo_root && cargo build --release$build_args)
  or set CARGO_TARGET_DIR if cargo built them elsewhere"
fi

mkdir -p "$plugin_dir"
for p in "${PLUGINS[@]}"; do
    src=$release_dir/lib$p.so
    dst=$plugin_dir/$p.so
    # Same directory, so the rename is atomic (same filesystem).
    tmp=$(mktemp "$plugin_dir/.$p.so.XXXXXX")
    if ! cp "$src" "$tmp"; then
        rm -f "$tmp"
        die "copying $src to $plugin_dir failed"
    fi
    chmod 0755 "$tmp"
    mv -f "$tmp" "$dst"
    printf 'install-plugins: %s -> %s\n' "$src" "$dst"
done
