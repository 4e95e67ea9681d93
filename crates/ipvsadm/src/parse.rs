//! ipvsadm 1.31's command line, parsed into rvs-core requests.
//!
//! This follows `parse_options` and `process_options` in ipvsadm.c step by
//! step, because operators' scripts depend on its exact behaviour,
//! including the odd parts:
//!
//! * the **first** option must be the command (`-A`, `-L`, ...), otherwise
//!   ipvsadm prints "Try `ipvsadm -h' ..." and exits 255; a second command
//!   later on is reported as "invalid option `-x'" (exit 2) — ipvsadm's
//!   "multiple commands specified" check can only fire for the first option;
//! * options are applied in the order given, so `-r host` picks up the
//!   service port (and the protocol used to look up a port name) of a
//!   `-t` that came *before* it, and `-M` is read as an IPv4 mask unless the
//!   service is already known to be IPv6;
//! * errors are detected in ipvsadm's order: while scanning options, then
//!   `--set`'s three values, then stray arguments, then `-b` flags (checked
//!   against the final `-s`), then the command/option legality table
//!   (`commands_v_options`, scanned in column order), then per-command checks.
//!
//! rvs additions are extra long options only: `--mh-table-size N` (Maglev
//! table size, a prime), `--fullnat` (forwarding method, so that a saved
//! FULLNAT real server can be restored), `--quic-lb SPEC` (repeatable, on
//! `-A/-E`; a flag on `-L`), `--quic-sid HEX` (on `-a/-e`) and the command
//! `--reload`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rvs_core::model::{
    AddrFamily, DEFAULT_PERSISTENCE_TIMEOUT, DestConfig, ForwardMethod, LocalAddrRange,
    MAX_PERSISTENCE_TIMEOUT, PersistMask, PersistenceEngine, Protocol, ProxyProtocol, QuicLbConfig,
    QuicServerId, SchedFlags, ServiceConfig, ServiceKey, Tunnel, TunnelCsum, TunnelType,
};

use rvs_core::sched::Scheduler;

use crate::cnum::{atoi, inet_aton, string_to_number, strtol_full};
use crate::error::ParseError;
use crate::format::{ListOptions, ListTarget};
use crate::names::{Names, SystemNames};
use crate::popt::{ArgKind, OptSpec, Popt};
use crate::snapshot::ServiceKeySnap;

/// A parsed command line: one ipvsadm command with everything it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// What to do.
    pub command: Command,
}

/// A virtual service as `-A`/`-E` state it. `-E` replaces every field, so
/// the defaults (`wlc`, not persistent, ...) are filled in here as ipvsadm
/// does before talking to the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Which service.
    pub key: ServiceKey,
    /// Its options (`config.pe` is set when `pe_name` is a known engine,
    /// `config.scheduler` when `-s` names a known scheduler).
    pub config: ServiceConfig,
    /// `-s NAME` as given (truncated to 16 bytes like ipvsadm) when NAME is
    /// no scheduler rvs knows: for the daemon side to refuse with "Scheduler
    /// or persistence engine not found", as the kernel does. `None` when
    /// `-s` named a known scheduler or was not given.
    pub sched_name: Option<String>,
    /// `--pe NAME` as given (truncated to 16 bytes like ipvsadm). An unknown
    /// name is for the daemon to refuse with "Scheduler or persistence
    /// engine not found", as the kernel does.
    pub pe_name: Option<String>,
}

/// A real server request (`-a`, `-e`, `-d`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestSpec {
    /// The virtual service it belongs to.
    pub service: ServiceKey,
    /// The real server. For `-d` only `addr` and `port` matter.
    pub dest: DestConfig,
}

/// `--set tcp tcpfin udp` (seconds; 0 = leave unchanged, like the kernel).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP ESTABLISHED timeout.
    pub tcp: u32,
    /// TCP FIN_WAIT timeout.
    pub tcp_fin: u32,
    /// UDP timeout.
    pub udp: u32,
}

pub use rvs_core::sync::{DaemonConfig, SyncState};

/// Every ipvsadm command, plus rvs's `--reload`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `-A`: add a virtual service.
    AddService(ServiceSpec),
    /// `-E`: replace a virtual service's options.
    EditService(ServiceSpec),
    /// `-D`: delete a virtual service and its real servers.
    DeleteService(ServiceKey),
    /// `-C`: delete everything.
    Flush,
    /// `-L`/`-l` (and no arguments at all): list; see [`ListOptions`].
    List(ListOptions),
    /// `-a`: add a real server.
    AddServer(DestSpec),
    /// `-e`: replace a real server's options.
    EditServer(DestSpec),
    /// `-d`: delete a real server.
    DeleteServer(DestSpec),
    /// `--set tcp tcpfin udp`.
    SetTimeouts(Timeouts),
    /// `--start-daemon master|backup`.
    StartDaemon(DaemonConfig),
    /// `--stop-daemon master|backup`.
    StopDaemon(DaemonConfig),
    /// `-R`: read commands from stdin, one per line ([`crate::parse_restore_line`]).
    Restore,
    /// `-S [-n]`: print the rules in `-R` syntax.
    Save {
        /// `-n`: numeric addresses and ports.
        numeric: bool,
    },
    /// `-Z [service]`: zero counters of one service or all.
    Zero(Option<ServiceKey>),
    /// `-h`: print [`crate::usage_text`] to stdout, exit 0.
    Help,
    /// `-v`: print [`crate::version_text`] to stdout, exit 0.
    Version,
    /// rvs `--reload`: ask the daemon to re-read its configuration file.
    Reload,
    /// rvs `--remove-director`: ask the daemon to detach its XDP program,
    /// unpin its maps and exit.
    RemoveDirector,
    /// `--add-laddr -t|-u|-f SERVICE -z ADDR[-ADDR]` (rvs-only, DPVS's).
    AddLaddr(LaddrSpec),
    /// `--del-laddr -t|-u|-f SERVICE -z ADDR[-ADDR]`.
    DelLaddr(LaddrSpec),
    /// `--get-laddr [-t|-u|-f SERVICE]`: list the pools.
    GetLaddr(Option<ServiceKey>),
}

/// A pool entry of a service, for `--add-laddr`/`--del-laddr`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LaddrSpec {
    /// The service.
    pub service: ServiceKey,
    /// The address or range.
    pub laddr: LocalAddrRange,
}

// ---------------------------------------------------------------------------
// Option table

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Opt {
    // commands
    AddService,
    EditService,
    DeleteService,
    Clear,
    List,
    Zero,
    AddServer,
    EditServer,
    DeleteServer,
    Set,
    Help,
    Version,
    Restore,
    Save,
    StartDaemon,
    StopDaemon,
    Reload,
    RemoveDirector,
    AddLaddr,
    DelLaddr,
    GetLaddr,
    // options
    Tcp,
    Udp,
    Sctp,
    Fwmark,
    Scheduler,
    Persistent,
    Netmask,
    RealServer,
    Masq,
    Ipip,
    Gatewaying,
    FullNat,
    Weight,
    UThreshold,
    LThreshold,
    Numeric,
    Connection,
    McastInterface,
    Syncid,
    Timeout,
    Daemon,
    Stats,
    Rate,
    Thresholds,
    PersistentConn,
    NoSort,
    Sort,
    Exact,
    Ipv6,
    Ops,
    Pe,
    SchedFlags,
    McastGroup,
    McastPort,
    McastTtl,
    SyncMaxlen,
    TunInfo,
    TunType,
    TunPort,
    TunNocsum,
    TunCsum,
    TunRemcsum,
    MhTableSize,
    ProxyProtocol,
    MaxConns,
    Laddr,
    QuicLb,
    QuicSid,
}

