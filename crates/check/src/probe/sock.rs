//! Socket creation with the options every checker shares: `bindto`/
//! `bind_port`, `bind_if` and `fwmark`.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

use super::{Failure, ProbeTarget};

/// A non-blocking socket of `ty` for `target`'s family with its device and
/// mark applied, bound to `bind` (with `SO_REUSEADDR` when that names a
/// port). TCP and UDP probes bind to `target.bind`; the ICMP echo one to
/// its address only.
pub(super) fn raw(
    target: &ProbeTarget,
    ty: Type,
    proto: Protocol,
    bind: Option<SocketAddr>,
) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(target.addr), ty, Some(proto))?;
    s.set_nonblocking(true)?;
    s.set_cloexec(true)?;
    if let Some(mark) = target.fwmark {
        s.set_mark(mark)?;
    }
    if let Some(dev) = &target.bind_if {
        s.bind_device(Some(dev.as_bytes()))?;
    }
    if let Some(b) = bind {
        if b.port() != 0 {
            s.set_reuse_address(true)?;
        }
        s.bind(&b.into())?;
    }
    Ok(s)
}

/// Connects a TCP stream within `connect_timeout`.
pub(crate) async fn tcp_connect(target: &ProbeTarget) -> Result<TcpStream, Failure> {
    let s =
        raw(target, Type::STREAM, Protocol::TCP, target.bind).map_err(|e| Failure::from_io(&e))?;
    let std_stream: std::net::TcpStream = s.into();
    let sock = TcpSocket::from_std_stream(std_stream);
    match tokio::time::timeout(target.connect_timeout, sock.connect(target.addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(Failure::from_io(&e)),
        Err(_) => Err(Failure::Timeout),
    }
}

/// A UDP socket connected to the target (so ICMP errors surface as
/// `ECONNREFUSED` on the next receive).
pub(crate) async fn udp_connect(target: &ProbeTarget) -> Result<UdpSocket, Failure> {
    let s =
        raw(target, Type::DGRAM, Protocol::UDP, target.bind).map_err(|e| Failure::from_io(&e))?;
    let std_sock: std::net::UdpSocket = s.into();
    let sock = UdpSocket::from_std(std_sock).map_err(|e| Failure::from_io(&e))?;
    sock.connect(target.addr)
        .await
        .map_err(|e| Failure::from_io(&e))?;
    Ok(sock)
}

/// The address string keepalived puts in `Host:` when there is no
/// virtualhost: `ip:port`, IPv6 in brackets.
pub(crate) fn host_port(addr: SocketAddr) -> String {
    addr.to_string()
}
