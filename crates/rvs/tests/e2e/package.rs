//! The Debian package (`scripts/build-deb`, cargo-deb) as a system daemon:
//! built twice (two versions) from this build's binaries, installed with
//! dpkg into an isolated root, configured for the XDP DR plane, upgraded in
//! place under real TCP load, then removed and purged. The package's own
//! maintainer scripts do the work.
//!
//! The isolated root: a holder process in a private mount namespace mounts
//! an overlay whose lower layer is the host's `/` and whose upper layer is
//! a tmpfs, with /proc, /sys (so bpffs) and /dev bound in; every command
//! runs there through `nsenter` (that mount namespace and the director's
//! network namespace) and `chroot`. dpkg, its database (a copy-on-write
//! copy of the host's), /etc, /usr and /run are the overlay's: nothing is
//! installed on the host. Neither the host nor CI runs systemd, so the
//! scripts take their other path: /etc/init.d/rvsd through invoke-rc.d
//! (the systemd path is tested by booting Debian's systemd in such a root:
//! [`Root::with_systemd`]). A
//! `policy-rc.d` that forbids starting services (Docker images and this
//! machine have one) is removed inside the root, as on an ordinary host.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{RVSD, TempDir};
use crate::netns::{Bed, Host, connect, realserver, sh};

const VIP: [u8; 4] = [10, 77, 0, 100];

/// The bed of the upgrade tests: client `c`, director `d` (the VIP on its
/// eth0), real servers `r1` and `r2`; `None` when the test is skipped.
fn director_bed(test: &str) -> Option<(Bed, [Host; 4])> {
    let (bed, hosts) = Bed::with_hosts(
        test,
        [
            ("c", "10.77.0.10/24"),
            ("d", "10.77.0.2/24"),
            ("r1", "10.77.0.11/24"),
            ("r2", "10.77.0.12/24"),
        ],
    )?;
    hosts[1].exec(&["ip", "addr", "add", "10.77.0.100/32", "dev", "eth0"]);
    Some((bed, hosts))
}

