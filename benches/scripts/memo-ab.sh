#!/bin/bash
# Interleaved A/B of the walk (count mode, one thread) beside libipt, for a noisy machine:
# in each round, one run of each pipeline-bench binary, then libipt's block decoder.
#   benches/scripts/memo-ab.sh ROUNDS /tmp/ipt-walk /tmp/ptb BIN_A BIN_B ...
# (BIN_* are copies of target/release/pipeline-bench built from the commits compared.)
set -eu
rounds=$1 ipt=$2 ptb=$3
shift 3
for r in $(seq "$rounds"); do
  echo "round $r load $(cut -d' ' -f1-3 /proc/loadavg)"
  for b in "$@"; do
    nice "$b" "$ptb/pt" "$ptb/rtit" --modes count --jobs 1 --runs 1 2>&1 |
      grep -E "^(pt|rtit) " | awk -v b="$(basename "$b")" '{print b, $1, $4}'
  done
  nice "$ipt" "$ptb/pt/trace.pt" "$ptb/pt/ipt-images.txt" 1 |
    awk '{for (i = 1; i <= NF; i++) if ($i == "wall_s") print "libipt pt", $(i + 1)}'
done
echo "end load $(cut -d' ' -f1-3 /proc/loadavg)"
