use super::msg::{self, ReplyHeader, RequestHeader, RpcHeader, RpcWireError, Status};
use super::*;
use crate::rng::Rng;
use crate::time::Instant;
use core::time::Duration;

const CLIENT: Address = Address::new(1, 0, 1, 0);
fn server_addr(i: u16) -> Address {
    Address::new(1, 1 + i, 2, 0)
}
const MS: Duration = Duration::from_millis(1);

fn cfg() -> RpcConfig {
    RpcConfig {
        retry_initial: 10 * MS,
        retry_max: 80 * MS,
        packet_lifetime: 100 * MS,
        ..RpcConfig::default()
    }
}

/// What a test server does with the calls it is told to execute.
#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    /// Replies at once with the request's payload reversed.
    Echo,
    /// Keeps the calls (the test replies itself).
    Hold,
    /// Receives nothing (a dead server).
    Dead,
    /// Hands every new call on to server `.0` (`forward_request`).
    Forward(u16),
}

/// A client and some servers joined by a network the test controls.
struct Net {
    now: Instant,
    client: Client,
    servers: Vec<(Server, Behaviour)>,
    /// Calls each server was told to execute, in order (token, type, payload).
    executed: Vec<Vec<(Token, u16, Vec<u8>)>>,
    /// Drop the next `n` replies (from any server).
    drop_replies: usize,
    /// Drop the next `n` requests (to any server).
    drop_requests: usize,
    buf: Vec<u8>,
}

impl Net {
    fn new(behaviours: &[Behaviour]) -> Net {
        Net::with(cfg(), behaviours)
    }

    fn with(c: RpcConfig, behaviours: &[Behaviour]) -> Net {
        Net {
            now: Instant(1_000_000_000),
            client: Client::new(c, 77).unwrap(),
            servers: behaviours
                .iter()
                .map(|&b| (Server::with_incarnation(c, 1).unwrap(), b))
                .collect(),
            executed: vec![Vec::new(); behaviours.len()],
            drop_replies: 0,
            drop_requests: 0,
            buf: vec![0; c.message_bytes_max],
        }
    }

    fn dests(&self) -> Vec<Address> {
        (0..self.servers.len() as u16).map(server_addr).collect()
    }

    /// Moves every message until nothing is in flight.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some((to, n)) = self.client.poll_transmit(self.now, &mut self.buf) {
                moved = true;
                let bytes = self.buf[..n].to_vec();
                if self.drop_requests > 0 {
                    self.drop_requests -= 1;
                    continue;
                }
                self.deliver_request(to, &bytes);
            }
            for i in 0..self.servers.len() {
                while let Some((to, n)) = self.servers[i].0.poll_transmit(&mut self.buf) {
                    moved = true;
                    let from = server_addr(i as u16);
                    if to != CLIENT {
                        // A call handed on to another server.
                        let bytes = self.buf[..n].to_vec();
                        self.deliver(from, to, &bytes);
                        continue;
                    }
                    if self.drop_replies > 0 {
                        self.drop_replies -= 1;
                        continue;
                    }
                    let (h, payload) = msg::decode(&self.buf[..n]).expect("valid reply");
                    match h {
                        RpcHeader::Reply(r) => self.client.handle_reply(from, &r, payload),
                        RpcHeader::ForwardedReply(r, called) => self
                            .client
                            .handle_forwarded_reply(from, called, &r, payload),
                        _ => panic!("a server sent the client a request"),
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn deliver_request(&mut self, to: Address, bytes: &[u8]) {
        self.deliver(CLIENT, to, bytes)
    }

    /// A request from the client, or a call handed on by another server.
    fn deliver(&mut self, from: Address, to: Address, bytes: &[u8]) {
        let i = (0..self.servers.len() as u16)
            .position(|k| server_addr(k) == to)
            .expect("a known server");
        let (h, payload) = msg::decode(bytes).expect("valid request");
        let (server, behaviour) = &mut self.servers[i];
        if *behaviour == Behaviour::Dead {
            return;
        }
        let (verdict, r) = match h {
            RpcHeader::Request(r) => (server.handle_request(self.now, from, &r), r),
            RpcHeader::Forwarded(r, client) => {
                (server.handle_forwarded(self.now, from, client, &r), r)
            }
            _ => panic!("a reply sent to a server"),
        };
        if let Verdict::Execute {
            token,
            request_type,
            ..
        } = verdict
        {
            match *behaviour {
                Behaviour::Forward(j) => {
                    assert!(server.forward(
                        token,
                        server_addr(j),
                        1,
                        request_type,
                        r.deadline_us,
                        payload
                    ));
                    return;
                }
                Behaviour::Echo => {
                    let mut out = payload.to_vec();
                    out.reverse();
                    assert!(server.reply(token, Status::Ok, &out));
                }
                _ => {}
            }
            self.executed[i].push((token, request_type, payload.to_vec()));
        }
    }

    /// Advances time by `d` in steps of at most 1 ms, running timers and the network.
    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = (self.now + MS).min(end);
            self.client.handle_timeout(self.now);
            for (s, _) in &mut self.servers {
                s.handle_timeout(self.now);
            }
            self.pump();
        }
    }

    fn call(&mut self, dests: &[Address], payload: &[u8], c: Completion, d: Duration) -> CallId {
        let id = self
            .client
            .call(self.now, dests, 9, payload, c, d)
            .expect("call accepted");
        self.pump();
        id
    }

    fn outcome(&mut self, id: CallId) -> Option<Outcome> {
        let mut found = None;
        while let Some((i, o)) = self.client.poll_event() {
            if i == id {
                found = Some(o);
            }
        }
        found
    }
}

#[test]
fn a_call_is_answered() {
    let mut n = Net::new(&[Behaviour::Echo]);
    let id = n.call(&[server_addr(0)], b"abc", Completion::First, 100 * MS);
    let o = n.outcome(id).expect("finished");
    assert_eq!(o.end, End::Complete);
    assert_eq!(o.replies, vec![(server_addr(0), Ok(b"cba".to_vec()))]);
    assert!(o.missing.is_empty());
    assert_eq!(n.executed[0].len(), 1);
    assert_eq!(n.executed[0][0].1, 9, "request type carried");
    assert_eq!(n.client.outstanding(), 0);
}

#[test]
fn a_lost_reply_is_answered_again_from_the_cache_not_executed_twice() {
    let mut n = Net::new(&[Behaviour::Echo]);
    n.drop_replies = 2;
    let id = n.call(&[server_addr(0)], b"x", Completion::First, 500 * MS);
    assert!(n.outcome(id).is_none());
    n.run_for(100 * MS);
    let o = n.outcome(id).expect("finished after retransmissions");
    assert_eq!(o.replies, vec![(server_addr(0), Ok(b"x".to_vec()))]);
    assert_eq!(n.executed[0].len(), 1, "executed once");
    let s = &n.servers[0].0.counters;
    assert_eq!(s.duplicates_answered, 2);
    assert!(n.client.counters.requests_resent >= 2);
}

#[test]
fn a_lost_request_is_sent_again() {
    let mut n = Net::new(&[Behaviour::Echo]);
    n.drop_requests = 1;
    let id = n.call(&[server_addr(0)], b"x", Completion::First, 500 * MS);
    n.run_for(30 * MS);
    assert_eq!(n.outcome(id).expect("finished").end, End::Complete);
    assert_eq!(n.executed[0].len(), 1);
}

#[test]
fn copies_of_a_running_call_are_dropped_and_it_completes_when_it_replies() {
    let mut n = Net::new(&[Behaviour::Hold]);
    let id = n.call(&[server_addr(0)], b"slow", Completion::First, 500 * MS);
    n.run_for(100 * MS);
    assert!(n.outcome(id).is_none());
    assert_eq!(n.executed[0].len(), 1, "copies are not executed");
    assert!(n.servers[0].0.counters.duplicates_running >= 2);
    let token = n.executed[0][0].0;
    assert!(n.servers[0].0.reply(token, Status::Ok, b"done"));
    n.pump();
    let o = n.outcome(id).expect("finished");
    assert_eq!(o.replies, vec![(server_addr(0), Ok(b"done".to_vec()))]);
}

