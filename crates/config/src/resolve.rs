//! keepalived's post-parse pass (`check_data.c` `validate_check_config`):
//! defaults, inheritance virtual server → real server → checker, and the
//! sanity adjustments keepalived makes with a log line (here: a warning).

use std::net::IpAddr;

use rvs_core::model::{AddrFamily, DEFAULT_PERSISTENCE_TIMEOUT, ForwardMethod, Protocol};

use crate::model::*;
use crate::{ConfigError, Warning};
use rvs_core::sched::Scheduler;

pub(crate) fn resolve(conf: &mut KeepalivedConf, w: &mut Vec<Warning>) -> Result<(), ConfigError> {
    let groups = conf.vs_groups.clone();
    let mut kept = Vec::new();
    for mut vs in std::mem::take(&mut conf.virtual_servers) {
        let name = describe(&vs.target);
        let warn = |w: &mut Vec<Warning>, msg: String| w.push(Warning::at(&vs.loc, msg));
        let group = match &vs.target {
            VsTarget::Group(g) => match groups.iter().find(|x| x.name == *g) {
                Some(x) => Some(x),
                None => {
                    return Err(ConfigError::at(
                        &vs.loc,
                        format!("expected a defined virtual_server_group, found `{g}`"),
                    ));
                }
            },
            _ => None,
        };
        if vs.real_servers.is_empty() {
            warn(
                w,
                format!("virtual server {name} has no real servers - ignoring"),
            );
            continue;
        }
        let has_addr = match (&vs.target, group) {
            (VsTarget::Addr { .. }, _) => true,
            (VsTarget::Group(_), Some(g)) => g
                .entries
                .iter()
                .any(|e| matches!(e, VsgEntry::Range { .. })),
            _ => false,
        };
        let has_fwmark = match (&vs.target, group) {
            (VsTarget::Fwmark(_), _) => true,
            (VsTarget::Group(_), Some(g)) => g
                .entries
                .iter()
                .any(|e| matches!(e, VsgEntry::Fwmark { .. })),
            _ => false,
        };
        if vs.ha_suspend && has_fwmark {
            warn(
                w,
                format!(
                    "virtual server {name}: cannot use ha_suspend with fwmarks - clearing ha_suspend"
                ),
            );
            vs.ha_suspend = false;
        }
        if has_addr {
            if vs.protocol.is_none() {
                warn(
                    w,
                    format!(
                        "virtual server {name}: no protocol set - defaulting to UDP (as keepalived does)"
                    ),
                );
                vs.protocol = Some(Protocol::Udp);
            }
            if vs.ops && vs.protocol != Some(Protocol::Udp) {
                warn(
                    w,
                    format!(
                        "virtual server {name}: one packet scheduling requires UDP - resetting"
                    ),
                );
                vs.ops = false;
            }
            let zero_port = match (&vs.target, group) {
                (VsTarget::Addr { port, .. }, _) => *port == 0,
                (_, Some(g)) => g
                    .entries
                    .iter()
                    .any(|e| matches!(e, VsgEntry::Range { port: 0, .. })),
                _ => false,
            };
            if zero_port && vs.persistence_timeout.is_none() {
                warn(
                    w,
                    format!(
                        "virtual server {name}: zero port only valid for persistent services - setting persistence_timeout {DEFAULT_PERSISTENCE_TIMEOUT}"
                    ),
                );
                vs.persistence_timeout = Some(DEFAULT_PERSISTENCE_TIMEOUT);
            }
        } else if vs.protocol.is_some() {
            warn(
                w,
                format!(
                    "virtual server {name}: protocol specified for fwmark - protocol will be ignored"
                ),
            );
            vs.protocol = None;
        }
        let sched = *vs.scheduler.get_or_insert_with(|| {
            warn(
                w,
                format!("virtual server {name}: no scheduler set, setting default 'wlc'"),
            );
            Scheduler::Wlc
        });
        let sf = vs.flags;
        let is_hash = sched.takes_flags();
        if (sf.contains(rvs_core::model::SchedFlags::FLAG1)
            || sf.contains(rvs_core::model::SchedFlags::FLAG2))
            && !is_hash
        {
            warn(
                w,
                format!(
                    "virtual server {name}: scheduler flags are only meaningful for sh/mh (scheduler is {sched})"
                ),
            );
        }
        if vs.lvs_method.is_none() {
            warn(
                w,
                format!("virtual server {name}: no forwarding method set, setting default NAT"),
            );
        }
        vs.forward = vs.lvs_method.unwrap_or(ForwardMethod::Masq);
        // Real servers.
        let vs_port = match vs.target {
            VsTarget::Addr { port, .. } => port,
            _ => 0,
        };
        let is_fwmark = matches!(vs.target, VsTarget::Fwmark(_));
        let mut seen: Vec<(IpAddr, u16)> = Vec::new();
        let mut rss = Vec::new();
        let mut weight_sum: u64 = 0;
        let vs_af = vs.ip_family.or(match vs.target {
            VsTarget::Addr { addr, .. } => Some(AddrFamily::of(&addr)),
            _ => None,
        });
        for mut rs in std::mem::take(&mut vs.real_servers) {
            rs.forward = rs.lvs_method.unwrap_or(vs.forward);
            if !matches!(rs.forward, ForwardMethod::Tunnel(_))
                && let Some(af) = vs_af
                && AddrFamily::of(&rs.addr) != af
            {
                w.push(Warning::at(&rs.loc, format!("address family of virtual server {name} and real server {} don't match - skipping real server", rs.addr)));
                continue;
            }
            if group.is_none() {
                if rs.forward == ForwardMethod::Masq {
                    if !is_fwmark && rs.port == 0 {
                        rs.port = vs_port;
                    }
                } else if is_fwmark {
                    if rs.port != 0 {
                        w.push(Warning::at(&rs.loc, format!("fwmark virtual server {name}, real server {} has port specified - clearing", rs.addr)));
                        rs.port = 0;
                    }
                } else if rs.port == 0 {
                    rs.port = vs_port;
                } else if rs.port != vs_port {
                    w.push(Warning::at(&rs.loc, format!("virtual server {name} and real server {}:{} ports don't match - resetting to {vs_port}", rs.addr, rs.port)));
                    rs.port = vs_port;
                }
            }
            if seen.contains(&(rs.addr, rs.port)) {
                w.push(Warning::at(&rs.loc, format!("virtual server {name}: real server {}:{} is duplicated - removing second rs", rs.addr, rs.port)));
                continue;
            }
            seen.push((rs.addr, rs.port));
            rs.effective = RealServerEffective {
                inhibit_on_failure: rs.inhibit_on_failure.unwrap_or(vs.inhibit_on_failure),
                alpha: rs.alpha.unwrap_or(vs.alpha),
                smtp_alert: rs.smtp_alert.unwrap_or(true),
                delay_loop: rs.delay_loop.unwrap_or(vs.delay_loop),
                virtualhost: rs.virtualhost.clone().or_else(|| vs.virtualhost.clone()),
            };
            weight_sum = weight_sum.saturating_add(u64::from(rs.weight));
            let rs_retry = rs.retry.or(vs.retry);
            let rs_dbr = rs.delay_before_retry.or(vs.delay_before_retry);
            let rs_warmup = rs.warmup.or(vs.warmup);
            let rs_ct = rs.connect_timeout.or(vs.connect_timeout);
            let (addr, port, eff) = (rs.addr, rs.port, rs.effective.clone());
            for ck in &mut rs.checkers {
                let c = &ck.common;
                let delay_loop = c.delay_loop.unwrap_or(eff.delay_loop);
                ck.effective = CheckerTiming {
                    connect_ip: Some(c.connect_ip.unwrap_or(addr)),
                    connect_port: c.connect_port.unwrap_or(port),
                    alpha: c.alpha.unwrap_or(eff.alpha),
                    connect_timeout: c
                        .connect_timeout
                        .or(rs_ct)
                        .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
                    retry: c.retry.or(rs_retry).unwrap_or(ck.kind.default_retry()),
                    delay_before_retry: c
                        .delay_before_retry
                        .or(rs_dbr)
                        .or(ck.kind.default_delay_before_retry())
                        .unwrap_or(delay_loop),
                    warmup: c.warmup.or(rs_warmup).unwrap_or(delay_loop),
                    delay_loop,
                    log_all_failures: c.log_all_failures.unwrap_or(false),
                };
                if let CheckerKind::Misc(m) = &mut ck.kind
                    && m.timeout.is_none()
                {
                    m.timeout = Some(delay_loop);
                }
                if let CheckerKind::Misc(m) = &ck.kind
                    && m.path.is_empty()
                {
                    return Err(ConfigError::at(
                        &ck.loc,
                        "expected `misc_path` in MISC_CHECK, found none",
                    ));
                }
            }
            rss.push(rs);
        }
        vs.real_servers = rss;
        if let Some(s) = &mut vs.sorry_server {
            s.forward = s.lvs_method.unwrap_or(vs.forward);
            if group.is_none() && s.forward != ForwardMethod::Masq {
                if is_fwmark {
                    s.port = 0;
                } else if s.port != vs_port {
                    if s.port != 0 {
                        w.push(Warning::at(&vs.loc, format!("virtual server {name} and sorry server ports don't match - resetting")));
                    }
                    s.port = vs_port;
                }
            } else if group.is_none() && !is_fwmark && s.port == 0 {
                s.port = vs_port;
            }
        }
        if u64::from(vs.quorum) > weight_sum {
            let ws = u32::try_from(weight_sum).unwrap_or(u32::MAX);
            w.push(Warning::at(&vs.loc, format!("quorum {} for {name} exceeds total weight of real servers {ws}, reducing quorum to {ws}", vs.quorum)));
            vs.quorum = ws;
        }
        if vs.hysteresis >= vs.quorum {
            let h = vs.quorum.saturating_sub(1);
            w.push(Warning::at(
                &vs.loc,
                format!(
                    "virtual server {name}: hysteresis {} >= quorum {}; setting hysteresis to {h}",
                    vs.hysteresis, vs.quorum
                ),
            ));
            vs.hysteresis = h;
        }
        if let Some(l) = &vs.laddr_group_name
            && !conf.local_address_groups.iter().any(|g| g.name == *l)
        {
            w.push(Warning::at(
                &vs.loc,
                format!("virtual server {name}: local_address_group `{l}` is not defined"),
            ));
        }
        kept.push(vs);
    }
    conf.virtual_servers = kept;
    Ok(())
}

pub(crate) fn describe(t: &VsTarget) -> String {
    match t {
        VsTarget::Addr {
            addr: IpAddr::V6(a),
            port,
        } => format!("[{a}]:{port}"),
        VsTarget::Addr { addr, port } => format!("{addr}:{port}"),
        VsTarget::Fwmark(m) => format!("FWM {m}"),
        VsTarget::Group(g) => format!("group {g}"),
    }
}
