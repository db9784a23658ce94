//! perf.data input: what `perf record -e intel_pt//` writes, decoded through the same
//! parallel Intel PT pipeline as a bundle (`tracemill::run::decode_parts`).
//!
//! A recording holds one Intel PT trace per AUX area (per CPU, or per thread with
//! `--per-thread`), in AUXTRACE records between the sideband. [`open`] reads the file
//! once (`tracemill-perfdata`, over the memory-mapped bytes) and makes of each AUX area a
//! [`Bundle`] in memory (its buffers joined in AUX offset order; IA32_RTIT_CTL from the
//! event's config and the rest of the configuration from AUXTRACE_INFO), with the images
//! the MMAP/MMAP2 records name ([`images`]) and the area's threads over time
//! ([`threads`]). Every problem the file has is a warning with its byte offset; only a
//! file that is not an Intel PT recording, or has no AUX data at all, is an error.
//!
//! Each area's trace is read where perf wrote it: its buffers are ranges of the mapped file
//! ([`tracemill_decode::stream::Span`]), joined by the decoder's stream view, so an area
//! of gigabytes is not copied; the pages the decode has finished with are released as it
//! goes, as for a bundle's trace.

pub mod images;
pub mod spaces;
pub mod threads;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::manifest::{Manifest, PtFacts, TraceFormat};
use anyhow::{bail, Result};
use tracemill_perfdata::aux::{aux_queues_walked, AuxIssue, AuxQueue};
use tracemill_perfdata::record::Mmap2File;
use tracemill_perfdata::{PerfClock, PerfData, Record};

use crate::bundle::{map_file, Bundle, Bytes, LoadedImage};
pub use images::Lookup;
use images::Mapping;
use threads::{Switch, Threads};
use tracemill_decode::pt::sync::next_psb;
use tracemill_decode::stream::{Break, Lost, Span, TraceStream};

/// `PROT_EXEC` in an MMAP2 record's `prot`.
const PROT_EXEC: u32 = 4;
/// MMAP record `misc` bit: a data (not executable) mapping.
const MISC_MMAP_DATA: u16 = 1 << 13;

/// One AUX area's trace, ready to decode.
pub struct Trace {
    /// `cpu 3` or `thread 1234`: how messages name it.
    pub name: String,
    pub bundle: Bundle,
    pub threads: Threads,
    /// The recording's address spaces, when processes have different code at the same
    /// addresses: the decode selects one by place ([`spaces`]).
    pub spaces: Option<spaces::TraceSpaces>,
}

/// A perf.data, opened.
pub struct Recording {
    pub path: PathBuf,
    pub file_size: u64,
    /// The Intel PT event's `perf_event_attr.config` (IA32_RTIT_CTL bits).
    pub config: u64,
    pub traces: Vec<Trace>,
    /// Everything wrong with the file that decoding goes on past.
    pub warnings: Vec<String>,
    /// Thread names (COMM), by thread id.
    pub comms: BTreeMap<u32, String>,
    /// The process of each thread (COMM, FORK), by thread id.
    pub pids: BTreeMap<u32, u32>,
}

/// How far a walk over the records gets before the pages behind it are released.
const RELEASE_STEP: u64 = 16 << 20;

/// A walk over the records has reached `at`: release the pages behind it in steps (and
/// from `at` on, when a walk starts again from an earlier record: the compressed records'
/// walk after the AUX one).
fn release_behind(mapped: &Bytes, released: &mut u64, at: u64) {
    if at < *released {
        *released = at;
    } else if at >= *released + RELEASE_STEP {
        mapped.release(*released as usize..at as usize);
        *released = at;
    }
}

