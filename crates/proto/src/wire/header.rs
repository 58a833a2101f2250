use super::keys::{KeyRing, FLAG_MAC, FLAG_SEAL, SEAL_TRAILER_BYTES};
use super::WireError;
use crate::addr::Address;
use crate::codec::{u16_at, u32_at, u64_at};

pub const MAGIC: u16 = 0x5854; // "TX" in little-endian byte order
pub const VERSION: u8 = 1;
pub const HEADER_BYTES: usize = 40;
pub const CHECKSUM_OFFSET: usize = 36;
pub const MAC_BYTES: usize = 16;

/// The sender asks for an immediate acknowledgement.
pub const FLAG_ACK_NOW: u8 = 0x02;
/// A DATAGRAM or MULTICAST body starts, after its kind's prefix, with a [`super::Numbering`]
/// (sender's sequence number and the destination's incarnation): the replay defence of a
/// keyed cluster.
pub const FLAG_NUMBERED: u8 = 0x08;
const FLAGS_KNOWN: u8 = FLAG_MAC | FLAG_ACK_NOW | FLAG_SEAL | FLAG_NUMBERED;
/// Header byte naming the key of a MAC'd or sealed packet (zero in a packet without trailer).
pub const KEY_ID_OFFSET: usize = 5;

/// Packet kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Reliable, in-order messages on a link.
    Data = 1,
    /// Cumulative acknowledgement, credit and selective negative acknowledgements.
    Ack = 2,
    /// Unreliable messages (failure detection and the like).
    Datagram = 3,
    /// Transaction multicast: messages for the members of a transaction's group.
    Multicast = 4,
    /// Group protocol messages (records; each one message of `group::msg`), for whichever
    /// group of the destination port they name.
    Group = 5,
}

impl Kind {
    pub fn from_u8(v: u8) -> Result<Kind, WireError> {
        match v {
            1 => Ok(Kind::Data),
            2 => Ok(Kind::Ack),
            3 => Ok(Kind::Datagram),
            4 => Ok(Kind::Multicast),
            5 => Ok(Kind::Group),
            k => Err(WireError::UnknownKind(k)),
        }
    }
}

/// A 32-byte cluster key. When set, every packet carries a keyed MAC (or, with a sealing
/// [`super::PacketKey`], an AEAD tag) and packets without a valid one are dropped.
#[derive(Clone)]
pub struct ClusterKey(pub [u8; 32]);

impl core::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    /// The MAC of a packet's header (without its checksum) and body.
    pub fn mac(&self, header_without_checksum: &[u8], body: &[u8]) -> [u8; MAC_BYTES] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(header_without_checksum);
        h.update(body);
        let full = h.finalize();
        let mut out = [0u8; MAC_BYTES];
        out.copy_from_slice(&full.as_bytes()[..MAC_BYTES]);
        out
    }

    /// Derives a key from a passphrase (for configuration files).
    pub fn from_passphrase(s: &str) -> ClusterKey {
        ClusterKey(blake3::derive_key("txcast cluster key v1", s.as_bytes()))
    }
}

/// The fixed header of a packet, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketHeader {
    pub kind: Kind,
    pub flags: u8,
    pub cluster: u16,
    /// The sender's incarnation: milliseconds since the Unix epoch when its port opened (made
    /// strictly increasing within a process). 64 bits, so it never wraps.
    pub incarnation: u64,
    pub source: Address,
    pub destination: Address,
}

impl PacketHeader {
    /// Whether a port at `port` takes this packet: a point-to-point packet names it exactly; a
    /// GROUP packet goes to every member as one packet, so it names the instance only (the
    /// group message names the group); a MULTICAST names the type and instance (the members
    /// of a transaction share them).
    pub fn addressed_to(&self, port: Address) -> bool {
        match self.kind {
            Kind::Group => self.destination.instance == port.instance,
            Kind::Multicast => {
                self.destination.instance == port.instance
                    && self.destination.server_type == port.server_type
            }
            Kind::Data | Kind::Ack | Kind::Datagram => self.destination == port,
        }
    }

    /// Writes the header with `length` and `key_id`; the checksum field is left zero for the
    /// writer to fill.
    pub(crate) fn write(&self, out: &mut [u8], length: usize, key_id: u8) {
        out[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        out[2] = VERSION;
        out[3] = self.kind as u8;
        out[4] = self.flags;
        out[5] = key_id;
        out[6..8].copy_from_slice(&self.cluster.to_le_bytes());
        out[8..16].copy_from_slice(&self.incarnation.to_le_bytes());
        self.source.write_to(&mut out[16..24]);
        self.destination.write_to(&mut out[24..32]);
        out[32..34].copy_from_slice(&(length as u16).to_le_bytes());
        out[34..36].copy_from_slice(&0u16.to_le_bytes());
        out[36..40].copy_from_slice(&0u32.to_le_bytes());
    }
}

/// The CRC-32 of a packet, skipping the checksum field.
pub(crate) fn checksum(packet: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&packet[..CHECKSUM_OFFSET]);
    h.update(&packet[HEADER_BYTES..]);
    h.finalize()
}

