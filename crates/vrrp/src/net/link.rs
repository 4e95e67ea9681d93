//! keepalived's `use_vmac`: a macvlan interface (`vrrp.VRID` by default)
//! on the instance's interface, carrying the virtual MAC
//! 00-00-5E-00-01-VRID (RFC 5798 §7.3), so the virtual addresses move
//! between routers with their MAC and neighbours' caches stay right
//! without waiting for gratuitous ARP. Built with `RTM_NEWLINK` /
//! `RTM_DELLINK` requests written here, as the address requests are.

use std::sync::atomic::Ordering;

use super::addr::{NetError, SEQ, request};
use super::iface;

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINK: u16 = 5;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_MACVLAN_MODE: u16 = 1;
/// Private: the macvlan talks to the wire only, not to its siblings.
const MACVLAN_MODE_PRIVATE: u32 = 1;
const IFF_UP: u32 = 1;
const NLA_F_NESTED: u16 = 0x8000;

/// One netlink attribute, padded to 4 bytes.
fn attr(out: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// `nlmsghdr` + `ifinfomsg` + attributes.
fn link_request(kind: u16, flags: u16, seq: u32, ifi_flags: u32, attrs: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(64 + attrs.len());
    msg.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, set below
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    // struct ifinfomsg: family, pad, type, index, flags, change
    msg.extend_from_slice(&[0, 0, 0, 0]);
    msg.extend_from_slice(&0i32.to_ne_bytes());
    msg.extend_from_slice(&ifi_flags.to_ne_bytes());
    msg.extend_from_slice(&ifi_flags.to_ne_bytes());
    msg.extend_from_slice(attrs);
    let len = msg.len() as u32;
    msg[..4].copy_from_slice(&len.to_ne_bytes());
    msg
}

fn name_attr(name: &str) -> Vec<u8> {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    n
}

/// Create macvlan `name` (private mode, up) on `base` with `mac`. One that
/// already exists is taken as is (a previous run's, or the operator's).
pub async fn add_vmac(base: &str, name: &str, mac: [u8; 6]) -> Result<(), NetError> {
    let link = iface::ifindex(base).map_err(|_| NetError::InterfaceNotFound {
        ifname: base.to_owned(),
    })?;
    if iface::ifindex(name).is_ok() {
        return Ok(());
    }
    let mut data = Vec::new();
    attr(
        &mut data,
        IFLA_MACVLAN_MODE,
        &MACVLAN_MODE_PRIVATE.to_ne_bytes(),
    );
    let mut info = Vec::new();
    attr(&mut info, IFLA_INFO_KIND, b"macvlan\0");
    attr(&mut info, IFLA_INFO_DATA | NLA_F_NESTED, &data);
    let mut attrs = Vec::new();
    attr(&mut attrs, IFLA_IFNAME, &name_attr(name));
    attr(&mut attrs, IFLA_LINK, &link.to_ne_bytes());
    attr(&mut attrs, IFLA_ADDRESS, &mac);
    attr(&mut attrs, IFLA_LINKINFO | NLA_F_NESTED, &info);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    let msg = link_request(RTM_NEWLINK, flags, seq, IFF_UP, &attrs);
    done(name, "RTM_NEWLINK", request(&msg, seq).await)
}

/// Delete link `name` (gone already is fine).
pub async fn del_link(name: &str) -> Result<(), NetError> {
    if iface::ifindex(name).is_err() {
        return Ok(());
    }
    let mut attrs = Vec::new();
    attr(&mut attrs, IFLA_IFNAME, &name_attr(name));
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let msg = link_request(RTM_DELLINK, NLM_F_REQUEST | NLM_F_ACK, seq, 0, &attrs);
    done(name, "RTM_DELLINK", request(&msg, seq).await)
}

fn done(name: &str, op: &'static str, r: std::io::Result<i32>) -> Result<(), NetError> {
    match r {
        Ok(0) => Ok(()),
        Ok(errno) => Err(NetError::Link {
            op,
            ifname: name.to_owned(),
            errno,
        }),
        Err(source) => Err(NetError::Io {
            ifname: name.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded_and_the_length_is_set() {
        let mut a = Vec::new();
        attr(&mut a, IFLA_IFNAME, &name_attr("vrrp.51"));
        // 4 + 8 bytes ("vrrp.51\0"), already aligned
        assert_eq!(a.len(), 12);
        let mut b = Vec::new();
        attr(&mut b, IFLA_ADDRESS, &[0, 0, 0x5e, 0, 1, 51]);
        assert_eq!(b.len(), 12, "4 + 6 padded to 12");
        assert_eq!(
            u16::from_ne_bytes([b[0], b[1]]),
            10,
            "the length excludes the padding"
        );
        let m = link_request(RTM_NEWLINK, NLM_F_REQUEST, 9, IFF_UP, &b);
        assert_eq!(m.len(), 16 + 16 + 12);
        assert_eq!(u32::from_ne_bytes([m[0], m[1], m[2], m[3]]), 44);
    }
}
