//! Clients of a Raid site in other processes (Raid's action drivers, one per user): a request
//! to the site's port, a reply to the client's. Same host or another, the same way (the port
//! picks shared memory or UDP).
//!
//! A request: magic, version, kind (1: a DebitCredit transfer), the client's request id, then
//! account, teller, branch (`u32`) and delta (`i64`). A reply: magic, version, the request
//! id, then `0` committed (transaction id, the account's new balance, attempts), `1` given up
//! (cause, attempts), `2` refused (reason, and a text for people) or `3` unknown (the site's
//! log failed while the commit was being written; attempts). A request that does not
//! decode is refused with the rule it broke, if its id could be read (else dropped and
//! counted); either way the site goes on.

use crate::site::{Cause, SubmitError, Transfer};
use crate::TxnId;
use std::time::Duration;
use thiserror::Error;
use txcast_port::{IdleStrategy, Port, PortConfig, PortError};
use txcast_proto::codec::{CodecError, Reader, Writer};
use txcast_proto::Address;

pub const REQUEST_MAGIC: u8 = 0xD1;
pub const REPLY_MAGIC: u8 = 0xD2;
pub const VERSION: u8 = 1;
pub const KIND_TRANSFER: u8 = 1;
pub const KIND_AUDIT: u8 = 2;
/// Audits a site holds until it is quiet; more are refused as `Full`.
pub const AUDITS_MAX: usize = 16;
/// Bytes of a transfer request.
pub const REQUEST_BYTES: usize = 3 + 8 + 4 + 4 + 4 + 8;
/// The longest text a refusal carries.
const DETAIL_MAX: usize = 200;

/// Why a site refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The request did not decode.
    Malformed,
    /// The site coordinates as many transactions as it may.
    Full,
    /// The site's log failed.
    Broken,
    /// A tuple named does not exist.
    BadKey,
    /// The delta is out of range.
    BadDelta,
}

/// What became of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed {
        txn: TxnId,
        balance: i64,
        attempts: u32,
    },
    Aborted {
        cause: Cause,
        attempts: u32,
    },
    Refused {
        reason: Refusal,
        detail: String,
    },
    /// The site's log failed while the commit record was being written: decided when the
    /// site restarts (read the account then).
    Unknown {
        attempts: u32,
    },
    /// An audit's answer: the site's totals and the digest of its copy, taken while quiet.
    Audit {
        totals: crate::db::Totals,
        digest: u64,
    },
}

#[derive(Debug, Error)]
pub enum ClientError {
    #[error("port: {0:?}")]
    Port(PortError),
    #[error("no reply within the timeout")]
    Timeout,
}

impl From<PortError> for ClientError {
    fn from(e: PortError) -> Self {
        ClientError::Port(e)
    }
}

fn cause_code(c: Cause) -> u8 {
    match c {
        Cause::Conflict => 0,
        Cause::Busy => 1,
        Cause::Timeout => 2,
        Cause::Broken => 3,
        Cause::BadKey => 4,
        Cause::Attempts => 5,
        Cause::View => 6,
    }
}

fn cause_of(c: u8) -> Option<Cause> {
    Some(match c {
        0 => Cause::Conflict,
        1 => Cause::Busy,
        2 => Cause::Timeout,
        3 => Cause::Broken,
        4 => Cause::BadKey,
        5 => Cause::Attempts,
        6 => Cause::View,
        _ => return None,
    })
}

fn refusal_code(r: Refusal) -> u8 {
    match r {
        Refusal::Malformed => 0,
        Refusal::Full => 1,
        Refusal::Broken => 2,
        Refusal::BadKey => 3,
        Refusal::BadDelta => 4,
    }
}

fn refusal_of(c: u8) -> Option<Refusal> {
    Some(match c {
        0 => Refusal::Malformed,
        1 => Refusal::Full,
        2 => Refusal::Broken,
        3 => Refusal::BadKey,
        4 => Refusal::BadDelta,
        _ => return None,
    })
}

/// A refusal for a submit error.
pub fn refusal(e: &SubmitError) -> Refusal {
    match e {
        SubmitError::Full(_) => Refusal::Full,
        SubmitError::Broken => Refusal::Broken,
        SubmitError::BadKey(_) => Refusal::BadKey,
        SubmitError::BadDelta => Refusal::BadDelta,
    }
}

pub fn encode_request(id: u64, t: &Transfer) -> Vec<u8> {
    let mut b = Vec::with_capacity(REQUEST_BYTES);
    Writer::new(&mut b)
        .u8(REQUEST_MAGIC)
        .u8(VERSION)
        .u8(KIND_TRANSFER)
        .u64(id)
        .u32(t.account)
        .u32(t.teller)
        .u32(t.branch)
        .i64(t.delta);
    b
}

/// A request that did not decode: the rule it broke, and its id when that much was there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRequest {
    pub id: Option<u64>,
    pub why: String,
}

/// What a client asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Transfer(Transfer),
    /// The site's totals and digest, once it is quiet (nothing under way).
    Audit,
}

