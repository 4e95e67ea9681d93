//! The VRRP blocks of keepalived's `vrrp_parser.c`: `vrrp_instance`,
//! `vrrp_sync_group`, `vrrp_script`, `track_file`, `track_process`, and the
//! address, route and rule lists (`virtual_ipaddress`, `static_ipaddress`,
//! `static_routes`, `static_rules`, ...).

use super::*;

fn tracked_list(n: &Node) -> R<Vec<Tracked>> {
    let mut out = Vec::new();
    for k in block(n)? {
        let mut t = Tracked {
            name: k.key.text.clone(),
            weight: None,
            reverse: false,
        };
        let mut i = 0;
        while i < k.args.len() {
            match k.args[i].text.as_str() {
                "weight" => {
                    let w = int(arg(k, i + 1, "a weight")?, "a weight", -254, 254)?;
                    t.weight = i32::try_from(w).ok();
                    i += 2;
                }
                "reverse" => {
                    t.reverse = true;
                    i += 1;
                }
                "noreverse" => {
                    t.reverse = false;
                    i += 1;
                }
                _ => {
                    return err(
                        &k.args[i],
                        format!(
                            "expected `weight N` or `reverse`, found `{}`",
                            k.args[i].text
                        ),
                    );
                }
            }
        }
        out.push(t);
    }
    Ok(out)
}

fn notify_kw(k: &Node, notify: &mut Notify) -> R<bool> {
    let slot = match k.key.text.as_str() {
        "notify_master" => &mut notify.master,
        "notify_backup" => &mut notify.backup,
        "notify_fault" => &mut notify.fault,
        "notify_stop" => &mut notify.stop,
        "notify" => &mut notify.any,
        _ => return Ok(false),
    };
    *slot = Some(script(k)?);
    Ok(true)
}

pub(super) fn vrrp_script(c: &mut Ctx<'_>, n: &Node) -> R<VrrpScript> {
    let mut s = VrrpScript {
        name: string(n, "a script name")?,
        script: None,
        interval: Duration::from_secs(1),
        timeout: None,
        weight: 0,
        weight_reverse: false,
        rise: None,
        fall: None,
        user: None,
        init_fail: false,
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        match k.key.text.as_str() {
            "script" => s.script = Some(string(k, "a script")?),
            "interval" => s.interval = timer(arg(k, 0, "an interval")?)?,
            "timeout" => s.timeout = Some(timer(arg(k, 0, "a timeout")?)?),
            "weight" => {
                s.weight =
                    i32::try_from(int(arg(k, 0, "a weight")?, "a weight", -253, 253)?).unwrap_or(0);
                s.weight_reverse = matches!(k.args.get(1), Some(t) if t.text == "reverse");
            }
            "rise" => s.rise = Some(up_to_u32(k, 0, "a count", "a count", 1)?),
            "fall" => s.fall = Some(up_to_u32(k, 0, "a count", "a count", 1)?),
            "user" => s.user = Some(words(k, 0)),
            "init_fail" => s.init_fail = true,
            _ => c.unknown(k, "vrrp_script", Block::VrrpScript),
        }
    }
    Ok(s)
}

pub(super) fn sync_group(c: &mut Ctx<'_>, n: &Node) -> R<VrrpSyncGroup> {
    let mut g = VrrpSyncGroup {
        name: string(n, "a sync group name")?,
        members: Vec::new(),
        track_interface: Vec::new(),
        track_script: Vec::new(),
        notify: Notify::default(),
        smtp_alert: false,
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        if notify_kw(k, &mut g.notify)? {
            continue;
        }
        let listed = c.audit(Block::SyncGroup, k)?;
        match k.key.text.as_str() {
            "group" => {
                for m in block(k)? {
                    g.members.push(m.key.text.clone());
                    for a in &m.args {
                        g.members.push(a.text.clone());
                    }
                }
            }
            "track_interface" => g.track_interface = tracked_list(k)?,
            "track_script" => g.track_script = tracked_list(k)?,
            "smtp_alert" => g.smtp_alert = flag(k)?,
            _ if listed => {}
            _ => c.unknown(k, "vrrp_sync_group", Block::SyncGroup),
        }
    }
    Ok(g)
}

