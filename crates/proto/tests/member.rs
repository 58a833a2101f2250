//! The one group interface (`txcast_proto::member::GroupMember`), driven the same way for
//! every stack: members made by `GroupSpec::start`, messages carried between them with no
//! loss, then checked through the interface alone.

use std::time::Duration;
use txcast_proto::group::GroupConfig;
use txcast_proto::member::{Delivered, Dest, GroupEvent, GroupMember, State};
use txcast_proto::order::{OrderConfig, Protocol};
use txcast_proto::pack::PackMode;
use txcast_proto::stack::GroupSpec;
use txcast_proto::{Address, Instant};

/// One entry of the ordered stream, owned: (seq, sender, what).
#[derive(Clone, Debug, PartialEq)]
enum Entry {
    Message(Address, u64, Vec<u8>),
    View(Vec<Address>),
    Joined(Address),
}

struct Net {
    now: Instant,
    members: Vec<Box<dyn GroupMember>>,
    /// Members whose traffic is dropped both ways (a crash the others must detect).
    dead: Vec<bool>,
    entries: Vec<Vec<(u64, Entry)>>,
    events: Vec<Vec<GroupEvent>>,
    buf: Vec<u8>,
}

impl Net {
    fn new(first: Box<dyn GroupMember>) -> Net {
        Net {
            now: Instant::ZERO,
            members: vec![first],
            dead: vec![false],
            entries: vec![Vec::new()],
            events: vec![Vec::new()],
            buf: vec![0u8; 16_000],
        }
    }

    fn add(&mut self, m: Box<dyn GroupMember>) {
        self.members.push(m);
        self.dead.push(false);
        self.entries.push(Vec::new());
        self.events.push(Vec::new());
    }

    fn index(&self, a: Address) -> Option<usize> {
        self.members.iter().position(|m| m.address() == a)
    }

    /// Carries every message, fires due timers and takes every delivery and event, for
    /// `span` of time in 1 ms steps.
    fn run(&mut self, span: Duration) {
        let end = self.now + span;
        while self.now < end {
            for _ in 0..100 {
                let mut moved = false;
                for i in 0..self.members.len() {
                    while let Some((dest, len)) =
                        self.members[i].poll_transmit(self.now, &mut self.buf)
                    {
                        moved = true;
                        let bytes = self.buf[..len].to_vec();
                        let mut to = Vec::new();
                        match dest {
                            Dest::To(a) => to.push(a),
                            Dest::All => self.members[i].fanout(&mut |a| to.push(a)),
                        }
                        if self.dead[i] {
                            continue;
                        }
                        for a in to {
                            if let Some(j) = self.index(a).filter(|&j| !self.dead[j]) {
                                assert!(self.members[j].handle_message(self.now, &bytes));
                            }
                        }
                    }
                }
                for i in 0..self.members.len() {
                    let m = &mut self.members[i];
                    while let Some(e) = m.take_delivery(|d| {
                        let e = match d.what {
                            Delivered::Message { msg_id, payload } => {
                                Entry::Message(d.sender, msg_id, payload.to_vec())
                            }
                            Delivered::Rebuilt { members, .. } => Entry::View(members),
                            Delivered::Joined(a) => Entry::Joined(a),
                            Delivered::Left(a) => panic!("nobody leaves here: {a}"),
                        };
                        (d.seq, e)
                    }) {
                        moved = true;
                        self.entries[i].push(e);
                    }
                    while let Some(ev) = m.poll_event() {
                        moved = true;
                        self.events[i].push(ev);
                    }
                }
                if !moved {
                    break;
                }
            }
            self.now = self.now + Duration::from_millis(1);
            for m in self.members.iter_mut() {
                if m.poll_timeout().is_some_and(|t| t <= self.now) {
                    m.handle_timeout(self.now);
                }
            }
        }
    }

    fn messages(&self, i: usize) -> Vec<Entry> {
        self.entries[i]
            .iter()
            .map(|(_, e)| e.clone())
            .filter(|e| matches!(e, Entry::Message(..)))
            .collect()
    }
}

fn addr(site: u16) -> Address {
    Address::new(1, site, 2, 1)
}

