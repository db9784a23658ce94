//! The little of Thrift's compact protocol the footer needs: walking a struct field by
//! field to find where a field starts and ends, reading an integer field, and writing the
//! few headers and integers that are only known when the file is closed.
//!
//! Everything else in the footer is serialized by arrow-rs; this only cuts its output
//! into pieces and joins them again. The encoding is the protocol's own (Apache Thrift,
//! "Thrift Compact protocol encoding", doc/specs/thrift-compact-protocol.md).

use ::parquet::errors::ParquetError;

/// Element and field types of the compact protocol.
pub(super) const BOOL_TRUE: u8 = 1;
pub(super) const BOOL_FALSE: u8 = 2;
pub(super) const BYTE: u8 = 3;
pub(super) const I16: u8 = 4;
pub(super) const I32: u8 = 5;
pub(super) const I64: u8 = 6;
pub(super) const DOUBLE: u8 = 7;
pub(super) const BINARY: u8 = 8;
pub(super) const LIST: u8 = 9;
pub(super) const SET: u8 = 10;
pub(super) const MAP: u8 = 11;
pub(super) const STRUCT: u8 = 12;

/// Structs nest this deep at most in Parquet's metadata (FileMetaData > RowGroup >
/// ColumnChunk > ColumnMetaData > Statistics); a deeper one is not arrow-rs's output.
const MAX_DEPTH: u32 = 16;

fn err(what: &str, at: usize) -> ParquetError {
    ParquetError::General(format!(
        "footer: {what} at byte {at} of the serialized metadata"
    ))
}

/// A position in serialized metadata, read forward.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
}

/// One field's header: its id and type; `None` at the struct's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Field {
    pub(super) id: i16,
    pub(super) kind: u8,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    fn byte(&mut self) -> Result<u8, ParquetError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| err("unexpected end", self.pos))?;
        self.pos += 1;
        Ok(b)
    }

    pub(super) fn varint(&mut self) -> Result<u64, ParquetError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(err("varint longer than 10 bytes", self.pos))
    }

    pub(super) fn zigzag(&mut self) -> Result<i64, ParquetError> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn skip(&mut self, n: usize) -> Result<(), ParquetError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| err("value past the end", self.pos))?;
        self.pos = end;
        Ok(())
    }

    /// The next field's header (after the previous field, whose id was `last`), or `None`
    /// at the struct's stop byte (which is consumed).
    pub(super) fn field(&mut self, last: i16) -> Result<Option<Field>, ParquetError> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let kind = b & 0x0f;
        let delta = (b >> 4) as i16;
        let id = if delta == 0 {
            i16::try_from(self.zigzag()?).map_err(|_| err("field id", self.pos))?
        } else {
            last.checked_add(delta)
                .ok_or_else(|| err("field id", self.pos))?
        };
        Ok(Some(Field { id, kind }))
    }

    /// A list (or set) header: the element type and the count.
    pub(super) fn list(&mut self) -> Result<(u8, usize), ParquetError> {
        let b = self.byte()?;
        let kind = b & 0x0f;
        let mut n = (b >> 4) as u64;
        if n == 15 {
            n = self.varint()?;
        }
        let n = usize::try_from(n).map_err(|_| err("list size", self.pos))?;
        Ok((kind, n))
    }

    /// Skips a value of type `kind` (a field's, whose booleans are in the header).
    pub(super) fn skip_field_value(&mut self, kind: u8) -> Result<(), ParquetError> {
        match kind {
            BOOL_TRUE | BOOL_FALSE => Ok(()),
            _ => self.skip_value(kind, 0),
        }
    }

    /// Skips a value of type `kind` as an element of a list (booleans are one byte).
    fn skip_value(&mut self, kind: u8, depth: u32) -> Result<(), ParquetError> {
        if depth > MAX_DEPTH {
            return Err(err("nesting too deep", self.pos));
        }
        match kind {
            BOOL_TRUE | BOOL_FALSE | BYTE => self.skip(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.skip(8),
            BINARY => {
                let n = self.varint()?;
                self.skip(usize::try_from(n).map_err(|_| err("binary length", self.pos))?)
            }
            LIST | SET => {
                let (k, n) = self.list()?;
                for _ in 0..n {
                    self.skip_value(k, depth + 1)?;
                }
                Ok(())
            }
            MAP => {
                let n = self.varint()?;
                if n > 0 {
                    let kv = self.byte()?;
                    for _ in 0..n {
                        self.skip_value(kv >> 4, depth + 1)?;
                        self.skip_value(kv & 0x0f, depth + 1)?;
                    }
                }
                Ok(())
            }
            STRUCT => self.skip_struct(depth + 1),
            _ => Err(err("unknown type", self.pos)),
        }
    }

    /// Skips the rest of a struct, through its stop byte.
    pub(super) fn skip_struct(&mut self, depth: u32) -> Result<(), ParquetError> {
        let mut last = 0;
        while let Some(f) = self.field(last)? {
            match f.kind {
                BOOL_TRUE | BOOL_FALSE => {}
                k => self.skip_value(k, depth)?,
            }
            last = f.id;
        }
        Ok(())
    }
}

