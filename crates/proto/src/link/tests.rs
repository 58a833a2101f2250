use super::*;
use crate::wire::{ClusterKey, KeyRing, Packet, PacketKey, WireError};

fn pair(cfg: LinkConfig) -> (Link, Link) {
    let a = Address::new(0, 0, 1, 0);
    let b = Address::new(0, 1, 1, 0);
    (
        Link::new(cfg.clone(), a, b, 9, 1, None).unwrap(),
        Link::new(cfg, b, a, 9, 1, None).unwrap(),
    )
}

/// Moves every packet from `from` to `to`, dropping those `drop` picks; returns packets moved.
fn pump(
    now: Instant,
    from: &mut Link,
    to: &mut Link,
    mut drop: impl FnMut(usize) -> bool,
) -> usize {
    let mut buf = vec![0u8; from.config().packet_bytes_max];
    let mut n = 0;
    while let Some(len) = from.poll_transmit(now, &mut buf) {
        if !drop(n) {
            to.handle_packet(now, &Packet::parse(&buf[..len], 9, None).unwrap())
                .unwrap();
        }
        n += 1;
    }
    n
}

fn drain(l: &mut Link) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(m) = l.poll_delivery(|m| m.to_vec()) {
        out.push(m);
    }
    out
}

#[test]
fn oversize_is_rejected_and_full_is_back_pressure() {
    let cfg = LinkConfig {
        window_msgs: 4,
        send_buffer_msgs: 8,
        recv_buffer_msgs: 64,
        message_bytes_max: 8000,
        ..LinkConfig::default()
    };
    let (mut a, _b) = pair(cfg);
    let t = Instant::ZERO;
    assert_eq!(
        a.send(t, &[0u8; 8001]),
        Err(LinkSendError::TooLong {
            len: 8001,
            max: 8000
        })
    );
    for _ in 0..8 {
        a.send(t, b"m").unwrap();
    }
    assert_eq!(a.send(t, b"m"), Err(LinkSendError::Full));
    assert_eq!(a.counters().send_full, 1);
}

#[test]
fn packs_waiting_messages_and_fragments_long_ones() {
    let (mut a, mut b) = pair(LinkConfig::default());
    let t = Instant::ZERO;
    for i in 0..10u8 {
        a.send(t, &[i; 20]).unwrap();
    }
    let long: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    a.send(t, &long).unwrap();
    let packets = pump(t, &mut a, &mut b, |_| false);
    assert!(
        packets < 6,
        "ten small messages share a packet, took {packets}"
    );
    let got = drain(&mut b);
    assert_eq!(got.len(), 11);
    assert_eq!(got[3], vec![3u8; 20]);
    assert_eq!(got[10], long);
}

#[test]
fn nak_recovers_a_lost_packet_without_waiting_for_the_timeout() {
    let cfg = LinkConfig {
        pack: PackMode::Off,
        ..LinkConfig::default()
    };
    let (mut a, mut b) = pair(cfg);
    let t = Instant::ZERO;
    for i in 0..5u8 {
        a.send(t, &[i]).unwrap();
    }
    pump(t, &mut a, &mut b, |n| n == 1); // lose the second
    assert_eq!(drain(&mut b), vec![vec![0u8]]);
    pump(t, &mut b, &mut a, |_| false); // the NAK
    assert_eq!(a.counters().naks_received, 1);
    pump(t, &mut a, &mut b, |_| false); // the retransmission
    assert_eq!(a.counters().rto_fired, 0);
    assert_eq!(drain(&mut b).len(), 4);
}

#[test]
fn timeout_recovers_a_lost_tail() {
    let (mut a, mut b) = pair(LinkConfig::default());
    let t = Instant::ZERO;
    a.send(t, b"only").unwrap();
    pump(t, &mut a, &mut b, |_| true);
    let due = a.poll_timeout().expect("retransmission timer armed");
    a.handle_timeout(due);
    assert_eq!(a.counters().rto_fired, 1);
    pump(due, &mut a, &mut b, |_| false);
    assert_eq!(drain(&mut b), vec![b"only".to_vec()]);
}

#[test]
fn an_ack_for_messages_never_sent_is_dropped_and_counted() {
    let (a, mut b) = pair(LinkConfig::default());
    let t = Instant::ZERO;
    b.send(t, b"x").unwrap();
    let mut buf = vec![0u8; 1472];
    let h = PacketHeader {
        kind: Kind::Ack,
        flags: 0,
        cluster: 9,
        incarnation: 1,
        source: b.peer(),
        destination: a.peer(),
    };
    let len = crate::wire::AckWriter::write(&mut buf, h, None, (1000, 1), 10, &[]);
    b.handle_packet(t, &Packet::parse(&buf[..len], 9, None).unwrap())
        .unwrap();
    assert_eq!(b.counters().bogus_acks_dropped, 1);
    assert!(!b.is_idle());
}

