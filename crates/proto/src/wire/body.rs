use super::{Records, WireError};
use crate::addr::TxnId;
use crate::codec::{u16_at, u32_at, u64_at};

pub const DATA_PREFIX_BYTES: usize = 36;
pub const ACK_PREFIX_BYTES: usize = 24;
/// Sequence numbers stay this far below `u64::MAX`, so no arithmetic on them can overflow.
pub const SEQ_MAX: u64 = u64::MAX - (1 << 32);
pub const MULTICAST_PREFIX_BYTES: usize = 8;
/// Bytes of a [`Numbering`], after the kind's prefix of a numbered DATAGRAM or MULTICAST.
pub const NUMBERING_BYTES: usize = 16;
pub const NAK_RANGE_BYTES: usize = 12;
/// Most NAK ranges one ACK may carry.
pub const NAK_RANGES_MAX: usize = 32;

/// The body of a DATA packet: messages `first_seq, first_seq + 1, ...` on a link, with the
/// sender's piggybacked acknowledgement and credit for the reverse direction.
#[derive(Clone, Copy, Debug)]
pub struct DataBody<'a> {
    pub first_seq: u64,
    /// The oldest message the sender still holds: a receiver with no state for this sender
    /// starts here.
    pub base: u64,
    /// Every message below `ack` from the peer has arrived.
    pub ack: u64,
    /// The incarnation of the peer that `ack` and `credit` refer to: a restarted peer
    /// ignores acknowledgements meant for its predecessor.
    pub ack_incarnation: u64,
    /// How many messages past `ack` the sender of this packet will accept.
    pub credit: u32,
    /// Number of records, validated.
    pub count: usize,
    pub records: &'a [u8],
}

impl<'a> DataBody<'a> {
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        if body.len() < DATA_PREFIX_BYTES {
            return Err(WireError::BodyTooShort);
        }
        let records = &body[DATA_PREFIX_BYTES..];
        let count = Records::validate(records)?;
        if count == 0 {
            return Err(WireError::DataWithoutRecords);
        }
        if u64_at(body, 8) > u64_at(body, 0) {
            return Err(WireError::BaseAboveFirst);
        }
        if u64_at(body, 0) > SEQ_MAX || u64_at(body, 16) > SEQ_MAX {
            return Err(WireError::SequenceOutOfRange);
        }
        Ok(DataBody {
            first_seq: u64_at(body, 0),
            base: u64_at(body, 8),
            ack: u64_at(body, 16),
            ack_incarnation: u64_at(body, 24),
            credit: u32_at(body, 32),
            count,
            records,
        })
    }

    pub fn records(&self) -> Records<'a> {
        Records::new(self.records)
    }
}

/// A run of missing messages `start .. start + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NakRange {
    pub start: u64,
    pub len: u32,
}

/// The body of an ACK packet.
#[derive(Clone, Copy, Debug)]
pub struct AckBody<'a> {
    pub ack: u64,
    /// The incarnation of the peer this acknowledgement is for.
    pub ack_incarnation: u64,
    pub credit: u32,
    naks: &'a [u8],
}

impl<'a> AckBody<'a> {
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        if body.len() < ACK_PREFIX_BYTES {
            return Err(WireError::BodyTooShort);
        }
        let ack = u64_at(body, 0);
        let ack_incarnation = u64_at(body, 8);
        let credit = u32_at(body, 16);
        let count = u16_at(body, 20) as usize;
        if u16_at(body, 22) != 0 {
            return Err(WireError::ReservedNotZero);
        }
        if ack > SEQ_MAX {
            return Err(WireError::SequenceOutOfRange);
        }
        if count > NAK_RANGES_MAX {
            return Err(WireError::TooManyNakRanges);
        }
        let naks = &body[ACK_PREFIX_BYTES..];
        if naks.len() != count * NAK_RANGE_BYTES {
            return Err(WireError::NakListLength);
        }
        for i in 0..count {
            let r = nak_at(naks, i);
            if r.len == 0 || r.start < ack {
                return Err(WireError::NakRangeInvalid);
            }
        }
        Ok(AckBody {
            ack,
            ack_incarnation,
            credit,
            naks,
        })
    }

    pub fn nak_count(&self) -> usize {
        self.naks.len() / NAK_RANGE_BYTES
    }

    pub fn naks(&self) -> impl Iterator<Item = NakRange> + 'a {
        let naks = self.naks;
        (0..naks.len() / NAK_RANGE_BYTES).map(move |i| nak_at(naks, i))
    }
}