/// Read the perf.data at `path`: its Intel PT traces, sideband and images.
pub fn open(path: &Path, lookup: &Lookup) -> Result<Recording> {
    let name = path.display().to_string();
    let mapped = map_file(path)?;
    let bytes: &[u8] = &mapped;
    let perf = PerfData::parse(bytes).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let (info_at, info) = match perf.intel_pt_info() {
        Ok(Some(x)) => x,
        Ok(None) => bail!(
            "{name}: no AUXTRACE_INFO record: not an Intel PT recording (record one with \
             `perf record -e intel_pt//u ...`)"
        ),
        Err(e) => bail!("{name}: {e}"),
    };
    let Some(attr) = perf.attrs().iter().find(|a| a.attr.kind == info.pmu_type) else {
        bail!(
            "{name}: AUXTRACE_INFO (at offset {info_at:#x}) names PMU type {}, but no event \
             of the file has that type",
            info.pmu_type
        );
    };
    let config = attr.attr.config;
    let settings = info.settings(config);
    let mut warnings = Vec::new();
    if let Some(f) = info.filter.as_ref().filter(|f| f.iter().any(|&b| b != 0)) {
        warnings.push(format!(
            "{name}: recorded with the address filter {:?}: decoded without it (the trace \
             has no packets outside it)",
            String::from_utf8_lossy(f).trim_end_matches('\0')
        ));
    }

    // The sideband, in one walk.
    let mut clock = info.clock();
    let mut mappings = Vec::new();
    let mut switches = Vec::new();
    let mut comms = BTreeMap::new();
    let mut pids = BTreeMap::new();
    // What changes a process's mappings, for its address spaces.
    let mut changes = Vec::new();
    // Each walk over the records touches a page at every record header, and the kernel
    // maps the cached pages around each fault: most of the file, unless the pages behind
    // the walk are let go as it goes. (Each area's decode maps in what it reads.)
    let mut released = 0u64;
    // Records inside compressed records (`perf record -z`) in their place.
    perf.for_each_record(|item| {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                warnings.push(format!("{name}: {e}"));
                return;
            }
        };
        release_behind(&mapped, &mut released, item.offset);
        let sid = item.sample_id;
        let mut switch_to = |pid: Option<u32>, tid: Option<u32>| {
            if let (Some(cpu), Some(time)) = (sid.cpu, sid.time) {
                switches.push(Switch {
                    cpu,
                    time,
                    pid,
                    tid,
                });
            }
        };
        let mut change = |time, change| changes.push(spaces::Dated { time, change });
        match &item.record {
            Record::Mmap2(m) if m.prot & PROT_EXEC != 0 => change(
                sid.time,
                spaces::Change::Map {
                    pid: m.pid,
                    mapping: mappings.len(),
                },
            ),
            Record::Mmap(m) if item.misc & MISC_MMAP_DATA == 0 => change(
                sid.time,
                spaces::Change::Map {
                    pid: m.pid,
                    mapping: mappings.len(),
                },
            ),
            Record::Comm(c) if c.exec => change(sid.time, spaces::Change::Exec { pid: c.pid }),
            Record::Fork(t) => change(
                Some(t.time),
                spaces::Change::Fork {
                    pid: t.pid,
                    ppid: t.ppid,
                },
            ),
            _ => {}
        }
        match item.record {
            Record::TimeConv(t) => clock = PerfClock::from_time_conv(&t),
            Record::Mmap2(m) if m.prot & PROT_EXEC != 0 => mappings.push(Mapping {
                record_offset: item.offset,
                pid: m.pid,
                addr: m.addr,
                len: m.len,
                pgoff: m.pgoff,
                path: String::from_utf8_lossy(m.filename).into_owned(),
                build_id: match m.file {
                    Mmap2File::BuildId(id) => Some(id.to_hex()),
                    Mmap2File::Inode { .. } => None,
                },
                space: None,
            }),
            Record::Mmap(m) if item.misc & MISC_MMAP_DATA == 0 => mappings.push(Mapping {
                record_offset: item.offset,
                pid: m.pid,
                addr: m.addr,
                len: m.len,
                pgoff: m.pgoff,
                path: String::from_utf8_lossy(m.filename).into_owned(),
                build_id: None,
                space: None,
            }),
            Record::Comm(c) => {
                comms.insert(c.tid, String::from_utf8_lossy(c.comm).into_owned());
                pids.insert(c.tid, c.pid);
            }
            Record::Fork(t) => {
                pids.insert(t.tid, t.pid);
            }
            Record::ItraceStart { pid, tid } => switch_to(Some(pid), Some(tid)),
            Record::Switch(s) if !s.out => switch_to(sid.pid, sid.tid),
            // Switched out: to the task a CPU-wide record names, else to one not known.
            Record::Switch(s) => match s.next_prev {
                Some((pid, tid)) => switch_to(Some(pid), Some(tid)),
                None => switch_to(None, None),
            },
            Record::Lost { lost, .. } => warnings.push(format!(
                "{name}: {lost} sideband records lost (LOST at offset {:#x}): threads and \
                 mappings may be missing",
                item.offset
            )),
            Record::LostSamples { lost } => warnings.push(format!(
                "{name}: {lost} samples lost (LOST_SAMPLES at offset {:#x}): records perf \
                 sampled may be missing",
                item.offset
            )),
            Record::AuxtraceError(e) => warnings.push(format!(
                "{name}: perf reported a trace error (AUXTRACE_ERROR at offset {:#x}): {}",
                item.offset,
                String::from_utf8_lossy(e.msg).trim_end_matches('\0')
            )),
            _ => {}
        }
    });
    // Build-ids perf stored at the end of recording, for mappings that carry none.
    match perf.build_ids() {
        Ok(ids) => {
            for m in mappings.iter_mut().filter(|m| m.build_id.is_none()) {
                m.build_id = ids
                    .iter()
                    .find(|e| e.filename == m.path.as_bytes())
                    .map(|e| e.build_id.to_hex());
            }
        }
        Err(e) => warnings.push(format!("{name}: {e}")),
    }
    // Processes with other code at the same addresses: their images are tagged with
    // their address space, and each trace's decode selects one by place.
    let spaces = spaces::AddressSpaces::build(&changes, &clock);
    let (tagged, any_tagged) = spaces.tag(&mappings);
    if any_tagged && !settings.tsc && info.per_cpu_mmaps {
        // Spaces are chosen by time on a CPU's trace; without TSC packets nothing dates a
        // place in it (and the trace of user code has no PIP to name a CR3).
        warnings.push(format!(
            "{name}: processes have other code at the same addresses, and the trace has no \
             timing packets (tsc=0): which process ran where on a CPU is not known, so code \
             there is not decoded (record with tsc, or with --per-thread)"
        ));
    } else if any_tagged && !settings.tsc {
        // Per thread, a process is known without time, but not which of its programs.
        let several = spaces.several();
        if !several.is_empty() {
            let s = if several.len() == 1 { "" } else { "es" };
            warnings.push(format!(
                "{name}: processes have other code at the same addresses, and the trace has \
                 no timing packets (tsc=0): process{s} {several:?} exec'd during the \
                 recording, so which program ran where in its threads' traces is not known, \
                 and code there is not decoded"
            ));
        }
    }
    let spaces = any_tagged.then(|| std::sync::Arc::new(spaces));
    let (image_entries, image_problems) = images::resolve(&tagged, lookup);
    warnings.extend(image_problems);
    if mappings.is_empty() {
        warnings.push(format!(
            "{name}: no executable mapping recorded (MMAP/MMAP2): no code to follow"
        ));
    }

    mapped.release(0..bytes.len());
    released = 0;
    let (queues, losses, aux_errors) =
        aux_queues_walked(&perf, |at| release_behind(&mapped, &mut released, at));
    mapped.release(0..bytes.len());
    for l in &losses {
        warnings.push(format!(
            "{name}: AUX data lost on {} (AUX record at offset {:#x}{}{}{}): the trace has \
             a gap there",
            match (l.cpu, l.tid) {
                (Some(c), _) => format!("cpu {c}"),
                (None, Some(t)) => format!("thread {t}"),
                _ => "an AUX area".to_string(),
            },
            l.record_offset,
            if l.aux.truncated() { ", truncated" } else { "" },
            if l.aux.partial() { ", partial" } else { "" },
            if l.aux.collision() { ", collision" } else { "" },
        ));
    }
    if queues.iter().all(|q| q.is_empty()) {
        // The walk stopped at a record it could not read (a size that lies, a file cut
        // before any AUX data): that is the reason, at its offset.
        if let Some(e) = aux_errors.first() {
            bail!(
                "{name}: no Intel PT data could be read: {e} (the records after it cannot \
                 be found)"
            );
        }
        bail!(
            "{name}: no Intel PT data (no AUXTRACE record with bytes): nothing to decode \
             (was the recording stopped before its buffers were read?)"
        );
    }
    let manifest = Manifest {
        format: TraceFormat::Pt,
        rtit_ctl: config,
        pt: Some(PtFacts {
            cpu: cpuid(&perf),
            mtc_freq: settings.mtc_freq,
            nom_freq: info.max_nonturbo_ratio.and_then(|r| u8::try_from(r).ok()),
            tsc_ctc_ratio_n: info.mtc.map(|m| m.tsc_ctc_ratio_n),
            tsc_ctc_ratio_d: info.mtc.map(|m| m.tsc_ctc_ratio_d),
            ret_compression: Some(settings.ret_compression),
            cyc: settings.cyc,
            mtc: settings.mtc,
            tsc: Some(settings.tsc),
            filters: Vec::new(),
        }),
        trace: "perf.data".to_string(),
        ring_offset: None,
        topa: None,
        trace_hub: None,
        guaranteed_ratio: None,
        images: image_entries,
        labels: BTreeMap::new(),
        generator: None,
    };
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    // The binaries, mapped once for every area (a `perf record -a` has thousands of areas
    // on a large machine: mapped per area, 6,200 of them exhausted a 4 GB address space).
    let (shared, shared_problems) = LoadedImage::load_shared(&manifest.images, &dir);
    let mut traces = Vec::new();
    for q in queues.iter().filter(|q| !q.is_empty()) {
        let (area, threads) = match (q.cpu, q.tid) {
            (Some(cpu), _) => (
                format!("cpu {cpu}"),
                Threads::for_cpu(cpu, &switches, clock),
            ),
            (None, Some(tid)) => (
                format!("thread {tid}"),
                Threads::for_thread(pids.get(&tid).copied(), tid, clock),
            ),
            (None, None) => (format!("AUX area {}", q.idx), Threads::default()),
        };
        // Where this area's AUX records say its data was cut (truncated: the AUX area
        // was full and the trace stopped): at the end of what they report written (the
        // records of its CPU, or of its thread per thread). The partial and collision
        // flags lose nothing at that place (the kernel's partial record has tracing off
        // somewhere inside it, in VMX operation): warnings only.
        let mut cuts: Vec<(u64, Lost)> = losses
            .iter()
            .filter(|l| l.aux.truncated())
            .filter(|l| match (q.cpu, q.tid) {
                (Some(c), _) => l.cpu == Some(c),
                (None, Some(t)) => l.tid == Some(t),
                _ => false,
            })
            .map(|l| {
                let at = l.aux.aux_offset.saturating_add(l.aux.aux_size);
                let lost = Lost::Truncated {
                    at,
                    record: l.record_offset,
                };
                (at, lost)
            })
            .collect();
        cuts.sort_by_key(|c| c.0);
        let (spans, breaks) = join(
            q,
            bytes,
            &cuts,
            info.snapshot_mode,
            &name,
            &area,
            &mut warnings,
        );
        let bundle = Bundle::from_memory_with_images(
            mapped.share().unwrap_or(Bytes::Empty),
            &format!("{name} ({area})"),
            manifest.clone(),
            &dir,
            shared.iter().filter_map(LoadedImage::share).collect(),
            shared_problems.clone(),
        )?
        .with_spans(spans, breaks)?;
        let spaces = spaces.as_ref().map(|s| spaces::TraceSpaces {
            threads: std::sync::Arc::new(threads.clone()),
            spaces: s.clone(),
        });
        traces.push(Trace {
            name: area,
            bundle,
            threads,
            spaces,
        });
    }
    Ok(Recording {
        path: path.to_path_buf(),
        file_size: bytes.len() as u64,
        config,
        traces,
        warnings,
        comms,
        pids,
    })
}

