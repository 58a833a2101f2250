//! The engine's core under simulated faults: each node is a port as the engine keeps it, a
//! [`LinkTable`] (bounded table of links, one timer wheel, back-pressure of a refused delivery)
//! behind the engine's packet rule (parse, [`PacketHeader::addressed_to`], route DATA and ACK
//! to the table), delivering into a bounded ring that a slow application drains. Ports send
//! both at once and deferred (queued, then flushed as a batch, as the module host does).
//!
//! Checked: every message taken from a ring was sent, unaltered, exactly once and in order per
//! pair of incarnations ([`Streams`]); a ring never holds more than its capacity; after a run,
//! a table's next deadline is later than now (else its engine would spin); packets that
//! name another port are refused; on some seeds an intruder that arrives when the tables are
//! full is refused and counted, and never delivered; after the network heals everything sent
//! is delivered (a full ring holds a link's deliveries back; room made lets them through).
//!
//! [`PacketHeader::addressed_to`]: txcast_proto::wire::PacketHeader::addressed_to

use crate::link_sim::min_opt;
use crate::net::{FaultConfig, NetCounters, Network};
use crate::streams::{message_len, Streams};
use crate::{Digest, NodeId};
use std::collections::VecDeque;
use txcast_proto::link::{LinkConfig, LinkCounters, LinkIo, LinkTable, TableRefusal};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::wire::{Kind, Packet};
use txcast_proto::Address;

const CLUSTER: u16 = 1;

/// Knobs of one engine-core simulation.
#[derive(Clone, Debug)]
pub struct EngineSimOptions {
    pub nodes: usize,
    /// Messages each node sends to each other node.
    pub messages_per_pair: u32,
    /// Virtual time with faults on.
    pub safety_ns: u64,
    /// Virtual time allowed, after healing, for everything to arrive.
    pub liveness_ns: u64,
    /// Draw the fault mix from the seed; otherwise run fault-free.
    pub faults: bool,
}

