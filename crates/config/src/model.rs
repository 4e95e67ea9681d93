//! The typed keepalived configuration.
//!
//! Fields that keepalived inherits (virtual server → real server → checker)
//! are kept twice where it matters: as written (`Option`) and as resolved
//! (`effective`, or a plain value documented as resolved), so a health-check
//! runner reads effective values and a config printer can still tell what the
//! operator wrote. Defaults are keepalived's, not ipvsadm's (e.g. NAT, not DR).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::time::Duration;

use rvs_core::model::{AddrFamily, ForwardMethod, PersistMask, Protocol, SchedFlags};
use rvs_core::sched::Scheduler;

use crate::Loc;

/// The whole configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeepalivedConf {
    /// `global_defs`.
    pub global: GlobalDefs,
    /// Global `SSL { }` block for SSL_GET.
    pub ssl: Option<SslConfig>,
    /// `virtual_server_group` blocks.
    pub vs_groups: Vec<VirtualServerGroup>,
    /// `virtual_server` blocks (ones without real servers are dropped, like keepalived).
    pub virtual_servers: Vec<VirtualServer>,
    /// Alibaba FULLNAT `local_address_group` blocks.
    pub local_address_groups: Vec<LocalAddressGroup>,
    /// `vrrp_script` blocks.
    pub vrrp_scripts: Vec<VrrpScript>,
    /// `vrrp_sync_group` blocks.
    pub vrrp_sync_groups: Vec<VrrpSyncGroup>,
    /// `vrrp_instance` blocks.
    pub vrrp_instances: Vec<VrrpInstance>,
    /// `static_ipaddress`: addresses installed while rvsd runs.
    pub static_ipaddress: Vec<VirtualIp>,
    /// `static_routes`: routes installed while rvsd runs.
    pub static_routes: Vec<IpRoute>,
    /// `static_rules`: policy rules installed while rvsd runs.
    pub static_rules: Vec<IpRule>,
    /// `track_file NAME { }` / `vrrp_track_file NAME { }` blocks.
    pub track_files: Vec<TrackFile>,
    /// `vrrp_track_process NAME { }` blocks.
    pub track_processes: Vec<TrackProcess>,
}

/// How a `vrrp_track_process`'s parameters match a command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamMatch {
    /// The parameters are exactly those given (the default when some
    /// are given; with none, `param_match` alone means "no parameters").
    Exact,
    /// `partial`: the first N parameters are those given.
    Partial,
    /// `initial`: like partial, and the last one given may be the start
    /// of the process's.
    Initial,
}

/// `vrrp_track_process NAME { process CMD [PARAMS]; param_match ...;
/// weight W [reverse]; quorum N; quorum_max N; delay S; fork_delay S;
/// terminate_delay S; full_command }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackProcess {
    /// Name the instances' `track_process` lists use.
    pub name: String,
    /// `process`: the command, then its parameters.
    pub process: Vec<String>,
    /// `param_match` (`None`: exact when parameters are given).
    pub param_match: Option<ParamMatch>,
    /// `weight` (default 1).
    pub weight: i32,
    /// `reverse`.
    pub reverse: bool,
    /// `quorum` (default 1).
    pub quorum: u32,
    /// `quorum_max` (default none).
    pub quorum_max: Option<u32>,
    /// `fork_delay` (or `delay`).
    pub fork_delay: Duration,
    /// `terminate_delay` (or `delay`).
    pub terminate_delay: Duration,
    /// `full_command`: match the command line, not the process name.
    pub full_command: bool,
    /// Where the block starts.
    pub loc: Loc,
}

/// `track_file NAME { file PATH; weight W [reverse]; init_file [VALUE]
/// [overwrite] }` (`vrrp_track_file` is keepalived's older name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackFile {
    /// Name the instances' `track_file` lists use.
    pub name: String,
    /// `file`: the file holding a number.
    pub file: Option<String>,
    /// `weight` (default 1).
    pub weight: i64,
    /// `reverse`: the number counts negated.
    pub reverse: bool,
    /// `init_file [VALUE] [overwrite]`: write VALUE (default 0) at start
    /// when the file does not exist, or always with `overwrite`.
    pub init_file: Option<(i64, bool)>,
    /// Where the block starts.
    pub loc: Loc,
}

/// `lvs_timeouts [tcp S] [tcpfin S] [udp S]` (like `ipvsadm --set`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LvsTimeouts {
    /// TCP established timeout, seconds.
    pub tcp: Option<u32>,
    /// TCP FIN_WAIT timeout, seconds.
    pub tcpfin: Option<u32>,
    /// UDP timeout, seconds.
    pub udp: Option<u32>,
}

