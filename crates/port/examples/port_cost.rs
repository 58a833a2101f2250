//! CPU cost per message of the local path on one thread, so no second core is involved: a
//! port sends batches of 64-byte messages to another port of the same process and that port
//! takes them, timed apart; then the same through the zero-copy calls (`claim`/`commit`,
//! `try_take_with`), and through the bare ring under the ports. The difference between the
//! first and the last rows is what the port layer costs on top of the ring.
//!
//! `cargo run --release -p txcast-port --example port_cost`

use std::time::{Duration, Instant};
use txcast_port::shm::{ensure_private_dir, RingConfig, RingReceiver};
use txcast_port::{IdleStrategy, Port, PortConfig};
use txcast_proto::Address;

const BATCH: usize = 512;
const BATCHES: usize = 4000;
const ROUNDS: usize = 3;
const MESSAGE: [u8; 64] = [7u8; 64];
/// Slots sized as `bench throughput` sizes its receiver's: a 64-byte message, its envelope and
/// the slot header in two cache lines.
const SLOT_BYTES: u32 = 112;

/// Total time of the send halves and of the receive halves over every batch.
fn timed(mut send: impl FnMut(), mut recv: impl FnMut()) -> (Duration, Duration) {
    let (mut s, mut r) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..BATCHES {
        let a = Instant::now();
        for _ in 0..BATCH {
            send();
        }
        let b = Instant::now();
        for _ in 0..BATCH {
            recv();
        }
        s += b - a;
        r += b.elapsed();
    }
    (s, r)
}

fn report(name: &str, (s, r): (Duration, Duration)) {
    let n = (BATCH * BATCHES) as f64;
    println!(
        "{name:<22} send {:6.1} ns/msg   receive {:6.1} ns/msg",
        s.as_nanos() as f64 / n,
        r.as_nanos() as f64 / n
    );
}

fn main() {
    // Instance 9 is this example's; the tests and benches use others.
    let receiving = PortConfig {
        idle: IdleStrategy::Spin,
        slot_bytes: SLOT_BYTES,
        ..PortConfig::default()
    };
    let mut rx = Port::open(Address::new(9, 0, 2, 0), receiving).expect("receiving port");
    let mut tx = Port::open(Address::new(9, 0, 1, 0), PortConfig::default()).expect("port");
    let dest = rx.address();
    let dir = std::path::PathBuf::from(format!("/dev/shm/txcast-example-{}", std::process::id()));
    ensure_private_dir(&dir).expect("private dir");
    let path = dir.join("ring");
    let mut ring = RingReceiver::create(
        &path,
        RingConfig {
            slot_count: 1024,
            slot_bytes: SLOT_BYTES,
        },
    )
    .expect("ring");
    let producer = ring.producer();
    let mut buf = [0u8; 128];
    for _ in 0..ROUNDS {
        let port = timed(
            || tx.send(dest, &MESSAGE).expect("send"),
            || {
                let r = rx.try_recv(&mut buf).expect("a message");
                assert_eq!(r.len, MESSAGE.len());
            },
        );
        report("port send/try_recv", port);
        let zero_copy = timed(
            || {
                let mut c = tx.claim(dest, MESSAGE.len()).expect("claim");
                c.copy_from_slice(&MESSAGE);
                c.commit().expect("commit");
            },
            || {
                let n = rx.try_take_with(|_, _, m| m.len()).expect("a message");
                assert_eq!(n, MESSAGE.len());
            },
        );
        report("port claim/take_with", zero_copy);
        let bare = timed(
            || producer.try_send(&MESSAGE).expect("room"),
            || {
                let n = ring.recv_into(&mut buf).expect("a message");
                assert_eq!(n, MESSAGE.len());
            },
        );
        report("bare ring", bare);
    }
    drop(ring);
    let _ = std::fs::remove_dir_all(&dir);
}
