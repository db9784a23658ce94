//! Packet layer: `PacketReader` over arbitrary bytes, with and without Cycle_Acc.
//!
//! - every packet read re-encodes (with the independent encoder of `datasets`) to exactly
//!   the bytes it was read from, and `parse_one` on those bytes agrees;
//! - the reader always advances, packets tile the stream, and after an error it resumes
//!   at the next PSB (or the end);
//! - every PSB `find_psbs` reports is read as a PSB packet, wherever reading starts;
//! - the TNT fast path (`try_tnt`) agrees with `next_packet`;
//! - reading in two ranges (cut anywhere, as chunking does) reads the same packets.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracemill_fuzz::encode::write_packet;
use tracemill_decode::packet::{parse_one, Packet, PacketReader, Parsed, PSB_BYTES};
use tracemill_decode::stream::TraceStream;
use tracemill_decode::sync::find_psbs;

type Item = Result<Parsed, tracemill_decode::PacketError>;

fn read_all(r: &mut PacketReader<'_>, fast: bool) -> Vec<Item> {
    let mut out = Vec::new();
    let mut last = r.pos();
    loop {
        let item = if fast {
            match r.try_tnt() {
                Some((t, off)) => Some(Ok(Parsed {
                    offset: off,
                    size: 1,
                    packet: Packet::Tnt(t),
                })),
                None => r.next_packet(),
            }
        } else {
            r.next_packet()
        };
        let Some(item) = item else { break };
        assert!(r.pos() > last, "reader did not advance at {last}");
        last = r.pos();
        out.push(item);
    }
    out
}

fn check(data: &[u8], start: u64, cycle_acc: bool) {
    let stream = TraceStream::linear(data);
    let psbs = find_psbs(&stream);
    let len = stream.len();
    let items = read_all(&mut PacketReader::new(&stream, start, len, &psbs, cycle_acc), false);

    let mut pos = start;
    let mut want_cyc = false;
    let mut seen_psbs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Ok(p) => {
                assert_eq!(p.offset, pos, "packet {i} does not start where the last ended");
                assert!(p.size > 0);
                let end = p.offset + p.size as u64;
                assert!(end <= len, "packet {i} runs past the stream");
                let bytes = &data[p.offset as usize..end as usize];
                if p.packet == Packet::Psb {
                    assert_eq!(bytes, PSB_BYTES);
                    seen_psbs.push(p.offset);
                } else {
                    assert_eq!(
                        parse_one(bytes, want_cyc),
                        Ok((p.packet, p.size)),
                        "packet {i} reparses"
                    );
                    // No packet but a PSB may run into a PSB.
                    let next_psb = psbs.iter().copied().find(|&q| q >= p.offset);
                    assert!(next_psb.is_none_or(|q| q >= end), "packet {i} overlaps a PSB");
                }
                let mut enc = Vec::new();
                write_packet(&mut enc, &p.packet);
                assert_eq!(enc, bytes, "packet {i} {:?} does not round-trip", p.packet);
                want_cyc = cycle_acc && p.packet.takes_cyc();
                pos = end;
            }
            Err(e) => {
                assert_eq!(e.offset, pos, "error {i} is not where the last packet ended");
                let _ = e.to_string();
                // Resume at the next PSB strictly after the error, or the end.
                pos = psbs.iter().copied().find(|&q| q > e.offset).unwrap_or(len);
                want_cyc = false;
                if let Some(Ok(n)) = items.get(i + 1) {
                    assert_eq!(n.offset, pos, "after error {i}: resumes at the next PSB");
                }
            }
        }
    }
    assert!(pos >= len, "reading stopped at {pos} of {len}");
    let expect: Vec<u64> = psbs.iter().copied().filter(|&q| q >= start).collect();
    assert_eq!(seen_psbs, expect, "every PSB is read as a PSB");

    // The TNT fast path reads the same packets.
    let fast = read_all(&mut PacketReader::new(&stream, start, len, &psbs, cycle_acc), true);
    assert_eq!(fast, items, "try_tnt disagrees with next_packet");

    // Cut the range at any packet boundary: two readers (the second resuming with the
    // first's cursor state, as a walker snapshot does) read the same packets.
    if items.len() > 1 {
        let cut = items.len() / 2;
        let mut r1 = PacketReader::new(&stream, start, len, &psbs, cycle_acc);
        let mut first = Vec::new();
        for _ in 0..cut {
            first.push(r1.next_packet().expect("as many packets as before"));
        }
        let (at, wc) = (r1.pos(), r1.wants_cyc());
        let mut r2 = PacketReader::new(&stream, start, len, &psbs, cycle_acc);
        r2.seek(at, wc);
        first.extend(read_all(&mut r2, false));
        assert_eq!(first, items, "a reader resumed by seek reads the same packets");
    }
}

fuzz_target!(|data: &[u8]| {
    for cycle_acc in [false, true] {
        check(data, 0, cycle_acc);
        let psbs = find_psbs(&TraceStream::linear(data));
        if let Some(&p) = psbs.first() {
            if p != 0 {
                check(data, p, cycle_acc);
            }
        }
    }
});
