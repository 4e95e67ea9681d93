//! Applying one option to the parse state, in the order given (ipvsadm's
//! `parse_options` switch), with the value parsers it uses: service and
//! real-server addresses, timeouts, firewall marks, scheduler flags.

use super::*;

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
/// or name of `proto`. `None` = "illegal ... address\[:port\] specified".
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
pub(super) fn parse_timeout(arg: Option<&str>, min: i64) -> Result<u32, ParseError> {
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
pub(super) fn parse_sched_flags(sched: &str, arg: &str) -> Result<u32, ParseError> {
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

pub(super) fn is_prime(n: i64) -> bool {
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

pub(super) fn apply_option(
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
                "opt" => TunnelType::Opt,
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
