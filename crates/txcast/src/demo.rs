//! `txcast demo`: a three-site cluster on loopback, in four processes.
//!
//! Sites 0, 1 and 2 each run a child process holding a CC port (echoes pings) and an RC port
//! (a transaction participant). The parent is the AC at site 0: it pings the CC on its own site
//! (shared memory, across processes), pings the CCs of sites 1 and 2 (UDP through reliable
//! links), and runs transactions the way Raid's commit does: a read request to every RC, on
//! which each RC joins the transaction's multicast group, then one multicast of the commit
//! decision to the group, which each RC acknowledges before it leaves the group.

use crate::bench::{kill_child, wait_child};
use std::time::{Duration, Instant};
use txcast_port::{IdleStrategy, Port, PortConfig, PortError};
use txcast_proto::{Address, TxnId};

const INSTANCE: u16 = 0;
const AC: u16 = 1;
const CC: u16 = 2;
const RC: u16 = 3;
const SITES: [u16; 3] = [0, 1, 2];
const WAIT: Option<Duration> = Some(Duration::from_secs(5));

const OP_PING: u8 = b'P';
const OP_READ: u8 = b'R';
const OP_COMMIT: u8 = b'C';
const OP_QUIT: u8 = b'Q';

fn port_config() -> PortConfig {
    PortConfig {
        idle: IdleStrategy::Park,
        ..PortConfig::default()
    }
}

/// `txcast __demo-site <site>`: the CC and RC ports of one site, in a child process.
pub fn site(site: u16) -> i32 {
    let threads: Vec<_> = [CC, RC]
        .into_iter()
        .map(|ty| {
            std::thread::spawn(move || -> Result<(), PortError> {
                let mut port = Port::open(Address::new(INSTANCE, site, ty, 0), port_config())?;
                serve(&mut port)
            })
        })
        .collect();
    let mut code = 0;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("site {site}: {e}");
                code = 1;
            }
            Err(_) => code = 1,
        }
    }
    code
}

fn serve(port: &mut Port) -> Result<(), PortError> {
    let mut buf = vec![0u8; port.message_bytes_max()];
    loop {
        let r = port.recv_timeout(&mut buf, Some(Duration::from_secs(60)))?;
        let msg = &buf[..r.len];
        match msg.first() {
            Some(&OP_PING) => port.send(r.source, msg)?,
            Some(&OP_READ) if msg.len() >= 9 => {
                let txn = TxnId(u64::from_le_bytes(msg[1..9].try_into().expect("8 bytes")));
                port.join_txn(txn)?; // the participant joins when it first sees the transaction
                port.send(r.source, msg)?;
            }
            Some(&OP_COMMIT) if r.txn.is_some() => {
                let txn = r.txn.expect("checked");
                port.send(r.source, msg)?;
                port.leave_txn(txn)?;
            }
            Some(&OP_QUIT) => {
                // Send the ACK owed for the quit before the port closes; without it the AC
                // retransmits the quit until it gives up (false retransmissions in its
                // counters). A flush that times out costs only those.
                let _ = port.flush(Duration::from_secs(1));
                return Ok(());
            }
            _ => {}
        }
    }
}

struct Row {
    what: &'static str,
    path: &'static str,
    count: u64,
    p50_us: f64,
    p99_us: f64,
    note: String,
}

/// The options of `txcast demo comm`.
#[derive(clap::Args, Debug)]
pub struct CommArgs {
    /// Transactions the AC runs (a read at every RC, then one multicast of the decision)
    #[arg(long, default_value_t = 300)]
    pub txns: u64,
    /// Pings of each CC (its own site's and the two remote ones)
    #[arg(long, default_value_t = 2000)]
    pub pings: u64,
}

/// `txcast demo comm`.
pub fn run(args: &CommArgs) -> i32 {
    crate::exit_code("demo failed", drive(args.pings, args.txns))
}

fn drive(pings: u64, txns: u64) -> Result<(), Box<dyn std::error::Error>> {
    println!("txcast demo: 3 sites on loopback (127.0.0.1-3), 4 processes, instance {INSTANCE}");
    let mut children = Vec::new();
    for s in SITES {
        children.push(spawn_child_site(s)?);
    }
    let result = exchange(pings, txns);
    for c in children.iter_mut() {
        if wait_child(c, Duration::from_secs(10)).is_err() {
            kill_child(c);
        }
    }
    result
}

fn spawn_child_site(site: u16) -> std::io::Result<std::process::Child> {
    let exe = std::env::current_exe()?;
    std::process::Command::new(exe)
        .args(["__demo-site", &site.to_string()])
        .spawn()
}

