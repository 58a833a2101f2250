//! Shared-memory receive ring: behaviour through the public API, across threads and processes.
//!
//! Cross-process tests re-run this test binary as a child (`--exact <test>`) with
//! `TXCAST_SHM_TEST_ROLE` set; the test function sees the variable and plays the child's part.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use txcast_port::shm::{
    ensure_private_dir, reclaim_dead, IdleStrategy, RingConfig, RingReceiver, RingSender,
    SendError, ShmError,
};

const ROLE_VAR: &str = "TXCAST_SHM_TEST_ROLE";
const PATH_VAR: &str = "TXCAST_SHM_TEST_PATH";
/// Generous bound that only a lost wake-up (or a hung peer) would reach.
const STUCK: Duration = Duration::from_secs(60);

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// A private directory under /dev/shm, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new() -> TestDir {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(format!("/dev/shm/txcast-test-{}-{n}", std::process::id()));
        ensure_private_dir(&dir).expect("private dir");
        TestDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn cfg(slot_count: u32, slot_bytes: u32) -> RingConfig {
    RingConfig {
        slot_count,
        slot_bytes,
    }
}

fn recv_vec(rx: &mut RingReceiver) -> Option<Vec<u8>> {
    rx.try_recv(|m| m.to_vec())
}

/// The path handed to a child, when this process is the child playing `role`.
fn child_path(role: &str) -> Option<PathBuf> {
    match std::env::var(ROLE_VAR) {
        Ok(r) if r == role => Some(PathBuf::from(std::env::var(PATH_VAR).expect("path var"))),
        _ => None,
    }
}

fn spawn_child(test: &str, role: &str, path: &Path) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(ROLE_VAR, role)
        .env(PATH_VAR, path)
        .spawn()
        .expect("spawn child")
}

/// Child part: create a segment and exit without closing it, as a crash would.
fn create_and_die(path: &Path) -> ! {
    let rx = RingReceiver::create(path, cfg(4, 64)).expect("child create");
    std::mem::forget(rx);
    // SAFETY: _exit ends the process at once; no destructors, no unlink.
    unsafe { libc::_exit(0) }
}

fn run_dead_owner_child(test: &str, path: &Path) {
    let status = spawn_child(test, "create-and-die", path)
        .wait()
        .expect("wait child");
    assert!(status.success(), "child failed: {status}");
    assert!(path.exists(), "the dead owner's segment stays behind");
}

#[test]
fn round_trip_create_open_send_recv() {
    let dir = TestDir::new();
    let path = dir.path("port");
    let mut rx = RingReceiver::create(&path, cfg(8, 64)).expect("create");
    assert!(!rx.reclaimed());
    assert_eq!(rx.config(), cfg(8, 64));
    let mode = fs::metadata(&path).expect("stat").permissions().mode();
    assert_eq!(mode & 0o7777, 0o600);

    let tx = RingSender::open(&path).expect("open");
    assert_eq!(tx.slot_bytes(), 64);
    assert!(tx.owner_alive());
    assert!(rx.is_empty());
    assert_eq!(recv_vec(&mut rx), None);

    tx.try_send(b"hello").expect("send");
    tx.try_send(b"").expect("empty message");
    tx.try_send(&[7u8; 64]).expect("full-slot message");
    assert_eq!(rx.len(), 3);
    assert!(rx.wait(IdleStrategy::Spin, Some(Duration::ZERO)));

    assert_eq!(rx.try_recv(|m| m == b"hello"), Some(true));
    let mut buf = [0u8; 64];
    assert_eq!(rx.recv_into(&mut buf), Some(0));
    assert_eq!(rx.recv_into(&mut buf), Some(64));
    assert_eq!(buf, [7u8; 64]);
    assert_eq!(rx.try_recv(|m| m.len()), None);
    assert_eq!(rx.counters().delivered, 3);

    // Truncating receive reports the full length.
    tx.try_send(b"0123456789").expect("send");
    let mut small = [0u8; 4];
    assert_eq!(rx.recv_into(&mut small), Some(10));
    assert_eq!(&small, b"0123");
}

