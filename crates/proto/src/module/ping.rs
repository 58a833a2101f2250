//! PING/PONG, the module of paper 004's latency experiment (Figure 5): one instruction runs a
//! number of PING/PONG exchanges of a given size with a peer's module and completes when the
//! last PONG is back. Used by the tests, the simulator and `txcast bench modules`.

use super::{Context, Control, Instruction, InstructionId, Module, Registration, STATUS_OK};
use crate::time::Instant;
use crate::Address;
use std::time::Duration;

/// The instruction: run exchanges (arguments: [`PingRun::encode`]).
pub const RUN: u16 = 1;
/// Control-message types.
pub const PING: u16 = 0x0100;
pub const PONG: u16 = 0x0101;
/// Completion statuses besides [`STATUS_OK`] (whose result is the exchanges done, u32).
pub const STATUS_BUSY: u32 = 1;
pub const STATUS_TIMED_OUT: u32 = 2;
pub const STATUS_PEER_RESTARTED: u32 = 3;
pub const STATUS_BAD_ARGS: u32 = 4;
/// Status of a run whose PING could not be sent (back-pressure or budget).
pub const STATUS_SEND_REFUSED: u32 = 5;

const TIMER: u64 = 0;
/// Round-trip samples one run records at most.
pub const SAMPLES_MAX: usize = 1 << 20;

/// The arguments of [`RUN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingRun {
    pub peer: Address,
    pub exchanges: u32,
    /// Body bytes of every PING and PONG.
    pub bytes: u16,
    /// The whole run's deadline.
    pub timeout: Duration,
}

impl PingRun {
    pub const BYTES: usize = 8 + 4 + 2 + 8;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..8].copy_from_slice(&self.peer.to_bytes());
        b[8..12].copy_from_slice(&self.exchanges.to_le_bytes());
        b[12..14].copy_from_slice(&self.bytes.to_le_bytes());
        b[14..22].copy_from_slice(&(self.timeout.as_micros() as u64).to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<PingRun> {
        if b.len() != Self::BYTES {
            return None;
        }
        Some(PingRun {
            peer: Address::read_from(&b[0..8]),
            exchanges: u32::from_le_bytes(b[8..12].try_into().ok()?),
            bytes: u16::from_le_bytes(b[12..14].try_into().ok()?),
            timeout: Duration::from_micros(u64::from_le_bytes(b[14..22].try_into().ok()?)),
        })
    }
}

struct Run {
    id: InstructionId,
    peer: Address,
    left: u32,
    done: u32,
    sent_at: Instant,
}

/// The PING/PONG module; the same module answers PINGs and runs exchanges.
pub struct PingPong {
    run: Option<Run>,
    body: Vec<u8>,
    /// PINGs answered.
    pub answered: u64,
    /// Round trips of the last run, in nanoseconds of the host's clock (from the handler
    /// that sent each PING to the one that took its PONG), at most [`SAMPLES_MAX`].
    pub samples: Vec<u64>,
}

impl Default for PingPong {
    fn default() -> Self {
        PingPong {
            run: None,
            body: vec![0u8; super::msg::CONTROL_BODY_MAX],
            answered: 0,
            samples: Vec::new(),
        }
    }
}

impl PingPong {
    fn finish(&mut self, cx: &mut Context<'_>, status: u32) {
        if let Some(r) = self.run.take() {
            cx.cancel(TIMER);
            let _ = cx.complete(r.id, status, &r.done.to_le_bytes());
        }
    }

    fn ping(&mut self, cx: &mut Context<'_>) {
        let Some(r) = self.run.as_mut() else {
            return;
        };
        if r.left == 0 {
            self.finish(cx, STATUS_OK);
            return;
        }
        r.left -= 1;
        r.sent_at = cx.now();
        let (peer, len) = (r.peer, self.body.len());
        if cx.send(peer, PING, &self.body[..len]).is_err() {
            self.finish(cx, STATUS_SEND_REFUSED);
        }
    }
}

impl Module for PingPong {
    fn registration(&self) -> Registration {
        Registration {
            name: "pingpong",
            instructions: &[RUN],
            controls: &[PING, PONG],
        }
    }

    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        let status = match PingRun::decode(ins.args) {
            _ if self.run.is_some() => Some(STATUS_BUSY),
            None => Some(STATUS_BAD_ARGS),
            Some(a) if a.bytes as usize > super::msg::CONTROL_BODY_MAX => Some(STATUS_BAD_ARGS),
            Some(a) => {
                self.body.resize(a.bytes as usize, 0x5a);
                self.samples.clear();
                self.samples
                    .reserve((a.exchanges as usize).min(SAMPLES_MAX));
                self.run = Some(Run {
                    id: ins.id,
                    peer: a.peer,
                    left: a.exchanges,
                    done: 0,
                    sent_at: cx.now(),
                });
                let at: Instant = cx.now() + a.timeout;
                if cx.arm(at, TIMER).is_err() {
                    self.run = None;
                    Some(STATUS_SEND_REFUSED)
                } else {
                    self.ping(cx);
                    None
                }
            }
        };
        if let Some(s) = status {
            let _ = cx.complete(ins.id, s, &0u32.to_le_bytes());
        }
    }

    fn on_control(&mut self, cx: &mut Context<'_>, msg: Control<'_>) {
        match msg.ty {
            PING => {
                self.answered += 1;
                let _ = cx.send(msg.from, PONG, msg.body);
            }
            PONG => {
                if let Some(r) = self.run.as_mut().filter(|r| r.peer == msg.from) {
                    r.done += 1;
                    if self.samples.len() < SAMPLES_MAX {
                        self.samples.push((cx.now() - r.sent_at).as_nanos() as u64);
                    }
                    self.ping(cx);
                }
            }
            _ => {}
        }
    }

    fn on_timeout(&mut self, cx: &mut Context<'_>, _token: u64) {
        self.finish(cx, STATUS_TIMED_OUT);
    }

    fn on_peer_restart(&mut self, cx: &mut Context<'_>, peer: Address, _incarnation: u64) {
        if self.run.as_ref().is_some_and(|r| r.peer == peer) {
            self.finish(cx, STATUS_PEER_RESTARTED);
        }
    }
}
