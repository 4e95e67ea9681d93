//! The Kubernetes source of rvs: Services, EndpointSlices and this node's
//! Node, translated into the rvs service table, the way kube-proxy's IPVS
//! mode programs the kernel (and Cilium's kube-proxy replacement its maps).
//!
//! [`translate`] is sans-IO: a pure function of a [`Snapshot`] of the API
//! objects and the [`Options`] of this proxy, with no clock and no I/O, so
//! every behaviour is unit-tested with plain objects. Watching the API
//! server and applying the result are the caller's (a `runtime` part).
//!
//! What it produces ([`Desired`]):
//! * one rvs service per (address, port, protocol) a Service claims — its
//!   cluster IPs (each family with the endpoints of that family), NodePorts
//!   on the node's addresses, external IPs and load-balancer ingress IPs —
//!   each tagged with where it came from and its [`Kind`], so the caller
//!   routes ClusterIP to the socket plane and the external kinds to XDP;
//! * the `healthCheckNodePort` answers of `externalTrafficPolicy: Local`
//!   LoadBalancers ([`HealthCheck`]);
//! * what rvs refuses to carry out, and why ([`Refusal`]), and warnings.
//!
//! Endpoint choice follows kube-proxy's `CategorizeEndpoints`: ready
//! endpoints, falling back to serving-and-terminating ones (KEP-1669);
//! terminating endpoints not chosen stay at weight 0 so their connections
//! drain; topology hints (`forZones`, `forNodes`) narrow the `Cluster`
//! policy only when every ready endpoint has them and one matches us.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cidr;
mod endpoints;
mod health;
#[cfg(feature = "runtime")]
pub mod runtime;

use core::fmt;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::ops::RangeInclusive;

use k8s_openapi::api::core::v1::{Node, Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rvs_control::state::ServiceDef;
use rvs_core::model::{
    AddrFamily, DestConfig, ForwardMethod, GENEVE_PORT, LocalAddrRange, MAX_PERSISTENCE_TIMEOUT,
    PersistMask, Protocol, SchedFlags, ServiceConfig, ServiceKey, SourceRange, Tunnel, TunnelCsum,
    TunnelType,
};
use rvs_core::sched::Scheduler;

pub use cidr::{Cidr, CidrError};
pub use endpoints::LABEL_SERVICE_NAME;
pub use health::HealthCheck;

use endpoints::{Ep, Here, Scope};

/// Label that marks a Service as headless for proxies: such Services are
/// not proxied (kube-proxy watches with `!service.kubernetes.io/headless`).
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";

/// Label that hands a Service to another proxy: without our
/// [`Options::service_proxy_name`], a Service carrying it is not ours.
pub const LABEL_SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";

/// The Node label holding its zone, matched against `hints.forZones`.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

/// `sessionAffinityConfig.clientIP.timeoutSeconds` when unset (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;

/// The API objects one translation reads. Borrowed, so a caller holding
/// reflector stores (`Arc`s) builds one without copying objects.
#[derive(Clone, Debug, Default)]
pub struct Snapshot<'a> {
    /// Every Service of every namespace.
    pub services: Vec<&'a Service>,
    /// Every EndpointSlice of every namespace.
    pub endpoint_slices: Vec<&'a EndpointSlice>,
    /// This node (its addresses, for NodePorts and SNAT, and its zone, for
    /// topology hints). `None` while it is not known.
    pub node: Option<&'a Node>,
}

/// How NodePort, ExternalIP and LoadBalancer traffic of
/// `externalTrafficPolicy: Cluster` services reaches a remote endpoint.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ExternalMode {
    /// Source NAT to the node's own address (FULLNAT): replies come back
    /// through this node. Works everywhere; the endpoint sees the node, not
    /// the client.
    #[default]
    Snat,
    /// Direct server return: the request is tunnelled to the endpoint and
    /// the reply leaves the endpoint's node straight to the client, which
    /// keeps the client address and spares this node the reply traffic.
    Dsr,
    /// DSR for TCP, SNAT for UDP and SCTP (Cilium's `hybrid`): UDP
    /// replies from a DSR endpoint would bypass the connection state that
    /// many UDP clients (and NAT gateways) rely on.
    Hybrid,
}

