//! CRMem on the module hosts of two sites (UDP links on loopback), through the public API.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use txcast_crmem::{
    disk_position, Crmem, CrmemConfig, CrmemError, DiskPosition, Event, Handlers, LockMapping,
    MembershipConfig, Mode, Role,
};
use txcast_proto::Address;

const SECOND: Duration = Duration::from_secs(5);

/// Sites 0 and 1 (two hosts on loopback), one server instance per test.
fn nodes(server: u16) -> Vec<Address> {
    vec![
        Address::new(0, 0, 10, server),
        Address::new(0, 1, 10, server),
    ]
}

fn segments() -> Vec<(usize, LockMapping)> {
    vec![(
        4000,
        LockMapping::Records {
            record_bytes: 100,
            per_lock: 10,
        },
    )]
}

fn open(server: u16, me: u16, primary: u16, recover: bool) -> Crmem {
    open_with(server, me, primary, recover, Handlers::Engine)
}

fn open_with(server: u16, me: u16, primary: u16, recover: bool, handlers: Handlers) -> Crmem {
    let mut cfg = CrmemConfig::new(nodes(server), me);
    cfg.primary = primary;
    cfg.recover = recover;
    cfg.handlers = handlers;
    Crmem::open(cfg, &segments()).expect("open")
}

fn until(what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + SECOND;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn transfer(c: &Crmem, off: u32, byte: u8) -> Result<u64, CrmemError> {
    let t = c.begin(SECOND)?;
    c.set_range(t, 0, off, 10, Mode::Write)?;
    c.write(t, 0, off, 10, |m| m.fill(byte))?;
    c.commit(t, SECOND)
}

#[test]
fn a_commit_returns_once_the_backup_holds_it_and_abort_leaves_nothing() {
    let p = open(1, 0, 0, false);
    let b = open(1, 1, 0, false);
    assert_eq!(transfer(&p, 0, 7).unwrap(), 1);
    // The commit returned after the backup acknowledged: it is there now.
    assert_eq!(b.seq(), 1);
    assert_eq!(&b.snapshot_segment(0).unwrap()[..10], &[7; 10]);
    let t = p.begin(SECOND).unwrap();
    p.set_range(t, 0, 100, 10, Mode::Write).unwrap();
    p.write(t, 0, 100, 10, |m| m.fill(9)).unwrap();
    p.abort(t).unwrap();
    assert_eq!(&p.snapshot_segment(0).unwrap()[100..110], &[0; 10]);
    assert_eq!(transfer(&p, 200, 8).unwrap(), 2);
    assert_eq!(b.snapshot_segment(0), p.snapshot_segment(0));
    assert!(matches!(
        b.begin(SECOND),
        Err(CrmemError::Core(txcast_crmem::CrError::NotPrimary))
    ));
}

#[test]
fn a_lock_wait_past_its_deadline_aborts() {
    let p = open(2, 0, 0, false);
    let _b = open(2, 1, 0, false);
    let a = p.begin(SECOND).unwrap();
    p.set_range(a, 0, 0, 10, Mode::Write).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let t = p.begin(Duration::from_millis(50)).unwrap();
            let started = Instant::now();
            let r = p.set_range(t, 0, 5, 10, Mode::Read);
            (r, started.elapsed())
        });
        let (r, waited) = waiter.join().unwrap();
        assert!(matches!(r, Err(CrmemError::LockTimeout)), "{r:?}");
        assert!(waited >= Duration::from_millis(50), "{waited:?}");
    });
    // And one that gets its lock when the holder commits.
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let t = p.begin(SECOND).unwrap();
            p.set_range(t, 0, 5, 10, Mode::Read).unwrap();
            p.read(t, 0, 0, 10, |m| m.to_vec()).unwrap_err();
            let v = p.read(t, 0, 5, 10, |m| m.to_vec()).unwrap();
            p.commit(t, SECOND).unwrap();
            v
        });
        std::thread::sleep(Duration::from_millis(20));
        p.write(a, 0, 0, 10, |m| m.fill(3)).unwrap();
        p.commit(a, SECOND).unwrap();
        let v = waiter.join().unwrap();
        assert_eq!(v, [3, 3, 3, 3, 3, 0, 0, 0, 0, 0]);
    });
}

