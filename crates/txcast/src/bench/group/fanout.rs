//! `raw-udp-fanout-nN`: the communication pattern of a group send with PB, in raw UDP and
//! nothing else, as a second yardstick for the delay experiment.
//!
//! The parent (the sender) sends a datagram to a relay process (the sequencer's place); the
//! relay sends it on with one `sendmmsg` to the parent first and then to `n - 2` receiver
//! processes (the other members); the parent's round trip ends when its copy arrives. Every
//! process blocks in `recv`, as the group's members park. No protocol runs: the difference
//! between this and the two-process round trip is what the pattern itself costs on this
//! machine (a third process woken per message, a second datagram per send), and the
//! difference between the group and this is what txcast adds.
//!
//! Rendezvous: the parent binds a socket and starts the receivers, each of which binds its own
//! and sends a hello to the parent; then the relay, given the receivers' ports, does the same.
//! A datagram starting with [`QUIT`] ends the relay and, relayed, the receivers.

use super::super::stats::Samples;
use super::super::{finish_child, kill_child, spawn_child};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Child;
use std::time::{Duration, Instant};

const HELLO: &[u8] = b"txcast-fanout-hello";
const QUIT: &[u8] = b"txcast-fanout-quit";
/// How long any side waits for a datagram before deciding the others are gone.
const WAIT_MAX: Duration = Duration::from_secs(10);
/// Receivers beyond the relay and the parent (a group of 16 has 14).
const RECEIVERS_MAX: usize = 62;

fn bind() -> io::Result<UdpSocket> {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    s.set_read_timeout(Some(WAIT_MAX))?;
    Ok(s)
}

fn local_port(s: &UdpSocket) -> io::Result<u16> {
    Ok(s.local_addr()?.port())
}

/// Round trips of `bytes`-byte datagrams through a relay that fans out to the parent and
/// `size - 2` other processes (`size` ≥ 2).
pub fn measure(size: usize, bytes: usize, warmup: u64, iterations: u64) -> io::Result<Samples> {
    let receivers = size.saturating_sub(2);
    if receivers > RECEIVERS_MAX {
        return Err(io::Error::other(format!(
            "raw fan-out: at most {} members",
            RECEIVERS_MAX + 2
        )));
    }
    let socket = bind()?;
    let port = local_port(&socket)?.to_string();
    let mut children = Children(Vec::new());
    let mut hello = [0u8; 64];
    let mut receiver_ports = Vec::new();
    for _ in 0..receivers {
        children.0.push(spawn_child(&[
            "group".into(),
            "fanout-receiver".into(),
            port.clone(),
        ])?);
        let (n, from) = socket.recv_from(&mut hello)?;
        if &hello[..n] != HELLO {
            return Err(io::Error::other("raw fan-out: bad hello from a receiver"));
        }
        receiver_ports.push(from.port().to_string());
    }
    let mut args = vec!["group".into(), "fanout-relay".into(), port];
    args.extend(receiver_ports);
    children.0.push(spawn_child(&args)?);
    let (n, relay) = socket.recv_from(&mut hello)?;
    if &hello[..n] != HELLO {
        return Err(io::Error::other("raw fan-out: bad hello from the relay"));
    }
    socket.connect(relay)?;
    let outcome = time_round_trips(&socket, bytes.max(QUIT.len() + 1), warmup, iterations);
    let quit = socket.send(QUIT);
    let mut result = outcome.and_then(|s| quit.map(|_| s));
    for c in &mut children.0 {
        result = finish_child(c, result, Duration::from_secs(10));
    }
    children.0.clear();
    result
}

fn time_round_trips(
    socket: &UdpSocket,
    bytes: usize,
    warmup: u64,
    iterations: u64,
) -> io::Result<Samples> {
    let message: Vec<u8> = (0..bytes).map(|i| b'a' + (i % 26) as u8).collect();
    let mut reply = vec![0u8; bytes + 1];
    let mut samples = Samples::with_capacity(iterations as usize);
    for i in 0..warmup + iterations {
        let t = Instant::now();
        socket.send(&message)?;
        let n = socket.recv(&mut reply)?;
        let elapsed = t.elapsed();
        if reply[..n] != message[..] {
            return Err(io::Error::other("raw fan-out: the relayed copy differs"));
        }
        if i >= warmup {
            samples.record(elapsed);
        }
    }
    Ok(samples)
}

/// Kills children left running when the measurement fails half-way.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            kill_child(c);
        }
    }
}

fn port_arg(s: &str) -> io::Result<SocketAddr> {
    s.parse::<u16>()
        .map(|p| SocketAddr::from((Ipv4Addr::LOCALHOST, p)))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("port {s:?}")))
}

/// `fanout-receiver <parent port>`: takes relayed datagrams until QUIT.
pub fn receiver(args: &[String]) -> io::Result<()> {
    let [parent] = args else {
        return Err(io::Error::other("fanout-receiver <parent port>"));
    };
    let socket = bind()?;
    socket.send_to(HELLO, port_arg(parent)?)?;
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = socket.recv(&mut buf)?;
        if &buf[..n] == QUIT {
            return Ok(());
        }
    }
}

/// `fanout-relay <parent port> <receiver port>...`: sends every datagram from the parent on
/// to the parent and the receivers in one `sendmmsg`, until QUIT (which goes to the receivers).
pub fn relay(args: &[String]) -> io::Result<()> {
    let Some((parent, others)) = args.split_first() else {
        return Err(io::Error::other(
            "fanout-relay <parent port> <receiver port>...",
        ));
    };
    let parent = port_arg(parent)?;
    let mut to = vec![parent];
    for p in others {
        to.push(port_arg(p)?);
    }
    let socket = bind()?;
    socket.send_to(HELLO, parent)?;
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, from) = socket.recv_from(&mut buf)?;
        if from != parent {
            continue;
        }
        if &buf[..n] == QUIT {
            txcast_port::mmsg::send_same_to_many(&socket, &buf[..n], &to[1..])?;
            return Ok(());
        }
        txcast_port::mmsg::send_same_to_many(&socket, &buf[..n], &to)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_arguments_are_checked() {
        assert_eq!(port_arg("4000").unwrap().port(), 4000);
        assert!(port_arg("x").is_err());
        assert!(port_arg("70000").is_err());
        assert!(relay(&[]).is_err());
        assert!(receiver(&[]).is_err());
    }
}
