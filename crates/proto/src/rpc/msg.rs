//! RPC messages: a checked view over the bytes of one port message, and its writer.
//!
//! Every RPC message starts with a 40-byte header, then the payload:
//!
//! ```text
//!  0 magic u8 (0xA7) | 1 kind u8 | 2 code u16 | 4 deadline_us u32
//!  8 client incarnation u64 | 16 call id u64 | 24 acked_below u64
//! 32 server incarnation u64
//! ```
//!
//! - A request's code is its request type; `deadline_us` is the time the call had left when
//!   this copy was sent (at least 1: a call out of time is not sent); `acked_below` says every
//!   call of this client with a lower id is finished, so the server may forget their replies.
//! - A request's server incarnation is the incarnation of the server the client last heard
//!   from at that address (0: none known). A server of another incarnation does not execute
//!   it: it answers [`Status::Restarted`] (the server restarted since; its predecessor may
//!   have executed the call, it will not).
//! - A reply's code is its [`Status`]; it echoes the request's incarnation and call id, and
//!   carries the answering server's incarnation; `deadline_us` and `acked_below` are zero.
//! - A forwarded request (kind 3) is a request's header, then the original caller's address
//!   (8 bytes), then the payload; a forwarded reply (kind 4) a reply's header, then the
//!   address of the server the caller called, then the payload.
//! - A probe (kind 5) is a request's header alone: a copy of a request whose payload the server
//!   already has (it came as a long message). The server answers it as a copy of the call, or
//!   [`Status::Resend`] if it does not know the call; it never executes one.
//!
//! All integers are little-endian. A decoder error names the rule the bytes broke.

use crate::addr::{Address, ADDRESS_BYTES};
use crate::codec::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at, wire_enum};

pub const RPC_HEADER_BYTES: usize = 40;
/// First byte of every RPC message: tells it from other traffic on a port.
pub const RPC_MAGIC: u8 = 0xA7;

/// Byte offsets of the header's fields (see the module doc), for [`decode`] and [`encode`].
mod at {
    pub const MAGIC: usize = 0;
    pub const KIND: usize = 1;
    pub const CODE: usize = 2;
    pub const DEADLINE: usize = 4;
    pub const INCARNATION: usize = 8;
    pub const CALL_ID: usize = 16;
    pub const ACKED_BELOW: usize = 24;
    pub const SERVER_INCARNATION: usize = 32;
}

wire_enum! {
pub enum RpcKind: u8, unknown RpcWireError::UnknownKind {
    Request = 1,
    Reply = 2,
    /// A request a server handed on to another (`forward_request`): the original caller
    /// follows the header.
    Forwarded = 3,
    /// The answer to a forwarded request, sent to the original caller: the server it was
    /// called at follows the header.
    ForwardedReply = 4,
    /// A copy of a request without its payload (see the module doc).
    Probe = 5,
}
}

wire_enum! {
/// How a server answered.
pub enum Status: u16, unknown RpcWireError::UnknownStatus {
    /// Executed; the payload is the result.
    Ok = 0,
    /// No handler for the request type: not executed.
    NoHandler = 1,
    /// The request's deadline passed before it could run: not executed.
    DeadlinePassed = 2,
    /// The handler failed; the payload is its message (UTF-8).
    Failed = 3,
    /// The server has no room to remember another call now: not executed; the client retries.
    Busy = 4,
    /// Executed, but the result is longer than a reply may be.
    ReplyTooLong = 5,
    /// A probe for a call the server does not know: not executed; send the whole request.
    Resend = 6,
    /// The request named another incarnation of the server: not executed by this one (the
    /// server restarted since the client last heard from it).
    Restarted = 7,
}
}

