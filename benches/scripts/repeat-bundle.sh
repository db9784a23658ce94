#!/usr/bin/env bash
# Make a large bundle from a real-program sample by repeating its trace until it holds at
# least SIZE_MB megabytes (each copy starts at a PSB, so the result decodes like one long
# run of the program, over and over).
#
#   benches/scripts/repeat-bundle.sh datasets/samples/busybox-sort 64 /tmp/sort-64m
set -euo pipefail
src=$1 size_mb=$2 dst=$3
rm -rf "$dst"
mkdir -p "$dst"
cp "$src/bundle.toml" "$dst/"
cp -r "$src/images" "$dst/"
one=$(stat -c %s "$src/trace.rtit")
want=$((size_mb * 1000 * 1000))
n=$(((want + one - 1) / one))
for _ in $(seq "$n"); do cat "$src/trace.rtit"; done >"$dst/trace.rtit"
echo "$dst: $n copies of $src/trace.rtit, $(stat -c %s "$dst/trace.rtit") bytes"
