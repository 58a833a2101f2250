//! A deterministic simulator for txcast's sans-IO protocols (DESIGN §5).
//!
//! N nodes run on one thread in virtual time over a seeded network that loses, duplicates,
//! reorders and delays packets, has a capacity limit per path, and can be partitioned. The fault
//! options themselves are drawn per seed ("swarm testing"), so a batch of seeds explores many
//! mixes. The same seed replays the same run, event for event: every run keeps a digest of its
//! event trace to prove it.
//!
//! [`harness`] is the runner every simulator is written on: a simulator is a small file of
//! node setup, workload and checkers (`*_sim.rs`).

mod crmem_disk;
pub mod crmem_sim;
pub mod crmem_sym_sim;
pub mod engine_sim;
pub mod faults;
pub mod frag_sim;
pub mod group_sim;
pub mod group_world;
pub mod harness;
pub mod link_sim;
pub mod module_sim;
pub mod net;
pub mod oracle_sim;
pub mod order_sim;
pub mod raid_sim;
pub mod rpc_sim;
pub mod schedule;
pub mod streams;
pub mod txn_sim;
pub mod vs_sim;

pub use harness::{run, sweep, Clock, Plan, Run, Violation, World};
pub use net::{FaultConfig, Network};

use txcast_proto::time::Instant;
use txcast_proto::Address;

/// Index of a node in a simulation.
pub type NodeId = usize;

/// The address of node `node` in a simulator whose nodes are the sites of cluster 0.
pub fn node_address(node: NodeId) -> Address {
    Address::new(0, node as u16, 1, 0)
}

/// A sans-IO protocol node the runner can drive: messages in, timers fired, packets out.
pub trait Node {
    /// A datagram arrived from the network.
    fn handle_message(&mut self, now: Instant, bytes: &[u8]);
    /// Timers that are due.
    fn handle_timeout(&mut self, now: Instant);
    /// When the node next needs `handle_timeout`.
    fn poll_timeout(&self) -> Option<Instant>;
    /// The next packet to put on the wire: its length in `buf`, its destinations pushed on
    /// `to` (one, or a group's fan-out).
    fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        to: &mut Vec<NodeId>,
    ) -> Option<usize>;
}

/// Implements [`Node`] for a group member type whose `poll_transmit` names a `Dest` (`To` one
/// address or `All` of its `fanout`); a process's slot is its address's site.
macro_rules! member_node {
    ($member:ty, $dest:ident) => {
        impl $crate::Node for $member {
            fn handle_message(&mut self, now: Instant, bytes: &[u8]) {
                let _ = <$member>::handle_message(self, now, bytes);
            }
            fn handle_timeout(&mut self, now: Instant) {
                <$member>::handle_timeout(self, now)
            }
            fn poll_timeout(&self) -> Option<Instant> {
                <$member>::poll_timeout(self)
            }
            fn poll_transmit(
                &mut self,
                now: Instant,
                buf: &mut [u8],
                to: &mut Vec<$crate::NodeId>,
            ) -> Option<usize> {
                let (dest, len) = <$member>::poll_transmit(self, now, buf)?;
                match dest {
                    $dest::To(a) => to.push(a.site as usize),
                    $dest::All => to.extend(self.fanout().map(|a| a.site as usize)),
                }
                Some(len)
            }
        }
    };
}
pub(crate) use member_node;

/// FNV-1a, for trace digests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest(pub u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(txcast_proto::fnv::OFFSET)
    }
}

impl Digest {
    pub fn add(&mut self, bytes: &[u8]) {
        let mut h = txcast_proto::fnv::Fnv64(self.0);
        h.add(bytes);
        self.0 = h.0;
    }
    /// The digest of `bytes` alone.
    pub fn of(bytes: &[u8]) -> u64 {
        let mut d = Digest::default();
        d.add(bytes);
        d.0
    }
    pub fn add_u64(&mut self, v: u64) {
        self.add(&v.to_le_bytes());
    }
}
