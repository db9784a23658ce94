"""The exceptions tracemill raises, and its warning category.

Every error carries the message ``tracemill`` prints after ``tracemill: error:`` for the
same input, so a message seen in a notebook can be searched for in the CLI's docs and
the other way round. Catch :class:`TracemillError` for all of them.
"""


class TracemillError(Exception):
    """Base class of every tracemill error."""


class OptionError(TracemillError, ValueError):
    """An argument value tracemill refuses (the CLI's usage errors, exit 2): ``jobs``
    over 256, a ``chunk_size`` over 4M, an unknown table, a bad image spec."""


class BundleError(TracemillError):
    """The bundle cannot be read: no such file, a directory without ``bundle.toml``, an
    invalid ``bundle.toml`` (the message shows the line), a bare trace without ``ctl``, a
    FIFO or device given as a file, a ToPA dump or trace-hub capture whose order cannot be
    known."""


class NoPsbError(TracemillError):
    """The trace has no PSB packet, RTIT's or Intel PT's: nothing to decode (is it a
    trace at all?)."""


class MissingImageError(TracemillError):
    """No code image could be loaded, so no branch can be decoded (the CLI exits 1).
    The warnings issued before it say why each image was not loaded."""


class DecodeError(TracemillError):
    """The decode failed after it started (a decoder bug: please report it)."""


class ReportError(TracemillError):
    """A report cannot be made: no tables in the directory, a missing table or column,
    a missing bundle, a dataset whose filter selects no bundle."""


class FilterError(ReportError, ValueError):
    """A ``where`` filter that does not parse, or names a column no bundle has."""


class IngestError(TracemillError):
    """Ingest could do nothing: bad arguments, no bundle found, a dataset that cannot be
    written or was made with other partition keys. Bundles that fail one by one do not
    raise: they are rows with ``status == "failed"`` (and a warning)."""


class TracemillWarning(UserWarning):
    """Something the CLI prints as a warning: an image not loaded, reserved RTIT_CTL
    bits, bytes left out of a collected trace, a report part that could not be made."""


__all__ = [
    "TracemillError",
    "OptionError",
    "BundleError",
    "NoPsbError",
    "MissingImageError",
    "DecodeError",
    "ReportError",
    "FilterError",
    "IngestError",
    "TracemillWarning",
]
