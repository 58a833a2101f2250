//! A simulated disk log for the mirror simulator (`txcast sim crmem --disk`): what the
//! driver's writer thread (`txcast_crmem`'s `disklog.rs`) does, in virtual time. Items are
//! written in the order the primary's core ships them; a sync, a random while after the
//! first item waiting, makes every waiting item durable at once (group commit) and tells the
//! core the newest commit whose last part is on disk. A checkpoint is an item like a part:
//! durable, it replaces the log before it. A crash keeps what was synced and a random prefix
//! of what was not (the file's records are appended in order; a torn record and everything
//! after it is cut off when the log is read back).
//!
//! Every checkpoint carries the *term* of the primary that wrote it (the time it became
//! primary): after every node crashed, the disk with the highest term, then the highest
//! commit, is the one to restart from. A node opened as a backup keeps its directory (its
//! term is older than its primary's), so a primary's log lasts until a promoted successor's
//! checkpoint, of a higher term, is on disk.

use std::collections::VecDeque;
use txcast_crmem::msg::Msg;
use txcast_crmem::Node;
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;

/// A checkpoint: the commit number it covers and every segment's image.
pub(crate) type Checkpoint = (u64, Vec<Vec<u8>>);

/// Where a disk's log ends: its term, then the commits it restores.
pub(crate) type Position = (u64, u64);

enum Item {
    Part {
        seq: u64,
        last: bool,
        bytes: Vec<u8>,
    },
    Checkpoint(u64, Checkpoint),
}

/// One node's disk log directory.
#[derive(Default)]
pub(crate) struct SimDisk {
    /// The term of the durable checkpoint (0: the first primary's log, never checkpointed).
    term: u64,
    checkpoint: Option<Checkpoint>,
    /// Parts synced after the checkpoint, in order.
    log: Vec<Vec<u8>>,
    /// Written, not yet synced.
    waiting: VecDeque<Item>,
    sync_at: Option<Instant>,
    pub(crate) syncs: u64,
}

impl SimDisk {
    /// A part the core shipped to `DISK`; a sync is due within `max_ns` if none is.
    pub(crate) fn write(&mut self, rng: &mut Rng, now: Instant, bytes: Vec<u8>, max_ns: u64) {
        let Ok(Msg::Write(w)) = Msg::parse(&bytes) else {
            // The core ships WRITE parts only; anything else would be its bug.
            return;
        };
        let (seq, last) = (w.seq, w.part + 1 == w.parts);
        self.waiting.push_back(Item::Part { seq, last, bytes });
        self.arm(rng, now, max_ns);
    }

    /// A promoted backup's log base, of term `term`, written where it falls in the order.
    pub(crate) fn write_checkpoint(
        &mut self,
        rng: &mut Rng,
        now: Instant,
        term: u64,
        c: Checkpoint,
    ) {
        self.waiting.push_back(Item::Checkpoint(term, c));
        self.arm(rng, now, 2_000_000);
    }

    fn arm(&mut self, rng: &mut Rng, now: Instant, max_ns: u64) {
        if self.sync_at.is_none() {
            self.sync_at = Some(Instant(now.0 + 1 + rng.below(max_ns.max(1))));
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.sync_at
    }

    /// The sync, if due: every waiting item durable; the newest commit it covers for
    /// `Node::disk_synced`.
    pub(crate) fn sync_if_due(&mut self, now: Instant) -> Option<u64> {
        if self.sync_at.is_none_or(|t| t > now) {
            return None;
        }
        self.sync_at = None;
        self.syncs += 1;
        let mut newest = None;
        while let Some(i) = self.waiting.pop_front() {
            newest = newest.max(self.make_durable(i));
        }
        newest
    }

    fn make_durable(&mut self, i: Item) -> Option<u64> {
        match i {
            Item::Part { seq, last, bytes } => {
                self.log.push(bytes);
                last.then_some(seq)
            }
            Item::Checkpoint(term, c) => {
                let seq = c.0;
                self.term = term;
                self.checkpoint = Some(c);
                self.log.clear();
                Some(seq)
            }
        }
    }

    /// A checkpoint taken after a sync and synced at once (the driver's when the log grew
    /// past its bound): it replaces the log.
    pub(crate) fn checkpoint_now(&mut self, c: Checkpoint) {
        self.make_durable(Item::Checkpoint(self.term, c));
    }

    /// A crash: what was synced stays, with a random prefix of what was not.
    pub(crate) fn crash(&mut self, rng: &mut Rng) {
        let keep = rng.below(self.waiting.len() as u64 + 1) as usize;
        let kept: Vec<Item> = self.waiting.drain(..).take(keep).collect();
        for i in kept {
            self.make_durable(i);
        }
        self.sync_at = None;
    }

    /// Opens `node` (fresh, segments added) from this disk as the driver does for a
    /// primary: the checkpoint restored, the log replayed. An error names what refused.
    pub(crate) fn restore_into(&self, node: &mut Node) -> Result<Position, String> {
        if let Some((seq, images)) = &self.checkpoint {
            if !node.restore(*seq, images) {
                return Err("the checkpoint does not fit the segments".into());
            }
        }
        for (i, p) in self.log.iter().enumerate() {
            if !node.replay(p) {
                return Err(format!(
                    "the log breaks off at part {i} after commit {}",
                    node.seq()
                ));
            }
        }
        Ok((self.term, node.seq()))
    }
}
