//! What the CRMem benchmarks share (crmem.rs, the mirror; crmem_sym.rs, the symmetric
//! configuration): the simplified TpcB of Roşu & Schwan, *Support for Recoverable Memory in
//! the Distributed Virtual Communication Machine* (§3.5) — its tables, its granularities, one
//! transaction's draw and writes, the balance sums — and the little byte helpers.

use std::io;
use txcast_crmem::LockMapping;
use txcast_proto::rng::Rng;

pub const ACCOUNTS: u32 = 10_000;
pub const TELLERS: u32 = 256;
pub const BRANCHES: u32 = 32;
pub const HISTORY: u32 = 100;
pub const ROW: u32 = 100;
pub const HISTORY_ROW: u32 = 50;

pub fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

pub fn i64_at(m: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(m[at..at + 8].try_into().expect("8 bytes"))
}

pub fn add_i64(m: &mut [u8], at: usize, d: i64) {
    let v = i64_at(m, at).wrapping_add(d);
    m[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The paper's granularities, in segment order accounts, tellers, branches, history: ten
/// accounts to a lock, two tellers, one branch, one history record.
pub fn tpcb_segments() -> [(usize, LockMapping); 4] {
    let rows = |per_lock| LockMapping::Records {
        record_bytes: ROW,
        per_lock,
    };
    [
        ((ACCOUNTS * ROW) as usize, rows(10)),
        ((TELLERS * ROW) as usize, rows(2)),
        ((BRANCHES * ROW) as usize, rows(1)),
        (
            (HISTORY * HISTORY_ROW) as usize,
            LockMapping::Records {
                record_bytes: HISTORY_ROW,
                per_lock: 1,
            },
        ),
    ]
}

/// One TpcB transaction as drawn: an account, a teller (whose branch follows), a history
/// slot, an amount (a record at random, no running total, so no lock every transaction
/// takes).
pub struct Tpcb {
    pub account: u32,
    pub teller: u32,
    pub branch: u32,
    pub slot: u32,
    pub amount: i64,
}

/// Which transactions a node runs (`--affinity`): any (`Uniform`), or those of its own
/// branches (`Branch`, TPC-B's locality).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Affinity {
    /// Teller, account and history slot uniformly over all.
    Uniform,
    /// Node k of n: a teller of the branches b with b % n == k, the account in the teller's
    /// branch 85 % of the time (else any), a history slot s with s % n == k.
    Branch,
}

impl Affinity {
    /// The name on the command line and in the JSON rows.
    pub fn name(self) -> &'static str {
        match self {
            Affinity::Uniform => "uniform",
            Affinity::Branch => "branch",
        }
    }

    pub fn parse(s: &str) -> io::Result<Affinity> {
        [Affinity::Uniform, Affinity::Branch]
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| err(format!("no affinity {s:?}")))
    }
}

/// The accounts of branch `b` (ACCOUNTS / BRANCHES is not whole: some have one more).
pub fn branch_accounts(b: u32) -> std::ops::Range<u32> {
    b * ACCOUNTS / BRANCHES..(b + 1) * ACCOUNTS / BRANCHES
}

impl Tpcb {
    /// A transaction drawn uniformly over all tellers, accounts and history slots.
    pub fn draw(rng: &mut Rng) -> Tpcb {
        Tpcb::draw_at(rng, Affinity::Uniform, 0, 1)
    }

    /// A transaction of node `node` of `nodes` under `affinity` (see [`Affinity`]).
    pub fn draw_at(rng: &mut Rng, affinity: Affinity, node: u32, nodes: u32) -> Tpcb {
        debug_assert!(node < nodes && nodes <= BRANCHES);
        // One of the values v of 0..total with v % nodes == node, uniformly (there is one:
        // node < nodes <= total).
        let mine = |rng: &mut Rng, total: u32| {
            let count = (total - node).div_ceil(nodes);
            node + rng.below(count as u64) as u32 * nodes
        };
        let per_branch = TELLERS / BRANCHES;
        let (account, teller, slot) = match affinity {
            Affinity::Uniform => (
                rng.below(ACCOUNTS as u64) as u32,
                rng.below(TELLERS as u64) as u32,
                rng.below(HISTORY as u64) as u32,
            ),
            Affinity::Branch => {
                let branch = mine(rng, BRANCHES);
                let teller = branch * per_branch + rng.below(per_branch as u64) as u32;
                let account = if rng.below(100) < 85 {
                    let r = branch_accounts(branch);
                    r.start + rng.below(r.len() as u64) as u32
                } else {
                    rng.below(ACCOUNTS as u64) as u32
                };
                (account, teller, mine(rng, HISTORY))
            }
        };
        let amount = rng.below(2_000) as i64 - 1_000;
        Tpcb {
            account,
            teller,
            branch: teller / per_branch,
            slot,
            amount,
        }
    }

    /// The four ranges to take, in this order, as (segment, offset, length), given the
    /// segments of the accounts, tellers, branches and history.
    pub fn ranges(&self, [acc, tel, br, hist]: [u16; 4]) -> [(u16, u32, u32); 4] {
        [
            (acc, self.account * ROW, ROW),
            (tel, self.teller * ROW, ROW),
            (br, self.branch * ROW, ROW),
            (hist, self.slot * HISTORY_ROW, HISTORY_ROW),
        ]
    }

