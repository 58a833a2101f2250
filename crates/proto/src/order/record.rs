//! Records of the ordering protocols, carried as casts and directs of the virtually
//! synchronous stack. Checked views over bytes and their writers.
//!
//! A message-like record (kinds `Msg`, `Pass`, `Request`, `Data`) has a 40-byte head:
//!
//! ```text
//!  0 kind u8 | 1 flags u8 | 2 reserved u16 | 4 request u32 | 8 vseq u32 | 12 reserved u32
//! 16 msg_id u64 | 24 origin (address) | 32 next (address) | 40 payload
//! ```
//!
//! An `Order` record is `kind | 0 | count u16`, then `count` entries `rank u16 | upto u64`.
//! A `Submit` (a direct to the sequencer) is `kind | 0 | count u16`, then `count` entries
//! `vseq u32 | msg_id u64 | len u32 | payload`.

use crate::addr::{Address, ADDRESS_BYTES};
use core::fmt;

pub const HEAD_BYTES: usize = 40;
pub const ORDER_ENTRY_BYTES: usize = 10;
pub const SUBMIT_ENTRY_BYTES: usize = 16;
/// Most entries an `Order` or a `Submit` carries.
pub const ENTRIES_MAX: usize = 4096;

/// `Msg`/`Pass` flag: the token (or the sequencer's or orderer's role) passes to `next` after
/// this record.
pub const FLAG_PASS: u8 = 1;
/// The sender asks for the token (`request` is its count of requests in this view).
pub const FLAG_REQUEST: u8 = 2;
const FLAGS_KNOWN: u8 = FLAG_PASS | FLAG_REQUEST;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// An application message in the total order (cast by the token holder, sequencer...).
    Msg = 1,
    /// The token or role passes on, with no message.
    Pass = 2,
    /// Total: a token request.
    Request = 3,
    /// Dynord: an application message cast at once, ordered later by an `Order`.
    Data = 4,
    /// Dynord: the orderer's order.
    Order = 5,
    /// Dynseq: messages handed to the sequencer.
    Submit = 6,
}

/// A broken rule of the record format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    Short { need: usize, have: usize },
    UnknownKind(u8),
    BadFlags(u8),
    TooManyEntries(usize),
    Trailing(usize),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Short { need, have } => {
                write!(f, "record too short: need {need} bytes, have {have}")
            }
            RecordError::UnknownKind(k) => write!(f, "unknown record kind {k}"),
            RecordError::BadFlags(x) => write!(f, "unknown flag bits {x:#x}"),
            RecordError::TooManyEntries(n) => write!(f, "{n} entries > {ENTRIES_MAX}"),
            RecordError::Trailing(n) => write!(f, "{n} bytes after the entries"),
        }
    }
}

impl std::error::Error for RecordError {}

/// The head of a message-like record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Head {
    pub flags: u8,
    pub request: u32,
    pub vseq: u32,
    pub msg_id: u64,
    pub origin: Address,
    pub next: Address,
}

