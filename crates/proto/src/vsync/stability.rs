//! Stability (paper 002 §3.1): how members learn which casts every member received, so the
//! held casts can be dropped and the window reopens. Piggyback: received vectors on data
//! messages, heartbeats and prompt reports; pinwheel: a token goes round the ranks collecting
//! the minimum.

use super::msg::{self, VsMsg};
use super::timer::Timer;
use super::{Dest, Stability, Vs, VsState};
use crate::pack::PackMode;
use crate::time::Instant;
use core::time::Duration;

/// The pinwheel token as this member last saw it.
#[derive(Clone, Debug)]
pub(super) struct Token {
    pub(super) round: u64,
    pub(super) acc: Vec<u64>,
    pub(super) stable: Vec<u64>,
}

/// Piggybacked stability: what the other members reported receiving, and what this member
/// told them.
#[derive(Debug, Default)]
pub(super) struct Reports {
    /// The last received vector each member reported (by rank).
    pub(super) received: Vec<Vec<u64>>,
    /// Casts received since this member last told the group its vector.
    pub(super) unreported: u64,
    /// For every stream (by rank), how far this member last told its owner it had received
    /// it (see [`Vs::poll_ack`]).
    pub(super) acked: Vec<u64>,
}

impl Reports {
    /// A new view of `n` members: nothing reported yet.
    pub(super) fn new_view(&mut self, n: usize) {
        self.received = vec![vec![0; n]; n];
        self.acked = vec![0; n];
    }

    /// Member `from` received every stream up to `v` (reports only grow).
    fn merge(&mut self, from: usize, v: &[u64]) {
        for (x, &y) in self.received[from].iter_mut().zip(v) {
            *x = (*x).max(y);
        }
    }

    /// How far every member but `rank` reported receiving stream `s`, at most `received`.
    fn min_received(&self, s: usize, received: u64, rank: usize) -> u64 {
        let mut m = received;
        for (k, rep) in self.received.iter().enumerate() {
            if k != rank {
                m = m.min(rep[s]);
            }
        }
        m
    }
}

/// The pinwheel: the token while this member holds it, and what it passed on last.
#[derive(Debug, Default)]
pub(super) struct Pinwheel {
    /// The token while this member holds it.
    pub(super) token: Option<Token>,
    /// The highest round this member has seen: of a token that came, or one it made or passed
    /// on.
    pub(super) round_seen: u64,
    /// The received vector when this member last passed the token.
    pub(super) passed_vector: Vec<u64>,
    /// The round of the last token this member passed on (as it came).
    pub(super) passed_round: u64,
    /// The stable vector of the last token this member passed on (as it left).
    pub(super) passed_stable: Vec<u64>,
}

impl Vs {
    /// Own casts not yet stable (the retransmission buffer).
    pub fn unstable(&self) -> usize {
        self.streams
            .get(self.rank)
            .map_or(0, |s| (s.received - s.stable) as usize)
    }

    /// For every member (by rank): casts known stable.
    pub fn stable_vector(&self) -> Vec<u64> {
        self.streams.iter().map(|s| s.stable).collect()
    }

    pub(super) fn received_report(&self) -> Vec<u64> {
        match self.cfg.stability {
            Stability::Piggyback => self.received_vector(),
            Stability::Pinwheel => Vec::new(),
        }
    }

    /// A `Status` from the member at `rank`: its last cast sent, and (piggyback) what it received.
    pub(super) fn on_status(&mut self, rank: usize, last: u64, received: &[u64]) {
        let s = &mut self.streams[rank];
        s.highest_known = s.highest_known.max(last);
        self.arm_nak();
        self.on_report(rank, received);
    }

    /// Piggybacked stability: `v` is how far member `from` has received every stream.
    pub(super) fn on_report(&mut self, from: usize, v: &[u64]) {
        if self.cfg.stability != Stability::Piggyback || v.len() != self.members.len() {
            return;
        }
        self.reports.merge(from, v);
        self.update_stable_from_reports();
    }

    pub(super) fn update_stable_from_reports(&mut self) {
        let n = self.members.len();
        for s in 0..n {
            let m = self
                .reports
                .min_received(s, self.streams[s].received, self.rank);
            self.streams[s].set_stable(m);
        }
    }

