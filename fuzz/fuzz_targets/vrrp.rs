//! The VRRP advertisement parser under arbitrary bytes, with arbitrary IPv4
//! or IPv6 source and destination addresses, and the IPv4 header check an
//! IPv4 raw socket's data goes through. Nothing panics; everything that
//! parses builds (in the checksum form parse reported) into bytes that parse
//! back to the same advert, and building those again gives the same bytes.
//!
//! Input layout: byte 0 chooses the family (bit 0: IPv6) and whether to fix
//! the checksum up before parsing (bits 1-2: no, message only, with the
//! pseudo-header), so the fuzzer reaches the field checks behind the
//! checksum; then the source and destination (2×4 or 2×16 bytes); the rest
//! is the VRRP message. When the fix-up is the right form for the version
//! and family, parse must not report a bad checksum.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use rvs_wire::vrrp::{self, Advert, ChecksumForm, VrrpError};

/// RFC 1071, written independently of the crate's own.
fn internet_checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u64 = 0;
    for part in parts {
        for (i, b) in part.iter().enumerate() {
            sum += if i % 2 == 0 {
                u64::from(*b) << 8
            } else {
                u64::from(*b)
            };
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn pseudo_header(src: IpAddr, dst: IpAddr, len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            p.extend_from_slice(&[0, vrrp::PROTO]);
            p.extend_from_slice(&(len as u16).to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            p.extend_from_slice(&(len as u32).to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, vrrp::PROTO]);
        }
        _ => unreachable!("one family"),
    }
    p
}

/// Writes a checksum into bytes 6-7 over the message proper the header
/// announces (if it fits), with or without the pseudo-header. Returns
/// whether that is the form parse must accept for this version/family.
fn fix_checksum(msg: &mut [u8], src: IpAddr, dst: IpAddr, with_pseudo: bool) -> bool {
    if msg.len() < 8 {
        return false;
    }
    let version = msg[0] >> 4;
    let ipv6 = src.is_ipv6();
    let len =
        8 + usize::from(msg[3]) * if ipv6 { 16 } else { 4 } + if version == 2 { 8 } else { 0 };
    if msg.len() < len {
        return false;
    }
    msg[6] = 0;
    msg[7] = 0;
    let pseudo = if with_pseudo {
        pseudo_header(src, dst, len)
    } else {
        Vec::new()
    };
    let c = internet_checksum(&[&pseudo, &msg[..len]]);
    msg[6..8].copy_from_slice(&c.to_be_bytes());
    match version {
        2 => !with_pseudo,
        3 => with_pseudo || !ipv6,
        _ => false,
    }
}

fn round_trip(ad: &Advert, form: ChecksumForm, src: IpAddr, dst: IpAddr) {
    let built = vrrp::build(ad, src, dst, form).expect("a parsed advert always builds");
    assert_eq!(built.len(), ad.message_len(src.is_ipv6()));
    let (again, form2) = vrrp::parse(&built, src, dst).expect("a built advert always parses");
    assert_eq!(&again, ad);
    assert_eq!(vrrp::build(&again, src, dst, form2).expect("builds"), built);
}

fuzz_target!(|data: &[u8]| {
    if let Ok((meta, payload)) = vrrp::parse_ipv4_packet(data) {
        let (src, dst) = (IpAddr::V4(meta.src), IpAddr::V4(meta.dst));
        if let Ok((ad, form)) = vrrp::parse(payload, src, dst) {
            round_trip(&ad, form, src, dst);
        }
    }
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let ipv6 = mode & 1 != 0;
    let addr_len = if ipv6 { 16 } else { 4 };
    if rest.len() < 2 * addr_len {
        return;
    }
    let (addrs, msg) = rest.split_at(2 * addr_len);
    let (src, dst) = if ipv6 {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&addrs[..16]);
        d.copy_from_slice(&addrs[16..]);
        (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)))
    } else {
        (
            IpAddr::V4(Ipv4Addr::new(addrs[0], addrs[1], addrs[2], addrs[3])),
            IpAddr::V4(Ipv4Addr::new(addrs[4], addrs[5], addrs[6], addrs[7])),
        )
    };
    let mut msg = msg.to_vec();
    let must_verify = match (mode >> 1) & 3 {
        1 => fix_checksum(&mut msg, src, dst, false),
        2 => fix_checksum(&mut msg, src, dst, true),
        _ => false,
    };
    match vrrp::parse(&msg, src, dst) {
        Ok((ad, form)) => round_trip(&ad, form, src, dst),
        Err(VrrpError::BadChecksum { .. }) if must_verify => {
            panic!("checksum fixed up in the right form still rejected")
        }
        Err(_) => {}
    }
    // The other family's view of the same bytes must not panic either.
    let _ = vrrp::parse(
        &msg,
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    );
});
