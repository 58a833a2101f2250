//! `ModuleMsg::parse` on arbitrary bytes, and a module host fed them.
//!
//! Properties checked besides "never panics":
//! - an accepted message re-encodes to exactly the bytes it came from;
//! - a host given arbitrary messages takes none of them as a control message of its module
//!   unless it carries the module's key, and counts every one it drops.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_proto::module::msg::ModuleMsg;
use txcast_proto::module::ping::PingPong;
use txcast_proto::module::Host;
use txcast_proto::{Address, Instant};

const KEY: u64 = 0x0123_4567_89ab_cdef;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = ModuleMsg::parse(data) {
        let mut out = vec![0u8; m.len()];
        m.write(&mut out);
        assert_eq!(out, data, "re-encoding differs");
    }
    let mut host = Host::new(Address::new(0, 0, 1, 0), 7, Instant(0));
    host.load(1, KEY, Box::new(PingPong::default()))
        .expect("loads");
    let from = Address::new(0, 1, 1, 0);
    let accepted = host.handle_message(Instant(1), from, data).is_ok();
    let c = host.counters().clone();
    if accepted {
        let m = ModuleMsg::parse(data).expect("accepted means parsed");
        assert!(m.key == KEY || m.kind != txcast_proto::module::msg::MsgKind::Control);
    } else {
        let dropped = c.dropped_bad
            + c.dropped_bad_key
            + c.dropped_unknown
            + c.dropped_stale
            + c.dropped_peer_limit;
        assert_eq!(dropped, 1, "a dropped message is counted once: {c:?}");
    }
});
