//! Interface facts read from the kernel: index, addresses, MAC, state.
//!
//! `getifaddrs(3)` asks rtnetlink in the caller's namespace, so it sees the
//! right interfaces even in a thread that entered another namespace (unlike
//! `/sys/class/net`, which is the namespace of the sysfs mount).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use nix::ifaddrs::getifaddrs;
use nix::net::if_::{InterfaceFlags, if_nametoindex};

/// The index of `ifname`; `NotFound` names the interface when it is missing.
pub(crate) fn ifindex(ifname: &str) -> io::Result<u32> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name {ifname:?}"),
        ));
    }
    if_nametoindex(ifname).map_err(|e| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("interface {ifname:?}: {}", io::Error::from(e)),
        )
    })
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

/// The interface's Ethernet address, or `NotFound` (missing interface or no
/// 6-byte link-layer address).
pub(crate) fn mac(ifname: &str) -> io::Result<[u8; 6]> {
    getifaddrs()?
        .filter(|a| a.interface_name == ifname)
        .find_map(|a| {
            a.address
                .and_then(|s| s.as_link_addr().and_then(|l| l.addr()))
        })
        .ok_or_else(|| {
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
    let want = InterfaceFlags::IFF_UP | InterfaceFlags::IFF_RUNNING;
    Ok(getifaddrs()?
        .find(|a| a.interface_name == ifname)
        .is_some_and(|a| a.flags.contains(want)))
}
