//! The per-sender streams of casts: this member's own (cast, packed into `Data` messages) and
//! the other members' (received in order, gaps asked for by NAK from the sender or, if it is
//! suspected, another member; NAKs answered from what is held, the previous view's included).

use super::held::Held;
use super::msg::{self, Header, VsMsg};
use super::timer::Timer;
use super::{Dest, Stability, ViewId, Vs, VsError, CONTROL_QUEUE_MAX, NAK_SPAN_MAX};
use crate::addr::Address;
use crate::pack::{PackDecision, PackMode, Packer};
use crate::time::Instant;
use std::collections::VecDeque;

/// This member's sending side: how far its own casts went out (the rest wait for the
/// packer), the control messages queued, and the NAKs it owes.
#[derive(Debug)]
pub(super) struct Outbox {
    /// Own casts sent up to here (the rest wait for the packer).
    pub(super) sent_upto: u64,
    /// When the oldest cast not yet sent was made (set through [`Vs::set_unsent_since`], which
    /// arms the pack timer).
    pub(super) unsent_since: Option<Instant>,
    /// Bytes the casts not yet sent take in a `Data` message (record headers included).
    pub(super) unsent_bytes: usize,
    /// Casts up to here go out without waiting for the packer ([`Vs::push`]).
    pub(super) push_upto: u64,
    pub(super) packer: Packer,
    pub(super) control: VecDeque<(Dest, Vec<u8>)>,
    /// NAKs to answer: (to, stream rank, from, to, of the previous view).
    pub(super) resend: VecDeque<(Address, usize, u64, u64, bool)>,
}

impl Outbox {
    pub(super) fn new(packer: Packer) -> Outbox {
        Outbox {
            sent_upto: 0,
            unsent_since: None,
            unsent_bytes: 0,
            push_upto: 0,
            packer,
            control: VecDeque::new(),
            resend: VecDeque::new(),
        }
    }

    /// A new view: own casts number from 1 again, and NAKs of the old view are void
    /// (`unsent_since` is cleared by the caller, with its timer).
    pub(super) fn new_view(&mut self) {
        self.sent_upto = 0;
        self.unsent_bytes = 0;
        self.push_upto = 0;
        self.resend.clear();
    }

    /// Queues a NAK's answer, unless too many wait; at most `NAK_SPAN_MAX` casts.
    fn owe(&mut self, to: Address, rank: usize, from: u64, upto: u64, old: bool) {
        if self.resend.len() < CONTROL_QUEUE_MAX && from <= upto {
            self.resend.push_back((
                to,
                rank,
                from,
                upto.min(from.saturating_add(NAK_SPAN_MAX - 1)),
                old,
            ));
        }
    }
}

/// One member's stream of casts in the current view, as this member holds it.
#[derive(Debug)]
pub(super) struct Stream {
    pub(super) addr: Address,
    /// Every cast up to here is held (or was, and is stable).
    pub(super) received: u64,
    /// Handed up to here.
    pub(super) delivered: u64,
    /// Casts up to here are stable and dropped.
    pub(super) stable: u64,
    /// Held casts past `stable` (contiguous up to `received`, then any that came early).
    pub(super) held: Held,
    /// The highest cast known to exist.
    pub(super) highest_known: u64,
    pub(super) last_heard: Instant,
    /// Its host said its port is unreachable, at this time.
    pub(super) unreachable_at: Option<Instant>,
    /// No NAK for this stream before this.
    pub(super) nak_after: Instant,
}

impl Stream {
    pub(super) fn new(addr: Address, now: Instant) -> Stream {
        Stream {
            addr,
            received: 0,
            delivered: 0,
            stable: 0,
            held: Held::default(),
            highest_known: 0,
            last_heard: now,
            unreachable_at: None,
            nak_after: Instant::ZERO,
        }
    }

