//! Extension modules: application code that runs on the engine's loop (Roşu & Schwan, *Support
//! for Recoverable Memory in the Distributed Virtual Communication Machine*, §2).
//!
//! A module is state plus three kinds of handler: *instruction* handlers (the local application
//! issues an instruction with arguments and waits for, or polls, its completion),
//! *control-message* handlers (short, typed, point-to-point messages between modules on
//! different nodes) and *timeout* handlers (the host's timing wheel). A module registers its
//! instruction and control-message types when it is loaded; control-message types are one
//! namespace per host, so a type another module holds is a [`RegisterError`].
//!
//! [`Host`] is the sans-IO core: messages and time in, messages to send and events for the
//! application out. It relies on its transport (a port: the shared-memory ring on one host, the
//! reliable link between hosts) for delivery once and in order, and adds what a module needs
//! on top:
//! - **protection**: every message and instruction names its module and carries the key the
//!   module was loaded with; a wrong key is refused and counted;
//! - **incarnations**: every message carries its sender's incarnation and the incarnation of
//!   the receiver it was meant for. A message for an incarnation that is gone is dropped and
//!   answered with a stale notice; a message (or notice) from a newer incarnation of a peer
//!   runs every module's `on_peer_restart` first. So a module learns that its peer restarted
//!   instead of waiting for an answer for ever, and control messages reach handlers once and in
//!   order per pair of incarnations;
//! - **budgets**: a handler runs to completion, never preempted, and may send at most
//!   [`SENDS_PER_HANDLER_MAX`] messages and arm at most [`TIMERS_PER_HANDLER_MAX`] timers; a
//!   handler that panics unloads its module (its instructions complete with
//!   [`STATUS_FAILED`]) and the host goes on.
//!
//! Drain order for the caller after every input: [`Host::peek_transmit`] /
//! [`Host::pop_transmit`] until empty, then [`Host::poll_event`], then [`Host::poll_timeout`].

pub mod msg;
pub mod ping;
pub mod stream;

use crate::link::incarnation_older;
use crate::time::Instant;
use crate::timer::TimerWheel;
use crate::{Address, AddressHash};
use msg::{ModuleMsg, MsgKind, CONTROL_BODY_MAX, HEADER_BYTES};
use rustc_hash::FxHashMap;
use std::any::Any;
use std::collections::{HashMap, VecDeque};

/// A module's number on its host; the same module on every node uses the same id.
pub type ModuleId = u16;

/// Modules one host holds at most (ids are below it).
pub const MODULES_MAX: usize = 64;
/// Control messages one handler call may send.
pub const SENDS_PER_HANDLER_MAX: usize = 64;
/// Timers one handler call may arm.
pub const TIMERS_PER_HANDLER_MAX: usize = 64;
/// Timers armed on one host at once.
pub const TIMERS_MAX: usize = 4096;
/// Messages waiting for the transport. Past it a send is back-pressure
/// ([`ModuleError::OutboxFull`]).
pub const OUTBOX_MAX: usize = 1024;
/// Events (completions, signals) waiting for the application.
pub const EVENTS_MAX: usize = 4096;
/// Instructions outstanding on one host.
pub const INSTRUCTIONS_MAX: usize = 4096;
/// Peers whose incarnation a host remembers.
pub const PEERS_MAX: usize = 4096;
/// Bytes of a completion's result or a signal's data.
pub const RESULT_BYTES_MAX: usize = 64;
/// Buffers kept for outgoing messages (made at start, reused).
const SPARE_BUFFERS: usize = 64;
/// Timer wheel geometry: 100 µs ticks, 1024 buckets.
const TIMER_TICK_NS: u64 = 100_000;
const TIMER_SLOTS: usize = 1024;

/// Status of an instruction completed normally by a module that says nothing else.
pub const STATUS_OK: u32 = 0;
/// Status of the instructions of a module unloaded before it completed them.
pub const STATUS_UNLOADED: u32 = u32::MAX;
/// Status of the instructions of a module whose handler panicked (it is unloaded).
pub const STATUS_FAILED: u32 = u32::MAX - 1;

const _: () = assert!(MODULES_MAX <= u16::MAX as usize);
const _: () = assert!(HEADER_BYTES + CONTROL_BODY_MAX <= u16::MAX as usize);

