//! The sending half of a link: sequence numbers, window, packing, retransmission.

use super::{LinkConfig, LinkCounters, LinkSendError, Stamp};
use crate::pack::{PackDecision, Packer};
use crate::time::Instant;
use crate::wire::{
    Fragment, NakRange, Record, DATA_PREFIX_BYTES, FLAG_ACK_NOW, HEADER_BYTES, TRAILER_BYTES_MAX,
};
use core::time::Duration;
use std::collections::VecDeque;

struct OutMsg {
    data: Vec<u8>,
    fragment: Option<Fragment>,
    queued_at: Instant,
    first_sent_at: Option<Instant>,
    transmissions: u32,
    retransmit_pending: bool,
}

impl OutMsg {
    fn encoded_len(&self) -> usize {
        Record::encoded_len(self.data.len(), self.fragment.is_some())
    }
}

pub(super) struct Sender {
    /// Messages `acked .. next_seq`, oldest first.
    buf: VecDeque<OutMsg>,
    acked: u64,
    next_seq: u64,
    /// First message never transmitted.
    unsent: u64,
    /// Encoded bytes of the messages never transmitted.
    unsent_bytes: usize,
    /// The peer accepts messages below this.
    credit_end: u64,
    retransmit: VecDeque<u64>,
    pool: Vec<Vec<u8>>,
    next_msg_id: u32,
    rto: Duration,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto_deadline: Option<Instant>,
    hold_until: Option<Instant>,
    /// Retransmission (or persist) timeouts since the peer last acknowledged anything.
    silent_timeouts: u32,
    /// Credit is exhausted with messages queued and none in flight: after a timeout, one
    /// message goes out anyway as a probe, so a lost window update cannot stall the link.
    probe: bool,
    fragment_payload: usize,
    whole_payload: usize,
    body_capacity: usize,
    pub packer: Packer,
}

impl Sender {
    pub fn new(cfg: &LinkConfig, keyed: bool) -> Self {
        Sender {
            buf: VecDeque::with_capacity(cfg.send_buffer_msgs as usize),
            acked: 0,
            next_seq: 0,
            unsent: 0,
            unsent_bytes: 0,
            credit_end: cfg.window_msgs as u64,
            retransmit: VecDeque::with_capacity(cfg.send_buffer_msgs as usize),
            pool: Vec::new(),
            next_msg_id: 0,
            rto: cfg.rto_initial,
            srtt: None,
            rttvar: Duration::ZERO,
            rto_deadline: None,
            hold_until: None,
            probe: false,
            silent_timeouts: 0,
            fragment_payload: cfg.fragment_payload_max(keyed),
            whole_payload: cfg.whole_payload_max(keyed),
            body_capacity: cfg.packet_bytes_max
                - HEADER_BYTES
                - DATA_PREFIX_BYTES
                - if keyed { TRAILER_BYTES_MAX } else { 0 },
            packer: Packer::new(cfg.pack),
        }
    }

    pub fn debug_state(&self) -> String {
        format!(
            "acked {} unsent {} next {} credit_end {} retx_queue {} rto {:?} deadline {:?} hold {:?}",
            self.acked,
            self.unsent,
            self.next_seq,
            self.credit_end,
            self.retransmit.len(),
            self.rto,
            self.rto_deadline,
            self.hold_until
        )
    }

