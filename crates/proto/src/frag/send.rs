//! The sending side of long messages: transfers, their windows and retransmissions.

use super::msg::{self, AckHeader, AckStatus, DataHeader};
use super::{Bitset, LdgConfig, LdgError};
use crate::addr::Address;
use crate::time::Instant;
use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A transfer's id, unique among one sender incarnation's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TransferId(pub u64);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SenderCounters {
    pub transfers: u64,
    pub completed: u64,
    pub failed: u64,
    pub fragments_sent: u64,
    pub fragments_resent: u64,
    pub fast_retransmits: u64,
    pub timeouts: u64,
    pub probes: u64,
    pub acks: u64,
    /// Acks for no transfer of ours (late, or for another incarnation).
    pub acks_unknown: u64,
    /// Transfers started again because their receiver forgot them (restarted, or freed the
    /// reassembly).
    pub receiver_restarts: u64,
}

crate::counters_sum!(SenderCounters {
    transfers,
    completed,
    failed,
    fragments_sent,
    fragments_resent,
    fast_retransmits,
    timeouts,
    probes,
    acks,
    acks_unknown,
    receiver_restarts,
});

/// The congestion window starts here (fragments) and grows from it.
const CWND_INITIAL: f64 = 8.0;
/// It never falls below this.
const CWND_MIN: f64 = 2.0;
/// Acknowledgements of later fragments that declare an earlier one lost.
const DUPLICATE_THRESHOLD: u32 = 3;

struct Transfer {
    dest: Address,
    data: Vec<u8>,
    fragment_bytes: u32,
    count: u32,
    acked: Bitset,
    acked_count: u32,
    /// First fragment not acknowledged.
    cumulative: u32,
    /// Next fragment never sent.
    next_new: u32,
    /// Sent and not acknowledged: when, and whether it was a retransmission (no RTT sample).
    in_flight: BTreeMap<u32, (Instant, bool)>,
    /// To send again, lowest first (so the first missing fragment, a probe of a closed
    /// window, always leads).
    retransmit: BTreeSet<u32>,
    /// Fragments past `cumulative` the receiver takes.
    peer_window: u32,
    cwnd: f64,
    ssthresh: f64,
    /// No second window cut for losses below this (one cut per window of data).
    recovery_until: u32,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    rto_at: Option<Instant>,
    probe_at: Option<Instant>,
    deadline: Instant,
    /// The receiver's incarnation and reassembly number, from its acknowledgements.
    receiver: Option<(u64, u64)>,
}

impl Transfer {
    fn fragment(&self, i: u32) -> &[u8] {
        let start = i as usize * self.fragment_bytes as usize;
        let len = msg::fragment_len(self.data.len() as u64, self.fragment_bytes, i);
        &self.data[start..start + len]
    }

    fn due(&self) -> Instant {
        let mut t = self.deadline;
        for x in [self.rto_at, self.probe_at].into_iter().flatten() {
            t = t.min(x);
        }
        t
    }
}

/// What the last transfer to a destination learned of the path: the next one starts there
/// instead of slow-starting again (as a TCP connection keeps its window between writes).
#[derive(Clone, Copy)]
struct Path {
    cwnd: f64,
    ssthresh: f64,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
}

/// Destinations whose path state is remembered, at most.
const PATHS_MAX: usize = 1024;

pub struct Sender {
    cfg: LdgConfig,
    paths: BTreeMap<Address, Path>,
    incarnation: u64,
    next_transfer: u64,
    /// By id: oldest first.
    transfers: BTreeMap<u64, Transfer>,
    /// Round-robin order of the transfers.
    order: VecDeque<u64>,
    bytes_held: usize,
    aborts: VecDeque<(Address, u64)>,
    events: VecDeque<(TransferId, Result<(), LdgError>)>,
    /// Messages of finished transfers, for the caller to reuse (at most `POOL_BUFFERS_MAX`).
    spent: Vec<Vec<u8>>,
    pub counters: SenderCounters,
}

