//! # rvs-core
//!
//! The sans-IO heart of rvs (Rust Virtual Server): the Linux Virtual Server
//! model — virtual services, real servers, every IPVS scheduler plus Maglev,
//! the connection table with the IPVS TCP/UDP/SCTP state machines, persistence
//! templates and traffic statistics — as plain data and pure functions.
//!
//! Nothing here performs I/O or reads a clock: time is an [`time::Instant`]
//! argument chosen by the caller. Data planes (the userspace proxy, XDP) and
//! the control plane drive this crate; tests drive it with a virtual clock.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod conn;
pub mod dest;
pub mod model;
pub mod sched;
pub mod state;
pub mod stats;
pub mod time;
