//! Small helpers: a fast hasher for address keys, column access, instruction lengths.

use anyhow::{anyhow, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{ArrowPrimitiveType, Int8Type};
use arrow_array::{Array, ArrayRef, PrimitiveArray, RecordBatch, StringArray};

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
    tracemill_sinks::convert::strings(c.as_ref()).map_err(|e| anyhow!("column {name}: {e}"))
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
        let values = tracemill_sinks::convert::strings(d.values().as_ref())
            .map_err(|e| anyhow!("column {name}: {e}"))?;
        let map: Vec<u8> = (0..values.len())
            .map(|i| {
                if values.is_null(i) {
                    u8::MAX
                } else {
                    from_name(values.value(i)).map_or(u8::MAX, &code)
                }
            })
            .collect();
        // Validity once per batch: `Array::is_null` per row through the trait object was
        // 6% of a flame graph's time.
        let nulls = c.nulls();
        let code_at = |i: usize, key: usize| {
            if nulls.is_some_and(|n| n.is_null(i)) {
                u8::MAX
            } else {
                map.get(key).copied().unwrap_or(u8::MAX)
            }
        };
        // The tables' own key type, without `normalized_keys` allocating a vector of
        // `usize` per batch (a negative key maps past the end, to `u8::MAX`).
        if let Some(d) = c.as_dictionary_opt::<Int8Type>() {
            let keys = d.keys().values();
            return Ok((0..c.len()).map(|i| code_at(i, keys[i] as usize)).collect());
        }
        let keys = d.normalized_keys();
        return Ok((0..c.len()).map(|i| code_at(i, keys[i])).collect());
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

/// 1234567 -> "1,234,567": counts in text and HTML reports and the decode summary (CSV
/// and JSON keep plain numbers, for programs).
pub fn group(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
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

/// A growable array kept in chunks of 65,536 elements: growing never moves what is there.
/// A `Vec` of tens of millions of trie nodes was copied at every doubling (jemalloc's
/// large `realloc` copies), and the kernel zeroed every new copy's pages: a third of a
/// flame graph's CPU time on the 1 GiB synthetic trace was the system's. A chunk is
/// filled as it grows, not made full of defaults first: that was a `memset` of every
/// new page before the first real write to it (0.2% of that flame graph's time, in the
/// walk's thread).
pub struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T: Copy + Default> Chunked<T> {
    const SHIFT: u32 = 16;
    const MASK: usize = (1 << Self::SHIFT) - 1;

    pub fn new() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, v: T) {
        if self.len & Self::MASK == 0 {
            self.chunks.push(Vec::with_capacity(1 << Self::SHIFT));
        }
        self.chunks[self.len >> Self::SHIFT].push(v);
        self.len += 1;
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

impl<T: Copy + Default> Default for Chunked<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default> std::ops::Index<usize> for Chunked<T> {
    type Output = T;

    #[inline]
    fn index(&self, i: usize) -> &T {
        assert!(i < self.len, "index {i} past the length {}", self.len);
        &self.chunks[i >> Self::SHIFT][i & Self::MASK]
    }
}

impl<T: Copy + Default> std::ops::IndexMut<usize> for Chunked<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        assert!(i < self.len, "index {i} past the length {}", self.len);
        &mut self.chunks[i >> Self::SHIFT][i & Self::MASK]
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{DictionaryArray, Int32Array, Int8Array};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn code(name: &str) -> Option<u8> {
        ["a", "b", "c"]
            .iter()
            .position(|n| *n == name)
            .map(|p| p as u8)
    }

    fn batch(col: ArrayRef) -> RecordBatch {
        let schema = Schema::new(vec![Field::new("kind", col.data_type().clone(), true)]);
        RecordBatch::try_new(Arc::new(schema), vec![col]).unwrap()
    }

    #[test]
    fn group_puts_separators_every_three_digits() {
        for (n, t) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (1447668, "1,447,668"),
            (u64::MAX, "18,446,744,073,709,551,615"),
        ] {
            assert_eq!(group(n), t);
        }
    }

    #[test]
    fn chunked_holds_what_is_pushed_across_chunks() {
        let mut c = Chunked::new();
        assert!(c.is_empty());
        let n = 3 * 65_536 + 17;
        for i in 0..n {
            c.push(i as u64 * 3);
        }
        assert_eq!(c.len(), n);
        assert_eq!(c[0], 0);
        assert_eq!(c[65_535], 65_535 * 3);
        assert_eq!(c[65_536], 65_536 * 3);
        c[n - 1] += 1;
        assert_eq!(c[n - 1], (n as u64 - 1) * 3 + 1);
        assert_eq!(c.iter().count(), n);
        assert_eq!(
            c.iter().copied().sum::<u64>(),
            3 * (n as u64) * (n as u64 - 1) / 2 + 1
        );
        let r = std::panic::catch_unwind(|| c[n]);
        assert!(r.is_err(), "an index past the length is refused");
    }

    #[test]
    fn kind_codes_of_every_key_type_with_nulls_and_unknown_names() {
        // Values "c", "x" (unknown), "a", and a null value; keys with a null row.
        let values: ArrayRef = Arc::new(StringArray::from(vec![
            Some("c"),
            Some("x"),
            Some("a"),
            None,
        ]));
        let want = vec![2, u8::MAX, 0, u8::MAX, u8::MAX, 2];
        let k8 = Int8Array::from(vec![Some(0), Some(1), Some(2), None, Some(3), Some(0)]);
        let k32 = Int32Array::from(vec![Some(0), Some(1), Some(2), None, Some(3), Some(0)]);
        let d8: ArrayRef = Arc::new(DictionaryArray::try_new(k8, values.clone()).unwrap());
        let d32: ArrayRef = Arc::new(DictionaryArray::try_new(k32, values).unwrap());
        let plain: ArrayRef = Arc::new(StringArray::from(vec![
            Some("c"),
            Some("x"),
            Some("a"),
            None,
            None,
            Some("c"),
        ]));
        for col in [d8, d32, plain] {
            let dt = col.data_type().clone();
            let got = kind_codes(&batch(col), "kind", code, |c| c).unwrap();
            assert_eq!(got, want, "{dt}");
        }
    }
}
