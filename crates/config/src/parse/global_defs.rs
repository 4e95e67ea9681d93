//! `global_defs { ... }` (keepalived's `global_parser.c`): router id, notification
//! e-mail, notify FIFOs and the LVS sync daemon line.

use super::*;

pub(super) fn global_defs(c: &mut Ctx<'_>, n: &Node, g: &mut GlobalDefs) -> R<()> {
    for k in block(n)? {
        global_def(c, k, g)?;
    }
    Ok(())
}

/// One keyword of `global_defs`, or one of the global keywords keepalived
/// reads at the top level ([`keywords::ROOT_GLOBALS`]).
pub(super) fn global_def(c: &mut Ctx<'_>, k: &Node, g: &mut GlobalDefs) -> R<()> {
    let listed = c.audit(Block::Global, k)?;
    let key = k.key.text.as_str();
    match key {
        "router_id" => g.router_id = Some(string(k, "a router id")?),
        "notification_email" => {
            for e in k.block.as_deref().unwrap_or(&[]) {
                g.notification_email.push(e.key.text.clone());
            }
        }
        "notification_email_from" => {
            g.notification_email_from = Some(string(k, "an e-mail address")?)
        }
        "smtp_server" => {
            let host = string(k, "an SMTP server")?;
            let p = k.args.get(1).map(port).transpose()?;
            g.smtp_server = Some((host, p));
        }
        "smtp_connect_timeout" => {
            g.smtp_connect_timeout = Some(timer(arg(k, 0, "a time in seconds")?)?)
        }
        "smtp_helo_name" => g.smtp_helo_name = Some(string(k, "a HELO name")?),
        "smtp_alert" => g.smtp_alert = Some(flag(k)?),
        "smtp_alert_vrrp" => g.smtp_alert_vrrp = Some(flag(k)?),
        "smtp_alert_checker" => g.smtp_alert_checker = Some(flag(k)?),
        "no_checker_emails" => g.no_checker_emails = flag(k)?,
        "no_email_faults" => g.no_email_faults = flag(k)?,
        "rs_init_notifies" => g.rs_init_notifies = flag(k)?,
        "email_faults" => g.no_email_faults = !flag(k)?,
        "vrrp_down_timer_adverts" => {
            g.vrrp_down_timer_adverts = Some(num(arg(k, 0, "a count")?, "a count", 1, 100)?)
        }
        "net_namespace" => g.net_namespace = Some(string(k, "a network namespace name")?),
        "lvs_timeouts" => {
            let mut t = LvsTimeouts::default();
            let mut i = 0;
            while i < k.args.len() {
                let which = &k.args[i];
                let v: u32 =
                    up_to_u32(k, i + 1, "a timeout in seconds", "a timeout in seconds", 0)?;
                match which.text.as_str() {
                    "tcp" => t.tcp = Some(v),
                    "tcpfin" => t.tcpfin = Some(v),
                    "udp" => t.udp = Some(v),
                    _ => {
                        return err(
                            which,
                            format!("expected `tcp`, `tcpfin` or `udp`, found `{}`", which.text),
                        );
                    }
                }
                i += 2;
            }
            g.lvs_timeouts = Some(t);
        }
        "lvs_sync_daemon" => g.lvs_sync_daemon = Some(sync_daemon(k)?),
        "lvs_flush" => g.lvs_flush = true,
        "lvs_flush_on_stop" => {
            g.lvs_flush_on_stop = Some(matches!(k.args.first(), Some(t) if t.text == "VS"))
        }
        "vrrp_version" => {
            g.vrrp_version = num(arg(k, 0, "a VRRP version")?, "a VRRP version", 2, 3)?
        }
        "vrrp_strict" => g.vrrp_strict = true,
        "vrrp_mcast_group4" => {
            g.vrrp_mcast_group4 = parsed(k, "an IPv4 multicast address")?;
        }
        "vrrp_mcast_group6" => {
            g.vrrp_mcast_group6 = parsed(k, "an IPv6 multicast address")?;
        }
        "vrrp_garp_master_delay" => g.vrrp_garp_master_delay = timer(arg(k, 0, "a delay")?)?,
        "vrrp_garp_master_repeat" => {
            g.vrrp_garp_master_repeat = num(arg(k, 0, "a count")?, "a count", 1, 255)?
        }
        "vrrp_garp_master_refresh" => {
            g.vrrp_garp_master_refresh = timer(arg(k, 0, "a refresh interval")?)?
        }
        "vrrp_garp_master_refresh_repeat" => {
            g.vrrp_garp_master_refresh_repeat = num(arg(k, 0, "a count")?, "a count", 1, 255)?
        }
        "vrrp_skip_check_adv_addr" => g.vrrp_skip_check_adv_addr = flag(k)?,
        "vrrp_check_unicast_src" => g.vrrp_check_unicast_src = true,
        "v3_checksum_as_v2" => g.v3_checksum_as_v2 = true,
        "enable_script_security" => g.enable_script_security = true,
        "script_user" => g.script_user = Some(words(k, 0)),
        "checker_log_all_failures" => g.checker_log_all_failures = flag(k)?,
        "notify_fifo" | "vrrp_notify_fifo" | "lvs_notify_fifo" => {
            let f = fifo_slot(g, key);
            f.path = Some(string(k, "a FIFO path")?);
            f.owner = words_after(k, 1);
            f.loc = Some(loc_of(&k.key));
        }
        "notify_fifo_script" | "vrrp_notify_fifo_script" | "lvs_notify_fifo_script" => {
            let f = fifo_slot(g, key.trim_end_matches("_script"));
            f.script = Some(script(k)?);
            f.loc.get_or_insert_with(|| loc_of(&k.key));
        }
        _ if listed => g.unused.push((
            key.to_owned(),
            k.args.iter().map(|t| t.text.clone()).collect(),
        )),
        _ => c.unknown(k, "global_defs", Block::Global),
    }
    Ok(())
}

/// The FIFO a `*notify_fifo` keyword sets.
fn fifo_slot<'g>(g: &'g mut GlobalDefs, key: &str) -> &'g mut NotifyFifo {
    match key {
        "vrrp_notify_fifo" => &mut g.vrrp_notify_fifo,
        "lvs_notify_fifo" => &mut g.lvs_notify_fifo,
        _ => &mut g.notify_fifo,
    }
}

fn sync_daemon(k: &Node) -> R<LvsSyncDaemon> {
    let mut d = LvsSyncDaemon {
        interface: string(k, "an interface name")?,
        ..Default::default()
    };
    let mut i = 1;
    while i < k.args.len() {
        let a = &k.args[i];
        let val = |what| arg(k, i + 1, what);
        match a.text.as_str() {
            "inst" => d.instance = Some(val("a VRRP instance name")?.text.clone()),
            "id" => d.syncid = Some(num(val("a sync id")?, "a sync id", 0, 255)?),
            "maxlen" => d.maxlen = Some(num(val("a length")?, "a message length", 1, 65507)?),
            "port" => d.port = Some(num(val("a port number")?, "a port number", 1, 65535)?),
            "ttl" => d.ttl = Some(num(val("a TTL")?, "a TTL", 1, 255)?),
            "group" => d.group = Some(ip(val("a multicast group")?)?),
            _ if i == 1 => {
                d.instance = Some(a.text.clone());
                i += 1;
                continue;
            }
            _ => {
                return err(
                    a,
                    format!(
                        "expected `inst`, `id`, `maxlen`, `port`, `ttl` or `group`, found `{}`",
                        a.text
                    ),
                );
            }
        }
        i += 2;
    }
    Ok(d)
}
