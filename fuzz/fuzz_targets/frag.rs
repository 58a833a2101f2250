//! Long-message (LDG) messages: `frag::msg::parse` on arbitrary bytes, then the same bytes,
//! chunk by chunk, fed to a receiver and a sender with transfers outstanding.
//!
//! Input: chunks `[from u8][len u16 le][bytes]` (a short last chunk takes what is left). Each
//! chunk is parsed; a fragment goes to the receiver, an acknowledgement to the sender, an
//! abort to the receiver; then time moves on by `from` milliseconds and both sides' timers and
//! output run.
//!
//! Properties checked besides "never panics":
//! - an accepted DATA or ABORT is canonical: writing it again gives back the same bytes;
//! - everything either side sends parses;
//! - the receiver holds at most `reassembly_bytes_max` bytes and `reassemblies_max`
//!   reassemblies.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use txcast_proto::frag::msg::{parse, write_abort, write_data, LdgMsg};
use txcast_proto::frag::{LdgConfig, Receiver, Sender};
use txcast_proto::{Address, Instant};

fn addr(k: u8) -> Address {
    Address::new(0, 1 + (k % 4) as u16, 1, 0)
}

fuzz_target!(|data: &[u8]| {
    let cfg = LdgConfig {
        fragment_bytes: 64,
        message_bytes_max: 4096,
        window_fragments_max: 8,
        transfers_max: 4,
        send_bytes_max: 16_384,
        reassemblies_max: 3,
        reassembly_bytes_max: 8192,
        completed_max: 16,
        pool_bytes_max: 8192,
        ..LdgConfig::default()
    };
    let mut receiver = Receiver::new(cfg, 1).expect("config");
    let mut sender = Sender::new(cfg, 2).expect("config");
    let mut now = Instant(1_000_000_000);
    for k in 0..3u8 {
        let _ = sender.send(
            now,
            addr(k),
            vec![k; 100 + 300 * k as usize],
            Duration::from_millis(500),
        );
    }
    let mut buf = vec![0u8; 70_000];
    let mut again = vec![0u8; 70_000];
    let mut rest = data;
    while rest.len() >= 3 {
        let from = rest[0];
        let len = (u16::from_le_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        let chunk = &rest[3..3 + len];
        rest = &rest[3 + len..];
        match parse(chunk) {
            Ok(LdgMsg::Data(h, p)) => {
                let n = write_data(&h, p, &mut again).expect("fits");
                assert_eq!(&again[..n], chunk, "not canonical");
                receiver.handle_data(now, addr(from), &h, p);
            }
            Ok(LdgMsg::Ack(a)) => sender.handle_ack(now, addr(from), &a),
            Ok(LdgMsg::Abort {
                incarnation,
                transfer,
            }) => {
                let n = write_abort(incarnation, transfer, &mut again).expect("fits");
                assert_eq!(&again[..n], chunk, "not canonical");
                receiver.handle_abort(addr(from), incarnation, transfer);
            }
            Err(_) => {}
        }
        now = now + Duration::from_millis(from as u64);
        if receiver.poll_timeout().is_some_and(|t| t <= now) {
            receiver.handle_timeout(now);
        }
        if sender.poll_timeout().is_some_and(|t| t <= now) {
            sender.handle_timeout(now);
        }
        while let Some((_, n)) = receiver.poll_transmit(&mut buf) {
            assert!(parse(&buf[..n]).is_ok(), "the receiver sent garbage");
        }
        while let Some((_, n)) = sender.poll_transmit(now, &mut buf) {
            assert!(parse(&buf[..n]).is_ok(), "the sender sent garbage");
        }
        while let Some((_, m)) = receiver.poll_message() {
            receiver.recycle(m);
        }
        while sender.poll_event().is_some() {}
        assert!(receiver.bytes_held() <= cfg.reassembly_bytes_max);
        assert!(receiver.reassembling() <= cfg.reassemblies_max);
    }
});
