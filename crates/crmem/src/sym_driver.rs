//! CRMem's symmetric configuration on txcast's extension modules: a module on each node's
//! engine loop takes the other nodes' messages (lock requests at this home, grants, remote
//! atomic writes, acknowledgements, releases, view-change flushes, snapshots) and answers
//! with no application thread involved; the application runs transactions on its own
//! threads against the same [`SymNode`], reading and writing its replica in place.
//!
//! The node sits behind one mutex shared by the application's threads and the engine's;
//! a thread that waits (for a remote grant, for a commit to complete) parks and is unparked
//! by the module when the outcome is filed, so waiting threads use no CPU.
//!
//! Membership: [`SymCrmem::open_with_membership`] joins the database's txcast group, whose
//! failure detector and agreed views tell every member the same view (see
//! [`crate::membership`]); a node opened with [`SymCrmem::open`] is told by the caller through
//! [`SymCrmem::view_change`] (every member the same view number and live set).

use crate::lock::LockMapping;
use crate::membership::{self, Membership, MembershipConfig, MembershipError, Target};
use crate::node::{Config, CrError, Lock, Mode, NodeId, SegmentId, TxnId};
use crate::plumbing::{self, Flusher, Waits};
use crate::symmetric::{Phase, SymAbort, SymEvent, SymMsg, SymNode};
use rustc_hash::FxHashSet;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use txcast_port::{Engine, Handlers, ModuleHost, ModuleHostError};
use txcast_proto::module::{Context, Control, Instruction, Module, ModuleId, Registration};
use txcast_proto::time::Instant;
use txcast_proto::Address;

/// The instruction that makes the module send what the node queued.
pub const SYM_FLUSH: u16 = 1;
/// The instruction that makes the module greet every other node (see [`SYM_HELLO`]).
pub const SYM_GREET: u16 = 2;
/// The control-message type of symmetric CRMem's messages.
pub const SYM_CONTROL: u16 = 0x4354;
/// An empty control message a node sends every other one when it opens: the others' hosts
/// learn its incarnation from it (a restarted node's), so what they send it afterwards (a
/// snapshot) is meant for this process and not dropped as stale.
pub const SYM_HELLO: u16 = 0x4355;
const TIMER_NODE: u64 = 2;

/// How a node of a symmetric CRMem database is set up.
#[derive(Clone, Debug)]
pub struct SymCrmemConfig {
    pub module: ModuleId,
    pub key: u64,
    /// Every node's module-host address; a node's id is its index.
    pub nodes: Vec<Address>,
    pub me: NodeId,
    /// A restarted node: it waits for a snapshot (sent when the others admit it with a
    /// view change) before it serves.
    pub recover: bool,
    /// Where the module's handlers run: on the engine (the paper's *CoProcessor*, the
    /// default), in the application's threads when they poll (*CPU Polling*: a thread
    /// waiting for a grant or a commit drives the host; a node with no transaction running
    /// must call `drive` itself, or it answers nothing and misses its timers), or on a thread
    /// woken for each message (*CPU Interrupt*).
    pub handlers: Handlers,
    pub core: Config,
}

impl SymCrmemConfig {
    pub fn new(nodes: Vec<Address>, me: NodeId) -> SymCrmemConfig {
        SymCrmemConfig {
            module: 21,
            key: 0xc7e4,
            nodes,
            me,
            recover: false,
            handlers: Handlers::Engine,
            core: Config::default(),
        }
    }
}

