//! Unit tests of the virtually synchronous stack over a lossless in-memory network (the
//! simulator, `txcast sim vs`, covers faults).

use super::*;
use crate::pack::PackMode;
use std::collections::VecDeque;

fn addr(i: u16) -> Address {
    Address::new(1, i, 1, 0)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Log {
    View(ViewId, Vec<Address>),
    Cast(Address, u64, Vec<u8>),
    Left,
    Expelled,
    Blocked(usize, usize),
}

struct Net {
    now: Instant,
    nodes: Vec<Option<Vs>>,
    logs: Vec<Vec<Log>>,
    /// Packets in flight: (to, bytes).
    wire: VecDeque<(usize, Vec<u8>)>,
    /// Each node's casts to make during a flush (the layer above's share).
    buf: Vec<u8>,
    /// A node whose packets, both ways, are lost.
    cut: Option<usize>,
}

impl Net {
    fn new(cfg: &VsConfig, n: usize) -> Net {
        let mut net = Net {
            now: Instant(1),
            nodes: Vec::new(),
            logs: Vec::new(),
            wire: VecDeque::new(),
            buf: vec![0u8; 65536],
            cut: None,
        };
        net.nodes
            .push(Some(Vs::create(cfg.clone(), addr(0), net.now).unwrap()));
        net.logs.push(Vec::new());
        for i in 1..n {
            net.nodes.push(Some(
                Vs::join(cfg.clone(), addr(i as u16), addr(0), net.now).unwrap(),
            ));
            net.logs.push(Vec::new());
            net.settle(200);
        }
        net
    }

    fn drain(&mut self, i: usize) {
        let now = self.now;
        let Some(vs) = self.nodes[i].as_mut() else {
            return;
        };
        loop {
            let mut flushed = false;
            while let Some(l) = vs.poll_upcall(|u| match u {
                Upcall::Cast {
                    sender,
                    seq,
                    payload,
                } => Some(Log::Cast(sender, seq, payload.to_vec())),
                Upcall::View(v) => Some(Log::View(v.id, v.members)),
                Upcall::Flush => None,
                Upcall::Left => Some(Log::Left),
                Upcall::Expelled => Some(Log::Expelled),
                Upcall::Blocked { reachable, needed } => Some(Log::Blocked(reachable, needed)),
                _ => None,
            }) {
                match l {
                    Some(l) => self.logs[i].push(l),
                    None => flushed = true,
                }
            }
            if flushed {
                vs.flush_ready(now);
            }
            let mut sent = false;
            while let Some((dest, n)) = vs.poll_transmit(now, &mut self.buf) {
                sent = true;
                let targets: Vec<usize> = match dest {
                    Dest::To(a) => vec![a.site as usize],
                    Dest::All => vs.fanout().map(|a| a.site as usize).collect(),
                };
                for t in targets {
                    if self.cut.is_none_or(|c| c != i && c != t) {
                        self.wire.push_back((t, self.buf[..n].to_vec()));
                    }
                }
            }
            if !sent && !vs.has_upcall() {
                break;
            }
        }
    }

    /// Runs for `ms` milliseconds of virtual time, 100 µs a step.
    fn settle(&mut self, ms: u64) {
        self.steps(ms * 10);
    }

    /// Runs `n` steps of 100 µs: what is sent in a step arrives in it.
    fn steps(&mut self, n: u64) {
        for _ in 0..n {
            self.now = Instant(self.now.0 + 100_000);
            for i in 0..self.nodes.len() {
                self.drain(i);
            }
            while let Some((to, b)) = self.wire.pop_front() {
                if let Some(Some(vs)) = self.nodes.get_mut(to) {
                    vs.handle_message(self.now, &b);
                    self.drain(to);
                }
            }
            for i in 0..self.nodes.len() {
                let now = self.now;
                if let Some(vs) = self.nodes[i].as_mut() {
                    if vs.poll_timeout().is_some_and(|t| t <= now) {
                        vs.handle_timeout(now);
                    }
                }
                self.drain(i);
            }
        }
    }

    fn vs(&mut self, i: usize) -> &mut Vs {
        self.nodes[i].as_mut().unwrap()
    }

    /// Casts delivered at `i` in view `v`.
    fn casts_in(&self, i: usize, v: ViewId) -> Vec<(Address, u64, Vec<u8>)> {
        let mut cur = None;
        let mut out = Vec::new();
        for l in &self.logs[i] {
            match l {
                Log::View(id, _) => cur = Some(*id),
                Log::Cast(a, s, p) if cur == Some(v) => out.push((*a, *s, p.clone())),
                _ => {}
            }
        }
        out.sort();
        out
    }
}

fn cfg() -> VsConfig {
    VsConfig {
        window: 64,
        packet_bytes_max: 8192,
        cast_bytes_max: 1024,
        ..VsConfig::default()
    }
}

#[test]
fn members_join_and_casts_reach_everyone_in_order() {
    let mut net = Net::new(&cfg(), 3);
    for i in 0..3 {
        assert_eq!(net.vs(i).state(), VsState::Normal, "node {i}");
        assert_eq!(net.vs(i).members().len(), 3, "node {i}");
    }
    let now = net.now;
    for k in 0..20u8 {
        for i in 0..3 {
            net.vs(i).cast(now, &[i as u8, k]).unwrap();
        }
    }
    net.settle(50);
    let v = net.vs(0).view();
    for i in 0..3 {
        let got = net.casts_in(i, v);
        assert_eq!(got.len(), 60, "node {i}");
        for (a, s, p) in got {
            assert_eq!(p, vec![a.site as u8, (s - 1) as u8]);
        }
    }
    // Everything is stable after the reports go round.
    net.settle(200);
    for i in 0..3 {
        assert_eq!(net.vs(i).unstable(), 0, "node {i}");
        assert_eq!(net.vs(i).stable_vector(), vec![20, 20, 20]);
    }
}

#[test]
fn a_crash_makes_a_new_view_with_the_same_casts_at_the_survivors() {
    for stability in [Stability::Piggyback, Stability::Pinwheel] {
        let cfg = VsConfig {
            stability,
            pack: PackMode::Off,
            ..cfg()
        };
        let mut net = Net::new(&cfg, 4);
        let v1 = net.vs(0).view();
        let now = net.now;
        for k in 0..10u8 {
            for i in 0..4 {
                net.vs(i).cast(now, &[i as u8, k]).unwrap();
            }
        }
        // Node 3's casts reach only node 1 before it crashes.
        for _ in 0..8 {
            net.drain(3);
        }
        let from3: Vec<(usize, Vec<u8>)> = net.wire.drain(..).collect();
        for (to, b) in from3 {
            let is3 = msg::parse(&b).is_ok_and(|(h, _)| h.from == addr(3));
            if !is3 || to == 1 {
                net.wire.push_back((to, b));
            }
        }
        net.nodes[3] = None;
        net.settle(2000);
        let v2 = net.vs(0).view();
        assert!(v2 > v1, "{stability:?}: no new view");
        let base = net.casts_in(0, v1);
        assert_eq!(
            base.len(),
            40,
            "{stability:?}: node 3's casts held by node 1 are flushed"
        );
        for i in 0..3 {
            assert_eq!(net.vs(i).view(), v2);
            assert_eq!(net.vs(i).members(), &[addr(0), addr(1), addr(2)]);
            assert_eq!(net.casts_in(i, v1), base, "{stability:?}: node {i}");
        }
    }
}

#[test]
fn leave_and_rejoin() {
    let mut net = Net::new(&cfg(), 3);
    let now = net.now;
    net.vs(2).leave(now).unwrap();
    net.settle(300);
    assert_eq!(net.vs(2).state(), VsState::Left);
    assert_eq!(net.vs(0).members(), &[addr(0), addr(1)]);
    assert!(net.logs[2].contains(&Log::Left));
    // The coordinator itself leaves.
    let now = net.now;
    net.vs(0).leave(now).unwrap();
    net.settle(300);
    assert_eq!(net.vs(0).state(), VsState::Left);
    assert_eq!(net.vs(1).members(), &[addr(1)]);
}

#[test]
fn malformed_messages_are_dropped_and_counted() {
    let mut net = Net::new(&cfg(), 2);
    let now = net.now;
    let vs = net.vs(1);
    vs.handle_message(now, &[0x56, 99, 0, 0]);
    vs.handle_message(now, &[1, 2, 3]);
    vs.handle_message(now, &[]);
    assert_eq!(vs.counters().dropped_bad, 3);
    assert_eq!(vs.state(), VsState::Normal);
}

#[test]
fn a_proposal_keeps_its_coordinator_on_the_wire() {
    let p = Proposal {
        coordinator: addr(2),
        members: vec![addr(2), addr(1)],
        cut: vec![7, 9],
    };
    let h = msg::Header {
        group: 1,
        view: ViewId {
            number: 3,
            coordinator: addr(0),
        },
        from: addr(1),
    };
    let ballot = Ballot {
        number: 4,
        coordinator: addr(1),
    };
    let mut b = vec![0u8; CONTROL_BYTES_MAX];
    let m = msg::VsMsg::FlushOk {
        ballot,
        frozen: vec![1; msg::MEMBERS_MAX],
        accepted: Some((
            ballot,
            Proposal {
                coordinator: addr(2),
                members: vec![addr(2); msg::MEMBERS_MAX],
                cut: vec![u64::MAX; msg::MEMBERS_MAX],
            },
        )),
    };
    assert!(
        msg::write(&mut b, &h, &m).is_some(),
        "the largest control message fits CONTROL_BYTES_MAX"
    );
    let n = msg::write(
        &mut b,
        &h,
        &msg::VsMsg::Commit {
            ballot,
            proposal: p.clone(),
        },
    )
    .unwrap();
    let (h2, m2) = msg::parse(&b[..n]).unwrap();
    assert_eq!(h2, h);
    assert_eq!(
        m2,
        msg::VsMsg::Commit {
            ballot,
            proposal: p
        }
    );
}

/// Paxos: an acceptor that promised a higher ballot while it waited for the casts of a lower
/// ballot's proposal must not accept that proposal afterwards (its `FlushOk` to the higher
/// ballot said it had accepted nothing, so that round may propose something else).
#[test]
fn no_accept_of_a_lower_ballot_after_a_higher_promise() {
    let mut net = Net::new(&cfg(), 3);
    let v = net.vs(0).view();
    let now = net.now;
    // Node 0 casts; node 1 does not get it yet.
    net.vs(0).cast(now, b"x").unwrap();
    let mut data = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Some((_, n)) = net.vs(0).poll_transmit(now, &mut buf) {
        data.push(buf[..n].to_vec());
    }
    let msg_from = |from: u16, m: &msg::VsMsg<'_>| {
        let mut b = vec![0u8; 4096];
        let h = msg::Header {
            group: 1,
            view: v,
            from: addr(from),
        };
        let n = msg::write(&mut b, &h, m).unwrap();
        b.truncate(n);
        b
    };
    let b1 = Ballot {
        number: 1,
        coordinator: addr(0),
    };
    let b2 = Ballot {
        number: 2,
        coordinator: addr(2),
    };
    let accepts = |vs: &mut Vs, buf: &mut [u8]| {
        let mut out = Vec::new();
        while let Some((_, n)) = vs.poll_transmit(now, buf) {
            if let Ok((_, msg::VsMsg::Accept { ballot })) = msg::parse(&buf[..n]) {
                out.push(ballot);
            }
        }
        out
    };
    let node1 = net.nodes[1].as_mut().unwrap();
    node1.handle_message(now, &msg_from(0, &msg::VsMsg::Flush { ballot: b1 }));
    while node1.poll_upcall(|_| ()).is_some() {}
    node1.flush_ready(now);
    let proposal = Proposal {
        coordinator: addr(0),
        members: vec![addr(0), addr(1), addr(2)],
        cut: vec![1, 0, 0],
    };
    node1.handle_message(
        now,
        &msg_from(
            0,
            &msg::VsMsg::Propose {
                ballot: b1,
                proposal,
            },
        ),
    );
    assert!(accepts(node1, &mut buf).is_empty(), "cast 1 is missing");
    node1.handle_message(now, &msg_from(2, &msg::VsMsg::Flush { ballot: b2 }));
    for d in &data {
        node1.handle_message(now, d);
    }
    assert_eq!(accepts(node1, &mut buf), Vec::<Ballot>::new());
}

