//! The address spaces of a perf.data recording: which code each process had mapped when.
//!
//! `perf record -a` records many processes, and programs of different processes sit at
//! the same addresses (every non-PIE executable at 0x400000). A trace of user code has no
//! PIP packets to say whose code runs, so, as perf does, the code of a place is looked up
//! in the maps of the process the sideband puts on that CPU at that time
//! ([`tracemill_decode::spaces`] turns that into stream offsets).
//!
//! A process's space is made of its MMAP/MMAP2 records, as perf keeps a thread group's
//! maps:
//! - an exec (COMM with the exec flag) starts a new space: the mappings before it end
//!   there, those after it are the new program's;
//! - a FORK of a new process (pid other than the parent's) starts the child's space with
//!   a copy of the parent's mappings at that time (perf copies the parent's maps); a new
//!   thread (same pid) shares its process's;
//! - a process whose first record is a mapping (one perf synthesized when recording
//!   started, or the file has no COMM) has a space from the beginning.
//!
//! Only mappings that collide (another space has other code at overlapping addresses)
//! are tagged with their space ([`AddressSpaces::tag`]): everything else stays one image
//! that every space shares, as before (a library in a hundred processes at one address
//! is one image, loaded once).

use std::collections::{BTreeMap, BTreeSet};

use tracemill_perfdata::PerfClock;

use super::images::Mapping;
use super::threads::Threads;

/// A sideband record that changes a process's mappings, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Mapping number `mapping` (of the reader's list) in process `pid`.
    Map { pid: u32, mapping: usize },
    /// Process `pid` ran exec (COMM with the exec flag).
    Exec { pid: u32 },
    /// Process (or thread, when `pid == ppid`) `pid` was forked from `ppid`.
    Fork { pid: u32, ppid: u32 },
}

/// A change at perf time `time` (`None`: the record has none; taken as the beginning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dated {
    pub time: Option<u64>,
    pub change: Change,
}

/// One process's mappings from one TSC on (until its next space).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Space {
    /// From this TSC (0: from the beginning).
    from: u64,
    /// Indices into the reader's mappings.
    mappings: Vec<usize>,
}

/// Every process's spaces over time. A space's key is its index in `spaces`.
#[derive(Clone, Debug, Default)]
pub struct AddressSpaces {
    spaces: Vec<Space>,
    /// Each process's spaces, in time order.
    by_pid: BTreeMap<u32, Vec<usize>>,
}

impl AddressSpaces {
    /// The spaces the changes make, taken in time order (perf orders records by time only
    /// within a round; records at one time keep their file order).
    pub fn build(changes: &[Dated], clock: &PerfClock) -> AddressSpaces {
        let mut order: Vec<(u64, &Dated)> = changes
            .iter()
            .map(|d| {
                let tsc = d.time.and_then(|t| clock.perf_time_to_tsc(t)).unwrap_or(0);
                (tsc, d)
            })
            .collect();
        order.sort_by_key(|(t, _)| *t);
        let mut out = AddressSpaces::default();
        for (tsc, d) in order {
            match d.change {
                Change::Map { pid, mapping } => {
                    let s = match out.by_pid.get(&pid).and_then(|v| v.last()) {
                        Some(&s) => s,
                        None => out.start(pid, 0, Vec::new()),
                    };
                    out.spaces[s].mappings.push(mapping);
                }
                Change::Exec { pid } => {
                    out.start(pid, tsc, Vec::new());
                }
                Change::Fork { pid, ppid } if pid != ppid => {
                    let inherited = out
                        .by_pid
                        .get(&ppid)
                        .and_then(|v| v.last())
                        .map(|&s| out.spaces[s].mappings.clone())
                        .unwrap_or_default();
                    out.start(pid, tsc, inherited);
                }
                Change::Fork { .. } => {}
            }
        }
        out
    }

