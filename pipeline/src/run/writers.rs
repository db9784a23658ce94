//! The writer thread: the open tables, appended in order and published together.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tracemill_decode::chunk::Piece;
use tracemill_decode::coverage::Coverage;
use tracemill_decode::image::ImageSet;
use tracemill_decode::rows::{BranchColumns, TimingColumns};
use tracemill_schemas::TABLES;
use tracemill_sinks::{EncodedRowGroup, FileMeta, Format, RowGroupEncoder, TableWriter, Written};

use super::emit::{with_threads, Dated, Grouped};
use super::Options;

/// The open table writers.
pub(super) struct Writers {
    pub(super) branches: Option<TableWriter>,
    pub(super) events: Option<TableWriter>,
    pub(super) timing: Option<TableWriter>,
    pub(super) coverage: Option<TableWriter>,
    pub(super) edges: Option<TableWriter>,
    /// Blocks and edges so far (written at the end: they are aggregates).
    pub(super) cov: Coverage,
    /// Encode `branches` and `timing` row groups elsewhere (Parquet).
    pub(super) branch_encoder: Option<RowGroupEncoder>,
    pub(super) timing_encoder: Option<RowGroupEncoder>,
    /// The output directory (empty without `--out`).
    pub(super) dir: PathBuf,
    /// The consumer of `coverage` and `edges`, instead of files.
    pub(super) batches: Option<crate::stream::BatchSink>,
}

impl Writers {
    pub(super) fn create(opts: &Options, meta: &FileMeta) -> Result<Writers> {
        let Some(dir) = &opts.out else {
            return Ok(Writers {
                branches: None,
                events: None,
                timing: None,
                coverage: None,
                edges: None,
                cov: Coverage::default(),
                branch_encoder: None,
                timing_encoder: None,
                dir: PathBuf::new(),
                batches: opts.batches.clone(),
            });
        };
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create the output directory", dir.display()))?;
        let open = |on: bool, table: &str| -> Result<Option<TableWriter>> {
            if !on {
                return Ok(None);
            }
            let mut wo = opts.writer.clone();
            wo.format = opts.format;
            Ok(Some(TableWriter::create_in(dir, table, meta, &wo)?))
        };
        let mut branches = open(opts.tables.branches, "branches")?;
        let mut timing = open(opts.tables.timing, "timing")?;
        let encoder = |w: &mut Option<TableWriter>| -> Result<Option<RowGroupEncoder>> {
            Ok(match (w, opts.format) {
                (Some(w), Format::Parquet) => Some(w.row_group_encoder()?),
                _ => None,
            })
        };
        let branch_encoder = encoder(&mut branches)?;
        let timing_encoder = encoder(&mut timing)?;
        Ok(Writers {
            branches,
            events: open(opts.tables.events, "events")?,
            timing,
            coverage: open(opts.tables.coverage, "coverage")?,
            edges: open(opts.tables.edges, "edges")?,
            cov: Coverage::default(),
            branch_encoder,
            timing_encoder,
            dir: dir.clone(),
            batches: None,
        })
    }

    pub(super) fn append_row_group(&mut self, table: Grouped, rg: EncodedRowGroup) -> Result<()> {
        let w = match table {
            Grouped::Branches => &mut self.branches,
            Grouped::Timing => &mut self.timing,
        };
        if let Some(w) = w {
            w.append_encoded(rg)?;
        }
        Ok(())
    }

    pub(super) fn write(
        &mut self,
        mut p: Piece<BranchColumns>,
        timing: TimingColumns,
        dated: Option<&Dated>,
    ) -> Result<()> {
        use tracemill_sinks::convert;
        self.cov.merge(std::mem::take(&mut p.coverage));
        if let Some(w) = &mut self.events {
            if !p.events.is_empty() {
                match dated {
                    None => w.write_events(&p.events)?,
                    Some(_) => {
                        let b = convert::events(&p.events)?;
                        w.write(&with_threads(b, dated, Dated::events)?)?
                    }
                }
            }
        }
        if let Some(w) = &mut self.timing {
            if !timing.is_empty() {
                match dated {
                    None => w.write_timing(timing)?,
                    Some(_) => {
                        let b = convert::timing(timing)?;
                        w.write(&with_threads(b, dated, Dated::timing)?)?
                    }
                }
            }
        }
        if let Some(w) = &mut self.branches {
            if !p.rows.is_empty() {
                match dated {
                    None => w.write_branches(p.rows)?,
                    Some(_) => {
                        // Numbered on from the rows written, as write_branches does.
                        let first = w.rows_written();
                        let b = convert::branches(p.rows, first)?;
                        w.write(&with_threads(b, dated, Dated::rows)?)?
                    }
                }
            }
        }
        Ok(())
    }

    /// Write the aggregates and close every table: what was written, and the numbers of
    /// distinct blocks and edges.
    ///
    /// The tables of a run appear together or not at all: each is finished and synced
    /// under its temporary name first (a full disk fails here, and every temporary is
    /// removed), then the tables an earlier decode left in the directory that this run
    /// does not replace are removed, and the new ones renamed into place.
    /// (With a consumer instead, `coverage` and `edges` go to it; `trace_len` is where
    /// decoding ended.)
    pub(super) fn finish(mut self, images: &ImageSet<'_>, trace_len: u64) -> Result<Closed> {
        let (blocks, edges) = (self.cov.blocks.len() as u64, self.cov.edges.len() as u64);
        if let Some(b) = &self.batches {
            b.send_coverage(&self.cov, images, trace_len)?;
        }
        if let Some(w) = &mut self.coverage {
            w.write_coverage(&self.cov.block_rows(images))?;
        }
        if let Some(w) = &mut self.edges {
            w.write_edges(&self.cov.edge_rows())?;
        }
        let mut files = Vec::new();
        let mut out = Vec::new();
        for w in [
            self.branches,
            self.events,
            self.timing,
            self.coverage,
            self.edges,
        ]
        .into_iter()
        .flatten()
        {
            let (file, written) = w.finish_unpublished()?;
            files.push(file);
            out.push(written);
        }
        let stale: Vec<PathBuf> = TABLES
            .iter()
            .flat_map(|t| {
                [Format::Parquet, Format::ArrowIpc].map(|f| self.dir.join(f.file_name(t)))
            })
            .filter(|p| !files.is_empty() && !out.iter().any(|w| &w.path == p) && p.exists())
            .collect();
        Ok(Closed {
            files,
            stale,
            written: out,
            blocks,
            edges,
        })
    }
}

/// A run's tables, finished and synced under their temporary names, not yet published
/// (dropped, they are removed).
pub(super) struct Closed {
    pub(super) files: Vec<tracemill_sinks::Unpublished>,
    /// Tables an earlier decode left that this run does not replace.
    pub(super) stale: Vec<PathBuf>,
    pub(super) written: Vec<Written>,
    pub(super) blocks: u64,
    pub(super) edges: u64,
}