/// This proxy's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// This node's name, as EndpointSlices' `nodeName` spell it: endpoints
    /// with it are local.
    pub node_name: String,
    /// The cluster's NodePort range (`--service-node-port-range`); a
    /// Service whose nodePort lies outside is refused.
    pub node_port_range: RangeInclusive<u16>,
    /// The addresses NodePorts listen on. `None` = the Node's InternalIP
    /// and ExternalIP addresses (plus 127.0.0.1, see
    /// [`Options::node_port_loopback`]).
    pub node_port_addresses: Option<Vec<IpAddr>>,
    /// Also open NodePorts on 127.0.0.1, as Cilium does (kube-proxy's
    /// iptables mode allows `localhost:nodePort` too). Only with addresses
    /// taken from the Node.
    pub node_port_loopback: bool,
    /// Our `service.kubernetes.io/service-proxy-name`: `None` = we are the
    /// default proxy and take the Services without the label; `Some(n)` =
    /// we take only the Services labelled `n`.
    pub service_proxy_name: Option<String>,
    /// SNAT, DSR or hybrid for external traffic of `Cluster` policy.
    pub external_mode: ExternalMode,
    /// How DSR reaches the endpoint's node (`--dsr-dispatch`): by default
    /// the service address in an IP option (`opt`, Cilium's default
    /// dispatch), else Geneve to port 6081 (where a cloud drops IP options).
    pub dsr_tunnel: Tunnel,
    /// Scheduler of ClusterIP services (default `rr`, as kube-proxy's IPVS
    /// mode).
    pub cluster_scheduler: Scheduler,
    /// Scheduler of NodePort, ExternalIP and LoadBalancer services (default
    /// `mh`, Maglev: every node picks the same endpoint for a flow, so a
    /// flow that moves between nodes — ECMP rehash — keeps its endpoint).
    pub external_scheduler: Scheduler,
    /// Flags of the external scheduler (default `mh-port` and
    /// `mh-fallback`. `mh-port`: Maglev hashes the client's port too, as
    /// Cilium's Maglev hashes the 5-tuple, so many connections from one
    /// address — a cloud load balancer's or a NAT gateway's — spread over
    /// the endpoints; session affinity, where asked, is persistence.
    /// `mh-fallback`: a terminating endpoint draining at weight 0 keeps its
    /// Maglev slots, so without it a new connection hashed to one would be
    /// refused; with it, it goes to the next ready endpoint.) Ignored for
    /// schedulers without flags.
    pub external_flags: SchedFlags,
}

/// The DSR dispatch over Geneve (`--dsr-dispatch geneve`): UDP port 6081,
/// for networks that drop IP options; the default is [`TunnelType::Opt`].
pub const DSR_GENEVE: Tunnel = Tunnel {
    kind: TunnelType::Geneve,
    port: GENEVE_PORT,
    csum: TunnelCsum::NoCsum,
};

impl Options {
    /// The defaults for a node of this name.
    pub fn new(node_name: impl Into<String>) -> Self {
        Options {
            node_name: node_name.into(),
            node_port_range: 30000..=32767,
            node_port_addresses: None,
            node_port_loopback: true,
            service_proxy_name: None,
            external_mode: ExternalMode::Snat,
            dsr_tunnel: Tunnel {
                kind: TunnelType::Opt,
                port: 0,
                csum: TunnelCsum::NoCsum,
            },
            cluster_scheduler: Scheduler::Rr,
            external_scheduler: Scheduler::Mh,
            external_flags: SchedFlags::MH_PORT.union(SchedFlags::MH_FALLBACK),
        }
    }
}

/// How an rvs service exposes a Service port.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A cluster IP (`spec.clusterIPs`): in-cluster clients.
    ClusterIp,
    /// A NodePort on one of the node's addresses.
    NodePort,
    /// An address of `spec.externalIPs`.
    ExternalIp,
    /// A `status.loadBalancer.ingress[].ip`.
    LoadBalancer,
}

impl Kind {
    /// `ClusterIP`, `NodePort`, `ExternalIP` or `LoadBalancer`.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::ClusterIp => "ClusterIP",
            Kind::NodePort => "NodePort",
            Kind::ExternalIp => "ExternalIP",
            Kind::LoadBalancer => "LoadBalancer",
        }
    }

    /// True for the kinds `externalTrafficPolicy` governs.
    pub const fn is_external(self) -> bool {
        !matches!(self, Kind::ClusterIp)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The Service port an rvs service comes from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
    /// `metadata.uid` of the Service (`None` if the object has none).
    pub uid: Option<String>,
    /// `spec.ports[].name` (empty for a single unnamed port).
    pub port_name: String,
}

/// One rvs service derived from a Service port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct K8sService {
    /// The service as the control plane takes it: key, options, real
    /// servers (in address order) and, for SNAT, the local address pool.
    pub def: ServiceDef,
    /// Where it came from.
    pub origin: Origin,
    /// Which address of the Service it serves.
    pub kind: Kind,
    /// `spec.loadBalancerSourceRanges` of the entry's family, parsed, for
    /// [`Kind::LoadBalancer`] entries (empty = every client); the same
    /// blocks are the def's `config.source_ranges`, which the data planes
    /// enforce (or refuse the service).
    pub source_ranges: Vec<Cidr>,
}

