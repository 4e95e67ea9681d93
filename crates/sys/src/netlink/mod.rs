//! rtnetlink: addresses, links (state, MAC, macvlans), routes (lookups and
//! the blackhole host routes VIPs are announced with), neighbours
//! and the persistent XDP attach, as typed `netlink-packet-route` messages.
//!
//! Two transports over the same messages: [`Netlink`] blocks (a one second
//! receive timeout, so a thread never hangs on a lost answer) for threads
//! off the control path and one-shot commands; [`AsyncNetlink`] awaits on
//! tokio for the VRRP driver. Both open their socket in the network
//! namespace of the calling thread at the time of the call and keep it.
//!
//! The add and delete operations are idempotent where rvs needs them to be
//! (an address already there, a link already gone): a reload or a restart
//! repeats them freely.

mod msg;

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{AsyncSocket, AsyncSocketExt, Socket, TokioSocket, protocols::NETLINK_ROUTE};

use msg::Request;

/// What rvs reads about a link.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Its Ethernet address (`None` for links without a 6-byte one).
    pub mac: Option<[u8; 6]>,
    /// Its MTU.
    pub mtu: Option<u32>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Operationally up (`IFF_RUNNING`: up with carrier).
    pub running: bool,
    /// The link it sits on (`IFLA_LINK`: a macvlan's or VLAN's parent).
    pub parent: Option<u32>,
    /// Its kind (`"macvlan"`, `"veth"`, …) when it has one.
    pub kind: Option<String>,
}

/// The kernel's route towards one address.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Egress interface.
    pub ifindex: u32,
    /// Next-hop gateway; `None` when the destination is on link.
    pub gateway: Option<IpAddr>,
    /// Preferred source address of the route, when it has one.
    pub prefsrc: Option<IpAddr>,
}

/// One entry of a neighbour (ARP / NDP) table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// The interface the entry belongs to.
    pub ifindex: u32,
    /// The neighbour's IP address.
    pub addr: IpAddr,
    /// Its link-layer address, when known.
    pub mac: Option<[u8; 6]>,
    /// In a state the kernel would send to (reachable, stale, delay,
    /// probe, noarp, permanent).
    pub usable: bool,
}

/// What a route does with the packets it matches (`ip route`'s type).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteKind {
    /// Forward them (by gateway or on link).
    #[default]
    Unicast,
    /// Drop them silently.
    Blackhole,
    /// Drop them, answering ICMP unreachable.
    Unreachable,
    /// Drop them, answering ICMP administratively prohibited.
    Prohibit,
    /// Leave this table: the rule lookup goes on with the next rule.
    Throw,
}

/// A route rvsd installs for keepalived's `static_routes` and
/// `virtual_routes` (`ip route add` with these options).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteSpec {
    /// What the route does.
    pub kind: RouteKind,
    /// Destination prefix (its family is the route's).
    pub dst: IpAddr,
    /// Destination prefix length.
    pub dst_len: u8,
    /// Source prefix (`from`: IPv6 source-specific routes).
    pub from: Option<(IpAddr, u8)>,
    /// Preferred source address (`src`).
    pub prefsrc: Option<IpAddr>,
    /// Gateways (`via`, then `or`): two or more make a multipath route.
    pub gateways: Vec<IpAddr>,
    /// Egress interface (`dev`).
    pub oif: Option<u32>,
    /// `onlink`: the gateway is on the link even without a matching prefix.
    pub onlink: bool,
    /// Scope (`RT_SCOPE_*`); `None`: link for an on-link unicast route,
    /// else universe (what `ip route` picks).
    pub scope: Option<u8>,
    /// Routing table (254 = main).
    pub table: u32,
    /// Metric (`RTA_PRIORITY`).
    pub metric: Option<u32>,
    /// Protocol (`RTPROT_*`).
    pub proto: u8,
}

