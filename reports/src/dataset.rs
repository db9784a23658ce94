//! An ingested dataset (`tracemill ingest --dataset DIR`) as the input of a report: its
//! catalog, the bundles a `--where` filter selects, and each bundle's table files.
//!
//! Layout (see `pipeline/src/ingest/`): `DIR/<table>/<key>=<value>/.../<bundle-id>.parquet`
//! for the five tables, `DIR/bundles/<bundle-id>.parquet` the catalog (one row per bundle:
//! `bundle`, `source`, one column per label, `status`, counts). Only local directories:
//! an `s3://` dataset is refused with a message (copy it locally first).
//!
//! The filter language is a deliberately small, strict subset of SQL, so that what works
//! here also works in DuckDB over the same catalog:
//!
//! ```text
//! filter := cond ( AND cond )*
//! cond   := column = 'value' | column != 'value' | column <> 'value'
//!         | column IN ('a', 'b', ...) | column NOT IN ('a', ...)
//! ```
//!
//! Columns are the catalog's (labels and the fixed ones); values are single-quoted strings
//! (`''` for a quote) compared as text. A bundle without the column (a label it does not
//! have) matches no condition, as NULL does in SQL. A column no bundle has is an error
//! (a typo would otherwise select nothing in silence).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, UInt64Type};
use arrow_array::Array;
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The catalog's directory under the dataset.
pub const CATALOG_DIR: &str = "bundles";
/// The file `tracemill ingest` writes at the dataset's root.
pub const INFO_FILE: &str = "_tracemill.json";

/// A `--where` that does not parse or names a column no bundle has: a usage error (the
/// command line exits 2, as for a flag clap rejects).
#[derive(Debug)]
pub struct FilterError(pub String);

impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FilterError {}

/// A parsed `--where`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub conds: Vec<Cond>,
}

/// One condition on a catalog column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    pub column: String,
    /// Matches when the value is one of `values` (`!=` and `NOT IN` negate).
    pub values: Vec<String>,
    pub negated: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Str(String),
    Eq,
    Ne,
    LParen,
    RParen,
    Comma,
}

fn describe(t: Option<&(Tok, usize)>) -> String {
    match t.map(|t| &t.0) {
        None => "the end".into(),
        Some(Tok::Ident(s)) => format!("{s:?}"),
        Some(Tok::Str(s)) => format!("'{s}'"),
        Some(Tok::Eq) => "'='".into(),
        Some(Tok::Ne) => "'!='".into(),
        Some(Tok::LParen) => "'('".into(),
        Some(Tok::RParen) => "')'".into(),
        Some(Tok::Comma) => "','".into(),
    }
}

fn lex(s: &str) -> Result<Vec<(Tok, usize)>, String> {
    let b: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let at = i + 1;
        match c {
            c if c.is_whitespace() => i += 1,
            '=' => {
                out.push((Tok::Eq, at));
                i += 1;
            }
            '!' if b.get(i + 1) == Some(&'=') => {
                out.push((Tok::Ne, at));
                i += 2;
            }
            '<' if b.get(i + 1) == Some(&'>') => {
                out.push((Tok::Ne, at));
                i += 2;
            }
            '(' => {
                out.push((Tok::LParen, at));
                i += 1;
            }
            ')' => {
                out.push((Tok::RParen, at));
                i += 1;
            }
            ',' => {
                out.push((Tok::Comma, at));
                i += 1;
            }
            '\'' => {
                let mut v = String::new();
                i += 1;
                loop {
                    match b.get(i) {
                        None => return Err(format!("a quote opened at column {at} is not closed")),
                        Some('\'') if b.get(i + 1) == Some(&'\'') => {
                            v.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(&ch) => {
                            v.push(ch);
                            i += 1;
                        }
                    }
                }
                out.push((Tok::Str(v), at));
            }
            '"' => {
                return Err(format!(
                    "column {at}: values take single quotes ('h1'), as in SQL"
                ))
            }
            c if c.is_ascii_alphanumeric() || c == '_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '_') {
                    i += 1;
                }
                out.push((Tok::Ident(b[start..i].iter().collect()), at));
            }
            c => return Err(format!("column {at}: unexpected {c:?}")),
        }
    }
    Ok(out)
}

