//! The sandbox: bad programs stop with typed errors, bad files are refused at load, and a
//! failed instance affects no other.

mod common;

use common::{addr, Mock};
use txcast_push::{
    programs, BadArgs, Entry, Hook, Instance, InstantiateError, Limits, LoadError, Program,
    RunError, TrapKind,
};

const SPIN: &str = include_str!("../programs/spin.wat");
const TRAP: &str = include_str!("../programs/trap.wat");
const OOB: &str = include_str!("../programs/oob.wat");

fn load(text: &str) -> Program {
    Program::load(text.as_bytes(), Limits::default()).unwrap()
}

fn healthy() -> Instance<Mock> {
    load(programs::MULTICAST)
        .instantiate(Mock::default())
        .unwrap()
}

/// The healthy instance still multicasts.
fn still_works(inst: &mut Instance<Mock>) {
    let mut a = 1u32.to_le_bytes().to_vec();
    a.extend_from_slice(&addr(4, 4, 4).to_le_bytes());
    a.extend_from_slice(b"ok");
    let before = inst.hooks().sends.len();
    assert_eq!(inst.invoke(&a), Ok(0));
    assert_eq!(inst.hooks().sends.len(), before + 1);
    assert!(!inst.is_failed());
}

/// Checks that `bad` failed with `err`, refuses further calls, and that `other` goes on.
fn assert_stopped(bad: &mut Instance<Mock>, err: &RunError, other: &mut Instance<Mock>) {
    assert!(err.is_fatal());
    assert!(bad.is_failed());
    assert_eq!(bad.failure(), Some(err));
    assert!(!bad.is_pending());
    assert_eq!(bad.invoke(b""), Err(RunError::Failed));
    assert_eq!(bad.on_timer(1), Err(RunError::Failed));
    assert_eq!(bad.on_message(1, b""), Err(RunError::Failed));
    still_works(other);
}

#[test]
fn a_program_that_loops_forever_runs_out_of_fuel() {
    let limits = Limits {
        fuel_per_call: 200_000,
        ..Limits::default()
    };
    let program = Program::load(SPIN.as_bytes(), limits).unwrap();
    let mut other = healthy();
    let mut spin = program.instantiate(Mock::default()).unwrap();
    let mut spin2 = program.instantiate(Mock::default()).unwrap();
    let err = spin.invoke(b"").unwrap_err();
    assert_eq!(
        err,
        RunError::OutOfFuel {
            entry: Entry::Invoke,
            budget: 200_000
        }
    );
    assert_eq!(spin.last_call().fuel, 200_000);
    assert_stopped(&mut spin, &err, &mut other);
    // Another instance of the same program is not failed by the first's failure.
    assert!(!spin2.is_failed());
    assert!(matches!(spin2.invoke(b""), Err(RunError::OutOfFuel { .. })));
}

#[test]
fn unreachable_traps() {
    let mut other = healthy();
    let mut bad = load(TRAP).instantiate(Mock::default()).unwrap();
    let err = bad.invoke(b"").unwrap_err();
    assert!(matches!(
        err,
        RunError::Trap {
            entry: Entry::Invoke,
            kind: TrapKind::Unreachable,
            ..
        }
    ));
    assert_stopped(&mut bad, &err, &mut other);
}

#[test]
fn division_by_zero_traps() {
    let mut other = healthy();
    let mut bad = load(TRAP).instantiate(Mock::default()).unwrap();
    let err = bad.on_timer(5).unwrap_err();
    assert!(matches!(
        err,
        RunError::Trap {
            entry: Entry::OnTimer,
            kind: TrapKind::DivisionByZero,
            ..
        }
    ));
    assert_stopped(&mut bad, &err, &mut other);
}

#[test]
fn a_load_outside_memory_traps() {
    let mut other = healthy();
    let mut bad = load(OOB).instantiate(Mock::default()).unwrap();
    let err = bad.invoke(b"").unwrap_err();
    assert!(matches!(
        err,
        RunError::Trap {
            kind: TrapKind::MemoryOutOfBounds,
            ..
        }
    ));
    assert_stopped(&mut bad, &err, &mut other);
}

#[test]
fn runaway_recursion_traps() {
    let text = r#"(module (memory (export "memory") 1)
        (func $f (call $f))
        (func (export "invoke") (param i32 i32) (result i32) (call $f) (i32.const 0)))"#;
    let mut other = healthy();
    let mut bad = load(text).instantiate(Mock::default()).unwrap();
    let err = bad.invoke(b"").unwrap_err();
    assert!(
        matches!(
            err,
            RunError::Trap {
                kind: TrapKind::StackOverflow,
                ..
            } | RunError::OutOfFuel { .. }
        ),
        "{err}"
    );
    assert_stopped(&mut bad, &err, &mut other);
}

