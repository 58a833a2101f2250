//! Ports through the public API: local (shared memory) and remote (UDP over loopback) delivery,
//! ordering, loss recovery, back-pressure, oversize, malformed packets, dead owners, and
//! transaction multicast.
//!
//! Every test uses its own `instance` number so that tests running in parallel never share a
//! port. Sites 0, 1, 2 sit on 127.0.0.1, .2, .3 in the embedded default: different "hosts", so
//! traffic between sites goes over UDP.

use std::time::Duration;
use txcast_port::{
    ClusterConfig, Engine, EngineConfig, EngineMode, IdleStrategy, Port, PortConfig, PortError,
};
use txcast_proto::{Address, TxnId};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn addr(instance: u16, site: u16, server_type: u16, server: u16) -> Address {
    Address::new(instance, site, server_type, server)
}

/// An engine with no thread of its own: the application's calls run it.
fn invoker_engine() -> Engine {
    Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn cfg() -> PortConfig {
    PortConfig {
        idle: IdleStrategy::SpinThenPark { spins: 1000 },
        ..PortConfig::default()
    }
}

#[test]
fn local_delivery_through_shared_memory() {
    let mut a = Port::open(addr(1, 0, 1, 0), cfg()).unwrap();
    let mut b = Port::open(addr(1, 0, 2, 0), cfg()).unwrap();
    a.send(b.address(), b"hello local").unwrap();
    let mut buf = [0u8; 64];
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"hello local");
    assert_eq!(r.source, a.address());
    assert_eq!(r.txn, None);
    assert_eq!(a.counters().local_sent, 1);
    assert_eq!(a.counters().remote_sent, 0);
    assert_eq!(b.counters().packets_received, 0, "no network involved");
}

#[test]
fn remote_delivery_over_udp_in_order() {
    let mut a = Port::open(addr(2, 0, 1, 0), cfg()).unwrap();
    let mut b = Port::open(addr(2, 1, 1, 0), cfg()).unwrap();
    let n = 5000u32;
    let sender = std::thread::spawn(move || {
        for i in 0..n {
            a.send(addr(2, 1, 1, 0), &i.to_le_bytes()).unwrap();
        }
        a
    });
    let mut buf = [0u8; 64];
    for i in 0..n {
        let r = b.recv_timeout(&mut buf, WAIT).unwrap();
        assert_eq!(r.source, addr(2, 0, 1, 0));
        assert_eq!(
            u32::from_le_bytes(buf[..4].try_into().unwrap()),
            i,
            "in order"
        );
    }
    let a = sender.join().unwrap();
    assert_eq!(a.counters().remote_sent, n as u64);
    assert!(b.counters().packets_received > 0);
    assert!(b.try_recv(&mut buf).is_none(), "nothing extra");
}

#[test]
fn loss_is_recovered_over_real_sockets() {
    let engine = Engine::start(EngineConfig {
        loss_injection: 0.2,
        loss_seed: 7,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut a = Port::open_on(&engine, addr(3, 0, 1, 0), cfg()).unwrap();
    let mut b = Port::open_on(&engine, addr(3, 1, 1, 0), cfg()).unwrap();
    let n = 2000u32;
    let mut buf = [0u8; 2000];
    for i in 0..n {
        let len = if i % 10 == 0 { 1500 } else { 8 };
        let mut m = vec![(i % 251) as u8; len];
        m[..4].copy_from_slice(&i.to_le_bytes());
        a.send(b.address(), &m).unwrap();
    }
    for i in 0..n {
        let r = b.recv_timeout(&mut buf, WAIT).unwrap();
        assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), i);
        assert_eq!(r.len, if i % 10 == 0 { 1500 } else { 8 });
    }
    assert!(
        engine.injected_losses() > 50,
        "the injector dropped packets"
    );
    assert!(a.counters().links.retransmitted > 0);
    drop((a, b));
    engine.shutdown();
}

#[test]
fn full_ring_is_back_pressure() {
    let small = PortConfig {
        slot_count: 4,
        ..cfg()
    };
    let mut a = Port::open(addr(4, 0, 1, 0), cfg()).unwrap();
    let mut b = Port::open(addr(4, 0, 2, 0), small).unwrap();
    for i in 0..4u8 {
        a.try_send(b.address(), &[i]).unwrap();
    }
    assert!(matches!(
        a.try_send(b.address(), b"x"),
        Err(PortError::Full)
    ));
    assert!(matches!(
        a.send_timeout(b.address(), b"x", Duration::from_millis(50)),
        Err(PortError::Timeout)
    ));
    let mut buf = [0u8; 8];
    b.recv_timeout(&mut buf, WAIT).unwrap();
    a.try_send(b.address(), b"y").unwrap();
    assert!(b.counters().ring_full_rejections >= 1);
}