/// `lvs_sync_daemon IFACE [[inst] VRRP_INSTANCE] [id SYNCID] [maxlen LEN] [port PORT] [ttl TTL] [group ADDR]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LvsSyncDaemon {
    /// Interface for sync multicast.
    pub interface: String,
    /// VRRP instance whose state selects master/backup daemon (none = run both).
    pub instance: Option<String>,
    /// Sync id (defaults to the instance's VRID when bound to an instance).
    pub syncid: Option<u8>,
    /// Maximum sync message length.
    pub maxlen: Option<u16>,
    /// UDP port.
    pub port: Option<u16>,
    /// Multicast TTL.
    pub ttl: Option<u8>,
    /// Multicast group.
    pub group: Option<IpAddr>,
}

/// `global_defs`.
#[derive(Clone, Debug, PartialEq)]
pub struct GlobalDefs {
    /// `router_id`.
    pub router_id: Option<String>,
    /// `notification_email { ... }`.
    pub notification_email: Vec<String>,
    /// `notification_email_from`.
    pub notification_email_from: Option<String>,
    /// `smtp_server HOST [PORT]`.
    pub smtp_server: Option<(String, Option<u16>)>,
    /// `smtp_connect_timeout`.
    pub smtp_connect_timeout: Option<Duration>,
    /// `smtp_helo_name` (default: the host name).
    pub smtp_helo_name: Option<String>,
    /// `smtp_alert [true|false]`: the default of every object's.
    pub smtp_alert: Option<bool>,
    /// `smtp_alert_vrrp`: the default of VRRP instances' (before `smtp_alert`).
    pub smtp_alert_vrrp: Option<bool>,
    /// `smtp_alert_checker`: the default of real and virtual servers'
    /// (before `smtp_alert`).
    pub smtp_alert_checker: Option<bool>,
    /// `no_checker_emails`: mail a checker's change only when it changes its
    /// real server's state.
    pub no_checker_emails: bool,
    /// `no_email_faults` (`email_faults` undoes it): VRRP FAULT transitions
    /// are not mailed.
    pub no_email_faults: bool,
    /// `rs_init_notifies`: real servers starting alive run their up
    /// notifiers.
    pub rs_init_notifies: bool,
    /// `vrrp_down_timer_adverts`: the default of instances'
    /// `down_timer_adverts`.
    pub vrrp_down_timer_adverts: Option<u32>,
    /// `net_namespace NAME`: rvsd runs inside `/run/netns/NAME` (entered at
    /// start; a reload cannot change it).
    pub net_namespace: Option<String>,
    /// `lvs_timeouts`.
    pub lvs_timeouts: Option<LvsTimeouts>,
    /// `lvs_sync_daemon`.
    pub lvs_sync_daemon: Option<LvsSyncDaemon>,
    /// `lvs_flush`: flush the whole IPVS table at start-up.
    pub lvs_flush: bool,
    /// `lvs_flush_on_stop [VS]`: `Some(false)` = everything, `Some(true)` = only
    /// the virtual servers keepalived configured.
    pub lvs_flush_on_stop: Option<bool>,
    /// `vrrp_version` (default 2; IPv6 instances always use 3).
    pub vrrp_version: u8,
    /// `vrrp_strict`.
    pub vrrp_strict: bool,
    /// `vrrp_mcast_group4` (default 224.0.0.18).
    pub vrrp_mcast_group4: Ipv4Addr,
    /// `vrrp_mcast_group6` (default ff02::12).
    pub vrrp_mcast_group6: Ipv6Addr,
    /// `vrrp_garp_master_delay` (default 5 s).
    pub vrrp_garp_master_delay: Duration,
    /// `vrrp_garp_master_repeat` (default 5).
    pub vrrp_garp_master_repeat: u32,
    /// `vrrp_garp_master_refresh` (default 0 = off).
    pub vrrp_garp_master_refresh: Duration,
    /// `vrrp_garp_master_refresh_repeat` (default 1).
    pub vrrp_garp_master_refresh_repeat: u32,
    /// `vrrp_skip_check_adv_addr`.
    pub vrrp_skip_check_adv_addr: bool,
    /// `vrrp_check_unicast_src`.
    pub vrrp_check_unicast_src: bool,
    /// `v3_checksum_as_v2`.
    pub v3_checksum_as_v2: bool,
    /// `enable_script_security`.
    pub enable_script_security: bool,
    /// `script_user USER [GROUP]`.
    pub script_user: Option<String>,
    /// `checker_log_all_failures`.
    pub checker_log_all_failures: bool,
    /// `notify_fifo` / `notify_fifo_script`: every VRRP and LVS event.
    pub notify_fifo: NotifyFifo,
    /// `vrrp_notify_fifo` / `vrrp_notify_fifo_script`: VRRP events only.
    pub vrrp_notify_fifo: NotifyFifo,
    /// `lvs_notify_fifo` / `lvs_notify_fifo_script`: LVS (checker) events only.
    pub lvs_notify_fifo: NotifyFifo,
    /// Real keepalived keywords rvs accepts but does not act on: (keyword, arguments).
    pub unused: Vec<(String, Vec<String>)>,
}

