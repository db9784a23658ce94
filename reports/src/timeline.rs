//! Call spans in time, as Chrome trace-event JSON (the Perfetto UI and chrome://tracing
//! open it).
//!
//! Every frame of the rebuilt stacks ([`crate::stacks`]) becomes one complete event
//! (`"ph": "X"`): its function, from the `tsc` of the row that entered it (the call) to
//! the `tsc` of the row that left it (the return, or the last row for frames still open
//! at the end). Frames are nested by construction. Timestamps are microseconds since the
//! first row's TSC, at `tsc_mhz` ticks per microsecond; tracemill does not know the TSC
//! frequency, so it assumes the guaranteed ratio × 100 MHz (the bus clock), or 1 GHz
//! without a ratio, and says which in the file's `otherData`.
//!
//! **What a viewer cannot show is merged.** A span shorter than `min_ns` (default 1 ns,
//! the resolution of the file's timestamps: shorter ones are written as `"dur":0`, and
//! the TSC of a trace without cycle-accurate timing makes many a call last zero ticks)
//! is drawn as nothing and costs a viewer as much as any. Such spans are merged: a run
//! of them one after another at the same depth (gaps shorter than `min_ns` too) becomes
//! one span, named by its function when they all ran the same one and `[N calls]`
//! otherwise, with `args.calls` saying how many, and their callees in it
//! (`args.nested`); a run still too short to show goes into its caller's `args.nested`.
//! The file's `otherData.merged` says how many spans were merged.
//! Then at most `max_spans` spans are written (default 1,000,000, about 100 MB of JSON:
//! a file the Perfetto UI loads in a browser tab's memory, where the 201 MB of 2 M
//! spans that prompted this was too much to work with).

use std::io::Write;

use anyhow::{bail, Context as _, Result};

use crate::input::Input;
use crate::source::Source;
use crate::stacks::{build, Functions, Span};
use crate::util::AddrMap;

