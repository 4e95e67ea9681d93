//! Virtual addresses over rtnetlink (`RTM_NEWADDR` / `RTM_DELADDR`).
//!
//! The requests are a few dozen bytes each, built here rather than through
//! the rtnetlink crate family (not in this workspace's dependency set); the
//! socket is non-blocking and awaited on tokio.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, send,
    socket,
};
use tokio::io::unix::AsyncFd;

use super::iface;

const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
/// `IFA_F_NODAD`: an IPv6 virtual address is usable at once (a VRRP
/// master owns it by protocol; duplicate address detection would keep it
/// tentative for a second and drop traffic), as keepalived adds them.
const IFA_F_NODAD: u8 = 0x02;

pub(super) static SEQ: AtomicU32 = AtomicU32::new(1);

/// Errors of the address operations.
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
        /// `RTM_NEWADDR` or `RTM_DELADDR`.
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
        /// `RTM_NEWLINK` or `RTM_DELLINK`.
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

/// Add `addr/prefix` to `ifname` (prefix default /32 or /128, keepalived's
/// default for `virtual_ipaddress`). Idempotent: an address that is already
/// there is `Ok`. IPv6 addresses skip duplicate address detection.
pub async fn add_address(ifname: &str, addr: IpAddr, prefix: Option<u8>) -> Result<(), NetError> {
    match change(ifname, addr, prefix, true).await {
        Err(NetError::Netlink { errno, .. }) if errno == libc::EEXIST => Ok(()),
        other => other,
    }
}

/// Remove `addr/prefix` from `ifname` (prefix default /32 or /128; it must
/// be the one the address was added with). Idempotent: an address that is
/// not there is `Ok`.
pub async fn del_address(ifname: &str, addr: IpAddr, prefix: Option<u8>) -> Result<(), NetError> {
    match change(ifname, addr, prefix, false).await {
        Err(NetError::Netlink { errno, .. }) if errno == libc::EADDRNOTAVAIL => Ok(()),
        other => other,
    }
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
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let msg = address_request(add, seq, ifindex, addr, prefix);
    let io_err = |source: io::Error| NetError::Io {
        ifname: ifname.to_owned(),
        source,
    };
    match request(&msg, seq).await.map_err(io_err)? {
        0 => Ok(()),
        errno => Err(NetError::Netlink {
            op: if add { "RTM_NEWADDR" } else { "RTM_DELADDR" },
            ifname: ifname.to_owned(),
            addr,
            prefix,
            errno,
        }),
    }
}

/// `nlmsghdr` + `ifaddrmsg` + `IFA_LOCAL` (IPv4) + `IFA_ADDRESS`.
fn address_request(add: bool, seq: u32, ifindex: u32, addr: IpAddr, prefix: u8) -> Vec<u8> {
    let (family, bytes, flags): (u8, Vec<u8>, u8) = match addr {
        IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec(), 0),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec(), IFA_F_NODAD),
    };
    let (kind, nl_flags) = if add {
        (
            RTM_NEWADDR,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
    } else {
        (RTM_DELADDR, NLM_F_REQUEST | NLM_F_ACK)
    };
    let mut msg = Vec::with_capacity(64);
    msg.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, set below
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&nl_flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel
    // struct ifaddrmsg: family, prefixlen, flags, scope (universe), index
    msg.extend_from_slice(&[family, prefix, flags, 0]);
    msg.extend_from_slice(&ifindex.to_ne_bytes());
    let mut attr = |kind: u16| {
        let len = 4 + bytes.len() as u16; // 8 or 20: already 4-aligned
        msg.extend_from_slice(&len.to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&bytes);
    };
    if addr.is_ipv4() {
        attr(IFA_LOCAL);
    }
    attr(IFA_ADDRESS);
    let len = msg.len() as u32;
    msg[..4].copy_from_slice(&len.to_ne_bytes());
    msg
}

