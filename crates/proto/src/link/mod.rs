//! The reliable link: in-order, exactly-once delivery of messages from one port to another over
//! an unreliable datagram network (paper 004 "Control Message Layer" is the model).
//!
//! A sliding window of sequence-numbered messages; the receiver acknowledges cumulatively (piggy-
//! backed on its own DATA when it has some), names the gaps it sees with selective negative
//! acknowledgements, and grants credit from its bounded reorder buffer, which is how back-pressure
//! reaches a fast sender. The sender retransmits what is NAKed at once and what stays unacked past
//! its retransmission timeout. Several queued messages go out in one packet (see [`crate::pack`]);
//! messages longer than a packet travel as fragments, one sequence number each.
//!
//! Sans-IO: feed it `handle_packet`, `handle_timeout` and `send`; drain `poll_transmit`,
//! `poll_delivery` and `poll_timeout`. The caller owns every buffer and the clock.

mod receiver;
mod sender;
pub mod table;
#[cfg(test)]
mod tests;

use crate::addr::Address;
use crate::pack::PackMode;
use crate::time::Instant;
use crate::wire::{
    AckBody, DataBody, Kind, Packet, PacketHeader, PacketKey, WireError, DATA_PREFIX_BYTES,
    FRAG_EXTRA_BYTES, HEADER_BYTES, PACKET_BYTES_MAX, PACKET_BYTES_MIN, RECORD_HEADER_BYTES,
    TRAILER_BYTES_MAX,
};
use core::time::Duration;
use receiver::Receiver;
use sender::Sender;
use std::sync::Arc;
pub use table::{LinkIo, LinkTable, RunOutcome, TableRefusal, TableSendError};

/// Bounds and timers of a link.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// Largest packet built, in bytes (header, body and MAC).
    pub packet_bytes_max: usize,
    /// Largest message accepted by `send`; longer ones are fragmented on the wire.
    pub message_bytes_max: usize,
    /// Messages the sender may have in flight (sent, unacknowledged).
    pub window_msgs: u32,
    /// Messages the sender holds in all (in flight plus queued); `send` past it is back-pressure.
    pub send_buffer_msgs: u32,
    /// The receiver's reorder and delivery buffer, in messages; it bounds the credit granted.
    pub recv_buffer_msgs: u32,
    pub rto_initial: Duration,
    pub rto_min: Duration,
    pub rto_max: Duration,
    /// How long a receiver may sit on an acknowledgement hoping to piggyback it.
    pub ack_delay: Duration,
    /// Acknowledge at once after this many unacknowledged DATA packets.
    pub ack_every_packets: u32,
    /// A gap is NAKed again only after this long.
    pub nak_interval: Duration,
    pub pack: PackMode,
    /// Consecutive retransmission timeouts with no acknowledgement at all from the peer after
    /// which the link reports it unreachable (0: never). Retransmission goes on; the first
    /// acknowledgement clears the verdict.
    pub unreachable_after_timeouts: u32,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            packet_bytes_max: 1472,
            message_bytes_max: 64 * 1024,
            window_msgs: 1024,
            send_buffer_msgs: 4096,
            recv_buffer_msgs: 1024,
            rto_initial: Duration::from_millis(20),
            rto_min: Duration::from_millis(2),
            rto_max: Duration::from_millis(1000),
            ack_delay: Duration::from_micros(500),
            ack_every_packets: 4,
            nak_interval: Duration::from_millis(2),
            pack: PackMode::default(),
            unreachable_after_timeouts: 10,
        }
    }
}

