//! The rtnetlink messages rvs sends and what it reads from the answers,
//! as typed values of `netlink-packet-route` (no I/O here: the transports
//! in [`super::Netlink`] and [`super::AsyncNetlink`] move the bytes).

use std::net::IpAddr;
use std::os::fd::RawFd;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoMacVlan, LinkAttribute, LinkFlags, LinkInfo, LinkMessage, LinkXdp,
    MacVlanMode,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteNextHop, RouteNextHopFlags,
    RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{
    Link, Neighbour, NetlinkError, Route, RouteKind, RouteSpec, RuleKind, RuleSpec, XdpMode,
};

/// One request: the message, its flags and what it is called in errors.
#[derive(Debug, Clone)]
pub(super) struct Request {
    /// The rtnetlink message.
    pub(super) msg: RouteNetlinkMessage,
    /// `NLM_F_*` beyond `NLM_F_REQUEST | NLM_F_ACK`.
    pub(super) flags: u16,
    /// The operation, for error messages (`"add address"`).
    pub(super) op: &'static str,
}

impl Request {
    /// A request of `msg` without further flags, `op` in errors.
    pub(super) fn plain(msg: RouteNetlinkMessage, op: &'static str) -> Self {
        Request { msg, flags: 0, op }
    }

    /// A dump request of `msg`'s kind, `op` in errors.
    pub(super) fn dump(msg: RouteNetlinkMessage, op: &'static str) -> Self {
        Request {
            msg,
            flags: NLM_F_DUMP,
            op,
        }
    }

    /// `new(m)` when `add` (exclusive: an existing object answers
    /// `EEXIST`), else `del(m)`; `ops`: what each is called in errors.
    pub(super) fn add_or_del<M>(
        add: bool,
        m: M,
        new: fn(M) -> RouteNetlinkMessage,
        del: fn(M) -> RouteNetlinkMessage,
        ops: [&'static str; 2],
    ) -> Self {
        if add {
            Request {
                msg: new(m),
                flags: NLM_F_CREATE | NLM_F_EXCL,
                op: ops[0],
            }
        } else {
            Request::plain(del(m), ops[1])
        }
    }

    /// Send this request as the next sequence number after `*seq`
    /// (advanced): its datagram and the [`Answer`] that collects the reply.
    pub(super) fn start(&self, seq: &mut u32) -> (Vec<u8>, Answer) {
        *seq = seq.wrapping_add(1);
        (self.encode(*seq), Answer::new(self, *seq))
    }

    /// An error when a send took `sent` of the datagram's `len` bytes.
    pub(super) fn sent_all(&self, sent: usize, len: usize) -> Result<(), NetlinkError> {
        if sent != len {
            return Err(NetlinkError::Malformed {
                op: self.op,
                what: "short send",
            });
        }
        Ok(())
    }

    /// The datagram of this request with sequence number `seq`.
    pub(super) fn encode(&self, seq: u32) -> Vec<u8> {
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | self.flags;
        header.sequence_number = seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(self.msg.clone()));
        m.finalize();
        let mut buf = vec![0u8; m.buffer_len()];
        m.serialize(&mut buf);
        buf
    }
}

/// Collects the answers to one request, datagram by datagram.
#[derive(Debug)]
pub(super) struct Answer {
    seq: u32,
    op: &'static str,
    messages: Vec<RouteNetlinkMessage>,
}

impl Answer {
    /// Waiting for the answers to `req` sent with sequence number `seq`.
    pub(super) fn new(req: &Request, seq: u32) -> Self {
        Answer {
            seq,
            op: req.op,
            messages: Vec::new(),
        }
    }

    /// Take one received datagram: `Some` when the answer is complete
    /// (the acknowledgement, an error or the end of a dump has arrived).
    /// Messages of other sequence numbers are skipped.
    pub(super) fn feed(
        &mut self,
        mut buf: &[u8],
    ) -> Option<Result<Vec<RouteNetlinkMessage>, NetlinkError>> {
        while buf.len() >= 16 {
            let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if len < 16 || len > buf.len() {
                return Some(Err(NetlinkError::Malformed {
                    op: self.op,
                    what: "truncated message",
                }));
            }
            let one = &buf[..len];
            buf = &buf[len.next_multiple_of(4).min(buf.len())..];
            let m = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(one) {
                Ok(m) => m,
                Err(e) => {
                    return Some(Err(NetlinkError::Decode {
                        op: self.op,
                        reason: e.to_string(),
                    }));
                }
            };
            if m.header.sequence_number != self.seq {
                continue;
            }
            match m.payload {
                NetlinkPayload::Done(_) => return Some(Ok(std::mem::take(&mut self.messages))),
                NetlinkPayload::Error(e) => {
                    return Some(match e.code {
                        None => Ok(std::mem::take(&mut self.messages)),
                        Some(code) => Err(NetlinkError::Kernel {
                            op: self.op,
                            errno: -code.get(),
                        }),
                    });
                }
                NetlinkPayload::InnerMessage(inner) => self.messages.push(inner),
                NetlinkPayload::Noop | NetlinkPayload::Overrun(_) => {}
                _ => {}
            }
        }
        None
    }
}