    /// A new space of `pid` from `tsc` on.
    fn start(&mut self, pid: u32, tsc: u64, mappings: Vec<usize>) -> usize {
        self.spaces.push(Space {
            from: tsc,
            mappings,
        });
        let k = self.spaces.len() - 1;
        self.by_pid.entry(pid).or_default().push(k);
        k
    }

    /// The mappings to make images of: each mapping whose code another space has other
    /// code beside (at overlapping addresses) once per space that holds it, tagged with
    /// that space; every other mapping once, untagged (shared). The second value: whether
    /// anything was tagged (else the decode needs no spaces).
    pub fn tag(&self, mappings: &[Mapping]) -> (Vec<Mapping>, bool) {
        // A mapping's identity: the same file at the same place is the same code, in any
        // process.
        type Id<'m> = (&'m str, u64, u64, u64);
        fn id(m: &Mapping) -> Id<'_> {
            (m.path.as_str(), m.addr, m.len, m.pgoff)
        }
        let mut spaces_of: BTreeMap<Id<'_>, BTreeSet<usize>> = BTreeMap::new();
        for (k, s) in self.spaces.iter().enumerate() {
            for &i in &s.mappings {
                if let Some(m) = mappings.get(i) {
                    spaces_of.entry(id(m)).or_default().insert(k);
                }
            }
        }
        // Identities by address; two collide when they overlap and are not both in one
        // and the same single space (an overlap inside one space is the image loader's
        // "overlaps ... not loaded").
        let ids: Vec<(&Id<'_>, &BTreeSet<usize>)> = {
            let mut v: Vec<_> = spaces_of.iter().collect();
            v.sort_by_key(|(i, _)| i.1);
            v
        };
        let mut collides: BTreeSet<Id<'_>> = BTreeSet::new();
        for (a, (ia, sa)) in ids.iter().enumerate() {
            let end = ia.1.saturating_add(ia.2);
            for (ib, sb) in ids[a + 1..].iter().take_while(|(ib, _)| ib.1 < end) {
                let one_space = sa.len() == 1 && sa == sb;
                if !one_space {
                    collides.insert(**ia);
                    collides.insert(**ib);
                }
            }
        }
        if collides.is_empty() {
            // One code per address: every mapping as recorded, shared, as without spaces.
            return (mappings.to_vec(), false);
        }
        let mut out = Vec::new();
        let mut shared: BTreeSet<Id<'_>> = BTreeSet::new();
        let mut placed: BTreeSet<(Id<'_>, usize)> = BTreeSet::new();
        for m in mappings {
            let i = id(m);
            if collides.contains(&i) {
                // Once per space that holds it (a process's own record names one; a
                // fork's copy is the parent's record).
                for &k in spaces_of.get(&i).into_iter().flatten() {
                    if !placed.insert((i, k)) {
                        continue;
                    }
                    out.push(Mapping {
                        space: Some(k as u64),
                        ..m.clone()
                    });
                }
            } else if shared.insert(i) {
                out.push(m.clone());
            }
        }
        (out, true)
    }

    /// The processes with more than one space (an exec during the recording): only a
    /// time says which of them a place is in.
    pub fn several(&self) -> Vec<u32> {
        let many = self.by_pid.iter().filter(|(_, v)| v.len() > 1);
        many.map(|(&pid, _)| pid).collect()
    }

    /// The key of process `pid`'s space at `tsc`: the last one begun at or before it.
    /// Without a time, the process's space if it has only one.
    pub fn key_at(&self, pid: Option<u32>, tsc: Option<u64>) -> Option<u64> {
        let v = self.by_pid.get(&pid?)?;
        let k = match tsc {
            Some(t) => {
                let n = v.partition_point(|&s| self.spaces[s].from <= t);
                *v.get(n.checked_sub(1)?)?
            }
            None if v.len() == 1 => v[0],
            None => return None,
        };
        Some(k as u64)
    }
}

