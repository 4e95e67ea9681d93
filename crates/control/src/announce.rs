//! Which VIPs a director announces to its BGP daemon, as a plain function
//! over plain data (no kernel, no clock), and the route changes that make
//! the kernel table match it.
//!
//! rvsd announces a VIP by keeping a host route for it in a routing table
//! of its own that the BGP daemon exports (docs/fleet.md).
//! A VIP is announced while this director serves it (a service with that
//! address exists and the director is not drained) and at least one of its
//! services holds its quorum. Until the health checkers of a service have
//! given their first verdict the service is `Pending`: a VIP whose route
//! was already in the table when rvsd started keeps it meanwhile (a restart
//! is not a withdrawal), one without waits.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use rvs_core::time::Instant;

use serde::{Deserialize, Serialize};

/// Whether a service can take traffic, from the health checkers or the
/// service table.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quorum {
    /// keepalived's quorum is held (or, without health checking, at least
    /// one real server is available: weight above 0).
    Up,
    /// Quorum lost (no available real server, or alive weight below
    /// `quorum - hysteresis`).
    Down,
    /// Some health checker of the service has not run yet.
    Pending,
}

/// One service of the table as the decision sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ServiceInput {
    /// Its virtual address.
    pub vip: IpAddr,
    /// Its quorum.
    pub quorum: Quorum,
}

/// Why a VIP is not announced.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No service of the VIP holds its quorum.
    QuorumLost,
    /// The director is drained (`rvsadm --drain`, or being removed).
    Drained,
    /// No service has this address (a route left from an earlier table).
    NotServed,
    /// The health checkers have not given their first verdict yet.
    Starting,
}

impl Reason {
    /// The words `rvsadm -L --announce` and the API show.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::QuorumLost => "quorum lost",
            Reason::Drained => "drained",
            Reason::NotServed => "not served",
            Reason::Starting => "starting",
        }
    }
}

/// One VIP's announcement.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum VipState {
    /// Its route is wanted in the table.
    Announced,
    /// Its route is not wanted, for this reason.
    Withdrawn(Reason),
}

impl VipState {
    /// Whether the route is wanted.
    pub fn announced(self) -> bool {
        self == VipState::Announced
    }
}

/// The state of every VIP of `services`, and of every VIP in `found`
/// (routes of ours that were in the table when rvsd started, kept while
/// their services are pending); `drained` withdraws everything.
pub fn decide(
    services: &[ServiceInput],
    drained: bool,
    found: &BTreeSet<IpAddr>,
) -> BTreeMap<IpAddr, VipState> {
    // Per VIP: (any service up, any pending).
    let mut per_vip: BTreeMap<IpAddr, (bool, bool)> = BTreeMap::new();
    for s in services {
        let e = per_vip.entry(s.vip).or_default();
        e.0 |= s.quorum == Quorum::Up;
        e.1 |= s.quorum == Quorum::Pending;
    }
    let mut out: BTreeMap<IpAddr, VipState> = per_vip
        .into_iter()
        .map(|(vip, (up, pending))| {
            let st = if drained {
                VipState::Withdrawn(Reason::Drained)
            } else if up || (pending && found.contains(&vip)) {
                VipState::Announced
            } else if pending {
                VipState::Withdrawn(Reason::Starting)
            } else {
                VipState::Withdrawn(Reason::QuorumLost)
            };
            (vip, st)
        })
        .collect();
    for vip in found {
        out.entry(*vip)
            .or_insert(VipState::Withdrawn(Reason::NotServed));
    }
    out
}

/// Whether every service has its first verdict (the starting phase is
/// over: routes found at start need no more keeping).
pub fn settled(services: &[ServiceInput]) -> bool {
    services.iter().all(|s| s.quorum != Quorum::Pending)
}

/// The route changes from `current` (the routes of ours in the table) to
/// `desired`: (to add, to delete), each sorted.
pub fn reconcile(
    desired: &BTreeMap<IpAddr, VipState>,
    current: &BTreeSet<IpAddr>,
) -> (Vec<IpAddr>, Vec<IpAddr>) {
    let want: BTreeSet<IpAddr> = desired
        .iter()
        .filter(|(_, s)| s.announced())
        .map(|(v, _)| *v)
        .collect();
    (
        want.difference(current).copied().collect(),
        current.difference(&want).copied().collect(),
    )
}

/// The director's drain state.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Drain {
    /// VIPs are announced as their quorum says.
    Serving,
    /// Withdrawn, within the grace given to `--drain`.
    Draining,
    /// Withdrawn, grace over.
    Drained,
}

