//! The replication controller's views: which sites take part in transactions, agreed by a
//! majority of all sites, and the snapshot that makes every member's copy the same.
//!
//! A view change:
//! 1. A proposer (a member that suspects another, a member that heard a site ask to join,
//!    or, when no view is live, a site out of every view that heard from a majority) sends
//!    `PROPOSE` with a ballot above every one it has heard of, and the members it proposes
//!    (a majority of all sites, itself among them).
//! 2. A site promises a ballot above its promise: it writes a promise record, stops
//!    preparing for its current view, and once the record is durable answers `PROMISE` with
//!    the ballot its copy is synced to; a smaller ballot gets `NACK`.
//! 3. With every member's promise the proposer picks the donor, a member whose copy is
//!    synced to the latest view among them, and sends `INSTALL`. Two majorities share a
//!    site, and nothing commits in a view unless every member synced to it voted, so the
//!    latest view anything committed in is never older than the donor's.
//! 4. A member installs: the old view's transactions end (prepares dropped, its own attempts
//!    not decided retried, its decided ones resolved by the donor's copy). The donor's copy
//!    is the new view's: it keeps a snapshot of it (the lists of the old view's transactions
//!    applied there and in doubt there, then the image) and goes on; every other member
//!    pulls the snapshot in chunks, takes it, writes it to its log as an image, and goes on.
//!    A member whose copy has the fingerprint the donor sent (when the proposer is the
//!    donor, it installs first) keeps its copy instead. A client was told of a commit only
//!    once every member held it durably, so the donor has every one.
//! 5. A view is complete once every member's copy is durably synced to it (`SYNCED`): every
//!    later view's donor then descends from it. An old view's commit that the donor's copy
//!    has is answered only then (a view may be installed at some members and never at
//!    others, when a higher ballot took them first: its donor's copy is then no one's).
//!
//! Sites at ballot 0 (nothing ever committed) hold the same copy, so the first view needs no
//! snapshot. View messages naming a site the database does not have are dropped.

use super::*;
use crate::msg::CHUNK;
use txcast_proto::codec::Reader;

/// A view: its ballot and its members, each in the incarnation that took part.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub ballot: u64,
    pub members: Vec<Member>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// In no view: asks to join.
    Out,
    /// A member pulling the donor's snapshot.
    Syncing,
    /// A member with the view's copy.
    Normal,
}

pub(super) struct Proposal {
    ballot: u64,
    members: Vec<Member>,
    promised: u64,
    synced: Vec<(u16, u64)>,
    /// Set once every member promised: the donor, its synced ballot, and its copy's
    /// fingerprint when the donor is this site (it installs first).
    donor: Option<(u16, u64)>,
    fingerprint: Option<u64>,
    installed: u64,
    deadline: Instant,
}

/// An `INSTALL` as received.
pub(super) struct Install {
    pub ballot: u64,
    pub donor: u16,
    pub synced: u64,
    pub fingerprint: Option<u64>,
    pub members: Vec<Member>,
}

pub(super) struct Sync {
    ballot: u64,
    donor: u16,
    total: Option<usize>,
    buf: Vec<u8>,
    got: Vec<bool>,
    left: usize,
    /// Chunks asked for and when.
    asked: BTreeMap<u32, Instant>,
    next: u32,
    progress: Instant,
}

impl Site {
    fn me(&self) -> Member {
        Member {
            site: self.cfg.site,
            incarnation: self.cfg.incarnation,
        }
    }

    /// Whether every member named is a site of this database (a view from the network may
    /// name any site number the format allows).
    fn valid_members(&mut self, members: &[Member]) -> bool {
        let ok = members.iter().all(|m| m.site < self.cfg.sites);
        if !ok {
            self.counters.dropped_malformed += 1;
        }
        ok
    }

    fn majority(&self) -> usize {
        self.cfg.sites as usize / 2 + 1
    }

    /// A ballot above every one heard of: a round and this site.
    fn next_ballot(&self) -> u64 {
        let hi = self.promised.max(self.view.ballot).max(self.seen) >> 16;
        ((hi + 1) << 16) | self.cfg.site as u64
    }