/// What a module declares when it is loaded.
#[derive(Clone, Debug)]
pub struct Registration {
    pub name: &'static str,
    /// Instruction types it takes.
    pub instructions: &'static [u16],
    /// Control-message types it handles (one namespace per host).
    pub controls: &'static [u16],
}

/// Names one instruction; chosen by the application's side (the driver), unique while it is
/// outstanding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstructionId(pub u64);

/// An instruction as its handler sees it.
#[derive(Clone, Copy, Debug)]
pub struct Instruction<'a> {
    pub id: InstructionId,
    pub ty: u16,
    pub args: &'a [u8],
}

/// A control message as its handler sees it.
#[derive(Clone, Copy, Debug)]
pub struct Control<'a> {
    pub from: Address,
    /// The sender host's incarnation.
    pub incarnation: u64,
    pub ty: u16,
    pub body: &'a [u8],
}

/// Extension module code. Handlers run on the engine's loop: they must be short and must not
/// block.
pub trait Module: Any + Send {
    fn registration(&self) -> Registration;
    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>);
    fn on_control(&mut self, cx: &mut Context<'_>, msg: Control<'_>);
    fn on_timeout(&mut self, _cx: &mut Context<'_>, _token: u64) {}
    /// `peer` runs a new incarnation: what was sent to its predecessor and not answered is lost.
    fn on_peer_restart(&mut self, _cx: &mut Context<'_>, _peer: Address, _incarnation: u64) {}
    /// `peer`'s host answered a packet with "port unreachable": no process has its port now
    /// (gone, or restarting). Sooner than a silence says so; only for peers heard from.
    fn on_peer_unreachable(&mut self, _cx: &mut Context<'_>, _peer: Address) {}
}

/// Why a registration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The id is [`MODULES_MAX`] or more.
    #[error("module id {0} is not below {MODULES_MAX}")]
    IdOutOfRange(ModuleId),
    /// Another module is loaded under this id.
    #[error("module id {id} is taken by {by}")]
    IdTaken { id: ModuleId, by: &'static str },
    /// Another module handles this control-message type.
    #[error("control type {ty} is handled by {by}")]
    ControlTypeTaken { ty: u16, by: &'static str },
    /// The module lists a type twice.
    #[error("type {0} is listed twice")]
    TypeListedTwice(u16),
}

/// Why an instruction or a handler's request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{self:?}")]
pub enum ModuleError {
    /// No module is loaded under this id.
    NoSuchModule(ModuleId),
    /// The key is not the one the module was loaded with.
    BadKey,
    /// The module did not register this instruction type.
    UnknownInstruction(u16),
    /// This module did not register this control-message type.
    UnknownControl(u16),
    /// The instruction id is outstanding already.
    DuplicateId,
    /// [`INSTRUCTIONS_MAX`] instructions are outstanding.
    TooManyInstructions,
    /// The body is longer than [`msg::CONTROL_BODY_MAX`], or a result than
    /// [`RESULT_BYTES_MAX`].
    TooLong,
    /// [`OUTBOX_MAX`] messages wait for the transport.
    OutboxFull,
    /// [`EVENTS_MAX`] events wait for the application.
    EventsFull,
    /// [`TIMERS_MAX`] timers are armed.
    TooManyTimers,
    /// This handler call sent or armed all it may.
    Budget,
    /// No such instruction is outstanding for this module.
    NotOutstanding,
}

/// A few bytes carried by an event (a result, a signal's data).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Bytes {
    len: u8,
    data: [u8; RESULT_BYTES_MAX],
}

impl Bytes {
    fn new(b: &[u8]) -> Result<Bytes, ModuleError> {
        if b.len() > RESULT_BYTES_MAX {
            return Err(ModuleError::TooLong);
        }
        let mut data = [0u8; RESULT_BYTES_MAX];
        data[..b.len()].copy_from_slice(b);
        Ok(Bytes {
            len: b.len() as u8,
            data,
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.data[..self.len as usize]
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_slice())
    }
}

/// What the host tells the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostEvent {
    /// An instruction completed.
    Completed {
        module: ModuleId,
        id: InstructionId,
        status: u32,
        result: Bytes,
    },
    /// A module signalled the application.
    Signal { module: ModuleId, data: Bytes },
    /// A module's handler panicked; the module was unloaded.
    Failed { module: ModuleId },
}

/// What a host has seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostCounters {
    pub controls_received: u64,
    pub controls_sent: u64,
    pub instructions: u64,
    pub timeouts_fired: u64,
    /// Not a module message (its rule broken).
    pub dropped_bad: u64,
    /// Carried a key other than its module's.
    pub dropped_bad_key: u64,
    /// Named a module not loaded, or a type its module did not register.
    pub dropped_unknown: u64,
    /// Meant for an incarnation of ours that is gone, or from one of the peer's that is.
    pub dropped_stale: u64,
    /// From a peer beyond [`PEERS_MAX`].
    pub dropped_peer_limit: u64,
    pub stale_notices_sent: u64,
    pub peer_restarts: u64,
    /// "Port unreachable" reports about peers heard from, passed to the modules.
    pub peer_unreachable: u64,
    /// Sends, timers and events refused to handlers (budget, back-pressure, bounds).
    pub handler_refusals: u64,
    pub handler_panics: u64,
}

crate::counters_sum!(HostCounters {
    controls_received,
    controls_sent,
    instructions,
    timeouts_fired,
    dropped_bad,
    dropped_bad_key,
    dropped_unknown,
    dropped_stale,
    dropped_peer_limit,
    stale_notices_sent,
    peer_restarts,
    peer_unreachable,
    handler_refusals,
    handler_panics,
});

/// Why an incoming message was dropped (it is counted too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    Bad(msg::MsgError),
    BadKey,
    Unknown,
    Stale,
    PeerLimit,
}

