#!/usr/bin/env bash
# Hostile inputs at scale: each must decode in memory no larger than a clean trace's and
# in time proportional to its size. Makes SIZE_MB of each kind under DIR, decodes it with
# every table written, and prints wall time and peak memory (peak-rss.sh).
#
#   benches/scripts/hostile.sh target/dist/tracemill 256 /tmp/hostile
set -euo pipefail
bin=$1 size_mb=$2 dir=$3
here=$(cd "$(dirname "$0")" && pwd)
samples=$(cd "$here/../../datasets/samples" && pwd)
mkdir -p "$dir"
bytes=$((size_mb << 20))
make() { # name, python expression writing `bytes` bytes to stdout
  local name=$1
  mkdir -p "$dir/$name/images"
  cp "$samples/jumptable/images/jumptable" "$dir/$name/images/"
  printf 'rtit_ctl = "0x2e0b"\n\n[[image]]\npath = "images/jumptable"\nkind = "elf"\n' >"$dir/$name/bundle.toml"
  python3 - "$bytes" "$dir/$name/trace.rtit" "$2" "$samples" <<'PY'
import os, random, sys
n, path, kind, samples = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
psb = bytes([0xC0] + [0] * 8)
rng = random.Random(7)
with open(path, "wb") as f:
    if kind == "random":
        for _ in range(n >> 20):
            f.write(rng.randbytes(1 << 20))
    elif kind == "ff":
        f.write(b"\xff" * n)
    elif kind == "psbs":
        f.write(psb * (n // len(psb)))
    elif kind == "random-psb-4k":
        for _ in range(n // 4096):
            f.write(psb + rng.randbytes(4096 - len(psb)))
    elif kind == "damaged-1pct":
        base = open(os.path.join(samples, "jumptable/trace.rtit"), "rb").read()
        buf = bytearray(base * (n // len(base) + 1))[:n]
        for _ in range(n // 100):
            buf[rng.randrange(n)] = rng.randrange(256)
        f.write(buf)
PY
}
for kind in random ff psbs random-psb-4k damaged-1pct; do
  [ -f "$dir/$kind/trace.rtit" ] || make "$kind" "$kind"
  printf '%-14s %4d MB  ' "$kind" "$size_mb"
  "$here/peak-rss.sh" "$bin" decode "$dir/$kind" -j2 --out "$dir/$kind/out" || true
done