    /// The most a snapshot can be: the applied list at its bound, and the image.
    fn snapshot_max(&self) -> usize {
        let sc = self.cfg.scale;
        let tuples = sc.branches as usize
            * (1 + sc.tellers_per_branch as usize + sc.accounts_per_branch as usize);
        let list = self.cfg.prepared_max + self.cfg.coordinated_max;
        8 + list * crate::msg::TXN_BYTES
            + 8 * tuples
            + 28
            + sc.history_rows as usize * crate::db::HISTORY_BYTES
    }

    /// When the view machinery next needs a step.
    pub(super) fn view_due(&self) -> Option<Instant> {
        let busy = self.phase != Phase::Normal
            || self.proposal.is_some()
            || self.join_due.is_some()
            || self.promised > self.view.ballot
            || !self.view_complete();
        if busy {
            Some(self.view_at)
        } else {
            Some(self.gossip_at)
        }
    }

    fn soon(&mut self, at: Instant) {
        self.view_at = self.view_at.min(at);
    }

    /// Proposes a view of `members` (this site among them, a majority of all sites).
    pub(super) fn propose(&mut self, now: Instant, mut members: Vec<Member>) {
        members.sort();
        members.dedup_by_key(|m| m.site);
        let me = self.me();
        if self.broken || !members.contains(&me) || members.len() < self.majority() {
            return;
        }
        let ballot = self.next_ballot();
        self.seen = ballot;
        self.counters.proposals += 1;
        for m in &members {
            self.send(
                m.site,
                &Msg::Propose {
                    ballot,
                    members: members.clone(),
                },
            );
        }
        self.proposal = Some(Proposal {
            ballot,
            members,
            promised: 0,
            synced: Vec::new(),
            donor: None,
            fingerprint: None,
            installed: 0,
            deadline: now + self.cfg.view_timeout,
        });
        self.soon(now + self.cfg.resend);
    }

    /// Sites in `set` did not answer in time: a view without them, if this site may
    /// propose one now.
    pub(super) fn suspect(&mut self, now: Instant, set: u64) {
        let set = set & !bit(self.cfg.site);
        if set == 0 {
            return;
        }
        self.counters.suspicions += set.count_ones() as u64;
        if self.phase == Phase::Out || self.promised != self.view.ballot || self.proposal.is_some()
        {
            return;
        }
        let members: Vec<Member> = self
            .view
            .members
            .iter()
            .copied()
            .filter(|m| set & bit(m.site) == 0)
            .collect();
        self.propose(now, members);
    }

    pub(super) fn on_propose(
        &mut self,
        now: Instant,
        from: Header,
        ballot: u64,
        members: Vec<Member>,
    ) {
        if !self.valid_members(&members) {
            return;
        }
        // A ballot names its proposer in its low 16 bits (`next_ballot`), and the promise
        // goes back to that site: a proposal of a ballot not its sender's is malformed.
        if (ballot & 0xffff) != from.site as u64 {
            self.counters.dropped_malformed += 1;
            return;
        }
        self.seen = self.seen.max(ballot);
        if self.broken || !members.contains(&self.me()) {
            self.counters.dropped_view += 1;
            return;
        }
        if ballot < self.promised {
            let promised = self.promised;
            return self.send(from.site, &Msg::Nack { ballot, promised });
        }
        if ballot == self.promised {
            // Asked again: answered again once the promise is durable.
            if ballot != self.view.ballot && self.promise_lsn <= self.durable {
                let synced = self.synced;
                self.send(from.site, &Msg::Promise { ballot, synced });
            }
            return;
        }
        self.promised = ballot;
        self.fenced_at = now;
        if self.proposal.as_ref().is_some_and(|p| p.ballot < ballot) {
            self.proposal = None;
        }
        self.append(Record::Promise(ballot), Some(LogWait::Promise(ballot)));
        self.promise_lsn = self.lsn;
        self.soon(now + self.cfg.resend);
    }

    pub(super) fn promise_durable(&mut self, _now: Instant, ballot: u64) {
        if ballot == self.promised {
            let synced = self.synced;
            self.send((ballot & 0xffff) as u16, &Msg::Promise { ballot, synced });
        }
    }

