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
}