    /// Takes cast `seq`; false if it was a duplicate or beyond the window.
    pub(super) fn insert(&mut self, seq: u64, payload: &[u8], window: usize) -> Result<bool, ()> {
        if seq <= self.received || self.held.contains(seq) {
            return Ok(false);
        }
        // The next cast in order is always taken (within the window): only casts that came
        // early count against the bound on what is held. Held casts wait for this member to
        // learn they are stable, and that knowledge can lag the sender's by more than a
        // window (a pinwheel round's result that died with a crashed member); a receiver that
        // refused even the next cast then could never reach a flush's cut, and the view change
        // blocked for good.
        if seq > self.received + window as u64
            || (seq > self.received + 1 && self.held.len() >= 2 * window)
        {
            return Err(());
        }
        self.held.insert(seq, payload);
        self.highest_known = self.highest_known.max(seq);
        self.received = self.held.end() - 1;
        Ok(true)
    }

    /// Drops what is stable up to `upto` (never what is not yet handed up).
    pub(super) fn set_stable(&mut self, upto: u64) {
        let upto = upto.min(self.delivered).min(self.received);
        if upto <= self.stable {
            return;
        }
        self.stable = upto;
        self.held.drop_upto(upto);
    }
}

/// The view before the current one, kept after a commit: a member of the next view that
/// did not accept the proposal (its `Propose` was lost, or came after a majority accepted)
/// may have the commit but not every cast up to the cut. It asks the member that sent the
/// commit, who installed the next view and dropped its streams: without these, nobody
/// could answer, the laggard stayed in the old view for good, and the group flushed it out.
/// Bounded: what was held of the old view up to its cut, one view's
/// worth, dropped at the next view.
#[derive(Debug)]
pub(super) struct Prev {
    pub(super) view: ViewId,
    pub(super) members: Vec<Address>,
    pub(super) held: Vec<Held>,
}

impl Vs {
    /// Casts `payload` to the members of the current view; returns its sequence number in
    /// this member's stream.
    pub fn cast(&mut self, now: Instant, payload: &[u8]) -> Result<u64, VsError> {
        self.cast_check(payload.len())?;
        let rank = self.rank;
        let own = &mut self.streams[rank];
        let seq = own.received + 1;
        own.held.insert(seq, payload);
        own.received = seq;
        own.highest_known = seq;
        self.out.unsent_bytes += msg::RECORD_HEADER_BYTES + payload.len();
        self.counters.casts += 1;
        if self.out.unsent_since.is_none() {
            self.set_unsent_since(Some(now));
        }
        Ok(seq)
    }

    /// Sends the casts made so far without waiting for the packer (they still share
    /// messages): the layer above knows a batch is complete, as a token holder does when it
    /// passes the token.
    pub fn push(&mut self) {
        if let Some(own) = self.streams.get(self.rank) {
            self.out.push_upto = own.received;
        }
    }

    /// For every member (by rank): casts received contiguously in the current view.
    pub fn received_vector(&self) -> Vec<u64> {
        self.streams.iter().map(|s| s.received).collect()
    }

    /// The member to ask for `stream`'s casts: its owner unless suspected; the flush's
    /// source while one runs.
    pub(super) fn nak_target(&self, stream: usize) -> Option<Address> {
        if let Some(src) = self.fl.commit_source().filter(|&a| a != self.me) {
            // A commit waits on casts. Its sender may have gone (a leaver that coordinated its
            // own leave is gone once it commits), so every other NAK goes in turn to another
            // member of the view: those that accepted hold every cast up to the cut, and
            // those that installed the next view keep them (`Prev`). Asking only the sender
            // left such a member unable to install.
            let k = self.counters.naks_sent as usize;
            let others: Vec<Address> = self
                .members
                .iter()
                .copied()
                .filter(|&a| a != self.me && a != src)
                .collect();
            if k & 1 == 0 || others.is_empty() {
                return Some(src);
            }
            return Some(others[(k / 2) % others.len()]);
        }
        if let Some(a) = self.fl.fetch_from(stream) {
            if a != self.me {
                return Some(a);
            }
        }
        let owner = self.streams[stream].addr;
        if owner != self.me && !self.detector.suspects.contains(&owner) {
            return Some(owner);
        }
        self.members
            .iter()
            .copied()
            .find(|&a| a != self.me && a != owner && !self.detector.suspects.contains(&a))
    }