    pub(super) fn on_promise(&mut self, now: Instant, from: Header, ballot: u64, synced: u64) {
        if self.broken {
            return;
        }
        let Some(p) = self.proposal.as_mut() else {
            return;
        };
        let member = Member {
            site: from.site,
            incarnation: from.incarnation,
        };
        if p.ballot != ballot || p.donor.is_some() || !p.members.contains(&member) {
            return;
        }
        if p.promised & bit(from.site) == 0 {
            p.promised |= bit(from.site);
            p.synced.push((from.site, synced));
        }
        if p.synced.len() < p.members.len() {
            return;
        }
        // The donor: synced to the latest view; this site if it is, else the lowest.
        let best = p.synced.iter().map(|&(_, b)| b).max().unwrap_or(0);
        let me = self.cfg.site;
        let donor = if p.synced.contains(&(me, best)) {
            me
        } else {
            p.synced
                .iter()
                .filter(|&&(_, b)| b == best)
                .map(|&(s, _)| s)
                .min()
                .unwrap_or(me)
        };
        p.donor = Some((donor, best));
        p.deadline = now + self.cfg.view_timeout;
        let members = p.members.clone();
        // The donor installs before it sends, so the install carries its copy's fingerprint.
        let fingerprint = if donor == me {
            let f = self.install(now, ballot, donor, best, None, members.clone());
            if let Some(p) = self.proposal.as_mut() {
                p.installed |= bit(me);
                p.fingerprint = f;
            }
            f
        } else {
            None
        };
        let msg = Msg::Install {
            ballot,
            donor,
            synced: best,
            fingerprint,
            members: members.clone(),
        };
        for m in members {
            if !(donor == me && m.site == me) {
                self.send(m.site, &msg);
            }
        }
    }

    pub(super) fn on_nack(&mut self, _now: Instant, ballot: u64, promised: u64) {
        self.seen = self.seen.max(promised);
        if self.proposal.as_ref().is_some_and(|p| p.ballot == ballot) {
            self.proposal = None;
        }
    }

    pub(super) fn on_install(&mut self, now: Instant, from: Header, i: Install) {
        let Install {
            ballot,
            donor,
            synced: donor_synced,
            fingerprint,
            members,
        } = i;
        if self.broken || !self.valid_members(&members) {
            return;
        }
        if ballot == self.view.ballot && self.phase != Phase::Out {
            return self.send(from.site, &Msg::Installed { ballot });
        }
        if ballot != self.promised
            || !members.contains(&self.me())
            || !members.iter().any(|m| m.site == donor)
        {
            self.counters.dropped_view += 1;
            return;
        }
        self.install(now, ballot, donor, donor_synced, fingerprint, members);
        self.send(from.site, &Msg::Installed { ballot });
    }

