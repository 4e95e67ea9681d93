//! The runner against real TCP listeners on loopback and a real
//! `Controller`: what reaches the data plane when a server flaps.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rvs_control::dataplane::{DataPlane, DataPlaneError};
use rvs_control::protocol::Command;

mod support;
use support::{load, start};

/// A data plane that keeps every command it is given, to show what a
/// health change costs the data plane.
struct Recorder(Arc<Mutex<Vec<Command>>>);

impl DataPlane for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }
    fn apply(&mut self, c: &Command) -> Result<(), DataPlaneError> {
        if let Ok(mut v) = self.0.lock() {
            v.push(c.clone());
        }
        Ok(())
    }
}

fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let p = l.local_addr().expect("addr").port();
    (l, p)
}

async fn wait(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(5), "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn rs(port: u16) -> String {
    format!(
        "  real_server 127.0.0.1 {port} {{\n    TCP_CHECK {{\n      connect_timeout 0.5\n      retry 0\n    }}\n  }}\n"
    )
}

#[tokio::test]
async fn a_flapping_server_changes_only_itself_in_the_data_plane() {
    let (flap, flap_port) = listener();
    let (_a, a_port) = listener();
    let (_b, b_port) = listener();
    let text = format!(
        "virtual_server 10.1.1.1 80 {{\n  delay_loop 0.1\n  warmup 0\n  lb_algo rr\n  protocol TCP\n{}{}}}\n\
         virtual_server 10.1.1.2 80 {{\n  delay_loop 0.1\n  warmup 0\n  lb_algo rr\n  protocol TCP\n{}}}\n",
        rs(flap_port),
        rs(a_port),
        rs(b_port)
    );
    let (defs, plan) = load(&text, "runner");
    let log = Arc::new(Mutex::new(Vec::new()));
    let host = start(defs, plan, 7, Box::new(Recorder(log.clone())));
    log.lock().expect("log").clear();
    let host = Arc::new(Mutex::new(host));
    let wake = Arc::new(tokio::sync::Notify::new());
    let task = tokio::spawn(rvs_check::runner::run(host.clone(), wake));

    let in_pool = |port: u16| {
        let h = host.lock().expect("host");
        h.ctl
            .ipvs()
            .services()
            .flat_map(|s| s.dests().iter())
            .any(|d| d.config.port == port)
    };
    // Flap three times: close the listener (refused), then listen again.
    let mut flap = Some(flap);
    for _ in 0..3 {
        drop(flap.take());
        wait("flapping server removed", || !in_pool(flap_port)).await;
        flap = Some(TcpListener::bind(("127.0.0.1", flap_port)).expect("rebind"));
        wait("flapping server back", || in_pool(flap_port)).await;
    }
    task.abort();
    assert!(in_pool(a_port) && in_pool(b_port));
    let cmds = log.lock().expect("log").clone();
    assert_eq!(
        cmds.len(),
        6,
        "one removal and one addition per flap: {cmds:?}"
    );
    for c in &cmds {
        match c {
            Command::DelDest { port, .. } => assert_eq!(*port, flap_port),
            Command::AddDest { dest, .. } => assert_eq!(dest.port, flap_port),
            other => panic!("the data plane saw more than the flapping server: {other:?}"),
        }
    }
    let h = host.lock().expect("host");
    let st = h.health.status();
    assert!(st[0].reals[0].checkers[0].last_failure.as_deref() == Some("connection refused"));
    let tr = h.health.transitions();
    assert!(
        tr.iter()
            .any(|(l, to, n)| l.1.ends_with(&format!(":{flap_port}")) && *to == "down" && *n == 3),
        "{tr:?}"
    );
    assert!(h.health.lateness().count() > 0);
}
