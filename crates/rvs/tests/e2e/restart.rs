//! The XDP plane outlives rvsd: real TCP through `rvsd --dataplane xdp`
//! (DR, and one-arm NAT) while rvsd is restarted three times with
//! SIGTERM, three times with SIGKILL and once as an upgrade to a program
//! with another tag (`--xdp-upgrade-probe`, a link update). 50 long-lived
//! streams carry pseudo-random data the real servers echo, checked byte
//! for byte, and a steady loop of new connections runs meanwhile: no
//! stream may break or lose a byte, no new connection may fail; after each
//! restart `rvsadm -Lcn` lists the live flows again and the service's
//! counters are at least what they were.
//!
//! rvsd runs in the director's network namespace through `nsenter --net`
//! (not `ip netns exec`, whose private mount namespace would give it a
//! bpffs of its own that vanishes with it) under a unique `--instance`;
//! the guard kills it and removes the instance's pins, even on failure.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Pinned, RVSD, Rvsadm, TempDir};
use crate::netns::{Bed, connect};

const VIP: &str = "10.77.0.100";
const STREAMS: usize = 50;
const CHUNK: usize = 1024;

fn vip() -> SocketAddr {
    SocketAddr::new(VIP.parse().expect("vip"), 80)
}

/// rvsd in the director's namespace, restartable; its pins are removed
/// and it is killed on drop.
pub(crate) struct Director {
    /// Its rvsd (`--instance`, socket, process).
    rvsd: Pinned,
    /// `-f FILE`, or none: a table made with rvsadm.
    conf: Option<PathBuf>,
    pub(crate) state: PathBuf,
    /// More arguments for every start (`--interface eth1`, `--http ...`).
    pub(crate) args: Vec<String>,
    _dir: TempDir,
}

/// Its rvsd: `instance`, `child`, `stop`, `kill`, rvsadm.
impl Deref for Director {
    type Target = Pinned;
    fn deref(&self) -> &Pinned {
        &self.rvsd
    }
}

impl DerefMut for Director {
    fn deref_mut(&mut self) -> &mut Pinned {
        &mut self.rvsd
    }
}

impl Director {
    pub(crate) fn new(ns: &str, tag: &str, conf: &str) -> Director {
        let dir = TempDir::new(tag);
        let conf = (!conf.is_empty()).then(|| dir.write("keepalived.conf", conf));
        Director {
            rvsd: Pinned::new(
                ns,
                rvs_testbed::unique_name(tag),
                dir.path().join("rvsd.sock"),
            ),
            conf,
            state: dir.path().join("state"),
            args: Vec::new(),
            _dir: dir,
        }
    }

    pub(crate) fn start(&mut self, upgrade: bool) {
        self.start_plane("xdp", upgrade);
    }

    fn start_plane(&mut self, plane: &str, upgrade: bool) {
        let launch = self
            .rvsd
            .launch(plane)
            .args(["--xdp-mode", "skb"])
            .args(
                self.conf
                    .iter()
                    .flat_map(|c| [std::ffi::OsStr::new("-f"), c.as_os_str()]),
            )
            .arg("--state-dir")
            .arg(&self.state)
            .args(&self.args)
            .args(upgrade.then_some("--xdp-upgrade-probe"));
        self.rvsd.start(launch);
    }

    /// Established flows from `client` to the VIP that `-Lcn` lists.
    fn listed(&self, client: IpAddr) -> usize {
        let o = self.adm("-Lcn");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| {
                l.contains("ESTABLISHED")
                    && l.contains(&format!("{client}:"))
                    && l.contains(&format!("{VIP}:80"))
            })
            .count()
    }

    /// The service's (conns, inpkts) from `-Ln --stats --exact`.
    fn counters(&self) -> (u64, u64) {
        let out = self.ok("-Ln --stats --exact");
        let line = out
            .lines()
            .find(|l| l.starts_with("TCP") && l.contains(&format!("{VIP}:80")))
            .unwrap_or_else(|| panic!("no service line in {out}"));
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(2)
            .filter_map(|x| x.parse().ok())
            .collect();
        assert!(f.len() >= 2, "stats line {line}");
        (f[0], f[1])
    }

    /// `prog/xdp id N ... tag T` of the director's eth0.
    pub(crate) fn program(&self) -> String {
        let o = rvs_testbed::sh(&["ip", "-n", &self.ns, "link", "show", "eth0"]);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.split("prog/xdp")
            .nth(1)
            .map(|t| t.split_whitespace().take(6).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    }
}

/// xorshift64*: the bytes stream `seed` sends.
struct Prng(u64);

impl Prng {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            *b = (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8;
        }
    }
}

