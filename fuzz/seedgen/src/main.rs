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
