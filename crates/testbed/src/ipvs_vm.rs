//! A real kernel IPVS beside the test bed: a QEMU guest running Debian's
//! cloud kernel (every `ip_vs` module) with busybox and ipvsadm 1.31,
//! attached to namespaces the test gives, driven over a virtio-serial
//! channel.
//!
//! `scripts/ipvs-vm-image` (run by `scripts/install-deps`) builds the
//! guest once into a cache outside the repository ([`cache_dir`]; with
//! `--kernel 5.10` also one on Debian 11's 5.10 beside it, which
//! [`IpvsVmOpts::kernel`] picks); this module boots it:
//!
//! * [`IpvsVm::boot`] makes a tap in the test's namespace, enslaves it to a
//!   bridge there (created, with the host address, when missing), starts
//!   `qemu-system-x86_64` inside the namespace and waits for the guest's
//!   command agent; an optional second NIC lands in another namespace;
//! * [`IpvsVm::run`] runs a shell script in the guest and returns its
//!   stdout, stderr and exit status, with a bounded timeout;
//! * [`IpvsVm::push`] copies bytes to a file in the guest over a
//!   virtio-serial port;
//! * dropping the [`IpvsVm`] kills QEMU and removes its taps and its run
//!   directory — also when the test panics. QEMU runs in the foreground
//!   under a watchdog shell that kills it once the test process is gone
//!   (an abort, a harness timeout, SIGKILL), and a boot first reaps the
//!   guests of test processes that are gone. Every VM has a unique name,
//!   so several run side by side; their boots take a machine-wide lock
//!   (`/run/lock/rvs-ipvs-vm.boot`), one at a time, so parallel test
//!   binaries do not starve each other's emulated guests.
//!
//! `/dev/kvm` on the development and CI machines is a nested PVM device
//! that only boots PVM kernels, so QEMU runs under TCG (software
//! emulation): about 5 s to boot, 0.1–0.2 s a command. Compare behaviour,
//! never speed.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::{is_root, skip_or_fail, unique_name};

/// The default cache `scripts/ipvs-vm-image` builds into.
pub const DEFAULT_CACHE: &str = "/var/cache/rvs-ipvs-vm";

