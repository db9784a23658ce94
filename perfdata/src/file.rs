//! A whole file: the header, the attributes and their ids, the records of the data
//! section (lazily, in file order) and the feature sections (on request).

use std::collections::HashMap;

use crate::attr::{sample, EventAttr, SampleId, ATTR_SIZE_VER0};
use crate::cursor::{u64_at, Cursor};
use crate::error::Error;
use crate::features::{self, AuxtraceIndexEntry, BuildIdEntry, Feature};
use crate::header::{feature, FileHeader, Section, FILE_HEADER_SIZE};
use crate::intel_pt::IntelPtInfo;
use crate::record::{self, kind, Record, AUXTRACE_HEADER_SIZE};

/// Bytes of an attrs entry past the attribute: its ids section.
const IDS_SECTION: u64 = 16;
/// The largest attrs entry accepted (perf_event_attr is 136 bytes in Linux 6.x).
const MAX_ATTR_ENTRY: u64 = 4096;

/// One event: its attribute and the sample ids the kernel gave it (one per CPU or
/// thread it was opened on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub attr: EventAttr,
    pub ids: Vec<u64>,
}

/// How a kernel record's event is found, which decides its trailer's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IdLayout {
    /// All attributes lay out the trailer alike (this one's); the id, if any, names the
    /// event.
    Same(usize),
    /// Every attribute has IDENTIFIER: the trailer's last `u64` (a sample's first) names
    /// the event, whose attribute gives the rest.
    Identifier,
}

/// A perf.data file read from bytes (a memory map or a buffer).
#[derive(Debug)]
pub struct PerfData<'a> {
    bytes: &'a [u8],
    header: FileHeader,
    attrs: Vec<Attr>,
    /// `None` in a pipe-mode file without HEADER_ATTR records.
    layout: Option<IdLayout>,
    by_id: HashMap<u64, usize>,
    /// The data section as read: `[start, end)`, cut at the end of the file.
    data_start: usize,
    data_end: usize,
    /// The header's data size reaches past the end of the file.
    data_cut: bool,
}

/// One record and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item<'a> {
    /// File offset of the record's header.
    pub offset: u64,
    pub misc: u16,
    pub record: Record<'a>,
    /// The `sample_id_all` trailer (a sample's own fields for samples); all `None` for
    /// perf's records and without `sample_id_all`.
    pub sample_id: SampleId,
    /// Index into [`PerfData::attrs`] of the record's event, when the file says (by an
    /// id of the trailer or sample, or because there is one event).
    pub attr: Option<usize>,
}

