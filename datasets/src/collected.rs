//! The hardware model's side of collected inputs: a stream laid out as a ToPA dump or a
//! trace-hub capture, as the hardware and a collector would make it, so that tests can
//! check that every form decodes to the same tables. The readers (and the forms' format)
//! are `tracemill_input::collected`.

use tracemill_input::collected::{entry, HUB_RECORD};
use tracemill_input::manifest::{Hex, Topa, TopaRegion, TopaTable, TraceHub};

use crate::rng::Rng;

/// How the model lays a stream out through ToPA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopaPlan {
    /// Output regions in chain order, as size codes (0 = 4 KiB).
    pub sizes: Vec<u8>,
    /// How many of them the first table holds; the rest go in a second table (0: all in
    /// one table).
    pub first_table: usize,
    /// The last table's END entry points back at the first table (a circular buffer);
    /// otherwise the last region has STOP set, and tracing stops when it fills.
    pub circular: bool,
    /// Set INT on every region whose index is a multiple of this (0: none).
    pub int_every: usize,
    /// Seeds the file order of the regions and the stale bytes of unwritten memory.
    pub seed: u64,
}

/// A stream laid out as a collected form: the manifest table, the file, and
/// `stream offset = model offset + shift`.
#[derive(Clone, Debug)]
pub struct Laid<T> {
    pub form: T,
    pub file: Vec<u8>,
    pub shift: i64,
}

/// Write `stream` (the model's output, in order) through ToPA as `plan` sets it up, and
/// dump it as a collector would: every region's memory (stale bytes where nothing was
/// written), in a shuffled file order, with the tables and the MSRs after tracing stopped.
pub fn write_topa(stream: &[u8], plan: &TopaPlan) -> Laid<Topa> {
    let mut rng = Rng::new(plan.seed ^ 0x70FA);
    const TABLE0: u64 = 0x7F_0000;
    const TABLE1: u64 = 0x7F_1000;
    let n = plan.sizes.len().max(1);
    let sizes: Vec<u64> = (0..n)
        .map(|k| 4096u64 << plan.sizes.get(k).copied().unwrap_or(0).min(15))
        .collect();
    // Physical bases: ascending, each aligned to its size.
    let mut bases = Vec::with_capacity(n);
    let mut next = 0x100_0000u64;
    for &s in &sizes {
        next = next.div_ceil(s) * s;
        bases.push(next);
        next += s;
    }
    let split = if plan.first_table == 0 || plan.first_table >= n {
        n
    } else {
        plan.first_table
    };
    let flags = |k: usize| {
        let int = plan.int_every > 0 && k.is_multiple_of(plan.int_every);
        let stop = !plan.circular && k + 1 == n;
        (int, stop)
    };
    let make = |range: std::ops::Range<usize>, end_to: Option<u64>| -> Vec<Hex> {
        let mut v: Vec<Hex> = range
            .map(|k| {
                let (int, stop) = flags(k);
                let code = plan.sizes.get(k).copied().unwrap_or(0).min(15);
                Hex(entry::region(bases[k], code, int, stop))
            })
            .collect();
        if let Some(t) = end_to {
            v.push(Hex(entry::end(t)));
        }
        v
    };
    let mut tables = Vec::new();
    let (t0_end, t1_end) = if split < n {
        (Some(TABLE1), plan.circular.then_some(TABLE0))
    } else {
        (plan.circular.then_some(TABLE0), None)
    };
    tables.push(TopaTable {
        base: TABLE0,
        entries: make(0..split, t0_end),
    });
    if split < n {
        tables.push(TopaTable {
            base: TABLE1,
            entries: make(split..n, t1_end),
        });
    }

    // The hardware: byte p of the stream goes to region (p / capacity-round) ...
    let capacity: u64 = sizes.iter().sum();
    let len = stream.len() as u64;
    let mut memory: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&s| (0..s).map(|_| rng.below(256) as u8).collect())
        .collect();
    let starts: Vec<u64> = sizes
        .iter()
        .scan(0, |acc, &s| {
            let a = *acc;
            *acc += s;
            Some(a)
        })
        .collect();
    let written = if plan.circular {
        len
    } else {
        len.min(capacity)
    };
    let keep_from = written.saturating_sub(capacity);
    for p in keep_from..written {
        let q = p % capacity;
        let k = starts.partition_point(|&s| s <= q) - 1;
        memory[k][(q - starts[k]) as usize] = stream[p as usize];
    }
    // The output pointer after tracing stopped.
    let (cur, out_off, stopped) = if !plan.circular && len >= capacity {
        (n - 1, sizes[n - 1] - 1, true)
    } else {
        let q = written % capacity;
        let k = starts.partition_point(|&s| s <= q) - 1;
        (k, q - starts[k], false)
    };
    let (table, index) = if cur < split {
        (TABLE0, cur)
    } else {
        (TABLE1, cur - split)
    };
    // Exactly full counts as wrapped: the pointer is back at the start, where the oldest
    // byte is.
    let wrapped = plan.circular && len >= capacity && len > 0;
    let shift = if wrapped {
        -((len - capacity) as i64)
    } else {
        0
    };
    // The dump: regions in a shuffled order, with a little unrelated memory between some.
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let mut file = Vec::new();
    let mut regions = Vec::new();
    for k in order {
        if rng.chance(0.3) {
            let pad = 64 * rng.range(1, 8) as usize;
            file.extend((0..pad).map(|_| rng.below(256) as u8));
        }
        regions.push(TopaRegion {
            base: bases[k],
            file_offset: file.len() as u64,
        });
        file.extend_from_slice(&memory[k]);
    }
    regions.sort_by_key(|r| r.base);
    Laid {
        form: Topa {
            output_base: table,
            output_mask_ptrs: (out_off << 32) | ((index as u64) << 7) | 0x7F,
            stopped,
            wrapped,
            tables,
            regions,
        },
        file,
        shift,
    }
}

