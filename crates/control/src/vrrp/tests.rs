//! Unit tests of the VRRP planning (configuration to per-instance plans)
//! and of the track files' priority arithmetic.

use std::net::IpAddr;
use std::time::Duration;

use rvs_core::vrrp::State;

use super::*;
use crate::script::ScriptSpec;

fn plan_of(text: &str) -> Result<(Vec<Spec>, Vec<String>), String> {
    let loaded = rvs_config::parse_str("k.conf", text, &rvs_config::LoadOptions::default())
        .map_err(|e| e.to_string())?;
    plan(&loaded.config)
}

/// keepalived's `vrrp_down_timer_adverts`: the default of every
/// instance's `down_timer_adverts`, which an instance's own overrides.
#[test]
fn vrrp_down_timer_adverts_is_the_instances_default() {
    let inst = |extra: &str| {
        format!(
            "global_defs {{\n vrrp_down_timer_adverts 7\n}}\nvrrp_instance VI_1 {{\n state BACKUP\n interface lo\n virtual_router_id 9\n priority 100\n{extra}}}\n"
        )
    };
    let (specs, warnings) = plan_of(&inst("")).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(specs[0].down_adverts, 7);
    let (specs, _) = plan_of(&inst(" down_timer_adverts 4\n")).unwrap();
    assert_eq!(specs[0].down_adverts, 4);
    let (specs, _) = plan_of(&inst("").replace(" vrrp_down_timer_adverts 7\n", "")).unwrap();
    assert_eq!(specs[0].down_adverts, 3);
}

/// keepalived's `no_email_faults`: an instance with `smtp_alert` mails
/// every transition but FAULT; `email_faults` after it undoes it.
#[test]
fn no_email_faults_leaves_fault_transitions_unmailed() {
    let inst = "vrrp_instance VI_1 {\n state BACKUP\n interface lo\n virtual_router_id 9\n priority 100\n smtp_alert\n}\n";
    for (global, faults) in [
        ("", true),
        ("no_email_faults", false),
        ("no_email_faults\n email_faults", true),
    ] {
        let (specs, _) = plan_of(&format!("global_defs {{\n {global}\n}}\n{inst}")).unwrap();
        let s = &specs[0];
        assert_eq!(s.mails(State::Fault), faults, "{global:?}");
        assert!(
            s.mails(State::Master) && s.mails(State::Backup),
            "{global:?}"
        );
    }
    let (specs, _) = plan_of(&inst.replace(" smtp_alert\n", "")).unwrap();
    assert!(!specs[0].mails(State::Master));
}

#[test]
fn track_files_are_resolved_with_keepalived_weights() {
    let (specs, warnings) = plan_of(
        "track_file up {
    file /run/rvs-test/up
    weight 5
    init_file 2 overwrite
}
vrrp_track_file down {
    file /run/rvs-test/down
    weight 3 reverse
}
vrrp_instance VI_1 {
    interface eth0
    virtual_router_id 51
    virtual_ipaddress {
        10.0.0.100
    }
    track_file {
        up
        down
        up weight -2 reverse
        gone
    }
}",
    )
    .unwrap();
    let t = &specs[0].track_files;
    assert_eq!(t.len(), 3);
    assert_eq!(
        (t[0].path.as_str(), t[0].weight, t[0].init),
        ("/run/rvs-test/up", 5, Some((2, true)))
    );
    assert_eq!((t[1].weight, t[1].init), (-3, None));
    assert_eq!(t[2].weight, 2, "the instance's reverse weight");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("track_file gone: no such track_file")),
        "{warnings:?}"
    );
    // keepalived's arithmetic: number × weight added; weight 0 and a
    // non-zero number, or a result below -253, is a fault.
    assert_eq!(with_files(100, [(5, 2), (-3, 1)].into_iter()), Some(107));
    assert_eq!(with_files(100, [(0, 0)].into_iter()), Some(100));
    assert_eq!(with_files(100, [(0, 1)].into_iter()), None);
    assert_eq!(with_files(100, [(254, -1)].into_iter()), None);
    assert_eq!(with_files(100, [(1, -253)].into_iter()), Some(-153));
    assert_eq!(with_files(100, [(200, 200)].into_iter()), Some(353));
}