pub(super) fn vips(c: &mut Ctx<'_>, n: &Node) -> R<Vec<VirtualIp>> {
    let mut out = Vec::new();
    for k in block(n)? {
        let (a, prefix) = match k.key.text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (k.key.text.as_str(), None),
        };
        let addr: IpAddr = a.parse().or_else(|_| {
            err(
                &k.key,
                format!("expected an IP address[/prefix], found `{}`", k.key.text),
            )
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => match p.parse::<u8>().ok().filter(|v| *v <= max) {
                Some(v) => Some(v),
                None => {
                    return err(
                        &k.key,
                        format!("expected a prefix length (0-{max}), found `{}`", k.key.text),
                    );
                }
            },
            None => None,
        };
        let mut v = VirtualIp {
            addr,
            prefix,
            brd: None,
            dev: None,
            scope: None,
            label: None,
            extra: Vec::new(),
        };
        let mut i = 0;
        while i < k.args.len() {
            let key = k.args[i].text.as_str();
            let slot = match key {
                "brd" => Some(&mut v.brd),
                "dev" => Some(&mut v.dev),
                "scope" => Some(&mut v.scope),
                "label" => Some(&mut v.label),
                _ => None,
            };
            match slot {
                Some(s) => {
                    *s = Some(arg(k, i + 1, "a value")?.text.clone());
                    i += 2;
                }
                None => {
                    v.extra.push(k.args[i].text.clone());
                    i += 1;
                }
            }
        }
        let _ = &c;
        out.push(v);
    }
    Ok(out)
}

/// A `track_file NAME { }` block.
pub(super) fn track_file(c: &mut Ctx<'_>, n: &Node) -> R<TrackFile> {
    let mut t = TrackFile {
        name: string(n, "a track_file name")?,
        file: None,
        weight: 1,
        reverse: false,
        init_file: None,
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        match k.key.text.as_str() {
            "file" => t.file = Some(string(k, "a file path")?),
            "weight" => {
                t.weight = int(
                    arg(k, 0, "a weight")?,
                    "a weight",
                    -2_147_483_647,
                    2_147_483_647,
                )?;
                match k.args.get(1).map(|a| a.text.as_str()) {
                    Some("reverse") => t.reverse = true,
                    Some("noreverse") | None => {}
                    Some(_) => c.max_args(k, 1),
                }
            }
            "init_file" => {
                let mut value = 0;
                let mut overwrite = false;
                for a in &k.args {
                    if a.text == "overwrite" {
                        overwrite = true;
                    } else {
                        value = int(
                            a,
                            "an initial value",
                            i64::from(i32::MIN),
                            i64::from(i32::MAX),
                        )?;
                    }
                }
                t.init_file = Some((value, overwrite));
            }
            _ => c.unknown(k, "track_file", Block::Top),
        }
    }
    if t.file.is_none() {
        return err(&n.key, format!("track_file {}: no `file`", t.name));
    }
    Ok(t)
}

/// A `vrrp_track_process NAME { }` block.
pub(super) fn track_process(c: &mut Ctx<'_>, n: &Node) -> R<TrackProcess> {
    let mut t = TrackProcess {
        name: string(n, "a vrrp_track_process name")?,
        process: Vec::new(),
        param_match: None,
        weight: 1,
        reverse: false,
        quorum: 1,
        quorum_max: None,
        fork_delay: Duration::ZERO,
        terminate_delay: Duration::ZERO,
        full_command: false,
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        match k.key.text.as_str() {
            "process" => {
                arg(k, 0, "a process name")?;
                t.process = k.args.iter().map(|a| a.text.clone()).collect();
            }
            "param_match" => {
                let a = arg(k, 0, "`initial` or `partial`")?;
                t.param_match = Some(match a.text.as_str() {
                    "initial" => ParamMatch::Initial,
                    "partial" => ParamMatch::Partial,
                    "exact" => ParamMatch::Exact,
                    _ => {
                        return expected(a, "`initial` or `partial`");
                    }
                });
            }
            "weight" => {
                t.weight = int(arg(k, 0, "a weight")?, "a weight", -254, 254)? as i32;
                match k.args.get(1).map(|a| a.text.as_str()) {
                    Some("reverse") => t.reverse = true,
                    Some("noreverse") | None => {}
                    Some(_) => c.max_args(k, 1),
                }
            }
            "quorum" => t.quorum = num(arg(k, 0, "a count")?, "a count", 1, 65_535)?,
            "quorum_max" => t.quorum_max = Some(num(arg(k, 0, "a count")?, "a count", 0, 65_535)?),
            "delay" => {
                let d = timer(arg(k, 0, "a delay")?)?;
                t.fork_delay = d;
                t.terminate_delay = d;
            }
            "fork_delay" => t.fork_delay = timer(arg(k, 0, "a delay")?)?,
            "terminate_delay" => t.terminate_delay = timer(arg(k, 0, "a delay")?)?,
            "full_command" => t.full_command = true,
            _ => c.unknown(k, "vrrp_track_process", Block::Top),
        }
    }
    if t.process.is_empty() {
        return err(
            &n.key,
            format!("vrrp_track_process {}: no `process`", t.name),
        );
    }
    if t.quorum_max.is_some_and(|m| m < t.quorum) {
        return err(
            &n.key,
            format!("vrrp_track_process {}: quorum_max is below quorum", t.name),
        );
    }
    Ok(t)
}

