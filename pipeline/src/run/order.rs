//! Stages 2 and 3: chunk bodies decoded on the pool, then stitched, timed and counted in
//! trace order on the calling thread.

use std::collections::{BTreeMap, VecDeque};
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use crossbeam_channel::bounded;
use tracemill_decode::block::BlockCache;
use tracemill_decode::chunk::{decode_body_bounded, Body, Input, Piece, Stitcher};
use tracemill_decode::front::Format as TraceFormat;
use tracemill_decode::rows::{BranchColumns, EventRow, TimingColumns};
use tracemill_decode::sink::RowSink;
use tracemill_decode::tally::Tally;
use tracemill_decode::timing::{Clock, Timed, Timeline, TimingTable};
use tracemill_schemas::EventKind;

use super::emit::{Emitter, ToWriter};
use super::{Plan, Report, PIECE_LIMIT, RELEASE_STEP};
use tracemill_input::bundle::Bundle;

/// Stage 2: decode chunk bodies as pool tasks, each once a window slot is free. The
/// producer waits for slots outside the pool, so no pool thread ever blocks on a channel:
/// the row-group encodings the consumer spawns on the same pool always find a thread
/// (with one job, blocking inside the pool would deadlock).
fn produce<F: TraceFormat, S: Rows>(
    input: &Input<'_, F>,
    pool: &rayon::ThreadPool,
    plan: &Plan,
    caches: &[Mutex<BlockCache>],
    slots: crossbeam_channel::Receiver<()>,
    bodies: crossbeam_channel::Sender<(usize, Body<F, S>)>,
) {
    let cycle_acc = F::Clock::new(&input.timing).cycle_acc();
    let limit = plan.body_limit;
    pool.in_place_scope(|sc| {
        for (i, c) in plan.chunks.iter().enumerate() {
            if slots.recv().is_err() {
                return; // the consumer stopped (a write failed)
            }
            let tx = bodies.clone();
            sc.spawn(move |_| {
                let t = rayon::current_thread_index().unwrap_or(0);
                let mut cache = caches[t % caches.len()]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let mut body = decode_body_bounded(input, &mut cache, *c, limit);
                drop(cache);
                S::prepare(&mut body.out, cycle_acc);
                let _ = tx.send((i, body));
            });
        }
    })
}

/// Stage 3, on the calling thread: bodies in chunk order are stitched, timed, numbered,
/// counted, and sent on to the writer.
pub(super) struct Ordered<'r, 'a, F: TraceFormat> {
    pub(super) bundle: &'r Bundle,
    pub(super) input: &'r Input<'a, F>,
    pub(super) plan: &'r Plan,
    pub(super) pool: &'r rayon::ThreadPool,
    pub(super) tx: crossbeam_channel::Sender<ToWriter>,
    pub(super) progress: bool,
}

impl<F: TraceFormat> Ordered<'_, '_, F> {
    /// Emit a timed piece; a failure (the writer stopped) becomes a warning and sets
    /// `failed`.
    pub(super) fn emit(
        &self,
        out: &mut Emitter,
        p: Piece<BranchColumns>,
        t: TimingColumns,
        report: &mut Report,
        failed: &mut bool,
    ) {
        if let Err(e) = out.emit(p, t, report, self.pool, &self.tx) {
            *failed = true;
            report.warnings.push(format!("{e:#}"));
        }
    }

    /// Decode the part with rows `S` timed by `timer`: bodies decoded on the pool by
    /// [`produce`], stitched and emitted in order here. Whether every body was emitted.
    pub(super) fn run_with<S: Rows>(
        self,
        timer: impl Timer<S>,
        caches: &[Mutex<BlockCache>],
        out: &mut Emitter,
        report: &mut Report,
    ) -> bool {
        // Chunks are decoded as pool tasks, at most `window` of them between being
        // handed out and being consumed in order: memory stays bounded whatever the
        // trace size, and no thread waits for a whole batch.
        let window = report.jobs * 2 + 2;
        let (slot_tx, slot_rx) = bounded::<()>(window);
        for _ in 0..window {
            slot_tx.send(()).expect("room for every slot");
        }
        let (body_tx, body_rx) = crossbeam_channel::unbounded::<(usize, Body<F, S>)>();
        std::thread::scope(|ps| {
            let (input, pool, plan) = (self.input, self.pool, self.plan);
            let producer = ps.spawn(move || produce(input, pool, plan, caches, slot_rx, body_tx));
            let done = self.run(timer, out, body_rx, slot_tx, report);
            producer.join().expect("decode threads do not panic");
            done
        })
    }

