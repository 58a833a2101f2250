//! Handing up: the events queued for the layer above (directs, flush and view events, and
//! the casts a commit hands up at once), then the streams' casts in turn.

use super::{Upcall, ViewChange, Vs};
use crate::addr::Address;
use std::collections::VecDeque;

/// Most directs waiting to be handed up.
const DIRECT_QUEUE_MAX: usize = 4096;

/// A queued upcall (casts are handed up from the streams, except at a view change).
#[derive(Debug)]
pub(super) enum Pending {
    Cast {
        sender: Address,
        seq: u64,
        payload: Vec<u8>,
    },
    Direct {
        from: Address,
        payload: Vec<u8>,
    },
    Flush,
    View(ViewChange),
    Left,
    Expelled,
    JoinFailed,
    Blocked {
        reachable: usize,
        needed: usize,
    },
}

/// What waits to be handed up besides the streams' next casts, and where the round-robin over
/// the streams stands.
#[derive(Debug, Default)]
pub(super) struct Delivery {
    pub(super) pending: VecDeque<Pending>,
    /// Round-robin position for handing casts up.
    pub(super) rr: usize,
}

impl Delivery {
    /// Queues a direct from `from` (dropped past [`DIRECT_QUEUE_MAX`]).
    pub(super) fn direct(&mut self, from: Address, payload: &[u8]) {
        if self.pending.len() < DIRECT_QUEUE_MAX {
            self.pending.push_back(Pending::Direct {
                from,
                payload: payload.to_vec(),
            });
        }
    }
}

impl Vs {
    /// Hands one upcall to `f`: queued events first, then the streams' next casts.
    pub fn poll_upcall<R>(&mut self, f: impl FnOnce(Upcall<'_>) -> R) -> Option<R> {
        if let Some(p) = self.delivery.pending.pop_front() {
            let r = match &p {
                Pending::Cast {
                    sender,
                    seq,
                    payload,
                } => f(Upcall::Cast {
                    sender: *sender,
                    seq: *seq,
                    payload,
                }),
                Pending::Direct { from, payload } => f(Upcall::Direct {
                    from: *from,
                    payload,
                }),
                Pending::Flush => f(Upcall::Flush),
                Pending::View(v) => f(Upcall::View(v.clone())),
                Pending::Left => f(Upcall::Left),
                Pending::Expelled => f(Upcall::Expelled),
                Pending::JoinFailed => f(Upcall::JoinFailed),
                Pending::Blocked { reachable, needed } => f(Upcall::Blocked {
                    reachable: *reachable,
                    needed: *needed,
                }),
            };
            return Some(r);
        }
        let n = self.streams.len();
        for k in 0..n {
            let i = (self.delivery.rr + k) % n;
            let limit = self.fl.deliver_limit(i).unwrap_or(u64::MAX);
            let s = &self.streams[i];
            if s.delivered < s.received && s.delivered < limit {
                let seq = s.delivered + 1;
                self.delivery.rr = (i + 1) % n;
                let s = &mut self.streams[i];
                s.delivered = seq;
                let sender = s.addr;
                let payload = s.held.get(seq).expect("held up to received");
                let r = f(Upcall::Cast {
                    sender,
                    seq,
                    payload,
                });
                if n == 1 {
                    // A group of one: nobody else reports, and what this member delivered
                    // everyone has. Stable once handed up, the last cast included (the
                    // window reopens, and the member ends with nothing unstable).
                    self.streams[i].set_stable(seq);
                }
                return Some(r);
            }
        }
        None
    }

    /// Whether [`Vs::poll_upcall`] has something.
    pub fn has_upcall(&self) -> bool {
        !self.delivery.pending.is_empty()
            || self.streams.iter().enumerate().any(|(i, s)| {
                s.delivered < s.received
                    && s.delivered < self.fl.deliver_limit(i).unwrap_or(u64::MAX)
            })
    }
}
