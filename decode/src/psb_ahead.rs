//! Where the next PSB is, for a packet reader moving through a stream.
//!
//! Both formats' readers end every packet at the next PSB (a packet that would run into
//! one is truncated), so each asks before every packet where the first PSB at or after
//! it is. The answer is remembered, and searched for a window at a time,
//! [`HORIZON`] bytes ahead of the reader, not on to the next PSB however far it is: in a
//! trace without PSBs the first packet's question searched the whole rest of the trace,
//! which mapped every page of it in at once (RssFile 805 MiB a few seconds into a 1 GB
//! Intel PT trace with one PSB), while the decode releases pages only behind itself.

/// How far ahead of the reader one search looks.
pub const HORIZON: u64 = 1 << 20;

/// A position closer than this to the end of the window searched asks again: no packet
/// of either format is longer, so "no PSB in the window" answers for the whole packet.
const MARGIN: u64 = 32;

/// The reader's knowledge of the next PSB.
#[derive(Clone, Copy, Debug)]
pub struct PsbAhead {
    /// The first PSB at or after `from`; `None`: none starts in `from..to`.
    next: Option<u64>,
    /// `u64::MAX`: nothing searched yet.
    from: u64,
    to: u64,
}

impl Default for PsbAhead {
    fn default() -> Self {
        Self::new()
    }
}

impl PsbAhead {
    pub const fn new() -> Self {
        PsbAhead {
            next: None,
            from: u64::MAX,
            to: 0,
        }
    }

    /// The first PSB at or after `pos` in a stream of `len` bytes; `None` when none
    /// starts in the next [`MARGIN`] bytes at least ([`Self::resume_at`] finds the next one
    /// wherever it is). `first_in(from, to)` is the format's search for the first PSB
    /// starting in `from..to`; `back(from, to)`, for a reader gone back before what was
    /// searched, the one starting in `from..to` where `to` is the old start (a PSB known
    /// from there stays the answer when it finds none).
    #[inline]
    pub fn near(
        &mut self,
        pos: u64,
        len: u64,
        first_in: impl FnOnce(u64, u64) -> Option<u64>,
        back: impl FnOnce(u64, u64) -> Option<u64>,
    ) -> Option<u64> {
        if self.from != u64::MAX && pos < self.from {
            // A look-ahead undone: only the bytes up to what is known are searched again
            // (searching on each time made long stretches quadratic).
            if let Some(p) = back(pos, self.from) {
                self.next = Some(p);
            }
            self.from = pos;
        } else if self.from > pos
            || match self.next {
                Some(p) => p < pos,
                None => pos.saturating_add(MARGIN) > self.to && self.to < len,
            }
        {
            let to = pos.saturating_add(HORIZON).min(len);
            self.next = first_in(pos, to);
            self.from = pos;
            self.to = to;
        }
        self.next
    }

    /// Where a reader resumes after an error: the PSB [`Self::near`] just answered
    /// (`near`), else the next one however far (`search`, unless that `None` held to the
    /// stream's end, `len`), else the end.
    pub fn resume_at(
        &self,
        near: Option<u64>,
        len: u64,
        search: impl FnOnce() -> Option<u64>,
    ) -> u64 {
        near.or_else(|| if self.to >= len { None } else { search() })
            .unwrap_or(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of `len` bytes whose PSBs start at `psbs`: the searches the readers give.
    fn searches(psbs: &[u64]) -> impl Fn(u64, u64) -> Option<u64> + '_ {
        move |from, to| psbs.iter().copied().find(|&p| p >= from && p < to)
    }

    #[test]
    fn a_stream_without_psbs_is_searched_a_window_at_a_time() {
        let len = 10 * HORIZON;
        let searched = std::cell::RefCell::new(Vec::new());
        let first_in = |from: u64, to: u64| {
            searched.borrow_mut().push((from, to));
            None
        };
        let mut a = PsbAhead::new();
        let mut pos = 0;
        while pos < len {
            assert_eq!(a.near(pos, len, first_in, |_, _| None), None);
            pos += 7;
        }
        let searched = searched.into_inner();
        // Each search reaches at most a window past where it starts, and together they
        // cover the stream once (about len / HORIZON searches).
        assert!(searched.iter().all(|(f, t)| t - f <= HORIZON));
        assert!(searched.len() <= 11, "{} searches", searched.len());
        assert_eq!(searched.last().unwrap().1, len);
    }

    #[test]
    fn near_answers_as_the_search_to_the_next_psb_for_every_packet_it_bounds() {
        // The full search's answer, or `None` only when the next PSB is beyond the
        // margin; `resume_at` always the full answer.
        let len = 5 * HORIZON + 100;
        let psbs = [40, HORIZON - 10, 3 * HORIZON + 5, 5 * HORIZON + 60];
        let full = |pos: u64| psbs.iter().copied().find(|&p| p >= pos);
        let mut a = PsbAhead::new();
        let mut b = PsbAhead::new();
        let positions = (0..len).step_by(9973).chain([
            HORIZON - 40,
            HORIZON - 10,
            3 * HORIZON,
            5 * HORIZON + 59,
        ]);
        for pos in positions {
            let got = a.near(pos, len, searches(&psbs), searches(&psbs));
            match (got, full(pos)) {
                (Some(g), w) => assert_eq!(Some(g), w, "at {pos}"),
                (None, Some(w)) => assert!(w >= pos + MARGIN, "at {pos}: next PSB {w}"),
                (None, None) => {}
            }
            // A reader after an error: what `near` knows, else the search on to the end.
            let near = b.near(pos, len, searches(&psbs), searches(&psbs));
            let exact = b.resume_at(near, len, || full(pos));
            assert_eq!(exact, full(pos).unwrap_or(len), "exact at {pos}");
        }
    }

    #[test]
    fn going_back_searches_only_up_to_what_is_known() {
        let psbs = [100, 5000];
        let mut a = PsbAhead::new();
        assert_eq!(
            a.near(200, 10_000, searches(&psbs), searches(&psbs)),
            Some(5000)
        );
        let back = |from: u64, to: u64| {
            assert_eq!((from, to), (50, 200));
            searches(&psbs)(from, to)
        };
        assert_eq!(a.near(50, 10_000, searches(&psbs), back), Some(100));
        assert_eq!(
            a.near(101, 10_000, searches(&psbs), searches(&psbs)),
            Some(5000)
        );
    }
}
