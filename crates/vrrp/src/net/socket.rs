//! The raw VRRP socket: IP protocol 112 on one interface, one family.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{
    ControlMessage, ControlMessageOwned, MsgFlags, SockaddrIn, SockaddrIn6, recv, recvmsg, sendmsg,
};
use rvs_sys::sock;
use socket2::{Domain, InterfaceIndexOrAddress, Protocol, Socket, Type};
use tokio::io::unix::AsyncFd;

use super::iface;

/// IP protocol number of VRRP (RFC 5798 §5.1.1.4 / §5.1.2.4).
pub const VRRP_PROTO: i32 = 112;

/// TTL / hop limit every VRRP packet is sent with, and that receivers
/// require on multicast adverts (RFC 5798 §5.1.1.3).
const VRRP_TTL: u32 = 255;

/// IPv4 TOS (DSCP CS6, "network control") keepalived sends adverts with.
const VRRP_TOS: u32 = 0xc0;

/// A raw IP-protocol-112 socket on one interface for one family: sends
/// adverts to the VRRP group or to unicast peers and receives the peers'
/// adverts with the IP facts the receive checks need (source, destination,
/// TTL / hop limit).
///
/// The source address of every advert is pinned per packet (`IP_PKTINFO` /
/// `IPV6_PKTINFO`) to [`VrrpSocket::local_addr`] rather than by `bind(2)`:
/// a bound raw IPv4 socket only receives packets addressed to the bound
/// address, which would drop the multicast adverts, and an IPv6 one bound
/// to its link-local would drop unicast adverts to the global address.
#[derive(Debug)]
pub struct VrrpSocket {
    fd: AsyncFd<Socket>,
    ifname: String,
    ifindex: u32,
    local: IpAddr,
}

/// One received VRRP message: where it came from and went to, and where it
/// sits in the caller's buffer (`buf[offset..offset + len]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Source address of the IP packet (the peer's primary or link-local
    /// address: the address tie-break and the checksum pseudo-header use it).
    pub src: IpAddr,
    /// Destination address of the IP packet (the group, or ours when the
    /// peer sends unicast).
    pub dst: IpAddr,
    /// IPv4 TTL or IPv6 hop limit as received (255 unless a router
    /// forwarded it: multicast adverts with anything else must be dropped).
    pub ttl: u8,
    /// Length of the VRRP message.
    pub len: usize,
    /// Offset of the VRRP message in the buffer (past the IPv4 header; 0
    /// for IPv6).
    pub offset: usize,
}

