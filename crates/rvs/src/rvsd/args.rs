//! rvsd's command line: the options, the data planes and the
//! subcommands (`demo`, `realserver`), as clap parses them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use rvs_control::protocol::DEFAULT_SOCKET;
use rvs_daemon::{DataPlaneKind, KubernetesArgs, XdpMode, realserver};

/// rvs daemon: an IPVS-class layer-4 load balancer.
///
/// rvsd owns the service table. Configure it from a keepalived.conf file
/// (-f), an ipvsadm-save rules file (--rules), or at run time with rvsadm,
/// which takes ipvsadm's command line. SIGHUP (or `rvsadm --reload`)
/// re-reads the file and applies only the difference; a file with errors is
/// rejected and the running state stays as it was.
#[derive(Parser, Debug)]
#[command(name = "rvsd", version, about, long_about)]
pub(crate) struct Args {
    /// keepalived.conf-syntax configuration file (virtual_server, real_server
    /// and their health checkers, which rvsd runs with keepalived's rules;
    /// vrrp_instance blocks, which rvsd runs as keepalived's VRRP does;
    /// FULLNAT extensions).
    #[arg(short = 'f', long = "config-file", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// ipvsadm-save rules file (the lines `ipvsadm -S` prints).
    #[arg(long = "rules", value_name = "FILE", conflicts_with = "config")]
    pub(crate) rules: Option<PathBuf>,

    /// Validate the configuration file and exit (0 = valid). Judges the file,
    /// not this machine: nothing is touched, missing interfaces or scripts are
    /// warnings.
    #[arg(long)]
    pub(crate) check: bool,

    /// Refuse, as errors at their file:line:column, the keywords rvs reads
    /// but does not carry out (the "is not applied by rvs" warnings, also
    /// those of the health checker and VRRP: a checker type or an option
    /// rvsd does not run) and unknown keywords: with --check, a non-zero exit for CI; at start-up,
    /// rvsd does not start; on a reload, the file is refused and nothing
    /// changes.
    #[arg(long)]
    pub(crate) strict: bool,

    /// Configuration id (keepalived's -i): `@NAME` lines of the file are
    /// kept, `@^NAME` lines dropped (keepalived's conditional
    /// configuration); also at every reload. Default, as keepalived: the
    /// host name up to its first dot. Repeatable.
    #[arg(short = 'i', long = "config-id", value_name = "NAME")]
    pub(crate) config_id: Vec<String>,

    /// Control socket path.
    #[arg(long, env = "RVS_SOCKET", value_name = "PATH", default_value = DEFAULT_SOCKET)]
    pub(crate) socket: PathBuf,

    /// Data plane: `proxy` (userspace TCP/UDP proxy, unprivileged), `none`
    /// (control plane alone), `xdp` (the XDP program on --interface; root;
    /// no fwmark services: XDP runs before the packet has a mark), `sock`
    /// (local clients of --cgroup connect straight to the real server:
    /// the programs rewrite connect()/sendmsg(); root; TCP/UDP services,
    /// no fwmark; `--stats` counts connections only, packets and bytes
    /// are not seen at the socket), `xdp,sock` (both in one daemon:
    /// clients arriving on --interface through XDP, processes of --cgroup
    /// at the socket, one service table; each service goes to the planes
    /// that can carry it, refused only when neither can, with each plane's
    /// reason; a plane's skip is logged once; `--stats` adds both
    /// planes' connections, packets and bytes are XDP's only; `-Lcn` lists
    /// both planes' connections).
    #[arg(long, value_enum, default_value_t = DataPlaneKind::Proxy)]
    pub(crate) dataplane: DataPlaneKind,

    /// sock: the cgroup v2 directory whose processes' sockets are balanced
    /// (with its descendants). Default: the unified hierarchy's root
    /// (/sys/fs/cgroup/unified on hybrid systems, else /sys/fs/cgroup).
    #[arg(long, value_name = "PATH")]
    pub(crate) cgroup: Option<PathBuf>,

