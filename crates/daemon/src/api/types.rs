//! What the API reads and writes: request bodies (the options of `rvsadm
//! -A/-a`, by name), views of services, real servers, connections and sync
//! daemons, and the conversions between them and the core model. A view
//! has the body's field names, so what `GET /api/v1/table` answers can be
//! `PUT` back.

use std::net::IpAddr;

use rvs_core::model::{
    AddrFamily, DestConfig, ForwardMethod, LocalAddrRange, PersistMask, PersistenceEngine,
    ProxyProtocol, SchedFlags, ServiceConfig, ServiceKey, Tunnel, TunnelCsum, TunnelType,
};
use rvs_core::sched::Scheduler;
use rvs_ipvsadm::snapshot::{
    ConnSnap, DaemonSnap, DestSnap, ForwardSnap, NetmaskSnap, RatesSnap, ServiceSnap, StatsSnap,
    TunCsumSnap, TunKindSnap,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::ApiError;
use super::ids;

/// A virtual service as written: its identity (`protocol`, `address`,
/// `port`, or `fwmark` with `ipv6`) and the options of `rvsadm -A`. In a
/// PATCH every field is optional and only those given change (the
/// identity, reals and laddrs are not changed by a PATCH).
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub(crate) struct ServiceBody {
    /// `tcp`, `udp` or `sctp` (`-t/-u/--sctp-service`).
    pub protocol: Option<String>,
    /// The virtual address.
    pub address: Option<String>,
    /// The virtual port (0: every port, needs persistence).
    pub port: Option<u16>,
    /// A firewall mark instead of protocol/address/port (`-f`).
    pub fwmark: Option<u32>,
    /// With `fwmark`: an IPv6 service (`-6`).
    pub ipv6: Option<bool>,
    /// Scheduler (`-s`), ipvsadm's name (`rr`, `wlc`, `mh`, ...); default `wlc`.
    pub scheduler: Option<String>,
    /// Scheduler flags (`-b`): `flag-1`..`flag-3`, `sh-fallback`, `sh-port`, `mh-fallback`, `mh-port`.
    pub flags: Option<Vec<String>>,
    /// Persistence timeout in seconds (`-p`); 0 or null: not persistent.
    pub persistent: Option<u32>,
    /// Persistence netmask (`-M`): an IPv4 mask or an IPv6 prefix length.
    pub netmask: Option<String>,
    /// Persistence engine (`--pe`): `sip`, or `` for none.
    pub pe: Option<String>,
    /// One-packet scheduling (`-o`, UDP and fwmark services).
    pub one_packet: Option<bool>,
    /// Most simultaneous connections (proxy plane; 0 = unlimited).
    pub max_conns: Option<u32>,
    /// PROXY protocol toward the real servers: `v1`, `v2` or `none`.
    pub proxy_protocol: Option<String>,
    /// Maglev table size (a prime).
    pub mh_table_size: Option<u32>,
    /// Real servers to create with the service (POST, PUT of the table).
    pub reals: Option<Vec<RealBody>>,
    /// FULLNAT local address pool entries (`ADDR` or `ADDR-ADDR`).
    pub laddrs: Option<Vec<String>>,
}

/// A real server as written: the options of `rvsadm -a`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub(crate) struct RealBody {
    /// Its address (POST; ignored by PATCH).
    pub address: Option<String>,
    /// Its port (0: the packet's destination port).
    pub port: Option<u16>,
    /// Weight 0..=65535 (`-w`), default 1.
    pub weight: Option<u32>,
    /// Forwarding method: `route` (default, `-g`), `masq` (`-m`), `tunnel` (`-i`), `fullnat`.
    pub forward: Option<String>,
    /// Upper connection threshold (`-x`), 0 = none.
    pub u_threshold: Option<u32>,
    /// Lower connection threshold (`-y`), 0 = none.
    pub l_threshold: Option<u32>,
    /// PROXY protocol toward this real server: `v1`, `v2` or `none`.
    pub proxy_protocol: Option<String>,
    /// Tunnel encapsulation (`--tun-type`), with `forward` `tunnel` only;
    /// default `ipip`. Any of the three `tun_*` fields given states the
    /// tunnel anew, as `rvsadm -e -i --tun-type ...` does.
    pub tun_type: Option<TunType>,
    /// Tunnel destination port (`--tun-port`, 1..=65535): `gue` needs it,
    /// the other types refuse it.
    pub tun_port: Option<u16>,
    /// Tunnel checksum (`--tun-nocsum`, `--tun-csum`, `--tun-remcsum`):
    /// `gue`, `gre` and `geneve`; `remcsum` with `gue` only.
    pub tun_csum: Option<TunCsum>,
}

