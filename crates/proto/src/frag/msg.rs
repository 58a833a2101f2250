//! Long-message (LDG) messages: checked views over the bytes of one port datagram, and writers.
//!
//! ```text
//! DATA   0 magic u8 (0xA8) | 1 kind u8 (1) | 2 reserved u16 | 4 fragment_bytes u32
//!        8 sender incarnation u64 | 16 transfer u64 | 24 total_len u64
//!        32 index u32 | 36 deadline_ms u32 | 40 the fragment's bytes
//! ACK    0 magic | 1 kind (2) | 2 status u16 | 4 window u32
//!        8 sender incarnation u64 | 16 transfer u64
//!        24 cumulative u32 | 28 bitmap_bytes u16 | 30 reserved u16
//!        32 receiver incarnation u64 | 40 reassembly u64 | 48 bitmap
//! ABORT  0 magic | 1 kind (3) | 2 reserved u16 | 4 reserved u32
//!        8 sender incarnation u64 | 16 transfer u64
//! ```
//!
//! - A DATA fragment carries the time its transfer had left when it was sent (at least 1 ms):
//!   the sender sends nothing after it, so a receiver that remembers a finished transfer that
//!   long (plus a packet lifetime) never takes a copy of it for a new one.
//! - A DATA fragment `index` of a message of `total_len` bytes cut into fragments of
//!   `fragment_bytes` holds bytes `index * fragment_bytes ..` of it: `fragment_bytes` of them,
//!   or what is left for the last. The decoder checks the count and the length.
//! - An ACK says fragments below `cumulative` arrived, and bit `k` of the bitmap (LSB first)
//!   that fragment `cumulative + 1 + k` did; `window` is how many fragments past
//!   `cumulative` the receiver takes. Its status says whether the message is complete, or
//!   refused. The receiver's incarnation and the reassembly's number (a count of the
//!   reassemblies the receiver began) tell a sender that the receiver forgot what it had
//!   acknowledged: it restarted, or freed the reassembly and began it again.
//! - An ABORT, sender to receiver, says the transfer is given up.
//!
//! All integers are little-endian. A decoder error names the rule the bytes broke.

use crate::codec::{u16_at, u32_at, u64_at};

pub const LDG_MAGIC: u8 = 0xA8;
pub const DATA_HEADER_BYTES: usize = 40;
pub const ACK_HEADER_BYTES: usize = 48;
pub const ABORT_BYTES: usize = 24;
/// Longest ACK bitmap: the 512 fragments after the cumulative point.
pub const BITMAP_BYTES_MAX: usize = 64;
/// Largest fragment (a UDP datagram holds it with the packet's and this header's bytes).
pub const FRAGMENT_BYTES_MAX: usize = 65_000;
/// Most fragments in one message.
pub const FRAGMENTS_MAX: u64 = 1 << 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum AckStatus {
    /// Still arriving.
    Partial = 0,
    /// Every fragment arrived; the message is delivered.
    Complete = 1,
    /// Longer than the receiver takes: given up.
    TooLong = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    pub fragment_bytes: u32,
    pub incarnation: u64,
    pub transfer: u64,
    pub total_len: u64,
    pub index: u32,
    /// Time the transfer had left when this copy was sent, in ms (at least 1).
    pub deadline_ms: u32,
}

impl DataHeader {
    /// Fragments in the message.
    pub fn count(&self) -> u32 {
        count(self.total_len, self.fragment_bytes)
    }
}

/// Fragments a message of `total_len` bytes needs at `fragment_bytes` each (an empty message
/// is one empty fragment).
pub fn count(total_len: u64, fragment_bytes: u32) -> u32 {
    total_len.div_ceil(fragment_bytes.max(1) as u64).max(1) as u32
}

/// Length of fragment `index`.
pub fn fragment_len(total_len: u64, fragment_bytes: u32, index: u32) -> usize {
    let start = index as u64 * fragment_bytes as u64;
    (total_len.saturating_sub(start)).min(fragment_bytes as u64) as usize
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckHeader<'a> {
    pub status: AckStatus,
    pub window: u32,
    /// The sender's incarnation (the transfer's).
    pub incarnation: u64,
    /// The receiver's.
    pub receiver_incarnation: u64,
    /// Which reassembly of the receiver's this is (increasing; 0 when none is).
    pub reassembly: u64,
    pub transfer: u64,
    pub cumulative: u32,
    pub bitmap: &'a [u8],
}

