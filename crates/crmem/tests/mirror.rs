//! The CRMem core through its public API: one primary and its backups, messages carried in
//! order by a loop.

use txcast_crmem::{
    AbortReason, Config, CrError, Event, Lock, LockMapping, Mode, Node, NodeId, Role,
};
use txcast_proto::time::Instant;

const FAR: Instant = Instant(u64::MAX);

fn cfg(node: NodeId) -> Config {
    Config {
        node,
        ..Config::default()
    }
}

/// A primary (node 0) with backups 1..=n, each with one 4,000-byte segment of 100-byte
/// records, ten to a lock.
fn cluster(backups: u16) -> Vec<Node> {
    cluster_with(backups, |c| c)
}

/// [`cluster`] with each node's configuration changed by `f`.
fn cluster_with(backups: u16, f: impl Fn(Config) -> Config) -> Vec<Node> {
    let mut v = vec![Node::new(
        f(cfg(0)),
        Role::Primary {
            backups: (1..=backups).collect(),
        },
    )];
    for k in 1..=backups {
        v.push(Node::new(f(cfg(k)), Role::Backup { primary: 0 }));
    }
    v.into_iter().map(with_segment).collect()
}

/// `n` with the cluster's segment: 4,000 bytes of 100-byte records, ten to a lock.
fn with_segment(mut n: Node) -> Node {
    n.add_segment(
        4000,
        LockMapping::Records {
            record_bytes: 100,
            per_lock: 10,
        },
    )
    .unwrap();
    n
}

/// Node `node`'s process of `incarnation`, restarted, recovering from node 0, with the
/// cluster's segment.
fn restarted(node: NodeId, incarnation: u64) -> Node {
    with_segment(Node::new(
        Config {
            node,
            incarnation,
            ..Config::default()
        },
        Role::Recovering { from: 0 },
    ))
}

/// Delivers every message until none is left (nodes marked dead drop theirs).
fn pump(nodes: &mut [Node], dead: &[NodeId]) {
    loop {
        let mut any = false;
        for i in 0..nodes.len() {
            while let Some((to, m)) = nodes[i].poll_transmit() {
                any = true;
                if !dead.contains(&(i as NodeId)) && !dead.contains(&to) {
                    nodes[to as usize].handle_message(i as NodeId, &m);
                }
            }
        }
        if !any {
            return;
        }
    }
}

fn events(n: &mut Node) -> Vec<Event> {
    std::iter::from_fn(|| n.poll_event()).collect()
}

fn write(n: &mut Node, t: u64, off: u32, bytes: &[u8]) {
    assert_eq!(
        n.set_range(t, 0, off, bytes.len() as u32, Mode::Write),
        Ok(Lock::Granted)
    );
    n.range_mut(t, 0, off, bytes.len() as u32)
        .unwrap()
        .copy_from_slice(bytes);
}

#[test]
fn abort_restores_every_written_range() {
    let mut c = cluster(1);
    let p = &mut c[0];
    let t = p.begin(FAR).unwrap();
    write(p, t, 0, &[1; 150]);
    p.commit(t).unwrap();
    let before = p.segment(0).unwrap().to_vec();
    let t = p.begin(FAR).unwrap();
    write(p, t, 100, &[2; 100]);
    write(p, t, 50, &[3; 100]); // overlaps the first write
    write(p, t, 3000, &[4; 10]);
    assert_ne!(p.segment(0).unwrap(), &before[..]);
    p.abort(t).unwrap();
    assert_eq!(p.segment(0).unwrap(), &before[..]);
    // The aborted transaction's locks are free again.
    let t = p.begin(FAR).unwrap();
    write(p, t, 100, &[5; 10]);
}

#[test]
fn ranges_must_be_declared_in_the_right_mode() {
    let mut c = cluster(1);
    let p = &mut c[0];
    let t = p.begin(FAR).unwrap();
    assert_eq!(p.range(t, 0, 0, 1), Err(CrError::NotSet));
    p.set_range(t, 0, 0, 100, Mode::Read).unwrap();
    assert!(p.range(t, 0, 10, 20).is_ok());
    assert_eq!(p.range_mut(t, 0, 10, 20).err(), Some(CrError::NotSet));
    assert_eq!(p.range(t, 0, 90, 20).err(), Some(CrError::NotSet));
    assert_eq!(
        p.set_range(t, 0, 3990, 20, Mode::Read),
        Err(CrError::OutOfRange)
    );
    assert_eq!(
        p.set_range(t, 0, 0, 0, Mode::Read),
        Err(CrError::OutOfRange)
    );
    assert_eq!(
        p.set_range(t, 9, 0, 1, Mode::Read),
        Err(CrError::UnknownSegment)
    );
    assert_eq!(
        p.set_range(77, 0, 0, 1, Mode::Read),
        Err(CrError::UnknownTxn)
    );
    // Upgrade: the only reader may write.
    assert_eq!(p.set_range(t, 0, 0, 100, Mode::Write), Ok(Lock::Granted));
    assert!(p.range_mut(t, 0, 10, 20).is_ok());
    // A backup runs no transactions.
    assert_eq!(c[1].begin(FAR), Err(CrError::NotPrimary));
}