const fn o(long: &'static str, short: Option<char>, kind: ArgKind, id: Opt) -> OptSpec<Opt> {
    OptSpec {
        long,
        short,
        kind,
        id,
    }
}

use ArgKind::{None as N, Optional as Op, Required as R};

/// ipvsadm's popt table (same names, letters and argument kinds), then rvs's.
static TABLE: &[OptSpec<Opt>] = &[
    o("add-service", Some('A'), N, Opt::AddService),
    o("edit-service", Some('E'), N, Opt::EditService),
    o("delete-service", Some('D'), N, Opt::DeleteService),
    o("clear", Some('C'), N, Opt::Clear),
    o("list", Some('L'), N, Opt::List),
    o("list", Some('l'), N, Opt::List),
    o("zero", Some('Z'), N, Opt::Zero),
    o("add-server", Some('a'), N, Opt::AddServer),
    o("edit-server", Some('e'), N, Opt::EditServer),
    o("delete-server", Some('d'), N, Opt::DeleteServer),
    o("set", None, N, Opt::Set),
    o("help", Some('h'), N, Opt::Help),
    o("version", Some('v'), N, Opt::Version),
    o("restore", Some('R'), N, Opt::Restore),
    o("save", Some('S'), N, Opt::Save),
    o("start-daemon", None, R, Opt::StartDaemon),
    o("stop-daemon", None, R, Opt::StopDaemon),
    o("tcp-service", Some('t'), R, Opt::Tcp),
    o("udp-service", Some('u'), R, Opt::Udp),
    o("sctp-service", None, R, Opt::Sctp),
    o("fwmark-service", Some('f'), R, Opt::Fwmark),
    o("scheduler", Some('s'), R, Opt::Scheduler),
    o("persistent", Some('p'), Op, Opt::Persistent),
    o("netmask", Some('M'), R, Opt::Netmask),
    o("real-server", Some('r'), R, Opt::RealServer),
    o("masquerading", Some('m'), N, Opt::Masq),
    o("ipip", Some('i'), N, Opt::Ipip),
    o("gatewaying", Some('g'), N, Opt::Gatewaying),
    o("weight", Some('w'), R, Opt::Weight),
    o("u-threshold", Some('x'), R, Opt::UThreshold),
    o("l-threshold", Some('y'), R, Opt::LThreshold),
    o("numeric", Some('n'), N, Opt::Numeric),
    o("connection", Some('c'), N, Opt::Connection),
    o("mcast-interface", None, R, Opt::McastInterface),
    o("syncid", None, R, Opt::Syncid),
    o("timeout", None, N, Opt::Timeout),
    o("daemon", None, N, Opt::Daemon),
    o("stats", None, N, Opt::Stats),
    o("rate", None, N, Opt::Rate),
    o("thresholds", None, N, Opt::Thresholds),
    o("persistent-conn", None, N, Opt::PersistentConn),
    o("nosort", None, N, Opt::NoSort),
    o("sort", None, N, Opt::Sort),
    o("exact", Some('X'), N, Opt::Exact),
    o("ipv6", Some('6'), N, Opt::Ipv6),
    o("ops", Some('o'), N, Opt::Ops),
    o("pe", None, R, Opt::Pe),
    o("sched-flags", Some('b'), R, Opt::SchedFlags),
    o("mcast-group", None, R, Opt::McastGroup),
    o("mcast-port", None, R, Opt::McastPort),
    o("mcast-ttl", None, R, Opt::McastTtl),
    o("sync-maxlen", None, R, Opt::SyncMaxlen),
    o("tun-info", None, N, Opt::TunInfo),
    o("tun-type", None, R, Opt::TunType),
    o("tun-port", None, R, Opt::TunPort),
    o("tun-nocsum", None, N, Opt::TunNocsum),
    o("tun-csum", None, N, Opt::TunCsum),
    o("tun-remcsum", None, N, Opt::TunRemcsum),
    // rvs extensions (long options only)
    o("reload", None, N, Opt::Reload),
    o("remove-director", None, N, Opt::RemoveDirector),
    o("mh-table-size", None, R, Opt::MhTableSize),
    o("fullnat", None, N, Opt::FullNat),
    o("proxy-protocol", None, R, Opt::ProxyProtocol),
    o("max-conns", None, R, Opt::MaxConns),
    o("add-laddr", None, N, Opt::AddLaddr),
    o("del-laddr", None, N, Opt::DelLaddr),
    o("get-laddr", None, N, Opt::GetLaddr),
    o("laddr", Some('z'), R, Opt::Laddr),
    o("quic-lb", None, Op, Opt::QuicLb),
    o("quic-sid", None, R, Opt::QuicSid),
];

// Option columns of the legality table (ipvsadm's OPTC_* order), plus rvs's.
const C_NUMERIC: usize = 0;
const C_CONNECTION: usize = 1;
const C_SERVICE: usize = 2;
const C_SCHEDULER: usize = 3;
const C_PERSISTENT: usize = 4;
const C_NETMASK: usize = 5;
const C_SERVER: usize = 6;
const C_FORWARD: usize = 7;
const C_WEIGHT: usize = 8;
const C_UTHRESHOLD: usize = 9;
const C_LTHRESHOLD: usize = 10;
const C_MCAST: usize = 11;
const C_TIMEOUT: usize = 12;
const C_DAEMON: usize = 13;
const C_STATS: usize = 14;
const C_RATE: usize = 15;
const C_THRESHOLDS: usize = 16;
const C_PERSISTENTCONN: usize = 17;
const C_NOSORT: usize = 18;
const C_SYNCID: usize = 19;
const C_EXACT: usize = 20;
const C_ONEPACKET: usize = 21;
const C_PE: usize = 22;
const C_SCHED_FLAGS: usize = 23;
const C_MCAST_GROUP: usize = 24;
const C_MCAST_PORT: usize = 25;
const C_MCAST_TTL: usize = 26;
const C_SYNC_MAXLEN: usize = 27;
const C_TUN_INFO: usize = 28;
const C_TUN_TYPE: usize = 29;
const C_TUN_PORT: usize = 30;
const C_TUN_NOCSUM: usize = 31;
const C_TUN_CSUM: usize = 32;
const C_TUN_REMCSUM: usize = 33;
const C_MH_TABLE_SIZE: usize = 34;
const C_PROXY_PROTOCOL: usize = 35;
const C_MAX_CONNS: usize = 36;
const C_LADDR: usize = 37;
const C_QUIC_LB: usize = 38;
const C_QUIC_SID: usize = 39;
const NUM_OPT: usize = 40;

