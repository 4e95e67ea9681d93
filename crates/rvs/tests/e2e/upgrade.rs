//! The proxy plane upgrades in place (`rvsd --takeover`): three real HTTP
//! servers on loopback behind a VIP, wrk-style load — keep-alive clients
//! sending requests back to back plus clients opening a new connection per
//! request — while rvsd is replaced three times, each time by a new
//! process started with the same arguments and `--takeover` while the old
//! one runs. Every request must be answered: no connection refused, reset
//! or cut short; every old process exits 0 by itself within the drain
//! bound; `rvsadm -Ln` answers all along. Root-free.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Launch, RVSADM, RVSD, TempDir, free_port, wait_for_socket};

/// Requests a real server answers on one connection before it closes it
/// with `Connection: close` (nginx's `keepalive_requests`, made small so
/// the old daemons' keep-alive connections end soon after a handover).
const KEEPALIVE_REQUESTS: u32 = 25;
/// The retiring daemons' bound (`--drain-grace`).
const DRAIN_GRACE: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(5);
const KEEPALIVE_CLIENTS: usize = 8;
const NEW_CONN_CLIENTS: usize = 2;
const UPGRADES: usize = 3;

/// A minimal HTTP/1.1 server on 127.0.0.1 (a thread per connection).
struct Server {
    addr: SocketAddr,
    _server: rvs_testbed::Server,
}

impl Server {
    fn start(name: &'static str) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind server");
        let addr = l.local_addr().expect("addr");
        Server {
            addr,
            _server: rvs_testbed::Server::tcp(l, move |c, _| serve_http(c, name)),
        }
    }
}

/// Read one request head (up to the blank line); false at EOF or error.
fn read_head(r: &mut BufReader<TcpStream>, close: &mut bool) -> bool {
    let mut line = String::new();
    let mut first = true;
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        if line == "\r\n" {
            return !first;
        }
        if line.to_ascii_lowercase().starts_with("connection: close") {
            *close = true;
        }
        first = false;
    }
}

fn serve_http(c: TcpStream, name: &str) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(Duration::from_secs(15)));
    let mut r = BufReader::new(c.try_clone().expect("clone"));
    let mut w = c;
    for n in 1..=KEEPALIVE_REQUESTS {
        let mut close = false;
        if !read_head(&mut r, &mut close) {
            return;
        }
        let last = close || n == KEEPALIVE_REQUESTS;
        let body = format!("{name} {n}\n");
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n{body}",
            body.len(),
            if last { "Connection: close\r\n" } else { "" }
        );
        if w.write_all(resp.as_bytes()).is_err() {
            return;
        }
        if last {
            return;
        }
    }
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    connections: AtomicU64,
    connect_errors: AtomicU64,
    resets: AtomicU64,
    /// Any other failure: a timeout, an EOF before the whole response, a
    /// malformed response.
    errors: AtomicU64,
}

impl Tally {
    fn failed(&self, what: &str, e: &std::io::Error) {
        match e.kind() {
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
                self.resets.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        eprintln!("upgrade load: {what}: {e}");
    }
}

fn connect(src: u8, vip: SocketAddr, t: &Tally) -> Option<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    let from = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, src)), 0);
    let r = sock
        .bind(&from.into())
        .and_then(|()| sock.connect_timeout(&vip.into(), IO_TIMEOUT));
    if let Err(e) = r {
        t.connect_errors.fetch_add(1, Ordering::Relaxed);
        eprintln!("upgrade load: connect from {from}: {e}");
        return None;
    }
    let s: TcpStream = sock.into();
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    t.connections.fetch_add(1, Ordering::Relaxed);
    Some(s)
}

/// Read one response: Ok(server closes after it).
fn read_response(r: &mut BufReader<TcpStream>) -> std::io::Result<bool> {
    let mut line = String::new();
    let mut len = None;
    let mut close = false;
    let mut status = true;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                "EOF in a response head",
            ));
        }
        if status {
            if !line.starts_with("HTTP/1.1 200 ") {
                return Err(std::io::Error::other(format!("bad status line {line:?}")));
            }
            status = false;
            continue;
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse::<usize>().ok();
        }
        if lower.starts_with("connection: close") {
            close = true;
        }
    }
    let len = len.ok_or_else(|| std::io::Error::other("no Content-Length"))?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    if !body.starts_with(b"rs") {
        return Err(std::io::Error::other("unexpected body"));
    }
    Ok(close)
}