/// Why bytes are not an RPC message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RpcWireError {
    /// Shorter than the header.
    #[error("rpc message of {len} bytes is shorter than its {RPC_HEADER_BYTES}-byte header")]
    Short { len: usize },
    /// A handed-on request or its reply, shorter than its header and the address after it.
    #[error("forwarded rpc message of {len} bytes is shorter than its {} header bytes", RPC_HEADER_BYTES + ADDRESS_BYTES)]
    ShortForwarded { len: usize },
    /// The first byte is not [`RPC_MAGIC`].
    #[error("rpc magic must be 0xa7, is {0:#04x}")]
    BadMagic(u8),
    #[error("rpc kind must be 1..=5, is {0}")]
    UnknownKind(u8),
    #[error("rpc reply status must be 0..=7, is {0}")]
    UnknownStatus(u16),
    /// Call ids start at 1.
    #[error("rpc call id must not be 0")]
    ZeroCallId,
    /// A request must have time left.
    #[error("rpc request must have time left (deadline_us >= 1)")]
    ZeroDeadline,
    /// A reply's deadline and acked_below fields must be zero.
    #[error("rpc reply must have deadline_us and acked_below zero")]
    ReplyFieldsNotZero,
    /// A probe carries no payload.
    #[error("rpc probe must be the header alone")]
    ProbeWithPayload,
}

/// A decoded RPC header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpcHeader {
    Request(RequestHeader),
    Reply(ReplyHeader),
    /// A request handed on: its header as the caller sent it, and the caller.
    Forwarded(RequestHeader, Address),
    /// The answer to a handed-on request: its header, and the server the caller called.
    ForwardedReply(ReplyHeader, Address),
    /// A copy of a request without its payload.
    Probe(RequestHeader),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub request_type: u16,
    /// Time the call had left when this copy was sent (at least 1).
    pub deadline_us: u32,
    pub incarnation: u64,
    pub call_id: u64,
    /// Every call of this client below this id is finished.
    pub acked_below: u64,
    /// The incarnation of the server the client expects (0: any).
    pub server_incarnation: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyHeader {
    pub status: Status,
    pub incarnation: u64,
    pub call_id: u64,
    /// The answering server's incarnation.
    pub server_incarnation: u64,
}

/// Whether `bytes` start like an RPC message (a cheap test before [`decode`]).
pub fn is_rpc(bytes: &[u8]) -> bool {
    bytes.first() == Some(&RPC_MAGIC)
}

/// Checks `bytes` and splits them into header and payload.
pub fn decode(bytes: &[u8]) -> Result<(RpcHeader, &[u8]), RpcWireError> {
    if bytes.len() < RPC_HEADER_BYTES {
        return Err(RpcWireError::Short { len: bytes.len() });
    }
    if bytes[at::MAGIC] != RPC_MAGIC {
        return Err(RpcWireError::BadMagic(bytes[at::MAGIC]));
    }
    let code = u16_at(bytes, at::CODE);
    let deadline_us = u32_at(bytes, at::DEADLINE);
    let incarnation = u64_at(bytes, at::INCARNATION);
    let call_id = u64_at(bytes, at::CALL_ID);
    let acked_below = u64_at(bytes, at::ACKED_BELOW);
    let server_incarnation = u64_at(bytes, at::SERVER_INCARNATION);
    if call_id == 0 {
        return Err(RpcWireError::ZeroCallId);
    }
    let via = |b: &[u8]| -> Result<Address, RpcWireError> {
        b.get(RPC_HEADER_BYTES..RPC_HEADER_BYTES + ADDRESS_BYTES)
            .map(Address::read_from)
            .ok_or(RpcWireError::ShortForwarded { len: b.len() })
    };
    let header = match RpcKind::try_from(bytes[at::KIND])? {
        RpcKind::Probe => {
            if bytes.len() != RPC_HEADER_BYTES {
                return Err(RpcWireError::ProbeWithPayload);
            }
            let mut plain = [0u8; RPC_HEADER_BYTES];
            plain.copy_from_slice(bytes);
            plain[at::KIND] = RpcKind::Request as u8;
            let (RpcHeader::Request(r), _) = decode(&plain)? else {
                unreachable!("a request")
            };
            return Ok((RpcHeader::Probe(r), &[]));
        }
        RpcKind::Forwarded | RpcKind::ForwardedReply => {
            let a = via(bytes)?;
            let mut plain = [0u8; RPC_HEADER_BYTES];
            plain.copy_from_slice(&bytes[..RPC_HEADER_BYTES]);
            plain[at::KIND] -= 2;
            let (inner, _) = decode(&plain)?;
            let h = match inner {
                RpcHeader::Request(r) => RpcHeader::Forwarded(r, a),
                RpcHeader::Reply(r) => RpcHeader::ForwardedReply(r, a),
                _ => unreachable!("a plain kind"),
            };
            return Ok((h, &bytes[RPC_HEADER_BYTES + ADDRESS_BYTES..]));
        }
        RpcKind::Request => {
            if deadline_us == 0 {
                return Err(RpcWireError::ZeroDeadline);
            }
            RpcHeader::Request(RequestHeader {
                request_type: code,
                deadline_us,
                incarnation,
                call_id,
                acked_below,
                server_incarnation,
            })
        }
        RpcKind::Reply => {
            if deadline_us != 0 || acked_below != 0 {
                return Err(RpcWireError::ReplyFieldsNotZero);
            }
            RpcHeader::Reply(ReplyHeader {
                status: Status::try_from(code)?,
                incarnation,
                call_id,
                server_incarnation,
            })
        }
    };
    Ok((header, &bytes[RPC_HEADER_BYTES..]))
}

