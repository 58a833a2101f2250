//! What the two drivers (driver.rs, the mirror; sym_driver.rs, the symmetric configuration)
//! share: sending the messages a core queued from a module handler, the outcomes the
//! application's threads wait for, the bounded notices, the one-at-a-time FLUSH, and the
//! module host on an engine of the caller's.

use crate::node::{NodeId, TxnId};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use txcast_port::{
    Engine, EngineConfig, EngineMode, Handlers, ModuleHost, ModuleHostError, Port, PortConfig,
    PortError,
};
use txcast_proto::module::{Context, ModuleError, ModuleId};
use txcast_proto::Address;

/// The timer a handler arms when its budget or the outbox ran out before `outq` did.
pub(crate) const TIMER_MORE: u64 = 3;
/// Notices kept at most (the oldest go).
pub(crate) const NOTICES_MAX: usize = 256;

/// Sends `outq`'s messages as control messages of type `ty`, oldest first, as far as this
/// handler may; those `skip` names (by node and bytes) are dropped.
pub(crate) fn send_queued(
    cx: &mut Context<'_>,
    nodes: &[Address],
    ty: u16,
    outq: &mut VecDeque<(NodeId, Vec<u8>)>,
    skip: impl Fn(NodeId, &[u8]) -> bool,
) {
    while let Some((to, m)) = outq.front() {
        let to = *to;
        if skip(to, m) {
            outq.pop_front();
            continue;
        }
        match cx.send(nodes[to as usize], ty, m) {
            Ok(()) => {
                outq.pop_front();
            }
            Err(ModuleError::Budget) | Err(ModuleError::OutboxFull) => {
                // The handler's budget or the outbox is spent: go on in a moment.
                let _ = cx.arm(cx.now(), TIMER_MORE);
                break;
            }
            Err(_) => {
                // Cannot be sent at all (the cores keep messages within a control body):
                // dropped rather than retried for ever.
                outq.pop_front();
            }
        }
    }
}

/// Adds a notice, the oldest dropped past [`NOTICES_MAX`].
pub(crate) fn push_notice<E>(q: &mut VecDeque<E>, e: E) {
    if q.len() >= NOTICES_MAX {
        q.pop_front();
    }
    q.push_back(e);
}

/// Outcomes of transactions for the threads that wait for them, and the waiting threads.
pub(crate) struct Waits<E> {
    outcomes: FxHashMap<TxnId, E>,
    waiters: FxHashMap<TxnId, std::thread::Thread>,
}

impl<E> Waits<E> {
    pub(crate) fn new() -> Waits<E> {
        Waits {
            outcomes: FxHashMap::default(),
            waiters: FxHashMap::default(),
        }
    }

    /// Files `txn`'s outcome; only the thread waiting for it is woken.
    pub(crate) fn file(&mut self, txn: TxnId, e: E) {
        self.outcomes.insert(txn, e);
        if let Some(w) = self.waiters.remove(&txn) {
            w.unpark();
        }
    }

    /// Takes `txn`'s outcome if it is filed.
    pub(crate) fn take(&mut self, txn: TxnId) -> Option<E> {
        self.outcomes.remove(&txn)
    }
}

/// Waits for `txn`'s outcome in the [`Waits`] that `waits` reaches under the state's lock.
/// With a polled host this thread drives it meanwhile ([`drive_until`]); otherwise it parks,
/// and the module unparks it when it files the outcome. `None` after `timeout`, this thread no
/// longer a waiter.
pub(crate) fn wait_outcome<S, E, G: std::ops::DerefMut<Target = S>>(
    host: &ModuleHost,
    lock: impl Fn() -> G,
    waits: impl Fn(&mut S) -> &mut Waits<E>,
    txn: TxnId,
    timeout: Duration,
) -> Option<E> {
    if host.handlers() == Handlers::Polled {
        let mut got = None;
        drive_until(host, timeout, || {
            got = waits(&mut lock()).outcomes.remove(&txn);
            got.is_some()
        });
        return got;
    }
    let deadline = std::time::Instant::now() + timeout;
    loop {
        {
            let mut st = lock();
            let w = waits(&mut st);
            if let Some(e) = w.outcomes.remove(&txn) {
                w.waiters.remove(&txn);
                return Some(e);
            }
            w.waiters.insert(txn, std::thread::current());
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            waits(&mut lock()).waiters.remove(&txn);
            return None;
        }
        std::thread::park_timeout(left);
    }
}

/// How long a driving thread spins on an idle host before it yields between drives (other
/// threads, among them other drivers, may need the core).
const DRIVE_SPIN: Duration = Duration::from_micros(50);

