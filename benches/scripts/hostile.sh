#!/usr/bin/env bash
# Hostile inputs at scale: each must decode in memory no larger than a clean trace's and
# in time proportional to its size. Makes SIZE_MB of each kind under DIR, decodes it with
# every table written, and prints wall time and peak memory (peak-rss.sh).
#
#   benches/scripts/hostile.sh target/dist/tracemill 256 /tmp/hostile
#
# Intel PT: PT_BUNDLE=/tmp/ptb10/pt (a PT bundle of a real program, from `pt-bundle`)
# makes the same kinds as Intel PT traces over that bundle's images, and a few of PT's own
# (pads: 0x00 is PAD; idle-mtc: a PSB+ and MTCs; ovf: OVF packets back to back):
#
#   PT_BUNDLE=/tmp/ptb10/pt benches/scripts/hostile.sh target/dist/tracemill 256 /tmp/hostile-pt
#
# perf.data: PERF_DATA=/tmp/ptb/perf.data (from `pt-bundle`) makes hostile shapes of that
# recording (SIZE_MB is not used): cut in the middle of its AUX data, an AUXTRACE size that
# lies (2^40), the recorded binary a FIFO or /dev/zero under --symfs, an empty file; each
# must end, quickly and in bounded memory, with its message:
#
#   PERF_DATA=/tmp/ptb/perf.data benches/scripts/hostile.sh target/dist/tracemill 0 /tmp/hostile-perf
set -euo pipefail
bin=$1 size_mb=$2 dir=$3
here=$(cd "$(dirname "$0")" && pwd)
samples=$(cd "$here/../../datasets/samples" && pwd)
mkdir -p "$dir"
bytes=$((size_mb << 20))
if [ -n "${PERF_DATA:-}" ]; then
  src=$PERF_DATA
  for kind in ${KINDS:-cut-half lying-size fifo-image zero-image empty}; do
    rm -rf "${dir:?}/$kind"
    mkdir -p "$dir/$kind"
    f=$dir/$kind/perf.data
    extra=()
    case $kind in
      cut-half) head -c $(($(stat -c %s "$src") / 2)) "$src" >"$f" ;;
      lying-size)
        cp "$src" "$f"
        # The first AUXTRACE record (type 71): its size field, 8 bytes after its header.
        python3 - "$f" <<'PY'
import struct, sys
path = sys.argv[1]
b = bytearray(open(path, "rb").read())
data_off, data_size = struct.unpack_from("<QQ", b, 40)
at = data_off
while at + 8 <= data_off + data_size:
    kind, misc, size = struct.unpack_from("<IHH", b, at)
    if kind == 71:
        struct.pack_into("<Q", b, at + 8, 1 << 40)
        break
    at += size + (struct.unpack_from("<Q", b, at + 8)[0] if kind == 71 else 0)
open(path, "wb").write(b)
PY
        ;;
      fifo-image|zero-image)
        cp "$src" "$f"
        # Under --symfs ROOT, the recorded binary's path is a FIFO, or a link to /dev/zero.
        recorded=$(strings -n 8 "$src" | grep -m1 '^/.*busybox' || true)
        root=$dir/$kind/root
        mkdir -p "$root$(dirname "$recorded")"
        if [ "$kind" = fifo-image ]; then mkfifo "$root$recorded"; else ln -s /dev/zero "$root$recorded"; fi
        extra=(--symfs "$root" --buildid-dir "$dir/$kind/no-cache")
        ;;
      empty) : >"$f" ;;
    esac
    printf '%-14s ' "perf $kind"
    timeout 300 "$here/peak-rss.sh" "$bin" decode "$f" -j2 --out "$dir/$kind/out" "${extra[@]}" || true
  done
  exit 0
