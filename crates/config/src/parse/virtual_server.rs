//! The LVS blocks of keepalived's `check_parser.c`: `virtual_server`,
//! `virtual_server_group`, `local_address_group` (Alibaba FULLNAT),
//! `real_server`, and their forwarding-method, PROXY-protocol and QUIC-LB
//! sub-keywords.

use super::*;

/// `NAT|DR|TUN [type ipip|gue port N|gre|geneve [nocsum|csum|remcsum]]|FNAT`
/// (keepalived 2.2's form; `geneve`, UDP 6081, is rvs's own).
fn lvs_method(n: &Node) -> R<ForwardMethod> {
    let t = arg(n, 0, "a forwarding method (NAT|DR|TUN|FNAT)")?;
    match t.text.as_str() {
        "NAT" => Ok(ForwardMethod::Masq),
        "DR" => Ok(ForwardMethod::Route),
        "FNAT" | "FULLNAT" => Ok(ForwardMethod::FullNat),
        "TUN" => {
            let mut tun = Tunnel::default();
            let mut i = 1;
            while i < n.args.len() {
                let a = &n.args[i];
                match a.text.as_str() {
                    "type" => {
                        let k = arg(n, i + 1, "a tunnel type (ipip|gue|gre|geneve|opt)")?;
                        tun.kind = match k.text.as_str() {
                            "ipip" => TunnelType::Ipip,
                            "gue" => TunnelType::Gue,
                            "gre" => TunnelType::Gre,
                            "geneve" => TunnelType::Geneve,
                            "opt" => TunnelType::Opt,
                            _ => {
                                return err(
                                    k,
                                    format!(
                                        "expected a tunnel type (ipip|gue|gre|geneve|opt), found `{}`",
                                        k.text
                                    ),
                                );
                            }
                        };
                        i += 2;
                    }
                    "port" => {
                        tun.port = num(arg(n, i + 1, "a port number")?, "a port number", 1, 65535)?;
                        i += 2;
                    }
                    "nocsum" => {
                        tun.csum = TunnelCsum::NoCsum;
                        i += 1;
                    }
                    "csum" => {
                        tun.csum = TunnelCsum::Csum;
                        i += 1;
                    }
                    "remcsum" => {
                        tun.csum = TunnelCsum::RemCsum;
                        i += 1;
                    }
                    _ => {
                        return err(
                            a,
                            format!(
                                "expected `type`, `port`, `nocsum`, `csum` or `remcsum`, found `{}`",
                                a.text
                            ),
                        );
                    }
                }
            }
            if tun.kind == TunnelType::Gue && tun.port == 0 {
                return err(t, "expected `port N` for a GUE tunnel, found none");
            }
            if matches!(tun.kind, TunnelType::Gre | TunnelType::Geneve)
                && tun.csum == TunnelCsum::RemCsum
            {
                return err(
                    t,
                    format!(
                        "expected `nocsum` or `csum` for a {} tunnel, found `remcsum`",
                        tun.kind.name()
                    ),
                );
            }
            if tun.kind == TunnelType::Geneve && tun.port != 0 {
                return err(
                    t,
                    "expected no `port` for a geneve tunnel (it uses UDP 6081), found one",
                );
            }
            Ok(ForwardMethod::Tunnel(tun))
        }
        _ => err(
            t,
            format!(
                "expected a forwarding method (NAT|DR|TUN|FNAT), found `{}`",
                t.text
            ),
        ),
    }
}

pub(super) fn vsg(c: &mut Ctx<'_>, n: &Node) -> R<VirtualServerGroup> {
    let name = string(n, "a group name")?;
    let mut entries = Vec::new();
    for k in block(n)? {
        if k.key.text == "fwmark" {
            let mark = up_to_u32(k, 0, "a firewall mark", "a firewall mark", 1)?;
            let fam = k.args.get(1).map(family).transpose()?;
            c.max_args(k, 2);
            entries.push(VsgEntry::Fwmark {
                mark,
                family: fam,
                loc: loc_of(&k.key),
            });
        } else {
            let (first, last) = addr_range(&k.key)?;
            let p = k.args.first().map(port).transpose()?.unwrap_or(0);
            c.max_args(k, 1);
            if let Some(VsgEntry::Range { first: f0, .. }) =
                entries.iter().find(|e| matches!(e, VsgEntry::Range { .. }))
                && AddrFamily::of(f0) != AddrFamily::of(&first)
            {
                return err(
                    &k.key,
                    format!(
                        "expected an address of the same family as the group's first address, found `{}`",
                        k.key.text
                    ),
                );
            }
            entries.push(VsgEntry::Range {
                first,
                last,
                port: p,
                loc: loc_of(&k.key),
            });
        }
    }
    if entries.is_empty() {
        c.warn(
            &n.key,
            format!("virtual_server_group `{name}` has no entries"),
        );
    }
    Ok(VirtualServerGroup {
        name,
        entries,
        loc: loc_of(&n.key),
    })
}

