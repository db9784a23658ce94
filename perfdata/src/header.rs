//! The file header (`struct perf_file_header`, tools/perf/util/header.h): magic, the
//! attribute, data and event-type sections, and the bitmap of feature sections that
//! follow the data.

use crate::cursor::Cursor;
use crate::error::{Error, ErrorKind};

/// `PERFILE2` as a little-endian `u64`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PERFILE2");
/// The file header's size (perf writes and checks `sizeof(struct perf_file_header)`).
pub const FILE_HEADER_SIZE: u64 = 104;
/// A pipe-mode header (`perf record -o -`): magic and size only.
pub const PIPE_HEADER_SIZE: u64 = 16;

/// An `{offset, size}` pair naming bytes of the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Section {
    pub offset: u64,
    pub size: u64,
}

impl Section {
    pub(crate) fn read(c: &mut Cursor<'_>, what: &'static str) -> Result<Section, Error> {
        Ok(Section {
            offset: c.u64(what)?,
            size: c.u64(what)?,
        })
    }

    /// The section's bytes, or an error (at `at`, where the section was named) when it
    /// does not lie inside the file.
    pub fn slice<'a>(
        &self,
        file: &'a [u8],
        at: u64,
        what: &'static str,
    ) -> Result<&'a [u8], Error> {
        let end = self.offset.checked_add(self.size);
        match end {
            Some(end) if end <= file.len() as u64 => Ok(&file[self.offset as usize..end as usize]),
            _ => Err(Error::invalid(
                at,
                what,
                format!(
                    "{} bytes at {:#x} reach past the end of the file ({} bytes)",
                    self.size,
                    self.offset,
                    file.len()
                ),
            )),
        }
    }
}

/// Feature bits (`HEADER_*` in tools/perf/util/header.h): the bit number in
/// `adds_features`, which is also the order of the feature sections.
pub mod feature {
    pub const TRACING_DATA: u32 = 1;
    pub const BUILD_ID: u32 = 2;
    pub const HOSTNAME: u32 = 3;
    pub const OSRELEASE: u32 = 4;
    pub const VERSION: u32 = 5;
    pub const ARCH: u32 = 6;
    pub const NRCPUS: u32 = 7;
    pub const CPUDESC: u32 = 8;
    pub const CPUID: u32 = 9;
    pub const TOTAL_MEM: u32 = 10;
    pub const CMDLINE: u32 = 11;
    pub const EVENT_DESC: u32 = 12;
    pub const CPU_TOPOLOGY: u32 = 13;
    pub const NUMA_TOPOLOGY: u32 = 14;
    pub const BRANCH_STACK: u32 = 15;
    pub const PMU_MAPPINGS: u32 = 16;
    pub const GROUP_DESC: u32 = 17;
    pub const AUXTRACE: u32 = 18;
    pub const STAT: u32 = 19;
    pub const CACHE: u32 = 20;
    pub const SAMPLE_TIME: u32 = 21;
    pub const MEM_TOPOLOGY: u32 = 22;
    pub const CLOCKID: u32 = 23;
    pub const DIR_FORMAT: u32 = 24;
    pub const BPF_PROG_INFO: u32 = 25;
    pub const BPF_BTF: u32 = 26;
    pub const COMPRESSED: u32 = 27;
    pub const CPU_PMU_CAPS: u32 = 28;
    pub const CLOCK_DATA: u32 = 29;
    pub const HYBRID_TOPOLOGY: u32 = 30;
    pub const PMU_CAPS: u32 = 31;
}

/// The header of a file-mode perf.data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// Bytes per entry of the attrs section: `perf_event_attr` plus its ids section.
    pub attr_size: u64,
    pub attrs: Section,
    pub data: Section,
    /// Unused since perf 3.x; kept as read.
    pub event_types: Section,
    /// `adds_features`: bit `n` set when feature `n` has a section.
    pub features: [u64; 4],
}

impl FileHeader {
    pub fn has_feature(&self, id: u32) -> bool {
        id < 256 && self.features[(id / 64) as usize] & (1 << (id % 64)) != 0
    }

