//! The links of one port, as the engine keeps them: a bounded table of [`Link`]s by peer,
//! one timer wheel for all of them, the list of links that need a look in the next duty cycle,
//! and the back-pressure of a full delivery ring.
//!
//! Sans-IO like the link itself: packets and time go in ([`LinkTable::handle_packet`],
//! [`LinkTable::run`]), and what comes out goes through a [`LinkIo`] the caller supplies
//! (deliveries to the application, packets to the network). The engine drives it over sockets
//! and a shared-memory ring; the simulator drives it over a faulty network and a bounded
//! mailbox.

use super::{ConfigError, Link, LinkConfig, LinkCounters, LinkEvent, LinkSendError};
use crate::addr::{Address, AddressHash};
use crate::time::Instant;
use crate::timer::TimerWheel;
use crate::wire::{Packet, PacketKey};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Timer wheel geometry: 100 µs ticks, 1024 buckets (about 100 ms per round).
pub const TIMER_TICK_NS: u64 = 100_000;
pub const TIMER_SLOTS: usize = 1024;

/// Where a link table's output goes.
pub trait LinkIo {
    /// A message from `peer` for the application, in order. False if there is no room for it:
    /// the link keeps it (and stops granting `peer` credit) until [`LinkTable::room_made`].
    fn deliver(&mut self, peer: Address, msg: &[u8]) -> bool;
    /// A packet for `peer`.
    fn transmit(&mut self, peer: Address, packet: &[u8]);
    /// Something rare happened to `peer`'s link (reported at the run after it happened).
    /// Ignored unless the caller wants to report it.
    fn link_event(&mut self, _peer: Address, _event: LinkEvent) {}
}

/// Why a packet was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableRefusal {
    /// A packet from a new peer while the table is full.
    LinkLimit,
    /// The link refused the packet (malformed, an old incarnation, ...).
    Bad,
}

/// Why a send was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableSendError {
    /// A new peer while the table is full, or the link's window is full.
    Full,
    /// The peer's link gave up on it (retransmissions exhausted).
    Unreachable,
    TooLong {
        len: usize,
        max: usize,
    },
}

/// What a [`LinkTable::run`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunOutcome {
    /// Timers fired, messages delivered and packets sent.
    pub work: usize,
    /// A delivery was refused for want of room (see [`LinkIo::deliver`]).
    pub refused: bool,
}

/// The links of one port.
pub struct LinkTable {
    cfg: LinkConfig,
    local: Address,
    cluster: u16,
    incarnation: u64,
    key: Option<Arc<PacketKey>>,
    links_max: usize,
    map: HashMap<Address, Link, AddressHash>,
    buf: Vec<u8>,
    timers: TimerWheel<Address>,
    /// The deadline each link is scheduled at in the wheel (entries at other deadlines are
    /// stale and ignored when they fire).
    timer_at: HashMap<Address, Instant, AddressHash>,
    /// Links touched since the last run (a packet arrived, a timer fired, a delivery was
    /// refused by a full ring).
    dirty: Vec<Address>,
    dirty_set: HashSet<Address, AddressHash>,
    work: Vec<Address>,
    /// Links whose delivery was refused, waiting for room.
    blocked: Vec<Address>,
    /// No timer in the wheel is due before this (a lower bound, kept so that an idle run need
    /// not look into the wheel).
    earliest: Option<Instant>,
}

impl LinkTable {
    /// The links of the port at `local`, running as `incarnation`, at most `links_max` of them.
    pub fn new(
        cfg: LinkConfig,
        local: Address,
        cluster: u16,
        incarnation: u64,
        key: Option<Arc<PacketKey>>,
        links_max: usize,
        now: Instant,
    ) -> Result<LinkTable, ConfigError> {
        cfg.validate()?;
        Ok(LinkTable {
            buf: vec![0u8; cfg.packet_bytes_max],
            // One live entry per link and room for as many stale ones; a full wheel is
            // compacted.
            timers: TimerWheel::new(TIMER_TICK_NS, TIMER_SLOTS, 2 * links_max, now),
            cfg,
            local,
            cluster,
            incarnation,
            key,
            links_max,
            map: HashMap::default(),
            timer_at: HashMap::default(),
            dirty: Vec::new(),
            dirty_set: HashSet::default(),
            work: Vec::new(),
            blocked: Vec::new(),
            earliest: None,
        })
    }

