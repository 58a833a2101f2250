//! CRMem on txcast's extension modules (the paper's *CoProcessor* implementation, §3.3-3.4):
//! a [`CrmemModule`] on each node's engine loop takes the other nodes' CRMem messages (remote
//! atomic writes, their acknowledgements, snapshots), applies them to the replica and answers
//! with no application thread involved; the application runs transactions on its own threads
//! against the same [`Node`], whose memory it reads and writes in place.
//!
//! The node sits behind one mutex shared by the application's threads and the engine's.
//! `commit` hands the write set to the module with a FLUSH instruction (only a handler may
//! send) and waits until the node reports the commit complete. A heartbeat every
//! `heartbeat` and a silence of `suspect_after` make a peer dead (as does its restart, which
//! the module host reports): the primary stops waiting for a dead backup; a backup whose
//! primary died hands over to the successor, the live node with the lowest id. A node that
//! is not the primary suspects only peers it has heard from since it started: backups
//! started before their primary wait for it. A peer whose host reported its port
//! unreachable (a process gone on a live host) needs only `unreachable_silence` of silence.
//!
//! **Crashes or partitions.** Opened with [`Crmem::open`], the failure detector trusts
//! time-outs: a primary cut off by a partition longer than `suspect_after` is taken for dead
//! while it still runs, and it drops its backups as dead too: the two sides diverge. That
//! mode assumes crashes (fail-stop processes on a network that does not split), the only
//! choice with two nodes. Opened with [`Crmem::open_with_membership`] (three nodes or more),
//! no time-out decides a failure of a node in the view: the database's txcast group does
//! (the virtually synchronous stack, whose views need a majority of the previous view). A
//! primary drops a backup, and the backups hand over to a successor, only when a view leaves
//! that node out, so a primary cut off in a minority keeps waiting for its backups and
//! acknowledges nothing more, while the majority's view makes a successor; once the
//! partition heals, the group expels the old primary, which then refuses to serve
//! ([`CrmemError::Expelled`]) until it is opened again to recover.

pub use crate::disklog::DiskPosition;
use crate::disklog::{self, DiskLog, Item};
use crate::lock::LockMapping;
use crate::membership::{self, Hint, Membership, MembershipConfig, MembershipError, Target};
use crate::node::{Config, CrError, Event, Lock, Mode, Node, NodeId, Role, SegmentId, TxnId, DISK};
use crate::plumbing::{self, Flusher, Waits};
use rustc_hash::FxHashSet;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use txcast_port::{Engine, Handlers, ModuleHost, ModuleHostError};
use txcast_proto::module::{Context, Control, Instruction, Module, ModuleId, Registration};
use txcast_proto::time::Instant;
use txcast_proto::Address;

/// The instruction that makes the module send what the node queued.
pub const FLUSH: u16 = 1;
/// Control-message types: CRMem's own messages, and heartbeats.
pub const CONTROL: u16 = 0x4352;
pub const HEARTBEAT: u16 = 0x4353;
const TIMER_BEAT: u64 = 1;
const TIMER_NODE: u64 = 2;

/// How a node of a CRMem cluster is set up.
#[derive(Clone, Debug)]
pub struct CrmemConfig {
    /// The module id and key CRMem is loaded under (the same on every node).
    pub module: ModuleId,
    pub key: u64,
    /// Every node's module-host address; a node's id is its index.
    pub nodes: Vec<Address>,
    /// This node's id.
    pub me: NodeId,
    /// The node that starts as primary.
    pub primary: NodeId,
    /// Start by recovering from the primary (a node that restarts) rather than as a fresh
    /// replica.
    pub recover: bool,
    pub heartbeat: Duration,
    pub suspect_after: Duration,
    /// The silence that makes a peer dead once its host reported its port unreachable (ICMP,
    /// not authenticated: a report only shortens the silence, so a forged one cannot take a
    /// peer that keeps sending for dead).
    pub unreachable_silence: Duration,
    /// Where the module's handlers run: on the engine (the paper's *CoProcessor*, the
    /// default), in the application's threads when they poll (*CPU Polling*: a thread
    /// waiting for a grant or a commit drives the host; a node with no transaction running
    /// must call `drive` itself, or it answers nothing and misses its timers), or on a thread
    /// woken for each message (*CPU Interrupt*).
    pub handlers: Handlers,
    /// A directory for a disk log (see `disklog.rs`): as primary, the node logs every
    /// commit there with group commit, and a commit completes only when its backups hold it
    /// and the disk does. Opened as primary (not `recover`), the node first restores what the
    /// directory holds; as a backup it leaves it as it was, and starts a new term there with
    /// a checkpoint if it is promoted. After every replica failed, open as primary the node
    /// whose directory has the highest [`disk_position`]. `None` (the default): memory only.
    pub disk: Option<std::path::PathBuf>,
    pub core: Config,
}

