//! Finding PSB packets: the only byte pattern that marks a packet boundary in an
//! unaligned stream (4.2.1: header 0xC0 and eight 0x00, more zeros than any payload holds).

use crate::packet::PSB_BYTES;
use crate::stream::TraceStream;

/// Every PSB in the stream, as sorted stream offsets. memchr's `memmem` does the search, so
/// this runs at memory speed; PSBs straddling a ring seam are found too.
pub fn find_psbs(stream: &TraceStream<'_>) -> Vec<u64> {
    let finder = memchr::memmem::Finder::new(&PSB_BYTES);
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

/// [`find_psbs`], reporting progress: `scanned(offset)` is called after the bytes before
/// `offset` are searched, every `step` bytes or so, so that a caller reading a memory map
/// can let those pages go (the search would otherwise make the whole trace resident).
pub fn find_psbs_stepwise(
    stream: &TraceStream<'_>,
    step: usize,
    mut scanned: impl FnMut(u64),
) -> Vec<u64> {
    let [(b0, p0), (_, p1)] = stream.parts();
    if !p1.is_empty() {
        // A ring dump: one buffer, small; no need to step.
        let out = find_psbs(stream);
        scanned(stream.len());
        return out;
    }
    let finder = memchr::memmem::Finder::new(&PSB_BYTES);
    let step = step.max(PSB_BYTES.len());
    let mut out = Vec::new();
    let mut at = 0;
    while at < p0.len() {
        let end = (at + step).min(p0.len());
        // Look a PSB's length past the window, and keep hits that start inside it.
        let look = (end + PSB_BYTES.len() - 1).min(p0.len());
        out.extend(
            finder
                .find_iter(&p0[at..look])
                .filter(|&i| at + i < end)
                .map(|i| b0 + (at + i) as u64),
        );
        at = end;
        scanned(b0 + at as u64);
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

    #[test]
    fn stepwise_search_finds_the_same_psbs_for_any_step() {
        let mut d = Vec::new();
        for i in 0..40u8 {
            d.extend(std::iter::repeat_n(i | 1, i as usize % 7));
            d.extend_from_slice(&PSB_BYTES);
        }
        let s = TraceStream::linear(&d);
        let all = find_psbs(&s);
        assert_eq!(all.len(), 40);
        for step in [1, 5, 9, 10, 17, 64, 1 << 20] {
            let mut seen = Vec::new();
            assert_eq!(
                find_psbs_stepwise(&s, step, |o| seen.push(o)),
                all,
                "step {step}"
            );
            assert_eq!(seen.last().copied(), Some(d.len() as u64));
            assert!(seen.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn zero_runs_before_psb_do_not_shift_it() {
        let mut d = vec![0u8; 5];
        d.extend_from_slice(&PSB_BYTES);
        assert_eq!(find_psbs(&TraceStream::linear(&d)), vec![5]);
    }
}
