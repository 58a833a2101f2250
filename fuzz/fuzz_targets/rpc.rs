//! RPC messages: `rpc::msg::decode` on arbitrary bytes, then the same bytes, chunk by chunk,
//! fed to a server and a client with calls outstanding.
//!
//! Input: chunks `[from u8][len u8][bytes]` (a short last chunk takes what is left). Each
//! chunk is decoded; a request goes to the server (which executes and answers what it is told
//! to execute), a reply to the client; then time moves on by `from` milliseconds and both
//! sides' timers and output run.
//!
//! Properties checked besides "never panics":
//! - an accepted message is canonical: encoding its header and payload again gives back the
//!   same bytes;
//! - everything either side sends decodes;
//! - the server remembers at most `replies_max` calls and `clients_max` clients.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use txcast_proto::rpc::msg::{decode, encode, RpcHeader};
use txcast_proto::rpc::{Client, Completion, RpcConfig, Server, Status, Verdict};
use txcast_proto::{Address, Instant};

fn addr(k: u8) -> Address {
    Address::new(0, 1 + (k % 4) as u16, 1, 0)
}

fuzz_target!(|data: &[u8]| {
    let cfg = RpcConfig {
        replies_max: 8,
        clients_max: 3,
        calls_max: 8,
        ..RpcConfig::default()
    };
    let mut server = Server::with_incarnation(cfg, 1).expect("config");
    let mut client = Client::new(cfg, 1).expect("config");
    let mut now = Instant(1_000_000_000);
    for k in 0..4u8 {
        let _ = client.call(
            now,
            &[addr(k), addr(k + 1)],
            k as u16,
            &[k; 3],
            Completion::All,
            Duration::from_millis(50),
        );
    }
    let mut buf = vec![0u8; cfg.message_bytes_max];
    let mut rest = data;
    while rest.len() >= 2 {
        let from = rest[0];
        let len = (rest[1] as usize).min(rest.len() - 2);
        let chunk = &rest[2..2 + len];
        rest = &rest[2 + len..];
        if let Ok((header, payload)) = decode(chunk) {
            let mut again = vec![0u8; chunk.len()];
            let n = encode(&header, payload, &mut again).expect("fits");
            assert_eq!(&again[..n], chunk, "not canonical");
            match header {
                RpcHeader::Request(r) => {
                    if let Verdict::Execute { token, .. } =
                        server.handle_request(now, addr(from), &r)
                    {
                        if from.is_multiple_of(3) {
                            // Handed on to another server (forward_request).
                            server.forward(
                                token,
                                addr(from.wrapping_add(1)),
                                0,
                                1,
                                r.deadline_us,
                                payload,
                            );
                        } else {
                            server.reply(token, Status::Ok, payload);
                        }
                    }
                }
                RpcHeader::Forwarded(r, caller) => {
                    if let Verdict::Execute { token, .. } =
                        server.handle_forwarded(now, addr(from), caller, &r)
                    {
                        server.reply(token, Status::Ok, payload);
                    }
                }
                RpcHeader::Probe(r) => {
                    let v = server.handle_probe(now, addr(from), &r);
                    assert!(!matches!(v, Verdict::Execute { .. }), "a probe ran");
                }
                RpcHeader::Reply(r) => client.handle_reply(addr(from), &r, payload),
                RpcHeader::ForwardedReply(r, called) => {
                    client.handle_forwarded_reply(addr(from), called, &r, payload)
                }
            }
        }
        now = now + Duration::from_millis(from as u64);
        server.handle_timeout(now);
        client.handle_timeout(now);
        while let Some((_, n)) = server.poll_transmit(&mut buf) {
            assert!(matches!(
                decode(&buf[..n]),
                Ok((
                    RpcHeader::Reply(_) | RpcHeader::ForwardedReply(..) | RpcHeader::Forwarded(..),
                    _
                ))
            ));
        }
        while let Some((_, n)) = client.poll_transmit(now, &mut buf) {
            assert!(matches!(decode(&buf[..n]), Ok((RpcHeader::Request(_), _))));
        }
        while client.poll_event().is_some() {}
        assert!(server.remembered() <= cfg.replies_max);
        assert!(server.clients() <= cfg.clients_max);
    }
});