    pub(super) fn on_token(&mut self, now: Instant, round: u64, acc: Vec<u64>, stable: Vec<u64>) {
        if self.cfg.stability != Stability::Pinwheel {
            return;
        }
        let n = self.members.len();
        if acc.len() != n || stable.len() != n || round < self.pinwheel.round_seen {
            return;
        }
        if round <= self.pinwheel.passed_round {
            // A second token of a round this member served: one that was thought lost and
            // replaced came back. Two tokens a round apart never merge, and each then waits
            // a heartbeat at every member (nothing new since the other passed): stability
            // crawled and the group never drained.
            return;
        }
        self.counters.tokens += 1;
        self.pinwheel.round_seen = round;
        for (s, &x) in stable.iter().enumerate() {
            self.streams[s].set_stable(x);
        }
        self.pinwheel.token = Some(Token { round, acc, stable });
        self.token_held(now);
    }

    /// Heartbeats, prompt reports of what arrived (piggyback stability), and the token.
    pub(super) fn poll_report(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        if self.cfg.stability == Stability::Pinwheel {
            if let Some(x) = self.poll_token(now, buf) {
                return Some(x);
            }
        }
        let prompt = self.cfg.stability == Stability::Piggyback
            && self.reports.unreported >= (self.cfg.window as u64 / 4).max(1);
        if prompt || self.timers.expired(Timer::Heartbeat, now) {
            let n = self.write_status(buf)?;
            self.counters.heartbeats += 1;
            self.timers
                .set(Timer::Heartbeat, now + self.cfg.heartbeat_interval);
            self.reports.unreported = 0;
            self.note_acked_all();
            return Some((Dest::All, n));
        }
        self.poll_ack(now, buf)
    }

    /// A `Status`: the last own cast sent, and what this member received of every stream.
    pub(super) fn write_status(&self, buf: &mut [u8]) -> Option<usize> {
        let last = self
            .streams
            .get(self.rank)
            .map_or(0, |s| s.received.min(self.out.sent_upto));
        let received = self.received_report();
        msg::write(buf, &self.header(), &VsMsg::Status { last, received })
    }

    /// Piggyback: every stream's owner now knows how far this member received it.
    pub(super) fn note_acked_all(&mut self) {
        if self.cfg.stability == Stability::Piggyback {
            for (a, s) in self.reports.acked.iter_mut().zip(&self.streams) {
                *a = s.received;
            }
        }
    }

    /// Adaptive packing, piggyback stability: tells the owners of the casts that arrived
    /// since this member last said so, at once, unless a data message of its own just did.
    ///
    /// A sender packs while its earlier casts are not yet known to be received by everyone
    /// (they are "in flight"). Reports used to ride only on data and heartbeats, so a member
    /// with nothing to send reported a heartbeat interval late, and a sender that cast once
    /// a round (burst m=1) found its previous cast still in flight every time and held each
    /// new one `delay_max` (1.2 ms rounds against 0.1 ms with packing off). Reported at once,
    /// a cast is acknowledged within a round trip, and a lone cast goes out at once; under
    /// load the casts made meanwhile still leave packed (the answer to a packet clocks the
    /// next). The report goes to the one owner whose casts arrived (to all when several
    /// members' did); a member whose own casts are held by the packer reports too, or two
    /// members that each wait for the other's report would both wait out `delay_max`.
    pub(super) fn poll_ack(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        let adaptive =
            matches!(self.cfg.pack, PackMode::Adaptive { delay_max } if !delay_max.is_zero());
        if !adaptive || self.cfg.stability != Stability::Piggyback {
            return None;
        }
        let mut owner = None;
        let mut several = false;
        for (r, (s, &a)) in self.streams.iter().zip(&self.reports.acked).enumerate() {
            if r != self.rank && s.received > a {
                several |= owner.is_some();
                owner = Some(r);
            }
        }
        let owner = owner?;
        let n = self.write_status(buf)?;
        self.counters.acks += 1;
        if several {
            self.timers
                .set(Timer::Heartbeat, now + self.cfg.heartbeat_interval);
            self.reports.unreported = 0;
            self.note_acked_all();
            Some((Dest::All, n))
        } else {
            self.reports.acked[owner] = self.streams[owner].received;
            Some((Dest::To(self.members[owner]), n))
        }
    }

