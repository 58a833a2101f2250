//! Loading a program: size check, WAT or binary decoding, validation and compilation, and the
//! checks of its imports and exports against the ABI.

use std::sync::Arc;

use wasmi::{CompilationMode, Config, Engine, ExternType, Module, ValType};

use crate::error::{Hook, LoadError};

/// Bytes of one wasm memory page.
pub const PAGE_BYTES: u64 = 65_536;

/// The limits a program runs under. Each field is a named rule; the errors that enforce them
/// carry the rule's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `fuel_per_call`: the budget of one handler call, in wasm operators executed (about one
    /// fuel per operator; blocks, `nop` and `drop` are free). Past it the call stops with
    /// `RunError::OutOfFuel`.
    pub fuel_per_call: u64,
    /// `memory_pages_max`: the program's linear memory never exceeds this many 64 KiB pages;
    /// a larger initial size is refused at load and `memory.grow` past it returns -1.
    pub memory_pages_max: u32,
    /// `program_bytes_max`: the largest file (WAT text or binary) `Program::load` takes.
    pub program_bytes_max: usize,
    /// `sends_per_call_max`: the most `send` calls in one handler call.
    pub sends_per_call_max: u32,
    /// `timers_per_call_max`: the most `arm_timer` calls in one handler call.
    pub timers_per_call_max: u32,
    /// `table_elements_max`: the largest table a program may create.
    pub table_elements_max: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel_per_call: 1_000_000,
            memory_pages_max: 2,
            program_bytes_max: 256 * 1024,
            sends_per_call_max: 256,
            timers_per_call_max: 16,
            table_elements_max: 1024,
        }
    }
}

/// A validated, compiled program. Cloning is cheap (shared); each `instantiate` makes an
/// independent [`Instance`](crate::Instance) with its own memory and state.
#[derive(Clone)]
pub struct Program {
    pub(crate) inner: Arc<ProgramInner>,
}

pub(crate) struct ProgramInner {
    pub(crate) engine: Engine,
    pub(crate) module: Module,
    pub(crate) limits: Limits,
    pub(crate) has_on_message: bool,
    pub(crate) has_on_timer: bool,
    pub(crate) has_input: bool,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("limits", &self.inner.limits)
            .field("has_on_message", &self.inner.has_on_message)
            .field("has_on_timer", &self.inner.has_on_timer)
            .field("has_input", &self.inner.has_input)
            .finish()
    }
}

impl Program {
    /// Loads a program from WAT text or binary wasm: checks its size, validates and compiles
    /// it, and checks that it imports only the `txcast` hooks with their signatures and exports
    /// what the ABI requires (see the crate documentation).
    pub fn load(bytes: &[u8], limits: Limits) -> Result<Program, LoadError> {
        if bytes.len() > limits.program_bytes_max {
            return Err(LoadError::TooLarge {
                len: bytes.len(),
                max: limits.program_bytes_max,
            });
        }
        let binary: std::borrow::Cow<'_, [u8]> = if bytes.starts_with(b"\0asm") {
            bytes.into()
        } else {
            let text = std::str::from_utf8(bytes).map_err(|_| LoadError::NotWasm)?;
            let bin = wat::parse_str(text).map_err(|e| LoadError::Wat {
                message: e.to_string(),
            })?;
            if bin.len() > limits.program_bytes_max {
                return Err(LoadError::TooLarge {
                    len: bin.len(),
                    max: limits.program_bytes_max,
                });
            }
            bin.into()
        };

        let mut config = Config::default();
        config
            .consume_fuel(true)
            // All code runs from an entry point under a per-call fuel budget, never at
            // instantiation.
            .allow_start_fn(false)
            // Compile everything at load so that no call pays for (or fails in) translation.
            .compilation_mode(CompilationMode::Eager)
            .wasm_multi_memory(false);
        let engine = Engine::new(&config);
        let module = Module::new(&engine, &binary[..]).map_err(|e| LoadError::Invalid {
            message: e.to_string(),
        })?;

