//! A serialisable picture of the IPVS table: what `ipvsadm -L`/`-S` print.
//!
//! The daemon fills a [`Snapshot`] from its state and sends it (serde) to
//! `rvsadm`, which formats it with [`crate::format_list`] or
//! [`crate::format_save`]. The types mirror what ipvsadm gets from the
//! kernel (`ipvs_service_entry_t`, `ipvs_dest_entry_t`,
//! `/proc/net/ip_vs_conn`, `ipvs_daemon_t`) but use plain serde-friendly
//! fields, because rvs-core stays free of serde.

use std::net::{IpAddr, Ipv4Addr};

use rvs_core::model::{
    AddrFamily, DestConfig, ForwardMethod, PersistMask, Protocol, ServiceConfig, ServiceKey,
    TunnelCsum, TunnelType,
};
use rvs_core::sched::Scheduler;
use serde::{Deserialize, Serialize};

/// Everything a listing can show.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Virtual services (in table order; the formatters sort unless `--nosort`).
    pub services: Vec<ServiceSnap>,
    /// Connection entries, as `/proc/net/ip_vs_conn` lists them.
    pub conns: Vec<ConnSnap>,
    /// Timeouts `(tcp, tcpfin, udp)` in seconds.
    pub timeouts: (u32, u32, u32),
    /// Running sync daemons, master first.
    pub daemons: Vec<DaemonSnap>,
    /// Connection hash table size shown in the header (`size=4096`).
    pub conn_tab_size: u32,
}

/// A service key in serde-friendly form.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ServiceKeySnap {
    /// protocol (IP number: 6, 17, 132) + address + port.
    Addr {
        /// IP protocol number.
        protocol: u8,
        /// Virtual address.
        addr: IpAddr,
        /// Virtual port.
        port: u16,
    },
    /// Firewall mark service.
    Fwmark {
        /// The mark.
        mark: u32,
        /// IPv6 family (`-6`).
        ipv6: bool,
    },
}

impl From<&ServiceKey> for ServiceKeySnap {
    fn from(k: &ServiceKey) -> Self {
        match *k {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => ServiceKeySnap::Addr {
                protocol: protocol.number(),
                addr,
                port,
            },
            ServiceKey::Fwmark { mark, af } => ServiceKeySnap::Fwmark {
                mark,
                ipv6: af == AddrFamily::Inet6,
            },
        }
    }
}

impl ServiceKeySnap {
    /// Back to the core key (`None` for a protocol IPVS does not balance).
    pub fn to_key(&self) -> Option<ServiceKey> {
        Some(match *self {
            ServiceKeySnap::Addr {
                protocol,
                addr,
                port,
            } => ServiceKey::Addr {
                protocol: Protocol::from_number(protocol)?,
                addr,
                port,
            },
            ServiceKeySnap::Fwmark { mark, ipv6 } => ServiceKey::Fwmark {
                mark,
                af: if ipv6 {
                    AddrFamily::Inet6
                } else {
                    AddrFamily::Inet
                },
            },
        })
    }

    /// True for an IPv6 service.
    pub fn is_ipv6(&self) -> bool {
        match self {
            ServiceKeySnap::Addr { addr, .. } => addr.is_ipv6(),
            ServiceKeySnap::Fwmark { ipv6, .. } => *ipv6,
        }
    }
}

/// Persistence granularity.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetmaskSnap {
    /// IPv4 netmask.
    V4(Ipv4Addr),
    /// IPv6 prefix length.
    V6(u8),
}

/// Cumulative counters (`--stats`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSnap {
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
}

/// QUIC-LB routing counters of a service (`-L --quic-lb`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuicLbCountersSnap {
    /// Datagrams routed by the decoded server ID.
    pub by_cid: u64,
    /// Datagrams routed by the DCID hash.
    pub by_fallback: u64,
    /// Datagrams whose QUIC header did not parse.
    pub undecodable: u64,
}

/// Rate estimates (`--rate`), per second.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RatesSnap {
    /// Connections per second.
    pub cps: u64,
    /// Packets in per second.
    pub inpps: u64,
    /// Packets out per second.
    pub outpps: u64,
    /// Bytes in per second.
    pub inbps: u64,
    /// Bytes out per second.
    pub outbps: u64,
}