/// How the model's writes reach a trace hub.
#[derive(Clone, Debug, PartialEq)]
pub struct HubPlan {
    /// Size of the output range (a power of two, >= 64).
    pub size: u64,
    /// RTIT_OFFSET at enable (unaligned: the first line is partial).
    pub start_offset: u64,
    /// A line flushed before it filled (a fence, a bus lock) every this many bytes on
    /// average (0: never).
    pub flush_every: u64,
    /// Chance that a write overtakes the older write before it, where 2.3.2 allows.
    pub reorder: f64,
    pub seed: u64,
}

/// Write `stream` through the output range to a trace hub and record the line writes as
/// received: partial lines carry stale bytes outside their valid run; some arrive before
/// older ones, within the 2.3.2 bounds.
pub fn write_trace_hub(stream: &[u8], plan: &HubPlan) -> Laid<TraceHub> {
    let mut rng = Rng::new(plan.seed ^ 0x4B0B);
    let size = plan.size.next_power_of_two().max(64);
    let mask = size - 1;
    let base = 0xFED0_0000u64 & !mask;
    let start = plan.start_offset & mask;
    // Writes in true order: (unrolled position, length).
    let mut writes: Vec<(u64, u64)> = Vec::new();
    let end = start + stream.len() as u64;
    let mut u = start;
    while u < end {
        let line_end = (u | 63) + 1;
        let mut to = line_end.min(end);
        if plan.flush_every > 0 && rng.below(plan.flush_every.max(64) / 64 * 2) == 0 {
            let cut = u + 1 + rng.below(to - u);
            to = cut.min(to);
        }
        writes.push((u, to - u));
        u = to;
    }
    // Reorder: a younger write may go before an older one unless it is the same line or
    // a later iteration of it (line position at least one range ahead).
    let mut idx: Vec<usize> = (0..writes.len()).collect();
    for _pass in 0..2 {
        for i in 0..idx.len().saturating_sub(1) {
            let (v, w) = (idx[i], idx[i + 1]);
            if w > v && rng.chance(plan.reorder) {
                let (lv, lw) = (writes[v].0 & !63, writes[w].0 & !63);
                if lw != lv && lw < lv + size {
                    idx.swap(i, i + 1);
                }
            }
        }
    }
    let mut file = Vec::with_capacity(idx.len() * HUB_RECORD);
    for &k in &idx {
        let (p, n) = writes[k];
        let lo = p & 63;
        let valid = if n == 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << lo
        };
        let s = (p - start) as usize;
        file.extend_from_slice(&(base + (p & mask & !63)).to_le_bytes());
        file.extend_from_slice(&valid.to_le_bytes());
        let mut line: Vec<u8> = (0..64).map(|_| rng.below(256) as u8).collect();
        line[lo as usize..(lo + n) as usize].copy_from_slice(&stream[s..s + n as usize]);
        file.extend_from_slice(&line);
    }
    Laid {
        form: TraceHub {
            base,
            limit_mask: mask,
            start_offset: start,
        },
        file,
        shift: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracemill_input::collected::{assemble_topa, assemble_trace_hub};

    fn stream(n: usize, seed: u64) -> Vec<u8> {
        let mut r = Rng::new(seed);
        (0..n).map(|_| r.below(256) as u8).collect()
    }

    fn plan(sizes: &[u8], first_table: usize, circular: bool) -> TopaPlan {
        TopaPlan {
            sizes: sizes.to_vec(),
            first_table,
            circular,
            int_every: 2,
            seed: 5,
        }
    }

    #[test]
    fn topa_round_trips_unwrapped_wrapped_and_stopped() {
        let s = stream(60_000, 1);
        // Fits: the stream whole, from the enable.
        let l = write_topa(&s, &plan(&[1, 0, 2, 3], 2, true));
        assert!(!l.form.wrapped);
        let a = assemble_topa(&l.form, &l.file).unwrap();
        assert_eq!(a.bytes, s);
        assert!(a.starts_at_enable);
        // Wraps (capacity 28 KiB): the newest bytes, in order.
        for (sizes, split) in [(&[1u8, 0, 2][..], 1), (&[0, 0, 0, 0, 1][..], 0)] {
            let l = write_topa(&s, &plan(sizes, split, true));
            assert!(l.form.wrapped);
            let a = assemble_topa(&l.form, &l.file).unwrap();
            let cap: usize = sizes.iter().map(|&c| 4096usize << c).sum();
            assert_eq!(a.bytes, &s[s.len() - cap..]);
            assert_eq!(l.shift, -((s.len() - cap) as i64));
            assert!(!a.starts_at_enable);
            assert!(a.warnings.iter().all(|w| w.contains("belong to no region")));
        }
        // STOP on the last region: tracing stopped when it filled.
        let l = write_topa(&s, &plan(&[0, 1], 0, false));
        assert!(l.form.stopped);
        let a = assemble_topa(&l.form, &l.file).unwrap();
        assert_eq!(a.bytes, &s[..3 * 4096]);
        // The manifest table survives TOML.
        let mut m = tracemill_input::manifest::Manifest::new(1);
        m.topa = Some(l.form.clone());
        let back: tracemill_input::manifest::Manifest = toml::from_str(&m.to_toml()).unwrap();
        assert_eq!(back.topa, m.topa);
    }

    #[test]
    fn topa_problems_are_errors_that_say_where() {
        let s = stream(10_000, 2);
        let l = write_topa(&s, &plan(&[0, 0, 0], 0, true));
        let err = |f: &dyn Fn(&mut Topa, &mut Vec<u8>)| {
            let (mut t, mut file) = (l.form.clone(), l.file.clone());
            f(&mut t, &mut file);
            assemble_topa(&t, &file).unwrap_err()
        };
        let e = err(&|_, f| f.truncate(f.len() - 100));
        assert!(e.contains("needs file bytes"), "{e}");
        let e = err(&|t, _| t.regions[1].file_offset = t.regions[0].file_offset + 16);
        assert!(e.contains("overlap"), "{e}");
        let e = err(&|t, _| t.output_mask_ptrs = (0x2000 << 32) | 0x7F);
        assert!(e.contains("ToPA errors 3"), "{e}");
        let e = err(&|t, _| t.tables[0].entries[0].0 |= 1 << 3);
        assert!(e.contains("reserved"), "{e}");
        let e = err(&|t, _| t.tables[0].entries[0].0 = entry::end(t.tables[0].base));
        assert!(e.contains("entry 0 is an END"), "{e}");
        let e = err(&|t, _| {
            t.tables[0].entries.pop();
        });
        assert!(e.contains("without an END or STOP"), "{e}");
        let e = err(&|t, _| {
            t.regions.remove(0);
        });
        assert!(e.contains("no [[topa.region]]"), "{e}");
        let e = err(&|t, _| t.output_base = 0x1000);
        assert!(e.contains("output pointer"), "{e}");
        let e = err(&|t, _| {
            let last = t.tables[0].entries.len() - 1;
            t.tables[0].entries[last] = Hex(t.tables[0].entries[0].0 | entry::STOP);
            t.wrapped = true;
        });
        assert!(e.contains("used by two entries"), "{e}");
        let e = err(&|t, _| t.tables[0].entries[1].0 |= 1 << entry::SIZE_SHIFT);
        assert!(e.contains("not aligned"), "{e}");
    }

    #[test]
    fn trace_hub_reorders_within_the_bounds_and_drops_invalid_bytes() {
        let s = stream(50_000, 3);
        for (size, start, flush, reorder) in [
            (4096, 0, 0, 0.0),
            (4096, 37, 300, 0.4),
            (128, 5, 100, 0.5),
            (64, 63, 64, 0.5),
        ] {
            let l = write_trace_hub(
                &s,
                &HubPlan {
                    size,
                    start_offset: start,
                    flush_every: flush,
                    reorder,
                    seed: 9,
                },
            );
            let a = assemble_trace_hub(&l.form, &l.file).unwrap();
            assert_eq!(a.bytes, s, "size {size} start {start}");
            assert!(a.warnings.is_empty(), "{:?}", a.warnings);
            if reorder > 0.0 && size >= 4096 {
                // The capture really is out of order.
                let addrs: Vec<u64> = l
                    .file
                    .chunks(HUB_RECORD)
                    .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()))
                    .collect();
                assert!(addrs
                    .windows(2)
                    .any(|w| (w[1].wrapping_sub(w[0]) & (size - 1)) > 64));
            }
        }
    }

    #[test]
    fn trace_hub_problems() {
        let s = stream(2_000, 4);
        let l = write_trace_hub(
            &s,
            &HubPlan {
                size: 256,
                start_offset: 0,
                flush_every: 0,
                reorder: 0.0,
                seed: 1,
            },
        );
        let rec = |k: usize| l.file[k * HUB_RECORD..(k + 1) * HUB_RECORD].to_vec();
        // A duplicate line.
        let mut f = l.file.clone();
        f.extend(rec(3));
        let e = assemble_trace_hub(&l.form, &f).unwrap_err();
        assert!(e.contains("already received"), "{e}");
        // A lost line: the stream ends before it, with a warning.
        let mut f = rec(0);
        f.extend(rec(2));
        f.extend(rec(3));
        let a = assemble_trace_hub(&l.form, &f).unwrap();
        assert_eq!(a.bytes, &s[..64]);
        assert!(
            a.warnings.iter().any(|w| w.contains("never arrived")),
            "{:?}",
            a.warnings
        );
        // A line further ahead than the capture could fill ends it there.
        let mut f = rec(0);
        f.extend(rec(3));
        let a = assemble_trace_hub(&l.form, &f).unwrap();
        assert_eq!(a.bytes, &s[..64]);
        assert!(a.warnings[0].contains("left out"), "{:?}", a.warnings);
        // Outside the range, not a line, a torn mask, a trailing fragment.
        let mut r = rec(0);
        r[..8].copy_from_slice(&(l.form.base + 256).to_le_bytes());
        assert!(assemble_trace_hub(&l.form, &r)
            .unwrap_err()
            .contains("outside"));
        r[..8].copy_from_slice(&(l.form.base + 3).to_le_bytes());
        assert!(assemble_trace_hub(&l.form, &r)
            .unwrap_err()
            .contains("not a 64-byte line"));
        let mut r = rec(0);
        r[8..16].copy_from_slice(&0xF0F0u64.to_le_bytes());
        assert!(assemble_trace_hub(&l.form, &r)
            .unwrap_err()
            .contains("one run"));
        assert!(assemble_trace_hub(&l.form, &l.file[..100])
            .unwrap_err()
            .contains("left over"));
        let bad = TraceHub {
            limit_mask: 100,
            ..l.form.clone()
        };
        assert!(assemble_trace_hub(&bad, &l.file).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Any plan: the hardware's bytes come back in order (ToPA: all of them, the newest
        /// part, or the part before a STOP filled; trace hub: all of them).
        #[test]
        fn any_plan_round_trips(
            len in 0usize..40_000,
            sizes in proptest::collection::vec(0u8..3, 1..6),
            first_table in 0usize..6,
            circular: bool,
            seed: u64,
            hub_size_log in 6u32..14,
            start: u64,
            flush_every in 0u64..3000,
            reorder in 0.0f64..0.8,
        ) {
            let cap0: usize = sizes.iter().map(|&c| 4096usize << c).sum();
            let len = if seed % 5 == 0 { cap0 } else { len };
            let s = stream(len, seed);
            let l = write_topa(&s, &TopaPlan { sizes: sizes.clone(), first_table, circular, int_every: 2, seed });
            let a = assemble_topa(&l.form, &l.file).unwrap();
            let cap: usize = sizes.iter().map(|&c| 4096usize << c).sum();
            let want = if circular { &s[s.len().saturating_sub(cap)..] } else { &s[..s.len().min(cap)] };
            proptest::prop_assert_eq!(&a.bytes[..], want);
            let size = 1u64 << hub_size_log;
            let h = write_trace_hub(&s, &HubPlan { size, start_offset: start % size, flush_every, reorder, seed });
            let a = assemble_trace_hub(&h.form, &h.file).unwrap();
            proptest::prop_assert_eq!(&a.bytes[..], &s[..]);
            proptest::prop_assert!(a.warnings.is_empty());
        }

        /// Damaged records never panic: an error or a stream built from what is there.
        #[test]
        fn damaged_captures_never_panic(
            seed: u64,
            flips in proptest::collection::vec((0usize..4000, 0u8..=255), 0..20),
            cut in 0usize..4000,
        ) {
            let s = stream(3000, seed);
            let h = write_trace_hub(&s, &HubPlan { size: 256, start_offset: 3, flush_every: 500, reorder: 0.3, seed });
            let mut f = h.file.clone();
            for (at, v) in flips {
                let n = f.len();
                f[at % n] ^= v;
            }
            f.truncate(cut.min(f.len()));
            let _ = assemble_trace_hub(&h.form, &f);
            let l = write_topa(&s, &TopaPlan { sizes: vec![0], first_table: 0, circular: true, int_every: 0, seed });
            let mut t = l.form.clone();
            t.output_mask_ptrs ^= seed;
            t.tables[0].entries[0].0 ^= seed.rotate_left(7);
            let _ = assemble_topa(&t, &l.file[..cut.min(l.file.len())]);
        }
    }
}
