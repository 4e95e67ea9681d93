//! keepalived's static and virtual routes, rules and addresses as plain
//! data: what to install, decided from the file. `static_ipaddress`,
//! `static_routes` and `static_rules` are installed while rvsd runs (a
//! reload adds and removes the difference, [`Set::minus`]); a
//! `vrrp_instance`'s `virtual_routes` and `virtual_rules` while it is
//! MASTER. The netlink work (and the interface indexes, resolved when a
//! route is installed) is the daemon's.

use std::net::IpAddr;

use rvs_config::Loc;
use rvs_config::model::{IpRoute, IpRule, KeepalivedConf, VirtualIp};

/// keepalived's route protocol (`RTPROT_KEEPALIVED`): the tag of the rules
/// rvsd installs, and of its routes unless a line names another.
pub const PROTO_KEEPALIVED: u8 = 18;

/// One route to install (`ip route add` with these options): the
/// configured line, its location cleared so that a line that only moved
/// in the file is the same route (a reload leaves it alone). Its `dev` is
/// a name, resolved when the route is installed (it may appear later).
pub type Route = IpRoute;

/// One policy routing rule to install (`ip rule add` with these options,
/// tagged with [`PROTO_KEEPALIVED`] as keepalived tags its rules): the
/// configured line, its location cleared.
pub type Rule = IpRule;

/// An address of `static_ipaddress`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// The address.
    pub addr: IpAddr,
    /// Its prefix length (default /32, /128).
    pub prefix: Option<u8>,
    /// Its interface.
    pub dev: String,
}

/// Addresses, routes and rules installed together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    /// Addresses (static only; an instance's are its VIPs).
    pub addrs: Vec<Address>,
    /// Routes.
    pub routes: Vec<Route>,
    /// Policy rules.
    pub rules: Vec<Rule>,
}

impl Set {
    /// Nothing to install.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty() && self.routes.is_empty() && self.rules.is_empty()
    }

    /// What is in `self` and not in `other`.
    pub fn minus(&self, other: &Set) -> Set {
        Set {
            addrs: without(&self.addrs, &other.addrs),
            routes: without(&self.routes, &other.routes),
            rules: without(&self.rules, &other.rules),
        }
    }
}

fn without<T: Clone + PartialEq>(a: &[T], b: &[T]) -> Vec<T> {
    a.iter().filter(|x| !b.contains(x)).cloned().collect()
}

/// A configured route as rvsd installs it.
pub fn route(r: &IpRoute) -> Route {
    IpRoute {
        loc: Loc::default(),
        ..r.clone()
    }
}

/// A configured rule as rvsd installs it.
pub fn rule(r: &IpRule) -> Rule {
    IpRule {
        loc: Loc::default(),
        ..r.clone()
    }
}

/// The `static_*` blocks of a file, or the first line that cannot run.
pub fn statics(conf: &KeepalivedConf) -> Result<Set, String> {
    let addrs = conf
        .static_ipaddress
        .iter()
        .map(|a: &VirtualIp| match &a.dev {
            Some(dev) => Ok(Address {
                addr: a.addr,
                prefix: a.prefix,
                dev: dev.clone(),
            }),
            None => Err(format!(
                "static_ipaddress {}: no `dev` (rvs does not pick a default interface)",
                a.addr
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Set {
        addrs,
        routes: conf.static_routes.iter().map(route).collect(),
        rules: conf.static_rules.iter().map(rule).collect(),
    })
}

#[cfg(test)]
mod tests {
    use rvs_config::model::{RouteType, RuleAction};

    use super::*;

    fn set(text: &str) -> Set {
        let l = rvs_config::parse_str("t.conf", text, &Default::default()).unwrap();
        statics(&l.config).unwrap()
    }

    #[test]
    fn statics_convert_and_differences_are_what_a_reload_changes() {
        let a = set(
            "static_ipaddress {\n 10.7.0.1/24 dev eth0\n}\nstatic_routes {\n 10.8.0.0/16 via 10.7.0.254 dev eth0 table 100\n blackhole 2001:db8:8::/48\n}\nstatic_rules {\n from 10.7.0.0/24 table 100 priority 50\n}\n",
        );
        assert_eq!(a.addrs.len(), 1);
        assert_eq!(a.routes[0].dev.as_deref(), Some("eth0"));
        assert_eq!(a.routes[0].table, 100);
        assert_eq!(a.routes[0].proto, PROTO_KEEPALIVED);
        assert_eq!(a.routes[1].kind, RouteType::Blackhole);
        assert_eq!(a.rules[0].action, RuleAction::Table(100));
        let b = set(
            "static_routes {\n 10.8.0.0/16 via 10.7.0.254 dev eth0 table 100\n 10.9.0.0/16 dev eth0\n}\n",
        );
        let gone = a.minus(&b);
        assert_eq!(
            (gone.addrs.len(), gone.routes.len(), gone.rules.len()),
            (1, 1, 1)
        );
        assert_eq!(gone.routes[0].kind, RouteType::Blackhole);
        let added = b.minus(&a);
        assert_eq!(added.routes.len(), 1);
        assert_eq!(added.routes[0].dst_len, 16);
        assert!(b.minus(&b).is_empty());
        // A line that only moved in the file is the same route.
        let moved = set(
            "\n\nstatic_routes {\n 10.9.0.0/16 dev eth0\n 10.8.0.0/16 via 10.7.0.254 dev eth0 table 100\n}\n",
        );
        assert!(moved.minus(&b).is_empty() && b.minus(&moved).is_empty());
        let l = rvs_config::parse_str(
            "t.conf",
            "static_ipaddress {\n 10.7.0.1/24\n}\n",
            &Default::default(),
        )
        .unwrap();
        assert!(statics(&l.config).unwrap_err().contains("no `dev`"));
    }
}