impl Sender {
    pub fn new(cfg: LdgConfig, incarnation: u64) -> Result<Sender, LdgError> {
        cfg.validate()?;
        Ok(Sender {
            cfg,
            paths: BTreeMap::new(),
            incarnation,
            next_transfer: 1,
            transfers: BTreeMap::new(),
            order: VecDeque::new(),
            bytes_held: 0,
            aborts: VecDeque::new(),
            events: VecDeque::new(),
            spent: Vec::new(),
            counters: SenderCounters::default(),
        })
    }

    pub fn config(&self) -> &LdgConfig {
        &self.cfg
    }

    /// Transfers outstanding.
    pub fn outstanding(&self) -> usize {
        self.transfers.len()
    }

    /// Whether transfer `id` is outstanding.
    pub fn is_outstanding(&self, id: TransferId) -> bool {
        self.transfers.contains_key(&id.0)
    }

    /// Starts sending `data` to `dest`; it must be acknowledged whole by `now + deadline`.
    pub fn send(
        &mut self,
        now: Instant,
        dest: Address,
        data: Vec<u8>,
        deadline: Duration,
    ) -> Result<TransferId, LdgError> {
        let max = self.cfg.message_bytes_max;
        if data.len() > max {
            return Err(LdgError::TooLong {
                len: data.len(),
                max,
            });
        }
        if deadline < Duration::from_millis(1) || deadline > self.cfg.deadline_max {
            return Err(LdgError::BadDeadline);
        }
        if self.transfers.len() >= self.cfg.transfers_max
            || self.bytes_held + data.len() > self.cfg.send_bytes_max
        {
            return Err(LdgError::Full);
        }
        let id = self.next_transfer;
        self.next_transfer += 1;
        let fragment_bytes = self.cfg.fragment_bytes as u32;
        let count = msg::count(data.len() as u64, fragment_bytes);
        self.bytes_held += data.len();
        let window = self.cfg.window_fragments_max as f64;
        let path = self.paths.get(&dest).copied().unwrap_or(Path {
            cwnd: CWND_INITIAL.min(window),
            ssthresh: window,
            srtt: None,
            rttvar: Duration::ZERO,
            rto: self.cfg.rto_initial,
        });
        self.transfers.insert(
            id,
            Transfer {
                dest,
                data,
                fragment_bytes,
                count,
                acked: Bitset::new(count),
                acked_count: 0,
                cumulative: 0,
                next_new: 0,
                in_flight: BTreeMap::new(),
                retransmit: BTreeSet::new(),
                peer_window: self.cfg.window_fragments_max as u32,
                cwnd: path.cwnd.min(window),
                ssthresh: path.ssthresh.min(window),
                recovery_until: 0,
                srtt: path.srtt,
                rttvar: path.rttvar,
                rto: path.rto,
                rto_at: None,
                probe_at: None,
                deadline: now + deadline,
                receiver: None,
            },
        );
        self.order.push_back(id);
        self.counters.transfers += 1;
        Ok(TransferId(id))
    }

    /// Gives transfer `id` up (the receiver is told).
    pub fn cancel(&mut self, id: TransferId) -> Result<(), LdgError> {
        let t = self.remove(id.0).ok_or(LdgError::Unknown)?;
        self.aborts.push_back((t.dest, id.0));
        Ok(())
    }

    fn remove(&mut self, id: u64) -> Option<Transfer> {
        let mut t = self.transfers.remove(&id)?;
        self.bytes_held -= t.data.len();
        self.order.retain(|&x| x != id);
        if self.spent.len() < super::POOL_BUFFERS_MAX {
            self.spent.push(std::mem::take(&mut t.data));
        }
        Some(t)
    }

    /// The message of a finished (or cancelled) transfer, for reuse: at most
    /// `POOL_BUFFERS_MAX` are kept until taken, later ones are freed.
    pub fn poll_spent(&mut self) -> Option<Vec<u8>> {
        self.spent.pop()
    }

