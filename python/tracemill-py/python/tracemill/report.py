"""The reports of ``tracemill report``, as ``pyarrow.Table``\\ s.

Each takes ``source``: a ``tracemill decode --out`` directory (its bundle found through
the tables' metadata, or ``bundle=``), or a dataset made by ``tracemill ingest`` (a local
directory), added up over the bundles that ``where`` selects (``"host IN ('h1', 'h2')
AND program = 'recursion'"``: the CLI's ``--where``). Symbols and source lines come from
the code images. A table's schema metadata names the report (``tracemill.report``) and
carries its totals. Warnings are :class:`~tracemill.TracemillWarning`; a report that
cannot be made raises :class:`~tracemill.ReportError` (:class:`~tracemill.FilterError`
for a bad ``where``).
"""

from __future__ import annotations

import os
from typing import Optional, Union

from . import _tracemill

Source = Union[str, os.PathLike]


class Svg(str):
    """SVG text that Jupyter and IPython show as a picture (``_repr_svg_``)."""

    def _repr_svg_(self) -> str:
        return str(self)


class Html(str):
    """HTML text that Jupyter shows as a page (``_repr_html_``)."""

    def _repr_html_(self) -> str:
        return str(self)


def _p(p: Optional[Source]) -> Optional[str]:
    return None if p is None else os.fspath(p)


def hotspots(
    source: Source,
    *,
    by: str = "function",
    weight: str = "instructions",
    where: Optional[str] = None,
    bundle: Optional[Source] = None,
):
    """Where the instructions (or cycles, or branches) went: one row per function,
    source line (``by="line"``) or block (``by="block"``), heaviest first, with
    ``instructions``, ``cycles``, ``branches``, ``calls`` and ``share`` of the weight."""
    return _tracemill.hotspots(os.fspath(source), by=by, weight=weight, where=where, bundle=_p(bundle))


def flamegraph(
    source: Source,
    *,
    weight: str = "instructions",
    where: Optional[str] = None,
    bundle: Optional[Source] = None,
):
    """The call stacks rebuilt from the ``call``/``ret`` rows, folded: one row per distinct
    stack (``stack``: ``outer;...;inner``) and its ``weight`` (instructions or cycles), as
    ``--folded`` writes them. :func:`flamegraph_svg` draws them."""
    return _tracemill.flamegraph(os.fspath(source), weight=weight, where=where, bundle=_p(bundle))


def flamegraph_svg(
    source: Source,
    *,
    weight: str = "instructions",
    where: Optional[str] = None,
    bundle: Optional[Source] = None,
) -> Svg:
    """The flame graph (inferno's interactive SVG); a notebook shows it inline. Save it
    with ``open("fg.svg", "w").write(svg)``."""
    return Svg(_tracemill.flamegraph_svg(os.fspath(source), weight=weight, where=where, bundle=_p(bundle)))


def coverage(
    source: Source,
    *,
    by: str = "function",
    where: Optional[str] = None,
    bundle: Optional[Source] = None,
):
    """Coverage per function (``by="function"``: size, covered bytes, instructions,
    entries, lines) or per image (``by="image"``: blocks, instructions, functions hit,
    code and covered bytes). drcov and lcov files: ``tracemill report coverage``."""
    return _tracemill.coverage(os.fspath(source), by=by, where=where, bundle=_p(bundle))


def timeline(
    source: Source,
    *,
    where: Optional[str] = None,
    bundle: Optional[Source] = None,
    start: Optional[int] = None,
    end: Optional[int] = None,
    tsc_mhz: Optional[float] = None,
    max_spans: int = 1_000_000,
    min_ns: float = 1.0,
):
    """Function call spans in time: one row per frame (``pid`` per bundle, ``process``,
    ``function``, ``depth``, ``start_us``, ``duration_us``, ``calls`` and ``nested``: the
    calls a span of merged ones holds), between TSCs ``start`` and
    ``end``; the TSC origin and rate in the schema metadata. Spans shorter than ``min_ns``
    are merged as ``tracemill report timeline`` merges them (metadata ``merged``)."""
    return _tracemill.timeline(
        os.fspath(source),
        where=where,
        bundle=_p(bundle),
        start=start,
        end=end,
        tsc_mhz=tsc_mhz,
        max_spans=max_spans,
        min_ns=min_ns,
    )


def html(
    source: Source,
    *,
    top: int = 50,
    where: Optional[str] = None,
    bundle: Optional[Source] = None,
    baseline: Optional[Source] = None,
    baseline_where: Optional[str] = None,
) -> Html:
    """The one-page report (summary, interactive flame graph, hotspots, coverage,
    timeline preview), self-contained; a notebook shows it inline. With ``baseline`` (a
    decode output or dataset, ``baseline_where`` selecting its bundles), a section of what
    changed against it, as :func:`diff` reports it."""
    return Html(
        _tracemill.html(
            os.fspath(source),
            top=top,
            where=where,
            bundle=_p(bundle),
            baseline=_p(baseline),
            baseline_where=baseline_where,
        )
    )


def diff(
    a: Source,
    b: Source,
    *,
    by: str = "function",
    where: Optional[str] = None,
    where_a: Optional[str] = None,
    where_b: Optional[str] = None,
    coverage: bool = False,
):
    """What changed from ``a`` (the baseline) to ``b``: one row per function (``by="line"``,
    ``"block"``) with ``instructions_a``, ``instructions_b``, ``change``, ``share`` (the
    change as a share of A's total), ``delta`` (the change of the row's share of the
    total) and cycles, the largest change first. ``coverage=True``: one row per function
    and source line with the blocks, instructions and edges gained (in B only) and lost
    (in A only). ``where`` selects the bundles of both sides of a dataset, ``where_a`` and
    ``where_b`` of one (both hold when given with ``where``)."""
    return _tracemill.diff(
        os.fspath(a),
        os.fspath(b),
        by=by,
        where=where,
        where_a=where_a,
        where_b=where_b,
        coverage=coverage,
    )


def pprof(
    source: Source,
    out: Source,
    *,
    where: Optional[str] = None,
    bundle: Optional[Source] = None,
) -> dict:
    """The flame graph's stacks as a gzipped pprof profile (``profile.proto``) at ``out``,
    with ``instructions`` and ``cycles`` values, functions with their source lines, and
    the images as mappings with their build-ids, for ``go tool pprof``, Pyroscope or
    Grafana. Returns what it holds (``samples``, ``functions``, ``mappings``,
    ``instructions``, ``cycles``)."""
    return _tracemill.pprof(os.fspath(source), os.fspath(out), where=where, bundle=_p(bundle))


def perf_script(
    source: Source,
    out: Source,
    *,
    where: Optional[str] = None,
    bundle: Optional[Source] = None,
) -> int:
    """The taken branches at ``out`` as ``perf script --itrace=b -F
    comm,tid,cpu,time,ip,sym,addr,symoff`` prints them (for scripts that read perf's
    text); returns the number of lines."""
    return _tracemill.perf_script(os.fspath(source), os.fspath(out), where=where, bundle=_p(bundle))


__all__ = ["hotspots", "flamegraph", "flamegraph_svg", "coverage", "diff", "pprof", "perf_script", "timeline", "html", "Svg", "Html"]
