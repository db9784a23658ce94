#!/bin/sh
# Build every fuzz target and run each for SECONDS, one after another, one process at a
# time, niced. Starts from the committed seeds (fuzz/corpus/<target>, read only); what the
# run adds goes to $FUZZ_WORK (default: a fresh temporary directory). Exits 1 on a finding
# (crash, panic, timeout over 10 s, RSS over 1 GiB, one allocation over 512 MiB); the input is in
# $FUZZ_WORK/artifacts/<target>/ and the log in $FUZZ_WORK/<target>.log.
#
#   fuzz/run-all.sh SECONDS [TARGET...]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a C++ compiler (for libFuzzer). Builds
# with `--sanitizer none` on stable Rust (no nightly needed). FUZZ_RUNS=N caps executions
# per target as well as time.
set -eu
secs=${1:?usage: fuzz/run-all.sh SECONDS [TARGET...]}
shift
cd "$(dirname "$0")"
all="packets sync_ring walk stitch_diff stretch bundle_toml elf pt_packets perf_data pt_walk pt_stitch_diff pt_stretch"
targets=${*:-$all}

nice -n 15 cargo fuzz build --sanitizer none --release --debug-assertions
triple=$(rustc -vV | sed -n 's/^host: //p')
bin=${CARGO_TARGET_DIR:-$PWD/target}/$triple/release
work=${FUZZ_WORK:-$(mktemp -d -t tracemill-fuzz.XXXXXX)}
echo "fuzz: work directory $work"

status=0
for t in $targets; do
    mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
    case $t in
    packets | sync_ring) opts="-dict=dict/rtit.dict -max_len=1024" ;;
    walk | stitch_diff) opts="-dict=dict/rtit.dict -max_len=4096" ;;
    stretch) opts="-dict=dict/rtit.dict -max_len=1024" ;;
    bundle_toml) opts="-dict=dict/toml.dict -max_len=4096" ;;
    pt_packets) opts="-dict=dict/pt.dict -max_len=1024" ;;
    pt_walk | pt_stitch_diff) opts="-dict=dict/pt.dict -max_len=4096" ;;
    pt_stretch) opts="-dict=dict/pt.dict -max_len=1024" ;;
    perf_data) opts="-dict=dict/perf.dict -max_len=8192" ;;
    *) opts="-max_len=4096" ;;
    esac
    # shellcheck disable=SC2086 # $opts holds several options
    if nice -n 15 "$bin/$t" "$work/corpus/$t" "corpus/$t" $opts \
        -max_total_time="$secs" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} \
        -rss_limit_mb=1024 -malloc_limit_mb=512 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/$t/" >"$work/$t.log" 2>&1; then
        res=ok
    else
        res=FINDING
        status=1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$t.log")
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$work/$t.log" | tail -1)
    echo "fuzz: $t: $res, ${execs:-?} runs, ${rate:-?} exec/s, $cov"
    if [ $res = FINDING ]; then
        grep -m1 -A2 -E 'panicked|ERROR: libFuzzer' "$work/$t.log" || true
        ls "$work/artifacts/$t"
    fi
done
exit $status
