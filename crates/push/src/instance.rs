//! A running program: its store (memory, globals, fuel), the host functions that bridge the
//! `txcast` imports to the caller's [`Hooks`], and the three entry points.

use std::ops::Range;

use wasmi::{
    Caller, Error as WasmError, Linker, Memory, Store, StoreLimits, StoreLimitsBuilder, TrapCode,
    TypedFunc, Val,
};

use crate::error::{BadArgs, Entry, Hook, HookError, InstantiateError, RunError, TrapKind};
use crate::program::Program;

/// What a program may ask of its host. The host (the engine's module driver, or a test's mock)
/// implements it; an [`Instance`] owns its hooks and calls them only while one of its entry
/// points runs.
pub trait Hooks {
    /// Sends `msg` to the server at `dest`, a txcast address packed into a `u64` (the 8 bytes
    /// of `txcast_proto::Address::to_bytes` read little-endian: `instance | site << 16 |
    /// server_type << 32 | server_instance << 48`). `msg` borrows the program's memory; copy
    /// what must outlive the call.
    fn send(&mut self, dest: u64, msg: &[u8]) -> Result<(), HookError>;
    /// Sends `msg` to each of `dests`, in order; the number of sends accepted. The default
    /// calls [`Hooks::send`] for each; a host with a cheaper fan-out (one system call for all
    /// destinations) may override it.
    fn send_many(&mut self, dests: Dests<'_>, msg: &[u8]) -> u32 {
        let mut accepted = 0;
        for dest in dests {
            accepted += u32::from(self.send(dest, msg).is_ok());
        }
        accepted
    }
    /// The host's clock, in nanoseconds from any fixed origin.
    fn now_ns(&self) -> u64;
    /// Arms a one-shot timer: after `after_ns` the host calls [`Instance::on_timer`] with
    /// `token`. Arming a token already armed re-arms it.
    fn arm_timer(&mut self, after_ns: u64, token: u64) -> Result<(), HookError>;
    /// Cancels the timer `token`; whether one was armed.
    fn cancel_timer(&mut self, token: u64) -> bool;
    /// Ends the current invocation (the application's one call) with `status` and `result`.
    /// Called once per invocation, from whichever handler completes it; an invocation ended
    /// by a fatal error is not completed (the host gets the error instead).
    fn complete(&mut self, status: i32, result: &[u8]);
}

/// The destinations of one `send_many`: packed txcast addresses, 8 little-endian bytes each,
/// read in place from the program's memory.
#[derive(Debug, Clone)]
pub struct Dests<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

impl<'a> Dests<'a> {
    /// The addresses in `bytes` (a trailing partial address is ignored).
    pub fn from_bytes(bytes: &'a [u8]) -> Self {
        Dests {
            chunks: bytes.chunks_exact(8),
        }
    }
}

impl Iterator for Dests<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        self.chunks
            .next()
            .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for Dests<'_> {}

/// What the last handler call used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Fuel consumed (about one per wasm operator executed).
    pub fuel: u64,
    /// `send` calls made.
    pub sends: u32,
    /// `arm_timer` calls made.
    pub timers: u32,
}

/// The store's host data: the caller's hooks and the per-call counters the host functions keep.
struct State<H> {
    hooks: H,
    /// The program's memory, known once instantiated; no host function runs before.
    memory: Option<Memory>,
    store_limits: StoreLimits,
    sends: u32,
    timers: u32,
    sends_max: u32,
    timers_max: u32,
    /// An invocation is in progress: `invoke` ran and `complete` has not been called.
    pending: bool,
}

// A hook stopped the program: the host function returns the `RunError` itself, and the call's
// error is turned back into it.
impl wasmi::errors::HostError for RunError {}

/// One instance of a [`Program`]: its own linear memory and state, which persist across calls.
pub struct Instance<H: Hooks + 'static> {
    program: Program,
    store: Store<State<H>>,
    memory: Memory,
    invoke: TypedFunc<(i32, i32), i32>,
    on_message: Option<TypedFunc<(i64, i32, i32), ()>>,
    on_timer: Option<TypedFunc<i64, ()>>,
    input_ptr: u32,
    input_cap: u32,
    failure: Option<RunError>,
    last: CallStats,
}

impl<H: Hooks + 'static> std::fmt::Debug for Instance<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("program", &self.program)
            .field("input_ptr", &self.input_ptr)
            .field("input_cap", &self.input_cap)
            .field("pending", &self.store.data().pending)
            .field("failure", &self.failure)
            .finish()
    }
}

