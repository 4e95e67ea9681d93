//! # rvs-control
//!
//! The control plane's logic, without sockets or threads:
//! * [`announce`] — which VIPs a director announces to its BGP daemon and
//!   the route changes that get the kernel table there;
//! * [`bgp`] — what rvsd reads from BIRD's control socket and FRR's vtysh;
//! * [`script`] — the scripts keepalived.conf asks to run, as data;
//! * [`protocol`] — what `rvsadm` and `rvsd` say to each other (JSON lines);
//! * [`dataplane`] — the one trait every data plane implements;
//! * [`owner`] — the one entry point for desired state: every source
//!   (rvsadm, a configuration file, Kubernetes, the HTTP API) submits its
//!   changes through [`state::Controller::submit`], and each service has
//!   one owner that alone may change it;
//! * [`sync`] — connection sync between directors (IPVS's sync daemons)
//!   as a sans-IO endpoint: rvsd only holds its sockets and timers;
//! * [`vrrp`] — keepalived's `vrrp_instance` blocks planned into what
//!   each instance runs, and [`routes`] — the static and virtual routes,
//!   rules and addresses to install;
//! * [`notify`] and [`mail`] — which notify FIFOs and which mail server
//!   and addresses a file names;
//! * [`state`] — the desired service table as definitions, the difference
//!   between two tables, and applying it atomically to the core director so
//!   a reload touches only what changed and a bad request changes nothing;
//! * [`warnings`] — warnings that scale with the table: the first of a
//!   kind named, the rest counted and summed up.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod announce;
pub mod bgp;
pub mod dataplane;
pub mod mail;
pub mod notify;
pub mod owner;
pub mod protocol;
pub mod room;
pub mod routes;
pub mod script;
pub mod state;
pub mod sync;
#[cfg(test)]
mod testutil;
pub mod vrrp;
pub mod warnings;
