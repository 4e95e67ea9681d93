//! # rvs-wire
//!
//! Layer 2 of rvs: wire formats as plain parsers and builders over byte
//! buffers. Nothing here performs I/O; callers hand in the bytes they have
//! read so far and get back either a decoded value, a request for more bytes,
//! or a precise error. Every parser is fuzzed and never panics on any input.
//!
//! Modules:
//! * [`proxy_protocol`] — HAProxy's PROXY protocol, versions 1 (text) and 2
//!   (binary), as carried in front of a TCP stream between a load balancer
//!   and a real server.
//! * [`vrrp`] — VRRP advertisements, versions 2 and 3 over IPv4 and IPv6,
//!   with both checksum forms keepalived speaks for v3 over IPv4.
//! * [`ipvs_sync`] — IPVS connection-sync datagrams (versions 0 and 1), as
//!   the kernel's sync daemon multicasts them between directors.
//! * [`icmp`] — ICMP / ICMPv6 error messages and the packet they quote,
//!   with every checksum they hold verified (what a NAT or FULLNAT rewrite
//!   of an error must keep right).
//! * [`toa`] — the TOA TCP option (kind 254) a FULLNAT director adds to the
//!   handshake to carry the client's address, as toa.ko and DPVS read it.
//! * [`checksum`] — the Internet checksum (RFC 1071) and the TCP/UDP
//!   pseudo-header, for the codecs and every frame builder.
//! * [`frame`] — Ethernet/IP/TCP/UDP/ICMP frames with every checksum right,
//!   for the data plane's tests, fuzz targets and benchmarks.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod checksum;
pub mod frame;
pub mod icmp;
pub mod ipvs_sync;
pub mod proxy_protocol;
pub mod toa;
pub mod vrrp;

#[cfg(test)]
mod test_util;