#[test]
fn retransmissions_back_off_to_the_bound() {
    let mut n = Net::new(&[Behaviour::Dead]);
    let id = n.call(&[server_addr(0)], b"x", Completion::First, 400 * MS);
    n.run_for(399 * MS);
    // Retries at 10, 30, 70, 150, 230, 310, 390 ms (10, 20, 40, 80, 80...).
    assert_eq!(n.client.counters.requests_resent, 7);
    assert!(n.outcome(id).is_none());
    n.run_for(MS);
    let o = n.outcome(id).expect("ended by its deadline");
    assert_eq!(o.end, End::DeadlinePassed);
    assert!(o.replies.is_empty());
    assert_eq!(o.missing, vec![server_addr(0)]);
    assert_eq!(n.client.counters.timed_out, 1);
}

#[test]
fn multicast_calls_complete_on_first_quorum_or_all_and_name_who_did_not_answer() {
    use Behaviour::*;
    for (completion, end, answers) in [
        (Completion::First, End::Complete, 1),
        (Completion::Quorum(2), End::Complete, 2),
        (Completion::All, End::DeadlinePassed, 2),
    ] {
        let mut n = Net::new(&[Echo, Dead, Echo]);
        let dests = n.dests();
        let id = n.call(&dests, b"q", completion, 50 * MS);
        n.run_for(60 * MS);
        let o = n.outcome(id).expect("ended");
        assert_eq!(o.end, end, "{completion:?}");
        assert_eq!(o.replies.len(), answers, "{completion:?}");
        for (from, r) in &o.replies {
            assert!(*from == server_addr(0) || *from == server_addr(2));
            assert_eq!(r.as_deref(), Ok(&b"q"[..]));
        }
        assert!(o.missing.contains(&server_addr(1)));
        assert_eq!(o.missing.len(), 3 - answers);
    }
}

#[test]
fn a_call_handed_on_is_answered_by_the_other_server_in_the_called_servers_name() {
    use Behaviour::*;
    let mut n = Net::new(&[Forward(1), Echo]);
    let id = n.call(&[server_addr(0)], b"abc", Completion::First, 100 * MS);
    let o = n.outcome(id).expect("finished");
    assert_eq!(o.end, End::Complete);
    assert_eq!(o.replies, vec![(server_addr(0), Ok(b"cba".to_vec()))]);
    assert!(n.executed[0].is_empty(), "the forwarder runs nothing");
    let (token, request_type, payload) = &n.executed[1][0];
    assert_eq!(n.executed[1].len(), 1);
    assert_eq!(token.client, CLIENT, "the original caller");
    assert_eq!(token.called, Some(server_addr(0)));
    assert_eq!((*request_type, &payload[..]), (9, &b"abc"[..]));
    assert_eq!(n.servers[0].0.counters.forwarded, 1);
    assert_eq!(n.servers[0].0.counters.replies_sent, 0);
    assert_eq!(n.client.counters.replies_stranger, 0);
}

/// The flaw the simulator found in the first cut (seed 1): the target's share and the share
/// handed on to it are two calls, each run once.
#[test]
fn a_call_to_a_forwarder_and_its_target_runs_once_per_share_at_the_target() {
    use Behaviour::*;
    let mut n = Net::new(&[Forward(1), Echo]);
    let dests = n.dests();
    let id = n.call(&dests, b"xy", Completion::All, 100 * MS);
    let o = n.outcome(id).expect("finished");
    assert_eq!(o.end, End::Complete);
    let mut from: Vec<Address> = o.replies.iter().map(|r| r.0).collect();
    from.sort();
    assert_eq!(from, dests);
    assert!(o.replies.iter().all(|r| r.1.as_deref() == Ok(&b"yx"[..])));
    let called: Vec<Option<Address>> = n.executed[1].iter().map(|e| e.0.called).collect();
    assert_eq!(called.len(), 2);
    assert!(called.contains(&None) && called.contains(&Some(server_addr(0))));
}

#[test]
fn copies_of_a_call_handed_on_are_handed_on_and_answered_from_the_targets_cache() {
    use Behaviour::*;
    let mut n = Net::new(&[Forward(1), Echo]);
    n.drop_replies = 2;
    let id = n.call(&[server_addr(0)], b"x", Completion::First, 500 * MS);
    assert!(n.outcome(id).is_none());
    n.run_for(100 * MS);
    let o = n.outcome(id).expect("finished after retransmissions");
    assert_eq!(o.replies, vec![(server_addr(0), Ok(b"x".to_vec()))]);
    assert_eq!(n.executed[1].len(), 1, "executed once");
    assert_eq!(n.servers[0].0.counters.duplicates_forwarded, 2);
    assert_eq!(n.servers[1].0.counters.duplicates_answered, 2);
}

#[test]
fn a_call_handed_on_to_a_dead_server_ends_by_its_deadline_naming_the_one_called() {
    use Behaviour::*;
    let mut n = Net::new(&[Forward(1), Dead]);
    let id = n.call(&[server_addr(0)], b"x", Completion::First, 50 * MS);
    n.run_for(60 * MS);
    let o = n.outcome(id).expect("ended");
    assert_eq!(o.end, End::DeadlinePassed);
    assert_eq!(o.missing, vec![server_addr(0)]);
}

/// Found by the fault-free simulator run: the client's `acked_below` is per destination, so
/// what it says to X about calls to X must not make X forget a call to F handed on to X.
#[test]
fn a_clients_floor_at_the_target_does_not_forget_calls_handed_on_to_it() {
    use Behaviour::*;
    let mut n = Net::new(&[Forward(1), Hold]);
    let via_f = n.call(&[server_addr(0)], b"1", Completion::First, 500 * MS);
    let (t1, ..) = n.executed[1][0];
    assert_eq!(t1.called, Some(server_addr(0)));
    // Two calls to X itself; the second tells X every call to X below it is finished.
    let direct = n.call(&[server_addr(1)], b"2", Completion::First, 500 * MS);
    let (t2, ..) = n.executed[1][1];
    assert!(n.servers[1].0.reply(t2, Status::Ok, b"two"));
    n.pump();
    assert!(n.outcome(direct).is_some());
    let _third = n.call(&[server_addr(1)], b"3", Completion::First, 500 * MS);
    assert!(t1.call_id < t2.call_id && n.executed[1].len() == 3);
    // The call handed on is still remembered: its answer is lost, and the copy F hands on
    // again is answered from X's cache.
    n.drop_replies = 1;
    assert!(n.servers[1].0.reply(t1, Status::Ok, b"one"));
    n.pump();
    n.run_for(50 * MS);
    let o = n.outcome(via_f).expect("answered");
    assert_eq!(o.replies, vec![(server_addr(0), Ok(b"one".to_vec()))]);
    let x = &n.servers[1].0.counters;
    assert_eq!((x.duplicates_answered, x.duplicates_finished), (1, 0));
}

