//! txcast's own ports as `bench rtt` cases: local (shared-memory ring, across processes) and
//! remote (UDP over loopback through the reliable link), each spinning and parked.
//!
//! Rendezvous: the parent opens its port at `(instance, site 0, type 1, 0)` and passes the
//! instance; the partner opens `(instance, site, type 2, 0)` — site 0 for local, site 1 (another
//! loopback address, so another "host") for remote — and sends a hello.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{Echo, Listener, PingPong, PARTNER_TIMEOUT};
use txcast_port::{Engine, EngineConfig, EngineMode, IdleStrategy, Port, PortConfig, PortError};
use txcast_proto::Address;

/// Instance numbers the bench uses, away from the demo's and the tests'.
const INSTANCE_BASE: u16 = 40;

/// Receive slots of a port unless `--slot-count` says otherwise: the port default.
pub fn slot_count_default() -> u32 {
    PortConfig::default().slot_count
}

/// Receive slots of the ports the parent opens from here on (`--slot-count`; 0: the
/// default); the partner gets the count in its rendezvous words.
static SLOT_COUNT: AtomicU32 = AtomicU32::new(0);

/// Sets the receive slot count of the txcast cases' ports.
pub fn set_slot_count(n: u32) {
    SLOT_COUNT.store(n, Ordering::Relaxed);
}

fn slot_count() -> u32 {
    match SLOT_COUNT.load(Ordering::Relaxed) {
        0 => slot_count_default(),
        n => n,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mode {
    remote: bool,
    spin: bool,
    slot_count: u32,
}

impl Mode {
    fn engine(self) -> io::Result<Engine> {
        // Remote: the application thread is the engine (invoker): spinning, it busy-polls the
        // socket; parked, it sleeps in poll(2) on the socket, one wake-up per message as with a
        // blocking UDP socket. Local: the engine thread has nothing to do and parks.
        let mode = if self.remote {
            EngineMode::Invoker
        } else {
            EngineMode::Thread
        };
        Engine::start(EngineConfig {
            mode,
            cluster: crate::bench::bench_cluster(),
            ..EngineConfig::default()
        })
    }

    fn port_config(self) -> PortConfig {
        PortConfig {
            idle: if self.spin {
                IdleStrategy::Spin
            } else {
                IdleStrategy::Park
            },
            slot_count: self.slot_count,
            ..PortConfig::default()
        }
    }

    fn instance(self) -> u16 {
        INSTANCE_BASE + u16::from(self.remote) * 2 + u16::from(self.spin)
    }
}

fn io_err(e: PortError) -> io::Error {
    match e {
        PortError::Io(e) => e,
        PortError::Timeout => io::Error::new(io::ErrorKind::TimedOut, "txcast: timed out"),
        e => io::Error::other(e.to_string()),
    }
}

struct TxcastListener {
    mode: Mode,
    engine: Engine,
    port: Port,
}

struct TxcastEnd {
    engine: Engine,
    port: Option<Port>,
    peer: Address,
    buffer: Vec<u8>,
}

impl Drop for TxcastEnd {
    fn drop(&mut self) {
        // Let the last message be acknowledged, and send the acknowledgement owed for the last
        // one received (without it the partner would wait out its own flush), then stop the
        // engine thread. A partner already gone leaves the flush to time out; that is fine.
        if let Some(p) = self.port.as_mut() {
            let _ = p.flush(Duration::from_millis(500));
        }
        self.port = None;
        self.engine.shutdown();
    }
}

fn listen(mode: Mode) -> io::Result<Box<dyn Listener>> {
    let engine = mode.engine()?;
    let port = Port::open_on(
        &engine,
        Address::new(mode.instance(), 0, 1, 0),
        mode.port_config(),
    )
    .map_err(io_err)?;
    Ok(Box::new(TxcastListener { mode, engine, port }))
}

pub fn listen_local_spin(_bytes: usize) -> io::Result<Box<dyn Listener>> {
    listen(Mode {
        remote: false,
        spin: true,
        slot_count: slot_count(),
    })
}
pub fn listen_local_park(_bytes: usize) -> io::Result<Box<dyn Listener>> {
    listen(Mode {
        remote: false,
        spin: false,
        slot_count: slot_count(),
    })
}
pub fn listen_remote_spin(_bytes: usize) -> io::Result<Box<dyn Listener>> {
    listen(Mode {
        remote: true,
        spin: true,
        slot_count: slot_count(),
    })
}
pub fn listen_remote_park(_bytes: usize) -> io::Result<Box<dyn Listener>> {
    listen(Mode {
        remote: true,
        spin: false,
        slot_count: slot_count(),
    })
}

impl Listener for TxcastListener {
    fn rendezvous(&self) -> Vec<String> {
        vec![
            u8::from(self.mode.remote).to_string(),
            u8::from(self.mode.spin).to_string(),
            self.mode.slot_count.to_string(),
        ]
    }

    fn accept(self: Box<Self>) -> io::Result<Box<dyn PingPong>> {
        let TxcastListener {
            mode: _,
            engine,
            mut port,
        } = *self;
        let mut buffer = vec![0u8; port.message_bytes_max()];
        let hello = port
            .recv_timeout(&mut buffer, Some(PARTNER_TIMEOUT))
            .map_err(io_err)?;
        Ok(Box::new(TxcastEnd {
            engine,
            port: Some(port),
            peer: hello.source,
            buffer,
        }))
    }
}

impl PingPong for TxcastEnd {
    fn ping(&mut self, message: &[u8], reply: &mut [u8]) -> io::Result<usize> {
        let port = self.port.as_mut().expect("open until drop");
        port.send(self.peer, message).map_err(io_err)?;
        let r = port
            .recv_timeout(reply, Some(PARTNER_TIMEOUT))
            .map_err(io_err)?;
        Ok(r.len)
    }
}

pub fn connect(rendezvous: &[String], _bytes: usize) -> io::Result<Box<dyn Echo>> {
    let flag = |i: usize| rendezvous.get(i).map(|s| s == "1");
    let slots = rendezvous.get(2).and_then(|s| s.parse().ok());
    let (Some(remote), Some(spin), Some(slot_count)) = (flag(0), flag(1), slots) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "rendezvous: <remote 0|1> <spin 0|1> <slot count>",
        ));
    };
    let mode = Mode {
        remote,
        spin,
        slot_count,
    };
    let engine = mode.engine()?;
    let site = u16::from(remote);
    let mut port = Port::open_on(
        &engine,
        Address::new(mode.instance(), site, 2, 0),
        mode.port_config(),
    )
    .map_err(io_err)?;
    let peer = Address::new(mode.instance(), 0, 1, 0);
    port.send(peer, b"hello").map_err(io_err)?;
    let buffer = vec![0u8; port.message_bytes_max()];
    Ok(Box::new(TxcastEnd {
        engine,
        port: Some(port),
        peer,
        buffer,
    }))
}

impl Echo for TxcastEnd {
    fn serve(&mut self, round_trips: u64) -> io::Result<()> {
        let port = self.port.as_mut().expect("open until drop");
        for _ in 0..round_trips {
            let r = port
                .recv_timeout(&mut self.buffer, Some(PARTNER_TIMEOUT))
                .map_err(io_err)?;
            port.send(self.peer, &self.buffer[..r.len])
                .map_err(io_err)?;
        }
        Ok(())
    }
}
