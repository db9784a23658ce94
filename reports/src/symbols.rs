//! Symbols: function names from ELF symbol tables, file:line and inlined frames from DWARF.
//!
//! One [`ImageSymbols`] per code image, loaded once and asked many times (the callers
//! cache per address). Addresses are run-time addresses: an ELF loaded with a `base`
//! is biased exactly as the decoder biases it (`tracemill_decode::image`), so the same
//! `image_offset` means the same byte here and in the `coverage` table.
//!
//! Code no symbol covers is never hidden: it is named `image+0xoffset` (offset from the
//! image's load base, as in `coverage.image_offset`), or `0xaddress` outside every image.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{bail, Context as _, Result};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

type Reader = gimli::EndianRcSlice<gimli::RunTimeEndian>;

/// A function from the symbol table, at run-time addresses.
#[derive(Clone, Debug)]
pub struct Function {
    pub start: u64,
    /// One past the last byte (from the symbol's size, or the next symbol when it has none).
    pub end: u64,
    pub name: String,
}

/// A source position.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Line {
    pub file: String,
    pub line: u32,
}

/// One frame at an address: the function (inlined or not) and where in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub function: Option<String>,
    pub line: Option<Line>,
}

/// How an image was described to the decoder (bundle.toml or `--image`).
#[derive(Clone, Debug, Default)]
pub struct ImageSpec {
    /// Name as in `coverage.image`: the file name.
    pub name: String,
    pub path: PathBuf,
    /// ELF: where the lowest PT_LOAD goes (None: own addresses); raw: address of byte 0.
    pub base: Option<u64>,
    pub cr3: Option<u64>,
    pub raw: bool,
    /// Raw images: a symbol file naming their functions ([`parse_symbol_file`]).
    pub symbols: Option<PathBuf>,
}

/// Everything known about one image's code and symbols.
pub struct ImageSymbols {
    pub spec: ImageSpec,
    /// Load base (`coverage.image_offset` 0).
    pub base: u64,
    /// Run-time address minus the ELF's own virtual address.
    pub bias: u64,
    /// Executable ranges at run-time addresses, with their bytes.
    segments: Vec<(u64, Vec<u8>)>,
    pub build_id: Option<String>,
    functions: Vec<Function>,
    dwarf: Option<addr2line::Context<Reader>>,
    /// Why symbols or lines are missing (stripped image, bad DWARF), for the report.
    pub notes: Vec<String>,
}

impl ImageSymbols {
    /// Load an image file as the decoder would, with its symbols and debug info.
    pub fn load(spec: ImageSpec) -> Result<ImageSymbols> {
        let bytes = std::fs::read(&spec.path)
            .with_context(|| format!("{}: cannot read image", spec.path.display()))?;
        if spec.raw {
            let base = spec.base.unwrap_or(0);
            let (functions, notes) = match &spec.symbols {
                None => (
                    Vec::new(),
                    vec![format!("{}: raw image, no symbols", spec.name)],
                ),
                Some(path) => match std::fs::read_to_string(path) {
                    Ok(text) => {
                        let mut f = parse_symbol_file(&text);
                        end_in_segments(&mut f, &[(base, base + bytes.len() as u64)]);
                        (f, Vec::new())
                    }
                    Err(e) => (
                        Vec::new(),
                        vec![format!(
                            "{}: symbol file {}: {e}; its code is shown as {}+0xOFFSET",
                            spec.name,
                            path.display(),
                            spec.name
                        )],
                    ),
                },
            };
            return Ok(ImageSymbols {
                base,
                bias: base,
                segments: vec![(base, bytes)],
                build_id: None,
                functions,
                dwarf: None,
                notes,
                spec,
            });
        }
        Self::from_elf(spec, &bytes)
    }

