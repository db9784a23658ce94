//! Finding PSBs in an Intel PT stream, and the PSB-bounded packet reader.
//!
//! A PSB is `02 82` eight times (36.4.2.17). No other packet starts with that pattern,
//! but a payload may end in `02 82` bytes, and PSBs may follow each other; so in a run
//! of `02 82` pairs longer than 16 bytes only the last 16 are known to be a PSB: the
//! bytes before them are another packet's payload or an earlier PSB, and either way
//! decoding from the last PSB of the run loses nothing. [`next_psb`] therefore answers
//! with the last 16 bytes of the first run that holds a whole PSB (which is also where
//! libipt's `pt_sync_forward` lands).

use std::sync::OnceLock;

use super::cpu::Errata;
use super::packet::{
    parse, IpCompression, IpPayload, Packet, PacketError, Parsed, Tnt, MAX_PACKET_LEN, PSB_BYTES,
    PSB_LEN,
};
use crate::psb_ahead::PsbAhead;
use crate::stream::TraceStream;

fn finder() -> &'static memchr::memmem::Finder<'static> {
    static F: OnceLock<memchr::memmem::Finder<'static>> = OnceLock::new();
    F.get_or_init(|| memchr::memmem::Finder::new(&PSB_BYTES))
}

/// The first place in `from..to` where the 16 PSB bytes start (a PSB or the start of a
/// longer run). Reads at most the bytes up to `to` plus 15.
fn find_pattern(stream: &TraceStream<'_>, from: u64, to: u64) -> Option<u64> {
    stream.find(finder(), from, to)
}

/// The PSB of the run of `02 82` pairs whose first 16 bytes start at `q`: its last 16
/// bytes.
fn psb_of_run(stream: &TraceStream<'_>, q: u64) -> u64 {
    let mut e = q + PSB_LEN;
    while stream.byte(e) == Some(0x02) && stream.byte(e + 1) == Some(0x82) {
        e += 2;
    }
    e - PSB_LEN
}

/// The first PSB that starts at or after stream offset `from`. Searches only as far as
/// that PSB (memchr's `memmem`), so readers find PSBs as they go and no list of them is
/// kept. PSBs straddling a ring seam are found.
pub fn next_psb(stream: &TraceStream<'_>, from: u64) -> Option<u64> {
    next_psb_before(stream, from, u64::MAX)
}

/// The first PSB that starts in `from..to` (a planner can search a long stretch in
/// steps).
pub fn next_psb_before(stream: &TraceStream<'_>, from: u64, to: u64) -> Option<u64> {
    let q = find_pattern(stream, from, to)?;
    Some(psb_of_run(stream, q)).filter(|&p| p < to)
}

/// The PSB of the first run of `02 82` pairs starting in `from..to`, wherever it ends (for
/// a reader gone back before what it had searched: the run may end in what was searched).
fn run_before(stream: &TraceStream<'_>, from: u64, to: u64) -> Option<u64> {
    find_pattern(stream, from, to).map(|q| psb_of_run(stream, q))
}

/// Every PSB, in order (for tools and tests; decoding asks for the next one as it goes).
pub fn find_psbs(stream: &TraceStream<'_>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = next_psb(stream, from) {
        out.push(p);
        from = p + PSB_LEN;
    }
    out
}

/// Reads Intel PT packets from a stream range, one at a time, without copying it.
///
/// PSBs are hard boundaries, as in the RTIT reader ([`crate::rtit::packet::PacketReader`]): a
/// packet that would run into the next PSB is reported truncated, and after any error
/// reading resumes at the next PSB. Every reader over the same bytes therefore agrees on
/// packet boundaries however the stream was cut into chunks. (libipt's packet decoder
/// does not bound packets by PSBs; `listing` reproduces its behaviour where ptdump's
/// output depends on it.)
#[derive(Clone)]
pub struct PacketReader<'s> {
    stream: &'s TraceStream<'s>,
    pos: u64,
    end: u64,
    errata: Errata,
    /// Where the next PSB is, searched a window at a time.
    psb: PsbAhead,
    /// The part of the stream read last, and its stream offset: the hot paths read bytes
    /// from it without asking the stream which part holds them (a perf.data area is
    /// thousands of parts).
    part: &'s [u8],
    part_at: u64,
}

