//! The wire format of module traffic: a 32-byte header, then the body.
//!
//! ```text
//! 0  magic u8 (0xD5)      1  kind u8 (1 control, 2 stale notice)
//! 2  module u16           4  control type u16        6  body length u16
//! 8  key u64              16 source incarnation u64  24 destination incarnation u64 (0: any)
//! 32 body
//! ```
//! Little-endian. A stale notice has no body: it tells a peer that the incarnation it addressed
//! is gone and which one runs now (its source incarnation).

use crate::codec::{u16_at, u64_at};

pub const MAGIC: u8 = 0xD5;
pub const HEADER_BYTES: usize = 32;
/// Longest body of a control message. Control messages are short (paper 004: four ATM cells);
/// this bound keeps one in a single link record and in a 2 KiB ring slot with its envelope.
pub const CONTROL_BODY_MAX: usize = 1024;

/// What a module message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgKind {
    Control,
    /// The addressed incarnation is gone; the source incarnation is the one that runs now.
    Stale,
}

impl MsgKind {
    fn code(self) -> u8 {
        match self {
            MsgKind::Control => 1,
            MsgKind::Stale => 2,
        }
    }
}

/// A checked view of one module message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleMsg<'a> {
    pub kind: MsgKind,
    pub module: u16,
    pub ty: u16,
    pub key: u64,
    pub source_incarnation: u64,
    pub destination_incarnation: u64,
    pub body: &'a [u8],
}

/// Why bytes are not a module message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgError {
    /// Shorter than the header.
    Short,
    /// The first byte is not [`MAGIC`].
    BadMagic,
    /// The kind byte names no kind.
    BadKind,
    /// The length field disagrees with the bytes that follow the header.
    BadLength,
    /// The body is longer than [`CONTROL_BODY_MAX`].
    TooLong,
    /// A stale notice carries a body, or a zero source incarnation.
    BadNotice,
}

impl<'a> ModuleMsg<'a> {
    /// Checks `b` and gives its fields.
    pub fn parse(b: &'a [u8]) -> Result<ModuleMsg<'a>, MsgError> {
        if b.len() < HEADER_BYTES {
            return Err(MsgError::Short);
        }
        if b[0] != MAGIC {
            return Err(MsgError::BadMagic);
        }
        let kind = match b[1] {
            1 => MsgKind::Control,
            2 => MsgKind::Stale,
            _ => return Err(MsgError::BadKind),
        };
        let len = u16_at(b, 6) as usize;
        if len > CONTROL_BODY_MAX {
            return Err(MsgError::TooLong);
        }
        if b.len() - HEADER_BYTES != len {
            return Err(MsgError::BadLength);
        }
        let m = ModuleMsg {
            kind,
            module: u16_at(b, 2),
            ty: u16_at(b, 4),
            key: u64_at(b, 8),
            source_incarnation: u64_at(b, 16),
            destination_incarnation: u64_at(b, 24),
            body: &b[HEADER_BYTES..],
        };
        if kind == MsgKind::Stale && (len != 0 || m.source_incarnation == 0) {
            return Err(MsgError::BadNotice);
        }
        Ok(m)
    }

    /// Bytes this message takes.
    pub fn len(&self) -> usize {
        HEADER_BYTES + self.body.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the message into `out`, which must hold [`Self::len`] bytes; the body must be
    /// at most [`CONTROL_BODY_MAX`] (the host checks both before it writes).
    pub fn write(&self, out: &mut [u8]) {
        debug_assert!(self.body.len() <= CONTROL_BODY_MAX);
        out[0] = MAGIC;
        out[1] = self.kind.code();
        out[2..4].copy_from_slice(&self.module.to_le_bytes());
        out[4..6].copy_from_slice(&self.ty.to_le_bytes());
        out[6..8].copy_from_slice(&(self.body.len() as u16).to_le_bytes());
        out[8..16].copy_from_slice(&self.key.to_le_bytes());
        out[16..24].copy_from_slice(&self.source_incarnation.to_le_bytes());
        out[24..32].copy_from_slice(&self.destination_incarnation.to_le_bytes());
        out[HEADER_BYTES..self.len()].copy_from_slice(self.body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(body: &[u8]) -> ModuleMsg<'_> {
        ModuleMsg {
            kind: MsgKind::Control,
            module: 7,
            ty: 300,
            key: 0x1122_3344_5566_7788,
            source_incarnation: 42,
            destination_incarnation: 9,
            body,
        }
    }

    #[test]
    fn round_trips() {
        let m = sample(b"hello");
        let mut buf = vec![0u8; m.len()];
        m.write(&mut buf);
        assert_eq!(ModuleMsg::parse(&buf), Ok(m));
    }

    #[test]
    fn refuses_bad_input_by_rule() {
        let m = sample(b"abc");
        let mut buf = vec![0u8; m.len()];
        m.write(&mut buf);
        assert_eq!(ModuleMsg::parse(&buf[..10]), Err(MsgError::Short));
        assert_eq!(
            ModuleMsg::parse(&buf[..buf.len() - 1]),
            Err(MsgError::BadLength)
        );
        let mut b = buf.clone();
        b[0] = 0;
        assert_eq!(ModuleMsg::parse(&b), Err(MsgError::BadMagic));
        let mut b = buf.clone();
        b[1] = 9;
        assert_eq!(ModuleMsg::parse(&b), Err(MsgError::BadKind));
        let mut b = buf.clone();
        b[6..8].copy_from_slice(&(CONTROL_BODY_MAX as u16 + 1).to_le_bytes());
        assert_eq!(ModuleMsg::parse(&b), Err(MsgError::TooLong));
        let mut b = buf.clone();
        b[1] = 2;
        assert_eq!(ModuleMsg::parse(&b), Err(MsgError::BadNotice));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut rng = crate::rng::Rng::new(5);
        for _ in 0..20_000 {
            let n = rng.below(64) as usize;
            let mut b: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            if n > 1 && rng.chance(0.5) {
                b[0] = MAGIC;
                b[1] = 1 + rng.below(2) as u8;
            }
            let _ = ModuleMsg::parse(&b);
        }
    }
}
