#!/usr/bin/env bash
# What allot's plugins cost slurmctld, measured on the single-host test
# cluster, in one run, against Slurm's own plugins (priority/basic, no
# job_submit plugin, preempt/none: conf/slurm-stock.conf; priority/multifactor
# cannot rank without slurmdbd, see docs/src/design/tests.md):
#
#   1. sbatch throughput: 2,000 submissions from one shell loop, each an
#      8-GPU job that must wait (the cluster is kept full), slurmctld's
#      own mean time per submission (sdiag's REQUEST_SUBMIT_BATCH_JOB), which
#      includes waiting for its locks, and the CPU time slurmctld spent per
#      submission (its utime + stime in /proc over the timed loop), which
#      neither the clients' noise nor lock waits blur;
#   2. the main scheduler's mean cycle time (sdiag) with 5,000 jobs pending,
#      over a quiet minute.
# Jobs are submitted by root with --account: job_submit/allot does all its
# checks for them too, and no PAM session per submission (runuser) adds noise.
#
# Each configuration runs ROUNDS times (default 3), alternating, so that
# machine noise falls on both; the summary takes each figure's median over
# the rounds (one disturbed round does not move it). Prints the figures and
# the ratios allot / stock (goals: throughput >= 0.95; time and CPU per
# submission <= 1.1; main cycle time <= 1.2).
#
# Usage: scripts/bench-slurm.sh [ROUNDS] [QUIET]   (as root; builds allot
# first; QUIET: seconds of sdiag measurement, default 180, which is 18 main
# scheduler cycles at the shipped sched_interval=10; 0: the submissions
# only, no scheduler cycles: a round takes some 30 s, so more rounds fit)
# ALLOT_SLURM_RELEASE: the Slurm release to measure (scripts/release.sh;
# default 22.05); a release with a root runs its cluster and the submitting
# shell inside it.
# ALLOT_BENCH_SERVER_LEDGER=1: a third configuration, `server`: allot's
# plugins with their ledger on a private MariaDB (over its local socket,
# LedgerUrl), measured in the same rounds (needs install-deps.sh --accounting).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
rounds=${1:-3}
[[ $(id -u) -eq 0 ]] || { echo "bench: run as root" >&2; exit 1; }

# shellcheck source=scripts/release.sh
. scripts/release.sh
release=${ALLOT_SLURM_RELEASE:-$ALLOT_DEFAULT_RELEASE}
release_check "$release"
export ALLOT_SLURM_RELEASE=$release
root=$(release_field "$release" root)
target=$(release_field "$release" target)
scripts/install-deps.sh --slurm "$ALLOT_DEFAULT_RELEASE" --slurm "$release" >/dev/null
cargo build --release --locked -q -p allot-cli
# The plugins for the release measured, in its own target directory
# (cluster.sh up --plugins allot installs them from there).
CARGO_TARGET_DIR=$target cargo build --release --locked -q -p priority-allot -p job-submit-allot -p preempt-allot -p jobcomp-allot
export CARGO_TARGET_DIR=$target
allot="$repo/target/release/allot"

# Inside the release's root, if it has one: the daemons see DIR without it.
DIR=$root/tmp/allot-bench-slurm
in_root=()
[[ -n $root ]] && in_root=(chroot "$root")
# The shipped settings: scheduler parameters as in the snippets, allot.conf's
# recompute period and grace as in conf/allot.conf.
export ALLOT_PORT_BASE=17600 ALLOT_SHIPPED_SETTINGS=1
SUBMISSIONS=2000
PENDING=5000
QUIET=${2:-180}

budget=$(mktemp)
cat >"$budget" <<'EOF'
[cluster]
lookback = "7d"
[budget]
owners = ["root"]
[budget.bench]
share = 1
accounts = ["bench"]
members = ["root"]
[budget.other]
share = 1
accounts = ["other"]
members = ["*"]
EOF

