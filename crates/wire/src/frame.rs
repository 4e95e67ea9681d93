//! Frames for the tests, fuzz targets and benchmarks that feed a data
//! plane: Ethernet (with an optional 802.1Q tag) over IPv4 (with options)
//! or IPv6, carrying TCP (with options), UDP or ICMP / ICMPv6, with every
//! length and checksum right (checksums from [`crate::checksum`]).
//!
//! One builder instead of one per test file: a test states the fields it
//! cares about ([`Ip`], [`Tcp`]) and gets the bytes a kernel would accept.
//! The builders are for frames a caller designs, not for input: they panic
//! on a caller's mistake (see each `# Panics`).

use std::net::IpAddr;

use crate::checksum::{self, l4_checksum, udp_field};

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Ethertype (TPID) of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IPv6 next header of ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;

/// TCP header flags (RFC 9293 § 3.1).
pub mod tcp_flags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// The acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
}

/// An IP header's fields (the lengths, the protocol and the IPv4 checksum
/// are filled in by the builders).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ip {
    /// Source address; its family is the packet's.
    pub src: IpAddr,
    /// Destination address, of the same family.
    pub dst: IpAddr,
    /// TTL / hop limit (default 64).
    pub ttl: u8,
    /// Type of service / traffic class (default 0).
    pub tos: u8,
    /// IPv4 identification (default 0).
    pub id: u16,
    /// IPv4 don't-fragment flag (default set).
    pub df: bool,
    /// IPv6 flow label, 20 bits (default 0).
    pub flow_label: u32,
    /// IPv4 options, a multiple of 4 bytes, at most 40 (default none).
    pub options: Vec<u8>,
}

impl Ip {
    /// `src` to `dst` with the defaults: TTL 64, DF, everything else zero.
    pub fn new(src: IpAddr, dst: IpAddr) -> Self {
        Ip {
            src,
            dst,
            ttl: 64,
            tos: 0,
            id: 0,
            df: true,
            flow_label: 0,
            options: Vec::new(),
        }
    }

