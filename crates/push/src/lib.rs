//! # Push: loadable, sandboxed protocol programs
//!
//! Push comes from Bhargava, Mafla and Riedl, *Communication in the Raid Distributed Database
//! System* (§3.4 and Appendices A and B): user protocol code is loaded into a running
//! communication facility and run there in a sandbox, with "hooks" to the facility's send,
//! receive and timers and with its own bounded memory. A program can then carry out a whole
//! exchange (the paper's example: the two rounds of a commit protocol) for one call of the
//! application, instead of one call per message.
//!
//! Here programs are WebAssembly modules run by the `wasmi` interpreter with fuel metering and
//! a bounded memory. This crate is sans-IO: it touches no socket, thread or clock. The host
//! (the engine's module driver, or a test) implements [`Hooks`] and feeds the instance the
//! application's calls ([`Instance::invoke`]), the program's messages
//! ([`Instance::on_message`]) and its timer expiries ([`Instance::on_timer`]).
//!
//! ```text
//! let program = Program::load(wat_or_wasm_bytes, Limits::default())?;   // validated, compiled once
//! let mut inst = program.instantiate(my_hooks)?;                          // own memory and state
//! inst.invoke(&args)?;            // program sends, arms timers ...
//! inst.on_message(src, &reply)?;  // ... collects replies, and at last calls complete
//! ```
//!
//! ## Program ABI
//!
//! A program is a WAT text or binary wasm module (32-bit memory, no start function).
//!
//! **Exports.**
//!
//! | export | kind | required | meaning |
//! | --- | --- | --- | --- |
//! | `memory` | memory | yes | the program's linear memory, at most `memory_pages_max` pages |
//! | `invoke` | `func (param $args_ptr i32) (param $args_len i32) (result i32)` | yes | the application's call |
//! | `on_message` | `func (param $src i64) (param $ptr i32) (param $len i32)` | no | a message for the program arrived |
//! | `on_timer` | `func (param $token i64)` | no | a timer the program armed expired |
//! | `input_ptr`, `input_cap` | `global i32` (both or neither) | no | the input buffer `[input_ptr, input_ptr + input_cap)` |
//!
//! The input buffer is where the host copies the application's arguments before `invoke` and
//! each message before `on_message`; the entry point gets `(input_ptr, len)`. The buffer is
//! read once at instantiation and must lie inside memory. It is overwritten by the next
//! delivery: a program copies what it must keep. An input longer than `input_cap` is refused
//! with [`RunError::InputTooLong`] without running the program. A program without the globals
//! takes only empty inputs.
//!
//! `invoke` starts an invocation, which lasts until the program calls `complete` (in `invoke`
//! or in a later `on_message` or `on_timer`). While one is in progress a second `invoke` is
//! refused with [`RunError::Busy`]. If `invoke` returns nonzero without having called
//! `complete`, the host ends the invocation as if the program had called
//! `complete(ret, 0, 0)`. Messages and timers are delivered whether or not an invocation is in
//! progress.
//!
//! **Imports** (module `txcast`; anything else is refused at load with
//! [`LoadError::UnknownImport`], a hook with another signature with [`LoadError::ImportType`]):
//!
//! | import | signature | meaning |
//! | --- | --- | --- |
//! | `send` | `(param $dest i64) (param $ptr i32) (param $len i32) (result i32)` | send the bytes `[ptr, ptr + len)` to `dest`; 0, or a negative [`HookError::code`] |
//! | `send_many` | `(param $dests i32) (param $count i32) (param $ptr i32) (param $len i32) (result i32)` | send the bytes `[ptr, ptr + len)` to each of the `count` addresses (8 bytes each) at `dests`; the number of sends accepted |
//! | `now` | `(result i64)` | the host's clock in nanoseconds |
//! | `arm_timer` | `(param $after_ns i64) (param $token i64) (result i32)` | one-shot timer; 0 or a negative code |
//! | `cancel_timer` | `(param $token i64) (result i32)` | 1 if the timer was armed, else 0 |
//! | `complete` | `(param $status i32) (param $ptr i32) (param $len i32)` | end the invocation with `status` and the result bytes `[ptr, ptr + len)` |
//!
//! Addresses (`dest`, `src`) are txcast addresses packed in an `i64`: the 8 little-endian bytes
//! of `txcast_proto::Address::to_bytes`, that is `instance | site << 16 | server_type << 32 |
//! server_instance << 48`. Integers in messages and arguments are little-endian, as wasm
//! memory is.
//!
//! Every pointer and length a program hands a hook is checked against its memory (both read as
//! unsigned 32-bit); a range outside it stops the program with [`RunError::BadHookArgs`]. The
//! host never reads or writes outside the program's memory.
//!
//! ## Limits and errors
//!
//! Each rule of [`Limits`] has a name, carried by the error that enforces it:
//!
//! | rule | default | enforced by |
//! | --- | --- | --- |
//! | `program_bytes_max` | 256 KiB | [`LoadError::TooLarge`] |
//! | `memory_pages_max` | 2 (128 KiB) | [`LoadError::MemoryTooLarge`]; `memory.grow` past it returns -1 |
//! | `fuel_per_call` | 1,000,000 | [`RunError::OutOfFuel`] (a program looping forever stops here) |
//! | `sends_per_call_max` | 256 (each destination of `send_many` counts) | [`RunError::TooManySends`] |
//! | `timers_per_call_max` | 16 | [`RunError::TooManyTimers`] |
//! | `table_elements_max` | 1024 | instantiation refused ([`InstantiateError::Engine`]) |
//! | imports | only the hooks | [`LoadError::UnknownImport`], [`LoadError::ImportType`] |
//!
//! A file that is neither wasm nor UTF-8 text is [`LoadError::NotWasm`]; text that does not
//! parse is [`LoadError::Wat`]; a binary that does not decode or validate is
//! [`LoadError::Invalid`]. A trap (`unreachable`, division by zero, a load or store outside
//! memory, stack overflow) is [`RunError::Trap`] with its [`TrapKind`].
//!
//! The fatal errors ([`RunError::is_fatal`]) stop the program: the instance is marked failed
//! and refuses every later call with [`RunError::Failed`]; an invocation in progress ends
//! without `complete`. Nothing else is affected: other instances of the same program have
//! their own store and go on. Refusals that happen before the program runs
//! ([`RunError::InputTooLong`], [`RunError::Busy`], [`RunError::NoEntry`]) leave the instance
//! as it was. A hook that the host refuses ([`HookError`]) is not an error of the program: the
//! program gets the negative code and decides.
//!
//! ## Costs
//!
//! A program is decoded, validated and compiled once at [`Program::load`]; an instance's
//! calls use typed entry points, a reused input buffer and a `send` that hands the host a
//! slice of the program's memory, so the hot path allocates nothing. See `BENCH.md` beside
//! this crate for the figures.
//!
//! ## Programs shipped
//!
//! `programs/` holds `multicast.wat` (the paper's Appendix B multicast, one `send` per
//! destination), `multicast_many.wat` (the same with one `send_many`), `commit2.wat` (a
//! two-round commit coordinator), `count.wat` (a counting loop for the benchmark) and the bad
//! programs the tests use. [`programs`] has their text.

mod error;
mod instance;
pub mod module;
mod program;

pub use error::{BadArgs, Entry, Hook, HookError, InstantiateError, LoadError, RunError, TrapKind};
pub use instance::{CallStats, Dests, Hooks, Instance};
pub use module::ProgramModule;
pub use program::{Limits, Program, PAGE_BYTES};

/// The text of the programs shipped in `programs/`.
pub mod programs {
    /// The paper's Appendix B multicast: sends one message to a list of destinations.
    pub const MULTICAST: &str = include_str!("../programs/multicast.wat");
    /// The same multicast with one `send_many` hook call for all destinations.
    pub const MULTICAST_MANY: &str = include_str!("../programs/multicast_many.wat");
    /// A two-round commit coordinator.
    pub const COMMIT2: &str = include_str!("../programs/commit2.wat");
    /// A counting loop of 12 wasm operators per iteration, for measuring the interpreter.
    pub const COUNT: &str = include_str!("../programs/count.wat");
}