pub fn encode_audit(id: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(11);
    Writer::new(&mut b)
        .u8(REQUEST_MAGIC)
        .u8(VERSION)
        .u8(KIND_AUDIT)
        .u64(id);
    b
}

/// Decodes a request: its id and what it asks.
pub fn decode(b: &[u8]) -> Result<(u64, Request), BadRequest> {
    if b.len() > 2 && b[2] == KIND_AUDIT && b[0] == REQUEST_MAGIC && b[1] == VERSION {
        let mut r = Reader::new(&b[3..]);
        let id = r.u64().map_err(|e| BadRequest {
            id: None,
            why: e.to_string(),
        })?;
        return match r.finish() {
            Ok(()) => Ok((id, Request::Audit)),
            Err(e) => Err(BadRequest {
                id: Some(id),
                why: e.to_string(),
            }),
        };
    }
    decode_request(b).map(|(id, t)| (id, Request::Transfer(t)))
}

/// Decodes a transfer request: its id and transfer.
pub fn decode_request(b: &[u8]) -> Result<(u64, Transfer), BadRequest> {
    let mut r = Reader::new(b);
    let bad = |id, why: String| BadRequest { id, why };
    let head = (|| -> Result<(u8, u8, u8, u64), CodecError> {
        Ok((r.u8()?, r.u8()?, r.u8()?, r.u64()?))
    })();
    let (magic, version, kind, id) = head.map_err(|e| bad(None, e.to_string()))?;
    if magic != REQUEST_MAGIC {
        return Err(bad(None, format!("not a Raid request (magic {magic:#x})")));
    }
    if version != VERSION {
        return Err(bad(
            Some(id),
            format!("request version {version}, the site speaks {VERSION}"),
        ));
    }
    if kind != KIND_TRANSFER {
        return Err(bad(Some(id), format!("unknown request kind {kind}")));
    }
    let body = (|| -> Result<Transfer, CodecError> {
        let t = Transfer {
            account: r.u32()?,
            teller: r.u32()?,
            branch: r.u32()?,
            delta: r.i64()?,
        };
        r.finish()?;
        Ok(t)
    })();
    body.map(|t| (id, t))
        .map_err(|e| bad(Some(id), e.to_string()))
}

pub fn encode_reply(id: u64, o: &Outcome) -> Vec<u8> {
    let mut b = Vec::with_capacity(40);
    let mut w = Writer::new(&mut b);
    w.u8(REPLY_MAGIC).u8(VERSION).u64(id);
    match o {
        Outcome::Committed {
            txn,
            balance,
            attempts,
        } => {
            w.u8(0)
                .u16(txn.site)
                .u32(txn.incarnation)
                .u64(txn.seq)
                .i64(*balance)
                .u32(*attempts);
        }
        Outcome::Aborted { cause, attempts } => {
            w.u8(1).u8(cause_code(*cause)).u32(*attempts);
        }
        Outcome::Refused { reason, detail } => {
            let d = &detail.as_bytes()[..detail.len().min(DETAIL_MAX)];
            w.u8(2)
                .u8(refusal_code(*reason))
                .u16(d.len() as u16)
                .bytes(d);
        }
        Outcome::Unknown { attempts } => {
            w.u8(3).u32(*attempts);
        }
        Outcome::Audit { totals, digest } => {
            w.u8(4)
                .i64(totals.accounts)
                .i64(totals.tellers)
                .i64(totals.branches)
                .i64(totals.history)
                .u64(totals.history_rows)
                .u64(*digest);
        }
    }
    b
}

/// Decodes a reply; `None` for bytes that are not one.
pub fn decode_reply(b: &[u8]) -> Option<(u64, Outcome)> {
    let mut r = Reader::new(b);
    if r.u8().ok()? != REPLY_MAGIC || r.u8().ok()? != VERSION {
        return None;
    }
    let id = r.u64().ok()?;
    let o = match r.u8().ok()? {
        0 => Outcome::Committed {
            txn: TxnId {
                site: r.u16().ok()?,
                incarnation: r.u32().ok()?,
                seq: r.u64().ok()?,
            },
            balance: r.i64().ok()?,
            attempts: r.u32().ok()?,
        },
        1 => Outcome::Aborted {
            cause: cause_of(r.u8().ok()?)?,
            attempts: r.u32().ok()?,
        },
        2 => {
            let reason = refusal_of(r.u8().ok()?)?;
            let n = r.u16().ok()? as usize;
            let detail = String::from_utf8_lossy(r.take(n).ok()?).into_owned();
            Outcome::Refused { reason, detail }
        }
        3 => Outcome::Unknown {
            attempts: r.u32().ok()?,
        },
        4 => Outcome::Audit {
            totals: crate::db::Totals {
                accounts: r.i64().ok()?,
                tellers: r.i64().ok()?,
                branches: r.i64().ok()?,
                history: r.i64().ok()?,
                history_rows: r.u64().ok()?,
            },
            digest: r.u64().ok()?,
        },
        _ => return None,
    };
    r.finish().ok()?;
    Some((id, o))
}