/// Which kind of API object a refusal or warning is about.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// A `v1` Service.
    Service,
    /// A `discovery.k8s.io/v1` EndpointSlice.
    EndpointSlice,
    /// A `v1` Node.
    Node,
}

/// An API object, named for an event or a log line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// Its kind.
    pub kind: ObjectKind,
    /// Its namespace (empty for a Node).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `metadata.uid`, if it has one.
    pub uid: Option<String>,
}

impl ObjectRef {
    fn of(kind: ObjectKind, m: &ObjectMeta) -> Self {
        ObjectRef {
            kind,
            namespace: m.namespace.clone().unwrap_or_default(),
            name: m.name.clone().unwrap_or_default(),
            uid: m.uid.clone(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = match self.kind {
            ObjectKind::Service => "Service",
            ObjectKind::EndpointSlice => "EndpointSlice",
            ObjectKind::Node => "Node",
        };
        if self.namespace.is_empty() {
            write!(f, "{k} {}", self.name)
        } else {
            write!(f, "{k} {}/{}", self.namespace, self.name)
        }
    }
}

/// Why rvs does not carry out (part of) a Service.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RefusalReason {
    /// Another, older Service already has this address, port and protocol.
    #[error(
        "{protocol} {addr} port {port} ({kind}) is already taken by the older Service {owner} ({owner_kind})"
    )]
    Clash {
        /// Protocol of the clash.
        protocol: Protocol,
        /// The address both claim.
        addr: IpAddr,
        /// The port both claim.
        port: u16,
        /// How this Service claims it.
        kind: Kind,
        /// `namespace/name` of the Service that keeps it.
        owner: String,
        /// How that Service claims it.
        owner_kind: Kind,
    },
    /// An address of a family this node has no address of.
    #[error("{what} {addr} is {family}, and this node has no {family} address")]
    NoFamily {
        /// Which field (`clusterIP`, `externalIP`, `loadBalancer ingress IP`).
        what: &'static str,
        /// The address.
        addr: IpAddr,
        /// `IPv4` or `IPv6`.
        family: &'static str,
    },
    /// SNAT needs a node address of the entry's family to rewrite to.
    #[error(
        "{kind} {addr} port {port}: source NAT needs a node address of the same family, and this node has none"
    )]
    NoSnatAddress {
        /// Kind of the entry.
        kind: Kind,
        /// Its address.
        addr: IpAddr,
        /// Its port.
        port: u16,
    },
    /// A port number out of 1..=65535.
    #[error("port `{port_name}`: {field} {value} is not a port number (1-65535)")]
    BadPort {
        /// `spec.ports[].name`.
        port_name: String,
        /// `port`, `nodePort` or `healthCheckNodePort`.
        field: &'static str,
        /// The value given.
        value: i64,
    },
    /// A nodePort outside the node port range.
    #[error("port `{port_name}`: nodePort {node_port} is outside the node port range {low}-{high}")]
    NodePortRange {
        /// `spec.ports[].name`.
        port_name: String,
        /// The nodePort.
        node_port: u16,
        /// Range start.
        low: u16,
        /// Range end.
        high: u16,
    },
    /// A protocol rvs does not balance.
    #[error("port `{port_name}`: protocol `{protocol}` is not TCP, UDP or SCTP")]
    BadProtocol {
        /// `spec.ports[].name`.
        port_name: String,
        /// The protocol given.
        protocol: String,
    },
    /// An address field that is not an IP address.
    #[error("{field} `{value}` is not an IP address")]
    BadAddress {
        /// Which field.
        field: &'static str,
        /// The value given.
        value: String,
    },
}

/// Something rvs does not carry out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The object refused (in part).
    pub object: ObjectRef,
    /// Why.
    pub reason: RefusalReason,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.reason)
    }
}

/// Something odd that did not stop the translation (an ignored slice
/// port, an unparsable source range, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The object concerned.
    pub object: ObjectRef,
    /// What was odd, and what was done about it.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}

/// The result of one translation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    /// The rvs services, sorted by address, port and protocol.
    pub services: Vec<K8sService>,
    /// Health check servers, sorted by port.
    pub health_checks: Vec<HealthCheck>,
    /// What rvs refuses to carry out, sorted by object and reason.
    pub refused: Vec<Refusal>,
    /// Warnings, sorted by object and message.
    pub warnings: Vec<Warning>,
}

impl Desired {
    /// The service table as text, one [`K8sService`] after another (see its
    /// `Display`), like `ipvsadm -Ln`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for svc in &self.services {
            s.push_str(&svc.to_string());
            s.push('\n');
        }
        s
    }

    /// The ServiceDefs alone, for a control plane that takes the table.
    pub fn defs(&self) -> impl Iterator<Item = &ServiceDef> {
        self.services.iter().map(|s| &s.def)
    }
}

