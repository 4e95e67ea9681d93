//! VRRP end to end: real rvsd daemons (and a real keepalived) in network
//! namespaces on one bridge, electing a master for a virtual address that
//! moves between them. What is checked is what an operator checks: which
//! host has the address (`ip addr`), how fast it moves, and what the notify
//! script saw.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Launch, Proc, TempDir, within};
use crate::netns::{Bed, Host};

const VIP: &str = "10.0.5.100";
const VIP6: &str = "2001:db8:5::100";

pub(crate) fn rvsd(h: &Host, dir: &Path, name: &str, conf: &str) -> Proc {
    let file = dir.join(format!("{name}.conf"));
    std::fs::write(&file, conf).expect("write conf");
    rvsd_file(h, dir, &file, name, &[])
}

/// rvsd (control plane only, `--log-level info`) in `h`'s namespace with
/// configuration `file`, socket `DIR/NAME.sock` and `extra` arguments; not
/// waited for.
pub(crate) fn rvsd_file(h: &Host, dir: &Path, file: &Path, name: &str, extra: &[&str]) -> Proc {
    let child = Launch::at(&dir.join(format!("{name}.sock")))
        .netns(&h.ns)
        .plane("none")
        .arg("-f")
        .arg(file)
        .log_level("info")
        .args(extra)
        .command()
        .spawn()
        .expect("spawn rvsd");
    Proc(Some(child))
}

pub(crate) fn keepalived(h: &Host, dir: &Path, name: &str, conf: &str) -> Proc {
    let file = dir.join(format!("{name}.conf"));
    std::fs::write(&file, conf).expect("write conf");
    let child = Command::new("ip")
        .args(["netns", "exec", &h.ns, "keepalived"])
        .args(["--dont-fork", "--log-console", "--vrrp", "--use-file"])
        .arg(&file)
        .arg("--pid")
        .arg(dir.join(format!("{name}.pid")))
        .arg("--vrrp_pid")
        .arg(dir.join(format!("{name}.vrrp.pid")))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(dir.join(format!("{name}.log")))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        )
        .spawn()
        .expect("spawn keepalived");
    Proc(Some(child))
}

/// The host has the IPv4 or the IPv6 virtual address (each test uses one).
fn has_vip(h: &Host) -> bool {
    crate::netns::has_addr(h, VIP) || crate::netns::has_addr(h, VIP6)
}