impl Default for GlobalDefs {
    fn default() -> Self {
        GlobalDefs {
            router_id: None,
            notification_email: Vec::new(),
            notification_email_from: None,
            smtp_server: None,
            smtp_connect_timeout: None,
            smtp_helo_name: None,
            smtp_alert: None,
            smtp_alert_vrrp: None,
            smtp_alert_checker: None,
            no_checker_emails: false,
            no_email_faults: false,
            rs_init_notifies: false,
            vrrp_down_timer_adverts: None,
            net_namespace: None,
            lvs_timeouts: None,
            lvs_sync_daemon: None,
            lvs_flush: false,
            lvs_flush_on_stop: None,
            vrrp_version: 2,
            vrrp_strict: false,
            vrrp_mcast_group4: Ipv4Addr::new(224, 0, 0, 18),
            vrrp_mcast_group6: Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x12),
            vrrp_garp_master_delay: Duration::from_secs(5),
            vrrp_garp_master_repeat: 5,
            vrrp_garp_master_refresh: Duration::ZERO,
            vrrp_garp_master_refresh_repeat: 1,
            vrrp_skip_check_adv_addr: false,
            vrrp_check_unicast_src: false,
            v3_checksum_as_v2: false,
            enable_script_security: false,
            script_user: None,
            checker_log_all_failures: false,
            notify_fifo: NotifyFifo::default(),
            vrrp_notify_fifo: NotifyFifo::default(),
            lvs_notify_fifo: NotifyFifo::default(),
            unused: Vec::new(),
        }
    }
}

/// A notify FIFO of `global_defs` (`notify_fifo PATH [USER [GROUP]]` and
/// its `*_script SCRIPT [USER [GROUP]]`): keepalived writes one line per
/// event into it, and starts the script with the FIFO's path as its last
/// argument so that the script can read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotifyFifo {
    /// The FIFO's path (created if missing).
    pub path: Option<String>,
    /// `USER [GROUP]` owning a FIFO rvs creates, as written.
    pub owner: Option<String>,
    /// The script reading the FIFO.
    pub script: Option<Script>,
    /// Where the keyword was (for warnings).
    pub loc: Option<Loc>,
}

/// Global `SSL { password ca certificate key }`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SslConfig {
    /// `password`.
    pub password: Option<String>,
    /// `ca`.
    pub ca: Option<String>,
    /// `certificate`.
    pub certificate: Option<String>,
    /// `key`.
    pub key: Option<String>,
}

/// One line of a `virtual_server_group`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VsgEntry {
    /// An address or inclusive address range with a port (0 = none given).
    Range {
        /// First address.
        first: IpAddr,
        /// Last address (== first for a single address).
        last: IpAddr,
        /// Port.
        port: u16,
        /// Where it was written.
        loc: Loc,
    },
    /// `fwmark N [inet|inet6]`.
    Fwmark {
        /// The mark.
        mark: u32,
        /// Family if given.
        family: Option<AddrFamily>,
        /// Where it was written.
        loc: Loc,
    },
}

/// `virtual_server_group NAME { ... }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtualServerGroup {
    /// Group name.
    pub name: String,
    /// Entries in order.
    pub entries: Vec<VsgEntry>,
    /// Where the block starts.
    pub loc: Loc,
}

/// Alibaba FULLNAT `local_address_group NAME { IP | IP-range ... }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalAddressGroup {
    /// Group name.
    pub name: String,
    /// Inclusive address ranges (single addresses have first == last).
    pub ranges: Vec<(IpAddr, IpAddr)>,
    /// Where the block starts.
    pub loc: Loc,
}

/// What a `virtual_server` line names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VsTarget {
    /// `virtual_server IP [PORT]` (port 0 when omitted).
    Addr {
        /// VIP.
        addr: IpAddr,
        /// Port.
        port: u16,
    },
    /// `virtual_server fwmark N`.
    Fwmark(u32),
    /// `virtual_server group NAME`.
    Group(String),
}

/// A notify/quorum script: command line plus optional `user [group]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    /// The command (a quoted string keeps its spaces).
    pub command: String,
    /// `username [:][groupname]` if given.
    pub user: Option<String>,
}

