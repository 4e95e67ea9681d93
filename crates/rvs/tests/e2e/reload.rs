//! Reload: SIGHUP and `rvsadm --reload` apply only the difference; a bad
//! file changes nothing.

use crate::harness::{Rvsd, TempDir, parts};

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

const BEFORE: &str = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.0.0.1:80 wlc
  -> 192.168.1.1:80               Masq    2      0          0         
  -> 192.168.1.2:80               Masq    2      0          0         
TCP  10.0.0.2:443 rr persistent 360
  -> 192.168.9.1:443              Route   1      0          0         
";

const AFTER: &str = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.0.0.1:80 wlc
  -> 192.168.1.2:80               Masq    2      0          0         
  -> 192.168.1.3:80               Masq    2      0          0         
TCP  10.0.0.2:443 rr persistent 360
  -> 192.168.9.1:443              Route   1      0          0         
";

#[test]
fn sighup_and_rvsadm_reload_apply_the_difference() {
    let dir = TempDir::new("reload");
    let path = dir.write(
        "keepalived.conf",
        &conf(&["192.168.1.1", "192.168.1.2"], ""),
    );
    let path_s = path.display().to_string();
    let d = Rvsd::start_in(dir, &["-f", &path_s]);
    assert_eq!(d.ok("-Ln"), BEFORE);
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
    d.eventually("SIGHUP reload", || d.ok("-Ln") == AFTER);
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
    assert_eq!(d.ok("-Ln"), AFTER, "a bad file changes nothing");

    // Back to the first file through rvsadm --reload.
    std::fs::write(&path, conf(&["192.168.1.1", "192.168.1.2"], "")).expect("write");
    let out = d.ok("--reload");
    assert!(out.contains("real servers +1 -1"), "{out}");
    assert_eq!(d.ok("-Ln"), BEFORE);
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
    let dir = TempDir::new("reload-rules");
    let path = dir.write(
        "ipvsadm.rules",
        "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 192.168.1.1:80 -m -w 1\n",
    );
    let path_s = path.display().to_string();
    let d = Rvsd::start_in(dir, &["--rules", &path_s]);
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
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("send");
        let mut body = String::new();
        s.read_to_string(&mut body).expect("read");
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .expect("metric present")
    };
    assert_eq!(metric("rvs_config_reloads_total"), 0);
    d.ok("--reload");
    assert_eq!(metric("rvs_config_reloads_total"), 1);
    std::fs::write(&path, "virtual_server 10.0.0.1 80 {\n  lb_algo nosuch\n}\n").expect("write");
    assert_eq!(parts(&d.adm("--reload")).2, 1);
    assert_eq!(metric("rvs_config_reload_failures_total"), 1);
    assert_eq!(metric("rvs_config_reloads_total"), 1);
}
