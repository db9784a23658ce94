"""Every kind of source the CLI reads, decoded through the CLI and through Python: the
same tables and the same warnings. Both faces open their input through one layer
(`tracemill_input::Source::open`), which decides the format and makes the checks before
a decode; this test is what keeps them one."""

import json
import os
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tracemill
from conftest import ROOT, SAMPLES, cli_error, run_cli
from test_decode import plain

RECURSION = SAMPLES / "recursion"
PTT = ROOT / "datasets" / "libipt-ptt"


def pt_case():
    """A libipt test case the flow decodes as ptxed does: its trace, code and load address."""
    known = (PTT / "ptxed-known-failures.txt").read_text().splitlines()
    failing = {l.split()[0] for l in known if l.strip() and not l.startswith("#")}
    for c in json.loads((PTT / "index.json").read_text())["cases"]:
        name = c["name"]
        exp = f"{name}-ptxed.exp"
        if c.get("cpus") or c.get("ptxed") or exp in failing or not (PTT / name / exp).exists():
            continue
        return PTT / name / f"{name}.pt", PTT / name / f"{name}.bin", c["org"]
    raise AssertionError("no libipt case to decode")


def pt_bundle(dir: Path) -> Path:
    pt, code, org = pt_case()
    b = dir / "pt-bundle"
    (b / "images").mkdir(parents=True)
    (b / "trace.pt").write_bytes(pt.read_bytes())
    (b / "images" / "code").write_bytes(code.read_bytes())
    (b / "bundle.toml").write_text(
        f'format = "pt"\ntrace = "trace.pt"\nrtit_ctl = "0x2000"\n\n'
        f'[[image]]\npath = "images/code"\nkind = "raw"\nbase = "{org}"\n'
    )
    return b


def sources(tmp: Path):
    """(kind, path, Python's keyword arguments, the CLI's arguments) of each source kind."""
    elf = RECURSION / "images" / "recursion"
    pt, code, org = pt_case()
    raw = f"{code}@{org}"
    out = [
        ("bundle", RECURSION, {}, []),
        ("bare RTIT trace", RECURSION / "trace.rtit", {"ctl": 0x6F0B, "images": [str(elf)]},
         ["--ctl", "0x6f0b", "--image", elf]),
        ("ToPA capture", SAMPLES / "topa-wrapped", {}, []),
        ("trace-hub capture", SAMPLES / "trace-hub", {}, []),
        ("Intel PT bundle", pt_bundle(tmp), {}, []),
        ("bare Intel PT file", pt, {"images": [raw]}, ["--image", raw]),
    ]
    perf = os.environ.get("TRACEMILL_PERF_DATA")
    if perf:
        out.append(("perf.data", Path(perf), {}, []))
    return out


def cli_warnings(stderr: str):
    return [l.split("warning       ", 1)[1] for l in stderr.splitlines() if l.startswith("  warning       ")]


def test_every_kind_of_source_decodes_alike_through_the_cli_and_python(cli, tmp_path):
    kinds = set()
    for kind, src, kwargs, args in sources(tmp_path):
        out = tmp_path / kind.replace(" ", "-")
        r = run_cli(cli, "decode", src, *args, "--out", out, "-q")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = tracemill.decode(src, jobs=2, **kwargs).read_all()
        said = [str(w.message) for w in caught if issubclass(w.category, tracemill.TracemillWarning)]
        assert said == cli_warnings(r.stderr), kind
        for name, table in got.items():
            want = pq.read_table(out / f"{name}.parquet")
            assert table.column_names == want.column_names, (kind, name)
            assert table.schema.metadata == want.schema.metadata, (kind, name)
            assert table.num_rows == want.num_rows, (kind, name)
            assert plain(table).equals(plain(want)), (kind, name)
        assert got["branches"].num_rows > 0, kind
        if kind == "perf.data":
            assert {"cpu", "pid", "tid", "time"} <= set(got["branches"].column_names)
        kinds.add(kind)
    if os.environ.get("CI"):
        assert "perf.data" in kinds


def test_a_refused_input_names_the_option_as_each_face_does(cli, tmp_path):
    pt, _, _ = pt_case()
    bare = tmp_path / "t.rtit"
    bare.write_bytes((RECURSION / "trace.rtit").read_bytes())
    for kwargs, args, names in [
        ({}, ["decode", bare], [("--ctl", "ctl=")]),
        ({"format": "rtit", "ctl": 0x2000}, ["decode", pt, "--trace-format", "rtit", "--ctl", "0x2000"],
         [("--trace-format pt", 'format="pt"')]),
        ({"ctl": 0x6F0B, "nom_freq": 24}, ["decode", bare, "--ctl", "0x6f0b", "--nom-freq", "24"],
         [("--nom-freq", "nom_freq="), ("--trace-format pt", 'format="pt"')]),
    ]:
        with pytest.raises(tracemill.TracemillError) as e:
            tracemill.decode(args[1], **kwargs)
        want = cli_error(cli, *args)
        for cli_name, py_name in names:
            assert cli_name in want, want
            want = want.replace(cli_name, py_name)
        assert str(e.value) == want