#[test]
fn the_backup_takes_over_and_the_old_primary_recovers_from_it() {
    let p = open(3, 0, 0, false);
    let b = open(3, 1, 0, false);
    assert_eq!(transfer(&p, 0, 1).unwrap(), 1);
    drop(p); // the primary's process is gone: the backup hears nothing more
    until("the backup's promotion", || {
        matches!(b.role(), Role::Primary { .. })
    });
    assert!(b.notices().contains(&Event::Promoted));
    assert_eq!(transfer(&b, 100, 2).unwrap(), 2);
    // The old primary comes back as a new process and recovers.
    let p = open(3, 0, 1, true);
    until("recovery", || {
        matches!(p.role(), Role::Backup { primary: 1 })
    });
    assert_eq!(transfer(&b, 200, 3).unwrap(), 3);
    assert_eq!(p.seq(), 3);
    assert_eq!(p.snapshot_segment(0), b.snapshot_segment(0));
}

#[test]
fn async_commits_complete_in_order_and_wait_durable_waits_for_the_backup() {
    let p = open(4, 0, 0, false);
    let b = open(4, 1, 0, false);
    async_commits(&p, &b);
}

/// The commits of the test above, and a synchronous one, with the module run by the
/// application's threads: polled (the waits drive the primary; a thread drives the backup,
/// as its application's idle loop would) and interrupt-driven.
#[test]
fn polled_and_interrupt_driven_hosts_commit_and_keep_the_backup_equal() {
    for (server, handlers) in [(6, Handlers::Polled), (7, Handlers::Interrupt)] {
        let p = open_with(server, 0, 0, false, handlers);
        let b = open_with(server, 1, 0, false, handlers);
        assert_eq!(p.host().handlers(), handlers);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if b.drive() == 0 {
                        std::thread::yield_now();
                    }
                }
            });
            assert_eq!(transfer(&p, 0, 7).unwrap(), 1);
            assert_eq!(b.seq(), 1);
            async_commits(&p, &b);
            stop.store(true, Ordering::Relaxed);
        });
    }
}

fn async_commits(p: &Crmem, b: &Crmem) {
    let mut last = p.seq();
    for i in 0..200u32 {
        let t = p.begin(SECOND).unwrap();
        let off = (i % 40) * 100;
        p.set_range(t, 0, off, 8, Mode::Write).unwrap();
        p.write(t, 0, off, 8, |m| {
            m.copy_from_slice(&(i as u64 + 1).to_le_bytes())
        })
        .unwrap();
        let seq = p.commit_async(t).unwrap();
        assert_eq!(seq, last + 1);
        last = seq;
    }
    p.wait_durable(last, SECOND).unwrap();
    assert!(p.durable() >= last);
    // Durable means on the backup.
    assert!(b.seq() >= last);
    assert_eq!(b.snapshot_segment(0), p.snapshot_segment(0));
    assert!(matches!(
        p.wait_durable(last + 1, Duration::from_millis(20)),
        Err(CrmemError::Timeout)
    ));
}

