//! `Port`: one API for local and remote messages (paper 000 §4.2, Figure 5).
//!
//! A port owns a shared-memory receive ring (slot count and length chosen at open). A message to a
//! port on the same host is written straight into that port's ring by the sender: one copy, no
//! system call unless the receiver sleeps. A message to another host goes over UDP through a
//! reliable, in-order link; the engine delivers it into the same ring, so `recv` has one path.

use crate::engine::{
    deadline_after, read_envelope, write_envelope, Endpoint, EndpointCounters, Engine, EngineIo,
    ENVELOPE_BYTES, LINKS_PER_PORT_MAX,
};
use crate::idle::{Backoff, Idle, Phase};
use crate::naming::NamingError;
use crate::shm::{
    ensure_private_dir, IdleStrategy, RingConfig, RingReceiver, RingSender, SendError, ShmError,
};
use std::collections::{BTreeSet, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use txcast_proto::link::{LinkCounters, LinkTable, TableSendError};
use txcast_proto::replay::{ReplayCounters, ReplayGuard};
use txcast_proto::wire::{
    Kind, Numbering, PacketHeader, PacketWriter, HEADER_BYTES, MAC_BYTES, MULTICAST_PREFIX_BYTES,
    NUMBERING_BYTES, PACKET_BYTES_MAX, RECORD_HEADER_BYTES, TRAILER_BYTES_MAX,
};
use txcast_proto::{Address, AddressHash, TxnId};

/// Local destinations one port keeps mapped.
pub const LOCAL_SENDERS_MAX: usize = 1024;

/// Options fixed when a port opens.
#[derive(Clone, Copy, Debug)]
pub struct PortConfig {
    /// Receive slots in the ring (a power of two).
    pub slot_count: u32,
    /// Bytes per slot: the longest message this port receives, plus 16 bytes of envelope.
    pub slot_bytes: u32,
    /// How `recv` waits.
    pub idle: IdleStrategy,
    /// How long a blocking `send` waits for room before `PortError::Timeout`.
    pub send_timeout: Duration,
    /// Take packets from a source whose socket is not where its address maps (servers that
    /// moved). Off by default: a packet must come from where its source's address maps. An
    /// oracle turns it on (moved servers register with it); with a cluster key every packet
    /// is authenticated either way.
    pub trust_moved_sources: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            slot_count: 1024,
            slot_bytes: 2048,
            idle: IdleStrategy::SpinThenPark { spins: 20_000 },
            send_timeout: Duration::from_secs(5),
            trust_moved_sources: false,
        }
    }
}

/// Why a port call failed.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error(transparent)]
    Naming(#[from] NamingError),
    #[error(transparent)]
    Segment(ShmError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The destination's ring or the link's send buffer is full (non-blocking calls).
    #[error("destination full (back-pressure)")]
    Full,
    /// A blocking call's deadline passed.
    #[error("timed out")]
    Timeout,
    /// The message is longer than the destination accepts.
    #[error("message of {len} bytes exceeds the {max}-byte bound")]
    TooLong { len: usize, max: usize },
    /// No port is open at that local address.
    #[error("no port open at {0}")]
    NoSuchPort(Address),
    /// The destination port's owner died.
    #[error("the owner of port {0} died")]
    OwnerDead(Address),
    /// The destination port was closed.
    #[error("port {0} is closed")]
    Closed(Address),
    /// The remote destination has acknowledged nothing through the link's
    /// `unreachable_after_timeouts` retransmission timeouts; messages already accepted are
    /// still retried, and sends succeed again once it answers.
    #[error("port {0} is unreachable (no acknowledgement)")]
    Unreachable(Address),
}

/// A message taken from the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub source: Address,
    /// The transaction of a transaction-multicast message.
    pub txn: Option<TxnId>,
    /// Bytes copied into the caller's buffer.
    pub len: usize,
    /// The message was longer than the buffer: only its first `len` bytes were copied (the
    /// rest is gone). A buffer of `message_bytes_max` bytes never truncates.
    pub truncated: bool,
}

/// A port's counters.
#[derive(Clone, Debug, Default)]
pub struct PortCounters {
    pub local_sent: u64,
    pub remote_sent: u64,
    pub received: u64,
    /// UDP datagrams read and handled: once a datagram is counted here, its refusal or drop
    /// is counted in the fields below (they are read after this one).
    pub packets_received: u64,
    pub packets_sent: u64,
    /// Malformed packets, and ring records too short to be a txcast message (written by
    /// something else that can write the port's segment).
    pub dropped_bad: u64,
    /// The datagrams of `dropped_bad`, by why they were refused.
    pub refused: crate::engine::Refusals,
    pub dropped_misaddressed: u64,
    pub dropped_not_joined: u64,
    pub dropped_ring_full: u64,
    pub dropped_too_long: u64,
    /// Packets from a new peer refused because the port already has `LINKS_PER_PORT_MAX` links.
    pub dropped_link_limit: u64,
    pub datagrams_received: u64,
    pub multicast_received: u64,
    pub ring_full_rejections: u64,
    /// Wake-ups of this port parked on its socket by local senders (invoker mode).
    pub doorbells: u64,
    /// Datagrams this port sent that the destination's host answered with "port
    /// unreachable" (no socket bound there: the process is gone).
    pub unreachable_reports: u64,
    /// Other errors the kernel reported about datagrams this port sent.
    pub send_errors: u64,
    pub reclaimed_dead_owner: bool,
    /// With a cluster key: datagrams and multicasts refused as replays (or not proven fresh),
    /// hellos asked for and answered, windows and kept datagrams dropped for room
    /// (`txcast_proto::replay`). All zero without a key.
    pub replays: ReplayCounters,
    pub links: LinkCounters,
    /// Packets that carried k messages, k = index (the last bin: that many or more).
    pub pack_histogram: Vec<u64>,
}

/// A communication endpoint named by a logical address.
pub struct Port {
    addr: Address,
    cfg: PortConfig,
    engine: Engine,
    ring: RingReceiver,
    ep: Arc<Endpoint>,
    local: HashMap<Address, RingSender, AddressHash>,
    /// The last local destination, for a send that repeats it.
    last_local: Option<(Address, RingSender)>,
    local_sent: u64,
    remote_sent: u64,
    received: u64,
    scratch: Vec<u8>,
    fanout_to: Vec<SocketAddr>,
    /// Datagrams queued to leave together ([`Port::queue_datagram`]).
    batch: crate::mmsg::SendBatch,
    /// When a non-blocking send last asked whether a full local destination's owner lives,
    /// per destination (only those in `local`, so bounded as it is).
    owner_checked_at: HashMap<Address, std::time::Instant, AddressHash>,
}

/// How often a non-blocking send that finds a local destination full asks whether its owner
/// lives (a system call and a `/proc` read): a dead owner's ring stays full for good.
const OWNER_CHECK_EVERY: Duration = Duration::from_millis(10);

impl Port {
    /// The engine's side of this port.
    /// Changes how `recv` waits (a service that takes the port over sets its own).
    pub(crate) fn set_idle(&mut self, idle: IdleStrategy) {
        self.cfg.idle = idle;
    }

