"""tracemill.report, dump and ingest against the CLI's own output."""

import csv
import io
import json
import re
import shutil
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tracemill
from conftest import SAMPLES, cli_error, run_cli

RECURSION = SAMPLES / "recursion"


@pytest.fixture(scope="module")
def out(cli, tmp_path_factory):
    d = tmp_path_factory.mktemp("recursion")
    run_cli(cli, "decode", RECURSION, "--out", d, "-q")
    return d


@pytest.fixture(scope="module")
def dataset(cli, tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet")
    run_cli(cli, "synth", "fleet", "--out", base / "fleet", "--samples", SAMPLES)
    t = tracemill.ingest(base / "fleet", base / "ds", partition_by="date,host", jobs=2)
    assert t.num_rows == 12
    assert t.column("status").to_pylist() == ["ok"] * 12
    assert set(t.column("outcome").to_pylist()) == {"committed"}
    again = tracemill.ingest(base / "fleet", base / "ds", partition_by=["date", "host"])
    assert set(again.column("outcome").to_pylist()) == {"already committed"}
    return base / "ds"


@pytest.mark.parametrize("by", ["function", "line", "block"])
def test_hotspots_equal_the_cli_csv(cli, out, by):
    t = tracemill.report.hotspots(out, by=by)
    r = run_cli(cli, "report", "hotspots", out, "--by", by, "--format", "csv", "--top", "0")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert t.num_rows == len(rows)
    got = t.to_pylist()
    for g, w in zip(got, rows):
        assert g["function"] == w["function"] and g["image"] == w["image"]
        assert g["instructions"] == int(w["instructions"]) and g["calls"] == int(w["calls"])
        if by != "function":
            assert g[by] == w[by]
    md = t.schema.metadata
    assert md[b"tracemill.report"] == b"hotspots"
    assert int(md[b"tracemill.total_instructions"]) == 1_447_668


def test_flamegraph_equals_the_cli_folded_stacks(cli, out, tmp_path):
    folded = tmp_path / "fg.folded"
    run_cli(cli, "report", "flamegraph", out, "--folded", folded)
    t = tracemill.report.flamegraph(out)
    want = [l.rsplit(" ", 1) for l in folded.read_text().splitlines()]
    assert [[s, str(w)] for s, w in zip(t.column("stack").to_pylist(), t.column("weight").to_pylist())] == want
    assert sum(t.column("weight").to_pylist()) == int(t.schema.metadata[b"tracemill.total"]) == 1_447_668
    svg = tracemill.report.flamegraph_svg(out)
    assert svg.startswith("<?xml") and "insert" in svg and svg._repr_svg_() == svg


def test_coverage_timeline_and_html(cli, out, tmp_path):
    f = tracemill.report.coverage(out)
    assert {"function", "instructions", "lines_hit"} <= set(f.column_names)
    assert sum(f.column("instructions").to_pylist()) == 1_447_668
    i = tracemill.report.coverage(out, by="image")
    assert i.column("image").to_pylist() == ["recursion"]
    tl = tracemill.report.timeline(out)
    js = tmp_path / "t.json"
    run_cli(cli, "report", "timeline", out, "--out", js)
    spans = [e for e in json.loads(js.read_text())["traceEvents"] if e["ph"] == "X"]
    assert tl.num_rows == len(spans) > 0
    assert tl.column("function").to_pylist() == [e["name"] for e in spans]
    assert tl.column("calls").to_pylist() == [e["args"].get("calls", 1) for e in spans]
    assert int(tl.schema.metadata[b"tracemill.merged"]) == 0  # cycle-accurate: none too short
    page = tracemill.report.html(out, top=5)
    assert page.lstrip().lower().startswith("<!doctype html") and page._repr_html_() == page


def test_reports_over_a_dataset_with_where(cli, dataset):
    where = "host IN ('h1', 'h2') AND program = 'recursion'"
    t = tracemill.report.hotspots(dataset, where=where)
    r = run_cli(cli, "report", "hotspots", dataset, "--where", where, "--format", "csv", "--top", "0")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(g["function"], g["instructions"]) for g in t.to_pylist()] == [
        (w["function"], int(w["instructions"])) for w in rows
    ]
    assert int(t.schema.metadata[b"tracemill.total_instructions"]) == 4 * 1_447_668
    with pytest.raises(tracemill.FilterError) as e:
        tracemill.report.hotspots(dataset, where="nohost = 'x'")
    assert isinstance(e.value, ValueError)
    assert str(e.value) == cli_error(cli, "report", "hotspots", dataset, "--where", "nohost = 'x'")