fn family(addr: IpAddr) -> AddressFamily {
    family_of(addr.is_ipv6())
}

/// `AF_INET6` when `ipv6`, else `AF_INET`.
fn family_of(ipv6: bool) -> AddressFamily {
    if ipv6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    }
}

fn max_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// `RTM_NEWADDR` (`add`) or `RTM_DELADDR` of `addr/prefix` on `ifindex`.
/// IPv4 carries `IFA_LOCAL` and `IFA_ADDRESS`, IPv6 `IFA_ADDRESS` and
/// `IFA_F_NODAD` (a virtual address is usable at once, as keepalived adds
/// them). A new address is exclusive, so an existing one answers `EEXIST`.
pub(super) fn address(
    add: bool,
    ifindex: u32,
    addr: IpAddr,
    prefix: u8,
) -> Result<Request, NetlinkError> {
    if prefix > max_prefix(addr) {
        return Err(NetlinkError::BadPrefix { addr, prefix });
    }
    let mut m = AddressMessage::default();
    m.header.family = family(addr);
    m.header.prefix_len = prefix;
    m.header.index = ifindex;
    if addr.is_ipv6() {
        m.header.flags = AddressHeaderFlags::Nodad;
    } else {
        m.attributes.push(AddressAttribute::Local(addr));
    }
    m.attributes.push(AddressAttribute::Address(addr));
    Ok(Request::add_or_del(
        add,
        m,
        RouteNetlinkMessage::NewAddress,
        RouteNetlinkMessage::DelAddress,
        ["add address", "delete address"],
    ))
}

/// `RTM_GETADDR` dump of one family's addresses (`None`: both).
pub(super) fn dump_addresses() -> Request {
    Request::dump(
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        "dump addresses",
    )
}

/// The `(interface index, address, prefix length)` of each address of a
/// dump (`IFA_LOCAL` when present, as `ip addr` shows it, else
/// `IFA_ADDRESS`).
pub(super) fn addresses_of(answer: &[RouteNetlinkMessage]) -> Vec<(u32, IpAddr, u8)> {
    answer
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a) => Some(a),
            _ => None,
        })
        .filter_map(|a| {
            let local = a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            });
            let address = a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            });
            Some((a.header.index, local.or(address)?, a.header.prefix_len))
        })
        .collect()
}

/// `RTM_SETLINK` setting `IFF_UP` on link `ifindex`.
pub(super) fn set_link_up(ifindex: u32) -> Request {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    m.header.flags = LinkFlags::Up;
    m.header.change_mask = LinkFlags::Up;
    Request::plain(RouteNetlinkMessage::SetLink(m), "set link up")
}

/// `RTM_GETLINK` of one link by index.
pub(super) fn get_link(ifindex: u32) -> Request {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    Request::plain(RouteNetlinkMessage::GetLink(m), "get link")
}

/// `RTM_GETLINK` of one link by name (`IFLA_IFNAME`).
pub(super) fn get_link_by_name(name: &str) -> Request {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_owned()));
    Request::plain(RouteNetlinkMessage::GetLink(m), "get link")
}

/// `RTM_GETLINK` dump of every link.
pub(super) fn dump_links() -> Request {
    Request::dump(
        RouteNetlinkMessage::GetLink(LinkMessage::default()),
        "dump links",
    )
}

/// `RTM_NEWLINK`: macvlan `name` in private mode (it talks to the wire,
/// not to its siblings) on `parent`, with `mac`, created up. Exclusive: an
/// existing link answers `EEXIST`.
pub(super) fn new_macvlan(parent: u32, name: &str, mac: [u8; 6]) -> Request {
    let mut m = LinkMessage::default();
    m.header.flags = LinkFlags::Up;
    m.header.change_mask = LinkFlags::Up;
    m.attributes = vec![
        LinkAttribute::IfName(name.to_owned()),
        LinkAttribute::Link(parent),
        LinkAttribute::Address(mac.to_vec()),
        LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::MacVlan),
            LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(
                MacVlanMode::Private,
            )])),
        ]),
    ];
    Request {
        msg: RouteNetlinkMessage::NewLink(m),
        flags: NLM_F_CREATE | NLM_F_EXCL,
        op: "add macvlan",
    }
}

/// `RTM_DELLINK` of link `ifindex`.
pub(super) fn del_link(ifindex: u32) -> Request {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    Request::plain(RouteNetlinkMessage::DelLink(m), "delete link")
}

/// `RTM_SETLINK` with `IFLA_XDP { FD, FLAGS }` on `ifindex`: attach the
/// program `fd` (-1 detaches) in `mode`.
pub(super) fn set_xdp(ifindex: u32, fd: RawFd, mode: XdpMode) -> Request {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    m.attributes.push(LinkAttribute::Xdp(vec![
        LinkXdp::Fd(fd),
        LinkXdp::Flags(mode.flags()),
    ]));
    Request::plain(RouteNetlinkMessage::SetLink(m), "set link XDP")
}

/// `RTM_GETROUTE` towards `addr` (what `ip route get ADDR` asks).
pub(super) fn get_route(addr: IpAddr) -> Request {
    let mut m = RouteMessage::default();
    m.header.address_family = family(addr);
    m.header.destination_prefix_length = max_prefix(addr);
    m.attributes.push(RouteAttribute::Destination(match addr {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }));
    Request::plain(RouteNetlinkMessage::GetRoute(m), "get route")
}