/// `optnames[]`: what the legality errors call each column.
const OPT_NAMES: [&str; NUM_OPT] = [
    "numeric",
    "connection",
    "service-address",
    "scheduler",
    "persistent",
    "netmask",
    "real-server",
    "forwarding-method",
    "weight",
    "u-threshold",
    "l-threshold",
    "mcast-interface",
    "timeout",
    "daemon",
    "stats",
    "rate",
    "thresholds",
    "persistent-conn",
    "nosort",
    "syncid",
    "exact",
    "ops",
    "pe",
    "sched-flags",
    "mcast-group",
    "mcast-port",
    "mcast-ttl",
    "sync-maxlen",
    "tun-info",
    "tun-type",
    "tun-port",
    "tun-nocsum",
    "tun-csum",
    "tun-remcsum",
    "mh-table-size",
    "proxy-protocol",
    "max-conns",
    "laddr",
    "quic-lb",
    "quic-sid",
];

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Cmd {
    Add,
    Edit,
    Del,
    Flush,
    List,
    AddDest,
    DelDest,
    EditDest,
    Timeout,
    StartDaemon,
    StopDaemon,
    Restore,
    Save,
    Zero,
    Reload,
    RemoveDirector,
    AddLaddr,
    DelLaddr,
    GetLaddr,
}

impl Cmd {
    /// `cmdnames[]`.
    fn name(self) -> &'static str {
        match self {
            Cmd::Add => "add-service",
            Cmd::Edit => "edit-service",
            Cmd::Del => "delete-service",
            Cmd::Flush => "flush",
            Cmd::List => "list",
            Cmd::AddDest => "add-server",
            Cmd::DelDest => "delete-server",
            Cmd::EditDest => "edit-server",
            Cmd::Timeout => "set",
            Cmd::StartDaemon => "start-daemon",
            Cmd::StopDaemon => "stop-daemon",
            Cmd::Restore => "restore",
            Cmd::Save => "save",
            Cmd::Zero => "zero",
            Cmd::Reload => "reload",
            Cmd::RemoveDirector => "remove-director",
            Cmd::AddLaddr => "add-laddr",
            Cmd::DelLaddr => "del-laddr",
            Cmd::GetLaddr => "get-laddr",
        }
    }

    /// The command's row of `commands_v_options`: `+` compulsory, `x`
    /// illegal, `1` at most one of the `1` columns, space optional. Columns
    /// 34-39 are rvs's `--mh-table-size`, `--proxy-protocol`, `--max-conns`,
    /// `--laddr`, `--quic-lb`, `--quic-sid`.
    fn legality(self) -> &'static [u8; NUM_OPT] {
        match self {
            Cmd::Add | Cmd::Edit => b"xx+   xxxxxxxxxxxxxxx   xxxxxxxxxx   x x",
            Cmd::Del => b"xx+xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            Cmd::List => b" 11xxxxxxxxx11       xxxxxxx xxxxxxxxx x",
            Cmd::AddDest | Cmd::EditDest => b"xx+xxx+    xxxxxxxxxxxxxxxxxx     x xxx ",
            Cmd::DelDest => b"xx+xxx+xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            Cmd::StartDaemon => b"xxxxxxxxxxx xxxxxxx xxxx    xxxxxxxxxxxx",
            Cmd::StopDaemon => b"xxxxxxxxxxxxxxxxxxx xxxxxxxxxxxxxxxxxxxx",
            Cmd::Save => b" xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            Cmd::Zero => b"xx xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            Cmd::AddLaddr | Cmd::DelLaddr => b"xx+xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx+xx",
            Cmd::GetLaddr => b" x xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            Cmd::Flush | Cmd::Timeout | Cmd::Restore | Cmd::Reload | Cmd::RemoveDirector => {
                b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            }
        }
    }
}

/// `tunnel_types_v_options`: columns tun-port, nocsum, csum, remcsum.
fn tunnel_legality(t: TunnelType) -> &'static [u8; 4] {
    match t {
        TunnelType::Ipip => b"xxxx",
        TunnelType::Gue => b"+111",
        TunnelType::Gre => b"x11x",
        // rvs-only: UDP 6081 always, checksum like GRE's.
        TunnelType::Geneve => b"x11x",
    }
}
const TUN_OPTS: [usize; 4] = [C_TUN_PORT, C_TUN_NOCSUM, C_TUN_CSUM, C_TUN_REMCSUM];

/// `MAX_TIMEOUT` in ipvsadm.c: 31 days.
const MAX_TIMEOUT: i64 = MAX_PERSISTENCE_TIMEOUT as i64;
/// `IP_VS_SCHEDNAME_MAXLEN - 1`, `IP_VS_IFNAME_MAXLEN - 1`.
const NAME_MAX: usize = 15;
/// `IP_VS_PENAME_MAXLEN`.
const PENAME_MAX: usize = 16;
/// Largest Maglev table rvs-core accepts.
const MH_TABLE_MAX: i64 = 1 << 24;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Fwd {
    Masq,
    Route,
    Tunnel,
    FullNat,
}

/// Everything `struct ipvs_command_entry` + options + format hold.
struct State {
    cmd: Option<Cmd>,
    options: u64,
    // service
    svc_af: AddrFamily,
    svc_proto: u8,
    svc_addr: IpAddr,
    svc_port: u16,
    fwmark: u32,
    sched: String,
    persistent: Option<u32>,
    /// IPv4 mask (host order) or IPv6 prefix length, like ipvsadm's `netmask`.
    netmask: u32,
    pe_name: Option<String>,
    one_packet: bool,
    sched_flags_arg: Option<String>,
    mh_table_size: Option<u32>,
    proxy_protocol: Option<ProxyProtocol>,
    max_conns: Option<u32>,
    laddr: Option<LocalAddrRange>,
    /// `--quic-lb SPEC`, in the order given (repeatable).
    quic_lb: Vec<QuicLbConfig>,
    /// `--quic-lb` without a SPEC (the `-L` flag).
    quic_lb_flag: bool,
    quic_sid: Option<QuicServerId>,
    // dest
    dest_addr: IpAddr,
    dest_port: u16,
    fwd: Fwd,
    weight: u32,
    u_threshold: u32,
    l_threshold: u32,
    tun_type: TunnelType,
    tun_port: u16,
    tun_flags: u16,
    // daemon
    daemon_state: SyncState,
    mcast_ifn: String,
    syncid: u8,
    sync_maxlen: Option<u16>,
    mcast_group: Option<IpAddr>,
    mcast_port: Option<u16>,
    mcast_ttl: Option<u8>,
    timeouts: Timeouts,
    list: ListOptions,
}

