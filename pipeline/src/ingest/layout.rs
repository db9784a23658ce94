//! Where a bundle's files go: `DEST/<table>/<key>=<value>/.../<bundle-id>.parquet`.
//!
//! Hive style, so DuckDB (`hive_partitioning = true`), pyarrow (`partitioning="hive"`),
//! polars (`hive_partitioning=True`) and Spark read the partition keys back as columns
//! without any extension.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use tracemill_schemas::TABLES;

/// The Hive name of the null partition: a label the bundle does not have (or an empty one).
pub const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// The catalog's directory under DEST.
pub const CATALOG_DIR: &str = "bundles";

/// Parse `--partition-by date,host` and check that every key can be a column of every
/// table: a name that readers keep (not starting with `_` or `.`, which pyarrow and Spark
/// skip as hidden), made of ASCII letters, digits and `_`, and not the name of a column
/// the tables already have.
pub fn parse_partition_keys(s: &str) -> Result<Vec<String>> {
    let mut keys: Vec<String> = Vec::new();
    for k in s.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        let valid = k.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            bail!(
                "partition key {k:?}: use a label name made of ASCII letters, digits and _, \
                 starting with a letter"
            );
        }
        if k == "bundle" || table_columns().any(|c| c == k) {
            bail!("partition key {k:?} is a column of the tables; a label of that name cannot be a partition key");
        }
        if keys.iter().any(|known| known == k) {
            bail!("partition key {k:?} is given twice");
        }
        keys.push(k.to_string());
    }
    Ok(keys)
}

fn table_columns() -> impl Iterator<Item = String> {
    TABLES.iter().flat_map(|t| {
        tracemill_schemas::arrow::by_name(t)
            .expect("every table has a schema")
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect::<Vec<_>>()
    })
}