/// Bytes `header` and `payload` take on the wire.
pub fn encoded_len(header: &RpcHeader, payload: &[u8]) -> usize {
    let via = match header {
        RpcHeader::Forwarded(..) | RpcHeader::ForwardedReply(..) => ADDRESS_BYTES,
        _ => 0,
    };
    RPC_HEADER_BYTES + via + payload.len()
}

/// [`encode`] into `buf`, made longer first if need be; returns the length (`None` only for a
/// probe with a payload).
pub fn encode_vec(header: &RpcHeader, payload: &[u8], buf: &mut Vec<u8>) -> Option<usize> {
    let n = encoded_len(header, payload);
    if buf.len() < n {
        buf.resize(n, 0);
    }
    encode(header, payload, buf)
}

/// Writes `header` and `payload` into `buf`; returns the length, or `None` if it does not fit.
pub fn encode(header: &RpcHeader, payload: &[u8], buf: &mut [u8]) -> Option<usize> {
    let (plain, via, kind) = match *header {
        RpcHeader::Forwarded(r, a) => (RpcHeader::Request(r), Some(a), RpcKind::Forwarded),
        RpcHeader::ForwardedReply(r, a) => (RpcHeader::Reply(r), Some(a), RpcKind::ForwardedReply),
        h => (h, None, RpcKind::Request),
    };
    if let Some(a) = via {
        let n = RPC_HEADER_BYTES + ADDRESS_BYTES + payload.len();
        if buf.len() < n {
            return None;
        }
        encode(&plain, &[], buf)?;
        buf[at::KIND] = kind as u8;
        a.write_to(&mut buf[RPC_HEADER_BYTES..RPC_HEADER_BYTES + ADDRESS_BYTES]);
        buf[RPC_HEADER_BYTES + ADDRESS_BYTES..n].copy_from_slice(payload);
        return Some(n);
    }
    let n = RPC_HEADER_BYTES + payload.len();
    if buf.len() < n || matches!(header, RpcHeader::Probe(_)) && !payload.is_empty() {
        return None;
    }
    let (kind, code, deadline_us, incarnation, call_id, acked_below, server) = match *header {
        RpcHeader::Request(r) | RpcHeader::Probe(r) => (
            if matches!(header, RpcHeader::Probe(_)) {
                RpcKind::Probe
            } else {
                RpcKind::Request
            },
            r.request_type,
            r.deadline_us,
            r.incarnation,
            r.call_id,
            r.acked_below,
            r.server_incarnation,
        ),
        RpcHeader::Reply(r) => (
            RpcKind::Reply,
            r.status as u16,
            0,
            r.incarnation,
            r.call_id,
            0,
            r.server_incarnation,
        ),
        RpcHeader::Forwarded(..) | RpcHeader::ForwardedReply(..) => unreachable!("handled above"),
    };
    buf[at::MAGIC] = RPC_MAGIC;
    buf[at::KIND] = kind as u8;
    put_u16(buf, at::CODE, code);
    put_u32(buf, at::DEADLINE, deadline_us);
    put_u64(buf, at::INCARNATION, incarnation);
    put_u64(buf, at::CALL_ID, call_id);
    put_u64(buf, at::ACKED_BELOW, acked_below);
    put_u64(buf, at::SERVER_INCARNATION, server);
    buf[RPC_HEADER_BYTES..n].copy_from_slice(payload);
    Some(n)
}
