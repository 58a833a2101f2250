//! Batched sends: one `sendmmsg(2)` hands the same packet to many destinations.

use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::net::{MMsgHdr, RecvFlags, SendAncillaryBuffer, SendFlags, SocketAddrAny};

/// Most destinations one call covers; longer lists take several calls.
pub const FANOUT_BATCH_MAX: usize = 64;

/// Flags of every send: never wait for room in the socket's buffer, whatever the socket's mode
/// (a port's socket blocks for an invoker's sleep, see `Engine::invoker_sleep`; nothing else
/// may wait on it), and no SIGPIPE.
const SEND_FLAGS: SendFlags = SendFlags::DONTWAIT.union(SendFlags::NOSIGNAL);

/// Sends that found an error report pending on their socket (see [`report_send_errors`]): a
/// socket with one fails its next send, or receive, with that report's error once (for a
/// port unreachable, `ECONNREFUSED`; an unconnected UDP send cannot fail so otherwise). The
/// send is tried again, and the report itself waits on the socket's error queue: the engine
/// looks at this count each duty cycle and empties its sockets' queues when it moved.
pub static SENDS_FOUND_REPORTS: AtomicU64 = AtomicU64::new(0);

/// Tries of one send that find a pending report before it counts as refused.
const REPORTED_RETRIES: u32 = 4;

/// Whether a send failed only because its socket had a report pending (counted).
fn found_report(e: rustix::io::Errno, tries: &mut u32) -> bool {
    if e != rustix::io::Errno::CONNREFUSED || *tries >= REPORTED_RETRIES {
        return false;
    }
    *tries += 1;
    SENDS_FOUND_REPORTS.fetch_add(1, Ordering::Relaxed);
    true
}

/// `sendto(2)` that never waits for room in the socket's buffer.
pub fn send_to(socket: &UdpSocket, packet: &[u8], to: &SocketAddr) -> std::io::Result<usize> {
    let mut tries = 0;
    loop {
        match rustix::net::sendto(socket, packet, SEND_FLAGS, to) {
            Err(e) if found_report(e, &mut tries) => {}
            r => return Ok(r?),
        }
    }
}

/// `sendmsg(2)` of `parts` as one datagram to `to`, without copying them together (never
/// waits for room, as [`send_to`]).
pub fn send_gather(socket: &UdpSocket, parts: &[&[u8]], to: &SocketAddr) -> std::io::Result<usize> {
    const PARTS_MAX: usize = 8;
    if parts.len() > PARTS_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "at most 8 parts",
        ));
    }
    let mut iovs = [IoSlice::new(&[]); PARTS_MAX];
    for (v, p) in iovs.iter_mut().zip(parts) {
        *v = IoSlice::new(p);
    }
    let mut tries = 0;
    loop {
        match rustix::net::sendmsg_addr(
            socket,
            to,
            &iovs[..parts.len()],
            &mut SendAncillaryBuffer::default(),
            SEND_FLAGS,
        ) {
            Err(e) if found_report(e, &mut tries) => {}
            r => return Ok(r?),
        }
    }
}

/// Sends `packet` to every address in `to` with as few system calls as the batch bound allows.
/// Returns how many datagrams the kernel accepted.
pub fn send_same_to_many(
    socket: &UdpSocket,
    packet: &[u8],
    to: &[SocketAddr],
) -> std::io::Result<usize> {
    let mut sent = 0;
    for chunk in to.chunks(FANOUT_BATCH_MAX) {
        // Headers for the chunk only: a group's multicast reaches a few members, and building
        // (zeroing) a full batch of headers would cost more than the few sends.
        sent += match chunk.len() {
            1 => send_one(socket, packet, &chunk[0]),
            n if n <= FANOUT_SMALL => send_chunk::<FANOUT_SMALL>(socket, packet, chunk),
            _ => send_chunk::<FANOUT_BATCH_MAX>(socket, packet, chunk),
        };
    }
    Ok(sent)
}

