//! Writer → parser round trip: build a packet from fuzzer-chosen fields and payloads, then check
//! that parsing gives back exactly what was written, and that any single-byte change is refused.
//!
//! Input layout (short inputs read as zeros past their end):
//! ```text
//! options u8      bit 0: cluster key; bits 1-2: kind (0 DATA, 1 DATAGRAM, 2 MULTICAST, 3 ACK;
//!                 a DATAGRAM with bit 6 set is a GROUP packet);
//!                 bits 3-4: header flags asked for (ACK_NOW, MAC; the writer decides MAC);
//!                 bit 5: call `set_flags(extra)` on the packet writer
//! extra u8        flags for `set_flags` (the writer keeps only defined ones)
//! fill u8         byte the buffer is filled with before writing (the writer must not rely on zeros)
//! size u16        buffer size selector (72 bytes .. a little over PACKET_BYTES_MAX)
//! flip_at u16, flip_xor u8
//! cluster u16, incarnation u32, source 4×u16, destination 4×u16
//! first_seq u64, base u64 (swapped with first_seq if above it), ack u64, ack incarnation u64,
//! credit u32, txn u64 (sequence numbers taken modulo SEQ_MAX + 1)
//! then chunks: tag u8 | len u16 | [msg_id u32 | index u16 | count u16 | total u32 if tag&1]
//!              | payload[min(len, rest)]          (DATA, DATAGRAM, MULTICAST)
//!        or:   start u64 | len u32                 (ACK: NAK ranges)
//! ```
//! For DATA/DATAGRAM/MULTICAST every chunk is offered to `push` (or `push_fragment`), and the
//! writer's answers are checked against `room()`. Fragment headers are taken as given, so some
//! are malformed; the parser must then refuse the body, and accept it otherwise.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_proto::wire::{
    parse_datagram, AckBody, AckWriter, ClusterKey, DataBody, Fragment, KeyRing, Kind,
    MulticastBody, NakRange, Packet, PacketHeader, PacketWriter, Records, WireError,
    ACK_PREFIX_BYTES, DATA_PREFIX_BYTES, FLAG_ACK_NOW, FLAG_MAC, FRAG_EXTRA_BYTES, HEADER_BYTES,
    MAC_BYTES, NAK_RANGES_MAX, NAK_RANGE_BYTES, PACKET_BYTES_MAX, SEQ_MAX,
};
use txcast_proto::{Address, TxnId};

/// A MAC-only key, id 0.
static KEY: std::sync::LazyLock<KeyRing> =
    std::sync::LazyLock::new(|| KeyRing::from(ClusterKey([0xc3; 32])));

struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }
    fn addr(&mut self) -> Address {
        Address::new(self.u16(), self.u16(), self.u16(), self.u16())
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Smallest buffer any writer accepts with a key: header, DATA prefix, MAC.
const BUF_MIN: usize = HEADER_BYTES + DATA_PREFIX_BYTES + MAC_BYTES;

fn fragment_ok(payload_len: usize, f: &Fragment) -> bool {
    f.count > 0 && f.index < f.count && payload_len as u64 <= f.total_len as u64
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let options = inp.u8();
    let extra = inp.u8();
    let fill = inp.u8();
    let size = inp.u16();
    let flip_at = inp.u16();
    let flip_xor = match inp.u8() {
        0 => 0x80,
        x => x,
    };
    let ring = (options & 1 != 0).then(|| &*KEY);
    let key = ring.map(|r| &**r.send_key());
    let kind = match (options >> 1) & 3 {
        0 => Kind::Data,
        1 if options & 64 != 0 => Kind::Group,
        1 => Kind::Datagram,
        2 => Kind::Multicast,
        _ => Kind::Ack,
    };
    let asked_flags = (if options & 8 != 0 { FLAG_ACK_NOW } else { 0 })
        | (if options & 16 != 0 { FLAG_MAC } else { 0 });
    let header = PacketHeader {
        kind,
        flags: asked_flags,
        cluster: inp.u16(),
        incarnation: inp.u64(),
        source: inp.addr(),
        destination: inp.addr(),
    };
    // Sequence numbers beyond SEQ_MAX are refused by the decoders; stay below it here.
    let (mut first_seq, mut base) = (inp.u64() % (SEQ_MAX + 1), inp.u64() % (SEQ_MAX + 1));
    if base > first_seq {
        std::mem::swap(&mut first_seq, &mut base);
    }
    let ack = inp.u64() % (SEQ_MAX + 1);
    let ack_incarnation = inp.u64();
    let credit = inp.u32();
    let txn = TxnId(inp.u64());
    let set_flags = options & 32 != 0 && kind != Kind::Ack;
    let expected_flags = (asked_flags & !FLAG_MAC)
        | if set_flags { extra & FLAG_ACK_NOW } else { 0 }
        | if key.is_some() { FLAG_MAC } else { 0 };
    let mac = if key.is_some() { MAC_BYTES } else { 0 };

    // Buffer sizes: mostly small (so packets fill up), sometimes around PACKET_BYTES_MAX.
    let buf_len = if size < 0xf000 {
        BUF_MIN + size as usize % 4096
    } else {
        PACKET_BYTES_MAX - 150 + (size - 0xf000) as usize % 300
    };
    let mut buf = vec![
        fill;
        buf_len.max(
            HEADER_BYTES + ACK_PREFIX_BYTES + NAK_RANGES_MAX * NAK_RANGE_BYTES + MAC_BYTES
        )
    ];

    let n;
    // What the parser must report: Ok with these contents, or an error.
    let mut pushed: Vec<(Option<Fragment>, &[u8])> = Vec::new();
    let mut naks: Vec<NakRange> = Vec::new();
    if kind == Kind::Ack {
        while !inp.is_empty() {
            naks.push(NakRange {
                start: inp.u64(),
                len: inp.u32(),
            });
        }
        n = AckWriter::write(&mut buf, header, key, (ack, ack_incarnation), credit, &naks);
        naks.truncate(NAK_RANGES_MAX);
        assert_eq!(
            n,
            HEADER_BYTES + ACK_PREFIX_BYTES + naks.len() * NAK_RANGE_BYTES + mac
        );
    } else {
        let buf = &mut buf[..buf_len];
        let mut w = match kind {
            Kind::Data => PacketWriter::data(
                buf,
                header,
                key,
                first_seq,
                base,
                (ack, ack_incarnation),
                credit,
            ),
            Kind::Datagram => PacketWriter::datagram(buf, header, key),
            Kind::Group => PacketWriter::group(buf, header, key),
            _ => PacketWriter::multicast(buf, header, key, txn),
        };
        assert!(w.is_empty());
        if set_flags {
            w.set_flags(extra);
        }
        while !inp.is_empty() {
            let tag = inp.u8();
            let len = inp.u16() as usize;
            let fragment = (tag & 1 != 0).then(|| Fragment {
                msg_id: inp.u32(),
                index: inp.u16(),
                count: inp.u16(),
                total_len: inp.u32(),
            });
            let payload = inp.take(len);
            let room = w.room();
            let before = w.records();
            let ok = match fragment {
                Some(f) => w.push_fragment(payload, f),
                None => w.push(payload),
            };
            let needed = payload.len()
                + if fragment.is_some() {
                    FRAG_EXTRA_BYTES
                } else {
                    0
                };
            if ok {
                assert!(needed <= room, "pushed {needed} bytes with room() = {room}");
                pushed.push((fragment, payload));
                assert_eq!(w.records(), before + 1);
            } else {
                // `room()` is 0 both when an empty record fits and when not even a record header
                // does; only that case may refuse a payload that `room()` says fits.
                assert!(
                    needed > room || (needed == 0 && room == 0),
                    "refused {needed} bytes with room() = {room}"
                );
                assert_eq!(w.records(), before);
            }
            assert!(!w.is_empty() || pushed.is_empty());
        }
        n = w.finish();
        assert!(
            n <= buf_len.min(PACKET_BYTES_MAX),
            "packet of {n} bytes overflows"
        );
    }
    let packet = &buf[..n];

    // Any single-byte change is refused (CRC-32 detects every burst of up to 32 bits).
    let mut bad = packet.to_vec();
    let at = flip_at as usize % n;
    bad[at] ^= flip_xor;
    assert!(
        Packet::parse(&bad, header.cluster, ring).is_err(),
        "byte {at} ^= {flip_xor:#04x} went unnoticed"
    );

    // Parse it back.
    let unknown = expected_flags & !(FLAG_MAC | FLAG_ACK_NOW);
    let p = match Packet::parse(packet, header.cluster, ring) {
        Ok(p) => {
            assert_eq!(
                unknown, 0,
                "packet with undefined flags {unknown:#04x} accepted"
            );
            p
        }
        Err(e) => {
            assert_eq!(
                e,
                WireError::UnknownFlags(unknown),
                "written packet refused"
            );
            return;
        }
    };
    assert_eq!(
        p.header,
        PacketHeader {
            flags: expected_flags,
            ..header
        }
    );
    assert_eq!(p.body.len(), n - HEADER_BYTES - mac);
    let records_valid = pushed
        .iter()
        .all(|(f, p)| f.is_none_or(|f| fragment_ok(p.len(), &f)));
    let check_records = |recs: Records<'_>| {
        let got: Vec<_> = recs.map(|r| r.expect("valid records")).collect();
        assert_eq!(got.len(), pushed.len());
        for (g, (f, pl)) in got.iter().zip(&pushed) {
            assert_eq!(g.fragment, *f);
            assert_eq!(g.payload, *pl);
        }
    };
    match kind {
        Kind::Data => match DataBody::parse(p.body) {
            Ok(d) => {
                assert!(
                    records_valid && !pushed.is_empty(),
                    "malformed DATA accepted"
                );
                assert_eq!(
                    (d.first_seq, d.base, d.ack, d.ack_incarnation, d.credit),
                    (first_seq, base, ack, ack_incarnation, credit)
                );
                assert_eq!(d.count, pushed.len());
                check_records(d.records());
            }
            Err(e) => {
                if pushed.is_empty() {
                    assert_eq!(e, WireError::DataWithoutRecords);
                } else {
                    assert!(!records_valid, "well-formed DATA refused: {e}");
                }
            }
        },
        Kind::Datagram | Kind::Group => match parse_datagram(p.body) {
            Ok(count) => {
                assert!(records_valid, "malformed DATAGRAM accepted");
                assert_eq!(count, pushed.len());
                check_records(Records::new(p.body));
            }
            Err(e) => assert!(!records_valid, "well-formed DATAGRAM refused: {e}"),
        },
        Kind::Multicast => match MulticastBody::parse(p.body) {
            Ok(m) => {
                assert!(records_valid, "malformed MULTICAST accepted");
                assert_eq!(m.txn, txn);
                assert_eq!(m.count, pushed.len());
                check_records(m.records());
            }
            Err(e) => assert!(!records_valid, "well-formed MULTICAST refused: {e}"),
        },
        Kind::Ack => {
            let valid = naks.iter().all(|r| r.len > 0 && r.start >= ack);
            match AckBody::parse(p.body) {
                Ok(a) => {
                    assert!(valid, "malformed ACK accepted");
                    assert_eq!(
                        (a.ack, a.ack_incarnation, a.credit),
                        (ack, ack_incarnation, credit)
                    );
                    assert!(a.naks().eq(naks.iter().copied()));
                }
                Err(e) => {
                    assert!(!valid, "well-formed ACK refused: {e}");
                    assert_eq!(e, WireError::NakRangeInvalid);
                }
            }
        }
    }
});
