//! Groups through the public API, over real UDP sockets on loopback (ports of several sites
//! in one process; the cross-process tests live with the `txcast` binary).

use std::time::Duration;
use txcast_port::{GroupRecord, Port, PortConfig};
use txcast_proto::group::{GroupConfig, Method, MinMembers};
use txcast_proto::Address;

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn addr(instance: u16, site: u16) -> Address {
    Address::new(instance, site, 2, 0)
}

fn cfg(group: u32, r: u8, method: Method) -> GroupConfig {
    GroupConfig {
        group,
        resilience: r,
        method,
        ..GroupConfig::default()
    }
}

/// Reads until `n` messages arrived; returns (sender, payload) in delivery order.
fn messages(g: &txcast_port::Group, n: usize) -> Vec<(Address, Vec<u8>)> {
    let mut out = Vec::new();
    while out.len() < n {
        let d = g.receive(WAIT).expect("delivery");
        if let GroupRecord::Message { payload, .. } = d.what {
            out.push((d.sender, payload));
        }
    }
    out
}

fn total_order(method: Method, r: u8, instance: u16) {
    let ports: Vec<Port> = (0..3)
        .map(|s| Port::open(addr(instance, s), PortConfig::default()).unwrap())
        .collect();
    let a = ports[0].create_group(cfg(7, r, method)).unwrap();
    let b = ports[1]
        .join_group(cfg(7, r, method), ports[0].address(), WAIT)
        .unwrap();
    let c = ports[2]
        .join_group(cfg(7, r, method), ports[1].address(), WAIT)
        .unwrap();
    assert_eq!(c.info().members.len(), 3);
    let big = vec![7u8; 3000];
    for i in 0..20u8 {
        for (k, g) in [&a, &b, &c].iter().enumerate() {
            let mut m = vec![k as u8, i];
            if i % 5 == 0 {
                m.extend_from_slice(&big);
            }
            g.send_async(&m).unwrap();
        }
    }
    for g in [&a, &b, &c] {
        g.wait_sent(20, WAIT).unwrap();
    }
    let la = messages(&a, 60);
    let lb = messages(&b, 60);
    let lc = messages(&c, 60);
    assert_eq!(la, lb);
    assert_eq!(la, lc);
    // FIFO per sender.
    for k in 0..3u8 {
        let seq: Vec<u8> = la.iter().filter(|m| m.1[0] == k).map(|m| m.1[1]).collect();
        assert_eq!(seq, (0..20).collect::<Vec<_>>());
    }
    let info = a.info();
    assert_eq!(info.members.len(), 3);
    assert!(info.counters.ordered >= 60, "{info:?}");
}

#[test]
fn pb_group_of_three_delivers_one_order_everywhere() {
    total_order(Method::Pb, 0, 21);
}

#[test]
fn bb_group_with_resilience_one_delivers_one_order_everywhere() {
    total_order(Method::Bb, 1, 22);
}

