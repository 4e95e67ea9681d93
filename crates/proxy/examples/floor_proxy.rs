//! The floor of a userspace TCP proxy's cost: a hand-rolled, single-threaded
//! epoll relay that makes only the system calls every L4 proxy must make
//! (accept, socket, connect, recv/send both ways, half-close, close) and
//! sends the fewest segments the socket API allows (the request rides on
//! the handshake's last ACK; a response and the server's FIN leave as one
//! segment) — with no scheduling, connection table, counters, timeouts or
//! error recovery. It measures how much of a balancer's CPU per connection
//! is the kernel's TCP work that no proxy design can avoid
//! (`scripts/proxy-segments --floor`). A measuring instrument, not a product.
//!
//! `floor_proxy LISTEN BACKEND [BACKEND ...]` (round robin; `--naive` turns
//! the two segment savings off).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{MsgFlags, Shutdown, SockFlag, accept4, recv, send, shutdown};

const BUF: usize = 16 * 1024;

/// One direction of a relayed connection.
struct Half {
    from: RawFd,
    to: RawFd,
    buf: Vec<u8>,
    /// Bytes in `buf` not yet written to `to`.
    pending: std::ops::Range<usize>,
    eof: bool,
    done: bool,
}

/// A relayed connection: both directions and the two sockets, closed (and
/// so dropped from epoll) when it is dropped.
struct Conn {
    c2s: Half,
    s2c: Half,
    _client: OwnedFd,
    _server: OwnedFd,
}

fn epoll_add(ep: &Epoll, fd: impl AsFd, token: u64) {
    let flags =
        EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLET;
    ep.add(fd, EpollEvent::new(flags, token))
        .expect("epoll_ctl");
}

/// Moves what it can in one direction; true when that direction is finished
/// (EOF passed on, or an error). `rdhup`: the peer's FIN has arrived, so a
/// short read has taken everything before it.
fn pump(h: &mut Half, rdhup: bool, merge: bool) -> bool {
    loop {
        while !h.pending.is_empty() {
            let more = if merge && h.eof {
                MsgFlags::from_bits_retain(libc::MSG_MORE)
            } else {
                MsgFlags::empty()
            };
            match send(
                h.to,
                &h.buf[h.pending.clone()],
                MsgFlags::MSG_NOSIGNAL | more,
            ) {
                Ok(n) => h.pending.start += n,
                Err(e) => return e != Errno::EAGAIN,
            }
        }
        if h.eof {
            if !h.done {
                let _ = shutdown(h.to, Shutdown::Write);
                h.done = true;
            }
            return true;
        }
        let n = match recv(h.from, &mut h.buf, MsgFlags::empty()) {
            Ok(n) => n,
            Err(e) => return e != Errno::EAGAIN,
        };
        // A short read with the FIN already in: EOF comes next, skip that read.
        h.eof = n == 0 || (merge && rdhup && n < h.buf.len());
        h.pending = 0..n;
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let naive = args.first().is_some_and(|a| a == "--naive");
    if naive {
        args.remove(0);
    }
    if args.len() < 2 {
        eprintln!("usage: floor_proxy [--naive] LISTEN BACKEND [BACKEND ...]");
        std::process::exit(2);
    }
    let listen: SocketAddr = args[0].parse().expect("listen address");
    let backends: Vec<SocketAddr> = args[1..]
        .iter()
        .map(|a| a.parse().expect("backend address"))
        .collect();
    let lst = TcpListener::bind(listen).expect("bind");
    lst.set_nonblocking(true).expect("nonblocking");
    // Accepted sockets inherit TCP_NODELAY.
    let _ = socket2::SockRef::from(&lst).set_tcp_nodelay(true);
    let ep = Epoll::new(EpollCreateFlags::empty()).expect("epoll_create1");
    epoll_add(&ep, &lst, u64::MAX);
    let mut conns: HashMap<u64, Conn> = HashMap::new();
    let mut next = 0u64;
    let mut rr = 0usize;
    let mut evs = vec![EpollEvent::empty(); 256];
    loop {
        let n = match ep.wait(&mut evs, EpollTimeout::NONE) {
            Ok(n) => n,
            Err(Errno::EINTR) => 0,
            Err(e) => panic!("epoll_wait: {e}"),
        };
        for ev in evs.iter().take(n) {
            let token = ev.data();
            let rdhup = ev.events().contains(EpollFlags::EPOLLRDHUP);
            if token == u64::MAX {
                loop {
                    let Ok(client) =
                        accept4(&lst, SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC)
                    else {
                        break;
                    };
                    let cfd = client.as_raw_fd();
                    let mk = |from, to| Half {
                        from,
                        to,
                        buf: vec![0; BUF],
                        pending: 0..0,
                        eof: false,
                        done: false,
                    };
                    let dst = backends[rr % backends.len()];
                    rr += 1;
                    let sock = socket2::Socket::new(
                        socket2::Domain::for_address(dst),
                        socket2::Type::STREAM.nonblocking(),
                        None,
                    )
                    .expect("socket");
                    let _ = sock.set_tcp_nodelay(true);
                    let mut c2s = mk(cfd, sock.as_raw_fd());
                    if !naive {
                        // The request may be here already: then hold the
                        // handshake's last ACK back so it leaves with it.
                        if let Ok(got) = recv(cfd, &mut c2s.buf, MsgFlags::MSG_DONTWAIT)
                            && got > 0
                        {
                            c2s.pending = 0..got;
                            let _ = sock.set_tcp_quickack(false);
                        }
                    }
                    let _ = sock.connect(&dst.into());
                    let server = OwnedFd::from(sock);
                    let sfd = server.as_raw_fd();
                    next += 1;
                    let s2c = mk(sfd, cfd);
                    epoll_add(&ep, &client, next << 1);
                    epoll_add(&ep, &server, (next << 1) | 1);
                    conns.insert(
                        next,
                        Conn {
                            c2s,
                            s2c,
                            _client: client,
                            _server: server,
                        },
                    );
                }
                continue;
            }
            // The token's low bit says which socket the event is for: its
            // FIN flag only concerns the direction reading from it.
            let (id, server_side) = (token >> 1, token & 1 == 1);
            let Some(c) = conns.get_mut(&id) else {
                continue;
            };
            let a = pump(&mut c.c2s, rdhup && !server_side, !naive);
            let b = pump(&mut c.s2c, rdhup && server_side, !naive);
            if a && b {
                // Closing the sockets drops them from epoll.
                conns.remove(&id);
            }
        }
    }
}
