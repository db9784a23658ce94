//! A little-endian reader over a slice that knows the slice's offset in the file, so
//! that a short read is an error naming the file offset, never a panic.

use crate::error::Error;

#[derive(Clone, Debug)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    /// File offset of `data[0]`.
    base: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8], base: u64) -> Cursor<'a> {
        Cursor { data, pos: 0, base }
    }

    /// File offset of the next byte.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Error> {
        if self.remaining() < n {
            return Err(Error::truncated(
                self.offset(),
                what,
                n as u64,
                self.remaining() as u64,
            ));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The rest, whatever its length.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.data[self.pos..];
        self.pos = self.data.len();
        s
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Error> {
        let mut a = [0; N];
        a.copy_from_slice(self.bytes(N, what)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, Error> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, Error> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
}

/// A little-endian `u64` at `at` of a slice known to be long enough.
pub(crate) fn u64_at(data: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&data[at..at + 8]);
    u64::from_le_bytes(a)
}

/// A NUL-padded string field: the bytes before the first NUL (all of them without one).
pub(crate) fn c_string(field: &[u8]) -> &[u8] {
    match field.iter().position(|&b| b == 0) {
        Some(n) => &field[..n],
        None => field,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_reports_short_reads_at_their_offset() {
        let d = [1, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut c = Cursor::new(&d, 100);
        assert_eq!(c.u16("a").unwrap(), 1);
        assert_eq!(c.u32("b").unwrap(), 2);
        assert_eq!(c.u64("c").unwrap(), 3);
        assert_eq!(c.offset(), 114);
        let e = c.u32("d").unwrap_err();
        assert_eq!(e.offset(), 114);
        assert!(e.to_string().contains("d needs 4 bytes, 1 left"));
        // A failed read consumes nothing.
        assert_eq!(c.u8("e").unwrap(), 9);
        assert!(c.rest().is_empty());
    }

    #[test]
    fn c_string_stops_at_the_first_nul() {
        assert_eq!(c_string(b"ls\0\0\0\0\0\0"), b"ls");
        assert_eq!(c_string(b"noend"), b"noend");
        assert_eq!(c_string(b"\0x"), b"");
    }
}
