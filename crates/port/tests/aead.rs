//! Confidentiality and key rollover through the public API (issue 23, item 4): ports on
//! separate engines (each its own sockets, keys and packet counters, as separate processes
//! would have) exchange encrypted packets; what a socket of ours captures off the wire does not
//! hold the plaintext; keys roll over under continuous traffic without losing or duplicating a
//! message; a node left with a retired key, or a wrong one, is refused and counted.
//!
//! Address instances 60 to 62, one per test (other tests use 0 to 52), in a cluster of its own. Sites 0, 1 and 2 are
//! 127.0.0.1, .2 and .3: traffic between them goes over UDP.

mod common;
use common::wait_for;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcast_port::{ClusterConfig, ClusterKey, Engine, EngineConfig, Port, PortConfig};
use txcast_proto::wire::{KeyRing, Packet, PacketKey, Records, FLAG_SEAL, KEY_ID_OFFSET};
use txcast_proto::Address;

const WAIT: Option<Duration> = Some(Duration::from_secs(10));
const PASSPHRASE: &str = "aead test key";

fn addr(instance: u16, site: u16, server_type: u16, server: u16) -> Address {
    Address::new(instance, site, server_type, server)
}

fn engine(cluster: ClusterConfig) -> Engine {
    Engine::start(EngineConfig {
        cluster,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// A cluster of its own: its own id (so its segments' directory), ports of their own (base
/// 12,000, four servers of each type: instances 60 to 62 are ports 15,840 to 16,031).
fn cluster() -> ClusterConfig {
    ClusterConfig {
        cluster: 60,
        base_port: 12_000,
        server_instances_max: 4,
        ..ClusterConfig::default()
    }
}

fn sealed_cluster() -> ClusterConfig {
    cluster().with_key(PASSPHRASE, true)
}

/// Everything our socket at `spy` receives within `for_`.
fn capture(spy: &UdpSocket, for_: Duration) -> Vec<Vec<u8>> {
    spy.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let end = Instant::now() + for_;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while Instant::now() < end {
        if let Ok((n, _)) = spy.recv_from(&mut buf) {
            got.push(buf[..n].to_vec());
        }
    }
    got
}

#[test]
fn an_encrypted_cluster_delivers_and_the_wire_shows_no_plaintext() {
    let sealed = sealed_cluster();
    let (ea, eb) = (engine(sealed.clone()), engine(sealed.clone()));
    let mut a = Port::open_on(&ea, addr(60, 0, 1, 0), PortConfig::default()).unwrap();
    let mut b = Port::open_on(&eb, addr(60, 1, 1, 0), PortConfig::default()).unwrap();
    assert_eq!(ea.key_status().map(|s| s.encrypting), Some(true));
    let msg = |i: u32| format!("PLAINTEXT-MARKER reliable {i:05}").into_bytes();
    let mut buf = vec![0u8; 4096];
    // Reliable messages, a datagram, and a gathered datagram, between the two engines.
    for i in 0..300 {
        a.send(b.address(), &msg(i)).unwrap();
    }
    for i in 0..300 {
        let r = b.recv_timeout(&mut buf, WAIT).unwrap();
        assert_eq!(&buf[..r.len], &msg(i)[..]);
    }
    a.send_datagram(b.address(), b"PLAINTEXT-MARKER datagram")
        .unwrap();
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"PLAINTEXT-MARKER datagram");
    a.send_datagram_gather(b.address(), &[b"PLAINTEXT-", b"MARKER gathered"])
        .unwrap();
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"PLAINTEXT-MARKER gathered");
    // Answers flow the other way too.
    b.send(a.address(), b"PLAINTEXT-MARKER answer").unwrap();
    let r = a.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"PLAINTEXT-MARKER answer");
    assert_eq!(b.counters().refused.total(), 0);

    // Our own socket where a third server of the cluster would be: what a sends it is what
    // anyone on the wire sees.
    let spy_addr = addr(60, 2, 1, 0);
    let spy = UdpSocket::bind(sealed.socket_addr(spy_addr).unwrap()).unwrap();
    a.send(spy_addr, b"PLAINTEXT-MARKER to the spy, reliable")
        .unwrap();
    a.send_datagram(spy_addr, b"PLAINTEXT-MARKER to the spy, datagram")
        .unwrap();
    a.send_datagram_gather(spy_addr, &[b"PLAINTEXT-MARKER ", b"to the spy, gathered"])
        .unwrap();
    let captured = capture(&spy, Duration::from_millis(400));
    assert!(captured.len() >= 3, "captured {}", captured.len());
    let ring = KeyRing::new(PacketKey::new(
        0,
        ClusterKey::from_passphrase(PASSPHRASE),
        true,
    ));
    let mut opened = Vec::new();
    for mut p in captured {
        assert!(
            !p.windows(9).any(|w| w == b"PLAINTEXT"),
            "plaintext on the wire"
        );
        assert_ne!(p[4] & FLAG_SEAL, 0, "a packet not sealed");
        assert_eq!(p[KEY_ID_OFFSET], 0);
        // The same bytes open under the cluster's key: they were the payloads.
        let pkt = Packet::open(&mut p, sealed.cluster, Some(&ring)).unwrap();
        let body = match pkt.header.kind {
            txcast_proto::wire::Kind::Data => &pkt.body[txcast_proto::wire::DATA_PREFIX_BYTES..],
            // Numbered in a keyed cluster (the replay defence).
            _ => {
                txcast_proto::wire::DatagramBody::parse(pkt.header.flags, pkt.body)
                    .unwrap()
                    .records
            }
        };
        for r in Records::new(body).flatten() {
            opened.push(String::from_utf8_lossy(r.payload).into_owned());
        }
    }
    for want in ["reliable", "datagram", "gathered"] {
        assert!(
            opened
                .iter()
                .any(|m| m.contains("PLAINTEXT-MARKER") && m.ends_with(want)),
            "{want} not among {opened:?}"
        );
    }
    drop((a, b));
    ea.shutdown();
    eb.shutdown();
}