/// Why a symmetric CRMem call failed.
#[derive(Debug, thiserror::Error)]
pub enum SymCrmemError {
    #[error(transparent)]
    Core(#[from] CrError),
    #[error("module host: {0}")]
    Host(#[from] ModuleHostError),
    #[error("the transaction was aborted: its locks did not come by its deadline")]
    LockTimeout,
    #[error("the transaction was aborted by a view change")]
    ViewChange,
    #[error("no outcome in time")]
    Timeout,
    #[error("this node's id is not in the node list, or a segment's home is not")]
    BadConfig,
    #[error("membership: {0}")]
    Membership(#[from] MembershipError),
    /// The membership group left this node out (the others took it for dead): it serves no
    /// more; open it again with `recover`.
    #[error("this node was left out of the membership group")]
    Expelled,
}

struct State {
    node: SymNode,
    waits: Waits<SymEvent>,
    /// Transactions whose waiter gave up: their outcome is not kept.
    abandoned: FxHashSet<TxnId>,
    notices: VecDeque<SymEvent>,
    outq: VecDeque<(NodeId, Vec<u8>)>,
    /// The view the node is in, as told (or, for a restarted node, as its snapshot's SEQS
    /// says); the membership thread resumes from it.
    view: u64,
    /// The membership group left this node out.
    expelled: bool,
    durable_waiters: plumbing::DurableWaiters,
    /// Transactions declared with [`SymCrmem::ask_ranges`] whose locks have not all come:
    /// their outcome goes to `asked_outcomes`, not to a waiting thread (at most `txns_max`).
    asked: FxHashSet<TxnId>,
    /// Outcomes of asked transactions not yet taken by [`SymCrmem::granted`]: at most one
    /// per asked transaction.
    asked_outcomes: VecDeque<(TxnId, SymEvent)>,
    /// Threads parked in [`SymCrmem::granted`] (each at most once).
    asked_waiters: Vec<std::thread::Thread>,
}

struct Shared {
    state: Mutex<State>,
    flush: Flusher,
    /// This node's commits up to this number are held by every live node.
    durable: plumbing::Durable,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct SymModule {
    shared: Arc<Shared>,
    nodes: Vec<Address>,
    me: NodeId,
}

impl SymModule {
    /// Sends what the node queued, files its events, arms its deadline.
    fn drain(&self, cx: &mut Context<'_>, st: &mut State) {
        while let Some(m) = st.node.poll_transmit() {
            st.outq.push_back(m);
        }
        plumbing::send_queued(cx, &self.nodes, SYM_CONTROL, &mut st.outq, |_, _| false);
        while let Some(e) = st.node.poll_event() {
            match e {
                SymEvent::Granted(t) | SymEvent::Aborted(t, _) if st.asked.remove(&t) => {
                    st.asked_outcomes.push_back((t, e));
                    st.asked_waiters.drain(..).for_each(|w| w.unpark());
                }
                SymEvent::Granted(t) | SymEvent::Committed(t) | SymEvent::Aborted(t, _) => {
                    if st.abandoned.remove(&t) {
                        continue;
                    }
                    st.waits.file(t, e);
                }
                other => plumbing::push_notice(&mut st.notices, other),
            }
        }
        let d = st.node.durable();
        self.shared.durable.file(&mut st.durable_waiters, d);
        if let Some(t) = st.node.poll_timeout() {
            let _ = cx.arm(t, TIMER_NODE);
        }
    }
}

impl Module for SymModule {
    fn registration(&self) -> Registration {
        Registration {
            name: "crmem-symmetric",
            instructions: &[SYM_FLUSH, SYM_GREET],
            controls: &[SYM_CONTROL, SYM_HELLO],
        }
    }

    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        let shared = self.shared.clone();
        if ins.ty == SYM_FLUSH {
            shared.flush.taken();
        }
        if ins.ty == SYM_GREET {
            for (k, &a) in self.nodes.iter().enumerate() {
                if k != self.me as usize {
                    let _ = cx.send(a, SYM_HELLO, &[]);
                }
            }
        }
        let mut st = shared.lock();
        self.drain(cx, &mut st);
        let _ = cx.complete(ins.id, 0, &[]);
    }

    fn on_control(&mut self, cx: &mut Context<'_>, msg: Control<'_>) {
        let Some(from) = self.nodes.iter().position(|&n| n == msg.from) else {
            return;
        };
        let shared = self.shared.clone();
        let mut st = shared.lock();
        if msg.ty == SYM_CONTROL {
            if st.node.phase() == Phase::Recovering {
                // The snapshot's view is where this node's membership resumes (the core
                // takes the first SEQS).
                if let Ok(SymMsg::Seqs { view, .. }) = SymMsg::parse(msg.body) {
                    if st.view == 0 {
                        st.view = view;
                    }
                }
            }
            st.node.handle_message(from as NodeId, msg.body);
        }
        self.drain(cx, &mut st);
    }

    fn on_timeout(&mut self, cx: &mut Context<'_>, token: u64) {
        let shared = self.shared.clone();
        let mut st = shared.lock();
        if token == TIMER_NODE {
            st.node.handle_timeout(cx.now());
        }
        self.drain(cx, &mut st);
    }
}

/// A node of a symmetric CRMem database: its module host, the module, the application's
/// calls.
pub struct SymCrmem {
    /// Stopped first on drop (before the host): the thread tells the node through it.
    membership: Option<Membership>,
    host: ModuleHost,
    shared: Arc<Shared>,
    module: ModuleId,
    key: u64,
}

/// What the membership thread holds of the node.
struct Told {
    host: ModuleHost,
    shared: Arc<Shared>,
    module: ModuleId,
    key: u64,
}

impl Target for Told {
    fn current(&self) -> Option<(u64, Vec<NodeId>)> {
        let st = self.shared.lock();
        (st.node.phase() != Phase::Recovering).then(|| (st.view, st.node.live().to_vec()))
    }

    fn tell(&self, view: u64, live: &[NodeId], joining: Option<NodeId>) {
        tell(&self.shared, view, live, joining);
        let _ = self
            .shared
            .flush
            .post(&self.host, self.module, self.key, SYM_FLUSH);
    }

    fn expelled(&self) {
        self.shared.lock().expelled = true;
    }
}

/// Tells the node of a view (the caller posts the FLUSH).
fn tell(shared: &Shared, view: u64, live: &[NodeId], joining: Option<NodeId>) {
    let mut st = shared.lock();
    if st.node.phase() != Phase::Recovering && view > st.view {
        st.view = view;
    }
    st.node.view_change(view, live, joining);
}

impl SymCrmem {
    /// Opens the node: a module host at `cfg.nodes[cfg.me]`, the segments (size, mapping,
    /// home node; the same on every node, in the same order), the module loaded.
    pub fn open(
        cfg: SymCrmemConfig,
        segments: &[(usize, LockMapping, NodeId)],
    ) -> Result<SymCrmem, SymCrmemError> {
        let n = cfg.nodes.len();
        if cfg.me as usize >= n || segments.iter().any(|s| s.2 as usize >= n) {
            return Err(SymCrmemError::BadConfig);
        }
        let host = plumbing::host_at(None, cfg.nodes[cfg.me as usize], cfg.handlers)?;
        SymCrmem::on_host(host, cfg, segments)
    }

    /// [`SymCrmem::open`] on an engine of the caller's (e.g. one that parks at once when
    /// idle, for processes that share few cores).
    pub fn open_on(
        engine: &Engine,
        cfg: SymCrmemConfig,
        segments: &[(usize, LockMapping, NodeId)],
    ) -> Result<SymCrmem, SymCrmemError> {
        let n = cfg.nodes.len();
        if cfg.me as usize >= n || segments.iter().any(|s| s.2 as usize >= n) {
            return Err(SymCrmemError::BadConfig);
        }
        let host = plumbing::host_at(Some(engine), cfg.nodes[cfg.me as usize], cfg.handlers)?;
        SymCrmem::on_host(host, cfg, segments)
    }

    /// Opens the node with its membership from a txcast group (see [`crate::membership`]):
    /// its group port joins the database's group (node 0 of a fresh start makes it), and
    /// every view the group installs is told to the node, the same on every member.
    ///
    /// - A fresh start (`cfg.recover` false) returns once every node is in the group: the
    ///   database starts with all of them.
    /// - A node whose process dies (kill -9, or dropped) is taken for dead by the group's
    ///   failure detector (`silence_timeout`); the survivors' next view leaves it out: its
    ///   open transactions' locks at every home are freed, its commits that any survivor
    ///   holds are finished on every survivor (relayed), and the survivors serve again once
    ///   every one of them has flushed. A commit that returned `Ok` is on every survivor.
    /// - A restarted node (`cfg.recover` true) opens its module host and greets the others,
    ///   waits `rejoin_delay` (so that the group has removed its previous process), joins, is
    ///   admitted by the next view as the joining node, and returns once the snapshot is in:
    ///   it serves only then. `open_timeout` counts from the call.
    /// - A node the group leaves out while it runs (falsely suspected) fails `begin` with
    ///   [`SymCrmemError::Expelled`] (its commits in flight time out: the others no longer
    ///   acknowledge it) and must be opened again with `recover`.
    ///
    /// The group port runs on the process's embedded engine; the module host where
    /// `cfg.handlers` says (as [`SymCrmem::open`]).
    pub fn open_with_membership(
        cfg: SymCrmemConfig,
        segments: &[(usize, LockMapping, NodeId)],
        members: MembershipConfig,
    ) -> Result<SymCrmem, SymCrmemError> {
        let n = cfg.nodes.len();
        if cfg.me as usize >= n || segments.iter().any(|s| s.2 as usize >= n) {
            return Err(SymCrmemError::BadConfig);
        }
        if members.ports.len() != n {
            return Err(MembershipError::BadConfig.into());
        }
        let (me, recover) = (cfg.me, cfg.recover);
        let started = std::time::Instant::now();
        let host = plumbing::host_at(None, cfg.nodes[cfg.me as usize], cfg.handlers)?;
        // The module greets the others at once: their hosts learn this incarnation during
        // the delay, before any of them sends it the snapshot.
        let mut node = SymCrmem::on_host(host, cfg, segments)?;
        if recover {
            // Driven meanwhile: a polled host sends its greeting only when driven, and the
            // others must know this incarnation before they send it the snapshot.
            plumbing::idle_until(&node.host, std::time::Instant::now() + members.rejoin_delay);
        }
        let deadline = started + members.open_timeout;
        let joined = membership::join(&members, me, recover, None, deadline)?;
        let told = Told {
            host: node.host.clone(),
            shared: node.shared.clone(),
            module: node.module,
            key: node.key,
        };
        node.membership = Some(Membership::start(joined, Arc::new(told)));
        // Opening only: a restarted node returns once its snapshot is in.
        let recovering = || recover && node.phase() == Phase::Recovering;
        match plumbing::wait_recovered(&node.host, deadline, recovering, || node.expelled()) {
            plumbing::Opened::Ready => Ok(node),
            plumbing::Opened::Expelled => Err(SymCrmemError::Expelled),
            plumbing::Opened::Timeout => Err(MembershipError::OpenTimeout.into()),
        }
    }

    fn on_host(
        host: ModuleHost,
        cfg: SymCrmemConfig,
        segments: &[(usize, LockMapping, NodeId)],
    ) -> Result<SymCrmem, SymCrmemError> {
        let n = cfg.nodes.len();
        let core = Config {
            node: cfg.me,
            incarnation: host.incarnation(),
            ..cfg.core.clone()
        };
        let mut node = SymNode::new(core, n, cfg.recover);
        for (bytes, mapping, home) in segments {
            node.add_segment(*bytes, mapping.clone(), *home)?;
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                node,
                waits: Waits::new(),
                abandoned: FxHashSet::default(),
                notices: VecDeque::new(),
                outq: VecDeque::new(),
                view: 0,
                expelled: false,
                durable_waiters: plumbing::DurableWaiters::default(),
                asked: FxHashSet::default(),
                asked_outcomes: VecDeque::new(),
                asked_waiters: Vec::new(),
            }),
            flush: Flusher::new(),
            durable: plumbing::Durable::new(),
        });
        host.load(
            cfg.module,
            cfg.key,
            SymModule {
                shared: shared.clone(),
                nodes: cfg.nodes.clone(),
                me: cfg.me,
            },
        )?;
        host.post(cfg.module, cfg.key, SYM_GREET, &[])?;
        Ok(SymCrmem {
            membership: None,
            host,
            shared,
            module: cfg.module,
            key: cfg.key,
        })
    }

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