    fn finish(&mut self, id: u64, r: Result<(), LdgError>) {
        if let Some(t) = self.remove(id) {
            if r.is_ok() {
                self.counters.completed += 1;
                if self.paths.len() >= PATHS_MAX && !self.paths.contains_key(&t.dest) {
                    self.paths.pop_first();
                }
                // A window that was never filled is not known to be safe: keep at most what
                // the transfer had in flight.
                self.paths.insert(
                    t.dest,
                    Path {
                        cwnd: t.cwnd,
                        ssthresh: t.ssthresh,
                        srtt: t.srtt,
                        rttvar: t.rttvar,
                        rto: t.rto,
                    },
                );
            } else {
                self.counters.failed += 1;
                if r != Err(LdgError::RefusedTooLong) {
                    self.aborts.push_back((t.dest, id));
                }
            }
            self.events.push_back((TransferId(id), r));
        }
    }

    /// A finished transfer: done, or why it failed.
    pub fn poll_event(&mut self) -> Option<(TransferId, Result<(), LdgError>)> {
        self.events.pop_front()
    }

    /// The next datagram to send (a fragment or an abort): its destination and length in `buf`
    /// (at least `fragment_bytes + 40` long).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Address, usize)> {
        let (to, n, fragment) = self.poll_transmit_gather(now, buf)?;
        // The fragment borrows the transfer, not `buf`: copy it behind the header.
        let f = fragment.len();
        buf.get_mut(n..n + f)?.copy_from_slice(fragment);
        Some((to, n + f))
    }

    /// As [`Sender::poll_transmit`], without copying the fragment: the datagram is the first
    /// `n` bytes of `head` (at least 40 long) followed by the returned fragment (empty for an
    /// abort).
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        head: &mut [u8],
    ) -> Option<(Address, usize, &[u8])> {
        let buf = head;
        if let Some((to, id)) = self.aborts.pop_front() {
            let n = msg::write_abort(self.incarnation, id, buf)?;
            return Some((to, n, &[]));
        }
        for _ in 0..self.order.len() {
            let id = *self.order.front()?;
            self.order.rotate_left(1);
            let incarnation = self.incarnation;
            let t = self
                .transfers
                .get_mut(&id)
                .expect("ordered transfers exist");
            if t.deadline <= now {
                // Nothing leaves after its deadline (the receiver's memory of it rests on
                // that); `handle_timeout` ends it.
                continue;
            }
            let Some((i, resent)) = next_fragment(t) else {
                continue;
            };
            let left = t.deadline.saturating_since(now).as_millis();
            let h = DataHeader {
                fragment_bytes: t.fragment_bytes,
                incarnation,
                transfer: id,
                total_len: t.data.len() as u64,
                index: i,
                // Rounded up: the receiver must not forget the transfer before we stop.
                deadline_ms: (left + 1).min(u32::MAX as u128) as u32,
            };
            let n = msg::write_data_header(&h, buf)?;
            t.in_flight.insert(i, (now, resent));
            if t.rto_at.is_none() {
                t.rto_at = Some(now + t.rto);
            }
            self.counters.fragments_sent += 1;
            if resent {
                self.counters.fragments_resent += 1;
            }
            let dest = t.dest;
            let t = self.transfers.get(&id).expect("present");
            return Some((dest, n, t.fragment(i)));
        }
        None
    }

    /// An acknowledgement arrived from `from`.
    pub fn handle_ack(&mut self, now: Instant, from: Address, a: &AckHeader<'_>) {
        self.counters.acks += 1;
        let id = a.transfer;
        let ours = a.incarnation == self.incarnation
            && self.transfers.get(&id).is_some_and(|t| t.dest == from);
        if !ours {
            self.counters.acks_unknown += 1;
            return;
        }
        match a.status {
            AckStatus::TooLong => return self.finish(id, Err(LdgError::RefusedTooLong)),
            AckStatus::Complete => return self.finish(id, Ok(())),
            AckStatus::Partial => {}
        }
        let cfg = self.cfg;
        let t = self.transfers.get_mut(&id).expect("checked");
        let this = (a.receiver_incarnation, a.reassembly);
        // An ack of no reassembly (a closed window) says nothing of what was acknowledged.
        let forgot = a.reassembly != 0 && t.receiver.is_some_and(|r| this > r);
        if a.reassembly != 0 && t.receiver.is_some_and(|r| this < r) {
            // From before the receiver last forgot (it came late): stale.
            self.counters.acks_unknown += 1;
            return;
        }
        if forgot {
            // The receiver restarted, or freed the reassembly and began it again: it forgot
            // what it acknowledged. Start again.
            self.counters.receiver_restarts += 1;
            t.acked = Bitset::new(t.count);
            t.acked_count = 0;
            t.cumulative = 0;
            t.next_new = 0;
            t.in_flight.clear();
            t.retransmit.clear();
            t.recovery_until = 0;
        }
        if a.reassembly != 0 {
            t.receiver = Some(this);
        }
        let mut newly = 0u32;
        let mut highest = None;
        // Everything below the cumulative point, then the bitmap.
        let cum = a.cumulative.min(t.count);
        if cum > t.cumulative {
            let below: Vec<u32> = t.in_flight.range(..cum).map(|(&i, _)| i).collect();
            for i in t.cumulative..cum {
                if t.acked.set(i) {
                    newly += 1;
                }
            }
            for i in below {
                ack_sample(t, i, now, &cfg);
            }
            highest = Some(cum - 1);
        }
        for (byte_i, byte) in a.bitmap.iter().enumerate() {
            for bit in 0..8 {
                if byte & (1 << bit) == 0 {
                    continue;
                }
                let i = a.cumulative as u64 + 1 + (byte_i * 8 + bit) as u64;
                if i >= t.count as u64 {
                    break;
                }
                let i = i as u32;
                if t.acked.set(i) {
                    newly += 1;
                }
                ack_sample(t, i, now, &cfg);
                highest = Some(highest.map_or(i, |h: u32| h.max(i)));
            }
        }
        t.acked_count += newly;
        while t.cumulative < t.count && t.acked.get(t.cumulative) {
            t.cumulative += 1;
        }
        t.peer_window = a.window;
        if newly > 0 {
            let w = cfg.window_fragments_max as f64;
            t.cwnd = if t.cwnd < t.ssthresh {
                t.cwnd + newly as f64
            } else {
                t.cwnd + newly as f64 / t.cwnd
            }
            .min(w);
            t.rto_at = (!t.in_flight.is_empty()).then(|| now + t.rto);
        }
        if t.peer_window == 0 && t.in_flight.is_empty() && t.probe_at.is_none() {
            t.probe_at = Some(now + t.rto);
        } else if t.peer_window > 0 {
            t.probe_at = None;
        }
        // Fragments sent well before ones acknowledged since are lost (fast retransmit). "Well
        // before": a quarter of a round trip, so that fragments merely overtaken on the way are
        // not sent twice.
        if let Some(h) = highest {
            let limit = h.saturating_sub(DUPLICATE_THRESHOLD - 1);
            let settle = t.srtt.map_or(Duration::ZERO, |s| s / 4);
            let lost: Vec<u32> = t
                .in_flight
                .range(..limit)
                .filter(|(_, &(sent, resent))| !resent && now.saturating_since(sent) >= settle)
                .map(|(&i, _)| i)
                .collect();
            for i in lost {
                t.in_flight.remove(&i);
                if !t.acked.get(i) && t.retransmit.insert(i) {
                    self.counters.fast_retransmits += 1;
                }
                if i >= t.recovery_until {
                    t.ssthresh = (t.cwnd / 2.0).max(CWND_MIN);
                    t.cwnd = t.ssthresh;
                    t.recovery_until = t.next_new;
                }
            }
        }
        // Every fragment acknowledged: only the receiver's "complete" ends the transfer (it
        // comes once the message is delivered). Until then, probe with the last fragment.
        if t.acked_count == t.count && t.probe_at.is_none() {
            t.probe_at = Some(now + t.rto);
        }
    }

    /// When [`Sender::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.transfers.values().map(Transfer::due).min()
    }

    /// Retransmissions on timeout, window probes, deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        let ids: Vec<u64> = self
            .transfers
            .iter()
            .filter(|(_, t)| t.due() <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let t = self.transfers.get_mut(&id).expect("listed");
            if t.deadline <= now {
                self.finish(id, Err(LdgError::DeadlinePassed));
                continue;
            }
            if t.rto_at.is_some_and(|x| x <= now) {
                self.counters.timeouts += 1;
                let lost: Vec<u32> = t.in_flight.keys().copied().collect();
                t.in_flight.clear();
                for i in lost {
                    if !t.acked.get(i) {
                        t.retransmit.insert(i);
                    }
                }
                t.ssthresh = (t.cwnd / 2.0).max(CWND_MIN);
                t.cwnd = CWND_MIN;
                t.recovery_until = t.next_new;
                t.rto = (t.rto * 2).min(self.cfg.rto_max);
                t.rto_at = None;
                if t.peer_window == 0 {
                    t.probe_at = Some(now);
                }
            }
            if t.probe_at.is_some_and(|x| x <= now) {
                // The receiver took nothing more (or its "complete" was lost): offer the first
                // missing fragment, or the last one, again.
                self.counters.probes += 1;
                t.retransmit.insert(t.cumulative.min(t.count - 1));
                t.rto = (t.rto * 2).min(self.cfg.rto_max);
                t.probe_at = Some(now + t.rto);
            }
        }
    }
}

