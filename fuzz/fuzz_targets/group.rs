//! Group messages: `group::msg::parse` on arbitrary bytes, then the same bytes fed to members of
//! a small group in several states, which are then driven for a while.
//!
//! Input: one control byte, then chunks `[len u16 LE][bytes]` (a short last chunk takes what is
//! left). The whole input and every chunk are parsed; each chunk is then handed to every
//! member with `handle_message`, after which the members exchange what they send (in order,
//! no loss, a bounded number of messages), and their timers run a few steps. The control byte
//! is the time, in milliseconds, that passes after each chunk.
//!
//! The members (default configuration, group 1): `A` created the group and is its sequencer,
//! `B` and `C` joined it (epoch `1@A`, `A` ordered their joins as records 1 and 2); `J` is
//! joining through `X`, which is not a member (its requests are lost), so a fuzzed `Welcome` or
//! `Redirect` moves it on.
//!
//! Properties checked besides "never panics":
//! - an accepted message is canonical: writing its header and fields again with `MsgWriter`
//!   gives back the same bytes, and iterating its records or members reads them all;
//! - accepting depends on the payload bound only through `PayloadTooLong`;
//! - `handle_message` returns an error exactly when `parse` does, and counts it in
//!   `dropped_bad` without another counter moving;
//! - every message a member sends parses with the bound its receivers use.
#![no_main]

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use txcast_proto::group::msg::{
    parse, GroupHeader, GroupWireError, Msg, MsgWriter, ViewValue, GROUP_HEADER_BYTES, MEMBERS_MAX,
};
use txcast_proto::group::{Delivered, Dest, GroupConfig, Member};
use txcast_proto::{Address, Instant};

/// Must match fuzz/seedgen.
const A: Address = Address::new(0, 1, 1, 0);
const B: Address = Address::new(0, 2, 1, 0);
const C: Address = Address::new(0, 3, 1, 0);
const J: Address = Address::new(0, 4, 1, 0);
/// `J`'s contact: not one of the members, so only the fuzzer answers it.
const X: Address = Address::new(0, 9, 1, 0);

/// Messages exchanged among the members after each chunk, at most.
const EXCHANGE_MAX: usize = 256;
/// Timer steps after each chunk.
const TIMER_STEPS: usize = 4;
/// Chunks taken from one input, at most.
const CHUNKS_MAX: usize = 16;

/// Writes `hdr` and `m` again; `None` when `m` names something the writer cannot say.
fn value(w: &mut MsgWriter<'_>, v: &ViewValue<'_>) -> bool {
    assert!(v.members.iter().count() <= MEMBERS_MAX);
    w.view_value(v)
}

fn reencode(hdr: &GroupHeader, m: &Msg<'_>, out: &mut [u8]) -> Option<usize> {
    let mut w = MsgWriter::start(out, hdr.kind, hdr.flags, hdr.group, hdr.epoch, hdr.from)?;
    let ok = match *m {
        Msg::Submit {
            consumed,
            received,
            records,
        } => {
            w.u64(consumed)
                && w.u64(received)
                && records.iter().all(|(id, p)| w.submit_record(id, p))
        }
        Msg::Order {
            ordered_upto,
            accepted_upto,
            stable_upto,
            records,
        } => {
            w.u64(ordered_upto)
                && w.u64(accepted_upto)
                && w.u64(stable_upto)
                && records.iter().all(|r| w.order_record(&r))
        }
        Msg::Ack { consumed, received } => w.u64(consumed) && w.u64(received),
        Msg::Nak {
            consumed,
            received,
            from,
            to,
        } => w.u64(consumed) && w.u64(received) && w.u64(from) && w.u64(to),
        Msg::JoinRequest { join_id } => w.u64(join_id),
        Msg::Probe | Msg::LeaveRequest => true,
        Msg::Invite { base, config_seq } => w.epoch(base) && w.u64(config_seq),
        Msg::Redirect { sequencer } => w.address(sequencer),
        Msg::Welcome {
            join_seq,
            stable_upto,
            resilience,
            sequencer,
            members,
        } => {
            let ids: Vec<(Address, u64)> = members.iter().collect();
            assert!(ids.len() <= MEMBERS_MAX);
            w.u64(join_seq)
                && w.u64(stable_upto)
                && w.bytes(&[resilience, 0, 0, 0, 0, 0, 0, 0])
                && w.address(sequencer)
                && w.member_ids(&ids)
        }
        Msg::InviteReply {
            consumed,
            received,
            held_from,
            view,
            config_seq,
            accepted,
        } => {
            w.u64(consumed)
                && w.u64(received)
                && w.u64(held_from)
                && w.epoch(view)
                && w.u64(config_seq)
                && accepted.is_none_or(|(ballot, v)| w.epoch(ballot) && value(&mut w, &v))
        }
        Msg::Propose { value: v } => value(&mut w, &v),
        Msg::Accepted => true,
        Msg::NewView {
            start_seq,
            sequencer,
            quorum,
            committed,
            base,
            members,
        } => {
            let s: Vec<(Address, u64, u64)> = members.iter().collect();
            assert!(s.len() <= MEMBERS_MAX);
            w.u64(start_seq)
                && w.address(sequencer)
                && w.u64(quorum)
                && w.u64(u64::from(committed))
                && w.epoch(base)
                && w.survivors(&s)
        }
    };
    ok.then(|| w.finish())
}