/// A tunnel real server's encapsulation (`--tun-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TunType {
    /// IP-in-IP (the default).
    Ipip,
    /// Generic UDP Encapsulation, to `tun_port`.
    Gue,
    /// GRE.
    Gre,
    /// Geneve to UDP 6081 (rvs only).
    Geneve,
    /// No encapsulation, the service in an IP option (rvs only, XDP plane).
    Opt,
}

impl From<TunType> for TunnelType {
    fn from(t: TunType) -> TunnelType {
        match t {
            TunType::Ipip => TunnelType::Ipip,
            TunType::Gue => TunnelType::Gue,
            TunType::Gre => TunnelType::Gre,
            TunType::Geneve => TunnelType::Geneve,
            TunType::Opt => TunnelType::Opt,
        }
    }
}

/// A tunnel's checksum option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TunCsum {
    /// No checksum (`--tun-nocsum`, the default).
    Nocsum,
    /// Checksum the encapsulation (`--tun-csum`).
    Csum,
    /// Remote checksum offload, `gue` only (`--tun-remcsum`).
    Remcsum,
}

impl From<TunCsum> for TunnelCsum {
    fn from(c: TunCsum) -> TunnelCsum {
        match c {
            TunCsum::Nocsum => TunnelCsum::NoCsum,
            TunCsum::Csum => TunnelCsum::Csum,
            TunCsum::Remcsum => TunnelCsum::RemCsum,
        }
    }
}

fn proxy_protocol(field: &str, s: &str) -> Result<Option<ProxyProtocol>, ApiError> {
    match s {
        "v1" => Ok(Some(ProxyProtocol::V1)),
        "v2" => Ok(Some(ProxyProtocol::V2)),
        "none" | "" => Ok(None),
        _ => Err(ApiError::field(field, format!("`{s}`: v1, v2 or none"))),
    }
}

fn addr(field: &str, s: &str) -> Result<IpAddr, ApiError> {
    s.parse()
        .map_err(|_| ApiError::field(field, format!("`{s}` is not an IP address")))
}

impl ServiceBody {
    /// The service the body names, if it names one.
    pub(crate) fn key(&self) -> Result<Option<ServiceKey>, ApiError> {
        if let Some(mark) = self.fwmark {
            if self.protocol.is_some() || self.address.is_some() || self.port.is_some() {
                return Err(ApiError::field(
                    "fwmark",
                    "a firewall-mark service has no protocol, address or port",
                ));
            }
            if mark == 0 {
                return Err(ApiError::field("fwmark", "the mark must not be 0"));
            }
            let af = if self.ipv6.unwrap_or(false) {
                AddrFamily::Inet6
            } else {
                AddrFamily::Inet
            };
            return Ok(Some(ServiceKey::Fwmark { mark, af }));
        }
        if self.protocol.is_none() && self.address.is_none() && self.port.is_none() {
            return Ok(None);
        }
        let p = self
            .protocol
            .as_deref()
            .ok_or_else(|| ApiError::field("protocol", "missing (tcp, udp or sctp)"))?;
        let protocol = ids::protocol_of(p)
            .ok_or_else(|| ApiError::field("protocol", format!("`{p}`: tcp, udp or sctp")))?;
        let a = self
            .address
            .as_deref()
            .ok_or_else(|| ApiError::field("address", "missing"))?;
        let port = self
            .port
            .ok_or_else(|| ApiError::field("port", "missing"))?;
        Ok(Some(ServiceKey::Addr {
            protocol,
            addr: addr("address", a)?,
            port,
        }))
    }

    /// The service the body names; a 400 when it names none.
    pub(crate) fn required_key(&self) -> Result<ServiceKey, ApiError> {
        self.key()?.ok_or_else(|| {
            ApiError::field(
                "protocol",
                "a service needs protocol, address and port, or fwmark",
            )
        })
    }