#[test]
fn an_instance_is_resolved_with_keepalived_defaults() {
    let (specs, warnings) = plan_of(
        "global_defs { vrrp_garp_master_delay 3 }
vrrp_instance VI_1 {
    state MASTER
    interface eth0
    virtual_router_id 51
    priority 150
    nopreempt
    authentication {
        auth_type PASS
        auth_pass 0123456789
    }
    virtual_ipaddress {
        10.0.0.100/24
        10.0.1.1 dev eth1
    }
    virtual_ipaddress_excluded {
        2001:db8::1
    }
    track_interface {
        eth1 weight -20
    }
    notify \"/bin/true x\"
}",
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let s = &specs[0];
    assert_eq!((s.vrid, s.version, s.priority, s.ipv6), (51, 2, 150, false));
    assert!(!s.preempt && s.initial_master);
    // keepalived sends the first 8 characters of the password.
    assert_eq!(s.auth, Some(*b"01234567"));
    assert_eq!(s.vips[1].dev, "eth1");
    assert_eq!(s.vips[0].prefix, Some(24));
    assert_eq!(s.excluded.len(), 1);
    assert_eq!(s.group, "224.0.0.18".parse::<IpAddr>().unwrap());
    assert_eq!(s.garp_master_delay, Duration::from_secs(3));
    assert_eq!(s.garp_repeat, 5);
    assert_eq!(s.garp_refresh, Duration::ZERO);
    assert_eq!(s.garp_refresh_repeat, 1);
    assert!(s.track_primary);
    assert_eq!(s.track_interfaces, [("eth1".to_string(), -20)]);
    assert_eq!(
        s.notify.any.as_ref().map(|n| n.command.as_str()),
        Some("/bin/true x")
    );
}

#[test]
fn ipv6_instances_speak_v3_and_v3_ignores_authentication() {
    let (specs, warnings) = plan_of(
        "vrrp_instance V6 {
    interface eth0
    virtual_router_id 7
    authentication {
        auth_type PASS
        auth_pass x
    }
    virtual_ipaddress { 2001:db8::10/64 }
}",
    )
    .unwrap();
    assert_eq!((specs[0].version, specs[0].ipv6), (3, true));
    assert_eq!(specs[0].auth, None);
    assert!(warnings[0].contains("ignored with VRRPv3"), "{warnings:?}");
}

#[test]
fn sync_group_members_share_the_group_and_its_tracking_as_faults() {
    let (specs, warnings) = plan_of(
        "vrrp_sync_group G {
    group {
        A
        NOPE
    }
    track_interface {
        eth9
    }
}
vrrp_instance A {
    interface eth0
    virtual_router_id 1
    track_interface {
        eth1 weight 10
    }
}
vrrp_instance B {
    interface eth0
    virtual_router_id 2
}",
    )
    .unwrap();
    assert_eq!(specs[0].sync_group.as_deref(), Some("G"));
    assert_eq!(specs[1].sync_group, None);
    assert_eq!(
        specs[0].track_interfaces,
        [("eth1".to_string(), 0), ("eth9".to_string(), 0)]
    );
    assert!(
        warnings.iter().any(|w| w.contains("no vrrp_instance NOPE")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("weights are ignored")),
        "{warnings:?}"
    );
}

#[test]
fn what_cannot_run_is_refused_with_its_location() {
    let e = plan_of("vrrp_instance A {\n virtual_router_id 1\n}").unwrap_err();
    assert!(
        e.starts_with("k.conf:1:1") && e.contains("no `interface`"),
        "{e}"
    );
    let e = plan_of("vrrp_instance A {\n interface eth0\n}").unwrap_err();
    assert!(e.contains("no `virtual_router_id`"), "{e}");
    let head = "vrrp_instance A {\n interface eth0\n virtual_router_id 1\n";
    let e = plan_of(&format!(
        "{head} virtual_ipaddress {{\n 10.0.0.1\n 2001:db8::1\n }}\n}}"
    ))
    .unwrap_err();
    assert!(e.contains("mixes IPv4 and IPv6"), "{e}");
    let e = plan_of(&format!("{head} authentication {{\n auth_type AH\n }}\n}}")).unwrap_err();
    assert!(e.contains("AH"), "{e}");
    let e = plan_of(&format!(
        "{head}}}\nvrrp_instance B {{\n interface eth0\n virtual_router_id 1\n}}"
    ))
    .unwrap_err();
    assert!(e.contains("the same virtual_router_id 1"), "{e}");
}