    pub(crate) fn endpoint(&self) -> &Arc<Endpoint> {
        &self.ep
    }

    /// See [`RingReceiver::arm_socket_wake`].
    pub(crate) fn arm_socket_wake(&mut self) -> bool {
        self.ring.arm_socket_wake()
    }

    /// See [`RingReceiver::awake`].
    pub(crate) fn ring_awake(&mut self) {
        self.ring.awake()
    }

    /// Opens a port on the process's embedded engine.
    pub fn open(addr: Address, cfg: PortConfig) -> Result<Port, PortError> {
        Port::open_on(&Engine::embedded()?, addr, cfg)
    }

    /// Opens a port on a given engine.
    pub fn open_on(engine: &Engine, addr: Address, cfg: PortConfig) -> Result<Port, PortError> {
        let cluster = &engine.config().cluster;
        // Where the pure mapping puts it, unless the engine was told it moved.
        let sockaddr = engine.socket_addr(addr)?;
        ensure_private_dir(&cluster.segment_dir()).map_err(PortError::Segment)?;
        let ring = RingReceiver::create(
            &cluster.segment_path(addr),
            RingConfig {
                slot_count: cfg.slot_count,
                slot_bytes: cfg.slot_bytes,
            },
        )
        .map_err(PortError::Segment)?;
        let socket = UdpSocket::bind(sockaddr)?;
        // Every read and write of the engine says MSG_DONTWAIT. An invoker's socket is left
        // blocking, with a receive timeout, so that a lone application thread with nothing to
        // do can sleep in the read itself (see `Engine::invoker_sleep`).
        let blocking_sleep = if engine.is_invoker() {
            socket.set_read_timeout(Some(crate::engine::BLOCKING_SLEEP))?;
            // What the kernel made of it (rounded up to its clock ticks).
            socket.read_timeout()?
        } else {
            socket.set_nonblocking(true)?;
            None
        };
        crate::mmsg::size_buffers(&socket)?;
        crate::mmsg::report_send_errors(&socket)?;
        if cluster.multicast.enabled {
            crate::mmsg::multicast_interface(&socket, cluster.multicast.interface)?;
        }
        // Deliveries by another thread's duty cycle reach a receiver parked on its socket
        // through the same doorbell as local senders.
        ring.producer().set_doorbell(sockaddr);
        let incarnation = engine.next_incarnation();
        let ep = Arc::new(Endpoint {
            addr,
            trust_moved_sources: cfg.trust_moved_sources,
            incarnation,
            socket,
            links: Mutex::new(
                LinkTable::new(
                    engine.config().link.clone(),
                    addr,
                    engine.config().cluster.cluster,
                    incarnation,
                    engine.shared.send_key(),
                    LINKS_PER_PORT_MAX,
                    engine.now(),
                )
                .expect("link configuration validated at engine start"),
            ),
            group_socket: std::sync::OnceLock::new(),
            ring: ring.producer(),
            joined: RwLock::new(BTreeSet::new()),
            counters: EndpointCounters::default(),
            closed: AtomicBool::new(false),
            recv_busy: AtomicBool::new(false),
            watched: AtomicBool::new(false),
            ring_blocked: AtomicBool::new(false),
            sockaddr,
            blocking_sleep,
            replay: engine
                .shared
                .keys
                .is_some()
                .then(|| Mutex::new(ReplayGuard::new(incarnation))),
            extensions: Default::default(),
            waker: ring.waker(),
            unreachable: Mutex::new(std::collections::VecDeque::new()),
            unreachable_waiting: AtomicBool::new(false),
        });
        engine.register(ep.clone())?;
        Ok(Port {
            addr,
            cfg,
            engine: engine.clone(),
            ring,
            ep,
            local: HashMap::default(),
            last_local: None,
            owner_checked_at: HashMap::default(),
            local_sent: 0,
            remote_sent: 0,
            received: 0,
            scratch: Vec::new(),
            fanout_to: Vec::new(),
            batch: crate::mmsg::SendBatch::new(),
        })
    }

    pub fn address(&self) -> Address {
        self.addr
    }

    /// The engine this port runs on.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// This port's incarnation (milliseconds since the Unix epoch when it opened, strictly
    /// increasing within the process): peers refuse packets from its predecessors.
    pub fn incarnation(&self) -> u64 {
        self.ep.incarnation
    }

    pub fn config(&self) -> PortConfig {
        self.cfg
    }

    /// The longest message this port can receive.
    pub fn message_bytes_max(&self) -> usize {
        self.cfg.slot_bytes as usize - ENVELOPE_BYTES
    }

    #[inline]
    fn is_local(&self, dest: Address) -> bool {
        self.engine
            .config()
            .cluster
            .same_host(self.addr.site, dest.site)
            && !(self.engine.any_moved()
                && (self.engine.moved(dest) || self.engine.moved(self.addr)))
    }

    fn local_sender(&mut self, dest: Address) -> Result<&RingSender, PortError> {
        // Streams to one destination are the common case: skip the map for a repeat.
        if self.last_local.as_ref().is_some_and(|(a, _)| *a == dest) {
            return Ok(&self.last_local.as_ref().expect("checked").1);
        }
        let s = self.local_sender_slow(dest)?.clone();
        self.last_local = Some((dest, s));
        Ok(&self.last_local.as_ref().expect("just set").1)
    }

