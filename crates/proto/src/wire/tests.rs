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

fn data_packet(key: Option<&ClusterKey>) -> Vec<u8> {
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
    let key = ClusterKey::from_passphrase("secret");
    let other = ClusterKey::from_passphrase("other");
    let signed = data_packet(Some(&key));
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

/// A gathered datagram is byte for byte the one `PacketWriter::datagram` builds, with and
/// without a key, and parses.
#[test]
fn a_gathered_datagram_is_the_written_one() {
    use super::{datagram_gather, GATHER_HEAD_BYTES, MAC_BYTES};
    let key = ClusterKey::from_passphrase("k");
    for k in [None, Some(&key)] {
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
        let mut w = PacketWriter::datagram(&mut buf, h, k);
        assert!(w.push(&whole));
        let n = w.finish();
        let mut head = [0u8; GATHER_HEAD_BYTES];
        let mut mac = [0u8; MAC_BYTES];
        let (mac_len, total) = datagram_gather(&mut head, &mut mac, h, k, &parts).unwrap();
        let gathered = [&head[..], &whole, &mac[..mac_len]].concat();
        assert_eq!(total, n);
        assert_eq!(gathered, buf[..n]);
        assert!(Packet::parse(&gathered, 7, k).is_ok());
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
    assert!(datagram_gather(&mut head, &mut mac, h, None, &[&vec![0u8; 70_000]]).is_none());
}