    /// Sends with `key` from now on, on every link and on those made later (a key rollover;
    /// a table made without a key stays without one).
    pub fn set_send_key(&mut self, key: Arc<PacketKey>) {
        if self.key.is_none() {
            return;
        }
        for l in self.map.values_mut() {
            l.set_send_key(key.clone());
        }
        self.key = Some(key);
    }

    /// `peer`'s link, made if there is none and the table has room.
    pub fn entry(&mut self, peer: Address) -> Option<&mut Link> {
        let full = self.map.len() >= self.links_max;
        match self.map.entry(peer) {
            std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(_) if full => None,
            std::collections::hash_map::Entry::Vacant(e) => {
                let link = Link::new(
                    self.cfg.clone(),
                    self.local,
                    peer,
                    self.cluster,
                    self.incarnation,
                    self.key.clone(),
                )
                .expect("configuration validated in LinkTable::new");
                Some(e.insert(link))
            }
        }
    }

    pub fn get(&self, peer: Address) -> Option<&Link> {
        self.map.get(&peer)
    }

    pub fn links(&self) -> impl Iterator<Item = &Link> {
        self.map.values()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// A DATA or ACK packet from `p.header.source` (the caller checked where it came from).
    pub fn handle_packet(&mut self, now: Instant, p: &Packet<'_>) -> Result<(), TableRefusal> {
        let peer = p.header.source;
        let link = self.entry(peer).ok_or(TableRefusal::LinkLimit)?;
        let r = link.handle_packet(now, p).map_err(|_| TableRefusal::Bad);
        self.mark(peer);
        r
    }

    /// Queues `msg` for `peer` without sending it ([`LinkTable::flush_peer`] sends it, packed
    /// with whatever else was queued).
    pub fn queue(&mut self, now: Instant, peer: Address, msg: &[u8]) -> Result<(), TableSendError> {
        let link = self.entry(peer).ok_or(TableSendError::Full)?;
        if link.is_unreachable() {
            return Err(TableSendError::Unreachable);
        }
        link.send(now, msg).map_err(|e| match e {
            LinkSendError::Full => TableSendError::Full,
            LinkSendError::TooLong { len, max } => TableSendError::TooLong { len, max },
        })
    }

    /// Queues `msg` for `peer` and sends what the link has ready; the link's next deadline.
    pub fn send(
        &mut self,
        now: Instant,
        peer: Address,
        msg: &[u8],
        io: &mut impl LinkIo,
    ) -> Result<Option<Instant>, TableSendError> {
        self.queue(now, peer, msg)?;
        self.flush_peer(now, peer, io);
        Ok(self.map.get(&peer).and_then(|l| l.poll_timeout()))
    }

    /// Sends every packet `peer`'s link has ready, and schedules its next deadline. Packets
    /// sent.
    pub fn flush_peer(&mut self, now: Instant, peer: Address, io: &mut impl LinkIo) -> usize {
        let Some(link) = self.map.get_mut(&peer) else {
            return 0;
        };
        let n = transmit_all(link, &mut self.buf, now, io);
        self.settle(peer);
        n
    }

    /// Asks the next run to look at `peer`'s link.
    pub fn mark(&mut self, peer: Address) {
        if self.dirty_set.insert(peer) {
            self.dirty.push(peer);
        }
    }

    /// Puts `peer`'s next deadline in the wheel if it is earlier than the one scheduled.
    fn settle(&mut self, peer: Address) {
        let Some(t) = self.map.get(&peer).and_then(|l| l.poll_timeout()) else {
            return;
        };
        if self.timer_at.get(&peer).is_none_or(|&at| t < at) {
            if self.timers.schedule(t, peer).is_err() {
                self.compact_timers();
                if self.timers.schedule(t, peer).is_err() {
                    // Cannot happen (room for two per link): look at the link every run.
                    self.mark(peer);
                    return;
                }
            }
            self.timer_at.insert(peer, t);
            self.earliest = Some(self.earliest.map_or(t, |e| e.min(t)));
        }
    }

    /// Drops the wheel's stale entries, keeping one per link: the one `timer_at` names. A
    /// deadline moved earlier leaves the later one behind, and when the earlier one has fired
    /// the later one is scheduled again, so the wheel fills with stale entries and copies.
    fn compact_timers(&mut self) {
        let timer_at = &self.timer_at;
        let mut kept: HashSet<Address> = HashSet::default();
        self.timers
            .retain(|deadline, peer| timer_at.get(&peer) == Some(&deadline) && kept.insert(peer));
    }

    /// Whether a delivery waits for room.
    pub fn is_blocked(&self) -> bool {
        !self.blocked.is_empty()
    }

    /// The application made room: the next run retries the deliveries that were refused.
    pub fn room_made(&mut self) {
        for peer in std::mem::take(&mut self.blocked) {
            self.mark(peer);
        }
    }

    /// When the table must next run (`Instant::ZERO`: at once). This is the bound `run` itself
    /// tests, so a caller that waits until it never finds it already past after a run (the
    /// wheel's own bound, taken from a cursor that only `run` moves, can be).
    pub fn next_deadline(&self) -> Option<Instant> {
        if !self.dirty.is_empty() {
            return Some(Instant::ZERO);
        }
        self.earliest
    }

    /// Timers that fired, then deliveries and transmissions for every link that needs a look;
    /// each link's next deadline goes back into the wheel.
    pub fn run(&mut self, now: Instant, io: &mut impl LinkIo) -> RunOutcome {
        let mut out = RunOutcome::default();
        if self.dirty.is_empty() && self.earliest.is_none_or(|t| t > now) {
            return out;
        }
        {
            let LinkTable {
                timers,
                timer_at,
                dirty,
                dirty_set,
                ..
            } = self;
            out.work += timers.expire(now, |deadline, peer| {
                if timer_at.get(&peer) == Some(&deadline) {
                    timer_at.remove(&peer);
                    if dirty_set.insert(peer) {
                        dirty.push(peer);
                    }
                }
            });
        }
        let mut list = std::mem::take(&mut self.work);
        std::mem::swap(&mut list, &mut self.dirty);
        self.dirty_set.clear();
        for &peer in &list {
            let Some(link) = self.map.get_mut(&peer) else {
                continue;
            };
            if link.poll_timeout().is_some_and(|t| t <= now) {
                link.handle_timeout(now);
            }
            if link.has_notes() {
                while let Some(e) = link.poll_event() {
                    io.link_event(peer, e);
                }
            }
            let mut refused = false;
            while link
                .poll_delivery_if(|m| {
                    refused = !io.deliver(peer, m);
                    (!refused).then_some(())
                })
                .is_some()
            {
                out.work += 1;
            }
            out.work += transmit_all(link, &mut self.buf, now, io);
            if refused {
                // The link keeps the message (its credit stays closed) until room is made.
                if !self.blocked.contains(&peer) {
                    self.blocked.push(peer);
                }
                out.refused = true;
            }
            self.settle(peer);
        }
        list.clear();
        self.work = list;
        if self.earliest.is_some_and(|t| t <= now) {
            // What fired is gone from the wheel: find the next. Otherwise `earliest` is still a
            // lower bound (`settle` lowers it for every new entry), and the wheel's scan from
            // its cursor to its first entry, on every packet, is not needed.
            self.earliest = self.timers.next_deadline();
        }
        out
    }

    /// The counters of every link, summed.
    pub fn counters(&self) -> LinkCounters {
        let mut s = LinkCounters::default();
        for l in self.map.values() {
            s.add(l.counters());
        }
        s
    }

    /// Whether every message sent has been acknowledged and every acknowledgement owed sent.
    pub fn is_quiescent(&self) -> bool {
        self.map.values().all(|l| l.is_quiescent())
    }

    /// Whether every message sent has been acknowledged.
    pub fn is_idle(&self) -> bool {
        self.map.values().all(|l| l.is_idle())
    }
}

fn transmit_all(link: &mut Link, buf: &mut [u8], now: Instant, io: &mut impl LinkIo) -> usize {
    let peer = link.peer();
    let mut n = 0;
    while let Some(len) = link.poll_transmit(now, buf) {
        io.transmit(peer, &buf[..len]);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Lossy(usize);

    impl LinkIo for Lossy {
        fn deliver(&mut self, _: Address, _: &[u8]) -> bool {
            true
        }
        fn transmit(&mut self, _: Address, _: &[u8]) {
            self.0 += 1;
        }
    }

    /// Keeps what it is given: packets sent and link events.
    #[derive(Default)]
    struct Keep {
        packets: Vec<Vec<u8>>,
        events: Vec<(Address, LinkEvent)>,
    }

    impl LinkIo for Keep {
        fn deliver(&mut self, _: Address, _: &[u8]) -> bool {
            true
        }
        fn transmit(&mut self, _: Address, p: &[u8]) {
            self.packets.push(p.to_vec());
        }
        fn link_event(&mut self, peer: Address, e: LinkEvent) {
            self.events.push((peer, e));
        }
    }

    /// Runs `t` at each of its deadlines until `until`.
    fn run_until(t: &mut LinkTable, now: &mut Instant, until: Instant, io: &mut Keep) {
        while let Some(next) = t.next_deadline() {
            if next > until {
                break;
            }
            *now = next.max(*now);
            t.run(*now, io);
        }
        *now = until;
        t.run(*now, io);
    }

    #[test]
    fn a_silent_peer_is_reported_unreachable_once_and_reachable_when_it_answers() {
        let cfg = LinkConfig::default();
        let a = Address::new(0, 1, 1, 0);
        let b = Address::new(0, 2, 1, 0);
        let mut ta = LinkTable::new(cfg.clone(), a, 1, 1, None, 4, Instant::ZERO).unwrap();
        let mut tb = LinkTable::new(cfg, b, 1, 7, None, 4, Instant::ZERO).unwrap();
        let (mut ia, mut ib) = (Keep::default(), Keep::default());
        let mut now = Instant(1_000_000);
        ta.send(now, b, b"hello", &mut ia).unwrap();
        // b hears nothing for a minute: a gives up on it once, however often it retries.
        run_until(&mut ta, &mut now, Instant(60_000_000_000), &mut ia);
        assert_eq!(ia.events, vec![(b, LinkEvent::Unreachable)]);
        assert!(ia.packets.len() > 10, "{} packets", ia.packets.len());
        // Then b gets a's last retransmission and answers: a reports it back.
        let last = ia.packets.pop().unwrap();
        let p = Packet::parse(&last, 1, None).unwrap();
        tb.handle_packet(now, &p).unwrap();
        let until = Instant(now.0 + 1_000_000_000);
        run_until(&mut tb, &mut now, until, &mut ib);
        assert!(ib.events.is_empty(), "{:?}", ib.events);
        for pkt in &ib.packets {
            let p = Packet::parse(pkt, 1, None).unwrap();
            ta.handle_packet(now, &p).unwrap();
        }
        ta.run(now, &mut ia);
        assert_eq!(
            ia.events,
            vec![(b, LinkEvent::Unreachable), (b, LinkEvent::Reachable)]
        );
        // b restarts (a new incarnation): a reports that, with the incarnation.
        let mut tb = LinkTable::new(LinkConfig::default(), b, 1, 8, None, 4, now).unwrap();
        let mut ib = Keep::default();
        tb.send(now, a, b"again", &mut ib).unwrap();
        for pkt in &ib.packets {
            let p = Packet::parse(pkt, 1, None).unwrap();
            ta.handle_packet(now, &p).unwrap();
        }
        ta.run(now, &mut ia);
        assert_eq!(
            ia.events[2..],
            [(b, LinkEvent::PeerRestarted { incarnation: 8 })]
        );
    }

    #[test]
    fn deadlines_move_forward_while_a_lost_message_backs_off() {
        let cfg = LinkConfig::default();
        let local = Address::new(0, 1, 1, 0);
        let peer = Address::new(0, 2, 1, 0);
        let mut t = LinkTable::new(cfg, local, 1, 1, None, 4, Instant::ZERO).unwrap();
        let mut io = Lossy(0);
        // The first send comes long after the table was made (its wheel not yet turned), and
        // retransmissions back off to a timeout longer than one turn of the wheel; a caller
        // that sleeps until each deadline must always be woken later than it last ran.
        let mut now = Instant(1_000_000_000);
        t.send(now, peer, b"never acknowledged", &mut io).unwrap();
        let mut runs = 0;
        while now.0 < 11_000_000_000 {
            let next = t.next_deadline().expect("a message is outstanding");
            assert!(next > now, "deadline {next:?} not after the run at {now:?}");
            now = next;
            t.run(now, &mut io);
            runs += 1;
        }
        // One wake per turn of the wheel at most, beside the retransmissions.
        let turn = TIMER_TICK_NS * TIMER_SLOTS as u64;
        assert!(
            runs <= 10_000_000_000 / turn + io.0 as u64 + 2,
            "{runs} runs"
        );
        assert!(t.counters().retransmitted >= 10, "{:?}", t.counters());
    }
}
