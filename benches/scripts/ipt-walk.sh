#!/usr/bin/env bash
# Build `ipt-walk` (benches/libipt/ipt-walk.c, libipt's block decoder over an Intel PT
# trace) against the installed libipt (Debian: `apt-get install libipt-dev`), to OUT
# (default /tmp/ipt-walk); `pipeline-bench --libipt OUT` runs it beside tracemill.
#
#   benches/scripts/ipt-walk.sh [OUT]
set -euo pipefail
out=${1:-/tmp/ipt-walk}
src=$(dirname "$0")/../libipt/ipt-walk.c
if [ ! -f /usr/include/intel-pt.h ]; then
  echo "libipt's headers are missing: apt-get install libipt-dev" >&2
  exit 1
fi
gcc -O2 -Wall -Wextra -o "$out" "$src" -lipt
echo "$out ($(pkg-config --modversion libipt 2>/dev/null || dpkg-query -W -f='${Version}' libipt-dev 2>/dev/null))"