    fn flush(&self) -> Result<(), SymCrmemError> {
        Ok(self
            .shared
            .flush
            .post(&self.host, self.module, self.key, SYM_FLUSH)?)
    }

    pub fn phase(&self) -> Phase {
        self.shared.lock().node.phase()
    }

    /// Home moves, lost nodes, the end of view changes and recovery, since the last call.
    pub fn notices(&self) -> Vec<SymEvent> {
        self.shared.lock().notices.drain(..).collect()
    }

    pub fn counters(&self) -> crate::node::Counters {
        self.shared.lock().node.counters().clone()
    }

    /// A copy of a segment as it is now.
    pub fn snapshot_segment(&self, s: SegmentId) -> Option<Vec<u8>> {
        self.shared.lock().node.segment(s).map(|m| m.to_vec())
    }

    /// The view is `live` now (see [`SymNode::view_change`]). For a node opened with
    /// [`SymCrmem::open`]; one opened with membership is told by its group.
    pub fn view_change(
        &self,
        view: u64,
        live: &[NodeId],
        joining: Option<NodeId>,
    ) -> Result<(), SymCrmemError> {
        tell(&self.shared, view, live, joining);
        self.flush()
    }

    /// The view this node is in: 0 until the first change (with membership, the group's
    /// view number since).
    pub fn view(&self) -> u64 {
        self.shared.lock().view
    }