impl VrrpSocket {
    /// Open for `ifname`: IPv4 → AF_INET raw proto 112, IP_MULTICAST_TTL and
    /// IP_TTL 255 (unicast adverts too), IP_TOS 0xc0, IP_MULTICAST_LOOP off,
    /// IP_MULTICAST_IF = the interface, SO_BINDTODEVICE, and `group` joined
    /// on that interface (by index). IPv6 → AF_INET6 raw proto 112,
    /// IPV6_MULTICAST_HOPS / IPV6_UNICAST_HOPS 255, IPV6_MULTICAST_IF,
    /// multicast loop off, SO_BINDTODEVICE, `group` (ff02::12) joined on the
    /// interface, IPV6_RECVHOPLIMIT and IPV6_RECVPKTINFO on and no kernel
    /// checksum (VRRP checksums are the caller's).
    ///
    /// `src` is the source address to send from (keepalived's
    /// `mcast_src_ip` / `unicast_src_ip`); without it IPv4 uses the
    /// interface's primary address and IPv6 its link-local address (VRRPv3
    /// IPv6 adverts must come from the link-local). `group` that is not a
    /// multicast address (a unicast-only instance) is not joined.
    ///
    /// The default source is looked up once, here: reopen the socket when
    /// the interface's addresses change. A link-local address still in
    /// duplicate address detection (the first second after the link comes
    /// up) is chosen but cannot send yet: `send` fails (`EINVAL`) until it
    /// can.
    ///
    /// Must run inside a tokio runtime (the socket registers with its
    /// reactor), in the network namespace of the interface.
    pub fn open(ifname: &str, ipv6: bool, group: IpAddr, src: Option<IpAddr>) -> io::Result<Self> {
        if group.is_ipv6() != ipv6 || src.is_some_and(|s| s.is_ipv6() != ipv6) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "VRRP socket on {ifname}: group {group} / source {src:?} do not match the {} family",
                    if ipv6 { "IPv6" } else { "IPv4" }
                ),
            ));
        }
        let ifindex = iface::ifindex(ifname)?;
        let local = match src {
            Some(s) => s,
            None if ipv6 => iface::link_local_v6(ifname)?
                .map(IpAddr::V6)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::AddrNotAvailable,
                        format!("interface {ifname} has no IPv6 link-local address"),
                    )
                })?,
            None => iface::primary_v4(ifname)?.map(IpAddr::V4).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("interface {ifname} has no IPv4 address"),
                )
            })?,
        };
        let ctx = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("VRRP socket on {ifname}: {what}: {e}"))
        };
        let domain = if ipv6 { Domain::IPV6 } else { Domain::IPV4 };
        let sock = Socket::new(domain, Type::RAW, Some(Protocol::from(VRRP_PROTO)))
            .map_err(|e| ctx("socket(SOCK_RAW, 112)", e))?;
        sock.set_nonblocking(true)
            .map_err(|e| ctx("O_NONBLOCK", e))?;
        sock.bind_device(Some(ifname.as_bytes()))
            .map_err(|e| ctx("SO_BINDTODEVICE", e))?;
        match group {
            IpAddr::V4(group) => {
                sock.set_multicast_ttl_v4(VRRP_TTL)
                    .map_err(|e| ctx("IP_MULTICAST_TTL", e))?;
                sock.set_ttl_v4(VRRP_TTL).map_err(|e| ctx("IP_TTL", e))?;
                sock.set_tos_v4(VRRP_TOS).map_err(|e| ctx("IP_TOS", e))?;
                sock.set_multicast_loop_v4(false)
                    .map_err(|e| ctx("IP_MULTICAST_LOOP", e))?;
                // Only the groups this socket joined, not every group any
                // socket on the host joined.
                sock.set_multicast_all_v4(false)
                    .map_err(|e| ctx("IP_MULTICAST_ALL", e))?;
                sock::set_multicast_if_v4_index(sock.as_fd(), ifindex)
                    .map_err(|e| ctx("IP_MULTICAST_IF", e))?;
                if group.is_multicast() {
                    sock.join_multicast_v4_n(&group, &InterfaceIndexOrAddress::Index(ifindex))
                        .map_err(|e| ctx(&format!("IP_ADD_MEMBERSHIP {group}"), e))?;
                }
            }
            IpAddr::V6(group) => {
                sock.set_multicast_hops_v6(VRRP_TTL)
                    .map_err(|e| ctx("IPV6_MULTICAST_HOPS", e))?;
                sock.set_unicast_hops_v6(VRRP_TTL)
                    .map_err(|e| ctx("IPV6_UNICAST_HOPS", e))?;
                sock.set_multicast_if_v6(ifindex)
                    .map_err(|e| ctx("IPV6_MULTICAST_IF", e))?;
                sock.set_multicast_loop_v6(false)
                    .map_err(|e| ctx("IPV6_MULTICAST_LOOP", e))?;
                sock.set_multicast_all_v6(false)
                    .map_err(|e| ctx("IPV6_MULTICAST_ALL", e))?;
                sock.set_recv_hoplimit_v6(true)
                    .map_err(|e| ctx("IPV6_RECVHOPLIMIT", e))?;
                sock::set_recv_pktinfo_v6(sock.as_fd(), true)
                    .map_err(|e| ctx("IPV6_RECVPKTINFO", e))?;
                // None: the kernel neither fills nor verifies a checksum.
                sock::set_checksum_v6(sock.as_fd(), None).map_err(|e| ctx("IPV6_CHECKSUM", e))?;
                if group.is_multicast() {
                    sock.join_multicast_v6(&group, ifindex)
                        .map_err(|e| ctx(&format!("IPV6_ADD_MEMBERSHIP {group}"), e))?;
                }
            }
        }
        let fd = sock::async_socket(sock).map_err(|e| ctx("tokio registration", e))?;
        Ok(VrrpSocket {
            fd,
            ifname: ifname.to_owned(),
            ifindex,
            local,
        })
    }

    /// The source address adverts carry (the caller needs it for checksums
    /// and the address tie-break): `src` as given to [`VrrpSocket::open`],
    /// else the interface's primary IPv4 / link-local IPv6 address at open.
    pub fn local_addr(&self) -> IpAddr {
        self.local
    }

    /// The interface this socket is bound to.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Send one VRRP message (`payload` only; the kernel adds the IP
    /// header) to `dst`: the group, or a unicast peer. The source address
    /// is [`VrrpSocket::local_addr`].
    pub async fn send(&self, payload: &[u8], dst: IpAddr) -> io::Result<()> {
        loop {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|fd| self.send_now(fd.get_ref().as_raw_fd(), payload, dst)) {
                Ok(result) => {
                    return result.map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!(
                                "VRRP send to {dst} from {} on {}: {e}",
                                self.local, self.ifname
                            ),
                        )
                    });
                }
                Err(_would_block) => continue,
            }
        }
    }

    fn send_now(&self, fd: i32, payload: &[u8], dst: IpAddr) -> io::Result<()> {
        let iov = [IoSlice::new(payload)];
        let sent = match (self.local, dst) {
            (IpAddr::V4(local), IpAddr::V4(dst)) => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: self.ifindex as libc::c_int,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(local).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                let to = SockaddrIn::from(SocketAddrV4::new(dst, 0));
                sendmsg(
                    fd,
                    &iov,
                    &[ControlMessage::Ipv4PacketInfo(&info)],
                    MsgFlags::empty(),
                    Some(&to),
                )?
            }
            (IpAddr::V6(local), IpAddr::V6(dst)) => {
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: local.octets(),
                    },
                    ipi6_ifindex: self.ifindex,
                };
                let to = SockaddrIn6::from(SocketAddrV6::new(dst, 0, 0, self.ifindex));
                sendmsg(
                    fd,
                    &iov,
                    &[ControlMessage::Ipv6PacketInfo(&info)],
                    MsgFlags::empty(),
                    Some(&to),
                )?
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("wrong family for an {} socket", self.family()),
                ));
            }
        };
        if sent != payload.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("{sent} of {} bytes sent", payload.len()),
            ));
        }
        Ok(())
    }

    /// The next VRRP message from a peer. IPv4: `buf` receives the whole IP
    /// packet and `src`, `dst` and `ttl` come from its header; IPv6: `buf`
    /// receives the message and they come from the ancillary data. Our own
    /// packets (source = [`VrrpSocket::local_addr`]) and IPv4 packets too
    /// short to carry a header are skipped. A buffer shorter than the packet
    /// yields a truncated message (`len` counts only what was stored): give
    /// it the interface MTU.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| self.recv_now(fd.get_ref().as_raw_fd(), buf)) {
                Ok(Ok(Some(got))) => return Ok(got),
                Ok(Ok(None)) => continue,
                Ok(Err(e)) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("VRRP receive on {}: {e}", self.ifname),
                    ));
                }
                Err(_would_block) => continue,
            }
        }
    }

    /// One `recv`: `Ok(None)` for a packet to skip.
    fn recv_now(&self, fd: i32, buf: &mut [u8]) -> io::Result<Option<Received>> {
        let got = match self.local {
            IpAddr::V4(_) => {
                let n = recv(fd, buf, MsgFlags::empty())?;
                parse_ipv4(&buf[..n.min(buf.len())])
            }
            IpAddr::V6(_) => {
                let mut cmsg = nix::cmsg_space!(libc::in6_pktinfo, libc::c_int);
                let mut iov = [IoSliceMut::new(buf)];
                let msg = recvmsg::<SockaddrIn6>(fd, &mut iov, Some(&mut cmsg), MsgFlags::empty())?;
                let src = msg.address.map(|a| a.ip());
                let mut dst = None;
                let mut ttl = None;
                for c in msg.cmsgs()? {
                    match c {
                        ControlMessageOwned::Ipv6PacketInfo(info) => {
                            dst = Some(Ipv6Addr::from(info.ipi6_addr.s6_addr));
                        }
                        ControlMessageOwned::Ipv6HopLimit(h) => {
                            ttl = u8::try_from(h).ok();
                        }
                        _ => {}
                    }
                }
                match (src, dst, ttl) {
                    (Some(src), Some(dst), Some(ttl)) => Some(Received {
                        src: src.into(),
                        dst: dst.into(),
                        ttl,
                        len: msg.bytes,
                        offset: 0,
                    }),
                    _ => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "packet without source, IPV6_PKTINFO or IPV6_HOPLIMIT",
                        ));
                    }
                }
            }
        };
        Ok(got.filter(|r| r.src != self.local))
    }

    fn family(&self) -> &'static str {
        if self.local.is_ipv6() { "IPv6" } else { "IPv4" }
    }
}

