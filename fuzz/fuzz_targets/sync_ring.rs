//! PSB sync over ring dumps: a `TraceStream::ring` cut at any offset must behave exactly
//! like the rotated bytes laid out linearly (`to_vec`): same bytes through `byte` and
//! `window`, same PSBs from `find_psbs` (including PSBs straddling the seam), same packets
//! from a `PacketReader`, with and without Cycle_Acc.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracemill_decode::packet::PacketReader;
use tracemill_decode::stream::TraceStream;
use tracemill_decode::sync::find_psbs;

fuzz_target!(|input: &[u8]| {
    // Bytes 0..2: the ring offset (RTIT_OFFSET), may exceed the length; 2..4: where
    // `window` is probed; the rest: the dump.
    if input.len() < 4 {
        return;
    }
    let off = u16::from_le_bytes([input[0], input[1]]) as usize;
    let probe = u16::from_le_bytes([input[2], input[3]]) as u64;
    let data = &input[4..];
    let ring = TraceStream::ring(data, off);
    let len = ring.len();
    assert_eq!(len, data.len() as u64);
    let rotated = ring.to_vec(0, len);
    let r = off.min(data.len());
    assert_eq!(&rotated[..data.len() - r], &data[r..]);
    assert_eq!(&rotated[data.len() - r..], &data[..r]);
    let linear = TraceStream::linear(&rotated);

    let psbs = find_psbs(&ring);
    assert_eq!(psbs, find_psbs(&linear), "PSBs of the ring and of its rotated copy");

    let mut scratch = [0u8; 16];
    for n in [0usize, 1, 2, 9, 16] {
        let p = probe % (len + 1);
        let got = ring.window(p, n, &mut scratch).to_vec();
        let end = (p + n as u64).min(len) as usize;
        assert_eq!(got, &rotated[p as usize..end], "window({p}, {n})");
    }

    for cycle_acc in [false, true] {
        let start = psbs.first().copied().unwrap_or(0);
        let a: Vec<_> = PacketReader::new(&ring, start, len, &psbs, cycle_acc).collect();
        let b: Vec<_> = PacketReader::new(&linear, start, len, &psbs, cycle_acc).collect();
        assert_eq!(a, b, "packets of the ring and of its rotated copy");
    }
});
