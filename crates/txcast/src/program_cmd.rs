//! `txcast node`: a process hosting extension modules, with a control endpoint;
//! `txcast program load|list|unload|invoke`: Push programs in such a process, from outside it.

use crate::opt;
use std::time::Duration;
use txcast_port::{ControlClient, ModuleHost, Port, PortConfig};
use txcast_proto::Address;
use txcast_push::{Limits, Program, ProgramModule};

const USAGE: &str = "\
usage:
  txcast node --at ADDR --control ADDR
      host extension modules at ADDR (a port served by the engine thread) and a control
      endpoint at CONTROL; runs until killed
  txcast program load --control ADDR --id N --key K [--label TEXT] FILE.wat|FILE.wasm
  txcast program list --control ADDR
  txcast program unload --control ADDR --id N --key K
  txcast program invoke --control ADDR --id N --key K [--args-hex HEX] [--timeout-ms MS]
ADDR is instance.site.type.server (e.g. 0.0.13.0); N below 64; K a number (0x... allowed)
";

fn address(args: &[String], key: &str) -> Result<Address, String> {
    let text = args
        .iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .ok_or(format!("{key} is required"))?;
    text.parse()
        .map_err(|e| format!("{key} {text:?}: {e} (want instance.site.type.server)"))
}

fn number(args: &[String], key: &str) -> Result<u64, String> {
    let text = args
        .iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .ok_or(format!("{key} is required"))?;
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("{key} {text:?} is not a number"))
}

fn module_id(args: &[String]) -> Result<u16, String> {
    let id = number(args, "--id")?;
    if id >= txcast_proto::module::MODULES_MAX as u64 {
        return Err(format!(
            "--id {id}: module ids are below {}",
            txcast_proto::module::MODULES_MAX
        ));
    }
    Ok(id as u16)
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

pub fn node(args: &[String]) -> i32 {
    let run = || -> Result<(), String> {
        let at = address(args, "--at")?;
        let control = address(args, "--control")?;
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
            eprintln!("txcast node: {e}\n{USAGE}");
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

fn hex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err("--args-hex needs an even number of digits".into());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| format!("bad hex {text:?}")))
        .collect()
}

pub fn program(args: &[String]) -> i32 {
    let Some(what) = args.first().map(String::as_str) else {
        eprint!("{USAGE}");
        return 2;
    };
    let args = &args[1..];
    let run = || -> Result<Result<(), String>, String> {
        let control = address(args, "--control")?;
        let mut c = client(control)?;
        Ok(match what {
            "list" => c.list().map_err(|e| e.to_string()).map(|l| {
                for (id, name, label) in l {
                    println!("{id}\t{name}\t{label}");
                }
            }),
            "load" => {
                let (id, key) = (module_id(args)?, number(args, "--key")?);
                let file = args
                    .last()
                    .filter(|f| !f.starts_with("--"))
                    .ok_or("the program file is required")?;
                let bytes = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
                let label = opt::<String>(args, "--label").unwrap_or_else(|| file.clone());
                c.load(id, key, &label, &bytes)
                    .map_err(|e| e.to_string())
                    .map(|_| println!("loaded {file} as module {id}"))
            }
            "unload" => {
                let (id, key) = (module_id(args)?, number(args, "--key")?);
                c.unload(id, key)
                    .map_err(|e| e.to_string())
                    .map(|_| println!("unloaded module {id}"))
            }
            "invoke" => {
                let (id, key) = (module_id(args)?, number(args, "--key")?);
                let bytes = match opt::<String>(args, "--args-hex") {
                    Some(h) => hex(&h)?,
                    None => Vec::new(),
                };
                let ms = opt::<u64>(args, "--timeout-ms").unwrap_or(5_000);
                c.invoke(
                    id,
                    key,
                    txcast_push::module::INVOKE,
                    &bytes,
                    Duration::from_millis(ms),
                )
                .map_err(|e| e.to_string())
                .map(|done| {
                    let result: String = done.result.iter().map(|b| format!("{b:02x}")).collect();
                    println!("status {} result {result}", done.status as i32);
                })
            }
            other => return Err(format!("unknown program command {other:?}")),
        })
    };
    match run() {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            eprintln!("txcast program {what}: {e}");
            1
        }
        Err(e) => {
            eprintln!("txcast program: {e}\n{USAGE}");
            2
        }
    }
}