impl<'a> PerfData<'a> {
    /// Check the header and read the attributes. Records and features are read later,
    /// so that a file cut short still gives the records before the cut.
    pub fn parse(bytes: &'a [u8]) -> Result<PerfData<'a>, Error> {
        let header = FileHeader::parse(bytes)?;
        let attrs = if header.is_pipe() {
            pipe_attrs(bytes)?
        } else {
            read_attrs(bytes, &header)?
        };
        let layout = if attrs.is_empty() {
            None
        } else {
            Some(id_layout(&attrs)?)
        };
        let mut by_id = HashMap::new();
        for (i, a) in attrs.iter().enumerate() {
            for &id in &a.ids {
                by_id.entry(id).or_insert(i);
            }
        }
        let d = header.data;
        let header_size = if header.is_pipe() {
            crate::header::PIPE_HEADER_SIZE
        } else {
            FILE_HEADER_SIZE
        };
        if d.offset < header_size || d.offset > bytes.len() as u64 {
            return Err(Error::invalid(
                40,
                "data section",
                format!(
                    "starts at {:#x}, outside the file's {} bytes after its header",
                    d.offset,
                    bytes.len()
                ),
            ));
        }
        let data_start = d.offset as usize;
        // A size of 0: perf record did not finish its header (it writes the size and the
        // feature sections last); perf warns and reads what it can, to the end of the file.
        let want_end = if d.size == 0 {
            bytes.len() as u64
        } else {
            d.offset.saturating_add(d.size)
        };
        let data_cut = want_end > bytes.len() as u64;
        let data_end = want_end.min(bytes.len() as u64) as usize;
        Ok(PerfData {
            bytes,
            header,
            attrs,
            layout,
            by_id,
            data_start,
            data_end,
            data_cut,
        })
    }

    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    pub fn attrs(&self) -> &[Attr] {
        &self.attrs
    }

    /// The attribute whose ids include `id`.
    pub fn attr_of_id(&self, id: u64) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// The header's data size was 0 (perf killed before it finished the header): the data
    /// section is taken to run to the end of the file, as perf does, and the feature
    /// sections cannot be found.
    pub fn data_size_unset(&self) -> bool {
        !self.header.is_pipe() && self.header.data.size == 0
    }

    /// The records of the data section in file order. A record whose body is damaged is
    /// an error and the next one is read; a record whose size cannot be right ends the
    /// iteration with an error (nothing after it can be found).
    pub fn records(&self) -> Records<'_, 'a> {
        Records {
            file: self,
            pos: self.data_start,
            done: false,
            pending: None,
        }
    }

    /// The feature sections, in header bit order.
    pub fn features(&self) -> Result<Vec<Feature<'a>>, Error> {
        if self.header.is_pipe() {
            return self.pipe_features();
        }
        if self.data_size_unset() && self.header.feature_ids().next().is_some() {
            return Err(Error::invalid(
                48,
                "data size",
                "0 (perf record did not finish the file): its feature sections cannot be found",
            ));
        }
        let table_at = self
            .header
            .data
            .offset
            .saturating_add(self.header.data.size);
        let n = self.header.feature_ids().count();
        let table = Section {
            offset: table_at,
            size: 16 * n as u64,
        }
        .slice(self.bytes, 48, "feature section table")?;
        let mut c = Cursor::new(table, table_at);
        self.header
            .feature_ids()
            .map(|id| {
                let entry_at = c.offset();
                let section = Section::read(&mut c, "feature section table")?;
                let bytes = section.slice(self.bytes, entry_at, "feature section")?;
                Ok(Feature {
                    id,
                    entry_at,
                    section,
                    bytes,
                })
            })
            .collect()
    }

