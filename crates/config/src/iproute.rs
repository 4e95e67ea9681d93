//! keepalived's route and rule lines (`static_routes`, `virtual_routes`,
//! `static_rules`, `virtual_rules`): the `ip route` / `ip rule` words
//! keepalived 2.x reads (`vrrp_iproute.c`, `vrrp_iprule.c`), into
//! [`IpRoute`] and [`IpRule`]. Options rvs does not install (route
//! metrics such as `mtu`, rule selectors such as `uidrange`) are located
//! warnings naming them; anything else unknown is an error.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::lexer::{Node, Token};
use crate::model::{IpRoute, IpRule, RouteType, RuleAction};
use crate::parse::{err, expected};
use crate::{ConfigError, Loc, Warning};

type R<T> = Result<T, ConfigError>;

/// keepalived's default protocol for what it installs (`RTPROT_KEEPALIVED`).
pub(crate) const RTPROT_KEEPALIVED: u8 = 18;
/// The main routing table.
pub(crate) const RT_TABLE_MAIN: u32 = 254;

/// Route options that take one value and that rvs does not install.
const ROUTE_UNAPPLIED: &[&str] = &[
    "mtu",
    "advmss",
    "rtt",
    "rttvar",
    "reordering",
    "window",
    "cwnd",
    "ssthresh",
    "realms",
    "rto_min",
    "initcwnd",
    "initrwnd",
    "features",
    "quickack",
    "congctl",
    "fastopen_no_cookie",
    "tos",
    "dsfield",
    "pref",
    "expires",
    "hoplimit",
    "ttl-propagate",
    "vrf",
    "track_group",
];

/// Rule options that take one value and that rvs does not install.
const RULE_UNAPPLIED: &[&str] = &[
    "realms",
    "uidrange",
    "ipproto",
    "sport",
    "dport",
    "suppress_ifgroup",
    "tunnel-id",
    "protocol",
    "ip_proto",
    "track_group",
];

/// The words of one line: keyword then arguments.
fn words(n: &Node) -> Vec<&Token> {
    std::iter::once(&n.key).chain(n.args.iter()).collect()
}

/// The value after word `i`, or an error naming the option.
fn value<'a>(w: &[&'a Token], i: usize) -> R<&'a Token> {
    match w.get(i + 1) {
        Some(t) => Ok(t),
        None => err(
            w[i],
            format!("expected a value after `{}`, found end of line", w[i].text),
        ),
    }
}

fn number(t: &Token, what: &str, max: u64) -> R<u64> {
    let text = t.text.as_str();
    let v = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse::<u64>().ok(),
    };
    match v.filter(|v| *v <= max) {
        Some(v) => Ok(v),
        None => err(t, format!("expected {what} (0-{max}), found `{text}`")),
    }
}

/// `ADDR[/LEN]`; a bare address is a host prefix.
fn prefix(t: &Token) -> R<(IpAddr, u8)> {
    let (a, len) = match t.text.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (t.text.as_str(), None),
    };
    let Ok(addr) = a.parse::<IpAddr>() else {
        return expected(t, "an IP address[/prefix]");
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    match len {
        None => Ok((addr, max)),
        Some(l) => match l.parse::<u8>().ok().filter(|v| *v <= max) {
            Some(v) => Ok((addr, v)),
            None => err(
                t,
                format!("expected a prefix length (0-{max}), found `{}`", t.text),
            ),
        },
    }
}

fn address(t: &Token) -> R<IpAddr> {
    t.text.parse().or_else(|_| expected(t, "an IP address"))
}

/// A routing table by number or by iproute2's built-in names.
fn table(t: &Token) -> R<u32> {
    match t.text.as_str() {
        "main" => Ok(RT_TABLE_MAIN),
        "local" => Ok(255),
        "default" => Ok(253),
        s if s.parse::<u32>().is_ok() => number(t, "a routing table", u64::from(u32::MAX))
            .map(|v| v as u32)
            .and_then(|v| {
                if v == 0 {
                    err(t, "routing table 0 is not a table (`unspec`)")
                } else {
                    Ok(v)
                }
            }),
        other => err(
            t,
            format!(
                "expected a routing table number (or main, local, default), found `{other}` (rvs does not read rt_tables names)"
            ),
        ),
    }
}

