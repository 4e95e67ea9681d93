//! The userspace proxy data plane: TCP and UDP load balancing through
//! sockets, like HAProxy `mode tcp` or nginx `stream`, with no privilege.
//!
//! Semantics are FULLNAT: the proxy terminates the client's connection on
//! the virtual address and opens its own to the real server, so the real
//! server sees the director's address. The client's address can travel in
//! a PROXY protocol header (v1 or v2, per service or per real server), and a
//! PROXY header from a trusted upstream balancer is honoured.
//!
//! The proxy owns no policy. Each accepted connection (or new UDP flow) asks
//! the director ([`rvs_core::ipvs::Ipvs::open`]) where to go, exactly as the
//! first packet of a flow would in the kernel's `ip_vs_in`; the socket's
//! life is reported back with `conn_event` (connected, half-closed, reset)
//! and `conn_traffic` (bytes and segments), and the entry is released with
//! `close` when the socket is gone. `-Lcn`, ActiveConn/InActConn and
//! `--stats` therefore describe the proxy's sockets.
//!
//! Layout: `plane` holds the [`ProxyPlane`] (the `DataPlane`
//! implementation, listeners, drain timers), `tcp` the accept loop and
//! per-connection task, `pool` the local address pool its connections to
//! real servers are bound from, `relay` the byte pump (splice(2) through a pipe per
//! direction, or a buffered copy), `udp` the datagram flows, `sock` the
//! socket options and system calls.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod plane;
mod pool;
mod quic;
mod relay;
mod sock;
mod tcp;
mod udp;

pub use plane::{AdoptError, ProxyConfig, ProxyPlane, ProxyStats};

#[cfg(test)]
mod tests;