    /// Pipe mode: the HEADER_FEATURE records (`feat_id`, then the feature's bytes), up to
    /// the first kernel record; the end marker (no bytes) left out.
    fn pipe_features(&self) -> Result<Vec<Feature<'a>>, Error> {
        let mut out = Vec::new();
        for item in self.records() {
            let item = item?;
            match item.record {
                Record::Other {
                    kind: kind::HEADER_FEATURE,
                    body,
                } => {
                    let mut c = Cursor::new(body, item.offset + 8);
                    let id = c.u64("HEADER_FEATURE record")?;
                    let bytes = c.rest();
                    // The end marker (HEADER_LAST_FEATURE, whose number grows with perf)
                    // is the one with no bytes.
                    if id < 256 && !bytes.is_empty() {
                        out.push(Feature {
                            id: id as u32,
                            entry_at: item.offset,
                            section: Section {
                                offset: item.offset + 16,
                                size: bytes.len() as u64,
                            },
                            bytes,
                        });
                    }
                }
                Record::Other { kind: k, .. } if k < kind::USER_TYPE_START => break,
                r if r.kind() < kind::USER_TYPE_START => break,
                _ => {}
            }
        }
        Ok(out)
    }

    /// Whether the file is in pipe mode (attrs and features as records).
    pub fn is_pipe(&self) -> bool {
        self.header.is_pipe()
    }

    /// One feature's section, `None` when the header does not list it.
    pub fn feature(&self, id: u32) -> Result<Option<Feature<'a>>, Error> {
        if !self.header.is_pipe() && !self.header.has_feature(id) {
            return Ok(None);
        }
        Ok(self.features()?.into_iter().find(|f| f.id == id))
    }

    /// HEADER_BUILD_ID: the build-ids perf found for the files the trace touched.
    pub fn build_ids(&self) -> Result<Vec<BuildIdEntry<'a>>, Error> {
        match self.feature(feature::BUILD_ID)? {
            Some(f) => features::build_ids(f.bytes, f.section.offset),
            None => Ok(Vec::new()),
        }
    }

    /// HEADER_AUXTRACE: the index of AUXTRACE records, each entry checked to name an
    /// AUXTRACE record inside the data section whose `header.size` (its data not
    /// included) is the entry's size, as perf checks it.
    pub fn auxtrace_index(&self) -> Result<Vec<AuxtraceIndexEntry>, Error> {
        let Some(f) = self.feature(feature::AUXTRACE)? else {
            return Ok(Vec::new());
        };
        let entries = features::auxtrace_index(f.bytes, f.section.offset)?;
        for (i, e) in entries.iter().enumerate() {
            let at = f.section.offset + 8 + 16 * i as u64;
            let bad = |why: String| Error::invalid(at, "HEADER_AUXTRACE entry", why);
            let o = e.file_offset;
            if o < self.data_start as u64
                || o.saturating_add(AUXTRACE_HEADER_SIZE) > self.data_end as u64
            {
                return Err(bad(format!("{o:#x} is outside the data section")));
            }
            let rec = &self.bytes[o as usize..];
            let kind_ = u32::from_le_bytes(rec[..4].try_into().expect("4"));
            let size = u16::from_le_bytes([rec[6], rec[7]]) as u64;
            if kind_ != kind::AUXTRACE {
                return Err(bad(format!(
                    "the record at {o:#x} has type {kind_}, not AUXTRACE"
                )));
            }
            // perf keeps the record's header.size (without the data) and refuses others.
            if size != e.size {
                return Err(bad(format!(
                    "says {} bytes, the record at {o:#x} has {size}",
                    e.size
                )));
            }
        }
        Ok(entries)
    }

    /// HEADER_EVENT_DESC: every event's attribute, name and ids (empty without it).
    pub fn event_desc(&self) -> Result<Vec<features::EventDesc<'a>>, Error> {
        match self.feature(feature::EVENT_DESC)? {
            Some(f) => features::event_desc(f.bytes, f.section.offset),
            None => Ok(Vec::new()),
        }
    }

    /// HEADER_PMU_MAPPINGS: `(type, name)` of the machine's PMUs (empty without it).
    pub fn pmu_mappings(&self) -> Result<Vec<(u32, &'a [u8])>, Error> {
        match self.feature(feature::PMU_MAPPINGS)? {
            Some(f) => features::pmu_mappings(f.bytes, f.section.offset),
            None => Ok(Vec::new()),
        }
    }

    /// A string feature (`feature::HOSTNAME`, `OSRELEASE`, `VERSION`, `ARCH`, `CPUDESC`,
    /// `CPUID`).
    pub fn string_feature(&self, id: u32) -> Result<Option<&'a [u8]>, Error> {
        match self.feature(id)? {
            Some(f) => features::string(f.bytes, f.section.offset).map(Some),
            None => Ok(None),
        }
    }

    /// The first AUXTRACE_INFO record, read as Intel PT's. `None` without one.
    pub fn intel_pt_info(&self) -> Result<Option<(u64, IntelPtInfo)>, Error> {
        for item in self.records() {
            let item = item?;
            if let Record::AuxtraceInfo(info) = &item.record {
                return IntelPtInfo::parse(info, item.offset).map(|i| Some((item.offset, i)));
            }
        }
        Ok(None)
    }

    /// The attribute of a kernel record, from the trailer's identifier when needed.
    /// The attribute that lays out a kernel record's trailer (a sample's fields), and
    /// whether it is known to be the record's event: found by the identifier. Without
    /// `sample_id_all` a non-sample record has no trailer and no identifier.
    fn attr_for(&self, kind_: u32, body: &[u8]) -> Option<(usize, bool)> {
        match self.layout? {
            IdLayout::Same(i) => Some((i, false)),
            IdLayout::Identifier => {
                let id = if kind_ == kind::SAMPLE {
                    (body.len() >= 8).then(|| u64_at(body, 0))?
                } else if !self.attrs[0].attr.sample_id_all() {
                    return Some((0, false));
                } else {
                    (body.len() >= 8).then(|| u64_at(body, body.len() - 8))?
                };
                self.attr_of_id(id).map(|i| (i, true))
            }
        }
    }

    /// The record's event: by its identifier, by the id in its trailer, or the only one.
    fn event_of(&self, found: Option<usize>, id: Option<u64>) -> Option<usize> {
        found
            .or_else(|| id.and_then(|id| self.attr_of_id(id)))
            .or((self.attrs.len() == 1).then_some(0))
    }

    /// The record of type `kind_` whose body is `body`, its header at file offset `at`
    /// (for a record inside a compressed one, the compressed record's: see
    /// [`PerfData::for_each_record`]).
    pub(crate) fn item<'b>(
        &self,
        at: usize,
        kind_: u32,
        misc: u16,
        body: &'b [u8],
    ) -> Result<Item<'b>, Error> {
        let offset = at as u64;
        let body_at = offset + 8;
        if kind_ >= kind::USER_TYPE_START {
            return Ok(Item {
                offset,
                misc,
                record: record::parse(kind_, misc, body, body_at)?,
                sample_id: SampleId::default(),
                attr: None,
            });
        }
        let Some((ix, found)) = self.attr_for(kind_, body) else {
            let why = if self.attrs.is_empty() {
                format!("type {kind_}: no event attributes (HEADER_ATTR) before it")
            } else {
                format!("type {kind_}: its sample id names no event of the file")
            };
            return Err(Error::invalid(offset, "record", why));
        };
        let attr = &self.attrs[ix].attr;
        let found = found.then_some(ix);
        if kind_ == kind::SAMPLE {
            let sample_id = sample_fields(attr, body, body_at)?;
            return Ok(Item {
                offset,
                misc,
                record: Record::Sample(body),
                sample_id,
                attr: self.event_of(found, sample_id.id),
            });
        }
        let t = attr.trailer_len();
        if body.len() < t {
            return Err(Error::truncated(
                body_at,
                "record with its sample_id trailer",
                t as u64,
                body.len() as u64,
            ));
        }
        let (main, trailer) = body.split_at(body.len() - t);
        let sample_id = SampleId::parse(attr, trailer, body_at + main.len() as u64)?;
        let attr = self.event_of(found, sample_id.id);
        Ok(Item {
            offset,
            misc,
            record: record::parse(kind_, misc, main, body_at)?,
            sample_id,
            attr,
        })
    }
}

