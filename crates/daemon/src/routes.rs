//! keepalived's static and virtual routes, rules and addresses, carried
//! out as keepalived does: `static_ipaddress`, `static_routes` and
//! `static_rules` are installed when rvsd starts, kept while it runs
//! (a reload adds and removes the difference) and removed when it stops;
//! a `vrrp_instance`'s `virtual_routes` and `virtual_rules` are installed
//! when it becomes MASTER (after its addresses, so a route's `src` is
//! local) and removed when it leaves MASTER (BACKUP, FAULT, stop).
//!
//! Everything here is netlink over [`rvs_sys::netlink::AsyncNetlink`],
//! awaited on the runtime that runs the VRRP instances (as their
//! addresses are), never under the daemon lock. Each route and rule is
//! added exclusively and deleted by its exact attributes with keepalived's
//! protocol (18) unless the line names another, so rvsd does not remove a
//! route someone else installed. Installed routes are not watched: one
//! deleted by hand comes back at the next transition or reload.

use std::net::IpAddr;

use rvs_config::model::{IpRoute, IpRule, RouteType, RuleAction, VirtualIp};
use rvs_sys::netlink::{AsyncNetlink, RouteKind, RouteSpec, RuleKind, RuleSpec};
use tokio::sync::watch;

/// One route: the netlink request without its interface, and the
/// interface by name (resolved when it is installed: it may appear later).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    /// The route (`oif` unset).
    pub spec: RouteSpec,
    /// `dev IF`.
    pub dev: Option<String>,
}

/// An address of `static_ipaddress`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
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
    pub rules: Vec<RuleSpec>,
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
    Route {
        spec: RouteSpec {
            kind: match r.kind {
                RouteType::Unicast => RouteKind::Unicast,
                RouteType::Blackhole => RouteKind::Blackhole,
                RouteType::Unreachable => RouteKind::Unreachable,
                RouteType::Prohibit => RouteKind::Prohibit,
                RouteType::Throw => RouteKind::Throw,
            },
            dst: r.dst,
            dst_len: r.dst_len,
            from: r.from,
            prefsrc: r.src,
            gateways: r.via.clone(),
            oif: None,
            onlink: r.onlink,
            scope: r.scope,
            table: r.table,
            metric: r.metric,
            proto: r.proto,
        },
        dev: r.dev.clone(),
    }
}

/// A configured rule as rvsd installs it (tagged with keepalived's
/// protocol, as keepalived tags its rules).
pub fn rule(r: &IpRule) -> RuleSpec {
    RuleSpec {
        ipv6: r.ipv6,
        from: r.from,
        to: r.to,
        invert: r.invert,
        priority: r.priority,
        kind: match r.action {
            RuleAction::Table(t) => RuleKind::Table(t),
            RuleAction::Goto(p) => RuleKind::Goto(p),
            RuleAction::Nop => RuleKind::Nop,
            RuleAction::Blackhole => RuleKind::Blackhole,
            RuleAction::Unreachable => RuleKind::Unreachable,
            RuleAction::Prohibit => RuleKind::Prohibit,
        },
        fwmark: r.fwmark.map(|(m, _)| m),
        fwmask: r.fwmark.and_then(|(_, m)| m),
        tos: r.tos,
        iif: r.iif.clone(),
        oif: r.oif.clone(),
        suppress_prefixlen: r.suppress_prefixlen,
        proto: 18,
    }
}

