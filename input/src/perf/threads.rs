//! Which thread ran where, when: what the `cpu`, `pid`, `tid` and `time` columns of a
//! perf.data decode are made from (the columns themselves: the pipeline's `run/threads.rs`).
//!
//! Intel PT traced with `perf record -e intel_pt//u` names no thread (no PIP packets
//! without kernel tracing), so, as perf's own decoder does, a row's thread comes from the
//! sideband: on its CPU, the last context switch (SWITCH / SWITCH_CPU_WIDE) or
//! ITRACE_START record at or before the row's TSC. perf times are turned into TSC with
//! the recording's conversion (TIME_CONV, `PerfClock`), so the lookup compares TSCs, the
//! row's own clock; the `time` column is the row's TSC turned the other way.

use tracemill_perfdata::PerfClock;

/// From TSC `from` on (until the next span), thread `tid` of process `pid` ran; `None`
/// where the records say the CPU left the traced threads without naming the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub from: u64,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
}

/// One trace's threads over time: a CPU's (from its switch records), or one thread's
/// (a per-thread recording: the same thread throughout).
#[derive(Clone, Debug, Default)]
pub struct Threads {
    /// The CPU the trace was recorded on (`None`: per-thread recording).
    pub cpu: Option<u32>,
    /// In order of `from`.
    spans: Vec<Span>,
    /// Per-thread: the one thread, whatever the time.
    whole: Option<(Option<u32>, u32)>,
    clock: PerfClock,
}

/// The TSC of the last timing packet before a place in the stream, across the pieces of
/// one trace: what a row's or an event's thread is looked up by. perf's decoder does the
/// same (a sample's thread is the one running at the last timestamp the trace gave before
/// it). The rows' own `tsc` would not do: rows between two disables with no timing packet
/// between take the next value after them (`decode/src/timing.rs`, the nearest), and
/// after a context switch that is the next thread's time.
#[derive(Clone, Copy, Debug, Default)]
pub struct LastTimed {
    last: Option<u64>,
}

/// The dates of a table's rows as runs: `(end, date)`, the rows from the previous run's
/// end up to `end` (exclusive) dated `date`. A row is dated by the last timing packet
/// before it, so a piece's dates change only at its timing packets: a run each, not an
/// `Option<u64>` per row allocated on the ordered thread that every decode thread waits
/// for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dates(Vec<(usize, Option<u64>)>);

impl Dates {
    /// Runs of equal values of `dates`.
    pub fn of(dates: &[Option<u64>]) -> Dates {
        let mut d = Dates::default();
        for (i, &x) in dates.iter().enumerate() {
            d.push(i + 1, x);
        }
        d
    }

    /// Rows up to `end` (exclusive) dated `date`.
    fn push(&mut self, end: usize, date: Option<u64>) {
        match self.0.last_mut() {
            Some((e, d)) if *d == date => *e = end,
            _ => self.0.push((end, date)),
        }
    }

    /// Rows dated.
    pub fn rows(&self) -> usize {
        self.0.last().map_or(0, |r| r.0)
    }

    /// `(rows, date)` for each run, in order.
    pub fn runs(&self) -> impl Iterator<Item = (std::ops::Range<usize>, Option<u64>)> + '_ {
        let mut start = 0;
        self.0.iter().map(move |&(end, d)| {
            let r = start..end;
            start = end;
            (r, d)
        })
    }

    /// A date per row.
    pub fn expand(&self) -> Vec<Option<u64>> {
        self.runs()
            .flat_map(|(r, d)| std::iter::repeat_n(d, r.len()))
            .collect()
    }
}

impl LastTimed {
    /// [`LastTimed::dates`] as runs ([`Dates`]).
    pub fn date_runs(
        &self,
        places: &[u64],
        timing_offsets: &[u64],
        tsc: impl Fn(usize) -> Option<u64>,
    ) -> Dates {
        if !places.is_sorted() {
            return Dates::of(&self.dates(places, timing_offsets, tsc));
        }
        // One pass over both: the date changes only where a timing packet comes between
        // two places.
        let mut d = Dates::default();
        let (mut k, mut last) = (0, self.last);
        for (i, &o) in places.iter().enumerate() {
            while k < timing_offsets.len() && timing_offsets[k] < o {
                last = tsc(k).or(last);
                k += 1;
            }
            d.push(i + 1, last);
        }
        d
    }

    /// For each stream offset of `places`, the TSC of the last timing packet before it
    /// (a piece's timing packets: their offsets, in stream order, and `tsc(i)` the TSC of
    /// packet `i`). `places` may be in any order.
    pub fn dates(
        &self,
        places: &[u64],
        timing_offsets: &[u64],
        tsc: impl Fn(usize) -> Option<u64>,
    ) -> Vec<Option<u64>> {
        if places.is_empty() {
            return Vec::new();
        }
        // The last known TSC up to and including each timing packet.
        let mut upto = Vec::with_capacity(timing_offsets.len());
        let mut last = self.last;
        for i in 0..timing_offsets.len() {
            last = tsc(i).or(last);
            upto.push(last);
        }
        // (A piece's rows, in stream order, are dated in one pass: `date_runs`.)
        places
            .iter()
            .map(|&o| {
                let k = timing_offsets.partition_point(|&t| t < o);
                k.checked_sub(1).map_or(self.last, |k| upto[k])
            })
            .collect()
    }

    /// Move past a piece of `n` timing packets, `tsc(i)` the TSC of packet `i`.
    pub fn advance(&mut self, n: usize, tsc: impl Fn(usize) -> Option<u64>) {
        if let Some(t) = (0..n).rev().find_map(tsc) {
            self.last = Some(t);
        }
    }
}

