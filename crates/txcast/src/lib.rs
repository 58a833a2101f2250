//! # txcast: a communication facility for distributed transaction processing
//!
//! One crate to depend on. Processes ("servers") named by logical [`Address`]es exchange
//! messages through **ports** ([`port`]): shared memory between processes on one host, UDP
//! with reliable in-order links between hosts, one API for both. On top of them:
//! transaction multicast ([`port::Port::multicast`]), totally ordered **groups**
//! ([`group`]), **calls** between servers ([`rpc`]), **long messages** ([`ldg`]), the
//! **oracle** name server ([`oracle`]), **extension modules** and loadable **Push programs**
//! ([`module`], [`push`]), and two services built on them: **CRMem**, replicated recoverable
//! memory ([`crmem`]), and **Raid**, a replicated DebitCredit database ([`raid`]).
//! [`config`] is the cluster file (sites to hosts, the port numbering); [`proto`] holds the
//! sans-IO protocol machines for those who drive them themselves.
//!
//! It follows five papers: Mafla & Bhargava, *Implementation and Performance of a
//! Communication Facility for Distributed Transaction Processing* (ports, naming,
//! transaction multicast); Bhargava, Mafla & Riedl, *Communication in the Raid Distributed
//! Database System* (Raid, the oracle, RPC kinds, long datagrams, Push); Friedman & van
//! Renesse, *Packing Messages as a Tool for Boosting the Performance of Total Ordering
//! Protocols* (ordering protocols, packing); Kaashoek & Tanenbaum, *An Evaluation of the
//! Amoeba Group Communication System* (the sequencer protocol); and Roşu & Schwan, *Support
//! for Recoverable Memory in the Distributed Virtual Communication Machine* (extension
//! modules, CRMem).
//!
//! Nothing to start first: the engine that runs the protocols is embedded in each process (a
//! thread, started on first use), and the default cluster puts site *s* on `127.0.0.(s+1)`.
//!
//! ```
//! use std::time::Duration;
//! use txcast::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // instance, site, server type, server
//! let mut a = Port::open(Address::new(21, 0, 1, 0), PortConfig::default())?;
//! let mut b = Port::open(Address::new(21, 1, 1, 0), PortConfig::default())?;
//! a.send(b.address(), b"hello")?; // another site: UDP, reliable, in order
//! let mut buf = [0u8; 2048];
//! let got = b.recv_timeout(&mut buf, Some(Duration::from_secs(5)))?;
//! assert_eq!(&buf[..got.len], b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! The examples in this documentation use instances 21 to 30 of the default cluster, one
//! each, so that they can run at once.
//!
//! The libraries log rare events (view changes, suspected failures, restarts, refused
//! packets) through the `tracing` crate and are silent unless the application installs a
//! subscriber.

pub use txcast_proto::{Address, TxnId};

/// The protocol machines and wire formats, sans-IO (crate `txcast-proto`): what the
/// services below are built from, for applications that drive them with their own I/O.
pub use txcast_proto as proto;

pub mod config {
    //! The cluster file: sites to hosts, the port numbering, the packet key, the oracle and
    //! IP multicast.
    //!
    //! The embedded default ([`ClusterConfig::default`]) needs no file. A file names only what it
    //! changes; [`ClusterConfig::load`] refuses one that does not parse or holds an unsafe value,
    //! naming the file and the key.
    //!
    //! ```
    //! use txcast::config::ClusterConfig;
    //! use txcast::Address;
    //!
    //! let c = ClusterConfig::from_toml(
    //!     "cluster = 3\nloopback_default = false\n[sites]\n0 = \"10.0.0.1\"\n1 = \"10.0.0.2\"\n",
    //! )?;
    //! assert_eq!(c.socket_addr(Address::new(0, 1, 2, 3))?.to_string(), "10.0.0.2:20131");
    //! assert_eq!(c.base_port, 20000); // not in the file: the default
    //! let bad = ClusterConfig::from_toml("base_port = \"x\"").unwrap_err();
    //! assert!(bad.to_string().contains("key `base_port` (line 1)"));
    //! # Ok::<(), txcast::config::NamingError>(())
    //! ```
    pub use txcast_port::naming::{ClusterConfig, MulticastConfig, NamingError, DEFAULT_ORACLE};
    /// Cluster keys and their rollover ([`crate::port::Engine::install_next_key`]).
    pub use txcast_proto::wire::{ClusterKey, KeyRingError};
}

