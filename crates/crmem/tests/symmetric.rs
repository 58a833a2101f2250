//! Symmetric CRMem on the module hosts of two sites (UDP links on loopback), through the
//! public API: transactions on both nodes, every segment's locks at its home node.

mod common;

use common::with_idle_drivers;
use std::time::Duration;
use txcast_crmem::{Handlers, LockMapping, Mode, SymCrmem, SymCrmemConfig, SymCrmemError};
use txcast_proto::Address;

const LONG: Duration = Duration::from_secs(10);

fn nodes(server: u16) -> Vec<Address> {
    vec![
        Address::new(0, 0, 10, server),
        Address::new(0, 1, 10, server),
    ]
}

fn open(server: u16, me: u16, segments: &[(usize, LockMapping, u16)]) -> SymCrmem {
    open_with(server, me, segments, Handlers::Engine)
}

fn open_with(
    server: u16,
    me: u16,
    segments: &[(usize, LockMapping, u16)],
    handlers: Handlers,
) -> SymCrmem {
    open_keeping(server, me, segments, handlers, false)
}

/// A node that keeps the locks other homes grant it until they are recalled (`keep`).
fn open_keeping(
    server: u16,
    me: u16,
    segments: &[(usize, LockMapping, u16)],
    handlers: Handlers,
    keep: bool,
) -> SymCrmem {
    let mut cfg = SymCrmemConfig {
        handlers,
        ..SymCrmemConfig::new(nodes(server), me)
    };
    cfg.core.cache_locks = keep;
    SymCrmem::open(cfg, segments).expect("open")
}

fn i64_at(m: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(m[at..at + 8].try_into().unwrap())
}

fn add(m: &mut [u8], d: i64) {
    let v = i64_at(m, 0) + d;
    m[..8].copy_from_slice(&v.to_le_bytes());
}

/// Adds 1 to the counter at offset 0 of segment 0, retrying lock timeouts.
fn increment(c: &SymCrmem) {
    loop {
        let t = c.begin(Duration::from_millis(500)).unwrap();
        match c.set_range(t, 0, 0, 8, Mode::Write) {
            Ok(()) => {}
            Err(SymCrmemError::LockTimeout) => continue,
            Err(e) => panic!("{e}"),
        }
        c.write(t, 0, 0, 8, |m| add(m, 1)).unwrap();
        c.commit(t, LONG).unwrap();
        return;
    }
}

#[test]
fn conflicting_transactions_on_two_nodes_serialize_at_the_home() {
    serialize_at_the_home(11, Handlers::Engine, false);
}

#[test]
fn polled_nodes_serialize_at_the_home() {
    serialize_at_the_home(14, Handlers::Polled, false);
}

#[test]
fn interrupt_driven_nodes_serialize_at_the_home() {
    serialize_at_the_home(15, Handlers::Interrupt, false);
}

/// Node 1 keeps the counter's lock between its transactions; node 0, its home, recalls it
/// for its own. No update is lost either way.
#[test]
fn nodes_keeping_the_lock_serialize_at_the_home() {
    serialize_at_the_home(42, Handlers::Engine, true);
    serialize_at_the_home(43, Handlers::Polled, true);
}

fn serialize_at_the_home(server: u16, handlers: Handlers, keep: bool) {
    // The counter's home is node 0: node 1's transactions take its lock there.
    let seg = [(
        100,
        LockMapping::Uniform {
            locks: 1,
            granule: 100,
        },
        0,
    )];
    let a = open_keeping(server, 0, &seg, handlers, keep);
    let b = open_keeping(server, 1, &seg, handlers, keep);
    const EACH: i64 = 200;
    with_idle_drivers(&[&a, &b], || {
        std::thread::scope(|s| {
            for c in [&a, &b] {
                s.spawn(move || (0..EACH).for_each(|_| increment(c)));
            }
        });
        // Then node 1 alone, and the home once more.
        (0..5).for_each(|_| increment(&b));
        increment(&a);
    });
    // A lost update (two transactions reading the same value) would leave less.
    for c in [&a, &b] {
        assert_eq!(i64_at(&c.snapshot_segment(0).unwrap(), 0), 2 * EACH + 6);
    }
    assert!(b.counters().lock_waits > 0 || a.counters().lock_waits > 0);
    if keep {
        // Node 1 asked once in its run alone and kept the lock for the rest; the home's
        // last transaction recalled it.
        assert!(b.counters().cache_hits >= 4, "{:?}", b.counters());
        assert!(a.counters().recalls >= 1, "{:?}", a.counters());
    } else {
        assert_eq!(b.counters().cache_hits, 0, "{:?}", b.counters());
    }
}

