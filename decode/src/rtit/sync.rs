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

/// Every PSB in the stream, as sorted stream offsets. memchr's `memmem` does the search, so
/// this runs at memory speed; PSBs straddling a ring seam are found too.
pub fn find_psbs(stream: &TraceStream<'_>) -> Vec<u64> {
    let finder = finder();
    let mut out = Vec::new();
    let [(b0, p0), (b1, p1)] = stream.parts();
    out.extend(finder.find_iter(p0).map(|i| b0 + i as u64));
    if !p1.is_empty() {
        // A PSB may straddle the seam: check the last 8 bytes of the first part.
        let tail = p0.len().saturating_sub(PSB_BYTES.len() - 1);
        let mut seam = Vec::with_capacity(2 * PSB_BYTES.len());
        seam.extend_from_slice(&p0[tail..]);
        seam.extend_from_slice(&p1[..p1.len().min(PSB_BYTES.len() - 1)]);
        let seam_hits = finder.find_iter(&seam).map(|i| b0 + (tail + i) as u64);
        out.extend(seam_hits.filter(|&o| o + PSB_BYTES.len() as u64 > b1));
        out.extend(finder.find_iter(p1).map(|i| b1 + i as u64));
    }
    out.sort_unstable();
    out.dedup();
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