    /// Apply the options given onto `c`, a service of family `af`.
    pub(crate) fn apply(&self, c: &mut ServiceConfig, af: AddrFamily) -> Result<(), ApiError> {
        if let Some(s) = &self.scheduler {
            c.scheduler = s
                .parse::<Scheduler>()
                .map_err(|_| ApiError::field("scheduler", format!("`{s}`: no such scheduler")))?;
        }
        if let Some(flags) = &self.flags {
            c.flags = sched_flags(c.scheduler, flags)?;
        } else if self.scheduler.is_some() {
            // Flags of another scheduler do not carry over.
            let names = flag_names(SchedFlags(c.flags.0), c.scheduler);
            c.flags = sched_flags(c.scheduler, &names).unwrap_or_default();
        }
        if let Some(p) = self.persistent {
            if p > rvs_core::model::MAX_PERSISTENCE_TIMEOUT {
                return Err(ApiError::field(
                    "persistent",
                    format!(
                        "{p}: at most {} seconds",
                        rvs_core::model::MAX_PERSISTENCE_TIMEOUT
                    ),
                ));
            }
            c.persistent = (p != 0).then_some(p);
        }
        if let Some(m) = &self.netmask {
            c.netmask = netmask(m, af)?;
        }
        if let Some(pe) = &self.pe {
            c.pe = match pe.as_str() {
                "" | "none" => None,
                "sip" => Some(PersistenceEngine::Sip),
                _ => return Err(ApiError::field("pe", format!("`{pe}`: sip or none"))),
            };
        }
        if let Some(o) = self.one_packet {
            c.one_packet = o;
        }
        if let Some(m) = self.max_conns {
            c.max_conns = m;
        }
        if let Some(p) = &self.proxy_protocol {
            c.proxy_protocol = proxy_protocol("proxy_protocol", p)?;
        }
        if let Some(m) = self.mh_table_size {
            c.mh_table_size = m;
        }
        Ok(())
    }

    /// The real servers given, checked, for the service `key`.
    pub(crate) fn dests(&self, key: &ServiceKey) -> Result<Vec<DestConfig>, ApiError> {
        self.reals
            .iter()
            .flatten()
            .map(|r| {
                let d = r.new_dest()?;
                check_family(key, &d)?;
                Ok(d)
            })
            .collect()
    }

    /// The pool entries given, checked.
    pub(crate) fn laddrs(&self) -> Result<Vec<LocalAddrRange>, ApiError> {
        self.laddrs
            .iter()
            .flatten()
            .map(|s| LocalAddrRange::parse(s).map_err(|e| ApiError::field("laddrs", e.to_string())))
            .collect()
    }
}

const FLAGS: [(&str, SchedFlags, Option<Scheduler>); 7] = [
    ("flag-1", SchedFlags::FLAG1, None),
    ("flag-2", SchedFlags::FLAG2, None),
    ("flag-3", SchedFlags::FLAG3, None),
    ("sh-fallback", SchedFlags::SH_FALLBACK, Some(Scheduler::Sh)),
    ("sh-port", SchedFlags::SH_PORT, Some(Scheduler::Sh)),
    ("mh-fallback", SchedFlags::MH_FALLBACK, Some(Scheduler::Mh)),
    ("mh-port", SchedFlags::MH_PORT, Some(Scheduler::Mh)),
];

/// `-b` names into bits, checked against the scheduler as ipvsadm does.
fn sched_flags(s: Scheduler, names: &[String]) -> Result<SchedFlags, ApiError> {
    let mut bits = SchedFlags::default();
    for n in names {
        let Some((_, bit, needs)) = FLAGS.iter().find(|(name, ..)| name == n) else {
            return Err(ApiError::field("flags", format!("`{n}`: no such flag")));
        };
        if needs.is_some_and(|x| x != s) {
            return Err(ApiError::field(
                "flags",
                format!("`{n}` does not go with scheduler {}", s.name()),
            ));
        }
        bits = bits.union(*bit);
    }
    Ok(bits)
}

/// Bits back into the names the scheduler knows them by.
fn flag_names(bits: SchedFlags, s: Scheduler) -> Vec<String> {
    let mut out = Vec::new();
    for (name, bit, needs) in FLAGS {
        let mine = needs.map_or(
            !matches!(s, Scheduler::Sh | Scheduler::Mh) || bit == SchedFlags::FLAG3,
            |x| x == s,
        );
        if mine && bits.contains(bit) && bit.0 != 0 {
            out.push(name.to_owned());
        }
    }
    out
}

