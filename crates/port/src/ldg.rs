//! Long messages over a port (paper 001 "LDG"): the sans-IO [`Sender`] and [`Receiver`] of
//! `txcast-proto`, run on the calling thread over the port's datagrams (the destination's ring
//! on this host, UDP otherwise), local or remote the same way.
//!
//! An [`Ldg`] owns its port, opened with ring slots that hold a fragment; every message on it
//! is a fragment, an acknowledgement or an abort (anything else is dropped and counted). Like
//! a [`Port`], it is driven by the thread that uses it: `send`, `wait` and `recv` move its
//! traffic.
//!
//! What arrives by UDP is taken by the engine's receive path itself (the port's DATAGRAM
//! [extension](crate::extension)), straight from its receive buffer into the reassembly, not copied into the ring
//! first; the engine answers with acknowledgements as it goes and wakes the owner. With an
//! invoker engine that is the owner's own thread. The protocol state sits behind a mutex the
//! engine only tries: when the owner holds it (sending fragments), datagrams go into the ring
//! as before and the owner takes them from there. Fragments from this host arrive in the
//! ring.

use crate::engine::{Endpoint, Engine};
use crate::extension::{Extension, ServiceClash};
use crate::port::{Port, PortConfig, PortError};
use crate::shm::IdleStrategy;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use txcast_proto::frag::msg::{self, LdgMsg, DATA_HEADER_BYTES};
use txcast_proto::frag::{
    LdgConfig, LdgError, Receiver, ReceiverCounters, Sender, SenderCounters, TransferId,
};
use txcast_proto::wire::Kind;
use txcast_proto::{Address, Instant};

/// Fragments taken in from the ring between two rounds of acknowledgements.
const ACK_BATCH: u32 = 8;

/// Why a long-message call failed.
#[derive(Debug, thiserror::Error)]
pub enum LdgCallError {
    #[error(transparent)]
    Ldg(#[from] LdgError),
    #[error(transparent)]
    Port(#[from] PortError),
    /// A wait's own timeout passed (a send goes on; `recv` found nothing).
    #[error("timed out")]
    Timeout,
    /// The port's datagrams are taken by another service already.
    #[error(transparent)]
    Service(ServiceClash),
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

/// The protocol state, shared by the owner and the engine's receive path.
struct Core {
    sender: Sender,
    receiver: Receiver,
    /// Finished transfers not yet collected (at most `transfers_max`).
    finished: HashMap<TransferId, Result<(), LdgError>>,
    dropped_bad: u64,
    send_failures: u64,
    /// Fragments the engine took in since it last sent acknowledgements.
    taken: u32,
    /// For acknowledgements sent by the engine.
    ack_buf: Vec<u8>,
}

impl Core {
    /// Sends the queued acknowledgements by UDP from `ep` (the engine's receive path: it
    /// has no port, and the peers it answers are remote).
    fn send_acks_udp(&mut self, engine: &Engine, ep: &Endpoint) {
        let mut buf = std::mem::take(&mut self.ack_buf);
        while let Some((to, n)) = self.receiver.poll_transmit(&mut buf) {
            if crate::port::send_udp_gather(engine, ep, to, &[&buf[..n]]).is_err() {
                self.send_failures += 1;
            }
        }
        self.ack_buf = buf;
    }
}

/// The engine's way into an [`Ldg`]'s state (see the module's documentation).
struct LdgSink {
    core: Arc<Mutex<Core>>,
}

impl Extension for LdgSink {
    fn kinds(&self) -> &'static [Kind] {
        &[Kind::Datagram]
    }

    fn take(&self, engine: &Engine, ep: &Endpoint, source: Address, bytes: &[u8]) -> bool {
        if !msg::is_ldg(bytes) {
            return false;
        }
        // Never wait for the owner (it may be sending, and the engine serves other ports).
        let Ok(mut guard) = self.core.try_lock() else {
            return false;
        };
        let c = &mut *guard;
        handle(
            &mut c.sender,
            &mut c.receiver,
            &mut c.dropped_bad,
            engine.now(),
            source,
            bytes,
        );
        c.taken += 1;
        // Acknowledge every few fragments while a burst is taken in (one covers several, and
        // the sender's window reopens while the rest arrive), and at once when a message is
        // complete (that ends its sender's transfer).
        if c.taken >= ACK_BATCH || c.receiver.has_message() {
            c.taken = 0;
            c.send_acks_udp(engine, ep);
        }
        drop(guard);
        // The owner sends what is due and collects what is complete.
        ep.waker.wake();
        true
    }
}

/// A long-message endpoint.
pub struct Ldg {
    port: Port,
    core: Arc<Mutex<Core>>,
    send_buf: Vec<u8>,
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
        let core = Arc::new(Mutex::new(Core {
            sender: Sender::new(cfg, port.incarnation())?,
            receiver: Receiver::new(cfg, port.incarnation())?,
            finished: HashMap::new(),
            dropped_bad: 0,
            send_failures: 0,
            taken: 0,
            ack_buf: vec![0; txcast_proto::frag::ACK_BYTES_MAX],
        }));
        port.endpoint()
            .extensions
            .register(Arc::new(LdgSink { core: core.clone() }))
            .map_err(LdgCallError::Service)?;
        Ok(Ldg {
            core,
            send_buf: vec![0; need.max(txcast_proto::frag::ACK_BYTES_MAX)],
            port,
        })
    }

    fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().expect("ldg lock")
    }