#[test]
fn only_a_call_of_ones_own_not_yet_answered_can_be_handed_on() {
    use Behaviour::*;
    let mut n = Net::new(&[Hold, Forward(0), Hold]);
    // Server 1 hands the call to server 0, which holds it: it cannot hand it on again.
    let id = n.call(&[server_addr(1)], b"x", Completion::First, 100 * MS);
    let (t0, ..) = n.executed[0][0];
    assert_eq!(t0.called, Some(server_addr(1)));
    let s0 = &mut n.servers[0].0;
    assert!(
        !s0.forward(t0, server_addr(2), 1, 9, 1000, b"x"),
        "handed on twice"
    );
    // Answered: nothing to hand on.
    assert!(s0.reply(t0, Status::Ok, b"ok"));
    assert!(!s0.forward(t0, server_addr(2), 1, 9, 1000, b"x"));
    // Not a call it knows.
    let stranger = Token { call_id: 999, ..t0 };
    assert!(!s0.forward(stranger, server_addr(2), 1, 9, 1000, b"x"));
    n.pump();
    let o = n.outcome(id).expect("answered");
    assert_eq!(o.replies, vec![(server_addr(1), Ok(b"ok".to_vec()))]);
    // A call of server 2's own, held and then handed on, cannot be handed on a second time.
    let id = n.call(&[server_addr(2)], b"y", Completion::First, 100 * MS);
    let (t2, ..) = n.executed[2][0];
    let s2 = &mut n.servers[2].0;
    assert!(s2.forward(t2, server_addr(0), 1, 9, 1000, b"y"));
    assert!(!s2.forward(t2, server_addr(1), 1, 9, 1000, b"y"));
    assert!(
        !s2.reply(t2, Status::Ok, b"mine"),
        "answered by the one it went to"
    );
    n.pump();
    let (t, _, p) = n.executed[0][1].clone();
    assert_eq!((t.called, &p[..]), (Some(server_addr(2)), &b"y"[..]));
    assert!(n.servers[0].0.reply(t, Status::Ok, b"theirs"));
    n.pump();
    let o = n.outcome(id).expect("answered");
    assert_eq!(o.replies, vec![(server_addr(2), Ok(b"theirs".to_vec()))]);
}

/// A call to a group sends its first copy once for all (the caller multicasts it); the
/// members that did not get it are sent copies of their own.
#[test]
fn a_call_sent_as_one_copy_is_retransmitted_to_each_member_that_did_not_answer() {
    use Behaviour::*;
    let mut n = Net::new(&[Echo, Echo, Echo]);
    let dests = n.dests();
    // An earlier call to member 1, its request lost: still outstanding.
    n.drop_requests = 1;
    let earlier = n.call(&dests[1..2], b"e", Completion::First, 200 * MS);
    let id = n
        .client
        .call(n.now, &dests, 9, b"ab", Completion::All, 200 * MS)
        .unwrap();
    let mut buf = vec![0; 1400];
    let len = n.client.encode_first(id, n.now, &mut buf).unwrap();
    let first = buf[..len].to_vec();
    assert!(
        n.client.poll_transmit(n.now, &mut buf).is_none(),
        "no copy per member"
    );
    buf[..len].copy_from_slice(&first);
    let (h, _) = msg::decode(&buf[..len]).unwrap();
    let RpcHeader::Request(r) = h else {
        panic!("a request")
    };
    assert_eq!(r.acked_below, earlier.0, "the lowest of the members'");
    // The multicast reaches members 0 and 2 only.
    n.deliver_request(dests[0], &buf[..len]);
    n.deliver_request(dests[2], &buf[..len]);
    n.pump();
    assert!(n.outcome(id).is_none());
    n.run_for(15 * MS);
    let o = n.outcome(id).expect("complete");
    assert_eq!(o.end, End::Complete);
    assert_eq!(o.replies.len(), 3);
    // The earlier call's request and its copy; the multicast and one copy.
    assert_eq!(n.client.counters.requests_sent, 4);
    assert_eq!(n.executed.iter().map(Vec::len).sum::<usize>(), 4);
    assert!(
        n.client.encode_first(id, n.now, &mut buf).is_none(),
        "finished"
    );
}

/// A probe (a copy without its payload, for a request that came as a long message) is
/// answered from memory when the call is known, and with `Resend` when it is not; it never
/// runs anything.
#[test]
fn probes_are_answered_from_memory_or_ask_for_the_whole_request() {
    use Behaviour::*;
    let mut n = Net::new(&[Hold]);
    let s = server_addr(0);
    let id = n
        .client
        .call(n.now, &[s], 9, b"payload", Completion::First, 200 * MS)
        .unwrap();
    let mut buf = vec![0; 64];
    let (_, len) = n.client.poll_transmit(n.now, &mut buf).unwrap();
    let (h, _) = msg::decode(&buf[..len]).unwrap();
    let RpcHeader::Request(r) = h else {
        panic!("a request")
    };
    let probe = |r: RequestHeader| {
        let mut b = [0u8; RPC_HEADER_BYTES];
        assert_eq!(
            msg::encode(&RpcHeader::Probe(r), &[], &mut b),
            Some(RPC_HEADER_BYTES)
        );
        assert_eq!(msg::decode(&b).unwrap(), (RpcHeader::Probe(r), &[][..]));
        r
    };
    // Unknown: Resend, nothing executed, nothing remembered.
    let v = n.servers[0].0.handle_probe(n.now, CLIENT, &probe(r));
    assert_eq!(v, Verdict::Dropped);
    assert_eq!(n.servers[0].0.remembered(), 0);
    n.pump();
    assert_eq!(n.client.counters.resend_asked, 1);
    assert_eq!(n.servers[0].0.counters.probes_unknown, 1);
    assert!(n.outcome(id).is_none(), "not an answer");
    // The whole request: executed once; a probe while it runs is dropped, one after it is
    // answered from the cache.
    n.deliver_request(s, &buf[..len]);
    let (t, ..) = n.executed[0][0];
    assert_eq!(
        n.servers[0].0.handle_probe(n.now, CLIENT, &r),
        Verdict::Dropped
    );
    assert!(n.servers[0].0.reply(t, Status::Ok, b"done"));
    n.drop_replies = 1;
    n.pump();
    assert_eq!(
        n.servers[0].0.handle_probe(n.now, CLIENT, &r),
        Verdict::Answered
    );
    n.pump();
    let o = n.outcome(id).expect("answered");
    assert_eq!(o.replies, vec![(s, Ok(b"done".to_vec()))]);
    assert_eq!(n.executed[0].len(), 1);
    // A probe must be the header alone.
    let mut b = [0u8; RPC_HEADER_BYTES + 8];
    assert!(msg::encode(&RpcHeader::Probe(r), b"x", &mut b).is_none());
    msg::encode(&RpcHeader::Request(r), b"x", &mut b).unwrap();
    b[1] = 5;
    assert_eq!(
        msg::decode(&b[..RPC_HEADER_BYTES + 1]).unwrap_err(),
        RpcWireError::ProbeWithPayload
    );
}

/// A server that restarted does not run a copy of a call its predecessor may have run: the
/// copy names the incarnation the client knew when the call started, even once the client has
/// heard from the new one on another call. A call started before the client heard from the
/// server at all names none (the window left open).
#[test]
fn a_restarted_server_does_not_run_copies_of_calls_made_to_its_predecessor() {
    use Behaviour::*;
    let mut n = Net::new(&[Hold]);
    let s = server_addr(0);
    let first = n.call(&[s], b"0", Completion::First, 500 * MS);
    let (t, ..) = n.executed[0][0];
    assert!(n.servers[0].0.reply(t, Status::Ok, b"ok"));
    n.pump();
    assert!(n.outcome(first).is_some());
    assert_eq!(n.client.server_incarnation(s), Some(1));
    // Call A runs at incarnation 1, whose answer is lost; then the server restarts.
    let a = n.call(&[s], b"A", Completion::First, 500 * MS);
    assert_eq!(n.executed[0].len(), 2);
    n.servers[0] = (Server::with_incarnation(cfg(), 2).unwrap(), Echo);
    // Call B, started while the client knew incarnation 1, is refused too (for all the
    // client knows, it reached the predecessor); the answer teaches incarnation 2.
    let b = n.call(&[s], b"B", Completion::First, 500 * MS);
    let o = n.outcome(b).expect("answered");
    assert_eq!(o.replies, vec![(s, Err(RemoteError::Restarted))]);
    assert_eq!(n.client.server_incarnation(s), Some(2));
    // A's copies still name incarnation 1: not run, answered Restarted.
    n.run_for(30 * MS);
    let o = n.outcome(a).expect("answered");
    assert_eq!(o.replies, vec![(s, Err(RemoteError::Restarted))]);
    assert_eq!(n.executed[0].len(), 2, "nothing ran at incarnation 2");
    assert!(n.servers[0].0.counters.other_incarnation >= 1);
    // A new call names incarnation 2 and runs.
    let c = n.call(&[s], b"C", Completion::First, 500 * MS);
    assert_eq!(n.outcome(c).unwrap().replies, vec![(s, Ok(b"C".to_vec()))]);
}

