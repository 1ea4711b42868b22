#!/usr/bin/env bash
# What a preemption costs an interactive session, with `allot session`'s
# checkpoint and restore and without: on the single-host test cluster
# (Slurm 22.05, allot's plugins), a Python session
# holds SIZE_MB of memory (every page written) and counts in a loop on one
# CPU; after WORK seconds it gets the grace signal (as at a preemption) and
# its job is requeued. Per round it prints:
#
#   restore  the checkpoint's size and time, the restore's time, and the
#            session's CPU-seconds before the signal and the share of its
#            count that survived (100%: nothing to redo);
#   plain    the same session with a criu that cannot dump (/bin/false as
#            ALLOT_CRIU): the fall-back to the plain grace signal, and the
#            count after the requeue (0: every CPU-second is lost).
#
# Usage: scripts/bench-session.sh [SIZE_MB] [WORK] [ROUNDS]   (defaults 1024
# MB, 30 s, 2 rounds). As root; needs scripts/install-deps.sh --sessions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
size_mb=${1:-1024}
work=${2:-30}
rounds=${3:-2}
[[ $(id -u) -eq 0 ]] || { echo "bench-session: run as root" >&2; exit 1; }

scripts/install-deps.sh --sessions >/dev/null
cargo build --release --locked -q -p priority-allot -p job-submit-allot -p preempt-allot -p jobcomp-allot -p allot-cli
allot="$repo/target/release/allot"
criu=${ALLOT_CRIU:-/usr/local/lib/allot/criu}
id alice >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin alice

DIR=/tmp/allot-bench-session
export ALLOT_PORT_BASE=17900
scripts/cluster.sh down "$DIR" >/dev/null 2>&1 || true
scripts/cluster.sh up "$DIR" --plugins allot >/dev/null
trap 'scripts/cluster.sh down "$DIR" >/dev/null 2>&1 || true' EXIT
export SLURM_CONF=$DIR/etc/slurm.conf
cat >"$DIR/budget.toml" <<'EOF'
[cluster]
min_runtime_cap = "8h"
[budget]
owners = ["root"]
[budget.lab]
share = 1
accounts = ["lab"]
members = ["alice"]
EOF
"$allot" --ledger "$DIR/ledger.db" sync "$DIR/budget.toml" >/dev/null
# slurmctld reads the budget at its next recompute.
for ((i = 0; i < 100; i++)); do
    runuser -u alice -- env SLURM_CONF="$SLURM_CONF" sbatch --test-only --account=lab --wrap true >/dev/null 2>&1 && break
    sleep 0.3
done
store=$DIR/jobs/sessions/alice
mkdir -p "$DIR/jobs/sessions" && chmod 1777 "$DIR/jobs/sessions"

as_alice() { (cd "$DIR/jobs" && runuser -u alice -- env SLURM_CONF="$SLURM_CONF" PATH="$PATH" "$@"); }
session() { as_alice "$allot" session "$1" --store "$store" "${@:2}"; }
log_of() { cat "$store/$1/session.log" 2>/dev/null || true; }
wait_log() { # name text count
    local i
    for ((i = 0; i < 600; i++)); do
        (($(log_of "$1" | grep -c -- "$2") >= $3)) && return 0
        sleep 0.2
    done
    echo "bench-session: timed out waiting for '$2' in $1's log:" >&2
    log_of "$1" >&2
    exit 1
}
# The session's Python (one session at a time here).
python_pid() { pgrep -u alice -x python3 | head -n 1; }
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
ask() { # name expr -> its value
    local out=$store/$1/answer
    rm -f "$out"
    session send "$1" "open('$out', 'w').write(str($2))" >/dev/null
    local i
    for ((i = 0; i < 300; i++)); do [[ -s $out ]] && break; sleep 0.1; done
    cat "$out"
}

one() { # kind round
    local kind=$1 round=$2 name="bench-$1-$2"
    local criu_arg=$criu
    [[ $kind == plain ]] && criu_arg=/bin/false
    local out job
    out=$(session start "$name" --criu "$criu_arg" --min-runtime 1m --sbatch=--account=lab -- python3 -i -q)
    job=$(sed -n 's/.*: job \([0-9]*\),.*/\1/p' <<<"$out")
    wait_log "$name" "started python3" 1
    session send "$name" "import threading; b = bytearray(b'x') * ($size_mb << 20); n = [0]" >/dev/null
    session send "$name" "exec('def count():\\n    while True: n[0] += 1'); threading.Thread(target=count, daemon=True).start()" >/dev/null
    sleep "$work"
    local cpu before
    cpu=$(cpu_seconds "$(python_pid "$name")")
    before=$(ask "$name" "n[0]")
    # The grace signal as at a preemption (the batch shell's --signal), then
    # the requeue the end of the grace time brings.
    scancel --signal=USR1 --batch "$job"
    if [[ $kind == restore ]]; then wait_log "$name" "checkpointed session" 1; else wait_log "$name" "checkpoint of session .* failed" 1; fi
    for ((i = 0; i < 100; i++)); do [[ $(squeue -h -j "$job" -o %T) == "" ]] && break; sleep 0.2; done
    scontrol requeue "$job"
    if [[ $kind == restore ]]; then wait_log "$name" "restored session" 1; else wait_log "$name" "started python3" 2; fi
    local after
    if [[ $kind == restore ]]; then after=$(ask "$name" "n[0]"); else after=0; fi
    local log dump_s mb restore_s
    log=$(log_of "$name")
    dump_s=$(sed -n 's/.*checkpointed session [^ ]* in \([0-9.]*\) s (\([0-9.]*\) MB).*/\1/p' <<<"$log")
    mb=$(sed -n 's/.*checkpointed session [^ ]* in [0-9.]* s (\([0-9.]*\) MB).*/\1/p' <<<"$log")
    restore_s=$(sed -n 's/.*restored session .* in \([0-9.]*\) s from.*/\1/p' <<<"$log")
    awk -v k="$kind" -v r="$round" -v cpu="$cpu" -v b="$before" -v a="$after" -v d="${dump_s:--}" -v m="${mb:--}" -v rs="${restore_s:--}" 'BEGIN {
        kept = (b > 0 ? 100 * (a >= b ? 1 : a / b) : 0)
        lost = cpu * (100 - kept) / 100
        printf "%-8s %5d %12s %10s %10s %12.1f %14.0f%% %14.1f\n", k, r, m, d, rs, cpu, kept, lost }'
    session stop "$name" >/dev/null
}

echo "session of ${size_mb} MB written, counting on one CPU for ${work} s, then the grace signal and a requeue (Slurm $(sinfo -V | cut -d' ' -f2))"
printf "%-8s %5s %12s %10s %10s %12s %15s %14s\n" kind round "image (MB)" "dump (s)" "restore (s)" "CPU-s before" "count kept" "CPU-s lost"
for ((r = 1; r <= rounds; r++)); do
    one restore "$r"
    one plain "$r"
done