fn sock(addr: IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

impl fmt::Display for K8sService {
    /// `TCP 10.96.0.10:80 rr ClusterIP ns/name:port [persistent T]
    /// [mask M]
    /// [laddr A] [from CIDR,...]`, then one `  -> ADDR:PORT Method wN` line
    /// per real server.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.def;
        match d.key {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => write!(f, "{protocol} {}", sock(addr, port))?,
            ServiceKey::Fwmark { mark, .. } => write!(f, "FWM {mark}")?,
        }
        write!(f, " {}", d.config.scheduler)?;
        // ipvsadm's flag names (`-b`), joined to the scheduler: mh+port.
        for (bit, name) in [
            (SchedFlags::FLAG1, "fallback"),
            (SchedFlags::FLAG2, "port"),
            (SchedFlags::FLAG3, "flag-3"),
        ] {
            if d.config.scheduler.takes_flags() && d.config.flags.contains(bit) {
                write!(f, "+{name}")?;
            }
        }
        write!(
            f,
            " {} {}/{}",
            self.kind, self.origin.namespace, self.origin.name
        )?;
        if !self.origin.port_name.is_empty() {
            write!(f, ":{}", self.origin.port_name)?;
        }
        if let Some(t) = d.config.persistent {
            write!(f, " persistent {t}")?;
            match d.config.netmask {
                PersistMask::V4(m) if m != Ipv4Addr::BROADCAST => write!(f, " mask {m}")?,
                PersistMask::V6(p) if p != 128 => write!(f, " mask /{p}")?,
                _ => {}
            }
        }
        for l in &d.laddrs {
            write!(f, " laddr {l}")?;
        }
        if !self.source_ranges.is_empty() {
            let r: Vec<String> = self.source_ranges.iter().map(|c| c.to_string()).collect();
            write!(f, " from {}", r.join(","))?;
        }
        for r in &d.dests {
            let m = match r.forward {
                ForwardMethod::Tunnel(t) => format!("Tunnel/{}", t.kind.name()),
                m => m.name().to_owned(),
            };
            write!(f, "\n  -> {} {m} w{}", sock(r.addr, r.port), r.weight)?;
        }
        Ok(())
    }
}

/// What the node offers: its addresses by role, its zone.
struct NodeView {
    /// InternalIP then ExternalIP addresses, deduplicated.
    addrs: Vec<IpAddr>,
    /// The address SNAT rewrites to, per family (first InternalIP, else
    /// first ExternalIP).
    snat_v4: Option<IpAddr>,
    snat_v6: Option<IpAddr>,
    zone: String,
}

impl NodeView {
    fn new(node: Option<&Node>) -> Self {
        let mut internal = Vec::new();
        let mut external = Vec::new();
        for a in node
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
        {
            let Ok(ip) = a.address.parse::<IpAddr>() else {
                continue;
            };
            match a.type_.as_str() {
                "InternalIP" => internal.push(ip),
                "ExternalIP" => external.push(ip),
                _ => {}
            }
        }
        let first = |af: AddrFamily| {
            internal
                .iter()
                .chain(external.iter())
                .copied()
                .find(|a| AddrFamily::of(a) == af)
        };
        let snat_v4 = first(AddrFamily::Inet);
        let snat_v6 = first(AddrFamily::Inet6);
        let mut addrs = Vec::new();
        for a in internal.into_iter().chain(external) {
            if !addrs.contains(&a) {
                addrs.push(a);
            }
        }
        let zone = node
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(LABEL_TOPOLOGY_ZONE))
            .cloned()
            .unwrap_or_default();
        NodeView {
            addrs,
            snat_v4,
            snat_v6,
            zone,
        }
    }

    fn snat(&self, af: AddrFamily) -> Option<IpAddr> {
        match af {
            AddrFamily::Inet => self.snat_v4,
            AddrFamily::Inet6 => self.snat_v6,
        }
    }

    /// Whether the node has an address of `af` (true when it has none at
    /// all: then nothing is known, and nothing is refused for it).
    fn has_family(&self, af: AddrFamily) -> bool {
        self.addrs.is_empty() || self.addrs.iter().any(|a| AddrFamily::of(a) == af)
    }
}

fn family_name(af: AddrFamily) -> &'static str {
    match af {
        AddrFamily::Inet => "IPv4",
        AddrFamily::Inet6 => "IPv6",
    }
}

/// One address:port a Service port claims, before its real servers.
struct Entry {
    kind: Kind,
    addr: IpAddr,
    port: u16,
    protocol: Protocol,
    port_name: String,
    /// `Local` traffic policy applies (iTP for ClusterIP, eTP otherwise).
    local_policy: bool,
    source_ranges: Vec<Cidr>,
}