impl Drain {
    /// Its name in listings.
    pub fn as_str(self) -> &'static str {
        match self {
            Drain::Serving => "serving",
            Drain::Draining => "draining",
            Drain::Drained => "drained",
        }
    }
}

/// The announcement decisions over time, sans-IO: the drain state, the
/// routes found in the table at start (kept until the first verdicts) and
/// each VIP's state from the last round. Time is an argument; reading and
/// writing the routing table is the daemon's.
#[derive(Clone, Debug)]
pub struct Announcer {
    drain: Drain,
    drain_until: Option<Instant>,
    /// Routes of ours found in the table at start, kept while their
    /// services have no verdict; `None` until the table was read once.
    found: Option<BTreeSet<IpAddr>>,
    states: BTreeMap<IpAddr, VipState>,
}

impl Announcer {
    /// Serving, or drained when the drained file said so at start.
    pub fn new(drained: bool) -> Self {
        Announcer {
            drain: if drained {
                Drain::Drained
            } else {
                Drain::Serving
            },
            drain_until: None,
            found: None,
            states: BTreeMap::new(),
        }
    }

    /// `rvsadm --drain` at `now`: withdraw everything, drained after
    /// `grace` (already drained stays drained).
    pub fn drain(&mut self, now: Instant, grace: Duration) {
        if self.drain != Drain::Drained {
            self.drain = Drain::Draining;
            self.drain_until = Some(now + grace);
        }
    }

    /// `rvsadm --undrain`: announce again.
    pub fn undrain(&mut self) {
        self.drain = Drain::Serving;
        self.drain_until = None;
    }

    /// The drain state at `now` (draining turns drained when its grace is
    /// over).
    pub fn drain_state(&mut self, now: Instant) -> Drain {
        if self.drain == Drain::Draining && self.drain_until.is_some_and(|u| now >= u) {
            self.drain = Drain::Drained;
            self.drain_until = None;
        }
        self.drain
    }

    /// The drain state as last computed.
    pub fn drain_now(&self) -> Drain {
        self.drain
    }

    /// One round at `now`: the state of every VIP given the services and
    /// the routes read from the table (`None`: the read failed), and the
    /// VIPs whose state changed since the last round.
    pub fn decide(
        &mut self,
        now: Instant,
        services: &[ServiceInput],
        current: Option<&BTreeSet<IpAddr>>,
    ) -> (BTreeMap<IpAddr, VipState>, Vec<(IpAddr, VipState)>) {
        if self.found.is_none()
            && let Some(c) = current
        {
            self.found = Some(c.clone());
        }
        if settled(services) {
            // The first verdicts are in: nothing found at start is kept
            // for its own sake any more.
            self.found = Some(BTreeSet::new());
        }
        let drained = self.drain_state(now) != Drain::Serving;
        let empty = BTreeSet::new();
        let states = decide(services, drained, self.found.as_ref().unwrap_or(&empty));
        let changed = states
            .iter()
            .filter(|(vip, st)| self.states.get(vip) != Some(st))
            .map(|(vip, st)| (*vip, *st))
            .collect();
        self.states = states.clone();
        (states, changed)
    }

