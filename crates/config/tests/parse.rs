use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rvs_config::model::*;
use rvs_config::{LoadOptions, MemResolver, WarningKind, load, parse_str};
use rvs_core::model::{
    AddrFamily, ForwardMethod, Protocol, SchedFlags, ServiceKey, Tunnel, TunnelCsum, TunnelType,
};

fn ok(text: &str) -> rvs_config::Loaded {
    match parse_str("t.conf", text, &LoadOptions::default()) {
        Ok(l) => l,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// The keywords named by "not applied" warnings, in order.
fn not_applied(l: &rvs_config::Loaded) -> Vec<String> {
    l.warnings
        .iter()
        .filter(|w| w.kind == WarningKind::NotApplied)
        .filter_map(|w| w.message.split('`').nth(1).map(str::to_owned))
        .collect()
}

fn fail(text: &str) -> rvs_config::ConfigError {
    match parse_str("t.conf", text, &LoadOptions::default()) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

/// The first LVS service `text` (which must load) describes.
fn first_service(text: &str) -> rvs_config::ServiceSpec {
    ok(text).config.lvs_services().unwrap().remove(0)
}

/// Where (line, column) the parse of `text` fails.
/// [`first_service`] of a `text` that loads without a warning.
fn clean_service(text: &str) -> rvs_config::ServiceSpec {
    let l = ok(text);
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    l.config.lvs_services().unwrap().remove(0)
}

fn fail_at(text: &str) -> (u32, u32) {
    let e = fail(text);
    (e.line, e.column)
}

fn fixture(name: &str) -> rvs_config::Loaded {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    load(&p, &LoadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const VS: &str = "virtual_server 10.0.0.1 80 {\n  lb_algo rr\n  lb_kind DR\n  protocol TCP\n  real_server 10.1.0.1 80 {\n  }\n}\n";

#[test]
fn seed_1_loads() {
    let l = fixture("seed_1_full.conf");
    assert_eq!(l.config.virtual_servers.len(), 2);
    assert_eq!(l.config.vrrp_instances[0].virtual_router_id, Some(51));
    let vs = &l.config.virtual_servers[0];
    assert_eq!(vs.persistence_timeout, Some(300));
    assert_eq!(vs.real_servers[2].weight, 3);
    let ck = &vs.real_servers[0].checkers[0];
    assert_eq!(ck.effective.retry, 3); // nb_get_retry alias
    assert_eq!(ck.effective.connect_port, 80);
    // DNS checker: type A, retry default 3, delay_before_retry = delay_loop (10)
    let dns = &l.config.virtual_servers[1].real_servers[0].checkers[0];
    assert_eq!(
        dns.kind,
        CheckerKind::Dns {
            qtype: "A".into(),
            name: "example.com".into()
        }
    );
    assert_eq!(dns.effective.retry, 3);
    assert_eq!(dns.effective.delay_before_retry, Duration::from_secs(10));
    // Mail and script security are carried out: nothing to say.
    assert_eq!(not_applied(&l), Vec::<String>::new(), "{:?}", l.warnings);
}

#[test]
fn seed_2_loads_with_one_line_checker_warnings() {
    let l = fixture("seed_2_ha_primary.conf");
    let vs = &l.config.virtual_servers[0];
    assert_eq!(vs.forward, ForwardMethod::Route);
    // `TCP_CHECK { connect_timeout 3 connect_port 80 }`: keepalived reads one
    // keyword per line, so connect_port is ignored with a warning.
    assert_eq!(l.warnings.len(), 2, "{:?}", l.warnings);
    assert!(l.warnings[0].message.contains("ignoring `connect_port 80`"));
    assert_eq!((l.warnings[0].line, l.warnings[0].column), (22, 39));
    assert_eq!(
        vs.real_servers[0].checkers[0].effective.connect_timeout,
        Duration::from_secs(3)
    );
}

#[test]
fn seed_3_loads_with_expected_warnings() {
    let l = fixture("seed_3_healthcheck.conf");
    let vs = &l.config.virtual_servers[0];
    assert_eq!(vs.sorry_server.as_ref().map(|s| s.port), Some(80));
    assert_eq!(vs.protocol, Some(Protocol::Udp)); // keepalived's default with a warning
    let msgs: Vec<&str> = l.warnings.iter().map(|w| w.message.as_str()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("no protocol set - defaulting to UDP")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("ignoring `status_code 200`")),
        "{msgs:?}"
    );
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    let misc = &vs.real_servers[2].checkers[0];
    match &misc.kind {
        CheckerKind::Misc(m) => {
            assert_eq!(m.path, "/usr/local/bin/check_backend.sh 192.168.100.13");
            assert_eq!(m.timeout, Some(Duration::from_secs(10)));
            assert!(m.dynamic);
        }
        k => panic!("{k:?}"),
    }
    assert_eq!(misc.effective.retry, 0);
    assert!(vs.real_servers[0].effective.inhibit_on_failure);
}

#[test]
fn seed_4_fragment_warns_top_level_real_server() {
    let l = fixture("seed_4_dns_fragment.conf");
    assert_eq!(l.warnings.len(), 1);
    assert_eq!((l.warnings[0].line, l.warnings[0].column), (2, 1));
    assert!(
        l.warnings[0]
            .message
            .contains("unknown keyword `real_server` in the top level; skipped (and its block)")
    );
}

#[test]
fn full_fixture() {
    let l = fixture("full.conf");
    let c = &l.config;
    assert_eq!(not_applied(&l), Vec::<String>::new(), "{:?}", l.warnings);
    assert_eq!(c.global.router_id.as_deref(), Some("LVS_DIRECTOR_1"));
    assert_eq!(c.lvs_timeouts(), Some((900, 120, 300)));
    let sd = c
        .global
        .lvs_sync_daemon
        .as_ref()
        .map(|d| (d.interface.as_str(), d.instance.as_deref(), d.syncid));
    assert_eq!(sd, Some(("eth1", Some("VI_1"), Some(7))));
    let vi = &c.vrrp_instances[0];
    assert_eq!(vi.priority, 150);
    assert!(vi.nopreempt);
    assert_eq!(vi.virtual_ipaddress[0].label.as_deref(), Some("eth0:vip"));
    assert_eq!(vi.virtual_ipaddress[0].prefix, Some(24));
    assert_eq!(vi.track_script[0].weight, Some(-30));
    assert_eq!(
        vi.notify.master.as_ref().map(|s| s.command.as_str()),
        Some("/usr/local/bin/notify.sh master")
    );
    assert_eq!(c.vrrp_scripts[0].weight, -20);
    assert_eq!(c.vrrp_sync_groups[0].members, vec!["VI_1"]);
    let svcs = c.lvs_services().unwrap();
    // 1 + (1 + 3 + 1 fwmark)
    assert_eq!(svcs.len(), 6);
    assert_eq!(svcs[0].quorum, 2);
    assert_eq!(svcs[0].hysteresis, 1);
    assert_eq!(svcs[0].config.persistent, Some(300));
    assert_eq!(svcs[0].sorry_server.map(|d| d.port), Some(80));
    let url = match &c.virtual_servers[0].real_servers[0].checkers[0].kind {
        CheckerKind::Http(h) => h.urls[0].status_codes.clone(),
        k => panic!("{k:?}"),
    };
    assert_eq!(url, vec![200..=299, 301..=301]);
    let keys: Vec<ServiceKey> = svcs[1..].iter().map(|s| s.key).collect();
    assert_eq!(
        keys[2],
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.1.11".parse().unwrap(),
            port: 443
        }
    );
    assert_eq!(
        keys[4],
        ServiceKey::Fwmark {
            mark: 80,
            af: AddrFamily::Inet
        }
    );
    assert_eq!(svcs[1].dests[0].forward, ForwardMethod::Masq);
    assert_eq!(svcs[1].dests[0].port, 8443);
}

#[test]
fn defaults() {
    let l = ok(
        "virtual_server 10.0.0.1 80 {\n real_server 10.1.0.1 {\n  HTTP_GET {\n   url { path / }\n  }\n  TCP_CHECK {\n  }\n }\n}\n",
    );
    let vs = &l.config.virtual_servers[0];
    assert_eq!(vs.scheduler, Some(rvs_core::sched::Scheduler::Wlc));
    assert_eq!(vs.forward, ForwardMethod::Masq);
    assert_eq!(vs.delay_loop, Duration::from_secs(60));
    assert_eq!(vs.quorum, 1);
    assert_eq!(vs.hysteresis, 0);
    let rs = &vs.real_servers[0];
    assert_eq!(rs.weight, 1);
    assert_eq!(rs.port, 80); // NAT real server without port takes the VS port
    let http = &rs.checkers[0].effective;
    assert_eq!(http.connect_timeout, Duration::from_secs(5));
    assert_eq!(http.retry, 1);
    assert_eq!(http.delay_before_retry, Duration::from_secs(3));
    assert_eq!(http.warmup, Duration::from_secs(60));
    let tcp = &rs.checkers[1].effective;
    assert_eq!(tcp.delay_before_retry, Duration::from_secs(1));
    let msgs: Vec<&str> = l.warnings.iter().map(|w| w.message.as_str()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("no scheduler set, setting default 'wlc'"))
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("no forwarding method set, setting default NAT"))
    );
    assert!(msgs.iter().any(|m| m.contains("no protocol set")));
    match &rs.checkers[0].kind {
        CheckerKind::Http(h) => assert_eq!(h.urls[0].status_codes, vec![200..=299]),
        k => panic!("{k:?}"),
    }
}

#[test]
fn inheritance_vs_rs_checker() {
    let l = ok(
        "virtual_server 10.0.0.1 80 {\n protocol TCP\n lb_algo rr\n lb_kind NAT\n delay_loop 10\n connect_timeout 7\n retry 4\n delay_before_retry 2.5\n warmup 0\n alpha\n inhibit_on_failure\n virtualhost vs.example\n real_server 10.1.0.1 80 {\n  retry 6\n  delay_loop 20\n  TCP_CHECK {\n   connect_timeout 1.25\n  }\n  HTTP_GET {\n   retry 9\n   delay_loop 30\n  }\n }\n}\n",
    );
    let rs = &l.config.virtual_servers[0].real_servers[0];
    assert!(rs.effective.alpha && rs.effective.inhibit_on_failure);
    assert_eq!(rs.effective.virtualhost.as_deref(), Some("vs.example"));
    let t = &rs.checkers[0].effective;
    assert_eq!(t.connect_timeout, Duration::from_millis(1250));
    assert_eq!(t.retry, 6);
    assert_eq!(t.delay_loop, Duration::from_secs(20));
    assert_eq!(t.delay_before_retry, Duration::from_millis(2500));
    assert_eq!(t.warmup, Duration::ZERO);
    assert!(t.alpha);
    let h = &rs.checkers[1].effective;
    assert_eq!(h.connect_timeout, Duration::from_secs(7));
    assert_eq!(h.retry, 9);
    assert_eq!(h.delay_loop, Duration::from_secs(30));
}

#[test]
fn scheduler_flags_tunnel_and_persistence() {
    let s = first_service(
        "virtual_server 10.0.0.1 0 {\n protocol UDP\n lvs_sched mh\n mh-port\n mh-fallback\n ops\n mh_table_size 251\n lvs_method TUN type gue port 6080 csum\n persistence_granularity 255.255.255.0\n persistence_engine sip\n real_server 10.1.0.1 {\n }\n}\n",
    );
    assert_eq!(
        s.config.flags,
        SchedFlags::MH_PORT.union(SchedFlags::MH_FALLBACK)
    );
    assert!(s.config.one_packet);
    assert_eq!(s.config.mh_table_size, 251);
    assert_eq!(s.config.persistent, Some(360));
    assert!(s.config.pe.is_some());
    match s.dests[0].forward {
        ForwardMethod::Tunnel(t) => {
            assert_eq!(t.kind, TunnelType::Gue);
            assert_eq!(t.port, 6080);
        }
        f => panic!("{f:?}"),
    }
    assert_eq!(
        fail_at("virtual_server 10.0.0.1 80 {\n mh_table_size 250\n}\n"),
        (2, 16)
    );
}

/// keepalived 2.2's `lvs_method TUN type gre [nocsum|csum]` and rvs's
/// `type geneve`, in a virtual_server and in a real_server; what no
/// tunnel can carry is refused at the method.
#[test]
fn tun_types_gre_and_geneve() {
    let s = first_service(
        "virtual_server 10.0.0.1 80 {\n protocol TCP\n lvs_method TUN type gre csum\n real_server 10.1.0.1 80 {\n }\n real_server 10.1.0.2 80 {\n  lvs_method TUN type geneve\n }\n real_server 10.1.0.3 80 {\n  lvs_method TUN type geneve csum\n }\n real_server 10.1.0.4 80 {\n  lvs_method TUN type gre\n }\n}\n",
    );
    let tun = |kind, csum| {
        ForwardMethod::Tunnel(Tunnel {
            kind,
            port: 0,
            csum,
        })
    };
    let got: Vec<ForwardMethod> = s.dests.iter().map(|d| d.forward).collect();
    assert_eq!(
        got,
        vec![
            tun(TunnelType::Gre, TunnelCsum::Csum),
            tun(TunnelType::Geneve, TunnelCsum::NoCsum),
            tun(TunnelType::Geneve, TunnelCsum::Csum),
            tun(TunnelType::Gre, TunnelCsum::NoCsum),
        ]
    );
    for (method, col) in [
        ("TUN type geneve remcsum", 13),
        ("TUN type gre remcsum", 13),
        ("TUN type geneve port 6081", 13),
        ("TUN type vxlan", 22),
    ] {
        let text = format!(
            "virtual_server 10.0.0.1 80 {{\n protocol TCP\n lvs_method {method}\n real_server 10.1.0.1 80 {{\n }}\n}}\n"
        );
        assert_eq!(fail_at(&text), (3, col), "{method}");
    }
}

#[test]
fn persistence_timeout_without_value_is_360() {
    let l = ok(&VS.replace("protocol TCP", "protocol TCP\n  persistence_timeout"));
    assert_eq!(l.config.virtual_servers[0].persistence_timeout, Some(360));
}

#[test]
fn fwmark_service_and_port_clearing() {
    let l = ok(
        "virtual_server fwmark 5 {\n lb_kind DR\n lb_algo sh\n sh-port\n protocol TCP\n real_server 10.1.0.1 80 {\n }\n}\n",
    );
    let s = &l.config.lvs_services().unwrap()[0];
    assert_eq!(
        s.key,
        ServiceKey::Fwmark {
            mark: 5,
            af: AddrFamily::Inet
        }
    );
    assert_eq!(s.dests[0].port, 0);
    assert_eq!(s.config.flags, SchedFlags::SH_PORT);
    assert!(
        l.warnings
            .iter()
            .any(|w| w.message.contains("protocol specified for fwmark"))
    );
}

#[test]
fn group_range_expansion() {
    let l = ok(
        "virtual_server_group G6 {\n 2001:db8::a-c 80\n}\nvirtual_server_group G {\n 192.168.200.1-3 80\n 10.9.9.8/30 443\n 10.0.0.250-10.0.1.1 8080\n fwmark 7 inet6\n}\nvirtual_server group G {\n protocol TCP\n lb_kind DR\n lb_algo rr\n real_server 10.1.0.1 {\n }\n}\n",
    );
    let keys: Vec<String> = l
        .config
        .lvs_services()
        .unwrap()
        .iter()
        .map(|s| format!("{:?}", s.key))
        .collect();
    assert_eq!(keys.len(), 3 + 4 + 8 + 1);
    let g = &l.config.vs_groups[0];
    match &g.entries[0] {
        VsgEntry::Range { first, last, .. } => {
            assert_eq!(first.to_string(), "2001:db8::a");
            assert_eq!(last.to_string(), "2001:db8::c");
        }
        e => panic!("{e:?}"),
    }
    let svcs = l.config.lvs_services().unwrap();
    assert_eq!(
        svcs[6].dests[0].port, 443,
        "DR real server takes each group entry's port"
    );
}

#[test]
fn fnat_extensions() {
    let l = ok(
        "local_address_group laddr_g1 {\n 192.168.100.5-254\n 10.0.0.9\n}\nvirtual_server 10.0.0.1 80 {\n lb_kind FNAT\n lb_algo rr\n protocol TCP\n laddr_group_name laddr_g1\n syn_proxy\n nat_mask 255.255.255.0\n real_server 10.1.0.1 80 {\n }\n}\n",
    );
    let c = &l.config;
    assert_eq!(c.local_address_groups[0].ranges.len(), 2);
    assert_eq!(
        c.local_address_groups[0].ranges[0].1.to_string(),
        "192.168.100.254"
    );
    let vs = &c.virtual_servers[0];
    assert!(vs.syn_proxy);
    assert_eq!(vs.laddr_group_name.as_deref(), Some("laddr_g1"));
    assert_eq!(vs.nat_mask, Some("255.255.255.0".parse().unwrap()));
    assert_eq!(
        c.lvs_services().unwrap()[0].dests[0].forward,
        ForwardMethod::FullNat
    );
    // Parsed, but rvs carries out neither: each named, located.
    let warned: Vec<(&str, u32)> = l
        .warnings
        .iter()
        .map(|w| (w.message.split('`').nth(1).unwrap_or(""), w.line))
        .collect();
    assert_eq!(
        warned,
        [("syn_proxy", 10), ("nat_mask", 11)],
        "{:?}",
        l.warnings
    );
}

#[test]
fn laddr_group_becomes_the_services_pool() {
    let svc = first_service(
        "local_address_group lg {\n 192.168.100.5-9\n 10.0.0.9\n}\nvirtual_server 10.0.0.1 80 {\n lb_kind FNAT\n protocol TCP\n laddr_group_name lg\n real_server 10.1.0.1 80 {\n }\n}\n",
    );
    let pool: Vec<String> = svc.laddrs.iter().map(|r| r.to_string()).collect();
    assert_eq!(pool, ["192.168.100.5-192.168.100.9", "10.0.0.9"]);
    assert!(first_service(VS).laddrs.is_empty());
    // A pool of the other family, or overlapping entries, is an error at the group.
    for bad in ["2001:db8::1", "10.0.0.2-5\n 10.0.0.4"] {
        let text = format!(
            "local_address_group lg {{\n {bad}\n}}\nvirtual_server 10.0.0.1 80 {{\n lb_kind FNAT\n protocol TCP\n laddr_group_name lg\n real_server 10.1.0.1 80 {{\n }}\n}}\n"
        );
        let e = ok(&text).config.lvs_services().unwrap_err();
        assert_eq!(e.line, 1, "{bad}: {e}");
    }
}

#[test]
fn sanity_quorum_and_hysteresis() {
    let l = ok(
        "virtual_server 10.0.0.1 80 {\n lb_algo rr\n lb_kind NAT\n protocol TCP\n quorum 10\n hysteresis 5\n real_server 10.1.0.1 80 {\n weight 2\n }\n real_server 10.1.0.2 80 {\n weight 1\n }\n}\n",
    );
    let vs = &l.config.virtual_servers[0];
    assert_eq!(vs.quorum, 3);
    assert_eq!(vs.hysteresis, 2);
    assert_eq!(l.warnings.len(), 2, "{:?}", l.warnings);
    assert_eq!((l.warnings[0].line, l.warnings[0].column), (1, 1));
}

#[test]
fn vs_without_real_servers_is_dropped() {
    let l = ok("virtual_server 10.0.0.1 80 {\n protocol TCP\n}\n");
    assert!(l.config.virtual_servers.is_empty());
    assert!(l.warnings[0].message.contains("has no real servers"));
}

#[test]
fn unknown_keyword_warnings() {
    let l = ok(&format!(
        "frobnicate 1\nglobal_defs {{\n  vrrp_garp_interval 1\n  bogus_opt {{\n    x 1\n  }}\n}}\n{VS}"
    ));
    assert_eq!(l.warnings.len(), 3, "{:?}", l.warnings);
    assert_eq!((l.warnings[0].line, l.warnings[0].column), (1, 1));
    assert_eq!(l.warnings[1].kind, WarningKind::NotApplied);
    assert_eq!(
        l.warnings[1].to_string(),
        "t.conf:3:3: warning: `vrrp_garp_interval` is not applied by rvs (rvs sends gratuitous ARP / NA only as garp_master_* say)"
    );
    assert_eq!((l.warnings[2].line, l.warnings[2].column), (4, 3));
    assert!(l.warnings[2].message.contains("(and its block)"));
    assert!(
        l.warnings[2]
            .to_string()
            .starts_with("t.conf:4:3: warning:")
    );
}

#[test]
fn braces_attached_and_shared_lines() {
    let l = ok(
        "virtual_server 10.0.0.1 80\n{\n lb_algo rr\n lb_kind DR\n protocol TCP\n real_server 10.1.0.1 80{\n  TCP_CHECK{\n  }}}\n",
    );
    assert_eq!(
        l.config.virtual_servers[0].real_servers[0].checkers.len(),
        1
    );
}

#[test]
fn comments_and_quotes() {
    let l = ok("global_defs { # comment\n router_id \"a b\\\"c\" ! trailing\n}\n");
    assert_eq!(l.config.global.router_id.as_deref(), Some("a b\"c"));
}

#[test]
fn error_missing_brace() {
    let e = fail("virtual_server 10.0.0.1 80 {\n  lb_algo rr\n");
    assert_eq!((e.line, e.column), (1, 1));
    assert!(e.message.contains("expected `}`"), "{e}");
    assert_eq!(fail_at("global_defs {\n}\n}\n"), (3, 1));
}

#[test]
fn error_bad_number_with_location() {
    let e = fail("virtual_server 10.0.0.1 80x {\n}\n");
    assert_eq!(
        e.to_string(),
        "t.conf:1:25: expected a port number (0-65535), found `80x`"
    );
    assert_eq!(fail_at("vrrp_instance V {\n  priority 300\n}\n"), (2, 12));
}

#[test]
fn error_unknown_scheduler() {
    let e = fail("virtual_server 10.0.0.1 80 {\n    lb_algo fastest\n}\n");
    assert_eq!((e.line, e.column), (2, 13));
    assert!(e.message.contains("found `fastest`"));
}

#[test]
fn error_bad_address() {
    let e = fail("virtual_server 10.0.0.1 80 {\n real_server 10.1.0.300 80 {\n }\n}\n");
    assert_eq!((e.line, e.column), (2, 14));
    assert_eq!(e.message, "expected an IP address, found `10.1.0.300`");
}

#[test]
fn error_unterminated_quote() {
    assert_eq!(fail_at("global_defs {\n  router_id \"abc\n}\n"), (2, 13));
}

#[test]
fn bool_and_timer_values() {
    let l = ok(&VS.replace(
        "protocol TCP",
        "protocol TCP\n  smtp_alert off\n  delay_loop 0.000001",
    ));
    let vs = &l.config.virtual_servers[0];
    assert_eq!(vs.smtp_alert, Some(false));
    assert_eq!(vs.delay_loop, Duration::from_micros(1));
    assert_eq!(
        fail_at(&VS.replace("protocol TCP", "protocol TCP\n  smtp_alert maybe")),
        (5, 14)
    );
}

#[test]
fn conditionals_and_parameters() {
    let text = "$PRI=120\n$VIP=10.0.0.1\n@main global_defs { router_id main }\n@^main global_defs { router_id other }\nvrrp_instance V {\n  priority $PRI\n  virtual_ipaddress {\n    ${VIP}/24\n  }\n}\n";
    let l = parse_str("t.conf", text, &LoadOptions::default()).unwrap();
    assert_eq!(l.config.global.router_id.as_deref(), Some("other"));
    assert_eq!(l.config.vrrp_instances[0].priority, 120);
    assert_eq!(
        l.config.vrrp_instances[0].virtual_ipaddress[0]
            .addr
            .to_string(),
        "10.0.0.1"
    );
    let opts = LoadOptions {
        config_ids: vec!["main".into()],
        ..Default::default()
    };
    let l = parse_str("t.conf", text, &opts).unwrap();
    assert_eq!(l.config.global.router_id.as_deref(), Some("main"));
}

#[test]
fn multiline_parameter_and_seq() {
    let text = "$RS= \\\n  real_server 10.1.0.${N} 80 { \\\n  } \\\n\nvirtual_server 10.0.0.1 80 {\n lb_algo rr\n lb_kind DR\n protocol TCP\n ~SEQ(N, 1, 3) $RS\n}\n";
    let l = ok(text);
    let rss: Vec<String> = l.config.virtual_servers[0]
        .real_servers
        .iter()
        .map(|r| r.addr.to_string())
        .collect();
    assert_eq!(rss, vec!["10.1.0.1", "10.1.0.2", "10.1.0.3"]);
}

#[test]
fn self_referencing_parameter_is_an_error() {
    let e = fail("$A=$A x\nglobal_defs {\n router_id $A\n}\n");
    assert_eq!(e.line, 3);
}

#[test]
fn include_with_glob_relative_and_absolute() {
    let files = MemResolver::new()
        .with("/etc/keepalived/conf.d/10-vs.conf", VS)
        .with(
            "/etc/keepalived/conf.d/20-vs.conf",
            VS.replace("10.0.0.1 80", "10.0.0.2 80"),
        )
        .with("/etc/keepalived/conf.d/README", "garbage {")
        .with(
            "/etc/keepalived/global.conf",
            "global_defs {\n router_id R\n}\n",
        );
    let opts = LoadOptions {
        resolver: Some(Arc::new(files)),
        ..Default::default()
    };
    let text = "include /etc/keepalived/global.conf\ninclude conf.d/*.conf\n";
    let l = parse_str("/etc/keepalived/keepalived.conf", text, &opts).unwrap();
    assert_eq!(l.config.global.router_id.as_deref(), Some("R"));
    assert_eq!(l.config.virtual_servers.len(), 2);
    assert_eq!(
        l.config.virtual_servers[1].loc.file,
        "/etc/keepalived/conf.d/20-vs.conf"
    );
}

#[test]
fn include_not_found_and_loop() {
    let files = MemResolver::new()
        .with("/k/a.conf", "include b.conf\n")
        .with("/k/b.conf", "\n  include a.conf\n");
    let opts = LoadOptions {
        resolver: Some(Arc::new(files)),
        ..Default::default()
    };
    let e = parse_str(
        "/k/main.conf",
        "global_defs {\n}\ninclude missing.conf\n",
        &opts,
    )
    .unwrap_err();
    assert_eq!((e.file.as_str(), e.line, e.column), ("/k/main.conf", 3, 9));
    assert!(e.message.contains("cannot include"), "{e}");
    let e = parse_str("/k/main.conf", "include a.conf\n", &opts).unwrap_err();
    assert_eq!((e.file.as_str(), e.line, e.column), ("/k/b.conf", 2, 11));
    assert_eq!(
        e.message,
        "include loop: /k/a.conf -> /k/b.conf -> /k/a.conf"
    );
    let e = parse_str("t.conf", "include x.conf\n", &LoadOptions::default()).unwrap_err();
    assert_eq!(e.line, 1);
}

#[test]
fn vrrp_instance_keywords() {
    let l = ok(
        "vrrp_instance V6 {\n state BACKUP\n interface eth0\n virtual_router_id 9\n advert_int 0.5\n preempt_delay 30\n version 3\n use_vmac vrrp9\n accept\n garp_master_delay 2\n garp_master_repeat 3\n unicast_peer {\n  2001:db8::2 min_ttl 1 max_ttl 255\n }\n track_interface {\n  eth1 weight -10\n }\n virtual_ipaddress_excluded {\n  2001:db8::100/64\n }\n lvs_sync_daemon_interface eth1\n authentication {\n  auth_type AH\n  auth_pass x\n }\n}\n",
    );
    let v = &l.config.vrrp_instances[0];
    assert_eq!(v.state, Some(VrrpState::Backup));
    assert_eq!(v.advert_int, Duration::from_millis(500));
    assert_eq!(v.preempt_delay, Some(Duration::from_secs(30)));
    assert_eq!(v.use_vmac, Some(Some("vrrp9".into())));
    assert_eq!(v.unicast_peer[0].max_ttl, Some(255));
    assert_eq!(v.track_interface[0].weight, Some(-10));
    assert!(v.authentication.as_ref().unwrap().ah);
    assert_eq!(v.lvs_sync_daemon_interface.as_deref(), Some("eth1"));
    assert_eq!(l.warnings.len(), 1); // deprecated alias
}

#[test]
fn global_defs_keywords() {
    let l = ok(
        "global_defs {\n vrrp_version 3\n vrrp_strict\n vrrp_mcast_group4 224.0.0.19\n vrrp_mcast_group6 ff02::13\n vrrp_garp_master_delay 1\n vrrp_garp_master_refresh 60\n v3_checksum_as_v2\n lvs_flush\n lvs_flush_on_stop VS\n lvs_sync_daemon eth2 id 3 maxlen 1400 port 8848 ttl 2 group 224.0.0.81\n smtp_connect_timeout 30\n nftables_ipvs\n}\n",
    );
    let g = &l.config.global;
    assert_eq!(g.vrrp_version, 3);
    assert!(g.vrrp_strict && g.v3_checksum_as_v2 && g.lvs_flush);
    assert_eq!(g.lvs_flush_on_stop, Some(true));
    assert_eq!(g.vrrp_mcast_group4.to_string(), "224.0.0.19");
    let d = g.lvs_sync_daemon.as_ref().unwrap();
    assert_eq!(
        (d.instance.as_deref(), d.syncid, d.maxlen, d.port, d.ttl),
        (None, Some(3), Some(1400), Some(8848), Some(2))
    );
    assert_eq!(g.unused[0].0, "nftables_ipvs");
    assert_eq!(not_applied(&l), ["nftables_ipvs"], "{:?}", l.warnings);
    assert_eq!(ok("").config.global.vrrp_version, 2);
}

#[test]
fn checker_types() {
    let l = ok(
        "virtual_server 10.0.0.1 443 {\n lb_algo rr\n lb_kind DR\n protocol TCP\n real_server 10.1.0.1 443 {\n  SSL_GET {\n   enable_sni\n   sni_name api.example\n   url {\n    path /x\n    digest 9B3A0C85A887A0E3CF30B19ABE2EADCA\n   }\n  }\n  UDP_CHECK {\n   payload Ab12f 3\n   require_reply 0x1\n  }\n  SMTP_CHECK {\n   helo_name me\n  }\n  PING_CHECK {\n  }\n  FILE_CHECK {\n   track_file f\n   weight -3 reverse\n  }\n  BFD_CHECK {\n   name b1\n  }\n  MISC_CHECK {\n   misc_path /bin/true\n   user nobody\n  }\n }\n}\n",
    );
    let cks = &l.config.virtual_servers[0].real_servers[0].checkers;
    assert_eq!(cks.len(), 7);
    match &cks[0].kind {
        CheckerKind::Ssl(h) => {
            assert!(h.enable_sni);
            assert_eq!(
                h.urls[0].digest.as_deref(),
                Some("9b3a0c85a887a0e3cf30b19abe2eadca")
            );
            assert!(h.urls[0].status_codes.is_empty());
        }
        k => panic!("{k:?}"),
    }
    match &cks[1].kind {
        CheckerKind::Udp(u) => {
            assert_eq!(u.payload.as_deref(), Some(&[0x0a, 0xb1, 0x2f, 0x03][..]));
            assert_eq!(u.require_reply, Some(Some(vec![Some(0x00), None])));
        }
        k => panic!("{k:?}"),
    }
    assert_eq!(
        cks[4].kind,
        CheckerKind::File(FileCheck {
            track_file: Some("f".into()),
            dynamic: false,
            weight: Some((-3, true))
        })
    );
    assert_eq!(cks[6].effective.retry, 0);
}

#[test]
fn group_mixing_families_is_an_error() {
    assert_eq!(
        fail_at("virtual_server_group G {\n 10.0.0.1 80\n 2001:db8::1 80\n}\n"),
        (3, 2)
    );
}

#[test]
fn rvs_proxy_keywords() {
    let s = clean_service(
        "virtual_server 10.0.0.1 80 {\n  lb_algo rr\n  lb_kind NAT\n  protocol TCP\n  proxy_protocol v2\n  max_conns 500\n  real_server 10.1.0.1 80 {\n    proxy_protocol v1\n  }\n  real_server 10.1.0.2 80 {\n  }\n}\n",
    );
    assert_eq!(
        s.config.proxy_protocol,
        Some(rvs_core::model::ProxyProtocol::V2)
    );
    assert_eq!(s.config.max_conns, 500);
    assert_eq!(
        s.dests[0].proxy_protocol,
        Some(rvs_core::model::ProxyProtocol::V1)
    );
    assert_eq!(s.dests[1].proxy_protocol, None);
    let e = fail("virtual_server 10.0.0.1 80 {\n  proxy_protocol v9\n}\n");
    assert_eq!((e.line, e.column), (2, 18));
    assert!(e.message.contains("expected v1 or v2, found `v9`"), "{e}");
}

/// One file, two directors: `@high`/`@low` lines give each its priority
/// (keepalived's `-i`), and `$NAME` definitions under a condition follow it.
#[test]
fn config_ids_give_two_directors_two_priorities() {
    let text = "@high $ADVERT=1\n@low $ADVERT=2\nvrrp_instance VI_1 {\n  state BACKUP\n  interface eth0\n  virtual_router_id 51\n@high  priority 150\n@low   priority 50\n  advert_int $ADVERT\n  unicast_peer {\n    @^high 192.0.2.1\n    @^low 192.0.2.2\n  }\n}\n";
    let load = |id: &str| {
        let opts = LoadOptions {
            config_ids: vec![id.into()],
            ..Default::default()
        };
        let l = parse_str("ha.conf", text, &opts).unwrap();
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        l.config.vrrp_instances[0].clone()
    };
    let (high, low) = (load("high"), load("low"));
    assert_eq!((high.priority, low.priority), (150, 50));
    assert_eq!(high.advert_int, Duration::from_secs(1));
    assert_eq!(low.advert_int, Duration::from_secs(2));
    assert_eq!(high.unicast_peer.len(), 1);
    assert_eq!(high.unicast_peer[0].addr.to_string(), "192.0.2.2");
    assert_eq!(low.unicast_peer[0].addr.to_string(), "192.0.2.1");
}

/// keepalived's pre-defined definitions: `${_INSTANCE}` is the config id,
/// `${_HASH}` and `${_BANG}` are `#` and `!` that do not start a comment.
#[test]
fn predefined_definitions() {
    let text = "global_defs {\n  router_id r_${_INSTANCE}\n}\nvrrp_script S {\n  script \"/bin/echo ${_HASH}1 ${_BANG}2\"\n}\nvrrp_script T {\n  script /bin/x${_HASH}y\n}\n";
    let opts = LoadOptions {
        config_ids: vec!["east".into()],
        ..Default::default()
    };
    let l = parse_str("t.conf", text, &opts).unwrap();
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    assert_eq!(l.config.global.router_id.as_deref(), Some("r_east"));
    assert_eq!(
        l.config.vrrp_scripts[0].script.as_deref(),
        Some("/bin/echo #1 !2")
    );
    assert_eq!(l.config.vrrp_scripts[1].script.as_deref(), Some("/bin/x#y"));
}

/// `${_RANDOM [MIN [MAX]]}`: a number in [MIN, MAX] (default 0-32767),
/// the same for the same seed, reseeded by `random_seed N` from its line
/// on; malformed arguments leave the text as it is.
#[test]
fn random_definitions() {
    let script = |seed: u64, body: &str| {
        let text = format!("vrrp_script S {{\n  script \"{body}\"\n}}\n");
        let opts = LoadOptions {
            random_seed: seed,
            ..Default::default()
        };
        parse_str("t.conf", &text, &opts)
            .unwrap()
            .config
            .vrrp_scripts[0]
            .script
            .clone()
            .unwrap()
    };
    let words = |s: String| -> Vec<u64> {
        s.split_whitespace()
            .map(|w| w.parse().unwrap_or_else(|_| panic!("a number: {w} in {s}")))
            .collect()
    };
    let body = "$_RANDOM ${_RANDOM} ${_RANDOM 5} ${_RANDOM 10 12}";
    let a = words(script(1, body));
    assert_eq!(a.len(), 4);
    assert!(a[0] <= 32767 && a[1] <= 32767);
    assert!((5..=32767).contains(&a[2]) && (10..=12).contains(&a[3]));
    assert_eq!(a, words(script(1, body)), "the same seed, the same numbers");
    let many: std::collections::BTreeSet<u64> = (0..64)
        .map(|seed| words(script(seed, "${_RANDOM 0 1000000}"))[0])
        .collect();
    assert!(many.len() > 32, "seeds give different numbers: {many:?}");
    let all = words(script(7, &["${_RANDOM 3 4}"; 40].join(" ")));
    assert!(all.iter().all(|v| (3..=4).contains(v)) && all.contains(&3) && all.contains(&4));
    assert_eq!(
        script(1, "${_RANDOM 9 2} ${_RANDOM x}"),
        "${_RANDOM 9 2} ${_RANDOM x}"
    );
    // `random_seed` in global_defs: what follows it is the same whatever
    // rvsd's own seed.
    let seeded = |seed: u64| {
        let text =
            "global_defs {\n  random_seed 42\n}\nvrrp_script S {\n  script \"${_RANDOM}\"\n}\n";
        let opts = LoadOptions {
            random_seed: seed,
            ..Default::default()
        };
        let l = parse_str("t.conf", text, &opts).unwrap();
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        l.config.vrrp_scripts[0].script.clone().unwrap()
    };
    assert_eq!(seeded(1), seeded(2));
}

/// rvs's QUIC-LB keywords: repeatable `quic_lb { }` blocks in a
/// virtual_server, `quic_server_id` in real_server; mistakes are located.
#[test]
fn rvs_quic_lb_keywords() {
    let s = clean_service(
        "virtual_server 10.0.0.1 443 {\n  lb_algo rr\n  lb_kind NAT\n  protocol UDP\n  quic_lb {\n    rotation 0\n    server_id_len 3\n    nonce_len 6\n  }\n  quic_lb {\n    rotation 1\n    server_id_len 3\n    nonce_len 13\n    key 8f95f09245765f80256934e50c66207f\n  }\n  real_server 10.1.0.1 4433 {\n    quic_server_id 0a0001\n  }\n  real_server 10.1.0.2 4433 {\n  }\n}\n",
    );
    assert_eq!(
        s.config.quic_lb,
        vec![
            rvs_core::model::QuicLbConfig::parse_spec("cr=0,sid=3,nonce=6").unwrap(),
            rvs_core::model::QuicLbConfig::parse_spec(
                "cr=1,sid=3,nonce=13,key=8f95f09245765f80256934e50c66207f"
            )
            .unwrap(),
        ]
    );
    assert_eq!(
        s.dests[0].quic_server_id.map(|x| x.to_string()),
        Some("0a0001".to_owned())
    );
    assert_eq!(s.dests[1].quic_server_id, None);
    let vs = |body: &str| format!("virtual_server 10.0.0.1 443 {{\n  protocol UDP\n{body}}}\n");
    for (body, at, text) in [
        (
            "  quic_lb {\n    rotation 7\n    server_id_len 3\n    nonce_len 6\n  }\n",
            (4, 14),
            "rotation",
        ),
        (
            "  quic_lb {\n    rotation 0\n    server_id_len 3\n  }\n",
            (3, 3),
            "needs `rotation`, `server_id_len` and `nonce_len`",
        ),
        (
            "  quic_lb {\n    rotation 0\n    server_id_len 10\n    nonce_len 10\n  }\n",
            (3, 3),
            "exceeds 19",
        ),
        (
            "  quic_lb {\n    rotation 0\n    server_id_len 3\n    nonce_len 6\n    key 00\n  }\n",
            (7, 9),
            "32 hex digits",
        ),
        (
            "  quic_lb {\n    rotation 0\n    server_id_len 3\n    nonce_len 6\n  }\n  quic_lb {\n    rotation 0\n    server_id_len 3\n    nonce_len 8\n  }\n",
            (8, 3),
            "second `quic_lb` with config rotation codepoint 0",
        ),
        (
            "  quic_lb {\n    rotation 0\n    server_id_len 3\n    nonce_len 6\n  }\n  quic_lb {\n    rotation 1\n    server_id_len 4\n    nonce_len 6\n  }\n",
            (8, 3),
            "share one server_id_len",
        ),
        (
            "  real_server 10.1.0.1 4433 {\n    quic_server_id 0g\n  }\n",
            (4, 20),
            "expected a QUIC server ID",
        ),
    ] {
        let e = fail(&vs(body));
        assert_eq!((e.line, e.column), at, "{body}: {e}");
        assert!(e.message.contains(text), "{body}: {e}");
    }
    let l = ok(&vs(
        "  quic_lb {\n    rotation 0\n    server_id_len 3\n    nonce_len 6\n    nonce 6\n  }\n",
    ));
    assert!(
        l.warnings
            .iter()
            .any(|w| w.to_string().contains("unknown keyword `nonce` in quic_lb")),
        "{:?}",
        l.warnings
    );
}

/// What the services handed to the data plane take from `ip_family` (a
/// fwmark service's family when no real server's tells it: a tunnel's
/// does not),
/// `sorry_server_lvs_method` (the sorry server's forwarding method) and
/// `uthreshold` / `lthreshold` (a real server's connection thresholds).
#[test]
fn services_carry_the_family_the_sorry_method_and_thresholds() {
    let l = ok(
        "virtual_server fwmark 7 {\n ip_family inet6\n lb_algo rr\n lb_kind NAT\n\
         sorry_server fd00::9 80\n sorry_server_lvs_method DR\n\
         real_server 10.0.0.3 80 {\n  lvs_method TUN\n }\n}\n\
         virtual_server 10.0.0.1 80 {\n protocol TCP\n\
         real_server 10.0.0.2 80 {\n  uthreshold 100\n  lthreshold 10\n }\n}\n",
    );
    let specs = l.config.lvs_services().unwrap();
    assert_eq!(
        specs[0].key,
        ServiceKey::Fwmark {
            mark: 7,
            af: AddrFamily::Inet6
        }
    );
    let sorry = specs[0].sorry_server.as_ref().expect("the sorry server");
    assert_eq!(
        sorry.forward,
        ForwardMethod::Route,
        "sorry_server_lvs_method DR"
    );
    let d = &specs[1].dests[0];
    assert_eq!((d.u_threshold, d.l_threshold), (100, 10));
    let l = ok(
        "virtual_server fwmark 7 {\n lb_algo rr\n real_server 10.0.0.3 80 {\n  lvs_method TUN\n }\n}\n",
    );
    assert_eq!(
        l.config.lvs_services().unwrap()[0].key,
        ServiceKey::Fwmark {
            mark: 7,
            af: AddrFamily::Inet
        },
        "without ip_family"
    );
}

/// keepalived takes `net_namespace`, `net_namespace_ipvs`,
/// `namespace_with_ipsets`, `instance`, `use_pid_dir`, `child_wait_time`
/// and `linkbeat_use_polling` at the top level of the file (its
/// `install_keyword_root`): rvs reads them there, each as it reads it in
/// `global_defs` (applied, warned, quiet or refused alike).
#[test]
fn root_level_global_keywords_are_read_as_keepalived_reads_them() {
    let l = ok(
        "net_namespace blue\ninstance east\nuse_pid_dir\nchild_wait_time 5\nlinkbeat_use_polling\nglobal_defs {\n  router_id R1\n}\n",
    );
    assert_eq!(l.config.global.net_namespace.as_deref(), Some("blue"));
    assert_eq!(l.config.global.router_id.as_deref(), Some("R1"));
    assert_eq!(not_applied(&l), vec!["instance", "linkbeat_use_polling"]);
    // Located where it stands, like any global keyword.
    assert_eq!(fail_at("\n  net_namespace_ipvs other\n"), (2, 3));
    assert!(
        fail("net_namespace_ipvs other\n")
            .to_string()
            .contains("`net_namespace_ipvs` is refused")
    );
    assert_eq!(fail_at("net_namespace\n"), (1, 1));
}
