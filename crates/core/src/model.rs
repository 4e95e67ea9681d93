//! The configuration model: virtual services and real servers as an operator
//! states them (`ipvsadm -A/-a`, keepalived's `virtual_server`/`real_server`).
//!
//! These are plain values. Runtime state (connection counters, flags, stats)
//! lives in [`crate::dest::Dest`] and [`crate::ipvs::Ipvs`].

use crate::sched::Scheduler;
use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod quic_lb;
pub use quic_lb::{
    MAX_QUIC_LB_CONFIGS, MAX_QUIC_SERVER_ID_LEN, QuicLbConfig, QuicLbError, QuicLbMode,
    QuicServerId,
};

/// A block of client addresses (`10.0.0.0/8`, `2001:db8::/32`) a service
/// admits: see [`ServiceConfig::source_ranges`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SourceRange {
    /// The first address of the block (host bits zero).
    addr: IpAddr,
    /// The prefix length (at most 32 for IPv4, 128 for IPv6).
    prefix: u8,
}

impl SourceRange {
    /// The block of `addr/prefix` (host bits cleared); `None` when the
    /// prefix is longer than the family's address.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<SourceRange> {
        let bits = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        (prefix <= bits).then(|| SourceRange {
            addr: masked(addr, prefix),
            prefix,
        })
    }

    /// The block's first address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in the block (never for the other family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && masked(ip, self.prefix) == self.addr
    }

    /// Whether a client at `ip` may use a service with `ranges` (every
    /// client when there are none).
    pub fn admits(ranges: &[SourceRange], ip: IpAddr) -> bool {
        ranges.is_empty() || ranges.iter().any(|r| r.contains(ip))
    }
}

impl fmt::Display for SourceRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// `addr` with all but its first `prefix` bits cleared.
fn masked(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

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

    /// The protocol and virtual address:port of an address service (what a
    /// socket for it is bound to); `None` for a firewall-mark service.
    pub fn socket_addr(&self) -> Option<(Protocol, std::net::SocketAddr)> {
        match *self {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => Some((protocol, std::net::SocketAddr::new(addr, port))),
            ServiceKey::Fwmark { .. } => None,
        }
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
    /// No encapsulation, rvs-only: the packet's destination becomes the
    /// real server's address:port and the service's address:port rides in
    /// an IPv4 option / IPv6 Destination Options header; `rvsd realserver
    /// --mode dsr-opt` on the real server's node takes it out and sends the
    /// replies from the service address (Kubernetes NodePort DSR, Cilium's
    /// `bpf-lb-dsr-dispatch=opt`). XDP data plane only.
    Opt,
}

impl TunnelType {
    /// The name ipvsadm uses for `--tun-type` (`geneve` and `opt` are rvs's
    /// own).
    pub const fn name(self) -> &'static str {
        match self {
            TunnelType::Ipip => "ipip",
            TunnelType::Gue => "gue",
            TunnelType::Gre => "gre",
            TunnelType::Geneve => "geneve",
            TunnelType::Opt => "opt",
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

/// Why a real server's address family may not differ from its service's
/// (see [`check_family`]). The messages are rvsadm's, so every source of
/// real servers (the command line, the REST API, keepalived.conf,
/// Kubernetes) refuses one in the same words.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FamilyError {
    /// The other family without a tunnel (NAT, DR, FULLNAT, local).
    #[error("Different address family is allowed only for tunneling servers")]
    NotTunnel,
    /// The other family behind `--tun-type opt`, which rewrites the packet
    /// instead of carrying it inside one of the server's family.
    #[error(
        "Different address family is not allowed for --tun-type opt (the packet is rewritten, not encapsulated)"
    )]
    OptTunnel,
}