    fn local_sender_slow(&mut self, dest: Address) -> Result<&RingSender, PortError> {
        let full = self.local.len() >= LOCAL_SENDERS_MAX;
        match self.local.entry(dest) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                if full {
                    return Err(PortError::Full);
                }
                let cluster = &self.engine.config().cluster;
                let path = cluster.segment_path(dest);
                let s = RingSender::open(&path).map_err(|e| match e {
                    ShmError::NotFound => PortError::NoSuchPort(dest),
                    ShmError::OwnerDead => PortError::OwnerDead(dest),
                    ShmError::Closed => PortError::Closed(dest),
                    e => PortError::Segment(e),
                })?;
                // A receiver that parks on its socket (invoker mode) is woken there.
                if let Ok(a) = self.engine.socket_addr(dest) {
                    s.set_doorbell(a);
                }
                Ok(e.insert(s))
            }
        }
    }

    /// Sends reliably and in order, waiting up to the port's `send_timeout` for room.
    #[inline]
    pub fn send(&mut self, dest: Address, msg: &[u8]) -> Result<(), PortError> {
        match self.try_send_repeat(dest, msg) {
            Repeat::Sent => return Ok(()),
            Repeat::Full => return self.send_timeout(dest, msg, self.cfg.send_timeout),
            Repeat::NotThisWay => {}
        }
        match self.try_send_general(dest, msg) {
            Err(PortError::Full) => self.send_timeout(dest, msg, self.cfg.send_timeout),
            r => r,
        }
    }

    /// Sends without waiting: `PortError::Full` when the destination has no room.
    #[inline]
    pub fn try_send(&mut self, dest: Address, msg: &[u8]) -> Result<(), PortError> {
        let r = match self.try_send_repeat(dest, msg) {
            Repeat::Sent => return Ok(()),
            Repeat::Full => Err(PortError::Full),
            Repeat::NotThisWay => self.try_send_general(dest, msg),
        };
        match r {
            Err(PortError::Full) => Err(self.full_or_dead(dest)),
            r => r,
        }
    }

    /// What to say of a destination that had no room: `Full`, or `OwnerDead` (forgetting
    /// its ring) if it is local and its owner died, asked at most every `OWNER_CHECK_EVERY`.
    #[cold]
    fn full_or_dead(&mut self, dest: Address) -> PortError {
        if !self.is_local(dest) {
            return PortError::Full;
        }
        let Some(sender) = self.local.get(&dest) else {
            return PortError::Full;
        };
        let now = std::time::Instant::now();
        if self
            .owner_checked_at
            .get(&dest)
            .is_some_and(|&at| now.duration_since(at) < OWNER_CHECK_EVERY)
        {
            return PortError::Full;
        }
        self.owner_checked_at.insert(dest, now);
        if sender.owner_alive() {
            return PortError::Full;
        }
        self.forget_local(dest);
        PortError::OwnerDead(dest)
    }

    /// [`try_send`](Self::try_send) other than by the short path.
    fn try_send_general(&mut self, dest: Address, msg: &[u8]) -> Result<(), PortError> {
        if self.is_local(dest) {
            self.local_try_send(dest, msg)
        } else {
            self.remote_send(dest, msg)
        }
    }

    /// The common case of a stream, on its own short path: another message to the local
    /// destination of the previous local send, while no server is recorded as moved (so the
    /// destination is still local). `NotThisWay` when that is not the case, or when the ring
    /// refused for a reason other than room (the general path then says why). The answer is
    /// a byte, not a `Result`: a result of this size, written by one call and copied by its
    /// caller, costs more than the rest of the path.
    #[inline(always)]
    fn try_send_repeat(&mut self, dest: Address, msg: &[u8]) -> Repeat {
        let Some((to, sender)) = self.last_local.as_ref() else {
            return Repeat::NotThisWay;
        };
        if *to != dest || self.engine.any_moved() {
            return Repeat::NotThisWay;
        }
        let envelope = crate::engine::envelope(self.addr, TxnId(0));
        match sender.try_send_prefixed(&envelope, msg) {
            Ok(()) => {
                self.local_sent += 1;
                Repeat::Sent
            }
            Err(SendError::Full) => Repeat::Full,
            Err(_) => Repeat::NotThisWay,
        }
    }

    /// Sends, waiting up to `timeout` for room.
    pub fn send_timeout(
        &mut self,
        dest: Address,
        msg: &[u8],
        timeout: Duration,
    ) -> Result<(), PortError> {
        let deadline = deadline_after(timeout);
        if self.is_local(dest) {
            return self.local_send_until(dest, msg, deadline);
        }
        // Remote: the link's window is full until acknowledgements arrive. Run the engine
        // here if it is idle (that processes them at once), else let its thread do it.
        let mut backoff = Backoff::new(Phase::Passes(0), Phase::Time(Duration::from_micros(200)));
        loop {
            match self.remote_send(dest, msg) {
                Err(PortError::Full) => {}
                r => return r,
            }
            if self.engine.duty_cycle() > 0 {
                backoff.reset();
                if std::time::Instant::now() >= deadline {
                    return Err(PortError::Timeout);
                }
                continue;
            }
            match backoff.idle(Some(deadline)) {
                Idle::Expired => return Err(PortError::Timeout),
                // A short nap: the acknowledgements come from the engine thread.
                Idle::Park => std::thread::sleep(Duration::from_micros(20)),
                what => Backoff::pause(what),
            }
        }
    }

    fn local_send_until(
        &mut self,
        dest: Address,
        msg: &[u8],
        deadline: std::time::Instant,
    ) -> Result<(), PortError> {
        loop {
            match self.local_try_send(dest, msg) {
                Err(PortError::Full) => {}
                r => return r,
            }
            let s = self.local_sender(dest)?;
            match s.wait_for_room(Some(deadline)) {
                Ok(()) => {}
                Err(SendError::Full) => {
                    if !s.owner_alive() {
                        self.forget_local(dest);
                        return Err(PortError::OwnerDead(dest));
                    }
                }
                Err(e) => return Err(map_send_error(e, dest)),
            }
        }
    }

    #[inline]
    fn local_try_send(&mut self, dest: Address, msg: &[u8]) -> Result<(), PortError> {
        self.local_try_send_parts(dest, &[msg])
    }

    /// Writes `parts`, one after another, as one message into a local destination's ring.
    fn local_try_send_parts(&mut self, dest: Address, parts: &[&[u8]]) -> Result<(), PortError> {
        let source = self.addr;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let s = self.local_sender(dest)?;
        let r = match s.claim(ENVELOPE_BYTES + len) {
            Ok(mut c) => {
                write_envelope(&mut c, source, TxnId(0), &[]);
                let mut at = ENVELOPE_BYTES;
                for p in parts {
                    c[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
                c.commit();
                Ok(())
            }
            Err(e) => Err(map_send_error(e, dest)),
        };
        match r {
            Ok(()) => {
                self.local_sent += 1;
                Ok(())
            }
            Err(e @ (PortError::OwnerDead(_) | PortError::Closed(_))) => {
                self.forget_local(dest);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Drops the mapping of a local destination that died or closed.
    fn forget_local(&mut self, dest: Address) {
        self.local.remove(&dest);
        self.owner_checked_at.remove(&dest);
        if self.last_local.as_ref().is_some_and(|(a, _)| *a == dest) {
            self.last_local = None;
        }
    }

    fn remote_send(&mut self, dest: Address, msg: &[u8]) -> Result<(), PortError> {
        let now = self.engine.now();
        let mut links = self.ep.links.lock().expect("links lock");
        let mut io = EngineIo::new(&self.engine, &self.ep);
        let timer = links
            .send(now, dest, msg, &mut io)
            .map_err(|e| send_error(dest, e))?;
        drop(io);
        drop(links);
        self.engine.wake_for(timer);
        self.remote_sent += 1;
        Ok(())
    }

    /// [`Port::try_send`], except that a remote message waits in its link until
    /// [`Port::flush_deferred`] for its destination, so that a batch of sends leaves packed
    /// in few packets instead of one packet each. One to this host goes at once. The caller
    /// keeps the destinations to flush (`deferred`: `dest` is added if it is not there).
    pub(crate) fn try_send_deferred(
        &mut self,
        dest: Address,
        msg: &[u8],
        deferred: &mut Vec<Address>,
    ) -> Result<(), PortError> {
        if self.is_local(dest) {
            return self.try_send(dest, msg);
        }
        let now = self.engine.now();
        self.ep
            .links
            .lock()
            .expect("links lock")
            .queue(now, dest, msg)
            .map_err(|e| send_error(dest, e))?;
        if !deferred.contains(&dest) {
            deferred.push(dest);
        }
        self.remote_sent += 1;
        Ok(())
    }

    /// Sends what [`Port::try_send_deferred`] left in the links of `deferred`, and empties
    /// it; the packets sent.
    pub(crate) fn flush_deferred(&mut self, deferred: &mut Vec<Address>) -> usize {
        if deferred.is_empty() {
            return 0;
        }
        let now = self.engine.now();
        let mut n = 0;
        let mut earliest: Option<txcast_proto::Instant> = None;
        {
            let mut links = self.ep.links.lock().expect("links lock");
            let mut io = EngineIo::new(&self.engine, &self.ep);
            for dest in deferred.drain(..) {
                n += links.flush_peer(now, dest, &mut io);
                if let Some(t) = links.get(dest).and_then(|l| l.poll_timeout()) {
                    earliest = Some(earliest.map_or(t, |e| e.min(t)));
                }
            }
        }
        self.engine.wake_for(earliest);
        n
    }

    /// Reserves room for a message of up to `len` bytes to `dest` and lends it for building in
    /// place; [`PortClaim::commit`] sends it. To a port on this host the bytes are written
    /// straight into the destination's ring slot (no copy at all); to a remote port they are
    /// built in a buffer of this port and sent through the link at commit. Dropping the claim
    /// sends nothing. Non-blocking: `PortError::Full` when the destination has no room.
    #[inline]
    pub fn claim(&mut self, dest: Address, len: usize) -> Result<PortClaim<'_>, PortError> {
        if self.is_local(dest) {
            let source = self.addr;
            self.local_sender(dest)?;
            // `local_sender` left `dest`'s sender in `last_local`: no map lookup per claim.
            let sender = &self.last_local.as_ref().expect("set by local_sender").1;
            // A length past usize::MAX less the envelope is too long for any slot.
            let total = ENVELOPE_BYTES.saturating_add(len);
            let mut c = sender.claim(total).map_err(|e| map_send_error(e, dest))?;
            write_envelope(&mut c, source, TxnId(0), &[]);
            self.local_sent += 1;
            return Ok(PortClaim {
                inner: ClaimInner::Local(c),
            });
        }
        let max = self.engine.config().link.message_bytes_max;
        if len > max {
            return Err(PortError::TooLong { len, max });
        }
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.resize(len, 0);
        Ok(PortClaim {
            inner: ClaimInner::Remote {
                port: self,
                dest,
                buf,
            },
        })
    }

    /// Sends one message to several ports (reliably, each over its own link or ring).
    /// Stops at the first error and reports which destination failed.
    pub fn send_many(&mut self, dests: &[Address], msg: &[u8]) -> Result<(), (Address, PortError)> {
        for &d in dests {
            self.send(d, msg).map_err(|e| (d, e))?;
        }
        Ok(())
    }

    /// Sends an unreliable datagram (failure detection and the like): no retransmission, no
    /// ordering; dropped if the destination has no room.
    pub fn send_datagram(&mut self, dest: Address, msg: &[u8]) -> Result<(), PortError> {
        if self.is_local(dest) {
            return self.local_try_send(dest, msg);
        }
        self.send_udp(dest, None, msg)
    }

    /// [`Port::send_datagram`], but a remote one waits to leave with the others queued so, in
    /// one `sendmmsg`, at [`Port::flush_datagrams`] (or when the batch is full); one to this
    /// host goes at once.
    pub fn queue_datagram(&mut self, dest: Address, msg: &[u8]) -> Result<(), PortError> {
        if self.is_local(dest) {
            return self.local_try_send(dest, msg);
        }
        let to = self.engine.socket_addr(dest)?;
        if self.engine.inject_loss() {
            return Ok(());
        }
        let cap = self.packet_room(msg);
        if !self.batch.has_room(cap, 1) {
            self.batch.send(&self.ep.socket);
        }
        // Built in the batch itself: no copy of the packet.
        let header = self.header(dest);
        let key = self.engine.shared.send_key();
        let numbering = number(&self.engine, &self.ep, dest, None, &[msg], true);
        self.batch.push_built(cap, to, |buf| {
            build_packet(buf, header, key.as_deref(), None, numbering, msg)
        })
    }

    /// Sends the datagrams [`Port::queue_datagram`] queued (one `sendmmsg`, or `sendto` for a
    /// lone one); how many the kernel took.
    pub fn flush_datagrams(&mut self) -> usize {
        self.batch.send(&self.ep.socket)
    }

    /// One packet holding `msg` (of transaction `txn`'s group, or a plain datagram) by UDP
    /// to `dest`'s socket.
    fn send_udp(&mut self, dest: Address, txn: Option<TxnId>, msg: &[u8]) -> Result<(), PortError> {
        let to = self.engine.socket_addr(dest)?;
        let (buf, n) = self.build_one(dest, txn, msg, true)?;
        if self.engine.inject_loss() {
            // As if lost on the wire.
            self.scratch = buf;
            return Ok(());
        }
        let r = crate::mmsg::send_to(&self.ep.socket, &buf[..n], &to);
        self.scratch = buf;
        r.map(|_| ()).map_err(PortError::Io)
    }

    /// Sends `msg` to `dest` alone as a message of transaction `txn`'s group: `dest` takes it
    /// in only if it joined `txn` (its engine checks, as for [`Port::multicast`]). Always by
    /// UDP to `dest`'s socket, on this host too, since the check is made there. Unreliable,
    /// like a datagram.
    pub fn send_datagram_txn(
        &mut self,
        dest: Address,
        txn: TxnId,
        msg: &[u8],
    ) -> Result<(), PortError> {
        self.send_udp(dest, Some(txn), msg)
    }

    /// [`Port::send_datagram`] of `parts` one after another, without copying them together
    /// first: into the destination's ring on this host, or one `sendmsg` of them otherwise.
    pub fn send_datagram_gather(
        &mut self,
        dest: Address,
        parts: &[&[u8]],
    ) -> Result<(), PortError> {
        if self.is_local(dest) {
            return self.local_try_send_parts(dest, parts);
        }
        send_udp_gather(&self.engine, &self.ep, dest, parts)
    }

    /// Builds, in the port's scratch buffer, a DATAGRAM (or, with a transaction, MULTICAST)
    /// packet holding just `msg`; returns the buffer (give it back to `scratch`) and the
    /// packet's length.
    /// `keep`: `dest` is the one destination, and a copy is kept for it while its incarnation
    /// is not known (with a key; see [`number`]).
    fn build_one(
        &mut self,
        dest: Address,
        txn: Option<TxnId>,
        msg: &[u8],
        keep: bool,
    ) -> Result<(Vec<u8>, usize), PortError> {
        let header = self.header(dest);
        let key = self.engine.shared.send_key();
        let numbering = number(&self.engine, &self.ep, dest, txn, &[msg], keep);
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(self.packet_room(msg), 0);
        match build_packet(&mut buf, header, key.as_deref(), txn, numbering, msg) {
            Ok(n) => Ok((buf, n)),
            Err(e) => {
                self.scratch = buf;
                Err(e)
            }
        }
    }

    /// Room a packet holding just `msg` is built in: a datagram may be longer than the link's
    /// packets, up to a UDP datagram.
    fn packet_room(&self, msg: &[u8]) -> usize {
        let need = HEADER_BYTES
            + MULTICAST_PREFIX_BYTES
            + NUMBERING_BYTES
            + RECORD_HEADER_BYTES
            + TRAILER_BYTES_MAX
            + msg.len();
        need.clamp(self.engine.config().link.packet_bytes_max, PACKET_BYTES_MAX)
    }

    fn header(&self, dest: Address) -> PacketHeader {
        header(&self.engine, &self.ep, dest)
    }

    /// Waits for a message in the ring, or a wake-up (a sink took something), up to
    /// `timeout`, running the engine meanwhile in invoker mode; true if a message is ready.
    pub(crate) fn wait_or_woken(&mut self, timeout: Duration) -> bool {
        self.wait(Some(timeout))
    }

    /// Joins a transaction's multicast group: from now on this port accepts messages
    /// multicast to `txn`. No message is sent.
    /// With IP multicast on, the port's group socket also joins the transaction's group
    /// address (a pure function of the id).
    pub fn join_txn(&mut self, txn: TxnId) -> Result<(), PortError> {
        let cluster = &self.engine.config().cluster;
        if cluster.multicast.enabled {
            let group = cluster.txn_group(txn);
            let sock = match self.ep.group_socket.get() {
                Some(s) => s,
                None => {
                    let s = crate::mmsg::group_socket(group.port())?;
                    let _ = self.ep.group_socket.set(s);
                    let s = self.ep.group_socket.get().expect("just set");
                    self.engine.watch(s.as_fd())?;
                    s
                }
            };
            if !self.in_group(group) {
                crate::mmsg::membership(sock, group, cluster.multicast.interface, true)?;
            }
        }
        self.ep.joined.write().expect("joined lock").insert(txn);
        Ok(())
    }

    /// Whether a transaction this port joined maps to IP multicast group `group` (several
    /// transactions may share one group address).
    fn in_group(&self, group: SocketAddr) -> bool {
        let cluster = &self.engine.config().cluster;
        self.ep
            .joined
            .read()
            .expect("joined lock")
            .iter()
            .any(|t| cluster.txn_group(*t) == group)
    }

    /// Leaves a transaction's group (at commit or abort).
    pub fn leave_txn(&mut self, txn: TxnId) -> Result<(), PortError> {
        let removed = self.ep.joined.write().expect("joined lock").remove(&txn);
        let cluster = &self.engine.config().cluster;
        if removed && cluster.multicast.enabled {
            let group = cluster.txn_group(txn);
            if let (false, Some(sock)) = (self.in_group(group), self.ep.group_socket.get()) {
                crate::mmsg::membership(sock, group, cluster.multicast.interface, false)?;
            }
        }
        Ok(())
    }

    /// Multicasts `msg` to the ports like `template` (same instance, type and server instance)
    /// that joined `txn`. With IP multicast on, one datagram goes to the transaction's group
    /// and `sites` is not needed. Otherwise the packet is built once and fanned out to the
    /// ports at `sites` with `sendmmsg` — by the engine thread when there is one, so the caller
    /// pays the same whatever the number of destinations. Ports that did not join drop it
    /// (counted). Best effort, like a datagram. Returns how many destinations it was handed
    /// to (1 for an IP multicast group).
    pub fn multicast(
        &mut self,
        txn: TxnId,
        template: Address,
        sites: &[u16],
        msg: &[u8],
    ) -> Result<usize, PortError> {
        let engine = self.engine.clone();
        let (buf, n) = self.build_one(template, Some(txn), msg, false)?;
        let r = self.multicast_packet(&engine, txn, template, sites, msg, &buf[..n]);
        self.scratch = buf;
        r
    }

    fn multicast_packet(
        &mut self,
        engine: &Engine,
        txn: TxnId,
        template: Address,
        sites: &[u16],
        msg: &[u8],
        packet: &[u8],
    ) -> Result<usize, PortError> {
        let cluster = &engine.config().cluster;
        if cluster.multicast.enabled {
            crate::mmsg::send_to(&self.ep.socket, packet, &cluster.txn_group(txn))?;
            return Ok(1);
        }
        // Every member but this port itself gets the packet at its socket, where its engine
        // checks the join; this port checks its own join set here.
        let mut to = std::mem::take(&mut self.fanout_to);
        to.clear();
        let mut delivered_here = 0;
        for &site in sites {
            let dest = Address { site, ..template };
            if dest != self.addr {
                if let Some(g) = self.ep.replay.as_ref() {
                    let mut g = g.lock().expect("replay lock");
                    g.keep_unless_known(engine.now(), dest, txn, &[msg]);
                }
                match engine.socket_addr(dest) {
                    Ok(a) => to.push(a),
                    Err(e) => {
                        self.fanout_to = to;
                        return Err(e.into());
                    }
                }
            } else if self.ep.joined.read().expect("joined lock").contains(&txn) {
                if let Ok(mut c) = self.ep.ring.claim(ENVELOPE_BYTES + msg.len()) {
                    write_envelope(&mut c, self.addr, txn, msg);
                    c.commit();
                    delivered_here = 1;
                }
            }
        }
        let handed = to.len();
        let r = if engine.queue_fanout(&self.ep, packet, &to) {
            Ok(handed)
        } else {
            crate::mmsg::send_same_to_many(&self.ep.socket, packet, &to)
        };
        self.fanout_to = to;
        Ok(delivered_here + r?)
    }

    /// Takes the next message if one is waiting.
    #[inline]
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Option<Received> {
        if self.engine.is_invoker() && !self.ring.has_ready() {
            self.engine.duty_cycle();
        }
        self.take(buf)
    }

    /// Takes the next message already in this port's ring, if any: the network is not read,
    /// not even on an invoker engine (for a caller that runs the duty cycle itself).
    #[inline]
    pub(crate) fn try_take(&mut self, buf: &mut [u8]) -> Option<Received> {
        self.take(buf)
    }

    /// Zero-copy take of the next message already in this port's ring, if any (the network
    /// is not read): hands it in place to `f`.
    pub fn try_take_with<R>(
        &mut self,
        f: impl FnOnce(Address, Option<TxnId>, &[u8]) -> R,
    ) -> Option<R> {
        let mut f = Some(f);
        loop {
            let r = self.ring.try_recv(|rec| {
                read_envelope(rec).map(|(source, txn, payload)| {
                    (f.take().expect("called once"))(source, (txn.0 != 0).then_some(txn), payload)
                })
            })?;
            if let Some(r) = r {
                self.received += 1;
                self.room_made();
                return Some(r);
            }
            self.short_record();
        }
    }

    /// A record too short for an envelope, written into the ring by something that is not
    /// txcast: taken out of the ring, dropped and counted.
    #[cold]
    fn short_record(&self) {
        self.ep.counters.dropped_bad.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    fn take(&mut self, buf: &mut [u8]) -> Option<Received> {
        loop {
            let r = self.ring.try_recv(|rec| {
                read_envelope(rec).map(|(source, txn, payload)| {
                    let len = payload.len().min(buf.len());
                    buf[..len].copy_from_slice(&payload[..len]);
                    Received {
                        source,
                        txn: (txn.0 != 0).then_some(txn),
                        len,
                        truncated: len < payload.len(),
                    }
                })
            })?;
            if let Some(r) = r {
                self.received += 1;
                self.room_made();
                return Some(r);
            }
            self.short_record();
        }
    }

    /// After taking a message: if the engine was holding messages back for lack of room in
    /// this port's ring, tell it there is room now.
    #[inline]
    fn room_made(&self) {
        // The ring's release of the slot ends with a SeqCst fence, which orders it before this
        // load (Dekker pairing with the engine's store of the flag and check for room).
        if self.ep.ring_blocked.load(Ordering::Relaxed)
            && self.ep.ring_blocked.swap(false, Ordering::SeqCst)
        {
            self.engine.wake();
        }
    }

    /// Zero-copy receive: hands the message in place to `f`.
    pub fn recv_with<R>(
        &mut self,
        timeout: Option<Duration>,
        f: impl FnOnce(Address, Option<TxnId>, &[u8]) -> R,
    ) -> Result<R, PortError> {
        if !self.wait(timeout) {
            return Err(PortError::Timeout);
        }
        let mut f = Some(f);
        loop {
            let r = self.ring.try_recv(|rec| {
                read_envelope(rec).map(|(source, txn, payload)| {
                    (f.take().expect("called once"))(source, (txn.0 != 0).then_some(txn), payload)
                })
            });
            match r {
                Some(Some(r)) => {
                    self.received += 1;
                    self.room_made();
                    return Ok(r);
                }
                Some(None) => self.short_record(),
                None => {
                    if !self.wait(timeout) {
                        return Err(PortError::Timeout);
                    }
                }
            }
        }
    }

    /// Waits for a message (per the port's idle strategy) up to `timeout` (forever if `None`).
    pub fn recv_timeout(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<Received, PortError> {
        // What the ring holds; the wait below reads the network (an invoker's read here would
        // nearly always find nothing, and cost a system call per message).
        if let Some(r) = self.take(buf) {
            return Ok(r);
        }
        let deadline = timeout.map(deadline_after);
        loop {
            let ready = self.wait_until(deadline);
            if let Some(r) = self.try_recv(buf) {
                return Ok(r);
            }
            if !ready && deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err(PortError::Timeout);
            }
        }
    }

    /// Blocking receive.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<Received, PortError> {
        self.recv_timeout(buf, None)
    }

    fn wait(&mut self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(deadline_after);
        self.wait_until(deadline)
    }

    /// Waits for a ready record until `deadline`; true if one is ready.
    fn wait_until(&mut self, deadline: Option<std::time::Instant>) -> bool {
        if self.engine.is_invoker() {
            return self.invoke_until(deadline);
        }
        self.ring.wait_until(self.cfg.idle, deadline)
    }

    /// Invoker mode: this thread is the engine. Spin on the duty cycle as the idle strategy
    /// says, then park in poll(2) on the engine's sockets (local senders ring a doorbell there)
    /// until traffic, the next link timer, or the deadline.
    fn invoke_until(&mut self, deadline: Option<std::time::Instant>) -> bool {
        let mut backoff = Backoff::for_strategy(self.cfg.idle);
        let mut fds = Vec::new();
        // After a sleep: whether traffic may still wait on a socket (a sleep in a read of the
        // socket took its datagram in already; reading again would find nothing). A parked
        // receiver does not read before its first sleep either: the sleep ends at once if a
        // datagram waits, and takes it in.
        let mut after_sleep: Option<bool> = (self.cfg.idle == IdleStrategy::Park).then_some(false);
        loop {
            match after_sleep.take() {
                None => self.engine.duty_cycle(),
                Some(readable) => self.engine.duty_cycle_after_sleep(readable),
            };
            if self.ring.has_ready() {
                return true;
            }
            if self.ring.take_interrupt() {
                // Woken (a sink took something in): the caller looks.
                return self.ring.has_ready();
            }
            match backoff.idle(deadline) {
                Idle::Expired => return self.ring.has_ready(),
                Idle::Park => {}
                what => {
                    Backoff::pause(what);
                    continue;
                }
            }
            let now = std::time::Instant::now();
            let timer = self.engine.park_plan(&mut fds);
            let mut wait = crate::engine::PARK_MAX;
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(now));
            }
            if let Some(t) = timer {
                wait = wait.min(Duration::from_nanos(
                    t.0.saturating_sub(self.engine.now().0),
                ));
            }
            if !wait.is_zero() {
                // The engine's sleep: in a read of the socket when this thread sleeps alone
                // (one system call a hop, as a blocking UDP receiver), else on its sockets.
                let (engine, ep) = (&self.engine, &self.ep);
                let mut readable = true;
                // Awake, it says so before it delivers what its read brought into its own
                // ring (else the delivery would ring its doorbell, a datagram to itself).
                self.ring.park_with(wait, |t| {
                    readable = engine.invoker_sleep_then(t, ep, || ep.ring.receiver_awake())
                });
                after_sleep = Some(readable);
            }
        }
    }

    /// The oldest "port unreachable" report not yet taken: the socket address (a peer's
    /// port) this port sent to and whose host answered that nothing is bound there (the
    /// process is gone or not started yet). Sooner than any silence says so; a process on a
    /// host that is down or cut off gets no such report. At most 16 are kept, the same
    /// address once.
    pub fn take_unreachable(&self) -> Option<SocketAddr> {
        if !self.ep.unreachable_waiting.load(Ordering::Acquire) {
            return None;
        }
        let mut q = self.ep.unreachable.lock().expect("unreachable lock");
        let r = q.pop_front();
        if q.is_empty() {
            self.ep.unreachable_waiting.store(false, Ordering::Release);
        }
        r
    }

    /// Counters of this port, its ring and its links.
    pub fn counters(&self) -> PortCounters {
        let c = &self.ep.counters;
        // Read first: every datagram it counts has its fate in what is read below.
        let packets_received = c.packets_received.load(Ordering::Acquire);
        let ring = self.ring.counters();
        let links = self.ep.links.lock().expect("links lock");
        let mut hist = vec![0u64; txcast_proto::pack::PACK_HISTOGRAM_BINS];
        for l in links.links() {
            for (h, x) in hist.iter_mut().zip(l.pack_histogram()) {
                *h += x;
            }
        }
        PortCounters {
            local_sent: self.local_sent,
            remote_sent: self.remote_sent,
            received: self.received,
            packets_received,
            packets_sent: c.packets_sent.load(Ordering::Relaxed),
            dropped_bad: c.dropped_bad.load(Ordering::Relaxed),
            refused: c.refusals(),
            dropped_misaddressed: c.dropped_misaddressed.load(Ordering::Relaxed),
            dropped_not_joined: c.dropped_not_joined.load(Ordering::Relaxed),
            dropped_ring_full: c.dropped_ring_full.load(Ordering::Relaxed),
            dropped_too_long: c.dropped_too_long.load(Ordering::Relaxed),
            dropped_link_limit: c.dropped_link_limit.load(Ordering::Relaxed),
            datagrams_received: c.datagrams_received.load(Ordering::Relaxed),
            multicast_received: c.multicast_received.load(Ordering::Relaxed),
            ring_full_rejections: ring.full_rejections,
            doorbells: c.doorbells.load(Ordering::Relaxed),
            unreachable_reports: c.unreachable_reports.load(Ordering::Relaxed),
            send_errors: c.send_errors.load(Ordering::Relaxed),
            reclaimed_dead_owner: self.ring.reclaimed(),
            replays: self
                .ep
                .replay
                .as_ref()
                .map(|g| g.lock().expect("replay lock").counters())
                .unwrap_or_default(),
            links: links.counters(),
            pack_histogram: hist,
        }
    }

    /// Waits until every remote message this port sent has been acknowledged and every
    /// acknowledgement it owes has gone out, running the engine meanwhile when nothing else
    /// does (always so in invoker mode, where held packets, retransmissions and delayed ACKs
    /// only go out while the application drives the engine). Call it before closing a port
    /// whose last messages matter.
    pub fn flush(&mut self, timeout: Duration) -> Result<(), PortError> {
        let deadline = deadline_after(timeout);
        let quiet = |p: &Port| p.ep.links.lock().expect("links lock").is_quiescent();
        let mut backoff = Backoff::new(Phase::Passes(0), Phase::Forever);
        while !quiet(self) {
            if self.engine.duty_cycle() > 0 {
                backoff.reset();
                if std::time::Instant::now() >= deadline {
                    return Err(PortError::Timeout);
                }
                continue;
            }
            match backoff.idle(Some(deadline)) {
                Idle::Expired => return Err(PortError::Timeout),
                what => Backoff::pause(what),
            }
        }
        Ok(())
    }

    /// Whether every remote message sent so far has been acknowledged.
    pub fn remote_idle(&self) -> bool {
        self.ep.links.lock().expect("links lock").is_idle()
    }

    /// `CreateGroup`: a new group with this port as its only member (and sequencer, or
    /// token holder). `cfg` chooses the ordering protocol: a `GroupConfig` for Amoeba's
    /// sequencer, an `OrderConfig` for totem, total, dynseq or dynord (see
    /// [`crate::group::GroupSpec`]).
    pub fn create_group(
        &self,
        cfg: impl Into<crate::group::GroupSpec>,
    ) -> Result<crate::group::Group, crate::group::GroupCallError> {
        crate::group::Group::start(&self.engine, &self.ep, cfg.into(), None)
    }

    /// `JoinGroup`: joins the group through `contact` (any member); returns once this port
    /// is a member. `cfg` must name the same group; the group's resilience degree applies.
    pub fn join_group(
        &self,
        cfg: impl Into<crate::group::GroupSpec>,
        contact: Address,
        timeout: Option<Duration>,
    ) -> Result<crate::group::Group, crate::group::GroupCallError> {
        let g = self.join_group_async(cfg, contact)?;
        g.wait_joined(timeout)?;
        Ok(g)
    }

    /// Starts joining and returns at once; [`crate::group::Group::wait_joined`] waits.
    pub fn join_group_async(
        &self,
        cfg: impl Into<crate::group::GroupSpec>,
        contact: Address,
    ) -> Result<crate::group::Group, crate::group::GroupCallError> {
        crate::group::Group::start(&self.engine, &self.ep, cfg.into(), Some(contact))
    }

    /// Closes the port: unregisters it from the engine and removes its segment.
    pub fn close(self) {}
}

impl Drop for Port {
    fn drop(&mut self) {
        self.ep.closed.store(true, Ordering::SeqCst);
        self.engine.unregister(self.addr);
    }
}

/// What [`Port::try_send_repeat`] did.
enum Repeat {
    Sent,
    Full,
    NotThisWay,
}

/// A message being built in place; see [`Port::claim`]. Derefs to its payload bytes.
pub struct PortClaim<'p> {
    inner: ClaimInner<'p>,
}