#[test]
fn a_conflict_waits_for_the_holder_and_a_late_one_aborts() {
    let mut c = cluster(1);
    let p = &mut c[0];
    let a = p.begin(FAR).unwrap();
    write(p, a, 0, &[1; 10]);
    let b = p.begin(Instant(1_000)).unwrap();
    assert_eq!(p.set_range(b, 0, 1500, 10, Mode::Read), Ok(Lock::Granted));
    assert_eq!(p.set_range(b, 0, 5, 10, Mode::Read), Ok(Lock::Waiting));
    assert_eq!(p.range(b, 0, 1500, 10).err(), Some(CrError::NotActive));
    p.commit(a).unwrap();
    assert_eq!(events(p), [Event::Granted(b)]);
    let mut seen = [1u8; 10];
    seen[5..].fill(0);
    assert_eq!(p.range(b, 0, 5, 10).unwrap(), &seen[..]);
    // C waits on B's shared lock to write, past its deadline.
    let cx = p.begin(Instant(2_000)).unwrap();
    write(p, cx, 3000, &[9; 10]);
    assert_eq!(p.set_range(cx, 0, 0, 1, Mode::Write), Ok(Lock::Waiting));
    assert_eq!(p.poll_timeout(), Some(Instant(2_000)));
    p.handle_timeout(Instant(1_999));
    assert!(events(p).is_empty());
    p.handle_timeout(Instant(2_000));
    assert_eq!(events(p), [Event::Aborted(cx, AbortReason::LockTimeout)]);
    assert_eq!(&p.segment(0).unwrap()[3000..3010], &[0; 10]);
    assert_eq!(p.counters().lock_timeouts, 1);
    pump(&mut c, &[]);
    assert_eq!(events(&mut c[0]), [Event::Committed(a)]);
}

#[test]
fn commits_complete_when_every_backup_has_them_in_order() {
    let mut c = cluster(2);
    let t1 = c[0].begin(FAR).unwrap();
    write(&mut c[0], t1, 0, &[7; 2500]); // several parts
    assert_eq!(c[0].commit(t1), Ok(1));
    let t2 = c[0].begin(FAR).unwrap();
    c[0].set_range(t2, 0, 0, 10, Mode::Read).unwrap();
    assert_eq!(c[0].commit(t2), Ok(1)); // read-only: behind commit 1
    assert!(events(&mut c[0]).is_empty());
    // Everything but the last part of commit 1 reaches backup 1: nothing is applied.
    let msgs: Vec<_> = std::iter::from_fn(|| c[0].poll_transmit()).collect();
    let to1: Vec<_> = msgs.iter().filter(|(k, _)| *k == 1).collect();
    assert!(to1.len() >= 3, "{} parts", to1.len());
    for (_, m) in &to1[..to1.len() - 1] {
        c[1].handle_message(0, m);
    }
    assert_eq!(c[1].segment(0).unwrap()[0], 0);
    c[1].handle_message(0, &to1.last().unwrap().1);
    assert_eq!(&c[1].segment(0).unwrap()[..2500], &[7; 2500][..]);
    pump(&mut c, &[]);
    assert!(
        events(&mut c[0]).is_empty(),
        "backup 2 has not acknowledged"
    );
    for (k, m) in msgs.iter().filter(|(k, _)| *k == 2) {
        c[*k as usize].handle_message(0, m);
    }
    pump(&mut c, &[]);
    assert_eq!(
        events(&mut c[0]),
        [Event::Committed(t1), Event::Committed(t2)]
    );
    assert_eq!(c[0].durable(), 1);
    assert_eq!(c[2].segment(0), c[0].segment(0));
    assert_eq!((c[1].seq(), c[2].seq()), (1, 1));
}

