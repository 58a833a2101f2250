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

use crate::addr::Address;
use crate::codec::{wire_enum, CodecError, Reader, Writer};

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

wire_enum! {
pub enum Kind: u8, unknown RecordError::UnknownKind {
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
}

/// A broken rule of the record format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record too short: need {need} bytes, have {have}")]
    Short { need: usize, have: usize },
    #[error("unknown record kind {0}")]
    UnknownKind(u8),
    #[error("unknown flag bits {0:#x}")]
    BadFlags(u8),
    #[error("{0} entries > {ENTRIES_MAX}")]
    TooManyEntries(usize),
    #[error("{0} bytes after the entries")]
    Trailing(usize),
}

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

impl From<CodecError> for RecordError {
    fn from(e: CodecError) -> RecordError {
        match e {
            CodecError::Short { need, have } => RecordError::Short { need, have },
            CodecError::Trailing(n) => RecordError::Trailing(n),
            CodecError::Count { count, .. } => RecordError::TooManyEntries(count),
        }
    }
}

/// Decodes one record.
pub fn parse(b: &[u8]) -> Result<Record<'_>, RecordError> {
    let mut r = Reader::new(b);
    r.need(4)?;
    let kind = r.u8()?;
    let flags = r.u8()?;
    if flags & !FLAGS_KNOWN != 0 {
        return Err(RecordError::BadFlags(flags & !FLAGS_KNOWN));
    }
    match Kind::try_from(kind)? {
        kind @ (Kind::Msg | Kind::Pass | Kind::Request | Kind::Data) => {
            r.need(HEAD_BYTES - 2)?;
            r.u16()?;
            let request = r.u32()?;
            let vseq = r.u32()?;
            r.u32()?;
            let h = Head {
                flags,
                request,
                vseq,
                msg_id: r.u64()?,
                origin: Address::from_bytes(r.array()?),
                next: Address::from_bytes(r.array()?),
            };
            let payload = r.rest();
            let no_payload = |rec: Record<'static>| {
                if payload.is_empty() {
                    Ok(rec)
                } else {
                    Err(RecordError::Trailing(payload.len()))
                }
            };
            match kind {
                Kind::Msg => Ok(Record::Msg(h, payload)),
                Kind::Pass => no_payload(Record::Pass(h)),
                Kind::Request => no_payload(Record::Request(h)),
                _ => Ok(Record::Data(h, payload)),
            }
        }
        Kind::Order => {
            let n = r.count(ENTRIES_MAX, ORDER_ENTRY_BYTES)?;
            let entries = (0..n)
                .map(|_| Ok((r.u16()?, r.u64()?)))
                .collect::<Result<_, CodecError>>()?;
            r.finish()?;
            Ok(Record::Order(entries))
        }
        Kind::Submit => {
            let n = r.count(ENTRIES_MAX, 0)?;
            let mut out = Vec::with_capacity(n.min(b.len() / SUBMIT_ENTRY_BYTES));
            for _ in 0..n {
                r.need(SUBMIT_ENTRY_BYTES)?;
                let vseq = r.u32()?;
                let msg_id = r.u64()?;
                let len = r.u32()? as usize;
                out.push((vseq, msg_id, r.take(len)?));
            }
            r.finish()?;
            Ok(Record::Submit(out))
        }
    }
}

/// Writes a message-like record of `kind` into `out` (cleared first).
pub fn write_head(out: &mut Vec<u8>, kind: Kind, h: &Head, payload: &[u8]) {
    out.clear();
    out.reserve(HEAD_BYTES + payload.len());
    Writer::new(out)
        .u8(kind as u8)
        .u8(h.flags)
        .u16(0)
        .u32(h.request)
        .u32(h.vseq)
        .u32(0)
        .u64(h.msg_id)
        .bytes(&h.origin.to_bytes())
        .bytes(&h.next.to_bytes())
        .bytes(payload);
}

/// Writes an `Order` record (at most [`ENTRIES_MAX`] entries are taken).
pub fn write_order(out: &mut Vec<u8>, entries: &[(u16, u64)]) {
    let entries = &entries[..entries.len().min(ENTRIES_MAX)];
    out.clear();
    let mut w = Writer::new(out);
    w.u8(Kind::Order as u8).u8(0).u16(entries.len() as u16);
    for &(r, upto) in entries {
        w.u16(r).u64(upto);
    }
}

/// Writes a `Submit` of `entries` (the caller bounds their number and size).
pub fn write_submit<'p>(out: &mut Vec<u8>, entries: impl Iterator<Item = (u32, u64, &'p [u8])>) {
    out.clear();
    let mut w = Writer::new(out);
    w.u8(Kind::Submit as u8).u8(0).u16(0);
    let mut n = 0u16;
    for (vseq, msg_id, p) in entries {
        w.u32(vseq).u64(msg_id).u32(p.len() as u32).bytes(p);
        n += 1;
    }
    w.set_u16(2, n);
}

/// Bytes a `Submit` entry of `len` payload bytes adds.
pub fn submit_entry_bytes(len: usize) -> usize {
    SUBMIT_ENTRY_BYTES + len
}