/// Destinations a multicast to a small group covers with headers on the stack.
const FANOUT_SMALL: usize = 8;

/// One destination: `sendto` rather than `sendmmsg`, the same retry and skip rules.
fn send_one(socket: &UdpSocket, packet: &[u8], to: &SocketAddr) -> usize {
    loop {
        match send_to(socket, packet, to) {
            Ok(_) => return 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            // Refused (unreachable, no route...): skipped, as in a batch.
            Err(_) => return 0,
        }
    }
}

/// Sends `packet` to every address of `chunk` (at most `N`); returns how many were accepted.
fn send_chunk<const N: usize>(socket: &UdpSocket, packet: &[u8], chunk: &[SocketAddr]) -> usize {
    debug_assert!(chunk.len() <= N);
    let iov = [IoSlice::new(packet)];
    // Entries past the chunk repeat its first address; only the chunk's are sent.
    let addrs: [SocketAddrAny; N] =
        std::array::from_fn(|i| SocketAddrAny::from(*chunk.get(i).unwrap_or(&chunk[0])));
    let mut controls: [SendAncillaryBuffer<'_, '_, '_>; N] =
        std::array::from_fn(|_| SendAncillaryBuffer::default());
    let mut control = controls.iter_mut();
    let mut msgs: [MMsgHdr<'_>; N] = std::array::from_fn(|i| {
        MMsgHdr::new_with_addr(&addrs[i], &iov, control.next().expect("N controls"))
    });
    send_headers(socket, &mut msgs[..chunk.len()])
}

