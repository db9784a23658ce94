"""A dataset written by `tracemill ingest`, read the way users read it.

Usage: test_ingest.py DEST_OR_S3_URL GOOD_COUNT FAILED_COUNT [PLAIN_LIST]

PLAIN_LIST (local DEST only): lines "BUNDLE_ID<TAB>DIR", DIR holding a plain
`tracemill decode` of that bundle; each bundle's rows in every table must be exactly
those.

DEST is a local directory or s3://bucket/prefix (then the AWS_* environment variables
say where the server is). Checks, with DuckDB, pyarrow and polars: the catalog (ok and
failed rows with reasons), the hive partition columns, the `bundle` column on every row,
and that each engine counts for every bundle the branches its catalog row says.
"""

import os
import sys

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pyarrow.fs as pafs

dest, good, failed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plain_list = sys.argv[4] if len(sys.argv) > 4 else None
s3 = dest.startswith("s3://")


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------- DuckDB
con = duckdb.connect()
# DuckDB reads S3 through its httpfs extension, which it downloads: not offline. Locally only.
duck = None if s3 else con

catalog_glob = f"{dest}/bundles/*.parquet"
if duck is not None:
    cat = duck.sql(
        f"SELECT bundle, status, error, branches FROM read_parquet('{catalog_glob}', union_by_name = true)"
    ).fetchall()
    oks = [r for r in cat if r[1] == "ok"]
    bad = [r for r in cat if r[1] == "failed"]
    if len(oks) != good or len(bad) != failed:
        fail(f"duckdb catalog: {len(oks)} ok, {len(bad)} failed; expected {good}, {failed}")
    if any(not r[2] for r in bad):
        fail("a failed row without a reason")
    want = {r[0]: r[3] for r in oks}
    got = dict(
        duck.sql(
            f"SELECT bundle, count(*) FROM read_parquet('{dest}/branches/**/*.parquet', hive_partitioning = true) GROUP BY bundle"
        ).fetchall()
    )
    # Bundles with no branch have an empty file, hence no group.
    if {k: v for k, v in want.items() if v} != got:
        fail(f"duckdb: branches per bundle {got} != catalog {want}")
    cols = [
        c[0]
        for c in duck.sql(
            f"DESCRIBE SELECT * FROM read_parquet('{dest}/events/**/*.parquet', hive_partitioning = true)"
        ).fetchall()
    ]
    for c in ("bundle", "date", "host", "kind", "offset"):
        if c not in cols:
            fail(f"duckdb: events has no column {c}: {cols}")
    # The null partition reads as NULL, and a partition filter prunes directories.
    nulls = duck.sql(
        f"SELECT count(DISTINCT bundle) FROM read_parquet('{dest}/edges/**/*.parquet', hive_partitioning = true) WHERE host IS NULL"
    ).fetchall()[0][0]
    if nulls != 1:
        fail(f"duckdb: {nulls} bundles in the null host partition, expected 1")
    # Catalog labels joined to the rows.
    joined = duck.sql(
        f"""SELECT c.program, count(*) FROM read_parquet('{dest}/branches/**/*.parquet', hive_partitioning = true) b
            JOIN read_parquet('{catalog_glob}', union_by_name = true) c USING (bundle)
            WHERE c.status = 'ok' GROUP BY c.program"""
    ).fetchall()
    if sum(n for _, n in joined) != sum(want.values()):
        fail("duckdb: join with the catalog lost rows")
    print(f"duckdb: {len(oks)} ok, {len(bad)} failed, {sum(want.values())} branches")
    if plain_list:
        compared = 0
        for line in open(plain_list):
            bundle, plain = line.rstrip("\n").split("\t")
            for table in ("branches", "events", "timing", "coverage", "edges"):
                ours = f"""SELECT * EXCLUDE (bundle) FROM read_parquet('{dest}/{table}/**/*.parquet',
                           hive_partitioning = false) WHERE bundle = '{bundle}'"""
                theirs = f"SELECT * FROM read_parquet('{plain}/{table}.parquet')"
                diff = duck.sql(
                    f"SELECT count(*) FROM (({ours}) EXCEPT ALL ({theirs})) UNION ALL "
                    f"SELECT count(*) FROM (({theirs}) EXCEPT ALL ({ours}))"
                ).fetchall()
                n = duck.sql(f"SELECT count(*) FROM ({theirs})").fetchall()[0][0]
                m = duck.sql(f"SELECT count(*) FROM ({ours})").fetchall()[0][0]
                if diff != [(0,), (0,)] or n != m:
                    fail(f"duckdb: {table} of bundle {bundle} differs from a plain decode: {diff}, {m} rows against {n}")
            compared += 1
        if compared != good:
            fail(f"compared {compared} bundles with a plain decode, expected {good}")
        print(f"duckdb: every table of {compared} bundles equals a plain decode")
