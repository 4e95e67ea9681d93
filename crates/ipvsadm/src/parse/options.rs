//! The option table: every option ipvsadm 1.31 knows (`options_table`),
//! the option bits (`OPT_*`), their names for messages, the commands and
//! which options each command takes (`commands_v_options`), and the legal
//! tunnel options per tunnel type (`tunnel_types_v_options`).

use super::*;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Opt {
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
pub(super) static TABLE: &[OptSpec<Opt>] = &[
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
pub(super) const C_NUMERIC: usize = 0;

pub(super) const C_CONNECTION: usize = 1;

pub(super) const C_SERVICE: usize = 2;

pub(super) const C_SCHEDULER: usize = 3;

pub(super) const C_PERSISTENT: usize = 4;

pub(super) const C_NETMASK: usize = 5;

pub(super) const C_SERVER: usize = 6;

pub(super) const C_FORWARD: usize = 7;

pub(super) const C_WEIGHT: usize = 8;

pub(super) const C_UTHRESHOLD: usize = 9;

pub(super) const C_LTHRESHOLD: usize = 10;

pub(super) const C_MCAST: usize = 11;

pub(super) const C_TIMEOUT: usize = 12;

pub(super) const C_DAEMON: usize = 13;

pub(super) const C_STATS: usize = 14;

pub(super) const C_RATE: usize = 15;

pub(super) const C_THRESHOLDS: usize = 16;

pub(super) const C_PERSISTENTCONN: usize = 17;

pub(super) const C_NOSORT: usize = 18;

pub(super) const C_SYNCID: usize = 19;

pub(super) const C_EXACT: usize = 20;

pub(super) const C_ONEPACKET: usize = 21;

pub(super) const C_PE: usize = 22;

pub(super) const C_SCHED_FLAGS: usize = 23;

pub(super) const C_MCAST_GROUP: usize = 24;

pub(super) const C_MCAST_PORT: usize = 25;

pub(super) const C_MCAST_TTL: usize = 26;

pub(super) const C_SYNC_MAXLEN: usize = 27;

pub(super) const C_TUN_INFO: usize = 28;

pub(super) const C_TUN_TYPE: usize = 29;

pub(super) const C_TUN_PORT: usize = 30;

pub(super) const C_TUN_NOCSUM: usize = 31;

pub(super) const C_TUN_CSUM: usize = 32;

pub(super) const C_TUN_REMCSUM: usize = 33;

pub(super) const C_MH_TABLE_SIZE: usize = 34;

pub(super) const C_PROXY_PROTOCOL: usize = 35;

pub(super) const C_MAX_CONNS: usize = 36;

pub(super) const C_LADDR: usize = 37;

pub(super) const C_QUIC_LB: usize = 38;

pub(super) const C_QUIC_SID: usize = 39;

pub(super) const NUM_OPT: usize = 40;

/// `optnames[]`: what the legality errors call each column.
pub(super) const OPT_NAMES: [&str; NUM_OPT] = [
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
pub(super) enum Cmd {
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
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn legality(self) -> &'static [u8; NUM_OPT] {
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
pub(super) fn tunnel_legality(t: TunnelType) -> &'static [u8; 4] {
    match t {
        TunnelType::Ipip => b"xxxx",
        TunnelType::Gue => b"+111",
        TunnelType::Gre => b"x11x",
        // rvs-only: UDP 6081 always, checksum like GRE's.
        TunnelType::Geneve => b"x11x",
        // rvs-only: no encapsulation, so no port and no checksum.
        TunnelType::Opt => b"xxxx",
    }
}

pub(super) const TUN_OPTS: [usize; 4] = [C_TUN_PORT, C_TUN_NOCSUM, C_TUN_CSUM, C_TUN_REMCSUM];