fn netmask(m: &str, af: AddrFamily) -> Result<PersistMask, ApiError> {
    let bad = || {
        ApiError::field(
            "netmask",
            format!("`{m}`: an IPv4 mask or an IPv6 prefix length"),
        )
    };
    match af {
        AddrFamily::Inet => m.parse().map(PersistMask::V4).map_err(|_| bad()),
        AddrFamily::Inet6 => match m.parse::<u8>() {
            Ok(p) if (1..=128).contains(&p) => Ok(PersistMask::V6(p)),
            _ => Err(bad()),
        },
    }
}

/// A real server's address family against its service's, as rvsadm
/// checks it (the one check, rvsadm's words): another family only behind
/// an encapsulating tunnel. A 400 naming `address`, before anything is
/// written (the core would refuse it later, without the field).
pub(crate) fn check_family(key: &ServiceKey, d: &DestConfig) -> Result<(), ApiError> {
    rvs_ipvsadm::check_family(key.af(), d.addr, &d.forward).map_err(|e| {
        ApiError::field(
            "address",
            format!(
                "{}: real server {} of service {}",
                e.message,
                ids::real_id(d.addr, d.port),
                ids::service_id(key)
            ),
        )
    })
}

impl RealBody {
    /// A new real server from the body (`address` needed).
    pub(crate) fn new_dest(&self) -> Result<DestConfig, ApiError> {
        let a = self
            .address
            .as_deref()
            .ok_or_else(|| ApiError::field("address", "missing"))?;
        let mut d = DestConfig::new(addr("address", a)?, self.port.unwrap_or(0));
        self.apply(&mut d)?;
        Ok(d)
    }

    /// Apply the options given onto `d` (address and port are identity).
    pub(crate) fn apply(&self, d: &mut DestConfig) -> Result<(), ApiError> {
        if let Some(w) = self.weight {
            if w > 65535 {
                return Err(ApiError::field("weight", format!("{w}: 0..=65535")));
            }
            d.weight = w;
            // A weight stated outright ends a drain.
            d.drained_from = None;
        }
        if let Some(f) = &self.forward {
            d.forward = match f.as_str() {
                "route" | "dr" => ForwardMethod::Route,
                "masq" | "nat" => ForwardMethod::Masq,
                "tunnel" | "ipip" => ForwardMethod::Tunnel(Tunnel::default()),
                "fullnat" => ForwardMethod::FullNat,
                "local" => ForwardMethod::Local,
                _ => {
                    return Err(ApiError::field(
                        "forward",
                        format!("`{f}`: route, masq, tunnel, fullnat or local"),
                    ));
                }
            };
        }
        let tun_given =
            self.tun_type.is_some() || self.tun_port.is_some() || self.tun_csum.is_some();
        if tun_given {
            let ForwardMethod::Tunnel(t) = &mut d.forward else {
                return Err(ApiError::field(
                    "forward",
                    "Tunnel options conflict with forward method",
                ));
            };
            *t = self.tunnel()?;
        }
        if let Some(u) = self.u_threshold {
            d.u_threshold = u;
        }
        if let Some(l) = self.l_threshold {
            d.l_threshold = l;
        }
        if let Some(p) = &self.proxy_protocol {
            d.proxy_protocol = proxy_protocol("proxy_protocol", p)?;
        }
        Ok(())
    }

    /// The tunnel the `tun_*` fields state, checked as rvsadm checks its
    /// `--tun-*` options (the same check, the same words).
    fn tunnel(&self) -> Result<Tunnel, ApiError> {
        let kind = self.tun_type.map_or(TunnelType::Ipip, TunnelType::from);
        let csum = self.tun_csum.map(TunnelCsum::from);
        rvs_ipvsadm::check_tunnel(kind, self.tun_port, csum).map_err(|e| {
            let field = if e.message.contains("port") {
                "tun_port"
            } else if e.message.contains("csum") {
                "tun_csum"
            } else {
                "tun_type"
            };
            ApiError::field(field, e.message)
        })?;
        Ok(Tunnel {
            kind,
            port: self.tun_port.unwrap_or(0),
            csum: csum.unwrap_or_default(),
        })
    }
}

