//! Writes a handful of well-formed inputs for each fuzz target, built with txcast-proto's own
//! writers, so libFuzzer starts from packets that pass the checksum.
//!
//! Usage: `txcast-fuzz-seedgen <corpus-dir>`; writes `<corpus-dir>/<target>/seed-*`.

use std::fs;
use std::path::Path;

use txcast_proto::group::msg::{
    Epoch, MsgKind, MsgWriter, OrderRecord, RecordKind, FLAG_BB, FLAG_SYNC,
};
use txcast_proto::wire::{
    AckWriter, ClusterKey, Fragment, KeyRing, Kind, NakRange, PacketHeader, PacketKey,
    PacketWriter, HEADER_BYTES,
};
use txcast_proto::{Address, TxnId};

/// Must match the constants in the fuzz targets.
const PACKET_CLUSTER: u16 = 7;
const PACKET_KEY: ClusterKey = ClusterKey([0x5a; 32]);

fn header(cluster: u16) -> PacketHeader {
    PacketHeader {
        kind: Kind::Data,
        flags: 0,
        cluster,
        incarnation: 3,
        source: Address::new(1, 2, 3, 4),
        destination: Address::new(1, 5, 3, 0),
    }
}

const FRAG: Fragment = Fragment {
    msg_id: 5,
    index: 1,
    count: 3,
    total_len: 300,
};

fn push_some(w: &mut PacketWriter<'_, '_>) {
    assert!(w.push(b"hello"));
    assert!(w.push(b""));
    assert!(w.push_fragment(&[7u8; 100], FRAG));
}

/// One packet of each kind, with or without the key.
fn packets(key: Option<&PacketKey>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for kind in [
        Kind::Data,
        Kind::Datagram,
        Kind::Multicast,
        Kind::Group,
        Kind::Ack,
    ] {
        let mut buf = vec![0u8; 512];
        let h = header(PACKET_CLUSTER);
        let n = match kind {
            Kind::Data => {
                let mut w = PacketWriter::data(&mut buf, h, key, 10, 8, (99, 5), 64);
                push_some(&mut w);
                w.finish()
            }
            Kind::Datagram => {
                let mut w = PacketWriter::datagram(&mut buf, h, key);
                push_some(&mut w);
                w.finish()
            }
            Kind::Multicast => {
                let mut w = PacketWriter::multicast(&mut buf, h, key, TxnId(0xabc));
                push_some(&mut w);
                w.finish()
            }
            Kind::Group => {
                let mut w = PacketWriter::group(&mut buf, h, key);
                assert!(w.push(b"a group message"));
                w.finish()
            }
            Kind::Ack => {
                let naks = [
                    NakRange { start: 12, len: 2 },
                    NakRange { start: 20, len: 1 },
                ];
                AckWriter::write(&mut buf, h, key, (10, 5), 32, &naks)
            }
        };
        buf.truncate(n);
        out.push(buf);
    }
    out
}

fn write(dir: &Path, target: &str, seeds: &[Vec<u8>]) {
    let d = dir.join(target);
    fs::create_dir_all(&d).expect("create corpus dir");
    for (i, s) in seeds.iter().enumerate() {
        fs::write(d.join(format!("seed-{i:02}")), s).expect("write seed");
    }
}

/// Must match fuzz_targets/group.rs: the group's members, the joiner and its contact.
const GA: Address = Address::new(0, 1, 1, 0);
const GB: Address = Address::new(0, 2, 1, 0);
const GC: Address = Address::new(0, 3, 1, 0);
const GJ: Address = Address::new(0, 4, 1, 0);
const GX: Address = Address::new(0, 9, 1, 0);
/// The group's id (the default configuration's) and epoch.
const GROUP: u32 = 1;
const EPOCH1: Epoch = Epoch {
    number: 1,
    coordinator: GA,
};

/// One group message.
fn group_msg(
    kind: MsgKind,
    flags: u8,
    epoch: Epoch,
    from: Address,
    body: impl FnOnce(&mut MsgWriter<'_>) -> bool,
) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let mut w = MsgWriter::start(&mut buf, kind, flags, GROUP, epoch, from).expect("room");
    assert!(body(&mut w), "seed fits");
    let n = w.finish();
    buf.truncate(n);
    buf
}