/// `RT_TABLE_COMPAT`: the header's table when the real one (over 255)
/// is in `RTA_TABLE`.
const RT_TABLE_COMPAT: u8 = 252;

/// `RTM_NEWROUTE` (`add`) or `RTM_DELROUTE` of the host route `addr/32`
/// (`/128`) of type `blackhole` with protocol `proto` in table `table`
/// (`ip route add blackhole ADDR table TABLE proto PROTO`). A new route is
/// exclusive, so one already there answers `EEXIST`; deleting one that is
/// not there answers `ESRCH`.
pub(super) fn host_route(add: bool, table: u32, proto: u8, addr: IpAddr) -> Request {
    let mut m = RouteMessage::default();
    m.header.address_family = family(addr);
    m.header.destination_prefix_length = max_prefix(addr);
    m.header.table = u8::try_from(table).unwrap_or(RT_TABLE_COMPAT);
    m.header.protocol = RouteProtocol::from(proto);
    m.header.scope = RouteScope::Universe;
    m.header.kind = RouteType::BlackHole;
    m.attributes.push(RouteAttribute::Destination(match addr {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }));
    m.attributes.push(RouteAttribute::Table(table));
    Request::add_or_del(
        add,
        m,
        RouteNetlinkMessage::NewRoute,
        RouteNetlinkMessage::DelRoute,
        ["add route", "delete route"],
    )
}

fn route_address(a: IpAddr) -> RouteAddress {
    match a {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }
}

/// `RTM_NEWROUTE` (`add`) or `RTM_DELROUTE` of one configured route (as
/// `ip route add|del` builds it). A new route is exclusive, so the same
/// one already there answers `EEXIST`; deleting one that is not there
/// answers `ESRCH`. Two or more gateways make `RTA_MULTIPATH`.
pub(super) fn route(add: bool, r: &RouteSpec) -> Request {
    let mut m = RouteMessage::default();
    m.header.address_family = family(r.dst);
    m.header.destination_prefix_length = r.dst_len;
    m.header.table = u8::try_from(r.table).unwrap_or(RT_TABLE_COMPAT);
    m.header.protocol = RouteProtocol::from(r.proto);
    m.header.kind = match r.kind {
        RouteKind::Unicast => RouteType::Unicast,
        RouteKind::Blackhole => RouteType::BlackHole,
        RouteKind::Unreachable => RouteType::Unreachable,
        RouteKind::Prohibit => RouteType::Prohibit,
        RouteKind::Throw => RouteType::Throw,
    };
    let on_link = r.kind == RouteKind::Unicast && r.gateways.is_empty();
    m.header.scope = match r.scope {
        Some(s) => RouteScope::from(s),
        None if on_link => RouteScope::Link,
        None => RouteScope::Universe,
    };
    if r.onlink && r.gateways.len() < 2 {
        m.header.flags = RouteFlags::Onlink;
    }
    m.attributes
        .push(RouteAttribute::Destination(route_address(r.dst)));
    if let Some((src, len)) = r.from {
        m.header.source_prefix_length = len;
        m.attributes
            .push(RouteAttribute::Source(route_address(src)));
    }
    m.attributes.push(RouteAttribute::Table(r.table));
    if let Some(p) = r.prefsrc {
        m.attributes
            .push(RouteAttribute::PrefSource(route_address(p)));
    }
    if let Some(metric) = r.metric {
        m.attributes.push(RouteAttribute::Priority(metric));
    }
    match r.gateways.as_slice() {
        [] => {
            if let Some(oif) = r.oif {
                m.attributes.push(RouteAttribute::Oif(oif));
            }
        }
        [gw] => {
            m.attributes
                .push(RouteAttribute::Gateway(route_address(*gw)));
            if let Some(oif) = r.oif {
                m.attributes.push(RouteAttribute::Oif(oif));
            }
        }
        gws => {
            let hops = gws
                .iter()
                .map(|gw| {
                    let mut h = RouteNextHop::default();
                    h.interface_index = r.oif.unwrap_or(0);
                    if r.onlink {
                        h.flags = RouteNextHopFlags::Onlink;
                    }
                    h.attributes
                        .push(RouteAttribute::Gateway(route_address(*gw)));
                    h
                })
                .collect();
            m.attributes.push(RouteAttribute::MultiPath(hops));
        }
    }
    Request::add_or_del(
        add,
        m,
        RouteNetlinkMessage::NewRoute,
        RouteNetlinkMessage::DelRoute,
        ["add route", "delete route"],
    )
}

