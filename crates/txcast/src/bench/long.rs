//! `txcast bench long`: round trips of long messages by length (paper 001 Table 1's lengths:
//! 64 B to 8 MB) between two processes, for txcast's long messages (local and remote, with
//! 8,000-byte fragments as in the paper and with 60,000-byte ones), raw UDP (where one
//! datagram holds the message), raw UDP cut into 60,000-byte fragments with no protocol (see
//! `send_fragments`) and TCP over loopback, measured in the same run. TCP is the
//! yardstick: the target is remote txcast at ≥ 0.8× TCP's throughput at 500 KB and 8 MB.
//!
//! The parent sends a message of the length and the partner sends it back; a round trip moves
//! twice the length. The echo is checked byte for byte outside the timed region.

use super::stats::{Report, Samples};
use super::{finish_child, parse_u64, spawn_child, EXIT_FAILED};
use crate::progress::Progress;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};
use txcast_port::{Engine, EngineConfig, EngineMode, Ldg, LdgConfig};
use txcast_proto::Address;

const INSTANCE: u16 = 41;
const WAIT: Duration = Duration::from_secs(30);
const LENGTHS: &[u64] = &[64, 512, 2048, 8192, 32_768, 500_000, 8_000_000];
/// Bytes each row moves one way, roughly (fewer round trips for longer messages).
const BYTES_PER_ROW: u64 = 48 << 20;

// The options of `txcast bench long` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
#[command(after_help = format!("cases: {}", CASES.join(" ")))]
pub struct Args {
    /// Message lengths in bytes (1 to 64 MiB each)
    #[arg(long, value_delimiter = ',', default_values_t = LENGTHS.to_vec(), value_parser = parse_u64)]
    pub bytes: Vec<u64>,
    /// The cases to measure (see below)
    #[arg(long, value_delimiter = ',', default_values_t = CASES.iter().map(|c| c.to_string()))]
    pub cases: Vec<String>,
    /// Round trips per row at most (fewer for longer messages)
    #[arg(long, default_value_t = 2000, value_parser = parse_u64)]
    pub iterations_max: u64,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

const CASES: &[&str] = &[
    "tcp",
    "raw-udp",
    "raw-udp-f60000",
    "raw-udp-f60000-spin",
    "txcast-local-f8000",
    "txcast-remote-f8000",
    "txcast-local-f60000",
    "txcast-remote-f60000",
];

fn message(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ (i >> 10) as u8)
        .collect()
}

/// Fewest round trips in a row: 8 MB rows were too short for a stable median at 8.
const ROUND_TRIPS_MIN: u64 = 40;

/// Round trips for a row of `len`-byte messages (after a tenth as many warm-up ones).
fn round_trips(len: u64, max: u64) -> u64 {
    (BYTES_PER_ROW / len.max(1)).clamp(ROUND_TRIPS_MIN, max.max(ROUND_TRIPS_MIN))
}

/// Fragment size of the `raw-udp-f60000` yardstick.
const RAW_FRAGMENT: usize = 60_000;

/// The floor of fragmenting over UDP, with nothing a protocol adds: `raw-udp-f60000` sends a
/// message as datagrams of an 8-byte header (index, count) and a 60,000-byte slice, one
/// blocking `sendmsg` each that gathers the slice from the message (no copy in user space),
/// and receives each with `recvmsg` straight into its slice of the message: one copy each
/// way, no checksum, no acknowledgement, no window. It counts on loopback's order and lack of
/// loss; a datagram out of place ends the row with an error.
fn send_fragments(sock: &UdpSocket, m: &[u8]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let count = m.len().div_ceil(RAW_FRAGMENT).max(1) as u32;
    for (i, slice) in m.chunks(RAW_FRAGMENT).enumerate() {
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&(i as u32).to_le_bytes());
        head[4..].copy_from_slice(&count.to_le_bytes());
        let mut iov = [
            libc::iovec {
                iov_base: head.as_mut_ptr() as *mut libc::c_void,
                iov_len: 8,
            },
            libc::iovec {
                iov_base: slice.as_ptr() as *mut libc::c_void,
                iov_len: slice.len(),
            },
        ];
        // SAFETY: plain old data, zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = 2;
        // SAFETY: `msg` points at `iov`, `head` and `slice`, all alive for the call; the
        // socket is connected.
        while unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) } < 0 {
            let e = io::Error::last_os_error();
            // A busy-polling socket (non-blocking) whose buffer is full: again.
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
            std::hint::spin_loop();
        }
    }
    Ok(())
}