    pub fn address(&self) -> Address {
        self.port.address()
    }

    pub fn config(&self) -> LdgConfig {
        *self.core().sender.config()
    }

    /// Sends `msg` to `dest` and waits until the receiver has all of it (at most `deadline`).
    pub fn send(
        &mut self,
        dest: Address,
        msg: &[u8],
        deadline: Duration,
    ) -> Result<(), LdgCallError> {
        // Into a recycled buffer: memory already touched takes no page faults.
        let mut data = self.core().receiver.buffer(msg.len());
        data.copy_from_slice(msg);
        let id = self.send_async(dest, data, deadline)?;
        self.wait(id, None)
    }

    /// Starts sending `msg` (taken, not copied); collect the result with [`Ldg::wait`].
    pub fn send_async(
        &mut self,
        dest: Address,
        msg: Vec<u8>,
        deadline: Duration,
    ) -> Result<TransferId, LdgCallError> {
        let now = self.now();
        let id = {
            let mut c = self.core();
            if c.sender.outstanding() + c.finished.len() >= c.sender.config().transfers_max {
                return Err(LdgError::Full.into());
            }
            c.sender.send(now, dest, msg, deadline)?
        };
        self.transmit();
        Ok(id)
    }

    /// Waits for transfer `id` to end (at most `timeout`; its deadline ends it anyway).
    pub fn wait(&mut self, id: TransferId, timeout: Option<Duration>) -> Result<(), LdgCallError> {
        {
            let c = self.core();
            if !c.finished.contains_key(&id) && !c.sender.is_outstanding(id) {
                return Err(LdgError::Unknown.into());
            }
        }
        self.drive(timeout, |c| c.finished.contains_key(&id))?;
        match self.core().finished.remove(&id) {
            Some(r) => r.map_err(LdgCallError::Ldg),
            None => Err(LdgCallError::Timeout),
        }
    }

    /// Gives transfer `id` up (the receiver frees what it holds of it).
    pub fn cancel(&mut self, id: TransferId) -> Result<(), LdgCallError> {
        {
            let mut c = self.core();
            if c.finished.remove(&id).is_some() {
                return Ok(());
            }
            c.sender.cancel(id)?;
        }
        self.transmit();
        Ok(())
    }

