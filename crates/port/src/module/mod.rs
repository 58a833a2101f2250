//! Extension modules on the engine's loop (Roşu & Schwan, *Support for Recoverable Memory in
//! the Distributed Virtual Communication Machine*, §2): the driver of `txcast_proto::module`'s
//! sans-IO [`Host`] on a port.
//!
//! A [`ModuleHost`] hands its port to the engine thread. From then on the engine takes the
//! port's messages in, runs the modules' control-message, instruction and timeout handlers in
//! its own duty cycle and sends what they send, with no hand-off to an application thread.
//! Two other placements of the handlers ([`Handlers`]) are the paper's §3.3 alternatives:
//! run by the application's threads when they poll ([`ModuleHost::drive`]), or on a thread of
//! the host's own that sleeps on the port and is woken for each message. In both the engine
//! still carries the messages; only where the handlers run changes.
//! Control messages travel as the port's messages: through the destination's shared-memory
//! ring on one host, over the reliable link (packed like any link traffic) between hosts.
//! The application issues instructions through a bounded mailbox and waits for (or polls)
//! their completions.

use crate::engine::Engine;
use crate::extension::Service;
use crate::port::{Port, PortError};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use txcast_proto::module::{
    Host, HostCounters, HostEvent, InstructionId, Module, ModuleError, ModuleId, RegisterError,
};
use txcast_proto::{Address, Instant};

mod control;
pub use control::{ControlClient, ControlServer, Loader, CONTROL_LONG_BYTES_MAX};

pub use txcast_proto::module::{
    Context, Control, Instruction, Registration, STATUS_FAILED, STATUS_OK, STATUS_UNLOADED,
};

/// Instructions waiting for the engine at most; past it [`ModuleHost::instruct`] is
/// back-pressure.
pub const MAILBOX_MAX: usize = 1024;
/// Longest instruction arguments.
pub const ARGS_BYTES_MAX: usize = 4096;
/// Tickets issued and not yet taken (waited for or polled) at most.
pub const TICKETS_MAX: usize = 2 * txcast_proto::module::INSTRUCTIONS_MAX;
/// Signals kept for the application at most (the oldest go first).
pub const SIGNALS_MAX: usize = 4096;
/// Messages one duty cycle takes from the port at most, so one busy host does not hold the
/// engine from the other ports.
const ENGINE_BATCH: usize = 64;

/// Why a module call failed.
#[derive(Debug, thiserror::Error)]
pub enum ModuleHostError {
    /// The engine has no thread to run modules on (an invoker engine).
    #[error("an invoker engine has no thread to run modules on")]
    NoEngineThread,
    /// The port could not be opened.
    #[error(transparent)]
    Port(PortError),
    /// The thread of an interrupt-driven host could not be started.
    #[error("the host's thread could not be started")]
    Thread(#[source] std::io::Error),
    #[error(transparent)]
    Register(RegisterError),
    /// The host refused the instruction (no such module, wrong key, unknown type, bounds).
    #[error("instruction refused: {0}")]
    Refused(#[source] ModuleError),
    /// [`MAILBOX_MAX`] instructions wait for the engine.
    #[error("{MAILBOX_MAX} instructions wait already")]
    MailboxFull,
    /// [`TICKETS_MAX`] tickets are issued and not yet taken.
    #[error("{TICKETS_MAX} tickets are issued and not yet taken")]
    TooManyTickets,
    /// Arguments longer than [`ARGS_BYTES_MAX`].
    #[error("{0} bytes of arguments exceed {ARGS_BYTES_MAX}")]
    ArgsTooLong(usize),
    /// The completion did not come in time.
    #[error("timed out")]
    Timeout,
    /// The engine would not serve the port (another service consumes its ring).
    #[error(transparent)]
    Service(crate::extension::ServiceClash),
    /// No such instruction is outstanding here (or its completion was taken).
    #[error("no such instruction outstanding")]
    Unknown,
}

/// An instruction's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed {
    pub status: u32,
    pub result: Vec<u8>,
}

/// Something a module told the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    Data {
        module: ModuleId,
        data: Vec<u8>,
    },
    /// The module's handler panicked and it was unloaded.
    Failed {
        module: ModuleId,
    },
}

/// A ticket for an issued instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket(u64);

struct Pending {
    id: u64,
    module: ModuleId,
    key: u64,
    ty: u16,
    args: Vec<u8>,
}