    /// Each VIP's state from the last round.
    pub fn states(&self) -> &BTreeMap<IpAddr, VipState> {
        &self.states
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn svc(vip: &str, quorum: Quorum) -> ServiceInput {
        ServiceInput {
            vip: ip(vip),
            quorum,
        }
    }

    #[test]
    fn a_vip_is_announced_while_one_of_its_services_holds_quorum() {
        let s = [
            svc("10.0.0.1", Quorum::Up),
            svc("10.0.0.1", Quorum::Down),
            svc("10.0.0.2", Quorum::Down),
            svc("2001:db8::1", Quorum::Up),
        ];
        let d = decide(&s, false, &BTreeSet::new());
        assert_eq!(d[&ip("10.0.0.1")], VipState::Announced);
        assert_eq!(d[&ip("10.0.0.2")], VipState::Withdrawn(Reason::QuorumLost));
        assert_eq!(d[&ip("2001:db8::1")], VipState::Announced);
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn drained_withdraws_everything_even_while_starting() {
        let s = [
            svc("10.0.0.1", Quorum::Up),
            svc("10.0.0.2", Quorum::Pending),
        ];
        let found = BTreeSet::from([ip("10.0.0.2")]);
        let d = decide(&s, true, &found);
        assert!(
            d.values()
                .all(|v| *v == VipState::Withdrawn(Reason::Drained))
        );
    }

    #[test]
    fn a_restart_keeps_found_routes_until_the_first_verdict() {
        let found = BTreeSet::from([ip("10.0.0.1"), ip("10.0.0.9")]);
        let s = [
            svc("10.0.0.1", Quorum::Pending),
            svc("10.0.0.2", Quorum::Pending),
        ];
        let d = decide(&s, false, &found);
        assert_eq!(d[&ip("10.0.0.1")], VipState::Announced, "kept");
        assert_eq!(d[&ip("10.0.0.2")], VipState::Withdrawn(Reason::Starting));
        assert_eq!(d[&ip("10.0.0.9")], VipState::Withdrawn(Reason::NotServed));
        assert!(!settled(&s));
        // The verdict: down. Now the found route goes.
        let s = [svc("10.0.0.1", Quorum::Down), svc("10.0.0.2", Quorum::Up)];
        assert!(settled(&s));
        let d = decide(&s, false, &found);
        assert_eq!(d[&ip("10.0.0.1")], VipState::Withdrawn(Reason::QuorumLost));
        assert_eq!(d[&ip("10.0.0.2")], VipState::Announced);
    }

    #[test]
    fn reconcile_adds_the_missing_and_deletes_the_unwanted() {
        let desired = BTreeMap::from([
            (ip("10.0.0.1"), VipState::Announced),
            (ip("10.0.0.2"), VipState::Withdrawn(Reason::QuorumLost)),
            (ip("10.0.0.3"), VipState::Announced),
        ]);
        let current = BTreeSet::from([ip("10.0.0.2"), ip("10.0.0.3"), ip("10.0.0.4")]);
        let (add, del) = reconcile(&desired, &current);
        assert_eq!(add, vec![ip("10.0.0.1")]);
        assert_eq!(del, vec![ip("10.0.0.2"), ip("10.0.0.4")]);
        let (add, del) = reconcile(&BTreeMap::new(), &BTreeSet::new());
        assert!(add.is_empty() && del.is_empty());
    }

    #[test]
    fn states_serialize_for_the_api() {
        let j = serde_json::to_value(VipState::Withdrawn(Reason::QuorumLost)).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"state": "withdrawn", "reason": "quorum_lost"})
        );
        let j = serde_json::to_value(VipState::Announced).unwrap();
        assert_eq!(j, serde_json::json!({"state": "announced"}));
        assert_eq!(Reason::NotServed.as_str(), "not served");
    }

    #[test]
    fn drain_withdraws_then_turns_drained_after_the_grace() {
        let mut a = Announcer::new(false);
        let t0 = Instant::from_secs(100);
        let s = [svc("10.0.0.1", Quorum::Up)];
        let cur = BTreeSet::new();
        let (st, changed) = a.decide(t0, &s, Some(&cur));
        assert!(st[&ip("10.0.0.1")].announced());
        assert_eq!(changed, [(ip("10.0.0.1"), VipState::Announced)]);
        assert!(a.decide(t0, &s, Some(&cur)).1.is_empty(), "no change");
        a.drain(t0, Duration::from_secs(5));
        assert_eq!(a.drain_state(t0), Drain::Draining);
        assert!(!a.decide(t0, &s, Some(&cur)).0[&ip("10.0.0.1")].announced());
        assert_eq!(a.drain_state(t0 + Duration::from_secs(5)), Drain::Drained);
        a.drain(t0, Duration::from_secs(5));
        assert_eq!(a.drain_state(t0), Drain::Drained, "drained stays drained");
        a.undrain();
        assert!(a.decide(t0, &s, Some(&cur)).0[&ip("10.0.0.1")].announced());
        assert_eq!(a.drain_now(), Drain::Serving);
        assert_eq!(Announcer::new(true).drain_state(t0), Drain::Drained);
    }

    #[test]
    fn found_routes_are_kept_only_until_the_first_verdict() {
        let mut a = Announcer::new(false);
        let t = Instant::from_secs(100);
        let cur = BTreeSet::from([ip("10.0.0.1")]);
        let pending = [svc("10.0.0.1", Quorum::Pending)];
        assert!(a.decide(t, &pending, Some(&cur)).0[&ip("10.0.0.1")].announced());
        let down = [svc("10.0.0.1", Quorum::Down)];
        assert!(!a.decide(t, &down, Some(&cur)).0[&ip("10.0.0.1")].announced());
        // Pending again later (a reload adds a checker): not kept now.
        assert!(!a.decide(t, &pending, Some(&cur)).0[&ip("10.0.0.1")].announced());
        assert_eq!(a.states().len(), 1);
    }
}
