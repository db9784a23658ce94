use tracemill_decode::rows::*;
use tracemill_schemas::*;
use tracemill_sinks::*;
fn main() {
    let out = std::path::Path::new("/tmp/tm_sample");
    std::fs::create_dir_all(out).unwrap();
    let meta = FileMeta { source: "/data/t.rtit".into(), source_size: 42, rtit_ctl: 0x2e0d, extra: vec![("host".into(), "n1".into())] };
    for format in [Format::Parquet, Format::ArrowIpc] {
        let opts = WriterOptions { format, max_row_group_rows: 100_000, ..Default::default() };
        let mut w = TableWriter::create_in(out, "branches", &meta, &opts).unwrap();
        let mut off = 0u64;
        for chunk in 0..5u64 {
            let mut c = BranchColumns::default();
            for i in 0..60_000u64 {
                off += 1 + i % 3;
                c.push(&BranchRow { ip: 0xffff_8000_0040_1000 + (i % 97) * 16, target: (i % 50 != 0).then_some(0x401000 + i), kind: BranchKind::ALL[(i % 8) as usize], taken: i % 3 != 0, compressed: false, insns: (i % 13) as u32 + 1, tsc: (chunk > 0).then_some(1_000_000 + off * 3), cycles: None, cr3: Some(0x1000), offset: off });
            }
            w.write_branches(c).unwrap();
        }
        println!("{:?}", w.finish().unwrap());
        let mut w = TableWriter::create_in(out, "coverage", &meta, &opts).unwrap();
        let row = |img: Option<&str>, s: u64| CoverageRow { image: img.map(Into::into), image_offset: img.map(|_| s), start: s, end: s + 8, insns: 3, count: 10 };
        w.write_coverage(&[row(Some("a.out"), 1), row(None, 2)]).unwrap();
        w.write_coverage(&[row(Some("libc.so.6"), 3), row(Some("a.out"), 4)]).unwrap();
        println!("{:?}", w.finish().unwrap());
        let mut w = TableWriter::create_in(out, "events", &meta, &opts).unwrap();
        w.write_events(&[EventRow { seq: 0, offset: 0, kind: EventKind::Psb, ip: None, tsc: None, detail: "".into() }, EventRow { seq: 5, offset: 16, kind: EventKind::Overflow, ip: Some(0x401000), tsc: Some(9), detail: "lost".into() }]).unwrap();
        println!("{:?}", w.finish().unwrap());
    }
}