fn keyword(t: Option<&(Tok, usize)>, k: &str) -> bool {
    matches!(t, Some((Tok::Ident(s), _)) if s.eq_ignore_ascii_case(k))
}

/// Parse a `--where` filter (see the module documentation for the grammar).
pub fn parse_where(s: &str) -> Result<Filter, String> {
    const FORM: &str =
        "write column = 'value', column != 'value' or column IN ('a', 'b'), joined by AND";
    let toks = lex(s)?;
    if toks.is_empty() {
        return Err(format!("empty filter: {FORM}"));
    }
    let mut conds = Vec::new();
    let mut i = 0;
    let at = |i: usize| toks.get(i).map_or(s.chars().count() + 1, |t| t.1);
    loop {
        let column = match toks.get(i) {
            Some((Tok::Ident(c), _))
                if !["and", "or", "in", "not"].contains(&c.to_ascii_lowercase().as_str())
                    && !c.starts_with(|ch: char| ch.is_ascii_digit()) =>
            {
                c.clone()
            }
            t => {
                return Err(format!(
                    "column {}: expected a column name, found {}: {FORM}",
                    at(i),
                    describe(t)
                ))
            }
        };
        i += 1;
        let negated_in = keyword(toks.get(i), "not");
        if negated_in {
            i += 1;
            if !keyword(toks.get(i), "in") {
                return Err(format!(
                    "column {}: expected IN after NOT, found {}",
                    at(i),
                    describe(toks.get(i))
                ));
            }
        }
        let cond = match toks.get(i) {
            Some((Tok::Eq, _)) | Some((Tok::Ne, _)) => {
                let negated = toks[i].0 == Tok::Ne;
                i += 1;
                match toks.get(i) {
                    Some((Tok::Str(v), _)) => {
                        i += 1;
                        Cond {
                            column,
                            values: vec![v.clone()],
                            negated,
                        }
                    }
                    Some((Tok::Ident(v), _)) => {
                        return Err(format!(
                            "column {}: quote the value: {column} {} '{v}'",
                            at(i),
                            if negated { "!=" } else { "=" }
                        ))
                    }
                    t => {
                        return Err(format!(
                            "column {}: expected a quoted value, found {}",
                            at(i),
                            describe(t)
                        ))
                    }
                }
            }
            t if keyword(t, "in") => {
                i += 1;
                if toks.get(i).map(|t| &t.0) != Some(&Tok::LParen) {
                    return Err(format!(
                        "column {}: expected '(' after IN, found {}",
                        at(i),
                        describe(toks.get(i))
                    ));
                }
                i += 1;
                let mut values = Vec::new();
                loop {
                    match toks.get(i) {
                        Some((Tok::Str(v), _)) => values.push(v.clone()),
                        t => {
                            return Err(format!(
                                "column {}: expected a quoted value in the IN list, found {}",
                                at(i),
                                describe(t)
                            ))
                        }
                    }
                    i += 1;
                    match toks.get(i).map(|t| &t.0) {
                        Some(Tok::Comma) => i += 1,
                        Some(Tok::RParen) => {
                            i += 1;
                            break;
                        }
                        _ => {
                            return Err(format!(
                                "column {}: expected ',' or ')' in the IN list, found {}",
                                at(i),
                                describe(toks.get(i))
                            ))
                        }
                    }
                }
                Cond {
                    column,
                    values,
                    negated: negated_in,
                }
            }
            t => {
                return Err(format!(
                    "column {}: expected =, !=, IN or NOT IN after {column}, found {}",
                    at(i),
                    describe(t)
                ))
            }
        };
        conds.push(cond);
        match toks.get(i) {
            None => break,
            t if keyword(t, "and") => i += 1,
            t if keyword(t, "or") => {
                return Err(format!(
                "column {}: OR is not supported: for alternatives of one column use IN ('a', 'b')",
                at(i)
            ))
            }
            t => {
                return Err(format!(
                    "column {}: expected AND or the end, found {}",
                    at(i),
                    describe(t)
                ))
            }
        }
    }
    Ok(Filter { conds })
}

