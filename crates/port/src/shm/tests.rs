//! Unit tests that need the internals: scribbling on the shared memory.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use std::time::Duration;

use super::layout::{
    meta, IdentityValues, Layout, HEADER_BYTES, IDENTITY_BYTES, KIND_MESSAGE, KIND_RESERVED,
};
use super::*;

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// A private directory under /dev/shm, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new() -> TestDir {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(format!("/dev/shm/txcast-unit-{}-{n}", std::process::id()));
        ensure_private_dir(&dir).expect("private dir");
        TestDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ring(dir: &TestDir, slot_count: u32, slot_bytes: u32) -> RingReceiver {
    RingReceiver::create(
        &dir.path("ring"),
        RingConfig {
            slot_count,
            slot_bytes,
        },
    )
    .expect("create")
}

fn recv_vec(rx: &mut RingReceiver) -> Option<Vec<u8>> {
    rx.try_recv(|m| m.to_vec())
}

#[test]
fn layout_bounds() {
    assert!(Layout::compute(1, 64).is_err());
    assert!(Layout::compute(3, 64).is_err());
    assert!(Layout::compute(1 << 21, 64).is_err());
    assert!(Layout::compute(4, 15).is_err());
    assert!(Layout::compute(4, (1 << 20) + 1).is_err());
    // 2^20 slots of 2^20 bytes is far past the segment bound.
    assert_eq!(
        Layout::compute(1 << 20, 1 << 20),
        Err("segment size must be at most 1 GiB")
    );
    let l = Layout::compute(8, 100).expect("valid");
    assert_eq!(l.slot_stride, 128);
    assert_eq!(l.total_bytes, HEADER_BYTES + 8 * 128);
    assert_eq!(l.mask, 7);
}

#[test]
fn identity_bytes_match_mapped_words() {
    let dir = TestDir::new();
    let rx = ring(&dir, 4, 64);
    let mapped = IdentityValues::load(&rx.segment().header().id.0);
    let bytes = std::fs::read(rx.path()).expect("read segment");
    let mut head = [0u8; IDENTITY_BYTES];
    head.copy_from_slice(&bytes[..IDENTITY_BYTES]);
    assert_eq!(IdentityValues::from_bytes(&head), mapped);
    assert_eq!(mapped.validate(bytes.len() as u64), Ok(rx.segment().layout));
}

#[test]
fn corrupted_length_is_dropped_and_counted() {
    let dir = TestDir::new();
    let mut rx = ring(&dir, 4, 32);
    rx.try_push(b"first").expect("push");
    rx.try_push(b"second").expect("push");
    // A scribbler rewrites the first record's length beyond the slot.
    rx.segment()
        .slot(0)
        .meta
        .store(meta(KIND_MESSAGE, 33), Ordering::Relaxed);
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"second"[..]));
    assert_eq!(recv_vec(&mut rx), None);
    let c = rx.counters();
    assert_eq!(c.dropped_bad, 1);
    assert_eq!(c.delivered, 1);
    // The ring keeps working after the bad record.
    rx.try_push(b"third").expect("push");
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"third"[..]));
}

#[test]
fn huge_length_and_unknown_kind_are_dropped() {
    let dir = TestDir::new();
    let mut rx = ring(&dir, 4, 32);
    rx.try_push(b"a").expect("push");
    rx.try_push(b"b").expect("push");
    rx.try_push(b"c").expect("push");
    rx.segment()
        .slot(0)
        .meta
        .store(meta(KIND_MESSAGE, u32::MAX), Ordering::Relaxed);
    rx.segment()
        .slot(1)
        .meta
        .store(meta(0xdead_beef, 1), Ordering::Relaxed);
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"c"[..]));
    assert_eq!(rx.counters().dropped_bad, 2);
    let mut buf = [0u8; 32];
    assert_eq!(rx.recv_into(&mut buf), None);
}