    /// Whether the membership group left this node out (it serves no more).
    pub fn expelled(&self) -> bool {
        self.shared.lock().expelled
    }

    /// Starts a transaction whose locks, here and at the homes, must come within
    /// `lock_timeout`.
    pub fn begin(&self, lock_timeout: Duration) -> Result<TxnId, SymCrmemError> {
        let deadline = Instant(self.host.now().0 + lock_timeout.as_nanos() as u64);
        let mut st = self.shared.lock();
        if st.expelled {
            return Err(SymCrmemError::Expelled);
        }
        Ok(st.node.begin(deadline)?)
    }

    /// Declares a range: takes its locks here and at the segment's home, waiting up to the
    /// transaction's deadline ([`SymCrmemError::LockTimeout`] past it).
    pub fn set_range(
        &self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
        mode: Mode,
    ) -> Result<(), SymCrmemError> {
        self.set_ranges(txn, &[(segment, offset, len, mode)])
    }

    /// Declares several ranges at once (`(segment, offset, len, mode)` each): their locks
    /// here in order, every home asked without waiting for the others' grants, so one round
    /// trip for all; returns when all are usable (`SymNode::set_ranges`).
    pub fn set_ranges(
        &self,
        txn: TxnId,
        ranges: &[(SegmentId, u32, u32, Mode)],
    ) -> Result<(), SymCrmemError> {
        let r = self.shared.lock().node.set_ranges(txn, ranges)?;
        if r == Lock::Granted {
            return Ok(());
        }
        // The module sends the request, arms the deadline, and files the outcome.
        self.flush()?;
        match self.wait(txn, Duration::from_secs(3600))? {
            SymEvent::Granted(_) => Ok(()),
            SymEvent::Aborted(_, SymAbort::ViewChange) => Err(SymCrmemError::ViewChange),
            _ => Err(SymCrmemError::LockTimeout),
        }
    }

