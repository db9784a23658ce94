//! Whole-writer tests: every table through Parquet and Arrow IPC and back, the Parquet
//! layout (encodings, compression, bloom filter, row groups, metadata) as a reader sees
//! it, and the all-or-nothing publication.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::Path;

use ::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use ::parquet::basic::{BoundaryOrder, Compression, Encoding};
use ::parquet::file::metadata::ParquetMetaData;
use ::parquet::file::page_index::offset_index::OffsetIndexMetaData;
use ::parquet::file::properties::ReaderProperties;
use ::parquet::file::reader::{FileReader, SerializedFileReader};
use ::parquet::file::serialized_reader::ReadOptionsBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use arrow_select::concat::concat_batches;
use tracemill_decode::rows::{
    BranchColumns, BranchRow, CoverageRow, EdgeRow, EventRow, TimingColumns, TimingRow,
};
use tracemill_schemas::{arrow as schema, meta, BranchKind, EventKind, TimingKind};

use crate::{Codec, Error, FileMeta, Format, TableWriter, WriterOptions, Written};

// ---------------------------------------------------------------- sample data

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Branch rows with every feature: null targets, timing only part of the way, cycles
/// never, CR3 from some point on; `offset` and `tsc` growing like in a real trace.
fn sample_branches(n: usize, seed: u64, start_offset: u64) -> BranchColumns {
    let mut r = Rng(seed | 1);
    let mut c = BranchColumns::default();
    let mut offset = start_offset;
    for i in 0..n {
        offset += r.below(3);
        let kind = BranchKind::ALL[r.below(8) as usize];
        c.push(&BranchRow {
            ip: 0x40_0000 + r.below(64) * 0x10,
            target: (r.below(50) != 0).then(|| 0x40_0000 + r.below(4096)),
            kind,
            taken: kind != BranchKind::Cond || r.below(2) == 0,
            compressed: kind == BranchKind::Ret && r.below(2) == 0,
            insns: 1 + r.below(30) as u32,
            tsc: (i > n / 4).then_some(1_000_000 + offset * 3),
            cycles: None,
            cr3: (i > 10).then_some(0x7f00_0000),
            offset,
        });
    }
    c
}

fn sample_events() -> Vec<EventRow> {
    EventKind::ALL
        .iter()
        .enumerate()
        .map(|(i, &kind)| EventRow {
            seq: i as u64 * 3,
            offset: i as u64 * 100,
            kind,
            ip: (i % 2 == 0).then_some(0x40_1000 + i as u64),
            tsc: (i % 3 == 0).then_some(5000 + i as u64),
            detail: format!("detail {i}"),
        })
        .collect()
}

fn sample_timing(n: usize) -> TimingColumns {
    let mut t = TimingColumns::default();
    for i in 0..n as u64 {
        t.push(&TimingRow {
            offset: i * 5,
            kind: TimingKind::ALL[(i % 4) as usize],
            raw: i & 0xff,
            value: i << 8,
            tsc: (i > 3).then_some(10_000 + i * 64),
            cycles: Some(i * 7),
            core_bus_ratio: (i % 4 == 1).then_some(28),
        });
    }
    t
}

fn sample_coverage(images: &[Option<&str>]) -> Vec<CoverageRow> {
    images
        .iter()
        .enumerate()
        .map(|(i, img)| CoverageRow {
            image: img.map(str::to_string),
            image_offset: img.map(|_| 0x100 * i as u64),
            start: 0x40_0000 + 0x100 * i as u64,
            end: 0x40_0000 + 0x100 * i as u64 + 0x20,
            insns: 3 + i as u32,
            count: 1 + i as u64 * 1000,
        })
        .collect()
}

fn sample_edges() -> Vec<EdgeRow> {
    BranchKind::ALL
        .iter()
        .enumerate()
        .map(|(i, &kind)| EdgeRow {
            src: 0x1000 + i as u64,
            dst: 0x2000 + i as u64,
            kind,
            count: u64::MAX - i as u64, // the top bit must survive as unsigned
        })
        .collect()
}

fn file_meta() -> FileMeta {
    FileMeta {
        source: "/data/bundle-7/trace.rtit".into(),
        source_size: 123_456,
        rtit_ctl: 0x2e0d,
        extra: vec![("host".into(), "node-3".into())],
    }
}

// ---------------------------------------------------------------- reading back

fn read_parquet(path: &Path) -> (SchemaRef, RecordBatch) {
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap();
    let schema = builder.schema().clone();
    let batches: Vec<_> = builder.build().unwrap().map(Result::unwrap).collect();
    let all = concat_batches(&schema, &batches).unwrap();
    (schema, all)
}

fn read_ipc(path: &Path) -> (SchemaRef, RecordBatch) {
    let reader = arrow_ipc::reader::FileReader::try_new(File::open(path).unwrap(), None).unwrap();
    let schema = reader.schema();
    let batches: Vec<_> = reader.map(Result::unwrap).collect();
    let all = concat_batches(&schema, &batches).unwrap();
    (schema, all)
}

fn parquet_meta(path: &Path) -> ParquetMetaData {
    let opts = ReadOptionsBuilder::new().with_page_index().build();
    let r = SerializedFileReader::new_with_options(File::open(path).unwrap(), opts).unwrap();
    r.metadata().clone()
}

fn u64s(b: &RecordBatch, name: &str) -> Vec<Option<u64>> {
    b.column_by_name(name)
        .unwrap()
        .as_primitive::<UInt64Type>()
        .iter()
        .collect()
}

fn u64_at(b: &RecordBatch, name: &str, i: usize) -> u64 {
    b.column_by_name(name)
        .unwrap()
        .as_primitive::<UInt64Type>()
        .value(i)
}

/// Strings of an enum or string column, whatever dictionary the reader rebuilt.
fn strings(b: &RecordBatch, name: &str) -> Vec<Option<String>> {
    let c = crate::convert::strings(b.column_by_name(name).unwrap().as_ref()).unwrap();
    c.iter().map(|s| s.map(str::to_string)).collect()
}

fn bools(b: &RecordBatch, name: &str) -> Vec<bool> {
    b.column_by_name(name)
        .unwrap()
        .as_boolean()
        .iter()
        .map(Option::unwrap)
        .collect()
}

fn branch_rows(b: &RecordBatch) -> Vec<BranchRow> {
    let target = u64s(b, "target");
    let kind = strings(b, "kind");
    let taken = bools(b, "taken");
    let compressed = bools(b, "compressed");
    let insns = b
        .column_by_name("insns")
        .unwrap()
        .as_primitive::<UInt32Type>();
    let (tsc, cycles, cr3) = (u64s(b, "tsc"), u64s(b, "cycles"), u64s(b, "cr3"));
    (0..b.num_rows())
        .map(|i| BranchRow {
            ip: u64_at(b, "ip", i),
            target: target[i],
            kind: BranchKind::from_name(kind[i].as_deref().unwrap()).unwrap(),
            taken: taken[i],
            compressed: compressed[i],
            insns: insns.value(i),
            tsc: tsc[i],
            cycles: cycles[i],
            cr3: cr3[i],
            offset: u64_at(b, "offset", i),
        })
        .collect()
}

