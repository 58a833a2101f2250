//! Groups over ports (paper 003 Table 1): a sans-IO group member of `txcast-proto` (any stack,
//! through the one [`GroupMember`] interface), run by the engine over the port's UDP socket, behind a blocking API in the style of Amoeba's
//! primitives (`create_group`, `join_group`, `send_to_group`, `receive_from_group`,
//! `leave_group`, `reset_group`, `get_info_group`), with non-blocking variants.
//!
//! Group messages travel in GROUP packets (one group message per record) to the members'
//! ports: point to point, or, for the sequencer's multicast, one `sendmmsg` to every member.
//! The engine thread takes them in and runs the members' timers; application calls transmit
//! what they cause themselves. A group lives as long as its port.

use crate::engine::{deadline_after, Endpoint, Engine};
use crate::extension::{Extension, ServiceClash};
use crate::idle::{Backoff, Idle};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;
use txcast_proto::member::{
    Delivered, Dest, Epoch, GroupError, GroupEvent, GroupId, GroupInfo, GroupMember, MinMembers,
    State,
};
pub use txcast_proto::stack::GroupSpec;
use txcast_proto::time::Instant;
use txcast_proto::wire::{Kind, PacketHeader, PacketWriter, HEADER_BYTES, TRAILER_BYTES_MAX};
use txcast_proto::Address;

/// Largest GROUP packet the engine receives (its receive buffers are at least this long).
pub const GROUP_PACKET_BYTES_MAX: usize = 16_448;
/// Groups one port may belong to at once.
pub const GROUPS_PER_PORT_MAX: usize = 16;
/// Completions and failures kept for [`Group::events`]; older ones are dropped.
const EVENTS_MAX: usize = 256;
/// Bytes a GROUP packet adds around one group message (header, record header, MAC or seal).
const PACKET_OVERHEAD: usize =
    HEADER_BYTES + txcast_proto::wire::RECORD_HEADER_BYTES + TRAILER_BYTES_MAX;

/// Why a group call failed.
#[derive(Debug, thiserror::Error)]
pub enum GroupCallError {
    /// The protocol refused (not a member, too few members for r, queue full, too long...).
    #[error(transparent)]
    Group(#[from] GroupError),
    /// The call did not complete in time (the operation may still complete later).
    #[error("timed out")]
    Timeout,
    /// The join was not answered.
    #[error("join not answered")]
    JoinFailed,
    /// This member was left out of a rebuilt group.
    #[error("left out of the rebuilt group")]
    Expelled,
    /// The port already belongs to [`GROUPS_PER_PORT_MAX`] groups, or to this one.
    #[error("the port is in too many groups")]
    TooManyGroups,
    /// The group's packets would not fit the engine's receive buffers.
    #[error("group packet_bytes_max must be at most {max}")]
    PacketTooLong { max: usize },
    /// The port's engine would not take the port's groups.
    #[error(transparent)]
    Service(ServiceClash),
}

/// One record of the ordered stream, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDelivery {
    pub seq: u64,
    pub sender: Address,
    pub what: GroupRecord,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupRecord {
    Message {
        msg_id: u64,
        payload: Vec<u8>,
    },
    Joined(Address),
    Left(Address),
    /// A new view: its epoch (a layered group's view id), members, and those it lost.
    Rebuilt {
        epoch: Epoch,
        members: Vec<Address>,
        removed: Vec<Address>,
    },
}

/// A member's protocol state and what the application waits on.
pub(crate) struct GroupState {
    pub m: Box<dyn GroupMember>,
    /// Highest msg_id of ours delivered (sends complete in order).
    done_upto: u64,
    events: VecDeque<GroupEvent>,
    joined: bool,
    join_failed: bool,
    left: bool,
    expelled: bool,
    buf: Vec<u8>,
    pkt: Vec<u8>,
    to: Vec<SocketAddr>,
    /// Datagrams of one flush, sent together.
    out: crate::mmsg::SendBatch,
    /// Threads asleep on the condition variable. Notifying costs a system call even when
    /// nobody waits (every delivery would pay it, and in invoker mode nobody ever does).
    sleepers: usize,
    /// The view last logged: a new one is logged once, when `flush` first sees it.
    logged_epoch: Epoch,
    /// When `flush` last looked at the member's retransmitted records (engine clock, ns; 0
    /// for never), and their count then.
    retransmits_checked_at: u64,
    retransmits_seen: u64,
}

/// Shared between the application's [`Group`] handle and the engine.
pub(crate) struct GroupShared {
    pub id: GroupId,
    pub state: Mutex<GroupState>,
    cond: Condvar,
    /// Messages were taken in since the last flush: the engine flushes once per batch of
    /// input, so what one batch causes leaves packed.
    dirty: std::sync::atomic::AtomicBool,
}

impl GroupShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, GroupState> {
        self.state.lock().expect("group lock")
    }
}