    /// Whether every body was emitted (not stopped by a writer's failure).
    fn run<S: Rows>(
        self,
        mut timer: impl Timer<S>,
        out: &mut Emitter,
        bodies: crossbeam_channel::Receiver<(usize, Body<F, S>)>,
        slots: crossbeam_channel::Sender<()>,
        report: &mut Report,
    ) -> bool {
        let chunks = &self.plan.chunks;
        let bar = (self.progress && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(self.input.stream.len());
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} decoding [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b
        });
        let mut stitcher = Stitcher::<F, S>::new(self.input).with_piece_limit(PIECE_LIMIT);
        let first_psb = self.plan.chunks[0].start;
        let mut junk = (first_psb > 0).then(|| EventRow {
            seq: 0,
            offset: 0,
            kind: EventKind::Resync,
            ip: None,
            tsc: None,
            detail: format!(
                "skipped {first_psb} bytes before the first PSB (packet boundaries are unknown there)"
            ),
        });
        let mut send_err = false;
        let mut ready = BTreeMap::new();
        let mut next = 0;
        // Trace pages before this offset have been released.
        let mut released = 0u64;
        'bodies: for (i, b) in bodies.iter() {
            ready.insert(i, b);
            // Pieces filled since the last body go on now, not after the next stitch.
            timer.ready(&mut |p, t| self.emit(out, p, t, report, &mut send_err));
            while let Some(b) = ready.remove(&next) {
                next += 1;
                let done = b.chunk.end - b.chunk.start;
                stitcher.push(b, |mut p| {
                    if let Some(j) = junk.take() {
                        p.events.insert(0, j);
                        p.prepared = None;
                    }
                    // A chunk walked here in pieces (a stretch without PSBs) may be the
                    // whole trace: let the pages behind the walk go as it goes. (A page
                    // read again, by a look-ahead undone, is only mapped in again.)
                    if let Some(o) = S::last_offset(&p) {
                        let behind = o.saturating_sub(RELEASE_STEP);
                        if behind >= released + RELEASE_STEP {
                            self.bundle.release_trace_before(behind);
                            released = behind;
                        }
                    }
                    timer.push(p, self.pool, &mut |p, t| {
                        self.emit(out, p, t, report, &mut send_err)
                    });
                });
                if let Some(b) = &bar {
                    b.inc(done);
                }
                // The next stitch starts inside the chunk just done; bodies read later
                // chunks only. So the bytes before that chunk are finished with.
                let finished = chunks[next - 1].start;
                if finished >= released + RELEASE_STEP {
                    self.bundle.release_trace_before(finished);
                    released = finished;
                }
                if send_err {
                    break 'bodies;
                }
                let _ = slots.send(());
            }
            if next == chunks.len() {
                break;
            }
        }
        drop(slots);
        drop(bodies);
        if !send_err && next == chunks.len() {
            // The trace's tail: instructions after the last row (`Stitcher::finish`).
            stitcher.finish(|p| {
                timer.push(p, self.pool, &mut |p, t| {
                    self.emit(out, p, t, report, &mut send_err)
                })
            });
        }
        if !send_err {
            timer.finish(self.pool, &mut |p, t| {
                if !send_err {
                    self.emit(out, p, t, report, &mut send_err);
                }
            });
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        report.fallbacks += stitcher.fallbacks;
        !send_err
    }
}

/// Pieces whose rows' `cycles` and `tsc` are being written on the pool
/// ([`Timed::done`]): the timeline only decides them (a range of rows at a time), so that
/// the thread every piece goes through does a few words of work per range, not a
/// division per row. They come back to be emitted in trace order.
#[derive(Default)]
pub(super) struct Filling {
    pub(super) queue: VecDeque<Out>,
}

/// One piece out: its job (taken by whichever comes first, the pool task or the ordered
/// thread) and the pool task's result.
pub(super) type Out = (
    Arc<Mutex<Option<Timed>>>,
    crossbeam_channel::Receiver<(Piece<BranchColumns>, TimingColumns)>,
);

impl Filling {
    /// Pieces out at once. Past it the ordered thread takes the oldest back and fills it
    /// itself, unless a pool thread already is (then it waits for that): the pool's
    /// queue is first in, first out, so a task spawned behind a window of chunks to
    /// decode may not start for a while, and each piece out is rows in memory (with four
    /// out and waiting, `decode -j2 --out` of the 1 GiB synthetic trace peaked at 613 MiB
    /// RssAnon against 556 MiB before the fills moved to the pool).
    const IN_FLIGHT: usize = 2;

    pub(super) fn start(&mut self, t: Timed, pool: &rayon::ThreadPool) {
        let (tx, rx) = bounded(1);
        let job = Arc::new(Mutex::new(Some(t)));
        let mine = Arc::clone(&job);
        pool.spawn(move || {
            let t = mine.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(t) = t {
                let _ = tx.send(t.done());
            }
        });
        self.queue.push_back((job, rx));
    }

