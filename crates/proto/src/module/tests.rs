use super::ping::{self, PingPong, PingRun};
use super::*;
use std::time::Duration;

const A: Address = Address::new(0, 0, 9, 0);
const B: Address = Address::new(0, 1, 9, 0);
const KEY: u64 = 0xfeed;
const PING_ID: ModuleId = 3;

fn host(me: Address, inc: u64) -> Host {
    let mut h = Host::new(me, inc, Instant(0));
    h.load(PING_ID, KEY, Box::new(PingPong::default()))
        .expect("loads");
    h
}

/// Moves every message waiting in `from`'s outbox into the host it is addressed to.
fn deliver(now: Instant, hosts: &mut [&mut Host]) -> usize {
    let mut moved = 0;
    loop {
        let mut any = false;
        for i in 0..hosts.len() {
            while let Some((to, bytes)) = hosts[i].peek_transmit() {
                let bytes = bytes.to_vec();
                let from = hosts[i].address();
                hosts[i].pop_transmit();
                if let Some(j) = hosts.iter().position(|h| h.address() == to) {
                    let _ = hosts[j].handle_message(now, from, &bytes);
                }
                any = true;
                moved += 1;
            }
        }
        if !any {
            return moved;
        }
    }
}

fn run(peer: Address, exchanges: u32, timeout_ms: u64) -> [u8; PingRun::BYTES] {
    PingRun {
        peer,
        exchanges,
        bytes: 64,
        timeout: Duration::from_millis(timeout_ms),
    }
    .encode()
}

/// Issues a PING/PONG run of `exchanges` with B, instruction `id`, at `now` ns.
fn ping_run(h: &mut Host, now: u64, id: u64, exchanges: u32, timeout_ms: u64) {
    let args = run(B, exchanges, timeout_ms);
    h.instruct(
        Instant(now),
        InstructionId(id),
        PING_ID,
        KEY,
        ping::RUN,
        &args,
    )
    .unwrap();
}

fn completed(h: &mut Host) -> Vec<(InstructionId, u32, u32)> {
    let mut out = Vec::new();
    while let Some(e) = h.poll_event() {
        if let HostEvent::Completed {
            id, status, result, ..
        } = e
        {
            let n = u32::from_le_bytes(result.as_slice().try_into().unwrap_or([0; 4]));
            out.push((id, status, n));
        }
    }
    out
}

