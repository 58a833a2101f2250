//! A stream of control messages as fast as the host lets a module send them, and a count of
//! those that arrive: paper 004's send and receive rates (Figures 3 and 4). Used by
//! `txcast bench modules`.

use super::{Context, Control, Instruction, InstructionId, Module, Registration, STATUS_OK};
use crate::time::Instant;
use crate::Address;

/// Instruction: send a stream (arguments: [`StreamRun::encode`]); completes once all are
/// handed to the transport, with the count (u32).
pub const SEND: u16 = 1;
/// Instruction: wait for a count of messages (argument: u32); completes when that many have
/// arrived since the module was loaded, with the nanoseconds from the first to the last (u64).
pub const EXPECT: u16 = 2;
/// The stream's control-message type.
pub const DATA: u16 = 0x0110;
/// Status of a SEND or EXPECT whose arguments do not parse, or that another one is running.
pub const STATUS_BAD_ARGS: u32 = 4;

const TIMER: u64 = 0;

/// The arguments of [`SEND`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamRun {
    pub peer: Address,
    pub count: u32,
    pub bytes: u16,
}

impl StreamRun {
    pub const BYTES: usize = 14;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..8].copy_from_slice(&self.peer.to_bytes());
        b[8..12].copy_from_slice(&self.count.to_le_bytes());
        b[12..14].copy_from_slice(&self.bytes.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<StreamRun> {
        if b.len() != Self::BYTES {
            return None;
        }
        Some(StreamRun {
            peer: Address::read_from(&b[0..8]),
            count: u32::from_le_bytes(b[8..12].try_into().ok()?),
            bytes: u16::from_le_bytes(b[12..14].try_into().ok()?),
        })
    }
}

/// Sends and counts streams.
#[derive(Default)]
pub struct Stream {
    sending: Option<(InstructionId, StreamRun, u32)>,
    body: Vec<u8>,
    expecting: Option<(InstructionId, u64)>,
    /// Messages arrived since the module was loaded.
    pub received: u64,
    first: Option<Instant>,
    last: Instant,
}

impl Stream {
    /// From the first message that arrived to the last.
    pub fn span(&self) -> Option<std::time::Duration> {
        self.first.map(|f| self.last - f)
    }

    fn pump(&mut self, cx: &mut Context<'_>) {
        let Some((id, run, sent)) = self.sending.as_mut() else {
            return;
        };
        while *sent < run.count {
            if cx.send(run.peer, DATA, &self.body).is_err() {
                // Budget or back-pressure: the rest goes from the next duty cycle.
                let _ = cx.arm(cx.now(), TIMER);
                return;
            }
            *sent += 1;
        }
        let _ = cx.complete(*id, STATUS_OK, &sent.to_le_bytes());
        self.sending = None;
    }

    fn check_expected(&mut self, cx: &mut Context<'_>) {
        if let Some((id, want)) = self.expecting {
            if self.received >= want {
                let ns = self.first.map_or(0, |f| (self.last - f).as_nanos() as u64);
                let _ = cx.complete(id, STATUS_OK, &ns.to_le_bytes());
                self.expecting = None;
            }
        }
    }
}

impl Module for Stream {
    fn registration(&self) -> Registration {
        Registration {
            name: "stream",
            instructions: &[SEND, EXPECT],
            controls: &[DATA],
        }
    }

    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        match ins.ty {
            SEND => match StreamRun::decode(ins.args) {
                Some(run)
                    if self.sending.is_none()
                        && run.bytes as usize <= super::msg::CONTROL_BODY_MAX =>
                {
                    self.body.clear();
                    self.body.resize(run.bytes as usize, 0xa5);
                    self.sending = Some((ins.id, run, 0));
                    self.pump(cx);
                }
                _ => {
                    let _ = cx.complete(ins.id, STATUS_BAD_ARGS, &[]);
                }
            },
            _ => match ins.args.try_into().map(u32::from_le_bytes) {
                Ok(want) if self.expecting.is_none() => {
                    self.expecting = Some((ins.id, want as u64));
                    self.check_expected(cx);
                }
                _ => {
                    let _ = cx.complete(ins.id, STATUS_BAD_ARGS, &[]);
                }
            },
        }
    }

    fn on_control(&mut self, cx: &mut Context<'_>, _msg: Control<'_>) {
        self.received += 1;
        let now = cx.now();
        self.first.get_or_insert(now);
        self.last = now;
        self.check_expected(cx);
    }

    fn on_timeout(&mut self, cx: &mut Context<'_>, _token: u64) {
        self.pump(cx);
    }
}