/// A keep-alive client: requests back to back on one connection, a new
/// connection when the server closes the old one after a response.
fn keepalive_client(id: usize, vip: SocketAddr, stop: &AtomicBool, t: &Tally) {
    let src = 10 + (id % 100) as u8;
    'conn: while !stop.load(Ordering::Relaxed) {
        let Some(s) = connect(src, vip, t) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let mut w = s.try_clone().expect("clone");
        let mut r = BufReader::new(s);
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = w.write_all(b"GET / HTTP/1.1\r\nHost: vip\r\n\r\n") {
                t.failed("keep-alive write", &e);
                continue 'conn;
            }
            match read_response(&mut r) {
                Ok(close) => {
                    t.requests.fetch_add(1, Ordering::Relaxed);
                    if close {
                        continue 'conn;
                    }
                }
                Err(e) => {
                    t.failed("keep-alive read", &e);
                    continue 'conn;
                }
            }
        }
    }
}

/// A client that opens a new connection for every request.
fn new_conn_client(id: usize, vip: SocketAddr, stop: &AtomicBool, t: &Tally) {
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let src = 110 + ((id * 50 + n) % 100) as u8;
        let Some(s) = connect(src, vip, t) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let mut w = s.try_clone().expect("clone");
        let mut r = BufReader::new(s);
        if let Err(e) = w.write_all(b"GET / HTTP/1.1\r\nHost: vip\r\nConnection: close\r\n\r\n") {
            t.failed("new-connection write", &e);
            continue;
        }
        match read_response(&mut r) {
            Ok(true) => {
                t.requests.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => t.failed(
                "new-connection read",
                &std::io::Error::other("no Connection: close"),
            ),
            Err(e) => t.failed("new-connection read", &e),
        }
        // Bounded rate: a few hundred new connections a second per client.
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every rvsd started, killed on drop (even when the test fails).
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// rvsd number `n` on `socket` (proxy plane, `--log-level info`, stderr to
/// `DIR/rvsd-N.log`), taking over from the running one when `takeover`;
/// the caller adds its arguments.
fn rvsd_cmd(dir: &Path, socket: &Path, n: usize, takeover: bool) -> Command {
    let log = std::fs::File::create(dir.join(format!("rvsd-{n}.log"))).expect("log file");
    let mut c = Launch::at(socket)
        .plane("proxy")
        .log_level("info")
        .args(takeover.then_some("--takeover"))
        .command();
    c.stderr(log);
    c
}

fn spawn_rvsd(dir: &Path, socket: &Path, rules: &Path, n: usize, takeover: bool) -> Child {
    rvsd_cmd(dir, socket, n, takeover)
        .arg("--rules")
        .arg(rules)
        .args(["--drain-grace", &DRAIN_GRACE.as_secs().to_string()])
        .spawn()
        .expect("spawn rvsd")
}

/// Wait (bounded: 20 s) for the old rvsd (the first of `d`) to exit after
/// a takeover, calling `tick` between polls; its exit status.
fn old_retires(d: &mut Daemons, dir: &Path, mut tick: impl FnMut()) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(s)) = d.0[0].try_wait() {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the old rvsd did not retire\n{}",
            logs(dir, 2)
        );
        tick();
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn inode(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.ino())
}

