//! Messages of the virtually synchronous stack: checked views over bytes and their writers.
//!
//! Every message starts with a 32-byte header:
//!
//! ```text
//!  0 magic u8 (0x56) | 1 kind u8 | 2 flags u8 | 3 reserved u8 | 4 group u32
//!  8 view number u64 | 16 view coordinator (address) | 24 from (address)
//! ```
//!
//! then a body by kind. All integers are little-endian. Vectors (a count u16, then that many
//! u64) are indexed by rank in the header's view. A proposal is the address of the coordinator
//! that made it, its members (a count u16, then the addresses) and its cut (a vector). A
//! decoder error names the broken rule.

use super::{Ballot, Proposal, ViewId};
use crate::addr::{Address, ADDRESS_BYTES};
use crate::codec::{wire_enum, CodecError, Reader, SliceWriter};

pub const HEADER_BYTES: usize = 32;
const MAGIC: u8 = 0x56;
/// Most members a view, a vector or a proposal names.
pub const MEMBERS_MAX: usize = 64;
/// Most casts one `Data` message carries.
pub const RECORDS_MAX: usize = 4096;
/// Bytes of a `Data` message besides its vector and records: the header, the first sequence
/// number, the vector's count and the record count.
pub const DATA_FIXED_BYTES: usize = HEADER_BYTES + ADDRESS_BYTES + 8 + 2 + 2;
/// Bytes in front of each record of a `Data` message (its length).
pub const RECORD_HEADER_BYTES: usize = 4;

wire_enum! {
enum Kind: u8, unknown VsWireError::UnknownKind {
    Data = 1,
    Status = 2,
    Nak = 3,
    Direct = 4,
    Token = 5,
    Join = 6,
    Leave = 7,
    Suspect = 8,
    Flush = 9,
    FlushOk = 10,
    Propose = 11,
    Accept = 12,
    Commit = 13,
    Gone = 14,
}
}

/// A broken rule of the message format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VsWireError {
    #[error("message too short: need {need} bytes, have {have}")]
    Short { need: usize, have: usize },
    #[error("bad magic {0:#x}")]
    BadMagic(u8),
    #[error("unknown kind {0}")]
    UnknownKind(u8),
    #[error("{0} members > {MEMBERS_MAX}")]
    TooManyMembers(usize),
    #[error("{0} records > {RECORDS_MAX}")]
    TooManyRecords(usize),
    /// A record's length runs past the message.
    #[error("a record runs past the message")]
    RecordOverrun,
    /// Bytes left over after the body.
    #[error("{0} bytes after the body")]
    Trailing(usize),
    /// A proposal's cut does not have one entry per member of the view it closes... or an
    /// empty member list.
    #[error("proposal with no members")]
    BadProposal,
    #[error("unknown flag bits {0:#x}")]
    BadFlag(u8),
    /// The header's reserved byte is not zero.
    #[error("reserved byte {0:#x} is not zero")]
    Reserved(u8),
}

/// The common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub group: u32,
    pub view: ViewId,
    pub from: Address,
}

/// `FlushOk` flag: an accepted proposal follows the vector.
const FLAG_ACCEPTED: u8 = 1;