/// One record, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Msg(Head, &'a [u8]),
    Pass(Head),
    Request(Head),
    Data(Head, &'a [u8]),
    /// `(rank, upto)`: deliver that member's `Data` casts up to cast `upto`, in turn.
    Order(Vec<(u16, u64)>),
    /// `(vseq, msg_id, payload)`.
    Submit(Vec<(u32, u64, &'a [u8])>),
}

fn short(need: usize, have: usize) -> RecordError {
    RecordError::Short { need, have }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Decodes one record.
pub fn parse(b: &[u8]) -> Result<Record<'_>, RecordError> {
    if b.len() < 4 {
        return Err(short(4, b.len()));
    }
    let kind = b[0];
    let flags = b[1];
    if flags & !FLAGS_KNOWN != 0 {
        return Err(RecordError::BadFlags(flags & !FLAGS_KNOWN));
    }
    match kind {
        1..=4 => {
            if b.len() < HEAD_BYTES {
                return Err(short(HEAD_BYTES, b.len()));
            }
            let h = Head {
                flags,
                request: u32_at(b, 4),
                vseq: u32_at(b, 8),
                msg_id: u64_at(b, 16),
                origin: Address::read_from(&b[24..24 + ADDRESS_BYTES]),
                next: Address::read_from(&b[32..32 + ADDRESS_BYTES]),
            };
            let payload = &b[HEAD_BYTES..];
            let no_payload = |r: Record<'static>| {
                if payload.is_empty() {
                    Ok(r)
                } else {
                    Err(RecordError::Trailing(payload.len()))
                }
            };
            match kind {
                1 => Ok(Record::Msg(h, payload)),
                2 => no_payload(Record::Pass(h)),
                3 => no_payload(Record::Request(h)),
                _ => Ok(Record::Data(h, payload)),
            }
        }
        5 => {
            let n = u16_at(b, 2) as usize;
            if n > ENTRIES_MAX {
                return Err(RecordError::TooManyEntries(n));
            }
            let need = 4 + n * ORDER_ENTRY_BYTES;
            if b.len() < need {
                return Err(short(need, b.len()));
            }
            if b.len() > need {
                return Err(RecordError::Trailing(b.len() - need));
            }
            Ok(Record::Order(
                (0..n)
                    .map(|i| {
                        let at = 4 + i * ORDER_ENTRY_BYTES;
                        (u16_at(b, at), u64_at(b, at + 2))
                    })
                    .collect(),
            ))
        }
        6 => {
            let n = u16_at(b, 2) as usize;
            if n > ENTRIES_MAX {
                return Err(RecordError::TooManyEntries(n));
            }
            let mut at = 4;
            let mut out = Vec::with_capacity(n.min(b.len() / SUBMIT_ENTRY_BYTES));
            for _ in 0..n {
                if b.len() < at + SUBMIT_ENTRY_BYTES {
                    return Err(short(at + SUBMIT_ENTRY_BYTES, b.len()));
                }
                let vseq = u32_at(b, at);
                let msg_id = u64_at(b, at + 4);
                let len = u32_at(b, at + 12) as usize;
                at += SUBMIT_ENTRY_BYTES;
                let end = at.checked_add(len).filter(|&e| e <= b.len());
                let end = end.ok_or(short(at.saturating_add(len), b.len()))?;
                out.push((vseq, msg_id, &b[at..end]));
                at = end;
            }
            if at != b.len() {
                return Err(RecordError::Trailing(b.len() - at));
            }
            Ok(Record::Submit(out))
        }
        k => Err(RecordError::UnknownKind(k)),
    }
}

/// Writes a message-like record of `kind` into `out` (cleared first).
pub fn write_head(out: &mut Vec<u8>, kind: Kind, h: &Head, payload: &[u8]) {
    out.clear();
    out.reserve(HEAD_BYTES + payload.len());
    out.extend_from_slice(&[kind as u8, h.flags, 0, 0]);
    out.extend_from_slice(&h.request.to_le_bytes());
    out.extend_from_slice(&h.vseq.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&h.msg_id.to_le_bytes());
    let mut a = [0u8; ADDRESS_BYTES];
    h.origin.write_to(&mut a);
    out.extend_from_slice(&a);
    h.next.write_to(&mut a);
    out.extend_from_slice(&a);
    out.extend_from_slice(payload);
}

/// Writes an `Order` record (at most [`ENTRIES_MAX`] entries are taken).
pub fn write_order(out: &mut Vec<u8>, entries: &[(u16, u64)]) {
    let entries = &entries[..entries.len().min(ENTRIES_MAX)];
    out.clear();
    out.extend_from_slice(&[Kind::Order as u8, 0]);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for &(r, upto) in entries {
        out.extend_from_slice(&r.to_le_bytes());
        out.extend_from_slice(&upto.to_le_bytes());
    }
}

/// Writes a `Submit` of `entries` (the caller bounds their number and size).
pub fn write_submit<'p>(out: &mut Vec<u8>, entries: impl Iterator<Item = (u32, u64, &'p [u8])>) {
    out.clear();
    out.extend_from_slice(&[Kind::Submit as u8, 0, 0, 0]);
    let mut n = 0u16;
    for (vseq, msg_id, p) in entries {
        out.extend_from_slice(&vseq.to_le_bytes());
        out.extend_from_slice(&msg_id.to_le_bytes());
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(p);
        n += 1;
    }
    out[2..4].copy_from_slice(&n.to_le_bytes());
}

/// Bytes a `Submit` entry of `len` payload bytes adds.
pub fn submit_entry_bytes(len: usize) -> usize {
    SUBMIT_ENTRY_BYTES + len
}