enum ClaimInner<'p> {
    Local(crate::shm::Claim<'p>),
    Remote {
        port: &'p mut Port,
        dest: Address,
        buf: Vec<u8>,
    },
}

impl PortClaim<'_> {
    /// Sends the whole claimed length.
    #[inline]
    pub fn commit(self) -> Result<(), PortError> {
        let n = self.len();
        self.commit_len(n)
    }

    /// Sends only the first `n` bytes (`n` beyond the claimed length is a bug and panics).
    #[inline]
    pub fn commit_len(self, n: usize) -> Result<(), PortError> {
        assert!(n <= self.len(), "commit_len({n}) beyond the claim");
        match self.inner {
            ClaimInner::Local(c) => {
                c.commit_len(ENVELOPE_BYTES + n);
                Ok(())
            }
            ClaimInner::Remote { port, dest, buf } => commit_remote(port, dest, buf, n),
        }
    }
}

/// The remote half of [`PortClaim::commit_len`], kept out of line so that the local half
/// inlines small.
fn commit_remote(
    port: &mut Port,
    dest: Address,
    mut buf: Vec<u8>,
    n: usize,
) -> Result<(), PortError> {
    buf.truncate(n);
    let r = port.send(dest, &buf);
    port.scratch = buf;
    r
}

impl std::ops::Deref for PortClaim<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.inner {
            ClaimInner::Local(c) => &c[ENVELOPE_BYTES..],
            ClaimInner::Remote { buf, .. } => buf,
        }
    }
}

