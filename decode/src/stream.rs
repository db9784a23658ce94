//! The trace bytes in time order, without copying them.
//!
//! A plain trace is one slice. A dump of the circular output buffer (spec 2.3: writes wrap
//! to offset 0 once the offset reaches the mask) is two: `data[ring_offset..]` (oldest)
//! followed by `data[..ring_offset]` (newest). Offsets everywhere in tracemill are stream
//! offsets, i.e. positions in this time-ordered view; for a ring dump, stream offset `s`
//! is file offset `(s + ring_offset) % len`.

thread_local! {
    static SEARCHED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Bytes the PSB searches ([`TraceStream::find`]) have scanned on this thread so far. A
/// test and the fuzz targets compare it with the trace's length: a decode that searches
/// again from where it looked ahead, on to the next PSB each time, is quadratic in a long
/// stretch without PSBs (Intel PT OVFs back to back took 353 s for 4 MiB).
pub fn bytes_searched_on_this_thread() -> u64 {
    SEARCHED.with(|c| c.get())
}

/// Time-ordered view of trace bytes: up to two borrowed parts.
#[derive(Clone, Copy, Debug)]
pub struct TraceStream<'a> {
    first: &'a [u8],
    second: &'a [u8],
}

impl<'a> TraceStream<'a> {
    /// A trace that was written front to back.
    pub fn linear(data: &'a [u8]) -> Self {
        TraceStream {
            first: data,
            second: &[],
        }
    }

    /// A circular-buffer dump; `ring_offset` is RTIT_OFFSET read after tracing stopped,
    /// i.e. where the next byte would have gone, so the oldest byte sits there.
    pub fn ring(data: &'a [u8], ring_offset: usize) -> Self {
        let r = ring_offset.min(data.len());
        TraceStream {
            first: &data[r..],
            second: &data[..r],
        }
    }

    pub fn len(&self) -> u64 {
        (self.first.len() + self.second.len()) as u64
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stream's parts in order (for scans such as the PSB search).
    pub fn parts(&self) -> [(u64, &'a [u8]); 2] {
        [(0, self.first), (self.first.len() as u64, self.second)]
    }

    /// The first place in `from..to` where `finder`'s pattern starts (searching at most the
    /// bytes up to `to` plus the pattern's length less one), across the ring seam too. The
    /// PSB searches of both formats (`crate::sync`, `crate::pt::sync`) use it; patterns
    /// are at most 32 bytes (a PSB is 9 or 16).
    pub fn find(&self, finder: &memchr::memmem::Finder<'_>, from: u64, to: u64) -> Option<u64> {
        let n = finder.needle().len() as u64;
        debug_assert!((1..=32).contains(&n));
        let to = to.min(self.len());
        if from >= to {
            return None;
        }
        // A match starting before `to` ends by `end`.
        let end = (to + n - 1).min(self.len());
        let [(_, p0), (b1, p1)] = self.parts();
        let mut hit = None;
        if from < b1 {
            let i = from as usize;
            hit = finder
                .find(&p0[i..end.min(b1) as usize])
                .map(|k| from + k as u64);
            if hit.is_none() && end > b1 {
                // A match may straddle the seam: it starts in the last n - 1 bytes of the
                // first part (none starts wholly there: the search above would have found it).
                let tail = (b1 as usize).saturating_sub(n as usize - 1).max(i);
                let mut seam = [0u8; 64];
                let a = b1 as usize - tail;
                let b = p1.len().min(n as usize - 1).min((end - b1) as usize);
                seam[..a].copy_from_slice(&p0[tail..]);
                seam[a..a + b].copy_from_slice(&p1[..b]);
                hit = finder.find(&seam[..a + b]).map(|k| (tail + k) as u64);
            }
        }
        if hit.is_none() {
            let start = from.max(b1);
            if start < end {
                let (i, e) = ((start - b1) as usize, (end - b1) as usize);
                hit = finder.find(&p1[i..e]).map(|k| start + k as u64);
            }
        }
        SEARCHED.with(|c| c.set(c.get() + hit.map_or(end, |h| h + n).min(end) - from));
        hit.filter(|&h| h < to)
    }

    /// Byte at stream offset `pos`.
    pub fn byte(&self, pos: u64) -> Option<u8> {
        let p = pos as usize;
        if p < self.first.len() {
            Some(self.first[p])
        } else {
            self.second.get(p - self.first.len()).copied()
        }
    }

    /// Up to `n` bytes starting at `pos`. Borrowed from the stream when they are
    /// contiguous (always, for a linear trace); copied into `scratch` when they straddle
    /// the ring seam. `n` must not exceed `scratch.len()`.
    #[inline]
    pub fn window<'s>(&'s self, pos: u64, n: usize, scratch: &'s mut [u8]) -> &'s [u8] {
        let p = pos as usize;
        let f = self.first.len();
        if p + n <= f {
            return &self.first[p..p + n];
        }
        if p >= f {
            let q = p - f;
            let e = (q + n).min(self.second.len());
            return &self.second[q.min(e)..e];
        }
        let a = f - p;
        scratch[..a].copy_from_slice(&self.first[p..]);
        let b = (n - a).min(self.second.len());
        scratch[a..a + b].copy_from_slice(&self.second[..b]);
        &scratch[..a + b]
    }

    /// Copy of a stream range (for tests and small tools; the decoder never copies).
    pub fn to_vec(&self, start: u64, end: u64) -> Vec<u8> {
        (start..end).filter_map(|p| self.byte(p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_rotates_into_time_order() {
        let data = [5u8, 6, 7, 1, 2, 3, 4];
        let s = TraceStream::ring(&data, 3);
        assert_eq!(s.to_vec(0, 7), vec![1, 2, 3, 4, 5, 6, 7]);
        let mut scratch = [0u8; 16];
        assert_eq!(s.window(2, 4, &mut scratch), &[3, 4, 5, 6]);
        assert_eq!(s.window(5, 4, &mut scratch), &[6, 7]);
        assert_eq!(s.window(0, 3, &mut scratch), &[1, 2, 3]);
    }
}