/// Counters and rates of a service or real server.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub(crate) struct StatsView {
    /// Connections scheduled.
    pub conns: u64,
    /// Packets in.
    pub inpkts: u64,
    /// Packets out.
    pub outpkts: u64,
    /// Bytes in.
    pub inbytes: u64,
    /// Bytes out.
    pub outbytes: u64,
    /// Connections a second.
    pub cps: u64,
    /// Packets a second in.
    pub inpps: u64,
    /// Packets a second out.
    pub outpps: u64,
    /// Bytes a second in.
    pub inbps: u64,
    /// Bytes a second out.
    pub outbps: u64,
}

fn stats(s: &StatsSnap, r: &RatesSnap) -> StatsView {
    StatsView {
        conns: s.conns,
        inpkts: s.inpkts,
        outpkts: s.outpkts,
        inbytes: s.inbytes,
        outbytes: s.outbytes,
        cps: r.cps,
        inpps: r.inpps,
        outpps: r.outpps,
        inbps: r.inbps,
        outbps: r.outbps,
    }
}

/// A real server as read.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct RealView {
    /// Its id (`ADDRESS-PORT`).
    pub id: String,
    /// Its address.
    pub address: String,
    /// Its port.
    pub port: u16,
    /// Weight.
    pub weight: i32,
    /// `route`, `masq`, `tunnel`, `fullnat` or `local`.
    pub forward: String,
    /// Upper connection threshold.
    pub u_threshold: u32,
    /// Lower connection threshold.
    pub l_threshold: u32,
    /// PROXY protocol toward it, if set.
    pub proxy_protocol: Option<String>,
    /// A tunnel's encapsulation (null unless `forward` is `tunnel`).
    pub tun_type: Option<TunType>,
    /// A `gue` tunnel's destination port.
    pub tun_port: Option<u16>,
    /// A `gue`, `gre` or `geneve` tunnel's checksum option.
    pub tun_csum: Option<TunCsum>,
    /// Active connections.
    pub active: u32,
    /// Inactive connections.
    pub inactive: u32,
    /// Persistence templates.
    pub persist: u32,
    /// Counters and rates.
    pub stats: StatsView,
}

/// A virtual service as read.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct ServiceView {
    /// Its id (`tcp-10.0.0.1-80`, `fwm-5`, ...).
    pub id: String,
    /// `tcp`, `udp`, `sctp` (null for a fwmark service).
    pub protocol: Option<String>,
    /// Virtual address.
    pub address: Option<String>,
    /// Virtual port.
    pub port: Option<u16>,
    /// Firewall mark.
    pub fwmark: Option<u32>,
    /// An IPv6 service.
    pub ipv6: bool,
    /// Scheduler.
    pub scheduler: String,
    /// Scheduler flags.
    pub flags: Vec<String>,
    /// Persistence timeout, seconds (null: not persistent).
    pub persistent: Option<u32>,
    /// Persistence netmask.
    pub netmask: String,
    /// Persistence engine.
    pub pe: Option<String>,
    /// One-packet scheduling.
    pub one_packet: bool,
    /// Connection bound (0 = none).
    pub max_conns: u32,
    /// PROXY protocol toward the real servers.
    pub proxy_protocol: Option<String>,
    /// Maglev table size.
    pub mh_table_size: u32,
    /// FULLNAT local address pool.
    pub laddrs: Vec<String>,
    /// The source that owns it (`rvsadm`, `the configuration file`,
    /// `kubernetes`, `the HTTP API`); only the API's are writable here.
    pub owner: Option<String>,
    /// Counters and rates.
    pub stats: StatsView,
    /// Real servers.
    pub reals: Vec<RealView>,
}

fn forward_name(f: &ForwardSnap) -> &'static str {
    match f {
        ForwardSnap::Masq => "masq",
        ForwardSnap::Local => "local",
        ForwardSnap::Route => "route",
        ForwardSnap::Tunnel { .. } => "tunnel",
        ForwardSnap::FullNat => "fullnat",
    }
}

