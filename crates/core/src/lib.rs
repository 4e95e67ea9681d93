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
//!
//! Layout, one concern per module:
//! * [`model`] — what an operator configures (services, real servers, options);
//! * [`dest`] — a real server's runtime counters and flags;
//! * [`sched`] — the schedulers, one file each behind one trait;
//! * [`state`] — the TCP/UDP/SCTP state machines and timeouts;
//! * [`conn`] — the connection table with its timer wheel;
//! * [`pe_sip`] — the SIP persistence engine;
//! * [`stats`] — counters and the rate estimator;
//! * [`ipvs`] — the director tying them together: control operations and the
//!   packet path with persistence.
//! * [`sync`] — what a connection-sync daemon is configured with;
//! * [`vrrp`] — the VRRP election of one instance (keepalived's
//!   `vrrp_instance`).
//!
//! Test and benchmark scaffolding is behind features that no production
//! build enables: `audit` (`Ipvs::audit`, the consistency check tests run
//! after every step), `fuzzing` (the `fuzzing` script interpreter shared by
//! the fuzz target and a property test; implies `audit`) and `bench`
//! (`sched::mh_reference_table`, the baseline of the `maglev` bench).
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod conn;
pub mod dest;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod ipvs;
pub mod model;
pub mod pe_sip;
pub mod sched;
pub mod state;
pub mod stats;
pub mod sync;
pub mod time;
pub mod vrrp;