/// `f` stays true for all of `span`.
fn holds(what: &str, span: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < span {
        assert!(f(), "{what}: broke after {:?}", start.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A v2 instance with PASS authentication, or a v3 one (`auth` false).
fn instance(priority: u8, auth: bool, extra: &str) -> String {
    instance_for(&format!("{VIP}/24"), priority, auth, extra)
}

/// Like [`instance`] for the virtual address `vip` (with its prefix).
fn instance_for(vip: &str, priority: u8, auth: bool, extra: &str) -> String {
    let auth = if auth {
        "    authentication {\n        auth_type PASS\n        auth_pass rvs-pass\n    }\n"
    } else {
        ""
    };
    format!(
        "vrrp_instance VI_1 {{
    state BACKUP
    interface eth0
    virtual_router_id 51
    priority {priority}
    advert_int 1
{auth}    virtual_ipaddress {{
        {vip}
    }}
{extra}}}
"
    )
}

fn bed(test: &str) -> Option<(Bed, Host, Host)> {
    let mut bed = Bed::new(test)?;
    let a = bed.host("a", "10.0.5.1/24");
    let b = bed.host("b", "10.0.5.2/24");
    Some((bed, a, b))
}

#[test]
fn vrrp_elects_fails_over_preempts_back_and_resigns_on_stop() {
    let Some((_bed, a, b)) = bed("vrrp_elects_fails_over_preempts_back_and_resigns_on_stop") else {
        return;
    };
    let dir = TempDir::new("vrrp");
    let log = dir.path().join("notify.log");
    let notify = dir.write(
        "notify.sh",
        &format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
    );
    let a_conf = instance(
        150,
        true,
        &format!("    notify \"/bin/sh {}\"\n", notify.display()),
    );
    let b_conf = instance(100, true, "");
    let mut pa = rvsd(&a, dir.path(), "a", &a_conf);
    let _pb = rvsd(&b, dir.path(), "b", &b_conf);

    // Both start as backups; A (150) wins after Master_Down_Interval
    // (3 × 1 s + 106/256 s) and sends the first advertisement.
    within("A holds the VIP", Duration::from_secs(8), || has_vip(&a));
    holds("only A holds the VIP", Duration::from_secs(3), || {
        has_vip(&a) && !has_vip(&b)
    });

    // A dies without a word: B (100) takes over after its
    // Master_Down_Interval (3 × 1 s + 156/256 s) from A's last advert.
    pa.signal("KILL");
    pa.wait_exit("the process");
    // A's address stays configured in its namespace (nobody removed it);
    // take it away as the host's reboot would.
    a.exec(&[
        "ip",
        "addr",
        "flush",
        "dev",
        "eth0",
        "to",
        &format!("{VIP}/32"),
    ]);
    let took = within("B takes the VIP", Duration::from_secs(8), || has_vip(&b));
    assert!(
        took <= Duration::from_millis(4600),
        "B took over after {took:?}"
    );

    // A comes back and preempts B (it hears a lower master, lets its
    // timer run out, then B yields to its advertisement).
    let mut pa = rvsd(&a, dir.path(), "a", &a_conf);
    within("A holds the VIP again", Duration::from_secs(8), || {
        has_vip(&a)
    });
    within("B gives it up", Duration::from_secs(3), || !has_vip(&b));

    // A stops cleanly: it resigns with priority 0, so B takes over after
    // its skew time (~0.6 s), not Master_Down_Interval, and A removes
    // the address itself.
    pa.signal("TERM");
    let took = within(
        "B takes over from a resigning A",
        Duration::from_secs(3),
        || has_vip(&b),
    );
    assert!(took < Duration::from_millis(2500), "took {took:?}");
    pa.wait_exit("the process");
    assert!(!has_vip(&a), "A left its address behind");

    // The notify script saw A's transitions with keepalived's arguments
    // (scripts run asynchronously: the last one may still be writing).
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    within("the STOP notification", Duration::from_secs(3), || {
        read().contains("STOP")
    });
    let seen = read();
    assert!(
        seen.contains("INSTANCE VI_1 MASTER 150"),
        "notify log: {seen}"
    );
    assert!(
        seen.contains("INSTANCE VI_1 BACKUP 150"),
        "notify log: {seen}"
    );
    assert!(
        seen.contains("INSTANCE VI_1 STOP 150"),
        "notify log: {seen}"
    );
}

fn keepalived_available(test: &str) -> bool {
    rvs_testbed::require_tools(test, &["keepalived"])
}

/// rvsd and keepalived in one virtual router, both directions: each must
/// accept the other's advertisements (format, checksum, authentication),
/// or both would claim the address.
fn interop(test: &str, global: &str, auth: bool, vip: &str) {
    let Some((_bed, a, b)) = bed(test) else {
        return;
    };
    if !keepalived_available(test) {
        return;
    }
    let dir = TempDir::new("vrrp-ka");
    let ka_conf = |prio: u8| {
        format!(
            "global_defs {{\n    router_id ka\n{global}}}\n{}",
            instance_for(vip, prio, auth, "")
        )
    };
    let rvs_conf = format!(
        "global_defs {{\n{global}}}\n{}",
        instance_for(vip, 100, auth, "")
    );

    // keepalived (150) is master; rvsd (100) must stay backup.
    let mut ka = keepalived(&a, dir.path(), "ka", &ka_conf(150));
    within("keepalived holds the VIP", Duration::from_secs(8), || {
        has_vip(&a)
    });
    let _rvs = rvsd(&b, dir.path(), "rvs", &rvs_conf);
    holds(
        "rvsd stays backup under keepalived",
        Duration::from_secs(6),
        || has_vip(&a) && !has_vip(&b),
    );

    // keepalived stops (it resigns with priority 0): rvsd takes over.
    ka.signal("TERM");
    within("rvsd takes the VIP", Duration::from_secs(5), || has_vip(&b));
    ka.wait_exit("the process");

    // keepalived back with a lower priority: it must hear rvsd's adverts
    // and stay backup.
    let _ka = keepalived(&a, dir.path(), "ka2", &ka_conf(50));
    holds(
        "keepalived stays backup under rvsd",
        Duration::from_secs(6),
        || has_vip(&b) && !has_vip(&a),
    );
}

#[test]
fn vrrp_v2_interoperates_with_keepalived() {
    interop(
        "vrrp_v2_interoperates_with_keepalived",
        "",
        true,
        &format!("{VIP}/24"),
    );
}

#[test]
fn vrrp_v3_interoperates_with_keepalived() {
    interop(
        "vrrp_v3_interoperates_with_keepalived",
        "    vrrp_version 3\n",
        false,
        &format!("{VIP}/24"),
    );
}

/// keepalived before 2.3 ignores `v3_checksum_as_v2` and keeps the
/// pseudo-header form; rvsd answers in the form its peer uses.
#[test]
fn vrrp_v3_checksum_form_follows_the_peer() {
    interop(
        "vrrp_v3_checksum_form_follows_the_peer",
        "    vrrp_version 3\n    v3_checksum_as_v2\n",
        false,
        &format!("{VIP}/24"),
    );
}

/// IPv6: VRRPv3 from link-local sources to ff02::12, unsolicited NA.
#[test]
fn vrrp_ipv6_interoperates_with_keepalived() {
    interop(
        "vrrp_ipv6_interoperates_with_keepalived",
        "",
        false,
        &format!("{VIP6}/64"),
    );
}

/// Unicast peers instead of multicast, between two rvsd.
#[test]
fn vrrp_unicast_peers_elect_and_fail_over() {
    let Some((_bed, a, b)) = bed("vrrp_unicast_peers_elect_and_fail_over") else {
        return;
    };
    let dir = TempDir::new("vrrp-uni");
    let conf = |prio: u8, me: &str, peer: &str| {
        instance(
            prio,
            true,
            &format!("    unicast_src_ip {me}\n    unicast_peer {{\n        {peer}\n    }}\n"),
        )
    };
    let mut pa = rvsd(&a, dir.path(), "a", &conf(150, "10.0.5.1", "10.0.5.2"));
    let _pb = rvsd(&b, dir.path(), "b", &conf(100, "10.0.5.2", "10.0.5.1"));
    within("A holds the VIP", Duration::from_secs(8), || has_vip(&a));
    holds("only A holds the VIP", Duration::from_secs(3), || {
        has_vip(&a) && !has_vip(&b)
    });
    pa.signal("TERM");
    within("B takes over", Duration::from_secs(3), || has_vip(&b));
    pa.wait_exit("the process");
    assert!(!has_vip(&a));
}

#[test]
fn vrrp_a_failing_track_script_lowers_priority_and_moves_the_address() {
    let Some((_bed, a, b)) =
        bed("vrrp_a_failing_track_script_lowers_priority_and_moves_the_address")
    else {
        return;
    };
    let dir = TempDir::new("vrrp-script");
    let flag = dir.write("healthy", "");
    let script = format!(
        "vrrp_script chk {{\n    script \"/usr/bin/test -e {}\"\n    interval 1\n    weight -60\n    fall 2\n    rise 2\n}}\n",
        flag.display()
    );
    let a_conf = format!(
        "{script}{}",
        instance(150, true, "    track_script {\n        chk\n    }\n")
    );
    let _pa = rvsd(&a, dir.path(), "a", &a_conf);
    let _pb = rvsd(&b, dir.path(), "b", &instance(100, true, ""));
    within("A holds the VIP", Duration::from_secs(8), || has_vip(&a));

    // The script fails twice (fall 2): A advertises 150 − 60 = 90, and B
    // (100) preempts it.
    std::fs::remove_file(&flag).expect("remove flag");
    within(
        "B takes over from the degraded A",
        Duration::from_secs(10),
        || has_vip(&b) && !has_vip(&a),
    );
    // Healthy again (rise 2): A is back to 150 and preempts B.
    dir.write("healthy", "");
    within("A preempts back", Duration::from_secs(10), || {
        has_vip(&a) && !has_vip(&b)
    });
}

fn has_addr(h: &Host, dev: &str, addr: &str) -> bool {
    let out = h.exec(&["ip", "-o", "addr", "show", "dev", dev]);
    String::from_utf8_lossy(&out.stdout).contains(&format!("inet {addr}/"))
}

/// A NAT director's outside and inside addresses move together: when the
/// inside link of the master fails, a `vrrp_sync_group` moves both, not
/// just the inside one.
#[test]
fn vrrp_sync_group_moves_its_members_together() {
    let test = "vrrp_sync_group_moves_its_members_together";
    let Some((mut bed, [a, b])) =
        Bed::with_hosts(test, [("a", "10.0.5.1/24"), ("b", "10.0.5.2/24")])
    else {
        return;
    };
    bed.bridge("br1");
    bed.link(&a.ns, "br1", "eth1", "10.0.6.1/24");
    bed.link(&b.ns, "br1", "eth1", "10.0.6.2/24");
    let dir = TempDir::new("vrrp-sync");
    let log = dir.path().join("group.log");
    let notify = dir.write(
        "notify.sh",
        &format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
    );
    let conf = |prio: u8, group_extra: &str| {
        format!(
            "vrrp_sync_group VG1 {{
    group {{
        VI_EXT
        VI_INT
    }}
{group_extra}}}
vrrp_instance VI_EXT {{
    interface eth0
    virtual_router_id 51
    priority {prio}
    advert_int 1
    virtual_ipaddress {{
        {VIP}/24
    }}
}}
vrrp_instance VI_INT {{
    interface eth1
    virtual_router_id 52
    priority {prio}
    advert_int 1
    virtual_ipaddress {{
        10.0.6.100/24
    }}
}}
"
        )
    };
    let a_notify = format!("    notify \"/bin/sh {}\"\n", notify.display());
    let _pa = rvsd(&a, dir.path(), "a", &conf(150, &a_notify));
    let _pb = rvsd(&b, dir.path(), "b", &conf(100, ""));
    let both = |h: &Host| has_addr(h, "eth0", VIP) && has_addr(h, "eth1", "10.0.6.100");
    let none = |h: &Host| !has_addr(h, "eth0", VIP) && !has_addr(h, "eth1", "10.0.6.100");
    within("A holds both addresses", Duration::from_secs(8), || {
        both(&a) && none(&b)
    });
    // A's inside link fails: VI_INT is faulty, and the group takes VI_EXT
    // down with it; B takes both.
    a.exec(&["ip", "link", "set", "eth1", "down"]);
    within("B holds both addresses", Duration::from_secs(8), || {
        both(&b) && !has_addr(&a, "eth0", VIP)
    });
    holds("B keeps both", Duration::from_secs(2), || both(&b));
    // The link is back: A preempts with both.
    a.exec(&["ip", "link", "set", "eth1", "up"]);
    within("A holds both again", Duration::from_secs(10), || {
        both(&a) && none(&b)
    });
    // The group's notify script ran once per group transition, with
    // keepalived's arguments (scripts run asynchronously: give the last
    // one a moment).
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    within(
        "the last group notification",
        Duration::from_secs(3),
        || read().lines().count() >= 5,
    );
    let seen = read();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(
        lines,
        [
            "GROUP VG1 BACKUP",
            "GROUP VG1 MASTER",
            "GROUP VG1 FAULT",
            "GROUP VG1 BACKUP",
            "GROUP VG1 MASTER"
        ],
        "{seen}"
    );
}

