//! One thread of a perf.data decode walked in time order.
//!
//! `branches` has each CPU's rows in time order, the CPUs one after another: a thread
//! that ran on several CPUs has its rows in several places, and in table order a call it
//! made on one CPU can come after its return on another. Its rows on one CPU are in time
//! order already. So the walk keeps a cursor on each CPU the thread ran on, which reads
//! only the thread's rows there (its stretches, [`Input::threads`]: row ranges, read as
//! Parquet row selections of the row groups that hold them) ahead on reader threads, and
//! merges the cursors' rows by `time` (a null `time` counts as the last one its cursor
//! saw; equal times in table order), as perf orders the samples of its CPUs' traces.
//! Where the thread's stretches do not overlap in time (it runs on one CPU at a time),
//! that walks them whole, in the order of their first times; and a stretch with another
//! CPU's stretch within its time (the thread ran there meanwhile while this CPU ran
//! nothing traced, so that its rows before and after are one stretch) in two parts, the
//! other stretch between them.
//!
//! A row of a stretch timed at or after the next stretch on its CPU (another thread's)
//! did not run then: it took the time of a timing packet sent after the thread left
//! (rows after a gap wait for the next one; without MTC packets, that can be the next
//! thread's first). Its time counts as the last one before it.
//!
//! Events go with the stretch they fall in, from before its first row to after its last
//! (a reader per cursor reads those of its stretches, settled by its own [`Resolver`]);
//! those among other threads' rows are theirs.
//!
//! Memory: per cursor, a few batches of rows ahead (fewer rows a batch the more cursors)
//! and of events. When the thread ran on one CPU (or its stretches come in time order),
//! the rows are read as they are in table order, but only the thread's.

use std::ops::Range;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use anyhow::{anyhow, bail, Result};
use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use crate::input::{Input, Stretch, Table, Thread};

use super::build::Read;
use super::{events::*, rows::*, trie::*, walker::*};

/// Rows of one stretch, one after another in the table, the first of which is row `seq`.
pub(super) struct Piece {
    pub(super) seq: u64,
    pub(super) rows: Rows,
}

/// What a reader sends: a piece, the end of an item (`None`), or why it stopped.
type Message = Result<Option<Piece>>;

/// A reader's unit of work: the rows `ranges` (table row numbers, ascending) of row group
/// `group`, whose first row is `base`; for Arrow IPC (`group: None`), of the whole file.
struct Item {
    group: Option<usize>,
    base: u64,
    ranges: Vec<Range<u64>>,
}

/// Where a row comes in the walk: its time (see the module's doc), then its row number.
type Key = (Option<u64>, u64);

/// Walk `thread`'s rows of `t` in time order into `w`.
pub(super) fn walk<F: FnMut(Span)>(
    input: &Input,
    t: &Table,
    thread: &Thread,
    read: Read<'_>,
    w: &mut Walker<'_, '_, F>,
    warnings: &mut Vec<String>,
) -> Result<()> {
    // Per CPU, the thread's stretches there, in table order (so in time order).
    let mut cpus: Vec<Vec<Stretch>> = Vec::new();
    let mut at: std::collections::HashMap<Option<u32>, usize> = Default::default();
    for s in thread.stretches.iter().filter(|s| s.start < s.end) {
        let k = *at.entry(s.cpu).or_insert_with(|| {
            cpus.push(Vec::new());
            cpus.len() - 1
        });
        cpus[k].push(*s);
    }
    if cpus.is_empty() {
        return Ok(());
    }
    let footer = t.parquet_footer_indexed()?;
    // The first row of each row group, and the end.
    let starts: Option<Vec<u64>> = footer.as_ref().map(|m| {
        let mut at = 0;
        let mut v: Vec<u64> = (m.metadata().row_groups().iter())
            .map(|g| {
                let s = at;
                at += g.num_rows().max(0) as u64;
                s
            })
            .collect();
        v.push(at);
        v
    });
    let plans: Vec<Vec<Item>> = cpus
        .iter()
        .map(|stretches| items(starts.as_deref(), stretches))
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let readers = cores.clamp(2, 8);
    let k = cpus.len();
    // Readers per cursor, and rows per batch: with many cursors, fewer of both.
    let per_cursor = (readers / k).max(1);
    let batch = (64 * 1024 / k).max(4096);
    let footer = footer.as_ref();
    std::thread::scope(|scope| -> Result<()> {
        let mut cursors = Vec::with_capacity(k);
        let mut done = Vec::with_capacity(k);
        for (stretches, items) in cpus.iter().zip(&plans) {
            let n = per_cursor.min(items.len()).max(1);
            let mut rxs = Vec::with_capacity(n);
            for r in 0..n {
                let (tx, rx) = sync_channel::<Message>(2);
                rxs.push(rx);
                let mine = items.iter().skip(r).step_by(n);
                scope.spawn(move || read_items(t, footer, read, batch, mine, tx));
            }
            let ranges = SeqRanges::new(stretches.iter().map(|s| (s.start, s.end)));
            let (erx, events_read) = EventReader::open(input, Some(ranges)).spawn(scope);
            done.push(events_read);
            cursors.push(Cursor {
                stretches,
                stretch: 0,
                rxs,
                items: items.len(),
                item: 0,
                piece: None,
                at: 0,
                events: Events::new(erx),
                last_time: None,
                prev_cyc: None,
            });
        }
        let walked = merge(&mut cursors, w, &t.path);
        // Readers still sending stop at their next send, events readers too.
        drop(cursors);
        for d in done {
            d.join().add_to(&mut w.st, warnings);
        }
        walked
    })
}