#[test]
fn instruction_runs_ping_pong_across_two_hosts() {
    let (mut a, mut b) = (host(A, 10), host(B, 20));
    ping_run(&mut a, 0, 1, 5, 100);
    assert_eq!(deliver(Instant(1), &mut [&mut a, &mut b]), 10);
    assert_eq!(completed(&mut a), vec![(InstructionId(1), STATUS_OK, 5)]);
    assert_eq!(b.module_mut::<PingPong>(PING_ID).unwrap().answered, 5);
    assert_eq!(a.counters().controls_sent, 5);
    assert_eq!(b.counters().controls_received, 5);
    // Nothing armed is left behind.
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn registration_clashes_are_typed_errors() {
    let mut h = host(A, 1);
    assert_eq!(
        h.load(PING_ID, 1, Box::new(PingPong::default())),
        Err(RegisterError::IdTaken {
            id: PING_ID,
            by: "pingpong"
        })
    );
    assert_eq!(
        h.load(4, 1, Box::new(PingPong::default())),
        Err(RegisterError::ControlTypeTaken {
            ty: ping::PING,
            by: "pingpong"
        })
    );
    assert_eq!(
        h.load(MODULES_MAX as u16, 1, Box::new(PingPong::default())),
        Err(RegisterError::IdOutOfRange(MODULES_MAX as u16))
    );
    struct Twice;
    impl Module for Twice {
        fn registration(&self) -> Registration {
            Registration {
                name: "twice",
                instructions: &[],
                controls: &[7, 7],
            }
        }
        fn on_instruction(&mut self, _: &mut Context<'_>, _: Instruction<'_>) {}
        fn on_control(&mut self, _: &mut Context<'_>, _: Control<'_>) {}
    }
    assert_eq!(
        h.load(5, 1, Box::new(Twice)),
        Err(RegisterError::TypeListedTwice(7))
    );
    // Unloading frees the id and the types.
    assert!(h.unload(PING_ID).is_some());
    h.load(4, 1, Box::new(PingPong::default())).unwrap();
    assert_eq!(h.modules().collect::<Vec<_>>(), vec![(4, "pingpong")]);
}

#[test]
fn a_wrong_key_is_refused_and_counted() {
    let (mut a, mut b) = (host(A, 10), host(B, 20));
    assert_eq!(
        a.instruct(
            Instant(0),
            InstructionId(1),
            PING_ID,
            KEY + 1,
            ping::RUN,
            &[]
        ),
        Err(ModuleError::BadKey)
    );
    // A module on B opened with another key refuses A's PINGs.
    b.unload(PING_ID);
    b.load(PING_ID, KEY + 1, Box::new(PingPong::default()))
        .unwrap();
    ping_run(&mut a, 0, 2, 1, 5);
    deliver(Instant(1), &mut [&mut a, &mut b]);
    assert_eq!(b.counters().dropped_bad_key, 1);
    assert_eq!(b.counters().controls_received, 0);
    // A's run ends at its deadline.
    a.handle_timeout(Instant(6_000_000));
    assert_eq!(
        completed(&mut a),
        vec![(InstructionId(2), ping::STATUS_TIMED_OUT, 0)]
    );
    assert_eq!(
        a.instruct(Instant(0), InstructionId(3), 9, KEY, ping::RUN, &[]),
        Err(ModuleError::NoSuchModule(9))
    );
    assert_eq!(
        a.instruct(Instant(0), InstructionId(3), PING_ID, KEY, 77, &[]),
        Err(ModuleError::UnknownInstruction(77))
    );
}

/// Arms timers on instruction and records the tokens that fire.
#[derive(Default)]
struct Timers {
    fired: Vec<(u64, Instant)>,
}

impl Module for Timers {
    fn registration(&self) -> Registration {
        Registration {
            name: "timers",
            instructions: &[1, 2],
            controls: &[],
        }
    }
    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        let token = ins.args[0] as u64;
        if ins.ty == 1 {
            let at = cx.now() + Duration::from_millis(ins.args[1] as u64);
            cx.arm(at, token).unwrap();
        } else {
            assert!(cx.cancel(token));
        }
        cx.complete(ins.id, STATUS_OK, &[]).unwrap();
    }
    fn on_control(&mut self, _: &mut Context<'_>, _: Control<'_>) {}
    fn on_timeout(&mut self, cx: &mut Context<'_>, token: u64) {
        self.fired.push((token, cx.now()));
    }
}

#[test]
fn timeouts_fire_once_when_due_and_not_when_cancelled_or_moved() {
    let mut h = Host::new(A, 1, Instant(0));
    h.load(1, 0, Box::new(Timers::default())).unwrap();
    let ms = |n: u64| Instant(n * 1_000_000);
    let mut id = 0;
    let mut ins = |h: &mut Host, now, ty, args: &[u8]| {
        id += 1;
        h.instruct(now, InstructionId(id), 1, 0, ty, args).unwrap();
    };
    ins(&mut h, ms(0), 1, &[1, 10]); // token 1 at 10 ms
    ins(&mut h, ms(0), 1, &[2, 20]); // token 2 at 20 ms
    ins(&mut h, ms(0), 1, &[3, 5]); // token 3 at 5 ms, then cancelled
    ins(&mut h, ms(1), 2, &[3]);
    ins(&mut h, ms(2), 1, &[1, 28]); // token 1 moved to 30 ms
    for t in 0..=40 {
        h.handle_timeout(ms(t));
    }
    let fired = &h.module_mut::<Timers>(1).unwrap().fired;
    assert_eq!(fired, &vec![(2, ms(20)), (1, ms(30))]);
    assert_eq!(h.counters().timeouts_fired, 2);
    assert_eq!(h.poll_timeout(), None);
}

