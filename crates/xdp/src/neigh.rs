//! Link-layer resolution of real servers for DR and TUN.
//!
//! DR rewrites the destination MAC to the real server's; TUN sends the
//! encapsulated packet to the next hop towards the real server. Both need
//! what the kernel's routing and neighbour tables know, asked over a small
//! raw `NETLINK_ROUTE` socket (three requests; no async runtime needed in the
//! control path):
//! 1. `RTM_GETROUTE` to the real server: egress interface, gateway (if any)
//!    and preferred source address (the default outer source of tunnels);
//! 2. `RTM_GETNEIGH` (dump of the family): the MAC of the gateway, or of the
//!    real server itself when it is on link, in a usable state;
//! 3. `RTM_GETLINK` of the egress interface: its own MAC (the source MAC
//!    when the program redirects to another interface).
//!
//! When the neighbour is missing (nothing pre-fills ARP/NDP tables), the
//! kernel is made to resolve it by a UDP datagram to the address' discard
//! port (9): routing it makes the kernel queue it and send an ARP request or
//! a neighbour solicitation, exactly as for any traffic from the host. The
//! control side ([`crate::plane`]) retries until the entry appears and keeps
//! the real server out of its service's scheduling data until then.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Where and how to send frames to a real server.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct L2 {
    /// Egress interface.
    pub ifindex: u32,
    /// Destination MAC: the real server's (on link) or the gateway's.
    pub mac: [u8; 6],
    /// The egress interface's own MAC.
    pub smac: [u8; 6],
    /// Preferred source address of the route (outer source of tunnels).
    pub src: Option<IpAddr>,
}

/// Errors of the netlink conversation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NeighError {
    /// A socket call failed.
    #[error("netlink: {0}")]
    Io(#[from] io::Error),
    /// The kernel answered with an error (e.g. no route).
    #[error("netlink: {what}: {source}")]
    Kernel {
        /// The request.
        what: &'static str,
        /// The kernel's errno.
        #[source]
        source: io::Error,
    },
    /// The answer lacked a field rvs needs.
    #[error("netlink: {0}")]
    Malformed(&'static str),
}

/// How the control side learns link-layer next hops.
pub trait Resolve {
    /// What the kernel knows now; `None` while the neighbour is unresolved.
    fn lookup(&mut self, addr: IpAddr) -> Result<Option<L2>, NeighError>;
    /// Make the kernel resolve `addr` (does not wait).
    fn solicit(&mut self, addr: IpAddr) -> Result<(), NeighError>;
}

/// A fixed table, for tests of the sync logic and for setups where every
/// next hop is configured by hand.
#[derive(Clone, Debug, Default)]
pub struct StaticResolver {
    /// Known next hops.
    pub table: std::collections::HashMap<IpAddr, L2>,
    /// Addresses [`Resolve::solicit`] was called for, in order.
    pub solicited: Vec<IpAddr>,
}

impl Resolve for StaticResolver {
    fn lookup(&mut self, addr: IpAddr) -> Result<Option<L2>, NeighError> {
        Ok(self.table.get(&addr).copied())
    }
    fn solicit(&mut self, addr: IpAddr) -> Result<(), NeighError> {
        self.solicited.push(addr);
        Ok(())
    }
}

/// The kernel's tables over `NETLINK_ROUTE`.
#[derive(Debug)]
pub struct NeighResolver {
    fd: OwnedFd,
    seq: u32,
}

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PREFSRC: u16 = 7;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const IFLA_ADDRESS: u16 = 1;
const IFLA_MTU: u16 = 4;
/// REACHABLE | STALE | DELAY | PROBE | NOARP | PERMANENT: a usable address.
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;
const HDR: usize = 16;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Type-length-value attributes after a fixed header.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let v = &b[4..len];
        b = &b[align4(len).min(b.len())..];
        Some((kind, v))
    })
}