    /// Declares ranges as [`SymCrmem::set_ranges`] does, without waiting: `Ok(true)` when
    /// they are all usable now, `Ok(false)` when a lock is waited for (here or at a home);
    /// the transaction's outcome then comes from [`SymCrmem::granted`]. One thread can so
    /// keep many transactions waiting for their locks at once, each costing the round trips
    /// to its homes in latency but not in the thread's time.
    pub fn ask_ranges(
        &self,
        txn: TxnId,
        ranges: &[(SegmentId, u32, u32, Mode)],
    ) -> Result<bool, SymCrmemError> {
        {
            let mut st = self.shared.lock();
            if st.node.set_ranges(txn, ranges)? == Lock::Granted {
                return Ok(true);
            }
            st.asked.insert(txn);
        }
        // The module sends the requests, arms the deadline, and files the outcome.
        self.flush()?;
        Ok(false)
    }

    /// Outcomes of transactions that [`SymCrmem::ask_ranges`] left waiting, oldest first, at
    /// most `max`: `Ok(())` when the transaction's ranges are all usable,
    /// [`SymCrmemError::LockTimeout`] or [`SymCrmemError::ViewChange`] when it was rolled
    /// back instead. Waits up to `timeout` for the first (empty if none came).
    pub fn granted(
        &self,
        max: usize,
        timeout: Duration,
    ) -> Vec<(TxnId, Result<(), SymCrmemError>)> {
        let take = |st: &mut State| -> Vec<(TxnId, Result<(), SymCrmemError>)> {
            let k = st.asked_outcomes.len().min(max);
            st.asked_outcomes
                .drain(..k)
                .map(|(t, e)| match e {
                    SymEvent::Granted(_) => (t, Ok(())),
                    SymEvent::Aborted(_, SymAbort::ViewChange) => {
                        (t, Err(SymCrmemError::ViewChange))
                    }
                    _ => (t, Err(SymCrmemError::LockTimeout)),
                })
                .collect()
        };
        if max == 0 {
            return Vec::new();
        }
        if self.host.handlers() == Handlers::Polled {
            let mut got = Vec::new();
            plumbing::drive_until(&self.host, timeout, || {
                got = take(&mut self.shared.lock());
                !got.is_empty()
            });
            return got;
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            {
                let mut st = self.shared.lock();
                let me = std::thread::current();
                st.asked_waiters.retain(|w| w.id() != me.id());
                let got = take(&mut st);
                if !got.is_empty() {
                    return got;
                }
                if std::time::Instant::now() >= deadline {
                    return got;
                }
                st.asked_waiters.push(me);
            }
            std::thread::park_timeout(
                deadline.saturating_duration_since(std::time::Instant::now()),
            );
        }
    }

