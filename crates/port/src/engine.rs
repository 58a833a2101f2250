//! The engine: one loop per process that runs the sans-IO link machines over real UDP sockets,
//! fires their timers and delivers what arrives into each port's shared-memory ring.
//!
//! Two threading modes (Aeron's are the model): `Thread` runs the duty cycle on its own thread
//! with an idle strategy of spin, then yield, then park in `poll(2)` on the sockets and a wake-up
//! eventfd; `Invoker` runs no thread, and the application's own `recv` calls drive the duty cycle
//! (busy-polling, for the lowest latency when the application thread spins anyway).
//! Applications never call the engine directly: they hold [`crate::Port`]s.

use crate::extension::Armed;
use crate::idle::{Backoff, Idle, Phase};
use crate::naming::ClusterConfig;
use crate::shm::RingSender;
use rustix::event::epoll;
use std::collections::{BTreeSet, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use txcast_proto::link::{LinkConfig, LinkEvent, LinkIo, LinkTable, TableRefusal};
use txcast_proto::wire::{
    parse_datagram, ClusterKey, DatagramBody, KeyRing, KeyRingError, Kind, MulticastBody, Packet,
    PacketHeader, PacketKey, Records, WireError,
};
use txcast_proto::{Address, Instant, TxnId};

/// Bytes each message carries in a ring ahead of its payload: the source address and the
/// transaction id (zero for point-to-point messages).
pub const ENVELOPE_BYTES: usize = 16;
/// Moved servers one engine records, at most.
pub const LOCATIONS_MAX: usize = 4096;
/// Datagrams one duty cycle reads from one socket before moving on.
pub const RECV_BATCH_MAX: usize = 64;
/// Reports of send errors one duty cycle takes from one socket's error queue (the kernel
/// bounds the queue by the socket's receive buffer; the rest wait for the next cycle).
pub const SEND_ERRORS_PER_CYCLE: usize = 64;
/// Longest the engine thread parks when no link timer is pending (new timers wake it early).
pub const PARK_MAX: Duration = Duration::from_millis(25);
/// How often a busy port's link counters are published for `txcast stat`.
const LINK_PUBLISH_EVERY: Duration = Duration::from_millis(1);
/// Times the engine thread yields its core, after spinning and before parking.
pub const ENGINE_IDLE_YIELDS: u32 = 2;

/// The engine's longest sleep while an endpoint it serves is held by its owner.
const SERVICE_HELD_NAP: Duration = Duration::from_millis(1);
/// The epoll token of the wake-up eventfd (sockets are registered under their descriptor).
const WAKE_TOKEN: u64 = u64::MAX;
/// The receive timeout of an invoker engine's sockets: the longest an application thread
/// sleeps in a read of one (the kernel rounds it up to its clock ticks). Short enough that the
/// next timer is rarely sooner, which would rule the read out.
pub const BLOCKING_SLEEP: Duration = Duration::from_millis(5);
/// Longest an application thread of an invoker engine sleeps on the sockets while another
/// one sleeps there too (see `Engine::invoker_sleep`).
pub const SHARED_SLEEP_MAX: Duration = Duration::from_millis(1);
/// Links one port keeps to remote peers.
pub const LINKS_PER_PORT_MAX: usize = 4096;

/// How the engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineMode {
    /// A dedicated engine thread (the default).
    Thread,
    /// No thread: the application's `recv` calls run the duty cycle.
    Invoker,
}

/// Whether a duty cycle reads the sockets (see [`Engine::duty_cycle_after_sleep`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Poll them (they may well be empty).
    Poll,
    /// Their epoll set reported traffic.
    Ready,
    /// Leave them alone.
    No,
}

/// Everything the engine needs to start.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub cluster: ClusterConfig,
    pub link: LinkConfig,
    pub mode: EngineMode,
    /// How long the engine thread keeps polling after its last work before it yields, then
    /// parks in poll(2).
    pub idle_spin: Duration,
    /// Fault injection for tests and demos: drop this fraction of outgoing remote packets
    /// (link packets and datagrams), chosen by a generator seeded with `loss_seed`.
    pub loss_injection: f64,
    pub loss_seed: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cluster: ClusterConfig::default(),
            link: LinkConfig::default(),
            mode: EngineMode::Thread,
            idle_spin: Duration::from_micros(50),
            loss_injection: 0.0,
            loss_seed: 1,
        }
    }
}

/// Why the engine refused a datagram as bad (each one is also counted in `dropped_bad`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not a txcast header: too short or long, wrong magic, version, kind, flags, reserved
    /// fields or length, or longer than the engine's buffer.
    Malformed = 0,
    Checksum = 1,
    WrongCluster = 2,
    MacMissing = 3,
    MacMismatch = 4,
    MacUnexpected = 5,
    /// A valid header whose body breaks its kind's rules.
    Body = 6,
    /// A key id that is not among the keys accepted (a retired key, or another cluster's).
    UnknownKey = 7,
    /// An AEAD tag that does not verify under the named key.
    TagMismatch = 8,
    /// Sealed where the named key only MACs, or MAC'd where it seals.
    WrongMode = 9,
}

const REFUSALS: usize = 10;

/// A port logs refused datagrams at most once a second per reason (a flood of garbage must not
/// become a flood of log lines); each line counts what was refused since the one before.
const REFUSAL_LOG_INTERVAL_NS: u64 = 1_000_000_000;

/// A port looks at its links' retransmission counts at most once a second, where it publishes
/// link counters (off the per-packet path), and logs a peer when more than
/// `RETRANSMIT_BURST_MIN` messages were retransmitted to it since the last look.
const RETRANSMIT_CHECK_INTERVAL_NS: u64 = 1_000_000_000;
const RETRANSMIT_BURST_MIN: u64 = 16;
/// Peers named in one look at most; the others in a burst are summed in one more line.
const RETRANSMIT_LOG_PEERS_MAX: usize = 8;

impl Refusal {
    /// The reason as the log names it (the field names of [`Refusals`]).
    fn name(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Checksum => "checksum",
            Refusal::WrongCluster => "wrong_cluster",
            Refusal::MacMissing => "mac_missing",
            Refusal::MacMismatch => "mac_mismatch",
            Refusal::MacUnexpected => "mac_unexpected",
            Refusal::Body => "body",
            Refusal::UnknownKey => "unknown_key",
            Refusal::TagMismatch => "tag_mismatch",
            Refusal::WrongMode => "wrong_mode",
        }
    }

    fn of(e: WireError) -> Refusal {
        match e {
            WireError::ChecksumMismatch => Refusal::Checksum,
            WireError::WrongCluster { .. } => Refusal::WrongCluster,
            WireError::MacMissing => Refusal::MacMissing,
            WireError::MacMismatch => Refusal::MacMismatch,
            WireError::MacUnexpected => Refusal::MacUnexpected,
            WireError::UnknownKeyId(_) => Refusal::UnknownKey,
            WireError::TagMismatch => Refusal::TagMismatch,
            WireError::SealMissing | WireError::SealUnexpected | WireError::Sealed => {
                Refusal::WrongMode
            }
            _ => Refusal::Malformed,
        }
    }
}

/// Datagrams a port refused as bad, by reason (their sum is `PortCounters::dropped_bad` less
/// the ring records counted there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Not a txcast header (length, magic, version, kind, flags, reserved fields), or a
    /// datagram longer than any packet.
    pub malformed: u64,
    /// The CRC-32 does not match.
    pub checksum: u64,
    /// Another cluster's packet.
    pub wrong_cluster: u64,
    /// A cluster key is set and the packet has no MAC.
    pub mac_missing: u64,
    /// The MAC does not verify under the cluster key.
    pub mac_mismatch: u64,
    /// A MAC where no key is set.
    pub mac_unexpected: u64,
    /// A valid header with a body that breaks its kind's rules.
    pub body: u64,
    /// A MAC or tag under a key id this node does not accept (a retired key, a key not yet
    /// installed here, or another cluster's).
    pub unknown_key: u64,
    /// A sealed packet whose AEAD tag does not verify under the key it names (wrong key
    /// bytes under that id, or altered packet).
    pub tag_mismatch: u64,
    /// Sealed under a key this node holds as MAC-only, or MAC'd under one it holds as sealing.
    pub wrong_mode: u64,
}