/// Adaptive packing: a member that casts once a round (burst m=1) finds its previous cast
/// acknowledged at once by members with nothing of their own to send (not a heartbeat
/// interval later), so its next lone cast goes out at once rather than `delay_max` later;
/// a burst still leaves packed while its first message is in flight.
#[test]
fn adaptive_packing_sends_a_lone_cast_at_once_and_packs_a_burst() {
    // Heartbeats far apart: the reports that matter here are not theirs.
    let cfg = VsConfig {
        heartbeat_interval: Duration::from_secs(1),
        silence_timeout: Duration::from_secs(5),
        ..cfg()
    };
    let mut net = Net::new(&cfg, 3);
    assert!(
        matches!(net.vs(0).config().pack, PackMode::Adaptive { delay_max } if !delay_max.is_zero())
    );
    net.settle(200);
    let v = net.vs(0).view();
    let heartbeats: Vec<u64> = (0..3).map(|i| net.vs(i).counters().heartbeats).collect();
    let data0 = net.vs(0).counters().data_sent;
    for round in 0..5u64 {
        let now = net.now;
        net.vs(0).cast(now, b"lone").unwrap();
        net.drain(0);
        assert_eq!(
            net.vs(0).counters().data_sent,
            data0 + round + 1,
            "round {round}: the lone cast went out at once"
        );
        // Before the others answer, it is in flight: a cast made now would wait.
        assert_eq!(net.vs(0).unstable(), 1);
        net.steps(1);
        assert_eq!(
            net.vs(0).unstable(),
            0,
            "round {round}: acknowledged at once"
        );
    }
    for i in 1..3 {
        assert_eq!(net.casts_in(i, v).len(), 5, "node {i}");
        assert!(net.vs(i).counters().acks >= 5, "node {i} acknowledged");
    }
    let now_hb: Vec<u64> = (0..3).map(|i| net.vs(i).counters().heartbeats).collect();
    assert_eq!(now_hb, heartbeats, "no heartbeat was needed");

    // A burst: the first cast goes, the rest wait while it is in flight (no time passes),
    // then leave together once it is acknowledged.
    let (d, r) = (
        net.vs(0).counters().data_sent,
        net.vs(0).counters().records_sent,
    );
    let now = net.now;
    for k in 0..20u8 {
        net.vs(0).cast(now, &[k]).unwrap();
        net.drain(0);
    }
    assert_eq!(net.vs(0).counters().data_sent, d + 1, "the rest are held");
    // The acknowledgement of the first brings the rest out (within the step).
    net.steps(1);
    assert_eq!(
        net.vs(0).counters().data_sent,
        d + 2,
        "19 casts in one message"
    );
    assert_eq!(net.vs(0).counters().records_sent, r + 20);
    net.steps(2);
    for i in 1..3 {
        assert_eq!(net.casts_in(i, v).len(), 25, "node {i}");
    }
    assert_eq!(net.vs(0).unstable(), 0);
}

