//! Push programs (Bhargava, Mafla and Riedl, Appendix A) loaded into running engines as
//! extension modules, through the public API: the Appendix B multicast, a two-round commit with
//! one call from the application, loading and unloading while other traffic flows, and bad
//! programs stopped with nothing else disturbed.

use std::time::Duration;
use txcast_port::module::{Context, Control, Instruction, Registration, STATUS_OK};
use txcast_port::{ModuleHost, Signal};
use txcast_proto::module::ping::{self, PingPong, PingRun};
use txcast_proto::module::Module;
use txcast_proto::Address;
use txcast_push::module::{
    program_control_type, INVOKE, PROGRAM_CONTROL_BASE, STATUS_PROGRAM_BUSY, STATUS_PROGRAM_FAILED,
};
use txcast_push::{programs, Limits, LoadError, Program, ProgramModule};

const KEY: u64 = 0x9e7;
const PROGRAM: u16 = 4;
const PING_ID: u16 = 1;
const WAIT: Duration = Duration::from_secs(10);
/// The control type of the program module loaded under [`PROGRAM`], for native peers.
static PROGRAM_TYPE: [u16; 1] = [PROGRAM_CONTROL_BASE + PROGRAM];

fn addr(site: u16, server_type: u16, server: u16) -> Address {
    Address::new(40, site, server_type, server)
}

fn packed(a: Address) -> u64 {
    u64::from_le_bytes(a.to_bytes())
}

fn load_program(h: &ModuleHost, text: &str) {
    let p = Program::load(text.as_bytes(), Limits::default()).unwrap();
    h.load(
        PROGRAM,
        KEY,
        ProgramModule::new(PROGRAM, "program", &p).unwrap(),
    )
    .unwrap();
}

/// A native peer of a program: records what it is sent and, as a commit participant, votes
/// (yes unless told otherwise) and acknowledges the decision.
#[derive(Default)]
struct Peer {
    got: Vec<Vec<u8>>,
    vote_no: bool,
    decisions: Vec<u8>,
}

impl Module for Peer {
    fn registration(&self) -> Registration {
        Registration {
            name: "peer",
            instructions: &[],
            controls: &PROGRAM_TYPE,
        }
    }
    fn on_instruction(&mut self, _: &mut Context<'_>, _: Instruction<'_>) {}
    fn on_control(&mut self, cx: &mut Context<'_>, msg: Control<'_>) {
        self.got.push(msg.body.to_vec());
        if msg.body.len() != 9 {
            return;
        }
        let reply = match msg.body[0] {
            1 if self.vote_no => 5,
            1 => 4,
            k @ (2 | 3) => {
                self.decisions.push(k);
                6
            }
            _ => return,
        };
        let mut out = [0u8; 9];
        out[0] = reply;
        out[1..].copy_from_slice(&msg.body[1..]);
        cx.send(msg.from, program_control_type(PROGRAM), &out)
            .unwrap();
    }
}

fn peer(a: Address, vote_no: bool) -> ModuleHost {
    let h = ModuleHost::open(a).unwrap();
    h.load(
        PROGRAM,
        KEY,
        Peer {
            vote_no,
            ..Peer::default()
        },
    )
    .unwrap();
    h
}

