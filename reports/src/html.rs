//! One self-contained HTML page: the decode's summary, the flame graph (inferno's SVG,
//! inline, with its script: hover, click to zoom, search), hotspots and coverage in
//! sortable tables, and a timeline preview whose trace JSON opens in Perfetto. Nothing is
//! fetched at view time: styles, scripts and data are in the page (`html.css`, `html.js`).

use std::fmt::Write as _;

use anyhow::Result;
use arrow_array::Array;
use tracemill_schemas::{meta, EventKind};

use crate::coverage::{coverage, with_blocks, Merge};
use crate::dataset::Member;
use crate::diff::Diff;
use crate::hotspots::{hotspots, hotspots_of, Block, By, Hotspots, Sum as HotspotSum, Weight};
use crate::input::Input;
use crate::source::{warn_once, Source};
use crate::stacks::{stacks_of, write_svg, Stacks, StacksSum};
use crate::symbols::Symbolizer;
use crate::timeline::TimelineSummary;
use crate::util::{group, html_escape as esc, kind_codes, strings};

/// Decode facts from the events table: errors, overflows, their first details.
#[derive(Clone, Debug, Default)]
pub struct EventSummary {
    pub errors: u64,
    pub overflows: u64,
    pub resyncs: u64,
    pub first_errors: Vec<String>,
}

pub fn event_summary(input: &Input) -> Result<EventSummary> {
    let t = input.table("events")?;
    let mut s = EventSummary::default();
    for b in t.batches(&["kind", "detail", "offset"])? {
        let b = b?;
        let kinds = kind_codes(&b, "kind", EventKind::from_name, |k| k as u8)?;
        let detail = strings(&b, "detail")?;
        let off = crate::util::col::<arrow_array::types::UInt64Type>(&b, "offset")?;
        for (i, &k) in kinds.iter().enumerate() {
            match EventKind::from_code(k) {
                Some(EventKind::Error) => {
                    s.errors += 1;
                    if s.first_errors.len() < 10 {
                        let d = if detail.is_null(i) {
                            ""
                        } else {
                            detail.value(i)
                        };
                        s.first_errors.push(format!("at {:#x}: {d}", off.value(i)));
                    }
                }
                Some(EventKind::Overflow) => s.overflows += 1,
                Some(EventKind::Resync) => s.resyncs += 1,
                _ => {}
            }
        }
    }
    Ok(s)
}

const STYLE: &str = include_str!("html.css");
const SCRIPT: &str = include_str!("html.js");

/// Errors and overflows of a decode, or of the selected bundles added up.
pub fn events_of(src: &mut Source, warnings: &mut Vec<String>) -> Result<EventSummary> {
    let mut all = EventSummary::default();
    src.each(warnings, |input, m| add_events(&mut all, input, m))?;
    Ok(all)
}

/// Add a bundle's errors and overflows to `all`.
fn add_events(all: &mut EventSummary, input: &Input, m: Option<&Member>) -> Result<()> {
    let e = event_summary(input)?;
    all.errors += e.errors;
    all.overflows += e.overflows;
    all.resyncs += e.resyncs;
    for d in e.first_errors {
        if all.first_errors.len() < 10 {
            all.first_errors.push(match m {
                Some(m) => format!("{}: {d}", m.label()),
                None => d,
            });
        }
    }
    Ok(())
}

/// The sections of a dataset's page, each added up over the selected bundles.
struct DatasetSections {
    coverage: Result<Merge>,
    events: Result<EventSummary>,
    hotspots: Result<Hotspots>,
    stacks: Result<(Stacks, Vec<String>)>,
}

