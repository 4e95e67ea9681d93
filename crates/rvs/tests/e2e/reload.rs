//! Reload: SIGHUP and `rvsadm --reload` apply only the difference; a bad
//! file changes nothing.

use std::path::PathBuf;

use crate::harness::{Rvsd, TempDir, http_get, parts, samples};

fn conf(dests_80: &[&str], extra: &str) -> String {
    let rs: String = dests_80
        .iter()
        .map(|ip| format!("    real_server {ip} 80 {{\n        weight 2\n        TCP_CHECK {{\n            connect_timeout 3\n        }}\n    }}\n"))
        .collect();
    format!(
        "global_defs {{\n    router_id LVS_TEST\n    lvs_timeouts tcp 7200 tcpfin 30 udp 60\n}}\n\
virtual_server 10.0.0.1 80 {{\n    delay_loop 5\n    lb_algo wlc\n    lb_kind NAT\n    protocol TCP\n{rs}}}\n\
virtual_server 10.0.0.2 443 {{\n    lb_algo rr\n    lb_kind DR\n    persistence_timeout\n    protocol TCP\n    real_server 192.168.9.1 443 {{\n        weight 1\n    }}\n}}\n{extra}"
    )
}

/// `-Ln` of [`conf`] with the real servers 192.168.1.`a` and 192.168.1.`b`
/// (one digit each: the columns stay where they are).
fn listing(a: u8, b: u8) -> String {
    format!(
        "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.0.0.1:80 wlc
  -> 192.168.1.{a}:80               Masq    2      0          0         
  -> 192.168.1.{b}:80               Masq    2      0          0         
TCP  10.0.0.2:443 rr persistent 360
  -> 192.168.9.1:443              Route   1      0          0         
"
    )
}

/// rvsd started with `flag` naming `file`, written with `text` in a fresh
/// directory (`tag`): the daemon and the file's path.
fn start_on(tag: &str, file: &str, text: &str, flag: &str) -> (Rvsd, PathBuf) {
    let dir = TempDir::new(tag);
    let path = dir.write(file, text);
    let d = Rvsd::start_in(dir, &[flag, &path.display().to_string()]);
    (d, path)
}

#[test]
fn sighup_and_rvsadm_reload_apply_the_difference() {
    let text = conf(&["192.168.1.1", "192.168.1.2"], "");
    let (d, path) = start_on("reload", "keepalived.conf", &text, "-f");
    let path_s = path.display().to_string();
    let (before, after) = (listing(1, 2), listing(2, 3));
    assert_eq!(d.ok("-Ln"), before);
    assert_eq!(
        d.ok("-L --timeout"),
        "Timeout (tcp tcpfin udp): 7200 30 60\n"
    );
    // Counters of the untouched service survive; zero them there only to
    // see that the reload does not reset them either way.
    let untouched_before = d.ok("-Ln --stats -t 10.0.0.2:443");

    // One real server added, one removed: SIGHUP.
    std::fs::write(&path, conf(&["192.168.1.2", "192.168.1.3"], "")).expect("write");
    d.signal("HUP");
    d.eventually("SIGHUP reload", || d.ok("-Ln") == after);
    assert_eq!(d.ok("-Ln --stats -t 10.0.0.2:443"), untouched_before);

    // A broken file: rejected with its location, state untouched.
    std::fs::write(
        &path,
        conf(
            &["192.168.1.9"],
            "virtual_server 10.0.0.3 80 {\n    lb_algo nosuch\n}\n",
        ),
    )
    .expect("write");
    let (out, err, code) = parts(&d.adm("--reload"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with(&format!("{path_s}:")), "{err}");
    d.signal("HUP");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(d.ok("-Ln"), after, "a bad file changes nothing");

    // Back to the first file through rvsadm --reload.
    std::fs::write(&path, conf(&["192.168.1.1", "192.168.1.2"], "")).expect("write");
    let out = d.ok("--reload");
    assert!(out.contains("real servers +1 -1"), "{out}");
    assert_eq!(d.ok("-Ln"), before);
}

#[test]
fn reload_without_a_file_is_an_error() {
    let d = Rvsd::start("reload-none", &[]);
    let (_, err, code) = parts(&d.adm("--reload"));
    assert_eq!(code, 1);
    assert!(err.contains("no configuration file"), "{err}");
}

#[test]
fn rules_file_reload() {
    let rules = "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 192.168.1.1:80 -m -w 1\n";
    let (d, path) = start_on("reload-rules", "ipvsadm.rules", rules, "--rules");
    assert_eq!(
        d.ok("-S -n"),
        "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 192.168.1.1:80 -m -w 1\n"
    );
    std::fs::write(
        &path,
        "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 192.168.1.1:80 -m -w 4\n--set 10 20 30\n",
    )
    .expect("write");
    d.ok("--reload");
    assert_eq!(
        d.ok("-S -n"),
        "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 192.168.1.1:80 -m -w 4\n"
    );
    assert_eq!(d.ok("-L --timeout"), "Timeout (tcp tcpfin udp): 10 20 30\n");
}

/// The initial load is not a reload; reloads and rejected reloads are counted.
#[test]
fn reload_counters_in_metrics() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let dir = TempDir::new("reload-metrics");
    let path = dir.write("keepalived.conf", &conf(&["192.168.1.1"], ""));
    let (path_s, addr) = (path.display().to_string(), format!("127.0.0.1:{port}"));
    let d = Rvsd::start_in(dir, &["-f", &path_s, "--http", &addr]);
    let metric = |name: &str| -> u64 {
        let text = http_get(&addr, "/metrics");
        samples(&text, name, &[]).next().expect("metric present")
    };
    assert_eq!(metric("rvs_config_reloads_total"), 0);
    d.ok("--reload");
    assert_eq!(metric("rvs_config_reloads_total"), 1);
    std::fs::write(&path, "virtual_server 10.0.0.1 80 {\n  lb_algo nosuch\n}\n").expect("write");
    assert_eq!(parts(&d.adm("--reload")).2, 1);
    assert_eq!(metric("rvs_config_reload_failures_total"), 1);
    assert_eq!(metric("rvs_config_reloads_total"), 1);
}
