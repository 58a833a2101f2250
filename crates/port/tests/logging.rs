//! What the port layer logs through `tracing`, captured by a subscriber that writes into a
//! buffer: refused datagrams (one line per reason per second, with the count since the last
//! one), a peer's restart, a group's views and the member it suspects, retransmission bursts
//! (one line per peer per second at most).
//!
//! The subscriber is the process's global one (the engine thread logs, not the test's), so
//! each test looks only at the lines that name its own ports. Instance 44 with server types
//! 4 to 7 is used by no other test.

mod common;
use common::wait_for;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use txcast_port::{ClusterConfig, IdleStrategy, Port, PortConfig};
use txcast_proto::Address;

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

/// Everything logged in this process since the first call, as text.
fn log() -> Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
        buf
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lines logged so far that contain every one of `words`.
fn lines_with(words: &[&str]) -> Vec<String> {
    let text = String::from_utf8(log().lock().unwrap().clone()).unwrap();
    text.lines()
        .filter(|l| words.iter().all(|w| l.contains(w)))
        .map(str::to_string)
        .collect()
}

fn cfg() -> PortConfig {
    PortConfig {
        idle: IdleStrategy::SpinThenPark { spins: 1000 },
        ..PortConfig::default()
    }
}

#[test]
fn garbage_is_logged_once_a_second_per_reason_with_a_count() {
    let _ = log();
    let b = Port::open(Address::new(44, 1, 5, 0), cfg()).unwrap();
    let port = format!("port={}", b.address());
    let to = ClusterConfig::default().socket_addr(b.address()).unwrap();
    let raw = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..100 {
        raw.send_to(b"definitely not a txcast packet, long enough to pass", to)
            .unwrap();
    }
    assert!(wait_for(|| b.counters().dropped_bad >= 100));
    // The first refusal is logged at once; the 99 after it within the second are not. (The
    // engine counts a refusal before it writes its line: wait for the line too.)
    wait_for(|| !lines_with(&[&port, "refused datagrams"]).is_empty());
    let lines = lines_with(&[&port, "refused datagrams"]);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(lines[0].contains("reason=\"malformed\""), "{}", lines[0]);
    assert!(lines[0].contains("count=1"), "{}", lines[0]);
    // A second later, the next one brings a line that counts those held back.
    std::thread::sleep(Duration::from_millis(1100));
    raw.send_to(&[0u8; 3], to).unwrap();
    assert!(wait_for(|| b.counters().dropped_bad >= 101));
    wait_for(|| lines_with(&[&port, "refused datagrams"]).len() >= 2);
    let lines = lines_with(&[&port, "refused datagrams"]);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines[1].contains("count=100"), "{}", lines[1]);
}

#[test]
fn a_peer_restart_is_logged_by_the_port_that_sees_it() {
    let _ = log();
    // Sites 0 and 1: different hosts, so the two talk over a link.
    let mut a = Port::open(Address::new(44, 0, 6, 0), cfg()).unwrap();
    let b_addr = Address::new(44, 1, 6, 0);
    let mut buf = [0u8; 64];
    {
        let mut b = Port::open(b_addr, cfg()).unwrap();
        b.send(a.address(), b"first life").unwrap();
        a.recv_timeout(&mut buf, WAIT).unwrap();
        a.send(b_addr, b"hello").unwrap();
        b.recv_timeout(&mut buf, WAIT).unwrap();
        b.flush(Duration::from_secs(10)).unwrap();
    }
    let restarted = [format!("port={}", a.address()), format!("peer={b_addr}")];
    let words = [&restarted[0][..], &restarted[1][..], "peer restarted"];
    assert!(lines_with(&words).is_empty());
    // b comes back as a new incarnation and speaks to a.
    let mut b = Port::open(b_addr, cfg()).unwrap();
    b.send(a.address(), b"second life").unwrap();
    let r = a.recv_timeout(&mut buf, WAIT).unwrap();
    assert_eq!(&buf[..r.len], b"second life");
    assert!(
        wait_for(|| !lines_with(&words).is_empty()),
        "{:#?}",
        lines_with(&[&restarted[0]])
    );
    let lines = lines_with(&words);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("INFO"), "{}", lines[0]);
}

#[test]
fn a_group_logs_its_views_and_the_member_it_suspects() {
    use txcast_proto::group::{GroupConfig, MinMembers};
    let _ = log();
    let ports: Vec<Port> = (0..3)
        .map(|s| Port::open(Address::new(44, s, 7, 0), cfg()).unwrap())
        .collect();
    let fast = GroupConfig {
        group: 5,
        silence_timeout: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(20),
        probe_interval: Duration::from_millis(40),
        auto_reset: Some(MinMembers::Majority),
        ..GroupConfig::default()
    };
    let a = ports[0].create_group(fast.clone()).unwrap();
    let b = ports[1]
        .join_group(fast.clone(), ports[0].address(), WAIT)
        .unwrap();
    let c = ports[2]
        .join_group(fast.clone(), ports[0].address(), WAIT)
        .unwrap();
    b.send(b"before", WAIT).unwrap();
    let at_b = format!("port={}", ports[1].address());
    let views = || lines_with(&[&at_b, "group view installed"]);
    assert_eq!(views().len(), 1, "{:#?}", views());
    // The sequencer's process "crashes": b suspects it, and the group is rebuilt without it.
    drop(a);
    c.send(b"after", WAIT).unwrap();
    assert!(wait_for(|| views().len() == 2), "{:#?}", views());
    // b or c (whichever noticed first) names the sequencer as suspected.
    let gone = format!("suspect={}", ports[0].address());
    let suspected = lines_with(&["WARN", "suspected", &gone]);
    assert!(!suspected.is_empty(), "{:#?}", lines_with(&["group=5"]));
    let rebuilt = &views()[1];
    assert!(rebuilt.contains("INFO"), "{rebuilt}");
    assert!(
        !rebuilt.contains(&ports[0].address().to_string()),
        "{rebuilt}"
    );
    drop((b, c));
}

