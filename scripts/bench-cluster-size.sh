#!/usr/bin/env bash
# What a test cluster of each size costs on this machine: for each node
# count, brings up a cluster with allot's plugins (scripts/cluster.sh,
# ALLOT_NODES, 8 GPUs a node), then measures
#   - the time `up` takes, until every node is idle;
#   - the resident memory of its daemons (slurmctld, the slurmd, munged);
#   - their CPU at idle over IDLE seconds, as a share of one core;
#   - one job on every node of the default partition (sbatch -N ALL
#     --gres=gpu:8, 5 s), from submission to its run in the ledger, and
#     whether the ledger charged it exactly nodes x 8 GPUs x its runtime;
# and takes it down. Prints one table row per size.
#
# Usage: scripts/bench-cluster-size.sh [SIZES...]  (default 4 16 64 128)
# Environment: IDLE (seconds, default 30). Slurm 22.05 (this host's). As
# root, after scripts/install-deps.sh and a release build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
[[ $(id -u) -eq 0 ]] || { echo "bench-cluster-size: run as root" >&2; exit 1; }
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(4 16 64 128)
idle=${IDLE:-30}
export ALLOT_SLURM_RELEASE=22.05
base_dir=/tmp/allot-bench-size
budget=$(mktemp)
trap 'rm -f "$budget"' EXIT
cat >"$budget" <<'EOF'
[cluster]
lookback = "1h"
[budget]
owners = ["root"]
[budget.lab]
share = 1
accounts = ["lab"]
members = ["alice"]
EOF
id alice >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin alice

# CPU ticks (utime + stime) of the cluster's recorded daemons.
ticks() {
    local total=0 t
    for f in "$1"/pids/*.pid; do
        t=$(awk '{print $14 + $15}' "/proc/$(cat "$f")/stat" 2>/dev/null) || continue
        total=$((total + t))
    done
    echo "$total"
}
# Resident memory (MB) of the cluster's recorded daemons.
rss_mb() {
    local total=0 r
    for f in "$1"/pids/*.pid; do
        r=$(awk '/^VmRSS:/ {print $2}' "/proc/$(cat "$f")/status" 2>/dev/null) || continue
        total=$((total + r))
    done
    echo $((total / 1024))
}

printf '| nodes | GPUs | up (s) | memory (MB): slurmd each / all daemons | CPU at idle (%% of a core) | one job on every node: submitted to charged (s) | charged exactly |\n'
printf '|---:|---:|---:|---:|---:|---:|---|\n'
for n in "${sizes[@]}"; do
    dir=$base_dir-$n
    export ALLOT_NODES=$n ALLOT_PORT_BASE=18000 ALLOT_UP_TIMEOUT=600
    t0=$(date +%s.%N)
    scripts/cluster.sh up "$dir" --plugins allot >/dev/null
    t1=$(date +%s.%N)
    "$repo/target/release/allot" --ledger "$dir/ledger.db" sync "$budget" >/dev/null
    mem=$(rss_mb "$dir")
    a=$(ticks "$dir")
    sleep "$idle"
    b=$(ticks "$dir")
    hz=$(getconf CLK_TCK)
    cpu=$(echo "scale=2; 100 * ($b - $a) / $hz / $idle" | bc)
    each=$(echo "scale=1; $(awk '/^VmRSS:/ {print $2}' "/proc/$(cat "$dir/pids/slurmd-n1.pid")/status") / 1024" | bc)
    eval "$(scripts/cluster.sh env "$dir")"
    nodes=$(sinfo -h -p gpu -o %D)
    sleep 3 # the plugins read the new budget within 2 s
    s0=$(date +%s.%N)
    job=$(cd "$dir/jobs" && runuser -u alice -- sbatch --parsable -o /dev/null -N "$nodes" --gres=gpu:8 --comment=min_runtime=5s --wrap 'sleep 5')
    row=""
    for _ in $(seq 1 120); do
        row=$(sqlite3 "$dir/ledger.db" "select run_start, run_end, gpus from runs where job_id = $job and run_end is not null" 2>/dev/null || true)
        [[ -n $row ]] && break
        sleep 1
    done
    s1=$(date +%s.%N)
    IFS='|' read -r start end gpus <<<"$row"
    exact=no
    slurm=$(SLURM_TIME_FORMAT=%s scontrol show job -o "$job" | grep -oE ' (StartTime|EndTime)=[0-9]+' | cut -d= -f2 | paste -sd' ')
    [[ -n $row && $gpus -eq $((nodes * 8)) && "$start $end" == "$slurm" ]] && exact="yes: $nodes nodes x 8 GPUs x $((end - start)) s, Slurm's start and end"
    printf '| %d | %d | %.1f | %s / %d | %s | %.0f | %s |\n' "$n" $((n * 8)) "$(echo "$t1 - $t0" | bc)" "$each" "$mem" "$cpu" "$(echo "$s1 - $s0" | bc)" "$exact"
    scripts/cluster.sh down "$dir" >/dev/null
done