fn order(from: Address, seq: u64, sender: Address, msg_id: u64, payload: Option<&[u8]>) -> Vec<u8> {
    let r = OrderRecord {
        seq,
        sender,
        msg_id,
        kind: RecordKind::Message,
        payload,
    };
    group_msg(MsgKind::Order, 0, EPOCH1, from, |w| {
        w.u64(seq) && w.u64(seq) && w.u64(0) && w.order_record(&r)
    })
}

/// Seeds for the group target: a control byte (milliseconds between chunks), then
/// length-prefixed messages.
fn group_seeds() -> Vec<Vec<u8>> {
    let epoch2 = Epoch {
        number: 2,
        coordinator: GB,
    };
    let welcome = group_msg(MsgKind::Welcome, 0, EPOCH1, GA, |w| {
        w.u64(3)
            && w.u64(0)
            && w.bytes(&[0; 8])
            && w.address(GA)
            && w.member_ids(&[(GA, 0), (GB, 0), (GC, 0), (GJ, 0)])
    });
    let view = group_msg(MsgKind::NewView, 0, epoch2, GB, |w| {
        w.u64(2) && w.address(GB) && w.survivors(&[(GB, 1, 2), (GC, 1, 2)])
    });
    let sessions: Vec<(u8, Vec<Vec<u8>>)> = vec![
        (10, vec![order(GA, 3, GB, 1, Some(b"hi"))]),
        (10, vec![order(GA, 4, GB, 1, Some(b"gap"))]),
        (10, vec![order(GA, 3, GC, 1, None)]),
        (
            10,
            vec![group_msg(MsgKind::Submit, 0, EPOCH1, GB, |w| {
                w.u64(2) && w.u64(2) && w.submit_record(1, b"hello") && w.submit_record(2, b"")
            })],
        ),
        (
            10,
            vec![group_msg(MsgKind::Submit, FLAG_BB, EPOCH1, GC, |w| {
                w.u64(2) && w.u64(2) && w.submit_record(1, &[0x42; 40])
            })],
        ),
        (
            50,
            vec![group_msg(MsgKind::Order, FLAG_SYNC, EPOCH1, GA, |w| {
                w.u64(2) && w.u64(2) && w.u64(2)
            })],
        ),
        (
            10,
            vec![group_msg(MsgKind::Ack, 0, EPOCH1, GB, |w| {
                w.u64(2) && w.u64(2)
            })],
        ),
        (
            10,
            vec![group_msg(MsgKind::Nak, 0, EPOCH1, GB, |w| {
                w.u64(0) && w.u64(0) && w.u64(1) && w.u64(2)
            })],
        ),
        (
            200,
            vec![group_msg(MsgKind::Probe, 0, EPOCH1, GB, |_| true)],
        ),
        (
            10,
            vec![group_msg(
                MsgKind::JoinRequest,
                0,
                Epoch::default(),
                Address::new(0, 5, 1, 0),
                |_| true,
            )],
        ),
        (
            10,
            vec![group_msg(MsgKind::Redirect, 0, EPOCH1, GX, |w| {
                w.address(GA)
            })],
        ),
        (
            10,
            vec![welcome.clone(), order(GA, 4, GA, 1, Some(b"to j"))],
        ),
        (
            10,
            vec![group_msg(MsgKind::LeaveRequest, 0, EPOCH1, GC, |_| true)],
        ),
        (
            100,
            vec![
                group_msg(MsgKind::Invite, 0, epoch2, GB, |_| true),
                group_msg(MsgKind::InviteReply, 0, epoch2, GC, |w| {
                    w.u64(2) && w.u64(2) && w.u64(1)
                }),
                view,
            ],
        ),
    ];
    sessions
        .into_iter()
        .map(|(ctl, msgs)| {
            let mut s = vec![ctl];
            for m in msgs {
                s.extend_from_slice(&(m.len() as u16).to_le_bytes());
                s.extend_from_slice(&m);
            }
            s
        })
        .collect()
}

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .expect("usage: txcast-fuzz-seedgen <corpus-dir>");
    let dir = Path::new(&dir);

    let plain = packets(None);
    let ring = KeyRing::from(PACKET_KEY);
    let keyed = packets(Some(&**ring.send_key()));

    // packet: control byte (bit 0 = key) then the packet.
    let mut seeds = Vec::new();
    for p in &plain {
        seeds.push([&[0u8][..], p].concat());
    }
    for p in &keyed {
        seeds.push([&[1u8][..], p].concat());
    }
    write(dir, "packet", &seeds);

    // records: the record sections of the DATAGRAM packet (whole, and each record alone).
    let records = plain[1][HEADER_BYTES..].to_vec();
    write(
        dir,
        "records",
        &[
            records.clone(),
            records[..9].to_vec(),
            records[9..13].to_vec(),
            records[13..].to_vec(),
        ],
    );

    // ack: the ACK body, and one without NAK ranges.
    let ack = plain[4][HEADER_BYTES..].to_vec();
    let mut bare = ack[..24].to_vec();
    bare[20] = 0;
    write(dir, "ack", &[ack, bare]);

    // roundtrip: fixed fields, then chunks (see fuzz_targets/roundtrip.rs).
    let mut seeds = Vec::new();
    for kind in 0..4u8 {
        for key in 0..2u8 {
            let mut s = vec![key | kind << 1, 0, 0xa5];
            s.extend_from_slice(&200u16.to_le_bytes()); // buffer size selector
            s.extend_from_slice(&40u16.to_le_bytes()); // flip_at
            s.push(0x01); // flip_xor
            s.extend_from_slice(&7u16.to_le_bytes()); // cluster
            s.extend_from_slice(&3u64.to_le_bytes()); // incarnation
            s.extend_from_slice(&[1, 0, 2, 0, 3, 0, 4, 0, 1, 0, 5, 0, 3, 0, 0, 0]);
            for v in [10u64, 8, 99, 5] {
                s.extend_from_slice(&v.to_le_bytes()); // first_seq, base, ack, ack incarnation
            }
            s.extend_from_slice(&64u32.to_le_bytes()); // credit
            s.extend_from_slice(&0xabcu64.to_le_bytes()); // txn
            if kind == 3 {
                for (start, len) in [(120u64, 2u32), (200, 1)] {
                    s.extend_from_slice(&start.to_le_bytes());
                    s.extend_from_slice(&len.to_le_bytes());
                }
            } else {
                s.push(0);
                s.extend_from_slice(&5u16.to_le_bytes());
                s.extend_from_slice(b"hello");
                s.push(1);
                s.extend_from_slice(&20u16.to_le_bytes());
                for v in [5u32, 0x0003_0001, 300] {
                    s.extend_from_slice(&v.to_le_bytes()); // msg_id, index|count, total
                }
                s.extend_from_slice(&[7u8; 20]);
            }
            seeds.push(s);
        }
    }
    write(dir, "roundtrip", &seeds);

    write(dir, "group", &group_seeds());
    write(dir, "rpc", &rpc_seeds());
    write(dir, "frag", &frag_seeds());
    write(dir, "oracle", &oracle_seeds());
    write(dir, "vsync", &vsync_seeds());
    write(dir, "module_args", &module_args_seeds());
    write(dir, "program", &program_seeds());
    write(dir, "crmem_msg", &crmem::msg_seeds());
    write(dir, "crmem_node", &crmem::node_seeds());
    let raid = raid::Seeds::new();
    write(dir, "raid_packet", &raid.packets);
    write(dir, "raid_site", &raid.site);
    write(dir, "raid_log", &raid.log);
    write(dir, "raid_client", &raid::client_seeds());
}