/// The instance, script, sync group and global keywords no other test
/// exercises, as the running instance takes them: its source address,
/// whether its own interface is tracked, how its gratuitous ARPs repeat
/// (the instance's, else the global defaults), its and its group's
/// notify scripts, the VMAC's transmit interface, a script that starts
/// failed, VRRP mail.
#[test]
fn instance_keywords_reach_the_running_instance() {
    let (specs, warnings) = plan_of(
        "global_defs {\n vrrp_garp_master_repeat 3\n vrrp_garp_master_refresh_repeat 2\n smtp_alert_vrrp\n}\n\
         vrrp_script S {\n script /bin/true\n init_fail\n}\n\
         vrrp_instance VI_1 {\n state BACKUP\n interface lo\n virtual_router_id 9\n priority 100\n\
         mcast_src_ip 127.0.0.2\n dont_track_primary\n nopreempt\n garp_master_delay 2\n garp_master_refresh 10\n garp_master_refresh_repeat 4\n\
         use_vmac\n vmac_xmit_base\n track_script {\n  S\n }\n\
         notify_master /bin/m\n notify_backup /bin/b\n notify_fault /bin/f\n notify_stop /bin/s\n}\n\
         vrrp_instance VI_2 {\n state BACKUP\n interface lo\n virtual_router_id 10\n priority 100\n nopreempt\n preempt\n}\n\
         vrrp_sync_group G {\n group {\n  VI_2\n }\n\
         notify_master /bin/gm\n notify_backup /bin/gb\n notify_fault /bin/gf\n notify_stop /bin/gs\n}\n",
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let (a, b) = (&specs[0], &specs[1]);
    // mcast_src_ip: the advertisements' source.
    assert_eq!(a.src, Some("127.0.0.2".parse().unwrap()));
    assert_eq!(b.src, None);
    // dont_track_primary.
    assert!(!a.track_primary && b.track_primary);
    // nopreempt, and preempt after it.
    assert!(!a.preempt && b.preempt);
    // garp_master_delay.
    assert_eq!(a.garp_master_delay, Duration::from_secs(2));
    // garp_master_refresh(_repeat), else vrrp_garp_master_*_repeat.
    assert_eq!(
        (a.garp_refresh, a.garp_refresh_repeat, a.garp_repeat),
        (Duration::from_secs(10), 4, 3)
    );
    assert_eq!((b.garp_refresh_repeat, b.garp_repeat), (2, 3));
    // use_vmac + vmac_xmit_base.
    assert_eq!(a.vmac.as_deref(), Some("vrrp.9"));
    assert!(a.vmac_xmit_base && !b.vmac_xmit_base);
    // init_fail: the tracked script starts as failed.
    assert!(a.track_scripts[0].init_fail);
    // smtp_alert_vrrp: transitions are mailed without smtp_alert.
    assert!(a.mails(State::Master) && b.mails(State::Backup));
    let cmd = |s: &Option<ScriptSpec>| s.as_ref().map(|s| s.command.clone());
    let scripts = |n: &Notify| [cmd(&n.master), cmd(&n.backup), cmd(&n.fault), cmd(&n.stop)];
    let some = |v: [&str; 4]| v.map(|c| Some(c.to_owned()));
    // The instance's notify_* ...
    assert_eq!(
        scripts(&a.notify),
        some(["/bin/m", "/bin/b", "/bin/f", "/bin/s"])
    );
    // ... and the sync group's, run for its member's group.
    assert_eq!(b.sync_group.as_deref(), Some("G"));
    assert_eq!(
        scripts(&b.group_notify),
        some(["/bin/gm", "/bin/gb", "/bin/gf", "/bin/gs"])
    );
    assert_eq!(scripts(&a.group_notify), [None, None, None, None]);
}