/// Rolls both engines from their key to `(id, passphrase, encrypt)`, in the three steps, each
/// done on both before the next.
fn roll_over(engines: &[&Engine], id: u8, passphrase: &str, encrypt: bool) {
    for e in engines {
        e.install_next_key(id, ClusterKey::from_passphrase(passphrase), encrypt)
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(30));
    for e in engines {
        e.switch_to_next_key().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    // A few round trips on loopback: nothing under the old key is in flight after this.
    std::thread::sleep(Duration::from_millis(100));
    for e in engines {
        e.retire_old_key().unwrap();
        let s = e.key_status().unwrap();
        assert_eq!(
            (s.sending, s.encrypting, s.next, s.old),
            (id, encrypt, None, None)
        );
    }
}

#[test]
fn a_rollover_under_continuous_traffic_loses_and_duplicates_nothing() {
    // MAC-only key 0, then encrypting key 1, then encrypting key 2.
    let cluster = cluster().with_key(PASSPHRASE, false);
    let (ea, eb) = (engine(cluster.clone()), engine(cluster));
    let mut a = Port::open_on(&ea, addr(61, 0, 1, 0), PortConfig::default()).unwrap();
    let mut b = Port::open_on(&eb, addr(61, 1, 1, 0), PortConfig::default()).unwrap();
    let to = b.address();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    // Sends until told to stop, then says how many.
    let sender = std::thread::spawn(move || {
        let mut i = 0u64;
        while !d.load(Ordering::Relaxed) {
            a.send(to, &i.to_le_bytes()).unwrap();
            i += 1;
            if i.is_multiple_of(64) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        a.flush(Duration::from_secs(10)).unwrap();
        (a, i)
    });
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let mut next = 0u64;
        loop {
            match b.recv_timeout(&mut buf, Some(Duration::from_millis(200))) {
                Ok(r) => {
                    let got = u64::from_le_bytes(buf[..r.len].try_into().unwrap());
                    assert_eq!(got, next, "lost, duplicated or reordered");
                    next += 1;
                }
                Err(_) if s.load(Ordering::Relaxed) => break,
                Err(_) => {}
            }
        }
        (b, next)
    });
    std::thread::sleep(Duration::from_millis(100));
    roll_over(&[&ea, &eb], 1, "second key", true);
    std::thread::sleep(Duration::from_millis(100));
    roll_over(&[&eb, &ea], 2, "third key", true);
    std::thread::sleep(Duration::from_millis(100));
    done.store(true, Ordering::Relaxed);
    let (a, sent) = sender.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (b, received) = receiver.join().unwrap();
    assert!(sent > 1000, "only {sent} messages sent");
    assert_eq!(received, sent, "every message delivered once, in order");
    for p in [&a, &b] {
        let c = p.counters();
        assert_eq!(c.refused.total(), 0, "refused: {:?}", c.refused);
    }
    println!("rollover under traffic: {sent} messages sent, {received} delivered in order");
    drop((a, b));
    ea.shutdown();
    eb.shutdown();
}

