//! rvs's syscall boundary.
//!
//! Every netlink and bpf() system call the project makes goes through this
//! crate, and it is the only crate of the workspace with `unsafe` code (each
//! block with a `// SAFETY:` line); the others `forbid(unsafe_code)`. The
//! rest of rvs asks it for "add this address", "look this neighbour up",
//! "read this page of a map" and never sees a netlink header, a bpf command
//! number or a raw pointer.

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod bpf;