/// The first package's version and the upgrade's.
const V1: &str = "0.1.0-1";
const V2: &str = "0.1.0-2";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether `p` is on the same filesystem as `/` (the overlay's lower layer
/// is `/` alone: a separate /usr or /var would be written through).
fn on_root_fs(p: &str) -> bool {
    match (std::fs::metadata("/"), std::fs::metadata(p)) {
        (Ok(r), Ok(m)) => r.dev() == m.dev(),
        _ => false,
    }
}

fn can_run(test: &str) -> bool {
    if !crate::netns::can_run(test)
        || !rvs_testbed::require_tools(
            test,
            &[
                "cargo",
                "cargo-deb",
                "dpkg",
                "dpkg-deb",
                "unshare",
                "nsenter",
                "chroot",
            ],
        )
    {
        return false;
    }
    for p in ["/usr", "/etc", "/var", "/lib"] {
        if !on_root_fs(p) {
            rvs_testbed::skip_or_fail(
                test,
                format!("{p} is not on /'s filesystem: the overlay root would not isolate it"),
            );
            return false;
        }
    }
    true
}

/// `scripts/build-deb` on this build's (dev profile) binaries, the package
/// written to `out`.
fn build_package(version: &str, out: &Path) -> PathBuf {
    // One build at a time: build-deb renders its assets into one directory
    // of the target dir.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    // target/debug/rvsd -> target
    let target = Path::new(RVSD)
        .parent()
        .and_then(Path::parent)
        .expect("target dir");
    let output = Command::new(repo().join("scripts/build-deb"))
        .args(["--profile", "dev", "--no-build", "--fast", "--deb-version"])
        .arg(version)
        .arg("--output")
        .arg(out)
        .env("CARGO_TARGET_DIR", target)
        .stdin(Stdio::null())
        .output()
        .expect("scripts/build-deb");
    assert!(
        output.status.success(),
        "build-deb {version}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(out.is_file(), "{} written", out.display());
    out.to_path_buf()
}

/// The isolated root (see the module's documentation), torn down on drop:
/// a running rvsd is killed, then the holder, which takes the mount
/// namespace (overlay, tmpfs) with it.
struct Root {
    holder: Child,
    merged: PathBuf,
    /// The director's network namespace, where commands run.
    netns: String,
    /// With [`Root::with_systemd`]: systemd, PID 1 of its own PID
    /// namespace, and the cgroup it runs in (in every hierarchy).
    systemd: Option<Systemd>,
    _dir: TempDir,
}

/// A systemd booted inside the isolated root.
struct Systemd {
    /// Its pid as the host sees it.
    pid1: u32,
    /// `/sys/fs/cgroup/*/NAME`: where it runs and makes its slices.
    cgroup: String,
}

impl Root {
    fn new(netns: &str) -> Root {
        Self::set_up(netns, false)
    }

    /// The root with systemd 252 (Debian's) running in it as PID 1 of a
    /// PID namespace of its own (`container=` set, as under nspawn), in the
    /// director's network namespace and in a cgroup of its own, reaching
    /// only `rvstest.target` (an empty target): what dpkg's maintainer
    /// scripts see on a systemd host (`/run/systemd/system` exists,
    /// systemctl answers). Commands run in its PID namespace, so the pids
    /// systemctl names are the ones `kill` reaches.
    fn with_systemd(netns: &str) -> Root {
        let mut root = Self::set_up(netns, true);
        let holder = root.holder.id();
        let pid1 = rvs_testbed::wait_for(Duration::from_secs(10), || {
            std::fs::read_to_string(format!("/proc/{holder}/task/{holder}/children"))
                .is_ok_and(|c| !c.trim().is_empty())
        })
        .then(|| {
            std::fs::read_to_string(format!("/proc/{holder}/task/{holder}/children"))
                .ok()
                .and_then(|c| c.split_whitespace().next()?.parse().ok())
        })
        .flatten()
        .expect("systemd started");
        root.systemd = Some(Systemd {
            pid1,
            cgroup: format!("rvs-sd-{holder}"),
        });
        let up = rvs_testbed::wait_for(Duration::from_secs(30), || {
            let o = root.run(&["systemctl", "is-system-running"]);
            matches!(
                String::from_utf8_lossy(&o.stdout).trim(),
                "running" | "degraded"
            )
        });
        let o = root.run(&["systemctl", "is-system-running"]);
        assert!(up, "systemd in the root: {o:?}");
        root
    }

    fn set_up(netns: &str, systemd: bool) -> Root {
        let dir = TempDir::new("pkgroot");
        let t = dir.path().display().to_string();
        // systemd: in a cgroup of its own in every hierarchy (it makes its
        // slices below the one it starts in: removed at drop), then PID 1
        // of a new PID namespace, chrooted, with that namespace's /proc.
        let tail = if systemd {
            format!(
                "mkdir -p {t}/merged/etc/systemd/system
                 printf '[Unit]\\nDescription=rvs package test\\n' > {t}/merged/etc/systemd/system/rvstest.target
                 for h in /sys/fs/cgroup/*/; do
                     mkdir -p \"$h\"rvs-sd-$$ 2>/dev/null && echo $$ > \"$h\"rvs-sd-$$/cgroup.procs 2>/dev/null || true
                 done
                 echo ready
                 exec unshare --pid --fork --kill-child chroot {t}/merged /bin/sh -c \
                     'mount -t proc rvs-proc /proc && exec env container=rvstest /lib/systemd/systemd --system --unit=rvstest.target --log-target=null'"
            )
        } else {
            "echo ready\n             exec sleep 300".to_owned()
        };
        let script = format!(
            "set -e
             mount -t tmpfs -o size=2g rvs-pkg {t}
             mkdir {t}/upper {t}/work {t}/merged
             mount -t overlay rvs-pkg -o lowerdir=/,upperdir={t}/upper,workdir={t}/work {t}/merged
             for d in proc sys dev; do mount --rbind /$d {t}/merged/$d; done
             {tail}"
        );
        // In the director's network namespace: systemd's services are.
        let mut holder = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{netns}"))
            .args([
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("unshare");
        let mut ready = [0u8; 6];
        let read = holder
            .stdout
            .as_mut()
            .expect("holder stdout")
            .read_exact(&mut ready);
        let root = Root {
            holder,
            merged: dir.path().join("merged"),
            netns: netns.to_owned(),
            systemd: None,
            _dir: dir,
        };
        assert!(
            read.is_ok() && &ready == b"ready\n",
            "overlay root not set up"
        );
        root
    }

    /// Path `p` of the root, as seen from the host.
    fn path(&self, p: &str) -> PathBuf {
        let mut h = PathBuf::from(format!("/proc/{}/root", self.holder.id()));
        h.push(self.merged.strip_prefix("/").expect("absolute"));
        h.push(p.trim_start_matches('/'));
        h
    }

    /// Run `args` in the root, in the director's network namespace.
    fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .expect("nsenter")
    }

    /// Replace file `p` of the root with `bytes`, from inside it (a path
    /// resolved from the host could follow an absolute symlink out of it:
    /// /sbin/runlevel -> /bin/systemctl).
    fn write(&self, p: &str, bytes: &[u8]) {
        let mut child = self
            .command(&["sh", "-c", "rm -f \"$0\" && cat >\"$0\"", p])
            .stdin(Stdio::piped())
            .spawn()
            .expect("nsenter");
        let stdin = child.stdin.take().map(|mut s| s.write_all(bytes));
        let status = child.wait().expect("write in the root");
        assert!(
            status.success() && stdin.is_some_and(|r| r.is_ok()),
            "write {p} in the root"
        );
    }

    fn command(&self, args: &[&str]) -> Command {
        let pid = self.holder.id();
        let mut c = Command::new("nsenter");
        c.arg(format!("--mount=/proc/{pid}/ns/mnt"))
            .arg(format!("--net=/run/netns/{}", self.netns));
        if let Some(sd) = &self.systemd {
            c.arg(format!("--pid=/proc/{}/ns/pid", sd.pid1));
        }
        c.arg("chroot")
            .arg(&self.merged)
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        c
    }

    /// `dpkg -r rvs`, then waits (5 s at most) for its prerm to have
    /// stopped the rvsd of `pid`.
    fn remove(&self, pid: u32) {
        self.ok(&["dpkg", "--force-unsafe-io", "-r", "rvs"]);
        let gone = || !Path::new(&format!("/proc/{pid}")).exists();
        assert!(
            rvs_testbed::wait_for(Duration::from_secs(5), gone),
            "rvsd stopped by prerm"
        );
    }

    /// Readies the root for the install: quicker dpkg runs with nothing
    /// else changed (no man-db index rebuild, whose trigger takes seconds;
    /// the installs add --force-unsafe-io: no fsync), and `deb1`, `deb2`
    /// copied in as /root/rvs-1.deb and /root/rvs-2.deb.
    fn stage(&self, deb1: &Path, deb2: &Path) {
        self.ok(&[
            "rm",
            "-f",
            "/usr/sbin/policy-rc.d",
            "/var/lib/man-db/auto-update",
        ]);
        for (deb, name) in [(deb1, "rvs-1.deb"), (deb2, "rvs-2.deb")] {
            let bytes = std::fs::read(deb).expect("read package");
            self.write(&format!("/root/{name}"), &bytes);
        }
    }

    /// [`Root::run`], required to succeed: its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{}: {}{}\n-- /var/log/rvsd.log:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.path("/var/log/rvsd.log")).unwrap_or_default()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pid of the root's running rvsd (its pid file, checked against
    /// the process's name).
    fn rvsd(&self) -> Option<u32> {
        if let Some(sd) = &self.systemd {
            return sd.main_pid(self);
        }
        let pid: u32 = std::fs::read_to_string(self.path("/run/rvs/rvsd.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim() == "rvsd").then_some(pid)
    }

    /// (device, inode) of the root's /usr/sbin/rvsd.
    fn installed_rvsd(&self) -> (u64, u64) {
        let m = std::fs::metadata(self.path("/usr/sbin/rvsd")).expect("installed rvsd");
        (m.dev(), m.ino())
    }
}

/// (device, inode) of the executable process `pid` runs.
fn running_exe(pid: u32) -> (u64, u64) {
    let m = std::fs::metadata(format!("/proc/{pid}/exe")).expect("exe of rvsd");
    (m.dev(), m.ino())
}

impl Systemd {
    /// rvsd.service's main pid (systemctl's, in systemd's PID namespace) as
    /// the host sees it, when that process is rvsd.
    fn main_pid(&self, root: &Root) -> Option<u32> {
        let out = root.run(&[
            "systemctl",
            "show",
            "-p",
            "MainPID",
            "--value",
            "rvsd.service",
        ]);
        let inner: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
        if inner == 0 {
            return None;
        }
        let ns = std::fs::read_link(format!("/proc/{}/ns/pid", self.pid1)).ok()?;
        std::fs::read_dir("/proc").ok()?.find_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            (std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()? == ns).then_some(())?;
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
            (nspid.split_whitespace().last()?.parse::<u32>().ok()? == inner).then_some(())?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            (comm.trim() == "rvsd").then_some(pid)
        })
    }

    /// `systemctl show -p PROPERTY --value rvsd.service`.
    fn property(root: &Root, property: &str) -> String {
        let out = root.run(&[
            "systemctl",
            "show",
            "-p",
            property,
            "--value",
            "rvsd.service",
        ]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        if let Some(pid) = self.rvsd() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let _ = rvs_testbed::wait_for(Duration::from_secs(5), || {
                !Path::new(&format!("/proc/{pid}")).exists()
            });
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        if let Some(sd) = &self.systemd {
            // systemd dies with the holder (unshare --kill-child), and every
            // process of its PID namespace with it; then its cgroups go,
            // deepest first.
            let _ = rvs_testbed::wait_for(Duration::from_secs(10), || {
                !Path::new(&format!("/proc/{}", sd.pid1)).exists()
            });
            let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
                return;
            };
            for h in hierarchies.flatten() {
                remove_cgroup_tree(&h.path().join(&sd.cgroup));
            }
        }
    }
}

/// rmdir `dir` and the cgroups below it, deepest first (bounded retries:
/// a dying process may still hold one for a moment).
fn remove_cgroup_tree(dir: &Path) {
    if !dir.is_dir() {
        return;
    }
    if let Ok(children) = std::fs::read_dir(dir) {
        for c in children.flatten() {
            if c.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&c.path());
            }
        }
    }
    let _ = rvs_testbed::wait_for(Duration::from_secs(5), || {
        std::fs::remove_dir(dir).is_ok() || !dir.exists()
    });
}

fn xdp_attached(d: &Host) -> bool {
    let out = Command::new("ip")
        .args(["-n", &d.ns, "link", "show", "eth0"])
        .output()
        .expect("ip");
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

/// The configuration the operator writes after installing: a DR service
/// over the two real servers (no checkers: both are up).
const KEEPALIVED_CONF: &str = "\
virtual_server 10.77.0.100 80 {
    lb_algo rr
    lb_kind DR
    protocol TCP
    real_server 10.77.0.11 80 {
        weight 1
    }
    real_server 10.77.0.12 80 {
        weight 1
    }
}
";

/// What the load saw.
#[derive(Debug, Default)]
struct Load {
    /// Streams whose every echoed chunk came back identical.
    streams_ok: usize,
    /// Streams that broke (error, reset, stall, mismatch), with why.
    streams_broken: Vec<String>,
    /// Echoed bytes over all streams.
    bytes: usize,
    /// New connections that answered / failed.
    new_ok: usize,
    new_failed: usize,
}

/// `n` long-lived streams from `client` to the VIP, each sending a chunk
/// of its own checksummed pattern every 50 ms and requiring it echoed back
/// identical, plus a loop of new connections; all until `stop` (bounded:
/// 60 s).
fn load(client: &Host, n: usize, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Load> {
    let client = client.clone();
    std::thread::spawn(move || {
        let vip = SocketAddr::new(IpAddr::from(VIP), 80);
        let t = Duration::from_secs(5);
        let end = Instant::now() + Duration::from_secs(60);
        let mut streams = Vec::new();
        for i in 0..n {
            let mut c = connect(&client, vip, t).unwrap_or_else(|e| panic!("stream {i}: {e}"));
            assert!(
                c.server.starts_with('r'),
                "stream {i} answered {:?}",
                c.server
            );
            let stop = stop.clone();
            streams.push(std::thread::spawn(move || -> Result<usize, String> {
                let mut sent = 0usize;
                let mut k = 0u32;
                while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                    // 1 KiB: stream, sequence number and a running
                    // checksum of everything sent before.
                    let chunk: String = (0..64)
                        .map(|j| format!("{i:04}{k:06}{:06}\n", (sent + j) % 999_983))
                        .collect::<String>()
                        .chars()
                        .take(1024)
                        .collect();
                    c.echo(&chunk, t)
                        .map_err(|e| format!("stream {i} chunk {k}: {e}"))?;
                    sent += chunk.len();
                    k += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(sent)
            }));
        }
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let (ok2, failed2, stop2) = (ok.clone(), failed.clone(), stop.clone());
        let fresh = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) && Instant::now() < end {
                let good = connect(&client, vip, t)
                    .and_then(|mut c| {
                        c.echo("new\n", t)?;
                        Ok(c.server)
                    })
                    .is_ok_and(|s| s.starts_with('r'));
                if good { &ok2 } else { &failed2 }.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let mut out = Load::default();
        for s in streams {
            match s.join().expect("stream thread") {
                Ok(b) => {
                    out.streams_ok += 1;
                    out.bytes += b;
                }
                Err(e) => out.streams_broken.push(e),
            }
        }
        fresh.join().expect("new-connection thread");
        out.new_ok = ok.load(Ordering::Relaxed);
        out.new_failed = failed.load(Ordering::Relaxed);
        out
    })
}

/// Removes instance `.0`'s pinned XDP plane on drop, whatever the test
/// left (rvsd killed, the package half-removed).
struct Unpin(String);

impl Drop for Unpin {
    fn drop(&mut self) {
        let _ = Command::new(RVSD)
            .args(["--remove", "--instance", &self.0])
            .stdout(Stdio::null())
            .status();
    }
}

/// Versions V1 and V2 of the package, built into a new work folder.
fn two_packages(test: &str, prefix: &str) -> (TempDir, PathBuf, PathBuf) {
    let started = Instant::now();
    let work = TempDir::new(prefix);
    let deb1 = build_package(V1, &work.path().join("rvs-1.deb"));
    let deb2 = build_package(V2, &work.path().join("rvs-2.deb"));
    eprintln!("{test}: two packages built in {:?}", started.elapsed());
    (work, deb1, deb2)
}

#[test]
fn debian_package_installs_upgrades_under_load_and_removes_cleanly() {
    let test = "debian_package_installs_upgrades_under_load_and_removes_cleanly";
    if !can_run(test) {
        return;
    }
    let started = Instant::now();
    let (_work, deb1, deb2) = two_packages(test, "pkg");

    // What the package holds.
    let listing = sh(&["dpkg-deb", "-c", &deb1.display().to_string()]);
    let listing = String::from_utf8_lossy(&listing.stdout);
    for f in [
        "./usr/sbin/rvsd",
        "./usr/sbin/rvsadm",
        "./lib/systemd/system/rvsd.service",
        "./etc/init.d/rvsd",
        "./etc/default/rvsd",
        "./etc/rvs/keepalived.conf",
        "./usr/share/man/man8/rvsd.8.gz",
        "./usr/share/man/man8/rvsadm.8.gz",
        "./usr/share/bash-completion/completions/rvsd",
        "./usr/share/bash-completion/completions/rvsadm",
        "./usr/share/zsh/vendor-completions/_rvsd",
        "./usr/share/zsh/vendor-completions/_rvsadm",
        "./usr/share/fish/vendor_completions.d/rvsd.fish",
        "./usr/share/fish/vendor_completions.d/rvsadm.fish",
        "./usr/share/doc/rvs/copyright",
        "./usr/share/doc/rvs/changelog.Debian.gz",
    ] {
        assert!(
            listing.lines().any(|l| l.ends_with(f)),
            "{f} in the package:\n{listing}"
        );
    }
    let conffiles = sh(&["dpkg-deb", "-I", &deb1.display().to_string(), "conffiles"]);
    let conffiles = String::from_utf8_lossy(&conffiles.stdout);
    for f in [
        "/etc/rvs/keepalived.conf",
        "/etc/default/rvsd",
        "/etc/init.d/rvsd",
    ] {
        assert!(conffiles.lines().any(|l| l == f), "{f}: {conffiles}");
    }
    let version = sh(&["dpkg-deb", "-f", &deb2.display().to_string(), "Version"]);
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), V2);

    // The bed: client, director (VIP on eth0), two DR real servers.
    let Some((mut bed, [c, d, r1, r2])) = director_bed(test) else {
        return;
    };
    for (r, name) in [(&r1, "r1"), (&r2, "r2")] {
        realserver(r, "10.77.0.100", &["--mode", "dr"]);
        bed.server(r, IpAddr::from(VIP), 80, name);
    }

    // Declared before the root: dropped after it has killed rvsd.
    let instance = rvs_testbed::unique_name("rvspkg");
    let _unpin = Unpin(instance.clone());
    let root = Root::new(&d.ns);
    root.stage(&deb1, &deb2);

    // Install where no init runs (this machine, CI: no systemd, no
    // runlevel): configured, registered, not started (invoke-rc.d only
    // starts a service enabled in the current runlevel).
    root.ok(&["dpkg", "--force-unsafe-io", "-i", "/root/rvs-1.deb"]);
    assert!(root.rvsd().is_none(), "nothing started without an init");
    assert!(root.path("/etc/rc2.d/S01rvsd").exists(), "update-rc.d ran");

    // From here the root looks like a sysvinit host at runlevel 2 (no
    // policy-rc.d forbidding starts). rvsd starts with the shipped,
    // all-commented configuration: the proxy plane, an empty table.
    root.write("/sbin/runlevel", b"#!/bin/sh\necho N 2\n");
    root.ok(&["chmod", "755", "/sbin/runlevel"]);
    root.ok(&["invoke-rc.d", "rvsd", "start"]);
    let pid0 = root.rvsd().expect("rvsd started");
    let list = root.ok(&["rvsadm", "-L", "-n"]);
    assert!(list.contains("IP Virtual Server"), "{list}");
    assert!(!xdp_attached(&d), "the default plane is the proxy");

    // The operator configures the XDP DR plane and restarts.
    let opts = format!(
        "--dataplane xdp --interface eth0 --xdp-mode skb --flow-table-size 65536 \
         --log-level warn --instance {instance}"
    );
    root.write("/etc/rvs/keepalived.conf", KEEPALIVED_CONF.as_bytes());
    root.write(
        "/etc/default/rvsd",
        format!("RVSD_OPTS=\"{opts}\"\n").as_bytes(),
    );
    root.ok(&["invoke-rc.d", "rvsd", "restart"]);
    let pid1 = root.rvsd().expect("rvsd restarted");
    assert_ne!(pid0, pid1);
    assert!(xdp_attached(&d), "XDP attached on the director's eth0");
    let pin_dir = PathBuf::from("/sys/fs/bpf/rvs").join(&instance);
    assert!(pin_dir.is_dir(), "{} pinned", pin_dir.display());
    assert_eq!(running_exe(pid1), root.installed_rvsd());
    // Both real servers scheduled once their MACs are resolved.
    let vip = SocketAddr::new(IpAddr::from(VIP), 80);
    let mut seen = std::collections::BTreeSet::new();
    rvs_testbed::wait_for(Duration::from_secs(10), || {
        if let Ok(c) = connect(&c, vip, Duration::from_secs(1)) {
            seen.insert(c.server);
        }
        seen.contains("r1") && seen.contains("r2")
    });
    assert!(
        seen.contains("r1") && seen.contains("r2"),
        "both real servers answer through the VIP: {seen:?}"
    );

    // Upgrade under load.
    let stop = Arc::new(AtomicBool::new(false));
    let running = load(&c, 20, stop.clone());
    std::thread::sleep(Duration::from_secs(1));
    let before = root.installed_rvsd();
    let t = Instant::now();
    root.ok(&[
        "dpkg",
        "--force-unsafe-io",
        "--force-confold",
        "--force-confdef",
        "-i",
        "/root/rvs-2.deb",
    ]);
    let upgrade = t.elapsed();
    // The new rvsd lists the live streams (adopted with the pinned flow
    // table; mirrored from the program every second, once it has started:
    // bounded, a loaded machine verifies the program slowly).
    let mut lcn = String::new();
    rvs_testbed::wait_for(Duration::from_secs(30), || {
        let out = root.run(&["rvsadm", "-L", "-c", "-n"]);
        lcn = String::from_utf8_lossy(&out.stdout).into_owned();
        lcn.lines().filter(|l| l.contains("10.77.0.100:80")).count() >= 20
    });
    stop.store(true, Ordering::Relaxed);
    let seen = running.join().expect("load");
    eprintln!("{test}: upgrade took {upgrade:?}; load: {seen:?}");

    // The new binary runs: a new process on the newly installed file.
    let pid2 = root.rvsd().expect("rvsd running after the upgrade");
    assert_ne!(pid1, pid2, "postinst restarted rvsd");
    assert!(
        !Path::new(&format!("/proc/{pid1}")).exists(),
        "old rvsd gone"
    );
    let after = root.installed_rvsd();
    assert_ne!(before, after, "dpkg replaced /usr/sbin/rvsd");
    assert_eq!(running_exe(pid2), after, "the running rvsd is the new file");
    let v = root.ok(&["dpkg-query", "-W", "-f", "${Version}", "rvs"]);
    assert_eq!(v, V2);
    let list = root.ok(&["rvsadm", "-L", "-n"]);
    assert!(list.contains("TCP  10.77.0.100:80 rr"), "{list}");
    // The data plane carried real traffic before and after.
    assert!(seen.new_ok > 0, "{seen:?}");
    let (after_up, failed) = rvs_testbed::spread(&c, vip, 4, Duration::from_secs(2));
    assert_eq!(failed, 0, "new connections after the upgrade: {after_up:?}");
    // The plane outlives the old rvsd: no flow lost.
    assert!(
        seen.streams_broken.is_empty(),
        "{} streams broke: {:?}",
        seen.streams_broken.len(),
        seen.streams_broken
    );
    assert_eq!(seen.streams_ok, 20);
    assert_eq!(seen.new_failed, 0, "{seen:?}");
    let listed = lcn.lines().filter(|l| l.contains("10.77.0.100:80")).count();
    assert!(listed >= 20, "the 20 streams in -Lcn: {lcn}");

    // Remove: prerm stops rvsd; nothing stays attached or pinned.
    root.remove(pid2);
    assert!(root.rvsd().is_none());
    assert!(!xdp_attached(&d), "no XDP program left on eth0");
    assert!(!pin_dir.exists(), "{} left", pin_dir.display());
    assert!(!root.path("/usr/sbin/rvsd").exists());
    assert!(
        root.path("/etc/rvs/keepalived.conf").exists(),
        "remove keeps conffiles"
    );
    // The VIP answers no more (the director's kernel refuses it).
    assert!(connect(&c, vip, Duration::from_secs(1)).is_err());
    // Purge: the conffiles and the init script's registration go.
    root.ok(&["dpkg", "--force-unsafe-io", "-P", "rvs"]);
    assert!(!root.path("/etc/rvs/keepalived.conf").exists());
    assert!(!root.path("/etc/init.d/rvsd").exists());
    for rc in [
        "rc0.d", "rc1.d", "rc2.d", "rc3.d", "rc4.d", "rc5.d", "rc6.d",
    ] {
        let links = std::fs::read_dir(root.path(&format!("/etc/{rc}"))).expect("rc.d");
        let left: Vec<_> = links
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with("rvsd"))
            .collect();
        assert!(left.is_empty(), "{rc}: {left:?}");
    }
    eprintln!("{test}: {:?} in all", started.elapsed());
}

/// The proxy plane's configuration: a service on the VIP over the two real
/// servers' own addresses.
const PROXY_CONF: &str = "\
virtual_server 10.77.0.100 80 {
    lb_algo rr
    lb_kind NAT
    protocol TCP
    real_server 10.77.0.11 80 {
        weight 1
    }
    real_server 10.77.0.12 80 {
        weight 1
    }
}
";

/// The inode of the TCP socket listening on the VIP's port 80 in `d`'s
/// namespace (from /proc/net/tcp), if one listens.
fn vip_listener(d: &Host) -> Option<String> {
    let out = d.exec(&["cat", "/proc/net/tcp"]);
    // 10.77.0.100:80 as the kernel prints it (the address in host order).
    let local = format!("{:08X}:0050", u32::from_le_bytes(VIP));
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 9 && f[1] == local && f[3] == "0A").then(|| f[9].to_owned())
    })
}

/// Kills the rvsd processes `.0` that still run (an old daemon draining
/// when the test failed).
struct KillAll(Vec<u32>);

impl Drop for KillAll {
    fn drop(&mut self) {
        for pid in &self.0 {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "rvsd" {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// Issue 13: with the proxy data plane, installing a new package over a
/// running rvsd (postinst -> `invoke-rc.d rvsd restart`) and the init
/// script's restart hand the listening socket to a new rvsd (`--takeover`):
/// three in-place upgrades while 20 proxied streams carry checksummed data
/// and new connections keep coming: no stream breaks, no new connection
/// fails, each upgrade runs a new process on the same listening socket, and
/// the old ones exit once their connections have ended.
#[test]
fn debian_package_upgrade_hands_proxied_connections_over() {
    proxy_upgrade(
        "debian_package_upgrade_hands_proxied_connections_over",
        false,
    );
}

/// Issue 13 under systemd: the same upgrades with systemd running the unit
/// the package ships (rvsd.service: NotifyAccess=all, its sandbox): the
/// postinst's SIGUSR2 makes the running rvsd start the new binary inside
/// the unit, which tells systemd it is the main process now (MAINPID=):
/// no stream breaks, no new connection fails, systemd names the new pid,
/// the unit stays active and is never restarted.
#[test]
fn debian_package_upgrade_under_systemd_hands_proxied_connections_over() {
    let test = "debian_package_upgrade_under_systemd_hands_proxied_connections_over";
    if !rvs_testbed::require_tools(test, &["systemctl"])
        || !Path::new("/lib/systemd/systemd").exists() && !skip(test, "no /lib/systemd/systemd")
    {
        return;
    }
    proxy_upgrade(test, true);
}

/// A missing piece: printed, and under CI (RVS_REQUIRE_PRIVILEGED) a
/// failure. Returns false (the test stops).
fn skip(test: &str, why: &str) -> bool {
    rvs_testbed::skip_or_fail(test, why);
    false
}

/// The proxy plane's in-place upgrades, through the init script
/// (`systemd` false) or under systemd.
fn proxy_upgrade(test: &str, systemd: bool) {
    if !can_run(test) {
        return;
    }
    let started = Instant::now();
    let (_work, deb1, deb2) = two_packages(test, "pkgproxy");

    // The bed: client, director (the VIP on eth0), two real servers
    // listening on their own addresses.
    let Some((mut bed, [c, d, r1, r2])) = director_bed(test) else {
        return;
    };
    for (r, name) in [(&r1, "r1"), (&r2, "r2")] {
        let addr = r.addr;
        bed.server(r, addr, 80, name);
    }

    let instance = rvs_testbed::unique_name("rvspkgp");
    let mut pids = KillAll(Vec::new());
    let root = if systemd {
        Root::with_systemd(&d.ns)
    } else {
        Root::new(&d.ns)
    };
    root.stage(&deb1, &deb2);
    // The configuration first: under systemd the postinst starts rvsd.
    root.ok(&["mkdir", "-p", "/etc/rvs"]);
    root.write("/etc/rvs/keepalived.conf", PROXY_CONF.as_bytes());
    root.write(
        "/etc/default/rvsd",
        format!("RVSD_OPTS=\"--log-level warn --instance {instance}\"\n").as_bytes(),
    );
    root.ok(&[
        "dpkg",
        "--force-unsafe-io",
        "--force-confold",
        "-i",
        "/root/rvs-1.deb",
    ]);
    if !systemd {
        root.write("/sbin/runlevel", b"#!/bin/sh\necho N 2\n");
        root.ok(&["chmod", "755", "/sbin/runlevel"]);
        root.ok(&["invoke-rc.d", "rvsd", "start"]);
    }
    let Some(mut pid) = root.rvsd() else {
        panic!(
            "rvsd started: {}",
            root.ok(&["sh", "-c", "systemctl status rvsd.service 2>&1 || true"])
        )
    };
    pids.0.push(pid);
    assert!(!xdp_attached(&d), "the proxy plane");
    let vip = SocketAddr::new(IpAddr::from(VIP), 80);
    let (first, failed) = rvs_testbed::spread(&c, vip, 4, Duration::from_secs(2));
    assert_eq!(failed, 0, "through the proxy: {first:?}");
    let listener = vip_listener(&d).expect("rvsd listens on the VIP");

    // Three in-place upgrades under load: the package upgraded, the init
    // script's restart, the package downgraded back.
    let stop = Arc::new(AtomicBool::new(false));
    let running = load(&c, 20, stop.clone());
    std::thread::sleep(Duration::from_secs(1));
    let steps: [(&str, &[&str]); 3] = [
        (
            "dpkg -i rvs-2.deb",
            &[
                "dpkg",
                "--force-unsafe-io",
                "--force-confold",
                "-i",
                "/root/rvs-2.deb",
            ],
        ),
        (
            "invoke-rc.d rvsd restart",
            &["invoke-rc.d", "rvsd", "restart"],
        ),
        (
            "dpkg -i rvs-1.deb (downgrade)",
            &[
                "dpkg",
                "--force-unsafe-io",
                "--force-confold",
                "-i",
                "/root/rvs-1.deb",
            ],
        ),
    ];
    let mut took = Vec::new();
    // systemd has no init-script restart (`systemctl restart` is a stop
    // and a start).
    for (what, cmd) in steps
        .into_iter()
        .filter(|(w, _)| !systemd || w.starts_with("dpkg"))
    {
        let before = root.installed_rvsd();
        let t = Instant::now();
        let out = root.ok(cmd);
        took.push((what, t.elapsed()));
        assert!(out.contains("took over from rvsd"), "{what}: {out}");
        let new = root.rvsd().expect("rvsd runs after the upgrade");
        pids.0.push(new);
        assert_ne!(new, pid, "{what}: a new rvsd");
        assert_eq!(
            running_exe(new),
            root.installed_rvsd(),
            "{what}: the new rvsd runs the installed file"
        );
        if what.starts_with("dpkg") {
            assert_ne!(before, root.installed_rvsd(), "{what}: dpkg replaced rvsd");
        }
        assert_eq!(
            vip_listener(&d).as_ref(),
            Some(&listener),
            "{what}: the same listening socket"
        );
        let list = root.ok(&["rvsadm", "-L", "-n"]);
        assert!(list.contains("TCP  10.77.0.100:80 rr"), "{what}: {list}");
        if systemd {
            for (property, want) in [("ActiveState", "active"), ("NRestarts", "0")] {
                assert_eq!(
                    Systemd::property(&root, property),
                    want,
                    "{what}: {property}"
                );
            }
        }
        pid = new;
        std::thread::sleep(Duration::from_secs(2));
    }
    stop.store(true, Ordering::Relaxed);
    let seen = running.join().expect("load");
    eprintln!("{test}: upgrades {took:?}; load: {seen:?}");
    assert!(
        seen.streams_broken.is_empty(),
        "{} streams broke: {:?}",
        seen.streams_broken.len(),
        seen.streams_broken
    );
    assert_eq!(seen.streams_ok, 20, "{seen:?}");
    assert_eq!(seen.new_failed, 0, "{seen:?}");
    assert!(seen.new_ok > 0, "{seen:?}");
    // The old daemons exit once their connections have ended.
    let olds: Vec<u32> = pids.0[..pids.0.len() - 1].to_vec();
    assert!(
        rvs_testbed::wait_for(Duration::from_secs(15), || olds
            .iter()
            .all(|p| !Path::new(&format!("/proc/{p}")).exists())),
        "the old rvsd processes {olds:?} exited"
    );
    let (after, failed) = rvs_testbed::spread(&c, vip, 4, Duration::from_secs(2));
    assert_eq!(failed, 0, "after the upgrades: {after:?}");

    root.remove(pid);
    assert!(vip_listener(&d).is_none(), "nothing listens after removal");
    eprintln!("{test}: {:?} in all", started.elapsed());
}

/// The package's /etc/rvs/keepalived.conf is valid as shipped (all
/// commented: an empty table) and, with its example uncommented (lines
/// `#x` and `#    x`, where prose comments are `# x`), without a warning.
#[test]
fn shipped_keepalived_conf_example_is_valid() {
    let shipped = repo().join("dist/keepalived.conf");
    let text = std::fs::read_to_string(&shipped).expect("dist/keepalived.conf");
    let uncommented: String = text
        .lines()
        .filter_map(|l| match l.strip_prefix('#') {
            Some(rest) if rest.is_empty() || rest.starts_with('#') => None,
            Some(rest) if rest.starts_with(' ') && !rest.starts_with("  ") => None,
            Some(rest) => Some(format!("{rest}\n")),
            None => Some(format!("{l}\n")),
        })
        .collect();
    let dir = TempDir::new("pkgconf");
    let example = dir.write("keepalived.conf", &uncommented);
    for (file, want) in [
        (&shipped, "0 virtual services"),
        (
            &example,
            "1 virtual services, 2 real servers; 1 vrrp_instance",
        ),
    ] {
        let out = Command::new(RVSD)
            .arg("-f")
            .arg(file)
            .arg("--check")
            .output()
            .expect("rvsd --check");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{}: {stderr}", file.display());
        assert!(stdout.contains(want), "{}: {stdout}", file.display());
        assert!(!stderr.contains("warning"), "{}: {stderr}", file.display());
    }
}
