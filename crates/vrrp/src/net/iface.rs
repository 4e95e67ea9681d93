//! Interface facts read from the kernel: index, addresses, MAC, state
//! (index, MAC and state through rvs-sys).
//!
//! `getifaddrs(3)` asks rtnetlink in the caller's namespace, so it sees the
//! right interfaces even in a thread that entered another namespace (unlike
//! `/sys/class/net`, which is the namespace of the sysfs mount).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use nix::ifaddrs::getifaddrs;
use rvs_sys::netlink::{Netlink, NetlinkError};

/// The index of `ifname`; `NotFound` names the interface when it is missing.
pub(crate) fn ifindex(ifname: &str) -> io::Result<u32> {
    rvs_sys::iface::ifindex(ifname)
}

/// The interface's first (primary) IPv4 address, as the kernel lists it.
pub fn primary_v4(ifname: &str) -> io::Result<Option<Ipv4Addr>> {
    Ok(getifaddrs()?
        .filter(|a| a.interface_name == ifname)
        .find_map(|a| a.address.and_then(|s| s.as_sockaddr_in().map(|s| s.ip()))))
}

/// The interface's first IPv6 link-local address (fe80::/10).
pub(crate) fn link_local_v6(ifname: &str) -> io::Result<Option<Ipv6Addr>> {
    Ok(getifaddrs()?
        .filter(|a| a.interface_name == ifname)
        .filter_map(|a| a.address.and_then(|s| s.as_sockaddr_in6().map(|s| s.ip())))
        .find(Ipv6Addr::is_unicast_link_local))
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