#[test]
fn members_see_joins_and_leaves_in_the_stream_and_a_crash_is_rebuilt() {
    let ports: Vec<Port> = (0..4)
        .map(|s| Port::open(addr(23, s), PortConfig::default()).unwrap())
        .collect();
    let fast = GroupConfig {
        group: 9,
        silence_timeout: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(20),
        probe_interval: Duration::from_millis(40),
        auto_reset: Some(MinMembers::Majority),
        ..GroupConfig::default()
    };
    let a = ports[0].create_group(fast.clone()).unwrap();
    let b = ports[1]
        .join_group(fast.clone(), ports[0].address(), WAIT)
        .unwrap();
    let c = ports[2]
        .join_group(fast.clone(), ports[0].address(), WAIT)
        .unwrap();
    let d = ports[3]
        .join_group(fast.clone(), ports[0].address(), WAIT)
        .unwrap();
    d.leave(WAIT).unwrap();
    b.send(b"before", WAIT).unwrap();
    // The sequencer's process "crashes": its group stops answering.
    drop(a);
    c.send_async(b"after").unwrap();
    c.wait_sent(1, WAIT).unwrap();
    let stream = |g: &txcast_port::Group| {
        let mut v = Vec::new();
        loop {
            let r = g.receive(WAIT).unwrap();
            let end =
                matches!(&r.what, GroupRecord::Message { payload, .. } if payload == b"after");
            v.push(r.what);
            if end {
                return v;
            }
        }
    };
    let sb = stream(&b);
    let sc = stream(&c);
    // c joined after b: compare from c's own join on.
    let from = sb
        .iter()
        .position(|w| *w == GroupRecord::Joined(ports[2].address()))
        .unwrap();
    assert_eq!(sb[from..], sc[..]);
    assert!(sc.contains(&GroupRecord::Left(ports[3].address())));
    let rebuilt = sc
        .iter()
        .find_map(|w| match w {
            GroupRecord::Rebuilt {
                members, removed, ..
            } => Some((members.clone(), removed.clone())),
            _ => None,
        })
        .expect("a rebuild record");
    assert_eq!(rebuilt.0, vec![ports[1].address(), ports[2].address()]);
    assert_eq!(rebuilt.1, vec![ports[0].address()]);
    assert_eq!(b.info().sequencer, c.info().sequencer);
}

