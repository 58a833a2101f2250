//! The typed errors of loading, instantiating and running a program, and the error a host
//! returns from a hook.

/// A program's entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `invoke(args_ptr, args_len) -> i32`.
    Invoke,
    /// `on_message(src, ptr, len)`.
    OnMessage,
    /// `on_timer(token)`.
    OnTimer,
}

impl Entry {
    /// The export's name.
    pub fn name(self) -> &'static str {
        match self {
            Entry::Invoke => "invoke",
            Entry::OnMessage => "on_message",
            Entry::OnTimer => "on_timer",
        }
    }
}

/// A host function a program imports from module `txcast`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `send(dest: i64, ptr: i32, len: i32) -> i32`.
    Send,
    /// `send_many(dests_ptr: i32, count: i32, ptr: i32, len: i32) -> i32`.
    SendMany,
    /// `now() -> i64`.
    Now,
    /// `arm_timer(after_ns: i64, token: i64) -> i32`.
    ArmTimer,
    /// `cancel_timer(token: i64) -> i32`.
    CancelTimer,
    /// `complete(status: i32, ptr: i32, len: i32)`.
    Complete,
}

impl Hook {
    /// Every hook, in ABI order.
    pub const ALL: [Hook; 6] = [
        Hook::Send,
        Hook::SendMany,
        Hook::Now,
        Hook::ArmTimer,
        Hook::CancelTimer,
        Hook::Complete,
    ];

    /// The import's name in module `txcast`.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Send => "send",
            Hook::SendMany => "send_many",
            Hook::Now => "now",
            Hook::ArmTimer => "arm_timer",
            Hook::CancelTimer => "cancel_timer",
            Hook::Complete => "complete",
        }
    }

    /// The import's wasm signature, as written in WAT.
    pub fn signature(self) -> &'static str {
        match self {
            Hook::Send => "(param i64 i32 i32) (result i32)",
            Hook::SendMany => "(param i32 i32 i32 i32) (result i32)",
            Hook::Now => "(result i64)",
            Hook::ArmTimer => "(param i64 i64) (result i32)",
            Hook::CancelTimer => "(param i64) (result i32)",
            Hook::Complete => "(param i32 i32 i32)",
        }
    }

    pub(crate) fn by_name(name: &str) -> Option<Hook> {
        Hook::ALL.into_iter().find(|h| h.name() == name)
    }
}

/// What a host refuses a hook call with. The program sees [`HookError::code`], a negative
/// `i32`, as the hook's result and may go on; a refusal does not stop the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// The destination is not known or not reachable. Code -1.
    #[error("destination unreachable")]
    Unreachable,
    /// The host cannot take the request now (queue full); the program may retry later. Code -2.
    #[error("host busy")]
    Busy,
    /// The message is larger than the host sends. Code -3.
    #[error("message too large")]
    TooLarge,
    /// The host keeps no more timers for this program. Code -4.
    #[error("too many timers")]
    TooManyTimers,
    /// Any other refusal. Code -5.
    #[error("refused")]
    Refused,
}

impl HookError {
    /// The negative code the program gets as the hook's result.
    pub fn code(self) -> i32 {
        match self {
            HookError::Unreachable => -1,
            HookError::Busy => -2,
            HookError::TooLarge => -3,
            HookError::TooManyTimers => -4,
            HookError::Refused => -5,
        }
    }
}

/// Why a program file is refused at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// Rule `program_bytes_max`: the file (text or binary) is larger than the limit.
    #[error("program is {len} bytes, limit program_bytes_max is {max}")]
    TooLarge { len: usize, max: usize },
    /// The file is neither binary wasm (no `\0asm` magic) nor UTF-8 text.
    #[error("not a wasm binary nor WAT text")]
    NotWasm,
    /// The file is WAT text that does not parse.
    #[error("WAT text does not parse: {message}")]
    Wat { message: String },
    /// The binary does not decode or validate (or uses a feature the engine refuses, such as a
    /// start function).
    #[error("invalid wasm: {message}")]
    Invalid { message: String },
    /// Rule `imports`: the program imports something other than the `txcast` hooks.
    #[error("import {module}.{name} is not a txcast hook")]
    UnknownImport { module: String, name: String },
    /// Rule `imports`: a hook is imported with a signature other than its own.
    #[error("hook txcast.{} imported with a wrong signature, expected {expected}", .hook.name())]
    ImportType { hook: Hook, expected: &'static str },
    /// A required export (`invoke`, `memory`, `input_ptr`, `input_cap`) is missing.
    #[error("required export {name} is missing")]
    MissingExport { name: &'static str },
    /// An export of the ABI has the wrong kind or signature.
    #[error("export {name} must be {expected}")]
    ExportType {
        name: &'static str,
        expected: &'static str,
    },
    /// Rule `memory_pages_max`: the program's memory starts larger than the limit.
    #[error("memory starts at {min_pages} pages, limit memory_pages_max is {max_pages}")]
    MemoryTooLarge { min_pages: u64, max_pages: u32 },
}

/// Why a loaded program could not be instantiated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstantiateError {
    /// The exported input buffer `[input_ptr, input_ptr + input_cap)` is not inside memory.
    #[error("input buffer [{ptr}, {ptr}+{cap}) is outside the {memory_len}-byte memory")]
    InputBuffer { ptr: u32, cap: u32, memory_len: u64 },
    /// The engine refused the instance (for example a table larger than the store allows).
    #[error("instantiation failed: {message}")]
    Engine { message: String },
}