#[test]
fn remote_errors_are_answers() {
    let mut n = Net::new(&[Behaviour::Hold, Behaviour::Hold, Behaviour::Hold]);
    let dests = n.dests();
    let id = n.call(&dests, b"e", Completion::All, 100 * MS);
    let t: Vec<Token> = (0..3).map(|i| n.executed[i][0].0).collect();
    assert!(n.servers[0].0.reply(t[0], Status::NoHandler, &[]));
    assert!(n.servers[1]
        .0
        .reply(t[1], Status::Failed, "no such account".as_bytes()));
    assert!(n.servers[2].0.reply(t[2], Status::DeadlinePassed, &[]));
    n.pump();
    let o = n.outcome(id).expect("complete");
    assert_eq!(o.end, End::Complete);
    assert_eq!(
        o.replies,
        vec![
            (server_addr(0), Err(RemoteError::NoHandler)),
            (
                server_addr(1),
                Err(RemoteError::Failed("no such account".into()))
            ),
            (server_addr(2), Err(RemoteError::DeadlinePassed)),
        ]
    );
    assert_eq!(n.servers[2].0.counters.deadline_passed, 1);
}

#[test]
fn a_result_too_long_for_a_reply_is_answered_as_such() {
    let mut n = Net::new(&[Behaviour::Hold]);
    let id = n.call(&[server_addr(0)], b"", Completion::First, 100 * MS);
    let t = n.executed[0][0].0;
    let long = vec![0u8; cfg().payload_bytes_max() + 1];
    assert!(n.servers[0].0.reply(t, Status::Ok, &long));
    n.pump();
    let o = n.outcome(id).unwrap();
    assert_eq!(o.replies[0].1, Err(RemoteError::ReplyTooLong));
}

#[test]
fn a_full_server_answers_busy_and_executes_the_call_once_room_is_made() {
    let c = RpcConfig {
        replies_max: 1,
        ..cfg()
    };
    let mut n = Net::with(c, &[Behaviour::Hold]);
    let first = n.call(&[server_addr(0)], b"1", Completion::First, 500 * MS);
    let second = n.call(&[server_addr(0)], b"2", Completion::First, 500 * MS);
    assert_eq!(n.executed[0].len(), 1, "no room for the second");
    assert_eq!(n.servers[0].0.counters.busy, 1);
    assert_eq!(n.client.counters.busy, 1);
    let t = n.executed[0][0].0;
    assert!(n.servers[0].0.reply(t, Status::Ok, b"one"));
    n.pump();
    assert_eq!(n.outcome(first).unwrap().end, End::Complete);
    // The second's retransmission says the first is finished: its entry is forgotten and the
    // second runs.
    n.run_for(20 * MS);
    assert_eq!(n.executed[0].len(), 2);
    assert_eq!(n.executed[0][1].2, b"2");
    let t = n.executed[0][1].0;
    assert!(n.servers[0].0.reply(t, Status::Ok, b"two"));
    n.pump();
    assert_eq!(
        n.outcome(second).unwrap().replies,
        vec![(server_addr(0), Ok(b"two".to_vec()))]
    );
}

#[test]
fn finished_calls_are_forgotten_and_their_late_copies_dropped() {
    let mut n = Net::new(&[Behaviour::Echo]);
    let first = n.call(&[server_addr(0)], b"1", Completion::First, 100 * MS);
    assert!(n.outcome(first).is_some());
    assert_eq!(n.servers[0].0.remembered(), 1);
    // The next request says call 1 is finished.
    let second = n.call(&[server_addr(0)], b"2", Completion::First, 100 * MS);
    assert!(n.outcome(second).is_some());
    assert_eq!(
        n.servers[0].0.remembered(),
        1,
        "call 1 forgotten, call 2 kept"
    );
    // A copy of call 1 wandering in the network arrives: not executed again.
    let late = RequestHeader {
        request_type: 9,
        deadline_us: 50_000,
        incarnation: 77,
        call_id: 1,
        acked_below: 1,
        server_incarnation: 0,
    };
    let v = n.servers[0].0.handle_request(n.now, CLIENT, &late);
    assert_eq!(v, Verdict::Dropped);
    assert_eq!(n.servers[0].0.counters.duplicates_finished, 1);
    assert_eq!(n.executed[0].len(), 2);
}

#[test]
fn a_server_remembers_a_call_until_its_deadline_and_the_packet_lifetime_have_passed() {
    let mut n = Net::new(&[Behaviour::Echo]);
    let id = n.call(&[server_addr(0)], b"1", Completion::First, 200 * MS);
    assert!(n.outcome(id).is_some());
    n.run_for(299 * MS);
    assert_eq!(
        n.servers[0].0.remembered(),
        1,
        "deadline 200 ms + lifetime 100 ms"
    );
    // A copy sent just before the deadline, arriving late, is still answered from memory.
    let copy = RequestHeader {
        request_type: 9,
        deadline_us: 1,
        incarnation: 77,
        call_id: 1,
        acked_below: 1,
        server_incarnation: 0,
    };
    assert_eq!(
        n.servers[0].0.handle_request(n.now, CLIENT, &copy),
        Verdict::Answered
    );
    n.run_for(2 * MS);
    assert_eq!(n.servers[0].0.remembered(), 0);
    assert_eq!(n.executed[0].len(), 1);
}

#[test]
fn a_new_client_answered_busy_takes_no_place() {
    let c = RpcConfig {
        replies_max: 1,
        ..cfg()
    };
    let mut s = Server::new(c).unwrap();
    let r = RequestHeader {
        request_type: 1,
        deadline_us: 1000,
        incarnation: 1,
        call_id: 1,
        acked_below: 1,
        server_incarnation: 0,
    };
    let now = Instant(0);
    assert!(matches!(
        s.handle_request(now, server_addr(5), &r),
        Verdict::Execute { .. }
    ));
    assert_eq!(s.handle_request(now, server_addr(6), &r), Verdict::Busy);
    assert_eq!(s.clients(), 1);
}

/// Found in review: a full cache made the server forget, in the middle of a request, the
/// record of the client making it, and then look it up (a panic).
#[test]
fn a_request_arriving_after_its_clients_record_expired_on_a_full_server_is_handled() {
    let c = RpcConfig {
        replies_max: 1,
        ..cfg()
    };
    let mut s = Server::new(c).unwrap();
    let t0 = Instant(1_000_000_000);
    let r1 = RequestHeader {
        request_type: 9,
        deadline_us: 1000,
        incarnation: 77,
        call_id: 1,
        acked_below: 1,
        server_incarnation: 0,
    };
    let Verdict::Execute { token, .. } = s.handle_request(t0, CLIENT, &r1) else {
        panic!("executed")
    };
    assert!(s.reply(token, Status::Ok, b""));
    // No handle_timeout in between.
    let later = t0 + MS + c.packet_lifetime + MS;
    let r2 = RequestHeader { call_id: 2, ..r1 };
    assert!(matches!(
        s.handle_request(later, CLIENT, &r2),
        Verdict::Execute { .. }
    ));
}