        check_imports(&module)?;
        let exports = check_exports(&module, &limits)?;
        Ok(Program {
            inner: Arc::new(ProgramInner {
                engine,
                module,
                limits,
                has_on_message: exports.on_message,
                has_on_timer: exports.on_timer,
                has_input: exports.input,
            }),
        })
    }

    /// The limits the program was loaded with; its instances run under them.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Whether the program exports `on_message`.
    pub fn has_on_message(&self) -> bool {
        self.inner.has_on_message
    }

    /// Whether the program exports `on_timer`.
    pub fn has_on_timer(&self) -> bool {
        self.inner.has_on_timer
    }
}

fn func_is(ty: &ExternType, params: &[ValType], results: &[ValType]) -> bool {
    match ty {
        ExternType::Func(f) => f.params() == params && f.results() == results,
        _ => false,
    }
}

fn hook_params(hook: Hook) -> (&'static [ValType], &'static [ValType]) {
    use ValType::{I32, I64};
    match hook {
        Hook::Send => (&[I64, I32, I32], &[I32]),
        Hook::SendMany => (&[I32, I32, I32, I32], &[I32]),
        Hook::Now => (&[], &[I64]),
        Hook::ArmTimer => (&[I64, I64], &[I32]),
        Hook::CancelTimer => (&[I64], &[I32]),
        Hook::Complete => (&[I32, I32, I32], &[]),
    }
}

fn check_imports(module: &Module) -> Result<(), LoadError> {
    for import in module.imports() {
        let hook = (import.module() == "txcast")
            .then(|| Hook::by_name(import.name()))
            .flatten()
            .ok_or_else(|| LoadError::UnknownImport {
                module: import.module().to_string(),
                name: import.name().to_string(),
            })?;
        let (params, results) = hook_params(hook);
        if !func_is(import.ty(), params, results) {
            return Err(LoadError::ImportType {
                hook,
                expected: hook.signature(),
            });
        }
    }
    Ok(())
}

struct Exports {
    on_message: bool,
    on_timer: bool,
    input: bool,
}

fn check_exports(module: &Module, limits: &Limits) -> Result<Exports, LoadError> {
    use ValType::{I32, I64};
    let func = |name: &'static str,
                params: &[ValType],
                results: &[ValType],
                expected: &'static str,
                required: bool|
     -> Result<bool, LoadError> {
        match module.get_export(name) {
            None if required => Err(LoadError::MissingExport { name }),
            None => Ok(false),
            Some(ty) if func_is(&ty, params, results) => Ok(true),
            Some(_) => Err(LoadError::ExportType { name, expected }),
        }
    };
    func(
        "invoke",
        &[I32, I32],
        &[I32],
        "func (param i32 i32) (result i32)",
        true,
    )?;
    let on_message = func(
        "on_message",
        &[I64, I32, I32],
        &[],
        "func (param i64 i32 i32)",
        false,
    )?;
    let on_timer = func("on_timer", &[I64], &[], "func (param i64)", false)?;

    match module.get_export("memory") {
        None => return Err(LoadError::MissingExport { name: "memory" }),
        Some(ExternType::Memory(m)) if !m.is_64() => {
            if m.minimum() > u64::from(limits.memory_pages_max) {
                return Err(LoadError::MemoryTooLarge {
                    min_pages: m.minimum(),
                    max_pages: limits.memory_pages_max,
                });
            }
        }
        Some(_) => {
            return Err(LoadError::ExportType {
                name: "memory",
                expected: "a 32-bit memory",
            })
        }
    }

    let global = |name: &'static str| -> Result<bool, LoadError> {
        match module.get_export(name) {
            None => Ok(false),
            Some(ExternType::Global(g)) if g.content() == I32 => Ok(true),
            Some(_) => Err(LoadError::ExportType {
                name,
                expected: "an i32 global",
            }),
        }
    };
    let input = match (global("input_ptr")?, global("input_cap")?) {
        (true, true) => true,
        (false, false) => false,
        (true, false) => return Err(LoadError::MissingExport { name: "input_cap" }),
        (false, true) => return Err(LoadError::MissingExport { name: "input_ptr" }),
    };
    Ok(Exports {
        on_message,
        on_timer,
        input,
    })
}
