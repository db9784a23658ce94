//! Write a perf.data of the `jumptable` sample's binary (or another static ELF): two
//! threads on two CPUs, each CPU's AUX data at least MIB MiB of Intel PT (a PSB+, an
//! enable, three branches and a disable, again and again). For benchmarks of perf.data
//! readers and for trying `perf script` by hand.
//!
//! cargo run --release -p tracemill-datasets --example perf_data_file -- OUT [MIB] [ELF]

use tracemill_datasets::perf_data::{intel_pt_two_threads, CpuStream, PtRecording};
use tracemill_decode::pt::encode::encode;
use tracemill_decode::pt::packet::{IpCompression, IpPayload, Packet, Tnt};

fn unit(tsc: u64, ip: u64) -> Vec<u8> {
    let mut v = Vec::new();
    for p in [
        Packet::Psb,
        Packet::Tsc(tsc),
        Packet::PsbEnd,
        Packet::TipPge(IpPayload {
            compression: IpCompression::Sext48,
            bits: ip,
        }),
        Packet::Tnt8(Tnt {
            bits: 0b101,
            len: 3,
        }),
        Packet::TipPgd(IpPayload {
            compression: IpCompression::Suppressed,
            bits: 0,
        }),
    ] {
        encode(&p, &mut v).expect("encodable");
    }
    v
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = args
        .first()
        .ok_or("usage: perf_data_file OUT [MIB] [ELF]")?;
    let mib: usize = args
        .get(1)
        .map_or(Ok(1), |s| s.parse())
        .map_err(|e| format!("MIB: {e}"))?;
    let elf = args.get(2).map_or_else(
        || {
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/samples/jumptable/images/jumptable"
            )
            .into()
        },
        std::path::PathBuf::from,
    );
    let mut r = PtRecording::for_elf(&elf, 4242, Vec::new())?;
    for (cpu, tid) in [(0u32, 4242u32), (1, 4243)] {
        let switch_in = r.start_time + 20_000 + cpu as u64 * 20_000;
        let tsc = r
            .clock
            .perf_time_to_tsc(switch_in + 2_000)
            .ok_or("no clock")?;
        let mut pt = Vec::with_capacity((mib << 20) + 64);
        while pt.len() < mib << 20 {
            pt.extend(unit(tsc, r.addr));
        }
        r.cpus.push(CpuStream {
            cpu,
            tid,
            pt,
            switch_in,
            switch_out: switch_in + 10_000,
        });
    }
    let w = intel_pt_two_threads(&r).map_err(|e| e.to_string())?;
    std::fs::write(out, &w.bytes).map_err(|e| format!("{out}: {e}"))?;
    eprintln!(
        "{out}: {} bytes, {} records",
        w.bytes.len(),
        w.records().len()
    );
    Ok(())
}