impl std::ops::DerefMut for PortClaim<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.inner {
            ClaimInner::Local(c) => &mut c[ENVELOPE_BYTES..],
            ClaimInner::Remote { buf, .. } => buf,
        }
    }
}

fn map_send_error(e: SendError, dest: Address) -> PortError {
    match e {
        SendError::Full => PortError::Full,
        SendError::Timeout => PortError::Timeout,
        SendError::TooLong { len, max } => PortError::TooLong {
            len: len.saturating_sub(ENVELOPE_BYTES),
            max: max.saturating_sub(ENVELOPE_BYTES),
        },
        SendError::OwnerDead => PortError::OwnerDead(dest),
        SendError::Closed => PortError::Closed(dest),
    }
}

/// Writes into `buf` a DATAGRAM (or, with a transaction, MULTICAST) packet holding just `msg`,
/// numbered when `numbering` is given; its length.
fn build_packet(
    buf: &mut [u8],
    header: PacketHeader,
    key: Option<&txcast_proto::wire::PacketKey>,
    txn: Option<TxnId>,
    numbering: Option<Numbering>,
    msg: &[u8],
) -> Result<usize, PortError> {
    let mut w = match (txn, numbering) {
        (None, None) => PacketWriter::datagram(buf, header, key),
        (None, Some(n)) => PacketWriter::datagram_numbered(buf, header, key, n),
        (Some(t), None) => PacketWriter::multicast(buf, header, key, t),
        (Some(t), Some(n)) => PacketWriter::multicast_numbered(buf, header, key, t, n),
    };
    if !w.push(msg) {
        return Err(PortError::TooLong {
            len: msg.len(),
            max: w.room(),
        });
    }
    Ok(w.finish())
}