/// What a policy routing rule does with the packets it selects.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleKind {
    /// Look the route up in this table.
    Table(u32),
    /// Go on at the rule of this priority.
    Goto(u32),
    /// Do nothing (a rule that only counts).
    Nop,
    /// Drop silently.
    Blackhole,
    /// Drop with ICMP unreachable.
    Unreachable,
    /// Drop with ICMP prohibited.
    Prohibit,
}

/// A policy routing rule rvsd installs for keepalived's `static_rules`
/// and `virtual_rules` (`ip rule add` with these options).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleSpec {
    /// IPv6 rule (else IPv4); `from`/`to` are of this family.
    pub ipv6: bool,
    /// Source prefix (`from`); `None` = all.
    pub from: Option<(IpAddr, u8)>,
    /// Destination prefix (`to`); `None` = all.
    pub to: Option<(IpAddr, u8)>,
    /// `not`: the selector is inverted.
    pub invert: bool,
    /// Priority (`priority` / `preference`); `None`: the kernel picks one.
    pub priority: Option<u32>,
    /// The action.
    pub kind: RuleKind,
    /// Firewall mark to match.
    pub fwmark: Option<u32>,
    /// Mask of the firewall mark.
    pub fwmask: Option<u32>,
    /// TOS / DS field to match (0 = any).
    pub tos: u8,
    /// Incoming interface name (`iif`).
    pub iif: Option<String>,
    /// Outgoing interface name (`oif`).
    pub oif: Option<String>,
    /// `suppress_prefixlength`.
    pub suppress_prefixlen: Option<u32>,
    /// Protocol (`RTPROT_*`) the rule is tagged with.
    pub proto: u8,
}

/// How an XDP program is attached through `IFLA_XDP`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// Generic XDP (`XDP_FLAGS_SKB_MODE`): any driver, after the skb is built.
    Skb,
    /// Native XDP in the driver (`XDP_FLAGS_DRV_MODE`).
    Driver,
}

impl XdpMode {
    fn flags(self) -> u32 {
        match self {
            XdpMode::Skb => 1 << 1,
            XdpMode::Driver => 1 << 2,
        }
    }
}

/// Errors of the netlink operations; each names the request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetlinkError {
    /// The socket failed (open, send, receive, the receive timeout).
    #[error("netlink {op}: {source}")]
    Io {
        /// The request (or `"socket"`).
        op: &'static str,
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// The kernel refused the request.
    #[error("netlink {op}: {} (errno {errno})", io::Error::from_raw_os_error(*errno))]
    Kernel {
        /// The request.
        op: &'static str,
        /// The kernel's error number (positive, as `errno`).
        errno: i32,
    },
    /// The answer lacked something the request must return.
    #[error("netlink {op}: {what}")]
    Malformed {
        /// The request.
        op: &'static str,
        /// What was wrong.
        what: &'static str,
    },
    /// An answer did not parse as an rtnetlink message.
    #[error("netlink {op}: undecodable answer: {reason}")]
    Decode {
        /// The request.
        op: &'static str,
        /// The parser's message.
        reason: String,
    },
    /// A prefix length longer than the address (over 32 for IPv4, over 128
    /// for IPv6).
    #[error("prefix length /{prefix} is invalid for {addr}")]
    BadPrefix {
        /// The address.
        addr: IpAddr,
        /// The prefix length given.
        prefix: u8,
    },
}