    /// Pinwheel: passes the token on once this member has something new for it or it brings a
    /// newer stable vector (or it has been held a heartbeat interval); the lowest rank starts a
    /// round, and a new token if one was lost.
    pub(super) fn poll_token(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        let n = self.members.len();
        let mine = self.received_vector();
        if self.pinwheel.token.is_none() && self.rank == 0 && self.state == VsState::Normal {
            let lost = self.timers.expired(Timer::Token, now);
            if lost || self.pinwheel.round_seen == 0 {
                self.pinwheel.round_seen += 1;
                self.pinwheel.token = Some(Token {
                    round: self.pinwheel.round_seen,
                    acc: vec![u64::MAX; n],
                    stable: self.stable_vector(),
                });
                self.token_held(now);
            }
        }
        let t = self.pinwheel.token.as_ref()?;
        // A token that brings a newer stable vector than the last one this member passed on
        // goes on at once too: the news is what a sender with a full window waits for. Held a
        // heartbeat at every member with nothing new of its own, a lone sender not at rank 0
        // (a `dynseq` sequencer at rank 2 of 11, window 8) got a window per two rounds of
        // holds, 8 casts per 200 ms, and the group did not drain.
        // So does a token whose round, with this member's vector, makes news (its minimum
        // passes its stable vector): that round is the one a sender past rank 0 waits for.
        let news = t
            .acc
            .iter()
            .zip(&mine)
            .zip(&t.stable)
            .any(|((&a, &m), &s)| a.min(m) > s);
        let changed = mine != self.pinwheel.passed_vector
            || self.unstable() > 0
            || t.stable != self.pinwheel.passed_stable
            || news;
        if !changed && !self.timers.expired(Timer::Token, now) {
            return None;
        }
        let mut t = t.clone();
        if n == 1 {
            for (s, &m) in self.streams.iter_mut().zip(&mine) {
                s.set_stable(m);
            }
            self.pinwheel.token = Some(t);
            self.token_held(now);
            self.pinwheel.passed_vector = mine;
            return None;
        }
        for (a, &m) in t.acc.iter_mut().zip(&mine) {
            *a = (*a).min(m);
        }
        let served = t.round;
        if self.rank == n - 1 {
            // A full round: the minimum is stable everywhere; the next round starts.
            t.stable = t.acc.clone();
            t.acc = vec![u64::MAX; n];
            t.round += 1;
            for (s, &x) in t.stable.iter().enumerate() {
                self.streams[s].set_stable(x);
            }
        }
        let next = self.members[(self.rank + 1) % n];
        let h = self.header();
        let len = msg::write(
            buf,
            &h,
            &VsMsg::Token {
                round: t.round,
                acc: t.acc.clone(),
                stable: t.stable.clone(),
            },
        )?;
        self.pinwheel.round_seen = self.pinwheel.round_seen.max(t.round);
        self.pinwheel.passed_round = served;
        self.pinwheel.passed_stable = t.stable;
        self.pinwheel.token = None;
        self.token_none(now);
        self.pinwheel.passed_vector = mine;
        Some((Dest::To(next), len))
    }

    /// Pinwheel: this member took the token at `now`; it passes it on within a heartbeat
    /// interval.
    pub(super) fn token_held(&mut self, now: Instant) {
        self.timers
            .set(Timer::Token, now + self.cfg.heartbeat_interval);
    }

    /// Pinwheel: this member has no token since `now`; rank 0 makes a new one if none comes
    /// back in time (not during a flush).
    pub(super) fn token_none(&mut self, now: Instant) {
        let lost = self.cfg.stability == Stability::Pinwheel
            && self.rank == 0
            && self.state == VsState::Normal;
        let t = lost.then(|| now + self.token_lost_after());
        self.timers.put(Timer::Token, t);
    }

    /// Pinwheel: how long the lowest rank goes without the token before it makes a new one.
    /// An idle round takes up to a heartbeat interval at each member (nothing new to add), so
    /// the wait grows with the view: at `silence_timeout / 2` alone, a view of 10 with 20 ms
    /// heartbeats made a new token every round, and the tokens ate each other's rounds.
    pub(super) fn token_lost_after(&self) -> Duration {
        self.cfg.silence_timeout / 2 + self.cfg.heartbeat_interval * (self.members.len() as u32 + 1)
    }
}
