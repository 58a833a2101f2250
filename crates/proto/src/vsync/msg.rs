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
use core::fmt;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
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

/// A broken rule of the message format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VsWireError {
    Short {
        need: usize,
        have: usize,
    },
    BadMagic(u8),
    UnknownKind(u8),
    TooManyMembers(usize),
    TooManyRecords(usize),
    /// A record's length runs past the message.
    RecordOverrun,
    /// Bytes left over after the body.
    Trailing(usize),
    /// A proposal's cut does not have one entry per member of the view it closes... or an
    /// empty member list.
    BadProposal,
    BadFlag(u8),
    /// The header's reserved byte is not zero.
    Reserved(u8),
}

impl fmt::Display for VsWireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VsWireError::Short { need, have } => {
                write!(f, "message too short: need {need} bytes, have {have}")
            }
            VsWireError::BadMagic(m) => write!(f, "bad magic {m:#x}"),
            VsWireError::UnknownKind(k) => write!(f, "unknown kind {k}"),
            VsWireError::TooManyMembers(n) => write!(f, "{n} members > {MEMBERS_MAX}"),
            VsWireError::TooManyRecords(n) => write!(f, "{n} records > {RECORDS_MAX}"),
            VsWireError::RecordOverrun => f.write_str("a record runs past the message"),
            VsWireError::Trailing(n) => write!(f, "{n} bytes after the body"),
            VsWireError::BadProposal => f.write_str("proposal with no members"),
            VsWireError::BadFlag(x) => write!(f, "unknown flag bits {x:#x}"),
            VsWireError::Reserved(x) => write!(f, "reserved byte {x:#x} is not zero"),
        }
    }
}

