//! The ordering protocols over a lossless in-memory network, every protocol and packing mode
//! (the simulator, `txcast sim order`, adds faults).

use super::*;
use crate::vsync::Stability;

fn addr(i: u16) -> Address {
    Address::new(1, i, 1, 0)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Log {
    View(ViewId, Vec<Address>),
    Msg(Address, u64, Vec<u8>),
}

struct Net {
    now: Instant,
    /// Drop every `lossy`-th packet (0: none).
    lossy: usize,
    sent: usize,
    nodes: Vec<Option<Member>>,
    logs: Vec<Vec<Log>>,
    done: Vec<Vec<u64>>,
    wire: VecDeque<(usize, Vec<u8>)>,
    buf: Vec<u8>,
}

impl Net {
    fn new(cfg: &OrderConfig, n: usize) -> Net {
        let mut net = Net {
            now: Instant(1),
            lossy: 0,
            sent: 0,
            nodes: Vec::new(),
            logs: Vec::new(),
            done: Vec::new(),
            wire: VecDeque::new(),
            buf: vec![0u8; 65536],
        };
        net.nodes
            .push(Some(Member::create(cfg.clone(), addr(0), net.now).unwrap()));
        net.logs.push(Vec::new());
        net.done.push(Vec::new());
        for i in 1..n {
            net.nodes.push(Some(
                Member::join(cfg.clone(), addr(i as u16), addr(0), net.now).unwrap(),
            ));
            net.logs.push(Vec::new());
            net.done.push(Vec::new());
            net.settle(200);
        }
        net
    }

    fn drain(&mut self, i: usize) {
        let now = self.now;
        let Some(m) = self.nodes[i].as_mut() else {
            return;
        };
        while let Some((dest, n)) = m.poll_transmit(now, &mut self.buf) {
            let targets: Vec<usize> = match dest {
                Dest::To(a) => vec![a.site as usize],
                Dest::All => m.fanout().map(|a| a.site as usize).collect(),
            };
            for t in targets {
                self.wire.push_back((t, self.buf[..n].to_vec()));
            }
        }
        while let Some(ev) = m.poll_event() {
            if let OrderEvent::SendDone { msg_id } = ev {
                self.done[i].push(msg_id);
            }
        }
        while let Some(l) = m.poll_delivery(|d| match d {
            Delivered::Message(d) => Log::Msg(d.sender, d.msg_id, d.payload.to_vec()),
            Delivered::View(v) => Log::View(v.id, v.members),
        }) {
            self.logs[i].push(l);
        }
    }

    fn step(&mut self) {
        self.now = Instant(self.now.0 + 100_000);
        for i in 0..self.nodes.len() {
            self.drain(i);
        }
        // What is sent while these are handled arrives in the next step (100 µs later).
        let arrived: Vec<(usize, Vec<u8>)> = self.wire.drain(..).collect();
        for (to, b) in arrived {
            self.sent += 1;
            if self.lossy > 0 && self.sent.is_multiple_of(self.lossy) {
                continue;
            }
            if let Some(Some(m)) = self.nodes.get_mut(to) {
                m.handle_message(self.now, &b);
                self.drain(to);
            }
        }
        for i in 0..self.nodes.len() {
            let now = self.now;
            if let Some(m) = self.nodes[i].as_mut() {
                if m.poll_timeout().is_some_and(|t| t <= now) {
                    m.handle_timeout(now);
                }
            }
            self.drain(i);
        }
    }

    fn settle(&mut self, ms: u64) {
        for _ in 0..ms * 10 {
            self.step();
        }
    }

    fn m(&mut self, i: usize) -> &mut Member {
        self.nodes[i].as_mut().unwrap()
    }

    fn msgs(&self, i: usize) -> Vec<(Address, u64)> {
        self.logs[i]
            .iter()
            .filter_map(|l| match l {
                Log::Msg(a, id, _) => Some((*a, *id)),
                _ => None,
            })
            .collect()
    }
}

fn cfg(protocol: Protocol, pack: PackMode, stability: Stability) -> OrderConfig {
    OrderConfig {
        protocol,
        vs: VsConfig {
            window: 64,
            packet_bytes_max: 8192,
            cast_bytes_max: 1024,
            pack,
            stability,
            ..VsConfig::default()
        },
        send_queue_max: 512,
        migrate_every: 64,
        ..OrderConfig::default()
    }
}

fn modes() -> Vec<(Protocol, PackMode, Stability)> {
    let mut v = Vec::new();
    for p in Protocol::ALL {
        for pack in [
            PackMode::Off,
            PackMode::Adaptive {
                delay_max: Duration::from_micros(500),
            },
            PackMode::Fixed {
                delay: Duration::from_millis(1),
            },
        ] {
            for st in [Stability::Piggyback, Stability::Pinwheel] {
                v.push((p, pack, st));
            }
        }
    }
    v
}

#[test]
fn every_protocol_delivers_the_same_order_everywhere() {
    for (p, pack, st) in modes() {
        let mut net = Net::new(&cfg(p, pack, st), 3);
        for round in 0..4u8 {
            let now = net.now;
            for i in 0..3 {
                for k in 0..30u8 {
                    net.m(i).send(now, &[i as u8, round, k]).unwrap();
                }
            }
            net.settle(30);
        }
        net.settle(300);
        let first = net.msgs(0);
        assert_eq!(first.len(), 360, "{p:?} {pack:?} {st:?}");
        for i in 0..3 {
            assert_eq!(net.msgs(i), first, "{p:?} {pack:?} {st:?}: node {i}");
            assert_eq!(net.done[i].len(), 120, "{p:?} {pack:?} {st:?}: node {i}");
            assert!(net.m(i).idle(), "{p:?} {pack:?} {st:?}: node {i} not idle");
        }
        // FIFO per sender, and the payloads are the senders'.
        for l in &net.logs[0] {
            if let Log::Msg(a, id, payload) = l {
                let k = (*id - 1) as u8;
                assert_eq!(payload, &vec![a.site as u8, k / 30, k % 30], "{p:?}");
            }
        }
    }
}

#[test]
fn a_crash_leaves_the_survivors_with_the_same_order() {
    for (p, pack, st) in modes() {
        let mut net = Net::new(&cfg(p, pack, st), 4);
        let now = net.now;
        for i in 0..4 {
            for k in 0..40u8 {
                net.m(i).send(now, &[i as u8, k]).unwrap();
            }
        }
        // A few steps, then the role's first holder crashes mid-stream.
        for _ in 0..3 {
            net.step();
        }
        net.nodes[0] = None;
        net.settle(3000);
        let first = net.msgs(1);
        for i in 1..4 {
            assert_eq!(net.msgs(i), first, "{p:?} {pack:?} {st:?}: node {i}");
            assert_eq!(net.m(i).members().len(), 3, "{p:?} {pack:?} {st:?}");
            // Survivors' messages are all delivered (those not cast before the flush went in
            // the next view).
            assert_eq!(net.done[i].len(), 40, "{p:?} {pack:?} {st:?}: node {i}");
        }
    }
}

#[test]
fn the_sequencer_moves_to_a_much_more_active_member() {
    for p in [Protocol::Dynseq, Protocol::Dynord] {
        let c = cfg(
            p,
            PackMode::Adaptive {
                delay_max: Duration::from_micros(200),
            },
            Stability::Piggyback,
        );
        let mut net = Net::new(&c, 3);
        assert_eq!(net.m(0).holder(), Some(addr(0)));
        for _ in 0..10 {
            let now = net.now;
            for k in 0..40u8 {
                net.m(2).send(now, &[k]).unwrap();
            }
            net.settle(20);
        }
        for i in 0..3 {
            assert_eq!(net.m(i).holder(), Some(addr(2)), "{p:?}: node {i}");
            assert!(net.m(i).counters().passes >= 1);
        }
        assert_eq!(net.msgs(0), net.msgs(1));
        assert_eq!(net.msgs(0).len(), 400);
    }
}

#[test]
fn total_keeps_the_token_with_a_lone_sender() {
    let c = cfg(Protocol::Total, PackMode::Off, Stability::Piggyback);
    let mut net = Net::new(&c, 3);
    let now = net.now;
    for k in 0..50u8 {
        net.m(1).send(now, &[k]).unwrap();
    }
    net.settle(50);
    let passes = net.m(0).counters().passes;
    assert_eq!(passes, 1, "one pass to the sender");
    let now = net.now;
    for k in 0..50u8 {
        net.m(1).send(now, &[k]).unwrap();
    }
    net.settle(50);
    assert_eq!(net.m(0).counters().passes, 1, "the token stayed");
    assert_eq!(net.msgs(2).len(), 100);
}

#[test]
fn bursts_all_to_all_finish_round_after_round() {
    for p in Protocol::ALL {
        for pack in [
            PackMode::Off,
            PackMode::Adaptive {
                delay_max: Duration::from_millis(1),
            },
        ] {
            let mut c = cfg(p, pack, Stability::Piggyback);
            c.vs.window = 256;
            c.send_queue_max = 4096;
            c.submit_window = 256;
            let mut net = Net::new(&c, 3);
            net.lossy = 37;
            for round in 1..=5u64 {
                let now = net.now;
                for i in 0..3 {
                    for _ in 0..300 {
                        net.m(i).send(now, &[0u8; 64]).unwrap();
                    }
                }
                let mut steps = 0;
                while net.msgs(0).len() < (round * 900) as usize {
                    net.step();
                    steps += 1;
                    assert!(
                        steps < 20_000,
                        "{p:?} {pack:?}: round {round} stuck at {} of {}: {:?}",
                        net.msgs(0).len(),
                        round * 900,
                        net.m(0)
                    );
                }
            }
        }
    }
}

#[test]
fn deliveries_the_application_does_not_take_hold_the_stack_back() {
    let c = cfg(
        Protocol::Totem,
        PackMode::Adaptive {
            delay_max: Duration::from_micros(200),
        },
        Stability::Piggyback,
    );
    let mut now = Instant(1);
    let mut m = Member::create(c, addr(0), now).unwrap();
    let mut sent = 0u64;
    // A group of one that never takes its deliveries: the ready queue stops at its bound.
    while sent < (DELIVERIES_MAX as u64) + 500 {
        match m.send(now, b"x") {
            Ok(_) => sent += 1,
            Err(OrderError::Full) => {
                now = Instant(now.0 + 1_000_000);
                m.handle_timeout(now);
                let mut buf = vec![0u8; 65536];
                while m.poll_transmit(now, &mut buf).is_some() {}
                if m.sends_pending() >= m.config().send_queue_max {
                    break;
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(m.ready.len() <= DELIVERIES_MAX);
    assert!(m.sends_pending() <= m.config().send_queue_max);
    // Taking them lets the rest through, in order.
    let mut got = 0u64;
    let mut last = 0;
    for _ in 0..100 {
        while let Some(id) = m.poll_delivery(|d| match d {
            Delivered::Message(d) => Some(d.msg_id),
            Delivered::View(_) => None,
        }) {
            if let Some(id) = id {
                assert_eq!(id, last + 1);
                last = id;
                got += 1;
            }
        }
        now = Instant(now.0 + 1_000_000);
        if m.poll_timeout().is_some_and(|t| t <= now) {
            m.handle_timeout(now);
        }
    }
    assert!(
        got > DELIVERIES_MAX as u64,
        "got {got} of {sent}, pending {}",
        m.sends_pending()
    );
    assert_eq!(got, sent - m.sends_pending() as u64);
}

/// Adaptive packing, one member sending one message a round (burst m=1): each round takes a
/// few network hops, not `delay_max` (the stack's casts, the sequencer's included, went out
/// only once the previous one was reported stable, and members with nothing to send
/// reported a heartbeat interval late); a burst still leaves in a few packed messages.
#[test]
fn adaptive_packing_sends_a_lone_message_at_once_and_packs_a_burst() {
    let delay_max = Duration::from_millis(2);
    for p in [Protocol::Dynseq, Protocol::Dynord] {
        let mut c = cfg(p, PackMode::Adaptive { delay_max }, Stability::Piggyback);
        // Heartbeats far apart: they must not be what lets a cast go.
        c.vs.heartbeat_interval = Duration::from_secs(1);
        c.vs.silence_timeout = Duration::from_secs(5);
        c.vs.window = 256;
        let mut net = Net::new(&c, 3);
        let all = |net: &Net, k: usize| (0..3).all(|i| net.msgs(i).len() >= k);
        for round in 1..=20usize {
            let now = net.now;
            net.m(1).send(now, b"lone").unwrap();
            let mut steps = 0;
            while !all(&net, round) {
                net.step();
                steps += 1;
                // A step is 100 µs: `delay_max` is 20 of them.
                assert!(steps <= 5, "{p:?}: round {round} took {steps} steps");
            }
        }
        let data =
            |net: &mut Net| -> u64 { (0..3).map(|i| net.m(i).vs_counters().data_sent).sum() };
        let records =
            |net: &mut Net| -> u64 { (0..3).map(|i| net.m(i).vs_counters().records_sent).sum() };
        let (d0, r0) = (data(&mut net), records(&mut net));
        let now = net.now;
        for k in 0..100u8 {
            net.m(1).send(now, &[k]).unwrap();
        }
        let mut steps = 0;
        while !all(&net, 120) {
            net.step();
            steps += 1;
            assert!(steps < 200, "{p:?}: the burst is stuck");
        }
        let (d, r) = (data(&mut net) - d0, records(&mut net) - r0);
        assert!(r >= 100, "{p:?}: {r} records");
        assert!(
            d <= 12,
            "{p:?}: {r} records in {d} data messages: not packed"
        );
        for i in 1..3 {
            assert_eq!(net.msgs(i), net.msgs(0), "{p:?}: node {i}");
        }
    }
}