#[test]
fn scribbled_sequence_wedges_without_spinning_or_panicking() {
    let dir = TestDir::new();
    let mut rx = ring(&dir, 4, 32);
    let tx = rx.producer();
    for i in 0..4u8 {
        tx.try_send(&[i]).expect("fill");
    }
    // A head beyond the tail: producers must not spin forever (the ring is full for good).
    let head = &rx.segment().header().head.0;
    head.store(1_000_000, Ordering::Relaxed);
    assert_eq!(tx.try_send(b"x"), Err(SendError::Full));
    head.store(0, Ordering::Relaxed);
    for i in 0..4u8 {
        assert_eq!(recv_vec(&mut rx), Some(vec![i]));
    }
    // Position 4 (slot 0) claims to be far ahead: the consumer does not take it.
    rx.segment().slot(4).seq.store(1_000_000, Ordering::Relaxed);
    assert_eq!(recv_vec(&mut rx), None);
    // A sequence that looks published for the consumer but with garbage length.
    rx.segment().slot(4).seq.store(5, Ordering::Relaxed);
    rx.segment()
        .slot(4)
        .meta
        .store(meta(KIND_MESSAGE, 4096), Ordering::Relaxed);
    assert_eq!(recv_vec(&mut rx), None);
    assert_eq!(rx.counters().dropped_bad, 1);
    // Head and tail now disagree (the scribble invented a record): the ring may stay wedged,
    // but every call returns.
    let _ = tx.try_send(b"y");
    let _ = recv_vec(&mut rx);
    assert!(rx.len() <= 4);
}

#[test]
fn scribbled_header_geometry_is_ignored_after_open() {
    let dir = TestDir::new();
    let mut rx = ring(&dir, 4, 32);
    let tx = RingSender::open(rx.path()).expect("open");
    let id = &rx.segment().header().id.0;
    id.slot_count.store(1 << 20, Ordering::Relaxed);
    id.slot_bytes.store(1 << 20, Ordering::Relaxed);
    assert_eq!(tx.slot_bytes(), 32);
    for i in 0..10u8 {
        tx.try_send(&[i; 32]).expect("send");
        assert_eq!(recv_vec(&mut rx), Some(vec![i; 32]));
    }
    // New openers see the scribbled header and refuse it.
    assert!(matches!(
        RingSender::open(rx.path()),
        Err(ShmError::BadSegment(_))
    ));
}

#[test]
fn claim_dropped_is_skipped() {
    let dir = TestDir::new();
    let mut rx = ring(&dir, 4, 32);
    drop(rx.claim(8).expect("claim"));
    rx.try_push(b"after").expect("push");
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"after"[..]));
    assert_eq!(rx.counters().skipped, 1);
    assert_eq!(rx.counters().dropped_bad, 0);
}

#[test]
fn panicking_callback_releases_the_slot() {
    let dir = TestDir::new();
    let mut rx = ring(&dir, 2, 16);
    rx.try_push(b"boom").expect("push");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rx.try_recv(|_| panic!("callback panics"));
    }));
    assert!(caught.is_err());
    rx.try_push(b"1").expect("slot freed");
    rx.try_push(b"2").expect("slot freed");
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"1"[..]));
}

#[test]
fn a_segment_still_being_created_is_not_found_yet() {
    // Its owner creates the file, sizes it, and writes the magic last: an opener in between
    // sees no port yet (and retries, as for a port not yet opened), not a bad segment.
    use std::os::unix::fs::OpenOptionsExt;
    let dir = TestDir::new();
    let path = dir.path("being-created");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("create");
    assert!(matches!(RingSender::open(&path), Err(ShmError::NotFound)));
    file.set_len(64 * 1024).expect("size");
    assert!(matches!(RingSender::open(&path), Err(ShmError::NotFound)));
    // Any other content is still a bad segment.
    std::os::unix::fs::FileExt::write_all_at(&file, b"NOTASEGM", 0).expect("write");
    assert!(matches!(
        RingSender::open(&path),
        Err(ShmError::BadSegment(_))
    ));
}

/// A live producer that holds a claim past several stall checks keeps its slot: the receiver
/// asks whether it is alive, finds it is, and takes the message once committed.
#[test]
fn a_live_claim_outlasting_the_stall_check_is_delivered() {
    let dir = TestDir::new();
    let mut rx = ring(&dir, 4, 32);
    let tx = rx.producer();
    let mut claim = tx.claim(5).expect("claim");
    claim.copy_from_slice(b"slow!");
    // Three stall checks' worth of polling while the claim is open.
    for _ in 0..3 {
        assert!(!rx.wait(IdleStrategy::Park, Some(Duration::from_millis(12))));
    }
    claim.commit();
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"slow!"[..]));
    let c = rx.counters();
    assert_eq!((c.dead_reservations, c.skipped, c.delivered), (0, 0, 1));
}