/// The items that read `stretches` (ascending): per row group, its rows of them.
fn items(starts: Option<&[u64]>, stretches: &[Stretch]) -> Vec<Item> {
    let Some(starts) = starts else {
        return vec![Item {
            group: None,
            base: 0,
            ranges: stretches.iter().map(|s| s.start..s.end).collect(),
        }];
    };
    let groups = starts.len() - 1;
    let mut items: Vec<Item> = Vec::new();
    for s in stretches {
        let mut at = s.start;
        while at < s.end {
            // The row group that holds row `at`.
            let g = starts.partition_point(|&x| x <= at) - 1;
            if g >= groups {
                // Rows past the file's: the reader finds none (and says so).
                break;
            }
            let end = s.end.min(starts[g + 1]);
            if items.last().is_none_or(|it| it.group != Some(g)) {
                items.push(Item {
                    group: Some(g),
                    base: starts[g],
                    ranges: Vec::new(),
                });
            }
            items.last_mut().expect("pushed").ranges.push(at..end);
            at = end;
        }
    }
    items
}

/// Read `items` in order, sending their rows in pieces of one stretch each, and the end
/// of each item.
fn read_items<'a>(
    t: &Table,
    footer: Option<&ArrowReaderMetadata>,
    read: Read<'_>,
    batch: usize,
    items: impl Iterator<Item = &'a Item>,
    tx: SyncSender<Message>,
) {
    let stopped = |_| anyhow!("walk stopped");
    for item in items {
        let sent = (|| -> Result<()> {
            let send = |seq: u64, b: &arrow_array::RecordBatch| -> Result<()> {
                let rows = Rows::of(b, read.cycles, read.tsc, read.time)?;
                tx.send(Ok(Some(Piece { seq, rows }))).map_err(stopped)
            };
            let mut ranges = item.ranges.iter().cloned().peekable();
            match (footer, item.group) {
                (Some(m), Some(g)) => {
                    let within: Vec<Range<usize>> = (item.ranges.iter())
                        .map(|r| (r.start - item.base) as usize..(r.end - item.base) as usize)
                        .collect();
                    // The selected rows, in order: cut where a stretch ends.
                    for b in t.row_group_rows(m, read.cols, g, &within, batch)? {
                        let b = b?;
                        let mut at = 0;
                        while at < b.num_rows() {
                            let r = ranges
                                .peek_mut()
                                .ok_or_else(|| anyhow!("more rows than selected"))?;
                            let n = ((r.end - r.start) as usize).min(b.num_rows() - at);
                            send(r.start, &b.slice(at, n))?;
                            at += n;
                            r.start += n as u64;
                            if r.start == r.end {
                                ranges.next();
                            }
                        }
                    }
                }
                _ => {
                    // Every row of the file: those of the ranges kept.
                    let mut row = item.base;
                    for b in t.batches(read.cols)? {
                        let b = b?;
                        let (lo, hi) = (row, row + b.num_rows() as u64);
                        while let Some(r) = ranges.peek() {
                            if r.start >= hi {
                                break;
                            }
                            let (s, e) = (r.start.max(lo), r.end.min(hi));
                            if s < e {
                                send(s, &b.slice((s - lo) as usize, (e - s) as usize))?;
                            }
                            if r.end > hi {
                                break;
                            }
                            ranges.next();
                        }
                        row = hi;
                    }
                }
            }
            if ranges.peek().is_some() {
                bail!(
                    "{}: fewer rows than the thread's stretches",
                    t.path.display()
                );
            }
            tx.send(Ok(None)).map_err(stopped)
        })();
        if let Err(e) = sent {
            // The walk reports the error (or has stopped already).
            let _ = tx.send(Err(e));
            return;
        }
    }
}