#[test]
fn bad_messages_are_refused_whole_and_counted() {
    let mut c = cluster(1);
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 0, &[1; 1500]);
    c[0].commit(t).unwrap();
    let parts: Vec<_> = std::iter::from_fn(|| c[0].poll_transmit()).collect();
    assert_eq!(parts.len(), 2);
    let b = &mut c[1];
    b.handle_message(0, b"\xC7");
    b.handle_message(0, &[0xC7, 99, 0, 0]);
    b.handle_message(3, &parts[0].1); // not its primary
    b.handle_message(0, &parts[1].1); // the last part first
    assert_eq!(b.counters().refused, 4);
    assert_eq!(b.segment(0).unwrap()[0], 0);
    // A whole commit whose range runs past the segment: nothing of it is applied.
    let mut bad = parts[1].1.clone();
    let at = 16 + 2; // the first range's offset
    bad[at..at + 4].copy_from_slice(&3999u32.to_le_bytes());
    b.handle_message(0, &parts[0].1);
    b.handle_message(0, &bad);
    assert_eq!(b.counters().refused, 5);
    assert_eq!(b.segment(0).unwrap()[0], 0);
    assert_eq!(b.seq(), 0);
    // The good commit still applies.
    b.handle_message(0, &parts[0].1);
    b.handle_message(0, &parts[1].1);
    assert_eq!(b.seq(), 1);
    assert_eq!(&b.segment(0).unwrap()[..1500], &[1; 1500][..]);
}

#[test]
fn the_backup_takes_over_without_a_half_received_commit() {
    let mut c = cluster(1);
    let t1 = c[0].begin(FAR).unwrap();
    write(&mut c[0], t1, 0, &[1; 100]);
    c[0].commit(t1).unwrap();
    pump(&mut c, &[]);
    assert_eq!(events(&mut c[0]), [Event::Committed(t1)]);
    let t2 = c[0].begin(FAR).unwrap();
    write(&mut c[0], t2, 0, &[2; 2000]);
    c[0].commit(t2).unwrap();
    // The primary dies after its first part left.
    let (to, first) = c[0].poll_transmit().unwrap();
    c[to as usize].handle_message(0, &first);
    c[1].primary_down(1, &[1]);
    assert_eq!(events(&mut c[1]), [Event::Promoted]);
    assert_eq!(c[1].role(), &Role::Primary { backups: vec![] });
    assert_eq!(&c[1].segment(0).unwrap()[..100], &[1; 100][..]);
    assert_eq!(c[1].segment(0).unwrap()[100], 0);
    // It runs transactions now, numbered after what it applied.
    let t = c[1].begin(FAR).unwrap();
    write(&mut c[1], t, 200, &[3; 10]);
    assert_eq!(c[1].commit(t), Ok(2));
    assert_eq!(events(&mut c[1]), [Event::Committed(t)]);
    // The old primary comes back as a new process and recovers from it; an open
    // transaction's writes are not in the snapshot, later commits follow it.
    let open = c[1].begin(FAR).unwrap();
    write(&mut c[1], open, 300, &[4; 10]);
    c[0] = Node::new(cfg(0), Role::Recovering { from: 1 });
    c[0].add_segment(4000, LockMapping::None).unwrap();
    pump(&mut c, &[]);
    assert_eq!(events(&mut c[0]), [Event::Recovered]);
    assert_eq!(c[0].role(), &Role::Backup { primary: 1 });
    assert_eq!(c[0].seq(), 2);
    assert_eq!(&c[0].segment(0).unwrap()[300..310], &[0; 10]);
    c[1].commit(open).unwrap();
    pump(&mut c, &[]);
    assert_eq!(events(&mut c[1]), [Event::Committed(open)]);
    assert_eq!(c[0].segment(0), c[1].segment(0));
}

#[test]
fn a_lost_backup_lets_commits_complete_degraded() {
    let mut c = cluster(2);
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 0, &[1; 10]);
    c[0].commit(t).unwrap();
    pump(&mut c, &[2]);
    assert!(events(&mut c[0]).is_empty());
    c[0].peer_down(2);
    assert_eq!(
        events(&mut c[0]),
        [Event::BackupLost(2), Event::Committed(t)]
    );
    assert_eq!(c[0].counters().degraded, 1);
}

#[test]
fn the_other_backups_catch_up_with_the_successor_without_a_snapshot() {
    let mut c = cluster(2);
    let t1 = c[0].begin(FAR).unwrap();
    write(&mut c[0], t1, 0, &[1; 10]);
    c[0].commit(t1).unwrap();
    // Commit 1 reaches backup 1 only; then the primary dies.
    let msgs: Vec<_> = std::iter::from_fn(|| c[0].poll_transmit()).collect();
    for (k, m) in msgs.iter().filter(|(k, _)| *k == 1) {
        c[*k as usize].handle_message(0, m);
    }
    assert_eq!((c[1].seq(), c[2].seq()), (1, 0));
    c[1].primary_down(1, &[1, 2]);
    c[2].primary_down(1, &[1, 2]);
    assert_eq!(c[2].role(), &Role::Recovering { from: 1 });
    pump(&mut c, &[0]);
    assert_eq!(events(&mut c[1]), [Event::Promoted]);
    assert_eq!(events(&mut c[2]), [Event::Recovered]);
    assert_eq!(c[2].seq(), 1);
    assert_eq!(c[2].segment(0), c[1].segment(0));
    // From the successor's tail: commit 1 alone, no snapshot.
    assert_eq!(c[2].counters().caught_up, 1);
    assert_eq!(c[1].counters().snapshots_sent, 0);
    // Backup 2 serves the new primary from here on.
    let t = c[1].begin(FAR).unwrap();
    write(&mut c[1], t, 20, &[2; 10]);
    c[1].commit(t).unwrap();
    pump(&mut c, &[0]);
    assert_eq!(events(&mut c[1]), [Event::Committed(t)]);
    assert_eq!(c[2].segment(0), c[1].segment(0));
}

