//! CRMem's messages between nodes. Each travels as one control message over a reliable,
//! in-order channel (a module message on the link). Little-endian; every decoder checks
//! lengths and refuses what does not parse with the rule it broke.
//!
//! - `WRITE` (a part of a remote atomic write, §3.4): origin's commit sequence number, part
//!   index and count, then ranges `(segment u16, offset u32, len u32, bytes)`. The backup
//!   applies a commit only when its last part has come.
//! - `ACK`: the commit sequence number the backup applied.
//! - `SNAP_REQ`: a restarted node asks a live replica for its segments, naming the request
//!   (a nonce: pieces of a snapshot sent to an earlier request, or to the node's previous
//!   incarnation and retransmitted by the link to this one, are not taken for this one's).
//! - `DROPPED`: the primary tells a backup it stopped counting on it (it took it for dead);
//!   the backup recovers through a snapshot before it counts again.
//! - `CATCH_UP`: a backup whose primary died asks the successor for the commits it lacks,
//!   naming the request (a nonce, as `SNAP_REQ`), the last commit it holds and the primary
//!   it followed.
//! - `RESUME`: the successor's answer: undo the commits above `from` (the old primary's
//!   that the successor never had), then apply the WRITE parts that follow up to `to`.
//! - `DURABLE`: the primary tells its backups that every backup holds its commits up to
//!   `seq` (now and then): they drop those from the tail they keep for a catch-up.
//! - `SNAP`: a piece of one segment (`segment, offset, bytes`) for request `nonce`, flagged
//!   last on the final piece of the final segment, with the commit sequence number the
//!   snapshot covers.

use thiserror::Error;
use txcast_proto::codec::{CodecError, Reader, Writer};

pub const MAGIC: u8 = 0xC7;
pub const WRITE: u8 = 1;
pub const ACK: u8 = 2;
pub const SNAP_REQ: u8 = 3;
pub const SNAP: u8 = 4;
pub const DROPPED: u8 = 5;
pub const CATCH_UP: u8 = 6;
pub const RESUME: u8 = 7;
pub const DURABLE: u8 = 8;

/// A WRITE part's fixed fields: magic, kind, seq, part, parts, ranges.
pub const WRITE_HEADER: usize = 2 + 8 + 2 + 2 + 2;
/// One range's fixed fields: segment, offset, length.
pub const RANGE_HEADER: usize = 2 + 4 + 4;
/// A SNAP piece's fixed fields: magic, kind, last, nonce, seq, segment, offset.
pub const SNAP_HEADER: usize = 2 + 1 + 8 + 8 + 2 + 4;

/// Why a message was refused.
#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
pub enum MsgError {
    #[error("message shorter than its fixed fields")]
    Short,
    #[error("not a CRMem message (magic)")]
    Magic,
    #[error("unknown message kind {0}")]
    Kind(u8),
    #[error("a range runs past the end of the message")]
    RangeTruncated,
    #[error("bytes after the last range")]
    Trailing,
    #[error("part {part} of {parts}: not a valid part index")]
    Part { part: u16, parts: u16 },
    #[error("resume from commit {from} to {to}: the first above the second")]
    Order { from: u64, to: u64 },
}

/// A decoded message, borrowing the datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Msg<'a> {
    Write(WritePart<'a>),
    Ack {
        seq: u64,
    },
    SnapReq {
        nonce: u64,
    },
    Snap(SnapPiece<'a>),
    Dropped,
    /// A backup whose primary (`primary`) died asks the successor for what it lacks: it
    /// holds that primary's commits up to `seq`.
    CatchUp {
        nonce: u64,
        seq: u64,
        primary: u16,
    },
    /// The successor's answer: undo the commits above `from`, then apply the WRITE parts that
    /// follow, up to `to`; a backup at `to` again.
    Resume {
        nonce: u64,
        from: u64,
        to: u64,
    },
    /// The primary's word that every backup holds its commits up to `seq`: a backup's tail
    /// need not keep them.
    Durable {
        seq: u64,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub struct WritePart<'a> {
    pub seq: u64,
    pub part: u16,
    pub parts: u16,
    count: u16,
    body: &'a [u8],
}

/// One range of a WRITE part.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Range<'a> {
    pub segment: u16,
    pub offset: u32,
    pub bytes: &'a [u8],
}

#[derive(Debug, PartialEq, Eq)]
pub struct SnapPiece<'a> {
    pub last: bool,
    pub nonce: u64,
    pub seq: u64,
    pub segment: u16,
    pub offset: u32,
    pub bytes: &'a [u8],
}

