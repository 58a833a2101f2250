//! A checked reader and writer over little-endian bytes, for message formats written once:
//! each field is read in the order it is written, a read past the end is a [`CodecError`]
//! naming the offset it needed, and a decoder ends with [`Reader::finish`], which refuses
//! trailing bytes. Counts read from the wire are checked against a bound and against the
//! bytes left before anything is allocated for them ([`Reader::count`]).
//!
//! [`Writer`] appends to a vector; [`SliceWriter`] fills a caller's buffer and reports a
//! field that did not fit at [`SliceWriter::finish`]. Headers parsed once per packet after a
//! single length check read their fields with [`u16_at`], [`u32_at`] and [`u64_at`] (and are
//! written with [`put_u16`], [`put_u32`] and [`put_u64`] at the same named offsets).

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

    /// Fails unless `n` more bytes are there; reads nothing.
    pub fn need(&self, n: usize) -> Result<(), CodecError> {
        if n > self.left() {
            return Err(CodecError::Short {
                need: self.at.saturating_add(n),
                have: self.b.len(),
            });
        }
        Ok(())
    }

    /// Every byte not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
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
        self.need(n.saturating_mul(item_bytes))?;
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

/// The integer fields of a writer, little-endian, each through its `bytes` method (the
/// two writers differ only in where the bytes go).
macro_rules! int_fields {
    () => {
        int_fields!(u8, u16, u32, u64, i64);
    };
    ($($t:ident),+) => {
        $(
            pub fn $t(&mut self, v: $t) -> &mut Self {
                self.bytes(&v.to_le_bytes())
            }
        )+
    };
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

    int_fields!();

    /// Overwrites the `u16` at byte `at` of the vector (a count written before its items).
    pub fn set_u16(&mut self, at: usize, v: u16) -> &mut Self {
        self.b[at..at + 2].copy_from_slice(&v.to_le_bytes());
        self
    }
}

/// Fills a caller's buffer with fields, in the order a [`Reader`] reads them. A field that
/// does not fit is not written, nor is anything after it, and [`SliceWriter::finish`]
/// returns `None`.
#[derive(Debug)]
pub struct SliceWriter<'b> {
    b: &'b mut [u8],
    at: usize,
    overflow: bool,
}

impl<'b> SliceWriter<'b> {
    pub fn new(b: &'b mut [u8]) -> SliceWriter<'b> {
        SliceWriter {
            b,
            at: 0,
            overflow: false,
        }
    }

    /// Bytes written.
    pub fn len(&self) -> usize {
        self.at
    }

    pub fn is_empty(&self) -> bool {
        self.at == 0
    }

    /// Bytes of the buffer not written yet (0 after a field did not fit).
    pub fn room(&self) -> usize {
        if self.overflow {
            0
        } else {
            self.b.len() - self.at
        }
    }

    pub fn bytes(&mut self, s: &[u8]) -> &mut Self {
        if s.len() > self.room() {
            self.overflow = true;
        } else {
            self.b[self.at..self.at + s.len()].copy_from_slice(s);
            self.at += s.len();
        }
        self
    }

    int_fields!();

    /// Overwrites the `u16` written at byte `at` (a count written before its items).
    pub fn set_u16(&mut self, at: usize, v: u16) -> &mut Self {
        match at.checked_add(2).filter(|&e| e <= self.at) {
            Some(e) => self.b[at..e].copy_from_slice(&v.to_le_bytes()),
            None => self.overflow = true,
        }
        self
    }

    /// The bytes written, or `None` if a field did not fit.
    pub fn finish(self) -> Option<usize> {
        (!self.overflow).then_some(self.at)
    }
}

/// Declares a wire "kind" enum, its variants with their docs and numbers, and its checked
/// `TryFrom` of the number, which refuses any other number `k` with `$err::$unknown(k)`.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident: $repr:ident, unknown $err:ident::$unknown:ident {
            $($(#[$vmeta:meta])* $variant:ident = $value:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr($repr)]
        $vis enum $name {
            $($(#[$vmeta])* $variant = $value,)+
        }

        impl TryFrom<$repr> for $name {
            type Error = $err;

            fn try_from(v: $repr) -> Result<$name, $err> {
                match v {
                    $($value => Ok($name::$variant),)+
                    k => Err($err::$unknown(k)),
                }
            }
        }
    };
}
pub(crate) use wire_enum;

/// The `u16` at byte `at` of `b`, for a fixed header whose length the caller has checked
/// (out of range panics).
#[inline]
pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The `u32` at byte `at` of `b` (see [`u16_at`]).
#[inline]
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The `u64` at byte `at` of `b` (see [`u16_at`]).
#[inline]
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Writes `v` at byte `at` of `b`: the writing side of [`u16_at`], for a fixed header whose
/// field offsets are named once and used by both its parser and its writer.
#[inline]
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` at byte `at` of `b` (see [`put_u16`]).
#[inline]
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` at byte `at` of `b` (see [`put_u16`]).
#[inline]
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
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

        let mut r = Reader::new(&b);
        assert_eq!(r.need(6), Ok(()));
        assert_eq!(r.need(7), Err(CodecError::Short { need: 7, have: 6 }));
        r.u16().unwrap();
        assert_eq!(r.rest(), &[0, 0, 0, 0]);
        assert_eq!(r.finish(), Ok(()));
        assert_eq!((u16_at(&b, 0), u32_at(&b, 2)), (10, 0));
        put_u16(&mut b, 0, 3);
        put_u32(&mut b, 2, 5);
        assert_eq!((u16_at(&b, 0), u32_at(&b, 2)), (3, 5));
        let mut c = [0u8; 9];
        put_u64(&mut c, 1, u64::MAX - 1);
        assert_eq!((c[0], u64_at(&c, 1)), (0, u64::MAX - 1));
    }

    #[test]
    fn slice_writer_stops_at_the_first_field_that_does_not_fit() {
        let mut buf = [0u8; 7];
        let mut w = SliceWriter::new(&mut buf);
        w.u16(0).u32(9);
        assert_eq!(w.room(), 1);
        w.set_u16(0, 3);
        assert_eq!(w.finish(), Some(6));
        assert_eq!(buf[..6], [3, 0, 9, 0, 0, 0]);
        assert_eq!(u32_at(&buf, 2), 9);

        let mut w = SliceWriter::new(&mut buf);
        w.u32(1).u32(2).u8(3);
        assert_eq!((w.len(), w.room()), (4, 0));
        assert_eq!(w.finish(), None);
    }
}
