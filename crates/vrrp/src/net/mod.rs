//! VRRP network I/O on Linux: raw VRRP sockets, virtual addresses,
//! announcements and link state.
//!
//! Everything here acts on the network namespace of the calling thread at
//! the time of the call (sockets keep the namespace they were opened in).
//! Async pieces run on tokio (the current-thread runtime rvsd uses is
//! enough); [`VrrpSocket::open`] must be called inside a runtime because it
//! registers the socket with tokio's reactor.

mod addr;
mod announce;
mod iface;
mod link;
mod socket;

pub use addr::{NetError, add_address, del_address};
pub use announce::announce;
pub use iface::{link_up, primary_v4};
pub use link::{add_vmac, del_link};
pub use socket::{Received, VRRP_PROTO, VrrpSocket};