/// `sorry_server IP [PORT]` and its options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SorryServer {
    /// Address.
    pub addr: IpAddr,
    /// Port (resolved: the VS port unless NAT gave another).
    pub port: u16,
    /// `sorry_server_inhibit`.
    pub inhibit: bool,
    /// `sorry_server_lvs_method` as written.
    pub lvs_method: Option<ForwardMethod>,
    /// Resolved forwarding method (from the VS when not given).
    pub forward: ForwardMethod,
}

/// `virtual_server ... { ... }`.
#[derive(Clone, Debug, PartialEq)]
pub struct VirtualServer {
    /// Address, fwmark or group.
    pub target: VsTarget,
    /// Where the block starts.
    pub loc: Loc,
    /// `delay_loop` (default 60 s).
    pub delay_loop: Duration,
    /// `lvs_sched`/`lb_algo` (resolved to `wlc` when missing, with a warning).
    pub scheduler: Option<Scheduler>,
    /// Scheduler flags (`flag-N`, `sh-*`, `mh-*`).
    pub flags: SchedFlags,
    /// `hashed` (accepted, no effect in rvs).
    pub hashed: bool,
    /// `ops` one-packet scheduling.
    pub ops: bool,
    /// `lvs_method`/`lb_kind` as written.
    pub lvs_method: Option<ForwardMethod>,
    /// Resolved default forwarding method (NAT when not given).
    pub forward: ForwardMethod,
    /// `persistence_engine`.
    pub persistence_engine: Option<String>,
    /// `persistence_timeout` in seconds (360 when written without a value).
    pub persistence_timeout: Option<u32>,
    /// `persistence_granularity`.
    pub persistence_granularity: Option<PersistMask>,
    /// `protocol` (resolved to UDP when missing for address services, like keepalived).
    pub protocol: Option<Protocol>,
    /// `ha_suspend`.
    pub ha_suspend: bool,
    /// `alpha`.
    pub alpha: bool,
    /// `omega`.
    pub omega: bool,
    /// `quorum` (default 1; reduced to the total RS weight if above it).
    pub quorum: u32,
    /// `hysteresis` (default 0; reduced to quorum - 1 if not below quorum).
    pub hysteresis: u32,
    /// `quorum_up`.
    pub quorum_up: Option<Script>,
    /// `quorum_down`.
    pub quorum_down: Option<Script>,
    /// `ip_family`.
    pub ip_family: Option<AddrFamily>,
    /// `virtualhost`.
    pub virtualhost: Option<String>,
    /// `snmp_name`.
    pub snmp_name: Option<String>,
    /// `sorry_server`.
    pub sorry_server: Option<SorryServer>,
    /// `connect_timeout` as written.
    pub connect_timeout: Option<Duration>,
    /// `retry` as written.
    pub retry: Option<u32>,
    /// `delay_before_retry` as written.
    pub delay_before_retry: Option<Duration>,
    /// `warmup` as written.
    pub warmup: Option<Duration>,
    /// `inhibit_on_failure`.
    pub inhibit_on_failure: bool,
    /// `smtp_alert` as written.
    pub smtp_alert: Option<bool>,
    /// FULLNAT `laddr_group_name`.
    pub laddr_group_name: Option<String>,
    /// FULLNAT `syn_proxy`.
    pub syn_proxy: bool,
    /// FULLNAT `nat_mask`.
    pub nat_mask: Option<Ipv4Addr>,
    /// rvs extension `mh_table_size N` (a prime).
    pub mh_table_size: Option<u32>,
    /// rvs extension `proxy_protocol v1|v2` (proxy data plane).
    pub proxy_protocol: Option<rvs_core::model::ProxyProtocol>,
    /// rvs extension `max_conns N` (proxy data plane; 0 = unlimited).
    pub max_conns: u32,
    /// rvs extension `quic_lb { rotation N server_id_len N nonce_len N
    /// [key HEX32] }` (repeatable, one per config rotation codepoint).
    pub quic_lb: Vec<rvs_core::model::QuicLbConfig>,
    /// Real servers.
    pub real_servers: Vec<RealServer>,
}

