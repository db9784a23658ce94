//! The return-compression model: what a compressed RET returns to.
//!
//! Both formats let a near RET whose target is the NLIP of the matching near CALL leave
//! out its TIP and send a taken TNT bit instead; the decoder finds the target from the
//! calls it walked. They differ in how much they remember and whether a RET consumes it:
//!
//! - **RTIT** (4.2.3.2): one register, RTIT_LAST_CALL_NLIP, set by every traced near call
//!   and *read* by a compressed RET without being consumed ([`RetModel::LastCall`]);
//! - **Intel PT** (SDM 36.4.2.2, "Indirect Transfer Compression for Returns"): a stack of
//!   the 64 youngest call NLIPs; a near CALL pushes (a direct CALL to its own NLIP, a
//!   "zero-length call", does not), and a compressed RET pops ([`RetModel::Stack64`]).
//!
//! [`RetStack`] is both: the front end chooses the model once ([`RetModel`]), and the
//! walker calls [`RetStack::call`] and [`RetStack::ret`]. Its size is fixed (64 entries
//! at most), so it costs the same whatever the trace does.
//!
//! What lies below the known entries ([`Below`]) is what a parallel chunk needs: a chunk
//! body starts with nothing known and [`Below::FromChunkStart`] under it. A compressed RET
//! that reaches below means the matching call is in an earlier chunk, so the body started
//! too early (it restarts later); and when the chunk is stitched, the body's entries are
//! laid on top of the stitch's ([`RetStack::over`]), which is exactly the stack the
//! sequential decode holds there.

/// How compressed RETs find their targets (set once by the format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetModel {
    /// RTIT: one slot, written by every near call, read (not consumed) by a compressed RET.
    LastCall,
    /// Intel PT: the 64 youngest near-call NLIPs; a compressed RET pops; zero-length
    /// direct calls (to their own NLIP) are not pushed.
    Stack64,
}

impl RetModel {
    fn capacity(self) -> usize {
        match self {
            RetModel::LastCall => 1,
            RetModel::Stack64 => STACK,
        }
    }
}

/// Entries a stack holds at most (SDM 36.4.2.2: "allocate space to store 64 RET targets").
pub const STACK: usize = 64;

/// What lies under the known entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Below {
    /// Nothing: the stack is exactly the known entries (cleared after an overflow, or the
    /// oldest entries were pushed out).
    Empty,
    /// A parallel chunk started here; the entries below are in the previous chunk.
    FromChunkStart,
    /// Unknown after a gap (start of the trace, an error): a RET reaching it cannot be
    /// resolved.
    AfterGap,
}

/// Why a compressed RET has no target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoTarget {
    /// The known entries ran out; what is below says why.
    Below(Below),
}

/// The decoder's copy of the return-compression state.
#[derive(Clone)]
pub struct RetStack {
    model: RetModel,
    /// A ring of the youngest entries: `top` is the next free slot, `len` how many.
    slots: [u64; STACK],
    top: u8,
    len: u8,
    below: Below,
}

/// Equal when they hold the same entries over the same bottom (whatever the unused slots
/// hold).
impl PartialEq for RetStack {
    fn eq(&self, other: &Self) -> bool {
        self.model == other.model
            && self.below == other.below
            && self.len == other.len
            && self.entries() == other.entries()
    }
}

impl Eq for RetStack {}

impl std::fmt::Debug for RetStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetStack")
            .field("model", &self.model)
            .field("entries", &self.entries())
            .field("below", &self.below)
            .finish()
    }
}

impl RetStack {
    /// An empty stack with `below` under it.
    pub fn new(model: RetModel, below: Below) -> Self {
        RetStack {
            model,
            slots: [0; STACK],
            top: 0,
            len: 0,
            below,
        }
    }

    pub fn model(&self) -> RetModel {
        self.model
    }