fi
if [ -n "${PT_BUNDLE:-}" ]; then
  make_pt() { # name, kind
    local name=$1
    rm -rf "${dir:?}/$name"
    mkdir -p "$dir/$name"
    cp -r "$PT_BUNDLE/images" "$dir/$name/"
    grep -v '^benchmark = ' "$PT_BUNDLE/bundle.toml" >"$dir/$name/bundle.toml"
    python3 - "$bytes" "$dir/$name/trace.pt" "$2" "$PT_BUNDLE/trace.pt" <<'PY'
import random, sys
n, path, kind, real = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
psb = bytes([0x02, 0x82] * 8)
psbend = bytes([0x02, 0x23])
rng = random.Random(7)
with open(path, "wb") as f:
    if kind == "random":
        for _ in range(n >> 20):
            f.write(rng.randbytes(1 << 20))
    elif kind == "ff":
        f.write(b"\xff" * n)
    elif kind == "pads":
        f.write(psb + psbend + b"\x00" * (n - len(psb) - 2))
    elif kind == "psbs":
        f.write(psb * (n // len(psb)))
    elif kind == "ovf":
        f.write(psb + psbend + bytes([0x02, 0xF3]) * ((n - len(psb) - 2) // 2))
    elif kind == "random-psb-4k":
        for _ in range(n // 4096):
            f.write(psb + rng.randbytes(4096 - len(psb)))
    elif kind == "idle-mtc":
        # Tracing on, nothing branching: a PSB+ and 400 MTCs, over and over, between two
        # copies of the real trace's first MiB.
        base = open(real, "rb").read(1 << 20)
        unit = bytearray(psb + psbend)
        for i in range(400):
            unit += bytes([0x59, i & 0xFF])
        f.write(base)
        left = n - 2 * len(base)
        while left > 0:
            f.write(unit[:left])
            left -= len(unit)
        f.write(base)
    elif kind == "damaged-1pct":
        base = open(real, "rb").read(64 << 20)
        buf = bytearray(base * (n // len(base) + 1))[:n]
        for _ in range(n // 100):
            buf[rng.randrange(n)] = rng.randrange(256)
        f.write(buf)
PY
  }
  for kind in ${KINDS:-random ff pads psbs ovf random-psb-4k damaged-1pct idle-mtc}; do
    if [ "$(cat "$dir/$kind/size_mb" 2>/dev/null)" != "$size_mb" ]; then
      make_pt "$kind" "$kind"
      echo "$size_mb" >"$dir/$kind/size_mb"
    fi
    printf '%-14s %4d MB  ' "pt $kind" "$size_mb"
    "$here/peak-rss.sh" "$bin" decode "$dir/$kind" -j2 --out "$dir/$kind/out" || true
  done
  exit 0
fi
make() { # name, kind: writes `bytes` bytes of that kind as the bundle's trace
  local name=$1 sample=jumptable ctl=0x2e0b
  case $2 in
    idle-*|bare-mtc) sample=callbacks ctl=0x2309 ;;  # MTC on, not cycle-accurate
  esac
  case $2 in
    idle-cyc) sample=gaps-cyc ctl=0x2f0b ;;          # cycle-accurate, MTC and STS on
  esac
  local image
  image=$(sed -n 's/^path = "\(images\/[^"]*\)"/\1/p' "$samples/$sample/bundle.toml" | head -1)
  mkdir -p "$dir/$name/images"
  cp "$samples/$sample/$image" "$dir/$name/images/"
  printf 'rtit_ctl = "%s"\nguaranteed_ratio = 20\n\n[[image]]\npath = "%s"\nkind = "elf"\n' "$ctl" "$image" >"$dir/$name/bundle.toml"
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
    elif kind in ("idle-mtc", "idle-cyc", "bare-mtc"):
        # Tracing on, nothing branching: PSB and 400 MTCs (each with its CYC in
        # cycle-accurate mode), over and over; between two copies of a real program's trace
        # (none for bare-mtc).
        sample = {"idle-mtc": "callbacks", "idle-cyc": "gaps-cyc"}.get(kind)
        base = open(os.path.join(samples, sample, "trace.rtit"), "rb").read() if sample else b""
        unit = bytearray(psb)
        for i in range(400):
            unit += bytes([0xC4, i & 0xFF])
            if kind == "idle-cyc":
                unit.append((10 << 2) | 1)
        f.write(base)
        left = n - 2 * len(base)
        while left > 0:
            f.write(unit[:left])
            left -= len(unit)
        f.write(base)
    elif kind == "damaged-1pct":
        base = open(os.path.join(samples, "jumptable/trace.rtit"), "rb").read()
        buf = bytearray(base * (n // len(base) + 1))[:n]
        for _ in range(n // 100):
            buf[rng.randrange(n)] = rng.randrange(256)
        f.write(buf)
PY
}
kinds=${KINDS:-random ff psbs random-psb-4k damaged-1pct idle-mtc idle-cyc bare-mtc}
for kind in $kinds; do
  # Made again when DIR holds one of another size (a stale 2 MB trace once passed for
  # a 256 MB one).
  if [ "$(cat "$dir/$kind/size_mb" 2>/dev/null)" != "$size_mb" ]; then
    rm -rf "${dir:?}/$kind"
    make "$kind" "$kind"
    echo "$size_mb" >"$dir/$kind/size_mb"
  fi
  printf '%-14s %4d MB  ' "$kind" "$size_mb"
  "$here/peak-rss.sh" "$bin" decode "$dir/$kind" -j2 --out "$dir/$kind/out" || true
done
# Two idle-stretch bundles ingested side by side (each under 8 MiB decodes on one thread
# beside the other; larger ones one at a time on all threads).
if [ -f "$dir/idle-mtc/trace.rtit" ]; then
  rm -rf "$dir/ingest-src" "$dir/ingest-dest"
  mkdir -p "$dir/ingest-src"
  cp -r "$dir/idle-mtc" "$dir/ingest-src/a"
  cp -r "$dir/idle-mtc" "$dir/ingest-src/b"
  rm -rf "$dir/ingest-src/a/out" "$dir/ingest-src/b/out"
  printf '[labels]\ncopy = "b"\n' >>"$dir/ingest-src/b/bundle.toml"
  printf '%-14s %4d MB  ' "ingest 2x idle" "$size_mb"
  "$here/peak-rss.sh" "$bin" ingest "$dir/ingest-src" --dataset "$dir/ingest-dest" -j2 -q || true
fi
