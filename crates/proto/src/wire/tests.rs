use super::*;
use crate::addr::{Address, TxnId};

fn header() -> PacketHeader {
    PacketHeader {
        kind: Kind::Data,
        flags: 0,
        cluster: 7,
        incarnation: 3,
        source: Address::new(1, 2, 3, 4),
        destination: Address::new(1, 5, 3, 0),
    }
}

fn data_packet(key: Option<&PacketKey>) -> Vec<u8> {
    let mut buf = vec![0u8; 1472];
    let mut w = PacketWriter::data(&mut buf, header(), key, 10, 8, (99, 5), 64);
    assert!(w.push(b"hello"));
    assert!(w.push(b""));
    let frag = Fragment {
        msg_id: 5,
        index: 1,
        count: 3,
        total_len: 3000,
    };
    assert!(w.push_fragment(&[7u8; 1000], frag));
    assert_eq!(w.records(), 3);
    let n = w.finish();
    buf.truncate(n);
    buf
}

#[test]
fn data_packet_round_trips() {
    let buf = data_packet(None);
    let p = Packet::parse(&buf, 7, None).unwrap();
    assert_eq!(p.header, header());
    let d = DataBody::parse(p.body).unwrap();
    assert_eq!(
        (d.first_seq, d.base, d.ack, d.credit, d.count),
        (10, 8, 99, 64, 3)
    );
    let recs: Vec<_> = d.records().map(|r| r.unwrap()).collect();
    assert_eq!(recs[0].payload, b"hello");
    assert_eq!(recs[1].payload, b"");
    assert_eq!(recs[2].fragment.unwrap().index, 1);
    assert_eq!(recs[2].payload.len(), 1000);
}

#[test]
fn writer_refuses_what_does_not_fit() {
    let mut buf = vec![0u8; 256];
    let mut w = PacketWriter::datagram(&mut buf, header(), None);
    let room = w.room();
    assert!(!w.push(&vec![0u8; room + 1]));
    assert!(w.push(&vec![0u8; room]));
    assert_eq!(w.room(), 0);
    assert!(!w.push(b"x"));
    let n = w.finish();
    assert_eq!(n, 256);
    let p = Packet::parse(&buf[..n], 7, None).unwrap();
    assert_eq!(parse_datagram(p.body).unwrap(), 1);
}

#[test]
fn every_single_bit_flip_is_rejected() {
    let buf = data_packet(None);
    for i in 0..buf.len() {
        for bit in 0..8 {
            let mut b = buf.clone();
            b[i] ^= 1 << bit;
            assert!(
                Packet::parse(&b, 7, None).is_err(),
                "flip at byte {i} bit {bit}"
            );
        }
    }
}

#[test]
fn header_rules_are_named() {
    let buf = data_packet(None);
    assert_eq!(
        Packet::parse(&buf[..10], 7, None).unwrap_err(),
        WireError::ShorterThanHeader
    );
    assert!(matches!(
        Packet::parse(&buf[..buf.len() - 1], 7, None).unwrap_err(),
        WireError::LengthMismatch { .. }
    ));
    assert_eq!(
        Packet::parse(&buf, 8, None).unwrap_err(),
        WireError::WrongCluster {
            expected: 8,
            found: 7
        }
    );
    let mut b = buf.clone();
    b[0] = 0;
    assert_eq!(Packet::parse(&b, 7, None).unwrap_err(), WireError::BadMagic);
    let mut b = buf.clone();
    b[2] = 9;
    assert_eq!(
        Packet::parse(&b, 7, None).unwrap_err(),
        WireError::UnsupportedVersion(9)
    );
    let mut b = buf.clone();
    b[3] = 77;
    assert_eq!(
        Packet::parse(&b, 7, None).unwrap_err(),
        WireError::UnknownKind(77)
    );
    let mut b = buf;
    b[44] ^= 1;
    assert_eq!(
        Packet::parse(&b, 7, None).unwrap_err(),
        WireError::ChecksumMismatch
    );
}