/// Translate the API objects into rvs's desired service table.
///
/// Pure and deterministic: the same snapshot and options give the same
/// [`Desired`], whatever the order of the objects in the snapshot.
pub fn translate(input: &Snapshot<'_>, opts: &Options) -> Desired {
    let mut out = Desired::default();
    let node = NodeView::new(input.node);
    if let Some(n) = input.node {
        let r = ObjectRef::of(ObjectKind::Node, &n.metadata);
        if n.metadata.name.as_deref() != Some(opts.node_name.as_str()) {
            out.warnings.push(Warning {
                object: r.clone(),
                message: format!(
                    "the Node given is not this node ({}); its addresses and zone are used anyway",
                    opts.node_name
                ),
            });
        }
        if node.addrs.is_empty() {
            out.warnings.push(Warning {
                object: r,
                message: "the Node has no InternalIP or ExternalIP address: no NodePorts, no source NAT, no address family checks".into(),
            });
        }
    }
    let here = Here {
        node: &opts.node_name,
        zone: &node.zone,
    };

    // Slices by (namespace, service name), each list in slice-name order.
    let mut slices: BTreeMap<(&str, &str), Vec<&EndpointSlice>> = BTreeMap::new();
    for &s in &input.endpoint_slices {
        let Some(svc) = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SERVICE_NAME))
            .filter(|n| !n.is_empty())
        else {
            continue;
        };
        let ns = s.metadata.namespace.as_deref().unwrap_or("");
        slices.entry((ns, svc.as_str())).or_default().push(s);
    }
    for v in slices.values_mut() {
        v.sort_by(|a, b| {
            (a.metadata.name.as_deref(), a.metadata.uid.as_deref())
                .cmp(&(b.metadata.name.as_deref(), b.metadata.uid.as_deref()))
                // Only malformed input ties (two slices of one name): any
                // total order keeps the output independent of input order.
                .then_with(|| format!("{a:?}").cmp(&format!("{b:?}")))
        });
    }

    // Oldest first: an older Service keeps an address:port a younger one
    // also claims. Without a timestamp, a Service counts as the youngest.
    let mut services: Vec<&Service> = input.services.clone();
    services.sort_by(|a, b| {
        let ka = (
            a.metadata.creation_timestamp.is_none(),
            a.metadata.creation_timestamp.as_ref().map(|t| t.0),
            a.metadata.namespace.as_deref(),
            a.metadata.name.as_deref(),
            a.metadata.uid.as_deref(),
        );
        let kb = (
            b.metadata.creation_timestamp.is_none(),
            b.metadata.creation_timestamp.as_ref().map(|t| t.0),
            b.metadata.namespace.as_deref(),
            b.metadata.name.as_deref(),
            b.metadata.uid.as_deref(),
        );
        ka.cmp(&kb)
            .then_with(|| format!("{a:?}").cmp(&format!("{b:?}")))
    });

    let mut owners: HashMap<ServiceKey, (String, Kind)> = HashMap::new();
    for svc in services {
        if !is_ours(svc, opts) {
            continue;
        }
        let ns = svc.metadata.namespace.as_deref().unwrap_or("");
        let name = svc.metadata.name.as_deref().unwrap_or("");
        let own = slices.get(&(ns, name)).map(Vec::as_slice).unwrap_or(&[]);
        translate_service(svc, own, opts, &node, here, &mut owners, &mut out);
    }

    out.services.sort_by(|a, b| {
        let k = |s: &K8sService| match s.def.key {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => (addr, port, protocol.number()),
            ServiceKey::Fwmark { .. } => (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0, 0),
        };
        k(a).cmp(&k(b))
    });
    out.refused
        .sort_by(|a, b| (&a.object, a.reason.to_string()).cmp(&(&b.object, b.reason.to_string())));
    out.warnings
        .sort_by(|a, b| (&a.object, &a.message).cmp(&(&b.object, &b.message)));
    out.health_checks
        .sort_by(|a, b| (a.port, &a.namespace, &a.name).cmp(&(b.port, &b.namespace, &b.name)));
    out
}

/// The label filters kube-proxy watches Services with.
fn is_ours(svc: &Service, opts: &Options) -> bool {
    let labels = svc.metadata.labels.as_ref();
    if labels.is_some_and(|l| l.contains_key(LABEL_HEADLESS)) {
        return false;
    }
    let proxy = labels.and_then(|l| l.get(LABEL_SERVICE_PROXY_NAME));
    match (&opts.service_proxy_name, proxy) {
        (None, None) => true,
        (Some(ours), Some(theirs)) => ours == theirs,
        _ => false,
    }
}

/// Parse an address field, refusing what is not an address.
fn parse_ip(
    s: &str,
    field: &'static str,
    r: &ObjectRef,
    refused: &mut Vec<Refusal>,
) -> Option<IpAddr> {
    match s.trim().parse::<IpAddr>() {
        Ok(ip) => Some(ip),
        Err(_) => {
            refused.push(Refusal {
                object: r.clone(),
                reason: RefusalReason::BadAddress {
                    field,
                    value: s.to_owned(),
                },
            });
            None
        }
    }
}

