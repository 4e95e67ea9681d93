//! Interface facts read from the kernel over rvs-sys's netlink: index,
//! addresses, MAC, state. Netlink asks the caller's namespace, so it sees
//! the right interfaces even in a thread that entered another namespace
//! (unlike `/sys/class/net`, which is the namespace of the sysfs mount).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rvs_sys::netlink::{Netlink, NetlinkError};

/// The index of `ifname`; `NotFound` names the interface when it is missing.
pub(crate) fn ifindex(ifname: &str) -> io::Result<u32> {
    rvs_sys::iface::ifindex(ifname)
}

/// The addresses of `ifname` in the kernel's order (none when the
/// interface is missing).
fn addresses(ifname: &str) -> io::Result<Vec<IpAddr>> {
    let index = match ifindex(ifname) {
        Ok(i) => i,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(Netlink::open()
        .and_then(|mut nl| nl.addresses(index))
        .map_err(NetlinkError::into_io)?
        .into_iter()
        .map(|(a, _)| a)
        .collect())
}

/// The interface's first (primary) IPv4 address, as the kernel lists it.
pub fn primary_v4(ifname: &str) -> io::Result<Option<Ipv4Addr>> {
    Ok(addresses(ifname)?.into_iter().find_map(|a| match a {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    }))
}

/// The interface's first IPv6 link-local address (fe80::/10).
pub(crate) fn link_local_v6(ifname: &str) -> io::Result<Option<Ipv6Addr>> {
    Ok(addresses(ifname)?.into_iter().find_map(|a| match a {
        IpAddr::V6(a) if a.is_unicast_link_local() => Some(a),
        _ => None,
    }))
}

/// The interface's link as rtnetlink reports it (`None`: no such link).
fn link(ifname: &str) -> io::Result<Option<rvs_sys::netlink::Link>> {
    Netlink::open()
        .and_then(|mut nl| nl.link_by_name(ifname))
        .map_err(NetlinkError::into_io)
}

/// The interface's Ethernet address, or `NotFound` (missing interface or no
/// 6-byte link-layer address).
pub(crate) fn mac(ifname: &str) -> io::Result<[u8; 6]> {
    link(ifname)?.and_then(|l| l.mac).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("interface {ifname:?} has no Ethernet address"),
        )
    })
}

/// Whether `ifname` exists, is administratively up and operationally up
/// (`IFF_UP` and `IFF_RUNNING`: carrier present). A missing interface is
/// `Ok(false)`, as keepalived puts a `track_interface` instance in FAULT
/// when its interface goes away.
pub fn link_up(ifname: &str) -> io::Result<bool> {
    Ok(link(ifname)?.is_some_and(|l| l.up && l.running))
}