/// A reload that changes a priority is taken in place: the master keeps
/// its address throughout; a backup raised above it takes over.
#[test]
fn vrrp_reload_changes_priorities_without_a_flap() {
    let Some((_bed, a, b)) = bed("vrrp_reload_changes_priorities_without_a_flap") else {
        return;
    };
    let dir = TempDir::new("vrrp-reload");
    let pa = rvsd(&a, dir.path(), "a", &instance(150, true, ""));
    let pb = rvsd(&b, dir.path(), "b", &instance(100, true, ""));
    within("A holds the VIP", Duration::from_secs(8), || has_vip(&a));
    // A 150 → 160: no restart, no resignation.
    std::fs::write(dir.path().join("a.conf"), instance(160, true, "")).expect("write");
    pa.signal("HUP");
    holds(
        "A keeps the VIP across its reload",
        Duration::from_secs(5),
        || has_vip(&a) && !has_vip(&b),
    );
    // B 100 → 200: it preempts A.
    std::fs::write(dir.path().join("b.conf"), instance(200, true, "")).expect("write");
    pb.signal("HUP");
    within("B preempts A", Duration::from_secs(8), || {
        has_vip(&b) && !has_vip(&a)
    });
}

/// `use_vmac`: the master's address lives on a macvlan `vrrp.51` carrying
/// the virtual MAC 00:00:5e:00:01:33, and neighbours learn that MAC; the
/// macvlan goes with the instance.
#[test]
fn vrrp_use_vmac_announces_the_virtual_mac() {
    let test = "vrrp_use_vmac_announces_the_virtual_mac";
    let Some((mut bed, a, b)) = bed(test) else {
        return;
    };
    let c = bed.host("c", "10.0.5.3/24");
    // The observer learns from gratuitous ARP.
    c.exec(&[
        "sh",
        "-c",
        "echo 1 > /proc/sys/net/ipv4/conf/all/arp_accept; echo 1 > /proc/sys/net/ipv4/conf/eth0/arp_accept",
    ]);
    let dir = TempDir::new("vrrp-vmac");
    let mut pa = rvsd(&a, dir.path(), "a", &instance(150, true, "    use_vmac\n"));
    let _pb = rvsd(&b, dir.path(), "b", &instance(100, true, ""));
    let on_vmac = || {
        let out = a.exec(&["ip", "-o", "addr", "show", "dev", "vrrp.51"]);
        String::from_utf8_lossy(&out.stdout).contains(&format!("inet {VIP}/"))
    };
    within("A holds the VIP on vrrp.51", Duration::from_secs(8), || {
        a.exec(&["ip", "-o", "link"])
            .stdout
            .windows(7)
            .any(|w| w == b"vrrp.51")
            && on_vmac()
    });
    let link = String::from_utf8_lossy(&a.exec(&["ip", "-o", "link", "show", "vrrp.51"]).stdout)
        .into_owned();
    assert!(link.contains("00:00:5e:00:01:33"), "{link}");
    assert!(!has_vip(&b));
    within(
        "the observer maps the VIP to the virtual MAC",
        Duration::from_secs(8),
        || {
            let n = c.exec(&["ip", "neigh", "show", VIP]);
            String::from_utf8_lossy(&n.stdout).contains("00:00:5e:00:01:33")
        },
    );
    // A stops: B takes over, and A's macvlan is gone.
    pa.signal("TERM");
    within("B takes over", Duration::from_secs(5), || has_vip(&b));
    pa.wait_exit("the process");
    let links = String::from_utf8_lossy(&a.exec(&["ip", "-o", "link"]).stdout).into_owned();
    assert!(!links.contains("vrrp.51"), "{links}");
}

