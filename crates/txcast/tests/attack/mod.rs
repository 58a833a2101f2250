//! What the attacker tests share: raw sockets to capture packets on loopback and to send
//! packets with another socket's source address, and the packet surgery (re-sealing the
//! checksum after a change). Needs root (raw sockets); `raw_available` says whether we have it.

#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use txcast_port::Refusals;
use txcast_proto::wire::{
    ClusterKey, Kind, PacketHeader, PacketKey, PacketWriter, FLAG_MAC, MAC_BYTES,
};
use txcast_proto::Address;

/// The attacked clusters' id and key (the tests' configurations name them).
pub const CLUSTER: u16 = 23;
pub const PASSPHRASE: &str = "issue 23 attacker";

/// One UDP datagram seen on the wire.
#[derive(Clone, Debug)]
pub struct Captured {
    pub from: SocketAddrV4,
    pub to: SocketAddrV4,
    pub payload: Vec<u8>,
}

fn last_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// A raw socket of `protocol` (closed on drop).
struct Raw(i32);

impl Raw {
    fn new(protocol: i32) -> Result<Raw, String> {
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, protocol) };
        if fd < 0 {
            return Err(last_error("raw socket"));
        }
        Ok(Raw(fd))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns.
        unsafe { libc::close(self.0) };
    }
}

/// Whether this process may open raw sockets (root, or CAP_NET_RAW).
pub fn raw_available() -> bool {
    Raw::new(libc::IPPROTO_RAW).is_ok()
}

/// Copies every UDP datagram delivered on this host (a raw socket of protocol UDP sees each
/// one once) that `keep` selects, until stopped.
pub struct Sniffer {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Captured>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sniffer {
    pub fn start(keep: impl Fn(&Captured) -> bool + Send + 'static) -> Result<Sniffer, String> {
        let raw = Raw::new(libc::IPPROTO_UDP)?;
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 20_000,
        };
        let big: libc::c_int = 8 << 20;
        // SAFETY: setsockopt on our descriptor with values of the sizes given.
        unsafe {
            libc::setsockopt(
                raw.0,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            );
            libc::setsockopt(
                raw.0,
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &big as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, v) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            // The socket itself moves in (not only its descriptor), so it lives as long.
            let raw = raw;
            let mut buf = vec![0u8; 65536];
            while !s.load(Ordering::SeqCst) {
                // SAFETY: reads into our buffer of its length.
                let n = unsafe {
                    libc::recv(raw.0, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0)
                };
                if n <= 0 {
                    continue;
                }
                if let Some(c) = parse_ipv4_udp(&buf[..n as usize]) {
                    if keep(&c) {
                        v.lock().unwrap().push(c);
                    }
                }
            }
        });
        Ok(Sniffer {
            stop,
            seen,
            thread: Some(thread),
        })
    }

    /// Stops capturing; what was captured, in order.
    pub fn finish(mut self) -> Vec<Captured> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

fn parse_ipv4_udp(b: &[u8]) -> Option<Captured> {
    if b.len() < 20 || b[0] >> 4 != 4 || b[9] != 17 {
        return None;
    }
    let ihl = (b[0] & 0xf) as usize * 4;
    let udp = b.get(ihl..ihl + 8)?;
    let ip = |o: usize| Ipv4Addr::new(b[o], b[o + 1], b[o + 2], b[o + 3]);
    let port = |o: usize| u16::from_be_bytes([udp[o], udp[o + 1]]);
    let len = port(4) as usize;
    let payload = b.get(ihl + 8..ihl + len.max(8))?.to_vec();
    Some(Captured {
        from: SocketAddrV4::new(ip(12), port(0)),
        to: SocketAddrV4::new(ip(16), port(2)),
        payload,
    })
}

/// Sends UDP datagrams with any source address (IP_HDRINCL).
pub struct Spoofer(Raw);

impl Spoofer {
    pub fn new() -> Result<Spoofer, String> {
        Ok(Spoofer(Raw::new(libc::IPPROTO_RAW)?))
    }

    /// Sends `payload` as a UDP datagram from `from` to `to` (UDP checksum 0: none, which
    /// IPv4 allows; the kernel fills in the IP checksum and identification).
    pub fn send(&self, from: SocketAddrV4, to: SocketAddrV4, payload: &[u8]) -> Result<(), String> {
        let total = 28 + payload.len();
        let mut p = Vec::with_capacity(total);
        p.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            17,
        ]);
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&from.ip().octets());
        p.extend_from_slice(&to.ip().octets());
        p.extend_from_slice(&from.port().to_be_bytes());
        p.extend_from_slice(&to.port().to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(to.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: sends our buffer to a valid sockaddr_in of the size given.
        let n = unsafe {
            libc::sendto(
                (self.0).0,
                p.as_ptr() as *const libc::c_void,
                p.len(),
                0,
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        if n as usize != p.len() {
            return Err(last_error("raw send"));
        }
        Ok(())
    }
}

pub fn v4(s: SocketAddr) -> SocketAddrV4 {
    match s {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => panic!("IPv4 expected"),
    }
}

/// CRC-32 (IEEE, reflected), bit by bit: the checksum txcast's header carries.
pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut c = !0u32;
    for part in parts {
        for &b in *part {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0xEDB8_8320
                } else {
                    c >> 1
                };
            }
        }
    }
    !c
}