impl<'s> PacketReader<'s> {
    /// Read packets starting at `start` (a packet boundary, normally a PSB) up to `end`
    /// (exclusive: no packet starting at or after `end` is read; the last one may end
    /// past it). `errata` are the processor's ([`Errata::for_cpu`]).
    pub fn new(stream: &'s TraceStream<'s>, start: u64, end: u64, errata: Errata) -> Self {
        PacketReader {
            stream,
            pos: start,
            end: end.min(stream.len()),
            errata,
            psb: PsbAhead::new(),
            part: &[],
            part_at: 0,
        }
    }

    /// The byte at `pos`.
    #[inline]
    fn byte(&mut self, pos: u64) -> Option<u8> {
        let i = pos.wrapping_sub(self.part_at);
        if i < self.part.len() as u64 {
            return Some(self.part[i as usize]);
        }
        let (at, part) = self.stream.part_at(pos)?;
        (self.part, self.part_at) = (part, at);
        part.get((pos - at) as usize).copied()
    }

    /// Up to `n` bytes at `pos`, as [`TraceStream::window`]: from the part read last when
    /// they are in it.
    #[inline]
    fn window<'b>(&self, pos: u64, n: usize, scratch: &'b mut [u8]) -> &'b [u8]
    where
        's: 'b,
    {
        let i = pos.wrapping_sub(self.part_at) as usize;
        match i.checked_add(n) {
            Some(e) if e <= self.part.len() && pos >= self.part_at => &self.part[i..e],
            _ => self.stream.window(pos, n, scratch),
        }
    }

    /// Offset of the next byte to read.
    pub fn pos(&self) -> u64 {
        self.pos
    }
    pub fn end(&self) -> u64 {
        self.end
    }
    /// Move the cursor (to a packet boundary previously returned by `pos`).
    pub fn seek(&mut self, pos: u64) {
        self.pos = pos;
    }
    /// Extend the readable range (a stitch reading on into the next chunk).
    pub fn set_end(&mut self, end: u64) {
        self.end = end.min(self.stream.len());
    }
    /// The range ends where the stream ends (not at a chunk boundary).
    pub fn ends_at_stream_end(&self) -> bool {
        self.end >= self.stream.len()
    }

    /// The first PSB at or after `pos` if it starts within a packet's length or so
    /// ([`PsbAhead::near`]); searches only what an earlier call did not prove. After a
    /// seek back (a look-ahead undone) only the bytes up to the known answer are
    /// searched: searching on to the next PSB each time made a stretch without PSBs that
    /// the walker reads ahead in often (OVF packets back to back) quadratic, 25 s for
    /// 1 MiB and 353 s for 4 MiB.
    #[inline]
    fn psb_from(&mut self, pos: u64) -> Option<u64> {
        let s = self.stream;
        self.psb.near(
            pos,
            s.len(),
            |from, to| next_psb_before(s, from, to),
            |from, to| run_before(s, from, to),
        )
    }

    /// The next packet if it is a TNT-8 (the flow decoder's hot path): one byte, not at
    /// the end of the range. A PSB cannot start with it.
    #[inline]
    pub fn try_tnt(&mut self) -> Option<(Tnt, u64)> {
        if self.pos >= self.end {
            return None;
        }
        let b = self.byte(self.pos)?;
        if b & 1 != 0 || b == 0x00 || b == 0x02 {
            return None;
        }
        let payload = (b >> 1) as u64;
        let len = 63 - payload.leading_zeros() as u8;
        let off = self.pos;
        self.pos += 1;
        Some((
            Tnt {
                bits: payload & !(1 << len),
                len,
            },
            off,
        ))
    }

    /// The next packet if it is a whole TIP (the flow decoder's other hot path: every
    /// indirect branch and uncompressed RET): its payload and offset. Anything else —
    /// reserved IPBytes, a packet running into the next PSB or off the stream, a start at
    /// or past the range's end — is left to [`Self::next_packet`], which reports it.
    #[inline]
    pub fn try_tip(&mut self) -> Option<(IpPayload, u64)> {
        if self.pos >= self.end {
            return None;
        }
        let b = self.byte(self.pos)?;
        if b & 0x1F != 0x0D {
            return None;
        }
        let compression = IpCompression::from_ip_bytes(b >> 5)?;
        let off = self.pos;
        let size = 1 + compression.payload_len() as u64;
        let end = off + size;
        if end > self.stream.len() || self.psb_from(off).is_some_and(|p| p < end) {
            return None;
        }
        let n = size as usize - 1;
        let mut scratch = [0u8; MAX_PACKET_LEN];
        // Eight bytes at once, masked to the payload's (a copy of `n` bytes is a call to
        // memcpy; benches/README.md, Throughput III's third round); byte by byte only at
        // the stream's end or the ring's seam.
        let bits = match <[u8; 8]>::try_from(self.window(off + 1, 8, &mut scratch)) {
            Ok(w) => {
                let mask = if n == 8 { u64::MAX } else { (1 << (8 * n)) - 1 };
                u64::from_le_bytes(w) & mask
            }
            Err(_) => {
                let bytes = self.window(off + 1, n, &mut scratch);
                bytes.iter().rev().fold(0, |a, &b| a << 8 | b as u64)
            }
        };
        self.pos = end;
        Some((IpPayload { compression, bits }, off))
    }

    /// The next packet, `None` at the end of the range, or an error; after an error the
    /// cursor has moved to the next PSB.
    #[inline]
    pub fn next_packet(&mut self) -> Option<Result<Parsed, PacketError>> {
        if self.pos >= self.end {
            return None;
        }
        let offset = self.pos;
        let next_psb = self.psb_from(offset);
        if next_psb == Some(offset) {
            self.pos += PSB_LEN;
            return Some(Ok(Parsed {
                offset,
                size: PSB_LEN as u8,
                packet: Packet::Psb,
            }));
        }
        let limit = next_psb.unwrap_or(self.stream.len());
        let mut scratch = [0u8; MAX_PACKET_LEN];
        let avail = (limit - offset).min(MAX_PACKET_LEN as u64) as usize;
        let bytes = self.window(offset, avail, &mut scratch);
        match parse(bytes, &self.errata) {
            Ok((packet, size)) => {
                self.pos += size as u64;
                Some(Ok(Parsed {
                    offset,
                    size,
                    packet,
                }))
            }
            Err(kind) => {
                let (stream, len) = (self.stream, self.stream.len());
                self.pos = self
                    .psb
                    .resume_at(next_psb, len, || self::next_psb(stream, offset));
                Some(Err(PacketError::new(offset, kind)))
            }
        }
    }
}