/// A configuration broke one of the relations between bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid link configuration: {0}")]
pub struct ConfigError(pub &'static str);

impl LinkConfig {
    /// Payload bytes of one fragment record in a packet of `packet_bytes_max`. `keyed`: the
    /// packets carry a trailer; room is left for the longest (a sealed packet's), so that a key
    /// rollover between MAC-only and sealing keys changes no bound.
    pub fn fragment_payload_max(&self, keyed: bool) -> usize {
        self.packet_bytes_max
            - HEADER_BYTES
            - DATA_PREFIX_BYTES
            - RECORD_HEADER_BYTES
            - FRAG_EXTRA_BYTES
            - if keyed { TRAILER_BYTES_MAX } else { 0 }
    }

    /// Payload bytes of a whole message that travels unfragmented.
    pub fn whole_payload_max(&self, keyed: bool) -> usize {
        self.fragment_payload_max(keyed) + FRAG_EXTRA_BYTES
    }

    /// Most fragments a message of `message_bytes_max` needs.
    pub fn fragments_max(&self, keyed: bool) -> usize {
        self.message_bytes_max
            .div_ceil(self.fragment_payload_max(keyed))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(PACKET_BYTES_MIN..=PACKET_BYTES_MAX).contains(&self.packet_bytes_max) {
            return Err(ConfigError("packet_bytes_max outside 256..=65507"));
        }
        if self.window_msgs == 0 || self.send_buffer_msgs < self.window_msgs {
            return Err(ConfigError("need 0 < window_msgs <= send_buffer_msgs"));
        }
        if self.send_buffer_msgs > 1 << 20 || self.recv_buffer_msgs > 1 << 20 {
            return Err(ConfigError("buffers are bounded to 2^20 messages"));
        }
        if self.message_bytes_max == 0 || self.message_bytes_max > u32::MAX as usize {
            return Err(ConfigError("message_bytes_max outside 1..=u32::MAX"));
        }
        let frags = self.fragments_max(true);
        if frags > u16::MAX as usize {
            return Err(ConfigError(
                "message_bytes_max needs more than 65535 fragments",
            ));
        }
        // A whole fragmented message must fit the receiver's buffer, or it could never be
        // delivered; and the sender must be able to hold it.
        if frags > self.recv_buffer_msgs as usize || frags > self.send_buffer_msgs as usize {
            return Err(ConfigError(
                "a message of message_bytes_max needs more fragments than the buffers hold",
            ));
        }
        if self.rto_min.is_zero()
            || self.rto_min > self.rto_initial
            || self.rto_initial > self.rto_max
        {
            return Err(ConfigError("need 0 < rto_min <= rto_initial <= rto_max"));
        }
        if self.ack_every_packets == 0 {
            return Err(ConfigError("ack_every_packets must be at least 1"));
        }
        Ok(())
    }
}

/// Why `send` refused a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkSendError {
    /// The send buffer is full: back-pressure. Try again after acknowledgements arrive.
    #[error("send buffer full")]
    Full,
    /// The message is longer than `message_bytes_max`.
    #[error("message of {len} bytes exceeds the {max}-byte bound")]
    TooLong { len: usize, max: usize },
}

/// What a link has done, for `txcast stat` and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkCounters {
    pub messages_sent: u64,
    pub packets_sent: u64,
    pub data_packets_sent: u64,
    pub packed_messages: u64,
    pub retransmitted: u64,
    pub rto_fired: u64,
    pub acks_sent: u64,
    pub naks_sent: u64,
    pub naks_received: u64,
    pub messages_delivered: u64,
    pub duplicates_dropped: u64,
    pub beyond_window_dropped: u64,
    pub stale_incarnation_dropped: u64,
    pub bad_fragments_dropped: u64,
    pub bogus_acks_dropped: u64,
    pub peer_restarts: u64,
    pub send_full: u64,
    /// Packets that broke the protocol (a DATA base beyond what we acknowledged).
    pub protocol_violations: u64,
    /// With a cluster key: DATA refused because it does not name this incarnation of ours as
    /// the one it acknowledges (sent before the peer heard from us, or replayed from an
    /// earlier incarnation of ours); answered with an ACK that tells the peer who we are.
    pub unconfirmed_dropped: u64,
    /// Times the link declared its peer unreachable.
    pub unreachable_declared: u64,
}

impl LinkCounters {
    /// Adds another link's counters (for totals over many links).
    pub fn add(&mut self, c: &LinkCounters) {
        self.messages_sent += c.messages_sent;
        self.packets_sent += c.packets_sent;
        self.data_packets_sent += c.data_packets_sent;
        self.packed_messages += c.packed_messages;
        self.retransmitted += c.retransmitted;
        self.rto_fired += c.rto_fired;
        self.acks_sent += c.acks_sent;
        self.naks_sent += c.naks_sent;
        self.naks_received += c.naks_received;
        self.messages_delivered += c.messages_delivered;
        self.duplicates_dropped += c.duplicates_dropped;
        self.beyond_window_dropped += c.beyond_window_dropped;
        self.stale_incarnation_dropped += c.stale_incarnation_dropped;
        self.bad_fragments_dropped += c.bad_fragments_dropped;
        self.bogus_acks_dropped += c.bogus_acks_dropped;
        self.peer_restarts += c.peer_restarts;
        self.send_full += c.send_full;
        self.protocol_violations += c.protocol_violations;
        self.unconfirmed_dropped += c.unconfirmed_dropped;
        self.unreachable_declared += c.unreachable_declared;
    }
}

