//! rvsd on Debian 11's 5.10 cloud kernel in the kernel-IPVS guest (built
//! by `scripts/ipvs-vm-image --kernel 5.10`), on kernel61.rs's bed and
//! helpers (issue 29, "the kernels users run"): what runs there passes with
//! real traffic, what cannot run is refused at start with one line naming
//! the missing kernel features.
//!
//! * The XDP and sock planes need BPF atomic fetch instructions (5.12) and
//!   `bpf_loop` (5.17), the XDP plane also `bpf_xdp_load_bytes` (5.18):
//!   rvsd exits naming them, not with the verifier's log. The real-server
//!   programs that load on 5.10 (`rvsd realserver --mode tun`'s XDP
//!   decapsulator, `--toa`'s cgroup programs) attach.
//! * The proxy plane (no BPF): a client on the segment connects to the VIP
//!   on the guest and reaches the real server r0.
//! * The guest as a TUN real server (`rvsd realserver --mode tun`, its XDP
//!   decapsulator verified and attached by 5.10): a director on the host's
//!   kernel (`rvsd --dataplane xdp`, `-i`) sends it the client's IPIP
//!   packets; the guest answers the client directly.

use std::time::{Duration, Instant};

use rvs_testbed::ipvs_vm::{self, IpvsVm};

use crate::harness::Rvsadm as _;
use crate::kernel61::{SOCKET, adm, bed, guest_at, guest_on, start_rvsd};
use crate::netns::connect;

/// The guest's kernel.
const KERNEL: &str = "5.10";

/// The guest's `uname -r`, checked to be a 5.10 kernel (not the default
/// image's).
fn uname(vm: &IpvsVm) -> String {
    let r = vm.ok("uname -r").trim().to_owned();
    assert!(r.starts_with("5.10."), "the guest runs 5.10: {r}");
    r
}

