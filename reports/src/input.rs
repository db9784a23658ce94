//! A `tracemill decode` output directory: its tables, their metadata, and the bundle (and
//! so the code images) they were decoded from.
//!
//! Tables are read in batches with only the columns a report needs (Parquet projection;
//! Arrow IPC files the same way), so a report's memory follows its aggregates, never the
//! trace. Problems that leave part of a report possible (a missing table or column, a
//! missing image, a build-id that differs) are collected as [`Input::warnings`].

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::PageIndexPolicy;
use tracemill_input::manifest::{ImageKind, Manifest};
use tracemill_schemas::{meta, SCHEMA_VERSION};

use crate::symbols::{resolve, ImageSpec, ImageSymbols, Symbolizer};

/// Metadata key naming the bundle directory a table was decoded from (absolute).
pub const META_BUNDLE: &str = "tracemill.bundle";
/// Metadata key holding the images as decoded: a JSON array of [`ImageMeta`].
pub const META_IMAGES: &str = "tracemill.images";

/// One image as recorded in the tables' metadata at decode time.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageMeta {
    pub name: String,
    /// Absolute path when decoded.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cr3: Option<u64>,
    #[serde(default)]
    pub raw: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// Raw images: the symbol file (absolute path when decoded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbols: Option<String>,
}

/// One table file of the output directory.
pub struct Table {
    pub name: &'static str,
    pub path: PathBuf,
    pub ipc: bool,
    pub schema: SchemaRef,
    pub meta: HashMap<String, String>,
    pub rows: u64,
}

impl Table {
    /// `dir/<name>.parquet`, else `dir/<name>.arrow`, else none.
    fn find(dir: &Path, name: &'static str) -> Result<Option<Table>> {
        let pq = dir.join(format!("{name}.parquet"));
        let ipc = dir.join(format!("{name}.arrow"));
        if pq.exists() {
            Table::open(name, pq).map(Some)
        } else if ipc.exists() {
            Table::open(name, ipc).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Open one table file: Arrow IPC when it ends in `.arrow`, else Parquet.
    pub fn open(name: &'static str, path: PathBuf) -> Result<Table> {
        if path.extension().is_some_and(|e| e == "arrow") {
            let f =
                File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
            let r = arrow_ipc::reader::FileReader::try_new(f, None)
                .with_context(|| format!("{}: not an Arrow IPC file", path.display()))?;
            let schema = r.schema();
            let meta: HashMap<String, String> = schema.metadata().clone().into();
            let rows = (0..r.num_batches()).count() as u64; // batch count; rows unknown cheaply
            Ok(Table {
                name,
                rows,
                schema,
                path,
                ipc: true,
                meta,
            })
        } else {
            let f =
                File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
            let b = ParquetRecordBatchReaderBuilder::try_new(f)
                .with_context(|| format!("{}: not a Parquet file", path.display()))?;
            let md = b.metadata().file_metadata();
            let meta = md
                .key_value_metadata()
                .map(|kv| {
                    kv.iter()
                        .filter_map(|k| Some((k.key.clone(), k.value.clone()?)))
                        .collect()
                })
                .unwrap_or_default();
            Ok(Table {
                name,
                rows: md.num_rows().max(0) as u64,
                schema: b.schema().clone(),
                path,
                ipc: false,
                meta,
            })
        }
    }

    /// Fail, naming the file, unless every column in `cols` is present.
    pub fn require(&self, cols: &[&str]) -> Result<()> {
        let missing: Vec<&str> = cols
            .iter()
            .copied()
            .filter(|c| self.schema.field_with_name(c).is_err())
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            bail!(
                "{}: missing column{} {} (a table from another tracemill version?)",
                self.path.display(),
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", ")
            )
        }
    }