/// For fuzz_targets/module_args.rs: `[ctl][arguments]` of each instruction, and bad ones.
fn module_args_seeds() -> Vec<Vec<u8>> {
    use std::time::Duration;
    use txcast_proto::module::ping::PingRun;
    use txcast_proto::module::stream::StreamRun;
    let peer = Address::new(0, 1, 1, 0);
    let ping = PingRun {
        peer,
        exchanges: 3,
        bytes: 16,
        timeout: Duration::from_millis(20),
    };
    let stream = StreamRun {
        peer,
        count: 4,
        bytes: 32,
    };
    vec![
        [&[4 << 2][..], &ping.encode()].concat(),
        [&[1 | 4 << 2][..], &stream.encode()].concat(),
        [&[2][..], &4u32.to_le_bytes()].concat(),
        vec![0, 1, 2],
    ]
}

/// For fuzz_targets/program.rs: Push's example programs, as WAT text and as binary wasm.
fn program_seeds() -> Vec<Vec<u8>> {
    let texts = [
        include_str!("../../../crates/push/programs/count.wat"),
        include_str!("../../../crates/push/programs/commit2.wat"),
        include_str!("../../../crates/push/programs/multicast.wat"),
        include_str!("../../../crates/push/programs/multicast_many.wat"),
        include_str!("../../../crates/push/programs/oob.wat"),
        include_str!("../../../crates/push/programs/spin.wat"),
        include_str!("../../../crates/push/programs/trap.wat"),
    ];
    let mut out: Vec<Vec<u8>> = texts.iter().map(|t| t.as_bytes().to_vec()).collect();
    for t in texts {
        out.push(wat::parse_str(t).expect("an example program parses"));
    }
    out
}

