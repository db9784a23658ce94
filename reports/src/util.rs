//! Small helpers: a fast hasher for address keys, column access, instruction lengths.

use anyhow::{anyhow, Result};
use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, RecordBatch, StringArray};
use arrow::datatypes::{ArrowPrimitiveType, DataType};

/// Maps keyed by addresses and ids: the per-row maps of the reports are on the hot path,
/// where SipHash would cost more than the rest of the row (the decoder's hasher).
pub use tracemill_decode::block::AddrMap;

/// A primitive column by name, with the type the schema promises.
pub fn col<'a, T: ArrowPrimitiveType>(
    b: &'a RecordBatch,
    name: &str,
) -> Result<&'a PrimitiveArray<T>> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| anyhow!("column {name} missing"))?;
    c.as_primitive_opt::<T>().ok_or_else(|| {
        anyhow!(
            "column {name}: type {} is not the expected one",
            c.data_type()
        )
    })
}

/// A string or dictionary-of-strings column, as plain strings (nulls stay null).
pub fn strings(b: &RecordBatch, name: &str) -> Result<StringArray> {
    let c: &ArrayRef = b
        .column_by_name(name)
        .ok_or_else(|| anyhow!("column {name} missing"))?;
    let s = arrow::compute::cast(c, &DataType::Utf8).map_err(|e| anyhow!("column {name}: {e}"))?;
    Ok(s.as_string::<i32>().clone())
}

/// A `kind` column as enum codes (`u8::MAX` for null or an unknown name). The tables'
/// dictionaries are small: each dictionary value is looked up once per batch.
pub fn kind_codes<E>(
    b: &RecordBatch,
    name: &str,
    from_name: impl Fn(&str) -> Option<E>,
    code: impl Fn(E) -> u8,
) -> Result<Vec<u8>> {
    let c: &ArrayRef = b
        .column_by_name(name)
        .ok_or_else(|| anyhow!("column {name} missing"))?;
    if let Some(d) = c.as_any_dictionary_opt() {
        let values = arrow::compute::cast(d.values(), &DataType::Utf8)
            .map_err(|e| anyhow!("column {name}: {e}"))?;
        let values = values.as_string::<i32>();
        let map: Vec<u8> = (0..values.len())
            .map(|i| {
                if values.is_null(i) {
                    u8::MAX
                } else {
                    from_name(values.value(i)).map_or(u8::MAX, &code)
                }
            })
            .collect();
        let keys = d.normalized_keys();
        return Ok((0..c.len())
            .map(|i| {
                if c.is_null(i) {
                    u8::MAX
                } else {
                    map.get(keys[i]).copied().unwrap_or(u8::MAX)
                }
            })
            .collect());
    }
    let s = strings(b, name)?;
    Ok((0..s.len())
        .map(|i| {
            if s.is_null(i) {
                u8::MAX
            } else {
                from_name(s.value(i)).map_or(u8::MAX, &code)
            }
        })
        .collect())
}

/// Length in bytes of the instruction at the start of `code` (0 if it does not decode).
pub fn insn_len(code: &[u8], ip: u64) -> usize {
    let mut d = iced_x86::Decoder::with_ip(64, code, ip, iced_x86::DecoderOptions::NONE);
    let i = d.decode();
    if i.is_invalid() {
        0
    } else {
        i.len()
    }
}

/// (address, length) of the instructions from `start` through `end` (inclusive), at
/// most `max` of them; `None` when the bytes do not decode up to `end`.
pub fn block_insns(code: &[u8], start: u64, end: u64, max: usize) -> Option<Vec<(u64, u8)>> {
    let mut d = iced_x86::Decoder::with_ip(64, code, start, iced_x86::DecoderOptions::NONE);
    let mut out = Vec::new();
    while d.can_decode() && out.len() < max {
        let ip = d.ip();
        let i = d.decode();
        if i.is_invalid() {
            return None;
        }
        out.push((ip, i.len() as u8));
        if ip >= end {
            return (ip == end).then_some(out);
        }
    }
    None
}

/// Escape text for HTML and SVG.
pub fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}
