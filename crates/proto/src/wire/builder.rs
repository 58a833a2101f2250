use super::header::checksum;
use super::record::write_record;
use super::{
    Fragment, Kind, NakRange, PacketHeader, PacketKey, Record, ACK_PREFIX_BYTES, CHECKSUM_OFFSET,
    DATA_PREFIX_BYTES, FLAG_MAC, FLAG_SEAL, HEADER_BYTES, MAC_BYTES, MULTICAST_PREFIX_BYTES,
    NAK_RANGES_MAX, NAK_RANGE_BYTES, NUMBERING_BYTES, PACKET_BYTES_MAX,
};
use super::{Numbering, FLAG_NUMBERED};
use crate::addr::TxnId;

/// Builds one packet in a caller-owned buffer: header, kind prefix, then records until full.
pub struct PacketWriter<'b, 'k> {
    buf: &'b mut [u8],
    header: PacketHeader,
    key: Option<&'k PacketKey>,
    len: usize,
    cap: usize,
    records: usize,
}

impl<'b, 'k> PacketWriter<'b, 'k> {
    fn new(
        buf: &'b mut [u8],
        mut header: PacketHeader,
        key: Option<&'k PacketKey>,
        prefix: usize,
    ) -> Self {
        let trailer = key.map_or(0, |k| k.trailer_bytes());
        let cap = buf.len().min(PACKET_BYTES_MAX) - trailer;
        assert!(
            cap >= HEADER_BYTES + prefix,
            "packet buffer too small for a header"
        );
        header.flags = key_flags(header.flags, key);
        PacketWriter {
            buf,
            header,
            key,
            len: HEADER_BYTES + prefix,
            cap,
            records: 0,
        }
    }

    /// A DATA packet whose first record will carry sequence number `first_seq`.
    pub fn data(
        buf: &'b mut [u8],
        mut header: PacketHeader,
        key: Option<&'k PacketKey>,
        first_seq: u64,
        base: u64,
        ack: (u64, u64),
        credit: u32,
    ) -> Self {
        header.kind = Kind::Data;
        assert!(base <= first_seq, "DATA base above first sequence number");
        let w = Self::new(buf, header, key, DATA_PREFIX_BYTES);
        let p = &mut w.buf[HEADER_BYTES..];
        p[0..8].copy_from_slice(&first_seq.to_le_bytes());
        p[8..16].copy_from_slice(&base.to_le_bytes());
        p[16..24].copy_from_slice(&ack.0.to_le_bytes());
        p[24..32].copy_from_slice(&ack.1.to_le_bytes());
        p[32..36].copy_from_slice(&credit.to_le_bytes());
        w
    }

    pub fn datagram(
        buf: &'b mut [u8],
        mut header: PacketHeader,
        key: Option<&'k PacketKey>,
    ) -> Self {
        header.kind = Kind::Datagram;
        Self::new(buf, header, key, 0)
    }

    /// A numbered DATAGRAM ([`super::FLAG_NUMBERED`]): `n` before the records.
    pub fn datagram_numbered(
        buf: &'b mut [u8],
        mut header: PacketHeader,
        key: Option<&'k PacketKey>,
        n: Numbering,
    ) -> Self {
        header.kind = Kind::Datagram;
        header.flags |= FLAG_NUMBERED;
        let w = Self::new(buf, header, key, NUMBERING_BYTES);
        n.write(&mut w.buf[HEADER_BYTES..HEADER_BYTES + NUMBERING_BYTES]);
        w
    }

    /// A GROUP packet: records, each one group protocol message.
    pub fn group(buf: &'b mut [u8], mut header: PacketHeader, key: Option<&'k PacketKey>) -> Self {
        header.kind = Kind::Group;
        Self::new(buf, header, key, 0)
    }

    pub fn multicast(
        buf: &'b mut [u8],
        mut header: PacketHeader,
        key: Option<&'k PacketKey>,
        txn: TxnId,
    ) -> Self {
        header.kind = Kind::Multicast;
        let w = Self::new(buf, header, key, MULTICAST_PREFIX_BYTES);
        w.buf[HEADER_BYTES..HEADER_BYTES + 8].copy_from_slice(&txn.0.to_le_bytes());
        w
    }