#[test]
fn remote_back_pressure_holds_the_sender_until_the_receiver_drains() {
    let small = PortConfig {
        slot_count: 8,
        ..cfg()
    };
    let mut a = Port::open(addr(5, 0, 1, 0), cfg()).unwrap();
    let mut b = Port::open(addr(5, 1, 1, 0), small).unwrap();
    // The receiver does not read: its ring (8) and the link's buffers fill, then the sender's
    // non-blocking sends are refused.
    let mut accepted = 0u32;
    let mut refused = false;
    for i in 0..100_000u32 {
        match a.try_send(b.address(), &i.to_le_bytes()) {
            Ok(()) => accepted += 1,
            Err(PortError::Full) => {
                refused = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused, "a bounded path must push back");
    let mut buf = [0u8; 8];
    for i in 0..accepted {
        b.recv_timeout(&mut buf, WAIT).unwrap();
        assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), i);
    }
}

#[test]
fn oversize_messages_are_rejected() {
    let mut a = Port::open(addr(6, 0, 1, 0), cfg()).unwrap();
    let b = Port::open(addr(6, 0, 2, 0), cfg()).unwrap();
    let big = vec![0u8; b.message_bytes_max() + 1];
    assert!(matches!(
        a.try_send(b.address(), &big),
        Err(PortError::TooLong { .. })
    ));
    let huge = vec![0u8; 70 * 1024];
    assert!(matches!(
        a.try_send(addr(6, 1, 1, 0), &huge),
        Err(PortError::TooLong { .. })
    ));
    // Claims of any length, up to the largest, are refused the same way, local and remote.
    let local = [b.message_bytes_max() + 1, usize::MAX - 15, usize::MAX];
    let remote = [huge.len(), usize::MAX - 15, usize::MAX];
    for (dest, lens) in [(b.address(), local), (addr(6, 1, 1, 0), remote)] {
        for len in lens {
            assert!(
                matches!(a.claim(dest, len), Err(PortError::TooLong { .. })),
                "claim of {len} bytes to {dest}"
            );
        }
    }
}

#[test]
fn malformed_packets_are_dropped_and_counted() {
    let mut b = Port::open(addr(7, 1, 1, 0), cfg()).unwrap();
    let cluster = ClusterConfig::default();
    let to = cluster.socket_addr(b.address()).unwrap();
    let raw = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    raw.send_to(b"definitely not a txcast packet, long enough to pass", to)
        .unwrap();
    raw.send_to(&[0u8; 3], to).unwrap();
    // Longer than any packet the cluster builds: cut by the receive batch, then dropped.
    raw.send_to(&[0x54u8; 5000], to).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b.counters().dropped_bad < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(b.counters().dropped_bad, 3);
    let mut buf = [0u8; 8];
    assert!(b.try_recv(&mut buf).is_none());
}

#[test]
fn sending_to_a_port_nobody_opened_is_a_typed_error() {
    let mut a = Port::open(addr(8, 0, 1, 0), cfg()).unwrap();
    assert!(matches!(
        a.try_send(addr(8, 0, 9, 9), b"x"),
        Err(PortError::NoSuchPort(_))
    ));
    assert!(matches!(
        Port::open(addr(8, 0, 1, 0), cfg()),
        Err(PortError::Segment(_))
    ));
}