/// A tunnel's fields as a [`RealBody`] states them (`tun_port` of `gue`
/// only, `tun_csum` of the types that take one), so the view can be
/// written back as it is read.
fn tun_fields(f: &ForwardSnap) -> (Option<TunType>, Option<u16>, Option<TunCsum>) {
    let ForwardSnap::Tunnel { kind, port, csum } = f else {
        return (None, None, None);
    };
    let csum = match csum {
        TunCsumSnap::NoCsum => TunCsum::Nocsum,
        TunCsumSnap::Csum => TunCsum::Csum,
        TunCsumSnap::RemCsum => TunCsum::Remcsum,
    };
    match kind {
        TunKindSnap::Ipip => (Some(TunType::Ipip), None, None),
        TunKindSnap::Opt => (Some(TunType::Opt), None, None),
        TunKindSnap::Gue => (Some(TunType::Gue), Some(*port), Some(csum)),
        TunKindSnap::Gre => (Some(TunType::Gre), None, Some(csum)),
        TunKindSnap::Geneve => (Some(TunType::Geneve), None, Some(csum)),
    }
}

impl RealView {
    /// The view of one real server of a snapshot.
    pub(crate) fn of(d: &DestSnap) -> RealView {
        let (tun_type, tun_port, tun_csum) = tun_fields(&d.forward);
        RealView {
            id: ids::real_id(d.addr, d.port),
            address: d.addr.to_string(),
            port: d.port,
            weight: d.weight,
            forward: forward_name(&d.forward).to_owned(),
            u_threshold: d.u_threshold,
            l_threshold: d.l_threshold,
            proxy_protocol: d.proxy_protocol.clone(),
            tun_type,
            tun_port,
            tun_csum,
            active: d.active,
            inactive: d.inactive,
            persist: d.persist,
            stats: stats(&d.stats, &d.rates),
        }
    }
}

impl ServiceView {
    /// The view of one service of a snapshot (`None` for a protocol the
    /// API does not name).
    pub(crate) fn of(s: &ServiceSnap) -> Option<ServiceView> {
        let key = s.key.to_key()?;
        let (protocol, address, port, fwmark) = match key {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => (
                Some(ids::protocol_name(protocol).to_owned()),
                Some(addr.to_string()),
                Some(port),
                None,
            ),
            ServiceKey::Fwmark { mark, .. } => (None, None, None, Some(mark)),
        };
        Some(ServiceView {
            id: ids::service_id(&key),
            protocol,
            address,
            port,
            fwmark,
            ipv6: key.af() == AddrFamily::Inet6,
            scheduler: s.scheduler.name().to_owned(),
            flags: flag_names(SchedFlags(s.sched_flags), s.scheduler),
            persistent: s.persistent,
            netmask: match s.netmask {
                NetmaskSnap::V4(m) => m.to_string(),
                NetmaskSnap::V6(p) => p.to_string(),
            },
            pe: s.pe.clone(),
            one_packet: s.one_packet,
            max_conns: s.max_conns,
            proxy_protocol: s.proxy_protocol.clone(),
            mh_table_size: s.mh_table_size,
            laddrs: s.laddrs.clone(),
            owner: s.owner.clone(),
            stats: stats(&s.stats, &s.rates),
            reals: s.dests.iter().map(RealView::of).collect(),
        })
    }
}

/// A service's configuration alone (no counters, no owner): what its
/// ETag is a hash of, so that traffic does not change it.
pub(crate) fn config_only(s: &ServiceSnap) -> ServiceSnap {
    let mut c = s.clone();
    c.stats = StatsSnap::default();
    c.rates = RatesSnap::default();
    c.quic_lb_counters = Default::default();
    c.owner = None;
    for d in &mut c.dests {
        *d = real_config_only(d);
    }
    c
}

/// A real server's configuration alone.
pub(crate) fn real_config_only(d: &DestSnap) -> DestSnap {
    let mut c = d.clone();
    c.active = 0;
    c.inactive = 0;
    c.persist = 0;
    c.stats = StatsSnap::default();
    c.rates = RatesSnap::default();
    c
}

/// The ETag of a service.
pub(crate) fn service_etag(s: &ServiceSnap) -> String {
    super::guard::etag_of(&config_only(s))
}

/// The ETag of a real server.
pub(crate) fn real_etag(d: &DestSnap) -> String {
    super::guard::etag_of(&real_config_only(d))
}

