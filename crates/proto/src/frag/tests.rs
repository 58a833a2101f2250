use super::msg::{self, AckHeader, AckStatus, DataHeader, LdgMsg, LdgWireError};
use super::*;
use crate::addr::Address;
use crate::rng::Rng;
use crate::time::Instant;

const A: Address = Address::new(1, 0, 1, 0);
const B: Address = Address::new(1, 1, 1, 0);
const MS: Duration = Duration::from_millis(1);

fn cfg() -> LdgConfig {
    LdgConfig {
        fragment_bytes: 1000,
        message_bytes_max: 1 << 20,
        send_bytes_max: 4 << 20,
        reassembly_bytes_max: 4 << 20,
        ..LdgConfig::default()
    }
}

fn message(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// A sender at A and a receiver at B, a one-way delay, and a loss rule for fragments.
struct Pair {
    now: Instant,
    s: Sender,
    r: Receiver,
    /// (arrival, to_receiver, bytes)
    wire: Vec<(Instant, bool, Vec<u8>)>,
    delay: Duration,
    /// Fragment indices (of any transfer) to drop the first time they are sent.
    drop_once: Vec<u32>,
    dropped: Vec<u32>,
    /// Drop every datagram either way (a vanished peer).
    cut: bool,
    buf: Vec<u8>,
    got: Vec<(Address, Vec<u8>)>,
    /// The application takes complete messages.
    take: bool,
    events: Vec<(TransferId, Result<(), LdgError>)>,
}

impl Pair {
    fn new(c: LdgConfig) -> Pair {
        Pair {
            now: Instant(1_000_000_000),
            s: Sender::new(c, 7).unwrap(),
            r: Receiver::new(c, 70).unwrap(),
            wire: Vec::new(),
            delay: Duration::from_micros(100),
            drop_once: Vec::new(),
            dropped: Vec::new(),
            cut: false,
            buf: vec![0; 70_000],
            got: Vec::new(),
            take: true,
            events: Vec::new(),
        }
    }

    fn step(&mut self) {
        while let Some((to, n)) = self.s.poll_transmit(self.now, &mut self.buf) {
            assert_eq!(to, B);
            let bytes = self.buf[..n].to_vec();
            if let Ok(LdgMsg::Data(h, _)) = msg::parse(&bytes) {
                if let Some(k) = self.drop_once.iter().position(|&i| i == h.index) {
                    self.drop_once.remove(k);
                    self.dropped.push(h.index);
                    continue;
                }
            }
            if !self.cut {
                self.wire.push((self.now + self.delay, true, bytes));
            }
        }
        while let Some((to, n)) = self.r.poll_transmit(&mut self.buf) {
            assert_eq!(to, A);
            if !self.cut {
                self.wire
                    .push((self.now + self.delay, false, self.buf[..n].to_vec()));
            }
        }
        while self.take {
            let Some(m) = self.r.poll_message() else {
                break;
            };
            self.got.push(m);
        }
        while let Some(e) = self.s.poll_event() {
            self.events.push(e);
        }
    }

    /// Runs for `d` of virtual time.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            self.step();
            let mut next = end;
            for (t, _, _) in &self.wire {
                next = next.min(*t);
            }
            for t in [self.s.poll_timeout(), self.r.poll_timeout()]
                .into_iter()
                .flatten()
            {
                next = next.min(t);
            }
            if next >= end && self.wire.iter().all(|(t, _, _)| *t > end) {
                self.now = end;
                self.s.handle_timeout(self.now);
                self.r.handle_timeout(self.now);
                self.step();
                return;
            }
            self.now = next.max(self.now);
            let due: Vec<_> = {
                let (due, rest): (Vec<_>, Vec<_>) =
                    self.wire.drain(..).partition(|(t, _, _)| *t <= self.now);
                self.wire = rest;
                due
            };
            for (_, to_receiver, bytes) in due {
                match msg::parse(&bytes).expect("valid") {
                    LdgMsg::Data(h, p) => {
                        assert!(to_receiver);
                        self.r.handle_data(self.now, A, &h, p);
                    }
                    LdgMsg::Ack(a) => {
                        assert!(!to_receiver);
                        self.s.handle_ack(self.now, B, &a);
                    }
                    LdgMsg::Abort {
                        incarnation,
                        transfer,
                    } => self.r.handle_abort(A, incarnation, transfer),
                }
            }
            if self.s.poll_timeout().is_some_and(|t| t <= self.now) {
                self.s.handle_timeout(self.now);
            }
            if self.r.poll_timeout().is_some_and(|t| t <= self.now) {
                self.r.handle_timeout(self.now);
            }
        }
    }
}

