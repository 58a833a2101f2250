//! Writes a handful of well-formed inputs for each fuzz target, built with txcast-proto's own
//! writers, so libFuzzer starts from packets that pass the checksum.
//!
//! Usage: `txcast-fuzz-seedgen <corpus-dir>`; writes `<corpus-dir>/<target>/seed-*`.

use std::fs;
use std::path::Path;

use txcast_proto::wire::{
    AckWriter, ClusterKey, Fragment, Kind, NakRange, PacketHeader, PacketWriter, HEADER_BYTES,
};
use txcast_proto::{Address, TxnId};

/// Must match the constants in the fuzz targets.
const PACKET_CLUSTER: u16 = 7;
const PACKET_KEY: ClusterKey = ClusterKey([0x5a; 32]);

fn header(cluster: u16) -> PacketHeader {
    PacketHeader {
        kind: Kind::Data,
        flags: 0,
        cluster,
        incarnation: 3,
        source: Address::new(1, 2, 3, 4),
        destination: Address::new(1, 5, 3, 0),
    }
}

const FRAG: Fragment = Fragment {
    msg_id: 5,
    index: 1,
    count: 3,
    total_len: 300,
};

fn push_some(w: &mut PacketWriter<'_, '_>) {
    assert!(w.push(b"hello"));
    assert!(w.push(b""));
    assert!(w.push_fragment(&[7u8; 100], FRAG));
}

/// One packet of each kind, with or without the key.
fn packets(key: Option<&ClusterKey>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for kind in [Kind::Data, Kind::Datagram, Kind::Multicast, Kind::Ack] {
        let mut buf = vec![0u8; 512];
        let h = header(PACKET_CLUSTER);
        let n = match kind {
            Kind::Data => {
                let mut w = PacketWriter::data(&mut buf, h, key, 10, 8, (99, 5), 64);
                push_some(&mut w);
                w.finish()
            }
            Kind::Datagram => {
                let mut w = PacketWriter::datagram(&mut buf, h, key);
                push_some(&mut w);
                w.finish()
            }
            Kind::Multicast => {
                let mut w = PacketWriter::multicast(&mut buf, h, key, TxnId(0xabc));
                push_some(&mut w);
                w.finish()
            }
            Kind::Ack => {
                let naks = [
                    NakRange { start: 12, len: 2 },
                    NakRange { start: 20, len: 1 },
                ];
                AckWriter::write(&mut buf, h, key, (10, 5), 32, &naks)
            }
        };
        buf.truncate(n);
        out.push(buf);
    }
    out
}

fn write(dir: &Path, target: &str, seeds: &[Vec<u8>]) {
    let d = dir.join(target);
    fs::create_dir_all(&d).expect("create corpus dir");
    for (i, s) in seeds.iter().enumerate() {
        fs::write(d.join(format!("seed-{i:02}")), s).expect("write seed");
    }
}

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .expect("usage: txcast-fuzz-seedgen <corpus-dir>");
    let dir = Path::new(&dir);

    let plain = packets(None);
    let keyed = packets(Some(&PACKET_KEY));

    // packet: control byte (bit 0 = key) then the packet.
    let mut seeds = Vec::new();
    for p in &plain {
        seeds.push([&[0u8][..], p].concat());
    }
    for p in &keyed {
        seeds.push([&[1u8][..], p].concat());
    }
    write(dir, "packet", &seeds);

    // records: the record sections of the DATAGRAM packet (whole, and each record alone).
    let records = plain[1][HEADER_BYTES..].to_vec();
    write(
        dir,
        "records",
        &[
            records.clone(),
            records[..9].to_vec(),
            records[9..13].to_vec(),
            records[13..].to_vec(),
        ],
    );

    // ack: the ACK body, and one without NAK ranges.
    let ack = plain[3][HEADER_BYTES..].to_vec();
    let mut bare = ack[..24].to_vec();
    bare[20] = 0;
    write(dir, "ack", &[ack, bare]);

    // roundtrip: fixed fields, then chunks (see fuzz_targets/roundtrip.rs).
    let mut seeds = Vec::new();
    for kind in 0..4u8 {
        for key in 0..2u8 {
            let mut s = vec![key | kind << 1, 0, 0xa5];
            s.extend_from_slice(&200u16.to_le_bytes()); // buffer size selector
            s.extend_from_slice(&40u16.to_le_bytes()); // flip_at
            s.push(0x01); // flip_xor
            s.extend_from_slice(&7u16.to_le_bytes()); // cluster
            s.extend_from_slice(&3u64.to_le_bytes()); // incarnation
            s.extend_from_slice(&[1, 0, 2, 0, 3, 0, 4, 0, 1, 0, 5, 0, 3, 0, 0, 0]);
            for v in [10u64, 8, 99, 5] {
                s.extend_from_slice(&v.to_le_bytes()); // first_seq, base, ack, ack incarnation
            }
            s.extend_from_slice(&64u32.to_le_bytes()); // credit
            s.extend_from_slice(&0xabcu64.to_le_bytes()); // txn
            if kind == 3 {
                for (start, len) in [(120u64, 2u32), (200, 1)] {
                    s.extend_from_slice(&start.to_le_bytes());
                    s.extend_from_slice(&len.to_le_bytes());
                }
            } else {
                s.push(0);
                s.extend_from_slice(&5u16.to_le_bytes());
                s.extend_from_slice(b"hello");
                s.push(1);
                s.extend_from_slice(&20u16.to_le_bytes());
                for v in [5u32, 0x0003_0001, 300] {
                    s.extend_from_slice(&v.to_le_bytes()); // msg_id, index|count, total
                }
                s.extend_from_slice(&[7u8; 20]);
            }
            seeds.push(s);
        }
    }
    write(dir, "roundtrip", &seeds);
}