/// Claims the slot at `pos` (the next one) and leaves it reserved in the name of pid 0, which
/// is never alive: what a producer that died holding it leaves behind.
fn reserve_for_a_dead_producer(rx: &RingReceiver, tx: &RingSender, pos: u64) {
    std::mem::forget(tx.claim(1).expect("claim"));
    rx.segment()
        .slot(pos)
        .meta
        .store(meta(KIND_RESERVED, 0), Ordering::Release);
}

/// A publish writes the sequence, then the kind and length. Until the second store the
/// receiver waits; if the producer died in between (here: its reservation names pid 0, which
/// is never alive), the receiver skips the slot after the stall check.
#[test]
fn a_producer_dead_between_its_two_publishing_stores_is_skipped() {
    let dir = TestDir::new();
    let mut rx = ring(&dir, 4, 32);
    let tx = rx.producer();
    reserve_for_a_dead_producer(&rx, &tx, 0);
    rx.segment().slot(0).seq.store(1, Ordering::Release);
    tx.try_send(b"after").expect("send behind the stalled slot");
    assert_eq!(recv_vec(&mut rx), None, "a reserved slot is not taken");
    assert!(rx.wait(IdleStrategy::Park, Some(Duration::from_secs(5))));
    assert_eq!(recv_vec(&mut rx).as_deref(), Some(&b"after"[..]));
    let c = rx.counters();
    assert_eq!((c.dead_reservations, c.skipped, c.delivered), (1, 1, 1));
}

/// The stall clock starts again at each position: a stall seen long ago does not make the
/// next reserved head look stalled at once (which sent every reservation the receiver met to
/// the liveness check).
#[test]
fn the_stall_clock_restarts_at_each_position() {
    let dir = TestDir::new();
    let mut rx = ring(&dir, 4, 32);
    let tx = rx.producer();
    // A stall at position 0, seen, then resolved.
    let claim = tx.claim(1).expect("claim");
    assert!(!rx.has_ready());
    claim.commit();
    assert!(recv_vec(&mut rx).is_some());
    std::thread::sleep(Duration::from_millis(15));
    // Position 1 reserved by a "dead" pid: the first look starts its clock, it does not skip.
    reserve_for_a_dead_producer(&rx, &tx, 1);
    assert!(!rx.has_ready());
    assert_eq!(rx.counters().dead_reservations, 0);
    std::thread::sleep(Duration::from_millis(15));
    assert!(rx.has_ready());
    assert_eq!(rx.counters().dead_reservations, 1);
}

/// After an upgrade: a segment the previous version left behind (its owner killed) neither
/// blocks the address nor looks like a bad segment to senders; a live one of another
/// version is refused by name.
#[test]
fn another_versions_leftover_is_reclaimed() {
    let dir = TestDir::new();
    let rx = ring(&dir, 4, 32);
    let path = rx.path().to_path_buf();
    let id = &rx.segment().header().id.0;
    id.version.store(1, Ordering::Relaxed);
    assert!(matches!(
        RingSender::open(&path),
        Err(ShmError::BadSegment(_))
    ));
    // Its owner "dies": pid 0 is never alive. The receiver is leaked, as a killed process
    // would leave it (no close, no unlink).
    id.owner_pid.store(0, Ordering::Relaxed);
    std::mem::forget(rx);
    assert!(matches!(RingSender::open(&path), Err(ShmError::OwnerDead)));
    let mut again = RingReceiver::create(
        &path,
        RingConfig {
            slot_count: 4,
            slot_bytes: 32,
        },
    )
    .expect("the leftover is reclaimed");
    assert!(again.reclaimed());
    RingSender::open(&path)
        .expect("open")
        .try_send(b"new")
        .expect("send");
    assert_eq!(recv_vec(&mut again).as_deref(), Some(&b"new"[..]));
}

