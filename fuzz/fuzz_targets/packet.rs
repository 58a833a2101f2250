//! `Packet::parse` on arbitrary bytes, then the body decoder for the packet's kind and a full
//! walk of its records or NAK ranges.
//!
//! Input: one control byte, then the packet.
//! - bit 0: parse with a fixed cluster key (else with none);
//! - bit 3: instead, open (decrypt in place) under a ring of a sealing and a MAC-only key;
//! - bit 1: before parsing, repair the length field, the MAC (when the MAC flag is set and a key
//!   is in use) and the checksum, so the fuzzer reaches the body decoders without having to
//!   forge a CRC-32;
//! - bit 2: expect the cluster number the packet carries (else a fixed one).
//!
//! Properties checked besides "never panics":
//! - after a repair, the packet is never rejected for its checksum (nor its MAC when repaired);
//! - an accepted packet's header and body agree with its bytes;
//! - an accepted packet is refused when parsed with the other key setting (MAC missing or
//!   unexpected);
//! - the encoding is canonical: re-encoding an accepted packet whose body decodes, with
//!   `PacketWriter` / `AckWriter`, gives back the same bytes.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use txcast_proto::wire::{
    parse_datagram, AckBody, AckWriter, ClusterKey, DataBody, KeyRing, Kind, MulticastBody,
    NakRange, Packet, PacketKey, PacketWriter, Record, Records, WireError, CHECKSUM_OFFSET,
    FLAG_MAC, HEADER_BYTES, MAC_BYTES, PACKET_BYTES_MAX,
};

const CLUSTER: u16 = 7;
/// A MAC-only key, id 0.
static KEY: std::sync::LazyLock<KeyRing> =
    std::sync::LazyLock::new(|| KeyRing::from(ClusterKey([0x5a; 32])));

/// A sealing key 0 and, as the next key of a rollover, a MAC-only key 1.
static SEALING: std::sync::LazyLock<KeyRing> = std::sync::LazyLock::new(|| {
    let mut r = KeyRing::new(PacketKey::new(0, ClusterKey([0x5a; 32]), true));
    r.install_next(PacketKey::new(1, ClusterKey([0x5b; 32]), false))
        .expect("another id");
    r
});

fuzz_target!(|data: &[u8]| {
    let Some((&control, pkt)) = data.split_first() else {
        return;
    };
    let ring = (control & 1 != 0).then(|| &*KEY);
    let key = ring.map(|r| &**r.send_key());
    let repair = control & 2 != 0;
    let own_cluster = control & 4 != 0;

    let mut owned;
    let pkt: &[u8] = if repair {
        owned = pkt.to_vec();
        repair_packet(&mut owned, key);
        &owned
    } else {
        pkt
    };
    let cluster = if own_cluster && pkt.len() >= 8 {
        u16::from_le_bytes([pkt[6], pkt[7]])
    } else {
        CLUSTER
    };

    if control & 8 != 0 {
        // Under a ring whose key 0 seals and key 1 only MACs: opened in place or refused by
        // name, never a panic.
        let mut b = pkt.to_vec();
        match Packet::open(&mut b, cluster, Some(&*SEALING)) {
            Ok(p) => {
                black_box(p.body.len());
            }
            Err(e) => {
                black_box(e.to_string());
            }
        }
        return;
    }

    let parsed = Packet::parse(pkt, cluster, ring);
    let p = match parsed {
        Ok(p) => p,
        Err(e) => {
            black_box(e.to_string());
            if repair {
                assert_ne!(e, WireError::ChecksumMismatch, "repaired checksum rejected");
                if key.is_some() {
                    assert_ne!(e, WireError::MacMismatch, "repaired MAC rejected");
                }
            }
            return;
        }
    };

    // The header agrees with the bytes.
    let flags = pkt[4];
    let mac_len = if flags & FLAG_MAC != 0 { MAC_BYTES } else { 0 };
    assert_eq!(p.header.kind as u8, pkt[3]);
    assert_eq!(p.header.flags, flags);
    assert_eq!(p.header.cluster, cluster);
    assert_eq!(
        p.header.incarnation,
        u64::from_le_bytes(pkt[8..16].try_into().unwrap())
    );
    assert_eq!(
        key.is_some(),
        mac_len != 0,
        "MAC presence must match key setting"
    );
    assert_eq!(
        u16::from_le_bytes([pkt[32], pkt[33]]) as usize,
        pkt.len(),
        "length field"
    );
    assert_eq!(p.body.len(), pkt.len() - HEADER_BYTES - mac_len);
    assert!(std::ptr::eq(p.body.as_ptr(), pkt[HEADER_BYTES..].as_ptr()));
    black_box((
        p.header.source.instance,
        p.header.source.site,
        p.header.source.server_type,
        p.header.source.server_instance,
        p.header.destination.instance,
        p.header.destination.site,
        p.header.destination.server_type,
        p.header.destination.server_instance,
    ));

    // The same bytes under the other key setting are refused.
    let other = match key {
        Some(_) => Packet::parse(pkt, cluster, None).map(|_| ()),
        None => Packet::parse(pkt, cluster, Some(&*KEY)).map(|_| ()),
    };
    let want = if key.is_some() {
        WireError::MacUnexpected
    } else {
        WireError::MacMissing
    };
    assert_eq!(other, Err(want));

    // Body decoders for the packet's kind, and re-encoding.
    let mut buf = vec![0xa5u8; pkt.len()];
    match p.header.kind {
        Kind::Data => {
            let Ok(d) = DataBody::parse(p.body) else {
                return;
            };
            black_box((d.first_seq, d.base, d.ack, d.ack_incarnation, d.credit));
            assert!(d.count > 0);
            assert!(d.base <= d.first_seq, "DATA base above first_seq accepted");
            let recs = walk_records(d.records(), d.records, d.count);
            if pkt.len() <= PACKET_BYTES_MAX {
                let mut w = PacketWriter::data(
                    &mut buf,
                    p.header,
                    key,
                    d.first_seq,
                    d.base,
                    (d.ack, d.ack_incarnation),
                    d.credit,
                );
                push_all(&mut w, &recs);
                let n = w.finish();
                assert_eq!(&buf[..n], pkt, "DATA re-encoding differs");
            }
        }
        Kind::Datagram | Kind::Group => {
            let Ok(count) = parse_datagram(p.body) else {
                return;
            };
            let recs = walk_records(Records::new(p.body), p.body, count);
            if pkt.len() <= PACKET_BYTES_MAX {
                let mut w = if p.header.kind == Kind::Group {
                    PacketWriter::group(&mut buf, p.header, key)
                } else {
                    PacketWriter::datagram(&mut buf, p.header, key)
                };
                push_all(&mut w, &recs);
                let n = w.finish();
                assert_eq!(&buf[..n], pkt, "DATAGRAM re-encoding differs");
            }
        }
        Kind::Multicast => {
            let Ok(m) = MulticastBody::parse(p.body) else {
                return;
            };
            black_box(m.txn.0);
            let recs = walk_records(m.records(), m.records, m.count);
            if pkt.len() <= PACKET_BYTES_MAX {
                let mut w = PacketWriter::multicast(&mut buf, p.header, key, m.txn);
                push_all(&mut w, &recs);
                let n = w.finish();
                assert_eq!(&buf[..n], pkt, "MULTICAST re-encoding differs");
            }
        }
        Kind::Ack => {
            let Ok(a) = AckBody::parse(p.body) else {
                return;
            };
            black_box((a.ack, a.credit));
            let naks: Vec<NakRange> = a.naks().collect();
            assert_eq!(naks.len(), a.nak_count());
            for r in &naks {
                assert!(r.len > 0, "empty NAK range accepted");
                assert!(r.start >= a.ack, "NAK range below the ack accepted");
            }
            let n = AckWriter::write(
                &mut buf,
                p.header,
                key,
                (a.ack, a.ack_incarnation),
                a.credit,
                &naks,
            );
            assert_eq!(&buf[..n], pkt, "ACK re-encoding differs");
        }
    }
});