/// A sample's leading fields (those before READ and CALLCHAIN), in the trailer's type.
fn sample_fields(attr: &EventAttr, body: &[u8], at: u64) -> Result<SampleId, Error> {
    let t = attr.sample_type;
    let mut c = Cursor::new(body, at);
    let mut s = SampleId::default();
    const W: &str = "sample";
    if t & sample::IDENTIFIER != 0 {
        s.id = Some(c.u64(W)?);
    }
    if t & sample::IP != 0 {
        c.u64(W)?;
    }
    if t & sample::TID != 0 {
        s.pid = Some(c.u32(W)?);
        s.tid = Some(c.u32(W)?);
    }
    if t & sample::TIME != 0 {
        s.time = Some(c.u64(W)?);
    }
    if t & sample::ADDR != 0 {
        c.u64(W)?;
    }
    if t & sample::ID != 0 {
        s.id = Some(c.u64(W)?);
    }
    if t & sample::STREAM_ID != 0 {
        s.stream_id = Some(c.u64(W)?);
    }
    if t & sample::CPU != 0 {
        s.cpu = Some(c.u32(W)?);
    }
    Ok(s)
}

/// Bytes that follow a record outside its `header.size`: AUXTRACE's data, pipe mode's
/// tracing data (padded to 8). `body` is the record without its header.
fn trailing_len(kind_: u32, body: &[u8]) -> u64 {
    match kind_ {
        kind::AUXTRACE if body.len() >= 8 => u64_at(body, 0),
        kind::HEADER_TRACING_DATA if body.len() >= 4 => {
            (u32::from_le_bytes(body[..4].try_into().expect("4")) as u64).next_multiple_of(8)
        }
        _ => 0,
    }
}

