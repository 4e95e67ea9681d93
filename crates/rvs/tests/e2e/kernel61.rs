//! rvs's XDP and sock planes on the oldest kernel they run on in the test
//! bed (kernel510.rs: 5.10 refuses them, naming what it lacks):
//! Debian 12's 6.1 cloud kernel in the kernel-IPVS guest (rvs-testbed's
//! `ipvs_vm`, QEMU under TCG), with this build's rvsd and rvsadm pushed in
//! (issue 29, "the kernels users run").
//!
//! ```text
//!  br0 (switch namespace)
//!   ├─ guest  eth0 10.77.0.2/24, VIP 10.77.0.100 (rvsd --dataplane xdp|sock)
//!   ├─ r0     eth0 10.77.0.11/24, `rvsd realserver --mode dr`, :80 "rs0"
//!   └─ c      eth0 10.77.0.10/24 (the XDP test's client)
//! ```
//!
//! * XDP plane, DR (every program passes 6.1's verifier; driver mode on
//!   virtio-net): a client on the segment connects to the VIP; the guest's
//!   XDP program forwards to r0, which answers it directly; the guest's
//!   `rvsadm -Lnc` and `--stats` show the connection.
//! * sock plane: a client inside the guest's cgroup (busybox `nc`) connects
//!   to the VIP and reaches r0.

use std::path::Path;
use std::time::{Duration, Instant};

use rvs_testbed::ipvs_vm::{self, IpvsVm, IpvsVmOpts};

use crate::harness::{RVSADM, RVSD, TempDir};
use crate::netns::{Bed, Host, connect};

/// The guest's rvsd control socket.
pub(crate) const SOCKET: &str = "/run/rvsd.sock";

/// A copy of `bin` without its debug sections in `dir` (a debug rvsd is
/// hundreds of MB; the guest's serial port carries a few MB a second), or
/// `bin` itself when `strip` is missing.
fn stripped(bin: &str, dir: &TempDir) -> Vec<u8> {
    let name = Path::new(bin).file_name().expect("a file name");
    let out = dir.path().join(name);
    let ok = std::process::Command::new("strip")
        .arg("-o")
        .arg(&out)
        .arg(bin)
        .status()
        .is_ok_and(|s| s.success());
    std::fs::read(if ok { out.as_path() } else { Path::new(bin) }).expect("read the binary")
}

/// Boot the guest on `bed`'s segment at 10.77.0.2 with the VIP on its eth0,
/// push this build's rvsd and rvsadm to /usr/bin and mount bpffs and
/// cgroup2.
fn guest(bed: &Bed) -> IpvsVm {
    guest_on(bed, None)
}

/// [`guest`] on `kernel` (`None`: the default image, 6.1; `Some("5.10")`:
/// see `ipvs_vm::image_dir`).
pub(crate) fn guest_on(bed: &Bed, kernel: Option<&str>) -> IpvsVm {
    let vm = guest_at(bed, kernel, "10.77.0.2/24");
    vm.ok("ip addr add 10.77.0.100/32 dev eth0");
    vm
}

/// [`guest_on`] at `ip` (with prefix) without the VIP.
pub(crate) fn guest_at(bed: &Bed, kernel: Option<&str>, ip: &str) -> IpvsVm {
    let mut opts = IpvsVmOpts::new(&bed.sw, ip, None);
    opts.bridge = "br0".into();
    opts.modules = Vec::new();
    opts.mem_mb = 1024;
    opts.kernel = kernel.map(str::to_owned);
    let vm = IpvsVm::boot(&opts)
        .unwrap_or_else(|e| panic!("boot the {} guest: {e}", kernel.unwrap_or("6.1")));
    let dir = TempDir::new("kernel61");
    for bin in [RVSD, RVSADM] {
        let name = Path::new(bin).file_name().expect("a file name");
        let path = format!("/usr/bin/{}", name.to_string_lossy());
        vm.push(&path, &stripped(bin, &dir))
            .unwrap_or_else(|e| panic!("push {path}: {e}"));
    }
    vm.ok("chmod 755 /usr/bin/rvsd /usr/bin/rvsadm && \
         mkdir -p /sys/fs/bpf /sys/fs/cgroup && \
         mount -t bpf bpf /sys/fs/bpf && mount -t cgroup2 none /sys/fs/cgroup");
    vm
}

