//! Errors that say where: every error carries the byte offset in the file at which the
//! reader found the problem, and prints it as "(at offset 0x…)".

use std::fmt;

/// What went wrong, without where.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `what` needs `need` bytes but only `have` are left (in the file, the section or
    /// the record that holds it).
    Truncated {
        what: &'static str,
        need: u64,
        have: u64,
    },
    /// The first eight bytes are not `PERFILE2`: the bytes found.
    BadMagic([u8; 8]),
    /// `PERFILE2` byte-swapped: a big-endian file (not read: Intel PT is x86 only).
    BigEndian,
    /// A field whose value cannot be right: what it is and why.
    Invalid { what: &'static str, why: String },
}

/// A perf.data problem at a byte offset of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    offset: u64,
    kind: ErrorKind,
}

impl Error {
    #[cold]
    pub(crate) fn truncated(offset: u64, what: &'static str, need: u64, have: u64) -> Error {
        Error {
            offset,
            kind: ErrorKind::Truncated { what, need, have },
        }
    }

    #[cold]
    pub(crate) fn invalid(offset: u64, what: &'static str, why: impl Into<String>) -> Error {
        Error {
            offset,
            kind: ErrorKind::Invalid {
                what,
                why: why.into(),
            },
        }
    }

    #[cold]
    pub(crate) fn new(offset: u64, kind: ErrorKind) -> Error {
        Error { offset, kind }
    }

    /// The byte offset in the file where the problem was found.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The file ends (or its data section ends) before this thing does: a cut file
    /// rather than a damaged one.
    pub fn is_truncated(&self) -> bool {
        matches!(self.kind, ErrorKind::Truncated { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Truncated { what, need, have } => write!(
                f,
                "perf.data cut short: {what} needs {need} bytes, {have} left"
            )?,
            ErrorKind::BadMagic(m) => write!(
                f,
                "not a perf.data file: starts with {:?}, not \"PERFILE2\"",
                String::from_utf8_lossy(m)
            )?,
            ErrorKind::BigEndian => write!(
                f,
                "big-endian perf.data (magic \"2ELIFREP\") is not read: Intel PT is x86 only"
            )?,
            ErrorKind::Invalid { what, why } => write!(f, "bad {what}: {why}")?,
        }
        write!(f, " (at offset {:#x})", self.offset)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_offset() {
        let e = Error::truncated(0x1a8, "AUXTRACE data", 4096, 100);
        assert_eq!(
            e.to_string(),
            "perf.data cut short: AUXTRACE data needs 4096 bytes, 100 left (at offset 0x1a8)"
        );
        assert!(e.is_truncated());
        let e = Error::invalid(8, "record size", "3 is below the 8-byte header");
        assert_eq!(
            e.to_string(),
            "bad record size: 3 is below the 8-byte header (at offset 0x8)"
        );
        assert!(!e.is_truncated());
    }
}