struct Slot {
    module: Box<dyn Module>,
    name: &'static str,
    key: u64,
    instructions: &'static [u16],
    controls: &'static [u16],
}

/// Everything a handler may touch besides its own module.
struct Core {
    me: Address,
    incarnation: u64,
    peers: HashMap<Address, u64, AddressHash>,
    outbox: VecDeque<(Address, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
    events: VecDeque<HostEvent>,
    /// Outstanding instructions and the module each belongs to.
    outstanding: FxHashMap<InstructionId, ModuleId>,
    timers: TimerWheel<(ModuleId, u64)>,
    /// The deadline each armed timer is at.
    timer_at: FxHashMap<(ModuleId, u64), Instant>,
    /// The earliest wheel entry of each timer that has one. A timer moved later keeps its
    /// entry, which reschedules it when it fires, so a timer pushed back on every message
    /// holds one entry, not one per push; other entries are stale and ignored.
    wheel_at: FxHashMap<(ModuleId, u64), Instant>,
    /// No wheel entry is due before this (a lower bound, so that an idle poll need not scan
    /// the wheel).
    earliest: Option<Instant>,
    counters: HostCounters,
}

impl Core {
    fn push_out(&mut self, to: Address, m: &ModuleMsg<'_>) -> Result<(), ModuleError> {
        if self.outbox.len() >= OUTBOX_MAX {
            return Err(ModuleError::OutboxFull);
        }
        let mut buf = self
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(HEADER_BYTES + CONTROL_BODY_MAX));
        buf.resize(m.len(), 0);
        m.write(&mut buf);
        self.outbox.push_back((to, buf));
        Ok(())
    }

    fn push_event(&mut self, e: HostEvent) -> Result<(), ModuleError> {
        if self.events.len() >= EVENTS_MAX {
            return Err(ModuleError::EventsFull);
        }
        self.events.push_back(e);
        Ok(())
    }

    fn refused<T>(&mut self, r: Result<T, ModuleError>) -> Result<T, ModuleError> {
        if r.is_err() {
            self.counters.handler_refusals += 1;
        }
        r
    }
}

/// What a handler may do: send control messages, arm and cancel timeouts, complete
/// instructions, signal the application.
pub struct Context<'a> {
    core: &'a mut Core,
    now: Instant,
    module: ModuleId,
    key: u64,
    controls: &'static [u16],
    sends_left: usize,
    timers_left: usize,
}

