//! # rvs-check
//!
//! Health checking with keepalived's semantics.
//! * [`policy`] — the sans-IO state machine: checker up/down with retries,
//!   real servers alive when all their checkers are, inhibit_on_failure,
//!   misc_dynamic weights, quorum/hysteresis, the sorry server, notify and
//!   quorum scripts; time is an argument, actions come out;
//! * [`build`] — from a keepalived.conf model to the policy's view;
//! * [`health`] — the policy plus probe jobs, statistics and metrics, as the
//!   daemon holds it;
//! * [`runner`] — the tokio driver: runs due probes concurrently, feeds
//!   results back and pushes health changes to the data plane;
//! * [`security`] — `script_user` and `enable_script_security` over every
//!   script of a configuration;
//! * [`probe`] — the probes themselves (TCP, HTTP/SSL, MISC, DNS, UDP, PING);
//!   `bridge` maps a configured checker to a probe.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod build;
pub mod health;
pub mod policy;
pub mod probe;
pub mod runner;
pub mod security;

mod bridge;

pub use build::{HealthPlan, ProbeJob, plan};
pub use health::Health;