#[test]
fn mac_is_required_and_checked_when_a_key_is_set() {
    let key = KeyRing::from(ClusterKey::from_passphrase("secret"));
    let other = KeyRing::from(ClusterKey::from_passphrase("other"));
    let signed = data_packet(Some(key.send_key()));
    assert!(Packet::parse(&signed, 7, Some(&key)).is_ok());
    assert_eq!(
        Packet::parse(&signed, 7, Some(&other)).unwrap_err(),
        WireError::MacMismatch
    );
    assert_eq!(
        Packet::parse(&signed, 7, None).unwrap_err(),
        WireError::MacUnexpected
    );
    let plain = data_packet(None);
    assert_eq!(
        Packet::parse(&plain, 7, Some(&key)).unwrap_err(),
        WireError::MacMissing
    );
}

#[test]
fn record_rules_are_named() {
    // A fragment whose index is not below its count.
    let mut rec = vec![0u8; 4 + 12];
    rec[0..2].copy_from_slice(&0u16.to_le_bytes());
    rec[2] = RECORD_FLAG_FRAG;
    rec[8..10].copy_from_slice(&3u16.to_le_bytes()); // index
    rec[10..12].copy_from_slice(&3u16.to_le_bytes()); // count
    assert_eq!(
        Records::validate(&rec).unwrap_err(),
        WireError::FragmentIndexOutOfRange
    );
    rec[10..12].copy_from_slice(&0u16.to_le_bytes());
    assert_eq!(
        Records::validate(&rec).unwrap_err(),
        WireError::FragmentCountZero
    );
    // Payload longer than the bytes left.
    let rec = [5u8, 0, 0, 0, 1, 2];
    assert_eq!(
        Records::validate(&rec).unwrap_err(),
        WireError::RecordOverrun
    );
    let rec = [0u8, 0, 0x80, 0];
    assert_eq!(
        Records::validate(&rec).unwrap_err(),
        WireError::RecordUnknownFlags(0x80)
    );
    assert_eq!(
        DataBody::parse(&[0u8; DATA_PREFIX_BYTES]).unwrap_err(),
        WireError::DataWithoutRecords
    );
}

#[test]
fn ack_round_trips_and_rejects_bad_nak_lists() {
    let mut buf = vec![0u8; 1472];
    let naks = [
        NakRange { start: 12, len: 2 },
        NakRange { start: 20, len: 1 },
    ];
    let n = AckWriter::write(&mut buf, header(), None, (10, 4), 32, &naks);
    let p = Packet::parse(&buf[..n], 7, None).unwrap();
    assert_eq!(p.header.kind, Kind::Ack);
    let a = AckBody::parse(p.body).unwrap();
    assert_eq!((a.ack, a.ack_incarnation, a.credit), (10, 4, 32));
    assert_eq!(a.naks().collect::<Vec<_>>(), naks);

    let mut body = p.body.to_vec();
    body[24..32].copy_from_slice(&5u64.to_le_bytes()); // below the ack
    assert_eq!(
        AckBody::parse(&body).unwrap_err(),
        WireError::NakRangeInvalid
    );
    let mut body = p.body.to_vec();
    body[20..22].copy_from_slice(&3u16.to_le_bytes());
    assert_eq!(AckBody::parse(&body).unwrap_err(), WireError::NakListLength);
    body[20..22].copy_from_slice(&1000u16.to_le_bytes());
    assert_eq!(
        AckBody::parse(&body).unwrap_err(),
        WireError::TooManyNakRanges
    );
}

#[test]
fn multicast_carries_the_txn() {
    let mut buf = vec![0u8; 512];
    let mut w = PacketWriter::multicast(&mut buf, header(), None, TxnId(0xabc));
    assert!(w.push(b"prepare"));
    let n = w.finish();
    let p = Packet::parse(&buf[..n], 7, None).unwrap();
    assert_eq!(p.header.kind, Kind::Multicast);
    let m = MulticastBody::parse(p.body).unwrap();
    assert_eq!(m.txn, TxnId(0xabc));
    assert_eq!(m.records().next().unwrap().unwrap().payload, b"prepare");
}

#[test]
fn sequence_numbers_near_the_top_of_the_space_are_refused() {
    let mut buf = vec![0u8; 256];
    let mut w = PacketWriter::data(&mut buf, header(), None, SEQ_MAX + 1, 0, (0, 0), 1);
    assert!(w.push(b"x"));
    let n = w.finish();
    let p = Packet::parse(&buf[..n], 7, None).unwrap();
    assert_eq!(
        DataBody::parse(p.body).unwrap_err(),
        WireError::SequenceOutOfRange
    );
}