/// A virtual service with its real servers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceSnap {
    /// Which service.
    pub key: ServiceKeySnap,
    /// Scheduler (in JSON its ipvsadm name).
    pub scheduler: Scheduler,
    /// Scheduler flag bits (`IP_VS_SVC_F_SCHED1..3` = 0x08, 0x10, 0x20).
    pub sched_flags: u32,
    /// Persistence timeout, `None` when not persistent.
    pub persistent: Option<u32>,
    /// Persistence netmask.
    pub netmask: NetmaskSnap,
    /// Persistence engine name.
    pub pe: Option<String>,
    /// One-packet scheduling.
    pub one_packet: bool,
    /// Maglev table size (rvs; saved only when not the default 4093).
    #[serde(default = "default_mh")]
    pub mh_table_size: u32,
    /// rvs: PROXY protocol toward the real servers (`v1`/`v2`).
    #[serde(default)]
    pub proxy_protocol: Option<String>,
    /// rvs: most simultaneous connections (0 = unlimited).
    #[serde(default)]
    pub max_conns: u32,
    /// rvs: the FULLNAT local address pool, entries as `ADDR` or
    /// `FIRST-LAST` (`--add-laddr -z`; `-S` saves them).
    #[serde(default)]
    pub laddrs: Vec<String>,
    /// rvs: QUIC-LB configs as `--quic-lb` specs
    /// ([`rvs_core::model::QuicLbConfig::to_spec`], the key in clear so
    /// `-S` saves what `-R` restores; `-L --quic-lb` shows a fingerprint).
    #[serde(default)]
    pub quic_lb: Vec<String>,
    /// rvs: how the service's datagrams were routed by QUIC-LB.
    #[serde(default)]
    pub quic_lb_counters: QuicLbCountersSnap,
    /// rvs: the source of desired state that owns the service (`rvsadm`,
    /// `the configuration file`, `kubernetes`, `the HTTP API`): only it may
    /// change the service (`rvs_control::owner`). Not printed by the
    /// ipvsadm formats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Counters.
    pub stats: StatsSnap,
    /// Rates.
    pub rates: RatesSnap,
    /// Real servers.
    pub dests: Vec<DestSnap>,
}

fn default_mh() -> u32 {
    rvs_core::model::DEFAULT_MH_TABLE_SIZE
}

impl ServiceSnap {
    /// A service as configured, with zero counters and no real servers.
    pub fn from_config(key: &ServiceKey, config: &ServiceConfig) -> Self {
        ServiceSnap {
            key: ServiceKeySnap::from(key),
            scheduler: config.scheduler,
            sched_flags: config.flags.0,
            persistent: config.persistent,
            netmask: match config.netmask {
                PersistMask::V4(m) => NetmaskSnap::V4(m),
                PersistMask::V6(p) => NetmaskSnap::V6(p),
            },
            pe: config.pe.map(|p| p.name().to_owned()),
            one_packet: config.one_packet,
            mh_table_size: config.mh_table_size,
            proxy_protocol: config.proxy_protocol.map(|p| p.name().to_owned()),
            max_conns: config.max_conns,
            laddrs: Vec::new(),
            quic_lb: config.quic_lb.iter().map(|c| c.to_spec()).collect(),
            quic_lb_counters: QuicLbCountersSnap::default(),
            owner: None,
            stats: StatsSnap::default(),
            rates: RatesSnap::default(),
            dests: Vec::new(),
        }
    }
}

/// Tunnel encapsulation kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TunKindSnap {
    /// IP-in-IP.
    Ipip,
    /// GUE.
    Gue,
    /// GRE.
    Gre,
    /// Geneve (rvs-only).
    Geneve,
    /// DSR by IP option (rvs-only).
    Opt,
}

/// Tunnel checksum option.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TunCsumSnap {
    /// `--tun-nocsum` (`-c`).
    NoCsum,
    /// `--tun-csum` (`+c`).
    Csum,
    /// `--tun-remcsum` (`r+c`).
    RemCsum,
}

/// Forwarding method of a real server.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForwardSnap {
    /// NAT.
    Masq,
    /// Local node.
    Local,
    /// Direct routing.
    Route,
    /// Tunnel.
    Tunnel {
        /// Encapsulation.
        kind: TunKindSnap,
        /// GUE port (0 otherwise).
        port: u16,
        /// Checksum option.
        csum: TunCsumSnap,
    },
    /// Full NAT (rvs / Alibaba extension).
    FullNat,
}