#[test]
fn a_remote_lock_wait_past_its_deadline_aborts_with_the_typed_error() {
    let seg = [(
        100,
        LockMapping::Uniform {
            locks: 1,
            granule: 100,
        },
        0,
    )];
    let a = open(12, 0, &seg);
    let b = open(12, 1, &seg);
    let held = a.begin(LONG).unwrap();
    a.set_range(held, 0, 0, 8, Mode::Write).unwrap();
    a.write(held, 0, 0, 8, |m| add(m, 5)).unwrap();
    let t = b.begin(Duration::from_millis(50)).unwrap();
    let r = b.set_range(t, 0, 0, 8, Mode::Read);
    assert!(matches!(r, Err(SymCrmemError::LockTimeout)), "{r:?}");
    assert_eq!(b.counters().lock_timeouts, 1);
    // The home forgot the request: once the holder commits, node 1 gets the lock and
    // reads the committed value.
    a.commit(held, LONG).unwrap();
    let t = b.begin(LONG).unwrap();
    b.set_range(t, 0, 0, 8, Mode::Read).unwrap();
    assert_eq!(b.read(t, 0, 0, 8, |m| i64_at(m, 0)).unwrap(), 5);
    b.commit(t, LONG).unwrap();
}

#[test]
fn tpcb_on_both_nodes_keeps_the_invariant_on_both_replicas() {
    tpcb_invariant(13, Handlers::Engine, false);
}

#[test]
fn tpcb_on_polled_and_interrupt_driven_nodes_keeps_the_invariant() {
    tpcb_invariant(16, Handlers::Polled, false);
    tpcb_invariant(17, Handlers::Interrupt, false);
}

#[test]
fn tpcb_on_nodes_keeping_their_locks_keeps_the_invariant() {
    tpcb_invariant(44, Handlers::Engine, true);
    tpcb_invariant(45, Handlers::Polled, true);
}

