//! From the keepalived.conf model to what the health checker runs: the
//! policy's view ([`HealthConfig`]) and one [`ProbeJob`] per checker.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rvs_config::ServiceSpec;
use rvs_config::model::{Checker, CheckerKind, KeepalivedConf, RealServer, VsTarget};

use crate::policy::{
    CheckerSpec, HealthConfig, MailText, RsSpec, ScriptSpec, ServiceSlot, Timing, VsSpec,
};

/// What one checker probes: the checker as configured and where it connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeJob {
    /// Checker type and its specific options (HTTP urls, MISC path, ...).
    pub kind: CheckerKind,
    /// `connect_ip`:`connect_port` (defaults: the real server's).
    pub addr: SocketAddr,
    /// `bindto`:`bind_port`, if given.
    pub bind: Option<SocketAddr>,
    /// `connect_timeout` (keepalived: bounds the whole probe).
    pub connect_timeout: Duration,
    /// `fwmark` for the probe's packets.
    pub fwmark: Option<u32>,
    /// The virtual host of the real server / virtual server, for HTTP checks
    /// without their own.
    pub virtualhost: Option<String>,
    /// `delay_loop`, the default `misc_timeout`.
    pub delay_loop: Duration,
}

/// The health-check part of a configuration: the policy's view, the probe
/// of each checker in the policy's checker order, and warnings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthPlan {
    /// For the policy.
    pub config: HealthConfig,
    /// One per checker, in order (virtual server, real server, checker).
    pub jobs: Vec<ProbeJob>,
    /// Checkers this build does not run (they are left out: the real server
    /// is judged by its other checkers, or always up without any).
    pub warnings: Vec<String>,
}

/// The words marking a warning about something the file asks for that rvs
/// does not carry out (the control plane's, re-exported).
pub use rvs_control::script::NOT_APPLIED;

/// Does this build run checkers of this kind? (All but FILE_CHECK and
/// BFD_CHECK.)
pub fn supported(kind: &CheckerKind) -> bool {
    crate::bridge::supports(kind)
}

fn sock(addr: IpAddr, port: u16) -> String {
    SocketAddr::new(addr, port).to_string()
}
/// Whether a checker's or virtual server's changes are mailed: its own
/// `smtp_alert`, else the global `smtp_alert_checker`, else `smtp_alert`,
/// else `default`.
fn smtp_alert(conf: &KeepalivedConf, own: Option<bool>, default: bool) -> bool {
    own.or(conf.global.smtp_alert_checker)
        .or(conf.global.smtp_alert)
        .unwrap_or(default)
}

fn vs_name(conf: &KeepalivedConf, spec: &ServiceSpec) -> String {
    let vs = &conf.virtual_servers[spec.vs_index];
    let proto = vs.protocol.unwrap_or(rvs_core::model::Protocol::Udp).name();
    match &vs.target {
        VsTarget::Addr { addr, port } => format!("{proto} {}", sock(*addr, *port)),
        VsTarget::Fwmark(m) => format!("FWM {m}"),
        VsTarget::Group(g) => format!("group {g}"),
    }
}

fn job(rs: &RealServer, c: &Checker, vhost: Option<&String>) -> ProbeJob {
    let e = &c.effective;
    let ip = e.connect_ip.unwrap_or(rs.addr);
    let port = if e.connect_port == 0 {
        rs.port
    } else {
        e.connect_port
    };
    let bind = match (c.common.bindto, c.common.bind_port) {
        (Some(a), p) => Some(SocketAddr::new(a, p.unwrap_or(0))),
        (None, Some(p)) => Some(SocketAddr::new(
            if ip.is_ipv4() {
                IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
            } else {
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
            },
            p,
        )),
        (None, None) => None,
    };
    ProbeJob {
        kind: c.kind.clone(),
        addr: SocketAddr::new(ip, port),
        bind,
        connect_timeout: e.connect_timeout,
        fwmark: c.common.fwmark,
        virtualhost: rs.effective.virtualhost.clone().or(vhost.cloned()),
        delay_loop: e.delay_loop,
    }
}