    /// proxy: accept PROXY protocol headers (v1/v2) from these upstream
    /// balancers (CIDRs or addresses, comma-separated or repeated) and use
    /// the client address they carry; their connections must start with one.
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    pub(crate) proxy_protocol_from: Vec<String>,

    /// proxy: seconds to wait for a real server to accept a connection.
    #[arg(long, value_name = "SECS", default_value_t = 3.0)]
    pub(crate) connect_timeout: f64,

    /// proxy: other real servers to try when one cannot be reached.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub(crate) connect_retries: u32,

    /// proxy: close connections of a deleted real server this many seconds
    /// after its deletion (default: let them finish however long they take).
    /// Also the bound of a daemon retiring after `--takeover` (default 60 s):
    /// it exits when its last connection ends or at the bound.
    /// With --announce-table, also how long the stop-and-remove (`rvsd
    /// --remove`, `rvsadm --remove-director`) keeps forwarding after it
    /// withdrew the VIPs, before it removes the data plane (default 5 s;
    /// 0 allowed).
    #[arg(long, value_name = "SECS")]
    pub(crate) drain_grace: Option<f64>,

    /// Announce the VIPs through a BGP daemon: keep one blackhole host
    /// route (/32, /128) per announced VIP, protocol 250 (`rvs`), in kernel
    /// routing table N, for BIRD (`protocol kernel { kernel table N; learn;
    /// }`) or FRR (`ip import-table N`) to export. A VIP is announced while
    /// a service has it and holds its quorum, and the director is not
    /// drained (`rvsadm --drain`). The routes stay when rvsd stops (a
    /// restart is not a drain). Off by default. See docs/fleet.md.
    #[arg(long, value_name = "N")]
    pub(crate) announce_table: Option<u32>,

