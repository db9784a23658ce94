#!/usr/bin/env bash
# `tracemill report hotspots` and `tracemill report flamegraph` on a large trace's tables:
# wall time, rows/s (rows of `branches` / wall seconds), CPU seconds (user + sys) and
# peak RSS from /usr/bin/time, the median of RUNS runs of each. The synthetic trace
# (`tracemill synth synthetic --size SIZE`) and its tables (`tracemill decode --out`) are
# made once, in WORK, and kept for the next run (delete WORK when done: a 200M trace's
# tables take about 1 GB).
#
#   benches/scripts/report-bench.sh target/dist/tracemill /tmp/rb 200M 3
#   benches/scripts/report-bench.sh target/dist/tracemill /tmp/rb-sort /tmp/sort-64m 3
#
# The second form takes a bundle instead of a size (e.g. one made by repeat-bundle.sh: a
# real program, whose calls and returns pair up, unlike the synthetic walk's).
#
# Hotspots run on one thread. The flame graph walks the stacks on one thread while reader
# threads decode the next row groups: rows/s (wall) is what a user waits. Each report runs
# again pinned to one CPU (`taskset`), readers and walk together: its rows/s is what one
# core does. Unpinned, the same work takes more CPU seconds (the threads share caches and
# memory bandwidth: on the 2-core VM, 21-23 s against 20 s for the 1 GiB synthetic
# trace's flame graph), so "rows per CPU s" of an unpinned run understates a core.
set -euo pipefail
bin=$(realpath "$1") work=$2 size=${3:-200M} runs=${4:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work"
work=$(realpath "$work")
trace=$work/trace tables=$work/tables
if [ -d "$size" ]; then
  trace=$(realpath "$size")
fi
if [ ! -f "$tables/branches.parquet" ]; then
  if [ ! -d "$trace" ]; then
    # synth reads the sample program's image by a path relative to the repository.
    (cd "$root" && "$bin" synth synthetic --size "$size" --out "$trace")
  fi
  "$bin" decode "$trace" --out "$tables" -q
fi
rows=$(python3 -c 'import sys, pyarrow.parquet as pq; print(pq.ParquetFile(sys.argv[1]).metadata.num_rows)' "$tables/branches.parquet")
echo "branches rows: $rows ($tables)"

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

bench() { # name, then the command
  local name=$1 walls="" cpus="" rss=""
  shift
  for _ in $(seq "$runs"); do
    # %e wall seconds, %U user, %S system, %M peak resident set (KiB).
    read -r e u s m < <(/usr/bin/time -f '%e %U %S %M' "$@" 2>&1 >/dev/null | tail -1)
    walls+="$e"$'\n' cpus+="$(echo "$u + $s" | bc)"$'\n' rss+="$m"$'\n'
  done
  local wall cpu peak
  wall=$(printf '%s' "$walls" | median)
  cpu=$(printf '%s' "$cpus" | median)
  peak=$(printf '%s' "$rss" | median)
  awk -v n="$name" -v r="$rows" -v w="$wall" -v c="$cpu" -v m="$peak" -v k="$runs" 'BEGIN {
    printf "%-24s median of %d: %7.2f s wall, %7.2f s CPU, %6.1f M rows/s, %6.1f M rows per CPU s, peak RSS %d MiB\n",
      n, k, w, c, r / w / 1e6, r / c / 1e6, m / 1024 }'
}

bench "hotspots" "$bin" report hotspots "$tables" --top 10
# SVG only: --folded writes every distinct stack, 14.5 GB for the 200M synthetic trace
# (6.3 M stacks, most 255 frames deep), which would time the disk, not the report.
bench "flamegraph (svg)" "$bin" report flamegraph "$tables" --out "$work/fg.svg"
if command -v taskset >/dev/null; then
  bench "hotspots, one core" taskset -c 0 "$bin" report hotspots "$tables" --top 10
  bench "flamegraph, one core" taskset -c 0 "$bin" report flamegraph "$tables" --out "$work/fg.svg"
fi