#[test]
fn a_backup_undoes_the_dead_primarys_commits_the_successor_never_had() {
    let mut c = cluster(2);
    let t1 = c[0].begin(FAR).unwrap();
    write(&mut c[0], t1, 0, &[1; 10]);
    c[0].commit(t1).unwrap();
    pump(&mut c, &[]);
    let t2 = c[0].begin(FAR).unwrap();
    write(&mut c[0], t2, 5, &[2; 30]);
    c[0].commit(t2).unwrap();
    // Commit 2 (never acknowledged) reaches backup 2 only; then the primary dies.
    let msgs: Vec<_> = std::iter::from_fn(|| c[0].poll_transmit()).collect();
    for (k, m) in msgs.iter().filter(|(k, _)| *k == 2) {
        c[*k as usize].handle_message(0, m);
    }
    assert_eq!((c[1].seq(), c[2].seq()), (1, 2));
    c[1].primary_down(1, &[1, 2]);
    c[2].primary_down(1, &[1, 2]);
    pump(&mut c, &[0]);
    assert_eq!(events(&mut c[1]), [Event::Promoted]);
    assert_eq!(events(&mut c[2]), [Event::Recovered]);
    assert_eq!(c[2].seq(), 1);
    assert_eq!(c[2].segment(0), c[1].segment(0));
    assert_eq!(
        &c[2].segment(0).unwrap()[..12],
        &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    );
    assert_eq!((c[2].counters().undone, c[2].counters().caught_up), (1, 1));
    assert_eq!(c[1].counters().snapshots_sent, 0);
    // The successor's own commit 2 is not the dead primary's.
    let t = c[1].begin(FAR).unwrap();
    write(&mut c[1], t, 100, &[3; 10]);
    assert_eq!(c[1].commit(t), Ok(2));
    pump(&mut c, &[0]);
    assert_eq!(events(&mut c[1]), [Event::Committed(t)]);
    assert_eq!(c[2].segment(0), c[1].segment(0));
}

#[test]
fn backups_keep_only_the_commits_not_yet_durable_and_still_catch_up() {
    let mut c = cluster(2);
    for i in 0..200u32 {
        let t = c[0].begin(FAR).unwrap();
        write(&mut c[0], t, (i % 390) * 10, &[i as u8; 10]);
        c[0].commit(t).unwrap();
        pump(&mut c, &[]);
    }
    // The primary told them durable every 16 commits: the rest is all they keep.
    for b in &c[1..] {
        assert!(b.tail_commits() <= 17, "{}", b.tail_commits());
    }
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 0, &[9; 10]);
    c[0].commit(t).unwrap();
    let msgs: Vec<_> = std::iter::from_fn(|| c[0].poll_transmit()).collect();
    for (k, m) in msgs.iter().filter(|(k, _)| *k == 2) {
        c[*k as usize].handle_message(0, m);
    }
    c[1].primary_down(1, &[1, 2]);
    c[2].primary_down(1, &[1, 2]);
    pump(&mut c, &[0]);
    assert_eq!(c[2].role(), &Role::Backup { primary: 1 });
    assert_eq!((c[2].counters().undone, c[2].counters().caught_up), (1, 1));
    assert_eq!(c[1].counters().snapshots_sent, 0);
    assert_eq!(c[2].segment(0), c[1].segment(0));
}