/// Walks every record, touching every field; checks the count and that the records tile the
/// body exactly.
fn walk_records<'a>(it: Records<'a>, body: &'a [u8], count: usize) -> Vec<Record<'a>> {
    let mut out = Vec::with_capacity(count);
    let mut used = 0;
    for r in it {
        let r = r.expect("validated records must iterate without error");
        if let Some(f) = r.fragment {
            black_box((f.msg_id, f.index, f.count, f.total_len));
            assert!(f.count > 0 && f.index < f.count);
            assert!(r.payload.len() as u64 <= f.total_len as u64);
        }
        black_box(r.payload.iter().fold(0u8, |a, b| a ^ b));
        used += Record::encoded_len(r.payload.len(), r.fragment.is_some());
        out.push(r);
    }
    assert_eq!(out.len(), count, "validate count differs from iteration");
    assert_eq!(used, body.len(), "records do not tile the body");
    out
}

fn push_all(w: &mut PacketWriter<'_, '_>, recs: &[Record<'_>]) {
    for r in recs {
        let ok = match r.fragment {
            Some(f) => w.push_fragment(r.payload, f),
            None => w.push(r.payload),
        };
        assert!(
            ok,
            "re-encoding: a record that was parsed does not fit again"
        );
    }
    assert_eq!(w.records(), recs.len());
}

/// Rewrites length, MAC (if flagged and keyed) and checksum so that only the other header rules
/// and the body can make the packet fail.
fn repair_packet(buf: &mut [u8], key: Option<&PacketKey>) {
    if buf.len() < HEADER_BYTES || buf.len() > u16::MAX as usize {
        return;
    }
    let len = buf.len();
    buf[32..34].copy_from_slice(&(len as u16).to_le_bytes());
    if let Some(k) = key {
        if buf[4] & FLAG_MAC != 0 && len >= HEADER_BYTES + MAC_BYTES {
            let body_end = len - MAC_BYTES;
            let mac = k
                .cluster_key()
                .mac(&buf[..CHECKSUM_OFFSET], &buf[HEADER_BYTES..body_end]);
            buf[body_end..].copy_from_slice(&mac);
        }
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[..CHECKSUM_OFFSET]);
    h.update(&buf[HEADER_BYTES..]);
    let sum = h.finalize();
    buf[CHECKSUM_OFFSET..HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
}