/// What every packet a link sends carries: its header, the cluster key, and the
/// acknowledgement (with the peer incarnation it is for) and credit of the receiving half.
pub(crate) struct Stamp<'k> {
    pub header: PacketHeader,
    pub key: Option<&'k PacketKey>,
    pub ack: (u64, u64),
    pub credit: u32,
}

enum Body<'a> {
    Data(DataBody<'a>),
    Ack(AckBody<'a>),
}

/// One direction pair between a local port and a remote one.
pub struct Link {
    cfg: LinkConfig,
    header: PacketHeader,
    key: Option<Arc<PacketKey>>,
    peer_incarnation: Option<u64>,
    tx: Sender,
    rx: Receiver,
    counters: LinkCounters,
    /// Rare happenings not yet taken by [`Link::poll_event`] (`NOTE_*` bits), and whether the
    /// peer is declared unreachable (`NOTE_DOWN`, so that its recovery is reported too).
    notes: u8,
}

/// Something rare that happened to a link, for the driver to report (a log line, say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// The peer came back as a new incarnation: both streams started afresh.
    PeerRestarted { incarnation: u64 },
    /// The peer acknowledged nothing through `unreachable_after_timeouts` retransmission
    /// timeouts: the link gives up on it (sends fail fast) until it answers again.
    Unreachable,
    /// A peer declared unreachable acknowledged something: sends go through again.
    Reachable,
}

const NOTE_RESTARTED: u8 = 1;
const NOTE_UNREACHABLE: u8 = 2;
const NOTE_DOWN: u8 = 4;

impl Link {
    /// A link from `local` (running as `incarnation`) to `peer`.
    pub fn new(
        cfg: LinkConfig,
        local: Address,
        peer: Address,
        cluster: u16,
        incarnation: u64,
        key: Option<Arc<PacketKey>>,
    ) -> Result<Link, ConfigError> {
        cfg.validate()?;
        let keyed = key.is_some();
        Ok(Link {
            tx: Sender::new(&cfg, keyed),
            rx: Receiver::new(&cfg),
            header: PacketHeader {
                kind: Kind::Data,
                flags: 0,
                cluster,
                incarnation,
                source: local,
                destination: peer,
            },
            key,
            peer_incarnation: None,
            cfg,
            counters: LinkCounters::default(),
            notes: 0,
        })
    }

    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    pub fn peer(&self) -> Address {
        self.header.destination
    }

    pub fn counters(&self) -> &LinkCounters {
        &self.counters
    }

    /// Sends with `key` from now on (a key rollover). A link made without a key stays without
    /// one, and one made with a key keeps one: its bounds were set for keyed packets.
    pub fn set_send_key(&mut self, key: Arc<PacketKey>) {
        if self.key.is_some() {
            self.key = Some(key);
        }
    }

    pub fn pack_histogram(&self) -> &[u64; crate::pack::PACK_HISTOGRAM_BINS] {
        self.tx.packer.histogram()
    }

    /// Queues a message for reliable, in-order delivery.
    pub fn send(&mut self, now: Instant, msg: &[u8]) -> Result<(), LinkSendError> {
        let r = self.tx.send(&self.cfg, now, msg);
        if r == Err(LinkSendError::Full) {
            self.counters.send_full += 1;
        }
        r
    }

    /// The link's sequence state, for diagnostics.
    pub fn debug_state(&self) -> String {
        format!(
            "tx[{}] rx[{}]",
            self.tx.debug_state(),
            self.rx.debug_state()
        )
    }

    /// Messages `send` would accept now (ignoring fragmentation).
    pub fn send_capacity(&self) -> usize {
        self.tx.capacity(&self.cfg)
    }