/// Members whose casts are held by the packer acknowledge what they receive too: two
/// members casting bursts at once each wait for the other's report, and with reports only
/// on data both waited out `delay_max`.
#[test]
fn members_that_both_hold_casts_acknowledge_each_other() {
    let mut net = Net::new(&cfg(), 3);
    net.settle(200);
    let v = net.vs(0).view();
    let now = net.now;
    for i in 0..3 {
        for k in 0..10u8 {
            net.vs(i).cast(now, &[i as u8, k]).unwrap();
            net.drain(i);
        }
        assert_eq!(net.vs(i).unstable(), 10);
    }
    // Well within `delay_max` (1 ms): every burst is through.
    net.steps(3);
    for i in 0..3 {
        assert_eq!(net.casts_in(i, v).len(), 30, "node {i}");
        assert!(net.vs(i).counters().data_sent >= 2, "node {i}");
    }
}

/// Without adaptive packing nobody waits for reports: none are sent but on data and
/// heartbeats, as before.
#[test]
fn no_prompt_reports_without_adaptive_packing() {
    for pack in [
        PackMode::Off,
        PackMode::Fixed {
            delay: Duration::from_millis(1),
        },
    ] {
        let mut net = Net::new(&VsConfig { pack, ..cfg() }, 3);
        let now = net.now;
        net.vs(0).cast(now, b"x").unwrap();
        net.settle(20);
        for i in 0..3 {
            assert_eq!(net.vs(i).counters().acks, 0, "{pack:?} node {i}");
        }
    }
}