/// `RTM_NEWRULE` (`add`) or `RTM_DELRULE` of one policy routing rule (as
/// `ip rule add|del` builds it). An existing identical rule answers
/// `EEXIST` (the request is exclusive); deleting a missing one answers
/// `ENOENT`.
pub(super) fn rule(add: bool, r: &RuleSpec) -> Request {
    let mut m = RuleMessage::default();
    m.header.family = family_of(r.ipv6);
    m.header.tos = r.tos;
    if r.invert {
        m.header.flags = RuleFlags::Invert;
    }
    if let Some((a, len)) = r.from {
        m.header.src_len = len;
        m.attributes.push(RuleAttribute::Source(a));
    }
    if let Some((a, len)) = r.to {
        m.header.dst_len = len;
        m.attributes.push(RuleAttribute::Destination(a));
    }
    if let Some(p) = r.priority {
        m.attributes.push(RuleAttribute::Priority(p));
    }
    if let Some(mark) = r.fwmark {
        m.attributes.push(RuleAttribute::FwMark(mark));
    }
    if let Some(mask) = r.fwmask {
        m.attributes.push(RuleAttribute::FwMask(mask));
    }
    if let Some(i) = &r.iif {
        m.attributes.push(RuleAttribute::Iifname(i.clone()));
    }
    if let Some(o) = &r.oif {
        m.attributes.push(RuleAttribute::Oifname(o.clone()));
    }
    if let Some(len) = r.suppress_prefixlen {
        m.attributes.push(RuleAttribute::SuppressPrefixLen(len));
    }
    m.attributes
        .push(RuleAttribute::Protocol(RouteProtocol::from(r.proto)));
    m.header.action = match r.kind {
        RuleKind::Table(t) => {
            m.header.table = u8::try_from(t).unwrap_or(RT_TABLE_COMPAT);
            m.attributes.push(RuleAttribute::Table(t));
            RuleAction::ToTable
        }
        RuleKind::Goto(p) => {
            m.attributes.push(RuleAttribute::Goto(p));
            RuleAction::Goto
        }
        RuleKind::Nop => RuleAction::Nop,
        RuleKind::Blackhole => RuleAction::Blackhole,
        RuleKind::Unreachable => RuleAction::Unreachable,
        RuleKind::Prohibit => RuleAction::Prohibit,
    };
    Request::add_or_del(
        add,
        m,
        RouteNetlinkMessage::NewRule,
        RouteNetlinkMessage::DelRule,
        ["add rule", "delete rule"],
    )
}

/// `RTM_GETROUTE` dump of one family's routes (every table).
pub(super) fn dump_routes(ipv6: bool) -> Request {
    let mut m = RouteMessage::default();
    m.header.address_family = family_of(ipv6);
    Request::dump(RouteNetlinkMessage::GetRoute(m), "dump routes")
}

/// The destinations of the host routes (`/32`, `/128`) of a dump that are
/// in table `table` with protocol `proto`.
pub(super) fn host_routes_of(answer: &[RouteNetlinkMessage], table: u32, proto: u8) -> Vec<IpAddr> {
    answer
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => Some(r),
            _ => None,
        })
        .filter(|r| u8::from(r.header.protocol) == proto)
        .filter(|r| {
            let t = r
                .attributes
                .iter()
                .find_map(|a| match a {
                    RouteAttribute::Table(t) => Some(*t),
                    _ => None,
                })
                .unwrap_or(u32::from(r.header.table));
            t == table
        })
        .filter_map(|r| {
            let dst = r.attributes.iter().find_map(|a| match a {
                RouteAttribute::Destination(d) => ip_of(d),
                _ => None,
            })?;
            (r.header.destination_prefix_length == max_prefix(dst)).then_some(dst)
        })
        .collect()
}

/// `RTM_GETNEIGH` dump of one family's neighbour table.
pub(super) fn dump_neighbours(ipv6: bool) -> Request {
    let mut m = NeighbourMessage::default();
    m.header.family = family_of(ipv6);
    Request::dump(RouteNetlinkMessage::GetNeighbour(m), "dump neighbours")
}

/// The facts rvs reads from an `RTM_NEWLINK`.
pub(super) fn link_of(m: &LinkMessage) -> Link {
    let mut link = Link {
        index: m.header.index,
        name: String::new(),
        mac: None,
        mtu: None,
        up: m.header.flags.contains(LinkFlags::Up),
        running: m.header.flags.contains(LinkFlags::Running),
        parent: None,
        kind: None,
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => link.name = n.clone(),
            LinkAttribute::Address(mac) => link.mac = <[u8; 6]>::try_from(mac.as_slice()).ok(),
            LinkAttribute::Mtu(mtu) => link.mtu = Some(*mtu),
            LinkAttribute::Link(p) => link.parent = Some(*p),
            LinkAttribute::LinkInfo(info) => {
                link.kind = info.iter().find_map(|i| match i {
                    LinkInfo::Kind(k) => Some(k.to_string()),
                    _ => None,
                });
            }
            _ => {}
        }
    }
    link
}

/// The links among `answer`.
pub(super) fn links_of(answer: &[RouteNetlinkMessage]) -> Vec<Link> {
    answer
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(link_of(l)),
            _ => None,
        })
        .collect()
}

fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(a) => Some(IpAddr::V4(*a)),
        RouteAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// The egress interface, gateway and preferred source of an answer to
