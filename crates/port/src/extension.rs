//! How services plug into the engine: one interface, one registration table per port.
//!
//! Everything the engine runs for a port beyond its links (groups, an RPC endpoint or a module
//! host served on the engine thread, a long-message receiver) is an [`Extension`] registered
//! in the port's [`Extensions`]. An extension claims the packet kinds whose records it takes
//! and, at most one per port, the port's ring; the engine hands it those records as they
//! arrive and runs its step, timers and sleep hooks in every duty cycle. A claim that clashes
//! with one already made is refused with [`ServiceClash`]. The engine itself names no service: a new
//! service, or a new packet kind, is written in its own files.

use crate::engine::{Endpoint, Engine};
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use txcast_proto::time::Instant;
use txcast_proto::wire::Kind;
use txcast_proto::Address;

/// Extensions one port may have at most (groups, a ring consumer, a long-message receiver,
/// and room for more).
pub const EXTENSIONS_MAX: usize = 8;

/// Packet kind values are below this (`Kind` is a `u8` on the wire; the table is indexed by
/// it).
const KIND_SLOTS: usize = 8;

/// What an extension says before the engine sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Armed {
    /// Nothing ready; its owner's wake-ups are armed.
    Idle,
    /// Work is ready already: the engine must not sleep.
    Ready,
    /// Its owner holds it: look again soon rather than sleep on it.
    Held,
}

/// A service the engine runs for one port.
pub(crate) trait Extension: Any + Send + Sync {
    /// The packet kinds whose records it takes (each kind at most one extension a port).
    fn kinds(&self) -> &'static [Kind] {
        &[]
    }

    /// Whether it consumes the port's ring now (at most one extension a port does).
    fn consumes_ring(&self) -> bool {
        false
    }

    /// A record of one of its kinds arrived from `source`. False if not taken: a DATAGRAM
    /// record then goes into the port's ring, any other is dropped and counted.
    fn take(&self, _engine: &Engine, _ep: &Endpoint, _source: Address, _msg: &[u8]) -> bool {
        false
    }

    /// Its share of a duty cycle at `now` (the cycle's clock reading): the timers that are
    /// due, what it takes in, what that caused. How much work it did.
    fn step(&self, _engine: &Engine, _ep: &Endpoint, _now: Instant) -> usize {
        0
    }

    /// When it next has timed work (`Instant::ZERO`: at once).
    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    /// Before the engine sleeps.
    fn arm(&self) -> Armed {
        Armed::Idle
    }

    /// After the engine's sleep.
    fn awake(&self) {}

    /// The host at `to` answered a datagram this port sent there with "port unreachable":
    /// no socket is bound there now (the process that had it is gone, or never started).
    fn unreachable(&self, _engine: &Engine, _ep: &Endpoint, _to: std::net::SocketAddr) {}
}

/// A registration refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServiceClash {
    /// Another extension takes this kind's packets at the port.
    #[error("another service takes {0:?} packets at this port")]
    Kind(Kind),
    /// Another service consumes the port's ring.
    #[error("another service consumes this port's ring")]
    Ring,
    /// The port has [`EXTENSIONS_MAX`] extensions already.
    #[error("the port has {EXTENSIONS_MAX} services already")]
    Full,
}

/// The extensions of one port. Registered ones stay until the port closes; the engine reads
/// the table without a lock.
pub(crate) struct Extensions {
    slots: [OnceLock<Arc<dyn Extension>>; EXTENSIONS_MAX],
    len: AtomicUsize,
    by_kind: [OnceLock<Arc<dyn Extension>>; KIND_SLOTS],
    /// Serialises registrations.
    register: Mutex<()>,
}

impl Default for Extensions {
    fn default() -> Self {
        Extensions {
            slots: std::array::from_fn(|_| OnceLock::new()),
            len: AtomicUsize::new(0),
            by_kind: std::array::from_fn(|_| OnceLock::new()),
            register: Mutex::new(()),
        }
    }
}