/// Every section of a dataset's page in one pass over its bundles: each bundle is opened
/// (its tables found, its images loaded) once, not once per section. A section that fails
/// on a bundle leaves that bundle out of it, with a warning; it fails only when it could
/// be made of no bundle. `flame_warnings` gets the walks' warnings.
fn sections_of_dataset(
    src: &mut Source,
    warnings: &mut Vec<String>,
    flame_warnings: &mut Vec<String>,
) -> DatasetSections {
    const NAMES: [&str; 4] = ["events", "hotspots", "flame graph", "coverage"];
    let mut merge = Merge::default();
    let mut events = EventSummary::default();
    let mut hot = HotspotSum::default();
    let mut stacks = StacksSum::new(false);
    // Per section: the bundles it was made of, and its first error.
    let mut made = [0usize; 4];
    let mut first_err: [Option<anyhow::Error>; 4] = Default::default();
    let mut left_out = Vec::new();
    let opened = src.each(warnings, |input, m| {
        let label = m.map_or_else(String::new, |m| m.label());
        // The coverage merge takes the bundle's images: last.
        let results = [
            add_events(&mut events, input, m),
            hotspots(input, By::Function, Weight::Instructions).map(|h| hot.add(h)),
            stacks.add_threads(input),
            merge.add(input),
        ];
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(()) => made[i] += 1,
                Err(e) => {
                    warn_once(
                        &mut left_out,
                        format!("{label}: {e:#}: left out of the {}", NAMES[i]),
                    );
                    first_err[i].get_or_insert(e);
                }
            }
        }
        Ok(())
    });
    for w in left_out {
        warn_once(warnings, w);
    }
    // The section's result: its sum, or why no bundle could be used for it.
    let mut result = |i: usize| -> Result<()> {
        match (&opened, made[i], first_err[i].take()) {
            (Err(e), _, _) => Err(anyhow::anyhow!("{e:#}")),
            (Ok(_), 0, Some(e)) => Err(e.context("no selected bundle could be used")),
            _ => Ok(()),
        }
    };
    DatasetSections {
        events: result(0).map(|()| events),
        hotspots: result(1).map(|()| hot.finish(By::Function, Weight::Instructions, Vec::new())),
        stacks: result(2).map(|()| stacks.finish(flame_warnings)),
        coverage: result(3).map(|()| merge),
    }
}

/// Render the page of a decode, or of the selected bundles of a dataset (every section
/// added up over them). Each section that cannot be made says why instead.
///
/// Fails only when no table could be read at all.
pub fn render(src: &mut Source, top: usize) -> Result<String> {
    render_with(src, top, None)
}

