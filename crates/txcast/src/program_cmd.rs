//! `txcast node`: a process hosting extension modules, with a control endpoint;
//! `txcast program load|list|unload|invoke`: Push programs in such a process, from outside it.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use txcast_port::{ControlClient, ModuleHost, Port, PortConfig};
use txcast_proto::Address;
use txcast_push::{Limits, Program, ProgramModule};

/// A port address, `instance.site.type.server` (e.g. `0.0.13.0`).
pub fn address(text: &str) -> Result<Address, String> {
    text.parse()
        .map_err(|e| format!("{e} (want instance.site.type.server)"))
}

/// A number, decimal or `0x` hexadecimal.
fn number(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("{text:?} is not a number"))
}

/// A module id, below `MODULES_MAX`.
fn module_id(text: &str) -> Result<u16, String> {
    let id = number(text)?;
    if id >= txcast_proto::module::MODULES_MAX as u64 {
        return Err(format!(
            "--id {id}: module ids are below {}",
            txcast_proto::module::MODULES_MAX
        ));
    }
    Ok(id as u16)
}

/// The options of `txcast program`.
#[derive(Args, Debug)]
#[command(
    after_help = "ADDR is instance.site.type.server (e.g. 0.0.13.0); N below 64; K a number \
                  (0x... allowed)"
)]
pub struct ProgramArgs {
    #[command(subcommand)]
    pub command: ProgramCommand,
}

#[derive(Subcommand, Debug)]
pub enum ProgramCommand {
    /// Loads a Push program (FILE.wat or FILE.wasm) as module N
    Load {
        #[command(flatten)]
        module: Module,
        /// The label `list` shows [default: the file name]
        #[arg(long)]
        label: Option<String>,
        /// The program, WebAssembly text or binary
        file: PathBuf,
    },
    /// Lists the modules loaded: id, kind and label
    List {
        #[command(flatten)]
        control: Control,
    },
    /// Unloads module N
    Unload {
        #[command(flatten)]
        module: Module,
    },
    /// Invokes module N and prints its status and result
    Invoke {
        #[command(flatten)]
        module: Module,
        /// The invocation's argument bytes, in hexadecimal
        #[arg(long, value_name = "HEX", value_parser = hex)]
        args_hex: Option<Bytes>,
        /// How long to wait for the result (ms)
        #[arg(long, value_name = "MS", default_value_t = 5_000)]
        timeout_ms: u64,
    },
}

/// The control endpoint a `txcast program` command talks to.
#[derive(Args, Debug)]
pub struct Control {
    /// The node's control endpoint
    #[arg(long, value_name = "ADDR", value_parser = address)]
    pub control: Address,
}

/// A module of a node: its control endpoint, id and key.
#[derive(Args, Debug)]
pub struct Module {
    #[command(flatten)]
    pub control: Control,
    /// The module id (below 64)
    #[arg(long, value_name = "N", value_parser = module_id)]
    pub id: u16,
    /// The module's key (0x... allowed)
    #[arg(long, value_name = "K", value_parser = number)]
    pub key: u64,
}

/// Makes a program module of the bytes of a `LOAD`.
fn load_program(
    id: u16,
    _label: &str,
    bytes: &[u8],
) -> Result<Box<dyn txcast_proto::module::Module>, String> {
    let program = Program::load(bytes, Limits::default()).map_err(|e| e.to_string())?;
    let module = ProgramModule::new(id, "program", &program).map_err(|e| e.to_string())?;
    Ok(Box::new(module))
}

/// `txcast node --at ADDR --control ADDR`: hosts extension modules until killed.
pub fn node(at: Address, control: Address) -> i32 {
    let run = || -> Result<(), String> {
        let host = ModuleHost::open(at).map_err(|e| e.to_string())?;
        let port = Port::open(control, PortConfig::default()).map_err(|e| e.to_string())?;
        let _server = host
            .serve_control(port, Box::new(load_program))
            .map_err(|e| e.to_string())?;
        println!("node: modules at {at}, control at {control}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("txcast node: {e}");
            2
        }
    }
}

/// A client port near the endpoint: same instance and site, server type 15, the first free
/// server number from the process id on.
fn client(control: Address) -> Result<ControlClient, String> {
    let base = std::process::id() as u16;
    let mut last = String::new();
    for k in 0..64u16 {
        let from = Address::new(
            control.instance,
            control.site,
            15,
            (base.wrapping_add(k)) % 64,
        );
        match ControlClient::open(from, control) {
            Ok(c) => return Ok(c),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("no client port free: {last}"))
}

/// The bytes of `--args-hex` (a newtype: clap would take a bare `Vec` for many values).
#[derive(Clone, Debug)]
pub struct Bytes(Vec<u8>);

/// Bytes written as hexadecimal digits, two a byte.
fn hex(text: &str) -> Result<Bytes, String> {
    if !text.len().is_multiple_of(2) {
        return Err("an even number of hexadecimal digits is needed".into());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| format!("bad hex {text:?}")))
        .collect::<Result<_, _>>()
        .map(Bytes)
}

/// `txcast program load|list|unload|invoke`.
pub fn program(args: &ProgramArgs) -> i32 {
    let (what, control) = match &args.command {
        ProgramCommand::Load { module, .. } => ("load", module.control.control),
        ProgramCommand::List { control } => ("list", control.control),
        ProgramCommand::Unload { module } => ("unload", module.control.control),
        ProgramCommand::Invoke { module, .. } => ("invoke", module.control.control),
    };
    let run = || -> Result<(), String> {
        let mut c = client(control)?;
        match &args.command {
            ProgramCommand::List { .. } => c.list().map_err(|e| e.to_string()).map(|l| {
                for (id, name, label) in l {
                    println!("{id}\t{name}\t{label}");
                }
            }),
            ProgramCommand::Load {
                module,
                label,
                file,
            } => {
                let shown = file.display().to_string();
                let bytes = std::fs::read(file).map_err(|e| format!("{shown}: {e}"))?;
                let label = label.clone().unwrap_or_else(|| shown.clone());
                c.load(module.id, module.key, &label, &bytes)
                    .map_err(|e| e.to_string())
                    .map(|_| println!("loaded {shown} as module {}", module.id))
            }
            ProgramCommand::Unload { module } => c
                .unload(module.id, module.key)
                .map_err(|e| e.to_string())
                .map(|_| println!("unloaded module {}", module.id)),
            ProgramCommand::Invoke {
                module,
                args_hex,
                timeout_ms,
            } => {
                let bytes = args_hex.as_ref().map_or(&[][..], |b| &b.0[..]);
                c.invoke(
                    module.id,
                    module.key,
                    txcast_push::module::INVOKE,
                    bytes,
                    Duration::from_millis(*timeout_ms),
                )
                .map_err(|e| e.to_string())
                .map(|done| {
                    let result: String = done.result.iter().map(|b| format!("{b:02x}")).collect();
                    println!("status {} result {result}", done.status as i32);
                })
            }
        }
    };
    crate::exit_code(format_args!("txcast program {what}"), run())
}