    /// Parse ELF bytes (see [`ImageSymbols::load`]).
    pub fn from_elf(spec: ImageSpec, bytes: &[u8]) -> Result<ImageSymbols> {
        let file = object::File::parse(bytes)
            .with_context(|| format!("{}: not an ELF file", spec.path.display()))?;
        let mut lowest = u64::MAX;
        let mut exec = Vec::new();
        for seg in file.segments() {
            if seg.size() == 0 {
                continue;
            }
            lowest = lowest.min(seg.address());
            let flags = seg.flags();
            let x = matches!(flags, object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0);
            if x {
                let data = seg.data().unwrap_or(&[]);
                exec.push((seg.address(), data.to_vec()));
            }
        }
        if exec.is_empty() {
            bail!("{}: no executable PT_LOAD segment", spec.path.display());
        }
        let bias = spec.base.map_or(0, |b| b.wrapping_sub(lowest));
        let segments: Vec<(u64, Vec<u8>)> = exec
            .into_iter()
            .map(|(a, d)| (a.wrapping_add(bias), d))
            .collect();
        let build_id = file.build_id().ok().flatten().map(hex);
        let mut notes = Vec::new();
        let mut functions = functions(&file, bias);
        let ranges: Vec<(u64, u64)> = segments
            .iter()
            .map(|(a, d)| (*a, a + d.len() as u64))
            .collect();
        end_in_segments(&mut functions, &ranges);
        if functions.is_empty() {
            notes.push(format!(
                "{}: no function symbols (stripped): its code is shown as {}+0xOFFSET",
                spec.name, spec.name
            ));
        }
        let dwarf = match load_dwarf(&file) {
            Ok(Some(d)) => Some(d),
            Ok(None) => {
                if !functions.is_empty() {
                    notes.push(format!("{}: no DWARF line information", spec.name));
                }
                None
            }
            Err(e) => {
                notes.push(format!("{}: DWARF unreadable: {e:#}", spec.name));
                None
            }
        };
        Ok(ImageSymbols {
            base: lowest.wrapping_add(bias),
            bias,
            segments,
            build_id,
            functions,
            dwarf,
            notes,
            spec,
        })
    }

    /// The same image with no symbols or lines (its symbols cannot be trusted).
    pub fn without_symbols(mut self) -> ImageSymbols {
        self.functions.clear();
        self.dwarf = None;
        self.notes.clear();
        self
    }

    pub fn has_lines(&self) -> bool {
        self.dwarf.is_some()
    }

    /// Does an executable segment of this image hold `addr`?
    pub fn contains(&self, addr: u64) -> bool {
        self.segments
            .iter()
            .any(|(s, d)| addr >= *s && addr - *s < d.len() as u64)
    }

    /// Code bytes from `addr` to the end of its segment.
    pub fn code_at(&self, addr: u64) -> Option<&[u8]> {
        self.segments.iter().find_map(|(s, d)| {
            (addr >= *s && addr - *s < d.len() as u64).then(|| &d[(addr - *s) as usize..])
        })
    }

    /// Lowest and one-past-highest executable address.
    pub fn code_range(&self) -> (u64, u64) {
        let lo = self.segments.iter().map(|s| s.0).min().unwrap_or(self.base);
        let hi = self
            .segments
            .iter()
            .map(|(s, d)| s + d.len() as u64)
            .max()
            .unwrap_or(self.base);
        (lo, hi)
    }

    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// Index of the function holding `addr`.
    pub fn function_index(&self, addr: u64) -> Option<usize> {
        let i = self.functions.partition_point(|f| f.start <= addr);
        let f = self.functions.get(i.checked_sub(1)?)?;
        (addr < f.end).then_some(i - 1)
    }

