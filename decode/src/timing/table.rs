//! The `timing` table alone, for a decode that keeps no row (`--tables events` or
//! `timing` without `branches`).
//!
//! A timing packet's row depends only on the clock, which reads the packets in stream
//! order and is told where tracing was enabled again after a TraceStop; what the
//! [`Timeline`](super::Timeline) adds is the rows' time. So the same table comes from the
//! marks alone, without the per-row state machine.

use tracemill_schemas::EventKind;

use super::{marks_of, Clock, Mark};
use crate::piece::Piece;
use crate::rows::TimingColumns;

/// The clock over the pieces of a decode, in order.
pub struct TimingTable<C: Clock> {
    clock: C,
}

impl<C: Clock> TimingTable<C> {
    pub fn new(c: &C::Config) -> Self {
        TimingTable { clock: C::new(c) }
    }

    /// The `timing` rows of the next piece's timing packets.
    pub fn piece<S>(&mut self, p: &Piece<S>) -> TimingColumns {
        let mut out = TimingColumns::default();
        out.reserve(p.timing.len());
        for m in marks_of(p) {
            match m {
                // The next enable starts with a PSB; E7 applies after it.
                Mark::Event(_, EventKind::TraceStop) => self.clock.enabled(),
                Mark::Event(..) => {}
                Mark::Fact(f) => out.push(&self.clock.fact(&f)),
            }
        }
        out
    }
}
