//! Feature sections (after the data section, one `{offset, size}` pair per feature bit
//! set in the header, in bit order; tools/perf/util/header.c): the build-id table, the
//! AUXTRACE index, and perf's string features.

use crate::cursor::{c_string, Cursor};
use crate::error::Error;
use crate::header::Section;
use crate::record::{misc, BuildId};

/// One feature's bytes and where its table entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feature<'a> {
    pub id: u32,
    /// Where the feature's `{offset, size}` pair is (errors in the table point here).
    pub entry_at: u64,
    pub section: Section,
    pub bytes: &'a [u8],
}

/// A HEADER_BUILD_ID entry (`struct perf_record_header_build_id`): which file of which
/// process had which build-id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildIdEntry<'a> {
    /// `misc`: CPU mode (`misc::USER`, `misc::KERNEL`, ...) and `BUILD_ID_SIZE`.
    pub misc: u16,
    /// -1 (`u32::MAX`) for the host kernel and user space.
    pub pid: u32,
    pub build_id: BuildId,
    pub filename: &'a [u8],
}

/// `misc` bit: the entry's `size` byte is valid (else the build-id is 20 bytes).
pub const BUILD_ID_SIZE: u16 = 1 << 15;

/// Bytes of a HEADER_BUILD_ID entry before its file name.
pub const BUILD_ID_ENTRY_FIXED: usize = 8 + 4 + 24;

/// Read the HEADER_BUILD_ID feature's entries (`bytes` at file offset `at`).
pub fn build_ids(bytes: &[u8], at: u64) -> Result<Vec<BuildIdEntry<'_>>, Error> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let here = at + pos as u64;
        let mut c = Cursor::new(&bytes[pos..], here);
        const W: &str = "HEADER_BUILD_ID entry";
        c.u32(W)?;
        let misc_ = c.u16(W)?;
        let size = c.u16(W)? as usize;
        if size < BUILD_ID_ENTRY_FIXED || size > bytes.len() - pos {
            return Err(Error::invalid(
                here + 6,
                "HEADER_BUILD_ID entry size",
                format!(
                    "{size}: below {BUILD_ID_ENTRY_FIXED} or past the feature's {} bytes left",
                    bytes.len() - pos
                ),
            ));
        }
        let pid = c.u32(W)?;
        let id = c.bytes(24, W)?;
        let len = if misc_ & BUILD_ID_SIZE != 0 {
            id[20].min(20)
        } else {
            20
        };
        let filename = c_string(&bytes[pos + BUILD_ID_ENTRY_FIXED..pos + size]);
        out.push(BuildIdEntry {
            misc: misc_,
            pid,
            build_id: BuildId::new(&id[..len as usize]).expect("at most 20"),
            filename,
        });
        pos += size;
    }
    Ok(out)
}

impl BuildIdEntry<'_> {
    /// A user-space entry for all processes (pid -1), as `perf record` writes them.
    pub fn is_user(&self) -> bool {
        self.misc & misc::CPUMODE_MASK == misc::USER
    }
}

/// An AUXTRACE index entry: where an AUXTRACE record starts and its `header.size` (the
/// record without its data: perf's `auxtrace_index__auxtrace_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuxtraceIndexEntry {
    pub file_offset: u64,
    pub size: u64,
}

/// Read the HEADER_AUXTRACE feature: a count, then `{file_offset, size}` pairs. The count
/// is checked against the feature's size before anything is allocated.
pub fn auxtrace_index(bytes: &[u8], at: u64) -> Result<Vec<AuxtraceIndexEntry>, Error> {
    let mut c = Cursor::new(bytes, at);
    let nr = c.u64("HEADER_AUXTRACE count")?;
    let room = c.remaining() as u64 / 16;
    if nr > room {
        return Err(Error::invalid(
            at,
            "HEADER_AUXTRACE count",
            format!("{nr} entries, room for {room}"),
        ));
    }
    (0..nr)
        .map(|_| {
            Ok(AuxtraceIndexEntry {
                file_offset: c.u64("HEADER_AUXTRACE entry")?,
                size: c.u64("HEADER_AUXTRACE entry")?,
            })
        })
        .collect()
}

