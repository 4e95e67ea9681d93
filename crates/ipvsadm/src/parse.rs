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

mod apply;
mod check;
mod options;
use apply::{apply_option, parse_sched_flags, parse_timeout};
pub use check::{check_family, check_tunnel};
use check::{finish, generic_opt_check};
use options::{
    C_CONNECTION, C_DAEMON, C_EXACT, C_FORWARD, C_LADDR, C_LTHRESHOLD, C_MAX_CONNS, C_MCAST,
    C_MCAST_GROUP, C_MCAST_PORT, C_MCAST_TTL, C_MH_TABLE_SIZE, C_NETMASK, C_NOSORT, C_NUMERIC,
    C_ONEPACKET, C_PE, C_PERSISTENT, C_PERSISTENTCONN, C_PROXY_PROTOCOL, C_QUIC_LB, C_QUIC_SID,
    C_RATE, C_SCHED_FLAGS, C_SCHEDULER, C_SERVER, C_SERVICE, C_STATS, C_SYNC_MAXLEN, C_SYNCID,
    C_THRESHOLDS, C_TIMEOUT, C_TUN_CSUM, C_TUN_INFO, C_TUN_NOCSUM, C_TUN_PORT, C_TUN_REMCSUM,
    C_TUN_TYPE, C_UTHRESHOLD, C_WEIGHT, Cmd, OPT_NAMES, Opt, TABLE, TUN_OPTS, tunnel_legality,
};

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

#[cfg(test)]
mod tests;
