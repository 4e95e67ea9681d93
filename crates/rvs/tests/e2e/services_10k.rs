//! Kubernetes-scale service counts (issue 28): 10,000 services, each with
//! its own real server entry, restored with one `rvsadm -R`, on the sock
//! plane and on the XDP plane; a client reaches the first and the last.
//! Both planes held 4,096 before (`RVS_SOCK_SVC_MAX`, `RVS_MAX_SERVICES`):
//! the XDP test starts with `--max-services 4096` to show the last service
//! unreachable, then restarts rvsd over the same pins and saved table with
//! the default size (the upgrade: the 4,096-entry maps migrate, the rest
//! is programmed).

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rvs_testbed::{Cgroup, Server};

use crate::harness::{Launch, Pinned, RVSADM, Rvsd, TempDir, log_lines, within};
use crate::netns::connect;

/// Services of each test.
const N: u16 = 10_000;
/// The first service's port (the n-th is `PORT0 + n`).
const PORT0: u16 = 20_000;

/// `rvsadm -R` lines: `n` NAT services on `vip`, ports from [`PORT0`], rr,
/// each with the real server `rs`.
fn batch(vip: &str, rs: &str, n: u16) -> String {
    let mut b = String::new();
    for p in PORT0..PORT0 + n {
        b.push_str(&format!(
            "-A -t {vip}:{p} -s rr\n-a -t {vip}:{p} -r {rs} -m\n"
        ));
    }
    b
}

/// `rvsadm -R` of `batch` against the daemon on `socket`; must succeed.
fn restore(socket: &Path, batch: &str) {
    let mut child = Command::new(RVSADM)
        .arg("-R")
        .env("RVS_SOCKET", socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rvsadm");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(batch.as_bytes())
        .expect("write the batch");
    let out = child.wait_with_output().expect("rvsadm -R");
    assert!(
        out.status.success(),
        "rvsadm -R: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Services `rvsadm -Ln` lists.
fn listed(listing: &str) -> usize {
    listing.lines().filter(|l| l.starts_with("TCP ")).count()
}

/// One connection from a bash inside `cg` to `vip:port`: the greeting, or
/// "refused".
fn greeting_from(cg: &Cgroup, vip: &str, port: u16) -> String {
    let script = format!(
        "if exec 3<>/dev/tcp/{vip}/{port}; then head -1 <&3; else echo refused; fi 2>/dev/null"
    );
    let out = cg
        .command(Path::new("/bin/bash"), &["-c", &script])
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn sock_plane_holds_10000_services() {
    let test = "sock_plane_holds_10000_services";
    let Some(cg) = Cgroup::for_test(test, "rvse2esock10k") else {
        return;
    };
    let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    let rs = l.local_addr().expect("addr").to_string();
    let _backend = Server::tcp(l, |mut c, _| {
        let _ = writeln!(c, "rs");
    });
    let vip = format!("127.79.{}.1", std::process::id() % 250);
    let cgroup = cg.path().to_str().expect("utf-8").to_owned();
    let d = Rvsd::start_with(
        TempDir::new("sock-10k"),
        "sock",
        None,
        &["--cgroup", &cgroup],
    );
    restore(&d.socket, &batch(&vip, &rs, N));
    assert_eq!(listed(&d.ok("-L -n")), usize::from(N));
    let last = PORT0 + N - 1;
    within(
        "the 10,000th service reachable through the sock plane",
        Duration::from_secs(30),
        || greeting_from(&cg, &vip, last) == "rs",
    );
    assert_eq!(greeting_from(&cg, &vip, PORT0), "rs", "the first one too");
    drop(d);
}

#[test]
fn xdp_plane_holds_10000_services_and_grows_from_4096_over_its_pins() {
    let test = "xdp_plane_holds_10000_services_and_grows_from_4096_over_its_pins";
    let Some((mut bed, client, dir)) = crate::netns::director_bed(test) else {
        return;
    };
    let rs = bed.nat_servers(&dir, 1);
    let state = TempDir::new("xdp-10k");
    let mut rvsd = Pinned::new(
        &dir.ns,
        rvs_testbed::unique_name("svc10k"),
        state.path().join("rvsd.sock"),
    );
    let launch = |rvsd: &Pinned, extra: &[&str]| -> Launch {
        rvsd.launch("xdp")
            .args(["--state-dir", state.path().to_str().expect("utf-8")])
            .args(extra)
    };
    let vip = "10.77.0.100";
    let at = |port: u16| SocketAddr::new(vip.parse().expect("vip"), port);
    let t = Duration::from_secs(2);
    let last = PORT0 + N - 1;

    // The old size: the plane takes 4,096 and refuses the rest; the
    // control plane holds all 10,000.
    let log = state.path().join("rvsd.log");
    rvsd.start(launch(&rvsd, &["--max-services", "4096"]).log_file(&log));
    restore(&rvsd.socket, &batch(vip, &format!("{}:80", rs[0].addr), N));
    use crate::harness::Rvsadm as _;
    assert_eq!(listed(&rvsd.ok("-L -n")), usize::from(N));
    within(
        "the first service reachable",
        Duration::from_secs(30),
        || connect(&client, at(PORT0), t).is_ok(),
    );
    assert!(
        connect(&client, at(last), t).is_err(),
        "the 10,000th service is not in a plane of 4,096"
    );
    // The log names the first refusals, says the others are counted, and
    // gives their total (every ten seconds while rvsadm -R goes on, one
    // command at a time): short (5,904 warnings, one a service, before).
    let total = "commands in all found no room in `svc_info`";
    within("a total of the refusals", Duration::from_secs(60), || {
        log_lines(&log).iter().any(|l| l.contains(total))
    });
    let lines = log_lines(&log);
    let count = |what: &str| lines.iter().filter(|l| l.contains(what)).count();
    let (named, more) = (
        count(": no room in `svc_info`"),
        count("more than 16 commands found no room in `svc_info`"),
    );
    assert!(
        named == 17 && more == 1 && lines.len() < 100,
        "{named} refusals named (17 expected), {more} lines on the others (1) in {} lines:\n{}",
        lines.len(),
        lines[..lines.len().min(40)].join("\n")
    );

    // Restarted with the default size over its pins and saved table: the
    // service maps migrate into 65,536-entry ones, all 10,000 programmed.
    rvsd.stop("TERM");
    rvsd.start(launch(&rvsd, &[]));
    let info = rvs_xdp::pin::pinned_map_info(
        &rvs_xdp::pin::Instance::new(&rvsd.instance)
            .expect("instance")
            .map_path("svc_info"),
    )
    .expect("svc_info pinned");
    assert_eq!(info.max_entries, rvs_xdp::maps::MAX_SERVICES);
    within(
        "the 10,000th service reachable through the XDP plane",
        Duration::from_secs(60),
        || connect(&client, at(last), t).is_ok(),
    );
    assert_eq!(listed(&rvsd.ok("-L -n")), usize::from(N));
    assert!(
        connect(&client, at(PORT0), t).is_ok(),
        "the first one still"
    );
}