    /// A Parquet table's footer, read once for the readers of its row groups
    /// ([`Table::row_group_batches`]); `None` for Arrow IPC.
    pub fn parquet_footer(&self) -> Result<Option<ArrowReaderMetadata>> {
        if self.ipc {
            return Ok(None);
        }
        let f = File::open(&self.path)
            .with_context(|| format!("{}: cannot open", self.path.display()))?;
        let m = ArrowReaderMetadata::load(&f, ArrowReaderOptions::new())
            .with_context(|| format!("{}: not a Parquet file", self.path.display()))?;
        Ok(Some(m))
    }

    /// A Parquet table's footer with its offset index (where each page starts), when the
    /// file has one: a reader of some rows of a row group ([`Table::row_group_rows`])
    /// then skips the pages that hold none of them. `None` for Arrow IPC.
    pub fn parquet_footer_indexed(&self) -> Result<Option<ArrowReaderMetadata>> {
        if self.ipc {
            return Ok(None);
        }
        let f = File::open(&self.path)
            .with_context(|| format!("{}: cannot open", self.path.display()))?;
        let o = ArrowReaderOptions::new().with_offset_index_policy(PageIndexPolicy::Optional);
        let m = ArrowReaderMetadata::load(&f, o)
            .with_context(|| format!("{}: not a Parquet file", self.path.display()))?;
        Ok(Some(m))
    }

    /// Batches of the named columns of row group `group` only: readers of different row
    /// groups work side by side.
    pub fn row_group_batches(
        &self,
        footer: &ArrowReaderMetadata,
        cols: &[&str],
        group: usize,
    ) -> Result<Batches> {
        self.require(cols)?;
        let f = File::open(&self.path)
            .with_context(|| format!("{}: cannot open", self.path.display()))?;
        let b = ParquetRecordBatchReaderBuilder::new_with_metadata(f, footer.clone());
        self.parquet_batches(b.with_row_groups(vec![group]), cols, 64 * 1024)
    }

    /// Batches of at most `batch` rows of the named columns of the rows `ranges` of row
    /// group `group` (row numbers in the row group, ascending, not overlapping), in order.
    pub fn row_group_rows(
        &self,
        footer: &ArrowReaderMetadata,
        cols: &[&str],
        group: usize,
        ranges: &[std::ops::Range<usize>],
        batch: usize,
    ) -> Result<Batches> {
        self.require(cols)?;
        let f = File::open(&self.path)
            .with_context(|| format!("{}: cannot open", self.path.display()))?;
        let rows = footer.metadata().row_group(group).num_rows().max(0) as usize;
        let mut b = ParquetRecordBatchReaderBuilder::new_with_metadata(f, footer.clone())
            .with_row_groups(vec![group]);
        // The whole row group: no selection to follow.
        if !matches!(ranges, [r] if r.start == 0 && r.end >= rows) {
            let s = RowSelection::from_consecutive_ranges(ranges.iter().cloned(), rows);
            b = b.with_row_selection(s);
        }
        self.parquet_batches(b, cols, batch)
    }

    /// The builder's batches of the named columns, `batch` rows each.
    fn parquet_batches(
        &self,
        b: ParquetRecordBatchReaderBuilder<File>,
        cols: &[&str],
        batch: usize,
    ) -> Result<Batches> {
        let path = self.path.clone();
        let mask = ProjectionMask::columns(b.parquet_schema(), cols.iter().copied());
        let r = b.with_projection(mask).with_batch_size(batch).build()?;
        Ok(Box::new(r.map(move |b| {
            b.with_context(|| format!("{}: cannot read", path.display()))
        })))
    }

    /// Batches of the named columns only, in file order.
    pub fn batches(&self, cols: &[&str]) -> Result<Batches> {
        self.require(cols)?;
        let path = self.path.clone();
        let f = File::open(&self.path)
            .with_context(|| format!("{}: cannot open", self.path.display()))?;
        if self.ipc {
            let idx: Vec<usize> = cols
                .iter()
                .map(|c| self.schema.index_of(c).expect("checked"))
                .collect();
            let r = arrow_ipc::reader::FileReader::try_new(f, Some(idx))?;
            Ok(Box::new(r.map(move |b| {
                b.with_context(|| format!("{}: cannot read", path.display()))
            })))
        } else {
            self.parquet_batches(
                ParquetRecordBatchReaderBuilder::try_new(f)?,
                cols,
                64 * 1024,
            )
        }
    }
}

