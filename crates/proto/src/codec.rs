//! A checked reader and writer over little-endian bytes, for message formats written once:
//! each field is read in the order it is written, a read past the end is a [`CodecError`]
//! naming the offset it needed, and a decoder ends with [`Reader::finish`], which refuses
//! trailing bytes. Counts read from the wire are checked against a bound and against the
//! bytes left before anything is allocated for them ([`Reader::count`]).

use thiserror::Error;

/// Why bytes did not decode.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum CodecError {
    #[error("message ends at byte {have}, a field needs {need}")]
    Short { need: usize, have: usize },
    #[error("{0} bytes after the last field")]
    Trailing(usize),
    #[error("count {count} exceeds its bound {max}")]
    Count { count: usize, max: usize },
}

/// Reads fields in order from a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }

    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.b.len() - self.at
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(CodecError::Short {
                need: self.at.saturating_add(n),
                have: self.b.len(),
            })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, CodecError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// A `u16` count of items of at least `item_bytes` each: refused above `max`, or when the
    /// bytes left cannot hold that many items.
    pub fn count(&mut self, max: usize, item_bytes: usize) -> Result<usize, CodecError> {
        let n = self.u16()? as usize;
        if n > max {
            return Err(CodecError::Count { count: n, max });
        }
        let need = n.saturating_mul(item_bytes);
        if need > self.left() {
            return Err(CodecError::Short {
                need: self.at.saturating_add(need),
                have: self.b.len(),
            });
        }
        Ok(n)
    }

    /// Ends the decoding: every byte must have been read.
    pub fn finish(self) -> Result<(), CodecError> {
        match self.left() {
            0 => Ok(()),
            n => Err(CodecError::Trailing(n)),
        }
    }
}

/// Appends fields to a byte vector, in the order a [`Reader`] reads them.
#[derive(Debug)]
pub struct Writer<'b> {
    b: &'b mut Vec<u8>,
}

impl<'b> Writer<'b> {
    pub fn new(b: &'b mut Vec<u8>) -> Writer<'b> {
        Writer { b }
    }

    /// Bytes in the vector, including what was there before.
    pub fn len(&self) -> usize {
        self.b.len()
    }

    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }

    pub fn bytes(&mut self, s: &[u8]) -> &mut Self {
        self.b.extend_from_slice(s);
        self
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.b.push(v);
        self
    }

    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_bad_input_is_named() {
        let mut b = Vec::new();
        Writer::new(&mut b)
            .u8(7)
            .u16(2)
            .u32(9)
            .u64(u64::MAX)
            .i64(-5);
        let mut r = Reader::new(&b);
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.u16(), Ok(2));
        assert_eq!(r.u32(), Ok(9));
        assert_eq!(r.u64(), Ok(u64::MAX));
        assert_eq!(r.i64(), Ok(-5));
        assert_eq!(r.clone().finish(), Ok(()));
        assert_eq!(r.u8(), Err(CodecError::Short { need: 24, have: 23 }));

        let mut r = Reader::new(&b[..2]);
        r.u8().unwrap();
        assert_eq!(r.finish(), Err(CodecError::Trailing(1)));

        // A count larger than its bound, and one larger than the bytes left.
        let mut b = Vec::new();
        Writer::new(&mut b).u16(10).u32(0);
        assert_eq!(
            Reader::new(&b).count(4, 1),
            Err(CodecError::Count { count: 10, max: 4 })
        );
        assert_eq!(
            Reader::new(&b).count(100, 1),
            Err(CodecError::Short { need: 12, have: 6 })
        );
        assert_eq!(Reader::new(&b).count(100, 0), Ok(10));
    }
}
