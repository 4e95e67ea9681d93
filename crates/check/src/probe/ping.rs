//! `PING_CHECK`: one ICMP echo over an unprivileged ICMP datagram socket.
//!
//! keepalived's PING_CHECK uses the same kind of socket
//! (`SOCK_DGRAM`/`IPPROTO_ICMP`), which Linux only grants to processes whose
//! group is inside `net.ipv4.ping_group_range` (a per-network-namespace
//! sysctl whose default, `1 0`, allows nobody, root included). Where it is
//! not allowed the probe reports [`Failure::Unsupported`] naming the sysctl
//! instead of falling back to a raw socket. The kernel fills in the echo
//! identifier and checksum; the reply must be an echo reply with our
//! sequence number, within `connect_timeout`.

use std::io;
use std::net::SocketAddr;

use socket2::{Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::{Failure, ProbeTarget, sock};

const PAYLOAD: &[u8] = b"rvs-check ping\0\0";

fn open(target: &ProbeTarget) -> io::Result<Socket> {
    let proto = match target.addr {
        SocketAddr::V4(_) => Protocol::ICMPV4,
        SocketAddr::V6(_) => Protocol::ICMPV6,
    };
    // The kernel picks the echo identifier: bind the address, never a port.
    let bind = target.bind.map(|b| SocketAddr::new(b.ip(), 0));
    sock::raw(target, Type::DGRAM, proto, bind)
}

/// Runs one echo exchange.
pub async fn check(target: &ProbeTarget) -> Result<(), Failure> {
    let deadline = Instant::now() + target.connect_timeout;
    let s = open(target).map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Failure::Unsupported(
            "ICMP datagram sockets not permitted (net.ipv4.ping_group_range)".into(),
        ),
        _ => Failure::from_io(&e),
    })?;
    let sock = UdpSocket::from_std(s.into()).map_err(|e| Failure::from_io(&e))?;
    let dst = SocketAddr::new(target.addr.ip(), 0);
    sock.connect(dst).await.map_err(|e| Failure::from_io(&e))?;
    let (req_type, reply_type) = match dst {
        SocketAddr::V4(_) => (8u8, 0u8),
        SocketAddr::V6(_) => (128u8, 129u8),
    };
    let seq: u16 = std::process::id() as u16 ^ 0x5a5a;
    let mut pkt = vec![req_type, 0, 0, 0, 0, 0];
    pkt.extend_from_slice(&seq.to_be_bytes());
    pkt.extend_from_slice(PAYLOAD);
    let exchange = async {
        sock.send(&pkt).await.map_err(|e| Failure::from_io(&e))?;
        let mut buf = [0u8; 1500];
        loop {
            let n = sock
                .recv(&mut buf)
                .await
                .map_err(|e| Failure::from_io(&e))?;
            if n >= 8 && buf[0] == reply_type && buf[6..8] == seq.to_be_bytes() {
                return Ok(());
            }
        }
    };
    match tokio::time::timeout_at(deadline, exchange).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Timeout),
    }
}
