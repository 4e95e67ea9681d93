//! `rvsd realserver --toa`: a server process in a cgroup sees, through
//! accept(2) and getpeername(2), the client address a TOA option (kind 254)
//! in the connection's SYN carries, and without `--toa` the real source.
//!
//! Here without a director (fullnat.rs's `fullnat_xdp_toa_nginx_*` show
//! the XDP FULLNAT director inserting it), the client runs in a cgroup
//! of its own with the test fixture `bpf/toa_test_writer.c`
//! ([`ToaTestWriter`]), which writes a real TOA into its SYNs; the reader
//! (`bpf/toa.c`) parses it off the wire. Both ends are on loopback; both
//! run as child processes (this test binary re-run with `--ignored --exact
//! toa::toa_child`) moved into their cgroup before they open a socket,
//! because a socket belongs to the cgroup of the process that opens it.
//! Then nginx as the real server: its access log's `$remote_addr`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rvs_xdp::toa::ToaTestWriter;

use crate::harness::{RVSD, TempDir};

/// The marker of a child's report lines (libtest prints its own lines too).
const MARK: &str = "RVS_TOA ";

/// A cgroup v2 directory of this test's, removed on drop (with a TOA
/// reader pinned on it).
pub(crate) struct Cgroup(PathBuf);

impl Cgroup {
    pub(crate) fn new(tag: &str) -> Cgroup {
        let root = rvs_xdp::toa::default_cgroup();
        let p = root.join(rvs_testbed::unique_name(&format!("rvs-toa-{tag}-")));
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        Cgroup(p)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    pub(crate) fn arg(&self) -> &str {
        self.0.to_str().expect("a UTF-8 cgroup path")
    }

    /// `cmd args…` started inside this cgroup (moved in before it runs).
    pub(crate) fn spawn(&self, cmd: &str, args: &[&str], envs: &[(&str, String)]) -> Child {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
            .arg(self.arg())
            .arg(cmd)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            c.env(k, v);
        }
        c.spawn().unwrap_or_else(|e| panic!("spawning {cmd}: {e}"))
    }

    /// This test binary as a TOA child (`role` for [`toa_child`]).
    fn child(&self, role: String) -> Child {
        self.child_in(None, role)
    }

    /// [`Cgroup::child`] inside network namespace `ns` (`ip netns exec`)
    /// when given.
    pub(crate) fn child_in(&self, ns: Option<&str>, role: String) -> Child {
        let me = std::env::current_exe().expect("the test binary's path");
        let me = me.to_str().expect("a UTF-8 path");
        let (cmd, mut args) = match ns {
            Some(ns) => ("ip", vec!["netns", "exec", ns, me]),
            None => (me, Vec::new()),
        };
        args.extend([
            "--ignored",
            "--exact",
            "toa::toa_child",
            "--nocapture",
            "--test-threads=1",
        ]);
        self.spawn(cmd, &args, &[("RVS_TOA_CHILD", role)])
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = rvs_xdp::toa::detach_pinned(&self.0);
        // The children have exited; the kernel may take a moment to let go.
        rvs_testbed::wait_for(Duration::from_secs(5), || {
            std::fs::remove_dir(&self.0).is_ok() || !self.0.exists()
        });
    }
}

