//! After the scan: the option checks ipvsadm makes once every option is
//! read (`generic_opt_check`, `tunnel_opt_check`) and the building of the
//! [`Command`] from the parse state (`process_options`).

use super::*;

/// `generic_opt_check`: the legality table, scanned in column order.
pub(super) fn generic_opt_check(cmd: Cmd, options: u64) -> Result<(), ParseError> {
    let what = format!("'{}' command", cmd.name());
    legality_check(cmd.legality(), |j| j, options, &what)
}

/// `tunnel_opt_check`.
fn tunnel_opt_check(t: TunnelType, options: u64) -> Result<(), ParseError> {
    let what = format!("'{}' tunnel type", t.name());
    legality_check(tunnel_legality(t), |j| TUN_OPTS[j], options, &what)
}

/// The tunnel options of a real server checked as `rvsadm -a/-e` checks
/// them (ipvsadm's `tunnel_opt_check` and its port range), for a caller
/// that has them as values rather than a command line (the REST API):
/// `port` is `--tun-port` if given, `csum` which of `--tun-nocsum`,
/// `--tun-csum`, `--tun-remcsum` was given. The error is rvsadm's text.
pub fn check_tunnel(
    kind: TunnelType,
    port: Option<u16>,
    csum: Option<TunnelCsum>,
) -> Result<(), ParseError> {
    if port == Some(0) {
        return Err(ParseError::fail("illegal tunnel port specified"));
    }
    let bit = |c: usize| 1u64 << c;
    let mut options = port.map_or(0, |_| bit(C_TUN_PORT));
    options |= match csum {
        None => 0,
        Some(TunnelCsum::NoCsum) => bit(C_TUN_NOCSUM),
        Some(TunnelCsum::Csum) => bit(C_TUN_CSUM),
        Some(TunnelCsum::RemCsum) => bit(C_TUN_REMCSUM),
    };
    tunnel_opt_check(kind, options)
}

/// The address family of a real server against its service's, as
/// `rvsadm -a/-e` checks it, for every caller that adds or edits a real
/// server (the command line and the REST API): the core's one rule
/// ([`rvs_core::model::check_family`]: another family only behind an
/// encapsulating tunnel, never `--tun-type opt`), its error as a
/// [`ParseError`] in the same words.
pub fn check_family(
    service: AddrFamily,
    server: IpAddr,
    forward: &ForwardMethod,
) -> Result<(), ParseError> {
    rvs_core::model::check_family(service, server, forward)
        .map_err(|e| ParseError::fail(e.to_string()))
}

/// The scan both checks share: column `j` of `row` is option
/// `option_of(j)`, which must be given (`+`), must not be (`x`), or is one
/// of a set of which at most one may be (`1`); `what` names the command or
/// tunnel type in the messages.
fn legality_check(
    row: &[u8],
    option_of: impl Fn(usize) -> usize,
    options: u64,
    what: &str,
) -> Result<(), ParseError> {
    let mut last: Option<usize> = None;
    for (j, &rule) in row.iter().enumerate() {
        let k = option_of(j);
        let given = options & (1u64 << k) != 0;
        if !given {
            if rule == b'+' {
                return Err(ParseError::fail(format!(
                    "You need to supply the '{}' option for the {what}",
                    OPT_NAMES[k]
                )));
            }
            continue;
        }
        if rule == b'x' {
            return Err(ParseError::fail(format!(
                "Illegal '{}' option with the {what}",
                OPT_NAMES[k]
            )));
        }
        if rule == b'1' {
            match last {
                None => last = Some(k),
                Some(l) => {
                    return Err(ParseError::fail(format!(
                        "The option '{}' conflicts with the '{}' option in the {what}",
                        OPT_NAMES[k], OPT_NAMES[l]
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The per-command checks of `process_options` and the final request.
pub(super) fn finish(
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
            if cmd != Cmd::DelDest {
                // DR and tunnel servers must use the service port; rvs's
                // `--tun-type opt` rewrites the destination like NAT, so
                // its real server keeps its own port (a NodePort's pod).
                let opt = st.fwd == Fwd::Tunnel && st.tun_type == TunnelType::Opt;
                if st.fwmark == 0 && matches!(st.fwd, Fwd::Tunnel | Fwd::Route) && !opt {
                    st.dest_port = st.svc_port;
                }
                check_family(st.svc_af, st.dest_addr, &forward)?;
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