    /// The peer has not acknowledged anything through `unreachable_after_timeouts`
    /// consecutive retransmission timeouts: it is down or cut off. Sends to it should fail
    /// fast; the link keeps retrying what it holds and recovers on the first acknowledgement.
    pub fn is_unreachable(&self) -> bool {
        let limit = self.cfg.unreachable_after_timeouts;
        limit > 0 && self.tx.silent_timeouts() >= limit
    }

    /// Whether [`Link::poll_event`] may have something (one test of a byte, for the run loop).
    #[inline]
    pub fn has_notes(&self) -> bool {
        self.notes != 0
    }

    /// The next rare event of this link: a peer restart, the peer given up on, or back.
    pub fn poll_event(&mut self) -> Option<LinkEvent> {
        if self.notes & NOTE_RESTARTED != 0 {
            self.notes &= !NOTE_RESTARTED;
            return Some(LinkEvent::PeerRestarted {
                incarnation: self.peer_incarnation.unwrap_or(0),
            });
        }
        if self.notes & NOTE_UNREACHABLE != 0 {
            self.notes = (self.notes & !NOTE_UNREACHABLE) | NOTE_DOWN;
            return Some(LinkEvent::Unreachable);
        }
        if self.notes & NOTE_DOWN != 0 && !self.is_unreachable() {
            self.notes &= !NOTE_DOWN;
            return Some(LinkEvent::Reachable);
        }
        None
    }

    /// Nothing unacknowledged and nothing queued.
    pub fn is_idle(&self) -> bool {
        self.tx.is_empty()
    }

    /// A message has arrived that the application has not taken yet.
    pub fn has_pending_delivery(&self) -> bool {
        self.rx.has_pending_delivery()
    }

    /// Idle, and no acknowledgement owed to the peer either.
    pub fn is_quiescent(&self) -> bool {
        self.tx.is_empty() && !self.rx.ack_owed()
    }

    /// A DATA or ACK packet from this link's peer, already checked by [`Packet::parse`]. Other
    /// kinds and packets from elsewhere are the caller's business and are ignored here. A body
    /// that breaks its kind's rules changes nothing and comes back as the error.
    pub fn handle_packet(&mut self, now: Instant, pkt: &Packet<'_>) -> Result<(), WireError> {
        let h = &pkt.header;
        if h.source != self.header.destination || h.destination != self.header.source {
            return Ok(());
        }
        // Check the whole body before it may change any state.
        let body = match h.kind {
            Kind::Data => Body::Data(DataBody::parse(pkt.body)?),
            Kind::Ack => Body::Ack(AckBody::parse(pkt.body)?),
            _ => return Ok(()),
        };
        match self.peer_incarnation {
            Some(known) if incarnation_older(h.incarnation, known) => {
                self.counters.stale_incarnation_dropped += 1;
                return Ok(());
            }
            Some(known) if h.incarnation != known => {
                // The peer restarted: what it held of our stream is gone, and its new stream
                // starts afresh.
                self.counters.peer_restarts += 1;
                self.notes |= NOTE_RESTARTED;
                self.rx.reset(&mut self.counters);
                self.tx.peer_restarted(&self.cfg);
                self.peer_incarnation = Some(h.incarnation);
            }
            Some(_) => {}
            None => {
                self.peer_incarnation = Some(h.incarnation);
                if self.key.is_some() {
                    // Our DATA so far named no incarnation of the peer, so it refused all of
                    // it (below): send it again now that our packets can name it.
                    self.tx.peer_restarted(&self.cfg);
                }
            }
        }
        // Acknowledgements count only if they were meant for this incarnation of ours: a peer
        // that has not yet seen our restart still acknowledges our predecessor's stream.
        let mine = self.header.incarnation;
        match body {
            Body::Data(d) => {
                if d.ack_incarnation == mine {
                    self.on_ack(now, d.ack, d.credit, core::iter::empty());
                }
                if self.key.is_some() && self.rx.is_fresh() && d.ack_incarnation != mine {
                    // With a cluster key, a stream is taken up only from a packet that names
                    // this incarnation of ours: a packet captured before we (re)started names
                    // another, so a replay of it after a restart is not delivered again.
                    // Once the stream is taken up, sequence numbers refuse replays. The ACK
                    // tells the peer our incarnation; it then sends what we refused again.
                    self.counters.unconfirmed_dropped += 1;
                    self.rx.owe_ack();
                    return Ok(());
                }
                self.rx
                    .on_data(&self.cfg, now, &d, h.flags, &mut self.counters);
            }
            Body::Ack(a) => {
                if a.ack_incarnation == mine {
                    self.counters.naks_received += a.nak_count() as u64;
                    self.on_ack(now, a.ack, a.credit, a.naks());
                } else {
                    self.counters.bogus_acks_dropped += 1;
                }
            }
        }
        Ok(())
    }

