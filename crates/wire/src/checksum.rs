//! The Internet checksum (RFC 1071): the one's complement of the one's
//! complement sum of 16-bit big-endian words, as IPv4 headers, TCP, UDP,
//! ICMP, ICMPv6 and VRRP carry it.
//!
//! Sums are kept unfolded in a `u64` so that parts (a pseudo-header, a
//! header, a payload) add up with `+`: only the last part of a sum may have
//! an odd length (its last byte is padded with zero, as the RFC says of the
//! whole message). Written once here for the codecs, the frame builders of
//! [`crate::frame`] and every test, fuzz target and benchmark that makes or
//! checks a frame.

/// The one's complement sum of `b` (big-endian 16-bit words, an odd last
/// byte padded with zero), not yet folded.
pub fn sum(b: &[u8]) -> u64 {
    let mut words = b.chunks_exact(2);
    let mut s: u64 = (&mut words)
        .map(|w| u64::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    if let [last] = words.remainder() {
        s += u64::from(*last) << 8;
    }
    s
}

/// The sum of the TCP/UDP/ICMPv6 pseudo-header of `src`, `dst` (4 or 16
/// bytes each), `proto` and the upper-layer length `len`: RFC 793's IPv4
/// form (16-bit length) and RFC 8200 § 8.1's IPv6 form (32-bit length, the
/// next header last) hold the same words in one's complement arithmetic.
pub fn pseudo_sum(src: &[u8], dst: &[u8], proto: u8, len: usize) -> u64 {
    let len = len as u64;
    sum(src) + sum(dst) + u64::from(proto) + (len & 0xffff) + ((len >> 16) & 0xffff)
}

/// `s` folded to 16 bits with end-around carry (not complemented).
pub fn fold(mut s: u64) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    // The loop leaves s <= 0xffff.
    s as u16
}

/// The checksum field's value for a sum `s` taken with the field zero.
pub fn finish(s: u64) -> u16 {
    !fold(s)
}

/// Whether a sum `s` taken over the checksum field too verifies (folds to
/// 0xffff).
pub fn verifies(s: u64) -> bool {
    fold(s) == 0xffff
}

/// The checksum of `b` (with its checksum field zero: the value to write;
/// with the field filled: 0 when it verifies).
pub fn checksum(b: &[u8]) -> u16 {
    finish(sum(b))
}

/// The TCP / UDP / ICMPv6 checksum of the segment `seg` (all of it, from
/// its header on) between `src` and `dst` (4 or 16 bytes each) for
/// protocol `proto`: with the segment's checksum field zero, the value to
/// write (for UDP, a result of 0 is sent as 0xffff: [`udp_field`]); with
/// it filled, 0 when it verifies.
pub fn l4_checksum(src: &[u8], dst: &[u8], proto: u8, seg: &[u8]) -> u16 {
    finish(pseudo_sum(src, dst, proto, seg.len()) + sum(seg))
}

/// [`l4_checksum`] with the addresses taken from the IP header `ip` (an
/// IPv4 header of at least 20 bytes or an IPv6 header of 40; `None` for
/// anything else).
pub fn l4_checksum_under(ip: &[u8], proto: u8, seg: &[u8]) -> Option<u16> {
    let (src, dst) = match ip.first()? >> 4 {
        4 => (ip.get(12..16)?, ip.get(16..20)?),
        6 => (ip.get(8..24)?, ip.get(24..40)?),
        _ => return None,
    };
    Some(l4_checksum(src, dst, proto, seg))
}

/// The UDP checksum field for a computed checksum `c`: 0 means "no
/// checksum" in UDP (RFC 768), so a computed 0 is sent as 0xffff.
pub fn udp_field(c: u16) -> u16 {
    if c == 0 { 0xffff } else { c }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071 § 3's example: the words 0001 f203 f4f5 f6f7 sum to ddf2.
    #[test]
    fn rfc1071_example() {
        let b = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&b)), 0xddf2);
        assert_eq!(checksum(&b), !0xddf2);
    }

    #[test]
    fn an_odd_byte_is_padded_and_a_written_checksum_verifies() {
        assert_eq!(sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        let mut h = [
            0x45, 0, 0, 0x1c, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(verifies(sum(&h)));
        assert_eq!(checksum(&h), 0);
        h[8] = 63;
        assert!(!verifies(sum(&h)));
    }

    #[test]
    fn the_pseudo_header_sums_as_its_bytes_in_both_forms() {
        let (s4, d4) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let v4 = [&s4[..], &d4, &[0, 6], &300u16.to_be_bytes()].concat();
        assert_eq!(fold(pseudo_sum(&s4, &d4, 6, 300)), fold(sum(&v4)));
        let (s6, d6) = ([0xfd; 16], [0x20; 16]);
        let len = 70_000usize;
        let v6 = [&s6[..], &d6, &(len as u32).to_be_bytes(), &[0, 0, 0, 17]].concat();
        assert_eq!(fold(pseudo_sum(&s6, &d6, 17, len)), fold(sum(&v6)));
    }

    #[test]
    fn l4_checksum_under_reads_the_addresses_of_either_header() {
        let seg = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        let mut ip4 = [0u8; 20];
        ip4[0] = 0x45;
        ip4[12..20].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        assert_eq!(
            l4_checksum_under(&ip4, 17, &seg),
            Some(l4_checksum(&[10, 0, 0, 1], &[10, 0, 0, 2], 17, &seg))
        );
        let mut ip6 = [0u8; 40];
        ip6[0] = 0x60;
        ip6[8..24].copy_from_slice(&[1; 16]);
        ip6[24..40].copy_from_slice(&[2; 16]);
        assert_eq!(
            l4_checksum_under(&ip6, 6, &seg),
            Some(l4_checksum(&[1; 16], &[2; 16], 6, &seg))
        );
        assert_eq!(l4_checksum_under(&ip4[..19], 6, &seg), None);
        assert_eq!(l4_checksum_under(&[0x50; 40], 6, &seg), None);
        assert_eq!(udp_field(0), 0xffff);
        assert_eq!(udp_field(7), 7);
    }
}
