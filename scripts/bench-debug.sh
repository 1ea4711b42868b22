#!/usr/bin/env bash
# Do short debug jobs start within a minute on a busy cluster? Measured on
# the single-host test cluster (4 nodes x 8 GPUs), in one run, for allot
# without kept nodes (allot: ALLOT_SMALL_JOB_NODES=0, SmallJobPartition=),
# allot as shipped, n4 kept for small jobs (allot-kept: ALLOT_SMALL_JOB_NODES=1,
# allot.conf SmallJobPartition=small) and Slurm's own plugins
# (priority/basic, preempt/none), same workload, all with the shipped
# settings (conf/slurm-*.conf, conf/allot.conf):
#
#   1. the 32 GPUs are filled with allocated training jobs: one whole-node
#      job of each over-served team (vision, language) that is past its
#      10-minute minimum runtime when the debug jobs come, one of robotics
#      inside its 8 hours, and on n4 language's 6-GPU job (8 hours) beside
#      two unallocated (min_runtime=0) 1-GPU jobs of vision (allot-kept: n4
#      takes no 8-hour job, so language's 6 GPUs there are unallocated too);
#   2. 5,000 pending 8-GPU training jobs of the over-served teams (an
#      under-served team's backlog would take their nodes the moment their
#      minimum runtimes end, which is the budget at work but leaves nothing
#      to measure);
#   3. 20 debug jobs (1-2 GPUs, --time=10, min_runtime=10m, priority=high
#      within their team), one every INTERVAL seconds, alternating between
#      teams under their share (robotics, speech) and over it (vision,
#      language: the ledger holds their heavy use of the last days);
#   4. prints each debug job's wait (submission to start; from Slurm's own
#      record of each run end, EpilogSlurmctld, since finished jobs leave
#      slurmctld's memory), p50/p90 per group and for all 20, and the
#      training jobs' preemptions during the debug phase.
#
# No --priority=TOP and no admin action. Usage: scripts/bench-debug.sh
# [INTERVAL] [WAIT]   (defaults 15 s between debug jobs; each may wait up to
# 180 s before it counts as not started). As root. BENCH_CONFIGS="allot"
# runs one configuration only (of allot, allot-kept, stock).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
interval=${1:-15}
max_wait=${2:-180}
[[ $(id -u) -eq 0 ]] || { echo "bench-debug: run as root" >&2; exit 1; }

scripts/install-deps.sh >/dev/null
cargo build --release --locked -q -p priority-allot -p job-submit-allot -p preempt-allot -p jobcomp-allot -p allot-cli
allot="$repo/target/release/allot"
for u in vic lana rob sue; do id "$u" >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin "$u"; done

DIR=/tmp/allot-bench-debug
# The shipped settings: conf/slurm-*.conf's scheduler parameters and
# conf/allot.conf's recompute period and grace.
export ALLOT_PORT_BASE=17800 ALLOT_SHIPPED_SETTINGS=1 ALLOT_RUN_LOG=1
PENDING=5000

budget=$(mktemp)
cat >"$budget" <<'EOF'
[cluster]
lookback = "7d"
min_runtime_cap = "8h"
[budget]
owners = ["root"]
[budget.lab]
share = 1
[budget.lab.vision]
share = 1
accounts = ["vision"]
members = ["vic"]
[budget.lab.language]
share = 1
accounts = ["language"]
members = ["lana"]
[budget.lab.robotics]
share = 1
accounts = ["robotics"]
members = ["rob"]
[budget.lab.speech]
share = 1
accounts = ["speech"]
members = ["sue"]
EOF

# Vision and language used 16 GPUs each for the last six days: 1.7 times
# their quarter of 32 GPUs over the 7-day window. Robotics and speech used
# nothing.
plant_history() {
    python3 - "$1" <<'EOF'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
now = int(time.time())
for i, leaf in enumerate(["lab/vision", "lab/language"]):
    for k in range(2):
        db.execute("INSERT INTO runs (job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason) "
                   "VALUES (?, ?, ?, ?, ?, ?, 8, 1, 'finished')",
                   (900000 + 10 * i + k, now - 6 * 86400, now - 600, leaf, leaf.split("/")[1], "history"))
db.commit()
EOF
}