    /// Installs the view of `ballot`: everything of the old view ends here (see the module).
    /// The donor returns its copy's fingerprint.
    fn install(
        &mut self,
        now: Instant,
        ballot: u64,
        donor: u16,
        donor_synced: u64,
        donor_fingerprint: Option<u64>,
        members: Vec<Member>,
    ) -> Option<u64> {
        let me = self.cfg.site;
        let am_donor = donor == me;
        self.counters.views += 1;
        // The donor's list: the old view's transactions its copy has (its own decided ones,
        // applied when their record was appended, and those it applied as participant).
        let mut applied: Vec<TxnId> = Vec::new();
        let mut doubt: Vec<TxnId> = Vec::new();
        if am_donor {
            doubt.extend(
                self.parts
                    .iter()
                    .filter(|(_, p)| matches!(p.phase, PPhase::Logging | PPhase::Voted))
                    .map(|(t, _)| *t),
            );
            doubt.sort();
            applied.extend(
                self.coord
                    .iter()
                    .filter(|(_, c)| matches!(c.phase, CPhase::Committing | CPhase::Resolving))
                    .map(|(t, _)| *t),
            );
            applied.extend(
                self.parts
                    .iter()
                    .filter(|(_, p)| matches!(p.phase, PPhase::Acking | PPhase::Applied))
                    .map(|(t, _)| *t),
            );
            applied.sort();
        }
        self.parts.clear();
        self.locks = LockTable::new();
        let txns: Vec<TxnId> = self.coord.keys().copied().collect();
        for txn in txns {
            let c = self.coord.get_mut(&txn).expect("listed");
            match c.phase {
                CPhase::Locking | CPhase::Voting => {
                    let c = self.coord.remove(&txn).expect("listed");
                    self.retry(now, c.client, Cause::View);
                }
                CPhase::Committing | CPhase::Resolving if am_donor => {
                    // In the donor's copy (applied when its record was appended, or taken
                    // with a snapshot that had it): committed once this view is complete.
                    c.phase = CPhase::Resolving;
                    c.resolve = ballot;
                    c.known = true;
                }
                CPhase::Committing => {
                    c.phase = CPhase::Resolving;
                    c.resolve = ballot;
                }
                CPhase::Resolving => {
                    // Its outcome was the previous donor's, never received, or that view never
                    // completed: this donor's copy may or may not descend from it.
                    let c = self.coord.remove(&txn).expect("listed");
                    self.counters.unknown += 1;
                    self.events.push_back(Event::Unknown {
                        tag: c.client.tag,
                        attempts: c.client.attempts,
                    });
                }
            }
        }
        self.view = View { ballot, members };
        self.complete = 0;
        self.installed_at = now;
        self.join_due = None;
        if self.proposal.as_ref().is_some_and(|p| p.ballot < ballot) {
            self.proposal = None;
        }
        self.sync = None;
        self.snapshot = None;
        // A member whose copy is the donor's (the same fingerprint) needs no snapshot: its
        // commits under way are in the donor's copy as they are in its own.
        let same = !am_donor && donor_fingerprint.is_some_and(|f| f == self.db.fingerprint());
        if same {
            self.counters.snapshots_spared += 1;
            for c in self.coord.values_mut() {
                if c.phase == CPhase::Resolving && c.resolve == ballot {
                    c.known = true;
                }
            }
        }
        let mut fingerprint = None;
        if am_donor || same || (donor_synced == 0 && self.synced == 0) {
            // The donor's copy (or, before anything ever committed, every copy) is the
            // view's.
            if am_donor {
                fingerprint = Some(self.db.fingerprint());
                let mut blob = Vec::new();
                let mut w = Writer::new(&mut blob);
                for list in [&applied, &doubt] {
                    w.u32(list.len() as u32);
                    for t in list {
                        w.u16(t.site).u32(t.incarnation).u64(t.seq);
                    }
                }
                self.db.encode_image(&mut blob);
                self.snapshot = Some((ballot, blob));
                self.counters.donated += 1;
            }
            self.synced = ballot;
            self.append(Record::Synced(ballot), Some(LogWait::Synced(ballot)));
            self.phase = Phase::Normal;
        } else {
            self.phase = Phase::Syncing;
            self.sync = Some(Sync {
                ballot,
                donor,
                total: None,
                buf: Vec::new(),
                got: Vec::new(),
                left: usize::MAX,
                asked: BTreeMap::new(),
                next: 0,
                progress: now,
            });
            self.ask_chunks(now);
        }
        self.soon(now + self.cfg.resend);
        fingerprint
    }

    pub(super) fn on_installed(&mut self, _now: Instant, from: Header, ballot: u64) {
        let Some(p) = self.proposal.as_mut() else {
            return;
        };
        if p.ballot != ballot || p.donor.is_none() {
            return;
        }
        p.installed |= bit(from.site);
        let all = p.members.iter().fold(0, |a, m| a | bit(m.site));
        if p.installed & all == all {
            self.proposal = None;
        }
    }

    pub(super) fn on_join(&mut self, now: Instant, from: Header, synced: u64) {
        self.joins[from.site as usize] = Some((from.incarnation, synced, now));
        if self.phase != Phase::Normal {
            return;
        }
        self.tell_view(now, from.site);
        if self.is_member(from) && now < self.installed_at + self.cfg.view_timeout {
            // Still taking the install it was sent.
            return;
        }
        if self.join_due.is_none() {
            let rank = self
                .view
                .members
                .iter()
                .position(|m| m.site == self.cfg.site)
                .unwrap_or(0) as u64;
            let due = now + Duration::from_nanos(self.cfg.resend.as_nanos() as u64 * rank);
            self.join_due = Some(due);
            self.soon(due);
        }
    }

