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

    /// The next `min(len, k)` bits, the next one highest, and how many (`k` at most 64).
    #[inline]
    pub fn peek(&self, k: u8) -> (u64, u8) {
        let n = self.len.min(k);
        (self.bits.checked_shr((self.len - n) as u32).unwrap_or(0), n)
    }

    /// The queue after `n` pops (`n` at most `len`): equal to popping `n` times.
    #[inline]
    pub fn after(&self, n: u8) -> TntQueue {
        debug_assert!(n <= self.len);
        let len = self.len - n;
        TntQueue {
            bits: self.bits & 1u64.checked_shl(len as u32).map_or(u64::MAX, |m| m - 1),
            len,
        }
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

    /// `peek` and `after` agree with popping, whatever is queued (up to 64 bits).
    #[test]
    fn peek_and_after_agree_with_pop() {
        for len in [1u8, 5, 8, 9, 47, 63, 64] {
            let bits = 0xA5C3_0F96_5AA5_3CC3u64 >> (64 - len);
            let mut q = TntQueue::new();
            q.push(TntBits { bits, len });
            let (top, n) = q.peek(8);
            assert_eq!(n, len.min(8));
            let mut p = q;
            for k in 0..=len {
                assert_eq!(q.after(k), p, "len {len}, after {k}");
                if k < n {
                    assert_eq!(p.pop(), Some((top >> (n - 1 - k)) & 1 == 1));
                } else {
                    p.pop();
                }
            }
        }
    }
}
