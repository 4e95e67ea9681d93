//! Schedulers: one file each, behind one trait, like the kernel's
//! `net/netfilter/ipvs/ip_vs_<name>.c`.
//!
//! A scheduler sees its service's destination list as a slice in IPVS list
//! order (index 0 = most recently added, because the kernel adds at the head)
//! and returns the position of the chosen real server. Tie-breaks follow list
//! order exactly as the kernel's do. A scheduler never returns a server whose
//! weight is 0, that is overloaded, or that is not available.
//!
//! [`Scheduler`] names the algorithms (ipvsadm's `-s` names); each one's
//! state for one service is an [`Algorithm`] built by [`new_scheduler`].
//!
//! The service calls [`Algorithm::update`] after every change of the list or
//! of a server's weight/thresholds, and [`Algorithm::counts_changed`] after a
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

pub use wrr::WrrMark;

#[cfg(feature = "bench")]
pub use mh::reference_table as mh_reference_table;

/// The constants of the hash-based schedulers (sh, dh, mh). Data planes that
/// schedule outside the core (the XDP program) must hash the same way; the
/// program's `RVS_*` twins are checked against these by rvs-xdp's layout test.
pub mod hash {
    pub use super::dh::DH_TAB_BITS;
    pub use super::mh::{HASH1_KEY, HASH2_KEY};
    pub use super::sh::{GOLDEN_RATIO_32, SH_TAB_BITS};
}

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
pub trait Algorithm: Send + core::fmt::Debug {
    /// The scheduler this is the state of.
    fn scheduler(&self) -> Scheduler;

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
        scheduler: Scheduler,
        /// What is wrong.
        reason: String,
    },
}

/// A scheduling algorithm, by its ipvsadm name: every IPVS scheduler and
/// rvs's `twos`. Maglev's options (`mh-fallback`, `mh-port`, the table size)
/// are the service's [`SchedFlags`] and [`SchedParams`], not variants.
///
/// The one list of schedulers: configuration files, rvsadm's `-s`, the core
/// and the XDP program's scheduler ids all go through it. Its text form
/// ([`Scheduler::name`], [`FromStr`](core::str::FromStr), serde) is the
/// ipvsadm name.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scheduler {
    /// `rr`: round robin.
    Rr,
    /// `wrr`: weighted round robin.
    Wrr,
    /// `lc`: least connection.
    Lc,
    /// `wlc`: weighted least connection, ipvsadm's default.
    #[default]
    Wlc,
    /// `lblc`: locality-based least connection.
    Lblc,
    /// `lblcr`: locality-based least connection with replication.
    Lblcr,
    /// `dh`: destination hashing.
    Dh,
    /// `sh`: source hashing.
    Sh,
    /// `sed`: shortest expected delay.
    Sed,
    /// `nq`: never queue.
    Nq,
    /// `fo`: weighted failover.
    Fo,
    /// `ovf`: weighted overflow.
    Ovf,
    /// `mh`: Maglev hashing.
    Mh,
    /// `twos`: power of two choices (rvs; not in the kernel).
    Twos,
}

impl Scheduler {
    /// Every scheduler, in the order ipvsadm's man page lists them (`twos`,
    /// rvs's own, last).
    pub const ALL: [Scheduler; 14] = [
        Scheduler::Rr,
        Scheduler::Wrr,
        Scheduler::Lc,
        Scheduler::Wlc,
        Scheduler::Lblc,
        Scheduler::Lblcr,
        Scheduler::Dh,
        Scheduler::Sh,
        Scheduler::Sed,
        Scheduler::Nq,
        Scheduler::Fo,
        Scheduler::Ovf,
        Scheduler::Mh,
        Scheduler::Twos,
    ];

    /// Every scheduler, in [`Scheduler::ALL`]'s order.
    pub fn all() -> impl Iterator<Item = Scheduler> {
        Scheduler::ALL.into_iter()
    }

    /// The ipvsadm name (`rr`, `wlc`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Scheduler::Rr => "rr",
            Scheduler::Wrr => "wrr",
            Scheduler::Lc => "lc",
            Scheduler::Wlc => "wlc",
            Scheduler::Lblc => "lblc",
            Scheduler::Lblcr => "lblcr",
            Scheduler::Dh => "dh",
            Scheduler::Sh => "sh",
            Scheduler::Sed => "sed",
            Scheduler::Nq => "nq",
            Scheduler::Fo => "fo",
            Scheduler::Ovf => "ovf",
            Scheduler::Mh => "mh",
            Scheduler::Twos => "twos",
        }
    }

    /// True for the schedulers whose `-b` flags mean something (`sh-*`,
    /// `mh-*`): sh and mh.
    pub const fn takes_flags(self) -> bool {
        matches!(self, Scheduler::Sh | Scheduler::Mh)
    }
}