#[test]
fn the_new_primarys_commits_wait_for_a_backup_catching_up_and_reach_it_in_order() {
    let mut c = cluster(2);
    let t1 = c[0].begin(FAR).unwrap();
    write(&mut c[0], t1, 0, &[1; 10]);
    c[0].commit(t1).unwrap();
    pump(&mut c, &[]);
    // Node 1 takes over and commits twice before backup 2 knows the primary died.
    c[1].primary_down(1, &[1, 2]);
    let mut mine = Vec::new();
    for (i, off) in [(2u8, 200u32), (3, 300)] {
        let t = c[1].begin(FAR).unwrap();
        write(&mut c[1], t, off, &[i; 10]);
        c[1].commit(t).unwrap();
        mine.push(t);
    }
    // Nothing is shipped to a backup that has not caught up, and nothing completes.
    assert!(std::iter::from_fn(|| c[1].poll_transmit()).next().is_none());
    assert_eq!(events(&mut c[1]), [Event::Promoted]);
    c[2].primary_down(1, &[1, 2]);
    pump(&mut c, &[0]);
    assert_eq!(
        events(&mut c[1]),
        [Event::Committed(mine[0]), Event::Committed(mine[1])]
    );
    assert_eq!(c[2].seq(), 3);
    assert_eq!(c[2].segment(0), c[1].segment(0));
    assert_eq!(c[1].counters().snapshots_sent, 0);
}

#[test]
fn a_backup_the_tail_does_not_reach_takes_a_snapshot() {
    // Backups keep a tail of twice their log budget: 300 bytes here, a few commits.
    let small = |node| Config {
        node,
        log_bytes: 150,
        ..Config::default()
    };
    let mut c = vec![Node::new(
        cfg(0),
        Role::Primary {
            backups: vec![1, 2],
        },
    )];
    c.push(Node::new(small(1), Role::Backup { primary: 0 }));
    c.push(Node::new(small(2), Role::Backup { primary: 0 }));
    for n in &mut c {
        n.add_segment(4000, LockMapping::None).unwrap();
    }
    // Ten commits reach backup 1 only.
    for i in 0..10u8 {
        let t = c[0].begin(FAR).unwrap();
        assert_eq!(
            c[0].set_range(t, 0, 40 * i as u32, 40, Mode::Write),
            Ok(Lock::Granted)
        );
        c[0].range_mut(t, 0, 40 * i as u32, 40).unwrap().fill(i + 1);
        c[0].commit(t).unwrap();
    }
    let msgs: Vec<_> = std::iter::from_fn(|| c[0].poll_transmit()).collect();
    for (k, m) in msgs.iter().filter(|(k, _)| *k == 1) {
        c[*k as usize].handle_message(0, m);
    }
    assert_eq!((c[1].seq(), c[2].seq()), (10, 0));
    c[1].primary_down(1, &[1, 2]);
    c[2].primary_down(1, &[1, 2]);
    pump(&mut c, &[0]);
    assert_eq!(c[2].role(), &Role::Backup { primary: 1 });
    assert_eq!(c[2].seq(), 10);
    assert_eq!(c[2].segment(0), c[1].segment(0));
    assert_eq!(c[1].counters().snapshots_sent, 1);
    assert_eq!(c[2].counters().caught_up, 0);
}

#[test]
fn a_snapshot_for_another_request_is_not_taken() {
    let mut c = cluster(1);
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 0, &[1; 3000]);
    c[0].commit(t).unwrap();
    pump(&mut c, &[]);
    // Backup 1 restarts twice; the snapshot sent to its first new incarnation reaches the
    // second (as a link retransmits to a peer that restarted).
    c[0].peer_down(1);
    let mut first = restarted(1, 2);
    let (_, req) = first.poll_transmit().unwrap();
    c[0].handle_message(1, &req);
    let stale: Vec<_> = std::iter::from_fn(|| c[0].poll_transmit()).collect();
    assert!(stale.len() >= 2);
    c[1] = restarted(1, 3);
    for (_, m) in &stale {
        c[1].handle_message(0, m);
    }
    assert_eq!(c[1].role(), &Role::Recovering { from: 0 });
    assert_eq!(c[1].counters().refused, stale.len() as u64);
    // Its own snapshot comes whole.
    pump(&mut c, &[]);
    assert_eq!(events(&mut c[1]), [Event::Recovered]);
    assert_eq!(c[1].segment(0), c[0].segment(0));
}

#[test]
fn reading_a_lock_twice_still_lets_the_transaction_write() {
    let mut c = cluster(1);
    let p = &mut c[0];
    let t = p.begin(FAR).unwrap();
    // Both ranges map to lock 0 (ten 100-byte records to a lock).
    assert_eq!(p.set_range(t, 0, 0, 10, Mode::Read), Ok(Lock::Granted));
    assert_eq!(p.set_range(t, 0, 200, 10, Mode::Read), Ok(Lock::Granted));
    assert_eq!(p.set_range(t, 0, 0, 10, Mode::Write), Ok(Lock::Granted));
    p.commit(t).unwrap();
    let u = p.begin(FAR).unwrap();
    assert_eq!(p.set_range(u, 0, 0, 10, Mode::Write), Ok(Lock::Granted));
}