impl Context<'_> {
    pub fn now(&self) -> Instant {
        self.now
    }

    /// This host's address.
    pub fn me(&self) -> Address {
        self.core.me
    }

    /// This host's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.core.incarnation
    }

    /// The incarnation of `peer` last heard from, if any.
    pub fn peer_incarnation(&self, peer: Address) -> Option<u64> {
        self.core.peers.get(&peer).copied()
    }

    /// Sends a control message of type `ty` (one this module registered) to the module with
    /// this module's id at `to`, meant for the incarnation of `to` last heard from.
    pub fn send(&mut self, to: Address, ty: u16, body: &[u8]) -> Result<(), ModuleError> {
        let r = self.try_send(to, ty, body);
        self.core.refused(r)
    }

    fn try_send(&mut self, to: Address, ty: u16, body: &[u8]) -> Result<(), ModuleError> {
        if body.len() > CONTROL_BODY_MAX {
            return Err(ModuleError::TooLong);
        }
        if !self.controls.contains(&ty) {
            return Err(ModuleError::UnknownControl(ty));
        }
        if self.sends_left == 0 {
            return Err(ModuleError::Budget);
        }
        let m = ModuleMsg {
            kind: MsgKind::Control,
            module: self.module,
            ty,
            key: self.key,
            source_incarnation: self.core.incarnation,
            destination_incarnation: self.core.peers.get(&to).copied().unwrap_or(0),
            body,
        };
        self.core.push_out(to, &m)?;
        self.sends_left -= 1;
        self.core.counters.controls_sent += 1;
        Ok(())
    }

    /// Arms (or moves) this module's timer `token` to fire at `at`.
    pub fn arm(&mut self, at: Instant, token: u64) -> Result<(), ModuleError> {
        let r = self.try_arm(at, token);
        self.core.refused(r)
    }

    fn try_arm(&mut self, at: Instant, token: u64) -> Result<(), ModuleError> {
        if self.timers_left == 0 {
            return Err(ModuleError::Budget);
        }
        let k = (self.module, token);
        let core = &mut *self.core;
        if core.timer_at.len() >= TIMERS_MAX && !core.timer_at.contains_key(&k) {
            return Err(ModuleError::TooManyTimers);
        }
        if core.wheel_at.get(&k).is_none_or(|&w| at < w) {
            core.timers
                .schedule(at, k)
                .map_err(|_| ModuleError::TooManyTimers)?;
            core.wheel_at.insert(k, at);
            core.earliest = Some(core.earliest.map_or(at, |e| e.min(at)));
        }
        core.timer_at.insert(k, at);
        self.timers_left -= 1;
        Ok(())
    }

    /// Cancels this module's timer `token`; whether it was armed.
    pub fn cancel(&mut self, token: u64) -> bool {
        self.core.timer_at.remove(&(self.module, token)).is_some()
    }

    /// Completes one of this module's outstanding instructions.
    pub fn complete(
        &mut self,
        id: InstructionId,
        status: u32,
        result: &[u8],
    ) -> Result<(), ModuleError> {
        let r = self.try_complete(id, status, result);
        self.core.refused(r)
    }

    fn try_complete(
        &mut self,
        id: InstructionId,
        status: u32,
        result: &[u8],
    ) -> Result<(), ModuleError> {
        if self.core.outstanding.get(&id) != Some(&self.module) {
            return Err(ModuleError::NotOutstanding);
        }
        let result = Bytes::new(result)?;
        self.core.push_event(HostEvent::Completed {
            module: self.module,
            id,
            status,
            result,
        })?;
        self.core.outstanding.remove(&id);
        Ok(())
    }

    /// Tells the application something (it reads it with the completions).
    pub fn signal(&mut self, data: &[u8]) -> Result<(), ModuleError> {
        let r = Bytes::new(data).and_then(|data| {
            self.core.push_event(HostEvent::Signal {
                module: self.module,
                data,
            })
        });
        self.core.refused(r)
    }
}

/// The module host of one node (one port): the sans-IO core the engine drives.
pub struct Host {
    modules: Vec<Option<Slot>>,
    /// Control-message type → the module that handles it.
    controls: FxHashMap<u16, ModuleId>,
    /// Timers found due, reused by every [`Host::handle_timeout`].
    due: Vec<(ModuleId, u64)>,
    /// Timers moved later whose entry fired, reused likewise.
    moved: Vec<(Instant, (ModuleId, u64))>,
    core: Core,
}

