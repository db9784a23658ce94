//! Address spaces chosen by place in the stream, for traces that name none themselves.
//!
//! A trace of user code only (`perf record -e intel_pt//u`) has no PIP packets, so when
//! several processes run the same addresses (every non-PIE program at 0x400000), the
//! walker cannot tell from the trace whose code it is walking. The recording's sideband
//! can: which process ran on the CPU when. [`Spaces`] is that answer turned into stream
//! offsets: from each offset on, the key of the address space whose images
//! ([`crate::image::ImageSet`], tagged with that key) hold the code.
//!
//! The walker selects the space at the places where execution may have moved to another
//! process: every PSB (so a chunk body starting at one knows it, as the sequential decode
//! does) and every enable (TIP.PGE, RTIT FUP.PGE) and overflow resume. Between them the
//! space stays: a process cannot change without the trace leaving user code. Offsets are
//! a pure function of the stream, so every decode (sequential, any chunking, any thread
//! count) selects the same space at the same packet.
//!
//! [`schedule`] makes the table in one pass of the format's front end over the stream
//! (packets only, no walk), dating each place by the TSC of the last timing packet before
//! it, computed by the format's own clock from the same packets in the same order as the
//! decode's timeline: the rule by which the pipeline gives rows their thread, so that the
//! code a row is decoded from and the thread it is said to run on agree.

use tracemill_schemas::EventKind;

use crate::front::{Facts, Format, Front, Raw};
use crate::piece::TimingFact;
use crate::stream::TraceStream;
use crate::timing::Clock;

/// Address-space keys by stream offset: a step function, stored as its changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spaces {
    /// `(offset, key)`: from `offset` on (until the next step), space `key` (`None`: not
    /// known). Offsets increase; no two neighbours have the same key.
    steps: Vec<(u64, Option<u64>)>,
}

impl Spaces {
    pub fn new() -> Spaces {
        Spaces::default()
    }

    /// From `offset` on, space `key`. Offsets must not decrease (an offset lower than the
    /// last step's is taken as that step's).
    pub fn push(&mut self, offset: u64, key: Option<u64>) {
        let last = self.steps.last().copied();
        if last.and_then(|s| s.1) == key {
            return;
        }
        match last {
            Some((o, _)) if offset <= o => {
                let n = self.steps.len();
                self.steps[n - 1].1 = key;
                // It may now repeat the step before it (before the first, no space).
                let before = if n >= 2 { self.steps[n - 2].1 } else { None };
                if before == key {
                    self.steps.pop();
                }
            }
            _ => self.steps.push((offset, key)),
        }
    }

    /// The space at `offset`: the last step at or before it (`None` before the first).
    pub fn at(&self, offset: u64) -> Option<u64> {
        let k = self.steps.partition_point(|s| s.0 <= offset);
        k.checked_sub(1).and_then(|k| self.steps[k].1)
    }

    /// The number of changes of space.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// One thing read in a pass, in stream order.
#[derive(Clone, Copy)]
enum Mark {
    /// The walker selects its space here.
    Place(u64),
    Fact(TimingFact),
    /// TraceStop: the clock's next enable rule applies (as the timeline does at its
    /// event).
    Stop(u64),
}

impl Mark {
    /// Stream order; at one offset a place comes first (a place is dated by the timing
    /// packets strictly before it).
    fn order(&self) -> (u64, u8) {
        match self {
            Mark::Place(o) => (*o, 0),
            Mark::Fact(f) => (f.offset, 1),
            Mark::Stop(o) => (*o, 2),
        }
    }
}

/// The spaces of `stream`'s walk: at each place where the walker selects one (PSBs,
/// enables, overflow resumes), `key_at(date)`, where `date` is the TSC of the last timing
/// packet before that place (`None` before the first one), as the format's clock with
/// `timing` computes it. Bytes before the first PSB are not read (the decode does not
/// parse them either).
pub fn schedule<F: Format>(
    stream: &TraceStream<'_>,
    cfg: &F::Config,
    timing: &<F::Clock as Clock>::Config,
    mut key_at: impl FnMut(Option<u64>) -> Option<u64>,
) -> Spaces {
    let mut out = Spaces::new();
    let len = stream.len();
    let Some(first) = F::next_psb_before(stream, 0, len) else {
        return out;
    };
    let mut st = F::start_state(cfg, false);
    let mut front = F::front(stream, cfg, first, len);
    front.seek(first, &st);
    let mut facts = Facts::default();
    let mut clock = F::Clock::new(timing);
    let mut last: Option<u64> = None;
    let mut marks: Vec<Mark> = Vec::new();
    loop {
        facts.events.clear();
        facts.deferred.clear();
        facts.timing.clear();
        let raw = front.next(&mut st, &mut facts);
        marks.clear();
        marks.extend(
            facts
                .events
                .iter()
                .filter(|e| e.kind == EventKind::Psb)
                .map(|e| Mark::Place(e.offset)),
        );
        marks.extend(facts.timing.iter().map(|f| Mark::Fact(*f)));
        let end = match raw {
            Raw::Pge { off, .. } | Raw::Ovf { off, .. } => {
                marks.push(Mark::Place(off));
                false
            }
            Raw::Stop { off } => {
                marks.push(Mark::Stop(off));
                false
            }
            Raw::End => true,
            _ => false,
        };
        marks.sort_by_key(Mark::order);
        for m in &marks {
            match m {
                Mark::Place(o) => out.push(*o, key_at(last)),
                Mark::Fact(f) => {
                    if let Some(t) = clock.fact(f).tsc {
                        last = Some(t);
                    }
                }
                Mark::Stop(_) => clock.enabled(),
            }
        }
        if end {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_step_replaced_by_no_space_leaves_no_step() {
        let mut s = Spaces::default();
        s.push(10, Some(1));
        s.push(10, None);
        assert_eq!(s.len(), 0, "unknown before the first step, and after it");
        assert_eq!(s.at(12), None);
    }

    #[test]
    fn a_space_holds_from_its_step_to_the_next_and_repeats_are_not_kept() {
        let mut s = Spaces::new();
        s.push(10, None);
        assert!(s.is_empty(), "unknown before the first step already");
        s.push(10, Some(1));
        s.push(20, Some(1));
        s.push(30, Some(2));
        s.push(40, None);
        assert_eq!(s.len(), 3);
        assert_eq!(
            [0, 9, 10, 29, 30, 39, 40, 1000].map(|o| s.at(o)),
            [None, None, Some(1), Some(1), Some(2), Some(2), None, None]
        );
        // A second place at the same offset replaces the step, and merges back.
        s.push(40, Some(2));
        assert_eq!(s.len(), 2);
        assert_eq!(s.at(45), Some(2));
    }
}