#[test]
fn oversize_packets_and_undefined_flags_are_refused() {
    let big = vec![0u8; PACKET_BYTES_MAX + 1];
    assert_eq!(
        Packet::parse(&big, 7, None).unwrap_err(),
        WireError::PacketTooLong(PACKET_BYTES_MAX + 1)
    );
    let mut buf = vec![0u8; 256];
    let mut w = PacketWriter::datagram(&mut buf, header(), None);
    w.set_flags(0xfe);
    assert!(w.push(b"x"));
    let n = w.finish();
    let p = Packet::parse(&buf[..n], 7, None).unwrap();
    assert_eq!(
        p.header.flags, FLAG_ACK_NOW,
        "only defined flags are written"
    );
}

#[test]
fn garbage_never_panics() {
    let mut state = 0x1234_5678_9abc_def0u64;
    for len in 0..600usize {
        let mut b = vec![0u8; len];
        for x in b.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *x = state as u8;
        }
        let _ = Packet::parse(&b, 7, None);
        let _ = DataBody::parse(&b);
        let _ = AckBody::parse(&b);
        let _ = MulticastBody::parse(&b);
        let _ = Records::validate(&b);
    }
}

/// A gathered datagram is byte for byte the one `PacketWriter::datagram` (numbered:
/// `datagram_numbered`) builds, with and without a key, and parses to its numbering.
#[test]
fn a_gathered_datagram_is_the_written_one() {
    use super::{datagram_gather, DatagramBody, Numbering, GATHER_HEAD_BYTES, MAC_BYTES};
    let ring = KeyRing::from(ClusterKey::from_passphrase("k"));
    let numbered = Numbering {
        seq: 41,
        dst_incarnation: 1_700_000_000_123,
    };
    for (k, ring) in [(None, None), (Some(&**ring.send_key()), Some(&ring))] {
        for numbering in [None, Some(numbered)] {
            let parts: [&[u8]; 3] = [b"head", &[7u8; 1000], b""];
            let whole: Vec<u8> = parts.concat();
            let h = PacketHeader {
                kind: Kind::Datagram,
                flags: 0,
                cluster: 7,
                incarnation: 3,
                source: Address::new(1, 2, 3, 4),
                destination: Address::new(1, 5, 3, 0),
            };
            let mut buf = vec![0u8; 2000];
            let mut w = match numbering {
                None => PacketWriter::datagram(&mut buf, h, k),
                Some(n) => PacketWriter::datagram_numbered(&mut buf, h, k, n),
            };
            assert!(w.push(&whole));
            let n = w.finish();
            let mut head = [0u8; GATHER_HEAD_BYTES];
            let mut mac = [0u8; MAC_BYTES];
            let (head_len, mac_len, total) =
                datagram_gather(&mut head, &mut mac, h, k, numbering, &parts).unwrap();
            let gathered = [&head[..head_len], &whole, &mac[..mac_len]].concat();
            assert_eq!(total, n);
            assert_eq!(gathered, buf[..n]);
            let p = Packet::parse(&gathered, 7, ring).unwrap();
            let d = DatagramBody::parse(p.header.flags, p.body).unwrap();
            assert_eq!(d.numbering, numbering);
            assert_eq!(d.records().next().unwrap().unwrap().payload, &whole[..]);
        }
    }
    let mut head = [0u8; GATHER_HEAD_BYTES];
    let mut mac = [0u8; MAC_BYTES];
    let h = PacketHeader {
        kind: Kind::Datagram,
        flags: 0,
        cluster: 7,
        incarnation: 3,
        source: Address::new(1, 2, 3, 4),
        destination: Address::new(1, 5, 3, 0),
    };
    assert!(datagram_gather(&mut head, &mut mac, h, None, None, &[&vec![0u8; 70_000]]).is_none());
}

