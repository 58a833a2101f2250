//! A loaded program as an extension module: [`ProgramModule`] runs one [`Instance`] on a
//! module host (`txcast_proto::module`), so a program loaded at run time runs on the engine's
//! loop like compiled-in module code.
//!
//! - The application's instruction [`INVOKE`] calls the program's `invoke` with the
//!   instruction's arguments; the instruction completes when the program calls `complete`
//!   (status and up to `RESULT_BYTES_MAX` bytes of result).
//! - The program's `send` is a control message of the module's own type
//!   ([`program_control_type`]) to the module with the same id at `dest`; such messages reach
//!   the program's `on_message`. Its timers are the host's timing wheel.
//! - A program stopped by a fatal error (fuel, trap, bad hook arguments, bounds) ends its
//!   invocation with [`STATUS_PROGRAM_FAILED`], signals the application once, and refuses every
//!   later instruction with the same status; the engine and every other module go on.

use crate::{Dests, HookError, Hooks, Instance, Program, RunError};
use std::time::Duration;
use txcast_proto::module::msg::CONTROL_BODY_MAX;
use txcast_proto::module::{
    Context, Control, Instruction, InstructionId, Module, ModuleId, Registration, MODULES_MAX,
    RESULT_BYTES_MAX, SENDS_PER_HANDLER_MAX, TIMERS_PER_HANDLER_MAX,
};
use txcast_proto::{Address, Instant};

/// The instruction that calls the program's `invoke`.
pub const INVOKE: u16 = 1;
/// Status of an instruction a stopped program cannot run (or was running when it stopped).
pub const STATUS_PROGRAM_FAILED: u32 = 0x7fff_0001;
/// Status of an instruction refused because the program's invocation is still in progress.
pub const STATUS_PROGRAM_BUSY: u32 = 0x7fff_0002;
/// First control-message type of programs: a program module with id `i` uses `BASE + i`.
pub const PROGRAM_CONTROL_BASE: u16 = 0x7000;

static CONTROL_TYPES: [u16; MODULES_MAX] = {
    let mut t = [0u16; MODULES_MAX];
    let mut i = 0;
    while i < MODULES_MAX {
        t[i] = PROGRAM_CONTROL_BASE + i as u16;
        i += 1;
    }
    t
};

/// The control-message type a program module loaded under `id` sends and receives.
pub fn program_control_type(id: ModuleId) -> u16 {
    PROGRAM_CONTROL_BASE + id
}

/// What a program asked for during one handler call, carried out on the module host after it.
struct Outbox {
    now_ns: u64,
    /// (destination, range in `bytes`).
    sends: Vec<(u64, std::ops::Range<usize>)>,
    bytes: Vec<u8>,
    /// (after_ns, token) to arm, and tokens to cancel, in the order asked.
    timers: Vec<Timer>,
    completion: Option<(i32, [u8; RESULT_BYTES_MAX], usize)>,
}

enum Timer {
    Arm { after_ns: u64, token: u64 },
    Cancel(u64),
}

impl Hooks for Outbox {
    fn send(&mut self, dest: u64, msg: &[u8]) -> Result<(), HookError> {
        if msg.len() > CONTROL_BODY_MAX {
            return Err(HookError::TooLarge);
        }
        // The host lets one handler send this many control messages.
        if self.sends.len() >= SENDS_PER_HANDLER_MAX {
            return Err(HookError::Busy);
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(msg);
        self.sends.push((dest, start..self.bytes.len()));
        Ok(())
    }

    fn send_many(&mut self, dests: Dests<'_>, msg: &[u8]) -> u32 {
        // Nothing is copied for a call that can send nothing: the copies stay bounded by
        // the sends a handler may make.
        if msg.len() > CONTROL_BODY_MAX
            || dests.len() == 0
            || self.sends.len() >= SENDS_PER_HANDLER_MAX
        {
            return 0;
        }
        // One copy of the bytes for every destination.
        let start = self.bytes.len();
        self.bytes.extend_from_slice(msg);
        let mut n = 0;
        for dest in dests {
            if self.sends.len() >= SENDS_PER_HANDLER_MAX {
                break;
            }
            self.sends.push((dest, start..self.bytes.len()));
            n += 1;
        }
        n
    }

    fn now_ns(&self) -> u64 {
        self.now_ns
    }

    fn arm_timer(&mut self, after_ns: u64, token: u64) -> Result<(), HookError> {
        if self.timers.len() >= TIMERS_PER_HANDLER_MAX {
            return Err(HookError::TooManyTimers);
        }
        self.timers.push(Timer::Arm { after_ns, token });
        Ok(())
    }

    fn cancel_timer(&mut self, token: u64) -> bool {
        // Bounded like the timers armed: past it the cancel is refused.
        if self.timers.len() >= 2 * TIMERS_PER_HANDLER_MAX {
            return false;
        }
        self.timers.push(Timer::Cancel(token));
        true
    }

    fn complete(&mut self, status: i32, result: &[u8]) {
        let mut r = [0u8; RESULT_BYTES_MAX];
        let n = result.len().min(RESULT_BYTES_MAX);
        r[..n].copy_from_slice(&result[..n]);
        self.completion = Some((status, r, n));
    }
}

/// A program loaded as a module.
pub struct ProgramModule {
    id: ModuleId,
    name: &'static str,
    instance: Instance<Outbox>,
    /// The instruction whose invocation is in progress.
    invocation: Option<InstructionId>,
    /// Handler calls that ran the program, and the fuel they used in all.
    pub calls: u64,
    pub fuel: u64,
    /// Sends and timers the module host refused after the program had made them.
    pub refused: u64,
}

impl ProgramModule {
    /// An instance of `program` to be loaded under `id`, named `name` in listings.
    pub fn new(
        id: ModuleId,
        name: &'static str,
        program: &Program,
    ) -> Result<ProgramModule, crate::InstantiateError> {
        assert!(
            (id as usize) < MODULES_MAX,
            "module ids are below MODULES_MAX"
        );
        let outbox = Outbox {
            now_ns: 0,
            sends: Vec::with_capacity(SENDS_PER_HANDLER_MAX),
            bytes: Vec::with_capacity(4 * CONTROL_BODY_MAX),
            timers: Vec::with_capacity(TIMERS_PER_HANDLER_MAX),
            completion: None,
        };
        Ok(ProgramModule {
            id,
            name,
            instance: program.instantiate(outbox)?,
            invocation: None,
            calls: 0,
            fuel: 0,
            refused: 0,
        })
    }