else:
    want = None

# ---------------------------------------------------------------- pyarrow
if s3:
    fs = pafs.S3FileSystem(
        endpoint_override=os.environ["AWS_ENDPOINT_URL"],
        access_key=os.environ["AWS_ACCESS_KEY_ID"],
        secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region=os.environ.get("AWS_REGION", "us-east-1"),
        scheme="http",
    )
    root = dest[len("s3://"):]
else:
    fs = pafs.LocalFileSystem()
    root = dest

cat_ds = ds.dataset(f"{root}/bundles", format="parquet", filesystem=fs)
import pyarrow as pa

schemas = [ds.dataset(f, format="parquet", filesystem=fs).schema for f in cat_ds.files]
cat_tab = ds.dataset(cat_ds.files, format="parquet", filesystem=fs, schema=pa.unify_schemas(schemas)).to_table()
status = cat_tab.column("status").to_pylist()
if status.count("ok") != good or status.count("failed") != failed:
    fail(f"pyarrow catalog: {status}")
want_pa = {
    b: n
    for b, s, n in zip(
        cat_tab.column("bundle").to_pylist(), status, cat_tab.column("branches").to_pylist()
    )
    if s == "ok"
}
if want is not None and want_pa != want:
    fail("pyarrow and duckdb read different catalogs")
branches = ds.dataset(f"{root}/branches", format="parquet", filesystem=fs, partitioning="hive")
t = branches.to_table(columns=["bundle", "ip", "host"])
counts = {}
for b in t.column("bundle").to_pylist():
    counts[b] = counts.get(b, 0) + 1
if counts != {k: v for k, v in want_pa.items() if v}:
    fail(f"pyarrow: branches per bundle {counts} != catalog {want_pa}")
if t.column("host").null_count == 0:
    fail("pyarrow: the null partition did not read as null")
print(f"pyarrow: {t.num_rows} branches in {len(counts)} bundles")

# ---------------------------------------------------------------- polars
if s3:
    opts = {
        "aws_endpoint_url": os.environ["AWS_ENDPOINT_URL"],
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "aws_region": os.environ.get("AWS_REGION", "us-east-1"),
        "aws_allow_http": "true",
    }
else:
    opts = None
lf = pl.scan_parquet(f"{dest}/branches/**/*.parquet", hive_partitioning=True, storage_options=opts)
per = lf.group_by("bundle").agg(pl.len().alias("n")).collect()
got_pl = dict(zip(per["bundle"].to_list(), per["n"].to_list()))
if got_pl != {k: v for k, v in want_pa.items() if v}:
    fail(f"polars: branches per bundle {got_pl} != catalog {want_pa}")
cat_pl = pl.scan_parquet(f"{dest}/bundles/*.parquet", missing_columns="insert", storage_options=opts).collect()
if cat_pl.filter(pl.col("status") == "failed").height != failed:
    fail("polars: failed rows")
print(f"polars: {sum(got_pl.values())} branches in {len(got_pl)} bundles")
print("ok")
