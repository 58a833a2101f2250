//! `AckBody::parse` on arbitrary bytes, then the NAK ranges.
//!
//! Properties checked besides "never panics":
//! - every NAK range of an accepted ACK is non-empty and starts at or above the ack;
//! - `nak_count()` matches the iterator, is within `NAK_RANGES_MAX`, and the ranges fill the body;
//! - the encoding is canonical: `AckWriter` given the decoded fields reproduces the body, and the
//!   packet it writes parses back to the same values.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use txcast_proto::wire::{
    AckBody, AckWriter, Kind, NakRange, Packet, PacketHeader, ACK_PREFIX_BYTES, HEADER_BYTES,
    MAC_BYTES, NAK_RANGES_MAX, NAK_RANGE_BYTES,
};
use txcast_proto::Address;

fuzz_target!(|data: &[u8]| {
    let a = match AckBody::parse(data) {
        Ok(a) => a,
        Err(e) => {
            black_box(e.to_string());
            return;
        }
    };
    black_box((a.ack, a.ack_incarnation, a.credit));
    let naks: Vec<NakRange> = a.naks().collect();
    assert_eq!(naks.len(), a.nak_count());
    assert!(
        naks.len() <= NAK_RANGES_MAX,
        "more NAK ranges than the bound"
    );
    assert_eq!(data.len(), ACK_PREFIX_BYTES + naks.len() * NAK_RANGE_BYTES);
    for r in &naks {
        assert!(r.len > 0, "empty NAK range accepted: {r:?}");
        assert!(r.start >= a.ack, "NAK range {r:?} below ack {}", a.ack);
    }

    let header = PacketHeader {
        kind: Kind::Ack,
        flags: 0,
        cluster: 3,
        incarnation: 9,
        source: Address::new(1, 2, 3, 4),
        destination: Address::new(5, 6, 7, 8),
    };
    let mut buf = vec![0xeeu8; HEADER_BYTES + data.len() + MAC_BYTES];
    let n = AckWriter::write(
        &mut buf,
        header,
        None,
        (a.ack, a.ack_incarnation),
        a.credit,
        &naks,
    );
    assert_eq!(n, HEADER_BYTES + data.len());
    assert_eq!(&buf[HEADER_BYTES..n], data, "ACK re-encoding differs");
    let p = Packet::parse(&buf[..n], 3, None).expect("written ACK must parse");
    assert_eq!(p.header, header);
    let b = AckBody::parse(p.body).expect("written ACK body must parse");
    assert_eq!(
        (b.ack, b.ack_incarnation, b.credit),
        (a.ack, a.ack_incarnation, a.credit)
    );
    assert!(b.naks().eq(naks.iter().copied()));
});
