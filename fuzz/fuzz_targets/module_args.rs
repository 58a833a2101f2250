//! The built-in modules' instruction arguments: `PingRun::decode` and `StreamRun::decode` on
//! arbitrary bytes, and a module host whose PING/PONG and stream modules are given those
//! bytes as the arguments of each of their instructions (control messages themselves are
//! fuzz_targets/module.rs's).
//!
//! Input: one control byte (bits 0-1: the instruction: PING/PONG's `RUN`, the stream's `SEND`
//! or `EXPECT`; bits 2-7: milliseconds the host's clock moves on after it), then the
//! arguments.
//!
//! Properties checked besides "never panics":
//! - the decoders' encoding is canonical: accepted arguments encode to the same bytes;
//! - arguments that do not decode complete the instruction at once with `STATUS_BAD_ARGS`;
//! - everything the host sends parses as a module message of the instructed module.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_proto::module::msg::ModuleMsg;
use txcast_proto::module::ping::{self, PingPong, PingRun};
use txcast_proto::module::stream::{self, Stream, StreamRun};
use txcast_proto::module::{Host, HostEvent, InstructionId};
use txcast_proto::{Address, Instant};

const KEY: u64 = 0x00c0_ffee;
const PING_MODULE: u16 = 1;
const STREAM_MODULE: u16 = 2;
const MS: u64 = 1_000_000;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, args)) = data.split_first() else {
        return;
    };
    let ping_args = PingRun::decode(args);
    if let Some(a) = ping_args {
        assert_eq!(a.encode(), args, "PingRun re-encodes differently");
    }
    let stream_args = StreamRun::decode(args);
    if let Some(a) = stream_args {
        assert_eq!(a.encode(), args, "StreamRun re-encodes differently");
    }

    let mut host = Host::new(Address::new(0, 0, 1, 0), 7, Instant(0));
    host.load(PING_MODULE, KEY, Box::new(PingPong::default()))
        .expect("loads");
    host.load(STREAM_MODULE, KEY, Box::new(Stream::default()))
        .expect("loads");
    let (module, ty, bad) = match ctl & 3 {
        0 | 3 => (PING_MODULE, ping::RUN, ping_args.is_none()),
        1 => (STREAM_MODULE, stream::SEND, stream_args.is_none()),
        _ => (STREAM_MODULE, stream::EXPECT, args.len() != 4),
    };
    host.instruct(Instant(0), InstructionId(1), module, KEY, ty, args)
        .expect("a known instruction");
    let mut completed_bad = false;
    while let Some(e) = host.poll_event() {
        if let HostEvent::Completed {
            id: InstructionId(1),
            status,
            ..
        } = e
        {
            completed_bad |= status == ping::STATUS_BAD_ARGS;
        }
    }
    assert_eq!(ping::STATUS_BAD_ARGS, stream::STATUS_BAD_ARGS);
    if bad {
        assert!(
            completed_bad,
            "bad arguments did not complete the instruction"
        );
    }
    host.handle_timeout(Instant((ctl >> 2) as u64 * MS));
    while let Some((_, m)) = host.peek_transmit() {
        let m = ModuleMsg::parse(m).expect("a sent message parses");
        assert_eq!(m.module, module);
        host.pop_transmit();
    }
    while host.poll_event().is_some() {}
});