/// Seeds for CRMem's targets, from its own encoders and nodes.
mod crmem {
    use txcast_crmem::msg::{self, SnapFields, WriteBuilder};
    use txcast_crmem::{Config, LockMapping, Mode, Node, NodeId, Role, SymNode};
    use txcast_proto::time::Instant;

    /// Must match fuzz_targets/crmem_node.rs.
    const SEGMENT_BYTES: usize = 1024;
    const DEADLINE: Instant = Instant(1_000_000_000_000);

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
            bundle_bytes: 128,
        }
    }

    fn mirror(node: u16, role: Role) -> Node {
        let mut n = Node::new(cfg(node), role);
        n.add_segment(SEGMENT_BYTES, mapping()).expect("segment");
        n
    }

    fn symmetric(node: u16) -> SymNode {
        let mut n = SymNode::new(cfg(node), 3, false);
        for home in 0..3 {
            n.add_segment(SEGMENT_BYTES, mapping(), home)
                .expect("segment");
        }
        n
    }

    /// A chunk of fuzz_targets/crmem_node.rs: from `from`, no time passing.
    fn chunk(from: NodeId, m: &[u8]) -> Vec<u8> {
        [&[from as u8][..], &(m.len() as u16).to_le_bytes(), m].concat()
    }

    /// The mirror primary's commit 1 (what fuzz_targets/crmem_node.rs's primary sends).
    fn primary_writes() -> Vec<Vec<u8>> {
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
        let mut out = Vec::new();
        while let Some((to, m)) = p.poll_transmit() {
            if to == 1 {
                out.push(m);
            }
        }
        out
    }

    /// A snapshot of the primary for node 2's first request (incarnation 1, request 1).
    fn snapshot() -> Vec<Vec<u8>> {
        let mut p = mirror(
            0,
            Role::Primary {
                backups: vec![1, 2],
            },
        );
        let mut req = Vec::new();
        msg::snap_req(1 << 20 | 1, &mut req);
        p.handle_message(2, &req);
        let mut out = Vec::new();
        while let Some((to, m)) = p.poll_transmit() {
            if to == 2 {
                out.push(m);
            }
        }
        out
    }

    /// What symmetric node 1 hears from nodes 0 and 2 while it commits a transaction, waits
    /// for node 0's locks, is asked for them back by node 0's own transaction and commits
    /// (fuzz_targets/crmem_node.rs's serving node), and what it sends.
    /// Messages with the node that sent them.
    type Heard = Vec<(NodeId, Vec<u8>)>;

    fn symmetric_exchange() -> (Heard, Vec<Vec<u8>>) {
        let mut nodes = [symmetric(0), symmetric(1), symmetric(2)];
        let t = nodes[1].begin(DEADLINE).expect("begin");
        nodes[1]
            .set_range(t, 1, 0, 100, Mode::Write)
            .expect("locks");
        nodes[1].range_mut(t, 1, 0, 100).expect("range").fill(0x22);
        nodes[1].commit(t).expect("commit");
        let t = nodes[1].begin(DEADLINE).expect("begin");
        nodes[1]
            .set_range(t, 0, 128, 64, Mode::Write)
            .expect("asks");
        let (mut heard, mut sent) = (Vec::new(), Vec::new());
        let mut pump = |nodes: &mut [SymNode; 3]| {
            for _ in 0..10 {
                for from in 0..3 {
                    while let Some((to, m)) = nodes[from].poll_transmit() {
                        if to == 1 {
                            heard.push((from as NodeId, m.clone()));
                        }
                        if from == 1 {
                            sent.push(m.clone());
                        }
                        nodes[to as usize].handle_message(from as NodeId, &m);
                    }
                }
            }
        };
        pump(&mut nodes);
        let w = nodes[0].begin(DEADLINE).expect("begin");
        nodes[0]
            .set_range(w, 0, 128, 64, Mode::Write)
            .expect("recalls");
        pump(&mut nodes);
        nodes[1].commit(t).expect("commit");
        pump(&mut nodes);
        (heard, sent)
    }

    /// Every kind of message, built with msg.rs's encoders or taken from symmetric nodes.
    pub fn msg_seeds() -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut w = WriteBuilder::new(&mut out, 7, 1, 3);
        w.range(2, 100, b"abc");
        w.range(0, 0, b"");
        w.finish();
        let mut seeds = vec![out];
        for f in [
            msg::ack as fn(u64, &mut Vec<u8>),
            msg::snap_req as fn(u64, &mut Vec<u8>),
        ] {
            let mut m = Vec::new();
            f(42, &mut m);
            seeds.push(m);
        }
        let mut m = Vec::new();
        msg::dropped(&mut m);
        seeds.push(m);
        let mut m = Vec::new();
        let f = SnapFields {
            last: true,
            nonce: 5,
            seq: 9,
            segment: 1,
            offset: 64,
        };
        msg::snap(f, b"xy", &mut m);
        seeds.push(m);
        let (heard, sent) = symmetric_exchange();
        seeds.extend(heard.into_iter().map(|(_, m)| m));
        seeds.extend(sent);
        seeds.sort();
        seeds.dedup();
        seeds
    }

    /// `[node][chunks]` for fuzz_targets/crmem_node.rs: what each node would hear.
    pub fn node_seeds() -> Vec<Vec<u8>> {
        let mut seeds = Vec::new();
        // The primary: acknowledgements of commit 1 from both backups.
        let mut ack = Vec::new();
        msg::ack(1, &mut ack);
        seeds.push([vec![0], chunk(1, &ack), chunk(2, &ack)].concat());
        // A backup: the primary's commit; the replaying backup: the same as log records.
        let writes: Vec<u8> = primary_writes().iter().flat_map(|m| chunk(0, m)).collect();
        seeds.push([vec![1], writes.clone()].concat());
        seeds.push([vec![3], writes].concat());
        // The recovering node: the primary's snapshot.
        let snap: Vec<u8> = snapshot().iter().flat_map(|m| chunk(0, m)).collect();
        seeds.push([vec![2], snap].concat());
        // The symmetric node: its peers' grants and acknowledgements.
        let (heard, _) = symmetric_exchange();
        let heard: Vec<u8> = heard.iter().flat_map(|(f, m)| chunk(*f, m)).collect();
        seeds.push([vec![4], heard].concat());
        seeds
    }
}

