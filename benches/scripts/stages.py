#!/usr/bin/env python3
"""Group a `perf report` of `tracemill decode` into pipeline stages, as ns per branch row.

    perf record -F 999 -o perf.data target/dist/tracemill decode BUNDLE -j1 --out OUT
    perf report -i perf.data --no-children --sort comm,dso,symbol --stdio > perf.txt
    benches/scripts/stages.py perf.txt SAMPLES_PER_SECOND BRANCH_ROWS

Thread names tell the stages apart where symbols do not: `tracemill-decod*` are the pool
threads (chunk bodies, row-group encoding), anything else is the ordered consumer or the
writer.
"""
import re
import sys
from collections import defaultdict

RULES = [
    ("zstd compression", r"ZSTD_|HUF_|HIST_|FSE_"),
    ("parquet encoding", r"parquet::|ahash::|memcmp"),
    ("arrow conversion", r"arrow_|tracemill_sinks::convert"),
    ("coverage", r"coverage::Coverage"),
    ("timeline (tsc, cycles, timing rows)", r"timing::|TimingColumns"),
    ("row columns", r"RowSink>::push|BranchColumns|OptU64"),
    ("ordering (sequence, stitch bookkeeping)", r"Sequencer|Stitcher|chunk::"),
    ("walk: packets, blocks, flow", r"flow::|block::|packet::|last_ip|tnt::|loop_guard|iced_x86"),
    ("memory (malloc, memcpy, memset)", r"malloc|free|memmove|memcpy|memset|unlink_chunk|realloc"),
    ("kernel", r"\[k\]"),
]


def main():
    path, rate, rows = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    text = open(path).read()
    total = int(re.search(r"# Samples: (\d+)([KM]?)", text).group(1))
    unit = re.search(r"# Samples: \d+([KM]?)", text).group(1)
    total *= {"": 1, "K": 1000, "M": 1000000}[unit]
    stage = defaultdict(float)
    for line in text.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+(\S+)\s+(.*)$", line)
        if not m:
            continue
        pct, comm, sym = float(m.group(1)), m.group(2), m.group(4)
        name = "other"
        for label, rx in RULES:
            if re.search(rx, sym):
                name = label
                break
        where = "pool" if comm.startswith("tracemill-dec") else "ordered/writer"
        if name.startswith("walk") and where != "pool":
            name = "walk in stitches (ordered thread)"
        stage[name] += pct
    cpu_s = total / rate
    print(f"{total} samples, {cpu_s:.1f} CPU s, {rows:.0f} rows: {cpu_s * 1e9 / rows:.0f} ns per row in all")
    print("| stage | share of CPU | ns per branch row |")
    print("|---|---|---|")
    for name, pct in sorted(stage.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {pct:.1f}% | {pct / 100 * cpu_s * 1e9 / rows:.1f} |")


if __name__ == "__main__":
    main()