/// What the application and the engine share.
#[derive(Default)]
struct Mailbox {
    pending: Mutex<VecDeque<Pending>>,
    /// `pending` is not empty (read by the engine without the lock on every step).
    waiting: AtomicBool,
    /// Outstanding tickets: `None` until their completion (or refusal) arrives.
    done: Mutex<HashMap<u64, Option<Result<Completed, ModuleError>>>>,
    ready: Condvar,
    signals: Mutex<VecDeque<Signal>>,
    next_id: AtomicU64,
    /// Messages the port refused for good (no such port, too long...).
    send_failures: AtomicU64,
}

/// Where a host's handlers run: Roşu & Schwan's three CRMem implementations (§3.3), in
/// txcast's terms (the engine thread plays the network interface's CoProcessor, the
/// application's threads the host CPU). In all three the engine carries the messages (links,
/// rings); what moves is the thread that runs the control-message, instruction and timeout
/// handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Handlers {
    /// In the engine's duty cycle, on its thread (*CoProcessor*): no hand-off to an
    /// application thread on any message.
    #[default]
    Engine,
    /// In whichever application thread calls [`ModuleHost::drive`] (*CPU Polling*): nothing
    /// is handled, and no timer fires, while no thread drives. On an invoker engine a drive
    /// runs the engine's duty cycle first, so the polling thread is the whole stack (the one
    /// placement an invoker engine takes).
    Polled,
    /// On a thread of the host's own that sleeps on the port and is woken for each message,
    /// timer and instruction (*CPU Interrupt*).
    Interrupt,
}

/// The host apart from its port: the sans-IO host and the shared mailbox.
struct Core {
    host: Host,
    mailbox: Arc<Mailbox>,
    buf: Vec<u8>,
    taken: VecDeque<Pending>,
    /// Remote destinations with messages waiting in their links for the end of the batch.
    deferred: Vec<Address>,
}

/// A host with its port: what the engine serves, and what a polled host's drive runs.
struct Served {
    port: Port,
    core: Core,
}