/// Sends every prepared header with `sendmmsg`, as many calls as the kernel needs: a full
/// socket buffer is waited out, a destination that refuses (unreachable, no route...) skipped.
/// Returns how many datagrams the kernel accepted.
fn send_headers(socket: &UdpSocket, msgs: &mut [MMsgHdr<'_>]) -> usize {
    let mut sent = 0;
    let mut off = 0;
    let mut tries = 0;
    while off < msgs.len() {
        match rustix::net::sendmmsg(socket, &mut msgs[off..], SEND_FLAGS) {
            Ok(n) => {
                // The kernel stops a batch short at the first message that fails and returns
                // the count, the error dropped: it may have been a pending report, so the
                // engine is told to look at its queues (an empty queue costs one read).
                if off + n < msgs.len() {
                    SENDS_FOUND_REPORTS.fetch_add(1, Ordering::Relaxed);
                }
                off += n;
                sent += n;
                tries = 0;
            }
            Err(rustix::io::Errno::AGAIN) => std::thread::yield_now(),
            Err(e) if found_report(e, &mut tries) => {}
            Err(_) => {
                off += 1;
                tries = 0;
            }
        }
    }
    sent
}

/// Datagrams to send in one `sendmmsg(2)`: packets laid out one after another in one buffer,
/// each with its destination. A packet for several destinations is one entry per destination
/// over the same bytes. Bounded: [`SendBatch::has_room`] says whether another packet fits.
#[derive(Default)]
pub struct SendBatch {
    bytes: Vec<u8>,
    /// (start in `bytes`, length, destination), in sending order.
    entries: Vec<(usize, usize, SocketAddr)>,
}

/// Bytes one [`SendBatch`] holds at most (packets of up to 16 KiB: at least eight of them).
pub const SEND_BATCH_BYTES: usize = 128 * 1024;

impl SendBatch {
    pub fn new() -> SendBatch {
        SendBatch::default()
    }

    /// Whether a packet of `len` bytes to `dests` destinations fits.
    pub fn has_room(&self, len: usize, dests: usize) -> bool {
        self.entries.is_empty()
            || (self.bytes.len() + len <= SEND_BATCH_BYTES
                && self.entries.len() + dests <= FANOUT_BATCH_MAX)
    }

    /// Adds `packet` for every address of `to` (in that order). The caller checks
    /// [`SendBatch::has_room`] first; a packet that does not fit is added anyway (the batch
    /// is then sent in several calls).
    pub fn push(&mut self, packet: &[u8], to: impl IntoIterator<Item = SocketAddr>) {
        let start = self.bytes.len();
        let before = self.entries.len();
        self.entries
            .extend(to.into_iter().map(|a| (start, packet.len(), a)));
        // A packet for nobody takes no room.
        if self.entries.len() > before {
            self.bytes.extend_from_slice(packet);
        }
    }

    /// Adds a packet for `to` built in place by `build` in up to `room` bytes (it returns the
    /// length it wrote); nothing if `build` fails. Check [`SendBatch::has_room`] first.
    pub fn push_built<E>(
        &mut self,
        room: usize,
        to: SocketAddr,
        build: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<(), E> {
        let start = self.bytes.len();
        self.bytes.resize(start + room, 0);
        match build(&mut self.bytes[start..]) {
            Ok(n) => {
                self.bytes.truncate(start + n);
                self.entries.push((start, n, to));
                Ok(())
            }
            Err(e) => {
                self.bytes.truncate(start);
                Err(e)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sends every datagram, in order, with as few system calls as [`FANOUT_BATCH_MAX`]
    /// allows (a lone datagram with `sendto`); a destination that refuses is skipped, a full
    /// socket buffer waited out, as in [`send_same_to_many`]. Empties the batch; returns how
    /// many datagrams the kernel accepted.
    pub fn send(&mut self, socket: &UdpSocket) -> usize {
        let sent = match self.entries.as_slice() {
            [] => 0,
            [(start, len, to)] => send_one(socket, &self.bytes[*start..*start + len], to),
            // Headers for the batch only, as in `send_same_to_many`: zeroing a full batch's
            // would cost more than a small batch's sends.
            small if small.len() <= FANOUT_SMALL => {
                send_entries::<FANOUT_SMALL>(socket, &self.bytes, small)
            }
            all => all
                .chunks(FANOUT_BATCH_MAX)
                .map(|chunk| send_entries::<FANOUT_BATCH_MAX>(socket, &self.bytes, chunk))
                .sum(),
        };
        self.bytes.clear();
        self.entries.clear();
        sent
    }
}

/// One `sendmmsg` (more if the kernel takes part of it) for `chunk` (at most `N` entries over
/// `bytes`).
fn send_entries<const N: usize>(
    socket: &UdpSocket,
    bytes: &[u8],
    chunk: &[(usize, usize, SocketAddr)],
) -> usize {
    debug_assert!(chunk.len() <= N);
    // Entries past the chunk repeat its first one; only the chunk's are sent.
    let entry = |i: usize| chunk.get(i).unwrap_or(&chunk[0]);
    let addrs: [SocketAddrAny; N] = std::array::from_fn(|i| SocketAddrAny::from(entry(i).2));
    let iovs: [[IoSlice<'_>; 1]; N] = std::array::from_fn(|i| {
        let (start, len, _) = *entry(i);
        [IoSlice::new(&bytes[start..start + len])]
    });
    let mut controls: [SendAncillaryBuffer<'_, '_, '_>; N] =
        std::array::from_fn(|_| SendAncillaryBuffer::default());
    let mut control = controls.iter_mut();
    let mut msgs: [MMsgHdr<'_>; N] = std::array::from_fn(|i| {
        MMsgHdr::new_with_addr(&addrs[i], &iovs[i], control.next().expect("N controls"))
    });
    send_headers(socket, &mut msgs[..chunk.len()])
}

/// A socket for a port's transaction groups: bound to the group port on every address, shared
/// with the other ports of the host (SO_REUSEADDR), receiving only the groups it joined.
pub fn group_socket(port: u16) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
    sock.set_reuse_address(true)?;
    // Without this, Linux hands the socket every group any socket of the host joined.
    sock.set_multicast_all_v4(false)?;
    sock.bind(&SocketAddr::from(([0, 0, 0, 0], port)).into())?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// Joins (or leaves) an IPv4 multicast group on the interface with address `interface`.
pub fn membership(
    sock: &UdpSocket,
    group: SocketAddr,
    interface: std::net::Ipv4Addr,
    join: bool,
) -> std::io::Result<()> {
    let SocketAddr::V4(g) = group else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "IP multicast groups are IPv4",
        ));
    };
    if join {
        sock.join_multicast_v4(g.ip(), &interface)
    } else {
        sock.leave_multicast_v4(g.ip(), &interface)
    }
}

/// Sends this socket's IP multicast out of the interface with address `interface`.
pub fn multicast_interface(sock: &UdpSocket, interface: std::net::Ipv4Addr) -> std::io::Result<()> {
    socket2::SockRef::from(sock).set_multicast_if_v4(&interface)
}

/// Kernel buffer size asked for each port's socket (the kernel caps it at `rmem_max`/`wmem_max`):
/// room for a full link window of small packets, so a burst is queued rather than dropped.
pub const SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// Asks for large kernel send and receive buffers.
pub fn size_buffers(sock: &UdpSocket) -> std::io::Result<()> {
    let sock = socket2::SockRef::from(sock);
    sock.set_recv_buffer_size(SOCKET_BUFFER_BYTES)?;
    sock.set_send_buffer_size(SOCKET_BUFFER_BYTES)
}

/// Asks the kernel to report errors about the datagrams `sock` sends (`IP_RECVERR`), among
/// them the ICMP "port unreachable" a host answers when no socket is bound where a datagram
/// went: the sign that the process which held that port is gone. The reports wait on the
/// socket's error queue, which [`take_send_error`] empties; until it does, reads fail and
/// poll(2) says `POLLERR`.
pub fn report_send_errors(sock: &UdpSocket) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a plain setsockopt of an int option on a live descriptor.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_RECVERR,
            &on as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// One error the kernel reported about a datagram this socket sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendError {
    /// Where the datagram went.
    pub to: Option<SocketAddr>,
    pub errno: i32,
    /// An ICMP message from the network reported it (not a local error).
    pub icmp: bool,
}

impl SendError {
    /// The destination answered that no socket is bound at that port.
    pub fn port_unreachable(&self) -> bool {
        self.icmp && self.errno == libc::ECONNREFUSED
    }
}

/// Takes the oldest report from `sock`'s error queue, if any (see [`report_send_errors`]).
pub fn take_send_error(sock: &UdpSocket) -> std::io::Result<Option<SendError>> {
    // SAFETY: zeroed plain C structs; the header points at buffers that outlive the call.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut data = [0u8; 64];
    // u64s: the control buffer must be aligned for `cmsghdr`.
    let mut control = [0u64; 32];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = &mut name as *mut _ as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` is to a live local buffer of the length given.
    let n = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let mut found = None;
    // SAFETY: the kernel filled `msg_controllen` bytes of `control`; the CMSG macros walk
    // within them, and a record of the right level and type holds a `sock_extended_err`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_RECVERR {
                let ee =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::sock_extended_err);
                found = Some(SendError {
                    to: socket_addr_of(&name),
                    errno: ee.ee_errno as i32,
                    icmp: ee.ee_origin == libc::SO_EE_ORIGIN_ICMP,
                });
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    // A record without the report (none is known) still counts as taken.
    Ok(Some(found.unwrap_or(SendError {
        to: socket_addr_of(&name),
        errno: 0,
        icmp: false,
    })))
}

/// Datagrams taken from a socket with one `recvmmsg(2)` (or one `recvfrom(2)` when traffic
/// is light), in buffers and message headers set up once. `recvmmsg` is called through libc:
/// rustix, which makes the other calls here, does not offer it.
pub struct RecvBatch {
    slot_bytes: usize,
    data: Vec<u8>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    names: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    count: usize,
    /// After a `recv_one`: slot 0's sender (`names` holds `recv`'s senders).
    one_from: Option<Option<SocketAddr>>,
}

// SAFETY: the raw pointers in `iovs` and `msgs` point into this struct's own heap buffers,
// which move with it; nothing else aliases them.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// `slots` (at most [`RECV_BATCH_SLOTS_MAX`]) datagrams of at most `slot_bytes` each.
    pub fn new(slots: usize, slot_bytes: usize) -> Self {
        let slots = slots.clamp(1, RECV_BATCH_SLOTS_MAX);
        let mut b = RecvBatch {
            slot_bytes,
            data: vec![0u8; slots * slot_bytes],
            lens: vec![0; slots],
            truncated: vec![false; slots],
            // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
            names: vec![unsafe { std::mem::zeroed() }; slots],
            iovs: Vec::with_capacity(slots),
            // SAFETY: mmsghdr is plain old data; all-zero is valid.
            msgs: vec![unsafe { std::mem::zeroed() }; slots],
            count: 0,
            one_from: None,
        };
        let base = b.data.as_mut_ptr();
        for i in 0..slots {
            b.iovs.push(libc::iovec {
                // SAFETY: slot i lies inside `data` (slots * slot_bytes long).
                iov_base: unsafe { base.add(i * slot_bytes) } as *mut libc::c_void,
                iov_len: slot_bytes,
            });
        }
        for ((m, iov), name) in b
            .msgs
            .iter_mut()
            .zip(b.iovs.iter_mut())
            .zip(b.names.iter_mut())
        {
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = name as *mut _ as *mut libc::c_void;
        }
        b
    }

    /// Reads one waiting datagram into slot 0 with `recvfrom(2)` (the cheapest poll of an
    /// idle socket), without blocking. Returns 0 or 1.
    pub fn recv_one(&mut self, sock: &UdpSocket) -> std::io::Result<usize> {
        self.recv_one_with(sock, RecvFlags::DONTWAIT)
    }

    /// Reads one datagram into slot 0, waiting for it as long as the socket's mode and receive
    /// timeout say (a blocking socket with `SO_RCVTIMEO`). Returns 0 on the timeout or a
    /// signal, else 1.
    pub fn recv_one_waiting(&mut self, sock: &UdpSocket) -> std::io::Result<usize> {
        match self.recv_one_with(sock, RecvFlags::empty()) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(0),
            r => r,
        }
    }

    fn recv_one_with(&mut self, sock: &UdpSocket, flags: RecvFlags) -> std::io::Result<usize> {
        // With TRUNC the real length comes back even when the slot was too small.
        match rustix::net::recvfrom(
            sock,
            &mut self.data[..self.slot_bytes],
            flags | RecvFlags::TRUNC,
        ) {
            Ok((_, n, from)) => {
                self.count = 1;
                self.one_from = Some(from.and_then(|a| SocketAddr::try_from(a).ok()));
                self.truncated[0] = n > self.slot_bytes;
                self.lens[0] = n.min(self.slot_bytes);
                Ok(1)
            }
            Err(e) => {
                self.count = 0;
                nothing_on_would_block(e.into())
            }
        }
    }

    /// Reads as many waiting datagrams as fit, without blocking. Returns how many.
    pub fn recv(&mut self, sock: &UdpSocket) -> std::io::Result<usize> {
        for m in self.msgs.iter_mut() {
            m.msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        // SAFETY: every header points at live buffers owned by `self`.
        let got = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                self.msgs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        self.one_from = None;
        if got < 0 {
            self.count = 0;
            return nothing_on_would_block(std::io::Error::last_os_error());
        }
        self.count = got as usize;
        for ((len, trunc), m) in self
            .lens
            .iter_mut()
            .zip(self.truncated.iter_mut())
            .zip(self.msgs.iter())
            .take(self.count)
        {
            *len = (m.msg_len as usize).min(self.slot_bytes);
            *trunc = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        }
        Ok(self.count)
    }

    /// As [`RecvBatch::get`], the bytes writable (a sealed packet is decrypted in place).
    pub fn get_mut(&mut self, i: usize) -> (&mut [u8], Option<SocketAddr>, bool) {
        let at = i * self.slot_bytes;
        let from = match self.one_from {
            Some(from) if i == 0 => from,
            _ => socket_addr_of(&self.names[i]),
        };
        (
            &mut self.data[at..at + self.lens[i]],
            from,
            self.truncated[i],
        )
    }

    /// Slots per `recv`.
    pub fn slots(&self) -> usize {
        self.msgs.len()
    }

    /// Datagram `i` of the last `recv`: its bytes, its sender, and whether it was longer than
    /// a slot (then it is cut and should be dropped).
    pub fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>, bool) {
        let at = i * self.slot_bytes;
        let from = match self.one_from {
            Some(from) if i == 0 => from,
            _ => socket_addr_of(&self.names[i]),
        };
        (&self.data[at..at + self.lens[i]], from, self.truncated[i])
    }
}

/// Most datagrams one `recvmmsg` call takes.
pub const RECV_BATCH_SLOTS_MAX: usize = 32;

fn socket_addr_of(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(sin6.sin6_port))))
        }
        _ => None,
    }
}

/// Waits in `ppoll(2)` until one of `fds` is readable or `timeout` passes.
pub fn ppoll_for(fds: &mut [libc::pollfd], timeout: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` is a valid pollfd array and `ts` a valid timespec for the call.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
}

/// How [`epoll_sleep`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpollWake {
    TimedOut,
    /// A descriptor is ready: the token it was registered with.
    Event(u64),
    /// A descriptor is ready or a signal came, which one unknown.
    Unknown,
}

