//! `raw-udp-blocking` and `raw-udp-busypoll`: two UDP sockets on 127.0.0.1.
//!
//! Rendezvous: the parent binds an ephemeral port and passes it; the partner binds its own,
//! connects to the parent's and sends a hello, whose source address the parent connects to.
//! Blocking sockets wait in `recv` (with a [`PARTNER_TIMEOUT`] receive timeout); busy-polling
//! ones are non-blocking and spin on `EAGAIN`.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use super::{spin_until, Echo, Listener, PingPong, PARTNER_TIMEOUT};

const HELLO: &[u8] = b"txcast-rtt-hello";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Blocking,
    BusyPoll,
    /// Busy-polling with unconnected sockets (`sendto`/`recvfrom`, a route lookup per send),
    /// as an endpoint that talks to many peers must use them.
    BusyPollUnconnected,
}

struct UdpListener {
    socket: UdpSocket,
    wait: Wait,
}

struct UdpEndpoint {
    socket: UdpSocket,
    wait: Wait,
    buffer: Vec<u8>,
    /// Where unconnected sends go.
    peer: Option<SocketAddr>,
}

pub fn listen_blocking(bytes: usize) -> io::Result<Box<dyn Listener>> {
    listen(bytes, Wait::Blocking)
}

pub fn listen_busy_poll(bytes: usize) -> io::Result<Box<dyn Listener>> {
    listen(bytes, Wait::BusyPoll)
}

pub fn listen_busy_poll_unconnected(bytes: usize) -> io::Result<Box<dyn Listener>> {
    listen(bytes, Wait::BusyPollUnconnected)
}

pub fn connect_busy_poll_unconnected(
    rendezvous: &[String],
    bytes: usize,
) -> io::Result<Box<dyn Echo>> {
    connect(rendezvous, bytes, Wait::BusyPollUnconnected)
}

pub fn connect_blocking(rendezvous: &[String], bytes: usize) -> io::Result<Box<dyn Echo>> {
    connect(rendezvous, bytes, Wait::Blocking)
}

pub fn connect_busy_poll(rendezvous: &[String], bytes: usize) -> io::Result<Box<dyn Echo>> {
    connect(rendezvous, bytes, Wait::BusyPoll)
}

fn listen(_bytes: usize, wait: Wait) -> io::Result<Box<dyn Listener>> {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    socket.set_read_timeout(Some(PARTNER_TIMEOUT))?;
    Ok(Box::new(UdpListener { socket, wait }))
}

fn connect(rendezvous: &[String], bytes: usize, wait: Wait) -> io::Result<Box<dyn Echo>> {
    let port: u16 = match rendezvous {
        [port] => port.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "rendezvous: <udp port>"))?;
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    let parent = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    if wait == Wait::BusyPollUnconnected {
        socket.send_to(HELLO, parent)?;
        return Ok(Box::new(UdpEndpoint::new(
            socket,
            wait,
            bytes,
            Some(parent),
        )?));
    }
    socket.connect(parent)?;
    socket.send(HELLO)?;
    Ok(Box::new(UdpEndpoint::new(socket, wait, bytes, None)?))
}

impl Listener for UdpListener {
    fn rendezvous(&self) -> Vec<String> {
        let port = self.socket.local_addr().map(|a| a.port()).unwrap_or(0);
        vec![port.to_string()]
    }

    fn accept(self: Box<Self>) -> io::Result<Box<dyn PingPong>> {
        let mut hello = [0u8; 64];
        let (n, peer): (usize, SocketAddr) = self.socket.recv_from(&mut hello)?;
        if &hello[..n] != HELLO {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not the partner's hello",
            ));
        }
        if self.wait == Wait::BusyPollUnconnected {
            return Ok(Box::new(UdpEndpoint::new(
                self.socket,
                self.wait,
                0,
                Some(peer),
            )?));
        }
        self.socket.connect(peer)?;
        Ok(Box::new(UdpEndpoint::new(self.socket, self.wait, 0, None)?))
    }
}

impl UdpEndpoint {
    fn new(
        socket: UdpSocket,
        wait: Wait,
        bytes: usize,
        peer: Option<SocketAddr>,
    ) -> io::Result<UdpEndpoint> {
        match wait {
            Wait::Blocking => socket.set_read_timeout(Some(PARTNER_TIMEOUT))?,
            Wait::BusyPoll | Wait::BusyPollUnconnected => socket.set_nonblocking(true)?,
        }
        Ok(UdpEndpoint {
            socket,
            wait,
            peer,
            // One byte more than expected, so an oversized datagram shows as a wrong length
            // rather than being silently truncated to the right one.
            buffer: vec![0; bytes + 1],
        })
    }

    fn send(&self, message: &[u8]) -> io::Result<()> {
        let sent = match self.wait {
            Wait::Blocking => self.socket.send(message)?,
            Wait::BusyPoll | Wait::BusyPollUnconnected => {
                let mut sent = 0;
                let send = |m: &[u8]| match self.peer {
                    Some(p) => self.socket.send_to(m, p),
                    None => self.socket.send(m),
                };
                spin_until(|| match send(message) {
                    Ok(n) => {
                        sent = n;
                        Ok(true)
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
                    Err(e) => Err(e),
                })?;
                sent
            }
        };
        if sent != message.len() {
            return Err(io::Error::other("short datagram send"));
        }
        Ok(())
    }

    fn recv(socket: &UdpSocket, wait: Wait, into: &mut [u8]) -> io::Result<usize> {
        match wait {
            Wait::Blocking => socket.recv(into),
            Wait::BusyPoll | Wait::BusyPollUnconnected => {
                let mut received = 0;
                let unconnected = wait == Wait::BusyPollUnconnected;
                spin_until(|| {
                    match if unconnected {
                        socket.recv_from(into).map(|(n, _)| n)
                    } else {
                        socket.recv(into)
                    } {
                        Ok(n) => {
                            received = n;
                            Ok(true)
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
                        Err(e) => Err(e),
                    }
                })?;
                Ok(received)
            }
        }
    }
}

impl PingPong for UdpEndpoint {
    fn ping(&mut self, message: &[u8], reply: &mut [u8]) -> io::Result<usize> {
        self.send(message)?;
        UdpEndpoint::recv(&self.socket, self.wait, reply)
    }
}

impl Echo for UdpEndpoint {
    fn serve(&mut self, round_trips: u64) -> io::Result<()> {
        let mut buffer = std::mem::take(&mut self.buffer);
        for _ in 0..round_trips {
            let n = UdpEndpoint::recv(&self.socket, self.wait, &mut buffer)?;
            self.send(&buffer[..n])?;
        }
        self.buffer = buffer;
        Ok(())
    }
}
