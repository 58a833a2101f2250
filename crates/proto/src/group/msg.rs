//! Group protocol messages: checked views over bytes and their writers.
//!
//! Every message starts with a 32-byte group header:
//!
//! ```text
//!  0 kind u8 | 1 flags u8 | 2 reserved u16 | 4 group u32
//!  8 epoch number u64 | 16 epoch coordinator (address) | 24 from (address)
//! ```
//!
//! then a fixed part by kind, then (for `Submit` and `Order`) records. All integers are
//! little-endian. A decoder error names the rule the bytes broke.

use crate::addr::{Address, ADDRESS_BYTES};
use crate::codec::{
    put_u16, put_u32, put_u64, u16_at, u32_at, u64_at, wire_enum, CodecError, Reader, SliceWriter,
};

pub const GROUP_HEADER_BYTES: usize = 32;
/// Byte offsets of the group header's fields (see the module doc), for [`parse`] and
/// [`MsgWriter::start`].
mod at {
    pub const KIND: usize = 0;
    pub const FLAGS: usize = 1;
    pub const RESERVED: usize = 2;
    pub const GROUP: usize = 4;
    pub const EPOCH_NUMBER: usize = 8;
    pub const EPOCH_COORDINATOR: usize = 16;
    pub const FROM: usize = 24;
}
/// Fixed part of a `Submit` (consumed, received) and of each submitted record header.
pub const SUBMIT_FIXED_BYTES: usize = 16;
pub const SUBMIT_RECORD_BYTES: usize = 12;
/// Fixed part of an `Order` (ordered_upto, accepted_upto, stable_upto) and of each record header.
pub const ORDER_FIXED_BYTES: usize = 24;
pub const ORDER_RECORD_BYTES: usize = 32;
/// Most members a view or welcome lists.
pub const MEMBERS_MAX: usize = 256;

pub use crate::member::Epoch;

wire_enum! {
pub enum MsgKind: u8, unknown GroupWireError::UnknownKind {
    /// Member to sequencer (PB) or to all (BB): messages to be ordered, with the sender's acks.
    Submit = 1,
    /// Sequencer to all (or one, for retransmissions): ordered records and the watermarks.
    Order = 2,
    /// Member to sequencer: how far it has received and consumed.
    Ack = 3,
    /// Member to sequencer: please retransmit `from..=to`.
    Nak = 4,
    /// Failure detector: are you alive? (answered by an `Ack` or an empty `Order`)
    Probe = 5,
    /// A process asks to join.
    JoinRequest = 6,
    /// A member that is not the sequencer tells a joiner where the sequencer is.
    Redirect = 7,
    /// The sequencer admits a joiner: the view as of its join record.
    Welcome = 8,
    /// A member asks to leave.
    LeaveRequest = 9,
    /// Recovery: a coordinator invites the members to a new epoch (a ballot).
    Invite = 10,
    /// Recovery: a member's state, in answer to an invitation.
    InviteReply = 11,
    /// Recovery: the new view (also sent to a member still in an older epoch).
    NewView = 12,
    /// Recovery: a coordinator asks the members that answered its round to accept a view
    /// some of them had accepted in an earlier round (the second phase of Paxos).
    Propose = 13,
    /// Recovery: a member accepted the proposal of the round in the header.
    Accepted = 14,
}
}

/// `Submit` flag: the sender multicast this submit to every member (BB method).
pub const FLAG_BB: u8 = 1;
/// `Order` flag: the sequencer asks every member for an `Ack` (history filling up).
pub const FLAG_SYNC: u8 = 2;
const FLAGS_KNOWN: u8 = FLAG_BB | FLAG_SYNC;

wire_enum! {
/// What an ordered record is.
pub enum RecordKind: u8, unknown GroupWireError::UnknownRecordKind {
    /// An application message.
    Message = 1,
    /// A process joined (payload: its address).
    Join = 2,
    /// A member left (payload: its address).
    Leave = 3,
    /// The group was rebuilt (payload: the members, in rank order).
    View = 4,
}
}

/// Order-record flag: the payload follows (absent: a BB accept naming a submitted message).
const RECORD_HAS_PAYLOAD: u8 = 1;