impl Filter {
    /// Does a row with these column values (absent: NULL) match every condition?
    pub fn matches(&self, row: &BTreeMap<String, String>) -> bool {
        self.conds.iter().all(|c| match row.get(&c.column) {
            // NULL compares to nothing, equal or not (SQL's three-valued logic).
            None => false,
            Some(v) => c.values.iter().any(|x| x == v) != c.negated,
        })
    }
}

/// One bundle of the dataset, as the catalog lists it, and its table files.
#[derive(Clone, Debug)]
pub struct Member {
    pub id: String,
    pub source: String,
    /// Every non-null catalog column as text (labels, status, counts).
    pub columns: BTreeMap<String, String>,
    pub tables: Vec<(&'static str, PathBuf)>,
}

impl Member {
    pub fn ok(&self) -> bool {
        self.columns.get("status").map(String::as_str) == Some("ok")
    }

    /// `<id, 12 characters> (<source>)`, for messages.
    pub fn label(&self) -> String {
        format!(
            "bundle {} ({})",
            &self.id[..self.id.len().min(12)],
            self.source
        )
    }
}

/// A dataset's catalog and table files.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub dir: PathBuf,
    /// Every bundle of the catalog, in id order.
    pub members: Vec<Member>,
    /// Every column some catalog row has.
    pub columns: BTreeSet<String>,
    pub warnings: Vec<String>,
}

/// Is `dir` an ingested dataset (rather than a `decode --out` directory)?
pub fn is_dataset(dir: &Path) -> bool {
    dir.join(INFO_FILE).is_file() || dir.join(CATALOG_DIR).is_dir()
}

/// Directory entries that are ours: readers skip names starting with `.` or `_`
/// (temporaries of a publish in progress, `_staging`).
fn visible(name: &std::ffi::OsStr) -> bool {
    !name.to_string_lossy().starts_with(['.', '_'])
}

/// Every `<id>.parquet` under `dir`, recursively (the hive partition directories).
fn parquet_files(dir: &Path, out: &mut HashMap<String, PathBuf>) -> Result<()> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("{}: cannot list", dir.display())),
    };
    for e in rd {
        let e = e.with_context(|| format!("{}: cannot list", dir.display()))?;
        if !visible(&e.file_name()) {
            continue;
        }
        let p = e.path();
        if e.file_type()?.is_dir() {
            parquet_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "parquet") {
            if let Some(stem) = p.file_stem() {
                out.insert(stem.to_string_lossy().into_owned(), p);
            }
        }
    }
    Ok(())
}