/// Writes the packet's length field and checksum for its bytes as they are now.
pub fn reseal(p: &mut [u8]) {
    let len = p.len() as u16;
    p[32..34].copy_from_slice(&len.to_le_bytes());
    let sum = crc32(&[&p[..36], &p[40..]]);
    p[36..40].copy_from_slice(&sum.to_le_bytes());
}

/// A small seeded generator (xorshift64*), so a failing run can be repeated.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Sends `packets` from `sock` to `to`, a few at a time so the receiver's socket buffer does
/// not overflow (a kernel drop would make the counts disagree).
pub fn send_paced(sock: &std::net::UdpSocket, to: SocketAddr, packets: &[Vec<u8>]) {
    for (i, p) in packets.iter().enumerate() {
        sock.send_to(p, to).expect("attacker send");
        if p.len() > 4096 {
            // Three of these fill a default socket buffer: let the receiver read it first.
            std::thread::sleep(Duration::from_millis(10));
        } else if i % 16 == 15 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The garbage of every kind, built from one captured valid packet `p`, with the refusal
/// each must be counted under.
pub fn garbage(p: &[u8], rng: &mut Rng) -> (Vec<Vec<u8>>, Refusals) {
    let mut out = Vec::new();
    let mut want = Refusals::default();
    // Random datagrams (0 to 1,500 bytes; the first byte is never the magic's, so each one is
    // malformed whatever follows).
    for _ in 0..400 {
        let len = rng.below(1501) as usize;
        let mut d: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if let Some(b) = d.first_mut() {
            if *b == 0x54 {
                *b = 0;
            }
        }
        out.push(d);
        want.malformed += 1;
    }
    // Truncated: every cut of the captured packet (shorter than a header, or shorter than its
    // length field says).
    for cut in 0..p.len() {
        out.push(p[..cut].to_vec());
        want.malformed += 1;
    }
    // Oversized: bytes past the length field, up to the largest UDP datagram.
    for extra in [1usize, 100, 65_507 - p.len()] {
        let mut d = p.to_vec();
        d.resize(p.len() + extra, 0xAA);
        out.push(d);
        want.malformed += 1;
    }
    // Oversized with its length and checksum made to match: only the MAC can tell.
    let mut d = p.to_vec();
    d.resize(60_000, 0xAA);
    reseal(&mut d);
    out.push(d);
    want.mac_mismatch += 1;
    // A byte of the body changed, checksum left: the checksum says so.
    let mut d = p.to_vec();
    d[45] ^= 1;
    out.push(d);
    want.checksum += 1;
    // A byte of the body changed and the checksum recomputed: the MAC says so.
    let mut d = p.to_vec();
    d[45] ^= 1;
    reseal(&mut d);
    out.push(d);
    want.mac_mismatch += 1;
    // A MAC byte changed.
    let mut d = p.to_vec();
    let last = d.len() - 1;
    d[last] ^= 0x80;
    reseal(&mut d);
    out.push(d);
    want.mac_mismatch += 1;
    // The MAC taken off, its flag cleared, the rest made consistent.
    let mut d = p[..p.len() - MAC_BYTES].to_vec();
    d[4] &= !FLAG_MAC;
    reseal(&mut d);
    out.push(d);
    want.mac_missing += 1;
    // The cluster field changed.
    let mut d = p.to_vec();
    d[6] ^= 1;
    reseal(&mut d);
    out.push(d);
    want.wrong_cluster += 1;
    // Built by txcast's own encoder: another cluster with our key and with another key,
    // ours with another key, ours unsigned, ours under a key id we do not hold, and ours
    // sealed (encrypted) under our key id where our key only MACs.
    let key = |pass: &str, id: u8, seal: bool| {
        PacketKey::new(id, ClusterKey::from_passphrase(pass), seal)
    };
    let ours = key(PASSPHRASE, 0, false);
    let theirs = key("another cluster", 0, false);
    let unknown_id = key(PASSPHRASE, 7, false);
    let sealed = key(PASSPHRASE, 0, true);
    let h = PacketHeader {
        kind: Kind::Datagram,
        flags: 0,
        cluster: CLUSTER,
        incarnation: 1,
        source: Address::new(1, 0, 1, 0),
        destination: Address::new(1, 1, 1, 0),
    };
    for (cluster, key, reason) in [
        (CLUSTER + 1, Some(&ours), 0),
        (CLUSTER + 1, Some(&theirs), 0),
        (CLUSTER, Some(&theirs), 1),
        (CLUSTER, None, 2),
        (CLUSTER, Some(&unknown_id), 3),
        (CLUSTER, Some(&sealed), 4),
    ] {
        let mut buf = vec![0u8; 256];
        let mut w = PacketWriter::datagram(&mut buf, PacketHeader { cluster, ..h }, key);
        assert!(w.push(b"forged"));
        let n = w.finish();
        out.push(buf[..n].to_vec());
        match reason {
            0 => want.wrong_cluster += 1,
            1 => want.mac_mismatch += 1,
            2 => want.mac_missing += 1,
            3 => want.unknown_key += 1,
            _ => want.wrong_mode += 1,
        }
    }
    (out, want)
}

/// Starts `txcast __rpc-server` of `instance` at `site` on the cluster file `config` and waits
/// for its `ready` line: the child and its stdout.
pub fn spawn_rpc_server(
    instance: u16,
    site: u16,
    config: &std::path::Path,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["__rpc-server", "--instance", &instance.to_string()])
        .args(["--site", &site.to_string(), "--config"])
        .arg(config)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready line");
    assert_eq!(line.trim(), "ready");
    (child, out)
}
