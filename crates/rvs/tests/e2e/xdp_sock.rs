//! `rvsd --dataplane xdp,sock`: one daemon, one service table, two data
//! planes. A client in another namespace reaches the VIP through the XDP
//! program on the director's eth0 (DR, as xdp_rvsd.rs does); a process in
//! the director's namespace and in a cgroup this test made reaches the same
//! VIP through the socket hooks (connected straight to a real server,
//! getpeername = the VIP). A weight-0 drain holds for both; `rvsadm -Ln`
//! shows the one table, `-Lcn` both planes' connections, `--stats` both
//! planes' counts; the sock plane's metrics are scraped from `--http`.
//!
//! `ip netns exec` mounts a fresh /sys, which hides the cgroup v2 mount:
//! rvsd is started by a shell that mounts the unified hierarchy again on
//! the (empty) /sys/fs/cgroup of that private mount namespace, so
//! `--cgroup` names the test's cgroup there.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rvs_testbed::{Cgroup, skip_or_fail};

use crate::harness::{
    Adopted, Launch, Rvsadm, TempDir, http_get, real_server_fields, samples, within,
};
use crate::netns::{Bed, Host, connect, spread};

const T: Duration = Duration::from_secs(3);
const CHILD: &str = "RVS_XDP_SOCK_CHILD";

fn vip() -> SocketAddr {
    "10.77.0.100:80".parse().expect("vip")
}

/// Not a test: the local client, run by the test inside its cgroup and the
/// director's namespace (`RVS_XDP_SOCK_CHILD` set, `--ignored --exact`);
/// ignored when run alone, a failure when run by hand without the variable. `conns N`: N connections, each printing `RESULT name peer`
/// (`RESULT refused ERR` when connect fails). `hold`: one connection,
/// `RESULT hold name`, then after a line on stdin an echo through it,
/// `RESULT echo TEXT`.
#[test]
#[ignore = "the child process of the xdp_sock tests, which run it with --ignored --exact"]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        panic!("run by the xdp_sock tests only ({CHILD} unset)");
    };
    let args: Vec<&str> = mode.split(' ').collect();
    let out = &mut std::io::stdout();
    match args[0] {
        "conns" => {
            let n: usize = args[1].parse().expect("count");
            for _ in 0..n {
                match TcpStream::connect_timeout(&vip(), T) {
                    Ok(s) => {
                        let peer = s.peer_addr().expect("getpeername");
                        s.set_read_timeout(Some(T)).expect("timeout");
                        let mut name = String::new();
                        BufReader::new(&s).read_line(&mut name).expect("greeting");
                        writeln!(out, "RESULT {} {peer}", name.trim()).expect("stdout");
                    }
                    Err(e) => writeln!(out, "RESULT refused {e}").expect("stdout"),
                }
            }
        }
        "hold" => {
            let s = TcpStream::connect_timeout(&vip(), T).expect("connect to the VIP");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let mut r = BufReader::new(s.try_clone().expect("clone"));
            let mut name = String::new();
            r.read_line(&mut name).expect("greeting");
            writeln!(out, "RESULT hold {}", name.trim()).expect("stdout");
            out.flush().expect("flush");
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).expect("stdin");
            (&s).write_all(b"again\n").expect("write");
            let mut echo = String::new();
            r.read_line(&mut echo).expect("echo");
            writeln!(out, "RESULT echo {}", echo.trim()).expect("stdout");
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// The child in `cg` and in `host`'s namespace.
fn local(cg: &Cgroup, host: &Host, mode: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let exe = exe.to_str().expect("utf-8");
    let mut c = cg.command(
        Path::new("ip"),
        &[
            "netns",
            "exec",
            &host.ns,
            exe,
            "--ignored",
            "--exact",
            "xdp_sock::child",
            "--nocapture",
            "--test-threads=1",
        ],
    );
    c.env(CHILD, mode);
    c
}

fn results(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_owned()))
        .collect()
}

/// `n` local connections: the servers' names (or `refused ...`), each
/// checked to see the VIP as its peer.
fn local_conns(cg: &Cgroup, host: &Host, n: usize) -> Vec<String> {
    let out = local(cg, host, &format!("conns {n}"))
        .stdin(Stdio::null())
        .output()
        .expect("running the local client");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "local client failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = results(&text);
    assert_eq!(got.len(), n, "{text}");
    got.iter()
        .map(|r| {
            let (name, peer) = r.split_once(' ').expect("name and peer");
            if name != "refused" {
                assert_eq!(peer, vip().to_string(), "getpeername is the VIP: {r}");
            }
            name.to_owned()
        })
        .collect()
}

/// A held local connection, killed when dropped.
struct Held {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
    server: String,
}

impl Held {
    fn start(cg: &Cgroup, host: &Host) -> Held {
        let mut child = local(cg, host, "hold")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the local client");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let server = Self::next(&mut out)
            .strip_prefix("hold ")
            .expect("hold line")
            .to_owned();
        Held { child, out, server }
    }