/// Why bytes are not a group message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{self:?}")]
pub enum GroupWireError {
    /// Fewer bytes than the group header plus the kind's fixed part.
    TooShort,
    UnknownKind(u8),
    UnknownFlags(u8),
    ReservedNotZero,
    /// A record header or payload runs past the end.
    RecordOverrun,
    UnknownRecordKind(u8),
    /// A record flag no version defines.
    UnknownRecordFlags(u8),
    /// A member list longer than [`MEMBERS_MAX`] or than the bytes.
    BadMemberList,
    /// Bytes left over after the last field of a fixed-size message.
    TrailingBytes,
    /// A NAK whose range is empty or backwards.
    BadNakRange,
    /// A payload longer than the configured message bound.
    PayloadTooLong(usize),
}

impl From<CodecError> for GroupWireError {
    fn from(e: CodecError) -> GroupWireError {
        match e {
            CodecError::Short { .. } => GroupWireError::TooShort,
            CodecError::Trailing(_) => GroupWireError::TrailingBytes,
            CodecError::Count { .. } => GroupWireError::BadMemberList,
        }
    }
}

fn overrun(_: CodecError) -> GroupWireError {
    GroupWireError::RecordOverrun
}

fn address(r: &mut Reader<'_>) -> Result<Address, CodecError> {
    Ok(Address::from_bytes(r.array()?))
}

/// An epoch as it is written: its number, then its coordinator.
fn epoch(r: &mut Reader<'_>) -> Result<Epoch, CodecError> {
    Ok(Epoch {
        number: r.u64()?,
        coordinator: address(r)?,
    })
}

/// The group header of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupHeader {
    pub kind: MsgKind,
    pub flags: u8,
    pub group: u32,
    pub epoch: Epoch,
    pub from: Address,
}

/// A decoded message: the header and the kind's fields; records stay in the bytes.
#[derive(Clone, Copy, Debug)]
pub enum Msg<'a> {
    Submit {
        consumed: u64,
        received: u64,
        records: SubmitRecords<'a>,
    },
    Order {
        ordered_upto: u64,
        accepted_upto: u64,
        stable_upto: u64,
        records: OrderRecords<'a>,
    },
    Ack {
        consumed: u64,
        received: u64,
    },
    Nak {
        consumed: u64,
        received: u64,
        from: u64,
        to: u64,
    },
    Probe,
    /// `join_id` names one join (an address may leave and join again): a request still in
    /// flight after its join completed is recognised and ignored.
    JoinRequest {
        join_id: u64,
    },
    Redirect {
        sequencer: Address,
    },
    Welcome {
        join_seq: u64,
        stable_upto: u64,
        resilience: u8,
        sequencer: Address,
        /// Each member and the last msg_id of its ordered before the join (so the joiner,
        /// should it become sequencer, suppresses duplicates as the others would).
        members: MemberIds<'a>,
    },
    LeaveRequest,
    Invite {
        /// The epoch of the view being rebuilt (the coordinator's own).
        base: Epoch,
        /// How recent the coordinator's member list is (as in `InviteReply`).
        config_seq: u64,
    },
    InviteReply {
        /// How far the member applied the order (what it may have delivered).
        consumed: u64,
        received: u64,
        /// The oldest record the member still holds.
        held_from: u64,
        /// The epoch of the view the member is in (its records up to `received` are that
        /// view's).
        view: Epoch,
        /// The sequence number of the last membership record (join, leave, view) it holds:
        /// how recent its member list is.
        config_seq: u64,
        /// Optional (the rest of the body): the successor of the invitation's base the member
        /// accepted in the highest round (the ballot) it accepted one in, if any. Holding a
        /// rebuilt view's View record is accepting that view in the round that made it.
        accepted: Option<(Epoch, ViewValue<'a>)>,
    },
    NewView {
        start_seq: u64,
        sequencer: Address,
        /// How many of the members must hold the view's View record for it to commit (see
        /// `recovery`).
        quorum: u64,
        /// Whether the sender knows the view committed (it applied the View record, or learnt
        /// so): a member of it may then enter it despite having answered a later round on
        /// the view before, which can never succeed.
        committed: bool,
        /// The view the round that made it was on.
        base: Epoch,
        /// The members, each with the oldest record it held and how far it had received at
        /// the rebuild (zeros when not known), so a member can fetch what it lacks from
        /// whoever holds it.
        members: Survivors<'a>,
    },
    /// The view proposed, in the round of the header's epoch.
    Propose {
        value: ViewValue<'a>,
    },
    Accepted,
}