/// The parts of a received IPv4 packet, or None when it is not a whole
/// IPv4 header.
fn parse_ipv4(pkt: &[u8]) -> Option<Received> {
    let first = *pkt.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 || pkt.len() < ihl {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
    let end = total.clamp(ihl, pkt.len());
    let addr = |at: usize| Ipv4Addr::new(pkt[at], pkt[at + 1], pkt[at + 2], pkt[at + 3]);
    Some(Received {
        src: addr(12).into(),
        dst: addr(16).into(),
        ttl: pkt[8],
        len: end - ihl,
        offset: ihl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_is_stripped() {
        let mut pkt = vec![0x45, 0xc0, 0, 28, 0, 0, 0, 0, 255, 112, 0, 0];
        pkt.extend_from_slice(&[10, 0, 0, 1, 224, 0, 0, 18]);
        pkt.extend_from_slice(&[0x21, 7, 100, 1, 0, 1, 0, 0]);
        pkt.extend_from_slice(&[0; 4]); // Ethernet padding after the IP packet
        let r = parse_ipv4(&pkt).expect("parses");
        assert_eq!(r.src, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(r.dst, IpAddr::from([224, 0, 0, 18]));
        assert_eq!(r.ttl, 255);
        assert_eq!((r.offset, r.len), (20, 8));
    }

    #[test]
    fn ipv4_options_and_truncation() {
        // IHL 6 (one option word), total length 40 but only 30 bytes stored.
        let mut pkt = vec![0x46, 0, 0, 40, 0, 0, 0, 0, 64, 112, 0, 0];
        pkt.extend_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1, 1, 1, 1, 1]);
        pkt.extend_from_slice(&[0xaa; 6]);
        let r = parse_ipv4(&pkt).expect("parses");
        assert_eq!((r.offset, r.len, r.ttl), (24, 6, 64));
    }

    #[test]
    fn not_ipv4_is_skipped() {
        assert_eq!(parse_ipv4(&[]), None);
        assert_eq!(parse_ipv4(&[0x45; 19]), None);
        assert_eq!(parse_ipv4(&[0x60; 40]), None);
        assert_eq!(parse_ipv4(&[0x44; 40]), None);
    }
}
