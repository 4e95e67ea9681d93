//! A real failover between rvsd's XDP plane and the kernel's IPVS (issue
//! 29), both ways, proven with live byte-checked streams: Debian's kernel
//! director in a QEMU guest (rvs-testbed's `ipvs_vm`) and `rvsd
//! --dataplane xdp` on one bridged segment, the same DR service on both,
//! connection sync between them (the kernel's own sync daemon on the
//! guest's side).
//!
//! ```text
//!  br0 (switch namespace)
//!   ├─ guest  eth0 10.77.0.3/24 (kernel director, DR)
//!   ├─ d      eth0 10.77.0.2/24 (rvsd --dataplane xdp, DR)
//!   ├─ r0     eth0 10.77.0.11/24, r1 10.77.0.12/24: the VIP on lo
//!   │         (`rvsd realserver --mode dr`: arp_ignore/arp_announce),
//!   │         their name then an echo on :80
//!   └─ c      eth0 10.77.0.10/24 (the streams)
//!  VIP 10.77.0.100:80, rr over r0 and r1, on both directors; the VIP
//!  address is on the eth0 of whichever director holds it.
//! ```
//!
//! A takeover is real: the director that gives the VIP up loses it (the
//! address deleted, then rvsd stopped and its XDP program gone; or the
//! address deleted in the guest), and the one that takes it adds it and
//! sends a gratuitous ARP (busybox `arping -U`: the guest's, and the
//! image's static busybox in `d`), so the client's next packets go to the
//! new director. About 50–70 s (one guest boot) on a loaded machine.
//!
//! Four phases, in this order, each with [`N`] new streams (echo streams
//! at a bounded rate, checked byte for byte, [`crate::streams`]) opened
//! through the director that holds the VIP, spread by rr over both real
//! servers:
//!
//! 1. rvs → kernel, sync off (the guest's backup daemon on another
//!    syncid): the kernel knows none of the streams; their next packets
//!    reach its local stack, which resets them. A good share must break.
//! 2. kernel → rvs, sync off likewise (rvsd's backup on another syncid).
//! 3. rvs → kernel with sync: rvsd master, the guest's `ipvsadm
//!    --start-daemon backup`; once the guest's `ipvsadm -Lcn` lists every
//!    stream ESTABLISHED to the real server rvsd chose, the VIP moves.
//! 4. kernel → rvs with sync: the guest master, rvsd backup; phase 3's
//!    streams go on through the kernel, and N more are opened through it;
//!    once `rvsadm -Lcn` lists all 2N to the kernel's real server, the VIP
//!    moves back to rvs: phase 3's streams have gone rvs → kernel → rvs.
//!
//! With sync, 0 streams break: every byte is echoed in order for some
//! seconds after each move (and until each stream has echoed [`AFTER`]
//! more bytes), then to the end. The broken counts of phases 1 and 2 are
//! what this test would see without the sync, printed beside those of
//! 3 and 4.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rvs_testbed::ipvs_vm::{self, IpvsVm, IpvsVmOpts};

use crate::harness::{Launch, Rvsd, TempDir, wait_exit};
use crate::ipvs_sync::{entries, until};
use crate::netns::{Bed, Host, connect, sh};
use crate::streams::{Outcome, Pattern, Progress, echo_stream};

const VIP: &str = "10.77.0.100";
/// Streams per phase.
const N: usize = 20;
/// Bytes per write, and one write per [`PERIOD`] (10 KB/s a stream: the
/// emulated guest carries 40 of them).
const CHUNK: usize = 1024;
const PERIOD: Duration = Duration::from_millis(100);
/// The longest wait for echoed data before a stream counts as stalled.
const STALL: Duration = Duration::from_secs(20);
/// Bytes each stream must echo after a move before the phase ends (and
/// the phase lasts [`SOME`] at least after the move).
const AFTER: u64 = 20 * CHUNK as u64;
const SOME: Duration = Duration::from_secs(5);
/// The bound of every wait (only against a hang: the emulated guest is
/// slow on a loaded machine).
const BOUND: Duration = Duration::from_secs(90);

fn vip() -> SocketAddr {
    SocketAddr::new(VIP.parse().expect("vip"), 80)
}

/// The service, as ipvsadm and rvsadm take it (without the program name).
const SERVICE: [&str; 3] = [
    "-A -t 10.77.0.100:80 -s rr",
    "-a -t 10.77.0.100:80 -r 10.77.0.11:80 -g",
    "-a -t 10.77.0.100:80 -r 10.77.0.12:80 -g",
];