/// What a trap was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrapKind {
    /// `unreachable` executed.
    Unreachable,
    /// A load or store outside the program's memory.
    MemoryOutOfBounds,
    /// Integer division or remainder by zero.
    DivisionByZero,
    /// Integer overflow (`i32.div_s` of MIN by -1, a float-to-int conversion out of range).
    IntegerOverflow,
    /// The call stack grew past the engine's limit (runaway recursion).
    StackOverflow,
    /// A table access out of bounds, a null or mistyped indirect call.
    BadIndirectCall,
    /// Any other trap the engine reports.
    Other,
}

/// Why a handler call failed. The variants marked *fatal* stop the program: the instance is
/// marked failed and refuses every later call with [`RunError::Failed`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// Fatal. Rule `fuel_per_call`: the handler executed more than its budget (a program that
    /// loops forever ends here).
    #[error("{} ran out of fuel (fuel_per_call {budget})", .entry.name())]
    OutOfFuel { entry: Entry, budget: u64 },
    /// Fatal. The program trapped.
    #[error("{} trapped ({kind:?}): {message}", .entry.name())]
    Trap {
        entry: Entry,
        kind: TrapKind,
        message: String,
    },
    /// Fatal. A hook was called with arguments it cannot take (a pointer or length outside
    /// memory, `complete` with no invocation in progress).
    #[error("hook {} called with bad arguments: {reason}", .hook.name())]
    BadHookArgs {
        hook: Hook,
        #[source]
        reason: BadArgs,
    },
    /// Fatal. Rule `sends_per_call_max`: the handler sent more messages than allowed (each
    /// destination of `send_many` counts).
    #[error("more than sends_per_call_max ({max}) sends in one call")]
    TooManySends { max: u32 },
    /// Fatal. Rule `timers_per_call_max`: the handler called `arm_timer` more times than allowed.
    #[error("more than timers_per_call_max ({max}) timers armed in one call")]
    TooManyTimers { max: u32 },
    /// The argument or message does not fit the program's input buffer. The program did not
    /// run; the instance is unaffected.
    #[error("{len} input bytes do not fit the {cap}-byte input buffer")]
    InputTooLong { len: usize, cap: u32 },
    /// `invoke` while an earlier invocation has not completed. The instance is unaffected.
    #[error("an invocation is already in progress")]
    Busy,
    /// The program does not export the entry point. The instance is unaffected.
    #[error("program exports no {}", .entry.name())]
    NoEntry { entry: Entry },
    /// The instance was stopped by an earlier fatal error and takes no more calls.
    #[error("instance stopped by an earlier error")]
    Failed,
}

/// The wrong argument a hook was called with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadArgs {
    /// `[ptr, ptr + len)` is not inside the program's memory (a negative length included).
    #[error("range ptr {ptr} len {len} is outside the {memory_len}-byte memory")]
    OutOfBounds { ptr: i32, len: i32, memory_len: u64 },
    /// `complete` was called with no invocation in progress.
    #[error("no invocation in progress")]
    NoInvocation,
    /// `arm_timer` was called with a negative delay.
    #[error("negative timer delay {after_ns}")]
    NegativeDelay { after_ns: i64 },
}

impl RunError {
    /// Whether this error stopped the program (the instance is failed after it).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            RunError::OutOfFuel { .. }
                | RunError::Trap { .. }
                | RunError::BadHookArgs { .. }
                | RunError::TooManySends { .. }
                | RunError::TooManyTimers { .. }
                | RunError::Failed
        )
    }
}
