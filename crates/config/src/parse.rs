//! From the block tree to the typed model: one function per block type,
//! keyword sets taken from keepalived's `check_parser.c`, `vrrp_parser.c`
//! and `global_parser.c` (plus the Alibaba FULLNAT keywords).
//!
//! This file holds the top-level dispatch ([`parse`]), the shared context
//! and the argument helpers (numbers, timers, addresses, scripts); the
//! blocks live in one submodule per keepalived section: [`global_defs`],
//! [`virtual_server`] (with `real_server` and the groups), [`checkers`]
//! (and `SSL`) and [`vrrp`].

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

mod checkers;
mod global_defs;
mod virtual_server;
mod vrrp;
use checkers::{checker, ssl};
use global_defs::{global_def, global_defs};
use virtual_server::{laddr_group, retry, virtual_server, vsg};
use vrrp::{
    routes, rules, sync_group, track_file, track_process, vips, vrrp_instance, vrrp_script,
};

type R<T> = Result<T, ConfigError>;

fn loc_of(t: &Token) -> Loc {
    t.loc.clone()
}

/// An error at token `t`.
pub(crate) fn err<T>(t: &Token, msg: impl Into<String>) -> R<T> {
    Err(ConfigError::at(&t.loc, msg))
}

/// The first argument of `n` parsed as a `T` (`what`, for the error).
fn parsed<T: std::str::FromStr>(n: &Node, what: &str) -> R<T> {
    let t = arg(n, 0, what)?;
    t.text.parse().or_else(|_| expected(t, what))
}

/// The error for token `t` that is not `what`: "expected WHAT, found `T`".
pub(crate) fn expected<T>(t: &Token, what: &str) -> R<T> {
    err(t, format!("expected {what}, found `{}`", t.text))
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

/// The `i`th argument of `n` as a number from `min` to `u32::MAX` (the
/// counts, weights and marks keepalived reads as unsigned ints): `missing`
/// says what is expected when there is none, `what` when it is not one.
pub(crate) fn up_to_u32<T: TryFrom<u64>>(
    n: &Node,
    i: usize,
    missing: &str,
    what: &str,
    min: u64,
) -> R<T> {
    num(arg(n, i, missing)?, what, min, u64::from(u32::MAX))
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
        .or_else(|_| expected(t, "an IP address"))
}

fn string(n: &Node, what: &str) -> R<String> {
    Ok(arg(n, 0, what)?.text.clone())
}

/// The arguments from `from` on, joined by a space (`USER [GROUP]`).
fn words(n: &Node, from: usize) -> String {
    let args = n.args.get(from..).unwrap_or_default();
    args.iter()
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// [`words`], or `None` when there are none.
fn words_after(n: &Node, from: usize) -> Option<String> {
    (n.args.len() > from).then(|| words(n, from))
}

fn script(n: &Node) -> R<Script> {
    let cmd = arg(n, 0, "a script")?;
    let user = words_after(n, 1);
    Ok(Script {
        command: cmd.text.clone(),
        user,
    })
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
                // A shift by the whole width (prefix 0) is no mask at all.
                let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
                let first = u32::from(v) & mask;
                Ok((IpAddr::V4(first.into()), IpAddr::V4((first | !mask).into())))
            }
            IpAddr::V6(v) if prefix <= 128 => {
                // A shift by the whole width (prefix 0) is no mask at all.
                let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
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
        _ => expected(t, "`inet` or `inet6`"),
    }
}

pub(crate) fn parse(tree: &[Node], w: &mut Vec<Warning>) -> R<KeepalivedConf> {
    let mut c = Ctx { w };
    let mut conf = KeepalivedConf::default();
    for n in tree {
        if keywords::ROOT_GLOBALS.contains(&n.key.text.as_str()) {
            global_def(&mut c, n, &mut conf.global)?;
            continue;
        }
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
