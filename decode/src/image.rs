//! Code images: the bytes the traced program executed, at their run-time addresses.
//!
//! An image is an ELF file (its executable PT_LOAD segments, at their virtual addresses plus
//! a load bias) or a raw file at a base address. Images may be tagged with a CR3; a trace
//! that switches address spaces (PIP packets) then reads code from the images of the
//! current CR3, plus untagged images (shared by every address space, like a kernel).
//! Images borrow their bytes, normally from a memory map.

use object::read::elf::{ElfFile64, ProgramHeader};
use object::{elf, Endianness};

/// One mapped range of code.
#[derive(Clone, Debug)]
pub struct Segment<'a> {
    /// First address of the segment.
    pub start: u64,
    /// Bytes at `start..start + data.len()`.
    pub data: &'a [u8],
    /// Index of the image in [`ImageSet::images`].
    pub image: u32,
    /// CR3 the image belongs to; `None` for images shared by every address space.
    pub cr3: Option<u64>,
}

impl Segment<'_> {
    pub fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end()
    }
}

/// What is known of one image, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    pub name: String,
    /// Load base: the address `image_offset` 0 corresponds to.
    pub base: u64,
    pub cr3: Option<u64>,
}

/// Why an image could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{name}: not a 64-bit ELF file: {source}")]
    Elf {
        name: String,
        #[source]
        source: object::Error,
    },
    #[error("{name}: no executable PT_LOAD segment")]
    NoCode { name: String },
}

/// Every image of a trace, searchable by address.
#[derive(Clone, Debug, Default)]
pub struct ImageSet<'a> {
    images: Vec<ImageInfo>,
    /// Sorted by start address.
    segments: Vec<Segment<'a>>,
    tagged: bool,
}

impl<'a> ImageSet<'a> {
    pub fn new() -> Self {
        ImageSet::default()
    }

    pub fn images(&self) -> &[ImageInfo] {
        &self.images
    }
    pub fn segments(&self) -> &[Segment<'a>] {
        &self.segments
    }
    /// Some image is tagged with a CR3 (the trace switches address spaces).
    pub fn has_cr3_tags(&self) -> bool {
        self.tagged
    }

    /// Add raw bytes loaded at `base`.
    pub fn add_raw(&mut self, name: &str, data: &'a [u8], base: u64, cr3: Option<u64>) -> u32 {
        let idx = self.push_info(name, base, cr3);
        self.push_segment(Segment {
            start: base,
            data,
            image: idx,
            cr3,
        });
        idx
    }

    /// Add an ELF file's executable PT_LOAD segments. With `base`, the lowest PT_LOAD
    /// segment lands there (a load bias applies to all); without, the ELF's own virtual
    /// addresses are used (right for non-PIE executables).
    pub fn add_elf(
        &mut self,
        name: &str,
        file: &'a [u8],
        base: Option<u64>,
        cr3: Option<u64>,
    ) -> Result<u32, ImageError> {
        let elf = ElfFile64::<Endianness>::parse(file).map_err(|source| ImageError::Elf {
            name: name.to_string(),
            source,
        })?;
        let endian = elf.endian();
        let loads: Vec<_> = elf
            .elf_program_headers()
            .iter()
            .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
            .collect();
        let lowest = loads
            .iter()
            .map(|ph| ph.p_vaddr(endian) & !0xFFF)
            .min()
            .unwrap_or(0);
        let bias = base.map_or(0, |b| b.wrapping_sub(lowest));
        let mut segs = Vec::new();
        for ph in &loads {
            if ph.p_flags(endian).0 & elf::PF_X.0 == 0 {
                continue;
            }
            let off = ph.p_offset(endian) as usize;
            let size = ph.p_filesz(endian) as usize;
            let Some(data) = file.get(off..off.saturating_add(size)) else {
                continue;
            };
            segs.push((ph.p_vaddr(endian).wrapping_add(bias), data));
        }
        if segs.is_empty() {
            return Err(ImageError::NoCode {
                name: name.to_string(),
            });
        }
        let idx = self.push_info(name, lowest.wrapping_add(bias), cr3);
        for (start, data) in segs {
            self.push_segment(Segment {
                start,
                data,
                image: idx,
                cr3,
            });
        }
        Ok(idx)
    }

