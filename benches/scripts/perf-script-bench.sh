#!/usr/bin/env bash
# perf's own Intel PT decoder against tracemill on one perf.data (issue #27's aim: tracemill
# decode with all tables at least 20x faster than `perf script --itrace=b`).
#
#   cargo run --release -p tracemill-benches --bin pt-bundle -- /tmp/ptb 50
#   benches/scripts/perf-script-bench.sh target/release/tracemill /tmp/ptb/perf.data 3
#
# Runs, interleaved, RUNS times each (medians; wall and CPU seconds from /usr/bin/time):
# - `perf script --itrace=b -F tid,cpu,ip,addr`: every taken branch as a text line (the
#   cheapest output perf has for them; its default fields add symbol lookups), to /dev/null;
# - `tracemill decode FILE --out DIR` with every table, on 1 and on 2 threads;
# - `tracemill decode FILE` without output, 2 threads;
# - the text with symbols, `perf script --itrace=b -F comm,tid,cpu,time,ip,sym,addr,symoff`
#   (perf-sym) against `tracemill report perf-script` of a decode made once before the runs
#   (tm-script: the same lines but for the time column).
# Prints MB/s of AUX data (the file's AUXTRACE bytes), perf's branch samples and
# tracemill's rows, and each run's speed against perf's.
set -euo pipefail
bin=$(realpath "$1") file=$(realpath "$2") runs=${3:-3}
perf=${PERF:-perf}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

aux=$(python3 - "$file" <<'EOF'
import struct, sys
b = open(sys.argv[1], 'rb').read()
off, size = struct.unpack_from('<QQ', b, 40)  # the data section
pos, end, aux = off, off + size, 0
while pos + 8 <= end:
    kind, misc, sz = struct.unpack_from('<IHH', b, pos)
    if sz < 8:
        break
    if kind == 71:  # AUXTRACE: its data follows the record
        aux += struct.unpack_from('<Q', b, pos + 8)[0]
        pos += struct.unpack_from('<Q', b, pos + 8)[0]
    pos += sz
print(aux)
EOF
)
samples=$("$perf" script -f --itrace=b -F tid,cpu,ip,addr -i "$file" 2>/dev/null | wc -l)
rows=$("$bin" decode "$file" -q -j2 --tables branches 2>&1 | awk '$1 == "decoded" {gsub(",", "", $2); print $2; exit}')
echo "file $file: $aux bytes of AUX data; perf: $samples branch samples; tracemill: ${rows:-?} rows"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
declare -A walls cpus
kinds=(perf tm-j1 tm-j2 tm-noout perf-sym tm-script)
"$bin" decode "$file" -q -j2 --out "$work/decoded" 2>/dev/null
run() {
  case $1 in
    perf) "$perf" script -f --itrace=b -F tid,cpu,ip,addr -i "$file" > /dev/null 2>&1 ;;
    tm-j1) rm -rf "$work/o"; "$bin" decode "$file" -q -j1 --out "$work/o" 2>/dev/null ;;
    tm-j2) rm -rf "$work/o"; "$bin" decode "$file" -q -j2 --out "$work/o" 2>/dev/null ;;
    tm-noout) "$bin" decode "$file" -q -j2 2>/dev/null ;;
    perf-sym) "$perf" script -f --itrace=b -F comm,tid,cpu,time,ip,sym,addr,symoff -i "$file" > /dev/null 2>&1 ;;
    tm-script) "$bin" report perf-script "$work/decoded" > /dev/null 2>&1 ;;
  esac
}
for r in $(seq "$runs"); do
  for k in "${kinds[@]}"; do
    read -r e u s < <( { /usr/bin/time -f '%e %U %S' bash -c "$(declare -f run); bin='$bin' file='$file' perf='$perf' work='$work' run $k" ; } 2>&1 >/dev/null | tail -1)
    walls[$k]+="$e"$'\n' cpus[$k]+="$(echo "$u + $s" | bc)"$'\n'
    echo "  run $r $k: $e s wall, $(echo "$u + $s" | bc) s CPU"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
pw=$(printf '%s' "${walls[perf]}" | median)
printf '%-10s %10s %10s %10s %12s\n' run "wall (s)" "CPU (s)" "MB/s" "vs perf"
for k in "${kinds[@]}"; do
  w=$(printf '%s' "${walls[$k]}" | median) c=$(printf '%s' "${cpus[$k]}" | median)
  awk -v k="$k" -v w="$w" -v c="$c" -v a="$aux" -v p="$pw" 'BEGIN {
    printf "%-10s %10.2f %10.2f %10.1f %11.1fx\n", k, w, c, a / w / 1e6, p / w }'
done