impl std::error::Error for VsWireError {}

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

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], VsWireError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or(VsWireError::Short {
            need: self.at.saturating_add(n),
            have: self.b.len(),
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, VsWireError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, VsWireError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes(s.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, VsWireError> {
        let s = self.take(8)?;
        Ok(u64::from_le_bytes(s.try_into().expect("8 bytes")))
    }
    fn addr(&mut self) -> Result<Address, VsWireError> {
        Ok(Address::read_from(self.take(ADDRESS_BYTES)?))
    }
    fn ballot(&mut self) -> Result<Ballot, VsWireError> {
        Ok(Ballot {
            number: self.u64()?,
            coordinator: self.addr()?,
        })
    }
    fn count(&mut self) -> Result<usize, VsWireError> {
        let n = self.u16()? as usize;
        if n > MEMBERS_MAX {
            return Err(VsWireError::TooManyMembers(n));
        }
        Ok(n)
    }
    /// Fails unless `n` more bytes are there (checked before a list is allocated).
    fn need(&self, n: usize) -> Result<(), VsWireError> {
        if self.b.len() - self.at < n {
            return Err(VsWireError::Short {
                need: self.at + n,
                have: self.b.len(),
            });
        }
        Ok(())
    }
    fn vector(&mut self) -> Result<Vec<u64>, VsWireError> {
        let n = self.count()?;
        self.need(n * 8)?;
        (0..n).map(|_| self.u64()).collect()
    }
    fn members(&mut self) -> Result<Vec<Address>, VsWireError> {
        let n = self.count()?;
        self.need(n * ADDRESS_BYTES)?;
        (0..n).map(|_| self.addr()).collect()
    }
    fn proposal(&mut self) -> Result<Proposal, VsWireError> {
        let coordinator = self.addr()?;
        let members = self.members()?;
        let cut = self.vector()?;
        if members.is_empty() {
            return Err(VsWireError::BadProposal);
        }
        Ok(Proposal {
            coordinator,
            members,
            cut,
        })
    }
    fn end(&self) -> Result<(), VsWireError> {
        match self.b.len() - self.at {
            0 => Ok(()),
            n => Err(VsWireError::Trailing(n)),
        }
    }
}

/// Decodes one message.
pub fn parse(b: &[u8]) -> Result<(Header, VsMsg<'_>), VsWireError> {
    let mut r = Reader { b, at: 0 };
    let head = r.take(HEADER_BYTES)?;
    if head[0] != MAGIC {
        return Err(VsWireError::BadMagic(head[0]));
    }
    let kind = head[1];
    let flags = head[2];
    if head[3] != 0 {
        return Err(VsWireError::Reserved(head[3]));
    }
    let mut h = Reader { b: head, at: 4 };
    let header = Header {
        group: h.u32()?,
        view: ViewId {
            number: h.u64()?,
            coordinator: h.addr()?,
        },
        from: h.addr()?,
    };
    let known = if kind == Kind::FlushOk as u8 {
        FLAG_ACCEPTED
    } else {
        0
    };
    if flags & !known != 0 {
        return Err(VsWireError::BadFlag(flags & !known));
    }
    let msg = match kind {
        k if k == Kind::Data as u8 => {
            let stream = r.addr()?;
            let first = r.u64()?;
            let received = r.vector()?;
            let n = r.u16()? as usize;
            if n > RECORDS_MAX {
                return Err(VsWireError::TooManyRecords(n));
            }
            let mut records = Vec::with_capacity(n.min((b.len() - r.at) / RECORD_HEADER_BYTES));
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
        k if k == Kind::Status as u8 => VsMsg::Status {
            last: r.u64()?,
            received: r.vector()?,
        },
        k if k == Kind::Nak as u8 => VsMsg::Nak {
            stream: r.addr()?,
            from: r.u64()?,
            to: r.u64()?,
        },
        k if k == Kind::Direct as u8 => {
            let rest = b.len() - r.at;
            VsMsg::Direct {
                payload: r.take(rest)?,
            }
        }
        k if k == Kind::Token as u8 => VsMsg::Token {
            round: r.u64()?,
            acc: r.vector()?,
            stable: r.vector()?,
        },
        k if k == Kind::Join as u8 => VsMsg::Join { joiner: r.addr()? },
        k if k == Kind::Leave as u8 => VsMsg::Leave,
        k if k == Kind::Suspect as u8 => VsMsg::Suspect { who: r.addr()? },
        k if k == Kind::Flush as u8 => VsMsg::Flush {
            ballot: r.ballot()?,
        },
        k if k == Kind::FlushOk as u8 => {
            let ballot = r.ballot()?;
            let frozen = r.vector()?;
            let accepted = if flags & FLAG_ACCEPTED != 0 {
                Some((r.ballot()?, r.proposal()?))
            } else {
                None
            };
            VsMsg::FlushOk {
                ballot,
                frozen,
                accepted,
            }
        }
        k if k == Kind::Propose as u8 => VsMsg::Propose {
            ballot: r.ballot()?,
            proposal: r.proposal()?,
        },
        k if k == Kind::Accept as u8 => VsMsg::Accept {
            ballot: r.ballot()?,
        },
        k if k == Kind::Commit as u8 => VsMsg::Commit {
            ballot: r.ballot()?,
            proposal: r.proposal()?,
        },
        k if k == Kind::Gone as u8 => VsMsg::Gone,
        k => return Err(VsWireError::UnknownKind(k)),
    };
    r.end()?;
    Ok((header, msg))
}

/// Writes messages into a caller's buffer; every writer returns the length, or `None` if the
/// buffer is too short (the caller sized it from the configuration, so that is a bug there).
pub struct Writer<'b> {
    b: &'b mut [u8],
    at: usize,
}

impl<'b> Writer<'b> {
    fn new(b: &'b mut [u8], kind: Kind, flags: u8, h: &Header) -> Option<Writer<'b>> {
        let mut w = Writer { b, at: 0 };
        w.put(&[MAGIC, kind as u8, flags, 0])?;
        w.u32(h.group)?;
        w.u64(h.view.number)?;
        w.addr(h.view.coordinator)?;
        w.addr(h.from)?;
        Some(w)
    }
    fn put(&mut self, s: &[u8]) -> Option<()> {
        let end = self.at.checked_add(s.len())?;
        self.b.get_mut(self.at..end)?.copy_from_slice(s);
        self.at = end;
        Some(())
    }
    fn u16(&mut self, v: u16) -> Option<()> {
        self.put(&v.to_le_bytes())
    }
    fn u32(&mut self, v: u32) -> Option<()> {
        self.put(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> Option<()> {
        self.put(&v.to_le_bytes())
    }
    fn addr(&mut self, a: Address) -> Option<()> {
        let mut x = [0u8; ADDRESS_BYTES];
        a.write_to(&mut x);
        self.put(&x)
    }
    fn ballot(&mut self, b: Ballot) -> Option<()> {
        self.u64(b.number)?;
        self.addr(b.coordinator)
    }
    fn vector(&mut self, v: &[u64]) -> Option<()> {
        if v.len() > MEMBERS_MAX {
            return None;
        }
        self.u16(v.len() as u16)?;
        v.iter().try_for_each(|&x| self.u64(x))
    }
    fn proposal(&mut self, p: &Proposal) -> Option<()> {
        if p.members.len() > MEMBERS_MAX {
            return None;
        }
        self.addr(p.coordinator)?;
        self.u16(p.members.len() as u16)?;
        p.members.iter().try_for_each(|&a| self.addr(a))?;
        self.vector(&p.cut)
    }
    fn done(self) -> Option<usize> {
        Some(self.at)
    }
}

/// Bytes a `Data` message with a vector of `n` and these record lengths takes.
pub fn data_bytes(n: usize, record_lens: impl Iterator<Item = usize>) -> usize {
    DATA_FIXED_BYTES + 8 * n + record_lens.map(|l| RECORD_HEADER_BYTES + l).sum::<usize>()
}

/// Writes any message but `Data` (see [`write_data`]).
pub fn write(buf: &mut [u8], h: &Header, msg: &VsMsg<'_>) -> Option<usize> {
    match msg {
        VsMsg::Data {
            stream,
            first,
            received,
            records,
        } => write_data(buf, h, *stream, *first, received, records.iter().copied()),
        VsMsg::Status { last, received } => {
            let mut w = Writer::new(buf, Kind::Status, 0, h)?;
            w.u64(*last)?;
            w.vector(received)?;
            w.done()
        }
        VsMsg::Nak { stream, from, to } => {
            let mut w = Writer::new(buf, Kind::Nak, 0, h)?;
            w.addr(*stream)?;
            w.u64(*from)?;
            w.u64(*to)?;
            w.done()
        }
        VsMsg::Direct { payload } => {
            let mut w = Writer::new(buf, Kind::Direct, 0, h)?;
            w.put(payload)?;
            w.done()
        }
        VsMsg::Token { round, acc, stable } => {
            let mut w = Writer::new(buf, Kind::Token, 0, h)?;
            w.u64(*round)?;
            w.vector(acc)?;
            w.vector(stable)?;
            w.done()
        }
        VsMsg::Join { joiner } => {
            let mut w = Writer::new(buf, Kind::Join, 0, h)?;
            w.addr(*joiner)?;
            w.done()
        }
        VsMsg::Leave => Writer::new(buf, Kind::Leave, 0, h)?.done(),
        VsMsg::Gone => Writer::new(buf, Kind::Gone, 0, h)?.done(),
        VsMsg::Suspect { who } => {
            let mut w = Writer::new(buf, Kind::Suspect, 0, h)?;
            w.addr(*who)?;
            w.done()
        }
        VsMsg::Flush { ballot } => {
            let mut w = Writer::new(buf, Kind::Flush, 0, h)?;
            w.ballot(*ballot)?;
            w.done()
        }
        VsMsg::FlushOk {
            ballot,
            frozen,
            accepted,
        } => {
            let flags = if accepted.is_some() { FLAG_ACCEPTED } else { 0 };
            let mut w = Writer::new(buf, Kind::FlushOk, flags, h)?;
            w.ballot(*ballot)?;
            w.vector(frozen)?;
            if let Some((b, p)) = accepted {
                w.ballot(*b)?;
                w.proposal(p)?;
            }
            w.done()
        }
        VsMsg::Propose { ballot, proposal } => {
            let mut w = Writer::new(buf, Kind::Propose, 0, h)?;
            w.ballot(*ballot)?;
            w.proposal(proposal)?;
            w.done()
        }
        VsMsg::Accept { ballot } => {
            let mut w = Writer::new(buf, Kind::Accept, 0, h)?;
            w.ballot(*ballot)?;
            w.done()
        }
        VsMsg::Commit { ballot, proposal } => {
            let mut w = Writer::new(buf, Kind::Commit, 0, h)?;
            w.ballot(*ballot)?;
            w.proposal(proposal)?;
            w.done()
        }
    }
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
    let mut w = Writer::new(buf, Kind::Data, 0, h)?;
    w.addr(stream)?;
    w.u64(first)?;
    w.vector(received)?;
    let count_at = w.at;
    w.u16(0)?;
    let mut n = 0usize;
    for r in records {
        w.u32(u32::try_from(r.len()).ok()?)?;
        w.put(r)?;
        n += 1;
    }
    if n > RECORDS_MAX {
        return None;
    }
    w.b[count_at..count_at + 2].copy_from_slice(&(n as u16).to_le_bytes());
    w.done()
}
