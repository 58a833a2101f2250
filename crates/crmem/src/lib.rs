//! CRMem, the Cluster Recoverable Memory of Roşu & Schwan (*Support for Recoverable Memory in
//! the Distributed Virtual Communication Machine*, §3): transactions on memory segments
//! replicated on other nodes, in the LRVM model (`begin`, `set_range`, `commit`, `abort`),
//! with lock-mapping functions for concurrency and a replicated commit log.
//!
//! Two configurations, chosen per database: mirror ([`Node`]: one primary runs the
//! transactions) and symmetric ([`SymNode`]: transactions on every node, locks at each
//! segment's home node). The cores are sans-IO; [`Crmem`] and
//! [`SymCrmem`] run them on txcast's extension modules; a symmetric node may take its
//! membership from a txcast group ([`SymCrmem::open_with_membership`]).

mod disklog;
pub mod driver;
pub mod lock;
pub mod membership;
pub mod msg;
pub mod node;
mod plumbing;
pub mod sym_driver;
pub mod symmetric;
mod txmem;

pub use driver::{disk_position, Crmem, CrmemConfig, CrmemError, DiskPosition};
pub use lock::{LockId, LockMapping, LOCKS_PER_RANGE_MAX};
pub use membership::{membership_address, MembershipConfig, MembershipError};
pub use node::{
    AbortReason, Config, Counters, CrError, Event, Lock, Mode, Node, NodeId, Role, SegmentId,
    TxnId, MESSAGE_BYTES_MAX, SEGMENTS_MAX,
};
pub use sym_driver::{with_idle_drivers, SymCrmem, SymCrmemConfig, SymCrmemError};
pub use symmetric::{Phase, SymAbort, SymEvent, SymNode, LOCKS_PER_MESSAGE};
/// Where the CRMem module runs (the paper's three implementations), a field of both configurations.
pub use txcast_port::Handlers;
