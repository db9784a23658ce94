//! `perf record -z`: the sideband inside PERF_RECORD_COMPRESSED records.
//!
//! With `-z` perf compresses what it reads from the kernel's ring buffers (MMAP, COMM,
//! SWITCH, AUX records...) with zstd into COMPRESSED records (COMPRESSED2 since perf 6.15:
//! a data size first, padded to 8 bytes); the AUXTRACE records and their data stay as
//! they are. The compressed records are one zstd stream (perf flushes it after each
//! record rather than ending a frame), and a record may straddle two of them, so they are
//! decompressed in order by one decoder, and a record cut at the end of one is completed
//! from the next (perf's `perf_session__process_compressed_event` keeps the same
//! remainder).
//!
//! Bounded: the output is taken [`STEP`] bytes at a time and parsed as it comes; only a
//! record's worth (at most 64 KiB, a record's size being 16 bits) is kept between steps,
//! whatever the stream expands to. zstd's own window is bounded by its default limit
//! (2^27 bytes).
//!
//! zstd is the one dependency of this crate: the format is zstd's, and the `zstd` crate
//! (zstd's C library, which perf uses too) is the one the workspace already builds for
//! Parquet.

use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};

use crate::error::Error;
use crate::file::{Item, PerfData};
use crate::record::{kind, Record};

/// Decompressed bytes taken at a time.
const STEP: usize = 256 << 10;