#[test]
fn a_node_left_with_the_retired_key_is_refused_and_counted() {
    let sealed = sealed_cluster();
    let (e1, e2) = (engine(sealed.clone()), engine(sealed.clone()));
    // Keeps the old key: it was down during the rollover.
    let stale = engine(sealed);
    // The new key's id with other key bytes.
    let forger = engine(ClusterConfig {
        key_id: 1,
        ..cluster().with_key("not the new key", true)
    });
    let mut p1 = Port::open_on(&e1, addr(62, 0, 1, 0), PortConfig::default()).unwrap();
    let mut p2 = Port::open_on(&e2, addr(62, 1, 1, 0), PortConfig::default()).unwrap();
    let mut old = Port::open_on(&stale, addr(62, 2, 1, 0), PortConfig::default()).unwrap();
    let mut bad = Port::open_on(&forger, addr(62, 2, 2, 0), PortConfig::default()).unwrap();
    let mut buf = [0u8; 64];
    // Before the rollover the stale node is one of us.
    old.send_datagram(p2.address(), b"before").unwrap();
    let r = p2.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"before");
    roll_over(&[&e1, &e2], 1, "the new key", true);
    p1.send(p2.address(), b"after").unwrap();
    let r = p2.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"after");
    for _ in 0..3 {
        old.send_datagram(p2.address(), b"stale").unwrap();
    }
    old.send(p2.address(), b"stale, reliable").unwrap();
    bad.send_datagram(p2.address(), b"forged").unwrap();
    assert!(
        wait_for(|| {
            let r = p2.counters().refused;
            r.unknown_key >= 4 && r.tag_mismatch >= 1
        }),
        "{:?}",
        p2.counters().refused
    );
    let r = p2.counters().refused;
    assert_eq!(r.total(), r.unknown_key + r.tag_mismatch, "{r:?}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        p2.try_recv(&mut buf).is_none(),
        "a refused packet delivered"
    );
    // The stale node refuses the new key's packets in turn.
    p2.send_datagram(old.address(), b"new").unwrap();
    assert!(wait_for(|| old.counters().refused.unknown_key >= 1));
    drop((p1, p2, old, bad));
    for e in [e1, e2, stale, forger] {
        e.shutdown();
    }
}