/// The guest image cache: `RVS_IPVS_VM_CACHE` or [`DEFAULT_CACHE`].
pub fn cache_dir() -> PathBuf {
    std::env::var_os("RVS_IPVS_VM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE))
}

/// The directory of a guest image: the cache itself for the default kernel
/// (`None`: Debian 12's 6.1), `kernel-K/` in it for kernel `K`
/// (`scripts/ipvs-vm-image --kernel 5.10` builds `kernel-5.10/`, Debian
/// 11's 5.10; QEMU and the userland stay the default image's).
pub fn image_dir(kernel: Option<&str>) -> PathBuf {
    match kernel {
        None => cache_dir(),
        Some(k) => cache_dir().join(format!("kernel-{k}")),
    }
}

/// Why the guest cannot boot here, or `None` when it can: not root, or the
/// cache is missing or incomplete.
pub fn unavailable() -> Option<String> {
    unavailable_kernel(None)
}

/// [`unavailable`] for the guest on `kernel` (see [`image_dir`]).
pub fn unavailable_kernel(kernel: Option<&str>) -> Option<String> {
    if !is_root() {
        return Some("the kernel-IPVS guest needs root (taps, namespaces)".into());
    }
    let c = cache_dir();
    let img = image_dir(kernel);
    // An image whose agent speaks over the emulated UART (older
    // scripts/ipvs-vm-image) does not answer on the virtio port.
    if img.join("ready").exists()
        && !std::fs::read_to_string(img.join("ready")).is_ok_and(|r| r.contains("agent=virtio"))
    {
        return Some(format!(
            "{} is an older image (agent on the UART): scripts/ipvs-vm-image rebuilds it",
            img.display()
        ));
    }
    let build = match kernel {
        None => "scripts/ipvs-vm-image builds it".to_owned(),
        Some(k) => format!("scripts/ipvs-vm-image --kernel {k} builds it"),
    };
    for f in [
        img.join("ready"),
        img.join("vmlinuz"),
        img.join("initrd.img"),
        c.join("root/usr/bin/qemu-system-x86_64"),
    ] {
        if !f.exists() {
            return Some(format!(
                "{} is missing ({build}; scripts/install-deps runs it)",
                f.display()
            ));
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}

/// True when the guest can boot here; otherwise [`skip_or_fail`] for
/// `test` (a failure under CI) and false.
pub fn available_or_skip(test: &str) -> bool {
    available_or_skip_kernel(test, None)
}

/// [`available_or_skip`] for the guest on `kernel` (see [`image_dir`]).
pub fn available_or_skip_kernel(test: &str, kernel: Option<&str>) -> bool {
    match unavailable_kernel(kernel) {
        None => true,
        Some(why) => {
            skip_or_fail(test, why);
            false
        }
    }
}

/// How to boot an [`IpvsVm`].
#[derive(Clone, Debug)]
pub struct IpvsVmOpts {
    /// The namespace eth0's tap goes into (the test created it).
    pub netns: String,
    /// eth0's address in the guest, with prefix (`10.250.0.2/24`).
    pub ip: String,
    /// The bridge in `netns` the tap is enslaved to (created when missing;
    /// it goes with the namespace).
    pub bridge: String,
    /// An address put on the bridge when the bridge is created here
    /// (`None`: none).
    pub host_ip: Option<String>,
    /// An optional second NIC (eth1): its namespace, guest address and
    /// bridge address, as for eth0 (bridge named [`IpvsVmOpts::bridge`]).
    pub nic2: Option<(String, String, Option<String>)>,
    /// Modules loaded at boot (`ip_vs` by default).
    pub modules: Vec<String>,
    /// Guest memory in MB.
    pub mem_mb: u32,
    /// The longest wait for the guest's agent to answer after QEMU starts.
    pub boot_timeout: Duration,
    /// The guest's kernel: `None` for the default image (Debian 12's 6.1),
    /// `Some("5.10")` for the one `scripts/ipvs-vm-image --kernel 5.10`
    /// built (Debian 11's; see [`image_dir`]).
    pub kernel: Option<String>,
}

impl IpvsVmOpts {
    /// Options for a guest at `ip` in `netns` behind bridge `ivbr0` with
    /// `host_ip` on it, loading `ip_vs`, 512 MB, 120 s boot bound, the
    /// default kernel.
    pub fn new(netns: &str, ip: &str, host_ip: Option<&str>) -> IpvsVmOpts {
        IpvsVmOpts {
            netns: netns.to_owned(),
            ip: ip.to_owned(),
            bridge: "ivbr0".to_owned(),
            host_ip: host_ip.map(str::to_owned),
            nic2: None,
            modules: vec!["ip_vs".to_owned()],
            mem_mb: 512,
            boot_timeout: Duration::from_secs(120),
            kernel: None,
        }
    }
}

/// What a command in the guest printed and how it exited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmOutput {
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
    /// Its exit status (137 when the guest-side timeout killed it).
    pub status: i32,
}

impl VmOutput {
    /// Standard output as text (lossy).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Standard error as text (lossy).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// A running kernel-IPVS guest; stopped and cleaned up on drop.
#[derive(Debug)]
pub struct IpvsVm {
    name: String,
    dir: PathBuf,
    taps: Vec<(String, String)>,
    pid: Option<u32>,
    /// The shell that runs QEMU and kills it when this process is gone.
    watchdog: Option<Child>,
    agent: Mutex<Option<BufReader<UnixStream>>>,
}

/// Runs `$3…` (QEMU) with its output in `$2` and kills it once process
/// `$1` (the test) is gone; polls once a second. QEMU runs at nice -10:
/// an emulated guest that the scheduler starves (a loaded CI machine runs
/// builds and other tests beside it) answers too late for any bound.
const WATCHDOG: &str = r#"p=$1; log=$2; shift 2
nice -n -10 "$@" </dev/null >"$log" 2>&1 &
q=$!
while kill -0 "$p" 2>/dev/null && kill -0 "$q" 2>/dev/null; do sleep 1; done
kill -KILL "$q" 2>/dev/null
wait"#;

/// The lock file that serializes boots ([`IpvsVm::boot`]).
const BOOT_LOCK: &str = "/run/lock/rvs-ipvs-vm.boot";

static REQ: AtomicU64 = AtomicU64::new(0);

/// The longest script sent inline on the agent port (base64 makes it a
/// third longer; the agent's shell reads the line a byte at a time, so a
/// longer one goes over the data port first).
const MAX_INLINE: usize = 16 * 1024;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn mac(n: u64, nic: u8) -> String {
    let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id());
    format!(
        "52:54:{nic:02x}:{:02x}:{:02x}:{:02x}",
        (h >> 16) as u8,
        (h >> 8) as u8,
        h as u8
    )
}

impl IpvsVm {
    /// Boot a guest as `opts` says and wait for its agent. Errors say what
    /// failed (with the guest console's tail when it did not come up); what
    /// was made so far is removed.
    pub fn boot(opts: &IpvsVmOpts) -> Result<IpvsVm, String> {
        if let Some(why) = unavailable_kernel(opts.kernel.as_deref()) {
            return Err(why);
        }
        reap_stale();
        let cache = cache_dir();
        let image = image_dir(opts.kernel.as_deref());
        let name = unique_name("iv");
        let dir = std::env::temp_dir().join(format!("rvs-ipvsvm-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut vm = IpvsVm {
            name: name.clone(),
            dir: dir.clone(),
            taps: Vec::new(),
            pid: None,
            watchdog: None,
            agent: Mutex::new(None),
        };
        let n = REQ.fetch_add(1, Ordering::SeqCst);
        // Interface names: at most 15 bytes.
        let tap0 = format!("t0{name}").chars().take(15).collect::<String>();
        let tap1 = format!("t1{name}").chars().take(15).collect::<String>();
        // Tap `tap` in the VM's namespace (removed with the VM), and the
        // QEMU arguments of NIC `nic` on it.
        let add_nic = |vm: &mut IpvsVm, nic: u8, tap: &str| -> Result<[String; 4], String> {
            ip(&[
                "-n",
                &opts.netns,
                "tuntap",
                "add",
                "dev",
                tap,
                "mode",
                "tap",
            ])?;
            vm.taps.push((opts.netns.clone(), tap.to_owned()));
            Ok([
                "-netdev".to_owned(),
                format!("tap,id=n{nic},ifname={tap},script=no,downscript=no"),
                "-device".to_owned(),
                format!("virtio-net-pci,netdev=n{nic},mac={},romfile=", mac(n, nic)),
            ])
        };
        ensure_bridge(&opts.netns, &opts.bridge, opts.host_ip.as_deref())?;
        let mut net = add_nic(&mut vm, 0, &tap0)?.to_vec();
        ip(&[
            "-n",
            &opts.netns,
            "link",
            "set",
            &tap0,
            "master",
            &opts.bridge,
        ])?;
        ip(&["-n", &opts.netns, "link", "set", &tap0, "up"])?;
        let mods = if opts.modules.is_empty() {
            "none".to_owned()
        } else {
            opts.modules.join(",")
        };
        // `no_timer_check`: under TCG on a loaded machine the kernel's
        // early check that the timer interrupt ticks can miss it and
        // panic ("IO-APIC + timer doesn't work!"); the emulated timer
        // works, it was only late.
        let mut append = format!(
            "console=ttyS0 quiet panic=-1 no_timer_check ipvsvm.ip={} ipvsvm.mods={mods} ipvsvm.fwd=1",
            opts.ip
        );
        if let Some((ns2, ip2, hip2)) = &opts.nic2 {
            ensure_bridge(ns2, &opts.bridge, hip2.as_deref())?;
            // QEMU opens taps by name in its own namespace: make tap1 there
            // and move it once QEMU holds it.
            net.extend(add_nic(&mut vm, 1, &tap1)?);
            append.push_str(&format!(" ipvsvm.ip2={ip2}"));
        }
        let root = cache.join("root");
        let libs = format!(
            "{}:{}",
            root.join("usr/lib/x86_64-linux-gnu").display(),
            root.join("lib/x86_64-linux-gnu").display()
        );
        let d = |f: &str| dir.join(f).display().to_string();
        // QEMU runs in the foreground under a watchdog shell that kills it
        // as soon as this process is gone, whatever ended it (a panic that
        // aborts, a harness timeout, SIGKILL): no guest outlives its test.
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &opts.netns,
            "sh",
            "-c",
            WATCHDOG,
            "ipvsvm-watch",
        ])
        .arg(std::process::id().to_string())
        .arg(d("qemu.log"))
        .arg("env")
        .arg(format!("LD_LIBRARY_PATH={libs}"))
        .arg(format!(
            "QEMU_MODULE_DIR={}",
            root.join("usr/lib/x86_64-linux-gnu/qemu").display()
        ))
        .arg(root.join("usr/bin/qemu-system-x86_64"))
        .arg("-L")
        .arg(root.join("usr/share/qemu"))
        .arg("-L")
        .arg(root.join("usr/share/seabios"))
        .args(["-name", &format!("ipvsvm-{name}")])
        .args(["-machine", "pc,accel=tcg", "-cpu", "max", "-smp", "1"])
        .args(["-m", &opts.mem_mb.to_string()])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-vga",
            "none",
        ])
        .arg("-no-reboot")
        .arg("-kernel")
        .arg(image.join("vmlinuz"))
        .arg("-initrd")
        .arg(image.join("initrd.img"))
        .args(["-append", &append])
        .args([
            "-chardev",
            &format!("file,id=con,path={}", d("console.log")),
        ])
        .args(["-serial", "chardev:con"])
        .args([
            "-chardev",
            &format!(
                "socket,id=agent,path={},server=on,wait=off",
                d("agent.sock")
            ),
        ])
        .args(["-device", "virtio-serial-pci,romfile="])
        .args(["-device", "virtserialport,chardev=agent,name=ipvsvm.agent"])
        .args([
            "-chardev",
            &format!("socket,id=data,path={},server=on,wait=off", d("data.sock")),
        ])
        .args(["-device", "virtserialport,chardev=data,name=ipvsvm.data"])
        .args(net)
        .args(["-pidfile", &d("qemu.pid")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // Boots take the CPU for seconds under TCG: one at a time across
        // every test process of the machine, so parallel tests do not
        // starve each other's guests into their timeouts.
        let lock_wait = Instant::now();
        let boot_lock = boot_lock()?;
        let lock_wait = lock_wait.elapsed();
        let started = Instant::now();
        vm.watchdog = Some(cmd.spawn().map_err(|e| format!("qemu: {e}"))?);
        vm.pid = vm.wait_pidfile()?;
        vm.wait_agent(opts.boot_timeout)?;
        drop(boot_lock);
        // QEMU holds tap1 by now (it opens its taps before the guest runs).
        if let Some((ns2, _, _)) = &opts.nic2 {
            ip(&["-n", &opts.netns, "link", "set", &tap1, "netns", ns2])?;
            vm.taps[1].0 = ns2.clone();
            ip(&["-n", ns2, "link", "set", &tap1, "master", &opts.bridge])?;
            ip(&["-n", ns2, "link", "set", &tap1, "up"])?;
        }

        eprintln!(
            "ipvs_vm: {name} up in {:?} (waited {lock_wait:?} for the boot lock)",
            started.elapsed()
        );
        Ok(vm)
    }

    /// The VM's unique name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// QEMU's process id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The guest console so far (kernel messages and `/init`'s output).
    pub fn console(&self) -> String {
        std::fs::read_to_string(self.dir.join("console.log")).unwrap_or_default()
    }

    fn alive(&self) -> bool {
        self.pid
            .is_some_and(|p| Path::new(&format!("/proc/{p}")).exists())
    }

    fn console_tail(&self) -> String {
        let c = self.console();
        let lines: Vec<&str> = c.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// QEMU's pid, once it wrote its pidfile; an error with its output
    /// when it exited first.
    fn wait_pidfile(&mut self) -> Result<Option<u32>, String> {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(p) = std::fs::read_to_string(self.dir.join("qemu.pid"))
                && let Ok(pid) = p.trim().parse::<u32>()
            {
                return Ok(Some(pid));
            }
            let exited = self
                .watchdog
                .as_mut()
                .is_none_or(|c| c.try_wait().ok().flatten().is_some());
            if exited || Instant::now() >= end {
                return Err(format!(
                    "qemu failed to start: {}",
                    std::fs::read_to_string(self.dir.join("qemu.log"))
                        .unwrap_or_default()
                        .trim()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_agent(&self, limit: Duration) -> Result<(), String> {
        let end = Instant::now() + limit;
        let sock = self.dir.join("agent.sock");
        loop {
            if !self.alive() {
                return Err(format!(
                    "the VM died during boot; console:\n{}",
                    self.console_tail()
                ));
            }
            if Instant::now() >= end {
                return Err(format!(
                    "the VM's agent did not answer in {limit:?}; console:\n{}",
                    self.console_tail()
                ));
            }
            if sock.exists()
                && self
                    .call("true", 5, Duration::from_millis(1500))
                    .is_ok_and(|o| o.status == 0)
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Run `script` with `sh` in the guest (cwd `/root`), killed there after
    /// 60 s: its stdout, stderr and exit status.
    pub fn run(&self, script: &str) -> Result<VmOutput, String> {
        self.run_timeout(script, Duration::from_secs(60))
    }

    /// [`IpvsVm::run`] with the guest-side timeout `limit` (the host waits
    /// 15 s longer before giving up).
    pub fn run_timeout(&self, script: &str, limit: Duration) -> Result<VmOutput, String> {
        let secs = limit.as_secs().max(1);
        if script.len() > MAX_INLINE {
            // A long script goes over the data port first.
            let n = REQ.fetch_add(1, Ordering::SeqCst);
            let path = format!("/tmp/script{n}.sh");
            self.push(&path, script.as_bytes())?;
            return self.call(
                &format!("sh {path}; rc=$?; rm -f {path}; exit $rc"),
                secs,
                Duration::from_secs(secs + 15),
            );
        }
        self.call(script, secs, Duration::from_secs(secs + 15))
    }

    /// [`IpvsVm::run`] that must exit 0: its stdout as text; panics with
    /// the outputs otherwise.
    pub fn ok(&self, script: &str) -> String {
        let o = self.run(script).unwrap_or_else(|e| panic!("{script}: {e}"));
        assert_eq!(
            o.status,
            0,
            "in the VM `{script}` exited {}: {}{}",
            o.status,
            o.stdout_text(),
            o.stderr_text()
        );
        o.stdout_text()
    }

    /// Run each of `scripts` in turn in one round trip (each in its own
    /// `sh`, all within the guest-side timeout `limit`): their outputs, in
    /// order. Much faster than one [`IpvsVm::run`] each under TCG.
    pub fn run_many(&self, scripts: &[String], limit: Duration) -> Result<Vec<VmOutput>, String> {
        let mut all = String::from(
            "r() { sh -c \"$1\" >/tmp/rm.o 2>/tmp/rm.e; echo \"@@R $?\"; base64 /tmp/rm.o; \
             echo @@E; base64 /tmp/rm.e; echo @@Z; }\n",
        );
        for s in scripts {
            all.push_str("r ");
            all.push_str(&shell_quote(s));
            all.push('\n');
        }
        let o = self.run_timeout(&all, limit)?;
        if o.status != 0 {
            return Err(format!("run_many exited {}: {}", o.status, o.stderr_text()));
        }
        let text = o.stdout_text();
        let mut res = Vec::new();
        let (mut rc, mut out, mut err, mut in_err) = (0, String::new(), String::new(), false);
        let dec = |s: &str| B64.decode(s).map_err(|e| format!("base64: {e}"));
        for line in text.lines() {
            if let Some(r) = line.strip_prefix("@@R ") {
                rc = r.parse().map_err(|_| format!("bad status {r:?}"))?;
                out.clear();
                err.clear();
                in_err = false;
            } else if line == "@@E" {
                in_err = true;
            } else if line == "@@Z" {
                res.push(VmOutput {
                    stdout: dec(&out)?,
                    stderr: dec(&err)?,
                    status: rc,
                });
            } else if in_err {
                err.push_str(line);
            } else {
                out.push_str(line);
            }
        }
        if res.len() != scripts.len() {
            return Err(format!(
                "{} outcomes for {} scripts",
                res.len(),
                scripts.len()
            ));
        }
        Ok(res)
    }

    fn call(&self, script: &str, tmo: u64, wait: Duration) -> Result<VmOutput, String> {
        let mut guard = self.agent.lock().unwrap_or_else(|p| p.into_inner());
        let r = self.call_locked(&mut guard, script, tmo, wait);
        if r.is_err() {
            // A half-read reply would confuse the next call: reconnect.
            *guard = None;
        }
        r
    }

    fn call_locked(
        &self,
        conn: &mut Option<BufReader<UnixStream>>,
        script: &str,
        tmo: u64,
        wait: Duration,
    ) -> Result<VmOutput, String> {
        let deadline = Instant::now() + wait;
        if conn.is_none() {
            let s = UnixStream::connect(self.dir.join("agent.sock"))
                .map_err(|e| format!("agent socket: {e}"))?;
            *conn = Some(BufReader::new(s));
        }
        let r = conn.as_mut().expect("connected");
        let id = format!(
            "Q{}x{}",
            std::process::id(),
            REQ.fetch_add(1, Ordering::SeqCst)
        );
        // The leading newline ends any half line an aborted call left.
        let req = format!("\n{id} {tmo} {}\n", B64.encode(script));
        r.get_mut()
            .write_all(req.as_bytes())
            .map_err(|e| format!("agent write: {e}"))?;
        let (mut out, mut err) = (String::new(), String::new());
        #[derive(PartialEq)]
        enum Sect {
            None,
            Out,
            Err,
        }
        let mut sect = Sect::None;
        let mut line = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("timeout ({wait:?}) waiting for the VM agent"));
            }
            r.get_ref()
                .set_read_timeout(Some(left.min(Duration::from_millis(500))))
                .map_err(|e| e.to_string())?;
            match r.read_until(b'\n', &mut line) {
                Ok(0) => return Err("the VM agent closed the connection".into()),
                Ok(_) if line.ends_with(b"\n") => {}
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if !self.alive() {
                        return Err("the VM is not running".into());
                    }
                    continue;
                }
                Err(e) => return Err(format!("agent read: {e}")),
            }
            let text = String::from_utf8_lossy(&line).trim().to_owned();
            line.clear();
            if text == format!("@@BEGIN {id}") {
                sect = Sect::Out;
            } else if text == format!("@@ERR {id}") {
                sect = Sect::Err;
            } else if let Some(rc) = text.strip_prefix(&format!("@@END {id} ")) {
                let status = rc.parse().map_err(|_| format!("bad status {rc:?}"))?;
                let dec = |s: &str| B64.decode(s).map_err(|e| format!("agent base64: {e}"));
                return Ok(VmOutput {
                    stdout: dec(&out)?,
                    stderr: dec(&err)?,
                    status,
                });
            } else if text == format!("@@BAD {id}") {
                return Err("the VM agent could not decode the request".into());
            } else if text.starts_with("@@") {
                sect = Sect::None;
            } else if sect == Sect::Out {
                out.push_str(&text);
            } else if sect == Sect::Err {
                err.push_str(&text);
            }
        }
    }

    /// Write `bytes` to the file `path` in the guest (over the virtio-serial
    /// port; a few MB a second).
    pub fn push(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        // Drain what an aborted push may have left in the port (reads end
        // at once while no host end is connected).
        self.call(
            "timeout -s KILL 2 cat /dev/ipvsvm-data >/dev/null 2>&1; true",
            10,
            Duration::from_secs(40),
        )?;
        let ds = UnixStream::connect(self.dir.join("data.sock"))
            .map_err(|e| format!("data socket: {e}"))?;
        let mut wr = ds.try_clone().map_err(|e| format!("data socket: {e}"))?;
        let data = bytes.to_vec();
        let writer = std::thread::spawn(move || wr.write_all(&data));
        let q = shell_quote(path);
        let secs = 60 + bytes.len() as u64 / 200_000;
        let o = self.call(
            &format!(
                "head -c {} /dev/ipvsvm-data >{q} && wc -c <{q}",
                bytes.len()
            ),
            secs,
            Duration::from_secs(secs + 15),
        );
        // Shutting the socket down also ends a writer the guest stopped
        // reading from.
        let _ = ds.shutdown(std::net::Shutdown::Both);
        let _ = writer.join();
        let o = o?;
        if o.status != 0 || o.stdout_text().trim() != bytes.len().to_string() {
            return Err(format!(
                "push {path} failed (status {}, {:?}): {}",
                o.status,
                o.stdout_text().trim(),
                o.stderr_text()
            ));
        }
        Ok(())
    }
}

/// `s` quoted for `sh` (single quotes).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn ensure_bridge(ns: &str, br: &str, host_ip: Option<&str>) -> Result<(), String> {
    let exists = Command::new("ip")
        .args(["-n", ns, "link", "show", br])
        .output()
        .is_ok_and(|o| o.status.success());
    // Another VM booting beside this one may create it first.
    if !exists {
        let made = ip(&[
            "-n",
            ns,
            "link",
            "add",
            br,
            "type",
            "bridge",
            "mcast_snooping",
            "0",
            "stp_state",
            "0",
            "forward_delay",
            "0",
        ]);
        if made.is_err() {
            ip(&["-n", ns, "link", "show", br])?;
        }
    }
    if let Some(a) = host_ip {
        // `ip addr add` of an address already there fails: that is fine.
        if let Err(e) = ip(&["-n", ns, "addr", "add", a, "dev", br])
            && !e.contains("File exists")
        {
            return Err(e);
        }
    }
    ip(&["-n", ns, "link", "set", "lo", "up"])?;
    ip(&["-n", ns, "link", "set", br, "up"])
}

/// Hold the machine-wide boot lock (released on drop).
fn boot_lock() -> Result<std::fs::File, String> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(BOOT_LOCK)
        .map_err(|e| format!("{BOOT_LOCK}: {e}"))?;
    f.lock().map_err(|e| format!("{BOOT_LOCK}: {e}"))?;
    Ok(f)
}

/// Kill the guests and remove the run directories of test processes that
/// are gone (a run killed before this module had its watchdog, or one
/// whose watchdog was killed with it). A VM's name carries its test's pid
/// ([`unique_name`]: `iv<pid>x<n>`).
fn reap_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(name) = file.to_str().and_then(|n| n.strip_prefix("rvs-ipvsvm-")) else {
            continue;
        };
        let owner = name
            .strip_prefix("iv")
            .and_then(|r| r.split('x').next())
            .and_then(|p| p.parse::<u32>().ok());
        let Some(owner) = owner else { continue };
        if Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        if let Ok(p) = std::fs::read_to_string(e.path().join("qemu.pid"))
            && let Ok(pid) = p.trim().parse::<u32>()
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&format!("ipvsvm-{name}")))
        {
            eprintln!(
                "ipvs_vm: killing the guest {name} of a test process that is gone (pid {pid})"
            );
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .output();
        }
        let _ = std::fs::remove_dir_all(e.path());
    }
}

impl Drop for IpvsVm {
    fn drop(&mut self) {
        *self.agent.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if let Some(pid) = self.pid {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .output();
            let end = Instant::now() + Duration::from_secs(5);
            while self.alive() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        for (ns, tap) in &self.taps {
            let _ = Command::new("ip")
                .args(["-n", ns, "link", "del", tap])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
