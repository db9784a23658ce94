//! The trace bytes in time order, without copying them.
//!
//! A plain trace is one slice. A dump of the circular output buffer (spec 2.3: writes wrap
//! to offset 0 once the offset reaches the mask) is two: `data[ring_offset..]` (oldest)
//! followed by `data[..ring_offset]` (newest). A perf.data AUX area is many: its AUXTRACE
//! buffers, each a range of the recording's bytes, in AUX order ([`TraceStream::spans`]);
//! they are read where they lie in the file, so decoding an area of gigabytes holds no
//! copy of it. Offsets everywhere in tracemill are stream offsets, i.e. positions in this
//! time-ordered view; for a ring dump, stream offset `s` is file offset
//! `(s + ring_offset) % len`.
//!
//! A packet or a PSB pattern may straddle the edge between two parts: [`TraceStream::window`]
//! copies those few bytes into the caller's scratch, and [`TraceStream::find`] searches
//! each edge's bytes on their own.

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

/// One part of a stream made of ranges of one buffer ([`TraceStream::spans`]): `len`
/// bytes at `data[from..]`, at stream offset `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub at: u64,
    pub from: usize,
    pub len: usize,
}

/// Trace bytes lost right before stream offset `at`, where a PSB starts: a perf.data AUX
/// area whose buffers skip bytes (perf could not keep up, or a snapshot overwrote them)
/// or whose AUX record says the data was cut (truncated). The bytes
/// before `at` and after it are joined in the stream, but no packet runs across: a
/// decode reports an error at `at` (its `events` row says what was lost), drops what it
/// had not proved, and reads on from the PSB there. The front end of the format says so
/// ([`crate::pt::front`]); look-aheads stop at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Break {
    pub at: u64,
    pub lost: Lost,
}

/// What a [`Break`] lost, and where the recording says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// AUX bytes `from..to` were in no AUXTRACE record (the one at file offset `record`
    /// starts after them); the bytes after them up to the next PSB are skipped too.
    Missing { from: u64, to: u64, record: u64 },
    /// A snapshot recording's AUX bytes `from..to` were written over in the ring before
    /// the snapshot at file offset `record` was taken.
    Overwritten { from: u64, to: u64, record: u64 },
    /// The AUX record at file offset `record` says the trace was truncated at AUX offset
    /// `at` (the AUX area was full); the bytes after that up to the next PSB are skipped.
    Truncated { at: u64, record: u64 },
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Lost::Missing { from, to, record } => write!(
                f,
                "trace lost before this PSB: AUX bytes {from:#x}..{to:#x} are in no AUXTRACE \
                 record (the one at file offset {record:#x} starts after them)"
            ),
            Lost::Overwritten { from, to, record } => write!(
                f,
                "trace lost before this PSB: AUX bytes {from:#x}..{to:#x} were overwritten \
                 before the snapshot at file offset {record:#x} was taken"
            ),
            Lost::Truncated { at, record } => write!(
                f,
                "trace lost before this PSB: the AUX record at file offset {record:#x} says \
                 the data was truncated at AUX offset {at:#x}"
            ),
        }
    }
}

/// Time-ordered view of trace bytes: borrowed parts, in order.
#[derive(Clone, Copy, Debug)]
pub struct TraceStream<'a> {
    /// The first part (the whole of a linear trace).
    first: &'a [u8],
    rest: Rest<'a>,
    len: u64,
    /// Where bytes were lost, in stream order ([`Break`]).
    breaks: &'a [Break],
}

/// The parts after the first.
#[derive(Clone, Copy, Debug)]
enum Rest<'a> {
    /// None, or a ring dump's newer part.
    One(&'a [u8]),
    /// Ranges of `data`, the first of them at stream offset `first.len()`.
    Spans { data: &'a [u8], spans: &'a [Span] },
}

impl<'a> TraceStream<'a> {
    /// A trace that was written front to back.
    pub fn linear(data: &'a [u8]) -> Self {
        TraceStream {
            first: data,
            rest: Rest::One(&[]),
            len: data.len() as u64,
            breaks: &[],
        }
    }

    /// A circular-buffer dump; `ring_offset` is RTIT_OFFSET read after tracing stopped,
    /// i.e. where the next byte would have gone, so the oldest byte sits there.
    pub fn ring(data: &'a [u8], ring_offset: usize) -> Self {
        let r = ring_offset.min(data.len());
        TraceStream {
            first: &data[r..],
            rest: Rest::One(&data[..r]),
            len: data.len() as u64,
            breaks: &[],
        }
    }

    /// The ranges `spans` of `data` one after the other. Each span must lie in `data`,
    /// start where the one before it ends (`at`), and the first at 0; [`Self::check_spans`]
    /// says whether they do. Empty spans are allowed.
    pub fn spans(data: &'a [u8], spans: &'a [Span]) -> Self {
        debug_assert!(Self::check_spans(data.len(), spans));
        let Some((s0, rest)) = spans.split_first() else {
            return Self::linear(&[]);
        };
        let len = spans.last().map_or(0, |s| s.at + s.len as u64);
        TraceStream {
            first: &data[s0.from..s0.from + s0.len],
            rest: Rest::Spans { data, spans: rest },
            len,
            breaks: &[],
        }
    }

