"""tracemill.decode: the streams against the CLI's Parquet files, bytes in memory,
options, progress, warnings, errors with the CLI's messages."""

import os
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import tracemill
from conftest import SAMPLES, cli_error, run_cli, samples

RECURSION = SAMPLES / "recursion"


def plain(t: pa.Table) -> pa.Table:
    """The table with dictionary columns as plain strings (Parquet readers rebuild a
    dictionary from the values used; the stream's is the enum's whole list)."""
    cols = []
    for c in t.columns:
        cols.append(c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c)
    return pa.table(cols, names=t.column_names)


@pytest.mark.parametrize("bundle", samples(), ids=lambda p: p.name)
def test_every_table_equals_the_cli_parquet_file(cli, tmp_path, bundle):
    out = tmp_path / "out"
    run_cli(cli, "decode", bundle, "--out", out, "-q")
    got = tracemill.decode(bundle, jobs=2).read_all()
    assert list(got) == list(tracemill.TABLES)
    for name, table in got.items():
        want = pq.read_table(out / f"{name}.parquet")
        # The same columns, types (dictionaries, unsigned), field docs and file metadata.
        assert table.schema.equals(want.schema, check_metadata=True), (name, table.schema, want.schema)
        assert table.num_rows == want.num_rows, name
        assert plain(table).equals(plain(want)), name


def test_any_jobs_and_chunk_size_give_the_same_rows(tmp_path):
    bundle = SAMPLES / "busybox-sort"
    base = tracemill.decode(bundle, jobs=1, tables="branches,timing").read_all()
    for jobs, chunk in [(2, 0), (2, "4K"), (3, 1 << 20)]:
        other = tracemill.decode(bundle, jobs=jobs, chunk_size=chunk, tables=["branches", "timing"]).read_all()
        for t in base:
            assert other[t].equals(base[t]), (jobs, chunk, t)


def test_a_single_table_decode_is_that_stream():
    d = tracemill.decode(RECURSION, tables="branches")
    assert d.tables == ["branches"]
    t = pa.table(d)
    assert t.num_rows == 322_876
    assert t.schema.metadata[b"tracemill.table"] == b"branches"
    assert t.schema.field("ip").type == pa.uint64()
    with pytest.raises(TypeError, match="not asked for"):
        d.events
    with pytest.raises(TypeError, match="2 tables"):
        pa.table(tracemill.decode(RECURSION, tables="branches,events"))


def test_a_stream_is_read_once():
    d = tracemill.decode(RECURSION, tables="events")
    assert d.events.read_all().num_rows > 0
    with pytest.raises(RuntimeError, match="read once"):
        d.events.read_all()


def test_iterating_gives_every_table_in_decode_order():
    d = tracemill.decode(RECURSION)
    rows = {t: 0 for t in d.tables}
    seen = []
    for table, batch in d:
        assert isinstance(batch, pa.RecordBatch)
        assert batch.schema.metadata[b"tracemill.table"] == table.encode()
        rows[table] += batch.num_rows
        seen.append(table)
    # coverage and edges are aggregates: they come last, once the trace is done.
    assert seen[-2:] == ["coverage", "edges"]
    r = d.report()
    assert rows["branches"] == r["branches"] == 322_876
    assert rows["coverage"] == r["blocks"] and rows["edges"] == r["edges"]
    assert "tracemill decode:" in r["summary"] and "322,876 branches" in r["summary"]


def test_batches_of_the_branches_stream_follow_in_seq_order():
    seq = 0
    for b in tracemill.decode(SAMPLES / "callbacks", tables="branches").branches:
        s = b.column("seq")
        assert s[0].as_py() == seq
        assert pc.all(pc.equal(pc.subtract(s, pa.scalar(seq, pa.uint64())), pa.array(range(len(s)), pa.uint64()))).as_py()
        seq += len(s)
    assert seq > 0


def test_a_trace_in_memory_with_its_configuration(tmp_path, monkeypatch):
    bundle = SAMPLES / "recursion"
    want = tracemill.decode(bundle).read_all()
    trace = (bundle / "trace.rtit").read_bytes()
    config = (bundle / "bundle.toml").read_text()
    # Paths in the configuration are relative to the current directory.
    monkeypatch.chdir(bundle)
    got = tracemill.decode(trace, config=config).read_all()
    for t in want:
        assert plain(got[t]).equals(plain(want[t])), t
    md = got["branches"].schema.metadata
    assert md[b"tracemill.source"] == b"<memory>"
    assert b"tracemill.bundle" not in md
    assert md[b"label.sample"] == b"recursion"
    # ctl and images given as arguments instead of a configuration; a bytearray is copied.
    ctl = int(want["branches"].schema.metadata[b"tracemill.rtit_ctl"], 16)
    alone = tracemill.decode(bytearray(trace), ctl=ctl, images=["images/recursion"], tables="branches")
    # Without the configuration's guaranteed_ratio the TSC between STS packets is estimated
    # differently (docs/timing.md); every other column is the same.
    got_alone = plain(alone.read_all()["branches"]).drop_columns(["tsc"])
    assert got_alone.equals(plain(want["branches"]).drop_columns(["tsc"]))


def test_ring_and_collected_forms_from_memory(monkeypatch):
    for name in ["busybox-gzip-ring", "topa-wrapped", "trace-hub"]:
        bundle = SAMPLES / name
        want = tracemill.decode(bundle, tables="branches,events").read_all()
        monkeypatch.chdir(bundle)
        conf = (bundle / "bundle.toml").read_text()
        # The trace's file, as the manifest names it (trace.topa, trace.hub, trace.rtit).
        trace = bundle / tomllib.loads(conf).get("trace", "trace.rtit")
        got = tracemill.decode(trace.read_bytes(), config=conf, tables="branches,events").read_all()
        for t in want:
            assert plain(got[t]).equals(plain(want[t])), (name, t)


