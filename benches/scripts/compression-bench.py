#!/usr/bin/env python3
"""Page compression of the Parquet tables (issue #25, "compression that pays for itself"):
the decode's CPU, the bytes per row, and DuckDB's time to scan `branches`, per codec.

    .venv/bin/python benches/scripts/compression-bench.py BUNDLE [RUNS] [JOBS]

For each round, every codec in turn (the order turning each round): `tracemill decode
BUNDLE -j JOBS -q --out DIR --compression C [--zstd-level N]`, its CPU (user + sys of the
child) and wall time; then the size of each table and, in a fresh DuckDB connection, two
scans of `branches.parquet`: a whole-table aggregate (every column read and decompressed)
and a point query on `ip` (what the bloom filter and statistics are for). The file is in
the page cache for every codec alike (it was just written); DuckDB's own cache of external
files is turned off, so each query decompresses the pages again. Prints every run and the
medians; the "night" column is decode CPU plus one aggregate scan's CPU. The CLI is
TRACEMILL_BIN, else target/release/tracemill.
"""

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[2]
CODECS = [
    ("zstd-1", ["--compression", "zstd", "--zstd-level", "1"]),
    ("zstd-2", ["--compression", "zstd", "--zstd-level", "2"]),
    ("zstd-3", ["--compression", "zstd", "--zstd-level", "3"]),
    ("lz4", ["--compression", "lz4"]),
    ("snappy", ["--compression", "snappy"]),
    ("none", ["--compression", "none"]),
]
AGGREGATE = """SELECT kind, count(*), sum(insns), count(DISTINCT ip), max(target), sum(cycles),
max(tsc), max("offset"), sum(taken::INT), sum(compressed::INT), max(seq) FROM '{f}' GROUP BY kind"""
POINT = "SELECT count(*), sum(insns) FROM '{f}' WHERE ip = {ip}"


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def query(sql):
    """CPU (process, all DuckDB threads) and wall seconds of one query in a fresh
    connection."""
    con = duckdb.connect()
    try:
        con.execute("SET enable_external_file_cache = false")
    except duckdb.Error:
        pass  # older DuckDB: no such cache
    c0, t0 = time.process_time(), time.perf_counter()
    con.execute(sql).fetchall()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    con.close()
    return cpu, wall


def main():
    bundle = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    jobs = sys.argv[3] if len(sys.argv) > 3 else "2"
    cli = os.environ.get("TRACEMILL_BIN") or str(ROOT / "target/release/tracemill")
    work = Path(tempfile.mkdtemp(prefix="tm-compression-"))
    res = {name: [] for name, _ in CODECS}
    print(f"bundle {bundle}, {runs} rounds, -j {jobs}, CLI {cli}, load {os.getloadavg()}")
    try:
        for r in range(runs):
            order = CODECS[r % len(CODECS):] + CODECS[: r % len(CODECS)]
            for name, args in order:
                out = work / name
                shutil.rmtree(out, ignore_errors=True)
                c0, t0 = children_cpu(), time.perf_counter()
                subprocess.run([cli, "decode", bundle, "-j", jobs, "-q", "--out", str(out), *args],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                cpu, wall = children_cpu() - c0, time.perf_counter() - t0
                f = out / "branches.parquet"
                rows = duckdb.sql(f"SELECT count(*) FROM '{f}'").fetchall()[0][0]
                ip = duckdb.sql(f"SELECT ip FROM '{f}' LIMIT 1 OFFSET {rows // 2}").fetchall()[0][0]
                total = sum(p.stat().st_size for p in out.iterdir())
                agg_cpu, agg_wall = query(AGGREGATE.format(f=f))
                pt_cpu, pt_wall = query(POINT.format(f=f, ip=ip))
                row = dict(cpu=cpu, wall=wall, bpr=f.stat().st_size / rows, mb=total / 1e6,
                           agg_cpu=agg_cpu, agg_wall=agg_wall, pt_wall=pt_wall)
                res[name].append(row)
                print(f"  round {r + 1} {name:7} decode cpu {cpu:7.2f} s wall {wall:6.2f} s | "
                      f"branches {row['bpr']:.3f} B/row, all tables {row['mb']:.1f} MB | "
                      f"scan cpu {agg_cpu:.3f} s wall {agg_wall:.3f} s | point {pt_wall:.3f} s",
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load after {os.getloadavg()}")
    print("| codec | decode CPU | decode wall | `branches` bytes/row | all tables | "
          "scan CPU | scan wall | point query | night (decode + scan CPU) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, _ in CODECS:
        m = {k: statistics.median(x[k] for x in res[name]) for k in res[name][0]}
        print(f"| {name} | {m['cpu']:.2f} s | {m['wall']:.2f} s | {m['bpr']:.3f} | "
              f"{m['mb']:.1f} MB | {m['agg_cpu']:.3f} s | {m['agg_wall']:.3f} s | "
              f"{m['pt_wall']:.3f} s | {m['cpu'] + m['agg_cpu']:.2f} s |")


if __name__ == "__main__":
    main()