/// The bytes `[ptr, ptr + len)` of `memory`, both read as unsigned 32-bit as wasm does.
#[inline]
fn range(memory_len: usize, ptr: i32, len: i32) -> Result<Range<usize>, BadArgs> {
    range_bytes(memory_len, ptr, len as u32 as usize).map_err(|()| BadArgs::OutOfBounds {
        ptr,
        len,
        memory_len: memory_len as u64,
    })
}

/// The bytes `[ptr, ptr + len)` of `memory`, `ptr` read as unsigned 32-bit.
#[inline]
fn range_bytes(memory_len: usize, ptr: i32, len: usize) -> Result<Range<usize>, ()> {
    let start = ptr as u32 as usize;
    match start.checked_add(len) {
        Some(end) if end <= memory_len => Ok(start..end),
        _ => Err(()),
    }
}

fn stop(err: RunError) -> WasmError {
    WasmError::host(err)
}

fn bad(hook: Hook, reason: BadArgs) -> WasmError {
    stop(RunError::BadHookArgs { hook, reason })
}

fn link<H: Hooks + 'static>(
    linker: &mut Linker<State<H>>,
) -> Result<(), wasmi::errors::LinkerError> {
    linker.func_wrap(
        "txcast",
        "send",
        |mut caller: Caller<'_, State<H>>,
         dest: i64,
         ptr: i32,
         len: i32|
         -> Result<i32, WasmError> {
            let memory = caller.data().memory.expect("memory set at instantiation");
            let (data, state) = memory.data_and_store_mut(&mut caller);
            state.sends += 1;
            if state.sends > state.sends_max {
                return Err(stop(RunError::TooManySends {
                    max: state.sends_max,
                }));
            }
            let r = range(data.len(), ptr, len).map_err(|e| bad(Hook::Send, e))?;
            Ok(match state.hooks.send(dest as u64, &data[r]) {
                Ok(()) => 0,
                Err(e) => e.code(),
            })
        },
    )?;
    linker.func_wrap(
        "txcast",
        "send_many",
        |mut caller: Caller<'_, State<H>>,
         dests: i32,
         count: i32,
         ptr: i32,
         len: i32|
         -> Result<i32, WasmError> {
            let memory = caller.data().memory.expect("memory set at instantiation");
            let (data, state) = memory.data_and_store_mut(&mut caller);
            let d = range_bytes(data.len(), dests, count as u32 as usize * 8).map_err(|_| {
                bad(
                    Hook::SendMany,
                    BadArgs::OutOfBounds {
                        ptr: dests,
                        len: count.saturating_mul(8),
                        memory_len: data.len() as u64,
                    },
                )
            })?;
            let m = range(data.len(), ptr, len).map_err(|e| bad(Hook::SendMany, e))?;
            state.sends = state.sends.saturating_add(count as u32);
            if state.sends > state.sends_max {
                return Err(stop(RunError::TooManySends {
                    max: state.sends_max,
                }));
            }
            Ok(state.hooks.send_many(Dests::from_bytes(&data[d]), &data[m]) as i32)
        },
    )?;
    linker.func_wrap("txcast", "now", |caller: Caller<'_, State<H>>| -> i64 {
        caller.data().hooks.now_ns() as i64
    })?;
    linker.func_wrap(
        "txcast",
        "arm_timer",
        |mut caller: Caller<'_, State<H>>, after_ns: i64, token: i64| -> Result<i32, WasmError> {
            let state = caller.data_mut();
            state.timers += 1;
            if state.timers > state.timers_max {
                return Err(stop(RunError::TooManyTimers {
                    max: state.timers_max,
                }));
            }
            if after_ns < 0 {
                return Err(bad(Hook::ArmTimer, BadArgs::NegativeDelay { after_ns }));
            }
            Ok(match state.hooks.arm_timer(after_ns as u64, token as u64) {
                Ok(()) => 0,
                Err(e) => e.code(),
            })
        },
    )?;
    linker.func_wrap(
        "txcast",
        "cancel_timer",
        |mut caller: Caller<'_, State<H>>, token: i64| -> i32 {
            i32::from(caller.data_mut().hooks.cancel_timer(token as u64))
        },
    )?;
    linker.func_wrap(
        "txcast",
        "complete",
        |mut caller: Caller<'_, State<H>>,
         status: i32,
         ptr: i32,
         len: i32|
         -> Result<(), WasmError> {
            let memory = caller.data().memory.expect("memory set at instantiation");
            let (data, state) = memory.data_and_store_mut(&mut caller);
            if !state.pending {
                return Err(bad(Hook::Complete, BadArgs::NoInvocation));
            }
            let r = range(data.len(), ptr, len).map_err(|e| bad(Hook::Complete, e))?;
            state.pending = false;
            state.hooks.complete(status, &data[r]);
            Ok(())
        },
    )?;
    Ok(())
}

