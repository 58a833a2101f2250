//! The sending side of each method: one call sends one message to every destination.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{sites, Method, Receivers};
use txcast_port::{
    ClusterConfig, Engine, EngineConfig, EngineMode, IdleStrategy, Port, PortConfig, PortError,
};
use txcast_proto::Address;

/// One way of sending a message to the row's destinations.
pub trait Sender {
    /// Sends `message` to every destination; returns how many it was handed to.
    fn send(&mut self, message: &[u8]) -> io::Result<usize>;

    /// Waits (untimed) until the sender is in the state every timed call starts from.
    fn settle(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Opens the sender of `method` for `dests` destinations (sites 1..=dests).
pub fn open(method: Method, dests: usize) -> io::Result<Box<dyn Sender>> {
    let cluster = ClusterConfig::default();
    let to = sites(dests)
        .into_iter()
        .map(|site| cluster.socket_addr(method.receiver_address(site)))
        .collect::<Result<Vec<SocketAddr>, _>>()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    Ok(match method {
        Method::NaiveSendto => Box::new(NaiveLoop {
            socket: raw_socket()?,
            to,
        }),
        Method::SendmmsgInline => Box::new(Sendmmsg {
            socket: raw_socket()?,
            to,
        }),
        Method::TxcastFanout | Method::TxcastFanoutPark | Method::IpMulticast => {
            Box::new(TxcastSender::open(method, dests)?)
        }
    })
}

/// The raw methods send from an ephemeral port on the first loopback address.
fn raw_socket() -> io::Result<UdpSocket> {
    UdpSocket::bind(("127.0.0.1", 0))
}

/// The user-level simulated multicast: one `sendto` per destination.
struct NaiveLoop {
    socket: UdpSocket,
    to: Vec<SocketAddr>,
}

impl Sender for NaiveLoop {
    fn send(&mut self, message: &[u8]) -> io::Result<usize> {
        for to in &self.to {
            self.socket.send_to(message, to)?;
        }
        Ok(self.to.len())
    }
}

/// One batched system call from the caller's thread.
struct Sendmmsg {
    socket: UdpSocket,
    to: Vec<SocketAddr>,
}

impl Sender for Sendmmsg {
    fn send(&mut self, message: &[u8]) -> io::Result<usize> {
        txcast_port::mmsg::send_same_to_many(&self.socket, message, &self.to)
    }
}

/// `Port::multicast` on a port of its own engine (engine thread mode).
struct TxcastSender {
    engine: Engine,
    port: Option<Port>,
    template: Address,
    sites: Vec<u16>,
    /// `/proc/self/task/<tid>/stat` of the engine thread.
    engine_stat: PathBuf,
    stat_text: String,
}

impl TxcastSender {
    fn open(method: Method, dests: usize) -> io::Result<TxcastSender> {
        let Receivers::Ports { ip_multicast } = method.receivers() else {
            unreachable!("a txcast method has txcast receivers");
        };
        let mut cluster = ClusterConfig::default();
        cluster.multicast.enabled = ip_multicast;
        let defaults = EngineConfig::default();
        let idle_spin = match method {
            Method::TxcastFanoutPark => Duration::ZERO,
            _ => defaults.idle_spin,
        };
        let engine = Engine::start(EngineConfig {
            cluster,
            mode: EngineMode::Thread,
            idle_spin,
            ..defaults
        })?;
        let config = PortConfig {
            idle: IdleStrategy::Park,
            ..PortConfig::default()
        };
        let port = match Port::open_on(&engine, method.sender_address(), config) {
            Ok(port) => port,
            Err(e) => {
                engine.shutdown();
                return Err(port_error(e));
            }
        };
        let engine_stat = match find_engine_thread() {
            Ok(path) => path,
            Err(e) => {
                drop(port);
                engine.shutdown();
                return Err(e);
            }
        };
        Ok(TxcastSender {
            engine,
            port: Some(port),
            template: method.receiver_address(1),
            sites: sites(dests),
            engine_stat,
            stat_text: String::with_capacity(512),
        })
    }

    /// Whether the engine thread sleeps (state `S`: parked in `ppoll`).
    fn engine_sleeps(&mut self) -> io::Result<bool> {
        use std::io::Read;
        self.stat_text.clear();
        std::fs::File::open(&self.engine_stat)?.read_to_string(&mut self.stat_text)?;
        Ok(thread_state(&self.stat_text) == Some('S'))
    }
}

/// Name the engine gives its thread.
const ENGINE_THREAD_NAME: &str = "txcast-engine";

/// The `stat` file of this process's one engine thread (the sender's), waiting briefly for the
/// new thread to take its name.
fn find_engine_thread() -> io::Result<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc/self/task")? {
            let dir = entry?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.trim_end() == ENGINE_THREAD_NAME {
                found.push(dir.join("stat"));
            }
        }
        match found.len() {
            1 => return Ok(found.remove(0)),
            0 if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            n => {
                return Err(io::Error::other(format!(
                    "{n} threads named {ENGINE_THREAD_NAME} in the sending process, not 1"
                )))
            }
        }
    }
}

/// The state letter of a `/proc/.../stat` line (the field after the parenthesised name).
pub fn thread_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

impl Sender for TxcastSender {
    fn send(&mut self, message: &[u8]) -> io::Result<usize> {
        self.port
            .as_mut()
            .expect("open until dropped")
            .multicast(super::TXN, self.template, &self.sites, message)
            .map_err(port_error)
    }

    /// Every call starts with the engine thread parked, as between spaced multicasts: it
    /// spins `idle_spin` after its last work, yields, then sleeps in `ppoll`; the call then
    /// pays the wake-up. (A call that finds it still awake skips the wake-up.)
    fn settle(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while !self.engine_sleeps()? {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the engine thread did not park within {SETTLE_TIMEOUT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_micros(10));
        }
        Ok(())
    }
}

/// How long [`Sender::settle`] waits for the engine thread to park.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

impl Drop for TxcastSender {
    fn drop(&mut self) {
        self.port = None;
        self.engine.shutdown();
    }
}

pub fn port_error(e: PortError) -> io::Error {
    match e {
        PortError::Io(e) => e,
        PortError::Timeout => io::Error::new(io::ErrorKind::TimedOut, "txcast: timed out"),
        e => io::Error::other(format!("txcast: {e}")),
    }
}
