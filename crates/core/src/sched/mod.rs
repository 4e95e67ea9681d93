//! Schedulers: one file each, behind one trait, like the kernel's
//! `net/netfilter/ipvs/ip_vs_<name>.c`.
//!
//! A scheduler sees its service's destination list as a slice in IPVS list
//! order (index 0 = most recently added, because the kernel adds at the head)
//! and returns the position of the chosen real server. Tie-breaks follow list
//! order exactly as the kernel's do. A scheduler never returns a server whose
//! weight is 0, that is overloaded, or that is not available.
//!
//! The service calls [`Scheduler::update`] after every change of the list or
//! of a server's weight/thresholds, and [`Scheduler::counts_changed`] after a
//! server's connection counters or overload flag changed, so schedulers that
//! keep an index (the least-connection family) stay O(log N) per decision.

use std::net::IpAddr;

use crate::dest::Dest;
use crate::model::{Protocol, SchedFlags};
use crate::time::Instant;

mod argmin;
mod dh;
mod fo;
#[cfg(test)]
mod hash_proptests;
mod lblc;
mod lblcr;
mod lc;
mod locality;
mod mh;
mod nq;
mod ovf;
#[cfg(test)]
mod proptests;
mod rr;
mod sed;
mod sh;
mod twos;
mod wlc;
mod wrr;

#[cfg(feature = "bench")]
pub use mh::reference_table as mh_reference_table;

/// What a scheduler may look at in the packet that starts a connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SchedInput {
    /// Transport protocol.
    pub protocol: Protocol,
    /// Client (source) address.
    pub saddr: IpAddr,
    /// Client (source) port.
    pub sport: u16,
    /// Destination address of the packet (the VIP, or for fwmark services
    /// whatever address was marked).
    pub daddr: IpAddr,
    /// Destination port of the packet.
    pub dport: u16,
}

/// How the destination list changed, so position-based state (rr's cursor)
/// can follow the kernel's behaviour.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ListChange {
    /// A server was inserted at this position (always 0: the list head).
    Added(usize),
    /// The server at this position was removed; later ones moved up by one.
    Removed(usize),
    /// The server at this position had its weight or thresholds edited.
    Edited(usize),
    /// The whole list was replaced.
    Reset,
}

/// One scheduling algorithm's state for one service.
pub trait Scheduler: Send + core::fmt::Debug {
    /// The ipvsadm name (`rr`, `wlc`, ...).
    fn name(&self) -> &'static str;

    /// The destination list changed; `dests` is the list after the change.
    fn update(&mut self, dests: &[Dest], change: ListChange);

    /// The connection counters or the overload flag of `dests[pos]` changed.
    fn counts_changed(&mut self, dests: &[Dest], pos: usize) {
        let _ = (dests, pos);
    }

    /// Pick a real server for a new connection: its position in `dests`, or
    /// `None` ("no destination available").
    fn schedule(&mut self, dests: &[Dest], input: &SchedInput, now: Instant) -> Option<usize>;

    /// The lookup table of a table-driven scheduler (sh and dh: 256
    /// buckets; mh: M slots) as list positions, `None` for an empty slot;
    /// `None` for schedulers without a table. Data planes that schedule
    /// outside the core (the XDP program) copy it so their choices equal the
    /// core's.
    fn lookup_table(&self) -> Option<Vec<Option<u32>>> {
        None
    }
}

/// One cycle of weighted round robin over `dests` (list positions) as a
/// fresh `wrr` scheduler produces it: with weights 4, 3, 2 it is
/// `0 0 1 0 1 2 0 1 2`. Empty when no server has a weight. Data planes that
/// cannot run the kernel's stateful walk per packet (XDP) step through this
/// sequence with a shared counter instead; with every server eligible the
/// choices are the same.
pub fn wrr_sequence(dests: &[Dest]) -> Vec<u32> {
    wrr::cycle(dests)
}