    pub fn silent_timeouts(&self) -> u32 {
        self.silent_timeouts
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn capacity(&self, cfg: &LinkConfig) -> usize {
        cfg.send_buffer_msgs as usize - self.buf.len()
    }

    fn take_buffer(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(bytes);
        v
    }

    fn push(&mut self, now: Instant, bytes: &[u8], fragment: Option<Fragment>) {
        let data = self.take_buffer(bytes);
        let m = OutMsg {
            data,
            fragment,
            queued_at: now,
            first_sent_at: None,
            transmissions: 0,
            retransmit_pending: false,
        };
        self.unsent_bytes += m.encoded_len();
        self.buf.push_back(m);
        self.next_seq += 1;
    }

    pub fn send(
        &mut self,
        cfg: &LinkConfig,
        now: Instant,
        msg: &[u8],
    ) -> Result<(), LinkSendError> {
        if msg.len() > cfg.message_bytes_max {
            return Err(LinkSendError::TooLong {
                len: msg.len(),
                max: cfg.message_bytes_max,
            });
        }
        let pieces = if msg.len() <= self.whole_payload {
            1
        } else {
            msg.len().div_ceil(self.fragment_payload)
        };
        if self.buf.len() + pieces > cfg.send_buffer_msgs as usize {
            return Err(LinkSendError::Full);
        }
        if pieces == 1 {
            self.push(now, msg, None);
        } else {
            let msg_id = self.next_msg_id;
            self.next_msg_id = self.next_msg_id.wrapping_add(1);
            for (i, chunk) in msg.chunks(self.fragment_payload).enumerate() {
                let f = Fragment {
                    msg_id,
                    index: i as u16,
                    count: pieces as u16,
                    total_len: msg.len() as u32,
                };
                self.push(now, chunk, Some(f));
            }
        }
        Ok(())
    }

    fn limit(&self, cfg: &LinkConfig) -> u64 {
        (self.acked + cfg.window_msgs as u64).min(self.credit_end)
    }

    fn msg(&mut self, seq: u64) -> &mut OutMsg {
        &mut self.buf[(seq - self.acked) as usize]
    }

    pub fn poll_data(
        &mut self,
        cfg: &LinkConfig,
        now: Instant,
        buf: &mut [u8],
        stamp: &Stamp<'_>,
        counters: &mut LinkCounters,
    ) -> Option<usize> {
        if let Some(n) = self.poll_retransmit(now, buf, stamp, counters) {
            return Some(n);
        }
        let mut limit = self.limit(cfg);
        if self.probe && self.unsent >= limit {
            limit = self.unsent + 1;
        }
        self.probe = false;
        if self.unsent >= self.next_seq || self.unsent >= limit {
            self.hold_until = None;
            if self.unsent < self.next_seq && self.rto_deadline.is_none() {
                // Blocked by credit: arm the persist timer.
                self.rto_deadline = Some(now + self.rto);
            }
            return None;
        }
        let oldest = self.buf[(self.unsent - self.acked) as usize].queued_at;
        let full = self.unsent_bytes >= self.body_capacity;
        if let PackDecision::HoldUntil(t) =
            self.packer.decide(oldest, full, self.unsent > self.acked)
        {
            if now < t {
                self.hold_until = Some(t);
                return None;
            }
        }
        self.hold_until = None;
        let first = self.unsent;
        let per_packet = self.packer.messages_per_packet_max();
        let mut w = stamp.data(buf, first, self.acked);
        let mut seq = first;
        while seq < self.next_seq && seq < limit && w.records() < per_packet {
            let acked = self.acked;
            let m = &mut self.buf[(seq - acked) as usize];
            let ok = match m.fragment {
                Some(f) => w.push_fragment(&m.data, f),
                None => w.push(&m.data),
            };
            if !ok {
                break;
            }
            m.first_sent_at = Some(now);
            m.transmissions = 1;
            self.unsent_bytes -= m.encoded_len();
            seq += 1;
        }
        debug_assert!(seq > first, "a message always fits an empty packet");
        let sent = (seq - first) as usize;
        self.unsent = seq;
        if seq >= limit {
            // Window or credit exhausted: ask for an acknowledgement at once.
            w.set_flags(FLAG_ACK_NOW);
        }
        self.packer.record(sent);
        counters.messages_sent += sent as u64;
        counters.data_packets_sent += 1;
        if sent > 1 {
            counters.packed_messages += sent as u64;
        }
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rto);
        }
        Some(w.finish())
    }

    fn poll_retransmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        stamp: &Stamp<'_>,
        counters: &mut LinkCounters,
    ) -> Option<usize> {
        let first = loop {
            let s = self.retransmit.pop_front()?;
            if s >= self.acked && s < self.unsent && self.msg(s).retransmit_pending {
                break s;
            }
        };
        let mut w = stamp.data(buf, first, self.acked);
        w.set_flags(FLAG_ACK_NOW);
        let mut seq = first;
        while seq < self.unsent {
            let acked = self.acked;
            let m = &mut self.buf[(seq - acked) as usize];
            if seq != first && !m.retransmit_pending {
                break;
            }
            let ok = match m.fragment {
                Some(f) => w.push_fragment(&m.data, f),
                None => w.push(&m.data),
            };
            if !ok {
                break;
            }
            m.retransmit_pending = false;
            m.transmissions += 1;
            seq += 1;
        }
        counters.retransmitted += seq - first;
        counters.data_packets_sent += 1;
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rto);
        }
        Some(w.finish())
    }

    fn mark_for_retransmit(&mut self, seq: u64) {
        if seq >= self.acked && seq < self.unsent {
            let m = self.msg(seq);
            if !m.retransmit_pending {
                m.retransmit_pending = true;
                self.retransmit.push_back(seq);
            }
        }
    }

    /// Applies a cumulative acknowledgement, credit and NAKs; false if the ACK is impossible
    /// (acknowledges messages never sent), in which case nothing changes.
    pub fn on_ack(
        &mut self,
        cfg: &LinkConfig,
        now: Instant,
        ack: u64,
        credit: u32,
        naks: impl Iterator<Item = NakRange>,
    ) -> bool {
        if ack > self.unsent {
            return false;
        }
        // Any acknowledgement of ours shows the peer is alive.
        self.silent_timeouts = 0;
        if ack > self.acked {
            let newest = &self.buf[(ack - 1 - self.acked) as usize];
            if newest.transmissions == 1 {
                if let Some(t) = newest.first_sent_at {
                    self.rtt_sample(now - t);
                }
            }
            for _ in self.acked..ack {
                let m = self.buf.pop_front().expect("acked messages are buffered");
                self.pool.push(m.data);
            }
            self.acked = ack;
            self.rto = self.computed_rto(cfg);
            self.rto_deadline = (self.unsent > self.acked).then(|| now + self.rto);
        }
        // The receiver's buffer end (`ack + credit`) never moves back, so an older ACK that
        // arrives late (reordered, duplicated) must not shrink the window.
        self.credit_end = self.credit_end.max(ack + credit as u64).max(self.acked);
        for r in naks {
            let end = (r.start.saturating_add(r.len as u64)).min(self.unsent);
            for seq in r.start.max(self.acked)..end {
                self.mark_for_retransmit(seq);
            }
        }
        true
    }

    fn rtt_sample(&mut self, rtt: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((s * 7 + rtt) / 8);
            }
        }
    }

    fn computed_rto(&self, cfg: &LinkConfig) -> Duration {
        match self.srtt {
            None => cfg.rto_initial,
            Some(s) => (s + self.rttvar * 4).clamp(cfg.rto_min, cfg.rto_max),
        }
    }

    /// Fires the retransmission timer if due; true if it fired.
    pub fn on_timeout(&mut self, cfg: &LinkConfig, now: Instant) -> bool {
        match self.rto_deadline {
            Some(t) if t <= now && self.unsent > self.acked => {
                for seq in self.acked..self.unsent {
                    self.mark_for_retransmit(seq);
                }
                self.rto = (self.rto * 2).min(cfg.rto_max);
                self.rto_deadline = Some(now + self.rto);
                self.silent_timeouts = self.silent_timeouts.saturating_add(1);
                true
            }
            Some(t) if t <= now && self.unsent < self.next_seq => {
                // Persist timer: nothing in flight, messages queued, no credit.
                self.probe = true;
                self.rto = (self.rto * 2).min(cfg.rto_max);
                self.rto_deadline = None;
                self.silent_timeouts = self.silent_timeouts.saturating_add(1);
                true
            }
            Some(t) if t <= now => {
                self.rto_deadline = None;
                false
            }
            _ => false,
        }
    }

    pub fn next_timeout(&self) -> Option<Instant> {
        match (self.rto_deadline, self.hold_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The peer restarted with no memory of our stream: everything in flight goes again, and
    /// credit starts from the default window.
    pub fn peer_restarted(&mut self, cfg: &LinkConfig) {
        self.credit_end = self.acked + cfg.window_msgs as u64;
        for seq in self.acked..self.unsent {
            self.mark_for_retransmit(seq);
        }
    }
}
