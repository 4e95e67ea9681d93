//! # rvs-fleet
//!
//! A sans-IO model of a fleet of rvs directors behind an upstream router's
//! ECMP hash (issue 14): how many live flows break when a director is
//! added, drained or lost, or a real server changes, under each policy a
//! director may follow for a packet of a flow it holds no state for, and
//! what each policy costs in memory and sync traffic. The schedulers are
//! rvs-core's own (one instance per director, through the
//! [`rvs_core::sched::Algorithm`] trait the daemon drives), so Maglev's
//! table, wlc's counters and rr's cursor behave exactly as in rvsd.
//!
//! No I/O, no clock: time is the flows' birth order at a given new-flow
//! rate, randomness a seeded [`rng::SplitMix64`]. The `rvs-fleet-sim`
//! binary runs the scenarios and prints markdown tables.
//!
//! * [`ecmp`] — Linux's hash-threshold multipath and resilient nexthop
//!   groups;
//! * [`sim`] — the fleet, the events and the policies;
//! * [`cost`] — memory per director and sync traffic per policy;
//! * [`rng`] — the seeded generator.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod cost;
pub mod ecmp;
pub mod rng;
pub mod sim;