/// Seeds for Raid's targets, from a three-site database run in memory.
mod raid {
    use txcast_proto::time::Instant;
    use txcast_raid::client::{encode_audit, encode_reply, encode_request, Outcome, Refusal};
    use txcast_raid::log::frame;
    use txcast_raid::{Cause, Scale, Site, SiteConfig, Totals, Transfer, TxnId};

    /// Must match fuzz_targets/raid_site.rs and raid_log.rs.
    const SCALE: Scale = Scale {
        branches: 1,
        tellers_per_branch: 2,
        accounts_per_branch: 3,
        history_rows: 2,
    };
    const MS: u64 = 1_000_000;

    pub struct Seeds {
        pub packets: Vec<Vec<u8>>,
        pub site: Vec<Vec<u8>>,
        pub log: Vec<Vec<u8>>,
    }

    impl Seeds {
        /// Sites 0, 1, 2 (incarnation 1) form a view and commit a few transfers; site 0 took
        /// the same transfer at time 0 as fuzz_targets/raid_site.rs's site.
        pub fn new() -> Seeds {
            let mut sites: Vec<Site> = (0..3)
                .map(|s| Site::new(SiteConfig::new(s, 3, 1, SCALE)).expect("site"))
                .collect();
            let t = |delta| Transfer {
                account: 1,
                teller: 1,
                branch: 0,
                delta,
            };
            let _ = sites[0].submit(Instant(0), 1, t(5));
            let mut packets = Vec::new();
            // Packets to site 0 as chunks `[dt][len][packet]`.
            let mut to_zero = Vec::new();
            let mut last_to_zero = 0u64;
            let mut logs: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
            for ms in 0..3000u64 {
                let now = Instant(ms * MS);
                if ms % 500 == 250 {
                    let _ = sites[(ms / 500 % 3) as usize].submit(now, ms, t(ms as i64));
                }
                for s in 0..3 {
                    sites[s].handle_timeout(now);
                    while let Some(r) = sites[s].poll_log() {
                        logs[s].push(r);
                    }
                    let taken = sites[s].taken();
                    sites[s].logged(now, taken);
                    while sites[s].poll_event().is_some() {}
                    let mut out = Vec::new();
                    while let Some((to, p)) = sites[s].poll_transmit() {
                        out.push((to, p));
                    }
                    for (to, p) in out {
                        if to == 0 && to_zero.len() < 64 * 1024 {
                            let dt = (ms - last_to_zero).min(255) as u8;
                            last_to_zero = ms;
                            to_zero.push(dt);
                            to_zero.extend_from_slice(&(p.len() as u16).to_le_bytes());
                            to_zero.extend_from_slice(&p);
                        }
                        if packets.len() < 64 {
                            packets.push(p.clone());
                        }
                        let _ = sites[to as usize].handle_packet(now, &p);
                    }
                }
            }
            packets.sort();
            packets.dedup();
            // raid_log: a framed log (control 0), the bodies (1), each kind of record (2),
            // and an image (3).
            let mut log = Vec::new();
            let mut framed = vec![0u8];
            let mut bodies = vec![1u8];
            for r in &logs[0] {
                frame(r, &mut framed);
                bodies.extend_from_slice(&(r.len() as u16).to_le_bytes());
                bodies.extend_from_slice(r);
            }
            log.push(framed);
            log.push(bodies);
            let mut kinds: Vec<&Vec<u8>> = logs.iter().flatten().collect();
            kinds.sort_by_key(|r| r[0]);
            kinds.dedup_by_key(|r| r[0]);
            log.extend(kinds.into_iter().map(|r| [&[2u8][..], r].concat()));
            if let Some(recs) = sites[1].compact() {
                let mut framed = vec![0u8];
                for r in &recs {
                    frame(r, &mut framed);
                }
                log.push(framed);
            }
            let mut image = vec![3u8];
            sites[2].db().encode_image(&mut image);
            log.push(image);
            Seeds {
                packets,
                site: vec![to_zero],
                log,
            }
        }
    }

