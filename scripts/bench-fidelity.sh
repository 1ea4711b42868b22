#!/usr/bin/env bash
# How well the simulator predicts a real Slurm: `allot replay` of the
# generator's sustained-load classes on a real cluster of 16 nodes of 8 GPUs
# (ALLOT_NODES, ALLOT_GPUS_PER_NODE), with allot's plugins, the test
# cluster's scheduler settings (sched_interval=2, bf_interval=2) and the
# shipped layout (one node kept for small jobs), each workload scaled in
# time so that it runs for 30-60 minutes.
#
# Each workload: `allot simulate generate debug --variant V --cluster 16x8
# --days DAYS --load LOAD --training-nodes 1-2 --debug-per-team 40
# --fillers-per-team 6 --seed SEED` (defaults 0.75 days, training load 1.5,
# seed 1: about 300 jobs of six teams: 240 debug jobs, 18-21 training jobs
# of one or two whole nodes, 36 free fillers; the class's own training
# jobs of 2-8 nodes and counts made for 14 days would give a 16-node
# cluster six training jobs and hours of fillers) and its budget, whose durations
# (lookback, min_runtime_cap, default_min_runtime, grace) are divided by the
# time scale (default 60: an hour of the workload is a minute); a fresh
# cluster; the budget synced; `allot replay --time-scale SCALE
# --create-users --slurm-clock --json`. The replay's table (real, predicted, difference)
# and its JSON are kept in OUT (default /tmp/allot-bench-fidelity), one per
# workload and round.
#
# Usage: scripts/bench-fidelity.sh [ROUNDS] [VARIANT...]   (as root; a
# generator's variant, or philly;
# default 1 round of base, unequal and bursty; a replay takes 35-45 min)
# Environment: TIME_SCALE, DAYS, LOAD, SEED, OUT, ALLOT_PORT_BASE (17300;
# two runs at once need bases at least ALLOT_NODES + 3 apart).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-1}
shift || true
variants=("$@")
[[ ${#variants[@]} -gt 0 ]] || variants=(base unequal bursty)
[[ $(id -u) -eq 0 ]] || { echo "bench-fidelity: run as root" >&2; exit 1; }
scale=${TIME_SCALE:-60} days=${DAYS:-0.75} load=${LOAD:-1.5} seed=${SEED:-1}
out=${OUT:-/tmp/allot-bench-fidelity}
export ALLOT_NODES=${ALLOT_NODES:-16} ALLOT_GPUS_PER_NODE=${ALLOT_GPUS_PER_NODE:-8} ALLOT_PORT_BASE=${ALLOT_PORT_BASE:-17300}

# shellcheck source=scripts/release.sh
. scripts/release.sh
release=${ALLOT_SLURM_RELEASE:-$ALLOT_DEFAULT_RELEASE}
release_check "$release"
[[ -z $(release_field "$release" root) ]] || { echo "bench-fidelity: Slurm $release runs in a root of its own here; replay it with a release on this host's Debian (22.05, or a site build)" >&2; exit 1; }
scripts/install-deps.sh --slurm "$release" >/dev/null
cargo build --release --locked -q -p allot-cli -p priority-allot -p job-submit-allot -p preempt-allot -p jobcomp-allot
allot=$(pwd)/target/release/allot
mkdir -p "$out"

# `philly`: 18 hours of the Philly trace (sim/data/philly-2017-09.csv, its
# missing columns filled by `allot simulate generate trace --seed 1`) from
# day 24.5 (982 jobs of 10 teams, 1.57 times a 128-GPU cluster's GPU-hours
# over the 18 hours), runtimes capped at 12 hours (the trace's run for
# weeks) and raised to at least a minute (a second at --time-scale 60), teams and users prefixed with p (Unix names start with a
# letter), submissions from 0; a budget of equal shares with the
# generator's settings.
philly_slice() { # CSV TOML
    local full=$out/philly-full.csv
    "$allot" simulate generate trace sim/data/philly-2017-09.csv --seed 1 -o "$full" 2>/dev/null
    awk -F, -v OFS=, -v from=$((98 * 21600)) -v len=$((18 * 3600)) '
        NR == 1 { print; next }
        $2 >= from && $2 < from + len { $2 -= from; if ($4 > 43200) $4 = 43200; if ($4 < 60) $4 = 60; $5 = "p" $5; $6 = "p" $6; print }' "$full" >"$1"
    {
        printf '# 18 hours of the Philly trace (scripts/bench-fidelity.sh philly): equal shares.\n'
        printf '[cluster]\nlookback = "7d"\nmin_runtime_cap = "8h"\ndefault_min_runtime = "1h"\ngrace = "5m"\npreempt_margin = 0.1\n\n[budget]\n'
        awk -F, 'NR > 1 { users[$5] = users[$5] (index(users[$5], "\"" $6 "\"") ? "" : (users[$5] == "" ? "" : ", ") "\"" $6 "\"") }
            END { for (t in users) printf "\n[budget.%s]\nshare = 1\naccounts = [\"%s\"]\nmembers = [%s]\n", t, t, users[t] }' "$1"
    } >"$2"
}

for ((r = 1; r <= rounds; r++)); do
    for v in "${variants[@]}"; do
        name=$v-r$r dir=/tmp/allot-bench-fidelity-$v
        if [[ $v == philly ]]; then
            philly_slice "$out/$v.csv" "$out/$v.toml"
        else
            "$allot" simulate generate debug --variant "$v" --cluster "${ALLOT_NODES}x$ALLOT_GPUS_PER_NODE" --days "$days" --load "$load" \
                --training-nodes 1-2 --debug-per-team 40 --fillers-per-team 6 --seed "$seed" -o "$out/$v.csv" --budgets-out "$out/$v.toml" >/dev/null
        fi
        # The budget's durations in replay time.
        awk -v scale="$scale" '
            function scaled(d,   n, u, m) { n = d + 0; u = substr(d, length(d)); m = (u == "d") ? 86400 : (u == "h") ? 3600 : (u == "m") ? 60 : 1
                                            return sprintf("%ds", (n * m / scale < 1) ? 1 : n * m / scale) }
            /^(lookback|min_runtime_cap|default_min_runtime|grace) = "/ { split($0, f, "\""); print $1 " = \"" scaled(f[2]) "\""; next }
            { print }' "$out/$v.toml" >"$out/$v-scaled.toml"
        scripts/cluster.sh down "$dir" >/dev/null 2>&1 || true
        rm -rf "$dir"
        mkdir -p "$dir"
        "$allot" --ledger "$dir/ledger.db" sync "$out/$v-scaled.toml" >/dev/null
        scripts/cluster.sh up "$dir" --plugins allot >/dev/null
        eval "$(scripts/cluster.sh env "$dir")"
        echo "bench-fidelity: $name: replaying $(($(wc -l <"$out/$v.csv") - 1)) jobs at --time-scale $scale ($(date -u +%FT%TZ))"
        status=0
        "$allot" --ledger "$dir/ledger.db" replay "$out/$v.csv" --time-scale "$scale" --create-users --slurm-clock --dir "$dir/jobs/replay" \
            --json "$out/$name.json" --timeout 3h >"$out/$name.txt" 2>&1 || status=$?
        scripts/cluster.sh down "$dir" >/dev/null
        cat "$out/$name.txt"
        [[ $status -eq 0 ]] || echo "bench-fidelity: $name: allot replay failed ($status)" >&2
    done
done