pub(super) fn laddr_group(c: &mut Ctx<'_>, n: &Node) -> R<LocalAddressGroup> {
    let name = string(n, "a group name")?;
    let mut ranges = Vec::new();
    for k in block(n)? {
        ranges.push(addr_range(&k.key)?);
        c.max_args(k, 0);
    }
    Ok(LocalAddressGroup {
        name,
        ranges,
        loc: loc_of(&n.key),
    })
}

pub(super) fn virtual_server(c: &mut Ctx<'_>, n: &Node) -> R<VirtualServer> {
    let first = arg(n, 0, "an address, `fwmark N` or `group NAME`")?;
    let target = match first.text.as_str() {
        "fwmark" => VsTarget::Fwmark(up_to_u32(n, 1, "a firewall mark", "a firewall mark", 1)?),
        "group" => VsTarget::Group(arg(n, 1, "a group name")?.text.clone()),
        _ => VsTarget::Addr {
            addr: ip(first)?,
            port: n.args.get(1).map(port).transpose()?.unwrap_or(0),
        },
    };
    c.max_args(n, 2);
    let mut vs = VirtualServer {
        target,
        loc: loc_of(&n.key),
        delay_loop: DEFAULT_DELAY_LOOP,
        scheduler: None,
        flags: SchedFlags::default(),
        hashed: false,
        ops: false,
        lvs_method: None,
        forward: ForwardMethod::Masq,
        persistence_engine: None,
        persistence_timeout: None,
        persistence_granularity: None,
        protocol: None,
        ha_suspend: false,
        alpha: false,
        omega: false,
        quorum: 1,
        hysteresis: 0,
        quorum_up: None,
        quorum_down: None,
        ip_family: None,
        virtualhost: None,
        snmp_name: None,
        sorry_server: None,
        connect_timeout: None,
        retry: None,
        delay_before_retry: None,
        warmup: None,
        inhibit_on_failure: false,
        smtp_alert: None,
        laddr_group_name: None,
        syn_proxy: false,
        nat_mask: None,
        mh_table_size: None,
        proxy_protocol: None,
        max_conns: 0,
        quic_lb: Vec::new(),
        real_servers: Vec::new(),
    };
    let mut sorry_inhibit = false;
    let mut sorry_method: Option<ForwardMethod> = None;
    for k in block(n)? {
        let listed = c.audit(Block::VirtualServer, k)?;
        let key = k.key.text.as_str();
        match key {
            "delay_loop" => vs.delay_loop = timer(arg(k, 0, "a time in seconds")?)?,
            "lvs_sched" | "lb_algo" => {
                let t = arg(k, 0, "a scheduler name")?;
                match t.text.parse::<Scheduler>() {
                    Ok(s) => vs.scheduler = Some(s),
                    Err(_) => {
                        let names: Vec<&str> = Scheduler::all().map(Scheduler::name).collect();
                        return err(
                            t,
                            format!(
                                "expected a scheduler ({}), found `{}`",
                                names.join("|"),
                                t.text
                            ),
                        );
                    }
                }
            }
            "hashed" => vs.hashed = true,
            "ops" => vs.ops = true,
            "flag-1" | "sh-fallback" | "mh-fallback" => {
                vs.flags = vs.flags.union(SchedFlags::FLAG1)
            }
            "flag-2" | "sh-port" | "mh-port" => vs.flags = vs.flags.union(SchedFlags::FLAG2),
            "flag-3" => vs.flags = vs.flags.union(SchedFlags::FLAG3),
            "lvs_method" | "lb_kind" => vs.lvs_method = Some(lvs_method(k)?),
            "persistence_engine" => {
                let t = arg(k, 0, "a persistence engine")?;
                if t.text != "sip" {
                    return expected(t, "a persistence engine (sip)");
                }
                vs.persistence_engine = Some(t.text.clone());
            }
            "persistence_timeout" => {
                vs.persistence_timeout = Some(match k.args.first() {
                    None => rvs_core::model::DEFAULT_PERSISTENCE_TIMEOUT,
                    Some(t) => num(
                        t,
                        "a persistence timeout in seconds",
                        1,
                        u64::from(rvs_core::model::MAX_PERSISTENCE_TIMEOUT),
                    )?,
                })
            }
            "persistence_granularity" => {
                let t = arg(k, 0, "a netmask or IPv6 prefix length")?;
                let mask = if t.text.contains('.') {
                    let m: Ipv4Addr = t.text.parse().or_else(|_| expected(t, "an IPv4 netmask"))?;
                    let v = u32::from(m);
                    if v.leading_ones() + v.trailing_zeros() != 32 {
                        return expected(t, "a contiguous IPv4 netmask");
                    }
                    PersistMask::V4(m)
                } else {
                    PersistMask::V6(num(t, "an IPv6 prefix length", 1, 128)?)
                };
                vs.persistence_granularity = Some(mask);
                if vs.persistence_timeout.is_none() {
                    vs.persistence_timeout = Some(rvs_core::model::DEFAULT_PERSISTENCE_TIMEOUT);
                }
            }
            "protocol" => {
                let t = arg(k, 0, "a protocol")?;
                vs.protocol = Some(match t.text.to_ascii_uppercase().as_str() {
                    "TCP" => Protocol::Tcp,
                    "UDP" => Protocol::Udp,
                    "SCTP" => Protocol::Sctp,
                    _ => {
                        return expected(t, "a protocol (TCP|UDP|SCTP)");
                    }
                });
            }
            "ha_suspend" => vs.ha_suspend = true,
            "alpha" => vs.alpha = flag(k)?,
            "omega" => vs.omega = flag(k)?,
            "quorum" => vs.quorum = up_to_u32(k, 0, "a quorum", "a quorum weight", 1)?,
            "hysteresis" => {
                vs.hysteresis = up_to_u32(k, 0, "a hysteresis", "a hysteresis weight", 0)?
            }
            "quorum_up" => vs.quorum_up = Some(script(k)?),
            "quorum_down" => vs.quorum_down = Some(script(k)?),
            "ip_family" => vs.ip_family = Some(family(arg(k, 0, "an address family")?)?),
            "virtualhost" => vs.virtualhost = Some(string(k, "a host name")?),
            "snmp_name" => vs.snmp_name = Some(string(k, "a name")?),
            "sorry_server" => {
                let a = ip(arg(k, 0, "an IP address")?)?;
                let p = k.args.get(1).map(port).transpose()?.unwrap_or(0);
                vs.sorry_server = Some(SorryServer {
                    addr: a,
                    port: p,
                    inhibit: false,
                    lvs_method: None,
                    forward: ForwardMethod::Masq,
                });
            }
            "sorry_server_inhibit" => sorry_inhibit = flag(k)?,
            "sorry_server_lvs_method" => sorry_method = Some(lvs_method(k)?),
            "connect_timeout" => vs.connect_timeout = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "retry" | "nb_get_retry" => vs.retry = Some(retry(k)?),
            "delay_before_retry" => {
                vs.delay_before_retry = Some(timer(arg(k, 0, "a time in seconds")?)?)
            }
            "warmup" => vs.warmup = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "inhibit_on_failure" => vs.inhibit_on_failure = flag(k)?,
            "smtp_alert" => vs.smtp_alert = Some(flag(k)?),
            "laddr_group_name" => {
                vs.laddr_group_name = Some(string(k, "a local address group name")?)
            }
            "syn_proxy" => vs.syn_proxy = flag(k)?,
            "nat_mask" => {
                let t = arg(k, 0, "a netmask")?;
                vs.nat_mask = Some(t.text.parse().or_else(|_| expected(t, "an IPv4 netmask"))?);
            }
            "mh_table_size" => {
                let t = arg(k, 0, "a table size")?;
                let v: u32 = num(t, "a Maglev table size", 1, 1 << 24)?;
                if !is_prime(v) {
                    return err(
                        t,
                        format!("expected a prime Maglev table size, found `{v}`"),
                    );
                }
                vs.mh_table_size = Some(v);
            }
            "proxy_protocol" => vs.proxy_protocol = Some(proxy_protocol(k)?),
            "max_conns" => {
                vs.max_conns = up_to_u32(k, 0, "a connection count", "a connection count", 0)?
            }
            "quic_lb" => {
                let q = quic_lb(c, k)?;
                if vs.quic_lb.iter().any(|p| p.rotation == q.rotation) {
                    return err(
                        &k.key,
                        format!(
                            "a second `quic_lb` with config rotation codepoint {}",
                            q.rotation
                        ),
                    );
                }
                if let Some(p) = vs.quic_lb.first()
                    && p.server_id_len != q.server_id_len
                {
                    return err(
                        &k.key,
                        format!(
                            "`quic_lb` blocks of a virtual server must share one server_id_len ({} and {}): rotation changes the key or nonce length, not the servers' IDs",
                            p.server_id_len, q.server_id_len
                        ),
                    );
                }
                vs.quic_lb.push(q);
            }
            "real_server" => vs.real_servers.push(real_server(c, k)?),
            _ if listed => {}
            _ => c.unknown(k, "virtual_server", Block::VirtualServer),
        }
        if !matches!(
            key,
            "real_server" | "lvs_method" | "lb_kind" | "sorry_server_lvs_method" | "script_user"
        ) {
            let max = match key {
                "sorry_server" | "lvs_sched" | "lb_algo" => 2,
                "quorum_up" | "quorum_down" => 3,
                _ => 1,
            };
            if k.block.is_none() {
                c.max_args(k, max);
            }
        }
    }
    if let Some(s) = &mut vs.sorry_server {
        s.inhibit = sorry_inhibit;
        s.lvs_method = sorry_method;
    }
    Ok(vs)
}

fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while u64::from(d) * u64::from(d) <= u64::from(n) {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

pub(super) fn retry(k: &Node) -> R<u32> {
    up_to_u32(k, 0, "a retry count", "a retry count", 0)
}

/// rvs extension: `proxy_protocol v1|v2`.
fn proxy_protocol(k: &Node) -> R<rvs_core::model::ProxyProtocol> {
    let t = arg(k, 0, "v1 or v2")?;
    match t.text.as_str() {
        "v1" | "1" => Ok(rvs_core::model::ProxyProtocol::V1),
        "v2" | "2" => Ok(rvs_core::model::ProxyProtocol::V2),
        other => err(t, format!("expected v1 or v2, found `{other}`")),
    }
}

/// rvs extension: `quic_lb { rotation N server_id_len N nonce_len N [key
/// HEX32] }`, one QUIC-LB configuration of the virtual server.
fn quic_lb(c: &mut Ctx<'_>, n: &Node) -> R<rvs_core::model::QuicLbConfig> {
    c.max_args(n, 0);
    let (mut rotation, mut sid, mut nonce, mut key) = (None, None, None, None);
    for k in block(n)? {
        let listed = c.audit(Block::QuicLb, k)?;
        match k.key.text.as_str() {
            "rotation" => {
                rotation = Some(num(
                    arg(k, 0, "a config rotation codepoint")?,
                    "a config rotation codepoint (0..=6)",
                    0,
                    6,
                )?)
            }
            "server_id_len" => {
                sid = Some(num(
                    arg(k, 0, "a server ID length")?,
                    "a server ID length in bytes (1..=15)",
                    1,
                    15,
                )?)
            }
            "nonce_len" => {
                nonce = Some(num(
                    arg(k, 0, "a nonce length")?,
                    "a nonce length in bytes (4..=18)",
                    4,
                    18,
                )?)
            }
            "key" => {
                let t = arg(k, 0, "a key")?;
                key = Some(
                    rvs_core::model::QuicLbConfig::parse_key(&t.text).map_or_else(
                        || {
                            err(
                                t,
                                "expected a 16-byte AES-128 key as 32 hex digits".to_owned(),
                            )
                        },
                        Ok,
                    )?,
                );
            }
            _ if listed => {}
            _ => c.unknown(k, "quic_lb", Block::QuicLb),
        }
        c.max_args(k, 1);
    }
    let (Some(rotation), Some(server_id_len), Some(nonce_len)) = (rotation, sid, nonce) else {
        return err(
            &n.key,
            "`quic_lb` needs `rotation`, `server_id_len` and `nonce_len`",
        );
    };
    let q = rvs_core::model::QuicLbConfig {
        rotation,
        server_id_len,
        nonce_len,
        key,
    };
    q.validate()
        .map_or_else(|e| err(&n.key, e.to_string()), |()| Ok(q))
}

fn real_server(c: &mut Ctx<'_>, n: &Node) -> R<RealServer> {
    let addr = ip(arg(n, 0, "an IP address")?)?;
    let p = n.args.get(1).map(port).transpose()?.unwrap_or(0);
    c.max_args(n, 2);
    let mut rs = RealServer {
        addr,
        port: p,
        loc: loc_of(&n.key),
        weight: 1,
        lvs_method: None,
        forward: ForwardMethod::Masq,
        notify_up: None,
        notify_down: None,
        proxy_protocol: None,
        quic_server_id: None,
        uthreshold: 0,
        lthreshold: 0,
        inhibit_on_failure: None,
        alpha: None,
        connect_timeout: None,
        retry: None,
        delay_before_retry: None,
        warmup: None,
        delay_loop: None,
        smtp_alert: None,
        virtualhost: None,
        effective: RealServerEffective::default(),
        checkers: Vec::new(),
    };
    for k in block(n)? {
        let listed = c.audit(Block::RealServer, k)?;
        let key = k.key.text.as_str();
        let mut max = 1;
        match key {
            "weight" => rs.weight = num(arg(k, 0, "a weight")?, "a weight", 0, 65535)?,
            "lvs_method" | "lb_kind" => {
                rs.lvs_method = Some(lvs_method(k)?);
                max = usize::MAX;
            }
            "notify_up" => {
                rs.notify_up = Some(script(k)?);
                max = 3;
            }
            "notify_down" => {
                rs.notify_down = Some(script(k)?);
                max = 3;
            }
            "proxy_protocol" => rs.proxy_protocol = Some(proxy_protocol(k)?),
            "quic_server_id" => {
                let t = arg(k, 0, "a QUIC server ID")?;
                rs.quic_server_id = Some(t.text.parse().or_else(|_| {
                    err(
                        t,
                        format!(
                            "expected a QUIC server ID of 1 to 15 bytes in hex, found `{}`",
                            t.text
                        ),
                    )
                })?);
            }
            "uthreshold" => {
                rs.uthreshold = up_to_u32(k, 0, "a connection count", "a connection count", 0)?
            }
            "lthreshold" => {
                rs.lthreshold = up_to_u32(k, 0, "a connection count", "a connection count", 0)?
            }
            "inhibit_on_failure" => rs.inhibit_on_failure = Some(flag(k)?),
            "alpha" => rs.alpha = Some(flag(k)?),
            "connect_timeout" => rs.connect_timeout = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "retry" | "nb_get_retry" => rs.retry = Some(retry(k)?),
            "delay_before_retry" => {
                rs.delay_before_retry = Some(timer(arg(k, 0, "a time in seconds")?)?)
            }
            "warmup" => rs.warmup = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "delay_loop" => rs.delay_loop = Some(timer(arg(k, 0, "a time in seconds")?)?),
            "smtp_alert" => rs.smtp_alert = Some(flag(k)?),
            "virtualhost" => rs.virtualhost = Some(string(k, "a host name")?),
            _ if listed => {}
            "HTTP_GET" | "SSL_GET" | "TCP_CHECK" | "SMTP_CHECK" | "DNS_CHECK" | "MISC_CHECK"
            | "UDP_CHECK" | "PING_CHECK" | "FILE_CHECK" | "BFD_CHECK" => {
                rs.checkers.extend(checker(c, k)?);
                max = 0;
            }
            _ => {
                c.unknown(k, "real_server", Block::RealServer);
                max = usize::MAX;
            }
        }
        if k.block.is_none() && max != usize::MAX {
            c.max_args(k, max);
        }
    }
    Ok(rs)
}
