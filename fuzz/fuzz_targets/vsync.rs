//! The virtually synchronous stack and its ordering protocols: `vsync::msg::parse` and
//! `order::record::parse` on arbitrary bytes, then the same bytes, chunk by chunk, handed to a
//! member of a group of one and to a process joining it, as messages from other processes.
//!
//! Input: chunks `[dt u8][len u16 le][bytes]` (a short last chunk takes what is left). Each
//! chunk is parsed both ways, then delivered to both members; time moves on by `dt`
//! milliseconds and their timers and output run.
//!
//! Properties checked besides "never panics":
//! - an accepted stack message or record is canonical: writing it again gives back the bytes;
//! - everything a member sends parses;
//! - the members' queues stay within their bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_proto::order::record::{self, Kind, Record};
use txcast_proto::order::{Member, OrderConfig, Protocol};
use txcast_proto::vsync::msg::{parse, write};
use txcast_proto::vsync::VsConfig;
use txcast_proto::{Address, Instant};

fn canonical_record(b: &[u8]) {
    let Ok(r) = record::parse(b) else {
        return;
    };
    let mut out = Vec::new();
    match r {
        Record::Msg(h, p) => record::write_head(&mut out, Kind::Msg, &h, p),
        Record::Pass(h) => record::write_head(&mut out, Kind::Pass, &h, &[]),
        Record::Request(h) => record::write_head(&mut out, Kind::Request, &h, &[]),
        Record::Data(h, p) => record::write_head(&mut out, Kind::Data, &h, p),
        Record::Order(e) => record::write_order(&mut out, &e),
        Record::Submit(e) => record::write_submit(&mut out, e.iter().copied()),
    }
    // Reserved bytes are not checked by the decoder; compare what the fields say.
    assert_eq!(record::parse(&out).ok(), record::parse(b).ok());
}

fuzz_target!(|data: &[u8]| {
    let protocol = match data.first().copied().unwrap_or(0) % 4 {
        0 => Protocol::Totem,
        1 => Protocol::Total,
        2 => Protocol::Dynseq,
        _ => Protocol::Dynord,
    };
    let cfg = OrderConfig {
        protocol,
        vs: VsConfig {
            window: 16,
            cast_bytes_max: 512,
            packet_bytes_max: 8192,
            ..VsConfig::default()
        },
        send_queue_max: 32,
        submit_window: 8,
        migrate_every: 4,
        ..OrderConfig::default()
    };
    let a = Address::new(0, 1, 1, 0);
    let b = Address::new(0, 2, 1, 0);
    let mut now = Instant(1_000_000_000);
    let mut alone = Member::create(cfg.clone(), a, now).expect("config");
    let mut joining = Member::join(cfg, b, a, now).expect("config");
    let _ = alone.send(now, b"one");
    let mut buf = vec![0u8; 70_000];
    let mut again = vec![0u8; 70_000];
    let mut rest = data.get(1..).unwrap_or(&[]);
    while rest.len() >= 3 {
        let dt = rest[0];
        let len = (u16::from_le_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        let chunk = &rest[3..3 + len];
        rest = &rest[3 + len..];
        if let Ok((h, m)) = parse(chunk) {
            let n = write(&mut again, &h, &m).expect("an accepted message fits");
            assert_eq!(&again[..n], chunk, "not canonical");
        }
        canonical_record(chunk);
        alone.handle_message(now, chunk);
        joining.handle_message(now, chunk);
        now = Instant(now.0 + dt as u64 * 1_000_000);
        for m in [&mut alone, &mut joining] {
            if m.poll_timeout().is_some_and(|t| t <= now) {
                m.handle_timeout(now);
            }
            while let Some((_, n)) = m.poll_transmit(now, &mut buf) {
                assert!(
                    parse(&buf[..n]).is_ok(),
                    "a member sent what does not parse"
                );
            }
            while m.poll_delivery(|_| ()).is_some() {}
            while m.poll_event().is_some() {}
            assert!(m.sends_pending() <= 32);
            assert!(m.vs().unstable() <= 16);
        }
    }
});