/// An engine of its own that drops 30 % of its outgoing remote packets (seeded).
fn lossy_engine(seed: u64) -> txcast_port::Engine {
    txcast_port::Engine::start(txcast_port::EngineConfig {
        loss_injection: 0.3,
        loss_seed: seed,
        ..txcast_port::EngineConfig::default()
    })
    .unwrap()
}

#[test]
fn retransmission_bursts_are_logged_with_a_count_at_most_once_a_second_per_peer() {
    let _ = log();
    let engine = lossy_engine(3);
    let started = Instant::now();
    // Sites 0 and 1: the two talk over a link, whose packets the engine drops at random.
    let mut a = Port::open_on(&engine, Address::new(44, 0, 4, 0), cfg()).unwrap();
    let mut b = Port::open_on(&engine, Address::new(44, 1, 4, 0), cfg()).unwrap();
    let words = [
        format!("port={}", a.address()),
        format!("peer={}", b.address()),
    ];
    let bursts = || lines_with(&[&words[0], &words[1], "retransmission burst"]);
    let mut buf = [0u8; 64];
    // Rounds of 100 messages until a line names the peer (the port looks once a second, and
    // its first look only records the counts), for 20 s at most.
    while bursts().is_empty() && started.elapsed() < Duration::from_secs(20) {
        for i in 0..100u32 {
            a.send(b.address(), &i.to_le_bytes()).unwrap();
        }
        for i in 0..100u32 {
            let r = b.recv_timeout(&mut buf, WAIT).unwrap();
            assert_eq!(&buf[..r.len], &i.to_le_bytes(), "in order, none lost");
        }
    }
    let lines = bursts();
    assert!(!lines.is_empty(), "{:#?}", lines_with(&[&words[0]]));
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(lines[0].contains("interval_ms="), "{}", lines[0]);
    let count: u64 = lines[0]
        .split("count=")
        .nth(1)
        .and_then(|c| c.split_whitespace().next())
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a count in {}", lines[0]));
    assert!(count > 16, "a burst is more than 16: {}", lines[0]);
    assert!(a.counters().links.retransmitted >= count);
    // The rate limit: one line a second at most for this peer (counted after the last line,
    // so a slow machine only loosens the bound).
    let lines = bursts();
    let seconds = started.elapsed().as_secs() + 1;
    assert!(
        lines.len() as u64 <= seconds,
        "{} lines in {seconds} s: {lines:#?}",
        lines.len()
    );
}

#[test]
fn a_group_member_logs_its_retransmission_bursts_with_a_count() {
    use txcast_proto::group::GroupConfig;
    let _ = log();
    let engine = lossy_engine(4);
    let ports: Vec<Port> = (0..2)
        .map(|s| Port::open_on(&engine, Address::new(44, s, 3, 0), cfg()).unwrap())
        .collect();
    let spec = GroupConfig {
        group: 6,
        ..GroupConfig::default()
    };
    let a = ports[0].create_group(spec.clone()).unwrap();
    let b = ports[1].join_group(spec, ports[0].address(), WAIT).unwrap();
    let ours: Vec<String> = ports
        .iter()
        .map(|p| format!("port={}", p.address()))
        .collect();
    let bursts = || {
        let mut l = lines_with(&["group retransmission burst", "group=6", &ours[0]]);
        l.extend(lines_with(&[
            "group retransmission burst",
            "group=6",
            &ours[1],
        ]));
        l
    };
    // Rounds of 50 messages in flight at once until a member names its burst (a member
    // looks once a second): lost packets carry many records, and repairs resend them. 20 s
    // at most.
    let started = Instant::now();
    while bursts().is_empty() && started.elapsed() < Duration::from_secs(20) {
        for i in 0..50u32 {
            b.send_async(&i.to_le_bytes()).unwrap();
        }
        for g in [&a, &b] {
            let mut got = 0;
            while got < 50 {
                let d = g.receive(WAIT).expect("delivery");
                if matches!(d.what, txcast_port::GroupRecord::Message { .. }) {
                    got += 1;
                }
            }
        }
    }
    let lines = bursts();
    assert!(!lines.is_empty(), "{:#?}", lines_with(&["group=6"]));
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(lines[0].contains("interval_ms="), "{}", lines[0]);
    let count: u64 = lines[0]
        .split("count=")
        .nth(1)
        .and_then(|c| c.split_whitespace().next())
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a count in {}", lines[0]));
    assert!(count > 16, "a burst is more than 16: {}", lines[0]);
    drop((a, b));
}
