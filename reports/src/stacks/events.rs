//! The events table as the walk takes it: gaps, and enables that do not resume where
//! tracing stopped.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use arrow_array::types::UInt64Type;
use arrow_array::Array;
use tracemill_schemas::EventKind;

use crate::input::{Input, Table};
use crate::parquet_keys::{self, Keyed};
use crate::util::{col, kind_codes};

/// A trace-level event that matters to stacks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ev {
    pub(super) seq: u64,
    pub(super) kind: EventKind,
    pub(super) ip: Option<u64>,
    /// For an enable the walk takes: where tracing was last disabled (0: never), set by
    /// [`Resolver`].
    pub(super) disable: u64,
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
pub(super) struct Resolver {
    /// Events seen (those that matter to the walk, kept or not).
    pub(super) seen: u64,
    pub(super) last_disable: u64,
    /// The highest `seq` so far, and a warning once an event comes after a later one.
    pub(super) last_seq: u64,
    pub(super) out_of_order: Option<String>,
}

impl Resolver {
    /// Does the walk need `e` (events in table order)? A kept enable gets its `disable`.
    pub(super) fn keep(&mut self, e: &mut Ev) -> bool {
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
pub(super) struct EventReader<'a> {
    pub(super) batches: Option<EventBatches<'a>>,
    pub(super) warnings: Vec<String>,
    /// Events read as dictionary keys (that matter to the walk).
    pub(super) by_keys: Arc<AtomicU64>,
    /// Shared with the batches, whichever way each row group is read.
    pub(super) resolver: Arc<Mutex<Resolver>>,
}

pub(super) type EventBatches<'a> = Box<dyn Iterator<Item = Result<Vec<Ev>>> + Send + 'a>;

/// The events table's columns the stacks read.
pub(super) const EVENT_COLUMNS: [&str; 3] = ["seq", "kind", "ip"];

/// The events of a thread's stretches on one CPU (`start..=end` each, ascending): those
/// from before a stretch's first row to after its last. The others are other threads'.
#[derive(Clone, Debug)]
pub(super) struct SeqRanges(Arc<[(u64, u64)]>);

impl SeqRanges {
    pub(super) fn new(ranges: impl IntoIterator<Item = (u64, u64)>) -> Self {
        SeqRanges(ranges.into_iter().collect())
    }

    /// Is `seq` in a range?
    pub(super) fn contains(&self, seq: u64) -> bool {
        self.overlaps(seq, seq)
    }