    fn on_ack(
        &mut self,
        now: Instant,
        ack: u64,
        credit: u32,
        naks: impl Iterator<Item = crate::wire::NakRange>,
    ) {
        if !self.tx.on_ack(&self.cfg, now, ack, credit, naks) {
            self.counters.bogus_acks_dropped += 1;
        }
    }

    /// Runs timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let was = self.is_unreachable();
        if self.tx.on_timeout(&self.cfg, now) {
            self.counters.rto_fired += 1;
        }
        if !was && self.is_unreachable() {
            self.counters.unreachable_declared += 1;
            self.notes |= NOTE_UNREACHABLE;
        }
        // The receiver's timers (delayed ACK, NAK repeat) act in `poll_transmit`.
    }

    /// The next instant `handle_timeout` has work to do, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.tx.next_timeout(), self.rx.next_timeout(&self.cfg)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Writes the next packet to send into `buf` (at least `packet_bytes_max` long) and returns
    /// its length. Order: retransmissions, new data (with the acknowledgement piggybacked), then a
    /// standalone ACK. Call until it returns `None`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let buf = &mut buf[..self.cfg.packet_bytes_max];
        let stamp = Stamp {
            header: self.header,
            key: self.key.as_deref(),
            ack: (self.rx.ack(), self.peer_incarnation.unwrap_or(0)),
            credit: self.rx.credit(&self.cfg),
        };
        if let Some(n) = self
            .tx
            .poll_data(&self.cfg, now, buf, &stamp, &mut self.counters)
        {
            self.rx.ack_sent();
            self.counters.packets_sent += 1;
            return Some(n);
        }
        if let Some(n) = self
            .rx
            .poll_ack(&self.cfg, now, buf, &stamp, &mut self.counters)
        {
            self.counters.packets_sent += 1;
            return Some(n);
        }
        None
    }

    /// Hands the next in-order message to `f`, then frees its buffer.
    pub fn poll_delivery<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.poll_delivery_if(|m| Some(f(m)))
    }

    /// Offers the next in-order message to `f`; it is consumed only if `f` returns `Some`.
    /// A receiver whose own queue is full returns `None` and the message waits here, holding
    /// the link's credit closed: that is how back-pressure reaches the remote sender.
    pub fn poll_delivery_if<R>(&mut self, f: impl FnOnce(&[u8]) -> Option<R>) -> Option<R> {
        let r = self.rx.poll_delivery(&mut self.counters, f);
        if r.is_some() {
            self.counters.messages_delivered += 1;
        }
        r
    }
}

/// Incarnations are 64-bit milliseconds since the Unix epoch at port open (strictly increasing
/// within a process): they never wrap, so older is simply smaller.
pub fn incarnation_older(a: u64, b: u64) -> bool {
    a < b
}

/// Upper bound on what one packet may hold, for compile-time relations between bounds.
const _: () = assert!(
    PACKET_BYTES_MIN
        > HEADER_BYTES
            + DATA_PREFIX_BYTES
            + RECORD_HEADER_BYTES
            + FRAG_EXTRA_BYTES
            + TRAILER_BYTES_MAX
);

impl Stamp<'_> {
    /// A DATA packet writer with this stamp, for messages from `first_seq` on.
    pub(crate) fn data<'b>(
        &self,
        buf: &'b mut [u8],
        first_seq: u64,
        base: u64,
    ) -> crate::wire::PacketWriter<'b, '_> {
        crate::wire::PacketWriter::data(
            buf,
            self.header,
            self.key,
            first_seq,
            base,
            self.ack,
            self.credit,
        )
    }
}
