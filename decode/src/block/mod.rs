//! Basic-block cache: each straight run of instructions up to and including the next branch
//! is disassembled once and then walked in O(1) per execution. The memoized walk
//! ([`memo`]) keeps its segments here, keyed by block and emptied with the blocks.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use iced_x86::{Decoder, DecoderOptions, Instruction};

use crate::image::{ImageSet, Lookup};
use crate::insn::{info_of, jmpabs, Bits, InsnClass};

pub mod memo;
use memo::Memo;

/// Longest block we build; a longer straight run is split (and continues in a new block).
const MAX_BLOCK_INSNS: usize = 4096;

/// How a block ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockEnd {
    /// With the branch instruction at `last_ip`.
    Branch,
    /// Straight-line code continues at `next` (block was split at the size cap).
    Split,
    /// The instruction at `next` could not be decoded (invalid bytes).
    Invalid,
    /// No image covers `next` (or the instruction runs off the image).
    NoImage,
    /// Several CR3-tagged images cover `next` and the CR3 is not known yet.
    Ambiguous,
}

/// A decoded basic block.
#[derive(Clone, Debug)]
pub struct Block {
    pub start: u64,
    /// Instruction lengths, in order; the last one is the branch when `end` is `Branch`.
    pub lens: Box<[u8]>,
    pub end: BlockEnd,
    /// Class of the last instruction (meaningful for `Branch`).
    pub class: InsnClass,
    /// Address of the last instruction (the branch for `Branch`).
    pub last_ip: u64,
    /// Direct target of the branch (`Cond`, `Jmp`, `Call`).
    pub target: u64,
    /// Address after the last instruction: the branch's fall-through, or where a
    /// `Split`/`Invalid`/`NoImage` block stops.
    pub next: u64,
}

impl Block {
    pub fn insns(&self) -> u32 {
        self.lens.len() as u32
    }

    /// If `addr` is the start of an instruction of this block, how many instructions come
    /// before it. `addr == next` (past the last instruction) is not included.
    pub fn index_of(&self, addr: u64) -> Option<u32> {
        if addr < self.start || addr > self.last_ip {
            return None;
        }
        let mut a = self.start;
        for (i, &l) in self.lens.iter().enumerate() {
            if a == addr {
                return Some(i as u32);
            }
            a += l as u64;
        }
        None
    }

    /// If `addr` falls strictly inside an instruction of this block (not at its first
    /// byte), that instruction's index and its end address.
    pub fn inside(&self, addr: u64) -> Option<(u32, u64)> {
        let mut a = self.start;
        for (i, &l) in self.lens.iter().enumerate() {
            let e = a + l as u64;
            if addr > a && addr < e {
                return Some((i as u32, e));
            }
            a = e;
        }
        None
    }
}

/// Decode the block starting at `start` in 64-bit mode.
pub fn build_block(images: &ImageSet<'_>, start: u64, cr3: Option<u64>) -> Block {
    build_block_in(images, start, cr3, Bits::B64)
}