impl Refusals {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.malformed
            + self.checksum
            + self.wrong_cluster
            + self.mac_missing
            + self.mac_mismatch
            + self.mac_unexpected
            + self.body
            + self.unknown_key
            + self.tag_mismatch
            + self.wrong_mode
    }
}

/// What an endpoint (the network side of a port) has seen.
#[derive(Debug, Default)]
pub(crate) struct EndpointCounters {
    pub packets_received: AtomicU64,
    pub packets_sent: AtomicU64,
    pub dropped_bad: AtomicU64,
    /// `dropped_bad`'s datagrams by [`Refusal`].
    pub refused: [AtomicU64; REFUSALS],
    /// Per [`Refusal`]: when (engine clock, nanoseconds; 0 for never) the last log line about
    /// it was written, and its count in `refused` then.
    refusal_logged_at: [AtomicU64; REFUSALS],
    refusal_logged: [AtomicU64; REFUSALS],
    pub dropped_misaddressed: AtomicU64,
    pub dropped_not_joined: AtomicU64,
    pub dropped_ring_full: AtomicU64,
    pub dropped_too_long: AtomicU64,
    pub dropped_link_limit: AtomicU64,
    pub datagrams_received: AtomicU64,
    pub multicast_received: AtomicU64,
    pub doorbells: AtomicU64,
    /// "Port unreachable" answers to datagrams the port sent (see [`Engine::take_send_errors`]).
    pub unreachable_reports: AtomicU64,
    /// Other errors the kernel reported about datagrams the port sent.
    pub send_errors: AtomicU64,
    /// When the port's link counters were last published (engine clock, ns).
    pub links_published_at: AtomicU64,
    /// When the links' retransmissions were last looked at (engine clock, ns; 0 for never),
    /// and each link's count then (one entry per link, so bounded like the links).
    retransmits_checked_at: AtomicU64,
    retransmits_seen: Mutex<HashMap<Address, u64>>,
}

impl EndpointCounters {
    /// Counts a datagram refused as bad, by its reason, and logs it (rate-limited) for the
    /// port at `port`.
    pub fn refuse(&self, why: Refusal, port: Address, now: Instant) {
        self.dropped_bad.fetch_add(1, Ordering::Relaxed);
        let total = self.refused[why as usize].fetch_add(1, Ordering::Relaxed) + 1;
        let i = why as usize;
        let last = self.refusal_logged_at[i].load(Ordering::Relaxed);
        if last != 0 && now.0.saturating_sub(last) < REFUSAL_LOG_INTERVAL_NS {
            return;
        }
        // One thread wins the right to write this second's line.
        let stamp = now.0.max(1);
        if self.refusal_logged_at[i]
            .compare_exchange(last, stamp, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            let count = total.saturating_sub(self.refusal_logged[i].swap(total, Ordering::Relaxed));
            tracing::warn!(
                port = %port,
                reason = why.name(),
                count,
                "refused datagrams (count since the last line for this reason)"
            );
        }
    }

    pub fn refusals(&self) -> Refusals {
        let r = |w: Refusal| self.refused[w as usize].load(Ordering::Relaxed);
        Refusals {
            malformed: r(Refusal::Malformed),
            checksum: r(Refusal::Checksum),
            wrong_cluster: r(Refusal::WrongCluster),
            mac_missing: r(Refusal::MacMissing),
            mac_mismatch: r(Refusal::MacMismatch),
            mac_unexpected: r(Refusal::MacUnexpected),
            body: r(Refusal::Body),
            unknown_key: r(Refusal::UnknownKey),
            tag_mismatch: r(Refusal::TagMismatch),
            wrong_mode: r(Refusal::WrongMode),
        }
    }
}

/// The network side of one port, shared between the port's owner and the engine.
pub(crate) struct Endpoint {
    pub addr: Address,
    /// Takes packets whose source socket is not where its address maps (an oracle, which
    /// moved servers register with).
    pub trust_moved_sources: bool,
    /// This port's incarnation: its peers refuse packets from earlier ones.
    pub incarnation: u64,
    pub socket: UdpSocket,
    /// Socket joined to the IP multicast groups of this port's transactions (made at the
    /// first join when the cluster uses IP multicast).
    pub group_socket: OnceLock<UdpSocket>,
    pub links: Mutex<LinkTable>,
    pub ring: RingSender,
    pub joined: RwLock<BTreeSet<TxnId>>,
    pub counters: EndpointCounters,
    pub closed: AtomicBool,
    /// The last read found more than one datagram waiting: read in batches.
    pub recv_busy: AtomicBool,
    /// `socket` is in the engine's epoll set. An invoker engine adds it only when one of its
    /// threads first sleeps on the set (`Engine::watch_pending`): while it is in a set, every
    /// datagram that arrives and every one sent (as its buffer frees) also runs the set's
    /// wake-up callback, a cost on each hop that a busy-polling port need not pay.
    pub watched: AtomicBool,
    /// The engine holds messages for this port because its ring was full; the application
    /// clears it (and wakes the engine) when it takes a message.
    pub ring_blocked: AtomicBool,
    /// Where `socket` is bound.
    pub sockaddr: SocketAddr,
    /// The socket blocks (invoker mode) and a read waits at most this long for a datagram.
    pub blocking_sleep: Option<Duration>,
    /// With a cluster key: the replay windows of the sources of this port's datagrams and
    /// multicasts, and what it knows of its peers' incarnations (`txcast_proto::replay`).
    /// Lock order: after `links`.
    pub replay: Option<Mutex<txcast_proto::replay::ReplayGuard>>,
    /// The services the engine runs for this port (groups, a served RPC endpoint or module
    /// host, a long-message receiver).
    pub extensions: crate::extension::Extensions,
    /// Wakes the port's owner when a sink took something.
    pub waker: crate::shm::RingWaker,
    /// "Port unreachable" reports not yet taken by the port's owner
    /// ([`crate::Port::take_unreachable`]), newest last, at most [`UNREACHABLE_KEPT`].
    pub unreachable: Mutex<std::collections::VecDeque<SocketAddr>>,
    /// `unreachable` holds a report (read without its lock).
    pub unreachable_waiting: AtomicBool,
}

/// The "port unreachable" reports a port keeps for its owner; older ones are dropped.
pub(crate) const UNREACHABLE_KEPT: usize = 16;

pub(crate) struct Shared {
    pub cfg: EngineConfig,
    /// The cluster's keys, when it has one: what packets are sent with and checked against.
    /// Lock order: `endpoints`, then this, then an endpoint's `links`.
    pub keys: Option<RwLock<KeyRing>>,
    /// The last incarnation handed to a port of this process.
    last_incarnation: AtomicU64,
    origin: std::time::Instant,
    pub endpoints: RwLock<Vec<Arc<Endpoint>>>,
    stop: AtomicBool,
    duty: Mutex<crate::mmsg::RecvBatch>,
    /// Duty cycles run (each a read of the sockets).
    cycles: AtomicU64,
    wake_fd: OwnedFd,
    /// An epoll set of every socket the engine reads. Sleepers poll this one descriptor rather
    /// than the sockets themselves: a poll(2) in progress pins the files it waits on, so a
    /// port closed during it would keep its address bound until the sleeper woke, while epoll
    /// holds no reference and forgets a socket the moment it closes.
    epoll_fd: OwnedFd,
    /// Serialises `Engine::watch_pending`.
    watching: Mutex<()>,
    /// Steps of services that panicked.
    pub services_failed: AtomicU64,
    /// [`crate::mmsg::SENDS_FOUND_REPORTS`] when this engine last emptied its sockets' error
    /// queues.
    pub reports_seen: AtomicU64,
    /// Nanoseconds (engine clock) until which the engine thread sleeps; `u64::MAX` while awake.
    /// In invoker mode: the earliest wake-up announced by the threads asleep in
    /// [`Engine::invoker_sleep`] (see `sleepers`).
    sleeping_until: AtomicU64,
    /// Invoker mode: how many threads sleep in [`Engine::invoker_sleep`], and the earliest
    /// wake-up they announced (`u64::MAX` with none). One that wakes leaves the earliest as it
    /// is while others still sleep (they may wake later than it says, which is why a sleep is
    /// bounded by `PARK_MAX` regardless).
    sleepers: Mutex<(usize, u64)>,
    /// Invoker mode: `wake_fd` was written since a duty cycle last drained it. The eventfd is
    /// then in the epoll set, so it must not stay readable or every sleep would end at once.
    wake_pending: AtomicBool,
    /// Invoker mode: a thread sleeps in a read of the socket at `blocked_addr` (see
    /// `Engine::invoker_sleep`).
    blocked: AtomicBool,
    blocked_addr: Mutex<Option<SocketAddr>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    loss: Mutex<txcast_proto::rng::Rng>,
    pub injected_losses: AtomicU64,
    /// Servers that moved (the oracle said so): where they are instead of where the pure
    /// mapping puts them. At most `LOCATIONS_MAX`.
    locations: RwLock<HashMap<Address, SocketAddr>>,
    has_locations: AtomicBool,
    /// Multicasts handed to the engine thread for fan-out.
    fanout: Mutex<FanoutQueue>,
    /// Jobs in `fanout`, readable without the lock.
    fanout_jobs: AtomicUsize,
}

