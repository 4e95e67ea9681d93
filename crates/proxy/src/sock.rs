//! Socket options and the few system calls tokio does not wrap: binding a
//! virtual address that may not be configured yet (`IP_FREEBIND`, as
//! HAProxy's `transparent`/`freebind` bind options do, so a VIP that VRRP
//! moves here later binds now), aborting a socket with a reset
//! (`SO_LINGER` 0), and reading the kernel's segment counters (`TCP_INFO`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::{Domain, SockRef, Socket, Type};

/// Listen backlog of virtual service sockets (HAProxy and nginx use the
/// kernel's `somaxconn` cap too; the kernel clamps it).
const BACKLOG: i32 = 4096;

fn base_socket(
    addr: SocketAddr,
    ty: Type,
    proto: socket2::Protocol,
    reuse_port: bool,
) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    s.set_reuse_address(true)?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    match addr {
        SocketAddr::V4(_) => s.set_freebind_v4(true)?,
        SocketAddr::V6(_) => {
            // A `[::]` service must not also take the IPv4 port: IPVS keeps
            // the families apart.
            s.set_only_v6(true)?;
            s.set_freebind_v6(true)?;
        }
    }
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s)
}

/// A non-blocking TCP listener on `addr` with `SO_REUSEADDR` and freebind
/// (and `SO_REUSEPORT` when `reuse_port`: see
/// [`crate::ProxyConfig::reuse_port`]).
pub(crate) fn bind_tcp(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::TcpListener> {
    let s = base_socket(addr, Type::STREAM, socket2::Protocol::TCP, reuse_port)?;
    // Accepted sockets inherit TCP_NODELAY from the listener on Linux: one
    // setsockopt per service instead of one per connection.
    s.set_tcp_nodelay(true)?;
    s.listen(BACKLOG)?;
    Ok(s.into())
}

/// A non-blocking socket of type `ty` and `protocol` for `dst`'s family:
/// made so at once on Linux (close-on-exec too), set so after elsewhere.
pub(crate) fn nonblocking_socket(
    dst: SocketAddr,
    ty: Type,
    protocol: socket2::Protocol,
) -> io::Result<Socket> {
    #[cfg(target_os = "linux")]
    let ty = ty.nonblocking().cloexec();
    let s = Socket::new(Domain::for_address(dst), ty, Some(protocol))?;
    #[cfg(not(target_os = "linux"))]
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Connect to a real server: TCP_NODELAY set before the connect, and
/// success read off the readiness event (EPOLLOUT without a hang-up) rather
/// than with a `getsockopt(SO_ERROR)`, which is asked only when the event
/// says the connect failed — one system call fewer per connection than
/// `TcpStream::connect`, as HAProxy does it.
///
/// `data_follows`: the caller sends data as soon as the connection is up,
/// so the handshake's last ACK is held back (`TCP_QUICKACK` off before the
/// connect; Linux then delays that ACK) and leaves on the first data
/// segment: one segment fewer, and the server accepts the connection and
/// reads the request in one wake-up (HAProxy's `tcp-smart-connect`). Never
/// set without data to send: a server that speaks first would wait for the
/// delayed ACK.
///
/// `src`: bind to this local address first (`IP_BIND_ADDRESS_NO_PORT`: the
/// kernel picks the port at connect, unique for the 4-tuple); the connect
/// then fails with `EADDRNOTAVAIL` at once when no port is left toward
/// `dst` from it.
pub(crate) async fn connect(
    dst: SocketAddr,
    data_follows: bool,
    src: Option<IpAddr>,
) -> io::Result<tokio::net::TcpStream> {
    let s = nonblocking_socket(dst, Type::STREAM, socket2::Protocol::TCP)?;
    s.set_tcp_nodelay(true)?;
    #[cfg(target_os = "linux")]
    if data_follows {
        s.set_tcp_quickack(false)?;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = data_follows;
    if let Some(src) = src {
        #[cfg(target_os = "linux")]
        rvs_sys::sock::set_bind_address_no_port(s.as_fd(), true)?;
        s.bind(&SocketAddr::new(src, 0).into())?;
    }
    match s.connect(&dst.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let stream = tokio::net::TcpStream::from_std(std::net::TcpStream::from(s))?;
    let ready = stream.ready(tokio::io::Interest::WRITABLE).await?;
    if ready.is_write_closed() {
        return Err(stream
            .take_error()?
            .unwrap_or_else(|| io::Error::from(io::ErrorKind::ConnectionRefused)));
    }
    Ok(stream)
}

/// A non-blocking UDP socket on `addr` with `SO_REUSEADDR` and freebind.
pub(crate) fn bind_udp(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::UdpSocket> {
    Ok(base_socket(addr, Type::DGRAM, socket2::Protocol::UDP, reuse_port)?.into())
}

/// Make the next close of this socket send a RST instead of a FIN (used to
/// pass a reset through and to refuse connections at once).
pub(crate) fn abort_on_close<F: AsFd>(s: &F) {
    let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// Send `buf` with `MSG_MORE` on a non-blocking stream: the kernel holds a
/// final small segment back, so a `shutdown(SHUT_WR)` that follows puts its
/// FIN on it. Returns the bytes taken, `WouldBlock` when none.
pub(crate) fn try_send_more(s: &tokio::net::TcpStream, buf: &[u8]) -> io::Result<usize> {
    use nix::sys::socket::{MsgFlags, send};
    use std::os::fd::AsRawFd;
    #[cfg(target_os = "linux")]
    let flags = MsgFlags::from_bits_retain(libc::MSG_MORE) | MsgFlags::MSG_NOSIGNAL;
    #[cfg(not(target_os = "linux"))]
    let flags = MsgFlags::empty();
    s.try_io(tokio::io::Interest::WRITABLE, || {
        send(s.as_raw_fd(), buf, flags).map_err(io::Error::from)
    })
}

/// Read what the peer has already sent, without waiting and without
/// tokio's readiness (a socket accepted a moment ago has none recorded
/// yet): `Ok(0)` when nothing is there or the peer has closed, else the
/// bytes read.
pub(crate) fn read_waiting(s: &tokio::net::TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd;
    match recv(s.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
        Ok(n) => Ok(n),
        Err(nix::errno::Errno::EAGAIN) => Ok(0),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Shut down the write side (send our FIN), ignoring a socket that is
/// already disconnected.
pub(crate) fn shutdown_write<F: AsFd>(s: &F) {
    let _ = SockRef::from(s).shutdown(std::net::Shutdown::Write);
}

/// Segments received and sent on a TCP socket (`tcpi_segs_in`,
/// `tcpi_segs_out`, Linux ≥ 4.2), or `None` when the kernel does not report
/// them.
#[cfg(target_os = "linux")]
pub(crate) fn tcp_segs<F: AsFd>(s: &F) -> Option<(u64, u64)> {
    rvs_sys::sock::tcp_segs(s.as_fd())
}

/// Segment counters: not available off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn tcp_segs<F: AsFd>(_s: &F) -> Option<(u64, u64)> {
    None
}

/// The default fd budget: the soft `RLIMIT_NOFILE` minus a reserve for the
/// daemon's own files (control socket, listeners, config, logs).
pub(crate) fn default_fd_budget() -> usize {
    const RESERVE: u64 = 64;
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(1024);
    usize::try_from(soft.saturating_sub(RESERVE)).unwrap_or(usize::MAX)
}

/// True when `ip` lies in the CIDR `net/prefix` (an IPv4-mapped IPv6
/// address matches IPv4 networks).
pub(crate) fn in_cidr(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let p = u32::from(prefix.min(32));
            let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let p = u32::from(prefix.min(128));
            let mask = if p == 0 { 0 } else { u128::MAX << (128 - p) };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}