/// [`get_route`].
pub(super) fn route_of(answer: &[RouteNetlinkMessage]) -> Result<Route, NetlinkError> {
    let m = answer
        .iter()
        .find_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => Some(r),
            _ => None,
        })
        .ok_or(NetlinkError::Malformed {
            op: "get route",
            what: "no route in the answer",
        })?;
    let (mut oif, mut gateway, mut prefsrc) = (None, None, None);
    for a in &m.attributes {
        match a {
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Gateway(g) => gateway = ip_of(g),
            RouteAttribute::PrefSource(s) => prefsrc = ip_of(s),
            _ => {}
        }
    }
    Ok(Route {
        ifindex: oif.ok_or(NetlinkError::Malformed {
            op: "get route",
            what: "route without an interface",
        })?,
        gateway,
        prefsrc,
    })
}

/// The neighbour entries of a dump.
pub(super) fn neighbours_of(answer: &[RouteNetlinkMessage]) -> Vec<Neighbour> {
    answer
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewNeighbour(n) => Some(n),
            _ => None,
        })
        .filter_map(|n| {
            let mut addr = None;
            let mut mac = None;
            for a in &n.attributes {
                match a {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => {
                        addr = Some(IpAddr::V4(*a));
                    }
                    NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => {
                        addr = Some(IpAddr::V6(*a));
                    }
                    NeighbourAttribute::LinkLayerAddress(ll) => {
                        mac = <[u8; 6]>::try_from(ll.as_slice()).ok();
                    }
                    _ => {}
                }
            }
            Some(Neighbour {
                ifindex: n.header.ifindex,
                addr: addr?,
                mac,
                usable: usable(n.header.state),
            })
        })
        .collect()
}

