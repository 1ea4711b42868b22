#!/usr/bin/env bash
# What allot's plugins cost slurmctld at a lab's scale, against Slurm's own
# plugins as a lab runs them, on the single-host test cluster:
#
#   cluster   128 nodes of 8 GPUs (1,024 GPUs; ALLOT_NODES and
#             ALLOT_GPUS_PER_NODE to change), the shipped settings
#             (conf/slurm-allot.conf's scheduler parameters, conf/allot.conf)
#             and the shipped layout (one node per 100 kept for small
#             jobs), Slurm's accounting on (slurmdbd, MariaDB) in both
#             configurations;
#   users     150 Unix users (allotlab001..150, made if missing) in 15
#             teams of 10, each team its account, shares 1 to 3;
#   work      10,000 jobs submitted as their users (setpriv, no PAM), a
#             lab's mix: 1 GPU (30%), 2 (15%), 4 (10%), 8 (30%), 2 whole
#             nodes (10%), 4 whole nodes (5%), running 1-10 minutes; a
#             tenth urgent (allot: priority=high; Slurm's own: QOS high,
#             which may preempt QOS normal), a tenth free (allot:
#             min_runtime=0), the rest min_runtime=2m. The cluster fills
#             and stays full, so thousands wait and jobs keep ending and
#             starting.
#
# Configurations, in alternating order each round (medians over rounds):
#   multifactor  Slurm's own: priority/multifactor with fair share from
#                slurmdbd (each account's Fairshare its team's share),
#                preempt/qos (conf/slurm-multifactor.conf);
#   allot        allot's four plugins, the ledger a SQLite file;
#   server       (ALLOT_BENCH_SERVER_LEDGER=1) allot's plugins with the
#                ledger on a private MariaDB (LedgerUrl).
#
# Each measurement:
#   1. the first 2,000 submissions timed: sbatch per second, slurmctld's
#      mean time per submission (sdiag's REQUEST_SUBMIT_BATCH_JOB, lock
#      waits included) and slurmctld's CPU per submission (utime + stime
#      in /proc over the loop);
#   2. the other 8,000 submitted, then QUIET seconds (default 300) of a
#      full cluster with 9,000+ pending: the main scheduler's and
#      backfill's mean cycle (sdiag, counters reset at the start) and
#      slurmctld's memory (VmRSS every 10 s: at the start, the end, the
#      largest);
#   3. (allot, server) every job cancelled, then the ledger against
#      slurmdbd's records (sacct -D -X): every run (job, start, end, GPUs)
#      in both, nothing more, nothing less.
#
# Goals (issue: the real cluster at a lab's scale): cycle times and CPU
# per submission at most 1.1x Slurm's own, throughput at least 0.95x,
# memory flat, the ledger exact.
#
# Usage: scripts/bench-lab.sh [ROUNDS] [QUIET]  (as root; default 3 rounds,
# 300 s; a measurement takes QUIET + about 3 minutes)
# ALLOT_SLURM_RELEASE: the release measured (default 22.05).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
rounds=${1:-3}
QUIET=${2:-300}
[[ $(id -u) -eq 0 ]] || { echo "bench-lab: run as root" >&2; exit 1; }

# shellcheck source=scripts/release.sh
. scripts/release.sh
release=${ALLOT_SLURM_RELEASE:-$ALLOT_DEFAULT_RELEASE}
release_check "$release"
export ALLOT_SLURM_RELEASE=$release
root=$(release_field "$release" root)
# The lab's 150 users, their submissions and the ledger's reconciliation
# run on this host's Debian: a release whose daemons run in a root of their
# own (24.11 here) is not measured by this script yet.
[[ -z $root ]] || { echo "bench-lab: Slurm $release runs in $root here; this benchmark measures a release on this host's Debian (22.05, or a site build)" >&2; exit 1; }
target=$(release_field "$release" target)
scripts/install-deps.sh --slurm "$ALLOT_DEFAULT_RELEASE" --slurm "$release" --accounting >/dev/null
cargo build --release --locked -q -p allot-cli
CARGO_TARGET_DIR=$target cargo build --release --locked -q -p priority-allot -p job-submit-allot -p preempt-allot -p jobcomp-allot
export CARGO_TARGET_DIR=$target
allot="$repo/target/release/allot"

