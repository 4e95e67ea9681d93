//! The configuration model: virtual services and real servers as an operator
//! states them (`ipvsadm -A/-a`, keepalived's `virtual_server`/`real_server`).
//!
//! These are plain values. Runtime state (connection counters, flags, stats)
//! lives in [`crate::dest::Dest`] and [`crate::ipvs::Ipvs`].

use crate::sched::Scheduler;
use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Transport protocol of a virtual service.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Protocol {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
    /// SCTP (IP protocol 132).
    Sctp,
}

impl Protocol {
    /// The IP protocol number, which is also the sort key ipvsadm uses.
    pub const fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    /// The protocol for an IP protocol number, if it is one IPVS balances.
    pub const fn from_number(n: u8) -> Option<Protocol> {
        match n {
            6 => Some(Protocol::Tcp),
            17 => Some(Protocol::Udp),
            132 => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The name ipvsadm prints (`TCP`, `UDP`, `SCTP`).
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Address family of a service or real server.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AddrFamily {
    /// IPv4.
    Inet,
    /// IPv6.
    Inet6,
}

impl AddrFamily {
    /// The family of an address.
    pub const fn of(addr: &IpAddr) -> AddrFamily {
        match addr {
            IpAddr::V4(_) => AddrFamily::Inet,
            IpAddr::V6(_) => AddrFamily::Inet6,
        }
    }
}

/// What identifies a virtual service: protocol + VIP + port, or a firewall
/// mark (+ address family).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ServiceKey {
    /// `-t/-u/--sctp-service addr:port`. Port 0 means "every port" and
    /// requires persistence.
    Addr {
        /// Transport protocol.
        protocol: Protocol,
        /// The virtual IP address.
        addr: IpAddr,
        /// The virtual port, 0 for a port-zero service.
        port: u16,
    },
    /// `-f mark [-6]`: every packet carrying the mark, any protocol or port.
    Fwmark {
        /// The firewall mark (1..=u32::MAX).
        mark: u32,
        /// Address family of the service.
        af: AddrFamily,
    },
}

impl ServiceKey {
    /// Address family of the service.
    pub const fn af(&self) -> AddrFamily {
        match self {
            ServiceKey::Addr { addr, .. } => AddrFamily::of(addr),
            ServiceKey::Fwmark { af, .. } => *af,
        }
    }

    /// The virtual port (0 for fwmark and port-zero services).
    pub const fn port(&self) -> u16 {
        match self {
            ServiceKey::Addr { port, .. } => *port,
            ServiceKey::Fwmark { .. } => 0,
        }
    }

    /// True for a firewall-mark service.
    pub const fn is_fwmark(&self) -> bool {
        matches!(self, ServiceKey::Fwmark { .. })
    }
}

/// Tunnel encapsulation of a `-i` (tunnel) real server.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TunnelType {
    /// IP-in-IP (the default).
    #[default]
    Ipip,
    /// Generic UDP Encapsulation; needs a port.
    Gue,
    /// GRE (RFC 2784), as kernel IPVS sends it: the inner packet's
    /// ethertype as the protocol, a checksum with `--tun-csum`.
    Gre,
    /// Geneve (RFC 8926) to UDP port 6081, rvs-only (kernel IPVS has no
    /// Geneve): the DSR transport that passes cloud security groups that
    /// drop IP options or unknown IP protocols.
    Geneve,
}

impl TunnelType {
    /// The name ipvsadm uses for `--tun-type` (`geneve` is rvs's own).
    pub const fn name(self) -> &'static str {
        match self {
            TunnelType::Ipip => "ipip",
            TunnelType::Gue => "gue",
            TunnelType::Gre => "gre",
            TunnelType::Geneve => "geneve",
        }
    }
}

/// The UDP destination port of Geneve tunnels (IANA's, RFC 8926).
pub const GENEVE_PORT: u16 = 6081;

/// Checksum handling of a GUE or GRE tunnel (`--tun-nocsum|--tun-csum|--tun-remcsum`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TunnelCsum {
    /// No checksum in the encapsulation (the kernel's default, flag value 0).
    #[default]
    NoCsum,
    /// Checksum the encapsulation (`IP_VS_TUNNEL_ENCAP_FLAG_CSUM`).
    Csum,
    /// Remote checksum offload, GUE only (`IP_VS_TUNNEL_ENCAP_FLAG_REMCSUM`).
    RemCsum,
}

/// Parameters of a tunnel real server.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Tunnel {
    /// Encapsulation.
    pub kind: TunnelType,
    /// Destination UDP port of GUE (0 for other kinds).
    pub port: u16,
    /// Checksum option.
    pub csum: TunnelCsum,
}

