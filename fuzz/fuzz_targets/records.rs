//! `Records::new` iterated to the end against `Records::validate` on the same bytes.
//!
//! Properties checked besides "never panics":
//! - `validate` is `Ok(n)` iff the iterator yields exactly `n` records, all `Ok`;
//!   `validate` is `Err(e)` iff the iterator yields some `Ok` records, then `Err(e)`, then stops;
//! - the iterator stays finished once it has returned `None`;
//! - every record's payload is the slice of the input right after its header, and valid records
//!   tile the input exactly;
//! - every accepted fragment is well formed (count > 0, index < count, len <= total_len);
//! - the encoding is canonical: writing the records again into a DATAGRAM packet reproduces
//!   the input byte for byte.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use txcast_proto::wire::{
    Kind, Packet, PacketHeader, PacketWriter, Record, Records, WireError, FRAG_EXTRA_BYTES,
    HEADER_BYTES, PACKET_BYTES_MAX, RECORD_HEADER_BYTES,
};
use txcast_proto::Address;

fuzz_target!(|data: &[u8]| {
    let validated = Records::validate(data);

    let mut it = Records::new(data);
    let mut recs: Vec<Record<'_>> = Vec::new();
    let mut error: Option<WireError> = None;
    let mut offset = 0usize;
    for r in it.by_ref() {
        assert!(error.is_none(), "iterator yielded an item after an error");
        match r {
            Ok(rec) => {
                let head = RECORD_HEADER_BYTES
                    + if rec.fragment.is_some() {
                        FRAG_EXTRA_BYTES
                    } else {
                        0
                    };
                let start = offset + head;
                assert!(
                    std::ptr::eq(rec.payload.as_ptr(), data[start..].as_ptr()),
                    "payload is not the bytes after the record header"
                );
                assert_eq!(
                    u16::from_le_bytes([data[offset], data[offset + 1]]) as usize,
                    rec.payload.len()
                );
                if let Some(f) = rec.fragment {
                    black_box((f.msg_id, f.index, f.count, f.total_len));
                    assert!(f.count > 0, "fragment count zero accepted");
                    assert!(f.index < f.count, "fragment index out of range accepted");
                    assert!(
                        rec.payload.len() as u64 <= f.total_len as u64,
                        "fragment longer than its message accepted"
                    );
                }
                black_box(rec.payload.iter().fold(0u8, |a, b| a ^ b));
                offset = start + rec.payload.len();
                recs.push(rec);
            }
            Err(e) => {
                black_box(e.to_string());
                error = Some(e);
            }
        }
    }
    assert!(it.next().is_none(), "iterator resumed after None");
    assert!(it.next().is_none(), "iterator resumed after None");

    match (validated, error) {
        (Ok(n), None) => {
            assert_eq!(n, recs.len(), "validate count differs from iteration");
            assert_eq!(offset, data.len(), "valid records do not tile the input");
        }
        (Err(e), Some(it_e)) => assert_eq!(e, it_e, "validate and iterator disagree"),
        (v, e) => panic!("validate = {v:?} but iteration ended with error {e:?}"),
    }
    let Ok(_) = validated else {
        return;
    };

    // Canonical encoding: the records written back give the same bytes.
    if HEADER_BYTES + data.len() > PACKET_BYTES_MAX {
        return;
    }
    let header = PacketHeader {
        kind: Kind::Datagram,
        flags: 0,
        cluster: 1,
        incarnation: 1,
        source: Address::new(0, 1, 2, 3),
        destination: Address::new(0, 4, 5, 6),
    };
    let mut buf = vec![0u8; HEADER_BYTES + data.len()];
    let mut w = PacketWriter::datagram(&mut buf, header, None);
    for r in &recs {
        let ok = match r.fragment {
            Some(f) => w.push_fragment(r.payload, f),
            None => w.push(r.payload),
        };
        assert!(ok, "a parsed record does not fit when written again");
    }
    let n = w.finish();
    assert_eq!(n, buf.len());
    assert_eq!(&buf[HEADER_BYTES..n], data, "re-encoded records differ");
    let p = Packet::parse(&buf[..n], 1, None).expect("re-encoded packet must parse");
    assert_eq!(p.body, data);
});