    /// Hand the pieces that are back, in order, to `emit`: those ready at the front, and
    /// more while too many are out (`all`: every one).
    pub(super) fn ready(&mut self, all: bool, emit: Emit<'_>) {
        while let Some((job, rx)) = self.queue.front() {
            let piece = match rx.try_recv() {
                Ok(p) => Some(p),
                Err(crossbeam_channel::TryRecvError::Empty) => {
                    if !all && self.queue.len() <= Self::IN_FLIGHT {
                        break;
                    }
                    let t = job.lock().unwrap_or_else(|e| e.into_inner()).take();
                    match t {
                        Some(t) => Some(t.done()),
                        // A pool thread is filling it. (A closed channel would mean a
                        // task that never ran: a panic aborts the process first.)
                        None => rx.recv().ok(),
                    }
                }
                Err(crossbeam_channel::TryRecvError::Disconnected) => None,
            };
            self.queue.pop_front();
            if let Some((p, t)) = piece {
                emit(p, t);
            }
        }
    }
}

/// Where timed pieces go, in trace order.
pub(super) type Emit<'e> = &'e mut dyn FnMut(Piece<BranchColumns>, TimingColumns);

/// A piece's rows as the pipeline handles them: kept ([`BranchColumns`]), or counted
/// without being kept ([`tracemill_decode::tally`], when the `branches` table is not
/// asked for).
pub(super) trait Rows: RowSink + Default + Send + 'static {
    /// Work done where the piece was decoded, before it goes in order.
    fn prepare(_p: &mut Piece<Self>, _cycle_acc: bool) {}
    /// The last stream offset the piece reached, if it knows.
    fn last_offset(p: &Piece<Self>) -> Option<u64>;
}

impl Rows for BranchColumns {
    fn prepare(p: &mut Piece<Self>, cycle_acc: bool) {
        // What the timeline reads of the piece, computed here rather than on the
        // ordered thread.
        tracemill_decode::timing::prepare(p, cycle_acc);
    }
    fn last_offset(p: &Piece<Self>) -> Option<u64> {
        p.rows.offset.last().copied()
    }
}

impl<const COVER: bool> Rows for Tally<COVER> {
    fn last_offset(p: &Piece<Self>) -> Option<u64> {
        let events = p.events.last().map(|e| e.offset);
        let timing = p.timing.last().map(|t| t.offset);
        events.max(timing)
    }
}

/// Times pieces of rows `S` in trace order: what comes out are pieces with their rows'
/// time and their `timing` rows.
pub(super) trait Timer<S> {
    /// The next piece.
    fn push(&mut self, p: Piece<S>, pool: &rayon::ThreadPool, emit: Emit<'_>);
    /// Hand on the pieces done since.
    fn ready(&mut self, emit: Emit<'_>);
    /// The end of the trace: everything left.
    fn finish(&mut self, pool: &rayon::ThreadPool, emit: Emit<'_>);
}

/// The rows' timeline ([`Timeline`]), with the rows' time written on the pool
/// ([`Filling`]).
pub(super) struct RowsTimer<C: Clock> {
    timeline: Timeline<C>,
    filling: Filling,
}

impl<C: Clock> RowsTimer<C> {
    pub(super) fn new(c: &C::Config) -> Self {
        RowsTimer {
            timeline: Timeline::new(c),
            filling: Filling::default(),
        }
    }
}

impl<C: Clock> Timer<BranchColumns> for RowsTimer<C> {
    fn push(&mut self, p: Piece<BranchColumns>, pool: &rayon::ThreadPool, emit: Emit<'_>) {
        for t in self.timeline.push_timed(p) {
            self.filling.start(t, pool);
        }
        self.filling.ready(false, emit);
    }
    fn ready(&mut self, emit: Emit<'_>) {
        self.filling.ready(false, emit);
    }
    fn finish(&mut self, pool: &rayon::ThreadPool, emit: Emit<'_>) {
        for t in self.timeline.finish_timed() {
            self.filling.start(t, pool);
        }
        self.filling.ready(true, emit);
    }
}

/// Pieces whose rows were counted, not kept: the `timing` table from the clock alone
/// ([`TimingTable`]; `None`: neither it nor the events' time is asked for), and each
/// piece handed on at once, without rows.
pub(super) struct TallyTimer<C: Clock> {
    table: Option<TimingTable<C>>,
}

impl<C: Clock> TallyTimer<C> {
    pub(super) fn new(c: &C::Config, table: bool) -> Self {
        TallyTimer {
            table: table.then(|| TimingTable::new(c)),
        }
    }
}

impl<C: Clock, const COVER: bool> Timer<Tally<COVER>> for TallyTimer<C> {
    fn push(&mut self, p: Piece<Tally<COVER>>, _pool: &rayon::ThreadPool, emit: Emit<'_>) {
        let t = match &mut self.table {
            Some(table) => table.piece(&p),
            None => TimingColumns::default(),
        };
        let p = Piece {
            rows: BranchColumns::default(),
            stats: p.stats,
            coverage: p.coverage,
            events: p.events,
            timing: p.timing,
            prepared: None,
        };
        emit(p, t);
    }
    fn ready(&mut self, _emit: Emit<'_>) {}
    fn finish(&mut self, _pool: &rayon::ThreadPool, _emit: Emit<'_>) {}
}
