//! Long messages over a port (paper 001 "LDG"): the sans-IO [`Sender`] and [`Receiver`] of
//! `txcast-proto`, run on the calling thread over the port's datagrams (the destination's ring
//! on this host, UDP otherwise), local or remote the same way.
//!
//! An [`Ldg`] owns its port, opened with ring slots that hold a fragment; every message on it
//! is a fragment, an acknowledgement or an abort (anything else is dropped and counted). Like
//! a [`Port`], it is driven by the thread that uses it: `send`, `wait` and `recv` move its
//! traffic.

use crate::engine::Engine;
use crate::port::{Port, PortConfig, PortError};
use crate::shm::IdleStrategy;
use std::collections::HashMap;
use std::time::Duration;
use txcast_proto::frag::msg::{self, LdgMsg, DATA_HEADER_BYTES};
use txcast_proto::frag::{
    LdgConfig, LdgError, Receiver, ReceiverCounters, Sender, SenderCounters, TransferId,
};
use txcast_proto::{Address, Instant};

/// Fragments taken in from the ring between two rounds of acknowledgements.
const ACK_BATCH: u32 = 8;

/// Why a long-message call failed.
#[derive(Debug)]
pub enum LdgCallError {
    Ldg(LdgError),
    Port(PortError),
    /// A wait's own timeout passed (a send goes on; `recv` found nothing).
    Timeout,
}

impl std::fmt::Display for LdgCallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LdgCallError::Ldg(e) => write!(f, "{e}"),
            LdgCallError::Port(e) => write!(f, "{e}"),
            LdgCallError::Timeout => f.write_str("timed out"),
        }
    }
}

impl std::error::Error for LdgCallError {}

impl From<LdgError> for LdgCallError {
    fn from(e: LdgError) -> Self {
        LdgCallError::Ldg(e)
    }
}

impl From<PortError> for LdgCallError {
    fn from(e: PortError) -> Self {
        LdgCallError::Port(e)
    }
}

#[derive(Clone, Debug, Default)]
pub struct LdgCounters {
    pub sender: SenderCounters,
    pub receiver: ReceiverCounters,
    /// Messages on the port that are not LDG messages, or malformed ones.
    pub dropped_bad: u64,
    /// Sends the port refused (the destination full, gone...): recovered like a loss.
    pub send_failures: u64,
}

/// A long-message endpoint.
pub struct Ldg {
    port: Port,
    sender: Sender,
    receiver: Receiver,
    /// Finished transfers not yet collected (at most `transfers_max`).
    finished: HashMap<TransferId, Result<(), LdgError>>,
    send_buf: Vec<u8>,
    dropped_bad: u64,
    send_failures: u64,
}

/// The port configuration an [`Ldg`] with `cfg` needs: slots that hold a fragment, as many as
/// a window (64 to 1024), parked waits.
pub fn port_config(cfg: &LdgConfig) -> PortConfig {
    let slot = (cfg.fragment_bytes + DATA_HEADER_BYTES + crate::engine::ENVELOPE_BYTES)
        .next_multiple_of(64) as u32;
    PortConfig {
        slot_count: (cfg.window_fragments_max.next_power_of_two() as u32).clamp(64, 1024),
        slot_bytes: slot,
        idle: IdleStrategy::SpinThenPark { spins: 2000 },
        ..PortConfig::default()
    }
}

impl Ldg {
    /// Opens `addr` on the process's embedded engine for long messages.
    pub fn open(addr: Address, cfg: LdgConfig) -> Result<Ldg, LdgCallError> {
        cfg.validate()?;
        Ldg::new(Port::open(addr, port_config(&cfg))?, cfg)
    }

    /// Opens `addr` on `engine` for long messages.
    pub fn open_on(engine: &Engine, addr: Address, cfg: LdgConfig) -> Result<Ldg, LdgCallError> {
        cfg.validate()?;
        Ldg::new(Port::open_on(engine, addr, port_config(&cfg))?, cfg)
    }