/// Pipe mode: the HEADER_ATTR records (the attribute, then its ids to the end of the
/// record) before the first kernel record. The framing is only followed here; `records`
/// reports where it breaks.
fn pipe_attrs(bytes: &[u8]) -> Result<Vec<Attr>, Error> {
    let mut attrs = Vec::new();
    let mut pos = crate::header::PIPE_HEADER_SIZE as usize;
    while bytes.len() - pos >= 8 {
        let kind_ = u32::from_le_bytes(bytes[pos..pos + 4].try_into().expect("4"));
        let size = u16::from_le_bytes([bytes[pos + 6], bytes[pos + 7]]) as usize;
        if size < 8 || size > bytes.len() - pos || kind_ < kind::USER_TYPE_START {
            break;
        }
        let body = &bytes[pos + 8..pos + size];
        if kind_ == kind::HEADER_ATTR {
            let at = pos as u64 + 8;
            let attr = EventAttr::parse(body, at)?;
            let ids = &body[attr.size as usize..];
            if !ids.len().is_multiple_of(8) {
                return Err(Error::invalid(
                    at + attr.size as u64,
                    "HEADER_ATTR record",
                    format!("{} bytes of ids, not a multiple of 8", ids.len()),
                ));
            }
            let ids = ids.chunks_exact(8).map(|b| u64_at(b, 0)).collect();
            attrs.push(Attr { attr, ids });
        }
        // A trailing length near 2^64 must not wrap round to an earlier place.
        match ((pos + size) as u64).checked_add(trailing_len(kind_, body)) {
            Some(next) if next <= bytes.len() as u64 => pos = next as usize,
            _ => break,
        }
    }
    Ok(attrs)
}

fn read_attrs(bytes: &[u8], h: &FileHeader) -> Result<Vec<Attr>, Error> {
    let entry = h.attr_size;
    if !(ATTR_SIZE_VER0 as u64 + IDS_SECTION..=MAX_ATTR_ENTRY).contains(&entry) {
        return Err(Error::invalid(
            16,
            "attr_size",
            format!(
                "{entry}, outside {}..={MAX_ATTR_ENTRY}",
                ATTR_SIZE_VER0 as u64 + IDS_SECTION
            ),
        ));
    }
    let section = h.attrs.slice(bytes, 24, "attrs section")?;
    if !(section.len() as u64).is_multiple_of(entry) || section.is_empty() {
        return Err(Error::invalid(
            24,
            "attrs section",
            format!(
                "{} bytes is not a positive multiple of attr_size {entry}",
                section.len()
            ),
        ));
    }
    let mut attrs = Vec::with_capacity(section.len() / entry as usize);
    let mut total_ids = 0u64;
    for (i, e) in section.chunks_exact(entry as usize).enumerate() {
        let at = h.attrs.offset + i as u64 * entry;
        let (a, ids) = e.split_at(e.len() - IDS_SECTION as usize);
        let attr = EventAttr::parse(a, at)?;
        let ids_at = at + a.len() as u64;
        let ids_section = Section::read(&mut Cursor::new(ids, ids_at), "attr ids")?;
        let raw = ids_section.slice(bytes, ids_at, "attr ids section")?;
        total_ids += raw.len() as u64 / 8;
        // Ids sections may overlap only so far: all of them together fit the file once.
        if total_ids > bytes.len() as u64 / 8 {
            return Err(Error::invalid(
                ids_at,
                "attr ids section",
                "more ids than the file has bytes for",
            ));
        }
        let ids = raw.chunks_exact(8).map(|b| u64_at(b, 0)).collect();
        attrs.push(Attr { attr, ids });
    }
    Ok(attrs)
}

fn id_layout(attrs: &[Attr]) -> Result<IdLayout, Error> {
    let first = &attrs[0].attr;
    let trailer_shape = |a: &EventAttr| (a.sample_id_all(), a.sample_type);
    if attrs
        .iter()
        .all(|a| trailer_shape(&a.attr) == trailer_shape(first))
    {
        return Ok(IdLayout::Same(0));
    }
    if attrs.iter().all(|a| {
        a.attr.sample_type & sample::IDENTIFIER != 0
            && a.attr.sample_id_all() == first.sample_id_all()
    }) {
        return Ok(IdLayout::Identifier);
    }
    Err(Error::invalid(
        24,
        "attrs section",
        "events differ in sample_type without PERF_SAMPLE_IDENTIFIER: records cannot be told apart",
    ))
}

/// The records of a file; see [`PerfData::records`].
pub struct Records<'p, 'a> {
    file: &'p PerfData<'a>,
    pos: usize,
    done: bool,
    /// The error to give after a cut AUXTRACE record's bytes (see `next`).
    pending: Option<Error>,
}