/// Found in review: copies of one call carry less and less time; an early copy arriving last
/// must get the call's answer, whatever the server's own `deadline_max`.
#[test]
fn every_copy_of_a_call_gets_the_same_answer_whatever_its_deadline() {
    let mut s = Server::new(RpcConfig {
        deadline_max: Duration::from_secs(1),
        ..cfg()
    })
    .unwrap();
    let mut buf = vec![0u8; 1500];
    let now = Instant(0);
    let later = RequestHeader {
        request_type: 9,
        deadline_us: 990_000,
        incarnation: 77,
        call_id: 1,
        acked_below: 1,
        server_incarnation: 0,
    };
    let earlier = RequestHeader {
        deadline_us: 1_010_000,
        ..later
    };
    let Verdict::Execute { token, .. } = s.handle_request(now, CLIENT, &later) else {
        panic!("executed")
    };
    s.reply(token, Status::Ok, b"done");
    while s.poll_transmit(&mut buf).is_some() {}
    assert_eq!(
        s.handle_request(now + MS, CLIENT, &earlier),
        Verdict::Answered
    );
}

/// Found in review: one number for all of a client's calls let a slow call to a dead server
/// keep every other server remembering every later call until its window closed.
#[test]
fn a_slow_call_to_one_server_does_not_hold_back_anothers_memory() {
    let c = RpcConfig {
        replies_max: 8,
        ..cfg()
    };
    let mut n = Net::with(c, &[Behaviour::Dead, Behaviour::Echo]);
    let slow = n.call(&[server_addr(0)], b"", Completion::First, 10_000 * MS);
    for i in 0..50u8 {
        let id = n.call(&[server_addr(1)], &[i], Completion::First, 1000 * MS);
        assert_eq!(
            n.outcome(id).expect("answered").end,
            End::Complete,
            "call {i}"
        );
    }
    assert!(n.servers[1].0.remembered() <= 1);
    assert_eq!(n.servers[1].0.counters.busy, 0);
    assert!(n.client.is_outstanding(slow));
}

#[test]
fn calls_to_many_servers_find_duplicates_and_answers() {
    let many: Vec<Address> = (0..40).map(server_addr).collect();
    let mut c = Client::new(cfg(), 1).unwrap();
    let now = Instant(0);
    let mut dup = many.clone();
    dup.push(server_addr(17));
    assert_eq!(
        c.call(now, &dup, 0, b"", Completion::All, 10 * MS),
        Err(RpcError::DuplicateDestination(server_addr(17)))
    );
    let id = c
        .call(now, &many, 0, b"", Completion::All, 10 * MS)
        .unwrap();
    for (k, &a) in many.iter().enumerate().rev() {
        let r = ReplyHeader {
            status: Status::Ok,
            incarnation: 1,
            call_id: id.0,
            server_incarnation: 0,
        };
        c.handle_reply(a, &r, &[k as u8]);
    }
    let (_, o) = c.poll_event().expect("complete");
    assert_eq!(o.replies.len(), 40);
    assert!(o.missing.is_empty());
    assert_eq!(o.replies[0], (server_addr(39), Ok(vec![39])));
}

#[test]
fn a_new_incarnation_of_a_client_is_a_new_client() {
    let mut n = Net::new(&[Behaviour::Echo]);
    let id = n.call(&[server_addr(0)], b"old", Completion::First, 100 * MS);
    assert!(n.outcome(id).is_some());
    // The client restarts: same address, call ids from 1 again.
    n.client = Client::new(cfg(), 78).unwrap();
    let id = n.call(&[server_addr(0)], b"new", Completion::First, 100 * MS);
    let o = n.outcome(id).unwrap();
    assert_eq!(
        o.replies[0].1.as_deref(),
        Ok(&b"wen"[..]),
        "not the old reply"
    );
    assert_eq!(n.executed[0].len(), 2);
}

#[test]
fn replies_for_another_incarnation_or_from_a_stranger_or_late_are_dropped() {
    let mut c = Client::new(cfg(), 5).unwrap();
    let now = Instant(1_000_000);
    let id = c
        .call(now, &[server_addr(0)], 1, b"", Completion::First, 100 * MS)
        .unwrap();
    let reply = |inc, call| ReplyHeader {
        status: Status::Ok,
        incarnation: inc,
        call_id: call,
        server_incarnation: 0,
    };
    c.handle_reply(server_addr(0), &reply(6, id.0), b"");
    c.handle_reply(server_addr(1), &reply(5, id.0), b"");
    c.handle_reply(server_addr(0), &reply(5, id.0 + 1), b"");
    assert!(c.poll_event().is_none());
    assert_eq!(c.counters.replies_foreign, 1);
    assert_eq!(c.counters.replies_stranger, 1);
    assert_eq!(c.counters.replies_late, 1);
    c.handle_reply(server_addr(0), &reply(5, id.0), b"ok");
    assert!(c.poll_event().is_some());
    c.handle_reply(server_addr(0), &reply(5, id.0), b"ok");
    assert_eq!(c.counters.replies_late, 2);
}

#[test]
fn a_cancelled_call_ends_at_once_and_its_reply_is_late() {
    let mut n = Net::new(&[Behaviour::Hold]);
    let id = n.call(&[server_addr(0)], b"c", Completion::First, 100 * MS);
    let o = n.client.cancel(id).unwrap();
    assert_eq!(o.end, End::Cancelled);
    assert_eq!(o.missing, vec![server_addr(0)]);
    assert_eq!(n.client.cancel(id), Err(RpcError::Unknown));
    let t = n.executed[0][0].0;
    n.servers[0].0.reply(t, Status::Ok, b"");
    n.pump();
    assert!(n.outcome(id).is_none(), "cancelled calls raise no event");
    assert_eq!(n.client.counters.replies_late, 1);
}

#[test]
fn calls_are_checked() {
    let c = RpcConfig {
        calls_max: 2,
        destinations_max: 3,
        ..cfg()
    };
    let mut cl = Client::new(c, 1).unwrap();
    let now = Instant(0);
    let a = server_addr(0);
    let b = server_addr(1);
    let d = 10 * MS;
    use Completion::*;
    assert_eq!(
        cl.call(now, &[], 0, b"", First, d),
        Err(RpcError::NoDestinations)
    );
    let four: Vec<Address> = (0..4).map(server_addr).collect();
    assert_eq!(
        cl.call(now, &four, 0, b"", First, d),
        Err(RpcError::TooManyDestinations { max: 3 })
    );
    assert_eq!(
        cl.call(now, &[a, b, a], 0, b"", First, d),
        Err(RpcError::DuplicateDestination(a))
    );
    assert_eq!(
        cl.call(now, &[a, b], 0, b"", Quorum(3), d),
        Err(RpcError::BadQuorum {
            k: 3,
            destinations: 2
        })
    );
    assert_eq!(
        cl.call(now, &[a, b], 0, b"", Quorum(0), d),
        Err(RpcError::BadQuorum {
            k: 0,
            destinations: 2
        })
    );
    let long = vec![0; c.payload_bytes_max() + 1];
    assert!(matches!(
        cl.call(now, &[a], 0, &long, First, d),
        Err(RpcError::TooLong { .. })
    ));
    assert_eq!(
        cl.call(now, &[a], 0, b"", First, Duration::ZERO),
        Err(RpcError::BadDeadline)
    );
    assert_eq!(
        cl.call(now, &[a], 0, b"", First, c.deadline_max + MS),
        Err(RpcError::BadDeadline)
    );
    cl.call(now, &[a], 0, b"", First, d).unwrap();
    cl.call(now, &[a], 0, b"", First, d).unwrap();
    assert_eq!(
        cl.call(now, &[a], 0, b"", First, d),
        Err(RpcError::TooManyCalls)
    );
}