fn listing(socket: &Path) -> Option<String> {
    let out = Command::new(RVSADM)
        .arg("-Ln")
        .env("RVS_SOCKET", socket)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn logs(dir: &Path, n: usize) -> String {
    (0..n)
        .map(|i| {
            let p: PathBuf = dir.join(format!("rvsd-{i}.log"));
            format!(
                "--- rvsd-{i}\n{}",
                std::fs::read_to_string(p).unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn proxy_upgrades_in_place_under_load() {
    let started = Instant::now();
    let dir = TempDir::new("upgrade");
    let socket = dir.path().join("rvsd.sock");
    let servers = [
        Server::start("rs1"),
        Server::start("rs2"),
        Server::start("rs3"),
    ];
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut rules = format!("-A -t {vip} -s rr\n");
    for s in &servers {
        rules += &format!("-a -t {vip} -r {} -m -w 1\n", s.addr);
    }
    let rules = dir.write("rules", &rules);
    let mut daemons = Daemons(vec![spawn_rvsd(dir.path(), &socket, &rules, 0, false)]);
    wait_for_socket(&socket, &mut daemons.0[0]);
    let want = format!("TCP  {vip} rr");
    assert!(
        listing(&socket).is_some_and(|l| l.contains(&want)),
        "the first rvsd lists the service"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut load = Vec::new();
    for id in 0..KEEPALIVE_CLIENTS {
        let (stop, t) = (stop.clone(), tally.clone());
        load.push(std::thread::spawn(move || {
            keepalive_client(id, vip, &stop, &t)
        }));
    }
    for id in 0..NEW_CONN_CLIENTS {
        let (stop, t) = (stop.clone(), tally.clone());
        load.push(std::thread::spawn(move || {
            new_conn_client(id, vip, &stop, &t)
        }));
    }
    // rvsadm -Ln all along, against whichever daemon holds the path.
    let adm_runs = Arc::new(AtomicU64::new(0));
    let adm_failures = Arc::new(AtomicU64::new(0));
    let adm = {
        let (stop, runs, fails) = (stop.clone(), adm_runs.clone(), adm_failures.clone());
        let (socket, want) = (socket.clone(), want.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                runs.fetch_add(1, Ordering::Relaxed);
                if !listing(&socket).is_some_and(|l| l.contains(&want)) {
                    fails.fetch_add(1, Ordering::Relaxed);
                    eprintln!("upgrade: rvsadm -Ln failed");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let warm = Duration::from_millis(1500);
    std::thread::sleep(warm);
    let warm_rate = tally.requests.load(Ordering::Relaxed) as f64 / warm.as_secs_f64();
    let mut figures = Vec::new();
    for n in 1..=UPGRADES {
        let before = tally.requests.load(Ordering::Relaxed);
        let old_inode = inode(&socket);
        let t0 = Instant::now();
        daemons
            .0
            .push(spawn_rvsd(dir.path(), &socket, &rules, n, true));
        // The new daemon owns the path once its socket is renamed over it.
        let mut took = None;
        let mut old_exit = None;
        while t0.elapsed() < DRAIN_GRACE + Duration::from_secs(5) {
            if took.is_none() && inode(&socket) != old_inode {
                took = Some(t0.elapsed());
            }
            if let Ok(Some(status)) = daemons.0[n - 1].try_wait() {
                old_exit = Some((t0.elapsed(), status));
            }
            if let Ok(Some(status)) = daemons.0[n].try_wait() {
                panic!(
                    "upgrade {n}: the new rvsd exited: {status}\n{}",
                    logs(dir.path(), n + 1)
                );
            }
            if took.is_some() && old_exit.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let took = took.unwrap_or_else(|| {
            panic!(
                "upgrade {n}: socket never replaced\n{}",
                logs(dir.path(), n + 1)
            )
        });
        let (exited, status) = old_exit.unwrap_or_else(|| {
            panic!(
                "upgrade {n}: the old rvsd did not exit within the drain bound\n{}",
                logs(dir.path(), n + 1)
            )
        });
        assert!(
            status.success(),
            "upgrade {n}: the old rvsd exited with {status}\n{}",
            logs(dir.path(), n + 1)
        );
        assert!(exited <= DRAIN_GRACE + Duration::from_secs(2));
        // Load on the new daemon alone for a while.
        std::thread::sleep(Duration::from_millis(1500));
        let answered = tally.requests.load(Ordering::Relaxed) - before;
        assert!(answered > 0, "upgrade {n}: requests are being answered");
        // Requests a second from the new daemon's start on, against the
        // warm-up before any upgrade (same run).
        let rate = answered as f64 / t0.elapsed().as_secs_f64();
        figures.push((n, took, exited, rate / warm_rate));
    }
    stop.store(true, Ordering::Relaxed);
    for h in load {
        h.join().expect("load thread");
    }
    adm.join().expect("rvsadm thread");
    let load_time = started.elapsed();

    // The last daemon accepted on the handed socket and counts its connections.
    let out = Command::new(RVSADM)
        .args(["-Ln", "--stats"])
        .env("RVS_SOCKET", &socket)
        .output()
        .expect("rvsadm --stats");
    let stats = String::from_utf8_lossy(&out.stdout).into_owned();
    let conns: u64 = stats
        .lines()
        .find(|l| l.starts_with("TCP"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);

    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "upgrade: {} requests on {} connections in {:.1} s across {UPGRADES} takeovers; \
         connect errors {}, resets {}, other errors {}; rvsadm -Ln {} runs, {} failures; \
         last daemon's Conns {conns}",
        g(&tally.requests),
        g(&tally.connections),
        load_time.as_secs_f64(),
        g(&tally.connect_errors),
        g(&tally.resets),
        g(&tally.errors),
        g(&adm_runs),
        g(&adm_failures),
    );
    println!("upgrade: warm-up before any upgrade {warm_rate:.0} requests/s");
    for (n, took, exited, ratio) in &figures {
        println!(
            "upgrade {n}: new rvsd owns the socket after {} ms; old rvsd exited 0 after {} ms; \
             requests/s over the 1.5 s from its start {ratio:.2} x the warm-up",
            took.as_millis(),
            exited.as_millis()
        );
    }
    let all = logs(dir.path(), UPGRADES + 1);
    assert_eq!(g(&tally.connect_errors), 0, "connections refused\n{all}");
    assert_eq!(g(&tally.resets), 0, "connections reset\n{all}");
    assert_eq!(g(&tally.errors), 0, "requests unanswered\n{all}");
    assert_eq!(g(&adm_failures), 0, "rvsadm -Ln failed\n{all}");
    assert!(g(&tally.requests) > 1000, "enough load to mean something");
    assert!(conns > 0, "the last rvsd carried connections:\n{stats}");
    assert_eq!(
        all.matches("handed the sockets to a new rvsd").count(),
        UPGRADES,
        "every old daemon handed its sockets over\n{all}"
    );
}

/// `--takeover` with no rvsd to take over is an error that says so;
/// `--or-start` starts normally instead.
#[test]
fn takeover_without_a_running_rvsd() {
    let dir = TempDir::new("takeover-none");
    let socket = dir.path().join("rvsd.sock");
    let out = Command::new(RVSD)
        .args(["--dataplane", "none", "--socket"])
        .arg(&socket)
        .arg("--takeover")
        .stdin(Stdio::null())
        .output()
        .expect("rvsd");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--takeover: no rvsd is running on") && err.contains("--or-start"),
        "{err}"
    );
    assert!(!socket.exists(), "nothing was started");
    let mut d = Daemons(vec![
        Command::new(RVSD)
            .args(["--dataplane", "none", "--log-level", "warn", "--socket"])
            .arg(&socket)
            .args(["--takeover", "--or-start"])
            .stdin(Stdio::null())
            .spawn()
            .expect("rvsd"),
    ]);
    wait_for_socket(&socket, &mut d.0[0]);
    assert!(listing(&socket).is_some());
}

/// Without a configuration file the new daemon takes the old one's table
/// (configured with rvsadm) with its sockets; a control connection that
/// did not take the sockets cannot retire a daemon.
#[test]
fn takeover_without_a_file_takes_the_table() {
    let dir = TempDir::new("takeover-table");
    let socket = dir.path().join("rvsd.sock");
    let server = Server::start("rs1");
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let spawn = |n: usize, takeover: bool| {
        rvsd_cmd(dir.path(), &socket, n, takeover)
            .spawn()
            .expect("rvsd")
    };
    let mut d = Daemons(vec![spawn(0, false)]);
    wait_for_socket(&socket, &mut d.0[0]);
    let adm = |args: &[&str]| {
        let out = Command::new(RVSADM)
            .args(args)
            .env("RVS_SOCKET", &socket)
            .output()
            .expect("rvsadm");
        assert!(out.status.success(), "rvsadm {args:?}: {out:?}");
    };
    adm(&["-A", "-t", &vip.to_string(), "-s", "wlc"]);
    adm(&[
        "-a",
        "-t",
        &vip.to_string(),
        "-r",
        &server.addr.to_string(),
        "-m",
        "-w",
        "3",
    ]);
    adm(&["--set", "100", "20", "30"]);
    let before = listing(&socket).expect("listing");

    // A plain control connection may not retire the daemon.
    let mut c = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
    c.write_all(b"\"Retire\"\n").expect("write");
    let mut answer = String::new();
    BufReader::new(&c).read_line(&mut answer).expect("answer");
    assert!(
        answer.contains("only the rvsd that took the sockets"),
        "{answer}"
    );
    drop(c);

    // A connection on the VIP open across the takeover keeps working.
    let mut open = TcpStream::connect(vip).expect("connect to the VIP");
    open.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let mut r = BufReader::new(open.try_clone().expect("clone"));
    open.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("write");
    assert!(!read_response(&mut r).expect("first response"));

    let old_inode = inode(&socket);
    d.0.push(spawn(1, true));
    let mut ended = false;
    let status = old_retires(&mut d, dir.path(), || {
        // It waits for the open connection; end it after the handover.
        if !ended && inode(&socket) != old_inode && listing(&socket).is_some() {
            ended = true;
            open.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("write");
            assert!(!read_response(&mut r).expect("second response, through the old daemon"));
            let _ = open.shutdown(std::net::Shutdown::Both);
        }
    });
    assert!(
        status.success(),
        "old rvsd: {status}\n{}",
        logs(dir.path(), 2)
    );
    assert_eq!(listing(&socket).expect("listing"), before, "the same table");
    let out = Command::new(RVSADM)
        .args(["-L", "--timeout"])
        .env("RVS_SOCKET", &socket)
        .output()
        .expect("rvsadm");
    let timeouts = String::from_utf8_lossy(&out.stdout);
    assert!(timeouts.contains("100 20 30"), "{timeouts}");
    let mut s = TcpStream::connect(vip).expect("the new rvsd serves the VIP");
    s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("write");
    let mut r = BufReader::new(s);
    assert!(!read_response(&mut r).expect("response from the new rvsd"));
}

/// More sockets than one `SCM_RIGHTS` message carries (250): 300 TCP and
/// 20 UDP services are handed over in several batches and all served.
#[test]
fn takeover_hands_over_hundreds_of_sockets() {
    let dir = TempDir::new("takeover-many");
    let socket = dir.path().join("rvsd.sock");
    let server = Server::start("rs1");
    let port = free_port();
    let vip = |i: u32| SocketAddr::from(([127, 0, 1 + (i / 200) as u8, 1 + (i % 200) as u8], port));
    let mut rules = String::new();
    for i in 0..300 {
        rules += &format!(
            "-A -t {} -s rr\n-a -t {} -r {} -m\n",
            vip(i),
            vip(i),
            server.addr
        );
    }
    for i in 0..20 {
        rules += &format!("-A -u {} -s rr\n", vip(i));
    }
    let rules = dir.write("rules", &rules);
    let mut d = Daemons(vec![spawn_rvsd(dir.path(), &socket, &rules, 0, false)]);
    wait_for_socket(&socket, &mut d.0[0]);
    let before = listing(&socket).expect("listing");
    d.0.push(spawn_rvsd(dir.path(), &socket, &rules, 1, true));
    let status = old_retires(&mut d, dir.path(), || {});
    assert!(
        status.success(),
        "old rvsd: {status}\n{}",
        logs(dir.path(), 2)
    );
    let all = logs(dir.path(), 2);
    let adopted = all
        .lines()
        .filter(|l| l.contains("listening on") && l.contains("(handed over)"))
        .count();
    assert_eq!(adopted, 320, "{all}");
    assert_eq!(listing(&socket).expect("listing"), before);
    for i in [0, 249, 250, 299] {
        let mut s = TcpStream::connect(vip(i)).expect("the new rvsd serves every VIP");
        s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("write");
        assert!(!read_response(&mut BufReader::new(s)).expect("response"));
    }
}

/// Kills process `.0` (not a child of the test) on drop.
struct KillPid(Option<u32>);

impl Drop for KillPid {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Issue 13, the systemd path of a package upgrade: SIGUSR2 makes a
/// running rvsd start its own binary (argv[0]) with its arguments plus
/// `--takeover`; the new process tells the service manager at
/// NOTIFY_SOCKET (here a datagram socket of the test, as systemd's) that
/// it is the main process now (`MAINPID=`), takes the listening socket
/// over — a keep-alive connection open across it keeps working, a new one
/// is served — and the old one exits 0 once its connection has ended.
#[test]
fn sigusr2_starts_a_successor_that_names_itself_the_main_pid() {
    let dir = TempDir::new("takeover-usr2");
    let socket = dir.path().join("rvsd.sock");
    let notify_path = dir.path().join("notify");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("notify socket");
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let server = Server::start("rs1");
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let rules = dir.write(
        "rules",
        &format!("-A -t {vip} -s rr\n-a -t {vip} -r {} -m\n", server.addr),
    );
    let log = std::fs::File::create(dir.path().join("rvsd.log")).expect("log");
    let mut d = Daemons(vec![
        Command::new(RVSD)
            .args(["--dataplane", "proxy", "--log-level", "info", "--socket"])
            .arg(&socket)
            .arg("--rules")
            .arg(&rules)
            .args(["--drain-grace", "10"])
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("rvsd"),
    ]);
    wait_for_socket(&socket, &mut d.0[0]);
    let old = d.0[0].id();

    let mut open = TcpStream::connect(vip).expect("connect to the VIP");
    open.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let mut r = BufReader::new(open.try_clone().expect("clone"));
    open.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("write");
    assert!(!read_response(&mut r).expect("first response"));

    let kill = Command::new("kill")
        .args(["-USR2", &old.to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).unwrap_or_else(|e| {
        panic!(
            "no notification: {e}\n{}",
            std::fs::read_to_string(dir.path().join("rvsd.log")).unwrap_or_default()
        )
    });
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    let new: u32 = msg
        .lines()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("MAINPID= in {msg:?}"));
    let _kill_new = KillPid(Some(new));
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    assert_ne!(new, old, "a new process");
    let cmdline = std::fs::read(format!("/proc/{new}/cmdline")).expect("new rvsd runs");
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(args.first().map(String::as_str), Some(RVSD), "{args:?}");
    assert!(args.iter().any(|a| a == "--takeover"), "{args:?}");
    assert!(
        args.iter().any(|a| a == "--drain-grace"),
        "its arguments: {args:?}"
    );

    // The connection open across the handover keeps working; a new one is
    // served (by the new daemon: the old one no longer accepts).
    assert!(
        wait_for(Duration::from_secs(10), || listing(&socket).is_some()
            && inode(&socket).is_some()),
        "the control socket answers"
    );
    open.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("write");
    assert!(!read_response(&mut r).expect("response across the handover"));
    let mut fresh = TcpStream::connect(vip).expect("a new connection to the VIP");
    fresh.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let mut fr = BufReader::new(fresh.try_clone().expect("clone"));
    fresh.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("write");
    assert!(!read_response(&mut fr).expect("a new connection's response"));
    drop((open, r, fresh, fr));
    // The old one exits 0 once its connection has ended.
    let t0 = Instant::now();
    let status = loop {
        if let Ok(Some(s)) = d.0[0].try_wait() {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(15) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "the old rvsd exited 0: {status:?}"
    );
    assert!(
        Path::new(&format!("/proc/{new}")).exists(),
        "the new one runs"
    );
}

fn wait_for(t: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + t;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}