/// The thread's rows on one CPU as the walk takes them.
struct Cursor<'p> {
    /// Its stretches, and the one the walk is in.
    stretches: &'p [Stretch],
    stretch: usize,
    /// Its readers: item `i` comes from `rxs[i % rxs.len()]`.
    rxs: Vec<Receiver<Message>>,
    items: usize,
    item: usize,
    /// The piece at hand, and its first row not walked.
    piece: Option<Piece>,
    at: usize,
    events: Events,
    /// The last `time` walked, and `cycles` (a CPU's own counter).
    last_time: Option<u64>,
    prev_cyc: Option<u64>,
}

impl Cursor<'_> {
    /// The `time` of the rows of the stretch the walk is in (those of `p`): none past
    /// the stretch's `until` (a time a row took from after the thread left the CPU).
    fn times<'r>(&self, p: &'r Piece) -> impl Fn(usize) -> Option<u64> + 'r {
        let until = self.stretches.get(self.stretch).and_then(|s| s.until);
        move |i| p.rows.time(i).filter(|&t| until.is_none_or(|u| t < u))
    }

    /// Where its next row comes in the walk; `None` when all are walked.
    fn head(&mut self, path: &Path) -> Result<Option<Key>> {
        loop {
            if let Some(p) = &self.piece {
                if self.at < p.rows.len() {
                    let t = self.times(p)(self.at).or(self.last_time);
                    return Ok(Some((t, p.seq + self.at as u64)));
                }
                self.piece = None;
            }
            if self.item == self.items {
                return Ok(None);
            }
            match self.rxs[self.item % self.rxs.len()].recv() {
                Ok(Ok(Some(p))) => (self.piece, self.at) = (Some(p), 0),
                Ok(Ok(None)) => self.item += 1,
                Ok(Err(e)) => return Err(e),
                Err(_) => bail!("a reader of {} stopped", path.display()),
            }
        }
    }

    /// Walk its rows from its head while they come before `limit` (the first of the
    /// other cursors' heads), up to the end of the piece at hand.
    fn walk<F: FnMut(Span)>(
        &mut self,
        w: &mut Walker<'_, '_, F>,
        limit: Option<Key>,
        evs: &mut Vec<Ev>,
    ) {
        let p = self.piece.as_ref().expect("a cursor is walked at its head");
        let time = self.times(p);
        let (from, n) = (self.at, p.rows.len());
        let mut to = from;
        let mut last = self.last_time;
        match limit {
            None => {
                to = n;
                last = (from..n).rev().find_map(&time).or(last);
            }
            Some(limit) => {
                while to < n {
                    let t = time(to);
                    // (The head comes before the limit: at least one row is walked.)
                    if to > from && (t.or(last), p.seq + to as u64) > limit {
                        break;
                    }
                    last = t.or(last);
                    to += 1;
                }
            }
        }
        self.last_time = last;
        let end = p.seq + to as u64;
        // Events at a row are applied before it.
        evs.clear();
        self.events.until(end, evs);
        let mut seq = p.seq + from as u64;
        w.batch(&p.rows, from..to, evs, &mut seq, &mut self.prev_cyc);
        self.at = to;
        // At the end of a stretch, the events right after its last row are its own.
        while let Some(s) = self.stretches.get(self.stretch).filter(|s| s.end <= end) {
            if s.end == end {
                evs.clear();
                self.events.until(end + 1, evs);
                for &e in evs.iter() {
                    w.event(e);
                }
            }
            self.stretch += 1;
        }
    }
}

/// Walk the cursors' rows, the first in time first.
fn merge<F: FnMut(Span)>(
    cursors: &mut [Cursor<'_>],
    w: &mut Walker<'_, '_, F>,
    path: &Path,
) -> Result<()> {
    let mut heads = (cursors.iter_mut())
        .map(|c| c.head(path))
        .collect::<Result<Vec<_>>>()?;
    let mut evs = Vec::new();
    loop {
        // The first head, and the second: where the first's walk stops.
        let (mut first, mut second): (Option<(usize, Key)>, Option<Key>) = (None, None);
        for (i, h) in heads.iter().enumerate() {
            let Some(h) = *h else { continue };
            match first {
                Some((_, f)) if h > f => {
                    if second.is_none_or(|s| h < s) {
                        second = Some(h);
                    }
                }
                _ => {
                    second = first.map(|f| f.1);
                    first = Some((i, h));
                }
            }
        }
        let Some((c, _)) = first else {
            return Ok(());
        };
        cursors[c].walk(w, second, &mut evs);
        heads[c] = cursors[c].head(path)?;
    }
}