/// Sleeps until a descriptor of the epoll set `epfd` is ready or `timeout` passes.
///
/// Waits in `epoll_pwait2` on the set itself rather than in poll(2) on its descriptor: a
/// socket's wake-up then reaches the sleeper straight from the set's callback, not through a
/// second wait queue, and the timeout keeps nanosecond precision (plain `epoll_wait` rounds
/// it up to a millisecond). Kernels before 5.11 lack the call; there it falls back to
/// `ppoll` on the set's descriptor.
pub fn epoll_sleep(epfd: BorrowedFd<'_>, timeout: std::time::Duration) -> EpollWake {
    use rustix::event::{epoll, PollFd, PollFlags, Timespec};
    use std::sync::atomic::{AtomicBool, Ordering};
    static NO_PWAIT2: AtomicBool = AtomicBool::new(false);
    let ts = Timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    if !NO_PWAIT2.load(Ordering::Relaxed) {
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 1];
        match epoll::wait(epfd, &mut events[..], Some(&ts)) {
            Ok((ready, _)) => {
                return match ready.first() {
                    Some(ev) => EpollWake::Event(ev.data.u64()),
                    None => EpollWake::TimedOut,
                }
            }
            Err(rustix::io::Errno::NOSYS) => NO_PWAIT2.store(true, Ordering::Relaxed),
            Err(_) => return EpollWake::Unknown,
        }
    }
    let mut fds = [PollFd::new(&epfd, PollFlags::IN)];
    match rustix::event::poll(&mut fds, Some(&ts)) {
        Ok(0) => EpollWake::TimedOut,
        _ => EpollWake::Unknown,
    }
}