/// A checked view of one packet: the header has been validated, the checksum and (with a key)
/// the MAC or AEAD tag verified, and `body` is exactly the (decrypted) bytes between header and
/// trailer.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    pub header: PacketHeader,
    pub body: &'a [u8],
}

/// What the header checks found: the trailer's kind and where the body ends.
struct Checked {
    header: PacketHeader,
    key_id: u8,
    body_end: usize,
}

impl<'a> Packet<'a> {
    /// Validates `buf` as one packet of cluster `cluster`, verifying its MAC under `keys` when
    /// set. A sealed packet is refused ([`WireError::Sealed`]): it needs [`Packet::open`].
    pub fn parse(
        buf: &'a [u8],
        cluster: u16,
        keys: Option<&KeyRing>,
    ) -> Result<Packet<'a>, WireError> {
        let c = check(buf, cluster, keys)?;
        if c.header.flags & FLAG_SEAL != 0 {
            return Err(WireError::Sealed);
        }
        if let Some(ring) = keys {
            let k = ring
                .find(c.key_id)
                .ok_or(WireError::UnknownKeyId(c.key_id))?;
            if k.seals() {
                return Err(WireError::SealMissing);
            }
            k.verify_mac(buf, c.body_end)?;
        }
        Ok(Packet {
            header: c.header,
            body: &buf[HEADER_BYTES..c.body_end],
        })
    }

    /// As [`Packet::parse`], and a sealed packet is verified and decrypted in place (its
    /// body's bytes in `buf` become the plaintext; on any error they are left as they were).
    pub fn open(
        buf: &'a mut [u8],
        cluster: u16,
        keys: Option<&KeyRing>,
    ) -> Result<Packet<'a>, WireError> {
        let c = check(buf, cluster, keys)?;
        if let Some(ring) = keys {
            let k = ring
                .find(c.key_id)
                .ok_or(WireError::UnknownKeyId(c.key_id))?;
            match (k.seals(), c.header.flags & FLAG_SEAL != 0) {
                (false, false) => k.verify_mac(buf, c.body_end)?,
                (true, true) => k.open(buf, c.body_end)?,
                (true, false) => return Err(WireError::SealMissing),
                (false, true) => return Err(WireError::SealUnexpected),
            }
        }
        let buf: &'a [u8] = buf;
        Ok(Packet {
            header: c.header,
            body: &buf[HEADER_BYTES..c.body_end],
        })
    }
}

/// Everything but the MAC or tag: bounds, magic, version, kind, flags, reserved fields,
/// length, checksum, cluster, and that a trailer is there exactly when keys are.
fn check(buf: &[u8], cluster: u16, keys: Option<&KeyRing>) -> Result<Checked, WireError> {
    if buf.len() < HEADER_BYTES {
        return Err(WireError::ShorterThanHeader);
    }
    if buf.len() > super::PACKET_BYTES_MAX {
        return Err(WireError::PacketTooLong(buf.len()));
    }
    if u16_at(buf, 0) != MAGIC {
        return Err(WireError::BadMagic);
    }
    if buf[2] != VERSION {
        return Err(WireError::UnsupportedVersion(buf[2]));
    }
    let kind = Kind::from_u8(buf[3])?;
    let flags = buf[4];
    if flags & !FLAGS_KNOWN != 0 {
        return Err(WireError::UnknownFlags(flags & !FLAGS_KNOWN));
    }
    if flags & FLAG_NUMBERED != 0 && !matches!(kind, Kind::Datagram | Kind::Multicast) {
        return Err(WireError::NumberedKind);
    }
    let trailer = match (flags & FLAG_MAC != 0, flags & FLAG_SEAL != 0) {
        (false, false) => 0,
        (true, false) => MAC_BYTES,
        (false, true) => SEAL_TRAILER_BYTES,
        (true, true) => return Err(WireError::MacAndSeal),
    };
    let key_id = buf[KEY_ID_OFFSET];
    if (trailer == 0 && key_id != 0) || u16_at(buf, 34) != 0 {
        return Err(WireError::ReservedNotZero);
    }
    let length = u16_at(buf, 32) as usize;
    if length != buf.len() || length < HEADER_BYTES + trailer {
        return Err(WireError::LengthMismatch {
            field: length,
            received: buf.len(),
        });
    }
    if checksum(buf) != u32_at(buf, CHECKSUM_OFFSET) {
        return Err(WireError::ChecksumMismatch);
    }
    let found = u16_at(buf, 6);
    if found != cluster {
        return Err(WireError::WrongCluster {
            expected: cluster,
            found,
        });
    }
    match (keys.is_some(), trailer != 0) {
        (true, false) => return Err(WireError::MacMissing),
        (false, true) => return Err(WireError::MacUnexpected),
        _ => {}
    }
    Ok(Checked {
        header: PacketHeader {
            kind,
            flags,
            cluster: found,
            incarnation: u64_at(buf, 8),
            source: Address::read_from(&buf[16..24]),
            destination: Address::read_from(&buf[24..32]),
        },
        key_id,
        body_end: length - trailer,
    })
}
