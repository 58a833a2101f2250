//! Packet and message formats as checked views over bytes.
//!
//! ```text
//! packet  = header(40) body [mac(16) if FLAG_MAC] [counter u64 | tag(16) if FLAG_SEAL]
//! header  = magic u16 | version u8 | kind u8 | flags u8 | key_id u8 | cluster u16
//!         | incarnation u64 | source Address(8) | destination Address(8)
//!         | length u16 (whole packet) | reserved u16 | checksum u32
//! body    = DATA:      first_seq u64 | base u64 | ack u64 | ack_incarnation u64 | credit u32 | records
//!           ACK:       ack u64 | ack_incarnation u64 | credit u32 | nak_count u16 | reserved u16
//!                      | nak_count × (start u64, len u32)
//!           DATAGRAM:  [numbering if FLAG_NUMBERED] records
//!           MULTICAST: txn u64 | [numbering if FLAG_NUMBERED] records
//!           GROUP:     records (each one group protocol message, see `group::msg`)
//! numbering = seq u64 | dst_incarnation u64
//! record  = len u16 | flags u8 | reserved u8 [| msg_id u32 | index u16 | count u16 | total u32 if FRAG] | payload[len]
//! ```
//! All integers are little-endian. The checksum is CRC-32 over every byte of the packet but the
//! checksum field itself. With a cluster key, the MAC is a keyed BLAKE3 hash of header (without
//! its checksum) and body, truncated to 16 bytes; with a sealing key the body is encrypted with
//! XChaCha20-Poly1305 instead (see `keys`). `key_id` names the key (zero without a trailer).
//! Every decoder names the rule a packet broke.

mod body;
mod builder;
mod error;
mod header;
mod keys;
mod record;

pub use body::{
    parse_datagram, AckBody, DataBody, DatagramBody, MulticastBody, NakRange, Numbering,
    ACK_PREFIX_BYTES, DATA_PREFIX_BYTES, MULTICAST_PREFIX_BYTES, NAK_RANGES_MAX, NAK_RANGE_BYTES,
    NUMBERING_BYTES, SEQ_MAX,
};
pub use builder::{datagram_gather, AckWriter, PacketWriter, GATHER_HEAD_BYTES};
pub use error::WireError;
pub use header::{
    ClusterKey, Kind, Packet, PacketHeader, CHECKSUM_OFFSET, FLAG_ACK_NOW, FLAG_NUMBERED,
    HEADER_BYTES, KEY_ID_OFFSET, MAC_BYTES, MAGIC, VERSION,
};
pub use keys::{
    KeyRing, KeyRingError, PacketKey, COUNTER_BYTES, FLAG_MAC, FLAG_SEAL, SEAL_TRAILER_BYTES,
    TRAILER_BYTES_MAX,
};
pub use record::{
    Fragment, Record, Records, FRAG_EXTRA_BYTES, RECORD_FLAG_FRAG, RECORD_HEADER_BYTES,
};

/// The largest packet txcast ever builds or accepts (a UDP datagram's payload limit).
pub const PACKET_BYTES_MAX: usize = 65507;
/// The smallest packet size a configuration may choose: room for a header, the largest body
/// prefix, a MAC and a fragment record with some payload.
pub const PACKET_BYTES_MIN: usize = 256;

#[cfg(test)]
mod tests;