/// Where the VIP is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Rvs,
    Kernel,
}

/// The bed: the switch, the client, rvs's director host and the guest.
struct World {
    /// First in drop order: QEMU stops before the namespaces go.
    vm: IpvsVm,
    c: Host,
    d: Host,
    dir: TempDir,
    /// Daemons started so far (each on a socket of its own).
    started: usize,
    _bed: Bed,
}

/// One stream: its client address, the real server that greeted it, and
/// its progress.
struct Stream {
    end: SocketAddr,
    server: String,
    progress: Arc<Progress>,
    handle: JoinHandle<Outcome>,
}

/// Streams sharing one stop flag (set on drop: a failed test stops them).
struct Streams {
    stop: Arc<AtomicBool>,
    list: Vec<Stream>,
}

impl Drop for Streams {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The static busybox of the guest image, which runs on the host too: its
/// `arping -U` is the gratuitous ARP on both sides.
fn busybox() -> PathBuf {
    ipvs_vm::cache_dir().join("root/bin/busybox")
}

impl World {
    /// rvsd (XDP plane on eth0) in `d` with the service and a sync daemon
    /// `role` on `syncid`.
    fn rvsd(&mut self, role: &str, syncid: u8) -> Rvsd {
        self.started += 1;
        let sock = self.dir.path().join(format!("rvsd{}.sock", self.started));
        let r = Launch::at(&sock)
            .netns(&self.d.ns)
            .plane("xdp")
            .args(["--interface", "eth0"])
            .spawn();
        for c in SERVICE {
            r.ok(c);
        }
        r.ok(&format!(
            "--start-daemon {role} --mcast-interface eth0 --syncid {syncid}"
        ));
        r
    }

    /// The guest's sync daemon: `role` on `syncid`, the other one stopped.
    fn guest_daemon(&self, role: &str, syncid: u8) {
        self.vm.ok(&format!(
            "ipvsadm --stop-daemon master 2>/dev/null; ipvsadm --stop-daemon backup 2>/dev/null; \
             ipvsadm --start-daemon {role} --mcast-interface eth0 --syncid {syncid}"
        ));
    }

    /// rvs's director takes the VIP: the address on d's eth0 and a
    /// gratuitous ARP.
    fn rvs_takes(&self) {
        if !crate::netns::has_addr(&self.d, VIP) {
            sh(&[
                "ip",
                "-n",
                &self.d.ns,
                "addr",
                "add",
                &format!("{VIP}/32"),
                "dev",
                "eth0",
            ]);
        }
        let bb = busybox();
        sh(&[
            "ip",
            "netns",
            "exec",
            &self.d.ns,
            &bb.display().to_string(),
            "arping",
            "-U",
            "-c",
            "2",
            "-I",
            "eth0",
            VIP,
        ]);
    }

    /// rvs's director gives the VIP up: the address deleted, then rvsd
    /// stopped (SIGTERM) and its XDP program gone from eth0. In that order:
    /// with the program gone and the address still there, d's own stack
    /// would reset the streams' packets that reach it before the client
    /// learns the new owner (the hazard of a director whose kernel keeps
    /// the VIP); without the address it drops them (d does not forward),
    /// and TCP sends them again.
    fn rvs_fails(&self, mut r: Rvsd) {
        sh(&[
            "ip",
            "-n",
            &self.d.ns,
            "addr",
            "del",
            &format!("{VIP}/32"),
            "dev",
            "eth0",
        ]);
        r.signal("TERM");
        wait_exit(&mut r.child, "rvsd after SIGTERM");
        drop(r);
        let link = self.d.exec(&["ip", "link", "show", "dev", "eth0"]);
        let link = String::from_utf8_lossy(&link.stdout);
        assert!(!link.contains("xdp"), "rvsd left its program: {link}");
    }

    /// The kernel takes the VIP: the address on the guest's eth0 and a
    /// gratuitous ARP.
    fn kernel_takes(&self) {
        self.vm.ok(&format!(
            "ip addr add {VIP}/32 dev eth0 && arping -U -c 2 -I eth0 {VIP} >/dev/null"
        ));
    }

    /// The kernel gives the VIP up (its address deleted in the guest).
    fn kernel_fails(&self) {
        self.vm.ok(&format!("ip addr del {VIP}/32 dev eth0"));
    }

