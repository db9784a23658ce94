//! What a report runs over: the tables of one `decode --out` directory, or the bundles of
//! an ingested dataset that a `--where` filter selects.
//!
//! Over a dataset each report is made per bundle, with that bundle's own tables and
//! images, and the results are added up (hotspot rows, stack tries, coverage blocks).
//! One bundle is open at a time, so memory follows the aggregates, never the number of
//! bundles. A bundle that cannot be read (or whose images are missing) is a warning; the
//! others go on.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::dataset::{is_dataset, Dataset, Filter, Member};
use crate::input::Input;

/// The bundles of a dataset a report runs over.
pub struct Selection {
    pub dataset: PathBuf,
    /// The `--where` text, as given.
    pub filter: Option<String>,
    pub members: Vec<Member>,
    /// Bundles of the catalog in all (any status).
    pub catalog_bundles: usize,
}

/// One decode's tables, or the selected bundles of a dataset.
pub enum Source {
    Decode(Box<Input>),
    Dataset(Selection),
}

/// Add `w` unless already there (the same warning from many bundles is said once).
pub fn warn_once(ws: &mut Vec<String>, w: String) {
    if !ws.contains(&w) {
        ws.push(w);
    }
}

impl Source {
    /// Open `dir`: a dataset when it has a catalog (then `filter` selects bundles and
    /// `bundle` is refused), else a decode output directory (then `filter` is refused).
    /// Returns the warnings of opening.
    pub fn open(
        dir: &Path,
        bundle: Option<&Path>,
        filter: Option<(&Filter, &str)>,
    ) -> Result<(Source, Vec<String>)> {
        let remote = dir.to_string_lossy().contains("://");
        if remote || is_dataset(dir) {
            if bundle.is_some() {
                bail!(
                    "--bundle names one bundle's images; over a dataset each bundle's own are used"
                );
            }
            let ds = Dataset::open(dir)?;
            let members = ds.select(filter.map(|f| f.0))?;
            if members.is_empty() {
                let ok = ds.members.iter().filter(|m| m.ok()).count();
                bail!(
                    "{}: no bundle selected: {} of its {} bundles have status ok{}",
                    dir.display(),
                    ok,
                    ds.members.len(),
                    filter.map_or(String::new(), |f| format!(
                        ", none of them matches --where \"{}\"",
                        f.1
                    ))
                );
            }
            Ok((
                Source::Dataset(Selection {
                    dataset: dir.to_path_buf(),
                    filter: filter.map(|f| f.1.to_string()),
                    members,
                    catalog_bundles: ds.members.len(),
                }),
                ds.warnings,
            ))
        } else {
            if filter.is_some() {
                bail!(
                    "{}: --where selects bundles of an ingested dataset (a directory with {}/); this is not one",
                    dir.display(),
                    crate::dataset::CATALOG_DIR
                );
            }
            let input = Input::open(dir, bundle)?;
            let ws = input.warnings.clone();
            Ok((Source::Decode(Box::new(input)), ws))
        }
    }

    /// A title for graphs and pages.
    pub fn title(&self) -> String {
        match self {
            Source::Decode(i) => i
                .meta
                .get(tracemill_schemas::meta::SOURCE)
                .cloned()
                .unwrap_or_else(|| "trace".into()),
            Source::Dataset(s) => format!(
                "{}{} ({} bundle{})",
                s.dataset.display(),
                s.filter
                    .as_ref()
                    .map_or(String::new(), |f| format!(" where {f}")),
                s.members.len(),
                if s.members.len() == 1 { "" } else { "s" }
            ),
        }
    }

    /// Run `f` on each input: the decode's, or each selected bundle's in turn (opened with
    /// its own images, dropped after). Over a dataset a bundle that cannot be opened, or on
    /// which `f` fails, is left out with a warning, and its opening warnings are prefixed
    /// with the bundle; it is an error only when no bundle could be used. Returns the
    /// number of inputs `f` succeeded on.
    pub fn each(
        &mut self,
        warnings: &mut Vec<String>,
        mut f: impl FnMut(&mut Input, Option<&Member>) -> Result<()>,
    ) -> Result<usize> {
        match self {
            Source::Decode(input) => {
                f(input, None)?;
                Ok(1)
            }
            Source::Dataset(sel) => {
                let mut done = 0;
                let mut first_err = None;
                for m in &sel.members {
                    let label = m.label();
                    let input = Input::open_files(&sel.dataset, &m.tables);
                    let mut input = match input {
                        Ok(i) => i,
                        Err(e) => {
                            warn_once(warnings, format!("{label}: {e:#}: left out"));
                            first_err.get_or_insert(e);
                            continue;
                        }
                    };
                    for w in std::mem::take(&mut input.warnings) {
                        warn_once(warnings, format!("{label}: {w}"));
                    }
                    match f(&mut input, Some(m)) {
                        Ok(()) => done += 1,
                        Err(e) => {
                            warn_once(warnings, format!("{label}: {e:#}: left out"));
                            first_err.get_or_insert(e);
                        }
                    }
                }
                match (done, first_err) {
                    (0, Some(e)) => Err(e.context("no selected bundle could be used")),
                    _ => Ok(done),
                }
            }
        }
    }
}
