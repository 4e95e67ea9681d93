//! Connection synchronisation end to end: a master rvsd (proxy data plane,
//! real connections through it) and a backup rvsd on one segment, started
//! with ipvsadm's own commands; the backup must list the master's
//! connection and persistence template, on the right real server.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::harness::{Launch, Rvsd, TempDir, http_get, samples, within};
use crate::netns::{Bed, Host, connect};

/// rvsd in `h`'s namespace with data plane `plane`, on `DIR/NAME.sock`
/// (killed on drop).
fn start(h: &Host, dir: &Path, name: &str, plane: &str, args: &[&str]) -> Rvsd {
    Launch::at(&dir.join(format!("{name}.sock")))
        .netns(&h.ns)
        .plane(plane)
        .args(args)
        .spawn()
}

#[test]
fn sync_daemon_carries_connections_and_templates_to_the_backup() {
    let test = "sync_daemon_carries_connections_and_templates_to_the_backup";
    let Some((mut bed, [a, b, c])) = Bed::with_hosts(
        test,
        [
            ("a", "10.0.5.1/24"),
            ("b", "10.0.5.2/24"),
            ("c", "10.0.5.3/24"),
        ],
    ) else {
        return;
    };
    bed.server(&a, "10.0.5.1".parse().unwrap(), 8081, "rs1");
    let dir = TempDir::new("sync");
    let http = "127.0.0.1:9182";
    let master = start(&a, dir.path(), "master", "proxy", &["--http", http]);
    let backup = start(&b, dir.path(), "backup", "none", &["--http", http]);
    for d in [&master, &backup] {
        d.ok("-A -t 10.0.5.1:80 -s rr -p 300");
        d.ok("-a -t 10.0.5.1:80 -r 10.0.5.1:8081 -m");
    }
    backup.ok("--start-daemon backup --mcast-interface eth0 --syncid 7");
    master.ok("--start-daemon master --mcast-interface eth0 --syncid 7");

    // ipvsadm's answers for a second start and a stop of nothing.
    let again = master.adm("--start-daemon master --mcast-interface eth0");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("Daemon has already run"));
    let none = master.adm("--stop-daemon backup");
    assert!(String::from_utf8_lossy(&none.stderr).contains("No daemon is running"));
    assert_eq!(
        master.ok("-L --daemon"),
        "master sync daemon (mcast=eth0, syncid=7, maxlen=1472, group=224.0.0.81, port=8848, ttl=1)\n"
    );

    // A client on c holds a connection through the master's proxy.
    let vip: SocketAddr = "10.0.5.1:80".parse().unwrap();
    let conn = connect(&c, vip, Duration::from_secs(5)).expect("connect through the master");
    assert_eq!(conn.server, "rs1");
    let listed = || backup.ok("-Lnc");
    within(
        "the backup lists the connection and its template",
        Duration::from_secs(8),
        || {
            let l = listed();
            l.contains("ESTABLISHED 10.0.5.3:")
                && l.contains("10.0.5.1:80")
                && l.contains("ASSURED")
        },
    );
    let l = listed();
    let est = l
        .lines()
        .find(|x| x.contains("ESTABLISHED"))
        .expect("established line");
    assert!(est.contains("10.0.5.1:8081"), "{l}");
    let tpl = l
        .lines()
        // Assured, as the kernel lists a template whose connection was
        // established (issue 29: rvs listed NONE).
        .find(|x| x.contains("ASSURED"))
        .expect("template line");
    assert!(
        tpl.contains("10.0.5.3:0") && tpl.contains("10.0.5.1:8081"),
        "{l}"
    );
    // The backup's real server counts the synced connection as active.
    let stats = backup.ok("-Ln");
    assert!(
        stats
            .lines()
            .any(|x| x.contains("10.0.5.1:8081") && x.split_whitespace().nth(4) == Some("1")),
        "{stats}"
    );
    // Each daemon counts its datagrams (`rvs_sync_*`, dist/grafana's sync
    // panels and the sync-lag alert).
    let scrape = |h: &Host| rvs_testbed::in_ns(&h.ns, move || http_get(http, "/metrics"));
    let (m, b_text) = (scrape(&a), scrape(&b));
    let first = |text: &str, family: &str, role: &str| {
        samples(text, family, &[&format!("role=\"{role}\"")]).next()
    };
    // (whose scrape, family, role label, the range its first sample is in)
    for (text, family, role, range) in [
        (&m, "rvs_sync_daemon_running", "master", 1..=1),
        (&m, "rvs_sync_sent_messages_total", "master", 1..=u64::MAX),
        (&m, "rvs_sync_sent_bytes_total", "master", 1..=u64::MAX),
        (&b_text, "rvs_sync_daemon_running", "backup", 1..=1),
        (
            &b_text,
            "rvs_sync_received_messages_total",
            "backup",
            1..=u64::MAX,
        ),
        (&b_text, "rvs_sync_sent_messages_total", "master", 0..=0),
    ] {
        let got = first(text, family, role);
        assert!(
            got.is_some_and(|v| range.contains(&v)),
            "{family}{{role={role}}} = {got:?}, not in {range:?}\n{text}"
        );
    }
    drop(conn);

    // A syncid the backup does not take is ignored.
    master.ok("--stop-daemon master");
    master.ok("--start-daemon master --mcast-interface eth0 --syncid 9");
    let other = connect(&c, vip, Duration::from_secs(5)).expect("second connection");
    let port = other.stream.local_addr().expect("local").port();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !listed().contains(&format!("10.0.5.3:{port}")),
        "{}",
        listed()
    );
}

/// keepalived.conf's `lvs_sync_daemon eth0 VI_1`: the VRRP master runs the
/// master daemon, the backup the backup daemon (sync id = the VRID), and
/// they swap with the VRRP state.
#[test]
fn lvs_sync_daemon_follows_the_vrrp_state() {
    let test = "lvs_sync_daemon_follows_the_vrrp_state";
    let Some((_bed, [a, b])) = Bed::with_hosts(test, [("a", "10.0.5.1/24"), ("b", "10.0.5.2/24")])
    else {
        return;
    };
    let dir = TempDir::new("sync-ka");
    let conf = |prio: u8| {
        format!(
            "global_defs {{
    lvs_sync_daemon eth0 VI_1
}}
vrrp_instance VI_1 {{
    interface eth0
    virtual_router_id 61
    priority {prio}
    advert_int 1
    virtual_ipaddress {{
        10.0.5.100/24
    }}
}}
virtual_server 10.0.5.100 80 {{
    lb_algo rr
    lb_kind NAT
    protocol TCP
    real_server 10.0.5.9 80 {{
        weight 1
    }}
}}
"
        )
    };
    let start = |h: &Host, name: &str, prio: u8| {
        let file = dir.write(&format!("{name}.conf"), &conf(prio));
        let file = file.to_string_lossy().into_owned();
        start(h, dir.path(), name, "none", &["-f", &file])
    };
    let pa = start(&a, "a", 150);
    let pb = start(&b, "b", 100);
    let line = |role: &str| {
        format!(
            "{role} sync daemon (mcast=eth0, syncid=61, maxlen=1472, group=224.0.0.81, port=8848, ttl=1)\n"
        )
    };
    within(
        "A runs the master daemon, B the backup",
        Duration::from_secs(10),
        || pa.ok("-L --daemon") == line("master") && pb.ok("-L --daemon") == line("backup"),
    );
    drop(pa);
    within(
        "B switches to the master daemon",
        Duration::from_secs(10),
        || pb.ok("-L --daemon") == line("master"),
    );
}
