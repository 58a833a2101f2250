//! A deterministic simulator for txcast's sans-IO protocols (DESIGN §5).
//!
//! N nodes run on one thread in virtual time over a seeded network that loses, duplicates,
//! reorders and delays packets, has a capacity limit per path, and can be partitioned. The fault
//! options themselves are drawn per seed ("swarm testing"), so a batch of seeds explores many
//! mixes. The same seed replays the same run, event for event: every run keeps a digest of its
//! event trace to prove it.

pub mod engine_sim;
pub mod frag_sim;
pub mod group_sim;
pub mod link_sim;
pub mod module_sim;
pub mod net;
pub mod order_sim;
pub mod rpc_sim;
pub mod schedule;
pub mod streams;
pub mod vs_sim;

pub use net::{FaultConfig, Network};

use txcast_proto::time::Instant;

/// Index of a node in a simulation.
pub type NodeId = usize;

/// A protocol node the simulator can drive.
pub trait Node {
    /// A datagram arrived from the network.
    fn handle_datagram(&mut self, now: Instant, bytes: &[u8]);
    /// Timers that are due.
    fn handle_timeout(&mut self, now: Instant);
    /// The next packet to put on the wire: its destination node and length in `buf`.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(NodeId, usize)>;
    /// When the node next needs `handle_timeout`.
    fn poll_timeout(&self) -> Option<Instant>;
}

/// FNV-1a, for trace digests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest(pub u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0xcbf2_9ce4_8422_2325)
    }
}

impl Digest {
    pub fn add(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    pub fn add_u64(&mut self, v: u64) {
        self.add(&v.to_le_bytes());
    }
}