/// An AUX area's buffers as one stream, in AUX offset order, as ranges of `file` (the
/// recording's bytes, which hold every buffer), and where bytes were lost in it: a gap
/// (bytes in no buffer) and a cut (`cuts`: AUX offsets where the area's AUX records say
/// the data was truncated) are each a warning and a [`Break`] at the next PSB after them,
/// the bytes up to it skipped (the decode reports the loss there and reads on from that
/// PSB); a buffer that overlaps the bytes already taken gives only its bytes past them.
fn join(
    q: &AuxQueue<'_>,
    file: &[u8],
    cuts: &[(u64, Lost)],
    snapshot: bool,
    name: &str,
    area: &str,
    warnings: &mut Vec<String>,
) -> (Vec<Span>, Vec<Break>) {
    for issue in &q.issues {
        warnings.push(match issue {
            AuxIssue::Gap {
                record_offset,
                from,
                to,
            } if snapshot => format!(
                "{name}: {area}: AUX bytes {from:#x}..{to:#x} were overwritten before the \
                 snapshot at offset {record_offset:#x} was taken: the trace after them is \
                 read from its next PSB"
            ),
            AuxIssue::Gap {
                record_offset,
                from,
                to,
            } => format!(
                "{name}: {area}: AUX bytes {from:#x}..{to:#x} are in no AUXTRACE record (the \
                 one at offset {record_offset:#x} starts after them): lost, and the trace \
                 after them is read from its next PSB"
            ),
            AuxIssue::Overlap {
                record_offset,
                offset,
                prev_end,
            } => format!(
                "{name}: {area}: the AUXTRACE record at offset {record_offset:#x} starts at AUX \
                 offset {offset:#x}, before the end of the data already read ({prev_end:#x}): \
                 only its bytes after that are used"
            ),
            AuxIssue::Conflict {
                record_offset,
                cpu,
                tid,
            } => format!(
                "{name}: {area}: the AUXTRACE record at offset {record_offset:#x} names cpu \
                 {} thread {} for this AUX area: decoded with the area's first buffer's",
                *cpu as i32, *tid as i32
            ),
        });
    }
    // First every byte, in AUX order, cut into spans where bytes were lost (`losses`:
    // stream offsets, each a span's start). Then the bytes from each loss up to the next
    // PSB are dropped: they start inside a packet, and joined to the bytes before they
    // could parse as packets that never were. The PSB is searched in the joined bytes (a
    // PSB that perf cut in two is found), but not across the next loss.
    let mut raw: Vec<Span> = Vec::with_capacity(q.buffers.len());
    let mut losses: Vec<(u64, Lost)> = Vec::new();
    let mut at = 0u64;
    let mut end: Option<u64> = None;
    let lose = |losses: &mut Vec<(u64, Lost)>, at: u64, l: Lost| {
        // Two at one place (a cut where a buffer ends, then a gap): the first names it.
        if losses.last().is_none_or(|p| p.0 < at) {
            losses.push((at, l));
        }
    };
    // Where AUX records say this area's trace was cut (AUX offsets), in order.
    let mut cuts = cuts.iter().copied().filter(|c| c.0 > 0).peekable();
    for b in &q.buffers {
        let mut data = b.data;
        let mut offset = b.offset;
        if let Some(e) = end {
            if offset < e {
                let skip = (e - offset).min(data.len() as u64) as usize;
                data = &data[skip..];
                offset += skip as u64;
            } else if offset > e {
                let (from, to, record) = (e, offset, b.record_offset);
                let l = match snapshot {
                    true => Lost::Overwritten { from, to, record },
                    false => Lost::Missing { from, to, record },
                };
                lose(&mut losses, at, l);
            }
        }
        // Cuts before these bytes were passed (in a gap, or in bytes already read).
        while cuts.next_if(|c| c.0 < offset).is_some() {}
        while !data.is_empty() {
            // Up to the next cut inside these bytes.
            let take = match cuts.peek() {
                Some(c) if c.0 < offset + data.len() as u64 => (c.0 - offset) as usize,
                _ => data.len(),
            };
            if take > 0 {
                // Where the bytes lie in the file (the parser's slices are of its bytes).
                let from = (data.as_ptr() as usize).wrapping_sub(file.as_ptr() as usize);
                debug_assert!(from + take <= file.len());
                raw.push(Span {
                    at,
                    from,
                    len: take,
                });
                at += take as u64;
            }
            data = &data[take..];
            offset += take as u64;
            if !data.is_empty() {
                let c = cuts.next().expect("a cut inside the data");
                lose(&mut losses, at, c.1);
            }
        }
        let this_end = b.offset.saturating_add(b.data.len() as u64);
        end = Some(end.map_or(this_end, |e| e.max(this_end)));
        // A cut where these bytes end: the next ones start after it.
        if let Some(c) = cuts.next_if(|c| c.0 == this_end) {
            lose(&mut losses, at, c.1);
        }
    }
    drop_to_psbs(file, &raw, &losses)
}

