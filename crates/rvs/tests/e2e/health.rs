//! Health checking through the real daemon: `rvsd -f keepalived.conf
//! --dataplane proxy` with TCP_CHECK checkers against real backends on
//! loopback that the test starts and kills; what the operator sees through
//! `rvsadm -Ln`, `rvsadm -L -n --checks`, /metrics, and where new
//! connections land.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::harness::{Rvsd, TempDir, free_port, http_get, real_server_fields, within};
use rvs_testbed::Server;

/// A TCP backend on 127.0.0.1 that greets each connection with its name.
/// Killing it (drop) closes the listening socket: the port refuses.
struct Backend {
    port: u16,
    _server: Server,
}

impl Backend {
    fn start(name: &str) -> Backend {
        Self::start_on(name, 0)
    }

    fn start_on(name: &str, port: u16) -> Backend {
        let l = TcpListener::bind(("127.0.0.1", port)).expect("bind backend");
        let port = l.local_addr().expect("addr").port();
        let name = name.to_owned();
        let server = Server::tcp(l, move |mut c, _| {
            use std::io::Write;
            let _ = writeln!(c, "{name}");
        });
        Backend {
            port,
            _server: server,
        }
    }
}

/// Which backend a new connection through the VIP reaches ("" = none).
fn who(vip: SocketAddr) -> String {
    let Ok(c) = TcpStream::connect_timeout(&vip, Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    let _ = BufReader::new(c).read_line(&mut line);
    line.trim().to_owned()
}

/// Real servers listed by `rvsadm -Ln` as (port, weight).
pub(crate) fn listed(d: &Rvsd) -> Vec<(u16, u32)> {
    real_server_fields(&d.ok("-L -n"))
        .filter_map(|f| {
            let addr: SocketAddr = f.first()?.parse().ok()?;
            Some((addr.port(), f.get(2)?.parse().ok()?))
        })
        .collect()
}

/// A free port of 127.0.0.1 for a virtual service: the port and the
/// address.
fn local_vip() -> (u16, SocketAddr) {
    let port = free_port();
    (port, ([127, 0, 0, 1], port).into())
}

fn conf(vip: u16, body: &str) -> String {
    format!(
        "virtual_server 127.0.0.1 {vip} {{\n  delay_loop 1\n  lb_algo rr\n  lb_kind NAT\n  protocol TCP\n{body}}}\n"
    )
}

fn tcp_rs(port: u16, weight: u32, extra: &str) -> String {
    format!(
        "  real_server 127.0.0.1 {port} {{\n    weight {weight}\n{extra}    TCP_CHECK {{\n      connect_timeout 1\n      retry 1\n      delay_before_retry 0.5\n    }}\n  }}\n"
    )
}

fn start(tag: &str, text: &str) -> (Rvsd, std::path::PathBuf) {
    let dir = TempDir::new(tag);
    let path = dir.write("keepalived.conf", text);
    let p = path.to_str().expect("utf-8 path").to_owned();
    (Rvsd::start_with(dir, "proxy", None, &["-f", &p]), path)
}

#[test]
fn dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight() {
    let [a, b] = ["a", "b"].map(Backend::start);
    let b_port = b.port;
    let (vip_port, vip) = local_vip();
    let text = conf(vip_port, &(tcp_rs(a.port, 1, "") + &tcp_rs(b_port, 3, "")));
    let (d, _) = start("health-dead", &text);
    within("both checkers up", Duration::from_secs(5), || {
        let c = d.ok("-L -n --checks");
        c.matches("last ok").count() == 2
    });
    let mut l = listed(&d);
    l.sort();
    let mut want = vec![(b_port, 3), (a.port, 1)];
    want.sort();
    assert_eq!(l, want);

    // Kill b. keepalived's bound: delay_loop + retry × (connect_timeout +
    // delay_before_retry) = 1 + 1 × (1 + 0.5) = 2.5 s.
    drop(b);
    let formula = Duration::from_millis(2500);
    let took = within("b removed", formula + Duration::from_millis(300), || {
        !listed(&d).iter().any(|(p, _)| *p == b_port)
    });
    eprintln!("dead server detected after {took:?} (bound {formula:?})");
    // No new connection reaches it afterwards.
    for _ in 0..20 {
        assert_eq!(who(vip), "a");
    }
    let checks = d.ok("-L -n --checks");
    assert!(
        checks.contains("connection refused") && checks.contains("DOWN"),
        "{checks}"
    );

    // Bring b back on the same port: re-added with weight 3 within one
    // delay_loop (a down checker is re-checked every delay_loop).
    let b = Backend::start_on("b", b_port);
    within("b back", Duration::from_millis(1500), || {
        listed(&d).contains(&(b_port, 3))
    });
    let mut seen_b = false;
    for _ in 0..8 {
        seen_b |= who(vip) == "b";
    }
    assert!(seen_b, "new connections reach the recovered server");
    drop(b);
}

#[test]
fn inhibit_on_failure_keeps_the_server_listed_at_weight_zero() {
    let [a, b] = ["a", "b"].map(Backend::start);
    let b_port = b.port;
    let (vip_port, vip) = local_vip();
    let text = conf(
        vip_port,
        &(tcp_rs(a.port, 1, "") + &tcp_rs(b_port, 5, "    inhibit_on_failure\n")),
    );
    let (d, _) = start("health-inhibit", &text);
    within("both up", Duration::from_secs(5), || {
        d.ok("-L -n --checks").matches("last ok").count() == 2
    });
    drop(b);
    within("b at weight 0", Duration::from_secs(3), || {
        listed(&d).contains(&(b_port, 0))
    });
    assert_eq!(listed(&d).len(), 2, "still listed");
    for _ in 0..10 {
        assert_eq!(who(vip), "a", "weight 0: no new connections");
    }
    let b = Backend::start_on("b", b_port);
    within("b weight restored", Duration::from_millis(1500), || {
        listed(&d).contains(&(b_port, 5))
    });
    drop(b);
}

#[test]
fn quorum_loss_swaps_in_the_sorry_server_and_back() {
    let [a, b, sorry] = ["a", "b", "sorry"].map(Backend::start);
    let b_port = b.port;
    let (vip_port, vip) = local_vip();
    let dir = TempDir::new("health-quorum-files");
    let qdown = dir.path().join("quorum_down");
    let qup = dir.path().join("quorum_up");
    let text = conf(
        vip_port,
        &format!(
            "  quorum 2\n  sorry_server 127.0.0.1 {}\n  quorum_down \"/usr/bin/touch {}\"\n  quorum_up \"/usr/bin/touch {}\"\n{}{}",
            sorry.port,
            qdown.display(),
            qup.display(),
            tcp_rs(a.port, 1, ""),
            tcp_rs(b_port, 1, "")
        ),
    );
    let (d, _) = start("health-quorum", &text);
    within("both up", Duration::from_secs(5), || {
        d.ok("-L -n --checks").matches("last ok").count() == 2
    });
    assert_eq!(listed(&d).len(), 2);
    drop(b);
    within("sorry server swapped in", Duration::from_secs(3), || {
        listed(&d) == vec![(sorry.port, 1)]
    });
    for _ in 0..5 {
        assert_eq!(who(vip), "sorry");
    }
    within("quorum_down ran", Duration::from_secs(2), || qdown.exists());
    assert!(d.ok("-L -n --checks").contains("sorry server active"));
    assert!(!qup.exists());

    let b = Backend::start_on("b", b_port);
    within("real servers back", Duration::from_millis(1500), || {
        let l = listed(&d);
        l.len() == 2 && !l.iter().any(|(p, _)| *p == sorry.port)
    });
    within("quorum_up ran", Duration::from_secs(2), || qup.exists());
    assert_ne!(who(vip), "sorry");
    drop(b);
}

#[test]
fn reload_keeps_a_down_server_out_and_metrics_show_it() {
    let [a, b, c] = ["a", "b", "c"].map(Backend::start);
    let b_port = b.port;
    let vip_port = free_port();
    let http_port = free_port();
    let text = conf(vip_port, &(tcp_rs(a.port, 1, "") + &tcp_rs(b_port, 1, "")));
    let dir = TempDir::new("health-reload");
    let path = dir.write("keepalived.conf", &text);
    let p = path.to_str().expect("utf-8").to_owned();
    let http = format!("127.0.0.1:{http_port}");
    let d = Rvsd::start_with(dir, "proxy", None, &["-f", &p, "--http", &http]);
    within("both up", Duration::from_secs(5), || {
        d.ok("-L -n --checks").matches("last ok").count() == 2
    });
    drop(b);
    within("b removed", Duration::from_secs(3), || {
        listed(&d).len() == 1
    });

    // Reload with a third real server (no checker: always up).
    let text2 = conf(
        vip_port,
        &(tcp_rs(a.port, 1, "")
            + &tcp_rs(b_port, 1, "")
            + &format!(
                "  real_server 127.0.0.1 {} {{\n    weight 2\n  }}\n",
                c.port
            )),
    );
    std::fs::write(&path, text2).expect("rewrite");
    let out = d.ok("--reload");
    assert!(out.contains("real servers +1"), "{out}");
    let l = listed(&d);
    assert!(
        l.contains(&(c.port, 2)) && l.contains(&(a.port, 1)),
        "{l:?}"
    );
    assert!(
        !l.iter().any(|(p, _)| *p == b_port),
        "a down server stays out after a reload: {l:?}"
    );

    let metrics = http_get(&format!("127.0.0.1:{http_port}"), "/metrics");
    let line = |rs: u16| {
        format!(
            "rvs_realserver_up{{virtual_server=\"TCP 127.0.0.1:{vip_port}\",real_server=\"127.0.0.1:{rs}\"}}"
        )
    };
    assert!(
        metrics.contains(&format!("{} 0", line(b_port))),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("{} 1", line(a.port))),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("{} 1", line(c.port))),
        "{metrics}"
    );
    assert!(metrics.contains("rvs_check_latency_seconds_count{"));
    assert!(metrics.contains("to=\"down\"} 1"), "{metrics}");
    let checks = http_get(&format!("127.0.0.1:{http_port}"), "/api/v1/checks");
    assert!(
        checks.contains("\"last_failure\":\"connection refused\""),
        "{checks}"
    );
}

