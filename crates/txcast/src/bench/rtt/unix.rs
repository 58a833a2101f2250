//! `unix-dgram`: two blocking Unix datagram sockets.
//!
//! Rendezvous: the parent makes a private directory (mode 0700) under the temporary directory
//! and binds `parent.sock` in it, passing the directory; the partner binds `partner.sock`,
//! connects to `parent.sock` and sends a hello. Once both are connected the parent removes the
//! directory (connected datagram sockets no longer need their names).

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{Echo, Listener, PingPong, PARTNER_TIMEOUT};

const HELLO: &[u8] = b"txcast-rtt-hello";
const PARENT_NAME: &str = "parent.sock";
const PARTNER_NAME: &str = "partner.sock";

struct UnixListener {
    socket: UnixDatagram,
    directory: Directory,
}

/// The rendezvous directory, removed with everything in it when dropped.
struct Directory(PathBuf);

impl Drop for Directory {
    fn drop(&mut self) {
        // Best effort: a leftover directory in the temporary directory is harmless.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct UnixEndpoint {
    socket: UnixDatagram,
    buffer: Vec<u8>,
}

pub fn listen(_bytes: usize) -> io::Result<Box<dyn Listener>> {
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "txcast-bench-{}-{}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    ));
    DirBuilder::new().mode(0o700).create(&path)?;
    let directory = Directory(path);
    let socket = UnixDatagram::bind(directory.0.join(PARENT_NAME))?;
    socket.set_read_timeout(Some(PARTNER_TIMEOUT))?;
    Ok(Box::new(UnixListener { socket, directory }))
}

pub fn connect(rendezvous: &[String], bytes: usize) -> io::Result<Box<dyn Echo>> {
    let [directory] = rendezvous else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "rendezvous: <directory>",
        ));
    };
    let directory = Path::new(directory);
    let socket = UnixDatagram::bind(directory.join(PARTNER_NAME))?;
    socket.connect(directory.join(PARENT_NAME))?;
    socket.set_read_timeout(Some(PARTNER_TIMEOUT))?;
    socket.send(HELLO)?;
    Ok(Box::new(UnixEndpoint {
        socket,
        // One byte more than expected, so an oversized datagram shows as a wrong length.
        buffer: vec![0; bytes + 1],
    }))
}

impl Listener for UnixListener {
    fn rendezvous(&self) -> Vec<String> {
        vec![self.directory.0.to_string_lossy().into_owned()]
    }

    fn accept(self: Box<Self>) -> io::Result<Box<dyn PingPong>> {
        let mut hello = [0u8; 64];
        let (n, peer) = self.socket.recv_from(&mut hello)?;
        if &hello[..n] != HELLO {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not the partner's hello",
            ));
        }
        let peer = peer
            .as_pathname()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unnamed partner"))?;
        self.socket.connect(peer)?;
        // Dropping the directory removes both socket names; the connection stays.
        drop(self.directory);
        Ok(Box::new(UnixEndpoint {
            socket: self.socket,
            buffer: Vec::new(),
        }))
    }
}

impl PingPong for UnixEndpoint {
    fn ping(&mut self, message: &[u8], reply: &mut [u8]) -> io::Result<usize> {
        if self.socket.send(message)? != message.len() {
            return Err(io::Error::other("short datagram send"));
        }
        self.socket.recv(reply)
    }
}

impl Echo for UnixEndpoint {
    fn serve(&mut self, round_trips: u64) -> io::Result<()> {
        for _ in 0..round_trips {
            let n = self.socket.recv(&mut self.buffer)?;
            if self.socket.send(&self.buffer[..n])? != n {
                return Err(io::Error::other("short datagram send"));
            }
        }
        Ok(())
    }
}