/// With a cluster key, the numbering of the next datagram (or, with `txn`, multicast) from
/// `ep`'s port to `dest`; a datagram to a port whose incarnation is not known is kept to go
/// again (`txcast_proto::replay`). With `keep`, a multicast to `dest` alone is kept likewise
/// (a fan-out keeps one copy per destination itself). `None` without a key.
pub(crate) fn number(
    engine: &Engine,
    ep: &Endpoint,
    dest: Address,
    txn: Option<TxnId>,
    parts: &[&[u8]],
    keep: bool,
) -> Option<Numbering> {
    let mut g = ep.replay.as_ref()?.lock().expect("replay lock");
    Some(match txn {
        None => g.number_datagram(engine.now(), dest, parts),
        Some(t) => {
            if keep {
                g.keep_unless_known(engine.now(), dest, t, parts);
            }
            g.number_multicast()
        }
    })
}

/// Sends again a message kept for `dest` until its incarnation was known (`number`): a
/// datagram, or a multicast of `txn` to `dest` alone.
pub(crate) fn send_kept(
    engine: &Engine,
    ep: &Endpoint,
    dest: Address,
    txn: Option<TxnId>,
    msg: &[u8],
) -> Result<(), PortError> {
    let Some(t) = txn else {
        return send_udp_gather(engine, ep, dest, &[msg]);
    };
    let to = engine.socket_addr(dest)?;
    let numbering = number(engine, ep, dest, Some(t), &[msg], false);
    let key = engine.shared.send_key();
    let mut buf = vec![0u8; PACKET_BYTES_MAX];
    let n = build_packet(
        &mut buf,
        header(engine, ep, dest),
        key.as_deref(),
        Some(t),
        numbering,
        msg,
    )?;
    if engine.inject_loss() {
        return Ok(());
    }
    crate::mmsg::send_to(&ep.socket, &buf[..n], &to)
        .map(|_| ())
        .map_err(PortError::Io)
}