/// `rvsd ARGS` in the guest, which must exit (bounded: 200 s, the verifier
/// is slow under TCG) with a failure: its `rvsd: ` line (the error) and
/// its whole output.
fn refused(vm: &IpvsVm, args: &str) -> (String, String) {
    let out = vm
        .run_timeout(
            &format!(
                "timeout 200 rvsd {args} --socket {SOCKET} </dev/null >/root/refused.log 2>&1; \
                 echo \"exit $?\"; cat /root/refused.log"
            ),
            Duration::from_secs(240),
        )
        .expect("run in the guest");
    let text = out.stdout_text();
    let status = text.lines().next().unwrap_or_default();
    assert!(
        status != "exit 0" && status != "exit 124",
        "rvsd {args} on 5.10 exits with a failure, not a start or a hang: {text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("rvsd: "))
        .unwrap_or_else(|| panic!("rvsd {args}: no `rvsd: ` error line: {text}"))
        .to_owned();
    (line, text)
}

#[test]
fn kernel510_xdp_sock_refused() {
    let test = "kernel510_xdp_sock_refused";
    if !ipvs_vm::available_or_skip_kernel(test, Some(KERNEL)) {
        return;
    }
    let Some((bed, _client, _r0)) = bed(test) else {
        return;
    };
    let t0 = Instant::now();
    let vm = guest_on(&bed, Some(KERNEL));
    let booted = t0.elapsed();
    let release = uname(&vm);
    // "5.10.0-46-cloud-amd64" runs Linux 5.10.262: the message names the
    // version rvs reads (uname's version string on Debian).
    let version = vm.ok("uname -v");
    let version = version
        .split_whitespace()
        .find(|w| w.starts_with("5.10."))
        .and_then(|w| w.split('-').next())
        .unwrap_or_else(|| panic!("a 5.10 version in `uname -v`: {version}"))
        .to_owned();
    let (line, all) = refused(&vm, "--dataplane xdp --interface eth0");
    assert_eq!(
        line,
        format!(
            "rvsd: XDP plane: this kernel ({version}) lacks BPF atomic fetch instructions \
             (__sync_fetch_and_add's result) (Linux 5.12), bpf_loop (Linux 5.17), \
             bpf_xdp_load_bytes (Linux 5.18); the proxy plane runs here"
        ),
        "the XDP plane's refusal names what 5.10 lacks: {all}"
    );
    assert!(!all.contains("Verifier"), "no verifier log: {all}");
    vm.ok("mkdir -p /sys/fs/cgroup/rvs");
    let (line, all) = refused(&vm, "--dataplane sock --cgroup /sys/fs/cgroup/rvs");
    assert_eq!(
        line,
        format!(
            "rvsd: sock plane: this kernel ({version}) lacks BPF atomic fetch instructions \
             (__sync_fetch_and_add's result) (Linux 5.12), bpf_loop (Linux 5.17); \
             the proxy plane runs here"
        ),
        "the sock plane's refusal names what 5.10 lacks: {all}"
    );
    assert!(!all.contains("Verifier"), "no verifier log: {all}");
    // The real-server programs that need nothing newer load and attach.
    let tun = vm.ok("rvsd realserver --vip 10.77.0.200 --mode tun --interface eth0 2>&1");
    assert!(
        tun.contains("decapsulator on eth0"),
        "the XDP decapsulator attaches on 5.10: {tun}"
    );
    let toa = vm.ok("rvsd realserver --toa --cgroup /sys/fs/cgroup/rvs 2>&1");
    assert!(
        toa.contains("TOA reader on cgroup /sys/fs/cgroup/rvs"),
        "the TOA reader attaches on 5.10: {toa}"
    );
    eprintln!(
        "{test}: {release} ({version}), boot+push {booted:?}, total {:?}",
        t0.elapsed()
    );
}

#[test]
fn kernel510_proxy() {
    let test = "kernel510_proxy";
    if !ipvs_vm::available_or_skip_kernel(test, Some(KERNEL)) {
        return;
    }
    let Some((bed, client, r0)) = bed(test) else {
        return;
    };
    let t0 = Instant::now();
    let vm = guest_on(&bed, Some(KERNEL));
    let booted = t0.elapsed();
    let release = uname(&vm);
    start_rvsd(&vm, "--dataplane proxy");
    adm(&vm, "-A -t 10.77.0.100:80 -s rr");
    adm(&vm, &format!("-a -t 10.77.0.100:80 -r {}:80 -m", r0.addr));
    // The proxy listens once the service is added; a few tries a second
    // apart (bounded: 60 s, the emulated guest is slow), each connect
    // bounded by 20 s.
    let vip = "10.77.0.100:80".parse().expect("vip");
    let tries = Instant::now();
    let mut conn = std::iter::from_fn(|| {
        (tries.elapsed() < Duration::from_secs(60)).then(|| {
            connect(&client, vip, Duration::from_secs(20))
                .inspect_err(|_| std::thread::sleep(Duration::from_secs(1)))
                .ok()
        })
    })
    .flatten()
    .next()
    .unwrap_or_else(|| {
        let seen = vm.run("cat /root/rvsd.log");
        panic!("no connection to the VIP through rvsd's proxy plane on 5.10: {seen:?}")
    });
    assert_eq!(conn.server, "rs0");
    conn.echo("through 5.10\n", Duration::from_secs(20))
        .expect("echo from the real server");
    eprintln!(
        "{test}: {release}, boot+push {booted:?}, total {:?}",
        t0.elapsed()
    );
}

#[test]
fn kernel510_realserver_tun() {
    let test = "kernel510_realserver_tun";
    if !ipvs_vm::available_or_skip_kernel(test, Some(KERNEL)) {
        return;
    }
    let Some((mut bed, client, dir)) = crate::netns::director_bed(test) else {
        return;
    };
    let t0 = Instant::now();
    let vm = guest_at(&bed, Some(KERNEL), "10.77.0.12/24");
    let booted = t0.elapsed();
    let release = uname(&vm);
    let prep = vm.ok("rvsd realserver --vip 10.77.0.100 --mode tun --interface eth0 2>&1");
    assert!(
        prep.contains("decapsulator on eth0"),
        "the XDP decapsulator attaches on 5.10: {prep}"
    );
    // A server on :80 greeting with its name, then echoing (busybox nc,
    // one process a connection; at most 50).
    vm.ok("printf '#!/bin/sh\\necho rsvm\\nexec cat\\n' >/root/serve.sh && chmod 755 /root/serve.sh && \
           (setsid sh -c 'i=0; while [ $i -lt 50 ]; do nc -l -p 80 -e /root/serve.sh; i=$((i+1)); done' \
            </dev/null >/dev/null 2>&1 &)");
    let d = crate::xdp_rvsd::start(&mut bed, &dir);
    d.ok("-A -t 10.77.0.100:80 -s rr");
    d.ok("-a -t 10.77.0.100:80 -r 10.77.0.12:80 -i");
    // The director schedules the real server once its MAC is resolved:
    // tries a second apart (bounded: 60 s), each connect bounded by 20 s.
    let vip = "10.77.0.100:80".parse().expect("vip");
    let tries = Instant::now();
    let mut conn = std::iter::from_fn(|| {
        (tries.elapsed() < Duration::from_secs(60)).then(|| {
            connect(&client, vip, Duration::from_secs(20))
                .inspect_err(|_| std::thread::sleep(Duration::from_secs(1)))
                .ok()
        })
    })
    .flatten()
    .next()
    .unwrap_or_else(|| {
        let seen = vm
            .run("ip addr; ip link show eth0; cat /proc/net/snmp | head -4")
            .map(|o| o.stdout_text());
        panic!("no connection through the director to the 5.10 guest's VIP: {seen:?}")
    });
    assert_eq!(conn.server, "rsvm");
    conn.echo("decapsulated by 5.10\n", Duration::from_secs(20))
        .expect("echo from the guest");
    eprintln!(
        "{test}: {release}, boot+push {booted:?}, total {:?}",
        t0.elapsed()
    );
}