def test_progress_callback_reaches_the_total():
    calls = []
    d = tracemill.decode(SAMPLES / "busybox-sort", tables="branches", progress=lambda done, total: calls.append((done, total)))
    d.branches.read_all()
    total = (SAMPLES / "busybox-sort" / "trace.rtit").stat().st_size
    assert calls and calls[-1] == (total, total)
    dones = [c[0] for c in calls]
    assert dones == sorted(dones) and all(t == total for _, t in calls)


def test_progress_counts_over_every_area_of_a_perf_data():
    # Each AUX area's offsets start at 0: progress adds the areas before it, so it does not
    # stall at the first area's end until the decode is over.
    perf = os.environ.get("TRACEMILL_PERF_DATA")
    if not perf:
        assert not os.environ.get("CI"), "CI makes the perf.data (pipeline/tests/python_package.rs)"
        pytest.skip("no perf.data made (TRACEMILL_PERF_DATA)")
    calls = []
    d = tracemill.decode(perf, tables="branches", progress=lambda done, total: calls.append((done, total)))
    d.branches.read_all()
    total = d.total_bytes
    dones = [c[0] for c in calls]
    assert calls[-1] == (total, total) and dones == sorted(dones)
    # Two areas of equal size: the second one's pieces report past the first's end.
    assert any(total // 2 < x < total for x in dones), dones


def test_progress_true_shows_a_tqdm_bar(capsys):
    tracemill.decode(RECURSION, tables="events", progress=True).events.read_all()
    err = capsys.readouterr().err
    assert "decoding" in err and "100%" in err


def test_warnings_go_through_the_warnings_module(tmp_path):
    missing = tmp_path / "nope.bin"
    with pytest.warns(tracemill.TracemillWarning, match="nope.bin: no such file or directory"):
        d = tracemill.decode(RECURSION, images=[f"{missing}@0x1000"], tables="events")
    assert d.events.read_all().num_rows > 0


def test_errors_carry_the_cli_message(cli, tmp_path):
    cases = []
    # No such bundle.
    nowhere = tmp_path / "nowhere"
    cases.append((tracemill.BundleError, [nowhere], {}, ["decode", nowhere]))
    # A directory without bundle.toml.
    empty = tmp_path / "empty"
    empty.mkdir()
    cases.append((tracemill.BundleError, [empty], {}, ["decode", empty]))
    # An invalid bundle.toml (the message shows the line).
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "bundle.toml").write_text('rtit_ctl = "zz"\n')
    (bad / "trace.rtit").write_bytes(b"\0" * 64)
    cases.append((tracemill.BundleError, [bad], {}, ["decode", bad]))
    # A bare trace without ctl.
    bare = tmp_path / "t.rtit"
    bare.write_bytes(b"\1" * 4096)
    cases.append((tracemill.BundleError, [bare], {}, ["decode", bare]))
    # No PSB in the trace.
    cases.append((tracemill.NoPsbError, [bare], {"ctl": 0x2E0D}, ["decode", bare, "--ctl", "0x2e0d"]))
    # No code image.
    noimg = tmp_path / "noimg"
    noimg.mkdir()
    (noimg / "bundle.toml").write_text('rtit_ctl = "0x2f0b"\n')
    (noimg / "trace.rtit").write_bytes((SAMPLES / "recursion" / "trace.rtit").read_bytes())
    cases.append((tracemill.MissingImageError, [noimg], {}, ["decode", noimg]))
    # Options.
    cases.append((tracemill.OptionError, [RECURSION], {"tables": "bogus"}, ["decode", RECURSION, "--tables", "bogus"]))
    cases.append((tracemill.OptionError, [RECURSION], {"tables": ""}, ["decode", RECURSION, "--tables", ""]))
    for cls, args, kwargs, cli_args in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(cls) as e:
                tracemill.decode(*args, **kwargs).read_all()
        assert isinstance(e.value, tracemill.TracemillError)
        # The same message, naming Python's argument where the CLI names its flag.
        want = cli_error(cli, *cli_args).replace("needs --ctl (", "needs ctl= (")
        assert str(e.value) == want, cli_args
    # Values the CLI refuses while reading its arguments: the same reason.
    for kwargs, flag in [({"jobs": 300}, ["-j", "300"]), ({"chunk_size": "5M"}, ["--chunk-size", "5M"])]:
        with pytest.raises(tracemill.OptionError) as e:
            tracemill.decode(RECURSION, **kwargs)
        r = run_cli(cli, "decode", RECURSION, *flag, check=False)
        assert r.returncode == 2
        reason = str(e.value).split(": ", 1)[1]
        assert reason in r.stderr, (reason, r.stderr)
    assert isinstance(e.value, ValueError)


def test_close_stops_a_decode_early():
    d = tracemill.decode(SAMPLES / "busybox-sort", tables="branches")
    next(iter(d.branches))
    d.close()
    assert list(d.branches) == []
    assert d.report() is None


def test_every_error_class_the_module_raises_is_a_tracemill_error():
    from tracemill import _tracemill, errors

    assert len(_tracemill._ERROR_CLASSES) == 8
    for name in _tracemill._ERROR_CLASSES:
        assert issubclass(getattr(errors, name), errors.TracemillError), name
