//! Telling the segment that a virtual address moved here: gratuitous ARP
//! (IPv4) and unsolicited neighbour advertisement (IPv6), sent with the
//! interface's own MAC (keepalived without `use_vmac`).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV6};
use std::os::fd::AsFd;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::iface;

const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IP: u16 = 0x0800;
const ARPHRD_ETHER: u16 = 1;
const ARPOP_REQUEST: u16 = 1;
const ND_NEIGHBOR_ADVERT: u8 = 136;
/// NA flags word: Override (RFC 4861 §4.4), so receivers replace a cached
/// link-layer address with ours.
const ND_NA_FLAG_OVERRIDE: u32 = 0x2000_0000;
/// NA option: target link-layer address (RFC 4861 §4.6.1).
const ND_OPT_TARGET_LINKADDR: u8 = 2;

/// Announce that `addr` now lives on `ifname`. IPv4: one gratuitous ARP
/// request (broadcast, sender = target = `addr`, sender MAC = the
/// interface's MAC) over an AF_PACKET socket. IPv6: one unsolicited
/// neighbour advertisement to ff02::1 (override flag, target link-layer
/// address option, hop limit 255) over a raw ICMPv6 socket, which the
/// kernel checksums. Repeats (`garp_master_repeat`) are the caller's.
pub fn announce(ifname: &str, addr: IpAddr) -> io::Result<()> {
    let ifindex = iface::ifindex(ifname)?;
    let mac = iface::mac(ifname)?;
    let ctx = |what: &str, e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("announce {addr} on {ifname}: {what}: {e}"),
        )
    };
    match addr {
        IpAddr::V4(a) => send_garp(ifindex, mac, a).map_err(|e| ctx("gratuitous ARP", e)),
        IpAddr::V6(a) => send_na(ifname, ifindex, mac, a).map_err(|e| ctx("neighbour advert", e)),
    }
}

/// The 42-byte Ethernet frame of a gratuitous ARP request for `addr`.
fn garp_frame(mac: [u8; 6], addr: Ipv4Addr) -> [u8; 42] {
    let mut f = [0u8; 42];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&ETH_P_ARP.to_be_bytes());
    f[14..16].copy_from_slice(&ARPHRD_ETHER.to_be_bytes());
    f[16..18].copy_from_slice(&ETH_P_IP.to_be_bytes());
    f[18] = 6; // hardware address length
    f[19] = 4; // protocol address length
    f[20..22].copy_from_slice(&ARPOP_REQUEST.to_be_bytes());
    f[22..28].copy_from_slice(&mac); // sender MAC
    f[28..32].copy_from_slice(&addr.octets()); // sender IP
    // target MAC stays zero (RFC 5227 §2.3 announcement)
    f[38..42].copy_from_slice(&addr.octets()); // target IP = sender IP
    f
}

fn send_garp(ifindex: u32, mac: [u8; 6], addr: Ipv4Addr) -> io::Result<()> {
    // Protocol 0: a send-only packet socket (it receives nothing).
    let sock = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(0)))?;
    let frame = garp_frame(mac, addr);
    let sent = rvs_sys::sock::send_frame(sock.as_fd(), ifindex, ETH_P_ARP, [0xff; 6], &frame)?;
    if sent != frame.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short ARP send"));
    }
    Ok(())
}

/// The ICMPv6 neighbour advertisement for `addr` (checksum left zero: the
/// kernel fills it on raw ICMPv6 sockets).
fn na_message(mac: [u8; 6], addr: Ipv6Addr) -> [u8; 32] {
    let mut m = [0u8; 32];
    m[0] = ND_NEIGHBOR_ADVERT;
    m[4..8].copy_from_slice(&ND_NA_FLAG_OVERRIDE.to_be_bytes());
    m[8..24].copy_from_slice(&addr.octets());
    m[24] = ND_OPT_TARGET_LINKADDR;
    m[25] = 1; // length in units of 8 bytes
    m[26..32].copy_from_slice(&mac);
    m
}

fn send_na(ifname: &str, ifindex: u32, mac: [u8; 6], addr: Ipv6Addr) -> io::Result<()> {
    let sock = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))?;
    sock.bind_device(Some(ifname.as_bytes()))?;
    sock.set_multicast_hops_v6(255)?;
    sock.set_multicast_if_v6(ifindex)?;
    sock.set_multicast_loop_v6(false)?;
    let msg = na_message(mac, addr);
    let to = SocketAddrV6::new(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1), 0, 0, ifindex);
    let sent = sock.send_to(&msg, &SockAddr::from(to))?;
    if sent != msg.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short NA send"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garp_layout() {
        let mac = [2, 0, 0, 0, 0, 0xa];
        let f = garp_frame(mac, Ipv4Addr::new(10, 0, 0, 100));
        assert_eq!(&f[0..6], &[0xff; 6]);
        assert_eq!(&f[6..12], &mac);
        assert_eq!(&f[12..22], &[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        assert_eq!(&f[22..28], &mac);
        assert_eq!(&f[28..32], &[10, 0, 0, 100]);
        assert_eq!(&f[32..38], &[0; 6]);
        assert_eq!(&f[38..42], &[10, 0, 0, 100]);
    }

    #[test]
    fn na_layout() {
        let mac = [2, 0, 0, 0, 0, 0xb];
        let a: Ipv6Addr = "fd00::100".parse().unwrap();
        let m = na_message(mac, a);
        assert_eq!(&m[0..8], &[136, 0, 0, 0, 0x20, 0, 0, 0]);
        assert_eq!(&m[8..24], &a.octets());
        assert_eq!(&m[24..32], &[2, 1, 2, 0, 0, 0, 0, 0xb]);
    }
}