#[test]
fn a_restarted_receiver_gets_everything_unacknowledged() {
    let cfg = LinkConfig::default();
    let (mut a, mut b) = pair(cfg.clone());
    let t = Instant::ZERO;
    a.send(t, b"one").unwrap();
    pump(t, &mut a, &mut b, |_| false);
    assert_eq!(drain(&mut b).len(), 1);
    let later = b.poll_timeout().unwrap();
    pump(later, &mut b, &mut a, |_| false); // the delayed ACK: a knows incarnation 1
    a.send(t, b"two").unwrap();
    pump(t, &mut a, &mut b, |_| true); // lost, and then b restarts
    let mut b2 = Link::new(cfg, b.header.source, a.header.source, 9, 2, None).unwrap();
    b2.send(t, b"hello from the new incarnation").unwrap();
    pump(t, &mut b2, &mut a, |_| false);
    assert_eq!(a.counters().peer_restarts, 1);
    pump(t, &mut a, &mut b2, |_| false);
    assert_eq!(drain(&mut b2), vec![b"two".to_vec()]);
}

#[test]
fn a_malformed_body_changes_nothing_and_is_reported() {
    let (mut a, mut b) = pair(LinkConfig::default());
    let t = Instant::ZERO;
    a.send(t, b"x").unwrap();
    let mut buf = vec![0u8; 1472];
    let len = a.poll_transmit(t, &mut buf).unwrap();
    // A DATA packet whose base lies above its first sequence number, re-checksummed so that
    // only the body rule is broken; and from a "new incarnation", which must not reset state.
    let mut bad = buf[..len].to_vec();
    bad[crate::wire::HEADER_BYTES + 8] = 9;
    bad[8] = 77;
    let sum = {
        let mut h = crc32fast::Hasher::new();
        h.update(&bad[..36]);
        h.update(&bad[40..]);
        h.finalize()
    };
    bad[36..40].copy_from_slice(&sum.to_le_bytes());
    let p = Packet::parse(&bad, 9, None).unwrap();
    assert_eq!(b.handle_packet(t, &p), Err(WireError::BaseAboveFirst));
    assert_eq!(b.counters().peer_restarts, 0);
    b.handle_packet(t, &Packet::parse(&buf[..len], 9, None).unwrap())
        .unwrap();
    assert_eq!(drain(&mut b), vec![b"x".to_vec()]);
}

#[test]
fn traffic_from_an_earlier_incarnation_is_refused_after_a_restart() {
    let cfg = LinkConfig::default();
    let (mut old, mut b) = pair(cfg.clone());
    let t = Instant::ZERO;
    // The old incarnation (1) sends a message b never sees yet.
    old.send(t, b"from the past").unwrap();
    let mut buf = vec![0u8; 1472];
    let stale = old.poll_transmit(t, &mut buf).unwrap();
    let stale = buf[..stale].to_vec();
    // The restarted peer (incarnation 2) talks to b first.
    let mut new = Link::new(cfg, old.header.source, old.header.destination, 9, 2, None).unwrap();
    new.send(t, b"fresh").unwrap();
    pump(t, &mut new, &mut b, |_| false);
    assert_eq!(drain(&mut b), vec![b"fresh".to_vec()]);
    // Now the predecessor's delayed packet arrives: dropped and counted, never delivered.
    b.handle_packet(t, &Packet::parse(&stale, 9, None).unwrap())
        .unwrap();
    assert_eq!(b.counters().stale_incarnation_dropped, 1);
    assert!(drain(&mut b).is_empty());
}

#[test]
fn a_peer_restart_keeps_what_arrived_in_order_and_never_panics_on_a_partial_message() {
    let cfg = LinkConfig::default();
    let (mut a, mut b) = pair(cfg.clone());
    let t = Instant::ZERO;
    a.send(t, b"acked but not yet taken").unwrap();
    a.send(t, &vec![7u8; 5000]).unwrap(); // fragmented
                                          // Deliver the first message and only the first fragment of the second.
    pump(t, &mut a, &mut b, |n| n >= 2);
    // The sender restarts before the application took anything.
    let mut a2 = Link::new(cfg, a.header.source, a.header.destination, 9, 2, None).unwrap();
    // b learns of the restart from a bare ACK (no DATA to resynchronise on).
    b.send(t, b"to the new one").unwrap();
    pump(t, &mut b, &mut a2, |_| false);
    let later = a2.poll_timeout().unwrap();
    pump(later, &mut a2, &mut b, |_| false);
    assert_eq!(b.counters().peer_restarts, 1);
    assert_eq!(drain(&mut b), vec![b"acked but not yet taken".to_vec()]);
    a2.send(t, b"new stream").unwrap();
    pump(later, &mut a2, &mut b, |_| false);
    assert_eq!(drain(&mut b), vec![b"new stream".to_vec()]);
}