/// REACHABLE, STALE, DELAY, PROBE, NOARP or PERMANENT: the kernel would
/// send to this link-layer address.
fn usable(state: NeighbourState) -> bool {
    matches!(
        state,
        NeighbourState::Reachable
            | NeighbourState::Stale
            | NeighbourState::Delay
            | NeighbourState::Probe
            | NeighbourState::Noarp
            | NeighbourState::Permanent
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{ErrorMessage, NLMSG_ERROR};
    use std::num::NonZeroI32;

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_ne_bytes([b[at], b[at + 1]])
    }
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// A configured route's `rtmsg` (family, dst_len, src_len, tos, table,
    /// protocol, scope, type) and attributes: scope link for an on-link
    /// route, the gateway, two gateways as a multipath route, and the
    /// message decodes back.
    #[test]
    fn configured_route_bytes() {
        let r = RouteSpec {
            kind: RouteKind::Unicast,
            dst: "10.5.0.0".parse().unwrap(),
            dst_len: 16,
            from: None,
            prefsrc: Some("10.0.0.2".parse().unwrap()),
            gateways: vec![],
            oif: Some(3),
            onlink: false,
            scope: None,
            table: 100,
            metric: Some(7),
            proto: 18,
        };
        let b = route(true, &r).encode(1);
        assert_eq!(u16_at(&b, 4), 24, "RTM_NEWROUTE");
        assert_eq!(&b[16..24], &[2, 16, 0, 0, 100, 18, 253, 1]);
        let via = RouteSpec {
            gateways: vec!["10.0.0.1".parse().unwrap()],
            ..r.clone()
        };
        assert_eq!(
            &route(true, &via).encode(1)[16..24],
            &[2, 16, 0, 0, 100, 18, 0, 1]
        );
        let hole = RouteSpec {
            kind: RouteKind::Blackhole,
            dst: "2001:db8:5::".parse().unwrap(),
            dst_len: 48,
            table: 1000,
            oif: None,
            prefsrc: None,
            ..r.clone()
        };
        let b = route(false, &hole).encode(2);
        assert_eq!(u16_at(&b, 4), 25, "RTM_DELROUTE");
        assert_eq!(&b[16..24], &[10, 48, 0, 0, RT_TABLE_COMPAT, 18, 0, 6]);
        let multi = RouteSpec {
            gateways: vec!["10.0.0.1".parse().unwrap(), "10.0.0.9".parse().unwrap()],
            ..r
        };
        let b = route(true, &multi).encode(3);
        let back = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&b).unwrap();
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(m)) = back.payload else {
            panic!("not a route: {back:?}");
        };
        let hops = m
            .attributes
            .iter()
            .find_map(|a| match a {
                RouteAttribute::MultiPath(h) => Some(h.clone()),
                _ => None,
            })
            .expect("multipath");
        assert_eq!(hops.len(), 2);
        assert!(hops.iter().all(|h| h.interface_index == 3));
        assert!(m.attributes.contains(&RouteAttribute::Priority(7)));
        assert!(m.attributes.contains(&RouteAttribute::Table(100)));
    }

    /// A rule's `fib_rule_hdr` (family, dst_len, src_len, tos, table,
    /// res1, res2, action) and its attributes.
    #[test]
    fn rule_bytes() {
        let r = RuleSpec {
            ipv6: false,
            from: Some(("10.6.0.0".parse().unwrap(), 24)),
            to: None,
            invert: false,
            priority: Some(100),
            kind: RuleKind::Table(1000),
            fwmark: Some(5),
            fwmask: None,
            tos: 0,
            iif: Some("eth0".into()),
            oif: None,
            suppress_prefixlen: None,
            proto: 18,
        };
        let b = rule(true, &r).encode(1);
        assert_eq!(u16_at(&b, 4), 32, "RTM_NEWRULE");
        assert_eq!(&b[16..24], &[2, 0, 24, 0, RT_TABLE_COMPAT, 0, 0, 1]);
        let back = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&b).unwrap();
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRule(m)) = back.payload else {
            panic!("not a rule: {back:?}");
        };
        for a in [
            RuleAttribute::Table(1000),
            RuleAttribute::Priority(100),
            RuleAttribute::FwMark(5),
            RuleAttribute::Iifname("eth0".into()),
            RuleAttribute::Source("10.6.0.0".parse().unwrap()),
        ] {
            assert!(m.attributes.contains(&a), "{a:?} in {:?}", m.attributes);
        }
        let hole = RuleSpec {
            ipv6: true,
            from: None,
            to: Some(("2001:db8:6::".parse().unwrap(), 48)),
            invert: true,
            kind: RuleKind::Blackhole,
            ..r
        };
        let b = rule(false, &hole).encode(2);
        assert_eq!(u16_at(&b, 4), 33, "RTM_DELRULE");
        assert_eq!(&b[16..24], &[10, 48, 0, 0, 0, 0, 0, 6]);
        assert_eq!(u32_at(&b, 24), 2, "FIB_RULE_INVERT");
    }

    /// The announce route's bytes as the kernel reads them (`rtmsg`:
    /// family, dst_len, src_len, tos, table, protocol, scope, type), and a
    /// dump's routes filtered to that table and protocol.
    #[test]
    fn host_route_bytes_and_dump_filter() {
        let vip: IpAddr = "10.99.0.100".parse().unwrap();
        let b = host_route(true, 100, 250, vip).encode(7);
        // nlmsghdr (16) then rtmsg.
        assert_eq!(u16_at(&b, 4), 24, "RTM_NEWROUTE");
        assert_eq!(&b[16..24], &[2, 32, 0, 0, 100, 250, 0, 6]);
        let big = host_route(false, 1000, 250, "2001:db8::1".parse().unwrap()).encode(8);
        assert_eq!(u16_at(&big, 4), 25, "RTM_DELROUTE");
        assert_eq!(&big[16..24], &[10, 128, 0, 0, RT_TABLE_COMPAT, 250, 0, 6]);
        let msg = |r: Request| r.msg;
        let other_proto = msg(host_route(true, 100, 186, "10.99.0.1".parse().unwrap()));
        let other_table = msg(host_route(true, 101, 250, "10.99.0.2".parse().unwrap()));
        let mut wide = RouteMessage::default();
        wide.header.address_family = AddressFamily::Inet;
        wide.header.destination_prefix_length = 24;
        wide.header.table = 100;
        wide.header.protocol = RouteProtocol::from(250);
        wide.attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet(
                "10.98.0.0".parse().unwrap(),
            )));
        let dump = vec![
            msg(host_route(true, 100, 250, vip)),
            other_proto,
            other_table,
            RouteNetlinkMessage::NewRoute(wide),
        ];
        assert_eq!(host_routes_of(&dump, 100, 250), vec![vip]);
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let dump6 = vec![msg(host_route(true, 1000, 250, v6))];
        assert_eq!(host_routes_of(&dump6, 1000, 250), vec![v6]);
        assert!(host_routes_of(&dump6, 232, 250).is_empty());
    }

    /// The kernel's view of the bytes: `nlmsghdr` + `ifaddrmsg` + attrs,
    /// checked field by field against the C layout.
    #[test]
    fn ipv4_address_request_layout() {
        let r = address(true, 3, IpAddr::from([10, 0, 0, 100]), 32).unwrap();
        let m = r.encode(7);
        assert_eq!(m.len(), 16 + 8 + 8 + 8);
        assert_eq!(u32_at(&m, 0), 40, "nlmsg_len");
        assert_eq!(u16_at(&m, 4), 20, "RTM_NEWADDR");
        assert_eq!(u16_at(&m, 6), 0x605, "REQUEST|ACK|EXCL|CREATE");
        assert_eq!(u32_at(&m, 8), 7, "seq");
        assert_eq!(&m[16..20], &[libc::AF_INET as u8, 32, 0, 0]);
        assert_eq!(u32_at(&m, 20), 3, "ifa_index");
        let attrs: Vec<(u16, &[u8])> =
            vec![(u16_at(&m, 26), &m[28..32]), (u16_at(&m, 34), &m[36..40])];
        assert!(attrs.contains(&(2, &[10, 0, 0, 100][..])), "IFA_LOCAL");
        assert!(attrs.contains(&(1, &[10, 0, 0, 100][..])), "IFA_ADDRESS");
    }

    #[test]
    fn ipv6_address_request_layout() {
        let a: IpAddr = "fd00::100".parse().unwrap();
        let m = address(false, 4, a, 64).unwrap().encode(9);
        assert_eq!(m.len(), 16 + 8 + 20);
        assert_eq!(u16_at(&m, 4), 21, "RTM_DELADDR");
        assert_eq!(u16_at(&m, 6), 0x5, "REQUEST|ACK");
        assert_eq!(
            &m[16..20],
            &[libc::AF_INET6 as u8, 64, 0x02, 0],
            "IFA_F_NODAD"
        );
        assert_eq!((u16_at(&m, 24), u16_at(&m, 26)), (20, 1));
        assert_eq!(
            &m[28..44],
            &"fd00::100".parse::<std::net::Ipv6Addr>().unwrap().octets()
        );
    }

    #[test]
    fn prefix_longer_than_the_address_is_refused() {
        let e = address(true, 1, IpAddr::from([10, 0, 0, 1]), 33).unwrap_err();
        assert!(matches!(e, NetlinkError::BadPrefix { prefix: 33, .. }));
        assert!(address(true, 1, "::1".parse().unwrap(), 128).is_ok());
    }

    #[test]
    fn macvlan_request_carries_kind_mode_parent_and_mac() {
        let m = new_macvlan(5, "vrrp.51", [0, 0, 0x5e, 0, 1, 51]).encode(1);
        assert_eq!(u16_at(&m, 4), 16, "RTM_NEWLINK");
        assert_eq!(u16_at(&m, 6), 0x605);
        assert_eq!(u32_at(&m, 24), 1, "ifi_flags IFF_UP");
        assert_eq!(u32_at(&m, 28), 1, "ifi_change IFF_UP");
        // Parse it back as the kernel would and compare the typed values.
        let back = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&m).unwrap();
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) = back.payload else {
            panic!("not a NEWLINK");
        };
        let link = link_of(&l);
        assert_eq!(link.name, "vrrp.51");
        assert_eq!(link.parent, Some(5));
        assert_eq!(link.mac, Some([0, 0, 0x5e, 0, 1, 51]));
        assert_eq!(link.kind.as_deref(), Some("macvlan"));
        let mode = l.attributes.iter().find_map(|a| match a {
            LinkAttribute::LinkInfo(i) => i.iter().find_map(|i| match i {
                LinkInfo::Data(InfoData::MacVlan(d)) => d.first().cloned(),
                _ => None,
            }),
            _ => None,
        });
        assert_eq!(mode, Some(InfoMacVlan::Mode(MacVlanMode::Private)));
    }

    #[test]
    fn address_dumps_are_read_and_links_set_up() {
        let mut v4 = AddressMessage::default();
        v4.header.index = 1;
        v4.header.prefix_len = 32;
        v4.attributes = vec![
            AddressAttribute::Address(IpAddr::from([10, 0, 0, 2])),
            AddressAttribute::Local(IpAddr::from([10, 0, 0, 1])),
        ];
        let mut v6 = AddressMessage::default();
        v6.header.index = 2;
        v6.header.prefix_len = 64;
        v6.attributes = vec![AddressAttribute::Address("fd00::1".parse().unwrap())];
        let got = addresses_of(&[
            RouteNetlinkMessage::NewAddress(v4),
            RouteNetlinkMessage::NewAddress(v6),
            RouteNetlinkMessage::NewAddress(AddressMessage::default()),
        ]);
        assert_eq!(
            got,
            vec![
                (1, IpAddr::from([10, 0, 0, 1]), 32),
                (2, "fd00::1".parse().unwrap(), 64)
            ]
        );
        let m = set_link_up(3).encode(1);
        assert_eq!(u16_at(&m, 4), 19, "RTM_SETLINK");
        assert_eq!((u32_at(&m, 20), u32_at(&m, 24), u32_at(&m, 28)), (3, 1, 1));
        let m = dump_addresses().encode(2);
        assert_eq!(
            (u16_at(&m, 4), u16_at(&m, 6)),
            (22, 0x305),
            "RTM_GETADDR dump"
        );
    }

    #[test]
    fn xdp_request_layout() {
        let m = set_xdp(7, 42, XdpMode::Driver).encode(1);
        assert_eq!(m.len(), 52);
        assert_eq!(u16_at(&m, 4), 19, "RTM_SETLINK");
        assert_eq!(u32_at(&m, 20), 7, "ifi_index");
        assert_eq!(u16_at(&m, 32), 20);
        assert_eq!(u16_at(&m, 34) & 0x3fff, 43, "IFLA_XDP");
        assert_eq!((u16_at(&m, 38), u32_at(&m, 40)), (1, 42), "IFLA_XDP_FD");
        assert_eq!(
            (u16_at(&m, 46), u32_at(&m, 48)),
            (3, 1 << 2),
            "IFLA_XDP_FLAGS DRV"
        );
        let m = set_xdp(7, -1, XdpMode::Skb).encode(1);
        assert_eq!(u32_at(&m, 40) as i32, -1);
        assert_eq!(u32_at(&m, 48), 1 << 1, "SKB");
    }

    #[test]
    fn route_request_names_the_destination() {
        let m = get_route(IpAddr::from([192, 0, 2, 7])).encode(3);
        assert_eq!(u16_at(&m, 4), 26, "RTM_GETROUTE");
        assert_eq!(m[16], libc::AF_INET as u8);
        assert_eq!(m[17], 32, "rtm_dst_len");
        assert_eq!((u16_at(&m, 28), u16_at(&m, 30)), (8, 1), "RTA_DST");
        assert_eq!(&m[32..36], &[192, 0, 2, 7]);
        let m = dump_neighbours(true).encode(4);
        assert_eq!(u16_at(&m, 4), 30, "RTM_GETNEIGH");
        assert_eq!(u16_at(&m, 6), 0x305, "REQUEST|ACK|DUMP");
        assert_eq!(m[16], libc::AF_INET6 as u8);
    }

    fn ack(seq: u32, errno: i32) -> Vec<u8> {
        let mut header = NetlinkHeader::default();
        header.sequence_number = seq;
        header.message_type = NLMSG_ERROR;
        let mut e = ErrorMessage::default();
        e.code = NonZeroI32::new(-errno);
        let mut m = NetlinkMessage::<RouteNetlinkMessage>::new(header, NetlinkPayload::Error(e));
        m.finalize();
        let mut buf = vec![0u8; m.buffer_len()];
        m.serialize(&mut buf);
        buf
    }

    fn reply(seq: u32, msg: RouteNetlinkMessage) -> Vec<u8> {
        let mut header = NetlinkHeader::default();
        header.sequence_number = seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        m.finalize();
        let mut buf = vec![0u8; m.buffer_len()];
        m.serialize(&mut buf);
        buf
    }

    #[test]
    fn answers_are_matched_by_sequence_and_errors_carry_the_errno() {
        let req = address(true, 1, IpAddr::from([10, 0, 0, 1]), 32).unwrap();
        let mut a = Answer::new(&req, 2);
        let mut buf = ack(1, 0);
        buf.extend(ack(2, libc::EEXIST));
        match a.feed(&buf) {
            Some(Err(NetlinkError::Kernel { errno, op })) => {
                assert_eq!(errno, libc::EEXIST);
                assert_eq!(op, "add address");
            }
            other => panic!("{other:?}"),
        }
        let mut a = Answer::new(&req, 3);
        assert!(a.feed(&buf).is_none(), "no answer for seq 3 yet");
        assert!(matches!(a.feed(&ack(3, 0)), Some(Ok(v)) if v.is_empty()));
        let mut cut = ack(1, libc::EEXIST);
        cut[..4].copy_from_slice(&100u32.to_ne_bytes());
        assert!(matches!(
            Answer::new(&req, 1).feed(&cut),
            Some(Err(NetlinkError::Malformed { .. }))
        ));
    }

    #[test]
    fn a_link_answer_is_collected_until_the_ack() {
        let req = get_link(4);
        let mut l = LinkMessage::default();
        l.header.index = 4;
        l.header.flags = LinkFlags::Up | LinkFlags::Running;
        l.attributes = vec![
            LinkAttribute::IfName("eth0".into()),
            LinkAttribute::Address(vec![2, 0, 0, 0, 0, 1]),
            LinkAttribute::Mtu(1500),
        ];
        let mut a = Answer::new(&req, 9);
        assert!(a.feed(&reply(9, RouteNetlinkMessage::NewLink(l))).is_none());
        let got = a.feed(&ack(9, 0)).unwrap().unwrap();
        let links = links_of(&got);
        assert_eq!(links.len(), 1);
        let k = &links[0];
        assert_eq!((k.index, k.name.as_str(), k.mtu), (4, "eth0", Some(1500)));
        assert_eq!(k.mac, Some([2, 0, 0, 0, 0, 1]));
        assert!(k.up && k.running);
        assert_eq!(k.parent, None);
    }

    #[test]
    fn route_and_neighbour_answers_are_read() {
        let mut r = RouteMessage::default();
        r.header.address_family = AddressFamily::Inet;
        r.attributes = vec![
            RouteAttribute::Oif(3),
            RouteAttribute::Gateway(RouteAddress::Inet([10, 0, 0, 1].into())),
            RouteAttribute::PrefSource(RouteAddress::Inet([10, 0, 0, 2].into())),
        ];
        let route = route_of(&[RouteNetlinkMessage::NewRoute(r.clone())]).unwrap();
        assert_eq!(route.ifindex, 3);
        assert_eq!(route.gateway, Some(IpAddr::from([10, 0, 0, 1])));
        assert_eq!(route.prefsrc, Some(IpAddr::from([10, 0, 0, 2])));
        r.attributes.remove(0);
        assert!(route_of(&[RouteNetlinkMessage::NewRoute(r)]).is_err());
        assert!(route_of(&[]).is_err());

        let mut n = NeighbourMessage::default();
        n.header.family = AddressFamily::Inet;
        n.header.ifindex = 3;
        n.header.state = NeighbourState::Stale;
        n.attributes = vec![
            NeighbourAttribute::Destination(NeighbourAddress::Inet([10, 0, 0, 9].into())),
            NeighbourAttribute::LinkLayerAddress(vec![2, 0, 0, 0, 0, 9]),
        ];
        let mut failed = n.clone();
        failed.header.state = NeighbourState::Failed;
        let ns = neighbours_of(&[
            RouteNetlinkMessage::NewNeighbour(n),
            RouteNetlinkMessage::NewNeighbour(failed),
        ]);
        assert_eq!(ns.len(), 2);
        assert_eq!(ns[0].addr, IpAddr::from([10, 0, 0, 9]));
        assert_eq!(ns[0].mac, Some([2, 0, 0, 0, 0, 9]));
        assert!(ns[0].usable);
        assert!(!ns[1].usable);
    }
}