#[test]
fn a_long_message_arrives_whole() {
    for len in [0usize, 1, 999, 1000, 1001, 64_000, 500_000] {
        let mut p = Pair::new(cfg());
        let m = message(len, 3);
        let id = p.s.send(p.now, B, m.clone(), 10_000 * MS).unwrap();
        p.run(1000 * MS);
        assert_eq!(p.got, vec![(A, m)], "len {len}");
        assert_eq!(p.events, vec![(id, Ok(()))]);
        assert_eq!(
            p.s.counters.fragments_resent, 0,
            "no loss, no resend (len {len})"
        );
        assert_eq!(p.r.bytes_held(), 0);
        assert_eq!(p.s.outstanding(), 0);
    }
}

#[test]
fn recycled_buffers_are_reused_whole_and_the_pool_stays_bounded() {
    let c = LdgConfig {
        pool_bytes_max: 300_000,
        ..cfg()
    };
    let mut p = Pair::new(c);
    // Buffers full of stale bytes, longer and shorter than the messages that reuse them.
    for len in [200_000, 50_000, 120_000] {
        p.r.recycle(vec![0xee; len]);
    }
    assert!(p.r.pooled_bytes() <= 300_000);
    for (k, len) in [100_000usize, 150_000, 7, 0, 130_000]
        .into_iter()
        .enumerate()
    {
        let m = message(len, k as u8);
        p.s.send(p.now, B, m.clone(), 10_000 * MS).unwrap();
        p.run(1000 * MS);
        let (from, got) = p.got.pop().expect("delivered");
        assert_eq!((from, &got), (A, &m), "len {len}");
        p.r.recycle(got);
        while let Some(b) = p.s.poll_spent() {
            p.r.recycle(b);
        }
        assert!(p.r.pooled_bytes() <= 300_000);
    }
    // One larger than the bound is not kept; a buffer too short is not handed out for more.
    let before = p.r.pooled_bytes();
    p.r.recycle(vec![1; 400_000]);
    assert_eq!(p.r.pooled_bytes(), before);
    assert_eq!(p.r.buffer(350_000).len(), 350_000);
    let mut none = Receiver::new(
        LdgConfig {
            pool_bytes_max: 0,
            ..cfg()
        },
        1,
    )
    .unwrap();
    none.recycle(vec![1; 10]);
    assert_eq!(none.pooled_bytes(), 0);
}

#[test]
fn a_lost_fragment_is_sent_again_not_the_message() {
    let mut p = Pair::new(cfg());
    p.drop_once = vec![3, 40, 41, 299];
    let m = message(300_000, 9);
    p.s.send(p.now, B, m.clone(), 10_000 * MS).unwrap();
    p.run(2000 * MS);
    assert_eq!(p.got, vec![(A, m)]);
    assert_eq!(p.dropped, vec![3, 40, 41, 299]);
    let c = &p.s.counters;
    assert_eq!(c.fragments_sent, 300 + c.fragments_resent);
    assert!(
        (4..=8).contains(&c.fragments_resent),
        "only the lost ones again: {c:?}"
    );
    assert!(c.fast_retransmits >= 3, "{c:?}");
}

#[test]
fn the_window_bounds_the_fragments_in_flight() {
    let c = LdgConfig {
        window_fragments_max: 16,
        ..cfg()
    };
    let mut p = Pair::new(c);
    p.delay = 10 * MS;
    p.s.send(p.now, B, message(200_000, 1), 10_000 * MS)
        .unwrap();
    // The first round trip: at most the initial congestion window leaves.
    p.step();
    assert_eq!(p.wire.len(), 8);
    p.run(20 * MS + MS);
    let sent = p.s.counters.fragments_sent;
    assert!(sent <= 8 + 16, "{sent}");
    p.run(3000 * MS);
    assert_eq!(p.got.len(), 1);
}

