//! One self-contained HTML page: the decode's summary, hotspots, coverage by image and
//! function, and the flame graph. Nothing is fetched at view time: styles are inline and
//! the flame graph is an SVG in a `data:` URL.

use std::fmt::Write as _;

use anyhow::Result;
use arrow::array::Array;
use tracemill_schemas::{meta, EventKind};

use crate::coverage::{coverage, with_blocks, Merge};
use crate::dataset::Member;
use crate::hotspots::{hotspots, hotspots_of, Block, By, Hotspots, Sum as HotspotSum, Weight};
use crate::input::Input;
use crate::source::{warn_once, Source};
use crate::stacks::{stacks_of, write_svg, Stacks, StacksSum};
use crate::symbols::Symbolizer;
use crate::util::{html_escape as esc, kind_codes, strings};

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
        let off = crate::util::col::<arrow::datatypes::UInt64Type>(&b, "offset")?;
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

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut o = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        o.push(T[(n >> 18) as usize & 63] as char);
        o.push(T[(n >> 12) as usize & 63] as char);
        o.push(if c.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        o.push(if c.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    o
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}\
td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right;font-variant-numeric:tabular-nums}\
td.l,th.l{text-align:left;font-family:monospace}\
.warn{color:#a40}\
.bar{background:#e8743b;height:10px;display:inline-block}\
img.flame{width:100%;border:1px solid #ccc}";

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
            stacks.add(input),
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
pub fn render(src: &mut Source, top: usize) -> String {
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

    let mut h = String::new();
    let title = src.title();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tracemill report: {}</title><style>{STYLE}</style></head><body>\n<h1>tracemill report</h1>\n",
        esc(&title)
    );

    // Summary.
    h.push_str("<h2 id=\"summary\">Summary</h2>\n<table>\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(
            h,
            "<tr><th class=\"l\">{}</th><td class=\"l\">{}</td></tr>",
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
                    row("branches", t.rows.to_string());
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
                    sel.members.len(),
                    sel.catalog_bundles
                ),
            );
            for m in sel.members.iter().take(top) {
                let labels: Vec<String> = m
                    .columns
                    .iter()
                    .filter(|(k, _)| {
                        !matches!(
                            k.as_str(),
                            "bundle"
                                | "source"
                                | "status"
                                | "error"
                                | "seconds"
                                | "tracemill_version"
                                | "trace_bytes"
                                | "branches"
                                | "instructions"
                                | "gaps"
                                | "errors"
                        )
                    })
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
            row("branches", branches.to_string());
        }
    }
    let blocks = match cov {
        Ok((instructions, distinct, rep)) => {
            row("instructions", instructions.to_string());
            row("distinct blocks", distinct.to_string());
            Some(rep)
        }
        Err(e) => {
            warnings.push(format!("coverage: {e:#}"));
            None
        }
    };
    let events = match events {
        Ok(e) => {
            row("errors (gaps)", e.errors.to_string());
            row("overflows", e.overflows.to_string());
            Some(e)
        }
        Err(e) => {
            warnings.push(format!("events: {e:#}"));
            None
        }
    };
    h.push_str("</table>\n");
    if let Some(e) = events.filter(|e| !e.first_errors.is_empty()) {
        h.push_str("<p>First errors:</p><ul>\n");
        for d in &e.first_errors {
            let _ = writeln!(h, "<li class=\"l\">{}</li>", esc(d));
        }
        h.push_str("</ul>\n");
    }

    // Hotspots.
    h.push_str("<h2 id=\"hotspots\">Hotspots by function</h2>\n");
    match hs {
        Ok(hs) => {
            warnings.extend(hs.warnings.iter().cloned());
            let cyc = hs.total_cycles.is_some();
            let _ = writeln!(
                h,
                "<table><tr><th>share</th><th></th><th>instructions</th>{}<th>branches</th><th>calls</th><th class=\"l\">image</th><th class=\"l\">function</th></tr>",
                if cyc { "<th>cycles</th>" } else { "" }
            );
            for r in hs.rows.iter().take(top) {
                let _ = writeln!(
                    h,
                    "<tr><td>{:.2}%</td><td class=\"l\"><span class=\"bar\" style=\"width:{}px\"></span></td><td>{}</td>{}<td>{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
                    r.share * 100.0,
                    (r.share * 200.0).round() as u32,
                    r.instructions,
                    if cyc { format!("<td>{}</td>", r.cycles.unwrap_or(0)) } else { String::new() },
                    r.branches,
                    r.calls,
                    esc(&r.image),
                    esc(&r.function)
                );
            }
            h.push_str("</table>\n");
        }
        Err(e) => {
            let _ = writeln!(
                h,
                "<p class=\"warn\">Not available: {}</p>",
                esc(&format!("{e:#}"))
            );
        }
    }

    // Coverage.
    h.push_str("<h2 id=\"coverage\">Coverage</h2>\n");
    match &blocks {
        Some(rep) => {
            warnings.extend(rep.warnings.iter().cloned());
            h.push_str("<table><tr><th class=\"l\">image</th><th>blocks</th><th>instructions</th><th>functions hit</th><th>bytes covered</th></tr>\n");
            for i in &rep.images {
                let _ = writeln!(
                    h,
                    "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{} / {}</td><td>{} / {}</td></tr>",
                    esc(&i.image), i.blocks, i.instructions, i.functions_hit, i.functions_total, i.covered_bytes, i.code_bytes
                );
            }
            h.push_str("</table>\n<table><tr><th class=\"l\">image</th><th class=\"l\">function</th><th>covered</th><th>size</th><th>instructions</th><th>entries</th><th>lines hit</th></tr>\n");
            for f in rep.functions.iter().take(top) {
                let _ = writeln!(
                    h,
                    "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&f.image),
                    esc(&f.function),
                    if f.size == 0 { 0.0 } else { 100.0 * f.covered_bytes as f64 / f.size as f64 },
                    f.size,
                    f.instructions,
                    f.entries,
                    if f.lines_total == 0 { "-".into() } else { format!("{} / {}", f.lines_hit, f.lines_total) }
                );
            }
            h.push_str("</table>\n");
        }
        None => h.push_str("<p class=\"warn\">Not available: no coverage table.</p>\n"),
    }

    // Flame graph.
    h.push_str("<h2 id=\"flamegraph\">Flame graph (instructions)</h2>\n");
    warnings.extend(fw);
    match flame {
        Ok((mut st, names)) => {
            let lines = st.folded(
                &names,
                false,
                crate::stacks::svg_min_weight(st.total(false)),
            );
            let mut svg = Vec::new();
            match write_svg(&lines, "flame graph", false, &mut svg) {
                Ok(()) if !svg.is_empty() => {
                    let _ = writeln!(
                        h,
                        "<p>{} instructions in {} stacks, {} drawn ({} gaps, {} mismatched returns, {} longjmps, {} interrupt or signal entries).</p>\n<img class=\"flame\" alt=\"flame graph\" src=\"data:image/svg+xml;base64,{}\">",
                        st.total(false),
                        st.distinct(false),
                        lines.len(),
                        st.gaps,
                        st.mismatched_returns,
                        st.longjmps,
                        st.async_entries,
                        base64(&svg)
                    );
                }
                Ok(()) => h.push_str("<p class=\"warn\">Not available: no branch rows.</p>\n"),
                Err(e) => {
                    let _ = writeln!(
                        h,
                        "<p class=\"warn\">Not available: {}</p>",
                        esc(&format!("{e:#}"))
                    );
                }
            }
        }
        Err(e) => {
            let _ = writeln!(
                h,
                "<p class=\"warn\">Not available: {}</p>",
                esc(&format!("{e:#}"))
            );
        }
    }

    if !warnings.is_empty() {
        h.push_str("<h2 id=\"warnings\">Warnings</h2>\n<ul>\n");
        for w in &warnings {
            let _ = writeln!(h, "<li class=\"warn\">{}</li>", esc(w));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_rfc_examples() {
        // RFC 4648, section 10.
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64(i.as_bytes()), o);
        }
    }
}