impl NetlinkError {
    /// The kernel's error number when the kernel refused the request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Kernel { errno, .. } => Some(*errno),
            NetlinkError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// This error as an `io::Error` (kind from the errno when there is one).
    pub fn into_io(self) -> io::Error {
        match self {
            NetlinkError::Kernel { errno, op } => {
                let e = io::Error::from_raw_os_error(errno);
                io::Error::new(e.kind(), format!("netlink {op}: {e}"))
            }
            NetlinkError::Io { source, .. } => source,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

/// `Ok(true)` when done, `Ok(false)` for the given errno (the idempotent
/// cases: nothing to do), else the error.
fn ok_if(
    r: Result<Vec<RouteNetlinkMessage>, NetlinkError>,
    errno: i32,
) -> Result<bool, NetlinkError> {
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.errno() == Some(errno) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `None` for a missing link (`ENODEV`), else the single link answered.
fn one_link(
    r: Result<Vec<RouteNetlinkMessage>, NetlinkError>,
) -> Result<Option<Link>, NetlinkError> {
    match r {
        Ok(answer) => Ok(msg::links_of(&answer).into_iter().next()),
        Err(e) if e.errno() == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The MACs `links` says belong to `ifindex`: its own, then those of the
/// macvlans on it (VRRP `use_vmac` interfaces).
fn owned_macs(links: &[Link], ifindex: u32) -> Vec<[u8; 6]> {
    let own = links.iter().filter(|l| l.index == ifindex);
    let macvlans = links
        .iter()
        .filter(|l| l.parent == Some(ifindex) && l.kind.as_deref() == Some("macvlan"));
    own.chain(macvlans).filter_map(|l| l.mac).collect()
}

fn io_err(op: &'static str) -> impl Fn(io::Error) -> NetlinkError {
    move |source| NetlinkError::Io { op, source }
}

/// Receive buffer: a dump datagram is at most 32 KiB on current kernels.
const RECV_BUF: usize = 1 << 16;

/// A blocking rtnetlink socket (one request at a time).
#[derive(Debug)]
pub struct Netlink {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Netlink {
    /// Open a `NETLINK_ROUTE` socket in the calling thread's namespace,
    /// with a one second receive timeout.
    pub fn open() -> Result<Self, NetlinkError> {
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(io_err("socket"))?;
        sock.bind_auto().map_err(io_err("bind"))?;
        socket2::SockRef::from(&sock)
            .set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(io_err("SO_RCVTIMEO"))?;
        Ok(Netlink {
            sock,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    fn exchange(&mut self, req: Request) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        let (bytes, mut answer) = req.start(&mut self.seq);
        let sent = self.sock.send(&bytes, 0).map_err(io_err(req.op))?;
        req.sent_all(sent, bytes.len())?;
        loop {
            self.buf.clear();
            self.sock.recv(&mut self.buf, 0).map_err(io_err(req.op))?;
            if let Some(r) = answer.feed(&self.buf) {
                return r;
            }
        }
    }

    /// Add `addr/prefix` to interface `ifindex`: `true` when added,
    /// `false` when it was there already.
    pub fn add_address(
        &mut self,
        ifindex: u32,
        addr: IpAddr,
        prefix: u8,
    ) -> Result<bool, NetlinkError> {
        let req = msg::address(true, ifindex, addr, prefix)?;
        ok_if(self.exchange(req), libc::EEXIST)
    }

    /// Remove `addr/prefix` from interface `ifindex`: `true` when removed,
    /// `false` when it was not there.
    pub fn del_address(
        &mut self,
        ifindex: u32,
        addr: IpAddr,
        prefix: u8,
    ) -> Result<bool, NetlinkError> {
        let req = msg::address(false, ifindex, addr, prefix)?;
        ok_if(self.exchange(req), libc::EADDRNOTAVAIL)
    }

    /// The addresses of interface `ifindex` (address, prefix length).
    pub fn addresses(&mut self, ifindex: u32) -> Result<Vec<(IpAddr, u8)>, NetlinkError> {
        Ok(msg::addresses_of(&self.exchange(msg::dump_addresses())?)
            .into_iter()
            .filter(|(i, _, _)| *i == ifindex)
            .map(|(_, a, p)| (a, p))
            .collect())
    }

    /// Set link `ifindex` administratively up.
    pub fn set_link_up(&mut self, ifindex: u32) -> Result<(), NetlinkError> {
        self.exchange(msg::set_link_up(ifindex)).map(drop)
    }

    /// The link `ifindex`, `None` when there is none.
    pub fn link(&mut self, ifindex: u32) -> Result<Option<Link>, NetlinkError> {
        one_link(self.exchange(msg::get_link(ifindex)))
    }

    /// The link called `name`, `None` when there is none.
    pub fn link_by_name(&mut self, name: &str) -> Result<Option<Link>, NetlinkError> {
        one_link(self.exchange(msg::get_link_by_name(name)))
    }

    /// Every link of the namespace.
    pub fn links(&mut self) -> Result<Vec<Link>, NetlinkError> {
        Ok(msg::links_of(&self.exchange(msg::dump_links())?))
    }

    /// The MACs frames to interface `ifindex` may carry: its own, then
    /// those of the macvlans on it (VRRP virtual MACs with `use_vmac`).
    pub fn owned_macs(&mut self, ifindex: u32) -> Result<Vec<[u8; 6]>, NetlinkError> {
        Ok(owned_macs(&self.links()?, ifindex))
    }

    /// Create macvlan `name` (private mode, up) on link `parent` with
    /// `mac`; a link of that name that exists already is `Ok`, as is.
    pub fn add_macvlan(
        &mut self,
        parent: u32,
        name: &str,
        mac: [u8; 6],
    ) -> Result<(), NetlinkError> {
        ok_if(
            self.exchange(msg::new_macvlan(parent, name, mac)),
            libc::EEXIST,
        )
        .map(drop)
    }

    /// Delete link `name`; one that does not exist is `Ok`.
    pub fn del_link(&mut self, name: &str) -> Result<(), NetlinkError> {
        match self.link_by_name(name)? {
            Some(l) => ok_if(self.exchange(msg::del_link(l.index)), libc::ENODEV).map(drop),
            None => Ok(()),
        }
    }

    /// The route towards `addr`: egress interface, gateway, preferred
    /// source.
    pub fn route(&mut self, addr: IpAddr) -> Result<Route, NetlinkError> {
        msg::route_of(&self.exchange(msg::get_route(addr))?)
    }

    /// The neighbour table of one family.
    pub fn neighbours(&mut self, ipv6: bool) -> Result<Vec<Neighbour>, NetlinkError> {
        Ok(msg::neighbours_of(
            &self.exchange(msg::dump_neighbours(ipv6))?,
        ))
    }

    /// The link-layer address of `addr` on `ifindex` when its entry is in
    /// a usable state.
    pub fn neighbour(
        &mut self,
        ifindex: u32,
        addr: IpAddr,
    ) -> Result<Option<[u8; 6]>, NetlinkError> {
        Ok(self
            .neighbours(addr.is_ipv6())?
            .into_iter()
            .find(|n| n.ifindex == ifindex && n.addr == addr && n.usable)
            .and_then(|n| n.mac))
    }

    /// Attach XDP program `prog` to `ifindex` in `mode` with `RTM_SETLINK`
    /// (replacing one attached the same way): the attachment belongs to
    /// the interface and outlives this process.
    pub fn attach_xdp(
        &mut self,
        ifindex: u32,
        prog: BorrowedFd<'_>,
        mode: XdpMode,
    ) -> Result<(), NetlinkError> {
        self.exchange(msg::set_xdp(ifindex, prog.as_raw_fd(), mode))
            .map(drop)
    }

    /// Detach the XDP program attached to `ifindex` in `mode` (none
    /// attached is `Ok`).
    pub fn detach_xdp(&mut self, ifindex: u32, mode: XdpMode) -> Result<(), NetlinkError> {
        self.exchange(msg::set_xdp(ifindex, -1, mode)).map(drop)
    }
}

/// An rtnetlink socket awaited on tokio (one request at a time). Open it
/// inside a tokio runtime.
pub struct AsyncNetlink {
    sock: TokioSocket,
    seq: u32,
    buf: Vec<u8>,
}

impl std::fmt::Debug for AsyncNetlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncNetlink")
            .field("seq", &self.seq)
            .finish()
    }
}

impl AsyncNetlink {
    /// Open a `NETLINK_ROUTE` socket in the calling thread's namespace and
    /// register it with the current tokio runtime.
    pub fn open() -> Result<Self, NetlinkError> {
        let mut sock = TokioSocket::new(NETLINK_ROUTE).map_err(io_err("socket"))?;
        sock.socket_mut().bind_auto().map_err(io_err("bind"))?;
        Ok(AsyncNetlink {
            sock,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    async fn exchange(&mut self, req: Request) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        let (bytes, mut answer) = req.start(&mut self.seq);
        let sent = self.sock.send(&bytes).await.map_err(io_err(req.op))?;
        req.sent_all(sent, bytes.len())?;
        loop {
            self.buf.clear();
            self.sock
                .recv(&mut self.buf)
                .await
                .map_err(io_err(req.op))?;
            if let Some(r) = answer.feed(&self.buf) {
                return r;
            }
        }
    }

    /// As [`Netlink::add_address`].
    pub async fn add_address(
        &mut self,
        ifindex: u32,
        addr: IpAddr,
        prefix: u8,
    ) -> Result<bool, NetlinkError> {
        let req = msg::address(true, ifindex, addr, prefix)?;
        ok_if(self.exchange(req).await, libc::EEXIST)
    }

    /// As [`Netlink::del_address`].
    pub async fn del_address(
        &mut self,
        ifindex: u32,
        addr: IpAddr,
        prefix: u8,
    ) -> Result<bool, NetlinkError> {
        let req = msg::address(false, ifindex, addr, prefix)?;
        ok_if(self.exchange(req).await, libc::EADDRNOTAVAIL)
    }

    /// As [`Netlink::link_by_name`].
    pub async fn link_by_name(&mut self, name: &str) -> Result<Option<Link>, NetlinkError> {
        one_link(self.exchange(msg::get_link_by_name(name)).await)
    }

    /// As [`Netlink::links`].
    pub async fn links(&mut self) -> Result<Vec<Link>, NetlinkError> {
        Ok(msg::links_of(&self.exchange(msg::dump_links()).await?))
    }

    /// As [`Netlink::owned_macs`].
    pub async fn owned_macs(&mut self, ifindex: u32) -> Result<Vec<[u8; 6]>, NetlinkError> {
        Ok(owned_macs(&self.links().await?, ifindex))
    }

    /// As [`Netlink::add_macvlan`].
    pub async fn add_macvlan(
        &mut self,
        parent: u32,
        name: &str,
        mac: [u8; 6],
    ) -> Result<(), NetlinkError> {
        ok_if(
            self.exchange(msg::new_macvlan(parent, name, mac)).await,
            libc::EEXIST,
        )
        .map(drop)
    }

    /// As [`Netlink::del_link`].
    pub async fn del_link(&mut self, name: &str) -> Result<(), NetlinkError> {
        match self.link_by_name(name).await? {
            Some(l) => ok_if(self.exchange(msg::del_link(l.index)).await, libc::ENODEV).map(drop),
            None => Ok(()),
        }
    }

    /// Add the blackhole host route of `addr` (`/32`, `/128`) with
    /// protocol `proto` to table `table`: `true` when added, `false` when
    /// it was there already. What rvsd announces a VIP with: a BGP daemon
    /// exports the table (docs/fleet.md).
    pub async fn add_host_route(
        &mut self,
        table: u32,
        proto: u8,
        addr: IpAddr,
    ) -> Result<bool, NetlinkError> {
        ok_if(
            self.exchange(msg::host_route(true, table, proto, addr))
                .await,
            libc::EEXIST,
        )
    }

    /// Delete that route: `true` when deleted, `false` when it was not
    /// there.
    pub async fn del_host_route(
        &mut self,
        table: u32,
        proto: u8,
        addr: IpAddr,
    ) -> Result<bool, NetlinkError> {
        ok_if(
            self.exchange(msg::host_route(false, table, proto, addr))
                .await,
            libc::ESRCH,
        )
    }

    /// Add a route (`ip route add`): `true` when added, `false` when the
    /// same route was there already.
    pub async fn add_route(&mut self, r: &RouteSpec) -> Result<bool, NetlinkError> {
        ok_if(self.exchange(msg::route(true, r)).await, libc::EEXIST)
    }

    /// Delete a route (`ip route del`): `true` when deleted, `false` when
    /// it was not there.
    pub async fn del_route(&mut self, r: &RouteSpec) -> Result<bool, NetlinkError> {
        ok_if(self.exchange(msg::route(false, r)).await, libc::ESRCH)
    }

    /// Add a policy routing rule (`ip rule add`): `true` when added,
    /// `false` when the same rule was there already.
    pub async fn add_rule(&mut self, r: &RuleSpec) -> Result<bool, NetlinkError> {
        ok_if(self.exchange(msg::rule(true, r)).await, libc::EEXIST)
    }

    /// Delete a policy routing rule (`ip rule del`): `true` when deleted,
    /// `false` when it was not there.
    pub async fn del_rule(&mut self, r: &RuleSpec) -> Result<bool, NetlinkError> {
        ok_if(self.exchange(msg::rule(false, r)).await, libc::ENOENT)
    }

    /// The destinations of the host routes with protocol `proto` in table
    /// `table` (both families).
    pub async fn host_routes(
        &mut self,
        table: u32,
        proto: u8,
    ) -> Result<Vec<IpAddr>, NetlinkError> {
        let mut out =
            msg::host_routes_of(&self.exchange(msg::dump_routes(false)).await?, table, proto);
        out.extend(msg::host_routes_of(
            &self.exchange(msg::dump_routes(true)).await?,
            table,
            proto,
        ));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(index: u32, parent: Option<u32>, kind: &str, mac: u8) -> Link {
        Link {
            index,
            name: format!("l{index}"),
            mac: Some([2, 0, 0, 0, 0, mac]),
            parent,
            kind: Some(kind.into()),
            ..Link::default()
        }
    }

    #[test]
    fn owned_macs_are_the_link_and_its_macvlans() {
        let links = [
            link(2, None, "veth", 1),
            link(3, Some(2), "macvlan", 2),
            link(4, Some(2), "vlan", 3),
            link(5, Some(9), "macvlan", 4),
            link(6, Some(2), "macvlan", 5),
        ];
        assert_eq!(
            owned_macs(&links, 2),
            vec![[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 5]]
        );
        assert!(owned_macs(&links, 7).is_empty());
    }

    #[test]
    fn idempotent_errnos_are_ok() {
        let eexist = || {
            Err(NetlinkError::Kernel {
                op: "add address",
                errno: libc::EEXIST,
            })
        };
        assert!(!ok_if(eexist(), libc::EEXIST).unwrap());
        assert!(ok_if(Ok(vec![]), libc::EEXIST).unwrap());
        assert!(ok_if(eexist(), libc::EADDRNOTAVAIL).is_err());
        let enodev = Err(NetlinkError::Kernel {
            op: "get link",
            errno: libc::ENODEV,
        });
        assert_eq!(one_link(enodev).unwrap(), None);
    }

    /// Needs no privilege: reading the loopback link of the namespace.
    #[test]
    fn loopback_is_read_over_both_transports() {
        let mut nl = Netlink::open().expect("netlink socket");
        let lo = nl.link_by_name("lo").unwrap().expect("lo exists");
        assert_eq!(lo.index, crate::iface::ifindex("lo").unwrap());
        assert!(lo.up);
        assert_eq!(
            nl.link(lo.index).unwrap().map(|l| l.name),
            Some("lo".into())
        );
        assert!(nl.link_by_name("rvs-no-such0").unwrap().is_none());
        assert!(nl.links().unwrap().iter().any(|l| l.name == "lo"));
        let r = nl.route(IpAddr::from([127, 0, 0, 1])).unwrap();
        assert_eq!(r.ifindex, lo.index);
        nl.neighbours(false).unwrap();
        let addrs = nl.addresses(lo.index).unwrap();
        assert!(
            addrs.contains(&(IpAddr::from([127, 0, 0, 1]), 8)),
            "{addrs:?}"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut nl = AsyncNetlink::open().unwrap();
            let l = nl.link_by_name("lo").await.unwrap().unwrap();
            assert_eq!(l.index, lo.index);
            assert!(nl.link_by_name("rvs-no-such0").await.unwrap().is_none());
        });
    }
}
