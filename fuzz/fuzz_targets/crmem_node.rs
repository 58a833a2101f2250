//! CRMem nodes fed arbitrary messages from their peers: the mirror configuration's primary,
//! backup and recovering node (`Node::handle_message`), a backup replaying its disk log
//! (`Node::replay`), and the symmetric configuration's serving and recovering nodes
//! (`SymNode::handle_message`).
//!
//! Input: one byte choosing the node (its value modulo 6: the mirror primary, backup,
//! recovering node, replaying backup, the symmetric serving node, recovering node), then
//! chunks `[ctl u8][len u16 le][bytes]` (a short last chunk takes what is left). Each chunk
//! goes to the node as a message from node `ctl % 4` (3 is no node of the three: the symmetric
//! nodes check the sender themselves; a mirror node, which takes its driver's word for it,
//! hears it from node `ctl % 4 % 3`), or as a log record to the replaying backup; then time moves on by `ctl >> 2` milliseconds and the
//! node's timers and output run.
//!
//! The nodes (one segment of 1 KiB for the mirror nodes, three homed at nodes 0, 1, 2 for the
//! symmetric ones): the mirror primary (node 0, backups 1 and 2) has commit 1 waiting for its
//! acknowledgements; the symmetric node 1 of three has a commit waiting for its
//! acknowledgements and a transaction waiting for node 0's GRANT.
//!
//! Properties checked besides "never panics": everything a node sends parses (as a `Msg`, or
//! a `SymMsg` for the symmetric nodes) and goes to a node of the configuration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_crmem::msg::Msg;
use txcast_crmem::symmetric::SymMsg;
use txcast_crmem::{Config, LockMapping, Mode, Node, Role, SymNode};
use txcast_proto::time::Instant;

const NODES: u16 = 3;
const SEGMENT_BYTES: usize = 1024;
const MS: u64 = 1_000_000;
const DEADLINE: Instant = Instant(1_000 * MS);

fn mapping() -> LockMapping {
    LockMapping::Records {
        record_bytes: 64,
        per_lock: 2,
    }
}

fn cfg(node: u16) -> Config {
    Config {
        node,
        incarnation: 1,
        txns_max: 16,
        log_bytes: 64 << 10,
        message_bytes: 256,
        disk_log: false,
        cache_locks: false,
        // Small bundles: what a node sends is bundled and split.
        bundle_bytes: 128,
    }
}

fn mirror(node: u16, role: Role) -> Node {
    let mut n = Node::new(cfg(node), role);
    n.add_segment(SEGMENT_BYTES, mapping()).expect("segment");
    n
}

fn symmetric(node: u16, recovering: bool) -> SymNode {
    // Kept locks: the recall path runs too.
    let cfg = Config {
        cache_locks: true,
        ..cfg(node)
    };
    let mut n = SymNode::new(cfg, NODES as usize, recovering);
    for home in 0..NODES {
        n.add_segment(SEGMENT_BYTES, mapping(), home)
            .expect("segment");
    }
    n
}

/// The mirror primary with commit 1 sent to its backups.
fn primary() -> Node {
    let mut p = mirror(
        0,
        Role::Primary {
            backups: vec![1, 2],
        },
    );
    let t = p.begin(DEADLINE).expect("begin");
    p.set_range(t, 0, 0, 100, Mode::Write).expect("locks");
    p.range_mut(t, 0, 0, 100).expect("range").fill(0x11);
    p.commit(t).expect("commit");
    p
}

/// Symmetric node 1 with a commit out and a transaction waiting for node 0's locks.
fn sym_serving() -> SymNode {
    let mut n = symmetric(1, false);
    let t = n.begin(DEADLINE).expect("begin");
    n.set_range(t, 1, 0, 100, Mode::Write).expect("locks");
    n.range_mut(t, 1, 0, 100).expect("range").fill(0x22);
    n.commit(t).expect("commit");
    let t = n.begin(DEADLINE).expect("begin");
    n.set_range(t, 0, 128, 64, Mode::Write).expect("asks");
    n
}

fn drain_mirror(n: &mut Node) {
    while let Some((to, m)) = n.poll_transmit() {
        assert!(to < NODES, "mirror node sent to {to}");
        assert!(Msg::parse(&m).is_ok(), "mirror node sent {m:?}");
    }
    while n.poll_event().is_some() {}
}

fn drain_sym(n: &mut SymNode) {
    while let Some((to, m)) = n.poll_transmit() {
        assert!(to < NODES, "symmetric node sent to {to}");
        assert!(SymMsg::parse(&m).is_ok(), "symmetric node sent {m:?}");
    }
    while n.poll_event().is_some() {}
}

/// The node under test.
enum Under {
    Mirror(Node),
    /// A mirror backup replaying its disk log: the messages are log records.
    Replay(Node),
    Sym(SymNode),
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, data)) = data.split_first() else {
        return;
    };
    let mut under = match which % 6 {
        0 => Under::Mirror(primary()),
        1 => Under::Mirror(mirror(1, Role::Backup { primary: 0 })),
        2 => Under::Mirror(mirror(2, Role::Recovering { from: 0 })),
        3 => Under::Replay(mirror(1, Role::Backup { primary: 0 })),
        4 => Under::Sym(sym_serving()),
        _ => Under::Sym(symmetric(2, true)),
    };
    match &mut under {
        Under::Mirror(n) | Under::Replay(n) => drain_mirror(n),
        Under::Sym(n) => drain_sym(n),
    }

    let mut now = 0u64;
    let mut rest = data;
    while !rest.is_empty() {
        let ctl = rest[0];
        let len = match rest.get(1..3) {
            Some(l) => u16::from_le_bytes([l[0], l[1]]) as usize,
            None => usize::MAX,
        };
        rest = rest.get(3..).unwrap_or(&[]);
        let (m, tail) = rest.split_at(len.min(rest.len()));
        rest = tail;
        let from = (ctl % 4) as u16;
        now += (ctl >> 2) as u64 * MS;
        let t = Instant(now);
        match &mut under {
            Under::Mirror(n) => {
                // A mirror node takes its driver's word for the sender (the driver passes
                // only nodes of its configuration): it hears from nodes 0-2.
                n.handle_message(from % NODES, m);
                n.handle_timeout(t);
                drain_mirror(n);
            }
            Under::Replay(n) => {
                n.replay(m);
                n.handle_timeout(t);
                drain_mirror(n);
            }
            Under::Sym(n) => {
                n.handle_message(from, m);
                n.handle_timeout(t);
                drain_sym(n);
            }
        }
    }
});
