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
//! - `SNAP`: a piece of one segment (`segment, offset, bytes`) for request `nonce`, flagged
//!   last on the final piece of the final segment, with the commit sequence number the
//!   snapshot covers.

use thiserror::Error;

pub const MAGIC: u8 = 0xC7;
pub const WRITE: u8 = 1;
pub const ACK: u8 = 2;
pub const SNAP_REQ: u8 = 3;
pub const SNAP: u8 = 4;
pub const DROPPED: u8 = 5;

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
}

/// A decoded message, borrowing the datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Msg<'a> {
    Write(WritePart<'a>),
    Ack { seq: u64 },
    SnapReq { nonce: u64 },
    Snap(SnapPiece<'a>),
    Dropped,
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

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl<'a> Msg<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Msg<'a>, MsgError> {
        if b.len() < 2 {
            return Err(MsgError::Short);
        }
        if b[0] != MAGIC {
            return Err(MsgError::Magic);
        }
        match b[1] {
            WRITE => {
                if b.len() < WRITE_HEADER {
                    return Err(MsgError::Short);
                }
                let (part, parts) = (u16_at(b, 10), u16_at(b, 12));
                if parts == 0 || part >= parts {
                    return Err(MsgError::Part { part, parts });
                }
                let w = WritePart {
                    seq: u64_at(b, 2),
                    part,
                    parts,
                    count: u16_at(b, 14),
                    body: &b[WRITE_HEADER..],
                };
                // Walk the ranges once now, so that `ranges` cannot fail later.
                let mut rest = w.body;
                for _ in 0..w.count {
                    if rest.len() < RANGE_HEADER {
                        return Err(MsgError::RangeTruncated);
                    }
                    let len = u32_at(rest, 6) as usize;
                    if rest.len() - RANGE_HEADER < len {
                        return Err(MsgError::RangeTruncated);
                    }
                    rest = &rest[RANGE_HEADER + len..];
                }
                if !rest.is_empty() {
                    return Err(MsgError::Trailing);
                }
                Ok(Msg::Write(w))
            }
            ACK => {
                if b.len() != 10 {
                    return Err(MsgError::Short);
                }
                Ok(Msg::Ack { seq: u64_at(b, 2) })
            }
            SNAP_REQ => {
                if b.len() != 10 {
                    return Err(MsgError::Short);
                }
                Ok(Msg::SnapReq {
                    nonce: u64_at(b, 2),
                })
            }
            SNAP => {
                if b.len() < SNAP_HEADER {
                    return Err(MsgError::Short);
                }
                Ok(Msg::Snap(SnapPiece {
                    last: b[2] != 0,
                    nonce: u64_at(b, 3),
                    seq: u64_at(b, 11),
                    segment: u16_at(b, 19),
                    offset: u32_at(b, 21),
                    bytes: &b[SNAP_HEADER..],
                }))
            }
            DROPPED => {
                if b.len() != 2 {
                    return Err(MsgError::Short);
                }
                Ok(Msg::Dropped)
            }
            k => Err(MsgError::Kind(k)),
        }
    }
}

impl<'a> WritePart<'a> {
    /// The part's ranges (checked by `parse`).
    pub fn ranges(&self) -> impl Iterator<Item = Range<'a>> + 'a {
        let mut rest = self.body;
        (0..self.count).map(move |_| {
            let len = u32_at(rest, 6) as usize;
            let r = Range {
                segment: u16_at(rest, 0),
                offset: u32_at(rest, 2),
                bytes: &rest[RANGE_HEADER..RANGE_HEADER + len],
            };
            rest = &rest[RANGE_HEADER + len..];
            r
        })
    }
}

/// Builds a WRITE part into `out`: call [`WriteBuilder::range`] for each range, then
/// [`WriteBuilder::finish`].
pub struct WriteBuilder<'o> {
    out: &'o mut Vec<u8>,
    count: u16,
}

impl<'o> WriteBuilder<'o> {
    pub fn new(out: &'o mut Vec<u8>, seq: u64, part: u16, parts: u16) -> WriteBuilder<'o> {
        out.clear();
        out.extend_from_slice(&[MAGIC, WRITE]);
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&part.to_le_bytes());
        out.extend_from_slice(&parts.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        WriteBuilder { out, count: 0 }
    }

    pub fn range(&mut self, segment: u16, offset: u32, bytes: &[u8]) {
        self.out.extend_from_slice(&segment.to_le_bytes());
        self.out.extend_from_slice(&offset.to_le_bytes());
        self.out
            .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        self.out.extend_from_slice(bytes);
        self.count += 1;
    }

    pub fn finish(self) {
        self.out[14..16].copy_from_slice(&self.count.to_le_bytes());
    }
}

pub fn ack(seq: u64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[MAGIC, ACK]);
    out.extend_from_slice(&seq.to_le_bytes());
}

pub fn dropped(out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[MAGIC, DROPPED]);
}

pub fn snap_req(nonce: u64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[MAGIC, SNAP_REQ]);
    out.extend_from_slice(&nonce.to_le_bytes());
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
    out.extend_from_slice(&[MAGIC, SNAP, u8::from(last)]);
    out.extend_from_slice(&nonce.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&segment.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(bytes);
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