/// How packets reach a real server (`-m -g -i`, keepalived `lb_kind`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ForwardMethod {
    /// NAT (`-m`, keepalived `NAT`): destination rewritten, replies come back
    /// through the director.
    Masq,
    /// The real server is the director itself (ipvsadm prints `Local`).
    Local,
    /// Direct routing (`-g`, keepalived `DR`): MAC rewrite, replies bypass the director.
    Route,
    /// IP tunnelling (`-i`, keepalived `TUN`).
    Tunnel(Tunnel),
    /// Full NAT (Alibaba `lb_kind FNAT`): source and destination rewritten.
    FullNat,
}

impl ForwardMethod {
    /// The name ipvsadm prints in the Forward column.
    pub const fn name(&self) -> &'static str {
        match self {
            ForwardMethod::Masq => "Masq",
            ForwardMethod::Local => "Local",
            ForwardMethod::Route => "Route",
            ForwardMethod::Tunnel(_) => "Tunnel",
            ForwardMethod::FullNat => "FullNat",
        }
    }

    /// True when replies pass through the director, so the director sees
    /// both directions (NAT and FULLNAT). Other methods use the INPUT-ONLY
    /// state table.
    pub const fn sees_replies(&self) -> bool {
        matches!(self, ForwardMethod::Masq | ForwardMethod::FullNat)
    }
}

/// PROXY protocol header sent to real servers by the proxy data plane, so
/// they see the client's address (rvs extension; `--proxy-protocol v1|v2`,
/// keepalived `proxy_protocol v1|v2`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ProxyProtocol {
    /// The text header (`PROXY TCP4 ...\r\n`).
    V1,
    /// The binary header.
    V2,
}

impl ProxyProtocol {
    /// `v1` or `v2`, as the options spell it.
    pub const fn name(self) -> &'static str {
        match self {
            ProxyProtocol::V1 => "v1",
            ProxyProtocol::V2 => "v2",
        }
    }
}

/// A real server as configured (`-a -r addr:port -w N -x U -y L`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DestConfig {
    /// Address of the real server.
    pub addr: IpAddr,
    /// Port of the real server (0 = use the packet's destination port).
    pub port: u16,
    /// Weight, 0..=65535. Weight 0 is "quiesced": no new connections.
    pub weight: u32,
    /// Forwarding method.
    pub forward: ForwardMethod,
    /// Upper connection threshold (0 = none): at or above it the server is
    /// marked overloaded.
    pub u_threshold: u32,
    /// Lower connection threshold (0 = none): below it the overload mark is cleared.
    pub l_threshold: u32,
    /// PROXY protocol toward this real server, overriding the service's
    /// (proxy data plane only).
    pub proxy_protocol: Option<ProxyProtocol>,
}

impl DestConfig {
    /// A real server with ipvsadm's defaults: weight 1, direct routing, no thresholds.
    pub const fn new(addr: IpAddr, port: u16) -> Self {
        DestConfig {
            addr,
            port,
            weight: 1,
            forward: ForwardMethod::Route,
            u_threshold: 0,
            l_threshold: 0,
            proxy_protocol: None,
        }
    }

    /// Builder: set the weight.
    pub const fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Builder: set the forwarding method.
    pub const fn forward(mut self, forward: ForwardMethod) -> Self {
        self.forward = forward;
        self
    }

    /// Builder: set upper and lower thresholds.
    pub const fn thresholds(mut self, upper: u32, lower: u32) -> Self {
        self.u_threshold = upper;
        self.l_threshold = lower;
        self
    }
}

/// Scheduler flags (`-b`), with the kernel's bit values.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SchedFlags(pub u32);

impl SchedFlags {
    /// `flag-1` (`IP_VS_SVC_F_SCHED1`).
    pub const FLAG1: SchedFlags = SchedFlags(0x0008);
    /// `flag-2` (`IP_VS_SVC_F_SCHED2`).
    pub const FLAG2: SchedFlags = SchedFlags(0x0010);
    /// `flag-3` (`IP_VS_SVC_F_SCHED3`).
    pub const FLAG3: SchedFlags = SchedFlags(0x0020);
    /// `sh-fallback`: try other buckets when the hashed server is unavailable.
    pub const SH_FALLBACK: SchedFlags = Self::FLAG1;
    /// `sh-port`: include the source port in the hash.
    pub const SH_PORT: SchedFlags = Self::FLAG2;
    /// `mh-fallback`: try other slots when the hashed server is unavailable.
    pub const MH_FALLBACK: SchedFlags = Self::FLAG1;
    /// `mh-port`: include the source port in the hash.
    pub const MH_PORT: SchedFlags = Self::FLAG2;

