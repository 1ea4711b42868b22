#!/usr/bin/env bash
# allot's demo, from a fresh Debian bookworm machine, as root:
#
#   1. installs what it needs (scripts/install-deps.sh) and builds allot;
#   2. brings up a real Slurm cluster on this host (4 nodes x 8 fake GPUs,
#      n4 kept for small jobs as allot ships: partition small of all four,
#      gpu of n1-n3) with allot's four plugins, and syncs the example lab's budget tree
#      (conf/budgets.toml: 3 programs, 10 projects, 24 teams);
#   3. submits a mixed workload from several teams: idle "squatting" jobs that
#      declare min_runtime=0 (unallocated), multi-node-sized training jobs,
#      and short debug jobs that arrive when the cluster is full;
#   4. waits about three minutes, then prints who ran, who was preempted and
#      why, what each budget was charged, and how each fared against what it
#      was owed (allot report); and brings the cluster down.
#
# Usage: scripts/demo.sh [--keep] [--installed]
#   --keep       leave the cluster up to explore:
#                eval "$(scripts/cluster.sh env /tmp/allot-demo)"; squeue; allot --ledger ...
#   --installed  use allot as its Debian package installed it (the allot
#                command and the plugins in Slurm's PluginDir) instead of
#                building this tree (scripts/package.sh; the package tests).
# Environment: ALLOT_SLURM_RELEASE (22.05, the default, or 24.11: Debian 13's
#   Slurm in its root, scripts/release.sh), ALLOT_DEMO_DIR (default
#   /tmp/allot-demo, inside that root for 24.11), ALLOT_PORT_BASE (17500).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
# shellcheck source=scripts/release.sh
. scripts/release.sh

keep=no installed=no
for arg in "$@"; do
    case $arg in
        --keep) keep=yes ;;
        --installed) installed=yes ;;
        *) echo "demo: unknown argument '$arg' (--keep, --installed)" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "demo: run as root (it runs slurmd and submits as the lab's users)" >&2; exit 1; }