submit() { # count: one shell (inside the root, if any) submits them all
    "${in_root[@]}" env PATH="$PATH" SLURM_CONF="$SLURM_CONF" bash -c '
        cd "$2" && for ((i = 0; i < $1; i++)); do
            sbatch --parsable -o /dev/null -e /dev/null --account=bench \
                --gres=gpu:8 --comment="min_runtime=1h" --wrap "sleep 3600" >/dev/null || exit 1
        done' submit "$1" "${DIR#"$root"}/jobs"
}
# slurmctld's CPU time so far (user + system), in clock ticks.
ctld_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# A private MariaDB for the ledger in DIR/ledger-db (the `server`
# configuration); sets ledger_url (as the daemons see it) and host_url.
ledger_server_up() {
    local d=$DIR/ledger-db inner=${DIR#"$root"}/ledger-db
    mkdir -p "$d"
    "${in_root[@]}" mariadb-install-db --no-defaults --datadir="$inner/data" --user=root --auth-root-authentication-method=normal \
        --skip-test-db --skip-name-resolve --force >"$d/install.log" 2>&1 || { echo "bench: mariadb-install-db failed: $d/install.log" >&2; exit 1; }
    "${in_root[@]}" mariadbd --no-defaults --datadir="$inner/data" --socket="$inner/mysqld.sock" --skip-networking --user=root \
        --pid-file="$inner/mariadbd.pid" --log-error="$inner/mariadbd.log" --skip-name-resolve \
        --innodb-log-file-size=4M --innodb-buffer-pool-size=64M >/dev/null 2>&1 &
    local waited=0
    until [[ -S $d/mysqld.sock ]]; do
        ((waited++ < 300)) || { echo "bench: mariadbd did not start: $d/mariadbd.log" >&2; exit 1; }
        sleep 0.1
    done
    "${in_root[@]}" mariadb --no-defaults --socket="$inner/mysqld.sock" -uroot \
        -e "CREATE DATABASE allot; CREATE USER allot@localhost IDENTIFIED BY 'bench'; GRANT ALL ON allot.* TO allot@localhost;"
    install -m 600 /dev/stdin "$d/pass" <<<bench
    ledger_url="mysql://allot@localhost/allot?socket=$inner/mysqld.sock&password_file=$inner/pass"
    host_url="mysql://allot@localhost/allot?socket=$d/mysqld.sock&password_file=$d/pass"
}
ledger_server_down() {
    [[ -f $DIR/ledger-db/mariadbd.pid ]] && kill "$(cat "$DIR/ledger-db/mariadbd.pid")" 2>/dev/null || true
    local waited=0
    while [[ -S $DIR/ledger-db/mysqld.sock ]] && ((waited++ < 300)); do sleep 0.1; done
}

measure() { # configuration (stock, allot or server) -> prints "submissions_per_s submit_rpc_us main_mean_us main_max_us bf_mean_us cpu_us_per_submission"
    local config=$1 plugins=$1 ledger_url="" host_url=""
    [[ $config == server ]] && plugins=allot
    scripts/cluster.sh down "$DIR" >/dev/null 2>&1 || true
    ledger_server_down
    rm -rf "$DIR"; mkdir -p "$DIR"
    if [[ $config == server ]]; then
        ledger_server_up
        "$allot" --ledger "$host_url" sync "$budget" >/dev/null
    else
        "$allot" --ledger "$DIR/ledger.db" sync "$budget" >/dev/null
    fi
    # One partition of all four nodes: the cost of the plugins, not of a layout.
    ALLOT_SMALL_JOB_NODES=0 ALLOT_LEDGER_URL=$ledger_url scripts/cluster.sh up "$DIR" --plugins "$plugins" >/dev/null
    eval "$(scripts/cluster.sh env "$DIR")"
    submit 4                      # fill the 32 GPUs
    sleep 5
    local t0 t1 rpc pid c0 c1
    pid=$(cat "$DIR/pids/slurmctld.pid")
    "${in_root[@]}" sdiag -r >/dev/null
    c0=$(ctld_ticks "$pid")
    t0=$(date +%s.%N)
    submit "$SUBMISSIONS"
    t1=$(date +%s.%N)
    c1=$(ctld_ticks "$pid")
    rpc=$("${in_root[@]}" sdiag | awk '/REQUEST_SUBMIT_BATCH_JOB/ { for (i = 1; i <= NF; i++) if ($i ~ /^ave_time:/) { sub("ave_time:", "", $i); print $i } }')
    if [[ $QUIET -eq 0 ]]; then # submissions only
        scripts/cluster.sh down "$DIR" >/dev/null
        ledger_server_down
        awk -v n="$SUBMISSIONS" -v a="$t0" -v b="$t1" -v r="$rpc" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" \
            'BEGIN { printf "%.1f %s 0 0 0 %.0f\n", n / (b - a), r, c * 1e6 / hz / n }'
        return
    fi
    submit $((PENDING - SUBMISSIONS))
    sleep 5
    "${in_root[@]}" sdiag -r >/dev/null
    sleep "$QUIET"
    local diag
    diag=$("${in_root[@]}" sdiag)
    scripts/cluster.sh down "$DIR" >/dev/null
    ledger_server_down
    local main_mean main_max bf_mean
    main_mean=$(awk '/^Main schedule statistics/ {m=1} m && /Mean cycle:/ {print $3; exit}' <<<"$diag")
    main_max=$(awk '/^Main schedule statistics/ {m=1} m && /Max cycle:/ {print $3; exit}' <<<"$diag")
    bf_mean=$(awk '/^Backfilling stats/ {m=1} m && /Mean cycle:/ {print $3; exit}' <<<"$diag")
    awk -v n="$SUBMISSIONS" -v a="$t0" -v b="$t1" -v r="$rpc" -v m="$main_mean" -v x="$main_max" -v f="$bf_mean" \
        -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.1f %s %s %s %s %.0f\n", n / (b - a), r, m, x, f, c * 1e6 / hz / n }'
}

printf 'bench: Slurm %s; %d rounds; %d timed submissions, then %d pending, %d s quiet\n' "$(release_field "$release" version)" "$rounds" "$SUBMISSIONS" "$PENDING" "$QUIET"
results=$(mktemp)
# Every sbatch opens TCP connections whose TIME_WAIT lingers a minute: the
# thousands a round leaves behind slow the next round's connections (seen
# here: each round 20-40% slower than the one before). So each measurement
# starts once they have drained, and the order alternates (stock first in
# odd rounds, allot first in even ones), so that what drift is left falls
# on both alike.
settle() {
    local waited=0
    command -v ss >/dev/null || { sleep 60; return; } # ss: iproute2
    while (($(ss -tan state time-wait | wc -l) > 500 && waited < 120)); do
        sleep 5
        waited=$((waited + 5))
    done
}
configs="stock allot"
[[ ${ALLOT_BENCH_SERVER_LEDGER:-0} == 1 ]] && configs="stock allot server"
for ((r = 1; r <= rounds; r++)); do
    order=$configs
    ((r % 2 == 0)) && order=$(tr ' ' '\n' <<<"$configs" | tac | tr '\n' ' ')
    for plugins in $order; do
        settle
        line=$(measure "$plugins")
        printf 'bench: round %d %-5s  %s\n' "$r" "$plugins" "$line"
        echo "$plugins $line" >>"$results"
    done
done

echo
awk '
function median(k, col,    arr, i, j, t, m) {
    m = 0
    for (i = 1; i <= NR; i++) if (cfg[i] == k) arr[++m] = val[i, col]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (arr[j] < arr[i]) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
    return (m % 2) ? arr[(m + 1) / 2] : (arr[m / 2] + arr[m / 2 + 1]) / 2
}
{ cfg[NR] = $1; seen[$1] = 1; for (c = 2; c <= 7; c++) val[NR, c] = $c }
END {
    printf "median over the rounds\n%-6s %10s %16s %16s %16s %15s %19s\n", "", "sbatch/s", "submit RPC (us)", "CPU/submit (us)", "main mean (us)", "main max (us)", "backfill mean (us)"
    n = split("stock allot server", ks, " ")
    for (i = 1; i <= n; i++) { k = ks[i]; if (!(k in seen)) continue; printf "%-6s %10.1f %16.0f %16.0f %16.0f %15.0f %19.0f\n", k, median(k, 2), median(k, 3), median(k, 7), median(k, 4), median(k, 5), median(k, 6) }
    printf "\nallot / stock: throughput %.2f (goal >= 0.95), slurmctld time per submission %.2f and CPU per submission %.2f (goal <= 1.1), main cycle %.2f (goal <= 1.2)\n", \
        median("allot", 2) / median("stock", 2), median("allot", 3) / median("stock", 3), median("allot", 7) / median("stock", 7), (median("stock", 4) > 0 ? median("allot", 4) / median("stock", 4) : 0)
    if ("server" in seen)
        printf "server ledger / stock: throughput %.2f, slurmctld time per submission %.2f and CPU per submission %.2f, main cycle %.2f; server / file ledger: main cycle %.2f\n", \
            median("server", 2) / median("stock", 2), median("server", 3) / median("stock", 3), median("server", 7) / median("stock", 7), (median("stock", 4) > 0 ? median("server", 4) / median("stock", 4) : 0), (median("allot", 4) > 0 ? median("server", 4) / median("allot", 4) : 0)
}' "$results"
rm -f "$results" "$budget"
