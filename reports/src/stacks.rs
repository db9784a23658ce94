//! Call stacks rebuilt from the `branches` rows, folded stacks and the flame graph.
//!
//! The walker keeps a stack of frames (function, expected return address). Every row's
//! `insns` (the instructions up to and including its branch) go to the stack current
//! before the row's branch, so the stacks' total is the trace's instruction count. Rules:
//!
//! - **call / call_ind** push a frame for the target's function, expecting a return to
//!   the instruction after the call.
//! - **ret** pops to the innermost frame expecting its target (frames above it are
//!   dropped: they returned without a traced `ret`, or were unwound). A **mismatched
//!   return** (no frame expects the target, e.g. leaving a function entered before tracing
//!   began) pops the top frame only.
//! - **jmp / jmp_ind** to another function: at its first instruction a **tail call**
//!   (the top frame now is that function); into the middle of a function that a frame
//!   below runs, a **longjmp** (unwind to that frame); otherwise the top frame moves.
//! - **far** (interrupts, kernel entry/exit) and **tracing resumed elsewhere** (a
//!   FUP.PGE away from where tracing stopped: a **signal** handler under user-only
//!   tracing) push an *async* frame that expects to resume where execution left; a
//!   later far transfer or resume there pops it (`rt_sigreturn`, `iret`).
//! - **Gaps** (an `error`, `overflow` or `resync` event) lose the stack: the walk starts
//!   again from the next row's function, under a `[gap]` root.
//! - Before each row the top frame is made to hold the row's `ip` when a symbol says it
//!   belongs to another function (execution fell through or the rules above missed a
//!   transfer). Code without symbols keeps the name of the call target it was entered by.
//! - Stacks deeper than [`MAX_DEPTH`] keep their outermost frames and count the rest in
//!   the deepest one.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, PrimitiveArray};
use tracemill_schemas::{BranchKind, EventKind};

use crate::input::{Input, Table};
use crate::parquet_keys::{self, Keyed, NULL_KEY};
use crate::source::Source;
use crate::symbols::Symbolizer;
use crate::util::{col, insn_len, kind_codes, AddrMap, Chunked};

pub const MAX_DEPTH: usize = 256;

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
struct Named {
    at: FunctionAt,
    len: u8,
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

    const FRONT: usize = 1 << 18;

    /// (id, known symbol, is the function's entry) of the code at `addr`.
    #[inline]
    pub fn at(&mut self, addr: u64) -> FunctionAt {
        self.named(addr).at
    }

    /// The first of `addr`'s two places in `front` (an even index).
    #[inline]
    fn slot(addr: u64) -> usize {
        ((addr ^ (addr >> 16)) as usize) & (Self::FRONT - 2)
    }

