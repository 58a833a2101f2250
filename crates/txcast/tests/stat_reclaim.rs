//! `txcast stat --reclaim`: the ring of a port whose process was killed is removed, the ring
//! of a live port is not.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use txcast::config::ClusterConfig;
use txcast::port::{Port, PortConfig};
use txcast::Address;

/// Used by no other test of this crate.
const INSTANCE: u16 = 37;

fn stat(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .arg("stat")
        .args(args)
        .output()
        .expect("run txcast stat");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn reclaim_removes_the_rings_of_killed_owners_and_keeps_live_ones() {
    let cluster = ClusterConfig::default();
    let live = Port::open(Address::new(INSTANCE, 0, 1, 0), PortConfig::default()).unwrap();
    let live_ring = cluster.segment_path(live.address());

    // A port in another process (an RPC server at type 2), killed with SIGKILL: it cannot
    // remove its ring itself.
    let mut child = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "__rpc-server",
            "--instance",
            &INSTANCE.to_string(),
            "--site",
            "0",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let dead_ring = cluster.segment_path(Address::new(INSTANCE, 0, 2, 0));
    assert!(
        dead_ring.exists(),
        "{} while its owner lives",
        dead_ring.display()
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(dead_ring.exists(), "a killed owner leaves its ring behind");

    // `stat` alone lists it as dead and removes nothing.
    let dead_name = format!("{INSTANCE}.0.2.0");
    let (code, out, _) = stat(&["--json"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.contains(&format!("\"address\":\"{dead_name}\"")) && l.contains("\"dead\"")),
        "{out}"
    );
    assert!(dead_ring.exists());

    let (code, out, err) = stat(&["--reclaim"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("reclaimed"), "{err}");
    assert!(!dead_ring.exists(), "the dead owner's ring is still there");
    assert!(!out.contains(&dead_name), "{out}");
    assert!(live_ring.exists(), "the live port's ring was removed");
    assert!(out.contains(&live.address().to_string()), "{out}");
}

/// The `--json` line of `stat` for `address`, parsed.
fn stat_line(address: Address) -> serde_json::Value {
    let (code, out, err) = stat(&["--json"]);
    assert_eq!(code, 0, "{err}");
    let name = address.to_string();
    out.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
        .find(|v| v["address"] == name.as_str())
        .unwrap_or_else(|| panic!("{name} not listed: {out}"))
}

#[test]
fn stat_shows_the_link_counters_of_a_port() {
    let (a, b) = (
        Address::new(INSTANCE, 0, 5, 0),
        Address::new(INSTANCE, 1, 5, 0),
    );
    let mut sender = Port::open(a, PortConfig::default()).unwrap();
    let mut receiver = Port::open(b, PortConfig::default()).unwrap();
    for _ in 0..25 {
        sender.send(b, b"over a link").unwrap();
    }
    let mut buf = [0u8; 64];
    for _ in 0..25 {
        receiver
            .recv_timeout(&mut buf, Some(std::time::Duration::from_secs(5)))
            .unwrap();
    }
    sender.flush(std::time::Duration::from_secs(5)).unwrap();
    // The engine publishes the totals at most once a millisecond, and a quiet engine within
    // `PARK_MAX` (25 ms): read until they have caught up, for a few seconds at most.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (s, r) = loop {
        let (s, r) = (stat_line(a), stat_line(b));
        let caught_up = s["links"]["messages_sent"] == 25
            && r["links"]["messages_delivered"] == 25
            && r["links"]["acks_sent"].as_u64() > Some(0);
        if caught_up || std::time::Instant::now() > deadline {
            break (s, r);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(s["links"]["messages_sent"], 25, "{s}");
    assert_eq!(r["links"]["messages_delivered"], 25, "{r}");
    assert!(r["links"]["acks_sent"].as_u64().unwrap() > 0, "{r}");
    // What the process itself counts, the segment shows.
    let own = sender.counters().links;
    assert_eq!(s["links"]["retransmitted"], own.retransmitted, "{s}");
    // The table has the columns.
    let (_, table, _) = stat(&[]);
    assert!(
        table.contains("retrans") && table.contains("dups"),
        "{table}"
    );
}