#[test]
fn configurations_are_checked() {
    assert!(RpcConfig::default().validate().is_ok());
    for bad in [
        RpcConfig {
            calls_max: 0,
            ..cfg()
        },
        RpcConfig {
            message_bytes_max: RPC_HEADER_BYTES,
            ..cfg()
        },
        RpcConfig {
            message_bytes_max: 70_000,
            ..cfg()
        },
        RpcConfig {
            retry_max: MS,
            retry_initial: 2 * MS,
            ..cfg()
        },
        RpcConfig {
            replies_max: 0,
            ..cfg()
        },
    ] {
        assert!(matches!(bad.validate(), Err(RpcError::BadConfig(_))));
        assert!(Client::new(bad, 0).is_err());
        assert!(Server::new(bad).is_err());
    }
}

#[test]
fn headers_round_trip() {
    let mut buf = [0u8; 64];
    let req = RpcHeader::Request(RequestHeader {
        request_type: 0xBEEF,
        deadline_us: 123_456,
        incarnation: u64::MAX,
        call_id: 42,
        acked_below: 40,
        server_incarnation: 0,
    });
    let n = msg::encode(&req, b"payload", &mut buf).unwrap();
    assert_eq!(n, RPC_HEADER_BYTES + 7);
    assert!(msg::is_rpc(&buf[..n]));
    assert_eq!(msg::decode(&buf[..n]).unwrap(), (req, &b"payload"[..]));
    for status in [
        Status::Ok,
        Status::NoHandler,
        Status::DeadlinePassed,
        Status::Failed,
        Status::Busy,
        Status::ReplyTooLong,
    ] {
        let rep = RpcHeader::Reply(ReplyHeader {
            status,
            incarnation: 3,
            call_id: 1,
            server_incarnation: 0,
        });
        let n = msg::encode(&rep, b"", &mut buf).unwrap();
        assert_eq!(msg::decode(&buf[..n]).unwrap(), (rep, &b""[..]));
    }
    assert!(
        msg::encode(&req, &[0; 40], &mut buf).is_none(),
        "too long for buf"
    );
    let RpcHeader::Request(r) = req else {
        unreachable!()
    };
    let client = Address::new(3, 4, 5, 6);
    let fwd = RpcHeader::Forwarded(r, client);
    let n = msg::encode(&fwd, b"pay", &mut buf).unwrap();
    assert_eq!(n, RPC_HEADER_BYTES + 8 + 3);
    assert_eq!(msg::decode(&buf[..n]).unwrap(), (fwd, &b"pay"[..]));
    let back = RpcHeader::ForwardedReply(
        ReplyHeader {
            status: Status::Failed,
            incarnation: 9,
            call_id: 8,
            server_incarnation: 0,
        },
        client,
    );
    let n = msg::encode(&back, b"no", &mut buf).unwrap();
    assert_eq!(msg::decode(&buf[..n]).unwrap(), (back, &b"no"[..]));
    assert!(
        msg::encode(&fwd, &[0; 25], &mut buf).is_none(),
        "too long for buf"
    );
}

#[test]
fn every_decoder_rule_is_checked() {
    let mut good = [0u8; RPC_HEADER_BYTES];
    let req = RpcHeader::Request(RequestHeader {
        request_type: 1,
        deadline_us: 5,
        incarnation: 1,
        call_id: 1,
        acked_below: 1,
        server_incarnation: 0,
    });
    msg::encode(&req, b"", &mut good).unwrap();
    let with = |i: usize, v: u8| {
        let mut b = good;
        b[i] = v;
        msg::decode(&b).map(|_| ()).unwrap_err()
    };
    assert_eq!(
        msg::decode(&good[..39]).unwrap_err(),
        RpcWireError::Short { len: 39 }
    );
    assert_eq!(with(0, 0x00), RpcWireError::BadMagic(0));
    assert_eq!(with(1, 6), RpcWireError::UnknownKind(6));
    // A probe is a request's header: its rules hold too.
    let mut probe = good;
    probe[1] = 5;
    probe[4] = 0;
    assert_eq!(msg::decode(&probe).unwrap_err(), RpcWireError::ZeroDeadline);
    // Handed-on kinds need the address after the header.
    assert_eq!(with(1, 3), RpcWireError::ShortForwarded { len: 40 });
    assert_eq!(with(1, 4), RpcWireError::ShortForwarded { len: 40 });
    assert_eq!(with(16, 0), RpcWireError::ZeroCallId);
    assert_eq!(with(4, 0), RpcWireError::ZeroDeadline);
    // As a reply: deadline and acked_below must be zero, the status known.
    let mut rep = good;
    rep[1] = 2;
    assert_eq!(
        msg::decode(&rep).unwrap_err(),
        RpcWireError::ReplyFieldsNotZero
    );
    rep[4] = 0;
    rep[24] = 0;
    rep[2] = 9;
    assert_eq!(
        msg::decode(&rep).unwrap_err(),
        RpcWireError::UnknownStatus(9)
    );
    for e in [RpcWireError::Short { len: 1 }, RpcWireError::ZeroDeadline] {
        assert!(!e.to_string().is_empty());
    }
}

/// Random bytes and random valid requests never panic either side, and a server's memory
/// stays within its bounds.
#[test]
fn random_input_never_panics_and_memory_stays_bounded() {
    let c = RpcConfig {
        replies_max: 16,
        clients_max: 4,
        ..cfg()
    };
    let mut rng = Rng::new(7);
    let mut server = Server::with_incarnation(c, 1).unwrap();
    let mut client = Client::new(c, 1).unwrap();
    let mut buf = vec![0u8; c.message_bytes_max];
    let mut now = Instant(0);
    for _ in 0..20_000 {
        now = now + Duration::from_micros(rng.below(3000));
        let len = if rng.chance(0.8) {
            RPC_HEADER_BYTES + rng.below(16) as usize
        } else {
            rng.below(48) as usize
        };
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        if rng.chance(0.7) && bytes.len() >= RPC_HEADER_BYTES {
            bytes[0] = msg::RPC_MAGIC;
            bytes[1] = 1 + rng.below(5) as u8;
            bytes[2] = rng.below(8) as u8;
            bytes[3] = 0;
            // Deadlines up to 65 ms, and now and then one up to 16 s.
            bytes[7] = 0;
            if rng.chance(0.998) {
                bytes[6] = 0;
            }
            for b in &mut bytes[8..16] {
                *b = 0;
            }
            bytes[8] = rng.below(3) as u8;
            for b in &mut bytes[17..24] {
                *b = 0;
            }
            for b in &mut bytes[25..32] {
                *b = 0;
            }
            // The server incarnation named: none, this one, or another.
            for b in &mut bytes[33..40] {
                *b = 0;
            }
            bytes[32] = rng.below(3) as u8;
        }
        let from = Address::new(1, rng.below(8) as u16, 1, 0);
        if let Ok((h, payload)) = msg::decode(&bytes) {
            match h {
                RpcHeader::Request(r) => {
                    if let Verdict::Execute { token, .. } = server.handle_request(now, from, &r) {
                        if rng.chance(0.8) {
                            server.reply(token, Status::Ok, payload);
                        } else if rng.chance(0.5) {
                            let to = Address::new(1, rng.below(8) as u16, 1, 0);
                            server.forward(token, to, 0, 1, r.deadline_us, payload);
                        }
                    }
                }
                RpcHeader::Forwarded(r, client) => {
                    if let Verdict::Execute { token, .. } =
                        server.handle_forwarded(now, from, client, &r)
                    {
                        server.reply(token, Status::Ok, payload);
                    }
                }
                RpcHeader::Probe(r) => {
                    let v = server.handle_probe(now, from, &r);
                    assert!(!matches!(v, Verdict::Execute { .. }), "a probe ran");
                }
                RpcHeader::Reply(r) => client.handle_reply(from, &r, payload),
                RpcHeader::ForwardedReply(r, called) => {
                    client.handle_forwarded_reply(from, called, &r, payload)
                }
            }
        }
        server.handle_timeout(now);
        client.handle_timeout(now);
        while server.poll_transmit(&mut buf).is_some() {}
        assert!(server.remembered() <= c.replies_max);
        assert!(server.clients() <= c.clients_max);
    }
    // The input reached every path that matters.
    let s = &server.counters;
    assert!(
        s.executed > 300
            && s.busy > 0
            && s.forgotten > 0
            && s.forwarded > 0
            && s.other_incarnation > 0,
        "{s:?}"
    );
}

