//! Unit tests of the planning with strict checks on: what a stricter
//! reading of keepalived.conf refuses.

use std::net::IpAddr;
use std::time::Duration;

use super::*;

fn plan_of(text: &str) -> Result<(Vec<Spec>, Vec<String>), String> {
    let loaded = rvs_config::parse_str("k.conf", text, &rvs_config::LoadOptions::default())
        .map_err(|e| e.to_string())?;
    plan(&loaded.config)
}

const BODY: &str = "    interface eth0\n    virtual_router_id 51\n    advert_int 1\n";

/// keepalived's vrrp_strict (vrrp.c's vrrp_complete_instance): no
/// authentication, preempt_delay or other down_timer_adverts, state
/// MASTER only for the address owner, and neither unicast peers nor an
/// instance without addresses.
#[test]
fn vrrp_strict_applies_keepalived_s_checks_and_refusals() {
    let (specs, warnings) = plan_of(&format!(
            "global_defs {{\n vrrp_strict\n}}\nvrrp_instance VI_1 {{\n{BODY}    state MASTER\n    priority 100\n    preempt_delay 5\n    down_timer_adverts 5\n    authentication {{\n        auth_type PASS\n        auth_pass secret\n    }}\n    virtual_ipaddress {{\n        10.0.0.100/24\n    }}\n}}\n"
        ))
        .unwrap();
    let s = &specs[0];
    assert!(s.strict);
    assert_eq!(s.auth, None);
    assert_eq!(s.preempt_delay, Duration::ZERO);
    assert_eq!(s.down_adverts, 3);
    assert!(!s.initial_master, "MASTER only for priority 255");
    for w in [
        "State MASTER must match being address owner",
        "Strict mode does not support authentication. Ignoring.",
        "preempt_delay is incompatible with strict mode - resetting",
        "down_timer_adverts is incompatible with strict mode - resetting",
        "firewall rules",
    ] {
        assert!(warnings.iter().any(|x| x.contains(w)), "{w}: {warnings:?}");
    }
    // Received adverts must carry exactly our addresses.
    let ours: IpAddr = "10.0.0.100".parse().unwrap();
    let other: IpAddr = "10.0.0.101".parse().unwrap();
    assert!(s.advertises_ours(&[ours]));
    assert!(!s.advertises_ours(&[other]));
    assert!(!s.advertises_ours(&[ours, other]));

    let e = plan_of(&format!(
            "vrrp_instance VI_1 {{\n{BODY}    strict_mode\n    priority 100\n    unicast_peer {{\n        10.0.0.2\n    }}\n    virtual_ipaddress {{\n        10.0.0.100/24\n    }}\n}}\n"
        ))
        .unwrap_err();
    assert!(
        e.contains("Unicast peers are not supported in strict mode"),
        "{e}"
    );
    let e = plan_of(&format!(
        "global_defs {{\n vrrp_strict\n}}\nvrrp_instance VI_1 {{\n{BODY}    priority 100\n}}\n"
    ))
    .unwrap_err();
    assert!(
        e.contains("No VIP specified; at least one is required"),
        "{e}"
    );

    // Without strict mode, none of it.
    let (specs, _) = plan_of(&format!(
            "vrrp_instance VI_1 {{\n{BODY}    priority 100\n    preempt_delay 5\n    unicast_peer {{\n        10.0.0.2\n    }}\n    virtual_ipaddress {{\n        10.0.0.100/24\n    }}\n}}\n"
        ))
        .unwrap();
    assert!(!specs[0].strict);
    assert_eq!(specs[0].preempt_delay, Duration::from_secs(5));
}