#[test]
fn transaction_multicast_reaches_exactly_the_members_that_joined() {
    let t = addr(9, 0, 3, 0);
    let mut coordinator = Port::open(addr(9, 0, 1, 0), cfg()).unwrap();
    let mut m1 = Port::open(Address { site: 1, ..t }, cfg()).unwrap();
    let mut m2 = Port::open(Address { site: 2, ..t }, cfg()).unwrap();
    let mut outsider = Port::open(Address { site: 3, ..t }, cfg()).unwrap();
    let txn = TxnId(0xfeed);
    m1.join_txn(txn).unwrap();
    m2.join_txn(txn).unwrap();
    let handed = coordinator
        .multicast(txn, t, &[1, 2, 3], b"prepare")
        .unwrap();
    assert_eq!(handed, 3);
    let mut buf = [0u8; 64];
    for m in [&mut m1, &mut m2] {
        let r = m.recv_timeout(&mut buf, WAIT).unwrap();
        assert_eq!(&buf[..r.len], b"prepare");
        assert_eq!(r.txn, Some(txn));
        assert_eq!(r.source, coordinator.address());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while outsider.counters().dropped_not_joined < 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(outsider.counters().dropped_not_joined, 1);
    assert_eq!(outsider.counters().multicast_received, 0);
    assert_eq!(m2.counters().multicast_received, 1);
    assert!(outsider.try_recv(&mut buf).is_none());
    // After leaving, a member no longer gets the transaction's messages.
    m1.leave_txn(txn).unwrap();
    coordinator.multicast(txn, t, &[1, 2], b"commit").unwrap();
    let r = m2.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"commit");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while m1.counters().dropped_not_joined < 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(m1.try_recv(&mut buf).is_none());
}

#[test]
fn ip_multicast_reaches_exactly_the_members_that_joined() {
    let mut cluster = ClusterConfig::default();
    cluster.multicast.enabled = true;
    let engine = Engine::start(EngineConfig {
        cluster,
        ..EngineConfig::default()
    })
    .unwrap();
    let t = addr(13, 0, 3, 0);
    let mut coordinator = Port::open_on(&engine, addr(13, 0, 1, 0), cfg()).unwrap();
    let mut m1 = Port::open_on(&engine, Address { site: 1, ..t }, cfg()).unwrap();
    let mut m2 = Port::open_on(&engine, Address { site: 2, ..t }, cfg()).unwrap();
    let mut outsider = Port::open_on(&engine, Address { site: 3, ..t }, cfg()).unwrap();
    let txn = TxnId(0x1_0000_beef);
    m1.join_txn(txn).unwrap();
    m2.join_txn(txn).unwrap();
    // Joined to another transaction only: must not get this one's messages.
    outsider.join_txn(TxnId(0x2_0000_beef)).unwrap();
    assert_eq!(coordinator.multicast(txn, t, &[], b"prepare").unwrap(), 1);
    let mut buf = [0u8; 64];
    for m in [&mut m1, &mut m2] {
        let r = m.recv_timeout(&mut buf, WAIT).unwrap();
        assert_eq!(&buf[..r.len], b"prepare");
        assert_eq!(r.txn, Some(txn));
        assert_eq!(r.source, coordinator.address());
    }
    m1.leave_txn(txn).unwrap();
    coordinator.multicast(txn, t, &[], b"commit").unwrap();
    let r = m2.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"commit");
    std::thread::sleep(Duration::from_millis(50));
    assert!(m1.try_recv(&mut buf).is_none(), "left the group");
    assert!(
        outsider.try_recv(&mut buf).is_none(),
        "never joined this transaction"
    );
    drop((coordinator, m1, m2, outsider));
    engine.shutdown();
}

#[test]
fn claim_builds_a_message_in_place_locally_and_remotely() {
    let mut a = Port::open(addr(14, 0, 1, 0), cfg()).unwrap();
    let mut local = Port::open(addr(14, 0, 2, 0), cfg()).unwrap();
    let mut remote = Port::open(addr(14, 1, 2, 0), cfg()).unwrap();
    let mut buf = [0u8; 128];
    for dest in [local.address(), remote.address()] {
        let mut c = a.claim(dest, 100).unwrap();
        assert_eq!(c.len(), 100);
        c[..5].copy_from_slice(b"built");
        c.commit_len(5).unwrap();
        // A claim dropped without commit sends nothing.
        let mut dropped = a.claim(dest, 10).unwrap();
        dropped[0] = b'!';
        drop(dropped);
        let mut c = a.claim(dest, 3).unwrap();
        c.copy_from_slice(b"two");
        c.commit().unwrap();
    }
    for p in [&mut local, &mut remote] {
        let r = p.recv_timeout(&mut buf, WAIT).unwrap();
        assert_eq!(&buf[..r.len], b"built");
        assert_eq!(r.source, a.address());
        let r = p.recv_timeout(&mut buf, WAIT).unwrap();
        assert_eq!(&buf[..r.len], b"two");
    }
    assert!(matches!(
        a.claim(local.address(), local.message_bytes_max() + 1),
        Err(PortError::TooLong { .. })
    ));
}