    /// `n` streams from the client through the VIP (each connection tried
    /// up to three times: a first SYN may wait for an ARP in the slow
    /// guest).
    fn open(&self, n: usize, pattern: &Arc<Pattern>) -> Streams {
        let stop = Arc::new(AtomicBool::new(false));
        let list = (0..n)
            .map(|i| {
                let conn = (0..3)
                    .find_map(|_| connect(&self.c, vip(), Duration::from_secs(20)).ok())
                    .unwrap_or_else(|| panic!("stream {i}: no connection to {VIP}:80"));
                assert!(!conn.server.is_empty(), "stream {i}: no greeting");
                let end = conn.stream.local_addr().expect("local address");
                let progress = Arc::new(Progress::default());
                let handle = echo_stream(
                    conn.stream,
                    pattern.clone(),
                    PERIOD,
                    STALL,
                    stop.clone(),
                    progress.clone(),
                );
                Stream {
                    end,
                    server: conn.server,
                    progress,
                    handle,
                }
            })
            .collect();
        Streams { stop, list }
    }
}

impl Streams {
    /// The client addresses.
    fn ends(&self) -> BTreeSet<String> {
        self.list.iter().map(|s| s.end.to_string()).collect()
    }

    /// How many streams each real server greeted.
    fn spread(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for s in &self.list {
            *m.entry(s.server.clone()).or_default() += 1;
        }
        m
    }

    fn failed(&self) -> usize {
        self.list
            .iter()
            .filter(|s| s.progress.failed.load(Ordering::Relaxed))
            .count()
    }

    /// Wait until every stream has echoed `bytes` (or failed).
    fn echoed(&self, what: &str, bytes: &[u64]) {
        until(what, BOUND, || {
            let behind: Vec<(usize, u64)> = self
                .list
                .iter()
                .zip(bytes)
                .enumerate()
                .filter(|(_, (s, b))| {
                    !s.progress.failed.load(Ordering::Relaxed)
                        && s.progress.good.load(Ordering::Relaxed) < **b
                })
                .map(|(i, (s, _))| (i, s.progress.good.load(Ordering::Relaxed)))
                .collect();
            (behind.is_empty(), behind)
        });
    }

    /// What each has echoed so far.
    fn good(&self) -> Vec<u64> {
        self.list
            .iter()
            .map(|s| s.progress.good.load(Ordering::Relaxed))
            .collect()
    }

    /// Stop writing; wait (bounded) for every stream's end: how many
    /// there were, and the broken ones' client addresses and errors.
    fn finish(mut self) -> (usize, Vec<(SocketAddr, String)>) {
        self.stop.store(true, Ordering::Relaxed);
        let end = Instant::now() + BOUND;
        while self.list.iter().any(|s| !s.handle.is_finished()) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut errors = Vec::new();
        let n = self.list.len();
        for (i, s) in std::mem::take(&mut self.list).into_iter().enumerate() {
            assert!(s.handle.is_finished(), "stream {i} did not end");
            let o = s.handle.join().expect("stream thread");
            if let Some(e) = o.error {
                errors.push((s.end, format!("{i} ({}, {}): {e}", s.end, s.server)));
            }
        }
        (n, errors)
    }
}

/// The ESTABLISHED entries to the VIP in a `-Lcn` listing whose client is
/// one of `ends`: client → real server.
fn established(listing: &str, ends: &BTreeSet<String>) -> BTreeMap<String, String> {
    entries(listing)
        .into_iter()
        .filter(|e| e.0 == "TCP" && e.1 == "ESTABLISHED" && e.3 == format!("{VIP}:80"))
        .filter(|e| ends.contains(&e.2))
        .map(|e| (e.2, e.4))
        .collect()
}

/// The bed (`None`: skipped): client, rvs's director (XDP_PASS on its
/// bridge port, for the plane's XDP_TX), two DR real servers, the guest
/// with the service and no VIP.
fn world(test: &str) -> Option<World> {
    if !ipvs_vm::available_or_skip(test) {
        return None;
    }
    let mut bed = Bed::new(test)?;
    let c = bed.host("c", "10.77.0.10/24");
    let d = bed.host("d", "10.77.0.2/24");
    bed.xdp_pass_on_port(&d);
    for i in 0..2 {
        let h = bed.host(&format!("r{i}"), &format!("10.77.0.{}/24", 11 + i));
        crate::netns::realserver(&h, VIP, &["--mode", "dr"]);
        bed.server(&h, "0.0.0.0".parse().expect("any"), 80, &format!("rs{i}"));
    }
    let mut opts = IpvsVmOpts::new(&bed.sw, "10.77.0.3/24", None);
    opts.bridge = "br0".into();
    opts.modules = vec!["ip_vs".into(), "ip_vs_rr".into()];
    let vm = IpvsVm::boot(&opts).expect("boot the kernel-IPVS guest");
    let script: Vec<String> = SERVICE.iter().map(|c| format!("ipvsadm {c}")).collect();
    vm.ok(&script.join(" && "));
    Some(World {
        vm,
        c,
        d,
        dir: TempDir::new("ipvsfailover"),
        started: 0,
        _bed: bed,
    })
}

/// One phase's figures.
struct Figures {
    name: String,
    total: usize,
    errors: Vec<String>,
}

impl Figures {
    /// The figures of `name` (printed at once).
    fn new(name: &str, total: usize, errors: Vec<String>) -> Figures {
        let f = Figures {
            name: name.to_owned(),
            total,
            errors,
        };
        println!("ipvs_failover: {f}");
        f
    }