/// The `static_*` blocks of a file, or the first line that cannot run.
pub fn statics(conf: &rvs_config::model::KeepalivedConf) -> Result<Set, String> {
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

/// Install `set` (addresses, then routes, then rules); failures are logged
/// with `who` and the item, the rest goes on.
pub async fn install(set: &Set, who: &str) {
    if set.is_empty() {
        return;
    }
    for a in &set.addrs {
        if let Err(e) = rvs_vrrp::net::add_address(&a.dev, a.addr, a.prefix).await {
            tracing::error!(target: "rvs::routes", "{who}: adding address {} on {}: {e}", a.addr, a.dev);
        }
    }
    let mut nl = match AsyncNetlink::open() {
        Ok(nl) => nl,
        Err(e) => {
            tracing::error!(target: "rvs::routes", "{who}: cannot install routes and rules: {e}");
            return;
        }
    };
    for r in &set.routes {
        let Some(spec) = resolved(r, who) else {
            continue;
        };
        match nl.add_route(&spec).await {
            Ok(_) => tracing::info!(target: "rvs::routes", "{who}: route {} added", show(r)),
            Err(e) => {
                tracing::error!(target: "rvs::routes", "{who}: adding route {}: {e}", show(r))
            }
        }
    }
    for r in &set.rules {
        match nl.add_rule(r).await {
            Ok(_) => tracing::info!(target: "rvs::routes", "{who}: rule {} added", show_rule(r)),
            Err(e) => {
                tracing::error!(target: "rvs::routes", "{who}: adding rule {}: {e}", show_rule(r))
            }
        }
    }
}

/// Remove `set` (rules, then routes, then addresses); what is not there is
/// no error.
pub async fn remove(set: &Set, who: &str) {
    if set.is_empty() {
        return;
    }
    match AsyncNetlink::open() {
        Ok(mut nl) => {
            for r in &set.rules {
                match nl.del_rule(r).await {
                    Ok(true) => {
                        tracing::info!(target: "rvs::routes", "{who}: rule {} removed", show_rule(r))
                    }
                    Ok(false) => {}
                    Err(e) => tracing::error!(
                        target: "rvs::routes",
                        "{who}: removing rule {}: {e}",
                        show_rule(r)
                    ),
                }
            }
            for r in &set.routes {
                let Some(spec) = resolved(r, who) else {
                    continue;
                };
                match nl.del_route(&spec).await {
                    Ok(true) => {
                        tracing::info!(target: "rvs::routes", "{who}: route {} removed", show(r))
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(target: "rvs::routes", "{who}: removing route {}: {e}", show(r))
                    }
                }
            }
        }
        Err(e) => {
            tracing::error!(target: "rvs::routes", "{who}: cannot remove routes and rules: {e}")
        }
    }
    for a in &set.addrs {
        if let Err(e) = rvs_vrrp::net::del_address(&a.dev, a.addr, a.prefix).await {
            tracing::error!(target: "rvs::routes", "{who}: removing address {} from {}: {e}", a.addr, a.dev);
        }
    }
}

/// The route with its interface index, `None` (logged) when the
/// interface does not exist.
fn resolved(r: &Route, who: &str) -> Option<RouteSpec> {
    let mut spec = r.spec.clone();
    if let Some(dev) = &r.dev {
        match rvs_sys::iface::ifindex(dev) {
            Ok(i) => spec.oif = Some(i),
            Err(e) => {
                tracing::error!(target: "rvs::routes", "{who}: route {}: interface {dev}: {e}", show(r));
                return None;
            }
        }
    }
    Some(spec)
}

/// A route as `ip route` shows it (for logs).
fn show(r: &Route) -> String {
    let s = &r.spec;
    let mut out = match s.kind {
        RouteKind::Unicast => String::new(),
        k => format!("{k:?} ").to_lowercase(),
    };
    out.push_str(&format!("{}/{}", s.dst, s.dst_len));
    for (i, g) in s.gateways.iter().enumerate() {
        out.push_str(&format!(" {} {g}", if i == 0 { "via" } else { "or" }));
    }
    if let Some(d) = &r.dev {
        out.push_str(&format!(" dev {d}"));
    }
    out.push_str(&format!(" table {}", s.table));
    out
}

/// A rule as `ip rule` shows it (for logs).
fn show_rule(r: &RuleSpec) -> String {
    let prefix = |p: &Option<(IpAddr, u8)>| match p {
        Some((a, l)) => format!("{a}/{l}"),
        None => "all".into(),
    };
    let mut out = String::new();
    if let Some(p) = r.priority {
        out.push_str(&format!("{p}: "));
    }
    if r.invert {
        out.push_str("not ");
    }
    out.push_str(&format!("from {}", prefix(&r.from)));
    if r.to.is_some() {
        out.push_str(&format!(" to {}", prefix(&r.to)));
    }
    if let Some(m) = r.fwmark {
        out.push_str(&format!(" fwmark {m:#x}"));
        if let Some(k) = r.fwmask {
            out.push_str(&format!("/{k:#x}"));
        }
    }
    if let Some(i) = &r.iif {
        out.push_str(&format!(" iif {i}"));
    }
    if let Some(o) = &r.oif {
        out.push_str(&format!(" oif {o}"));
    }
    out.push_str(&match r.kind {
        RuleKind::Table(t) => format!(" lookup {t}"),
        RuleKind::Goto(p) => format!(" goto {p}"),
        k => format!(" {k:?}").to_lowercase(),
    });
    out
}

/// The static set's task: installs what `want` says, follows its changes
/// (a reload adds and removes the difference) and, when `stop` is set,
/// removes everything it installed.
pub fn spawn(mut want: watch::Receiver<Set>) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let mut have = Set::default();
        loop {
            let next = want.borrow_and_update().clone();
            remove(&have.minus(&next), "static").await;
            install(&next.minus(&have), "static").await;
            have = next;
            tokio::select! {
                r = want.changed() => if r.is_err() { break },
                _ = stopped.changed() => break,
            }
        }
        remove(&have, "static").await;
    });
    (stop, task)
}

#[cfg(test)]
mod tests {
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
        assert_eq!(a.routes[0].spec.table, 100);
        assert_eq!(a.routes[0].spec.proto, 18);
        assert_eq!(a.routes[1].spec.kind, RouteKind::Blackhole);
        assert_eq!(a.rules[0].kind, RuleKind::Table(100));
        assert_eq!(
            show(&a.routes[0]),
            "10.8.0.0/16 via 10.7.0.254 dev eth0 table 100"
        );
        assert_eq!(show_rule(&a.rules[0]), "50: from 10.7.0.0/24 lookup 100");
        let b = set(
            "static_routes {\n 10.8.0.0/16 via 10.7.0.254 dev eth0 table 100\n 10.9.0.0/16 dev eth0\n}\n",
        );
        let gone = a.minus(&b);
        assert_eq!(
            (gone.addrs.len(), gone.routes.len(), gone.rules.len()),
            (1, 1, 1)
        );
        assert_eq!(gone.routes[0].spec.kind, RouteKind::Blackhole);
        let added = b.minus(&a);
        assert_eq!(added.routes.len(), 1);
        assert_eq!(added.routes[0].spec.dst_len, 16);
        assert!(b.minus(&b).is_empty());
        let l = rvs_config::parse_str(
            "t.conf",
            "static_ipaddress {\n 10.7.0.1/24\n}\n",
            &Default::default(),
        )
        .unwrap();
        assert!(statics(&l.config).unwrap_err().contains("no `dev`"));
    }
}