#[test]
fn datagrams_arrive_unreliably_but_intact() {
    let mut a = Port::open(addr(10, 0, 1, 0), cfg()).unwrap();
    let mut b = Port::open(addr(10, 1, 1, 0), cfg()).unwrap();
    a.send_datagram(b.address(), b"heartbeat").unwrap();
    let mut buf = [0u8; 64];
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"heartbeat");
    assert_eq!(b.counters().datagrams_received, 1);
    assert_eq!(
        b.counters().links.messages_delivered,
        0,
        "not through a link"
    );
}

#[test]
fn invoker_mode_delivers_without_an_engine_thread() {
    let engine = invoker_engine();
    let spin = PortConfig {
        idle: IdleStrategy::Spin,
        ..cfg()
    };
    let mut a = Port::open_on(&engine, addr(11, 0, 1, 0), spin).unwrap();
    let mut b = Port::open_on(&engine, addr(11, 1, 1, 0), spin).unwrap();
    let mut buf = [0u8; 64];
    for i in 0..100u32 {
        a.send(b.address(), &i.to_le_bytes()).unwrap();
        let r = b.recv_timeout(&mut buf, WAIT).unwrap();
        assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), i);
        assert_eq!(r.len, 4);
    }
    // The last message's acknowledgement is delayed; with no engine thread it goes out only
    // while someone drives the engine: flush does, on both sides.
    let t = std::thread::spawn(move || {
        b.flush(Duration::from_secs(10)).unwrap();
        b
    });
    a.flush(Duration::from_secs(10)).unwrap();
    assert!(a.remote_idle());
    let _b = t.join().unwrap();
}

/// A child process opens a port and dies without closing it; the next owner reclaims it.
#[test]
fn a_dead_owners_port_is_reclaimed() {
    let a = addr(12, 0, 1, 0);
    if std::env::var("TXCAST_TEST_CHILD").as_deref() == Ok("dead-owner") {
        let p = Port::open(a, cfg()).unwrap();
        std::mem::forget(p);
        // SAFETY: ends the child at once, as a crash would, without running destructors.
        unsafe { libc::_exit(0) };
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_dead_owners_port_is_reclaimed", "--nocapture"])
        .env("TXCAST_TEST_CHILD", "dead-owner")
        .status()
        .unwrap();
    assert!(status.success());
    let mut sender = Port::open(addr(12, 0, 2, 0), cfg()).unwrap();
    assert!(matches!(
        sender.try_send(a, b"x"),
        Err(PortError::OwnerDead(_))
    ));
    let p = Port::open(a, cfg()).unwrap();
    assert!(p.counters().reclaimed_dead_owner);
}

/// With a cluster key, packets without a valid MAC are dropped and counted; keyed traffic flows.
#[test]
fn a_cluster_key_drops_unsigned_and_wrongly_signed_packets() {
    let keyed = |pass: &str| {
        let cluster = ClusterConfig {
            key_passphrase: Some(pass.to_string()),
            ..ClusterConfig::default()
        };
        Engine::start(EngineConfig {
            cluster,
            ..EngineConfig::default()
        })
        .unwrap()
    };
    let engine = keyed("right");
    let intruder = keyed("wrong");
    let mut a = Port::open_on(&engine, addr(15, 0, 1, 0), cfg()).unwrap();
    let mut b = Port::open_on(&engine, addr(15, 1, 1, 0), cfg()).unwrap();
    let mut bad = Port::open_on(&intruder, addr(15, 2, 1, 0), cfg()).unwrap();
    let mut plain = Port::open(addr(15, 3, 1, 0), cfg()).unwrap();
    a.send(b.address(), b"signed").unwrap();
    let mut buf = [0u8; 64];
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"signed");
    bad.send_datagram(b.address(), b"forged").unwrap();
    plain.send_datagram(b.address(), b"unsigned").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b.counters().dropped_bad < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(b.counters().dropped_bad, 2);
    assert_eq!(b.counters().refused.mac_mismatch, 1);
    assert_eq!(b.counters().refused.mac_missing, 1);
    assert!(b.try_recv(&mut buf).is_none());
    drop((a, b, bad));
    engine.shutdown();
    intruder.shutdown();
}