/// What the decode of one trace needs to select spaces: its threads over time and the
/// recording's spaces.
#[derive(Clone, Debug)]
pub struct TraceSpaces {
    pub threads: std::sync::Arc<Threads>,
    pub spaces: std::sync::Arc<AddressSpaces>,
}

impl TraceSpaces {
    /// The space at a place dated `tsc` (the last timing packet before it): the space of
    /// the process the thread at that time belongs to, the rule rows get their thread by.
    pub fn key_at(&self, tsc: Option<u64>) -> Option<u64> {
        let (pid, _) = self.threads.at(tsc);
        self.spaces.key_at(pid, tsc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::threads::tests::clock;

    fn mapping(pid: u32, path: &str, addr: u64) -> Mapping {
        Mapping {
            record_offset: 0,
            pid,
            addr,
            len: 0x1000,
            pgoff: 0,
            path: path.to_string(),
            build_id: None,
            space: None,
        }
    }

    fn at(time: u64, change: Change) -> Dated {
        Dated {
            time: Some(1_000_000_000 + time / 2),
            change,
        }
    }

    #[test]
    fn exec_starts_a_new_space_and_fork_copies_the_parents() {
        let maps = [
            mapping(1, "/bin/a", 0x400000),
            mapping(1, "/lib/c", 0x7000_0000),
            mapping(1, "/bin/b", 0x400000),
            mapping(2, "/bin/d", 0x600000),
        ];
        let changes = [
            at(0, Change::Map { pid: 1, mapping: 0 }),
            at(0, Change::Map { pid: 1, mapping: 1 }),
            // Pid 2 forked at TSC 100 (with a and c), then maps d.
            at(100, Change::Fork { pid: 2, ppid: 1 }),
            at(110, Change::Map { pid: 2, mapping: 3 }),
            // A thread of 1: nothing new.
            at(120, Change::Fork { pid: 1, ppid: 1 }),
            // Pid 1 execs b at TSC 200.
            at(200, Change::Exec { pid: 1 }),
            at(200, Change::Map { pid: 1, mapping: 2 }),
        ];
        let s = AddressSpaces::build(&changes, &clock());
        assert_eq!(s.key_at(Some(1), Some(0)), Some(0));
        assert_eq!(s.key_at(Some(1), Some(199)), Some(0));
        assert_eq!(s.key_at(Some(1), Some(200)), Some(2));
        assert_eq!(s.key_at(Some(2), Some(99)), None, "before its fork");
        assert_eq!(s.key_at(Some(2), Some(150)), Some(1));
        assert_eq!(s.key_at(Some(2), None), Some(1), "its only space");
        assert_eq!(
            s.key_at(Some(1), None),
            None,
            "two spaces: which is unknown"
        );
        assert_eq!(s.key_at(Some(3), Some(5)), None);
        assert_eq!(s.key_at(None, Some(5)), None);
        // a (spaces 0 and 1, the fork's copy) and b (space 2) collide at 0x400000: tagged,
        // once per space; c and d are shared.
        let (m, tagged) = s.tag(&maps);
        assert!(tagged);
        let got: Vec<(&str, Option<u64>)> = m.iter().map(|m| (m.path.as_str(), m.space)).collect();
        assert_eq!(
            got,
            [
                ("/bin/a", Some(0)),
                ("/bin/a", Some(1)),
                ("/lib/c", None),
                ("/bin/b", Some(2)),
                ("/bin/d", None),
            ]
        );
    }

    #[test]
    fn one_program_in_many_processes_is_not_tagged() {
        let maps = [
            mapping(1, "/bin/a", 0x400000),
            mapping(2, "/bin/a", 0x400000),
        ];
        let changes = [
            at(0, Change::Map { pid: 1, mapping: 0 }),
            at(0, Change::Map { pid: 2, mapping: 1 }),
        ];
        let s = AddressSpaces::build(&changes, &clock());
        let (m, tagged) = s.tag(&maps);
        assert!(!tagged);
        assert_eq!(m, maps, "as recorded");
    }
}