    /// The next complete message (its sender and bytes), waiting at most `timeout`.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<(Address, Vec<u8>), LdgCallError> {
        if let Some(m) = self.core().receiver.poll_message() {
            return Ok(m);
        }
        self.drive(timeout, |c| c.receiver.has_message())?;
        self.core()
            .receiver
            .poll_message()
            .ok_or(LdgCallError::Timeout)
    }

    /// Gives back a message buffer (one [`Ldg::recv`] returned, or any other) for later
    /// messages to reuse: up to `pool_bytes_max` are kept, and reassembling into memory
    /// already touched takes no page faults.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.core().receiver.recycle(buf);
    }

    /// A buffer of `len` bytes for a message, from the recycled ones if one fits (its bytes
    /// are not cleared), else a new one; hand it to [`Ldg::send_async`].
    pub fn buffer(&mut self, len: usize) -> Vec<u8> {
        self.core().receiver.buffer(len)
    }

    /// Moves traffic for up to `timeout` (acknowledging what arrives, sending what is due).
    pub fn serve(&mut self, timeout: Duration) -> Result<(), LdgCallError> {
        self.drive(Some(timeout), |_| false)
    }

    pub fn counters(&self) -> LdgCounters {
        let c = self.core();
        LdgCounters {
            sender: c.sender.counters.clone(),
            receiver: c.receiver.counters.clone(),
            dropped_bad: c.dropped_bad,
            send_failures: c.send_failures,
        }
    }

    /// The counters of the port underneath (datagrams dropped for a full ring and the like).
    pub fn port_counters(&self) -> crate::port::PortCounters {
        self.port.counters()
    }

    /// Bytes the receiver holds (reassembling, or complete and not taken).
    pub fn bytes_held(&self) -> usize {
        self.core().receiver.bytes_held()
    }

    fn now(&self) -> Instant {
        self.port.engine().now()
    }

    fn drive(
        &mut self,
        timeout: Option<Duration>,
        mut done: impl FnMut(&Core) -> bool,
    ) -> Result<(), LdgCallError> {
        let end = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        // The clock, for handlers that run while the port is borrowed.
        let engine = self.port.engine().clone();
        let core = self.core.clone();
        loop {
            let now = self.now();
            let wait = {
                let mut c = core.lock().expect("ldg lock");
                if c.sender.poll_timeout().is_some_and(|t| t <= now) {
                    c.sender.handle_timeout(now);
                }
                if c.receiver.poll_timeout().is_some_and(|t| t <= now) {
                    c.receiver.handle_timeout(now);
                }
                self.transmit_locked(&mut c);
                if done(&c) {
                    return Ok(());
                }
                let timer = [c.sender.poll_timeout(), c.receiver.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min()
                    .map(|t| t.saturating_since(now));
                let left = end.map(|e| e.saturating_duration_since(std::time::Instant::now()));
                match (timer, left) {
                    (Some(a), Some(b)) => a.min(b),
                    (a, b) => a.or(b).unwrap_or(Duration::from_secs(1)),
                }
            };
            // Remote traffic is taken in by the engine (the port's sink) meanwhile; what comes
            // into the ring (from this host, or while we held the state) is taken below.
            if !wait.is_zero() {
                self.port.wait_or_woken(wait);
            }
            // Take in what waits in the ring, in place, answering every few fragments: one
            // acknowledgement covers several, and the sender's window reopens while the rest
            // are taken in.
            let mut taken = 0u32;
            loop {
                let mut guard = core.lock().expect("ldg lock");
                let c = &mut *guard;
                let (sender, receiver, bad) = (&mut c.sender, &mut c.receiver, &mut c.dropped_bad);
                let got = self.port.try_take_with(|from, _, bytes| {
                    handle(sender, receiver, bad, engine.now(), from, bytes)
                });
                if got.is_none() {
                    break;
                }
                taken += 1;
                if taken.is_multiple_of(ACK_BATCH) {
                    self.transmit_locked(c);
                }
            }
            if end.is_some_and(|e| std::time::Instant::now() >= e) {
                self.transmit();
                return Ok(());
            }
        }
    }

    fn transmit(&mut self) {
        let core = self.core.clone();
        let mut c = core.lock().expect("ldg lock");
        self.transmit_locked(&mut c);
    }

    fn transmit_locked(&mut self, c: &mut Core) {
        let now = self.now();
        let mut buf = std::mem::take(&mut self.send_buf);
        c.taken = 0;
        while let Some((to, n)) = c.receiver.poll_transmit(&mut buf) {
            if self.port.send_datagram(to, &buf[..n]).is_err() {
                c.send_failures += 1;
            }
        }
        // Fragments leave straight from the message (scatter-gather), not copied first.
        while let Some((to, n, fragment)) = c.sender.poll_transmit_gather(now, &mut buf) {
            if self
                .port
                .send_datagram_gather(to, &[&buf[..n], fragment])
                .is_err()
            {
                c.send_failures += 1;
            }
        }
        while let Some((id, r)) = c.sender.poll_event() {
            c.finished.insert(id, r);
        }
        while let Some(b) = c.sender.poll_spent() {
            c.receiver.recycle(b);
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
