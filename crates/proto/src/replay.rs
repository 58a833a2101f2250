//! The replay defence of a keyed cluster for what travels without a link: DATAGRAM and
//! MULTICAST packets (issue 23). A MAC proves who sent a packet, not when: a captured packet
//! sent again verifies. With a key every such packet is numbered ([`Numbering`]): the sending
//! port's sequence number (one counter for all its datagrams and multicasts) and, in a
//! datagram, the destination port's incarnation as the sender knows it.
//!
//! A receiving port keeps one window per source port ([`ReplayGuard::arrive`]): the source's
//! incarnation, the highest number seen, which of the [`WINDOW`] numbers below it arrived, and
//! a floor below which nothing is taken. A number seen before, below the window or at or below
//! the floor, or a packet of an older incarnation of the source, is refused. A window exists
//! only once the source has shown it knows this incarnation of the receiver: a datagram naming
//! it creates one (its floor just below that datagram's number). Everything captured before a
//! receiver restarted names an older incarnation, or none, and is refused.
//!
//! A MULTICAST names no receiver. A receiver without a window for its source refuses it and
//! asks the source for a hello: a numbered datagram without records, with [`FLAG_ACK_NOW`]
//! when it asks for one in return. The source answers with a hello naming the receiver, which
//! creates the window; its floor sits above every multicast captured before, so none of them
//! is taken again. The same request answers a datagram that names another incarnation of the
//! receiver, or none: the sender learns the receiver's incarnation from it (every datagram
//! and multicast teaches its source's incarnation) and sends again what it kept for the
//! receiver ([`ReplayGuard::number_datagram`], [`ReplayGuard::keep_unless_known`],
//! [`Outcome::kept`]): first contact costs a round trip.
//! Requests are sent at most once per [`HELLO_INTERVAL`] per source, so a replayed packet gets
//! at most that answer.
//!
//! Bounds: [`SOURCES_MAX`] windows, the least recently heard one dropped for a new one
//! (counted: a datagram of the dropped source naming this incarnation, replayed later, would be
//! taken again); [`PEERS_MAX`] learned incarnations; [`KEPT_PER_PEER`] datagrams and
//! [`KEPT_BYTES_PER_PEER`] bytes kept for each of at most [`KEPT_PEERS_MAX`] peers not yet
//! heard from, each for at most [`KEPT_FOR`].
//!
//! [`Numbering`]: crate::wire::Numbering
//! [`FLAG_ACK_NOW`]: crate::wire::FLAG_ACK_NOW

use crate::addr::{Address, AddressHash, TxnId};
use crate::time::Instant;
use crate::wire::Numbering;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// Numbers below the highest seen that a window remembers (a multiple of 64).
pub const WINDOW: u64 = 1024;
const WORDS: usize = (WINDOW / 64) as usize;
/// Windows a port keeps, one per source port.
pub const SOURCES_MAX: usize = 4096;
/// Peers whose incarnation a port remembers.
pub const PEERS_MAX: usize = 4096;
/// Requests for a hello: at most one per source in this interval.
pub const HELLO_INTERVAL: Duration = Duration::from_millis(10);
/// Datagrams kept for a peer whose incarnation is not known yet, and their bytes at most
/// (a long message's fragments on first contact).
pub const KEPT_PER_PEER: usize = 32;
pub const KEPT_BYTES_PER_PEER: usize = 256 * 1024;
/// Peers datagrams are kept for.
pub const KEPT_PEERS_MAX: usize = 16;
/// How long a kept datagram is worth sending again.
pub const KEPT_FOR: Duration = Duration::from_secs(1);

/// Why a numbered packet was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayRefusal {
    /// Not numbered, in a keyed cluster.
    Unnumbered,
    /// A datagram naming another incarnation of this port (or none), or a multicast from a
    /// source this incarnation has no window for.
    Unconfirmed,
    /// From an older incarnation of the source than the newest known.
    OldIncarnation,
    /// A number the window has seen.
    Duplicate,
    /// Below the window, or at or below its floor.
    TooOld,
}