/// Parses `b`, and when it is accepted checks it is canonical.
fn check_parse(b: &[u8], payload_max: usize, scratch: &mut [u8]) -> Result<(), GroupWireError> {
    let r = parse(b, payload_max);
    // The bound decides only between acceptance and `PayloadTooLong`.
    let unbounded = parse(b, usize::MAX);
    match (&r, &unbounded) {
        (Ok(_), Ok(_)) => {}
        // The bound is checked before the bytes are, so past it anything may follow.
        (Err(GroupWireError::PayloadTooLong(n)), _) => assert!(*n > payload_max),
        (Err(e), Err(u)) => assert_eq!(e, u, "the payload bound changed the error"),
        (r, u) => panic!("bounded {r:?} but unbounded {u:?}"),
    }
    let (hdr, m) = r?;
    black_box(format!("{hdr:?} {m:?}"));
    assert!(b.len() >= GROUP_HEADER_BYTES);
    assert_eq!(hdr.kind as u8, b[0]);
    match m {
        Msg::Submit { records, .. } => {
            for (id, p) in records.iter() {
                assert!(p.len() <= payload_max);
                black_box((id, p.len()));
            }
        }
        Msg::Order { records, .. } => {
            for r in records.iter() {
                assert!(r.payload.is_none_or(|p| p.len() <= payload_max));
                black_box(r);
            }
        }
        Msg::Welcome { members, .. } => assert!(members.iter().count() <= MEMBERS_MAX),
        Msg::NewView { members, .. } => assert!(members.iter().count() <= MEMBERS_MAX),
        Msg::Nak { from, to, .. } => assert!(from >= 1 && to >= from),
        _ => {}
    }
    let n = reencode(&hdr, &m, scratch).expect("a parsed message fits the buffer it came in");
    assert_eq!(&scratch[..n], b, "re-encoded message differs");
    Ok(())
}

/// The payload bound `Member::handle_message` parses with.
fn member_bound(cfg: &GroupConfig) -> usize {
    cfg.message_bytes_max.max(MEMBERS_MAX * 8 + 8)
}

struct World {
    now: Instant,
    members: Vec<Member>,
    queue: VecDeque<(Address, Vec<u8>)>,
    buf: Vec<u8>,
    bound: usize,
}

impl World {
    fn new() -> World {
        let cfg = GroupConfig::default();
        let t = Instant::ZERO;
        let a = Member::create(cfg.clone(), A, t).expect("default config");
        let b = Member::join(cfg.clone(), B, A, t).expect("default config");
        let mut w = World {
            now: t,
            members: vec![a, b],
            queue: VecDeque::new(),
            buf: vec![0u8; 65_536],
            bound: member_bound(&cfg),
        };
        w.exchange(usize::MAX);
        let c = Member::join(cfg.clone(), C, A, t).expect("default config");
        w.members.push(c);
        w.exchange(usize::MAX);
        for m in &w.members {
            assert_eq!(m.members(), &[A, B, C], "setup");
        }
        w.members
            .push(Member::join(cfg, J, X, t).expect("default config"));
        w
    }