    /// Does a range meet `lo..=hi`?
    pub(super) fn overlaps(&self, lo: u64, hi: u64) -> bool {
        let i = self.0.partition_point(|r| r.1 < lo);
        self.0.get(i).is_some_and(|r| r.0 <= hi)
    }
}

/// The `seq` values of row group `group` of a Parquet events table, from its statistics
/// (`None` when it has none).
fn seq_bounds(group: &parquet::file::metadata::RowGroupMetaData) -> Option<(u64, u64)> {
    use parquet::file::statistics::Statistics;
    let c = group
        .columns()
        .iter()
        .find(|c| c.column_path().string() == "seq")?;
    match c.statistics()? {
        Statistics::Int64(s) => Some((*s.min_opt()? as u64, *s.max_opt()? as u64)),
        _ => None,
    }
}

impl<'a> EventReader<'a> {
    /// The events of the whole table, or only those `ranges` holds (each CPU's of a
    /// thread's walk: [`SeqRanges`]), settled by a [`Resolver`] of their own.
    pub(super) fn open(input: &'a Input, ranges: Option<SeqRanges>) -> Self {
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
            Ok(t) => match Self::batches(t, by_keys.clone(), resolver.clone(), ranges) {
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

    /// Read the batches on a thread of `scope`, which sends them to the receiver (a few
    /// ahead) and stops when the receiver is dropped.
    pub(super) fn spawn<'scope>(
        mut self,
        scope: &'scope std::thread::Scope<'scope, 'a>,
    ) -> (std::sync::mpsc::Receiver<Vec<Ev>>, EventsRead<'scope>) {
        let (etx, erx) = std::sync::mpsc::sync_channel::<Vec<Ev>>(4);
        let done = scope.spawn(move || {
            while let Some(b) = self.next_batch() {
                // A closed channel: the walk stopped.
                if !b.is_empty() && etx.send(b).is_err() {
                    break;
                }
            }
            let resolver = self.resolver();
            EventsDone {
                warnings: self.warnings,
                seen: resolver.seen,
                by_keys: self.by_keys.load(Ordering::Relaxed),
                out_of_order: resolver.out_of_order,
            }
        });
        (erx, EventsRead(done))
    }

    /// The resolver's state once the batches are read.
    pub(super) fn resolver(&self) -> Resolver {
        lock(&self.resolver).clone()
    }

    /// A Parquet table's row groups are read as dictionary keys where they can be (as
    /// `branches`' are: through arrow-rs, the 1 GiB synthetic trace's events took 1.45 s,
    /// a fifth of a `branches` reader's time), others through arrow-rs.
    ///
    /// With `ranges`, only their events, and only the row groups whose `seq` statistics
    /// meet them.
    pub(super) fn batches(
        t: &'a Table,
        by_keys: Arc<AtomicU64>,
        resolver: Arc<Mutex<Resolver>>,
        ranges: Option<SeqRanges>,
    ) -> Result<EventBatches<'a>> {
        t.require(&EVENT_COLUMNS)?;
        let shared = resolver.clone();
        let within = ranges.clone();
        let settled = move |b: Result<arrow_array::RecordBatch>| {
            let mut events = events_of(&b?)?;
            let mut r = lock(&shared);
            events.retain_mut(|e| within.as_ref().is_none_or(|w| w.contains(e.seq)) && r.keep(e));
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
                let skip = ranges
                    .as_ref()
                    .is_some_and(|w| seq_bounds(group).is_some_and(|(lo, hi)| !w.overlaps(lo, hi)));
                if skip {
                    return Box::new(std::iter::empty());
                }
                let keyed = (file.as_ref())
                    .and_then(|f| scratch.read(f, group, &resolver, ranges.as_ref()).ok());
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
    pub(super) fn next_batch(&mut self) -> Option<Vec<Ev>> {
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

/// The events reader's thread ([`EventReader::spawn`]).
pub(super) struct EventsRead<'scope>(std::thread::ScopedJoinHandle<'scope, EventsDone>);

impl EventsRead<'_> {
    /// Wait for the reader (its receiver dropped first, or it may wait to send).
    pub(super) fn join(self) -> EventsDone {
        self.0
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }
}

/// What an events reader says once done.
pub(super) struct EventsDone {
    pub(super) warnings: Vec<String>,
    /// Events that matter to the walk, read.
    pub(super) seen: u64,
    /// Of those, read as dictionary keys.
    pub(super) by_keys: u64,
    pub(super) out_of_order: Option<String>,
}

impl EventsDone {
    /// Count the events in `st`, and say the warnings (each once).
    pub(super) fn add_to(self, st: &mut super::trie::Stacks, warnings: &mut Vec<String>) {
        st.events_read += self.seen;
        st.events_by_keys += self.by_keys;
        for w in self.warnings.into_iter().chain(self.out_of_order) {
            crate::source::warn_once(warnings, w);
        }
    }
}

/// `m`'s value, also after a thread panicked holding it (the value is then as the panic
/// left it: the events reader's state, which a panic would be a bug in anyway).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Does the walk look at events of this kind?
pub(super) fn matters(kind: EventKind) -> bool {
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
pub(super) fn events_of(b: &arrow_array::RecordBatch) -> Result<Vec<Ev>> {
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
pub(super) struct KeyedEvents {
    pub(super) seq: Keyed<u64>,
    pub(super) kind: Keyed<Vec<u8>>,
    pub(super) ip: Keyed<u64>,
    pub(super) pages: parquet_keys::Scratch,
}

impl KeyedEvents {
    /// Events per batch, at most: a row group's kept events in one could be 16 MB (a
    /// row group of the 1 GiB synthetic trace's events has 523,000 events of 32 bytes, if
    /// all were kept) in the channel, four messages deep.
    pub(super) const BATCH: usize = 1 << 16;

    /// The events the walk takes in one row group ([`Resolver`]), in batches, and how
    /// many mattered (of those in `ranges`, when given). `resolver` moves on only when the
    /// whole row group was read: one that cannot be is read again through arrow-rs.
    pub(super) fn read(
        &mut self,
        file: &File,
        group: &parquet::file::metadata::RowGroupMetaData,
        resolver: &Mutex<Resolver>,
        ranges: Option<&SeqRanges>,
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
            if ranges.is_some_and(|w| !w.contains(seq)) {
                continue;
            }
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
pub(super) struct Events {
    pub(super) batches: std::sync::mpsc::Receiver<Vec<Ev>>,
    /// The batch being taken from, and the first event not taken.
    pub(super) batch: Vec<Ev>,
    pub(super) at: usize,
}

impl Events {
    pub(super) fn new(batches: std::sync::mpsc::Receiver<Vec<Ev>>) -> Self {
        Events {
            batches,
            batch: Vec::new(),
            at: 0,
        }
    }

    /// Move the events before row `end` to `out`, as many at a time as there are in the
    /// batch at hand (one at a time was 3% of the flame graph's time). The decoder writes
    /// events in `seq` order; in a table written otherwise, an event behind a later one
    /// is applied with or after that one, and a warning says so.
    pub(super) fn until(&mut self, end: u64, out: &mut Vec<Ev>) {
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
pub(super) fn resumes(at: u64, target: u64) -> bool {
    at != 0 && target >= at && target - at <= 15
}