    /// `name` of the function holding `addr`, or `image+0xoffset`.
    pub fn function_name(&self, addr: u64) -> Cow<'_, str> {
        match self.function_index(addr) {
            Some(i) => Cow::Borrowed(&self.functions[i].name),
            None => Cow::Owned(self.unknown(addr)),
        }
    }

    /// `image+0xoffset` for code no symbol covers.
    pub fn unknown(&self, addr: u64) -> String {
        format!("{}+{:#x}", self.spec.name, addr.wrapping_sub(self.base))
    }

    /// The source line of the instruction at `addr` (innermost inlined frame).
    pub fn line(&self, addr: u64) -> Option<Line> {
        let ctx = self.dwarf.as_ref()?;
        let loc = ctx.find_location(addr.wrapping_sub(self.bias)).ok()??;
        Some(Line {
            file: loc.file?.to_string(),
            line: loc.line?,
        })
    }

    /// Frames at `addr`, innermost (inlined) first, the function the code belongs to last.
    pub fn frames(&self, addr: u64) -> Vec<Frame> {
        let mut out = Vec::new();
        let Some(ctx) = &self.dwarf else {
            return out;
        };
        let Ok(mut it) = ctx
            .find_frames(addr.wrapping_sub(self.bias))
            .skip_all_loads()
        else {
            return out;
        };
        while let Ok(Some(f)) = it.next() {
            let function = f
                .function
                .as_ref()
                .and_then(|n| n.raw_name().ok().map(|s| s.into_owned()));
            let line = f.location.and_then(|l| {
                Some(Line {
                    file: l.file?.to_string(),
                    line: l.line?,
                })
            });
            out.push(Frame { function, line });
        }
        out
    }

    /// Every (address, line) row of the line tables in `[lo, hi)`.
    pub fn line_rows(&self, lo: u64, hi: u64) -> Vec<(u64, Line)> {
        let mut out = Vec::new();
        let Some(ctx) = &self.dwarf else {
            return out;
        };
        let Ok(it) =
            ctx.find_location_range(lo.wrapping_sub(self.bias), hi.wrapping_sub(self.bias))
        else {
            return out;
        };
        for (addr, _len, loc) in it {
            if let (Some(file), Some(line)) = (loc.file, loc.line) {
                if line > 0 {
                    out.push((
                        addr.wrapping_add(self.bias),
                        Line {
                            file: file.to_string(),
                            line,
                        },
                    ));
                }
            }
        }
        out
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The build-id note of an ELF file, in hex.
pub fn build_id(bytes: &[u8]) -> Option<String> {
    let f = object::File::parse(bytes).ok()?;
    f.build_id().ok().flatten().map(hex)
}

/// Text symbols, one per address (a global name preferred over weak and local aliases),
/// sized by the symbol or else up to the next symbol, at run-time addresses.
fn functions(file: &object::File<'_>, bias: u64) -> Vec<Function> {
    // (address, size, rank, name): rank orders aliases, global first.
    let syms: Vec<(u64, u64, u8, &str)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .filter_map(|s| {
            let name = s.name().ok()?;
            if name.is_empty() {
                return None;
            }
            let rank = if s.is_global() && !s.is_weak() {
                0
            } else if s.is_weak() {
                1
            } else {
                2
            };
            Some((s.address(), s.size(), rank, name))
        })
        .collect();
    function_ranges(syms, bias)
}

/// The functions of a raw image from a symbol file in `nm`'s output format, one symbol a
/// line: `ADDRESS TYPE NAME`, or `ADDRESS SIZE TYPE NAME` (`nm -S`), hexadecimal, at
/// run-time addresses (`nm` of the ELF the raw bytes were dumped from, when it was not
/// relocated). Only code symbols count (types `T`, `t`, `W`, `w`); `ADDRESS NAME` lines
/// are taken as code too. Lines that do not parse are skipped, as `nm` prints headers
/// and undefined symbols without an address.
pub fn parse_symbol_file(text: &str) -> Vec<Function> {
    let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok();
    let syms: Vec<(u64, u64, u8, &str)> = text
        .lines()
        .filter_map(|line| {
            let t: Vec<&str> = line.split_whitespace().collect();
            let (addr, size, kind, name) = match t.as_slice() {
                [a, s, k, n] => (hex(a)?, hex(s)?, *k, *n),
                [a, k, n] => (hex(a)?, 0, *k, *n),
                [a, n] => (hex(a)?, 0, "T", *n),
                _ => return None,
            };
            let rank = match kind {
                "T" => 0,
                "W" | "w" => 1,
                "t" => 2,
                _ => return None,
            };
            Some((addr, size, rank, name))
        })
        .collect();
    function_ranges(syms, 0)
}

/// Functions from (address, size, rank, name) symbols: one per address (the alias of
/// lowest rank, then the largest, then the shortest name), ending at their size or at
/// the next symbol.
fn function_ranges(mut syms: Vec<(u64, u64, u8, &str)>, bias: u64) -> Vec<Function> {
    syms.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.2.cmp(&b.2))
            .then(b.1.cmp(&a.1))
            .then(a.3.len().cmp(&b.3.len()))
            .then(a.3.cmp(b.3))
    });
    syms.dedup_by_key(|s| s.0);
    let mut out: Vec<Function> = Vec::with_capacity(syms.len());
    for (i, &(addr, size, _, name)) in syms.iter().enumerate() {
        let next = syms.get(i + 1).map_or(u64::MAX, |n| n.0);
        let end = if size > 0 {
            addr.saturating_add(size).min(next.max(addr + 1))
        } else {
            next
        };
        if end <= addr {
            continue;
        }
        out.push(Function {
            start: addr.wrapping_add(bias),
            end: end.wrapping_add(bias),
            name: name.to_string(),
        });
    }
    out.sort_by_key(|f| f.start);
    out
}

/// A function ends, at the latest, where the executable segment holding its start ends.
/// An unsized symbol runs to the next one, and the last of an image (`_fini`, typically)
/// had no next: it ran to the end of the address space, and the coverage report showed
/// its size as 18446744073704741943. With a load bias the same end wrapped below the
/// start.
fn end_in_segments(functions: &mut [Function], segments: &[(u64, u64)]) {
    for f in functions {
        let seg_end = segments
            .iter()
            .find(|(s, e)| (*s..*e).contains(&f.start))
            .map(|&(_, e)| e);
        if let Some(end) = seg_end {
            if f.end <= f.start || f.end > end {
                f.end = end;
            }
        }
    }
}