/// A hello from `ep`'s port to `dest` of incarnation `dst_incarnation`, at `to`: a numbered
/// datagram without records that teaches `dest` this port's incarnation and makes its window
/// for this port; `ask` asks for one back (`FLAG_ACK_NOW`).
pub(crate) fn send_hello(
    engine: &Engine,
    ep: &Endpoint,
    dest: Address,
    dst_incarnation: u64,
    to: SocketAddr,
    ask: bool,
) {
    let Some(guard) = ep.replay.as_ref() else {
        return;
    };
    let n = guard
        .lock()
        .expect("replay lock")
        .number_hello(dst_incarnation);
    let key = engine.shared.send_key();
    let mut buf = [0u8; HEADER_BYTES + NUMBERING_BYTES + TRAILER_BYTES_MAX];
    let mut w =
        PacketWriter::datagram_numbered(&mut buf, header(engine, ep, dest), key.as_deref(), n);
    if ask {
        w.set_flags(txcast_proto::wire::FLAG_ACK_NOW);
    }
    let len = w.finish();
    if engine.inject_loss() {
        return;
    }
    if crate::mmsg::send_to(&ep.socket, &buf[..len], &to).is_ok() {
        ep.counters.packets_sent.fetch_add(1, Ordering::Relaxed);
    }
}