/// One message, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VsMsg<'a> {
    /// Casts `first..first + records.len()` of `stream` (the sender's own, or another member's
    /// sent again), with (piggybacked stability) how far the sender has received every
    /// member's stream.
    Data {
        stream: Address,
        first: u64,
        received: Vec<u64>,
        records: Vec<&'a [u8]>,
    },
    /// A heartbeat: the sender's last cast, and (piggybacked stability) what it received.
    Status {
        last: u64,
        received: Vec<u64>,
    },
    /// Please send `stream`'s casts `from..=to` again.
    Nak {
        stream: Address,
        from: u64,
        to: u64,
    },
    /// A best-effort message to one member.
    Direct {
        payload: &'a [u8],
    },
    /// The stability token: `acc` is the minimum of the received vectors so far this round,
    /// `stable` the result of the last full round.
    Token {
        round: u64,
        acc: Vec<u64>,
        stable: Vec<u64>,
    },
    /// `joiner` asks to join (sent by the joiner, or passed on once by a member).
    Join {
        joiner: Address,
    },
    Leave,
    Suspect {
        who: Address,
    },
    /// Phase one of a view change: stop casting, report what you hold.
    Flush {
        ballot: Ballot,
    },
    /// The answer: how far the sender's streams reach (frozen), and the proposal it accepted
    /// last, if any.
    FlushOk {
        ballot: Ballot,
        frozen: Vec<u64>,
        accepted: Option<(Ballot, Proposal)>,
    },
    Propose {
        ballot: Ballot,
        proposal: Proposal,
    },
    Accept {
        ballot: Ballot,
    },
    /// The decision: the view after the header's, and the cut that closes the header's.
    Commit {
        ballot: Ballot,
        proposal: Proposal,
    },
    /// To a member still speaking in a view whose commit the sender no longer keeps: the
    /// group is at the header's view, and the addressee is not in it.
    Gone,
}

impl From<CodecError> for VsWireError {
    fn from(e: CodecError) -> VsWireError {
        match e {
            CodecError::Short { need, have } => VsWireError::Short { need, have },
            CodecError::Trailing(n) => VsWireError::Trailing(n),
            CodecError::Count { count, .. } => VsWireError::TooManyMembers(count),
        }
    }
}

fn addr(r: &mut Reader<'_>) -> Result<Address, CodecError> {
    Ok(Address::from_bytes(r.array()?))
}

fn ballot(r: &mut Reader<'_>) -> Result<Ballot, CodecError> {
    Ok(Ballot {
        number: r.u64()?,
        coordinator: addr(r)?,
    })
}

/// A vector: a count, then that many `u64`.
fn vector(r: &mut Reader<'_>) -> Result<Vec<u64>, CodecError> {
    let n = r.count(MEMBERS_MAX, 8)?;
    (0..n).map(|_| r.u64()).collect()
}

fn proposal(r: &mut Reader<'_>) -> Result<Proposal, VsWireError> {
    let coordinator = addr(r)?;
    let n = r.count(MEMBERS_MAX, ADDRESS_BYTES)?;
    let members = (0..n).map(|_| addr(r)).collect::<Result<Vec<_>, _>>()?;
    let cut = vector(r)?;
    if members.is_empty() {
        return Err(VsWireError::BadProposal);
    }
    Ok(Proposal {
        coordinator,
        members,
        cut,
    })
}