/// Receives a message sent by [`send_fragments`] into `m` (its length known).
fn recv_fragments(sock: &UdpSocket, m: &mut [u8]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let count = m.len().div_ceil(RAW_FRAGMENT).max(1);
    for (i, slice) in m.chunks_mut(RAW_FRAGMENT).enumerate() {
        let mut head = [0u8; 8];
        let want = slice.len();
        let mut iov = [
            libc::iovec {
                iov_base: head.as_mut_ptr() as *mut libc::c_void,
                iov_len: 8,
            },
            libc::iovec {
                iov_base: slice.as_mut_ptr() as *mut libc::c_void,
                iov_len: want,
            },
        ];
        // SAFETY: plain old data, zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = 2;
        let started = Instant::now();
        let n = loop {
            // SAFETY: `msg` points at `iov`, `head` and `slice`, all alive for the call.
            let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
            if n >= 0 {
                break n;
            }
            let e = io::Error::last_os_error();
            // A busy-polling socket (non-blocking) with nothing yet: again, until `WAIT`.
            if e.kind() != io::ErrorKind::WouldBlock || started.elapsed() > WAIT {
                return Err(e);
            }
            std::hint::spin_loop();
        };
        let index = u32::from_le_bytes(head[..4].try_into().expect("4")) as usize;
        let total = u32::from_le_bytes(head[4..].try_into().expect("4")) as usize;
        if n as usize != 8 + want || index != i || total != count {
            return Err(io::Error::other("a fragment out of place"));
        }
    }
    Ok(())
}

fn ldg_config(fragment: usize) -> LdgConfig {
    LdgConfig {
        fragment_bytes: fragment,
        // 64 fragments of 60,000 bytes (3.8 MB) fit the sockets' buffers.
        window_fragments_max: if fragment > 10_000 { 64 } else { 256 },
        ..LdgConfig::default()
    }
}

/// Remote: no engine thread, the thread that waits reads the socket itself (one wake-up per
/// datagram, no hand-off); local: the engine thread has nothing to do.
fn open(a: Address, remote: bool, cfg: LdgConfig) -> io::Result<Ldg> {
    let mode = if remote {
        super::engine_mode()
    } else {
        EngineMode::Thread
    };
    let engine = Engine::start(EngineConfig {
        mode,
        ..EngineConfig::default()
    })?;
    Ldg::open_on(&engine, a, cfg).map_err(|e| io::Error::other(e.to_string()))
}

fn parse_case(case: &str) -> Option<(bool, usize)> {
    let (where_, fragment) = case.strip_prefix("txcast-")?.split_once("-f")?;
    let remote = match where_ {
        "local" => false,
        "remote" => true,
        _ => return None,
    };
    Some((remote, fragment.parse().ok()?))
}