/// The header of a datagram from `ep`'s port to `dest`.
fn header(engine: &Engine, ep: &Endpoint, dest: Address) -> PacketHeader {
    PacketHeader {
        kind: Kind::Datagram,
        flags: 0,
        cluster: engine.config().cluster.cluster,
        incarnation: ep.incarnation,
        source: ep.addr,
        destination: dest,
    }
}

/// One datagram of `parts` (at most 4) by UDP from `ep`'s socket to `dest`'s, without copying
/// them together first (one `sendmsg`).
pub(crate) fn send_udp_gather(
    engine: &Engine,
    ep: &Endpoint,
    dest: Address,
    parts: &[&[u8]],
) -> Result<(), PortError> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let to = engine.socket_addr(dest)?;
    let key = engine.shared.send_key();
    if let Some(k) = key.as_deref().filter(|k| k.seals()) {
        return send_sealed_gather(engine, ep, dest, to, k, parts);
    }
    let numbering = number(engine, ep, dest, None, parts, true);
    let mut head = [0u8; txcast_proto::wire::GATHER_HEAD_BYTES];
    let mut mac = [0u8; MAC_BYTES];
    let (head_len, mac_len, _) = txcast_proto::wire::datagram_gather(
        &mut head,
        &mut mac,
        header(engine, ep, dest),
        key.as_deref(),
        numbering,
        parts,
    )
    .ok_or(PortError::TooLong {
        len,
        max: PACKET_BYTES_MAX - txcast_proto::wire::GATHER_HEAD_BYTES - MAC_BYTES,
    })?;
    if engine.inject_loss() {
        return Ok(());
    }
    let mut all: [&[u8]; 6] = [&[]; 6];
    if parts.len() > 4 {
        return Err(PortError::TooLong {
            len: parts.len(),
            max: 4,
        });
    }
    all[0] = &head[..head_len];
    all[1..1 + parts.len()].copy_from_slice(parts);
    all[1 + parts.len()] = &mac[..mac_len];
    crate::mmsg::send_gather(&ep.socket, &all[..2 + parts.len()], &to)
        .map(|_| ())
        .map_err(PortError::Io)
}

/// [`send_udp_gather`] under a sealing key: encryption needs the payload in one buffer, so the
/// parts are copied into the packet (bounded by a datagram's size).
fn send_sealed_gather(
    engine: &Engine,
    ep: &Endpoint,
    dest: Address,
    to: std::net::SocketAddr,
    key: &txcast_proto::wire::PacketKey,
    parts: &[&[u8]],
) -> Result<(), PortError> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let max = PACKET_BYTES_MAX - txcast_proto::wire::GATHER_HEAD_BYTES - key.trailer_bytes();
    if len > max {
        return Err(PortError::TooLong { len, max });
    }
    let mut buf = vec![0u8; txcast_proto::wire::GATHER_HEAD_BYTES + len + key.trailer_bytes()];
    let numbering = number(engine, ep, dest, None, parts, true);
    let h = header(engine, ep, dest);
    let mut w = match numbering {
        Some(n) => PacketWriter::datagram_numbered(&mut buf, h, Some(key), n),
        None => PacketWriter::datagram(&mut buf, h, Some(key)),
    };
    if !w.push_parts(parts) {
        return Err(PortError::TooLong { len, max });
    }
    let n = w.finish();
    if engine.inject_loss() {
        return Ok(());
    }
    crate::mmsg::send_gather(&ep.socket, &[&buf[..n]], &to)
        .map(|_| ())
        .map_err(PortError::Io)
}

/// A refused remote send, as the port says it.
fn send_error(dest: Address, e: TableSendError) -> PortError {
    match e {
        TableSendError::Full => PortError::Full,
        TableSendError::Unreachable => PortError::Unreachable(dest),
        TableSendError::TooLong { len, max } => PortError::TooLong { len, max },
    }
}