    /// Requests and replies of every kind, for fuzz_targets/raid_client.rs.
    pub fn client_seeds() -> Vec<Vec<u8>> {
        let t = Transfer {
            account: 3,
            teller: 1,
            branch: 0,
            delta: -7,
        };
        let txn = TxnId {
            site: 1,
            incarnation: 2,
            seq: 3,
        };
        let outcomes = [
            Outcome::Committed {
                txn,
                balance: 10,
                attempts: 1,
            },
            Outcome::Aborted {
                cause: Cause::Conflict,
                attempts: 3,
            },
            Outcome::Refused {
                reason: Refusal::BadKey,
                detail: "no account 99".into(),
            },
            Outcome::Unknown { attempts: 2 },
            Outcome::Audit {
                totals: Totals::ZERO,
                digest: 0xfeed,
            },
        ];
        let mut seeds = vec![encode_request(1, &t), encode_audit(2)];
        seeds.extend(outcomes.iter().map(|o| encode_reply(9, o)));
        seeds
    }
}

/// Chunks `[dt][len u16][message]` for fuzz_targets/vsync.rs (after a protocol byte): the
/// stack's messages of every kind in the group of one that `alone` (site 1) made, from site 2
/// (the joiner), and a commit that lets the joiner in.
fn vsync_seeds() -> Vec<Vec<u8>> {
    use txcast_proto::order::record::{self, Head, Kind};
    use txcast_proto::vsync::msg::{write, Header, VsMsg};
    use txcast_proto::vsync::{Ballot, Proposal, ViewId};
    let a = Address::new(0, 1, 1, 0);
    let b = Address::new(0, 2, 1, 0);
    let view = ViewId {
        number: 1,
        coordinator: a,
    };
    let h = Header {
        group: 1,
        view,
        from: b,
    };
    let ballot = Ballot {
        number: 1,
        coordinator: a,
    };
    let proposal = Proposal {
        coordinator: a,
        members: vec![a, b],
        cut: vec![1],
    };
    let mut msg_rec = Vec::new();
    record::write_head(
        &mut msg_rec,
        Kind::Msg,
        &Head {
            msg_id: 1,
            origin: b,
            ..Head::default()
        },
        b"hello",
    );
    let mut order = Vec::new();
    record::write_order(&mut order, &[(0, 1), (1, 3)]);
    let mut submit = Vec::new();
    record::write_submit(&mut submit, [(1u32, 1u64, &b"x"[..])].into_iter());
    let msgs = vec![
        VsMsg::Join { joiner: b },
        VsMsg::Data {
            stream: b,
            first: 1,
            received: vec![1, 0],
            records: vec![&msg_rec, &order],
        },
        VsMsg::Status {
            last: 2,
            received: vec![1],
        },
        VsMsg::Nak {
            stream: a,
            from: 1,
            to: 1,
        },
        VsMsg::Direct { payload: &submit },
        VsMsg::Token {
            round: 1,
            acc: vec![1],
            stable: vec![0],
        },
        VsMsg::Suspect { who: a },
        VsMsg::Flush { ballot },
        VsMsg::FlushOk {
            ballot,
            frozen: vec![1],
            accepted: Some((ballot, proposal.clone())),
        },
        VsMsg::Propose {
            ballot,
            proposal: proposal.clone(),
        },
        VsMsg::Accept { ballot },
        VsMsg::Commit { ballot, proposal },
        VsMsg::Leave,
        VsMsg::Gone,
    ];
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096];
    for (k, m) in msgs.iter().enumerate() {
        let n = write(&mut buf, &h, m).expect("fits");
        let mut s = vec![k as u8 % 4, 1];
        s.extend_from_slice(&(n as u16).to_le_bytes());
        s.extend_from_slice(&buf[..n]);
        out.push(s);
    }
    out
}

