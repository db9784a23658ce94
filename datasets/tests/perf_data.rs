//! perf.data: the writer (`tracemill_datasets::perf_data`) against the reader
//! (`tracemill-perfdata`): the same records back, AUX data byte for byte; every cut and
//! every flipped byte of a small file gives errors with offsets, never a panic.

use std::path::PathBuf;

use tracemill_datasets::perf_data::{intel_pt_info, intel_pt_two_threads, CpuStream, PtRecording, Written};
use tracemill_decode::pt::encode::encode;
use tracemill_decode::pt::packet::{IpCompression, IpPayload, Packet, Tnt};
use tracemill_perfdata::header::feature;
use tracemill_perfdata::record::{kind, misc};
use tracemill_perfdata::{PerfData, Record};

pub fn jumptable() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples/jumptable/images/jumptable")
}

/// A PSB+ with a TSC, then the code at `ip` enabled, three conditional branches, a
/// disable: the smallest Intel PT a decoder has something to say about.
pub fn small_pt(tsc: u64, ip: u64) -> Vec<u8> {
    let full = |ip| IpPayload {
        compression: IpCompression::Sext48,
        bits: ip & 0xffff_ffff_ffff,
    };
    let mut v = Vec::new();
    for p in [
        Packet::Psb,
        Packet::Tsc(tsc),
        Packet::PsbEnd,
        Packet::TipPge(full(ip)),
        Packet::Tnt8(Tnt { bits: 0b101, len: 3 }),
        Packet::TipPgd(IpPayload {
            compression: IpCompression::Suppressed,
            bits: 0,
        }),
    ] {
        encode(&p, &mut v).unwrap();
    }
    v
}

pub fn recording(pt_len: usize) -> PtRecording {
    let mut cpus = Vec::new();
    for (cpu, tid) in [(0u32, 4242u32), (1, 4243)] {
        let mut pt = small_pt(2_000_000 + cpu as u64 * 1000, 0x401000 + cpu as u64 * 0x40);
        while pt.len() < pt_len {
            let again = small_pt(2_000_000 + pt.len() as u64, 0x401000);
            pt.extend(again);
        }
        cpus.push(CpuStream { cpu, tid, pt });
    }
    PtRecording::for_elf(&jumptable(), 4242, cpus).unwrap()
}

fn small() -> (PtRecording, Written) {
    let r = recording(0);
    let w = intel_pt_two_threads(&r).unwrap();
    (r, w)
}

#[test]
fn round_trip_gives_back_every_record_and_the_aux_data_byte_for_byte() {
    let (r, w) = small();
    let p = PerfData::parse(&w.bytes).unwrap();
    assert_eq!(p.attrs().len(), 2);
    assert_eq!(p.attrs()[0].attr.kind, 8);
    assert_eq!(p.attrs()[0].attr.config, 0x300e601);
    let items: Vec<_> = p.records().collect::<Result<_, _>>().unwrap();
    assert_eq!(items.len(), w.records.len());
    let mut aux = Vec::new();
    for (item, (cpumode, rec, sid)) in items.iter().zip(&w.records) {
        assert_eq!(&item.record, rec, "record at {:#x}", item.offset);
        assert_eq!(item.misc & misc::CPUMODE_MASK, *cpumode);
        if rec.kind() < kind::USER_TYPE_START {
            assert_eq!(&item.sample_id, sid, "trailer at {:#x}", item.offset);
            // ITRACE_START and AUX come from the intel_pt event, the rest from dummy.
            let want = if matches!(rec, Record::ItraceStart { .. } | Record::Aux(_)) { 0 } else { 1 };
            assert_eq!(item.attr, Some(want), "{rec:?}");
        }
        if let Record::Auxtrace(a) = &item.record {
            aux.push((item.offset, a.cpu, a.data));
        }
    }
    // The AUX data: each CPU's stream, padded to 8 bytes with PAD (0) packets.
    assert_eq!(aux.len(), 2);
    for ((_, cpu, data), c) in aux.iter().zip(&r.cpus) {
        assert_eq!(*cpu, c.cpu);
        assert_eq!(&data[..c.pt.len()], &c.pt[..]);
        assert!(data[c.pt.len()..].iter().all(|&b| b == 0));
        assert_eq!(data.len() % 8, 0);
    }
    // The index names the same records.
    let ix = p.auxtrace_index().unwrap();
    assert_eq!(ix.iter().map(|e| e.file_offset).collect::<Vec<_>>(), aux.iter().map(|a| a.0).collect::<Vec<_>>());
    // Features.
    let b = p.build_ids().unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].build_id, r.build_id);
    assert_eq!(b[0].filename, &r.path[..]);
    assert_eq!(r.build_id.to_hex(), "3e9cd42b2288303e1629db1fc9405a843e2b4361");
    assert_eq!(p.string_feature(feature::ARCH).unwrap(), Some(&b"x86_64"[..]));
    let (_, info) = p.intel_pt_info().unwrap().unwrap();
    assert_eq!(info, intel_pt_info(&r));
    let s = info.settings(p.attrs()[0].attr.config);
    assert!(s.tsc && s.ret_compression && s.mtc == Some(true) && s.cyc == Some(false));
    assert_eq!(s.mtc_freq, Some(3));
}

