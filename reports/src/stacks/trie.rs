//! The stack trie, its weights, and the folded lines made from it.

use std::fmt::Write as _;
use std::io::Write;

use crate::util::{AddrMap, Chunked};

#[derive(Clone, Copy, Debug)]
pub(super) struct Frame {
    pub(super) node: u32,
    pub(super) func: u32,
    /// Address the frame returns (or resumes) to; 0: unknown.
    pub(super) ret: u64,
    /// Entered asynchronously (interrupt, signal): left by a far transfer or a resume.
    pub(super) far: bool,
    /// When the frame was entered (tsc), for timelines.
    pub(super) begin: Option<u64>,
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
pub(super) struct Node {
    pub(super) parent: u32,
    pub(super) func: u32,
    /// First child (0: none, [`BIG`]: the children are in `Stacks::big`).
    pub(super) first: u32,
    /// Next child of the same parent (0: none).
    pub(super) next: u32,
}

/// `Node::first` of a node with more than [`FANOUT`] children.
pub(super) const BIG: u32 = u32::MAX;
/// Children a node keeps in its list before they move to a map.
pub(super) const FANOUT: u32 = 8;

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
    pub(super) fn new(cycles: bool) -> Self {
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
    pub(super) fn counts_cycles(&self) -> bool {
        !self.cycles.is_empty()
    }

    /// Number of nodes, the root included.
    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// (parent, function) of node `n` (the root's are `u32::MAX`).
    pub(super) fn node(&self, n: usize) -> (u32, u32) {
        (self.nodes[n].parent, self.nodes[n].func)
    }

    /// The node for `func` called from `parent`, made if new.
    #[inline]
    pub(super) fn child(&mut self, parent: u32, func: u32) -> u32 {
        let first = self.nodes[parent as usize].first;
        if first != 0 && first != BIG && self.nodes[first as usize].func == func {
            return first;
        }
        self.child_slow(parent, func)
    }

    pub(super) fn child_slow(&mut self, parent: u32, func: u32) -> u32 {
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

    pub(super) fn push_node(&mut self, parent: u32, func: u32, next: u32) -> u32 {
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
    pub(super) fn merge_under(&mut self, other: &Stacks, funcs: &[u32], root: u32) {
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
    pub(super) fn weights(&self, cycles: bool) -> &Chunked<u64> {
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

    /// Every stack with a weight of its own, in the order the stacks were first seen, for
    /// writers of other formats (pprof): `f` gets its frames innermost first (function
    /// ids, as `names` index them), its instructions and its cycles (0 unless counted).
    pub fn each_stack(&self, mut f: impl FnMut(&[u32], u64, u64)) {
        let cycles = self.counts_cycles();
        let mut frames = Vec::new();
        for (i, &instructions) in self.instructions.iter().enumerate().skip(1) {
            let c = if cycles { self.cycles[i] } else { 0 };
            if instructions == 0 && c == 0 {
                continue;
            }
            frames.clear();
            let mut m = i as u32;
            while m != 0 {
                let (p, func) = self.node(m as usize);
                frames.push(func);
                m = p;
            }
            f(&frames, instructions, c);
        }
    }

    /// The folded path of node `n`: its frames' names, outermost first, joined by `;`.
    /// `names` are already cleaned (`folded_names`); `parts` is scratch space.
    pub(super) fn path(&self, names: &[String], n: usize, parts: &mut Vec<u32>, out: &mut String) {
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
    pub(super) fn folded_sums(
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
    pub(super) const BUFFER: usize = 64 << 20;

    pub(super) fn push(&mut self, path: &str, weight: u64) {
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
pub(super) fn big_key(parent: u32, func: u32) -> u64 {
    (((parent as u64) << 32) | func as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(32)
}

/// Function names as a folded line can hold them: `;` separates frames and a space the
/// weight, so both become `_` (cleaned once per name, not once per line).
pub(super) fn folded_names(names: &[String]) -> Vec<String> {
    names.iter().map(|n| n.replace([';', ' '], "_")).collect()
}