/// The one address-family rule for a real server (ipvsadm's own check,
/// and rvs's for [`TunnelType::Opt`]): a server of `service`'s family is
/// always legal; one of the other family only behind an encapsulating
/// tunnel (ipip, gue, gre, geneve), since only a tunnel carries the
/// client's packet inside a packet of the server's family. Pure, so the
/// core's checks and the command line's share it.
pub fn check_family(
    service: AddrFamily,
    server: IpAddr,
    forward: &ForwardMethod,
) -> Result<(), FamilyError> {
    if AddrFamily::of(&server) == service {
        return Ok(());
    }
    match forward {
        ForwardMethod::Tunnel(t) if t.kind == TunnelType::Opt => Err(FamilyError::OptTunnel),
        ForwardMethod::Tunnel(_) => Ok(()),
        _ => Err(FamilyError::NotTunnel),
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
    /// The QUIC-LB server ID this real server encodes into the connection
    /// IDs it issues (rvs extension, `--quic-sid HEX`, keepalived
    /// `quic_server_id`). Only for a service with [`ServiceConfig::quic_lb`]
    /// configs: its length is theirs (`server_id_len`), and no two real
    /// servers of a service share one. `None` = reached only by fallback.
    pub quic_server_id: Option<QuicServerId>,
    /// The weight a drain (REST API `.../drain`, weight 0) took from this
    /// real server, for the undrain to give back: kept in the real
    /// server's own record so that it lasts as long as the record does
    /// (the saved table across a restart, a takeover). Not forwarding
    /// state: data planes ignore it; any other edit states it anew.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub drained_from: Option<u32>,
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
            quic_server_id: None,
            drained_from: None,
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
    /// QUIC-LB configurations (draft-ietf-quic-load-balancers-21) the data
    /// planes decode connection IDs with, to route a QUIC connection by the
    /// server ID its server put into them rather than by the client's
    /// address (which changes when the client migrates). Empty = not a
    /// QUIC-LB service. rvs extension, `--quic-lb SPEC` (repeatable),
    /// keepalived `quic_lb { ... }` (repeatable).
    ///
    /// At most [`MAX_QUIC_LB_CONFIGS`], each with its own rotation
    /// codepoint, all with the same `server_id_len`: several configs live at
    /// once exist for key rotation, where the real servers keep their
    /// server IDs and only the key or nonce length changes. UDP services
    /// only. See [`ServiceConfig::check_quic_lb`].
    pub quic_lb: Vec<QuicLbConfig>,
    /// The client address blocks the service admits (empty = every
    /// client): a connection or datagram from elsewhere is refused before
    /// a real server is chosen (Kubernetes `loadBalancerSourceRanges`). A
    /// data plane that cannot enforce them refuses the service rather than
    /// carry it open to everyone (`DataPlane::enforces_source_ranges` in
    /// rvs-control). rvs extension.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub source_ranges: Vec<SourceRange>,
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
            quic_lb: Vec::new(),
            source_ranges: Vec::new(),
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

/// One entry of a FULLNAT service's local address pool: an inclusive
/// range of addresses of one family (a single address has `first ==
/// last`). FULLNAT rewrites a client's source to an address of the pool
/// (and a port of it), so real servers answer the director without routing
/// through it; several addresses multiply the 64k ports one address gives
/// toward one real server (`ipvsadm --add-laddr -z`, keepalived's
/// `local_address_group`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LocalAddrRange {
    /// Lowest address of the range.
    pub first: IpAddr,
    /// Highest address of the range (same family, not below `first`).
    pub last: IpAddr,
}

/// Why a local address range is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaddrError {
    /// Not an address, an `A-B` range or an `A-N` last-group range.
    #[error("`{0}` is not an address or an address range")]
    Syntax(String),
    /// The two ends are of different families.
    #[error("`{0}`: the range mixes IPv4 and IPv6")]
    Family(String),
    /// The range ends below where it starts.
    #[error("`{0}`: the range ends below its first address")]
    Backwards(String),
    /// More than [`MAX_LADDR_RANGE`] addresses.
    #[error("`{0}`: a range holds at most 65536 addresses")]
    TooLarge(String),
}

/// Most addresses one range may hold: the XDP program and the proxy pick
/// from the pool by index, and no director owns more than this.
pub const MAX_LADDR_RANGE: u128 = 65_536;