/// The *CPU Polling* wait: drives the polled `host` in this thread until `done` says so
/// (looked at first, then after every drive) or `timeout`; whether it did. Spins, then yields
/// between idle drives; never sleeps.
pub(crate) fn drive_until(
    host: &ModuleHost,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> bool {
    // Often true already (a commit made durable by the batch an earlier wait drove): no
    // drive, no system call.
    if done() {
        return true;
    }
    let start = std::time::Instant::now();
    let mut idle_since: Option<std::time::Instant> = None;
    loop {
        let work = host.drive();
        if done() {
            return true;
        }
        let now = std::time::Instant::now();
        if now.duration_since(start) >= timeout {
            return false;
        }
        if work > 0 {
            idle_since = None;
        } else if now.duration_since(*idle_since.get_or_insert(now)) > DRIVE_SPIN {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// How far a node's commits are complete (its `durable` number as the module last filed
/// it), and the threads waiting for a number: `commit_async` and `wait_durable` of both
/// drivers.
pub(crate) struct Durable {
    value: std::sync::atomic::AtomicU64,
}

/// The threads waiting until a commit number is durable (kept under the driver's lock).
#[derive(Default)]
pub(crate) struct DurableWaiters(Vec<(u64, std::thread::Thread)>);

impl Durable {
    pub(crate) fn new() -> Durable {
        Durable {
            value: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub(crate) fn get(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    /// In the module: the node's durable number is `d` now; the threads it satisfies wake.
    pub(crate) fn file(&self, waiters: &mut DurableWaiters, d: u64) {
        if d > self.value.load(Ordering::Relaxed) {
            self.value.store(d, Ordering::Release);
            waiters.0.retain(|(seq, w)| {
                let done = *seq <= d;
                if done {
                    w.unpark();
                }
                !done
            });
        }
    }

    /// Waits until commit `seq` is durable or `timeout` passes; whether it is. A polled
    /// host is driven by this thread meanwhile; otherwise the thread parks until the module
    /// files a number at least `seq`.
    pub(crate) fn wait<S, G: std::ops::DerefMut<Target = S>>(
        &self,
        host: &ModuleHost,
        lock: impl Fn() -> G,
        waiters: impl Fn(&mut S) -> &mut DurableWaiters,
        seq: u64,
        timeout: Duration,
    ) -> bool {
        if host.handlers() == Handlers::Polled {
            return drive_until(host, timeout, || self.get() >= seq);
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if self.get() >= seq {
                return true;
            }
            {
                let mut st = lock();
                if self.get() >= seq {
                    return true;
                }
                waiters(&mut st).0.push((seq, std::thread::current()));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                let me = std::thread::current().id();
                waiters(&mut lock()).0.retain(|(_, w)| w.id() != me);
                return self.get() >= seq;
            }
            std::thread::park_timeout(left);
        }
    }
}

/// One FLUSH instruction posted at a time: the module clears the flag before it drains, so
/// what is queued after that posts again.
pub(crate) struct Flusher {
    posted: AtomicBool,
}

impl Flusher {
    pub(crate) fn new() -> Flusher {
        Flusher {
            posted: AtomicBool::new(false),
        }
    }

    /// In the module's handler of the FLUSH instruction, before its drain.
    pub(crate) fn taken(&self) {
        self.posted.store(false, Ordering::SeqCst);
    }

    /// Posts instruction `ty` unless one is posted and not yet taken.
    pub(crate) fn post(
        &self,
        host: &ModuleHost,
        module: ModuleId,
        key: u64,
        ty: u16,
    ) -> Result<(), ModuleHostError> {
        if !self.posted.swap(true, Ordering::SeqCst) {
            if let Err(e) = host.post(module, key, ty, &[]) {
                self.posted.store(false, Ordering::SeqCst);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// A module host at `addr` whose handlers run where `handlers` says: on `engine`, or else on
/// the process's embedded engine, except a polled host, which gets an invoker engine of its
/// own (the default configuration): the thread that drives it then carries its messages
/// too, with no engine thread to wake on the way.
pub(crate) fn host_at(
    engine: Option<&Engine>,
    addr: Address,
    handlers: Handlers,
) -> Result<ModuleHost, ModuleHostError> {
    let port = match (engine, handlers) {
        (Some(e), _) => Port::open_on(e, addr, PortConfig::default()),
        (None, Handlers::Polled) => {
            let e = Engine::start(EngineConfig {
                mode: EngineMode::Invoker,
                ..EngineConfig::default()
            })
            .map_err(|e| ModuleHostError::Port(PortError::Io(e)))?;
            Port::open_on(&e, addr, PortConfig::default())
        }
        (None, _) => Port::open(addr, PortConfig::default()),
    }
    .map_err(ModuleHostError::Port)?;
    ModuleHost::serve_with(port, handlers).map_err(|(e, _)| e)
}

/// One turn of an opening node's wait: a drive (of a polled host: nobody else runs its
/// handlers), then a short sleep if it found nothing to do.
pub(crate) fn idle(host: &ModuleHost) {
    if host.drive() == 0 {
        let polled = host.handlers() == Handlers::Polled;
        std::thread::sleep(Duration::from_micros(if polled { 200 } else { 5000 }));
    }
}

/// Idles until `until` (a restarted node's wait before it joins its membership group).
pub(crate) fn idle_until(host: &ModuleHost, until: std::time::Instant) {
    while std::time::Instant::now() < until {
        idle(host);
    }
}

/// How an opening node's wait for its recovery ended.
pub(crate) enum Opened {
    Ready,
    Expelled,
    Timeout,
}

/// Idles while `recovering` (looked at every few milliseconds), until the node is expelled
/// or `deadline` passes.
pub(crate) fn wait_recovered(
    host: &ModuleHost,
    deadline: std::time::Instant,
    recovering: impl Fn() -> bool,
    expelled: impl Fn() -> bool,
) -> Opened {
    while recovering() {
        if expelled() {
            return Opened::Expelled;
        }
        if std::time::Instant::now() >= deadline {
            return Opened::Timeout;
        }
        idle(host);
    }
    Opened::Ready
}
