//! Proves that a walk is stuck in a cycle it can never leave.
//!
//! Between two packets the walker follows direct jumps, direct calls and (with TNT bits
//! queued) conditional branches on its own. Along a stretch where it consumes nothing —
//! neither a packet nor a TNT bit — its next step depends on the IP alone: the queued bits,
//! the packet it waits for and the CR3 do not change. So if such a stretch comes back to an
//! IP it has already visited, it will go round forever and never reach the packet it waits
//! for. On real traces this cannot happen (the hardware emits that packet, so the code
//! leads to it); on a damaged trace (a corrupted TIP pointing into `jmp .`, a cycle of
//! calls) it is the one way a walk could run on without bound, growing rows until the
//! machine runs out of memory. The walker reports it as an error at the packet it waited
//! for and resyncs.
//!
//! The cycle test is Brent's: a mark is left at steps 1, 2, 4, 8, … of the stretch, and a
//! later step that lands on the mark proves the cycle. A cycle of length `L` reached after
//! `T` steps is caught within `2·max(T, L) + L` steps, and a stretch that consumes
//! something starts afresh, so the guard costs a few compares per direct branch and never
//! fires on a walk that is going somewhere.

use crate::tnt::TntQueue;

/// What the walker has consumed: equal positions mean nothing was consumed in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Consumed {
    cursor: u64,
    tnt: TntQueue,
}

/// Brent's cycle finder over the IPs of a walk that consumes nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoopGuard {
    at: Consumed,
    /// Steps since the walk last consumed something.
    steps: u64,
    mark: u64,
}

impl LoopGuard {
    /// The walk moved to `ip` by a branch it took without a packet (direct jump or call, a
    /// split block); `cursor` and `tnt` are the packet reader's position and the queued
    /// bits. Returns true when the walk is provably in a cycle it cannot leave.
    #[inline]
    pub fn step(&mut self, ip: u64, cursor: u64, tnt: TntQueue) -> bool {
        let now = Consumed { cursor, tnt };
        if now != self.at {
            // Something was consumed since the last step: a new stretch begins here.
            self.at = now;
            self.steps = 1;
            self.mark = ip;
            return false;
        }
        if ip == self.mark {
            return true;
        }
        self.steps += 1;
        if self.steps.is_power_of_two() {
            self.mark = ip;
        }
        false
    }

    /// Steps taken in the current stretch (for reports).
    pub fn steps(&self) -> u64 {
        self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::TntBits as Tnt;

    /// Walk a function `next` from `start` without consuming anything; the step at which
    /// the guard fires, if within `limit`.
    fn fires_after(start: u64, next: impl Fn(u64) -> u64, limit: u64) -> Option<u64> {
        let mut g = LoopGuard::default();
        let mut ip = start;
        for i in 1..=limit {
            ip = next(ip);
            if g.step(ip, 100, TntQueue::new()) {
                return Some(i);
            }
        }
        None
    }

    #[test]
    fn self_loop_is_caught_at_once() {
        // `jmp .` at 0x1000.
        assert_eq!(fires_after(0x1000, |_| 0x1000, 10), Some(2));
    }

    #[test]
    fn cycles_after_a_tail_are_caught_within_brents_bound() {
        for tail in [0u64, 1, 5, 100, 1000] {
            for len in [1u64, 2, 3, 17, 512] {
                // IPs 0..tail lead into the cycle tail..tail+len.
                let next = |ip: u64| {
                    if ip + 1 < tail + len {
                        ip + 1
                    } else {
                        tail
                    }
                };
                let n = fires_after(0, next, 10_000).expect("cycle found");
                assert!(
                    n <= 2 * tail.max(len) + len + 2,
                    "tail {tail} len {len}: {n}"
                );
            }
        }
    }

    #[test]
    fn a_long_walk_without_a_cycle_never_fires() {
        assert_eq!(fires_after(0, |ip| ip + 16, 1_000_000), None);
    }

    #[test]
    fn consuming_a_packet_or_a_bit_starts_a_new_stretch() {
        let mut g = LoopGuard::default();
        assert!(!g.step(0x10, 5, TntQueue::new()));
        assert!(!g.step(0x20, 5, TntQueue::new()));
        // The reader moved: revisiting 0x10 is not a cycle.
        assert!(!g.step(0x10, 9, TntQueue::new()));
        assert!(!g.step(0x20, 9, TntQueue::new()));
        // A TNT bit was queued: a new stretch too.
        let mut q = TntQueue::new();
        q.push(Tnt { bits: 1, len: 1 });
        assert!(!g.step(0x10, 9, q));
        assert!(!g.step(0x20, 9, q));
        // The mark moved to 0x20 at step 2: the cycle shows when the walk is back there.
        assert!(!g.step(0x10, 9, q));
        assert!(g.step(0x20, 9, q));
        assert_eq!(g.steps(), 3);
    }
}