impl core::fmt::Display for Scheduler {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl core::str::FromStr for Scheduler {
    type Err = SchedError;

    /// The scheduler of an ipvsadm name (exact, lower case as ipvsadm
    /// takes it); [`SchedError::NotFound`] otherwise.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheduler::all()
            .find(|x| x.name() == s)
            .ok_or_else(|| SchedError::NotFound(s.to_owned()))
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Scheduler {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Scheduler {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// Create scheduler `s`'s state for one service.
pub fn new_scheduler(s: Scheduler, params: &SchedParams) -> Result<Box<dyn Algorithm>, SchedError> {
    Ok(match s {
        Scheduler::Rr => Box::new(rr::RoundRobin::new()),
        Scheduler::Wrr => Box::new(wrr::WeightedRoundRobin::new()),
        Scheduler::Lc => Box::new(lc::LeastConn::new()),
        Scheduler::Wlc => Box::new(wlc::WeightedLeastConn::new()),
        Scheduler::Sed => Box::new(sed::ShortestExpectedDelay::new()),
        Scheduler::Nq => Box::new(nq::NeverQueue::new()),
        Scheduler::Fo => Box::new(fo::WeightedFailover::new()),
        Scheduler::Ovf => Box::new(ovf::WeightedOverflow::new()),
        Scheduler::Twos => Box::new(twos::TwoChoices::new(params.seed)),
        Scheduler::Lblc => Box::new(lblc::Lblc::new()),
        Scheduler::Lblcr => Box::new(lblcr::Lblcr::new()),
        Scheduler::Sh => Box::new(sh::SourceHash::new(params.flags)),
        Scheduler::Dh => Box::new(dh::DestHash::new()),
        Scheduler::Mh => Box::new(mh::Maglev::new(params.flags, params.mh_table_size)?),
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
    pub(crate) fn run(s: &mut dyn Algorithm, d: &[Dest], n: usize) -> Vec<Option<usize>> {
        (0..n)
            .map(|i| s.schedule(d, &input(i as u32, 1000), Instant::ZERO))
            .collect()
    }

    /// A decision input from client 1 to destination address 192.0.2.`daddr`
    /// (the key of the locality schedulers' tables).
    pub(crate) fn to(daddr: u8) -> SchedInput {
        SchedInput {
            daddr: IpAddr::V4(Ipv4Addr::new(192, 0, 2, daddr)),
            ..input(1, 1000)
        }
    }

    /// `s` after a [`ListChange::Reset`] to `d`: how a scheduler starts on a list.
    pub(crate) fn reset<A: Algorithm>(mut s: A, d: &[Dest]) -> A {
        s.update(d, ListChange::Reset);
        s
    }

    /// Change server `p`'s counters or flags with `f` and tell `s`, as the
    /// director does after a connection changes state.
    pub(crate) fn counts(
        s: &mut dyn Algorithm,
        d: &mut [Dest],
        p: usize,
        f: impl FnOnce(&mut Dest),
    ) {
        f(&mut d[p]);
        s.counts_changed(d, p);
    }

    /// Set server `p`'s active connection count (see [`counts`]).
    pub(crate) fn set_active(s: &mut dyn Algorithm, d: &mut [Dest], p: usize, active: u32) {
        counts(s, d, p, |x| x.active = active);
    }
}

#[cfg(test)]
mod scheduler_enum {
    use super::*;

    #[test]
    fn names_are_ipvsadms_and_round_trip() {
        let names: Vec<&str> = Scheduler::all().map(Scheduler::name).collect();
        assert_eq!(
            names,
            [
                "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf",
                "mh", "twos"
            ]
        );
        for s in Scheduler::all() {
            assert_eq!(s.name().parse::<Scheduler>(), Ok(s));
            assert_eq!(s.to_string(), s.name());
            // Every scheduler builds with the default parameters.
            assert_eq!(
                new_scheduler(s, &SchedParams::default())
                    .unwrap()
                    .scheduler(),
                s
            );
        }
        assert_eq!(Scheduler::default(), Scheduler::Wlc);
        assert_eq!(
            "RR".parse::<Scheduler>(),
            Err(SchedError::NotFound("RR".into()))
        );
        assert_eq!(
            "".parse::<Scheduler>(),
            Err(SchedError::NotFound(String::new()))
        );
    }
}