/// One packet for many destinations, sent by the engine thread with `sendmmsg`.
pub(crate) struct FanoutJob {
    pub ep: Arc<Endpoint>,
    pub packet: Vec<u8>,
    pub to: Vec<SocketAddr>,
}

/// Bounded queue of fan-out jobs, with their buffers recycled.
#[derive(Default)]
pub(crate) struct FanoutQueue {
    jobs: std::collections::VecDeque<FanoutJob>,
    spare: Vec<(Vec<u8>, Vec<SocketAddr>)>,
}

/// Multicasts queued for the engine thread at most; past it the caller fans out itself.
pub const FANOUT_QUEUE_MAX: usize = 256;

/// A handle on the engine; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    pub(crate) shared: Arc<Shared>,
}

static EMBEDDED: OnceLock<Engine> = OnceLock::new();

impl Engine {
    /// Starts an engine with `cfg`.
    pub fn start(cfg: EngineConfig) -> std::io::Result<Engine> {
        cfg.cluster
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        cfg.link
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let wake_fd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )?;
        let epoll_fd = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let shared = Arc::new(Shared {
            keys: cfg
                .cluster
                .packet_key()
                .map(|k| RwLock::new(KeyRing::new(k.with_counter_start(random_u64())))),
            last_incarnation: AtomicU64::new(0),
            origin: std::time::Instant::now(),
            endpoints: RwLock::new(Vec::new()),
            stop: AtomicBool::new(false),
            cycles: AtomicU64::new(0),
            // Every datagram a port may be sent (up to a UDP datagram's 65,507 bytes: long
            // messages' fragments), whatever the link's packet size.
            duty: Mutex::new(crate::mmsg::RecvBatch::new(
                crate::mmsg::RECV_BATCH_SLOTS_MAX,
                txcast_proto::wire::PACKET_BYTES_MAX,
            )),
            wake_fd,
            epoll_fd,
            watching: Mutex::new(()),
            sleeping_until: AtomicU64::new(u64::MAX),
            sleepers: Mutex::new((0, u64::MAX)),
            wake_pending: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            blocked_addr: Mutex::new(None),
            thread: Mutex::new(None),
            loss: Mutex::new(txcast_proto::rng::Rng::new(cfg.loss_seed)),
            injected_losses: AtomicU64::new(0),
            services_failed: AtomicU64::new(0),
            reports_seen: AtomicU64::new(0),
            locations: RwLock::new(HashMap::new()),
            has_locations: AtomicBool::new(false),
            fanout: Mutex::new(FanoutQueue::default()),
            fanout_jobs: AtomicUsize::new(0),
            cfg,
        });
        let engine = Engine { shared };
        if engine.shared.cfg.mode == EngineMode::Invoker {
            // Application threads sleep on the epoll set: the eventfd in it lets a call on
            // another thread that arms an earlier timer wake them (see `invoker_sleep`).
            let sh = &engine.shared;
            epoll::add(
                &sh.epoll_fd,
                &sh.wake_fd,
                epoll::EventData::new_u64(WAKE_TOKEN),
                epoll::EventFlags::IN,
            )?;
        }
        if engine.shared.cfg.mode == EngineMode::Thread {
            let e = engine.clone();
            let h = std::thread::Builder::new()
                .name("txcast-engine".into())
                .spawn(move || e.run())?;
            *engine.shared.thread.lock().expect("engine lock") = Some(h);
        }
        Ok(engine)
    }

    /// The process's embedded engine with the default configuration (every site on loopback),
    /// started on first use.
    pub fn embedded() -> std::io::Result<Engine> {
        if let Some(e) = EMBEDDED.get() {
            return Ok(e.clone());
        }
        let e = Engine::start(EngineConfig::default())?;
        Ok(EMBEDDED.get_or_init(|| e).clone())
    }

    pub fn config(&self) -> &EngineConfig {
        &self.shared.cfg
    }

    /// A new incarnation for a port being opened: milliseconds since the Unix epoch, and
    /// strictly greater than any this process handed out before, so a port closed and opened
    /// again is a new incarnation to its peers even within one millisecond.
    pub(crate) fn next_incarnation(&self) -> u64 {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut last = self.shared.last_incarnation.load(Ordering::SeqCst);
        loop {
            let next = now_ms.max(last + 1);
            match self.shared.last_incarnation.compare_exchange(
                last,
                next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// The engine clock.
    pub fn now(&self) -> Instant {
        Instant(self.shared.origin.elapsed().as_nanos() as u64)
    }

    pub(crate) fn register(&self, ep: Arc<Endpoint>) -> std::io::Result<()> {
        let addr = ep.addr;
        if self.is_invoker() {
            let mut eps = self.shared.endpoints.write().expect("engine lock");
            self.shared.key_to(&ep);
            eps.push(ep);
            drop(eps);
            // A thread asleep on the epoll set wakes and goes back to sleep with this socket
            // in it (see `watch_pending`).
            self.wake_invoker_sleepers();
            return Ok(());
        }
        ep.watched.store(true, Ordering::SeqCst);
        {
            let mut eps = self.shared.endpoints.write().expect("engine lock");
            self.shared.key_to(&ep);
            eps.push(ep.clone());
        }
        self.watch(ep.socket.as_fd())
            .inspect_err(|_| self.unregister(addr))
    }

    /// Invoker mode, before a thread sleeps on the epoll set: adds the ports' sockets that are
    /// not in it yet. A socket with datagrams already waiting is ready the moment it is added.
    fn watch_pending(&self) {
        let eps = self.shared.endpoints.read().expect("engine lock");
        for ep in eps.iter() {
            if ep.watched.load(Ordering::Acquire) {
                continue;
            }
            let _one = self.shared.watching.lock().expect("watching lock");
            if !ep.watched.load(Ordering::Acquire) && self.epoll_add(ep.socket.as_fd()).is_ok() {
                ep.watched.store(true, Ordering::Release);
            }
        }
    }

    pub(crate) fn unregister(&self, addr: Address) {
        let mut eps = self.shared.endpoints.write().expect("engine lock");
        for ep in eps.iter().filter(|e| e.addr == addr) {
            if ep.watched.load(Ordering::Acquire) {
                self.unwatch(ep.socket.as_fd());
            }
            if let Some(g) = ep.group_socket.get() {
                self.unwatch(g.as_fd());
            }
        }
        eps.retain(|e| e.addr != addr);
    }

    /// Adds a socket to the set sleepers wait on, and wakes the engine thread to read it.
    pub(crate) fn watch(&self, fd: BorrowedFd<'_>) -> std::io::Result<()> {
        self.epoll_add(fd)?;
        self.wake();
        Ok(())
    }

    /// Adds a socket to the epoll set (its token is its descriptor).
    fn epoll_add(&self, fd: BorrowedFd<'_>) -> std::io::Result<()> {
        let token = epoll::EventData::new_u64(fd.as_raw_fd() as u64);
        epoll::add(&self.shared.epoll_fd, fd, token, epoll::EventFlags::IN)?;
        Ok(())
    }

    fn unwatch(&self, fd: BorrowedFd<'_>) {
        // A socket that was never added, or is gone, is not in the set: nothing to undo.
        let _ = epoll::delete(&self.shared.epoll_fd, fd);
    }

    /// Wakes a parked engine thread (in invoker mode: a thread in [`Engine::invoker_sleep`]).
    pub(crate) fn wake(&self) {
        // By hand, not `rustix::io::write`: on the wake-up path of every parked engine, and
        // side by side the rustix call cost DebitCredit's three sites 5 % more CPU per
        // transfer (6 pairs, `txcast dc --clients 512`). A full counter (never, in
        // practice) is already a wake-up: the result can be ignored.
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the eventfd this engine owns.
        unsafe {
            libc::write(
                self.shared.wake_fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
        if self.is_invoker() {
            // After the write: a duty cycle that sees the flag drains what it wrote.
            self.shared.wake_pending.store(true, Ordering::SeqCst);
            if self.shared.blocked.load(Ordering::SeqCst) {
                // A thread sleeps in a read of its socket: ring there (a datagram the engine
                // counts and drops).
                if let Some(to) = *self.shared.blocked_addr.lock().expect("blocked lock") {
                    crate::shm::send_doorbell(to);
                }
            }
        }
    }

    /// Invoker mode: drains the eventfd if `wake` wrote it since the last drain.
    fn take_wake(&self) {
        if self.shared.wake_pending.load(Ordering::Relaxed)
            && self.shared.wake_pending.swap(false, Ordering::SeqCst)
        {
            self.drain_wake_fd();
        }
    }

    fn drain_wake_fd(&self) {
        // Non-blocking: nothing to drain is `EAGAIN`, which is fine. By hand, like `wake`.
        let mut drain = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from the eventfd this engine owns.
        unsafe {
            libc::read(
                self.shared.wake_fd.as_raw_fd(),
                &mut drain as *mut u64 as *mut libc::c_void,
                8,
            )
        };
    }

    /// Wakes the engine thread if it sleeps (or is about to: it announces a sleep before it
    /// looks at its services one last time).
    pub(crate) fn wake_if_sleeping(&self) {
        if self.shared.sleeping_until.load(Ordering::SeqCst) != u64::MAX {
            self.wake();
        }
    }

    /// Invoker mode: wakes the application threads asleep in [`Engine::invoker_sleep`], if
    /// any (one thread alone never finds any: it is the one calling).
    pub(crate) fn wake_invoker_sleepers(&self) {
        if self.is_invoker() && self.shared.sleeping_until.load(Ordering::SeqCst) != u64::MAX {
            self.wake();
        }
    }

    /// Wakes the engine thread if it sleeps past `deadline` (a timer an application call armed).
    pub(crate) fn wake_for(&self, deadline: Option<Instant>) {
        if let Some(t) = deadline {
            let s = self.shared.sleeping_until.load(Ordering::SeqCst);
            if s != u64::MAX && s > t.0 {
                self.wake();
            }
        }
    }

    /// For an application thread about to park in invoker mode: what to poll for traffic on
    /// any socket the engine reads (into `fds`) and the earliest link deadline
    /// (`Instant::ZERO` if work is waiting).
    pub(crate) fn park_plan(&self, fds: &mut Vec<libc::pollfd>) -> Option<Instant> {
        fds.clear();
        fds.push(libc::pollfd {
            fd: self.shared.epoll_fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        self.next_deadline()
    }

    /// The earliest link or group deadline of any port (`Instant::ZERO` if work is waiting).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let mut deadline: Option<Instant> = None;
        let eps = self.shared.endpoints.read().expect("engine lock");
        for ep in eps.iter() {
            let links = ep.links.lock().expect("links lock");
            if links.is_blocked() && !ep.ring_blocked.load(Ordering::SeqCst) {
                // Held deliveries and room in the ring (seen by `run_links` after it raised
                // the flag, so no `room_made` will wake us): run again before sleeping.
                return Some(Instant::ZERO);
            }
            if let Some(t) = links.next_deadline() {
                deadline = Some(deadline.map_or(t, |d| d.min(t)));
            }
            drop(links);
            for x in ep.extensions.iter() {
                if let Some(t) = x.next_deadline() {
                    deadline = Some(deadline.map_or(t, |d| d.min(t)));
                }
            }
        }
        if self.shared.fanout_jobs.load(Ordering::SeqCst) != 0 {
            deadline = Some(Instant::ZERO);
        }
        deadline
    }

    /// For an application thread of an invoker engine with nothing to do: sleeps until
    /// traffic, the earliest timer, or `wait_max` (at most `PARK_MAX`). True if traffic may be
    /// waiting on a socket.
    ///
    /// A thread that sleeps alone, when `own` is the engine's only socket and nothing is due
    /// before the socket's receive timeout could end the sleep, sleeps in a read of that
    /// socket and takes in the datagram that wakes it, as a blocking UDP receiver does: one
    /// system call a hop instead of a wait on the epoll set and then a read. It is woken
    /// early by a doorbell datagram (see `wake`). Otherwise the thread waits on the epoll set
    /// of every socket the engine reads.
    ///
    /// The sleep is announced first, as the engine thread's `park` does, so that a call on
    /// another thread that arms an earlier timer wakes it (`wake_for`). That is what lets the
    /// sleep be long: a timeout sooner than the next scheduler tick has the kernel program the
    /// timer hardware when the sleep starts and again when traffic ends it early, which on a
    /// virtual machine costs more than the rest of a hop.
    ///
    /// Only a thread that sleeps alone sleeps long. Traffic wakes one of several sleepers on an
    /// epoll set, and that one may take in what another waits for without it knowing; so with
    /// others asleep the sleep is short ([`SHARED_SLEEP_MAX`]), and a long sleeper already
    /// there is woken to go back to sleep on those terms.
    pub(crate) fn invoker_sleep(&self, wait_max: Duration, own: &Endpoint) -> bool {
        self.invoker_sleep_then(wait_max, own, || {})
    }

    /// [`Engine::invoker_sleep`] that calls `woke` right after a sleep in a read of `own`'s
    /// socket returns, before what it read is delivered.
    pub(crate) fn invoker_sleep_then(
        &self,
        wait_max: Duration,
        own: &Endpoint,
        woke: impl FnOnce(),
    ) -> bool {
        let now = self.now();
        let mut until;
        let alone;
        let wake_other = {
            let mut s = self.shared.sleepers.lock().expect("sleepers lock");
            alone = s.0 == 0;
            let cap = if alone { PARK_MAX } else { SHARED_SLEEP_MAX };
            until = now.0.saturating_add(wait_max.min(cap).as_nanos() as u64);
            let wake_other = s.0 > 0 && s.1 > until;
            s.0 += 1;
            s.1 = s.1.min(until);
            self.shared.sleeping_until.store(s.1, Ordering::SeqCst);
            wake_other
        };
        if wake_other {
            self.wake();
        }
        if let Some(t) = self.next_deadline() {
            until = until.min(t.0);
        }
        let readable = match until.checked_sub(now.0).filter(|&n| n > 0) {
            None => true,
            Some(n) if alone && self.sleep_in_read(own, Duration::from_nanos(n), woke) => false,
            Some(n) => {
                use crate::mmsg::EpollWake;
                self.watch_pending();
                match crate::mmsg::epoll_sleep(
                    self.shared.epoll_fd.as_fd(),
                    Duration::from_nanos(n),
                ) {
                    EpollWake::TimedOut => false,
                    EpollWake::Event(WAKE_TOKEN) => {
                        self.take_wake();
                        false
                    }
                    EpollWake::Event(_) => true,
                    EpollWake::Unknown => {
                        // Perhaps the eventfd, which nothing would drain otherwise.
                        self.drain_wake_fd();
                        true
                    }
                }
            }
        };
        let mut s = self.shared.sleepers.lock().expect("sleepers lock");
        s.0 -= 1;
        if s.0 == 0 {
            s.1 = u64::MAX;
            self.shared.sleeping_until.store(u64::MAX, Ordering::SeqCst);
        }
        readable
    }

    /// The sleep of [`Engine::invoker_sleep`] in a read of `own`'s socket, if it may be taken
    /// (false, having done nothing, if not): the socket blocks and its timeout ends the read
    /// within `wait`, `own` is the only socket of the engine, and no wake-up is pending.
    fn sleep_in_read(&self, own: &Endpoint, wait: Duration, woke: impl FnOnce()) -> bool {
        if own.blocking_sleep.is_none_or(|t| t > wait) || own.group_socket.get().is_some() {
            return false;
        }
        // The read takes the datagram into the duty cycle's buffer, so the sleep holds the duty
        // lock: another thread's cycle meanwhile finds it taken and leaves the reading to us,
        // and another thread going to sleep wakes us first (see above).
        let Ok(mut batch) = self.shared.duty.try_lock() else {
            return false;
        };
        {
            let eps = self.shared.endpoints.read().expect("engine lock");
            if eps.len() != 1 || !std::ptr::eq(Arc::as_ptr(&eps[0]), own) {
                return false;
            }
        }
        *self.shared.blocked_addr.lock().expect("blocked lock") = Some(own.sockaddr);
        // Dekker pairing with `wake`: it raises `wake_pending` before it looks at `blocked`.
        self.shared.blocked.store(true, Ordering::SeqCst);
        if !self.shared.wake_pending.load(Ordering::SeqCst) {
            let r = batch.recv_one_waiting(&own.socket);
            woke();
            match r {
                Ok(1) => self.handle_batch(own, &mut batch, 1, self.now()),
                Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {
                    self.take_send_errors(own, &own.socket);
                }
                _ => {}
            }
        }
        self.shared.blocked.store(false, Ordering::SeqCst);
        true
    }

    /// Where `a`'s port is: where it moved to, if the oracle said so, else the pure mapping.
    pub fn socket_addr(&self, a: Address) -> Result<SocketAddr, crate::naming::NamingError> {
        if self.shared.has_locations.load(Ordering::Relaxed) {
            if let Some(s) = self
                .shared
                .locations
                .read()
                .expect("locations lock")
                .get(&a)
            {
                return Ok(*s);
            }
        }
        self.shared.cfg.cluster.socket_addr(a)
    }

    /// Records that `a` moved to `at` (a location the pure mapping does not give it; setting
    /// the mapped one clears the record). False if `LOCATIONS_MAX` others are recorded.
    pub fn set_location(&self, a: Address, at: SocketAddr) -> bool {
        let mapped = self.shared.cfg.cluster.socket_addr(a).ok();
        let mut l = self.shared.locations.write().expect("locations lock");
        if mapped == Some(at) {
            l.remove(&a);
        } else {
            if l.len() >= LOCATIONS_MAX && !l.contains_key(&a) {
                return false;
            }
            l.insert(a, at);
        }
        self.shared
            .has_locations
            .store(!l.is_empty(), Ordering::Relaxed);
        true
    }

    /// Whether any server is recorded as moved.
    #[inline]
    pub(crate) fn any_moved(&self) -> bool {
        self.shared.has_locations.load(Ordering::Relaxed)
    }

    /// Whether `a` is recorded as moved.
    pub fn moved(&self, a: Address) -> bool {
        self.shared.has_locations.load(Ordering::Relaxed)
            && self
                .shared
                .locations
                .read()
                .expect("locations lock")
                .contains_key(&a)
    }

    /// Whether fault injection drops the next outgoing remote packet (and counts it).
    pub(crate) fn inject_loss(&self) -> bool {
        let loss = self.shared.cfg.loss_injection;
        if loss > 0.0 && self.shared.loss.lock().expect("loss lock").chance(loss) {
            self.shared.injected_losses.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Packets dropped by fault injection so far.
    pub fn injected_losses(&self) -> u64 {
        self.shared.injected_losses.load(Ordering::Relaxed)
    }

    /// Duty cycles run so far, by any thread (each reads every socket once): what a caller
    /// that drives an invoker engine costs in reads.
    pub fn duty_cycles(&self) -> u64 {
        self.shared.cycles.load(Ordering::Relaxed)
    }

    pub fn is_invoker(&self) -> bool {
        self.shared.cfg.mode == EngineMode::Invoker
    }

    fn run(&self) {
        let mut backoff = Backoff::new(
            Phase::Time(self.shared.cfg.idle_spin),
            Phase::Passes(ENGINE_IDLE_YIELDS),
        );
        while !self.shared.stop.load(Ordering::Relaxed) {
            if self.duty_cycle() > 0 {
                backoff.reset();
                continue;
            }
            match backoff.idle(None) {
                Idle::Park | Idle::Expired => {
                    self.park();
                    backoff.reset();
                }
                what => Backoff::pause(what),
            }
        }
    }

    /// Sleeps in poll(2) on every socket and the wake-up eventfd until traffic, a wake-up, the
    /// next link timer, or `PARK_MAX`.
    fn park(&self) {
        let now = self.now();
        let mut deadline = Instant(now.0 + PARK_MAX.as_nanos() as u64);
        // Announce the sleep before reading the timers: an application call that arms an
        // earlier timer after we read them sees this and wakes us (see `wake_for`).
        self.shared
            .sleeping_until
            .store(deadline.0, Ordering::SeqCst);
        let mut fds = Vec::new();
        if let Some(t) = self.park_plan(&mut fds) {
            deadline = deadline.min(t);
        }
        fds.push(libc::pollfd {
            fd: self.shared.wake_fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        let (ready, held) = self.arm_extensions();
        if held {
            // Its owner holds an endpoint (`EngineServer::with`): look again soon rather than
            // sleep on it unarmed, or spin while the owner works.
            deadline = deadline.min(Instant(now.0 + SERVICE_HELD_NAP.as_nanos() as u64));
        }
        if deadline <= now || ready {
            self.awake_extensions();
            self.shared.sleeping_until.store(u64::MAX, Ordering::SeqCst);
            return;
        }
        self.shared
            .sleeping_until
            .store(deadline.0, Ordering::SeqCst);
        crate::mmsg::ppoll_for(&mut fds, Duration::from_nanos(deadline.0 - now.0));
        self.shared.sleeping_until.store(u64::MAX, Ordering::SeqCst);
        self.awake_extensions();
        self.drain_wake_fd();
    }

    /// Arms every port's extensions before a sleep: whether one has work ready, and whether
    /// one was held by its owner (in `EngineServer::with`). The engine never waits for one
    /// (the owner may need the engine, or the engine's lock on the ports, to finish).
    fn arm_extensions(&self) -> (bool, bool) {
        let eps = self.shared.endpoints.read().expect("engine lock");
        let (mut ready, mut held) = (false, false);
        for x in eps.iter().flat_map(|ep| ep.extensions.iter()) {
            match x.arm() {
                Armed::Idle => {}
                Armed::Ready => ready = true,
                Armed::Held => held = true,
            }
        }
        (ready, held)
    }

    fn awake_extensions(&self) {
        let eps = self.shared.endpoints.read().expect("engine lock");
        for x in eps.iter().flat_map(|ep| ep.extensions.iter()) {
            x.awake();
        }
    }

    /// One pass over every port: read datagrams, run links, deliver, transmit. Returns how much
    /// work it did (zero: idle). Only one caller runs it at a time; others return at once.
    pub fn duty_cycle(&self) -> usize {
        self.cycle(Read::Poll)
    }

    /// A duty cycle for a thread that sleeps on the sockets' epoll set between cycles:
    /// `readable` says whether the set reported traffic. If not, the sockets are left alone
    /// (timers, and what earlier input caused, still run): a socket with datagrams waiting
    /// ends the coming sleep at once, so reading it first would only add a read finding
    /// nothing.
    pub(crate) fn duty_cycle_after_sleep(&self, readable: bool) -> usize {
        self.cycle(if readable { Read::Ready } else { Read::No })
    }

    fn cycle(&self, read: Read) -> usize {
        // Before the duty lock: a thread that finds it taken (by one asleep in a read) must
        // not leave the eventfd readable, or its own sleep on the epoll set would end at once.
        self.take_wake();
        let Ok(mut batch) = self.shared.duty.try_lock() else {
            return 0;
        };
        self.shared.cycles.fetch_add(1, Ordering::Relaxed);
        let eps = self.shared.endpoints.read().expect("engine lock");
        let mut work = self.run_fanout();
        // One reading of the clock serves the whole cycle: what arrives in it is stamped with
        // the time the cycle began (a read on the path of every packet costs more than the
        // few microseconds a batch may take).
        let now = self.now();
        // A send that found a report pending took its error, not the report: take the
        // reports from every socket's queue (a read of an empty queue is all it costs).
        let found = crate::mmsg::SENDS_FOUND_REPORTS.load(Ordering::Relaxed);
        if found != self.shared.reports_seen.load(Ordering::Relaxed) {
            self.shared.reports_seen.store(found, Ordering::Relaxed);
            for ep in eps.iter() {
                work += self.take_send_errors(ep, &ep.socket);
            }
        }
        for ep in eps.iter() {
            if read != Read::No {
                let ready = read == Read::Ready;
                work += self.receive(ep, &ep.socket, &mut batch, ready, now);
                if let Some(g) = ep.group_socket.get() {
                    work += self.receive(ep, g, &mut batch, ready, now);
                }
            }
            work += self.run_links(ep, now);
            for x in ep.extensions.iter() {
                // A panic in one must not take the engine, and every other port, down
                // (handlers catch their own; this is what is left). It is counted; the
                // extension stays (dropping it here would close its port under the engine's
                // lock on the ports).
                let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    x.step(self, ep, now)
                }));
                match step {
                    Ok(w) => work += w,
                    Err(_) => {
                        self.shared.services_failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        work
    }

    /// Hands `packet` for `to` to the engine thread; `false` (nothing queued) in invoker mode
    /// or when the queue is full, and the caller sends it itself.
    pub(crate) fn queue_fanout(
        &self,
        ep: &Arc<Endpoint>,
        packet: &[u8],
        to: &[SocketAddr],
    ) -> bool {
        if self.is_invoker() {
            return false;
        }
        {
            let mut q = self.shared.fanout.lock().expect("fanout lock");
            if q.jobs.len() >= FANOUT_QUEUE_MAX {
                return false;
            }
            let (mut p, mut t) = q.spare.pop().unwrap_or_default();
            p.clear();
            p.extend_from_slice(packet);
            t.clear();
            t.extend_from_slice(to);
            q.jobs.push_back(FanoutJob {
                ep: ep.clone(),
                packet: p,
                to: t,
            });
            self.shared
                .fanout_jobs
                .store(q.jobs.len(), Ordering::SeqCst);
        }
        if self.shared.sleeping_until.load(Ordering::SeqCst) != u64::MAX {
            self.wake();
        }
        true
    }

    fn run_fanout(&self) -> usize {
        if self.shared.fanout_jobs.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let mut n = 0;
        while n < RECV_BATCH_MAX {
            let job = {
                let mut q = self.shared.fanout.lock().expect("fanout lock");
                let job = q.jobs.pop_front();
                self.shared
                    .fanout_jobs
                    .store(q.jobs.len(), Ordering::SeqCst);
                job
            };
            let Some(job) = job else {
                break;
            };
            if let Ok(k) = crate::mmsg::send_same_to_many(&job.ep.socket, &job.packet, &job.to) {
                job.ep
                    .counters
                    .packets_sent
                    .fetch_add(k as u64, Ordering::Relaxed);
            }
            let mut q = self.shared.fanout.lock().expect("fanout lock");
            if q.spare.len() < FANOUT_QUEUE_MAX {
                q.spare.push((job.packet, job.to));
            }
            n += 1;
        }
        n
    }

    /// Reads what waits on `socket`. After an idle read, one `recvfrom` (the cheapest poll of
    /// an idle socket, and no second system call before a lone packet is handled); after a
    /// read that found a packet, whole batches with `recvmmsg`, which takes a lone datagram as
    /// `recvfrom` would, and when it takes fewer than a batch the socket is known to be empty.
    /// (Reading one and then a batch would put a second call, finding nothing, between a
    /// packet's arrival and its delivery.)
    ///
    /// `ready`: the sockets' epoll set just reported traffic; batches go first then too.
    fn receive(
        &self,
        ep: &Endpoint,
        socket: &UdpSocket,
        batch: &mut crate::mmsg::RecvBatch,
        ready: bool,
        now: Instant,
    ) -> usize {
        let mut n = 0;
        if !ready && !ep.recv_busy.load(Ordering::Relaxed) {
            return match batch.recv_one(socket) {
                Ok(1) => {
                    self.handle_batch(ep, batch, 1, now);
                    // Light traffic: see whether more was waiting next time.
                    ep.recv_busy.store(true, Ordering::Relaxed);
                    1
                }
                Err(_) => {
                    // Datagrams behind the reports are read in the next cycle.
                    let k = self.take_send_errors(ep, socket);
                    ep.recv_busy.store(k > 0, Ordering::Relaxed);
                    k
                }
                _ => 0,
            };
        }
        let mut retried = false;
        while n < RECV_BATCH_MAX {
            let got = match batch.recv(socket) {
                Ok(0) => break,
                Ok(k) => k,
                // A reported send error fails the read that finds it: take the reports, then
                // read again once (the datagrams behind them wait).
                Err(_) if !retried && self.take_send_errors(ep, socket) > 0 => {
                    retried = true;
                    continue;
                }
                Err(_) => break,
            };
            n += got;
            self.handle_batch(ep, batch, got, now);
            if got < batch.slots() {
                break;
            }
        }
        ep.recv_busy.store(n > 1, Ordering::Relaxed);
        n
    }

    /// Empties `socket`'s error queue (at most [`SEND_ERRORS_PER_CYCLE`] reports): counts each
    /// report, and tells the port's extensions of every "port unreachable" (the groups use
    /// it to suspect a member whose process is gone before its silence says so). How many it
    /// took.
    fn take_send_errors(&self, ep: &Endpoint, socket: &UdpSocket) -> usize {
        let mut n = 0;
        while n < SEND_ERRORS_PER_CYCLE {
            let e = match crate::mmsg::take_send_error(socket) {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(err) => {
                    tracing::debug!(port = %ep.addr, %err, "reading the error queue failed");
                    break;
                }
            };
            n += 1;
            match e.to {
                Some(to) if e.port_unreachable() => {
                    tracing::debug!(port = %ep.addr, %to, "port unreachable reported");
                    ep.counters
                        .unreachable_reports
                        .fetch_add(1, Ordering::Relaxed);
                    for x in ep.extensions.iter() {
                        x.unreachable(self, ep, to);
                    }
                    let mut q = ep.unreachable.lock().expect("unreachable lock");
                    if !q.contains(&to) {
                        if q.len() >= UNREACHABLE_KEPT {
                            q.pop_front();
                        }
                        q.push_back(to);
                    }
                    ep.unreachable_waiting.store(true, Ordering::Release);
                }
                _ => {
                    tracing::debug!(port = %ep.addr, report = ?e, "send error reported");
                    ep.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        n
    }

    fn handle_batch(
        &self,
        ep: &Endpoint,
        batch: &mut crate::mmsg::RecvBatch,
        got: usize,
        now: Instant,
    ) {
        for i in 0..got {
            match batch.get_mut(i) {
                (bytes, Some(from), false) => self.handle_datagram(ep, bytes, from, now),
                _ => {
                    // Longer than any packet this cluster builds, or from no address.
                    ep.counters.refuse(Refusal::Malformed, ep.addr, now);
                }
            }
        }
        // Counted once handled, so a reader that sees a packet counted also sees its fate
        // (refused, dropped or taken) in the other counters.
        ep.counters
            .packets_received
            .fetch_add(got as u64, Ordering::Release);
    }

    fn handle_datagram(&self, ep: &Endpoint, bytes: &mut [u8], from: SocketAddr, now: Instant) {
        if bytes == crate::shm::DOORBELL {
            // A local sender woke us from a park on the socket; its message is in the ring.
            ep.counters.doorbells.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let cfg = &self.shared.cfg;
        // Without a key no lock is taken; with one, the ring is read for the check only (a
        // sealed packet is decrypted in place in the receive buffer).
        let parsed = match &self.shared.keys {
            None => Packet::parse(bytes, cfg.cluster.cluster, None),
            Some(keys) => {
                let ring = keys.read().expect("keys lock");
                Packet::open(bytes, cfg.cluster.cluster, Some(&ring))
            }
        };
        let p = match parsed {
            Ok(p) => p,
            Err(e) => {
                ep.counters.refuse(Refusal::of(e), ep.addr, now);
                return;
            }
        };
        let h = p.header;
        // The source address must map to the socket it came from: no lookup, no spoofing of
        // another server's name from a different port.
        // A port that trusts moved sources (an oracle) takes datagrams (RPC calls) from any
        // socket; link, group and multicast packets must still come from where their source
        // maps.
        let source_ok = self.socket_addr(h.source).is_ok_and(|s| s == from)
            || (ep.trust_moved_sources && h.kind == Kind::Datagram);
        let dest_ok = h.addressed_to(ep.addr);
        if !source_ok || !dest_ok {
            ep.counters
                .dropped_misaddressed
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        match h.kind {
            Kind::Data | Kind::Ack => {
                let r = ep.links.lock().expect("links lock").handle_packet(now, &p);
                match r {
                    Ok(()) => {}
                    Err(TableRefusal::LinkLimit) => {
                        ep.counters
                            .dropped_link_limit
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Err(TableRefusal::Bad) => {
                        ep.counters.refuse(Refusal::Body, ep.addr, now);
                    }
                }
            }
            Kind::Datagram => {
                let Ok(d) = DatagramBody::parse(h.flags, p.body) else {
                    ep.counters.refuse(Refusal::Body, ep.addr, now);
                    return;
                };
                if !self.fresh(ep, &h, from, (d.numbering, false, d.count), now) {
                    return;
                }
                let ext = ep.extensions.for_kind(h.kind);
                for r in d.records().flatten() {
                    if r.fragment.is_some() {
                        ep.counters.refuse(Refusal::Body, ep.addr, now);
                        continue;
                    }
                    ep.counters
                        .datagrams_received
                        .fetch_add(1, Ordering::Relaxed);
                    if ext.is_some_and(|x| x.take(self, ep, h.source, r.payload)) {
                        continue;
                    }
                    deliver(ep, h.source, TxnId(0), r.payload);
                }
            }
            Kind::Group => {
                if parse_datagram(p.body).is_err() {
                    ep.counters.refuse(Refusal::Body, ep.addr, now);
                    return;
                }
                let ext = ep.extensions.for_kind(h.kind);
                for r in Records::new(p.body).flatten() {
                    if r.fragment.is_some()
                        || !ext.is_some_and(|x| x.take(self, ep, h.source, r.payload))
                    {
                        ep.counters.refuse(Refusal::Body, ep.addr, now);
                    }
                }
            }
            Kind::Multicast => {
                let Ok(m) = MulticastBody::parse_flags(h.flags, p.body) else {
                    ep.counters.refuse(Refusal::Body, ep.addr, now);
                    return;
                };
                if !ep.joined.read().expect("joined lock").contains(&m.txn) {
                    ep.counters
                        .dropped_not_joined
                        .fetch_add(1, Ordering::Relaxed);
                } else if self.fresh(ep, &h, from, (m.numbering, true, m.count), now) {
                    for r in m.records().flatten() {
                        ep.counters
                            .multicast_received
                            .fetch_add(1, Ordering::Relaxed);
                        deliver(ep, h.source, m.txn, r.payload);
                    }
                }
            }
        }
    }

    /// With a key, whether a DATAGRAM (`multicast` false) or MULTICAST of `h` carrying
    /// `numbering` and `records` records is fresh: not a replay, and from a source that has
    /// shown it knows this port's incarnation (`txcast_proto::replay`). Sends the hello the
    /// guard asks for, to `from` (where a spoofed replay's named source is), then what was
    /// kept for a source whose incarnation this packet taught. Without a key, always true.
    fn fresh(
        &self,
        ep: &Endpoint,
        h: &PacketHeader,
        from: SocketAddr,
        (numbering, multicast, records): (Option<txcast_proto::wire::Numbering>, bool, usize),
        now: Instant,
    ) -> bool {
        let Some(guard) = ep.replay.as_ref() else {
            return true;
        };
        let a = txcast_proto::replay::Arrival {
            source: h.source,
            incarnation: h.incarnation,
            numbering,
            multicast,
            records,
            ack_now: h.flags & txcast_proto::wire::FLAG_ACK_NOW != 0,
        };
        let o = guard.lock().expect("replay lock").arrive(now, a);
        if let Some(ask) = o.hello {
            crate::port::send_hello(self, ep, h.source, h.incarnation, from, ask);
        }
        for k in o.kept {
            if let Err(e) = crate::port::send_kept(self, ep, h.source, k.txn, &k.msg) {
                tracing::debug!(port = %ep.addr, dest = %h.source, %e, "kept message not sent");
            }
        }
        if let Some(why) = o.refused {
            tracing::trace!(port = %ep.addr, source = %h.source, ?why, "not fresh");
        }
        o.refused.is_none()
    }

    /// Runs `ep`'s links (see [`LinkTable::run`]) into its ring and socket.
    fn run_links(&self, ep: &Endpoint, now: Instant) -> usize {
        let mut links = ep.links.lock().expect("links lock");
        if links.is_blocked() && !ep.ring_blocked.load(Ordering::SeqCst) {
            // The application made room: retry the deliveries that were refused.
            links.room_made();
        }
        let mut io = EngineIo::new(self, ep);
        let out = links.run(now, &mut io);
        // For `txcast stat`: the link counters into the port's segment, at most once per
        // `LINK_PUBLISH_EVERY` (summing them is O(links)). Every duty cycle runs every port's
        // links, and an engine thread cycles at least once per `PARK_MAX`, so what a run
        // leaves unpublished goes out at the next cycle past the interval.
        let at = ep.counters.links_published_at.load(Ordering::Relaxed);
        if now.0 >= at.saturating_add(LINK_PUBLISH_EVERY.as_nanos() as u64) || at == 0 {
            ep.counters
                .links_published_at
                .store(now.0.max(1), Ordering::Relaxed);
            ep.ring
                .publish_links(&crate::shm::LinkTotals::from(&links.counters()));
        }
        let checked = ep.counters.retransmits_checked_at.load(Ordering::Relaxed);
        if checked == 0 || now.0.saturating_sub(checked) >= RETRANSMIT_CHECK_INTERVAL_NS {
            ep.counters
                .retransmits_checked_at
                .store(now.0.max(1), Ordering::Relaxed);
            log_retransmit_bursts(ep, &links, now, checked);
        }
        if out.refused {
            // The ring is full: the link keeps the message until the application takes
            // something and tells us (`Endpoint::ring_blocked`).
            ep.ring_blocked.store(true, Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst);
            // Dekker pairing with `Port::room_made`: if the application freed a slot before
            // it could see the flag, we see the room here.
            if ep.ring.has_room() {
                ep.ring_blocked.store(false, Ordering::SeqCst);
            }
        }
        out.work
    }
}

/// Logs the peers of `ep` that more than [`RETRANSMIT_BURST_MIN`] messages were retransmitted
/// to since the look at `since` (engine clock, ns; 0: this is the first look, which only takes
/// the counts). Called with the links locked, at most once per `RETRANSMIT_CHECK_INTERVAL_NS`.
fn log_retransmit_bursts(ep: &Endpoint, links: &LinkTable, now: Instant, since: u64) {
    let mut seen = ep
        .counters
        .retransmits_seen
        .lock()
        .expect("retransmit log lock");
    let before = std::mem::take(&mut *seen);
    let interval_ms = now.0.saturating_sub(since) / 1_000_000;
    let (mut named, mut others, mut others_count) = (0usize, 0u64, 0u64);
    for link in links.links() {
        let peer = link.peer();
        let total = link.counters().retransmitted;
        seen.insert(peer, total);
        // A link reset since the last look (a peer restart) starts its count again.
        let count = total.saturating_sub(before.get(&peer).copied().unwrap_or(0));
        if since == 0 || count <= RETRANSMIT_BURST_MIN {
            continue;
        }
        if named < RETRANSMIT_LOG_PEERS_MAX {
            named += 1;
            tracing::warn!(
                port = %ep.addr,
                %peer,
                count,
                interval_ms,
                "retransmission burst (messages retransmitted to the peer since the last line)"
            );
        } else {
            others += 1;
            others_count += count;
        }
    }
    if others > 0 {
        tracing::warn!(
            port = %ep.addr,
            peers = others,
            count = others_count,
            interval_ms,
            "retransmission bursts to more peers"
        );
    }
}

/// A link table's way out at a port: deliveries into its ring, packets out of its socket.
pub(crate) struct EngineIo<'a> {
    engine: &'a Engine,
    ep: &'a Endpoint,
    /// The last destination and where it maps (a burst of packets goes to one peer).
    to: Option<(Address, SocketAddr)>,
    sent: u64,
}

impl<'a> EngineIo<'a> {
    pub fn new(engine: &'a Engine, ep: &'a Endpoint) -> Self {
        EngineIo {
            engine,
            ep,
            to: None,
            sent: 0,
        }
    }
}

impl LinkIo for EngineIo<'_> {
    fn deliver(&mut self, peer: Address, msg: &[u8]) -> bool {
        deliver_reliable(self.ep, peer, msg).is_some()
    }

    fn transmit(&mut self, peer: Address, packet: &[u8]) {
        let to = match self.to {
            Some((a, s)) if a == peer => s,
            _ => match self.engine.socket_addr(peer) {
                Ok(s) => {
                    self.to = Some((peer, s));
                    s
                }
                // It maps nowhere: lost, as on the wire (the link gives up in time).
                Err(_) => return,
            },
        };
        self.sent += 1;
        if self.engine.inject_loss() {
            return;
        }
        // Loss here is recovered by the link like loss on the wire.
        let _ = crate::mmsg::send_to(&self.ep.socket, packet, &to);
    }

    fn link_event(&mut self, peer: Address, event: LinkEvent) {
        let port = self.ep.addr;
        match event {
            LinkEvent::PeerRestarted { incarnation } => {
                tracing::info!(port = %port, %peer, incarnation, "peer restarted: link reset");
            }
            LinkEvent::Unreachable => tracing::warn!(
                port = %port,
                %peer,
                "peer unreachable: link given up (sends fail until it answers)"
            ),
            LinkEvent::Reachable => {
                tracing::info!(port = %port, %peer, "peer reachable again");
            }
        }
    }
}

impl Drop for EngineIo<'_> {
    fn drop(&mut self) {
        if self.sent > 0 {
            self.ep
                .counters
                .packets_sent
                .fetch_add(self.sent, Ordering::Relaxed);
        }
    }
}

/// The instant `timeout` from now; a timeout too long to add to the clock (such as
/// `Duration::MAX`) is a century away.
pub(crate) fn deadline_after(timeout: Duration) -> std::time::Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = std::time::Instant::now();
    now.checked_add(timeout.min(CENTURY)).unwrap_or(now)
}

/// Stops the engine thread (for engines started with [`Engine::start`]).
impl Engine {
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.wake();
        if let Some(h) = self.shared.thread.lock().expect("engine lock").take() {
            let _ = h.join();
        }
    }
}

/// Writes a message with its envelope into the port's ring; false if the ring is full.
fn deliver_reliable(ep: &Endpoint, source: Address, msg: &[u8]) -> Option<()> {
    match ep.ring.claim(ENVELOPE_BYTES + msg.len()) {
        Ok(mut c) => {
            write_envelope(&mut c, source, TxnId(0), msg);
            c.commit();
            Some(())
        }
        Err(crate::shm::SendError::TooLong { .. }) => {
            // It can never fit this port's slots: drop it rather than wedge the link.
            ep.counters.dropped_too_long.fetch_add(1, Ordering::Relaxed);
            Some(())
        }
        Err(_) => None,
    }
}

fn deliver(ep: &Endpoint, source: Address, txn: TxnId, msg: &[u8]) {
    match ep.ring.claim(ENVELOPE_BYTES + msg.len()) {
        Ok(mut c) => {
            write_envelope(&mut c, source, txn, msg);
            c.commit();
        }
        Err(crate::shm::SendError::TooLong { .. }) => {
            ep.counters.dropped_too_long.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            ep.counters
                .dropped_ring_full
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(crate) fn write_envelope(out: &mut [u8], source: Address, txn: TxnId, msg: &[u8]) {
    out[..ENVELOPE_BYTES].copy_from_slice(&envelope(source, txn));
    out[ENVELOPE_BYTES..ENVELOPE_BYTES + msg.len()].copy_from_slice(msg);
}

/// The envelope's bytes: the source address, then the transaction.
#[inline]
pub(crate) fn envelope(source: Address, txn: TxnId) -> [u8; ENVELOPE_BYTES] {
    let mut e = [0u8; ENVELOPE_BYTES];
    e[..8].copy_from_slice(&source.to_bytes());
    e[8..].copy_from_slice(&txn.0.to_le_bytes());
    e
}

/// Reads an envelope; `None` if the record is too short to hold one.
pub(crate) fn read_envelope(rec: &[u8]) -> Option<(Address, TxnId, &[u8])> {
    let (head, payload) = rec.split_first_chunk::<ENVELOPE_BYTES>()?;
    let (source, txn) = head.split_first_chunk::<8>()?;
    let txn: [u8; 8] = *txn.first_chunk::<8>()?;
    Some((
        Address::from_bytes(*source),
        TxnId(u64::from_le_bytes(txn)),
        payload,
    ))
}

impl Shared {
    /// The key packets are sent with now, if the cluster has keys.
    pub(crate) fn send_key(&self) -> Option<Arc<PacketKey>> {
        self.keys
            .as_ref()
            .map(|k| k.read().expect("keys lock").send_key().clone())
    }

    /// Gives `ep`'s links the key sent with now (called with `endpoints` locked, so that a
    /// switch of keys either sees the endpoint or is seen by it).
    fn key_to(&self, ep: &Endpoint) {
        if let Some(k) = self.send_key() {
            ep.links.lock().expect("links lock").set_send_key(k);
        }
    }
}

/// Which keys an engine holds (see [`Engine::install_next_key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyStatus {
    /// The id of the key packets are sent with.
    pub sending: u8,
    /// Whether that key encrypts packets (else it only MACs them).
    pub encrypting: bool,
    /// A key installed and accepted, not yet sent with.
    pub next: Option<u8>,
    /// The key sent with before the last switch, still accepted until retired.
    pub old: Option<u8>,
}

/// Key rollover: changing the cluster key without stopping the cluster. On every node, in
/// three steps, each begun only once the one before is done on every node: install the next
/// key (accepted from then on), switch to it (sent with from then on; the old one is still
/// accepted), retire the old one (refused from then on: wait a few round trips after the last
/// switch, so that no packet under it is in flight). Packets name their key by id, so nothing
/// is tried twice and nothing is lost.
impl Engine {
    /// Accepts `key`, named `id` on the wire, encrypting packets when `encrypt`, besides the
    /// key in use. Replaces a next key installed before and not switched to.
    pub fn install_next_key(
        &self,
        id: u8,
        key: ClusterKey,
        encrypt: bool,
    ) -> Result<(), KeyRingError> {
        let keys = self.shared.keys.as_ref().ok_or(KeyRingError::NoKey)?;
        let next = PacketKey::new(id, key, encrypt).with_counter_start(random_u64());
        keys.write().expect("keys lock").install_next(next)
    }

    /// Sends every packet with the installed next key from now on, on every port of this
    /// engine (packets already built keep the key they were built with).
    pub fn switch_to_next_key(&self) -> Result<(), KeyRingError> {
        let keys = self.shared.keys.as_ref().ok_or(KeyRingError::NoKey)?;
        let eps = self.shared.endpoints.read().expect("engine lock");
        let send = {
            let mut ring = keys.write().expect("keys lock");
            ring.switch()?;
            ring.send_key().clone()
        };
        for ep in eps.iter() {
            ep.links
                .lock()
                .expect("links lock")
                .set_send_key(send.clone());
        }
        Ok(())
    }

    /// Stops accepting the key sent with before the last switch.
    pub fn retire_old_key(&self) -> Result<(), KeyRingError> {
        let keys = self.shared.keys.as_ref().ok_or(KeyRingError::NoKey)?;
        keys.write().expect("keys lock").retire()
    }

    /// The keys held, or `None` for a cluster without a key.
    pub fn key_status(&self) -> Option<KeyStatus> {
        let ring = self.shared.keys.as_ref()?.read().expect("keys lock");
        Some(KeyStatus {
            sending: ring.send_key().id(),
            encrypting: ring.send_key().seals(),
            next: ring.next_id(),
            old: ring.old_id(),
        })
    }
}

/// 64 random bits from the OS (through std's hasher keys): a key's first packet counter.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}