    /// With --announce-table: watch the BGP daemon that exports the table
    /// (diagnostics, never fatal): `bird[:CTL_SOCKET]` (default
    /// /run/bird/bird.ctl) asks BIRD whether a kernel protocol learned the
    /// table's routes and whether its BGP sessions are established;
    /// `frr[:VTYSH]` runs `vtysh -c 'show bgp summary json'`. What it finds
    /// is shown by `rvsadm -L --announce` and the API and logged when it
    /// changes; errors are retried with backoff.
    #[arg(
        long,
        value_name = "bird[:SOCKET]|frr[:VTYSH]",
        requires = "announce_table"
    )]
    pub(crate) bgp_daemon: Option<String>,

    /// Upgrade in place: take over the rvsd running on PATH (default: the
    /// --socket path). Its listening sockets (the proxy's services, the
    /// --http endpoint) are handed to this daemon over the control socket
    /// and served here for the same services, with no connection refused;
    /// then this daemon takes the control socket's path and the old one
    /// stops accepting, finishes its connections (bounded by --drain-grace,
    /// default 60 s) and exits 0. Run it with the old daemon's arguments.
    /// Without a configuration file (-f/--rules) the old daemon's service
    /// table is taken too. Fails when no rvsd runs there, unless --or-start.
    /// SIGUSR2 makes a running rvsd start its installed binary (`argv[0]`)
    /// with its own arguments plus --takeover, which then tells a service
    /// manager (NOTIFY_SOCKET: systemd, NotifyAccess=all) its new main pid.
    #[arg(long, value_name = "PATH", num_args = 0..=1, conflicts_with = "check")]
    pub(crate) takeover: Option<Option<PathBuf>>,

    /// With --takeover: start normally when no rvsd runs on the socket
    /// (for package scripts that upgrade or start).
    #[arg(long, requires = "takeover")]
    pub(crate) or_start: bool,

    /// proxy: relay with a buffered copy instead of splice(2).
    #[arg(long)]
    pub(crate) no_splice: bool,

    /// proxy: bind the services' sockets with SO_REUSEPORT, so that several
    /// rvsd processes on this host (each with its own --socket, same
    /// services) share them and the kernel spreads new connections and UDP
    /// flows over the processes, as nginx's `reuseport` workers do. Each
    /// process holds, lists and counts its own connections. Without it a
    /// second rvsd on the same services fails to bind.
    #[arg(long)]
    pub(crate) reuse_port: bool,

    /// xdp: the interfaces to attach the program to (comma-separated or
    /// repeated; required with `--dataplane xdp`): where clients' packets
    /// arrive and, for NAT real servers on another segment, where their
    /// replies arrive.
    #[arg(long, value_name = "IF", value_delimiter = ',')]
    pub(crate) interface: Vec<String>,

    /// xdp: attach mode: `native` (driver), `skb` (generic) or `auto`
    /// (native, else generic).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = XdpMode::Auto)]
    pub(crate) xdp_mode: XdpMode,

    /// xdp: entries of the flow table, for each family (IPv4 and IPv6
    /// flows have a table each), and of the NAT reply table; the least
    /// recently used entry is evicted when a table is full. Default: 2^20
    /// (1,048,576), less on a machine whose memory an eighth of would not
    /// hold the preallocated maps (65,536 on a 1 GiB machine).
    #[arg(long, value_name = "N")]
    pub(crate) flow_table_size: Option<u32>,

    /// xdp: virtual services the director's maps hold (the services hash
    /// and the arrays indexed by service, four of them per-CPU: 200 bytes
    /// a service per CPU). Default: 65,536 (Cilium's service map size),
    /// less on a machine whose memory a sixteenth of would not hold those
    /// maps (65,536 on 64 CPUs needs 13 GiB); at most 65,536. Changing it
    /// over pinned maps migrates them (a service at an index beyond a
    /// smaller size is not carried over: warned).
    #[arg(long, value_name = "N")]
    pub(crate) max_services: Option<u32>,

    /// xdp: entries of each embryonic table (IPv4, IPv6): TCP flows live
    /// there from their SYN until the ACK that completes the handshake, so
    /// a SYN flood evicts only half-open flows, never an established one
    /// (counted in the rvs_xdp_* metrics). Default (0): a quarter of
    /// --flow-table-size. Under a flood of R SYNs per second an embryonic
    /// entry lasts about N / R seconds: keep that above the clients'
    /// handshake round trip.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) embryonic_table_size: u32,

    /// xdp: largest tunnelled packet (default: the interface's MTU); a
    /// bigger one that may not be fragmented is answered with ICMP
    /// "fragmentation needed" / "packet too big".
    #[arg(long, value_name = "BYTES")]
    pub(crate) tunnel_mtu: Option<u32>,

    /// xdp: SYN-flood guard: above this many new flows per CPU per second,
    /// flows of hash-scheduled (sh/dh/mh) DR/TUN services are forwarded by
    /// the hash without a flow entry (0 = off; counted in
    /// rvs_xdp_guarded_flows_total), and new TCP flows start in the
    /// embryonic table for 60 s (without a limit: above 4,096 half-open
    /// new flows, those whose handshake did not complete).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) max_new_flows: u32,

    /// xdp: the local ports FULLNAT local address pools hand out,
    /// FIRST-LAST (default 1024-65535): each local address carries this
    /// many connections to each real server port.
    #[arg(long, value_name = "FIRST-LAST")]
    pub(crate) fullnat_ports: Option<String>,

    /// xdp: outer source address of tunnelled packets, one per family
    /// (default: the preferred source of the route to the real server).
    #[arg(long, value_name = "ADDR")]
    pub(crate) tunnel_source: Vec<std::net::IpAddr>,

    /// xdp: vary the outer source of tunnelled packets per flow within this
    /// prefix (IPv4 /16../32, IPv6 /96../128; one per family), so the real
    /// servers' RSS spreads flows over their queues, as Katran does. The
    /// real servers must accept any source of the prefix (rvs's
    /// decapsulator checks only the inner destination; `rvsd realserver`
    /// relaxes rp_filter). Default: the one --tunnel-source.
    #[arg(long, value_name = "CIDR")]
    pub(crate) tunnel_source_prefix: Vec<String>,

    /// xdp: name of this rvsd's pin directory /sys/fs/bpf/rvs/NAME: the
    /// program's links (links/IF) and maps (maps/MAP) are pinned there, so
    /// the XDP program keeps forwarding, with its flows, while rvsd stops
    /// or restarts, and a starting rvsd adopts them (see docs/operations.md).
    /// Default: `default` with the default --socket, else a name derived
    /// from the socket path (two rvsds with different sockets never share
    /// pins).
    #[arg(long, value_name = "NAME")]
    pub(crate) instance: Option<String>,

    /// Remove the pinned XDP data plane of the instance (--instance, or the
    /// one of --socket) and exit: its program is detached from every
    /// interface and its maps unpinned. For an instance whose rvsd is not
    /// running; a running rvsd does it on `rvsadm --remove-director`.
    #[arg(long)]
    pub(crate) remove: bool,

    /// xdp: where rvsd keeps its service table beside the pinned data
    /// plane (`<DIR>/<instance>.table`) when it runs without `-f`/`--rules`,
    /// so a restart comes back with the table `rvsadm` made instead of
    /// pruning it (the program forwarded by it meanwhile).
    #[arg(long, value_name = "DIR", default_value = "/run/rvs")]
    pub(crate) state_dir: PathBuf,

    /// Tests only: load the director variant whose program differs (another
    /// tag, same maps), so a restart onto it is an upgrade that swaps the
    /// program through a link update. Only in builds with rvs-xdp's
    /// `upgrade-probe` feature (the e2e tests').
    #[arg(long, hide = true)]
    pub(crate) xdp_upgrade_probe: bool,

    /// Log level or tracing filter (error, warn, info, debug, trace).
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub(crate) log_level: String,

    /// Serve Prometheus /metrics and REST API v1 (/api/v1/..., its OpenAPI
    /// document at /api/v1/openapi.json) on this address (off by default).
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<SocketAddr>,

    /// The REST API's bearer token: a file holding it (surrounding white
    /// space ignored). Writes then need `Authorization: Bearer TOKEN`.
    #[arg(long, value_name = "PATH", requires = "http")]
    pub(crate) api_token_file: Option<PathBuf>,

    /// Enable the REST API's writes (off by default). On a non-loopback
    /// --http address rvsd refuses to start without --api-token-file or
    /// --api-client-ca.
    #[arg(long, requires = "http")]
    pub(crate) api_writes: bool,

    /// Who may read the REST API and the dashboard: open (anyone who
    /// reaches --http) or token (the bearer token of --api-token-file or a
    /// client certificate of --api-client-ca).
    #[arg(long, value_name = "WHO", default_value = "open")]
    pub(crate) api_reads: rvs_daemon::ApiReads,

    /// Serve --http over HTTPS (rustls) with this certificate chain (PEM,
    /// the server's certificate first). Read once at start: a SIGHUP does
    /// not reload it.
    #[arg(long, value_name = "FILE", requires_all = ["http", "http_tls_key"])]
    pub(crate) http_tls_cert: Option<PathBuf>,

    /// The private key of --http-tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "http_tls_cert")]
    pub(crate) http_tls_key: Option<PathBuf>,

    /// Verify client certificates against this CA (PEM; needs
    /// --http-tls-cert): a request over a certificate it signed is
    /// authenticated as with the bearer token, and the audit log names the
    /// certificate's CN. Clients without a certificate are still served
    /// (reads per --api-reads, writes 401); one the CA did not sign fails
    /// the TLS handshake.
    #[arg(long, value_name = "FILE", requires = "http_tls_cert")]
    pub(crate) api_client_ca: Option<PathBuf>,

    /// Requests per second each client address may make to the HTTP
    /// endpoint's API (bursts of twice as many); beyond, 429.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) api_rate: u32,

    /// Maximum tracked connections; when full, the entry closest to expiry is evicted.
    #[arg(long, value_name = "N", default_value_t = 1 << 20)]
    pub(crate) conn_capacity: usize,

    /// Print a shell completion script and exit.
    #[arg(long, value_name = "SHELL")]
    pub(crate) completions: Option<clap_complete::Shell>,

    /// Print the man page (roff) and exit.
    #[arg(long)]
    pub(crate) man: bool,

    #[command(flatten)]
    pub(crate) k8s: KubernetesArgs,

    #[command(subcommand)]
    pub(crate) command: Option<Sub>,
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum Sub {
    /// Run a demonstration on loopback: three local backends behind a
    /// virtual service through the proxy data plane, unprivileged, with
    /// nothing else installed.
    Demo {
        /// Virtual service port on 127.0.0.1 (0 = any free port).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Show the demonstration and exit instead of serving until Ctrl-C.
        #[arg(long)]
        once: bool,
    },
    /// Prepare this host as a real server of DR or TUN services (root):
    /// the VIPs on lo as /32 (/128), arp_ignore=1 and arp_announce=2 (all
    /// and the interface), and for TUN rp_filter=0 and rvs's XDP
    /// decapsulator on the interface (it stays attached after this command
    /// exits). With `--toa`, programs in the cgroup see the client address
    /// a FULLNAT director carries in the TCP option TOA (kind 254) as the
    /// peer of their connections, with BPF only (no toa.ko). With `--mode
    /// dsr-opt --interface IF` (no VIP), the node of real servers a
    /// director reaches with `--tun-type opt` (Kubernetes NodePort DSR):
    /// tc programs on IF take the service address out of the IP option and
    /// send the replies from it (they stay attached after this command
    /// exits). Idempotent; `--undo` reverses it.
    Realserver {
        /// Virtual addresses, comma-separated or repeated (needed unless
        /// only `--toa` is asked for).
        #[arg(long, value_name = "ADDR", value_delimiter = ',')]
        vip: Vec<std::net::IpAddr>,
        /// How the director forwards to this host (with `--vip`; `dsr-opt`
        /// without).
        #[arg(long, value_enum)]
        mode: Option<realserver::Mode>,
        /// TUN: the encapsulation the director uses.
        #[arg(long, value_enum, default_value_t = realserver::TunType::Ipip)]
        tun_type: realserver::TunType,
        /// TUN with GUE: the UDP destination port.
        #[arg(long, value_name = "N", default_value_t = 0)]
        gue_port: u16,
        /// The interface facing the director (needed for TUN; for DR its
        /// ARP sysctls are set too).
        #[arg(long, value_name = "IF")]
        interface: Option<String>,
        /// Attach the TOA reader (bpf/toa.c) to the cgroup: accept(2) and
        /// getpeername(2) return the TOA's address for connections whose
        /// handshake carries one. It stays attached after this command
        /// exits (links pinned under /sys/fs/bpf/rvs/toa); with `--undo`,
        /// detach it. Servers must open their listening socket after it is
        /// attached for a TOA in the SYN (one in the handshake's ACK is seen
        /// always).
        #[arg(long)]
        toa: bool,
        /// The cgroup v2 directory `--toa` acts on (default: the cgroup v2
        /// root, /sys/fs/cgroup/unified on a hybrid layout).
        #[arg(long, value_name = "PATH", requires = "toa")]
        cgroup: Option<std::path::PathBuf>,
        /// Reverse the preparation.
        #[arg(long)]
        undo: bool,
    },
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use super::Args;

    #[test]
    fn the_kubernetes_source_options_require_kubernetes() {
        for [opt, value] in [
            ["--kubeconfig", "/etc/rvs/kubeconfig"],
            ["--node-name", "node-1"],
            ["--node-port-range", "30000-30100"],
            ["--node-port-addresses", "192.0.2.1"],
            ["--node-port-mode", "dsr"],
            ["--service-proxy-name", "rvs"],
        ] {
            let e = Args::try_parse_from(["rvsd", opt, value]).expect_err(opt);
            assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument, "{opt}: {e}");
            assert!(e.to_string().contains("--kubernetes"), "{opt}: {e}");
            let args = Args::try_parse_from(["rvsd", "--kubernetes", opt, value])
                .unwrap_or_else(|e| panic!("{opt} with --kubernetes: {e}"));
            assert!(args.k8s.kubernetes);
        }
        // Their defaults alone ask for nothing.
        let args = Args::try_parse_from(["rvsd"]).expect("no option");
        assert!(!args.k8s.kubernetes);
    }
}