impl LocalAddrRange {
    /// A range of one address.
    pub const fn single(addr: IpAddr) -> Self {
        LocalAddrRange {
            first: addr,
            last: addr,
        }
    }

    /// A checked range: same family, `first <= last`, at most
    /// [`MAX_LADDR_RANGE`] addresses.
    pub fn new(first: IpAddr, last: IpAddr) -> Result<Self, LaddrError> {
        let r = LocalAddrRange { first, last };
        let text = || r.to_string();
        match (first, last) {
            (IpAddr::V4(a), IpAddr::V4(b)) if a > b => Err(LaddrError::Backwards(text())),
            (IpAddr::V6(a), IpAddr::V6(b)) if a > b => Err(LaddrError::Backwards(text())),
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                if r.len() > MAX_LADDR_RANGE {
                    Err(LaddrError::TooLarge(text()))
                } else {
                    Ok(r)
                }
            }
            _ => Err(LaddrError::Family(text())),
        }
    }

    /// Address family of the range.
    pub const fn af(&self) -> AddrFamily {
        AddrFamily::of(&self.first)
    }

    /// How many addresses the range holds (at least 1 for a checked range).
    pub fn len(&self) -> u128 {
        match (self.first, self.last) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                u128::from(u32::from(b).saturating_sub(u32::from(a))) + 1
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => u128::from(b)
                .saturating_sub(u128::from(a))
                .saturating_add(1),
            _ => 0,
        }
    }

    /// Never true for a checked range (present for clippy's `len` rule).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `addr` lies in the range.
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.first, self.last, addr) {
            (IpAddr::V4(a), IpAddr::V4(b), IpAddr::V4(x)) => a <= x && x <= b,
            (IpAddr::V6(a), IpAddr::V6(b), IpAddr::V6(x)) => a <= x && x <= b,
            _ => false,
        }
    }

    /// Whether two ranges share an address.
    pub fn overlaps(&self, other: &LocalAddrRange) -> bool {
        self.contains(other.first)
            || self.contains(other.last)
            || other.contains(self.first)
            || other.contains(self.last)
    }

    /// The `i`-th address of the range (`None` past its end).
    pub fn nth(&self, i: u128) -> Option<IpAddr> {
        if i >= self.len() {
            return None;
        }
        Some(match self.first {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + i as u32)),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) + i)),
        })
    }

    /// Every address of the range, lowest first.
    pub fn addrs(&self) -> impl Iterator<Item = IpAddr> + '_ {
        (0..self.len()).filter_map(|i| self.nth(i))
    }

    /// Parse `ADDR`, `ADDR-ADDR`, or keepalived's `ADDR-N` where `N`
    /// replaces the last group (decimal octet for IPv4, hex group for IPv6),
    /// as `local_address_group` and `virtual_server_group` write ranges.
    pub fn parse(s: &str) -> Result<Self, LaddrError> {
        let bad = || LaddrError::Syntax(s.to_owned());
        let Some((a, b)) = s.split_once('-') else {
            return s.parse().map(LocalAddrRange::single).map_err(|_| bad());
        };
        let first: IpAddr = a.parse().map_err(|_| bad())?;
        let last: IpAddr = match b.parse() {
            Ok(x) => x,
            Err(_) => match first {
                IpAddr::V4(f) => {
                    let n: u8 = b.parse().map_err(|_| bad())?;
                    let o = f.octets();
                    IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], n))
                }
                IpAddr::V6(f) => {
                    if b.is_empty() || b.len() > 4 {
                        return Err(bad());
                    }
                    let n = u16::from_str_radix(b, 16).map_err(|_| bad())?;
                    let mut g = f.segments();
                    g[7] = n;
                    IpAddr::V6(Ipv6Addr::from(g))
                }
            },
        };
        LocalAddrRange::new(first, last)
    }
}

