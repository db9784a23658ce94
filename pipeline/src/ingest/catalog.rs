//! The catalog: `DEST/bundles/<bundle-id>.parquet`, one file of one row per bundle.
//!
//! One file per bundle, written last, is what makes a bundle's commit atomic without a
//! shared file: publishing one object (a rename on a file system, a PUT on S3) is atomic
//! everywhere, appending to a shared table is not, and shards on several machines never
//! write the same file. Readers read all rows with one glob
//! (`read_parquet('DEST/bundles/*.parquet', union_by_name = true)`: label columns differ
//! between bundles).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// `ok` or `failed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Failed,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
        }
    }
}

/// One bundle's row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub bundle: String,
    pub source: String,
    pub labels: BTreeMap<String, String>,
    pub status: Status,
    pub error: Option<String>,
    pub trace_bytes: Option<u64>,
    pub branches: Option<u64>,
    pub instructions: Option<u64>,
    pub gaps: Option<u64>,
    pub errors: Option<u64>,
    pub seconds: f64,
    pub tracemill_version: String,
}

/// The catalog's fixed columns; a label of one of these names becomes `label_<name>`.
pub const FIXED: [&str; 11] = [
    "bundle",
    "source",
    "status",
    "error",
    "trace_bytes",
    "branches",
    "instructions",
    "gaps",
    "errors",
    "seconds",
    "tracemill_version",
];

/// The column name of label `key`.
pub fn label_column(key: &str) -> String {
    if FIXED.contains(&key) || key.starts_with("label_") {
        format!("label_{key}")
    } else {
        key.to_string()
    }
}

impl Row {
    /// The row as a one-row batch: `bundle`, `source`, the labels (sorted by name), then
    /// `status`, `error`, `trace_bytes`, `branches`, `instructions`, `gaps`, `errors`,
    /// `seconds`, `tracemill_version`.
    pub fn to_batch(&self) -> Result<RecordBatch> {
        let mut fields = Vec::new();
        let mut cols: Vec<ArrayRef> = Vec::new();
        let mut s = |name: &str, v: Option<&str>, nullable: bool| {
            fields.push(Field::new(name, DataType::Utf8, nullable));
            cols.push(Arc::new(StringArray::from(vec![v])));
        };
        s("bundle", Some(&self.bundle), false);
        s("source", Some(&self.source), false);
        for (k, v) in &self.labels {
            s(&label_column(k), Some(v), true);
        }
        s("status", Some(self.status.name()), false);
        s("error", self.error.as_deref(), true);
        for (name, v) in [
            ("trace_bytes", self.trace_bytes),
            ("branches", self.branches),
            ("instructions", self.instructions),
            ("gaps", self.gaps),
            ("errors", self.errors),
        ] {
            fields.push(Field::new(name, DataType::UInt64, true));
            cols.push(Arc::new(UInt64Array::from(vec![v])));
        }
        fields.push(Field::new("seconds", DataType::Float64, false));
        cols.push(Arc::new(Float64Array::from(vec![self.seconds])));
        fields.push(Field::new("tracemill_version", DataType::Utf8, false));
        cols.push(Arc::new(StringArray::from(vec![self
            .tracemill_version
            .as_str()])));
        Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?)
    }

    /// The row as a small Parquet file.
    pub fn to_parquet(&self) -> Result<Vec<u8>> {
        let batch = self.to_batch()?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props))?;
        w.write(&batch)?;
        w.close()?;
        Ok(buf)
    }
}

/// The `status` of a catalog file's row.
pub fn read_status(bytes: bytes::Bytes) -> Result<Status> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .context("not a Parquet file")?
        .build()?;
    for b in reader {
        let b = b?;
        let col = b.column_by_name("status").context("no status column")?;
        let col = col
            .as_string_opt::<i32>()
            .context("the status column is not a string")?;
        if col.is_empty() || col.is_null(0) {
            continue;
        }
        return match col.value(0) {
            "ok" => Ok(Status::Ok),
            "failed" => Ok(Status::Failed),
            other => anyhow::bail!("unknown status {other:?}"),
        };
    }
    anyhow::bail!("no row")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_round_trips_its_status_and_labels_become_columns() {
        let mut labels = BTreeMap::new();
        labels.insert("host".to_string(), "n1".to_string());
        labels.insert("status".to_string(), "prod".to_string());
        let row = Row {
            bundle: "ab".into(),
            source: "/x".into(),
            labels,
            status: Status::Failed,
            error: Some("bad".into()),
            trace_bytes: Some(3),
            branches: None,
            instructions: None,
            gaps: None,
            errors: None,
            seconds: 0.5,
            tracemill_version: "0.1.0".into(),
        };
        let b = row.to_batch().unwrap();
        let names: Vec<_> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            &names[..5],
            ["bundle", "source", "host", "label_status", "status"]
        );
        let bytes = bytes::Bytes::from(row.to_parquet().unwrap());
        assert_eq!(read_status(bytes).unwrap(), Status::Failed);
        assert!(read_status(bytes::Bytes::from_static(b"junk")).is_err());
    }
}