fn engine_err(e: impl std::fmt::Display) -> InstantiateError {
    InstantiateError::Engine {
        message: e.to_string(),
    }
}

impl Program {
    /// Makes a new instance with its own memory and state; `hooks` serves its calls.
    pub fn instantiate<H: Hooks + 'static>(
        &self,
        hooks: H,
    ) -> Result<Instance<H>, InstantiateError> {
        let inner = &self.inner;
        let limits = &inner.limits;
        let store_limits = StoreLimitsBuilder::new()
            .memory_size((u64::from(limits.memory_pages_max) * crate::PAGE_BYTES) as usize)
            .table_elements(limits.table_elements_max as usize)
            .memories(1)
            .tables(4)
            .instances(1)
            .build();
        let state = State {
            hooks,
            memory: None,
            store_limits,
            sends: 0,
            timers: 0,
            sends_max: limits.sends_per_call_max,
            timers_max: limits.timers_per_call_max,
            pending: false,
        };
        let mut store = Store::new(&inner.engine, state);
        store.limiter(|s| &mut s.store_limits);
        let mut linker = Linker::new(&inner.engine);
        link(&mut linker).map_err(engine_err)?;
        let instance = linker
            .instantiate_and_start(&mut store, &inner.module)
            .map_err(engine_err)?;

        let memory = instance
            .get_memory(&store, "memory")
            .ok_or_else(|| engine_err("no memory"))?;
        store.data_mut().memory = Some(memory);
        let invoke = instance
            .get_typed_func::<(i32, i32), i32>(&store, "invoke")
            .map_err(engine_err)?;
        let on_message = if inner.has_on_message {
            Some(
                instance
                    .get_typed_func::<(i64, i32, i32), ()>(&store, "on_message")
                    .map_err(engine_err)?,
            )
        } else {
            None
        };
        let on_timer = if inner.has_on_timer {
            Some(
                instance
                    .get_typed_func::<i64, ()>(&store, "on_timer")
                    .map_err(engine_err)?,
            )
        } else {
            None
        };
        let (input_ptr, input_cap) = if inner.has_input {
            let get = |name| match instance.get_global(&store, name).map(|g| g.get(&store)) {
                Some(Val::I32(v)) => Ok(v as u32),
                _ => Err(engine_err(format!("global {name} is not i32"))),
            };
            (get("input_ptr")?, get("input_cap")?)
        } else {
            (0, 0)
        };
        let memory_len = memory.data_size(&store) as u64;
        if u64::from(input_ptr) + u64::from(input_cap) > memory_len {
            return Err(InstantiateError::InputBuffer {
                ptr: input_ptr,
                cap: input_cap,
                memory_len,
            });
        }
        Ok(Instance {
            program: self.clone(),
            store,
            memory,
            invoke,
            on_message,
            on_timer,
            input_ptr,
            input_cap,
            failure: None,
            last: CallStats::default(),
        })
    }
}

