"""Type hints of the native module (src/*.rs); the documented API is :mod:`tracemill`."""

from typing import Any, Callable, Iterator, Literal, Optional, Sequence, Union
import os

import pyarrow as pa

_ERROR_CLASSES: list[str]

def version() -> str: ...
def _source_fingerprint() -> str: ...
def table_schema(table: str) -> object: ...

class TableStream:
    """One table of a decode: a stream of record batches in trace order, read once."""

    @property
    def table(self) -> str: ...
    @property
    def schema(self) -> pa.Schema: ...
    def __arrow_c_schema__(self) -> object: ...
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def read_all(self) -> pa.Table: ...
    def __iter__(self) -> Iterator[pa.RecordBatch]: ...
    def __next__(self) -> pa.RecordBatch: ...

class Decoding:
    """The streams of one decode, one per table asked for."""

    @property
    def tables(self) -> list[str]: ...
    @property
    def source(self) -> str: ...
    @property
    def total_bytes(self) -> int: ...
    @property
    def branches(self) -> TableStream: ...
    @property
    def events(self) -> TableStream: ...
    @property
    def timing(self) -> TableStream: ...
    @property
    def coverage(self) -> TableStream: ...
    @property
    def edges(self) -> TableStream: ...
    def __getitem__(self, table: str) -> TableStream: ...
    def __contains__(self, table: str) -> bool: ...
    def __len__(self) -> int: ...
    def keys(self) -> list[str]: ...
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def read_all(self) -> dict[str, pa.Table]: ...
    def __iter__(self) -> Iterator[tuple[str, pa.RecordBatch]]: ...
    def __next__(self) -> tuple[str, pa.RecordBatch]: ...
    def report(self) -> Optional[dict[str, Any]]: ...
    def _exported_buffer_addresses(self) -> list[int]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Decoding": ...
    def __exit__(self, *exc: object) -> None: ...

def decode(
    bundle: Union[str, os.PathLike[str], bytes, bytearray, memoryview],
    *,
    tables: Union[str, Sequence[str], None] = None,
    jobs: Optional[int] = None,
    chunk_size: Union[int, str, None] = None,
    ctl: Optional[int] = None,
    images: Optional[list[str]] = None,
    config: Optional[str] = None,
    progress: Optional[Callable[[int, int], object]] = None,
    format: Optional[Literal["rtit", "pt"]] = None,
    cpu: Optional[str] = None,
    mtc_freq: Optional[int] = None,
    nom_freq: Optional[int] = None,
    cpuid_0x15_eax: Optional[int] = None,
    cpuid_0x15_ebx: Optional[int] = None,
    symfs: Optional[str] = None,
    buildid_dir: Optional[str] = None,
    vmlinux: Optional[str] = None,
    kcore: Optional[str] = None,
) -> Decoding: ...
def dump(
    bundle: Union[str, os.PathLike[str]],
    *,
    ctl: Optional[int] = None,
    images: Optional[list[str]] = None,
    format: Optional[Literal["rtit", "pt"]] = None,
    stats: bool = False,
) -> pa.Table: ...
def ingest(
    sources: list[str],
    dataset: str,
    *,
    partition_by: Optional[list[str]] = None,
    allow_missing_keys: bool = False,
    jobs: Optional[int] = None,
    shard: Optional[str] = None,
    retry_failed: bool = False,
    staging: Optional[str] = None,
    zstd_level: int = 3,
    compression: str = "zstd",
    allow_outside_paths: bool = False,
    symfs: Optional[str] = None,
    buildid_dir: Optional[str] = None,
    vmlinux: Optional[str] = None,
    kcore: Optional[str] = None,
    format: Optional[Literal["rtit", "pt"]] = None,
    cpu: Optional[str] = None,
    mtc_freq: Optional[int] = None,
    nom_freq: Optional[int] = None,
    cpuid_0x15_eax: Optional[int] = None,
    cpuid_0x15_ebx: Optional[int] = None,
) -> pa.Table: ...
def hotspots(
    source: str, *, by: str = ..., weight: str = ..., where: Optional[str] = None, bundle: Optional[str] = None
) -> pa.Table: ...
def flamegraph(
    source: str, *, weight: str = ..., where: Optional[str] = None, bundle: Optional[str] = None
) -> pa.Table: ...
def flamegraph_svg(
    source: str, *, weight: str = ..., where: Optional[str] = None, bundle: Optional[str] = None
) -> str: ...
def coverage(
    source: str, *, by: str = ..., where: Optional[str] = None, bundle: Optional[str] = None
) -> pa.Table: ...
def timeline(
    source: str,
    *,
    where: Optional[str] = None,
    bundle: Optional[str] = None,
    start: Optional[int] = None,
    end: Optional[int] = None,
    tsc_mhz: Optional[float] = None,
    max_spans: int = ...,
    min_ns: float = ...,
) -> pa.Table: ...
def html(
    source: str,
    *,
    top: int = ...,
    where: Optional[str] = None,
    bundle: Optional[str] = None,
    baseline: Optional[str] = None,
    baseline_where: Optional[str] = None,
) -> str: ...
def diff(
    a: str,
    b: str,
    *,
    by: str = ...,
    where: Optional[str] = None,
    where_a: Optional[str] = None,
    where_b: Optional[str] = None,
    coverage: bool = ...,
) -> pa.Table: ...
def pprof(source: str, out: str, *, where: Optional[str] = None, bundle: Optional[str] = None) -> dict[str, int]: ...
def perf_script(source: str, out: str, *, where: Optional[str] = None, bundle: Optional[str] = None) -> int: ...