/// Record batches of a table, in file order.
pub type Batches = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// The tables of one decode and the symbols of its code.
pub struct Input {
    pub dir: PathBuf,
    pub tables: HashMap<&'static str, Table>,
    /// Key-value metadata (from the first table found).
    pub meta: HashMap<String, String>,
    /// The bundle the tables came from, when found.
    pub bundle: Option<PathBuf>,
    pub manifest: Option<Manifest>,
    pub symbols: Symbolizer,
    /// Problems that left part of the report out or less exact.
    pub warnings: Vec<String>,
    /// Walk only the rows of one thread of a perf.data decode ([`Input::threads`]), in
    /// time order. `None`: every row, in table order.
    pub thread: Option<Thread>,
}

/// A thread of a perf.data decode: its `tid` (`None`: rows no thread is known for), its
/// name (`comm pid/tid`) and where its rows are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Thread {
    pub tid: Option<u32>,
    pub name: String,
    /// Its stretches, in table order.
    pub stretches: Vec<Stretch>,
}

/// A stretch of a thread: a maximal run of consecutive rows of `branches` (`start..end`,
/// row numbers from 0) that are the thread's on one CPU (`cpu`; `None` for a per-thread
/// recording). A CPU's rows are in time order, the CPUs one after another: the thread's
/// stretches on one CPU are in time order, those on different CPUs not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stretch {
    pub start: u64,
    pub end: u64,
    pub cpu: Option<u32>,
    /// The first `time` on the CPU after the stretch (another thread's): no row of the
    /// stretch ran after it. A row timed so took the time of a timing packet sent after
    /// the thread left the CPU (rows after a gap wait for the next one: docs/timing.md;
    /// without MTC packets that can be the next thread's first).
    pub until: Option<u64>,
}

/// Metadata key of a perf.data decode's threads: `pid/tid=comm` entries, comma-separated.
pub const META_THREADS: &str = "tracemill.perf_threads";

impl Input {
    /// Is this a perf.data decode, whose `branches` rows have threads (a `tid` column)?
    pub fn has_threads(&self) -> bool {
        self.table("branches")
            .is_ok_and(|t| t.schema.field_with_name("tid").is_ok())
    }