/// A perf string feature (hostname, osrelease, version, arch, cpudesc, cpuid): a `u32`
/// length, then that many bytes, NUL-padded.
pub fn string(bytes: &[u8], at: u64) -> Result<&[u8], Error> {
    let mut c = Cursor::new(bytes, at);
    let len = c.u32("perf string length")?;
    Ok(c_string(c.bytes(len as usize, "perf string")?))
}

/// A HEADER_EVENT_DESC entry: an event's attribute, its name as perf shows it
/// (`intel_pt//u`) and its ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventDesc<'a> {
    pub attr: crate::attr::EventAttr,
    pub name: &'a [u8],
    pub ids: Vec<u64>,
}

/// HEADER_EVENT_DESC: `u32` count, `u32` attribute size, then per event the attribute, a
/// `u32` id count, the name (a perf string) and the ids. Counts are checked against the
/// bytes left before anything is allocated.
pub fn event_desc(bytes: &[u8], at: u64) -> Result<Vec<EventDesc<'_>>, Error> {
    const W: &str = "HEADER_EVENT_DESC";
    let mut c = Cursor::new(bytes, at);
    let nr = c.u32(W)? as usize;
    let size_at = c.offset();
    let size = c.u32(W)? as usize;
    if size < crate::attr::ATTR_SIZE_VER0 as usize {
        return Err(Error::invalid(size_at, W, format!("attribute size {size}")));
    }
    // Each event takes at least its attribute, an id count and a string length.
    if nr > c.remaining() / (size + 8) {
        return Err(Error::invalid(
            at,
            W,
            format!("{nr} events do not fit {} bytes", bytes.len()),
        ));
    }
    let mut out = Vec::with_capacity(nr);
    for _ in 0..nr {
        let attr_at = c.offset();
        let attr = crate::attr::EventAttr::parse(c.bytes(size, W)?, attr_at)?;
        let n_at = c.offset();
        let n = c.u32(W)? as usize;
        let len = c.u32(W)? as usize;
        let name = c_string(c.bytes(len, W)?);
        if n > c.remaining() / 8 {
            return Err(Error::invalid(
                n_at,
                W,
                format!("{n} ids do not fit the bytes left"),
            ));
        }
        let ids = (0..n).map(|_| c.u64(W)).collect::<Result<_, _>>()?;
        out.push(EventDesc { attr, name, ids });
    }
    Ok(out)
}

/// HEADER_PMU_MAPPINGS: each PMU's `perf_event_attr.type` and name (`intel_pt`, ...).
pub fn pmu_mappings(bytes: &[u8], at: u64) -> Result<Vec<(u32, &[u8])>, Error> {
    const W: &str = "HEADER_PMU_MAPPINGS";
    let mut c = Cursor::new(bytes, at);
    let nr = c.u32(W)? as usize;
    if nr > c.remaining() / 8 {
        return Err(Error::invalid(
            at,
            W,
            format!("{nr} PMUs do not fit {} bytes", bytes.len()),
        ));
    }
    let mut out = Vec::with_capacity(nr);
    for _ in 0..nr {
        let kind = c.u32(W)?;
        let len = c.u32(W)? as usize;
        out.push((kind, c_string(c.bytes(len, W)?)));
    }
    Ok(out)
}