/// Runs one case over every length with the partner in a second process; a row per length.
fn measure(
    case: &str,
    lengths: &[u64],
    max: u64,
    progress: &Progress,
) -> io::Result<Vec<(u64, Samples)>> {
    let lens: Vec<String> = lengths.iter().map(u64::to_string).collect();
    let mut args = vec!["long".to_string(), case.to_string(), max.to_string()];
    match case {
        "tcp" => {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            args.push(listener.local_addr()?.port().to_string());
            args.extend(lens);
            let mut child = spawn_child(&args)?;
            let r = (|| {
                let (mut s, _) = listener.accept()?;
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(WAIT))?;
                rows(lengths, max, progress, case, |m, back, _| {
                    s.write_all(m)?;
                    s.read_exact(back)
                })
            })();
            finish_child(&mut child, r, WAIT)
        }
        "raw-udp" | "raw-udp-f60000" | "raw-udp-f60000-spin" => {
            let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
            txcast_port::mmsg::size_buffers(&sock)?;
            sock.set_read_timeout(Some(WAIT))?;
            args.push(sock.local_addr()?.port().to_string());
            args.extend(lens);
            let mut child = spawn_child(&args)?;
            let fragmenting = case != "raw-udp";
            let r = (|| {
                let mut hello = [0u8; 8];
                let (_, peer) = sock.recv_from(&mut hello)?;
                sock.connect(peer)?;
                sock.set_nonblocking(case.ends_with("-spin"))?;
                rows(lengths, max, progress, case, |m, back, _| {
                    if fragmenting {
                        send_fragments(&sock, m)?;
                        return recv_fragments(&sock, back);
                    }
                    sock.send(m)?;
                    let n = sock.recv(back)?;
                    if n != back.len() {
                        return Err(io::Error::other("short datagram"));
                    }
                    Ok(())
                })
            })();
            finish_child(&mut child, r, WAIT)
        }
        other => {
            let (remote, fragment) = parse_case(other)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "unknown case"))?;
            let cfg = ldg_config(fragment);
            let me = Address::new(INSTANCE, 0, 1, 0);
            let peer = Address::new(INSTANCE, u16::from(remote), 2, 0);
            let mut l = open(me, remote, cfg)?;
            args.extend(lens);
            let mut child = spawn_child(&args)?;
            // By default the message is handed over as an owned buffer (`send_async`), staged
            // before the clock starts as an application builds its message, and the echo is
            // taken as the reassembled buffer: no copy the API does not need. With
            // TXCAST_BENCH_LONG_COPY set, the copying calls (`send(&[u8])`, a copy out).
            let copy = std::env::var_os("TXCAST_BENCH_LONG_COPY").is_some();
            let r = rows(lengths, max, progress, case, |m, back, start| {
                if copy {
                    l.send(peer, m, WAIT)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                } else {
                    let mut data = l.buffer(m.len());
                    data.copy_from_slice(m);
                    *start = Instant::now();
                    let id = l
                        .send_async(peer, data, WAIT)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                    l.wait(id, None)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                }
                let (from, got) = l
                    .recv(Some(WAIT))
                    .map_err(|e| io::Error::other(e.to_string()))?;
                if from != peer || got.len() != back.len() {
                    return Err(io::Error::other("a wrong echo"));
                }
                if copy {
                    back.copy_from_slice(&got);
                    l.recycle(got);
                } else {
                    // For the next message to reassemble into (no page faults on fresh memory).
                    let old = std::mem::replace(back, got);
                    l.recycle(old);
                }
                Ok(())
            });
            // Let the partner's last acknowledgements in, then its process go.
            let _ = l.serve(Duration::from_millis(100));
            if std::env::var_os("TXCAST_BENCH_VERBOSE").is_some() {
                let p = l.port_counters();
                eprintln!(
                    "    {other}: {:?}; port: ring full {}, too long {}, bad {}, misaddressed {}",
                    l.counters(),
                    p.dropped_ring_full,
                    p.dropped_too_long,
                    p.dropped_bad,
                    p.dropped_misaddressed
                );
            }
            finish_child(&mut child, r, WAIT)
        }
    }
}

/// Times `round_trip` at every length; checks every echo after the clock is read. The clock
/// starts before the call, or where the call restarts it (after staging its message).
fn rows(
    lengths: &[u64],
    max: u64,
    progress: &Progress,
    case: &str,
    mut round_trip: impl FnMut(&[u8], &mut Vec<u8>, &mut Instant) -> io::Result<()>,
) -> io::Result<Vec<(u64, Samples)>> {
    let mut out = Vec::new();
    for &len in lengths {
        progress.note(&format!("{case} {len} B"));
        let m = message(len as usize);
        let mut back = vec![0u8; len as usize];
        let n = round_trips(len, max);
        let mut s = Samples::with_capacity(n as usize);
        for i in 0..n + n / 10 {
            back.fill(0);
            let mut t = Instant::now();
            round_trip(&m, &mut back, &mut t)?;
            let e = t.elapsed();
            if back != m {
                return Err(io::Error::other(format!("echo of {len} bytes differs")));
            }
            if i >= n / 10 {
                s.record(e);
            }
        }
        out.push((len, s));
        progress.advance();
    }
    Ok(out)
}