#[test]
fn a_snapshot_request_refused_before_the_promotion_is_asked_again() {
    let mut c = cluster(2);
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 0, &[1; 10]);
    c[0].commit(t).unwrap();
    pump(&mut c, &[]);
    // Node 2 restarted and recovers from the primary, which dies; the request it sends the
    // successor reaches 1 while 1 is still a backup.
    c[2] = with_segment(Node::new(cfg(2), Role::Recovering { from: 0 }));
    let _ = c[2].poll_transmit();
    c[2].primary_down(1, &[1, 2]);
    pump(&mut c, &[0]);
    assert_eq!(c[2].role(), &Role::Recovering { from: 1 });
    assert_eq!(c[1].counters().refused, 1);
    c[1].primary_down(1, &[1, 2]);
    // The request goes again once nothing came for a while.
    let now = Instant(1_000);
    c[2].handle_timeout(now);
    pump(&mut c, &[0]);
    assert_eq!(c[2].role(), &Role::Recovering { from: 1 });
    let later = Instant(now.0 + 200_000_000);
    assert_eq!(c[2].poll_timeout(), Some(later));
    c[2].handle_timeout(later);
    pump(&mut c, &[0]);
    assert_eq!(c[2].role(), &Role::Backup { primary: 1 });
    assert_eq!(c[2].segment(0), c[1].segment(0));
}

#[test]
fn a_catch_up_asked_before_the_promotion_is_answered_at_it() {
    let mut c = cluster(2);
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 0, &[1; 10]);
    c[0].commit(t).unwrap();
    pump(&mut c, &[]);
    // Backup 2 hears of the primary's death first: its request reaches 1, still a backup.
    c[2].primary_down(1, &[1, 2]);
    pump(&mut c, &[0]);
    assert_eq!(c[2].role(), &Role::Recovering { from: 1 });
    assert_eq!(c[1].counters().refused, 0);
    c[1].primary_down(1, &[1, 2]);
    pump(&mut c, &[0]);
    assert_eq!(c[2].role(), &Role::Backup { primary: 1 });
    assert_eq!(c[2].segment(0), c[1].segment(0));
}

#[test]
fn a_new_primary_waits_for_the_live_backups_to_rejoin() {
    let mut c = cluster(2);
    c[1].primary_down(1, &[1, 2]);
    c[2].primary_down(1, &[1, 2]);
    assert_eq!(events(&mut c[1]), [Event::Promoted]);
    let t = c[1].begin(FAR).unwrap();
    write(&mut c[1], t, 0, &[5; 10]);
    c[1].commit(t).unwrap();
    assert!(events(&mut c[1]).is_empty(), "complete on one replica");
    pump(&mut c, &[0]);
    assert_eq!(events(&mut c[1]), [Event::Committed(t)]);
    assert_eq!(c[2].segment(0), c[1].segment(0));
}

#[test]
fn read_only_commits_behind_a_silent_backup_are_bounded() {
    let mut c = cluster(1);
    let p = &mut c[0];
    let t = p.begin(FAR).unwrap();
    write(p, t, 0, &[1; 10]);
    p.commit(t).unwrap(); // never acknowledged: everything queues behind it
    let mut refused = false;
    for _ in 0..200_000 {
        let r = p.begin(FAR).unwrap();
        p.set_range(r, 0, 500, 10, Mode::Read).unwrap();
        if p.commit(r) == Err(CrError::LogFull) {
            refused = true;
            break;
        }
    }
    assert!(refused, "read-only commits queued without bound");
}

#[test]
fn a_dropped_backup_that_still_speaks_recovers_before_it_counts_again() {
    let mut c = cluster(1);
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 0, &[1; 10]);
    c[0].commit(t).unwrap();
    pump(&mut c, &[]);
    // The primary takes backup 1 for dead (it stalled); commits go on without it.
    c[0].peer_down(1);
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 100, &[2; 10]);
    c[0].commit(t).unwrap();
    assert!(!c[0].has_backup(1));
    // It speaks again: told it was dropped, it recovers and is counted again.
    c[0].tell_dropped(1);
    pump(&mut c, &[]);
    assert_eq!(events(&mut c[1]), [Event::Recovered]);
    assert!(c[0].has_backup(1));
    assert_eq!(c[1].segment(0), c[0].segment(0));
    // Its own stale view never served: it went through Recovering (no promotion possible).
    assert_eq!(c[1].role(), &Role::Backup { primary: 0 });
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 200, &[3; 10]);
    c[0].commit(t).unwrap();
    events(&mut c[0]);
    assert!(events(&mut c[0]).is_empty());
    pump(&mut c, &[]);
    assert_eq!(events(&mut c[0]), [Event::Committed(t)]);
}

