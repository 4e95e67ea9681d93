//! From the keepalived model to rvs-core's service model: one
//! [`ServiceSpec`] per IPVS virtual service keepalived would create (a
//! `virtual_server group` expands to one per address of its ranges and one
//! per fwmark).

use std::net::IpAddr;

use rvs_core::model::{
    AddrFamily, DestConfig, LocalAddrRange, PersistMask, PersistenceEngine, Protocol,
    ServiceConfig, ServiceKey,
};

use crate::model::*;
use crate::{ConfigError, Loc};

/// Upper bound on the services one group may expand to.
pub(crate) const MAX_GROUP_EXPANSION: u128 = 65_536;

/// One IPVS virtual service to install, with its real servers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    /// The service identity.
    pub key: ServiceKey,
    /// Scheduler, flags, persistence.
    pub config: ServiceConfig,
    /// Real servers (all configured ones; health checks decide which are installed).
    pub dests: Vec<DestConfig>,
    /// The FULLNAT local address pool: the ranges of the
    /// `local_address_group` that `laddr_group_name` names.
    pub laddrs: Vec<LocalAddrRange>,
    /// Where the `virtual_server` block starts.
    pub loc: Loc,
    /// Index into [`KeepalivedConf::virtual_servers`].
    pub vs_index: usize,
    /// The sorry server, installed when quorum is lost.
    pub sorry_server: Option<DestConfig>,
    /// `sorry_server_inhibit`.
    pub sorry_server_inhibit: bool,
    /// Quorum (after sanity adjustment).
    pub quorum: u32,
    /// Hysteresis (after sanity adjustment).
    pub hysteresis: u32,
}

impl KeepalivedConf {
    /// `lvs_timeouts` as `(tcp, tcpfin, udp)` seconds, 0 meaning "unchanged"
    /// (the `ipvsadm --set` convention).
    pub fn lvs_timeouts(&self) -> Option<(u32, u32, u32)> {
        self.global.lvs_timeouts.map(|t| {
            (
                t.tcp.unwrap_or(0),
                t.tcpfin.unwrap_or(0),
                t.udp.unwrap_or(0),
            )
        })
    }

