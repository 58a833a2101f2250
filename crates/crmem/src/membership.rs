//! Agreed membership for the symmetric configuration from a txcast group: each node's
//! [`crate::SymCrmem`] joins one group per database (the virtually synchronous stack, whose
//! failure detector and flush give every member the same views in the same order), and a
//! thread turns each view the group installs into [`crate::SymNode::view_change`] with the
//! same view number and live set on every member.
//!
//! **The mapping.** The group's view numbers (the layered stack's epoch numbers, one view per
//! number) are CRMem's. What CRMem is told depends only on the sequence of views, so every
//! member computes the same: the live set is the group's members that were live in CRMem's
//! previous view, plus at most one newcomer (the lowest id), told as `joining` (a restarted
//! node, which recovers through the snapshot); further newcomers wait for a later view (see
//! [`next_view`]). The first view holding every node starts the database (every node opened
//! fresh is in CRMem's view 0 with all nodes live); views before it are not told.
//!
//! **Ports.** The group runs on a port of its own beside the module host's, at
//! [`membership_address`] of the node's address: the module host owns its port's ring and
//! control messages, and a group is a port's service, so the two are kept apart rather than
//! mixed on one port.

use crate::node::NodeId;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use txcast_port::{Engine, Group, GroupCallError, GroupRecord, Port, PortConfig, PortError};
use txcast_proto::order::{OrderConfig, Protocol};
use txcast_proto::pack::PackMode;
use txcast_proto::Address;

/// Group views held while this node recovers (its snapshot says which view it starts in;
/// the later ones are told after it). Past it the oldest go: a node that saw this many view
/// changes during one recovery has lost its admission view anyway.
const HELD_VIEWS_MAX: usize = 256;
/// How long the thread waits for a group record before it looks at its stop flag.
const RECEIVE_WAIT: Duration = Duration::from_millis(100);
/// How long one join attempt waits for its contact.
const JOIN_ATTEMPT: Duration = Duration::from_secs(1);

/// How a node takes part in its database's membership group.
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    /// Each node's group port, by node id ([`membership_address`] of its module host's).
    pub ports: Vec<Address>,
    /// The group: the same on every node. Its `vs` timers are the failure detector
    /// (`heartbeat_interval`, `silence_timeout`) and the view change (`flush_timeout`).
    pub group: OrderConfig,
    /// How long opening waits for the first view of every node (a fresh start) or for the
    /// snapshot (a restarted node).
    pub open_timeout: Duration,
    /// How long a restarted node waits before it joins, so that the group has removed its
    /// previous process first (a join from an address still in the view would be taken for
    /// that member's).
    pub rejoin_delay: Duration,
}

impl MembershipConfig {
    /// Group ports derived from the nodes' addresses; `dynseq` ordering (quiet when nothing
    /// is sent: only heartbeats), the stack's default timers; group id from the first
    /// node's address.
    pub fn new(nodes: &[Address]) -> MembershipConfig {
        let mut group = OrderConfig::with(Protocol::Dynseq, PackMode::Off);
        let a = nodes.first().copied().unwrap_or_default();
        group.vs.group = 0x5343_0000 | u32::from(a.server_type) << 8 | u32::from(a.server_instance);
        let rejoin_delay = group.vs.silence_timeout + 2 * group.vs.flush_timeout;
        MembershipConfig {
            ports: nodes.iter().copied().map(membership_address).collect(),
            group,
            open_timeout: Duration::from_secs(30),
            rejoin_delay,
        }
    }
}

/// A node's group port: its module host's address with bit 5 of the server instance flipped
/// (the default cluster has 64 server instances, so node addresses below 32 map above it).
pub fn membership_address(node: Address) -> Address {
    Address {
        server_instance: node.server_instance ^ 32,
        ..node
    }
}

