//! From the block tree to the typed model: one function per block type,
//! keyword sets taken from keepalived's `check_parser.c`, `vrrp_parser.c`
//! and `global_parser.c` (plus the Alibaba FULLNAT keywords).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rvs_core::model::{
    AddrFamily, ForwardMethod, PersistMask, Protocol, SchedFlags, Tunnel, TunnelCsum, TunnelType,
};

use crate::iproute;
use crate::keywords::{self, Block, Outcome};
use crate::lexer::{Kind, Node, Token};
use crate::model::*;
use crate::{ConfigError, Loc, Warning};
use rvs_core::sched::Scheduler;

type R<T> = Result<T, ConfigError>;

fn loc_of(t: &Token) -> Loc {
    t.loc.clone()
}

fn err<T>(t: &Token, msg: impl Into<String>) -> R<T> {
    Err(ConfigError::at(&t.loc, msg))
}

struct Ctx<'a> {
    w: &'a mut Vec<Warning>,
}

impl Ctx<'_> {
    fn warn(&mut self, t: &Token, msg: impl Into<String>) {
        self.w.push(Warning::at(&t.loc, msg));
    }

    fn unknown(&mut self, n: &Node, block: &str, kind: Block) {
        let with = if n.block.is_some() {
            " (and its block)"
        } else {
            ""
        };
        let hint = match keywords::suggest(kind, &n.key.text) {
            Some(k) => format!("; did you mean `{k}`?"),
            None => String::new(),
        };
        self.w.push(Warning::unknown(
            &n.key.loc,
            format!(
                "unknown keyword `{}` in {block}; skipped{with}{hint}",
                n.key.text
            ),
        ));
    }

    /// The keyword audit ([`keywords::TABLE`]): warn for a keyword rvs
    /// does not apply, refuse one it must not run without. Whether the
    /// keyword is listed (and so known, even if nothing reads it).
    fn audit(&mut self, kind: Block, n: &Node) -> R<bool> {
        match keywords::outcome(kind, &n.key.text) {
            None | Some(Outcome::Applied(_)) => Ok(false),
            Some(Outcome::Quiet(_)) => Ok(true),
            Some(Outcome::NotApplied(why)) => {
                self.w
                    .push(Warning::not_applied(&n.key.loc, &n.key.text, why));
                Ok(true)
            }
            Some(Outcome::Refused(why)) => err(
                &n.key,
                format!("`{}` is refused by rvs ({why})", n.key.text),
            ),
        }
    }

    fn max_args(&mut self, n: &Node, max: usize) {
        if n.args.len() > max {
            let rest: Vec<&str> = n.args[max..].iter().map(|t| t.text.as_str()).collect();
            self.warn(
                &n.args[max],
                format!(
                    "`{}` takes at most {max} argument(s); ignoring `{}` (keepalived reads one keyword per line)",
                    n.key.text,
                    rest.join(" ")
                ),
            );
        }
    }
}

fn arg<'n>(n: &'n Node, i: usize, what: &str) -> R<&'n Token> {
    n.args.get(i).ok_or_else(|| {
        ConfigError::at(
            &n.key.loc,
            format!("expected {what} after `{}`, found end of line", n.key.text),
        )
    })
}

fn block(n: &Node) -> R<&[Node]> {
    n.block.as_deref().ok_or_else(|| {
        ConfigError::at(
            &n.key.loc,
            format!(
                "expected `{{` opening the `{}` block, found end of line",
                n.key.text
            ),
        )
    })
}

pub(crate) fn num<T: TryFrom<u64>>(t: &Token, what: &str, min: u64, max: u64) -> R<T> {
    let v: Option<u64> = t
        .text
        .parse::<u64>()
        .ok()
        .filter(|v| (min..=max).contains(v));
    match v.and_then(|v| T::try_from(v).ok()) {
        Some(v) => Ok(v),
        None => err(
            t,
            format!("expected {what} ({min}-{max}), found `{}`", t.text),
        ),
    }
}

fn int(t: &Token, what: &str, min: i64, max: i64) -> R<i64> {
    match t
        .text
        .parse::<i64>()
        .ok()
        .filter(|v| (min..=max).contains(v))
    {
        Some(v) => Ok(v),
        None => err(
            t,
            format!("expected {what} ({min}..{max}), found `{}`", t.text),
        ),
    }
}

fn port(t: &Token) -> R<u16> {
    num(t, "a port number", 0, 65535)
}

/// `<TIMER>`: seconds, optionally with a fractional part (µs resolution).
fn timer(t: &Token) -> R<Duration> {
    let s = t.text.as_str();
    let (whole, frac) = match s.split_once('.') {
        Some((w, f)) => (w, f),
        None => (s, ""),
    };
    let ok = !s.is_empty()
        && whole.chars().all(|c| c.is_ascii_digit())
        && frac.chars().all(|c| c.is_ascii_digit())
        && !(whole.is_empty() && frac.is_empty());
    let secs: Option<u64> = if whole.is_empty() {
        Some(0)
    } else {
        whole.parse().ok()
    };
    match (ok, secs) {
        (true, Some(secs)) if secs <= u64::from(u32::MAX) => {
            let mut micros = 0u32;
            for (i, c) in frac.chars().take(6).enumerate() {
                let d = c.to_digit(10).unwrap_or(0);
                micros += d * 10u32.pow(5 - u32::try_from(i).unwrap_or(5));
            }
            Ok(Duration::from_secs(secs) + Duration::from_micros(u64::from(micros)))
        }
        _ => err(
            t,
            format!(
                "expected a time in seconds (e.g. 3 or 0.5), found `{}`",
                t.text
            ),
        ),
    }
}

fn boolean(t: &Token) -> R<bool> {
    match t.text.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => err(
            t,
            format!(
                "expected a boolean (on|off|true|false|yes|no), found `{}`",
                t.text
            ),
        ),
    }
}

/// A flag keyword with an optional `<BOOL>`.
fn flag(n: &Node) -> R<bool> {
    match n.args.first() {
        Some(t) => boolean(t),
        None => Ok(true),
    }
}

pub(crate) fn ip(t: &Token) -> R<IpAddr> {
    t.text
        .parse::<IpAddr>()
        .or_else(|_| err(t, format!("expected an IP address, found `{}`", t.text)))
}

fn string(n: &Node, what: &str) -> R<String> {
    Ok(arg(n, 0, what)?.text.clone())
}