    fn next(out: &mut BufReader<std::process::ChildStdout>) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = out.read_line(&mut line).expect("child stdout");
            assert!(n > 0, "the local client ended without a result");
            if let Some((_, r)) = line.split_once("RESULT ") {
                return r.trim().to_owned();
            }
        }
    }

    /// Echo through the held connection; what came back.
    fn echo(mut self) -> String {
        self.child
            .stdin
            .as_mut()
            .expect("stdin")
            .write_all(b"go\n")
            .expect("write to the child");
        Self::next(&mut self.out)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// rvsd with both planes in the director's namespace (killed by the bed).
struct Daemon {
    rvsd: Adopted,
    http: &'static str,
    ns: String,
}

/// `rvsd --dataplane xdp,sock --interface eth0 --cgroup CG` in `dir`'s
/// namespace, behind the shell that mounts the cgroup v2 hierarchy there
/// (see the module doc); more arguments may follow.
pub(crate) fn launch(tag: &str, dir: &Host, cg: &Cgroup) -> Launch {
    let root = rvs_testbed::cgroup::unified_root().expect("cgroup v2");
    let rel = cg.path().strip_prefix(&root).expect("under the root");
    let inner = Path::new("/sys/fs/cgroup").join(rel);
    Launch::new(tag)
        .wrapped(&[
            "ip",
            "netns",
            "exec",
            &dir.ns,
            "sh",
            "-c",
            r#"mount -t cgroup2 none /sys/fs/cgroup && exec "$@""#,
            "sh",
        ])
        .plane("xdp,sock")
        .args(["--interface", "eth0", "--cgroup"])
        .arg(&inner)
}

impl Daemon {
    fn start(bed: &mut Bed, dir: &Host, cg: &Cgroup) -> Daemon {
        let http = "127.0.0.1:9180";
        let rvsd = launch("xdp-sock", dir, cg)
            .args(["--http", http])
            .adopt(bed);
        Daemon {
            rvsd,
            http,
            ns: dir.ns.clone(),
        }
    }

    /// GET /metrics (from inside the director's namespace).
    fn metrics(&self) -> String {
        let addr = self.http;
        rvs_testbed::in_ns(&self.ns, move || http_get(addr, "/metrics"))
    }
}

impl Rvsadm for Daemon {
    fn socket(&self) -> &Path {
        &self.rvsd.socket
    }
}

/// The value of the sample of `family` whose line contains every `label`.
fn sample(text: &str, family: &str, labels: &[&str]) -> Option<u64> {
    samples(text, family, labels).next()
}

/// Conns per real server from `-L -n --stats`, by address.
fn conns(d: &Daemon) -> std::collections::BTreeMap<String, u64> {
    real_server_fields(&d.ok("-L -n --stats"))
        .filter_map(|f| Some((f.first()?.to_string(), f.get(1)?.parse().ok()?)))
        .collect()
}

#[test]
fn xdp_sock_one_table_external_through_xdp_local_at_the_socket() {
    let test = "xdp_sock_one_table_external_through_xdp_local_at_the_socket";
    // Before the bed: dropped after it (the bed kills rvsd and the
    // clients, then the cgroup is empty and goes).
    let Some(cg) = Cgroup::for_test(test, "rvse2exdpsock") else {
        return;
    };
    let Some((mut bed, client, dir)) = crate::netns::director_bed(test) else {
        return;
    };
    let rs = bed.real_servers(2, &["--mode", "dr"]);
    let d = Daemon::start(&mut bed, &dir, &cg);
    d.ok("-A -t 10.77.0.100:80 -s rr");
    for h in &rs {
        d.ok(&format!("-a -t 10.77.0.100:80 -r {}:80 -g", h.addr));
    }

    // A service one plane cannot carry goes to the other: the sock plane
    // skips a port-zero service, the XDP plane takes it (and the skip is
    // counted); one neither can carry (fwmark) is refused with both reasons.
    d.ok("-A -t 10.77.0.100:0 -s rr -p 300");
    assert_eq!(
        sample(
            &d.metrics(),
            "rvs_dataplane_services_skipped",
            &[r#"plane="sock""#]
        ),
        Some(1)
    );
    d.ok("-D -t 10.77.0.100:0");
    let o = d.adm("-A -f 7 -s rr");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("no data plane can carry it")
            && err.contains("xdp data plane")
            && err.contains("sock data plane"),
        "{err}"
    );
    let table = d.ok("-L -n");
    assert_eq!(
        table.lines().filter(|l| l.starts_with("TCP")).count(),
        1,
        "one service: {table}"
    );
    assert!(table.contains("10.77.0.100:80"), "{table}");

    // External: through XDP, once both real servers' MACs are resolved.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut names = std::collections::BTreeSet::new();
    let mut external = 0u64;
    while Instant::now() < deadline && names.len() < 2 {
        if let Ok(c) = connect(&client, vip(), Duration::from_millis(500)) {
            external += 1;
            names.insert(c.server);
        }
    }
    assert_eq!(
        names.len(),
        2,
        "only {names:?} became reachable through XDP"
    );
    let (seen, failed) = spread(&client, vip(), 10, T);
    assert_eq!(failed, 0, "{seen:?}");
    assert_eq!(
        seen.values().copied().collect::<Vec<_>>(),
        [5, 5],
        "{seen:?}"
    );
    external += 10;

    // Local: at the socket (the sock plane's own rr: 3 and 3).
    let got = local_conns(&cg, &dir, 6);
    let rs0 = got.iter().filter(|n| *n == "rs0").count();
    let rs1 = got.iter().filter(|n| *n == "rs1").count();
    assert_eq!((rs0, rs1), (3, 3), "{got:?}");
    let mut local = 6u64;

    // -Lcn: a held connection of each plane, the external one with the
    // client's address, the local one with the director's.
    let mut ext_live = connect(&client, vip(), T).expect("held external connection");
    external += 1;
    let held = Held::start(&cg, &dir);
    local += 1;
    within(
        "-Lcn lists both planes' connections",
        Duration::from_secs(6),
        || {
            let l = d.ok("-L -c -n");
            l.lines()
                .any(|x| x.contains("10.77.0.10:") && x.contains("10.77.0.100:80"))
                && l.lines()
                    .any(|x| x.contains("10.77.0.2:") && x.contains("10.77.0.100:80"))
        },
    );

    // Drain the real server the held local connection has: neither plane
    // gives it new connections; both held connections keep working.
    let drained = if held.server == "rs0" { &rs[0] } else { &rs[1] };
    let other_name = if held.server == "rs0" { "rs1" } else { "rs0" };
    d.ok(&format!(
        "-e -t 10.77.0.100:80 -r {}:80 -g -w 0",
        drained.addr
    ));
    let (seen, failed) = spread(&client, vip(), 6, T);
    assert_eq!(failed, 0);
    assert_eq!(
        seen.get(other_name),
        Some(&6),
        "XDP after the drain: {seen:?}"
    );
    external += 6;
    let got = local_conns(&cg, &dir, 4);
    assert!(
        got.iter().all(|n| n == other_name),
        "sock after the drain: {got:?}"
    );
    local += 4;
    assert_eq!(held.echo(), "echo again", "the held local connection lives");
    ext_live
        .echo("drained but alive", T)
        .expect("the held external connection lives");

    // --stats: the sum of both planes' connections. The XDP plane counts
    // flows it scheduled, the sock plane sockets it gave a real server.
    within(
        "--stats adds both planes' connections",
        Duration::from_secs(6),
        || conns(&d).values().sum::<u64>() == external + local,
    );

    // Metrics: the sock plane's own families count the local clients only.
    let m = d.metrics();
    assert_eq!(
        sample(&m, "rvs_sock_tcp_connections_total", &[]),
        Some(local),
        "{m}"
    );
    let other_addr = if other_name == "rs0" {
        rs[0].addr
    } else {
        rs[1].addr
    };
    assert_eq!(
        sample(
            &m,
            "rvs_sock_backend_connections_total",
            &[&format!("remote_address=\"{other_addr}\"")]
        ),
        // 3 before the drain, 4 after; the held one is on the drained one.
        Some(3 + 4),
        "{m}"
    );
    assert_eq!(sample(&m, "rvs_sock_refused_no_dest_total", &[]), Some(0));
    assert!(m.contains("rvs_xdp_embryonic_flows_total"), "{m}");

    // Nothing schedulable at all: the local connect is refused (EPERM),
    // counted.
    d.ok(&format!("-e -t 10.77.0.100:80 -r {other_addr}:80 -g -w 0"));
    assert_eq!(local_conns(&cg, &dir, 1), ["refused"]);
    within("the refusal is counted", Duration::from_secs(4), || {
        sample(&d.metrics(), "rvs_sock_refused_no_dest_total", &[]) == Some(1)
    });
    drop(ext_live);
    drop(bed);
}

/// Refusals at start name the plane: without --interface, the xdp plane;
/// with a --cgroup that is not a cgroup v2 directory, the sock plane.
#[test]
fn xdp_sock_start_refusals_name_the_plane() {
    let test = "xdp_sock_start_refusals_name_the_plane";
    if !rvs_testbed::is_root() {
        return skip_or_fail(test, "needs root (BPF programs)");
    }
    let tmp = TempDir::new("xdp-sock-refusals");
    let run = |args: &[&str]| {
        Launch::at(&tmp.path().join("rvsd.sock"))
            .plane("xdp,sock")
            .args(args)
            .refused()
    };
    let e = run(&[]);
    assert!(e.contains("the xdp plane needs --interface"), "{e}");
    let e = run(&[
        "--interface",
        "lo",
        "--cgroup",
        tmp.path().to_str().expect("utf-8"),
    ]);
    assert!(
        e.contains("--dataplane sock") && e.contains("not a cgroup v2 directory"),
        "{e}"
    );
}