    /// A takeover without sync must break a good share of the streams
    /// (each then reset by the new director's own stack): else the test
    /// would not see what it judges.
    fn assert_breaks(&self) {
        assert!(
            self.errors.len() >= N / 4,
            "{self}: a takeover without sync should break streams: is the takeover real?"
        );
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} of {} streams broken",
            self.name,
            self.errors.len(),
            self.total
        )
    }
}

/// Move the VIP from `from` to the other side (`r`: rvs's daemon when rvs
/// gives it up), then let `streams` run on: for [`SOME`] at least and until
/// each has echoed [`AFTER`] more bytes (or failed).
fn move_vip(w: &World, from: Side, r: Option<Rvsd>, streams: &Streams, what: &str) {
    // Every stream runs up to the move (a stream broken before it would
    // say nothing about the takeover).
    let at = streams.good();
    let failed = streams.failed();
    assert_eq!(
        failed, 0,
        "{what}: {failed} streams broke before the move: {at:?}"
    );
    let moved = Instant::now();
    match from {
        Side::Rvs => {
            w.rvs_fails(r.expect("rvs's daemon"));
            w.kernel_takes();
        }
        Side::Kernel => {
            w.kernel_fails();
            w.rvs_takes();
        }
    }
    let want: Vec<u64> = at.iter().map(|g| g + AFTER).collect();
    streams.echoed(&format!("{what}: the streams go on after the move"), &want);
    if let Some(left) = SOME.checked_sub(moved.elapsed()) {
        std::thread::sleep(left);
    }
}