/// Per-service parameters a scheduler may need beyond its flags.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SchedParams {
    /// Scheduler flags (`-b`).
    pub flags: SchedFlags,
    /// Maglev table size; must be a prime.
    pub mh_table_size: u32,
    /// Seed of the pseudo-random generator of `twos` (the core reads no
    /// entropy: the driver chooses the seed).
    pub seed: u64,
}

impl Default for SchedParams {
    fn default() -> Self {
        SchedParams {
            flags: SchedFlags::default(),
            mh_table_size: crate::model::DEFAULT_MH_TABLE_SIZE,
            seed: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

/// Why a scheduler could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchedError {
    /// No scheduler of that name (ipvsadm: "Scheduler or persistence engine not found").
    #[error("scheduler `{0}` not found")]
    NotFound(String),
    /// A parameter is invalid for the scheduler (e.g. a Maglev table size
    /// that is not a prime, or more servers than Maglev slots).
    #[error("invalid parameter for scheduler `{scheduler}`: {reason}")]
    InvalidParam {
        /// The scheduler.
        scheduler: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Every scheduler name rvs knows, in the order ipvsadm's man page lists them.
pub const SCHEDULER_NAMES: &[&str] = &[
    "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos",
];

/// Create a scheduler by its ipvsadm name.
pub fn new_scheduler(name: &str, params: &SchedParams) -> Result<Box<dyn Scheduler>, SchedError> {
    Ok(match name {
        "rr" => Box::new(rr::RoundRobin::new()),
        "wrr" => Box::new(wrr::WeightedRoundRobin::new()),
        "lc" => Box::new(lc::LeastConn::new()),
        "wlc" => Box::new(wlc::WeightedLeastConn::new()),
        "sed" => Box::new(sed::ShortestExpectedDelay::new()),
        "nq" => Box::new(nq::NeverQueue::new()),
        "fo" => Box::new(fo::WeightedFailover::new()),
        "ovf" => Box::new(ovf::WeightedOverflow::new()),
        "twos" => Box::new(twos::TwoChoices::new(params.seed)),
        "lblc" => Box::new(lblc::Lblc::new()),
        "lblcr" => Box::new(lblcr::Lblcr::new()),
        "sh" => Box::new(sh::SourceHash::new(params.flags)),
        "dh" => Box::new(dh::DestHash::new()),
        "mh" => Box::new(mh::Maglev::new(params.flags, params.mh_table_size)?),
        other => return Err(SchedError::NotFound(other.to_owned())),
    })
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Helpers for scheduler unit tests: build destination lists in list order.
    use super::*;
    use crate::dest::DestId;
    use crate::model::DestConfig;
    use std::net::Ipv4Addr;

    /// Destinations with these weights, in list order; server `i` has
    /// address 10.0.(i/256).(i%256+1):80 (wrapping).
    pub(crate) fn dests(weights: &[u32]) -> Vec<Dest> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let ip = Ipv4Addr::new(10, 0, (i >> 8) as u8, ((i & 0xff) as u8).wrapping_add(1));
                Dest::new(DestId(i as u32), DestConfig::new(ip.into(), 80).weight(w))
            })
            .collect()
    }

    /// A TCP input from client `c` (10.1.x.y) to VIP 192.0.2.1:80.
    pub(crate) fn input(client: u32, sport: u16) -> SchedInput {
        SchedInput {
            protocol: Protocol::Tcp,
            saddr: IpAddr::V4(Ipv4Addr::from(0x0a01_0000 | client)),
            sport,
            daddr: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            dport: 80,
        }
    }

    /// Run `n` decisions and return the chosen positions.
    pub(crate) fn run(s: &mut dyn Scheduler, d: &[Dest], n: usize) -> Vec<Option<usize>> {
        (0..n)
            .map(|i| s.schedule(d, &input(i as u32, 1000), Instant::ZERO))
            .collect()
    }
}
