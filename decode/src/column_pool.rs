//! Column buffers reused from piece to piece.
//!
//! Every piece's rows are a dozen vectors of up to a few MiB, filled on a decode thread and
//! handed to Arrow, whose buffers are dropped on whichever thread wrote them. Allocated
//! fresh each time, they were pages the allocator had returned to the system and the
//! kernel had to map and clear again: page faults, `madvise` and TLB flushes were a large
//! share of the CPU of `decode -j2 --out` (figures in benches/README.md). The buffers go
//! back to these pools instead (`tracemill_sinks::convert` gives Arrow buffers whose
//! owner returns the vector when Arrow drops it), and [`BranchColumns::reserve`] takes
//! from them. Each pool keeps at most [`KEEP_BYTES`] of vectors: memory stays bounded by a
//! few pieces' rows whatever the trace.
//!
//! [`BranchColumns::reserve`]: crate::rows::BranchColumns::reserve

use std::sync::Mutex;

/// Bytes of vectors a pool keeps at most (per element type): a few pieces' columns, what
/// comes back between one piece's reserve and the next. Whatever a pool keeps adds to the
/// peak memory of a decode (a larger pool raised it by a third: benches/README.md).
pub const KEEP_BYTES: usize = 24 << 20;

/// Vectors smaller than this are not worth keeping.
const MIN_BYTES: usize = 64 << 10;

/// Vectors of `T`, free to be reused.
pub struct Pool<T> {
    free: Mutex<Free<T>>,
}

/// A pool's vectors and the bytes of their room.
struct Free<T> {
    vecs: Vec<Vec<T>>,
    bytes: usize,
}

fn bytes<T>(v: &Vec<T>) -> usize {
    v.capacity() * std::mem::size_of::<T>()
}

impl<T> Pool<T> {
    pub const fn new() -> Self {
        Pool {
            free: Mutex::new(Free {
                vecs: Vec::new(),
                bytes: 0,
            }),
        }
    }

    /// An empty vector with room for `n` values: a kept one with that room when there is
    /// one. (Growing a kept one that is too small would copy its whole room into fresh
    /// pages: the allocator cannot know it is empty. One too small is let go instead, and
    /// a new one made with a sixteenth to spare, so that the next pieces mostly fit.)
    pub fn take(&self, n: usize) -> Vec<T> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = free.vecs.iter().rposition(|v| v.capacity() >= n) {
            let v = free.vecs.swap_remove(i);
            free.bytes -= bytes(&v);
            return v;
        }
        if let Some(v) = free.vecs.pop() {
            free.bytes -= bytes(&v);
        }
        drop(free);
        Vec::with_capacity(n + n / 16)
    }

    /// Keep `v`'s room for a later [`Pool::take`] (unless the pool is full or `v` small).
    pub fn give(&self, mut v: Vec<T>) {
        let b = bytes(&v);
        if b < MIN_BYTES {
            return;
        }
        v.clear();
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.bytes + b <= KEEP_BYTES {
            free.bytes += b;
            free.vecs.push(v);
        }
    }

    /// Vectors kept now.
    pub fn kept(&self) -> usize {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .vecs
            .len()
    }
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The pools of the column types of the row tables.
pub static U64: Pool<u64> = Pool::new();
pub static U32: Pool<u32> = Pool::new();
pub static U8: Pool<u8> = Pool::new();
pub static BOOL: Pool<bool> = Pool::new();

/// Make room for `n` more values in `v`, from `pool` when `v` has none yet.
#[inline]
pub fn room<T>(v: &mut Vec<T>, n: usize, pool: &Pool<T>) {
    if v.capacity() == 0 {
        *v = pool.take(n);
    } else {
        v.reserve(n);
    }
}

/// Make room for `need` values in `v` (which holds fewer): at least twice its length,
/// in a vector from `pool`, its values copied; its old room goes back to `pool`.
pub fn regrow<T: Copy>(v: &mut Vec<T>, need: usize, pool: &Pool<T>) {
    if v.capacity() >= need {
        return;
    }
    let mut w = pool.take(need.max(2 * v.len()));
    w.extend_from_slice(v);
    pool.give(std::mem::replace(v, w));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regrow_copies_into_a_larger_room_and_gives_the_old_one_back() {
        let pool = Pool::<u64>::new();
        let mut v = pool.take(1 << 14);
        let full = v.capacity() as u64;
        v.extend(0..full);
        let old = v.as_ptr();
        regrow(&mut v, full as usize + 1, &pool);
        assert!(v.capacity() >= 2 * full as usize);
        assert!(v.iter().copied().eq(0..full));
        // The old room (128 KiB) is kept for the next piece.
        assert_eq!(pool.kept(), 1);
        let again = pool.take(1 << 14);
        assert_eq!(again.as_ptr(), old);
        // Room enough already: nothing moves.
        let at = v.as_ptr();
        regrow(&mut v, 1 << 14, &pool);
        assert_eq!(v.as_ptr(), at);
    }

    #[test]
    fn a_vector_given_back_is_taken_again_empty_and_the_pool_is_bounded() {
        let pool = Pool::<u64>::new();
        let mut v = pool.take(1 << 16);
        v.extend(0..10);
        let at = v.as_ptr();
        pool.give(v);
        assert_eq!(pool.kept(), 1);
        let w = pool.take(10);
        assert!(w.is_empty() && w.capacity() >= 1 << 16);
        assert_eq!(w.as_ptr(), at);
        // One too small is not grown (a copy of its whole room): a new one is made.
        pool.give(w);
        let big = pool.take(1 << 20);
        assert!(big.capacity() >= 1 << 20);
        assert_eq!(pool.kept(), 0);
        // Small vectors are not kept; past KEEP_BYTES, none is.
        pool.give(Vec::with_capacity(16));
        assert_eq!(pool.kept(), 0);
        let each = 1 << 16;
        for _ in 0..KEEP_BYTES / (each * 8) + 5 {
            pool.give(Vec::with_capacity(each));
        }
        assert_eq!(pool.kept(), KEEP_BYTES / (each * 8));
    }
}
