//! AUX data as a decoder needs it: the AUXTRACE buffers of each AUX area (perf's
//! `auxtrace_queues`, one per mmap `idx`: per CPU, or per thread with `--per-thread`),
//! in file order, with what is wrong between them: data skipped (a gap: lost), data given
//! twice or going backwards (an overlap), a buffer whose CPU or thread differs from its
//! queue's (perf refuses that as "auxtrace queue conflict"). And the AUX records whose
//! flags say data was lost (truncated, partial, collision).

use crate::error::Error;
use crate::file::PerfData;
use crate::record::{kind, Aux, Record};

/// One AUXTRACE buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuxBuffer<'a> {
    /// File offset of its AUXTRACE record.
    pub record_offset: u64,
    /// Position of `data` in its queue's AUX stream.
    pub offset: u64,
    pub reference: u64,
    pub data: &'a [u8],
}

/// Something wrong between a queue's buffers, at the later buffer's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuxIssue {
    /// Bytes `from..to` of the stream are in no buffer: lost.
    Gap {
        record_offset: u64,
        from: u64,
        to: u64,
    },
    /// The buffer starts at `offset`, before the end of the data already given
    /// (`prev_end`): it overlaps or goes backwards.
    Overlap {
        record_offset: u64,
        offset: u64,
        prev_end: u64,
    },
    /// The buffer names another CPU or thread than the queue's first buffer.
    Conflict {
        record_offset: u64,
        cpu: u32,
        tid: u32,
    },
}

/// One AUX area's buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuxQueue<'a> {
    pub idx: u32,
    /// `None` for `u32::MAX` (-1): per-thread buffers have no CPU, per-CPU ones no thread.
    pub cpu: Option<u32>,
    pub tid: Option<u32>,
    pub buffers: Vec<AuxBuffer<'a>>,
    pub issues: Vec<AuxIssue>,
}

impl AuxQueue<'_> {
    /// The stream's bytes given, in order (gaps and overlaps as the buffers have them).
    pub fn len(&self) -> u64 {
        self.buffers.iter().map(|b| b.data.len() as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.buffers.iter().all(|b| b.data.is_empty())
    }
}

/// An AUX record whose flags say data was lost or damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuxLoss {
    pub record_offset: u64,
    pub cpu: Option<u32>,
    pub tid: Option<u32>,
    /// perf time, when the attribute has it.
    pub time: Option<u64>,
    pub aux: Aux,
}

fn some(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

/// The AUX areas of `perf`, by `idx`, each with its buffers in file order, and the AUX
/// records that report a loss. The first record error ends the walk (it is returned).
pub fn aux_queues<'a>(perf: &PerfData<'a>) -> Result<(Vec<AuxQueue<'a>>, Vec<AuxLoss>), Error> {
    let (queues, losses, mut errors) = aux_queues_despite_errors(perf);
    match errors.is_empty() {
        true => Ok((queues, losses)),
        false => Err(errors.swap_remove(0)),
    }
}

/// [`aux_queues`], going on past records that cannot be read (the walk reads on where
/// a record's size was sound, and a file cut in the middle of a record still gives every
/// buffer before the cut), with the errors met on the way.
pub fn aux_queues_despite_errors<'a>(
    perf: &PerfData<'a>,
) -> (Vec<AuxQueue<'a>>, Vec<AuxLoss>, Vec<Error>) {
    aux_queues_walked(perf, |_| {})
}

/// [`aux_queues_despite_errors`], telling `at` the file offset of each record as its walks
/// over the records reach it (a caller that maps the file lets the pages behind go): one
/// walk from the start, and with compressed records (`perf record -z`) a second one from
/// the start again over those.
pub fn aux_queues_walked<'a>(
    perf: &PerfData<'a>,
    mut at: impl FnMut(u64),
) -> (Vec<AuxQueue<'a>>, Vec<AuxLoss>, Vec<Error>) {
    let mut queues: Vec<AuxQueue<'a>> = Vec::new();
    let mut losses = Vec::new();
    let mut errors = Vec::new();
    let mut compressed = false;
    for item in perf.records() {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        at(item.offset);
        match item.record {
            Record::Auxtrace(a) => {
                let q = match queues.iter().position(|q| q.idx == a.idx) {
                    Some(i) => &mut queues[i],
                    None => {
                        queues.push(AuxQueue {
                            idx: a.idx,
                            cpu: some(a.cpu),
                            tid: some(a.tid),
                            buffers: Vec::new(),
                            issues: Vec::new(),
                        });
                        queues.last_mut().expect("pushed")
                    }
                };
                if (some(a.cpu), some(a.tid)) != (q.cpu, q.tid) {
                    q.issues.push(AuxIssue::Conflict {
                        record_offset: item.offset,
                        cpu: a.cpu,
                        tid: a.tid,
                    });
                }
                if let Some(prev) = q.buffers.last_mut() {
                    // perf pads each buffer's data to 8 bytes with zeros (its `size`
                    // counts them), and the next buffer starts where the data ended
                    // (`offset` is the AUX head it read from): a tail of at most 7 zeros
                    // the next buffer starts inside is that padding, not trace.
                    let end = prev.offset.saturating_add(prev.data.len() as u64);
                    let pad = end.saturating_sub(a.offset) as usize;
                    if (1..8).contains(&pad)
                        && pad <= prev.data.len()
                        && prev.data[prev.data.len() - pad..].iter().all(|&b| b == 0)
                    {
                        prev.data = &prev.data[..prev.data.len() - pad];
                    }
                    let prev_end = prev.offset.saturating_add(prev.data.len() as u64);
                    if a.offset < prev_end {
                        q.issues.push(AuxIssue::Overlap {
                            record_offset: item.offset,
                            offset: a.offset,
                            prev_end,
                        });
                    } else if a.offset > prev_end {
                        q.issues.push(AuxIssue::Gap {
                            record_offset: item.offset,
                            from: prev_end,
                            to: a.offset,
                        });
                    }
                }
                q.buffers.push(AuxBuffer {
                    record_offset: item.offset,
                    offset: a.offset,
                    reference: a.reference,
                    data: a.data,
                });
            }
            Record::Aux(aux) if aux.truncated() || aux.partial() || aux.collision() => {
                losses.push(AuxLoss {
                    record_offset: item.offset,
                    cpu: item.sample_id.cpu,
                    tid: item.sample_id.tid,
                    time: item.sample_id.time,
                    aux,
                });
            }
            Record::Other { kind: k, .. } if k == kind::COMPRESSED || k == kind::COMPRESSED2 => {
                compressed = true;
            }
            _ => {}
        }
    }
    // `perf record -z` compresses the AUX records (they come from the ring buffer) but
    // not the AUXTRACE ones: the losses inside compressed records, in their place by
    // file offset. (Their errors are the sideband walk's to report.) A file without
    // compressed records is not walked again; this second walk tells `at` where it is
    // too (the offset of the compressed record each record came from), from the start.
    let mut inner = Vec::new();
    if compressed {
        perf.for_each_compressed_record(|item| {
            if let Ok(item) = item {
                at(item.offset);
                if let Record::Aux(aux) = item.record {
                    if aux.truncated() || aux.partial() || aux.collision() {
                        inner.push(AuxLoss {
                            record_offset: item.offset,
                            cpu: item.sample_id.cpu,
                            tid: item.sample_id.tid,
                            time: item.sample_id.time,
                            aux,
                        });
                    }
                }
            }
        });
    }
    if !inner.is_empty() {
        losses.extend(inner);
        losses.sort_by_key(|l| l.record_offset);
    }
    queues.sort_by_key(|q| q.idx);
    (queues, losses, errors)
}
