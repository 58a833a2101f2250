//! txcast ports: one API for local (shared-memory) and remote (UDP) messages, naming by pure
//! functions, transaction multicast, and the engine that runs the protocol machines.

pub mod engine;
pub mod extension;
pub mod group;
pub mod idle;
pub mod ldg;
pub mod mmsg;
pub mod module;
pub mod naming;
pub mod oracle;
pub mod port;
pub mod rpc;
pub mod shm;

pub use engine::{Engine, EngineConfig, EngineMode, KeyStatus, Refusals};
pub use extension::ServiceClash;
pub use group::{Group, GroupCallError, GroupDelivery, GroupRecord, GroupSpec};
pub use ldg::{Ldg, LdgCallError, LdgCounters};
pub use module::{
    Completed, ControlClient, ControlServer, Handlers, ModuleHost, ModuleHostError, Signal, Ticket,
};
pub use naming::{ClusterConfig, NamingError};
pub use oracle::{Known, OracleClient, OracleError, OracleServer};
pub use port::{Port, PortClaim, PortConfig, PortCounters, PortError, Received};
pub use rpc::{EngineServer, LongCounters, Rpc, RpcCallError, RpcCounters, TxnGroup};
pub use shm::IdleStrategy;
pub use txcast_proto::frag::{LdgConfig, LdgError, TransferId};
pub use txcast_proto::oracle::{Change, Pattern};
pub use txcast_proto::rpc::{CallId, Completion, End, Outcome, RemoteError, RpcConfig};
pub use txcast_proto::wire::{ClusterKey, KeyRingError};
