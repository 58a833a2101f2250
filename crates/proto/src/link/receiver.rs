//! The receiving half of a link: reorder buffer, cumulative ACK, NAKs, credit, reassembly.

use super::{LinkConfig, LinkCounters, Stamp};
use crate::time::Instant;
use crate::wire::{AckWriter, DataBody, Fragment, NakRange, FLAG_ACK_NOW, NAK_RANGES_MAX};

struct InMsg {
    data: Vec<u8>,
    fragment: Option<Fragment>,
}

pub(super) struct Receiver {
    /// Slot `seq % len` holds message `seq` for `handed <= seq < handed + len`.
    slots: Vec<Option<InMsg>>,
    /// Next message to hand to the application.
    handed: u64,
    /// Every message below this has arrived.
    expected: u64,
    /// One past the highest message that arrived.
    highest: u64,
    /// No DATA from the current incarnation of the peer yet.
    fresh: bool,
    pool: Vec<Vec<u8>>,
    reassembly: Vec<u8>,
    /// Messages of the peer's previous incarnation that had arrived in order (and so were
    /// acknowledged) but not yet been taken when the peer restarted: delivered first.
    backlog: std::collections::VecDeque<Vec<u8>>,
    ack_due: Option<Instant>,
    ack_now: bool,
    packets_since_ack: u32,
    last_nak_at: Option<Instant>,
    /// The credit the last acknowledgement granted.
    advertised_credit: u32,
}

impl Receiver {
    pub fn new(cfg: &LinkConfig) -> Self {
        let n = cfg.recv_buffer_msgs as usize;
        Receiver {
            slots: (0..n).map(|_| None).collect(),
            handed: 0,
            expected: 0,
            highest: 0,
            fresh: true,
            pool: Vec::new(),
            reassembly: Vec::new(),
            backlog: std::collections::VecDeque::new(),
            ack_due: None,
            ack_now: false,
            packets_since_ack: 0,
            last_nak_at: None,
            advertised_credit: cfg.recv_buffer_msgs,
        }
    }

    /// The peer restarted: keep, for delivery, what of its old stream had arrived in order
    /// (it was acknowledged, so the old sender counted it delivered), and forget the rest.
    pub fn reset(&mut self, counters: &mut LinkCounters) {
        self.keep_in_order(counters);
        // Nothing of the old stream is pending any more (an incomplete fragmented message at
        // its end is gone with its sender).
        let at = self.expected;
        self.resync(at);
        self.fresh = true;
        self.ack_due = None;
        self.ack_now = false;
        self.last_nak_at = None;
    }

    /// Moves the messages that arrived in order but were not taken into the backlog, so a
    /// jump of the stream (the peer restarted, or we catch up after our own restart) does not
    /// lose what was acknowledged.
    fn keep_in_order(&mut self, counters: &mut LinkCounters) {
        let mut kept = std::mem::take(&mut self.backlog);
        while let Some(m) = self.poll_stream(counters, |m| {
            let mut v = Vec::with_capacity(m.len());
            v.extend_from_slice(m);
            Some(v)
        }) {
            // Bounded by one receive buffer, however often the peer restarts unread.
            if kept.len() >= self.slots.len() {
                counters.stale_incarnation_dropped += 1;
            } else {
                kept.push_back(m);
            }
        }
        self.backlog = kept;
    }

    pub fn debug_state(&self) -> String {
        format!(
            "backlog {} handed {} expected {} highest {} fresh {} ack_due {:?} ack_now {} adv_credit {}",
            self.backlog.len(),
            self.handed,
            self.expected,
            self.highest,
            self.fresh,
            self.ack_due,
            self.ack_now,
            self.advertised_credit
        )
    }

    fn len(&self) -> u64 {
        self.slots.len() as u64
    }

    fn slot(&mut self, seq: u64) -> &mut Option<InMsg> {
        let i = (seq % self.slots.len() as u64) as usize;
        &mut self.slots[i]
    }

    /// The cumulative acknowledgement: nothing (0) while no stream of the peer's current
    /// incarnation has been seen, so a restarted peer never takes our old position for its.
    pub fn ack(&self) -> u64 {
        if self.fresh {
            0
        } else {
            self.expected
        }
    }

    pub fn credit(&self, _cfg: &LinkConfig) -> u32 {
        if self.fresh {
            self.len() as u32
        } else {
            (self.handed + self.len() - self.expected) as u32
        }
    }