fn tpcb_invariant(server: u16, handlers: Handlers, keep: bool) {
    const ACCOUNTS: usize = 1000;
    const TELLERS: usize = 64;
    const BRANCHES: usize = 8;
    let rec = |per_lock| LockMapping::Records {
        record_bytes: 100,
        per_lock,
    };
    // Homes spread over the two nodes; the history total under one lock.
    let segs = [
        (ACCOUNTS * 100, rec(10), 0),
        (TELLERS * 100, rec(2), 1),
        (BRANCHES * 100, rec(1), 0),
        (
            16,
            LockMapping::Uniform {
                locks: 1,
                granule: 16,
            },
            1,
        ),
    ];
    let a = open_keeping(server, 0, &segs, handlers, keep);
    let b = open_keeping(server, 1, &segs, handlers, keep);
    let run = |c: &SymCrmem, seed: u64| {
        let mut x = seed;
        let mut done = 0;
        while done < 150 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let (acc, tel) = ((x >> 33) as usize % ACCOUNTS, (x >> 45) as usize % TELLERS);
            let amount = (x >> 20) as i64 % 1000 - 500;
            let t = c.begin(Duration::from_millis(200)).unwrap();
            let ranges = [
                (0, acc * 100),
                (1, tel * 100),
                (2, (tel % BRANCHES) * 100),
                (3, 0),
            ];
            let mut ok = true;
            for &(s, off) in &ranges {
                match c.set_range(t, s, off as u32, 8, Mode::Write) {
                    Ok(()) => {}
                    Err(SymCrmemError::LockTimeout) => {
                        ok = false;
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            if !ok {
                continue;
            }
            for &(s, off) in &ranges {
                c.write(t, s, off as u32, 8, |m| add(m, amount)).unwrap();
            }
            if done % 10 == 9 {
                c.abort(t).unwrap();
            } else {
                c.commit(t, LONG).unwrap();
            }
            done += 1;
        }
    };
    with_idle_drivers(&[&a, &b], || {
        std::thread::scope(|s| {
            s.spawn(|| run(&a, 1));
            s.spawn(|| run(&b, 2));
        })
    });
    let sum = |m: &[u8], n: usize| (0..n).map(|i| i64_at(m, i * 100)).sum::<i64>();
    for c in [&a, &b] {
        let accounts = sum(&c.snapshot_segment(0).unwrap(), ACCOUNTS);
        let tellers = sum(&c.snapshot_segment(1).unwrap(), TELLERS);
        let branches = sum(&c.snapshot_segment(2).unwrap(), BRANCHES);
        let history = i64_at(&c.snapshot_segment(3).unwrap(), 0);
        assert_eq!((accounts, tellers, branches), (history, history, history));
    }
    assert_eq!(a.snapshot_segment(0), b.snapshot_segment(0));
    assert_eq!(a.counters().committed + b.counters().committed, 270);
}

/// Commits in flight on one thread: numbers in order, `wait_durable` returns once the other
/// node holds them, and the next transactions wait for the locks the ones in flight hold.
#[test]
fn async_commits_complete_in_order_and_reach_the_other_node() {
    for (server, handlers) in [(18, Handlers::Engine), (19, Handlers::Polled)] {
        let seg = [(
            400,
            LockMapping::Records {
                record_bytes: 8,
                per_lock: 1,
            },
            0,
        )];
        let a = open_with(server, 0, &seg, handlers);
        let b = open_with(server, 1, &seg, handlers);
        with_idle_drivers(&[&a], || {
            let mut last = 0;
            for i in 0..300u64 {
                let t = b.begin(LONG).unwrap();
                let off = (i % 50) as u32 * 8;
                b.set_range(t, 0, off, 8, Mode::Write).unwrap();
                b.write(t, 0, off, 8, |m| m.copy_from_slice(&(i + 1).to_le_bytes()))
                    .unwrap();
                let seq = b.commit_async(t).unwrap();
                assert_eq!(seq, last + 1);
                last = seq;
            }
            b.wait_durable(last, LONG).unwrap();
            assert!(b.durable() >= last);
            // Durable means on the other node too.
            assert_eq!(a.snapshot_segment(0), b.snapshot_segment(0));
            let m = a.snapshot_segment(0).unwrap();
            assert_eq!(i64_at(&m, 49 * 8), 300);
            assert!(matches!(
                b.wait_durable(last + 1, Duration::from_millis(20)),
                Err(SymCrmemError::Timeout)
            ));
        });
    }
}

/// One thread keeps many transactions waiting for remote locks (`ask_ranges`): their
/// outcomes come from `granted` as the home grants them; one whose lock is held past its
/// deadline comes back as a lock timeout, and one its owner rolled back comes back not at all.
#[test]
fn one_thread_keeps_many_transactions_waiting_for_remote_locks() {
    for (server, handlers) in [(40, Handlers::Engine), (41, Handlers::Polled)] {
        // Sixteen counters of 8 bytes, a lock each, all homed at node 0.
        let seg = [(
            128,
            LockMapping::Uniform {
                locks: 16,
                granule: 8,
            },
            0,
        )];
        let a = open_with(server, 0, &seg, handlers);
        let b = open_with(server, 1, &seg, handlers);
        with_idle_drivers(&[&a, &b], || {
            // Node 0 holds counter 15.
            let held = a.begin(LONG).unwrap();
            a.set_range(held, 0, 15 * 8, 8, Mode::Write).unwrap();
            let mut asked = std::collections::HashMap::new();
            for k in 0..15u32 {
                let t = b.begin(LONG).unwrap();
                let now = b.ask_ranges(t, &[(0, k * 8, 8, Mode::Write)]).unwrap();
                assert!(
                    !now,
                    "a lock homed at the other node cannot be granted at once"
                );
                asked.insert(t, k);
            }
            let late = b.begin(Duration::from_millis(50)).unwrap();
            assert!(!b.ask_ranges(late, &[(0, 15 * 8, 8, Mode::Write)]).unwrap());
            let dropped = b.begin(LONG).unwrap();
            assert!(!b
                .ask_ranges(dropped, &[(0, 15 * 8, 8, Mode::Read)])
                .unwrap());
            b.abort(dropped).unwrap();
            let (mut ok, mut timed_out, mut last) = (0, 0, 0);
            let end = std::time::Instant::now() + LONG;
            while ok + timed_out < 16 && std::time::Instant::now() < end {
                for (t, r) in b.granted(4, LONG) {
                    assert_ne!(t, dropped, "rolled back by its owner: no outcome");
                    if t == late {
                        assert!(matches!(r, Err(SymCrmemError::LockTimeout)), "{r:?}");
                        timed_out += 1;
                        continue;
                    }
                    r.unwrap();
                    let k = asked.remove(&t).expect("asked once, answered once");
                    b.write(t, 0, k * 8, 8, |m| add(m, k as i64 + 1)).unwrap();
                    last = b.commit_async(t).unwrap();
                    ok += 1;
                }
            }
            assert_eq!((ok, timed_out), (15, 1));
            assert!(b.granted(4, Duration::from_millis(20)).is_empty());
            b.wait_durable(last, LONG).unwrap();
            a.commit(held, LONG).unwrap();
            let m = a.snapshot_segment(0).unwrap();
            for k in 0..15 {
                assert_eq!(i64_at(&m, k * 8), k as i64 + 1);
            }
            assert_eq!(b.counters().lock_timeouts, 1);
        });
    }
}

#[test]
fn a_commit_ships_only_the_bytes_that_changed_to_every_node() {
    let seg = [(
        4000,
        LockMapping::Records {
            record_bytes: 100,
            per_lock: 10,
        },
        0,
    )];
    // A commit log too small for the whole segment.
    let open_small = |me| {
        let mut cfg = SymCrmemConfig::new(nodes(50), me);
        cfg.core.log_bytes = 1024;
        SymCrmem::open(cfg, &seg).expect("open")
    };
    let (a, b) = (open_small(0), open_small(1));
    let whole = |c: &SymCrmem, f: &dyn Fn(&mut [u8])| -> Result<u64, SymCrmemError> {
        let t = c.begin(LONG)?;
        c.set_range(t, 0, 0, 4000, Mode::Write)?;
        c.write(t, 0, 0, 4000, |m| f(m))?;
        c.commit(t, LONG)
    };
    // From the node that is not the home: two runs of changed bytes far apart.
    let seq = whole(&b, &|m| {
        m[10..18].copy_from_slice(&(-7i64).to_le_bytes());
        m[3990] = 9;
    })
    .unwrap();
    assert_eq!(seq, 1);
    assert_eq!(a.snapshot_segment(0), b.snapshot_segment(0));
    assert_eq!(i64_at(&a.snapshot_segment(0).unwrap(), 10), -7);
    // The same bytes written back: nothing to ship, no new commit number.
    assert_eq!(whole(&b, &|m| m[3990] = 9).unwrap(), 1);
    let c = b.counters();
    assert_eq!((c.write_declared, c.write_shipped), (8000, 9));
    // Then from the home, over what the other node wrote.
    assert_eq!(whole(&a, &|m| m[11] = 1).unwrap(), 1);
    assert_eq!(a.snapshot_segment(0), b.snapshot_segment(0));
    assert_eq!(b.snapshot_segment(0).unwrap()[11], 1);
    // A change of most of the range does not fit; the transaction is still open, and its
    // abort puts the old bytes back.
    let t = a.begin(LONG).unwrap();
    a.set_range(t, 0, 0, 4000, Mode::Write).unwrap();
    a.write(t, 0, 0, 4000, |m| m.fill(3)).unwrap();
    assert!(matches!(
        a.commit(t, LONG),
        Err(SymCrmemError::Core(txcast_crmem::CrError::TooLarge))
    ));
    a.abort(t).unwrap();
    assert!(a.snapshot_segment(0) == b.snapshot_segment(0));
}