/// Decode the block starting at `start`, instructions decoded as `bits` code.
pub fn build_block_in(images: &ImageSet<'_>, start: u64, cr3: Option<u64>, bits: Bits) -> Block {
    let mut lens = Vec::new();
    let mut ip = start;
    let mut ins = Instruction::default();
    let stop = |lens: Vec<u8>, end: BlockEnd, at: u64| Block {
        start,
        last_ip: at.wrapping_sub(lens.last().copied().unwrap_or(0) as u64),
        lens: lens.into_boxed_slice(),
        end,
        class: InsnClass::Other,
        target: 0,
        next: at,
    };
    'segments: loop {
        let code = match images.code_at(ip, cr3) {
            Ok(c) => c,
            Err(Lookup::Missing) => return stop(lens, BlockEnd::NoImage, ip),
            Err(Lookup::Ambiguous) => return stop(lens, BlockEnd::Ambiguous, ip),
        };
        let base = ip;
        let mut dec = Decoder::with_ip(bits.bitness(), code, ip, DecoderOptions::NONE);
        while dec.can_decode() {
            if lens.len() >= MAX_BLOCK_INSNS {
                return stop(lens, BlockEnd::Split, ip);
            }
            dec.decode_out(&mut ins);
            let info = info_of(&ins).or_else(|| jmpabs(&code[(ip - base) as usize..], ip, bits));
            let Some(info) = info else {
                // Invalid, or cut off by the end of the segment: the next segment may
                // continue it only if it starts exactly here, which a decoder cannot see.
                let end = if dec.last_error() == iced_x86::DecoderError::NoMoreBytes {
                    BlockEnd::NoImage
                } else {
                    BlockEnd::Invalid
                };
                return stop(lens, end, ip);
            };
            lens.push(info.len);
            if info.class.is_branch() {
                return Block {
                    start,
                    lens: lens.into_boxed_slice(),
                    end: BlockEnd::Branch,
                    class: info.class,
                    last_ip: ip,
                    target: info.target,
                    next: info.nlip(),
                };
            }
            ip = info.nlip();
        }
        // Ran to the end of this segment exactly at an instruction boundary.
        continue 'segments;
    }
}

/// Fast hash for address keys (multiplicative, like FxHash).
#[derive(Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub type AddrMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;

/// What the walk reads of a block on every execution, packed (40 bytes) and kept apart
/// from the instruction lengths so that walking touches as little memory as possible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hot {
    pub last_ip: u64,
    pub target: u64,
    pub next: u64,
    pub insns: u32,
    pub class: InsnClass,
    pub end: BlockEnd,
    /// Successor links: [fall-through / not taken, taken]; `UNLINKED` until first used.
    pub succ: [u32; 2],
}

/// Key for "CR3 unknown or irrelevant".
const NO_CR3: u64 = u64::MAX;
/// A successor link not yet resolved.
const UNLINKED: u32 = u32::MAX;
const FRONT_BITS: u32 = 12;

/// Blocks by (start address, CR3, execution mode), with their successors linked once seen,
/// so walking a direct branch is an array index, not a hash lookup. One cache per worker
/// thread; it lives across chunks.
pub struct BlockCache {
    blocks: Vec<Block>,
    hot: Vec<Hot>,
    /// CR3 key and execution mode each block was built for.
    keys: Vec<(u64, Bits)>,
    index: AddrMap<(u64, u64, Bits), u32>,
    /// Direct-mapped front of `index`: (address, cr3 key, mode, block).
    front: Box<[(u64, u64, Bits, u32)]>,
    /// Blocks decoded (cache misses), for statistics.
    pub misses: u64,
    /// Bytes held by the blocks (for [`BlockCache::trim`]).
    bytes: usize,
    /// Walk segments over these blocks ([`memo`]), emptied with them.
    pub memo: Memo,
}

/// Memory a block costs beyond its instruction lengths: the block, its hot entry, its key
/// and its index entry.
const BLOCK_OVERHEAD: usize =
    std::mem::size_of::<Block>() + std::mem::size_of::<Hot>() + 8 + 2 * 24;

/// A worker's cache is emptied between chunks once it holds more than this. Real programs
/// stay far below (a block costs about 150 bytes; busybox has ~100k blocks), but damaged
/// IPs can send the walk to any byte of an image, each a new block.
pub const CACHE_BUDGET: usize = 64 << 20;

impl Default for BlockCache {
    fn default() -> Self {
        BlockCache {
            blocks: Vec::new(),
            hot: Vec::new(),
            keys: Vec::new(),
            index: AddrMap::default(),
            front: vec![(u64::MAX, 0, Bits::B64, 0); 1 << FRONT_BITS].into_boxed_slice(),
            misses: 0,
            bytes: 0,
            memo: Memo::default(),
        }
    }
}

impl BlockCache {
    pub fn new() -> Self {
        BlockCache::default()
    }