/// A rebuilt view as a value of the view change:
/// `[epoch][start u64][sequencer][quorum u64][base]` then its members as in `NewView`.
#[derive(Clone, Copy, Debug)]
pub struct ViewValue<'a> {
    pub epoch: Epoch,
    pub start_seq: u64,
    pub sequencer: Address,
    pub quorum: u64,
    /// The view the round that made it was on: it is a successor of that one.
    pub base: Epoch,
    pub members: Survivors<'a>,
}

/// The fixed part of a [`ViewValue`].
const VIEW_VALUE_FIXED: usize = 56;

/// The longest rebuild message: an `InviteReply` carrying a view of `MEMBERS_MAX` members.
pub const REBUILD_MSG_MAX: usize =
    GROUP_HEADER_BYTES + 48 + 16 + VIEW_VALUE_FIXED + MEMBERS_MAX * SURVIVOR_BYTES;

impl<'a> ViewValue<'a> {
    /// Reads a value that ends the message.
    fn read(r: &mut Reader<'a>) -> Result<ViewValue<'a>, GroupWireError> {
        r.need(VIEW_VALUE_FIXED)?;
        Ok(ViewValue {
            epoch: epoch(r)?,
            start_seq: r.u64()?,
            sequencer: address(r)?,
            quorum: r.u64()?,
            base: epoch(r)?,
            members: Survivors::parse(r.rest())?,
        })
    }
}

/// Parses and checks a group message. `payload_max` bounds every payload. The header is read
/// at fixed offsets after one length check (every packet has one); the body through a
/// [`Reader`].
pub fn parse(b: &[u8], payload_max: usize) -> Result<(GroupHeader, Msg<'_>), GroupWireError> {
    if b.len() < GROUP_HEADER_BYTES {
        return Err(GroupWireError::TooShort);
    }
    let kind = MsgKind::try_from(b[at::KIND])?;
    let flags = b[at::FLAGS];
    if flags & !FLAGS_KNOWN != 0 {
        return Err(GroupWireError::UnknownFlags(flags));
    }
    if u16_at(b, at::RESERVED) != 0 {
        return Err(GroupWireError::ReservedNotZero);
    }
    let hdr = GroupHeader {
        kind,
        flags,
        group: u32_at(b, at::GROUP),
        epoch: Epoch {
            number: u64_at(b, at::EPOCH_NUMBER),
            coordinator: Address::read_from(&b[at::EPOCH_COORDINATOR..at::FROM]),
        },
        from: Address::read_from(&b[at::FROM..GROUP_HEADER_BYTES]),
    };
    let mut r = Reader::new(&b[GROUP_HEADER_BYTES..]);
    let msg = match kind {
        MsgKind::Submit => {
            let (consumed, received) = (r.u64()?, r.u64()?);
            let records = SubmitRecords { bytes: r.rest() };
            records.validate(payload_max)?;
            Msg::Submit {
                consumed,
                received,
                records,
            }
        }
        MsgKind::Order => {
            let (ordered_upto, accepted_upto, stable_upto) = (r.u64()?, r.u64()?, r.u64()?);
            let records = OrderRecords { bytes: r.rest() };
            records.validate(payload_max)?;
            Msg::Order {
                ordered_upto,
                accepted_upto,
                stable_upto,
                records,
            }
        }
        MsgKind::Ack => Msg::Ack {
            consumed: r.u64()?,
            received: r.u64()?,
        },
        MsgKind::Nak => {
            let (consumed, received, from, to) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            // A wrong length is refused before a bad range.
            r.clone().finish()?;
            if from == 0 || to < from {
                return Err(GroupWireError::BadNakRange);
            }
            Msg::Nak {
                consumed,
                received,
                from,
                to,
            }
        }
        MsgKind::Probe => Msg::Probe,
        MsgKind::JoinRequest => Msg::JoinRequest { join_id: r.u64()? },
        MsgKind::Redirect => Msg::Redirect {
            sequencer: address(&mut r)?,
        },
        MsgKind::Welcome => {
            let (join_seq, stable_upto, resilience) = (r.u64()?, r.u64()?, r.u8()?);
            let reserved = r.take(7)?;
            let sequencer = address(&mut r)?;
            if reserved.iter().any(|&x| x != 0) {
                return Err(GroupWireError::ReservedNotZero);
            }
            Msg::Welcome {
                join_seq,
                stable_upto,
                resilience,
                sequencer,
                members: MemberIds::parse(r.rest())?,
            }
        }
        MsgKind::LeaveRequest => Msg::LeaveRequest,
        MsgKind::Invite => Msg::Invite {
            base: epoch(&mut r)?,
            config_seq: r.u64()?,
        },
        MsgKind::InviteReply => {
            let (consumed, received, held_from) = (r.u64()?, r.u64()?, r.u64()?);
            let (view, config_seq) = (epoch(&mut r)?, r.u64()?);
            let accepted = if r.left() == 0 {
                None
            } else {
                Some((epoch(&mut r)?, ViewValue::read(&mut r)?))
            };
            Msg::InviteReply {
                consumed,
                received,
                held_from,
                view,
                config_seq,
                accepted,
            }
        }
        MsgKind::Propose => Msg::Propose {
            value: ViewValue::read(&mut r)?,
        },
        MsgKind::Accepted => Msg::Accepted,
        MsgKind::NewView => {
            let (start_seq, sequencer, quorum) = (r.u64()?, address(&mut r)?, r.u64()?);
            let (committed, base) = (r.u64()?, epoch(&mut r)?);
            let committed = match committed {
                0 => false,
                1 => true,
                _ => return Err(GroupWireError::ReservedNotZero),
            };
            Msg::NewView {
                start_seq,
                sequencer,
                quorum,
                committed,
                base,
                members: Survivors::parse(r.rest())?,
            }
        }
    };
    r.finish()?;
    Ok((hdr, msg))
}

/// A checked list of `(member, oldest record held, received up to)` triples.
#[derive(Clone, Copy, Debug)]
pub struct Survivors<'a> {
    bytes: &'a [u8],
}

