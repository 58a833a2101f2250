//! Where a local round trip's time goes. Two threads of one process play ping-pong with a
//! 64-byte message, spinning, in these ways, each round measuring every one in turn:
//!
//! * `mailbox`: one sequence word and the payload per direction, the floor `bench rtt` calls
//!   `raw-shm-spin`;
//! * `rings/N`: two bare rings of N slots (`RingSender::try_send`, `RingReceiver::recv_into`);
//! * `ring+16/N`: the same, each message behind a 16-byte prefix as a port's envelope is
//!   (`try_send_prefixed`);
//! * `ports/N`: two ports whose rings have N slots (`Port::send`, `Port::recv`, spinning);
//! * `polled/N`: the same ports, received by polling `Port::try_recv`.
//!
//! It prints the mean round trip of each round (ns), the medians, and the median of the
//! per-round ratios to the mailbox. The differences separate the ring's cost from the port
//! layer's, and show what the ring's size does (each message of a ping-pong lands in the next
//! slot, so a large ring walks the whole of its memory).
//!
//! `cargo run --release -p txcast-port --example local_rtt [round trips per round] [rounds]
//! [slot counts, e.g. 1024,16]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use txcast_port::shm::{ensure_private_dir, RingConfig, RingReceiver};
use txcast_port::{IdleStrategy, Port, PortConfig};
use txcast_proto::Address;

const MESSAGE: [u8; 64] = [7u8; 64];
/// Slots as `bench throughput` sizes them: a 64-byte message, its envelope and the slot header.
const SLOT_BYTES: u32 = 112;

/// One direction of the mailbox floor: a sequence word and the payload, on its own lines.
#[repr(C, align(128))]
struct Mailbox {
    seq: AtomicU64,
    len: AtomicU64,
    payload: std::cell::UnsafeCell<[u8; 64]>,
}

// SAFETY: the payload is written only by the side that owns the turn (ping-pong), and the
// Release/Acquire pair on `seq` orders the copy before the other side's read.
unsafe impl Sync for Mailbox {}

impl Mailbox {
    fn new() -> Mailbox {
        Mailbox {
            seq: AtomicU64::new(0),
            len: AtomicU64::new(0),
            payload: std::cell::UnsafeCell::new([0; 64]),
        }
    }

    fn put(&self, seq: u64, msg: &[u8; 64]) {
        // SAFETY: our turn: the reader finished before it answered.
        unsafe { *self.payload.get() = *msg };
        self.len.store(64, Ordering::Relaxed);
        self.seq.store(seq, Ordering::Release);
    }

    fn take(&self, seq: u64, into: &mut [u8; 64]) {
        while self.seq.load(Ordering::Acquire) != seq {
            std::hint::spin_loop();
        }
        // SAFETY: the Acquire load above ordered the writer's copy before this read.
        *into = unsafe { *self.payload.get() };
    }
}

fn mailbox(n: u64) -> f64 {
    let (ab, ba) = (Arc::new(Mailbox::new()), Arc::new(Mailbox::new()));
    let (ab2, ba2) = (Arc::clone(&ab), Arc::clone(&ba));
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for i in 1..=n {
            ab2.take(i, &mut buf);
            ba2.put(i, &buf);
        }
    });
    let mut buf = [0u8; 64];
    let start = Instant::now();
    for i in 1..=n {
        ab.put(i, &MESSAGE);
        ba.take(i, &mut buf);
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    echo.join().expect("echo");
    ns
}