impl From<&ForwardMethod> for ForwardSnap {
    fn from(f: &ForwardMethod) -> Self {
        match f {
            ForwardMethod::Masq => ForwardSnap::Masq,
            ForwardMethod::Local => ForwardSnap::Local,
            ForwardMethod::Route => ForwardSnap::Route,
            ForwardMethod::FullNat => ForwardSnap::FullNat,
            ForwardMethod::Tunnel(t) => ForwardSnap::Tunnel {
                kind: match t.kind {
                    TunnelType::Ipip => TunKindSnap::Ipip,
                    TunnelType::Gue => TunKindSnap::Gue,
                    TunnelType::Gre => TunKindSnap::Gre,
                    TunnelType::Geneve => TunKindSnap::Geneve,
                    TunnelType::Opt => TunKindSnap::Opt,
                },
                port: t.port,
                csum: match t.csum {
                    TunnelCsum::NoCsum => TunCsumSnap::NoCsum,
                    TunnelCsum::Csum => TunCsumSnap::Csum,
                    TunnelCsum::RemCsum => TunCsumSnap::RemCsum,
                },
            },
        }
    }
}

/// A real server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestSnap {
    /// Address.
    pub addr: IpAddr,
    /// Port.
    pub port: u16,
    /// Forwarding method.
    pub forward: ForwardSnap,
    /// Weight.
    pub weight: i32,
    /// Upper threshold.
    pub u_threshold: u32,
    /// Lower threshold.
    pub l_threshold: u32,
    /// Active connections.
    pub active: u32,
    /// Inactive connections.
    pub inactive: u32,
    /// Persistence templates pointing at it.
    pub persist: u32,
    /// Counters.
    pub stats: StatsSnap,
    /// Rates.
    pub rates: RatesSnap,
    /// rvs: PROXY protocol toward this real server (`v1`/`v2`), overriding
    /// the service's.
    #[serde(default)]
    pub proxy_protocol: Option<String>,
    /// rvs: the real server's QUIC-LB server ID, in hex.
    #[serde(default)]
    pub quic_server_id: Option<String>,
}

impl DestSnap {
    /// A real server as configured, with zero counters.
    pub fn from_config(d: &DestConfig) -> Self {
        DestSnap {
            addr: d.addr,
            port: d.port,
            forward: ForwardSnap::from(&d.forward),
            weight: i32::try_from(d.weight).unwrap_or(i32::MAX),
            u_threshold: d.u_threshold,
            l_threshold: d.l_threshold,
            active: 0,
            inactive: 0,
            persist: 0,
            stats: StatsSnap::default(),
            rates: RatesSnap::default(),
            proxy_protocol: d.proxy_protocol.map(|p| p.name().to_owned()),
            quic_server_id: d.quic_server_id.map(|s| s.to_string()),
        }
    }
}

/// One connection entry (a line of `/proc/net/ip_vs_conn`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnSnap {
    /// Protocol name as the kernel prints it (`TCP`, `UDP`, `SCTP`, `IP`, ...).
    pub protocol: String,
    /// State name (`ESTABLISHED`, `FIN_WAIT`, `NONE`, `UDP`, ...).
    pub state: String,
    /// Seconds until expiry.
    pub expire_secs: u32,
    /// Client address.
    pub caddr: IpAddr,
    /// Client port.
    pub cport: u16,
    /// Virtual address.
    pub vaddr: IpAddr,
    /// Virtual port.
    pub vport: u16,
    /// Destination (real server) address.
    pub daddr: IpAddr,
    /// Destination port.
    pub dport: u16,
    /// Persistence engine name, when the entry carries PE data.
    pub pe_name: Option<String>,
    /// Persistence engine data (e.g. a SIP Call-ID).
    pub pe_data: Option<String>,
    /// FULLNAT: the local address and port the connection's packets carry
    /// toward the real server (rvs; `-Lcn` adds a `local` column when a
    /// listed connection has one).
    #[serde(default)]
    pub local: Option<std::net::SocketAddr>,
}

/// A running connection-sync daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonSnap {
    /// `true` for master, `false` for backup.
    pub master: bool,
    /// Multicast interface.
    pub mcast_ifn: String,
    /// Sync id.
    pub syncid: u8,
    /// Max message length (0 = not reported).
    pub sync_maxlen: u16,
    /// Multicast group, if reported.
    pub mcast_group: Option<IpAddr>,
    /// Multicast port (0 = not reported).
    pub mcast_port: u16,
    /// Multicast TTL (0 = not reported).
    pub mcast_ttl: u8,
}