/// A member cut off from the other two cannot reach a majority: it says once that it is
/// blocked, and keeps saying so through `blocked`; the majority installs a view without it
/// and is never blocked. Healed, the cut-off member learns it was left out.
#[test]
fn a_member_cut_off_from_a_majority_says_it_is_blocked() {
    let cfg = VsConfig::default();
    let mut net = Net::new(&cfg, 3);
    net.cut = Some(2);
    let enough = cfg.silence_timeout + cfg.flush_timeout * (BLOCKED_AFTER_FLUSH_TIMEOUTS + 2);
    net.settle(enough.as_millis() as u64);
    let blocked: Vec<&Log> = net.logs[2]
        .iter()
        .filter(|l| matches!(l, Log::Blocked(..)))
        .collect();
    assert_eq!(blocked, vec![&Log::Blocked(1, 2)]);
    let now = net.now;
    assert!(net.vs(2).blocked(now));
    for i in 0..2 {
        assert!(!net.vs(i).blocked(now));
        assert!(!net.logs[i].iter().any(|l| matches!(l, Log::Blocked(..))));
        assert_eq!(net.vs(i).members(), &[addr(0), addr(1)]);
    }
    net.cut = None;
    net.settle(2 * cfg.flush_timeout.as_millis() as u64 + 500);
    assert!(net.logs[2].contains(&Log::Expelled), "{:?}", net.logs[2]);
}