impl Core {
    fn transmit(&mut self, port: &mut Port) -> usize {
        let mut n = 0;
        while let Some((to, bytes)) = self.host.peek_transmit() {
            // Remote messages wait in their links and leave packed at the end of the batch.
            let mut sent = port.try_send_deferred(to, bytes, &mut self.deferred);
            if let Err(PortError::Closed(_)) = sent {
                // The ring we held was a dead owner's, reclaimed by a successor: the port
                // looks the address up again on the next send.
                sent = port.try_send_deferred(to, bytes, &mut self.deferred);
            }
            match sent {
                // The ring or the link is full: the rest waits, in order, for the next cycle.
                Err(PortError::Full) => break,
                Ok(()) => {}
                Err(_) => {
                    self.mailbox.send_failures.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.host.pop_transmit();
            n += 1;
        }
        port.flush_deferred(&mut self.deferred);
        n
    }

    fn collect(&mut self) {
        let mut done = None;
        let mut signals = None;
        let mut filled = false;
        while let Some(e) = self.host.poll_event() {
            match e {
                HostEvent::Completed {
                    id, status, result, ..
                } => {
                    let d = done.get_or_insert_with(|| self.mailbox.done.lock().expect("lock"));
                    // A posted instruction has no slot: its completion wakes no one.
                    if let Some(slot) = d.get_mut(&id.0) {
                        *slot = Some(Ok(Completed {
                            status,
                            result: result.as_slice().to_vec(),
                        }));
                        filled = true;
                    }
                }
                HostEvent::Signal { module, data } => {
                    push_signal(
                        signals.get_or_insert_with(|| self.mailbox.signals.lock().expect("lock")),
                        Signal::Data {
                            module,
                            data: data.as_slice().to_vec(),
                        },
                    );
                }
                HostEvent::Failed { module } => push_signal(
                    signals.get_or_insert_with(|| self.mailbox.signals.lock().expect("lock")),
                    Signal::Failed { module },
                ),
            }
        }
        // A notify is a system call even with no waiter: only for a filled ticket or a signal.
        if filled || signals.is_some() {
            drop((done, signals));
            self.mailbox.ready.notify_all();
        }
    }

    /// Takes the mailbox's instructions, the port's messages and the due timers in, and sends
    /// what they caused; how much work it did. Only messages already in the port's ring are
    /// taken: the network is read by the engine's duty cycle (on an invoker engine, the one
    /// [`ModuleHost::drive`] runs), never from here, so a step that sends does not first pay
    /// for a read that finds nothing.
    fn step(&mut self, port: &mut Port, now: Instant) -> usize {
        let mut work = 0;
        if self.mailbox.waiting.load(Ordering::Acquire) {
            let mut p = self.mailbox.pending.lock().expect("lock");
            std::mem::swap(&mut *p, &mut self.taken);
            self.mailbox.waiting.store(false, Ordering::Relaxed);
        }
        while let Some(p) = self.taken.pop_front() {
            work += 1;
            let r = self
                .host
                .instruct(now, InstructionId(p.id), p.module, p.key, p.ty, &p.args);
            if let Err(e) = r {
                if let Some(slot) = self.mailbox.done.lock().expect("lock").get_mut(&p.id) {
                    *slot = Some(Err(e));
                }
                self.mailbox.ready.notify_all();
            }
        }
        let mut buf = std::mem::take(&mut self.buf);
        for _ in 0..ENGINE_BATCH {
            let Some(m) = port.try_take(&mut buf) else {
                break;
            };
            let _ = self.host.handle_message(now, m.source, &buf[..m.len]);
            work += 1;
        }
        self.buf = buf;
        while let Some(to) = port.take_unreachable() {
            work += 1;
            let engine = port.engine();
            let gone: Vec<Address> = self
                .host
                .peers()
                .filter(|&a| engine.socket_addr(a).is_ok_and(|s| s == to))
                .collect();
            for a in gone {
                self.host.peer_unreachable(now, a);
            }
        }
        if self.host.poll_timeout().is_some_and(|t| t <= now) {
            self.host.handle_timeout(now);
            work += 1;
        }
        work += self.transmit(port);
        self.collect();
        work
    }

    /// When it next has timed work.
    fn next_deadline(&self, now: Instant) -> Option<Instant> {
        if self.host.outbox_len() > 0 {
            // Held back by a full ring or link: try again soon.
            return Some(now + Duration::from_micros(100));
        }
        self.host.poll_timeout()
    }
}

impl Service for Served {
    fn step(&mut self, now: Instant) -> usize {
        self.core.step(&mut self.port, now)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.core.next_deadline(self.port.engine().now())
    }

    fn arm(&mut self) -> bool {
        let armed_ready = self.port.arm_socket_wake();
        armed_ready || self.core.mailbox.waiting.load(Ordering::SeqCst)
    }

    fn awake(&mut self) {
        self.port.ring_awake()
    }
}

/// Where a host is served (see [`Handlers`]).
enum Place {
    Engine(Arc<crate::extension::Served<Served>>),
    Polled(Box<Mutex<Served>>),
    Interrupt {
        core: Arc<Mutex<Core>>,
        stop: Arc<AtomicBool>,
        waker: crate::shm::RingWaker,
        thread: Option<std::thread::JoinHandle<()>>,
    },
}

/// The longest an interrupt-driven host's thread sleeps with no timer armed (it is woken
/// for every message and instruction; this bounds a lost wake-up).
const INTERRUPT_SLEEP_MAX: Duration = Duration::from_millis(100);

/// The thread of an interrupt-driven host: a step, then a sleep on the port until a message,
/// a wake-up or the next timer. The port is this thread's; the application's calls reach the
/// host through `core` and wake the thread to send what they caused.
fn interrupt_loop(mut port: Port, core: Arc<Mutex<Core>>, stop: Arc<AtomicBool>) {
    let engine = port.engine().clone();
    while !stop.load(Ordering::Acquire) {
        let wait = {
            let mut c = core.lock().expect("lock");
            c.step(&mut port, engine.now());
            let now = engine.now();
            match c.next_deadline(now) {
                Some(t) => Duration::from_nanos(t.0.saturating_sub(now.0)).min(INTERRUPT_SLEEP_MAX),
                None => INTERRUPT_SLEEP_MAX,
            }
        };
        if !wait.is_zero() {
            port.wait_or_woken(wait);
        }
    }
}

fn push_signal(q: &mut VecDeque<Signal>, s: Signal) {
    if q.len() >= SIGNALS_MAX {
        q.pop_front();
    }
    q.push_back(s);
}

/// Extension modules served at one port's address, their handlers run where [`Handlers`]
/// says (by default on the engine's thread). Cheap to clone; the modules are served until the
/// last clone is dropped.
#[derive(Clone)]
pub struct ModuleHost {
    inner: Arc<Inner>,
}

struct Inner {
    place: Place,
    engine: Engine,
    mailbox: Arc<Mailbox>,
    addr: Address,
    incarnation: u64,
}

impl ModuleHost {
    /// Hands `port` to its engine's thread as a module host ([`Handlers::Engine`]). Refused
    /// on an invoker engine (there is no engine thread to run handlers on); the port is given
    /// back.
    pub fn serve(port: Port) -> Result<ModuleHost, (ModuleHostError, Box<Port>)> {
        ModuleHost::serve_with(port, Handlers::Engine)
    }

    /// Serves `port` as a module host whose handlers run where `handlers` says. An invoker
    /// engine takes [`Handlers::Polled`] only; the port is given back otherwise.
    pub fn serve_with(
        mut port: Port,
        handlers: Handlers,
    ) -> Result<ModuleHost, (ModuleHostError, Box<Port>)> {
        if port.engine().is_invoker() && handlers != Handlers::Polled {
            return Err((ModuleHostError::NoEngineThread, Box::new(port)));
        }
        let engine = port.engine().clone();
        let ep = port.endpoint().clone();
        let (addr, incarnation) = (port.address(), port.incarnation());
        let mailbox = Arc::new(Mailbox::default());
        let core = Core {
            host: Host::new(addr, incarnation, engine.now()),
            mailbox: mailbox.clone(),
            buf: vec![0u8; port.message_bytes_max()],
            taken: VecDeque::with_capacity(MAILBOX_MAX),
            deferred: Vec::new(),
        };
        let place = match handlers {
            Handlers::Engine => {
                let served = Served { port, core };
                match crate::extension::Served::serve(&ep.extensions, served) {
                    Ok(s) => {
                        engine.wake();
                        Place::Engine(s)
                    }
                    Err((clash, s)) => {
                        return Err((ModuleHostError::Service(clash), Box::new(s.port)))
                    }
                }
            }
            Handlers::Polled => Place::Polled(Box::new(Mutex::new(Served { port, core }))),
            Handlers::Interrupt => {
                // It sleeps at once when idle: a spin would be polling.
                port.set_idle(crate::IdleStrategy::Park);
                let core = Arc::new(Mutex::new(core));
                let stop = Arc::new(AtomicBool::new(false));
                let (c, st) = (core.clone(), stop.clone());
                // The port is handed over once the thread runs, so that a failed start gives
                // it back.
                let (tx, rx) = std::sync::mpsc::sync_channel::<Port>(1);
                let spawned = std::thread::Builder::new()
                    .name(format!("txcast-modules-{addr}"))
                    .spawn(move || {
                        if let Ok(port) = rx.recv() {
                            interrupt_loop(port, c, st);
                        }
                    });
                let thread = match spawned {
                    Ok(t) => t,
                    Err(e) => return Err((ModuleHostError::Thread(e), Box::new(port))),
                };
                let waker = ep.waker.clone();
                let _ = tx.send(port);
                Place::Interrupt {
                    core,
                    stop,
                    waker,
                    thread: Some(thread),
                }
            }
        };
        Ok(ModuleHost {
            inner: Arc::new(Inner {
                place,
                engine,
                mailbox,
                addr,
                incarnation,
            }),
        })
    }

    /// Opens a port at `addr` on the process's embedded engine and serves it.
    pub fn open(addr: Address) -> Result<ModuleHost, ModuleHostError> {
        let port = Port::open(addr, crate::PortConfig::default()).map_err(ModuleHostError::Port)?;
        ModuleHost::serve(port).map_err(|(e, _)| e)
    }

    pub fn address(&self) -> Address {
        self.inner.addr
    }

    /// This host's incarnation (its port's): peers see a new one when it restarts.
    pub fn incarnation(&self) -> u64 {
        self.inner.incarnation
    }

    /// The engine's clock, the one module handlers see (`Context::now`): deadlines an
    /// application hands its modules are read from it.
    pub fn now(&self) -> txcast_proto::time::Instant {
        self.inner.engine.now()
    }

    /// Runs `f` on the host between two of its steps; what it caused is sent at once (by the
    /// host's thread, woken, when it is interrupt-driven).
    fn with<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        match &self.inner.place {
            Place::Engine(served) => {
                let r = served
                    .with(|s| {
                        let r = f(&mut s.core);
                        s.core.transmit(&mut s.port);
                        s.core.collect();
                        r
                    })
                    .expect("a module host serves until dropped");
                self.inner.engine.wake();
                r
            }
            Place::Polled(served) => {
                let mut s = served.lock().expect("lock");
                let s = &mut *s;
                let r = f(&mut s.core);
                s.core.transmit(&mut s.port);
                s.core.collect();
                r
            }
            Place::Interrupt { core, waker, .. } => {
                let r = {
                    let mut c = core.lock().expect("lock");
                    let r = f(&mut c);
                    c.collect();
                    r
                };
                waker.wake();
                r
            }
        }
    }

    /// Where this host's handlers run.
    pub fn handlers(&self) -> Handlers {
        match self.inner.place {
            Place::Engine(_) => Handlers::Engine,
            Place::Polled(_) => Handlers::Polled,
            Place::Interrupt { .. } => Handlers::Interrupt,
        }
    }

    /// A polled host ([`Handlers::Polled`]): takes in the instructions, messages and due
    /// timers, runs their handlers in this thread and sends what they caused (after one duty
    /// cycle of the engine when it is an invoker). How much work that was; 0 when another
    /// thread is driving, and always for the other placements.
    pub fn drive(&self) -> usize {
        let Place::Polled(served) = &self.inner.place else {
            return 0;
        };
        let mut work = 0;
        let Ok(mut s) = served.try_lock() else {
            return if self.inner.engine.is_invoker() {
                self.inner.engine.duty_cycle()
            } else {
                0
            };
        };
        let s = &mut *s;
        if self.inner.engine.is_invoker() {
            // Instructions first: what they send leaves before the sockets are read.
            if self.inner.mailbox.waiting.load(Ordering::Acquire) {
                work += s.core.step(&mut s.port, self.inner.engine.now());
            }
            work += self.inner.engine.duty_cycle();
        }
        work + s.core.step(&mut s.port, self.inner.engine.now())
    }

    /// Loads `module` under `id`, opened with `key` (instructions and control messages for it
    /// must carry the same key; a module on another node with the same id and key is its peer).
    pub fn load(
        &self,
        id: ModuleId,
        key: u64,
        module: impl Module + 'static,
    ) -> Result<(), ModuleHostError> {
        self.load_boxed(id, key, Box::new(module))
    }

    /// [`ModuleHost::load`] of a module already boxed (one made at run time).
    pub fn load_boxed(
        &self,
        id: ModuleId,
        key: u64,
        module: Box<dyn Module>,
    ) -> Result<(), ModuleHostError> {
        self.with(|s| s.host.load(id, key, module))
            .map_err(ModuleHostError::Register)
    }

    /// Unloads module `id` (its outstanding instructions complete with [`STATUS_UNLOADED`]);
    /// whether one was loaded.
    pub fn unload(&self, id: ModuleId) -> bool {
        self.with(|s| s.host.unload(id).is_some())
    }

    /// Unloads module `id` if `key` is the key it was loaded with.
    pub fn unload_keyed(&self, id: ModuleId, key: u64) -> Result<(), ModuleHostError> {
        self.with(|s| {
            s.host.check_key(id, key)?;
            s.host.unload(id);
            Ok(())
        })
        .map_err(ModuleHostError::Refused)
    }

    /// The modules loaded: id and name.
    pub fn modules(&self) -> Vec<(ModuleId, &'static str)> {
        self.with(|s| s.host.modules().collect())
    }

    /// Runs `f` on module `id` if it is a `T`, between two engine steps (to read its state).
    pub fn with_module<T: Module, R>(
        &self,
        id: ModuleId,
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        self.with(|s| s.host.module_mut::<T>(id).map(f))
    }

    pub fn counters(&self) -> HostCounters {
        self.with(|s| s.host.counters().clone())
    }

    /// Messages the port refused for good (no such port, too long, dead owner).
    pub fn send_failures(&self) -> u64 {
        self.inner.mailbox.send_failures.load(Ordering::Relaxed)
    }

    /// Issues instruction `ty` with `args` to module `module`, with the module's key. The
    /// engine runs its handler in its next duty cycle; [`ModuleHost::wait`] or
    /// [`ModuleHost::poll`] gives its completion.
    pub fn instruct(
        &self,
        module: ModuleId,
        key: u64,
        ty: u16,
        args: &[u8],
    ) -> Result<Ticket, ModuleHostError> {
        self.enqueue(module, key, ty, args, true).map(Ticket)
    }

    /// Issues instruction `ty` with no ticket: its completion (or refusal) is dropped. For
    /// an instruction that only wakes a module to do its work, issued often enough that
    /// collecting every ticket would cost more than the instruction.
    pub fn post(
        &self,
        module: ModuleId,
        key: u64,
        ty: u16,
        args: &[u8],
    ) -> Result<(), ModuleHostError> {
        self.enqueue(module, key, ty, args, false).map(|_| ())
    }

    /// Puts an instruction in the engine's mailbox (with a slot for its completion if
    /// `ticket`) and wakes the engine; the instruction's id.
    fn enqueue(
        &self,
        module: ModuleId,
        key: u64,
        ty: u16,
        args: &[u8],
        ticket: bool,
    ) -> Result<u64, ModuleHostError> {
        if args.len() > ARGS_BYTES_MAX {
            return Err(ModuleHostError::ArgsTooLong(args.len()));
        }
        let id = self.inner.mailbox.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut p = self.inner.mailbox.pending.lock().expect("lock");
            if p.len() >= MAILBOX_MAX {
                return Err(ModuleHostError::MailboxFull);
            }
            if ticket {
                let mut done = self.inner.mailbox.done.lock().expect("lock");
                if done.len() >= TICKETS_MAX {
                    return Err(ModuleHostError::TooManyTickets);
                }
                done.insert(id, None);
            }
            p.push_back(Pending {
                id,
                module,
                key,
                ty,
                args: args.to_vec(),
            });
            // SeqCst: paired with the engine announcing its sleep, then reading this (`arm`).
            self.inner.mailbox.waiting.store(true, Ordering::SeqCst);
        }
        match &self.inner.place {
            // The engine looks at the mailbox before it sleeps (`Service::arm`), after it
            // announced the sleep: one of the two sees the other.
            Place::Engine(_) => self.inner.engine.wake_if_sleeping(),
            // The next drive takes it.
            Place::Polled(_) => {}
            Place::Interrupt { waker, .. } => waker.wake(),
        }
        Ok(id)
    }

