//! The namespace test bed (shared/spec/TESTBED.md) from `rvs-testbed`, with
//! what only rvs's end-to-end tests add: the XDP object check before a bed
//! is made, `rvsd realserver` in a host, an XDP_PASS program on a bridge
//! port, and forgetting `rvsd realserver`'s saved sysctls when the bed goes.
//!
//! Sockets keep the namespace they were created in, so servers and clients
//! run in this process: a short-lived thread enters the namespace
//! (`setns` applies per thread), creates the socket and hands it back.

use std::ops::{Deref, DerefMut};
use std::process::Output;

#[allow(unused_imports)] // the old paths of these helpers stay usable
pub use rvs_testbed::{Conn, Host, connect, in_ns, spread};

/// True when the bed can run here (root, iproute2, ethtool, the compiled
/// XDP objects); otherwise skips with the reason ([`rvs_testbed::skip_or_fail`]:
/// under CI that is a failure).
pub fn can_run(test: &str) -> bool {
    if !rvs_testbed::require_root(test, "network namespaces and XDP need root")
        || !rvs_testbed::require_tools(test, &["ip", "ethtool"])
    {
        return false;
    }
    if let Err(e) = rvs_xdp::Object::Director.bytes() {
        rvs_testbed::skip_or_fail(test, e);
        return false;
    }
    true
}

/// Prepare `h` as a real server: `rvsd realserver --vip VIP --interface
/// eth0` plus the mode arguments, inside its namespace.
pub fn realserver(h: &Host, vip: &str, mode: &[&str]) {
    let mut args = vec![
        "ip",
        "netns",
        "exec",
        &h.ns,
        crate::harness::RVSD,
        "realserver",
        "--vip",
        vip,
        "--interface",
        "eth0",
    ];
    args.extend_from_slice(mode);
    sh(&args);
}

/// Run a command; panic with its output when it fails.
pub fn sh(args: &[&str]) -> Output {
    rvs_testbed::sh(args)
}

/// [`rvs_testbed::Bed`] (every method of it through `Deref`) plus the
/// XDP_PASS helper; dropping it also forgets `rvsd realserver`'s saved
/// state of its namespaces.
pub struct Bed(rvs_testbed::Bed);

impl Bed {
    /// A new bed with its switch, or None (printed why) when it cannot run.
    pub fn new(test: &str) -> Option<Bed> {
        can_run(test).then(|| Bed(rvs_testbed::Bed::new("rvs")))
    }

    /// A bed for `test` with hosts `(role, cidr)` on its segment `br0`, or
    /// None (printed why) when it cannot run.
    pub fn with_hosts<const N: usize>(
        test: &str,
        hosts: [(&str, &str); N],
    ) -> Option<(Bed, [Host; N])> {
        let mut bed = Bed::new(test)?;
        let hosts = hosts.map(|(role, cidr)| bed.host(role, cidr));
        Some((bed, hosts))
    }

    /// `n` real servers `r0`, `r1`, ... (10.77.0.11 up) of the VIP
    /// 10.77.0.100, prepared by `rvsd realserver` with `mode` (`--mode dr`,
    /// `--mode tun ...`), each serving `rsI` on :80.
    pub fn real_servers(&mut self, n: usize, mode: &[&str]) -> Vec<Host> {
        (0..n)
            .map(|i| {
                let h = self.host(&format!("r{i}"), &format!("10.77.0.{}/24", 11 + i));
                realserver(&h, "10.77.0.100", mode);
                self.server(&h, "0.0.0.0".parse().expect("any"), 80, &format!("rs{i}"));
                h
            })
            .collect()
    }

    /// One-arm NAT: director `dir` also on 10.78.0.1/24 and forwarding;
    /// `n` real servers `r0`, `r1`, ... (10.78.0.11 up) whose default route
    /// is the director, each serving `rsI` on :80.
    pub fn nat_servers(&mut self, dir: &Host, n: usize) -> Vec<Host> {
        dir.exec(&["ip", "addr", "add", "10.78.0.1/24", "dev", "eth0"]);
        dir.exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"]);
        (0..n)
            .map(|i| {
                let h = self.host(&format!("r{i}"), &format!("10.78.0.{}/24", 11 + i));
                h.exec(&["ip", "route", "add", "default", "via", "10.78.0.1"]);
                self.server(&h, "0.0.0.0".parse().expect("any"), 80, &format!("rs{i}"));
                h
            })
            .collect()
    }

    /// Attach an XDP program that passes everything to `host`'s bridge
    /// port: a veth only delivers what its peer sends with XDP_TX/redirect
    /// when it has an XDP program itself (TESTBED.md). The decapsulator
    /// with no VIPs is such a program.
    pub fn xdp_pass_on_port(&mut self, host: &Host) {
        let port = host.port.clone();
        in_ns(&self.sw, move || {
            let mut d = rvs_xdp::decap::Decap::load().expect("decap loads");
            d.attach_persistent(&port)
                .expect("attach XDP_PASS on the bridge port");
        });
    }
}

impl From<rvs_testbed::Bed> for Bed {
    /// A bed made elsewhere, given the XDP_PASS helper and the cleanup.
    fn from(bed: rvs_testbed::Bed) -> Bed {
        Bed(bed)
    }
}

impl Deref for Bed {
    type Target = rvs_testbed::Bed;
    fn deref(&self) -> &rvs_testbed::Bed {
        &self.0
    }
}

impl DerefMut for Bed {
    fn deref_mut(&mut self) -> &mut rvs_testbed::Bed {
        &mut self.0
    }
}

impl Drop for Bed {
    /// Runs before the inner bed deletes the namespaces.
    fn drop(&mut self) {
        for ns in self.0.namespaces() {
            // `rvsd realserver` keeps the sysctl values it replaced per
            // namespace inode; a later namespace may reuse the inode.
            if let Ok(m) = std::fs::metadata(format!("/var/run/netns/{ns}")) {
                use std::os::unix::fs::MetadataExt;
                let _ = std::fs::remove_file(format!("/run/rvs/realserver-{}.json", m.ino()));
            }
        }
    }
}

/// A bed for `test` with client `c` (10.77.0.10) and director `dir`
/// (10.77.0.2) holding the VIP 10.77.0.100/32 on its eth0, XDP_PASS on the
/// director's bridge port; or None (printed why) when it cannot run.
pub fn director_bed(test: &str) -> Option<(Bed, Host, Host)> {
    let (mut bed, [client, dir]) =
        Bed::with_hosts(test, [("c", "10.77.0.10/24"), ("dir", "10.77.0.2/24")])?;
    dir.exec(&["ip", "addr", "add", "10.77.0.100/32", "dev", "eth0"]);
    bed.xdp_pass_on_port(&dir);
    Some((bed, client, dir))
}

/// Whether `h` holds `addr` (IPv4 or IPv6) on its eth0: the VRRP master's
/// virtual address.
pub fn has_addr(h: &Host, addr: &str) -> bool {
    let out = h.exec(&["ip", "-o", "addr", "show", "dev", "eth0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.contains(&format!("inet {addr}/")) || text.contains(&format!("inet6 {addr}/"))
}