/// One long-lived stream: chunks of its pseudo-random bytes out, the
/// echo checked against them, until `stop`. Returns the bytes checked, or
/// what went wrong.
pub(crate) fn stream(
    mut s: std::net::TcpStream,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> Result<u64, String> {
    let mut rng = Prng(seed | 1);
    let (mut out, mut back) = ([0u8; CHUNK], [0u8; CHUNK]);
    let mut total = 0u64;
    s.set_read_timeout(Some(Duration::from_secs(8)))
        .map_err(|e| e.to_string())?;
    // Bounded: 90 s whatever happens to `stop`.
    let end = Instant::now() + Duration::from_secs(90);
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        rng.fill(&mut out);
        s.write_all(&out)
            .map_err(|e| format!("write after {total} bytes: {e}"))?;
        s.read_exact(&mut back)
            .map_err(|e| format!("read after {total} bytes: {e}"))?;
        if out != back {
            return Err(format!("echo differs after {total} bytes"));
        }
        total += CHUNK as u64;
        std::thread::sleep(Duration::from_millis(40));
    }
    Ok(total)
}

fn run(test: &str, nat: bool) {
    let Some((mut bed, client, dir)) = crate::netns::director_bed(test) else {
        return;
    };
    let rs = if nat {
        bed.nat_servers(&dir, 2)
    } else {
        bed.real_servers(2, &["--mode", "dr"])
    };
    let kind = if nat { "NAT" } else { "DR" };
    let reals: String = rs
        .iter()
        .map(|h| {
            format!(
                "    real_server {} 80 {{\n        weight 1\n    }}\n",
                h.addr
            )
        })
        .collect();
    let conf = format!(
        "virtual_server {VIP} 80 {{\n    lb_algo rr\n    lb_kind {kind}\n    protocol TCP\n{reals}}}\n"
    );
    let mut d = Director::new(&dir.ns, test, &conf);
    d.start(false);
    let t0 = Instant::now();

    // Both real servers reachable (DR: once their MACs are resolved).
    let mut names = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while names.len() < 2 && Instant::now() < deadline {
        if let Ok(c) = connect(&client, vip(), Duration::from_millis(500)) {
            names.insert(c.server);
        }
    }
    assert_eq!(names.len(), 2, "reachable: {names:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let mut streams = Vec::new();
    for i in 0..STREAMS {
        let c = connect(&client, vip(), Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("stream {i}: {e}"));
        let stop = stop.clone();
        let seed = 0x5EED_0000 + i as u64;
        streams.push(std::thread::spawn(move || stream(c.stream, seed, stop)));
    }
    // The steady loop of new connections.
    let (made, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let newconns = {
        let (stop, made, failed, client) =
            (stop.clone(), made.clone(), failed.clone(), client.clone());
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(90);
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                let r = connect(&client, vip(), Duration::from_secs(3))
                    .and_then(|mut c| c.echo("ping\n", Duration::from_secs(3)));
                match r {
                    Ok(()) => made.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        errors.push(e.to_string());
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
                std::thread::sleep(Duration::from_millis(25));
            }
            errors
        })
    };
    let wait_listed = |d: &Director, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let n = d.listed(client.addr);
            if n >= STREAMS {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: -Lcn lists {n} of {STREAMS} flows"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_listed(&d, "before the restarts");
    let first = d.program();
    assert!(!first.is_empty(), "program attached");
    let mut before = d.counters();
    let steps = [
        ("-TERM", false),
        ("-TERM", false),
        ("-TERM", false),
        ("-KILL", false),
        ("-KILL", false),
        ("-KILL", false),
        ("-TERM", true),
    ];
    for (n, (sig, upgrade)) in steps.into_iter().enumerate() {
        let what = format!(
            "restart {} ({sig}{})",
            n + 1,
            if upgrade { ", upgrade" } else { "" }
        );
        let ts = Instant::now();
        d.stop(sig);
        let stopped = ts.elapsed();
        assert_eq!(
            d.program(),
            first,
            "{what}: the program stays attached while no rvsd runs"
        );
        std::thread::sleep(Duration::from_millis(300));
        d.start(upgrade);
        let started = ts.elapsed();
        wait_listed(&d, &what);
        eprintln!(
            "{test}: {what}: stopped in {stopped:?}, socket after {started:?}, flows listed after {:?}",
            ts.elapsed()
        );
        let now = d.counters();
        assert!(
            now.0 >= before.0 && now.1 >= before.1,
            "{what}: counters went back: {before:?} -> {now:?}"
        );
        before = now;
        let prog = d.program();
        if upgrade {
            assert_ne!(
                prog, first,
                "{what}: the program was replaced (another tag)"
            );
        } else {
            assert_eq!(prog, first, "{what}: the same program kept running");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    let mut bytes = 0;
    for (i, s) in streams.into_iter().enumerate() {
        match s.join().expect("stream thread") {
            Ok(n) => bytes += n,
            Err(e) => panic!("stream {i}: {e}"),
        }
    }
    let errors = newconns.join().expect("new connections thread");
    let (made, failed) = (made.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!(
        "{test}: {STREAMS} streams, {bytes} bytes echoed intact; {made} new connections, \
         {failed} failed; {:?}",
        t0.elapsed()
    );
    assert_eq!(failed, 0, "new connections failed: {errors:?}");
    assert!(made > 0, "no new connection was made");
    // Stop and remove: detached, unpinned, rvsd gone. DR: by the running
    // rvsd (`rvsadm --remove-director`); NAT: `rvsd --remove` after it died.
    let pins = rvs_xdp::pin::Instance::new(&d.instance).expect("instance");
    assert!(pins.exists());
    if nat {
        d.stop("-KILL");
        assert_ne!(d.program(), "", "still attached after SIGKILL");
        let o = Command::new(RVSD)
            .args(["--remove", "--instance", &d.instance])
            .output()
            .expect("rvsd --remove");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    } else {
        d.ok("--remove-director");
        if let Some(mut c) = d.child.0.take() {
            let _ = c.wait();
        }
    }
    assert!(!pins.exists(), "pins removed");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !d.program().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(d.program(), "", "the program is detached");
}

#[test]
fn xdp_restart_dr_keeps_every_flow() {
    run("xdp_restart_dr", false);
}

#[test]
fn xdp_restart_nat_keeps_every_flow() {
    run("xdp_restart_nat", true);
}

/// An rvsd of the same instance started with another data plane removes
/// the XDP program its predecessor left attached (it would keep forwarding
/// beside the new plane).
#[test]
fn xdp_restart_with_another_dataplane_detaches() {
    let Some(mut bed) = Bed::new("xdp_restart_other_plane") else {
        return;
    };
    let dir = bed.host("dir", "10.77.0.2/24");
    let conf = format!(
        "virtual_server {VIP} 80 {{\n    lb_algo rr\n    lb_kind DR\n    protocol TCP\n}}\n"
    );
    let mut d = Director::new(&dir.ns, "xdp_restart_other_plane", &conf);
    d.start(false);
    assert_ne!(d.program(), "", "attached");
    d.stop("-KILL");
    assert_ne!(d.program(), "", "still attached after SIGKILL");
    d.start_plane("none", false);
    assert_eq!(d.program(), "", "detached by the next rvsd");
    assert!(
        !rvs_xdp::pin::Instance::new(&d.instance)
            .expect("instance")
            .exists()
    );
}

/// A table made with rvsadm (no configuration file, as an ipvsadm script
/// makes it) survives restarts like the kernel's does: the next rvsd
/// loads it from beside the pins instead of pruning what the program
/// forwards by, so a live connection keeps going and new ones are
/// scheduled, seconds after each restart.
#[test]
fn xdp_restart_keeps_a_table_made_with_rvsadm() {
    let test = "xdp_restart_rvsadm";
    let Some((mut bed, client, dir)) = crate::netns::director_bed(test) else {
        return;
    };
    let rs = bed.real_servers(1, &["--mode", "dr"]).remove(0);
    let mut d = Director::new(&dir.ns, test, "");
    d.start(false);
    d.ok(&format!("-A -t {VIP}:80 -s rr"));
    d.ok(&format!("-a -t {VIP}:80 -r {}:80 -g -w 1", rs.addr));
    let reach = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match connect(&client, vip(), Duration::from_millis(500)) {
                Ok(c) => return c,
                Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    };
    let mut live = reach("before any restart");
    // rvsd queues the table for its file with each change; let the write land.
    let table = d.state.join(format!("{}.table", d.instance));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !std::fs::read_to_string(&table).is_ok_and(|t| t.contains(&rs.addr.to_string())) {
        assert!(
            Instant::now() < deadline,
            "{} never written",
            table.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pins = rvs_xdp::pin::Instance::new(&d.instance).expect("instance");
    for sig in ["-KILL", "-TERM"] {
        d.stop(sig);
        d.start(false);
        // Past the adoption's pruning of what no table claims (3 reports).
        std::thread::sleep(Duration::from_secs(5));
        let list = d.ok("-Ln");
        assert!(
            list.contains(&format!("{VIP}:80")) && list.contains(&format!("{}:80", rs.addr)),
            "after {sig}: the table is back: {list}"
        );
        live.echo("ping\n", Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("after {sig}: the live connection: {e}"));
        let mut fresh = reach(&format!("after {sig}"));
        fresh
            .echo("ping\n", Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("after {sig}: a new connection: {e}"));
    }
    // Removal takes the table with the pins: a later rvsd starts empty.
    d.ok("--remove-director");
    let deadline = Instant::now() + Duration::from_secs(5);
    while pins.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some(mut c) = d.child.0.take() {
        let _ = c.wait();
    }
    assert!(!pins.exists(), "pins removed");
    assert!(!table.exists(), "the saved table is removed with the pins");
}