/// A header and a payload sent as one message, without joining them first; the bound
/// applies to the two together.
#[test]
fn a_prefixed_send_is_one_message_bounded_as_one() {
    let dir = TestDir::new();
    let path = dir.path("prefixed");
    let mut rx = RingReceiver::create(&path, cfg(4, 64)).expect("create");
    let tx = RingSender::open(&path).expect("open");
    tx.try_send_prefixed(b"head:", b"body").expect("send");
    tx.try_send_prefixed(&[], b"alone").expect("no prefix");
    tx.try_send_prefixed(&[1u8; 32], &[2u8; 32])
        .expect("exactly a slot");
    assert_eq!(
        tx.try_send_prefixed(&[1u8; 32], &[2u8; 33]),
        Err(SendError::TooLong { len: 65, max: 64 })
    );
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"head:body"[..]));
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"alone"[..]));
    let whole = recv_vec(&mut rx).expect("the full one");
    assert_eq!(
        (&whole[..32], &whole[32..]),
        (&[1u8; 32][..], &[2u8; 32][..])
    );
    assert_eq!(
        recv_vec(&mut rx),
        None,
        "the refused one left nothing behind"
    );
}

#[test]
fn invalid_config_is_a_typed_error() {
    let dir = TestDir::new();
    for bad in [
        cfg(0, 64),
        cfg(3, 64),
        cfg(1 << 21, 64),
        cfg(4, 8),
        cfg(4, 1 << 21),
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
        match RingReceiver::create(&dir.path("bad"), bad) {
            Err(ShmError::InvalidConfig(_)) => {}
            other => panic!("{bad:?}: expected InvalidConfig, got {:?}", other.err()),
        }
    }
    assert!(!dir.path("bad").exists());
    assert!(matches!(
        RingReceiver::create(&dir.path("huge"), cfg(1 << 20, 1 << 20)),
        Err(ShmError::InvalidConfig(_))
    ));
}

#[test]
fn second_create_while_owner_alive_is_in_use() {
    let dir = TestDir::new();
    let path = dir.path("port");
    let rx = RingReceiver::create(&path, cfg(4, 64)).expect("create");
    assert!(matches!(
        RingReceiver::create(&path, cfg(4, 64)),
        Err(ShmError::InUse)
    ));
    drop(rx);
    assert!(!path.exists(), "drop unlinks");
    let again = RingReceiver::create(&path, cfg(4, 64)).expect("create after close");
    assert!(!again.reclaimed());
}

#[test]
fn full_ring_back_pressure_timeout_then_drain() {
    let dir = TestDir::new();
    let path = dir.path("port");
    let mut rx = RingReceiver::create(&path, cfg(4, 32)).expect("create");
    let tx = RingSender::open(&path).expect("open");
    for i in 0..4u8 {
        tx.try_send(&[i]).expect("fits");
    }
    assert_eq!(tx.try_send(b"x"), Err(SendError::Full));
    assert_eq!(rx.try_push(b"x"), Err(SendError::Full));
    assert_eq!(
        tx.send_timeout(b"x", Duration::from_millis(30)),
        Err(SendError::Timeout)
    );
    assert!(rx.counters().full_rejections >= 3);
    assert!(rx.counters().sender_waits >= 1);

    // A blocked sender completes once the consumer frees a slot.
    let blocked = {
        let tx = tx.clone();
        thread::spawn(move || tx.send_timeout(b"late", STUCK))
    };
    assert_eq!(recv_vec(&mut rx), Some(vec![0]));
    assert_eq!(blocked.join().expect("join"), Ok(()));
    for i in 1..4u8 {
        assert_eq!(recv_vec(&mut rx), Some(vec![i]));
    }
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"late"[..]));
    tx.try_send(b"again").expect("space after drain");
}

