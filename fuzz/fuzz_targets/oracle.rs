//! The oracle's decoders on arbitrary bytes: a registration, a notification, an address list,
//! a pattern, and a registry snapshot (the state file).
//!
//! The first byte picks the decoder; the rest is its input. Properties checked besides "never
//! panics": what a decoder accepts is canonical (encoding it again gives back the same bytes),
//! and a restored registry holds at most `entries_max` servers and snapshots to bytes that
//! restore again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_proto::oracle::{
    decode_list, decode_pattern, encode_list, encode_pattern, Notification, Register, Registry,
};
use txcast_proto::Instant;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => {
            if let Ok(r) = Register::decode(bytes) {
                assert_eq!(r.encode(), bytes, "register not canonical");
            }
        }
        1 => {
            if let Ok(n) = Notification::decode(bytes) {
                assert_eq!(n.encode(), bytes, "notification not canonical");
            }
        }
        2 => {
            if let Ok(l) = decode_list(bytes) {
                assert_eq!(encode_list(&l), bytes, "list not canonical");
            }
        }
        3 => {
            if let Ok(p) = decode_pattern(bytes) {
                assert_eq!(encode_pattern(&p), bytes, "pattern not canonical");
            }
        }
        _ => {
            let now = Instant(1_000_000_000);
            if let Ok(mut r) = Registry::restore(bytes, now, 16) {
                assert!(r.locations().len() <= 16);
                let snap = r.snapshot();
                let again = Registry::restore(&snap, now, 16).expect("a snapshot restores");
                assert_eq!(again.locations().len(), r.locations().len());
            }
        }
    }
});