def test_diff_equals_the_cli_csv(cli, out, dataset):
    # Two selections of one dataset: h1's recursion against h2's bundles.
    args = dict(where_a="host = 'h1' AND program = 'recursion'", where_b="host = 'h2'")
    t = tracemill.report.diff(dataset, dataset, **args)
    flags = ["--where-a", args["where_a"], "--where-b", args["where_b"]]
    r = run_cli(cli, "report", "diff", dataset, dataset, *flags, "--format", "csv", "--top", "0")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(g["function"], g["instructions_a"], g["instructions_b"], g["change"]) for g in t.to_pylist()] == [
        (w["function"], int(w["instructions_a"]), int(w["instructions_b"]), int(w["change"])) for w in rows
    ]
    md = t.schema.metadata
    assert md[b"tracemill.report"] == b"diff"
    total_b = int(md[b"tracemill.total_instructions_b"])
    assert sum(t.column("change").to_pylist()) == total_b - int(md[b"tracemill.total_instructions_a"])
    c = tracemill.report.diff(dataset, dataset, coverage=True, **args)
    r = run_cli(cli, "report", "diff", dataset, dataset, *flags, "--format", "csv", "--coverage", "--top", "0")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(g["function"], g["line"], g["blocks_gained"], g["edges_lost"]) for g in c.to_pylist()] == [
        (w["function"], w["line"], int(w["blocks_gained"]), int(w["edges_lost"])) for w in rows
    ]
    # A run against itself: nothing changed, nothing gained or lost.
    same = tracemill.report.diff(out, out, by="line")
    assert set(same.column("change").to_pylist()) == {0} and "line" in same.column_names
    assert tracemill.report.diff(out, out, coverage=True).num_rows == 0
    page = tracemill.report.html(out, top=5, baseline=out)
    assert 'id="changes"' in page


def test_pprof_and_perf_script_are_the_clis(cli, out, tmp_path):
    mine, theirs = tmp_path / "py.pb.gz", tmp_path / "cli.pb.gz"
    got = tracemill.report.pprof(out, mine)
    assert got["instructions"] == 1_447_668 and got["samples"] > 0 and got["mappings"] == 1
    run_cli(cli, "report", "pprof", out, "-o", theirs)
    import gzip
    assert gzip.decompress(mine.read_bytes()) == gzip.decompress(theirs.read_bytes())
    text, cli_text = tmp_path / "py.txt", tmp_path / "cli.txt"
    n = tracemill.report.perf_script(out, text)
    run_cli(cli, "report", "perf-script", out, "-o", cli_text)
    assert text.read_text() == cli_text.read_text()
    assert n == len(text.read_text().splitlines()) > 0


def test_report_errors_carry_the_cli_message(cli, tmp_path):
    with pytest.raises(tracemill.ReportError) as e:
        tracemill.report.hotspots(tmp_path)
    assert str(e.value) == cli_error(cli, "report", "hotspots", tmp_path)


def test_a_bundle_other_than_the_tables_is_refused(cli, out):
    # recursion's tables with callbacks' bundle: refused, as by the CLI, not counted as 0.
    other = SAMPLES / "callbacks"
    with pytest.raises(tracemill.ReportError, match="not the bundle these tables were decoded from") as e:
        tracemill.report.hotspots(out, bundle=other)
    assert str(e.value) == cli_error(cli, "report", "hotspots", out, "--bundle", other)
    # Their own bundle, named: accepted.
    assert tracemill.report.hotspots(out, bundle=RECURSION).num_rows > 0