#[test]
fn oversize_is_too_long() {
    let dir = TestDir::new();
    let rx = RingReceiver::create(&dir.path("port"), cfg(4, 32)).expect("create");
    let tx = RingSender::open(rx.path()).expect("open");
    let big = [0u8; 33];
    let want = Err(SendError::TooLong { len: 33, max: 32 });
    assert_eq!(tx.try_send(&big), want);
    assert_eq!(tx.send_timeout(&big, Duration::ZERO), want);
    assert_eq!(rx.try_push(&big), want);
    assert!(matches!(
        tx.claim(33),
        Err(SendError::TooLong { len: 33, max: 32 })
    ));
    assert!(rx.is_empty());
}

#[test]
fn claim_commit_commit_len_and_drop() {
    let dir = TestDir::new();
    let mut rx = RingReceiver::create(&dir.path("port"), cfg(4, 32)).expect("create");
    let tx = RingSender::open(rx.path()).expect("open");

    let mut c = tx.claim(5).expect("claim");
    assert_eq!(c.len(), 5);
    c.copy_from_slice(b"hello");
    c.commit();

    let mut c = tx.claim(10).expect("claim");
    c[..3].copy_from_slice(b"abc");
    c.commit_len(3);

    let mut c = tx.claim(8).expect("claim");
    c.fill(0xee);
    drop(c); // never committed: becomes a skip record

    let mut c = rx.claim(2).expect("in-process claim");
    c.copy_from_slice(b"ok");
    c.commit();

    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"hello"[..]));
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"abc"[..]));
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"ok"[..]));
    assert_eq!(recv_vec(&mut rx), None);
    assert_eq!(rx.counters().skipped, 1);
    assert_eq!(rx.counters().delivered, 3);

    // Claims count against capacity like sends.
    let claims: Vec<_> = (0..4).map(|_| tx.claim(1).expect("claim")).collect();
    assert!(matches!(tx.claim(1), Err(SendError::Full)));
    drop(claims);
    assert_eq!(recv_vec(&mut rx), None, "only skip records");
    assert_eq!(rx.counters().skipped, 5);
}

#[test]
fn close_reports_closed_and_unlinks() {
    let dir = TestDir::new();
    let path = dir.path("port");
    let rx = RingReceiver::create(&path, cfg(2, 16)).expect("create");
    let tx = RingSender::open(&path).expect("open");
    let local = rx.producer();
    tx.try_send(b"1").expect("send");
    tx.try_send(b"2").expect("send");
    // A sender blocked on the full ring is woken by close.
    let blocked = {
        let tx = tx.clone();
        thread::spawn(move || tx.send_timeout(b"3", STUCK))
    };
    thread::sleep(Duration::from_millis(20)); // usually lets it block; either order is valid
    rx.close();
    assert_eq!(blocked.join().expect("join"), Err(SendError::Closed));
    assert_eq!(tx.try_send(b"x"), Err(SendError::Closed));
    assert_eq!(local.try_send(b"x"), Err(SendError::Closed));
    assert!(tx.is_closed());
    assert!(!path.exists());
    assert!(matches!(RingSender::open(&path), Err(ShmError::NotFound)));
}

#[test]
fn waker_interrupts_a_parked_receiver() {
    let dir = TestDir::new();
    let mut rx = RingReceiver::create(&dir.path("port"), cfg(4, 32)).expect("create");
    // A wake before the wait is not lost.
    rx.wake();
    assert!(!rx.wait(IdleStrategy::Park, None));
    // A wake from another thread ends an unbounded park.
    let waker = rx.waker();
    let parked = thread::spawn(move || {
        let woke = rx.wait(IdleStrategy::Park, None);
        (woke, rx)
    });
    thread::sleep(Duration::from_millis(20));
    waker.wake();
    let (woke, rx) = parked.join().expect("join");
    assert!(!woke, "no message was sent");
    drop(rx);
}