impl AckHeader<'_> {
    /// Whether the ack says fragment `i` arrived.
    pub fn has(&self, i: u32) -> bool {
        if i < self.cumulative {
            return true;
        }
        let k = (i - self.cumulative) as usize;
        k >= 1 && {
            let bit = k - 1;
            self.bitmap
                .get(bit / 8)
                .is_some_and(|b| b & (1 << (bit % 8)) != 0)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LdgMsg<'a> {
    Data(DataHeader, &'a [u8]),
    Ack(AckHeader<'a>),
    Abort { incarnation: u64, transfer: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LdgWireError {
    #[error("ldg message of {len} bytes is shorter than its {need}-byte header")]
    Short { len: usize, need: usize },
    #[error("ldg magic must be 0xa8, is {0:#04x}")]
    BadMagic(u8),
    #[error("ldg kind must be 1..=3, is {0}")]
    UnknownKind(u8),
    /// `fragment_bytes` must be 1..=65000.
    #[error("ldg fragment_bytes must be 1..=65000, is {0}")]
    BadFragmentBytes(u32),
    /// More than 2^24 fragments.
    #[error("ldg message has more than 2^24 fragments")]
    TooManyFragments,
    /// `index` must be below the fragment count.
    #[error("ldg fragment index {index} must be below the count {count}")]
    IndexBeyondCount { index: u32, count: u32 },
    /// The fragment's length must be what its index and the total say.
    #[error("ldg fragment of {len} bytes, its index and total say {want}")]
    WrongFragmentLength { len: usize, want: usize },
    #[error("ldg ack status must be 0..=2, is {0}")]
    UnknownAckStatus(u16),
    /// The bitmap must fit the message and `BITMAP_BYTES_MAX`.
    #[error("ldg ack bitmap must be at most 64 bytes and fit the message")]
    BadBitmap,
    /// Reserved fields must be zero.
    #[error("ldg reserved fields must be zero")]
    ReservedNotZero,
    /// A fragment must have time left (deadline_ms >= 1).
    #[error("ldg fragment must have time left (deadline_ms >= 1)")]
    ZeroDeadline,
}

/// Whether `bytes` start like an LDG message.
pub fn is_ldg(bytes: &[u8]) -> bool {
    bytes.first() == Some(&LDG_MAGIC)
}

/// Checks `bytes` as one LDG message.
pub fn parse(bytes: &[u8]) -> Result<LdgMsg<'_>, LdgWireError> {
    let short = |need| LdgWireError::Short {
        len: bytes.len(),
        need,
    };
    if bytes.len() < ABORT_BYTES {
        return Err(short(ABORT_BYTES));
    }
    if bytes[0] != LDG_MAGIC {
        return Err(LdgWireError::BadMagic(bytes[0]));
    }
    let incarnation = u64_at(bytes, 8);
    let transfer = u64_at(bytes, 16);
    match bytes[1] {
        1 => {
            if bytes.len() < DATA_HEADER_BYTES {
                return Err(short(DATA_HEADER_BYTES));
            }
            if u16_at(bytes, 2) != 0 {
                return Err(LdgWireError::ReservedNotZero);
            }
            let deadline_ms = u32_at(bytes, 36);
            if deadline_ms == 0 {
                return Err(LdgWireError::ZeroDeadline);
            }
            let fragment_bytes = u32_at(bytes, 4);
            if fragment_bytes == 0 || fragment_bytes as usize > FRAGMENT_BYTES_MAX {
                return Err(LdgWireError::BadFragmentBytes(fragment_bytes));
            }
            let total_len = u64_at(bytes, 24);
            if total_len.div_ceil(fragment_bytes as u64) > FRAGMENTS_MAX {
                return Err(LdgWireError::TooManyFragments);
            }
            let h = DataHeader {
                fragment_bytes,
                incarnation,
                transfer,
                total_len,
                index: u32_at(bytes, 32),
                deadline_ms,
            };
            let count = h.count();
            if h.index >= count {
                return Err(LdgWireError::IndexBeyondCount {
                    index: h.index,
                    count,
                });
            }
            let payload = &bytes[DATA_HEADER_BYTES..];
            let want = fragment_len(total_len, fragment_bytes, h.index);
            if payload.len() != want {
                return Err(LdgWireError::WrongFragmentLength {
                    len: payload.len(),
                    want,
                });
            }
            Ok(LdgMsg::Data(h, payload))
        }
        2 => {
            if bytes.len() < ACK_HEADER_BYTES {
                return Err(short(ACK_HEADER_BYTES));
            }
            let status = match u16_at(bytes, 2) {
                0 => AckStatus::Partial,
                1 => AckStatus::Complete,
                2 => AckStatus::TooLong,
                s => return Err(LdgWireError::UnknownAckStatus(s)),
            };
            if u16_at(bytes, 30) != 0 {
                return Err(LdgWireError::ReservedNotZero);
            }
            let n = u16_at(bytes, 28) as usize;
            if n > BITMAP_BYTES_MAX || bytes.len() != ACK_HEADER_BYTES + n {
                return Err(LdgWireError::BadBitmap);
            }
            Ok(LdgMsg::Ack(AckHeader {
                status,
                window: u32_at(bytes, 4),
                incarnation,
                receiver_incarnation: u64_at(bytes, 32),
                reassembly: u64_at(bytes, 40),
                transfer,
                cumulative: u32_at(bytes, 24),
                bitmap: &bytes[ACK_HEADER_BYTES..],
            }))
        }
        3 => {
            if bytes.len() != ABORT_BYTES || u16_at(bytes, 2) != 0 || u32_at(bytes, 4) != 0 {
                return Err(LdgWireError::ReservedNotZero);
            }
            Ok(LdgMsg::Abort {
                incarnation,
                transfer,
            })
        }
        k => Err(LdgWireError::UnknownKind(k)),
    }
}

/// Writes a DATA message (header and fragment) into `buf`; its length, or `None` if it does
/// not fit.
pub fn write_data(h: &DataHeader, fragment: &[u8], buf: &mut [u8]) -> Option<usize> {
    let n = DATA_HEADER_BYTES + fragment.len();
    write_data_header(h, buf.get_mut(..n)?)?;
    buf[DATA_HEADER_BYTES..n].copy_from_slice(fragment);
    Some(n)
}

/// Writes a DATA message's header alone into `buf` (the fragment follows it on the wire);
/// its length, or `None` if it does not fit.
pub fn write_data_header(h: &DataHeader, buf: &mut [u8]) -> Option<usize> {
    let out = buf.get_mut(..DATA_HEADER_BYTES)?;
    out[0] = LDG_MAGIC;
    out[1] = 1;
    out[2..4].fill(0);
    out[4..8].copy_from_slice(&h.fragment_bytes.to_le_bytes());
    out[8..16].copy_from_slice(&h.incarnation.to_le_bytes());
    out[16..24].copy_from_slice(&h.transfer.to_le_bytes());
    out[24..32].copy_from_slice(&h.total_len.to_le_bytes());
    out[32..36].copy_from_slice(&h.index.to_le_bytes());
    out[36..40].copy_from_slice(&h.deadline_ms.to_le_bytes());
    Some(DATA_HEADER_BYTES)
}

/// Writes an ACK into `buf`; its length, or `None` if it does not fit.
pub fn write_ack(a: &AckHeader<'_>, buf: &mut [u8]) -> Option<usize> {
    let bitmap = &a.bitmap[..a.bitmap.len().min(BITMAP_BYTES_MAX)];
    let n = ACK_HEADER_BYTES + bitmap.len();
    let out = buf.get_mut(..n)?;
    out[0] = LDG_MAGIC;
    out[1] = 2;
    out[2..4].copy_from_slice(&(a.status as u16).to_le_bytes());
    out[4..8].copy_from_slice(&a.window.to_le_bytes());
    out[8..16].copy_from_slice(&a.incarnation.to_le_bytes());
    out[16..24].copy_from_slice(&a.transfer.to_le_bytes());
    out[24..28].copy_from_slice(&a.cumulative.to_le_bytes());
    out[28..30].copy_from_slice(&(bitmap.len() as u16).to_le_bytes());
    out[30..32].fill(0);
    out[32..40].copy_from_slice(&a.receiver_incarnation.to_le_bytes());
    out[40..48].copy_from_slice(&a.reassembly.to_le_bytes());
    out[ACK_HEADER_BYTES..].copy_from_slice(bitmap);
    Some(n)
}

/// Writes an ABORT into `buf`; its length, or `None` if it does not fit.
pub fn write_abort(incarnation: u64, transfer: u64, buf: &mut [u8]) -> Option<usize> {
    let out = buf.get_mut(..ABORT_BYTES)?;
    out[0] = LDG_MAGIC;
    out[1] = 3;
    out[2..8].fill(0);
    out[8..16].copy_from_slice(&incarnation.to_le_bytes());
    out[16..24].copy_from_slice(&transfer.to_le_bytes());
    Some(ABORT_BYTES)
}