/// Sends what the member has to send, takes in its completions and failures, wakes waiters.
pub(crate) fn flush(engine: &Engine, ep: &Endpoint, g: &GroupShared, st: &mut GroupState) {
    let now = engine.now();
    let cluster = &engine.config().cluster;
    let key = engine.shared.send_key();
    let key = key.as_deref();
    while let Some((dest, len)) = st.m.poll_transmit(now, &mut st.buf) {
        let destination = match dest {
            Dest::To(a) => a,
            Dest::All => ep.addr,
        };
        let header = PacketHeader {
            kind: Kind::Group,
            flags: 0,
            cluster: cluster.cluster,
            incarnation: ep.incarnation,
            source: ep.addr,
            destination,
        };
        let mut w = PacketWriter::group(&mut st.pkt, header, key);
        if !w.push(&st.buf[..len]) {
            continue;
        }
        let n = w.finish();
        // Every datagram this flush makes leaves in one `sendmmsg` (a lone one by `sendto`),
        // in the order made: with packing off, one call carries many records.
        let mut to = std::mem::take(&mut st.to);
        to.clear();
        match dest {
            Dest::To(a) => to.extend(engine.socket_addr(a).ok()),
            Dest::All => st.m.fanout(&mut |a| to.extend(engine.socket_addr(a).ok())),
        }
        // The engine's fault injection drops each copy on its own, as the wire would.
        to.retain(|_| !engine.inject_loss());
        if !st.out.has_room(n, to.len()) {
            send_out(ep, st);
        }
        st.out.push(&st.pkt[..n], to.iter().copied());
        st.to = to;
    }
    send_out(ep, st);
    let mut woke = st.m.has_delivery();
    while let Some(ev) = st.m.poll_event() {
        woke = true;
        match &ev {
            GroupEvent::SendDone { msg_id } => {
                st.done_upto = st.done_upto.max(*msg_id);
                continue;
            }
            GroupEvent::JoinDone { .. } => st.joined = true,
            GroupEvent::JoinFailed => {
                tracing::warn!(port = %ep.addr, group = g.id, "join not answered");
                st.join_failed = true;
            }
            GroupEvent::LeaveDone => st.left = true,
            GroupEvent::Expelled => {
                tracing::warn!(port = %ep.addr, group = g.id, "left out of the rebuilt group");
                st.expelled = true;
            }
            GroupEvent::Failure { suspect } => {
                tracing::warn!(port = %ep.addr, group = g.id, %suspect, "member suspected to have failed");
            }
            GroupEvent::ResetFailed { survivors, needed } => tracing::warn!(
                port = %ep.addr,
                group = g.id,
                survivors,
                needed,
                "group rebuild found too few members: blocked, trying again"
            ),
        }
        if st.events.len() >= EVENTS_MAX {
            st.events.pop_front();
        }
        st.events.push_back(ev);
    }
    let epoch = st.m.epoch();
    if epoch != st.logged_epoch {
        // A view change (or the first view): one line per view.
        st.logged_epoch = epoch;
        tracing::info!(
            port = %ep.addr,
            group = g.id,
            view = %epoch,
            members = ?st.m.members(),
            "group view installed"
        );
    }
    if now.0.saturating_sub(st.retransmits_checked_at) >= RETRANSMIT_CHECK_INTERVAL_NS {
        log_retransmit_burst(ep, g, st, now);
    }
    if woke {
        if st.sleepers > 0 {
            g.cond.notify_all();
        }
        // In invoker mode a waiter sleeps on the sockets, where only traffic wakes it: if this
        // call (from another thread) brought what it waits for, ring.
        engine.wake_invoker_sleepers();
    }
    // An application call that armed a timer wakes a sleeping engine only if the timer would
    // otherwise fire more than `TIMER_SLACK` late: the engine never sleeps longer than
    // `PARK_MAX`, and waking it on every send would cost a context switch per message.
    engine.wake_for(st.m.poll_timeout().map(|t| t + TIMER_SLACK));
}

/// A group member's retransmitted records are looked at most once a second (in [`flush`],
/// an integer comparison per call) and logged when more than `RETRANSMIT_BURST_MIN` were
/// retransmitted since the last look.
const RETRANSMIT_CHECK_INTERVAL_NS: u64 = 1_000_000_000;
const RETRANSMIT_BURST_MIN: u64 = 16;

