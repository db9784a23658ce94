//! Finding PSB packets: the only byte pattern that marks a packet boundary in an
//! unaligned stream (4.2.1: header 0xC0 and eight 0x00, more zeros than any payload holds).

use std::sync::OnceLock;

use super::packet::PSB_BYTES;
use crate::stream::TraceStream;

fn finder() -> &'static memchr::memmem::Finder<'static> {
    static F: OnceLock<memchr::memmem::Finder<'static>> = OnceLock::new();
    F.get_or_init(|| memchr::memmem::Finder::new(&PSB_BYTES))
}

/// The first PSB that starts at or after stream offset `from` (the same as the first of
/// [`find_psbs`] at or after it). Costs a search up to that PSB only, so readers find PSBs
/// as they go and no list of every PSB, which would grow with the trace (a damaged trace
/// can be PSBs back to back), is ever held.
pub fn next_psb(stream: &TraceStream<'_>, from: u64) -> Option<u64> {
    next_psb_before(stream, from, u64::MAX)
}

/// The first PSB that starts in `from..to`; reads at most the bytes up to `to` plus a
/// PSB's length (so a caller can search a long stretch in steps).
pub fn next_psb_before(stream: &TraceStream<'_>, from: u64, to: u64) -> Option<u64> {
    stream.find(finder(), from, to)
}

/// Every PSB in the stream, as sorted stream offsets (for tools and tests; decoding asks
/// for the next one as it goes). memchr's `memmem` does the search, so this runs at
/// memory speed; PSBs straddling the edge between two parts of the stream are found too.
pub fn find_psbs(stream: &TraceStream<'_>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = next_psb(stream, from) {
        out.push(p);
        from = p + PSB_BYTES.len() as u64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_psbs_in_linear_and_across_ring_seam() {
        let mut d = vec![0x02u8, 0x03];
        d.extend_from_slice(&PSB_BYTES);
        d.push(0x02);
        d.extend_from_slice(&PSB_BYTES);
        assert_eq!(find_psbs(&TraceStream::linear(&d)), vec![2, 12]);
        // Rotate so that the second PSB straddles the seam.
        let r = 15;
        let mut file = d[d.len() - (d.len() - r)..].to_vec();
        file.extend_from_slice(&d[..r]);
        let s = TraceStream::ring(&file, d.len() - r);
        assert_eq!(s.to_vec(0, s.len()), d);
        assert_eq!(find_psbs(&s), vec![2, 12]);
    }

    /// `next_psb` from every offset agrees with the full list, in a linear stream and in
    /// every rotation of it as a ring (PSBs across the seam included).
    #[test]
    fn next_psb_from_any_offset_agrees_with_the_full_search() {
        let mut d = Vec::new();
        for i in 0..12u8 {
            d.extend(std::iter::repeat_n(i | 1, i as usize % 5));
            d.extend_from_slice(&PSB_BYTES);
        }
        d.extend_from_slice(&[0xC0, 0, 0, 0]);
        for r in 0..d.len() {
            let s = TraceStream::ring(&d, r);
            let all = find_psbs(&s);
            for from in 0..=s.len() + 1 {
                let want = all.iter().copied().find(|&p| p >= from);
                assert_eq!(next_psb(&s, from), want, "ring offset {r}, from {from}");
                for to in from..=s.len() + 1 {
                    let want = want.filter(|&p| p < to);
                    let got = next_psb_before(&s, from, to);
                    assert_eq!(got, want, "ring offset {r}, from {from} to {to}");
                }
            }
        }
    }

    #[test]
    fn zero_runs_before_psb_do_not_shift_it() {
        let mut d = vec![0u8; 5];
        d.extend_from_slice(&PSB_BYTES);
        assert_eq!(find_psbs(&TraceStream::linear(&d)), vec![5]);
    }
}