    /// True when every bit of `other` is set.
    pub const fn contains(self, other: SchedFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union of two flag sets.
    pub const fn union(self, other: SchedFlags) -> SchedFlags {
        SchedFlags(self.0 | other.0)
    }
}

/// Persistence granularity (`-M`): which part of the client address forms
/// the persistence template key.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PersistMask {
    /// IPv4 netmask, default 255.255.255.255. Non-contiguous masks are
    /// applied as given, like the kernel does.
    V4(Ipv4Addr),
    /// IPv6 prefix length 1..=128, default 128.
    V6(u8),
}

impl PersistMask {
    /// The full-address default for a family.
    pub const fn full(af: AddrFamily) -> Self {
        match af {
            AddrFamily::Inet => PersistMask::V4(Ipv4Addr::BROADCAST),
            AddrFamily::Inet6 => PersistMask::V6(128),
        }
    }

    /// Apply the mask to a client address (an address of the other family is
    /// returned unchanged).
    pub fn apply(&self, addr: IpAddr) -> IpAddr {
        match (self, addr) {
            (PersistMask::V4(m), IpAddr::V4(a)) => {
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & u32::from(*m)))
            }
            (PersistMask::V6(p), IpAddr::V6(a)) => {
                let p = u32::from((*p).min(128));
                let mask = if p == 0 { 0 } else { u128::MAX << (128 - p) };
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
            (_, a) => a,
        }
    }
}

/// A persistence engine (`--pe`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PersistenceEngine {
    /// SIP: templates keyed also by the `Call-ID` header (UDP services).
    Sip,
}

impl PersistenceEngine {
    /// The name ipvsadm prints and accepts.
    pub const fn name(self) -> &'static str {
        match self {
            PersistenceEngine::Sip => "sip",
        }
    }
}

/// Default persistence timeout when `-p` is given without a value
/// (`IPVS_SVC_PERSISTENT_TIMEOUT`, 6 minutes; the man page's 300 is wrong).
pub const DEFAULT_PERSISTENCE_TIMEOUT: u32 = 360;

/// Maximum persistence timeout ipvsadm accepts (31 days).
pub const MAX_PERSISTENCE_TIMEOUT: u32 = 2_678_400;

/// Default Maglev table size (`CONFIG_IP_VS_MH_TAB_INDEX` 12).
pub const DEFAULT_MH_TABLE_SIZE: u32 = 4093;

/// A virtual service's options (`-s -b -p -M --pe -o`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ServiceConfig {
    /// Scheduler (`-s`; in JSON its ipvsadm name). ipvsadm's default is `wlc`.
    pub scheduler: Scheduler,
    /// Scheduler flags (`-b`).
    pub flags: SchedFlags,
    /// Persistence timeout in seconds; `None` = not persistent.
    pub persistent: Option<u32>,
    /// Persistence granularity.
    pub netmask: PersistMask,
    /// Persistence engine.
    pub pe: Option<PersistenceEngine>,
    /// One-packet scheduling (`-o`, UDP and fwmark services only).
    pub one_packet: bool,
    /// Maglev table size (a prime); rvs extension, default 4093 like the kernel.
    pub mh_table_size: u32,
    /// PROXY protocol toward the real servers (proxy data plane only; a
    /// real server's own setting wins).
    pub proxy_protocol: Option<ProxyProtocol>,
    /// Most simultaneous connections the service accepts (proxy data plane;
    /// 0 = unlimited). rvs extension, `--max-conns N`.
    pub max_conns: u32,
}

impl ServiceConfig {
    /// ipvsadm's defaults for a service of this family: `wlc`, not persistent.
    pub fn new(af: AddrFamily) -> Self {
        ServiceConfig {
            scheduler: Scheduler::Wlc,
            flags: SchedFlags::default(),
            persistent: None,
            netmask: PersistMask::full(af),
            pe: None,
            one_packet: false,
            mh_table_size: DEFAULT_MH_TABLE_SIZE,
            proxy_protocol: None,
            max_conns: 0,
        }
    }

    /// Builder: set the scheduler.
    pub fn scheduler(mut self, s: Scheduler) -> Self {
        self.scheduler = s;
        self
    }

    /// Builder: set scheduler flags.
    pub fn flags(mut self, flags: SchedFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Builder: make the service persistent with this timeout (seconds).
    pub fn persistent(mut self, timeout: u32) -> Self {
        self.persistent = Some(timeout);
        self
    }

    /// Builder: persistence granularity.
    pub fn netmask(mut self, mask: PersistMask) -> Self {
        self.netmask = mask;
        self
    }
}