/// Three members, one created and two joined through it; each sends three messages; then
/// the third goes silent and the other two go on without it.
fn exercise(spec: GroupSpec) {
    let t0 = Instant::ZERO;
    let mut net = Net::new(spec.clone().start(addr(0), None, t0).unwrap());
    for s in 1..3 {
        net.add(spec.clone().start(addr(s), Some(addr(0)), t0).unwrap());
        net.run(Duration::from_millis(300));
    }
    for (i, m) in net.members.iter().enumerate() {
        assert_eq!(m.state(), State::Normal, "member {i}");
        assert_eq!(m.members().len(), 3, "member {i}");
    }
    // A joiner's join completes with the entry of its first view.
    for i in 1..3 {
        let seq = net.events[i]
            .iter()
            .find_map(|e| match e {
                GroupEvent::JoinDone { seq } => Some(*seq),
                _ => None,
            })
            .unwrap_or_else(|| panic!("member {i} saw no JoinDone: {:?}", net.events[i]));
        let first = net.entries[i].first().expect("an entry");
        assert_eq!(first.0, seq, "member {i}");
    }
    let mut ids = vec![Vec::new(); 3];
    for round in 0..3u8 {
        for (i, m) in net.members.iter_mut().enumerate() {
            ids[i].push(m.send(net.now, &[i as u8, round]).unwrap());
        }
        net.run(Duration::from_millis(50));
    }
    net.run(Duration::from_millis(200));
    let all = net.messages(0);
    assert_eq!(all.len(), 9, "{all:?}");
    for (i, ids) in ids.iter().enumerate() {
        // One total order, and every entry numbered 1, 2, 3... at each member.
        assert_eq!(net.messages(i), all, "member {i}");
        let seqs: Vec<u64> = net.entries[i].iter().map(|e| e.0).collect();
        let first = seqs[0];
        assert_eq!(seqs, (first..first + seqs.len() as u64).collect::<Vec<_>>());
        // Each send completed, in order.
        let done: Vec<u64> = net.events[i]
            .iter()
            .filter_map(|e| match e {
                GroupEvent::SendDone { msg_id } => Some(*msg_id),
                _ => None,
            })
            .collect();
        assert_eq!(&done, ids, "member {i}");
        let m = &net.members[i];
        assert_eq!(m.sends_pending(), 0);
        let info = m.info(net.now);
        assert_eq!(info.state, State::Normal);
        assert_eq!(info.members.len(), 3);
        assert!(info.members.contains(&info.sequencer), "{info:?}");
        assert_eq!(info.counters.sent, 3);
        assert!(info.counters.delivered >= 9, "{info:?}");
        assert!(info.counters.packets_sent > 0, "{info:?}");
        let last = net.entries[i].last().unwrap().0;
        assert_eq!(info.consumed_upto, last, "{info:?}");
        assert_eq!(info.received_upto, last, "{info:?}");
        assert!(info.stable_upto > 0 && info.stable_upto <= last, "{info:?}");
    }
    // Member 2 goes silent: the others suspect it, and install a view without it.
    net.dead[2] = true;
    let before = net.members[0].epoch();
    net.run(Duration::from_secs(3));
    // The member that noticed reports it (the others may learn it from the new view).
    assert!(
        (0..2).any(|i| net.events[i]
            .iter()
            .any(|e| matches!(e, GroupEvent::Failure { suspect } if *suspect == addr(2)))),
        "{:?}",
        &net.events[..2]
    );
    for i in 0..2 {
        let m = &net.members[i];
        assert_eq!(m.members(), &[addr(0), addr(1)][..], "member {i}");
        assert!(m.epoch() > before, "member {i}");
        assert_eq!(m.state(), State::Normal);
    }
    let id = net.members[1].send(net.now, b"after").unwrap();
    net.run(Duration::from_millis(200));
    for i in 0..2 {
        assert_eq!(
            net.messages(i).last(),
            Some(&Entry::Message(addr(1), id, b"after".to_vec())),
            "member {i}"
        );
    }
}

#[test]
fn the_sequencer_protocol_through_the_interface() {
    exercise(GroupSpec::Sequencer(GroupConfig {
        resilience: 1,
        ..GroupConfig::default()
    }));
}

#[test]
fn every_layered_protocol_through_the_interface() {
    for p in [
        Protocol::Totem,
        Protocol::Total,
        Protocol::Dynseq,
        Protocol::Dynord,
    ] {
        exercise(GroupSpec::Ordered(OrderConfig::with(p, PackMode::Off)));
    }
}