/// Invoker mode (no engine thread): the members are driven only by the application's own
/// calls, here from a thread per member waiting at once, so that one thread's read often takes
/// in what another waits for while that one sleeps on the sockets.
#[test]
fn invoker_engine_members_on_threads_deliver_one_order_everywhere() {
    use txcast_port::{Engine, EngineConfig, EngineMode};
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        ..EngineConfig::default()
    })
    .unwrap();
    let ports: Vec<Port> = (0..3)
        .map(|s| Port::open_on(&engine, addr(24, s), PortConfig::default()).unwrap())
        .collect();
    let a = ports[0].create_group(cfg(11, 0, Method::Pb)).unwrap();
    let b = ports[1]
        .join_group(cfg(11, 0, Method::Pb), ports[0].address(), WAIT)
        .unwrap();
    let c = ports[2]
        .join_group(cfg(11, 0, Method::Pb), ports[0].address(), WAIT)
        .unwrap();
    while a.info().members.len() < 3 || b.info().members.len() < 3 {
        // The joins are in the streams: take them in (this also runs the engine).
        let _ = a.try_receive_with(|_| ());
        let _ = b.try_receive_with(|_| ());
        std::thread::yield_now();
    }
    let logs: Vec<Vec<(Address, Vec<u8>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = [&a, &b, &c]
            .into_iter()
            .enumerate()
            .map(|(k, g)| {
                s.spawn(move || {
                    for i in 0..30u8 {
                        g.send(&[k as u8, i], WAIT).unwrap();
                    }
                    messages(g, 90)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(logs[0], logs[1]);
    assert_eq!(logs[0], logs[2]);
    for k in 0..3u8 {
        let seq: Vec<u8> = logs[0]
            .iter()
            .filter(|m| m.1[0] == k)
            .map(|m| m.1[1])
            .collect();
        assert_eq!(seq, (0..30).collect::<Vec<_>>());
    }
    drop((a, b, c));
    drop(ports);
    engine.shutdown();
}

/// Invoker mode with the engine's only port: a thread waiting in `receive` sleeps in a read
/// of the port's socket, and a delivery that another thread's `send` makes (a group of one
/// orders it without traffic) must wake it there.
#[test]
fn invoker_engine_wakes_a_receiver_asleep_on_its_socket_for_another_threads_send() {
    use txcast_port::{Engine, EngineConfig, EngineMode};
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        ..EngineConfig::default()
    })
    .unwrap();
    let port = Port::open_on(&engine, addr(25, 0), PortConfig::default()).unwrap();
    let g = port.create_group(cfg(12, 0, Method::Pb)).unwrap();
    while g.try_receive_with(|_| ()).is_some() {}
    std::thread::scope(|s| {
        let (taken, took) = std::sync::mpsc::channel();
        let g = &g;
        let receiver = s.spawn(move || {
            let mut ids = Vec::new();
            for _ in 0..50 {
                ids.push(messages(g, 1)[0].1[0]);
                taken.send(()).unwrap();
            }
            ids
        });
        for i in 0..50u8 {
            // One at a time: the receiver is (most likely) asleep again when it is sent.
            g.send_async(&[i]).unwrap();
            took.recv().unwrap();
        }
        assert_eq!(receiver.join().unwrap(), (0..50).collect::<Vec<_>>());
    });
    drop(g);
    drop(port);
    engine.shutdown();
}

/// The engine's loss injection drops group packets too (each copy on its own), and the
/// protocols recover from it: one order everywhere, with retransmissions counted.
#[test]
fn engine_loss_injection_drops_group_packets_and_every_stack_recovers() {
    use txcast_port::{Engine, EngineConfig, GroupSpec};
    use txcast_proto::order::{OrderConfig, Protocol};
    use txcast_proto::pack::PackMode;
    let specs: [GroupSpec; 2] = [
        cfg(9, 1, Method::Pb).into(),
        OrderConfig::with(Protocol::Dynord, PackMode::Off).into(),
    ];
    for (k, spec) in specs.into_iter().enumerate() {
        let engine = Engine::start(EngineConfig {
            loss_injection: 0.1,
            loss_seed: 3,
            ..EngineConfig::default()
        })
        .unwrap();
        let instance = 40 + k as u16;
        let ports: Vec<Port> = (0..3)
            .map(|s| Port::open_on(&engine, addr(instance, s), PortConfig::default()).unwrap())
            .collect();
        let a = ports[0].create_group(spec.clone()).unwrap();
        let b = ports[1]
            .join_group(spec.clone(), ports[0].address(), WAIT)
            .unwrap();
        let c = ports[2].join_group(spec, ports[0].address(), WAIT).unwrap();
        let lost_before = engine.injected_losses();
        // One message at a time, so that each travels in packets of its own and a loss
        // must be repaired (with every message in flight at once, a few packets carry
        // them all and a lost acknowledgement is made good by the next).
        for i in 0..30u8 {
            for (s, g) in [&a, &b, &c].iter().enumerate() {
                g.send(&[s as u8, i], WAIT).unwrap();
            }
        }
        let la = messages(&a, 90);
        assert_eq!(la, messages(&b, 90), "stack {k}");
        assert_eq!(la, messages(&c, 90), "stack {k}");
        assert!(
            engine.injected_losses() > lost_before,
            "stack {k}: the injector dropped group packets"
        );
        let resent: u64 = [&a, &b, &c]
            .iter()
            .map(|g| {
                let c = g.info().counters;
                c.records_retransmitted + c.submits_resent + c.naks_sent
            })
            .sum();
        assert!(resent > 0, "stack {k}: losses were repaired");
    }
}

/// A member's process killed on a live host: its port's socket closes, the host answers the
/// survivors' datagrams with "port unreachable", and both stacks suspect the member from
/// that report. The silence timeout is set far beyond the test's waits, so a view without
/// the member can only come from the report. Killed: the sequencer (sequencer stack), a
/// member that orders nothing (layered stack, dynseq).
#[test]
fn a_member_whose_port_is_gone_is_suspected_from_the_hosts_report() {
    use txcast_port::GroupSpec;
    use txcast_proto::order::{OrderConfig, Protocol};
    use txcast_proto::pack::PackMode;
    let long = Duration::from_secs(120);
    let sequencer = GroupConfig {
        group: 11,
        silence_timeout: long,
        join_attempts_max: 10_000,
        ..GroupConfig::default()
    };
    let mut layered = OrderConfig::with(Protocol::Dynseq, PackMode::Off);
    layered.vs.group = 12;
    layered.vs.silence_timeout = long;
    let specs: [(GroupSpec, usize); 2] = [(sequencer.into(), 0), (layered.into(), 2)];
    for (k, (spec, victim)) in specs.into_iter().enumerate() {
        let instance = 26 + k as u16;
        let mut ports: Vec<Option<Port>> = (0..3)
            .map(|s| Some(Port::open(addr(instance, s), PortConfig::default()).unwrap()))
            .collect();
        let first = ports[0].as_ref().unwrap().address();
        let mut groups: Vec<Option<txcast_port::Group>> = vec![Some(
            ports[0]
                .as_ref()
                .unwrap()
                .create_group(spec.clone())
                .unwrap(),
        )];
        for p in &ports[1..] {
            let g = p.as_ref().unwrap().join_group(spec.clone(), first, WAIT);
            groups.push(Some(g.unwrap()));
        }
        let gone = ports[victim].as_ref().unwrap().address();
        // The victim's process dies: its group and port (and so its socket) go at once.
        drop(groups[victim].take());
        drop(ports[victim].take());
        let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
        for &i in &survivors {
            let g = groups[i].as_ref().unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            // Something to send keeps datagrams going to the victim's address.
            g.send_async(&[i as u8]).unwrap();
            loop {
                if !g.info().members.contains(&gone) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "stack {k}: member {i} still has {gone} in {:?}",
                    g.info().members
                );
                let _ = g.receive(Some(Duration::from_millis(50)));
            }
        }
        let reports: u64 = survivors
            .iter()
            .map(|&i| ports[i].as_ref().unwrap().counters().unreachable_reports)
            .sum();
        assert!(reports > 0, "stack {k}: the host's reports were counted");
        // The survivors go on: one more message reaches both.
        let (a, b) = (
            groups[survivors[0]].as_ref().unwrap(),
            groups[survivors[1]].as_ref().unwrap(),
        );
        a.send(b"on", WAIT).unwrap();
        for g in [a, b] {
            loop {
                let d = g.receive(WAIT).expect("delivery");
                if matches!(&d.what, GroupRecord::Message { payload, .. } if payload == b"on") {
                    break;
                }
            }
        }
    }
}

/// A member silent with its socket still open (its process stalled, or the host's reports
/// rate-limited away) is suspected from the application's word through
/// `Group::member_unreachable`, long before the silence timeout (120 s here).
#[test]
fn a_member_the_application_says_is_gone_is_suspected_without_its_silence() {
    use txcast_port::{Engine, EngineConfig, EngineMode};
    use txcast_proto::order::{OrderConfig, Protocol};
    use txcast_proto::pack::PackMode;
    let mut spec = OrderConfig::with(Protocol::Dynseq, PackMode::Off);
    spec.vs.group = 13;
    spec.vs.silence_timeout = Duration::from_secs(120);
    // The victim's port runs only while a call of the application drives it.
    let stalled = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        ..EngineConfig::default()
    })
    .unwrap();
    let a_port = Port::open(addr(28, 0), PortConfig::default()).unwrap();
    let b_port = Port::open(addr(28, 1), PortConfig::default()).unwrap();
    let c_port = Port::open_on(&stalled, addr(28, 2), PortConfig::default()).unwrap();
    let a = a_port.create_group(spec.clone()).unwrap();
    let b = b_port
        .join_group(spec.clone(), a_port.address(), WAIT)
        .unwrap();
    let c = c_port
        .join_group(spec.clone(), a_port.address(), WAIT)
        .unwrap();
    let gone = c_port.address();
    while a.info().members.len() < 3 || b.info().members.len() < 3 {
        let _ = a.receive(Some(Duration::from_millis(20)));
        let _ = b.receive(Some(Duration::from_millis(20)));
    }
    // Nobody drives the victim's engine from here on: it is silent, its socket open.
    a.member_unreachable(Address::new(28, 9, 2, 0)); // not a member: ignored
    a.member_unreachable(gone);
    b.member_unreachable(gone);
    for g in [&a, &b] {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while g.info().members.contains(&gone) {
            assert!(
                std::time::Instant::now() < deadline,
                "{gone} still in {:?}",
                g.info().members
            );
            let _ = g.receive(Some(Duration::from_millis(50)));
        }
    }
    assert_eq!(a.info().members, vec![a_port.address(), b_port.address()]);
    drop((a, b, c));
    drop((a_port, b_port, c_port));
    stalled.shutdown();
}