/// A deterministic stream of bytes (xorshift).
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn corrupt_files_are_refused_at_load() {
    for seed in 1..20u64 {
        let bytes = noise(seed, 64 + seed as usize * 37);
        let err = Program::load(&bytes, Limits::default()).unwrap_err();
        assert!(
            matches!(err, LoadError::NotWasm | LoadError::Wat { .. }),
            "{err:?}"
        );
        // With the wasm magic and version in front, the body is garbage.
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        wasm.extend_from_slice(&bytes);
        let err = Program::load(&wasm, Limits::default()).unwrap_err();
        assert!(matches!(err, LoadError::Invalid { .. }), "{err:?}");
    }
    // A valid program cut short.
    let binary = wat::parse_str(programs::MULTICAST).unwrap();
    let err = Program::load(&binary[..binary.len() / 2], Limits::default()).unwrap_err();
    assert!(matches!(err, LoadError::Invalid { .. }), "{err:?}");
    // Text that is not WAT.
    let err = Program::load(b"(module (func (oops)))", Limits::default()).unwrap_err();
    assert!(matches!(err, LoadError::Wat { .. }), "{err:?}");
    // The multicast program still loads and runs.
    still_works(&mut healthy());
}

#[test]
fn unknown_imports_are_refused_at_load() {
    let env = r#"(module (import "env" "open" (func (param i32) (result i32)))
        (memory (export "memory") 1)
        (func (export "invoke") (param i32 i32) (result i32) (i32.const 0)))"#;
    assert_eq!(
        Program::load(env.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::UnknownImport {
            module: "env".into(),
            name: "open".into()
        }
    );
    let exec = r#"(module (import "txcast" "exec" (func))
        (memory (export "memory") 1)
        (func (export "invoke") (param i32 i32) (result i32) (i32.const 0)))"#;
    assert!(matches!(
        Program::load(exec.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::UnknownImport { .. }
    ));
    let memory = r#"(module (import "txcast" "memory" (memory 1))
        (func (export "invoke") (param i32 i32) (result i32) (i32.const 0)))"#;
    assert!(matches!(
        Program::load(memory.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::UnknownImport { .. }
    ));
    let wrong = r#"(module (import "txcast" "send" (func (param i32 i32) (result i32)))
        (memory (export "memory") 1)
        (func (export "invoke") (param i32 i32) (result i32) (i32.const 0)))"#;
    assert_eq!(
        Program::load(wrong.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::ImportType {
            hook: Hook::Send,
            expected: Hook::Send.signature()
        }
    );
}

#[test]
fn the_abi_exports_are_checked_at_load() {
    let no_invoke = r#"(module (memory (export "memory") 1))"#;
    assert_eq!(
        Program::load(no_invoke.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::MissingExport { name: "invoke" }
    );
    let no_memory =
        r#"(module (func (export "invoke") (param i32 i32) (result i32) (i32.const 0)))"#;
    assert_eq!(
        Program::load(no_memory.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::MissingExport { name: "memory" }
    );
    let bad_timer = r#"(module (memory (export "memory") 1)
        (func (export "invoke") (param i32 i32) (result i32) (i32.const 0))
        (func (export "on_timer") (param i32)))"#;
    assert!(matches!(
        Program::load(bad_timer.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::ExportType {
            name: "on_timer",
            ..
        }
    ));
    let half_input = r#"(module (memory (export "memory") 1)
        (global (export "input_ptr") i32 (i32.const 0))
        (func (export "invoke") (param i32 i32) (result i32) (i32.const 0)))"#;
    assert_eq!(
        Program::load(half_input.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::MissingExport { name: "input_cap" }
    );
    let start = r#"(module (memory (export "memory") 1) (func $s) (start $s)
        (func (export "invoke") (param i32 i32) (result i32) (i32.const 0)))"#;
    assert!(matches!(
        Program::load(start.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::Invalid { .. }
    ));
    let outside = r#"(module (memory (export "memory") 1)
        (global (export "input_ptr") i32 (i32.const 65000))
        (global (export "input_cap") i32 (i32.const 1000))
        (func (export "invoke") (param i32 i32) (result i32) (i32.const 0)))"#;
    assert_eq!(
        load(outside).instantiate(Mock::default()).unwrap_err(),
        InstantiateError::InputBuffer {
            ptr: 65000,
            cap: 1000,
            memory_len: 65536
        }
    );
}

#[test]
fn size_and_memory_limits_are_enforced() {
    let limits = Limits {
        program_bytes_max: 100,
        ..Limits::default()
    };
    assert!(matches!(
        Program::load(programs::MULTICAST.as_bytes(), limits).unwrap_err(),
        LoadError::TooLarge { max: 100, .. }
    ));
    let big = r#"(module (memory (export "memory") 3)
        (func (export "invoke") (param i32 i32) (result i32) (i32.const 0)))"#;
    assert_eq!(
        Program::load(big.as_bytes(), Limits::default()).unwrap_err(),
        LoadError::MemoryTooLarge {
            min_pages: 3,
            max_pages: 2
        }
    );
    // memory.grow within the limit succeeds, past it returns -1.
    let grow = r#"(module (import "txcast" "complete" (func $c (param i32 i32 i32)))
        (memory (export "memory") 1)
        (func (export "invoke") (param i32 i32) (result i32)
          (call $c (memory.grow (i32.const 1)) (i32.const 0) (i32.const 0))
          (i32.const 0))
        (func (export "on_timer") (param i64)
          (if (i32.ne (memory.grow (i32.const 1)) (i32.const -1)) (then unreachable))))"#;
    let mut inst = load(grow).instantiate(Mock::default()).unwrap();
    assert_eq!(inst.invoke(b""), Ok(0));
    assert_eq!(inst.hooks().completions, vec![(1, vec![])]);
    assert_eq!(inst.memory().len(), 2 * 65536);
    inst.on_timer(0).unwrap();
    assert_eq!(inst.memory().len(), 2 * 65536);
}

