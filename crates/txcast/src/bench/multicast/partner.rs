//! The partner process: holds every receiver of a row, checks each message byte for byte, and
//! after each call reports on stdout (a little-endian u32) how many receivers got it.
//!
//! `txcast __bench-child multicast <method> <dests> <bytes> <calls> <cpus>` (`cpus`: a comma
//! list the partner pins itself to before opening anything, or `-`). First word on stdout: the
//! number of receivers open (and joined); then one word per call. Nothing here spins: raw
//! sockets are read with blocking calls, and txcast ports live on one engine that parks at once
//! when idle, read by ports that park too.

use std::io::{self, Write};
use std::net::UdpSocket;
use std::time::Duration;

use super::sender::port_error;
use super::{fill_message, seq_of, sites, stamp, Method, Receivers, LOSS_WAIT, TXN};
use txcast_port::{
    ClusterConfig, Engine, EngineConfig, EngineMode, IdleStrategy, Port, PortConfig, PortError,
};

/// `txcast __bench-child multicast <method> <dests> <bytes> <calls> <cpus>`.
pub fn serve(args: &[String]) -> io::Result<()> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    let [method, dests, bytes, calls, cpus] = args else {
        return Err(invalid(
            "usage: multicast <method> <dests> <bytes> <calls> <cpus>",
        ));
    };
    let cpus = super::parse_cpus(cpus).ok_or_else(|| invalid("bad CPU list"))?;
    if !cpus.is_empty() {
        // Before the engine thread starts, so it inherits the placement.
        super::cpu::pin_thread(&cpus)?;
    }
    let method = Method::from_name(method).ok_or_else(|| invalid("unknown method"))?;
    let dests: usize = dests
        .parse()
        .map_err(|_| invalid("bad destination count"))?;
    let bytes: usize = bytes.parse().map_err(|_| invalid("bad byte count"))?;
    let calls: u64 = calls.parse().map_err(|_| invalid("bad call count"))?;
    if !(super::MESSAGE_BYTES_MIN..=super::MESSAGE_BYTES_MAX).contains(&bytes)
        || !(1..=super::DESTS_MAX as usize).contains(&dests)
    {
        return Err(invalid("size or destination count out of range"));
    }
    let mut out = io::stdout().lock();
    let mut expected = vec![0u8; bytes];
    fill_message(&mut expected, 0);
    match method.receivers() {
        Receivers::Raw => {
            let mut receivers = RawReceivers::open(method, dests)?;
            report(&mut out, dests as u32)?;
            for seq in 0..calls {
                stamp(&mut expected, seq);
                let got = receivers.receive(seq, &expected)?;
                report(&mut out, got)?;
            }
        }
        Receivers::Ports { ip_multicast } => {
            let mut receivers = PortReceivers::open(method, dests, ip_multicast)?;
            report(&mut out, dests as u32)?;
            for seq in 0..calls {
                stamp(&mut expected, seq);
                let got = receivers.receive(seq, &expected)?;
                report(&mut out, got)?;
            }
        }
    }
    Ok(())
}

fn report(out: &mut impl Write, word: u32) -> io::Result<()> {
    out.write_all(&word.to_le_bytes())?;
    out.flush()
}

/// What one receiver made of one received message.
enum Check {
    /// The message of this call, intact.
    Good,
    /// An earlier call's message that arrived late: skip it.
    Stale,
}

fn check(seq: u64, message: &[u8], expected: &[u8]) -> io::Result<Check> {
    match seq_of(message) {
        Some(s) if s < seq => Ok(Check::Stale),
        Some(s) if s == seq && message == expected => Ok(Check::Good),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "call {seq}: received {} bytes that are not the message sent ({} bytes)",
                message.len(),
                expected.len()
            ),
        )),
    }
}

/// Plain UDP sockets at the receivers' addresses, read with blocking calls.
struct RawReceivers {
    sockets: Vec<UdpSocket>,
    buffer: Vec<u8>,
}

impl RawReceivers {
    fn open(method: Method, dests: usize) -> io::Result<RawReceivers> {
        let cluster = ClusterConfig::default();
        let mut sockets = Vec::with_capacity(dests);
        for site in sites(dests) {
            let at = cluster
                .socket_addr(method.receiver_address(site))
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            let socket = UdpSocket::bind(at)?;
            socket.set_read_timeout(Some(LOSS_WAIT))?;
            sockets.push(socket);
        }
        Ok(RawReceivers {
            sockets,
            buffer: vec![0u8; super::MESSAGE_BYTES_MAX + 1],
        })
    }

    /// How many sockets got call `seq`'s message (each waits up to [`LOSS_WAIT`]).
    fn receive(&mut self, seq: u64, expected: &[u8]) -> io::Result<u32> {
        let mut got = 0;
        for socket in &self.sockets {
            loop {
                let n = match socket.recv(&mut self.buffer) {
                    Ok(n) => n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        break;
                    }
                    Err(e) => return Err(e),
                };
                match check(seq, &self.buffer[..n], expected)? {
                    Check::Good => {
                        got += 1;
                        break;
                    }
                    Check::Stale => {}
                }
            }
        }
        Ok(got)
    }
}

/// txcast ports at the receivers' addresses that joined [`TXN`], on one engine.
struct PortReceivers {
    engine: Engine,
    ports: Vec<Port>,
    buffer: Vec<u8>,
}

impl PortReceivers {
    fn open(method: Method, dests: usize, ip_multicast: bool) -> io::Result<PortReceivers> {
        let mut cluster = ClusterConfig::default();
        cluster.multicast.enabled = ip_multicast;
        let engine = Engine::start(EngineConfig {
            cluster,
            mode: EngineMode::Thread,
            idle_spin: Duration::ZERO,
            ..EngineConfig::default()
        })?;
        let mut receivers = PortReceivers {
            engine,
            ports: Vec::with_capacity(dests),
            buffer: vec![0u8; super::MESSAGE_BYTES_MAX + 1],
        };
        let config = PortConfig {
            idle: IdleStrategy::Park,
            ..PortConfig::default()
        };
        for site in sites(dests) {
            let mut port = Port::open_on(&receivers.engine, method.receiver_address(site), config)
                .map_err(port_error)?;
            port.join_txn(TXN).map_err(port_error)?;
            receivers.ports.push(port);
        }
        Ok(receivers)
    }

    /// How many ports got call `seq`'s message (each waits up to [`LOSS_WAIT`]).
    fn receive(&mut self, seq: u64, expected: &[u8]) -> io::Result<u32> {
        let mut got = 0;
        for port in &mut self.ports {
            loop {
                let r = match port.recv_timeout(&mut self.buffer, Some(LOSS_WAIT)) {
                    Ok(r) => r,
                    Err(PortError::Timeout) => break,
                    Err(e) => return Err(port_error(e)),
                };
                if r.txn != Some(TXN) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("call {seq}: a message of transaction {:?}", r.txn),
                    ));
                }
                match check(seq, &self.buffer[..r.len], expected)? {
                    Check::Good => {
                        got += 1;
                        break;
                    }
                    Check::Stale => {}
                }
            }
        }
        Ok(got)
    }
}

impl Drop for PortReceivers {
    fn drop(&mut self) {
        self.ports.clear();
        self.engine.shutdown();
    }
}