/// The distinct MACs that answer an ARP request for `ip`, sent from `h`'s
/// eth0 (raw ARP over an AF_PACKET socket; answers collected for 1 s).
fn arp_responders(h: &Host, ip: std::net::Ipv4Addr) -> std::collections::BTreeSet<[u8; 6]> {
    use std::io::Read;
    use std::os::fd::AsFd;
    const ETH_P_ARP: u16 = 0x0806;
    let std::net::IpAddr::V4(src) = h.addr else {
        panic!("an IPv4 probe host");
    };
    let mac = h.mac;
    h.run(move || {
        let ifindex = rvs_sys::iface::ifindex("eth0").expect("eth0");
        let proto = socket2::Protocol::from(i32::from(ETH_P_ARP.to_be()));
        let mut sock =
            socket2::Socket::new(socket2::Domain::PACKET, socket2::Type::RAW, Some(proto))
                .expect("packet socket");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let mut frame = Vec::with_capacity(42);
        frame.extend_from_slice(&[0xff; 6]);
        frame.extend_from_slice(&mac);
        frame.extend_from_slice(&ETH_P_ARP.to_be_bytes());
        // Ethernet, IPv4, 6, 4, request.
        frame.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        frame.extend_from_slice(&mac);
        frame.extend_from_slice(&src.octets());
        frame.extend_from_slice(&[0; 6]);
        frame.extend_from_slice(&ip.octets());
        rvs_sys::sock::send_frame(sock.as_fd(), ifindex, ETH_P_ARP, [0xff; 6], &frame)
            .expect("send the ARP request");
        let mut seen = std::collections::BTreeSet::new();
        let mut buf = [0u8; 1600];
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let Ok(n) = sock.read(&mut buf) else {
                continue;
            };
            let f = &buf[..n];
            let reply = n >= 42 && f[12..14] == ETH_P_ARP.to_be_bytes() && f[20..22] == [0, 2];
            if reply && f[28..32] == ip.octets() {
                let mut m = [0u8; 6];
                m.copy_from_slice(&f[22..28]);
                seen.insert(m);
            }
        }
        seen
    })
}