/// Escape a partition value the way Hive does (`FileUtils.escapePathName`): `%XX` for
/// control characters and `"#%'*/:=?\^{[]` and DEL. An empty value is the null partition.
pub fn escape_value(v: &str) -> String {
    if v.is_empty() {
        return NULL_PARTITION.to_string();
    }
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        let special = c.is_ascii_control() || "\"#%'*/:=?\\^{[]".contains(c);
        if special {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The directory of a bundle's file under `<table>/`: `key=value/...` (relative, `/`
/// separated; empty without partition keys).
pub fn partition_dir(keys: &[String], labels: &BTreeMap<String, String>) -> String {
    keys.iter()
        .map(|k| {
            let v = labels
                .get(k)
                .map_or_else(|| NULL_PARTITION.to_string(), |v| escape_value(v));
            format!("{k}={v}")
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The longest file name most file systems allow (ext4, XFS, btrfs; S3 keys allow more,
/// but a dataset copied to disk must still work).
const MAX_NAME_BYTES: usize = 255;

/// Labels that cannot go into the dataset as they are: a reason, naming them. Checked
/// before a bundle is decoded, so that such a bundle fails (and is committed as failed,
/// with the reason) instead of being decoded again at every run and never committed.
///
/// - Two labels whose names differ only in case (`HOST`, `host`): DuckDB, Spark and Hive
///   take column names without case, so the catalog would hold two columns one query
///   cannot tell apart.
/// - A partition label whose `key=value` directory name is longer than a file name may be.
/// - A partition label whose value is `__HIVE_DEFAULT_PARTITION__`: readers take that
///   name for NULL, so the value would read back as a missing label.
pub fn check_labels(keys: &[String], labels: &BTreeMap<String, String>) -> Result<(), String> {
    let mut names: Vec<(String, &str)> = labels
        .keys()
        .map(|k| (k.to_lowercase(), k.as_str()))
        .collect();
    names.sort();
    for w in names.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(format!(
                "labels {:?} and {:?} differ only in case; DuckDB, Spark and Hive read column \
                 names without case, so they would be one column: rename one",
                w[0].1, w[1].1
            ));
        }
    }
    for k in keys {
        let Some(v) = labels.get(k) else { continue };
        if v == NULL_PARTITION {
            return Err(format!(
                "label {k:?} is {NULL_PARTITION:?}, the name readers take for a missing \
                 value: it would read back as NULL"
            ));
        }
        let name = format!("{k}={}", escape_value(v));
        if name.len() > MAX_NAME_BYTES {
            return Err(format!(
                "label {k:?} is {} bytes long: its partition directory `{k}=...` would be {} \
                 bytes, longer than a file name may be ({MAX_NAME_BYTES})",
                v.len(),
                name.len()
            ));
        }
    }
    Ok(())
}

/// Whether label `k` with value `v` can be a partition directory (see [`check_labels`]).
pub fn partition_value_ok(k: &str, v: &str) -> bool {
    v != NULL_PARTITION && k.len() + 1 + escape_value(v).len() <= MAX_NAME_BYTES
}

/// `<table>/<partition dir>/<id>.parquet`, relative to DEST, `/` separated.
pub fn table_file(table: &str, partition_dir: &str, id: &str) -> String {
    if partition_dir.is_empty() {
        format!("{table}/{id}.parquet")
    } else {
        format!("{table}/{partition_dir}/{id}.parquet")
    }
}

/// `bundles/<id>.parquet`: the bundle's catalog row.
pub fn catalog_file(id: &str) -> String {
    format!("{CATALOG_DIR}/{id}.parquet")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_paths() {
        let keys = parse_partition_keys("date, host").unwrap();
        let mut labels = BTreeMap::new();
        labels.insert("date".to_string(), "2026-11-23".to_string());
        let dir = partition_dir(&keys, &labels);
        assert_eq!(dir, "date=2026-11-23/host=__HIVE_DEFAULT_PARTITION__");
        assert_eq!(
            table_file("branches", &dir, "ab12"),
            "branches/date=2026-11-23/host=__HIVE_DEFAULT_PARTITION__/ab12.parquet"
        );
        assert_eq!(table_file("edges", "", "ab12"), "edges/ab12.parquet");
        labels.insert("host".to_string(), "a/b=c%".to_string());
        assert_eq!(
            partition_dir(&keys, &labels),
            "date=2026-11-23/host=a%2Fb%3Dc%25"
        );
        labels.insert("host".to_string(), String::new());
        assert!(partition_dir(&keys, &labels).ends_with("host=__HIVE_DEFAULT_PARTITION__"));
    }

    #[test]
    fn labels_that_cannot_be_partitions_or_columns_are_refused() {
        let keys = parse_partition_keys("host").unwrap();
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(check_labels(&keys, &labels(&[("host", "n7"), ("date", "x")])).is_ok());
        let e = check_labels(&keys, &labels(&[("HOST", "a"), ("host", "b")])).unwrap_err();
        assert!(
            e.contains("\"HOST\" and \"host\" differ only in case"),
            "{e}"
        );
        let e = check_labels(&keys, &labels(&[("host", NULL_PARTITION)])).unwrap_err();
        assert!(e.contains("read back as NULL"), "{e}");
        let long = "x".repeat(300);
        let e = check_labels(&keys, &labels(&[("host", &long)])).unwrap_err();
        assert!(e.contains("300 bytes long"), "{e}");
        // Escaping counts: 100 slashes are 300 bytes on disk.
        let slashes = "/".repeat(100);
        assert!(check_labels(&keys, &labels(&[("host", &slashes)])).is_err());
        // Labels that are not partition keys may be anything.
        assert!(check_labels(&[], &labels(&[("host", &long)])).is_ok());
    }

    #[test]
    fn partition_keys_are_checked() {
        assert!(parse_partition_keys("").unwrap().is_empty());
        for bad in ["_x", "a-b", "9a", "ip", "bundle", "kind", "host,host", "é"] {
            assert!(parse_partition_keys(bad).is_err(), "{bad}");
        }
    }
}
