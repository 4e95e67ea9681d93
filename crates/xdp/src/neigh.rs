//! Link-layer resolution of real servers for DR and TUN.
//!
//! DR rewrites the destination MAC to the real server's; TUN sends the
//! encapsulated packet to the next hop towards the real server. Both need
//! what the kernel's routing and neighbour tables know, asked over rvs-sys's
//! blocking `NETLINK_ROUTE` socket (three requests):
//! 1. the route to the real server: egress interface, gateway (if any)
//!    and preferred source address (the default outer source of tunnels);
//! 2. the neighbour table (dump of the family): the MAC of the gateway, or of the
//!    real server itself when it is on link, in a usable state;
//! 3. the egress interface's link: its own MAC (the source MAC
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

use rvs_sys::netlink::{Link, Netlink, NetlinkError};

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
    /// The MACs interface `ifindex` receives frames for: its own and those
    /// of the macvlans on top of it (a VRRP `use_vmac` interface's virtual
    /// MAC), for the director's own-MAC filter.
    fn owned_macs(&mut self, ifindex: u32) -> Result<Vec<[u8; 6]>, NeighError>;
}

/// A fixed table, for tests of the sync logic and for setups where every
/// next hop is configured by hand.
#[derive(Clone, Debug, Default)]
pub struct StaticResolver {
    /// Known next hops.
    pub table: std::collections::HashMap<IpAddr, L2>,
    /// Addresses [`Resolve::solicit`] was called for, in order.
    pub solicited: Vec<IpAddr>,
    /// The MACs each interface owns.
    pub owned: std::collections::HashMap<u32, Vec<[u8; 6]>>,
}

impl Resolve for StaticResolver {
    fn lookup(&mut self, addr: IpAddr) -> Result<Option<L2>, NeighError> {
        Ok(self.table.get(&addr).copied())
    }
    fn solicit(&mut self, addr: IpAddr) -> Result<(), NeighError> {
        self.solicited.push(addr);
        Ok(())
    }
    fn owned_macs(&mut self, ifindex: u32) -> Result<Vec<[u8; 6]>, NeighError> {
        Ok(self.owned.get(&ifindex).cloned().unwrap_or_default())
    }
}

/// The kernel's tables over `NETLINK_ROUTE` (rvs-sys's blocking socket).
#[derive(Debug)]
pub struct NeighResolver {
    nl: Netlink,
}

fn kernel(what: &'static str) -> impl Fn(NetlinkError) -> NeighError {
    move |e| match e {
        NetlinkError::Kernel { errno, .. } => NeighError::Kernel {
            what,
            source: io::Error::from_raw_os_error(errno),
        },
        NetlinkError::Malformed { what, .. } => NeighError::Malformed(what),
        other => NeighError::Io(other.into_io()),
    }
}

impl NeighResolver {
    /// Open the netlink socket (in the caller's network namespace).
    pub fn new() -> Result<Self, NeighError> {
        Ok(NeighResolver {
            nl: Netlink::open().map_err(kernel("socket"))?,
        })
    }

    /// Egress interface, gateway and preferred source of the route to `addr`.
    pub fn route(
        &mut self,
        addr: IpAddr,
    ) -> Result<(u32, Option<IpAddr>, Option<IpAddr>), NeighError> {
        let r = self.nl.route(addr).map_err(kernel("route"))?;
        Ok((r.ifindex, r.gateway, r.prefsrc))
    }

    /// The usable neighbour entry of `addr` on `ifindex`, if any.
    pub fn neighbour(&mut self, ifindex: u32, addr: IpAddr) -> Result<Option<[u8; 6]>, NeighError> {
        self.nl
            .neighbour(ifindex, addr)
            .map_err(kernel("neighbours"))
    }

    fn link(&mut self, ifindex: u32) -> Result<Link, NeighError> {
        self.nl
            .link(ifindex)
            .map_err(kernel("link"))?
            .ok_or(NeighError::Malformed("no link answer"))
    }

    /// The MTU of interface `ifindex`.
    pub fn link_mtu(&mut self, ifindex: u32) -> Result<u32, NeighError> {
        self.link(ifindex)?
            .mtu
            .ok_or(NeighError::Malformed("interface without an MTU"))
    }

    /// The MAC address of interface `ifindex`.
    pub fn link_mac(&mut self, ifindex: u32) -> Result<[u8; 6], NeighError> {
        self.link(ifindex)?
            .mac
            .ok_or(NeighError::Malformed("interface without a MAC address"))
    }

    /// The MACs frames to interface `ifindex` may carry: its own, then
    /// those of the macvlans on it (VRRP virtual MACs with `use_vmac`).
    pub fn owned_macs(&mut self, ifindex: u32) -> Result<Vec<[u8; 6]>, NeighError> {
        self.nl.owned_macs(ifindex).map_err(kernel("links"))
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
    fn owned_macs(&mut self, ifindex: u32) -> Result<Vec<[u8; 6]>, NeighError> {
        self.nl.owned_macs(ifindex).map_err(kernel("links"))
    }
}