/// Where the disk log in `dir` ends (read only): the term of the primary that wrote it, then
/// its newest whole commit. After every replica of a mirror failed, the node to open as
/// primary is the one whose directory has the highest position; the others `recover` from
/// it.
pub fn disk_position(dir: &std::path::Path) -> Result<DiskPosition, CrmemError> {
    disklog::position(dir).map_err(|e| CrmemError::Disk(e.to_string()))
}

impl CrmemConfig {
    pub fn new(nodes: Vec<Address>, me: NodeId) -> CrmemConfig {
        CrmemConfig {
            module: 20,
            key: 0xc7e3,
            nodes,
            me,
            primary: 0,
            recover: false,
            heartbeat: Duration::from_millis(10),
            suspect_after: Duration::from_millis(300),
            unreachable_silence: Duration::from_millis(100),
            handlers: Handlers::Engine,
            disk: None,
            core: Config::default(),
        }
    }
}

/// Why a CRMem call failed.
#[derive(Debug, thiserror::Error)]
pub enum CrmemError {
    #[error(transparent)]
    Core(#[from] CrError),
    #[error("module host: {0}")]
    Host(#[from] ModuleHostError),
    #[error("the transaction was aborted: its locks did not come by its deadline")]
    LockTimeout,
    #[error("no outcome in time (the primary may have failed)")]
    Timeout,
    #[error("commit {seq} is not on every backup yet (wait_durable({seq}) waits for it)")]
    CommitPending { seq: u64 },
    #[error("this node's id is not in the node list")]
    BadConfig,
    #[error("membership: {0}")]
    Membership(#[from] MembershipError),
    /// A mirror's membership takes a majority of its nodes for every view: with two nodes,
    /// either one's failure would stop the other.
    #[error("a mirror with membership needs three nodes or more")]
    MembershipNeedsThree,
    /// The membership group left this node out (the others took it for dead): it serves no
    /// more and must be opened again with `recover`.
    #[error("this node was left out of the membership group")]
    Expelled,
    /// The disk log could not be opened or read, or a write or sync failed (commits then
    /// wait for ever rather than complete without the disk).
    #[error("disk log: {0}")]
    Disk(String),
}

/// What the engine's module and the application's threads share.
struct State {
    node: Node,
    /// Outcomes of transactions, for the threads that wait for them.
    waits: Waits<Event>,
    /// Transactions committed with `commit_async`: nobody waits for their outcome.
    async_txns: FxHashSet<TxnId>,
    /// Threads waiting until a commit number is durable.
    durable_waiters: plumbing::DurableWaiters,
    /// Role changes and lost backups, for [`Crmem::notices`] (bounded: oldest dropped).
    notices: VecDeque<Event>,
    /// Messages the node produced that the module has not sent yet.
    outq: VecDeque<(NodeId, Vec<u8>)>,
    last_heard: Vec<Instant>,
    /// Heard from since this node started: a node that is not the primary suspects only
    /// peers it has heard, so that backups started before their primary wait for it rather
    /// than take over and run beside it.
    heard: Vec<bool>,
    /// When each peer's port was last reported unreachable, until it is heard from a whole
    /// `unreachable_silence` after that (what it sent before it died may arrive later).
    reported: Vec<Option<Instant>>,
    /// Taken for dead: not listened to in this incarnation.
    dead: Vec<bool>,
    /// Backups this primary stopped counting on, told so whenever they speak.
    dropped: Vec<bool>,
    /// The disk log's writer (with a disk log).
    disk: Option<std::sync::mpsc::Sender<Item>>,
    /// Why the disk log stopped, if it did.
    disk_failed: Option<String>,
    /// With membership: the group's view this node was last told (0: every node).
    view: u64,
    /// With membership: the nodes of that view. Only a view decides that one of them failed;
    /// a node out of it (a restarted one not yet a member) is judged by silence.
    in_view: Vec<bool>,
    /// With membership: restarted since the last view that held it. A view that leaves it
    /// out speaks of its previous process, already taken for dead by the restart.
    restarted: Vec<bool>,
    /// The membership group left this node out.
    expelled: bool,
    /// With membership: passes a peer's unreachable report on to the group.
    hint: Option<Hint>,
}

struct Shared {
    state: Mutex<State>,
    /// A FLUSH is posted and its handler has not started: later commits need not post one.
    flush: Flusher,
    /// Commits up to this number are complete (the node's `durable`, as last filed).
    durable: plumbing::Durable,
    /// Batches the disk log synced (one `fdatasync` each).
    disk_syncs: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The module on the engine's loop.
pub struct CrmemModule {
    shared: Arc<Shared>,
    nodes: Vec<Address>,
    me: NodeId,
    heartbeat: u64,
    suspect_after: u64,
    unreachable_silence: u64,
    /// Failures of nodes in the view are decided by the membership group's views.
    fenced: bool,
    beating: bool,
    /// When the heartbeat timer last fired.
    last_beat: Instant,
}

impl CrmemModule {
    fn node_of(&self, a: Address) -> Option<NodeId> {
        self.nodes.iter().position(|&n| n == a).map(|i| i as NodeId)
    }

    /// Sends what the node queued (as much as this handler may), files its events, and
    /// arms the node's deadline.
    fn drain(&self, cx: &mut Context<'_>, st: &mut State) {
        while let Some((to, m)) = st.node.poll_transmit() {
            if to == DISK {
                // Bounded by the node's commit log: parts not yet on disk hold its budget.
                if let (Some(tx), Ok(crate::msg::Msg::Write(w))) =
                    (&st.disk, crate::msg::Msg::parse(&m))
                {
                    let (seq, last) = (w.seq, w.part + 1 == w.parts);
                    let _ = tx.send(Item::Part {
                        seq,
                        last,
                        bytes: m,
                    });
                }
                continue;
            }
            st.outq.push_back((to, m));
        }
        let (dead, node) = (&st.dead, &st.node);
        plumbing::send_queued(cx, &self.nodes, CONTROL, &mut st.outq, |k, m| {
            dead[k as usize] || node.superseded(k, m)
        });
        while let Some(e) = st.node.poll_event() {
            match e {
                Event::Committed(t) if st.async_txns.remove(&t) => {}
                Event::Granted(t) | Event::Committed(t) | Event::Aborted(t, _) => {
                    st.waits.file(t, e)
                }
                other => {
                    match other {
                        Event::Promoted => {
                            tracing::info!(node = self.me, "crmem: promoted to primary");
                            if let Some(tx) = &st.disk {
                                // The log's base: what this node holds now.
                                let (seq, images) = st.node.checkpoint();
                                let _ = tx.send(Item::Promoted { seq, images });
                            }
                        }
                        Event::Recovered => {
                            tracing::info!(node = self.me, "crmem: recovered, a backup again");
                        }
                        Event::BackupLost(k) => tracing::warn!(
                            node = self.me,
                            backup = k,
                            "crmem: backup lost, commits go on without it"
                        ),
                        _ => {}
                    }
                    plumbing::push_notice(&mut st.notices, other);
                }
            }
        }
        let d = st.node.durable();
        self.shared.durable.file(&mut st.durable_waiters, d);
        if let Some(t) = st.node.poll_timeout() {
            let _ = cx.arm(t, TIMER_NODE);
        }
    }

    /// Peer `k` is dead: see [`take_down`].
    fn down(&self, st: &mut State, k: NodeId) {
        take_down(st, self.me, self.nodes.len(), k);
    }
}

/// Peer `k` is dead: the primary stops waiting for it; a backup whose primary it was hands
/// over to the live node with the lowest id.
fn take_down(st: &mut State, me: NodeId, n: usize, k: NodeId) {
    if st.dead[k as usize] || st.dropped[k as usize] {
        return;
    }
    tracing::warn!(node = me, peer = k, "crmem: peer taken for dead");
    match st.node.role().clone() {
        Role::Primary { .. } => {
            // Not listened away: if it still runs it is told it was dropped (on_control)
            // and recovers, rather than later take itself for the survivor.
            st.dropped[k as usize] = true;
            st.node.peer_down(k);
        }
        Role::Backup { primary: p } | Role::Recovering { from: p } if p == k => {
            st.dead[k as usize] = true;
            let live: Vec<NodeId> = (0..n as NodeId).filter(|&i| !st.dead[i as usize]).collect();
            let successor = live.first().copied().unwrap_or(me);
            st.node.primary_down(successor, &live);
        }
        _ => st.dead[k as usize] = true,
    }
}

/// The group's view `view` holds `live`: every node out of it is dead (the primary's last,
/// so that the successor is chosen among the view's nodes).
fn tell_view(st: &mut State, me: NodeId, n: usize, view: u64, live: &[NodeId]) {
    if view <= st.view {
        return;
    }
    st.view = view;
    if !live.contains(&me) {
        st.expelled = true;
        return;
    }
    let primary = match st.node.role() {
        Role::Backup { primary: p } | Role::Recovering { from: p } => Some(*p),
        Role::Primary { .. } => None,
    };
    let mut out: Vec<NodeId> = (0..n as NodeId)
        .filter(|k| !live.contains(k) && *k != me)
        .collect();
    out.sort_by_key(|k| Some(*k) == primary);
    for k in 0..n {
        let held = live.contains(&(k as NodeId));
        st.in_view[k] = held;
        if held {
            st.restarted[k] = false;
        }
    }
    for k in out {
        if !st.restarted[k as usize] {
            take_down(st, me, n, k);
        }
    }
}

impl Module for CrmemModule {
    fn registration(&self) -> Registration {
        Registration {
            name: "crmem",
            instructions: &[FLUSH],
            controls: &[CONTROL, HEARTBEAT],
        }
    }

    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        let shared = self.shared.clone();
        if ins.ty == FLUSH {
            shared.flush.taken();
        }
        let mut st = shared.lock();
        if ins.ty == FLUSH {
            self.drain(cx, &mut st);
        }
        let _ = cx.complete(ins.id, 0, &[]);
        if !self.beating {
            // The first instruction (`Crmem::open` issues one) starts the heartbeat.
            self.last_beat = cx.now();
            self.beating = cx
                .arm(Instant(cx.now().0 + self.heartbeat), TIMER_BEAT)
                .is_ok();
        }
    }

    fn on_control(&mut self, cx: &mut Context<'_>, msg: Control<'_>) {
        let Some(from) = self.node_of(msg.from) else {
            return;
        };
        let shared = self.shared.clone();
        let mut st = shared.lock();
        if st.dead[from as usize] {
            // Taken for dead in this incarnation: what it still says is not listened to.
            return;
        }
        st.last_heard[from as usize] = cx.now();
        st.heard[from as usize] = true;
        if let Some(r) = st.reported[from as usize] {
            if cx.now().0 > r.0 + self.unreachable_silence {
                st.reported[from as usize] = None;
            }
        }
        if msg.ty == CONTROL {
            st.node.handle_message(from, msg.body);
        }
        if st.dropped[from as usize] {
            if st.node.has_backup(from) {
                // It recovered (asked for a snapshot): counted again.
                st.dropped[from as usize] = false;
            } else {
                st.node.tell_dropped(from);
            }
        }
        self.drain(cx, &mut st);
    }

    fn on_timeout(&mut self, cx: &mut Context<'_>, token: u64) {
        let shared = self.shared.clone();
        let mut st = shared.lock();
        let now = cx.now();
        match token {
            TIMER_BEAT => {
                // Woken far later than asked: this process itself stalled, and its peers'
                // silence proves nothing. They get a fresh window.
                if now.0 > self.last_beat.0 + 2 * self.heartbeat {
                    st.last_heard.iter_mut().for_each(|t| *t = now);
                }
                self.last_beat = now;
                for k in 0..self.nodes.len() as NodeId {
                    if k == self.me || st.dead[k as usize] {
                        continue;
                    }
                    let _ = cx.send(self.nodes[k as usize], HEARTBEAT, &[]);
                    let silent = now.0.saturating_sub(st.last_heard[k as usize].0);
                    let primary = matches!(st.node.role(), Role::Primary { .. });
                    // With membership only a view fails a node of the view.
                    let judged = (primary || st.heard[k as usize])
                        && !(self.fenced && st.in_view[k as usize]);
                    let limit = match st.reported[k as usize] {
                        Some(_) => self.unreachable_silence.min(self.suspect_after),
                        None => self.suspect_after,
                    };
                    if judged && !st.dropped[k as usize] && silent > limit {
                        self.down(&mut st, k);
                    }
                }
                let _ = cx.arm(Instant(now.0 + self.heartbeat), TIMER_BEAT);
            }
            TIMER_NODE => st.node.handle_timeout(now),
            _ => {}
        }
        self.drain(cx, &mut st);
    }

    /// Nothing is bound at a peer's port: its process is gone, or a forger says so. The peer
    /// is taken for dead after `unreachable_silence` of silence instead of `suspect_after`.
    fn on_peer_unreachable(&mut self, cx: &mut Context<'_>, peer: Address) {
        let Some(k) = self.node_of(peer) else {
            return;
        };
        if k == self.me {
            return;
        }
        tracing::debug!(
            node = self.me,
            peer = k,
            "crmem: peer's port reported unreachable"
        );
        let hint = {
            let mut st = self.shared.lock();
            st.reported[k as usize] = Some(cx.now());
            st.hint.clone()
        };
        if let Some(h) = hint {
            h(k);
        }
    }

    fn on_peer_restart(&mut self, cx: &mut Context<'_>, peer: Address, _incarnation: u64) {
        let Some(k) = self.node_of(peer) else {
            return;
        };
        tracing::info!(
            node = self.me,
            peer = k,
            "crmem: peer restarted, it recovers through a snapshot"
        );
        let shared = self.shared.clone();
        let mut st = shared.lock();
        // With membership a restarted backup is dropped at once (it holds nothing now and
        // cannot take over), but a restarted primary is handed over only by the view that
        // leaves its previous process out.
        let primary = matches!(st.node.role(), Role::Primary { .. });
        if !st.dead[k as usize] && (!self.fenced || primary) {
            self.down(&mut st, k);
        }
        if self.fenced && primary {
            st.restarted[k as usize] = true;
        }
        // Its new incarnation recovers through a snapshot; listen to it again.
        st.dead[k as usize] = false;
        st.dropped[k as usize] = false;
        st.last_heard[k as usize] = cx.now();
        st.heard[k as usize] = true;
        self.drain(cx, &mut st);
    }
}

/// A CRMem node: its module host, the module loaded on it, and the application's calls.
pub struct Crmem {
    /// Stopped first on drop (before the host): the thread tells the node through it.
    membership: Option<Membership>,
    host: ModuleHost,
    shared: Arc<Shared>,
    module: ModuleId,
    key: u64,
    /// The disk log's writer thread (with a disk log).
    disk_writer: Option<std::thread::JoinHandle<()>>,
}

impl Crmem {
    /// Opens the node: a module host at `cfg.nodes[cfg.me]`, the segments made by
    /// `segments` (the same on every node, in the same order), and the CRMem module loaded.
    pub fn open(cfg: CrmemConfig, segments: &[(usize, LockMapping)]) -> Result<Crmem, CrmemError> {
        let me = cfg.me as usize;
        if me >= cfg.nodes.len() || cfg.primary as usize >= cfg.nodes.len() {
            return Err(CrmemError::BadConfig);
        }
        let host = plumbing::host_at(None, cfg.nodes[me], cfg.handlers)?;
        Crmem::on_host(host, cfg, segments)
    }

    /// [`Crmem::open`] on an engine of the caller's (an engine thread of its own).
    pub fn open_on(
        engine: &Engine,
        cfg: CrmemConfig,
        segments: &[(usize, LockMapping)],
    ) -> Result<Crmem, CrmemError> {
        let me = cfg.me as usize;
        if me >= cfg.nodes.len() || cfg.primary as usize >= cfg.nodes.len() {
            return Err(CrmemError::BadConfig);
        }
        let host = plumbing::host_at(Some(engine), cfg.nodes[me], cfg.handlers)?;
        Crmem::on_host(host, cfg, segments)
    }

    /// The module host the node runs on (its counters, or a closure between engine steps).
    pub fn host(&self) -> &ModuleHost {
        &self.host
    }

    /// With [`Handlers::Polled`]: runs the module on this thread for what came in, what is
    /// due and what the application queued (see [`ModuleHost::drive`]); how much work that
    /// was. A polled node calls it whenever no transaction of its own waits (the waits drive
    /// the host themselves). 0 with the other placements.
    pub fn drive(&self) -> usize {
        self.host.drive()
    }

    /// Opens the node with its failures decided by a txcast group (see [`crate::membership`]
    /// and this module's documentation): three nodes or more, every one opened this way.
    ///
    /// - A fresh start (`cfg.recover` false) returns once every node is in the group.
    /// - A node that dies, or is cut off in a minority, is left out by the majority's next
    ///   view (the group's `silence_timeout`, or sooner once its host reports its port
    ///   unreachable): the primary stops waiting for a backup left out; the backups of a
    ///   primary left out hand over to the view's lowest node.
    /// - A node the group leaves out while it runs (cut off, then healed) fails `begin` with
    ///   [`CrmemError::Expelled`]; its commits in flight time out (nobody acknowledges them).
    ///   It is opened again with `recover` from the primary of the others.
    /// - A restarted node (`cfg.recover`) recovers through the snapshot of `cfg.primary`,
    ///   waits `rejoin_delay` (so that the group has removed its previous process), joins,
    ///   and returns once it is a member and its snapshot is in.
    ///
    /// The group port runs on `engine` if given, else on the process's embedded engine.
    pub fn open_with_membership(
        engine: Option<&Engine>,
        cfg: CrmemConfig,
        segments: &[(usize, LockMapping)],
        members: MembershipConfig,
    ) -> Result<Crmem, CrmemError> {
        let n = cfg.nodes.len();
        if cfg.me as usize >= n || cfg.primary as usize >= n {
            return Err(CrmemError::BadConfig);
        }
        if members.ports.len() != n {
            return Err(MembershipError::BadConfig.into());
        }
        if n < 3 {
            return Err(CrmemError::MembershipNeedsThree);
        }
        let (me, recover) = (cfg.me, cfg.recover);
        let started = std::time::Instant::now();
        let host = plumbing::host_at(engine, cfg.nodes[me as usize], cfg.handlers)?;
        let mut node = Crmem::with_fencing(host, cfg, segments, true)?;
        if recover {
            // Driven meanwhile: a polled host answers nothing unless driven.
            plumbing::idle_until(&node.host, std::time::Instant::now() + members.rejoin_delay);
        }
        let deadline = started + members.open_timeout;
        let joined = membership::join(&members, me, recover, engine, deadline)?;
        node.shared.lock().hint = Some(joined.hinter());
        let told = MirrorTold {
            host: node.host.clone(),
            shared: node.shared.clone(),
            module: node.module,
            key: node.key,
            me,
            n,
        };
        node.membership = Some(Membership::start(joined, Arc::new(told)));
        let recovering = || matches!(node.role(), Role::Recovering { .. });
        match plumbing::wait_recovered(&node.host, deadline, recovering, || node.expelled()) {
            plumbing::Opened::Ready => Ok(node),
            plumbing::Opened::Expelled => Err(CrmemError::Expelled),
            plumbing::Opened::Timeout => Err(MembershipError::OpenTimeout.into()),
        }
    }

    /// Whether the membership group left this node out (it serves no more).
    pub fn expelled(&self) -> bool {
        self.shared.lock().expelled
    }

    /// The membership group's view this node was last told (0 without membership, or
    /// before the first change).
    pub fn view(&self) -> u64 {
        self.shared.lock().view
    }

    fn on_host(
        host: ModuleHost,
        cfg: CrmemConfig,
        segments: &[(usize, LockMapping)],
    ) -> Result<Crmem, CrmemError> {
        Crmem::with_fencing(host, cfg, segments, false)
    }

    fn with_fencing(
        host: ModuleHost,
        cfg: CrmemConfig,
        segments: &[(usize, LockMapping)],
        fenced: bool,
    ) -> Result<Crmem, CrmemError> {
        let role = if cfg.recover {
            Role::Recovering { from: cfg.primary }
        } else if cfg.me == cfg.primary {
            Role::Primary {
                backups: (0..cfg.nodes.len() as NodeId)
                    .filter(|&k| k != cfg.me)
                    .collect(),
            }
        } else {
            Role::Backup {
                primary: cfg.primary,
            }
        };
        let core = Config {
            node: cfg.me,
            incarnation: host.incarnation(),
            disk_log: cfg.disk.is_some(),
            ..cfg.core.clone()
        };
        let restore = matches!(role, Role::Primary { .. });
        let mut node = Node::new(core, role);
        for (bytes, mapping) in segments {
            node.add_segment(*bytes, mapping.clone())?;
        }
        let disk_err = |e: std::io::Error| CrmemError::Disk(e.to_string());
        let log = match &cfg.disk {
            None => None,
            Some(dir) => {
                let (log, found) = DiskLog::open(dir).map_err(disk_err)?;
                if restore {
                    if let Some((seq, images)) = &found.checkpoint {
                        if !node.restore(*seq, images) {
                            return Err(CrmemError::Disk(
                                "the checkpoint's segments differ from the configured ones".into(),
                            ));
                        }
                    }
                    for part in &found.parts {
                        if !node.replay(part) {
                            return Err(CrmemError::Disk(format!(
                                "the log breaks off after commit {}",
                                node.seq()
                            )));
                        }
                    }
                    if node.seq() > 0 {
                        tracing::info!(
                            node = cfg.me,
                            seq = node.seq(),
                            term = found.term,
                            "crmem: restored from disk"
                        );
                    }
                }
                // A backup's copy comes from its primary; its directory stays as it was (an
                // earlier term's log, perhaps the only one left of an earlier primary's
                // commits) until a promotion starts a new term with a checkpoint.
                Some(log)
            }
        };
        let n = cfg.nodes.len();
        let now = host.now();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                node,
                waits: Waits::new(),
                async_txns: FxHashSet::default(),
                durable_waiters: plumbing::DurableWaiters::default(),
                notices: VecDeque::new(),
                outq: VecDeque::new(),
                last_heard: vec![now; n],
                heard: vec![false; n],
                reported: vec![None; n],
                dead: vec![false; n],
                dropped: vec![false; n],
                disk: None,
                disk_failed: None,
                view: 0,
                in_view: vec![true; n],
                restarted: vec![false; n],
                expelled: false,
                hint: None,
            }),
            flush: Flusher::new(),
            durable: plumbing::Durable::new(),
            disk_syncs: AtomicU64::new(0),
        });
        let module = CrmemModule {
            shared: shared.clone(),
            nodes: cfg.nodes.clone(),
            me: cfg.me,
            heartbeat: cfg.heartbeat.as_nanos() as u64,
            suspect_after: cfg.suspect_after.as_nanos() as u64,
            unreachable_silence: cfg.unreachable_silence.as_nanos() as u64,
            fenced,
            beating: false,
            last_beat: now,
        };
        host.load(cfg.module, cfg.key, module)?;
        let disk_writer = match log {
            None => None,
            Some(log) => {
                let (tx, rx) = std::sync::mpsc::channel();
                shared.lock().disk = Some(tx);
                let (sh, h, k) = (shared.clone(), host.clone(), (cfg.module, cfg.key));
                let spawned = std::thread::Builder::new()
                    .name(format!("txcast-crmem-disk-{}", cfg.me))
                    .spawn(move || {
                        disklog::run(
                            log,
                            rx,
                            |seq| {
                                sh.disk_syncs.fetch_add(1, Ordering::Relaxed);
                                sh.lock().node.disk_synced(seq);
                                // The module files the outcomes (and sends nothing new).
                                let _ = sh.flush.post(&h, k.0, k.1, FLUSH);
                            },
                            || sh.lock().node.checkpoint(),
                            |e| {
                                tracing::error!(error = %e, "crmem: disk log failed");
                                sh.lock().disk_failed = Some(e.to_string());
                            },
                        )
                    });
                Some(spawned.map_err(disk_err)?)
            }
        };
        let c = Crmem {
            membership: None,
            host,
            shared,
            module: cfg.module,
            key: cfg.key,
            disk_writer,
        };
        // Starts the heartbeat and sends what the node queued (a snapshot request).
        c.flush()?;
        Ok(c)
    }

    /// Has the module send what the node queued (one FLUSH at a time is enough).
    fn flush(&self) -> Result<(), CrmemError> {
        Ok(self
            .shared
            .flush
            .post(&self.host, self.module, self.key, FLUSH)?)
    }

    /// This node's role now.
    pub fn role(&self) -> Role {
        self.shared.lock().node.role().clone()
    }

    /// The last commit number given (primary) or applied (backup).
    pub fn seq(&self) -> u64 {
        self.shared.lock().node.seq()
    }

    /// Role changes and lost backups since the last call.
    pub fn notices(&self) -> Vec<Event> {
        self.shared.lock().notices.drain(..).collect()
    }

    pub fn counters(&self) -> crate::node::Counters {
        self.shared.lock().node.counters().clone()
    }

    /// A copy of a segment as it is now (committed and in-flight writes alike).
    pub fn snapshot_segment(&self, s: SegmentId) -> Option<Vec<u8>> {
        self.shared.lock().node.segment(s).map(|m| m.to_vec())
    }

    /// Starts a transaction whose locks must all come within `lock_timeout`.
    pub fn begin(&self, lock_timeout: Duration) -> Result<TxnId, CrmemError> {
        let deadline = Instant(self.host.now().0 + lock_timeout.as_nanos() as u64);
        let mut st = self.shared.lock();
        if st.expelled {
            return Err(CrmemError::Expelled);
        }
        Ok(st.node.begin(deadline)?)
    }

    /// Declares a range (see [`Node::set_range`]); waits for its locks if another
    /// transaction holds them, up to the transaction's deadline.
    pub fn set_range(
        &self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
        mode: Mode,
    ) -> Result<(), CrmemError> {
        let r = self
            .shared
            .lock()
            .node
            .set_range(txn, segment, offset, len, mode)?;
        if r == Lock::Granted {
            return Ok(());
        }
        // The module arms the deadline and grants the locks when they come free.
        self.flush()?;
        match self.wait(txn, Duration::from_secs(3600))? {
            Event::Granted(_) => Ok(()),
            _ => Err(CrmemError::LockTimeout),
        }
    }

    /// Reads a declared range in place.
    pub fn read<R>(
        &self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, CrmemError> {
        let st = self.shared.lock();
        Ok(f(st.node.range(txn, segment, offset, len)?))
    }

    /// Writes a range declared for writing, in place.
    pub fn write<R>(
        &self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, CrmemError> {
        let mut st = self.shared.lock();
        Ok(f(st.node.range_mut(txn, segment, offset, len)?))
    }

    /// Rolls the transaction back.
    pub fn abort(&self, txn: TxnId) -> Result<(), CrmemError> {
        self.shared.lock().node.abort(txn)?;
        // Its locks may grant a waiter: the module files that.
        self.flush()
    }

    /// Commits: returns once every live backup holds the transaction (its commit number),
    /// or fails after `timeout`.
    pub fn commit(&self, txn: TxnId, timeout: Duration) -> Result<u64, CrmemError> {
        let seq = self.shared.lock().node.commit(txn)?;
        self.flush()?;
        match self.wait(txn, timeout) {
            Ok(Event::Committed(_)) => Ok(seq),
            Ok(_) => Err(CrmemError::Timeout),
            Err(CrmemError::Timeout) => {
                // Still on its way: nobody will take its outcome now; the caller can wait
                // for `seq` with `wait_durable`.
                let mut st = self.shared.lock();
                if let Some(e) = st.waits.take(txn) {
                    return match e {
                        Event::Committed(_) => Ok(seq),
                        _ => Err(CrmemError::Timeout),
                    };
                }
                st.async_txns.insert(txn);
                if let Some(e) = &st.disk_failed {
                    return Err(CrmemError::Disk(e.clone()));
                }
                Err(CrmemError::CommitPending { seq })
            }
            Err(e) => Err(e),
        }
    }

    /// Commits without waiting (LRVM's no-flush commit): the locks are released and the
    /// write set is on its way; the commit number is returned at once. The transaction is
    /// durable once [`Crmem::durable`] reaches that number ([`Crmem::wait_durable`]); one
    /// thread may keep many commits in flight, and they complete in order.
    pub fn commit_async(&self, txn: TxnId) -> Result<u64, CrmemError> {
        let seq = {
            let mut st = self.shared.lock();
            let seq = st.node.commit(txn)?;
            st.async_txns.insert(txn);
            seq
        };
        self.flush()?;
        Ok(seq)
    }

    /// Batches of commits the disk log has synced so far (one `fdatasync` each; 0 without a
    /// disk log): commits per sync is what group commit saved.
    pub fn disk_syncs(&self) -> u64 {
        self.shared.disk_syncs.load(Ordering::Relaxed)
    }

    /// Commits up to this number are on every live backup.
    pub fn durable(&self) -> u64 {
        self.shared.durable.get()
    }

    /// Waits until commit `seq` is durable, or `timeout` passes.
    pub fn wait_durable(&self, seq: u64, timeout: Duration) -> Result<(), CrmemError> {
        let lock = || self.shared.lock();
        match self
            .shared
            .durable
            .wait(&self.host, lock, |st| &mut st.durable_waiters, seq, timeout)
        {
            true => Ok(()),
            false => Err(CrmemError::Timeout),
        }
    }

    /// Waits for `txn`'s outcome: parks this thread, which the module unparks when it files
    /// the outcome (a condition variable shared by every waiter woke them all for each).
    fn wait(&self, txn: TxnId, timeout: Duration) -> Result<Event, CrmemError> {
        plumbing::wait_outcome(
            &self.host,
            || self.shared.lock(),
            |st| &mut st.waits,
            txn,
            timeout,
        )
        .ok_or(CrmemError::Timeout)
    }
}

/// What the membership thread holds of a mirror node.
struct MirrorTold {
    host: ModuleHost,
    shared: Arc<Shared>,
    module: ModuleId,
    key: u64,
    me: NodeId,
    n: usize,
}

impl Target for MirrorTold {
    /// Every node stays in "the previous view" for [`membership::next_view`]: a mirror's
    /// live set is the group's members as they are (a restarted node comes back through
    /// the primary's snapshot, not through a view).
    fn current(&self) -> Option<(u64, Vec<NodeId>)> {
        let view = self.shared.lock().view;
        Some((view, (0..self.n as NodeId).collect()))
    }

    fn tell(&self, view: u64, live: &[NodeId], _joining: Option<NodeId>) {
        tell_view(&mut self.shared.lock(), self.me, self.n, view, live);
        let _ = self
            .shared
            .flush
            .post(&self.host, self.module, self.key, FLUSH);
    }

    fn expelled(&self) {
        self.shared.lock().expelled = true;
    }
}

impl Drop for Crmem {
    fn drop(&mut self) {
        // The membership thread first: it tells the node through the host.
        drop(self.membership.take());
        // The writer holds the host: it ends when its channel closes.
        let tx = self.shared.lock().disk.take();
        drop(tx);
        if let Some(t) = self.disk_writer.take() {
            let _ = t.join();
        }
    }
}