release=${ALLOT_SLURM_RELEASE:-$ALLOT_DEFAULT_RELEASE}
release_check "$release"
export ALLOT_SLURM_RELEASE=$release
# The release's Slurm runs here, or chrooted into its root (IN_ROOT).
root=$(release_field "$release" root)
IN_ROOT=()
[[ -n $root ]] && IN_ROOT=(chroot "$root")
DIR=${ALLOT_DEMO_DIR:-$root/tmp/allot-demo}
INNER=${DIR#"$root"}
export ALLOT_PORT_BASE=${ALLOT_PORT_BASE:-17500}
say() { printf '\ndemo: %s\n' "$*"; }

if [[ $installed == yes ]]; then
    say "installing dependencies (Slurm $(release_field "$release" version)); allot as installed"
    scripts/install-deps.sh --slurm "$release"
    "${IN_ROOT[@]}" test -x /usr/bin/allot || { echo "demo: --installed: no /usr/bin/allot${root:+ in $root}: install allot's package first" >&2; exit 1; }
    allot_bin=/usr/bin/allot
    plugins=installed
else
    say "installing dependencies and building allot (release; Slurm $(release_field "$release" version))"
    scripts/install-deps.sh --slurm "$release"
    cargo build --release --locked -q -p allot-cli
    ALLOT_SLURM_RELEASE=$release CARGO_TARGET_DIR=$(release_field "$release" target) cargo build --release --locked -q \
        -p priority-allot -p job-submit-allot -p preempt-allot -p jobcomp-allot
    allot_bin=$repo/target/release/allot
    plugins=allot
fi
ledger=$INNER/ledger.db
# The allot command, on the demo's ledger: the package's inside the release's
# root (it reads the cluster's slurm.conf), or this tree's here.
allot() {
    if [[ $installed == yes ]]; then
        "${IN_ROOT[@]}" env SLURM_CONF="$INNER/etc/slurm.conf" "$allot_bin" --ledger "$ledger" "$@"
    else
        "$allot_bin" --ledger "$DIR/ledger.db" "$@"
    fi
}
# A Slurm command of the demo's cluster, as root or (-u USER) as a lab member.
slurm() {
    local user=
    if [[ $1 == -u ]]; then user=$2; shift 2; fi
    if [[ -n $user ]]; then
        "${IN_ROOT[@]}" env --chdir="$INNER/jobs" SLURM_CONF="$INNER/etc/slurm.conf" runuser -u "$user" -- "$@"
    else
        "${IN_ROOT[@]}" env --chdir="$INNER/jobs" SLURM_CONF="$INNER/etc/slurm.conf" "$@"
    fi
}

# The workload: seconds after the start, user (a member of conf/budgets.toml),
# kind, GPUs, contract, seconds of work.
WORKLOAD=$(cat <<'EOF'
0   ivy    squat     8  min_runtime=0            600
0   wes    squat     8  min_runtime=0            600
0   ravi   training  8  min_runtime=1m           150
0   zoe    training  8  min_runtime=1m           150
25  felix  training  8  min_runtime=2m           120
30  tomas  debug     1  min_runtime=5m           20
35  olga   debug     2  min_runtime=5m           15
40  hana   debug     1  min_runtime=5m           25
45  sam    debug     1  min_runtime=2m           20
70  paula  training  8  min_runtime=1m           100
80  priya  debug     2  min_runtime=5m           20
90  jon    debug     1  min_runtime=5m           20
EOF
)

for user in $(awk '{print $2}' <<<"$WORKLOAD" | sort -u); do
    id "$user" >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin "$user"
done

if [[ -d $DIR/run ]]; then scripts/cluster.sh down "$DIR" >/dev/null 2>&1 || true; fi
rm -rf "$DIR"
mkdir -p "$DIR"
cp conf/budgets.toml "$DIR/budgets.toml"

say "syncing the example lab's budget into the ledger"
# (The path as the command sees it: inside the root for the package's.)
budget_file=$DIR/budgets.toml
[[ $installed == yes ]] && budget_file=$INNER/budgets.toml
allot sync "$budget_file" | sed -n 1p

say "bringing up the cluster with allot's plugins, n4 kept for small jobs ($([[ $installed == yes ]] && echo "as installed in Slurm's PluginDir" || echo "from this tree"))"
scripts/cluster.sh up "$DIR" --plugins "$plugins"
if [[ $keep == no ]]; then
    trap 'scripts/cluster.sh down "$DIR" >/dev/null 2>&1 || true' EXIT
fi

say "submitting the workload (squatters and training first, debug jobs into a full cluster)"
start=$(date +%s)
while read -r at user kind gpus contract work; do
    [[ -z $at ]] && continue
    while (( $(date +%s) - start < at )); do sleep 1; done
    id=$(slurm -u "$user" sbatch --parsable --requeue -o /dev/null -e /dev/null \
        --gres="gpu:$gpus" --comment="$kind $contract" --job-name="$kind" --wrap "sleep $work")
    printf '  +%3ss  job %-3s %-6s %-8s %d GPU(s)  %s\n' "$at" "$id" "$user" "$kind" "$gpus" "$contract"
done <<<"$WORKLOAD"

end=$((start + 200))
while (( $(date +%s) < end )); do
    sleep 30
    printf '\n  at +%ss:\n' "$(( $(date +%s) - start ))"
    slurm squeue -o '    %.4i %.6u %.12a %.9j %.8T %.10Q %.20R' | head -20
done
sleep 3

say "who ran, and who was preempted"
printf '  %-4s %-6s %-30s %-8s %-22s %-9s %-8s %s\n' JOB USER BUDGET KIND CONTRACT STATE RESTARTS WAIT
# WAIT: from submission to the first start, both as the ledger recorded them
# (Slurm resets a job's SubmitTime when it requeues it).
slurm scontrol show job -o | while read -r line; do
    get() { grep -o "\b$1=[^ ]*" <<<"$line" | sed -n 1p | cut -d= -f2-; }
    id=$(get JobId)
    contract=$(grep -o 'min_runtime=[^ ]*' <<<"$line" | sed -n 1p)
    why=$(allot why "$id" 2>/dev/null || true)
    submitted=$(awk '/^  submitted/ {print $2}' <<<"$why" | sed -n 1p)
    first=$(awk '/^  run 1:/ {print $6}' <<<"$why" | sed -n 1p)
    wait="-"
    if [[ -n $submitted && -n $first ]]; then
        wait="$(( $(date -d "$first" +%s) - $(date -d "$submitted" +%s) ))s"
    fi
    leaf=$(awk -F'budget ' '/^  user/ {print $2}' <<<"$why" | sed -n 1p)
    printf '  %-4s %-6s %-30s %-8s %-22s %-9s %-8s %s\n' "$id" "$(get UserId | cut -d'(' -f1)" "${leaf:-?}" "$(get JobName)" \
        "$contract" "$(get JobState)" "$(get Restarts)" "$wait"
done

preempted=$(slurm scontrol show job -o | awk '/Restarts=[1-9]/ && !found {sub("JobId=", "", $1); print $1; found = 1}')
if [[ -n $preempted ]]; then
    say "why job $preempted was preempted (allot why $preempted)"
    allot why "$preempted"
fi

say "what each budget was charged (allot usage --window 10m; unallocated time is never charged)"
allot usage --window 10m | awk 'NR <= 2 || $4 != "0.00" || $6 != "0.00"'

say "how each budget fared against what it was owed, given its demand (allot report --since 15m)"
# Where the command writes: the package's runs inside the release's root.
out=$DIR
[[ $installed == yes ]] && out=$INNER
allot report --since 15m --json "$out/report.json" --plots "$out/plots"

if [[ $keep == yes ]]; then
    say "the cluster is still up: eval \"\$(scripts/cluster.sh env $DIR)\"; scripts/cluster.sh down $DIR when done"
else
    say "bringing the cluster down"
fi
