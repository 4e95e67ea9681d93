//! # rvs-vrrp
//!
//! The I/O half of rvs's VRRP: everything a VRRP instance does to the
//! machine, kept apart from the sans-IO state machine and the wire format.
//! * [`net::VrrpSocket`] — a raw IP protocol 112 socket on one interface
//!   (IPv4 224.0.0.18 or IPv6 ff02::12, TTL/hop limit 255, unicast peers too);
//! * [`net::add_address`] / [`net::del_address`] — virtual addresses over
//!   rtnetlink, idempotent;
//! * [`net::announce`] — gratuitous ARP / unsolicited neighbour advertisement
//!   after taking an address over;
//! * [`net::link_up`] — interface state for `track_interface`.
//!
//! Linux only: on other systems the crate is empty.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

#[cfg(target_os = "linux")]
pub mod net;