#[test]
fn ipvs_failover_rvs_to_kernel_and_back_keeps_the_streams() {
    let test = "ipvs_failover_rvs_to_kernel_and_back_keeps_the_streams";
    let t0 = Instant::now();
    let Some(mut w) = world(test) else {
        return;
    };
    let boot = t0.elapsed();
    let pattern = Arc::new(Pattern::new(64 << 10, CHUNK, 0x29_FA11));
    let mut figures = Vec::new();
    let started = |s: &Streams, what: &str| {
        s.echoed(
            &format!("{what}: the streams run"),
            &vec![4 * CHUNK as u64; s.list.len()],
        );
        let spread = s.spread();
        assert_eq!(
            spread.len(),
            2,
            "{what}: rr over both real servers: {spread:?}"
        );
        spread
    };

    // ---- 1. rvs -> kernel, sync off ----
    let what = "rvs -> kernel, sync off";
    let r = w.rvsd("master", 11);
    w.guest_daemon("backup", 12);
    w.rvs_takes();
    let s = w.open(N, &pattern);
    let spread = started(&s, what);
    let ends = s.ends();
    until(&format!("{what}: rvsd lists the streams"), BOUND, || {
        let m = established(&r.ok("-Lcn"), &ends);
        (m.len() == N, m)
    });
    move_vip(&w, Side::Rvs, Some(r), &s, what);
    let (total, errors) = s.finish();
    println!("ipvs_failover: {what}: spread {spread:?}");
    let f = Figures::new(what, total, errors.into_iter().map(|e| e.1).collect());
    f.assert_breaks();
    figures.push(f);

    // ---- 2. kernel -> rvs, sync off ----
    let what = "kernel -> rvs, sync off";
    w.guest_daemon("master", 21);
    let r = w.rvsd("backup", 22);
    let s = w.open(N, &pattern);
    let spread = started(&s, what);
    let ends = s.ends();
    until(
        &format!("{what}: the kernel lists the streams"),
        BOUND,
        || {
            let k = established(&w.vm.ok("ipvsadm -Lcn"), &ends);
            (k.len() == N, k)
        },
    );
    move_vip(&w, Side::Kernel, None, &s, what);
    let (total, errors) = s.finish();
    println!("ipvs_failover: {what}: spread {spread:?}");
    let f = Figures::new(what, total, errors.into_iter().map(|e| e.1).collect());
    f.assert_breaks();
    figures.push(f);
    drop(r);

    // ---- 3. rvs -> kernel, sync ----
    let what = "rvs -> kernel, sync";
    let r = w.rvsd("master", 31);
    w.guest_daemon("backup", 31);
    w.rvs_takes();
    let s3 = w.open(N, &pattern);
    let spread = started(&s3, what);
    let ends3 = s3.ends();
    until(
        &format!("{what}: the kernel backup lists rvsd's streams, same real servers"),
        BOUND,
        || {
            let m = established(&r.ok("-Lcn"), &ends3);
            let k = established(&w.vm.ok("ipvsadm -Lcn"), &ends3);
            (m.len() == N && k == m, (m, k))
        },
    );
    let before = w.vm.ok("ipvsadm -Lcn");
    move_vip(&w, Side::Rvs, Some(r), &s3, what);
    println!("ipvs_failover: {what}: spread {spread:?}");
    // None broken (they go on in phase 4; a broken one is reported here
    // with the guest's view).
    let broken = s3.failed();
    if broken > 0 {
        let after =
            w.vm.ok("ipvsadm -Lcn; ipvsadm -Ln --stats; dmesg | tail -20");
        let (total, errors) = s3.finish();
        let f = Figures::new(what, total, errors.into_iter().map(|e| e.1).collect());
        panic!(
            "{f}: {:#?}\nthe guest before the move:\n{before}\nafter:\n{after}",
            f.errors
        );
    }
    println!("ipvs_failover: {what}: 0 of {N} streams broken (so far)");

    // ---- 4. kernel -> rvs, sync (phase 3's streams and N new ones) ----
    let what = "kernel -> rvs, sync";
    w.guest_daemon("master", 41);
    let r = w.rvsd("backup", 41);
    let s4 = w.open(N, &pattern);
    let spread = started(&s4, what);
    let mut ends = s4.ends();
    ends.extend(ends3.iter().cloned());
    until(
        &format!("{what}: the rvsd backup lists the kernel's streams, same real servers"),
        BOUND,
        || {
            let listing = w.vm.ok("ipvsadm -Lcn");
            let k = established(&listing, &ends);
            let b = established(&r.ok("-Lcn"), &ends);
            let raw: Vec<_> = entries(&listing)
                .into_iter()
                .filter(|e| ends.contains(&e.2))
                .collect();
            (k.len() == 2 * N && b == k, (k, b, raw))
        },
    );
    // One set: phase 3's streams first (sharing phase 4's stop flag from
    // now on, and their own, which `s3` sets when dropped).
    let mut s3 = s3;
    let mut s4 = s4;
    let mut list = std::mem::take(&mut s3.list);
    list.append(&mut s4.list);
    let all = Streams {
        stop: s4.stop.clone(),
        list,
    };
    move_vip(&w, Side::Kernel, None, &all, what);
    drop((s3, s4));
    let (total, errors) = all.finish();
    println!("ipvs_failover: {what}: spread {spread:?}");
    let (e3, e4): (Vec<_>, Vec<_>) = errors
        .into_iter()
        .partition(|e| ends3.contains(&e.0.to_string()));
    let (e3, e4): (Vec<String>, Vec<String>) = (
        e3.into_iter().map(|e| e.1).collect(),
        e4.into_iter().map(|e| e.1).collect(),
    );
    figures.push(Figures::new(
        "rvs -> kernel -> rvs, sync (phase 3's streams)",
        N,
        e3,
    ));
    figures.push(Figures::new(what, total - N, e4));
    drop(r);

    let report: Vec<String> = figures.iter().map(|f| f.to_string()).collect();
    println!(
        "ipvs_failover: {}; boot {boot:?}, total {:?}",
        report.join("; "),
        t0.elapsed()
    );
    for f in &figures[2..] {
        assert!(f.errors.is_empty(), "{f}: {:#?}", f.errors);
    }
}