/// `real_server IP [PORT] { ... }`.
#[derive(Clone, Debug, PartialEq)]
pub struct RealServer {
    /// Address.
    pub addr: IpAddr,
    /// Port (resolved as keepalived does: the VS port for non-NAT, or for NAT when 0).
    pub port: u16,
    /// Where the block starts.
    pub loc: Loc,
    /// `weight` (default 1).
    pub weight: u32,
    /// `lvs_method` as written.
    pub lvs_method: Option<ForwardMethod>,
    /// Resolved forwarding method.
    pub forward: ForwardMethod,
    /// `notify_up`.
    pub notify_up: Option<Script>,
    /// `notify_down`.
    pub notify_down: Option<Script>,
    /// rvs extension `proxy_protocol v1|v2`, overriding the virtual server's.
    pub proxy_protocol: Option<rvs_core::model::ProxyProtocol>,
    /// rvs extension `quic_server_id HEX`: the QUIC-LB server ID.
    pub quic_server_id: Option<rvs_core::model::QuicServerId>,
    /// `uthreshold`.
    pub uthreshold: u32,
    /// `lthreshold`.
    pub lthreshold: u32,
    /// `inhibit_on_failure` as written.
    pub inhibit_on_failure: Option<bool>,
    /// `alpha` as written.
    pub alpha: Option<bool>,
    /// `connect_timeout` as written.
    pub connect_timeout: Option<Duration>,
    /// `retry` as written.
    pub retry: Option<u32>,
    /// `delay_before_retry` as written.
    pub delay_before_retry: Option<Duration>,
    /// `warmup` as written.
    pub warmup: Option<Duration>,
    /// `delay_loop` as written.
    pub delay_loop: Option<Duration>,
    /// `smtp_alert` as written.
    pub smtp_alert: Option<bool>,
    /// `virtualhost`.
    pub virtualhost: Option<String>,
    /// Resolved settings (VS defaults applied).
    pub effective: RealServerEffective,
    /// Health checkers.
    pub checkers: Vec<Checker>,
}

/// A real server's settings after inheritance from its virtual server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RealServerEffective {
    /// Set weight 0 on failure instead of removing.
    pub inhibit_on_failure: bool,
    /// Start as down until checks pass.
    pub alpha: bool,
    /// Send SMTP alerts (keepalived default for real servers: yes).
    pub smtp_alert: bool,
    /// Check interval.
    pub delay_loop: Duration,
    /// Virtual host for HTTP checks.
    pub virtualhost: Option<String>,
}

/// Options every checker has (as written).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckerCommon {
    /// `connect_ip`.
    pub connect_ip: Option<IpAddr>,
    /// `connect_port`.
    pub connect_port: Option<u16>,
    /// `bindto`.
    pub bindto: Option<IpAddr>,
    /// `bind_if`.
    pub bind_if: Option<String>,
    /// `bind_port`.
    pub bind_port: Option<u16>,
    /// `fwmark` for checker packets.
    pub fwmark: Option<u32>,
    /// `alpha`.
    pub alpha: Option<bool>,
    /// `connect_timeout`.
    pub connect_timeout: Option<Duration>,
    /// `retry` (alias `nb_get_retry`).
    pub retry: Option<u32>,
    /// `delay_before_retry`.
    pub delay_before_retry: Option<Duration>,
    /// `warmup`.
    pub warmup: Option<Duration>,
    /// `delay_loop`.
    pub delay_loop: Option<Duration>,
    /// `log_all_failures`.
    pub log_all_failures: Option<bool>,
}

/// A checker's timing after inheritance (checker → real server → virtual
/// server → checker-type default), what a health-check runner uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckerTiming {
    /// Address to check (connect_ip or the real server's).
    pub connect_ip: Option<IpAddr>,
    /// Port to check (connect_port or the real server's).
    pub connect_port: u16,
    /// Start as failed.
    pub alpha: bool,
    /// Connection timeout (default 5 s).
    pub connect_timeout: Duration,
    /// Retries before a failure is accepted.
    pub retry: u32,
    /// Delay between retries.
    pub delay_before_retry: Duration,
    /// Maximum random delay before the first check.
    pub warmup: Duration,
    /// Interval between checks.
    pub delay_loop: Duration,
    /// Log every failure.
    pub log_all_failures: bool,
}

/// One `url { }` of HTTP_GET / SSL_GET.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlCheck {
    /// `path`.
    pub path: Option<String>,
    /// `digest` (lower-case MD5 hex).
    pub digest: Option<String>,
    /// `status_code` ranges; default 200-299 when neither given.
    pub status_codes: Vec<RangeInclusive<u16>>,
    /// `virtualhost`.
    pub virtualhost: Option<String>,
    /// `regex`.
    pub regex: Option<String>,
    /// `regex_no_match`.
    pub regex_no_match: bool,
    /// `regex_options`.
    pub regex_options: Vec<String>,
    /// Where the block starts.
    pub loc: Loc,
}

/// HTTP_GET / SSL_GET specifics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpCheck {
    /// `http_protocol` 1.0|1.0C|1.1.
    pub http_protocol: Option<String>,
    /// `fast_recovery`.
    pub fast_recovery: bool,
    /// `virtualhost` of the checker.
    pub virtualhost: Option<String>,
    /// `enable_sni` (SSL_GET).
    pub enable_sni: bool,
    /// `sni_name` (SSL_GET).
    pub sni_name: Option<String>,
    /// `tls_compliant` (SSL_GET).
    pub tls_compliant: bool,
    /// URLs.
    pub urls: Vec<UrlCheck>,
}