    /// A numbered MULTICAST ([`super::FLAG_NUMBERED`]): `n` after the transaction id.
    pub fn multicast_numbered(
        buf: &'b mut [u8],
        mut header: PacketHeader,
        key: Option<&'k PacketKey>,
        txn: TxnId,
        n: Numbering,
    ) -> Self {
        header.kind = Kind::Multicast;
        header.flags |= FLAG_NUMBERED;
        let w = Self::new(buf, header, key, MULTICAST_PREFIX_BYTES + NUMBERING_BYTES);
        let p = &mut w.buf[HEADER_BYTES..];
        p[0..8].copy_from_slice(&txn.0.to_le_bytes());
        n.write(&mut p[MULTICAST_PREFIX_BYTES..MULTICAST_PREFIX_BYTES + NUMBERING_BYTES]);
        w
    }

    /// Payload bytes the next whole (unfragmented) record could still carry. Zero means either
    /// that only an empty record fits or that none does; `push` is the authority.
    pub fn room(&self) -> usize {
        self.cap
            .saturating_sub(self.len + super::RECORD_HEADER_BYTES)
            .min(u16::MAX as usize)
    }

    /// Sets header flags. Only defined flags are taken; the MAC flag follows the key.
    pub fn set_flags(&mut self, flags: u8) {
        self.header.flags |= flags & super::FLAG_ACK_NOW;
    }

