"""Fixtures of the package's tests: the repository, the CLI to compare against, the
sample bundles. Run by the README's test command (pipeline/tests/python_package.rs sets
TRACEMILL_BIN), or by hand: .venv/bin/python -m pytest python/tracemill-py/tests."""

import os
import re
import subprocess
from pathlib import Path

import pytest

import tracemill

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "datasets" / "samples"

# The directories build.rs fingerprints (read from it: one list), and how (FNV-1a 64 over
# each file's path from the root and bytes, in path order, each followed by a NUL).
_BUILD_RS = (ROOT / "python" / "tracemill-py" / "build.rs").read_text()
SOURCES = re.findall(r'"([^"]+)"', _BUILD_RS[_BUILD_RS.index("const SOURCES"):].split("];")[0])


def _fingerprint() -> str:
    files = []
    for d in SOURCES:
        for dirpath, dirnames, filenames in os.walk(ROOT / d):
            dirnames[:] = [n for n in dirnames if not n.startswith(".") and n != "__pycache__"]
            for n in filenames:
                if n.startswith(".") or n.endswith(".so"):
                    continue
                files.append(Path(dirpath) / n)
    # Rust sorts paths by component.
    files.sort(key=lambda p: p.parts)
    h = 0xCBF29CE484222325
    mask = (1 << 64) - 1

    def eat(b: bytes) -> None:
        nonlocal h
        for x in b:
            h ^= x
            h = (h * 0x100000001B3) & mask

    for f in files:
        eat(str(f.relative_to(ROOT)).encode())
        eat(b"\0")
        eat(f.read_bytes())
        eat(b"\0")
    return f"{h:016x}"


def pytest_sessionstart(session):
    built = tracemill._tracemill._source_fingerprint()
    here = _fingerprint()
    if built != here:
        raise pytest.UsageError(
            f"the installed tracemill package ({tracemill.__file__}) was built from other "
            f"sources than this tree's (fingerprint {built}, the tree's {here}): reinstall it "
            "with .venv/bin/pip install -v ./python/tracemill-py"
        )


@pytest.fixture(scope="session")
def cli() -> str:
    """The tracemill binary the results are compared with."""
    exe = os.environ.get("TRACEMILL_BIN") or str(ROOT / "target" / "release" / "tracemill")
    if not os.path.exists(exe):
        pytest.fail(f"no tracemill binary at {exe}: cargo build --release, or set TRACEMILL_BIN")
    return exe


def run_cli(cli, *args, check=True, cwd=None):
    r = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, cwd=cwd)
    if check and r.returncode != 0:
        raise AssertionError(f"tracemill {' '.join(map(str, args))} failed:\n{r.stderr}")
    return r


def cli_error(cli, *args) -> str:
    """The CLI's error for these arguments: the text after `tracemill: error: ` (with the
    lines that follow it, as a bundle.toml error shows its line), before any hint."""
    r = run_cli(cli, *args, check=False)
    assert r.returncode != 0, r.stderr
    text = r.stderr
    i = text.index("tracemill: error: ")
    text = text[i + len("tracemill: error: "):]
    j = text.find("\ntracemill: ")
    return (text if j < 0 else text[:j]).rstrip("\n")


def samples():
    return sorted(p for p in SAMPLES.iterdir() if (p / "bundle.toml").exists())