/// MISC_CHECK specifics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MiscCheck {
    /// `misc_path`.
    pub path: String,
    /// `misc_timeout` (resolved to delay_loop when missing).
    pub timeout: Option<Duration>,
    /// `misc_dynamic`.
    pub dynamic: bool,
    /// `user U[:G]`.
    pub user: Option<String>,
}

/// UDP_CHECK specifics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UdpCheck {
    /// `payload` bytes.
    pub payload: Option<Vec<u8>>,
    /// `require_reply`: `Some(None)` any reply, `Some(Some(pattern))` with
    /// a pattern where `None` nibbles are "don't care" (`x`).
    pub require_reply: Option<Option<Vec<Option<u8>>>>,
    /// `min_reply_length` (default 0).
    pub min_reply_length: u32,
    /// `max_reply_length` (default 255).
    pub max_reply_length: u32,
}

/// FILE_CHECK specifics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileCheck {
    /// `track_file` name.
    pub track_file: Option<String>,
    /// `dynamic`.
    pub dynamic: bool,
    /// `weight N [reverse]`.
    pub weight: Option<(i64, bool)>,
}

/// The checker type and its specific options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckerKind {
    /// HTTP_GET.
    Http(HttpCheck),
    /// SSL_GET.
    Ssl(HttpCheck),
    /// TCP_CHECK.
    Tcp,
    /// SMTP_CHECK.
    Smtp {
        /// `helo_name`.
        helo_name: Option<String>,
    },
    /// DNS_CHECK.
    Dns {
        /// Query type (default SOA).
        qtype: String,
        /// Query name (default ".").
        name: String,
    },
    /// MISC_CHECK.
    Misc(MiscCheck),
    /// UDP_CHECK.
    Udp(UdpCheck),
    /// PING_CHECK.
    Ping,
    /// FILE_CHECK.
    File(FileCheck),
    /// BFD_CHECK.
    Bfd {
        /// BFD instance name.
        name: Option<String>,
    },
}

impl CheckerKind {
    /// The keyword of this checker type.
    pub fn keyword(&self) -> &'static str {
        match self {
            CheckerKind::Http(_) => "HTTP_GET",
            CheckerKind::Ssl(_) => "SSL_GET",
            CheckerKind::Tcp => "TCP_CHECK",
            CheckerKind::Smtp { .. } => "SMTP_CHECK",
            CheckerKind::Dns { .. } => "DNS_CHECK",
            CheckerKind::Misc(_) => "MISC_CHECK",
            CheckerKind::Udp(_) => "UDP_CHECK",
            CheckerKind::Ping => "PING_CHECK",
            CheckerKind::File(_) => "FILE_CHECK",
            CheckerKind::Bfd { .. } => "BFD_CHECK",
        }
    }

    /// keepalived's per-type default `retry` (DNS 3, MISC 0, others 1).
    pub fn default_retry(&self) -> u32 {
        match self {
            CheckerKind::Dns { .. } => 3,
            CheckerKind::Misc(_) => 0,
            _ => 1,
        }
    }

    /// keepalived's per-type default `delay_before_retry`: HTTP/SSL 3 s,
    /// DNS none (= delay_loop), others 1 s.
    pub fn default_delay_before_retry(&self) -> Option<Duration> {
        match self {
            CheckerKind::Http(_) | CheckerKind::Ssl(_) => Some(Duration::from_secs(3)),
            CheckerKind::Dns { .. } => None,
            _ => Some(Duration::from_secs(1)),
        }
    }
}

/// A health checker of a real server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checker {
    /// Type and specific options.
    pub kind: CheckerKind,
    /// Common options as written.
    pub common: CheckerCommon,
    /// Resolved timing.
    pub effective: CheckerTiming,
    /// Where the block starts.
    pub loc: Loc,
}

/// Default connect timeout of checkers.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default `delay_loop`.
pub const DEFAULT_DELAY_LOOP: Duration = Duration::from_secs(60);

/// `vrrp_script NAME { ... }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VrrpScript {
    /// Name.
    pub name: String,
    /// `script`.
    pub script: Option<String>,
    /// `interval` (default 1 s).
    pub interval: Duration,
    /// `timeout`.
    pub timeout: Option<Duration>,
    /// `weight` (-253..253, default 0).
    pub weight: i32,
    /// `weight ... reverse`.
    pub weight_reverse: bool,
    /// `rise`.
    pub rise: Option<u32>,
    /// `fall`.
    pub fall: Option<u32>,
    /// `user`.
    pub user: Option<String>,
    /// `init_fail`.
    pub init_fail: bool,
    /// Where the block starts.
    pub loc: Loc,
}