/// A listener that stops accepting when told: with a backlog of 0 and its
/// queue filled, further SYNs are dropped and connects time out (a
/// blackholed server, not a refusing one).
struct Hanging {
    port: u16,
    hang: Arc<AtomicBool>,
    _server: Server,
}

impl Hanging {
    fn start() -> Hanging {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("bind");
        s.listen(0).expect("listen");
        let l: TcpListener = s.into();
        l.set_nonblocking(true).expect("nonblocking");
        let port = l.local_addr().expect("addr").port();
        let hang = Arc::new(AtomicBool::new(false));
        let h2 = hang.clone();
        let server = Server::spawn(move |stop| {
            while !stop.load(Ordering::Relaxed) {
                if !h2.load(Ordering::Relaxed) {
                    let _ = l.accept();
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Hanging {
            port,
            hang,
            _server: server,
        }
    }

    /// Stop accepting and fill the accept queue; returns the fillers (kept
    /// open so the queue stays full).
    fn blackhole(&self) -> Vec<socket2::Socket> {
        self.hang.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        let mut fill = Vec::new();
        for _ in 0..4 {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                .expect("socket");
            let to = SocketAddr::from(([127, 0, 0, 1], self.port)).into();
            if s.connect_timeout(&to, Duration::from_millis(200)).is_err() {
                break;
            }
            fill.push(s);
        }
        fill
    }
}

/// A server that stops answering (connects time out) is detected within
/// keepalived's bound plus the first probe's own connect_timeout:
/// delay_loop + retry × (connect_timeout + delay_before_retry) + connect_timeout.
#[test]
fn blackholed_server_times_out_within_the_bound() {
    let a = Backend::start("a");
    let h = Hanging::start();
    let vip_port = free_port();
    let text = conf(vip_port, &(tcp_rs(a.port, 1, "") + &tcp_rs(h.port, 1, "")));
    let (d, _) = start("health-blackhole", &text);
    within("both up", Duration::from_secs(5), || {
        d.ok("-L -n --checks").matches("last ok").count() == 2
    });
    let _fill = h.blackhole();
    // 1 + 1 × (1 + 0.5) + 1 = 3.5 s.
    let bound = Duration::from_millis(3500);
    // The bound itself is checked to the millisecond with a virtual clock
    // (rvs-check `detection_time_matches_keepalived_formula`); here real
    // timers on a loaded 2-CPU machine get scheduling slack.
    let took = within(
        "blackholed server removed",
        bound + Duration::from_millis(800),
        || !listed(&d).iter().any(|(p, _)| *p == h.port),
    );
    eprintln!("blackholed server detected after {took:?} (bound {bound:?})");
    let checks = d.ok("-L -n --checks");
    assert!(checks.contains("last failure: timeout"), "{checks}");
}
