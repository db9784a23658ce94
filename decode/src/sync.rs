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
    fn zero_runs_before_psb_do_not_shift_it() {
        let mut d = vec![0u8; 5];
        d.extend_from_slice(&PSB_BYTES);
        assert_eq!(find_psbs(&TraceStream::linear(&d)), vec![5]);
    }
}