sb() { # user args... -> job id
    local user=$1; shift
    runuser -u "$user" -- sbatch --parsable -o /dev/null -e /dev/null "$@"
}

run_config() { # config -> lines "group job wait_s|none" on stdout, progress on stderr
    local config=$1 plugins=${1%-kept} kept=0 n4_minrt="8h"
    [[ $config == *-kept ]] && kept=1 n4_minrt="0"
    scripts/cluster.sh down "$DIR" >/dev/null 2>&1 || true
    rm -rf "$DIR"; mkdir -p "$DIR"
    "$allot" --ledger "$DIR/ledger.db" sync "$budget" >/dev/null
    plant_history "$DIR/ledger.db"
    ALLOT_SMALL_JOB_NODES=$kept scripts/cluster.sh up "$DIR" --plugins "$plugins" >/dev/null
    eval "$(scripts/cluster.sh env "$DIR")"
    cd "$DIR/jobs"

    # 1. Fill the cluster: whole-node training jobs protected for 10 minutes
    # (as long as a debug job's guarantee: rule 5 lets a teammate's debug
    # job take them once that is over) or 8 hours, and on n4 a 6-GPU
    # protected job beside two unallocated 1-GPU jobs: GPUs that no 8-GPU
    # job can use.
    sb vic  --account=vision   -w n1 --gres=gpu:8 --comment="min_runtime=10m" --wrap "sleep 7200" >/dev/null
    sb lana --account=language -w n2 --gres=gpu:8 --comment="min_runtime=10m" --wrap "sleep 7200" >/dev/null
    sb rob  --account=robotics -w n3 --gres=gpu:8 --comment="min_runtime=8h" --wrap "sleep 7200" >/dev/null
    sb lana --account=language -w n4 --gres=gpu:6 --comment="min_runtime=$n4_minrt" --wrap "sleep 7200" >/dev/null
    sb vic  --account=vision   -w n4 --gres=gpu:1 --comment="min_runtime=0" --wrap "sleep 7200" >/dev/null
    sb vic  --account=vision   -w n4 --gres=gpu:1 --comment="min_runtime=0" --wrap "sleep 7200" >/dev/null
    for _ in $(seq 1 30); do
        [[ $(squeue -h -t R | wc -l) -eq 6 ]] && break
        sleep 1
    done
    local filled
    filled=$(date +%s)
    echo "bench-debug: $config: cluster full; queueing $PENDING training jobs" >&2
    # 2. The backlog, as root on the users' accounts (fast; job_submit checks them all).
    local users=(vic lana) accounts=(vision language) i
    for ((i = 0; i < PENDING; i++)); do
        sbatch --parsable -o /dev/null -e /dev/null --uid="${users[i % 2]}" --account="${accounts[i % 2]}" \
            --gres=gpu:8 --comment="min_runtime=1h" --wrap "sleep 3600" >/dev/null
    done
    # The 10-minute protections end (counted from the fill's start).
    local left=$((filled + 610 - $(date +%s)))
    ((left > 0)) && sleep "$left"
    show() { [[ ${BENCH_VERBOSE:-0} == 1 ]] && { echo "bench-debug: $config: $1" >&2; squeue -t R -o '    %.5i %.5u %.9a %.6b %.8M %k' >&2; }; return 0; }
    show "running before the debug jobs"
    local restarts_before
    restarts_before=$(scontrol show job -o | grep -c 'Restarts=[1-9]' || true)

    # 3. Debug jobs, alternating under-served and over-served teams.
    local debug_users=(rob vic sue lana) debug_accounts=(robotics vision speech language)
    local ids=() groups=() k user
    for ((k = 0; k < 20; k++)); do
        user=${debug_users[k % 4]}
        local gpus=$((1 + k % 2))
        ids+=("$(sb "$user" --account="${debug_accounts[k % 4]}" --gres="gpu:$gpus" --time=10 \
            --comment="debug min_runtime=10m priority=high" --wrap "sleep 60")")
        case $user in rob | sue) groups+=(under) ;; *) groups+=(over) ;; esac
        sleep "$interval"
    done
    show "running after the last debug job was submitted"
    # 4. Let the last ones have their chance, then read the starts.
    sleep "$max_wait"
    local restarts_after
    restarts_after=$(scontrol show job -o | grep -c 'Restarts=[1-9]' || true)
    for ((k = 0; k < 20; k++)); do
        # The first run's record (a finished job may be gone from
        # slurmctld), else the job as it is now (still running, or pending).
        local line submit start state
        line=$(grep -m1 "^JobId=${ids[k]} " "$DIR/log/run-ends.log" || SLURM_TIME_FORMAT=%s scontrol show job -o "${ids[k]}" 2>/dev/null || true)
        submit=$(grep -o 'SubmitTime=[^ ]*' <<<"$line" | cut -d= -f2)
        start=$(grep -o 'StartTime=[^ ]*' <<<"$line" | cut -d= -f2)
        state=$(grep -o 'JobState=[^ ]*' <<<"$line" | cut -d= -f2)
        if [[ -z $line || $state == PENDING || ! $start =~ ^[0-9]+$ ]]; then
            echo "${groups[k]} ${ids[k]} none"
        else
            echo "${groups[k]} ${ids[k]} $((start - submit))"
        fi
    done
    echo "preemptions $((restarts_after - restarts_before))"
    # The daemons' logs outlive the cluster, for a look at where waits came from.
    rm -rf "$DIR-$config-log" && cp -r "$DIR/log" "$DIR-$config-log"
    cd "$repo"
    scripts/cluster.sh down "$DIR" >/dev/null
}