fn script(n: &Node) -> R<Script> {
    let cmd = arg(n, 0, "a script")?;
    let user = if n.args.len() > 1 {
        Some(
            n.args[1..]
                .iter()
                .map(|t| t.text.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        )
    } else {
        None
    };
    Ok(Script {
        command: cmd.text.clone(),
        user,
    })
}

/// `NAT|DR|TUN [type ipip|gue port N|gre|geneve [nocsum|csum|remcsum]]|FNAT`
/// (keepalived 2.2's form; `geneve`, UDP 6081, is rvs's own).
fn lvs_method(n: &Node) -> R<ForwardMethod> {
    let t = arg(n, 0, "a forwarding method (NAT|DR|TUN|FNAT)")?;
    match t.text.as_str() {
        "NAT" => Ok(ForwardMethod::Masq),
        "DR" => Ok(ForwardMethod::Route),
        "FNAT" | "FULLNAT" => Ok(ForwardMethod::FullNat),
        "TUN" => {
            let mut tun = Tunnel::default();
            let mut i = 1;
            while i < n.args.len() {
                let a = &n.args[i];
                match a.text.as_str() {
                    "type" => {
                        let k = arg(n, i + 1, "a tunnel type (ipip|gue|gre|geneve)")?;
                        tun.kind = match k.text.as_str() {
                            "ipip" => TunnelType::Ipip,
                            "gue" => TunnelType::Gue,
                            "gre" => TunnelType::Gre,
                            "geneve" => TunnelType::Geneve,
                            _ => {
                                return err(
                                    k,
                                    format!(
                                        "expected a tunnel type (ipip|gue|gre|geneve), found `{}`",
                                        k.text
                                    ),
                                );
                            }
                        };
                        i += 2;
                    }
                    "port" => {
                        tun.port = num(arg(n, i + 1, "a port number")?, "a port number", 1, 65535)?;
                        i += 2;
                    }
                    "nocsum" => {
                        tun.csum = TunnelCsum::NoCsum;
                        i += 1;
                    }
                    "csum" => {
                        tun.csum = TunnelCsum::Csum;
                        i += 1;
                    }
                    "remcsum" => {
                        tun.csum = TunnelCsum::RemCsum;
                        i += 1;
                    }
                    _ => {
                        return err(
                            a,
                            format!(
                                "expected `type`, `port`, `nocsum`, `csum` or `remcsum`, found `{}`",
                                a.text
                            ),
                        );
                    }
                }
            }
            if tun.kind == TunnelType::Gue && tun.port == 0 {
                return err(t, "expected `port N` for a GUE tunnel, found none");
            }
            if matches!(tun.kind, TunnelType::Gre | TunnelType::Geneve)
                && tun.csum == TunnelCsum::RemCsum
            {
                return err(
                    t,
                    format!(
                        "expected `nocsum` or `csum` for a {} tunnel, found `remcsum`",
                        tun.kind.name()
                    ),
                );
            }
            if tun.kind == TunnelType::Geneve && tun.port != 0 {
                return err(
                    t,
                    "expected no `port` for a geneve tunnel (it uses UDP 6081), found one",
                );
            }
            Ok(ForwardMethod::Tunnel(tun))
        }
        _ => err(
            t,
            format!(
                "expected a forwarding method (NAT|DR|TUN|FNAT), found `{}`",
                t.text
            ),
        ),
    }
}

/// `a.b.c.d`, `a.b.c.d-e`, `a.b.c.d-e.f.g.h`, `a.b.c.d/nn` (and IPv6
/// equivalents, the short range form giving the last 16-bit group in hex).
pub(crate) fn addr_range(t: &Token) -> R<(IpAddr, IpAddr)> {
    let s = t.text.as_str();
    let bad = || {
        err(
            t,
            format!(
                "expected an IP address or range (a.b.c.d, a.b.c.d-e, a.b.c.d-e.f.g.h, a.b.c.d/nn), found `{s}`"
            ),
        )
    };
    if let Some((a, p)) = s.split_once('/') {
        let Ok(addr) = a.parse::<IpAddr>() else {
            return bad();
        };
        let Ok(prefix) = p.parse::<u32>() else {
            return bad();
        };
        return match addr {
            IpAddr::V4(v) if prefix <= 32 => {
                let mask = if prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - prefix)
                };
                let first = u32::from(v) & mask;
                Ok((IpAddr::V4(first.into()), IpAddr::V4((first | !mask).into())))
            }
            IpAddr::V6(v) if prefix <= 128 => {
                let mask = if prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - prefix)
                };
                let first = u128::from(v) & mask;
                Ok((IpAddr::V6(first.into()), IpAddr::V6((first | !mask).into())))
            }
            _ => bad(),
        };
    }
    if let Some((a, b)) = s.rsplit_once('-') {
        let Ok(first) = a.parse::<IpAddr>() else {
            return bad();
        };
        let last = match (first, b.parse::<IpAddr>()) {
            (IpAddr::V4(_), Ok(IpAddr::V4(l))) => IpAddr::V4(l),
            (IpAddr::V6(_), Ok(IpAddr::V6(l))) => IpAddr::V6(l),
            (IpAddr::V4(f), Err(_)) => {
                let Ok(end) = b.parse::<u8>() else {
                    return bad();
                };
                let o = f.octets();
                IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], end))
            }
            (IpAddr::V6(f), Err(_)) => {
                let Ok(end) = u16::from_str_radix(b, 16) else {
                    return bad();
                };
                let mut seg = f.segments();
                seg[7] = end;
                IpAddr::V6(seg.into())
            }
            _ => return bad(),
        };
        let ordered = match (first, last) {
            (IpAddr::V4(f), IpAddr::V4(l)) => u32::from(f) <= u32::from(l),
            (IpAddr::V6(f), IpAddr::V6(l)) => u128::from(f) <= u128::from(l),
            _ => false,
        };
        if !ordered {
            return err(
                t,
                format!("expected the range end to be at or above its start, found `{s}`"),
            );
        }
        return Ok((first, last));
    }
    match s.parse::<IpAddr>() {
        Ok(a) => Ok((a, a)),
        Err(_) => bad(),
    }
}

fn family(t: &Token) -> R<AddrFamily> {
    match t.text.as_str() {
        "inet" => Ok(AddrFamily::Inet),
        "inet6" => Ok(AddrFamily::Inet6),
        _ => err(t, format!("expected `inet` or `inet6`, found `{}`", t.text)),
    }
}

pub(crate) fn parse(tree: &[Node], w: &mut Vec<Warning>) -> R<KeepalivedConf> {
    let mut c = Ctx { w };
    let mut conf = KeepalivedConf::default();
    for n in tree {
        let listed = c.audit(Block::Top, n)?;
        match n.key.text.as_str() {
            "global_defs" => global_defs(&mut c, n, &mut conf.global)?,
            "SSL" => conf.ssl = Some(ssl(&mut c, n)?),
            "virtual_server_group" => conf.vs_groups.push(vsg(&mut c, n)?),
            "virtual_server" => conf.virtual_servers.push(virtual_server(&mut c, n)?),
            "local_address_group" => conf.local_address_groups.push(laddr_group(&mut c, n)?),
            "vrrp_script" => conf.vrrp_scripts.push(vrrp_script(&mut c, n)?),
            "vrrp_sync_group" => conf.vrrp_sync_groups.push(sync_group(&mut c, n)?),
            "vrrp_instance" => conf.vrrp_instances.push(vrrp_instance(&mut c, n)?),
            "track_file" | "vrrp_track_file" => conf.track_files.push(track_file(&mut c, n)?),
            "vrrp_track_process" | "track_process" => {
                conf.track_processes.push(track_process(&mut c, n)?)
            }
            "static_ipaddress" => {
                let v = vips(&mut c, n)?;
                conf.static_ipaddress.extend(v);
            }
            "static_routes" => {
                let v = routes(&mut c, n)?;
                conf.static_routes.extend(v);
            }
            "static_rules" => {
                let v = rules(&mut c, n)?;
                conf.static_rules.extend(v);
            }
            _ if listed => {}
            _ => c.unknown(n, "the top level", Block::Top),
        }
    }
    Ok(conf)
}

