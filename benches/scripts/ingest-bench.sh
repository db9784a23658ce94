#!/usr/bin/env bash
# `tracemill ingest` on a made-up night: N_SMALL small bundles (the three spec-scenario
# samples, each copy with its own label so that every bundle has its own id; images by
# absolute path, not copied) plus N_LARGE large ones (busybox-sort repeated to LARGE_MB),
# with 1 and 2 jobs, against `tracemill decode` of the same large bundles.
#
#   benches/scripts/ingest-bench.sh target/dist/tracemill /tmp/ingest-bench 1000 2 32
#
# Prints wall time, bundles/s and MB/s of trace per run, and the cost per small bundle.
set -euo pipefail
bin=$(realpath "$1") work=$2 n_small=${3:-1000} n_large=${4:-2} large_mb=${5:-32}
root=$(cd "$(dirname "$0")/../.." && pwd)
samples=$root/datasets/samples
mkdir -p "$work"
work=$(realpath "$work")
small=$work/small large=$work/large
if [ ! -d "$small" ]; then
  mkdir -p "$small"
  names=(scenario-figure6 scenario-figure7 scenario-table3)
  for i in $(seq 0 $((n_small - 1))); do
    s=${names[$((i % 3))]}
    d=$small/$(printf 'host-%02d' $((i % 50)))/b$i
    mkdir -p "$d"
    cp "$samples/$s/trace.rtit" "$d/"
    # Absolute image paths; a per-bundle label (so ids differ) and the partition keys.
    sed -e "s#^path = \"#path = \"$samples/$s/#" -e "s#^\[labels\]#[labels]\nn = \"$i\"\nhost = \"host-$((i % 50))\"\ndate = \"2026-11-23\"#" \
      "$samples/$s/bundle.toml" >"$d/bundle.toml"
  done
fi
if [ ! -d "$large" ]; then
  for i in $(seq 1 "$n_large"); do
    "$root/benches/scripts/repeat-bundle.sh" "$samples/busybox-sort" "$large_mb" "$large/l$i" >/dev/null
    printf '\n[labels]\nhost = "big-%s"\ndate = "2026-11-23"\n' "$i" >>"$large/l$i/bundle.toml"
    # The sample's own [labels] table comes first in the file; a second one is a TOML
    # error, so merge: drop the sample's.
    python3 - "$large/l$i/bundle.toml" <<'PY'
import sys, tomllib
p = sys.argv[1]
text = open(p).read()
head, tail = text.rsplit("\n[labels]\n", 1)
import re
head = re.sub(r"\n\[labels\]\n(?:[^\[\n][^\n]*\n)*", "\n", head)
open(p, "w").write(head + "\n[labels]\n" + tail)
tomllib.loads(open(p).read())
PY
  done
fi
bytes_of() { find "$1" -name trace.rtit -printf '%s\n' | awk '{s+=$1} END {print s}'; }
report() { # label seconds bundles bytes
  awk -v l="$1" -v t="$2" -v n="$3" -v b="$4" \
    'BEGIN { printf "%-42s %7.2f s  %8.1f bundles/s  %7.2f MB/s  %7.2f ms/bundle\n", l, t, n/t, b/1e6/t, 1000*t/n }'
}
timed() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>"$work/last.err" || [ $? = 3 ]; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }

sb=$(bytes_of "$small") lb=$(bytes_of "$large")
for j in 1 2; do
  rm -rf "$work/ds"
  t=$(timed "$bin" ingest "$small" --dataset "$work/ds" --partition-by date,host -j $j -q)
  report "ingest $n_small small, -j$j" "$t" "$n_small" "$sb"
  t=$(timed "$bin" ingest "$small" --dataset "$work/ds" --partition-by date,host -j $j -q)
  report "  re-run (all committed), -j$j" "$t" "$n_small" "$sb"
  rm -rf "$work/ds"
  t=$(timed "$bin" ingest "$large" --dataset "$work/ds" --partition-by date,host -j $j -q)
  report "ingest $n_large x ${large_mb} MB, -j$j" "$t" "$n_large" "$lb"
  rm -rf "$work/dec"
  t0=$(date +%s.%N)
  for d in "$large"/*/; do "$bin" decode "$d" --out "$work/dec/$(basename "$d")" -j $j -q 2>/dev/null; done
  t1=$(date +%s.%N)
  report "decode the same $n_large, -j$j" "$(echo "$t1 - $t0" | bc)" "$n_large" "$lb"
done
# One small bundle decoded by its own process, for scale.
d=$(find "$small" -name bundle.toml | head -1 | xargs dirname)
rm -rf "$work/one"
t=$(timed "$bin" decode "$d" --out "$work/one" -j 1 -q)
report "decode 1 small bundle (one process)" "$t" 1 "$(stat -c %s "$d/trace.rtit")"