/// A member cut off while the group goes through more views than anyone keeps commits for
/// cannot learn the commit that left it out. Once it can talk again, a member of the current
/// view tells it that it is gone, and it takes itself out rather than flush alone for good.
#[test]
fn a_member_left_behind_by_more_views_than_kept_is_told_it_is_gone() {
    let cfg = VsConfig::default();
    let mut net = Net::new(&cfg, 3);
    net.cut = Some(2);
    let enough = cfg.silence_timeout + cfg.flush_timeout * 3;
    net.settle(enough.as_millis() as u64);
    assert_eq!(net.vs(0).members(), &[addr(0), addr(1)]);
    // More joins, each a view change, than the commits kept.
    for i in 3..3 + COMMITS_KEPT as u16 + 1 {
        let now = net.now;
        net.nodes
            .push(Some(Vs::join(cfg.clone(), addr(i), addr(0), now).unwrap()));
        net.logs.push(Vec::new());
        net.settle(300);
        assert!(net.vs(0).members().contains(&addr(i)), "{i} joined");
    }
    assert!(!net.logs[2].contains(&Log::Expelled));
    net.cut = None;
    net.settle(3 * cfg.flush_timeout.as_millis() as u64);
    assert!(net.logs[2].contains(&Log::Expelled), "{:?}", net.logs[2]);
    assert_eq!(net.vs(2).counters().gone, 1);
    assert_eq!(net.vs(2).state(), VsState::Expelled);
}

/// A group of one has nobody to report what it received: every cast it delivered, the last
/// one too, is stable once handed up, whichever stability the group uses.
#[test]
fn a_group_of_one_delivers_its_casts_and_ends_with_nothing_unstable() {
    for stability in [Stability::Piggyback, Stability::Pinwheel] {
        let cfg = VsConfig {
            stability,
            window: 4,
            ..cfg()
        };
        let mut net = Net::new(&cfg, 1);
        let v = net.vs(0).view();
        for k in 0..10u8 {
            let now = net.now;
            net.vs(0).cast(now, &[k]).unwrap();
            net.settle(5);
        }
        net.settle(200);
        let got = net.casts_in(0, v);
        assert_eq!(got.len(), 10, "{stability:?}");
        assert_eq!(net.vs(0).unstable(), 0, "{stability:?}");
        assert_eq!(net.vs(0).stable_vector(), vec![10], "{stability:?}");
    }
}