/// A program whose handlers call hooks with the arguments in the message:
/// on_message(src, ptr, len) reads op u32, a i32, b i32 and calls a hook: 1 send(src, a, b),
/// 2 complete(0, a, b), 3 a sends of one byte, 4 arm_timer(a, 1), 5 send_many(a, b, 0, 1).
const PROBE: &str = r#"(module
    (import "txcast" "send" (func $send (param i64 i32 i32) (result i32)))
    (import "txcast" "complete" (func $complete (param i32 i32 i32)))
    (import "txcast" "arm_timer" (func $arm (param i64 i64) (result i32)))
    (import "txcast" "send_many" (func $send_many (param i32 i32 i32 i32) (result i32)))
    (memory (export "memory") 1)
    (global (export "input_ptr") i32 (i32.const 0))
    (global (export "input_cap") i32 (i32.const 64))
    (func (export "invoke") (param i32 i32) (result i32) (i32.const 0))
    (func (export "on_message") (param $src i64) (param $p i32) (param $len i32)
      (local $op i32) (local $a i32) (local $b i32) (local $i i32)
      (local.set $op (i32.load (local.get $p)))
      (local.set $a (i32.load offset=4 (local.get $p)))
      (local.set $b (i32.load offset=8 (local.get $p)))
      (if (i32.eq (local.get $op) (i32.const 1))
        (then (drop (call $send (local.get $src) (local.get $a) (local.get $b)))))
      (if (i32.eq (local.get $op) (i32.const 2))
        (then (call $complete (i32.const 0) (local.get $a) (local.get $b))))
      (if (i32.eq (local.get $op) (i32.const 3))
        (then (loop $l
          (drop (call $send (local.get $src) (i32.const 0) (i32.const 1)))
          (local.tee $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $l (i32.lt_u (local.get $a))))))
      (if (i32.eq (local.get $op) (i32.const 4))
        (then (drop (call $arm (i64.extend_i32_s (local.get $a)) (i64.const 1)))))
      (if (i32.eq (local.get $op) (i32.const 5))
        (then (drop (call $send_many (local.get $a) (local.get $b) (i32.const 0) (i32.const 1))))))
  )"#;

fn probe(op: u32, a: i32, b: i32) -> Vec<u8> {
    [op.to_le_bytes(), a.to_le_bytes(), b.to_le_bytes()].concat()
}

fn run_probe(op: u32, a: i32, b: i32) -> (Instance<Mock>, Result<(), RunError>) {
    let mut inst = load(PROBE).instantiate(Mock::default()).unwrap();
    let r = inst.on_message(addr(1, 1, 1), &probe(op, a, b));
    (inst, r)
}

#[test]
fn a_bad_pointer_in_send_stops_the_program() {
    let mut other = healthy();
    // In bounds: the last byte of memory.
    let (inst, r) = run_probe(1, 65535, 1);
    assert_eq!(r, Ok(()));
    assert_eq!(inst.hooks().sends, vec![(addr(1, 1, 1), vec![0])]);
    for (ptr, len) in [
        (65530, 100),
        (65536, 1),
        (-1, 1),
        (0, -1),
        (i32::MAX, i32::MAX),
    ] {
        let (mut inst, r) = run_probe(1, ptr, len);
        let err = r.unwrap_err();
        assert_eq!(
            err,
            RunError::BadHookArgs {
                hook: Hook::Send,
                reason: BadArgs::OutOfBounds {
                    ptr,
                    len,
                    memory_len: 65536
                }
            }
        );
        assert!(inst.hooks().sends.is_empty());
        assert_stopped(&mut inst, &err, &mut other);
    }
}