/// Invoker mode with a parked receiver: the application thread parks in poll(2) on its socket
/// and is woken by UDP traffic and, for local messages, by the sender's doorbell.
#[test]
fn an_invoker_port_parked_on_its_socket_wakes_for_local_and_remote_messages() {
    let engine = invoker_engine();
    let parked = PortConfig {
        idle: IdleStrategy::Park,
        ..cfg()
    };
    let mut b = Port::open_on(&engine, addr(16, 0, 2, 0), parked).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        for _ in 0..40 {
            let r = b.recv_timeout(&mut buf, WAIT).unwrap();
            got.push(buf[..r.len].to_vec());
        }
        b.flush(Duration::from_secs(10)).unwrap();
        (got, b)
    });
    let mut local = Port::open(addr(16, 0, 1, 0), cfg()).unwrap();
    let mut remote = Port::open(addr(16, 1, 1, 0), cfg()).unwrap();
    for i in 0..20u8 {
        // Give the receiver time to park between messages.
        std::thread::sleep(Duration::from_millis(2));
        local.send(addr(16, 0, 2, 0), &[b'L', i]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        remote.send(addr(16, 0, 2, 0), &[b'R', i]).unwrap();
    }
    let (got, b) = receiver.join().unwrap();
    let locals: Vec<u8> = got.iter().filter(|m| m[0] == b'L').map(|m| m[1]).collect();
    let remotes: Vec<u8> = got.iter().filter(|m| m[0] == b'R').map(|m| m[1]).collect();
    assert_eq!(locals, (0..20).collect::<Vec<u8>>());
    assert_eq!(remotes, (0..20).collect::<Vec<u8>>());
    assert!(
        b.counters().doorbells > 0,
        "local senders rang the doorbell"
    );
    assert_eq!(
        b.counters().dropped_bad,
        0,
        "doorbells are not counted as bad packets"
    );
}

/// Review finding: a port closed and opened again in the same process reused its incarnation,
/// so the peer took the new stream's messages for duplicates and acknowledged them unseen.
#[test]
fn a_port_opened_again_is_a_new_incarnation_and_loses_nothing() {
    let (a_addr, b_addr) = (addr(17, 0, 1, 0), addr(17, 1, 1, 0));
    let mut b = Port::open(b_addr, cfg()).unwrap();
    let mut buf = [0u8; 64];
    let first = {
        let mut a = Port::open(a_addr, cfg()).unwrap();
        for i in 0..10u8 {
            a.send(b_addr, &[i]).unwrap();
        }
        for _ in 0..10 {
            b.recv_timeout(&mut buf, WAIT).unwrap();
        }
        a.flush(Duration::from_secs(5)).unwrap();
        a.incarnation()
    };
    let mut a = Port::open(a_addr, cfg()).unwrap();
    assert!(a.incarnation() > first);
    for i in 0..10u8 {
        a.send(b_addr, &[100 + i]).unwrap();
    }
    a.flush(Duration::from_secs(5)).unwrap();
    let mut got = Vec::new();
    for _ in 0..10 {
        let r = b.recv_timeout(&mut buf, WAIT).unwrap();
        got.push(buf[r.len - 1]);
    }
    assert_eq!(got, (100..110u8).collect::<Vec<_>>());
}

/// `survey` (behind `txcast stat`) reads a live port's ring without disturbing it.
#[test]
fn survey_reports_open_ports_and_their_queues() {
    let mut a = Port::open(addr(18, 0, 1, 0), cfg()).unwrap();
    let mut b = Port::open(addr(18, 0, 2, 0), cfg()).unwrap();
    for i in 0..3u8 {
        a.send(b.address(), &[i]).unwrap();
    }
    let mut buf = [0u8; 8];
    b.recv_timeout(&mut buf, WAIT).unwrap();
    let dir = ClusterConfig::default().segment_dir();
    let all = txcast_port::shm::survey(&dir).unwrap();
    let me = all
        .iter()
        .find(|s| s.path.ends_with("18.0.2.0.ring"))
        .expect("the port's segment is listed");
    assert!(me.owner_alive && !me.closed);
    assert_eq!(me.owner_pid, std::process::id());
    assert_eq!((me.queued, me.counters.delivered), (2, 1));
    assert_eq!(me.slot_count, cfg().slot_count);
}