/// Producers send (producer id, sequence) pairs; the consumer parks between bursts and checks
/// exactly-once delivery and per-producer FIFO.
fn stress(strategy: IdleStrategy, producers: u32, per_producer: u64, slot_count: u32) {
    let dir = TestDir::new();
    let path = dir.path("port");
    let mut rx = RingReceiver::create(&path, cfg(slot_count, 64)).expect("create");
    let mut handles = Vec::new();
    for id in 0..producers {
        // Half the producers map the segment themselves, half share the owner's mapping.
        let tx = if id % 2 == 0 {
            RingSender::open(&path).expect("open")
        } else {
            rx.producer()
        };
        handles.push(thread::spawn(move || {
            let mut msg = [0u8; 12];
            msg[..4].copy_from_slice(&id.to_le_bytes());
            for seq in 0..per_producer {
                msg[4..].copy_from_slice(&seq.to_le_bytes());
                if seq % 7 == 0 {
                    // Exercise claim/commit on the same path.
                    loop {
                        match tx.claim(12) {
                            Ok(mut c) => {
                                c.copy_from_slice(&msg);
                                c.commit();
                                break;
                            }
                            Err(SendError::Full) => thread::yield_now(),
                            Err(e) => panic!("claim: {e}"),
                        }
                    }
                } else {
                    tx.send_timeout(&msg, STUCK).expect("send");
                }
            }
        }));
    }
    let total = producers as u64 * per_producer;
    let mut next: HashMap<u32, u64> = HashMap::new();
    let mut received = 0u64;
    while received < total {
        let ready = rx.wait(strategy, Some(STUCK));
        // A park that lasts 60 s while producers are busy means a lost wake-up.
        assert_eq!(
            rx.counters().park_timeouts,
            0,
            "park timed out with {received}/{total} received: lost wake-up"
        );
        assert!(
            ready,
            "no message for 60 s with {received}/{total} received"
        );
        while let Some((id, seq)) = rx.try_recv(|m| {
            assert_eq!(m.len(), 12);
            let id = u32::from_le_bytes(m[..4].try_into().expect("4 bytes"));
            let seq = u64::from_le_bytes(m[4..].try_into().expect("8 bytes"));
            (id, seq)
        }) {
            assert!(id < producers, "invented producer {id}");
            let want = next.entry(id).or_insert(0);
            assert_eq!(
                seq, *want,
                "producer {id}: FIFO broken or duplicate/lost message"
            );
            *want += 1;
            received += 1;
        }
    }
    for h in handles {
        h.join().expect("producer");
    }
    assert_eq!(recv_vec(&mut rx), None, "nothing beyond what was sent");
    for id in 0..producers {
        assert_eq!(next.get(&id), Some(&per_producer));
    }
    let c = rx.counters();
    eprintln!("{strategy:?}: {c:?}");
    assert_eq!(c.delivered, total);
    assert_eq!(c.dropped_bad, 0);
}

#[test]
fn stress_many_producers_parked_consumer() {
    stress(IdleStrategy::Park, 4, 20_000, 16);
}

#[test]
fn stress_many_producers_spin_then_park_tiny_ring() {
    stress(IdleStrategy::SpinThenPark { spins: 100 }, 3, 10_000, 2);
}

const CROSS_PROCESS_MESSAGES: u64 = 20_000;

#[test]
fn cross_process_child_sends_in_order() {
    if let Some(path) = child_path("send") {
        let tx = RingSender::open(&path).expect("child open");
        for i in 0..CROSS_PROCESS_MESSAGES {
            let mut msg = [0u8; 24];
            msg[..8].copy_from_slice(&i.to_le_bytes());
            let len = 8 + (i % 17) as usize;
            tx.send_timeout(&msg[..len], STUCK).expect("child send");
        }
        return;
    }
    let dir = TestDir::new();
    let path = dir.path("port");
    let mut rx = RingReceiver::create(&path, cfg(8, 64)).expect("create");
    let mut child = spawn_child("cross_process_child_sends_in_order", "send", &path);
    let mut expected = 0u64;
    while expected < CROSS_PROCESS_MESSAGES {
        let ready = rx.wait(IdleStrategy::Park, Some(STUCK));
        assert_eq!(
            rx.counters().park_timeouts,
            0,
            "lost wake-up after {expected}"
        );
        assert!(ready, "no message for 60 s after {expected}");
        while let Some((i, len)) = rx.try_recv(|m| {
            let i = u64::from_le_bytes(m[..8].try_into().expect("8 bytes"));
            (i, m.len())
        }) {
            assert_eq!(i, expected, "cross-process order");
            assert_eq!(len, 8 + (i % 17) as usize);
            expected += 1;
        }
    }
    let status = child.wait().expect("wait child");
    assert!(status.success(), "child failed: {status}");
    assert_eq!(recv_vec(&mut rx), None);
}