#[test]
fn a_bad_destination_list_in_send_many_stops_the_program() {
    let mut other = healthy();
    // Two destinations read from the last 16 bytes of memory (zeroes: address 0).
    let (inst, r) = run_probe(5, 65536 - 16, 2);
    assert_eq!(r, Ok(()));
    // The message is byte 0 of memory: the probe's op, 5.
    assert_eq!(inst.hooks().sends, vec![(0, vec![5]), (0, vec![5])]);
    for (ptr, count) in [(65536 - 16, 3), (-8, 1), (0, -1), (0, i32::MAX)] {
        let (mut inst, r) = run_probe(5, ptr, count);
        let err = r.unwrap_err();
        assert!(
            matches!(
                err,
                RunError::BadHookArgs {
                    hook: Hook::SendMany,
                    reason: BadArgs::OutOfBounds { .. }
                }
            ),
            "{err:?}"
        );
        assert!(inst.hooks().sends.is_empty());
        assert_stopped(&mut inst, &err, &mut other);
    }
}

#[test]
fn a_bad_pointer_in_complete_stops_the_program() {
    let mut inst = load(PROBE).instantiate(Mock::default()).unwrap();
    inst.invoke(b"").unwrap();
    assert!(inst.is_pending());
    let err = inst.on_message(1, &probe(2, 65000, 1000)).unwrap_err();
    assert!(matches!(
        err,
        RunError::BadHookArgs {
            hook: Hook::Complete,
            reason: BadArgs::OutOfBounds { .. }
        }
    ));
    assert!(inst.hooks().completions.is_empty());
    assert!(!inst.is_pending());
}

#[test]
fn complete_without_an_invocation_stops_the_program() {
    let (inst, r) = run_probe(2, 0, 4);
    assert_eq!(
        r,
        Err(RunError::BadHookArgs {
            hook: Hook::Complete,
            reason: BadArgs::NoInvocation
        })
    );
    assert!(inst.hooks().completions.is_empty());
}

#[test]
fn complete_in_a_later_handler_ends_the_invocation() {
    let mut inst = load(PROBE).instantiate(Mock::default()).unwrap();
    inst.invoke(b"").unwrap();
    inst.on_message(1, &probe(2, 4, 4)).unwrap();
    assert_eq!(
        inst.hooks().completions,
        vec![(0, 4u32.to_le_bytes().to_vec())]
    );
    assert!(!inst.is_pending());
}

#[test]
fn sends_per_call_are_bounded() {
    let (inst, r) = run_probe(3, 256, 0);
    assert_eq!(r, Ok(()));
    assert_eq!(inst.hooks().sends.len(), 256);
    let (inst, r) = run_probe(3, 257, 0);
    assert_eq!(r, Err(RunError::TooManySends { max: 256 }));
    assert_eq!(inst.hooks().sends.len(), 256);
}

#[test]
fn timers_with_a_negative_delay_stop_the_program() {
    let (inst, r) = run_probe(4, 1000, 0);
    assert_eq!(r, Ok(()));
    assert_eq!(inst.hooks().armed, vec![(1000, 1)]);
    let (_, r) = run_probe(4, -5, 0);
    assert_eq!(
        r,
        Err(RunError::BadHookArgs {
            hook: Hook::ArmTimer,
            reason: BadArgs::NegativeDelay { after_ns: -5 }
        })
    );
}

#[test]
fn refusals_before_the_program_runs_leave_the_instance_usable() {
    let mut inst = load(PROBE).instantiate(Mock::default()).unwrap();
    assert_eq!(
        inst.on_message(1, &[0; 65]),
        Err(RunError::InputTooLong { len: 65, cap: 64 })
    );
    let mut spin = load(SPIN).instantiate(Mock::default()).unwrap();
    assert_eq!(
        spin.on_message(1, b""),
        Err(RunError::NoEntry {
            entry: Entry::OnMessage
        })
    );
    assert_eq!(
        spin.invoke(b"x"),
        Err(RunError::InputTooLong { len: 1, cap: 0 })
    );
    assert!(!inst.is_failed() && !spin.is_failed());
    assert_eq!(inst.on_message(addr(1, 1, 1), &probe(1, 0, 2)), Ok(()));
}