/// What [`ReplayGuard::check`] says of a packet (see [`Outcome`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Verdict {
    refused: Option<ReplayRefusal>,
    hello: Option<bool>,
}

/// A numbered (or not) DATAGRAM or MULTICAST, as [`ReplayGuard::check`] needs it.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub source: Address,
    /// The source's incarnation (the packet header's).
    pub incarnation: u64,
    pub numbering: Option<Numbering>,
    pub multicast: bool,
    /// Records in the packet: none makes a datagram a hello.
    pub records: usize,
    /// The packet's [`crate::wire::FLAG_ACK_NOW`]: a hello asking for one back.
    pub ack_now: bool,
}

/// What [`ReplayGuard::arrive`] says to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `None`: take the packet.
    pub refused: Option<ReplayRefusal>,
    /// Send the source a hello: `Some(true)` asking for one back, `Some(false)` an answer.
    pub hello: Option<bool>,
    /// Messages kept for the source, to send now (after the hello).
    pub kept: Vec<Kept>,
}

/// Counts of a guard's work, for a port's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayCounters {
    pub unnumbered: u64,
    pub unconfirmed: u64,
    pub old_incarnation: u64,
    pub duplicate: u64,
    pub too_old: u64,
    /// Windows dropped for room.
    pub windows_evicted: u64,
    /// Hellos asked for, and answered.
    pub hellos_asked: u64,
    pub hellos_answered: u64,
    /// Datagrams kept for a peer not heard from yet that were dropped for room or age.
    pub kept_dropped: u64,
}

#[derive(Clone, Debug)]
struct Window {
    incarnation: u64,
    floor: u64,
    highest: u64,
    seen: [u64; WORDS],
    heard_at: Instant,
}

impl Window {
    /// A window whose first number is `seq`: everything below is refused.
    fn starting_at(incarnation: u64, seq: u64, now: Instant) -> Window {
        let below = seq.saturating_sub(1);
        Window {
            incarnation,
            floor: below,
            highest: below,
            seen: [0; WORDS],
            heard_at: now,
        }
    }

    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Takes `seq` if this window has not: `Err` says why not.
    fn take(&mut self, seq: u64) -> Result<(), ReplayRefusal> {
        if seq <= self.floor {
            return Err(ReplayRefusal::TooOld);
        }
        if seq > self.highest {
            let shift = seq - self.highest;
            if shift >= WINDOW {
                self.seen = [0; WORDS];
            } else {
                for s in self.highest + 1..seq {
                    let (w, b) = Window::bit(s);
                    self.seen[w] &= !b;
                }
            }
            self.highest = seq;
            let (w, b) = Window::bit(seq);
            self.seen[w] |= b;
            return Ok(());
        }
        if self.highest - seq >= WINDOW {
            return Err(ReplayRefusal::TooOld);
        }
        let (w, b) = Window::bit(seq);
        if self.seen[w] & b != 0 {
            return Err(ReplayRefusal::Duplicate);
        }
        self.seen[w] |= b;
        Ok(())
    }
}

/// A message sent to a peer before its incarnation was known, to send again once it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub at: Instant,
    /// The transaction of a multicast; `None` for a datagram.
    pub txn: Option<TxnId>,
    pub msg: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
struct Peer {
    incarnation: u64,
    asked_at: Option<Instant>,
}

/// One port's replay state: windows of the sources it receives from, the incarnations of the
/// peers it heard from, and datagrams kept for peers it has not heard from yet.
#[derive(Debug)]
pub struct ReplayGuard {
    incarnation: u64,
    /// The number of this port's last numbered packet.
    seq: u64,
    windows: HashMap<Address, Window, AddressHash>,
    peers: HashMap<Address, Peer, AddressHash>,
    kept: HashMap<Address, VecDeque<Kept>, AddressHash>,
    counters: ReplayCounters,
}

impl ReplayGuard {
    /// The guard of a port of incarnation `incarnation`.
    pub fn new(incarnation: u64) -> ReplayGuard {
        ReplayGuard {
            incarnation,
            seq: 0,
            windows: HashMap::default(),
            peers: HashMap::default(),
            kept: HashMap::default(),
            counters: ReplayCounters::default(),
        }
    }