impl<'a> Iterator for Records<'_, 'a> {
    type Item = Result<Item<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.take() {
            self.done = true;
            return Some(Err(e));
        }
        if self.done {
            return None;
        }
        let f = self.file;
        let end = f.data_end;
        let at = self.pos;
        if at >= end {
            self.done = true;
            if f.data_cut {
                return Some(Err(Error::truncated(
                    end as u64,
                    "data section",
                    f.header.data.size,
                    end as u64 - f.header.data.offset,
                )));
            }
            return None;
        }
        let fail = |this: &mut Self, e: Error| {
            this.done = true;
            Some(Err(e))
        };
        if end - at < 8 {
            let e = Error::truncated(at as u64, "record header", 8, (end - at) as u64);
            return fail(self, e);
        }
        let h = &f.bytes[at..at + 8];
        let kind_ = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_le_bytes([h[4], h[5]]);
        let size = u16::from_le_bytes([h[6], h[7]]) as usize;
        if size < 8 {
            return fail(
                self,
                Error::invalid(
                    at as u64 + 6,
                    "record size",
                    format!("{size}, below the 8-byte header (type {kind_})"),
                ),
            );
        }
        if size > end - at {
            return fail(
                self,
                Error::truncated(at as u64, "record", size as u64, (end - at) as u64),
            );
        }
        let body = &f.bytes[at + 8..at + size];
        if kind_ == kind::AUXTRACE {
            let head = match record::parse_auxtrace(body, at as u64 + 8) {
                Ok(h) => h,
                // Its data's length is unknown: nothing after it can be found.
                Err(e) => return fail(self, e),
            };
            let left = (end - at - size) as u64;
            if head.size > left {
                let e = Error::truncated(at as u64, "AUXTRACE record's data", head.size, left);
                // A file that ends inside this record's data (perf killed while writing,
                // a copy cut short; pipe mode has no length at all): the bytes that are
                // there are the trace up to the cut, given as the record (its `data`
                // shorter than its `size`), then the error. Where the header's data size
                // was written and the record claims more than that section holds, the
                // size is a lie, and what follows is not its data: only the error.
                let cut = f.data_cut || f.header.data.size == 0 || f.header.is_pipe();
                if !cut || left == 0 {
                    return fail(self, e);
                }
                self.pending = Some(e);
                self.pos = end;
                return Some(Ok(Item {
                    offset: at as u64,
                    misc,
                    record: Record::Auxtrace(record::Auxtrace {
                        data: &f.bytes[at + size..end],
                        ..head
                    }),
                    sample_id: SampleId::default(),
                    attr: None,
                }));
            }
            let data = &f.bytes[at + size..at + size + head.size as usize];
            self.pos = at + size + head.size as usize;
            return Some(Ok(Item {
                offset: at as u64,
                misc,
                record: Record::Auxtrace(record::Auxtrace { data, ..head }),
                sample_id: SampleId::default(),
                attr: None,
            }));
        }
        if kind_ == kind::HEADER_TRACING_DATA && f.header.is_pipe() {
            let n = trailing_len(kind_, body);
            let left = (end - at - size) as u64;
            if n > left {
                return fail(
                    self,
                    Error::truncated(at as u64, "HEADER_TRACING_DATA record's data", n, left),
                );
            }
            self.pos = at + size + n as usize;
        } else {
            self.pos = at + size;
        }
        Some(f.item(at, kind_, misc, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuzz finding `pipe-trailing-length-overflow`: in pipe mode, an AUXTRACE record's
    /// data size near 2^64 wrapped the attrs scan's next position round to a place inside
    /// the record, where bytes were read as a HEADER_ATTR.
    #[test]
    fn pipe_attr_scan_stops_at_a_trailing_length_past_the_end() {
        let mut b = Vec::new();
        b.extend_from_slice(b"PERFILE2");
        b.extend_from_slice(&16u64.to_le_bytes());
        let aux_at = b.len();
        b.extend_from_slice(&kind::AUXTRACE.to_le_bytes());
        b.extend_from_slice(&[0, 0, 48, 0]);
        b.extend_from_slice(&(u64::MAX - 7).to_le_bytes());
        b.resize(aux_at + 40, 0);
        // Its last 8 bytes look like a HEADER_ATTR header; an attribute follows.
        b.extend_from_slice(&kind::HEADER_ATTR.to_le_bytes());
        b.extend_from_slice(&[0, 0, 72, 0]);
        let attr = EventAttr {
            kind: 1,
            size: 64,
            ..EventAttr::default()
        };
        b.extend(attr.to_bytes());
        let p = PerfData::parse(&b).unwrap();
        assert!(p.attrs().is_empty());
        let e = p.records().find_map(|r| r.err()).unwrap();
        assert_eq!(e.offset(), aux_at as u64);
        assert!(e.is_truncated());
    }

    #[test]
    fn data_size_zero_reads_to_the_end_and_loses_the_features() {
        let attr = EventAttr {
            kind: 1,
            size: 64,
            ..EventAttr::default()
        };
        let mut h = FileHeader {
            attr_size: 80,
            attrs: Section {
                offset: 104,
                size: 80,
            },
            data: Section {
                offset: 184,
                size: 0,
            },
            event_types: Section::default(),
            features: [0; 4],
        };
        let file = |h: &FileHeader| {
            let mut b = h.to_bytes();
            b.extend(attr.to_bytes());
            b.extend_from_slice(&[0; 16]);
            // One FINISHED_ROUND record.
            b.extend_from_slice(&kind::FINISHED_ROUND.to_le_bytes());
            b.extend_from_slice(&[0, 0, 8, 0]);
            b
        };
        let b = file(&h);
        let p = PerfData::parse(&b).unwrap();
        assert!(p.data_size_unset());
        assert_eq!(p.records().count(), 1);
        assert_eq!(p.features().unwrap(), vec![]);
        // perf sets the feature bits before it writes them: they cannot be found.
        h.set_feature(feature::HOSTNAME);
        let b = file(&h);
        let p = PerfData::parse(&b).unwrap();
        assert_eq!(p.records().count(), 1);
        assert_eq!(p.features().unwrap_err().offset(), 48);
        h.data.size = 8;
        let b = file(&h);
        assert!(!PerfData::parse(&b).unwrap().data_size_unset());
    }

    /// Fuzz finding `identifier-without-sample-id-all`: events whose `sample_type`s differ
    /// but all have IDENTIFIER, and no `sample_id_all`: a non-sample record has no
    /// trailer, yet its last 8 bytes were taken for the identifier.
    #[test]
    fn identifier_layout_without_sample_id_all_reads_no_trailer() {
        let attr = |sample_type| EventAttr {
            kind: 1,
            size: 64,
            sample_type,
            ..EventAttr::default()
        };
        let attrs = [
            attr(sample::IDENTIFIER | sample::TID),
            attr(sample::IDENTIFIER | sample::TIME),
        ];
        let mut b = FileHeader {
            attr_size: 80,
            attrs: Section {
                offset: 104,
                size: 160,
            },
            data: Section {
                offset: 264,
                size: 24,
            },
            event_types: Section::default(),
            features: [0; 4],
        }
        .to_bytes();
        for a in &attrs {
            b.extend(a.to_bytes());
            b.extend_from_slice(&[0; 16]);
        }
        // A LOST record: id 5, 7 lost; 7 is no event's id.
        b.extend_from_slice(&kind::LOST.to_le_bytes());
        b.extend_from_slice(&[0, 0, 24, 0]);
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&7u64.to_le_bytes());
        let p = PerfData::parse(&b).unwrap();
        let items: Vec<_> = p.records().collect::<Result<_, _>>().unwrap();
        assert_eq!(items[0].record, Record::Lost { id: 5, lost: 7 });
        assert_eq!(
            (items[0].sample_id, items[0].attr),
            (SampleId::default(), None)
        );
    }

    #[test]
    fn empty_and_garbage_inputs_are_errors_not_panics() {
        assert!(PerfData::parse(&[]).is_err());
        assert!(PerfData::parse(b"PERFILE2").is_err());
        let mut h = FileHeader {
            attr_size: 144,
            attrs: Section {
                offset: 104,
                size: 144,
            },
            data: Section {
                offset: 248,
                size: 0,
            },
            event_types: Section::default(),
            features: [0; 4],
        }
        .to_bytes();
        // The attrs section is past the end of these 104 bytes.
        assert_eq!(PerfData::parse(&h).unwrap_err().offset(), 24);
        h[16] = 3;
        assert_eq!(PerfData::parse(&h).unwrap_err().offset(), 16);
    }
}