/// Record boundaries of the data section: `(start, end)` per record.
fn boundaries(bytes: &[u8]) -> (u64, Vec<(u64, u64)>) {
    let p = PerfData::parse(bytes).unwrap();
    let offsets: Vec<u64> = p.records().map(|i| i.unwrap().offset).collect();
    let end = p.header().data.offset + p.header().data.size;
    let mut v = Vec::new();
    for (i, &o) in offsets.iter().enumerate() {
        v.push((o, offsets.get(i + 1).copied().unwrap_or(end)));
    }
    (p.header().data.offset, v)
}

/// Everything the reader offers, run to its end; the errors met.
fn read_all(bytes: &[u8]) -> Vec<tracemill_perfdata::Error> {
    let mut errors = Vec::new();
    let p = match PerfData::parse(bytes) {
        Ok(p) => p,
        Err(e) => return vec![e],
    };
    for item in p.records() {
        match item {
            Ok(i) => {
                if let Record::AuxtraceInfo(a) = &i.record {
                    let _ = tracemill_perfdata::IntelPtInfo::parse(a, i.offset);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    errors.extend(p.features().err());
    errors.extend(p.build_ids().err());
    errors.extend(p.auxtrace_index().err());
    errors.extend(p.string_feature(feature::HOSTNAME).err());
    errors.extend(p.intel_pt_info().err());
    errors
}

#[test]
fn every_cut_is_an_error_at_or_before_the_cut_after_the_whole_records() {
    let (_, w) = small();
    let bytes = &w.bytes;
    let (data_at, records) = boundaries(bytes);
    let data_end = records.last().unwrap().1;
    for n in 0..bytes.len() {
        let cut = &bytes[..n];
        let errors = read_all(cut);
        assert!(!errors.is_empty(), "a cut at {n} went unnoticed");
        for e in &errors {
            assert!(e.offset() <= n as u64, "cut at {n}: {e}");
        }
        if n as u64 >= data_at && (n as u64) < data_end {
            // The records wholly before the cut, then one error, at the cut record.
            let p = PerfData::parse(cut).unwrap();
            let got: Vec<_> = p.records().collect();
            let whole = records.iter().take_while(|r| r.1 <= n as u64).count();
            assert_eq!(got.len(), whole + 1, "cut at {n}");
            assert!(got[..whole].iter().all(|r| r.is_ok()));
            let e = got[whole].as_ref().unwrap_err();
            assert!(e.is_truncated(), "cut at {n}: {e}");
            let cut_record = records.get(whole).map_or(data_end, |r| r.0);
            assert!(e.offset() >= cut_record.min(n as u64), "cut at {n}: {e}");
            assert!(e.to_string().contains("(at offset 0x"), "{e}");
        }
    }
}

#[test]
fn flipped_bytes_never_panic_and_errors_name_offsets_inside_the_file() {
    let (_, w) = small();
    let len = w.bytes.len() as u64;
    let mut flagged = 0;
    for at in 0..w.bytes.len() {
        for x in [0xff, 0x01, 0x80] {
            let mut b = w.bytes.clone();
            b[at] ^= x;
            let errors = read_all(&b);
            for e in &errors {
                assert!(e.offset() <= len, "flip {x:#x} at {at}: {e}");
            }
            flagged += !errors.is_empty() as usize;
        }
    }
    // Headers, sizes, magic, the index: many flips are caught (payload bytes are not).
    assert!(flagged > 100, "{flagged}");
}

#[test]
fn lengths_that_claim_more_than_the_file_are_refused_before_allocating() {
    let (_, w) = small();
    let p = PerfData::parse(&w.bytes).unwrap();
    let aux_at = p
        .records()
        .map(|i| i.unwrap())
        .find(|i| matches!(i.record, Record::Auxtrace(_)))
        .unwrap()
        .offset as usize;
    // AUXTRACE data of 1 TiB.
    let mut b = w.bytes.clone();
    b[aux_at + 8..aux_at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let p = PerfData::parse(&b).unwrap();
    let e = p.records().find_map(|r| r.err()).unwrap();
    assert_eq!(e.offset(), aux_at as u64);
    assert!(e.to_string().contains("AUXTRACE record's data needs 1099511627776 bytes"), "{e}");
    // An attr's ids section of 2^60 bytes.
    let mut b = w.bytes.clone();
    let ids_size_at = 104 + 128 + 8;
    b[ids_size_at..ids_size_at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let e = PerfData::parse(&b).unwrap_err();
    assert_eq!(e.offset(), 104 + 128);
    // A record size below its header ends the walk there.
    let mut b = w.bytes.clone();
    b[aux_at + 6] = 4;
    b[aux_at + 7] = 0;
    let p = PerfData::parse(&b).unwrap();
    let e = p.records().find_map(|r| r.err()).unwrap();
    assert_eq!(e.offset(), aux_at as u64 + 6);
    assert_eq!(p.records().filter(|r| r.is_err()).count(), 1);
}