    /// Tells `to` this site's view (at most once per resend interval).
    pub(super) fn tell_view(&mut self, now: Instant, to: u16) {
        if now < self.told[to as usize] + self.cfg.resend && self.told[to as usize] != Instant::ZERO
        {
            return;
        }
        self.told[to as usize] = now;
        let msg = Msg::View {
            ballot: self.view.ballot,
            members: self.view.members.clone(),
        };
        self.send(to, &msg);
    }

    pub(super) fn on_view(
        &mut self,
        now: Instant,
        from: Header,
        ballot: u64,
        members: Vec<Member>,
    ) {
        if !self.valid_members(&members) {
            return;
        }
        self.seen = self.seen.max(ballot);
        let live = members
            .iter()
            .any(|m| m.site == from.site && m.incarnation == from.incarnation);
        if !live {
            return;
        }
        if ballot < self.view.ballot && self.phase != Phase::Out {
            // The sender is behind: it learns this view.
            return self.tell_view(now, from.site);
        }
        if !members.contains(&self.me()) {
            if self.phase == Phase::Out {
                self.live_seen = Some(now);
            } else if ballot > self.view.ballot {
                self.go_out(now);
                self.live_seen = Some(now);
            }
        } else if ballot > self.view.ballot
            && self.phase != Phase::Out
            && now >= self.fenced_at + self.cfg.view_timeout
        {
            // A view with this site that it never installed (its install was lost): out,
            // and in again through a view change.
            self.go_out(now);
        }
    }

    /// This site is in no live view: what was under way ends, and it asks to join.
    fn go_out(&mut self, now: Instant) {
        self.counters.left_out += 1;
        self.phase = Phase::Out;
        self.join_due = None;
        self.out_since = now;
        self.sync = None;
        self.snapshot = None;
        self.proposal = None;
        self.parts.clear();
        self.locks = LockTable::new();
        let txns: Vec<TxnId> = self.coord.keys().copied().collect();
        for txn in txns {
            let c = &self.coord[&txn];
            match c.phase {
                CPhase::Locking | CPhase::Voting => {
                    let c = self.coord.remove(&txn).expect("listed");
                    self.retry(now, c.client, Cause::View);
                }
                CPhase::Committing | CPhase::Resolving => {
                    let c = self.coord.remove(&txn).expect("listed");
                    self.counters.unknown += 1;
                    self.events.push_back(Event::Unknown {
                        tag: c.client.tag,
                        attempts: c.client.attempts,
                    });
                }
            }
        }
        self.view_at = now;
    }

    pub(super) fn on_snap_get(&mut self, from: Header, ballot: u64, offset: u32) {
        let Some((b, blob)) = &self.snapshot else {
            return;
        };
        let offset = offset as usize;
        if *b != ballot
            || ballot != self.view.ballot
            || !self.is_member(from)
            || !offset.is_multiple_of(CHUNK)
            || offset >= blob.len()
        {
            self.counters.dropped_view += 1;
            return;
        }
        let msg = Msg::SnapData {
            ballot,
            offset: offset as u32,
            total: blob.len() as u32,
            data: blob[offset..blob.len().min(offset + CHUNK)].to_vec(),
        };
        self.send(from.site, &msg);
    }

    /// Asks the donor for chunks up to the window.
    fn ask_chunks(&mut self, now: Instant) {
        let window = self.cfg.sync_window.max(1);
        let Some(s) = self.sync.as_mut() else {
            return;
        };
        let chunks = s.total.map(|t| t.div_ceil(CHUNK) as u32);
        let mut asks = Vec::new();
        while s.asked.len() < window && chunks.is_none_or(|n| s.next < n) {
            if chunks.is_none() && s.next > 0 {
                // Only the first chunk until the size is known.
                break;
            }
            let offset = s.next * CHUNK as u32;
            s.next += 1;
            if s.got
                .get((offset as usize) / CHUNK)
                .copied()
                .unwrap_or(false)
            {
                continue;
            }
            s.asked.insert(offset, now);
            asks.push(offset);
        }
        let (ballot, donor) = (s.ballot, s.donor);
        for offset in asks {
            self.send(donor, &Msg::SnapGet { ballot, offset });
        }
    }