impl PerfData<'_> {
    /// Every record in file order, as [`PerfData::records`] gives them, except that each
    /// compressed record (`perf record -z`) is replaced by the records inside it. Those
    /// carry the file offset of the compressed record they came from (as `perf script -D`
    /// shows them), and borrow a buffer that lives for the call of `f` only.
    pub fn for_each_record(&self, mut f: impl FnMut(Result<Item<'_>, Error>)) {
        self.walk(true, &mut f);
    }

    /// The records inside compressed records only, in order (see
    /// [`PerfData::for_each_record`]).
    pub fn for_each_compressed_record(&self, mut f: impl FnMut(Result<Item<'_>, Error>)) {
        self.walk(false, &mut f);
    }

    /// The records (`outer`: all of them; else only those inside compressed records),
    /// compressed ones expanded in place.
    fn walk(&self, outer: bool, f: &mut dyn FnMut(Result<Item<'_>, Error>)) {
        let mut z: Option<Expander> = None;
        for item in self.records() {
            match item {
                Ok(Item {
                    offset,
                    record: Record::Other { kind: k, body },
                    ..
                }) if k == kind::COMPRESSED || k == kind::COMPRESSED2 => {
                    let z = match &mut z {
                        Some(z) => z,
                        None => match Expander::new() {
                            Ok(e) => z.insert(e),
                            Err(e) => {
                                f(Err(Error::invalid(offset, "compressed record", e)));
                                return;
                            }
                        },
                    };
                    z.feed(self, offset, k, body, f);
                }
                other if outer => f(other),
                _ => {}
            }
        }
        if let Some(z) = z {
            z.finish(f);
        }
    }
}

/// The decompression of one file's compressed records.
struct Expander {
    dec: Decoder<'static>,
    /// Decompressed bytes not yet parsed: the start of a record the next compressed
    /// record completes.
    buf: Vec<u8>,
    /// Offset of the compressed record `buf`'s bytes came from.
    at: u64,
    /// The stream could not be decompressed, or held a record that makes the rest
    /// unreadable: nothing more is read from it.
    failed: bool,
}

impl Expander {
    fn new() -> Result<Expander, String> {
        Ok(Expander {
            dec: Decoder::new().map_err(|e| format!("zstd: {e}"))?,
            buf: Vec::new(),
            at: 0,
            failed: false,
        })
    }

    /// Decompress the compressed record at `at` (of type `k`, body `body`) and give every
    /// record it completes to `f`.
    fn feed(
        &mut self,
        perf: &PerfData<'_>,
        at: u64,
        k: u32,
        body: &[u8],
        f: &mut dyn FnMut(Result<Item<'_>, Error>),
    ) {
        if self.failed {
            return;
        }
        let data = if k == kind::COMPRESSED2 {
            let size = body
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            match size {
                Some(n) if n <= body.len() as u64 - 8 => &body[8..8 + n as usize],
                _ => {
                    f(Err(Error::invalid(
                        at + 8,
                        "COMPRESSED2 record",
                        format!("data size does not fit its {} bytes", body.len()),
                    )));
                    return;
                }
            }
        } else {
            body
        };
        let mut input = InBuffer::around(data);
        loop {
            let start = self.buf.len();
            self.buf.resize(start + STEP, 0);
            let mut out = OutBuffer::around_pos(&mut self.buf[..], start);
            let r = self.dec.run(&mut input, &mut out);
            let end = out.pos();
            self.buf.truncate(end);
            if let Err(e) = r {
                f(Err(Error::invalid(
                    at,
                    "compressed record",
                    format!("zstd: {e}: this and the compressed records after it are not read"),
                )));
                self.failed = true;
                self.buf = Vec::new();
                return;
            }
            if end > start {
                // Records still cut from the last one are named by where they started.
                if start == 0 {
                    self.at = at;
                }
                let used = parse_records(perf, &self.buf, self.at, f, &mut self.failed);
                self.buf.drain(..used);
                self.at = at;
                if self.failed {
                    self.buf = Vec::new();
                    return;
                }
            }
            if input.pos() == data.len() && end < start + STEP {
                return;
            }
        }
    }

    /// The end of the file: a record left cut is an error.
    fn finish(self, f: &mut dyn FnMut(Result<Item<'_>, Error>)) {
        if !self.failed && !self.buf.is_empty() {
            let want = self
                .buf
                .get(6..8)
                .map_or(8, |h| u16::from_le_bytes([h[0], h[1]]) as u64);
            f(Err(Error::truncated(
                self.at,
                "record inside the compressed records",
                want,
                self.buf.len() as u64,
            )));
        }
    }
}

/// Give `f` every whole record at the front of `buf` (decompressed from the compressed
/// record at file offset `at`); the number of bytes they take. A record size below its
/// header makes the rest unreadable (`failed`).
fn parse_records(
    perf: &PerfData<'_>,
    buf: &[u8],
    at: u64,
    f: &mut dyn FnMut(Result<Item<'_>, Error>),
    failed: &mut bool,
) -> usize {
    let mut p = 0;
    while buf.len() - p >= 8 {
        let h = &buf[p..p + 8];
        let kind_ = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_le_bytes([h[4], h[5]]);
        let size = u16::from_le_bytes([h[6], h[7]]) as usize;
        if size < 8 {
            f(Err(Error::invalid(
                at,
                "record inside a compressed record",
                format!("size {size}, below the 8-byte header (type {kind_}): the records after it are not read"),
            )));
            *failed = true;
            return p;
        }
        if size > buf.len() - p {
            break;
        }
        let body = &buf[p + 8..p + size];
        p += size;
        match kind_ {
            // Their data follows outside the record: never compressed by perf, and not
            // findable here.
            kind::AUXTRACE | kind::HEADER_TRACING_DATA | kind::COMPRESSED | kind::COMPRESSED2 => {
                f(Err(Error::invalid(
                    at,
                    "record inside a compressed record",
                    format!("type {kind_} cannot be compressed: skipped"),
                )))
            }
            _ => f(perf.item(at as usize, kind_, misc, body)),
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of records (FINISHED_ROUND, and a raw record of `n` bytes) as perf
    /// compresses them: one zstd stream, flushed after each piece, cut into pieces.
    fn compressed(records: &[u8], pieces: usize) -> Vec<Vec<u8>> {
        let mut enc = zstd::stream::raw::Encoder::new(1).unwrap();
        let mut out = Vec::new();
        let step = records.len().div_ceil(pieces);
        for chunk in records.chunks(step) {
            let mut o = vec![0u8; chunk.len() + 1024];
            let mut input = InBuffer::around(chunk);
            let mut ob = OutBuffer::around(&mut o[..]);
            enc.run(&mut input, &mut ob).unwrap();
            enc.flush(&mut ob).unwrap();
            let n = ob.pos();
            o.truncate(n);
            out.push(o);
        }
        out
    }

    fn raw_record(kind_: u32, body: &[u8]) -> Vec<u8> {
        let mut r = kind_.to_le_bytes().to_vec();
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&((8 + body.len()) as u16).to_le_bytes());
        r.extend_from_slice(body);
        r
    }

    /// A pipe-mode perf.data (no attrs needed for perf's own record types) of `records`.
    fn pipe_file(records: &[Vec<u8>]) -> Vec<u8> {
        let mut b = b"PERFILE2".to_vec();
        b.extend_from_slice(&16u64.to_le_bytes());
        for r in records {
            b.extend_from_slice(r);
        }
        b
    }

    #[test]
    fn records_straddling_compressed_records_are_joined_in_order() {
        // 300 records of perf's own types: FINISHED_ROUND and 40-byte raw ones.
        let mut inner = Vec::new();
        for i in 0..300u32 {
            if i % 3 == 0 {
                inner.extend(raw_record(kind::FINISHED_ROUND, &[]));
            } else {
                inner.extend(raw_record(90, &[i as u8; 32]));
            }
        }
        let pieces = compressed(&inner, 7);
        let mut recs = vec![raw_record(kind::FINISHED_ROUND, &[])];
        for p in &pieces {
            recs.push(raw_record(kind::COMPRESSED, &{
                let mut b = p.clone();
                b.resize(p.len(), 0);
                b
            }));
        }
        let file = pipe_file(&recs);
        let perf = PerfData::parse(&file).unwrap();
        let mut kinds = Vec::new();
        let mut errors = Vec::new();
        perf.for_each_record(|i| match i {
            Ok(i) => kinds.push((i.offset, i.record.kind())),
            Err(e) => errors.push(e.to_string()),
        });
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(kinds.len(), 301);
        assert_eq!(kinds[0], (16, kind::FINISHED_ROUND));
        for (i, (_, k)) in kinds[1..].iter().enumerate() {
            let want = if i % 3 == 0 { kind::FINISHED_ROUND } else { 90 };
            assert_eq!(*k, want, "record {i}");
        }
        // Each inner record names the compressed record its last bytes came from, in
        // file order.
        assert!(kinds.windows(2).all(|w| w[0].0 <= w[1].0));
        let mut inner_only = 0;
        perf.for_each_compressed_record(|i| inner_only += i.is_ok() as usize);
        assert_eq!(inner_only, 300);
    }

    #[test]
    fn the_aux_walk_tells_where_it_is_in_the_compressed_records_too() {
        // A caller releases the pages behind each walk: the walk over the compressed
        // records (for the AUX records inside) starts again from the first of them and
        // moves on through every one.
        let inner: Vec<u8> = (0..200).flat_map(|_| raw_record(90, &[3; 24])).collect();
        let pieces = compressed(&inner, 5);
        let mut recs = vec![raw_record(kind::FINISHED_ROUND, &[])];
        recs.extend(pieces.iter().map(|p| raw_record(kind::COMPRESSED, p)));
        let file = pipe_file(&recs);
        let perf = PerfData::parse(&file).unwrap();
        let mut at = Vec::new();
        let (_, _, errors) = crate::aux::aux_queues_walked(&perf, |o| at.push(o));
        assert!(errors.is_empty(), "{errors:?}");
        let first: Vec<u64> = {
            let mut o = 16;
            recs.iter()
                .map(|r| {
                    let here = o;
                    o += r.len() as u64;
                    here
                })
                .collect()
        };
        // The record walk, then the compressed records' again, in order, each once at
        // least (a record inside is reported at its compressed record's offset).
        assert_eq!(&at[..first.len()], &first[..]);
        let mut again = at[first.len()..].to_vec();
        assert!(again.windows(2).all(|w| w[0] <= w[1]), "{again:?}");
        again.dedup();
        assert_eq!(again, first[1..]);
    }

    #[test]
    fn damage_is_an_error_at_the_compressed_record_and_never_unbounded() {
        let inner: Vec<u8> = (0..50).flat_map(|_| raw_record(90, &[7; 24])).collect();
        let pieces = compressed(&inner, 3);
        // Garbage instead of zstd: an error naming the record, the rest not read.
        let file = pipe_file(&[raw_record(kind::COMPRESSED, b"not zstd at all!")]);
        let perf = PerfData::parse(&file).unwrap();
        let mut errs = Vec::new();
        perf.for_each_record(|i| errs.extend(i.err().map(|e| e.to_string())));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].contains("zstd") && errs[0].contains("at offset 0x10"),
            "{errs:?}"
        );
        // Only the first piece: the record it leaves cut is named at the end.
        let file = pipe_file(&[raw_record(kind::COMPRESSED, &pieces[0])]);
        let perf = PerfData::parse(&file).unwrap();
        let (mut ok, mut errs) = (0, Vec::new());
        perf.for_each_record(|i| match i {
            Ok(_) => ok += 1,
            Err(e) => errs.push(e),
        });
        assert!(ok > 0 && ok < 50, "{ok}");
        assert!(
            errs.len() == 1 && errs[0].is_truncated(),
            "{:?}",
            errs.iter().map(|e| e.to_string()).collect::<Vec<_>>()
        );
        // A zstd bomb (64 MiB of zeros: records of size 0 after decompression) is an
        // error at once, not 64 MiB held.
        let zeros = vec![0u8; 64 << 20];
        let bomb = zstd::bulk::compress(&zeros, 19).unwrap();
        assert!(bomb.len() < 65_000);
        let file = pipe_file(&[raw_record(kind::COMPRESSED, &bomb)]);
        let perf = PerfData::parse(&file).unwrap();
        let mut errs = Vec::new();
        perf.for_each_record(|i| errs.extend(i.err().map(|e| e.to_string())));
        assert!(
            errs.len() == 1 && errs[0].contains("below the 8-byte header"),
            "{errs:?}"
        );
    }

    #[test]
    fn compressed2_reads_its_data_size_first() {
        let inner: Vec<u8> = (0..10).flat_map(|_| raw_record(90, &[1; 8])).collect();
        let z = compressed(&inner, 1).remove(0);
        let mut body = (z.len() as u64).to_le_bytes().to_vec();
        body.extend(&z);
        body.resize(body.len().next_multiple_of(8), 0);
        let file = pipe_file(&[raw_record(kind::COMPRESSED2, &body)]);
        let perf = PerfData::parse(&file).unwrap();
        let mut n = 0;
        perf.for_each_record(|i| n += i.map(|i| (i.record.kind() == 90) as usize).unwrap());
        assert_eq!(n, 10);
    }
}