printf 'bench-debug: shipped settings: GraceTime=%s s, RecomputePeriod=%s s; %s\n' \
    "$(sed -n 's/^GraceTime=//p' conf/allot.conf)" "$(sed -n 's/^RecomputePeriod=//p' conf/allot.conf)" \
    "$(sed -n 's/^SchedulerParameters=//p' conf/slurm-allot.conf)"
for config in ${BENCH_CONFIGS:-allot allot-kept stock}; do
    out=$(run_config "$config")
    echo "== $config"
    awk -v cfg="$config" -v limit="$max_wait" '
        $1 == "preemptions" { pre = $2; next }
        { n[$1]++; if ($3 == "none") { none[$1]++ } else { w[$1, ++s[$1]] = $3 } ; printf "  %-5s debug job %-5s wait %s\n", $1, $2, ($3 == "none" ? "did not start within " limit " s" : $3 " s") }
        END {
            for (g in n) {
                m = s[g]
                for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (w[g, j] < w[g, i]) { t = w[g, i]; w[g, i] = w[g, j]; w[g, j] = t }
                # Jobs that never started count as the longest waits.
                p50 = int((n[g] + 1) / 2); p90 = int(n[g] * 0.9 + 0.999)
                printf "  %s-served teams: %d debug jobs, %d started; p50 %s, p90 %s\n", g, n[g], m,
                    (p50 <= m ? w[g, p50] " s" : "> " limit " s"), (p90 <= m ? w[g, p90] " s" : "> " limit " s")
                for (i = 1; i <= m; i++) all[++na] = w[g, i]
                total += n[g]
            }
            for (i = 1; i <= na; i++) for (j = i + 1; j <= na; j++) if (all[j] < all[i]) { x = all[i]; all[i] = all[j]; all[j] = x }
            p50 = int((total + 1) / 2); p90 = int(total * 0.9 + 0.999)
            printf "  all %d debug jobs: %d started; p50 %s, p90 %s, max %s\n", total, na,
                (p50 <= na ? all[p50] " s" : "> " limit " s"), (p90 <= na ? all[p90] " s" : "> " limit " s"),
                (na == total ? all[na] " s" : "> " limit " s")
            printf "  jobs preempted during the debug phase (unallocated ones included): %d\n", pre
        }' <<<"$out"
done
rm -f "$budget"