/// The ETag of the whole table.
pub(crate) fn table_etag(services: &[ServiceSnap]) -> String {
    let tags: Vec<String> = services.iter().map(service_etag).collect();
    super::guard::etag_of(&tags)
}

/// The whole table as read.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct TableView {
    /// Every service, with its real servers.
    pub services: Vec<ServiceView>,
}

/// The whole desired table as written (`PUT /api/v1/table`): the API's
/// services; another source's services may be listed unchanged.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub(crate) struct TableBody {
    /// Every service the API is to hold, with its real servers.
    pub services: Vec<ServiceBody>,
}

/// One connection.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct ConnView {
    /// `TCP`, `UDP`, `SCTP`.
    pub protocol: String,
    /// Its state (`ESTABLISHED`, `SYN_RECV`, `UDP`, ...).
    pub state: String,
    /// Seconds until it expires.
    pub expire_secs: u32,
    /// Client address.
    pub client: String,
    /// Client port.
    pub client_port: u16,
    /// Virtual address.
    pub vaddr: String,
    /// Virtual port.
    pub vport: u16,
    /// Real server address.
    pub daddr: String,
    /// Real server port.
    pub dport: u16,
}

impl ConnView {
    /// The view of a snapshot's connection.
    pub(crate) fn of(c: &ConnSnap) -> ConnView {
        ConnView {
            protocol: c.protocol.clone(),
            state: c.state.clone(),
            expire_secs: c.expire_secs,
            client: c.caddr.to_string(),
            client_port: c.cport,
            vaddr: c.vaddr.to_string(),
            vport: c.vport,
            daddr: c.daddr.to_string(),
            dport: c.dport,
        }
    }
}

/// A page of connections.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct ConnPage {
    /// The connections of this page.
    pub connections: Vec<ConnView>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
    /// Entries in the connection table (connections and persistence
    /// templates), every page; null when a filter is given (counting the
    /// matches would cost a pass over the whole table for each page).
    pub total: Option<usize>,
}

/// A connection-sync daemon as read.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct SyncView {
    /// `master` or `backup`.
    pub role: String,
    /// Multicast interface.
    pub interface: String,
    /// Sync id.
    pub syncid: u8,
    /// Largest message.
    pub maxlen: u16,
    /// Multicast group, if not the default.
    pub group: Option<String>,
    /// UDP port.
    pub port: u16,
    /// Multicast TTL.
    pub ttl: u8,
}

impl SyncView {
    /// The view of a running daemon.
    pub(crate) fn of(d: &DaemonSnap) -> SyncView {
        SyncView {
            role: if d.master { "master" } else { "backup" }.to_owned(),
            interface: d.mcast_ifn.clone(),
            syncid: d.syncid,
            maxlen: d.sync_maxlen,
            group: d.mcast_group.map(|g| g.to_string()),
            port: d.mcast_port,
            ttl: d.mcast_ttl,
        }
    }
}

/// Start a sync daemon (`rvsadm --start-daemon`).
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub(crate) struct SyncBody {
    /// `--mcast-interface`.
    pub interface: String,
    /// `--syncid`, default 0.
    pub syncid: Option<u8>,
    /// `--sync-maxlen`.
    pub maxlen: Option<u16>,
    /// `--mcast-group`.
    pub group: Option<String>,
    /// `--mcast-port`.
    pub port: Option<u16>,
    /// `--mcast-ttl`.
    pub ttl: Option<u8>,
}

/// A VRRP instance as read.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct VrrpView {
    /// Instance name.
    pub name: String,
    /// `MASTER`, `BACKUP`, `FAULT`, ...
    pub state: String,
    /// Its current priority.
    pub priority: u8,
}

/// `POST /api/v1/zero`: one service, or every counter.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub(crate) struct ZeroBody {
    /// A service id; absent: every service.
    pub service: Option<String>,
}

/// `POST /api/v1/services/{svc}/laddrs`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub(crate) struct LaddrBody {
    /// `ADDR` or `ADDR-ADDR`.
    pub laddr: String,
}

/// `POST /api/v1/drain`.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub(crate) struct DrainBody {
    /// Seconds the director stays `draining` before `drained` (`--grace`).
    pub grace_seconds: Option<u32>,
}

/// A write done.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct Done {
    /// What was done.
    pub message: String,
}