/// A primary with a disk log and no backups: every write set comes out addressed to the
/// disk, a commit completes only once the disk holds it, and a fresh node given a checkpoint
/// and the logged parts ends with the same memory (a torn part at the end ignored).
#[test]
fn a_disk_logged_commit_waits_for_the_disk_and_the_log_replays() {
    use txcast_crmem::node::DISK;
    let seg = || LockMapping::Records {
        record_bytes: 100,
        per_lock: 10,
    };
    let mut p = Node::new(
        Config {
            disk_log: true,
            ..cfg(0)
        },
        Role::Primary { backups: vec![] },
    );
    p.add_segment(4000, seg()).unwrap();
    let mut logged = Vec::new();
    // A checkpoint taken with a transaction open leaves its writes out.
    let open = p.begin(FAR).unwrap();
    write(&mut p, open, 3000, &[7; 10]);
    let (cp_seq, cp) = p.checkpoint();
    assert_eq!(cp_seq, 0);
    assert_eq!(&cp[0][3000..3010], &[0; 10]);
    p.abort(open).unwrap();
    for i in 0..5u8 {
        let t = p.begin(FAR).unwrap();
        write(&mut p, t, i as u32 * 500, &[i + 1; 1500]);
        assert_eq!(p.commit(t), Ok(i as u64 + 1));
        while let Some((to, m)) = p.poll_transmit() {
            assert_eq!(to, DISK);
            logged.push(m);
        }
        assert!(
            events(&mut p).is_empty(),
            "completed before the disk had it"
        );
        p.disk_synced(i as u64 + 1);
        let t = Event::Committed(t);
        assert_eq!(events(&mut p), vec![t]);
        assert_eq!(p.durable(), i as u64 + 1);
    }
    let mut r = Node::new(cfg(0), Role::Primary { backups: vec![] });
    r.add_segment(4000, seg()).unwrap();
    assert!(
        !r.restore(0, &[vec![0; 10]]),
        "a checkpoint of the wrong size"
    );
    assert!(r.restore(cp_seq, &cp));
    for m in &logged {
        assert!(r.replay(m));
    }
    // A part logged twice (written again after a checkpoint covered it) is skipped.
    assert!(r.replay(&logged[0]));
    // The last commit's first part only: torn, so not applied.
    let t = p.begin(FAR).unwrap();
    write(&mut p, t, 0, &[9; 2000]);
    p.commit(t).unwrap();
    let torn = p.poll_transmit().unwrap().1;
    assert!(r.replay(&torn));
    assert_eq!(r.seq(), 5);
    assert!(r.poll_transmit().is_none());
    assert_ne!(p.segment(0), r.segment(0));

    // Equal up to the torn commit: what the primary had after commit 5.
    let mut want = r.segment(0).unwrap().to_vec();
    want[..2000].copy_from_slice(&[9; 2000]);
    assert_eq!(p.segment(0).unwrap(), &want[..]);
    assert!(!r.replay(b"\xC7\x63"), "not a WRITE");
}