impl<H: Hooks + 'static> Instance<H> {
    /// The application's call: copies `args` into the program's input buffer and runs
    /// `invoke(input_ptr, args.len())`. The invocation is then in progress until the program
    /// calls `complete`, in this handler or a later one. A nonzero return from `invoke` with
    /// no `complete` ends the invocation: the host's `complete(ret, &[])` is called.
    ///
    /// Returns `invoke`'s result. A fatal error stops the program and ends the invocation
    /// without `complete`.
    pub fn invoke(&mut self, args: &[u8]) -> Result<i32, RunError> {
        self.check_usable()?;
        if self.store.data().pending {
            return Err(RunError::Busy);
        }
        let len = self.put_input(args)?;
        self.store.data_mut().pending = true;
        let (invoke, ptr) = (self.invoke, self.input_ptr as i32);
        let ret = self.run(Entry::Invoke, |store| invoke.call(store, (ptr, len)))?;
        let state = self.store.data_mut();
        if ret != 0 && state.pending {
            state.pending = false;
            state.hooks.complete(ret, &[]);
        }
        Ok(ret)
    }

    /// Delivers a message from `src` (a packed txcast address) to `on_message`, with the
    /// bytes copied into the program's input buffer.
    pub fn on_message(&mut self, src: u64, msg: &[u8]) -> Result<(), RunError> {
        self.check_usable()?;
        let f = self.on_message.ok_or(RunError::NoEntry {
            entry: Entry::OnMessage,
        })?;
        let len = self.put_input(msg)?;
        let ptr = self.input_ptr as i32;
        self.run(Entry::OnMessage, |store| {
            f.call(store, (src as i64, ptr, len))
        })
    }

    /// Delivers the expiry of timer `token` to `on_timer`.
    pub fn on_timer(&mut self, token: u64) -> Result<(), RunError> {
        self.check_usable()?;
        let f = self.on_timer.ok_or(RunError::NoEntry {
            entry: Entry::OnTimer,
        })?;
        self.run(Entry::OnTimer, |store| f.call(store, token as i64))
    }

    /// Whether an invocation is in progress (`invoke` ran, `complete` not yet called).
    pub fn is_pending(&self) -> bool {
        self.store.data().pending
    }

    /// The fatal error that stopped this instance, if one did.
    pub fn failure(&self) -> Option<&RunError> {
        self.failure.as_ref()
    }

    /// Whether a fatal error stopped this instance.
    pub fn is_failed(&self) -> bool {
        self.failure.is_some()
    }

    /// What the last handler call used.
    pub fn last_call(&self) -> CallStats {
        self.last
    }

    /// The program this is an instance of.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The instance's hooks.
    pub fn hooks(&self) -> &H {
        &self.store.data().hooks
    }

    /// The instance's hooks, mutably (for example to drain what a call queued).
    pub fn hooks_mut(&mut self) -> &mut H {
        &mut self.store.data_mut().hooks
    }

    /// Ends the instance, giving back its hooks.
    pub fn into_hooks(self) -> H {
        self.store.into_data().hooks
    }

    /// The program's linear memory, for inspection.
    pub fn memory(&self) -> &[u8] {
        self.memory.data(&self.store)
    }

    fn check_usable(&self) -> Result<(), RunError> {
        match self.failure {
            Some(_) => Err(RunError::Failed),
            None => Ok(()),
        }
    }

    /// Copies `bytes` into the input buffer (inside memory: checked at instantiation, and
    /// memory never shrinks).
    fn put_input(&mut self, bytes: &[u8]) -> Result<i32, RunError> {
        if bytes.len() > self.input_cap as usize {
            return Err(RunError::InputTooLong {
                len: bytes.len(),
                cap: self.input_cap,
            });
        }
        let start = self.input_ptr as usize;
        self.memory.data_mut(&mut self.store)[start..start + bytes.len()].copy_from_slice(bytes);
        Ok(bytes.len() as i32)
    }

    /// Runs one handler under a fresh fuel budget and per-call counters; a failure marks the
    /// instance failed.
    fn run<R>(
        &mut self,
        entry: Entry,
        f: impl FnOnce(&mut Store<State<H>>) -> Result<R, WasmError>,
    ) -> Result<R, RunError> {
        let budget = self.program.inner.limits.fuel_per_call;
        self.store
            .set_fuel(budget)
            .expect("fuel metering is enabled");
        let state = self.store.data_mut();
        state.sends = 0;
        state.timers = 0;
        let result = f(&mut self.store);
        let left = self.store.get_fuel().unwrap_or(0);
        let state = self.store.data();
        self.last = CallStats {
            fuel: budget - left,
            sends: state.sends.min(state.sends_max),
            timers: state.timers.min(state.timers_max),
        };
        result.map_err(|e| {
            let err = classify(entry, budget, e);
            self.failure = Some(err.clone());
            self.store.data_mut().pending = false;
            err
        })
    }
}

/// Turns an engine error into the typed error: a hook's own `RunError`, running out of fuel,
/// or a trap.
fn classify(entry: Entry, budget: u64, e: WasmError) -> RunError {
    if let Some(err) = e.downcast_ref::<RunError>() {
        return err.clone();
    }
    let kind = match e.as_trap_code() {
        Some(TrapCode::OutOfFuel) => return RunError::OutOfFuel { entry, budget },
        Some(TrapCode::UnreachableCodeReached) => TrapKind::Unreachable,
        Some(TrapCode::MemoryOutOfBounds) => TrapKind::MemoryOutOfBounds,
        Some(TrapCode::IntegerDivisionByZero) => TrapKind::DivisionByZero,
        Some(TrapCode::IntegerOverflow) | Some(TrapCode::BadConversionToInteger) => {
            TrapKind::IntegerOverflow
        }
        Some(TrapCode::StackOverflow) => TrapKind::StackOverflow,
        Some(TrapCode::TableOutOfBounds)
        | Some(TrapCode::IndirectCallToNull)
        | Some(TrapCode::BadSignature) => TrapKind::BadIndirectCall,
        _ => TrapKind::Other,
    };
    RunError::Trap {
        entry,
        kind,
        message: e.to_string(),
    }
}