    pub fn counters(&self) -> ReplayCounters {
        self.counters
    }

    /// The numbering of this port's next DATAGRAM to `dest`: it names `dest`'s incarnation
    /// when known; otherwise it names none, `dest` will refuse it, and a copy of `parts` is
    /// kept to go again once `dest`'s answer teaches the incarnation ([`Outcome::kept`]).
    pub fn number_datagram(&mut self, now: Instant, dest: Address, parts: &[&[u8]]) -> Numbering {
        let dst_incarnation = self.known_or_keep(now, dest, None, parts).unwrap_or(0);
        self.next(dst_incarnation)
    }

    /// The numbering of this port's next MULTICAST (it names no receiver). For each
    /// destination, call [`ReplayGuard::keep_unless_known`].
    pub fn number_multicast(&mut self) -> Numbering {
        self.next(0)
    }

    /// The numbering of a hello to a port of incarnation `dst_incarnation`.
    pub fn number_hello(&mut self, dst_incarnation: u64) -> Numbering {
        self.next(dst_incarnation)
    }

    /// Keeps a copy of `parts`, a multicast of `txn` sent to `dest`, if `dest`'s incarnation
    /// is not known: `dest` may have no window for this port and refuse it.
    pub fn keep_unless_known(&mut self, now: Instant, dest: Address, txn: TxnId, parts: &[&[u8]]) {
        self.known_or_keep(now, dest, Some(txn), parts);
    }

    fn known_or_keep(
        &mut self,
        now: Instant,
        dest: Address,
        txn: Option<TxnId>,
        parts: &[&[u8]],
    ) -> Option<u64> {
        let known = self.incarnation_of(dest);
        if known.is_none() {
            self.keep(now, dest, txn, &parts.concat());
        }
        known
    }

    fn next(&mut self, dst_incarnation: u64) -> Numbering {
        self.seq += 1;
        Numbering {
            seq: self.seq,
            dst_incarnation,
        }
    }

    /// A DATAGRAM or MULTICAST arrived: learns its source's incarnation, checks it
    /// ([`ReplayGuard::check`]), and when the incarnation was new hands back what was kept
    /// for the source. The caller sends the hello first, then the kept messages (numbered
    /// after the hello, so above the floor of the window the hello makes).
    pub fn arrive(&mut self, now: Instant, a: Arrival) -> Outcome {
        let learned = self.learn(a.source, a.incarnation);
        let v = self.check(now, a);
        Outcome {
            refused: v.refused,
            hello: v.hello,
            kept: if learned {
                self.take_kept(now, a.source)
            } else {
                Vec::new()
            },
        }
    }

    /// The incarnation of `peer` last learned, if any: what a datagram to it names.
    pub fn incarnation_of(&self, peer: Address) -> Option<u64> {
        self.peers.get(&peer).map(|p| p.incarnation)
    }

    /// Learns `source`'s incarnation from an authenticated packet of it; true when it is new
    /// (first heard, or the source restarted): the caller then sends what it kept for it
    /// ([`ReplayGuard::take_kept`]). An older incarnation (a replay) teaches nothing.
    fn learn(&mut self, source: Address, incarnation: u64) -> bool {
        if let Some(p) = self.peers.get_mut(&source) {
            if incarnation <= p.incarnation {
                return false;
            }
            p.incarnation = incarnation;
            return true;
        }
        if self.peers.len() >= PEERS_MAX {
            // Forgetting one only costs it a round trip at its next datagram.
            if let Some(k) = self.peers.keys().next().copied() {
                self.peers.remove(&k);
            }
        }
        self.peers.insert(
            source,
            Peer {
                incarnation,
                asked_at: None,
            },
        );
        true
    }