fn global_defs(c: &mut Ctx<'_>, n: &Node, g: &mut GlobalDefs) -> R<()> {
    for k in block(n)? {
        let listed = c.audit(Block::Global, k)?;
        let key = k.key.text.as_str();
        match key {
            "router_id" => g.router_id = Some(string(k, "a router id")?),
            "notification_email" => {
                for e in k.block.as_deref().unwrap_or(&[]) {
                    g.notification_email.push(e.key.text.clone());
                }
            }
            "notification_email_from" => {
                g.notification_email_from = Some(string(k, "an e-mail address")?)
            }
            "smtp_server" => {
                let host = string(k, "an SMTP server")?;
                let p = k.args.get(1).map(port).transpose()?;
                g.smtp_server = Some((host, p));
            }
            "smtp_connect_timeout" => {
                g.smtp_connect_timeout = Some(timer(arg(k, 0, "a time in seconds")?)?)
            }
            "smtp_helo_name" => g.smtp_helo_name = Some(string(k, "a HELO name")?),
            "smtp_alert" => g.smtp_alert = Some(flag(k)?),
            "smtp_alert_vrrp" => g.smtp_alert_vrrp = Some(flag(k)?),
            "smtp_alert_checker" => g.smtp_alert_checker = Some(flag(k)?),
            "no_checker_emails" => g.no_checker_emails = flag(k)?,
            "no_email_faults" => g.no_email_faults = flag(k)?,
            "rs_init_notifies" => g.rs_init_notifies = flag(k)?,
            "email_faults" => g.no_email_faults = !flag(k)?,
            "vrrp_down_timer_adverts" => {
                g.vrrp_down_timer_adverts = Some(num(arg(k, 0, "a count")?, "a count", 1, 100)?)
            }
            "net_namespace" => g.net_namespace = Some(string(k, "a network namespace name")?),
            "lvs_timeouts" => {
                let mut t = LvsTimeouts::default();
                let mut i = 0;
                while i < k.args.len() {
                    let which = &k.args[i];
                    let v: u32 = num(
                        arg(k, i + 1, "a timeout in seconds")?,
                        "a timeout in seconds",
                        0,
                        u64::from(u32::MAX),
                    )?;
                    match which.text.as_str() {
                        "tcp" => t.tcp = Some(v),
                        "tcpfin" => t.tcpfin = Some(v),
                        "udp" => t.udp = Some(v),
                        _ => {
                            return err(
                                which,
                                format!(
                                    "expected `tcp`, `tcpfin` or `udp`, found `{}`",
                                    which.text
                                ),
                            );
                        }
                    }
                    i += 2;
                }
                g.lvs_timeouts = Some(t);
            }
            "lvs_sync_daemon" => g.lvs_sync_daemon = Some(sync_daemon(k)?),
            "lvs_flush" => g.lvs_flush = true,
            "lvs_flush_on_stop" => {
                g.lvs_flush_on_stop = Some(matches!(k.args.first(), Some(t) if t.text == "VS"))
            }
            "vrrp_version" => {
                g.vrrp_version = num(arg(k, 0, "a VRRP version")?, "a VRRP version", 2, 3)?
            }
            "vrrp_strict" => g.vrrp_strict = true,
            "vrrp_mcast_group4" => {
                let t = arg(k, 0, "an IPv4 multicast address")?;
                g.vrrp_mcast_group4 = t.text.parse().or_else(|_| {
                    err(
                        t,
                        format!("expected an IPv4 multicast address, found `{}`", t.text),
                    )
                })?;
            }
            "vrrp_mcast_group6" => {
                let t = arg(k, 0, "an IPv6 multicast address")?;
                g.vrrp_mcast_group6 = t.text.parse().or_else(|_| {
                    err(
                        t,
                        format!("expected an IPv6 multicast address, found `{}`", t.text),
                    )
                })?;
            }
            "vrrp_garp_master_delay" => g.vrrp_garp_master_delay = timer(arg(k, 0, "a delay")?)?,
            "vrrp_garp_master_repeat" => {
                g.vrrp_garp_master_repeat = num(arg(k, 0, "a count")?, "a count", 1, 255)?
            }
            "vrrp_garp_master_refresh" => {
                g.vrrp_garp_master_refresh = timer(arg(k, 0, "a refresh interval")?)?
            }
            "vrrp_garp_master_refresh_repeat" => {
                g.vrrp_garp_master_refresh_repeat = num(arg(k, 0, "a count")?, "a count", 1, 255)?
            }
            "vrrp_skip_check_adv_addr" => g.vrrp_skip_check_adv_addr = flag(k)?,
            "vrrp_check_unicast_src" => g.vrrp_check_unicast_src = true,
            "v3_checksum_as_v2" => g.v3_checksum_as_v2 = true,
            "enable_script_security" => g.enable_script_security = true,
            "script_user" => {
                g.script_user = Some(
                    k.args
                        .iter()
                        .map(|t| t.text.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                )
            }
            "checker_log_all_failures" => g.checker_log_all_failures = flag(k)?,
            "notify_fifo" | "vrrp_notify_fifo" | "lvs_notify_fifo" => {
                let f = fifo_slot(g, key);
                f.path = Some(string(k, "a FIFO path")?);
                f.owner = words_after(k, 1);
                f.loc = Some(loc_of(&k.key));
            }
            "notify_fifo_script" | "vrrp_notify_fifo_script" | "lvs_notify_fifo_script" => {
                let f = fifo_slot(g, key.trim_end_matches("_script"));
                f.script = Some(script(k)?);
                f.loc.get_or_insert_with(|| loc_of(&k.key));
            }
            _ if listed => g.unused.push((
                key.to_owned(),
                k.args.iter().map(|t| t.text.clone()).collect(),
            )),
            _ => c.unknown(k, "global_defs", Block::Global),
        }
    }
    Ok(())
}

/// The FIFO a `*notify_fifo` keyword sets.
fn fifo_slot<'g>(g: &'g mut GlobalDefs, key: &str) -> &'g mut NotifyFifo {
    match key {
        "vrrp_notify_fifo" => &mut g.vrrp_notify_fifo,
        "lvs_notify_fifo" => &mut g.lvs_notify_fifo,
        _ => &mut g.notify_fifo,
    }
}