fn event_rows(b: &RecordBatch) -> Vec<EventRow> {
    let (kind, detail) = (strings(b, "kind"), strings(b, "detail"));
    let (ip, tsc) = (u64s(b, "ip"), u64s(b, "tsc"));
    (0..b.num_rows())
        .map(|i| EventRow {
            seq: u64_at(b, "seq", i),
            offset: u64_at(b, "offset", i),
            kind: EventKind::from_name(kind[i].as_deref().unwrap()).unwrap(),
            ip: ip[i],
            tsc: tsc[i],
            detail: detail[i].clone().unwrap(),
        })
        .collect()
}

fn timing_rows(b: &RecordBatch) -> Vec<TimingRow> {
    let kind = strings(b, "kind");
    let (tsc, cycles) = (u64s(b, "tsc"), u64s(b, "cycles"));
    let ratio: Vec<_> = b
        .column_by_name("core_bus_ratio")
        .unwrap()
        .as_primitive::<UInt8Type>()
        .iter()
        .collect();
    (0..b.num_rows())
        .map(|i| TimingRow {
            offset: u64_at(b, "offset", i),
            kind: TimingKind::from_name(kind[i].as_deref().unwrap()).unwrap(),
            raw: u64_at(b, "raw", i),
            value: u64_at(b, "value", i),
            tsc: tsc[i],
            cycles: cycles[i],
            core_bus_ratio: ratio[i],
        })
        .collect()
}

fn coverage_rows(b: &RecordBatch) -> Vec<CoverageRow> {
    let image = strings(b, "image");
    let image_offset = u64s(b, "image_offset");
    let insns = b
        .column_by_name("insns")
        .unwrap()
        .as_primitive::<UInt32Type>();
    (0..b.num_rows())
        .map(|i| CoverageRow {
            image: image[i].clone(),
            image_offset: image_offset[i],
            start: u64_at(b, "start", i),
            end: u64_at(b, "end", i),
            insns: insns.value(i),
            count: u64_at(b, "count", i),
        })
        .collect()
}

fn edge_rows(b: &RecordBatch) -> Vec<EdgeRow> {
    let kind = strings(b, "kind");
    (0..b.num_rows())
        .map(|i| EdgeRow {
            src: u64_at(b, "src", i),
            dst: u64_at(b, "dst", i),
            kind: BranchKind::from_name(kind[i].as_deref().unwrap()).unwrap(),
            count: u64_at(b, "count", i),
        })
        .collect()
}

/// The schema read back is the table's: names, types (dictionaries included),
/// nullability and field docs; and the file metadata is all there.
fn check_schema_and_meta(table: &str, got: &SchemaRef) {
    let want = schema::by_name(table).unwrap();
    assert_eq!(got.fields(), want.fields(), "{table}");
    let md = got.metadata();
    let expect = [
        (meta::SCHEMA_VERSION, "1"),
        (meta::TRACEMILL_VERSION, env!("CARGO_PKG_VERSION")),
        (meta::SOURCE, "/data/bundle-7/trace.rtit"),
        (meta::SOURCE_SIZE, "123456"),
        (meta::RTIT_CTL, "0x2e0d"),
        (meta::TABLE, table),
        ("host", "node-3"),
    ];
    for (k, v) in expect {
        assert_eq!(md.get(k).map(String::as_str), Some(v), "{table}: {k}");
    }
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn options(format: Format) -> WriterOptions {
    WriterOptions {
        format,
        ..WriterOptions::default()
    }
}

// ---------------------------------------------------------------- round trips

/// Writes all five tables in `format` (branches in several batches, one of them empty,
/// coverage in two batches with different images) and checks every value read back.
fn round_trip_all_tables(format: Format) {
    let dir = tempfile::tempdir().unwrap();
    let read = |p: &Path| match format {
        Format::Parquet => read_parquet(p),
        Format::ArrowIpc => read_ipc(p),
    };
    let opts = options(format);

    // branches
    let parts = [
        sample_branches(3000, 1, 0),
        BranchColumns::default(),
        sample_branches(1, 2, 20_000),
        sample_branches(5000, 3, 30_000),
    ];
    let expected: Vec<BranchRow> = parts.iter().flat_map(|p| p.rows()).collect();
    let mut w = TableWriter::create_in(dir.path(), "branches", &file_meta(), &opts).unwrap();
    for p in parts {
        w.write_branches(p).unwrap();
    }
    let written = w.finish().unwrap();
    assert_eq!(written.rows, expected.len() as u64);
    assert_eq!(written.path, dir.path().join(format.file_name("branches")));
    assert_eq!(written.bytes, fs::metadata(&written.path).unwrap().len());
    let (s, b) = read(&written.path);
    check_schema_and_meta("branches", &s);
    assert_eq!(branch_rows(&b), expected);
    let seq = u64s(&b, "seq");
    assert!(
        seq.iter().enumerate().all(|(i, s)| *s == Some(i as u64)),
        "seq 0..n"
    );
    assert_eq!(
        b.column_by_name("cycles").unwrap().null_count(),
        b.num_rows()
    );
    assert!(b.column_by_name("target").unwrap().null_count() > 0);

    // events
    let ev = sample_events();
    let mut w = TableWriter::create_in(dir.path(), "events", &file_meta(), &opts).unwrap();
    w.write_events(&ev[..4]).unwrap();
    w.write_events(&ev[4..]).unwrap();
    let (s, b) = read(&w.finish().unwrap().path);
    check_schema_and_meta("events", &s);
    assert_eq!(event_rows(&b), ev);

    // timing
    let t = sample_timing(100);
    let expected: Vec<_> = (0..t.len()).map(|i| t.row(i)).collect();
    let mut w = TableWriter::create_in(dir.path(), "timing", &file_meta(), &opts).unwrap();
    w.write_timing(t).unwrap();
    let (s, b) = read(&w.finish().unwrap().path);
    check_schema_and_meta("timing", &s);
    assert_eq!(timing_rows(&b), expected);

    // coverage: the second batch brings a new image, the first has a null one
    let c1 = sample_coverage(&[Some("a.out"), None, Some("libc.so.6"), Some("a.out")]);
    let c2 = sample_coverage(&[Some("ld.so"), Some("a.out")]);
    let mut w = TableWriter::create_in(dir.path(), "coverage", &file_meta(), &opts).unwrap();
    w.write_coverage(&c1).unwrap();
    w.write_coverage(&c2).unwrap();
    let (s, b) = read(&w.finish().unwrap().path);
    check_schema_and_meta("coverage", &s);
    assert_eq!(coverage_rows(&b), [c1, c2].concat());

    // edges
    let e = sample_edges();
    let mut w = TableWriter::create_in(dir.path(), "edges", &file_meta(), &opts).unwrap();
    w.write_edges(&e).unwrap();
    let (s, b) = read(&w.finish().unwrap().path);
    check_schema_and_meta("edges", &s);
    assert_eq!(edge_rows(&b), e);

    // Nothing but the five tables: no temporaries left behind.
    let mut want: Vec<_> = tracemill_schemas::TABLES
        .iter()
        .map(|t| format.file_name(t))
        .collect();
    want.sort();
    assert_eq!(dir_names(dir.path()), want);
}

#[test]
fn every_table_round_trips_through_parquet() {
    round_trip_all_tables(Format::Parquet);
}

#[test]
fn every_table_round_trips_through_arrow_ipc() {
    round_trip_all_tables(Format::ArrowIpc);
}

#[test]
fn parquet_footer_carries_the_key_value_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let mut meta = file_meta();
    meta.extra
        .push((meta::TRACEMILL_VERSION.into(), "9.9.9-dev".into()));
    let mut w =
        TableWriter::create_in(dir.path(), "edges", &meta, &WriterOptions::default()).unwrap();
    w.write_edges(&sample_edges()).unwrap();
    let path = w.finish().unwrap().path;
    let md = parquet_meta(&path);
    let kv: HashMap<_, _> = md
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(kv[meta::TABLE], "edges");
    assert_eq!(kv[meta::RTIT_CTL], "0x2e0d");
    assert_eq!(kv[meta::SCHEMA_VERSION], "1");
    assert_eq!(kv[meta::TRACEMILL_VERSION], "9.9.9-dev", "extra overrides");
    assert_eq!(kv["host"], "node-3");
    assert!(kv.contains_key("ARROW:schema"), "arrow schema embedded");
    // One entry per key, even with the override.
    assert_eq!(
        md.file_metadata().key_value_metadata().unwrap().len(),
        kv.len()
    );
}