/// Decodes one message.
pub fn parse(b: &[u8]) -> Result<(Header, VsMsg<'_>), VsWireError> {
    let mut r = Reader::new(b);
    r.need(HEADER_BYTES)?;
    let magic = r.u8()?;
    if magic != MAGIC {
        return Err(VsWireError::BadMagic(magic));
    }
    let kind = r.u8()?;
    let flags = r.u8()?;
    let reserved = r.u8()?;
    if reserved != 0 {
        return Err(VsWireError::Reserved(reserved));
    }
    let header = Header {
        group: r.u32()?,
        view: ViewId {
            number: r.u64()?,
            coordinator: addr(&mut r)?,
        },
        from: addr(&mut r)?,
    };
    // Unknown flags are refused before an unknown kind.
    let kind = Kind::try_from(kind);
    let known = if kind == Ok(Kind::FlushOk) {
        FLAG_ACCEPTED
    } else {
        0
    };
    if flags & !known != 0 {
        return Err(VsWireError::BadFlag(flags & !known));
    }
    let msg = match kind? {
        Kind::Data => {
            let stream = addr(&mut r)?;
            let first = r.u64()?;
            let received = vector(&mut r)?;
            let n = r.count(RECORDS_MAX, 0).map_err(|e| match e {
                CodecError::Count { count, .. } => VsWireError::TooManyRecords(count),
                e => e.into(),
            })?;
            let mut records = Vec::with_capacity(n.min(r.left() / RECORD_HEADER_BYTES));
            for _ in 0..n {
                let len = r.u32()? as usize;
                records.push(r.take(len).map_err(|_| VsWireError::RecordOverrun)?);
            }
            VsMsg::Data {
                stream,
                first,
                received,
                records,
            }
        }
        Kind::Status => VsMsg::Status {
            last: r.u64()?,
            received: vector(&mut r)?,
        },
        Kind::Nak => VsMsg::Nak {
            stream: addr(&mut r)?,
            from: r.u64()?,
            to: r.u64()?,
        },
        Kind::Direct => VsMsg::Direct { payload: r.rest() },
        Kind::Token => VsMsg::Token {
            round: r.u64()?,
            acc: vector(&mut r)?,
            stable: vector(&mut r)?,
        },
        Kind::Join => VsMsg::Join {
            joiner: addr(&mut r)?,
        },
        Kind::Leave => VsMsg::Leave,
        Kind::Suspect => VsMsg::Suspect { who: addr(&mut r)? },
        Kind::Flush => VsMsg::Flush {
            ballot: ballot(&mut r)?,
        },
        Kind::FlushOk => {
            let ballot_ = ballot(&mut r)?;
            let frozen = vector(&mut r)?;
            let accepted = if flags & FLAG_ACCEPTED != 0 {
                Some((ballot(&mut r)?, proposal(&mut r)?))
            } else {
                None
            };
            VsMsg::FlushOk {
                ballot: ballot_,
                frozen,
                accepted,
            }
        }
        Kind::Propose => VsMsg::Propose {
            ballot: ballot(&mut r)?,
            proposal: proposal(&mut r)?,
        },
        Kind::Accept => VsMsg::Accept {
            ballot: ballot(&mut r)?,
        },
        Kind::Commit => VsMsg::Commit {
            ballot: ballot(&mut r)?,
            proposal: proposal(&mut r)?,
        },
        Kind::Gone => VsMsg::Gone,
    };
    r.finish()?;
    Ok((header, msg))
}

/// Starts a message in `buf` with the header.
fn start<'b>(buf: &'b mut [u8], kind: Kind, flags: u8, h: &Header) -> SliceWriter<'b> {
    let mut w = SliceWriter::new(buf);
    w.u8(MAGIC)
        .u8(kind as u8)
        .u8(flags)
        .u8(0)
        .u32(h.group)
        .u64(h.view.number)
        .bytes(&h.view.coordinator.to_bytes())
        .bytes(&h.from.to_bytes());
    w
}

fn put_ballot(w: &mut SliceWriter<'_>, b: Ballot) {
    w.u64(b.number).bytes(&b.coordinator.to_bytes());
}

fn put_vector(w: &mut SliceWriter<'_>, v: &[u64]) -> Option<()> {
    if v.len() > MEMBERS_MAX {
        return None;
    }
    w.u16(v.len() as u16);
    for &x in v {
        w.u64(x);
    }
    Some(())
}

fn put_proposal(w: &mut SliceWriter<'_>, p: &Proposal) -> Option<()> {
    if p.members.len() > MEMBERS_MAX {
        return None;
    }
    w.bytes(&p.coordinator.to_bytes())
        .u16(p.members.len() as u16);
    for a in &p.members {
        w.bytes(&a.to_bytes());
    }
    put_vector(w, &p.cut)
}

/// Bytes a `Data` message with a vector of `n` and these record lengths takes.
pub fn data_bytes(n: usize, record_lens: impl Iterator<Item = usize>) -> usize {
    DATA_FIXED_BYTES + 8 * n + record_lens.map(|l| RECORD_HEADER_BYTES + l).sum::<usize>()
}