/// Kills and reaps a child on drop (also when the test fails).
pub(crate) struct Reap(pub(crate) Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The report lines of a child, each without the marker.
pub(crate) struct Lines(std::io::Lines<BufReader<std::process::ChildStdout>>);

impl Lines {
    pub(crate) fn of(c: &mut Child) -> Lines {
        Lines(BufReader::new(c.stdout.take().expect("piped stdout")).lines())
    }

    /// The next report line (panics when the child ends first).
    pub(crate) fn next(&mut self) -> String {
        for l in self.0.by_ref() {
            let l = l.expect("reading a child's stdout");
            // libtest's "test NAME ... " may precede it on the line.
            if let Some(at) = l.find(MARK) {
                return l[at + MARK.len()..].to_owned();
            }
        }
        panic!("the child exited without reporting");
    }
}

/// One accepted connection as the server saw it: (accept's peer,
/// getpeername's peer), and the client's own address.
fn one_connection(srv_cg: &Cgroup, cli_cg: &Cgroup, bind: &str) -> (String, String, String) {
    let mut srv = Reap(srv_cg.child(format!("server {bind}")));
    let mut srv_lines = Lines::of(&mut srv.0);
    let listen = srv_lines.next();
    let addr = listen
        .strip_prefix("listen ")
        .expect("listen line")
        .to_owned();
    let mut cli = Reap(cli_cg.child(format!("client {addr}")));
    let local = Lines::of(&mut cli.0).next();
    let local = local.strip_prefix("local ").expect("local line").to_owned();
    let seen = srv_lines.next();
    let mut it = seen.split(' ');
    assert_eq!(it.next(), Some("accept"), "{seen}");
    let accept = it.next().expect("accept's address").to_owned();
    assert_eq!(it.next(), Some("getpeername"), "{seen}");
    let peer = it.next().expect("getpeername's address").to_owned();
    (accept, peer, local)
}

/// Not a test: the child process of the tests below, by `RVS_TOA_CHILD`:
/// `server ADDR` listens on ADDR (port 0), reports `listen ADDR`, accepts
/// one connection and reports `accept PEER getpeername PEER`; `client
/// ADDR` connects, reports `local ADDR`, and (like `http ADDR`, which sends
/// an HTTP request and reads the reply) waits for the server to close.
#[test]
#[ignore = "the child process of the toa tests, which run it with --ignored --exact"]
fn toa_child() {
    let Ok(role) = std::env::var("RVS_TOA_CHILD") else {
        panic!("run by the toa tests only (RVS_TOA_CHILD unset)");
    };
    let (what, addr) = role.split_once(' ').expect("ROLE ADDR");
    let addr: SocketAddr = addr.parse().expect("an address");
    match what {
        "server" => {
            let l = TcpListener::bind(addr).expect("bind");
            println!("{MARK}listen {}", l.local_addr().expect("local address"));
            let (s, a) = l.accept().expect("accept");
            println!(
                "{MARK}accept {a} getpeername {}",
                s.peer_addr().expect("getpeername")
            );
        }
        "client" | "http" => {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            println!("{MARK}local {}", s.local_addr().expect("local address"));
            if what == "http" {
                s.write_all(b"GET / HTTP/1.0\r\nHost: rvs\r\n\r\n")
                    .expect("request");
            }
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            if what == "http" {
                let reply = String::from_utf8_lossy(&rest);
                assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
                println!("{MARK}done");
            }
        }
        _ => panic!("unknown role {what}"),
    }
}

pub(crate) fn can_run(test: &str) -> bool {
    if !rvs_testbed::require_root(test, "cgroup BPF programs need root") {
        return false;
    }
    let root = rvs_xdp::toa::default_cgroup();
    if std::fs::metadata(root.join("cgroup.procs")).is_err() {
        rvs_testbed::skip_or_fail(test, format!("no cgroup v2 at {}", root.display()));
        return false;
    }
    true
}

pub(crate) fn realserver(args: &[&str]) -> String {
    let o = rvs_testbed::sh(&[&[RVSD, "realserver"], args].concat());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn toa_getpeername_and_accept_return_the_option_address() {
    let test = "toa_getpeername_and_accept_return_the_option_address";
    if !can_run(test) {
        return;
    }
    let (srv, cli) = (Cgroup::new("srv"), Cgroup::new("cli"));
    let toa4: SocketAddr = "203.0.113.7:4242".parse().unwrap();
    let mut writer = ToaTestWriter::attach(cli.path(), toa4).expect("the TOA writer attaches");

    // Without the reader: the real source, although the SYN carries a TOA.
    let (accept, peer, local) = one_connection(&srv, &cli, "127.0.0.1:0");
    assert_eq!(
        (accept.as_str(), peer.as_str()),
        (local.as_str(), local.as_str())
    );

    let out = realserver(&["--toa", "--cgroup", srv.arg()]);
    assert!(out.contains("TOA reader on cgroup"), "{out}");
    let again = realserver(&["--toa", "--cgroup", srv.arg()]);
    assert!(again.contains("kept the TOA reader"), "{again}");

    // With it: accept and getpeername return the TOA's address.
    let (accept, peer, local) = one_connection(&srv, &cli, "127.0.0.1:0");
    assert_eq!(accept, toa4.to_string(), "client was {local}");
    assert_eq!(peer, toa4.to_string());
    // An IPv6 socket: the IPv4 TOA v4-mapped, as toa.ko does.
    let (accept, peer, _) = one_connection(&srv, &cli, "[::1]:0");
    assert_eq!(accept, "[::ffff:203.0.113.7]:4242");
    assert_eq!(peer, accept);
    // An IPv6 TOA on an IPv6 socket.
    let toa6: SocketAddr = "[2001:db8::7]:4243".parse().unwrap();
    writer.set(toa6).expect("writer address");
    let (accept, peer, _) = one_connection(&srv, &cli, "[::1]:0");
    assert_eq!(
        (accept.as_str(), peer.as_str()),
        ("[2001:db8::7]:4243", "[2001:db8::7]:4243")
    );
    // It cannot go through an IPv4 sockaddr: the real source, counted.
    let (accept, _, local) = one_connection(&srv, &cli, "127.0.0.1:0");
    assert_eq!(accept, local);
    // A TOA in the handshake's last ACK (LVS's and DPVS's place for it).
    writer.set(toa4).expect("writer address");
    writer.set_in_ack(true).expect("writer mode");
    let (accept, peer, _) = one_connection(&srv, &cli, "127.0.0.1:0");
    assert_eq!(
        (accept.as_str(), peer.as_str()),
        ("203.0.113.7:4242", "203.0.113.7:4242")
    );
    writer.set_in_ack(false).expect("writer mode");
    let stats = rvs_xdp::toa::pinned_stats(srv.path())
        .expect("stats")
        .expect("a reader pinned");
    assert_eq!(stats.from_ack, 1, "{stats:?}");
    assert_eq!(stats.from_syn, 4, "{stats:?}");
    assert_eq!(stats.mapped, 2, "{stats:?}");
    assert!(stats.v6_on_v4 >= 1, "{stats:?}");
    assert_eq!(stats.bad, 0, "{stats:?}");

    let off = realserver(&["--toa", "--undo", "--cgroup", srv.arg()]);
    assert!(off.contains("TOA reader detached"), "{off}");
    let off = realserver(&["--toa", "--undo", "--cgroup", srv.arg()]);
    assert!(off.contains("absent"), "{off}");
    writer.set(toa4).expect("writer address");
    let (accept, peer, local) = one_connection(&srv, &cli, "127.0.0.1:0");
    assert_eq!(
        (accept.as_str(), peer.as_str()),
        (local.as_str(), local.as_str())
    );
}

#[test]
fn toa_refuses_a_path_that_is_not_a_cgroup() {
    let test = "toa_refuses_a_path_that_is_not_a_cgroup";
    if !can_run(test) {
        return;
    }
    let dir = TempDir::new("toa-not-cgroup");
    let o = Command::new(RVSD)
        .args(["realserver", "--toa", "--cgroup"])
        .arg(dir.path())
        .output()
        .expect("rvsd runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("not a cgroup v2 directory"), "{err}");
}

/// nginx in the server cgroup, serving `port` on 127.0.0.1, its access log
/// `$remote_addr:$remote_port` per line.
struct Nginx {
    child: Reap,
    log: PathBuf,
}

/// An nginx.conf in `dir` for a server on `listen` that logs each client
/// as `ADDR:PORT` (its `$remote_addr`, the TOA address where the option is
/// read) to `DIR/access.log`: the file and the log's path.
pub(crate) fn nginx_conf(dir: &TempDir, listen: &str) -> (PathBuf, PathBuf) {
    let log = dir.path().join("access.log");
    let _ = std::fs::remove_file(&log);
    let conf = dir.write(
        "nginx.conf",
        &format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\nuser root;\n\
             pid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  log_format toa '$remote_addr:$remote_port';\n\
               access_log {log} toa;\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
               server {{ listen {listen}; location / {{ return 200 \"ok\\n\"; }} }}\n}}\n",
            d = dir.path().display(),
            log = log.display(),
        ),
    );
    (conf, log)
}

impl Nginx {
    fn start(cg: &Cgroup, dir: &TempDir, port: u16) -> Nginx {
        let (conf, log) = nginx_conf(dir, &format!("127.0.0.1:{port}"));
        let conf = conf.to_str().expect("UTF-8").to_owned();
        let prefix = format!("{}/", dir.path().display());
        let child = Reap(cg.spawn("nginx", &["-e", "stderr", "-p", &prefix, "-c", &conf], &[]));
        let up = rvs_testbed::wait_for(Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "nginx did not start listening on {port}");
        Nginx { child, log }
    }

    /// The access log's lines.
    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The log line of the request from `local` (the client's own address),
    /// or of its TOA: the last line once the request is logged.
    fn logged_after(&self, before: usize) -> String {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let l = self.lines();
            if l.len() > before {
                return l[l.len() - 1].clone();
            }
            assert!(Instant::now() < end, "nginx logged nothing");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One HTTP request from the client cgroup: the client's own address.
fn http(cli: &Cgroup, port: u16) -> String {
    let mut c = Reap(cli.child(format!("http 127.0.0.1:{port}")));
    let mut lines = Lines::of(&mut c.0);
    let local = lines.next();
    assert_eq!(lines.next(), "done");
    local.strip_prefix("local ").expect("local line").to_owned()
}

#[test]
fn toa_nginx_access_log_shows_the_option_address() {
    let test = "toa_nginx_access_log_shows_the_option_address";
    if !can_run(test) || !rvs_testbed::require_tools(test, &["nginx"]) {
        return;
    }
    let (srv, cli) = (Cgroup::new("nginx"), Cgroup::new("ncli"));
    let toa4: SocketAddr = "198.51.100.23:5150".parse().unwrap();
    let _writer = ToaTestWriter::attach(cli.path(), toa4).expect("the TOA writer attaches");
    let port = crate::harness::free_port();
    let dir = TempDir::new("toa-nginx");

    // Without --toa: the real source.
    let nginx = Nginx::start(&srv, &dir, port);
    let before = nginx.lines().len();
    let local = http(&cli, port);
    assert_eq!(nginx.logged_after(before), local);
    drop(nginx);

    // With it (nginx restarted: its listener must be opened after).
    let out = realserver(&["--toa", "--cgroup", srv.arg()]);
    assert!(out.contains("TOA reader on cgroup"), "{out}");
    let nginx = Nginx::start(&srv, &dir, port);
    let before = nginx.lines().len();
    let local = http(&cli, port);
    assert_eq!(
        nginx.logged_after(before),
        toa4.to_string(),
        "client was {local}"
    );
    drop(nginx.child);
    let off = realserver(&["--toa", "--undo", "--cgroup", srv.arg()]);
    assert!(off.contains("TOA reader detached"), "{off}");
}

#[test]
fn realserver_needs_vips_or_toa() {
    let run = |args: &[&str]| {
        let o = Command::new(RVSD)
            .arg("realserver")
            .args(args)
            .output()
            .expect("rvsd runs");
        assert!(!o.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(run(&[]).contains("nothing to do"));
    assert!(run(&["--mode", "dr"]).contains("--mode needs --vip"));
    assert!(run(&["--vip", "10.0.0.1"]).contains("--vip needs --mode"));
    assert!(run(&["--cgroup", "/sys/fs/cgroup"]).contains("--toa"));
}
