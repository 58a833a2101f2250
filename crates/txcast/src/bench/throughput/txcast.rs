//! txcast's own ports as throughput cases: `txcast-local` (the receiver's shared-memory ring,
//! written by the sender's `Port::send`) and `txcast-remote-pack-off`/`-pack-on` (UDP over
//! loopback through the reliable link, from site 0 to site 1).
//!
//! Both sides run an engine in `EngineMode::Thread` with the same link configuration. The sender
//! opens `(44, site 0, type t, 0)` and starts the receiver, which opens `(44, site, type t + 1,
//! 0)` (t = 1 local, 3 remote packing off, 5 remote packing on; site 0 for local, site 1,
//! another loopback address, for remote) and sends a
//! hello; the sender then streams to the hello's source with `Port::send`, which waits (back-
//! pressure) while the ring or the link's send buffer is full. The receiver takes messages with
//! `Port::try_recv`, falling back to `Port::recv_timeout` when none is waiting: spinning for
//! local, per `--remote-idle` for remote.

use std::io;
use std::time::Duration;

use super::super::rtt::PARTNER_TIMEOUT;
use super::{
    send_stream, with_partner, Case, Outcome, Packing, RemoteIdle, Stream, Tally, MESSAGE_BYTES,
};
use txcast_port::{Engine, EngineConfig, EngineMode, IdleStrategy, Port, PortConfig, PortError};
use txcast_proto::link::LinkConfig;
use txcast_proto::pack::PackMode;
use txcast_proto::Address;

/// Instance number of every case (the rtt bench uses 40..=43, tests 1..=12, the demo 0). The
/// cases differ by server type instead: instances above 44 map past UDP port 65535
/// (`20000 + (instance * 16 + type) * 64 + server`), and type 7 is the last that fits at 44.
const INSTANCE: u16 = 44;

const HELLO: &[u8] = b"hello";

/// How a txcast case is set up (both sides).
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub case: Case,
    pub delay_us: u64,
    pub remote_idle: RemoteIdle,
}

impl Setup {
    fn to_args(self) -> [String; 2] {
        [
            self.delay_us.to_string(),
            self.remote_idle.name().to_string(),
        ]
    }

    fn from_args(case: Case, args: &[String]) -> io::Result<Setup> {
        let invalid = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "rendezvous: <delay µs> <spin|park>",
            )
        };
        let [delay_us, idle] = args else {
            return Err(invalid());
        };
        Ok(Setup {
            case,
            delay_us: delay_us.parse().map_err(|_| invalid())?,
            remote_idle: RemoteIdle::from_name(idle).ok_or_else(invalid)?,
        })
    }

    /// Server type of the sender's port; the receiver's is the next one.
    fn sender_type(self) -> u16 {
        match self.case {
            Case::TxcastRemotePackOff => 3,
            Case::TxcastRemotePackOn => 5,
            _ => 1,
        }
    }

    fn sender_address(self) -> Address {
        Address::new(INSTANCE, 0, self.sender_type(), 0)
    }

    fn receiver_address(self) -> Address {
        Address::new(
            INSTANCE,
            u16::from(self.case.remote()),
            self.sender_type() + 1,
            0,
        )
    }

    fn engine(self) -> io::Result<Engine> {
        let pack = match self.case {
            Case::TxcastRemotePackOn => PackMode::Adaptive {
                delay_max: Duration::from_micros(self.delay_us),
            },
            _ => PackMode::Off,
        };
        Engine::start(EngineConfig {
            mode: if self.case.remote() && self.remote_idle == super::RemoteIdle::Invoker {
                EngineMode::Invoker
            } else {
                EngineMode::Thread
            },
            link: LinkConfig {
                pack,
                ..LinkConfig::default()
            },
            cluster: crate::bench::bench_cluster(),
            ..EngineConfig::default()
        })
    }

    fn receiver_idle(self) -> IdleStrategy {
        if self.case.remote() {
            self.remote_idle.strategy()
        } else {
            IdleStrategy::Spin
        }
    }
}

/// Stops the engine thread when dropped; declare it before the ports so they go first.
struct Running(Engine);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

fn io_err(e: PortError) -> io::Error {
    match e {
        PortError::Io(e) => e,
        PortError::Timeout => io::Error::new(io::ErrorKind::TimedOut, "txcast: timed out"),
        e => io::Error::other(e.to_string()),
    }
}

/// The sender: opens its port, starts the receiver with `args` plus the setup, waits for its
/// hello, streams. Returns the link's packing counters for the remote cases.
pub fn send(setup: &Setup, stream: &Stream, mut args: Vec<String>) -> io::Result<Option<Packing>> {
    let engine = Running(setup.engine()?);
    let mut port = Port::open_on(
        &engine.0,
        setup.sender_address(),
        PortConfig {
            idle: IdleStrategy::Park,
            ..PortConfig::default()
        },
    )
    .map_err(io_err)?;
    args.extend(setup.to_args());
    with_partner(&args, || {
        let mut buffer = vec![0u8; port.message_bytes_max()];
        let hello = port
            .recv_timeout(&mut buffer, Some(PARTNER_TIMEOUT))
            .map_err(io_err)?;
        let dest = setup.receiver_address();
        if hello.source != dest || &buffer[..hello.len] != HELLO {
            return Err(io::Error::other(format!(
                "unexpected hello from {}",
                hello.source
            )));
        }
        send_stream(stream, |message| port.send(dest, message).map_err(io_err))?;
        // Held packets and retransmissions need the engine to run (in invoker mode, this
        // thread is the engine).
        port.flush(PARTNER_TIMEOUT).map_err(io_err)
    })?;
    // The receiver has taken every message, so every first transmission has been counted.
    let counters = port.counters();
    Ok(setup.case.remote().then_some(Packing {
        messages_sent: counters.links.messages_sent,
        data_packets_sent: counters.links.data_packets_sent,
        retransmitted: counters.links.retransmitted,
        send_full: counters.links.send_full,
        histogram: counters.pack_histogram,
    }))
}

/// Receive slot length of the receiving port.
pub const RECEIVER_SLOT_BYTES: u32 = 112;

/// The receiver: opens its port, says hello, takes every message.
pub fn receive(case: Case, stream: &Stream, rendezvous: &[String]) -> io::Result<Outcome> {
    let setup = Setup::from_args(case, rendezvous)?;
    let engine = Running(setup.engine()?);
    let mut port = Port::open_on(
        &engine.0,
        setup.receiver_address(),
        PortConfig {
            idle: setup.receiver_idle(),
            // Slots sized for the stream, like the raw ring's (64-byte message, 16-byte
            // envelope, 16-byte slot header: two cache lines); the default 2 KiB slots would
            // spread 1024 messages over 2 MiB and measure the cache, not the ring.
            slot_bytes: RECEIVER_SLOT_BYTES,
            ..PortConfig::default()
        },
    )
    .map_err(io_err)?;
    let mut tally = Tally::new(*stream)?;
    let mut buffer = vec![0u8; port.message_bytes_max().max(MESSAGE_BYTES)];
    port.send(setup.sender_address(), HELLO).map_err(io_err)?;
    loop {
        let received = match port.try_recv(&mut buffer) {
            Some(r) => r,
            None => port
                .recv_timeout(&mut buffer, Some(PARTNER_TIMEOUT))
                .map_err(io_err)?,
        };
        if tally.on_message(&buffer[..received.len])? {
            // Send the acknowledgements still owed before the port goes away.
            port.flush(PARTNER_TIMEOUT).map_err(io_err)?;
            return tally.outcome();
        }
    }
}
