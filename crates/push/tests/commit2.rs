//! The two-round commit coordinator, driven with simulated participant replies.

mod common;

use common::{addr, Mock};
use txcast_push::{programs, Instance, Limits, Program};

const PREPARE: u8 = 1;
const COMMIT: u8 = 2;
const ABORT: u8 = 3;
const YES: u8 = 4;
const NO: u8 = 5;
const ACK: u8 = 6;

const VOTE_TIMEOUT: u64 = 50_000_000;
const ACK_TIMEOUT: u64 = 80_000_000;

fn args(parts: &[u64], txn: u64) -> Vec<u8> {
    let mut a = (parts.len() as u32).to_le_bytes().to_vec();
    a.extend_from_slice(&txn.to_le_bytes());
    a.extend_from_slice(&VOTE_TIMEOUT.to_le_bytes());
    a.extend_from_slice(&ACK_TIMEOUT.to_le_bytes());
    for p in parts {
        a.extend_from_slice(&p.to_le_bytes());
    }
    a
}

fn msg(kind: u8, txn: u64) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&txn.to_le_bytes());
    m
}

fn parts(n: u16) -> Vec<u64> {
    (0..n).map(|i| addr(i + 1, 3, 0)).collect()
}

fn coordinator() -> Instance<Mock> {
    let program = Program::load(programs::COMMIT2.as_bytes(), Limits::default()).unwrap();
    program.instantiate(Mock::default()).unwrap()
}

/// Takes the sends made since the last call.
fn take_sends(c: &mut Instance<Mock>) -> Vec<(u64, Vec<u8>)> {
    std::mem::take(&mut c.hooks_mut().sends)
}

fn to_all(parts: &[u64], kind: u8, txn: u64) -> Vec<(u64, Vec<u8>)> {
    parts.iter().map(|&p| (p, msg(kind, txn))).collect()
}

/// Starts a transaction and checks round 1's PREPAREs and vote timer.
fn start(c: &mut Instance<Mock>, parts: &[u64], txn: u64) {
    assert_eq!(c.invoke(&args(parts, txn)), Ok(0));
    assert!(c.is_pending());
    assert_eq!(take_sends(c), to_all(parts, PREPARE, txn));
    assert_eq!(c.hooks().armed.last(), Some(&(VOTE_TIMEOUT, 1)));
    assert!(c.hooks().timers.contains_key(&1));
}

fn mask(n: usize) -> Vec<u8> {
    ((1u64 << n) - 1).to_le_bytes().to_vec()
}

#[test]
fn all_yes_commits_after_both_rounds() {
    let mut c = coordinator();
    let p = parts(4);
    start(&mut c, &p, 77);
    for (i, &src) in p.iter().enumerate() {
        c.on_message(src, &msg(YES, 77)).unwrap();
        if i + 1 < p.len() {
            assert!(
                take_sends(&mut c).is_empty(),
                "no decision before all votes"
            );
        }
    }
    // Round 2: COMMIT to all, vote timer cancelled, ack timer armed.
    assert_eq!(take_sends(&mut c), to_all(&p, COMMIT, 77));
    assert!(!c.hooks().timers.contains_key(&1));
    assert_eq!(c.hooks().armed.last(), Some(&(ACK_TIMEOUT, 2)));
    assert!(c.hooks().completions.is_empty());
    for &src in &p {
        c.on_message(src, &msg(ACK, 77)).unwrap();
    }
    assert_eq!(c.hooks().completions, vec![(0, mask(4))]);
    assert!(c.hooks().timers.is_empty());
    assert!(!c.is_pending());
}

#[test]
fn one_no_aborts() {
    let mut c = coordinator();
    let p = parts(3);
    start(&mut c, &p, 5);
    c.on_message(p[0], &msg(YES, 5)).unwrap();
    c.on_message(p[2], &msg(NO, 5)).unwrap();
    assert_eq!(take_sends(&mut c), to_all(&p, ABORT, 5));
    // A vote after the decision changes nothing.
    c.on_message(p[1], &msg(YES, 5)).unwrap();
    assert!(take_sends(&mut c).is_empty());
    for &src in &p {
        c.on_message(src, &msg(ACK, 5)).unwrap();
    }
    assert_eq!(c.hooks().completions, vec![(1, mask(3))]);
}