/// Chunks `[from][len u16][message]` for fuzz_targets/frag.rs: fragments of a short message,
/// an acknowledgement, an abort.
fn frag_seeds() -> Vec<Vec<u8>> {
    use txcast_proto::frag::msg::{
        write_abort, write_ack, write_data, AckHeader, AckStatus, DataHeader,
    };
    let chunk = |from: u8, m: &[u8]| {
        let mut c = vec![from];
        c.extend_from_slice(&(m.len() as u16).to_le_bytes());
        c.extend_from_slice(m);
        c
    };
    let mut buf = vec![0u8; 1024];
    let mut seeds = Vec::new();
    let mut all = Vec::new();
    for index in 0..3u32 {
        let h = DataHeader {
            incarnation: 7,
            transfer: 1,
            total_len: 150,
            fragment_bytes: 64,
            index,
            deadline_ms: 400,
        };
        let len = txcast_proto::frag::msg::fragment_len(150, 64, index);
        let n = write_data(&h, &vec![index as u8; len], &mut buf).expect("fits");
        all.extend(chunk(1, &buf[..n]));
    }
    seeds.push(all);
    let bitmap = [0b101u8];
    let a = AckHeader {
        status: AckStatus::Partial,
        window: 8,
        incarnation: 2,
        receiver_incarnation: 1,
        reassembly: 1,
        transfer: 1,
        cumulative: 1,
        bitmap: &bitmap,
    };
    let n = write_ack(&a, &mut buf).expect("fits");
    seeds.push(chunk(2, &buf[..n]));
    let n = write_abort(7, 1, &mut buf).expect("fits");
    seeds.push(chunk(3, &buf[..n]));
    seeds
}