/// A tracked interface or script with an optional weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracked {
    /// Interface / script / file name.
    pub name: String,
    /// `weight W`.
    pub weight: Option<i32>,
    /// `reverse`.
    pub reverse: bool,
}

/// Notify scripts shared by sync groups and instances.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Notify {
    /// `notify_master`.
    pub master: Option<Script>,
    /// `notify_backup`.
    pub backup: Option<Script>,
    /// `notify_fault`.
    pub fault: Option<Script>,
    /// `notify_stop`.
    pub stop: Option<Script>,
    /// `notify`.
    pub any: Option<Script>,
}

/// `vrrp_sync_group NAME { ... }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VrrpSyncGroup {
    /// Name.
    pub name: String,
    /// `group { I1 I2 }`.
    pub members: Vec<String>,
    /// `track_interface`.
    pub track_interface: Vec<Tracked>,
    /// `track_script`.
    pub track_script: Vec<Tracked>,
    /// Notify scripts.
    pub notify: Notify,
    /// `smtp_alert`.
    pub smtp_alert: bool,
    /// Where the block starts.
    pub loc: Loc,
}

/// Initial VRRP state.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VrrpState {
    /// MASTER.
    Master,
    /// BACKUP.
    Backup,
}

/// `authentication { auth_type PASS|AH; auth_pass ... }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authentication {
    /// true for AH, false for PASS.
    pub ah: bool,
    /// Password (keepalived uses the first 8 characters).
    pub pass: Option<String>,
}

/// One address of `virtual_ipaddress`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtualIp {
    /// Address.
    pub addr: IpAddr,
    /// Prefix length (`/N`), if given.
    pub prefix: Option<u8>,
    /// `brd`.
    pub brd: Option<String>,
    /// `dev`.
    pub dev: Option<String>,
    /// `scope`.
    pub scope: Option<String>,
    /// `label`.
    pub label: Option<String>,
    /// Other options (`no_track`, `preferred_lft`, ...), kept verbatim.
    pub extra: Vec<String>,
}

/// `unicast_peer { IP [min_ttl N] [max_ttl N] }` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnicastPeer {
    /// Address.
    pub addr: IpAddr,
    /// `min_ttl`.
    pub min_ttl: Option<u8>,
    /// `max_ttl`.
    pub max_ttl: Option<u8>,
}

/// `vrrp_instance NAME { ... }` (parsed only; running VRRP is elsewhere).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VrrpInstance {
    /// Name.
    pub name: String,
    /// `state`.
    pub state: Option<VrrpState>,
    /// `interface`.
    pub interface: Option<String>,
    /// `virtual_router_id`.
    pub virtual_router_id: Option<u8>,
    /// `priority` (default 100).
    pub priority: u8,
    /// `advert_int` (default 1 s).
    pub advert_int: Duration,
    /// `nopreempt` (`preempt` clears it).
    pub nopreempt: bool,
    /// `preempt_delay`.
    pub preempt_delay: Option<Duration>,
    /// `authentication`.
    pub authentication: Option<Authentication>,
    /// `virtual_ipaddress`.
    pub virtual_ipaddress: Vec<VirtualIp>,
    /// `virtual_ipaddress_excluded`.
    pub virtual_ipaddress_excluded: Vec<VirtualIp>,
    /// `unicast_src_ip`.
    pub unicast_src_ip: Option<IpAddr>,
    /// `unicast_peer`.
    pub unicast_peer: Vec<UnicastPeer>,
    /// `mcast_src_ip`.
    pub mcast_src_ip: Option<IpAddr>,
    /// `track_interface`.
    pub track_interface: Vec<Tracked>,
    /// `track_script`.
    pub track_script: Vec<Tracked>,
    /// Notify scripts.
    pub notify: Notify,
    /// `version`.
    pub version: Option<u8>,
    /// `use_vmac [NAME]`: `Some(None)` for the default name.
    pub use_vmac: Option<Option<String>>,
    /// `vmac_xmit_base`.
    pub vmac_xmit_base: bool,
    /// `accept` (true) / `no_accept` (false).
    pub accept: Option<bool>,
    /// `garp_master_delay`.
    pub garp_master_delay: Option<Duration>,
    /// `garp_master_repeat`.
    pub garp_master_repeat: Option<u32>,
    /// `garp_master_refresh`.
    pub garp_master_refresh: Option<Duration>,
    /// `garp_master_refresh_repeat`.
    pub garp_master_refresh_repeat: Option<u32>,
    /// `down_timer_adverts` as written (default: the global
    /// `vrrp_down_timer_adverts`, else 3).
    pub down_timer_adverts: Option<u32>,
    /// `lvs_sync_daemon_interface` (deprecated alias of global lvs_sync_daemon).
    pub lvs_sync_daemon_interface: Option<String>,
    /// `smtp_alert`.
    pub smtp_alert: bool,
    /// `strict_mode`.
    pub strict_mode: Option<bool>,
    /// `dont_track_primary`.
    pub dont_track_primary: bool,
    /// `track_file`: the `track_file` blocks this instance follows.
    pub track_file: Vec<Tracked>,
    /// `track_process`: the `vrrp_track_process` blocks it follows.
    pub track_process: Vec<Tracked>,
    /// `virtual_routes`: installed while the instance is MASTER.
    pub virtual_routes: Vec<IpRoute>,
    /// `virtual_rules`: installed while the instance is MASTER.
    pub virtual_rules: Vec<IpRule>,
    /// Where the block starts.
    pub loc: Loc,
}

