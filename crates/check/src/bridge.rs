//! From a [`ProbeJob`] (a configured checker) to the probe module: the
//! [`ProbeSpec`] and [`ProbeTarget`] of `probe::run`, and the result as the
//! policy's [`Outcome`].

use rvs_config::model::CheckerKind;

use crate::build::ProbeJob;
use crate::policy::Outcome;
use crate::probe::{
    self, DnsType, HttpVersion, ProbeSpec, ProbeTarget, TlsSpec, UdpReply, UrlSpec,
};

/// Checker kinds the probe module runs (FILE_CHECK and BFD_CHECK are not
/// built).
pub(crate) fn supports(kind: &CheckerKind) -> bool {
    !matches!(kind, CheckerKind::File(_) | CheckerKind::Bfd { .. })
}

/// The probe of a job; `Err` says why it cannot run.
pub(crate) fn spec(job: &ProbeJob) -> Result<ProbeSpec, String> {
    Ok(match &job.kind {
        CheckerKind::Tcp => ProbeSpec::Tcp,
        CheckerKind::Http(h) | CheckerKind::Ssl(h) => {
            let vhost = h.virtualhost.clone().or(job.virtualhost.clone());
            let tls = matches!(job.kind, CheckerKind::Ssl(_)).then(|| TlsSpec {
                sni: if h.enable_sni {
                    h.sni_name.clone().or(vhost.clone())
                } else {
                    None
                },
                verify_ca: None,
            });
            ProbeSpec::Http {
                tls,
                urls: h
                    .urls
                    .iter()
                    .map(|u| UrlSpec {
                        path: u.path.clone().unwrap_or_else(|| "/".into()),
                        status: if u.status_codes.is_empty() {
                            vec![200..=299]
                        } else {
                            u.status_codes.clone()
                        },
                        digest: u.digest.clone(),
                        virtualhost: u.virtualhost.clone(),
                    })
                    .collect(),
                virtualhost: vhost,
                http_protocol: h
                    .http_protocol
                    .as_deref()
                    .and_then(HttpVersion::from_keyword)
                    .unwrap_or_default(),
            }
        }
        CheckerKind::Misc(m) => ProbeSpec::Misc {
            path: m.path.clone(),
            timeout: m.timeout.unwrap_or(job.delay_loop),
            dynamic: m.dynamic,
            user: match &m.user {
                None => None,
                Some(u) => Some(probe::misc::resolve_user(u).map_err(|e| e.to_string())?),
            },
        },
        CheckerKind::Dns { qtype, name } => ProbeSpec::Dns {
            qtype: DnsType::from_keyword(qtype).ok_or_else(|| format!("DNS type {qtype}"))?,
            name: name.clone(),
            require_answer: false,
        },
        CheckerKind::Udp(u) => ProbeSpec::Udp {
            payload: u.payload.clone().unwrap_or_default(),
            require_reply: u.require_reply.as_ref().map(|r| match r {
                None => UdpReply::Any,
                Some(p) => UdpReply::Matching(p.clone()),
            }),
            min_reply: u.min_reply_length,
            max_reply: u.max_reply_length,
        },
        CheckerKind::Ping => ProbeSpec::Ping,
        CheckerKind::Smtp { helo_name } => ProbeSpec::Smtp {
            helo_name: helo_name
                .clone()
                .unwrap_or_else(|| probe::smtp::DEFAULT_HELO.to_owned()),
        },
        other => return Err(format!("{} is not supported", other.keyword())),
    })
}

/// Run the job's probe.
pub(crate) async fn run(job: &ProbeJob) -> Outcome {
    let spec = match spec(job) {
        Ok(s) => s,
        Err(e) => return Outcome::fail(&format!("cannot run: {e}")),
    };
    let target = ProbeTarget {
        addr: job.addr,
        bind: job.bind,
        bind_if: None,
        connect_timeout: job.connect_timeout,
        fwmark: job.fwmark,
    };
    let r = probe::run(&spec, &target).await;
    Outcome {
        result: r.outcome.map_err(|f| f.to_string()),
        weight: r.misc_weight,
        latency: r.latency,
    }
}
