//! sock_diag (`NETLINK_SOCK_DIAG`): the connected UDP sockets of this
//! network namespace, and their destruction (`SOCK_DESTROY`, what `ss -K`
//! sends; the kernel needs `CONFIG_INET_DIAG_DESTROY`).
//!
//! The sock data plane uses it to move connected UDP sockets off a real
//! server that was deleted: the kernel aborts such a socket (`udp_abort`:
//! the pending error `ECONNABORTED`, the socket disconnected), so the
//! application's next receive fails and it connects again, which the
//! plane's connect program schedules anew. Messages are
//! `netlink-packet-sock-diag`'s; the socket blocks with a one second
//! receive timeout, so a thread never hangs on a lost answer.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NetlinkSerializable,
};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_UDP};
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_packet_sock_diag::message::SockDiagDestroy;
use netlink_sys::{Socket, protocols::NETLINK_SOCK_DIAG};

/// One connected UDP socket as the kernel lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpSock {
    /// Its own address (a dual-stack socket's IPv4 addresses are shown
    /// v4-mapped, as the kernel reports them).
    pub local: SocketAddr,
    /// The address it is connected to.
    pub peer: SocketAddr,
    /// The kernel's socket cookie (what BPF's `bpf_get_socket_cookie` gives).
    pub cookie: u64,
    /// The socket as the kernel named it, handed back to destroy it.
    id: SocketId,
    family: u8,
}

impl UdpSock {
    /// The peer with a v4-mapped IPv6 address turned into its IPv4 form
    /// (a dual-stack socket connected to an IPv4 address).
    pub fn peer_unmapped(&self) -> SocketAddr {
        unmapped(self.peer)
    }
}

fn unmapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// The cookie of `id` (`idiag_cookie`: two host-order 32-bit words, low
/// first).
fn cookie_of(raw: [u8; 8]) -> u64 {
    let lo = u32::from_ne_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let hi = u32::from_ne_bytes([raw[4], raw[5], raw[6], raw[7]]);
    u64::from(lo) | (u64::from(hi) << 32)
}

/// Receive buffer: a dump datagram is at most 32 KiB on current kernels.
const RECV_BUF: usize = 1 << 16;

