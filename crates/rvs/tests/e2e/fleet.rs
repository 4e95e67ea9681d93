//! The fleet test bed (issue 14): N directors behind an upstream router
//! that spreads the VIP's flows over them with BGP multipath (ECMP), and
//! the tests of the BGP announcement on it.
//!
//! ```text
//!  client (10.90.0.10-21) --[br1]-- router (FRR: zebra + bgpd, AS 65000)
//!                                    | eth1 10.77.0.1
//!  --------------------------------[br0]-----------------------------
//!   d0 10.77.0.2   d1 10.77.0.3   d2 10.77.0.4  (d3 10.77.0.5 ...)
//!   rvsd --dataplane xdp (DR) + BIRD 2 (AS 65001) exporting table 100
//!   s0 10.77.0.11  s1 10.77.0.12  s2 10.77.0.13   (DR real servers,
//!                                                  default via router)
//! ```
//!
//! Every director runs rvsd on the XDP plane in DR mode (one `--instance`
//! each, pins removed on drop) and BIRD, whose `protocol kernel` learns the
//! host route of the VIP from routing table [`TABLE`] and whose eBGP session
//! exports it to the router (`next hop self`). The router (FRR) accepts
//! any director of 10.77.0.0/24 (`bgp listen range`, so a fourth one can
//! join), installs up to 8 paths (`maximum-paths 8`) and hashes flows over
//! them by their ports (`fib_multipath_hash_policy=1`). Real servers answer
//! the client directly through the router (DR).
//!
//! Every daemon is started by hand in its namespace with per-test config,
//! pid and socket paths (no init scripts), and killed on drop, also when a
//! test fails.

// The bed's API is shared with the other fleet test files; not every test
// uses every part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::harness::{Pinned, Proc, Rvsadm, TempDir, within};
use crate::netns::{Bed, Host};
use rvs_testbed::Conn;

/// The VIP every director serves (TCP port 80).
pub const VIP: &str = "10.99.0.100";
/// The routing table the VIP's host route is kept in on a director.
pub const TABLE: u32 = 100;
/// The route protocol number of those routes (`rvs` in rt_protos).
pub const PROTO: u8 = 250;
/// The router's address on the directors' segment.
pub const ROUTER_LAN: &str = "10.77.0.1";
/// How many source addresses the client has (10.90.0.10 and up).
pub const CLIENT_ADDRS: u8 = 12;
/// How long a daemon of the bed may take to come up or converge.
const CONVERGE: Duration = Duration::from_secs(40);

/// The VIP's TCP service.
pub fn vip() -> SocketAddr {
    SocketAddr::new(VIP.parse().expect("vip"), 80)
}

/// What the bed is made of.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Directors started with the bed.
    pub directors: usize,
    /// Real servers.
    pub servers: usize,
    /// The service's scheduler (`lb_algo`).
    pub lb_algo: String,
    /// More rvsd arguments for every director.
    pub rvsd_args: Vec<String>,
    /// keepalived.conf text put before the virtual server (a
    /// `global_defs { lvs_sync_daemon ... }` block), empty for none.
    pub global_defs: String,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            directors: 3,
            servers: 3,
            lb_algo: "mh".into(),
            rvsd_args: Vec::new(),
            global_defs: String::new(),
        }
    }
}

/// The keepalived.conf every director runs: one DR service on [`vip`]
/// scheduled by `lb_algo`, real servers `servers` with TCP_CHECKs.
pub fn keepalived_conf(lb_algo: &str, servers: &[IpAddr]) -> String {
    let rs: String = servers
        .iter()
        .map(|a| {
            format!(
                "    real_server {a} 80 {{
        weight 1
        TCP_CHECK {{
            connect_timeout 1
            retry 1
            delay_before_retry 0.5
        }}
    }}
"
            )
        })
        .collect();
    format!(
        "virtual_server {VIP} 80 {{
    delay_loop 1
    lb_algo {lb_algo}
    lb_kind DR
    protocol TCP
{rs}}}
"
    )
}