    /// The fatal error that stopped the program, if one did.
    pub fn failure(&self) -> Option<&RunError> {
        self.instance.failure()
    }

    /// Runs one entry point, then carries out what the program asked for.
    fn run(
        &mut self,
        cx: &mut Context<'_>,
        call: impl FnOnce(&mut Instance<Outbox>) -> Result<(), RunError>,
    ) {
        self.instance.hooks_mut().now_ns = cx.now().as_nanos();
        let r = call(&mut self.instance);
        self.calls += 1;
        self.fuel += self.instance.last_call().fuel;
        let ty = program_control_type(self.id);
        let out = self.instance.hooks_mut();
        for (dest, range) in out.sends.drain(..) {
            let to = Address::from_bytes(dest.to_le_bytes());
            if cx.send(to, ty, &out.bytes[range]).is_err() {
                self.refused += 1;
            }
        }
        out.bytes.clear();
        for t in out.timers.drain(..) {
            match t {
                Timer::Arm { after_ns, token } => {
                    let at: Instant = cx.now() + Duration::from_nanos(after_ns);
                    if cx.arm(at, token).is_err() {
                        self.refused += 1;
                    }
                }
                Timer::Cancel(token) => {
                    cx.cancel(token);
                }
            }
        }
        if let Some((status, result, n)) = out.completion.take() {
            if let Some(id) = self.invocation.take() {
                let _ = cx.complete(id, status as u32, &result[..n]);
            }
        }
        match r {
            Err(e) if e.is_fatal() => {
                if let Some(id) = self.invocation.take() {
                    let _ = cx.complete(id, STATUS_PROGRAM_FAILED, &[]);
                }
                let mut note = [0u8; RESULT_BYTES_MAX];
                let text = format!("program failed: {e}");
                let n = text.len().min(RESULT_BYTES_MAX);
                note[..n].copy_from_slice(&text.as_bytes()[..n]);
                let _ = cx.signal(&note[..n]);
            }
            // A message or timer for a program without that entry point, or an input too
            // long for its buffer: dropped, the program goes on.
            _ => {}
        }
    }
}

impl Module for ProgramModule {
    fn registration(&self) -> Registration {
        Registration {
            name: self.name,
            instructions: &[INVOKE],
            controls: std::slice::from_ref(&CONTROL_TYPES[self.id as usize]),
        }
    }

    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        if self.instance.is_failed() {
            let _ = cx.complete(ins.id, STATUS_PROGRAM_FAILED, &[]);
            return;
        }
        if self.invocation.is_some() || self.instance.is_pending() {
            let _ = cx.complete(ins.id, STATUS_PROGRAM_BUSY, &[]);
            return;
        }
        self.invocation = Some(ins.id);
        self.run(cx, |i| i.invoke(ins.args).map(|_| ()));
    }

    fn on_control(&mut self, cx: &mut Context<'_>, msg: Control<'_>) {
        let src = u64::from_le_bytes(msg.from.to_bytes());
        self.run(cx, |i| i.on_message(src, msg.body));
    }

    fn on_timeout(&mut self, cx: &mut Context<'_>, token: u64) {
        self.run(cx, |i| i.on_timer(token));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox() -> Outbox {
        Outbox {
            now_ns: 0,
            sends: Vec::new(),
            bytes: Vec::new(),
            timers: Vec::new(),
            completion: None,
        }
    }

    #[test]
    fn what_a_program_asks_for_in_one_call_stays_bounded() {
        let mut o = outbox();
        let one = 7u64.to_le_bytes();
        for _ in 0..10_000 {
            assert_eq!(o.send_many(Dests::from_bytes(&[]), &[1u8; 512]), 0);
        }
        assert!(o.bytes.is_empty(), "no copies for sends that cannot happen");
        let mut sent = 0;
        for _ in 0..10_000 {
            sent += o.send_many(Dests::from_bytes(&one), &[1u8; 512]);
        }
        assert_eq!(sent as usize, SENDS_PER_HANDLER_MAX);
        assert!(o.bytes.len() <= SENDS_PER_HANDLER_MAX * 512);
        assert_eq!(o.send(7, &[0u8; 8]), Err(HookError::Busy));
        let cancelled = (0..10_000).filter(|&t| o.cancel_timer(t)).count();
        assert_eq!(cancelled, 2 * TIMERS_PER_HANDLER_MAX);
        assert_eq!(
            o.send(7, &[0u8; CONTROL_BODY_MAX + 1]),
            Err(HookError::TooLarge)
        );
    }
}