fn nak_at(naks: &[u8], i: usize) -> NakRange {
    let at = i * NAK_RANGE_BYTES;
    NakRange {
        start: u64_at(naks, at),
        len: u32_at(naks, at + 8),
    }
}

/// What a numbered DATAGRAM or MULTICAST carries ([`super::FLAG_NUMBERED`], a keyed
/// cluster's): the sending port's sequence number, one counter for all its datagrams and
/// multicasts, and the incarnation of the destination port as the sender knows it (0 when it
/// does not; always 0 in a MULTICAST, which has many destinations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numbering {
    pub seq: u64,
    pub dst_incarnation: u64,
}

impl Numbering {
    fn read(flags: u8, body: &[u8]) -> Result<(Option<Numbering>, &[u8]), WireError> {
        if flags & super::FLAG_NUMBERED == 0 {
            return Ok((None, body));
        }
        if body.len() < NUMBERING_BYTES {
            return Err(WireError::BodyTooShort);
        }
        let n = Numbering {
            seq: u64_at(body, 0),
            dst_incarnation: u64_at(body, 8),
        };
        Ok((Some(n), &body[NUMBERING_BYTES..]))
    }

    pub(crate) fn write(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8..16].copy_from_slice(&self.dst_incarnation.to_le_bytes());
    }
}

/// The body of a MULTICAST packet: messages for a transaction's group.
#[derive(Clone, Copy, Debug)]
pub struct MulticastBody<'a> {
    pub txn: TxnId,
    pub numbering: Option<Numbering>,
    pub count: usize,
    pub records: &'a [u8],
}

impl<'a> MulticastBody<'a> {
    /// The body of an unnumbered packet (see [`MulticastBody::parse_flags`]).
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        Self::parse_flags(0, body)
    }

    /// The body of a packet with header flags `flags` (numbered or not).
    pub fn parse_flags(flags: u8, body: &'a [u8]) -> Result<Self, WireError> {
        if body.len() < MULTICAST_PREFIX_BYTES {
            return Err(WireError::BodyTooShort);
        }
        let (numbering, records) = Numbering::read(flags, &body[MULTICAST_PREFIX_BYTES..])?;
        let count = Records::validate(records)?;
        Ok(MulticastBody {
            txn: TxnId(u64_at(body, 0)),
            numbering,
            count,
            records,
        })
    }

    pub fn records(&self) -> Records<'a> {
        Records::new(self.records)
    }
}

/// Validates the records of an unnumbered DATAGRAM body and returns how many there are.
pub fn parse_datagram(body: &[u8]) -> Result<usize, WireError> {
    Records::validate(body)
}

/// The body of a DATAGRAM packet: records, after a [`Numbering`] when the packet is numbered.
#[derive(Clone, Copy, Debug)]
pub struct DatagramBody<'a> {
    pub numbering: Option<Numbering>,
    pub count: usize,
    pub records: &'a [u8],
}

impl<'a> DatagramBody<'a> {
    /// The body of a packet with header flags `flags`.
    pub fn parse(flags: u8, body: &'a [u8]) -> Result<Self, WireError> {
        let (numbering, records) = Numbering::read(flags, body)?;
        let count = Records::validate(records)?;
        Ok(DatagramBody {
            numbering,
            count,
            records,
        })
    }

    pub fn records(&self) -> Records<'a> {
        Records::new(self.records)
    }
}