    /// Checks a DATAGRAM or MULTICAST that arrived at `now`, its source's incarnation learned.
    fn check(&mut self, now: Instant, a: Arrival) -> Verdict {
        let Arrival {
            source,
            incarnation,
            numbering,
            multicast,
            records,
            ack_now,
        } = a;
        let refuse = |g: &mut ReplayGuard, why: ReplayRefusal, ask: bool| {
            let c = &mut g.counters;
            match why {
                ReplayRefusal::Unnumbered => c.unnumbered += 1,
                ReplayRefusal::Unconfirmed => c.unconfirmed += 1,
                ReplayRefusal::OldIncarnation => c.old_incarnation += 1,
                ReplayRefusal::Duplicate => c.duplicate += 1,
                ReplayRefusal::TooOld => c.too_old += 1,
            }
            let hello = (ask && g.may_ask(source, now)).then_some(true);
            if hello.is_some() {
                g.counters.hellos_asked += 1;
            }
            Verdict {
                refused: Some(why),
                hello,
            }
        };
        let Some(n) = numbering else {
            return refuse(self, ReplayRefusal::Unnumbered, false);
        };
        // The newest incarnation known of the source, from its window or from what `learn`
        // kept: a window can be gone (dropped for room, or for the restart itself), and a
        // packet of an older incarnation naming this one would otherwise make a new window.
        let known = self
            .windows
            .get(&source)
            .map(|w| w.incarnation)
            .max(self.incarnation_of(source));
        if known.is_some_and(|k| incarnation < k) {
            return refuse(self, ReplayRefusal::OldIncarnation, false);
        }
        match self.windows.get(&source) {
            Some(w) if incarnation > w.incarnation => {
                // The source restarted: its old window says nothing about the new one.
                self.windows.remove(&source);
            }
            _ => {}
        }
        let names_me = !multicast && n.dst_incarnation == self.incarnation;
        if !multicast && !names_me {
            return refuse(self, ReplayRefusal::Unconfirmed, true);
        }
        if !self.windows.contains_key(&source) {
            if !names_me {
                return refuse(self, ReplayRefusal::Unconfirmed, true);
            }
            self.make_room(now);
            self.windows
                .insert(source, Window::starting_at(incarnation, n.seq, now));
        }
        let w = self.windows.get_mut(&source).expect("window just made");
        w.heard_at = now;
        if let Err(why) = w.take(n.seq) {
            return refuse(self, why, false);
        }
        let hello = (records == 0 && ack_now).then_some(false);
        if hello.is_some() {
            self.counters.hellos_answered += 1;
        }
        Verdict {
            refused: None,
            hello,
        }
    }

    /// Whether a hello may be asked of `source` now (one per [`HELLO_INTERVAL`]); notes it.
    fn may_ask(&mut self, source: Address, now: Instant) -> bool {
        let Some(p) = self.peers.get_mut(&source) else {
            return false;
        };
        if p.asked_at
            .is_some_and(|t| now.saturating_since(t) < HELLO_INTERVAL)
        {
            return false;
        }
        p.asked_at = Some(now);
        true
    }

    fn make_room(&mut self, now: Instant) {
        if self.windows.len() < SOURCES_MAX {
            return;
        }
        let oldest = self
            .windows
            .iter()
            .min_by_key(|(a, w)| (w.heard_at, **a))
            .map(|(a, _)| *a);
        if let Some(a) = oldest {
            self.windows.remove(&a);
            self.counters.windows_evicted += 1;
        }
        let _ = now;
    }

    /// Keeps a copy of `msg`, a datagram (or a multicast of `txn`) sent to `peer` before its
    /// incarnation was known, to send again when it is: the peer refuses the first copy (it
    /// could be a replay) and asks for a hello, which teaches its incarnation.
    fn keep(&mut self, now: Instant, peer: Address, txn: Option<TxnId>, msg: &[u8]) {
        if msg.len() > KEPT_BYTES_PER_PEER {
            self.counters.kept_dropped += 1;
            return;
        }
        if !self.kept.contains_key(&peer) && self.kept.len() >= KEPT_PEERS_MAX {
            let oldest = self
                .kept
                .iter()
                .min_by_key(|(a, q)| (q.back().map(|k| k.at), **a))
                .map(|(a, _)| *a);
            if let Some(a) = oldest {
                let q = self.kept.remove(&a).unwrap_or_default();
                self.counters.kept_dropped += q.len() as u64;
            }
        }
        let q = self.kept.entry(peer).or_default();
        let mut bytes: usize = q.iter().map(|k| k.msg.len()).sum();
        while !q.is_empty() && (q.len() >= KEPT_PER_PEER || bytes + msg.len() > KEPT_BYTES_PER_PEER)
        {
            if let Some(k) = q.pop_front() {
                bytes -= k.msg.len();
            }
            self.counters.kept_dropped += 1;
        }
        q.push_back(Kept {
            at: now,
            txn,
            msg: msg.to_vec(),
        });
    }

