#!/usr/bin/env bash
# Run a command and report its wall time and peak memory, anonymous and file-backed apart
# (RssAnon, RssFile from /proc/PID/status, sampled every 50 ms): a memory-mapped trace
# shows in RssFile, the decoder's own buffers in RssAnon.
#
#   benches/scripts/peak-rss.sh target/dist/tracemill decode /tmp/tm-1g -j2 --out /tmp/o
set -euo pipefail
out=$(mktemp)
start=$(date +%s.%N)
"$@" >"$out" 2>&1 &
pid=$!
anon=0 file=0
while kill -0 "$pid" 2>/dev/null; do
  if read -r a f < <(awk '/^RssAnon/{a=$2} /^RssFile/{f=$2} END{print a+0, f+0}' "/proc/$pid/status" 2>/dev/null); then
    (( a > anon )) && anon=$a
    (( f > file )) && file=$f
  fi
  sleep 0.05
done
rc=0
wait "$pid" || rc=$?
end=$(date +%s.%N)
printf 'exit %d  wall %.2f s  peak RssAnon %d MiB  peak RssFile %d MiB\n' \
  "$rc" "$(echo "$end - $start" | bc)" $((anon / 1024)) $((file / 1024))
[ "$rc" = 0 ] || cat "$out"
rm -f "$out"
exit "$rc"
