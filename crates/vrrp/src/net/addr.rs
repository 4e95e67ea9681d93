//! Virtual addresses over rtnetlink (address add and delete),
//! asked of rvs-sys's tokio transport.

use std::io;
use std::net::IpAddr;

use rvs_sys::netlink::{AsyncNetlink, NetlinkError};

use super::iface;

/// Errors of the address and link operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The interface does not exist in this network namespace.
    #[error("interface {ifname:?} not found")]
    InterfaceNotFound {
        /// The interface asked for.
        ifname: String,
    },
    /// The prefix length is longer than the address (over 32 for IPv4,
    /// over 128 for IPv6).
    #[error("prefix length /{prefix} is invalid for {addr}")]
    BadPrefix {
        /// The address.
        addr: IpAddr,
        /// The prefix length given.
        prefix: u8,
    },
    /// The kernel refused the request.
    #[error("netlink {op} {addr}/{prefix} on {ifname}: {} (errno {errno})", io::Error::from_raw_os_error(*errno))]
    Netlink {
        /// `"add address"` or `"delete address"`.
        op: &'static str,
        /// The interface.
        ifname: String,
        /// The address.
        addr: IpAddr,
        /// Its prefix length.
        prefix: u8,
        /// The kernel's error number (positive, as in `errno`).
        errno: i32,
    },
    /// The kernel refused a link request (`use_vmac`'s macvlan).
    #[error("netlink {op} {ifname}: {} (errno {errno})", io::Error::from_raw_os_error(*errno))]
    Link {
        /// `"add macvlan"`, `"get link"` or `"delete link"`.
        op: &'static str,
        /// The link.
        ifname: String,
        /// The kernel's error number.
        errno: i32,
    },
    /// The netlink socket itself failed (create, send, receive, a
    /// malformed reply).
    #[error("netlink socket for {ifname}: {source}")]
    Io {
        /// The interface of the request.
        ifname: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl NetError {
    /// A link request's error (`Link` for the kernel's refusal).
    pub(super) fn link(ifname: &str, e: NetlinkError) -> Self {
        match e {
            NetlinkError::Kernel { op, errno } => NetError::Link {
                op,
                ifname: ifname.to_owned(),
                errno,
            },
            other => NetError::Io {
                ifname: ifname.to_owned(),
                source: other.into_io(),
            },
        }
    }
}

/// Add `addr/prefix` to `ifname` (prefix default /32 or /128, keepalived's
/// default for `virtual_ipaddress`). Idempotent: an address that is already
/// there is `Ok`. IPv6 addresses skip duplicate address detection.
pub async fn add_address(ifname: &str, addr: IpAddr, prefix: Option<u8>) -> Result<(), NetError> {
    change(ifname, addr, prefix, true).await
}

/// Remove `addr/prefix` from `ifname` (prefix default /32 or /128; it must
/// be the one the address was added with). Idempotent: an address that is
/// not there is `Ok`.
pub async fn del_address(ifname: &str, addr: IpAddr, prefix: Option<u8>) -> Result<(), NetError> {
    change(ifname, addr, prefix, false).await
}

async fn change(ifname: &str, addr: IpAddr, prefix: Option<u8>, add: bool) -> Result<(), NetError> {
    let max = if addr.is_ipv6() { 128 } else { 32 };
    let prefix = prefix.unwrap_or(max);
    if prefix > max {
        return Err(NetError::BadPrefix { addr, prefix });
    }
    let ifindex = iface::ifindex(ifname).map_err(|_| NetError::InterfaceNotFound {
        ifname: ifname.to_owned(),
    })?;
    let mut nl = AsyncNetlink::open().map_err(|e| NetError::Io {
        ifname: ifname.to_owned(),
        source: e.into_io(),
    })?;
    let r = if add {
        nl.add_address(ifindex, addr, prefix).await
    } else {
        nl.del_address(ifindex, addr, prefix).await
    };
    r.map(drop).map_err(|e| match e {
        NetlinkError::Kernel { op, errno } => NetError::Netlink {
            op,
            ifname: ifname.to_owned(),
            addr,
            prefix,
            errno,
        },
        NetlinkError::BadPrefix { addr, prefix } => NetError::BadPrefix { addr, prefix },
        other => NetError::Io {
            ifname: ifname.to_owned(),
            source: other.into_io(),
        },
    })
}
