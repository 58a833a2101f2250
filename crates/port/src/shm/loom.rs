//! Model checks of the ring's protocol under loom: the production reserve/publish/consume/park
//! code (through the `sync` seam), over a segment in ordinary memory. Each test explores the
//! interleavings and weak-memory outcomes of a few threads, up to a preemption bound.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p txcast-port --lib --release shm::loom
//! --target-dir target/loom` (`.ci/run` does). `LOOM_MAX_PREEMPTIONS` overrides the bound.
//!
//! Besides each test's assertions, loom fails a test on a deadlock (every thread blocked: a
//! lost futex wake-up, as the model's timed waits never time out) and on a data race on a
//! slot's payload (`Segment::note_write`/`note_read`: a producer writing a slot the consumer
//! may still be reading, or the consumer reading one whose writes it has not synchronized
//! with).

use std::time::Duration;

use ::loom::model::Builder;
use ::loom::thread;

use super::sync::model::{die, set_my_pid};
use super::sync::pid_exists;
use super::{IdleStrategy, RingConfig, RingReceiver, RingSender, SendError};

/// Preemptions explored per execution unless `LOOM_MAX_PREEMPTIONS` says otherwise: most
/// ordering bugs need one or two; the whole suite stays within minutes on two cores.
const PREEMPTIONS: usize = 2;

fn check(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTIONS);
    }
    builder.check(f);
}

fn ring(slot_count: u32) -> (RingReceiver, RingSender) {
    let rx = RingReceiver::model(RingConfig {
        slot_count,
        slot_bytes: 16,
    });
    let tx = rx.producer();
    (rx, tx)
}

/// Message `i` of producer `p`: its length varies with `i`, so a consumer that paired a
/// slot's payload with a stale length would be caught.
fn message(p: u8, i: u8) -> Vec<u8> {
    let mut m = vec![p, i];
    m.resize(2 + usize::from(i % 3), p ^ i ^ 0x5a);
    m
}

/// Checks a received message against [`message`] and returns (producer, index).
fn decode(bytes: &[u8]) -> (u8, u8) {
    assert!(bytes.len() >= 2, "short message {bytes:?}");
    let (p, i) = (bytes[0], bytes[1]);
    assert_eq!(bytes, &message(p, i)[..], "torn or stale message");
    (p, i)
}

/// Sends, retrying (with a yield, so loom runs the consumer) while the ring is full.
fn send_retrying(tx: &RingSender, msg: &[u8]) {
    loop {
        match tx.try_send(msg) {
            Ok(()) => return,
            Err(SendError::Full) => thread::yield_now(),
            Err(e) => panic!("send failed: {e}"),
        }
    }
}

/// Receives `count` messages by polling and checks each producer's arrive once and in order.
fn receive_polling(rx: &mut RingReceiver, producers: usize, count: usize) {
    let mut next = vec![0u8; producers];
    for _ in 0..count {
        let (p, i) = loop {
            if let Some(m) = rx.try_recv(decode) {
                break m;
            }
            thread::yield_now();
        };
        assert_eq!(
            i, next[p as usize],
            "producer {p}: out of order or duplicated"
        );
        next[p as usize] += 1;
    }
    assert!(rx.try_recv(decode).is_none(), "a message too many");
}

/// Claim/publish/consume: two producers (one building in place with `claim`, one with
/// `try_send`) and the consumer, in a ring that never fills.
#[test]
fn two_producers_one_consumer() {
    check(|| {
        let (mut rx, tx) = ring(4);
        let tx1 = tx.clone();
        let a = thread::spawn(move || {
            for i in 0..2 {
                let m = message(0, i);
                let mut claim = tx.claim(m.len()).expect("room");
                claim.copy_from_slice(&m);
                claim.commit();
            }
        });
        let b = thread::spawn(move || {
            for i in 0..2 {
                send_retrying(&tx1, &message(1, i));
            }
        });
        receive_polling(&mut rx, 2, 4);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(rx.counters().delivered, 4);
    });
}

/// Three producers contend for a two-slot ring: claims race, the ring fills, and positions
/// wrap onto slots the consumer has just released.
#[test]
fn three_producers_two_slots() {
    check(|| {
        let (mut rx, tx) = ring(2);
        let threads: Vec<_> = (0..3u8)
            .map(|p| {
                let tx = tx.clone();
                thread::spawn(move || send_retrying(&tx, &message(p, 0)))
            })
            .collect();
        receive_polling(&mut rx, 3, 3);
        for t in threads {
            t.join().unwrap();
        }
    });
}

/// Wrap-around: one producer laps a two-slot ring twice while the consumer drains it, so
/// every slot is reused with a sequence number one lap on.
#[test]
fn wrap_around_two_slots() {
    check(|| {
        let (mut rx, tx) = ring(2);
        let t = thread::spawn(move || {
            for i in 0..5 {
                send_retrying(&tx, &message(0, i));
            }
        });
        receive_polling(&mut rx, 1, 5);
        t.join().unwrap();
    });
}

