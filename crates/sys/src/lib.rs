//! rvs's syscall boundary.
//!
//! Every netlink and bpf() system call the project makes goes through this
//! crate, and it is the only crate of the workspace with `unsafe` code (each
//! block with a `// SAFETY:` line); the others `forbid(unsafe_code)`. The
//! rest of rvs asks it for "add this address", "look this neighbour up",
//! "read this page of a map" and never sees a netlink header, a bpf command
//! number or a raw pointer.
//!
//! - [`netlink`]: rtnetlink over `netlink-packet-route` (addresses, links,
//!   macvlans, routes, neighbours, the persistent XDP attach), blocking and
//!   on tokio;
//! - [`iface`]: interface names and indexes;
//! - [`sock`]: socket options and sends the socket crates do not wrap;
//! - [`sockdiag`]: sock_diag: connected UDP sockets listed and destroyed;
//! - [`sched`]: CPU affinity and real-time scheduling;
//! - [`netns`]: entering a named network namespace (`net_namespace`);
//! - [`bpf`]: BPF objects, programs and maps (aya inside, none of its types
//!   outside) and the bpf(2) commands aya 0.14 does not make.

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod bpf;
pub mod iface;
pub mod netlink;
pub mod netns;
pub mod sched;
pub mod sock;
pub mod sockdiag;
