//! The XDP data plane's control side against the kernel: neighbour
//! resolution over netlink, and `XdpPlane` loading, attaching and driving
//! the real program on a veth in a network namespace. Two namespaces per
//! test (director and real server, one veth between them), deleted on drop;
//! the only traffic is ARP/NDP and one discard-port datagram between them.
//! Needs root.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command as Cmd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant as StdInstant};

use common::{Flags, root_or_skip, tcp_frame_macs};
use rvs_control::protocol::Command;
use rvs_core::ipvs::{Ipvs, IpvsConfig};
use rvs_core::model::{AddrFamily, DestConfig, ForwardMethod, Protocol, ServiceConfig, ServiceKey};
use rvs_core::time::Instant;
use rvs_xdp::maps::{self, SvcKey};
use rvs_xdp::neigh::{NeighResolver, Resolve};
use rvs_xdp::plane::resolver::Resolver;
use rvs_xdp::plane::{KernelMaps, MapOps, Plane, XdpOptions, XdpPlane};
use rvs_xdp::{LoadOptions, action};

const DIR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x79, 0x02];
const RS_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x79, 0x11];

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn run(args: &[&str]) -> String {
    let out = Cmd::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Director and real-server namespaces joined by one veth; deleted on drop.
struct Bed {
    d: String,
    r: String,
}

impl Bed {
    fn new() -> Bed {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let id = std::process::id();
        let bed = Bed {
            d: format!("rvsxp-d-{id}-{n}"),
            r: format!("rvsxp-r-{id}-{n}"),
        };
        run(&["netns", "add", &bed.d]);
        run(&["netns", "add", &bed.r]);
        let (d, r) = (bed.d.as_str(), bed.r.as_str());
        let dm = mac(DIR_MAC);
        let rm = mac(RS_MAC);
        for cmd in [
            vec!["-n", d, "link", "set", "lo", "up"],
            vec!["-n", r, "link", "set", "lo", "up"],
            vec![
                "-n", d, "link", "add", "xd0", "address", &dm, "type", "veth", "peer", "name",
                "xr0", "address", &rm, "netns", r,
            ],
            vec!["-n", d, "addr", "add", "10.79.0.2/24", "dev", "xd0"],
            vec!["-n", d, "addr", "add", "fd79::2/64", "dev", "xd0", "nodad"],
            vec!["-n", r, "addr", "add", "10.79.0.11/24", "dev", "xr0"],
            vec!["-n", r, "addr", "add", "fd79::11/64", "dev", "xr0", "nodad"],
            vec!["-n", d, "link", "set", "xd0", "up"],
            vec!["-n", r, "link", "set", "xr0", "up"],
            vec!["-n", d, "route", "add", "10.80.0.0/16", "via", "10.79.0.11"],
            // A second segment of the director's (NAT real servers' side).
            vec![
                "-n", d, "link", "add", "xd1", "type", "veth", "peer", "name", "xd2",
            ],
            vec!["-n", d, "link", "set", "xd1", "up"],
            vec!["-n", d, "link", "set", "xd2", "up"],
        ] {
            run(&cmd);
        }
        bed
    }

    /// Run `f` on a thread inside the director's namespace.
    fn in_director<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.d);
        common::in_netns(&path, f)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for n in [&self.d, &self.r] {
            let _ = Cmd::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// rvsd's options for the director's `xd0` in generic (skb) mode with a
/// flow table (and embryonic tables) of `flows` entries, 4,096 services.
fn xd0_skb(flows: u32) -> XdpOptions {
    let load = LoadOptions {
        flow_table_size: flows,
        slots: 1 << 16,
        embryonic_table_size: flows,
        // The size before it was configurable (4,096): the migration
        // test grows it.
        max_services: 4096,
    };
    options(&["xd0"], Some(rvs_xdp::AttachMode::Skb), load)
}

/// rvsd's options for the production director on `interfaces` (`mode`:
/// rvsd's `--xdp-mode`, none for the best the driver offers) with `load`'s
/// table sizes; no tunnels, no SYN-flood guard, not pinned.
fn options(
    interfaces: &[&str],
    mode: Option<rvs_xdp::AttachMode>,
    load: LoadOptions,
) -> XdpOptions {
    XdpOptions {
        interfaces: interfaces.iter().map(|&i| i.to_owned()).collect(),
        mode,
        load,
        tun_src4: None,
        tun_src6: None,
        tun_src_prefix4: None,
        tun_src_prefix6: None,
        tun_mtu: None,
        max_new_flows: 0,
        fnat_ports: None,
        pin: None,
        object: rvs_xdp::Object::Director,
    }
}

fn ifindex(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            // sysfs shows the namespace it was mounted in; ask netlink's view.
            let out = Cmd::new("ip")
                .args(["-o", "link", "show", name])
                .output()
                .expect("ip");
            String::from_utf8_lossy(&out.stdout)
                .split(':')
                .next()
                .and_then(|s| s.trim().parse().ok())
                .expect("ifindex")
        })
}

