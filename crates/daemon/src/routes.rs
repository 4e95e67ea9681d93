//! keepalived's static and virtual routes, rules and addresses, carried
//! out as keepalived does: `static_ipaddress`, `static_routes` and
//! `static_rules` are installed when rvsd starts, kept while it runs
//! (a reload adds and removes the difference) and removed when it stops;
//! a `vrrp_instance`'s `virtual_routes` and `virtual_rules` are installed
//! when it becomes MASTER (after its addresses, so a route's `src` is
//! local) and removed when it leaves MASTER (BACKUP, FAULT, stop).
//!
//! What to install is decided in [`rvs_control::routes`] (plain data from
//! the file); everything here is netlink over [`rvs_sys::netlink::AsyncNetlink`],
//! awaited on the runtime that runs the VRRP instances (as their
//! addresses are), never under the daemon lock. Each route and rule is
//! added exclusively and deleted by its exact attributes with keepalived's
//! protocol (18) unless the line names another, so rvsd does not remove a
//! route someone else installed. Installed routes are not watched: one
//! deleted by hand comes back at the next transition or reload.

use std::net::IpAddr;

use rvs_config::model::{RouteType, RuleAction};
use rvs_control::routes::{Route, Rule, Set};
use rvs_sys::netlink::{AsyncNetlink, RouteKind, RouteSpec, RuleKind, RuleSpec};
use tokio::sync::watch;

/// The netlink request for `r` with its interface index `oif` (resolved
/// by the caller: the interface may appear after the file is read).
pub fn route_spec(r: &Route, oif: Option<u32>) -> RouteSpec {
    RouteSpec {
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
        oif,
        onlink: r.onlink,
        scope: r.scope,
        table: r.table,
        metric: r.metric,
        proto: r.proto,
    }
}

/// The netlink request for rule `r` (tagged with keepalived's protocol).
pub fn rule_spec(r: &Rule) -> RuleSpec {
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
        proto: rvs_control::routes::PROTO_KEEPALIVED,
    }
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
        match nl.add_rule(&rule_spec(r)).await {
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
                match nl.del_rule(&rule_spec(r)).await {
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
    let oif = match &r.dev {
        None => None,
        Some(dev) => match rvs_sys::iface::ifindex(dev) {
            Ok(i) => Some(i),
            Err(e) => {
                tracing::error!(target: "rvs::routes", "{who}: route {}: interface {dev}: {e}", show(r));
                return None;
            }
        },
    };
    Some(route_spec(r, oif))
}

/// A route as `ip route` shows it (for logs).
fn show(r: &Route) -> String {
    let s = r;
    let mut out = match s.kind {
        RouteType::Unicast => String::new(),
        k => format!("{k:?} ").to_lowercase(),
    };
    out.push_str(&format!("{}/{}", s.dst, s.dst_len));
    for (i, g) in s.via.iter().enumerate() {
        out.push_str(&format!(" {} {g}", if i == 0 { "via" } else { "or" }));
    }
    if let Some(d) = &r.dev {
        out.push_str(&format!(" dev {d}"));
    }
    out.push_str(&format!(" table {}", s.table));
    out
}

/// A rule as `ip rule` shows it (for logs).
fn show_rule(r: &Rule) -> String {
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
    if let Some((m, mask)) = r.fwmark {
        out.push_str(&format!(" fwmark {m:#x}"));
        if let Some(k) = mask {
            out.push_str(&format!("/{k:#x}"));
        }
    }
    if let Some(i) = &r.iif {
        out.push_str(&format!(" iif {i}"));
    }
    if let Some(o) = &r.oif {
        out.push_str(&format!(" oif {o}"));
    }
    out.push_str(&match r.action {
        RuleAction::Table(t) => format!(" lookup {t}"),
        RuleAction::Goto(p) => format!(" goto {p}"),
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

    /// The plan's routes and rules become the netlink requests and log
    /// lines they were before the plan moved to rvs-control.
    #[test]
    fn planned_routes_and_rules_convert_to_netlink_and_logs() {
        let l = rvs_config::parse_str(
            "t.conf",
            "static_routes {\n 10.8.0.0/16 via 10.7.0.254 dev eth0 table 100\n blackhole 2001:db8:8::/48\n}\nstatic_rules {\n from 10.7.0.0/24 table 100 priority 50\n fwmark 3/0xff goto 60 not\n}\n",
            &Default::default(),
        )
        .unwrap();
        let a = rvs_control::routes::statics(&l.config).unwrap();
        let r0 = route_spec(&a.routes[0], Some(7));
        assert_eq!(
            (r0.kind, r0.table, r0.proto, r0.oif),
            (RouteKind::Unicast, 100, 18, Some(7))
        );
        assert_eq!(r0.gateways, ["10.7.0.254".parse::<IpAddr>().unwrap()]);
        assert_eq!(route_spec(&a.routes[1], None).kind, RouteKind::Blackhole);
        let q0 = rule_spec(&a.rules[0]);
        assert_eq!(
            (q0.kind, q0.priority, q0.proto),
            (RuleKind::Table(100), Some(50), 18)
        );
        let q1 = rule_spec(&a.rules[1]);
        assert_eq!(
            (q1.kind, q1.fwmark, q1.fwmask, q1.invert),
            (RuleKind::Goto(60), Some(3), Some(0xff), true)
        );
        assert_eq!(
            show(&a.routes[0]),
            "10.8.0.0/16 via 10.7.0.254 dev eth0 table 100"
        );
        assert_eq!(show(&a.routes[1]), "blackhole 2001:db8:8::/48 table 254");
        assert_eq!(show_rule(&a.rules[0]), "50: from 10.7.0.0/24 lookup 100");
    }
}
