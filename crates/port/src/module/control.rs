//! A control endpoint for the module host of a running process: list, load, unload and invoke
//! modules from outside it (`txcast program ...`), as RPC calls to an endpoint the process
//! serves on a thread of its own.
//!
//! Requests (little-endian):
//! - `LIST`: empty; the answer is one line per module, `id<TAB>name<TAB>label`.
//! - `LOAD`: id u16, key u64, label length u8, label, then the module's bytes (a program);
//!   the process's [`Loader`] makes the module of them.
//! - `UNLOAD`: id u16, key u64 (the key the module was loaded with).
//! - `INVOKE`: id u16, key u64, instruction type u16, timeout in ms u32, then the arguments;
//!   the answer is the completion's status u32, then its result.
//!
//! Anyone who can reach the endpoint can load code into the process: give the cluster a key
//! (every packet is then authenticated), and keep the endpoint's address private to the
//! operators.

use super::{Completed, ModuleHost};
use crate::port::Port;
use crate::rpc::{Rpc, RpcCallError};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use txcast_proto::module::{Module, ModuleId};
use txcast_proto::rpc::RpcConfig;
use txcast_proto::Address;

pub const LIST: u16 = 1;
pub const LOAD: u16 = 2;
pub const UNLOAD: u16 = 3;
pub const INVOKE: u16 = 4;
/// Longest request or answer of the control endpoint (a program travels as a long message).
pub const CONTROL_LONG_BYTES_MAX: usize = 1 << 20;
/// How long the control thread serves between looks at its stop flag.
const SERVE_SLICE: Duration = Duration::from_millis(50);

/// Makes a module of the bytes a `LOAD` carries: (id, label, bytes).
pub type Loader =
    Box<dyn FnMut(ModuleId, &str, &[u8]) -> Result<Box<dyn Module>, String> + Send + 'static>;

/// The control endpoint's thread; dropping it stops the endpoint.
pub struct ControlServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: Address,
}

impl ControlServer {
    pub fn address(&self) -> Address {
        self.addr
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn rpc_config() -> RpcConfig {
    RpcConfig {
        long_bytes_max: CONTROL_LONG_BYTES_MAX,
        ..RpcConfig::default()
    }
}

/// Reads a little-endian field at `at`, or says which is missing.
fn field<const N: usize>(b: &[u8], at: usize, name: &str) -> Result<[u8; N], String> {
    b.get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("request too short for its {name}"))
}

impl ModuleHost {
    /// Serves a control endpoint on `port` (a thread of its own), for this host: `loader` makes
    /// the modules that `LOAD` requests bring (for programs, `txcast_push::ProgramModule`).
    pub fn serve_control(
        &self,
        port: Port,
        mut loader: Loader,
    ) -> Result<ControlServer, RpcCallError> {
        let addr = port.address();
        let mut rpc = Rpc::new(port, rpc_config())?;
        let labels: Arc<Mutex<BTreeMap<ModuleId, String>>> = Default::default();
        let (h, l) = (self.clone(), labels.clone());
        rpc.register(LIST, move |_, _| {
            let labels = l.lock().expect("lock");
            let mut out = String::new();
            for (id, name) in h.modules() {
                let label = labels.get(&id).map_or("", String::as_str);
                out.push_str(&format!("{id}\t{name}\t{label}\n"));
            }
            Ok(out.into_bytes())
        });
        let (h, l) = (self.clone(), labels.clone());
        rpc.register(LOAD, move |_, req| {
            let id = u16::from_le_bytes(field(req, 0, "id")?);
            let key = u64::from_le_bytes(field(req, 2, "key")?);
            let [n] = field::<1>(req, 10, "label length")?;
            let label = req
                .get(11..11 + n as usize)
                .ok_or("request too short for its label")?;
            let label = std::str::from_utf8(label).map_err(|_| "label is not UTF-8")?;
            let module = loader(id, label, &req[11 + n as usize..])?;
            h.load_boxed(id, key, module).map_err(|e| e.to_string())?;
            l.lock().expect("lock").insert(id, label.to_string());
            Ok(Vec::new())
        });
        let (h, l) = (self.clone(), labels);
        rpc.register(UNLOAD, move |_, req| {
            let id = u16::from_le_bytes(field(req, 0, "id")?);
            let key = u64::from_le_bytes(field(req, 2, "key")?);
            h.unload_keyed(id, key).map_err(|e| e.to_string())?;
            l.lock().expect("lock").remove(&id);
            Ok(Vec::new())
        });
        let h = self.clone();
        rpc.register(INVOKE, move |_, req| {
            let id = u16::from_le_bytes(field(req, 0, "id")?);
            let key = u64::from_le_bytes(field(req, 2, "key")?);
            let ty = u16::from_le_bytes(field(req, 10, "instruction type")?);
            let ms = u32::from_le_bytes(field(req, 12, "timeout")?);
            let c = h
                .call(id, key, ty, &req[16..], Duration::from_millis(ms as u64))
                .map_err(|e| e.to_string())?;
            let mut out = c.status.to_le_bytes().to_vec();
            out.extend_from_slice(&c.result);
            Ok(out)
        });
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("txcast-module-control".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    if rpc.serve(SERVE_SLICE).is_err() {
                        std::thread::sleep(SERVE_SLICE);
                    }
                }
            })
            .map_err(|e| RpcCallError::Port(crate::PortError::Io(e)))?;
        Ok(ControlServer {
            stop,
            thread: Some(thread),
            addr,
        })
    }
}