#[test]
fn a_stalled_backup_is_dropped_then_recovers_and_never_takes_over() {
    use txcast_crmem::driver::CrmemModule;
    use txcast_port::{Engine, EngineConfig};
    // Each node on an engine thread of its own, so one can stall alone.
    let (ep, eb) = (
        Engine::start(EngineConfig::default()).unwrap(),
        Engine::start(EngineConfig::default()).unwrap(),
    );
    let cfg = |me| CrmemConfig::new(nodes(5), me);
    let p = Crmem::open_on(&ep, cfg(0), &segments()).unwrap();
    let b = Crmem::open_on(&eb, cfg(1), &segments()).unwrap();
    assert_eq!(transfer(&p, 0, 1).unwrap(), 1);
    std::thread::scope(|s| {
        // The backup's engine is held for 600 ms (twice the failure detector's timeout).
        let stall = s.spawn(|| {
            b.host().with_module::<CrmemModule, _>(20, |_| {
                std::thread::sleep(Duration::from_millis(600))
            })
        });
        std::thread::sleep(Duration::from_millis(50));
        // The primary drops it and goes on alone meanwhile.
        assert_eq!(transfer(&p, 100, 2).unwrap(), 2);
        stall.join().unwrap();
    });
    // Told it was dropped, it recovers; it never becomes a primary.
    until("the backup's recovery", || {
        b.notices().contains(&Event::Recovered)
    });
    assert_eq!(b.role(), Role::Backup { primary: 0 });
    until(
        "the backup counted again",
        || matches!(p.role(), Role::Primary { backups } if backups == [1]),
    );
    assert_eq!(transfer(&p, 200, 3).unwrap(), 3);
    assert_eq!(b.snapshot_segment(0), p.snapshot_segment(0));
    drop((p, b));
    ep.shutdown();
    eb.shutdown();
}

/// Sends each instruction's arguments to node 1 as one CRMem control message (the module id,
/// key and control type of a CRMem node: only the body is forged).
struct Forger;

impl txcast_proto::module::Module for Forger {
    fn registration(&self) -> txcast_proto::module::Registration {
        txcast_proto::module::Registration {
            name: "forger",
            instructions: &[1],
            controls: &[txcast_crmem::driver::CONTROL],
        }
    }
    fn on_instruction(
        &mut self,
        cx: &mut txcast_proto::module::Context<'_>,
        ins: txcast_proto::module::Instruction<'_>,
    ) {
        let r = cx.send(nodes(8)[1], txcast_crmem::driver::CONTROL, ins.args);
        let _ = cx.complete(ins.id, u32::from(r.is_err()), &[]);
    }
    fn on_control(
        &mut self,
        _: &mut txcast_proto::module::Context<'_>,
        _: txcast_proto::module::Control<'_>,
    ) {
    }
}

/// Malformed messages from the primary's address, through the wire: each is refused and
/// counted, and none changes the backup's memory or role.
#[test]
fn malformed_control_messages_over_the_wire_are_refused_and_counted() {
    let b = open(8, 1, 0, false);
    let cfg = CrmemConfig::new(nodes(8), 0);
    let forger = txcast_port::ModuleHost::open(nodes(8)[0]).unwrap();
    forger.load(cfg.module, cfg.key, Forger).unwrap();
    let mut truncated_write = vec![0xC7, 1];
    truncated_write.extend_from_slice(&1u64.to_le_bytes()); // seq 1, then nothing
    let mut past_the_end = vec![0xC7, 1];
    past_the_end.extend_from_slice(&1u64.to_le_bytes());
    past_the_end.extend_from_slice(&[0, 0, 1, 0, 1, 0]); // part 0 of 1, one range
    past_the_end.extend_from_slice(&[0, 0]); // segment 0
    past_the_end.extend_from_slice(&3_990u32.to_le_bytes()); // offset 3990
    past_the_end.extend_from_slice(&20u32.to_le_bytes()); // 20 bytes: past 4000
    past_the_end.extend_from_slice(&[9; 20]);
    let bad: Vec<Vec<u8>> = vec![
        vec![],
        vec![0xC7],
        vec![0x00, 1, 2, 3],
        vec![0xC7, 99, 0, 0],
        truncated_write,
        past_the_end,
    ];
    for m in &bad {
        let c = forger.call(cfg.module, cfg.key, 1, m, SECOND).unwrap();
        assert_eq!(c.status, 0, "not sent");
    }
    until("every bad message counted", || {
        b.counters().refused == bad.len() as u64
    });
    assert!(b.snapshot_segment(0).unwrap().iter().all(|&x| x == 0));
    assert_eq!(b.seq(), 0);
    assert!(matches!(b.role(), Role::Backup { primary: 0 }));
}