#[test]
fn dead_owner_is_detected_and_reclaimed() {
    if let Some(path) = child_path("create-and-die") {
        create_and_die(&path);
    }
    let dir = TestDir::new();
    let path = dir.path("port");
    run_dead_owner_child("dead_owner_is_detected_and_reclaimed", &path);
    assert!(matches!(RingSender::open(&path), Err(ShmError::OwnerDead)));
    let mut rx = RingReceiver::create(&path, cfg(8, 32)).expect("reclaim");
    assert!(rx.reclaimed());
    assert_eq!(rx.counters().reclaimed, 1);
    assert_eq!(rx.config(), cfg(8, 32));
    let tx = RingSender::open(&path).expect("open reclaimed");
    tx.try_send(b"fresh").expect("send");
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"fresh"[..]));
}

#[test]
fn reclaim_dead_scans_a_directory() {
    if let Some(path) = child_path("create-and-die") {
        create_and_die(&path);
    }
    let dir = TestDir::new();
    for name in ["dead-a", "dead-b"] {
        run_dead_owner_child("reclaim_dead_scans_a_directory", &dir.path(name));
    }
    let live = RingReceiver::create(&dir.path("live"), cfg(4, 32)).expect("create");
    fs::write(dir.path("junk"), b"not a segment").expect("junk");
    fs::create_dir(dir.path("subdir")).expect("subdir");
    assert_eq!(reclaim_dead(&dir.0).expect("scan"), 2);
    assert!(!dir.path("dead-a").exists());
    assert!(!dir.path("dead-b").exists());
    assert!(live.path().exists());
    assert!(dir.path("junk").exists());
    assert_eq!(reclaim_dead(&dir.0).expect("rescan"), 0);
}