    /// The features present, in file order (ascending bit number).
    pub fn feature_ids(&self) -> impl Iterator<Item = u32> + '_ {
        (0..256).filter(|&id| self.has_feature(id))
    }

    pub fn set_feature(&mut self, id: u32) {
        self.features[(id / 64) as usize] |= 1 << (id % 64);
    }

    /// The header of a pipe-mode file (`perf record -o -`, `perf inject -o -`) of `len`
    /// bytes: no attrs section (HEADER_ATTR records), no feature table (HEADER_FEATURE
    /// records); the data runs from the 16-byte header to the end.
    pub fn pipe(len: u64) -> FileHeader {
        FileHeader {
            attr_size: 0,
            attrs: Section::default(),
            data: Section {
                offset: PIPE_HEADER_SIZE,
                size: len.saturating_sub(PIPE_HEADER_SIZE),
            },
            event_types: Section::default(),
            features: [0; 4],
        }
    }

    /// Whether this header is a pipe-mode file's.
    pub fn is_pipe(&self) -> bool {
        self.attr_size == 0 && self.data.offset == PIPE_HEADER_SIZE
    }

    /// Read the header at the start of `file`. A big-endian file is an error
    /// that says so.
    pub fn parse(file: &[u8]) -> Result<FileHeader, Error> {
        let mut c = Cursor::new(file, 0);
        let magic = c.u64("file header magic")?;
        if magic == MAGIC.swap_bytes() {
            return Err(Error::new(0, ErrorKind::BigEndian));
        }
        if magic != MAGIC {
            return Err(Error::new(0, ErrorKind::BadMagic(magic.to_le_bytes())));
        }
        let size = c.u64("file header size")?;
        if size == PIPE_HEADER_SIZE {
            return Ok(FileHeader::pipe(file.len() as u64));
        }
        if size != FILE_HEADER_SIZE {
            return Err(Error::invalid(
                8,
                "file header size",
                format!("{size}, not {FILE_HEADER_SIZE}"),
            ));
        }
        let attr_size = c.u64("file header")?;
        let attrs = Section::read(&mut c, "file header")?;
        let data = Section::read(&mut c, "file header")?;
        let event_types = Section::read(&mut c, "file header")?;
        let mut features = [0; 4];
        for f in &mut features {
            *f = c.u64("file header")?;
        }
        Ok(FileHeader {
            attr_size,
            attrs,
            data,
            event_types,
            features,
        })
    }

    /// The header's bytes (for writers).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(FILE_HEADER_SIZE as usize);
        for x in [
            MAGIC,
            FILE_HEADER_SIZE,
            self.attr_size,
            self.attrs.offset,
            self.attrs.size,
            self.data.offset,
            self.data.size,
            self.event_types.offset,
            self.event_types.size,
        ]
        .into_iter()
        .chain(self.features)
        {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> FileHeader {
        let mut h = FileHeader {
            attr_size: 144,
            attrs: Section {
                offset: 104,
                size: 288,
            },
            data: Section {
                offset: 392,
                size: 1000,
            },
            event_types: Section::default(),
            features: [0; 4],
        };
        h.set_feature(feature::BUILD_ID);
        h.set_feature(feature::AUXTRACE);
        h
    }

    #[test]
    fn round_trips_and_lists_features_in_bit_order() {
        let h = header();
        let b = h.to_bytes();
        assert_eq!(b.len() as u64, FILE_HEADER_SIZE);
        assert_eq!(&b[..8], b"PERFILE2");
        let back = FileHeader::parse(&b).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.feature_ids().collect::<Vec<_>>(), [2, 18]);
        assert!(!back.has_feature(300));
    }

    #[test]
    fn wrong_magic_big_endian_pipe_and_short_headers_are_errors() {
        let mut b = header().to_bytes();
        assert_eq!(
            FileHeader::parse(&b[..50]).unwrap_err().offset(),
            48,
            "cut in the data section's pair"
        );
        b[..8].copy_from_slice(b"2ELIFREP");
        assert_eq!(
            FileHeader::parse(&b).unwrap_err().kind(),
            &ErrorKind::BigEndian
        );
        b[..8].copy_from_slice(b"PERFILE\0");
        assert!(FileHeader::parse(&b)
            .unwrap_err()
            .to_string()
            .starts_with("not a perf.data file"));
        b[..8].copy_from_slice(b"PERFILE2");
        b[8] = 16;
        let pipe = FileHeader::parse(&b).unwrap();
        assert!(pipe.is_pipe());
        assert_eq!(
            pipe.data,
            Section {
                offset: 16,
                size: 88
            }
        );
        assert!(!header().is_pipe());
        b[8] = 200;
        assert_eq!(FileHeader::parse(&b).unwrap_err().offset(), 8);
    }

    #[test]
    fn sections_outside_the_file_are_errors() {
        let file = [0u8; 100];
        let s = Section {
            offset: 90,
            size: 20,
        };
        assert_eq!(s.slice(&file, 24, "attrs").unwrap_err().offset(), 24);
        let s = Section {
            offset: u64::MAX,
            size: 2,
        };
        assert!(s.slice(&file, 24, "attrs").is_err());
        let s = Section {
            offset: 90,
            size: 10,
        };
        assert_eq!(s.slice(&file, 24, "attrs").unwrap().len(), 10);
    }
}