    /// Ask the processor to load `addr`'s place in `front`, for a lookup soon: naming a
    /// row group's dictionaries (59 M lookups on the 1 GiB synthetic trace) missed the
    /// processor's caches, one lookup after the other. Eight ahead, their share of the
    /// walk's own time fell from 14% to 6%.
    #[inline]
    #[allow(unsafe_code)]
    fn prefetch(&self, addr: u64) {
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
    fn named(&mut self, addr: u64) -> Named {
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

    fn at_slow(&mut self, addr: u64) -> Named {
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
    fn return_address(&mut self, ip: u64) -> u64 {
        Self::after(ip, self.named(ip).len)
    }

    fn after(ip: u64, len: u8) -> u64 {
        if len == 0 {
            0
        } else {
            ip + len as u64
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Frame {
    node: u32,
    func: u32,
    /// Address the frame returns (or resumes) to; 0: unknown.
    ret: u64,
    /// Entered asynchronously (interrupt, signal): left by a far transfer or a resume.
    far: bool,
    /// When the frame was entered (tsc), for timelines.
    begin: Option<u64>,
}

/// A frame that ended, for timelines.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub func: u32,
    pub depth: u32,
    pub begin: u64,
    pub end: u64,
}

/// A node of the stack trie: a function called from its parent's stack.
#[derive(Clone, Copy, Debug, Default)]
struct Node {
    parent: u32,
    func: u32,
    /// First child (0: none, [`BIG`]: the children are in `Stacks::big`).
    first: u32,
    /// Next child of the same parent (0: none).
    next: u32,
}

/// `Node::first` of a node with more than [`FANOUT`] children.
const BIG: u32 = u32::MAX;
/// Children a node keeps in its list before they move to a map.
const FANOUT: u32 = 8;

/// The stack trie and its weights.
///
/// A node's children are a list, the last one asked for first: a push is mostly a loop
/// calling the same function again (found at once) or a call never made from this stack
/// (the list is short or empty, and a new node is made). A map of millions of nodes was
/// probed on every push before, missing the cache: half of the walk on the synthetic
/// trace, where half the pushes make a new node. Nodes with many callees (a dispatcher,
/// an interpreter's loop) keep them in a map instead, so no list is long.
pub struct Stacks {
    /// Node 0 is the root (no function).
    nodes: Chunked<Node>,
    /// Children of the nodes whose `first` is [`BIG`], by (parent, function).
    big: AddrMap<u64, u32>,
    pub instructions: Chunked<u64>,
    /// Per node, cycles: empty unless the stacks were built to weigh by cycles.
    pub cycles: Chunked<u64>,
    pub max_depth_hit: u64,
    /// Calls counted in their caller because the trie had no node id left.
    pub full: u64,
    pub gaps: u64,
    pub mismatched_returns: u64,
    pub longjmps: u64,
    pub async_entries: u64,
    pub rows: u64,
    /// Rows read as dictionary keys ([`parquet_keys`]); the others through arrow-rs.
    pub rows_by_keys: u64,
    /// Events the walk took (gaps, and enables that do not resume where tracing stopped:
    /// [`Resolver`]); those that matter (gaps, enables, disables) the events reader read
    /// (the last may come after the last row), and how many of them as dictionary keys.
    pub events: u64,
    pub events_read: u64,
    pub events_by_keys: u64,
    pub has_cycles: bool,
}

impl Stacks {
    fn new(cycles: bool) -> Self {
        let mut st = Stacks {
            nodes: Chunked::new(),
            big: AddrMap::default(),
            instructions: Chunked::new(),
            cycles: Chunked::new(),
            max_depth_hit: 0,
            full: 0,
            gaps: 0,
            mismatched_returns: 0,
            longjmps: 0,
            async_entries: 0,
            rows: 0,
            rows_by_keys: 0,
            events: 0,
            events_read: 0,
            events_by_keys: 0,
            has_cycles: false,
        };
        st.nodes.push(Node {
            parent: u32::MAX,
            func: u32::MAX,
            first: 0,
            next: 0,
        });
        st.instructions.push(0);
        if cycles {
            st.cycles.push(0);
        }
        st
    }

    /// Are cycles counted?
    fn counts_cycles(&self) -> bool {
        !self.cycles.is_empty()
    }

    /// Number of nodes, the root included.
    fn len(&self) -> usize {
        self.nodes.len()
    }

    /// (parent, function) of node `n` (the root's are `u32::MAX`).
    fn node(&self, n: usize) -> (u32, u32) {
        (self.nodes[n].parent, self.nodes[n].func)
    }

    /// The node for `func` called from `parent`, made if new.
    #[inline]
    fn child(&mut self, parent: u32, func: u32) -> u32 {
        let first = self.nodes[parent as usize].first;
        if first != 0 && first != BIG && self.nodes[first as usize].func == func {
            return first;
        }
        self.child_slow(parent, func)
    }

    fn child_slow(&mut self, parent: u32, func: u32) -> u32 {
        let p = parent as usize;
        let first = self.nodes[p].first;
        // Node ids are `u32` and `BIG` is not one: past 4 G nodes (about 100 GB) a new
        // callee is counted in its caller, as past the depth limit.
        let full = self.nodes.len() >= BIG as usize;
        if first == BIG {
            let key = big_key(parent, func);
            if let Some(&c) = self.big.get(&key) {
                return c;
            }
            if full {
                self.full += 1;
                return parent;
            }
            let n = self.push_node(parent, func, 0);
            self.big.insert(key, n);
            return n;
        }
        let (mut prev, mut c, mut len) = (0u32, first, 0u32);
        while c != 0 {
            let node = self.nodes[c as usize];
            if node.func == func {
                if prev == 0 {
                    return c;
                }
                // To the front: the next push of it from here is found at once.
                self.nodes[prev as usize].next = node.next;
                self.nodes[c as usize].next = first;
                self.nodes[p].first = c;
                return c;
            }
            (prev, c, len) = (c, node.next, len + 1);
        }
        if full {
            self.full += 1;
            return parent;
        }
        let n = self.push_node(parent, func, first);
        if len < FANOUT {
            self.nodes[p].first = n;
        } else {
            let mut c = n;
            while c != 0 {
                self.big
                    .insert(big_key(parent, self.nodes[c as usize].func), c);
                c = self.nodes[c as usize].next;
            }
            self.nodes[p].first = BIG;
        }
        n
    }

    fn push_node(&mut self, parent: u32, func: u32, next: u32) -> u32 {
        let n = self.nodes.len() as u32;
        self.nodes.push(Node {
            parent,
            func,
            first: 0,
            next,
        });
        self.instructions.push(0);
        if self.counts_cycles() {
            self.cycles.push(0);
        }
        n
    }

    /// Add `other`'s stacks (its function ids mapped by `funcs` to this trie's), node by
    /// node: the same path of functions is the same node. Bundles are walked apart and
    /// added this way, so no stack ever spans two bundles (nor two threads). `other`'s root
    /// goes to node `root` of this trie (0: the root; a thread's frame).
    fn merge_under(&mut self, other: &Stacks, funcs: &[u32], root: u32) {
        let mut nodes = vec![root; other.len()];
        for i in 1..other.len() {
            let (p, f) = other.node(i);
            // A node comes after its parent, so the parent is mapped already.
            let n = self.child(nodes[p as usize], funcs[f as usize]);
            nodes[i] = n;
            self.instructions[n as usize] += other.instructions[i];
            if other.counts_cycles() {
                self.cycles[n as usize] += other.cycles[i];
            }
        }
        self.instructions[root as usize] += other.instructions[0];
        if other.counts_cycles() {
            self.cycles[root as usize] += other.cycles[0];
        }
        self.max_depth_hit += other.max_depth_hit;
        self.full += other.full;
        self.gaps += other.gaps;
        self.mismatched_returns += other.mismatched_returns;
        self.longjmps += other.longjmps;
        self.async_entries += other.async_entries;
        self.rows += other.rows;
        self.rows_by_keys += other.rows_by_keys;
        self.has_cycles |= other.has_cycles;
    }

    /// Per node, its own stack's instructions or cycles.
    fn weights(&self, cycles: bool) -> &Chunked<u64> {
        if cycles {
            &self.cycles
        } else {
            &self.instructions
        }
    }

    /// Distinct stacks with a weight of their own.
    pub fn distinct(&self, cycles: bool) -> usize {
        let w = self.weights(cycles);
        w.iter().skip(1).filter(|&&v| v > 0).count()
    }

    /// Total weight (instructions or cycles) of every node.
    pub fn total(&self, cycles: bool) -> u64 {
        self.weights(cycles).iter().sum()
    }

    /// The folded path of node `n`: its frames' names, outermost first, joined by `;`.
    /// `names` are already cleaned (`folded_names`); `parts` is scratch space.
    fn path(&self, names: &[String], n: usize, parts: &mut Vec<u32>, out: &mut String) {
        parts.clear();
        let mut m = n as u32;
        while m != 0 {
            let (p, f) = self.node(m as usize);
            parts.push(f);
            m = p;
        }
        out.clear();
        for (i, f) in parts.iter().rev().enumerate() {
            if i > 0 {
                out.push(';');
            }
            out.push_str(&names[*f as usize]);
        }
    }

    /// Write every stack with weight as a folded line (`outer;...;inner weight`), in the
    /// order the stacks were first seen; memory stays one line.
    pub fn write_folded(
        &self,
        names: &[String],
        cycles: bool,
        mut out: impl Write,
    ) -> std::io::Result<usize> {
        let w = self.weights(cycles);
        let names = folded_names(names);
        let (mut line, mut parts) = (String::new(), Vec::new());
        let mut n = 0;
        for (i, &wt) in w.iter().enumerate().skip(1) {
            if wt > 0 {
                self.path(&names, i, &mut parts, &mut line);
                writeln!(out, "{line} {wt}")?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Folded lines of the stacks that weigh at least `min` with their callees (lighter
    /// stacks add their weight to their nearest such caller, so the total stays the
    /// same): what a flame graph can draw, whatever the number of stacks.
    ///
    /// The lines come sorted, as inferno wants them, made in that order by walking the
    /// trie: no line is compared with another (sorting 300,000 lines of 200 frames each
    /// was a tenth of a flame graph's time, in `memcmp`). Below a node, a callee `c`
    /// gives two runs of lines: its own line, which starts `c ` (then the weight), and its
    /// callees' lines, which start `c;`. No such start is another's prefix (names hold no
    /// `;` or space), so the runs of all callees, ordered by their starts, give the lines
    /// in sorted order. A callee's two runs are not always together: `f.cold;...` sorts
    /// between `f 10` and `f;g 5`, because `.` sorts before `;`.
    ///
    /// The subtree sums are made in place of the weights, and the weights made again
    /// after: a copy of the 74 M weights of the 1 GiB synthetic trace's stacks was 600 MB
    /// of new pages for the kernel to clear, 1.3 s of the flame graph's time.
    pub fn folded(&mut self, names: &[String], cycles: bool, min: u64) -> FoldedLines {
        let n = self.len();
        let (nodes, sub) = if cycles {
            (&self.nodes, &mut self.cycles)
        } else {
            (&self.nodes, &mut self.instructions)
        };
        // Nodes are created after their parent: a reverse pass sums subtrees.
        for i in (1..n).rev() {
            let p = nodes[i].parent as usize;
            sub[p] += sub[i];
        }
        let lines = Self::folded_sums(nodes, sub, names, min);
        // A forward pass takes each subtree from its parent's sum: when node `i` is
        // taken, its own children (made after it) have not been, so it still holds its
        // subtree's sum.
        for i in 1..n {
            let p = nodes[i].parent as usize;
            sub[p] -= sub[i];
        }
        lines
    }

    /// [`Stacks::folded`] from the subtree sums `sub`.
    fn folded_sums(
        nodes: &Chunked<Node>,
        sub: &Chunked<u64>,
        names: &[String],
        min: u64,
    ) -> FoldedLines {
        // The nodes kept (a kept node's parent is kept: its subtree weighs more), in node
        // order, so a parent comes before its children. A kept node's own weight is its
        // subtree's less its kept children's: a light callee's weight stays with it.
        let mut kept: Vec<u32> = vec![0];
        let mut own: Vec<u64> = vec![sub[0]];
        let mut parent: Vec<u32> = vec![u32::MAX];
        let mut index: AddrMap<u32, u32> = [(0, 0)].into_iter().collect();
        for (i, &s) in sub.iter().enumerate().skip(1) {
            if s >= min.max(1) {
                let p = index[&nodes[i].parent];
                own[p as usize] -= s;
                index.insert(i as u32, kept.len() as u32);
                kept.push(i as u32);
                own.push(s);
                parent.push(p);
            }
        }
        // The children of every kept node, as one array sliced by `first`.
        let k = kept.len();
        let mut first = vec![0u32; k + 1];
        for &p in &parent[1..] {
            first[p as usize + 1] += 1;
        }
        for i in 0..k {
            first[i + 1] += first[i];
        }
        let mut kids = vec![0u32; k - 1];
        let mut fill = first.clone();
        for (c, &p) in parent.iter().enumerate().skip(1) {
            kids[fill[p as usize] as usize] = c as u32;
            fill[p as usize] += 1;
        }
        let names = folded_names(names);
        let name = |c: u32| names[nodes[kept[c as usize] as usize].func as usize].as_str();
        // A run: a node's own line (`Own`) or its callees' lines (`Callees`).
        #[derive(Clone, Copy)]
        enum Run {
            Own(u32),
            Callees(u32),
            Small,
        }
        const SMALL: &str = "[small stacks]";
        let start = |r: &Run| -> (&str, u8) {
            match *r {
                Run::Own(c) => (name(c), b' '),
                Run::Callees(c) => (name(c), b';'),
                Run::Small => (SMALL, b' '),
            }
        };
        let before = |a: &Run, b: &Run| {
            let ((na, sa), (nb, sb)) = (start(a), start(b));
            na.bytes().chain([sa]).cmp(nb.bytes().chain([sb]))
        };
        // The runs below kept node `p`, in order, pushed reversed onto `todo` with the
        // length of `p`'s path.
        let mut runs: Vec<Run> = Vec::new();
        let mut tie = false;
        let mut push_runs = |p: u32, cut: usize, todo: &mut Vec<(Run, usize, bool)>| {
            runs.clear();
            for &c in &kids[first[p as usize] as usize..first[p as usize + 1] as usize] {
                if own[c as usize] > 0 {
                    runs.push(Run::Own(c));
                }
                if first[c as usize + 1] > first[c as usize] {
                    runs.push(Run::Callees(c));
                }
            }
            // The root's own weight is what fell below `min` at the top: a line of its own.
            if p == 0 && own[0] > 0 {
                runs.push(Run::Small);
            }
            runs.sort_unstable_by(&before);
            // Two callees of one name (names that differ only in a `;` or a space, both
            // written `_`): their lines interleave, which runs cannot say.
            tie |= runs.windows(2).any(|w| before(&w[0], &w[1]).is_eq());
            todo.extend(runs.iter().rev().map(|&r| (r, cut, p != 0)));
        };
        let mut out = FoldedLines::default();
        // `path` holds the frames of the node whose runs are being made.
        let mut path = String::new();
        // (run, length of its caller's path, whether it has a caller).
        let mut todo: Vec<(Run, usize, bool)> = Vec::new();
        push_runs(0, 0, &mut todo);
        while let Some((run, cut, nested)) = todo.pop() {
            path.truncate(cut);
            match run {
                Run::Small => out.push(SMALL, own[0]),
                Run::Own(c) | Run::Callees(c) => {
                    if nested {
                        path.push(';');
                    }
                    path.push_str(name(c));
                    match run {
                        Run::Own(_) => out.push(&path, own[c as usize]),
                        _ => push_runs(c, path.len(), &mut todo),
                    }
                }
            }
        }
        if tie {
            let mut lines: Vec<&str> = out.iter().collect();
            lines.sort_unstable();
            let mut sorted = FoldedLines::default();
            for l in lines {
                let (path, weight) = l.rsplit_once(' ').expect("a line ends with its weight");
                sorted.push(path, weight.parse().expect("a weight"));
            }
            return sorted;
        }
        out
    }
}

/// Folded lines (`outer;...;inner weight`), in buffers of up to 64 MiB that are never
/// moved: the lines of the 1 GiB synthetic trace's flame graph take 700 MB, which one
/// `String` copied at every doubling.
#[derive(Debug, Default)]
pub struct FoldedLines {
    text: Vec<String>,
    /// (buffer, start, end) of every line.
    ends: Vec<(usize, usize, usize)>,
}

impl FoldedLines {
    const BUFFER: usize = 64 << 20;

    fn push(&mut self, path: &str, weight: u64) {
        let need = path.len() + 21;
        match self.text.last() {
            Some(t) if t.capacity() - t.len() >= need => {}
            // From 1 MiB, doubling up to 64 MiB: a small graph takes little.
            last => {
                let size = last.map_or(1 << 20, |t| (2 * t.capacity()).min(Self::BUFFER));
                self.text.push(String::with_capacity(size.max(need)))
            }
        }
        let b = self.text.len() - 1;
        let t = &mut self.text[b];
        let start = t.len();
        let _ = write!(t, "{path} {weight}");
        self.ends.push((b, start, t.len()));
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.ends.iter().map(|&(b, s, e)| &self.text[b][s..e])
    }
}

/// The key of (parent, function) in `Stacks::big`. The map's hasher is one multiply
/// (`AddrMap`), whose low bits, the ones that pick the bucket, depend only on the key's
/// low bits: with the function in the low half, every node of a function called from many
/// stacks fell in one bucket (98% of a flame graph's time on a 200 M-row trace).
/// Multiplying by an odd constant and rotating the high half down is a bijection, so keys
/// stay unique and every bit of both ids reaches the bucket.
fn big_key(parent: u32, func: u32) -> u64 {
    (((parent as u64) << 32) | func as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(32)
}

/// Function names as a folded line can hold them: `;` separates frames and a space the
/// weight, so both become `_` (cleaned once per name, not once per line).
fn folded_names(names: &[String]) -> Vec<String> {
    names.iter().map(|n| n.replace([';', ' '], "_")).collect()
}

/// A trace-level event that matters to stacks.
#[derive(Clone, Copy, Debug)]
struct Ev {
    seq: u64,
    kind: EventKind,
    ip: Option<u64>,
    /// For an enable the walk takes: where tracing was last disabled (0: never), set by
    /// [`Resolver`].
    disable: u64,
}

/// What the events reader settles before the walk sees the events: a disable only says
/// where tracing stopped, and an enable that resumes there (a syscall out of user-only
/// tracing, and back) changes no stack. The walk takes the other enables, each with
/// where tracing stopped before it, and the gaps. The 1 GiB synthetic trace has 42 M
/// disables and as many enables, 39 M of which resume: the walk took them one by one,
/// and its runs of rows stopped at each.
///
/// The events reader settles each batch as it reads it: made whole, then dropped, the
/// 84 M events were 2.7 GB written for nothing.
#[derive(Clone, Default)]
struct Resolver {
    /// Events seen (those that matter to the walk, kept or not).
    seen: u64,
    last_disable: u64,
    /// The highest `seq` so far, and a warning once an event comes after a later one.
    last_seq: u64,
    out_of_order: Option<String>,
}

impl Resolver {
    /// Does the walk need `e` (events in table order)? A kept enable gets its `disable`.
    fn keep(&mut self, e: &mut Ev) -> bool {
        self.seen += 1;
        if e.seq < self.last_seq && self.out_of_order.is_none() {
            self.out_of_order = Some(format!(
                "events table not in seq order (seq {} after {}): such events are applied late",
                e.seq, self.last_seq
            ));
        }
        self.last_seq = self.last_seq.max(e.seq);
        match e.kind {
            EventKind::Disable => {
                self.last_disable = e.ip.unwrap_or(0);
                false
            }
            EventKind::Enable => match e.ip {
                Some(ip) if !resumes(self.last_disable, ip) => {
                    e.disable = self.last_disable;
                    true
                }
                _ => false,
            },
            // A resync without an ip is the note about bytes before the first PSB.
            EventKind::Resync => e.ip.is_some(),
            _ => true,
        }
    }
}

/// Reads the events that matter to stacks, a batch at a time, on a thread of its own: so
/// memory holds a few batches of them (a 1 GiB trace has 84 M enable and disable events:
/// read whole, 2.7 GB).
struct EventReader<'a> {
    batches: Option<EventBatches<'a>>,
    warnings: Vec<String>,
    /// Events read as dictionary keys (that matter to the walk).
    by_keys: Arc<AtomicU64>,
    /// Shared with the batches, whichever way each row group is read.
    resolver: Arc<Mutex<Resolver>>,
}

type EventBatches<'a> = Box<dyn Iterator<Item = Result<Vec<Ev>>> + Send + 'a>;

/// The events table's columns the stacks read.
const EVENT_COLUMNS: [&str; 3] = ["seq", "kind", "ip"];

impl<'a> EventReader<'a> {
    fn open(input: &'a Input) -> Self {
        let mut warnings = Vec::new();
        let by_keys = Arc::new(AtomicU64::new(0));
        let resolver = Arc::new(Mutex::new(Resolver::default()));
        let batches = match input.table("events") {
            Err(_) => {
                warnings.push(
                    "no events table: gaps and signal entries are not seen by the stacks".into(),
                );
                None
            }
            Ok(t) => match Self::batches(t, by_keys.clone(), resolver.clone()) {
                Ok(it) => Some(it),
                Err(e) => {
                    warnings.push(format!("{e:#}: gaps are not seen by the stacks"));
                    None
                }
            },
        };
        EventReader {
            batches,
            warnings,
            by_keys,
            resolver,
        }
    }

    /// The resolver's state once the batches are read.
    fn resolver(&self) -> Resolver {
        lock(&self.resolver).clone()
    }

    /// A Parquet table's row groups are read as dictionary keys where they can be (as
    /// `branches`' are: through arrow-rs, the 1 GiB synthetic trace's events took 1.45 s,
    /// a fifth of a `branches` reader's time), others through arrow-rs.
    fn batches(
        t: &'a Table,
        by_keys: Arc<AtomicU64>,
        resolver: Arc<Mutex<Resolver>>,
    ) -> Result<EventBatches<'a>> {
        t.require(&EVENT_COLUMNS)?;
        let shared = resolver.clone();
        let settled = move |b: Result<arrow_array::RecordBatch>| {
            let mut events = events_of(&b?)?;
            let mut r = lock(&shared);
            events.retain_mut(|e| r.keep(e));
            Ok(events)
        };
        let Some(footer) = t.parquet_footer()? else {
            return Ok(Box::new(t.batches(&EVENT_COLUMNS)?.map(settled)));
        };
        let file = File::open(&t.path).ok();
        let mut scratch = KeyedEvents::default();
        let groups = footer.metadata().num_row_groups();
        Ok(Box::new((0..groups).flat_map(
            move |g| -> EventBatches<'a> {
                let group = footer.metadata().row_group(g);
                let keyed = (file.as_ref()).and_then(|f| scratch.read(f, group, &resolver).ok());
                if let Some((batches, n)) = keyed {
                    by_keys.fetch_add(n, Ordering::Relaxed);
                    return Box::new(batches.into_iter().map(Ok));
                }
                match t.row_group_batches(&footer, &EVENT_COLUMNS, g) {
                    Ok(it) => Box::new(it.map(settled.clone())),
                    Err(e) => Box::new(std::iter::once(Err(e))),
                }
            },
        )))
    }

    /// The next batch's events that matter, in table order; `None` at the end (or at an
    /// unreadable batch, with a warning).
    fn next_batch(&mut self) -> Option<Vec<Ev>> {
        match self.batches.as_mut()?.next() {
            Some(Ok(b)) => Some(b),
            Some(Err(e)) => {
                self.warnings
                    .push(format!("{e:#}: later gaps are not seen by the stacks"));
                self.batches = None;
                None
            }
            None => {
                self.batches = None;
                None
            }
        }
    }
}

/// `m`'s value, also after a thread panicked holding it (the value is then as the panic
/// left it: the events reader's state, which a panic would be a bug in anyway).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Does the walk look at events of this kind?
fn matters(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::Error
            | EventKind::Overflow
            | EventKind::Resync
            | EventKind::Enable
            | EventKind::Disable
    )
}

/// The events that matter in a batch read through arrow-rs.
fn events_of(b: &arrow_array::RecordBatch) -> Result<Vec<Ev>> {
    let (Ok(seq), Ok(ip), Ok(kinds)) = (
        col::<UInt64Type>(b, "seq"),
        col::<UInt64Type>(b, "ip"),
        kind_codes(b, "kind", EventKind::from_name, |k| k as u8),
    ) else {
        anyhow::bail!("events table unreadable");
    };
    let mut out = Vec::new();
    for (i, &k) in kinds.iter().enumerate() {
        let Some(kind) = EventKind::from_code(k).filter(|&k| matters(k)) else {
            continue;
        };
        out.push(Ev {
            seq: seq.value(i),
            kind,
            ip: (!ip.is_null(i)).then(|| ip.value(i)),
            disable: 0,
        });
    }
    Ok(out)
}

/// A reader's buffers for the events of a row group read as dictionary keys.
#[derive(Default)]
struct KeyedEvents {
    seq: Keyed<u64>,
    kind: Keyed<Vec<u8>>,
    ip: Keyed<u64>,
    pages: parquet_keys::Scratch,
}

impl KeyedEvents {
    /// Events per batch, at most: a row group's kept events in one could be 16 MB (a
    /// row group of the 1 GiB synthetic trace's events has 523,000 events of 32 bytes, if
    /// all were kept) in the channel, four messages deep.
    const BATCH: usize = 1 << 16;

    /// The events the walk takes in one row group ([`Resolver`]), in batches, and how
    /// many mattered. `resolver` moves on only when the whole row group was read: one
    /// that cannot be is read again through arrow-rs.
    fn read(
        &mut self,
        file: &File,
        group: &parquet::file::metadata::RowGroupMetaData,
        resolver: &Mutex<Resolver>,
    ) -> Result<(Vec<Vec<Ev>>, u64)> {
        let rows = group.num_rows() as usize;
        let (map, chunks) = parquet_keys::map_chunks(file, group, &EVENT_COLUMNS)?;
        let pages = &mut self.pages;
        parquet_keys::read_chunk_into(&map, chunks[0], rows, &mut self.seq, pages)?;
        parquet_keys::read_chunk_into(&map, chunks[1], rows, &mut self.kind, pages)?;
        parquet_keys::read_chunk_into(&map, chunks[2], rows, &mut self.ip, pages)?;
        // Per kind value, the kind when it matters to the walk.
        let kinds: Vec<Option<EventKind>> = (self.kind.values.iter())
            .map(|v| {
                std::str::from_utf8(v)
                    .ok()
                    .and_then(EventKind::from_name)
                    .filter(|&k| matters(k))
            })
            .collect();
        let (seq, ip) = (&self.seq, &self.ip);
        let mut r = lock(resolver).clone();
        let seen = r.seen;
        let mut out = vec![Vec::new()];
        for (i, &k) in self.kind.keys.iter().enumerate() {
            // A null kind (NULL_KEY, past the values) is no event.
            let Some(&Some(kind)) = kinds.get(k as usize) else {
                continue;
            };
            let seq = *seq
                .values
                .get(seq.keys[i] as usize)
                .ok_or_else(|| anyhow::anyhow!("an event's seq is null"))?;
            let ip = ip.values.get(ip.keys[i] as usize).copied();
            let mut e = Ev {
                seq,
                kind,
                ip,
                disable: 0,
            };
            if !r.keep(&mut e) {
                continue;
            }
            let batch = out.last_mut().expect("one batch");
            batch.push(e);
            if batch.len() == Self::BATCH {
                out.push(Vec::with_capacity(Self::BATCH));
            }
        }
        let n = r.seen - seen;
        *lock(resolver) = r;
        Ok((out, n))
    }
}

/// The events as the walk takes them: those before a row, from the reader's batches.
struct Events {
    batches: std::sync::mpsc::Receiver<Vec<Ev>>,
    /// The batch being taken from, and the first event not taken.
    batch: Vec<Ev>,
    at: usize,
}

impl Events {
    /// Move the events before row `end` to `out`, as many at a time as there are in the
    /// batch at hand (one at a time was 3% of the flame graph's time). The decoder writes
    /// events in `seq` order; in a table written otherwise, an event behind a later one
    /// is applied with or after that one, and a warning says so.
    fn until(&mut self, end: u64, out: &mut Vec<Ev>) {
        loop {
            if self.at == self.batch.len() {
                match self.batches.recv() {
                    Ok(b) => (self.batch, self.at) = (b, 0),
                    Err(_) => return,
                }
                continue;
            }
            let rest = &self.batch[self.at..];
            let n = rest.iter().take_while(|e| e.seq < end).count();
            out.extend_from_slice(&rest[..n]);
            self.at += n;
            if self.at < self.batch.len() {
                return;
            }
        }
    }
}

/// Does `target` resume at `at` (the same instruction, or just after one at `at`)?
fn resumes(at: u64, target: u64) -> bool {
    at != 0 && target >= at && target - at <= 15
}

/// How many frames of the stack return to each bucket of addresses: a `ret` whose
/// target's bucket is empty matches no frame, without a look through the stack. The
/// synthetic trace's random walk makes millions of such returns with 256 frames on the
/// stack, and looking through them all was a tenth of the walk.
struct ReturnFilter {
    counts: Box<[u16]>,
}

impl ReturnFilter {
    /// 4,096 buckets (8 KiB): a stack of [`MAX_DEPTH`] frames fills about 6% of them.
    const BUCKETS: usize = 1 << 12;

    fn new() -> Self {
        ReturnFilter {
            counts: vec![0; Self::BUCKETS].into_boxed_slice(),
        }
    }

    #[inline]
    fn bucket(ret: u64) -> usize {
        ((ret ^ (ret >> 12) ^ (ret >> 24)) as usize) & (Self::BUCKETS - 1)
    }

    fn add(&mut self, ret: u64) {
        self.counts[Self::bucket(ret)] += 1;
    }

    fn remove(&mut self, ret: u64) {
        self.counts[Self::bucket(ret)] -= 1;
    }

    /// Could a frame return to `ret`? `false` is sure; `true` asks for a look.
    #[inline]
    fn may_hold(&self, ret: u64) -> bool {
        self.counts[Self::bucket(ret)] != 0
    }
}

/// The bit of a packed function id that says its symbol is known. Ids stay below it: 2 G
/// function names would take more than 64 GB.
const KNOWN: u32 = 1 << 31;

struct Walker<'a, 's, F: FnMut(Span)> {
    f: &'a mut Functions<'s>,
    st: Stacks,
    stack: Vec<Frame>,
    /// Frames of `stack` entered asynchronously (`Frame::far`): without any, nothing can
    /// resume one, and no look through the stack is needed. The synthetic trace has 3 M
    /// enables that resume nowhere, each of which looked through 256 frames.
    far_frames: usize,
    /// The `ret` of every frame of `stack`.
    rets: ReturnFilter,
    on_span: F,
    tsc: Option<u64>,
    /// Weights not yet added to their node: most rows (conditional branches, jumps) leave
    /// the stack as it was, and an add per row to a trie of tens of millions of nodes was
    /// a cache miss per row.
    pending: Pending,
    /// Per value of a keyed row group's dictionaries: its function, and for `ip` the
    /// return address of a call there (0: unknown). Kept to reuse the allocations. An
    /// `ip`'s function is its id with [`KNOWN`] set for a known symbol: four bytes, not
    /// eight, so more of the table every row reads stays in the processor's caches.
    ip_at: Vec<u32>,
    ip_ret: Vec<u64>,
    target_at: Vec<FunctionAt>,
}

/// Instructions and cycles of consecutive rows at one node.
#[derive(Default)]
struct Pending {
    node: u32,
    instructions: u64,
    cycles: u64,
}

impl<'s, F: FnMut(Span)> Walker<'_, 's, F> {
    /// Add the pending weights to their node.
    fn flush(&mut self) {
        let p = std::mem::take(&mut self.pending);
        self.add(p);
    }

    #[inline(always)]
    fn add(&mut self, p: Pending) {
        self.st.instructions[p.node as usize] += p.instructions;
        // Not 0 only when the stacks count cycles.
        if p.cycles != 0 {
            self.st.cycles[p.node as usize] += p.cycles;
        }
    }

    fn pop_to(&mut self, len: usize) {
        while self.stack.len() > len {
            let fr = self.stack.pop().expect("non-empty");
            self.far_frames -= fr.far as usize;
            self.rets.remove(fr.ret);
            if let (Some(b), Some(e)) = (fr.begin, self.tsc) {
                (self.on_span)(Span {
                    func: fr.func,
                    depth: self.stack.len() as u32,
                    begin: b,
                    end: e,
                });
            }
        }
    }

    fn push(&mut self, func: u32, ret: u64, far: bool) {
        if self.stack.len() >= MAX_DEPTH {
            self.st.max_depth_hit += 1;
            return;
        }
        let parent = self.stack.last().map_or(0, |f| f.node);
        let node = self.st.child(parent, func);
        self.rets.add(ret);
        self.far_frames += far as usize;
        self.stack.push(Frame {
            node,
            func,
            ret,
            far,
            begin: self.tsc,
        });
    }

    /// The innermost frame entered asynchronously that `at` resumes.
    fn resumed(&self, at: u64) -> Option<usize> {
        if self.far_frames == 0 {
            return None;
        }
        self.stack.iter().rposition(|f| f.far && resumes(f.ret, at))
    }

    /// The top frame now runs `func` (tail call, fall-through).
    fn replace_top(&mut self, func: u32) {
        let Some(top) = self.stack.last().copied() else {
            self.push(func, 0, false);
            return;
        };
        if top.func == func {
            return;
        }
        self.pop_to(self.stack.len() - 1);
        self.push(func, top.ret, top.far);
    }

    fn gap(&mut self) {
        self.st.gaps += 1;
        self.pop_to(0);
        self.push(0, 0, false);
    }

    fn event(&mut self, e: Ev) {
        self.st.events += 1;
        match e.kind {
            // Resyncs without an ip, disables and enables that resume where tracing
            // stopped are not here (`Resolver`).
            EventKind::Error | EventKind::Overflow | EventKind::Resync => self.gap(),
            EventKind::Enable => {
                let Some(ip) = e.ip else { return };
                if self.stack.is_empty() {
                    return;
                }
                if let Some(k) = self.resumed(ip) {
                    self.pop_to(k);
                    return;
                }
                let (func, known, _) = self.f.at(ip);
                let top = self.stack.last().map(|f| f.func);
                if known && top != Some(func) {
                    self.st.async_entries += 1;
                    self.push(func, e.disable, true);
                }
            }
            _ => {}
        }
    }

    /// Walk one batch of rows; `seq` is the first one's, `prev_cyc` the last `cycles`
    /// value seen.
    fn batch(&mut self, rows: &Rows, events: &[Ev], seq: &mut u64, prev_cyc: &mut Option<u64>) {
        // Validity looked up once per batch, not through `Array::is_null` per row.
        let valid =
            |a: &PrimitiveArray<UInt64Type>, i: usize| a.nulls().is_none_or(|n| n.is_valid(i));
        let tvalues = rows.target.values();
        let tnull = rows.target.null_count() > 0;
        let mut evs = events.iter().copied().peekable();
        let mut pending = std::mem::take(&mut self.pending);
        self.st.rows += rows.ip.len() as u64;
        for i in 0..rows.ip.len() {
            while let Some(e) = evs.next_if(|e| e.seq <= *seq) {
                self.event(e);
            }
            // Another thread's row: its place counts (events are numbered by rows), its
            // branch is not this thread's.
            if rows.keep.as_ref().is_some_and(|k| !k[i]) {
                *seq += 1;
                continue;
            }
            let mut dcyc = 0;
            if let Some(c) = &rows.cycles {
                if valid(c, i) {
                    let v = c.values()[i];
                    if let Some(p) = *prev_cyc {
                        dcyc = v.saturating_sub(p);
                    }
                    *prev_cyc = Some(v);
                    self.st.has_cycles = true;
                }
            }
            if let Some(t) = &rows.tsc {
                if valid(t, i) {
                    self.tsc = Some(t.values()[i]);
                }
            }
            let tg = if tnull && !valid(&rows.target, i) {
                None
            } else {
                Some(tvalues[i])
            };
            let ip = rows.ip[i];
            let (func, known, _) = self.f.at(ip);
            let branch = ValueBranch { ip, target: tg };
            let (kind, insns) = (rows.kinds[i], rows.insns[i]);
            self.row(&mut pending, (func, known), kind, insns, dcyc, branch);
            *seq += 1;
        }
        self.pending = pending;
    }

    /// Walk one row group read as dictionary keys: each distinct `ip` and `target` is
    /// named once, and a row finds its functions by its keys.
    fn keyed_batch(&mut self, rows: &KeyedRows, events: &[Ev], seq: &mut u64) {
        let (mut ip_at, mut ip_ret, mut target_at) = (
            std::mem::take(&mut self.ip_at),
            std::mem::take(&mut self.ip_ret),
            std::mem::take(&mut self.target_at),
        );
        ip_at.clear();
        ip_ret.clear();
        for (i, &a) in rows.ip.values.iter().enumerate() {
            if let Some(&next) = rows.ip.values.get(i + 8) {
                self.f.prefetch(next);
            }
            let Named {
                at: (func, known, _),
                len,
            } = self.f.named(a);
            ip_at.push(if known { func | KNOWN } else { func });
            ip_ret.push(Functions::after(a, len));
        }
        // Named when the row group comes: naming when a row first asks (most targets are
        // those of conditional branches, never asked) took longer.
        target_at.clear();
        let tv = &rows.target.values;
        target_at.extend(tv.iter().enumerate().map(|(i, &a)| {
            if let Some(&next) = tv.get(i + 8) {
                self.f.prefetch(next);
            }
            self.f.at(a)
        }));
        let mut evs = events.iter().copied().peekable();
        let (first, n) = (*seq, rows.len());
        // A local, so the compiler keeps it in registers: in `self`, its add per row was a
        // load and a store, each row's waiting for the last's.
        let mut pending = std::mem::take(&mut self.pending);
        let mut i = 0;
        while i < n {
            while let Some(e) = evs.next_if(|e| e.seq <= first + i as u64) {
                self.event(e);
            }
            // The rows before the next event's, without a look at the events per row.
            let stop = evs
                .peek()
                .map_or(n, |e| (e.seq - first).min(n as u64) as usize);
            // Slices zipped: no bounds check per row and column.
            let run = (rows.ip.keys[i..stop].iter())
                .zip(&rows.target.keys[i..stop])
                .zip(&rows.kind.keys[i..stop])
                .zip(&rows.insns.keys[i..stop]);
            for (((&k, &target_key), &kind), &insns) in run {
                let k = k as usize;
                // A null key (the only one past the values) gives u8::MAX, or 0.
                let kind = rows.codes.get(kind as usize).copied().unwrap_or(u8::MAX);
                let insns = rows.insns.values.get(insns as usize).copied().unwrap_or(0);
                let branch = KeyedBranch {
                    rows,
                    ip_key: k,
                    target_key,
                    target_at: &target_at,
                    ip_ret: &ip_ret,
                };
                let at = ip_at[k];
                let func = (at & !KNOWN, at & KNOWN != 0);
                self.row(&mut pending, func, kind, insns, 0, branch);
            }
            i = stop;
        }
        self.pending = pending;
        *seq = first + n as u64;
        self.st.rows += n as u64;
        self.st.rows_by_keys += n as u64;
        (self.ip_at, self.ip_ret, self.target_at) = (ip_at, ip_ret, target_at);
    }

    /// One row: its `ip`'s function (id, known symbol), kind, instructions and cycles;
    /// `branch` says the rest when the kind of branch needs it. `pending` is the batch's
    /// copy of `self.pending`.
    #[inline(always)]
    fn row(
        &mut self,
        pending: &mut Pending,
        (func, known): (u32, bool),
        kind: u8,
        insns: u32,
        dcyc: u64,
        mut branch: impl Branch<'s>,
    ) {
        // Sync the leaf with the row's ip.
        match self.stack.last() {
            None => self.push(func, 0, false),
            Some(top) if known && top.func != func => self.replace_top(func),
            _ => {}
        }
        // Without a frame (cannot happen: MAX_DEPTH > 0) the root takes the weight.
        let n = self.stack.last().map_or(0, |top| top.node);
        if n != pending.node {
            self.add(std::mem::take(pending));
            pending.node = n;
        }
        pending.instructions += insns as u64;
        pending.cycles += dcyc;
        // A branch whose target is not traced changes no stack.
        if !branch.has_target() {
            return;
        }
        const CALL: u8 = BranchKind::Call as u8;
        const CALL_IND: u8 = BranchKind::CallInd as u8;
        const RET: u8 = BranchKind::Ret as u8;
        const JMP: u8 = BranchKind::Jmp as u8;
        const JMP_IND: u8 = BranchKind::JmpInd as u8;
        const FAR: u8 = BranchKind::Far as u8;
        const SYSCALL: u8 = BranchKind::Syscall as u8;
        match kind {
            CALL | CALL_IND => {
                let ret = branch.return_address(self.f);
                let (tf, _, _) = branch.target_at(self.f);
                self.push(tf, ret, false);
            }
            RET => {
                let target = branch.target();
                let found = if target != 0 && self.rets.may_hold(target) {
                    self.stack.iter().rposition(|f| f.ret == target)
                } else {
                    None
                };
                match found {
                    Some(k) => self.pop_to(k),
                    None => {
                        self.st.mismatched_returns += 1;
                        self.pop_to(self.stack.len().saturating_sub(1));
                    }
                }
            }
            JMP | JMP_IND => {
                let (tf, known, entry) = branch.target_at(self.f);
                let top = self.stack.last().map(|f| f.func);
                if !known || top == Some(tf) {
                    return;
                }
                if entry {
                    self.replace_top(tf);
                } else if let Some(k) = self.stack.iter().rposition(|f| f.func == tf) {
                    self.st.longjmps += 1;
                    self.pop_to(k + 1);
                } else {
                    self.replace_top(tf);
                }
            }
            FAR | SYSCALL => {
                let (ip, target) = (branch.ip(), branch.target());
                if resumes(ip, target) {
                    return;
                }
                if let Some(k) = self.resumed(target) {
                    self.pop_to(k);
                    return;
                }
                let (tf, _, _) = branch.target_at(self.f);
                self.st.async_entries += 1;
                self.push(tf, ip, true);
            }
            _ => {}
        }
    }
}

/// What a row's branch says beyond its `ip`'s function and its kind, asked only by the
/// kinds of branch that need it: most rows (conditional branches) need none of it, and
/// loading a row group's addresses for every row was a sixth of the walk.
trait Branch<'s> {
    /// Is the target known (not null)? When not, nothing else is asked.
    fn has_target(&self) -> bool;
    fn ip(&self) -> u64;
    fn target(&self) -> u64;
    fn target_at(&mut self, f: &mut Functions<'s>) -> FunctionAt;
    /// The address after the call instruction at `ip` (0 when unknown).
    fn return_address(&mut self, f: &mut Functions<'s>) -> u64;
}

/// A row read through arrow-rs: its values at hand, functions looked up by address.
struct ValueBranch {
    ip: u64,
    target: Option<u64>,
}

impl<'s> Branch<'s> for ValueBranch {
    fn has_target(&self) -> bool {
        self.target.is_some()
    }
    fn ip(&self) -> u64 {
        self.ip
    }
    fn target(&self) -> u64 {
        self.target.unwrap_or(0)
    }
    fn target_at(&mut self, f: &mut Functions<'s>) -> FunctionAt {
        f.at(self.target())
    }
    fn return_address(&mut self, f: &mut Functions<'s>) -> u64 {
        f.return_address(self.ip)
    }
}

/// A row read as dictionary keys: everything by key from the walk's per-value tables.
struct KeyedBranch<'a> {
    rows: &'a KeyedRows,
    ip_key: usize,
    target_key: u32,
    /// Per `target` value, its function.
    target_at: &'a [FunctionAt],
    /// Per `ip` value, the return address of a call there (0: unknown).
    ip_ret: &'a [u64],
}

impl<'s> Branch<'s> for KeyedBranch<'_> {
    fn has_target(&self) -> bool {
        self.target_key != NULL_KEY
    }
    fn ip(&self) -> u64 {
        self.rows.ip.values[self.ip_key]
    }
    fn target(&self) -> u64 {
        self.rows.target.values[self.target_key as usize]
    }
    fn target_at(&mut self, _: &mut Functions<'s>) -> FunctionAt {
        self.target_at[self.target_key as usize]
    }
    fn return_address(&mut self, _: &mut Functions<'s>) -> u64 {
        self.ip_ret[self.ip_key]
    }
}

/// What a reader thread sends the walk.
enum Batch {
    Arrow(Box<Rows>),
    Keyed(Box<KeyedRows>),
}

/// One row group of `branches` as dictionary keys: the flame graph by instructions.
///
/// `kind` and `insns` stay keys too: the walk finds a row's kind and instructions in
/// small tables of the row group's values. A pass of the readers over every row that
/// made them values took 5% of the flame graph's time, and the walk's lookups, in tables
/// that stay in the processor's first cache, are hidden behind its other work.
#[derive(Default)]
struct KeyedRows {
    ip: Keyed<u64>,
    target: Keyed<u64>,
    kind: Keyed<Vec<u8>>,
    /// Per `kind` value, its `BranchKind` code; u8::MAX for an unknown name.
    codes: Vec<u8>,
    insns: Keyed<u32>,
}

impl KeyedRows {
    /// Read one row group into these rows' buffers (those of rows the walk is done with:
    /// new ones each time, 21 bytes a row, showed in the readers' profile as `realloc`,
    /// `memset` and the kernel clearing pages, about 3% of the flame graph's time).
    fn read(
        &mut self,
        file: &File,
        group: &parquet::file::metadata::RowGroupMetaData,
        pages: &mut parquet_keys::Scratch,
    ) -> Result<()> {
        // Up to `parquet_keys::MAX_ROWS` (checked there), 16 bytes a row (a key of four
        // bytes per column), plus the dictionaries.
        let rows = group.num_rows() as usize;
        let (map, chunks) =
            parquet_keys::map_chunks(file, group, &["ip", "target", "insns", "kind"])?;
        parquet_keys::read_chunk_into(&map, chunks[0], rows, &mut self.ip, pages)?;
        anyhow::ensure!(!self.ip.keys.contains(&NULL_KEY), "an ip is null");
        parquet_keys::read_chunk_into(&map, chunks[1], rows, &mut self.target, pages)?;
        parquet_keys::read_chunk_into(&map, chunks[2], rows, &mut self.insns, pages)?;
        parquet_keys::read_chunk_into(&map, chunks[3], rows, &mut self.kind, pages)?;
        // As `kind_codes`: u8::MAX for an unknown name (and, in the walk, a null).
        self.codes.clear();
        self.codes.extend(self.kind.values.iter().map(|v| {
            std::str::from_utf8(v)
                .ok()
                .and_then(BranchKind::from_name)
                .map_or(u8::MAX, |k| k as u8)
        }));
        Ok(())
    }

    fn len(&self) -> usize {
        self.ip.keys.len()
    }
}

/// One batch of `branches` rows as the walk reads them, made by the reader thread.
struct Rows {
    ip: arrow_buffer::ScalarBuffer<u64>,
    target: PrimitiveArray<UInt64Type>,
    insns: arrow_buffer::ScalarBuffer<u32>,
    kinds: Vec<u8>,
    cycles: Option<PrimitiveArray<UInt64Type>>,
    tsc: Option<PrimitiveArray<UInt64Type>>,
    /// With a thread filter: which rows are the thread's (the others are counted, not walked).
    keep: Option<Vec<bool>>,
}

impl Rows {
    fn of(
        b: &arrow_array::RecordBatch,
        cycles: bool,
        tsc: bool,
        thread: Option<Option<u32>>,
    ) -> Result<Rows> {
        // A column of nulls only is no column: the walk then keeps its last value.
        let opt = |read: bool, name: &str| -> Result<Option<PrimitiveArray<UInt64Type>>> {
            Ok(if read {
                Some(col::<UInt64Type>(b, name)?.clone()).filter(|c| c.null_count() < c.len())
            } else {
                None
            })
        };
        Ok(Rows {
            ip: col::<UInt64Type>(b, "ip")?.values().clone(),
            target: col::<UInt64Type>(b, "target")?.clone(),
            insns: col::<UInt32Type>(b, "insns")?.values().clone(),
            kinds: kind_codes(b, "kind", BranchKind::from_name, |k| k as u8)?,
            cycles: opt(cycles, "cycles")?,
            tsc: opt(tsc, "tsc")?,
            keep: match thread {
                None => None,
                Some(want) => Some(
                    col::<UInt32Type>(b, "tid")?
                        .iter()
                        .map(|t| t == want)
                        .collect(),
                ),
            },
        })
    }
}

/// Walk the branches table and build the stacks. `on_span` sees every frame that ends
/// (with `tsc` times when `times`: timelines; without, `tsc` is not read), and frames
/// still open at the end end at the last row. `cycles` reads the `cycles` column (the
/// weight of a flame graph by cycles); without it the stacks' cycles stay 0.
///
/// Reader threads decode the Parquet row groups ahead of the walk (reading took about as
/// long as walking), and another reads the events; the walk takes both in order.
pub fn build<'s>(
    input: &Input,
    f: &mut Functions<'s>,
    warnings: &mut Vec<String>,
    times: bool,
    cycles: bool,
    on_span: impl FnMut(Span),
) -> Result<Stacks> {
    let t = input.table("branches")?;
    let mut w = Walker {
        f,
        st: Stacks::new(cycles),
        stack: Vec::with_capacity(256),
        far_frames: 0,
        rets: ReturnFilter::new(),
        on_span,
        tsc: None,
        pending: Pending::default(),
        ip_at: Vec::new(),
        ip_ret: Vec::new(),
        target_at: Vec::new(),
    };
    let has_cycles = cycles && t.schema.field_with_name("cycles").is_ok();
    let has_tsc = times && t.schema.field_with_name("tsc").is_ok();
    let thread = input.thread;
    let mut cols = vec!["ip", "target", "kind", "insns"];
    if has_cycles {
        cols.push("cycles");
    }
    if has_tsc {
        cols.push("tsc");
    }
    if thread.is_some() {
        cols.push("tid");
    }
    t.require(&cols)?;
    // Parquet row groups are read side by side, each by the reader `group % readers`,
    // and walked in order; Arrow IPC is one run of batches.
    let footer = t.parquet_footer()?;
    let groups = footer.as_ref().map_or(1, |m| m.metadata().num_row_groups());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // At least two with two row groups or more, so that the same code runs everywhere.
    let readers = groups.clamp(1, cores.clamp(2, 8));
    // Without cycles and times, row groups are read as dictionary keys (where they can
    // be: others go through arrow-rs).
    // (A thread filter reads `tid` too: through arrow-rs.)
    let by_keys = footer
        .as_ref()
        .filter(|_| !has_cycles && !has_tsc && thread.is_none());
    let mut reader = EventReader::open(input);
    std::thread::scope(|scope| -> Result<()> {
        let (etx, erx) = std::sync::mpsc::sync_channel::<Vec<Ev>>(4);
        let events_read = scope.spawn(move || {
            while let Some(b) = reader.next_batch() {
                // A closed channel: the walk stopped.
                if !b.is_empty() && etx.send(b).is_err() {
                    break;
                }
            }
            let by_keys = reader.by_keys.load(Ordering::Relaxed);
            let resolver = reader.resolver();
            (
                reader.warnings,
                resolver.seen,
                by_keys,
                resolver.out_of_order,
            )
        });
        let (mut rxs, mut backs) = (Vec::new(), Vec::new());
        for r in 0..readers {
            // A message is a batch, or the end of a row group (`None`); two ahead each.
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Option<Batch>>>(2);
            rxs.push(rx);
            let (footer, cols, t) = (footer.as_ref(), &cols, &t);
            let (back_tx, back_rx) = std::sync::mpsc::sync_channel::<Box<KeyedRows>>(2);
            backs.push(back_tx);
            scope.spawn(move || {
                let file = by_keys.and_then(|_| File::open(&t.path).ok());
                let mut pages = parquet_keys::Scratch::default();
                for g in (r..groups).step_by(readers) {
                    let keyed = by_keys.zip(file.as_ref()).and_then(|(m, file)| {
                        // The buffers of rows the walk is done with, or new ones.
                        let mut rows = back_rx.try_recv().unwrap_or_default();
                        let group = m.metadata().row_group(g);
                        rows.read(file, group, &mut pages).ok().map(|_| rows)
                    });
                    if let Some(rows) = keyed {
                        // A closed channel: the walk stopped.
                        if tx.send(Ok(Some(Batch::Keyed(rows)))).is_err()
                            || tx.send(Ok(None)).is_err()
                        {
                            return;
                        }
                        continue;
                    }
                    let batches = match footer {
                        Some(m) => t.row_group_batches(m, cols, g),
                        None => t.batches(cols),
                    };
                    let sent = batches.and_then(|it| {
                        for b in it {
                            let rows = Rows::of(&b?, has_cycles, has_tsc, thread)?;
                            tx.send(Ok(Some(Batch::Arrow(Box::new(rows)))))
                                .map_err(|_| anyhow::anyhow!("walk stopped"))?;
                        }
                        tx.send(Ok(None))
                            .map_err(|_| anyhow::anyhow!("walk stopped"))
                    });
                    if let Err(e) = sent {
                        // The walk reports the error (or has stopped already).
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            });
        }
        let mut events = Events {
            batches: erx,
            batch: Vec::new(),
            at: 0,
        };
        let (mut seq, mut prev_cyc, mut evs) = (0u64, None, Vec::new());
        for g in 0..groups {
            loop {
                let rows = match rxs[g % readers].recv() {
                    Ok(Ok(Some(rows))) => rows,
                    Ok(Ok(None)) => break,
                    Ok(Err(e)) => return Err(e),
                    Err(_) => anyhow::bail!("a reader of {} stopped", t.path.display()),
                };
                let len = match &rows {
                    Batch::Arrow(rows) => rows.ip.len(),
                    Batch::Keyed(rows) => rows.len(),
                };
                // No row to apply events before: they wait for the next batch.
                if len == 0 {
                    continue;
                }
                evs.clear();
                // Events at a row are applied before it: those up to the batch's last.
                events.until(seq + len as u64, &mut evs);
                match rows {
                    Batch::Arrow(rows) => w.batch(&rows, &evs, &mut seq, &mut prev_cyc),
                    Batch::Keyed(rows) => {
                        w.keyed_batch(&rows, &evs, &mut seq);
                        // Back to its reader for the next row group; when two wait
                        // there already, dropped.
                        let _ = backs[g % readers].try_send(rows);
                    }
                }
            }
        }
        // Readers still sending stop at their next send (on an error return too, when
        // the receivers go with this closure's locals).
        drop(rxs);
        // Events after the last row are never taken: the reader stops at its next send.
        drop(events);
        let read = events_read.join();
        let (read, n, by_keys, out_of_order) =
            read.unwrap_or_else(|p| std::panic::resume_unwind(p));
        warnings.extend(read);
        (w.st.events_read, w.st.events_by_keys) = (n, by_keys);
        warnings.extend(out_of_order);
        Ok(())
    })?;
    w.pop_to(0);
    w.flush();
    if w.st.full > 0 {
        warnings.push(format!(
            "{} calls past 4 G distinct stacks: counted in their caller",
            w.st.full
        ));
    }
    if w.st.max_depth_hit > 0 {
        warnings.push(format!(
            "{} calls past the depth limit {MAX_DEPTH}: counted in the deepest frame",
            w.st.max_depth_hit
        ));
    }
    Ok(w.st)
}

/// The stacks of a decode, or of each selected bundle of a dataset walked on its own (with
/// its own images) and added up; with the function names their ids index.
pub fn stacks_of(
    src: &mut Source,
    cycles: bool,
    warnings: &mut Vec<String>,
) -> Result<(Stacks, Vec<String>)> {
    if let Source::Decode(input) = src {
        if input.threads()?.is_some() {
            let mut sum = StacksSum::new(cycles);
            sum.add_threads(input)?;
            return Ok(sum.finish(warnings));
        }
        let mut f = Functions::new(&input.symbols);
        let st = build(input, &mut f, warnings, false, cycles, |_| {})?;
        return Ok((st, f.names));
    }
    let mut sum = StacksSum::new(cycles);
    let mut ws = Vec::new();
    src.each(&mut ws, |input, _| sum.add_threads(input))?;
    for w in ws {
        crate::source::warn_once(warnings, w);
    }
    Ok(sum.finish(warnings))
}

/// The stacks of bundles, each walked on its own (with its own images) and added up.
pub struct StacksSum {
    all: Stacks,
    /// The names of every bundle, interned once ("[gap]" first, as in `Functions`).
    names: Vec<String>,
    ids: std::collections::HashMap<String, u32>,
    /// The walks' warnings, each said once.
    warnings: Vec<String>,
}

impl StacksSum {
    pub fn new(cycles: bool) -> Self {
        StacksSum {
            all: Stacks::new(cycles),
            names: vec!["[gap]".into()],
            ids: [("[gap]".to_string(), 0)].into(),
            warnings: Vec::new(),
        }
    }

    pub fn add(&mut self, input: &Input) -> Result<()> {
        self.add_under(input, None)
    }

    /// Add `input`'s stacks; for a perf.data decode each thread's rows on their own, under
    /// a frame naming the thread (a thread's stack is its own, and one CPU's rows switch
    /// between threads).
    pub fn add_threads(&mut self, input: &mut Input) -> Result<()> {
        let Some(threads) = input.threads()? else {
            return self.add(input);
        };
        for (tid, name) in threads {
            input.thread = Some(tid);
            let added = self.add_under(input, Some(&name));
            input.thread = None;
            added?;
        }
        Ok(())
    }

    /// Add `input`'s stacks, under a root frame named `root` when given (a thread).
    pub fn add_under(&mut self, input: &Input, root: Option<&str>) -> Result<()> {
        let mut f = Functions::new(&input.symbols);
        let mut bw = Vec::new();
        let st = build(
            input,
            &mut f,
            &mut bw,
            false,
            self.all.counts_cycles(),
            |_| {},
        )?;
        let funcs: Vec<u32> = f
            .names
            .iter()
            .map(|n| {
                *self.ids.entry(n.clone()).or_insert_with(|| {
                    self.names.push(n.clone());
                    self.names.len() as u32 - 1
                })
            })
            .collect();
        let at = match root {
            None => 0,
            Some(name) => {
                let id = self.intern(name);
                self.all.child(0, id)
            }
        };
        self.all.merge_under(&st, &funcs, at);
        for w in bw {
            crate::source::warn_once(&mut self.warnings, w);
        }
        Ok(())
    }

    fn intern(&mut self, n: &str) -> u32 {
        if let Some(&id) = self.ids.get(n) {
            return id;
        }
        self.names.push(n.to_string());
        let id = self.names.len() as u32 - 1;
        self.ids.insert(n.to_string(), id);
        id
    }

    /// The stacks and their function names; the walks' warnings go to `warnings`.
    pub fn finish(self, warnings: &mut Vec<String>) -> (Stacks, Vec<String>) {
        for w in self.warnings {
            crate::source::warn_once(warnings, w);
        }
        (self.all, self.names)
    }
}

/// Write folded stacks (`--folded`) and the flame graph SVG.
pub fn flamegraph(
    src: &mut Source,
    cycles: bool,
    svg: Option<&std::path::Path>,
    folded: Option<&std::path::Path>,
) -> Result<FlameSummary> {
    let mut warnings = Vec::new();
    let (mut st, names) = stacks_of(src, cycles, &mut warnings)?;
    let use_cycles = if cycles && !st.has_cycles {
        warnings.push("no cycles in the branches table: weighted by instructions".into());
        false
    } else {
        cycles
    };
    if let Some(p) = folded {
        let mut w = std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?,
        );
        st.write_folded(&names, use_cycles, &mut w)
            .and_then(|_| w.flush())
            .with_context(|| format!("{}: cannot write", p.display()))?;
    }
    let total = st.total(use_cycles);
    let mut drawn = None;
    if let Some(p) = svg {
        let lines = st.folded(&names, use_cycles, svg_min_weight(total));
        drawn = Some(lines.len());
        let out =
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?;
        let title = format!("tracemill: {}", src.title());
        write_svg(&lines, &title, use_cycles, std::io::BufWriter::new(out))
            .with_context(|| format!("{}: cannot write the flame graph", p.display()))?;
    }
    let stacks = st.distinct(use_cycles);
    Ok(FlameSummary {
        total,
        stacks,
        drawn,
        cycles: use_cycles,
        gaps: st.gaps,
        mismatched_returns: st.mismatched_returns,
        longjmps: st.longjmps,
        async_entries: st.async_entries,
        warnings,
    })
}

/// The lightest stack (with its callees) a flame graph SVG draws: inferno leaves out
/// frames narrower than `min_width` percent of the total (0.01% by default), so lighter
/// stacks go into their caller (`Stacks::folded`) and their lines are never made. The
/// graph keeps every frame it drew, with the same widths (rounded down: nothing inferno
/// draws is cut); a frame can move left by the widths of the invisible siblings sorted
/// before it, whose weight is now drawn with the caller's own. On the 50 MB synthetic
/// trace's tables this cut the lines from 519,594 to 308,073, and time and memory by 40%.
pub fn svg_min_weight(total: u64) -> u64 {
    let pct = inferno::flamegraph::Options::default().min_width;
    (total as f64 * pct / 100.0) as u64
}

/// The flame graph of folded lines, in the order `Stacks::folded` gives them, as SVG
/// (inferno).
pub fn write_svg(lines: &FoldedLines, title: &str, cycles: bool, out: impl Write) -> Result<()> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = if cycles { "cycles" } else { "instructions" }.to_string();
    opts.deterministic = true;
    // `folded` ordered the lines already: inferno would sort them again.
    opts.no_sort = true;
    if lines.is_empty() {
        // inferno refuses an empty profile; an empty trace still gets a graph that says so.
        let mut out = out;
        write!(
            out,
            "<?xml version=\"1.0\" standalone=\"no\"?>\n<svg version=\"1.1\" width=\"1200\" height=\"60\" xmlns=\"http://www.w3.org/2000/svg\"><text x=\"600\" y=\"30\" text-anchor=\"middle\" font-size=\"17\">{}: no branch rows</text></svg>\n",
            crate::util::html_escape(title)
        )?;
        return Ok(());
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter(), out)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// What `flamegraph` made.
#[derive(Clone, Debug, Default)]
pub struct FlameSummary {
    pub total: u64,
    /// Distinct stacks with weight (the lines of `--folded`).
    pub stacks: usize,
    /// The lines the SVG was drawn from, when one was made.
    pub drawn: Option<usize>,
    pub cycles: bool,
    pub gaps: u64,
    pub mismatched_returns: u64,
    pub longjmps: u64,
    pub async_entries: u64,
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_events_reader_passes_on_only_gaps_and_enables_that_do_not_resume() {
        use EventKind::*;
        let ev = |seq, kind, ip| Ev {
            seq,
            kind,
            ip,
            disable: 0,
        };
        let mut events = vec![
            // Before any disable: kept, stopped nowhere known.
            ev(0, Enable, Some(0x900)),
            ev(1, Disable, Some(0x1000)),
            // Just after the disabling instruction (a syscall of 2 bytes): dropped.
            ev(2, Enable, Some(0x1002)),
            ev(3, Disable, Some(0x2000)),
            // Elsewhere (a signal handler): kept, with where tracing stopped.
            ev(4, Enable, Some(0x5000)),
            ev(5, Enable, None),
            // The note about bytes before the first PSB: no gap.
            ev(6, Resync, None),
            ev(7, Overflow, Some(0x10)),
            ev(8, Resync, Some(0x20)),
            ev(6, Error, None),
        ];
        let mut r = Resolver::default();
        events.retain_mut(|e| r.keep(e));
        let kept: Vec<(u64, EventKind, u64)> =
            events.iter().map(|e| (e.seq, e.kind, e.disable)).collect();
        assert_eq!(
            kept,
            [
                (0, Enable, 0),
                (4, Enable, 0x2000),
                (7, Overflow, 0),
                (8, Resync, 0),
                (6, Error, 0)
            ]
        );
        let warning = r.out_of_order.expect("seq 6 after 8");
        assert!(warning.contains("seq 6 after 8"), "{warning}");
    }

    /// One row of the walk, through the values' path.
    fn step<F: FnMut(Span)>(w: &mut Walker<'_, '_, F>, kind: BranchKind, ip: u64, target: u64) {
        let mut pending = std::mem::take(&mut w.pending);
        let (func, known, _) = w.f.at(ip);
        let branch = ValueBranch {
            ip,
            target: Some(target),
        };
        w.row(&mut pending, (func, known), kind as u8, 1, 0, branch);
        w.pending = pending;
    }

    #[test]
    fn an_asynchronous_entry_is_left_where_it_resumes_and_nowhere_else() {
        let syms = Symbolizer::new();
        let mut f = Functions::new(&syms);
        let mut w = Walker {
            f: &mut f,
            st: Stacks::new(false),
            stack: Vec::new(),
            far_frames: 0,
            rets: ReturnFilter::new(),
            on_span: |_| {},
            tsc: None,
            pending: Pending::default(),
            ip_at: Vec::new(),
            ip_ret: Vec::new(),
            target_at: Vec::new(),
        };
        step(&mut w, BranchKind::Cond, 0x1000, 0x1004);
        // An interrupt at 0x1004 into a handler: a frame entered asynchronously.
        step(&mut w, BranchKind::Far, 0x1004, 0x8000);
        assert_eq!((w.stack.len(), w.far_frames, w.st.async_entries), (2, 1, 1));
        // A far return that resumes nowhere on the stack is another entry...
        step(&mut w, BranchKind::Far, 0x8010, 0x9000);
        assert_eq!((w.stack.len(), w.far_frames, w.st.async_entries), (3, 2, 2));
        // ...and one back to where the first interrupted leaves both.
        step(&mut w, BranchKind::Far, 0x9010, 0x1004);
        assert_eq!((w.stack.len(), w.far_frames), (1, 0));
        // With no such frame left, a far transfer is an entry again.
        step(&mut w, BranchKind::Far, 0x1008, 0x8000);
        assert_eq!((w.stack.len(), w.far_frames, w.st.async_entries), (2, 1, 3));
    }

    #[test]
    fn the_return_filter_is_sure_of_every_address_no_frame_returns_to() {
        let mut f = ReturnFilter::new();
        assert!(!f.may_hold(0x401000));
        // Two frames returning to one address, and addresses that share a bucket.
        let same = 0x401000 + (1 << 36);
        assert_eq!(ReturnFilter::bucket(same), ReturnFilter::bucket(0x401000));
        for r in [0x401000, 0x401000, same, 0x7fff_1234] {
            f.add(r);
        }
        for r in [0x401000, same, 0x7fff_1234] {
            assert!(f.may_hold(r));
        }
        f.remove(0x401000);
        assert!(f.may_hold(0x401000));
        f.remove(same);
        // `same` is gone, but shares its bucket with a frame still there.
        assert!(f.may_hold(same));
        f.remove(0x401000);
        assert!(!f.may_hold(0x401000) && !f.may_hold(same));
        assert!(f.may_hold(0x7fff_1234));
        // A full stack of frames: every one is still found.
        let rets: Vec<u64> = (0..MAX_DEPTH as u64).map(|i| 0x400000 + i * 37).collect();
        rets.iter().for_each(|&r| f.add(r));
        assert!(rets.iter().all(|&r| f.may_hold(r)));
    }

    #[test]
    fn light_stacks_fold_into_their_caller_and_the_total_stays() {
        let mut st = Stacks::new(false);
        let a = st.child(0, 1);
        let b = st.child(a, 2);
        let c = st.child(b, 3);
        let d = st.child(0, 4);
        st.instructions[a as usize] = 10;
        st.instructions[b as usize] = 1;
        st.instructions[c as usize] = 1;
        st.instructions[d as usize] = 1;
        let names: Vec<String> = ["[gap]", "a", "b", "c", "d"].map(String::from).to_vec();
        let mut lines = |min| {
            st.folded(&names, false, min)
                .iter()
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert_eq!(lines(0), ["a 10", "a;b 1", "a;b;c 1", "d 1"]);
        assert_eq!(lines(5), ["[small stacks] 1", "a 12"]);
        // The subtree sums made in place of the weights are undone.
        let weights: Vec<u64> = st.instructions.iter().copied().collect();
        assert_eq!(weights, [0, 10, 1, 1, 1]);
        let mut out = Vec::new();
        assert_eq!(st.write_folded(&names, false, &mut out).unwrap(), 4);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a 10\na;b 1\na;b;c 1\nd 1\n"
        );
    }

    /// The lines as a full sort of every kept node's line gives them: the reference.
    fn sorted_lines(st: &Stacks, names: &[String], min: u64) -> Vec<String> {
        let n = st.len();
        let mut sub: Vec<u64> = st.instructions.iter().copied().collect();
        for i in (1..n).rev() {
            sub[st.node(i).0 as usize] += sub[i];
        }
        let mut into = vec![0usize; n];
        let mut own = vec![0u64; n];
        own[0] = st.instructions[0];
        for i in 1..n {
            into[i] = if sub[i] >= min.max(1) {
                i
            } else {
                into[st.node(i).0 as usize]
            };
            own[into[i]] += st.instructions[i];
        }
        let names = folded_names(names);
        let (mut parts, mut line) = (Vec::new(), String::new());
        let mut out = Vec::new();
        for (i, &w) in own.iter().enumerate() {
            if w > 0 {
                if i == 0 {
                    out.push(format!("[small stacks] {w}"));
                } else {
                    st.path(&names, i, &mut parts, &mut line);
                    out.push(format!("{line} {w}"));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn folded_lines_come_sorted_whatever_the_names() {
        // Names that are others' prefixes followed by bytes below and above `;`, and two
        // that are one name once cleaned.
        let names: Vec<String> = [
            "[gap]", "f", "f.cold", "fa", "f+0x1", "f+0x12", "g", "a b", "a_b", "a;b", "!",
        ]
        .map(String::from)
        .to_vec();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rand = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for round in 0..200 {
            let mut st = Stacks::new(false);
            let mut stack = vec![0u32];
            for _ in 0..60 {
                match rand(3) {
                    0 if stack.len() > 1 => {
                        stack.pop();
                    }
                    _ => {
                        let f = 1 + rand(names.len() as u64 - 1) as u32;
                        let c = st.child(*stack.last().unwrap(), f);
                        stack.push(c);
                    }
                }
                let top = *stack.last().unwrap() as usize;
                st.instructions[top] += rand(10);
            }
            let total = st.total(false);
            for min in [0, 1, 5, total / 10, total] {
                let got: Vec<String> = st
                    .folded(&names, false, min)
                    .iter()
                    .map(String::from)
                    .collect();
                let want = sorted_lines(&st, &names, min);
                assert_eq!(got, want, "round {round}, min {min}");
                let sum: u64 = got
                    .iter()
                    .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                    .sum();
                assert_eq!(sum, total);
            }
        }
    }

    #[test]
    fn the_trie_finds_every_child_again_past_the_list_limit() {
        let mut st = Stacks::new(true);
        // More callees of one node than its list holds, asked for in turn and again.
        let kids: Vec<u32> = (1..=3 * FANOUT).map(|f| st.child(0, f)).collect();
        for round in 0..3 {
            for (i, f) in (1..3 * FANOUT + 1).enumerate().rev() {
                assert_eq!(st.child(0, f), kids[i], "round {round}, function {f}");
            }
        }
        // A short list, reordered by use.
        let a = st.child(kids[0], 7);
        let b = st.child(kids[0], 8);
        assert_eq!((st.child(kids[0], 7), st.child(kids[0], 8)), (a, b));
        assert_eq!(st.child(kids[0], 7), a);
        assert_eq!(st.len(), 1 + 3 * FANOUT as usize + 2);
        assert_eq!(st.node(b as usize), (kids[0], 8));
        assert_eq!(
            st.cycles.len(),
            st.len(),
            "cycles are counted per node when asked for"
        );
    }
}
