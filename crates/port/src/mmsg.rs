//! Batched sends: one `sendmmsg(2)` hands the same packet to many destinations.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// Most destinations one call covers; longer lists take several calls.
pub const FANOUT_BATCH_MAX: usize = 64;

fn sockaddr_of(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
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
        let mut addrs: [(libc::sockaddr_storage, libc::socklen_t); FANOUT_BATCH_MAX] =
            // SAFETY: plain old data, zero is valid.
            unsafe { std::mem::zeroed() };
        for (slot, a) in addrs.iter_mut().zip(chunk) {
            *slot = sockaddr_of(a);
        }
        let mut iov = libc::iovec {
            iov_base: packet.as_ptr() as *mut libc::c_void,
            iov_len: packet.len(),
        };
        // SAFETY: mmsghdr is plain old data, zero is valid.
        let mut msgs: [libc::mmsghdr; FANOUT_BATCH_MAX] = unsafe { std::mem::zeroed() };
        for (m, (ss, len)) in msgs.iter_mut().zip(addrs.iter_mut()).take(chunk.len()) {
            m.msg_hdr.msg_name = ss as *mut _ as *mut libc::c_void;
            m.msg_hdr.msg_namelen = *len;
            m.msg_hdr.msg_iov = &mut iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        let mut off = 0;
        while off < chunk.len() {
            // SAFETY: msgs[off..chunk.len()] are initialised headers pointing at live buffers.
            let n = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    msgs.as_mut_ptr().add(off),
                    (chunk.len() - off) as libc::c_uint,
                    0,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    std::thread::yield_now();
                    continue;
                }
                return Err(e);
            }
            off += n as usize;
            sent += n as usize;
        }
    }
    Ok(sent)
}