#[test]
fn a_receiver_short_of_memory_admits_the_next_transfer_when_room_is_made() {
    let c = LdgConfig {
        reassembly_bytes_max: 1 << 20,
        message_bytes_max: 1 << 20,
        ..cfg()
    };
    let mut p = Pair::new(c);
    let m1 = message(700_000, 1);
    let m2 = message(700_000, 2);
    p.s.send(p.now, B, m1.clone(), 10_000 * MS).unwrap();
    p.s.send(p.now, B, m2.clone(), 10_000 * MS).unwrap();
    // One is admitted and completes, and the application does not take it: the other does
    // not fit beside it.
    p.take = false;
    p.run(300 * MS);
    assert!(p.r.counters.not_admitted > 0);
    assert_eq!(p.r.counters.delivered, 1);
    assert_eq!(p.r.reassembling(), 0, "the other waits outside");
    p.take = true;
    p.run(3000 * MS);
    assert_eq!(p.got.len(), 2);
    assert!(p.got.contains(&(A, m1)) && p.got.contains(&(A, m2)));
    assert!(p.s.counters.probes > 0, "the closed window was probed");
}

#[test]
fn a_reassembly_that_never_completes_is_freed() {
    let c = LdgConfig {
        reassembly_timeout: 100 * MS,
        ..cfg()
    };
    let mut p = Pair::new(c);
    p.delay = 5 * MS;
    let id = p.s.send(p.now, B, message(500_000, 4), 50 * MS).unwrap();
    p.run(6 * MS);
    assert!(p.r.bytes_held() >= 500_000);
    // The sender's side vanishes (its aborts too).
    p.cut = true;
    p.run(200 * MS);
    assert_eq!(p.events, vec![(id, Err(LdgError::DeadlinePassed))]);
    assert_eq!(p.r.reassembling(), 0);
    assert_eq!(p.r.bytes_held(), 0);
    assert_eq!(p.r.counters.expired, 1);
    assert!(p.got.is_empty());
}

/// Found by the simulator: a receiver that freed a reassembly (or restarted) and began it again
/// lacks the fragments it had acknowledged. The sender must see it and start again, and must
/// not call the transfer done from acknowledgements of two different reassemblies.
#[test]
fn a_receiver_that_forgot_a_transfer_gets_it_whole_again() {
    for restart in [false, true] {
        let c = LdgConfig {
            reassembly_timeout: 30 * MS,
            ..cfg()
        };
        let mut p = Pair::new(c);
        p.delay = 2 * MS;
        let m = message(300_000, 8);
        let id = p.s.send(p.now, B, m.clone(), 10_000 * MS).unwrap();
        p.run(5 * MS);
        assert_eq!(p.r.reassembling(), 1);
        // The path goes dark: the receiver frees the reassembly (or restarts).
        p.cut = true;
        p.run(60 * MS);
        if restart {
            p.r = Receiver::new(c, 71).unwrap();
        }
        assert_eq!(p.r.reassembling(), 0);
        p.cut = false;
        p.run(3000 * MS);
        assert_eq!(p.got, vec![(A, m.clone())], "restart {restart}");
        assert_eq!(p.events, vec![(id, Ok(()))]);
        assert!(p.s.counters.receiver_restarts >= 1, "{:?}", p.s.counters);
    }
}

#[test]
fn a_cancelled_transfer_is_freed_at_the_receiver() {
    let mut p = Pair::new(cfg());
    p.delay = 5 * MS;
    let id =
        p.s.send(p.now, B, message(500_000, 4), 10_000 * MS)
            .unwrap();
    p.run(20 * MS);
    assert!(p.r.reassembling() == 1);
    p.s.cancel(id).unwrap();
    assert_eq!(p.s.cancel(id), Err(LdgError::Unknown));
    p.run(20 * MS);
    assert_eq!(p.r.reassembling(), 0);
    assert_eq!(p.r.counters.aborted, 1);
    assert!(p.got.is_empty());
}