/// Writes any message into `buf` and returns its length, or `None` if `buf` is too short (the
/// caller sized it from the configuration, so that is a bug there).
pub fn write(buf: &mut [u8], h: &Header, msg: &VsMsg<'_>) -> Option<usize> {
    let w = match msg {
        VsMsg::Data {
            stream,
            first,
            received,
            records,
        } => return write_data(buf, h, *stream, *first, received, records.iter().copied()),
        VsMsg::Status { last, received } => {
            let mut w = start(buf, Kind::Status, 0, h);
            w.u64(*last);
            put_vector(&mut w, received)?;
            w
        }
        VsMsg::Nak { stream, from, to } => {
            let mut w = start(buf, Kind::Nak, 0, h);
            w.bytes(&stream.to_bytes()).u64(*from).u64(*to);
            w
        }
        VsMsg::Direct { payload } => {
            let mut w = start(buf, Kind::Direct, 0, h);
            w.bytes(payload);
            w
        }
        VsMsg::Token { round, acc, stable } => {
            let mut w = start(buf, Kind::Token, 0, h);
            w.u64(*round);
            put_vector(&mut w, acc)?;
            put_vector(&mut w, stable)?;
            w
        }
        VsMsg::Join { joiner } => {
            let mut w = start(buf, Kind::Join, 0, h);
            w.bytes(&joiner.to_bytes());
            w
        }
        VsMsg::Leave => start(buf, Kind::Leave, 0, h),
        VsMsg::Gone => start(buf, Kind::Gone, 0, h),
        VsMsg::Suspect { who } => {
            let mut w = start(buf, Kind::Suspect, 0, h);
            w.bytes(&who.to_bytes());
            w
        }
        VsMsg::Flush { ballot } => {
            let mut w = start(buf, Kind::Flush, 0, h);
            put_ballot(&mut w, *ballot);
            w
        }
        VsMsg::FlushOk {
            ballot,
            frozen,
            accepted,
        } => {
            let flags = if accepted.is_some() { FLAG_ACCEPTED } else { 0 };
            let mut w = start(buf, Kind::FlushOk, flags, h);
            put_ballot(&mut w, *ballot);
            put_vector(&mut w, frozen)?;
            if let Some((b, p)) = accepted {
                put_ballot(&mut w, *b);
                put_proposal(&mut w, p)?;
            }
            w
        }
        VsMsg::Propose { ballot, proposal } => {
            let mut w = start(buf, Kind::Propose, 0, h);
            put_ballot(&mut w, *ballot);
            put_proposal(&mut w, proposal)?;
            w
        }
        VsMsg::Accept { ballot } => {
            let mut w = start(buf, Kind::Accept, 0, h);
            put_ballot(&mut w, *ballot);
            w
        }
        VsMsg::Commit { ballot, proposal } => {
            let mut w = start(buf, Kind::Commit, 0, h);
            put_ballot(&mut w, *ballot);
            put_proposal(&mut w, proposal)?;
            w
        }
    };
    w.finish()
}

/// Writes a `Data` message of `records` (casts `first..`), with `received` piggybacked.
pub fn write_data<'r>(
    buf: &mut [u8],
    h: &Header,
    stream: Address,
    first: u64,
    received: &[u64],
    records: impl Iterator<Item = &'r [u8]>,
) -> Option<usize> {
    let mut w = start(buf, Kind::Data, 0, h);
    w.bytes(&stream.to_bytes()).u64(first);
    put_vector(&mut w, received)?;
    let count_at = w.len();
    w.u16(0);
    let mut n = 0usize;
    for r in records {
        if RECORD_HEADER_BYTES + r.len() > w.room() {
            return None;
        }
        w.u32(u32::try_from(r.len()).ok()?).bytes(r);
        n += 1;
    }
    if n > RECORDS_MAX {
        return None;
    }
    w.set_u16(count_at, n as u16);
    w.finish()
}