/// `(pid, tid)`, each `None` when unknown.
type Who = (Option<u32>, Option<u32>);

/// A switch fact as read from a record: at perf time `time` on `cpu`, `pid`/`tid` (or
/// nobody known) runs from then on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    pub cpu: u32,
    pub time: u64,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
}

impl Threads {
    /// The threads of CPU `cpu` from every switch fact of the file (others' ignored).
    pub fn for_cpu(cpu: u32, switches: &[Switch], clock: PerfClock) -> Threads {
        let mut spans: Vec<Span> = switches
            .iter()
            .filter(|s| s.cpu == cpu)
            .filter_map(|s| {
                Some(Span {
                    from: clock.perf_time_to_tsc(s.time)?,
                    pid: s.pid,
                    tid: s.tid,
                })
            })
            .collect();
        // Records are in file order, which perf only orders by time within a round.
        spans.sort_by_key(|s| s.from);
        Threads {
            cpu: Some(cpu),
            spans,
            whole: None,
            clock,
        }
    }

    /// A per-thread recording's trace: thread `tid` (of process `pid`, when known).
    pub fn for_thread(pid: Option<u32>, tid: u32, clock: PerfClock) -> Threads {
        Threads {
            cpu: None,
            spans: Vec::new(),
            whole: Some((pid, tid)),
            clock,
        }
    }

    /// The thread at `tsc`: `(pid, tid)`, each `None` when unknown.
    pub fn at(&self, tsc: Option<u64>) -> Who {
        if let Some((pid, tid)) = self.whole {
            return (pid, Some(tid));
        }
        let Some(tsc) = tsc else {
            return (None, None);
        };
        let i = self.spans.partition_point(|s| s.from <= tsc);
        match i.checked_sub(1).map(|i| self.spans[i]) {
            Some(s) => (s.pid, s.tid),
            None => (None, None),
        }
    }

    /// The recording's clock: a row's `time` is its TSC in perf time.
    pub fn clock(&self) -> PerfClock {
        self.clock
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// perf time = TSC / 2 + 1 s (also the address spaces' tests' clock).
    pub(crate) fn clock() -> PerfClock {
        PerfClock {
            time_shift: 10,
            time_mult: 512,
            time_zero: 1_000_000_000,
            short: None,
        }
    }

    fn sw(cpu: u32, time: u64, tid: Option<u32>) -> Switch {
        Switch {
            cpu,
            time,
            pid: tid.map(|_| 7),
            tid,
        }
    }

    #[test]
    fn a_row_belongs_to_the_last_switch_at_or_before_its_tsc_on_its_cpu() {
        let s = [
            sw(0, 1_000_000_500, Some(71)), // TSC 1000
            sw(1, 1_000_000_600, Some(99)), // another CPU
            sw(0, 1_000_000_250, Some(70)), // TSC 500, out of file order
            sw(0, 1_000_001_000, None),     // TSC 2000: switched out to an unknown task
        ];
        let t = Threads::for_cpu(0, &s, clock());
        assert_eq!(t.at(Some(499)), (None, None));
        assert_eq!(t.at(Some(500)), (Some(7), Some(70)));
        assert_eq!(t.at(Some(999)), (Some(7), Some(70)));
        assert_eq!(t.at(Some(1000)), (Some(7), Some(71)));
        assert_eq!(t.at(Some(1999)), (Some(7), Some(71)));
        assert_eq!(t.at(Some(2000)), (None, None));
        assert_eq!(
            t.at(None),
            (None, None),
            "a row without tsc cannot be placed"
        );
    }

    #[test]
    fn places_are_dated_by_the_last_timing_packet_before_them_across_pieces() {
        let mut lt = LastTimed::default();
        let offs = [10, 20, 30];
        let tscs = [Some(100), None, Some(300)];
        assert_eq!(
            lt.dates(&[5, 10, 11, 25, 31, 15], &offs, |i| tscs[i]),
            [None, None, Some(100), Some(100), Some(300), Some(100)]
        );
        lt.advance(tscs.len(), |i| tscs[i]);
        assert_eq!(lt.dates(&[40], &[], |_| None), [Some(300)]);
        lt.advance(1, |_| None);
        assert_eq!(lt.dates(&[50, 70], &[60], |_| None), [Some(300), Some(300)]);
    }

    #[test]
    fn sorted_and_unsorted_places_are_dated_alike() {
        let lt = LastTimed { last: Some(7) };
        let offs = [10, 20, 20, 30, 45];
        let tscs = [Some(100), None, Some(200), Some(300), None];
        let places: Vec<u64> = (0..60).collect();
        let sorted = lt.dates(&places, &offs, |i| tscs[i]);
        // As runs, the same dates.
        assert_eq!(lt.date_runs(&places, &offs, |i| tscs[i]).expand(), sorted);
        assert_eq!(Dates::of(&sorted).expand(), sorted);
        assert_eq!(lt.date_runs(&places, &offs, |i| tscs[i]).runs().count(), 4);
        let mut rev = places.clone();
        rev.reverse();
        let mut unsorted = lt.dates(&rev, &offs, |i| tscs[i]);
        unsorted.reverse();
        assert_eq!(sorted, unsorted);
        assert_eq!(
            [sorted[10], sorted[11], sorted[21], sorted[31], sorted[59]],
            [Some(7), Some(100), Some(200), Some(300), Some(300)]
        );
    }

    #[test]
    fn a_per_thread_trace_is_its_thread_throughout() {
        let t = Threads::for_thread(Some(7), 71, clock());
        assert_eq!(t.at(None), (Some(7), Some(71)));
        assert_eq!(t.at(Some(5)), (Some(7), Some(71)));
        assert_eq!(t.cpu, None);
    }
}