impl State {
    fn new() -> Self {
        State {
            cmd: None,
            options: 0,
            svc_af: AddrFamily::Inet,
            svc_proto: 0,
            svc_addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            svc_port: 0,
            fwmark: 0,
            sched: String::new(),
            persistent: None,
            netmask: u32::MAX,
            pe_name: None,
            one_packet: false,
            sched_flags_arg: None,
            mh_table_size: None,
            proxy_protocol: None,
            max_conns: None,
            laddr: None,
            quic_lb: Vec::new(),
            quic_lb_flag: false,
            quic_sid: None,
            dest_addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            dest_port: 0,
            fwd: Fwd::Route,
            weight: 1,
            u_threshold: 0,
            l_threshold: 0,
            tun_type: TunnelType::Ipip,
            tun_port: 0,
            tun_flags: 0,
            daemon_state: SyncState::Master,
            mcast_ifn: String::new(),
            syncid: 0,
            sync_maxlen: None,
            mcast_group: None,
            mcast_port: None,
            mcast_ttl: None,
            timeouts: Timeouts {
                tcp: 0,
                tcp_fin: 0,
                udp: 0,
            },
            list: ListOptions::default(),
        }
    }

    fn has(&self, col: usize) -> bool {
        self.options & (1u64 << col) != 0
    }

    /// `set_option`: each option at most once.
    fn set_option(&mut self, col: usize) -> Result<(), ParseError> {
        if self.has(col) {
            return Err(ParseError::fail(format!(
                "multiple '{}' options specified",
                OPT_NAMES[col]
            )));
        }
        self.options |= 1u64 << col;
        Ok(())
    }

    fn service_key(&self) -> ServiceKey {
        if self.fwmark != 0 {
            ServiceKey::Fwmark {
                mark: self.fwmark,
                af: self.svc_af,
            }
        } else {
            ServiceKey::Addr {
                protocol: Protocol::from_number(self.svc_proto).unwrap_or(Protocol::Tcp),
                addr: self.svc_addr,
                port: self.svc_port,
            }
        }
    }
}

/// Truncate to at most `max` bytes on a character boundary (C `strncpy`
/// into a fixed buffer).
fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// Result of ipvsadm's `parse_service`: address, family, and the port if
/// one was written.
struct ParsedAddr {
    af: AddrFamily,
    addr: IpAddr,
    port: Option<u16>,
}

/// `parse_service`: `host[:port]`, `[v6]:port`, bare IPv6; port as number
/// or name of `proto`. `None` = "illegal ... address[:port] specified".
fn parse_service(buf: &str, proto: u8, names: &dyn Names) -> Option<ParsedAddr> {
    if buf.bytes().all(|b| b.is_ascii_digit()) {
        return None; // all digits (or empty): not an address
    }
    let mut host = buf;
    let mut port_str: Option<&str> = None;
    if let Some(rest) = buf.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let p = after.strip_prefix(':')?;
        host = inside;
        port_str = Some(p);
    }
    let (af, addr);
    if let Ok(a6) = host.parse::<Ipv6Addr>() {
        af = AddrFamily::Inet6;
        addr = IpAddr::V6(a6);
    } else {
        // A bracketed non-IPv6 host keeps only what is inside the brackets
        // and, having no ':' there, loses the port (as in ipvsadm).
        port_str = None;
        if let Some((h, p)) = host.rsplit_once(':') {
            host = h;
            port_str = Some(p);
        }
        let a4 = inet_aton(host).or_else(|| names.host_to_v4(host))?;
        af = AddrFamily::Inet;
        addr = IpAddr::V4(a4);
    }
    let port = match port_str {
        None => None,
        Some(p) => Some(match string_to_number(p, 0, 65535) {
            Some(n) => u16::try_from(n).ok()?,
            None => names.service_to_port(p, proto)?,
        }),
    };
    Some(ParsedAddr { af, addr, port })
}

/// `parse_timeout`: `None` (no argument) means the persistence default.
fn parse_timeout(arg: Option<&str>, min: i64) -> Result<u32, ParseError> {
    let Some(s) = arg else {
        return Ok(DEFAULT_PERSISTENCE_TIMEOUT);
    };
    string_to_number(s, min, MAX_TIMEOUT)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| ParseError::fail(format!("invalid timeout value `{s}' specified")))
}

/// `parse_fwmark`: 1..=UINT_MAX.
fn parse_fwmark(s: &str) -> Result<u32, ParseError> {
    strtol_full(s)
        .filter(|&n| n > 0)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| ParseError::fail(format!("invalid fwmark value `{s}' specified")))
}

/// `parse_sched_flags`: comma-separated names, checked against the scheduler.
fn parse_sched_flags(sched: &str, arg: &str) -> Result<u32, ParseError> {
    // `-s` as given (an unknown name takes no sh/mh flag); none = wlc.
    let sched = if sched.is_empty() {
        Some(Scheduler::Wlc)
    } else {
        sched.parse::<Scheduler>().ok()
    };
    let mut flags = 0u32;
    let mut any = false;
    for flag in arg.split(',').filter(|f| !f.is_empty()) {
        any = true;
        let (bit, needs) = match flag {
            "flag-1" => (SchedFlags::FLAG1, None),
            "flag-2" => (SchedFlags::FLAG2, None),
            "flag-3" => (SchedFlags::FLAG3, None),
            "sh-fallback" => (SchedFlags::SH_FALLBACK, Some(Scheduler::Sh)),
            "sh-port" => (SchedFlags::SH_PORT, Some(Scheduler::Sh)),
            "mh-fallback" => (SchedFlags::MH_FALLBACK, Some(Scheduler::Mh)),
            "mh-port" => (SchedFlags::MH_PORT, Some(Scheduler::Mh)),
            _ => {
                return Err(ParseError::fail(format!("invalid scheduler flag `{flag}'")));
            }
        };
        flags |= bit.0;
        if needs.is_some_and(|s| Some(s) != sched) {
            return Err(ParseError::fail(format!(
                "incompatible scheduler flag `{flag}'"
            )));
        }
    }
    if !any {
        // ipvsadm dereferences NULL here (`-b ,`); refuse instead.
        return Err(ParseError::fail("invalid scheduler flag `'"));
    }
    Ok(flags)
}

fn is_prime(n: i64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

/// Parse an ipvsadm command line (without argv\[0\]), resolving names with
/// the system resolver; messages name the program `ipvsadm`.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Invocation, ParseError> {
    parse_args_named("ipvsadm", args)
}

/// [`parse_args`] with the program name used in messages (ipvsadm prints
/// its argv\[0\] in the "Try `%s -h'" hint).
pub fn parse_args_named<I: IntoIterator<Item = String>>(
    prog: &str,
    args: I,
) -> Result<Invocation, ParseError> {
    parse_args_with(prog, args, &SystemNames)
}

/// The general entry point: program name and name resolver given.
/// No arguments at all lists the table (non-numeric), like ipvsadm.
pub fn parse_args_with<I: IntoIterator<Item = String>>(
    prog: &str,
    args: I,
    names: &dyn Names,
) -> Result<Invocation, ParseError> {
    let args: Vec<String> = args.into_iter().collect();
    if args.is_empty() {
        return Ok(Invocation {
            command: Command::List(ListOptions::default()),
        });
    }
    process(prog, &args, names, false)
}