/// A `static_routes` / `virtual_routes` block.
pub(super) fn routes(c: &mut Ctx<'_>, n: &Node) -> R<Vec<IpRoute>> {
    lines(c, n, iproute::route, |r| r.no_track)
}

/// A `static_rules` / `virtual_rules` block.
pub(super) fn rules(c: &mut Ctx<'_>, n: &Node) -> R<Vec<IpRule>> {
    lines(c, n, iproute::rule, |r| r.no_track)
}

/// Each line of the route or rule block `n` read by `read`, with the note
/// that rvs does not track them when any line lacks `no_track`.
fn lines<T>(
    c: &mut Ctx<'_>,
    n: &Node,
    read: fn(&Node, &mut Vec<Warning>) -> R<T>,
    no_track: fn(&T) -> bool,
) -> R<Vec<T>> {
    let out = block(n)?
        .iter()
        .map(|k| read(k, c.w))
        .collect::<R<Vec<_>>>()?;
    if out.iter().any(|r| !no_track(r)) {
        c.w.push(iproute::untracked_note(&n.key.loc, &n.key.text));
    }
    Ok(out)
}

pub(super) fn vrrp_instance(c: &mut Ctx<'_>, n: &Node) -> R<VrrpInstance> {
    let mut v = VrrpInstance {
        name: string(n, "an instance name")?,
        state: None,
        interface: None,
        virtual_router_id: None,
        priority: 100,
        advert_int: Duration::from_secs(1),
        nopreempt: false,
        preempt_delay: None,
        authentication: None,
        virtual_ipaddress: Vec::new(),
        virtual_ipaddress_excluded: Vec::new(),
        unicast_src_ip: None,
        unicast_peer: Vec::new(),
        mcast_src_ip: None,
        track_interface: Vec::new(),
        track_script: Vec::new(),
        notify: Notify::default(),
        version: None,
        use_vmac: None,
        vmac_xmit_base: false,
        accept: None,
        garp_master_delay: None,
        garp_master_repeat: None,
        garp_master_refresh: None,
        garp_master_refresh_repeat: None,
        down_timer_adverts: None,
        lvs_sync_daemon_interface: None,
        smtp_alert: false,
        strict_mode: None,
        dont_track_primary: false,
        track_file: Vec::new(),
        track_process: Vec::new(),
        virtual_routes: Vec::new(),
        virtual_rules: Vec::new(),
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        if notify_kw(k, &mut v.notify)? {
            continue;
        }
        let listed = c.audit(Block::VrrpInstance, k)?;
        let key = k.key.text.as_str();
        match key {
            "state" => {
                let t = arg(k, 0, "MASTER or BACKUP")?;
                v.state = Some(match t.text.as_str() {
                    "MASTER" => VrrpState::Master,
                    "BACKUP" => VrrpState::Backup,
                    _ => return expected(t, "MASTER or BACKUP"),
                });
            }
            "interface" => v.interface = Some(string(k, "an interface name")?),
            "virtual_router_id" => {
                v.virtual_router_id = Some(num(
                    arg(k, 0, "a virtual router id")?,
                    "a virtual router id",
                    1,
                    255,
                )?)
            }
            "priority" => v.priority = num(arg(k, 0, "a priority")?, "a priority", 1, 255)?,
            "advert_int" => {
                let t = arg(k, 0, "an advert interval")?;
                let d = timer(t)?;
                if d.is_zero() || d > Duration::from_secs(255) {
                    return err(
                        t,
                        format!(
                            "expected an advert interval (0.01-255 s), found `{}`",
                            t.text
                        ),
                    );
                }
                v.advert_int = d;
            }
            "nopreempt" => v.nopreempt = true,
            "preempt" => v.nopreempt = false,
            "preempt_delay" => {
                let t = arg(k, 0, "a delay")?;
                let d = timer(t)?;
                if d > Duration::from_secs(1000) {
                    return expected(t, "a preempt delay (0-1000 s)");
                }
                v.preempt_delay = Some(d);
            }
            "authentication" => {
                let mut a = Authentication {
                    ah: false,
                    pass: None,
                };
                for x in block(k)? {
                    match x.key.text.as_str() {
                        "auth_type" => {
                            let t = arg(x, 0, "PASS or AH")?;
                            a.ah = match t.text.as_str() {
                                "PASS" => false,
                                "AH" => true,
                                _ => {
                                    return expected(t, "PASS or AH");
                                }
                            };
                        }
                        "auth_pass" => a.pass = Some(string(x, "a password")?),
                        _ => c.unknown(x, "authentication", Block::VrrpInstance),
                    }
                }
                v.authentication = Some(a);
            }
            "virtual_ipaddress" => v.virtual_ipaddress = vips(c, k)?,
            "virtual_ipaddress_excluded" => v.virtual_ipaddress_excluded = vips(c, k)?,
            "unicast_src_ip" => v.unicast_src_ip = Some(ip(arg(k, 0, "an IP address")?)?),
            "mcast_src_ip" => v.mcast_src_ip = Some(ip(arg(k, 0, "an IP address")?)?),
            "unicast_peer" => {
                for p in block(k)? {
                    let mut peer = UnicastPeer {
                        addr: ip(&p.key)?,
                        min_ttl: None,
                        max_ttl: None,
                    };
                    let mut i = 0;
                    while i < p.args.len() {
                        let val = num(arg(p, i + 1, "a TTL")?, "a TTL", 0, 255)?;
                        match p.args[i].text.as_str() {
                            "min_ttl" => peer.min_ttl = Some(val),
                            "max_ttl" => peer.max_ttl = Some(val),
                            _ => {
                                return err(
                                    &p.args[i],
                                    format!(
                                        "expected `min_ttl` or `max_ttl`, found `{}`",
                                        p.args[i].text
                                    ),
                                );
                            }
                        }
                        i += 2;
                    }
                    v.unicast_peer.push(peer);
                }
            }
            "track_interface" => v.track_interface = tracked_list(k)?,
            "track_script" => v.track_script = tracked_list(k)?,
            "version" => {
                v.version = Some(num(arg(k, 0, "a VRRP version")?, "a VRRP version", 2, 3)?)
            }
            "use_vmac" => v.use_vmac = Some(k.args.first().map(|t| t.text.clone())),
            "vmac_xmit_base" => v.vmac_xmit_base = true,
            "accept" => v.accept = Some(true),
            "no_accept" => v.accept = Some(false),
            "garp_master_delay" => v.garp_master_delay = Some(timer(arg(k, 0, "a delay")?)?),
            "garp_master_repeat" => {
                v.garp_master_repeat = Some(num(arg(k, 0, "a count")?, "a count", 1, 255)?)
            }
            "garp_master_refresh" => {
                v.garp_master_refresh = Some(timer(arg(k, 0, "an interval")?)?)
            }
            "garp_master_refresh_repeat" => {
                v.garp_master_refresh_repeat = Some(num(arg(k, 0, "a count")?, "a count", 1, 255)?)
            }
            "down_timer_adverts" => {
                v.down_timer_adverts = Some(num(arg(k, 0, "a count")?, "a count", 1, 100)?)
            }
            "lvs_sync_daemon_interface" => {
                c.warn(
                    &k.key,
                    "`lvs_sync_daemon_interface` is deprecated; use global_defs `lvs_sync_daemon`",
                );
                v.lvs_sync_daemon_interface = Some(string(k, "an interface name")?);
            }
            "smtp_alert" => v.smtp_alert = flag(k)?,
            "strict_mode" => v.strict_mode = Some(flag(k)?),
            "dont_track_primary" => v.dont_track_primary = true,
            "track_file" => v.track_file = tracked_list(k)?,
            "track_process" => v.track_process = tracked_list(k)?,
            "virtual_routes" => v.virtual_routes.extend(routes(c, k)?),
            "virtual_rules" => v.virtual_rules.extend(rules(c, k)?),
            _ if listed => {}
            _ => c.unknown(k, "vrrp_instance", Block::VrrpInstance),
        }
    }
    let _ = Kind::Word;
    Ok(v)
}