#[test]
fn a_lost_vote_times_out_and_aborts() {
    let mut c = coordinator();
    let p = parts(3);
    start(&mut c, &p, 9);
    c.on_message(p[0], &msg(YES, 9)).unwrap();
    c.on_message(p[1], &msg(YES, 9)).unwrap();
    assert!(take_sends(&mut c).is_empty());
    // The third vote is lost: the host fires the vote timer.
    c.hooks_mut().timers.remove(&1);
    c.on_timer(1).unwrap();
    assert_eq!(take_sends(&mut c), to_all(&p, ABORT, 9));
    for &src in &p {
        c.on_message(src, &msg(ACK, 9)).unwrap();
    }
    assert_eq!(c.hooks().completions, vec![(1, mask(3))]);
}

#[test]
fn lost_acks_time_out_and_complete_with_the_acks_received() {
    let mut c = coordinator();
    let p = parts(3);
    start(&mut c, &p, 10);
    for &src in &p {
        c.on_message(src, &msg(YES, 10)).unwrap();
    }
    assert_eq!(take_sends(&mut c), to_all(&p, COMMIT, 10));
    c.on_message(p[1], &msg(ACK, 10)).unwrap();
    assert!(c.hooks().completions.is_empty());
    c.hooks_mut().timers.remove(&2);
    c.on_timer(2).unwrap();
    assert_eq!(
        c.hooks().completions,
        vec![(0, 0b010u64.to_le_bytes().to_vec())]
    );
    assert!(!c.is_pending());
}

#[test]
fn stray_messages_and_timers_are_ignored() {
    let mut c = coordinator();
    let p = parts(2);
    start(&mut c, &p, 11);
    c.on_message(p[0], &msg(YES, 12)).unwrap(); // another transaction
    c.on_message(addr(99, 3, 0), &msg(YES, 11)).unwrap(); // not a participant
    c.on_message(p[0], &[YES]).unwrap(); // short
    c.on_message(p[0], &msg(ACK, 11)).unwrap(); // not expected in round 1
    c.on_timer(2).unwrap(); // not this round's timer
    c.on_message(p[0], &msg(YES, 11)).unwrap();
    assert!(take_sends(&mut c).is_empty());
    c.on_message(p[1], &msg(YES, 11)).unwrap();
    assert_eq!(take_sends(&mut c), to_all(&p, COMMIT, 11));
}

#[test]
fn the_coordinator_runs_transactions_one_after_another() {
    let mut c = coordinator();
    let p = parts(2);
    for txn in 1..=3u64 {
        start(&mut c, &p, txn);
        // A second invoke while this one is in progress is refused.
        assert_eq!(c.invoke(&args(&p, 100)), Err(txcast_push::RunError::Busy));
        for &src in &p {
            c.on_message(src, &msg(YES, txn)).unwrap();
        }
        take_sends(&mut c);
        for &src in &p {
            c.on_message(src, &msg(ACK, txn)).unwrap();
        }
        assert_eq!(c.hooks().completions.len(), txn as usize);
    }
    assert!(c.hooks().completions.iter().all(|(s, _)| *s == 0));
}

#[test]
fn sixty_four_participants() {
    let mut c = coordinator();
    let p = parts(64);
    start(&mut c, &p, 64);
    for &src in &p {
        c.on_message(src, &msg(YES, 64)).unwrap();
    }
    assert_eq!(take_sends(&mut c).len(), 64);
    for &src in &p {
        c.on_message(src, &msg(ACK, 64)).unwrap();
    }
    assert_eq!(
        c.hooks().completions,
        vec![(0, u64::MAX.to_le_bytes().to_vec())]
    );
}

#[test]
fn bad_arguments_and_a_refused_timer_end_the_invocation() {
    let mut c = coordinator();
    assert_eq!(c.invoke(&args(&[], 1)), Ok(-1));
    assert_eq!(c.invoke(&args(&parts(65), 1)), Ok(-1));
    assert_eq!(c.invoke(&args(&parts(2), 1)[..30]), Ok(-1));
    c.hooks_mut().refuse_timers = Some(txcast_push::HookError::TooManyTimers);
    assert_eq!(c.invoke(&args(&parts(2), 1)), Ok(-2));
    assert!(c.hooks().sends.is_empty());
    assert_eq!(
        c.hooks().completions,
        vec![(-1, vec![]), (-1, vec![]), (-1, vec![]), (-2, vec![])]
    );
    assert!(!c.is_pending());
}