/// What CRMem is told for a group view of `members`, after CRMem's view `prev`: the live set
/// and the joining node. Members of `prev` stay; of the newcomers only the lowest joins now
/// (the core admits one restarted node a view); the others join at a later view.
pub fn next_view(prev: &[NodeId], members: &[NodeId]) -> (Vec<NodeId>, Option<NodeId>) {
    let mut live: Vec<NodeId> = members
        .iter()
        .copied()
        .filter(|k| prev.contains(k))
        .collect();
    let joining = members.iter().copied().filter(|k| !prev.contains(k)).min();
    live.extend(joining);
    live.sort_unstable();
    live.dedup();
    (live, joining)
}

/// What the membership thread drives: the node behind the driver.
pub(crate) trait Target: Send + Sync + 'static {
    /// The node's view number and live set, or `None` while it recovers.
    fn current(&self) -> Option<(u64, Vec<NodeId>)>;
    /// Tells the node of a view.
    fn tell(&self, view: u64, live: &[NodeId], joining: Option<NodeId>);
    /// The group left this node out: it must not serve any more.
    fn expelled(&self);
}

/// The group port and membership of one node, until the thread takes them.
pub(crate) struct Joined {
    port: Port,
    group: Arc<Group>,
    ids: Vec<Address>,
    /// Views received and not yet told (held while the node recovers).
    held: VecDeque<(u64, Vec<NodeId>)>,
}