    /// Every IPVS service this configuration defines.
    pub fn lvs_services(&self) -> Result<Vec<ServiceSpec>, ConfigError> {
        let mut out = Vec::new();
        for (i, vs) in self.virtual_servers.iter().enumerate() {
            let rs_af = vs
                .real_servers
                .iter()
                .find(|r| !matches!(r.forward, rvs_core::model::ForwardMethod::Tunnel(_)))
                .map(|r| AddrFamily::of(&r.addr));
            let proto = vs.protocol.unwrap_or(Protocol::Udp);
            let mut keys: Vec<ServiceKey> = Vec::new();
            match &vs.target {
                VsTarget::Addr { addr, port } => keys.push(ServiceKey::Addr {
                    protocol: proto,
                    addr: *addr,
                    port: *port,
                }),
                VsTarget::Fwmark(mark) => keys.push(ServiceKey::Fwmark {
                    mark: *mark,
                    af: vs.ip_family.or(rs_af).unwrap_or(AddrFamily::Inet),
                }),
                VsTarget::Group(name) => {
                    let Some(g) = self.vs_groups.iter().find(|g| g.name == *name) else {
                        return Err(ConfigError::at(
                            &vs.loc,
                            format!("expected a defined virtual_server_group, found `{name}`"),
                        ));
                    };
                    for e in &g.entries {
                        match e {
                            VsgEntry::Range {
                                first,
                                last,
                                port,
                                loc,
                            } => {
                                let (a, b) = match (first, last) {
                                    (IpAddr::V4(a), IpAddr::V4(b)) => {
                                        (u128::from(u32::from(*a)), u128::from(u32::from(*b)))
                                    }
                                    (IpAddr::V6(a), IpAddr::V6(b)) => {
                                        (u128::from(*a), u128::from(*b))
                                    }
                                    _ => (1, 0),
                                };
                                if b.saturating_sub(a) >= MAX_GROUP_EXPANSION {
                                    return Err(ConfigError::at(
                                        loc,
                                        format!(
                                            "expected a range of at most {MAX_GROUP_EXPANSION} addresses, found {}",
                                            b - a + 1
                                        ),
                                    ));
                                }
                                let mut x = a;
                                while x <= b {
                                    let addr = match first {
                                        IpAddr::V4(_) => {
                                            IpAddr::V4(u32::try_from(x).unwrap_or(0).into())
                                        }
                                        IpAddr::V6(_) => IpAddr::V6(x.into()),
                                    };
                                    keys.push(ServiceKey::Addr {
                                        protocol: proto,
                                        addr,
                                        port: *port,
                                    });
                                    x += 1;
                                }
                            }
                            VsgEntry::Fwmark { mark, family, .. } => {
                                keys.push(ServiceKey::Fwmark {
                                    mark: *mark,
                                    af: family
                                        .or(vs.ip_family)
                                        .or(rs_af)
                                        .unwrap_or(AddrFamily::Inet),
                                })
                            }
                        }
                    }
                }
            }
            let pool = self.laddr_pool(vs)?;
            for key in keys {
                let af = key.af();
                if let Some((r, loc)) = pool.iter().find(|(r, _)| r.af() != af) {
                    return Err(ConfigError::at(
                        loc,
                        format!(
                            "expected local addresses of the virtual server's family, found {r}"
                        ),
                    ));
                }
                let mut cfg = ServiceConfig::new(af)
                    .scheduler(vs.scheduler.unwrap_or_default())
                    .flags(vs.flags);
                cfg.persistent = vs.persistence_timeout;
                if let Some(m) = vs.persistence_granularity {
                    cfg.netmask = match (m, af) {
                        (PersistMask::V4(_), AddrFamily::Inet)
                        | (PersistMask::V6(_), AddrFamily::Inet6) => m,
                        _ => PersistMask::full(af),
                    };
                }
                cfg.pe = vs
                    .persistence_engine
                    .as_deref()
                    .map(|_| PersistenceEngine::Sip);
                cfg.one_packet = vs.ops
                    && (key.is_fwmark()
                        || matches!(
                            key,
                            ServiceKey::Addr {
                                protocol: Protocol::Udp,
                                ..
                            }
                        ));
                if let Some(s) = vs.mh_table_size {
                    cfg.mh_table_size = s;
                }
                cfg.proxy_protocol = vs.proxy_protocol;
                cfg.max_conns = vs.max_conns;
                cfg.quic_lb = vs.quic_lb.clone();
                let vport = key.port();
                let fix_port = |fwd: rvs_core::model::ForwardMethod, p: u16| -> u16 {
                    if !matches!(vs.target, VsTarget::Group(_)) {
                        return p;
                    }
                    if fwd == rvs_core::model::ForwardMethod::Masq {
                        if p == 0 { vport } else { p }
                    } else {
                        vport
                    }
                };
                let dests = vs
                    .real_servers
                    .iter()
                    .map(|r| {
                        let mut d = DestConfig::new(r.addr, fix_port(r.forward, r.port))
                            .weight(r.weight)
                            .forward(r.forward)
                            .thresholds(r.uthreshold, r.lthreshold);
                        d.proxy_protocol = r.proxy_protocol;
                        d.quic_server_id = r.quic_server_id;
                        d
                    })
                    .collect();
                let sorry = vs.sorry_server.as_ref().map(|s| {
                    DestConfig::new(s.addr, fix_port(s.forward, s.port)).forward(s.forward)
                });
                out.push(ServiceSpec {
                    key,
                    config: cfg,
                    dests,
                    laddrs: pool.iter().map(|(r, _)| *r).collect(),
                    loc: vs.loc.clone(),
                    vs_index: i,
                    sorry_server: sorry,
                    sorry_server_inhibit: vs.sorry_server.as_ref().is_some_and(|s| s.inhibit),
                    quorum: vs.quorum,
                    hysteresis: vs.hysteresis,
                });
            }
        }
        Ok(out)
    }

    /// The pool of a virtual server (`laddr_group_name`), each range with
    /// where its group starts; a range that overlaps an earlier one, or is
    /// not a range, is an error there.
    fn laddr_pool(&self, vs: &VirtualServer) -> Result<Vec<(LocalAddrRange, &Loc)>, ConfigError> {
        let Some(name) = &vs.laddr_group_name else {
            return Ok(Vec::new());
        };
        let Some(g) = self.local_address_groups.iter().find(|g| g.name == *name) else {
            return Err(ConfigError::at(
                &vs.loc,
                format!("expected a defined local_address_group, found `{name}`"),
            ));
        };
        let mut out: Vec<(LocalAddrRange, &Loc)> = Vec::new();
        for (first, last) in &g.ranges {
            let r = LocalAddrRange::new(*first, *last)
                .map_err(|e| ConfigError::at(&g.loc, format!("local_address_group {name}: {e}")))?;
            if let Some((o, _)) = out.iter().find(|(o, _)| o.overlaps(&r)) {
                return Err(ConfigError::at(
                    &g.loc,
                    format!("local_address_group {name}: {r} overlaps {o}"),
                ));
            }
            out.push((r, &g.loc));
        }
        Ok(out)
    }
}
