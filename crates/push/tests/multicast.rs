//! The paper's multicast program: one invoke sends the message to each destination.

mod common;

use common::{addr, Mock};
use txcast_push::{programs, HookError, Limits, Program};

fn args(dests: &[u64], msg: &[u8]) -> Vec<u8> {
    let mut a = (dests.len() as u32).to_le_bytes().to_vec();
    for d in dests {
        a.extend_from_slice(&d.to_le_bytes());
    }
    a.extend_from_slice(msg);
    a
}

const BOTH: [&str; 2] = [programs::MULTICAST, programs::MULTICAST_MANY];

#[test]
fn multicast_sends_exactly_one_message_to_each_destination() {
    for text in BOTH {
        sends_to_each(text);
    }
}

fn sends_to_each(text: &str) {
    let program = Program::load(text.as_bytes(), Limits::default()).unwrap();
    let mut inst = program.instantiate(Mock::default()).unwrap();
    for n in [1usize, 2, 4, 8, 16] {
        let dests: Vec<u64> = (0..n).map(|i| addr(i as u16 + 1, 7, i as u16)).collect();
        let msg = format!("txn {n}: hello from push").into_bytes();
        inst.hooks_mut().sends.clear();
        inst.hooks_mut().completions.clear();
        assert_eq!(inst.invoke(&args(&dests, &msg)), Ok(0));
        let sent: Vec<(u64, Vec<u8>)> = dests.iter().map(|&d| (d, msg.clone())).collect();
        assert_eq!(inst.hooks().sends, sent, "{n} destinations");
        assert_eq!(inst.hooks().completions, vec![(n as i32, vec![])]);
        assert_eq!(inst.last_call().sends, n as u32);
        assert!(!inst.is_pending());
    }
}

#[test]
fn multicast_empty_message_and_no_destinations() {
    for text in BOTH {
        let program = Program::load(text.as_bytes(), Limits::default()).unwrap();
        let mut inst = program.instantiate(Mock::default()).unwrap();
        inst.invoke(&args(&[addr(1, 1, 1)], b"")).unwrap();
        assert_eq!(inst.hooks().sends, vec![(addr(1, 1, 1), vec![])]);
        inst.invoke(&args(&[], b"unsent")).unwrap();
        assert_eq!(inst.hooks().sends.len(), 1);
        assert_eq!(inst.hooks().completions, vec![(1, vec![]), (0, vec![])]);
    }
}

#[test]
fn multicast_bad_arguments_end_the_invocation_with_the_returned_status() {
    for text in BOTH {
        let program = Program::load(text.as_bytes(), Limits::default()).unwrap();
        let mut inst = program.instantiate(Mock::default()).unwrap();
        // Count 3 but room for one address only.
        let mut a = args(&[addr(1, 1, 1)], b"");
        a[0] = 3;
        assert_eq!(inst.invoke(&a), Ok(-1));
        assert_eq!(inst.invoke(&[1, 0]), Ok(-1));
        assert!(inst.hooks().sends.is_empty());
        assert_eq!(inst.hooks().completions, vec![(-1, vec![]), (-1, vec![])]);
        assert!(!inst.is_pending());
        assert!(!inst.is_failed());
    }
}

#[test]
fn refused_sends_are_seen_by_the_program() {
    for text in BOTH {
        let program = Program::load(text.as_bytes(), Limits::default()).unwrap();
        let mut inst = program.instantiate(Mock::default()).unwrap();
        inst.hooks_mut().refuse_sends = Some(HookError::Unreachable);
        inst.invoke(&args(&[addr(1, 1, 1), addr(2, 1, 1)], b"x"))
            .unwrap();
        // The program counts only accepted sends.
        assert_eq!(inst.hooks().completions, vec![(0, vec![])]);
        assert!(!inst.is_failed());
    }
}

#[test]
fn send_many_counts_every_destination_against_the_send_limit() {
    let limits = Limits {
        sends_per_call_max: 8,
        ..Limits::default()
    };
    let program = Program::load(programs::MULTICAST_MANY.as_bytes(), limits).unwrap();
    let mut inst = program.instantiate(Mock::default()).unwrap();
    let dests: Vec<u64> = (1..=8).map(|i| addr(i, 1, 1)).collect();
    assert_eq!(inst.invoke(&args(&dests, b"m")), Ok(0));
    assert_eq!(inst.hooks().sends.len(), 8);
    let dests: Vec<u64> = (1..=9).map(|i| addr(i, 1, 1)).collect();
    assert_eq!(
        inst.invoke(&args(&dests, b"m")),
        Err(txcast_push::RunError::TooManySends { max: 8 })
    );
    // Refused before any of the nine was sent.
    assert_eq!(inst.hooks().sends.len(), 8);
}

#[test]
fn instances_of_one_program_are_independent() {
    let program = Program::load(programs::MULTICAST.as_bytes(), Limits::default()).unwrap();
    let mut a = program.instantiate(Mock::default()).unwrap();
    let mut b = program.instantiate(Mock::default()).unwrap();
    a.invoke(&args(&[addr(1, 1, 1)], b"a")).unwrap();
    b.invoke(&args(&[addr(2, 1, 1), addr(3, 1, 1)], b"b"))
        .unwrap();
    assert_eq!(a.hooks().sends, vec![(addr(1, 1, 1), b"a".to_vec())]);
    assert_eq!(b.hooks().sends.len(), 2);
    assert_eq!(a.into_hooks().completions, vec![(1, vec![])]);
}

#[test]
fn binary_wasm_loads_as_well_as_text() {
    let binary = wat::parse_str(programs::MULTICAST).unwrap();
    let program = Program::load(&binary, Limits::default()).unwrap();
    let mut inst = program.instantiate(Mock::default()).unwrap();
    inst.invoke(&args(&[addr(1, 1, 1)], b"bin")).unwrap();
    assert_eq!(inst.hooks().completions, vec![(1, vec![])]);
}