    fn push_info(&mut self, name: &str, base: u64, cr3: Option<u64>) -> u32 {
        self.tagged |= cr3.is_some();
        self.images.push(ImageInfo {
            name: name.to_string(),
            base,
            cr3,
        });
        (self.images.len() - 1) as u32
    }

    fn push_segment(&mut self, mut s: Segment<'a>) {
        // A segment ends at or before 2^64 - 1 so that `end` is representable: bytes an ELF
        // header or a `base` would place beyond the top of the address space are dropped
        // (found by fuzzing `add_elf`: `end()` overflowed).
        let room = u64::MAX - s.start;
        if s.data.len() as u64 > room {
            s.data = &s.data[..room as usize];
        }
        let at = self.segments.partition_point(|x| x.start <= s.start);
        self.segments.insert(at, s);
    }

    /// The segment holding `addr` in address space `cr3`.
    ///
    /// Untagged images match every CR3. When `cr3` is unknown (a chunk decoded before it
    /// has seen a PIP), the address must be covered by exactly one segment, or the
    /// answer is `Err(Ambiguous)`.
    #[inline]
    pub fn lookup(&self, addr: u64, cr3: Option<u64>) -> Result<&Segment<'a>, Lookup> {
        // Segments are few (a handful per image): a short scan from the sorted position.
        let end = self.segments.partition_point(|s| s.start <= addr);
        let mut found: Option<&Segment<'a>> = None;
        for s in self.segments[..end].iter().rev() {
            if !s.contains(addr) {
                continue;
            }
            let matches = match (s.cr3, cr3) {
                (None, _) => true,
                (Some(a), Some(b)) => a == b,
                (Some(_), None) => {
                    if found.is_some() {
                        return Err(Lookup::Ambiguous);
                    }
                    found = Some(s);
                    continue;
                }
            };
            if matches {
                return Ok(s);
            }
        }
        found.ok_or(Lookup::Missing)
    }

    /// Code bytes from `addr` to the end of its segment.
    #[inline]
    pub fn code_at(&self, addr: u64, cr3: Option<u64>) -> Result<&'a [u8], Lookup> {
        let s = self.lookup(addr, cr3)?;
        Ok(&s.data[(addr - s.start) as usize..])
    }

    /// The image holding `addr` (for coverage reports).
    pub fn image_of(&self, addr: u64, cr3: Option<u64>) -> Option<(u32, &ImageInfo)> {
        let s = self.lookup(addr, cr3).ok()?;
        Some((s.image, &self.images[s.image as usize]))
    }
}

/// Why a lookup failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No image covers the address.
    Missing,
    /// Several CR3-tagged images cover it and the current CR3 is unknown.
    Ambiguous,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_images_resolve_by_address_and_cr3() {
        let a = [0x90u8; 16];
        let b = [0xC3u8; 16];
        let mut set = ImageSet::new();
        set.add_raw("a", &a, 0x1000, Some(1));
        set.add_raw("b", &b, 0x1000, Some(2));
        set.add_raw("k", &b, 0x8000, None);
        assert_eq!(set.code_at(0x1004, Some(1)).unwrap()[0], 0x90);
        assert_eq!(set.code_at(0x1004, Some(2)).unwrap()[0], 0xC3);
        assert_eq!(set.code_at(0x1004, None), Err(Lookup::Ambiguous));
        assert_eq!(set.code_at(0x8001, Some(7)).unwrap().len(), 15);
        assert_eq!(set.code_at(0x2000, Some(1)), Err(Lookup::Missing));
        assert_eq!(set.image_of(0x8000, None).unwrap().1.name, "k");
    }

    #[test]
    fn segments_stop_at_the_top_of_the_address_space() {
        let code = [0x90u8; 16];
        let mut set = ImageSet::new();
        set.add_raw("top", &code, u64::MAX - 4, None);
        let s = &set.segments()[0];
        assert_eq!((s.start, s.end()), (u64::MAX - 4, u64::MAX));
        assert_eq!(set.code_at(u64::MAX - 1, None).unwrap().len(), 1);
        assert_eq!(set.code_at(u64::MAX, None), Err(Lookup::Missing));
    }

    #[test]
    fn non_elf_is_an_error_not_a_panic() {
        let mut set = ImageSet::new();
        assert!(set.add_elf("junk", &[1, 2, 3], None, None).is_err());
    }
}