/// keepalived removes, at start, the addresses of its instances that a
/// dead predecessor left behind; rvsd must too, and one stopped while
/// BACKUP must not leave one: otherwise two hosts answer ARP for the VIP
/// (a split brain). Counted from a third host with a raw ARP request.
#[test]
fn vrrp_no_host_but_the_master_answers_arp_after_kill_restart_and_stop() {
    let test = "vrrp_no_host_but_the_master_answers_arp_after_kill_restart_and_stop";
    let Some((mut bed, a, b)) = bed(test) else {
        return;
    };
    if !keepalived_available(test) {
        return;
    }
    let probe = bed.host("p", "10.0.5.9/24");
    let vip: std::net::Ipv4Addr = VIP.parse().expect("vip");
    let dir = TempDir::new("vrrp-arp");
    let vip32 = format!("{VIP}/32");
    let ka_conf = format!(
        "global_defs {{\n    router_id ka\n}}\n{}",
        instance_for(&vip32, 100, true, "")
    );
    let answers = || arp_responders(&probe, vip);
    let only = |h: &Host| std::collections::BTreeSet::from([h.mac]);

    // rvsd (150) on A is master, keepalived (100) on B backup.
    let mut pa = rvsd(&a, dir.path(), "a", &instance_for(&vip32, 150, true, ""));
    within("rvsd holds the VIP", Duration::from_secs(8), || has_vip(&a));
    let _ka = keepalived(&b, dir.path(), "ka", &ka_conf);
    holds("keepalived stays backup", Duration::from_secs(4), || {
        has_vip(&a) && !has_vip(&b)
    });
    assert_eq!(answers(), only(&a), "only A answers while it is master");

    // SIGKILL: the address stays on A (nobody removed it) while
    // keepalived takes over: two hosts answer until rvsd starts again.
    pa.signal("KILL");
    pa.wait_exit("the process");
    within("keepalived takes over", Duration::from_secs(8), || {
        has_vip(&b)
    });
    assert!(has_vip(&a), "the dead rvsd's address is still there");
    assert_eq!(
        answers(),
        std::collections::BTreeSet::from([a.mac, b.mac]),
        "both answer while the leftover stays"
    );

    // rvsd starts again, now below keepalived (it stays backup): it
    // removes the leftover at once.
    let mut pa = rvsd(&a, dir.path(), "a2", &instance_for(&vip32, 50, true, ""));
    within(
        "the restarted rvsd removes the leftover",
        Duration::from_secs(5),
        || !has_vip(&a),
    );
    holds("B stays master, A backup", Duration::from_secs(3), || {
        has_vip(&b) && !has_vip(&a)
    });
    assert_eq!(
        answers(),
        only(&b),
        "only the master answers after the restart"
    );

    // A leftover appears on the backup (as a predecessor's would); rvsd
    // stopped with SIGTERM while BACKUP takes it away too.
    a.exec(&["ip", "addr", "add", &vip32, "dev", "eth0"]);
    pa.signal("TERM");
    pa.wait_exit("the process");
    assert!(
        !has_vip(&a),
        "rvsd stopped as BACKUP left the address behind"
    );
    assert_eq!(
        answers(),
        only(&b),
        "only the master answers after the stop"
    );
}