/// What to write.
#[derive(Clone, Debug)]
pub struct Options {
    pub from: Option<u64>,
    pub to: Option<u64>,
    pub tsc_mhz: Option<f64>,
    /// Spans written at most (the first ones are kept, unless `outermost`).
    pub max_spans: u64,
    /// Past `max_spans`, keep the outermost and then the longest spans instead of the
    /// first: an overview (the HTML page's preview) rather than a window. Spans are
    /// emitted when they end, so the first ones are the innermost, and the outer frames
    /// (`_start`, `main`) would be the ones left out.
    pub outermost: bool,
    /// Spans shorter than this (in ns, at `tsc_mhz`) are merged (module doc); 0 merges
    /// none.
    pub min_ns: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            from: None,
            to: None,
            tsc_mhz: None,
            max_spans: 1_000_000,
            outermost: false,
            min_ns: 1.0,
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct TimelineSummary {
    pub spans: u64,
    pub dropped: u64,
    /// Spans merged into others (too short to show): siblings and their callees.
    pub merged: u64,
    pub first_tsc: Option<u64>,
    pub tsc_mhz: f64,
    pub warnings: Vec<String>,
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

/// A span to write: a frame, or a run of short ones merged (`calls` > 1) with their
/// callees (`nested`).
#[derive(Clone, Copy, Debug)]
struct Out {
    s: Span,
    calls: u32,
    nested: u32,
    /// The merged calls ran more than one function.
    mixed: bool,
}

/// Merges the spans too short to show (module doc). Spans come as frames end: callees
/// before their caller, siblings in order.
struct Merger {
    min: u64,
    /// Per depth, the run of short spans being merged.
    runs: Vec<Option<Out>>,
    /// Per depth, calls made inside the frame open at that depth that went into it: runs
    /// still too short to show once merged.
    inside: Vec<u32>,
    merged: u64,
}

impl Merger {
    fn new(min: u64) -> Self {
        Merger {
            min,
            runs: Vec::new(),
            inside: Vec::new(),
            merged: 0,
        }
    }

    /// A run ends: written when it lasts long enough to show, else counted in its
    /// caller (`nested`), or, at depth 0, written anyway (it has no caller).
    fn close(&mut self, r: Out, emit: &mut impl FnMut(Out)) {
        let d = r.s.depth as usize;
        if d > 0 && r.s.end.saturating_sub(r.s.begin) < self.min {
            let n = r.calls.saturating_add(r.nested);
            self.inside[d - 1] = self.inside[d - 1].saturating_add(n);
            // Its nested calls were counted when they went into it.
            self.merged += r.calls as u64;
        } else {
            // The calls merged into this one (beyond the first) were merged.
            self.merged += (r.calls - 1) as u64;
            emit(r);
        }
    }

    fn push(&mut self, s: Span, emit: &mut impl FnMut(Out)) {
        let d = s.depth as usize;
        if self.runs.len() <= d {
            self.runs.resize(d + 1, None);
            self.inside.resize(d + 1, 0);
        }
        // Runs deeper than this span ended inside it.
        for k in (d + 1..self.runs.len()).rev() {
            if let Some(r) = self.runs[k].take() {
                self.close(r, emit);
            }
        }
        let nested = std::mem::take(&mut self.inside[d]);
        let o = Out {
            s,
            calls: 1,
            nested,
            mixed: false,
        };
        if s.end.saturating_sub(s.begin) >= self.min {
            if let Some(r) = self.runs[d].take() {
                self.close(r, emit);
            }
            emit(o);
            return;
        }
        match &mut self.runs[d] {
            Some(r) if s.begin.saturating_sub(r.s.end) < self.min => {
                r.calls += 1;
                r.nested = r.nested.saturating_add(nested);
                r.mixed |= r.s.func != s.func;
                r.s.end = r.s.end.max(s.end);
            }
            slot => {
                if let Some(r) = slot.replace(o) {
                    self.close(r, emit);
                }
            }
        }
    }

    fn finish(&mut self, emit: &mut impl FnMut(Out)) {
        for k in (0..self.runs.len()).rev() {
            if let Some(r) = self.runs[k].take() {
                self.close(r, emit);
            }
        }
    }
}

/// One input's spans, ready to write.
struct Spans {
    spans: Vec<Out>,
    names: Vec<String>,
    mhz: f64,
    how: String,
    origin: u64,
}

/// Rebuild one input's stacks and keep the spans in the window, counting against the
/// limit (`n` written so far, `dropped` past it).
fn spans(
    input: &Input,
    opts: &Options,
    warnings: &mut Vec<String>,
    n: &mut u64,
    dropped: &mut u64,
    merged: &mut u64,
) -> Result<Spans> {
    let t = input.table("branches")?;
    t.require(&["tsc"])?;
    let (mhz, how) = match (
        opts.tsc_mhz,
        input.manifest.as_ref().and_then(|m| m.guaranteed_ratio),
    ) {
        (Some(m), _) => (m, "given (--tsc-mhz)".to_string()),
        (None, Some(r)) if r > 0 => (
            r as f64 * 100.0,
            format!("assumed: guaranteed ratio {r} x 100 MHz"),
        ),
        _ => (
            1000.0,
            "assumed: 1 GHz (no guaranteed ratio in the bundle)".to_string(),
        ),
    };
    if mhz <= 0.0 || !mhz.is_finite() {
        bail!("--tsc-mhz must be a positive number");
    }
    let mut f = Functions::new(&input.symbols);
    let mut pending: Vec<Out> = Vec::new();
    let mut merger = Merger::new((opts.min_ns.max(0.0) * mhz / 1000.0).ceil() as u64);
    // With `outermost`, this input's share of the limit.
    let budget = opts.max_spans.saturating_sub(*n) as usize;
    let mut seen = 0u64;
    {
        let mut keep = |s: Out| {
            if opts.outermost {
                seen += 1;
                pending.push(s);
                // Bounded: pruned to the budget whenever it holds four times as many.
                if pending.len() >= 4 * budget.max(1) {
                    keep_outermost(&mut pending, budget);
                }
                return;
            }
            if *n >= opts.max_spans {
                *dropped += 1;
                return;
            }
            *n += 1;
            pending.push(s);
        };
        build(input, &mut f, warnings, true, false, |s: Span| {
            let (b, e) = (s.begin, s.end);
            if opts.from.is_some_and(|f| e < f) || opts.to.is_some_and(|t| b > t) {
                return;
            }
            merger.push(s, &mut keep);
        })?;
        merger.finish(&mut keep);
    }
    *merged += merger.merged;
    if opts.outermost {
        keep_outermost(&mut pending, budget);
        pending.sort_unstable_by_key(|o| (o.s.begin, o.s.depth));
        *n += pending.len() as u64;
        *dropped += seen - pending.len() as u64;
    }
    let origin = opts
        .from
        .unwrap_or_else(|| pending.iter().map(|o| o.s.begin).min().unwrap_or(0));
    Ok(Spans {
        spans: pending,
        names: f.names,
        mhz,
        how,
        origin,
    })
}

/// Keep the `n` outermost spans, the longest first within a depth.
fn keep_outermost(spans: &mut Vec<Out>, n: usize) {
    if spans.len() > n {
        spans.sort_unstable_by_key(|o| {
            (
                o.s.depth,
                std::cmp::Reverse(o.s.end.saturating_sub(o.s.begin)),
                o.s.begin,
            )
        });
        spans.truncate(n);
    }
}

/// Write one input's spans as complete events of process `pid`, thread `tid`.
fn write_spans(
    w: &mut impl Write,
    sp: &Spans,
    opts: &Options,
    (pid, tid): (usize, usize),
    first: &mut bool,
) -> Result<()> {
    let mut names: AddrMap<u32, String> = AddrMap::default();
    for o in &sp.spans {
        let s = &o.s;
        let b = opts.from.map_or(s.begin, |f| s.begin.max(f));
        let e = opts.to.map_or(s.end, |t| s.end.min(t));
        let mixed;
        let name = if o.mixed {
            mixed = json_str(&format!("[{} calls]", o.calls));
            &mixed
        } else {
            names
                .entry(s.func)
                .or_insert_with(|| json_str(&sp.names[s.func as usize]))
        };
        let ts = b.saturating_sub(sp.origin) as f64 / sp.mhz;
        let dur = e.saturating_sub(b) as f64 / sp.mhz;
        write!(
            w,
            "{}{{\"name\":{name},\"ph\":\"X\",\"ts\":{ts:.3},\"dur\":{dur:.3},\"pid\":{pid},\"tid\":{tid},\"args\":{{\"depth\":{}",
            if *first { "" } else { "," },
            s.depth
        )
        .context("writing the timeline")?;
        if o.calls > 1 || o.nested > 0 {
            write!(w, ",\"calls\":{},\"nested\":{}", o.calls, o.nested)?;
        }
        w.write_all(b"}}")?;
        *first = false;
    }
    Ok(())
}

/// What `otherData.merged` says.
fn merge_note(merged: u64, opts: &Options) -> String {
    format!(
        "{merged} spans shorter than {} ns merged: runs of them at one depth are one span (args.calls; [N calls] when they ran several functions), their callees in it (args.nested)",
        opts.min_ns
    )
}

/// A decode's name in the viewers: its bundle directory's name, else its trace file's.
fn process_name(input: &Input) -> String {
    let path = input.bundle.clone().or_else(|| {
        input
            .meta
            .get(tracemill_schemas::meta::SOURCE)
            .map(std::path::PathBuf::from)
    });
    path.as_deref()
        .and_then(|p| p.file_name())
        .map_or_else(|| "trace".to_string(), |n| n.to_string_lossy().into_owned())
}

/// Write the timeline of a decode, or of the selected bundles of a dataset, to `out`.
///
/// Over a dataset each bundle is one process (`pid` 1, 2, ... in catalog order, named by
/// a `process_name` metadata event with the bundle id, source and labels), its time from
/// its own first span: bundles come from different machines and runs, whose TSCs share
/// no origin. `--from`/`--to` apply to every bundle's TSC alike. A single decode is process
/// 1, named by its bundle directory (or trace file) and labels.
pub fn write(src: &mut Source, opts: &Options, out: impl Write) -> Result<TimelineSummary> {
    let mut w = std::io::BufWriter::new(out);
    write!(w, "{{\"traceEvents\":[")?;
    let mut warnings = Vec::new();
    let mut n = 0u64;
    let mut dropped = 0u64;
    let mut merged = 0u64;
    let mut first = true;
    let mut last: Option<(u64, f64, String)> = None;
    let dataset = matches!(src, Source::Dataset(_));
    let mut pid = 0;
    let mut ws = Vec::new();
    src.each(&mut ws, |input, member| {
        let mut bw = Vec::new();
        // A perf.data decode: one track per thread, each thread's stacks its own, on one
        // time origin (the threads share the machine's TSC).
        let tracks = match input.threads()? {
            Some(threads) => {
                let mut tracks = Vec::new();
                for thread in threads {
                    let name = thread.name.clone();
                    input.thread = Some(thread);
                    let sp = spans(input, opts, &mut bw, &mut n, &mut dropped, &mut merged);
                    input.thread = None;
                    tracks.push((Some(name), sp?));
                }
                let origin = tracks.iter().map(|t| t.1.origin).min().unwrap_or(0);
                for t in &mut tracks {
                    t.1.origin = origin;
                }
                tracks
            }
            None => vec![(None, spans(input, opts, &mut bw, &mut n, &mut dropped, &mut merged)?)],
        };
        for x in bw {
            crate::source::warn_once(&mut warnings, x);
        }
        let Some(sp) = tracks.last().map(|t| &t.1) else {
            return Ok(());
        };
        pid += 1;
        {
            let labels: Vec<String> = input
                .meta
                .iter()
                .filter_map(|(k, v)| Some(format!("{}={v}", k.strip_prefix("label.")?)))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            // Every process is named, a single decode's too (the viewers otherwise show
            // "Process 1"): by its bundle in a dataset, else by its bundle directory or trace.
            let who = match member {
                Some(m) => m.label(),
                None => process_name(input),
            };
            let name = format!("{who} {}", labels.join(" "));
            write!(
                w,
                "{}{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":{},\"tsc_origin\":\"{:#x}\",\"tsc_mhz\":{}}}}}",
                if first { "" } else { "," },
                json_str(name.trim_end()),
                sp.origin,
                sp.mhz
            )?;
            first = false;
        }
        let (origin, mhz, how) = (sp.origin, sp.mhz, sp.how.clone());
        for (k, (name, sp)) in tracks.iter().enumerate() {
            if let Some(name) = name {
                write!(
                    w,
                    ",{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":{}}}}}",
                    k + 1,
                    json_str(name)
                )?;
            }
            write_spans(&mut w, sp, opts, (pid, k + 1), &mut first)?;
        }
        last = Some((origin, mhz, how));
        Ok(())
    })?;
    let (origin, mhz, how) = last.unwrap_or((0, 1000.0, String::new()));
    if dataset {
        write!(
            w,
            "],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"tool\":\"tracemill report timeline\",\"merged\":{},\"bundles\":{pid},\"time\":\"each process (bundle) from its own first span; its tsc_origin and tsc_mhz in its process_name event\"}}}}",
            json_str(&merge_note(merged, opts))
        )?;
    } else {
        write!(
            w,
            "],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"tool\":\"tracemill report timeline\",\"merged\":{},\"tsc_origin\":\"{origin:#x}\",\"tsc_mhz\":{mhz},\"tsc_rate\":{}}}}}",
            json_str(&merge_note(merged, opts)),
            json_str(&how)
        )?;
    }
    w.flush()?;
    for x in ws {
        crate::source::warn_once(&mut warnings, x);
    }
    if n == 0 {
        warnings.push("no span: the branches table has no tsc (no timing packets) or the window holds no call".into());
    }
    if dropped > 0 {
        warnings.push(format!(
            "{dropped} spans past the limit of {} left out: narrow with --from/--to",
            opts.max_spans
        ));
    }
    Ok(TimelineSummary {
        spans: n,
        dropped,
        merged,
        first_tsc: Some(origin),
        tsc_mhz: mhz,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(func: u32, depth: u32, begin: u64, end: u64) -> Span {
        Span {
            func,
            depth,
            begin,
            end,
        }
    }

    fn merge(min: u64, spans: &[Span]) -> (Vec<Out>, u64) {
        let mut m = Merger::new(min);
        let mut out = Vec::new();
        for &s in spans {
            m.push(s, &mut |o| out.push(o));
        }
        m.finish(&mut |o| out.push(o));
        (out, m.merged)
    }

    #[test]
    fn spans_too_short_to_show_are_merged_and_every_call_counted() {
        // main (0..100) calls f ten times at the same tick 10, then g (20..30) whose
        // callees h, i take no time, then f at 40..41 and 41..42: each too short alone,
        // long enough together.
        let mut spans: Vec<Span> = (0..10).map(|_| span(1, 1, 10, 10)).collect();
        spans.extend([span(3, 2, 22, 22), span(4, 2, 22, 22), span(2, 1, 20, 30)]);
        spans.extend([span(1, 1, 40, 41), span(1, 1, 41, 42), span(0, 0, 0, 100)]);
        let (out, merged) = merge(2, &spans);
        let calls: u64 = out.iter().map(|o| (o.calls + o.nested) as u64).sum();
        assert_eq!(
            calls,
            spans.len() as u64,
            "every call is a span or counted in one"
        );
        assert_eq!(merged, spans.len() as u64 - out.len() as u64);
        // The ten zero-length calls of f went into main; h and i into g.
        let main = out.iter().find(|o| o.s.func == 0).unwrap();
        assert_eq!((main.calls, main.nested), (1, 10));
        let g = out.iter().find(|o| o.s.func == 2).unwrap();
        assert_eq!((g.calls, g.nested, g.mixed), (1, 2, false));
        // The two short calls of f one after the other: one span of two calls.
        let f: Vec<&Out> = out.iter().filter(|o| o.s.func == 1).collect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].calls, f[0].s.begin, f[0].s.end), (2, 40, 42));
        assert!(out
            .iter()
            .all(|o| o.s.end - o.s.begin >= 2 || o.s.depth == 0));
    }

    #[test]
    fn a_run_of_several_functions_is_named_as_such_and_nothing_merges_at_zero() {
        let spans = [
            span(1, 1, 10, 11),
            span(2, 1, 11, 12),
            span(1, 1, 12, 13),
            span(0, 0, 0, 100),
        ];
        let (out, _) = merge(2, &spans);
        let run = out.iter().find(|o| o.s.depth == 1).unwrap();
        assert!(run.mixed && run.calls == 3, "{run:?}");
        let (out, merged) = merge(0, &spans);
        assert_eq!((out.len(), merged), (4, 0));
        assert!(out
            .iter()
            .all(|o| o.calls == 1 && o.nested == 0 && !o.mixed));
    }
}
