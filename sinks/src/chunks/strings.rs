//! String columns whose rows already carry dictionary keys.
//!
//! `branches.kind`, `timing.kind` and ingest's constant `bundle` column are Arrow
//! dictionary arrays: each row is a small integer key into a handful of names. arrow-rs
//! writes such an array as if it were plain strings: it looks every row's string up again
//! in a hash table (its `Interner`) to find the Parquet dictionary index. That hash and
//! the `memcmp` behind it cost 17.5 ns per row and column (`encode-bench`), as much as
//! all the numeric columns of a row together, and ingest's `bundle` column paid it a
//! second time per row. Here the keys are remapped through a table as long as the
//! Arrow dictionary (a load per row). Statistics and bloom filters are not written, so
//! only string columns configured without them take this path ([`accepts`]).

use std::collections::HashMap;

use ::parquet::column::writer::ColumnCloseResult;
use ::parquet::errors::ParquetError;
use ::parquet::file::properties::{EnabledStatistics, WriterProperties};
use ::parquet::schema::types::{ColumnDescPtr, ColumnPath};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int8Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, Field};
use bytes::Bytes;

use super::{bit_width, page_rows, rle_hybrid, Chunk};

/// A non-null dictionary of strings with `Int8` or `Int32` keys, configured without
/// statistics and without a bloom filter.
pub(super) fn accepts(field: &Field, path: &ColumnPath, props: &WriterProperties) -> bool {
    let keyed_strings = match field.data_type() {
        DataType::Dictionary(k, v) => {
            matches!(**k, DataType::Int8 | DataType::Int32) && **v == DataType::Utf8
        }
        _ => false,
    };
    keyed_strings
        && !field.is_nullable()
        && props.statistics_enabled(path) == EnabledStatistics::None
        && props.bloom_filter_properties(path).is_none()
}

/// The chunk of `arrays` (dictionary arrays [`accepts`] took).
pub(super) fn encode(
    descr: ColumnDescPtr,
    props: &WriterProperties,
    arrays: &[ArrayRef],
) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
    let path = descr.path().clone();
    let dict = Dictionary::of(arrays)?;
    let width = bit_width(dict.values.len());
    let mut chunk = Chunk::new(&path, props)?;

    // The dictionary page: PLAIN byte arrays, a little-endian u32 length before each.
    let mut plain = Vec::new();
    for v in &dict.values {
        plain.extend_from_slice(&(v.len() as u32).to_le_bytes());
        plain.extend_from_slice(v);
    }
    chunk.dictionary(&plain, dict.values.len())?;

    // Data pages: the bit width, then the codes in the RLE/bit-packed hybrid (a non-null
    // flat column has no levels).
    let mut buf = Vec::new();
    for codes in dict.codes.chunks(page_rows(props, &path, width)) {
        buf.clear();
        buf.push(width);
        rle_hybrid(codes, width, &mut buf);
        chunk.data(&buf, codes.len())?;
    }
    chunk.finish(descr, props, |b| b)
}

/// The Parquet dictionary of a column: the distinct strings in order of first use, and
/// every row's index into them.
struct Dictionary {
    values: Vec<Vec<u8>>,
    codes: Vec<u32>,
}

/// Marks an Arrow key whose string has no Parquet index yet.
const UNSEEN: u32 = u32::MAX;

impl Dictionary {
    fn of(arrays: &[ArrayRef]) -> Result<Dictionary, ParquetError> {
        let mut d = Dictionary {
            values: Vec::new(),
            codes: Vec::with_capacity(arrays.iter().map(|a| a.len()).sum()),
        };
        let mut index: HashMap<Vec<u8>, u32> = HashMap::new();
        for a in arrays {
            // A key may point at a null string: the array's logical nulls count both.
            if a.logical_null_count() > 0 {
                return Err(ParquetError::General(
                    "nulls in a column declared non-null".into(),
                ));
            }
            match a.data_type() {
                DataType::Dictionary(k, _) if **k == DataType::Int8 => {
                    let a = a.as_dictionary::<Int8Type>();
                    let keys = a.keys().values().iter().map(|&k| k as i64);
                    d.add(keys, a.values(), &mut index)?;
                }
                DataType::Dictionary(k, _) if **k == DataType::Int32 => {
                    let a = a.as_dictionary::<Int32Type>();
                    let keys = a.keys().values().iter().map(|&k| k as i64);
                    d.add(keys, a.values(), &mut index)?;
                }
                other => {
                    return Err(ParquetError::General(format!(
                        "{other} is not a dictionary of strings with Int8 or Int32 keys"
                    )))
                }
            }
        }
        Ok(d)
    }

    /// Appends the codes of one array: `keys` into its Arrow dictionary `values`.
    fn add(
        &mut self,
        keys: impl Iterator<Item = i64>,
        values: &ArrayRef,
        index: &mut HashMap<Vec<u8>, u32>,
    ) -> Result<(), ParquetError> {
        let values = values.as_string_opt::<i32>().ok_or_else(|| {
            ParquetError::General("dictionary values are not Utf8 strings".into())
        })?;
        // The Parquet index of each Arrow key, found the first time the key is used.
        let mut remap = vec![UNSEEN; values.len()];
        for k in keys {
            let slot = usize::try_from(k)
                .ok()
                .and_then(|k| remap.get_mut(k))
                .ok_or_else(|| {
                    ParquetError::General(format!(
                        "dictionary key {k} out of range of {} values",
                        values.len()
                    ))
                })?;
            if *slot == UNSEEN {
                let s = values.value(k as usize).as_bytes();
                let next = self.values.len() as u32;
                *slot = *index.entry(s.to_vec()).or_insert_with(|| {
                    self.values.push(s.to_vec());
                    next
                });
            }
            self.codes.push(*slot);
        }
        Ok(())
    }
}

#[cfg(test)]
fn dictionary_array(keys: &[i8], names: &[&str]) -> ArrayRef {
    use arrow_array::{DictionaryArray, Int8Array, StringArray};
    std::sync::Arc::new(
        DictionaryArray::<Int8Type>::try_new(
            Int8Array::from(keys.to_vec()),
            std::sync::Arc::new(StringArray::from(names.to_vec())),
        )
        .expect("valid keys"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_first_use_across_batches_with_different_dictionaries() {
        let a = dictionary_array(&[2, 2, 0], &["x", "y", "z"]);
        let b = dictionary_array(&[0, 1, 1], &["y", "z"]);
        let d = Dictionary::of(&[a, b]).unwrap();
        let values: Vec<&[u8]> = d.values.iter().map(|v| v.as_slice()).collect();
        assert_eq!(values, [b"z".as_slice(), b"x", b"y"]);
        assert_eq!(d.codes, [0, 0, 1, 2, 0, 0]);
    }
}