    /// The write of one range: the history record (amount, account), or the balance moved.
    pub fn apply(&self, history: bool, m: &mut [u8]) {
        if history {
            m[..8].copy_from_slice(&self.amount.to_le_bytes());
            m[8..12].copy_from_slice(&self.account.to_le_bytes());
        } else {
            add_i64(m, 0, self.amount);
        }
    }
}

/// The accounts', tellers' and branches' balance sums, from the segments' copies.
pub fn tpcb_sums(acc: &[u8], tel: &[u8], br: &[u8]) -> (i64, i64, i64) {
    let sum =
        |m: &[u8], rows: u32| -> i64 { (0..rows).map(|i| i64_at(m, (i * ROW) as usize)).sum() };
    (sum(acc, ACCOUNTS), sum(tel, TELLERS), sum(br, BRANCHES))
}

/// Where CRMem's remote operations run (`--handlers`): the paper's three implementations.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    /// On the engine's thread (the paper's *CoProcessor*).
    Engine,
    /// By the application's threads polling (*CPU Polling*).
    Polled,
    /// On a thread woken for each message (*CPU Interrupt*).
    Interrupt,
}

impl Impl {
    pub fn handlers(self) -> txcast_crmem::Handlers {
        match self {
            Impl::Engine => txcast_crmem::Handlers::Engine,
            Impl::Polled => txcast_crmem::Handlers::Polled,
            Impl::Interrupt => txcast_crmem::Handlers::Interrupt,
        }
    }

    /// The name on the command line and in the JSON rows.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Engine => "engine",
            Impl::Polled => "polled",
            Impl::Interrupt => "interrupt",
        }
    }

    /// The paper's name for it.
    pub fn paper(self) -> &'static str {
        match self {
            Impl::Engine => "CoProcessor",
            Impl::Polled => "CPU Polling",
            Impl::Interrupt => "CPU Interrupt",
        }
    }

    pub fn parse(s: &str) -> io::Result<Impl> {
        [Impl::Engine, Impl::Polled, Impl::Interrupt]
            .into_iter()
            .find(|i| i.name() == s)
            .ok_or_else(|| err(format!("no implementation {s:?}")))
    }
}

/// A partner process's life: until `stop` exists (or `life` passes). A polled node drives its
/// host meanwhile (nobody else would answer for it); the others sleep.
pub fn serve_until(
    stop: &std::path::Path,
    life: std::time::Duration,
    drive: Option<&dyn Fn() -> usize>,
) {
    use std::time::{Duration, Instant};
    let end = Instant::now() + life;
    let mut looked = Instant::now();
    while !stop.exists() && Instant::now() < end {
        match drive {
            None => std::thread::sleep(Duration::from_millis(10)),
            Some(d) => {
                // The stop file is a system call: looked at every 10 ms.
                while looked.elapsed() < Duration::from_millis(10) {
                    if d() == 0 {
                        std::hint::spin_loop();
                    }
                }
                looked = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The uniform draw takes the account, the teller, the slot and the amount in this order
    /// from the generator, on any node: the same transactions for the same seed as before
    /// there were affinities.
    #[test]
    fn the_uniform_draw_takes_its_numbers_in_order() {
        let (mut a, mut b) = (Rng::new(5), Rng::new(5));
        for _ in 0..1_000 {
            let x = Tpcb::draw_at(&mut a, Affinity::Uniform, 3, 4);
            let account = b.below(ACCOUNTS as u64) as u32;
            let teller = b.below(TELLERS as u64) as u32;
            let slot = b.below(HISTORY as u64) as u32;
            let amount = b.below(2_000) as i64 - 1_000;
            assert_eq!(
                (x.account, x.teller, x.branch, x.slot, x.amount),
                (account, teller, teller / 8, slot, amount)
            );
        }
    }

    #[test]
    fn the_branch_draw_keeps_to_the_nodes_branches_and_slots() {
        let mut rng = Rng::new(20);
        let draws = 20_000;
        let mut home = 0;
        let mut tellers = std::collections::BTreeSet::new();
        for _ in 0..draws {
            let x = Tpcb::draw_at(&mut rng, Affinity::Branch, 1, 4);
            assert_eq!(x.branch % 4, 1, "teller {}", x.teller);
            assert_eq!(x.branch, x.teller / (TELLERS / BRANCHES));
            assert_eq!(x.slot % 4, 1, "slot {}", x.slot);
            assert!(x.slot < HISTORY && x.account < ACCOUNTS);
            if branch_accounts(x.branch).contains(&x.account) {
                home += 1;
            }
            tellers.insert(x.teller);
        }
        // 85 % in the branch, and the uniform 15 % lands there 1/32 of the time.
        let f = home as f64 / draws as f64;
        assert!((0.82..=0.88).contains(&f), "{f}");
        assert!(home < draws, "no account outside the teller's branch");
        // Every teller of the node's 8 branches.
        assert_eq!(tellers.len(), 8 * (TELLERS / BRANCHES) as usize);
    }

    #[test]
    fn every_node_gets_a_slot_and_a_branch_however_many() {
        let mut rng = Rng::new(1);
        for nodes in 1..=8 {
            for node in 0..nodes {
                let x = Tpcb::draw_at(&mut rng, Affinity::Branch, node, nodes);
                assert_eq!((x.branch % nodes, x.slot % nodes), (node, node));
            }
        }
    }
}
