use super::WireError;
use crate::codec::{u16_at, u32_at};

pub const RECORD_HEADER_BYTES: usize = 4;
pub const FRAG_EXTRA_BYTES: usize = 12;
/// The record is one fragment of a longer message.
pub const RECORD_FLAG_FRAG: u8 = 0x01;

/// Where a fragment sits in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// The sender's identifier for the whole message.
    pub msg_id: u32,
    pub index: u16,
    pub count: u16,
    /// Length of the whole message.
    pub total_len: u32,
}

/// One message (or fragment of one) packed in a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub fragment: Option<Fragment>,
    pub payload: &'a [u8],
}

impl Record<'_> {
    /// Bytes this record takes in a packet.
    pub fn encoded_len(payload_len: usize, fragment: bool) -> usize {
        RECORD_HEADER_BYTES + if fragment { FRAG_EXTRA_BYTES } else { 0 } + payload_len
    }
}

/// Iterates over the records of a body; yields an error once and then stops if a record is
/// malformed. Use [`Records::validate`] to check a whole body before acting on any of it.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Records<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Records {
            rest: bytes,
            failed: false,
        }
    }

    /// Checks every record and returns how many there are.
    pub fn validate(bytes: &'a [u8]) -> Result<usize, WireError> {
        let mut n = 0;
        for r in Records::new(bytes) {
            r?;
            n += 1;
        }
        Ok(n)
    }

    fn decode(&mut self) -> Result<Record<'a>, WireError> {
        let b = self.rest;
        if b.len() < RECORD_HEADER_BYTES {
            return Err(WireError::RecordOverrun);
        }
        let len = u16_at(b, 0) as usize;
        let flags = b[2];
        if flags & !RECORD_FLAG_FRAG != 0 {
            return Err(WireError::RecordUnknownFlags(flags & !RECORD_FLAG_FRAG));
        }
        if b[3] != 0 {
            return Err(WireError::ReservedNotZero);
        }
        let mut at = RECORD_HEADER_BYTES;
        let fragment = if flags & RECORD_FLAG_FRAG != 0 {
            if b.len() < at + FRAG_EXTRA_BYTES {
                return Err(WireError::RecordOverrun);
            }
            let f = Fragment {
                msg_id: u32_at(b, at),
                index: u16_at(b, at + 4),
                count: u16_at(b, at + 6),
                total_len: u32_at(b, at + 8),
            };
            at += FRAG_EXTRA_BYTES;
            if f.count == 0 {
                return Err(WireError::FragmentCountZero);
            }
            if f.index >= f.count {
                return Err(WireError::FragmentIndexOutOfRange);
            }
            if len as u64 > f.total_len as u64 {
                return Err(WireError::FragmentLongerThanMessage);
            }
            Some(f)
        } else {
            None
        };
        if b.len() < at + len {
            return Err(WireError::RecordOverrun);
        }
        let payload = &b[at..at + len];
        self.rest = &b[at + len..];
        Ok(Record { fragment, payload })
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, WireError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let r = self.decode();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }
}

/// Writes a record at the start of `out`; returns bytes written. The caller has checked room.
pub(crate) fn write_record(out: &mut [u8], payload: &[u8], fragment: Option<Fragment>) -> usize {
    out[0..2].copy_from_slice(&(payload.len() as u16).to_le_bytes());
    out[2] = if fragment.is_some() {
        RECORD_FLAG_FRAG
    } else {
        0
    };
    out[3] = 0;
    let mut at = RECORD_HEADER_BYTES;
    if let Some(f) = fragment {
        out[at..at + 4].copy_from_slice(&f.msg_id.to_le_bytes());
        out[at + 4..at + 6].copy_from_slice(&f.index.to_le_bytes());
        out[at + 6..at + 8].copy_from_slice(&f.count.to_le_bytes());
        out[at + 8..at + 12].copy_from_slice(&f.total_len.to_le_bytes());
        at += FRAG_EXTRA_BYTES;
    }
    out[at..at + payload.len()].copy_from_slice(payload);
    at + payload.len()
}