const SURVIVOR_BYTES: usize = ADDRESS_BYTES + 16;

impl<'a> Survivors<'a> {
    fn parse(b: &'a [u8]) -> Result<Survivors<'a>, GroupWireError> {
        if !b.len().is_multiple_of(SURVIVOR_BYTES) || b.len() / SURVIVOR_BYTES > MEMBERS_MAX {
            return Err(GroupWireError::BadMemberList);
        }
        Ok(Survivors { bytes: b })
    }

    pub fn iter(&self) -> impl Iterator<Item = (Address, u64, u64)> + 'a {
        self.bytes.chunks_exact(SURVIVOR_BYTES).map(|c| {
            (
                Address::read_from(c),
                u64_at(c, ADDRESS_BYTES),
                u64_at(c, ADDRESS_BYTES + 8),
            )
        })
    }
}

/// A checked list of `(member, last msg_id)` pairs.
#[derive(Clone, Copy, Debug)]
pub struct MemberIds<'a> {
    bytes: &'a [u8],
}

impl<'a> MemberIds<'a> {
    fn parse(b: &'a [u8]) -> Result<MemberIds<'a>, GroupWireError> {
        if !b.len().is_multiple_of(ADDRESS_BYTES + 8) || b.len() / (ADDRESS_BYTES + 8) > MEMBERS_MAX
        {
            return Err(GroupWireError::BadMemberList);
        }
        Ok(MemberIds { bytes: b })
    }

    pub fn iter(&self) -> impl Iterator<Item = (Address, u64)> + 'a {
        self.bytes
            .chunks_exact(ADDRESS_BYTES + 8)
            .map(|c| (Address::read_from(c), u64_at(c, ADDRESS_BYTES)))
    }
}

