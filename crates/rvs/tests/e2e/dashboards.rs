//! The Grafana board (`dist/grafana/rvs.json`) and the Prometheus alert
//! rules (`dist/prometheus/rvs-alerts.yml`) against real parts: promtool
//! checks the rules and runs their unit tests (each alert fires on the
//! series that should raise it and not on the others), and every metric a
//! panel or a rule queries is served by a running rvsd — the proxy plane
//! with health checks, and the XDP and sock planes with VRRP, an
//! announcement table, a connection-sync daemon and a FULLNAT pool.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rvs_testbed::{Cgroup, skip_or_fail};

use crate::harness::{Rvsd, TempDir, free_port, http_get, samples, within};

fn dist(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../dist")
        .join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(dist(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The metric names in a PromQL expression (`rvs_…`, `node_ipvs_…`).
fn names_in(expr: &str, out: &mut BTreeSet<String>) {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut start = None;
    for (i, c) in expr.char_indices().chain([(expr.len(), ' ')]) {
        if word(c) {
            start.get_or_insert(i);
            continue;
        }
        let Some(s) = start.take() else { continue };
        let w = &expr[s..i];
        // A name, not part of a longer word (`rvs::sync`, `$__rate_interval`).
        let before = expr[..s].chars().next_back();
        if (w.starts_with("rvs_") || w.starts_with("node_ipvs_"))
            && !matches!(before, Some('$' | ':' | '.' | '-'))
        {
            out.insert(w.to_owned());
        }
    }
}

/// Every expression of the board's panels.
fn board_exprs() -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&read("grafana/rvs.json")).expect("board JSON");
    let mut out = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::String(e)) = m.get("expr") {
                    out.push(e.clone());
                }
                m.values().for_each(|x| walk(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(&v, &mut out);
    out
}

/// The metric names the board and the rules query (a histogram's series by
/// their family's name).
fn queried() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for e in board_exprs() {
        names_in(&e, &mut names);
    }
    names_in(&read("prometheus/rvs-alerts.yml"), &mut names);
    names
        .into_iter()
        .map(|n| match n.strip_suffix("_bucket") {
            Some(base) => base.to_owned(),
            None => n,
        })
        .collect()
}

/// The families of a scrape that have at least one sample.
fn served(text: &str, into: &mut BTreeSet<String>) {
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let name = l.split(['{', ' ']).next().unwrap_or_default();
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|b| text.contains(&format!("# TYPE {b} histogram")))
            .unwrap_or(name);
        into.insert(base.to_owned());
    }
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let test = "alert_rules_pass_promtool_and_their_unit_tests";
    if Command::new("promtool").arg("--version").output().is_err() {
        skip_or_fail(
            test,
            "promtool is not installed (Debian package prometheus)",
        );
        return;
    }
    for args in [
        vec!["check", "rules", "rvs-alerts.yml"],
        vec!["test", "rules", "rvs-alerts.test.yml"],
    ] {
        let o = Command::new("promtool")
            .args(&args)
            .current_dir(dist("prometheus"))
            .output()
            .expect("promtool");
        assert!(
            o.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn board_and_rules_query_only_names_that_exist() {
    let q = queried();
    // The parser finds what the files hold (a board that lost its panels
    // or a parser that finds nothing would pass the test below).
    for n in [
        "node_ipvs_backend_connections_active",
        "rvs_check_latency_seconds",
        "rvs_vip_announced",
        "rvs_sync_received_messages_total",
    ] {
        assert!(q.contains(n), "{n} not found in {q:?}");
    }
    let mut names = BTreeSet::new();
    names_in(
        "rate(rvs_a_total{x=\"rvs::sync\"}[$__rate_interval]) / node_ipvs_b",
        &mut names,
    );
    assert_eq!(
        names,
        BTreeSet::from(["node_ipvs_b".to_owned(), "rvs_a_total".to_owned()])
    );
}

/// `/metrics` of a proxy-plane rvsd with health checks: one real server
/// up, one down (its checker has gone down, so a transition is counted).
fn proxy_scrape() -> String {
    let live = TcpListener::bind("127.0.0.1:0").expect("bind");
    let live_port = live.local_addr().expect("addr").port();
    let dead_port = free_port();
    let (vport, http) = (free_port(), free_port());
    let dir = TempDir::new("dashboards");
    let conf = dir.write(
        "keepalived.conf",
        &format!(
            "virtual_server 127.0.0.1 {vport} {{
    delay_loop 1
    lb_algo rr
    lb_kind NAT
    protocol TCP
    quorum 1
    real_server 127.0.0.1 {live_port} {{
        TCP_CHECK {{
            connect_timeout 1
        }}
    }}
    real_server 127.0.0.1 {dead_port} {{
        TCP_CHECK {{
            connect_timeout 1
        }}
    }}
}}
"
        ),
    );
    let conf = conf.to_string_lossy().into_owned();
    let addr = format!("127.0.0.1:{http}");
    let _d = Rvsd::start_with(dir, "proxy", None, &["-f", &conf, "--http", &addr]);
    let mut text = String::new();
    within(
        "the dead real server is counted down",
        Duration::from_secs(20),
        || {
            text = http_get(&addr, "/metrics");
            samples(
                &text,
                "rvs_check_transitions_total",
                &[&format!(":{dead_port}")],
            )
            .any(|n| n > 0)
                && samples(&text, "rvs_check_latency_seconds_count", &[]).any(|n| n > 0)
        },
    );
    drop(live);
    text
}