    /// The messages kept for `peer` that are still worth sending, oldest first.
    fn take_kept(&mut self, now: Instant, peer: Address) -> Vec<Kept> {
        let Some(q) = self.kept.remove(&peer) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(q.len());
        for k in q {
            if now.saturating_since(k.at) <= KEPT_FOR {
                out.push(k);
            } else {
                self.counters.kept_dropped += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u64 = 5_000;
    const S_INC: u64 = 7_000;

    fn src() -> Address {
        Address::new(1, 2, 3, 0)
    }

    fn n(seq: u64, dst: u64) -> Option<Numbering> {
        Some(Numbering {
            seq,
            dst_incarnation: dst,
        })
    }

    fn at(ms: u64) -> Instant {
        Instant(ms * 1_000_000)
    }

    fn datagram(g: &mut ReplayGuard, t: u64, seq: u64, dst: u64) -> Verdict {
        g.learn(src(), S_INC);
        g.check(at(t), arrival(S_INC, n(seq, dst), false, 1, false))
    }

    fn arrival(
        incarnation: u64,
        numbering: Option<Numbering>,
        multicast: bool,
        records: usize,
        ack_now: bool,
    ) -> Arrival {
        Arrival {
            source: src(),
            incarnation,
            numbering,
            multicast,
            records,
            ack_now,
        }
    }

    fn take() -> Verdict {
        Verdict {
            refused: None,
            hello: None,
        }
    }

    #[test]
    fn a_datagram_naming_this_incarnation_is_taken_once() {
        let mut g = ReplayGuard::new(ME);
        assert_eq!(datagram(&mut g, 0, 10, ME), take());
        assert_eq!(
            datagram(&mut g, 1, 10, ME).refused,
            Some(ReplayRefusal::Duplicate)
        );
        // Out of order within the window: taken once.
        assert_eq!(datagram(&mut g, 2, 14, ME), take());
        assert_eq!(datagram(&mut g, 3, 12, ME), take());
        assert_eq!(
            datagram(&mut g, 4, 12, ME).refused,
            Some(ReplayRefusal::Duplicate)
        );
        // Below the window's start (the floor): refused though never seen.
        assert_eq!(
            datagram(&mut g, 5, 9, ME).refused,
            Some(ReplayRefusal::TooOld)
        );
        // Far ahead, then far behind: below the window.
        assert_eq!(datagram(&mut g, 6, 14 + 5 * WINDOW, ME), take());
        assert_eq!(
            datagram(&mut g, 7, 13, ME).refused,
            Some(ReplayRefusal::TooOld)
        );
        // Just inside the window after the jump, never seen: taken.
        assert_eq!(datagram(&mut g, 8, 15 + 4 * WINDOW, ME), take());
        assert_eq!(g.counters().duplicate, 2);
        assert_eq!(g.counters().too_old, 2);
    }

    #[test]
    fn a_datagram_naming_another_incarnation_asks_for_a_hello_at_most_once_per_interval() {
        let mut g = ReplayGuard::new(ME);
        let v = datagram(&mut g, 0, 1, ME - 1);
        assert_eq!(v.refused, Some(ReplayRefusal::Unconfirmed));
        assert_eq!(v.hello, Some(true));
        assert_eq!(datagram(&mut g, 5, 2, 0).hello, None, "within the interval");
        assert_eq!(datagram(&mut g, 11, 3, 0).hello, Some(true));
        assert_eq!(g.counters().unconfirmed, 3);
        assert_eq!(g.counters().hellos_asked, 2);
    }

    #[test]
    fn a_multicast_needs_a_window_and_a_hello_makes_one_above_every_earlier_number() {
        let mut g = ReplayGuard::new(ME);
        g.learn(src(), S_INC);
        let m =
            |g: &mut ReplayGuard, t, seq| g.check(at(t), arrival(S_INC, n(seq, 0), true, 1, false));
        let v = m(&mut g, 0, 50);
        assert_eq!(v.refused, Some(ReplayRefusal::Unconfirmed));
        assert_eq!(v.hello, Some(true));
        // The source's answer: a hello naming this incarnation, not itself answered.
        let hello = g.check(at(1), arrival(S_INC, n(60, ME), false, 0, false));
        assert_eq!(hello, take());
        // A multicast captured before (50) stays refused; new ones are taken once.
        assert_eq!(m(&mut g, 2, 50).refused, Some(ReplayRefusal::TooOld));
        assert_eq!(m(&mut g, 3, 61), take());
        assert_eq!(m(&mut g, 4, 61).refused, Some(ReplayRefusal::Duplicate));
        // A hello asking for one back is answered once; its replay is refused unanswered.
        let ask = g.check(at(5), arrival(S_INC, n(62, ME), false, 0, true));
        assert_eq!(ask.hello, Some(false));
        let again = g.check(at(6), arrival(S_INC, n(62, ME), false, 0, true));
        assert_eq!(again.refused, Some(ReplayRefusal::Duplicate));
        assert_eq!(again.hello, None);
    }

    #[test]
    fn a_restarted_source_gets_a_new_window_and_its_old_incarnation_is_refused() {
        let mut g = ReplayGuard::new(ME);
        assert_eq!(datagram(&mut g, 0, 100, ME), take());
        assert!(g.learn(src(), S_INC + 1));
        assert!(
            !g.learn(src(), S_INC),
            "an older incarnation teaches nothing"
        );
        let v = g.check(at(1), arrival(S_INC + 1, n(1, ME), false, 1, false));
        assert_eq!(v, take());
        let old = g.check(at(2), arrival(S_INC, n(101, ME), false, 1, false));
        assert_eq!(old.refused, Some(ReplayRefusal::OldIncarnation));
        assert_eq!(g.incarnation_of(src()), Some(S_INC + 1));
    }

    #[test]
    fn an_old_incarnation_makes_no_window_once_the_source_restarted() {
        let mut g = ReplayGuard::new(ME);
        // The restarted source is heard before any packet of its old incarnation reaches a
        // window: its old packets naming this port are replays, refused.
        assert!(g.learn(src(), S_INC + 1));
        let old = g.check(at(0), arrival(S_INC, n(100, ME), false, 1, false));
        assert_eq!(old.refused, Some(ReplayRefusal::OldIncarnation));
        assert_eq!(old.hello, None);
        assert!(g.windows.is_empty());
        // Its new incarnation is taken, and the old one stays refused with a window there.
        let v = g.check(at(1), arrival(S_INC + 1, n(1, ME), false, 1, false));
        assert_eq!(v, take());
        let old = g.check(at(2), arrival(S_INC, n(101, ME), false, 1, false));
        assert_eq!(old.refused, Some(ReplayRefusal::OldIncarnation));
        assert_eq!(g.counters().old_incarnation, 2);
    }

    #[test]
    fn unnumbered_packets_are_refused_without_an_answer() {
        let mut g = ReplayGuard::new(ME);
        g.learn(src(), S_INC);
        let v = g.check(at(0), arrival(S_INC, None, false, 1, true));
        assert_eq!(v.refused, Some(ReplayRefusal::Unnumbered));
        assert_eq!(v.hello, None);
    }

    /// Two guards through their public calls: a first datagram is refused, the hello exchange
    /// teaches each the other, the kept copy goes again and is taken once; a replay of either
    /// copy is refused.
    #[test]
    fn first_contact_takes_one_round_trip_and_loses_nothing() {
        let (s_addr, r_addr) = (src(), Address::new(1, 4, 3, 0));
        let (mut s, mut r) = (ReplayGuard::new(S_INC), ReplayGuard::new(ME));
        let from = |source, incarnation, n: Numbering, records, ack_now| Arrival {
            source,
            incarnation,
            numbering: Some(n),
            multicast: false,
            records,
            ack_now,
        };
        let first = s.number_datagram(at(0), r_addr, &[b"he", b"llo"]);
        assert_eq!(first.dst_incarnation, 0);
        let o = r.arrive(at(1), from(s_addr, S_INC, first, 1, false));
        assert_eq!(
            (o.refused, o.hello),
            (Some(ReplayRefusal::Unconfirmed), Some(true))
        );
        let ask = r.number_hello(S_INC);
        let o = s.arrive(at(2), from(r_addr, ME, ask, 0, true));
        assert_eq!((o.refused, o.hello), (None, Some(false)));
        assert_eq!(o.kept.len(), 1);
        assert_eq!((o.kept[0].txn, &o.kept[0].msg[..]), (None, &b"hello"[..]));
        let answer = s.number_hello(ME);
        let again = s.number_datagram(at(2), r_addr, &[&o.kept[0].msg]);
        assert_eq!(again.dst_incarnation, ME);
        let o = r.arrive(at(3), from(s_addr, S_INC, answer, 0, false));
        assert_eq!(
            o,
            Outcome {
                refused: None,
                hello: None,
                kept: Vec::new()
            }
        );
        assert_eq!(
            r.arrive(at(3), from(s_addr, S_INC, again, 1, false))
                .refused,
            None
        );
        for n in [first, again] {
            assert!(r
                .arrive(at(4), from(s_addr, S_INC, n, 1, false))
                .refused
                .is_some());
        }
        // Nothing else kept: later datagrams name the receiver at once.
        assert_eq!(
            s.number_datagram(at(5), r_addr, &[b"x"]).dst_incarnation,
            ME
        );
        assert!(s
            .arrive(at(6), from(r_addr, ME, r.number_hello(S_INC), 0, false))
            .kept
            .is_empty());
    }

    #[test]
    fn windows_and_kept_datagrams_are_bounded() {
        let mut g = ReplayGuard::new(ME);
        for i in 0..SOURCES_MAX as u64 + 10 {
            let a = Address::new(1, (i % 60_000) as u16, (i / 60_000) as u16 + 1, 0);
            g.learn(a, S_INC);
            let v = g.check(
                at(i),
                Arrival {
                    source: a,
                    ..arrival(S_INC, n(1, ME), false, 1, false)
                },
            );
            assert_eq!(v, take());
        }
        assert_eq!(g.windows.len(), SOURCES_MAX);
        assert_eq!(g.counters().windows_evicted, 10);
        assert!(g.peers.len() <= PEERS_MAX);
        // The first sources were the least recently heard: their windows went.
        assert!(!g.windows.contains_key(&Address::new(1, 0, 1, 0)));

        let peer = Address::new(1, 9, 9, 0);
        for i in 0..KEPT_PER_PEER + 3 {
            g.keep(at(0), peer, None, &[i as u8]);
        }
        for p in 0..KEPT_PEERS_MAX {
            g.keep(
                at(1),
                Address::new(1, 8, p as u16, 0),
                Some(TxnId(p as u64)),
                b"x",
            );
        }
        assert!(g.kept.len() <= KEPT_PEERS_MAX);
        // `peer`'s were the oldest: dropped for room, and counted.
        assert!(g.take_kept(at(2), peer).is_empty());
        assert_eq!(g.counters().kept_dropped, 3 + KEPT_PER_PEER as u64);
        let q = Address::new(1, 8, 3, 0);
        let k = g.take_kept(at(2), q);
        assert_eq!(k.len(), 1);
        assert_eq!((k[0].txn, &k[0].msg[..]), (Some(TxnId(3)), &b"x"[..]));
        let late = Address::new(1, 8, 4, 0);
        assert!(g
            .take_kept(at(1) + KEPT_FOR + Duration::from_millis(1), late)
            .is_empty());
    }
}