/// Group packets (one packet to every member) are sealed too, and a group keeps one total
/// order through a rollover in the middle of its traffic.
#[test]
fn a_group_runs_encrypted_and_through_a_rollover() {
    use txcast_port::GroupRecord;
    use txcast_proto::group::{GroupConfig, Method};
    let sealed = sealed_cluster();
    let engines: Vec<Engine> = (0..3).map(|_| engine(sealed.clone())).collect();
    let ports: Vec<Port> = (0..3)
        .map(|s| Port::open_on(&engines[s], addr(62, s as u16, 3, 0), PortConfig::default()))
        .collect::<Result<_, _>>()
        .unwrap();
    let cfg = || GroupConfig {
        group: 7,
        resilience: 1,
        method: Method::Pb,
        ..GroupConfig::default()
    };
    let a = ports[0].create_group(cfg()).unwrap();
    let b = ports[1]
        .join_group(cfg(), ports[0].address(), WAIT)
        .unwrap();
    let c = ports[2]
        .join_group(cfg(), ports[1].address(), WAIT)
        .unwrap();
    let rounds = 40u8;
    for i in 0..rounds {
        if i == rounds / 2 {
            roll_over(&engines.iter().collect::<Vec<_>>(), 1, "group key 2", true);
        }
        for (k, g) in [&a, &b, &c].iter().enumerate() {
            g.send_async(&[k as u8, i]).unwrap();
        }
    }
    let mut orders = Vec::new();
    for g in [&a, &b, &c] {
        g.wait_sent(rounds as u64, WAIT).unwrap();
        let mut got = Vec::new();
        while got.len() < 3 * rounds as usize {
            let d = g.receive(WAIT).expect("delivery");
            if let GroupRecord::Message { payload, .. } = d.what {
                got.push(payload);
            }
        }
        orders.push(got);
    }
    assert_eq!(orders[0], orders[1]);
    assert_eq!(orders[0], orders[2]);
    for k in 0..3u8 {
        let fifo: Vec<u8> = orders[0]
            .iter()
            .filter(|m| m[0] == k)
            .map(|m| m[1])
            .collect();
        assert_eq!(fifo, (0..rounds).collect::<Vec<_>>());
    }
    for p in &ports {
        assert_eq!(
            p.counters().refused.total(),
            0,
            "{:?}",
            p.counters().refused
        );
    }
    drop((a, b, c, ports));
    for e in engines {
        e.shutdown();
    }
}

/// With a key, datagrams and multicasts are numbered and a port refuses one from a peer that
/// has not shown it knows the port's incarnation (it could be a replay): the first datagram
/// and the first multicast to a peer never heard from still arrive, once each, sent again by
/// the sender once the peer's hello taught it the incarnation.
#[test]
fn with_a_key_a_first_datagram_and_a_first_multicast_arrive_once() {
    let keyed = cluster().with_key(PASSPHRASE, false);
    let (ea, eb) = (engine(keyed.clone()), engine(keyed));
    let mut a = Port::open_on(&ea, addr(60, 0, 2, 0), PortConfig::default()).unwrap();
    let mut b = Port::open_on(&eb, addr(60, 1, 2, 0), PortConfig::default()).unwrap();
    let mut c = Port::open_on(&eb, addr(60, 1, 2, 1), PortConfig::default()).unwrap();
    let txn = txcast_proto::TxnId(0xf1257);
    b.join_txn(txn).unwrap();
    let mut buf = vec![0u8; 4096];
    assert_eq!(
        a.multicast(txn, b.address(), &[1], b"first multicast")
            .unwrap(),
        1
    );
    let r = b.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"first multicast");
    assert_eq!(r.txn, Some(txn));
    a.send_datagram(c.address(), b"first datagram").unwrap();
    let r = c.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"first datagram");
    // Once each: nothing more arrives.
    std::thread::sleep(Duration::from_millis(200));
    assert!(b.try_recv(&mut buf).is_none());
    assert!(c.try_recv(&mut buf).is_none());
    let (rb, rc, ra) = (
        b.counters().replays,
        c.counters().replays,
        a.counters().replays,
    );
    // Each first copy was refused and answered with a request for a hello, which `a` answered.
    assert_eq!((rb.unconfirmed, rb.hellos_asked), (1, 1), "{rb:?}");
    assert_eq!((rc.unconfirmed, rc.hellos_asked), (1, 1), "{rc:?}");
    assert_eq!(ra.hellos_answered, 2, "{ra:?}");
    // Later traffic goes straight through.
    a.send_datagram(c.address(), b"second datagram").unwrap();
    let r = c.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"second datagram");
    assert_eq!(c.counters().replays.unconfirmed, 1);
    drop((a, b, c));
    ea.shutdown();
    eb.shutdown();
}
