//! Inputs as they are collected: ToPA dumps and trace-hub captures, read back into the
//! time-ordered stream the decoder takes.
//!
//! The decoder reads one time-ordered byte stream. Collectors hand over other shapes:
//!
//! - a **ToPA dump** (Intel PT 36.2.6.2): the output regions' memory, the table(s) of
//!   physical addresses that chain them, and the output-pointer MSRs read after tracing
//!   stopped (IA32_RTIT_OUTPUT_BASE: the current table; IA32_RTIT_OUTPUT_MASK_PTRS: the
//!   current entry in bits 31:7 and the offset of the next write in its region in bits
//!   63:32). Regions are written in chain order; an END entry moves to the table it points
//!   to, a STOP region stops tracing when it fills. A chain that loops is a circular
//!   buffer: once it `wrapped`, the oldest byte sits at the output pointer.
//! - a **trace-hub capture** (spec 2.3.1, 2.3.2): every 64-byte line write the CPU sent to
//!   a debug port's circular address range, as received. Writes may carry invalid bytes at
//!   either end of the line (tracing enabled at an unaligned offset, a line flushed before
//!   it filled) and may arrive out of order within the 2.3.2 bounds: a younger line may be
//!   seen before an older one, but never a younger iteration of the same line.
//!
//! [`assemble_topa`] and [`assemble_trace_hub`] turn each into the stream the linear
//! trace of the same execution would be (for a wrapped ToPA, its newest part, as for a
//! ring dump). The model's side, which lays a stream out as the hardware and a collector
//! would (so that tests can check that every form decodes to the same tables), is
//! `tracemill_datasets::collected`.
//!
//! Trace-hub record format (80 bytes, little-endian): `addr: u64` (physical address of the
//! line, 64-byte aligned), `valid: u64` (bit i set: byte i of the line is trace data; the
//! set bits are one run), `data: [u8; 64]`.

use std::collections::{BTreeMap, HashMap};

use crate::manifest::{Topa, TopaTable, TraceHub};

/// ToPA entry bits (Intel PT Figure 36-2 / Table 36-3).
pub mod entry {
    pub const END: u64 = 1 << 0;
    pub const INT: u64 = 1 << 2;
    pub const STOP: u64 = 1 << 4;
    pub const SIZE_SHIFT: u32 = 6;
    /// Bits 1, 3, 5 and 11:10 are reserved.
    pub const RESERVED: u64 = (1 << 1) | (1 << 3) | (1 << 5) | (3 << 10);
    pub const ADDR: u64 = !0xFFF;

    /// An output-region entry: `size_code` 0 is 4 KiB, 15 is 128 MiB.
    pub fn region(base: u64, size_code: u8, int: bool, stop: bool) -> u64 {
        (base & ADDR)
            | (u64::from(size_code & 0xF) << SIZE_SHIFT)
            | if int { INT } else { 0 }
            | if stop { STOP } else { 0 }
    }

    /// An END entry pointing at the table at `table`.
    pub fn end(table: u64) -> u64 {
        (table & ADDR) | END
    }

    /// The region size an entry gives.
    pub fn size(e: u64) -> u64 {
        4096 << ((e >> SIZE_SHIFT) & 0xF)
    }
}

/// Length of a trace-hub record.
pub const HUB_RECORD: usize = 80;

/// A part of the stream: `len` bytes at stream offset `stream` come from file offset `file`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub stream: u64,
    pub file: u64,
    pub len: u64,
}

/// The time-ordered stream assembled from a collected form.
#[derive(Clone, Debug, Default)]
pub struct Assembled {
    pub bytes: Vec<u8>,
    /// Problems that did not stop the assembly (bytes left out, say where).
    pub warnings: Vec<String>,
    /// The stream starts where tracing was enabled (false for a wrapped buffer).
    pub starts_at_enable: bool,
    /// Where the stream's bytes are in the file (ToPA only; a trace-hub stream is built
    /// from many records).
    pub pieces: Vec<Piece>,
}

/// One output region in chain order.
#[derive(Clone, Copy, Debug)]
struct Region {
    table: u64,
    index: usize,
    base: u64,
    size: u64,
    stop: bool,
}