pub mod port {
    //! Ports: one API for messages to a server on this host (through its shared-memory ring) and
    //! on another (UDP, through a reliable in-order link), and transaction multicast.
    //!
    //! [`Port::open`] uses the process's embedded engine; [`Engine::start`] with
    //! [`EngineMode::Invoker`] runs an engine on the application's own thread instead
    //! ([`Port::open_on`]).
    //!
    //! ```
    //! use std::time::Duration;
    //! use txcast::port::{Port, PortConfig};
    //! use txcast::{Address, TxnId};
    //!
    //! # fn main() -> Result<(), txcast::port::PortError> {
    //! let rc = |site| Address::new(22, site, 3, 0);
    //! let mut ac = Port::open(Address::new(22, 0, 1, 0), PortConfig::default())?;
    //! let mut local = Port::open(rc(0), PortConfig::default())?; // same site: shared memory
    //! let mut remote = Port::open(rc(1), PortConfig::default())?; // site 1: UDP
    //! ac.send(rc(0), b"read x")?;
    //! ac.send(rc(1), b"read y")?;
    //! let mut buf = [0u8; 2048];
    //! let timeout = Some(Duration::from_secs(5));
    //! let got = local.recv_timeout(&mut buf, timeout)?;
    //! assert_eq!((&buf[..got.len], got.source), (&b"read x"[..], ac.address()));
    //! let got = remote.recv_timeout(&mut buf, timeout)?;
    //! assert_eq!(&buf[..got.len], b"read y");
    //!
    //! // Transaction multicast: to the members of `rc`'s kind at sites 0 and 1 that joined.
    //! local.join_txn(TxnId(42))?;
    //! remote.join_txn(TxnId(42))?;
    //! ac.multicast(TxnId(42), rc(0), &[0, 1], b"commit")?;
    //! for port in [&mut local, &mut remote] {
    //!     let got = port.recv_timeout(&mut buf, timeout)?;
    //!     assert_eq!((&buf[..got.len], got.txn), (&b"commit"[..], Some(TxnId(42))));
    //! }
    //! ac.flush(Duration::from_secs(5))?; // everything sent is acknowledged
    //! # Ok(())
    //! # }
    //! ```
    pub use txcast_port::engine::{Engine, EngineConfig, EngineMode, KeyStatus, Refusals};
    pub use txcast_port::port::{Port, PortClaim, PortConfig, PortCounters, PortError, Received};
    /// The shared-memory rings under the ports (for tools such as `txcast stat`).
    pub use txcast_port::shm;
    pub use txcast_port::shm::IdleStrategy;
}

pub mod group {
    //! Totally ordered groups of ports, with the ordering protocol chosen per group: Amoeba's
    //! sequencer (Kaashoek & Tanenbaum) with [`GroupConfig`], or totem, total, dynseq or dynord
    //! over a virtually synchronous stack, with packing (Friedman & van Renesse), with
    //! [`OrderConfig`].
    //!
    //! ```
    //! use std::time::Duration;
    //! use txcast::group::{GroupRecord, OrderConfig, PackMode, Protocol};
    //! use txcast::port::{Port, PortConfig};
    //! use txcast::Address;
    //!
    //! # fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let a = Port::open(Address::new(23, 0, 4, 0), PortConfig::default())?;
    //! let b = Port::open(Address::new(23, 1, 4, 0), PortConfig::default())?;
    //! let cfg = OrderConfig::with(Protocol::Totem, PackMode::Adaptive { delay_max: Duration::from_millis(1) });
    //! let ga = a.create_group(cfg.clone())?;
    //! let gb = b.join_group(cfg, a.address(), Some(Duration::from_secs(10)))?;
    //! gb.send(b"debit 42", Some(Duration::from_secs(5)))?; // returns once delivered at b
    //! // Every member sees the same sequence: views (joins) and messages in their place.
    //! loop {
    //!     let d = ga.receive(Some(Duration::from_secs(5)))?;
    //!     if let GroupRecord::Message { payload, .. } = d.what {
    //!         assert_eq!((payload.as_slice(), d.sender), (&b"debit 42"[..], b.address()));
    //!         break;
    //!     }
    //! }
    //! # Ok(())
    //! # }
    //! ```
    pub use txcast_port::group::{Group, GroupCallError, GroupDelivery, GroupRecord, GroupSpec};
    pub use txcast_proto::group::GroupConfig;
    pub use txcast_proto::order::{OrderConfig, Protocol};
    pub use txcast_proto::pack::PackMode;
}