/// `raw` (every byte of an area, cut into spans at each of `losses`) without the bytes
/// from each loss to the PSB after it, and a [`Break`] at each such PSB (not at the
/// stream's start: a loss before any byte read is no break). A loss before which no PSB
/// follows up to the next loss is one with it (the break names the first).
fn drop_to_psbs(file: &[u8], raw: &[Span], losses: &[(u64, Lost)]) -> (Vec<Span>, Vec<Break>) {
    // The stretches dropped, as stream offsets of `raw`, and the loss each one ends at.
    let mut drops: Vec<(u64, u64, Option<Lost>)> = Vec::with_capacity(losses.len());
    let mut pending: Option<(u64, Lost)> = None;
    for (i, &(x, l)) in losses.iter().enumerate() {
        let (from, lost) = pending.take().unwrap_or((x, l));
        // The bytes up to the next loss, and no further.
        let upto = losses.get(i + 1).map(|n| n.0);
        let n = upto.map_or(raw.len(), |u| raw.partition_point(|s| s.at < u));
        let view = TraceStream::spans(file, &raw[..n]);
        match next_psb(&view, x) {
            Some(p) => drops.push((from, p, Some(lost))),
            None if upto.is_some() => pending = Some((from, lost)),
            None => drops.push((from, view.len(), None)),
        }
    }
    let mut spans = Vec::with_capacity(raw.len());
    let mut breaks: Vec<Break> = Vec::new();
    let mut dropped = 0u64;
    let mut d = drops.iter().peekable();
    for s in raw {
        let (mut a, e) = (s.at, s.at + s.len as u64);
        while a < e {
            match d.peek() {
                Some(&&(from, to, lost)) if from <= a => {
                    // Inside a dropped stretch: on to its end.
                    let skip = to.min(e) - a;
                    a += skip;
                    dropped += skip;
                    if a == to {
                        d.next();
                        let at = a - dropped;
                        if let Some(lost) = lost.filter(|_| at > 0) {
                            if breaks.last().is_none_or(|b| b.at < at) {
                                breaks.push(Break { at, lost });
                            }
                        }
                    }
                }
                next => {
                    let stop = next.map_or(e, |n| n.0.min(e));
                    let off = (a - s.at) as usize;
                    spans.push(Span {
                        at: a - dropped,
                        from: s.from + off,
                        len: (stop - a) as usize,
                    });
                    a = stop;
                }
            }
        }
    }
    (spans, breaks)
}