impl Dataset {
    /// Read the catalog and find every bundle's table files.
    pub fn open(dir: &Path) -> Result<Dataset> {
        if dir.to_string_lossy().contains("://") {
            bail!(
                "{}: only local dataset directories are supported by reports (copy an S3 dataset locally first, e.g. `aws s3 sync`)",
                dir.display()
            );
        }
        let cat = dir.join(CATALOG_DIR);
        if !cat.is_dir() {
            bail!(
                "{}: no catalog ({CATALOG_DIR}/): not a `tracemill ingest` dataset",
                dir.display()
            );
        }
        let mut warnings = Vec::new();
        let mut files = HashMap::new();
        parquet_files(&cat, &mut files)?;
        let mut by_table: Vec<(&'static str, HashMap<String, PathBuf>)> = Vec::new();
        for t in tracemill_schemas::TABLES {
            let mut m = HashMap::new();
            parquet_files(&dir.join(t), &mut m)?;
            by_table.push((t, m));
        }
        let mut members = Vec::new();
        let mut columns = BTreeSet::new();
        let mut ids: Vec<_> = files.into_iter().collect();
        ids.sort();
        for (id, path) in ids {
            let row = match read_row(&path) {
                Ok(r) => r,
                Err(e) => {
                    warnings.push(format!("{}: {e:#}: bundle left out", path.display()));
                    continue;
                }
            };
            columns.extend(row.keys().cloned());
            let tables = by_table
                .iter()
                .filter_map(|(t, m)| m.get(&id).map(|p| (*t, p.clone())))
                .collect();
            members.push(Member {
                source: row.get("source").cloned().unwrap_or_default(),
                id,
                columns: row,
                tables,
            });
        }
        Ok(Dataset {
            dir: dir.to_path_buf(),
            members,
            columns,
            warnings,
        })
    }

    /// The bundles with status `ok` that `filter` selects. A column of the filter that
    /// no catalog row has is an error.
    pub fn select(&self, filter: Option<&Filter>) -> Result<Vec<Member>> {
        if let Some(f) = filter {
            for c in &f.conds {
                if !self.columns.contains(&c.column) {
                    return Err(FilterError(format!(
                        "--where: no column {:?} in the catalog of {} (its columns: {})",
                        c.column,
                        self.dir.display(),
                        self.columns.iter().cloned().collect::<Vec<_>>().join(", ")
                    ))
                    .into());
                }
            }
        }
        Ok(self
            .members
            .iter()
            .filter(|m| m.ok() && filter.is_none_or(|f| f.matches(&m.columns)))
            .cloned()
            .collect())
    }
}

/// One catalog file's row, every non-null column as text.
fn read_row(path: &Path) -> Result<BTreeMap<String, String>> {
    let f = File::open(path).context("cannot open")?;
    let r = ParquetRecordBatchReaderBuilder::try_new(f)
        .context("not a Parquet file")?
        .build()?;
    let mut row = BTreeMap::new();
    for b in r {
        let b = b?;
        if b.num_rows() == 0 {
            continue;
        }
        for (field, col) in b.schema().fields().iter().zip(b.columns()) {
            if let Some(text) =
                text_of(col.as_ref()).with_context(|| format!("column {}", field.name()))?
            {
                row.insert(field.name().clone(), text);
            }
        }
        break;
    }
    if !row.contains_key("bundle") {
        bail!("no bundle column (not a catalog row)");
    }
    Ok(row)
}

/// The first value of a catalog column as text (None for NULL), as `--where` compares
/// it: the catalog's types (strings, counts, seconds) and what a tool that rewrote the
/// catalog may have made of them.
fn text_of(col: &dyn Array) -> Result<Option<String>> {
    if col.is_null(0) {
        return Ok(None);
    }
    Ok(Some(match col.data_type() {
        DataType::UInt64 => col.as_primitive::<UInt64Type>().value(0).to_string(),
        DataType::Int64 => col.as_primitive::<Int64Type>().value(0).to_string(),
        // `{:?}` keeps the ".0" of a whole number, as arrow's cast to text does.
        DataType::Float64 => format!("{:?}", col.as_primitive::<Float64Type>().value(0)),
        DataType::Boolean => col.as_boolean().value(0).to_string(),
        _ => tracemill_sinks::convert::strings(col)?.value(0).to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn filters_parse_and_match() {
        let f = parse_where("host = 'h1' AND date IN ('a', 'b''c') and x != 'y'").unwrap();
        assert_eq!(f.conds.len(), 3);
        assert_eq!(f.conds[1].values, ["a", "b'c"]);
        let r = row(&[("host", "h1"), ("date", "b'c"), ("x", "z")]);
        assert!(f.matches(&r));
        assert!(!f.matches(&row(&[("host", "h1"), ("date", "a"), ("x", "y")])));
        // A missing column is NULL: neither equal nor unequal.
        assert!(!parse_where("x != 'y'").unwrap().matches(&row(&[])));
        let f = parse_where("host NOT IN ('h1') AND host <> 'h2'").unwrap();
        assert!(f.matches(&row(&[("host", "h3")])));
        assert!(!f.matches(&row(&[("host", "h1")])));
    }

    #[test]
    fn bad_filters_say_what_is_wrong() {
        for (bad, says) in [
            ("", "empty filter"),
            ("host = h1", "quote the value: host = 'h1'"),
            ("host = \"h1\"", "single quotes"),
            ("host = 'h1", "not closed"),
            ("host = 'h1' OR host = 'h2'", "OR is not supported"),
            ("host == 'h1'", "expected a quoted value"),
            ("host IN 'h1'", "expected '(' after IN"),
            ("host IN ('h1' 'h2')", "expected ',' or ')'"),
            ("host 'h1'", "expected =, !=, IN or NOT IN"),
            ("host = 'h1' AND", "expected a column name, found the end"),
            ("host = 'h1' date = 'x'", "expected AND or the end"),
            ("host > 'h1'", "unexpected '>'"),
            ("= 'h1'", "expected a column name"),
        ] {
            let e = parse_where(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
