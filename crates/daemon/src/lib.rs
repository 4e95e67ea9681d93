//! The control plane's driver: the tasks that run `rvs-control`'s decisions
//! on tokio, as quinn is to quinn-proto. `rvs-control` decides (owners and
//! their changes, the sync endpoint, the state); this crate does the I/O
//! around it: the daemon state, owned by one task that the others reach
//! through a handle (`handle.rs`: requests over a channel, snapshots
//! through a watch), the control socket rvsadm talks to, reloads, VRRP,
//! health-check wiring, sync sockets, route announcement and BGP-daemon
//! watch, takeover, the Kubernetes source, notify scripts and FIFOs, SMTP
//! alerts, static addresses and routes, Prometheus, the JSON view and the
//! live dashboard over HTTP.
//!
//! `rvsd` only parses its arguments into [`Options`] and calls [`run`] (or
//! [`remove`], [`check`], [`realserver::run`]); the crate is a library so
//! that the binary stays small and each part has one home.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod announce;
mod api;
mod bgpwatch;
mod daemon;
mod dash;
mod demo;
mod handle;
mod http;
mod kubernetes;
mod metrics;
mod notify;
pub mod realserver;
mod routes;
mod rules;
mod server;
mod smtp;
mod source;
mod start;
mod sync;
mod table_file;
mod takeover;
mod tls;
mod track;
mod view;
mod vrrp;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::ValueEnum;

pub use api::{ApiOptions, Reads as ApiReads};
pub use kubernetes::{Args as KubernetesArgs, NodePortMode};
pub use source::{Source, check, default_config_id, enter_namespace, set_keepalived_options};
pub use start::{Demo, remove, run};

pub(crate) use start::random_seed;

/// Which data plane carries the traffic (`--dataplane`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum DataPlaneKind {
    /// The control plane alone: state, rvsadm and metrics, no traffic.
    None,
    /// Userspace TCP/UDP proxy (unprivileged).
    Proxy,
    /// XDP packet path (root).
    Xdp,
    /// Socket-level balancing of local clients: cgroup BPF programs
    /// choose the real server at connect()/sendmsg() (root; --cgroup).
    Sock,
    /// Both: external clients through the XDP program (--interface),
    /// local clients of --cgroup at the socket; one service table, each
    /// service on the planes that can carry it (root).
    #[value(name = "xdp,sock", alias = "sock,xdp")]
    XdpSock,
}

impl DataPlaneKind {
    /// Whether the XDP program runs (alone or with the sock plane).
    pub fn has_xdp(self) -> bool {
        matches!(self, DataPlaneKind::Xdp | DataPlaneKind::XdpSock)
    }
}

/// `--xdp-mode`: how the XDP program is attached.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum XdpMode {
    /// Native (driver) mode, else generic.
    Auto,
    /// Native (driver) mode only.
    Native,
    /// Generic (skb) mode only.
    Skb,
}

/// What a running rvsd is told by its command line, less what the front
/// end handles itself (the configuration file, `--check`, logging, shell
/// completions, the man page). Each field is the option of the same name;
/// rvsd's `--help` documents them. Values are checked here, when the
/// daemon starts, and errors name the option.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--socket`: the control socket's path.
    pub socket: PathBuf,
    /// `--dataplane`.
    pub dataplane: DataPlaneKind,
    /// `--cgroup` (sock): the cgroup v2 directory whose sockets are balanced.
    pub cgroup: Option<PathBuf>,
    /// `--proxy-protocol-from` (proxy): trusted upstream balancers, CIDRs.
    pub proxy_protocol_from: Vec<String>,
    /// `--connect-timeout` (proxy), seconds.
    pub connect_timeout: f64,
    /// `--connect-retries` (proxy).
    pub connect_retries: u32,
    /// `--drain-grace`, seconds: deleted real servers' connections, the
    /// bound of a retiring daemon, the stop-and-remove's forwarding.
    pub drain_grace: Option<f64>,
    /// `--announce-table`: the routing table VIPs are announced in.
    pub announce_table: Option<u32>,
    /// `--bgp-daemon`: the BGP daemon to watch.
    pub bgp_daemon: Option<String>,
    /// `--takeover [PATH]`: `Some(None)` is the `--socket` path.
    pub takeover: Option<Option<PathBuf>>,
    /// `--or-start`: with `--takeover`, start when no rvsd runs.
    pub or_start: bool,
    /// `--no-splice` (proxy).
    pub no_splice: bool,
    /// `--reuse-port` (proxy).
    pub reuse_port: bool,
    /// `--interface` (xdp).
    pub interface: Vec<String>,
    /// `--xdp-mode`.
    pub xdp_mode: XdpMode,
    /// `--flow-table-size` (xdp); `None`: sized by the machine's memory
    /// ([`rvs_xdp::pin::default_flow_table_size`]).
    pub flow_table_size: Option<u32>,
    /// `--max-services` (xdp); `None`: sized by the machine's memory and
    /// CPUs ([`rvs_xdp::pin::default_max_services`]).
    pub max_services: Option<u32>,
    /// `--embryonic-table-size` (xdp; 0: a quarter of the flow table).
    pub embryonic_table_size: u32,
    /// `--tunnel-mtu` (xdp).
    pub tunnel_mtu: Option<u32>,
    /// `--max-new-flows` (xdp; 0: no SYN-flood guard).
    pub max_new_flows: u32,
    /// `--fullnat-ports FIRST-LAST` (xdp).
    pub fullnat_ports: Option<String>,
    /// `--tunnel-source` (xdp): one address per family.
    pub tunnel_source: Vec<std::net::IpAddr>,
    /// `--tunnel-source-prefix` (xdp): one CIDR per family.
    pub tunnel_source_prefix: Vec<String>,
    /// `--instance` (xdp): the pin directory's name.
    pub instance: Option<String>,
    /// `--state-dir`: where the table and the drained mark are kept.
    pub state_dir: PathBuf,
    /// `--xdp-upgrade-probe` (tests only).
    pub xdp_upgrade_probe: bool,
    /// `--http`: the Prometheus and JSON endpoint's address.
    pub http: Option<SocketAddr>,
    /// The REST API's options (`--api-token-file`, `--api-writes`,
    /// `--api-reads`, `--api-rate`) and the endpoint's TLS
    /// (`--http-tls-cert`, `--http-tls-key`, `--api-client-ca`).
    pub api: ApiOptions,
    /// `--conn-capacity`: tracked connections at most.
    pub conn_capacity: usize,
    /// The Kubernetes source's options (`--kubernetes` and the rest).
    pub k8s: KubernetesArgs,
}