/// A numbered MULTICAST carries its numbering after the transaction; the numbered flag on
/// another kind, or a numbered body too short for its numbering, is refused by name.
#[test]
fn numbered_multicasts_parse_and_misplaced_numbering_is_refused() {
    use super::{DatagramBody, Numbering, FLAG_NUMBERED};
    let n = Numbering {
        seq: 9,
        dst_incarnation: 0,
    };
    let h = PacketHeader {
        kind: Kind::Multicast,
        flags: 0,
        cluster: 7,
        incarnation: 3,
        source: Address::new(1, 2, 3, 4),
        destination: Address::new(1, 5, 3, 0),
    };
    let mut buf = vec![0u8; 512];
    let mut w = PacketWriter::multicast_numbered(&mut buf, h, None, TxnId(5), n);
    assert!(w.push(b"m"));
    let len = w.finish();
    let p = Packet::parse(&buf[..len], 7, None).unwrap();
    assert_eq!(p.header.flags & FLAG_NUMBERED, FLAG_NUMBERED);
    let m = MulticastBody::parse_flags(p.header.flags, p.body).unwrap();
    assert_eq!((m.txn, m.numbering, m.count), (TxnId(5), Some(n), 1));
    // The same bytes read as unnumbered are another body: the flag decides.
    assert_ne!(MulticastBody::parse(p.body).map(|m| m.count), Ok(1));
    assert_eq!(
        DatagramBody::parse(FLAG_NUMBERED, &[0u8; 15]).map(|d| d.count),
        Err(WireError::BodyTooShort)
    );
    // A DATA packet with the numbered flag: rebuilt with a correct checksum, still refused.
    let mut w = PacketWriter::data(&mut buf, h, None, 1, 1, (0, 0), 8);
    assert!(w.push(b"d"));
    let len = w.finish();
    buf[4] |= FLAG_NUMBERED;
    let sum = super::header::checksum(&buf[..len]);
    buf[CHECKSUM_OFFSET..HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
    assert_eq!(
        Packet::parse(&buf[..len], 7, None).map(|p| p.header.kind),
        Err(WireError::NumberedKind)
    );
}

fn sealing(id: u8, pass: &str) -> PacketKey {
    PacketKey::new(id, ClusterKey::from_passphrase(pass), true)
}

/// A sealed packet: header in clear, body encrypted (the payload is nowhere in the bytes),
/// trailer of counter and tag; `open` gives back the very body a plain packet has.
#[test]
fn a_sealed_packet_hides_its_body_and_opens_to_it() {
    let ring = KeyRing::new(sealing(3, "secret"));
    let mut sealed = data_packet(Some(ring.send_key()));
    let plain = data_packet(None);
    assert_eq!(sealed.len(), plain.len() + SEAL_TRAILER_BYTES);
    assert_eq!(sealed[4] & (FLAG_SEAL | FLAG_MAC), FLAG_SEAL);
    assert_eq!(sealed[KEY_ID_OFFSET], 3);
    assert!(!sealed.windows(5).any(|w| w == b"hello"));
    assert!(!sealed.windows(64).any(|w| w == [7u8; 64]));
    assert_eq!(
        Packet::parse(&sealed, 7, Some(&ring)).unwrap_err(),
        WireError::Sealed
    );
    let p = Packet::open(&mut sealed, 7, Some(&ring)).unwrap();
    let mut want = header();
    want.flags = FLAG_SEAL;
    assert_eq!(p.header, want);
    assert_eq!(p.body, &plain[HEADER_BYTES..]);
}

/// Every packet sealed under one key takes the next counter: no nonce repeats, and the same
/// body seals to different bytes.
#[test]
fn nonces_never_repeat_under_one_key() {
    let key = sealing(0, "secret").with_counter_start(u64::MAX - 1);
    let mut seen = std::collections::HashSet::new();
    let mut bodies = std::collections::HashSet::new();
    for _ in 0..4 {
        let p = data_packet(Some(&key));
        let end = p.len() - SEAL_TRAILER_BYTES;
        assert!(seen.insert(p[end..end + COUNTER_BYTES].to_vec()));
        assert!(bodies.insert(p[HEADER_BYTES..end].to_vec()));
    }
}

/// Wrong key, altered bytes, unknown key id, wrong mode, truncation: each refused by name,
/// none panics, and a refused packet's bytes are left as they were.
#[test]
fn sealed_packets_are_refused_by_reason() {
    let ring = KeyRing::new(sealing(3, "secret"));
    let good = data_packet(Some(ring.send_key()));
    let open = |mut b: Vec<u8>, r: &KeyRing| Packet::open(&mut b, 7, Some(r)).map(|_| ());
    // Another key under the same id.
    let wrong = KeyRing::new(sealing(3, "other"));
    assert_eq!(open(good.clone(), &wrong), Err(WireError::TagMismatch));
    // Another id.
    let other_id = KeyRing::new(sealing(4, "secret"));
    assert_eq!(
        open(good.clone(), &other_id),
        Err(WireError::UnknownKeyId(3))
    );
    // The same key, MAC-only.
    let mac_only = KeyRing::new(PacketKey::new(
        3,
        ClusterKey::from_passphrase("secret"),
        false,
    ));
    assert_eq!(
        open(good.clone(), &mac_only),
        Err(WireError::SealUnexpected)
    );
    let maced = data_packet(Some(mac_only.send_key()));
    assert_eq!(open(maced, &ring), Err(WireError::SealMissing));
    // No key at all.
    assert_eq!(
        Packet::open(&mut good.clone(), 7, None).map(|_| ()),
        Err(WireError::MacUnexpected)
    );
    // Any byte of body or trailer altered (checksum fixed so the tag is what refuses), and
    // any header byte the tag covers.
    let end = good.len();
    for i in (0..CHECKSUM_OFFSET).chain(HEADER_BYTES..end) {
        let mut b = good.clone();
        b[i] ^= 0x20;
        let sum = super::header::checksum(&b);
        b[CHECKSUM_OFFSET..HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
        let before = b.clone();
        let r = Packet::open(&mut b, 7, Some(&ring));
        assert!(r.is_err(), "byte {i} altered and taken");
        assert_eq!(b, before, "a refused packet was changed");
    }
    // Truncated anywhere (length field fixed too).
    for n in 0..end {
        let mut b = good[..n].to_vec();
        if n >= HEADER_BYTES {
            b[32..34].copy_from_slice(&(n as u16).to_le_bytes());
            let sum = super::header::checksum(&b);
            b[CHECKSUM_OFFSET..HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
        }
        assert!(Packet::open(&mut b, 7, Some(&ring)).is_err(), "cut to {n}");
    }
    // Both trailer flags.
    let mut b = good.clone();
    b[4] |= FLAG_MAC;
    assert_eq!(open(b, &ring), Err(WireError::MacAndSeal));
}

/// A ring accepts its current key and, during a rollover, one more; the steps go in order.
#[test]
fn a_key_ring_rolls_over_in_order() {
    let mut ring = KeyRing::new(sealing(0, "a"));
    assert_eq!(ring.switch(), Err(KeyRingError::NoNextKey));
    assert_eq!(ring.retire(), Err(KeyRingError::NoOldKey));
    assert_eq!(
        ring.install_next(sealing(0, "b")),
        Err(KeyRingError::SameId(0))
    );
    ring.install_next(sealing(1, "b")).unwrap();
    let under_a = data_packet(Some(ring.send_key()));
    assert_eq!(ring.next_id(), Some(1));
    ring.switch().unwrap();
    assert_eq!((ring.send_key().id(), ring.old_id()), (1, Some(0)));
    let under_b = data_packet(Some(ring.send_key()));
    assert_eq!(
        ring.install_next(sealing(2, "c")),
        Err(KeyRingError::OldNotRetired)
    );
    assert!(Packet::open(&mut under_a.clone(), 7, Some(&ring)).is_ok());
    assert!(Packet::open(&mut under_b.clone(), 7, Some(&ring)).is_ok());
    ring.retire().unwrap();
    assert_eq!(
        Packet::open(&mut under_a.clone(), 7, Some(&ring)).unwrap_err(),
        WireError::UnknownKeyId(0)
    );
    assert!(Packet::open(&mut under_b.clone(), 7, Some(&ring)).is_ok());
}

/// ACKs and every builder seal too; a sealed packet survives a full parse of its body.
#[test]
fn every_builder_seals() {
    let ring = KeyRing::new(sealing(9, "k"));
    let k = Some(&**ring.send_key());
    let mut buf = vec![0u8; 1472];
    let naks = [NakRange { start: 120, len: 3 }];
    let n = AckWriter::write(&mut buf, header(), k, (100, 5), 7, &naks);
    let p = Packet::open(&mut buf[..n], 7, Some(&ring)).unwrap();
    let a = AckBody::parse(p.body).unwrap();
    assert_eq!((a.ack, a.credit, a.nak_count()), (100, 7, 1));
    let mut w = PacketWriter::multicast(&mut buf, header(), k, TxnId(77));
    assert!(w.push(b"to the group"));
    let n = w.finish();
    let p = Packet::open(&mut buf[..n], 7, Some(&ring)).unwrap();
    let m = MulticastBody::parse(p.body).unwrap();
    assert_eq!(m.txn, TxnId(77));
    let mut head = [0u8; GATHER_HEAD_BYTES];
    let mut mac = [0u8; MAC_BYTES];
    assert!(datagram_gather(&mut head, &mut mac, header(), k, None, &[b"x"]).is_none());
}

/// The codec's own cost per packet (build + check) without a key, with a MAC and sealed, for
/// docs/BENCHMARKS.md: `cargo test --release -p txcast-proto -- --ignored --nocapture
/// codec_cost`.
#[test]
#[ignore = "a measurement, not a check"]
fn codec_cost() {
    let mac = KeyRing::from(ClusterKey::from_passphrase("k"));
    let seal = KeyRing::new(sealing(0, "k"));
    for bytes in [64usize, 1000, 8000] {
        let payload = vec![0x42u8; bytes];
        let mut line = format!("codec {bytes:>5} B:");
        for (name, ring) in [("none", None), ("mac", Some(&mac)), ("seal", Some(&seal))] {
            let key = ring.map(|r| &**r.send_key());
            let mut buf = vec![0u8; 9000];
            let n = 200_000 / (1 + bytes / 500);
            let mut samples = Vec::new();
            for _ in 0..5 {
                let t = std::time::Instant::now();
                for _ in 0..n {
                    let mut w = PacketWriter::datagram(&mut buf, header(), key);
                    assert!(w.push(&payload));
                    let len = w.finish();
                    let p = Packet::open(&mut buf[..len], 7, ring).unwrap();
                    std::hint::black_box(p.body.len());
                }
                samples.push(t.elapsed().as_nanos() as f64 / n as f64);
            }
            samples.sort_by(f64::total_cmp);
            line += &format!("  {name} {:.0} ns", samples[2]);
        }
        println!("{line}");
    }
}

/// Random bodies and trailers behind a valid header (length and checksum made right), with
/// either trailer flag and any key id: refused by name under a sealing and a MAC-only ring,
/// never a panic.
#[test]
fn garbage_behind_a_valid_header_never_panics() {
    let sealing_ring = KeyRing::new(sealing(3, "secret"));
    let mac_ring = KeyRing::from(ClusterKey::from_passphrase("secret"));
    let template = data_packet(Some(sealing_ring.send_key()));
    let mut state = 0x0bad_cafe_f00d_d00du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for len in HEADER_BYTES..700usize {
        let mut b = template[..HEADER_BYTES].to_vec();
        b.resize(len, 0);
        for x in b[HEADER_BYTES..].iter_mut() {
            *x = next() as u8;
        }
        b[4] = [FLAG_MAC, FLAG_SEAL, FLAG_MAC | FLAG_SEAL][(next() % 3) as usize];
        b[KEY_ID_OFFSET] = [0, 3, 4][(next() % 3) as usize];
        b[32..34].copy_from_slice(&(len as u16).to_le_bytes());
        let sum = super::header::checksum(&b);
        b[CHECKSUM_OFFSET..HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
        for ring in [&sealing_ring, &mac_ring] {
            let e = Packet::open(&mut b.clone(), 7, Some(ring)).unwrap_err();
            assert!(
                matches!(
                    e,
                    WireError::LengthMismatch { .. }
                        | WireError::MacAndSeal
                        | WireError::UnknownKeyId(_)
                        | WireError::TagMismatch
                        | WireError::MacMismatch
                        | WireError::SealMissing
                        | WireError::SealUnexpected
                ),
                "{e:?}"
            );
            let _ = Packet::parse(&b, 7, Some(ring));
        }
    }
}