fn scope(t: &Token) -> R<u8> {
    Ok(match t.text.as_str() {
        "global" | "universe" => 0,
        "site" => 200,
        "link" => 253,
        "host" => 254,
        "nowhere" => 255,
        _ => number(
            t,
            "a scope (global, site, link, host, nowhere or a number)",
            255,
        )? as u8,
    })
}

fn protocol(t: &Token) -> R<u8> {
    Ok(match t.text.as_str() {
        "redirect" => 1,
        "kernel" => 2,
        "boot" => 3,
        "static" => 4,
        "ra" => 9,
        "zebra" => 11,
        "bird" => 12,
        "dhcp" => 16,
        "keepalived" => RTPROT_KEEPALIVED,
        "babel" => 42,
        "bgp" => 186,
        "isis" => 187,
        "ospf" => 188,
        "rip" => 189,
        _ => number(t, "a route protocol (name or number)", 255)? as u8,
    })
}

fn unapplied(w: &mut Vec<Warning>, t: &Token, what: &str) {
    w.push(Warning::not_applied(
        &t.loc,
        &t.text,
        &format!("this {what} option is not installed by rvs; the rest of the line is"),
    ));
}

/// One `static_routes` / `virtual_routes` line.
pub(crate) fn route(n: &Node, warn: &mut Vec<Warning>) -> R<IpRoute> {
    let w = words(n);
    let mut r = IpRoute {
        kind: RouteType::Unicast,
        dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        dst_len: 0,
        from: None,
        src: None,
        via: Vec::new(),
        dev: None,
        onlink: false,
        scope: None,
        table: RT_TABLE_MAIN,
        metric: None,
        proto: RTPROT_KEEPALIVED,
        no_track: false,
        loc: n.key.loc.clone(),
    };
    let mut dst: Option<(&Token, Option<(IpAddr, u8)>)> = None;
    let mut i = 0;
    while i < w.len() {
        let t = w[i];
        match t.text.as_str() {
            "unicast" | "blackhole" | "unreachable" | "prohibit" | "throw" if i == 0 => {
                r.kind = match t.text.as_str() {
                    "blackhole" => RouteType::Blackhole,
                    "unreachable" => RouteType::Unreachable,
                    "prohibit" => RouteType::Prohibit,
                    "throw" => RouteType::Throw,
                    _ => RouteType::Unicast,
                };
            }
            "local" | "broadcast" | "anycast" | "multicast" | "nat" if i == 0 => {
                return err(
                    t,
                    format!(
                        "route type `{}` is not supported by rvs (unicast, blackhole, unreachable, prohibit and throw are)",
                        t.text
                    ),
                );
            }
            "src" => {
                r.src = Some(address(value(&w, i)?)?);
                i += 1;
            }
            "from" => {
                r.from = Some(prefix(value(&w, i)?)?);
                i += 1;
            }
            "via" | "gw" | "or" => {
                let mut at = i + 1;
                // `via inet6 ADDR` names the family first.
                if matches!(w.get(at).map(|t| t.text.as_str()), Some("inet" | "inet6")) {
                    at += 1;
                }
                let Some(g) = w.get(at) else {
                    return err(t, format!("expected an address after `{}`", t.text));
                };
                if t.text == "or" && r.via.is_empty() {
                    return err(t, "`or` names a second gateway: give `via ADDR` first");
                }
                if t.text != "or" && !r.via.is_empty() {
                    return err(t, "one `via` per route (a second gateway is `or ADDR`)");
                }
                r.via.push(address(g)?);
                i = at;
            }
            "dev" | "oif" => {
                r.dev = Some(value(&w, i)?.text.clone());
                i += 1;
            }
            "onlink" => r.onlink = true,
            "scope" => {
                r.scope = Some(scope(value(&w, i)?)?);
                i += 1;
            }
            "table" => {
                r.table = table(value(&w, i)?)?;
                i += 1;
            }
            "metric" | "priority" | "preference" => {
                r.metric = Some(number(value(&w, i)?, "a metric", u64::from(u32::MAX))? as u32);
                i += 1;
            }
            "protocol" | "proto" => {
                r.proto = protocol(value(&w, i)?)?;
                i += 1;
            }
            "no_track" => r.no_track = true,
            "lock" | "append" => unapplied(warn, t, "route"),
            k if ROUTE_UNAPPLIED.contains(&k) => {
                unapplied(warn, t, "route");
                // `ssthresh lock 107`: a locked metric.
                if w.get(i + 1).is_some_and(|n| n.text == "lock") {
                    i += 1;
                }
                value(&w, i)?;
                i += 1;
            }
            "nexthop" | "encap" | "nhid" => {
                return err(
                    t,
                    format!(
                        "`{}` is not supported by rvs in a route (use `via ADDR [or ADDR]`)",
                        t.text
                    ),
                );
            }
            _ => {
                let d = if t.text == "to" {
                    i += 1;
                    value(&w, i - 1)?
                } else {
                    t
                };
                if dst.is_some() {
                    return err(
                        d,
                        format!(
                            "unexpected `{}` in a route (the destination is `{}`)",
                            d.text,
                            dst.map(|(t, _)| t.text.as_str()).unwrap_or_default()
                        ),
                    );
                }
                let p = match d.text.as_str() {
                    "default" | "all" | "any" => None,
                    text if text
                        .split('/')
                        .next()
                        .is_some_and(|a| a.parse::<IpAddr>().is_ok()) =>
                    {
                        Some(prefix(d)?)
                    }
                    _ => {
                        return err(
                            d,
                            format!(
                                "expected a route option or a destination ADDR[/PREFIX], found `{}`",
                                d.text
                            ),
                        );
                    }
                };
                dst = Some((d, p));
            }
        }
        i += 1;
    }
    let Some((dtok, p)) = dst else {
        return err(
            &n.key,
            "a route needs a destination (ADDR[/PREFIX] or default)",
        );
    };
    let v6 = match p {
        Some((a, _)) => a.is_ipv6(),
        None => r
            .via
            .iter()
            .chain(r.src.iter())
            .chain(r.from.iter().map(|(a, _)| a))
            .any(|a| a.is_ipv6()),
    };
    (r.dst, r.dst_len) = match p {
        Some((a, l)) => (masked(a, l), l),
        None if v6 => (IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
        None => (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
    };
    let family = |a: &IpAddr| a.is_ipv6() == v6;
    let mixed = !r.via.iter().all(family)
        || !r.src.iter().all(family)
        || !r.from.iter().all(|(a, _)| family(a));
    if mixed {
        return err(dtok, "a route mixes IPv4 and IPv6 addresses");
    }
    if r.kind != RouteType::Unicast && !r.via.is_empty() {
        return err(
            &n.key,
            "a blackhole/unreachable/prohibit/throw route has no gateway",
        );
    }
    if let Some((a, l)) = r.from {
        r.from = Some((masked(a, l), l));
    }
    Ok(r)
}

/// `a` with the bits past `len` cleared (the kernel refuses a route whose
/// destination has host bits set).
fn masked(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v) & m))
        }
        IpAddr::V6(v) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v) & m))
        }
    }
}