pub mod rpc {
    //! Calls between servers (Bhargava, Mafla & Riedl's RPC), local or remote the same way:
    //! at-most-once execution, deadlines, multicast calls with a completion rule, calls to the
    //! members of a transaction.
    //!
    //! ```
    //! use std::time::Duration;
    //! use txcast::rpc::{Completion, Rpc, RpcConfig};
    //! use txcast::port::{Port, PortConfig};
    //! use txcast::Address;
    //!
    //! # fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let cc = |site| Address::new(24, site, 2, 0);
    //! let mut servers = Vec::new();
    //! for site in [1, 2] {
    //!     let mut s = Rpc::new(Port::open(cc(site), PortConfig::default())?, RpcConfig::default())?;
    //!     s.register(7, |_caller, req| Ok([b"yes: ", req].concat())); // a handler per request type
    //!     // Handlers run on the engine's thread; a server may call `serve` in its own loop instead.
    //!     servers.push(s.serve_on_engine().map_err(|(e, _)| e)?);
    //! }
    //! let mut ac = Rpc::new(Port::open(Address::new(24, 0, 1, 0), PortConfig::default())?, RpcConfig::default())?;
    //! let vote = ac.call(cc(1), 7, b"prepare", Duration::from_secs(5))?;
    //! assert_eq!(vote, b"yes: prepare");
    //! let votes = ac.multicast(&[cc(1), cc(2)], 7, b"prepare", Completion::All, Duration::from_secs(5))?;
    //! assert_eq!((votes.replies.len(), votes.missing.len()), (2, 0));
    //! # Ok(())
    //! # }
    //! ```
    pub use txcast_port::rpc::{
        EngineServer, LongCounters, Rpc, RpcCallError, RpcCounters, TxnGroup,
    };
    pub use txcast_proto::rpc::{CallId, Completion, End, Outcome, RemoteError, RpcConfig};
}

pub mod ldg {
    //! Long messages (Bhargava, Mafla & Riedl's long datagrams): up to 64 MiB, fragmented,
    //! windowed, a lost fragment sent again.
    //!
    //! ```
    //! use std::time::Duration;
    //! use txcast::ldg::{Ldg, LdgConfig};
    //! use txcast::Address;
    //!
    //! # fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let mut a = Ldg::open(Address::new(25, 0, 5, 0), LdgConfig::default())?;
    //! let mut b = Ldg::open(Address::new(25, 1, 5, 0), LdgConfig::default())?;
    //! let to = b.address();
    //! // The receiver: each side drives its transfers while it waits in its own calls.
    //! let receiver = std::thread::spawn(move || b.recv(Some(Duration::from_secs(10))));
    //! let image = vec![7u8; 1 << 20]; // 1 MiB, far more than a datagram
    //! a.send(to, &image, Duration::from_secs(10))?; // returns once the receiver has all of it
    //! let (from, got) = receiver.join().expect("receiver")?;
    //! assert_eq!((from, got), (a.address(), image));
    //! # Ok(())
    //! # }
    //! ```
    pub use txcast_port::ldg::{Ldg, LdgCallError, LdgCounters};
    pub use txcast_proto::frag::{LdgConfig, LdgError, TransferId};
}

