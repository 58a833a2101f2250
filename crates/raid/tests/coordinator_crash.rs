//! The atomicity controller killed between prepare and commit, at the points that matter,
//! through the sans-IO site: three sites, their packets carried by hand, their logs in
//! vectors (a record counts once the "disk" has synced it). The two survivors suspect the
//! dead coordinator, form a view without it and go on; the transfer in doubt is settled by
//! the new view's donor; the coordinator, restarted, joins and takes the donor's copy. No
//! transaction is left in doubt, every copy ends the same, and the client of the dead
//! coordinator was never told of a commit that is not there.

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
    /// Packets from these sites are lost.
    mute: Vec<bool>,
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
                packets.push((k, to as usize, p));
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
        for (from, to, p) in packets {
            if !self.down[to] && !self.mute[from] {
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
        mute: vec![false; 3],
    };
    // Hellos (every site learns the others' incarnations), then the first view of all three.
    n.steps(200);
    for node in &n.nodes {
        let v = node.site.view().expect("a member");
        assert_eq!(v.members.len(), 3, "{}", node.site.describe());
    }
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

/// Every site a member of one view of all three, quiet, with the same copy, conserving.
fn converged(n: &Net) {
    let v0 = n.nodes[0].site.view().cloned();
    for (k, node) in n.nodes.iter().enumerate() {
        let s = &node.site;
        assert!(s.is_quiet(), "{}", s.describe());
        assert_eq!(s.view().cloned(), v0, "site {k}");
        assert_eq!(s.view().map(|v| v.members.len()), Some(3));
        assert_eq!(s.db().digest(), n.nodes[0].site.db().digest(), "site {k}");
        assert!(s.db().totals().conserved());
    }
}

/// With site 0 down, sites 1 and 2 go on; then site 0 restarts on its log, joins, and the
/// three converge.
fn survivors_go_on_then_site_0_rejoins(n: &mut Net) {
    survivors_go_on(n);
    n.restart(0, 2);
    n.steps(2000);
    converged(n);
}

/// While site 0 is down, sites 1 and 2 go on: a transfer at site 1 commits.
fn survivors_go_on(n: &mut Net) {
    let t = Transfer {
        account: 7,
        teller: 0,
        branch: 0,
        delta: 5,
    };
    n.nodes[1].site.submit(Instant(n.now), 9, t).unwrap();
    let mut events = Vec::new();
    for _ in 0..2000 {
        n.step();
        events.extend(committed(&mut n.nodes[1].site));
        if !events.is_empty() {
            break;
        }
    }
    assert!(
        matches!(events[..], [Event::Committed { tag: 9, .. }]),
        "{events:?}; {}",
        n.nodes[1].site.describe()
    );
    let v = n.nodes[1].site.view().expect("a member");
    assert_eq!(v.members.iter().map(|m| m.site).collect::<Vec<_>>(), [1, 2]);
}

#[test]
fn killed_before_its_commit_record_is_durable_its_decision_holds_where_it_arrived() {
    let mut n = net();
    // Site 0's disk stops syncing: the participants prepare and vote, site 0 appends its
    // commit record (never durable) and sends its decision, which the participants apply;
    // then site 0 dies with its client untold.
    n.syncing[0] = false;
    n.nodes[0].site.submit(Instant(n.now), 1, T).unwrap();
    n.steps(5);
    assert!(n.nodes[1].site.counters().prepared == 1 && n.nodes[2].site.counters().prepared == 1);
    assert!(
        committed(&mut n.nodes[0].site).is_empty(),
        "no acknowledgement without the record"
    );
    n.kill(0);
    assert_eq!(n.nodes[1].site.db().balance(Key::account(3)), Ok(50));
    survivors_go_on_then_site_0_rejoins(&mut n);
    // The restarted site lost the record, and takes the donor's copy, which has it.
    for node in &n.nodes {
        assert_eq!(node.site.db().balance(Key::account(3)), Ok(50));
        assert_eq!(node.site.db().balance(Key::account(7)), Ok(5));
        assert_eq!(node.site.db().history_count(), 2);
    }
}

#[test]
fn killed_with_its_decision_durable_and_unsent_the_new_view_settles_it() {
    let mut n = net();
    n.nodes[0].site.submit(Instant(n.now), 1, T).unwrap();
    // Until site 0 has decided (its commit record durable and the transfer applied there),
    // while its packets are lost: its decision reaches no one, then it dies.
    for _ in 0..50 {
        n.step();
        if n.nodes[0].site.db().balance(Key::account(3)) == Ok(50) {
            break;
        }
        n.mute[0] = n.nodes[1].site.counters().prepared == 1;
    }
    n.step();
    assert_eq!(n.nodes[0].site.db().balance(Key::account(3)), Ok(50));
    assert!(
        committed(&mut n.nodes[0].site).is_empty(),
        "not told before every participant holds it"
    );
    n.kill(0);
    n.mute[0] = false;
    assert_eq!(n.nodes[1].site.db().balance(Key::account(3)), Ok(0));
    survivors_go_on_then_site_0_rejoins(&mut n);
    // The survivors' donor had it in doubt: it is in no copy, and the restarted site's
    // durable commit record is undone by the donor's copy.
    for node in &n.nodes {
        assert_eq!(node.site.db().balance(Key::account(3)), Ok(0));
        assert_eq!(node.site.db().history_count(), 1);
    }
}

#[test]
fn a_committed_transfer_is_told_once_every_site_holds_it_and_survives_its_coordinator() {
    let mut n = net();
    n.nodes[0].site.submit(Instant(n.now), 1, T).unwrap();
    let mut told = Vec::new();
    for _ in 0..50 {
        n.step();
        told.extend(committed(&mut n.nodes[0].site));
        if !told.is_empty() {
            break;
        }
    }
    assert!(
        matches!(
            told[..],
            [Event::Committed {
                tag: 1,
                balance: 50,
                ..
            }]
        ),
        "{told:?}"
    );
    for node in &n.nodes {
        assert_eq!(node.site.db().balance(Key::account(3)), Ok(50));
    }
    n.kill(0);
    survivors_go_on_then_site_0_rejoins(&mut n);
    for node in &n.nodes {
        assert_eq!(node.site.db().balance(Key::account(3)), Ok(50));
        assert_eq!(node.site.db().history_count(), 2);
    }
}