/// HEADER_NRCPUS: CPUs available and online.
pub fn nr_cpus(bytes: &[u8], at: u64) -> Result<(u32, u32), Error> {
    let mut c = Cursor::new(bytes, at);
    Ok((c.u32("HEADER_NRCPUS")?, c.u32("HEADER_NRCPUS")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(misc_: u16, pid: u32, id: &[u8], name: &[u8], align: usize) -> Vec<u8> {
        let name_len = (name.len() + 1).next_multiple_of(align);
        let size = BUILD_ID_ENTRY_FIXED + name_len;
        let mut v = Vec::new();
        v.extend_from_slice(&67u32.to_le_bytes());
        v.extend_from_slice(&misc_.to_le_bytes());
        v.extend_from_slice(&(size as u16).to_le_bytes());
        v.extend_from_slice(&pid.to_le_bytes());
        let mut b = [0u8; 24];
        b[..id.len()].copy_from_slice(id);
        b[20] = id.len() as u8;
        v.extend_from_slice(&b);
        v.extend_from_slice(name);
        v.resize(size, 0);
        v
    }

    #[test]
    fn build_id_entries_with_and_without_their_size_byte() {
        let mut f = entry(
            misc::USER | BUILD_ID_SIZE,
            u32::MAX,
            &[1; 20],
            b"/bin/ls",
            64,
        );
        f.extend(entry(
            misc::KERNEL,
            u32::MAX,
            &[2; 16],
            b"[kernel.kallsyms]",
            8,
        ));
        let e = build_ids(&f, 0).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].filename, b"/bin/ls");
        assert_eq!(e[0].build_id.as_bytes(), &[1; 20]);
        assert!(e[0].is_user());
        // Without BUILD_ID_SIZE the id is 20 bytes, zeros included.
        assert_eq!(e[1].build_id.len, 20);
        assert_eq!(e[1].filename, b"[kernel.kallsyms]");
        assert!(!e[1].is_user());
        assert_eq!(e[0].build_id.to_hex(), "01".repeat(20));
    }

    #[test]
    fn build_id_entry_sizes_are_checked() {
        let mut f = entry(misc::USER, 0, &[1; 20], b"/x", 8);
        f[6] = 200;
        assert_eq!(build_ids(&f, 1000).unwrap_err().offset(), 1006);
        f[6] = 8;
        assert!(build_ids(&f, 0).is_err());
        assert!(build_ids(&f[..5], 0).is_err());
    }

    #[test]
    fn auxtrace_index_count_is_checked_before_reading() {
        let mut f = Vec::new();
        for x in [2u64, 0x200, 0x1030, 0x1230, 0x40] {
            f.extend_from_slice(&x.to_le_bytes());
        }
        let ix = auxtrace_index(&f, 0).unwrap();
        assert_eq!(
            ix[1],
            AuxtraceIndexEntry {
                file_offset: 0x1230,
                size: 0x40
            }
        );
        f[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(auxtrace_index(&f, 0)
            .unwrap_err()
            .to_string()
            .contains("room for 2"));
    }

    fn perf_string(v: &mut Vec<u8>, s: &[u8]) {
        let n = (s.len() + 1).next_multiple_of(8);
        v.extend_from_slice(&(n as u32).to_le_bytes());
        v.extend_from_slice(s);
        v.resize(v.len() + n - s.len(), 0);
    }

    #[test]
    fn event_desc_and_pmu_mappings() {
        let attr = crate::attr::EventAttr {
            kind: 8,
            size: 64,
            config: 0x300e601,
            ..Default::default()
        };
        let mut f = Vec::new();
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&64u32.to_le_bytes());
        f.extend(attr.to_bytes());
        f.extend_from_slice(&2u32.to_le_bytes());
        perf_string(&mut f, b"intel_pt//u");
        f.extend_from_slice(&1000u64.to_le_bytes());
        f.extend_from_slice(&1001u64.to_le_bytes());
        let d = event_desc(&f, 0).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].name, &d[0].ids[..]),
            (&b"intel_pt//u"[..], &[1000, 1001][..])
        );
        assert_eq!(d[0].attr, attr);
        // Counts past the bytes: refused before allocating.
        let mut bad = f.clone();
        bad[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(event_desc(&bad, 0).is_err());
        let mut bad = f.clone();
        bad[8 + 64..8 + 68].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(event_desc(&bad, 0).unwrap_err().offset(), 8 + 64);
        assert!(event_desc(&f[..f.len() - 1], 0).is_err());

        let mut m = 2u32.to_le_bytes().to_vec();
        m.extend_from_slice(&8u32.to_le_bytes());
        perf_string(&mut m, b"intel_pt");
        m.extend_from_slice(&1u32.to_le_bytes());
        perf_string(&mut m, b"software");
        assert_eq!(
            pmu_mappings(&m, 0).unwrap(),
            vec![(8, &b"intel_pt"[..]), (1, &b"software"[..])]
        );
        m[0] = 200;
        assert!(pmu_mappings(&m, 0).is_err());
    }

    #[test]
    fn strings_and_cpus() {
        let mut f = 8u32.to_le_bytes().to_vec();
        f.extend_from_slice(b"6.1.0\0\0\0");
        assert_eq!(string(&f, 0).unwrap(), b"6.1.0");
        assert!(string(&f[..7], 0).is_err());
        let mut n = 2u32.to_le_bytes().to_vec();
        n.extend_from_slice(&2u32.to_le_bytes());
        assert_eq!(nr_cpus(&n, 0).unwrap(), (2, 2));
    }
}