export ALLOT_NODES=${ALLOT_NODES:-128} ALLOT_GPUS_PER_NODE=${ALLOT_GPUS_PER_NODE:-8}
export ALLOT_ACCOUNTING=1 ALLOT_SHIPPED_SETTINGS=1 ALLOT_PORT_BASE=${ALLOT_PORT_BASE:-18000} ALLOT_UP_TIMEOUT=180
TEAMS=15 PER_TEAM=10 JOBS=${BENCH_JOBS:-10000} TIMED=${BENCH_TIMED:-2000}
gpn=$ALLOT_GPUS_PER_NODE

DIR=$root/tmp/allot-bench-lab
in_root=()
[[ -n $root ]] && in_root=(chroot "$root")
inner=${DIR#"$root"}

user_of() { printf 'allotlab%03d' "$(($1 + 1))"; }
team_of() { printf 'team%02d' "$(($1 / PER_TEAM + 1))"; }

# The lab's users, in the release's Debian (this host, or its root).
for ((u = 0; u < TEAMS * PER_TEAM; u++)); do
    name=$(user_of "$u")
    "${in_root[@]}" id -u "$name" >/dev/null 2>&1 || "${in_root[@]}" useradd -M -N -s /usr/sbin/nologin "$name"
done

budget=$(mktemp)
{
    printf '[cluster]\nlookback = "7d"\n[budget]\nowners = ["root"]\n'
    for ((t = 0; t < TEAMS; t++)); do
        team=$(team_of $((t * PER_TEAM)))
        members=$(for ((k = 0; k < PER_TEAM; k++)); do printf '"%s",' "$(user_of $((t * PER_TEAM + k)))"; done)
        printf '[budget.%s]\nshare = %d\naccounts = ["%s"]\nmembers = [%s]\n' "$team" $((t % 3 + 1)) "$team" "${members%,}"
    done
} >"$budget"

# One job's sbatch arguments (after the user), by its number: the mix above.
job_args() { # i config
    local i=$1 config=$2 r=$(($1 % 20)) gpus nodes=1 runtime min=2m prio=normal
    if ((r < 6)); then gpus=1; elif ((r < 9)); then gpus=2; elif ((r < 11)); then gpus=4
    elif ((r < 17)); then gpus=$gpn; elif ((r < 19)); then gpus=$gpn nodes=2; else gpus=$gpn nodes=4; fi
    runtime=$((60 + (i * 37) % 540))
    ((i % 10 == 0)) && prio=high
    ((i % 10 == 5)) && min=0
    local u=$((i % (TEAMS * PER_TEAM)))
    printf '%s -A %s -N %d --gres=gpu:%d -o /dev/null -e /dev/null --wrap "sleep %d"' "$(user_of "$u")" "$(team_of "$u")" "$nodes" "$gpus" "$runtime"
    if [[ $config == multifactor ]]; then
        [[ $prio == high ]] && printf ' --qos=high'
    else
        printf ' --comment="min_runtime=%s priority=%s"' "$min" "$prio"
    fi
    printf '\n'
}
jobs_file() { # config -> the file of sbatch lines, made once per configuration
    local f=$DIR/../allot-bench-lab-$1.jobs
    if [[ ! -s $f ]]; then
        for ((i = 0; i < JOBS; i++)); do job_args "$i" "$1"; done >"$f.tmp"
        mv "$f.tmp" "$f"
    fi
    echo "${f#"$root"}"
}
submit() { # jobs-file first count: one shell submits them, each as its user
    "${in_root[@]}" env PATH="$PATH" SLURM_CONF="$SLURM_CONF" bash -c '
        cd "$4" && tail -n +"$2" "$1" | head -n "$3" | while read -r user args; do
            eval "setpriv --reuid=$user --regid=users --clear-groups sbatch --parsable $args" >/dev/null || exit 1
        done' submit "$1" "$2" "$3" "$inner/jobs"
}
ctld_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
rss_mb() { awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }

ledger_server_up() { # a private MariaDB for the ledger: sets ledger_url (daemons) and host_url
    local d=$DIR/ledger-db i=$inner/ledger-db
    mkdir -p "$d"
    "${in_root[@]}" mariadb-install-db --no-defaults --datadir="$i/data" --user=root --auth-root-authentication-method=normal \
        --skip-test-db --skip-name-resolve --force >"$d/install.log" 2>&1 || { echo "bench-lab: mariadb-install-db failed: $d/install.log" >&2; exit 1; }
    "${in_root[@]}" mariadbd --no-defaults --datadir="$i/data" --socket="$i/mysqld.sock" --skip-networking --user=root \
        --pid-file="$i/mariadbd.pid" --log-error="$i/mariadbd.log" --skip-name-resolve \
        --innodb-log-file-size=16M --innodb-buffer-pool-size=128M >/dev/null 2>&1 &
    local waited=0
    until [[ -S $d/mysqld.sock ]]; do
        ((waited++ < 300)) || { echo "bench-lab: mariadbd did not start: $d/mariadbd.log" >&2; exit 1; }
        sleep 0.1
    done
    "${in_root[@]}" mariadb --no-defaults --socket="$i/mysqld.sock" -uroot \
        -e "CREATE DATABASE allot; CREATE USER allot@localhost IDENTIFIED BY 'bench'; GRANT ALL ON allot.* TO allot@localhost;"
    install -m 600 /dev/stdin "$d/pass" <<<bench
    ledger_url="mysql://allot@localhost/allot?socket=$i/mysqld.sock&password_file=$i/pass"
    host_url="mysql://allot@localhost/allot?socket=$d/mysqld.sock&password_file=$d/pass"
}
ledger_server_down() {
    [[ -f $DIR/ledger-db/mariadbd.pid ]] && kill "$(cat "$DIR/ledger-db/mariadbd.pid")" 2>/dev/null || true
    local waited=0
    while [[ -S $DIR/ledger-db/mysqld.sock ]] && ((waited++ < 300)); do sleep 0.1; done
}

# The ledger's finished runs, "job start end gpus" sorted, for a configuration.
ledger_runs() {
    local q="SELECT job_id, run_start, run_end, gpus FROM runs WHERE run_end IS NOT NULL ORDER BY job_id, run_start"
    if [[ $1 == server ]]; then
        "${in_root[@]}" mariadb --no-defaults --socket="$inner/ledger-db/mysqld.sock" -uroot -N -B allot -e "$q" | tr '\t' ' '
    else
        sqlite3 -separator ' ' "$DIR/ledger.db" "$q"
    fi
}
open_runs() {
    local q="SELECT COUNT(*) FROM runs WHERE run_end IS NULL"
    if [[ $1 == server ]]; then "${in_root[@]}" mariadb --no-defaults --socket="$inner/ledger-db/mysqld.sock" -uroot -N -B allot -e "$q"
    else sqlite3 "$DIR/ledger.db" "$q"; fi
}
# slurmdbd's runs (sacct -D -X: each requeued run a row), "job start end gpus" sorted.
sacct_runs() {
    "${in_root[@]}" env SLURM_CONF="$SLURM_CONF" SLURM_TIME_FORMAT=%s sacct -a -D -X -P -n -S 2020-01-01 \
        --format=JobIDRaw,Start,End,AllocTRES |
        awk -F'|' '$2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ { g = 0; n = split($4, t, ","); for (k = 1; k <= n; k++) if (t[k] ~ /^gres\/gpu=/) { sub("gres/gpu=", "", t[k]); g = t[k] } print $1, $2, $3, g }' |
        sort -n -k1,1 -k2,2
}

# Reconciles the ledger with slurmdbd once every job has ended: prints
# "ledger_runs ledger_gpu_s slurmdbd_runs slurmdbd_gpu_s runs_of_either_not_in_the_other".
reconcile() {
    local config=$1 waited=0 a b
    local p
    for p in gpu small; do "${in_root[@]}" env SLURM_CONF="$SLURM_CONF" scancel --state=PENDING -p "$p" >/dev/null 2>&1 || true; done
    for p in gpu small; do "${in_root[@]}" env SLURM_CONF="$SLURM_CONF" scancel -p "$p" >/dev/null 2>&1 || true; done
    until [[ -z $("${in_root[@]}" env SLURM_CONF="$SLURM_CONF" squeue -h -t R,CG,S -o %i) ]] && [[ $(open_runs "$config") == 0 ]]; do
        ((waited++ < 180)) || break
        sleep 1
    done
    waited=0
    while :; do # slurmdbd records the ends a little after slurmctld
        a=$(ledger_runs "$config")
        b=$(sacct_runs)
        [[ $a == "$b" ]] && break
        ((waited++ < 60)) || break
        sleep 2
    done
    local sum='{ s += ($3 - $2) * $4 } END { printf "%d %d", NR, s }'
    printf '%s %s %s\n' "$(awk "$sum" <<<"$a")" "$(awk "$sum" <<<"$b")" "$(diff <(echo "$a") <(echo "$b") | grep -c '^[<>]' || true)"
}

measure() { # config -> "sbatch_per_s submit_rpc_us cpu_us_per_submission main_mean_us backfill_mean_us rss_start_mb rss_end_mb rss_max_mb" and reconcile's five"
    local config=$1 plugins=$1 ledger_url="" host_url=""
    [[ $config == server ]] && plugins=allot
    scripts/cluster.sh down "$DIR" >/dev/null 2>&1 || true
    ledger_server_down
    rm -rf "$DIR"
    mkdir -p "$DIR"
    if [[ $config == server ]]; then
        ledger_server_up
        "$allot" --ledger "$host_url" sync "$budget" >/dev/null
    else
        "$allot" --ledger "$DIR/ledger.db" sync "$budget" >/dev/null
    fi
    ALLOT_LEDGER_URL=$ledger_url scripts/cluster.sh up "$DIR" --plugins "$plugins" >/dev/null
    eval "$(scripts/cluster.sh env "$DIR")"
    # Slurm's associations for the budget's accounts and members (both
    # configurations: AccountingStorageEnforce=associations); Slurm's own
    # fair share from the same shares, and QOS high above normal.
    local ledger_arg=$DIR/ledger.db
    [[ $config == server ]] && ledger_arg=$host_url
    "$allot" --ledger "$ledger_arg" associations --apply >/dev/null
    local sacctmgr=("${in_root[@]}" env SLURM_CONF="$SLURM_CONF" sacctmgr -i)
    "${sacctmgr[@]}" add qos high Priority=1000 Preempt=normal PreemptMode=requeue >/dev/null
    "${sacctmgr[@]}" modify user where account="$(seq -s, -f 'team%02g' 1 $TEAMS)" set qos=normal,high >/dev/null
    if [[ $config == multifactor ]]; then
        for ((t = 0; t < TEAMS; t++)); do "${sacctmgr[@]}" modify account "$(team_of $((t * PER_TEAM)))" set fairshare=$((t % 3 + 1)) >/dev/null; done
    fi
    "${in_root[@]}" env SLURM_CONF="$SLURM_CONF" scontrol reconfigure >/dev/null # the associations into slurmctld now
    sleep 5
    local jobs pid c0 c1 t0 t1 rpc
    jobs=$(jobs_file "$config")
    pid=$(cat "$DIR/pids/slurmctld.pid")
    local rss_start
    rss_start=$(rss_mb "$pid")
    "${in_root[@]}" env SLURM_CONF="$SLURM_CONF" sdiag -r >/dev/null
    c0=$(ctld_ticks "$pid")
    t0=$(date +%s.%N)
    submit "$jobs" 1 "$TIMED"
    t1=$(date +%s.%N)
    c1=$(ctld_ticks "$pid")
    rpc=$("${in_root[@]}" env SLURM_CONF="$SLURM_CONF" sdiag | awk '/REQUEST_SUBMIT_BATCH_JOB/ { for (i = 1; i <= NF; i++) if ($i ~ /^ave_time:/) { sub("ave_time:", "", $i); print $i } }')
    submit "$jobs" $((TIMED + 1)) $((JOBS - TIMED))
    sleep 5
    "${in_root[@]}" env SLURM_CONF="$SLURM_CONF" sdiag -r >/dev/null
    local rss_max=0 rss s
    for ((s = 0; s < QUIET; s += 10)); do
        rss=$(rss_mb "$pid")
        ((rss > rss_max)) && rss_max=$rss
        sleep 10
    done
    local diag rss_end main_mean bf_mean ledger="- - - - -"
    diag=$("${in_root[@]}" env SLURM_CONF="$SLURM_CONF" sdiag)
    rss_end=$(rss_mb "$pid")
    ((rss_end > rss_max)) && rss_max=$rss_end
    main_mean=$(awk '/^Main schedule statistics/ {m=1} m && /Mean cycle:/ {print $3; exit}' <<<"$diag")
    bf_mean=$(awk '/^Backfilling stats/ {m=1} m && /Mean cycle:/ {print $3; exit}' <<<"$diag")
    [[ $config != multifactor ]] && ledger=$(reconcile "$config")
    scripts/cluster.sh down "$DIR" >/dev/null
    ledger_server_down
    awk -v n="$TIMED" -v a="$t0" -v b="$t1" -v r="$rpc" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" \
        -v m="$main_mean" -v f="${bf_mean:-0}" -v r0="$rss_start" -v r1="$rss_end" -v rx="$rss_max" -v l="$ledger" \
        'BEGIN { printf "%.1f %s %.0f %s %s %s %s %s %s\n", n / (b - a), r, c * 1e6 / hz / n, m, f, r0, r1, rx, l }'
}

# TIME_WAIT sockets of one measurement's sbatch connections slow the next
# one's: start each once they have drained.
settle() {
    local waited=0
    command -v ss >/dev/null || { sleep 60; return; }
    while (($(ss -tan state time-wait | wc -l) > 500 && waited < 120)); do
        sleep 5
        waited=$((waited + 5))
    done
}

printf 'bench-lab: Slurm %s; %d nodes x %d GPUs; %d users in %d teams; %d jobs (%d timed); %d s quiet; %d rounds; %s\n' \
    "$(release_field "$release" version)" "$ALLOT_NODES" "$gpn" $((TEAMS * PER_TEAM)) "$TEAMS" "$JOBS" "$TIMED" "$QUIET" "$rounds" "$(date -u +%F)"
results=$(mktemp)
configs="multifactor allot"
[[ ${ALLOT_BENCH_SERVER_LEDGER:-0} == 1 ]] && configs="multifactor allot server"
for ((r = 1; r <= rounds; r++)); do
    order=$configs
    ((r % 2 == 0)) && order=$(tr ' ' '\n' <<<"$configs" | tac | tr '\n' ' ')
    for config in $order; do
        settle
        line=$(measure "$config")
        printf 'bench-lab: round %d %-11s %s\n' "$r" "$config" "$line"
        echo "$config $line" >>"$results"
    done
done
rm -f "$DIR"/../allot-bench-lab-*.jobs

echo
awk '
function median(k, col,    arr, i, j, t, m) {
    m = 0
    for (i = 1; i <= NR; i++) if (cfg[i] == k) arr[++m] = val[i, col]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (arr[j] + 0 < arr[i] + 0) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
    return (m % 2) ? arr[(m + 1) / 2] : (arr[m / 2] + arr[m / 2 + 1]) / 2
}
{ cfg[NR] = $1; seen[$1] = 1; for (c = 2; c <= 14; c++) val[NR, c] = $c }
END {
    printf "median over the rounds\n%-11s %9s %11s %11s %12s %14s %22s\n", "", "sbatch/s", "submit (us)", "CPU/sub (us)", "main (us)", "backfill (us)", "ctld RSS MB start/end/max"
    n = split("multifactor allot server", ks, " ")
    for (i = 1; i <= n; i++) { k = ks[i]; if (!(k in seen)) continue
        printf "%-11s %9.1f %11.0f %11.0f %12.0f %14.0f %12.0f / %.0f / %.0f\n", k, median(k, 2), median(k, 3), median(k, 4), median(k, 5), median(k, 6), median(k, 7), median(k, 8), median(k, 9) }
    printf "\nallot / Slurm'"'"'s own: throughput %.2f (goal >= 0.95); slurmctld time per submission %.2f, CPU per submission %.2f (goal <= 1.1); main cycle %.2f, backfill cycle %.2f (goal <= 1.1)\n", \
        median("allot", 2) / median("multifactor", 2), median("allot", 3) / median("multifactor", 3), median("allot", 4) / median("multifactor", 4), \
        median("allot", 5) / median("multifactor", 5), (median("multifactor", 6) > 0 ? median("allot", 6) / median("multifactor", 6) : 0)
    if ("server" in seen)
        printf "server ledger / Slurm'"'"'s own: throughput %.2f, time per submission %.2f, CPU per submission %.2f, main cycle %.2f, backfill cycle %.2f\n", \
            median("server", 2) / median("multifactor", 2), median("server", 3) / median("multifactor", 3), median("server", 4) / median("multifactor", 4), \
            median("server", 5) / median("multifactor", 5), (median("multifactor", 6) > 0 ? median("server", 6) / median("multifactor", 6) : 0)
    print "\nthe ledger against slurmdbd (sacct -D -X), each measurement: runs and GPU-seconds of each, runs of either not in the other:"
    for (i = 1; i <= NR; i++) if (cfg[i] != "multifactor") printf "  %-6s ledger %s runs, %s GPU-s; slurmdbd %s runs, %s GPU-s; %s differ\n", cfg[i], val[i, 10], val[i, 11], val[i, 12], val[i, 13], val[i, 14]
}' "$results"
rm -f "$results" "$budget"