/// Turn a ToPA dump into the stream. Errors name the table, entry and file offsets.
pub fn assemble_topa(t: &Topa, file: &[u8]) -> Result<Assembled, String> {
    let mut tables: HashMap<u64, &TopaTable> = HashMap::new();
    for tb in &t.tables {
        if tb.base & 0xFFF != 0 {
            return Err(format!(
                "ToPA table at {:#x} is not 4 KiB aligned (36.2.6.2, ToPA errors 2a)",
                tb.base
            ));
        }
        if tables.insert(tb.base, tb).is_some() {
            return Err(format!("ToPA table at {:#x} is listed twice", tb.base));
        }
    }
    let first = t.tables.first().ok_or("[topa] lists no table")?.base;
    let entry_at = |tb: u64, i: usize| -> Result<u64, String> {
        let table = tables
            .get(&tb)
            .ok_or_else(|| format!("ToPA table at {tb:#x} is not in the dump"))?;
        table.entries.get(i).map(|h| h.0).ok_or_else(|| {
            format!(
                "ToPA table at {tb:#x} ends after {} entries without an END or STOP entry: \
                 where the output went next is unknown",
                table.entries.len()
            )
        })
    };

    // Walk the chain from entry 0 of the first table until a STOP region or a loop.
    let mut chain: Vec<Region> = Vec::new();
    let mut seen: HashMap<(u64, usize), usize> = HashMap::new();
    let (mut tb, mut i) = (first, 0usize);
    let loop_start = loop {
        if let Some(&at) = seen.get(&(tb, i)) {
            break Some(at);
        }
        seen.insert((tb, i), chain.len());
        let e = entry_at(tb, i)?;
        if e & entry::RESERVED != 0 {
            return Err(format!(
                "ToPA table {tb:#x} entry {i} ({e:#x}) sets reserved bits (36.2.6.2, ToPA errors 1)"
            ));
        }
        if e & entry::END != 0 {
            if i == 0 {
                return Err(format!(
                    "ToPA table {tb:#x} entry 0 is an END entry (36.2.6.2, ToPA errors 4b)"
                ));
            }
            if e & (entry::STOP | entry::INT) != 0 {
                return Err(format!(
                    "ToPA table {tb:#x} entry {i} sets STOP or INT on an END entry (36.2.6.2, \
                     ToPA errors 4a)"
                ));
            }
            tb = e & entry::ADDR;
            i = 0;
            continue;
        }
        let (base, size) = (e & entry::ADDR, entry::size(e));
        if base & (size - 1) != 0 {
            return Err(format!(
                "ToPA table {tb:#x} entry {i}: region {base:#x} is not aligned to its size \
                 {size:#x} (36.2.6.2, ToPA errors 2b)"
            ));
        }
        chain.push(Region {
            table: tb,
            index: i,
            base,
            size,
            stop: e & entry::STOP != 0,
        });
        if e & entry::STOP != 0 {
            break None;
        }
        i += 1;
    };

    // Where each region's bytes are in the file.
    let mut at: HashMap<u64, u64> = HashMap::new();
    for r in &t.regions {
        if at.insert(r.base, r.file_offset).is_some() {
            return Err(format!("[[topa.region]] {:#x} is listed twice", r.base));
        }
    }
    let mut used: Vec<(u64, u64, u64)> = Vec::new(); // file start, end, region base
    let mut warnings = Vec::new();
    let mut file_of = Vec::with_capacity(chain.len());
    for r in &chain {
        let off = *at.get(&r.base).ok_or_else(|| {
            format!(
                "ToPA region {:#x} (table {:#x} entry {}) has no [[topa.region]] saying where \
                 its bytes are in the trace file",
                r.base, r.table, r.index
            )
        })?;
        let end = off.checked_add(r.size).filter(|&e| e <= file.len() as u64);
        let Some(end) = end else {
            return Err(format!(
                "ToPA region {:#x} (table {:#x} entry {}) needs file bytes {off:#x}..{:#x}, but \
                 the trace file has {:#x} bytes",
                r.base,
                r.table,
                r.index,
                off.saturating_add(r.size),
                file.len()
            ));
        };
        if used.iter().any(|&(_, _, b)| b == r.base) {
            return Err(format!(
                "ToPA region {:#x} is used by two entries (table {:#x} entry {} and an earlier \
                 one): their writes overwrite each other",
                r.base, r.table, r.index
            ));
        }
        used.push((off, end, r.base));
        file_of.push(off);
    }
    used.sort_unstable();
    for w in used.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(format!(
                "ToPA regions {:#x} (file bytes {:#x}..{:#x}) and {:#x} (file bytes \
                 {:#x}..{:#x}) overlap in the trace file",
                w[0].2, w[0].0, w[0].1, w[1].2, w[1].0, w[1].1
            ));
        }
    }
    let mut pos = 0;
    for &(s, e, _) in &used {
        if s > pos {
            warnings.push(format!(
                "ToPA dump: file bytes {pos:#x}..{s:#x} belong to no region of the chain: ignored"
            ));
        }
        pos = pos.max(e);
    }
    if pos < file.len() as u64 {
        warnings.push(format!(
            "ToPA dump: file bytes {pos:#x}..{:#x} belong to no region of the chain: ignored",
            file.len()
        ));
    }
    for r in &t.regions {
        if !chain.iter().any(|c| c.base == r.base) {
            warnings.push(format!(
                "[[topa.region]] {:#x} is not reached by the table chain: ignored",
                r.base
            ));
        }
    }

    // The output pointer: the current entry (an END entry there is followed).
    let (mut ctb, mut ci) = (
        t.output_base,
        ((t.output_mask_ptrs >> 7) & 0x1FF_FFFF) as usize,
    );
    let mut out_off = t.output_mask_ptrs >> 32;
    for _ in 0..=t.tables.len() {
        match entry_at(ctb, ci) {
            Ok(e) if e & entry::END != 0 => {
                (ctb, ci, out_off) = (e & entry::ADDR, 0, 0);
            }
            _ => break,
        }
    }
    let c = chain
        .iter()
        .position(|r| r.table == ctb && r.index == ci)
        .ok_or_else(|| {
            format!(
                "the output pointer (table {:#x} entry {ci}, from IA32_RTIT_OUTPUT_BASE and \
                 IA32_RTIT_OUTPUT_MASK_PTRS) is not a region the chain from table {first:#x} \
                 reaches",
                ctb
            )
        })?;
    let cur = chain[c];
    let full = t.stopped && cur.stop && (out_off == cur.size - 1 || out_off == cur.size);
    let off = if full {
        cur.size
    } else if out_off >= cur.size {
        return Err(format!(
            "output offset {out_off:#x} is not inside the current region {:#x} of size {:#x} \
             (36.2.6.2, ToPA errors 3)",
            cur.base, cur.size
        ));
    } else {
        out_off
    };

    // Time order.
    let mut order: Vec<(usize, u64, u64)> = Vec::new(); // chain index, from, to
    if t.wrapped {
        let ls = loop_start.ok_or(
            "[topa] wrapped = true, but the table chain ends in a STOP region: it cannot wrap",
        )?;
        if c < ls {
            return Err(format!(
                "[topa] wrapped = true, but the current region {:#x} is before the chain's \
                 loop",
                cur.base
            ));
        }
        if ls > 0 {
            warnings.push(format!(
                "ToPA dump: the {ls} region(s) before the chain's loop were written before the \
                 loop wrapped and do not join its oldest bytes: left out"
            ));
        }
        if !full {
            order.push((c, off, cur.size));
        }
        for k in (c + 1..chain.len()).chain(ls..c) {
            order.push((k, 0, chain[k].size));
        }
        order.push((c, 0, off));
    } else {
        for (k, r) in chain.iter().enumerate().take(c) {
            order.push((k, 0, r.size));
        }
        order.push((c, 0, off));
    }
    let total: u64 = order.iter().map(|&(_, a, b)| b - a).sum();
    let mut bytes = Vec::with_capacity(total as usize);
    let mut pieces = Vec::new();
    for (k, a, b) in order {
        if a == b {
            continue;
        }
        let f = file_of[k] + a;
        pieces.push(Piece {
            stream: bytes.len() as u64,
            file: f,
            len: b - a,
        });
        bytes.extend_from_slice(&file[f as usize..(f + b - a) as usize]);
    }
    Ok(Assembled {
        bytes,
        warnings,
        starts_at_enable: !t.wrapped,
        pieces,
    })
}

