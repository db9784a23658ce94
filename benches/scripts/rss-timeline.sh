#!/usr/bin/env bash
# Run a command and print its RssAnon every INTERVAL seconds, to see whether memory levels
# off or keeps growing over a long run (peak-rss.sh gives only the peak). The command's
# own output goes to a temporary file, printed at the end.
#
#   benches/scripts/rss-timeline.sh 10 target/dist/tracemill decode /tmp/tm-1g -j2 --out /tmp/o
set -euo pipefail
iv=${1:?usage: rss-timeline.sh INTERVAL COMMAND...}
shift
log=$(mktemp)
"$@" >"$log" 2>&1 &
pid=$!
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
  anon=$(awk '/^RssAnon/{print int($2 / 1024)}' "/proc/$pid/status" 2>/dev/null || true)
  echo "$(($(date +%s) - start)) s  ${anon:-?} MiB"
  sleep "$iv"
done
rc=0
wait "$pid" || rc=$?
tail -n 20 "$log"
rm -f "$log"
exit "$rc"