impl Extensions {
    /// Every registered extension.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Extension>> {
        let n = self.len.load(Ordering::Acquire);
        self.slots[..n].iter().filter_map(|s| s.get())
    }

    /// The extension that takes `kind`'s records.
    #[inline]
    pub fn for_kind(&self, kind: Kind) -> Option<&Arc<dyn Extension>> {
        self.by_kind.get(kind as usize).and_then(|s| s.get())
    }

    /// The registered extension of type `T`, if any.
    pub fn get<T: Extension>(&self) -> Option<Arc<T>> {
        self.iter().find_map(|e| {
            let any: Arc<dyn Any + Send + Sync> = e.clone();
            any.downcast::<T>().ok()
        })
    }

    /// Registers `ext`, or refuses it if one of its claims clashes.
    pub fn register(&self, ext: Arc<dyn Extension>) -> Result<(), ServiceClash> {
        let _g = self.register.lock().unwrap_or_else(|e| e.into_inner());
        self.register_locked(ext)
    }

    /// The registered extension of type `T`, or `make()` registered.
    pub fn get_or_register<T: Extension>(
        &self,
        make: impl FnOnce() -> T,
    ) -> Result<Arc<T>, ServiceClash> {
        let _g = self.register.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = self.get::<T>() {
            return Ok(t);
        }
        let t = Arc::new(make());
        self.register_locked(t.clone())?;
        Ok(t)
    }

    fn register_locked(&self, ext: Arc<dyn Extension>) -> Result<(), ServiceClash> {
        let n = self.len.load(Ordering::Acquire);
        if n >= EXTENSIONS_MAX {
            return Err(ServiceClash::Full);
        }
        for &k in ext.kinds() {
            if self
                .by_kind
                .get(k as usize)
                .is_none_or(|s| s.get().is_some())
            {
                return Err(ServiceClash::Kind(k));
            }
        }
        if ext.consumes_ring() && self.iter().any(|e| e.consumes_ring()) {
            return Err(ServiceClash::Ring);
        }
        for &k in ext.kinds() {
            let _ = self.by_kind[k as usize].set(ext.clone());
        }
        let _ = self.slots[n].set(ext);
        self.len.store(n + 1, Ordering::Release);
        Ok(())
    }
}

/// A service that owns the port's ring and runs on the engine thread with exclusive access
/// (an RPC endpoint, a module host). Registered as an extension through [`Served`].
pub(crate) trait Service: Send + 'static {
    /// Takes in what the port's ring holds and does what is due at `now`; how much work it
    /// did.
    fn step(&mut self, now: Instant) -> usize;
    /// When it next has timed work.
    fn next_deadline(&self) -> Option<Instant>;
    /// Before the engine sleeps: makes local senders ring the port's socket, and says whether
    /// work is ready already.
    fn arm(&mut self) -> bool;
    /// After the engine's sleep.
    fn awake(&mut self);
}

/// A [`Service`] as an extension: the engine runs it when its owner does not hold it, and
/// never waits for it (the owner may need the engine to finish what it does). Emptied when
/// the service is taken back; a later service of the same type fills it again, and one of
/// another type may then consume the ring.
pub(crate) struct Served<T> {
    inner: Mutex<Option<T>>,
}

impl<T: Service> Served<T> {
    /// Serves `t` among a port's extensions `x`, or gives it back if another service consumes
    /// the ring.
    pub fn serve(x: &Extensions, t: T) -> Result<Arc<Served<T>>, (ServiceClash, T)> {
        let _g = x.register.lock().unwrap_or_else(|e| e.into_inner());
        if x.iter().any(|e| e.consumes_ring()) {
            return Err((ServiceClash::Ring, t));
        }
        let served = match x.get::<Served<T>>() {
            Some(s) => s,
            None => {
                let s = Arc::new(Served {
                    inner: Mutex::new(None),
                });
                if let Err(c) = x.register_locked(s.clone()) {
                    return Err((c, t));
                }
                s
            }
        };
        *served.inner.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        Ok(served)
    }

