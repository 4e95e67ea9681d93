//! keepalived's `net_namespace NAME`, at the top level of the file where
//! keepalived reads it: rvsd, started from the root namespace, enters `/run/netns/NAME` before anything else and serves
//! there (observed from inside the namespace); a missing namespace is
//! refused at start with its name; a reload that changes it is refused and
//! changes nothing. The control socket stays at its path.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use crate::harness::{Launch, RVSD, Rvsd, TempDir, parts, within};

const VIP: &str = "10.77.0.1";

fn conf(ns: &str, vip_port: u16, rs_port: u16) -> String {
    format!(
        "net_namespace {ns}
virtual_server {VIP} {vip_port} {{
    lb_algo rr
    lb_kind NAT
    protocol TCP
    real_server 127.0.0.1 {rs_port} {{
        weight 1
    }}
}}
"
    )
}

#[test]
fn net_namespace_runs_the_daemon_inside_the_named_namespace() {
    let test = "net_namespace_runs_the_daemon_inside_the_named_namespace";
    if !rvs_testbed::require_root(test, "creating a network namespace needs root")
        || !rvs_testbed::require_tools(test, &["ip"])
    {
        return;
    }
    let ns = rvs_testbed::Netns::new("rvs-ns-");
    // The VIP exists only inside the namespace.
    ns.exec(&["ip", "addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
    // A backend inside the namespace: its socket is made there.
    let backend: TcpListener = ns.run(|| TcpListener::bind("127.0.0.1:0").expect("bind backend"));
    let rs_port = backend.local_addr().expect("addr").port();
    backend.set_nonblocking(true).expect("nonblocking");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let server = std::thread::spawn(move || {
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            match backend.accept() {
                Ok((mut c, _)) => {
                    let _ = writeln!(c, "inside");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    let vip_port = ns.run(|| {
        TcpListener::bind((VIP, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port in the namespace")
    });

    let dir = TempDir::new("netns-daemon");
    let path = dir.write("keepalived.conf", &conf(ns.name(), vip_port, rs_port));
    let p = path.to_str().expect("utf-8 path").to_owned();
    // Started from the root namespace; the control socket is a file in
    // `dir`, reached from here.
    let d = Rvsd::start_with(dir, "proxy", None, &["-f", &p]);
    assert!(
        d.ok("-Ln").contains(&format!("{VIP}:{vip_port}")),
        "{}",
        d.ok("-Ln")
    );
    // Served inside the namespace: a client there reaches the backend
    // through the VIP.
    let to: SocketAddr = format!("{VIP}:{vip_port}").parse().expect("addr");
    within(
        "the VIP answers inside the namespace",
        Duration::from_secs(10),
        || {
            ns.run(move || {
                let Ok(c) = TcpStream::connect_timeout(&to, Duration::from_secs(1)) else {
                    return false;
                };
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let mut line = String::new();
                let _ = BufReader::new(c).read_line(&mut line);
                line.trim() == "inside"
            })
        },
    );
    // Its listener is in the namespace, not in the root one.
    let inside = ns.exec(&["ss", "-Hltn", &format!("sport = :{vip_port}")]);
    assert!(
        String::from_utf8_lossy(&inside.stdout).contains(VIP),
        "no listener on {VIP}:{vip_port} inside {}",
        ns.name()
    );
    let root = rvs_testbed::sh(&["ss", "-Hltn", &format!("sport = :{vip_port}")]);
    assert!(
        !String::from_utf8_lossy(&root.stdout).contains(VIP),
        "a listener on {VIP}:{vip_port} in the root namespace"
    );

    // A reload naming another namespace is refused and changes nothing.
    let before = d.ok("-Ln");
    std::fs::write(
        &path,
        conf(&format!("{}-other", ns.name()), vip_port + 1, rs_port),
    )
    .expect("write");
    let (out, err, code) = parts(&d.adm("--reload"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("net_namespace changed") && err.contains("restart rvsd"),
        "{err}"
    );
    assert_eq!(d.ok("-Ln"), before, "a refused reload changes nothing");

    drop(d);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = server.join();
}

#[test]
fn a_missing_net_namespace_is_refused_at_start_with_its_name() {
    let dir = TempDir::new("netns-missing");
    let name = format!("rvs-ns-missing-{}", std::process::id());
    let path = dir.write("keepalived.conf", &conf(&name, 80, 8080));
    let err = Launch::at(&dir.path().join("rvsd.sock"))
        .plane("proxy")
        .arg("-f")
        .arg(&path)
        .refused();
    assert!(
        err.contains(&format!("net_namespace {name}"))
            && err.contains(&format!("ip netns add {name}")),
        "{err}"
    );
    assert!(
        !dir.path().join("rvsd.sock").exists(),
        "no control socket: nothing started"
    );

    // `--check` enters nothing: it says where rvsd would run.
    let out = Command::new(RVSD)
        .arg("-f")
        .arg(&path)
        .arg("--check")
        .output()
        .expect("rvsd --check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("runs in net_namespace {name}"))
            && text.contains("rvsd would refuse to start"),
        "{text}"
    );
}