/// The next fragment transfer `t` may send, and whether it is a retransmission.
fn next_fragment(t: &mut Transfer) -> Option<(u32, bool)> {
    let limit = t.cumulative as u64 + t.peer_window as u64;
    // Every fragment acknowledged and no "complete" yet: the last one goes again as a probe.
    let awaiting_complete = t.acked_count == t.count;
    while let Some(&i) = t.retransmit.first() {
        if t.acked.get(i) && !(awaiting_complete && i == t.count - 1) {
            t.retransmit.pop_first();
            continue;
        }
        // The first missing fragment may always go (a probe of a closed window, or of a
        // lost "complete"); others within the receiver's window and the congestion window.
        let probe = i == t.cumulative || awaiting_complete;
        let room = (i as u64) < limit && (t.in_flight.len() as f64) < t.cwnd.floor();
        if probe && t.in_flight.is_empty() || room {
            t.retransmit.pop_first();
            return Some((i, true));
        }
        return None;
    }
    if t.next_new < t.count
        && (t.next_new as u64) < limit
        && (t.in_flight.len() as f64) < t.cwnd.floor()
    {
        let i = t.next_new;
        t.next_new += 1;
        return Some((i, false));
    }
    None
}

/// Fragment `i` was acknowledged: out of flight, and an RTT sample if sent once.
fn ack_sample(t: &mut Transfer, i: u32, now: Instant, cfg: &LdgConfig) {
    if let Some((sent, resent)) = t.in_flight.remove(&i) {
        if !resent {
            let r = now.saturating_since(sent);
            match t.srtt {
                None => {
                    t.srtt = Some(r);
                    t.rttvar = r / 2;
                }
                Some(s) => {
                    let d = s.abs_diff(r);
                    t.rttvar = (t.rttvar * 3 + d) / 4;
                    t.srtt = Some((s * 7 + r) / 8);
                }
            }
            let s = t.srtt.expect("set");
            t.rto = (s + (t.rttvar * 4).max(Duration::from_micros(100)))
                .clamp(cfg.rto_min, cfg.rto_max);
        }
    }
}
