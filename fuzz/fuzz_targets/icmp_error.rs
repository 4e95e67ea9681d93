//! rvs-wire's ICMP / ICMPv6 error reader (`rvs_wire::icmp::parse`) on
//! arbitrary bytes: it never panics, and what it accepts is consistent:
//! the quoted protocol is TCP or UDP, the MTU only on a frag-needed /
//! packet-too-big error, both families the outer one's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvs_wire::icmp;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = icmp::parse(data) else {
        return;
    };
    assert!(m.proto == icmp::PROTO_TCP || m.proto == icmp::PROTO_UDP);
    let v6 = m.src.is_ipv6();
    assert_eq!(m.dst.is_ipv6(), v6);
    assert_eq!(m.quoted_src.is_ipv6(), v6);
    assert_eq!(m.quoted_dst.is_ipv6(), v6);
    let too_big = if v6 {
        m.icmp_type == 2
    } else {
        m.icmp_type == 3 && m.code == 4
    };
    assert_eq!(m.mtu.is_some(), too_big);
    assert_eq!(m.checksums.outer_ip.is_none(), v6);
});