/// A client of one site, on a port of its own.
pub struct RaidClient {
    port: Port,
    site: Address,
    next_id: u64,
    buf: Vec<u8>,
    /// Messages at the client's port that were not replies of its site: dropped.
    pub dropped: u64,
}

impl RaidClient {
    /// A client at `addr` of the site at `site` (`ClusterConfig::address`), on the
    /// process's embedded engine.
    pub fn open(addr: Address, site: Address) -> Result<RaidClient, ClientError> {
        RaidClient::open_on(None, addr, site)
    }

    /// The same on `engine` (one with the cluster's configuration), if given.
    pub fn open_on(
        engine: Option<&txcast_port::Engine>,
        addr: Address,
        site: Address,
    ) -> Result<RaidClient, ClientError> {
        let cfg = PortConfig {
            idle: IdleStrategy::Park,
            slot_count: 4096,
            slot_bytes: 512,
            ..PortConfig::default()
        };
        let port = match engine {
            Some(e) => Port::open_on(e, addr, cfg)?,
            None => Port::open(addr, cfg)?,
        };
        let buf = vec![0u8; port.message_bytes_max()];
        Ok(RaidClient {
            port,
            site,
            next_id: 1,
            buf,
            dropped: 0,
        })
    }

    /// Sends a transfer; its reply comes from [`RaidClient::poll`] with the id returned.
    pub fn submit(&mut self, t: &Transfer) -> Result<u64, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        self.port.send(self.site, &encode_request(id, t))?;
        Ok(id)
    }

    /// Sends raw bytes to the site (for tests of what it does with bad requests).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        Ok(self.port.send(self.site, bytes)?)
    }

    /// The next reply, waiting up to `timeout`.
    pub fn poll(&mut self, timeout: Duration) -> Result<(u64, Outcome), ClientError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let r = match self.port.recv_timeout(&mut self.buf, Some(left)) {
                Ok(r) => r,
                Err(PortError::Timeout) => return Err(ClientError::Timeout),
                Err(e) => return Err(e.into()),
            };
            if r.source == self.site {
                if let Some(reply) = decode_reply(&self.buf[..r.len]) {
                    return Ok(reply);
                }
            }
            self.dropped += 1;
        }
    }

    /// The site's totals and digest once it is quiet (every transfer under way there ended).
    pub fn audit(&mut self, timeout: Duration) -> Result<Outcome, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        self.port.send(self.site, &encode_audit(id))?;
        self.wait_for(id, timeout)
    }

    /// One transfer, waiting for its outcome (replies to earlier requests are skipped).
    pub fn transfer(&mut self, t: &Transfer, timeout: Duration) -> Result<Outcome, ClientError> {
        let id = self.submit(t)?;
        self.wait_for(id, timeout)
    }

    /// The reply to request `id` (replies to other requests are skipped), by `timeout`.
    fn wait_for(&mut self, id: u64, timeout: Duration) -> Result<Outcome, ClientError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let (got, o) = self.poll(left)?;
            if got == id {
                return Ok(o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip_and_bad_ones_are_named() {
        let t = Transfer {
            account: 7,
            teller: 3,
            branch: 1,
            delta: -42,
        };
        let b = encode_request(9, &t);
        assert_eq!(b.len(), REQUEST_BYTES);
        assert_eq!(decode_request(&b), Ok((9, t)));
        for cut in 0..b.len() {
            let e = decode_request(&b[..cut]).unwrap_err();
            assert_eq!(e.id.is_some(), cut >= 11, "cut {cut}: {e:?}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(decode_request(&long)
            .unwrap_err()
            .why
            .contains("after the last field"));
        let mut kind = b.clone();
        kind[2] = 9;
        assert_eq!(decode_request(&kind).unwrap_err().id, Some(9));
        assert_eq!(decode(&encode_audit(5)), Ok((5, Request::Audit)));
        let mut audit = encode_audit(5);
        audit.push(1);
        assert_eq!(decode(&audit).unwrap_err().id, Some(5));
        assert_eq!(decode(&b), Ok((9, Request::Transfer(t))));

        for o in [
            Outcome::Committed {
                txn: TxnId {
                    site: 1,
                    incarnation: 2,
                    seq: 3,
                },
                balance: -5,
                attempts: 2,
            },
            Outcome::Aborted {
                cause: Cause::Timeout,
                attempts: 7,
            },
            Outcome::Refused {
                reason: Refusal::BadKey,
                detail: "no tuple".into(),
            },
            Outcome::Unknown { attempts: 3 },
            Outcome::Audit {
                totals: crate::db::Totals {
                    accounts: 1,
                    tellers: 2,
                    branches: 3,
                    history: 4,
                    history_rows: 5,
                },
                digest: 6,
            },
        ] {
            let r = encode_reply(4, &o);
            assert_eq!(decode_reply(&r), Some((4, o)));
            assert_eq!(decode_reply(&r[..r.len() - 1]), None);
        }
    }
}