    /// What member `i` sends goes into the queue; its deliveries and events are taken.
    fn drain(&mut self, i: usize) {
        let now = self.now;
        let m = &mut self.members[i];
        while let Some((dest, len)) = m.poll_transmit(now, &mut self.buf) {
            let out = &self.buf[..len];
            if let Err(e) = parse(out, self.bound) {
                panic!(
                    "{} sent a message its peers refuse: {e:?} {out:?}",
                    m.address()
                );
            }
            let to: Vec<Address> = match dest {
                Dest::To(a) => vec![a],
                Dest::All => m.fanout().collect(),
            };
            for a in to {
                self.queue.push_back((a, out.to_vec()));
            }
        }
        while m
            .poll_delivery(|d| match d.what {
                Delivered::Message { payload, .. } => black_box(payload.len()),
                Delivered::Rebuilt {
                    members, removed, ..
                } => black_box(members.len() + removed.len()),
                _ => black_box(d.seq as usize),
            })
            .is_some()
        {}
        while let Some(e) = m.poll_event() {
            black_box(e);
        }
        black_box(m.info());
    }

    /// Delivers queued messages (and what they cause) among the members, at most `max`.
    fn exchange(&mut self, max: usize) {
        for i in 0..self.members.len() {
            self.drain(i);
        }
        let mut n = 0;
        while let Some((to, bytes)) = self.queue.pop_front() {
            if n >= max {
                self.queue.clear();
                return;
            }
            n += 1;
            let Some(j) = self.members.iter().position(|m| m.address() == to) else {
                continue;
            };
            let now = self.now;
            self.members[j]
                .handle_message(now, &bytes)
                .expect("members send well-formed messages");
            self.drain(j);
        }
    }

    fn feed(&mut self, chunk: &[u8], expect: &Result<(), GroupWireError>) {
        let now = self.now;
        for m in &mut self.members {
            let before = m.counters().clone();
            let r = m.handle_message(now, chunk);
            match (expect, &r) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(f)) => {
                    assert_eq!(e, f);
                    let mut want = before.clone();
                    want.dropped_bad += 1;
                    assert_eq!(m.counters(), &want, "a bad message moved other counters");
                }
                (e, f) => panic!("parse says {e:?} but handle_message {f:?}"),
            }
        }
    }

    fn run_timers(&mut self, advance: Duration) {
        self.now = self.now + advance;
        for _ in 0..TIMER_STEPS {
            let next = self.members.iter().filter_map(|m| m.poll_timeout()).min();
            if let Some(t) = next {
                self.now = self.now.max(t);
            }
            let now = self.now;
            for m in &mut self.members {
                if m.poll_timeout().is_some_and(|t| t <= now) {
                    m.handle_timeout(now);
                }
            }
            self.exchange(EXCHANGE_MAX);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut scratch = vec![0u8; data.len().max(GROUP_HEADER_BYTES)];
    // The whole input as one message, with a small bound and the members' one.
    let _ = check_parse(data, 64, &mut scratch);
    let _ = check_parse(data, member_bound(&GroupConfig::default()), &mut scratch);

    let Some((&control, mut rest)) = data.split_first() else {
        return;
    };
    let advance = Duration::from_millis(control as u64);
    let mut world = World::new();
    let bound = world.bound;
    for _ in 0..CHUNKS_MAX {
        if rest.is_empty() {
            break;
        }
        let (chunk, tail) = if rest.len() < 2 {
            (rest, &rest[rest.len()..])
        } else {
            let len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
            let body = &rest[2..];
            body.split_at(len.min(body.len()))
        };
        rest = tail;
        let expect = check_parse(chunk, bound, &mut scratch);
        world.feed(chunk, &expect);
        world.exchange(EXCHANGE_MAX);
        world.run_timers(advance);
    }
});
