//! Push's loadable programs: `Program::load` (WAT text or binary wasm, validated, compiled and
//! checked against the program ABI) on arbitrary bytes, and a program that loads run through
//! every entry point under small limits.
//!
//! Properties checked besides "never panics": loading is deterministic (the same bytes load
//! or are refused the same way twice); a loaded program instantiates or is refused with an
//! error, and its entry points (`invoke`, `on_message`, `on_timer`) return, trap or run out of
//! fuel, never taking more sends or timers per call than the limits give.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_push::{Dests, HookError, Hooks, Limits, Program};

/// Small limits, so that a looping program is stopped quickly.
fn limits() -> Limits {
    Limits {
        fuel_per_call: 20_000,
        memory_pages_max: 1,
        program_bytes_max: 64 * 1024,
        sends_per_call_max: 8,
        timers_per_call_max: 4,
        table_elements_max: 64,
    }
}

/// Counts what a call asked of the host.
#[derive(Default)]
struct Counting {
    sends: u32,
    timers: u32,
    completions: u32,
}

impl Hooks for Counting {
    fn send(&mut self, _dest: u64, msg: &[u8]) -> Result<(), HookError> {
        self.sends += 1;
        if msg.len() > 1024 {
            return Err(HookError::TooLarge);
        }
        Ok(())
    }
    fn send_many(&mut self, dests: Dests<'_>, msg: &[u8]) -> u32 {
        dests.map(|d| u32::from(self.send(d, msg).is_ok())).sum()
    }
    fn now_ns(&self) -> u64 {
        1_000
    }
    fn arm_timer(&mut self, _after_ns: u64, _token: u64) -> Result<(), HookError> {
        self.timers += 1;
        Ok(())
    }
    fn cancel_timer(&mut self, _token: u64) -> bool {
        false
    }
    fn complete(&mut self, _status: i32, _result: &[u8]) {
        self.completions += 1;
    }
}

fuzz_target!(|data: &[u8]| {
    let loaded = Program::load(data, limits());
    let again = Program::load(data, limits());
    assert_eq!(
        loaded.as_ref().err().map(ToString::to_string),
        again.as_ref().err().map(ToString::to_string),
        "loading is not deterministic"
    );
    let Ok(program) = loaded else {
        return;
    };
    let Ok(mut inst) = program.instantiate(Counting::default()) else {
        return;
    };
    let _ = inst.invoke(b"\x03\x00\x00\x00args");
    let _ = inst.on_message(0x0001_0002_0003_0004, b"a message");
    let _ = inst.on_timer(0);
    let _ = inst.invoke(&[]);
    let h = inst.hooks();
    let calls = 4;
    assert!(h.sends <= calls * limits().sends_per_call_max);
    assert!(h.timers <= calls * limits().timers_per_call_max);
});