impl From<CodecError> for MsgError {
    fn from(e: CodecError) -> MsgError {
        match e {
            CodecError::Short { .. } | CodecError::Count { .. } => MsgError::Short,
            CodecError::Trailing(_) => MsgError::Trailing,
        }
    }
}

impl<'a> Msg<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Msg<'a>, MsgError> {
        let mut r = Reader::new(b);
        r.need(2)?;
        if r.u8()? != MAGIC {
            return Err(MsgError::Magic);
        }
        // A message of fixed size with more bytes is refused as `Short`, like one with fewer.
        let fixed = |r: Reader<'_>| r.finish().map_err(|_| MsgError::Short);
        match r.u8()? {
            WRITE => {
                let seq = r.u64()?;
                let (part, parts, count) = (r.u16()?, r.u16()?, r.u16()?);
                if parts == 0 || part >= parts {
                    return Err(MsgError::Part { part, parts });
                }
                let w = WritePart {
                    seq,
                    part,
                    parts,
                    count,
                    body: r.rest(),
                };
                // Walk the ranges once now, so that `ranges` cannot fail later.
                let mut body = Reader::new(w.body);
                for _ in 0..w.count {
                    read_range(&mut body).map_err(|_| MsgError::RangeTruncated)?;
                }
                body.finish()?;
                Ok(Msg::Write(w))
            }
            ACK => {
                let seq = r.u64()?;
                fixed(r)?;
                Ok(Msg::Ack { seq })
            }
            SNAP_REQ => {
                let nonce = r.u64()?;
                fixed(r)?;
                Ok(Msg::SnapReq { nonce })
            }
            SNAP => Ok(Msg::Snap(SnapPiece {
                last: r.u8()? != 0,
                nonce: r.u64()?,
                seq: r.u64()?,
                segment: r.u16()?,
                offset: r.u32()?,
                bytes: r.rest(),
            })),
            DROPPED => {
                fixed(r)?;
                Ok(Msg::Dropped)
            }
            CATCH_UP => {
                let (nonce, seq, primary) = (r.u64()?, r.u64()?, r.u16()?);
                fixed(r)?;
                Ok(Msg::CatchUp {
                    nonce,
                    seq,
                    primary,
                })
            }
            DURABLE => {
                let seq = r.u64()?;
                fixed(r)?;
                Ok(Msg::Durable { seq })
            }
            RESUME => {
                let (nonce, from, to) = (r.u64()?, r.u64()?, r.u64()?);
                fixed(r)?;
                if from > to {
                    return Err(MsgError::Order { from, to });
                }
                Ok(Msg::Resume { nonce, from, to })
            }
            k => Err(MsgError::Kind(k)),
        }
    }
}

/// One range: segment, offset, length, bytes.
fn read_range<'a>(r: &mut Reader<'a>) -> Result<Range<'a>, CodecError> {
    let segment = r.u16()?;
    let offset = r.u32()?;
    let len = r.u32()? as usize;
    Ok(Range {
        segment,
        offset,
        bytes: r.take(len)?,
    })
}

impl<'a> WritePart<'a> {
    /// The part's ranges (checked by `parse`).
    pub fn ranges(&self) -> impl Iterator<Item = Range<'a>> + 'a {
        let mut r = Reader::new(self.body);
        (0..self.count).map_while(move |_| read_range(&mut r).ok())
    }
}

/// Builds a WRITE part into `out`: call [`WriteBuilder::range`] for each range, then
/// [`WriteBuilder::finish`].
pub struct WriteBuilder<'o> {
    out: &'o mut Vec<u8>,
    count: u16,
}

/// Where the range count sits in a WRITE part.
const COUNT_AT: usize = WRITE_HEADER - 2;