/// Start `rvsd ARGS` in the guest in the background (log in
/// /root/rvsd.log) and wait (bounded: 150 s; the verifier is slow under
/// TCG) for its control socket; the
/// log in the panic when it exits or does not open it.
pub(crate) fn start_rvsd(vm: &IpvsVm, args: &str) {
    let out = vm
        .run_timeout(
            &format!(
                "setsid rvsd {args} --log-level info --socket {SOCKET} \
                 </dev/null >/root/rvsd.log 2>&1 & pid=$!
                 i=0; while [ $i -lt 300 ]; do
                     [ -S {SOCKET} ] && exit 0
                     kill -0 $pid 2>/dev/null || {{ wait $pid; echo \"exited: $?\"; cat /root/rvsd.log; dmesg | tail -5; exit 1; }}
                     sleep 0.5; i=$((i+1))
                 done; echo no socket; cat /root/rvsd.log; exit 1"
            ),
            Duration::from_secs(240),
        )
        .expect("run in the guest");
    assert_eq!(
        out.status,
        0,
        "rvsd {args} in the guest: {}{}",
        out.stdout_text(),
        out.stderr_text()
    );
}

/// `rvsadm ARGS` in the guest: its stdout; panics with rvsd's log when it
/// fails.
pub(crate) fn adm(vm: &IpvsVm, args: &str) -> String {
    vm.ok(&format!(
        "RVS_SOCKET={SOCKET} rvsadm {args} || {{ cat /root/rvsd.log >&2; exit 1; }}"
    ))
}

/// The bed: switch `br0`, the real server r0 (DR, serving `rs0` on :80)
/// and, for the XDP test, the client c.
pub(crate) fn bed(test: &str) -> Option<(Bed, Host, Host)> {
    let (mut bed, [client]) = Bed::with_hosts(test, [("c", "10.77.0.10/24")])?;
    let r0 = bed.real_servers(1, &["--mode", "dr"]).remove(0);
    Some((bed, client, r0))
}

#[test]
fn kernel61_xdp_dr() {
    let test = "kernel61_xdp_dr";
    if !ipvs_vm::available_or_skip(test) {
        return;
    }
    let Some((bed, client, r0)) = bed(test) else {
        return;
    };
    let t0 = Instant::now();
    let vm = guest(&bed);
    let booted = t0.elapsed();
    // No --flow-table-size: rvsd sizes its flow tables to the guest's 1 GB
    // (2^20 entries each, preallocated, would have the OOM killer end it).
    start_rvsd(&vm, "--dataplane xdp --interface eth0");
    // (The log's colour codes removed: ESC, then `[..m`.)
    let flows = vm.ok(
        "tr -d '\\033' </root/rvsd.log | grep -oE 'flows(\\[[0-9;]*m)*=(\\[[0-9;]*m)*[0-9]+' \
         | head -1 | grep -oE '[0-9]+$'",
    );
    let flows: u32 = flows.trim().parse().expect("rvsd logs its flow table size");
    assert!(flows < 1 << 20, "the flow tables fit the guest: {flows}");
    let started = t0.elapsed();
    adm(&vm, "-A -t 10.77.0.100:80 -s rr");
    adm(&vm, &format!("-a -t 10.77.0.100:80 -r {}:80 -g", r0.addr));
    // rvsd schedules a DR real server once its MAC is resolved; until then
    // the program leaves the SYN to the guest's stack, which refuses it at
    // once (IPVS without an available real server refuses too, with an
    // ICMP port unreachable). So: tries a second apart for up to 90 s (the
    // emulated guest resolves slowly on a loaded machine); each try's
    // connect is bounded by 20 s.
    let vip = "10.77.0.100:80".parse().expect("vip");
    let tries = Instant::now();
    let mut conn = std::iter::from_fn(|| {
        (tries.elapsed() < Duration::from_secs(90)).then(|| {
            connect(&client, vip, Duration::from_secs(20))
                .inspect_err(|_| std::thread::sleep(Duration::from_secs(1)))
                .ok()
        })
    })
    .flatten()
    .next()
    .unwrap_or_else(|| {
            let seen = vm.run(&format!(
                "RVS_SOCKET={SOCKET} rvsadm -Ln --stats; ip link show eth0; ip neigh show; \
                 cat /sys/class/net/eth0/statistics/rx_packets /sys/class/net/eth0/statistics/tx_packets; \
                 cat /root/rvsd.log; dmesg | tail -5"
            ));
            panic!("no connection to the VIP through rvsd's XDP plane on 6.1: {seen:?}")
        });
    assert_eq!(conn.server, "rs0");
    conn.echo("through 6.1\n", Duration::from_secs(20))
        .expect("echo from the real server");
    let port = conn.stream.local_addr().expect("local address").port();
    // rvsadm reads the director's mirror of the flow tables and counters,
    // which the plane's periodic report refreshes a page at a time: polled
    // (bounded: 60 s, the emulated guest is slow) until both show it.
    let listed = |out: &str| {
        out.lines().any(|l| {
            l.contains(&format!("10.77.0.10:{port}")) && l.contains(&format!("{}:80", r0.addr))
        })
    };
    let counted = |out: &str| {
        let conns: Vec<u64> = out
            .lines()
            .filter(|l| l.contains("10.77.0.100:80") || l.contains(&format!("{}:80", r0.addr)))
            .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
            .collect();
        conns.len() == 2 && conns.iter().all(|&n| n >= 1)
    };
    let shown = Instant::now();
    let (mut lnc, mut stats) = (String::new(), String::new());
    while shown.elapsed() < Duration::from_secs(60) {
        lnc = adm(&vm, "-Lnc");
        stats = adm(&vm, "-Ln --stats");
        if listed(&lnc) && counted(&stats) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(
        listed(&lnc),
        "the guest's -Lnc lists the client's connection: {lnc}"
    );
    assert!(
        counted(&stats),
        "--stats counts the connection on the service and the real server: {stats}"
    );
    // Busybox's `ip` has no `-d`: the attach mode as rvsd logged it.
    let mode = vm.ok("grep -oE 'Driver|Skb|Hw' /root/rvsd.log | head -1");
    eprintln!(
        "{test}: boot+push {booted:?}, rvsd up {started:?}, attach {}, flows {flows}, total {:?}",
        mode.trim(),
        t0.elapsed()
    );
}

#[test]
fn kernel61_sock() {
    let test = "kernel61_sock";
    if !ipvs_vm::available_or_skip(test) {
        return;
    }
    let Some((bed, _client, r0)) = bed(test) else {
        return;
    };
    let t0 = Instant::now();
    let vm = guest(&bed);
    let booted = t0.elapsed();
    vm.ok("mkdir -p /sys/fs/cgroup/rvs");
    start_rvsd(&vm, "--dataplane sock --cgroup /sys/fs/cgroup/rvs");
    adm(&vm, "-A -t 10.77.0.100:80 -s rr");
    adm(&vm, &format!("-a -t 10.77.0.100:80 -r {}:80 -g", r0.addr));
    // A shell in the cgroup: its nc's connect() to the VIP goes to r0,
    // which greets with its name and echoes.
    let script = "echo $$ >/sys/fs/cgroup/rvs/cgroup.procs && \
                  (echo hello-6.1; sleep 2) | timeout 10 nc 10.77.0.100 80";
    let mut answer = String::new();
    for _ in 0..5 {
        let out = vm
            .run_timeout(script, Duration::from_secs(20))
            .expect("run in the guest");
        answer = out.stdout_text();
        if answer == "rs0\nhello-6.1\n" {
            break;
        }
    }
    assert_eq!(
        answer,
        "rs0\nhello-6.1\n",
        "a client in the cgroup reaches r0 through the sock plane on 6.1; rvsd: {}",
        vm.run("cat /root/rvsd.log")
            .map(|o| o.stdout_text())
            .unwrap_or_default()
    );
    eprintln!("{test}: boot+push {booted:?}, total {:?}", t0.elapsed());
}