def test_a_missing_symfs_or_buildid_dir_is_refused_with_its_path(cli, tmp_path):
    missing = tmp_path / "no-such-dir"
    for arg, flag in [("symfs", "--symfs"), ("buildid_dir", "--buildid-dir")]:
        with pytest.raises(tracemill.OptionError, match=re.escape(f"{arg}={missing}: no such directory")):
            tracemill.ingest([RECURSION], tmp_path / "ds", **{arg: missing})
        r = run_cli(cli, "ingest", RECURSION, "--dataset", tmp_path / "ds", flag, missing, check=False)
        assert r.returncode == 2 and f"{missing}: no such directory" in r.stderr
    assert not (tmp_path / "ds").exists()


def test_ingest_failures_are_rows_and_a_warning(tmp_path):
    bad = tmp_path / "src" / "bad"
    bad.mkdir(parents=True)
    (bad / "bundle.toml").write_text('rtit_ctl = "0x2e0d"\n')
    (bad / "trace.rtit").write_bytes(b"\1" * 100)
    with pytest.warns(tracemill.TracemillWarning, match="1 of 1 bundles failed"):
        t = tracemill.ingest(tmp_path / "src", tmp_path / "ds")
    row = t.to_pylist()[0]
    assert row["status"] == "failed" and "no PSB packet" in row["error"]
    # A source that does not exist is named; one that holds no bundle says so.
    with pytest.raises(tracemill.IngestError, match="nothing-here-: No such file or directory"):
        tracemill.ingest(tmp_path / "nothing-here-", tmp_path / "ds2")
    (tmp_path / "empty").mkdir()
    with pytest.raises(tracemill.IngestError, match="no bundle found"):
        tracemill.ingest(tmp_path / "empty", tmp_path / "ds2")


def test_ingest_takes_the_format_and_intel_pt_facts_as_the_cli_does(cli, tmp_path):
    src = tmp_path / "src" / "recursion"
    shutil.copytree(RECURSION, src)
    with pytest.warns(tracemill.TracemillWarning, match="1 of 1 bundles failed"):
        t = tracemill.ingest(src, tmp_path / "py", format="pt")
    row = t.to_pylist()[0]
    r = run_cli(cli, "ingest", src, "--dataset", tmp_path / "cli", "--trace-format", "pt", "-q", check=False)
    assert r.returncode == 3, r.stderr
    want = pq.read_table(next((tmp_path / "cli" / "bundles").glob("*.parquet"))).to_pylist()[0]
    assert row["status"] == want["status"] == "failed"
    assert row["error"] == want["error"] and 'format = "rtit"' in row["error"]
    assert tracemill.ingest(src, tmp_path / "ok", format="rtit").to_pylist()[0]["status"] == "ok"
    with pytest.raises(tracemill.OptionError, match="format="):
        tracemill.ingest(src, tmp_path / "x", format="arm")


def test_dump_equals_the_cli_listing(cli):
    for bundle in [RECURSION, SAMPLES / "topa-wrapped"]:
        t = tracemill.dump(bundle)
        text = run_cli(cli, "dump", bundle).stdout.splitlines()
        lines = []
        for r in t.to_pylist():
            if r["packet"] == "skipped":
                lines.append(f"{0:016x}  {'':<30} skipped {r['fields'].split()[0]} bytes before the first PSB")
            elif r["packet"] == "error":
                lines.append(f"{r['offset']:016x}  {'':<30} error: {r['fields']}")
            else:
                hexb = " ".join(f"{b:02x}" for b in r["bytes"])
                lines.append(f"{r['offset']:016x}  {hexb:<30} {r['packet']:<12} {r['fields']}")
        assert lines == text
    s = tracemill.dump(RECURSION, stats=True)
    counts = dict(zip(s.column("packet").to_pylist(), s.column("count").to_pylist()))
    assert counts["psb"] == 59
    st = run_cli(cli, "dump", RECURSION, "--stats").stdout
    for name, n in counts.items():
        assert f"{name:<14} {n}" in st


def test_dump_errors_carry_the_cli_message(cli, tmp_path):
    bare = tmp_path / "t.rtit"
    bare.write_bytes(b"\1" * 64)
    with pytest.raises(tracemill.BundleError) as e:
        tracemill.dump(bare)
    # The same message, naming Python's argument where the CLI names its flag.
    assert str(e.value) == cli_error(cli, "dump", bare).replace("needs --ctl (", "needs ctl= (")