    pub fn read<R>(
        &self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, SymCrmemError> {
        let st = self.shared.lock();
        Ok(f(st.node.range(txn, segment, offset, len)?))
    }

    pub fn write<R>(
        &self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, SymCrmemError> {
        let mut st = self.shared.lock();
        Ok(f(st.node.range_mut(txn, segment, offset, len)?))
    }

    pub fn abort(&self, txn: TxnId) -> Result<(), SymCrmemError> {
        {
            let mut st = self.shared.lock();
            st.node.abort(txn)?;
            // Asked and rolled back by its owner: no outcome for `granted`.
            st.asked.remove(&txn);
            if !st.asked_outcomes.is_empty() {
                st.asked_outcomes.retain(|&(t, _)| t != txn);
            }
        }
        self.flush()
    }

    /// Commits: returns once every live node holds the transaction (its commit number at
    /// this node), or fails after `timeout` (the commit goes on; its outcome is dropped).
    pub fn commit(&self, txn: TxnId, timeout: Duration) -> Result<u64, SymCrmemError> {
        let seq = self.shared.lock().node.commit(txn)?;
        self.flush()?;
        match self.wait(txn, timeout) {
            Ok(SymEvent::Committed(_)) => Ok(seq),
            Ok(SymEvent::Aborted(_, SymAbort::ViewChange)) => Err(SymCrmemError::ViewChange),
            Ok(_) => Err(SymCrmemError::Timeout),
            Err(e) => Err(e),
        }
    }

    /// Commits with no wait: the write set is on its way, the commit number returned at once;
    /// the transaction's locks are released at once, and it is
    /// durable when [`SymCrmem::durable`] reaches that number ([`SymCrmem::wait_durable`]).
    /// One thread may keep many in flight; they complete in order.
    pub fn commit_async(&self, txn: TxnId) -> Result<u64, SymCrmemError> {
        let seq = {
            let mut st = self.shared.lock();
            let seq = st.node.commit(txn)?;
            st.abandoned.insert(txn);
            seq
        };
        self.flush()?;
        Ok(seq)
    }

    /// This node's commits up to this number are held by every live node.
    pub fn durable(&self) -> u64 {
        self.shared.durable.get()
    }

    /// Waits until this node's commit `seq` is durable, or `timeout` passes.
    pub fn wait_durable(&self, seq: u64, timeout: Duration) -> Result<(), SymCrmemError> {
        let lock = || self.shared.lock();
        match self
            .shared
            .durable
            .wait(&self.host, lock, |st| &mut st.durable_waiters, seq, timeout)
        {
            true => Ok(()),
            false => Err(SymCrmemError::Timeout),
        }
    }

    /// Parks until the module files `txn`'s outcome, or `timeout`.
    fn wait(&self, txn: TxnId, timeout: Duration) -> Result<SymEvent, SymCrmemError> {
        if let Some(e) = plumbing::wait_outcome(
            &self.host,
            || self.shared.lock(),
            |st| &mut st.waits,
            txn,
            timeout,
        ) {
            return Ok(e);
        }
        let mut st = self.shared.lock();
        if let Some(e) = st.waits.take(txn) {
            return Ok(e);
        }
        st.abandoned.insert(txn);
        Err(SymCrmemError::Timeout)
    }
}

/// Runs `work` with, for each polled node of `nodes`, a thread that drives it, yielding the
/// core when it finds nothing, while `work` runs: a polled node's own threads drive it only
/// while they wait, and it must answer the other nodes between and around its transactions
/// too (nodes on the engine or an interrupt thread need none). The drivers stop however
/// `work` ends, a panic included.
pub fn with_idle_drivers<R>(nodes: &[&SymCrmem], work: impl FnOnce() -> R) -> R {
    struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Release);
        }
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for &c in nodes {
            if c.host().handlers() == Handlers::Polled {
                let stop = &stop;
                s.spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Acquire) {
                        if c.drive() == 0 {
                            std::thread::yield_now();
                        }
                    }
                });
            }
        }
        let _stop = StopOnDrop(&stop);
        work()
    })
}