/// `/metrics` of an `xdp,sock` rvsd in a namespace running a VRRP instance
/// (master alone), `lvs_sync_daemon` on it, an announcement table, a DR
/// service and a FULLNAT one with its pool; None when it cannot run.
fn xdp_scrape(test: &str) -> Option<String> {
    let cg = Cgroup::for_test(test, "rvse2edash")?;
    let (mut bed, _client, dir) = crate::netns::director_bed(test)?;
    let rs = bed.real_servers(1, &["--mode", "dr"]);
    let conf_dir = TempDir::new("dashboards-xdp");
    let conf = conf_dir.write(
        "keepalived.conf",
        &format!(
            "global_defs {{
    lvs_sync_daemon eth0 VI_1
}}
local_address_group lg {{
    10.77.0.101
}}
vrrp_instance VI_1 {{
    interface eth0
    virtual_router_id 61
    priority 150
    advert_int 1
    virtual_ipaddress {{
        10.77.0.200/32
    }}
}}
virtual_server 10.77.0.100 80 {{
    lb_algo rr
    lb_kind DR
    protocol TCP
    real_server {rs} 80 {{
        weight 1
    }}
}}
virtual_server 10.77.0.100 81 {{
    lb_algo rr
    lb_kind FNAT
    protocol TCP
    laddr_group_name lg
    real_server {rs} 80 {{
        weight 1
    }}
}}
",
            rs = rs[0].addr
        ),
    );
    let http = "127.0.0.1:9181";
    let _d = crate::xdp_sock::launch("dashboards", &dir, &cg)
        .args(["--http", http, "--announce-table", "181", "-f"])
        .arg(&conf)
        .adopt(&mut bed);
    let ns = dir.ns.clone();
    let mut text = String::new();
    within(
        "VRRP master and its sync daemon",
        Duration::from_secs(20),
        || {
            let ns = ns.clone();
            text = rvs_testbed::in_ns(&ns, move || http_get(http, "/metrics"));
            samples(&text, "rvs_vrrp_state", &["VI_1"]).any(|s| s == 2)
                && samples(&text, "rvs_sync_daemon_running", &["master"]).any(|s| s == 1)
        },
    );
    Some(text)
}

#[test]
fn every_metric_the_board_and_the_rules_query_is_served() {
    let test = "every_metric_the_board_and_the_rules_query_is_served";
    let mut have = BTreeSet::new();
    served(&proxy_scrape(), &mut have);
    let Some(text) = xdp_scrape(test) else {
        return;
    };
    served(&text, &mut have);
    let missing: Vec<_> = queried()
        .into_iter()
        .filter(|n| !have.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "queried but not served: {missing:?}\nserved: {have:?}"
    );
}