impl Host {
    /// A host for the port at `me`, running as `incarnation` (nonzero).
    pub fn new(me: Address, incarnation: u64, now: Instant) -> Host {
        assert!(incarnation != 0, "incarnation 0 means 'any' on the wire");
        Host {
            modules: (0..MODULES_MAX).map(|_| None).collect(),
            controls: FxHashMap::default(),
            due: Vec::new(),
            moved: Vec::new(),
            core: Core {
                me,
                incarnation,
                peers: HashMap::default(),
                outbox: VecDeque::with_capacity(OUTBOX_MAX),
                spare: (0..SPARE_BUFFERS)
                    .map(|_| Vec::with_capacity(HEADER_BYTES + CONTROL_BODY_MAX))
                    .collect(),
                events: VecDeque::with_capacity(EVENTS_MAX.min(256)),
                outstanding: FxHashMap::default(),
                timers: TimerWheel::new(TIMER_TICK_NS, TIMER_SLOTS, 2 * TIMERS_MAX, now),
                timer_at: FxHashMap::default(),
                wheel_at: FxHashMap::default(),
                earliest: None,
                counters: HostCounters::default(),
            },
        }
    }

    pub fn address(&self) -> Address {
        self.core.me
    }

    pub fn incarnation(&self) -> u64 {
        self.core.incarnation
    }

    pub fn counters(&self) -> &HostCounters {
        &self.core.counters
    }

    /// Loads `module` under `id`, opened with `key`.
    pub fn load(
        &mut self,
        id: ModuleId,
        key: u64,
        module: Box<dyn Module>,
    ) -> Result<(), RegisterError> {
        let reg = module.registration();
        let slot = self
            .modules
            .get(id as usize)
            .ok_or(RegisterError::IdOutOfRange(id))?;
        if let Some(s) = slot {
            return Err(RegisterError::IdTaken { id, by: s.name });
        }
        for list in [reg.instructions, reg.controls] {
            for (i, ty) in list.iter().enumerate() {
                if list[..i].contains(ty) {
                    return Err(RegisterError::TypeListedTwice(*ty));
                }
            }
        }
        for ty in reg.controls {
            if let Some(&owner) = self.controls.get(ty) {
                let by = self.modules[owner as usize]
                    .as_ref()
                    .map_or("?", |s| s.name);
                return Err(RegisterError::ControlTypeTaken { ty: *ty, by });
            }
        }
        for ty in reg.controls {
            self.controls.insert(*ty, id);
        }
        self.modules[id as usize] = Some(Slot {
            module,
            name: reg.name,
            key,
            instructions: reg.instructions,
            controls: reg.controls,
        });
        Ok(())
    }

    /// Unloads module `id`: its types are free again, its timers are cancelled, and its
    /// outstanding instructions complete with [`STATUS_UNLOADED`]. The module, if any.
    pub fn unload(&mut self, id: ModuleId) -> Option<Box<dyn Module>> {
        self.unload_with(id, STATUS_UNLOADED)
    }

    fn unload_with(&mut self, id: ModuleId, status: u32) -> Option<Box<dyn Module>> {
        let slot = self.modules.get_mut(id as usize)?.take()?;
        for ty in slot.controls {
            self.controls.remove(ty);
        }
        self.core.timer_at.retain(|k, _| k.0 != id);
        self.core.wheel_at.retain(|k, _| k.0 != id);
        let mut ids: Vec<InstructionId> = self
            .core
            .outstanding
            .iter()
            .filter(|(_, m)| **m == id)
            .map(|(i, _)| *i)
            .collect();
        ids.sort();
        for i in ids {
            self.core.outstanding.remove(&i);
            // Unbounded on purpose: an application waiting for these must hear of them.
            self.core.events.push_back(HostEvent::Completed {
                module: id,
                id: i,
                status,
                result: Bytes::new(&[]).expect("empty"),
            });
        }
        Some(slot.module)
    }

    /// Whether `key` is the key module `id` was loaded with.
    pub fn check_key(&self, id: ModuleId, key: u64) -> Result<(), ModuleError> {
        match self.modules.get(id as usize).and_then(|s| s.as_ref()) {
            None => Err(ModuleError::NoSuchModule(id)),
            Some(s) if s.key != key => Err(ModuleError::BadKey),
            Some(_) => Ok(()),
        }
    }