pub mod oracle {
    //! The oracle (Bhargava, Mafla & Riedl): a name server where servers register with a lease
    //! and a notifier set, and learn when the servers they watch move, fail or recover. The
    //! command `txcast oracle` runs one; [`OracleServer`] runs one in a process of your own.
    //!
    //! ```
    //! use std::time::Duration;
    //! use txcast::oracle::{OracleClient, OracleServer, Pattern};
    //! use txcast::port::{Engine, EngineConfig, Port, PortConfig};
    //! use txcast::rpc::{Rpc, RpcConfig};
    //! use txcast::Address;
    //!
    //! # fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let oracle = Address::new(26, 0, 15, 0);
    //! // The oracle on a thread of its own (state kept in memory only: no state file).
    //! let engine = Engine::start(EngineConfig::default())?;
    //! let mut server = OracleServer::open(&engine, oracle, None)?;
    //! std::thread::spawn(move || loop {
    //!     let _ = server.serve(Duration::from_millis(100));
    //! });
    //! let mut rc = Rpc::new(Port::open(Address::new(26, 1, 3, 0), PortConfig::default())?, RpcConfig::default())?;
    //! let mut me = OracleClient::with_oracle(&mut rc, oracle);
    //! me.register_self(&mut rc, &[], Duration::from_secs(10))?; // renewed while rc is used
    //!
    //! let mut ac = Rpc::new(Port::open(Address::new(26, 0, 1, 0), PortConfig::default())?, RpcConfig::default())?;
    //! let mut client = OracleClient::with_oracle(&mut ac, oracle);
    //! assert!(client.lookup(&mut ac, rc.address())?.is_some());
    //! let all_rcs = Pattern { instance: Some(26), site: None, server_type: Some(3), server_instance: None };
    //! assert_eq!(client.find_all(&mut ac, &all_rcs)?.len(), 1);
    //! # Ok(())
    //! # }
    //! ```
    pub use txcast_port::oracle::{Known, OracleClient, OracleError, OracleServer};
    pub use txcast_proto::oracle::{Change, Pattern};
}

pub mod module {
    //! Extension modules (Roşu & Schwan's DVCM modules): application code run on the engine's
    //! own loop, answering the network with no hand-off to an application thread. A module
    //! implements [`Module`]; [`ModuleHost`] loads modules into a port's engine and instructs
    //! them. Loadable sandboxed programs ([`crate::push`]) are modules too.
    //!
    //! ```
    //! use std::time::Duration;
    //! use txcast::module::ping::{self, PingPong, PingRun};
    //! use txcast::module::ModuleHost;
    //! use txcast::Address;
    //!
    //! # fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let key = 0x5ec2e7; // instructions must carry the key the module was loaded with
    //! let a = ModuleHost::open(Address::new(27, 0, 9, 0))?;
    //! let b = ModuleHost::open(Address::new(27, 1, 9, 0))?;
    //! a.load(1, key, PingPong::default())?; // id, key, module
    //! b.load(1, key, PingPong::default())?;
    //! // One instruction runs 100 PING/PONG exchanges between the two engines' loops.
    //! let run = PingRun { peer: b.address(), exchanges: 100, bytes: 64, timeout: Duration::from_secs(5) };
    //! let done = a.call(1, key, ping::RUN, &run.encode(), Duration::from_secs(10))?;
    //! assert_eq!(done.status, txcast::module::STATUS_OK);
    //! assert!(a.call(1, key + 1, ping::RUN, &run.encode(), Duration::from_secs(1)).is_err());
    //! # Ok(())
    //! # }
    //! ```
    pub use txcast_port::extension::ServiceClash;
    pub use txcast_port::module::{
        Completed, Context, Control, ControlClient, ControlServer, Handlers, Instruction,
        ModuleHost, ModuleHostError, Registration, Signal, Ticket, STATUS_FAILED, STATUS_OK,
        STATUS_UNLOADED,
    };
    pub use txcast_proto::module::{ping, HostCounters, Module, ModuleId};
}

pub mod push {
    //! Push (Bhargava, Mafla & Riedl): protocol programs in WebAssembly, loaded into a running
    //! engine and run in a sandbox (fuel, bounded memory, only the hooks it is given), as
    //! extension modules ([`ProgramModule`]). The crate's documentation has the program ABI.
    //!
    //! ```
    //! use std::time::Duration;
    //! use txcast::module::ModuleHost;
    //! use txcast::push::{module::INVOKE, programs, Limits, Program, ProgramModule};
    //! use txcast::Address;
    //!
    //! # fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let key = 7;
    //! let a = ModuleHost::open(Address::new(28, 0, 9, 0))?;
    //! // The paper's Appendix B multicast, validated and compiled once.
    //! let program = Program::load(programs::MULTICAST.as_bytes(), Limits::default())?;
    //! a.load(4, key, ProgramModule::new(4, "multicast", &program)?)?;
    //! // Its arguments: a count, the destinations, the message.
    //! let mut args = 1u32.to_le_bytes().to_vec();
    //! args.extend_from_slice(&Address::new(28, 1, 9, 0).to_bytes());
    //! args.extend_from_slice(b"commit 42");
    //! let sent = a.call(4, key, INVOKE, &args, Duration::from_secs(5))?;
    //! assert_eq!(sent.status, 1); // one destination sent to
    //! assert!(a.unload(4));
    //! assert!(Program::load(b"(module)", Limits::default()).is_err()); // no memory, no invoke
    //! # Ok(())
    //! # }
    //! ```
    pub use txcast_push::*;
}