/// `txcast __bench-child long <case> <max> [<port>] <lengths...>`: the echoing partner.
pub fn child(args: &[String]) -> io::Result<()> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "long <case> <max> [port] <lengths>",
        )
    };
    let [case, max, rest @ ..] = args else {
        return Err(bad());
    };
    let max: u64 = max.parse().map_err(|_| bad())?;
    let parse = |v: &[String]| -> io::Result<Vec<u64>> {
        v.iter().map(|s| s.parse().map_err(|_| bad())).collect()
    };
    match case.as_str() {
        "tcp" => {
            let [port, lens @ ..] = rest else {
                return Err(bad());
            };
            let port: u16 = port.parse().map_err(|_| bad())?;
            let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(WAIT))?;
            for len in parse(lens)? {
                let mut buf = vec![0u8; len as usize];
                let n = round_trips(len, max);
                for _ in 0..n + n / 10 {
                    s.read_exact(&mut buf)?;
                    s.write_all(&buf)?;
                }
            }
            Ok(())
        }
        "raw-udp" | "raw-udp-f60000" | "raw-udp-f60000-spin" => {
            let [port, lens @ ..] = rest else {
                return Err(bad());
            };
            let port: u16 = port.parse().map_err(|_| bad())?;
            let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
            txcast_port::mmsg::size_buffers(&sock)?;
            sock.set_read_timeout(Some(WAIT))?;
            sock.connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
            sock.send(b"hello")?;
            sock.set_nonblocking(case.ends_with("-spin"))?;
            let fragmenting = case != "raw-udp";
            let mut buf = vec![0u8; 65_536];
            for len in parse(lens)? {
                let n = round_trips(len, max);
                let mut m = vec![0u8; len as usize];
                for _ in 0..n + n / 10 {
                    if fragmenting {
                        recv_fragments(&sock, &mut m)?;
                        send_fragments(&sock, &m)?;
                        continue;
                    }
                    let k = sock.recv(&mut buf)?;
                    sock.send(&buf[..k])?;
                }
            }
            Ok(())
        }
        other => {
            let (remote, fragment) = parse_case(other).ok_or_else(bad)?;
            let me = Address::new(INSTANCE, u16::from(remote), 2, 0);
            let mut l = open(me, remote, ldg_config(fragment))?;
            for len in parse(rest)? {
                let n = round_trips(len, max);
                for _ in 0..n + n / 10 {
                    let (from, m) = l
                        .recv(Some(WAIT))
                        .map_err(|e| io::Error::other(e.to_string()))?;
                    if std::env::var_os("TXCAST_BENCH_LONG_COPY").is_some() {
                        l.send(from, &m, WAIT)
                            .map_err(|e| io::Error::other(e.to_string()))?;
                        l.recycle(m);
                        continue;
                    }
                    // Sent back as it came, not copied (its buffer is reused when done).
                    let id = l
                        .send_async(from, m, WAIT)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                    l.wait(id, None)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                }
            }
            let _ = l.serve(Duration::from_millis(100));
            Ok(())
        }
    }
}

pub fn run(opts: &Args) -> i32 {
    let usage = |message: String| crate::usage_error(&["bench", "long"], &message);
    if opts.bytes.iter().any(|&l| l == 0 || l > 64 << 20) {
        return usage("--bytes: each 1..=64 MiB".into());
    }
    if let Some(c) = opts.cases.iter().find(|c| !CASES.contains(&c.as_str())) {
        return usage(format!("--cases: unknown case {c:?}"));
    }
    let (lengths, cases) = (opts.bytes.clone(), opts.cases.clone());
    let max = opts.iterations_max.max(1);
    let mut report = Report::new("long", &["tcp"]);
    let mut failures = 0;
    // Raw UDP only where one datagram holds the message.
    let lens_of = |case: &str| -> Vec<u64> {
        if case == "raw-udp" {
            lengths.iter().copied().filter(|&l| l <= 65_507).collect()
        } else {
            lengths.clone()
        }
    };
    // One point per case and length.
    let total = cases.iter().map(|c| lens_of(c).len() as u64).sum();
    let progress = Progress::points("long", total);
    for case in &cases {
        let lens = lens_of(case);
        match measure(case, &lens, max, &progress) {
            Ok(rows) => {
                for (len, mut s) in rows {
                    if let Some(s) = s.summary() {
                        progress.println(&format!(
                            "  {case} {len:>8} B: p50 {:.1} µs, {:.0} MB/s",
                            s.p50_ns as f64 / 1e3,
                            2.0 * len as f64 / s.p50_ns as f64 * 1e3
                        ));
                        report.push_latency(case, len, s);
                    }
                }
            }
            Err(e) => {
                progress.println(&format!("  {case} FAILED: {e}"));
                failures += 1;
            }
        }
    }
    progress.finish();
    let heading = "long: round trips by length between two processes (latencies in µs); \
         p50/A < 1 is faster than TCP; throughput = 2 × length / p50\n";
    let mut table = report.table();
    table.push_str("throughput at p50, MB/s (and against TCP):\n");
    for &len in &lengths {
        let p50 = |case: &str| {
            report
                .rows
                .iter()
                .find(|r| r.case == case && r.bytes == len)
                .and_then(|r| r.latency())
                .map(|s| s.p50_ns)
        };
        let tcp = p50("tcp");
        let mut line = format!("  {len:>8} B:");
        for case in &cases {
            if let Some(ns) = p50(case) {
                let mbs = 2.0 * len as f64 / ns as f64 * 1e3;
                match tcp {
                    Some(t) => {
                        line.push_str(&format!("  {case} {mbs:.0} ({:.2}×)", t as f64 / ns as f64))
                    }
                    None => line.push_str(&format!("  {case} {mbs:.0}")),
                }
            }
        }
        table.push_str(&line);
        table.push('\n');
    }
    if opts.json {
        eprint!("{heading}{table}");
        print!("{}", report.json_lines());
    } else {
        print!("{heading}{table}");
    }
    if failures > 0 {
        EXIT_FAILED
    } else {
        0
    }
}