    /// The modules loaded: id and name.
    pub fn modules(&self) -> impl Iterator<Item = (ModuleId, &'static str)> + '_ {
        self.modules
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as ModuleId, s.name)))
    }

    /// The module loaded under `id`, if it is a `T`.
    pub fn module_mut<T: Module>(&mut self, id: ModuleId) -> Option<&mut T> {
        let m: &mut dyn Any = self.modules.get_mut(id as usize)?.as_mut()?.module.as_mut();
        m.downcast_mut::<T>()
    }

    /// Runs `f` on module `id`'s handler with a fresh context; a panic unloads the module.
    fn dispatch(
        &mut self,
        id: ModuleId,
        now: Instant,
        f: impl FnOnce(&mut dyn Module, &mut Context<'_>),
    ) {
        let Some(slot) = self.modules[id as usize].as_mut() else {
            return;
        };
        let mut cx = Context {
            core: &mut self.core,
            now,
            module: id,
            key: slot.key,
            controls: slot.controls,
            sends_left: SENDS_PER_HANDLER_MAX,
            timers_left: TIMERS_PER_HANDLER_MAX,
        };
        let module = slot.module.as_mut();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(module, &mut cx)));
        if ran.is_err() {
            self.core.counters.handler_panics += 1;
            self.unload_with(id, STATUS_FAILED);
            self.core.events.push_back(HostEvent::Failed { module: id });
        }
    }

    /// The application issues instruction `ty` to module `module` with `args`. Checked first
    /// (module, key, type, bounds); then its handler runs at once.
    pub fn instruct(
        &mut self,
        now: Instant,
        id: InstructionId,
        module: ModuleId,
        key: u64,
        ty: u16,
        args: &[u8],
    ) -> Result<(), ModuleError> {
        let slot = self
            .modules
            .get(module as usize)
            .and_then(|s| s.as_ref())
            .ok_or(ModuleError::NoSuchModule(module))?;
        if slot.key != key {
            self.core.counters.dropped_bad_key += 1;
            return Err(ModuleError::BadKey);
        }
        if !slot.instructions.contains(&ty) {
            return Err(ModuleError::UnknownInstruction(ty));
        }
        if self.core.outstanding.contains_key(&id) {
            return Err(ModuleError::DuplicateId);
        }
        if self.core.outstanding.len() >= INSTRUCTIONS_MAX {
            return Err(ModuleError::TooManyInstructions);
        }
        self.core.outstanding.insert(id, module);
        self.core.counters.instructions += 1;
        self.dispatch(module, now, |m, cx| {
            m.on_instruction(cx, Instruction { id, ty, args })
        });
        Ok(())
    }

    /// A message from `from` arrived (in order, once, from the transport).
    pub fn handle_message(
        &mut self,
        now: Instant,
        from: Address,
        bytes: &[u8],
    ) -> Result<(), Dropped> {
        let m = match ModuleMsg::parse(bytes) {
            Ok(m) => m,
            Err(e) => {
                self.core.counters.dropped_bad += 1;
                return Err(Dropped::Bad(e));
            }
        };
        if m.kind == MsgKind::Stale {
            return self.learn(now, from, m.source_incarnation);
        }
        if m.destination_incarnation != 0 && m.destination_incarnation != self.core.incarnation {
            self.core.counters.dropped_stale += 1;
            let notice = ModuleMsg {
                kind: MsgKind::Stale,
                module: 0,
                ty: 0,
                key: 0,
                source_incarnation: self.core.incarnation,
                destination_incarnation: m.source_incarnation,
                body: &[],
            };
            if self.core.push_out(from, &notice).is_ok() {
                self.core.counters.stale_notices_sent += 1;
            }
            return Err(Dropped::Stale);
        }
        if m.source_incarnation == 0 {
            self.core.counters.dropped_bad += 1;
            return Err(Dropped::Bad(msg::MsgError::BadNotice));
        }
        self.learn(now, from, m.source_incarnation)?;
        let owner = self.controls.get(&m.ty).copied();
        let Some(slot) = owner
            .filter(|&o| o == m.module)
            .and_then(|o| self.modules[o as usize].as_ref())
        else {
            self.core.counters.dropped_unknown += 1;
            return Err(Dropped::Unknown);
        };
        if slot.key != m.key {
            self.core.counters.dropped_bad_key += 1;
            return Err(Dropped::BadKey);
        }
        self.core.counters.controls_received += 1;
        let msg = Control {
            from,
            incarnation: m.source_incarnation,
            ty: m.ty,
            body: m.body,
        };
        self.dispatch(m.module, now, |module, cx| module.on_control(cx, msg));
        Ok(())
    }

    /// Records that `from` runs `incarnation`; tells every module first if that is a restart.
    fn learn(&mut self, now: Instant, from: Address, incarnation: u64) -> Result<(), Dropped> {
        match self.core.peers.get(&from).copied() {
            Some(known) if known == incarnation => Ok(()),
            Some(known) if incarnation_older(incarnation, known) => {
                self.core.counters.dropped_stale += 1;
                Err(Dropped::Stale)
            }
            Some(_) => {
                self.core.peers.insert(from, incarnation);
                self.core.counters.peer_restarts += 1;
                for id in 0..MODULES_MAX as ModuleId {
                    self.dispatch(id, now, |m, cx| m.on_peer_restart(cx, from, incarnation));
                }
                Ok(())
            }
            None if self.core.peers.len() >= PEERS_MAX => {
                self.core.counters.dropped_peer_limit += 1;
                Err(Dropped::PeerLimit)
            }
            None => {
                self.core.peers.insert(from, incarnation);
                Ok(())
            }
        }
    }

    /// The peers heard from (each with its incarnation last heard).
    pub fn peers(&self) -> impl Iterator<Item = Address> + '_ {
        self.core.peers.keys().copied()
    }

    /// `peer`'s port was reported unreachable (its host answered "port unreachable"): tells
    /// every module, if `peer` is one heard from; ignored otherwise.
    pub fn peer_unreachable(&mut self, now: Instant, peer: Address) {
        if !self.core.peers.contains_key(&peer) {
            return;
        }
        self.core.counters.peer_unreachable += 1;
        for id in 0..MODULES_MAX as ModuleId {
            self.dispatch(id, now, |m, cx| m.on_peer_unreachable(cx, peer));
        }
    }

    /// Runs the timeout handlers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.due);
        let mut later = std::mem::take(&mut self.moved);
        let Core {
            timers,
            timer_at,
            wheel_at,
            ..
        } = &mut self.core;
        timers.expire(now, |deadline, k| {
            if wheel_at.get(&k) != Some(&deadline) {
                return;
            }
            wheel_at.remove(&k);
            match timer_at.get(&k) {
                Some(&at) if at <= now => {
                    timer_at.remove(&k);
                    due.push(k);
                }
                Some(&at) => later.push((at, k)),
                None => {}
            }
        });
        for &(at, k) in &later {
            // Moved later while its entry waited: its entry moves too (one fired, so one fits).
            if timers.schedule(at, k).is_ok() {
                wheel_at.insert(k, at);
            }
        }
        later.clear();
        self.moved = later;
        self.core.earliest = self.core.timers.next_deadline();
        for &(m, token) in &due {
            self.core.counters.timeouts_fired += 1;
            self.dispatch(m, now, |module, cx| module.on_timeout(cx, token));
        }
        due.clear();
        self.due = due;
    }

    /// When [`Host::handle_timeout`] is next due (a lower bound).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.core.timer_at.is_empty() {
            return None;
        }
        self.core.earliest
    }

    /// The next message to send and where, if any; it stays first until
    /// [`Host::pop_transmit`] (a transport that is full leaves it for later).
    pub fn peek_transmit(&self) -> Option<(Address, &[u8])> {
        self.core.outbox.front().map(|(a, b)| (*a, b.as_slice()))
    }

    /// Drops the first message (it was sent).
    pub fn pop_transmit(&mut self) {
        if let Some((_, b)) = self.core.outbox.pop_front() {
            if self.core.spare.len() < SPARE_BUFFERS {
                self.core.spare.push(b);
            }
        }
    }

    /// Messages waiting for the transport.
    pub fn outbox_len(&self) -> usize {
        self.core.outbox.len()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<HostEvent> {
        self.core.events.pop_front()
    }
}

#[cfg(test)]
mod tests;