    /// Makes `port` a long-message endpoint; its slots must hold a fragment (see
    /// [`port_config`]).
    pub fn new(port: Port, cfg: LdgConfig) -> Result<Ldg, LdgCallError> {
        let need = cfg.fragment_bytes + DATA_HEADER_BYTES;
        if port.message_bytes_max() < need {
            return Err(LdgCallError::Port(PortError::TooLong {
                len: need,
                max: port.message_bytes_max(),
            }));
        }
        Ok(Ldg {
            sender: Sender::new(cfg, port.incarnation())?,
            receiver: Receiver::new(cfg, port.incarnation())?,
            finished: HashMap::new(),
            send_buf: vec![0; need.max(txcast_proto::frag::ACK_BYTES_MAX)],
            dropped_bad: 0,
            send_failures: 0,
            port,
        })
    }

    pub fn address(&self) -> Address {
        self.port.address()
    }

    pub fn config(&self) -> &LdgConfig {
        self.sender.config()
    }

    /// Sends `msg` to `dest` and waits until the receiver has all of it (at most `deadline`).
    pub fn send(
        &mut self,
        dest: Address,
        msg: &[u8],
        deadline: Duration,
    ) -> Result<(), LdgCallError> {
        let id = self.send_async(dest, msg.to_vec(), deadline)?;
        self.wait(id, None)
    }

    /// Starts sending `msg` (taken, not copied); collect the result with [`Ldg::wait`].
    pub fn send_async(
        &mut self,
        dest: Address,
        msg: Vec<u8>,
        deadline: Duration,
    ) -> Result<TransferId, LdgCallError> {
        if self.sender.outstanding() + self.finished.len() >= self.config().transfers_max {
            return Err(LdgError::Full.into());
        }
        let now = self.now();
        let id = self.sender.send(now, dest, msg, deadline)?;
        self.transmit();
        Ok(id)
    }

    /// Waits for transfer `id` to end (at most `timeout`; its deadline ends it anyway).
    pub fn wait(&mut self, id: TransferId, timeout: Option<Duration>) -> Result<(), LdgCallError> {
        if !self.finished.contains_key(&id) && !self.sender.is_outstanding(id) {
            return Err(LdgError::Unknown.into());
        }
        self.drive(timeout, |l| l.finished.contains_key(&id))?;
        match self.finished.remove(&id) {
            Some(r) => r.map_err(LdgCallError::Ldg),
            None => Err(LdgCallError::Timeout),
        }
    }

    /// Gives transfer `id` up (the receiver frees what it holds of it).
    pub fn cancel(&mut self, id: TransferId) -> Result<(), LdgCallError> {
        if self.finished.remove(&id).is_some() {
            return Ok(());
        }
        self.sender.cancel(id)?;
        self.transmit();
        Ok(())
    }