impl Iterator for PacketReader<'_> {
    type Item = Result<Parsed, PacketError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_packet()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::packet::PacketErrorKind;

    #[test]
    fn sdm_36_4_2_17_psb_found_in_linear_and_across_ring_seam() {
        let mut d = vec![0x00u8, 0x04];
        d.extend_from_slice(&PSB_BYTES);
        d.extend_from_slice(&[0x02, 0x23]);
        d.extend_from_slice(&PSB_BYTES);
        assert_eq!(find_psbs(&TraceStream::linear(&d)), vec![2, 20]);
        for r in 0..d.len() {
            let mut file = d[r..].to_vec();
            file.extend_from_slice(&d[..r]);
            let s = TraceStream::ring(&file, d.len() - r);
            assert_eq!(s.to_vec(0, s.len()), d);
            assert_eq!(find_psbs(&s), vec![2, 20], "rotation {r}");
        }
    }

    #[test]
    fn sdm_36_4_2_17_a_longer_run_holds_its_psb_at_the_end() {
        // A payload ending in 02 82, then a PSB: the PSB is the last 16 bytes.
        let mut d = vec![0x19, 1, 2, 3, 4, 5, 0x02, 0x82];
        d.extend_from_slice(&PSB_BYTES);
        d.extend_from_slice(&[0x02, 0x23]);
        let s = TraceStream::linear(&d);
        assert_eq!(next_psb(&s, 0), Some(8));
        // Back-to-back PSBs: the second (nothing lies between them).
        let mut d = PSB_BYTES.to_vec();
        d.extend_from_slice(&PSB_BYTES);
        d.push(0x00);
        assert_eq!(find_psbs(&TraceStream::linear(&d)), vec![16]);
        // An odd byte after the run does not count.
        let mut d = PSB_BYTES.to_vec();
        d.push(0x02);
        assert_eq!(find_psbs(&TraceStream::linear(&d)), vec![0]);
    }

    /// `next_psb` and `next_psb_before` from every offset agree with a naive search over
    /// the definition (the last 16 bytes of each in-phase run of 02 82 pairs of 16 bytes
    /// or more), in every rotation of a ring.
    #[test]
    fn next_psb_agrees_with_a_naive_search_from_any_offset() {
        let mut d = Vec::new();
        for i in 0..6usize {
            d.extend(std::iter::repeat_n(0x02, i % 3));
            d.extend(std::iter::repeat_n(0x82, i % 2));
            d.extend_from_slice(&PSB_BYTES[..2 * (i % 3)]);
            d.extend_from_slice(&PSB_BYTES);
            d.push(0x23);
        }
        d.extend_from_slice(&PSB_BYTES[..10]);
        let naive = |v: &[u8]| -> Vec<u64> {
            let mut out = Vec::new();
            let mut i = 0;
            while i + 1 < v.len() {
                if v[i] == 0x02 && v[i + 1] == 0x82 {
                    let mut e = i;
                    while e + 1 < v.len() && v[e] == 0x02 && v[e + 1] == 0x82 {
                        e += 2;
                    }
                    if e - i >= 16 {
                        out.push((e - 16) as u64);
                    }
                    i = e;
                } else {
                    i += 1;
                }
            }
            out
        };
        let all = naive(&d);
        assert!(all.len() >= 6, "{all:?}");
        for r in 0..d.len() {
            let s = TraceStream::ring(&d, r);
            let v = s.to_vec(0, s.len());
            let all = naive(&v);
            assert_eq!(find_psbs(&s), all, "ring offset {r}");
            for from in 0..=s.len() + 1 {
                let want = all.iter().copied().find(|&p| p >= from);
                assert_eq!(next_psb(&s, from), want, "ring offset {r}, from {from}");
                for to in (from..=s.len() + 1).step_by(7) {
                    let want = want.filter(|&p| p < to);
                    assert_eq!(next_psb_before(&s, from, to), want);
                }
            }
        }
    }

    fn read_all(d: &[u8]) -> Vec<Result<Parsed, PacketError>> {
        let s = TraceStream::linear(d);
        PacketReader::new(&s, 0, s.len(), Errata::default()).collect()
    }

    #[test]
    fn reader_truncates_a_packet_at_the_next_psb_and_resumes_there() {
        // An MNT whose payload would swallow half of the PSB after it.
        let mut d = PSB_BYTES.to_vec();
        d.extend_from_slice(&[0x02, 0xC3, 0x88]);
        d.extend_from_slice(&PSB_BYTES);
        d.extend_from_slice(&[0x02, 0x23]);
        let got = read_all(&d);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0].unwrap().packet, Packet::Psb);
        let e = got[1].unwrap_err();
        assert_eq!(e.offset, 16);
        assert_eq!(e.kind, PacketErrorKind::Truncated { need: 11, have: 3 });
        assert_eq!(got[2].unwrap().offset, 19);
        assert_eq!(got[3].unwrap().packet, Packet::PsbEnd);
    }

    #[test]
    fn reader_at_back_to_back_psbs_reads_both() {
        // next_psb names the second; a reader already at the first reads it as well.
        let mut d = PSB_BYTES.to_vec();
        d.extend_from_slice(&PSB_BYTES);
        d.extend_from_slice(&[0x02, 0x23]);
        let got: Vec<(u64, Packet)> = read_all(&d)
            .into_iter()
            .map(|p| p.map(|p| (p.offset, p.packet)).unwrap())
            .collect();
        assert_eq!(
            got,
            [(0, Packet::Psb), (16, Packet::Psb), (32, Packet::PsbEnd)]
        );
        assert_eq!(find_psbs(&TraceStream::linear(&d)), [16]);
    }

    #[test]
    fn reader_truncates_at_the_end_and_resyncs_after_a_bad_opcode() {
        let mut d = PSB_BYTES.to_vec();
        d.push(0xC9); // no such opcode
        d.extend_from_slice(&[0x00, 0x00]);
        d.extend_from_slice(&PSB_BYTES);
        d.extend_from_slice(&[0x19, 1, 2]); // TSC cut short by the end
        let got = read_all(&d);
        let kinds: Vec<String> = got
            .iter()
            .map(|p| match p {
                Ok(p) => format!("{}@{}", p.packet.name(), p.offset),
                Err(e) => format!("error@{}", e.offset),
            })
            .collect();
        assert_eq!(kinds, ["psb@0", "error@16", "psb@19", "error@35"]);
        assert!(got[3].unwrap_err().kind.is_truncated());
    }

    #[test]
    fn reader_and_try_tnt_agree() {
        let mut d = PSB_BYTES.to_vec();
        d.extend_from_slice(&[0x04, 0x06, 0x7E, 0x00, 0x02, 0x23, 0xFE]);
        let s = TraceStream::linear(&d);
        let mut a = PacketReader::new(&s, 0, s.len(), Errata::default());
        let mut b = PacketReader::new(&s, 0, s.len(), Errata::default());
        while let Some(p) = a.next_packet() {
            let p = p.unwrap();
            match b.try_tnt() {
                Some((t, off)) => {
                    assert_eq!(p.packet, Packet::Tnt8(t));
                    assert_eq!(p.offset, off);
                }
                None => assert_eq!(b.next_packet(), Some(Ok(p))),
            }
        }
        assert_eq!(b.next_packet(), None);
    }

    /// Trace-like bytes: PSBs, PSBENDs, escapes, TNTs, IP packets, and random bytes.
    fn tracey() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just(PSB_BYTES.to_vec()),
            Just(vec![0x02, 0x23]),
            Just(vec![0x02, 0x82, 0x02, 0x82]),
            any::<u8>().prop_map(|b| vec![0x02, b]),
            any::<u8>().prop_map(|b| vec![b & !1]),
            (any::<u8>(), any::<u64>()).prop_map(|(h, v)| {
                let mut x = vec![(h & 0xE0) | 0x0D];
                x.extend_from_slice(&v.to_le_bytes());
                x
            }),
            any::<u8>().prop_map(|b| vec![b]),
        ];
        proptest::collection::vec(piece, 0..60).prop_map(|v| v.concat())
    }

    fn summary(s: &TraceStream<'_>, start: u64) -> Vec<(u64, Option<Packet>, u8)> {
        PacketReader::new(s, start, s.len(), Errata::default())
            .map(|r| match r {
                Ok(p) => (p.offset, Some(p.packet), p.size),
                Err(e) => (e.offset, None, 0),
            })
            .collect()
    }

    /// [`summary`] read the way the flow decoder reads: `try_tip`, then `try_tnt`, then
    /// `next_packet`, up to `end`.
    fn summary_hot(s: &TraceStream<'_>, end: u64) -> Vec<(u64, Option<Packet>, u8)> {
        let mut r = PacketReader::new(s, 0, end, Errata::default());
        let mut out = Vec::new();
        loop {
            let at = r.pos();
            if let Some((pl, off)) = r.try_tip() {
                out.push((off, Some(Packet::Tip(pl)), (r.pos() - at) as u8));
            } else if let Some((t, off)) = r.try_tnt() {
                out.push((off, Some(Packet::Tnt8(t)), 1));
            } else {
                match r.next_packet() {
                    None => return out,
                    Some(Ok(p)) => out.push((p.offset, Some(p.packet), p.size)),
                    Some(Err(e)) => out.push((e.offset, None, 0)),
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// SDM 36.4.2.2 (TIP) and 36.4.2.1 (TNT): the hot paths read exactly what the
        /// general reader reads — a TIP into a PSB, off the stream's end or with reserved
        /// IPBytes is left to `next_packet` — in a linear stream, a ring and a range that
        /// ends early.
        #[test]
        fn try_tip_and_try_tnt_read_what_next_packet_reads(d in tracey(), r in 0usize..1000, e in 0u64..1000) {
            let s = TraceStream::linear(&d);
            let end = if d.is_empty() { 0 } else { e % (d.len() as u64 + 1) };
            let general = |s: &TraceStream<'_>, end: u64| -> Vec<_> {
                PacketReader::new(s, 0, end, Errata::default())
                    .map(|r| match r {
                        Ok(p) => (p.offset, Some(p.packet), p.size),
                        Err(e) => (e.offset, None, 0),
                    })
                    .collect()
            };
            proptest::prop_assert_eq!(summary_hot(&s, s.len()), general(&s, s.len()));
            proptest::prop_assert_eq!(summary_hot(&s, end), general(&s, end));
            let r = if d.is_empty() { 0 } else { r % d.len() };
            let mut file = d[r..].to_vec();
            file.extend_from_slice(&d[..r]);
            let ring = TraceStream::ring(&file, d.len() - r);
            proptest::prop_assert_eq!(summary_hot(&ring, ring.len()), general(&ring, ring.len()));
        }

        /// Whatever the bytes: the reader ends, moves forward, never reads a packet
        /// across a PSB; reading from any PSB gives the same packets as reading from
        /// the start (chunks agree); and a ring rotation of the same stream reads the
        /// same.
        #[test]
        fn reader_is_total_chunk_independent_and_ring_agnostic(d in tracey(), r in 0usize..1000) {
            let s = TraceStream::linear(&d);
            let all = summary(&s, 0);
            let psbs = find_psbs(&s);
            let mut last = None;
            for &(off, ref p, size) in &all {
                proptest::prop_assert!(last.is_none_or(|l| off > l));
                last = Some(off);
                if p.is_some() {
                    let end = off + size as u64;
                    proptest::prop_assert!(end <= s.len());
                    proptest::prop_assert!(!psbs.iter().any(|&q| q > off && q < end));
                }
            }
            for &p in &psbs {
                let tail: Vec<_> = all.iter().filter(|x| x.0 >= p).cloned().collect();
                proptest::prop_assert_eq!(summary(&s, p), tail, "from PSB {}", p);
            }
            let r = if d.is_empty() { 0 } else { r % d.len() };
            let mut file = d[r..].to_vec();
            file.extend_from_slice(&d[..r]);
            let ring = TraceStream::ring(&file, d.len() - r);
            proptest::prop_assert_eq!(summary(&ring, 0), all);
        }
    }

    /// The reader looks for the next PSB a window at a time (`psb_ahead`): over streams
    /// longer than a window, with PSBs, runs of them and truncated packets placed on each
    /// side of the windows' edges, it reads every PSB `find_psbs` finds, where it finds
    /// it, and the same packets as readers started at each PSB (the chunks' readers).
    #[test]
    fn psbs_at_the_edges_of_the_readers_search_window_are_read_where_they_are() {
        use crate::psb_ahead::HORIZON;
        let h = HORIZON as usize;
        let mut d = vec![0u8; 4 * h + 100];
        d[..16].copy_from_slice(&PSB_BYTES);
        let mut put = |at: usize, bytes: &[u8]| d[at..at + bytes.len()].copy_from_slice(bytes);
        // PSBs ending just before, straddling and starting just after each edge; a run of
        // 02 82 pairs longer than a PSB across one; an MNT cut by a PSB across another.
        for at in [h - 16, h - 9, 2 * h - 40, 2 * h + 3] {
            put(at, &PSB_BYTES);
        }
        let mut run = Vec::new();
        for _ in 0..11 {
            run.extend_from_slice(&[0x02, 0x82]);
        }
        put(3 * h - 10, &run);
        put(4 * h - 20, &[0x02, 0xC3, 0x88]);
        put(4 * h - 17, &PSB_BYTES);
        let s = TraceStream::linear(&d);
        let psbs = find_psbs(&s);
        assert!(psbs.len() >= 6, "{psbs:?}");
        let whole: Vec<_> = PacketReader::new(&s, 0, s.len(), Errata::default()).collect();
        let read_psbs: Vec<u64> = whole
            .iter()
            .filter_map(|p| {
                p.as_ref()
                    .ok()
                    .filter(|p| p.packet == Packet::Psb)
                    .map(|p| p.offset)
            })
            .collect();
        assert_eq!(read_psbs, psbs);
        let mut chunked = Vec::new();
        for (i, &p) in psbs.iter().enumerate() {
            let end = psbs.get(i + 1).copied().unwrap_or(s.len());
            chunked.extend(PacketReader::new(&s, p, end, Errata::default()));
        }
        assert_eq!(whole, chunked);
    }
}