pub mod crmem {
    //! CRMem, the Cluster Recoverable Memory of Roşu & Schwan (crate `txcast-crmem`):
    //! transactions on memory segments replicated on other nodes (one primary, its backups), in
    //! the LRVM model, the remote atomic write done by an extension module on each engine.
    //!
    //! ```
    //! use std::time::Duration;
    //! use txcast::crmem::{Crmem, CrmemConfig, LockMapping, Mode};
    //! use txcast::Address;
    //!
    //! # fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let nodes = vec![Address::new(29, 0, 10, 0), Address::new(29, 1, 10, 0)]; // primary, backup
    //! let segments = [(100_000, LockMapping::Records { record_bytes: 100, per_lock: 10 })];
    //! let db = Crmem::open(CrmemConfig::new(nodes.clone(), 0), &segments)?;
    //! // The backup: in real life on another host; here in this process, at site 1.
    //! let backup = Crmem::open(CrmemConfig::new(nodes, 1), &segments)?;
    //!
    //! let t = db.begin(Duration::from_millis(50))?; // its locks must come within 50 ms
    //! db.set_range(t, 0, 4_200, 100, Mode::Write)?; // the record's locks; its undo image
    //! db.write(t, 0, 4_200, 100, |rec| rec[..8].copy_from_slice(&42i64.to_le_bytes()))?;
    //! let seq = db.commit(t, Duration::from_secs(5))?; // returns once every live backup has it
    //! assert_eq!(seq, 1);
    //! let copy = backup.snapshot_segment(0).expect("segment 0");
    //! assert_eq!(copy[4_200..4_208], 42i64.to_le_bytes());
    //! # Ok(())
    //! # }
    //! ```
    pub use txcast_crmem::*;
}

pub mod raid {
    //! Raid, the distributed database of Bhargava, Mafla & Riedl (crate `txcast-raid`): a
    //! replicated DebitCredit database (read one, write all available; two-phase commit; a
    //! durable redo log per site). [`cluster::run_embedded`] runs a cluster in one process;
    //! `txcast node` runs a site as a process of its own, and [`client::RaidClient`] talks to it.
    //!
    //! ```
    //! use std::time::Duration;
    //! use txcast::raid::cluster::run_embedded;
    //! use txcast::raid::driver::{ClusterConfig, Load};
    //! use txcast::raid::Scale;
    //!
    //! # fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let logs = std::env::temp_dir().join(format!("txcast-doc-raid-{}", std::process::id()));
    //! let mut cluster = ClusterConfig::new(3, Scale::tpcb(1), logs.clone()); // sites, scale, logs
    //! cluster.instance = 30;
    //! let load = Load {
    //!     clients: 16,
    //!     warmup: Duration::from_millis(100),
    //!     measure: Duration::from_millis(500),
    //!     seed: 1,
    //! };
    //! let report = run_embedded(&cluster, &load, |_elapsed, _committed| {})?;
    //! assert!(report.committed > 0 && report.conserved && report.identical);
    //! println!("{:.0} transfers/s, p99 {} µs", report.tps, report.latency_us.quantile(0.99));
    //! std::fs::remove_dir_all(&logs)?;
    //! # Ok(())
    //! # }
    //! ```
    pub use txcast_raid::*;
}

pub mod prelude {
    //! What most programs use: addresses, ports, calls, groups.
    //!
    //! ```
    //! use txcast::prelude::*;
    //! let a = Address::new(0, 1, 2, 3);
    //! assert_eq!(a.to_string(), "0.1.2.3");
    //! let _ = (PortConfig::default(), RpcConfig::default(), TxnId(1));
    //! ```
    pub use crate::group::{Group, GroupRecord, OrderConfig, Protocol};
    pub use crate::port::{Port, PortConfig, PortError};
    pub use crate::rpc::{Completion, Rpc, RpcCallError, RpcConfig};
    pub use crate::{Address, TxnId};
}

/// The README's Rust code, compiled and run as doc tests through this crate alone.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