#[test]
fn a_restarted_peer_is_seen_by_the_module_instead_of_waiting() {
    let (mut a, mut b) = (host(A, 10), host(B, 20));
    // A learns B's incarnation from a first run.
    ping_run(&mut a, 0, 1, 1, 100);
    deliver(Instant(1), &mut [&mut a, &mut b]);
    assert_eq!(completed(&mut a).len(), 1);
    // B restarts; A's next PING is addressed to the incarnation that is gone.
    let mut b2 = host(B, 21);
    ping_run(&mut a, 2, 2, 3, 100);
    deliver(Instant(3), &mut [&mut a, &mut b2]);
    assert_eq!(b2.counters().dropped_stale, 1);
    assert_eq!(b2.counters().stale_notices_sent, 1);
    assert_eq!(a.counters().peer_restarts, 1);
    assert_eq!(
        completed(&mut a),
        vec![(InstructionId(2), ping::STATUS_PEER_RESTARTED, 0)]
    );
    // Once told, A's new runs reach the new incarnation.
    ping_run(&mut a, 4, 3, 2, 100);
    deliver(Instant(5), &mut [&mut a, &mut b2]);
    assert_eq!(completed(&mut a), vec![(InstructionId(3), STATUS_OK, 2)]);
    // A message from the old incarnation of B, arriving late, is stale.
    let old = ModuleMsg {
        kind: MsgKind::Control,
        module: PING_ID,
        ty: ping::PONG,
        key: KEY,
        source_incarnation: 20,
        destination_incarnation: 10,
        body: &[],
    };
    let mut buf = vec![0u8; old.len()];
    old.write(&mut buf);
    assert_eq!(a.handle_message(Instant(6), B, &buf), Err(Dropped::Stale));
}

struct Panics;

impl Module for Panics {
    fn registration(&self) -> Registration {
        Registration {
            name: "panics",
            instructions: &[1, 2],
            controls: &[9],
        }
    }
    fn on_instruction(&mut self, _: &mut Context<'_>, ins: Instruction<'_>) {
        if ins.ty == 2 {
            panic!("a handler that panics");
        }
    }
    fn on_control(&mut self, _: &mut Context<'_>, _: Control<'_>) {}
}

#[test]
fn a_panicking_handler_unloads_its_module_and_nothing_else() {
    let (mut a, mut b) = (host(A, 10), host(B, 20));
    a.load(7, 0, Box::new(Panics)).unwrap();
    a.instruct(Instant(0), InstructionId(1), 7, 0, 1, &[])
        .unwrap();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    a.instruct(Instant(0), InstructionId(2), 7, 0, 2, &[])
        .unwrap();
    std::panic::set_hook(hook);
    let events: Vec<HostEvent> = std::iter::from_fn(|| a.poll_event()).collect();
    assert!(events.contains(&HostEvent::Failed { module: 7 }));
    let statuses: Vec<(InstructionId, u32)> = events
        .iter()
        .filter_map(|e| match e {
            HostEvent::Completed { id, status, .. } => Some((*id, *status)),
            _ => None,
        })
        .collect();
    assert_eq!(
        statuses,
        vec![
            (InstructionId(1), STATUS_FAILED),
            (InstructionId(2), STATUS_FAILED)
        ]
    );
    assert_eq!(a.counters().handler_panics, 1);
    assert_eq!(a.modules().collect::<Vec<_>>(), vec![(PING_ID, "pingpong")]);
    ping_run(&mut a, 1, 3, 2, 100);
    deliver(Instant(1), &mut [&mut a, &mut b]);
    assert_eq!(completed(&mut a), vec![(InstructionId(3), STATUS_OK, 2)]);
}

/// Sends as many control messages as the instruction's first byte says.
struct Flood;