/// The BIRD 2 configuration of the director at `addr`: learn table
/// [`TABLE`], export what it learned from there to the router over eBGP.
pub fn bird_conf(addr: IpAddr, log: &std::path::Path) -> String {
    format!(
        "log \"{log}\" all;
router id {addr};
protocol device {{
    scan time 10;
}}
# The VIP routes rvsd keeps (rvsd --announce-table {TABLE}).
protocol kernel rvs {{
    kernel table {TABLE};
    learn;
    scan time 10;
    ipv4 {{ import all; export none; }};
}}
protocol bgp upstream {{
    local {addr} as 65001;
    neighbor {ROUTER_LAN} as 65000;
    hold time 3;
    keepalive time 1;
    connect delay time 1;
    connect retry time 1;
    error wait time 1, 5;
    ipv4 {{ import none; export where proto = \"rvs\"; next hop self; }};
}}
",
        log = log.display()
    )
}

/// The upstream router's FRR configuration (bgpd): eBGP with any
/// director on the segment, multipath over up to 8 of them.
pub fn router_frr_conf() -> String {
    "frr defaults datacenter
hostname router
!
router bgp 65000
 bgp router-id 10.77.0.1
 no bgp ebgp-requires-policy
 bgp bestpath as-path multipath-relax
 timers bgp 1 3
 neighbor FLEET peer-group
 neighbor FLEET remote-as external
 neighbor FLEET timers 1 3
 neighbor FLEET timers connect 1
 bgp listen range 10.77.0.0/24 peer-group FLEET
 address-family ipv4 unicast
  maximum-paths 8
 exit-address-family
!
"
    .into()
}

/// One director: its namespace, its rvsd (XDP, DR, own `--instance`,
/// pins removed on drop) and its BIRD.
pub struct Director {
    /// Its namespace and address on the segment.
    pub host: Host,
    /// Its keepalived.conf (rewrite it and [`Director::reload`]).
    pub conf: PathBuf,
    /// BIRD's control socket.
    pub bird_ctl: PathBuf,
    dir: PathBuf,
    rvsd_args: Vec<String>,
    /// Its rvsd (XDP, `--instance`, socket, process).
    pub rvsd: Pinned,
    bird: Proc,
}

impl Director {
    /// Start rvsd (waits for its socket). It enters the namespace with
    /// `nsenter --net` (not `ip netns exec`, whose private mount namespace
    /// would give it a bpffs of its own that vanishes with it, and the
    /// pins with it: failover.rs).
    pub fn start_rvsd(&mut self) {
        let launch = self
            .rvsd
            .launch("xdp")
            .arg("-f")
            .arg(&self.conf)
            .arg("--state-dir")
            .arg(self.dir.join("state"))
            .args(["--announce-table", &TABLE.to_string()])
            .args(&self.rvsd_args);
        self.rvsd.start(launch);
    }

    /// The VIP routes of rvs in [`TABLE`] (`ip route show table 100 proto
    /// 250`): what BIRD exports.
    pub fn table_routes(&self) -> String {
        let (table, proto) = (TABLE.to_string(), PROTO.to_string());
        String::from_utf8_lossy(
            &self
                .host
                .exec(&["ip", "route", "show", "table", &table, "proto", &proto])
                .stdout,
        )
        .into_owned()
    }

    /// Whether rvsd keeps the VIP's route (it is announced).
    pub fn announces(&self) -> bool {
        self.table_routes().contains(VIP)
    }

    /// SIGKILL rvsd (the XDP plane stays pinned and forwarding).
    pub fn kill_rvsd(&mut self) {
        self.rvsd.kill();
    }

    /// SIGTERM rvsd and wait for it to exit (a restart, not a drain).
    pub fn stop_rvsd(&mut self) {
        self.rvsd.stop("-TERM");
    }

    /// Replace the extra rvsd arguments of this director (the next
    /// [`Director::start_rvsd`] uses them).
    pub fn set_rvsd_args(&mut self, args: Vec<String>) {
        self.rvsd_args = args;
    }

    /// Whether rvsd runs.
    pub fn rvsd_running(&mut self) -> bool {
        self.rvsd.running()
    }

    /// Start BIRD in the foreground (`bird -f`) inside the namespace.
    pub fn start_bird(&mut self) {
        assert!(!self.bird.running(), "BIRD already running");
        let _ = std::fs::remove_file(&self.bird_ctl);
        let child = Command::new("ip")
            .args(["netns", "exec", &self.host.ns, "bird", "-f", "-c"])
            .arg(self.dir.join("bird.conf"))
            .arg("-s")
            .arg(&self.bird_ctl)
            .arg("-P")
            .arg(self.dir.join("bird.pid"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn bird");
        self.bird = Proc(Some(child));
        let ctl = self.bird_ctl.clone();
        within("BIRD opens its control socket", CONVERGE, || ctl.exists());
    }

    /// SIGKILL BIRD (its BGP session drops at once: the socket closes).
    pub fn kill_bird(&mut self) {
        self.bird.kill();
    }

    /// SIGTERM BIRD and wait for it to exit.
    pub fn stop_bird(&mut self) {
        self.bird.signal("TERM");
        self.bird.wait_exit("bird (SIGTERM)");
    }

    /// `birdc -s CTL ARGS...` (its output; panics when birdc fails).
    pub fn birdc(&self, args: &[&str]) -> String {
        let ctl = self.bird_ctl.to_string_lossy().into_owned();
        let mut a = vec!["birdc", "-s", &ctl];
        a.extend_from_slice(args);
        String::from_utf8_lossy(&self.host.exec(&a).stdout).into_owned()
    }

    /// Reload rvsd's configuration (SIGHUP), e.g. after rewriting
    /// [`Director::conf`].
    pub fn reload(&mut self) {
        let pid = self.rvsd.child.id().expect("rvsd running");
        let _ = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status();
    }

    /// The client ends (address, port) of the connections to the VIP in
    /// `rvsadm -Lcn` (`pro expire state source virtual destination`).
    pub fn conns(&self) -> BTreeSet<SocketAddr> {
        let vip = vip().to_string();
        self.out("-Lcn")
            .lines()
            .filter_map(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                (t.len() >= 6 && t[4] == vip).then(|| t[3].parse().ok())?
            })
            .collect()
    }

    /// Make every health check of this director fail (or pass again):
    /// nftables drops its own packets to port 80 (the forwarded traffic,
    /// which XDP sends, never passes the output hook).
    pub fn block_checks(&self, block: bool) {
        let table = "rvsfleet";
        if block {
            self.host.exec(&["nft", "add", "table", "ip", table]);
            self.host.exec(&[
                "nft",
                "add chain ip rvsfleet out { type filter hook output priority 0 ; }",
            ]);
            self.host
                .exec(&["nft", "add rule ip rvsfleet out tcp dport 80 drop"]);
        } else {
            self.host.exec(&["nft", "delete", "table", "ip", table]);
        }
    }

    /// The machine is gone: SIGKILL its BIRD and rvsd, remove its XDP
    /// plane, take its link down (the router notices when its BGP hold
    /// timer runs out).
    pub fn crash(&mut self) {
        // The link first, so that BIRD's session does not close cleanly.
        self.host.exec(&["ip", "link", "set", "eth0", "down"]);
        self.bird.kill();
        self.rvsd.kill();
        self.rvsd.remove_pins();
    }
}

/// rvsadm against this director (`adm`, `ok`, `out`).
impl Rvsadm for Director {
    fn socket(&self) -> &Path {
        &self.rvsd.socket
    }
}

impl Drop for Director {
    fn drop(&mut self) {
        self.bird.kill();
    }
}

/// The upstream router: FRR's zebra and bgpd, by hand, in its namespace.
pub struct Router {
    /// Its namespace (eth0 towards the client, eth1 on the segment).
    pub host: Host,
    /// FRR's directory: configs, pid files, vty sockets, zserv socket.
    dir: PathBuf,
    zebra: Proc,
    bgpd: Proc,
}

impl Router {
    /// `vtysh --vty_socket DIR -c CMD` (its output).
    pub fn vtysh(&self, cmd: &str) -> String {
        let d = self.dir.to_string_lossy().into_owned();
        String::from_utf8_lossy(
            &self
                .host
                .exec(&["vtysh", "--vty_socket", &d, "-c", cmd])
                .stdout,
        )
        .into_owned()
    }

    /// The next hops of the router's kernel route to the VIP learned by
    /// BGP (`ip -j route show VIP/32 proto bgp`): the directors it
    /// spreads the VIP's flows over.
    pub fn next_hops(&self) -> BTreeSet<IpAddr> {
        let o = self.host.exec(&[
            "ip",
            "-j",
            "route",
            "show",
            &format!("{VIP}/32"),
            "proto",
            "bgp",
        ]);
        parse_next_hops(&String::from_utf8_lossy(&o.stdout))
    }

    fn start(&mut self) {
        (self.zebra, self.bgpd) = start_frr(&self.host, &self.dir);
    }
}

/// Start FRR's zebra and bgpd in `host`'s namespace from `dir` (which holds
/// `zebra.conf` and `bgpd.conf`, owned by user frr), with their pid files,
/// zserv and vty sockets there; returns once both opened their sockets.
fn start_frr(host: &Host, dir: &Path) -> (Proc, Proc) {
    let d = dir.to_string_lossy().into_owned();
    let daemon = |name: &str, conf: &str| {
        Command::new("ip")
            .args(["netns", "exec", &host.ns])
            .arg(format!("/usr/lib/frr/{name}"))
            .args(["-f", &format!("{d}/{conf}")])
            .args(["-i", &format!("{d}/{name}.pid")])
            .args(["-z", &format!("{d}/zserv.api")])
            .args(["--vty_socket", &d, "-P", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"))
    };
    let zebra = Proc(Some(daemon("zebra", "zebra.conf")));
    let api = dir.join("zserv.api");
    within("zebra opens its zserv socket", CONVERGE, || api.exists());
    let bgpd = Proc(Some(daemon("bgpd", "bgpd.conf")));
    let vty = dir.join("bgpd.vty");
    within("bgpd opens its vty", CONVERGE, || vty.exists());
    (zebra, bgpd)
}

/// FRR as a director's BGP daemon (docs/fleet.md): zebra
/// imports rvsd's table, bgpd redistributes it to the router.
pub fn director_frr_conf(addr: IpAddr) -> (String, String) {
    (
        format!("ip import-table {TABLE}\n"),
        format!(
            "frr defaults datacenter
hostname director
!
! Origin IGP like BIRD's routes: ECMP needs equal paths.
route-map RVS permit 10
 set origin igp
!
router bgp 65001
 bgp router-id {addr}
 no bgp ebgp-requires-policy
 timers bgp 1 3
 neighbor {ROUTER_LAN} remote-as 65000
 neighbor {ROUTER_LAN} timers 1 3
 neighbor {ROUTER_LAN} timers connect 1
 address-family ipv4 unicast
  redistribute table {TABLE} route-map RVS
 exit-address-family
!
"
        ),
    )
}

impl Drop for Router {
    fn drop(&mut self) {
        self.bgpd.kill();
        self.zebra.kill();
    }
}

/// The gateways of `ip -j route show` output (one route, with or without
/// `nexthops`).
fn parse_next_hops(json: &str) -> BTreeSet<IpAddr> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or(serde_json::Value::Null);
    let mut hops = BTreeSet::new();
    for r in v.as_array().into_iter().flatten() {
        let gw = |x: &serde_json::Value| x.get("gateway")?.as_str()?.parse::<IpAddr>().ok();
        hops.extend(gw(r));
        for h in r
            .get("nexthops")
            .and_then(|n| n.as_array())
            .into_iter()
            .flatten()
        {
            hops.extend(gw(h));
        }
    }
    hops
}

/// The bed. Fields drop in order: daemons first, namespaces last.
pub struct Fleet {
    /// The directors (d0, d1, ...).
    pub directors: Vec<Director>,
    /// The upstream router.
    pub router: Router,
    /// The client (all of [`Fleet::client_addrs`] on its eth0).
    pub client: Host,
    /// The client's source addresses.
    pub client_addrs: Vec<IpAddr>,
    /// The real servers (s0, s1, ...), answering [`serve`] on port 80.
    pub servers: Vec<Host>,
    opts: Opts,
    stop: Arc<AtomicBool>,
    bed: Bed,
    dir: TempDir,
}

impl Fleet {
    /// Tools the bed needs besides the netns bed's.
    fn tools(test: &str) -> bool {
        if !rvs_testbed::require_tools(test, &["bird", "birdc", "vtysh", "nft", "nsenter"]) {
            return false;
        }
        for d in ["zebra", "bgpd"] {
            if !std::path::Path::new(&format!("/usr/lib/frr/{d}")).exists() {
                rvs_testbed::skip_or_fail(
                    test,
                    format!("/usr/lib/frr/{d} is missing (scripts/install-deps installs frr)"),
                );
                return false;
            }
        }
        true
    }

    /// Build the bed and start everything: the router, `opts.directors`
    /// directors (rvsd + BIRD), `opts.servers` real servers; returns once
    /// the router has a path to every director. None (printed why) when
    /// it cannot run here.
    pub fn new(test: &str, opts: Opts) -> Option<Fleet> {
        if !crate::netns::can_run(test) || !Self::tools(test) {
            return None;
        }
        let mut bed = Bed::new(test)?;
        let dir = TempDir::new("fleet");
        bed.bridge("br1");
        let client = bed.host_on("c", "br1", "10.90.0.10/24");
        let mut client_addrs = vec![client.addr];
        for i in 1..CLIENT_ADDRS {
            let a = format!("10.90.0.{}", 10 + i);
            client.exec(&["ip", "addr", "add", &format!("{a}/24"), "dev", "eth0"]);
            client_addrs.push(a.parse().expect("addr"));
        }
        client.exec(&["ip", "route", "add", "default", "via", "10.90.0.1"]);

        // The router: eth0 towards the client, eth1 on the segment.
        let rhost = bed.host_on("r", "br1", "10.90.0.1/24");
        bed.link(&rhost.ns, "br0", "eth1", &format!("{ROUTER_LAN}/24"));
        rhost.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        rhost.exec(&["sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1"]);
        let rdir = dir.path().join("frr");
        std::fs::create_dir_all(&rdir).expect("frr dir");
        std::fs::write(rdir.join("zebra.conf"), "").expect("zebra.conf");
        std::fs::write(rdir.join("bgpd.conf"), router_frr_conf()).expect("bgpd.conf");
        // FRR drops to user frr (its vty group frrvty): its directory is
        // frr's.
        sh_ok(&["chown", "-R", "frr:frr", &rdir.to_string_lossy()]);
        let mut router = Router {
            host: rhost,
            dir: rdir,
            zebra: Proc(None),
            bgpd: Proc(None),
        };
        router.start();

        let stop = Arc::new(AtomicBool::new(false));
        let mut servers = Vec::new();
        for i in 0..opts.servers {
            let h = bed.host(&format!("s{i}"), &format!("10.77.0.{}/24", 11 + i));
            crate::netns::realserver(&h, VIP, &["--mode", "dr"]);
            h.exec(&["ip", "route", "add", "default", "via", ROUTER_LAN]);
            serve(&h, &format!("s{i}"), stop.clone());
            servers.push(h);
        }
        let mut fleet = Fleet {
            directors: Vec::new(),
            router,
            client,
            client_addrs,
            servers,
            opts,
            stop,
            bed,
            dir,
        };
        for _ in 0..fleet.opts.directors {
            fleet.add_director();
        }
        fleet.wait_next_hops(fleet.directors.len());
        Some(fleet)
    }

    /// Add director dN (10.77.0.(2+N)), start its rvsd and BIRD; returns
    /// its index (it is announced once the router learns it: see
    /// [`Fleet::wait_next_hops`]).
    pub fn add_director(&mut self) -> usize {
        let n = self.directors.len();
        assert!(n < 8, "the segment's plan holds 8 directors");
        let h = self
            .bed
            .host(&format!("d{n}"), &format!("10.77.0.{}/24", 2 + n));
        self.bed.xdp_pass_on_port(&h);
        let ddir = self.dir.path().join(format!("d{n}"));
        std::fs::create_dir_all(ddir.join("state")).expect("director dir");
        let conf = ddir.join("keepalived.conf");
        let addrs: Vec<IpAddr> = self.servers.iter().map(|s| s.addr).collect();
        std::fs::write(&conf, self.conf_text(&addrs)).expect("conf");
        std::fs::write(
            ddir.join("bird.conf"),
            bird_conf(h.addr, &ddir.join("bird.log")),
        )
        .expect("bird.conf");
        let mut d = Director {
            rvsd: Pinned::new(
                &h.ns,
                rvs_testbed::unique_name(&format!("fl{n}")),
                ddir.join("rvsd.sock"),
            ),
            host: h,
            conf,
            bird_ctl: ddir.join("bird.ctl"),
            dir: ddir,
            rvsd_args: self.opts.rvsd_args.clone(),
            bird: Proc(None),
        };
        d.start_rvsd();
        d.start_bird();
        self.directors.push(d);
        n
    }

    /// Every director's keepalived.conf for real servers `addrs`.
    fn conf_text(&self, addrs: &[IpAddr]) -> String {
        format!(
            "{}{}",
            self.opts.global_defs,
            keepalived_conf(&self.opts.lb_algo, addrs)
        )
    }

    /// Add real server sN (10.77.0.(11+N)), serving like the others; the
    /// directors learn it from [`Fleet::reconfigure`].
    pub fn add_server(&mut self) -> IpAddr {
        let i = self.servers.len();
        let h = self
            .bed
            .host(&format!("s{i}"), &format!("10.77.0.{}/24", 11 + i));
        crate::netns::realserver(&h, VIP, &["--mode", "dr"]);
        h.exec(&["ip", "route", "add", "default", "via", ROUTER_LAN]);
        serve(&h, &format!("s{i}"), self.stop.clone());
        let a = h.addr;
        self.servers.push(h);
        a
    }

    /// Rewrite every running director's keepalived.conf with all the real
    /// servers and reload it.
    pub fn reconfigure(&mut self) {
        let addrs: Vec<IpAddr> = self.servers.iter().map(|s| s.addr).collect();
        let text = self.conf_text(&addrs);
        for d in &mut self.directors {
            if d.rvsd_running() {
                std::fs::write(&d.conf, &text).expect("conf");
                d.reload();
            }
        }
    }

    /// Wait (bounded) until the router has exactly `n` BGP next hops for
    /// the VIP; they are returned.
    pub fn wait_next_hops(&self, n: usize) -> BTreeSet<IpAddr> {
        let mut last = BTreeSet::new();
        let ok = rvs_testbed::wait_for(CONVERGE, || {
            last = self.router.next_hops();
            last.len() == n
        });
        assert!(
            ok,
            "the router has {} BGP next hops for {VIP} ({last:?}), not {n}, after {CONVERGE:?}\n{}\n{}",
            last.len(),
            self.router.vtysh("show bgp summary"),
            self.router
                .vtysh(&format!("show bgp ipv4 unicast {VIP}/32"))
        );
        last
    }

    /// The directors' addresses.
    pub fn director_addrs(&self) -> BTreeSet<IpAddr> {
        self.directors.iter().map(|d| d.host.addr).collect()
    }

    /// Connect from source address `src` of the client to [`vip`] and
    /// read the server's name line.
    pub fn connect_from(&self, src: IpAddr, timeout: Duration) -> std::io::Result<Conn> {
        connect_from(&self.client, src, vip(), timeout)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.directors.clear();
    }
}

fn sh_ok(args: &[&str]) {
    rvs_testbed::sh(args);
}

/// Connect from `src` inside `client` to `to` and read the server's name
/// line (socket2: bind the source before connecting).
pub fn connect_from(
    client: &Host,
    src: IpAddr,
    to: SocketAddr,
    timeout: Duration,
) -> std::io::Result<Conn> {
    let mut stream = client.run(move || -> std::io::Result<TcpStream> {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::for_address(to), Type::STREAM, None)?;
        s.bind(&SocketAddr::new(src, 0).into())?;
        s.connect_timeout(&to.into(), timeout)?;
        Ok(s.into())
    })?;
    stream.set_read_timeout(Some(timeout))?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while stream.read(&mut b)? == 1 && b[0] != b'\n' {
        line.push(b[0]);
        if line.len() > 64 {
            break;
        }
    }
    Ok(Conn {
        stream,
        server: String::from_utf8_lossy(&line).into_owned(),
    })
}

/// A server on `host`:80 until `stop`: every connection gets `name\n`,
/// then its input echoed back (idle limit 120 s, so long-lived flows
/// survive a test's pauses).
pub fn serve(host: &Host, name: &str, stop: Arc<AtomicBool>) {
    let listener = host.run(|| TcpListener::bind("0.0.0.0:80").expect("bind :80"));
    let greeting = format!("{name}\n");
    rvs_testbed::accept_loop(listener, stop, move |s, _| {
        rvs_testbed::echo(s, &greeting, Duration::from_secs(120))
    });
}

/// `per_addr` connections from each client address (each echoes once and
/// stays open until the listing is read): how many each director carried (from its `rvsadm -Lcn`), and how many failed.
pub fn spread_over_directors(fleet: &Fleet, per_addr: usize) -> (BTreeMap<IpAddr, usize>, usize) {
    let mut failed = 0;
    let mut opened = Vec::new();
    for &src in &fleet.client_addrs {
        for _ in 0..per_addr {
            match fleet.connect_from(src, Duration::from_secs(3)) {
                Ok(mut c) if !c.server.is_empty() => match c.echo("x", Duration::from_secs(3)) {
                    Ok(()) => opened.push(c),
                    Err(_) => failed += 1,
                },
                _ => failed += 1,
            }
        }
    }
    let ends: BTreeSet<SocketAddr> = opened
        .iter()
        .filter_map(|c| c.stream.local_addr().ok())
        .collect();
    // rvsd refreshes its connection listing from the flow tables
    // periodically: poll until every open connection shows.
    let mut mine: BTreeMap<IpAddr, usize> = BTreeMap::new();
    rvs_testbed::wait_for(Duration::from_secs(20), || {
        mine = fleet
            .directors
            .iter()
            .map(|d| (d.host.addr, d.conns().intersection(&ends).count()))
            .collect();
        mine.values().sum::<usize>() >= ends.len()
    });
    (mine, failed)
}

#[test]
fn fleet_router_learns_the_vip_from_every_director_and_spreads_flows() {
    let Some(fleet) = Fleet::new(
        "fleet_router_learns_the_vip_from_every_director_and_spreads_flows",
        Opts::default(),
    ) else {
        return;
    };
    let hops = fleet.wait_next_hops(3);
    assert_eq!(hops, fleet.director_addrs());
    let (mine, failed) = spread_over_directors(&fleet, 8);
    assert_eq!(failed, 0, "connections failed; per director: {mine:?}");
    for d in &fleet.directors {
        let n = mine.get(&d.host.addr).copied().unwrap_or(0);
        assert!(
            n > 0,
            "director {} carried none of {} connections: {mine:?}",
            d.host.addr,
            fleet.client_addrs.len() * 8
        );
    }
    assert_eq!(
        mine.values().sum::<usize>(),
        fleet.client_addrs.len() * 8,
        "every connection is on exactly one director: {mine:?}"
    );
}

/// `-L --announce` of `d` shows `vip_state` (e.g. "withdrawn  quorum lost")
/// on the VIP's line.
fn announce_line(d: &Director) -> String {
    d.out("-L --announce")
        .lines()
        .find(|l| l.starts_with(VIP))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[test]
fn fleet_a_director_whose_real_servers_all_fail_withdraws_the_vip_and_returns() {
    let Some(fleet) = Fleet::new(
        "fleet_a_director_whose_real_servers_all_fail_withdraws_the_vip_and_returns",
        Opts::default(),
    ) else {
        return;
    };
    let d0 = &fleet.directors[0];
    assert_eq!(announce_line(d0), format!("{VIP} announced"));
    d0.block_checks(true);
    let others: BTreeSet<IpAddr> = fleet.directors[1..].iter().map(|d| d.host.addr).collect();
    assert_eq!(fleet.wait_next_hops(2), others, "d0 withdrew");
    within(
        "d0 lists the VIP as withdrawn, quorum lost",
        CONVERGE,
        || announce_line(d0) == format!("{VIP} withdrawn quorum lost"),
    );
    let (mine, failed) = spread_over_directors(&fleet, 4);
    assert_eq!(
        failed, 0,
        "new connections work through the others: {mine:?}"
    );
    assert_eq!(mine.get(&d0.host.addr).copied().unwrap_or(0), 0, "{mine:?}");
    d0.block_checks(false);
    assert_eq!(
        fleet.wait_next_hops(3),
        fleet.director_addrs(),
        "d0 is back"
    );
    assert_eq!(announce_line(d0), format!("{VIP} announced"));
}

/// Polls the router (and optionally a director's table) every 50 ms until
/// stopped: whether `must` stayed among the next hops every time, and
/// whether the director kept its route.
struct Watch(rvs_testbed::Worker<(usize, Vec<String>)>);

impl Watch {
    fn start(router: &Host, must: BTreeSet<IpAddr>, table_of: Option<Host>) -> Watch {
        let router = router.clone();
        Watch(rvs_testbed::Worker::spawn(move |s| {
            let mut polls = 0;
            let mut missing = Vec::new();
            while !s.load(Ordering::Relaxed) && polls < 2000 {
                polls += 1;
                let o = router.exec(&["ip", "-j", "route", "show", &format!("{VIP}/32")]);
                let hops = parse_next_hops(&String::from_utf8_lossy(&o.stdout));
                if !must.is_subset(&hops) {
                    missing.push(format!("router next hops {hops:?}"));
                }
                if let Some(h) = &table_of {
                    let o = h.exec(&["ip", "route", "show", "table", "100", "proto", "250"]);
                    if !String::from_utf8_lossy(&o.stdout).contains(VIP) {
                        missing.push(format!("{} had no route", h.addr));
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (polls, missing)
        }))
    }

    /// Stop; panic when something was missing in a poll.
    fn check(self, what: &str) {
        let (polls, missing) = self.0.finish();
        assert!(polls > 0);
        assert!(
            missing.is_empty(),
            "{what}: {} of {polls} polls saw a gap, first: {:?}",
            missing.len(),
            missing.first()
        );
    }
}

#[test]
fn fleet_bird_and_rvsd_restarts_converge_and_the_others_never_flap() {
    let Some(mut fleet) = Fleet::new(
        "fleet_bird_and_rvsd_restarts_converge_and_the_others_never_flap",
        Opts::default(),
    ) else {
        return;
    };
    let all = fleet.director_addrs();
    let others: BTreeSet<IpAddr> = fleet.directors[1..].iter().map(|d| d.host.addr).collect();

    // BIRD on d0 dies: its session drops, the router keeps the others.
    let w = Watch::start(&fleet.router.host, others.clone(), None);
    fleet.directors[0].kill_bird();
    assert_eq!(fleet.wait_next_hops(2), others);
    assert!(fleet.directors[0].announces(), "rvsd keeps its route");
    fleet.directors[0].start_bird();
    assert_eq!(fleet.wait_next_hops(3), all, "BIRD's restart converged");
    w.check("the other directors during BIRD's restart");

    // rvsd on d0 stops (SIGTERM) and starts again: not a drain, so its
    // route never leaves the table and the router never loses a path.
    let w = Watch::start(
        &fleet.router.host,
        all.clone(),
        Some(fleet.directors[0].host.clone()),
    );
    fleet.directors[0].stop_rvsd();
    assert!(fleet.directors[0].announces(), "SIGTERM keeps the route");
    std::thread::sleep(Duration::from_secs(1));
    fleet.directors[0].start_rvsd();
    // Past the health checkers' first verdict (checks every second).
    within("d0 announces after the first verdict", CONVERGE, || {
        announce_line(&fleet.directors[0]) == format!("{VIP} announced")
    });
    std::thread::sleep(Duration::from_secs(3));
    w.check("the fleet during rvsd's restart");

    // SIGKILL too.
    let w = Watch::start(
        &fleet.router.host,
        all.clone(),
        Some(fleet.directors[0].host.clone()),
    );
    fleet.directors[0].kill_rvsd();
    std::thread::sleep(Duration::from_secs(1));
    fleet.directors[0].start_rvsd();
    std::thread::sleep(Duration::from_secs(4));
    w.check("the fleet after rvsd was killed and restarted");
    let (mine, failed) = spread_over_directors(&fleet, 2);
    assert_eq!(failed, 0, "{mine:?}");
}

#[test]
fn fleet_drain_withdraws_survives_a_restart_and_undrain_announces_again() {
    let Some(mut fleet) = Fleet::new(
        "fleet_drain_withdraws_survives_a_restart_and_undrain_announces_again",
        Opts::default(),
    ) else {
        return;
    };
    let others: BTreeSet<IpAddr> = [0, 2]
        .iter()
        .map(|&i| fleet.directors[i].host.addr)
        .collect();
    let d1 = &fleet.directors[1];
    let o = d1.adm("--drain --grace 2");
    assert!(o.status.success(), "{o:?}");
    let text = d1.out("-L --announce");
    assert!(text.starts_with("Director: draining"), "{text}");
    assert_eq!(announce_line(d1), format!("{VIP} withdrawn drained"));
    assert!(!d1.announces());
    assert_eq!(fleet.wait_next_hops(2), others);
    within("drained after the grace", CONVERGE, || {
        d1.out("-L --announce").starts_with("Director: drained")
    });
    // Still forwarding: the service is there, only the route went.
    assert!(d1.out("-Ln").contains(&format!("{VIP}:80")));
    // The drained state survives a restart.
    fleet.directors[1].stop_rvsd();
    fleet.directors[1].start_rvsd();
    let d1 = &fleet.directors[1];
    assert!(d1.out("-L --announce").starts_with("Director: drained"));
    std::thread::sleep(Duration::from_secs(3));
    assert!(!d1.announces(), "still withdrawn after the restart");
    assert_eq!(fleet.router.next_hops(), others);
    let o = d1.adm("--undrain");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(fleet.wait_next_hops(3), fleet.director_addrs());
    assert!(d1.out("-L --announce").starts_with("Director: serving"));
}

/// The `BGP daemon:` line of `-L --announce`.
fn bgp_line(d: &Director) -> String {
    d.out("-L --announce")
        .lines()
        .find(|l| l.starts_with("BGP daemon:"))
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn fleet_an_unreachable_bgp_daemon_is_reported_and_rvsd_forwards_on() {
    let missing = "/nonexistent/rvs-fleet/bird.ctl";
    let Some(mut fleet) = Fleet::new(
        "fleet_an_unreachable_bgp_daemon_is_reported_and_rvsd_forwards_on",
        Opts {
            directors: 2,
            rvsd_args: vec!["--bgp-daemon".into(), format!("bird:{missing}")],
            ..Opts::default()
        },
    ) else {
        return;
    };
    // The watch cannot reach its socket: reported, naming it; rvsd runs,
    // announces through the BIRD that does run, and forwards.
    for d in &fleet.directors {
        within("the watch reports the missing socket", CONVERGE, || {
            let l = bgp_line(d);
            l.contains("error") && l.contains(missing)
        });
    }
    let (mine, failed) = spread_over_directors(&fleet, 4);
    assert_eq!(failed, 0, "{mine:?}");
    assert!(fleet.directors.iter_mut().all(|d| d.rvsd_running()));
    // Pointed at its BIRD, the watch reports the session up.
    let ctl = fleet.directors[0].bird_ctl.to_string_lossy().into_owned();
    fleet.directors[0].stop_rvsd();
    fleet.directors[0].set_rvsd_args(vec!["--bgp-daemon".into(), format!("bird:{ctl}")]);
    fleet.directors[0].start_rvsd();
    within(
        "the watch sees BIRD's session and the learned route",
        CONVERGE,
        || bgp_line(&fleet.directors[0]).contains("ok: 1/1 BGP sessions established, 1 route(s)"),
    );
    // BIRD gone: an error again, the announcement and forwarding go on.
    fleet.directors[0].kill_bird();
    within("the watch reports BIRD gone", CONVERGE, || {
        bgp_line(&fleet.directors[0]).contains("error")
    });
    assert!(fleet.directors[0].rvsd_running());
    assert!(fleet.directors[0].announces());
}

#[test]
fn fleet_remove_director_withdraws_first_then_removes_the_plane() {
    let Some(mut fleet) = Fleet::new(
        "fleet_remove_director_withdraws_first_then_removes_the_plane",
        Opts {
            directors: 2,
            rvsd_args: vec!["--drain-grace".into(), "5".into()],
            ..Opts::default()
        },
    ) else {
        return;
    };
    let keep: BTreeSet<IpAddr> = [fleet.directors[0].host.addr].into();
    let o = fleet.directors[1].adm("--remove-director");
    assert!(o.status.success(), "{o:?}");
    // Withdrawn while rvsd still runs (the 5 s grace), then rvsd exits.
    within("the route is withdrawn", CONVERGE, || {
        !fleet.directors[1].announces()
    });
    assert!(
        fleet.directors[1].rvsd_running(),
        "still forwarding in the grace"
    );
    assert_eq!(fleet.wait_next_hops(1), keep);
    let d1 = &mut fleet.directors[1];
    within("rvsd exits after the grace", CONVERGE, || {
        !d1.rvsd_running()
    });
    let pins = rvs_xdp::pin::Instance::new(&d1.rvsd.instance).expect("instance");
    assert!(!pins.exists(), "the XDP plane is removed");
}

/// FRR instead of BIRD on a director: zebra's `ip import-table` takes
/// rvsd's table, bgpd's `redistribute table` announces it; a drain
/// withdraws it from the router and an undrain brings it back, as with
/// BIRD.
#[test]
fn fleet_frr_on_a_director_announces_and_withdraws_the_vip() {
    let Some(mut fleet) = Fleet::new(
        "fleet_frr_on_a_director_announces_and_withdraws_the_vip",
        Opts {
            directors: 2,
            ..Opts::default()
        },
    ) else {
        return;
    };
    let all = fleet.director_addrs();
    let d1_addr = fleet.directors[1].host.addr;
    // d0 keeps BIRD; d1 swaps it for FRR (BIRD's session closes first).
    fleet.directors[1].stop_bird();
    let d0: BTreeSet<IpAddr> = [fleet.directors[0].host.addr].into_iter().collect();
    assert_eq!(fleet.wait_next_hops(1), d0, "BIRD's path gone");
    let dir = TempDir::new("fleet-frr-director");
    let fdir = dir.path().join("frr");
    std::fs::create_dir_all(&fdir).expect("frr dir");
    let (zebra_conf, bgpd_conf) = director_frr_conf(d1_addr);
    std::fs::write(fdir.join("zebra.conf"), zebra_conf).expect("zebra.conf");
    std::fs::write(fdir.join("bgpd.conf"), bgpd_conf).expect("bgpd.conf");
    sh_ok(&["chown", "-R", "frr:frr", &fdir.to_string_lossy()]);
    let (mut zebra, mut bgpd) = start_frr(&fleet.directors[1].host, &fdir);
    // The router hears d1 again, now from bgpd.
    assert_eq!(
        fleet.wait_next_hops(2),
        all,
        "the router learns d1's VIP from FRR"
    );
    let d1 = &fleet.directors[1];
    d1.ok("--drain --grace 1");
    assert_eq!(fleet.wait_next_hops(1), d0, "FRR withdrew d1's route");
    d1.ok("--undrain");
    assert_eq!(fleet.wait_next_hops(2), all, "FRR announced d1 again");
    bgpd.kill();
    zebra.kill();
}
