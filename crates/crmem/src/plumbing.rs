//! What the two drivers (driver.rs, the mirror; sym_driver.rs, the symmetric configuration)
//! share: sending the messages a core queued from a module handler, the outcomes the
//! application's threads wait for, the bounded notices, the one-at-a-time FLUSH, and the
//! module host on an engine of the caller's.

use crate::node::{NodeId, TxnId};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use txcast_port::{Engine, ModuleHost, ModuleHostError, Port, PortConfig};
use txcast_proto::module::{Context, ModuleError, ModuleId};
use txcast_proto::Address;

/// The timer a handler arms when its budget or the outbox ran out before `outq` did.
pub(crate) const TIMER_MORE: u64 = 3;
/// Notices kept at most (the oldest go).
pub(crate) const NOTICES_MAX: usize = 256;

/// Sends `outq`'s messages as control messages of type `ty`, oldest first, as far as this
/// handler may; those to a node `skip` names are dropped.
pub(crate) fn send_queued(
    cx: &mut Context<'_>,
    nodes: &[Address],
    ty: u16,
    outq: &mut VecDeque<(NodeId, Vec<u8>)>,
    skip: impl Fn(NodeId) -> bool,
) {
    while let Some((to, m)) = outq.front() {
        let to = *to;
        if skip(to) {
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
    outcomes: HashMap<TxnId, E>,
    waiters: HashMap<TxnId, std::thread::Thread>,
}

impl<E> Waits<E> {
    pub(crate) fn new() -> Waits<E> {
        Waits {
            outcomes: HashMap::new(),
            waiters: HashMap::new(),
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

/// Waits for `txn`'s outcome in the [`Waits`] that `waits` reaches under the state's lock:
/// parks this thread, which the module unparks when it files the outcome. `None` after
/// `timeout`, this thread no longer a waiter.
pub(crate) fn wait_outcome<S, E, G: std::ops::DerefMut<Target = S>>(
    lock: impl Fn() -> G,
    waits: impl Fn(&mut S) -> &mut Waits<E>,
    txn: TxnId,
    timeout: Duration,
) -> Option<E> {
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

/// A module host at `addr` on an engine of the caller's.
pub(crate) fn host_on(engine: &Engine, addr: Address) -> Result<ModuleHost, ModuleHostError> {
    let port = Port::open_on(engine, addr, PortConfig::default()).map_err(ModuleHostError::Port)?;
    ModuleHost::serve(port).map_err(|(e, _)| e)
}
