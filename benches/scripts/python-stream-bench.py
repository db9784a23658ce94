#!/usr/bin/env python3
"""Streaming decode from Python against `tracemill decode` without output (issue #28's
aim: within 10%).

    .venv/bin/python benches/scripts/python-stream-bench.py BUNDLE [RUNS] [JOBS]

Each run is a fresh process, the kinds interleaved (CLI, Python, Python, CLI, CLI,
Python, ...: each round runs both, in turns):
`tracemill decode BUNDLE -j JOBS -q` (decodes every table, writes nothing), and a Python
process that decodes the same bundle with `tracemill.decode(BUNDLE, jobs=JOBS)` and reads
every batch of every table as pyarrow RecordBatches (iterating the Decoding), touching
each batch's row count. Prints wall and CPU (user + sys, children's) seconds per run and
the medians, and the load average before and after. The CLI is TRACEMILL_BIN, else
target/dist/tracemill, else target/release/tracemill.

To compare two builds of the package in one run, install the other one apart
(`pip install --no-deps --target DIR ./python/tracemill-py`) and name it in
TRACEMILL_PY_BEFORE=DIR: a third process per run, the same consumer with DIR first on its
path, interleaved with the other two.
"""

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONSUMER = """
import sys, time, tracemill
t0, c0 = time.perf_counter(), time.thread_time()
rows = 0
for table, batch in tracemill.decode(sys.argv[1], jobs=int(sys.argv[2])):
    rows += batch.num_rows
print(f"{rows} {time.perf_counter() - t0:.3f} {time.thread_time() - c0:.3f}")
"""


def timed(cmd, env=None):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{r.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r.stdout


def main():
    bundle = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    jobs = sys.argv[3] if len(sys.argv) > 3 else "2"
    cli = os.environ.get("TRACEMILL_BIN")
    if not cli:
        for p in ["target/dist/tracemill", "target/release/tracemill"]:
            if (ROOT / p).exists():
                cli = str(ROOT / p)
                break
    before = os.environ.get("TRACEMILL_PY_BEFORE")
    print(f"bundle {bundle}, {runs} runs each, -j {jobs}, CLI {cli}")
    if before:
        print(f"before: the package in {before}")
    print(f"load average before: {os.getloadavg()}")
    res = {"cli": [], "python": []}
    kinds = [("python", None)]
    if before:
        res["before"] = []
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([before, os.environ.get("PYTHONPATH", "")]))
        kinds.append(("before", env))
    # Each round runs every kind once, the order turned by one each round (so that no
    # kind always follows the same one).
    order = [("cli", None)] + kinds
    # CPU of the Python thread that reads the batches, during the decode loop: what the
    # consumer costs on top of the decode (steadier than the whole process's CPU).
    consumer = {k: [] for k, _ in kinds}
    for i in range(runs):
        for kind, env in order[i % len(order):] + order[: i % len(order)]:
            if kind == "cli":
                w, c, _ = timed([cli, "decode", bundle, "-j", jobs, "-q"])
                res["cli"].append((w, c))
                print(f"  run {i + 1}  cli     wall {w:7.3f} s  cpu {c:7.3f} s")
                continue
            w, c, out = timed([sys.executable, "-c", CONSUMER, bundle, jobs], env)
            rows, loop, own = out.split()
            res[kind].append((w, c))
            consumer[kind].append(float(own))
            print(f"  run {i + 1}  {kind:<7} wall {w:7.3f} s  cpu {c:7.3f} s  ({int(rows):,} rows in all tables, decode loop {float(loop):.3f} s, of which the consumer's thread {float(own):.3f} s CPU)")
    print(f"load average after: {os.getloadavg()}")
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
    for k, (w, c) in med.items():
        own = f"  (the consumer's thread {statistics.median(consumer[k]):.3f} s)" if k in consumer else ""
        print(f"median {k:<7} wall {w:7.3f} s  cpu {c:7.3f} s{own}")
    cw, cc = med["cli"]
    for k, _ in kinds:
        pw, pc = med[k]
        print(f"{k} against cli: wall {100 * (pw / cw - 1):+.1f}%, cpu {100 * (pc / cc - 1):+.1f}%")
    # On a shared machine the load moves within minutes: the ratio of each run to the CLI
    # run of the same round, whose load was about the same, is steadier than a ratio of
    # medians.
    for k, _ in kinds:
        rw = statistics.median(p[0] / c[0] for p, c in zip(res[k], res["cli"]))
        rc = statistics.median(p[1] / c[1] for p, c in zip(res[k], res["cli"]))
        print(f"{k} against the same round's cli run, median of the ratios: wall {100 * (rw - 1):+.1f}%, cpu {100 * (rc - 1):+.1f}%")


if __name__ == "__main__":
    main()
