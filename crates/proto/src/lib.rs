//! txcast's sans-IO core: wire formats and protocol state machines.
//!
//! Nothing in this crate touches a socket, a thread, the OS clock or OS randomness: time comes in
//! as [`time::Instant`] values and randomness from a seeded [`rng::Rng`] handed down by the caller.

pub mod addr;
pub mod frag;
pub mod group;
pub mod link;
pub mod oracle;
pub mod pack;
pub mod rng;
pub mod rpc;
pub mod time;
pub mod timer;
pub mod wire;

pub use addr::{Address, AddressHash, TxnId};
pub use time::Instant;