#[test]
fn too_long_messages_are_refused_on_both_sides() {
    let mut p = Pair::new(cfg());
    let max = cfg().message_bytes_max;
    assert_eq!(
        p.s.send(p.now, B, vec![0; max + 1], MS),
        Err(LdgError::TooLong { len: max + 1, max })
    );
    // A sender allowed more than this receiver takes.
    p.s = Sender::new(
        LdgConfig {
            message_bytes_max: 4 << 20,
            ..cfg()
        },
        7,
    )
    .unwrap();
    let id =
        p.s.send(p.now, B, message(2 << 20, 1), 10_000 * MS)
            .unwrap();
    p.run(100 * MS);
    assert_eq!(p.events, vec![(id, Err(LdgError::RefusedTooLong))]);
    assert!(p.r.counters.refused_too_long >= 1);
    assert_eq!(p.r.bytes_held(), 0);
}

#[test]
fn late_copies_of_a_finished_transfer_are_acknowledged_not_delivered_again() {
    let mut p = Pair::new(cfg());
    let m = message(5000, 5);
    p.s.send(p.now, B, m.clone(), 10_000 * MS).unwrap();
    p.run(100 * MS);
    assert_eq!(p.got.len(), 1);
    let h = DataHeader {
        fragment_bytes: 1000,
        incarnation: 7,
        transfer: 1,
        total_len: 5000,
        index: 2,
        deadline_ms: 100,
    };
    p.r.handle_data(p.now, A, &h, &m[2000..3000]);
    p.step();
    assert_eq!(p.got.len(), 1, "not delivered twice");
    assert_eq!(p.r.counters.duplicates, 1);
}

/// Found by the simulator: a finished transfer forgotten by the receiver while its sender
/// (which never heard "complete") still probed was begun again and delivered twice. A
/// receiver now remembers it until the sender's deadline plus the packet lifetime.
#[test]
fn a_finished_transfer_is_remembered_as_long_as_its_sender_may_send() {
    let c = LdgConfig {
        packet_lifetime: 50 * MS,
        ..cfg()
    };
    let mut r = Receiver::new(c, 1).unwrap();
    let now = Instant(1_000_000_000);
    let h = |index, deadline_ms| DataHeader {
        fragment_bytes: 1000,
        incarnation: 7,
        transfer: 1,
        total_len: 2000,
        index,
        deadline_ms,
    };
    r.handle_data(now, A, &h(0, 3000), &[1; 1000]);
    r.handle_data(now, A, &h(1, 3000), &[2; 1000]);
    assert!(r.poll_message().is_some());
    // A probe just before the sender's deadline, arriving late.
    let late = now + Duration::from_millis(3040);
    r.handle_timeout(late);
    r.handle_data(late, A, &h(1, 1), &[2; 1000]);
    assert!(r.poll_message().is_none(), "not delivered twice");
    assert_eq!(r.reassembling(), 0);
    // Past the window it is forgotten.
    r.handle_timeout(now + Duration::from_millis(3051));
    assert!(r.poll_timeout().is_none());
}

/// Found in review: after a timeout, everything that was in flight left at once, past the
/// congestion window.
#[test]
fn retransmissions_after_a_timeout_respect_the_congestion_window() {
    let mut p = Pair::new(LdgConfig {
        window_fragments_max: 64,
        ..cfg()
    });
    p.s.send(p.now, B, message(200_000, 1), 10_000 * MS)
        .unwrap();
    p.step();
    assert_eq!(p.wire.len(), 8, "the initial window");
    // All of it lost; the timeout fires.
    p.wire.clear();
    p.cut = true;
    p.run(100 * MS);
    let sent_before = p.s.counters.fragments_sent;
    p.cut = false;
    p.wire.clear();
    let t = p.s.poll_timeout().unwrap();
    p.now = t;
    p.s.handle_timeout(p.now);
    p.step();
    let burst = p.s.counters.fragments_sent - sent_before;
    assert!(burst <= 2, "{burst} fragments at once after a timeout");
    p.run(3000 * MS);
    assert_eq!(p.got.len(), 1);
}

/// Found in review: a fragment claiming a deadline of 49 days held the receiver's memory of
/// its transfer that long.
#[test]
fn a_senders_deadline_beyond_the_receivers_bound_is_taken_as_the_bound() {
    let c = LdgConfig {
        deadline_max: Duration::from_secs(1),
        packet_lifetime: 10 * MS,
        ..cfg()
    };
    let mut r = Receiver::new(c, 1).unwrap();
    let now = Instant(1_000_000_000);
    let h = DataHeader {
        fragment_bytes: 1000,
        incarnation: 7,
        transfer: 1,
        total_len: 10,
        index: 0,
        deadline_ms: u32::MAX,
    };
    r.handle_data(now, A, &h, &[1; 10]);
    assert!(r.poll_message().is_some());
    r.handle_timeout(now + Duration::from_millis(1011));
    assert!(
        r.poll_timeout().is_none(),
        "forgotten after the receiver's own bound"
    );
}