#[test]
fn commits_queued_together_travel_in_one_bundle_and_get_one_acknowledgement() {
    use txcast_crmem::msg::{self, Msg};
    for bundle_bytes in [msg::BUNDLE_BYTES, 0] {
        let mut c = cluster_with(2, |c| Config { bundle_bytes, ..c });
        let mut txns = Vec::new();
        for i in 0..5u8 {
            let t = c[0].begin(FAR).unwrap();
            write(&mut c[0], t, u32::from(i) * 100, &[i + 1; 30]);
            c[0].commit(t).unwrap();
            txns.push(t);
        }
        let sent: Vec<_> = std::iter::from_fn(|| c[0].poll_transmit()).collect();
        if bundle_bytes == 0 {
            // Each WRITE alone, to each backup.
            assert_eq!(sent.len(), 10);
            assert!(sent.iter().all(|(_, m)| msg::unbundle(m).is_none()));
        } else {
            // One bundle a backup, its five WRITEs in commit order.
            assert_eq!(sent.len(), 2);
            for (_, m) in &sent {
                let seqs: Vec<u64> = msg::unbundle(m)
                    .expect("a bundle")
                    .expect("well formed")
                    .map(|w| match Msg::parse(w) {
                        Ok(Msg::Write(w)) => w.seq,
                        other => panic!("{other:?}"),
                    })
                    .collect();
                assert_eq!(seqs, [1, 2, 3, 4, 5]);
            }
        }
        for (to, m) in sent {
            c[to as usize].handle_message(0, &m);
        }
        for k in 1..=2usize {
            // However they came, the backup answers what it applied before it was polled
            // with one cumulative ACK.
            let acks: Vec<_> = std::iter::from_fn(|| c[k].poll_transmit()).collect();
            assert_eq!(acks.len(), 1, "bundle_bytes {bundle_bytes}");
            assert_eq!(Msg::parse(&acks[0].1), Ok(Msg::Ack { seq: 5 }));
            for (_, a) in acks {
                c[0].handle_message(k as NodeId, &a);
            }
            assert_eq!(c[k].segment(0), c[0].segment(0));
            assert_eq!(c[k].seq(), 5);
        }
        let done: Vec<_> = events(&mut c[0]);
        assert_eq!(
            done,
            txns.iter()
                .map(|&t| Event::Committed(t))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_broken_bundle_is_refused_whole_and_counted() {
    use txcast_crmem::msg;
    let mut c = cluster(1);
    for i in 0..2u8 {
        let t = c[0].begin(FAR).unwrap();
        write(&mut c[0], t, u32::from(i) * 100, &[9; 10]);
        c[0].commit(t).unwrap();
    }
    let (_, b) = c[0].poll_transmit().unwrap();
    assert!(msg::unbundle(&b).is_some());
    // Its last item cut short: neither commit is applied, one refusal.
    c[1].handle_message(0, &b[..b.len() - 1]);
    assert_eq!(c[1].counters().refused, 1);
    assert_eq!(c[1].seq(), 0);
    assert!(c[1].segment(0).unwrap().iter().all(|&x| x == 0));
    // A bundle inside a bundle: refused too.
    let mut nested = vec![msg::MAGIC, msg::BUNDLE];
    nested.extend_from_slice(&(b.len() as u16).to_le_bytes());
    nested.extend_from_slice(&b);
    c[1].handle_message(0, &nested);
    assert_eq!(c[1].counters().refused, 2);
    assert_eq!(c[1].seq(), 0);
    // The whole bundle applies both.
    c[1].handle_message(0, &b);
    assert_eq!(c[1].seq(), 2);
    assert_eq!(c[1].segment(0), c[0].segment(0));
}

/// A recovering backup's requests, repeated while nothing came, reach the primary together
/// (as a link delivers what a partition held): the earlier snapshots' pieces not sent yet
/// go, and the backup recovers from the last.
#[test]
fn repeated_snapshot_requests_are_answered_by_the_last_one_only() {
    let mut c = cluster(1);
    let t = c[0].begin(FAR).unwrap();
    write(&mut c[0], t, 0, &[7; 3000]);
    c[0].commit(t).unwrap();
    pump(&mut c, &[]);
    c[0].peer_down(1);
    c[1] = restarted(1, 2);
    let mut asks = vec![c[1].poll_transmit().unwrap().1];
    let mut now = Instant(1_000);
    c[1].handle_timeout(now);
    for _ in 0..3 {
        now = Instant(now.0 + 200_000_000);
        c[1].handle_timeout(now);
        asks.push(c[1].poll_transmit().expect("asked again").1);
    }
    assert!(c[1].poll_transmit().is_none());
    // The first answered and its pieces taken out (a driver's queue holds them); the
    // next two handled before anything is taken; then the last.
    c[0].handle_message(1, &asks[0]);
    let queued: Vec<Vec<u8>> = std::iter::from_fn(|| c[0].poll_transmit())
        .map(|(_, m)| m)
        .collect();
    assert!(queued.len() >= 2, "a snapshot of several pieces");
    assert!(queued.iter().all(|m| !c[0].superseded(1, m)));
    c[0].handle_message(1, &asks[1]);
    c[0].handle_message(1, &asks[2]);
    assert!(queued.iter().all(|m| c[0].superseded(1, m)));
    let second: Vec<Vec<u8>> = std::iter::from_fn(|| c[0].poll_transmit())
        .map(|(_, m)| m)
        .collect();
    assert_eq!(second.len(), queued.len(), "one snapshot, not two");
    assert!(second.iter().all(|m| !c[0].superseded(1, m)));
    // The backup takes the answer to its third request only if it is its latest: it is
    // not (it asked a fourth time), so it refuses it and recovers from the fourth.
    for m in &second {
        c[1].handle_message(0, m);
    }
    assert_eq!(c[1].role(), &Role::Recovering { from: 0 });
    c[0].handle_message(1, &asks[3]);
    assert!(second.iter().all(|m| c[0].superseded(1, m)));
    pump(&mut c, &[]);
    assert_eq!(events(&mut c[1]), [Event::Recovered]);
    assert_eq!(c[1].segment(0), c[0].segment(0));
    assert_eq!(c[1].counters().refused, second.len() as u64);
    assert!(!c[0].superseded(1, &asks[0]), "only snapshot pieces are");
}