/// One `static_rules` / `virtual_rules` line.
pub(crate) fn rule(n: &Node, warn: &mut Vec<Warning>) -> R<IpRule> {
    let w = words(n);
    let mut r = IpRule {
        ipv6: false,
        from: None,
        to: None,
        invert: false,
        priority: None,
        action: RuleAction::Nop,
        fwmark: None,
        tos: 0,
        iif: None,
        oif: None,
        suppress_prefixlen: None,
        no_track: false,
        loc: n.key.loc.clone(),
    };
    let mut action: Option<RuleAction> = None;
    let mut goto: Option<(&Token, u32)> = None;
    let mut family: Option<bool> = None;
    let mut set_action = |t: &Token, a: RuleAction| -> R<()> {
        if action.is_some() {
            return err(t, format!("a second action `{}` in one rule", t.text));
        }
        action = Some(a);
        Ok(())
    };
    let mut i = 0;
    while i < w.len() {
        let t = w[i];
        match t.text.as_str() {
            "from" | "to" => {
                let v = value(&w, i)?;
                let p = if v.text == "all" {
                    None
                } else {
                    let (a, l) = prefix(v)?;
                    Some((masked(a, l), l))
                };
                if t.text == "from" {
                    r.from = p;
                } else {
                    r.to = p;
                }
                i += 1;
            }
            "not" => r.invert = true,
            "priority" | "preference" | "pref" | "order" => {
                r.priority =
                    Some(number(value(&w, i)?, "a rule priority", u64::from(u32::MAX))? as u32);
                i += 1;
            }
            "table" | "lookup" => {
                set_action(t, RuleAction::Table(table(value(&w, i)?)?))?;
                i += 1;
            }
            "goto" => {
                goto = Some((
                    t,
                    number(value(&w, i)?, "a rule priority", u64::from(u32::MAX))? as u32,
                ));
                i += 1;
            }
            "blackhole" => set_action(t, RuleAction::Blackhole)?,
            "unreachable" => set_action(t, RuleAction::Unreachable)?,
            "prohibit" => set_action(t, RuleAction::Prohibit)?,
            "nop" => set_action(t, RuleAction::Nop)?,
            "fwmark" => {
                let v = value(&w, i)?;
                let (mark, mask) = match v.text.split_once('/') {
                    Some((m, k)) => (m, Some(k)),
                    None => (v.text.as_str(), None),
                };
                let tok = |s: &str| {
                    let mut t = v.clone();
                    t.text = s.to_string();
                    t
                };
                let mark = number(&tok(mark), "a firewall mark", u64::from(u32::MAX))? as u32;
                let mask = match mask {
                    Some(k) => Some(number(&tok(k), "a mark mask", u64::from(u32::MAX))? as u32),
                    None => None,
                };
                r.fwmark = Some((mark, mask));
                i += 1;
            }
            "tos" | "dsfield" => {
                r.tos = number(value(&w, i)?, "a TOS value", 255)? as u8;
                i += 1;
            }
            "iif" | "dev" => {
                r.iif = Some(value(&w, i)?.text.clone());
                i += 1;
            }
            "oif" => {
                r.oif = Some(value(&w, i)?.text.clone());
                i += 1;
            }
            "suppress_prefixlength" => {
                r.suppress_prefixlen = Some(number(value(&w, i)?, "a prefix length", 128)? as u32);
                i += 1;
            }
            "inet" => family = Some(false),
            "inet6" => family = Some(true),
            "no_track" => r.no_track = true,
            "l3mdev" => unapplied(warn, t, "rule"),
            k if RULE_UNAPPLIED.contains(&k) => {
                unapplied(warn, t, "rule");
                value(&w, i)?;
                i += 1;
            }
            _ => {
                return err(
                    t,
                    format!(
                        "expected a rule option (from, to, table, priority, fwmark, iif, oif, ...), found `{}`",
                        t.text
                    ),
                );
            }
        }
        i += 1;
    }
    // `goto N` beside `table T` (keepalived's example does it): the rule
    // jumps; the table is not used.
    if let Some((t, p)) = goto {
        match action {
            Some(RuleAction::Table(_)) => {
                warn.push(Warning::at(
                    &t.loc,
                    "`goto` and `table` in one rule: the rule jumps, its table is not used",
                ));
                action = Some(RuleAction::Goto(p));
            }
            Some(_) => return err(t, "a second action `goto` in one rule"),
            None => action = Some(RuleAction::Goto(p)),
        }
    }
    let Some(a) = action else {
        return err(
            &n.key,
            "a rule needs an action: table/lookup T, goto N, blackhole, unreachable, prohibit or nop",
        );
    };
    r.action = a;
    let addrs: Vec<IpAddr> = r.from.iter().chain(r.to.iter()).map(|(a, _)| *a).collect();
    r.ipv6 = match (addrs.first(), family) {
        (Some(a), Some(f)) if a.is_ipv6() != f => {
            return err(
                &n.key,
                "the rule's addresses are not of the family it names",
            );
        }
        (Some(a), _) => a.is_ipv6(),
        (None, f) => f.unwrap_or(false),
    };
    if addrs.iter().any(|a| a.is_ipv6() != r.ipv6) {
        return err(&n.key, "a rule mixes IPv4 and IPv6 addresses");
    }
    Ok(r)
}