/// A blocking sock_diag socket (one request at a time), in the network
/// namespace of the thread that opened it.
#[derive(Debug)]
pub struct SockDiag {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl SockDiag {
    /// Open a `NETLINK_SOCK_DIAG` socket with a one second receive timeout.
    pub fn open() -> io::Result<Self> {
        let mut sock = Socket::new(NETLINK_SOCK_DIAG)?;
        sock.bind_auto()?;
        socket2::SockRef::from(&sock).set_read_timeout(Some(Duration::from_secs(1)))?;
        Ok(SockDiag {
            sock,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    fn send<T: NetlinkSerializable + std::fmt::Debug + Clone + PartialEq + Eq>(
        &mut self,
        flags: u16,
        inner: T,
    ) -> io::Result<u32>
    where
        NetlinkPayload<T>: From<T>,
    {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::from(inner));
        m.finalize();
        let mut bytes = vec![0u8; m.buffer_len()];
        m.serialize(&mut bytes);
        if self.sock.send(&bytes, 0)? != bytes.len() {
            return Err(io::Error::other("sock_diag: short send"));
        }
        Ok(self.seq)
    }

    /// Receive the answers to request `seq` until its end (the end of a
    /// dump or an acknowledgement); `Err` with the kernel's errno when it
    /// answers one.
    fn answers(&mut self, seq: u32) -> io::Result<Vec<SockDiagMessage>> {
        let mut out = Vec::new();
        loop {
            self.buf.clear();
            self.sock.recv(&mut self.buf, 0)?;
            let mut buf = &self.buf[..];
            while buf.len() >= 16 {
                let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if len < 16 || len > buf.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "sock_diag: truncated message",
                    ));
                }
                let one = &buf[..len];
                buf = &buf[len.next_multiple_of(4).min(buf.len())..];
                let m = NetlinkMessage::<SockDiagMessage>::deserialize(one)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                if m.header.sequence_number != seq {
                    continue;
                }
                match m.payload {
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(out),
                            Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                        };
                    }
                    NetlinkPayload::InnerMessage(inner) => out.push(inner),
                    _ => {}
                }
            }
        }
    }

    /// The connected UDP sockets of one family (`ipv6`: the AF_INET6 ones,
    /// dual-stack sockets included) in this namespace.
    pub fn connected_udp(&mut self, ipv6: bool) -> io::Result<Vec<UdpSock>> {
        let family = if ipv6 { AF_INET6 } else { AF_INET };
        let req = SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_UDP,
            extensions: ExtensionFlags::empty(),
            // A connected UDP socket is in TCP_ESTABLISHED.
            states: StateFlags::ESTABLISHED,
            socket_id: if ipv6 {
                SocketId::new_v6()
            } else {
                SocketId::new_v4()
            },
        });
        let seq = self.send(NLM_F_REQUEST | NLM_F_DUMP, req)?;
        Ok(self
            .answers(seq)?
            .into_iter()
            .filter_map(|m| match m {
                SockDiagMessage::InetResponse(r) => {
                    let id = r.header.socket_id;
                    Some(UdpSock {
                        local: SocketAddr::new(id.source_address, id.source_port),
                        peer: SocketAddr::new(id.destination_address, id.destination_port),
                        cookie: cookie_of(id.cookie),
                        family: r.header.family,
                        id,
                    })
                }
                _ => None,
            })
            .collect())
    }

    /// Destroy socket `s` (`SOCK_DESTROY`): its owner's next receive fails
    /// with `ECONNABORTED` and the socket is disconnected. `Ok(false)` when
    /// the socket is gone (closed, or connected elsewhere since the list:
    /// the kernel's `ENOENT`).
    pub fn destroy_udp(&mut self, s: &UdpSock) -> io::Result<bool> {
        let req = SockDiagDestroy::new(SockDiagMessage::InetRequest(InetRequest {
            family: s.family,
            protocol: IPPROTO_UDP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            socket_id: s.id.clone(),
        }));
        let seq = self.send(NLM_F_REQUEST | NLM_F_ACK, req)?;
        match self.answers(seq) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_two_host_order_words_low_first() {
        let mut raw = [0u8; 8];
        raw[..4].copy_from_slice(&0x89ab_cdefu32.to_ne_bytes());
        raw[4..].copy_from_slice(&0x0123_4567u32.to_ne_bytes());
        assert_eq!(cookie_of(raw), 0x0123_4567_89ab_cdef);
    }

    #[test]
    fn v4_mapped_peers_are_unmapped() {
        let m: SocketAddr = "[::ffff:192.0.2.1]:53".parse().unwrap();
        assert_eq!(unmapped(m), "192.0.2.1:53".parse::<SocketAddr>().unwrap());
        let v6: SocketAddr = "[2001:db8::1]:53".parse().unwrap();
        assert_eq!(unmapped(v6), v6);
    }

    /// A connected UDP socket of this process is listed with its cookie
    /// and, destroyed, fails its next receive with ECONNABORTED.
    #[test]
    fn a_listed_socket_is_destroyed_and_its_receive_fails() {
        if !rvs_testbed::require_root("sock_diag destroy", "needs root (CAP_NET_ADMIN)") {
            return;
        }
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.connect(peer.local_addr().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut diag = SockDiag::open().unwrap();
        let listed = diag.connected_udp(false).unwrap();
        let mine = listed
            .iter()
            .find(|x| x.local == s.local_addr().unwrap())
            .expect("the socket is listed");
        assert_eq!(mine.peer, peer.local_addr().unwrap());
        assert_ne!(mine.cookie, 0);
        assert!(diag.destroy_udp(mine).unwrap());
        let e = s.recv(&mut [0u8; 8]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNABORTED), "{e}");
        // Gone from the list of connected sockets.
        let again = diag.connected_udp(false).unwrap();
        assert!(again.iter().all(|x| x.cookie != mine.cookie));
        // Destroying it again: gone.
        assert!(!diag.destroy_udp(mine).unwrap());
    }
}