/// The result of a non-blocking receive call: `Ok(0)` for "nothing waiting".
fn nothing_on_would_block(e: std::io::Error) -> std::io::Result<usize> {
    if e.kind() == std::io::ErrorKind::WouldBlock {
        Ok(0)
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram to a port nobody holds comes back as a "port unreachable" report on the
    /// error queue, naming where it went; the send after it, to a live destination, is not
    /// lost to the pending report.
    #[test]
    fn a_closed_port_is_reported_and_the_next_send_still_goes() {
        let from = UdpSocket::bind("127.0.0.1:0").unwrap();
        report_send_errors(&from).unwrap();
        let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
        let gone_addr = gone.local_addr().unwrap();
        drop(gone);
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
        sink.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        assert_eq!(send_same_to_many(&from, b"x", &[gone_addr]).unwrap(), 1);
        // The answer is queued by the time a datagram to the sink made the same trip.
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        probe.send_to(b"p", sink.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 8];
        sink.recv_from(&mut buf).unwrap();
        let to = [sink.local_addr().unwrap(), sink.local_addr().unwrap()];
        assert_eq!(send_same_to_many(&from, b"live", &to).unwrap(), 2);
        for _ in 0..2 {
            let (n, _) = sink.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"live");
        }
        let e = take_send_error(&from).unwrap().expect("a report");
        assert!(e.port_unreachable(), "{e:?}");
        assert_eq!(e.to, Some(gone_addr));
        assert_eq!(take_send_error(&from).unwrap(), None);
    }

    /// Every destination gets the packet once, whatever the list's length: one (a plain
    /// send), a small group, and more than a batch.
    #[test]
    fn send_same_to_many_reaches_every_destination() {
        let from = UdpSocket::bind("127.0.0.1:0").unwrap();
        for n in [1usize, 3, FANOUT_SMALL + 1, FANOUT_BATCH_MAX + 3] {
            let sinks: Vec<UdpSocket> = (0..n)
                .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
                .collect();
            let to: Vec<SocketAddr> = sinks.iter().map(|s| s.local_addr().unwrap()).collect();
            assert_eq!(send_same_to_many(&from, b"fan", &to).unwrap(), n);
            for s in &sinks {
                s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                    .unwrap();
                let mut buf = [0u8; 8];
                let (len, src) = s.recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..len], b"fan");
                assert_eq!(src, from.local_addr().unwrap());
            }
        }
    }

    /// A batch of different packets, some for several destinations, arrives whole and in
    /// order at every destination, through a lone `sendto` and through several calls.
    #[test]
    fn a_send_batch_delivers_every_packet_in_order() {
        let from = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sinks: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let to: Vec<SocketAddr> = sinks.iter().map(|s| s.local_addr().unwrap()).collect();
        // One datagram (sendto), a small batch (5), a larger one (9), more than one call.
        for packets in [1usize, 3, 5, FANOUT_BATCH_MAX] {
            let mut batch = SendBatch::new();
            let mut expect: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
            for k in 0..packets {
                let packet: Vec<u8> = vec![k as u8; 1 + k % 7];
                // Every packet to sink 0; odd ones to sinks 1 and 2 as well.
                let dests: Vec<usize> = if k % 2 == 1 { vec![0, 1, 2] } else { vec![0] };
                batch.push(&packet, dests.iter().map(|&d| to[d]));
                for d in dests {
                    expect[d].push(packet.clone());
                }
            }
            let total: usize = expect.iter().map(Vec::len).sum();
            assert_eq!(batch.send(&from), total);
            assert!(batch.is_empty());
            for (s, want) in sinks.iter().zip(&expect) {
                s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                    .unwrap();
                for w in want {
                    let mut buf = [0u8; 16];
                    let n = s.recv(&mut buf).unwrap();
                    assert_eq!(&buf[..n], &w[..]);
                }
            }
        }
    }

    #[test]
    fn a_send_batch_is_bounded() {
        let a: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut batch = SendBatch::new();
        assert!(
            batch.has_room(SEND_BATCH_BYTES * 2, 1),
            "an empty batch takes anything"
        );
        batch.push(&[0u8; 100], []);
        assert!(
            batch.is_empty() && batch.bytes.is_empty(),
            "a packet for nobody is dropped"
        );
        batch.push(&[0u8; 100], [a]);
        assert!(batch.has_room(100, FANOUT_BATCH_MAX - 1));
        assert!(!batch.has_room(100, FANOUT_BATCH_MAX));
        assert!(!batch.has_room(SEND_BATCH_BYTES, 1));
    }
}