/// One line of an `ipvsadm -R` stream or an `ipvsadm-save` file
/// (config_stream.c): split on spaces, tabs and CRs, drop every token equal
/// to `ipvsadm`, and parse the rest like a command line. Lines with no
/// tokens left give `Ok(None)` and are skipped, as ipvsadm does. `-R`
/// inside a restore is refused with the "Try" hint.
///
/// rvs extension: a line whose first token starts with `#` is a comment
/// (`Ok(None)`). ipvsadm's comment detection never triggers and it would
/// refuse the line; accepting it changes no valid input.
pub fn parse_restore_line(line: &str) -> Result<Option<Invocation>, ParseError> {
    parse_restore_line_with("ipvsadm", line, &SystemNames)
}

/// [`parse_restore_line`] with the program name and resolver given.
pub fn parse_restore_line_with(
    prog: &str,
    line: &str,
    names: &dyn Names,
) -> Result<Option<Invocation>, ParseError> {
    let tokens: Vec<String> = line
        .split([' ', '\t', '\r', '\n'])
        .filter(|t| !t.is_empty() && *t != "ipvsadm")
        .map(str::to_owned)
        .collect();
    match tokens.first() {
        None => return Ok(None),
        Some(t) if t.starts_with('#') => return Ok(None),
        Some(_) => {}
    }
    process(prog, &tokens, names, true).map(Some)
}

fn process(
    prog: &str,
    args: &[String],
    names: &dyn Names,
    reading_stdin: bool,
) -> Result<Invocation, ParseError> {
    let mut st = State::new();
    let mut popt = Popt::new(TABLE, args);

    // The first option must be the command.
    let (first, first_arg) = match popt.next_opt() {
        Ok(Some(x)) => x,
        Ok(None) | Err(_) => return Err(ParseError::try_help(prog)),
    };
    let cmd = match first {
        Opt::AddService => Cmd::Add,
        Opt::EditService => Cmd::Edit,
        Opt::DeleteService => Cmd::Del,
        Opt::AddServer => Cmd::AddDest,
        Opt::EditServer => Cmd::EditDest,
        Opt::DeleteServer => Cmd::DelDest,
        Opt::Clear => Cmd::Flush,
        Opt::List => Cmd::List,
        Opt::Zero => Cmd::Zero,
        Opt::Set => Cmd::Timeout,
        Opt::Restore => Cmd::Restore,
        Opt::Save => Cmd::Save,
        Opt::Reload => Cmd::Reload,
        Opt::RemoveDirector => Cmd::RemoveDirector,
        Opt::AddLaddr => Cmd::AddLaddr,
        Opt::DelLaddr => Cmd::DelLaddr,
        Opt::GetLaddr => Cmd::GetLaddr,
        Opt::StartDaemon | Opt::StopDaemon => {
            let start = first == Opt::StartDaemon;
            st.daemon_state = match first_arg.as_deref() {
                Some("master") => SyncState::Master,
                Some("backup") => SyncState::Backup,
                _ if start => {
                    return Err(ParseError::fail("illegal start-daemon parameter specified"));
                }
                _ => return Err(ParseError::fail("illegal start_daemon specified")),
            };
            if start {
                Cmd::StartDaemon
            } else {
                Cmd::StopDaemon
            }
        }
        Opt::Help => {
            return Ok(Invocation {
                command: Command::Help,
            });
        }
        Opt::Version => {
            return Ok(Invocation {
                command: Command::Version,
            });
        }
        _ => return Err(ParseError::try_help(prog)),
    };
    st.cmd = Some(cmd);

    loop {
        let (opt, arg) = match popt.next_opt() {
            Ok(Some(x)) => x,
            Ok(None) => break,
            Err(e) => {
                let bad = popt.bad_option().unwrap_or(prog);
                return Err(ParseError::popt(bad, e.text()));
            }
        };
        apply_option(&mut st, opt, arg.as_deref(), names, || {
            popt.bad_option().unwrap_or(prog).to_owned()
        })?;
    }

    if cmd == Cmd::Timeout {
        let vals = (popt.get_arg(), popt.get_arg(), popt.get_arg());
        let (Some(a), Some(b), Some(c)) = vals else {
            return Err(ParseError::fail("--set option requires 3 timeout values"));
        };
        st.timeouts = Timeouts {
            tcp: parse_timeout(Some(&a), 0)?,
            tcp_fin: parse_timeout(Some(&b), 0)?,
            udp: parse_timeout(Some(&c), 0)?,
        };
    }
    if let Some(extra) = popt.get_arg() {
        return Err(ParseError::fail(format!("unexpected argument {extra}")));
    }
    let mut sched_flags = 0u32;
    if let Some(arg) = st.sched_flags_arg.as_deref().filter(|a| !a.is_empty()) {
        sched_flags = parse_sched_flags(&st.sched, arg)?;
    }

    generic_opt_check(cmd, st.options)?;
    finish(prog, st, cmd, sched_flags, reading_stdin)
}