/// What a route does with the packets it matches (`ip route`'s type).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RouteType {
    /// `unicast` (the default): forward them.
    #[default]
    Unicast,
    /// `blackhole`: drop them silently.
    Blackhole,
    /// `unreachable`: drop them with ICMP unreachable.
    Unreachable,
    /// `prohibit`: drop them with ICMP prohibited.
    Prohibit,
    /// `throw`: end the lookup in this table.
    Throw,
}

/// One line of `static_routes` / `virtual_routes` (keepalived's
/// `ip route` syntax: `[TYPE] [src A] [from P] [to] DEST [via|gw A]
/// [or A] [dev IF] [onlink] [scope S] [table T] [metric M]
/// [protocol P] [no_track]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpRoute {
    /// The route's type.
    pub kind: RouteType,
    /// Destination prefix (`default` is the family's /0).
    pub dst: IpAddr,
    /// Its length.
    pub dst_len: u8,
    /// `from PREFIX`: source prefix (IPv6 source-specific routing).
    pub from: Option<(IpAddr, u8)>,
    /// `src ADDR`: preferred source address.
    pub src: Option<IpAddr>,
    /// `via`/`gw ADDR` then `or ADDR`: the gateways (two make a
    /// multipath route).
    pub via: Vec<IpAddr>,
    /// `dev`/`oif IF`.
    pub dev: Option<String>,
    /// `onlink`.
    pub onlink: bool,
    /// `scope` (`RT_SCOPE_*` number); `None` picks as `ip route` does.
    pub scope: Option<u8>,
    /// `table` (default 254, main).
    pub table: u32,
    /// `metric` / `priority` / `preference`.
    pub metric: Option<u32>,
    /// `protocol` / `proto` (default 18, keepalived's `RTPROT_KEEPALIVED`).
    pub proto: u8,
    /// `no_track`.
    pub no_track: bool,
    /// Where the line starts.
    pub loc: Loc,
}

/// What a policy rule does (`ip rule`'s action).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleAction {
    /// `table T` / `lookup T`.
    Table(u32),
    /// `goto PRIORITY`.
    Goto(u32),
    /// `nop`.
    Nop,
    /// `blackhole`.
    Blackhole,
    /// `unreachable`.
    Unreachable,
    /// `prohibit`.
    Prohibit,
}

/// One line of `static_rules` / `virtual_rules` (keepalived's `ip rule`
/// syntax: `[from P|all] [to P|all] [not] [priority N] [table T]
/// [fwmark M[/MASK]] [tos N] [iif IF] [oif IF] [suppress_prefixlength N]
/// [goto N] [blackhole|unreachable|prohibit|nop] [inet6] [no_track]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpRule {
    /// An IPv6 rule (from its addresses, else `inet6`; IPv4 otherwise).
    pub ipv6: bool,
    /// `from PREFIX` (`None`: all).
    pub from: Option<(IpAddr, u8)>,
    /// `to PREFIX` (`None`: all).
    pub to: Option<(IpAddr, u8)>,
    /// `not`.
    pub invert: bool,
    /// `priority` / `preference` / `pref`.
    pub priority: Option<u32>,
    /// The action.
    pub action: RuleAction,
    /// `fwmark MARK[/MASK]`.
    pub fwmark: Option<(u32, Option<u32>)>,
    /// `tos` / `dsfield`.
    pub tos: u8,
    /// `iif` / `dev`.
    pub iif: Option<String>,
    /// `oif`.
    pub oif: Option<String>,
    /// `suppress_prefixlength`.
    pub suppress_prefixlen: Option<u32>,
    /// `no_track`.
    pub no_track: bool,
    /// Where the line starts.
    pub loc: Loc,
}
