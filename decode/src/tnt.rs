//! The TNT queue: taken/not-taken bits waiting for conditional branches and compressed
//! returns (4.2.2). Bits are consumed oldest first. Bits may run across MTC, STS and PSB
//! packets (only FUP, TIP and PIP force out a partial TNT), so the queue does not care
//! where one TNT packet ends and the next begins.

use crate::front::TntBits;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TntQueue {
    /// Pending bits, the next one at bit `len-1`.
    bits: u64,
    len: u8,
}

impl TntQueue {
    pub fn new() -> Self {
        TntQueue::default()
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn len(&self) -> u8 {
        self.len
    }
    pub fn clear(&mut self) {
        *self = TntQueue::default();
    }

    /// Append the bits of a TNT packet after those already queued.
    #[inline]
    pub fn push(&mut self, t: TntBits) {
        // The walker queues a packet's bits only when the queue is empty, or (deferred
        // TIPs) one packet on top of fewer bits than a TNT-8 holds: never more than 64.
        debug_assert!(self.len + t.len <= 64);
        let t_len = t.len.min(64 - self.len);
        let oldest = t.bits.checked_shr((t.len - t_len) as u32).unwrap_or(0);
        self.bits = self.bits.checked_shl(t_len as u32).unwrap_or(0) | oldest;
        self.len += t_len;
    }

    /// Take the oldest bit.
    #[inline]
    pub fn pop(&mut self) -> Option<bool> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        let b = (self.bits >> self.len) & 1 == 1;
        self.bits &= (1u64 << self.len) - 1;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_come_out_oldest_first_across_packets() {
        let mut q = TntQueue::new();
        q.push(TntBits {
            bits: 0b101,
            len: 3,
        });
        assert_eq!(q.pop(), Some(true));
        q.push(TntBits { bits: 0b0, len: 1 });
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop(), Some(false));
        assert_eq!(q.pop(), Some(true));
        assert_eq!(q.pop(), Some(false));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }
}