// ---------------------------------------------------------------- parquet layout

#[test]
fn parquet_layout_is_what_readers_need() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = TableWriter::create_in(
        dir.path(),
        "branches",
        &file_meta(),
        &WriterOptions::default(),
    )
    .unwrap();
    let rows = 2 * crate::parquet::DEFAULT_DATA_PAGE_ROWS + 10_000;
    let cols = sample_branches(rows, 9, 0);
    let some_ip = cols.ip[123];
    w.write_branches(cols).unwrap();
    let path = w.finish().unwrap().path;

    let md = parquet_meta(&path);
    assert_eq!(md.num_row_groups(), 1);
    let rg = md.row_group(0);
    let col = |name: &str| {
        rg.columns()
            .iter()
            .find(|c| c.column_path().string() == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    for c in rg.columns() {
        let name = c.column_path().string();
        assert!(matches!(c.compression(), Compression::ZSTD(_)), "{name}");
        assert!(c.offset_index_offset().is_some(), "{name}: offset index");
        if crate::parquet::text_columns("branches").contains(&name.as_str()) {
            // Strings: no statistics (costly to keep, they prune nothing).
            assert!(c.statistics().is_none(), "{name}: no statistics");
            continue;
        }
        assert!(c.statistics().is_some(), "{name}: chunk statistics");
        assert!(c.column_index_offset().is_some(), "{name}: page statistics");
    }
    for name in ["seq", "offset", "tsc", "cycles"] {
        let enc: Vec<_> = col(name).encodings().collect();
        assert!(
            enc.contains(&Encoding::DELTA_BINARY_PACKED),
            "{name}: {enc:?}"
        );
        assert!(!enc.contains(&Encoding::RLE_DICTIONARY), "{name}: {enc:?}");
    }
    for name in ["kind", "ip", "cr3"] {
        let enc: Vec<_> = col(name).encodings().collect();
        assert!(enc.contains(&Encoding::RLE_DICTIONARY), "{name}: {enc:?}");
    }
    assert!(
        col("ip").bloom_filter_offset().is_some(),
        "bloom filter on ip"
    );
    assert!(col("target").bloom_filter_offset().is_none());

    // seq statistics let a reader skip by range.
    let seq_stats = col("seq").statistics().unwrap();
    assert_eq!(seq_stats.min_bytes_opt(), Some(&0u64.to_le_bytes()[..]));
    assert_eq!(
        seq_stats.max_bytes_opt(),
        Some(&(rows as u64 - 1).to_le_bytes()[..])
    );
    // Page index present, pages of DEFAULT_DATA_PAGE_ROWS rows (`seq`, column 0, packs
    // into a few bits a row: only the row limit splits it).
    let pages = md.page_index_for_row_group(0);
    let first_rows: Vec<i64> = (pages.offset_index(0).unwrap().page_locations().iter())
        .map(|l| l.first_row_index)
        .collect();
    let page = crate::parquet::DEFAULT_DATA_PAGE_ROWS as i64;
    assert_eq!(first_rows, [0, page, 2 * page]);

    // The bloom filter answers for a present ip and rejects an absent one.
    let props = ReaderProperties::builder()
        .set_read_bloom_filter(true)
        .build();
    let opts = ReadOptionsBuilder::new()
        .with_reader_properties(props)
        .build();
    let r = SerializedFileReader::new_with_options(File::open(&path).unwrap(), opts).unwrap();
    let rgr = r.get_row_group(0).unwrap();
    let ip_idx = rg
        .columns()
        .iter()
        .position(|c| c.column_path().string() == "ip")
        .unwrap();
    let bloom = rgr.get_column_bloom_filter(ip_idx).expect("bloom filter");
    assert!(bloom.check(&some_ip));
    let absent = (0..100u64)
        .filter(|i| bloom.check(&(0xdead_0000_0000 + i)))
        .count();
    assert!(absent < 10, "{absent} false positives out of 100");
}

#[test]
fn row_groups_follow_max_rows() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WriterOptions {
        max_row_group_rows: 1000,
        ..WriterOptions::default()
    };
    let mut w = TableWriter::create_in(dir.path(), "branches", &file_meta(), &opts).unwrap();
    // Batches that straddle row group boundaries.
    let parts = [sample_branches(700, 1, 0), sample_branches(1800, 2, 10_000)];
    let expected: Vec<_> = parts.iter().flat_map(|p| p.rows()).collect();
    for p in parts {
        w.write_branches(p).unwrap();
    }
    let path = w.finish().unwrap().path;
    let md = parquet_meta(&path);
    let rows: Vec<_> = md.row_groups().iter().map(|rg| rg.num_rows()).collect();
    assert_eq!(rows, [1000, 1000, 500]);
    // Every row group has its own bloom filter and seq range.
    for (i, rg) in md.row_groups().iter().enumerate() {
        let ip = rg
            .columns()
            .iter()
            .find(|c| c.column_path().string() == "ip")
            .unwrap();
        assert!(ip.bloom_filter_offset().is_some());
        let seq = rg.column(0).statistics().unwrap();
        assert_eq!(
            seq.min_bytes_opt(),
            Some(&(i as u64 * 1000).to_le_bytes()[..])
        );
    }
    assert_eq!(branch_rows(&read_parquet(&path).1), expected);
}

// ---------------------------------------------------------------- publication

