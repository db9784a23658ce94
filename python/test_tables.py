"""Read tracemill's tables the way users do: DuckDB, pyarrow, polars.

Usage: python3 python/test_tables.py TABLES_DIR BUNDLE_DIR

TABLES_DIR holds branches.parquet and events.parquet decoded from BUNDLE_DIR, whose
truth/summary.json gives the expected counts. Run by `cargo test` (pipeline/tests/python.rs).
"""

import json
import os
import sys

import duckdb
import polars as pl
import pyarrow.parquet as pq


def main(out, bundle):
    branches = os.path.join(out, "branches.parquet")
    events = os.path.join(out, "events.parquet")
    with open(os.path.join(bundle, "truth", "summary.json")) as f:
        truth = json.load(f)
    expect_rows = truth["branches"] - truth["lost_rows"]

    con = duckdb.connect()
    # Addresses are unsigned 64-bit: DuckDB must see UBIGINT, not BIGINT or BLOB.
    types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM '{branches}'").fetchall()}
    assert types["ip"] == "UBIGINT", types
    assert types["target"] == "UBIGINT", types
    assert types["offset"] == "UBIGINT", types
    assert types["kind"] == "VARCHAR", types
    assert types["insns"] == "UINTEGER", types

    n = con.execute(f"SELECT count(*) FROM '{branches}'").fetchone()[0]
    assert n == expect_rows, (n, expect_rows)
    # Counts by kind agree with the truth's (nothing lost in this bundle).
    by_kind = dict(con.execute(f"SELECT kind, count(*) FROM '{branches}' GROUP BY kind").fetchall())
    assert by_kind == truth["branches_by_kind"], (by_kind, truth["branches_by_kind"])
    insns = con.execute(f"SELECT sum(insns) FROM '{branches}'").fetchone()[0]
    assert 0 < insns <= truth["instructions"], (insns, truth["instructions"])

    # Hotspots: the most frequent branch targets.
    hot = con.execute(
        f"""SELECT target, count(*) AS n FROM '{branches}'
            WHERE target IS NOT NULL GROUP BY target ORDER BY n DESC, target LIMIT 10"""
    ).fetchall()
    assert len(hot) == 10 and hot[0][1] >= hot[-1][1] > 0, hot
    # A filter on ip (the column with a bloom filter) finds exactly that branch's rows.
    ip, want = con.execute(
        f"SELECT ip, count(*) FROM '{branches}' GROUP BY ip ORDER BY 2 DESC LIMIT 1"
    ).fetchone()
    got = con.execute(f"SELECT count(*) FROM '{branches}' WHERE ip = {ip}").fetchone()[0]
    assert got == want, (ip, got, want)
    # seq numbers every row from 0 in execution order.
    lo, hi, distinct = con.execute(
        f"SELECT min(seq), max(seq), count(DISTINCT seq) FROM '{branches}'"
    ).fetchone()
    assert (lo, hi, distinct) == (0, n - 1, n), (lo, hi, distinct)
    # Events: one PSB event per PSB in the trace.
    psb = con.execute(f"SELECT count(*) FROM '{events}' WHERE kind = 'psb'").fetchone()[0]
    assert psb == truth["psbs"], (psb, truth["psbs"])
    meta = dict(
        con.execute(f"SELECT key::VARCHAR, value::VARCHAR FROM parquet_kv_metadata('{branches}')").fetchall()
    )
    assert meta.get("tracemill.table") == "branches", meta
    assert "tracemill.rtit_ctl" in meta and "tracemill.schema_version" in meta, meta

    # Timing and coverage (cycle-accurate sample): cycles never go back; every timing
    # packet has a row.
    timing = os.path.join(out, "timing.parquet")
    coverage = os.path.join(out, "coverage.parquet")
    edges = os.path.join(out, "edges.parquet")
    back = con.execute(
        f"""SELECT count(*) FROM (SELECT cycles - lag(cycles) OVER (ORDER BY seq) AS d
            FROM '{branches}') WHERE d < 0"""
    ).fetchone()[0]
    assert back == 0, back
    ntiming = con.execute(f"SELECT count(*) FROM '{timing}'").fetchone()[0]
    want_timing = sum(truth["packets_by_type"].get(k, 0) for k in ("mtc", "sts", "cyc", "fup.pcc"))
    assert ntiming == want_timing, (ntiming, want_timing)
    # Coverage: the blocks executed add up to the rows; the truth's block count agrees.
    nblocks, execs = con.execute(f"SELECT count(*), sum(count) FROM '{coverage}'").fetchone()
    assert execs == n, (execs, n)
    assert nblocks == truth["blocks"], (nblocks, truth["blocks"])
    # Hotspots: instructions and cycles per block, top 20. A block's cycles are the
    # cycles between the row before it and the row of its branch.
    hot_blocks = con.execute(
        f"""WITH b AS (
               SELECT ip, cycles - lag(cycles) OVER (ORDER BY seq) AS dc FROM '{branches}'),
             cyc AS (SELECT ip, sum(dc) AS cycles FROM b GROUP BY ip)
           SELECT c.start, c."end", c.insns * c.count AS instructions, cyc.cycles
           FROM '{coverage}' c JOIN cyc ON cyc.ip = c."end"
           ORDER BY instructions DESC LIMIT 20"""
    ).fetchall()
    assert len(hot_blocks) == 20 and all(r[2] > 0 and r[3] is not None for r in hot_blocks), hot_blocks
    # Coverage per image: blocks and instructions executed in each.
    per_image = con.execute(
        f"""SELECT image, count(*) AS blocks, sum(insns * count) AS instructions
           FROM '{coverage}' GROUP BY image ORDER BY instructions DESC"""
    ).fetchall()
    assert per_image[0][0] == "recursion" and per_image[0][1] == nblocks, per_image
    nedges = con.execute(f"SELECT sum(count) FROM '{edges}'").fetchone()[0]
    assert nedges <= n, (nedges, n)

    # pyarrow reads the same file, with unsigned addresses and dictionary kinds.
    t = pq.read_table(branches)
    assert t.num_rows == n
    assert str(t.schema.field("ip").type) == "uint64", t.schema
    assert str(t.schema.field("kind").type).startswith("dictionary"), t.schema
    assert t.schema.metadata[b"tracemill.table"] == b"branches"

    # polars too.
    df = pl.read_parquet(branches)
    assert df.height == n
    assert df.schema["ip"] == pl.UInt64, df.schema
    rets = df.filter(pl.col("kind") == "ret").height
    assert rets == truth["branches_by_kind"].get("ret", 0), rets
    ev = pl.read_parquet(events)
    assert ev.filter(pl.col("kind") == "psb").height == truth["psbs"]
    print(
        f"python: {n} branches read by duckdb, pyarrow and polars; hottest target {hot[0][0]:#x} "
        f"x{hot[0][1]}; hottest block {hot_blocks[0][0]:#x}..{hot_blocks[0][1]:#x} "
        f"({hot_blocks[0][2]} instructions, {hot_blocks[0][3]} cycles); {nblocks} blocks"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