    /// Runs `f` on the service (waiting while the engine is in it); `None` once taken back.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.as_mut().map(f)
    }

    /// Takes the service back from the engine.
    pub fn take(&self) -> Option<T> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl<T: Service> Extension for Served<T> {
    fn consumes_ring(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn step(&self, _engine: &Engine, _ep: &Endpoint, now: Instant) -> usize {
        match self.inner.try_lock() {
            Ok(mut s) => s.as_mut().map_or(0, |s| s.step(now)),
            Err(_) => 0,
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        // Never waited for: one its owner holds is looked at in the next cycle.
        self.inner
            .try_lock()
            .ok()
            .and_then(|s| s.as_ref().and_then(|s| s.next_deadline()))
    }

    fn arm(&self) -> Armed {
        match self.inner.try_lock() {
            Ok(mut s) => {
                if s.as_mut().is_some_and(|s| s.arm()) {
                    Armed::Ready
                } else {
                    Armed::Idle
                }
            }
            Err(std::sync::TryLockError::WouldBlock) => Armed::Held,
            Err(std::sync::TryLockError::Poisoned(_)) => Armed::Idle,
        }
    }

    fn awake(&self) {
        if let Ok(mut s) = self.inner.try_lock() {
            if let Some(s) = s.as_mut() {
                s.awake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Takes(&'static [Kind]);
    impl Extension for Takes {
        fn kinds(&self) -> &'static [Kind] {
            self.0
        }
    }

    struct Ring(u32);
    impl Service for Ring {
        fn step(&mut self, _now: Instant) -> usize {
            self.0 += 1;
            1
        }
        fn next_deadline(&self) -> Option<Instant> {
            Some(Instant(u64::from(self.0)))
        }
        fn arm(&mut self) -> bool {
            false
        }
        fn awake(&mut self) {}
    }

    struct OtherRing;
    impl Service for OtherRing {
        fn step(&mut self, _now: Instant) -> usize {
            0
        }
        fn next_deadline(&self) -> Option<Instant> {
            None
        }
        fn arm(&mut self) -> bool {
            true
        }
        fn awake(&mut self) {}
    }

    #[test]
    fn a_packet_kind_has_one_taker() {
        let x = Extensions::default();
        x.register(Arc::new(Takes(&[Kind::Group]))).unwrap();
        x.register(Arc::new(Takes(&[Kind::Datagram]))).unwrap();
        assert_eq!(
            x.register(Arc::new(Takes(&[Kind::Multicast, Kind::Group]))),
            Err(ServiceClash::Kind(Kind::Group))
        );
        // The refused one claimed nothing.
        assert!(x.for_kind(Kind::Multicast).is_none());
        assert_eq!(x.iter().count(), 2);
        assert!(x.for_kind(Kind::Group).is_some());
        assert!(x.get::<Takes>().is_some());
    }

    #[test]
    fn the_table_is_bounded() {
        let x = Extensions::default();
        for _ in 0..EXTENSIONS_MAX {
            x.register(Arc::new(Takes(&[]))).unwrap();
        }
        assert_eq!(x.register(Arc::new(Takes(&[]))), Err(ServiceClash::Full));
        assert_eq!(x.iter().count(), EXTENSIONS_MAX);
    }

    #[test]
    fn one_service_consumes_the_ring_at_a_time() {
        let x = Extensions::default();
        let a = Served::serve(&x, Ring(0)).ok().unwrap();
        let Err((clash, _)) = Served::serve(&x, OtherRing) else {
            panic!("a second ring consumer was taken");
        };
        assert_eq!(clash, ServiceClash::Ring);
        let Err((clash, _)) = Served::serve(&x, Ring(7)) else {
            panic!("a second ring consumer of the same type was taken");
        };
        assert_eq!(clash, ServiceClash::Ring);
        // The engine's view of it: a step runs it, its deadline shows.
        let e = x.iter().next().unwrap().clone();
        assert_eq!(e.arm(), Armed::Idle);
        assert_eq!(e.next_deadline(), Some(Instant(0)));
        // Held by its owner: the engine skips it and says so.
        a.with(|r| {
            assert_eq!(e.arm(), Armed::Held);
            assert_eq!(e.next_deadline(), None);
            r.0 = 5;
        })
        .unwrap();
        assert_eq!(e.next_deadline(), Some(Instant(5)));
        // Taken back: another type may consume the ring, and the same type again after it.
        assert_eq!(a.take().map(|r| r.0), Some(5));
        assert!(a.with(|_| ()).is_none());
        let b = Served::serve(&x, OtherRing).ok().unwrap();
        assert_eq!(x.iter().count(), 2);
        assert_eq!(x.iter().nth(1).unwrap().arm(), Armed::Ready);
        assert!(Served::serve(&x, Ring(1)).is_err());
        b.take().unwrap();
        let again = Served::serve(&x, Ring(9)).ok().unwrap();
        assert!(Arc::ptr_eq(&a, &again), "the emptied slot is filled again");
        assert_eq!(x.iter().count(), 2);
    }
}