    pub fn records(&self) -> usize {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Appends a whole message; false (and nothing written) if it does not fit.
    pub fn push(&mut self, payload: &[u8]) -> bool {
        self.push_record(payload, None)
    }

    /// Appends a whole message made of `parts` one after another, copied straight into the
    /// packet; false (and nothing written) if it does not fit.
    pub fn push_parts(&mut self, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let need = Record::encoded_len(len, false);
        if len > u16::MAX as usize || self.len + need > self.cap {
            return false;
        }
        let mut at = self.len + write_record(&mut self.buf[self.len..], &[], None);
        self.buf[self.len..self.len + 2].copy_from_slice(&(len as u16).to_le_bytes());
        for p in parts {
            self.buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        self.len += need;
        self.records += 1;
        true
    }

    /// Appends one fragment of a longer message; false if it does not fit.
    pub fn push_fragment(&mut self, payload: &[u8], fragment: Fragment) -> bool {
        self.push_record(payload, Some(fragment))
    }

    fn push_record(&mut self, payload: &[u8], fragment: Option<Fragment>) -> bool {
        let need = Record::encoded_len(payload.len(), fragment.is_some());
        if payload.len() > u16::MAX as usize || self.len + need > self.cap {
            return false;
        }
        let n = write_record(&mut self.buf[self.len..], payload, fragment);
        debug_assert_eq!(n, need);
        self.len += n;
        self.records += 1;
        true
    }

    /// Writes length, MAC (or encrypts and writes the tag) and checksum; returns the packet's
    /// length in bytes.
    pub fn finish(self) -> usize {
        finish(self.buf, &self.header, self.key, self.len)
    }
}

/// `flags` with the trailer flag `key` calls for.
fn key_flags(flags: u8, key: Option<&PacketKey>) -> u8 {
    (flags & !(FLAG_MAC | FLAG_SEAL)) | key.map_or(0, |k| k.flag())
}

fn finish(
    buf: &mut [u8],
    header: &PacketHeader,
    key: Option<&PacketKey>,
    body_end: usize,
) -> usize {
    let total = body_end + key.map_or(0, |k| k.trailer_bytes());
    header.write(buf, total, key.map_or(0, |k| k.id()));
    if let Some(k) = key {
        k.protect(&mut buf[..total], body_end);
    }
    let sum = checksum(&buf[..total]);
    buf[CHECKSUM_OFFSET..HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
    total
}

/// Bytes before the payload of a one-record DATAGRAM packet, numbered or not: the head
/// [`datagram_gather`] writes is this long, or [`NUMBERING_BYTES`] shorter.
pub const GATHER_HEAD_BYTES: usize = HEADER_BYTES + NUMBERING_BYTES + super::RECORD_HEADER_BYTES;

/// A DATAGRAM packet holding one record whose payload is `parts` one after another, built
/// without copying the parts: writes the packet's head (header, `numbering` when given, and
/// record header) into `head` and, with a key, its MAC into `mac`; the packet is
/// `head[..head_len] ++ parts ++ mac[..mac_len]`. Returns `(head_len, mac_len, total length)`,
/// or `None` if the payload is longer than a packet holds or `key` seals (encryption needs
/// the payload in one buffer: use [`PacketWriter::datagram`]). The bytes are exactly those
/// [`PacketWriter::datagram`] (or `datagram_numbered`) makes of the same payload.
pub fn datagram_gather(
    head: &mut [u8; GATHER_HEAD_BYTES],
    mac: &mut [u8; MAC_BYTES],
    mut header: PacketHeader,
    key: Option<&PacketKey>,
    numbering: Option<Numbering>,
    parts: &[&[u8]],
) -> Option<(usize, usize, usize)> {
    let payload: usize = parts.iter().map(|p| p.len()).sum();
    let mac_len = if key.is_some() { MAC_BYTES } else { 0 };
    let head_len = GATHER_HEAD_BYTES
        - if numbering.is_some() {
            0
        } else {
            NUMBERING_BYTES
        };
    let total = head_len + payload + mac_len;
    if total > PACKET_BYTES_MAX || payload > u16::MAX as usize || key.is_some_and(|k| k.seals()) {
        return None;
    }
    header.kind = Kind::Datagram;
    header.flags = key_flags(header.flags, key);
    let mut at = HEADER_BYTES;
    if let Some(n) = numbering {
        header.flags |= FLAG_NUMBERED;
        n.write(&mut head[at..at + NUMBERING_BYTES]);
        at += NUMBERING_BYTES;
    }
    header.write(&mut head[..], total, key.map_or(0, |k| k.id()));
    head[at..at + 2].copy_from_slice(&(payload as u16).to_le_bytes());
    head[at + 2] = 0;
    head[at + 3] = 0;
    let head = &mut head[..head_len];
    if let Some(k) = key {
        let mut h = blake3::Hasher::new_keyed(&k.cluster_key().0);
        h.update(&head[..CHECKSUM_OFFSET]);
        h.update(&head[HEADER_BYTES..]);
        for p in parts {
            h.update(p);
        }
        mac.copy_from_slice(&h.finalize().as_bytes()[..MAC_BYTES]);
    }
    let mut c = crc32fast::Hasher::new();
    c.update(&head[..CHECKSUM_OFFSET]);
    c.update(&head[HEADER_BYTES..]);
    for p in parts {
        c.update(p);
    }
    c.update(&mac[..mac_len]);
    let sum = c.finalize();
    head[CHECKSUM_OFFSET..HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
    Some((head_len, mac_len, total))
}

/// Builds an ACK packet.
pub struct AckWriter;

impl AckWriter {
    /// Writes an ACK with at most [`NAK_RANGES_MAX`] of `naks`; returns the packet's length.
    /// `ack` is (the cumulative acknowledgement, the incarnation of the peer it is for).
    pub fn write(
        buf: &mut [u8],
        mut header: PacketHeader,
        key: Option<&PacketKey>,
        ack: (u64, u64),
        credit: u32,
        naks: &[NakRange],
    ) -> usize {
        header.kind = Kind::Ack;
        header.flags = key_flags(header.flags, key);
        let naks = &naks[..naks.len().min(NAK_RANGES_MAX)];
        let p = &mut buf[HEADER_BYTES..];
        p[0..8].copy_from_slice(&ack.0.to_le_bytes());
        p[8..16].copy_from_slice(&ack.1.to_le_bytes());
        p[16..20].copy_from_slice(&credit.to_le_bytes());
        p[20..22].copy_from_slice(&(naks.len() as u16).to_le_bytes());
        p[22..24].copy_from_slice(&0u16.to_le_bytes());
        let mut at = ACK_PREFIX_BYTES;
        for r in naks {
            p[at..at + 8].copy_from_slice(&r.start.to_le_bytes());
            p[at + 8..at + 12].copy_from_slice(&r.len.to_le_bytes());
            at += NAK_RANGE_BYTES;
        }
        finish(buf, &header, key, HEADER_BYTES + at)
    }
}