fn apply_option(
    st: &mut State,
    opt: Opt,
    arg: Option<&str>,
    names: &dyn Names,
    bad: impl Fn() -> String,
) -> Result<(), ParseError> {
    let a = arg.unwrap_or("");
    match opt {
        Opt::Tcp | Opt::Udp | Opt::Sctp => {
            st.set_option(C_SERVICE)?;
            st.svc_proto = match opt {
                Opt::Tcp => 6,
                Opt::Udp => 17,
                _ => 132,
            };
            let p = parse_service(a, st.svc_proto, names).ok_or_else(|| {
                ParseError::fail("illegal virtual server address[:port] specified")
            })?;
            st.svc_af = p.af;
            st.svc_addr = p.addr;
            if p.af == AddrFamily::Inet6 {
                st.netmask = 128;
            }
            if let Some(port) = p.port {
                st.svc_port = port;
            }
        }
        Opt::Fwmark => {
            st.set_option(C_SERVICE)?;
            st.svc_af = AddrFamily::Inet;
            st.svc_proto = 6;
            st.fwmark = parse_fwmark(a)?;
        }
        Opt::Scheduler => {
            st.set_option(C_SCHEDULER)?;
            st.sched = truncate(a, NAME_MAX);
        }
        Opt::Persistent => {
            st.set_option(C_PERSISTENT)?;
            st.persistent = Some(parse_timeout(arg, 1)?);
        }
        Opt::Netmask => {
            st.set_option(C_NETMASK)?;
            if st.svc_af != AddrFamily::Inet6 {
                let m = inet_aton(a)
                    .or_else(|| names.host_to_v4(a))
                    .ok_or_else(|| {
                        ParseError::fail("illegal virtual server persistent mask specified")
                    })?;
                st.netmask = u32::from(m);
            } else {
                let n = atoi(a);
                if !(1..=128).contains(&n) {
                    return Err(ParseError::fail("illegal ipv6 netmask specified"));
                }
                st.netmask = u32::try_from(n).unwrap_or(128);
            }
        }
        Opt::RealServer => {
            st.set_option(C_SERVER)?;
            let p = parse_service(a, st.svc_proto, names)
                .ok_or_else(|| ParseError::fail("illegal real server address[:port] specified"))?;
            st.dest_addr = p.addr;
            st.dest_port = p.port.unwrap_or(st.svc_port);
        }
        Opt::Ipip | Opt::Gatewaying | Opt::Masq | Opt::FullNat => {
            st.set_option(C_FORWARD)?;
            st.fwd = match opt {
                Opt::Ipip => Fwd::Tunnel,
                Opt::Gatewaying => Fwd::Route,
                Opt::Masq => Fwd::Masq,
                _ => Fwd::FullNat,
            };
        }
        Opt::Weight => {
            st.set_option(C_WEIGHT)?;
            st.weight = string_to_number(a, 0, 65535)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| ParseError::fail("illegal weight specified"))?;
        }
        Opt::UThreshold | Opt::LThreshold => {
            let upper = opt == Opt::UThreshold;
            st.set_option(if upper { C_UTHRESHOLD } else { C_LTHRESHOLD })?;
            let v = string_to_number(a, 0, i64::from(i32::MAX))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    ParseError::fail(if upper {
                        "illegal u_threshold specified"
                    } else {
                        "illegal l_threshold specified"
                    })
                })?;
            if upper {
                st.u_threshold = v;
            } else {
                st.l_threshold = v;
            }
        }
        Opt::Connection => {
            st.set_option(C_CONNECTION)?;
            st.list.target = ListTarget::Connections;
        }
        Opt::Numeric => {
            st.set_option(C_NUMERIC)?;
            st.list.numeric = true;
        }
        Opt::McastInterface => {
            st.set_option(C_MCAST)?;
            st.mcast_ifn = truncate(a, NAME_MAX);
        }
        Opt::Syncid => {
            st.set_option(C_SYNCID)?;
            st.syncid = string_to_number(a, 0, 255)
                .and_then(|n| u8::try_from(n).ok())
                .ok_or_else(|| ParseError::fail("illegal syncid specified"))?;
        }
        Opt::Timeout => st.set_option(C_TIMEOUT)?,
        Opt::Daemon => st.set_option(C_DAEMON)?,
        Opt::Stats => {
            st.set_option(C_STATS)?;
            st.list.stats = true;
        }
        Opt::Rate => {
            st.set_option(C_RATE)?;
            st.list.rate = true;
        }
        Opt::Thresholds => {
            st.set_option(C_THRESHOLDS)?;
            st.list.thresholds = true;
        }
        Opt::PersistentConn => {
            st.set_option(C_PERSISTENTCONN)?;
            st.list.persistent_conn = true;
        }
        Opt::NoSort => {
            st.set_option(C_NOSORT)?;
            st.list.nosort = true;
        }
        Opt::Sort => {}
        Opt::Exact => {
            st.set_option(C_EXACT)?;
            st.list.exact = true;
        }
        Opt::Ipv6 => {
            if st.fwmark != 0 {
                st.svc_af = AddrFamily::Inet6;
                st.netmask = 128;
            } else {
                return Err(ParseError::fail("-6 used before -f\n"));
            }
        }
        Opt::Ops => {
            st.set_option(C_ONEPACKET)?;
            st.one_packet = true;
        }
        Opt::Pe => {
            st.set_option(C_PE)?;
            st.pe_name = Some(truncate(a, PENAME_MAX));
        }
        Opt::SchedFlags => {
            st.set_option(C_SCHED_FLAGS)?;
            st.sched_flags_arg = Some(truncate(a, 127));
        }
        Opt::McastGroup => {
            st.set_option(C_MCAST_GROUP)?;
            if a.contains(':') {
                match a.parse::<Ipv6Addr>() {
                    Ok(g) if g.is_multicast() => st.mcast_group = Some(IpAddr::V6(g)),
                    _ => {
                        return Err(ParseError::fail(format!("invalid IPv6 mcast-group `{a}'")));
                    }
                }
            } else {
                match a.parse::<Ipv4Addr>() {
                    Ok(g) if g.is_multicast() => st.mcast_group = Some(IpAddr::V4(g)),
                    _ => {
                        return Err(ParseError::fail(format!("invalid IPv4 mcast-group `{a}'")));
                    }
                }
            }
        }
        Opt::McastPort => {
            st.set_option(C_MCAST_PORT)?;
            st.mcast_port = Some(
                string_to_number(a, 1, 65535)
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| ParseError::fail("illegal mcast-port specified"))?,
            );
        }
        Opt::McastTtl => {
            st.set_option(C_MCAST_TTL)?;
            st.mcast_ttl = Some(
                string_to_number(a, 1, 255)
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| ParseError::fail("illegal mcast-ttl specified"))?,
            );
        }
        Opt::SyncMaxlen => {
            st.set_option(C_SYNC_MAXLEN)?;
            st.sync_maxlen = Some(
                string_to_number(a, 1, 65535 - 20 - 8)
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| ParseError::fail("illegal sync-maxlen specified"))?,
            );
        }
        Opt::TunInfo => {
            st.set_option(C_TUN_INFO)?;
            st.list.tun_info = true;
        }
        Opt::TunType => {
            st.set_option(C_TUN_TYPE)?;
            st.tun_type = match a {
                "ipip" => TunnelType::Ipip,
                "gue" => TunnelType::Gue,
                "gre" => TunnelType::Gre,
                "geneve" => TunnelType::Geneve,
                _ => return Err(ParseError::fail("illegal tunnel type specified")),
            };
        }
        Opt::TunPort => {
            st.set_option(C_TUN_PORT)?;
            st.tun_port = string_to_number(a, 1, 65535)
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| ParseError::fail("illegal tunnel port specified"))?;
        }
        Opt::TunNocsum => st.set_option(C_TUN_NOCSUM)?,
        Opt::TunCsum => {
            st.set_option(C_TUN_CSUM)?;
            st.tun_flags |= 1;
        }
        Opt::TunRemcsum => {
            st.set_option(C_TUN_REMCSUM)?;
            st.tun_flags |= 2;
        }
        Opt::MhTableSize => {
            st.set_option(C_MH_TABLE_SIZE)?;
            let n = string_to_number(a, 2, MH_TABLE_MAX)
                .filter(|&n| is_prime(n))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| ParseError::fail("illegal mh-table-size specified"))?;
            st.mh_table_size = Some(n);
        }
        Opt::ProxyProtocol => {
            st.set_option(C_PROXY_PROTOCOL)?;
            st.proxy_protocol = Some(match a {
                "v1" | "1" => ProxyProtocol::V1,
                "v2" | "2" => ProxyProtocol::V2,
                _ => {
                    return Err(ParseError::fail(format!(
                        "illegal proxy-protocol `{a}' specified (v1 or v2)"
                    )));
                }
            });
        }
        Opt::MaxConns => {
            st.set_option(C_MAX_CONNS)?;
            let n = string_to_number(a, 0, i64::from(i32::MAX))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| ParseError::fail("illegal max-conns specified"))?;
            st.max_conns = Some(n);
        }
        Opt::Laddr => {
            st.set_option(C_LADDR)?;
            st.laddr = Some(
                LocalAddrRange::parse(a)
                    .map_err(|_| ParseError::fail("illegal local address specified"))?,
            );
        }
        Opt::QuicLb => {
            // Repeatable: one per live config (key rotation).
            st.options |= 1u64 << C_QUIC_LB;
            match arg {
                Some(spec) => st.quic_lb.push(
                    QuicLbConfig::parse_spec(spec)
                        .map_err(|e| ParseError::fail(format!("illegal quic-lb: {e}")))?,
                ),
                None => st.quic_lb_flag = true,
            }
        }
        Opt::QuicSid => {
            st.set_option(C_QUIC_SID)?;
            st.quic_sid = Some(
                a.parse()
                    .map_err(|e| ParseError::fail(format!("illegal quic-sid: {e}")))?,
            );
        }
        // A command, -h or -v after the first option.
        _ => return Err(ParseError::fail(format!("invalid option `{}'", bad()))),
    }
    Ok(())
}