#[test]
fn dropping_a_writer_publishes_nothing_and_keeps_the_old_file() {
    for format in [Format::Parquet, Format::ArrowIpc] {
        let dir = tempfile::tempdir().unwrap();
        let opts = options(format);
        let mut w = TableWriter::create_in(dir.path(), "branches", &file_meta(), &opts).unwrap();
        w.write_branches(sample_branches(100, 1, 0)).unwrap();
        assert_eq!(dir_names(dir.path()).len(), 1, "only the temporary");
        assert!(dir_names(dir.path())[0].starts_with(".branches."));
        drop(w);
        assert!(dir_names(dir.path()).is_empty(), "{format:?}");

        // An earlier run's file survives an abandoned writer, and is replaced by a
        // finished one.
        let name = format.file_name("branches");
        let old = dir.path().join(&name);
        fs::write(&old, b"previous run").unwrap();
        let mut w = TableWriter::create_in(dir.path(), "branches", &file_meta(), &opts).unwrap();
        w.write_branches(sample_branches(100, 1, 0)).unwrap();
        drop(w);
        assert_eq!(fs::read(&old).unwrap(), b"previous run");
        assert_eq!(dir_names(dir.path()), std::slice::from_ref(&name));

        let mut w = TableWriter::create_in(dir.path(), "branches", &file_meta(), &opts).unwrap();
        w.write_branches(sample_branches(100, 1, 0)).unwrap();
        assert_eq!(
            fs::read(&old).unwrap(),
            b"previous run",
            "untouched until finish"
        );
        w.finish().unwrap();
        assert_ne!(fs::read(&old).unwrap(), b"previous run");
        assert_eq!(dir_names(dir.path()), [name]);
    }
}

#[test]
fn a_panic_while_writing_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let r = std::panic::catch_unwind(move || {
        let mut w =
            TableWriter::create_in(&d, "timing", &file_meta(), &WriterOptions::default()).unwrap();
        w.write_timing(sample_timing(10)).unwrap();
        panic!("decoder bug");
    });
    assert!(r.is_err());
    assert!(dir_names(dir.path()).is_empty());
}

#[test]
fn empty_tables_are_valid_files() {
    let dir = tempfile::tempdir().unwrap();
    for format in [Format::Parquet, Format::ArrowIpc] {
        let w =
            TableWriter::create_in(dir.path(), "events", &file_meta(), &options(format)).unwrap();
        let written = w.finish().unwrap();
        assert_eq!(written.rows, 0);
        let (s, b) = match format {
            Format::Parquet => read_parquet(&written.path),
            Format::ArrowIpc => read_ipc(&written.path),
        };
        check_schema_and_meta("events", &s);
        assert_eq!(b.num_rows(), 0);
    }
}

// ---------------------------------------------------------------- misuse

#[test]
fn misuse_is_reported_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let e = TableWriter::create_in(
        dir.path(),
        "brnaches",
        &file_meta(),
        &WriterOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::UnknownTable(_)), "{e}");

    // Events rows into the branches file.
    let mut w = TableWriter::create_in(
        dir.path(),
        "branches",
        &file_meta(),
        &WriterOptions::default(),
    )
    .unwrap();
    let e = w.write_events(&sample_events()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::SchemaMismatch { .. }), "{msg}");
    assert!(msg.contains("branches.parquet"), "{msg}");
    // Broken columns.
    let mut cols = sample_branches(10, 1, 0);
    cols.insns.pop();
    let msg = w.write_branches(cols).unwrap_err().to_string();
    assert!(
        msg.ends_with("branches.insns: 9 values, expected 10"),
        "{msg}"
    );
    // Neither error spoiled the file.
    w.write_branches(sample_branches(10, 1, 0)).unwrap();
    assert_eq!(w.finish().unwrap().rows, 10);

    // A bad option fails before any file exists.
    let bad = WriterOptions {
        zstd_level: 99,
        ..WriterOptions::default()
    };
    let e = TableWriter::create_in(dir.path(), "timing", &file_meta(), &bad).unwrap_err();
    assert!(matches!(e, Error::Parquet { .. }), "{e}");
    assert_eq!(dir_names(dir.path()), ["branches.parquet"]);
}

