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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            from: None,
            to: None,
            tsc_mhz: None,
            max_spans: 2_000_000,
            outermost: false,
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct TimelineSummary {
    pub spans: u64,
    pub dropped: u64,
    pub first_tsc: Option<u64>,
    pub tsc_mhz: f64,
    pub warnings: Vec<String>,
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

/// One input's spans, ready to write.
struct Spans {
    spans: Vec<Span>,
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
    let mut pending: Vec<Span> = Vec::new();
    // With `outermost`, this input's share of the limit.
    let budget = opts.max_spans.saturating_sub(*n) as usize;
    let mut seen = 0u64;
    {
        let mut sink = |s: Span| {
            let (b, e) = (s.begin, s.end);
            if opts.from.is_some_and(|f| e < f) || opts.to.is_some_and(|t| b > t) {
                return;
            }
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
        build(input, &mut f, warnings, true, false, &mut sink)?;
    }
    if opts.outermost {
        keep_outermost(&mut pending, budget);
        pending.sort_unstable_by_key(|s| (s.begin, s.depth));
        *n += pending.len() as u64;
        *dropped += seen - pending.len() as u64;
    }
    let origin = opts
        .from
        .unwrap_or_else(|| pending.iter().map(|s| s.begin).min().unwrap_or(0));
    Ok(Spans {
        spans: pending,
        names: f.names,
        mhz,
        how,
        origin,
    })
}

/// Keep the `n` outermost spans, the longest first within a depth.
fn keep_outermost(spans: &mut Vec<Span>, n: usize) {
    if spans.len() > n {
        spans.sort_unstable_by_key(|s| {
            (
                s.depth,
                std::cmp::Reverse(s.end.saturating_sub(s.begin)),
                s.begin,
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
    for s in &sp.spans {
        let b = opts.from.map_or(s.begin, |f| s.begin.max(f));
        let e = opts.to.map_or(s.end, |t| s.end.min(t));
        let name = names
            .entry(s.func)
            .or_insert_with(|| json_str(&sp.names[s.func as usize]));
        let ts = b.saturating_sub(sp.origin) as f64 / sp.mhz;
        let dur = e.saturating_sub(b) as f64 / sp.mhz;
        write!(
            w,
            "{}{{\"name\":{name},\"ph\":\"X\",\"ts\":{ts:.3},\"dur\":{dur:.3},\"pid\":{pid},\"tid\":{tid},\"args\":{{\"depth\":{}}}}}",
            if *first { "" } else { "," },
            s.depth
        )
        .context("writing the timeline")?;
        *first = false;
    }
    Ok(())
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
                for (tid, name) in threads {
                    input.thread = Some(tid);
                    let sp = spans(input, opts, &mut bw, &mut n, &mut dropped);
                    input.thread = None;
                    tracks.push((Some(name), sp?));
                }
                let origin = tracks.iter().map(|t| t.1.origin).min().unwrap_or(0);
                for t in &mut tracks {
                    t.1.origin = origin;
                }
                tracks
            }
            None => vec![(None, spans(input, opts, &mut bw, &mut n, &mut dropped)?)],
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
            "],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"tool\":\"tracemill report timeline\",\"bundles\":{pid},\"time\":\"each process (bundle) from its own first span; its tsc_origin and tsc_mhz in its process_name event\"}}}}"
        )?;
    } else {
        write!(
            w,
            "],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"tool\":\"tracemill report timeline\",\"tsc_origin\":\"{origin:#x}\",\"tsc_mhz\":{mhz},\"tsc_rate\":{}}}}}",
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
        first_tsc: Some(origin),
        tsc_mhz: mhz,
        warnings,
    })
}