/// `[decoder][bytes]` for fuzz_targets/oracle.rs: one well-formed input per decoder.
fn oracle_seeds() -> Vec<Vec<u8>> {
    use std::net::{Ipv4Addr, SocketAddrV4};
    use txcast_proto::oracle::{
        encode_list, encode_pattern, Change, Notification, Pattern, Register, Registry,
    };
    let at = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 20_001);
    let a = txcast_proto::Address::new(0, 1, 2, 0);
    let p = Pattern::exact(a);
    let reg = Register {
        lease: std::time::Duration::from_secs(3),
        location: at,
        notifiers: vec![p],
    };
    let n = Notification {
        change: Change::Registered,
        server: a,
        location: at,
    };
    let mut r = Registry::new(16);
    let _ = r.register(txcast_proto::Instant(1), a, &reg);
    let with = |k: u8, b: Vec<u8>| [vec![k], b].concat();
    vec![
        with(0, reg.encode()),
        with(1, n.encode()),
        with(2, encode_list(&[(a, at)])),
        with(3, encode_pattern(&p)),
        with(4, r.snapshot()),
    ]
}

/// Chunks `[from][len][message]` for fuzz_targets/rpc.rs: requests (new and a copy), and
/// replies to the target's calls (ids 1..=4, incarnation 1) of every status.
fn rpc_seeds() -> Vec<Vec<u8>> {
    use txcast_proto::rpc::msg::encode;
    use txcast_proto::rpc::{ReplyHeader, RequestHeader, RpcHeader, Status};
    let message = |h: RpcHeader, payload: &[u8]| {
        let mut buf = vec![0u8; 256];
        let n = encode(&h, payload, &mut buf).expect("fits");
        buf.truncate(n);
        buf
    };
    let chunk = |from: u8, m: Vec<u8>| [vec![from, m.len() as u8], m].concat();
    let request = |call_id, acked_below| {
        RpcHeader::Request(RequestHeader {
            request_type: 3,
            deadline_us: 20_000,
            incarnation: 9,
            call_id,
            acked_below,
            server_incarnation: 1,
        })
    };
    let reply = |status, call_id| {
        RpcHeader::Reply(ReplyHeader {
            status,
            incarnation: 1,
            call_id,
            server_incarnation: 4,
        })
    };
    let RpcHeader::Request(req) = request(3, 1) else {
        unreachable!()
    };
    let RpcHeader::Reply(rep) = reply(Status::Ok, 2) else {
        unreachable!()
    };
    let other = txcast_proto::Address::new(0, 3, 1, 0);
    let mut seeds = vec![
        chunk(0, message(request(1, 1), b"ping")),
        // A call handed on, its answer, and a probe.
        chunk(2, message(RpcHeader::Forwarded(req, other), b"fw")),
        chunk(3, message(RpcHeader::ForwardedReply(rep, other), b"fr")),
        chunk(4, message(RpcHeader::Probe(req), b"")),
        [
            chunk(1, message(request(1, 1), b"ping")),
            chunk(1, message(request(1, 1), b"ping")),
            chunk(5, message(request(2, 2), b"")),
        ]
        .concat(),
    ];
    for (i, status) in [
        Status::Ok,
        Status::NoHandler,
        Status::DeadlinePassed,
        Status::Failed,
        Status::Busy,
        Status::ReplyTooLong,
        Status::Resend,
        Status::Restarted,
    ]
    .into_iter()
    .enumerate()
    {
        seeds.push(chunk(
            i as u8,
            message(reply(status, 1 + i as u64 % 4), b"re"),
        ));
    }
    seeds
}
