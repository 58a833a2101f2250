//! A hashed timing wheel (the engine's timer table; paper 004 uses one for its timeout
//! handlers). Deadlines fall into `slots` buckets of `tick` each; a bucket may hold entries of
//! later rounds, which stay until their time comes. Scheduling and expiry are O(1) amortised;
//! the number of entries is bounded. [`Deadlines`] is a state machine's own small table: one
//! deadline per kind of timer.

use crate::time::Instant;
use core::marker::PhantomData;

/// A state machine's timers: one deadline per kind `K` (an enum of `N` kinds whose `usize` is
/// its index), or none when that kind is not armed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deadlines<K, const N: usize> {
    at: [Option<Instant>; N],
    kind: PhantomData<K>,
}

impl<K, const N: usize> Default for Deadlines<K, N> {
    fn default() -> Self {
        Deadlines {
            at: [None; N],
            kind: PhantomData,
        }
    }
}

impl<K: Copy + Into<usize>, const N: usize> Deadlines<K, N> {
    pub fn set(&mut self, t: K, at: Instant) {
        self.at[t.into()] = Some(at);
    }

    pub fn stop(&mut self, t: K) {
        self.at[t.into()] = None;
    }

    /// Arms `t` at `at`, or stops it when `at` is `None`.
    pub fn put(&mut self, t: K, at: Option<Instant>) {
        self.at[t.into()] = at;
    }

    /// Stops `t`; whether it was armed.
    pub fn take(&mut self, t: K) -> bool {
        self.at[t.into()].take().is_some()
    }

    pub fn get(&self, t: K) -> Option<Instant> {
        self.at[t.into()]
    }

    pub fn is_set(&self, t: K) -> bool {
        self.get(t).is_some()
    }

    /// Whether `t` is armed and due at `now`.
    pub fn expired(&self, t: K, now: Instant) -> bool {
        self.get(t).is_some_and(|at| now >= at)
    }

    pub fn clear(&mut self) {
        self.at = [None; N];
    }

    /// The earliest deadline armed.
    pub fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().copied().min()
    }

    /// The earliest deadline armed among `ts`.
    pub fn next_of(&self, ts: &[K]) -> Option<Instant> {
        ts.iter().filter_map(|&t| self.get(t)).min()
    }
}

/// A wheel is full: no more entries fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WheelFull;

pub struct TimerWheel<K> {
    tick_ns: u64,
    slots: Vec<Vec<(Instant, K)>>,
    /// The tick whose bucket is examined next.
    cursor: u64,
    len: usize,
    capacity: usize,
}