#[test]
fn the_appendix_b_multicast_reaches_every_destination() {
    let a = ModuleHost::open(addr(0, 8, 0)).unwrap();
    load_program(&a, programs::MULTICAST);
    // Destinations on this host (rings) and on another (UDP).
    let peers: Vec<ModuleHost> = [addr(0, 8, 1), addr(1, 8, 0), addr(0, 8, 2), addr(1, 8, 1)]
        .into_iter()
        .map(|d| peer(d, false))
        .collect();
    let mut args = (peers.len() as u32).to_le_bytes().to_vec();
    for p in &peers {
        args.extend_from_slice(&packed(p.address()).to_le_bytes());
    }
    args.extend_from_slice(b"debit 42");
    let c = a.call(PROGRAM, KEY, INVOKE, &args, WAIT).unwrap();
    assert_eq!(c.status, peers.len() as u32, "sends accepted");
    for p in &peers {
        let deadline = std::time::Instant::now() + WAIT;
        let got = loop {
            let got = p
                .with_module(PROGRAM, |m: &mut Peer| m.got.clone())
                .unwrap();
            if !got.is_empty() || std::time::Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        assert_eq!(got, vec![b"debit 42".to_vec()], "at {}", p.address());
    }
}

fn commit_args(txn: u64, parts: &[&ModuleHost]) -> Vec<u8> {
    let mut a = (parts.len() as u32).to_le_bytes().to_vec();
    a.extend_from_slice(&txn.to_le_bytes());
    a.extend_from_slice(&200_000_000u64.to_le_bytes());
    a.extend_from_slice(&200_000_000u64.to_le_bytes());
    for p in parts {
        a.extend_from_slice(&packed(p.address()).to_le_bytes());
    }
    a
}

#[test]
fn a_two_round_commit_is_one_call_from_the_application() {
    let coordinator = ModuleHost::open(addr(0, 9, 0)).unwrap();
    load_program(&coordinator, programs::COMMIT2);
    let (b, c) = (peer(addr(0, 9, 1), false), peer(addr(1, 9, 0), false));
    let done = coordinator
        .call(PROGRAM, KEY, INVOKE, &commit_args(7, &[&b, &c]), WAIT)
        .unwrap();
    assert_eq!(done.status, 0, "committed");
    assert_eq!(
        done.result,
        0b11u64.to_le_bytes().to_vec(),
        "both acknowledged"
    );
    for p in [&b, &c] {
        assert_eq!(
            p.with_module(PROGRAM, |m: &mut Peer| m.decisions.clone()),
            Some(vec![2])
        );
    }
    // One participant votes no: the same call aborts everywhere.
    let no = peer(addr(1, 9, 1), true);
    let done = coordinator
        .call(PROGRAM, KEY, INVOKE, &commit_args(8, &[&b, &no]), WAIT)
        .unwrap();
    assert_eq!(done.status, 1, "aborted");
    assert_eq!(
        no.with_module(PROGRAM, |m: &mut Peer| m.decisions.clone()),
        Some(vec![3])
    );
}

#[test]
fn programs_load_run_and_unload_while_traffic_flows() {
    let a = ModuleHost::open(addr(0, 10, 0)).unwrap();
    let b = ModuleHost::open(addr(1, 10, 0)).unwrap();
    for h in [&a, &b] {
        h.load(PING_ID, KEY, PingPong::default()).unwrap();
    }
    let args = PingRun {
        peer: b.address(),
        exchanges: 20_000,
        bytes: 64,
        timeout: Duration::from_secs(10),
    }
    .encode();
    let traffic = a.instruct(PING_ID, KEY, ping::RUN, &args).unwrap();
    let q = peer(addr(1, 10, 1), false);
    for round in 0..5u8 {
        load_program(&a, programs::MULTICAST);
        let mut m = 1u32.to_le_bytes().to_vec();
        m.extend_from_slice(&packed(q.address()).to_le_bytes());
        m.push(round);
        assert_eq!(a.call(PROGRAM, KEY, INVOKE, &m, WAIT).unwrap().status, 1);
        assert!(a.unload(PROGRAM));
        assert_eq!(a.modules(), vec![(PING_ID, "pingpong")]);
        if round == 0 {
            assert!(
                a.poll(traffic).unwrap().is_none(),
                "the traffic ran alongside"
            );
        }
    }
    let c = a.wait(traffic, WAIT).unwrap();
    assert_eq!(c.status, STATUS_OK);
    assert_eq!(c.result, 20_000u32.to_le_bytes().to_vec());
}

fn program_file(name: &str) -> String {
    let path = format!("{}/../push/programs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn a_bad_program_is_stopped_and_nothing_else_is_disturbed() {
    let a = ModuleHost::open(addr(0, 11, 0)).unwrap();
    let b = ModuleHost::open(addr(1, 11, 0)).unwrap();
    for h in [&a, &b] {
        h.load(PING_ID, KEY, PingPong::default()).unwrap();
    }
    let ping = |n| {
        let args = PingRun {
            peer: b.address(),
            exchanges: n,
            bytes: 8,
            timeout: Duration::from_secs(5),
        }
        .encode();
        a.call(PING_ID, KEY, ping::RUN, &args, WAIT).unwrap().status
    };
    for bad in ["spin.wat", "trap.wat", "oob.wat"] {
        load_program(&a, &program_file(bad));
        let c = a.call(PROGRAM, KEY, INVOKE, &[], WAIT).unwrap();
        assert_eq!(c.status, STATUS_PROGRAM_FAILED, "{bad}");
        // The stopped program refuses further calls; the application heard why.
        let c = a.call(PROGRAM, KEY, INVOKE, &[], WAIT).unwrap();
        assert_eq!(c.status, STATUS_PROGRAM_FAILED, "{bad}");
        let why = a.signals();
        assert!(
            matches!(why.as_slice(), [Signal::Data { module: PROGRAM, data }]
                if data.starts_with(b"program failed")),
            "{bad}: {why:?}"
        );
        let failure = a
            .with_module(PROGRAM, |m: &mut ProgramModule| {
                m.failure().map(|e| e.to_string())
            })
            .flatten();
        assert!(failure.is_some(), "{bad}");
        // The engine and the other module go on.
        assert_eq!(ping(20), STATUS_OK, "after {bad}");
        assert!(a.unload(PROGRAM));
    }
}

#[test]
fn a_corrupt_program_file_is_refused_at_load() {
    let junk: Vec<u8> = (0..500u32).map(|i| (i * 7919 % 251) as u8).collect();
    assert!(matches!(
        Program::load(&junk, Limits::default()),
        Err(LoadError::NotWasm | LoadError::Invalid { .. } | LoadError::Wat { .. })
    ));
    let mut wasm = b"\0asm\x01\0\0\0".to_vec();
    wasm.extend_from_slice(&junk[..40]);
    assert!(Program::load(&wasm, Limits::default()).is_err());
}

#[test]
fn a_second_invocation_while_one_runs_is_refused() {
    let coordinator = ModuleHost::open(addr(0, 12, 0)).unwrap();
    load_program(&coordinator, programs::COMMIT2);
    // A participant that never answers holds the first invocation in round one.
    let silent = ModuleHost::open(addr(0, 12, 1)).unwrap();
    let first = coordinator
        .instruct(PROGRAM, KEY, INVOKE, &commit_args(1, &[&silent]))
        .unwrap();
    let second = coordinator
        .call(PROGRAM, KEY, INVOKE, &commit_args(2, &[&silent]), WAIT)
        .unwrap();
    assert_eq!(second.status, STATUS_PROGRAM_BUSY);
    // The vote timeout aborts the first.
    assert_eq!(coordinator.wait(first, WAIT).unwrap().status, 1);
}