/// Build the plan from a configuration and the services it converts to
/// (`conf.lvs_services()`): one policy virtual server per `virtual_server`
/// block, with one slot per IPVS service it expands to.
pub fn plan(conf: &KeepalivedConf, specs: &[ServiceSpec]) -> HealthPlan {
    let mut out = HealthPlan::default();
    out.config.no_checker_emails = conf.global.no_checker_emails;
    out.config.rs_init_notifies = conf.global.rs_init_notifies;
    for (vi, vs) in conf.virtual_servers.iter().enumerate() {
        let mine: Vec<&ServiceSpec> = specs.iter().filter(|s| s.vs_index == vi).collect();
        let Some(first) = mine.first() else {
            continue;
        };
        let mut reals = Vec::with_capacity(vs.real_servers.len());
        for rs in &vs.real_servers {
            let mut checkers = Vec::new();
            for c in &rs.checkers {
                let j = job(rs, c, vs.virtualhost.as_ref());
                if !supported(&c.kind) {
                    out.warnings.push(format!(
                        "{}:{}:{}: {} of real server {} {NOT_APPLIED}: it is not run (its other checkers decide)",
                        c.loc.file,
                        c.loc.line,
                        c.loc.column,
                        c.kind.keyword(),
                        sock(rs.addr, rs.port)
                    ));
                    continue;
                }
                let e = &c.effective;
                checkers.push(CheckerSpec {
                    label: format!("{} {}", c.kind.keyword(), j.addr),
                    identity: format!("{:?}|{:?}|{:?}", c.kind, c.common, c.effective),
                    timing: Timing {
                        delay_loop: e.delay_loop,
                        retry: e.retry,
                        delay_before_retry: e.delay_before_retry,
                        warmup: e.warmup,
                        alpha: e.alpha,
                    },
                    log_all_failures: e.log_all_failures || conf.global.checker_log_all_failures,
                    misc_dynamic: matches!(&c.kind, CheckerKind::Misc(m) if m.dynamic),
                    interval_from_start: matches!(c.kind, CheckerKind::Misc(_)),
                    mail: MailText::of(c.kind.keyword()),
                });
                out.jobs.push(j);
            }
            reals.push(RsSpec {
                name: sock(rs.addr, rs.port),
                weight: rs.weight,
                inhibit: rs.effective.inhibit_on_failure,
                notify_up: ScriptSpec::of(&rs.notify_up),
                notify_down: ScriptSpec::of(&rs.notify_down),
                smtp_alert: smtp_alert(conf, rs.smtp_alert, true),
                checkers,
            });
        }
        out.config.virtual_servers.push(VsSpec {
            name: vs_name(conf, first),
            services: mine
                .iter()
                .map(|s| ServiceSlot {
                    key: s.key,
                    dests: s.dests.clone(),
                    sorry: s.sorry_server,
                })
                .collect(),
            quorum: first.quorum,
            hysteresis: first.hysteresis,
            quorum_up: ScriptSpec::of(&vs.quorum_up),
            quorum_down: ScriptSpec::of(&vs.quorum_down),
            sorry_inhibit: first.sorry_server_inhibit,
            omega: vs.omega,
            smtp_alert: smtp_alert(conf, vs.smtp_alert, false),
            reals,
        });
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A keepalived.conf text's configuration and its LVS services (also
    /// health.rs's tests').
    pub(crate) fn load(text: &str) -> (KeepalivedConf, Vec<ServiceSpec>) {
        let dir = std::env::temp_dir().join(format!("rvs-check-build-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{}.conf", text.len()));
        std::fs::write(&p, text).unwrap();
        let l = rvs_config::load(&p, &rvs_config::LoadOptions::default()).unwrap();
        let specs = l.config.lvs_services().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (l.config, specs)
    }

    #[test]
    fn plan_resolves_targets_timing_and_quorum() {
        let (conf, specs) = load(
            "virtual_server 10.0.0.1 80 {\n  delay_loop 7\n  lb_algo rr\n  protocol TCP\n  quorum 2\n  hysteresis 1\n\
             sorry_server 10.0.0.9 8080\n  quorum_down \"/bin/qd now\"\n\
             real_server 10.0.0.2 80 {\n    weight 3\n    inhibit_on_failure\n    notify_down /bin/down\n\
             TCP_CHECK {\n      connect_port 81\n      connect_timeout 2\n      retry 4\n    }\n\
             HTTP_GET {\n      url {\n        path /\n      }\n    }\n  }\n\
             real_server 10.0.0.3 80 {\n  }\n}\n",
        );
        let p = plan(&conf, &specs);
        assert_eq!(p.config.virtual_servers.len(), 1);
        let vs = &p.config.virtual_servers[0];
        assert_eq!(vs.name, "TCP 10.0.0.1:80");
        assert_eq!((vs.quorum, vs.hysteresis), (2, 1));
        assert_eq!(vs.quorum_down.as_ref().unwrap().command, "/bin/qd now");
        assert!(vs.services[0].sorry.is_some());
        let rs = &vs.reals[0];
        assert_eq!(
            (rs.name.as_str(), rs.weight, rs.inhibit),
            ("10.0.0.2:80", 3, true)
        );
        assert_eq!(rs.notify_down.as_ref().unwrap().command, "/bin/down");
        assert_eq!(rs.checkers.len(), 2);
        assert_eq!(rs.checkers[0].label, "TCP_CHECK 10.0.0.2:81");
        assert_eq!(rs.checkers[0].timing.retry, 4);
        assert_eq!(rs.checkers[0].timing.delay_loop, Duration::from_secs(7));
        assert_eq!(rs.checkers[1].label, "HTTP_GET 10.0.0.2:80");
        assert_eq!(p.jobs.len(), 2);
        assert_eq!(p.jobs[0].connect_timeout, Duration::from_secs(2));
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        match crate::bridge::spec(&p.jobs[1]) {
            Ok(crate::probe::ProbeSpec::Http {
                urls, tls: None, ..
            }) => {
                assert_eq!(urls[0].path, "/");
                assert_eq!(urls[0].status, vec![200..=299]);
            }
            other => panic!("{other:?}"),
        }
        assert!(vs.reals[1].checkers.is_empty());
    }

    /// What the checker keywords without a test of their own do: where the
    /// probes bind, how long and how they run, how often they retry, what
    /// the policy logs and mails, and the sorry server's inhibition.
    #[test]
    fn checker_keywords_reach_the_probes_and_the_policy() {
        let (conf, specs) = load(
            "global_defs {\n  checker_log_all_failures\n  smtp_alert_checker\n}\n\
             virtual_server 10.0.0.1 80 {\n  delay_loop 7\n  lb_algo rr\n  protocol TCP\n\
             sorry_server 10.0.0.9 8080\n  sorry_server_inhibit\n\
             real_server 10.0.0.2 80 {\n\
             TCP_CHECK {\n      bindto 10.0.0.100\n      bind_port 4000\n      nb_get_retry 5\n    }\n\
             HTTP_GET {\n      http_protocol 1.1\n      url {\n        path /\n      }\n    }\n\
             MISC_CHECK {\n      misc_path /bin/true\n      misc_timeout 3\n    }\n\
             UDP_CHECK {\n      require_reply 6f6b\n      min_reply_length 2\n      max_reply_length 9\n    }\n\
             }\n}\n",
        );
        let p = plan(&conf, &specs);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let vs = &p.config.virtual_servers[0];
        // sorry_server_inhibit; smtp_alert_checker mails the virtual
        // server's quorum changes (off by default) and its real servers'.
        assert!(vs.sorry_inhibit);
        assert!(vs.smtp_alert);
        let rs = &vs.reals[0];
        assert!(rs.smtp_alert);
        // checker_log_all_failures: every checker logs its retried failures.
        assert_eq!(rs.checkers.len(), 4);
        assert!(rs.checkers.iter().all(|c| c.log_all_failures));
        // nb_get_retry is retry.
        assert_eq!(rs.checkers[0].timing.retry, 5);
        // bindto + bind_port: the probe's source.
        assert_eq!(p.jobs[0].bind, Some("10.0.0.100:4000".parse().unwrap()));
        match crate::bridge::spec(&p.jobs[1]) {
            Ok(crate::probe::ProbeSpec::Http { http_protocol, .. }) => {
                assert_eq!(http_protocol, crate::probe::HttpVersion::Http11);
            }
            other => panic!("{other:?}"),
        }
        match crate::bridge::spec(&p.jobs[2]) {
            Ok(crate::probe::ProbeSpec::Misc { timeout, .. }) => {
                assert_eq!(
                    timeout,
                    Duration::from_secs(3),
                    "misc_timeout, not delay_loop"
                );
            }
            other => panic!("{other:?}"),
        }
        match crate::bridge::spec(&p.jobs[3]) {
            Ok(crate::probe::ProbeSpec::Udp {
                min_reply,
                max_reply,
                ..
            }) => assert_eq!((min_reply, max_reply), (2, 9)),
            other => panic!("{other:?}"),
        }
    }
}
