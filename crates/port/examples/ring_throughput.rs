//! Throughput of the bare shared-memory ring in one process (two threads), to separate the
//! ring's cost from the port layer's: `cargo run --release -p txcast-port --example ring_throughput`.

use std::time::Instant;
use txcast_port::shm::{ensure_private_dir, RingConfig, RingReceiver};

fn main() {
    let dir = std::path::PathBuf::from(format!("/dev/shm/txcast-example-{}", std::process::id()));
    ensure_private_dir(&dir).expect("private dir");
    let path = dir.join("ring");
    let mut rx = RingReceiver::create(
        &path,
        RingConfig {
            slot_count: 1024,
            slot_bytes: 112,
        },
    )
    .expect("ring");
    let tx = rx.producer();
    let n: u64 = 20_000_000;
    let producer = std::thread::spawn(move || {
        let msg = [7u8; 80];
        for _ in 0..n {
            while tx.try_send(&msg).is_err() {
                std::hint::spin_loop();
            }
        }
    });
    let start = Instant::now();
    let mut got = 0u64;
    let mut sum = 0u64;
    while got < n {
        if let Some(len) = rx.try_recv(|m| m.len()) {
            got += 1;
            sum += len as u64;
        } else {
            std::hint::spin_loop();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    producer.join().expect("producer");
    println!(
        "{n} messages in {secs:.3} s: {:.1} M msg/s ({sum} bytes)",
        n as f64 / secs / 1e6
    );
    drop(rx);
    let _ = std::fs::remove_dir(&dir);
}