    /// The header for `proto` with `l4_len` bytes after it (IPv4: with
    /// its checksum).
    ///
    /// # Panics
    /// When the addresses are of two families, or the IPv4 options are not
    /// a multiple of 4 bytes up to 40.
    pub fn header(&self, proto: u8, l4_len: usize) -> Vec<u8> {
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let opts = self.options.len();
                assert!(
                    opts.is_multiple_of(4) && opts <= 40,
                    "IPv4 options: {opts} bytes"
                );
                let ihl = 20 + opts;
                let mut h = Vec::with_capacity(ihl);
                h.extend_from_slice(&[0x40 | (ihl / 4) as u8, self.tos]);
                h.extend_from_slice(&((ihl + l4_len) as u16).to_be_bytes());
                h.extend_from_slice(&self.id.to_be_bytes());
                h.extend_from_slice(&[if self.df { 0x40 } else { 0 }, 0, self.ttl, proto, 0, 0]);
                h.extend_from_slice(&s.octets());
                h.extend_from_slice(&d.octets());
                h.extend_from_slice(&self.options);
                let c = checksum::checksum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                h
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let first = 0x6000_0000 | u32::from(self.tos) << 20 | (self.flow_label & 0xf_ffff);
                let mut h = Vec::with_capacity(40);
                h.extend_from_slice(&first.to_be_bytes());
                h.extend_from_slice(&(l4_len as u16).to_be_bytes());
                h.extend_from_slice(&[proto, self.ttl]);
                h.extend_from_slice(&s.octets());
                h.extend_from_slice(&d.octets());
                h
            }
            (s, d) => panic!("mixed address families: {s} -> {d}"),
        }
    }

    /// The IP packet of `proto` carrying `l4` as it is.
    pub fn packet(&self, proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut p = self.header(proto, l4.len());
        p.extend_from_slice(l4);
        p
    }

    /// The IP packet of the TCP segment `tcp` + `payload`, its checksum
    /// right.
    pub fn tcp(&self, tcp: &Tcp, payload: &[u8]) -> Vec<u8> {
        let mut seg = tcp.header();
        seg.extend_from_slice(payload);
        let c = self.l4_checksum(PROTO_TCP, &seg);
        seg[16..18].copy_from_slice(&c.to_be_bytes());
        self.packet(PROTO_TCP, &seg)
    }

    /// The IP packet of the UDP datagram `sport -> dport` with `payload`,
    /// its checksum right.
    pub fn udp(&self, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut d = Vec::with_capacity(8 + payload.len());
        d.extend_from_slice(&sport.to_be_bytes());
        d.extend_from_slice(&dport.to_be_bytes());
        d.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        d.extend_from_slice(&[0, 0]);
        d.extend_from_slice(payload);
        let c = udp_field(self.l4_checksum(PROTO_UDP, &d));
        d[6..8].copy_from_slice(&c.to_be_bytes());
        self.packet(PROTO_UDP, &d)
    }

    /// The IP packet of an ICMP message (ICMPv6 for an IPv6 header) of
    /// `kind` and `code`, the 4 bytes `rest` after the checksum (unused,
    /// or the MTU) and `body` (for an error, the quoted packet), its
    /// checksum right (ICMPv6: over the pseudo-header).
    pub fn icmp(&self, kind: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind, code, 0, 0];
        m.extend_from_slice(&rest);
        m.extend_from_slice(body);
        let (proto, c) = match self.src {
            IpAddr::V4(_) => (PROTO_ICMP, checksum::checksum(&m)),
            IpAddr::V6(_) => (PROTO_ICMPV6, self.l4_checksum(PROTO_ICMPV6, &m)),
        };
        m[2..4].copy_from_slice(&c.to_be_bytes());
        self.packet(proto, &m)
    }

    fn l4_checksum(&self, proto: u8, seg: &[u8]) -> u16 {
        l4_checksum(&octets(self.src), &octets(self.dst), proto, seg)
    }
}

/// A TCP header's fields (the data offset and the checksum are filled in
/// by [`Ip::tcp`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tcp {
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Sequence number (default 0).
    pub seq: u32,
    /// Acknowledgment number (default 0).
    pub ack: u32,
    /// Flags ([`tcp_flags`]).
    pub flags: u8,
    /// Window (default 65535).
    pub window: u16,
    /// Options, a multiple of 4 bytes up to 40 (default none).
    pub options: Vec<u8>,
}

impl Tcp {
    /// `sport -> dport` with `flags`, sequence and acknowledgment 0,
    /// window 65535, no options.
    pub fn new(sport: u16, dport: u16, flags: u8) -> Self {
        Tcp {
            sport,
            dport,
            seq: 0,
            ack: 0,
            flags,
            window: 0xffff,
            options: Vec::new(),
        }
    }

    /// The header with a zero checksum.
    ///
    /// # Panics
    /// When the options are not a multiple of 4 bytes up to 40.
    pub fn header(&self) -> Vec<u8> {
        let opts = self.options.len();
        assert!(
            opts.is_multiple_of(4) && opts <= 40,
            "TCP options: {opts} bytes"
        );
        let mut h = Vec::with_capacity(20 + opts);
        h.extend_from_slice(&self.sport.to_be_bytes());
        h.extend_from_slice(&self.dport.to_be_bytes());
        h.extend_from_slice(&self.seq.to_be_bytes());
        h.extend_from_slice(&self.ack.to_be_bytes());
        h.extend_from_slice(&[(((20 + opts) / 4) as u8) << 4, self.flags]);
        h.extend_from_slice(&self.window.to_be_bytes());
        h.extend_from_slice(&[0, 0, 0, 0]);
        h.extend_from_slice(&self.options);
        h
    }
}

