//! An attacker on the wire (issue 23, part 3), against two ports of a keyed cluster on
//! loopback, each on its own engine: `a` sends `b` a stream of reliable messages while a
//! sniffer captures the packets. The attacker then sends, at every UDP socket the two listen
//! on, random datagrams, truncated and oversized packets, packets with a wrong or missing MAC,
//! with a broken checksum and of another cluster, and replays of the captured packets from
//! its own address; and, with `a`'s source address (a raw socket), replays of the captured
//! packets at once, after more traffic, and after `b` restarted. Checked: each refusal is
//! counted under its reason, exactly; nothing answers the attacker; a spoofed replay gets at
//! most one answer (to the address it names); `b` delivers every message of `a` exactly once
//! and in order, across its restart, and nothing else. Needs root (raw sockets): without it,
//! skipped with one line.

mod attack;

use attack::{
    garbage, raw_available, send_paced, v4, Captured, Rng, Sniffer, Spoofer, CLUSTER, PASSPHRASE,
};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use txcast_port::{ClusterConfig, Engine, EngineConfig, Port, PortConfig, PortCounters, Refusals};
use txcast_proto::wire::Kind;
use txcast_proto::Address;

const WAIT: Duration = Duration::from_secs(10);

/// A cluster of its own: its own id (so its segments' directory), ports below any other
/// test's (base 10,000, four servers of each type).
fn cluster() -> ClusterConfig {
    ClusterConfig {
        cluster: CLUSTER,
        base_port: 10_000,
        server_types_max: 16,
        server_instances_max: 4,
        key_passphrase: Some(PASSPHRASE.into()),
        ..ClusterConfig::default()
    }
}

fn engine() -> Engine {
    Engine::start(EngineConfig {
        cluster: cluster(),
        ..EngineConfig::default()
    })
    .unwrap()
}

/// Receives `n` messages at `port` and checks they are `tag {from}`, `tag {from+1}`, ...
fn expect_stream(port: &mut Port, tag: &str, from: usize, n: usize) {
    let mut buf = vec![0u8; 4096];
    for i in from..from + n {
        let r = port
            .recv_timeout(&mut buf, Some(WAIT))
            .unwrap_or_else(|e| panic!("message {tag} {i}: {e:?}"));
        assert_eq!(
            std::str::from_utf8(&buf[..r.len]).unwrap(),
            format!("{tag} {i}"),
            "out of order or repeated"
        );
    }
}