/// Found by the `vsync` fuzz target (release build with overflow checks): a joining process
/// given a Commit for the view numbered `u64::MAX` overflowed naming the view after it. No view
/// can follow that one (nor, for the same reason, the one it would install after `u64::MAX - 1`), so
/// such a Commit is ignored and the process keeps joining.
#[test]
fn a_commit_of_the_last_view_number_to_a_joiner_is_ignored() {
    let now = Instant(1_000_000_000);
    let mut vs = Vs::join(cfg(), addr(1), addr(0), now).unwrap();
    let commit = |number: u64| {
        let h = msg::Header {
            group: 1,
            view: ViewId {
                number,
                coordinator: addr(0),
            },
            from: addr(0),
        };
        let m = msg::VsMsg::Commit {
            ballot: Ballot {
                number: 1,
                coordinator: addr(0),
            },
            proposal: Proposal {
                coordinator: addr(0),
                members: vec![addr(0), addr(1)],
                cut: vec![0],
            },
        };
        let mut b = vec![0u8; 4096];
        let n = msg::write(&mut b, &h, &m).unwrap();
        b.truncate(n);
        b
    };
    // Nor the one before: the view it would install could have no successor.
    for number in [u64::MAX, u64::MAX - 1] {
        vs.handle_message(now, &commit(number));
        assert_eq!(vs.state(), VsState::Joining);
    }
    vs.handle_message(now, &commit(u64::MAX - 2));
    assert_eq!(vs.state(), VsState::Normal);
    assert_eq!(vs.view().number, u64::MAX - 1);
}

/// A member at the last view number (`u64::MAX`) has no next view: a flush and commit there
/// are refused and counted, and the member stays in its view (naming the next view must not
/// overflow).
#[test]
fn members_at_the_last_view_number_do_not_change_views() {
    let now = Instant(1_000_000_000);
    let mut vs = Vs::join(cfg(), addr(1), addr(0), now).unwrap();
    let ballot = |number| Ballot {
        number,
        coordinator: addr(0),
    };
    let packet = |view: u64, m: msg::VsMsg<'_>| {
        let h = msg::Header {
            group: 1,
            view: ViewId {
                number: view,
                coordinator: addr(0),
            },
            from: addr(0),
        };
        let mut b = vec![0u8; 4096];
        let n = msg::write(&mut b, &h, &m).unwrap();
        b.truncate(n);
        b
    };
    let commit = |view: u64, b: u64| {
        packet(
            view,
            msg::VsMsg::Commit {
                ballot: ballot(b),
                proposal: Proposal {
                    coordinator: addr(0),
                    members: vec![addr(0), addr(1)],
                    cut: vec![0; if view == u64::MAX - 2 { 1 } else { 2 }],
                },
            },
        )
    };
    // Joins into view MAX - 1 (the highest a joiner takes).
    vs.handle_message(now, &commit(u64::MAX - 2, 1));
    assert_eq!(vs.view().number, u64::MAX - 1);
    // One flush and commit there: view MAX.
    let change = |vs: &mut Vs, view: u64, b: u64| {
        vs.handle_message(now, &packet(view, msg::VsMsg::Flush { ballot: ballot(b) }));
        while vs.poll_upcall(|_| ()).is_some() {}
        vs.flush_ready(now);
        vs.handle_message(now, &commit(view, b));
        while vs.poll_upcall(|_| ()).is_some() {}
    };
    change(&mut vs, u64::MAX - 1, 2);
    assert_eq!(vs.view().number, u64::MAX);
    let bad = vs.counters().dropped_bad;
    change(&mut vs, u64::MAX, 3);
    assert_eq!(vs.view().number, u64::MAX);
    assert_eq!(vs.counters().dropped_bad, bad + 1);
    assert_eq!(vs.state(), VsState::Flushing);
}

/// A NAK for casts at the end of the sequence space asks for nothing this member holds: it
/// is answered with nothing (bounding the answer's span must not overflow).
#[test]
fn a_nak_at_the_end_of_the_sequence_space_is_harmless() {
    let mut net = Net::new(&cfg(), 2);
    let view = net.vs(0).view();
    let h = msg::Header {
        group: 1,
        view,
        from: addr(1),
    };
    let mut b = vec![0u8; 4096];
    let n = msg::write(
        &mut b,
        &h,
        &msg::VsMsg::Nak {
            stream: addr(0),
            from: u64::MAX - 1,
            to: u64::MAX,
        },
    )
    .unwrap();
    let now = net.now;
    net.vs(0).handle_message(now, &b[..n]);
    assert_eq!(net.vs(0).counters().naks_received, 1);
    net.settle(10);
    assert_eq!(net.vs(0).state(), VsState::Normal);
    assert_eq!(net.vs(1).state(), VsState::Normal);
}