/// Sends to a port that never answers fail fast once the link gives up, and work again when
/// it comes up.
#[test]
fn a_silent_destination_becomes_unreachable_then_recovers() {
    let engine = Engine::start(EngineConfig {
        link: txcast_proto::link::LinkConfig {
            rto_initial: Duration::from_millis(2),
            rto_min: Duration::from_millis(1),
            rto_max: Duration::from_millis(4),
            unreachable_after_timeouts: 5,
            ..txcast_proto::link::LinkConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap();
    let mut a = Port::open_on(&engine, addr(19, 0, 1, 0), cfg()).unwrap();
    let dest = addr(19, 1, 1, 0); // nobody has opened it yet
    a.send(dest, b"first").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let verdict = loop {
        match a.try_send(dest, b"more") {
            Err(PortError::Unreachable(d)) => break d,
            Ok(()) | Err(PortError::Full) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never declared unreachable"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(verdict, dest);
    assert_eq!(a.counters().links.unreachable_declared, 1);
    // The destination opens: the link's retries reach it, its acknowledgement clears the
    // verdict, and everything accepted before is delivered in order.
    let mut b = Port::open_on(&engine, dest, cfg()).unwrap();
    let mut buf = [0u8; 16];
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"first");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while let Err(e) = a.try_send(dest, b"again") {
        assert!(
            matches!(e, PortError::Unreachable(_) | PortError::Full),
            "{e}"
        );
        assert!(std::time::Instant::now() < deadline, "never recovered");
        std::thread::sleep(Duration::from_millis(2));
    }
    loop {
        let r = b.recv_timeout(&mut buf, WAIT).unwrap();
        if &buf[..r.len] == b"again" {
            break;
        }
        assert_eq!(&buf[..r.len], b"more");
    }
    drop((a, b));
    engine.shutdown();
}

/// A port closed while the engine thread sleeps frees its address at once: the sleeper waits
/// on an epoll set, which holds no reference to the socket (a poll(2) on the socket itself
/// kept it bound until the engine woke, and reopening failed with "address in use").
#[test]
fn a_port_closed_while_the_engine_sleeps_can_be_opened_again_at_once() {
    let engine = Engine::start(EngineConfig::default()).unwrap();
    let a = addr(20, 0, 1, 0);
    for _ in 0..5 {
        let p = Port::open_on(&engine, a, cfg()).unwrap();
        // Long enough for the idle engine thread to spin, yield and park in its poll.
        std::thread::sleep(Duration::from_millis(20));
        drop(p);
    }
    engine.shutdown();
}

/// A stream to one local port takes a short path (the previous destination's ring, no lookup);
/// when that port closes, the next send still reports it, and a port opened again at the same
/// address receives the stream.
#[test]
fn a_stream_to_a_local_port_that_closes_reports_it_and_reaches_its_successor() {
    let mut a = Port::open(addr(21, 0, 1, 0), cfg()).unwrap();
    let b = Port::open(addr(21, 0, 2, 0), cfg()).unwrap();
    let to = b.address();
    for i in 0..8u8 {
        a.send(to, &[i]).unwrap();
    }
    assert_eq!(b.counters().received, 0, "nothing taken yet");
    drop(b);
    assert!(matches!(a.try_send(to, b"late"), Err(PortError::Closed(d)) if d == to));
    let mut b = Port::open(to, cfg()).unwrap();
    a.send(to, b"again").unwrap();
    a.send(to, b"and again").unwrap();
    let mut buf = [0u8; 16];
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!((&buf[..r.len], r.source), (&b"again"[..], a.address()));
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"and again");
    assert_eq!(a.counters().local_sent, 10);
}

/// Child side of the dead-owner tests: opens a port at `a` with `slots` slots, says so on
/// stdout, waits until its stdin closes, and dies without closing the port, as a crash would.
fn open_then_die_when_told(a: Address, slots: u32) -> ! {
    use std::io::{Read, Write};
    let p = Port::open(
        a,
        PortConfig {
            slot_count: slots,
            ..cfg()
        },
    )
    .unwrap();
    println!("open");
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read(&mut [0u8; 1]);
    std::mem::forget(p);
    // SAFETY: ends the child at once, without running destructors.
    unsafe { libc::_exit(0) }
}

/// Starts this test's child (`open_then_die_when_told`) and waits until its port is open.
fn owner_child(test: &str) -> std::process::Child {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1", "-q"])
        .env("TXCAST_TEST_CHILD", test)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while line.trim() != "open" {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
    }
    child
}

/// Ends `child` (closing its stdin tells it to die) and reaps it.
fn kill_owner(mut child: std::process::Child) {
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

/// Test `test`'s setting: a child process owns a port at `a` with `slots` slots; a port at
/// `from` sends it one message; then the child dies without closing it. Returns that sender.
/// (In the child, this is where it lives and dies.)
fn sender_to_a_crashed_owner(test: &str, a: Address, slots: u32, from: Address) -> Port {
    if std::env::var("TXCAST_TEST_CHILD").as_deref() == Ok(test) {
        open_then_die_when_told(a, slots);
    }
    let child = owner_child(test);
    let mut sender = Port::open(from, cfg()).unwrap();
    sender.try_send(a, b"to the first owner").unwrap();
    kill_owner(child);
    sender
}

/// A sender that has been writing to a port whose owner then crashed, and that a new owner
/// opened again: the sender's next send reports `Closed` (the new owner marked the dead
/// owner's ring so) and the one after reaches the new port, instead of going on into a ring
/// nobody reads.
#[test]
fn a_crashed_owners_successor_is_reached_by_a_sender_that_held_its_ring() {
    const TEST: &str = "a_crashed_owners_successor_is_reached_by_a_sender_that_held_its_ring";
    let a = addr(22, 0, 1, 0);
    let mut sender = sender_to_a_crashed_owner(TEST, a, 64, addr(22, 0, 2, 0));
    let mut successor = Port::open(a, cfg()).unwrap();
    assert!(successor.counters().reclaimed_dead_owner);
    assert!(matches!(
        sender.try_send(a, b"lost"),
        Err(PortError::Closed(d)) if d == a
    ));
    sender.try_send(a, b"to the successor").unwrap();
    let mut buf = [0u8; 64];
    let r = successor.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"to the successor");
}

/// A sender whose local destination's owner crashed, with no successor: once the ring is
/// full, `try_send` reports `OwnerDead` (within about 10 ms) rather than `Full` for good.
#[test]
fn try_send_to_a_crashed_owners_full_ring_reports_owner_dead() {
    const TEST: &str = "try_send_to_a_crashed_owners_full_ring_reports_owner_dead";
    let a = addr(22, 0, 3, 0);
    let mut sender = sender_to_a_crashed_owner(TEST, a, 4, addr(22, 0, 4, 0));
    let start = std::time::Instant::now();
    let mut sent = 1;
    let outcome = loop {
        match sender.try_send(a, b"more") {
            Ok(()) => sent += 1,
            Err(PortError::Full) => {}
            Err(e) => break e,
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "still Full after 5 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(
        matches!(outcome, PortError::OwnerDead(d) if d == a),
        "{outcome:?}"
    );
    assert_eq!(sent, 4, "the ring's four slots took messages first");
}

/// Timeouts too long to add to the clock (`Duration::MAX`) mean "no deadline", not a panic.
#[test]
fn the_longest_timeouts_are_taken_as_no_deadline() {
    let mut a = Port::open(addr(22, 0, 5, 0), cfg()).unwrap();
    let mut b = Port::open(addr(22, 0, 6, 0), cfg()).unwrap();
    a.send_timeout(b.address(), b"patient", Duration::MAX)
        .unwrap();
    let mut buf = [0u8; 64];
    let r = b.recv_timeout(&mut buf, Some(Duration::MAX)).unwrap();
    assert_eq!(&buf[..r.len], b"patient");
    a.flush(Duration::MAX).unwrap();
}

/// A message longer than the receiver's buffer says so (`truncated`), and a record in the
/// ring too short to be a txcast message (anything of the user's can write the segment) is
/// dropped and counted, not delivered nor passed over in silence.
#[test]
fn truncation_is_reported_and_foreign_records_are_counted() {
    let mut a = Port::open(addr(22, 0, 7, 0), cfg()).unwrap();
    let mut b = Port::open(addr(22, 0, 8, 0), cfg()).unwrap();
    a.send(b.address(), b"twelve bytes").unwrap();
    let mut small = [0u8; 5];
    let r = b.recv_timeout(&mut small, WAIT).unwrap();
    assert_eq!((r.len, r.truncated, &small[..]), (5, true, &b"twelv"[..]));
    a.send(b.address(), b"fits").unwrap();
    let mut buf = [0u8; 64];
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!((r.len, r.truncated), (4, false));

    let path = ClusterConfig::default().segment_path(b.address());
    let foreign = txcast_port::shm::RingSender::open(&path).unwrap();
    foreign.try_send(b"x").unwrap();
    a.send(b.address(), b"after").unwrap();
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"after");
    assert_eq!(b.counters().dropped_bad, 1);
}