/// Appends a field header for field `id` of type `kind`, after the field `last`.
pub(super) fn write_field(out: &mut Vec<u8>, last: i16, id: i16, kind: u8) {
    let delta = id - last;
    if (1..=15).contains(&delta) {
        out.push(((delta as u8) << 4) | kind);
    } else {
        out.push(kind);
        write_zigzag(out, i64::from(id));
    }
}

/// Appends a list header of `n` elements of type `kind`.
pub(super) fn write_list(out: &mut Vec<u8>, kind: u8, n: usize) {
    if n < 15 {
        out.push(((n as u8) << 4) | kind);
    } else {
        out.push(0xf0 | kind);
        write_varint(out, n as u64);
    }
}

pub(super) fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn write_zigzag(out: &mut Vec<u8>, v: i64) {
    write_varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_zigzag_varints_as_the_compact_protocol_writes_them() {
        for v in [
            0i64,
            -1,
            1,
            63,
            -64,
            64,
            300,
            i64::MAX,
            i64::MIN,
            5_380_110_722,
        ] {
            let mut out = Vec::new();
            write_zigzag(&mut out, v);
            assert_eq!(Cursor::new(&out).zigzag().unwrap(), v);
        }
        let mut out = Vec::new();
        write_zigzag(&mut out, -1);
        assert_eq!(out, [1]);
        out.clear();
        write_zigzag(&mut out, 64);
        assert_eq!(out, [0x80, 0x01]);
    }

    #[test]
    fn field_headers_use_the_short_form_for_deltas_up_to_15() {
        let mut out = Vec::new();
        write_field(&mut out, 3, 4, I64);
        write_field(&mut out, 4, 20, I32);
        assert_eq!(out, [0x16, 0x05, 40]);
        let mut c = Cursor::new(&out);
        assert_eq!(c.field(3).unwrap(), Some(Field { id: 4, kind: I64 }));
        assert_eq!(c.field(4).unwrap(), Some(Field { id: 20, kind: I32 }));
    }

    #[test]
    fn a_struct_is_skipped_whole_and_bytes_cut_short_are_an_error_not_a_panic() {
        // { 1: i32 7, 2: list<binary> ["ab"], 3: struct { 1: true }, 5: map<i32,i32>{1:2} }
        let mut s = Vec::new();
        write_field(&mut s, 0, 1, I32);
        write_zigzag(&mut s, 7);
        write_field(&mut s, 1, 2, LIST);
        write_list(&mut s, BINARY, 1);
        s.extend([2, b'a', b'b']);
        write_field(&mut s, 2, 3, STRUCT);
        write_field(&mut s, 0, 1, BOOL_TRUE);
        s.push(0);
        write_field(&mut s, 3, 5, MAP);
        s.extend([1, (I32 << 4) | I32, 2, 4]);
        s.push(0);
        s.push(0xaa);
        let mut c = Cursor::new(&s);
        c.skip_struct(0).unwrap();
        assert_eq!(c.pos, s.len() - 1);
        for cut in 0..s.len() - 1 {
            assert!(
                Cursor::new(&s[..cut]).skip_struct(0).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn long_lists_carry_their_size_after_the_header() {
        let mut out = Vec::new();
        write_list(&mut out, STRUCT, 23_130);
        let mut c = Cursor::new(&out);
        assert_eq!(c.list().unwrap(), (STRUCT, 23_130));
        out.clear();
        write_list(&mut out, STRUCT, 14);
        assert_eq!(out, [0xec]);
    }
}