impl<'o> WriteBuilder<'o> {
    pub fn new(out: &'o mut Vec<u8>, seq: u64, part: u16, parts: u16) -> WriteBuilder<'o> {
        out.clear();
        Writer::new(out)
            .u8(MAGIC)
            .u8(WRITE)
            .u64(seq)
            .u16(part)
            .u16(parts)
            .u16(0);
        WriteBuilder { out, count: 0 }
    }

    pub fn range(&mut self, segment: u16, offset: u32, bytes: &[u8]) {
        Writer::new(self.out)
            .u16(segment)
            .u32(offset)
            .u32(bytes.len() as u32)
            .bytes(bytes);
        self.count += 1;
    }

    pub fn finish(self) {
        Writer::new(self.out).set_u16(COUNT_AT, self.count);
    }
}

pub fn ack(seq: u64, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out).u8(MAGIC).u8(ACK).u64(seq);
}

pub fn dropped(out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out).u8(MAGIC).u8(DROPPED);
}

pub fn catch_up(nonce: u64, seq: u64, primary: u16, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out)
        .u8(MAGIC)
        .u8(CATCH_UP)
        .u64(nonce)
        .u64(seq)
        .u16(primary);
}

pub fn durable(seq: u64, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out).u8(MAGIC).u8(DURABLE).u64(seq);
}

pub fn resume(nonce: u64, from: u64, to: u64, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out)
        .u8(MAGIC)
        .u8(RESUME)
        .u64(nonce)
        .u64(from)
        .u64(to);
}

pub fn snap_req(nonce: u64, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out).u8(MAGIC).u8(SNAP_REQ).u64(nonce);
}

/// A SNAP piece (see the module comment).
pub struct SnapFields {
    pub last: bool,
    pub nonce: u64,
    pub seq: u64,
    pub segment: u16,
    pub offset: u32,
}

pub fn snap(f: SnapFields, bytes: &[u8], out: &mut Vec<u8>) {
    let SnapFields {
        last,
        nonce,
        seq,
        segment,
        offset,
    } = f;
    out.clear();
    Writer::new(out)
        .u8(MAGIC)
        .u8(SNAP)
        .u8(u8::from(last))
        .u64(nonce)
        .u64(seq)
        .u16(segment)
        .u32(offset)
        .bytes(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_parts_round_trip_and_bad_ones_are_refused() {
        let mut out = Vec::new();
        let mut w = WriteBuilder::new(&mut out, 7, 1, 3);
        w.range(2, 100, b"abc");
        w.range(0, 0, b"");
        w.finish();
        let Ok(Msg::Write(p)) = Msg::parse(&out) else {
            panic!("no parse");
        };
        assert_eq!((p.seq, p.part, p.parts), (7, 1, 3));
        let r: Vec<_> = p.ranges().collect();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].segment, r[0].offset, r[0].bytes),
            (2, 100, &b"abc"[..])
        );
        assert_eq!(r[1].bytes, b"");
        // Every truncation is refused, never a panic.
        for n in 0..out.len() {
            assert!(Msg::parse(&out[..n]).is_err(), "{n}");
        }
        let mut long = out.clone();
        long.push(0);
        assert_eq!(Msg::parse(&long), Err(MsgError::Trailing));
        let mut bad = out.clone();
        bad[10..12].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(Msg::parse(&bad), Err(MsgError::Part { part: 3, parts: 3 }));
        bad = out.clone();
        bad[0] = 0;
        assert_eq!(Msg::parse(&bad), Err(MsgError::Magic));
        bad = out;
        bad[1] = 99;
        assert_eq!(Msg::parse(&bad), Err(MsgError::Kind(99)));
    }

    #[test]
    fn ack_and_snapshot_round_trip() {
        let mut out = Vec::new();
        ack(42, &mut out);
        assert_eq!(Msg::parse(&out), Ok(Msg::Ack { seq: 42 }));
        out.pop();
        assert_eq!(Msg::parse(&out), Err(MsgError::Short));
        let f = SnapFields {
            last: true,
            nonce: 5,
            seq: 9,
            segment: 3,
            offset: 4096,
        };
        snap(f, b"xy", &mut out);
        let Ok(Msg::Snap(s)) = Msg::parse(&out) else {
            panic!("no parse");
        };
        assert_eq!(s.nonce, 5);
        assert_eq!(
            (s.last, s.seq, s.segment, s.offset, s.bytes),
            (true, 9, 3, 4096, &b"xy"[..])
        );
        snap_req(77, &mut out);
        assert_eq!(Msg::parse(&out), Ok(Msg::SnapReq { nonce: 77 }));
    }
}