/// [`render`], with a section of what changed against a baseline (`report html
/// --baseline`) when `diff` is given (made by [`crate::diff::diff`] with `src` as B).
pub fn render_with(src: &mut Source, top: usize, diff: Option<&Diff>) -> Result<String> {
    let mut warnings = match src {
        Source::Decode(input) => input.warnings.clone(),
        Source::Dataset(_) => Vec::new(),
    };
    // Everything first, then the page.
    let summary = |syms: &Symbolizer, blocks: &[Block]| {
        (
            blocks.iter().map(|b| b.insns as u64 * b.count).sum::<u64>(),
            blocks.len(),
            coverage(syms, blocks),
        )
    };
    let mut fw = Vec::new();
    let (cov, events, hs, flame) = match src {
        Source::Decode(_) => (
            with_blocks(src, &mut warnings, summary),
            events_of(src, &mut warnings),
            hotspots_of(src, By::Function, Weight::Instructions),
            stacks_of(src, false, &mut fw),
        ),
        Source::Dataset(_) => {
            let s = sections_of_dataset(src, &mut warnings, &mut fw);
            (
                s.coverage.map(|m| {
                    let (syms, blocks) = m.finish();
                    summary(&syms, &blocks)
                }),
                s.events,
                s.hotspots,
                s.stacks,
            )
        }
    };

    // The flame graph's SVG, inline (inferno's own, with its script).
    warnings.extend(fw);
    let flame: Result<(String, String)> = flame.and_then(|(mut st, names)| {
        let lines = st.folded(
            &names,
            false,
            crate::stacks::svg_min_weight(st.total(false)),
        );
        if lines.is_empty() {
            anyhow::bail!("no branch rows");
        }
        let mut svg = Vec::new();
        write_svg(&lines, "", false, &mut svg)?;
        let note = format!(
            "{} instructions in {} stacks, {} drawn ({} gaps, {} mismatched returns, {} longjmps, {} interrupt or signal entries).",
            group(st.total(false)),
            group(st.distinct(false) as u64),
            group(lines.len() as u64),
            group(st.gaps),
            group(st.mismatched_returns),
            group(st.longjmps),
            group(st.async_entries)
        );
        Ok((inline_svg(&String::from_utf8_lossy(&svg)), note))
    });
    // The timeline: the outermost spans, embedded as the trace JSON Perfetto reads.
    let timeline = timeline_json(src);
    if let (Err(e), Err(_), Err(_), Err(_)) = (&cov, &events, &hs, &flame) {
        // Nothing could be read: a page of "not available" is no report (exit 1, as the
        // other reports).
        anyhow::bail!("no table could be read: {e:#}");
    }

    let mut h = String::new();
    let title = src.title();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>tracemill report: {}</title><style>{STYLE}</style></head><body>\n",
        esc(&title)
    );
    let nav_diff = if diff.is_some() {
        "<a href=\"#changes\">Changes</a>"
    } else {
        ""
    };
    let nav_warn = if warnings.is_empty() {
        String::new()
    } else {
        // The count is known only at the end: a placeholder replaced then.
        "<a class=\"warn\" href=\"#warnings\">Warnings (@WARNINGS@)</a>".to_string()
    };
    let _ = writeln!(
        h,
        "<header class=\"top\"><h1>tracemill report</h1><span class=\"source\">{}</span>\n<nav><a href=\"#summary\">Summary</a><a href=\"#flamegraph\">Flame graph</a><a href=\"#hotspots\">Hotspots</a><a href=\"#coverage\">Coverage</a>{nav_diff}<a href=\"#timeline\">Timeline</a>{nav_warn}</nav></header>\n<main>",
        esc(&title)
    );

    // Summary: the headline numbers, then the facts of the trace.
    let mut cards = String::new();
    let mut card = |k: &str, v: u64, bad: bool| {
        let _ = write!(
            cards,
            "<div class=\"card{}\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>",
            if bad { " bad" } else { "" },
            group(v),
            esc(k)
        );
    };
    let mut facts = String::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(
            facts,
            "<tr><th class=\"l\">{}</th><td class=\"l m\">{}</td></tr>",
            esc(k),
            esc(&v)
        );
    };
    match &*src {
        Source::Decode(input) => {
            row("trace", title.clone());
            if let Some(b) = &input.bundle {
                row("bundle", b.display().to_string());
            }
            for (k, label) in [
                (meta::RTIT_CTL, "rtit_ctl"),
                (meta::TRACEMILL_VERSION, "tracemill"),
            ] {
                if let Some(v) = input.meta.get(k) {
                    row(label, v.clone());
                }
            }
            let mut labels: Vec<_> = input
                .meta
                .iter()
                .filter(|(k, _)| k.starts_with("label."))
                .collect();
            labels.sort();
            for (k, v) in labels {
                row(k, v.clone());
            }
            if let Ok(t) = input.table("branches") {
                if !t.ipc {
                    card("branches", t.rows, false);
                }
            }
        }
        Source::Dataset(sel) => {
            row("dataset", sel.dataset.display().to_string());
            if let Some(f) = &sel.filter {
                row("where", f.clone());
            }
            row(
                "bundles",
                format!(
                    "{} selected of {} in the catalog",
                    group(sel.members.len() as u64),
                    group(sel.catalog_bundles as u64)
                ),
            );
            for m in sel.members.iter().take(top) {
                let labels: Vec<String> = m
                    .columns
                    .iter()
                    .filter(|(k, _)| !CATALOG_FIXED.contains(&k.as_str()))
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                row(
                    &format!("bundle {}", &m.id[..m.id.len().min(12)]),
                    format!("{} {}", m.source, labels.join(" ")),
                );
            }
            let branches: u64 = sel
                .members
                .iter()
                .filter_map(|m| m.columns.get("branches")?.parse::<u64>().ok())
                .sum();
            card("branches", branches, false);
        }
    }
    let blocks = match cov {
        Ok((instructions, distinct, rep)) => {
            card("instructions", instructions, false);
            card("distinct blocks", distinct as u64, false);
            Some(rep)
        }
        Err(e) => {
            warnings.push(format!("coverage: {e:#}"));
            None
        }
    };
    let events = match events {
        Ok(e) => {
            card("errors (gaps)", e.errors, e.errors > 0);
            card("overflows", e.overflows, e.overflows > 0);
            Some(e)
        }
        Err(e) => {
            warnings.push(format!("events: {e:#}"));
            None
        }
    };
    let _ = writeln!(
        h,
        "<section id=\"summary\"><h2>Summary</h2>\n<div class=\"cards\">{cards}</div>\n<table>\n{facts}</table>"
    );
    if let Some(e) = events.filter(|e| !e.first_errors.is_empty()) {
        h.push_str("<p>First errors:</p><ul>\n");
        for d in &e.first_errors {
            let _ = writeln!(h, "<li class=\"m\">{}</li>", esc(d));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</section>\n");

    // Flame graph, near the top: what people look at first.
    h.push_str("<section id=\"flamegraph\"><h2>Flame graph (instructions)</h2>\n");
    match &flame {
        Ok((svg, note)) => {
            let _ = writeln!(
                h,
                "<div class=\"tools\"><input id=\"fg-find\" type=\"search\" placeholder=\"Find functions (regular expression)\" aria-label=\"find functions\"><button id=\"fg-reset\" type=\"button\">Reset zoom and search</button><span id=\"fg-matched\" class=\"note\"></span></div>\n<p class=\"note\">Hover a frame for its numbers; click it to zoom in (its callers stay below); the width of a frame is its share of the instructions.</p>\n{svg}\n<p class=\"note\">{}</p>",
                esc(note)
            );
        }
        Err(e) => not_available(&mut h, e),
    }
    h.push_str("</section>\n");

    // Hotspots.
    h.push_str("<section id=\"hotspots\"><h2>Hotspots by function</h2>\n");
    match hs {
        Ok(hs) => {
            warnings.extend(hs.warnings.iter().cloned());
            let cyc = hs.total_cycles.is_some();
            let _ = writeln!(
                h,
                "<p class=\"note\">{} of {} functions; click a column to sort.</p>\n<table class=\"sortable\"><thead><tr><th>share</th><th class=\"l\"></th><th>instructions</th>{}<th>branches</th><th>calls</th><th class=\"l\">image</th><th class=\"l\">function</th></tr></thead><tbody>",
                group(hs.rows.len().min(top) as u64),
                group(hs.rows.len() as u64),
                if cyc { "<th>cycles</th>" } else { "" }
            );
            for r in hs.rows.iter().take(top) {
                let _ = writeln!(
                    h,
                    "<tr><td data-v=\"{}\">{:.2}%</td><td class=\"l\" data-v=\"{}\"><span class=\"bar\" style=\"width:{}px\"></span></td>{}{}{}{}<td class=\"l\">{}</td><td class=\"l m\">{}</td></tr>",
                    r.share,
                    r.share * 100.0,
                    r.share,
                    (r.share * 160.0).round() as u32,
                    num(r.instructions),
                    if cyc { num(r.cycles.unwrap_or(0)) } else { String::new() },
                    num(r.branches),
                    num(r.calls),
                    esc(&r.image),
                    esc(&r.function)
                );
            }
            h.push_str("</tbody></table>\n");
        }
        Err(e) => not_available(&mut h, &e),
    }
    h.push_str("</section>\n");

    // Coverage.
    h.push_str("<section id=\"coverage\"><h2>Coverage</h2>\n");
    match &blocks {
        Some(rep) => {
            warnings.extend(rep.warnings.iter().cloned());
            h.push_str("<table class=\"sortable\"><thead><tr><th class=\"l\">image</th><th>blocks</th><th>instructions</th><th>functions hit</th><th>bytes covered</th></tr></thead><tbody>\n");
            for i in &rep.images {
                let _ = writeln!(
                    h,
                    "<tr><td class=\"l\">{}</td>{}{}<td data-v=\"{}\">{} / {}</td><td data-v=\"{}\">{} / {}</td></tr>",
                    esc(&i.image),
                    num(i.blocks),
                    num(i.instructions),
                    i.functions_hit,
                    group(i.functions_hit),
                    group(i.functions_total),
                    i.covered_bytes,
                    group(i.covered_bytes),
                    group(i.code_bytes)
                );
            }
            let _ = writeln!(
                h,
                "</tbody></table>\n<p class=\"note\">{} of {} functions executed, the most executed first.</p>\n<table class=\"sortable\"><thead><tr><th class=\"l\">image</th><th class=\"l\">function</th><th>covered</th><th>size</th><th>instructions</th><th>entries</th><th>lines hit</th></tr></thead><tbody>",
                group(rep.functions.len().min(top) as u64),
                group(rep.functions.len() as u64)
            );
            for f in rep.functions.iter().take(top) {
                let covered = if f.size == 0 {
                    0.0
                } else {
                    100.0 * f.covered_bytes as f64 / f.size as f64
                };
                let _ = writeln!(
                    h,
                    "<tr><td class=\"l\">{}</td><td class=\"l m\">{}</td><td data-v=\"{covered}\">{covered:.1}%</td>{}{}{}<td data-v=\"{}\">{}</td></tr>",
                    esc(&f.image),
                    esc(&f.function),
                    num(f.size),
                    num(f.instructions),
                    num(f.entries),
                    f.lines_hit,
                    if f.lines_total == 0 {
                        "-".into()
                    } else {
                        format!("{} / {}", group(f.lines_hit), group(f.lines_total))
                    }
                );
            }
            h.push_str("</tbody></table>\n");
        }
        None => h.push_str("<p class=\"warn\">Not available: no coverage table.</p>\n"),
    }
    h.push_str("</section>\n");

    if let Some(d) = diff {
        changes_section(&mut h, d, top);
        for w in &d.warnings {
            warn_once(&mut warnings, format!("changes: {w}"));
        }
    }

    // Timeline.
    h.push_str("<section id=\"timeline\"><h2>Timeline</h2>\n");
    match timeline {
        Ok((json, t)) => {
            // The timeline's pass opens the bundles again: their warnings are said once.
            for w in &t.warnings {
                warn_once(&mut warnings, w.clone());
            }
            let _ = writeln!(
                h,
                "<p class=\"note\">Function calls over time (microseconds at {} TSC ticks per microsecond), callers above callees; {} spans{}. Hover a span for its name and duration. The whole timeline: <code>tracemill report timeline</code>.</p>\n<div class=\"tools\"><button id=\"tl-perfetto\" type=\"button\">Open in Perfetto</button><a id=\"tl-save\" download=\"calls.json\" href=\"#timeline\">Save the trace JSON</a><span class=\"note\">(Perfetto opens its web page, ui.perfetto.dev, and this page sends it the JSON; nothing leaves this page otherwise)</span></div>\n<canvas id=\"tl-canvas\" height=\"0\"></canvas><div id=\"tl-tip\">&nbsp;</div>\n<script type=\"application/json\" id=\"trace-json\">{}</script>",
                t.tsc_mhz,
                group(t.spans),
                if t.dropped > 0 {
                    format!(", the {} outermost and longest of {}", group(t.spans), group(t.spans + t.dropped))
                } else {
                    String::new()
                },
                // Inside <script>, only "</" could end the element early.
                json.replace("</", "<\\/")
            );
        }
        Err(e) => not_available(&mut h, &e),
    }
    h.push_str("</section>\n");

    if !warnings.is_empty() {
        h.push_str("<section id=\"warnings\"><h2>Warnings</h2>\n<ul>\n");
        for w in &warnings {
            let _ = writeln!(h, "<li class=\"warn\">{}</li>", esc(w));
        }
        h.push_str("</ul></section>\n");
    }
    let _ = write!(h, "</main>\n<script>{SCRIPT}</script>\n</body></html>\n");
    Ok(h.replacen("@WARNINGS@", &group(warnings.len() as u64), 1))
}

/// Catalog columns that are not labels (left out of a dataset's bundle lines).
const CATALOG_FIXED: [&str; 11] = [
    "bundle",
    "source",
    "status",
    "error",
    "seconds",
    "tracemill_version",
    "trace_bytes",
    "branches",
    "instructions",
    "gaps",
    "errors",
];

/// Spans in the page's timeline at most: some hundred bytes of JSON each.
const TIMELINE_SPANS: u64 = 10_000;

/// The timeline's trace JSON (its outermost spans) and what was written.
fn timeline_json(src: &mut Source) -> Result<(String, TimelineSummary)> {
    let mut json = Vec::new();
    let opts = crate::timeline::Options {
        max_spans: TIMELINE_SPANS,
        outermost: true,
        ..Default::default()
    };
    let mut t = crate::timeline::write(src, &opts, &mut json)?;
    // The page says how many were left out; the warning would tell to narrow a window
    // the page has no option for.
    t.warnings.retain(|w| !w.contains("past the limit"));
    Ok((String::from_utf8_lossy(&json).into_owned(), t))
}

/// The changes against the baseline: the instruction changes by function, then where
/// coverage was gained and lost.
fn changes_section(h: &mut String, d: &Diff, top: usize) {
    let signed = |n: i64| {
        let g = group(n.unsigned_abs());
        let text = match n.signum() {
            1 => format!("+{g}"),
            -1 => format!("-{g}"),
            _ => g,
        };
        format!("<td data-v=\"{n}\">{text}</td>")
    };
    let _ = writeln!(
        h,
        "<section id=\"changes\"><h2>Changes against the baseline</h2>\n<table>\n<tr><th class=\"l\">baseline (A)</th><td class=\"l m\">{}</td></tr>\n<tr><th class=\"l\">this (B)</th><td class=\"l m\">{}</td></tr>\n</table>\n<p class=\"note\">Instructions {} in A, {} in B; {} of {} rows, the largest changes first; share: the change as a share of A's total; delta: the change of the row's share of the total, in points.</p>\n<table class=\"sortable\"><thead><tr><th>A</th><th>B</th><th>change</th><th>share</th><th>delta</th><th class=\"l\">image</th><th class=\"l\">function</th></tr></thead><tbody>",
        esc(&d.a),
        esc(&d.b),
        group(d.total_instructions_a),
        group(d.total_instructions_b),
        group(d.rows.len().min(top) as u64),
        group(d.rows.len() as u64)
    );
    for r in d.rows.iter().take(top) {
        let _ = writeln!(
            h,
            "<tr>{}{}{}<td data-v=\"{}\">{:+.2}%</td><td data-v=\"{}\">{:+.2}</td><td class=\"l\">{}</td><td class=\"l m\">{}</td></tr>",
            num(r.instructions_a),
            num(r.instructions_b),
            signed(r.change),
            r.share,
            r.share * 100.0,
            r.delta,
            r.delta * 100.0,
            esc(&r.image),
            esc(&r.function)
        );
    }
    let _ = writeln!(
        h,
        "</tbody></table>\n<p class=\"note\">Coverage: blocks {} in A, {} in B ({} gained, {} lost); edges {} in A, {} in B ({} gained, {} lost). By function and source line:</p>\n<table class=\"sortable\"><thead><tr><th>blocks gained</th><th>blocks lost</th><th>instructions gained</th><th>instructions lost</th><th>edges gained</th><th>edges lost</th><th class=\"l\">line</th><th class=\"l\">function</th></tr></thead><tbody>",
        group(d.blocks_a),
        group(d.blocks_b),
        group(d.blocks_gained),
        group(d.blocks_lost),
        group(d.edges_a),
        group(d.edges_b),
        group(d.edges_gained),
        group(d.edges_lost)
    );
    for c in d.coverage.iter().take(top) {
        let _ = writeln!(
            h,
            "<tr>{}{}{}{}{}{}<td class=\"l m\">{}</td><td class=\"l m\">{}</td></tr>",
            num(c.blocks_gained),
            num(c.blocks_lost),
            num(c.instructions_gained),
            num(c.instructions_lost),
            num(c.edges_gained),
            num(c.edges_lost),
            esc(&c.line),
            esc(&c.function)
        );
    }
    h.push_str("</tbody></table></section>\n");
}

/// A number cell: grouped digits, sorted by its value.
fn num(n: u64) -> String {
    format!("<td data-v=\"{n}\">{}</td>", group(n))
}

fn not_available(h: &mut String, e: &anyhow::Error) {
    let _ = writeln!(
        h,
        "<p class=\"warn\">Not available: {}</p>",
        esc(&format!("{e:#}"))
    );
}

/// inferno's SVG as an element of the page: without the XML declaration and doctype,
/// which belong to a standalone file. Its script and styles stay as they are.
fn inline_svg(svg: &str) -> String {
    match svg.find("<svg") {
        Some(i) => svg[i..].to_string(),
        None => svg.to_string(),
    }
}
