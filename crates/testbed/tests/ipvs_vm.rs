//! The kernel-IPVS guest: boot attached to a namespace, run commands,
//! push files, two VMs at once (one with a NIC in a second namespace), and
//! cleanup when a test panics.

use std::time::Instant;

use rvs_testbed::ipvs_vm::{self, IpvsVm, IpvsVmOpts};
use rvs_testbed::{Netns, sh_stdout};

fn taps_in(ns: &Netns) -> usize {
    sh_stdout(&["ip", "-n", ns.name(), "-o", "link", "show", "type", "tun"])
        .lines()
        .count()
}

#[test]
fn ipvs_vm_boots_runs_pushes_and_cleans_up() {
    if !ipvs_vm::available_or_skip("ipvs_vm_boots_runs_pushes_and_cleans_up") {
        return;
    }
    let a = Netns::new("iva");
    let b = Netns::new("ivb");
    let t0 = Instant::now();
    let mut o1 = IpvsVmOpts::new(a.name(), "10.250.0.2/24", Some("10.250.0.1/24"));
    o1.nic2 = Some((
        b.name().to_owned(),
        "10.251.0.2/24".to_owned(),
        Some("10.251.0.1/24".to_owned()),
    ));
    o1.modules = vec!["ip_vs".into(), "ip_vs_rr".into()];
    let o2 = IpvsVmOpts::new(a.name(), "10.250.0.3/24", None);
    // Two at once: boot them in parallel.
    let h = std::thread::spawn(move || IpvsVm::boot(&o2));
    let vm1 = IpvsVm::boot(&o1).expect("boot vm1");
    let vm2 = h.join().unwrap().expect("boot vm2");
    eprintln!("two VMs up in {:?}", t0.elapsed());
    assert_ne!(vm1.name(), vm2.name());

    let o = vm1.run("echo out; echo err >&2; exit 3").unwrap();
    assert_eq!(
        (o.stdout_text().as_str(), o.stderr_text().as_str(), o.status),
        ("out\n", "err\n", 3)
    );
    let v = vm1.ok("ipvsadm -Ln | head -1");
    assert!(v.starts_with("IP Virtual Server version 1.2.1"), "{v}");
    vm1.ok("ipvsadm -A -t 10.250.0.2:80 -s rr");
    assert!(vm1.ok("ipvsadm -Sn").contains("-A -t 10.250.0.2:80 -s rr"));
    assert_eq!(vm2.ok("ipvsadm -Sn"), "", "each VM has its own kernel");
    // A bounded timeout: the guest kills the command.
    let t = vm2
        .run_timeout("sleep 30", std::time::Duration::from_secs(1))
        .unwrap();
    assert_eq!(t.status, 137);

    // Both NICs reach their namespaces; the two VMs share a's bridge.
    vm1.ok("ping -c1 -W5 10.250.0.1");
    vm1.ok("ping -c1 -W5 10.251.0.1");
    vm2.ok("ping -c1 -W5 10.250.0.2");

    let blob: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    vm1.push("/tmp/blob", &blob).unwrap();
    let sum = vm1.ok("md5sum /tmp/blob | cut -d' ' -f1");
    let host = {
        let p = std::env::temp_dir().join(format!("ivblob{}", std::process::id()));
        std::fs::write(&p, &blob).unwrap();
        let s = sh_stdout(&["md5sum", p.to_str().unwrap()]);
        let _ = std::fs::remove_file(&p);
        s
    };
    assert_eq!(sum.trim(), host.split_whitespace().next().unwrap());
    vm1.push("/etc/hosts", b"127.0.0.1 localhost\n").unwrap();
    assert_eq!(vm1.ok("cat /etc/hosts"), "127.0.0.1 localhost\n");

    assert_eq!(taps_in(&a), 2);
    assert_eq!(taps_in(&b), 1);
    let (p1, p2) = (vm1.pid().unwrap(), vm2.pid().unwrap());
    // A panicking test unwinds through the guards.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _vm1 = vm1;
        panic!("a failing test");
    }));
    assert!(r.is_err());
    drop(vm2);
    assert!(!std::path::Path::new(&format!("/proc/{p1}")).exists());
    assert!(!std::path::Path::new(&format!("/proc/{p2}")).exists());
    assert_eq!(taps_in(&a), 0);
    assert_eq!(taps_in(&b), 0);
    eprintln!("whole test {:?}", t0.elapsed());
}

/// Run by [`a_killed_test_leaves_no_guest`] as a child process: boots a
/// guest in the namespace it is given, prints QEMU's pid and waits to be
/// killed (at most 120 s).
#[test]
#[ignore = "a helper: a_killed_test_leaves_no_guest runs it"]
fn helper_boot_and_wait_to_be_killed() {
    let Ok(ns) = std::env::var("RVS_IVM_HELPER_NS") else {
        return;
    };
    let opts = IpvsVmOpts::new(&ns, "10.250.0.2/24", Some("10.250.0.1/24"));
    let vm = IpvsVm::boot(&opts).expect("boot");
    println!("QEMU-PID {}", vm.pid().expect("pid"));
    std::thread::sleep(std::time::Duration::from_secs(120));
}

/// A test process killed with SIGKILL (no unwinding, no Drop: what a
/// harness timeout or a killed CI run does) leaves no QEMU behind.
#[test]
fn a_killed_test_leaves_no_guest() {
    use std::io::BufRead as _;
    if !ipvs_vm::available_or_skip("a_killed_test_leaves_no_guest") {
        return;
    }
    let ns = Netns::new("ivk");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_boot_and_wait_to_be_killed",
            "--ignored",
            "--nocapture",
        ])
        .env("RVS_IVM_HELPER_NS", ns.name())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let pid: u32 = out
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("QEMU-PID ")
                .map(|p| p.trim().parse().unwrap())
        })
        .expect("the helper booted a guest");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    child.kill().unwrap();
    child.wait().unwrap();
    // The watchdog polls once a second; 30 s only bounds a hang.
    let end = Instant::now() + std::time::Duration::from_secs(30);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "QEMU {pid} outlived its killed test process"
    );
}