#[test]
fn sends_beyond_the_limits_are_refused() {
    let c = LdgConfig {
        transfers_max: 2,
        ..cfg()
    };
    let mut s = Sender::new(c, 1).unwrap();
    let now = Instant(0);
    s.send(now, B, vec![1; 10], MS).unwrap();
    s.send(now, B, vec![1; 10], MS).unwrap();
    assert_eq!(s.send(now, B, vec![1; 10], MS), Err(LdgError::Full));
    let mut s = Sender::new(cfg(), 1).unwrap();
    assert_eq!(
        s.send(now, B, vec![1; 10], Duration::ZERO),
        Err(LdgError::BadDeadline)
    );
    assert_eq!(
        s.send(now, B, vec![1; 10], cfg().deadline_max + MS),
        Err(LdgError::BadDeadline)
    );
    for bad in [
        LdgConfig {
            fragment_bytes: 0,
            ..cfg()
        },
        LdgConfig {
            fragment_bytes: 70_000,
            ..cfg()
        },
        LdgConfig {
            reassembly_bytes_max: 10,
            ..cfg()
        },
        LdgConfig {
            message_bytes_max: 1 << 31,
            ..cfg()
        },
        LdgConfig {
            rto_min: 2 * MS,
            rto_initial: MS,
            ..cfg()
        },
    ] {
        assert!(matches!(bad.validate(), Err(LdgError::BadConfig(_))));
        assert!(Sender::new(bad, 0).is_err());
        assert!(Receiver::new(bad, 0).is_err());
    }
}

#[test]
fn messages_round_trip_and_every_decoder_rule_is_checked() {
    let mut buf = [0u8; 200];
    let h = DataHeader {
        fragment_bytes: 100,
        incarnation: 3,
        transfer: 9,
        total_len: 250,
        index: 2,
        deadline_ms: 9,
    };
    let n = msg::write_data(&h, &[7; 50], &mut buf).unwrap();
    assert!(msg::is_ldg(&buf[..n]));
    assert_eq!(
        msg::parse(&buf[..n]).unwrap(),
        LdgMsg::Data(h, &[7; 50][..])
    );
    let data = buf;
    let with = |i: usize, v: u8, len: usize| {
        let mut b = data;
        b[i] = v;
        msg::parse(&b[..len]).unwrap_err()
    };
    assert_eq!(with(0, 0, n), LdgWireError::BadMagic(0));
    assert_eq!(with(1, 9, n), LdgWireError::UnknownKind(9));
    assert_eq!(with(2, 1, n), LdgWireError::ReservedNotZero);
    let mut nodeadline = data;
    nodeadline[36..40].fill(0);
    assert_eq!(
        msg::parse(&nodeadline[..n]).unwrap_err(),
        LdgWireError::ZeroDeadline
    );
    assert_eq!(
        with(32, 3, n),
        LdgWireError::IndexBeyondCount { index: 3, count: 3 }
    );
    assert_eq!(
        with(0, msg::LDG_MAGIC, n - 1),
        LdgWireError::WrongFragmentLength { len: 49, want: 50 }
    );
    assert_eq!(
        msg::parse(&data[..30]).unwrap_err(),
        LdgWireError::Short { len: 30, need: 40 }
    );
    let mut zero = data;
    zero[4..8].fill(0);
    assert_eq!(
        msg::parse(&zero[..n]).unwrap_err(),
        LdgWireError::BadFragmentBytes(0)
    );
    let mut huge = data;
    huge[4..8].copy_from_slice(&1u32.to_le_bytes());
    huge[24..32].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert_eq!(
        msg::parse(&huge[..n]).unwrap_err(),
        LdgWireError::TooManyFragments
    );
    let a = AckHeader {
        status: AckStatus::Partial,
        window: 16,
        incarnation: 3,
        receiver_incarnation: 4,
        reassembly: 2,
        transfer: 9,
        cumulative: 4,
        bitmap: &[0b101],
    };
    let n = msg::write_ack(&a, &mut buf).unwrap();
    let LdgMsg::Ack(back) = msg::parse(&buf[..n]).unwrap() else {
        panic!("an ack")
    };
    assert_eq!(back, a);
    assert!(back.has(3) && !back.has(4) && back.has(5) && !back.has(6) && back.has(7));
    let mut bad = buf;
    bad[2] = 7;
    assert_eq!(
        msg::parse(&bad[..n]).unwrap_err(),
        LdgWireError::UnknownAckStatus(7)
    );
    assert_eq!(
        msg::parse(&buf[..n - 1]).unwrap_err(),
        LdgWireError::BadBitmap
    );
    let n = msg::write_abort(3, 9, &mut buf).unwrap();
    assert_eq!(
        msg::parse(&buf[..n]).unwrap(),
        LdgMsg::Abort {
            incarnation: 3,
            transfer: 9
        }
    );
    assert!(!LdgWireError::BadBitmap.to_string().is_empty());
}