/// `WriterOptions::codec`: every column chunk of every table is compressed with the codec
/// asked for (the `kind` columns too, which the dictionary chunk encoder writes under ZSTD
/// and none, and arrow-rs under LZ4 and Snappy), and the rows read back are the same.
#[test]
fn every_codec_compresses_every_column_and_reads_back_the_same_rows() {
    let rows = sample_branches(5000, 7, 0);
    let mut got = Vec::new();
    for (codec, expect) in [
        (Codec::Zstd, "ZSTD"),
        (Codec::Lz4, "LZ4_RAW"),
        (Codec::Snappy, "SNAPPY"),
        (Codec::None, "UNCOMPRESSED"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let opts = WriterOptions {
            codec,
            ..WriterOptions::default()
        };
        let mut w = TableWriter::create_in(dir.path(), "branches", &file_meta(), &opts).unwrap();
        w.write_branches(rows.clone()).unwrap();
        let path = w.finish().unwrap().path;
        for rg in parquet_meta(&path).row_groups() {
            for c in rg.columns() {
                let name = c.column_path().string();
                let codec_name = match c.compression() {
                    Compression::ZSTD(_) => "ZSTD".to_string(),
                    other => other.to_string(),
                };
                assert_eq!(codec_name, expect, "{codec:?}: column {name}");
            }
        }
        got.push((
            codec,
            branch_rows(&read_parquet(&path).1),
            fs::metadata(&path).unwrap().len(),
        ));
    }
    for (codec, r, _) in &got[1..] {
        assert_eq!(r, &got[0].1, "{codec:?}: rows differ from ZSTD's");
    }
    // Compression is not a no-op: every codec's file is smaller than the uncompressed one.
    let none = got[3].2;
    for (codec, _, bytes) in &got[..3] {
        assert!(
            *bytes < none,
            "{codec:?}: {bytes} bytes, uncompressed {none}"
        );
    }
}

#[test]
fn a_file_holds_at_most_127_image_names() {
    // More would make the Int8-keyed `image` column unreadable for parquet-rs (and past
    // 128 for pyarrow and polars: "Integer value 128 not in range").
    for format in [Format::Parquet, Format::ArrowIpc] {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..200).map(|i| format!("lib{i}.so")).collect();
        let rows: Vec<Vec<CoverageRow>> = [0..100, 100..200, 100..127]
            .into_iter()
            .map(|r| {
                sample_coverage(
                    &names[r]
                        .iter()
                        .map(|n| Some(n.as_str()))
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let mut w =
            TableWriter::create_in(dir.path(), "coverage", &file_meta(), &options(format)).unwrap();
        w.write_coverage(&rows[0]).unwrap();
        let e = w.write_coverage(&rows[1]).unwrap_err();
        assert!(e.to_string().contains("200 distinct image names"), "{e}");
        // The rejected batch left no trace; one that fits is still accepted.
        w.write_coverage(&rows[2]).unwrap();
        let path = w.finish().unwrap().path;
        let (_, b) = match format {
            Format::Parquet => read_parquet(&path),
            Format::ArrowIpc => read_ipc(&path),
        };
        assert_eq!(
            coverage_rows(&b),
            [rows[0].clone(), rows[2].clone()].concat()
        );
    }
}

#[test]
fn constant_columns_reach_every_row_by_every_write_path() {
    let dir = tempfile::tempdir().unwrap();
    let opts = |format| WriterOptions {
        format,
        max_row_group_rows: 300,
        constant_columns: vec![
            ("bundle".into(), "b-42".into()),
            ("night".into(), "n".into()),
        ],
        ..WriterOptions::default()
    };
    // Batch by batch (write), row groups encoded elsewhere (RowGroupEncoder), and Arrow
    // IPC coverage (held until finish).
    let cols = sample_branches(700, 3, 0);
    let mut w =
        TableWriter::create_in(dir.path(), "branches", &file_meta(), &opts(Format::Parquet))
            .unwrap();
    w.write_branches(cols.clone()).unwrap();
    assert_eq!(w.finish().unwrap().rows, 700);
    let (schema, b) = read_parquet(&dir.path().join("branches.parquet"));
    let n = schema.fields().len();
    assert_eq!(schema.field(n - 2).name(), "bundle");
    assert_eq!(schema.field(n - 1).name(), "night");
    assert!(strings(&b, "bundle")
        .iter()
        .all(|s| s.as_deref() == Some("b-42")));
    assert_eq!(strings(&b, "night").len(), 700);
    // No statistics on them: min and max cost a comparison per row, and say only the value.
    let md = ParquetRecordBatchReaderBuilder::try_new(
        File::open(dir.path().join("branches.parquet")).unwrap(),
    )
    .unwrap()
    .metadata()
    .clone();
    for c in md.row_group(0).columns() {
        let name = c.column_path().string();
        if name == "bundle" || name == "night" {
            assert!(c.statistics().is_none(), "{name}: no statistics");
        }
    }
    // The table's own columns are unchanged.
    assert_eq!(branch_rows(&b), cols.rows().collect::<Vec<_>>());

    let sub = dir.path().join("enc");
    fs::create_dir(&sub).unwrap();
    let mut w =
        TableWriter::create_in(&sub, "timing", &file_meta(), &opts(Format::Parquet)).unwrap();
    let enc = w.row_group_encoder().unwrap();
    let batch = crate::convert::timing(sample_timing(50)).unwrap();
    w.append_encoded(enc.encode(0, &[batch.clone(), batch]).unwrap())
        .unwrap();
    w.finish().unwrap();
    let (_, b) = read_parquet(&sub.join("timing.parquet"));
    assert_eq!(b.num_rows(), 100);
    assert!(strings(&b, "bundle")
        .iter()
        .all(|s| s.as_deref() == Some("b-42")));

    let mut w = TableWriter::create_in(
        dir.path(),
        "coverage",
        &file_meta(),
        &opts(Format::ArrowIpc),
    )
    .unwrap();
    w.write_coverage(&sample_coverage(&[Some("a"), None]))
        .unwrap();
    w.finish().unwrap();
    let (_, b) = read_ipc(&dir.path().join("coverage.arrow"));
    assert!(b.num_rows() > 0);
    assert!(strings(&b, "night")
        .iter()
        .all(|s| s.as_deref() == Some("n")));

    // A constant column may not hide one of the table's.
    let clash = WriterOptions {
        constant_columns: vec![("seq".into(), "x".into())],
        ..WriterOptions::default()
    };
    let e = TableWriter::create_in(&sub, "branches", &file_meta(), &clash).unwrap_err();
    assert!(e.to_string().contains("\"seq\""), "{e}");
    assert!(!sub.join("branches.parquet").exists());
}

#[test]
fn row_groups_encoded_elsewhere_read_back_as_written_batch_by_batch() {
    // The RowGroupEncoder writes string dictionary columns (`kind`, constant columns)
    // with its own chunk encoder (chunks/), everything else with arrow-rs.
    // Whatever wrote them, a reader must see the same rows, the same layout, and no
    // larger file.
    let dir = tempfile::tempdir().unwrap();
    let opts = WriterOptions {
        max_row_group_rows: 30_000,
        data_page_rows: 20_000,
        constant_columns: vec![("bundle".into(), "0123456789abcdef".into())],
        ..WriterOptions::default()
    };
    for table in ["branches", "timing"] {
        let batches: Vec<RecordBatch> = (0..3u64)
            .map(|i| match table {
                "branches" => {
                    crate::convert::branches(sample_branches(25_000, i, i * 1_000_000), i * 25_000)
                        .unwrap()
                }
                _ => crate::convert::timing(sample_timing(25_000)).unwrap(),
            })
            .collect();
        let plain = dir.path().join(format!("{table}-write"));
        let enc = dir.path().join(format!("{table}-enc"));
        fs::create_dir_all(&plain).unwrap();
        fs::create_dir_all(&enc).unwrap();
        let mut w = TableWriter::create_in(&plain, table, &file_meta(), &opts).unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        let by_write = w.finish().unwrap();
        let mut w = TableWriter::create_in(&enc, table, &file_meta(), &opts).unwrap();
        let e = w.row_group_encoder().unwrap();
        // Row groups of 30,000 and 45,000 rows: pages of 20,000 rows and a remainder.
        w.append_encoded(e.encode(0, &batches[..1]).unwrap())
            .unwrap();
        w.append_encoded(e.encode(1, &batches[1..]).unwrap())
            .unwrap();
        let by_encoder = w.finish().unwrap();
        assert_eq!(by_encoder.rows, 75_000);

        let (schema_a, a) = read_parquet(&by_write.path);
        let (schema_b, b) = read_parquet(&by_encoder.path);
        assert_eq!(schema_a, schema_b, "{table}");
        assert_eq!(a, b, "{table}: the rows read back");
        assert!(strings(&b, "bundle")
            .iter()
            .all(|s| s.as_deref() == Some("0123456789abcdef")));

        let md = parquet_meta(&by_encoder.path);
        for (i, rg) in md.row_groups().iter().enumerate() {
            for name in ["kind", "bundle"] {
                let (ci, c) = rg
                    .columns()
                    .iter()
                    .enumerate()
                    .find(|(_, c)| c.column_path().string() == name)
                    .unwrap();
                let enc: Vec<_> = c.encodings().collect();
                assert!(enc.contains(&Encoding::RLE_DICTIONARY), "{name}: {enc:?}");
                assert!(c.dictionary_page_offset().is_some(), "{name}");
                assert!(matches!(c.compression(), Compression::ZSTD(_)), "{name}");
                assert!(c.statistics().is_none(), "{name}");
                let pages = md.page_index_for_row_group(i);
                let locations = pages.offset_index(ci).unwrap().page_locations();
                let first_rows: Vec<i64> = locations.iter().map(|l| l.first_row_index).collect();
                let want: &[i64] = if i == 0 {
                    &[0, 20_000]
                } else {
                    &[0, 20_000, 40_000]
                };
                assert_eq!(first_rows, want, "{table}.{name}, row group {i}");
            }
        }
        // Row groups differ (30k/45k against 30k/30k/15k), so sizes differ a little.
        let (sa, sb) = (by_write.bytes as f64, by_encoder.bytes as f64);
        assert!(sb <= sa * 1.01, "{table}: {sb} bytes against {sa}");
    }
}

/// `all` written as `branches` twice: whole, by arrow-rs's writer (`dir/write`), and by
/// the encoder row group by row group (`dir/enc`), each row group (`opts`'
/// `max_row_group_rows` rows) handed over in four slices cut at `cut` and `cut + 12,345`
/// (one of them empty), as the pipeline hands over pieces.
fn written_both_ways(
    dir: &Path,
    opts: &WriterOptions,
    all: &RecordBatch,
    cut: usize,
) -> (Written, Written) {
    let plain = dir.join("write");
    let enc = dir.join("enc");
    fs::create_dir_all(&plain).unwrap();
    fs::create_dir_all(&enc).unwrap();
    let mut w = TableWriter::create_in(&plain, "branches", &file_meta(), opts).unwrap();
    w.write(all).unwrap();
    let by_write = w.finish().unwrap();
    let mut w = TableWriter::create_in(&enc, "branches", &file_meta(), opts).unwrap();
    let e = w.row_group_encoder().unwrap();
    let n = opts.max_row_group_rows;
    for (i, at) in (0..all.num_rows()).step_by(n).enumerate() {
        let g = all.slice(at, n.min(all.num_rows() - at));
        let (a, b) = (cut, (cut + 12_345).min(g.num_rows()));
        let parts = [
            g.slice(0, a),
            g.slice(a, 0),
            g.slice(a, b - a),
            g.slice(b, g.num_rows() - b),
        ];
        w.append_encoded(e.encode(i, &parts).unwrap()).unwrap();
    }
    (by_write, w.finish().unwrap())
}

/// The unsigned integer columns written by the encoder's own chunks (dictionaries: `ip`,
/// `target`, `insns`, `cr3`; deltas: `seq`, `offset`, `tsc`, `cycles`) carry what
/// arrow-rs writes for them: the same chunk statistics,
/// column index (page minima, maxima, null pages and counts, boundary order), page
/// boundaries and bloom filter, and no more bytes.
#[test]
fn integer_chunks_carry_what_arrow_rs_writes() {
    let dir = tempfile::tempdir().unwrap();
    // Row groups of 30,720 rows and pages of 10,240: arrow-rs cuts pages after whole
    // write batches (1,024 rows), the encoder at exactly the limit; at multiples of 1,024
    // both cut at the same rows.
    let opts = WriterOptions {
        max_row_group_rows: 30_720,
        data_page_rows: 10_240,
        ..WriterOptions::default()
    };
    let mut cols = sample_branches(75_000, 11, 0);
    // Rows with no target or cr3: a page of nulls only (rows 40,960..51,200), and pages
    // with some. Addresses above 2^63 check that minima and maxima compare unsigned.
    for i in 38_000..52_000 {
        cols.target.valid[i] = false;
        cols.target.values[i] = 0;
        cols.cr3.valid[i] = false;
        cols.cr3.values[i] = 0;
    }
    for i in (0..75_000).step_by(997) {
        cols.ip[i] = 0xffff_ffff_8100_0000 + i as u64;
    }
    // The delta columns: a stretch going down (negative deltas), a value near 2^64, and
    // one at 2^63 - 1 between small ones (deltas of 64 bits). `cycles` is null throughout,
    // `cr3` in the last row group. `insns` above 2^31 compare unsigned as INT32.
    for i in 20_000..20_300 {
        cols.offset[i] = 5_000_000 - i as u64 * 7;
    }
    cols.offset[33_333] = u64::MAX - 5;
    cols.offset[44_444] = i64::MAX as u64;
    assert!(cols.cycles.valid.iter().all(|&v| !v));
    for i in 61_440..75_000 {
        cols.cr3.valid[i] = false;
    }
    for i in (0..75_000).step_by(1_001) {
        cols.insns[i] = 0x8000_0000 + i as u32;
    }
    let all = crate::convert::branches(cols, 0).unwrap();
    // Each row group handed over in four batches (one empty), as the pipeline hands over
    // pieces: pages cross batches, with and without nulls.
    let (by_write, by_encoder) = written_both_ways(dir.path(), &opts, &all, 7_000);
    assert_eq!(read_parquet(&by_write.path), read_parquet(&by_encoder.path));

    let (ma, mb) = (parquet_meta(&by_write.path), parquet_meta(&by_encoder.path));
    assert_eq!(ma.num_row_groups(), 3);
    assert_eq!(mb.num_row_groups(), 3);
    let blooms = |path: &Path| {
        let props = ReaderProperties::builder()
            .set_read_bloom_filter(true)
            .build();
        let opts = ReadOptionsBuilder::new()
            .with_reader_properties(props)
            .build();
        let r = SerializedFileReader::new_with_options(File::open(path).unwrap(), opts).unwrap();
        (0..3)
            .map(|g| {
                let rg = r.get_row_group(g).unwrap();
                let f = rg.get_column_bloom_filter(1).expect("a bloom filter on ip");
                let mut bytes = Vec::new();
                f.write(&mut bytes).unwrap();
                bytes
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        blooms(&by_write.path),
        blooms(&by_encoder.path),
        "ip bloom filters"
    );
    for g in 0..3 {
        for name in [
            "ip", "target", "insns", "cr3", "seq", "offset", "tsc", "cycles",
        ] {
            let find = |m: &ParquetMetaData| {
                let rg = &m.row_groups()[g];
                let i = rg
                    .columns()
                    .iter()
                    .position(|c| c.column_path().string() == name)
                    .unwrap();
                let pages = m.page_index_for_row_group(g);
                (
                    rg.column(i).clone(),
                    pages.column_index(i).cloned(),
                    pages
                        .offset_index(i)
                        .unwrap()
                        .page_locations()
                        .iter()
                        .map(|l| l.first_row_index)
                        .collect::<Vec<_>>(),
                )
            };
            let (ca, ia, ra) = find(&ma);
            let (cb, ib, rb) = find(&mb);
            let at = format!("row group {g}, {name}");
            assert_eq!(ca.statistics(), cb.statistics(), "{at}");
            assert!(cb.statistics().is_some(), "{at}");
            assert_eq!(ia, ib, "{at}: column index");
            assert!(ib.is_some(), "{at}");
            assert_eq!(ra, rb, "{at}: pages");
            assert_eq!(ca.num_values(), cb.num_values(), "{at}");
            assert_eq!(
                ca.encodings().collect::<Vec<_>>(),
                cb.encodings().collect::<Vec<_>>(),
                "{at}"
            );
            assert_eq!(ca.page_encoding_stats(), cb.page_encoding_stats(), "{at}");
            assert_eq!(
                ca.definition_level_histogram(),
                cb.definition_level_histogram(),
                "{at}"
            );
            assert_eq!(
                ca.bloom_filter_offset().is_some(),
                cb.bloom_filter_offset().is_some()
            );
            assert!(
                cb.compressed_size() <= ca.compressed_size(),
                "{at}: {} bytes against {} ({} against {} uncompressed)",
                cb.compressed_size(),
                ca.compressed_size(),
                cb.uncompressed_size(),
                ca.uncompressed_size()
            );
        }
    }
}

/// The Boolean columns written by the encoder's own chunks (`taken`, `compressed`,
/// `in_tx`) carry what arrow-rs writes for them: the same pages (values, encodings, row
/// counts, bytes once decompressed), chunk statistics, column index and offset index.
/// `taken` has an all-false page, then mixed, then all-true (ascending), then the other
/// way (descending); `compressed` is true throughout, `in_tx` false throughout (no
/// transaction). Row groups are handed over in slices starting off a byte boundary, and
/// the last row group ends in a page of one row.
#[test]
fn boolean_chunks_carry_what_arrow_rs_writes() {
    let dir = tempfile::tempdir().unwrap();
    // Pages of 10,240 rows (a multiple of arrow-rs's 1,024-row write batches, where it
    // cuts pages), row groups of three pages; the last row group has 10,241 rows.
    let opts = WriterOptions {
        max_row_group_rows: 30_720,
        data_page_rows: 10_240,
        ..WriterOptions::default()
    };
    let rows = 30_720 * 2 + 10_241;
    let mut cols = sample_branches(rows, 5, 0);
    for i in 0..10_240 {
        cols.taken[i] = false;
    }
    for i in 20_480..40_960 {
        cols.taken[i] = true;
    }
    for i in 51_200..61_440 {
        cols.taken[i] = false;
    }
    cols.compressed.iter_mut().for_each(|c| *c = true);
    assert!(cols.in_tx.is_empty(), "in_tx all false");
    let all = crate::convert::branches(cols, 0).unwrap();
    // Pieces starting at bits 0, 7,003 (empty), 7,003 and 19,348 of each row group (or its
    // end): pages cross them, and all but the first start off a byte.
    let (by_write, by_encoder) = written_both_ways(dir.path(), &opts, &all, 7_003);
    let (ra, rb) = (read_parquet(&by_write.path), read_parquet(&by_encoder.path));
    assert_eq!(ra, rb);
    assert_eq!(
        bools(&rb.1, "compressed"),
        vec![true; rows],
        "compressed: all true"
    );
    assert_eq!(bools(&rb.1, "in_tx"), vec![false; rows], "in_tx: all false");

    let (ma, mb) = (parquet_meta(&by_write.path), parquet_meta(&by_encoder.path));
    assert_eq!(ma.num_row_groups(), 3);
    assert_eq!(mb.num_row_groups(), 3);
    // Every page as a reader gets it: type, rows, encodings, decompressed bytes.
    let pages = |path: &Path, g: usize, c: usize| {
        let r = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
        let rg = r.get_row_group(g).unwrap();
        rg.get_column_page_reader(c)
            .unwrap()
            .map(|p| {
                let p = p.unwrap();
                (
                    p.page_type(),
                    p.num_values(),
                    p.encoding(),
                    p.buffer().to_vec(),
                )
            })
            .collect::<Vec<_>>()
    };
    for g in 0..3 {
        for name in ["taken", "compressed", "in_tx"] {
            let find = |m: &ParquetMetaData| {
                let rg = &m.row_groups()[g];
                let i = rg
                    .columns()
                    .iter()
                    .position(|c| c.column_path().string() == name)
                    .unwrap();
                let pages = m.page_index_for_row_group(g);
                (
                    i,
                    rg.column(i).clone(),
                    pages.column_index(i).cloned(),
                    pages.offset_index(i).cloned(),
                )
            };
            let (i, ca, ia, oa) = find(&ma);
            let (_, cb, ib, ob) = find(&mb);
            let at = format!("row group {g}, {name}");
            assert_eq!(
                pages(&by_write.path, g, i),
                pages(&by_encoder.path, g, i),
                "{at}: pages"
            );
            assert_eq!(ca.statistics(), cb.statistics(), "{at}");
            let stats = cb.statistics().expect("chunk statistics");
            assert_eq!(stats.null_count_opt(), Some(0), "{at}");
            assert_eq!(ia, ib, "{at}: column index");
            assert!(ib.is_some(), "{at}");
            let first_rows = |o: &Option<OffsetIndexMetaData>| {
                o.as_ref()
                    .unwrap()
                    .page_locations()
                    .iter()
                    .map(|l| l.first_row_index)
                    .collect::<Vec<_>>()
            };
            let want: &[i64] = if g == 2 {
                // 10,241 rows: a page of one row last.
                &[0, 10_240]
            } else {
                &[0, 10_240, 20_480]
            };
            assert_eq!(first_rows(&oa), first_rows(&ob), "{at}: pages");
            assert_eq!(first_rows(&ob), want, "{at}: pages");
            assert_eq!(ca.num_values(), cb.num_values(), "{at}");
            assert_eq!(
                ca.encodings().collect::<Vec<_>>(),
                cb.encodings().collect::<Vec<_>>(),
                "{at}"
            );
            assert_eq!(ca.page_encoding_stats(), cb.page_encoding_stats(), "{at}");
            assert_eq!(
                ca.uncompressed_size(),
                cb.uncompressed_size(),
                "{at}: uncompressed"
            );
            assert!(
                cb.compressed_size() <= ca.compressed_size(),
                "{at}: {} bytes against {}",
                cb.compressed_size(),
                ca.compressed_size(),
            );
        }
    }
    // What the statistics say, as arrow-rs writes them for booleans: one byte each.
    let rg = &mb.row_groups()[0];
    let col = |name: &str| {
        rg.columns()
            .iter()
            .find(|c| c.column_path().string() == name)
            .unwrap()
    };
    let minmax = |name: &str| {
        let s = col(name).statistics().unwrap();
        (
            s.min_bytes_opt().unwrap().to_vec(),
            s.max_bytes_opt().unwrap().to_vec(),
        )
    };
    assert_eq!(minmax("taken"), (vec![0], vec![1]));
    assert_eq!(minmax("compressed"), (vec![1], vec![1]));
    assert_eq!(minmax("in_tx"), (vec![0], vec![0]));
    let taken = rg
        .columns()
        .iter()
        .position(|c| c.column_path().string() == "taken")
        .unwrap();
    assert_eq!(
        mb.page_index_for_row_group(0)
            .column_index(taken)
            .unwrap()
            .get_boundary_order(),
        Some(BoundaryOrder::ASCENDING)
    );
    assert_eq!(
        mb.page_index_for_row_group(1)
            .column_index(taken)
            .unwrap()
            .get_boundary_order(),
        Some(BoundaryOrder::DESCENDING)
    );
}

#[test]
fn encoded_row_groups_of_no_rows_and_of_one_row_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WriterOptions {
        constant_columns: vec![("bundle".into(), "b".into())],
        ..WriterOptions::default()
    };
    let mut w = TableWriter::create_in(dir.path(), "timing", &file_meta(), &opts).unwrap();
    let e = w.row_group_encoder().unwrap();
    let one = crate::convert::timing(sample_timing(1)).unwrap();
    w.append_encoded(e.encode(0, &[]).unwrap()).unwrap();
    w.append_encoded(e.encode(1, &[one.slice(0, 0)]).unwrap())
        .unwrap();
    w.append_encoded(e.encode(2, std::slice::from_ref(&one)).unwrap())
        .unwrap();
    let written = w.finish().unwrap();
    assert_eq!(written.rows, 1);
    let (_, b) = read_parquet(&written.path);
    assert_eq!(b.num_rows(), 1);
    assert_eq!(strings(&b, "bundle"), [Some("b".to_string())]);
    assert_eq!(strings(&b, "kind"), strings(&one, "kind"));
}

// ---------------------------------------------------------------- strings of a column

/// `convert::strings` gives the column's strings (what arrow's `cast` to `Utf8` gives), for
/// every string type a reader of our tables (or of tables rewritten by pyarrow, polars,
/// DuckDB) meets: plain, large and view strings, and dictionaries of them with any key type
/// and null keys.
#[test]
fn strings_of_a_column_are_its_strings() {
    use arrow_array::types::{Int16Type, Int8Type, UInt32Type as U32};
    use arrow_array::{ArrayRef, DictionaryArray, LargeStringArray, StringArray, StringViewArray};
    use std::sync::Arc;
    let words = [Some("ret"), None, Some("jcc"), Some("ret"), Some("")];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(words.to_vec())),
        Arc::new(LargeStringArray::from(words.to_vec())),
        Arc::new(StringViewArray::from(words.to_vec())),
        Arc::new(words.iter().copied().collect::<DictionaryArray<Int8Type>>()),
        Arc::new(
            words
                .iter()
                .copied()
                .collect::<DictionaryArray<Int16Type>>(),
        ),
        Arc::new(words.iter().copied().collect::<DictionaryArray<U32>>()),
        // A dictionary whose values are large strings.
        Arc::new(
            DictionaryArray::<Int8Type>::try_new(
                arrow_array::Int8Array::from(vec![Some(1), None, Some(0), Some(1), Some(2)]),
                Arc::new(LargeStringArray::from(vec!["jcc", "ret", ""])),
            )
            .unwrap(),
        ),
    ];
    for c in &columns {
        let ours = crate::convert::strings(c.as_ref()).unwrap();
        assert_eq!(ours.data_type(), &DataType::Utf8);
        assert_eq!(ours.len(), words.len(), "{}", c.data_type());
        assert_eq!(ours.null_count(), 1, "{}", c.data_type());
        assert_eq!(
            ours.iter().collect::<Vec<_>>(),
            words.to_vec(),
            "{}",
            c.data_type()
        );
    }
    let numbers = arrow_array::UInt64Array::from(vec![1u64]);
    assert!(crate::convert::strings(&numbers).is_err());
}

// ---------------------------------------------------------------- the footer held on disk

/// `table` written from `row_groups` through [`TableWriter::row_group_encoder`] (the
/// footer held on disk, `footer.rs`) and through arrow-rs's own file writer (the footer in
/// memory): the two files' bytes.
fn files_both_ways(
    dir: &Path,
    table: &str,
    opts: &WriterOptions,
    row_groups: &[Vec<RecordBatch>],
) -> (Vec<u8>, Vec<u8>) {
    let ours = dir.join("ours");
    let theirs = dir.join("arrow-rs");
    fs::create_dir_all(&ours).unwrap();
    fs::create_dir_all(&theirs).unwrap();
    let mut w = TableWriter::create_in(&ours, table, &file_meta(), opts).unwrap();
    let e = w.row_group_encoder().unwrap();
    for (i, rg) in row_groups.iter().enumerate() {
        w.append_encoded(e.encode(i, rg).unwrap()).unwrap();
    }
    let written = w.finish().unwrap();
    let w = TableWriter::create_in(&theirs, table, &file_meta(), opts).unwrap();
    let arrow_rs = w.bytes_with_arrow_rs_footer(row_groups);
    // Nothing but the table is left beside it: the spills were unnamed.
    assert_eq!(dir_names(&ours), [opts.format.file_name(table)]);
    (fs::read(written.path).unwrap(), arrow_rs)
}

#[test]
fn the_footer_held_on_disk_is_arrow_rs_footer_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let variants = [
        WriterOptions::default(),
        WriterOptions {
            data_page_rows: 1_000,
            constant_columns: vec![("bundle".into(), "0123456789abcdef".into())],
            ..WriterOptions::default()
        },
        WriterOptions {
            thread_columns: true,
            codec: Codec::Lz4,
            ..WriterOptions::default()
        },
    ];
    for (v, opts) in variants.iter().enumerate() {
        for table in ["branches", "timing", "events", "edges"] {
            let batch = |i: u64| -> RecordBatch {
                let b = match table {
                    "branches" => crate::convert::branches(
                        sample_branches(5_000 + i as usize * 777, i, i * 1_000_000),
                        i * 10_000,
                    ),
                    "timing" => crate::convert::timing(sample_timing(3_000 + i as usize)),
                    "events" => crate::convert::events(&sample_events()),
                    _ => crate::convert::edges(&sample_edges()),
                }
                .unwrap();
                if opts.thread_columns && table != "edges" {
                    with_thread_columns(&b, table)
                } else {
                    b
                }
            };
            // Row groups of one batch, of two, and of none.
            let row_groups = vec![
                vec![batch(0)],
                vec![batch(1), batch(2)],
                vec![],
                vec![batch(3).slice(0, 1)],
            ];
            let d = dir.path().join(format!("{v}-{table}"));
            let (ours, arrow_rs) = files_both_ways(&d, table, opts, &row_groups);
            assert!(ours.len() > 1_000, "{table}: {} bytes", ours.len());
            assert!(ours == arrow_rs, "variant {v}, {table}: the files differ");
        }
    }
    // No row group at all.
    let d = dir.path().join("empty");
    let (ours, arrow_rs) = files_both_ways(&d, "branches", &WriterOptions::default(), &[]);
    assert_eq!(ours, arrow_rs);
}

#[test]
fn past_32767_row_groups_the_ordinals_are_left_out_as_arrow_rs_does() {
    // The footer carries each row group's ordinal only when all of them fit in an i16:
    // something only the end knows.
    let dir = tempfile::tempdir().unwrap();
    let edges = crate::convert::edges(&sample_edges()).unwrap();
    for n in [i16::MAX as usize, i16::MAX as usize + 1] {
        let row_groups: Vec<Vec<RecordBatch>> = (0..n)
            .map(|i| vec![edges.slice(i % edges.num_rows(), 1)])
            .collect();
        let d = dir.path().join(n.to_string());
        let (ours, arrow_rs) = files_both_ways(&d, "edges", &WriterOptions::default(), &row_groups);
        assert!(ours == arrow_rs, "{n} row groups: the files differ");
        let md = ::parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&bytes::Bytes::from(ours))
            .unwrap();
        assert_eq!(md.num_row_groups(), n);
    }
}

/// `b` with a perf.data decode's thread columns (`cpu`, `pid`, `tid`, `time`), some null.
fn with_thread_columns(b: &RecordBatch, table: &str) -> RecordBatch {
    use arrow_array::{ArrayRef, UInt32Array, UInt64Array};
    let n = b.num_rows();
    let u32s = |m: u32| -> ArrayRef {
        std::sync::Arc::new(UInt32Array::from_iter(
            (0..n as u32).map(|i| (i % 7 != 3).then_some(i % m)),
        ))
    };
    let mut columns = b.columns().to_vec();
    columns.extend([
        u32s(4),
        u32s(900),
        u32s(1000),
        std::sync::Arc::new(UInt64Array::from_iter(
            (0..n as u64).map(|i| (i > 10).then_some(1_000_000_000 + i * 13)),
        )) as ArrayRef,
    ]);
    RecordBatch::try_new(schema::with_thread_fields(table).unwrap(), columns).unwrap()
}