/// The records of a `Submit`: `[msg_id u64][len u32][payload]`.
#[derive(Clone, Copy, Debug)]
pub struct SubmitRecords<'a> {
    bytes: &'a [u8],
}

impl<'a> SubmitRecords<'a> {
    /// Reads one record.
    fn read(r: &mut Reader<'a>, payload_max: usize) -> Result<(u64, &'a [u8]), GroupWireError> {
        let id = r.u64().map_err(overrun)?;
        let len = r.u32().map_err(overrun)? as usize;
        if len > payload_max {
            return Err(GroupWireError::PayloadTooLong(len));
        }
        Ok((id, r.take(len).map_err(overrun)?))
    }

    fn validate(&self, payload_max: usize) -> Result<(), GroupWireError> {
        let mut r = Reader::new(self.bytes);
        while r.left() > 0 {
            Self::read(&mut r, payload_max)?;
        }
        Ok(())
    }

    /// `(msg_id, payload)` of each record (validated at parse).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &'a [u8])> + 'a {
        let mut r = Reader::new(self.bytes);
        core::iter::from_fn(move || match r.left() {
            0 => None,
            _ => Self::read(&mut r, usize::MAX).ok(),
        })
    }
}

/// One ordered record as read from an `Order`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderRecord<'a> {
    pub seq: u64,
    pub sender: Address,
    pub msg_id: u64,
    pub kind: RecordKind,
    /// `None`: a BB accept; the payload travelled in the sender's own multicast.
    pub payload: Option<&'a [u8]>,
}

/// The records of an `Order`:
/// `[seq u64][sender][msg_id u64][kind u8][flags u8][reserved u16][len u32][payload]`.
#[derive(Clone, Copy, Debug)]
pub struct OrderRecords<'a> {
    bytes: &'a [u8],
}

impl<'a> OrderRecords<'a> {
    /// Reads and checks one record.
    fn read(r: &mut Reader<'a>, payload_max: usize) -> Result<OrderRecord<'a>, GroupWireError> {
        r.need(ORDER_RECORD_BYTES).map_err(overrun)?;
        let seq = r.u64()?;
        let sender = address(r)?;
        let msg_id = r.u64()?;
        let kind = RecordKind::try_from(r.u8()?)?;
        let flags = r.u8()?;
        if flags & !RECORD_HAS_PAYLOAD != 0 {
            return Err(GroupWireError::UnknownRecordFlags(flags));
        }
        if r.u16()? != 0 {
            return Err(GroupWireError::ReservedNotZero);
        }
        let len = r.u32()? as usize;
        let has_payload = flags & RECORD_HAS_PAYLOAD != 0;
        if !has_payload && len != 0 {
            return Err(GroupWireError::RecordOverrun);
        }
        if len > payload_max {
            return Err(GroupWireError::PayloadTooLong(len));
        }
        let payload = r.take(len).map_err(overrun)?;
        Ok(OrderRecord {
            seq,
            sender,
            msg_id,
            kind,
            payload: has_payload.then_some(payload),
        })
    }

    fn validate(&self, payload_max: usize) -> Result<(), GroupWireError> {
        let mut r = Reader::new(self.bytes);
        while r.left() > 0 {
            Self::read(&mut r, payload_max)?;
        }
        Ok(())
    }

    /// The records (validated at parse).
    pub fn iter(&self) -> impl Iterator<Item = OrderRecord<'a>> + 'a {
        let mut r = Reader::new(self.bytes);
        core::iter::from_fn(move || match r.left() {
            0 => None,
            _ => Self::read(&mut r, usize::MAX).ok(),
        })
    }
}

/// Builds one message in a caller's buffer. Methods that add records return `false` (and
/// write nothing) when the record does not fit.
pub struct MsgWriter<'b> {
    w: SliceWriter<'b>,
}