/// Polls until `rx` yields a message or `limit` passes.
fn poll_for(rx: &mut RingReceiver, limit: Duration) -> Option<Vec<u8>> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if let Some(m) = recv_vec(rx) {
            return Some(m);
        }
        std::hint::spin_loop();
    }
    None
}

/// A consumer that only polls (`try_recv`, never `wait` or `has_ready`) still gets past a
/// dead producer's reservation, published or not, once the stall check has passed.
#[test]
fn a_polling_consumer_gets_past_a_dead_producers_reservation() {
    for published in [false, true] {
        let dir = TestDir::new();
        let mut rx = ring(&dir, 4, 32);
        let tx = rx.producer();
        reserve_for_a_dead_producer(&rx, &tx, 0);
        if published {
            rx.segment().slot(0).seq.store(1, Ordering::Release);
        }
        tx.try_send(b"after").expect("send behind the stalled slot");
        let got = poll_for(&mut rx, Duration::from_secs(5));
        assert_eq!(
            got.as_deref(),
            Some(&b"after"[..]),
            "published: {published}"
        );
        let c = rx.counters();
        assert_eq!((c.dead_reservations, c.skipped, c.delivered), (1, 1, 1));
    }
}

/// The names in `dir`, sorted.
fn names_in(dir: &TestDir) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&dir.0)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    names.sort();
    names
}

/// A segment is built aside (unnamed where the file system allows) and linked into place
/// whole, so a port's path never holds a half-made segment and nothing is left beside it once
/// the port is open. A named leftover (a file system without unnamed files, a builder that
/// died) is removed by `reclaim_dead` once its builder is gone, kept while it lives, and never
/// listed by `survey`.
#[test]
fn segments_are_built_aside_and_named_leftovers_reclaimed() {
    let dir = TestDir::new();
    let path = dir.path("port");
    let rx = RingReceiver::create(
        &path,
        RingConfig {
            slot_count: 4,
            slot_bytes: 64,
        },
    )
    .expect("create");
    assert_eq!(names_in(&dir), vec!["port".to_string()]);
    assert!(RingSender::open(&path).is_ok());

    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let dead = child.id();
    child.wait().expect("reap");
    let theirs = reclaim::building_path(&dir.path("other"), dead, 3).expect("name");
    let at_work = reclaim::building_path(&dir.path("third"), std::process::id(), 7).expect("name");
    // Whole segments, as a builder leaves them between writing the magic and linking.
    std::fs::copy(&path, &theirs).expect("copy");
    std::fs::copy(&path, &at_work).expect("copy");
    let listed: Vec<_> = survey(&dir.0)
        .expect("survey")
        .into_iter()
        .map(|s| s.path)
        .collect();
    assert_eq!(listed, vec![path.clone()]);
    assert_eq!(reclaim_dead(&dir.0).expect("reclaim"), 1);
    assert!(!theirs.exists(), "a dead builder's file goes");
    assert!(at_work.exists(), "a live builder's file stays");
    assert!(path.exists());
    drop(rx);
}

/// Two threads of one process creating the same port at once: one gets it, the other
/// `InUse`, and the winner's ring is the one at the path (a sender reaches it).
#[test]
fn concurrent_creators_of_one_port_get_it_once() {
    let dir = TestDir::new();
    let path = dir.path("port");
    let cfg = RingConfig {
        slot_count: 4,
        slot_bytes: 64,
    };
    for round in 0..200u32 {
        let barrier = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let one = || {
                barrier.wait();
                RingReceiver::create(&path, cfg)
            };
            let a = s.spawn(one);
            let b = s.spawn(one);
            (a.join().expect("a"), b.join().expect("b"))
        });
        let mut winner = match (a, b) {
            (Ok(rx), Err(ShmError::InUse)) | (Err(ShmError::InUse), Ok(rx)) => rx,
            (a, b) => panic!("round {round}: {:?} and {:?}", a.map(|_| ()), b.map(|_| ())),
        };
        let tx = RingSender::open(&path).expect("open");
        tx.try_send(&round.to_le_bytes()).expect("send");
        assert_eq!(recv_vec(&mut winner), Some(round.to_le_bytes().to_vec()));
        drop(winner);
        assert!(!path.exists(), "round {round}: closing removes the port");
    }
}
