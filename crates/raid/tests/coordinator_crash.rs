//! The atomicity controller killed between prepare and commit, at the two points that matter,
//! through the sans-IO site: three sites, their packets carried by hand, their logs in
//! vectors (a record counts once the "disk" has synced it). No transaction is left in doubt
//! once the coordinator is back: without a commit record it answers abort, with one it
//! sends commit again, and every copy ends the same.

use txcast_proto::Instant;
use txcast_raid::{Event, Key, Scale, Site, SiteConfig, Transfer};

const MS: u64 = 1_000_000;

fn scale() -> Scale {
    Scale {
        branches: 1,
        tellers_per_branch: 2,
        accounts_per_branch: 10,
        history_rows: 100,
    }
}

struct Node {
    site: Site,
    /// Records synced, and records written but not synced.
    durable: Vec<Vec<u8>>,
    pending: Vec<Vec<u8>>,
}

impl Node {
    fn new(site: u16) -> Node {
        Node {
            site: Site::new(SiteConfig::new(site, 3, 1, scale())).unwrap(),
            durable: Vec::new(),
            pending: Vec::new(),
        }
    }
}

struct Net {
    nodes: Vec<Node>,
    now: u64,
    /// Whether each site's disk syncs (a crash is modelled by not syncing, then restarting).
    syncing: Vec<bool>,
    down: Vec<bool>,
}

impl Net {
    /// One round: timers, packets between live sites, log records, syncs.
    fn step(&mut self) {
        self.now += MS;
        let now = Instant(self.now);
        let mut packets = Vec::new();
        for (k, n) in self.nodes.iter_mut().enumerate() {
            if self.down[k] {
                continue;
            }
            n.site.handle_timeout(now);
            while let Some((to, p)) = n.site.poll_transmit() {
                packets.push((to as usize, p));
            }
            while let Some(r) = n.site.poll_log() {
                n.pending.push(r);
            }
            if self.syncing[k] && !n.pending.is_empty() {
                let synced: Vec<Vec<u8>> = n.pending.drain(..).collect();
                n.durable.extend(synced);
                n.site.logged(now, n.durable.len() as u64);
            }
        }
        for (to, p) in packets {
            if !self.down[to] {
                let _ = self.nodes[to].site.handle_packet(now, &p);
            }
        }
    }

    fn steps(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }

    /// Kills site `k` (what was not synced is lost) and later restarts it from its log.
    fn kill(&mut self, k: usize) {
        self.down[k] = true;
        self.nodes[k].pending.clear();
    }

    fn restart(&mut self, k: usize, incarnation: u32) {
        let cfg = SiteConfig::new(k as u16, 3, incarnation, scale());
        let durable = std::mem::take(&mut self.nodes[k].durable);
        let site = Site::recover(cfg, Instant(self.now), durable.iter().map(|r| &r[..])).unwrap();
        self.nodes[k] = Node {
            site,
            durable,
            pending: Vec::new(),
        };
        self.down[k] = false;
        self.syncing[k] = true;
    }
}

fn net() -> Net {
    let mut n = Net {
        nodes: (0..3).map(Node::new).collect(),
        now: 0,
        syncing: vec![true; 3],
        down: vec![false; 3],
    };
    n.steps(20); // hellos: every site learns the others' incarnations
    n
}

const T: Transfer = Transfer {
    account: 3,
    teller: 1,
    branch: 0,
    delta: 50,
};

fn committed(site: &mut Site) -> Vec<Event> {
    std::iter::from_fn(|| site.poll_event()).collect()
}

#[test]
fn killed_before_its_commit_record_is_durable_the_transfer_aborts_everywhere() {
    let mut n = net();
    // Site 0's disk stops syncing: the participants prepare and vote, site 0 appends its
    // commit record, which never becomes durable; then site 0 dies.
    n.syncing[0] = false;
    n.nodes[0].site.submit(Instant(n.now), 1, T).unwrap();
    n.steps(5);
    assert!(n.nodes[1].site.counters().prepared == 1 && n.nodes[2].site.counters().prepared == 1);
    assert!(
        committed(&mut n.nodes[0].site).is_empty(),
        "no acknowledgement without the record"
    );
    n.kill(0);
    n.steps(300); // the participants are in doubt, asking a dead coordinator
    assert!(!n.nodes[1].site.is_quiet() && !n.nodes[2].site.is_quiet());
    n.restart(0, 2);
    n.steps(300);
    for k in 0..3 {
        let s = &n.nodes[k].site;
        assert!(s.is_quiet(), "{}", s.describe());
        assert_eq!(s.db().balance(Key::account(3)), Ok(0), "site {k}");
        assert_eq!(s.db().history_count(), 0);
    }
}

#[test]
fn killed_after_its_commit_record_is_durable_the_transfer_commits_everywhere() {
    let mut n = net();
    n.nodes[0].site.submit(Instant(n.now), 1, T).unwrap();
    // Until the commit record is synced (the client is told), then the coordinator dies
    // before its decision reaches anyone.
    for _ in 0..20 {
        n.step();
        if !committed(&mut n.nodes[0].site).is_empty() {
            break;
        }
    }
    assert_eq!(n.nodes[0].site.db().balance(Key::account(3)), Ok(50));
    n.kill(0); // the DECIDE packets it queued are never sent
    n.steps(300);
    assert_eq!(
        n.nodes[1].site.db().balance(Key::account(3)),
        Ok(0),
        "still in doubt"
    );
    n.restart(0, 2);
    n.steps(300);
    for k in 0..3 {
        let s = &n.nodes[k].site;
        assert!(s.is_quiet(), "{}", s.describe());
        assert_eq!(s.db().balance(Key::account(3)), Ok(50), "site {k}");
        assert_eq!(s.db().history_count(), 1);
        assert!(s.db().totals().conserved());
    }
}