impl Default for EngineSimOptions {
    fn default() -> Self {
        EngineSimOptions {
            nodes: 4,
            messages_per_pair: 150,
            safety_ns: 2_000_000_000,
            liveness_ns: 60_000_000_000,
            faults: true,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct EngineSimReport {
    pub seed: u64,
    pub faults: FaultConfig,
    /// Messages a ring holds at most.
    pub ring_capacity: usize,
    pub restarts: usize,
    pub intruder: bool,
    pub delivered: u64,
    /// Deliveries a full ring refused (held in their link until room was made).
    pub refused: u64,
    /// Packets refused because the table was full, or because they named another port.
    pub link_limit: u64,
    pub misaddressed: u64,
    pub net: NetCounters,
    pub links: LinkCounters,
    pub end_ns: u64,
    pub digest: u64,
}

fn address(node: NodeId) -> Address {
    Address::new(0, node as u16, 1, 0)
}

/// A port: its links, its ring, and what its engine counted.
struct Port {
    table: LinkTable,
    ring: VecDeque<(NodeId, Vec<u8>)>,
    /// Peers with queued (deferred) messages to flush.
    deferred: Vec<Address>,
    refused: u64,
    link_limit: u64,
    misaddressed: u64,
    bad: u64,
}

impl Port {
    fn new(id: NodeId, cfg: &LinkConfig, incarnation: u32, links_max: usize) -> Port {
        Port {
            table: LinkTable::new(
                cfg.clone(),
                address(id),
                CLUSTER,
                incarnation as u64,
                None,
                links_max,
                Instant::ZERO,
            )
            .expect("drawn configuration is valid"),
            ring: VecDeque::new(),
            deferred: Vec::new(),
            refused: 0,
            link_limit: 0,
            misaddressed: 0,
            bad: 0,
        }
    }

    /// The engine's receive path for one datagram.
    fn handle_datagram(&mut self, me: NodeId, now: Instant, bytes: &[u8]) {
        let Ok(p) = Packet::parse(bytes, CLUSTER, None) else {
            self.bad += 1;
            return;
        };
        if !p.header.addressed_to(address(me)) {
            self.misaddressed += 1;
            return;
        }
        match p.header.kind {
            Kind::Data | Kind::Ack => match self.table.handle_packet(now, &p) {
                Ok(()) => {}
                Err(TableRefusal::LinkLimit) => self.link_limit += 1,
                Err(TableRefusal::Bad) => self.bad += 1,
            },
            _ => self.bad += 1,
        }
    }
}

/// A port's way out: deliveries into its bounded ring, packets to the network.
struct Io<'a> {
    ring: &'a mut VecDeque<(NodeId, Vec<u8>)>,
    capacity: usize,
    refused: &'a mut u64,
    out: &'a mut Vec<(NodeId, Vec<u8>)>,
}

impl LinkIo for Io<'_> {
    fn deliver(&mut self, peer: Address, msg: &[u8]) -> bool {
        if self.ring.len() >= self.capacity {
            *self.refused += 1;
            return false;
        }
        self.ring.push_back((peer.site as NodeId, msg.to_vec()));
        true
    }

    fn transmit(&mut self, peer: Address, packet: &[u8]) {
        self.out.push((peer.site as NodeId, packet.to_vec()));
    }
}

/// A link configuration drawn from the seed: small windows and packets sometimes.
fn link_config(rng: &mut Rng) -> LinkConfig {
    let mut cfg = LinkConfig::default();
    if rng.chance(0.5) {
        cfg.packet_bytes_max = 512 + rng.below(1500) as usize;
    }
    if rng.chance(0.5) {
        cfg.window_msgs = 16 + rng.below(100) as u32;
        cfg.recv_buffer_msgs = 32 + rng.below(100) as u32;
        cfg.send_buffer_msgs = cfg.window_msgs.max(cfg.recv_buffer_msgs) + 64;
    }
    cfg.message_bytes_max = 12_000;
    cfg.validate().expect("drawn configuration is valid");
    cfg
}

/// Runs one seed; `Err` describes the first violation, with the replay command.
pub fn run_engine(seed: u64, opts: &EngineSimOptions) -> Result<EngineSimReport, String> {
    let fail = |what: String| {
        format!(
            "engine simulation seed {seed}: {what}\n  replay: cargo run --release -- sim engine --seed {seed}"
        )
    };
    let trace = std::env::var_os("TXCAST_SIM_TRACE").is_some();
    let mut rng = Rng::new(seed);
    let faults = if opts.faults {
        FaultConfig::swarm(&mut rng).with_clogs(&mut Rng::new(seed ^ 0xe061_11e5))
    } else {
        FaultConfig::none()
    };
    let cfg = link_config(&mut rng);
    let n = opts.nodes.max(2);
    // Rings from tiny (every burst fills them) to roomy.
    let ring_capacity = [1, 2, 4, 16, 256][rng.below(5) as usize];
    // The application takes what its ring holds now and then, slowly on some seeds.
    let drain_every_ns = [10_000, 100_000, 2_000_000][rng.below(3) as usize];
    let deferred_share = rng.below(3) as f64 / 2.0;
    // An intruder (node n) on some seeds, once every table is full; then nobody restarts
    // (a restarted table would have room for it, and it could take a real peer's place).
    let intruder = opts.faults && rng.chance(0.25);
    let mut restarts: Vec<(u64, NodeId)> = Vec::new();
    if opts.faults && !intruder && rng.chance(0.3) {
        for _ in 0..1 + rng.below(3) {
            restarts.push((rng.below(opts.safety_ns), rng.below(n as u64) as usize));
        }
        restarts.sort_unstable();
    }
    let restart_count = restarts.len();
    let slots = n + usize::from(intruder);
    let mut net = Network::new(slots, faults.clone(), rng.fork());
    let mut ports: Vec<Port> = (0..n).map(|i| Port::new(i, &cfg, 1, n - 1)).collect();
    let mut stranger = Port::new(n, &cfg, 1, n);
    let mut intruder_sent = 0u32;
    let mut streams = Streams::new(n);
    let mut next_send_at = vec![Instant::ZERO; n];
    let mut next_drain_at = vec![Instant::ZERO; n];
    let mut digest = Digest::default();
    let mut msg = Vec::new();
    let mut out: Vec<(NodeId, Vec<u8>)> = Vec::new();
    let mut now = Instant::ZERO;
    let mut healed = false;
    let (mut dead_refused, mut dead_limit, mut dead_misaddressed) = (0u64, 0u64, 0u64);
    let mut dead_links = LinkCounters::default();
    loop {
        if !healed && now.0 >= opts.safety_ns {
            net.heal();
            healed = true;
        }
        if !healed {
            net.step_partitions();
            net.step_clogs(now);
        }
        while restarts.first().is_some_and(|&(t, _)| t <= now.0) {
            let (_, k) = restarts.remove(0);
            if trace {
                eprintln!("t={} restart node {k}", now.0);
            }
            streams.restart(k);
            let old = std::mem::replace(
                &mut ports[k],
                Port::new(k, &cfg, streams.incarnation[k], n - 1),
            );
            dead_refused += old.refused;
            dead_limit += old.link_limit;
            dead_misaddressed += old.misaddressed;
            dead_links.add(&old.table.counters());
            digest.add_u64(now.0 ^ k as u64);
        }
        while let Some((to, bytes)) = net.pop_due(now) {
            if to < n {
                ports[to].handle_datagram(to, now, &bytes);
            } else {
                stranger.handle_datagram(to, now, &bytes);
            }
        }
        // Workload: each node sends to a random peer that still has messages to get, at once
        // or deferred; now and then a packet for another port is put on the wire.
        for i in 0..n {
            if next_send_at[i] > now {
                continue;
            }
            next_send_at[i] = Instant(now.0 + rng.below(200_000));
            let j = (i + 1 + rng.below(n as u64 - 1) as usize) % n;
            if streams.sent[i][j] >= opts.messages_per_pair {
                continue;
            }
            let len = message_len(&mut rng);
            streams.next_message(i, j, len, &mut msg);
            let p = &mut ports[i];
            let mut io = Io {
                ring: &mut p.ring,
                capacity: ring_capacity,
                refused: &mut p.refused,
                out: &mut out,
            };
            let r = if rng.chance(deferred_share) {
                let r = p.table.queue(now, address(j), &msg);
                if r.is_ok() && !p.deferred.contains(&address(j)) {
                    p.deferred.push(address(j));
                }
                r
            } else {
                p.table.send(now, address(j), &msg, &mut io).map(|_| ())
            };
            match r {
                Ok(()) => streams.sent_one(i, j),
                Err(txcast_proto::link::TableSendError::Full) => {}
                Err(e) => return Err(fail(format!("node {i}: send to {j} refused: {e:?}"))),
            }
            if rng.chance(0.01) {
                // A packet for another port: the receiver must refuse it.
                if let Some(bytes) = out.last().map(|(_, b)| b.clone()) {
                    if let Some(k) = (0..n).find(|&k| k != i && k != j) {
                        net.send(now, i, k, &bytes);
                    }
                }
            }
            for (to, bytes) in out.drain(..) {
                net.send(now, i, to, &bytes);
            }
        }
        // The intruder: once every table is full, it opens a link of its own to everyone.
        if intruder && ports.iter().all(|p| p.table.len() == n - 1) && intruder_sent < 50 {
            let j = rng.below(n as u64) as usize;
            let mut io = Io {
                ring: &mut stranger.ring,
                capacity: ring_capacity,
                refused: &mut stranger.refused,
                out: &mut out,
            };
            let m = [0xEEu8; 24];
            if stranger.table.send(now, address(j), &m, &mut io).is_ok() {
                intruder_sent += 1;
            }
            for (to, bytes) in out.drain(..) {
                net.send(now, n, to, &bytes);
            }
        }
        // The engine's duty cycle at each port: room made, links run, deferred batches
        // flushed.
        for (i, p) in ports.iter_mut().enumerate() {
            let mut io = Io {
                ring: &mut p.ring,
                capacity: ring_capacity,
                refused: &mut p.refused,
                out: &mut out,
            };
            for dest in p.deferred.drain(..) {
                p.table.flush_peer(now, dest, &mut io);
            }
            p.table.run(now, &mut io);
            // Nothing new since: a table that asks to run again at once would keep its
            // engine from ever parking.
            if p.table.next_deadline().is_some_and(|t| t <= now) {
                return Err(fail(format!(
                    "node {i}: after a run its links ask to run again at {:?} (now {})",
                    p.table.next_deadline(),
                    now.0
                )));
            }
            if p.ring.len() > ring_capacity {
                return Err(fail(format!(
                    "node {i}: ring holds {} past its capacity {ring_capacity}",
                    p.ring.len()
                )));
            }
            for (to, bytes) in out.drain(..) {
                net.send(now, i, to, &bytes);
            }
        }
        {
            let mut io = Io {
                ring: &mut stranger.ring,
                capacity: ring_capacity,
                refused: &mut stranger.refused,
                out: &mut out,
            };
            stranger.table.run(now, &mut io);
            for (to, bytes) in out.drain(..) {
                net.send(now, n, to, &bytes);
            }
        }
        // Applications take what their rings hold; the checker reads it.
        for j in 0..n {
            if next_drain_at[j] > now {
                continue;
            }
            next_drain_at[j] = Instant(now.0 + rng.below(drain_every_ns));
            let p = &mut ports[j];
            let took = !p.ring.is_empty();
            while let Some((i, got)) = p.ring.pop_front() {
                if i >= n {
                    return Err(fail(format!("node {j} delivered the intruder's message")));
                }
                streams.delivered(i, j, &got).map_err(&fail)?;
                digest.add_u64(now.0);
                digest.add(&got[..12.min(got.len())]);
            }
            if took && p.table.is_blocked() {
                p.table.room_made();
            }
        }
        let all_sent = streams.all_sent(opts.messages_per_pair);
        let quiet = |p: &Port| p.table.is_idle() && p.ring.is_empty() && p.deferred.is_empty();
        let all_delivered = (0..n).all(|j| {
            (0..n).all(|i| {
                i == j
                    || ports[j]
                        .table
                        .get(address(i))
                        .is_none_or(|l| !l.has_pending_delivery())
            })
        });
        if healed && all_sent && ports.iter().all(quiet) && all_delivered {
            break;
        }
        if now.0 > opts.safety_ns + opts.liveness_ns {
            let missing: Vec<String> = (0..n)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .filter(|&(i, j)| i != j)
                .filter(|&(i, j)| {
                    ports[i].table.get(address(j)).is_some_and(|l| !l.is_idle())
                        || ports[j]
                            .table
                            .get(address(i))
                            .is_some_and(|l| l.has_pending_delivery())
                        || streams.sent[i][j] < opts.messages_per_pair
                })
                .map(|(i, j)| {
                    format!(
                        "{i}->{j}: next {:?}/{}",
                        streams.expected(i, j),
                        streams.sent[i][j]
                    )
                })
                .collect();
            return Err(fail(format!(
                "liveness: not everything delivered after healing: {}",
                missing.join(", ")
            )));
        }
        // Advance virtual time to the next event.
        let mut next = net.next_arrival();
        for p in ports.iter().chain(std::iter::once(&stranger)) {
            next = min_opt(next, p.table.next_deadline());
        }
        for j in 0..n {
            if !ports[j].ring.is_empty() {
                next = min_opt(next, Some(next_drain_at[j]));
            }
        }
        if !all_sent {
            for &t in &next_send_at {
                next = min_opt(next, Some(t));
            }
        }
        if let Some(&(t, _)) = restarts.first() {
            next = min_opt(next, Some(Instant(t)));
        }
        if !healed {
            next = min_opt(next, Some(Instant(opts.safety_ns)));
        }
        now = match next {
            Some(t) if t > now => t,
            Some(_) => Instant(now.0 + 1),
            None => Instant(now.0 + 1_000_000),
        };
    }
    let mut links = dead_links;
    let (mut refused, mut link_limit, mut misaddressed) =
        (dead_refused, dead_limit, dead_misaddressed);
    for p in &ports {
        links.add(&p.table.counters());
        refused += p.refused;
        link_limit += p.link_limit;
        misaddressed += p.misaddressed;
    }
    if intruder_sent > 0 && link_limit == 0 {
        return Err(fail(format!(
            "the intruder sent {intruder_sent} messages into full tables and none was refused"
        )));
    }
    digest.add_u64(net.digest.0);
    Ok(EngineSimReport {
        seed,
        faults,
        ring_capacity,
        restarts: restart_count,
        intruder,
        delivered: streams.delivered,
        refused,
        link_limit,
        misaddressed,
        net: net.counters.clone(),
        links,
        end_ns: now.0,
        digest: digest.0,
    })
}
