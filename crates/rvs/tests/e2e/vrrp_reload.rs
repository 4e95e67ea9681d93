//! VRRP keeps its rhythm while the XDP data plane takes a big reload: an
//! rvsd on the XDP plane is the VRRP master (priority 150, advert_int 1)
//! with a DR service; a real keepalived is the backup (priority 100); an
//! observer captures the adverts from the wire (AF_PACKET in its own
//! namespace). A reload (SIGHUP) adds 100 DR real servers at addresses in
//! the subnet where no host answers ARP. The master's adverts must keep
//! coming — no gap above 1.5 × advert_int over a window from before the
//! reload to 10 s after it — and the backup must never advertise (it would
//! only if it became master).
//!
//! `RVS_VRRP_RELOAD_RVSD=/path/to/rvsd` runs the test against another
//! rvsd binary (to show it fails on a build whose data plane blocks).

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::harness::{Launch, RVSD, Rvsadm, TempDir, within};
use crate::netns::Host;
use crate::notify_fifo::keepalived_bed;

const VIP: &str = "10.0.6.100";
const ADVERT_INT: Duration = Duration::from_secs(1);

/// The adverts seen on the wire: when, and from which address (also
/// api_load.rs's).
pub(crate) struct Capture {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<(Instant, Ipv4Addr)>>>,
}

impl Capture {
    /// Capture VRRP (IPv4 protocol 112) frames on every interface of
    /// `h`'s namespace, on a thread of its own.
    pub(crate) fn start(h: &Host) -> Capture {
        use nix::sys::socket::{
            AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, recv, setsockopt, socket,
            sockopt,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = format!("/var/run/netns/{}", h.ns);
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            nix::sched::setns(
                std::os::fd::AsFd::as_fd(&ns),
                nix::sched::CloneFlags::CLONE_NEWNET,
            )
            .expect("setns");
            let fd = socket(
                AddressFamily::Packet,
                SockType::Raw,
                SockFlag::empty(),
                SockProtocol::EthAll,
            )
            .expect("AF_PACKET socket");
            setsockopt(
                &fd,
                sockopt::ReceiveTimeout,
                &nix::sys::time::TimeVal::new(0, 100_000),
            )
            .expect("SO_RCVTIMEO");
            let _ = ready_tx.send(());
            let mut seen = Vec::new();
            let mut buf = [0u8; 2048];
            while !flag.load(Ordering::SeqCst) {
                let Ok(n) = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) else {
                    continue;
                };
                let f = &buf[..n];
                // Ethernet, IPv4, protocol 112.
                if n >= 34 && f[12..14] == [0x08, 0x00] && f[14] >> 4 == 4 && f[23] == 112 {
                    let src = Ipv4Addr::new(f[26], f[27], f[28], f[29]);
                    seen.push((Instant::now(), src));
                }
            }
            seen
        });
        ready
            .recv_timeout(Duration::from_secs(5))
            .expect("capture ready");
        Capture {
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn finish(mut self) -> Vec<(Instant, Ipv4Addr)> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .map(|t| t.join().expect("capture thread"))
            .unwrap_or_default()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// keepalived.conf for rvsd: the master instance and one DR service with
/// real servers at `rs`.
fn rvsd_conf(rs: &[String]) -> String {
    let mut servers = String::new();
    for a in rs {
        servers.push_str(&format!(
            "    real_server {a} 80 {{\n        weight 1\n    }}\n"
        ));
    }
    format!(
        "vrrp_instance VI_1 {{
    state MASTER
    interface eth0
    virtual_router_id 61
    priority 150
    advert_int 1
    authentication {{
        auth_type PASS
        auth_pass rvs-pass
    }}
    virtual_ipaddress {{
        {VIP}/24
    }}
}}
virtual_server {VIP} 80 {{
    lb_algo rr
    lb_kind DR
    protocol TCP
{servers}}}
"
    )
}

/// keepalived's: the backup.
const KEEPALIVED_CONF: &str = "global_defs {
    router_id ka-backup
}
vrrp_instance VI_1 {
    state BACKUP
    interface eth0
    virtual_router_id 61
    priority 100
    advert_int 1
    authentication {
        auth_type PASS
        auth_pass rvs-pass
    }
    virtual_ipaddress {
        10.0.6.100/24
    }
}
";

fn has_vip(h: &Host) -> bool {
    crate::netns::has_addr(h, VIP)
}