/// A DATA packet as a forger would write it (valid checksum, chosen fields).
fn forged_data(from: Address, to: Address, inc: u64, first: u64, base: u64, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; 1472];
    let h = PacketHeader {
        kind: Kind::Data,
        flags: 0,
        cluster: 9,
        incarnation: inc,
        source: from,
        destination: to,
    };
    let mut w = crate::wire::PacketWriter::data(&mut buf, h, None, first, base, (0, 0), 0);
    for _ in 0..n {
        assert!(w.push(b"evil"));
    }
    let len = w.finish();
    buf.truncate(len);
    buf
}

/// Runs both links for a while with timers, moving every packet.
fn converse(mut now: Instant, a: &mut Link, b: &mut Link, rounds: usize) -> Instant {
    for _ in 0..rounds {
        now = now + core::time::Duration::from_millis(5);
        a.handle_timeout(now);
        b.handle_timeout(now);
        pump(now, a, b, |_| false);
        pump(now, b, a, |_| false);
    }
    now
}

/// Review finding: a restarted sender took an acknowledgement meant for its predecessor
/// (the peer's next DATA still acknowledged the old stream) and lost its own messages.
#[test]
fn a_restarted_sender_ignores_acknowledgements_meant_for_its_predecessor() {
    let cfg = LinkConfig::default();
    let (mut a, mut b) = pair(cfg.clone());
    let t = Instant::ZERO;
    for i in 0..10u8 {
        a.send(t, &[i]).unwrap();
    }
    pump(t, &mut a, &mut b, |_| false);
    assert_eq!(drain(&mut b).len(), 10);
    let mut a2 = Link::new(cfg, a.header.source, a.header.destination, 9, 2, None).unwrap();
    for i in 0..10u8 {
        a2.send(t, &[100 + i]).unwrap();
    }
    pump(t, &mut a2, &mut b, |_| true); // the new stream's first packet is lost
    b.send(t, b"hi").unwrap(); // carries ack = 10 for incarnation 1
    pump(t, &mut b, &mut a2, |_| false);
    assert!(
        !a2.is_idle(),
        "an acknowledgement for incarnation 1 freed incarnation 2's messages"
    );
    converse(t, &mut a2, &mut b, 100);
    assert_eq!(
        drain(&mut b),
        (100..110u8).map(|i| vec![i]).collect::<Vec<_>>()
    );
}

/// Review finding: one forged DATA packet with a base far ahead jumped the receiver's stream,
/// after which every real packet was a "duplicate" and the link was wedged for good.
#[test]
fn a_forged_base_far_ahead_is_dropped_and_the_link_goes_on() {
    let (mut a, mut b) = pair(LinkConfig::default());
    let t = Instant::ZERO;
    a.send(t, b"one").unwrap();
    pump(t, &mut a, &mut b, |_| false);
    drain(&mut b);
    let evil = forged_data(
        a.header.source,
        a.header.destination,
        1,
        1 << 40,
        1 << 40,
        1,
    );
    b.handle_packet(t, &Packet::parse(&evil, 9, None).unwrap())
        .unwrap();
    assert_eq!(b.counters().protocol_violations, 1);
    assert!(drain(&mut b).is_empty());
    for i in 0..50u8 {
        a.send(t, &[i]).unwrap();
    }
    converse(t, &mut a, &mut b, 20);
    assert_eq!(drain(&mut b).len(), 50);
}

/// Review finding: sequence numbers near u64::MAX overflowed the receiver's arithmetic.
#[test]
fn sequence_numbers_at_the_top_of_the_space_are_refused_not_added() {
    let (a, mut b) = pair(LinkConfig::default());
    let evil = forged_data(
        a.header.source,
        a.header.destination,
        1,
        u64::MAX - 1,
        u64::MAX - 1,
        3,
    );
    let p = Packet::parse(&evil, 9, None).unwrap();
    assert_eq!(
        b.handle_packet(Instant::ZERO, &p),
        Err(WireError::SequenceOutOfRange)
    );
}

