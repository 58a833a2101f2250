//! Raid's packets between sites: `msg::decode_packet` (and `decode_packet_into` with a reused
//! vector) on arbitrary bytes.
//!
//! Properties checked besides "never panics":
//! - `decode_packet_into` agrees with `decode_packet`, and leaves its vector empty on an error
//!   even when it held messages of an earlier packet;
//! - the encoding is canonical: an accepted packet written again with `put_header` and
//!   `Msg::put` gives back the same bytes (so it decodes to the same header and messages);
//! - an accepted packet with messages, cut short by its last byte, is refused (every message
//!   has fields after its kind byte, so the cut always falls inside one).
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_proto::codec::Writer;
use txcast_raid::msg::{decode_packet, decode_packet_into, put_header, Msg, PACKET_HEADER};

fuzz_target!(|data: &[u8]| {
    let whole = decode_packet(data);
    let mut reused = vec![Msg::Join { synced: 1 }];
    let into = decode_packet_into(data, &mut reused);
    match (&whole, &into) {
        (Ok((h, msgs)), Ok(h2)) => {
            assert_eq!(h, h2);
            assert_eq!(msgs, &reused);
        }
        (Err(e), Err(e2)) => {
            assert_eq!(e, e2);
            assert!(reused.is_empty(), "a refused packet left messages");
        }
        _ => panic!("decode_packet {whole:?} and decode_packet_into {into:?} disagree"),
    }
    let Ok((h, msgs)) = whole else {
        return;
    };
    assert!(data.len() >= PACKET_HEADER);
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out);
    put_header(&mut w, h);
    for m in &msgs {
        m.put(&mut w);
    }
    assert_eq!(out, data, "packet re-encodes differently: {h:?} {msgs:?}");
    if !msgs.is_empty() {
        match decode_packet(&data[..data.len() - 1]) {
            Err(_) => {}
            Ok((_, cut)) => panic!("a cut packet decoded: {cut:?}"),
        }
    }
});