fn decode_owned(bytes: &[u8]) -> (RpcHeader, Vec<u8>) {
    let (h, p) = msg::decode(bytes).expect("valid");
    (h, p.to_vec())
}

/// Found in review: a copy the client sends just before its deadline may wander `packet_lifetime` to F,
/// which hands it on; that copy may wander another `packet_lifetime` to X. X remembers the
/// call only until its deadline plus one `packet_lifetime`, so it runs the call a second time.
#[test]
fn a_late_copy_handed_on_after_two_hops_is_not_run_twice_at_the_target() {
    let c = cfg(); // retry 10 ms doubling to 80 ms, packet lifetime 100 ms
    let f_addr = server_addr(0);
    let x_addr = server_addr(1);
    let mut client = Client::new(c, 77).unwrap();
    let mut f = Server::new(c).unwrap();
    let mut x = Server::new(c).unwrap();
    let mut buf = vec![0u8; c.message_bytes_max];
    let t0 = Instant(1_000_000_000);
    client
        .call(t0, &[f_addr], 9, b"pay", Completion::First, 100 * MS)
        .unwrap();
    // First copy: F hands it on at once, X runs it at once and answers; the answer is lost.
    let (_, n) = client.poll_transmit(t0, &mut buf).unwrap();
    let (RpcHeader::Request(r), p) = decode_owned(&buf[..n]) else {
        panic!()
    };
    let Verdict::Execute {
        token,
        request_type,
        ..
    } = f.handle_request(t0, CLIENT, &r)
    else {
        panic!()
    };
    assert!(f.forward(token, x_addr, 0, request_type, r.deadline_us, &p));
    let (to, n) = f.poll_transmit(&mut buf).unwrap();
    assert_eq!(to, x_addr);
    let (RpcHeader::Forwarded(fr, caller), p) = decode_owned(&buf[..n]) else {
        panic!()
    };
    let Verdict::Execute { token: xt, .. } = x.handle_forwarded(t0, f_addr, caller, &fr) else {
        panic!()
    };
    assert!(x.reply(xt, Status::Ok, &p));
    while x.poll_transmit(&mut buf).is_some() {} // lost
                                                 // The client retransmits at 10, 30 and 70 ms; the first two are lost, the last (30 ms
                                                 // left) is delayed 99 ms on its way to F.
    let mut last = None;
    let mut now = t0;
    for _ in 0..75 {
        now = now + MS;
        client.handle_timeout(now);
        f.handle_timeout(now);
        x.handle_timeout(now);
        while let Some((_, n)) = client.poll_transmit(now, &mut buf) {
            last = Some((now, buf[..n].to_vec()));
        }
    }
    let (sent, copy) = last.unwrap();
    assert_eq!(sent, t0 + 70 * MS);
    let at_f = sent + 99 * MS;
    f.handle_timeout(at_f);
    x.handle_timeout(at_f);
    let (RpcHeader::Request(r), _) = decode_owned(&copy) else {
        panic!()
    };
    assert_eq!(f.handle_request(at_f, CLIENT, &r), Verdict::Dropped);
    assert_eq!(
        f.counters.duplicates_forwarded, 1,
        "F hands the late copy on"
    );
    let (to, n) = f.poll_transmit(&mut buf).unwrap();
    assert_eq!(to, x_addr);
    let fwd = buf[..n].to_vec();
    // 99 ms to X: within the packet lifetime of one hop.
    let at_x = at_f + 99 * MS;
    x.handle_timeout(at_x);
    let (RpcHeader::Forwarded(fr, caller), _) = decode_owned(&fwd) else {
        panic!()
    };
    let v = x.handle_forwarded(at_x, f_addr, caller, &fr);
    assert!(
        !matches!(v, Verdict::Execute { .. }),
        "X runs call {} of the same client incarnation a second time: {v:?}",
        token.call_id
    );
}

/// Found in review: a request whose payload fits a plain request does not fit a forwarded one (8 more
/// bytes for the caller's address): F can never hand it on, and the call is never answered.
#[test]
fn a_call_with_a_full_payload_can_be_handed_on() {
    use Behaviour::*;
    let mut n = Net::new(&[Forward(1), Echo]);
    let full = vec![7u8; cfg().payload_bytes_max()];
    let id = n.call(&[server_addr(0)], &full, Completion::First, 300 * MS);
    n.run_for(310 * MS);
    let o = n.outcome(id).expect("ended");
    assert_eq!(
        o.end,
        End::Complete,
        "F handed on {} calls, X ran {}",
        n.servers[0].0.counters.forwarded,
        n.executed[1].len()
    );
}

/// Found in review: the answer to a call handed on carries 8 more bytes than a plain reply; a result
/// that `reply` accepts (up to `payload_bytes_max`) then never leaves X.
#[test]
fn a_full_result_of_a_call_handed_on_reaches_the_caller() {
    use Behaviour::*;
    let mut n = Net::new(&[Forward(1), Hold]);
    let id = n.call(&[server_addr(0)], b"q", Completion::First, 300 * MS);
    let (t, ..) = n.executed[1][0];
    let full = vec![1u8; cfg().payload_bytes_max()];
    assert!(n.servers[1].0.reply(t, Status::Ok, &full), "accepted");
    n.pump();
    n.run_for(310 * MS);
    let o = n.outcome(id).expect("ended");
    assert_eq!(o.end, End::Complete, "{:?}", o.missing);
}

/// Found in review: one message that does not fit makes `Server::poll_transmit` return `None` while
/// other replies are still queued.
#[test]
fn poll_transmit_does_not_stop_at_a_message_that_does_not_fit() {
    let c = cfg();
    let mut s = Server::new(c).unwrap();
    let now = Instant(0);
    let r = |call_id| RequestHeader {
        request_type: 9,
        deadline_us: 100_000,
        incarnation: 1,
        call_id,
        acked_below: 1,
        server_incarnation: 0,
    };
    let Verdict::Execute { token: a, .. } = s.handle_request(now, CLIENT, &r(1)) else {
        panic!()
    };
    let Verdict::Execute { token: b, .. } = s.handle_request(now, CLIENT, &r(2)) else {
        panic!()
    };
    let full = vec![0u8; c.payload_bytes_max()];
    assert!(s.forward(a, server_addr(3), 1, 9, 100_000, &full));
    assert!(s.reply(b, Status::Ok, b"small"));
    let mut buf = vec![0u8; c.message_bytes_max];
    let mut sent = 0;
    while s.poll_transmit(&mut buf).is_some() {
        sent += 1;
    }
    assert_eq!(
        sent, 2,
        "the reply to call 2 is still queued behind the forward"
    );
}
/// Found in review: a call handed on runs at the target; its answer is lost; the target restarts.
/// The client's copies name the forwarder's incarnation (which did not restart), and the
/// forwarder hands each copy on naming no incarnation, so the new target runs the call again.
#[test]
fn a_call_handed_on_does_not_run_twice_when_its_target_restarts() {
    use Behaviour::*;
    let mut n = Net::new(&[Echo, Echo]);
    let (f, t) = (server_addr(0), server_addr(1));
    // The client knows both servers' incarnations (and the forwarder could know the target's).
    for s in [f, t] {
        let id = n.call(&[s], b"k", Completion::First, 500 * MS);
        assert!(n.outcome(id).is_some());
        assert_eq!(n.client.server_incarnation(s), Some(1));
    }
    n.servers[0].1 = Forward(1);
    n.drop_replies = 1;
    let a = n.call(&[f], b"A", Completion::First, 500 * MS);
    assert_eq!(
        n.executed[1].len(),
        2,
        "ran once at the target (incarnation 1)"
    );
    // The target restarts; the forwarder does not.
    n.servers[1] = (Server::with_incarnation(cfg(), 2).unwrap(), Echo);
    n.run_for(100 * MS);
    let _ = n.outcome(a);
    assert_eq!(
        n.executed[1].len(),
        2,
        "a copy of a call that named an incarnation ran again at the target's successor"
    );
}