    /// The completion of `t` if it has come (then the ticket is spent).
    pub fn poll(&self, t: Ticket) -> Result<Option<Completed>, ModuleHostError> {
        let mut done = self.inner.mailbox.done.lock().expect("lock");
        match done.get(&t.0) {
            None => Err(ModuleHostError::Unknown),
            Some(None) => Ok(None),
            Some(Some(_)) => match done.remove(&t.0).flatten() {
                Some(Ok(c)) => Ok(Some(c)),
                Some(Err(e)) => Err(ModuleHostError::Refused(e)),
                None => Ok(None),
            },
        }
    }

    /// Waits up to `timeout` for `t`'s completion (the ticket stays valid after a timeout).
    pub fn wait(&self, t: Ticket, timeout: Duration) -> Result<Completed, ModuleHostError> {
        let deadline = std::time::Instant::now().checked_add(timeout);
        let mut done = self.inner.mailbox.done.lock().expect("lock");
        loop {
            match done.get(&t.0) {
                None => return Err(ModuleHostError::Unknown),
                Some(Some(_)) => {
                    return match done.remove(&t.0).flatten() {
                        Some(Ok(c)) => Ok(c),
                        Some(Err(e)) => Err(ModuleHostError::Refused(e)),
                        None => Err(ModuleHostError::Unknown),
                    }
                }
                Some(None) => {}
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(std::time::Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return Err(ModuleHostError::Timeout);
            }
            done = self
                .inner
                .mailbox
                .ready
                .wait_timeout(done, left)
                .expect("lock")
                .0;
        }
    }

    /// Issues an instruction and waits for its completion.
    pub fn call(
        &self,
        module: ModuleId,
        key: u64,
        ty: u16,
        args: &[u8],
        timeout: Duration,
    ) -> Result<Completed, ModuleHostError> {
        let t = self.instruct(module, key, ty, args)?;
        self.wait(t, timeout)
    }

    /// Takes the signals modules sent since the last call (and modules that failed).
    pub fn signals(&self) -> Vec<Signal> {
        self.inner
            .mailbox
            .signals
            .lock()
            .expect("lock")
            .drain(..)
            .collect()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        match &mut self.place {
            Place::Engine(served) => {
                // The port closes with the host.
                let s = served.take();
                self.engine.wake();
                drop(s);
            }
            Place::Polled(_) => {}
            Place::Interrupt {
                stop,
                waker,
                thread,
                ..
            } => {
                stop.store(true, Ordering::Release);
                waker.wake();
                if let Some(t) = thread.take() {
                    let _ = t.join();
                }
            }
        }
    }
}