fn ip_of(family: u8, v: &[u8]) -> Option<IpAddr> {
    match (family, v.len()) {
        (2, 4) => Some(IpAddr::from([v[0], v[1], v[2], v[3]])),
        (10, 16) => <[u8; 16]>::try_from(v).ok().map(IpAddr::from),
        _ => None,
    }
}

fn family_of(a: IpAddr) -> u8 {
    if a.is_ipv4() { 2 } else { 10 }
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

impl NeighResolver {
    /// Open the netlink socket (in the caller's network namespace).
    pub fn new() -> Result<Self, NeighError> {
        // SAFETY: plain socket(2); the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: `tv` outlives the call and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(NeighResolver { fd, seq: 0 })
    }

    /// Send one request and collect the payloads of the answers of type
    /// `want` (until DONE for a dump, else the first).
    fn request(
        &mut self,
        what: &'static str,
        kind: u16,
        flags: u16,
        body: &[u8],
        want: u16,
    ) -> Result<Vec<Vec<u8>>, NeighError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let len = HDR + body.len();
        let mut msg = Vec::with_capacity(len);
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        msg.extend_from_slice(&seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(body);
        // SAFETY: `msg` is a valid buffer of `msg.len()` bytes; the kernel
        // is the destination (a zeroed sockaddr_nl would be the same).
        let n = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error().into());
        }
        let dump = flags & NLM_F_DUMP != 0;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            // SAFETY: `buf` is writable for its whole length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error().into());
            }
            let mut b = &buf[..n as usize];
            while b.len() >= HDR {
                let mlen = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
                let mtype = u16::from_ne_bytes([b[4], b[5]]);
                let mseq = u32::from_ne_bytes([b[8], b[9], b[10], b[11]]);
                if mlen < HDR || mlen > b.len() {
                    return Err(NeighError::Malformed("truncated message"));
                }
                let payload = &b[HDR..mlen];
                b = &b[align4(mlen).min(b.len())..];
                if mseq != seq {
                    continue;
                }
                match mtype {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let errno = payload
                            .get(..4)
                            .map(|e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
                            .unwrap_or(0);
                        if errno == 0 {
                            return Ok(out);
                        }
                        return Err(NeighError::Kernel {
                            what,
                            source: io::Error::from_raw_os_error(-errno),
                        });
                    }
                    t if t == want => {
                        out.push(payload.to_vec());
                        if !dump {
                            return Ok(out);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Egress interface, gateway and preferred source of the route to `addr`.
    pub fn route(
        &mut self,
        addr: IpAddr,
    ) -> Result<(u32, Option<IpAddr>, Option<IpAddr>), NeighError> {
        let fam = family_of(addr);
        let a = addr_bytes(addr);
        let mut body = vec![0u8; 12];
        body[0] = fam;
        body[1] = (a.len() * 8) as u8;
        body.extend_from_slice(&((4 + a.len()) as u16).to_ne_bytes());
        body.extend_from_slice(&RTA_DST.to_ne_bytes());
        body.extend_from_slice(&a);
        let msgs = self.request("route", RTM_GETROUTE, 0, &body, RTM_NEWROUTE)?;
        let m = msgs
            .first()
            .ok_or(NeighError::Malformed("no route answer"))?;
        let (mut oif, mut gw, mut src) = (None, None, None);
        for (k, v) in attrs(m.get(12..).unwrap_or_default()) {
            match k {
                RTA_OIF if v.len() == 4 => oif = Some(u32::from_ne_bytes([v[0], v[1], v[2], v[3]])),
                RTA_GATEWAY => gw = ip_of(fam, v),
                RTA_PREFSRC => src = ip_of(fam, v),
                _ => {}
            }
        }
        Ok((
            oif.ok_or(NeighError::Malformed("route without interface"))?,
            gw,
            src,
        ))
    }

    /// The usable neighbour entry of `addr` on `ifindex`, if any.
    pub fn neighbour(&mut self, ifindex: u32, addr: IpAddr) -> Result<Option<[u8; 6]>, NeighError> {
        let mut body = vec![0u8; 12];
        body[0] = family_of(addr);
        let msgs = self.request("neighbours", RTM_GETNEIGH, NLM_F_DUMP, &body, RTM_NEWNEIGH)?;
        for m in msgs {
            if m.len() < 12 {
                continue;
            }
            let idx = u32::from_ne_bytes([m[4], m[5], m[6], m[7]]);
            let state = u16::from_ne_bytes([m[8], m[9]]);
            if idx != ifindex || state & NUD_USABLE == 0 {
                continue;
            }
            let (mut dst, mut ll) = (None, None);
            for (k, v) in attrs(&m[12..]) {
                match k {
                    NDA_DST => dst = ip_of(m[0], v),
                    NDA_LLADDR => ll = <[u8; 6]>::try_from(v).ok(),
                    _ => {}
                }
            }
            if dst == Some(addr)
                && let Some(mac) = ll
            {
                return Ok(Some(mac));
            }
        }
        Ok(None)
    }

    /// The MTU of interface `ifindex`.
    pub fn link_mtu(&mut self, ifindex: u32) -> Result<u32, NeighError> {
        let m = self.link(ifindex)?;
        attrs(m.get(16..).unwrap_or_default())
            .find(|(k, v)| *k == IFLA_MTU && v.len() == 4)
            .map(|(_, v)| u32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
            .ok_or(NeighError::Malformed("interface without an MTU"))
    }

    fn link(&mut self, ifindex: u32) -> Result<Vec<u8>, NeighError> {
        let mut body = vec![0u8; 16];
        body[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
        let msgs = self.request("link", RTM_GETLINK, 0, &body, RTM_NEWLINK)?;
        msgs.into_iter()
            .next()
            .ok_or(NeighError::Malformed("no link answer"))
    }

    /// The MAC address of interface `ifindex`.
    pub fn link_mac(&mut self, ifindex: u32) -> Result<[u8; 6], NeighError> {
        let mut body = vec![0u8; 16];
        body[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
        let msgs = self.request("link", RTM_GETLINK, 0, &body, RTM_NEWLINK)?;
        let m = msgs
            .first()
            .ok_or(NeighError::Malformed("no link answer"))?;
        attrs(m.get(16..).unwrap_or_default())
            .find(|(k, v)| *k == IFLA_ADDRESS && v.len() == 6)
            .and_then(|(_, v)| <[u8; 6]>::try_from(v).ok())
            .ok_or(NeighError::Malformed("interface without a MAC address"))
    }
}

impl Resolve for NeighResolver {
    fn lookup(&mut self, addr: IpAddr) -> Result<Option<L2>, NeighError> {
        let (ifindex, gw, src) = self.route(addr)?;
        let hop = gw.unwrap_or(addr);
        let Some(mac) = self.neighbour(ifindex, hop)? else {
            return Ok(None);
        };
        // IPv6 routes rarely carry a preferred source: ask the kernel's
        // source address selection (a connected UDP socket sends nothing).
        let src = src.or_else(|| {
            let any: SocketAddr = if addr.is_ipv4() {
                ([0u8; 4], 0).into()
            } else {
                ([0u16; 8], 0).into()
            };
            let s = UdpSocket::bind(any).ok()?;
            s.connect(SocketAddr::new(addr, 9)).ok()?;
            s.local_addr().ok().map(|a| a.ip())
        });
        Ok(Some(L2 {
            ifindex,
            mac,
            smac: self.link_mac(ifindex)?,
            src,
        }))
    }

    fn solicit(&mut self, addr: IpAddr) -> Result<(), NeighError> {
        let any: SocketAddr = if addr.is_ipv4() {
            ([0u8; 4], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let s = UdpSocket::bind(any)?;
        // The discard port; the datagram only exists to make the kernel
        // resolve the next hop.
        s.send_to(&[], SocketAddr::new(addr, 9))?;
        Ok(())
    }
}