impl<'b> MsgWriter<'b> {
    /// Starts a message; `None` if `buf` cannot hold the header.
    pub fn start(
        buf: &'b mut [u8],
        kind: MsgKind,
        flags: u8,
        group: u32,
        epoch: Epoch,
        from: Address,
    ) -> Option<MsgWriter<'b>> {
        if buf.len() < GROUP_HEADER_BYTES {
            return None;
        }
        debug_assert_eq!(flags & !FLAGS_KNOWN, 0);
        let mut h = [0u8; GROUP_HEADER_BYTES];
        h[at::KIND] = kind as u8;
        h[at::FLAGS] = flags;
        put_u16(&mut h, at::RESERVED, 0);
        put_u32(&mut h, at::GROUP, group);
        put_u64(&mut h, at::EPOCH_NUMBER, epoch.number);
        epoch
            .coordinator
            .write_to(&mut h[at::EPOCH_COORDINATOR..at::FROM]);
        from.write_to(&mut h[at::FROM..GROUP_HEADER_BYTES]);
        let mut w = SliceWriter::new(buf);
        w.bytes(&h);
        Some(MsgWriter { w })
    }

    pub fn room(&self) -> usize {
        self.w.room()
    }

    pub fn u64(&mut self, v: u64) -> bool {
        self.bytes(&v.to_le_bytes())
    }

    /// A [`ViewValue`].
    pub fn view_value(&mut self, v: &ViewValue<'_>) -> bool {
        let members: Vec<(Address, u64, u64)> = v.members.iter().collect();
        self.view_value_parts(
            v.epoch,
            v.start_seq,
            v.sequencer,
            v.quorum,
            v.base,
            &members,
        )
    }

    /// A [`ViewValue`] from its parts.
    pub fn view_value_parts(
        &mut self,
        epoch: Epoch,
        start_seq: u64,
        sequencer: Address,
        quorum: u64,
        base: Epoch,
        members: &[(Address, u64, u64)],
    ) -> bool {
        self.epoch(epoch)
            && self.u64(start_seq)
            && self.address(sequencer)
            && self.u64(quorum)
            && self.epoch(base)
            && self.survivors(members)
    }

    pub fn epoch(&mut self, e: Epoch) -> bool {
        self.u64(e.number) && self.address(e.coordinator)
    }

    pub fn address(&mut self, a: Address) -> bool {
        self.bytes(&a.to_bytes())
    }

    /// Writes `b`, or nothing (and returns `false`) if it does not fit.
    pub fn bytes(&mut self, b: &[u8]) -> bool {
        if self.room() < b.len() {
            return false;
        }
        self.w.bytes(b);
        true
    }

    pub fn survivors(&mut self, m: &[(Address, u64, u64)]) -> bool {
        if self.room() < m.len() * SURVIVOR_BYTES {
            return false;
        }
        for &(a, from, upto) in m {
            self.w.bytes(&a.to_bytes()).u64(from).u64(upto);
        }
        true
    }

    pub fn member_ids(&mut self, m: &[(Address, u64)]) -> bool {
        if self.room() < m.len() * (ADDRESS_BYTES + 8) {
            return false;
        }
        for &(a, id) in m {
            self.w.bytes(&a.to_bytes()).u64(id);
        }
        true
    }

    pub fn submit_record(&mut self, msg_id: u64, payload: &[u8]) -> bool {
        if self.room() < SUBMIT_RECORD_BYTES + payload.len() {
            return false;
        }
        self.w.u64(msg_id).u32(payload.len() as u32).bytes(payload);
        true
    }

    pub fn order_record(&mut self, r: &OrderRecord<'_>) -> bool {
        let len = r.payload.map_or(0, |p| p.len());
        if self.room() < ORDER_RECORD_BYTES + len {
            return false;
        }
        let flags = if r.payload.is_some() {
            RECORD_HAS_PAYLOAD
        } else {
            0
        };
        self.w
            .u64(r.seq)
            .bytes(&r.sender.to_bytes())
            .u64(r.msg_id)
            .u8(r.kind as u8)
            .u8(flags)
            .u16(0)
            .u32(len as u32)
            .bytes(r.payload.unwrap_or(&[]));
        true
    }

    pub fn finish(self) -> usize {
        self.w.len()
    }
}

/// The bytes a record of `payload` bytes takes in an `Order`.
pub const fn order_record_bytes(payload: usize) -> usize {
    ORDER_RECORD_BYTES + payload
}