fn rings(dir: &std::path::Path, n: u64, slot_count: u32, prefix: &'static [u8]) -> f64 {
    let cfg = RingConfig {
        slot_count,
        slot_bytes: SLOT_BYTES,
    };
    let mut rx_a = RingReceiver::create(&dir.join("a"), cfg).expect("ring a");
    let mut rx_b = RingReceiver::create(&dir.join("b"), cfg).expect("ring b");
    let (to_a, to_b) = (rx_a.producer(), rx_b.producer());
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 128];
        for _ in 0..n {
            let len = loop {
                if let Some(len) = rx_b.recv_into(&mut buf) {
                    break len;
                }
                std::hint::spin_loop();
            };
            while to_a
                .try_send_prefixed(prefix, &buf[prefix.len()..len])
                .is_err()
            {
                std::hint::spin_loop();
            }
        }
    });
    let mut buf = [0u8; 128];
    let start = Instant::now();
    for _ in 0..n {
        while to_b.try_send_prefixed(prefix, &MESSAGE).is_err() {
            std::hint::spin_loop();
        }
        while rx_a.recv_into(&mut buf).is_none() {
            std::hint::spin_loop();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    echo.join().expect("echo");
    ns
}

fn ports(server: u16, n: u64, slot_count: u32, poll: bool) -> f64 {
    let cfg = PortConfig {
        idle: IdleStrategy::Spin,
        slot_bytes: SLOT_BYTES,
        slot_count,
        ..PortConfig::default()
    };
    // Instance 8 is this example's; each measurement opens fresh ports.
    let mut a = Port::open(Address::new(8, 0, 1, server), cfg).expect("port a");
    let mut b = Port::open(Address::new(8, 0, 2, server), cfg).expect("port b");
    let (to_a, to_b) = (a.address(), b.address());
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 128];
        for _ in 0..n {
            let r = if poll {
                loop {
                    if let Some(r) = b.try_recv(&mut buf) {
                        break r;
                    }
                    std::hint::spin_loop();
                }
            } else {
                b.recv(&mut buf).expect("echo recv")
            };
            b.send(to_a, &buf[..r.len]).expect("echo send");
        }
    });
    let mut buf = [0u8; 128];
    let start = Instant::now();
    for _ in 0..n {
        a.send(to_b, &MESSAGE).expect("send");
        if poll {
            while a.try_recv(&mut buf).is_none() {
                std::hint::spin_loop();
            }
        } else {
            a.recv(&mut buf).expect("recv");
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    echo.join().expect("echo");
    ns
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: u16 = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let slots: Vec<u32> = args
        .next()
        .map(|a| a.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![1024, 16]);
    let dir = std::path::PathBuf::from(format!("/dev/shm/txcast-example-{}", std::process::id()));
    ensure_private_dir(&dir).expect("private dir");
    let mut names = vec!["mailbox".to_string()];
    for s in &slots {
        names.push(format!("rings/{s}"));
        names.push(format!("ring+16/{s}"));
    }
    names.extend(slots.iter().map(|s| format!("ports/{s}")));
    names.extend(slots.iter().map(|s| format!("polled/{s}")));
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    println!(
        "round {}",
        names.iter().map(|n| format!("{n:>13}")).collect::<String>()
    );
    // Server instances of the ports, and directories of the rings: fresh for each measurement.
    let mut opened: u16 = 0;
    for round in 0..rounds {
        let round_dir = dir.join(round.to_string());
        ensure_private_dir(&round_dir).expect("round dir");
        let mut row = vec![mailbox(n)];
        for &s in &slots {
            for prefix in [&[][..], &[1u8; 16][..]] {
                opened += 1;
                let d = round_dir.join(opened.to_string());
                ensure_private_dir(&d).expect("ring dir");
                row.push(rings(&d, n, s, prefix));
                let _ = std::fs::remove_dir(&d);
            }
        }
        for poll in [false, true] {
            for &s in &slots {
                opened += 1;
                row.push(ports(opened % 64, n, s, poll));
            }
        }
        let _ = std::fs::remove_dir(&round_dir);
        println!(
            "{round:>5} {}",
            row.iter().map(|x| format!("{x:>13.1}")).collect::<String>()
        );
        for (v, x) in ns.iter_mut().zip(row) {
            v.push(x);
        }
    }
    let floor = ns[0].clone();
    let ratio = |x: &[f64]| {
        let mut v: Vec<f64> = x.iter().zip(&floor).map(|(a, b)| a / b).collect();
        median(&mut v)
    };
    println!(
        "median{}",
        ns.iter()
            .map(|v| format!("{:>13.1}", median(&mut v.clone())))
            .collect::<String>()
    );
    println!(
        "ratio {}",
        ns.iter()
            .map(|v| format!("{:>13.2}", ratio(v)))
            .collect::<String>()
    );
    let _ = std::fs::remove_dir(&dir);
}