impl Module for Flood {
    fn registration(&self) -> Registration {
        Registration {
            name: "flood",
            instructions: &[1],
            controls: &[50],
        }
    }
    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        let mut sent = 0u32;
        for _ in 0..ins.args[0] {
            if cx.send(B, 50, b"x").is_ok() {
                sent += 1;
            }
        }
        let refused = cx.send(B, 51, b"x");
        assert_eq!(refused, Err(ModuleError::UnknownControl(51)));
        let long = vec![0u8; CONTROL_BODY_MAX + 1];
        assert_eq!(cx.send(B, 50, &long), Err(ModuleError::TooLong));
        cx.complete(ins.id, STATUS_OK, &sent.to_le_bytes()).unwrap();
    }
    fn on_control(&mut self, _: &mut Context<'_>, _: Control<'_>) {}
}

#[test]
fn a_handler_sends_within_its_budget_and_the_outbox_bound() {
    let mut a = Host::new(A, 1, Instant(0));
    a.load(1, 0, Box::new(Flood)).unwrap();
    a.instruct(Instant(0), InstructionId(1), 1, 0, 1, &[200])
        .unwrap();
    assert_eq!(
        completed(&mut a),
        vec![(InstructionId(1), STATUS_OK, SENDS_PER_HANDLER_MAX as u32)]
    );
    // Fill the outbox: back-pressure, not growth.
    let mut id = 2;
    while a.outbox_len() + SENDS_PER_HANDLER_MAX <= OUTBOX_MAX {
        a.instruct(Instant(0), InstructionId(id), 1, 0, 1, &[64])
            .unwrap();
        id += 1;
    }
    a.instruct(Instant(0), InstructionId(id), 1, 0, 1, &[64])
        .unwrap();
    let last = completed(&mut a).pop().unwrap();
    assert!(last.2 < SENDS_PER_HANDLER_MAX as u32);
    assert_eq!(a.outbox_len(), OUTBOX_MAX);
    assert!(a.counters().handler_refusals > 0);
}

#[test]
fn garbage_is_dropped_and_counted_never_panics() {
    let mut a = host(A, 10);
    let mut rng = crate::rng::Rng::new(11);
    for _ in 0..5_000 {
        let n = rng.below(80) as usize;
        let mut b: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
        if n >= HEADER_BYTES && rng.chance(0.7) {
            b[0] = msg::MAGIC;
            b[1] = 1;
            b[6..8].copy_from_slice(&((n - HEADER_BYTES) as u16).to_le_bytes());
        }
        let _ = a.handle_message(Instant(0), B, &b);
    }
    let c = a.counters();
    assert_eq!(c.controls_received, 0);
    assert!(c.dropped_bad > 0 && c.dropped_unknown + c.dropped_stale > 0);
}

/// Records the peers reported unreachable.
#[derive(Default)]
struct Unreachable {
    peers: Vec<Address>,
}

impl Module for Unreachable {
    fn registration(&self) -> Registration {
        Registration {
            name: "unreachable",
            instructions: &[],
            controls: &[],
        }
    }
    fn on_instruction(&mut self, _: &mut Context<'_>, _: Instruction<'_>) {}
    fn on_control(&mut self, _: &mut Context<'_>, _: Control<'_>) {}
    fn on_peer_unreachable(&mut self, _: &mut Context<'_>, peer: Address) {
        self.peers.push(peer);
    }
}

#[test]
fn an_unreachable_peer_is_told_to_the_modules_only_once_heard_from() {
    let (mut a, mut b) = (host(A, 10), host(B, 20));
    a.load(4, 0, Box::new(Unreachable::default())).unwrap();
    // Not heard from yet (a process not started is unreachable too): nothing told.
    a.peer_unreachable(Instant(1), B);
    assert!(a.module_mut::<Unreachable>(4).unwrap().peers.is_empty());
    assert_eq!(a.counters().peer_unreachable, 0);
    ping_run(&mut a, 0, 1, 1, 100);
    deliver(Instant(2), &mut [&mut a, &mut b]);
    assert_eq!(a.peers().collect::<Vec<_>>(), vec![B]);
    a.peer_unreachable(Instant(3), B);
    assert_eq!(a.module_mut::<Unreachable>(4).unwrap().peers, vec![B]);
    assert_eq!(a.counters().peer_unreachable, 1);
}