    pub(super) fn on_snap_data(
        &mut self,
        now: Instant,
        from: Header,
        ballot: u64,
        offset: u32,
        total: u32,
        data: Vec<u8>,
    ) {
        let max = self.snapshot_max();
        let Some(s) = self.sync.as_mut() else {
            return;
        };
        if s.ballot != ballot || s.donor != from.site || self.phase != Phase::Syncing {
            self.counters.dropped_view += 1;
            return;
        }
        let total = total as usize;
        match s.total {
            None => {
                if total > max {
                    self.counters.dropped_malformed += 1;
                    return;
                }
                s.total = Some(total);
                s.buf = vec![0; total];
                let n = total.div_ceil(CHUNK);
                s.got = vec![false; n];
                s.left = n;
            }
            Some(t) if t != total => {
                self.counters.dropped_malformed += 1;
                return;
            }
            Some(_) => {}
        }
        let i = offset as usize / CHUNK;
        s.asked.remove(&offset);
        if !s.got[i] {
            s.got[i] = true;
            s.left -= 1;
            s.buf[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
            s.progress = now;
            self.counters.snapshot_chunks += 1;
        }
        if s.left == 0 {
            self.snapshot_loaded(now);
        } else {
            self.ask_chunks(now);
        }
    }

    /// The whole snapshot is here: the copy replaced, the old view's commits of this
    /// site's resolved by the donor's list, the image written to the log.
    fn snapshot_loaded(&mut self, now: Instant) {
        let s = self.sync.take().expect("syncing");
        let list_max = self.cfg.prepared_max + self.cfg.coordinated_max;
        let parsed = (|| -> Result<([Vec<TxnId>; 2], usize, Db), String> {
            let mut r = Reader::new(&s.buf);
            let mut lists = [Vec::new(), Vec::new()];
            for list in lists.iter_mut() {
                let n = r.u32().map_err(|e| e.to_string())? as usize;
                if n > list_max {
                    return Err(format!("a list of {n} transactions"));
                }
                for _ in 0..n {
                    list.push(TxnId {
                        site: r.u16().map_err(|e| e.to_string())?,
                        incarnation: r.u32().map_err(|e| e.to_string())?,
                        seq: r.u64().map_err(|e| e.to_string())?,
                    });
                }
            }
            let at = s.buf.len() - r.left();
            let db = Db::decode_image(self.cfg.scale, &s.buf[at..]).map_err(|e| e.to_string())?;
            Ok((lists, at, db))
        })();
        let ([list, doubt], at, db) = match parsed {
            Ok(x) => x,
            Err(_) => {
                // A donor's snapshot that does not decode: a view without that donor.
                self.counters.dropped_malformed += 1;
                self.phase = Phase::Normal;
                self.suspect(now, bit(s.donor));
                self.phase = Phase::Syncing;
                return;
            }
        };
        self.db = db;
        let txns: Vec<TxnId> = self.coord.keys().copied().collect();
        for txn in txns {
            let c = self.coord.get_mut(&txn).expect("listed");
            if c.phase != CPhase::Resolving || c.known || c.resolve != s.ballot {
                continue;
            }
            if list.binary_search(&txn).is_ok() {
                c.known = true;
            } else if doubt.binary_search(&txn).is_ok() {
                // Prepared, not applied, at the donor: never in the view's copy.
                let c = self.coord.remove(&txn).expect("listed");
                self.retry(now, c.client, Cause::View);
            } else {
                // The donor cannot tell (its copy came from a restart or another snapshot):
                // in every copy or in none, and not retried.
                let c = self.coord.remove(&txn).expect("listed");
                self.counters.unknown += 1;
                self.events.push_back(Event::Unknown {
                    tag: c.client.tag,
                    attempts: c.client.attempts,
                });
            }
        }
        let image = s.buf[at..].to_vec();
        self.append(Record::Image(image), None);
        self.synced = s.ballot;
        self.append(Record::Synced(s.ballot), Some(LogWait::Synced(s.ballot)));
        self.phase = Phase::Normal;
        self.counters.snapshots += 1;
    }

    /// This site's copy is durably synced to the view of `ballot`: the other members are
    /// told.
    pub(super) fn synced_durable(&mut self, now: Instant, ballot: u64) {
        if ballot != self.view.ballot || self.phase == Phase::Out {
            return;
        }
        self.complete |= bit(self.cfg.site);
        let missing = self.members_bits() & !self.complete;
        for s in sites_of(self.members_bits() & !bit(self.cfg.site)) {
            let ask = missing & bit(s) != 0;
            self.send(s, &Msg::Synced { ballot, ask });
        }
        self.maybe_complete(now);
    }

    fn members_bits(&self) -> u64 {
        self.view.members.iter().fold(0, |a, m| a | bit(m.site))
    }

    /// Whether every member of the view is durably synced to it.
    pub(super) fn view_complete(&self) -> bool {
        let all = self.members_bits();
        self.complete & all == all
    }

    pub(super) fn on_synced(&mut self, now: Instant, from: Header, ballot: u64, ask: bool) {
        if ballot != self.view.ballot || !self.is_member(from) {
            return;
        }
        self.complete |= bit(from.site);
        let me = bit(self.cfg.site);
        if ask && self.complete & me != 0 {
            self.send(from.site, &Msg::Synced { ballot, ask: false });
        }
        self.maybe_complete(now);
    }

    /// With the view complete, the old view's commits its copy has are answered.
    fn maybe_complete(&mut self, _now: Instant) {
        if !self.view_complete() {
            return;
        }
        let txns: Vec<TxnId> = self
            .coord
            .iter()
            .filter(|(_, c)| c.phase == CPhase::Resolving && c.known)
            .map(|(t, _)| *t)
            .collect();
        for txn in txns {
            let c = self.coord.get_mut(&txn).expect("listed");
            c.phase = CPhase::Committing;
            c.parts = 0;
            c.logged = true;
            self.maybe_finish(txn);
        }
    }

    /// Sites heard asking to join lately, as members.
    fn joiners(&self, now: Instant) -> Vec<Member> {
        let recent = self.cfg.view_timeout * 2;
        self.joins
            .iter()
            .enumerate()
            .filter_map(|(site, j)| {
                let (incarnation, _, at) = (*j)?;
                (now < at + recent && incarnation == self.peer_inc[site]).then_some(Member {
                    site: site as u16,
                    incarnation,
                })
            })
            .collect()
    }

    /// The view machinery's timers: joins asked for, chunks asked again, proposals sent
    /// again or given up, stalled view changes proposed again.
    pub(super) fn view_tick(&mut self, now: Instant) {
        self.view_at = now + self.cfg.resend;
        let vt = self.cfg.view_timeout;
        if self.phase != Phase::Out && now >= self.gossip_at {
            // Every site hears this member's view now and then: a site left behind in an
            // older view, or out of every view, learns it.
            self.gossip_at = now + vt;
            let msg = Msg::View {
                ballot: self.view.ballot,
                members: self.view.members.clone(),
            };
            for s in self.others().collect::<Vec<_>>() {
                self.send(s, &msg);
            }
        }
        if let Some(p) = self.proposal.as_mut() {
            if now >= p.deadline {
                let p = self.proposal.take().expect("some");
                if p.donor.is_none() {
                    // Those that promised, if still a majority.
                    let kept: Vec<Member> = p
                        .members
                        .iter()
                        .copied()
                        .filter(|m| p.promised & bit(m.site) != 0)
                        .collect();
                    if kept.len() < p.members.len() {
                        self.propose(now, kept);
                    }
                }
            } else {
                let (ballot, members) = (p.ballot, p.members.clone());
                let msg = match p.donor {
                    None => Msg::Propose {
                        ballot,
                        members: members.clone(),
                    },
                    Some((donor, synced)) => Msg::Install {
                        ballot,
                        donor,
                        synced,
                        fingerprint: p.fingerprint,
                        members: members.clone(),
                    },
                };
                let done = if p.donor.is_none() {
                    p.promised
                } else {
                    p.installed
                };
                for m in members {
                    if done & bit(m.site) == 0 && m.site != self.cfg.site {
                        self.send(m.site, &msg);
                    }
                }
            }
        }
        match self.phase {
            Phase::Out => {
                let synced = self.synced;
                for s in self.others().collect::<Vec<_>>() {
                    self.send(s, &Msg::Join { synced });
                }
                // No live view heard of: the sites out of every view that a majority of
                // them are form one (the lowest of them first, after waiting a little for
                // all of them).
                let live = self.live_seen.is_some_and(|t| now < t + vt);
                let mut cands = self.joiners(now);
                cands.push(self.me());
                cands.sort();
                let all = cands.len() == self.cfg.sites as usize;
                let rank = cands
                    .iter()
                    .position(|m| m.site == self.cfg.site)
                    .unwrap_or(0);
                let waited = now >= self.out_since + vt;
                let turn = now
                    >= self.out_since
                        + Duration::from_nanos(self.cfg.resend.as_nanos() as u64 * rank as u64);
                let fenced_wait = self.promised > self.view.ballot && now < self.fenced_at + vt;
                if !live
                    && self.proposal.is_none()
                    && !fenced_wait
                    && cands.len() >= self.majority()
                    && (all || waited)
                    && turn
                {
                    self.propose(now, cands);
                }
            }
            Phase::Syncing => {
                let resend = self.cfg.resend;
                let mut again = Vec::new();
                let mut stalled = None;
                if let Some(s) = self.sync.as_mut() {
                    for (&offset, at) in s.asked.iter_mut() {
                        if now >= *at + resend {
                            *at = now;
                            again.push(offset);
                        }
                    }
                    if now >= s.progress + vt {
                        s.progress = now;
                        stalled = Some(s.donor);
                    }
                    let (ballot, donor) = (s.ballot, s.donor);
                    for offset in again {
                        self.send(donor, &Msg::SnapGet { ballot, offset });
                    }
                }
                self.ask_chunks(now);
                if stalled.is_some() {
                    // The donor went away (a restart loses its snapshot): this copy is synced
                    // to no view, so the site is out, and joins again.
                    self.go_out(now);
                }
            }
            Phase::Normal => {
                if !self.view_complete() && self.complete & bit(self.cfg.site) != 0 {
                    let ballot = self.view.ballot;
                    for s in sites_of(self.members_bits() & !self.complete) {
                        self.send(s, &Msg::Synced { ballot, ask: true });
                    }
                }
                if self.join_due.is_some_and(|t| now >= t) {
                    self.join_due = None;
                    // Sites not in the view, and members that ask to join again well after
                    // the install (they went out: their snapshot stopped coming).
                    let settled = self.installed_at + vt;
                    let fresh: Vec<Member> = self
                        .joiners(now)
                        .into_iter()
                        .filter(|j| {
                            !self.view.members.contains(j)
                                || self.joins[j.site as usize]
                                    .is_some_and(|(_, _, at)| at >= settled)
                        })
                        .collect();
                    if !fresh.is_empty()
                        && self.proposal.is_none()
                        && self.promised == self.view.ballot
                    {
                        let mut members: Vec<Member> = self
                            .view
                            .members
                            .iter()
                            .copied()
                            .filter(|m| !fresh.iter().any(|j| j.site == m.site))
                            .collect();
                        members.extend(fresh);
                        self.propose(now, members);
                    }
                }
            }
        }
        // A view change promised here that never installed: propose again.
        if self.phase != Phase::Out
            && self.promised > self.view.ballot
            && self.proposal.is_none()
            && now >= self.fenced_at + vt
        {
            self.fenced_at = now;
            let mut members = self.view.members.clone();
            for j in self.joiners(now) {
                members.retain(|m| m.site != j.site);
                members.push(j);
            }
            self.propose(now, members);
        }
        if self.phase != Phase::Normal {
            self.join_due = None;
        }
        if let Some(d) = self.join_due {
            self.soon(d);
        }
        // Never due again at once.
        self.view_at = self.view_at.max(Instant(now.0 + 1));
    }
}