fn translate_service(
    svc: &Service,
    slices: &[&EndpointSlice],
    opts: &Options,
    node: &NodeView,
    here: Here<'_>,
    owners: &mut HashMap<ServiceKey, (String, Kind)>,
    out: &mut Desired,
) {
    let me = ObjectRef::of(ObjectKind::Service, &svc.metadata);
    let warn = |out: &mut Desired, m: String| {
        out.warnings.push(Warning {
            object: me.clone(),
            message: m,
        })
    };
    let Some(spec) = svc.spec.as_ref() else {
        warn(out, "no spec; not proxied".into());
        return;
    };
    let ty = spec.type_.as_deref().unwrap_or("ClusterIP");
    if ty == "ExternalName" {
        return;
    }
    let cluster_ips: Vec<&str> = match &spec.cluster_ips {
        Some(v) if !v.is_empty() => v.iter().map(String::as_str).collect(),
        _ => spec.cluster_ip.as_deref().into_iter().collect(),
    };
    if cluster_ips.contains(&"None") {
        return; // headless: DNS only, nothing to proxy
    }
    if cluster_ips.iter().all(|c| c.is_empty()) {
        warn(out, "no clusterIP assigned yet; not proxied".into());
        return;
    }

    // The Service's families: those of its cluster IPs the node can serve.
    let mut families: Vec<(AddrFamily, IpAddr)> = Vec::new();
    for c in cluster_ips.iter().filter(|c| !c.is_empty()) {
        let Some(ip) = parse_ip(c, "clusterIP", &me, &mut out.refused) else {
            continue;
        };
        let af = AddrFamily::of(&ip);
        if families.iter().any(|(f, _)| *f == af) {
            warn(
                out,
                format!("second {} cluster IP {ip} ignored", family_name(af)),
            );
            continue;
        }
        if !node.has_family(af) {
            out.refused.push(Refusal {
                object: me.clone(),
                reason: RefusalReason::NoFamily {
                    what: "clusterIP",
                    addr: ip,
                    family: family_name(af),
                },
            });
            continue;
        }
        families.push((af, ip));
    }
    if families.is_empty() {
        return;
    }
    let has_family = |af: AddrFamily| families.iter().any(|(f, _)| *f == af);
    let itp_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let external_type = ty == "NodePort" || ty == "LoadBalancer";
    let etp_local = spec.external_traffic_policy.as_deref() == Some("Local");

    // Addresses beyond the cluster IPs, checked once for all ports.
    let mut external_ips: Vec<IpAddr> = Vec::new();
    for e in spec.external_ips.iter().flatten() {
        let Some(ip) = parse_ip(e, "externalIP", &me, &mut out.refused) else {
            continue;
        };
        external_ips.push(ip);
    }
    let mut lb_ips: Vec<IpAddr> = Vec::new();
    if ty == "LoadBalancer" {
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref());
        for ing in ingress.into_iter().flatten() {
            let Some(ip) = ing.ip.as_deref().filter(|s| !s.is_empty()) else {
                continue; // hostname-only ingress: nothing to bind
            };
            if ing.ip_mode.as_deref() == Some("Proxy") {
                // The load balancer proxies to the nodes itself (KEP-1860):
                // kube-proxy does not capture this address, nor do we.
                continue;
            }
            if let Some(ip) = parse_ip(ip, "loadBalancer ingress IP", &me, &mut out.refused)
                && !lb_ips.contains(&ip)
            {
                lb_ips.push(ip);
            }
        }
    }
    let mut ranges: Vec<Cidr> = Vec::new();
    for r in spec.load_balancer_source_ranges.iter().flatten() {
        match Cidr::parse(r) {
            Ok(c) => ranges.push(c),
            Err(e) => warn(out, format!("loadBalancerSourceRanges: {e}; ignored")),
        }
    }
    let checked_extra = |ips: &[IpAddr], what: &'static str, out: &mut Desired| -> Vec<IpAddr> {
        let mut keep = Vec::new();
        for &ip in ips {
            let af = AddrFamily::of(&ip);
            if !node.has_family(af) {
                out.refused.push(Refusal {
                    object: me.clone(),
                    reason: RefusalReason::NoFamily {
                        what,
                        addr: ip,
                        family: family_name(af),
                    },
                });
            } else if !has_family(af) {
                out.warnings.push(Warning {
                    object: me.clone(),
                    message: format!(
                        "{what} {ip} is {} but the Service has no {} cluster IP (no endpoints of that family); ignored",
                        family_name(af),
                        family_name(af)
                    ),
                });
            } else {
                keep.push(ip);
            }
        }
        keep
    };
    let external_ips = checked_extra(&external_ips, "externalIP", out);
    let lb_ips = checked_extra(&lb_ips, "loadBalancer ingress IP", out);
    let node_port_addrs: Vec<IpAddr> = match &opts.node_port_addresses {
        Some(v) => v.clone(),
        None => {
            let mut v = node.addrs.clone();
            if opts.node_port_loopback && node.snat_v4.is_some() {
                v.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
            }
            v
        }
    };

    // Entries of every port.
    let mut entries: Vec<Entry> = Vec::new();
    for p in spec.ports.iter().flatten() {
        let port_name = p.name.clone().unwrap_or_default();
        let refuse = |out: &mut Desired, reason| {
            out.refused.push(Refusal {
                object: me.clone(),
                reason,
            })
        };
        let Some(protocol) = endpoints::parse_protocol(p.protocol.as_deref()) else {
            refuse(
                out,
                RefusalReason::BadProtocol {
                    port_name,
                    protocol: p.protocol.clone().unwrap_or_default(),
                },
            );
            continue;
        };
        let Some(port) = u16::try_from(p.port).ok().filter(|&n| n != 0) else {
            refuse(
                out,
                RefusalReason::BadPort {
                    port_name,
                    field: "port",
                    value: i64::from(p.port),
                },
            );
            continue;
        };
        let mut push = |kind: Kind, addr: IpAddr, port: u16, ranges: &[Cidr]| {
            let af = AddrFamily::of(&addr);
            entries.push(Entry {
                kind,
                addr,
                port,
                protocol,
                port_name: port_name.clone(),
                local_policy: if kind.is_external() {
                    etp_local
                } else {
                    itp_local
                },
                source_ranges: ranges.iter().filter(|c| c.af() == af).copied().collect(),
            })
        };
        for &(_, ip) in &families {
            push(Kind::ClusterIp, ip, port, &[]);
        }
        for &ip in &external_ips {
            push(Kind::ExternalIp, ip, port, &[]);
        }
        for &ip in &lb_ips {
            push(Kind::LoadBalancer, ip, port, &ranges);
        }
        let node_port = match p.node_port {
            Some(n) if external_type && n != 0 => match u16::try_from(n) {
                Ok(np) if opts.node_port_range.contains(&np) => Some(np),
                Ok(np) => {
                    refuse(
                        out,
                        RefusalReason::NodePortRange {
                            port_name: port_name.clone(),
                            node_port: np,
                            low: *opts.node_port_range.start(),
                            high: *opts.node_port_range.end(),
                        },
                    );
                    None
                }
                Err(_) => {
                    refuse(
                        out,
                        RefusalReason::BadPort {
                            port_name: port_name.clone(),
                            field: "nodePort",
                            value: i64::from(n),
                        },
                    );
                    None
                }
            },
            _ => None,
        };
        if let Some(np) = node_port {
            for &ip in &node_port_addrs {
                if has_family(AddrFamily::of(&ip)) {
                    push(Kind::NodePort, ip, np, &[]);
                }
            }
        }
    }

    // Endpoints, by slice port and family.
    let mut issues = Vec::new();
    let by_port = endpoints::collect(slices, &opts.node_name, &mut issues);
    for i in issues {
        out.warnings.push(Warning {
            object: ObjectRef::of(ObjectKind::EndpointSlice, &i.slice.metadata),
            message: i.message,
        });
    }
    let no_eps: Vec<Ep> = Vec::new();

    let config_for = |kind: Kind, af: AddrFamily| {
        let sched = if kind.is_external() {
            opts.external_scheduler
        } else {
            opts.cluster_scheduler
        };
        let mut c = ServiceConfig::new(af).scheduler(sched);
        if kind.is_external() && sched.takes_flags() {
            c = c.flags(opts.external_flags);
        }
        if spec.session_affinity.as_deref() == Some("ClientIP") {
            c = c
                .persistent(affinity_timeout(spec))
                .netmask(PersistMask::full(af));
        }
        c
    };

    let owner_name = format!("{}/{}", me.namespace, me.name);
    for e in entries {
        let key = ServiceKey::Addr {
            protocol: e.protocol,
            addr: e.addr,
            port: e.port,
        };
        if let Some((owner, owner_kind)) = owners.get(&key) {
            if *owner == owner_name {
                warn(
                    out,
                    format!(
                        "{} {} is claimed twice by this Service ({} and {}); the first is kept",
                        e.protocol,
                        sock(e.addr, e.port),
                        owner_kind,
                        e.kind
                    ),
                );
            } else {
                out.refused.push(Refusal {
                    object: me.clone(),
                    reason: RefusalReason::Clash {
                        protocol: e.protocol,
                        addr: e.addr,
                        port: e.port,
                        kind: e.kind,
                        owner: owner.clone(),
                        owner_kind: *owner_kind,
                    },
                });
            }
            continue;
        }
        let af = AddrFamily::of(&e.addr);
        // Forwarding: NAT keeping the client address for ClusterIP and
        // Local policy; SNAT or DSR for Cluster policy external traffic.
        let mut laddrs = Vec::new();
        let forward = if !e.kind.is_external() || e.local_policy {
            ForwardMethod::Masq
        } else {
            let dsr = match opts.external_mode {
                ExternalMode::Snat => false,
                ExternalMode::Dsr => true,
                ExternalMode::Hybrid => e.protocol == Protocol::Tcp,
            };
            if dsr {
                // The XDP plane carries the service address to the
                // endpoint's node (an IP option, or Geneve); there `rvsd
                // realserver --mode dsr-opt` (opt) translates the replies
                // back to the service address. The next hop toward the pod
                // (its node) comes from the route to the pod CIDR.
                ForwardMethod::Tunnel(opts.dsr_tunnel)
            } else {
                let Some(snat) = node.snat(af) else {
                    out.refused.push(Refusal {
                        object: me.clone(),
                        reason: RefusalReason::NoSnatAddress {
                            kind: e.kind,
                            addr: e.addr,
                            port: e.port,
                        },
                    });
                    continue;
                };
                laddrs.push(LocalAddrRange::single(snat));
                ForwardMethod::FullNat
            }
        };
        owners.insert(key, (owner_name.clone(), e.kind));

        let eps: Vec<&Ep> = by_port
            .get(&(e.port_name.clone(), e.protocol))
            .unwrap_or(&no_eps)
            .iter()
            .filter(|ep| AddrFamily::of(&ep.ip) == af)
            .collect();
        let eps: Vec<Ep> = eps.into_iter().cloned().collect();
        let scope = if e.local_policy {
            Scope::Local
        } else {
            Scope::Cluster
        };
        let picked = endpoints::pick(&eps, scope, here);
        // DSR reaches an endpoint on another node; one on this node gets
        // plain NAT (destination rewritten, no option or tunnel: Cilium's
        // choice too). Nothing on this node's path to its own pod would
        // take the option out or translate the pod's replies, while NAT's
        // replies come back through this node's program.
        let dest = |ep: &Ep| {
            let method = match forward {
                ForwardMethod::Tunnel(_) if ep.local => ForwardMethod::Masq,
                m => m,
            };
            DestConfig::new(ep.ip, ep.port).forward(method)
        };
        let mut dests: Vec<DestConfig> = picked
            .active
            .iter()
            .map(|ep| dest(ep))
            .chain(picked.draining.iter().map(|ep| dest(ep).weight(0)))
            .collect();
        dests.sort_by_key(|d| (d.addr, d.port));

        let mut config = config_for(e.kind, af);
        // Only a load-balancer address filters its clients (kube-proxy).
        if e.kind == Kind::LoadBalancer {
            config.source_ranges = e
                .source_ranges
                .iter()
                .filter_map(|c| SourceRange::new(c.addr, c.prefix))
                .collect();
        }
        out.services.push(K8sService {
            def: ServiceDef {
                key,
                config,
                dests,
                laddrs,
            },
            origin: Origin {
                namespace: me.namespace.clone(),
                name: me.name.clone(),
                uid: me.uid.clone(),
                port_name: e.port_name,
            },
            kind: e.kind,
            source_ranges: e.source_ranges,
        });
    }

    // The health check of an eTP: Local LoadBalancer.
    if ty == "LoadBalancer" && etp_local {
        match spec.health_check_node_port {
            Some(n) if n != 0 => match u16::try_from(n) {
                Ok(port) => {
                    let ips: BTreeSet<IpAddr> = by_port
                        .values()
                        .flatten()
                        .filter(|ep| ep.local && ep.ready)
                        .map(|ep| ep.ip)
                        .collect();
                    out.health_checks.push(HealthCheck {
                        port,
                        namespace: me.namespace.clone(),
                        name: me.name.clone(),
                        local_endpoints: ips.len(),
                    });
                }
                Err(_) => out.refused.push(Refusal {
                    object: me.clone(),
                    reason: RefusalReason::BadPort {
                        port_name: String::new(),
                        field: "healthCheckNodePort",
                        value: i64::from(n),
                    },
                }),
            },
            _ => {}
        }
    }
}

/// `sessionAffinityConfig.clientIP.timeoutSeconds`, default 3 hours,
/// clamped to what rvs persistence accepts (1 s to 31 days).
fn affinity_timeout(spec: &ServiceSpec) -> u32 {
    let t = spec
        .session_affinity_config
        .as_ref()
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds);
    match t {
        Some(t) if t > 0 => (t as u32).min(MAX_PERSISTENCE_TIMEOUT),
        _ => DEFAULT_AFFINITY_TIMEOUT,
    }
}