impl fmt::Display for LocalAddrRange {
    /// `ADDR` for one address, `FIRST-LAST` for a range (what `parse` and
    /// `ipvsadm -S` read back).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

#[cfg(test)]
mod quic_lb_tests {
    use super::*;

    fn udp() -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Udp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 443,
        }
    }

    #[test]
    fn spec_round_trips_and_modes() {
        let p = QuicLbConfig::parse_spec("cr=0,sid=3,nonce=6").unwrap();
        assert_eq!(p.mode(), QuicLbMode::Plaintext);
        assert_eq!(p.to_spec(), "cr=0,sid=3,nonce=6");
        assert_eq!(p.cid_len(), 10);
        let k = "cr=1,sid=3,nonce=13,key=4d9d0fd25a25e7f321ef464e13f9fa3d";
        let s = QuicLbConfig::parse_spec(k).unwrap();
        assert_eq!((s.mode(), s.to_spec()), (QuicLbMode::SinglePass, k.into()));
        assert!(!format!("{s:?}").contains("4d9d"));
        assert_eq!(s.key_fingerprint().unwrap().len(), 8);
        let f = QuicLbConfig::parse_spec(
            "rotation=2,server_id_len=3,nonce_len=6,key=00112233445566778899aabbccddeeff",
        )
        .unwrap();
        assert_eq!(f.mode(), QuicLbMode::FourPass);
        for bad in [
            "",
            "cr=0",
            "cr=0,sid=3",
            "cr=7,sid=3,nonce=6",
            "cr=0,sid=0,nonce=6",
            "cr=0,sid=16,nonce=4",
            "cr=0,sid=3,nonce=3",
            "cr=0,sid=10,nonce=10",
            "cr=0,cr=1,sid=3,nonce=6",
            "cr=0,sid=3,nonce=6,key=00",
            "cr=0,sid=3,nonce=6,key=zz112233445566778899aabbccddeeff",
            "cr=0,sid=3,nonce=6,x=1",
            "cr=0;sid=3",
            "cr=-1,sid=3,nonce=6",
            "cr=0,sid=3,nonce=6,key=é",
        ] {
            assert!(QuicLbConfig::parse_spec(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn server_ids_parse_as_hex() {
        let id: QuicServerId = "0a0B0c".parse().unwrap();
        assert_eq!(
            (id.as_bytes(), id.to_string()),
            (&[10u8, 11, 12][..], "0a0b0c".into())
        );
        assert_eq!("0x01".parse::<QuicServerId>().unwrap().len(), 1);
        for bad in ["", "0", "abc", "zz", &"00".repeat(16), "é1"] {
            assert!(bad.parse::<QuicServerId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn service_rules() {
        let c = |cr, sid| QuicLbConfig {
            rotation: cr,
            server_id_len: sid,
            nonce_len: 6,
            key: None,
        };
        let mut cfg = ServiceConfig::new(AddrFamily::Inet);
        cfg.quic_lb = vec![c(0, 3), c(1, 3)];
        assert!(cfg.check_quic_lb(&udp()).is_ok());
        let tcp = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 443,
        };
        assert!(matches!(
            cfg.check_quic_lb(&tcp),
            Err(QuicLbError::NotUdp(_))
        ));
        cfg.quic_lb = vec![c(0, 3), c(0, 3)];
        assert_eq!(
            cfg.check_quic_lb(&udp()),
            Err(QuicLbError::DuplicateRotation(0))
        );
        cfg.quic_lb = vec![c(0, 3), c(1, 4)];
        assert_eq!(
            cfg.check_quic_lb(&udp()),
            Err(QuicLbError::MixedServerIdLen(3, 4))
        );
        cfg.quic_lb = (0..8).map(|i| c(i % 7, 3)).collect();
        assert_eq!(cfg.check_quic_lb(&udp()), Err(QuicLbError::TooMany(8)));

        cfg.quic_lb = vec![c(0, 3)];
        let d = |last: u8, sid: &str| {
            let mut d = DestConfig::new(IpAddr::V4(Ipv4Addr::new(10, 0, 1, last)), 443);
            d.quic_server_id = Some(sid.parse().unwrap());
            d
        };
        assert!(
            cfg.check_quic_server_ids(&[d(1, "010101"), d(2, "020202")])
                .is_ok()
        );
        assert!(matches!(
            cfg.check_quic_server_ids(&[d(1, "010101"), d(2, "010101")]),
            Err(QuicLbError::DuplicateServerId { .. })
        ));
        assert!(matches!(
            cfg.check_quic_server_ids(&[d(1, "0101")]),
            Err(QuicLbError::ServerIdMismatch {
                len: 2,
                want: 3,
                ..
            })
        ));
        cfg.quic_lb.clear();
        assert!(matches!(
            cfg.check_quic_server_ids(&[d(1, "010101")]),
            Err(QuicLbError::NoConfig(_))
        ));
    }
}

#[cfg(test)]
mod source_range_tests {
    use super::*;

    fn r(a: &str, p: u8) -> SourceRange {
        SourceRange::new(a.parse().unwrap(), p).unwrap()
    }

    #[test]
    fn blocks_contain_their_family_and_prefix_only() {
        let b = r("10.81.0.77", 24);
        assert_eq!(b.to_string(), "10.81.0.0/24", "host bits cleared");
        assert!(b.contains("10.81.0.1".parse().unwrap()));
        assert!(!b.contains("10.81.1.1".parse().unwrap()));
        assert!(!b.contains("::ffff:10.81.0.1".parse().unwrap()));
        assert!(r("0.0.0.0", 0).contains("192.0.2.1".parse().unwrap()));
        assert!(r("192.0.2.1", 32).contains("192.0.2.1".parse().unwrap()));
        assert!(!r("192.0.2.1", 32).contains("192.0.2.2".parse().unwrap()));
        assert!(r("2001:db8::", 32).contains("2001:db8:1::1".parse().unwrap()));
        assert!(!r("2001:db8::", 32).contains("10.0.0.1".parse().unwrap()));
        assert_eq!(SourceRange::new("10.0.0.0".parse().unwrap(), 33), None);
        assert_eq!(SourceRange::new("::".parse().unwrap(), 129), None);
        assert!(SourceRange::admits(&[], "10.0.0.1".parse().unwrap()));
        assert!(!SourceRange::admits(&[b], "10.0.0.1".parse().unwrap()));
    }
}

#[cfg(test)]
mod laddr_tests {
    use super::*;

    fn r(s: &str) -> LocalAddrRange {
        LocalAddrRange::parse(s).unwrap()
    }

    #[test]
    fn laddr_ranges_parse_in_every_form() {
        let one = r("10.0.0.1");
        assert_eq!((one.len(), one.to_string()), (1, "10.0.0.1".into()));
        let full = r("10.0.0.1-10.0.0.4");
        assert_eq!(full.len(), 4);
        assert_eq!(r("10.0.0.1-4"), full);
        assert_eq!(full.to_string(), "10.0.0.1-10.0.0.4");
        assert_eq!(r("2001:db8::1-2001:db8::10"), r("2001:db8::1-10"));
        assert_eq!(r("2001:db8::1-10").len(), 16);
        assert_eq!(
            full.addrs().last(),
            Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 4)))
        );
        for bad in [
            "",
            "x",
            "10.0.0.5-3",
            "10.0.0.1-::1",
            "10.0.0.1-256",
            "::1-",
            "1.2.3.4-",
            "10.0.0.0-10.2.0.0",
        ] {
            assert!(LocalAddrRange::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn laddr_overlap_and_contains() {
        let a = r("10.0.0.1-10.0.0.4");
        assert!(a.overlaps(&r("10.0.0.4-10.0.0.9")));
        assert!(a.overlaps(&r("10.0.0.2")));
        assert!(r("10.0.0.2").overlaps(&a));
        assert!(!a.overlaps(&r("10.0.0.5-9")));
        assert!(!a.overlaps(&r("::1")));
        assert!(!a.contains("::a00:1".parse().unwrap()));
    }
}