impl<K: Copy> TimerWheel<K> {
    /// `slots` buckets of `tick_ns` nanoseconds, holding at most `capacity` entries, starting
    /// at `now`.
    pub fn new(tick_ns: u64, slots: usize, capacity: usize, now: Instant) -> Self {
        assert!(tick_ns > 0 && slots > 0, "a wheel needs ticks and slots");
        TimerWheel {
            tick_ns,
            slots: (0..slots).map(|_| Vec::new()).collect(),
            cursor: now.0 / tick_ns,
            len: 0,
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot_of(&self, tick: u64) -> usize {
        let n = self.slots.len() as u64;
        // A power of two (the engine's wheels) takes a mask, not a division.
        if n.is_power_of_two() {
            (tick & (n - 1)) as usize
        } else {
            (tick % n) as usize
        }
    }

    /// Schedules `key` at `deadline` (a deadline already past fires at the next poll).
    pub fn schedule(&mut self, deadline: Instant, key: K) -> Result<(), WheelFull> {
        if self.len >= self.capacity {
            return Err(WheelFull);
        }
        let tick = (deadline.0 / self.tick_ns).max(self.cursor);
        let s = self.slot_of(tick);
        self.slots[s].push((deadline, key));
        self.len += 1;
        Ok(())
    }

    /// Calls `fire(deadline, key)` for every entry whose deadline is at or before `now`, in no
    /// particular order within a tick.
    pub fn expire(&mut self, now: Instant, mut fire: impl FnMut(Instant, K)) -> usize {
        let now_tick = now.0 / self.tick_ns;
        let mut fired = 0;
        // Visit each bucket at most once per call, even after a long pause.
        let last = now_tick.min(self.cursor + self.slots.len() as u64 - 1);
        let mut tick = self.cursor;
        while tick <= last {
            let s = self.slot_of(tick);
            let bucket = &mut self.slots[s];
            let mut i = 0;
            while i < bucket.len() {
                if bucket[i].0 <= now {
                    let (d, k) = bucket.swap_remove(i);
                    self.len -= 1;
                    fired += 1;
                    fire(d, k);
                } else {
                    i += 1;
                }
            }
            tick += 1;
        }
        // Stay on the current tick: entries later within it are still to come.
        self.cursor = now_tick.max(self.cursor);
        fired
    }

    /// Keeps only the entries for which `keep(deadline, key)` holds (drops stale ones when the
    /// wheel is full). Visits every bucket: for the rare case, not the hot path.
    pub fn retain(&mut self, mut keep: impl FnMut(Instant, K) -> bool) {
        for bucket in &mut self.slots {
            bucket.retain(|&(d, k)| keep(d, k));
        }
        self.len = self.slots.iter().map(Vec::len).sum();
    }

    /// A lower bound on the earliest deadline (exact unless entries of a later round share
    /// the first non-empty bucket), or `None` if the wheel is empty.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        for k in 0..self.slots.len() as u64 {
            let bucket = &self.slots[self.slot_of(self.cursor + k)];
            if let Some(min) = bucket.iter().map(|e| e.0).min() {
                return Some(min.min(Instant((self.cursor + k + 1) * self.tick_ns)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_each_entry_once_at_its_time_across_rounds() {
        let mut w = TimerWheel::new(100, 8, 64, Instant(0));
        for (i, d) in [50u64, 150, 799, 800, 2_500, 10].iter().enumerate() {
            w.schedule(Instant(*d), i).unwrap();
        }
        let mut fired = Vec::new();
        for now in (0..=3_000).step_by(50) {
            w.expire(Instant(now), |_, k| fired.push((now, k)));
        }
        fired.sort();
        assert_eq!(
            fired,
            vec![(50, 0), (50, 5), (150, 1), (800, 2), (800, 3), (2_500, 4)]
        );
        assert!(w.is_empty());
    }

    #[test]
    fn next_deadline_is_a_lower_bound_and_capacity_is_a_bound() {
        let mut w = TimerWheel::new(100, 4, 2, Instant(0));
        assert_eq!(w.next_deadline(), None);
        w.schedule(Instant(250), 1).unwrap();
        w.schedule(Instant(1_050), 2).unwrap(); // a later round in another bucket
        assert_eq!(w.schedule(Instant(5), 3), Err(WheelFull));
        let d = w.next_deadline().unwrap();
        assert!(d <= Instant(250));
        let mut n = 0;
        w.expire(Instant(300), |_, _| n += 1);
        assert_eq!(n, 1);
        // After a long pause everything due fires in one call.
        w.expire(Instant(100_000), |_, _| n += 1);
        assert_eq!(n, 2);
    }

    #[test]
    fn a_past_deadline_fires_at_the_next_poll() {
        let mut w = TimerWheel::new(100, 4, 8, Instant(1_000));
        w.schedule(Instant(10), 7).unwrap();
        let mut got = None;
        w.expire(Instant(1_000), |_, k| got = Some(k));
        assert_eq!(got, Some(7));
    }

    #[test]
    fn retain_makes_room_and_keeps_what_it_is_told() {
        let mut w = TimerWheel::new(100, 4, 3, Instant(0));
        for (d, k) in [(50, 1), (450, 2), (90, 3)] {
            w.schedule(Instant(d), k).unwrap();
        }
        assert_eq!(w.schedule(Instant(70), 4), Err(WheelFull));
        w.retain(|_, k| k != 2);
        assert_eq!(w.len(), 2);
        w.schedule(Instant(70), 4).unwrap();
        let mut fired = Vec::new();
        w.expire(Instant(1_000), |_, k| fired.push(k));
        fired.sort_unstable();
        assert_eq!(fired, [1, 3, 4]);
    }
}