    /// This stream with bytes lost before each of `breaks` (in order of `at`, each at a
    /// PSB).
    pub fn with_breaks(mut self, breaks: &'a [Break]) -> Self {
        debug_assert!(breaks.windows(2).all(|w| w[0].at < w[1].at));
        self.breaks = breaks;
        self
    }

    /// The break at `pos`, if bytes were lost right before it.
    #[inline]
    pub fn break_at(&self, pos: u64) -> Option<&'a Break> {
        if self.breaks.is_empty() {
            return None;
        }
        let i = self.breaks.partition_point(|b| b.at < pos);
        self.breaks.get(i).filter(|b| b.at == pos)
    }

    /// The first break at or after `pos`: where a look-ahead from `pos` stops (a reader
    /// at a break has read up to the lost bytes; what follows them is not its to read).
    #[inline]
    pub fn break_after(&self, pos: u64) -> Option<u64> {
        if self.breaks.is_empty() {
            return None;
        }
        let i = self.breaks.partition_point(|b| b.at < pos);
        self.breaks.get(i).map(|b| b.at)
    }

    /// Whether `spans` describe a stream of a buffer of `len` bytes (see [`Self::spans`]).
    pub fn check_spans(len: usize, spans: &[Span]) -> bool {
        let mut at = 0;
        spans.iter().all(|s| {
            let ok = s.at == at && s.from.checked_add(s.len).is_some_and(|e| e <= len);
            at = s.at + s.len as u64;
            ok
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The stream's parts in order, each with its stream offset (for scans such as the
    /// PSB search).
    pub fn parts(&self) -> impl Iterator<Item = (u64, &'a [u8])> + 'a {
        let first = std::iter::once((0, self.first));
        let (one, spans) = match self.rest {
            Rest::One(s) => (Some((self.first.len() as u64, s)), None),
            Rest::Spans { data, spans } => (
                None,
                Some(
                    spans
                        .iter()
                        .map(move |s| (s.at, &data[s.from..s.from + s.len])),
                ),
            ),
        };
        first
            .chain(one)
            .chain(spans.into_iter().flatten())
            .filter(|(_, p)| !p.is_empty())
    }

    /// The part holding stream offset `pos`, with its stream offset; `None` past the end.
    #[inline]
    pub fn part_at(&self, pos: u64) -> Option<(u64, &'a [u8])> {
        if pos < self.first.len() as u64 {
            return Some((0, self.first));
        }
        if pos >= self.len {
            return None;
        }
        match self.rest {
            Rest::One(s) => Some((self.first.len() as u64, s)),
            Rest::Spans { data, spans } => {
                // The last span starting at or before `pos` that is not empty.
                let i = spans.partition_point(|s| s.at <= pos);
                let s = spans[..i].iter().rev().find(|s| s.len > 0)?;
                Some((s.at, &data[s.from..s.from + s.len]))
            }
        }
    }

    /// The first place in `from..to` where `finder`'s pattern starts (searching at most the
    /// bytes up to `to` plus the pattern's length less one), across the parts' edges too.
    /// The PSB searches of both formats (`crate::sync`, `crate::pt::sync`) use it; patterns
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
        let mut hit = None;
        let mut pos = from;
        while pos < end && hit.is_none() {
            let Some((at, part)) = self.part_at(pos) else {
                break;
            };
            let part_end = at + part.len() as u64;
            let stop = end.min(part_end);
            hit = finder
                .find(&part[(pos - at) as usize..(stop - at) as usize])
                .map(|k| pos + k as u64);
            if hit.is_none() && stop < end {
                // A match may straddle the edge: it starts in the last n - 1 bytes before
                // it (none starts wholly before: the search above would have found it).
                let tail = part_end.saturating_sub(n - 1).max(pos);
                let mut seam = [0u8; 64];
                let w = self.window(
                    tail,
                    ((end - tail) as usize).min(2 * n as usize - 2),
                    &mut seam,
                );
                hit = finder
                    .find(w)
                    .map(|k| tail + k as u64)
                    .filter(|&h| h < part_end);
            }
            pos = stop;
        }
        SEARCHED.with(|c| c.set(c.get() + hit.map_or(end, |h| h + n).min(end) - from));
        hit.filter(|&h| h < to)
    }

    /// Byte at stream offset `pos`.
    #[inline]
    pub fn byte(&self, pos: u64) -> Option<u8> {
        let p = pos as usize;
        if p < self.first.len() {
            Some(self.first[p])
        } else {
            let (at, part) = self.part_at(pos)?;
            part.get((pos - at) as usize).copied()
        }
    }

    /// Up to `n` bytes starting at `pos`. Borrowed from the stream when they are
    /// contiguous (always, for a linear trace); copied into `scratch` when they straddle
    /// parts. `n` must not exceed `scratch.len()`.
    #[inline]
    pub fn window<'s>(&'s self, pos: u64, n: usize, scratch: &'s mut [u8]) -> &'s [u8] {
        let p = pos as usize;
        if p + n <= self.first.len() {
            return &self.first[p..p + n];
        }
        let Some((at, part)) = self.part_at(pos) else {
            return &[];
        };
        let i = (pos - at) as usize;
        if i + n <= part.len() {
            return &part[i..i + n];
        }
        let got = self.copy_to(pos, &mut scratch[..n]);
        &scratch[..got]
    }

    /// Copy the bytes from `pos` into `dst`, across parts, up to its length or the
    /// stream's end: how many were copied.
    fn copy_to(&self, pos: u64, dst: &mut [u8]) -> usize {
        let mut got = 0;
        while got < dst.len() {
            let Some((at, part)) = self.part_at(pos + got as u64) else {
                break;
            };
            let i = (pos + got as u64 - at) as usize;
            let k = (part.len() - i).min(dst.len() - got);
            dst[got..got + k].copy_from_slice(&part[i..i + k]);
            got += k;
        }
        got
    }

    /// Copy of a stream range (for tests and small tools; the decoder never copies).
    pub fn to_vec(&self, start: u64, end: u64) -> Vec<u8> {
        let mut out = vec![0; end.min(self.len).saturating_sub(start) as usize];
        let got = self.copy_to(start, &mut out);
        out.truncate(got);
        out
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

    /// `data` cut into spans at `cuts` (a cut given twice makes an empty span), stored
    /// back to front with a byte of junk before each: the stream is the pieces in order.
    fn scattered(data: &[u8], cuts: &[usize]) -> (Vec<u8>, Vec<Span>) {
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied().filter(|&c| c < data.len()));
        bounds.push(data.len());
        bounds.sort_unstable();
        // Pieces stored back to front, with a byte of junk between, as AUXTRACE records
        // lie between sideband in a perf.data.
        let mut file = Vec::new();
        let mut spans = Vec::new();
        for w in bounds.windows(2).rev() {
            file.push(0xEE);
            spans.push(Span {
                at: w[0] as u64,
                from: file.len(),
                len: w[1] - w[0],
            });
            file.extend_from_slice(&data[w[0]..w[1]]);
        }
        spans.reverse();
        (file, spans)
    }

    #[test]
    fn spans_read_as_the_bytes_they_join_across_every_edge() {
        let data: Vec<u8> = (0..200u8).collect();
        for cuts in [vec![], vec![1], vec![7, 8, 9, 100], vec![3, 3, 50, 51, 199]] {
            let (file, spans) = scattered(&data, &cuts);
            assert!(TraceStream::check_spans(file.len(), &spans));
            let s = TraceStream::spans(&file, &spans);
            assert_eq!(s.len(), 200);
            assert_eq!(s.to_vec(0, 200), data);
            let mut scratch = [0u8; 16];
            for pos in 0..205u64 {
                assert_eq!(s.byte(pos), data.get(pos as usize).copied(), "byte {pos}");
                let want = &data[(pos as usize).min(200)..(pos as usize + 16).min(200)];
                assert_eq!(s.window(pos, 16, &mut scratch), want, "window at {pos}");
            }
            let joined: Vec<u8> = s.parts().flat_map(|(_, p)| p.to_vec()).collect();
            assert_eq!(joined, data);
        }
    }

    #[test]
    fn a_pattern_straddling_any_span_edge_is_found_where_the_joined_bytes_have_it() {
        let pattern = [0x02u8, 0x82, 0x02, 0x82, 0x02, 0x82];
        let finder = memchr::memmem::Finder::new(&pattern);
        let mut data = vec![0u8; 64];
        data[20..26].copy_from_slice(&pattern);
        data[40..46].copy_from_slice(&pattern);
        let plain = TraceStream::linear(&data);
        // Every cut through and around both patterns, one and two at a time.
        for a in 15..50 {
            for b in [a, a + 1, a + 2, a + 4] {
                let (file, spans) = scattered(&data, &[a, b]);
                let s = TraceStream::spans(&file, &spans);
                for from in [0, 19, 20, 21, 30, 40, 41] {
                    for to in [21, 26, 40, 41, 64] {
                        assert_eq!(
                            s.find(&finder, from, to),
                            plain.find(&finder, from, to),
                            "cuts {a},{b}: from {from} to {to}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn spans_that_do_not_join_are_refused() {
        let span = |at, from, len| Span { at, from, len };
        assert!(TraceStream::check_spans(
            10,
            &[span(0, 5, 5), span(5, 0, 5)]
        ));
        assert!(!TraceStream::check_spans(10, &[span(0, 5, 6)]));
        assert!(!TraceStream::check_spans(10, &[span(1, 0, 5)]));
        assert!(!TraceStream::check_spans(
            10,
            &[span(0, 0, 5), span(6, 5, 1)]
        ));
        assert!(TraceStream::spans(&[], &[]).is_empty());
    }
}