/// A primary with a disk log and no live backup: every commit that returned is on disk, and
/// the node opened again on the same directory, after both replicas are gone, starts from it
/// (a torn record at the log's end is cut off).
#[test]
fn a_disk_logged_primary_restarts_from_its_log_after_every_replica_is_gone() {
    let dir = std::env::temp_dir().join(format!("txcast-crmem-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let open_disk = |me: u16, recover: bool| {
        let mut cfg = CrmemConfig::new(nodes(9), me);
        cfg.recover = recover;
        cfg.disk = Some(dir.join(format!("node{me}")));
        Crmem::open(cfg, &segments()).expect("open")
    };
    let p = open_disk(0, false);
    let b = open_disk(1, false);
    for i in 0..100u32 {
        transfer(&p, (i % 40) * 100, i as u8 + 1).unwrap();
    }
    // Async commits too: durable means on the backup and on disk.
    let mut last = 0;
    for i in 0..50u32 {
        let t = p.begin(SECOND).unwrap();
        p.set_range(t, 0, i * 10, 10, Mode::Write).unwrap();
        p.write(t, 0, i * 10, 10, |m| m.fill(200)).unwrap();
        last = p.commit_async(t).unwrap();
    }
    p.wait_durable(last, SECOND).unwrap();
    let want = p.snapshot_segment(0).unwrap();
    assert_eq!(b.snapshot_segment(0).unwrap(), want);
    drop(b);
    drop(p);
    // A write that never finished: half a record at the end.
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("node0").join("log"))
        .unwrap();
    f.write_all(&[200, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(f);
    let p = open_disk(0, false);
    assert_eq!(p.seq(), 150);
    assert_eq!(p.snapshot_segment(0).unwrap(), want);
    // It serves on (its backup taken for dead, then recovering from it).
    let b = open_disk(1, true);
    until("the backup's recovery", || {
        matches!(b.role(), Role::Backup { primary: 0 })
    });
    assert_eq!(transfer(&p, 0, 77).unwrap(), 151);
    assert_eq!(b.snapshot_segment(0), p.snapshot_segment(0));
    drop((p, b));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A backup with a disk directory, promoted, starts its log with a checkpoint of what it
/// holds, in a new term: after it too is gone, its directory is the one to restart from
/// (the highest position), and it restarts from the checkpoint and the commits after it.
/// The old primary, back as a backup meanwhile, kept its log as it was.
#[test]
fn a_promoted_backup_checkpoints_and_restarts_from_its_own_log() {
    let dir = std::env::temp_dir().join(format!("txcast-crmem-promo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let open_disk = |me: u16, primary: u16, recover: bool| {
        let mut cfg = CrmemConfig::new(nodes(10), me);
        cfg.primary = primary;
        cfg.recover = recover;
        cfg.disk = Some(dir.join(format!("node{me}")));
        Crmem::open(cfg, &segments()).expect("open")
    };
    let p = open_disk(0, 0, false);
    let b = open_disk(1, 0, false);
    for i in 0..30u32 {
        transfer(&p, (i % 40) * 100, i as u8 + 1).unwrap();
    }
    drop(p);
    let old = disk_position(&dir.join("node0")).unwrap();
    assert_eq!(old, DiskPosition { term: 0, seq: 30 });
    until("the promotion", || matches!(b.role(), Role::Primary { .. }));
    for i in 0..20u32 {
        transfer(&b, (i % 40) * 100 + 50, 100 + i as u8).unwrap();
    }
    // The old primary comes back as a backup and leaves its directory alone.
    let p = open_disk(0, 1, true);
    until("the old primary's recovery", || {
        matches!(p.role(), Role::Backup { primary: 1 })
    });
    assert_eq!(disk_position(&dir.join("node0")).unwrap(), old);
    let want = b.snapshot_segment(0).unwrap();
    assert_eq!(b.seq(), 50);
    drop(p);
    drop(b);
    assert!(dir.join("node1").join("checkpoint").exists());
    let new = disk_position(&dir.join("node1")).unwrap();
    assert!(
        new.term > 0 && new.seq == 50 && new > old,
        "{new:?} after {old:?}"
    );
    let b = open_disk(1, 1, false);
    assert_eq!(b.seq(), 50);
    assert_eq!(b.snapshot_segment(0).unwrap(), want);
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_backup_started_before_its_primary_waits_for_it() {
    let b = open(20, 1, 0, false);
    // Several times the suspicion time (300 ms) with no primary yet: no takeover.
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(b.role(), Role::Backup { primary: 0 });
    assert!(b.notices().is_empty());
    let p = open(20, 0, 0, false);
    assert_eq!(transfer(&p, 0, 4).unwrap(), 1);
    assert_eq!(b.seq(), 1);
    assert_eq!(b.snapshot_segment(0), p.snapshot_segment(0));
    // Once it has heard its primary, a backup takes over when it falls silent.
    drop(p);
    until("the backup's promotion", || {
        matches!(b.role(), Role::Primary { .. })
    });
}

/// Three sites on loopback for the membership tests.
fn three(server: u16) -> Vec<Address> {
    (0..3).map(|s| Address::new(0, s, 10, server)).collect()
}

/// Opens nodes `mes` of three with membership at once, each on an engine of its own (a
/// fresh start returns once every node is in the group).
fn open_fenced(
    server: u16,
    engines: &[txcast_port::Engine],
    mes: &[u16],
    recover_from: Option<u16>,
) -> Vec<Crmem> {
    std::thread::scope(|s| {
        let hs: Vec<_> = mes
            .iter()
            .map(|&me| {
                let engine = &engines[me as usize];
                s.spawn(move || {
                    let mut cfg = CrmemConfig::new(three(server), me);
                    if let Some(p) = recover_from {
                        cfg.primary = p;
                        cfg.recover = true;
                    }
                    let members = MembershipConfig::new(&three(server));
                    Crmem::open_with_membership(Some(engine), cfg, &segments(), members)
                        .expect("open with membership")
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn engines(n: usize) -> Vec<txcast_port::Engine> {
    (0..n)
        .map(|_| txcast_port::Engine::start(txcast_port::EngineConfig::default()).unwrap())
        .collect()
}

#[test]
fn a_mirror_with_membership_needs_three_nodes() {
    let cfg = CrmemConfig::new(nodes(12), 0);
    let members = MembershipConfig::new(&nodes(12));
    let r = Crmem::open_with_membership(None, cfg, &segments(), members);
    assert!(
        matches!(r, Err(CrmemError::MembershipNeedsThree)),
        "{:?}",
        r.err()
    );
}

/// With membership a backup silent past `suspect_after` but not left out by the group is
/// waited for, not dropped: the commit completes once it answers, on every node.
#[test]
fn with_membership_silence_alone_drops_no_backup() {
    use txcast_crmem::driver::CrmemModule;
    let es = engines(3);
    let c = open_fenced(13, &es, &[0, 1, 2], None);
    assert_eq!(transfer(&c[0], 0, 1).unwrap(), 1);
    std::thread::scope(|s| {
        // Backup 1's engine (its module and its group port) held for 400 ms: longer than
        // CRMem's 300 ms silence, shorter than the group's 500 ms.
        let stall = s.spawn(|| {
            c[1].host().with_module::<CrmemModule, _>(20, |_| {
                std::thread::sleep(Duration::from_millis(400))
            })
        });
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        assert_eq!(transfer(&c[0], 100, 2).unwrap(), 2);
        // It waited for the stalled backup rather than drop it.
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
        stall.join().unwrap();
    });
    assert!(!c[0]
        .notices()
        .iter()
        .any(|e| matches!(e, Event::BackupLost(_))));
    assert!(matches!(c[0].role(), Role::Primary { backups } if backups == [1, 2]));
    assert!(!c[1].notices().contains(&Event::Recovered));
    for k in 1..3 {
        assert_eq!(c[k].snapshot_segment(0), c[0].snapshot_segment(0));
    }
    drop(c);
    es.into_iter().for_each(|e| e.shutdown());
}

/// With membership the primary's death is decided by the group's view: the lowest node left
/// takes over, the other follows it, commits go on, and the old primary's node recovers
/// from the successor and joins again.
#[test]
fn with_membership_the_view_replaces_a_dead_primary_and_it_returns() {
    let es = engines(3);
    let mut c = open_fenced(14, &es, &[0, 1, 2], None);
    assert_eq!(transfer(&c[0], 0, 1).unwrap(), 1);
    let view = c[1].view();
    drop(c.remove(0)); // node 0's process is gone: its module host and group port closed
    until("the view without node 0", || c[0].view() > view);
    let end = Instant::now() + 4 * SECOND;
    while c[0].role() != (Role::Primary { backups: vec![2] }) {
        assert!(
            Instant::now() < end,
            "node 1 not promoted: {:?}",
            c[0].role()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(transfer(&c[0], 100, 2).unwrap(), 2);
    assert_eq!(c[1].snapshot_segment(0), c[0].snapshot_segment(0));
    assert_eq!(c[1].role(), Role::Backup { primary: 1 });
    // Node 0 again, recovering from node 1.
    let back = open_fenced(14, &es, &[0], Some(1)).remove(0);
    assert_eq!(back.role(), Role::Backup { primary: 1 });
    assert_eq!(transfer(&c[0], 200, 3).unwrap(), 3);
    assert_eq!(back.snapshot_segment(0), c[0].snapshot_segment(0));
    assert!(!back.expelled());
    drop((c, back));
    es.into_iter().for_each(|e| e.shutdown());
}

#[test]
fn a_commit_ships_only_the_bytes_that_changed() {
    // A commit log too small for the whole segment: a write set of every declared byte
    // would not fit in it.
    let cfg = |me| {
        let mut c = CrmemConfig::new(nodes(30), me);
        c.core.log_bytes = 1024;
        c
    };
    let p = Crmem::open(cfg(0), &segments()).unwrap();
    let b = Crmem::open(cfg(1), &segments()).unwrap();
    let whole = |c: &Crmem, f: &dyn Fn(&mut [u8])| -> Result<u64, CrmemError> {
        let t = c.begin(SECOND)?;
        c.set_range(t, 0, 0, 4000, Mode::Write)?;
        c.write(t, 0, 0, 4000, |m| f(m))?;
        c.commit(t, SECOND)
    };
    // Two runs of changed bytes far apart, in a range of 4,000 declared for writing.
    let seq = whole(&p, &|m| {
        m[10..18].copy_from_slice(&u64::MAX.to_le_bytes());
        m[3990] = 9;
    })
    .unwrap();
    assert_eq!(seq, 1);
    assert_eq!(b.seq(), 1);
    assert_eq!(b.snapshot_segment(0), p.snapshot_segment(0));
    assert_eq!(b.snapshot_segment(0).unwrap()[3990], 9);
    // The same bytes written back: nothing to ship, no new commit number.
    let seq = whole(&p, &|m| m[3990] = 9).unwrap();
    assert_eq!(seq, 1);
    let c = p.counters();
    assert_eq!((c.write_declared, c.write_shipped), (8000, 9));
    // A change of most of the range does not fit; the transaction is still open, and its
    // abort puts the old bytes back.
    let t = p.begin(SECOND).unwrap();
    p.set_range(t, 0, 0, 4000, Mode::Write).unwrap();
    p.write(t, 0, 0, 4000, |m| m.fill(3)).unwrap();
    assert!(matches!(
        p.commit(t, SECOND),
        Err(CrmemError::Core(txcast_crmem::CrError::TooLarge))
    ));
    p.abort(t).unwrap();
    assert!(p.snapshot_segment(0) == b.snapshot_segment(0));
}
