#!/usr/bin/env bash
# Coverage-guided fuzzing of allot's parsers with libFuzzer, on stable Rust.
#
#   scripts/fuzz.sh [--short | --runs N | --seconds S] [--merge] [TARGET...]
#
# Targets (fuzz/fuzz_targets/): contract, duration, budget, account,
# workload_csv; default all. Each runs over its corpus, fuzz/corpus/TARGET/,
# for N inputs (--runs, default 1000000) or S seconds (--seconds); --short is
# 10 seconds each, for scripts/test.sh. Inputs that grow coverage are added
# to a scratch directory, not to the repository; with --merge, those that
# bring new coverage are then added to fuzz/corpus/ (keep it small: a few
# hundred KB per target).
# A crash or failed property fails the run (exit status 1, after the other
# targets) and leaves the input in fuzz/artifacts/TARGET/ (reproduce: the
# target's binary with that file as its only argument).
#
# The fuzz crate is a workspace of its own (fuzz/Cargo.lock), built in
# release with debug assertions and overflow checks, instrumented for
# libFuzzer through RUSTFLAGS (what cargo-fuzz passes, minus nightly-only
# sanitizers). libfuzzer-sys compiles libFuzzer's C++ with the cc crate:
# g++ from build-essential (scripts/install-deps.sh).
#
# Environment: CARGO_TARGET_DIR (default fuzz/target).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo_bin=${HOME:-/root}/.cargo/bin
if ! command -v cargo >/dev/null && [[ -d $cargo_bin ]]; then
    export PATH="$cargo_bin:$PATH"
fi

readonly ALL_TARGETS=(contract duration budget account workload_csv)
limit=(-runs=1000000)
merge=false
targets=()
while (($#)); do
    case $1 in
        --short) limit=(-max_total_time=10) ;;
        --runs) limit=("-runs=${2:?--runs needs a number}"); shift ;;
        --seconds) limit=("-max_total_time=${2:?--seconds needs a number}"); shift ;;
        --merge) merge=true ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "fuzz: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) targets+=("$1") ;;
    esac
    shift
done
((${#targets[@]})) || targets=("${ALL_TARGETS[@]}")
for t in "${targets[@]}"; do
    [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (targets: ${ALL_TARGETS[*]})" >&2; exit 2; }
done

# --target: RUSTFLAGS then apply to the target crates only, not to build
# scripts, which must not be instrumented (they would not link).
host=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/fuzz/target}
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
-Cdebug-assertions -Coverflow-checks"

echo "fuzz: building the fuzz targets (instrumented, release)"
build_start=$SECONDS
cargo build --manifest-path fuzz/Cargo.toml --release --locked --target "$host" --bins
echo "fuzz: built in $((SECONDS - build_start)) s"
bin_dir=$CARGO_TARGET_DIR/$host/release

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in "${targets[@]}"; do
    corpus=fuzz/corpus/$t
    mkdir -p "$corpus" "fuzz/artifacts/$t" "$scratch/$t"
    if $merge; then
        # Fuzz into the scratch corpus, then add to the repository's only the
        # inputs that bring new coverage (its named seeds stay as they are).
        if ! "$bin_dir/$t" "${limit[@]}" -artifact_prefix="fuzz/artifacts/$t/" "$scratch/$t" "$corpus" 2>"$scratch/$t.log"; then
            failed+=("$t")
            grep -m1 -A4 "panicked at" "$scratch/$t.log" >&2 || true
            tail -12 "$scratch/$t.log" >&2
            continue
        fi
        "$bin_dir/$t" -merge=1 "$corpus" "$scratch/$t" 2>>"$scratch/$t.log"
        echo "fuzz: $t: corpus merged, $(find "$corpus" -type f | wc -l) inputs"
        continue
    fi
    start=$SECONDS
    # New inputs go to the scratch directory (first), the repository's corpus is read only.
    if "$bin_dir/$t" "${limit[@]}" -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" \
        "$scratch/$t" "$corpus" 2>"$scratch/$t.log"; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$t.log" | tail -1)
        secs=$((SECONDS - start))
        echo "fuzz: $t: ${runs:-?} inputs in ${secs} s ($(( ${runs:-0} / (secs > 0 ? secs : 1) )) inputs/s), no crash"
    else
        failed+=("$t")
        echo "fuzz: $t: CRASH or failed property:" >&2
        grep -m1 -A4 "panicked at" "$scratch/$t.log" >&2 || true
        tail -12 "$scratch/$t.log" >&2
        echo "fuzz: $t: input saved in fuzz/artifacts/$t/ (reproduce: $bin_dir/$t FILE)" >&2
    fi
done
if ((${#failed[@]})); then
    echo "fuzz: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: all targets passed"