/// A client of a control endpoint.
pub struct ControlClient {
    rpc: Rpc,
    control: Address,
    deadline: Duration,
}

impl ControlClient {
    /// A client at `from` (a port it opens) of the endpoint at `control`.
    pub fn open(from: Address, control: Address) -> Result<ControlClient, RpcCallError> {
        let port = Port::open(from, crate::PortConfig::default()).map_err(RpcCallError::Port)?;
        Ok(ControlClient {
            rpc: Rpc::new(port, rpc_config())?,
            control,
            deadline: Duration::from_secs(10),
        })
    }

    /// `(id, name, label)` of every module loaded.
    pub fn list(&mut self) -> Result<Vec<(ModuleId, String, String)>, RpcCallError> {
        let out = self.rpc.call(self.control, LIST, &[], self.deadline)?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                let id = f.next()?.parse().ok()?;
                Some((
                    id,
                    f.next()?.to_string(),
                    f.next().unwrap_or("").to_string(),
                ))
            })
            .collect())
    }

    /// Loads `bytes` (a program) as module `id` with `key`, labelled `label`.
    pub fn load(
        &mut self,
        id: ModuleId,
        key: u64,
        label: &str,
        bytes: &[u8],
    ) -> Result<(), RpcCallError> {
        let label = &label.as_bytes()[..label.len().min(255)];
        let mut req = id.to_le_bytes().to_vec();
        req.extend_from_slice(&key.to_le_bytes());
        req.push(label.len() as u8);
        req.extend_from_slice(label);
        req.extend_from_slice(bytes);
        self.rpc.call(self.control, LOAD, &req, self.deadline)?;
        Ok(())
    }

    pub fn unload(&mut self, id: ModuleId, key: u64) -> Result<(), RpcCallError> {
        let mut req = id.to_le_bytes().to_vec();
        req.extend_from_slice(&key.to_le_bytes());
        self.rpc.call(self.control, UNLOAD, &req, self.deadline)?;
        Ok(())
    }

    /// Issues instruction `ty` with `args` to module `id` and waits up to `timeout` for it.
    pub fn invoke(
        &mut self,
        id: ModuleId,
        key: u64,
        ty: u16,
        args: &[u8],
        timeout: Duration,
    ) -> Result<Completed, RpcCallError> {
        let mut req = id.to_le_bytes().to_vec();
        req.extend_from_slice(&key.to_le_bytes());
        req.extend_from_slice(&ty.to_le_bytes());
        req.extend_from_slice(&(timeout.as_millis().min(u32::MAX as u128) as u32).to_le_bytes());
        req.extend_from_slice(args);
        let out = self
            .rpc
            .call(self.control, INVOKE, &req, timeout + self.deadline)?;
        let status = out
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or(RpcCallError::Remote(
                txcast_proto::rpc::RemoteError::Failed("short answer".into()),
            ))?;
        Ok(Completed {
            status,
            result: out[4..].to_vec(),
        })
    }
}