/// Review finding: a clock-derived 32-bit incarnation wrapped after 24.8 days, and a peer
/// restarted after that looked older than its predecessor.
#[test]
fn incarnations_a_month_apart_order_correctly() {
    let start: u64 = 1_700_000_000_000;
    assert!(!incarnation_older(start + 25 * 86_400_000, start));
    assert!(incarnation_older(start, start + 25 * 86_400_000));
}

#[test]
fn a_silent_peer_is_declared_unreachable_and_recovers_on_its_first_ack() {
    let cfg = LinkConfig {
        unreachable_after_timeouts: 4,
        ..LinkConfig::default()
    };
    let (mut a, mut b) = pair(cfg);
    let mut now = Instant::ZERO;
    a.send(now, b"hello?").unwrap();
    pump(now, &mut a, &mut b, |_| true); // the peer is down: everything is lost
    for _ in 0..3 {
        now = a.poll_timeout().unwrap();
        a.handle_timeout(now);
        pump(now, &mut a, &mut b, |_| true);
    }
    assert!(!a.is_unreachable(), "three timeouts are not yet four");
    now = a.poll_timeout().unwrap();
    a.handle_timeout(now);
    assert!(a.is_unreachable());
    assert_eq!(a.counters().unreachable_declared, 1);
    // The peer comes back: the next retransmission gets through and its ACK clears the verdict.
    pump(now, &mut a, &mut b, |_| false);
    let later = b.poll_timeout().unwrap();
    pump(later, &mut b, &mut a, |_| false);
    assert!(!a.is_unreachable());
    assert_eq!(drain(&mut b), vec![b"hello?".to_vec()]);
}

fn keyed_pair(cfg: LinkConfig, key: &KeyRing) -> (Link, Link) {
    let a = Address::new(0, 0, 1, 0);
    let b = Address::new(0, 1, 1, 0);
    let k = key.send_key();
    (
        Link::new(cfg.clone(), a, b, 9, 1, Some(k.clone())).unwrap(),
        Link::new(cfg, b, a, 9, 1, Some(k.clone())).unwrap(),
    )
}

/// Moves every packet from `from` to `to` under `key`; returns the packets moved, as sent.
fn pump_keyed(now: Instant, from: &mut Link, to: &mut Link, key: &KeyRing) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; from.config().packet_bytes_max];
    let mut sent = Vec::new();
    while let Some(len) = from.poll_transmit(now, &mut buf) {
        sent.push(buf[..len].to_vec());
        to.handle_packet(now, &Packet::open(&mut buf[..len], 9, Some(key)).unwrap())
            .unwrap();
    }
    sent
}

/// With a cluster key, a receiver takes up a stream only from DATA naming its own
/// incarnation: the first contact costs one round trip, and everything arrives once.
#[test]
fn with_a_key_the_first_contact_takes_one_round_trip_and_delivers_everything_once() {
    let key = KeyRing::from(ClusterKey::from_passphrase("link test"));
    let (mut a, mut b) = keyed_pair(LinkConfig::default(), &key);
    let t = Instant::ZERO;
    for i in 0..5u8 {
        a.send(t, &[i]).unwrap();
    }
    pump_keyed(t, &mut a, &mut b, &key);
    assert!(
        drain(&mut b).is_empty(),
        "taken before naming b's incarnation"
    );
    assert_eq!(b.counters().unconfirmed_dropped, 1);
    let answers = pump_keyed(t, &mut b, &mut a, &key);
    assert_eq!(answers.len(), 1, "one ACK for the refused packet");
    pump_keyed(t, &mut a, &mut b, &key);
    assert_eq!(drain(&mut b), (0..5u8).map(|i| vec![i]).collect::<Vec<_>>());
    converse_keyed(t, &mut a, &mut b, &key, 10);
    assert!(a.is_idle());
    assert_eq!(b.counters().duplicates_dropped, 0);
}

fn converse_keyed(mut now: Instant, a: &mut Link, b: &mut Link, key: &KeyRing, rounds: usize) {
    for _ in 0..rounds {
        now = now + core::time::Duration::from_millis(5);
        a.handle_timeout(now);
        b.handle_timeout(now);
        pump_keyed(now, a, b, key);
        pump_keyed(now, b, a, key);
    }
}