    pub(super) fn on_data(
        &mut self,
        now: Instant,
        from_rank: usize,
        stream: Address,
        first: u64,
        received: &[u64],
        records: &[&[u8]],
    ) {
        self.counters.data_received += 1;
        let Some(r) = self.members.iter().position(|&a| a == stream) else {
            self.counters.dropped_bad += 1;
            return;
        };
        if r == self.rank {
            // Our own casts sent back: we have them.
            self.counters.duplicates += records.len() as u64;
        } else {
            let window = self.cfg.window;
            let limit = self.fl.receive_limit(r);
            for (i, rec) in records.iter().enumerate() {
                let seq = first + i as u64;
                if limit.is_some_and(|l| seq > l) {
                    // Past the cut of a view change: never delivered in this view.
                    self.counters.dropped_beyond_window += 1;
                    continue;
                }
                match self.streams[r].insert(seq, rec, window) {
                    Ok(true) => {
                        self.counters.records_received += 1;
                        self.reports.unreported += 1;
                    }
                    Ok(false) => self.counters.duplicates += 1,
                    Err(()) => self.counters.dropped_beyond_window += 1,
                }
            }
            let last = first + records.len() as u64;
            let s = &mut self.streams[r];
            s.highest_known = s.highest_known.max(last.saturating_sub(1));
            if s.received >= s.highest_known {
                s.nak_after = Instant::ZERO;
            }
            self.arm_nak();
        }
        if from_rank == r {
            self.on_report(from_rank, received);
        }
        if self.fl.fetching() {
            self.flush_progress(now);
        }
    }

    /// A NAK from `asker` for casts `from..=to` of `stream`'s stream in this view.
    pub(super) fn on_nak(&mut self, asker: Address, stream: Address, from: u64, to: u64) {
        self.counters.naks_received += 1;
        if let Some(r) = self.members.iter().position(|&a| a == stream) {
            self.out.owe(asker, r, from, to, false);
        }
    }

    /// A NAK for the previous view, from one of its members still fetching up to its cut.
    pub(super) fn on_prev_nak(&mut self, h: &Header, stream: Address, from: u64, to: u64) {
        self.counters.naks_received += 1;
        let Some(p) = self.prev.as_ref() else {
            return;
        };
        let Some(r) = p.members.iter().position(|&a| a == stream) else {
            return;
        };
        if p.members.contains(&h.from) {
            self.out.owe(h.from, r, from, to, true);
        }
    }

    /// Answers a NAK with the casts asked for that this member holds.
    pub(super) fn poll_resend(&mut self, buf: &mut [u8]) -> Option<(Dest, usize)> {
        while let Some((to, r, from, upto, old)) = self.out.resend.pop_front() {
            let (held, stable, addr, view) = if old {
                let Some(p) = self.prev.as_ref() else {
                    continue;
                };
                (&p.held[r], 0, p.members[r], p.view)
            } else {
                let s = &self.streams[r];
                (&s.held, s.stable, s.addr, self.view)
            };
            let first = from.max(stable + 1);
            if first > upto || !held.contains(first) {
                continue;
            }
            let mut bytes = msg::data_bytes(0, std::iter::empty());
            let mut last = first;
            while last < upto {
                let Some(p) = held.get(last + 1) else {
                    break;
                };
                if bytes
                    + msg::RECORD_HEADER_BYTES
                    + p.len()
                    + held.get(first).map_or(0, <[u8]>::len)
                    + 4
                    > self.cfg.packet_bytes_max
                {
                    break;
                }
                bytes += msg::RECORD_HEADER_BYTES + p.len();
                last += 1;
            }
            let h = Header {
                group: self.cfg.group,
                view,
                from: self.me,
            };
            let records = (first..=last).filter_map(|k| held.get(k));
            let n = msg::write_data(buf, &h, addr, first, &[], records)?;
            self.counters.records_retransmitted += last - first + 1;
            if last < upto {
                self.out.resend.push_front((to, r, last + 1, upto, old));
            }
            return Some((Dest::To(to), n));
        }
        None
    }