fn log_retransmit_burst(ep: &Endpoint, g: &GroupShared, st: &mut GroupState, now: Instant) {
    let total = st.m.info(now).counters.records_retransmitted;
    // Saturating: should the count ever start again, this look logs nothing.
    let count = total.saturating_sub(st.retransmits_seen);
    if st.retransmits_checked_at != 0 && count > RETRANSMIT_BURST_MIN {
        tracing::warn!(
            port = %ep.addr,
            group = g.id,
            count,
            interval_ms = now.0.saturating_sub(st.retransmits_checked_at) / 1_000_000,
            "group retransmission burst (records retransmitted since the last line)"
        );
    }
    st.retransmits_checked_at = now.0.max(1);
    st.retransmits_seen = total;
}

/// Sends the datagrams [`flush`] gathered.
fn send_out(ep: &Endpoint, st: &mut GroupState) {
    if !st.out.is_empty() {
        let k = st.out.send(&ep.socket);
        ep.counters
            .packets_sent
            .fetch_add(k as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How late a group timer armed by an application call may fire (see [`flush`]).
const TIMER_SLACK: Duration = Duration::from_millis(5);

/// The groups of one port: the protocol that takes the port's GROUP packets.
#[derive(Default)]
pub(crate) struct GroupTable {
    groups: Mutex<Vec<Arc<GroupShared>>>,
}

impl GroupTable {
    /// `ep`'s table, made and registered with the engine at the port's first group.
    fn of(ep: &Endpoint) -> Result<Arc<GroupTable>, ServiceClash> {
        ep.extensions.get_or_register(GroupTable::default)
    }
}

impl Extension for GroupTable {
    fn kinds(&self) -> &'static [Kind] {
        &[Kind::Group]
    }

    /// Hands a GROUP packet's message to the member of the group it names.
    fn take(&self, engine: &Engine, _ep: &Endpoint, _source: Address, msg: &[u8]) -> bool {
        if msg.len() < 8 {
            return false;
        }
        let id = u32::from_le_bytes(msg[4..8].try_into().expect("4 bytes"));
        let groups = self.groups.lock().expect("groups lock");
        let Some(g) = groups.iter().find(|g| g.id == id).cloned() else {
            return false;
        };
        drop(groups);
        let mut st = g.lock();
        let ok = st.m.handle_message(engine.now(), msg);
        g.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
        ok
    }

    /// Runs the timers that are due of every group, and sends what the input taken in since
    /// the last call caused; how many groups had work.
    fn step(&self, engine: &Engine, ep: &Endpoint, _now: Instant) -> usize {
        let groups = self.groups.lock().expect("groups lock");
        let mut work = 0;
        for g in groups.iter() {
            let mut st = g.lock();
            let now = engine.now();
            let due = st.m.poll_timeout().is_some_and(|t| t <= now);
            if due {
                st.m.handle_timeout(now);
            }
            if due || g.dirty.swap(false, std::sync::atomic::Ordering::Relaxed) {
                flush(engine, ep, g, &mut st);
                work += 1;
            }
        }
        work
    }

    fn next_deadline(&self) -> Option<Instant> {
        let groups = self.groups.lock().expect("groups lock");
        groups
            .iter()
            .filter_map(|g| g.lock().m.poll_timeout())
            .min()
    }

    /// Tells every group with a member at `to` that its port is unreachable.
    fn unreachable(&self, engine: &Engine, ep: &Endpoint, to: std::net::SocketAddr) {
        let groups = self.groups.lock().expect("groups lock");
        for g in groups.iter() {
            let mut st = g.lock();
            let now = engine.now();
            let gone: Vec<Address> =
                st.m.members()
                    .iter()
                    .copied()
                    .filter(|&a| engine.socket_addr(a).is_ok_and(|s| s == to))
                    .collect();
            for a in gone {
                tracing::debug!(port = %ep.addr, group = g.id, member = %a, "member's port reported unreachable");
                st.m.peer_unreachable(now, a);
                g.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// A port's membership in a group.
pub struct Group {
    shared: Arc<GroupShared>,
    engine: Engine,
    ep: Arc<Endpoint>,
}

impl Group {
    pub(crate) fn start(
        engine: &Engine,
        ep: &Arc<Endpoint>,
        spec: GroupSpec,
        contact: Option<Address>,
    ) -> Result<Group, GroupCallError> {
        let max = GROUP_PACKET_BYTES_MAX - PACKET_OVERHEAD;
        if spec.packet_bytes_max() > max {
            return Err(GroupCallError::PacketTooLong { max });
        }
        let now = engine.now();
        let id = spec.id();
        let buf = vec![0u8; spec.packet_bytes_max()];
        let m = spec.start(ep.addr, contact, now)?;
        let shared = Arc::new(GroupShared {
            id,
            state: Mutex::new(GroupState {
                m,
                done_upto: 0,
                events: VecDeque::new(),
                joined: contact.is_none(),
                join_failed: false,
                left: false,
                expelled: false,
                buf,
                pkt: vec![0u8; GROUP_PACKET_BYTES_MAX],
                to: Vec::new(),
                out: crate::mmsg::SendBatch::new(),
                sleepers: 0,
                logged_epoch: Epoch::default(),
                retransmits_checked_at: 0,
                retransmits_seen: 0,
            }),
            cond: Condvar::new(),
            dirty: std::sync::atomic::AtomicBool::new(false),
        });
        {
            let table = GroupTable::of(ep).map_err(GroupCallError::Service)?;
            let mut groups = table.groups.lock().expect("groups lock");
            if groups.len() >= GROUPS_PER_PORT_MAX || groups.iter().any(|g| g.id == id) {
                return Err(GroupCallError::TooManyGroups);
            }
            groups.push(shared.clone());
        }
        let g = Group {
            shared,
            engine: engine.clone(),
            ep: ep.clone(),
        };
        {
            let mut st = g.shared.lock();
            flush(&g.engine, &g.ep, &g.shared, &mut st);
        }
        Ok(g)
    }

    /// Waits (at most `timeout`) until `done` holds, driving the engine when it has no thread.
    fn wait_until<R>(
        &self,
        timeout: Option<Duration>,
        mut done: impl FnMut(&mut GroupState) -> Option<R>,
    ) -> Result<R, GroupCallError> {
        let deadline = timeout.map(deadline_after);
        let invoker = self.engine.is_invoker();
        // Invoker mode polls the sockets only when a sleep on their epoll set said one has
        // traffic: a poll before that would nearly always find nothing (this call was just
        // made, or what the last read brought was looked at), and the sleep ends at once if
        // traffic waits. (A sleep in a read of the socket takes the datagram in itself.)
        let mut readable = false;
        // Invoker mode: a group's waits park at once (their sleep on the sockets is what
        // takes the traffic in).
        let mut backoff = Backoff::park_at_once();
        let mut st = self.shared.lock();
        loop {
            if let Some(r) = done(&mut st) {
                return Ok(r);
            }
            if st.expelled {
                return Err(GroupCallError::Expelled);
            }
            // An invoker's sleep is bounded as the engine thread's park is (and is woken
            // early, as that is, when another thread arms an earlier timer).
            let mut wait = if invoker {
                crate::engine::PARK_MAX
            } else {
                Duration::from_millis(100)
            };
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Err(GroupCallError::Timeout);
                }
                wait = wait.min(left);
            }
            if invoker {
                // No engine thread: this thread reads the sockets and runs the timers, and
                // sleeps on the sockets when there is nothing to do.
                drop(st);
                let work = self
                    .engine
                    .duty_cycle_after_sleep(std::mem::take(&mut readable));
                if work > 0 {
                    backoff.reset();
                } else if backoff.idle(None) == Idle::Park {
                    readable = self.engine.invoker_sleep(wait, &self.ep);
                }
                st = self.shared.lock();
                continue;
            }
            st.sleepers += 1;
            st = self
                .shared
                .cond
                .wait_timeout(st, wait)
                .expect("group lock")
                .0;
            st.sleepers -= 1;
        }
    }

    /// Waits until this member is in the group (after [`crate::Port::join_group_async`]).
    pub fn wait_joined(&self, timeout: Option<Duration>) -> Result<(), GroupCallError> {
        self.wait_until(timeout, |st| {
            if st.join_failed {
                return Some(Err(GroupCallError::JoinFailed));
            }
            st.joined.then_some(Ok(()))
        })?
    }

    /// `SendToGroup`: orders `msg` and returns once this member has delivered it, which is
    /// after r members besides the sequencer hold it. Returns the message's id.
    pub fn send(&self, msg: &[u8], timeout: Option<Duration>) -> Result<u64, GroupCallError> {
        let id = self.send_async(msg)?;
        self.wait_sent(id, timeout)?;
        Ok(id)
    }

    /// Queues `msg` and returns its id at once; [`Group::wait_sent`] waits for it.
    pub fn send_async(&self, msg: &[u8]) -> Result<u64, GroupCallError> {
        let mut st = self.shared.lock();
        let now = self.engine.now();
        let id = st.m.send(now, msg)?;
        flush(&self.engine, &self.ep, &self.shared, &mut st);
        Ok(id)
    }

    /// Waits until message `msg_id` of ours is delivered here.
    pub fn wait_sent(&self, msg_id: u64, timeout: Option<Duration>) -> Result<(), GroupCallError> {
        self.wait_until(timeout, |st| (st.done_upto >= msg_id).then_some(()))
    }

    /// Messages of ours not yet delivered here.
    pub fn sends_pending(&self) -> usize {
        self.shared.lock().m.sends_pending()
    }

    /// `ReceiveFromGroup`: the next record of the ordered stream (messages, joins, leaves,
    /// rebuilds), waiting at most `timeout`.
    pub fn receive(&self, timeout: Option<Duration>) -> Result<GroupDelivery, GroupCallError> {
        let r = self.wait_until(timeout, |st| {
            st.m.take_delivery(|d| GroupDelivery {
                seq: d.seq,
                sender: d.sender,
                what: match d.what {
                    Delivered::Message { msg_id, payload } => GroupRecord::Message {
                        msg_id,
                        payload: payload.to_vec(),
                    },
                    Delivered::Joined(a) => GroupRecord::Joined(a),
                    Delivered::Left(a) => GroupRecord::Left(a),
                    Delivered::Rebuilt {
                        epoch,
                        members,
                        removed,
                    } => GroupRecord::Rebuilt {
                        epoch,
                        members,
                        removed,
                    },
                },
            })
        })?;
        // Consuming may let the member report progress (and the group trim).
        let mut st = self.shared.lock();
        flush(&self.engine, &self.ep, &self.shared, &mut st);
        Ok(r)
    }

    /// The next record if one is waiting, handed to `f` without copying its payload.
    pub fn try_receive_with<R>(
        &self,
        f: impl FnOnce(txcast_proto::group::Delivery<'_>) -> R,
    ) -> Option<R> {
        let mut st = self.shared.lock();
        if self.engine.is_invoker() && !st.m.has_delivery() {
            // No engine thread: the caller's polls are what reads the network (only when
            // nothing is waiting here already, which saves a read per record drained).
            drop(st);
            self.engine.duty_cycle();
            st = self.shared.lock();
        }
        let r = st.m.take_delivery(f);
        if r.is_some() {
            flush(&self.engine, &self.ep, &self.shared, &mut st);
        }
        r
    }

    /// `LeaveGroup`: returns once the leave record is delivered here.
    pub fn leave(&self, timeout: Option<Duration>) -> Result<(), GroupCallError> {
        {
            let mut st = self.shared.lock();
            let now = self.engine.now();
            st.m.leave(now)?;
            flush(&self.engine, &self.ep, &self.shared, &mut st);
        }
        self.wait_until(timeout, |st| st.left.then_some(()))
    }

    /// `ResetGroup`: rebuilds the group from the members that answer, needing at least
    /// `min_members` of them; waits until the group works again (or the timeout).
    pub fn reset(
        &self,
        min_members: MinMembers,
        timeout: Option<Duration>,
    ) -> Result<(), GroupCallError> {
        {
            let mut st = self.shared.lock();
            let now = self.engine.now();
            // (The layered stack rebuilds its views by itself: nothing to start.)
            st.m.reset(now, min_members)?;
            flush(&self.engine, &self.ep, &self.shared, &mut st);
        }
        self.wait_until(timeout, |st| (st.m.state() == State::Normal).then_some(()))
    }

    /// `GetInfoGroup`: view, members, sequencer, sequence numbers, counters.
    pub fn info(&self) -> GroupInfo {
        let now = self.engine.now();
        self.shared.lock().m.info(now)
    }

    /// Completions and failures since the last call (joins, leaves, failures detected,
    /// failed rebuilds, expulsion); at most the last 256.
    pub fn events(&self) -> Vec<GroupEvent> {
        self.shared.lock().events.drain(..).collect()
    }

    pub fn id(&self) -> GroupId {
        self.shared.id
    }

    /// The application's word that `member`'s process is gone (another port of that process
    /// was reported unreachable, say): taken as a "port unreachable" report of the member's
    /// own port, so the member is suspected once silent for the stack's
    /// `unreachable_silence`, unless heard from first. It is not authenticated, so it only
    /// shortens the silence; an address that is not a member is ignored.
    pub fn member_unreachable(&self, member: Address) {
        let now = self.engine.now();
        self.shared.lock().m.peer_unreachable(now, member);
        self.shared
            .dirty
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let id = self.shared.id;
        if let Some(table) = self.ep.extensions.get::<GroupTable>() {
            table
                .groups
                .lock()
                .expect("groups lock")
                .retain(|g| g.id != id);
        }
    }
}