/// Send one request and wait for its acknowledgement: the kernel's error
/// number (0 = done).
pub(super) async fn request(msg: &[u8], seq: u32) -> io::Result<i32> {
    let fd: OwnedFd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        SockProtocol::NetlinkRoute,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    // SAFETY: the `OwnedFd` owns an open descriptor that it only closes
    // when dropped, which happens inside the `AsyncFd`'s drop; it always
    // returns that same descriptor.
    let fd = unsafe { AsyncFd::register(fd) }?;
    loop {
        let mut guard = fd.writable().await?;
        match guard.try_io(|fd| Ok(send(fd.as_raw_fd(), msg, MsgFlags::empty())?)) {
            Ok(sent) => {
                if sent? != msg.len() {
                    return Err(io::Error::other("short netlink send"));
                }
                break;
            }
            Err(_would_block) => continue,
        }
    }
    let mut buf = vec![0u8; 8192];
    loop {
        let mut guard = fd.readable().await?;
        let n = match guard.try_io(|fd| Ok(recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?)) {
            Ok(n) => n?,
            Err(_would_block) => continue,
        };
        if let Some(errno) = find_ack(&buf[..n], seq)? {
            return Ok(errno);
        }
    }
}

/// The error number of the `NLMSG_ERROR` answering `seq` in one datagram,
/// if it holds one.
fn find_ack(mut buf: &[u8], seq: u32) -> io::Result<Option<i32>> {
    let u32_at = |b: &[u8], at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    while buf.len() >= 16 {
        let len = u32_at(buf, 0) as usize;
        if len < 16 || len > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("malformed netlink message (length {len})"),
            ));
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if kind == NLMSG_ERROR && u32_at(buf, 8) == seq {
            if len < 20 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "short netlink error message",
                ));
            }
            let err = u32_at(buf, 16) as i32;
            return Ok(Some(-err));
        }
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_request_layout() {
        let m = address_request(true, 7, 3, IpAddr::from([10, 0, 0, 100]), 32);
        assert_eq!(m.len(), 16 + 8 + 8 + 8);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 40);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), RTM_NEWADDR);
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]), 0x605);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 7);
        assert_eq!(&m[16..20], &[libc::AF_INET as u8, 32, 0, 0]);
        assert_eq!(u32::from_ne_bytes(m[20..24].try_into().unwrap()), 3);
        assert_eq!(u16::from_ne_bytes([m[26], m[27]]), IFA_LOCAL);
        assert_eq!(&m[28..32], &[10, 0, 0, 100]);
        assert_eq!(u16::from_ne_bytes([m[34], m[35]]), IFA_ADDRESS);
        assert_eq!(&m[36..40], &[10, 0, 0, 100]);
    }

    #[test]
    fn ipv6_request_layout() {
        let a: IpAddr = "fd00::100".parse().unwrap();
        let m = address_request(false, 9, 4, a, 64);
        assert_eq!(m.len(), 16 + 8 + 20);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), RTM_DELADDR);
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]), 0x5);
        assert_eq!(&m[16..20], &[libc::AF_INET6 as u8, 64, IFA_F_NODAD, 0]);
        assert_eq!(u16::from_ne_bytes([m[24], m[25]]), 20);
        assert_eq!(
            &m[28..44],
            &"fd00::100".parse::<std::net::Ipv6Addr>().unwrap().octets()
        );
    }

    #[test]
    fn ack_is_found_by_sequence() {
        let mut buf = Vec::new();
        for (seq, err) in [(1u32, 0i32), (2, -libc::EEXIST)] {
            buf.extend_from_slice(&36u32.to_ne_bytes());
            buf.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            buf.extend_from_slice(&0u16.to_ne_bytes());
            buf.extend_from_slice(&seq.to_ne_bytes());
            buf.extend_from_slice(&0u32.to_ne_bytes());
            buf.extend_from_slice(&err.to_ne_bytes());
            buf.extend_from_slice(&[0; 16]);
        }
        assert_eq!(find_ack(&buf, 2).unwrap(), Some(libc::EEXIST));
        assert_eq!(find_ack(&buf, 1).unwrap(), Some(0));
        assert_eq!(find_ack(&buf, 3).unwrap(), None);
        assert!(find_ack(&buf[..20], 3).is_err());
    }
}