fn load_dwarf(file: &object::File<'_>) -> Result<Option<addr2line::Context<Reader>>> {
    if file.section_by_name(".debug_info").is_none() {
        return Ok(None);
    }
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let data = file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[]));
        Ok(gimli::EndianRcSlice::new(Rc::from(&*data), endian))
    };
    let dwarf = gimli::Dwarf::load(load)?;
    Ok(Some(addr2line::Context::from_dwarf(dwarf)?))
}

/// The images of a trace and their symbols, searchable by address or by name.
#[derive(Default)]
pub struct Symbolizer {
    pub images: Vec<ImageSymbols>,
    by_name: HashMap<String, usize>,
    /// Problems met while loading (missing files, build-id mismatches), for the report.
    pub problems: Vec<String>,
}

impl Symbolizer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, im: ImageSymbols) {
        self.by_name
            .entry(im.spec.name.clone())
            .or_insert(self.images.len());
        self.images.push(im);
    }

    /// The image named `name` (as in `coverage.image`).
    pub fn by_name(&self, name: &str) -> Option<&ImageSymbols> {
        self.by_name.get(name).map(|&i| &self.images[i])
    }

    /// The image holding `addr`: one tagged with `cr3` or untagged first, else any.
    pub fn image_of(&self, addr: u64, cr3: Option<u64>) -> Option<&ImageSymbols> {
        let mut any = None;
        for im in &self.images {
            if im.contains(addr) {
                match (im.spec.cr3, cr3) {
                    (None, _) => return Some(im),
                    (Some(a), Some(b)) if a == b => return Some(im),
                    _ => any = any.or(Some(im)),
                }
            }
        }
        any
    }

    /// Index of `im` in [`Symbolizer::images`].
    pub fn index_of(&self, im: &ImageSymbols) -> usize {
        self.images
            .iter()
            .position(|x| std::ptr::eq(x, im))
            .unwrap_or(usize::MAX)
    }

    /// Function name at `addr` in the image that holds it; `0x…` outside every image.
    pub fn function_name(&self, addr: u64, cr3: Option<u64>) -> String {
        match self.image_of(addr, cr3) {
            Some(im) => im.function_name(addr).into_owned(),
            None => format!("{addr:#x}"),
        }
    }
}

/// Where an image file is: absolute, or relative to the bundle directory.
pub fn resolve(dir: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (start, end, name) of the functions a symbol file names.
    fn spans(text: &str) -> Vec<(u64, u64, String)> {
        parse_symbol_file(text)
            .into_iter()
            .map(|f| (f.start, f.end, f.name))
            .collect()
    }

    #[test]
    fn symbol_files_read_nm_and_nm_s_output() {
        let nm = "\
0000000000401000 T _start
                 U undefined_here
0000000000401020 t helper
0000000000401040 W weak_alias
0000000000401040 T strong
0000000000404000 D data_is_not_code
0000000000401080 T last
";
        assert_eq!(
            spans(nm),
            vec![
                (0x401000, 0x401020, "_start".to_string()),
                (0x401020, 0x401040, "helper".to_string()),
                // Aliases: the global definition wins over the weak one.
                (0x401040, 0x401080, "strong".to_string()),
                (0x401080, u64::MAX, "last".to_string()),
            ]
        );
        // nm -S: sizes end functions before the next symbol; plain "address name" too.
        assert_eq!(
            spans("401000 10 T a\n0x401100 b\nnot a symbol line\n"),
            vec![
                (0x401000, 0x401010, "a".to_string()),
                (0x401100, u64::MAX, "b".to_string())
            ]
        );
    }

    #[test]
    fn the_last_unsized_function_ends_with_its_segment() {
        let mut f = parse_symbol_file("401000 T main\n401080 T _fini\n500000 T elsewhere\n");
        // The code segment is [0x401000, 0x401090); `elsewhere` is in no segment.
        end_in_segments(&mut f, &[(0x401000, 0x401090)]);
        let got: Vec<(u64, u64)> = f.iter().map(|f| (f.start, f.end)).collect();
        assert_eq!(
            got,
            [
                (0x401000, 0x401080),
                (0x401080, 0x401090),
                (0x500000, u64::MAX)
            ]
        );
        // An end that wrapped below its start (a load bias added to u64::MAX) as well.
        let mut f = vec![Function {
            start: 0x7000_0080,
            end: 0x0fff,
            name: "_fini".into(),
        }];
        end_in_segments(&mut f, &[(0x7000_0000, 0x7000_0100)]);
        assert_eq!(f[0].end, 0x7000_0100);
    }
}