    /// The next complete message (its sender and bytes), waiting at most `timeout`.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<(Address, Vec<u8>), LdgCallError> {
        if let Some(m) = self.receiver.poll_message() {
            return Ok(m);
        }
        self.drive(timeout, |l| l.receiver.has_message())?;
        self.receiver.poll_message().ok_or(LdgCallError::Timeout)
    }

    /// Moves traffic for up to `timeout` (acknowledging what arrives, sending what is due).
    pub fn serve(&mut self, timeout: Duration) -> Result<(), LdgCallError> {
        self.drive(Some(timeout), |_| false)
    }

    pub fn counters(&self) -> LdgCounters {
        LdgCounters {
            sender: self.sender.counters.clone(),
            receiver: self.receiver.counters.clone(),
            dropped_bad: self.dropped_bad,
            send_failures: self.send_failures,
        }
    }

    /// The counters of the port underneath (datagrams dropped for a full ring and the like).
    pub fn port_counters(&self) -> crate::port::PortCounters {
        self.port.counters()
    }

    /// Bytes the receiver holds (reassembling, or complete and not taken).
    pub fn bytes_held(&self) -> usize {
        self.receiver.bytes_held()
    }

    fn now(&self) -> Instant {
        self.port.engine().now()
    }

    fn drive(
        &mut self,
        timeout: Option<Duration>,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Result<(), LdgCallError> {
        let end = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        // The clock, for handlers that run while the port is borrowed.
        let engine = self.port.engine().clone();
        loop {
            let now = self.now();
            if self.sender.poll_timeout().is_some_and(|t| t <= now) {
                self.sender.handle_timeout(now);
            }
            if self.receiver.poll_timeout().is_some_and(|t| t <= now) {
                self.receiver.handle_timeout(now);
            }
            self.transmit();
            if done(self) {
                return Ok(());
            }
            let timer = [self.sender.poll_timeout(), self.receiver.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .map(|t| t.saturating_since(now));
            let left = end.map(|e| e.saturating_duration_since(std::time::Instant::now()));
            let wait = match (timer, left) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).unwrap_or(Duration::from_secs(1)),
            };
            // Fragments are taken in place from the ring, straight into their reassembly.
            let (sender, receiver, bad) =
                (&mut self.sender, &mut self.receiver, &mut self.dropped_bad);
            let mut take_one = |from: Address, _: Option<txcast_proto::TxnId>, bytes: &[u8]| {
                handle(sender, receiver, bad, engine.now(), from, bytes)
            };
            let r = if wait.is_zero() {
                Ok(())
            } else {
                match self.port.recv_with(Some(wait), &mut take_one) {
                    Ok(()) | Err(PortError::Timeout) => Ok(()),
                    Err(e) => Err(e),
                }
            };
            r?;
            // Take in what else is waiting, answering every few fragments: one acknowledgement
            // covers several, and the sender's window reopens while the rest are taken in.
            let mut taken = 0u32;
            loop {
                let (sender, receiver, bad) =
                    (&mut self.sender, &mut self.receiver, &mut self.dropped_bad);
                let got = self.port.try_take_with(|from, _, bytes| {
                    handle(sender, receiver, bad, engine.now(), from, bytes)
                });
                if got.is_none() {
                    break;
                }
                taken += 1;
                if taken.is_multiple_of(ACK_BATCH) {
                    self.transmit();
                }
            }
            if end.is_some_and(|e| std::time::Instant::now() >= e) {
                self.transmit();
                return Ok(());
            }
        }
    }

    fn transmit(&mut self) {
        let now = self.now();
        let mut buf = std::mem::take(&mut self.send_buf);
        while let Some((to, n)) = self.receiver.poll_transmit(&mut buf) {
            if self.port.send_datagram(to, &buf[..n]).is_err() {
                self.send_failures += 1;
            }
        }
        // Fragments leave straight from the message (scatter-gather), not copied first.
        while let Some((to, n, fragment)) = self.sender.poll_transmit_gather(now, &mut buf) {
            if self
                .port
                .send_datagram_gather(to, &[&buf[..n], fragment])
                .is_err()
            {
                self.send_failures += 1;
            }
        }
        while let Some((id, r)) = self.sender.poll_event() {
            self.finished.insert(id, r);
        }
        self.send_buf = buf;
    }
}

/// One datagram taken in: a fragment, an acknowledgement, an abort, or garbage.
fn handle(
    sender: &mut Sender,
    receiver: &mut Receiver,
    dropped_bad: &mut u64,
    now: Instant,
    from: Address,
    bytes: &[u8],
) {
    match msg::parse(bytes) {
        Ok(LdgMsg::Data(h, p)) => receiver.handle_data(now, from, &h, p),
        Ok(LdgMsg::Ack(a)) => sender.handle_ack(now, from, &a),
        Ok(LdgMsg::Abort {
            incarnation,
            transfer,
        }) => receiver.handle_abort(from, incarnation, transfer),
        Err(_) => *dropped_bad += 1,
    }
}