/// The recording machine's processor as `family/model/stepping` (HEADER_CPUID,
/// `GenuineIntel,6,85,4`), for the errata.
fn cpuid(perf: &PerfData<'_>) -> Option<String> {
    let f = perf
        .string_feature(tracemill_perfdata::header::feature::CPUID)
        .ok()??;
    let s = String::from_utf8_lossy(f);
    let s = s.split_once("GenuineIntel").map(|(_, rest)| rest)?;
    let parts: Vec<&str> = s.trim_start_matches(',').split(',').take(3).collect();
    (parts.len() >= 2).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracemill_perfdata::aux::AuxBuffer;

    /// Two bytes of a cut packet, a PSB, then "gh".
    const PSB_THEN_GH: &[u8] = &[
        0x99, 0x99, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02,
        0x82, 0x02, 0x82, b'g', b'h',
    ];

    fn buffer<'a>(record_offset: u64, offset: u64, data: &'a [u8]) -> AuxBuffer<'a> {
        AuxBuffer {
            record_offset,
            offset,
            reference: 0,
            data,
        }
    }

    #[test]
    fn a_cut_an_aux_record_reports_is_a_break_at_the_next_psb() {
        // One buffer: "abcd", then bytes of a packet cut short, a PSB and "gh"; the AUX
        // record says the data was truncated after "abcd" (AUX offset 4).
        let mut file = b"--abcd".to_vec();
        file.extend(PSB_THEN_GH);
        let q = AuxQueue {
            idx: 0,
            cpu: Some(0),
            tid: None,
            buffers: vec![buffer(0x100, 0, &file[2..])],
            issues: vec![],
        };
        let lost = Lost::Truncated {
            at: 4,
            record: 0x80,
        };
        let mut w = Vec::new();
        let (spans, breaks) = join(&q, &file, &[(4, lost)], false, "f", "cpu 0", &mut w);
        let stream = TraceStream::spans(&file, &spans);
        let mut want = b"abcd".to_vec();
        want.extend(&PSB_THEN_GH[2..]);
        assert_eq!(stream.to_vec(0, stream.len()), want);
        assert_eq!(breaks, [Break { at: 4, lost }]);
        assert!(lost.to_string().contains("offset 0x80") && lost.to_string().contains("truncated"));
        // A cut where a buffer ends: the next buffer's bytes are read from their PSB.
        let q = AuxQueue {
            buffers: vec![buffer(0x100, 0, &file[2..6]), buffer(0x200, 4, &file[6..])],
            ..q
        };
        let (spans, breaks) = join(&q, &file, &[(4, lost)], false, "f", "cpu 0", &mut w);
        let stream = TraceStream::spans(&file, &spans);
        assert_eq!(stream.to_vec(0, stream.len()), want);
        assert_eq!(breaks, [Break { at: 4, lost }]);
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn after_a_loss_the_stream_resumes_at_the_psb_the_decoder_reads() {
        // The skipped bytes end in `02 82` (a payload's last bytes): the PSB is the last
        // 16 bytes of the run, where the decoder's reader finds it.
        let mut file = b"abcd".to_vec();
        file.extend([0x99, 0x02, 0x82]);
        file.extend(&PSB_THEN_GH[2..]);
        let q = AuxQueue {
            idx: 0,
            cpu: Some(0),
            tid: None,
            buffers: vec![buffer(0x100, 0, &file[..4]), buffer(0x200, 9, &file[4..])],
            issues: vec![],
        };
        let (spans, breaks) = join(&q, &file, &[], false, "f", "cpu 0", &mut Vec::new());
        let stream = TraceStream::spans(&file, &spans);
        let mut want = b"abcd".to_vec();
        want.extend(&PSB_THEN_GH[2..]);
        assert_eq!(stream.to_vec(0, stream.len()), want);
        assert_eq!(breaks.len(), 1);
        assert_eq!(
            tracemill_decode::pt::sync::next_psb(&stream, 0),
            Some(breaks[0].at)
        );
    }

    #[test]
    fn a_psb_perf_cut_in_two_after_a_loss_is_where_the_trace_resumes() {
        // "abcd", then a gap, then a cut packet and a PSB whose first 6 bytes end one
        // buffer and whose last 10 start the next (perf cuts buffers at any byte).
        let mut file = b"abcd".to_vec();
        file.extend(PSB_THEN_GH);
        let q = AuxQueue {
            idx: 0,
            cpu: Some(0),
            tid: None,
            buffers: vec![
                buffer(0x100, 0, &file[..4]),
                buffer(0x200, 9, &file[4..12]),
                buffer(0x300, 17, &file[12..]),
            ],
            issues: vec![],
        };
        let (spans, breaks) = join(&q, &file, &[], false, "f", "cpu 0", &mut Vec::new());
        let stream = TraceStream::spans(&file, &spans);
        let mut want = b"abcd".to_vec();
        want.extend(&PSB_THEN_GH[2..]);
        assert_eq!(stream.to_vec(0, stream.len()), want);
        let lost = Lost::Missing {
            from: 4,
            to: 9,
            record: 0x200,
        };
        assert_eq!(breaks, [Break { at: 4, lost }]);
        assert_eq!(tracemill_decode::pt::sync::next_psb(&stream, 0), Some(4));
    }

    #[test]
    fn no_psb_is_taken_across_a_loss_and_losses_before_one_psb_are_one_break() {
        // Half a PSB, a gap, the other half, a second gap, then a whole PSB: the halves
        // are no PSB (their bytes were not written one after the other); the trace
        // resumes at the whole one, one break naming the first loss.
        let half = &PSB_THEN_GH[2..10];
        let mut file = b"abcd".to_vec();
        file.extend(half);
        file.extend(half);
        file.extend(PSB_THEN_GH);
        let q = AuxQueue {
            idx: 0,
            cpu: Some(0),
            tid: None,
            buffers: vec![
                buffer(0x100, 0, &file[..12]),
                buffer(0x200, 20, &file[12..20]),
                buffer(0x300, 40, &file[20..]),
            ],
            issues: vec![],
        };
        let lost = Lost::Truncated {
            at: 4,
            record: 0x80,
        };
        let (spans, breaks) = join(
            &q,
            &file,
            &[(4, lost)],
            false,
            "f",
            "cpu 0",
            &mut Vec::new(),
        );
        let stream = TraceStream::spans(&file, &spans);
        let mut want = b"abcd".to_vec();
        want.extend(&PSB_THEN_GH[2..]);
        assert_eq!(stream.to_vec(0, stream.len()), want);
        assert_eq!(breaks, [Break { at: 4, lost }]);
        // With no PSB after the losses, their bytes are dropped to the end.
        let q = AuxQueue {
            buffers: q.buffers[..2].to_vec(),
            ..q
        };
        let (spans, breaks) = join(
            &q,
            &file,
            &[(4, lost)],
            false,
            "f",
            "cpu 0",
            &mut Vec::new(),
        );
        let stream = TraceStream::spans(&file, &spans);
        assert_eq!(stream.to_vec(0, stream.len()), b"abcd");
        assert!(breaks.is_empty());
    }

    #[test]
    fn an_areas_buffers_join_in_aux_order_past_gaps_and_overlaps_with_warnings() {
        // The buffers as they lie in a file, with other records' bytes between.
        let mut file = b"--abcd--cdef--".to_vec();
        file.extend(PSB_THEN_GH);
        file.extend(b"--ab");
        let p = PSB_THEN_GH.len();
        let q = AuxQueue {
            idx: 0,
            cpu: Some(0),
            tid: None,
            buffers: vec![
                buffer(0x100, 0, &file[2..6]),
                // Overlaps "cd": only "ef" is new.
                buffer(0x200, 2, &file[8..12]),
                // After a gap of 4 bytes (6..10 lost): read from its PSB on.
                buffer(0x300, 10, &file[14..14 + p]),
                // Wholly inside what was read: nothing new.
                buffer(0x400, 0, &file[16 + p..18 + p]),
            ],
            issues: vec![
                AuxIssue::Overlap {
                    record_offset: 0x200,
                    offset: 2,
                    prev_end: 4,
                },
                AuxIssue::Gap {
                    record_offset: 0x300,
                    from: 6,
                    to: 10,
                },
            ],
        };
        let mut w = Vec::new();
        let mut want = b"abcdef".to_vec();
        want.extend(&PSB_THEN_GH[2..]);
        let (spans, breaks) = join(&q, &file, &[], false, "f", "cpu 0", &mut w);
        // The bytes after the gap start at a PSB, where the loss is a break.
        assert_eq!(
            breaks,
            [Break {
                at: 6,
                lost: Lost::Missing {
                    from: 6,
                    to: 10,
                    record: 0x300
                }
            }]
        );
        // Read in place: the buffers' bytes, not copies.
        assert_eq!(spans[0].from, 2);
        assert_eq!(spans[1].from, 10);
        assert_eq!(spans.len(), 3);
        let stream = TraceStream::spans(&file, &spans);
        assert_eq!(stream.to_vec(0, stream.len()), want);
        assert_eq!(w.len(), 2);
        assert!(w[0].contains("offset 0x200") && w[0].contains("only its bytes after"));
        assert!(
            w[1].contains("0x6..0xa") && w[1].contains("offset 0x300") && w[1].contains("lost")
        );
    }
}
