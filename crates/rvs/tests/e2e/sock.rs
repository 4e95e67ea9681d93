//! The sock data plane through the real daemon: `rvsd -f keepalived.conf
//! --dataplane sock --cgroup CG` with TCP_CHECK checkers against backends
//! on loopback; clients are bash processes inside a cgroup the test made
//! (`/dev/tcp` connects to the VIP, where nothing listens). A backend that
//! fails its check is never chosen; `--stats` counts the connections;
//! stopping rvsd detaches the programs.

use std::io::Write as _;
use std::net::TcpListener;
use std::time::Duration;

use rvs_testbed::{Cgroup, Server};

use crate::harness::{Rvsd, TempDir, free_port, real_server_fields, within};

/// TCP backends on 127.0.0.1 that greet each connection with their name.
struct Backends {
    _servers: Vec<Server>,
}

impl Backends {
    fn start(names: &[&str]) -> (Backends, Vec<u16>) {
        let mut ports = Vec::new();
        let servers = names
            .iter()
            .map(|name| {
                let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
                ports.push(l.local_addr().expect("addr").port());
                let name = (*name).to_owned();
                Server::tcp(l, move |mut c, _| {
                    let _ = writeln!(c, "{name}");
                })
            })
            .collect();
        (Backends { _servers: servers }, ports)
    }
}

/// `n` connections to `vip:port` from a bash inside `cg`: the greetings
/// ("refused" for a connection that failed).
fn connect_from(cg: &Cgroup, vip: &str, port: u16, n: usize) -> Vec<String> {
    let script = format!(
        "for i in $(seq {n}); do if exec 3<>/dev/tcp/{vip}/{port}; then head -1 <&3; exec 3<&-; else echo refused; fi; done 2>/dev/null"
    );
    let out = cg
        .command(std::path::Path::new("/bin/bash"), &["-c", &script])
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Conns per real-server port from `rvsadm -L -n --stats`.
fn conns(d: &Rvsd, port: u16) -> Option<u64> {
    real_server_fields(&d.ok("-L -n --stats")).find_map(|f| {
        let addr: std::net::SocketAddr = f.first()?.parse().ok()?;
        (addr.port() == port).then(|| f.get(1)?.parse().ok())?
    })
}

#[test]
fn sock_plane_skips_a_failed_backend_counts_connections_and_detaches_on_stop() {
    let test = "sock_plane_skips_a_failed_backend_counts_connections_and_detaches_on_stop";
    let Some(cg) = Cgroup::for_test(test, "rvse2esock") else {
        return;
    };
    let (backends, ports) = Backends::start(&["a", "c"]);
    // b: a port nothing listens on, so its TCP_CHECK fails.
    let b_port = free_port();
    let vip = format!("127.78.{}.1", std::process::id() % 250);
    let vport = 8081;
    let rs = |port: u16| {
        format!(
            "  real_server 127.0.0.1 {port} {{\n    weight 1\n    TCP_CHECK {{\n      connect_timeout 1\n      retry 1\n      delay_before_retry 0.5\n    }}\n  }}\n"
        )
    };
    let text = format!(
        "virtual_server {vip} {vport} {{\n  delay_loop 1\n  lb_algo rr\n  lb_kind NAT\n  protocol TCP\n{}{}{}}}\n",
        rs(ports[0]),
        rs(b_port),
        rs(ports[1])
    );
    let dir = TempDir::new("sock-e2e");
    let conf = dir.write("keepalived.conf", &text);
    let cgroup = cg.path().to_str().expect("utf-8").to_owned();
    let d = Rvsd::start_with(
        dir,
        "sock",
        None,
        &["-f", conf.to_str().expect("utf-8"), "--cgroup", &cgroup],
    );
    within(
        "b removed by its health check",
        Duration::from_secs(8),
        || {
            let l = d.ok("-L -n");
            !l.contains(&format!(":{b_port} ")) && l.contains(&format!(":{} ", ports[1]))
        },
    );
    let got = connect_from(&cg, &vip, vport, 20);
    assert_eq!(got.len(), 20, "{got:?}");
    let a = got.iter().filter(|g| *g == "a").count();
    let c = got.iter().filter(|g| *g == "c").count();
    assert_eq!((a, c), (10, 10), "{got:?}");
    within(
        "--stats counts the connections",
        Duration::from_secs(5),
        || conns(&d, ports[0]) == Some(10) && conns(&d, ports[1]) == Some(10),
    );
    // Stopping rvsd detaches the programs: the VIP is a plain address again.
    drop(d);
    within("detached", Duration::from_secs(5), || {
        connect_from(&cg, &vip, vport, 1) == ["refused"]
    });
    drop(backends);
}