    /// The threads of a perf.data decode (those with rows, in `tid` order; `None` is the
    /// rows no thread is known for), each with its name (`comm pid/tid`) and its stretches;
    /// `None` for any other decode (no `tid` column). One pass over the `tid`, `cpu` and
    /// `time` columns; memory follows the stretches (the context switches), not the rows.
    pub fn threads(&self) -> Result<Option<Vec<Thread>>> {
        let t = self.table("branches")?;
        if t.schema.field_with_name("tid").is_err() {
            return Ok(None);
        }
        let has = |c: &str| t.schema.field_with_name(c).is_ok();
        let mut cols = vec!["tid"];
        cols.extend(["cpu", "time"].into_iter().filter(|c| has(c)));
        let mut stretches: std::collections::BTreeMap<Option<u32>, Vec<Stretch>> =
            Default::default();
        // The open stretch and its thread; the stretches before it on its CPU that wait
        // for the CPU's next time (their `until`): thread, index.
        let mut open: Option<(Option<u32>, Stretch)> = None;
        let mut waiting: Vec<(Option<u32>, usize)> = Vec::new();
        let mut row = 0u64;
        let wrong = |name: &str| anyhow!("{}: {name} is not of its type", t.path.display());
        for b in t.batches(&cols)? {
            let b = b?;
            let tid = (b.column_by_name("tid"))
                .and_then(|c| c.as_primitive_opt::<UInt32Type>())
                .ok_or_else(|| wrong("tid"))?;
            let cpu = (b.column_by_name("cpu"))
                .map(|c| {
                    c.as_primitive_opt::<UInt32Type>()
                        .ok_or_else(|| wrong("cpu"))
                })
                .transpose()?;
            let time = (b.column_by_name("time"))
                .map(|c| {
                    c.as_primitive_opt::<UInt64Type>()
                        .ok_or_else(|| wrong("time"))
                })
                .transpose()?;
            for i in 0..b.num_rows() {
                let who = tid.is_valid(i).then(|| tid.value(i));
                let on = cpu.and_then(|c| c.is_valid(i).then(|| c.value(i)));
                match &mut open {
                    Some((tid, s)) if *tid == who && s.cpu == on => s.end = row + 1,
                    _ => {
                        if let Some((tid, s)) = open.take() {
                            let list = stretches.entry(tid).or_default();
                            if s.cpu != on {
                                // The last stretch of its CPU's rows.
                                waiting.clear();
                            } else {
                                waiting.push((tid, list.len()));
                            }
                            list.push(s);
                        }
                        let s = Stretch {
                            start: row,
                            end: row + 1,
                            cpu: on,
                            until: None,
                        };
                        open = Some((who, s));
                    }
                }
                let when = time.and_then(|c| c.is_valid(i).then(|| c.value(i)));
                if let (Some(when), false) = (when, waiting.is_empty()) {
                    for (tid, k) in waiting.drain(..) {
                        if let Some(s) = stretches.get_mut(&tid).and_then(|l| l.get_mut(k)) {
                            s.until = Some(when);
                        }
                    }
                }
                row += 1;
            }
        }
        if let Some((tid, s)) = open {
            stretches.entry(tid).or_default().push(s);
        }
        let known: HashMap<u32, (String, String)> = self
            .meta
            .get(META_THREADS)
            .map(|v| {
                v.split(',')
                    .filter_map(|e| {
                        let (ids, comm) = e.split_once('=')?;
                        let (pid, tid) = ids.split_once('/')?;
                        Some((tid.parse().ok()?, (pid.to_string(), comm.to_string())))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(
            stretches
                .into_iter()
                .map(|(tid, stretches)| {
                    let name = match tid {
                        None => "[thread unknown]".to_string(),
                        Some(t) => match known.get(&t) {
                            Some((pid, comm)) => format!("{comm} {pid}/{t}"),
                            None => format!("thread {t}"),
                        },
                    };
                    Thread {
                        tid,
                        name,
                        stretches,
                    }
                })
                .collect(),
        ))
    }

    /// Open `out` (a `tracemill decode --out` directory); `bundle` overrides the bundle
    /// recorded in the tables (moved, or a copy of it): one with another trace is refused.
    pub fn open(out: &Path, bundle: Option<&Path>) -> Result<Input> {
        if !out.is_dir() {
            bail!(
                "{}: not a directory (give the output directory of `tracemill decode --out`)",
                out.display()
            );
        }
        let mut tables = HashMap::new();
        let mut warnings = Vec::new();
        for name in tracemill_schemas::TABLES {
            match Table::find(out, name) {
                Ok(Some(t)) => {
                    tables.insert(name, t);
                }
                Ok(None) => {}
                Err(e) => warnings.push(format!("{e:#}")),
            }
        }
        if tables.is_empty() {
            bail!(
                "{}: no tracemill table (branches, events, timing, coverage or edges .parquet/.arrow) in it",
                out.display()
            );
        }
        if let (Some(given), Some(t)) = (bundle, tables.values().next()) {
            check_given_bundle(&t.meta, given)?;
        }
        Ok(Input::with_tables(out, tables, warnings, bundle))
    }

    /// The tables of one bundle of an ingested dataset (files anywhere, one per table);
    /// `label` names the bundle in messages.
    pub fn open_files(label: &Path, files: &[(&'static str, PathBuf)]) -> Result<Input> {
        let mut tables = HashMap::new();
        let mut warnings = Vec::new();
        for (name, path) in files {
            match Table::open(name, path.clone()) {
                Ok(t) => {
                    tables.insert(*name, t);
                }
                Err(e) => warnings.push(format!("{e:#}")),
            }
        }
        if tables.is_empty() {
            bail!("{}: no readable table", label.display());
        }
        Ok(Input::with_tables(label, tables, warnings, None))
    }

    fn with_tables(
        out: &Path,
        tables: HashMap<&'static str, Table>,
        mut warnings: Vec<String>,
        bundle: Option<&Path>,
    ) -> Input {
        let first = tracemill_schemas::TABLES
            .iter()
            .find_map(|n| tables.get(n))
            .expect("one table");
        let meta = first.meta.clone();
        for t in tables.values() {
            match t.meta.get(meta::SCHEMA_VERSION) {
                Some(v) if *v == SCHEMA_VERSION.to_string() => {}
                Some(v) => warnings.push(format!(
                    "{}: schema version {v}, this tracemill reads {SCHEMA_VERSION}: columns may differ",
                    t.path.display()
                )),
                None => warnings.push(format!(
                    "{}: no tracemill metadata (not written by tracemill decode?)",
                    t.path.display()
                )),
            }
        }
        let mut input = Input {
            dir: out.to_path_buf(),
            tables,
            meta,
            bundle: None,
            manifest: None,
            symbols: Symbolizer::new(),
            warnings,
            thread: None,
        };
        input.load_images(bundle);
        input
    }

    pub fn table(&self, name: &str) -> Result<&Table> {
        self.tables.get(name).ok_or_else(|| {
            anyhow!(
                "{}: no {name} table (decode with --tables including {name})",
                self.dir.display()
            )
        })
    }

    /// Images recorded at decode time.
    pub fn recorded_images(&self) -> Vec<ImageMeta> {
        self.meta
            .get(META_IMAGES)
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default()
    }

    /// The bundle directory: `--bundle`, else the recorded one, else the trace's directory.
    fn find_bundle(&self, given: Option<&Path>) -> Option<PathBuf> {
        if let Some(b) = given {
            return Some(b.to_path_buf());
        }
        let mut cands = Vec::new();
        if let Some(b) = self.meta.get(META_BUNDLE) {
            cands.push(PathBuf::from(b));
        }
        if let Some(s) = self.meta.get(meta::SOURCE) {
            let p = PathBuf::from(s);
            cands.push(p.clone());
            if let Some(parent) = p.parent() {
                cands.push(parent.to_path_buf());
            }
        }
        cands.into_iter().find(|c| c.join("bundle.toml").is_file())
    }

    fn load_images(&mut self, given: Option<&Path>) {
        let recorded = self.recorded_images();
        let mut specs: Vec<ImageSpec> = Vec::new();
        match self.find_bundle(given) {
            Some(dir) => match Manifest::load(&dir) {
                Ok(m) => {
                    for e in &m.images {
                        let path = resolve(&dir, &e.path);
                        specs.push(ImageSpec {
                            name: Path::new(&e.path).file_name().map_or_else(
                                || e.path.clone(),
                                |n| n.to_string_lossy().into_owned(),
                            ),
                            path,
                            base: e.base,
                            cr3: e.cr3,
                            raw: e.kind == ImageKind::Raw,
                            symbols: e.symbols.as_deref().map(|p| resolve(&dir, p)),
                        });
                    }
                    // Images given with --image at decode time are not in bundle.toml.
                    for r in &recorded {
                        if !specs.iter().any(|s| s.name == r.name) {
                            specs.push(spec_of(r));
                        }
                    }
                    self.bundle = Some(dir);
                    self.manifest = Some(m);
                }
                Err(e) => {
                    self.warnings.push(format!("{}: {e}", dir.display()));
                    specs.extend(recorded.iter().map(spec_of));
                }
            },
            None => {
                if given.is_none() && recorded.is_empty() {
                    self.warnings.push(format!(
                        "no bundle found for {} (recorded source: {}): give --bundle; code is shown as image+0xoffset",
                        self.dir.display(),
                        self.meta.get(meta::SOURCE).map_or("none", String::as_str)
                    ));
                }
                specs.extend(recorded.iter().map(spec_of));
            }
        }
        for spec in specs {
            let name = spec.name.clone();
            match ImageSymbols::load(spec) {
                Ok(im) => {
                    if let Some(rec) = recorded.iter().find(|r| r.name == name) {
                        if rec.build_id.is_some() && rec.build_id != im.build_id {
                            self.warnings.push(format!(
                                "{}: build-id {} differs from the one decoded ({}): its symbols are not used, its code is shown as {name}+0xoffset",
                                im.spec.path.display(),
                                im.build_id.as_deref().unwrap_or("none"),
                                rec.build_id.as_deref().unwrap_or("none"),
                            ));
                            // Keep the image's place (addresses, base), not its symbols.
                            self.symbols.push(im.without_symbols());
                            continue;
                        }
                    }
                    self.warnings.extend(im.notes.iter().cloned());
                    self.symbols.push(im);
                }
                Err(e) => self
                    .warnings
                    .push(format!("{e:#}: its code is shown as {name}+0xoffset")),
            }
        }
    }

    /// A bundle label recorded in the tables (`label.<key>`).
    pub fn label(&self, key: &str) -> Option<&str> {
        self.meta.get(&format!("label.{key}")).map(String::as_str)
    }
}

/// A bundle given for tables decoded from another is refused: its images would be read
/// against the wrong trace's addresses, and every count would come out 0 without a word.
/// The tables record the trace they were decoded from (its size, its RTIT_CTL) and the
/// bundle directory; a given bundle that is that directory, or a copy of it elsewhere,
/// has the same trace. One whose manifest does not load is left to the caller (a
/// warning, and the recorded images).
fn check_given_bundle(meta: &HashMap<String, String>, given: &Path) -> Result<()> {
    let Ok(m) = Manifest::load(given) else {
        return Ok(());
    };
    let mut differs = Vec::new();
    let trace = m.trace_path(given);
    let size = std::fs::metadata(&trace).map(|f| f.len());
    if let (Some(rec), Ok(size)) = (
        meta.get(meta::SOURCE_SIZE)
            .and_then(|s| s.parse::<u64>().ok()),
        &size,
    ) {
        if rec != *size {
            differs.push(format!(
                "its trace ({}) is {size} bytes, the tables' was {rec}",
                trace.display()
            ));
        }
    }
    let ctl = format!("{:#x}", m.rtit_ctl);
    if let Some(rec) = meta.get(meta::RTIT_CTL) {
        if *rec != ctl {
            differs.push(format!("its rtit_ctl is {ctl}, the tables' {rec}"));
        }
    }
    if differs.is_empty() {
        return Ok(());
    }
    let from = meta
        .get(META_BUNDLE)
        .or_else(|| meta.get(meta::SOURCE))
        .map_or("unrecorded".to_string(), |b| b.clone());
    bail!(
        "{}: not the bundle these tables were decoded from ({from}): {}; give that bundle, or none",
        given.display(),
        differs.join(", ")
    )
}

fn spec_of(r: &ImageMeta) -> ImageSpec {
    ImageSpec {
        name: r.name.clone(),
        path: PathBuf::from(&r.path),
        base: r.base,
        cr3: r.cr3,
        raw: r.raw,
        symbols: r.symbols.as_ref().map(PathBuf::from),
    }
}