fn wait_resolved(r: &mut NeighResolver, a: IpAddr) -> rvs_xdp::neigh::L2 {
    let start = StdInstant::now();
    loop {
        if let Some(l2) = r.lookup(a).expect("lookup") {
            return l2;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{a} not resolved");
        r.solicit(a).expect("solicit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn neighbours_are_resolved_through_the_kernel() {
    if !root_or_skip("neighbours_are_resolved_through_the_kernel") {
        return;
    }
    let bed = Bed::new();
    bed.in_director(|| {
        let idx = ifindex("xd0");
        let mut r = NeighResolver::new().expect("netlink");
        let rs: IpAddr = "10.79.0.11".parse().unwrap();
        assert_eq!(r.lookup(rs).expect("lookup"), None, "nothing pre-filled");
        let l2 = wait_resolved(&mut r, rs);
        assert_eq!((l2.ifindex, l2.mac, l2.smac), (idx, RS_MAC, DIR_MAC));
        assert_eq!(l2.src, Some("10.79.0.2".parse().unwrap()));
        // Behind a gateway (TUN): the gateway's MAC.
        let far: IpAddr = "10.80.3.4".parse().unwrap();
        assert_eq!(r.lookup(far).expect("lookup").map(|l| l.mac), Some(RS_MAC));
        // IPv6: neighbour discovery.
        let rs6: IpAddr = "fd79::11".parse().unwrap();
        let l2 = wait_resolved(&mut r, rs6);
        assert_eq!((l2.ifindex, l2.mac), (idx, RS_MAC));
        assert_eq!(l2.src, Some("fd79::2".parse().unwrap()), "source selection");
        // No route: an error, not a panic.
        assert!(r.lookup("203.0.113.9".parse().unwrap()).is_err());
    });
}

fn key() -> ServiceKey {
    ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: IpAddr::V4(Ipv4Addr::new(10, 79, 0, 100)),
        port: 80,
    }
}

type KPlane = Plane<KernelMaps>;

/// What the worker and the resolver task do between commands, on this
/// thread: the wanted set to the resolver, its answers to the plane, until
/// nothing is unresolved or `budget` ran out.
fn settle<R: Resolve>(plane: &mut KPlane, resolver: &mut Resolver<R>, budget: Duration) {
    let start = StdInstant::now();
    loop {
        resolver.set_wanted(&plane.wanted(), StdInstant::now());
        for (a, l2) in resolver.poll(StdInstant::now()) {
            plane.on_neighbour(a, l2);
        }
        if plane.wanted().unresolved.is_empty() || start.elapsed() > budget {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn xdp_plane_drives_the_attached_program() {
    if !root_or_skip("xdp_plane_drives_the_attached_program") {
        return;
    }
    let bed = Bed::new();
    bed.in_director(|| {
        let load = LoadOptions {
            flow_table_size: 4096,
            slots: 1 << 16,
            ..LoadOptions::default()
        };
        let opts = options(&["xd0", "xd1"], None, load);
        let (mut plane, neigh, modes) = Plane::start(&opts).expect("start");
        let mut resolver = Resolver::new(neigh);
        eprintln!("attached in {modes:?} mode");
        assert_eq!(modes.len(), 2);
        assert!(run(&["link", "show", "xd0"]).contains("xdp"), "attached");
        assert!(run(&["link", "show", "xd1"]).contains("xdp"), "attached");
        let mut ipvs = Ipvs::new(IpvsConfig::default());
        // The worker's part, synchronously: the command, then the
        // resolver's answers (room for a loaded machine; returns as soon as
        // nothing is unresolved).
        let mut exec = |plane: &mut KPlane, ipvs: &mut Ipvs, c: Command| {
            rvs_control::state::apply(ipvs, &c).expect("model");
            plane.apply_command(&c).expect("plane");
            settle(plane, &mut resolver, Duration::from_secs(3));
        };
        let rs: IpAddr = "10.79.0.11".parse().unwrap();
        exec(
            &mut plane,
            &mut ipvs,
            Command::AddService {
                key: key(),
                config: ServiceConfig::new(AddrFamily::Inet)
                    .scheduler(rvs_core::sched::Scheduler::Rr),
            },
        );
        exec(
            &mut plane,
            &mut ipvs,
            Command::AddDest {
                service: key(),
                dest: DestConfig::new(rs, 80).forward(ForwardMethod::Route),
            },
        );
        exec(
            &mut plane,
            &mut ipvs,
            Command::SetTimeouts {
                tcp: 77,
                tcpfin: 0,
                udp: 0,
            },
        );
        let di = plane.dest_index(&key(), rs, 80).expect("dest index");
        let m = plane.maps();
        let skey = SvcKey::new(maps::PROTO_TCP, "10.79.0.100".parse().unwrap(), 80);
        let si = m
            .read_service(&skey)
            .expect("read")
            .expect("service installed");
        let svc = m.read_svc(si).expect("svc");
        assert_eq!((svc.sched, svc.dests_len), (maps::sched::RR, 1));
        assert_eq!(m.read_slots(svc.dests_off, 1).expect("slots"), vec![di]);
        let d = m.read_dest(di).expect("dest");
        assert_eq!(
            (d.method, d.flags, d.mac, d.smac, d.ifindex),
            (maps::fwd::DR, 0, RS_MAC, DIR_MAC, ifindex("xd0")),
            "resolved within the apply budget"
        );
        let config = m.read_config().expect("config");
        assert_eq!(config.tcp_timeouts[1], 77);
        assert_eq!(config.tun_mtu, 1500, "the interface's MTU");

        // A client SYN through the attached program goes to the real
        // server's MAC; the next report mirrors the flow and its counters.
        let client: IpAddr = "10.79.0.50".parse().unwrap();
        let vip: IpAddr = "10.79.0.100".parse().unwrap();
        let frame = tcp_frame_macs(
            [2, 0, 0, 0, 0, 0x50],
            DIR_MAC,
            client,
            4000,
            vip,
            80,
            Flags::Syn,
            b"",
        );
        let out = m
            .director()
            .run_on(&frame, 1, ifindex("xd0"))
            .expect("test run");
        assert!(
            matches!(out.action, action::TX | action::REDIRECT),
            "action {}",
            out.action
        );
        assert_eq!(&out.data[..6], &RS_MAC);
        plane
            .report_to(Instant::from_secs(1), &mut ipvs)
            .expect("report");
        assert_eq!(ipvs.conns().len(), 1);
        let s = ipvs.service(&key()).expect("service");
        let rsd = &s.dests()[0];
        assert_eq!((rsd.active, rsd.stats.conns, rsd.stats.inpkts), (1, 1, 1));
        let conns = plane.maps().director().dest_conns(di).expect("dest_conns");
        assert_eq!(
            (conns.active, conns.inactive),
            (1, 0),
            "the program's own count"
        );
        assert_eq!(s.stats().inbytes, 40, "IP length of the SYN");

        // A connection another director synced here (IPVS connection
        // sync): its mid-stream packets go to its real server, which the
        // program would not do for an unknown non-SYN segment.
        let synced_ack = tcp_frame_macs(
            [2, 0, 0, 0, 0, 0x51],
            DIR_MAC,
            "10.79.0.51".parse().unwrap(),
            4001,
            vip,
            80,
            Flags::Ack,
            b"y",
        );
        let before = plane
            .maps()
            .director()
            .run_on(&synced_ack, 1, ifindex("xd0"))
            .expect("run");
        assert!(
            !(matches!(before.action, action::TX | action::REDIRECT) && before.data[..6] == RS_MAC),
            "an unknown ACK is not forwarded"
        );
        let synced = rvs_core::ipvs::MirroredConn {
            protocol: Protocol::Tcp,
            client: "10.79.0.51:4001".parse().unwrap(),
            vip: SocketAddr::new(vip, 80),
            dest: rsd.id,
            state: rvs_core::state::TcpState::Established as u8,
            output_seen: false,
            idle_left: Duration::from_secs(900),
            template: false,
            local: None,
        };
        plane.load_synced_flow(&ipvs, &synced).expect("load synced");
        let after = plane
            .maps()
            .director()
            .run_on(&synced_ack, 1, ifindex("xd0"))
            .expect("run");
        assert!(
            matches!(after.action, action::TX | action::REDIRECT),
            "action {}",
            after.action
        );
        assert_eq!(&after.data[..6], &RS_MAC);

        // Removal: the real server is marked unavailable (its flow's
        // packets are dropped), the service leaves the map.
        exec(
            &mut plane,
            &mut ipvs,
            Command::DelDest {
                service: key(),
                addr: rs,
                port: 80,
            },
        );
        let m = plane.maps();
        assert_eq!(
            m.read_dest(di).expect("dest").flags,
            maps::dest_flags::UNAVAILABLE
        );
        let ack = tcp_frame_macs(
            [2, 0, 0, 0, 0, 0x50],
            DIR_MAC,
            client,
            4000,
            vip,
            80,
            Flags::Ack,
            b"x",
        );
        assert_eq!(
            m.director()
                .run_on(&ack, 1, ifindex("xd0"))
                .expect("run")
                .action,
            action::DROP
        );
        // IPv6: the same through neighbour discovery.
        let key6 = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "fd79::100".parse().unwrap(),
            port: 80,
        };
        let rs6: IpAddr = "fd79::11".parse().unwrap();
        exec(
            &mut plane,
            &mut ipvs,
            Command::AddService {
                key: key6,
                config: ServiceConfig::new(AddrFamily::Inet6)
                    .scheduler(rvs_core::sched::Scheduler::Mh),
            },
        );
        exec(
            &mut plane,
            &mut ipvs,
            Command::AddDest {
                service: key6,
                dest: DestConfig::new(rs6, 80).forward(ForwardMethod::Route),
            },
        );
        let di6 = plane.dest_index(&key6, rs6, 80).expect("dest index");
        let d6 = plane.maps().read_dest(di6).expect("dest");
        assert_eq!((d6.family, d6.mac), (maps::AF_INET6, RS_MAC));
        let skey6 = SvcKey::new(maps::PROTO_TCP, "fd79::100".parse().unwrap(), 80);
        let si6 = plane
            .maps()
            .read_service(&skey6)
            .expect("read")
            .expect("v6 service");
        let svc6 = plane.maps().read_svc(si6).expect("svc");
        assert_eq!((svc6.family, svc6.table_len), (maps::AF_INET6, 4093));
        exec(&mut plane, &mut ipvs, Command::DelService { key: key() });
        assert_eq!(plane.maps().read_service(&skey).expect("read"), None);
        drop(plane);
        for i in ["xd0", "xd1"] {
            assert!(
                !run(&["link", "show", i]).contains("xdp"),
                "detached on drop"
            );
        }
    });
}

/// What one report costs with a populated flow table (printed; the report
/// runs under the control plane's lock once a second).
#[test]
fn report_cost_with_many_flows() {
    if !root_or_skip("report_cost_with_many_flows") {
        return;
    }
    let bed = Bed::new();
    bed.in_director(|| {
        let opts = xd0_skb(1 << 17);
        let (mut plane, neigh, _) = Plane::start(&opts).expect("start");
        let mut resolver = Resolver::new(neigh);
        let mut ipvs = Ipvs::new(IpvsConfig::default());
        let rs: IpAddr = "10.79.0.11".parse().unwrap();
        for c in [
            Command::AddService {
                key: key(),
                config: ServiceConfig::new(AddrFamily::Inet)
                    .scheduler(rvs_core::sched::Scheduler::Rr),
            },
            Command::AddDest {
                service: key(),
                dest: DestConfig::new(rs, 80).forward(ForwardMethod::Route),
            },
        ] {
            rvs_control::state::apply(&mut ipvs, &c).expect("model");
            plane.apply_command(&c).expect("plane");
            settle(&mut plane, &mut resolver, Duration::from_secs(3));
        }
        let di = plane.dest_index(&key(), rs, 80).expect("index");
        let vip: IpAddr = "10.79.0.100".parse().unwrap();
        let n: u32 = 50_000;
        // Fresh flows: stamped with the program's clock now.
        let frame = |i: u32| {
            let c = IpAddr::from([10, 81, (i >> 8) as u8, i as u8]);
            tcp_frame_macs(
                [2, 0, 0, 0, 0, 0x50],
                DIR_MAC,
                c,
                1000 + (i % 50_000) as u16,
                vip,
                80,
                Flags::Syn,
                b"",
            )
        };
        let xd0 = ifindex("xd0");
        let t = StdInstant::now();
        for i in 0..n {
            plane
                .maps()
                .director()
                .run_on(&frame(i), 1, xd0)
                .expect("run");
        }
        eprintln!("{n} SYNs through the program: {:?}", t.elapsed());
        let t = StdInstant::now();
        plane
            .report_to(Instant::from_secs(1), &mut ipvs)
            .expect("report");
        let first = t.elapsed();
        let t = StdInstant::now();
        plane
            .report_to(Instant::from_secs(2), &mut ipvs)
            .expect("report");
        let second = t.elapsed();
        eprintln!("report with {n} flows: first {first:?} (creates the entries), then {second:?}");
        assert_eq!(ipvs.conns().len(), n as usize);
        let t = StdInstant::now();
        let mut seen = 0u32;
        plane
            .maps()
            .for_each_flow(&mut |_, f| seen += u32::from(f.dest == di))
            .expect("flows");
        eprintln!("reading the {seen} flows alone: {:?}", t.elapsed());
        assert_eq!(seen, n);
        // Pages resume from the kernel's batch token: a walk of pages of
        // 8192 meets every flow once.
        let mut cursor = rvs_xdp::plane::WalkCursor::default();
        let mut keys = std::collections::HashSet::new();
        let mut pages = 0;
        loop {
            let mut got = 0usize;
            let done = plane
                .maps()
                .flows_page(&mut cursor, 8192, &mut |k, _| {
                    got += 1;
                    keys.insert(*k);
                })
                .expect("page");
            pages += 1;
            assert!(got <= 8192 + 4096, "a page is about its size: {got}");
            if done {
                break;
            }
            assert!(pages < 100, "the walk ends");
        }
        assert_eq!(keys.len(), n as usize);
        assert!(pages >= 5, "{pages} pages");
        // Reports a page each: bounded time per report, the view stays whole.
        plane.set_mirror_page(8192);
        let mut worst = Duration::ZERO;
        for s in 3..3 + pages as u64 + 1 {
            let t = StdInstant::now();
            plane
                .report_to(Instant::from_secs(s), &mut ipvs)
                .expect("report");
            worst = worst.max(t.elapsed());
            assert_eq!(ipvs.conns().len(), n as usize);
        }
        eprintln!("report with {n} flows in pages of 8192: at most {worst:?}");
        // The phases of one report: only the middle one holds the control
        // plane's lock in rvsd.
        plane.set_mirror_page(rvs_xdp::plane::MIRROR_PAGE);
        let t = StdInstant::now();
        let read = plane.report_read().expect("read");
        let (t_read, t) = (t.elapsed(), StdInstant::now());
        let writes = plane.report_decide(read, Instant::from_secs(100), &mut ipvs, true);
        let (t_decide, t) = (t.elapsed(), StdInstant::now());
        plane.report_write(writes);
        let t_write = t.elapsed();
        eprintln!(
            "report with {n} flows in one page: read {t_read:?}, decide (under the lock) \
             {t_decide:?}, write {t_write:?}"
        );
        assert_eq!(ipvs.conns().len(), n as usize);
    });
}

/// The report is the program's sweep: a flow past its state's timeout is
/// deleted from the table and from the director's view, and `dest_conns`
/// (which the least-connection schedulers read) is set from the live flows,
/// repairing counts gone wrong (LRU evictions). Loaded, not attached: the
/// frames go through `BPF_PROG_TEST_RUN`.
#[test]
fn report_expires_flows_and_recounts_connections() {
    if !root_or_skip("report_expires_flows_and_recounts_connections") {
        return;
    }
    let maps = rvs_xdp::plane::KernelMaps::load(&LoadOptions {
        flow_table_size: 4096,
        slots: 1 << 16,
        ..LoadOptions::default()
    })
    .expect("load");
    let rs: IpAddr = "10.79.0.11".parse().unwrap();
    let mut neigh = rvs_xdp::neigh::StaticResolver::default();
    neigh.table.insert(
        rs,
        rvs_xdp::neigh::L2 {
            ifindex: 1,
            mac: RS_MAC,
            smac: DIR_MAC,
            src: None,
        },
    );
    let mut resolver = Resolver::new(neigh);
    let mut plane = Plane::new(maps).expect("plane");
    let mut ipvs = Ipvs::new(IpvsConfig::default());
    for c in [
        Command::AddService {
            key: key(),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Wlc),
        },
        Command::AddDest {
            service: key(),
            dest: DestConfig::new(rs, 80).forward(ForwardMethod::Route),
        },
        // FIN_WAIT flows expire after a second.
        Command::SetTimeouts {
            tcp: 0,
            tcpfin: 1,
            udp: 0,
        },
    ] {
        rvs_control::state::apply(&mut ipvs, &c).expect("model");
        plane.apply_command(&c).expect("plane");
        settle(&mut plane, &mut resolver, Duration::from_secs(1));
    }
    let di = plane.dest_index(&key(), rs, 80).expect("index");
    let vip: IpAddr = "10.79.0.100".parse().unwrap();
    let (a, b): (IpAddr, IpAddr) = ("10.79.0.50".parse().unwrap(), "10.79.0.51".parse().unwrap());
    let send = |plane: &mut KPlane, c: IpAddr, flags: Flags| {
        let f = tcp_frame_macs([2, 0, 0, 0, 0, 0x50], DIR_MAC, c, 4000, vip, 80, flags, b"");
        let out = plane.maps().director().run(&f, 1).expect("run");
        assert!(
            matches!(out.action, action::TX | action::REDIRECT),
            "action {}",
            out.action
        );
    };
    send(&mut plane, a, Flags::Syn);
    send(&mut plane, a, Flags::Ack); // ESTABLISHED
    send(&mut plane, b, Flags::Syn);
    send(&mut plane, b, Flags::Ack);
    send(&mut plane, b, Flags::Fin); // FIN_WAIT
    plane
        .report_to(Instant::from_secs(1), &mut ipvs)
        .expect("report");
    assert_eq!(ipvs.conns().len(), 2);
    std::thread::sleep(Duration::from_millis(1300));
    // Counters gone wrong: the report repairs them.
    let junk = maps::DestConns {
        active: 50,
        inactive: 50,
    };
    plane
        .maps()
        .director()
        .set_dest_conns(di, &junk)
        .expect("junk");
    plane
        .report_to(Instant::from_secs(2), &mut ipvs)
        .expect("report");
    let mut left = Vec::new();
    plane
        .maps()
        .for_each_flow(&mut |k, _| left.push(*k))
        .expect("flows");
    assert_eq!(left.len(), 1, "the FIN_WAIT flow expired and was deleted");
    assert_eq!(left[0].caddr[..4], maps::addr16(a)[..4]);
    assert_eq!(ipvs.conns().len(), 1, "and left the director's view");
    let c = plane.maps().director().dest_conns(di).expect("dest_conns");
    assert_eq!(
        (c.active, c.inactive),
        (1, 0),
        "recounted from the live flow"
    );
}

/// rvsd's shape: the handle only queues commands (a hundred real servers
/// that never answer ARP cost the caller nothing), the worker applies them
/// and the resolver task resolves on their own threads, and the worker
/// reports by itself with the director lent.
#[test]
fn xdp_plane_worker_applies_and_reports_without_blocking_its_caller() {
    use rvs_control::dataplane::{DataPlane, DirectorHandle};
    use std::sync::{Arc, Mutex};
    if !root_or_skip("xdp_plane_worker_applies_and_reports_without_blocking_its_caller") {
        return;
    }
    let bed = Bed::new();
    bed.in_director(|| {
        let opts = xd0_skb(4096);
        let (mut plane, _) = XdpPlane::start(&opts).expect("start");
        let ipvs = Arc::new(Mutex::new(Ipvs::new(IpvsConfig::default())));
        let shared = ipvs.clone();
        let t0 = StdInstant::now();
        plane.attach(DirectorHandle::new(move |f| {
            if let Ok(mut i) = shared.lock() {
                f(&mut i, Instant::from_secs(1 + t0.elapsed().as_secs()));
            }
        }));
        let rs: IpAddr = "10.79.0.11".parse().unwrap();
        let mut cmds = vec![Command::AddService {
            key: key(),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Rr),
        }];
        // In the subnet, no host there.
        for i in 150..250u8 {
            cmds.push(Command::AddDest {
                service: key(),
                dest: DestConfig::new(IpAddr::from([10, 79, 0, i]), 80)
                    .forward(ForwardMethod::Route),
            });
        }
        cmds.push(Command::AddDest {
            service: key(),
            dest: DestConfig::new(rs, 80).forward(ForwardMethod::Route),
        });
        let t = StdInstant::now();
        {
            let mut model = ipvs.lock().expect("lock");
            for c in &cmds {
                rvs_control::state::apply(&mut model, c).expect("model");
                plane.apply(c).expect("queued");
            }
        }
        let took = t.elapsed();
        eprintln!("{} commands queued in {took:?}", cmds.len());
        assert!(took < Duration::from_millis(100), "{took:?}");
        // The worker installs them; the one that answers is scheduled
        // alone.
        let scheduled = move |p: &mut KPlane| {
            let di = p.dest_index(&key(), rs, 80)?;
            let si = p.service_index(&key())?;
            let svc = p.maps().read_svc(si).ok()?;
            let list = p.maps().read_slots(svc.dests_off, svc.dests_len).ok()?;
            Some((di, list, p.wanted().unresolved.len()))
        };
        let start = StdInstant::now();
        let (di, unresolved) = loop {
            match plane.with_plane(scheduled).expect("worker") {
                Some((di, list, n)) if list == vec![di] => break (di, n),
                other => assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "not scheduled: {other:?}"
                ),
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(unresolved, 100);
        // A SYN through the program; the worker's own report mirrors it.
        let vip: IpAddr = "10.79.0.100".parse().unwrap();
        let frame = tcp_frame_macs(
            [2, 0, 0, 0, 0, 0x50],
            DIR_MAC,
            "10.79.0.50".parse().unwrap(),
            4000,
            vip,
            80,
            Flags::Syn,
            b"",
        );
        let xd0 = ifindex("xd0");
        let out = plane
            .with_plane(move |p| p.maps().director().run_on(&frame, 1, xd0).map(|r| r.data))
            .expect("worker")
            .expect("run");
        assert_eq!(&out[..6], &RS_MAC);
        let start = StdInstant::now();
        while ipvs.lock().expect("lock").conns().len() != 1 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the worker reports"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let model = ipvs.lock().expect("lock");
        let s = model.service(&key()).expect("service");
        let d = s.dests().iter().find(|d| d.config.addr == rs).expect("rs");
        assert_eq!((d.active, d.stats.conns), (1, 1));
        drop(model);
        let conns = plane
            .with_plane(move |p| p.maps().director().dest_conns(di).ok())
            .flatten()
            .expect("dest_conns");
        assert_eq!(conns.active, 1);
        drop(plane);
        assert!(
            !run(&["link", "show", "xd0"]).contains("xdp"),
            "detached on drop"
        );
    });
}

/// The director acts on frames to a VRRP `use_vmac` macvlan's virtual MAC
/// on the interface it is attached to: the resolver task sees the macvlan
/// come and go and the worker writes the own-MAC table (no rvsd needed:
/// the same `XdpPlane` rvsd runs).
#[test]
fn the_worker_owns_the_mac_of_a_macvlan_on_its_interface() {
    if !root_or_skip("the_worker_owns_the_mac_of_a_macvlan_on_its_interface") {
        return;
    }
    let bed = Bed::new();
    bed.in_director(|| {
        let opts = xd0_skb(4096);
        let (plane, _) = XdpPlane::start(&opts).expect("start");
        let xd0 = rvs_sys::iface::ifindex("xd0").expect("xd0");
        let vmac = [0, 0, 0x5e, 0, 1, 7];
        let owned = move |plane: &XdpPlane| {
            plane
                .with_plane(|p| p.maps().director().own_macs().expect("own macs"))
                .expect("worker")
                .entries()
                .to_vec()
        };
        assert_eq!(owned(&plane), vec![(xd0, DIR_MAC)], "attach owns xd0's MAC");
        let wait = |want: bool| {
            let start = StdInstant::now();
            while owned(&plane).contains(&(xd0, vmac)) != want {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "the virtual MAC {} owned: {:?}",
                    if want { "is not" } else { "is still" },
                    owned(&plane)
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        run(&[
            "link",
            "add",
            "link",
            "xd0",
            "name",
            "vrrp.7",
            "address",
            &mac(vmac),
            "type",
            "macvlan",
            "mode",
            "private",
        ]);
        run(&["link", "set", "vrrp.7", "up"]);
        wait(true);
        assert_eq!(
            owned(&plane)[0],
            (xd0, DIR_MAC),
            "the interface's MAC first"
        );
        run(&["link", "del", "vrrp.7"]);
        wait(false);
    });
}

/// The pins of one test's instance, removed on drop (even on failure).
struct Pins(rvs_xdp::pin::Instance);

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = self.0.remove();
    }
}

/// `prog/xdp id N` of `ifname` (empty when nothing is attached).
fn xdp_prog(ifname: &str) -> String {
    let text = run(&["link", "show", ifname]);
    text.split("prog/xdp")
        .nth(1)
        .map(|t| t.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// With pins, the program and its maps outlive the plane: a second plane
/// over the same instance adopts them (same program: kept running, same
/// flows, same indexes); a third with another flow-table size migrates
/// the flow tables into new maps and swaps the program by a link update;
/// removing the instance detaches it. Also checks `director_maps` against
/// the maps the kernel created from the object, and that the tail-call
/// arrays of the program the links run stay pinned and filled once the
/// plane that loaded it is gone (the kernel empties a prog array no file
/// descriptor or pin holds: FULLNAT would stop).
#[test]
fn pinned_plane_outlives_the_process_and_is_adopted_then_migrated() {
    use rvs_xdp::Attached;
    use rvs_xdp::maps::{Flow, FlowKey};
    use rvs_xdp::pin::{Instance, TAIL_ARRAYS, director_maps, pinned_map_info};
    if !root_or_skip("pinned_plane_outlives_the_process_and_is_adopted_then_migrated") {
        return;
    }
    let bed = Bed::new();
    let name = format!("xdptest-{}", bed.d);
    bed.in_director(move || {
        let inst = Instance::new(&name).expect("instance");
        let pins = Pins(inst.clone());
        let mut opts = xd0_skb(4096);
        opts.pin = Some(inst.clone());
        let nat = DestConfig::new("10.79.0.11".parse().unwrap(), 80).forward(ForwardMethod::Masq);
        let config = || {
            vec![
                Command::AddService {
                    key: key(),
                    config: ServiceConfig::new(AddrFamily::Inet),
                },
                Command::AddDest {
                    service: key(),
                    dest: nat,
                },
            ]
        };
        let client: IpAddr = "10.79.0.50".parse().unwrap();
        let fk = FlowKey::new(6, client, 40000, "10.79.0.100".parse().unwrap(), 80);

        let (mut a, _, modes) = Plane::start(&opts).expect("start");
        assert!(matches!(modes[..], [Attached::New(_)]), "{modes:?}");
        let pinned = std::fs::read_dir(inst.maps_dir()).map_or(0, |rd| rd.count());
        assert_eq!(
            pinned,
            director_maps(&opts.load).len() + TAIL_ARRAYS.len(),
            "every map and the tail-call arrays pinned, no other"
        );
        for want in director_maps(&opts.load) {
            let info = pinned_map_info(&inst.map_path(want.name))
                .unwrap_or_else(|| panic!("{} pinned", want.name));
            assert!(want.matches(&info), "{}: {info:?} vs {want:?}", want.name);
        }
        for c in config() {
            a.apply_command(&c).expect("apply");
        }
        let (svc, dest) = (
            a.service_index(&key()).unwrap(),
            a.dest_index(&key(), "10.79.0.11".parse().unwrap(), 80)
                .unwrap(),
        );
        let flow = Flow {
            last_seen: rvs_xdp::jiffies_now().expect("jiffies"),
            dest,
            svc,
            state: 3,
            ..Flow::default()
        };
        a.maps().director().set_flow(&fk, &flow).expect("flow");
        let first = xdp_prog("xd0");
        drop(a);
        assert_eq!(xdp_prog("xd0"), first, "still attached without a plane");
        assert!(
            inst.tails_pinned(),
            "the tail-call arrays outlive the plane"
        );

        // Same build, same sizes: adopted, the program kept.
        let (mut b, _, modes) = Plane::start(&opts).expect("adopt");
        assert_eq!(modes, vec![Attached::Kept]);
        assert!(b.adopting());
        assert_eq!(b.maps().director().flow(&fk).expect("read"), Some(flow));
        for c in config() {
            b.apply_command(&c).expect("apply");
        }
        assert_eq!(b.service_index(&key()), Some(svc));
        assert_eq!(
            b.dest_index(&key(), "10.79.0.11".parse().unwrap(), 80),
            Some(dest)
        );
        assert_eq!(
            b.maps().read_config().expect("config").flags & maps::CFG_F_NAT,
            maps::CFG_F_NAT
        );
        let svc_info = b.maps().read_svc(svc).expect("svc_info");
        assert_ne!(svc_info.sched, maps::sched::NONE);
        drop(b);
        assert_eq!(xdp_prog("xd0"), first, "the same program still runs");
        assert!(inst.tails_pinned(), "its tail-call arrays still pinned");

        // A program whose tail-call arrays are not pinned (left by a build
        // that did not pin them: they emptied when its rvsd exited) is
        // swapped for this plane's, whose arrays are pinned.
        for (name, _) in TAIL_ARRAYS {
            std::fs::remove_file(inst.map_path(name)).expect("unpin");
        }
        assert!(!inst.tails_pinned());
        let (healed, _, modes) = Plane::start(&opts).expect("heal");
        assert_eq!(modes, vec![Attached::Updated]);
        drop(healed);
        assert!(inst.tails_pinned(), "pinned again");
        assert_ne!(xdp_prog("xd0"), first, "another program on the link");

        // Another flow-table size and more services (an upgrade from the
        // fixed 4,096 to the default 65,536): the flow tables and the
        // service maps migrate, the program is swapped, the pins are the
        // new maps, the service keeps its index and its counters.
        opts.load.flow_table_size = 8192;
        opts.load.max_services = maps::MAX_SERVICES;
        let (mut c, _, modes) = Plane::start(&opts).expect("migrate");
        assert_eq!(modes, vec![Attached::Updated]);
        assert!(inst.tails_pinned());
        assert_eq!(c.maps().director().flow(&fk).expect("read"), Some(flow));
        let info = pinned_map_info(&inst.map_path("flows4")).expect("flows4");
        assert_eq!(info.max_entries, 8192);
        for name in rvs_xdp::pin::SERVICE_MAPS {
            let info = pinned_map_info(&inst.map_path(name)).expect(name);
            assert_eq!(info.max_entries, maps::MAX_SERVICES, "{name}");
        }
        assert!(c.adopting());
        assert_eq!(
            c.maps().read_svc(svc).expect("svc_info"),
            svc_info,
            "svc_info carried into the larger array"
        );
        for cmd in config() {
            c.apply_command(&cmd).expect("apply");
        }
        assert_eq!(c.service_index(&key()), Some(svc), "the index kept");
        assert_ne!(xdp_prog("xd0"), first, "another program on the link");
        assert_ne!(xdp_prog("xd0"), "");
        drop(c);
        // One more interface, then fewer: the link of the interface no
        // longer configured is removed (detached). The new interface gets
        // this plane's program and so does the other one (one program
        // runs on all: the pinned tail-call arrays are one program's).
        opts.interfaces = vec!["xd0".into(), "xd1".into()];
        let (d, _, modes) = Plane::start(&opts).expect("two interfaces");
        assert!(
            matches!(modes[..], [Attached::Updated, Attached::New(_)]),
            "{modes:?}"
        );
        drop(d);
        assert_ne!(xdp_prog("xd1"), "");
        assert_eq!(xdp_prog("xd0"), xdp_prog("xd1"), "one program on both");
        assert!(inst.tails_pinned());
        opts.interfaces = vec!["xd0".into()];
        let (e, _, _) = Plane::start(&opts).expect("one interface");
        assert_eq!(xdp_prog("xd1"), "", "xd1's link removed");
        assert_eq!(inst.linked_interfaces(), vec!["xd0".to_owned()]);
        drop(e);
        drop(pins);
        let start = StdInstant::now();
        while !xdp_prog("xd0").is_empty() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(xdp_prog("xd0"), "", "detached once unpinned");
        assert!(!inst.exists());
    });
}