/// Nothing more arrives at `port` within a while.
fn expect_silence(port: &mut Port) {
    let mut buf = vec![0u8; 4096];
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        if let Some(r) = port.try_recv(&mut buf) {
            panic!(
                "delivered beyond the stream: {:?}",
                String::from_utf8_lossy(&buf[..r.len])
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn send_stream(port: &mut Port, to: Address, tag: &str, from: usize, n: usize) {
    for i in from..from + n {
        port.send(to, format!("{tag} {i}").as_bytes()).unwrap();
    }
}

/// Waits until `port` has read `n` more datagrams than `before` says.
fn await_received(port: &Port, before: &PortCounters, n: u64) {
    let until = Instant::now() + WAIT;
    while port.counters().packets_received < before.packets_received + n {
        assert!(
            Instant::now() < until,
            "only {} of {n} datagrams were read",
            port.counters().packets_received - before.packets_received
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn diff(now: &Refusals, before: &Refusals) -> Refusals {
    Refusals {
        malformed: now.malformed - before.malformed,
        checksum: now.checksum - before.checksum,
        wrong_cluster: now.wrong_cluster - before.wrong_cluster,
        mac_missing: now.mac_missing - before.mac_missing,
        mac_mismatch: now.mac_mismatch - before.mac_mismatch,
        mac_unexpected: now.mac_unexpected - before.mac_unexpected,
        body: now.body - before.body,
        unknown_key: now.unknown_key - before.unknown_key,
        tag_mismatch: now.tag_mismatch - before.tag_mismatch,
        wrong_mode: now.wrong_mode - before.wrong_mode,
    }
}

fn is_kind(c: &Captured, kind: Kind) -> bool {
    c.payload.len() > 3 && c.payload[3] == kind as u8
}

#[test]
fn an_attacker_on_the_wire_is_refused_counted_and_changes_no_delivery() {
    if !raw_available() {
        println!("attack_wire: skipped, raw sockets need root (CAP_NET_RAW)");
        return;
    }
    let (ea, eb) = (engine(), engine());
    let (addr_a, addr_b) = (Address::new(1, 0, 1, 0), Address::new(1, 1, 1, 0));
    let sa = v4(cluster().socket_addr(addr_a).unwrap());
    let sb = v4(cluster().socket_addr(addr_b).unwrap());
    let mut a = Port::open_on(&ea, addr_a, PortConfig::default()).unwrap();
    let mut b = Port::open_on(&eb, addr_b, PortConfig::default()).unwrap();

    // The workload, captured.
    let sniffer =
        Sniffer::start(move |c| (c.from == sa && c.to == sb) || (c.from == sb && c.to == sa))
            .unwrap();
    send_stream(&mut a, addr_b, "first", 0, 300);
    expect_stream(&mut b, "first", 0, 300);
    a.flush(WAIT).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let captured = sniffer.finish();
    let a_to_b: Vec<Vec<u8>> = captured
        .iter()
        .filter(|c| c.from == sa)
        .map(|c| c.payload.clone())
        .collect();
    let b_to_a: Vec<Vec<u8>> = captured
        .iter()
        .filter(|c| c.from == sb)
        .map(|c| c.payload.clone())
        .collect();
    let data = captured
        .iter()
        .filter(|c| c.from == sa && is_kind(c, Kind::Data))
        .count();
    assert!(
        data >= 2,
        "captured {} packets, {data} DATA",
        captured.len()
    );
    let sample = captured
        .iter()
        .find(|c| c.from == sa && is_kind(c, Kind::Data))
        .unwrap()
        .payload
        .clone();

    // Garbage of every kind, and unspoofed replays, at both sockets.
    let attacker = UdpSocket::bind("127.0.0.9:0").unwrap();
    let mut rng = Rng(0x23_23_23);
    let mut sent_total = 0u64;
    let mut refused_total = Refusals::default();
    for (port, to) in [(&a, sa), (&b, sb)] {
        let (junk, want) = garbage(&sample, &mut rng);
        let before = port.counters();
        send_paced(&attacker, SocketAddr::V4(to), &junk);
        send_paced(&attacker, SocketAddr::V4(to), &a_to_b);
        let n = (junk.len() + a_to_b.len()) as u64;
        await_received(port, &before, n);
        let after = port.counters();
        let got = diff(&after.refused, &before.refused);
        assert_eq!(got, want, "refusals by reason at {to}");
        assert_eq!(after.dropped_bad - before.dropped_bad, want.total());
        assert_eq!(
            after.dropped_misaddressed - before.dropped_misaddressed,
            a_to_b.len() as u64,
            "valid packets from the attacker's own address"
        );
        sent_total += n;
        let r = &mut refused_total;
        r.malformed += got.malformed;
        r.checksum += got.checksum;
        r.wrong_cluster += got.wrong_cluster;
        r.mac_missing += got.mac_missing;
        r.mac_mismatch += got.mac_mismatch;
        r.body += got.body;
        r.unknown_key += got.unknown_key;
        r.tag_mismatch += got.tag_mismatch;
        r.wrong_mode += got.wrong_mode;
    }
    std::thread::sleep(Duration::from_millis(100));
    attacker.set_nonblocking(true).unwrap();
    let mut answers = 0;
    let mut buf = vec![0u8; 65536];
    while attacker.recv_from(&mut buf).is_ok() {
        answers += 1;
    }
    assert_eq!(answers, 0, "datagrams sent back to the attacker");
    expect_silence(&mut b);

    // Spoofed replays: as if from `a` (b's answers go to a, not to the attacker).
    let spoofer = Spoofer::new().unwrap();
    let replay = |to_b: bool| {
        let (list, from, to) = if to_b {
            (&a_to_b, sa, sb)
        } else {
            (&b_to_a, sb, sa)
        };
        for (i, p) in list.iter().enumerate() {
            spoofer.send(from, to, p).unwrap();
            if i % 16 == 15 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    let mut replayed = 0u64;
    // At once: refused by sequence numbers.
    let (b0, a0) = (b.counters(), a.counters());
    replay(true);
    replay(false);
    await_received(&b, &b0, a_to_b.len() as u64);
    await_received(&a, &a0, b_to_a.len() as u64);
    replayed += (a_to_b.len() + b_to_a.len()) as u64;
    expect_silence(&mut b);
    let b1 = b.counters();
    let duplicates = b1.links.duplicates_dropped - b0.links.duplicates_dropped;
    assert!(duplicates >= 300, "{duplicates} duplicates dropped");
    // The answers: at most one per replayed packet, to `a`.
    let answers_at_once = b1.packets_sent - b0.packets_sent;
    assert!(answers_at_once <= a_to_b.len() as u64);

    // Later, after more of the stream.
    send_stream(&mut a, addr_b, "second", 0, 100);
    expect_stream(&mut b, "second", 0, 100);
    a.flush(WAIT).unwrap();
    let b2c = b.counters();
    replay(true);
    await_received(&b, &b2c, a_to_b.len() as u64);
    replayed += a_to_b.len() as u64;
    expect_silence(&mut b);
    let answers_later = b.counters().packets_sent - b2c.packets_sent;
    assert!(answers_later <= a_to_b.len() as u64);

    // After `b` restarted (a new incarnation with no link state): the replays name b's old
    // incarnation, or none, and are refused; the stream goes on with the new messages only.
    let old_incarnation = b.incarnation();
    drop(b);
    let mut b = Port::open_on(&eb, addr_b, PortConfig::default()).unwrap();
    assert!(b.incarnation() > old_incarnation);
    let b3 = b.counters();
    replay(true);
    await_received(&b, &b3, a_to_b.len() as u64);
    replayed += a_to_b.len() as u64;
    expect_silence(&mut b);
    let b4 = b.counters();
    assert_eq!(b4.received, 0);
    let unconfirmed = b4.links.unconfirmed_dropped;
    assert_eq!(unconfirmed, data as u64, "every replayed DATA refused");
    let answers_restart = b4.packets_sent - b3.packets_sent;
    assert!(answers_restart <= a_to_b.len() as u64);
    send_stream(&mut a, addr_b, "third", 0, 100);
    expect_stream(&mut b, "third", 0, 100);
    a.flush(WAIT).unwrap();
    expect_silence(&mut b);
    assert_eq!(b.counters().received, 100);

    println!(
        "attack_wire: {sent_total} garbage and unspoofed packets at 2 sockets, refused as \
         malformed {}, checksum {}, wrong cluster {}, MAC missing {}, MAC mismatch {}, \
         unknown key id {}, wrong mode {}, body {}; {} misaddressed (valid, from the attacker's address); {answers} answers \
         to the attacker",
        refused_total.malformed,
        refused_total.checksum,
        refused_total.wrong_cluster,
        refused_total.mac_missing,
        refused_total.mac_mismatch,
        refused_total.unknown_key,
        refused_total.wrong_mode,
        refused_total.body,
        2 * a_to_b.len(),
    );
    println!(
        "attack_wire: {replayed} spoofed replays of {} captured packets ({data} DATA): \
         {duplicates} duplicate messages dropped, {unconfirmed} DATA refused by the restarted \
         receiver; answers to the named source: {answers_at_once} at once, {answers_later} \
         later, {answers_restart} after the restart; messages delivered 300 + 100 + 100, \
         each once",
        captured.len(),
    );
    drop((a, b));
    ea.shutdown();
    eb.shutdown();
}

/// Reads group deliveries until `n` messages arrived (views and other records skipped).
fn group_messages(g: &txcast_port::Group, n: usize) -> Vec<(Address, Vec<u8>)> {
    let mut out = Vec::new();
    while out.len() < n {
        let d = g.receive(Some(WAIT)).expect("delivery");
        if let txcast_port::GroupRecord::Message { payload, .. } = d.what {
            out.push((d.sender, payload));
        }
    }
    out
}

/// A sequencer group of three keyed members, each on its own engine, exchanges messages
/// while the sniffer captures every packet between them; the attacker replays all of them,
/// each with its original source address. Then each member sends more: every member
/// delivers the new messages once, in one order, and none of the old ones again.
#[test]
fn replayed_group_traffic_is_not_delivered_again() {
    use txcast_proto::group::GroupConfig;
    if !raw_available() {
        println!("attack_wire: skipped, raw sockets need root (CAP_NET_RAW)");
        return;
    }
    let engines: Vec<Engine> = (0..3).map(|_| engine()).collect();
    let addrs: Vec<Address> = (0..3).map(|s| Address::new(3, s, 2, 0)).collect();
    let socks: Vec<_> = addrs
        .iter()
        .map(|&a| v4(cluster().socket_addr(a).unwrap()))
        .collect();
    let ports: Vec<Port> = (0..3)
        .map(|i| Port::open_on(&engines[i], addrs[i], PortConfig::default()).unwrap())
        .collect();
    let among = socks.clone();
    let sniffer =
        Sniffer::start(move |c| among.contains(&c.from) && among.contains(&c.to)).unwrap();
    let cfg = GroupConfig {
        group: 9,
        resilience: 1,
        ..GroupConfig::default()
    };
    let a = ports[0].create_group(cfg.clone()).unwrap();
    let b = ports[1]
        .join_group(cfg.clone(), addrs[0], Some(WAIT))
        .unwrap();
    let c = ports[2].join_group(cfg, addrs[0], Some(WAIT)).unwrap();
    let members = [&a, &b, &c];
    let round = |tag: u8| {
        for (k, g) in members.iter().enumerate() {
            for i in 0..20u8 {
                g.send_async(&[tag, k as u8, i]).unwrap();
            }
        }
        for g in members {
            g.wait_sent(20, Some(WAIT)).unwrap();
        }
        let logs: Vec<_> = members.iter().map(|g| group_messages(g, 60)).collect();
        for l in &logs {
            assert_eq!(l, &logs[0], "one order");
            assert!(
                l.iter().all(|m| m.1[0] == tag),
                "an old message delivered again"
            );
            let mut seen: Vec<_> = l.iter().map(|m| (m.1[1], m.1[2])).collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), 60, "a message delivered twice");
        }
    };
    round(1);
    std::thread::sleep(Duration::from_millis(100));
    let captured = sniffer.finish();
    let group_packets = captured.iter().filter(|c| is_kind(c, Kind::Group)).count();
    assert!(group_packets >= 10, "{} captured", captured.len());
    let sum = |f: fn(&txcast_proto::group::GroupCounters) -> u64| -> u64 {
        members.iter().map(|g| f(&g.info().counters)).sum()
    };
    let (received0, dup0) = (sum(|c| c.packets_received), sum(|c| c.duplicates));
    let spoofer = Spoofer::new().unwrap();
    for (i, p) in captured.iter().enumerate() {
        spoofer.send(p.from, p.to, &p.payload).unwrap();
        if i % 16 == 15 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    // The replays reached the group protocol (the engine took them as genuine) and were
    // refused there.
    let received = sum(|c| c.packets_received) - received0;
    let duplicates = sum(|c| c.duplicates) - dup0;
    assert!(
        received >= group_packets as u64,
        "{received} of {group_packets} reached"
    );
    assert!(duplicates > 0);
    round(2);
    // Nothing more: no old message comes late.
    std::thread::sleep(Duration::from_millis(300));
    for g in members {
        while let Ok(d) = g.receive(Some(Duration::from_millis(1))) {
            if let txcast_port::GroupRecord::Message { payload, .. } = d.what {
                panic!("delivered beyond the rounds: {payload:?}");
            }
        }
    }
    println!(
        "attack_wire: {} packets of a group of three replayed ({group_packets} GROUP, \
         {received} taken in by the members' group protocol, {duplicates} duplicates refused \
         there); no message delivered again",
        captured.len()
    );
    drop((a, b, c, ports));
    for e in engines {
        e.shutdown();
    }
}

/// Every message `port` receives within `for_`, as text.
fn drain(port: &mut Port, for_: Duration) -> Vec<String> {
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    let until = Instant::now() + for_;
    while Instant::now() < until {
        match port.try_recv(&mut buf) {
            Some(r) => got.push(String::from_utf8_lossy(&buf[..r.len]).into_owned()),
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    got
}

/// Sends `a` → `b` datagrams tagged `probe` until one arrives: the two know each other's
/// incarnations (a datagram sent before that is refused, as it may be a replay).
fn until_acquainted(a: &mut Port, b: &mut Port) {
    let until = Instant::now() + WAIT;
    loop {
        a.send_datagram(b.address(), b"probe").unwrap();
        if drain(b, Duration::from_millis(20))
            .iter()
            .any(|m| m == "probe")
        {
            return;
        }
        assert!(Instant::now() < until, "no datagram got through");
    }
}

/// `n` datagrams and `n` multicasts (transaction `txn`) from `a` to `b`, tagged `tag`; the
/// messages they carry.
fn datagrams_and_multicasts(
    a: &mut Port,
    b: Address,
    txn: txcast_proto::TxnId,
    tag: &str,
    n: usize,
) -> Vec<String> {
    let mut sent = Vec::new();
    for i in 0..n {
        let d = format!("{tag} datagram {i}");
        a.send_datagram(b, d.as_bytes()).unwrap();
        let m = format!("{tag} multicast {i}");
        assert_eq!(a.multicast(txn, b, &[b.site], m.as_bytes()).unwrap(), 1);
        sent.push(d);
        sent.push(m);
        if i % 8 == 7 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    sent.sort();
    sent
}

/// With a cluster key, datagrams and transaction multicasts captured on the wire and replayed
/// with their source's address are not delivered again: at once, after more traffic, and
/// after the receiver restarted and joined the same transaction again (the replay windows
/// of `txcast_proto::replay`). The receiver answers replays with at most one hello per source
/// per interval, to the source they name.
#[test]
fn replayed_datagrams_and_multicasts_are_not_delivered_again() {
    use txcast_proto::TxnId;
    if !raw_available() {
        println!("attack_wire: skipped, raw sockets need root (CAP_NET_RAW)");
        return;
    }
    let (ea, eb) = (engine(), engine());
    let (addr_a, addr_b) = (Address::new(4, 0, 1, 0), Address::new(4, 1, 1, 0));
    let sa = v4(cluster().socket_addr(addr_a).unwrap());
    let sb = v4(cluster().socket_addr(addr_b).unwrap());
    let mut a = Port::open_on(&ea, addr_a, PortConfig::default()).unwrap();
    let mut b = Port::open_on(&eb, addr_b, PortConfig::default()).unwrap();
    let txn = TxnId(0x7e57);
    b.join_txn(txn).unwrap();
    let sniffer =
        Sniffer::start(move |c| (c.from == sa && c.to == sb) || (c.from == sb && c.to == sa))
            .unwrap();
    until_acquainted(&mut a, &mut b);
    let sent = datagrams_and_multicasts(&mut a, addr_b, txn, "first", 40);
    let mut got = drain(&mut b, Duration::from_millis(300));
    got.sort();
    assert_eq!(got, sent, "loopback lost or repeated a message");
    let captured = sniffer.finish();
    let a_to_b: Vec<Vec<u8>> = captured
        .iter()
        .filter(|c| c.from == sa && (is_kind(c, Kind::Datagram) || is_kind(c, Kind::Multicast)))
        .map(|c| c.payload.clone())
        .collect();
    assert!(a_to_b.len() >= 80, "captured {}", a_to_b.len());
    let spoofer = Spoofer::new().unwrap();
    let replay = || {
        for (i, p) in a_to_b.iter().enumerate() {
            spoofer.send(sa, sb, p).unwrap();
            if i % 16 == 15 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    let refused = |p: &Port| {
        let r = p.counters().replays;
        r.unnumbered + r.unconfirmed + r.old_incarnation + r.duplicate + r.too_old
    };

    // At once, and later after more traffic: every replay refused by the window.
    let (b0, r0) = (b.counters(), refused(&b));
    replay();
    await_received(&b, &b0, a_to_b.len() as u64);
    assert_eq!(
        drain(&mut b, Duration::from_millis(200)),
        Vec::<String>::new()
    );
    assert_eq!(
        refused(&b) - r0,
        a_to_b.len() as u64,
        "each replay refused once"
    );
    let answers_at_once = b.counters().packets_sent - b0.packets_sent;
    let sent = datagrams_and_multicasts(&mut a, addr_b, txn, "second", 20);
    let mut got = drain(&mut b, Duration::from_millis(300));
    got.sort();
    assert_eq!(got, sent);
    let (b1, r1) = (b.counters(), refused(&b));
    replay();
    await_received(&b, &b1, a_to_b.len() as u64);
    assert_eq!(
        drain(&mut b, Duration::from_millis(200)),
        Vec::<String>::new()
    );
    assert_eq!(refused(&b) - r1, a_to_b.len() as u64);
    let answers_later = b.counters().packets_sent - b1.packets_sent;

    // After `b` restarted and joined the same transaction: the datagrams name its old
    // incarnation and the multicasts come from a source it has no window for; its hellos
    // make one above them.
    let old = b.incarnation();
    drop(b);
    let mut b = Port::open_on(&eb, addr_b, PortConfig::default()).unwrap();
    assert!(b.incarnation() > old);
    b.join_txn(txn).unwrap();
    for round in 0..2 {
        let b2 = b.counters();
        replay();
        await_received(&b, &b2, a_to_b.len() as u64);
        let late = drain(&mut b, Duration::from_millis(200));
        assert_eq!(
            late,
            Vec::<String>::new(),
            "replay round {round} after the restart"
        );
        let r = b.counters().replays;
        assert_eq!(
            r.unconfirmed + r.too_old + r.duplicate
                - b2.replays.unconfirmed
                - b2.replays.too_old
                - b2.replays.duplicate,
            a_to_b.len() as u64
        );
    }
    let restarted = b.counters();
    assert_eq!(restarted.received, 0);
    // The hellos: at most one per replayed packet.
    assert!(restarted.packets_sent <= 2 * a_to_b.len() as u64);
    until_acquainted(&mut a, &mut b);
    let sent = datagrams_and_multicasts(&mut a, addr_b, txn, "third", 20);
    let mut got = drain(&mut b, Duration::from_millis(300));
    got.sort();
    assert_eq!(got, sent);
    let r = b.counters().replays;
    println!(
        "attack_wire: {} datagrams and multicasts replayed 4 times (twice to a restarted \
         receiver that joined the same transaction again): none delivered again; refused by \
         the restarted receiver as unconfirmed {}, too old {}, duplicate {}; hellos asked {}; \
         answers to the named source {answers_at_once} at once, {answers_later} later, {} \
         after the restart",
        a_to_b.len(),
        r.unconfirmed,
        r.too_old,
        r.duplicate,
        r.hellos_asked,
        restarted.packets_sent,
    );
    drop((a, b));
    ea.shutdown();
    eb.shutdown();
}