    /// A whole message is ready for the application (an incomplete fragmented message at the
    /// head is not: its other fragments may never come if its sender died).
    pub fn has_pending_delivery(&self) -> bool {
        if !self.backlog.is_empty() {
            return true;
        }
        if self.handed >= self.expected {
            return false;
        }
        let i = (self.handed % self.len()) as usize;
        match self.slots[i].as_ref().and_then(|m| m.fragment) {
            None => true,
            Some(f) => self.handed + f.count as u64 <= self.expected,
        }
    }

    /// No DATA of the peer's current incarnation has been taken yet.
    pub fn is_fresh(&self) -> bool {
        self.fresh
    }

    /// Sends an acknowledgement at the next chance (it tells the peer our incarnation).
    pub fn owe_ack(&mut self) {
        self.ack_now = true;
    }

    /// An acknowledgement (or NAK) is waiting to be sent.
    pub fn ack_owed(&self) -> bool {
        self.ack_now || self.ack_due.is_some() || self.has_gap()
    }

    fn resync(&mut self, base: u64) {
        for s in self.slots.iter_mut() {
            if let Some(m) = s.take() {
                self.pool.push(m.data);
            }
        }
        self.handed = base;
        self.expected = base;
        self.highest = base;
    }

    pub fn on_data(
        &mut self,
        cfg: &LinkConfig,
        now: Instant,
        d: &DataBody<'_>,
        flags: u8,
        counters: &mut LinkCounters,
    ) {
        if self.fresh {
            self.fresh = false;
            self.resync(d.base);
        } else if d.base > self.expected {
            // The sender holds nothing below `base`. That happens legitimately after *we*
            // restarted and took our starting point from a stale packet: our predecessor had
            // acknowledged up to `base`, at most one receive buffer beyond. Catch up then. A base
            // further ahead is forged or corrupt: drop the packet rather than jump the stream
            // (against forgers proper, set a cluster key).
            if d.base - self.expected > self.len() {
                counters.protocol_violations += 1;
                return;
            }
            counters.stale_incarnation_dropped += d.base - self.expected;
            self.keep_in_order(counters);
            self.resync(d.base);
        }
        for (i, r) in d.records().enumerate() {
            let Ok(r) = r else { break };
            let seq = d.first_seq + i as u64;
            if seq < self.expected {
                counters.duplicates_dropped += 1;
                self.ack_now = true; // our acknowledgement may have been lost
                continue;
            }
            if seq >= self.handed + self.len() {
                counters.beyond_window_dropped += 1;
                self.ack_now = true;
                continue;
            }
            if self.slot(seq).is_some() {
                counters.duplicates_dropped += 1;
                continue;
            }
            let mut data = self.pool.pop().unwrap_or_default();
            data.clear();
            data.extend_from_slice(r.payload);
            *self.slot(seq) = Some(InMsg {
                data,
                fragment: r.fragment,
            });
            self.highest = self.highest.max(seq + 1);
        }
        while self.expected < self.highest && {
            let e = self.expected;
            self.slot(e).is_some()
        } {
            self.expected += 1;
        }
        self.packets_since_ack += 1;
        if flags & FLAG_ACK_NOW != 0 || self.packets_since_ack >= cfg.ack_every_packets {
            self.ack_now = true;
        }
        if self.ack_due.is_none() {
            self.ack_due = Some(now + cfg.ack_delay);
        }
    }

    fn has_gap(&self) -> bool {
        self.highest > self.expected
    }

    fn nak_due(&self, cfg: &LinkConfig, now: Instant) -> bool {
        self.has_gap() && self.last_nak_at.is_none_or(|t| now >= t + cfg.nak_interval)
    }

    pub fn ack_sent(&mut self) {
        self.ack_due = None;
        self.ack_now = false;
        self.packets_since_ack = 0;
        self.advertised_credit = (self.handed + self.len() - self.expected) as u32;
    }

