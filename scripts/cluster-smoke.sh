#!/usr/bin/env bash
# End-to-end check of scripts/cluster.sh against real Slurm daemons: bring a
# cluster up, run GPU jobs as root and as an ordinary user, fill every GPU,
# requeue a job, bring it down and make sure no daemon or job survives.
#
# Usage: scripts/cluster-smoke.sh [DIR]
#   DIR defaults to a fresh temporary directory, removed afterwards.
# Environment: ALLOT_PORT_BASE as for cluster.sh (default 17000).
# Prints one line per check and ends with "N passed, M failed"; exits non-zero
# if anything failed. Needs root and scripts/install-deps.sh's packages.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=$repo_root/scripts/cluster.sh
own_dir=0
if [[ $# -ge 1 ]]; then
    dir=$1
else
    dir=$(mktemp -d /tmp/allot-smoke.XXXXXX)
    own_dir=1
fi
passed=0 failed=0

check() { # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then
        passed=$((passed + 1)); printf 'ok    %s\n' "$what"
    else
        failed=$((failed + 1)); printf 'FAIL  %s\n' "$what"
    fi
}

cleanup() {
    "$cluster" down "$dir" >/dev/null 2>&1 || true
    if ((own_dir)); then rm -rf "$dir"; fi
}
trap cleanup EXIT

# Wait until no job of the given ids is pending/running any more (max $1 s).
wait_jobs_done() {
    local timeout=$1; shift
    local deadline=$((SECONDS + timeout)) ids
    ids=$(IFS=,; echo "$*")
    while ((SECONDS < deadline)); do
        [[ -z $(squeue -h -j "$ids" -t PD,R,CG,CF 2>/dev/null) ]] && return 0
        sleep 0.3
    done
    return 1
}

count_running() { squeue -h -t R | wc -l; }

start=$(date +%s%N)
"$cluster" up "$dir"
check "up in $((($(date +%s%N) - start) / 1000000)) ms" true
eval "$("$cluster" env "$dir")"

out=$dir/jobout
mkdir -p "$out"
chmod 1777 "$out"

# 1. A 2-GPU job as root and a 1-GPU job as nobody: both run and see their GPUs.
# shellcheck disable=SC2016  # expanded by the job's shell, not here
script='echo "user=$(id -un) node=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES"'
j1=$(sbatch --parsable -o "$out/%j.out" --gres=gpu:2 --wrap "$script")
j2=$(runuser -u nobody -- sbatch --parsable -D "$out" -o "$out/%j.out" --gres=gpu:1 --wrap "$script")
check "jobs finish" wait_jobs_done 30 "$j1" "$j2"
check "root job got 2 GPUs" grep -Eq '^user=root node=n[1-4] gpus=[0-7],[0-7]$' "$out/$j1.out"
check "nobody's job got 1 GPU" grep -Eq '^user=nobody node=n[1-4] gpus=[0-7]$' "$out/$j2.out"
check "both jobs COMPLETED" test "$(for j in "$j1" "$j2"; do scontrol show job "$j"; done | grep -c 'JobState=COMPLETED')" -eq 2

# 2. GPUs are the constraint: 4 nodes x 8 GPUs = 32 one-GPU jobs at once.
# A sleep length unique to this run, to find its job processes afterwards
# even while another cluster runs the same test.
nap=60.$$
ids=()
for _ in $(seq 33); do
    ids+=("$(sbatch --parsable -o /dev/null --gres=gpu:1 --wrap "sleep $nap")")
done
deadline=$((SECONDS + 20))
while (($(count_running) < 32 && SECONDS < deadline)); do sleep 0.3; done
check "32 one-GPU jobs run at once" test "$(count_running)" -eq 32
check "the 33rd waits for a GPU" test "$(squeue -h -t PD -o %r)" = Resources

# 3. Requeue: the job goes back to pending with Restarts=1, held for
#    cred_expire+1 = 11 s (BeginTime), and the pending one takes its GPU.
scontrol requeue "${ids[0]}"
sleep 1
check "requeued job pends on BeginTime" test "$(squeue -h -j "${ids[0]}" -o %r)" = BeginTime
check "requeued job has Restarts=1" bash -c "scontrol show job ${ids[0]} | grep -q 'Restarts=1'"
deadline=$((SECONDS + 10))
until [[ $(squeue -h -j "${ids[32]}" -o %T) == RUNNING ]] || ((SECONDS >= deadline)); do sleep 0.3; done
check "the waiting job starts on the freed GPU" test "$(squeue -h -j "${ids[32]}" -o %T)" = RUNNING

# 4. down with 32 jobs running: nothing of this cluster survives.
"$cluster" down "$dir"
leftovers() {
    local pid fd
    for pid in $(for n in slurmctld slurmd slurmstepd munged; do pgrep -x "$n"; done || true); do
        for fd in /proc/"$pid"/fd/*; do
            if [[ $(readlink "$fd" 2>/dev/null) == "$dir"/* ]]; then echo "$pid"; break; fi
        done
    done
}
check "no daemon or slurmstepd left" test -z "$(leftovers)"
check "no job process left" test -z "$(pgrep -fx "sleep $nap" || true)"
check "down is idempotent" "$cluster" down "$dir"

printf '%d passed, %d failed\n' "$passed" "$failed"
((failed == 0))