/// The Ethernet frame `src -> dst` of the IP packet `packet` (the
/// ethertype from its version: IPv6 for 6, else IPv4), behind an 802.1Q
/// tag with VLAN ID `vlan` when given.
pub fn ethernet(dst: [u8; 6], src: [u8; 6], vlan: Option<u16>, packet: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(18 + packet.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(id) = vlan {
        f.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        f.extend_from_slice(&(id & 0xfff).to_be_bytes());
    }
    let ethertype = match packet.first() {
        Some(b) if b >> 4 == 6 => ETHERTYPE_IPV6,
        _ => ETHERTYPE_IPV4,
    };
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(packet);
    f
}

/// The bytes of an address (4 or 16).
pub fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::{checksum, l4_checksum_under};
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ips(v6: bool) -> Ip {
        if v6 {
            Ip::new(
                Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into(),
                Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).into(),
            )
        } else {
            Ip::new(
                Ipv4Addr::new(10, 0, 0, 1).into(),
                Ipv4Addr::new(10, 0, 0, 2).into(),
            )
        }
    }

    #[test]
    fn tcp_and_udp_checksums_verify_in_both_families() {
        for v6 in [false, true] {
            let mut ip = ips(v6);
            if !v6 {
                ip.options = vec![1, 1, 1, 0];
            }
            let hl = if v6 { 40 } else { 24 };
            let mut tcp = Tcp::new(40000, 80, tcp_flags::SYN);
            tcp.options = vec![2, 4, 0x05, 0xb4];
            let p = ip.tcp(&tcp, b"odd");
            assert_eq!(p.len(), hl + 24 + 3);
            assert_eq!(p[hl + 12] >> 4, 6, "data offset");
            assert_eq!(l4_checksum_under(&p, PROTO_TCP, &p[hl..]), Some(0));
            if !v6 {
                assert_eq!(checksum(&p[..hl]), 0, "IPv4 header checksum");
                assert_eq!(u16::from_be_bytes([p[2], p[3]]) as usize, p.len());
            } else {
                assert_eq!(u16::from_be_bytes([p[4], p[5]]) as usize, p.len() - 40);
            }
            let u = ip.udp(53, 5353, b"query");
            assert_eq!(l4_checksum_under(&u, PROTO_UDP, &u[hl..]), Some(0));
        }
    }

    #[test]
    fn icmp_errors_quoting_built_packets_parse_with_every_checksum_valid() {
        for v6 in [false, true] {
            let ip = ips(v6);
            let back = Ip::new(ip.dst, ip.src);
            for quoted in [
                ip.tcp(&Tcp::new(1, 2, tcp_flags::ACK), b"data"),
                ip.udp(3, 4, b"datagram"),
            ] {
                let (kind, code) = if v6 { (1, 4) } else { (3, 3) };
                let m = back.icmp(kind, code, [0; 4], &quoted);
                let parsed = crate::icmp::parse(&m).expect("parses");
                assert!(parsed.checksums.all_valid(), "{:?}", parsed.checksums);
            }
        }
    }

    #[test]
    fn ethernet_takes_the_ethertype_from_the_packet_and_tags_it() {
        let p6 = ips(true).udp(1, 2, b"");
        let f = ethernet([2; 6], [3; 6], None, &p6);
        assert_eq!(f[12..14], [0x86, 0xdd]);
        assert_eq!(f[14..], p6[..]);
        let p4 = ips(false).udp(1, 2, b"");
        let f = ethernet([2; 6], [3; 6], Some(42), &p4);
        assert_eq!(f[..12], [[2; 6], [3; 6]].concat()[..]);
        assert_eq!(f[12..18], [0x81, 0x00, 0, 42, 0x08, 0x00]);
    }

    #[test]
    #[should_panic(expected = "mixed address families")]
    fn mixed_families_are_refused() {
        let ip = Ip::new(Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into());
        ip.header(PROTO_UDP, 0);
    }
}