    /// Own casts waiting to go out, packed as the packer decides.
    pub(super) fn poll_data(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        let own = self.streams.get(self.rank)?;
        // Own casts can become stable, and leave `held`, before the packer sent them: a NAK
        // (a flush's fetch of the cut) is answered from `held` while the packer still holds
        // them back. Everyone has those; this panicked on the missing casts.
        if self.out.sent_upto < own.stable {
            self.out.sent_upto = own.stable;
        }
        if self.out.sent_upto >= own.received {
            self.set_unsent_since(None);
            self.out.unsent_bytes = 0;
            return None;
        }
        let vector = match self.cfg.stability {
            Stability::Piggyback => self.members.len(),
            Stability::Pinwheel => 0,
        };
        let room = self.cfg.packet_bytes_max.min(buf.len());
        let cap = self
            .out
            .packer
            .messages_per_packet_max()
            .min(msg::RECORDS_MAX);
        // Whether the waiting casts fill a message, from the running total: no walk over
        // them while the packer holds them (a burst would make that quadratic).
        let unsent = (own.received - self.out.sent_upto) as usize;
        let full = msg::data_bytes(vector, std::iter::empty()) + self.out.unsent_bytes > room
            || unsent >= cap
            || self.out.push_upto > self.out.sent_upto;
        let in_flight = own.stable < self.out.sent_upto;
        let since = self.out.unsent_since.unwrap_or(now);
        if let PackDecision::HoldUntil(t) = self.out.packer.decide(since, full, in_flight) {
            if t > now {
                return None;
            }
        }
        let mut bytes = msg::data_bytes(vector, std::iter::empty());
        let mut count = 0usize;
        let mut taken = 0usize;
        for p in own.held.range(self.out.sent_upto + 1, u64::MAX) {
            let add = msg::RECORD_HEADER_BYTES + p.len();
            if count > 0 && (bytes + add > room || count >= cap) {
                break;
            }
            bytes += add;
            taken += add;
            count += 1;
        }
        let report = self.received_report();
        let own = &self.streams[self.rank];
        let first = self.out.sent_upto + 1;
        let h = self.header();
        let records = own.held.range(first, first + count as u64);
        let n = msg::write_data(buf, &h, self.me, first, &report, records)?;
        self.out.sent_upto += count as u64;
        self.out.unsent_bytes -= taken;
        let rest = (self.out.sent_upto < own.received).then_some(now);
        self.set_unsent_since(rest);
        self.out.packer.record(count);
        self.counters.data_sent += 1;
        self.counters.records_sent += count as u64;
        self.timers
            .set(Timer::Heartbeat, now + self.cfg.heartbeat_interval);
        self.reports.unreported = 0;
        self.note_acked_all();
        Some((Dest::All, n))
    }

    pub(super) fn nak_tick(&mut self, now: Instant) {
        for r in 0..self.streams.len() {
            let s = &self.streams[r];
            if r == self.rank || s.highest_known <= s.received || now < s.nak_after {
                continue;
            }
            let (from, to) = (
                s.received + 1,
                s.highest_known.min(s.received + NAK_SPAN_MAX),
            );
            let stream = s.addr;
            self.streams[r].nak_after = now + self.cfg.retransmit_timeout;
            if let Some(target) = self.nak_target(r) {
                self.counters.naks_sent += 1;
                self.queue(Dest::To(target), &VsMsg::Nak { stream, from, to });
            }
        }
        self.arm_nak();
    }

    /// Sets the NAK timer: the earliest `nak_after` of the other members' streams with a gap.
    pub(super) fn arm_nak(&mut self) {
        let t = self
            .streams
            .iter()
            .enumerate()
            .filter(|&(i, s)| i != self.rank && s.highest_known > s.received)
            .map(|(_, s)| s.nak_after)
            .min();
        self.timers.put(Timer::Nak, t);
    }

    /// The oldest own cast not yet sent was made at `since` (`None`: all are sent); the
    /// packer holds it until the pack timer.
    pub(super) fn set_unsent_since(&mut self, since: Option<Instant>) {
        self.out.unsent_since = since;
        let hold = match self.out.packer.mode {
            PackMode::Fixed { delay } | PackMode::Adaptive { delay_max: delay } => Some(delay),
            PackMode::Off => None,
        };
        let t = since.map(|s| hold.map_or(s, |d| s + d));
        self.timers.put(Timer::Pack, t);
    }
}