    pub fn next_timeout(&self, cfg: &LinkConfig) -> Option<Instant> {
        let nak = if self.has_gap() {
            Some(
                self.last_nak_at
                    .map_or(Instant::ZERO, |t| t + cfg.nak_interval),
            )
        } else {
            None
        };
        match (self.ack_due, nak) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn poll_ack(
        &mut self,
        cfg: &LinkConfig,
        now: Instant,
        buf: &mut [u8],
        stamp: &Stamp<'_>,
        counters: &mut LinkCounters,
    ) -> Option<usize> {
        let nak = self.nak_due(cfg, now);
        let due = self.ack_now || self.ack_due.is_some_and(|t| now >= t);
        if !(due || nak) {
            return None;
        }
        let mut naks = [NakRange { start: 0, len: 0 }; NAK_RANGES_MAX];
        let mut n = 0;
        if self.has_gap() {
            let mut seq = self.expected;
            while seq < self.highest && n < NAK_RANGES_MAX {
                if self.slot(seq).is_none() {
                    let start = seq;
                    while seq < self.highest && self.slot(seq).is_none() {
                        seq += 1;
                    }
                    naks[n] = NakRange {
                        start,
                        len: (seq - start) as u32,
                    };
                    n += 1;
                } else {
                    seq += 1;
                }
            }
            self.last_nak_at = Some(now);
            counters.naks_sent += n as u64;
        }
        let len = AckWriter::write(
            buf,
            stamp.header,
            stamp.key,
            stamp.ack,
            stamp.credit,
            &naks[..n],
        );
        self.ack_sent();
        counters.acks_sent += 1;
        Some(len)
    }

    /// Offers the next in-order message to `f`; the message is consumed only if `f` returns
    /// `Some` (so a caller whose own queue is full can leave it here, and credit stays closed).
    pub fn poll_delivery<R>(
        &mut self,
        counters: &mut LinkCounters,
        f: impl FnOnce(&[u8]) -> Option<R>,
    ) -> Option<R> {
        if let Some(front) = self.backlog.front() {
            let r = f(front)?;
            self.backlog.pop_front();
            return Some(r);
        }
        self.poll_stream(counters, f)
    }

    fn poll_stream<R>(
        &mut self,
        counters: &mut LinkCounters,
        f: impl FnOnce(&[u8]) -> Option<R>,
    ) -> Option<R> {
        loop {
            if self.handed >= self.expected {
                return None;
            }
            let h = self.handed;
            let head = self.slot(h).as_ref().expect("below expected means present");
            let count = match head.fragment {
                None => 1,
                Some(first) => {
                    let count = first.count as u64;
                    if first.index != 0 || count > self.len() {
                        self.drop_head(counters);
                        continue;
                    }
                    if h + count > self.expected {
                        return None; // the rest of the message has not arrived yet
                    }
                    if !self.assemble(h, first) {
                        self.drop_head(counters);
                        continue;
                    }
                    count
                }
            };
            let r = if count == 1 && self.slot(h).as_ref().is_some_and(|m| m.fragment.is_none()) {
                let i = (h % self.len()) as usize;
                f(&self.slots[i].as_ref().expect("present").data)
            } else {
                f(&self.reassembly)
            };
            r.as_ref()?;
            for s in h..h + count {
                let m = self.slot(s).take().expect("present");
                self.pool.push(m.data);
            }
            self.handed += count;
            self.window_opened();
            return r;
        }
    }

    /// Concatenates the fragments of the message starting at `h`; false if they disagree.
    fn assemble(&mut self, h: u64, first: Fragment) -> bool {
        self.reassembly.clear();
        for i in 0..first.count as u64 {
            let i_slot = ((h + i) % self.len()) as usize;
            let Some(m) = self.slots[i_slot].as_ref() else {
                return false;
            };
            match m.fragment {
                Some(f)
                    if f.msg_id == first.msg_id
                        && f.count == first.count
                        && f.total_len == first.total_len
                        && f.index as u64 == i =>
                {
                    if self.reassembly.len() + m.data.len() > first.total_len as usize {
                        return false;
                    }
                    self.reassembly.extend_from_slice(&m.data);
                }
                _ => return false,
            }
        }
        self.reassembly.len() == first.total_len as usize
    }

    fn drop_head(&mut self, counters: &mut LinkCounters) {
        let h = self.handed;
        if let Some(m) = self.slot(h).take() {
            self.pool.push(m.data);
        }
        self.handed += 1;
        counters.bad_fragments_dropped += 1;
    }

    /// After the application takes messages: if the last credit we granted was small and the
    /// window has opened up, tell the sender at once.
    fn window_opened(&mut self) {
        let now_credit = self.handed + self.len() - self.expected;
        if (self.advertised_credit as u64) < self.len() / 4 && now_credit >= self.len() / 2 {
            self.ack_now = true;
        }
    }
}
