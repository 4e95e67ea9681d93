//! The wire benchmark's reference balancer (`bpf/ref_lb.c`,
//! [`Object::RefLb`](crate::Object::RefLb)): its map layouts and setters.
//! Benchmarks and their tests only (feature `bench`): rvsd never loads it.

use std::net::IpAddr;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::bpf::map_err;
use crate::maps::{PROTO_TCP, PROTO_UDP, addr16};
use crate::{Loaded, XdpError};

/// Real servers behind every VIP (`REF_REALS`).
pub const REALS: u32 = 3;

/// `ref_vips` key (`struct ref_vip`): address (IPv4 in the first four
/// bytes), port, protocol, network order.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
struct RefVip {
    addr: [u8; 16],
    port: u16,
    proto: u8,
    pad: u8,
}

/// `ref_reals` value (`struct ref_real`): the real server's MAC.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
struct RefReal {
    mac: [u8; 6],
    pad: [u8; 2],
}

/// A service of the reference program: `vip:port` (host-order port), TCP
/// (`udp` false) or UDP. Its packets are balanced; all others passed.
pub fn set_vip(lb: &mut Loaded, vip: IpAddr, port: u16, udp: bool) -> Result<(), XdpError> {
    let key = RefVip {
        addr: addr16(vip),
        port: port.to_be(),
        proto: if udp { PROTO_UDP } else { PROTO_TCP },
        pad: 0,
    };
    lb.hash::<RefVip, u32>("ref_vips")?
        .insert(key, 1, 0)
        .map_err(map_err("ref_vips"))
}

/// Real server `index` (< [`REALS`]) has the MAC `mac`.
pub fn set_real(lb: &mut Loaded, index: u32, mac: [u8; 6]) -> Result<(), XdpError> {
    let real = RefReal { mac, pad: [0; 2] };
    lb.array::<RefReal>("ref_reals")?
        .set(index, real, 0)
        .map_err(map_err("ref_reals"))
}