/// Found in review: incarnations are milliseconds since the epoch at the port's opening, so a server
/// restarted on a host whose clock is behind (a moved server, or a clock stepped back) has a
/// smaller incarnation. The client keeps the larger one for ever, and every call it makes to
/// that server from then on is answered `Restarted`.
#[test]
fn a_server_restarted_with_a_smaller_incarnation_is_called_again() {
    use Behaviour::*;
    let mut n = Net::new(&[Echo]);
    let s = server_addr(0);
    n.servers[0] = (Server::with_incarnation(cfg(), 1_000).unwrap(), Echo);
    let id = n.call(&[s], b"0", Completion::First, 500 * MS);
    assert!(n.outcome(id).is_some());
    assert_eq!(n.client.server_incarnation(s), Some(1_000));
    // Restarted on a host whose clock is 1 s behind.
    n.servers[0] = (Server::with_incarnation(cfg(), 900).unwrap(), Echo);
    // The first call after the restart is refused (documented).
    let b = n.call(&[s], b"B", Completion::First, 500 * MS);
    assert_eq!(
        n.outcome(b).unwrap().replies,
        vec![(s, Err(RemoteError::Restarted))]
    );
    // The next ones should run.
    for _ in 0..3 {
        let c = n.call(&[s], b"C", Completion::First, 500 * MS);
        assert_eq!(
            n.outcome(c).unwrap().replies,
            vec![(s, Ok(b"C".to_vec()))],
            "refused for ever: the client still expects incarnation {:?}",
            n.client.server_incarnation(s)
        );
    }
}

fn guarded(c: RpcConfig, incarnation: u64) -> Server {
    let mut s = Server::with_incarnation(c, incarnation).unwrap();
    s.guard_replays();
    s
}

fn request(client_incarnation: u64, call_id: u64, server_incarnation: u64) -> RequestHeader {
    RequestHeader {
        request_type: 9,
        deadline_us: 50_000,
        incarnation: client_incarnation,
        call_id,
        acked_below: call_id,
        server_incarnation,
    }
}

fn executes(v: Verdict) -> Option<Token> {
    match v {
        Verdict::Execute { token, .. } => Some(token),
        _ => None,
    }
}

/// With the replay guard, a client's first call names no incarnation of the server: it is
/// refused with the server's incarnation and sent again at once naming it, and runs once.
#[test]
fn with_the_replay_guard_a_first_call_takes_one_more_round_trip_and_runs_once() {
    let mut n = Net::new(&[Behaviour::Echo]);
    n.servers[0].0.guard_replays();
    let id = n.call(&[server_addr(0)], b"abc", Completion::First, 100 * MS);
    let o = n.outcome(id).expect("finished without waiting for a retry");
    assert_eq!(o.replies, vec![(server_addr(0), Ok(b"cba".to_vec()))]);
    assert_eq!(n.executed[0].len(), 1);
    assert_eq!(n.servers[0].0.counters.unnamed, 1);
    assert_eq!(n.client.counters.named_again, 1);
    // The next call names it from the start.
    let id = n.call(&[server_addr(0)], b"de", Completion::First, 100 * MS);
    assert!(n.outcome(id).is_some());
    assert_eq!(n.servers[0].0.counters.unnamed, 1);
    assert_eq!(n.executed[0].len(), 2);
}

/// Issue 23: a request captured and sent again after the server forgot the call (a packet
/// lifetime past its deadline) was executed again. With the guard it is dropped; the
/// client's next call still runs.
#[test]
fn with_the_replay_guard_a_copy_sent_after_the_call_was_forgotten_is_not_executed() {
    let t0 = Instant(1_000_000_000);
    let later = t0 + Duration::from_secs(10);
    let r = request(77, 1, 5);
    for guard in [false, true] {
        let mut s = Server::with_incarnation(cfg(), 5).unwrap();
        if guard {
            s.guard_replays();
        }
        let token = executes(s.handle_request(t0, CLIENT, &r)).expect("executed");
        assert!(s.reply(token, Status::Ok, b"done"));
        while s.poll_transmit(&mut vec![0; 256]).is_some() {}
        s.handle_timeout(later);
        assert_eq!((s.remembered(), s.clients()), (0, 0), "forgotten");
        let again = executes(s.handle_request(later, CLIENT, &r));
        if guard {
            assert_eq!(again, None, "a forgotten call executed again");
            assert_eq!(s.counters.replays_refused, 1);
            assert!(executes(s.handle_request(later, CLIENT, &request(77, 2, 5))).is_some());
        } else {
            assert!(
                again.is_some(),
                "without the guard a forgotten call runs again"
            );
        }
    }
}

/// With the guard: a request naming no incarnation is answered `Restarted` (carrying ours) and
/// not executed, so a restarted server does not run a copy of a first call to its
/// predecessor; a request of a client older than one heard from at its address is dropped.
#[test]
fn with_the_replay_guard_unnamed_requests_and_older_clients_are_refused() {
    let t = Instant(1_000_000_000);
    let mut s = guarded(cfg(), 6);
    assert_eq!(
        s.handle_request(t, CLIENT, &request(77, 1, 0)),
        Verdict::Dropped
    );
    assert_eq!(s.counters.unnamed, 1);
    let mut buf = vec![0; 256];
    let (to, len) = s.poll_transmit(&mut buf).expect("an answer");
    assert_eq!(to, CLIENT);
    match msg::decode(&buf[..len]).unwrap().0 {
        RpcHeader::Reply(r) => {
            assert_eq!(r.status, Status::Restarted);
            assert_eq!(r.server_incarnation, 6);
        }
        h => panic!("{h:?}"),
    }
    assert!(executes(s.handle_request(t, CLIENT, &request(78, 1, 6))).is_some());
    assert_eq!(
        s.handle_request(t, CLIENT, &request(77, 2, 6)),
        Verdict::Dropped
    );
    assert_eq!(s.counters.replays_refused, 1);
    assert_eq!(s.counters.executed, 1);
}

/// What a guarded server keeps of forgotten clients is bounded; dropping some is counted.
#[test]
fn with_the_replay_guard_retired_clients_are_bounded_and_evictions_counted() {
    let c = RpcConfig {
        clients_max: 2,
        ..cfg()
    };
    let mut s = guarded(c, 5);
    let mut t = Instant(1_000_000_000);
    let clients = 3 * 2 * server::RETIRED_PER_CLIENT as u16;
    for k in 0..clients {
        let from = Address::new(1, 0, 1, k);
        let token = executes(s.handle_request(t, from, &request(77, 1, 5))).expect("executed");
        assert!(s.reply(token, Status::Ok, b""));
        while s.poll_transmit(&mut vec![0; 256]).is_some() {}
        t = t + Duration::from_secs(1);
        s.handle_timeout(t);
    }
    let kept = 2 * server::RETIRED_PER_CLIENT as u64;
    assert_eq!(s.counters.retired_evicted, clients as u64 - kept);
    // The newest are still refused, the oldest run again (counted above).
    let newest = Address::new(1, 0, 1, clients - 1);
    assert_eq!(
        s.handle_request(t, newest, &request(77, 1, 5)),
        Verdict::Dropped
    );
    let oldest = Address::new(1, 0, 1, 0);
    assert!(executes(s.handle_request(t, oldest, &request(77, 1, 5))).is_some());
}