/// A full ring refuses a send until the consumer releases a slot, and a send racing that
/// release either is refused or lands in the released slot, never over an unread message.
#[test]
fn full_ring() {
    check(|| {
        let (mut rx, tx) = ring(2);
        tx.try_send(&message(0, 0)).unwrap();
        tx.try_send(&message(0, 1)).unwrap();
        assert_eq!(tx.try_send(&message(0, 2)), Err(SendError::Full));
        let consumer = thread::spawn(move || {
            assert_eq!(rx.try_recv(decode), Some((0, 0)));
            rx
        });
        let raced = tx.try_send(&message(0, 2));
        assert!(matches!(raced, Ok(()) | Err(SendError::Full)), "{raced:?}");
        let mut rx = consumer.join().unwrap();
        if raced.is_err() {
            // The slot is free now that the consumer is done with it.
            tx.try_send(&message(0, 2)).unwrap();
        }
        assert_eq!(tx.try_send(&message(0, 3)), Err(SendError::Full));
        assert_eq!(rx.try_recv(decode), Some((0, 1)));
        assert_eq!(rx.try_recv(decode), Some((0, 2)));
        assert_eq!(rx.try_recv(decode), None);
    });
}

/// Back-pressure: a sender blocked on a full ring sleeps on the space futex and the
/// consumer's release of a slot wakes it (a lost wake-up is a deadlock here).
#[test]
fn blocked_sender_is_woken() {
    check(|| {
        let (mut rx, tx) = ring(2);
        let t = thread::spawn(move || {
            for i in 0..3 {
                tx.send_timeout(&message(0, i), Duration::from_secs(3600))
                    .unwrap();
            }
        });
        receive_polling(&mut rx, 1, 3);
        t.join().unwrap();
    });
}

/// Receives `count` messages, parking on the futex whenever none is ready.
fn receive_parking(rx: &mut RingReceiver, producers: usize, count: usize) {
    let mut next = vec![0u8; producers];
    let mut got = 0;
    while got < count {
        while let Some((p, i)) = rx.try_recv(decode) {
            assert_eq!(
                i, next[p as usize],
                "producer {p}: out of order or duplicated"
            );
            next[p as usize] += 1;
            got += 1;
        }
        if got < count {
            rx.wait(IdleStrategy::Park, None);
        }
    }
}

/// The park/wake handshake: the consumer parks on its futex while a producer publishes.
/// The producer wakes it only if it sees the consumer's `sleeping` mark, and the consumer
/// sleeps only if its re-check after the mark finds nothing ready; one message, one wake-up
/// attempt, so a lost wake-up or a sleep past a ready message is a deadlock.
#[test]
fn parked_receiver_is_woken() {
    check(|| {
        let (mut rx, tx) = ring(2);
        let t = thread::spawn(move || tx.try_send(&message(0, 0)).unwrap());
        receive_parking(&mut rx, 1, 1);
        t.join().unwrap();
    });
}

/// The handshake with two producers: either one's publish may be the one that finds the
/// consumer parked.
#[test]
fn parked_receiver_two_producers() {
    check(|| {
        let (mut rx, tx) = ring(2);
        let threads: Vec<_> = (0..2u8)
            .map(|p| {
                let tx = tx.clone();
                thread::spawn(move || tx.try_send(&message(p, 0)).unwrap())
            })
            .collect();
        receive_parking(&mut rx, 2, 2);
        for t in threads {
            t.join().unwrap();
        }
    });
}

/// A `RingWaker` from another thread ends a park with nothing in the ring.
#[test]
fn waker_ends_park() {
    check(|| {
        let (mut rx, _tx) = ring(2);
        let waker = rx.waker();
        let t = thread::spawn(move || waker.wake());
        assert!(!rx.wait(IdleStrategy::Park, None), "nothing was sent");
        t.join().unwrap();
    });
}

/// A producer that reserves a slot and dies before publishing is skipped, exactly once; a
/// live producer that holds its claim a while is waited for, never skipped.
#[test]
fn dead_producer_skipped_once() {
    const DEAD: u32 = 7;
    const LIVE: u32 = 8;
    check(|| {
        let (mut rx, tx) = ring(2);
        let tx1 = tx.clone();
        let dead = thread::spawn(move || {
            set_my_pid(DEAD);
            let mut claim = tx.claim(2).expect("room");
            claim[0] = 0xdd;
            // Dies holding the claim: nothing publishes it.
            std::mem::forget(claim);
            die();
        });
        let live = thread::spawn(move || {
            set_my_pid(LIVE);
            let m = message(1, 0);
            let mut claim = tx1.claim(m.len()).expect("room");
            claim.copy_from_slice(&m);
            thread::yield_now();
            claim.commit();
        });
        let mut got = 0;
        while !(got > 0 && !pid_exists(DEAD) && rx.is_empty()) {
            match rx.try_recv(decode) {
                Some((1, 0)) => got += 1,
                Some(other) => panic!("unexpected {other:?}"),
                None => thread::yield_now(),
            }
        }
        dead.join().unwrap();
        live.join().unwrap();
        let c = rx.counters();
        assert_eq!(got, 1);
        assert_eq!(c.delivered, 1);
        assert_eq!(c.dead_reservations, 1, "the dead producer's slot, once");
        assert_eq!(c.skipped, 1);
    });
}