/// Random bytes and random well-formed fragments and acks never panic, and the receiver's
/// memory stays within its bound.
#[test]
fn random_input_never_panics_and_memory_stays_bounded() {
    let c = LdgConfig {
        reassembly_bytes_max: 200_000,
        message_bytes_max: 100_000,
        reassemblies_max: 4,
        ..cfg()
    };
    let mut rng = Rng::new(5);
    let mut r = Receiver::new(c, 70).unwrap();
    let mut s = Sender::new(c, 1).unwrap();
    let mut buf = vec![0u8; 70_000];
    let mut now = Instant(0);
    let _ = s.send(now, B, vec![1; 50_000], 100 * MS);
    for _ in 0..20_000 {
        now = now + Duration::from_micros(rng.below(2000));
        let mut bytes: Vec<u8> = (0..rng.below(80)).map(|_| rng.below(256) as u8).collect();
        if rng.chance(0.5) {
            let fb = 1 + rng.below(2000) as u32;
            let total = rng.below(150_000);
            let h = DataHeader {
                fragment_bytes: fb,
                incarnation: rng.below(3),
                transfer: rng.below(6),
                total_len: total,
                index: rng.below(msg::count(total, fb) as u64 + 1) as u32,
                deadline_ms: rng.below(3) as u32,
            };
            let len = msg::fragment_len(total, fb, h.index);
            if let Some(n) = msg::write_data(&h, &vec![9u8; len], &mut buf) {
                bytes = buf[..n].to_vec();
            }
        } else if rng.chance(0.3) {
            let bm: Vec<u8> = (0..rng.below(8)).map(|_| rng.below(256) as u8).collect();
            let a = AckHeader {
                status: AckStatus::Partial,
                window: rng.below(100) as u32,
                incarnation: 1,
                receiver_incarnation: rng.below(2),
                reassembly: rng.below(3),
                transfer: 1,
                cumulative: rng.below(60) as u32,
                bitmap: &bm,
            };
            let n = msg::write_ack(&a, &mut buf).unwrap();
            bytes = buf[..n].to_vec();
        }
        let from = Address::new(1, rng.below(3) as u16, 1, 0);
        match msg::parse(&bytes) {
            Ok(LdgMsg::Data(h, p)) => r.handle_data(now, from, &h, p),
            Ok(LdgMsg::Ack(a)) => s.handle_ack(now, B, &a),
            Ok(LdgMsg::Abort {
                incarnation,
                transfer,
            }) => r.handle_abort(from, incarnation, transfer),
            Err(_) => {}
        }
        r.handle_timeout(now);
        s.handle_timeout(now);
        while r.poll_transmit(&mut buf).is_some() {}
        while s.poll_transmit(now, &mut buf).is_some() {}
        if rng.chance(0.1) {
            while r.poll_message().is_some() {}
        }
        assert!(r.bytes_held() <= c.reassembly_bytes_max);
        assert!(r.reassembling() <= c.reassemblies_max);
    }
    assert!(
        r.counters.fragments > 1000 && r.counters.not_admitted > 0,
        "{:?}",
        r.counters
    );
}