/// The note for a block with lines that have no `no_track`: keepalived
/// watches those and rvs does not.
pub(crate) fn untracked_note(loc: &Loc, keyword: &str) -> Warning {
    Warning::at(
        loc,
        format!(
            "`{keyword}`: rvs installs these but does not watch them (keepalived takes a master out of MASTER when a tracked one is deleted); add `no_track` to each line to say so"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LoadOptions, parse_str};

    fn lines(block: &str, line: &str) -> Result<crate::Loaded, String> {
        let text = format!("{block} {{\n  {line}\n}}\n");
        parse_str("t.conf", &text, &LoadOptions::default()).map_err(|e| e.to_string())
    }

    fn rt(line: &str) -> Result<IpRoute, String> {
        lines("static_routes", line).map(|l| l.config.static_routes[0].clone())
    }

    fn ru(line: &str) -> Result<IpRule, String> {
        lines("static_rules", line).map(|l| l.config.static_rules[0].clone())
    }

    /// `line` (the config's line 2) is refused with an error that names
    /// its place and says `what`.
    fn refused<T: std::fmt::Debug>(r: Result<T, String>, line: &str, what: &str) {
        let e = r.unwrap_err();
        assert!(
            e.contains(what) && e.starts_with("t.conf:2:"),
            "{line}: {e}"
        );
    }

    #[test]
    fn routes_read_keepalived_syntax() {
        let r = rt("src 10.0.0.2 10.5.0.0/16 via 10.0.0.1 dev eth0 scope global table 100 metric 7 proto static").unwrap();
        assert_eq!(r.dst, "10.5.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(r.dst_len, 16);
        assert_eq!(r.src, Some("10.0.0.2".parse().unwrap()));
        assert_eq!(r.via, vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(r.dev.as_deref(), Some("eth0"));
        assert_eq!(
            (r.scope, r.table, r.metric, r.proto),
            (Some(0), 100, Some(7), 4)
        );
        let b = rt("blackhole 2001:db8:5::/48 table main").unwrap();
        assert_eq!(b.kind, RouteType::Blackhole);
        assert_eq!((b.dst_len, b.table, b.proto), (48, 254, RTPROT_KEEPALIVED));
        let d = rt("default via inet6 fe80::1 or fe80::2 dev eth1 onlink no_track").unwrap();
        assert_eq!(d.dst, IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        assert_eq!(d.via.len(), 2);
        assert!(d.onlink && d.no_track);
        let to = rt("to 192.168.7.9/24 gw 10.0.0.1").unwrap();
        assert_eq!(
            to.dst,
            "192.168.7.0".parse::<IpAddr>().unwrap(),
            "host bits cleared"
        );
        let man = rt("2001:470:69e9:1:2::4 dev p33p1.2 table 6909 tos 0x04 protocol bird scope link priority 12 mtu 1000 hoplimit 100 advmss 101 rtt 102 rttvar 103 reordering 104 window 105 cwnd 106 ssthresh lock 107 rto_min 108 initcwnd 109 append initrwnd 110 features ecn fastopen_no_cookie 1").unwrap();
        assert_eq!(
            (man.table, man.proto, man.metric, man.scope),
            (6909, 12, Some(12), Some(253))
        );
        let host = rt("unreachable 10.9.9.9").unwrap();
        assert_eq!((host.kind, host.dst_len), (RouteType::Unreachable, 32));
    }

    #[test]
    fn bad_routes_are_located_errors() {
        for (line, what) in [
            ("10.0.0.0/33", "prefix length"),
            ("via 10.0.0.1", "needs a destination"),
            ("10.0.0.0/8 via 2001:db8::1", "mixes"),
            ("blackhole 10.0.0.0/8 via 10.0.0.1", "no gateway"),
            ("10.0.0.0/8 table", "after `table`"),
            ("10.0.0.0/8 table rvs", "rt_tables"),
            ("10.0.0.0/8 10.1.0.0/16", "unexpected"),
            ("10.0.0.0/8 or 10.0.0.1", "via ADDR"),
            ("local 10.0.0.1", "not supported"),
            ("10.0.0.0/8 nexthop via 10.0.0.1", "not supported"),
            ("10.0.0.0/8 metric x", "a metric"),
        ] {
            refused(rt(line), line, what);
        }
        let l = lines("static_routes", "10.0.0.0/8 dev eth0 mtu 1400 no_track").unwrap();
        assert_eq!(l.config.static_routes[0].dev.as_deref(), Some("eth0"));
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        let w = l.warnings[0].to_string();
        assert!(
            w.contains("`mtu` is not applied") && w.starts_with("t.conf:2:"),
            "{w}"
        );
    }

    #[test]
    fn rules_read_keepalived_syntax() {
        let r = ru(
            "from 10.6.0.0/24 to all table 1000 priority 100 fwmark 0x10/0xff iif eth0 no_track",
        )
        .unwrap();
        assert_eq!(r.from, Some(("10.6.0.0".parse().unwrap(), 24)));
        assert_eq!(r.to, None);
        assert_eq!(r.action, RuleAction::Table(1000));
        assert_eq!(r.priority, Some(100));
        assert_eq!(r.fwmark, Some((16, Some(255))));
        assert!(!r.ipv6 && r.no_track);
        let v6 = ru("to 2001:db8:6::/48 not blackhole").unwrap();
        assert!(v6.ipv6 && v6.invert);
        assert_eq!(v6.action, RuleAction::Blackhole);
        assert!(ru("fwmark 3 lookup main inet6").unwrap().ipv6);
        assert!(!ru("oif eth1 goto 200 pref 50").unwrap().ipv6);
        let l = lines("static_rules", "from 10.8.0.0/24 to 10.9.0.0/26 table 7 iif p33p1 oif wlan0 tos 22 fwmark 24/12 preference 39 realms 30/20 goto 40").unwrap();
        assert_eq!(l.config.static_rules[0].action, RuleAction::Goto(40));
        assert_eq!(l.config.static_rules[0].fwmark, Some((24, Some(12))));
        assert_eq!(
            l.warnings.len(),
            3,
            "realms, goto beside table, untracked: {:?}",
            l.warnings
        );
        for (line, what) in [
            ("from 10.0.0.0/8", "needs an action"),
            ("from 10.0.0.0/8 table 1 blackhole", "second action"),
            ("from 10.0.0.0/8 to 2001:db8::/32 table 1", "mixes"),
            ("from 10.0.0.0/8 inet6 table 1", "family"),
            ("frm 10.0.0.0/8 table 1", "expected a rule option"),
        ] {
            refused(ru(line), line, what);
        }
    }
}