/// Turn a trace-hub capture into the stream: place each record's valid bytes by its line
/// address, reordering within the 2.3.2 bounds. A record that lands on bytes already
/// received is an error; bytes that never arrived end the stream (a warning says how much
/// was left out after the hole).
pub fn assemble_trace_hub(h: &TraceHub, file: &[u8]) -> Result<Assembled, String> {
    let mask = h.limit_mask;
    if !(63..1 << 48).contains(&mask) || mask & (mask + 1) != 0 {
        return Err(format!(
            "[trace_hub] limit_mask {mask:#x} is not a power of two minus 1 from 63 to 2^48 - 1"
        ));
    }
    if h.start_offset > mask {
        return Err(format!(
            "[trace_hub] start_offset {:#x} is past limit_mask {mask:#x}",
            h.start_offset
        ));
    }
    if !file.len().is_multiple_of(HUB_RECORD) {
        return Err(format!(
            "trace-hub capture: {} bytes is not a whole number of {HUB_RECORD}-byte records \
             ({} bytes left over at file offset {:#x})",
            file.len(),
            file.len() % HUB_RECORD,
            file.len() / HUB_RECORD * HUB_RECORD
        ));
    }
    let base = h.base & !mask;
    let start = h.start_offset;
    // Positions are unrolled: region offset = position & mask; stream offset =
    // position - start. `cursor`: every byte before it has arrived.
    let mut cursor = start;
    let mut bytes: Vec<u8> = Vec::new();
    let mut pending: BTreeMap<u64, u64> = BTreeMap::new();
    let mut empty = 0u64;
    let mut warnings = Vec::new();
    let u64_at = |r: &[u8], i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8 bytes"));
    let records = file.len() / HUB_RECORD;
    for (n, r) in file.chunks_exact(HUB_RECORD).enumerate() {
        let fo = n * HUB_RECORD;
        let (addr, valid, data) = (u64_at(r, 0), u64_at(r, 8), &r[16..]);
        if valid == 0 {
            empty += 1;
            continue;
        }
        let (lo, hi) = (
            u64::from(valid.trailing_zeros()),
            64 - u64::from(valid.leading_zeros()),
        );
        let run = if hi - lo == 64 {
            u64::MAX
        } else {
            ((1u64 << (hi - lo)) - 1) << lo
        };
        if valid != run {
            return Err(format!(
                "trace-hub record {n} (file offset {fo:#x}): valid mask {valid:#018x} is not \
                 one run of bytes (invalid bytes may only be at the ends of a line, 2.3.2)"
            ));
        }
        if addr & 63 != 0 {
            return Err(format!(
                "trace-hub record {n} (file offset {fo:#x}): address {addr:#x} is not a \
                 64-byte line"
            ));
        }
        let off = addr.wrapping_sub(base);
        if off > mask {
            return Err(format!(
                "trace-hub record {n} (file offset {fo:#x}): line {addr:#x} is outside the \
                 output range {base:#x}..{:#x}",
                base + mask + 1
            ));
        }
        // The only place this line can be: at most one iteration ahead of the oldest
        // line not yet complete (2.3.2).
        let line_cur = cursor & !63;
        let line = line_cur + (off.wrapping_sub(line_cur) & mask);
        let (a, b) = (line + lo, line + hi);
        let clash = a < cursor
            || pending
                .range(..b)
                .next_back()
                .is_some_and(|(_, &end)| end > a);
        if clash {
            return Err(format!(
                "trace-hub record {n} (file offset {fo:#x}): line {addr:#x} bytes {lo}..{hi} \
                 land on stream bytes {:#x}..{:#x}, already received: a write out of order \
                 beyond the bounds of 2.3.2, a duplicate, a line lost before it, or \
                 RTIT_OFFSET changed while tracing",
                a - start,
                b - start
            ));
        }
        // The capture carries at most 64 bytes a record: a line further ahead than that
        // leaves a hole that can never close (and would make the buffer as large as the
        // range). The stream ends before the hole, as below.
        if b - start > 64 * records as u64 {
            warnings.push(format!(
                "trace-hub record {n} (file offset {fo:#x}): line {addr:#x} lands at stream \
                 offset {:#x}, past anything the capture's {records} records can fill: it and \
                 the records after it are left out",
                a - start
            ));
            break;
        }
        let (sa, sb) = ((a - start) as usize, (b - start) as usize);
        if bytes.len() < sb {
            bytes.resize(sb, 0);
        }
        bytes[sa..sb].copy_from_slice(&data[lo as usize..hi as usize]);
        pending.insert(a, b);
        while let Some(end) = pending.remove(&cursor) {
            cursor = end;
        }
    }
    if empty > 0 {
        warnings.push(format!(
            "trace-hub capture: {empty} record(s) with no valid byte: ignored"
        ));
    }
    if let Some((&first, _)) = pending.iter().next() {
        let after: u64 = pending.iter().map(|(a, b)| b - a).sum();
        warnings.push(format!(
            "trace-hub capture: stream bytes {:#x}..{:#x} never arrived; the {after} bytes \
             received after them are left out",
            cursor - start,
            first - start
        ));
    }
    bytes.truncate((cursor - start) as usize);
    Ok(Assembled {
        bytes,
        warnings,
        starts_at_enable: true,
        pieces: Vec::new(),
    })
}
