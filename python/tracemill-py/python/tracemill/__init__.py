"""tracemill: decode Intel RTIT and Intel PT traces into Arrow tables, in Python, without files.

>>> import tracemill, polars as pl
>>> branches = tracemill.decode("datasets/samples/recursion", tables="branches")
>>> df = pl.DataFrame(branches)          # the batches as they are decoded, not copied
>>> df.group_by("kind").len()

:func:`decode` returns the tables as streams of Arrow record batches, produced while the
trace is decoded on all cores: any reader of the Arrow PyCapsule interface takes them
(``pyarrow.table(s)``, ``polars.DataFrame(s)``, DuckDB's ``FROM s``, pandas via pyarrow),
each batch handed over without a copy, with the schema and metadata of the Parquet files
``tracemill decode --out`` writes. The reports of ``tracemill report`` are in
:mod:`tracemill.report`; :func:`dump` lists packets; :func:`ingest` fills a dataset.
Errors are :class:`TracemillError` subclasses with the CLI's messages
(:mod:`tracemill.errors`); warnings are :class:`TracemillWarning`.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Optional, Sequence, Union

from . import _tracemill, errors
from ._tracemill import Decoding, TableStream
from .errors import (
    BundleError,
    DecodeError,
    FilterError,
    IngestError,
    MissingImageError,
    NoPsbError,
    OptionError,
    ReportError,
    TracemillError,
    TracemillWarning,
)

__version__ = _tracemill.version()

TABLES = ("branches", "events", "timing", "coverage", "edges")

Progress = Union[bool, Callable[[int, int], object], None]


def _progress(progress: Progress, desc: str) -> Optional[Callable[[int, int], object]]:
    """A progress callback ``(done, total)`` from ``progress``: a callable as it is, True
    for a tqdm bar (``tqdm.auto``: a widget in Jupyter, text elsewhere)."""
    if progress is None or progress is False:
        return None
    if callable(progress):
        return progress
    if progress is True:
        try:
            from tqdm.auto import tqdm
        except ImportError as e:
            raise OptionError(
                "progress=True shows a tqdm bar: pip install tqdm (or give a callback "
                "progress=lambda done, total: ...)"
            ) from e
        bar = None

        def update(done: int, total: int) -> None:
            nonlocal bar
            if bar is None:
                bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc)
            bar.update(done - bar.n)
            if done >= total:
                bar.close()

        return update
    raise OptionError(f"progress={progress!r}: True (a tqdm bar), a callable (done, total) or None")


Bundle = Union[str, os.PathLike, bytes, bytearray, memoryview]


def decode(
    bundle: Bundle,
    *,
    tables: Union[str, Iterable[str], None] = None,
    jobs: Optional[int] = None,
    chunk_size: Union[int, str, None] = None,
    ctl: Optional[int] = None,
    images: Optional[Sequence[str]] = None,
    config: Optional[str] = None,
    progress: Progress = None,
    format: Optional[str] = None,
    cpu: Optional[str] = None,
    mtc_freq: Optional[int] = None,
    nom_freq: Optional[int] = None,
    cpuid_0x15_eax: Optional[int] = None,
    cpuid_0x15_ebx: Optional[int] = None,
    symfs: Union[str, os.PathLike, None] = None,
    buildid_dir: Union[str, os.PathLike, None] = None,
    vmlinux: Union[str, os.PathLike, None] = None,
    kcore: Union[str, os.PathLike, None] = None,
) -> Decoding:
    """Decode a trace; its tables as streams of Arrow record batches, decoded while read.

    ``bundle`` is a bundle directory, a bare trace file (an RTIT one needs ``ctl``), a
    perf.data recorded with ``perf record -e intel_pt//`` (its rows gain ``cpu``, ``pid``,
    ``tid`` and ``time``), or the trace's bytes already in memory (``bytes`` are read in
    place; other buffers are copied once) with ``ctl`` or ``config`` (a ``bundle.toml``'s
    text: ``rtit_ctl``, images, ``ring_offset``, ``[topa]``, ``[trace_hub]``...; relative
    image paths from the current directory). The format is decided as the CLI decides it:
    ``format`` (``"rtit"`` or ``"pt"``), the bundle's, a perf.data's (Intel PT), a ``.pt``
    or ``.rtit`` name, the first PSB's.

    Intel PT facts the trace does not carry, as ptxed's options: ``cpu`` (``"F/M[/S]"``
    or ``"none"``), ``mtc_freq``, ``nom_freq``, ``cpuid_0x15_eax``, ``cpuid_0x15_ebx``.
    perf.data: ``symfs``, ``buildid_dir``, ``vmlinux``, ``kcore`` say where its binaries
    are, as perf's options.

    ``tables``: ``"all"`` (default), a name, ``"branches,events"`` or a list of names.
    ``jobs``: decode threads (1 to 256; default and 0: all cores). ``chunk_size``: least
    trace bytes per chunk decoded in parallel (an int, or ``"128K"``; at most 4M).
    ``ctl`` overrides the bundle's RTIT_CTL (Intel PT: IA32_RTIT_CTL). ``images``: more
    code images, as the CLI's ``--image`` (``PATH``, ``PATH@ADDR``, ``PATH@ADDR@CR3``).
    ``progress``: True for a tqdm bar, or a callable ``(done_bytes, total_bytes)``.

    Returns a :class:`Decoding`: ``d.branches`` (or ``d["branches"]``) is a
    :class:`TableStream`, which any Arrow consumer reads (``pyarrow.table(s)``,
    ``polars.DataFrame(s)``, ``duckdb.sql("FROM s")``), or ``s.read_all()`` to a
    ``pyarrow.Table``; with one table asked for, the :class:`Decoding` itself is that
    stream. Each stream is read once. Iterating the :class:`Decoding` gives ``(table,
    pyarrow.RecordBatch)`` in decode order; ``d.read_all()`` gives every table.

    Memory stays bounded while a consumer streams: the decode waits for it. Batches of a
    table asked for but not being read wait in memory, so ask only for the tables you
    read, or read them together (iterate the :class:`Decoding`).

    Raises :class:`BundleError`, :class:`NoPsbError`, :class:`MissingImageError` (no code
    image, when branches, coverage or edges are asked for) and :class:`OptionError` with
    the CLI's messages; warnings (images not loaded...) are :class:`TracemillWarning`.
    Ctrl-C stops the decode and raises ``KeyboardInterrupt``.
    """
    return _tracemill.decode(
        bundle,
        tables=tables,
        jobs=jobs,
        chunk_size=chunk_size,
        ctl=ctl,
        images=list(images) if images is not None else None,
        config=config,
        progress=_progress(progress, "decoding"),
        format=format,
        cpu=cpu,
        mtc_freq=mtc_freq,
        nom_freq=nom_freq,
        cpuid_0x15_eax=cpuid_0x15_eax,
        cpuid_0x15_ebx=cpuid_0x15_ebx,
        symfs=os.fspath(symfs) if symfs is not None else None,
        buildid_dir=os.fspath(buildid_dir) if buildid_dir is not None else None,
        vmlinux=os.fspath(vmlinux) if vmlinux is not None else None,
        kcore=os.fspath(kcore) if kcore is not None else None,
    )


def schema(table: str):
    """The ``pyarrow.Schema`` of a table (``"branches"``, ``"events"``, ``"timing"``,
    ``"coverage"``, ``"edges"``), its columns documented in the field metadata (a
    decode's streams add the file metadata: source, RTIT_CTL, labels...)."""
    import pyarrow as pa

    return pa.schema(_tracemill.table_schema(table))


def scan_polars(bundle: Bundle, table: str = "branches", **kwargs):
    """A ``polars.LazyFrame`` of one table of a decode, for lazy queries over the stream.

    Each ``collect()`` decodes ``bundle`` again (``kwargs`` as :func:`decode`'s: ``jobs``,
    ``ctl``, ``config``...) and feeds the batches to polars as they are decoded, each
    taken without a copy; polars' projection, filter and row limit are applied batch by
    batch (a limit stops the decode early), so with ``collect(engine="streaming")`` the
    query runs in bounded memory over any trace size.

    >>> top = (tracemill.scan_polars("datasets/samples/recursion")
    ...        .filter(pl.col("kind") == "call")
    ...        .group_by("target").agg(pl.len()).collect())
    """
    import polars as pl
    from polars.io.plugins import register_io_source

    if table not in TABLES:
        raise OptionError(
            f"unknown table {table!r}: choose from branches, events, timing, coverage, edges"
        )
    polars_schema = pl.from_arrow(schema(table).empty_table()).schema

    def source(with_columns, predicate, n_rows, batch_size):
        d = decode(bundle, tables=table, **kwargs)
        left = n_rows
        try:
            for batch in d[table]:
                df = pl.from_arrow(batch)
                if with_columns is not None:
                    df = df.select(with_columns)
                if predicate is not None:
                    df = df.filter(predicate)
                if left is not None:
                    df = df.head(left)
                    left -= df.height
                yield df
                if left == 0:
                    break
        finally:
            d.close()

    return register_io_source(io_source=source, schema=polars_schema)


def dump(
    bundle: Union[str, os.PathLike],
    *,
    ctl: Optional[int] = None,
    images: Optional[Sequence[str]] = None,
    format: Optional[str] = None,
    stats: bool = False,
):
    """The packet listing of ``tracemill dump`` as a ``pyarrow.Table``: one row per
    packet (``offset``, ``bytes``, ``packet``, ``fields`` with IPs decompressed), plus
    ``skipped`` (bytes before the first PSB) and ``error`` rows. ``format``: ``"rtit"``
    or ``"pt"`` (default: decided as :func:`decode` decides it). A perf.data's AUX areas
    are listed in turn, each after a ``trace`` row naming it (``cpu 3``). With ``stats``,
    one row per packet type (``packet``, ``count``; bytes, skipped bytes and errors in the
    schema metadata). The listing is built in memory: for a large trace, ``stats`` or a
    slice of it."""
    return _tracemill.dump(
        bundle,
        ctl=ctl,
        images=list(images) if images is not None else None,
        format=format,
        stats=stats,
    )


def ingest(
    sources: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
    dataset: Union[str, os.PathLike],
    *,
    partition_by: Union[str, Sequence[str], None] = None,
    allow_missing_keys: bool = False,
    jobs: Optional[int] = None,
    shard: Optional[str] = None,
    retry_failed: bool = False,
    staging: Union[str, os.PathLike, None] = None,
    zstd_level: int = 3,
    compression: str = "zstd",
    allow_outside_paths: bool = False,
    symfs: Union[str, os.PathLike, None] = None,
    buildid_dir: Union[str, os.PathLike, None] = None,
    vmlinux: Union[str, os.PathLike, None] = None,
    kcore: Union[str, os.PathLike, None] = None,
    format: Optional[str] = None,
    cpu: Optional[str] = None,
    mtc_freq: Optional[int] = None,
    nom_freq: Optional[int] = None,
    cpuid_0x15_eax: Optional[int] = None,
    cpuid_0x15_ebx: Optional[int] = None,
):
    """``tracemill ingest``: bundles into one partitioned dataset (a directory, or
    ``s3://bucket/prefix``), exactly once, resumably. Returns a ``pyarrow.Table`` with one
    row per bundle of this run: ``source``, ``bundle`` (id), ``outcome`` (``committed``,
    ``already committed``, ``not committed``), ``status`` (``ok``/``failed``), ``error``,
    and the catalog's counts. Bundles that fail are rows (and a warning), not an
    exception; :class:`IngestError` when nothing could be done. ``compression``: the
    Parquet pages' codec, ``"zstd"`` (at ``zstd_level``), ``"lz4"``, ``"snappy"`` or
    ``"none"``. ``symfs``, ``buildid_dir``: where a perf.data's binaries are looked for,
    as perf's ``--symfs`` and ``--buildid-dir`` (without them, and without
    ``allow_outside_paths``, only inside each recording's directory); one that is not an
    existing directory raises :class:`OptionError`. ``vmlinux``, ``kcore``: the kernel's
    code, as perf's ``--vmlinux`` and ``--kcore``. ``format`` (``"rtit"`` or ``"pt"``):
    the trace format every source must have (one of the other format fails, with its
    row); ``cpu``, ``mtc_freq``, ``nom_freq``, ``cpuid_0x15_eax``, ``cpuid_0x15_ebx``: the
    Intel PT facts over each bundle's ``[pt]``, as for :func:`decode`."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    if isinstance(partition_by, str):
        partition_by = [k for k in partition_by.split(",") if k.strip()]
    return _tracemill.ingest(
        [os.fspath(s) for s in sources],
        os.fspath(dataset),
        partition_by=list(partition_by) if partition_by else None,
        allow_missing_keys=allow_missing_keys,
        jobs=jobs,
        shard=shard,
        retry_failed=retry_failed,
        staging=os.fspath(staging) if staging is not None else None,
        zstd_level=zstd_level,
        compression=compression,
        allow_outside_paths=allow_outside_paths,
        symfs=os.fspath(symfs) if symfs is not None else None,
        buildid_dir=os.fspath(buildid_dir) if buildid_dir is not None else None,
        vmlinux=os.fspath(vmlinux) if vmlinux is not None else None,
        kcore=os.fspath(kcore) if kcore is not None else None,
        format=format,
        cpu=cpu,
        mtc_freq=mtc_freq,
        nom_freq=nom_freq,
        cpuid_0x15_eax=cpuid_0x15_eax,
        cpuid_0x15_ebx=cpuid_0x15_ebx,
    )


from . import report  # noqa: E402  (report uses the names above)

__all__ = [
    "decode",
    "scan_polars",
    "schema",
    "dump",
    "ingest",
    "report",
    "Decoding",
    "TableStream",
    "TABLES",
    *errors.__all__,
]