/// The arguments from `from` on, joined by a space (`USER [GROUP]`).
fn words_after(n: &Node, from: usize) -> Option<String> {
    (n.args.len() > from).then(|| {
        n.args[from..]
            .iter()
            .map(|t| t.text.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    })
}

fn sync_daemon(k: &Node) -> R<LvsSyncDaemon> {
    let mut d = LvsSyncDaemon {
        interface: string(k, "an interface name")?,
        ..Default::default()
    };
    let mut i = 1;
    while i < k.args.len() {
        let a = &k.args[i];
        let val = |what| arg(k, i + 1, what);
        match a.text.as_str() {
            "inst" => d.instance = Some(val("a VRRP instance name")?.text.clone()),
            "id" => d.syncid = Some(num(val("a sync id")?, "a sync id", 0, 255)?),
            "maxlen" => d.maxlen = Some(num(val("a length")?, "a message length", 1, 65507)?),
            "port" => d.port = Some(num(val("a port number")?, "a port number", 1, 65535)?),
            "ttl" => d.ttl = Some(num(val("a TTL")?, "a TTL", 1, 255)?),
            "group" => d.group = Some(ip(val("a multicast group")?)?),
            _ if i == 1 => {
                d.instance = Some(a.text.clone());
                i += 1;
                continue;
            }
            _ => {
                return err(
                    a,
                    format!(
                        "expected `inst`, `id`, `maxlen`, `port`, `ttl` or `group`, found `{}`",
                        a.text
                    ),
                );
            }
        }
        i += 2;
    }
    Ok(d)
}

fn ssl(c: &mut Ctx<'_>, n: &Node) -> R<SslConfig> {
    let mut s = SslConfig::default();
    for k in block(n)? {
        c.audit(Block::Ssl, k)?;
        match k.key.text.as_str() {
            "password" => s.password = Some(string(k, "a password")?),
            "ca" => s.ca = Some(string(k, "a file name")?),
            "certificate" => s.certificate = Some(string(k, "a file name")?),
            "key" => s.key = Some(string(k, "a file name")?),
            _ => c.unknown(k, "SSL", Block::Ssl),
        }
    }
    Ok(s)
}

fn vsg(c: &mut Ctx<'_>, n: &Node) -> R<VirtualServerGroup> {
    let name = string(n, "a group name")?;
    let mut entries = Vec::new();
    for k in block(n)? {
        if k.key.text == "fwmark" {
            let mark = num(
                arg(k, 0, "a firewall mark")?,
                "a firewall mark",
                1,
                u64::from(u32::MAX),
            )?;
            let fam = k.args.get(1).map(family).transpose()?;
            c.max_args(k, 2);
            entries.push(VsgEntry::Fwmark {
                mark,
                family: fam,
                loc: loc_of(&k.key),
            });
        } else {
            let (first, last) = addr_range(&k.key)?;
            let p = k.args.first().map(port).transpose()?.unwrap_or(0);
            c.max_args(k, 1);
            if let Some(VsgEntry::Range { first: f0, .. }) =
                entries.iter().find(|e| matches!(e, VsgEntry::Range { .. }))
                && AddrFamily::of(f0) != AddrFamily::of(&first)
            {
                return err(
                    &k.key,
                    format!(
                        "expected an address of the same family as the group's first address, found `{}`",
                        k.key.text
                    ),
                );
            }
            entries.push(VsgEntry::Range {
                first,
                last,
                port: p,
                loc: loc_of(&k.key),
            });
        }
    }
    if entries.is_empty() {
        c.warn(
            &n.key,
            format!("virtual_server_group `{name}` has no entries"),
        );
    }
    Ok(VirtualServerGroup {
        name,
        entries,
        loc: loc_of(&n.key),
    })
}

fn laddr_group(c: &mut Ctx<'_>, n: &Node) -> R<LocalAddressGroup> {
    let name = string(n, "a group name")?;
    let mut ranges = Vec::new();
    for k in block(n)? {
        ranges.push(addr_range(&k.key)?);
        c.max_args(k, 0);
    }
    Ok(LocalAddressGroup {
        name,
        ranges,
        loc: loc_of(&n.key),
    })
}

fn virtual_server(c: &mut Ctx<'_>, n: &Node) -> R<VirtualServer> {
    let first = arg(n, 0, "an address, `fwmark N` or `group NAME`")?;
    let target = match first.text.as_str() {
        "fwmark" => VsTarget::Fwmark(num(
            arg(n, 1, "a firewall mark")?,
            "a firewall mark",
            1,
            u64::from(u32::MAX),
        )?),
        "group" => VsTarget::Group(arg(n, 1, "a group name")?.text.clone()),
        _ => VsTarget::Addr {
            addr: ip(first)?,
            port: n.args.get(1).map(port).transpose()?.unwrap_or(0),
        },
    };
    c.max_args(n, 2);
    let mut vs = VirtualServer {
        target,
        loc: loc_of(&n.key),
        delay_loop: DEFAULT_DELAY_LOOP,
        scheduler: None,
        flags: SchedFlags::default(),
        hashed: false,
        ops: false,
        lvs_method: None,
        forward: ForwardMethod::Masq,
        persistence_engine: None,
        persistence_timeout: None,
        persistence_granularity: None,
        protocol: None,
        ha_suspend: false,
        alpha: false,
        omega: false,
        quorum: 1,
        hysteresis: 0,
        quorum_up: None,
        quorum_down: None,
        ip_family: None,
        virtualhost: None,
        snmp_name: None,
        sorry_server: None,
        connect_timeout: None,
        retry: None,
        delay_before_retry: None,
        warmup: None,
        inhibit_on_failure: false,
        smtp_alert: None,
        laddr_group_name: None,
        syn_proxy: false,
        nat_mask: None,
        mh_table_size: None,
        proxy_protocol: None,
        max_conns: 0,
        quic_lb: Vec::new(),
        real_servers: Vec::new(),
    };
    let mut sorry_inhibit = false;
    let mut sorry_method: Option<ForwardMethod> = None;
    for k in block(n)? {
        let listed = c.audit(Block::VirtualServer, k)?;
        let key = k.key.text.as_str();
        match key {
            "delay_loop" => vs.delay_loop = timer(arg(k, 0, "a time in seconds")?)?,
            "lvs_sched" | "lb_algo" => {
                let t = arg(k, 0, "a scheduler name")?;
                match t.text.parse::<Scheduler>() {
                    Ok(s) => vs.scheduler = Some(s),
                    Err(_) => {
                        let names: Vec<&str> = Scheduler::all().map(Scheduler::name).collect();
                        return err(
                            t,
                            format!(
                                "expected a scheduler ({}), found `{}`",
                                names.join("|"),
                                t.text
                            ),
                        );
                    }
                }
            }
            "hashed" => vs.hashed = true,
            "ops" => vs.ops = true,
            "flag-1" | "sh-fallback" | "mh-fallback" => {
                vs.flags = vs.flags.union(SchedFlags::FLAG1)
            }
            "flag-2" | "sh-port" | "mh-port" => vs.flags = vs.flags.union(SchedFlags::FLAG2),
            "flag-3" => vs.flags = vs.flags.union(SchedFlags::FLAG3),
            "lvs_method" | "lb_kind" => vs.lvs_method = Some(lvs_method(k)?),
            "persistence_engine" => {
                let t = arg(k, 0, "a persistence engine")?;
                if t.text != "sip" {
                    return err(
                        t,
                        format!("expected a persistence engine (sip), found `{}`", t.text),
                    );
                }
                vs.persistence_engine = Some(t.text.clone());
            }
            "persistence_timeout" => {
                vs.persistence_timeout = Some(match k.args.first() {
                    None => rvs_core::model::DEFAULT_PERSISTENCE_TIMEOUT,
                    Some(t) => num(
                        t,
                        "a persistence timeout in seconds",
                        1,
                        u64::from(rvs_core::model::MAX_PERSISTENCE_TIMEOUT),
                    )?,
                })
            }
            "persistence_granularity" => {
                let t = arg(k, 0, "a netmask or IPv6 prefix length")?;
                let mask = if t.text.contains('.') {
                    let m: Ipv4Addr = t.text.parse().or_else(|_| {
                        err(t, format!("expected an IPv4 netmask, found `{}`", t.text))
                    })?;
                    let v = u32::from(m);
                    if v.leading_ones() + v.trailing_zeros() != 32 {
                        return err(
                            t,
                            format!("expected a contiguous IPv4 netmask, found `{}`", t.text),
                        );
                    }
                    PersistMask::V4(m)
                } else {
                    PersistMask::V6(num(t, "an IPv6 prefix length", 1, 128)?)
                };
                vs.persistence_granularity = Some(mask);
                if vs.persistence_timeout.is_none() {
                    vs.persistence_timeout = Some(rvs_core::model::DEFAULT_PERSISTENCE_TIMEOUT);
                }
            }
            "protocol" => {
                let t = arg(k, 0, "a protocol")?;
                vs.protocol = Some(match t.text.to_ascii_uppercase().as_str() {
                    "TCP" => Protocol::Tcp,
                    "UDP" => Protocol::Udp,
                    "SCTP" => Protocol::Sctp,
                    _ => {
                        return err(
                            t,
                            format!("expected a protocol (TCP|UDP|SCTP), found `{}`", t.text),
                        );
                    }
                });
            }
            "ha_suspend" => vs.ha_suspend = true,
            "alpha" => vs.alpha = flag(k)?,
            "omega" => vs.omega = flag(k)?,
            "quorum" => {
                vs.quorum = num(
                    arg(k, 0, "a quorum")?,
                    "a quorum weight",
                    1,
                    u64::from(u32::MAX),
                )?
            }
            "hysteresis" => {
                vs.hysteresis = num(
                    arg(k, 0, "a hysteresis")?,
                    "a hysteresis weight",
                    0,
                    u64::from(u32::MAX),
                )?
            }
            "quorum_up" => vs.quorum_up = Some(script(k)?),
            "quorum_down" => vs.quorum_down = Some(script(k)?),
            "ip_family" => vs.ip_family = Some(family(arg(k, 0, "an address family")?)?),
            "virtualhost" => vs.virtualhost = Some(string(k, "a host name")?),
            "snmp_name" => vs.snmp_name = Some(string(k, "a name")?),
            "sorry_server" => {
                let a = ip(arg(k, 0, "an IP address")?)?;
                let p = k.args.get(1).map(port).transpose()?.unwrap_or(0);
                vs.sorry_server = Some(SorryServer {
                    addr: a,
                    port: p,
                    inhibit: false,
                    lvs_method: None,
                    forward: ForwardMethod::Masq,
                });
            }
            "sorry_server_inhibit" => sorry_inhibit = flag(k)?,
            "sorry_server_lvs_method" => sorry_method = Some(lvs_method(k)?),
            "connect_timeout" => vs.connect_timeout = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "retry" | "nb_get_retry" => vs.retry = Some(retry(k)?),
            "delay_before_retry" => {
                vs.delay_before_retry = Some(timer(arg(k, 0, "a time in seconds")?)?)
            }
            "warmup" => vs.warmup = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "inhibit_on_failure" => vs.inhibit_on_failure = flag(k)?,
            "smtp_alert" => vs.smtp_alert = Some(flag(k)?),
            "laddr_group_name" => {
                vs.laddr_group_name = Some(string(k, "a local address group name")?)
            }
            "syn_proxy" => vs.syn_proxy = flag(k)?,
            "nat_mask" => {
                let t = arg(k, 0, "a netmask")?;
                vs.nat_mask = Some(t.text.parse().or_else(|_| {
                    err(t, format!("expected an IPv4 netmask, found `{}`", t.text))
                })?);
            }
            "mh_table_size" => {
                let t = arg(k, 0, "a table size")?;
                let v: u32 = num(t, "a Maglev table size", 1, 1 << 24)?;
                if !is_prime(v) {
                    return err(
                        t,
                        format!("expected a prime Maglev table size, found `{v}`"),
                    );
                }
                vs.mh_table_size = Some(v);
            }
            "proxy_protocol" => vs.proxy_protocol = Some(proxy_protocol(k)?),
            "max_conns" => {
                vs.max_conns = num(
                    arg(k, 0, "a connection count")?,
                    "a connection count",
                    0,
                    u64::from(u32::MAX),
                )?
            }
            "quic_lb" => {
                let q = quic_lb(c, k)?;
                if vs.quic_lb.iter().any(|p| p.rotation == q.rotation) {
                    return err(
                        &k.key,
                        format!(
                            "a second `quic_lb` with config rotation codepoint {}",
                            q.rotation
                        ),
                    );
                }
                if let Some(p) = vs.quic_lb.first()
                    && p.server_id_len != q.server_id_len
                {
                    return err(
                        &k.key,
                        format!(
                            "`quic_lb` blocks of a virtual server must share one server_id_len ({} and {}): rotation changes the key or nonce length, not the servers' IDs",
                            p.server_id_len, q.server_id_len
                        ),
                    );
                }
                vs.quic_lb.push(q);
            }
            "real_server" => vs.real_servers.push(real_server(c, k)?),
            _ if listed => {}
            _ => c.unknown(k, "virtual_server", Block::VirtualServer),
        }
        if !matches!(
            key,
            "real_server" | "lvs_method" | "lb_kind" | "sorry_server_lvs_method" | "script_user"
        ) {
            let max = match key {
                "sorry_server" | "lvs_sched" | "lb_algo" => 2,
                "quorum_up" | "quorum_down" => 3,
                _ => 1,
            };
            if k.block.is_none() {
                c.max_args(k, max);
            }
        }
    }
    if let Some(s) = &mut vs.sorry_server {
        s.inhibit = sorry_inhibit;
        s.lvs_method = sorry_method;
    }
    Ok(vs)
}

fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while u64::from(d) * u64::from(d) <= u64::from(n) {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

fn retry(k: &Node) -> R<u32> {
    num(
        arg(k, 0, "a retry count")?,
        "a retry count",
        0,
        u64::from(u32::MAX),
    )
}

/// rvs extension: `proxy_protocol v1|v2`.
fn proxy_protocol(k: &Node) -> R<rvs_core::model::ProxyProtocol> {
    let t = arg(k, 0, "v1 or v2")?;
    match t.text.as_str() {
        "v1" | "1" => Ok(rvs_core::model::ProxyProtocol::V1),
        "v2" | "2" => Ok(rvs_core::model::ProxyProtocol::V2),
        other => err(t, format!("expected v1 or v2, found `{other}`")),
    }
}

/// rvs extension: `quic_lb { rotation N server_id_len N nonce_len N [key
/// HEX32] }`, one QUIC-LB configuration of the virtual server.
fn quic_lb(c: &mut Ctx<'_>, n: &Node) -> R<rvs_core::model::QuicLbConfig> {
    c.max_args(n, 0);
    let (mut rotation, mut sid, mut nonce, mut key) = (None, None, None, None);
    for k in block(n)? {
        let listed = c.audit(Block::QuicLb, k)?;
        match k.key.text.as_str() {
            "rotation" => {
                rotation = Some(num(
                    arg(k, 0, "a config rotation codepoint")?,
                    "a config rotation codepoint (0..=6)",
                    0,
                    6,
                )?)
            }
            "server_id_len" => {
                sid = Some(num(
                    arg(k, 0, "a server ID length")?,
                    "a server ID length in bytes (1..=15)",
                    1,
                    15,
                )?)
            }
            "nonce_len" => {
                nonce = Some(num(
                    arg(k, 0, "a nonce length")?,
                    "a nonce length in bytes (4..=18)",
                    4,
                    18,
                )?)
            }
            "key" => {
                let t = arg(k, 0, "a key")?;
                key = Some(
                    rvs_core::model::QuicLbConfig::parse_key(&t.text).map_or_else(
                        || {
                            err(
                                t,
                                "expected a 16-byte AES-128 key as 32 hex digits".to_owned(),
                            )
                        },
                        Ok,
                    )?,
                );
            }
            _ if listed => {}
            _ => c.unknown(k, "quic_lb", Block::QuicLb),
        }
        c.max_args(k, 1);
    }
    let (Some(rotation), Some(server_id_len), Some(nonce_len)) = (rotation, sid, nonce) else {
        return err(
            &n.key,
            "`quic_lb` needs `rotation`, `server_id_len` and `nonce_len`",
        );
    };
    let q = rvs_core::model::QuicLbConfig {
        rotation,
        server_id_len,
        nonce_len,
        key,
    };
    q.validate()
        .map_or_else(|e| err(&n.key, e.to_string()), |()| Ok(q))
}

fn real_server(c: &mut Ctx<'_>, n: &Node) -> R<RealServer> {
    let addr = ip(arg(n, 0, "an IP address")?)?;
    let p = n.args.get(1).map(port).transpose()?.unwrap_or(0);
    c.max_args(n, 2);
    let mut rs = RealServer {
        addr,
        port: p,
        loc: loc_of(&n.key),
        weight: 1,
        lvs_method: None,
        forward: ForwardMethod::Masq,
        notify_up: None,
        notify_down: None,
        proxy_protocol: None,
        quic_server_id: None,
        uthreshold: 0,
        lthreshold: 0,
        inhibit_on_failure: None,
        alpha: None,
        connect_timeout: None,
        retry: None,
        delay_before_retry: None,
        warmup: None,
        delay_loop: None,
        smtp_alert: None,
        virtualhost: None,
        effective: RealServerEffective::default(),
        checkers: Vec::new(),
    };
    for k in block(n)? {
        let listed = c.audit(Block::RealServer, k)?;
        let key = k.key.text.as_str();
        let mut max = 1;
        match key {
            "weight" => rs.weight = num(arg(k, 0, "a weight")?, "a weight", 0, 65535)?,
            "lvs_method" | "lb_kind" => {
                rs.lvs_method = Some(lvs_method(k)?);
                max = usize::MAX;
            }
            "notify_up" => {
                rs.notify_up = Some(script(k)?);
                max = 3;
            }
            "notify_down" => {
                rs.notify_down = Some(script(k)?);
                max = 3;
            }
            "proxy_protocol" => rs.proxy_protocol = Some(proxy_protocol(k)?),
            "quic_server_id" => {
                let t = arg(k, 0, "a QUIC server ID")?;
                rs.quic_server_id = Some(t.text.parse().or_else(|_| {
                    err(
                        t,
                        format!(
                            "expected a QUIC server ID of 1 to 15 bytes in hex, found `{}`",
                            t.text
                        ),
                    )
                })?);
            }
            "uthreshold" => {
                rs.uthreshold = num(
                    arg(k, 0, "a connection count")?,
                    "a connection count",
                    0,
                    u64::from(u32::MAX),
                )?
            }
            "lthreshold" => {
                rs.lthreshold = num(
                    arg(k, 0, "a connection count")?,
                    "a connection count",
                    0,
                    u64::from(u32::MAX),
                )?
            }
            "inhibit_on_failure" => rs.inhibit_on_failure = Some(flag(k)?),
            "alpha" => rs.alpha = Some(flag(k)?),
            "connect_timeout" => rs.connect_timeout = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "retry" | "nb_get_retry" => rs.retry = Some(retry(k)?),
            "delay_before_retry" => {
                rs.delay_before_retry = Some(timer(arg(k, 0, "a time in seconds")?)?)
            }
            "warmup" => rs.warmup = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "delay_loop" => rs.delay_loop = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "smtp_alert" => rs.smtp_alert = Some(flag(k)?),
            "virtualhost" => rs.virtualhost = Some(string(k, "a host name")?),
            _ if listed => {}
            "HTTP_GET" | "SSL_GET" | "TCP_CHECK" | "SMTP_CHECK" | "DNS_CHECK" | "MISC_CHECK"
            | "UDP_CHECK" | "PING_CHECK" | "FILE_CHECK" | "BFD_CHECK" => {
                rs.checkers.extend(checker(c, k)?);
                max = 0;
            }
            _ => {
                c.unknown(k, "real_server", Block::RealServer);
                max = usize::MAX;
            }
        }
        if k.block.is_none() && max != usize::MAX {
            c.max_args(k, max);
        }
    }
    Ok(rs)
}

/// Common checker options; returns false when the keyword is not one.
fn common_opt(c: &mut Ctx<'_>, k: &Node, o: &mut CheckerCommon) -> R<bool> {
    let t = || arg(k, 0, "a value");
    match k.key.text.as_str() {
        "connect_ip" => o.connect_ip = Some(ip(t()?)?),
        "connect_port" => o.connect_port = Some(port(t()?)?),
        "bindto" => o.bindto = Some(ip(t()?)?),
        "bind_if" => o.bind_if = Some(t()?.text.clone()),
        "bind_port" => o.bind_port = Some(port(t()?)?),
        "fwmark" => o.fwmark = Some(num(t()?, "a firewall mark", 0, u64::from(u32::MAX))?),
        "alpha" => o.alpha = Some(flag(k)?),
        "connect_timeout" => o.connect_timeout = Some(timer(t()?)?),
        "retry" | "nb_get_retry" => o.retry = Some(retry(k)?),
        "delay_before_retry" => o.delay_before_retry = Some(timer(t()?)?),
        "warmup" => o.warmup = Some(timer(t()?)?),
        "delay_loop" => o.delay_loop = Some(timer(t()?)?),
        "log_all_failures" => o.log_all_failures = Some(flag(k)?),
        _ => return Ok(false),
    }
    c.max_args(k, 1);
    Ok(true)
}

/// A checker block; an `SMTP_CHECK` with `host { }` blocks is one checker
/// per host, as keepalived 2 makes them (so the real server is up only
/// while every host answers), each host's connection options defaulting to
/// the checker's own given before it.
fn checker(c: &mut Ctx<'_>, n: &Node) -> R<Vec<Checker>> {
    let name = n.key.text.as_str();
    let mut common = CheckerCommon::default();
    let mut hosts: Vec<CheckerCommon> = Vec::new();
    let mut kind = match name {
        "HTTP_GET" => CheckerKind::Http(HttpCheck::default()),
        "SSL_GET" => CheckerKind::Ssl(HttpCheck::default()),
        "TCP_CHECK" => CheckerKind::Tcp,
        "SMTP_CHECK" => CheckerKind::Smtp { helo_name: None },
        "DNS_CHECK" => CheckerKind::Dns {
            qtype: "SOA".to_owned(),
            name: ".".to_owned(),
        },
        "MISC_CHECK" => CheckerKind::Misc(MiscCheck::default()),
        "UDP_CHECK" => CheckerKind::Udp(UdpCheck {
            max_reply_length: 255,
            ..UdpCheck::default()
        }),
        "PING_CHECK" => CheckerKind::Ping,
        "FILE_CHECK" => CheckerKind::File(FileCheck::default()),
        _ => CheckerKind::Bfd { name: None },
    };
    let empty: &[Node] = &[];
    let body = n.block.as_deref().unwrap_or(empty);
    if n.block.is_none() {
        return err(
            &n.key,
            format!("expected `{{` opening the `{name}` block, found end of line"),
        );
    }
    for k in body {
        if c.audit(Block::Checker, k)? || common_opt(c, k, &mut common)? {
            continue;
        }
        let key = k.key.text.as_str();
        let handled = match &mut kind {
            CheckerKind::Http(h) | CheckerKind::Ssl(h) => match key {
                "http_protocol" => {
                    let t = arg(k, 0, "an HTTP protocol")?;
                    if !matches!(t.text.as_str(), "1.0" | "1.0C" | "1.1") {
                        return err(
                            t,
                            format!(
                                "expected an HTTP protocol (1.0|1.0C|1.1), found `{}`",
                                t.text
                            ),
                        );
                    }
                    h.http_protocol = Some(t.text.clone());
                    true
                }
                "fast_recovery" => {
                    h.fast_recovery = flag(k)?;
                    true
                }
                "virtualhost" => {
                    h.virtualhost = Some(string(k, "a host name")?);
                    true
                }
                "enable_sni" => {
                    h.enable_sni = flag(k)?;
                    true
                }
                "sni_name" => {
                    h.sni_name = Some(string(k, "a server name")?);
                    true
                }
                "tls_compliant" => {
                    h.tls_compliant = flag(k)?;
                    true
                }
                "url" => {
                    h.urls.push(url(c, k)?);
                    true
                }
                _ => false,
            },
            CheckerKind::Smtp { helo_name } => match key {
                "helo_name" => {
                    *helo_name = Some(string(k, "a HELO name")?);
                    true
                }
                "host" => {
                    let mut h = common.clone();
                    for hk in block(k)? {
                        if !common_opt(c, hk, &mut h)? {
                            c.unknown(hk, "SMTP_CHECK host", Block::Checker);
                        }
                    }
                    hosts.push(h);
                    c.warn(
                        &k.key,
                        "The SMTP_CHECK host block is deprecated. Please define additional checkers.",
                    );
                    true
                }
                _ => false,
            },
            CheckerKind::Dns { qtype, name } => match key {
                "type" => {
                    let t = arg(k, 0, "a DNS query type")?;
                    let up = t.text.to_ascii_uppercase();
                    if !matches!(
                        up.as_str(),
                        "A" | "NS" | "CNAME" | "SOA" | "MX" | "TXT" | "AAAA"
                    ) {
                        return err(
                            t,
                            format!(
                                "expected a DNS query type (A|NS|CNAME|SOA|MX|TXT|AAAA), found `{}`",
                                t.text
                            ),
                        );
                    }
                    *qtype = up;
                    true
                }
                "name" => {
                    *name = string(k, "a domain name")?;
                    true
                }
                _ => false,
            },
            CheckerKind::Misc(m) => match key {
                "misc_path" => {
                    m.path = string(k, "a script path")?;
                    true
                }
                "misc_timeout" => {
                    m.timeout = Some(timer(arg(k, 0, "a timeout")?)?);
                    true
                }
                "misc_dynamic" => {
                    m.dynamic = flag(k)?;
                    true
                }
                "user" => {
                    m.user = Some(
                        k.args
                            .iter()
                            .map(|t| t.text.as_str())
                            .collect::<Vec<_>>()
                            .join(" "),
                    );
                    true
                }
                _ => false,
            },
            CheckerKind::Udp(u) => match key {
                "payload" => {
                    u.payload = Some(
                        hex_bytes(k, false)?
                            .into_iter()
                            .map(|b| b.unwrap_or(0))
                            .collect(),
                    );
                    true
                }
                "require_reply" => {
                    u.require_reply = Some(if k.args.is_empty() {
                        None
                    } else {
                        Some(hex_bytes(k, true)?)
                    });
                    true
                }
                "min_reply_length" => {
                    u.min_reply_length = num(arg(k, 0, "a length")?, "a length", 0, 65535)?;
                    true
                }
                "max_reply_length" => {
                    u.max_reply_length = num(arg(k, 0, "a length")?, "a length", 0, 65535)?;
                    true
                }
                _ => false,
            },
            CheckerKind::File(f) => match key {
                "track_file" => {
                    f.track_file = Some(string(k, "a track_file name")?);
                    true
                }
                "dynamic" => {
                    f.dynamic = flag(k)?;
                    true
                }
                "weight" => {
                    let w = int(
                        arg(k, 0, "a weight")?,
                        "a weight",
                        -2_147_483_647,
                        2_147_483_647,
                    )?;
                    let rev = matches!(k.args.get(1), Some(t) if t.text == "reverse");
                    f.weight = Some((w, rev));
                    true
                }
                _ => false,
            },
            CheckerKind::Bfd { name } => {
                if key == "name" {
                    *name = Some(string(k, "a BFD instance name")?);
                    true
                } else {
                    false
                }
            }
            CheckerKind::Tcp | CheckerKind::Ping => false,
        };
        if !handled {
            c.unknown(k, name, Block::Checker);
        }
    }
    let one = |common: CheckerCommon| Checker {
        kind: kind.clone(),
        common,
        effective: CheckerTiming::default(),
        loc: loc_of(&n.key),
    };
    if hosts.is_empty() {
        Ok(vec![one(common)])
    } else {
        Ok(hosts.into_iter().map(one).collect())
    }
}

/// keepalived's free-format HEX_STR: words of hex digits, an odd-length word
/// is left-padded (`3` → `03`); with `wild`, `x` nibbles are "don't care".
fn hex_bytes(k: &Node, wild: bool) -> R<Vec<Option<u8>>> {
    let mut out = Vec::new();
    for t in &k.args {
        let chars: Vec<char> = t.text.chars().collect();
        let mut nibbles: Vec<Option<u8>> = Vec::new();
        for &ch in &chars {
            let v = match ch.to_digit(16) {
                Some(d) => Some(u8::try_from(d).unwrap_or(0)),
                None if wild && (ch == 'x' || ch == 'X') => None,
                None => {
                    return err(
                        t,
                        format!("expected hexadecimal digits, found `{}`", t.text),
                    );
                }
            };
            nibbles.push(v);
        }
        if nibbles.len() % 2 == 1 {
            nibbles.insert(0, Some(0));
        }
        for pair in nibbles.chunks(2) {
            out.push(match (pair[0], pair[1]) {
                (Some(h), Some(l)) => Some(h << 4 | l),
                _ => None,
            });
        }
    }
    Ok(out)
}

fn url(c: &mut Ctx<'_>, n: &Node) -> R<UrlCheck> {
    let mut u = UrlCheck {
        path: None,
        digest: None,
        status_codes: Vec::new(),
        virtualhost: None,
        regex: None,
        regex_no_match: false,
        regex_options: Vec::new(),
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        c.audit(Block::Url, k)?;
        let mut max = 1;
        match k.key.text.as_str() {
            "path" => u.path = Some(string(k, "a URL path")?),
            "digest" => {
                let t = arg(k, 0, "an MD5 digest")?;
                if t.text.len() != 32 || !t.text.chars().all(|ch| ch.is_ascii_hexdigit()) {
                    return err(
                        t,
                        format!("expected an MD5 digest (32 hex digits), found `{}`", t.text),
                    );
                }
                u.digest = Some(t.text.to_ascii_lowercase());
            }
            "status_code" => {
                max = usize::MAX;
                if k.args.is_empty() {
                    return err(
                        &k.key,
                        "expected a status code or range after `status_code`, found end of line",
                    );
                }
                for t in &k.args {
                    let (a, b) = match t.text.split_once('-') {
                        Some((a, b)) => (a, b),
                        None => (t.text.as_str(), t.text.as_str()),
                    };
                    let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) else {
                        return err(
                            t,
                            format!(
                                "expected a status code or range (e.g. 200 or 200-299), found `{}`",
                                t.text
                            ),
                        );
                    };
                    if !(100..=999).contains(&a) || !(100..=999).contains(&b) || a > b {
                        return err(
                            t,
                            format!(
                                "expected a status code or range within 100-999, found `{}`",
                                t.text
                            ),
                        );
                    }
                    u.status_codes.push(a..=b);
                }
            }
            "virtualhost" => u.virtualhost = Some(string(k, "a host name")?),
            "regex" => u.regex = Some(string(k, "a regular expression")?),
            "regex_no_match" => u.regex_no_match = true,
            "regex_options" => {
                max = usize::MAX;
                u.regex_options = k.args.iter().map(|t| t.text.clone()).collect();
            }
            "regex_stack" | "regex_min_offset" | "regex_max_offset" => {
                max = usize::MAX;
            }
            _ => {
                c.unknown(k, "url", Block::Url);
                max = usize::MAX;
            }
        }
        if max != usize::MAX {
            c.max_args(k, max);
        }
    }
    if u.status_codes.is_empty() && u.digest.is_none() {
        u.status_codes.push(200..=299);
    }
    Ok(u)
}

fn tracked_list(n: &Node) -> R<Vec<Tracked>> {
    let mut out = Vec::new();
    for k in block(n)? {
        let mut t = Tracked {
            name: k.key.text.clone(),
            weight: None,
            reverse: false,
        };
        let mut i = 0;
        while i < k.args.len() {
            match k.args[i].text.as_str() {
                "weight" => {
                    let w = int(arg(k, i + 1, "a weight")?, "a weight", -254, 254)?;
                    t.weight = i32::try_from(w).ok();
                    i += 2;
                }
                "reverse" => {
                    t.reverse = true;
                    i += 1;
                }
                "noreverse" => {
                    t.reverse = false;
                    i += 1;
                }
                _ => {
                    return err(
                        &k.args[i],
                        format!(
                            "expected `weight N` or `reverse`, found `{}`",
                            k.args[i].text
                        ),
                    );
                }
            }
        }
        out.push(t);
    }
    Ok(out)
}

fn notify_kw(k: &Node, notify: &mut Notify) -> R<bool> {
    let slot = match k.key.text.as_str() {
        "notify_master" => &mut notify.master,
        "notify_backup" => &mut notify.backup,
        "notify_fault" => &mut notify.fault,
        "notify_stop" => &mut notify.stop,
        "notify" => &mut notify.any,
        _ => return Ok(false),
    };
    *slot = Some(script(k)?);
    Ok(true)
}

fn vrrp_script(c: &mut Ctx<'_>, n: &Node) -> R<VrrpScript> {
    let mut s = VrrpScript {
        name: string(n, "a script name")?,
        script: None,
        interval: Duration::from_secs(1),
        timeout: None,
        weight: 0,
        weight_reverse: false,
        rise: None,
        fall: None,
        user: None,
        init_fail: false,
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        match k.key.text.as_str() {
            "script" => s.script = Some(string(k, "a script")?),
            "interval" => s.interval = timer(arg(k, 0, "an interval")?)?,
            "timeout" => s.timeout = Some(timer(arg(k, 0, "a timeout")?)?),
            "weight" => {
                s.weight =
                    i32::try_from(int(arg(k, 0, "a weight")?, "a weight", -253, 253)?).unwrap_or(0);
                s.weight_reverse = matches!(k.args.get(1), Some(t) if t.text == "reverse");
            }
            "rise" => {
                s.rise = Some(num(
                    arg(k, 0, "a count")?,
                    "a count",
                    1,
                    u64::from(u32::MAX),
                )?)
            }
            "fall" => {
                s.fall = Some(num(
                    arg(k, 0, "a count")?,
                    "a count",
                    1,
                    u64::from(u32::MAX),
                )?)
            }
            "user" => {
                s.user = Some(
                    k.args
                        .iter()
                        .map(|t| t.text.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                )
            }
            "init_fail" => s.init_fail = true,
            _ => c.unknown(k, "vrrp_script", Block::VrrpScript),
        }
    }
    Ok(s)
}

fn sync_group(c: &mut Ctx<'_>, n: &Node) -> R<VrrpSyncGroup> {
    let mut g = VrrpSyncGroup {
        name: string(n, "a sync group name")?,
        members: Vec::new(),
        track_interface: Vec::new(),
        track_script: Vec::new(),
        notify: Notify::default(),
        smtp_alert: false,
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        if notify_kw(k, &mut g.notify)? {
            continue;
        }
        let listed = c.audit(Block::SyncGroup, k)?;
        match k.key.text.as_str() {
            "group" => {
                for m in block(k)? {
                    g.members.push(m.key.text.clone());
                    for a in &m.args {
                        g.members.push(a.text.clone());
                    }
                }
            }
            "track_interface" => g.track_interface = tracked_list(k)?,
            "track_script" => g.track_script = tracked_list(k)?,
            "smtp_alert" => g.smtp_alert = flag(k)?,
            _ if listed => {}
            _ => c.unknown(k, "vrrp_sync_group", Block::SyncGroup),
        }
    }
    Ok(g)
}

fn vips(c: &mut Ctx<'_>, n: &Node) -> R<Vec<VirtualIp>> {
    let mut out = Vec::new();
    for k in block(n)? {
        let (a, prefix) = match k.key.text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (k.key.text.as_str(), None),
        };
        let addr: IpAddr = a.parse().or_else(|_| {
            err(
                &k.key,
                format!("expected an IP address[/prefix], found `{}`", k.key.text),
            )
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => match p.parse::<u8>().ok().filter(|v| *v <= max) {
                Some(v) => Some(v),
                None => {
                    return err(
                        &k.key,
                        format!("expected a prefix length (0-{max}), found `{}`", k.key.text),
                    );
                }
            },
            None => None,
        };
        let mut v = VirtualIp {
            addr,
            prefix,
            brd: None,
            dev: None,
            scope: None,
            label: None,
            extra: Vec::new(),
        };
        let mut i = 0;
        while i < k.args.len() {
            let key = k.args[i].text.as_str();
            let slot = match key {
                "brd" => Some(&mut v.brd),
                "dev" => Some(&mut v.dev),
                "scope" => Some(&mut v.scope),
                "label" => Some(&mut v.label),
                _ => None,
            };
            match slot {
                Some(s) => {
                    *s = Some(arg(k, i + 1, "a value")?.text.clone());
                    i += 2;
                }
                None => {
                    v.extra.push(k.args[i].text.clone());
                    i += 1;
                }
            }
        }
        let _ = &c;
        out.push(v);
    }
    Ok(out)
}

/// A `track_file NAME { }` block.
fn track_file(c: &mut Ctx<'_>, n: &Node) -> R<TrackFile> {
    let mut t = TrackFile {
        name: string(n, "a track_file name")?,
        file: None,
        weight: 1,
        reverse: false,
        init_file: None,
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        match k.key.text.as_str() {
            "file" => t.file = Some(string(k, "a file path")?),
            "weight" => {
                t.weight = int(
                    arg(k, 0, "a weight")?,
                    "a weight",
                    -2_147_483_647,
                    2_147_483_647,
                )?;
                match k.args.get(1).map(|a| a.text.as_str()) {
                    Some("reverse") => t.reverse = true,
                    Some("noreverse") | None => {}
                    Some(_) => c.max_args(k, 1),
                }
            }
            "init_file" => {
                let mut value = 0;
                let mut overwrite = false;
                for a in &k.args {
                    if a.text == "overwrite" {
                        overwrite = true;
                    } else {
                        value = int(
                            a,
                            "an initial value",
                            i64::from(i32::MIN),
                            i64::from(i32::MAX),
                        )?;
                    }
                }
                t.init_file = Some((value, overwrite));
            }
            _ => c.unknown(k, "track_file", Block::Top),
        }
    }
    if t.file.is_none() {
        return err(&n.key, format!("track_file {}: no `file`", t.name));
    }
    Ok(t)
}

/// A `vrrp_track_process NAME { }` block.
fn track_process(c: &mut Ctx<'_>, n: &Node) -> R<TrackProcess> {
    let mut t = TrackProcess {
        name: string(n, "a vrrp_track_process name")?,
        process: Vec::new(),
        param_match: None,
        weight: 1,
        reverse: false,
        quorum: 1,
        quorum_max: None,
        fork_delay: Duration::ZERO,
        terminate_delay: Duration::ZERO,
        full_command: false,
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        match k.key.text.as_str() {
            "process" => {
                arg(k, 0, "a process name")?;
                t.process = k.args.iter().map(|a| a.text.clone()).collect();
            }
            "param_match" => {
                let a = arg(k, 0, "`initial` or `partial`")?;
                t.param_match = Some(match a.text.as_str() {
                    "initial" => ParamMatch::Initial,
                    "partial" => ParamMatch::Partial,
                    "exact" => ParamMatch::Exact,
                    _ => {
                        return err(
                            a,
                            format!("expected `initial` or `partial`, found `{}`", a.text),
                        );
                    }
                });
            }
            "weight" => {
                t.weight = int(arg(k, 0, "a weight")?, "a weight", -254, 254)? as i32;
                match k.args.get(1).map(|a| a.text.as_str()) {
                    Some("reverse") => t.reverse = true,
                    Some("noreverse") | None => {}
                    Some(_) => c.max_args(k, 1),
                }
            }
            "quorum" => t.quorum = num(arg(k, 0, "a count")?, "a count", 1, 65_535)?,
            "quorum_max" => t.quorum_max = Some(num(arg(k, 0, "a count")?, "a count", 0, 65_535)?),
            "delay" => {
                let d = timer(arg(k, 0, "a delay")?)?;
                t.fork_delay = d;
                t.terminate_delay = d;
            }
            "fork_delay" => t.fork_delay = timer(arg(k, 0, "a delay")?)?,
            "terminate_delay" => t.terminate_delay = timer(arg(k, 0, "a delay")?)?,
            "full_command" => t.full_command = true,
            _ => c.unknown(k, "vrrp_track_process", Block::Top),
        }
    }
    if t.process.is_empty() {
        return err(
            &n.key,
            format!("vrrp_track_process {}: no `process`", t.name),
        );
    }
    if t.quorum_max.is_some_and(|m| m < t.quorum) {
        return err(
            &n.key,
            format!("vrrp_track_process {}: quorum_max is below quorum", t.name),
        );
    }
    Ok(t)
}

/// A `static_routes` / `virtual_routes` block.
fn routes(c: &mut Ctx<'_>, n: &Node) -> R<Vec<IpRoute>> {
    let out = block(n)?
        .iter()
        .map(|k| iproute::route(k, c.w))
        .collect::<R<Vec<_>>>()?;
    if out.iter().any(|r| !r.no_track) {
        c.w.push(iproute::untracked_note(&n.key.loc, &n.key.text));
    }
    Ok(out)
}

/// A `static_rules` / `virtual_rules` block.
fn rules(c: &mut Ctx<'_>, n: &Node) -> R<Vec<IpRule>> {
    let out = block(n)?
        .iter()
        .map(|k| iproute::rule(k, c.w))
        .collect::<R<Vec<_>>>()?;
    if out.iter().any(|r| !r.no_track) {
        c.w.push(iproute::untracked_note(&n.key.loc, &n.key.text));
    }
    Ok(out)
}

fn vrrp_instance(c: &mut Ctx<'_>, n: &Node) -> R<VrrpInstance> {
    let mut v = VrrpInstance {
        name: string(n, "an instance name")?,
        state: None,
        interface: None,
        virtual_router_id: None,
        priority: 100,
        advert_int: Duration::from_secs(1),
        nopreempt: false,
        preempt_delay: None,
        authentication: None,
        virtual_ipaddress: Vec::new(),
        virtual_ipaddress_excluded: Vec::new(),
        unicast_src_ip: None,
        unicast_peer: Vec::new(),
        mcast_src_ip: None,
        track_interface: Vec::new(),
        track_script: Vec::new(),
        notify: Notify::default(),
        version: None,
        use_vmac: None,
        vmac_xmit_base: false,
        accept: None,
        garp_master_delay: None,
        garp_master_repeat: None,
        garp_master_refresh: None,
        garp_master_refresh_repeat: None,
        down_timer_adverts: None,
        lvs_sync_daemon_interface: None,
        smtp_alert: false,
        strict_mode: None,
        dont_track_primary: false,
        track_file: Vec::new(),
        track_process: Vec::new(),
        virtual_routes: Vec::new(),
        virtual_rules: Vec::new(),
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        if notify_kw(k, &mut v.notify)? {
            continue;
        }
        let listed = c.audit(Block::VrrpInstance, k)?;
        let key = k.key.text.as_str();
        match key {
            "state" => {
                let t = arg(k, 0, "MASTER or BACKUP")?;
                v.state = Some(match t.text.as_str() {
                    "MASTER" => VrrpState::Master,
                    "BACKUP" => VrrpState::Backup,
                    _ => return err(t, format!("expected MASTER or BACKUP, found `{}`", t.text)),
                });
            }
            "interface" => v.interface = Some(string(k, "an interface name")?),
            "virtual_router_id" => {
                v.virtual_router_id = Some(num(
                    arg(k, 0, "a virtual router id")?,
                    "a virtual router id",
                    1,
                    255,
                )?)
            }
            "priority" => v.priority = num(arg(k, 0, "a priority")?, "a priority", 1, 255)?,
            "advert_int" => {
                let t = arg(k, 0, "an advert interval")?;
                let d = timer(t)?;
                if d.is_zero() || d > Duration::from_secs(255) {
                    return err(
                        t,
                        format!(
                            "expected an advert interval (0.01-255 s), found `{}`",
                            t.text
                        ),
                    );
                }
                v.advert_int = d;
            }
            "nopreempt" => v.nopreempt = true,
            "preempt" => v.nopreempt = false,
            "preempt_delay" => {
                let t = arg(k, 0, "a delay")?;
                let d = timer(t)?;
                if d > Duration::from_secs(1000) {
                    return err(
                        t,
                        format!("expected a preempt delay (0-1000 s), found `{}`", t.text),
                    );
                }
                v.preempt_delay = Some(d);
            }
            "authentication" => {
                let mut a = Authentication {
                    ah: false,
                    pass: None,
                };
                for x in block(k)? {
                    match x.key.text.as_str() {
                        "auth_type" => {
                            let t = arg(x, 0, "PASS or AH")?;
                            a.ah = match t.text.as_str() {
                                "PASS" => false,
                                "AH" => true,
                                _ => {
                                    return err(
                                        t,
                                        format!("expected PASS or AH, found `{}`", t.text),
                                    );
                                }
                            };
                        }
                        "auth_pass" => a.pass = Some(string(x, "a password")?),
                        _ => c.unknown(x, "authentication", Block::VrrpInstance),
                    }
                }
                v.authentication = Some(a);
            }
            "virtual_ipaddress" => v.virtual_ipaddress = vips(c, k)?,
            "virtual_ipaddress_excluded" => v.virtual_ipaddress_excluded = vips(c, k)?,
            "unicast_src_ip" => v.unicast_src_ip = Some(ip(arg(k, 0, "an IP address")?)?),
            "mcast_src_ip" => v.mcast_src_ip = Some(ip(arg(k, 0, "an IP address")?)?),
            "unicast_peer" => {
                for p in block(k)? {
                    let mut peer = UnicastPeer {
                        addr: ip(&p.key)?,
                        min_ttl: None,
                        max_ttl: None,
                    };
                    let mut i = 0;
                    while i < p.args.len() {
                        let val = num(arg(p, i + 1, "a TTL")?, "a TTL", 0, 255)?;
                        match p.args[i].text.as_str() {
                            "min_ttl" => peer.min_ttl = Some(val),
                            "max_ttl" => peer.max_ttl = Some(val),
                            _ => {
                                return err(
                                    &p.args[i],
                                    format!(
                                        "expected `min_ttl` or `max_ttl`, found `{}`",
                                        p.args[i].text
                                    ),
                                );
                            }
                        }
                        i += 2;
                    }
                    v.unicast_peer.push(peer);
                }
            }
            "track_interface" => v.track_interface = tracked_list(k)?,
            "track_script" => v.track_script = tracked_list(k)?,
            "version" => {
                v.version = Some(num(arg(k, 0, "a VRRP version")?, "a VRRP version", 2, 3)?)
            }
            "use_vmac" => v.use_vmac = Some(k.args.first().map(|t| t.text.clone())),
            "vmac_xmit_base" => v.vmac_xmit_base = true,
            "accept" => v.accept = Some(true),
            "no_accept" => v.accept = Some(false),
            "garp_master_delay" => v.garp_master_delay = Some(timer(arg(k, 0, "a delay")?)?),
            "garp_master_repeat" => {
                v.garp_master_repeat = Some(num(arg(k, 0, "a count")?, "a count", 1, 255)?)
            }
            "garp_master_refresh" => {
                v.garp_master_refresh = Some(timer(arg(k, 0, "an interval")?)?)
            }
            "garp_master_refresh_repeat" => {
                v.garp_master_refresh_repeat = Some(num(arg(k, 0, "a count")?, "a count", 1, 255)?)
            }
            "down_timer_adverts" => {
                v.down_timer_adverts = Some(num(arg(k, 0, "a count")?, "a count", 1, 100)?)
            }
            "lvs_sync_daemon_interface" => {
                c.warn(
                    &k.key,
                    "`lvs_sync_daemon_interface` is deprecated; use global_defs `lvs_sync_daemon`",
                );
                v.lvs_sync_daemon_interface = Some(string(k, "an interface name")?);
            }
            "smtp_alert" => v.smtp_alert = flag(k)?,
            "strict_mode" => v.strict_mode = Some(flag(k)?),
            "dont_track_primary" => v.dont_track_primary = true,
            "track_file" => v.track_file = tracked_list(k)?,
            "track_process" => v.track_process = tracked_list(k)?,
            "virtual_routes" => v.virtual_routes.extend(routes(c, k)?),
            "virtual_rules" => v.virtual_rules.extend(rules(c, k)?),
            _ if listed => {}
            _ => c.unknown(k, "vrrp_instance", Block::VrrpInstance),
        }
    }
    let _ = Kind::Word;
    Ok(v)
}
