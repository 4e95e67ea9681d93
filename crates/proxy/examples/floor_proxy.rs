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

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};

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

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn epoll_add(ep: RawFd, fd: RawFd, token: u64) {
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
        u64: token,
    };
    // SAFETY: a valid epoll fd and event struct.
    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
}

/// Moves what it can in one direction; true when that direction is finished
/// (EOF passed on, or an error). `rdhup`: the peer's FIN has arrived, so a
/// short read has taken everything before it.
fn pump(h: &mut Half, rdhup: bool, merge: bool) -> bool {
    loop {
        while !h.pending.is_empty() {
            let more = if merge && h.eof { libc::MSG_MORE } else { 0 };
            // SAFETY: the range lies inside `buf`.
            let n = unsafe {
                libc::send(
                    h.to,
                    h.buf[h.pending.clone()].as_ptr().cast(),
                    h.pending.len(),
                    libc::MSG_NOSIGNAL | more,
                )
            };
            if n < 0 {
                return errno() != libc::EAGAIN;
            }
            h.pending.start += n as usize;
        }
        if h.eof {
            if !h.done {
                // SAFETY: plain shutdown of an owned socket.
                unsafe { libc::shutdown(h.to, libc::SHUT_WR) };
                h.done = true;
            }
            return true;
        }
        // SAFETY: reading into the owned buffer.
        let n = unsafe { libc::recv(h.from, h.buf.as_mut_ptr().cast(), h.buf.len(), 0) };
        if n < 0 {
            return errno() != libc::EAGAIN;
        }
        let n = n as usize;
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
    let lfd = lst.as_raw_fd();
    // Accepted sockets inherit TCP_NODELAY.
    let _ = socket2::SockRef::from(&lst).set_tcp_nodelay(true);
    // SAFETY: creating an epoll instance.
    let ep = unsafe { libc::epoll_create1(0) };
    epoll_add(ep, lfd, u64::MAX);
    let mut conns: HashMap<u64, (Half, Half)> = HashMap::new();
    let mut next = 0u64;
    let mut rr = 0usize;
    let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    loop {
        // SAFETY: the event buffer outlives the call.
        let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), evs.len() as i32, -1) };
        for ev in evs.iter().take(n.max(0) as usize) {
            let token = ev.u64;
            let rdhup = ev.events & (libc::EPOLLRDHUP as u32) != 0;
            if token == u64::MAX {
                loop {
                    // SAFETY: accepting on the listener, no address wanted.
                    let cfd = unsafe {
                        libc::accept4(
                            lfd,
                            std::ptr::null_mut(),
                            std::ptr::null_mut(),
                            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                        )
                    };
                    if cfd < 0 {
                        break;
                    }
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
                        // SAFETY: reading into the owned buffer.
                        let got = unsafe {
                            libc::recv(cfd, c2s.buf.as_mut_ptr().cast(), BUF, libc::MSG_DONTWAIT)
                        };
                        if got > 0 {
                            c2s.pending = 0..got as usize;
                            let _ = sock.set_tcp_quickack(false);
                        }
                    }
                    let _ = sock.connect(&dst.into());
                    let sfd = sock.into_raw_fd();
                    next += 1;
                    let s2c = mk(sfd, cfd);
                    conns.insert(next, (c2s, s2c));
                    epoll_add(ep, cfd, next << 1);
                    epoll_add(ep, sfd, (next << 1) | 1);
                }
                continue;
            }
            // The token's low bit says which socket the event is for: its
            // FIN flag only concerns the direction reading from it.
            let (id, server_side) = (token >> 1, token & 1 == 1);
            let Some((c2s, s2c)) = conns.get_mut(&id) else {
                continue;
            };
            let a = pump(c2s, rdhup && !server_side, !naive);
            let b = pump(s2c, rdhup && server_side, !naive);
            if a && b {
                let (c2s, s2c) = conns.remove(&id).expect("present");
                // SAFETY: closing owned sockets; close drops them from epoll.
                unsafe {
                    libc::close(c2s.from);
                    libc::close(s2c.from);
                }
            }
        }
    }
}