fn exchange(pings: u64, txns: u64) -> Result<(), Box<dyn std::error::Error>> {
    let me = Address::new(INSTANCE, 0, AC, 0);
    let mut ac = Port::open(me, port_config())?;
    let mut buf = vec![0u8; ac.message_bytes_max()];
    // Wait until every site answers (their ports may still be opening).
    for s in SITES {
        let cc = Address::new(INSTANCE, s, CC, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match ac.send(cc, &[OP_PING]) {
                Ok(()) => break,
                Err(PortError::NoSuchPort(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => return Err(e.into()),
            }
        }
        ac.recv_timeout(&mut buf, Some(Duration::from_secs(10)))?;
    }
    eprintln!("all sites up; exchanging traffic");
    let mut rows = Vec::new();
    let local = ping(&mut ac, Address::new(INSTANCE, 0, CC, 0), pings, &mut buf)?;
    rows.push(row(
        "ping-pong 64 B",
        "local: shared memory",
        local,
        String::new(),
    ));
    let mut remote = Vec::with_capacity(pings as usize * 2);
    for s in [1, 2] {
        remote.extend(ping(
            &mut ac,
            Address::new(INSTANCE, s, CC, 0),
            pings,
            &mut buf,
        )?);
    }
    remote.sort_unstable();
    rows.push(row(
        "ping-pong 64 B",
        "remote: UDP, reliable link",
        remote,
        String::new(),
    ));
    let (commit, lost) = transactions(&mut ac, txns, &mut buf)?;
    rows.push(row(
        "commit round",
        "txn multicast to 3 RCs",
        commit,
        format!("{lost} acks missing"),
    ));
    for s in SITES {
        for ty in [CC, RC] {
            let _ = ac.send(Address::new(INSTANCE, s, ty, 0), &[OP_QUIT]);
        }
    }
    // Let the quit messages get acknowledged before this port goes away.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !ac.remote_idle() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    print_table(&rows);
    let c = ac.counters();
    println!();
    println!("AC port counters (site 0):");
    println!(
        "  local sent {:>8}   remote sent {:>8}   received {:>8}",
        c.local_sent, c.remote_sent, c.received
    );
    println!(
        "  packets sent {:>6}   packets received {:>6}   retransmitted {:>4}   dropped bad {}",
        c.packets_sent, c.packets_received, c.links.retransmitted, c.dropped_bad
    );
    println!(
        "  messages per packet: mean {:.2}  (acks sent {}, naks sent {})",
        mean_per_packet(&c.pack_histogram),
        c.links.acks_sent,
        c.links.naks_sent
    );
    // Loopback loses nothing: a retransmission here is a timer that fired before its ACK
    // came (a process not scheduled in time), and it shows up as a duplicate at the peer.
    println!(
        "  retransmissions: {} timeouts, {} naks received; duplicates received {}",
        c.links.rto_fired, c.links.naks_received, c.links.duplicates_dropped
    );
    Ok(())
}

fn mean_per_packet(h: &[u64]) -> f64 {
    let packets: u64 = h.iter().sum();
    let msgs: u64 = h.iter().enumerate().map(|(k, n)| k as u64 * n).sum();
    if packets == 0 {
        0.0
    } else {
        msgs as f64 / packets as f64
    }
}

fn ping(ac: &mut Port, to: Address, n: u64, buf: &mut [u8]) -> Result<Vec<u64>, PortError> {
    let mut msg = [0u8; 64];
    msg[0] = OP_PING;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        msg[1..9].copy_from_slice(&i.to_le_bytes());
        let t = Instant::now();
        ac.send(to, &msg)?;
        let r = ac.recv_timeout(buf, WAIT)?;
        out.push(t.elapsed().as_nanos() as u64);
        if r.len != 64 || buf[1..9] != i.to_le_bytes() {
            return Err(PortError::Io(std::io::Error::other("echo does not match")));
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn transactions(ac: &mut Port, n: u64, buf: &mut [u8]) -> Result<(Vec<u64>, u64), PortError> {
    let template = Address::new(INSTANCE, 0, RC, 0);
    let mut times = Vec::with_capacity(n as usize);
    let mut lost = 0;
    for t in 1..=n {
        let txn = TxnId(0x5eed_0000 + t);
        let mut read = [0u8; 9];
        read[0] = OP_READ;
        read[1..9].copy_from_slice(&txn.0.to_le_bytes());
        for s in SITES {
            ac.send(
                Address {
                    site: s,
                    ..template
                },
                &read,
            )?;
        }
        for _ in SITES {
            ac.recv_timeout(buf, WAIT)?;
        }
        let started = Instant::now();
        ac.multicast(txn, template, &SITES, &[OP_COMMIT])?;
        let mut acks = 0;
        while acks < SITES.len() {
            match ac.recv_timeout(buf, Some(Duration::from_millis(200))) {
                Ok(_) => acks += 1,
                Err(PortError::Timeout) => {
                    lost += (SITES.len() - acks) as u64;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        times.push(started.elapsed().as_nanos() as u64);
    }
    times.sort_unstable();
    Ok((times, lost))
}

fn row(what: &'static str, path: &'static str, sorted: Vec<u64>, note: String) -> Row {
    let pct = |p: f64| -> f64 {
        if sorted.is_empty() {
            return 0.0;
        }
        let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[i] as f64 / 1000.0
    };
    Row {
        what,
        path,
        count: sorted.len() as u64,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        note,
    }
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<16} {:<28} {:>7} {:>10} {:>10}  note",
        "exchange", "path", "count", "p50 µs", "p99 µs"
    );
    println!("{}", "-".repeat(86));
    for r in rows {
        println!(
            "{:<16} {:<28} {:>7} {:>10.1} {:>10.1}  {}",
            r.what, r.path, r.count, r.p50_us, r.p99_us, r.note
        );
    }
}