/// The largest gap between successive adverts from `from` in
/// `[start, end]`, and how many there were.
pub(crate) fn largest_gap(
    seen: &[(Instant, Ipv4Addr)],
    from: Ipv4Addr,
    start: Instant,
    end: Instant,
) -> (Duration, usize) {
    let times: Vec<Instant> = seen
        .iter()
        .filter(|(t, a)| *a == from && *t >= start && *t <= end)
        .map(|(t, _)| *t)
        .collect();
    let mut gap = times.first().map_or(end - start, |t| *t - start);
    for w in times.windows(2) {
        gap = gap.max(w[1] - w[0]);
    }
    if let Some(last) = times.last() {
        gap = gap.max(end - *last);
    }
    (gap, times.len())
}

#[test]
fn vrrp_adverts_keep_their_rhythm_while_the_xdp_plane_reloads() {
    let test = "vrrp_adverts_keep_their_rhythm_while_the_xdp_plane_reloads";
    let Some((mut bed, [a, b, obs])) = keepalived_bed(test, "10.0.6", ["a", "b", "o"]) else {
        return;
    };
    let dir = TempDir::new("vrrp-reload-xdp");
    let rvsd =
        std::env::var_os("RVS_VRRP_RELOAD_RVSD").map_or_else(|| PathBuf::from(RVSD), PathBuf::from);
    eprintln!("rvsd: {}", rvsd.display());

    // The master: rvsd on the XDP plane, one DR real server (the observer,
    // which answers ARP).
    let conf = dir.path().join("rvsd.conf");
    std::fs::write(&conf, rvsd_conf(&["10.0.6.3".to_owned()])).expect("write conf");
    let d = Launch::at(&dir.path().join("rvsd.sock"))
        .netns(&a.ns)
        .bin(&rvsd)
        .plane("xdp")
        .args(["--interface", "eth0", "-f"])
        .arg(&conf)
        .adopt(&mut bed);
    let pid = d.pid.to_string();
    let adm = |args: &[&str]| d.out(&args.join(" "));
    within("rvsd is master", Duration::from_secs(10), || has_vip(&a));

    let capture = Capture::start(&obs);
    // The backup: a real keepalived with a lower priority.
    let ka_conf = dir.write("keepalived.conf", KEEPALIVED_CONF);
    let ka = Command::new("ip")
        .args(["netns", "exec", &b.ns, "keepalived"])
        .args(["--dont-fork", "--log-console", "--vrrp", "--use-file"])
        .arg(&ka_conf)
        .arg("--pid")
        .arg(dir.path().join("ka.pid"))
        .arg("--vrrp_pid")
        .arg(dir.path().join("ka.vrrp.pid"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(dir.path().join("ka.log"))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        )
        .spawn()
        .expect("spawn keepalived");
    bed.adopt(ka);
    // Settled: a few adverts with the backup listening.
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        has_vip(&a) && !has_vip(&b),
        "rvsd master, keepalived backup"
    );

    // The reload: 100 DR real servers in the subnet that never answer ARP.
    let mut rs = vec!["10.0.6.3".to_owned()];
    rs.extend((150..250).map(|i| format!("10.0.6.{i}")));
    std::fs::write(&conf, rvsd_conf(&rs)).expect("rewrite conf");
    let window_start = Instant::now() - Duration::from_secs(2);
    let reload = Instant::now();
    let sent = Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill");
    assert!(sent.success(), "SIGHUP");
    std::thread::sleep(Duration::from_secs(10));
    let window_end = Instant::now();
    let seen = capture.finish();

    let master = Ipv4Addr::new(10, 0, 6, 1);
    let (gap, n) = largest_gap(&seen, master, window_start, window_end);
    let from_backup = seen
        .iter()
        .filter(|(_, s)| IpAddr::V4(*s) == b.addr)
        .count();
    eprintln!(
        "{n} adverts from the master over {:?} around the reload (sent {:?} into it); \
         largest gap {gap:?}; {from_backup} adverts from the backup",
        window_end - window_start,
        reload - window_start,
    );
    // The reload was applied (bounded: a blocked daemon answers late).
    within("the reload is applied", Duration::from_secs(40), || {
        adm(&["-Ln"]).matches("Route").count() == 101
    });
    assert!(
        gap <= ADVERT_INT * 3 / 2,
        "largest gap between the master's adverts {gap:?} (advert_int {ADVERT_INT:?})"
    );
    assert_eq!(from_backup, 0, "the backup advertised: it became master");
    assert!(!has_vip(&b), "the backup holds the VIP");
    assert!(has_vip(&a), "the master lost the VIP");
}