/// Why membership could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("group port: {0}")]
    Port(#[from] PortError),
    #[error("group: {0}")]
    Group(#[from] GroupCallError),
    #[error("not every node joined (or the snapshot did not come) within the open timeout")]
    OpenTimeout,
    #[error("the membership configuration names a different number of nodes")]
    BadConfig,
}

/// Opens node `me`'s group port and joins (node 0 of a fresh start makes the group). A fresh
/// node returns once a view holds every node, which is CRMem's view 0; a restarted node
/// returns once it is a member; `OpenTimeout` past `deadline`.
pub(crate) fn join(
    cfg: &MembershipConfig,
    me: NodeId,
    recover: bool,
    engine: Option<&Engine>,
    deadline: Instant,
) -> Result<Joined, MembershipError> {
    let addr = *cfg
        .ports
        .get(me as usize)
        .ok_or(MembershipError::BadConfig)?;
    let port = match engine {
        Some(e) => Port::open_on(e, addr, PortConfig::default())?,
        None => Port::open(addr, PortConfig::default())?,
    };
    let group = if me == 0 && !recover {
        port.create_group(cfg.group.clone())?
    } else {
        // Any member lets a joiner in; a fresh start has node 0 first, so try it first.
        let contacts: Vec<Address> = (0..cfg.ports.len())
            .filter(|&k| k != me as usize)
            .map(|k| cfg.ports[k])
            .collect();
        let mut turn = 0;
        loop {
            if Instant::now() >= deadline || contacts.is_empty() {
                return Err(MembershipError::OpenTimeout);
            }
            let contact = contacts[turn % contacts.len()];
            turn += 1;
            match port.join_group(cfg.group.clone(), contact, Some(JOIN_ATTEMPT)) {
                Ok(g) => break g,
                Err(GroupCallError::Timeout) | Err(GroupCallError::JoinFailed) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    };
    let joined = Joined {
        port,
        group: Arc::new(group),
        ids: cfg.ports.clone(),
        held: VecDeque::new(),
    };
    if recover {
        return Ok(joined);
    }
    let n = cfg.ports.len();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(MembershipError::OpenTimeout);
        }
        match joined.group.receive(Some(left.min(RECEIVE_WAIT))) {
            Ok(d) => {
                if let Some((_, members)) = joined.view_of(&d.what) {
                    if members.len() == n {
                        // The database starts here: later views are told from this one.
                        return Ok(joined);
                    }
                }
            }
            Err(GroupCallError::Timeout) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Tells the group that a node's process is gone (see [`Joined::hinter`]).
pub(crate) type Hint = Arc<dyn Fn(NodeId) + Send + Sync>;

impl Joined {
    /// A function that passes the node's word that node `k`'s process is gone (its module
    /// host's port was reported unreachable) to the group, as a report about `k`'s group
    /// port: the kernel rate-limits "port unreachable" per host, and the node's own traffic
    /// to a dead peer often takes every report, leaving the group its whole silence.
    pub(crate) fn hinter(&self) -> Hint {
        // Weak: the membership thread owns the group, and drops it when it ends.
        let group = Arc::downgrade(&self.group);
        let ids = self.ids.clone();
        Arc::new(move |k: NodeId| {
            if let (Some(&a), Some(g)) = (ids.get(k as usize), group.upgrade()) {
                g.member_unreachable(a);
            }
        })
    }

    /// A view record's number and its members' node ids (sorted; unknown addresses left out).
    fn view_of(&self, what: &GroupRecord) -> Option<(u64, Vec<NodeId>)> {
        let GroupRecord::Rebuilt { epoch, members, .. } = what else {
            return None;
        };
        let mut ids: Vec<NodeId> = members
            .iter()
            .filter_map(|a| self.ids.iter().position(|p| p == a))
            .map(|k| k as NodeId)
            .collect();
        ids.sort_unstable();
        Some((epoch.number, ids))
    }
}

/// The thread that tells the node of every view; stopped and joined on drop.
pub(crate) struct Membership {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Membership {
    pub(crate) fn start(joined: Joined, target: Arc<dyn Target>) -> Membership {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("crmem-membership".into())
            .spawn(move || run(joined, target, &flag))
            .expect("spawn the membership thread");
        Membership {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(mut joined: Joined, target: Arc<dyn Target>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match joined.group.receive(Some(RECEIVE_WAIT)) {
            Ok(d) => {
                if let Some(v) = joined.view_of(&d.what) {
                    if joined.held.len() >= HELD_VIEWS_MAX {
                        joined.held.pop_front();
                    }
                    joined.held.push_back(v);
                }
            }
            Err(GroupCallError::Timeout) => {}
            Err(e) => {
                // Expelled (a view left this node out) or the group is gone: the others
                // have taken this node for dead, so it must not serve.
                tracing::warn!(error = %e, "crmem membership: out of the group");
                target.expelled();
                break;
            }
        }
        // A recovering node tells nothing until its snapshot says which view it is in.
        let Some((mut view, mut live)) = target.current() else {
            continue;
        };
        while let Some((v, members)) = joined.held.pop_front() {
            if v <= view {
                continue;
            }
            let (now_live, joining) = next_view(&live, &members);
            tracing::info!(view = v, live = ?now_live, joining = ?joining, "crmem view");
            target.tell(v, &now_live, joining);
            (view, live) = (v, now_live);
        }
    }
    drop(joined.group);
    drop(joined.port);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_node_leaves_the_live_set() {
        assert_eq!(next_view(&[0, 1, 2], &[0, 2]), (vec![0, 2], None));
    }

    #[test]
    fn a_returning_node_joins() {
        assert_eq!(next_view(&[0, 2], &[0, 1, 2]), (vec![0, 1, 2], Some(1)));
    }

    #[test]
    fn of_several_newcomers_the_lowest_joins_and_the_next_later() {
        let (live, joining) = next_view(&[0], &[0, 1, 2]);
        assert_eq!((live.clone(), joining), (vec![0, 1], Some(1)));
        // The next view (any change, or none but a new number) admits node 2.
        assert_eq!(next_view(&live, &[0, 1, 2]), (vec![0, 1, 2], Some(2)));
    }

    #[test]
    fn a_loss_and_a_return_in_one_view() {
        assert_eq!(next_view(&[0, 1], &[1, 2]), (vec![1, 2], Some(2)));
    }

    #[test]
    fn group_ports_are_beside_the_nodes() {
        let a = Address::new(0, 3, 10, 20);
        assert_eq!(membership_address(a), Address::new(0, 3, 10, 52));
        assert_eq!(membership_address(membership_address(a)), a);
    }
}