#[test]
fn owner_death_ends_a_blocked_send() {
    if let Some(path) = child_path("create-wait-die") {
        let rx = RingReceiver::create(&path, cfg(2, 16)).expect("child create");
        let go = path.with_extension("go");
        for _ in 0..60_000 {
            if go.exists() {
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        std::mem::forget(rx);
        // SAFETY: _exit ends the process at once, leaving the segment behind.
        unsafe { libc::_exit(0) }
    }
    let dir = TestDir::new();
    let path = dir.path("port");
    let mut child = spawn_child("owner_death_ends_a_blocked_send", "create-wait-die", &path);
    let mut tx = None;
    for _ in 0..60_000 {
        match RingSender::open(&path) {
            Ok(t) => {
                tx = Some(t);
                break;
            }
            // Not there yet, or caught mid-creation.
            Err(ShmError::NotFound | ShmError::BadSegment(_)) => {
                thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("open: {e}"),
        }
    }
    let tx = tx.expect("child created the segment");
    tx.try_send(b"1").expect("send");
    tx.try_send(b"2").expect("send");
    fs::write(path.with_extension("go"), b"").expect("go");
    // The child exits and stays a zombie until we reap it: that must count as dead.
    assert_eq!(tx.send_timeout(b"3", STUCK), Err(SendError::OwnerDead));
    assert!(!tx.owner_alive());
    assert!(child.wait().expect("wait child").success());
}

#[test]
fn wrong_mode_or_bad_contents_are_refused() {
    let dir = TestDir::new();
    let path = dir.path("port");
    let rx = RingReceiver::create(&path, cfg(4, 32)).expect("create");
    for mode in [0o644, 0o640, 0o700, 0o400] {
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        match RingSender::open(&path) {
            Err(ShmError::Permission(rule)) => assert!(!rule.is_empty()),
            other => panic!("mode {mode:o}: expected Permission, got {:?}", other.err()),
        }
    }
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
    RingSender::open(&path).expect("0600 opens");
    drop(rx);

    // Not a segment: wrong magic, too short. Left alone by create.
    let junk = dir.path("junk");
    fs::write(&junk, vec![0xabu8; 4096]).expect("write");
    fs::set_permissions(&junk, fs::Permissions::from_mode(0o600)).expect("chmod");
    assert!(matches!(
        RingSender::open(&junk),
        Err(ShmError::BadSegment(_))
    ));
    assert!(matches!(
        RingReceiver::create(&junk, cfg(4, 32)),
        Err(ShmError::BadSegment(_))
    ));
    assert!(junk.exists());
    let short = dir.path("short");
    fs::write(&short, b"tiny").expect("write");
    fs::set_permissions(&short, fs::Permissions::from_mode(0o600)).expect("chmod");
    assert!(matches!(
        RingSender::open(&short),
        Err(ShmError::BadSegment(_))
    ));

    // A symlink to a valid segment is refused.
    let real = RingReceiver::create(&dir.path("real"), cfg(4, 32)).expect("create");
    symlink(real.path(), dir.path("link")).expect("symlink");
    assert!(matches!(
        RingSender::open(&dir.path("link")),
        Err(ShmError::Permission(_))
    ));
    assert!(matches!(
        RingSender::open(&dir.path("missing")),
        Err(ShmError::NotFound)
    ));
}

#[test]
fn private_dir_is_created_0700_and_checked() {
    let dir = TestDir::new();
    let mode = fs::metadata(&dir.0).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let nested = dir.path("a/b");
    ensure_private_dir(&nested).expect("nested");
    ensure_private_dir(&nested).expect("idempotent");
    assert_eq!(
        fs::metadata(&nested).expect("stat").permissions().mode() & 0o777,
        0o700
    );
    let open = dir.path("open");
    fs::create_dir(&open).expect("mkdir");
    fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).expect("chmod");
    assert!(matches!(
        ensure_private_dir(&open),
        Err(ShmError::Permission(_))
    ));
    symlink(&nested, dir.path("link")).expect("symlink");
    assert!(matches!(
        ensure_private_dir(&dir.path("link")),
        Err(ShmError::Permission(_))
    ));
}

/// A sender that dies between reserving a slot and publishing it does not stall the ring for
/// good: the receiver sees the slot's producer is gone and skips the slot.
#[test]
fn a_sender_dying_inside_a_claim_does_not_wedge_the_ring() {
    if let Some(path) = child_path("claim-and-die") {
        let tx = RingSender::open(&path).expect("child open");
        let claim = tx.claim(8).expect("child claim");
        std::mem::forget(claim);
        // SAFETY: _exit ends the process at once, as a crash would: the claim is never
        // committed nor dropped.
        unsafe { libc::_exit(0) }
    }
    let dir = TestDir::new();
    let path = dir.path("port");
    let mut rx = RingReceiver::create(&path, cfg(8, 64)).expect("create");
    let status = spawn_child(
        "a_sender_dying_inside_a_claim_does_not_wedge_the_ring",
        "claim-and-die",
        &path,
    )
    .wait()
    .expect("wait child");
    assert!(status.success(), "child failed: {status}");
    let tx = RingSender::open(&path).expect("open");
    tx.try_send(b"after").expect("send behind the dead slot");
    assert!(
        recv_vec(&mut rx).is_none(),
        "the head is the dead sender's slot"
    );
    assert!(rx.wait(IdleStrategy::Park, Some(Duration::from_secs(5))));
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"after"[..]));
    assert_eq!(rx.counters().dead_reservations, 1);
    assert_eq!(rx.counters().skipped, 1);
}