/// Issue 23: a DATA packet captured on the wire and replayed to a receiver that restarted
/// (a new port, new incarnation, no link state) was taken up as the start of the stream and
/// delivered a second time. With a key it is refused; the sender's stream goes on.
#[test]
fn with_a_key_a_replay_after_the_receiver_restarted_is_not_delivered_again() {
    let key = KeyRing::from(ClusterKey::from_passphrase("link test"));
    let cfg = LinkConfig::default();
    let (mut a, mut b) = keyed_pair(cfg.clone(), &key);
    let t = Instant::ZERO;
    a.send(t, b"once").unwrap();
    let mut captured = pump_keyed(t, &mut a, &mut b, &key);
    pump_keyed(t, &mut b, &mut a, &key);
    captured.extend(pump_keyed(t, &mut a, &mut b, &key));
    assert_eq!(drain(&mut b), vec![b"once".to_vec()]);
    converse_keyed(t, &mut a, &mut b, &key, 5);
    assert!(a.is_idle());
    // Replayed at once and later: sequence numbers refuse them.
    for p in &captured {
        b.handle_packet(t, &Packet::parse(p, 9, Some(&key)).unwrap())
            .unwrap();
    }
    assert!(drain(&mut b).is_empty());
    // b restarts; the attacker replays every captured packet to the new incarnation.
    let mut b2 = Link::new(
        cfg,
        b.header.source,
        a.header.source,
        9,
        2,
        Some(key.send_key().clone()),
    )
    .unwrap();
    for p in &captured {
        b2.handle_packet(t, &Packet::parse(p, 9, Some(&key)).unwrap())
            .unwrap();
    }
    assert!(drain(&mut b2).is_empty(), "a replay was delivered again");
    assert_eq!(b2.counters().unconfirmed_dropped, captured.len() as u64);
    // The real sender's next message reaches the new incarnation, alone.
    a.send(t, b"after").unwrap();
    converse_keyed(t, &mut a, &mut b2, &key, 10);
    assert_eq!(drain(&mut b2), vec![b"after".to_vec()]);
    assert!(a.is_idle());
}

/// Without a key nothing changes: the first DATA is taken at once (forgery is possible
/// anyway, so the round trip would buy nothing).
#[test]
fn without_a_key_the_first_data_is_taken_at_once() {
    let (mut a, mut b) = pair(LinkConfig::default());
    a.send(Instant::ZERO, b"x").unwrap();
    pump(Instant::ZERO, &mut a, &mut b, |_| false);
    assert_eq!(drain(&mut b), vec![b"x".to_vec()]);
    assert_eq!(b.counters().unconfirmed_dropped, 0);
}

/// A key rollover in the middle of a stream, from a MAC-only key to a sealing one: packets
/// under both keys are in flight (some of the old key's arrive after both ends switched),
/// and every message arrives once and in order. After the retirement, the old key's packets
/// are refused by their key id.
#[test]
fn a_rollover_under_traffic_loses_and_duplicates_nothing() {
    let mut ring = KeyRing::from(ClusterKey::from_passphrase("old"));
    let (mut a, mut b) = keyed_pair(LinkConfig::default(), &ring);
    let mut t = Instant::ZERO;
    let mut got = Vec::new();
    let mut late = Vec::new();
    let msg = |i: u32| format!("message {i}").into_bytes();
    for i in 0..400u32 {
        t = t + core::time::Duration::from_millis(1);
        a.handle_timeout(t);
        b.handle_timeout(t);
        a.send(t, &msg(i)).unwrap();
        match i {
            100 => ring
                .install_next(PacketKey::new(1, ClusterKey::from_passphrase("new"), true))
                .unwrap(),
            200 => {
                // Sent under the old key and delayed past both ends' switch.
                let mut buf = vec![0u8; a.config().packet_bytes_max];
                while let Some(n) = a.poll_transmit(t, &mut buf) {
                    late.push(buf[..n].to_vec());
                }
                ring.switch().unwrap();
                a.set_send_key(ring.send_key().clone());
            }
            210 => b.set_send_key(ring.send_key().clone()),
            220 => {
                for p in &mut late.clone() {
                    b.handle_packet(t, &Packet::open(p, 9, Some(&ring)).unwrap())
                        .unwrap();
                }
            }
            _ => {}
        }
        let sent = pump_keyed(t, &mut a, &mut b, &ring);
        if (201..210).contains(&i) {
            assert!(sent.iter().all(|p| p[4] & crate::wire::FLAG_SEAL != 0));
        }
        pump_keyed(t, &mut b, &mut a, &ring);
        got.extend(drain(&mut b));
        if i == 300 {
            ring.retire().unwrap();
        }
    }
    converse_keyed(t, &mut a, &mut b, &ring, 20);
    got.extend(drain(&mut b));
    assert_eq!(got, (0..400).map(msg).collect::<Vec<_>>());
    assert!(a.is_idle());
    for p in &mut late {
        assert_eq!(
            Packet::open(p, 9, Some(&ring)).unwrap_err(),
            WireError::UnknownKeyId(0)
        );
    }
}
