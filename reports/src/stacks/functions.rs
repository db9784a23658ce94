//! Function identities: names interned, looked up per address (cached).

use crate::symbols::Symbolizer;
use crate::util::{insn_len, AddrMap};

/// What [`Functions::at`] says of an address: (function id, known symbol, at the
/// function's first byte).
pub type FunctionAt = (u32, bool, bool);

/// Function identities: names interned, per address cached.
pub struct Functions<'s> {
    syms: &'s Symbolizer,
    pub names: Vec<String>,
    ids: std::collections::HashMap<String, u32>,
    cache: AddrMap<u64, Named>,
    /// A copy of `cache` in front of it (two-way, see `named`): every row asks (or every value of
    /// a row group's dictionaries), mostly for the same few thousand addresses, and a
    /// hash map probe was a quarter of the walk. Its 262,144 places (4 MiB) hold the
    /// branch addresses of a large program's hot code: with 4,096, the synthetic trace's
    /// 33,000 branch addresses missed it in 7% of the flame graph's time; with 65,536,
    /// naming the 34,000 dictionary values (`ip` and `target`) of each of its row groups
    /// missed it in 3.7% (time in the map behind it).
    front: Box<[(u64, Named)]>,
}

/// What [`Functions`] keeps of an address: its function, and the length of the
/// instruction there (0: unknown), which makes a call's return address. The length is
/// kept beside the function, not in a map of its own: one probe of that map per call
/// site and row group missed the processor's caches (after the trie's walk), 80 ns each
/// and 2% of the flame graph's time on the synthetic trace.
#[derive(Clone, Copy, Debug)]
pub(super) struct Named {
    pub(super) at: FunctionAt,
    pub(super) len: u8,
}

impl<'s> Functions<'s> {
    pub fn new(syms: &'s Symbolizer) -> Self {
        let none = Named {
            at: (0, false, false),
            len: 0,
        };
        let mut f = Functions {
            syms,
            names: Vec::new(),
            ids: Default::default(),
            cache: AddrMap::default(),
            front: vec![(u64::MAX, none); Self::FRONT].into_boxed_slice(),
        };
        f.intern("[gap]");
        f
    }

    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.ids.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), i);
        i
    }

    pub(super) const FRONT: usize = 1 << 18;

    /// (id, known symbol, is the function's entry) of the code at `addr`.
    #[inline]
    pub fn at(&mut self, addr: u64) -> FunctionAt {
        self.named(addr).at
    }

    /// The first of `addr`'s two places in `front` (an even index).
    #[inline]
    pub(super) fn slot(addr: u64) -> usize {
        ((addr ^ (addr >> 16)) as usize) & (Self::FRONT - 2)
    }

    /// Ask the processor to load `addr`'s place in `front`, for a lookup soon: naming a
    /// row group's dictionaries (59 M lookups on the 1 GiB synthetic trace) missed the
    /// processor's caches, one lookup after the other. Eight ahead, their share of the
    /// walk's own time fell from 14% to 6%.
    #[inline]
    #[allow(unsafe_code)]
    pub(super) fn prefetch(&self, addr: u64) {
        let slot = Self::slot(addr);
        // Safety: `slot` is within `front`; a prefetch reads nothing the program sees.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.front.as_ptr().add(slot) as *const i8);
        }
    }

    /// Through `front`, two ways: an address has two places side by side (one cache
    /// line), the one it was last found in first. Direct-mapped, an address that shared
    /// its place with another (about one in five of the synthetic trace's 63,000) went to
    /// the map behind whenever the other had been named since: 2% of its flame graph.
    #[inline]
    pub(super) fn named(&mut self, addr: u64) -> Named {
        let slot = Self::slot(addr);
        let (k, v) = self.front[slot];
        if k == addr {
            return v;
        }
        let (k, v) = self.front[slot + 1];
        if k == addr {
            self.front.swap(slot, slot + 1);
            return v;
        }
        let v = self.at_slow(addr);
        self.front[slot + 1] = self.front[slot];
        self.front[slot] = (addr, v);
        v
    }

    pub(super) fn at_slow(&mut self, addr: u64) -> Named {
        if let Some(&v) = self.cache.get(&addr) {
            return v;
        }
        let syms = self.syms;
        let image = syms.image_of(addr, None);
        let at = match image {
            Some(im) => match im.function_index(addr) {
                Some(i) => {
                    let f = &im.functions()[i];
                    (self.intern(&f.name), true, f.start == addr)
                }
                None => (self.intern(&im.unknown(addr)), false, false),
            },
            None => (self.intern(&format!("{addr:#x}")), false, false),
        };
        let len = image
            .and_then(|im| im.code_at(addr))
            .map_or(0, |c| insn_len(c, addr) as u8);
        let v = Named { at, len };
        self.cache.insert(addr, v);
        v
    }

    /// Address after the call instruction at `ip` (0 when its bytes are unknown).
    pub(super) fn return_address(&mut self, ip: u64) -> u64 {
        Self::after(ip, self.named(ip).len)
    }

    pub(super) fn after(ip: u64, len: u8) -> u64 {
        if len == 0 {
            0
        } else {
            ip + len as u64
        }
    }
}
