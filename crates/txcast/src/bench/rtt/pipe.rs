//! `pipe`: two anonymous pipes, blocking reads and writes.
//!
//! Rendezvous: the parent creates both pipes; the partner's ends (the read end of
//! parent-to-partner and the write end of partner-to-parent) are left inheritable and their
//! descriptor numbers passed on the command line; the parent's own ends are close-on-exec.
//! After the spawn the parent closes its copies of the partner's ends, so the partner's exit
//! reads as end-of-file. A pipe is a byte stream: each message is exactly `bytes` long, which
//! both sides know, so no framing is needed. The partner's hello is one byte.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{Echo, Listener, PingPong};

const HELLO: u8 = b'H';

struct PipeListener {
    to_partner: File,
    from_partner: File,
    /// The partner's ends: inheritable, not owned here (a partner thread in tests takes them
    /// over), closed by `partner_started`.
    partner_ends: Option<[RawFd; 2]>,
}

struct PipeEndpoint {
    to_peer: File,
    from_peer: File,
    buffer: Vec<u8>,
}

/// A new pipe as (read end, write end), both close-on-exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [libc::c_int; 2] = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the two-element array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are fresh descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_close_on_exec(fd: RawFd, close_on_exec: bool) -> io::Result<()> {
    let flags = if close_on_exec { libc::FD_CLOEXEC } else { 0 };
    // SAFETY: F_SETFD only changes the descriptor flags; a bad fd gives EBADF.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn listen(_bytes: usize) -> io::Result<Box<dyn Listener>> {
    let (partner_reads, to_partner) = pipe()?;
    let (from_partner, partner_writes) = pipe()?;
    set_close_on_exec(partner_reads.as_raw_fd(), false)?;
    set_close_on_exec(partner_writes.as_raw_fd(), false)?;
    let partner_ends = [
        std::os::fd::IntoRawFd::into_raw_fd(partner_reads),
        std::os::fd::IntoRawFd::into_raw_fd(partner_writes),
    ];
    Ok(Box::new(PipeListener {
        to_partner: File::from(to_partner),
        from_partner: File::from(from_partner),
        partner_ends: Some(partner_ends),
    }))
}

pub fn connect(rendezvous: &[String], bytes: usize) -> io::Result<Box<dyn Echo>> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "rendezvous: <read fd> <write fd>",
        )
    };
    let [read_fd, write_fd] = rendezvous else {
        return Err(invalid());
    };
    let read_fd: RawFd = read_fd.parse().map_err(|_| invalid())?;
    let write_fd: RawFd = write_fd.parse().map_err(|_| invalid())?;
    if read_fd < 0 || write_fd < 0 || read_fd == write_fd {
        return Err(invalid());
    }
    // Checks that both are open descriptors (EBADF otherwise) before taking them over, and
    // keeps them from leaking into anything this process may start.
    set_close_on_exec(read_fd, true)?;
    set_close_on_exec(write_fd, true)?;
    // SAFETY: the parent created these descriptors for this partner alone and passed their
    // numbers; nothing else in this process owns them.
    let (from_peer, mut to_peer) =
        unsafe { (File::from_raw_fd(read_fd), File::from_raw_fd(write_fd)) };
    to_peer.write_all(&[HELLO])?;
    Ok(Box::new(PipeEndpoint {
        to_peer,
        from_peer,
        buffer: vec![0; bytes],
    }))
}

impl Listener for PipeListener {
    fn rendezvous(&self) -> Vec<String> {
        let ends = self.partner_ends.unwrap_or([-1, -1]);
        ends.iter().map(|fd| fd.to_string()).collect()
    }

    fn partner_started(&mut self) {
        if let Some(ends) = self.partner_ends.take() {
            for fd in ends {
                // SAFETY: our copies of the partner's ends, not used by anything else here.
                unsafe { libc::close(fd) };
            }
        }
    }

    fn accept(mut self: Box<Self>) -> io::Result<Box<dyn PingPong>> {
        let mut hello = [0u8];
        self.from_partner.read_exact(&mut hello)?;
        if hello[0] != HELLO {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not the partner's hello",
            ));
        }
        Ok(Box::new(PipeEndpoint {
            to_peer: self.to_partner,
            from_peer: self.from_partner,
            buffer: Vec::new(),
        }))
    }
}

impl PingPong for PipeEndpoint {
    fn ping(&mut self, message: &[u8], reply: &mut [u8]) -> io::Result<usize> {
        self.to_peer.write_all(message)?;
        let echo = reply
            .get_mut(..message.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "reply too short"))?;
        self.from_peer.read_exact(echo)?;
        Ok(message.len())
    }
}

impl Echo for PipeEndpoint {
    fn serve(&mut self, round_trips: u64) -> io::Result<()> {
        for _ in 0..round_trips {
            self.from_peer.read_exact(&mut self.buffer)?;
            self.to_peer.write_all(&self.buffer)?;
        }
        Ok(())
    }
}
