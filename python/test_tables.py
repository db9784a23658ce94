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
    print(f"python: {n} branches read by duckdb, pyarrow and polars; hotspot {hot[0][0]:#x} x{hot[0][1]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