    fn key(images: &ImageSet<'_>, cr3: Option<u64>) -> (u64, Option<u64>) {
        if images.has_cr3_tags() {
            (cr3.unwrap_or(NO_CR3), cr3)
        } else {
            (NO_CR3, None)
        }
    }

    /// Index of the block at `start` in address space `cr3`, decoded as `bits` code. When
    /// the images carry no CR3 tags, the CR3 plays no part.
    #[inline]
    pub fn index(
        &mut self,
        images: &ImageSet<'_>,
        start: u64,
        cr3: Option<u64>,
        bits: Bits,
    ) -> u32 {
        let (key, lookup_cr3) = Self::key(images, cr3);
        let slot = (start.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FRONT_BITS)) as usize;
        let f = self.front[slot];
        if f.0 == start && f.1 == key && f.2 == bits {
            return f.3;
        }
        let idx = match self.index.get(&(start, key, bits)) {
            Some(&i) => i,
            None => {
                self.misses += 1;
                let b = build_block_in(images, start, lookup_cr3, bits);
                let i = self.blocks.len() as u32;
                self.hot.push(Hot {
                    last_ip: b.last_ip,
                    target: b.target,
                    next: b.next,
                    insns: b.insns(),
                    class: b.class,
                    end: b.end,
                    succ: [UNLINKED; 2],
                });
                self.bytes += BLOCK_OVERHEAD + b.lens.len();
                self.blocks.push(b);
                self.keys.push((key, bits));
                self.index.insert((start, key, bits), i);
                i
            }
        };
        self.front[slot] = (start, key, bits, idx);
        idx
    }

    #[inline]
    /// The last instruction before `x` on the straight run from `start` (across block
    /// splits): where a block entered at `start` and left at `x` (an interrupt, a
    /// disable) ends. None when `x` is not an instruction start after `start` on that run.
    pub fn insn_before(
        &mut self,
        images: &ImageSet<'_>,
        start: u64,
        x: u64,
        cr3: Option<u64>,
    ) -> Option<u64> {
        let mut ip = start;
        for _ in 0..1 << 16 {
            let b = self.get(images, ip, cr3);
            if x > b.start && x <= b.last_ip {
                let k = b.index_of(x)? as usize;
                let before: u64 = b.lens[..k - 1].iter().map(|&l| l as u64).sum();
                return Some(b.start + before);
            }
            if b.end != BlockEnd::Split || b.lens.is_empty() {
                return None;
            }
            if b.next == x {
                return Some(b.last_ip);
            }
            ip = b.next;
        }
        None
    }

    pub fn block(&self, idx: u32) -> &Block {
        &self.blocks[idx as usize]
    }

    /// The packed per-execution view of block `idx`.
    #[inline]
    pub fn hot(&self, idx: u32) -> Hot {
        self.hot[idx as usize]
    }

    /// The block at the start address of successor `which` (0: fall-through, 1: direct
    /// target) of block `idx`, linked on first use. It is decoded in `idx`'s execution mode
    /// (a mode change drops the walker's link before it is followed).
    #[inline]
    pub fn successor(
        &mut self,
        images: &ImageSet<'_>,
        idx: u32,
        which: usize,
        cr3: Option<u64>,
    ) -> u32 {
        let h = &self.hot[idx as usize];
        let s = h.succ[which];
        if s != UNLINKED
            && (!images.has_cr3_tags() || self.keys[s as usize].0 == Self::key(images, cr3).0)
        {
            return s;
        }
        let addr = if which == 0 { h.next } else { h.target };
        let bits = self.keys[idx as usize].1;
        let s = self.index(images, addr, cr3, bits);
        self.hot[idx as usize].succ[which] = s;
        s
    }

    /// The 64-bit block at `start` (builds it if needed).
    pub fn get(&mut self, images: &ImageSet<'_>, start: u64, cr3: Option<u64>) -> &Block {
        self.get_in(images, start, cr3, Bits::B64)
    }

    /// The block at `start` decoded as `bits` code (builds it if needed).
    pub fn get_in(
        &mut self,
        images: &ImageSet<'_>,
        start: u64,
        cr3: Option<u64>,
        bits: Bits,
    ) -> &Block {
        let i = self.index(images, start, cr3, bits);
        &self.blocks[i as usize]
    }

    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes the cached blocks and the memo hold (about).
    pub fn bytes(&self) -> usize {
        self.bytes + self.memo.bytes()
    }

    /// Block `idx` was looked up in the address space `cr3` selects (its successors are
    /// the ones a walk in `cr3` takes): always, when the images carry no CR3 tags.
    #[inline]
    pub fn keyed_for(&self, images: &ImageSet<'_>, idx: u32, cr3: Option<u64>) -> bool {
        !images.has_cr3_tags() || self.keys[idx as usize].0 == Self::key(images, cr3).0
    }

    /// Empty the cache if it holds more than `budget` bytes. Block indices (successor
    /// links, a walker's hint) are invalid afterwards: call it between walks only.
    pub fn trim(&mut self, budget: usize) {
        if self.bytes() > budget {
            let misses = self.misses;
            *self = BlockCache::default();
            self.misses = misses;
        }
    }
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_runs_to_first_branch_inclusive() {
        // nop; xor eax,eax; je +2; nop
        let code = [0x90, 0x31, 0xC0, 0x74, 0x02, 0x90];
        let mut set = ImageSet::new();
        set.add_raw("t", &code, 0x1000, None);
        let mut cache = BlockCache::new();
        let b = cache.get(&set, 0x1000, None).clone();
        assert_eq!(b.end, BlockEnd::Branch);
        assert_eq!(b.class, InsnClass::Cond);
        assert_eq!(b.insns(), 3);
        assert_eq!((b.last_ip, b.target, b.next), (0x1003, 0x1007, 0x1005));
        assert_eq!(b.index_of(0x1001), Some(1));
        assert_eq!(b.index_of(0x1002), None);
        assert_eq!(b.inside(0x1002), Some((1, 0x1003)));
        cache.get(&set, 0x1000, None);
        assert_eq!(cache.misses, 1);
    }

    #[test]
    fn trim_empties_a_cache_over_budget_only() {
        let code = [0x90, 0x90, 0x90, 0xC3];
        let mut set = ImageSet::new();
        set.add_raw("t", &code, 0x1000, None);
        let mut cache = BlockCache::new();
        for a in 0x1000..0x1004 {
            cache.index(&set, a, None, Bits::B64);
        }
        assert_eq!(cache.len(), 4);
        let held = cache.bytes();
        assert!(held >= 4 * BLOCK_OVERHEAD + (4 + 3 + 2 + 1));
        cache.trim(held);
        assert_eq!(cache.len(), 4, "at the budget: kept");
        cache.trim(held - 1);
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
        // Still usable, and the statistics survive.
        assert_eq!(cache.get(&set, 0x1000, None).insns(), 4);
        assert_eq!(cache.misses, 5);
    }

    #[test]
    fn block_stops_at_image_end_and_invalid_bytes() {
        let code = [0x90, 0x90];
        let mut set = ImageSet::new();
        set.add_raw("t", &code, 0x1000, None);
        let b = build_block(&set, 0x1000, None);
        assert_eq!((b.end, b.insns(), b.next), (BlockEnd::NoImage, 2, 0x1002));
        let b = build_block(&set, 0x5000, None);
        assert_eq!((b.end, b.insns()), (BlockEnd::NoImage, 0));
        let bad = [0x90, 0x06, 0x90, 0x90]; // 0x06 (push es) is invalid in 64-bit mode
        let mut set = ImageSet::new();
        set.add_raw("t", &bad, 0x1000, None);
        let b = build_block(&set, 0x1000, None);
        assert_eq!((b.end, b.insns(), b.next), (BlockEnd::Invalid, 1, 0x1001));
    }
}