    pub fn below(&self) -> Below {
        self.below
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The known entries, oldest first.
    pub fn entries(&self) -> Vec<u64> {
        let cap = self.model.capacity();
        (0..self.len as usize)
            .map(|k| self.slots[(self.top as usize + cap - self.len as usize + k) % cap])
            .collect()
    }

    /// Forget everything: `below` is all there is.
    pub fn reset(&mut self, below: Below) {
        self.top = 0;
        self.len = 0;
        self.below = below;
    }

    /// A near call with next IP `nlip`; `zero_length`: a direct call to `nlip` itself.
    #[inline]
    pub fn call(&mut self, nlip: u64, zero_length: bool) {
        if zero_length && self.model == RetModel::Stack64 {
            // 36.4.2.2: zero-length calls "typically don't have matching RETs" and the
            // processor does not push them.
            return;
        }
        let cap = self.model.capacity();
        self.slots[self.top as usize] = nlip;
        self.top = ((self.top as usize + 1) % cap) as u8;
        if (self.len as usize) < cap {
            self.len += 1;
        } else {
            // The oldest entry is pushed out: below the rest there is nothing now.
            self.below = Below::Empty;
        }
    }

    /// A compressed RET: its target (popped for [`RetModel::Stack64`], read for
    /// [`RetModel::LastCall`]), or why there is none.
    #[inline]
    pub fn ret(&mut self) -> Result<u64, NoTarget> {
        if self.len == 0 {
            return Err(NoTarget::Below(self.below));
        }
        let cap = self.model.capacity();
        let i = (self.top as usize + cap - 1) % cap;
        if self.model == RetModel::Stack64 {
            self.top = i as u8;
            self.len -= 1;
        }
        Ok(self.slots[i])
    }

    /// This stack laid on top of `under`: what the sequential decode holds when this
    /// stack was built by a chunk body whose start `under` describes. Only a body's own
    /// [`Below::FromChunkStart`] is filled in; any other stack is already complete.
    pub fn over(&self, under: &RetStack) -> RetStack {
        if self.below != Below::FromChunkStart {
            return self.clone();
        }
        let mut s = under.clone();
        for e in self.entries() {
            s.call(e, false);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RTIT 4.2.3.2: a compressed RET reads RTIT_LAST_CALL_NLIP without consuming it; the
    /// next call overwrites it.
    #[test]
    fn rtit_4_2_3_2_last_call_is_read_not_consumed() {
        let mut s = RetStack::new(RetModel::LastCall, Below::AfterGap);
        assert_eq!(s.ret(), Err(NoTarget::Below(Below::AfterGap)));
        s.call(0x10, false);
        assert_eq!(s.ret(), Ok(0x10));
        assert_eq!(s.ret(), Ok(0x10), "read again");
        s.call(0x20, true);
        assert_eq!(s.ret(), Ok(0x20), "RTIT has no zero-length exception");
        assert_eq!(s.len(), 1);
    }

    /// SDM 36.4.2.2: calls push, compressed RETs pop, the 64 youngest entries are kept and
    /// zero-length calls are not pushed.
    #[test]
    fn sdm_36_4_2_2_stack_of_64_pops_and_skips_zero_length_calls() {
        let mut s = RetStack::new(RetModel::Stack64, Below::AfterGap);
        for k in 0..70u64 {
            s.call(k, false);
        }
        assert_eq!(s.len(), 64);
        assert_eq!(s.below(), Below::Empty, "the oldest six were pushed out");
        s.call(0x999, true);
        for k in (6..70u64).rev() {
            assert_eq!(s.ret(), Ok(k));
        }
        assert_eq!(s.ret(), Err(NoTarget::Below(Below::Empty)));
    }

    /// A body's stack over the stitch's is the sequential decode's stack, including when
    /// the two together exceed 64 entries.
    #[test]
    fn a_body_stack_over_the_stitch_equals_the_sequential_one() {
        for (before, body) in [(3usize, 2usize), (60, 10), (0, 5), (10, 0), (64, 64)] {
            let mut seq = RetStack::new(RetModel::Stack64, Below::AfterGap);
            let mut stitch = RetStack::new(RetModel::Stack64, Below::AfterGap);
            for k in 0..before as u64 {
                seq.call(k, false);
                stitch.call(k, false);
            }
            let mut b = RetStack::new(RetModel::Stack64, Below::FromChunkStart);
            for k in 0..body as u64 {
                seq.call(1000 + k, false);
                b.call(1000 + k, false);
            }
            let joined = b.over(&stitch);
            assert_eq!(joined.entries(), seq.entries(), "{before} + {body}");
            assert_eq!(joined.below(), seq.below(), "{before} + {body}");
        }
        // RTIT's single slot: a body that saw a call keeps its own.
        let mut stitch = RetStack::new(RetModel::LastCall, Below::AfterGap);
        stitch.call(1, false);
        let mut b = RetStack::new(RetModel::LastCall, Below::FromChunkStart);
        assert_eq!(b.over(&stitch).entries(), [1]);
        b.call(2, false);
        assert_eq!(b.over(&stitch).entries(), [2]);
    }
}