/// `generic_opt_check`: the legality table, scanned in column order.
fn generic_opt_check(cmd: Cmd, options: u64) -> Result<(), ParseError> {
    let row = cmd.legality();
    let mut last: Option<usize> = None;
    for (j, &rule) in row.iter().enumerate() {
        let given = options & (1u64 << j) != 0;
        if !given {
            if rule == b'+' {
                return Err(ParseError::fail(format!(
                    "You need to supply the '{}' option for the '{}' command",
                    OPT_NAMES[j],
                    cmd.name()
                )));
            }
            continue;
        }
        if rule == b'x' {
            return Err(ParseError::fail(format!(
                "Illegal '{}' option with the '{}' command",
                OPT_NAMES[j],
                cmd.name()
            )));
        }
        if rule == b'1' {
            match last {
                None => last = Some(j),
                Some(l) => {
                    return Err(ParseError::fail(format!(
                        "The option '{}' conflicts with the '{}' option in the '{}' command",
                        OPT_NAMES[j],
                        OPT_NAMES[l],
                        cmd.name()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// `tunnel_opt_check`.
fn tunnel_opt_check(t: TunnelType, options: u64) -> Result<(), ParseError> {
    let row = tunnel_legality(t);
    let mut last: Option<usize> = None;
    for (j, &rule) in row.iter().enumerate() {
        let k = TUN_OPTS[j];
        let given = options & (1u64 << k) != 0;
        if !given {
            if rule == b'+' {
                return Err(ParseError::fail(format!(
                    "You need to supply the '{}' option for the '{}' tunnel type",
                    OPT_NAMES[k],
                    t.name()
                )));
            }
            continue;
        }
        if rule == b'x' {
            return Err(ParseError::fail(format!(
                "Illegal '{}' option with the '{}' tunnel type",
                OPT_NAMES[k],
                t.name()
            )));
        }
        if rule == b'1' {
            match last {
                None => last = Some(k),
                Some(l) => {
                    return Err(ParseError::fail(format!(
                        "The option '{}' conflicts with the '{}' option in the '{}' tunnel type",
                        OPT_NAMES[k],
                        OPT_NAMES[l],
                        t.name()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The per-command checks of `process_options` and the final request.
fn finish(
    prog: &str,
    mut st: State,
    cmd: Cmd,
    sched_flags: u32,
    reading_stdin: bool,
) -> Result<Invocation, ParseError> {
    let key = st.service_key();
    let command = match cmd {
        Cmd::Add | Cmd::Edit => {
            if st.fwmark == 0 && st.svc_port == 0 && st.persistent.is_none() {
                return Err(ParseError::fail(
                    "Zero port specified for non-persistent service",
                ));
            }
            if st.one_packet && st.fwmark == 0 && st.svc_proto != 17 {
                return Err(ParseError::fail(
                    "One-Packet Scheduling is only for UDP virtual services",
                ));
            }
            // An unknown name is for the daemon side to refuse, as the
            // kernel does (ENOENT); the config keeps the default meanwhile.
            let (scheduler, sched_name) = if st.sched.is_empty() {
                (Scheduler::Wlc, None)
            } else {
                match st.sched.parse::<Scheduler>() {
                    Ok(s) => (s, None),
                    Err(_) => (Scheduler::Wlc, Some(st.sched.clone())),
                }
            };
            let mut config = ServiceConfig::new(st.svc_af).scheduler(scheduler);
            config.flags = SchedFlags(sched_flags);
            config.persistent = st.persistent;
            config.netmask = match st.svc_af {
                AddrFamily::Inet => PersistMask::V4(Ipv4Addr::from(st.netmask)),
                AddrFamily::Inet6 => PersistMask::V6(u8::try_from(st.netmask).unwrap_or(128)),
            };
            config.pe = match st.pe_name.as_deref() {
                Some("sip") => Some(PersistenceEngine::Sip),
                _ => None,
            };
            config.one_packet = st.one_packet;
            if let Some(m) = st.mh_table_size {
                config.mh_table_size = m;
            }
            config.proxy_protocol = st.proxy_protocol;
            config.max_conns = st.max_conns.unwrap_or(0);
            if st.quic_lb_flag {
                return Err(ParseError::fail(
                    "--quic-lb needs a SPEC with -A/-E (cr=N,sid=N,nonce=N[,key=HEX32])",
                ));
            }
            config.quic_lb = std::mem::take(&mut st.quic_lb);
            let spec = ServiceSpec {
                key,
                config,
                sched_name,
                pe_name: st.pe_name,
            };
            if cmd == Cmd::Add {
                Command::AddService(spec)
            } else {
                Command::EditService(spec)
            }
        }
        Cmd::Del => Command::DeleteService(key),
        Cmd::Flush => Command::Flush,
        Cmd::Reload => Command::Reload,
        Cmd::RemoveDirector => Command::RemoveDirector,
        Cmd::AddDest | Cmd::EditDest | Cmd::DelDest => {
            if cmd != Cmd::DelDest {
                // DR and tunnel servers must use the service port.
                if st.fwmark == 0 && matches!(st.fwd, Fwd::Tunnel | Fwd::Route) {
                    st.dest_port = st.svc_port;
                }
                if AddrFamily::of(&st.dest_addr) != st.svc_af && st.fwd != Fwd::Tunnel {
                    return Err(ParseError::fail(
                        "Different address family is allowed only for tunneling servers",
                    ));
                }
                let tun_opts = [
                    C_TUN_TYPE,
                    C_TUN_PORT,
                    C_TUN_NOCSUM,
                    C_TUN_CSUM,
                    C_TUN_REMCSUM,
                ];
                if tun_opts.iter().any(|&c| st.has(c)) && st.fwd != Fwd::Tunnel {
                    return Err(ParseError::fail(
                        "Tunnel options conflict with forward method",
                    ));
                }
                tunnel_opt_check(st.tun_type, st.options)?;
            }
            let forward = match st.fwd {
                Fwd::Masq => ForwardMethod::Masq,
                Fwd::Route => ForwardMethod::Route,
                Fwd::FullNat => ForwardMethod::FullNat,
                Fwd::Tunnel => ForwardMethod::Tunnel(Tunnel {
                    kind: st.tun_type,
                    port: st.tun_port,
                    csum: match st.tun_flags {
                        0 => TunnelCsum::NoCsum,
                        1 => TunnelCsum::Csum,
                        _ => TunnelCsum::RemCsum,
                    },
                }),
            };
            let mut dest = DestConfig::new(st.dest_addr, st.dest_port)
                .weight(st.weight)
                .forward(forward)
                .thresholds(st.u_threshold, st.l_threshold);
            dest.proxy_protocol = st.proxy_protocol;
            dest.quic_server_id = st.quic_sid;
            let spec = DestSpec { service: key, dest };
            match cmd {
                Cmd::AddDest => Command::AddServer(spec),
                Cmd::EditDest => Command::EditServer(spec),
                _ => Command::DeleteServer(spec),
            }
        }
        Cmd::List => {
            let o = st.options;
            let bit = |c: usize| o & (1u64 << c) != 0;
            if ((bit(C_CONNECTION) || bit(C_TIMEOUT) || bit(C_DAEMON))
                && (bit(C_STATS) || bit(C_RATE) || bit(C_THRESHOLDS)))
                || ((bit(C_TIMEOUT) || bit(C_DAEMON)) && bit(C_PERSISTENTCONN))
            {
                return Err(ParseError::fail("options conflicts in the list command"));
            }
            if !st.quic_lb.is_empty() {
                return Err(ParseError::fail("--quic-lb takes no SPEC with -L"));
            }
            let mut list = st.list;
            list.quic_lb = bit(C_QUIC_LB);
            list.target = if bit(C_CONNECTION) {
                ListTarget::Connections
            } else if bit(C_SERVICE) {
                ListTarget::Service(ServiceKeySnap::from(&key))
            } else if bit(C_TIMEOUT) {
                ListTarget::Timeout
            } else if bit(C_DAEMON) {
                ListTarget::Daemon
            } else {
                ListTarget::All
            };
            Command::List(list)
        }
        Cmd::Timeout => Command::SetTimeouts(st.timeouts),
        Cmd::StartDaemon | Cmd::StopDaemon => {
            let start = cmd == Cmd::StartDaemon;
            if start && st.mcast_ifn.is_empty() {
                "eth0".clone_into(&mut st.mcast_ifn);
            }
            let d = DaemonConfig {
                state: st.daemon_state,
                mcast_ifn: st.mcast_ifn,
                syncid: st.syncid,
                sync_maxlen: st.sync_maxlen,
                mcast_group: st.mcast_group,
                mcast_port: st.mcast_port,
                mcast_ttl: st.mcast_ttl,
            };
            if start {
                Command::StartDaemon(d)
            } else {
                Command::StopDaemon(d)
            }
        }
        Cmd::Restore => {
            if reading_stdin {
                return Err(ParseError::try_help(prog));
            }
            Command::Restore
        }
        Cmd::Save => Command::Save {
            numeric: st.list.numeric,
        },
        Cmd::Zero => Command::Zero(if st.has(C_SERVICE) { Some(key) } else { None }),
        Cmd::AddLaddr | Cmd::DelLaddr => {
            let Some(laddr) = st.laddr else {
                return Err(ParseError::fail("illegal local address specified"));
            };
            if laddr.af() != key.af() {
                return Err(ParseError::fail(
                    "local address and virtual service are of different families",
                ));
            }
            let spec = LaddrSpec {
                service: key,
                laddr,
            };
            if cmd == Cmd::AddLaddr {
                Command::AddLaddr(spec)
            } else {
                Command::DelLaddr(spec)
            }
        }
        Cmd::GetLaddr => Command::GetLaddr(st.has(C_SERVICE).then_some(key)),
    };
    Ok(Invocation { command })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legality_rows_match_ipvsadm_columns() {
        // Spot checks against commands_v_options in ipvsadm.c.
        assert_eq!(&Cmd::List.legality()[..3], b" 11");
        assert_eq!(Cmd::List.legality()[C_TIMEOUT], b'1');
        assert_eq!(Cmd::List.legality()[C_DAEMON], b'1');
        assert_eq!(Cmd::List.legality()[C_TUN_INFO], b' ');
        assert_eq!(Cmd::List.legality()[C_ONEPACKET], b'x');
        assert_eq!(Cmd::Add.legality()[C_SCHED_FLAGS], b' ');
        assert_eq!(Cmd::Add.legality()[C_MCAST_GROUP], b'x');
        assert_eq!(Cmd::Add.legality()[C_MH_TABLE_SIZE], b' ');
        assert_eq!(Cmd::AddDest.legality()[C_LTHRESHOLD], b' ');
        assert_eq!(Cmd::AddDest.legality()[C_MCAST], b'x');
        assert_eq!(Cmd::AddDest.legality()[C_TUN_INFO], b'x');
        assert_eq!(Cmd::AddDest.legality()[C_TUN_TYPE], b' ');
        assert_eq!(Cmd::AddDest.legality()[C_TUN_REMCSUM], b' ');
        assert_eq!(Cmd::StartDaemon.legality()[C_MCAST], b' ');
        assert_eq!(Cmd::StartDaemon.legality()[C_SYNCID], b' ');
        assert_eq!(Cmd::StartDaemon.legality()[C_EXACT], b'x');
        assert_eq!(Cmd::StartDaemon.legality()[C_SYNC_MAXLEN], b' ');
        assert_eq!(Cmd::StartDaemon.legality()[C_TUN_INFO], b'x');
        assert_eq!(Cmd::StopDaemon.legality()[C_SYNCID], b' ');
        assert_eq!(Cmd::StopDaemon.legality()[C_MCAST], b'x');
        assert_eq!(Cmd::Save.legality()[C_NUMERIC], b' ');
        assert_eq!(Cmd::Zero.legality()[C_SERVICE], b' ');
        assert_eq!(Cmd::AddLaddr.legality()[C_LADDR], b'+');
        assert_eq!(Cmd::Add.legality()[C_LADDR], b'x');
        assert_eq!(Cmd::Add.legality()[C_QUIC_LB], b' ');
        assert_eq!(Cmd::List.legality()[C_QUIC_LB], b' ');
        assert_eq!(Cmd::AddDest.legality()[C_QUIC_LB], b'x');
        assert_eq!(Cmd::AddDest.legality()[C_QUIC_SID], b' ');
        assert_eq!(Cmd::Edit.legality()[C_QUIC_SID], b'x');
        assert_eq!(C_QUIC_SID + 1, NUM_OPT);
    }

    #[test]
    fn primes() {
        assert!(is_prime(4093));
        assert!(is_prime(2));
        assert!(!is_prime(4095));
        assert!(!is_prime(1));
    }
}
