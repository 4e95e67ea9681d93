//! Unit tests of the sync logic over [`MemMaps`], no kernel.

use super::resolver::Resolver;
use super::*;
use crate::maps::Dest;
use crate::neigh::StaticResolver;
use rvs_core::ipvs::IpvsConfig;
use rvs_core::model::{AddrFamily, Tunnel};
use rvs_core::time::Instant;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant as StdInstant};

type MemPlane = Plane<MemMaps>;

fn key(port: u16) -> ServiceKey {
    ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
        port,
    }
}

fn rs(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
}

fn l2(i: u8) -> L2 {
    L2 {
        ifindex: 7,
        mac: [2, 0, 0, 0, 0, i],
        smac: [2, 0, 0, 0, 0, 1],
        src: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
    }
}

fn resolver() -> StaticResolver {
    let mut r = StaticResolver::default();
    for i in 1..50 {
        r.table.insert(rs(i), l2(i));
    }
    r
}

/// A plane and a director that see the same commands, as in rvsd, and the
/// resolver's state machine over a static table, driven as the worker
/// drives it: after every command and report, on a virtual clock.
struct Bed {
    plane: MemPlane,
    ipvs: Ipvs,
    resolver: Resolver<StaticResolver>,
    t0: StdInstant,
    now: Duration,
}

impl Bed {
    fn new() -> Self {
        Bed {
            plane: Plane::new(MemMaps::new(1 << 16)).unwrap(),
            ipvs: Ipvs::new(IpvsConfig::default()),
            resolver: Resolver::new(resolver()),
            t0: StdInstant::now(),
            now: Duration::ZERO,
        }
    }
    /// The static table the resolver asks.
    fn table(&mut self) -> &mut StaticResolver {
        self.resolver.inner_mut()
    }
    /// What the worker does when its queue is empty: the wanted set to the
    /// resolver, its answers to the plane.
    fn settle(&mut self) {
        let now = self.t0 + self.now;
        self.resolver.set_wanted(&self.plane.wanted(), now);
        for (a, l2) in self.resolver.poll(now) {
            self.plane.on_neighbour(a, l2);
        }
        for (link, macs) in self.resolver.poll_links(now) {
            self.plane.on_owned_macs(link, macs);
        }
    }
    fn run(&mut self, c: Command) -> Result<(), PlaneError> {
        rvs_control::state::apply(&mut self.ipvs, &c).unwrap();
        let r = self.plane.apply_command(&c);
        self.settle();
        r
    }
    fn svc(&mut self, port: u16, sched: &str) -> Result<(), PlaneError> {
        self.run(Command::AddService {
            key: key(port),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(sched.parse().unwrap()),
        })
    }
    fn dest(&mut self, port: u16, d: DestConfig) -> Result<(), PlaneError> {
        self.run(Command::AddDest {
            service: key(port),
            dest: d,
        })
    }
    fn report(&mut self, secs: u64) {
        self.now = Duration::from_secs(secs);
        self.plane
            .report_to(Instant::from_secs(secs), &mut self.ipvs)
            .unwrap();
        self.settle();
    }
    fn data(&mut self, port: u16) -> (Vec<u32>, Vec<u32>) {
        let i = self.plane.service_index(&key(port)).unwrap();
        self.plane.maps().svc_data(i)
    }
    fn index(&self, port: u16, i: u8) -> u32 {
        self.plane.dest_index(&key(port), rs(i), 80).unwrap()
    }
}

fn dr(i: u8) -> DestConfig {
    DestConfig::new(rs(i), 80).forward(ForwardMethod::Route)
}

/// The scheduling data the core would compute for the live list.
fn expected(bed: &Bed, port: u16) -> (Vec<u32>, Vec<u32>) {
    let svc = bed.ipvs.service(&key(port)).unwrap();
    let list: Vec<u32> = svc
        .dests()
        .iter()
        .map(|d| {
            bed.plane
                .dest_index(&key(port), d.config.addr, d.config.port)
                .unwrap()
        })
        .collect();
    let table = scheduling_table(
        svc.config().scheduler,
        &sched_params(svc.config()),
        svc.dests(),
        &list,
    )
    .unwrap();
    (list, table)
}

#[test]
fn services_and_real_servers_reach_the_maps() {
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.dest(80, dr(11)).unwrap();
    bed.dest(80, dr(12).weight(3)).unwrap();
    let i = bed.plane.service_index(&key(80)).unwrap();
    let skey = SvcKey::new(maps::PROTO_TCP, "10.0.0.100".parse().unwrap(), 80);
    assert_eq!(bed.plane.maps().services.get(&skey), Some(&i));
    let svc = bed.plane.maps().svc_info[&i];
    assert_eq!((svc.sched, svc.family), (maps::sched::RR, maps::AF_INET));
    let (a, b) = (bed.index(80, 11), bed.index(80, 12));
    assert_eq!(bed.data(80), (vec![b, a], vec![]), "newest first, as IPVS");
    let d = bed.plane.maps().dests[&b];
    assert_eq!(
        (d.method, d.weight, d.flags, d.ifindex, d.mac, d.port),
        (maps::fwd::DR, 3, 0, 7, [2, 0, 0, 0, 0, 12], 80u16.to_be())
    );
    assert_eq!(bed.plane.maps().config.flags & maps::CFG_F_NAT, 0);
    // NAT real servers need no MAC and switch the reply path on.
    bed.dest(
        80,
        DestConfig::new(rs(60), 8080).forward(ForwardMethod::Masq),
    )
    .unwrap();
    assert_eq!(bed.plane.maps().config.flags, maps::CFG_F_NAT);
    assert_eq!(bed.data(80).0.len(), 3);
    // ... and use their next hop when it is known (no FIB lookup per
    // packet); one learnt later is installed at the next report.
    let nat = bed.plane.dest_index(&key(80), rs(60), 8080).unwrap();
    assert_eq!(bed.plane.maps().dests[&nat].flags, 0);
    bed.dest(
        80,
        DestConfig::new(rs(21), 8080).forward(ForwardMethod::Masq),
    )
    .unwrap();
    let known = bed.plane.dest_index(&key(80), rs(21), 8080).unwrap();
    let d = bed.plane.maps().dests[&known];
    assert_eq!(
        (d.method, d.flags, d.ifindex, d.mac),
        (
            maps::fwd::NAT,
            maps::dest_flags::NEXTHOP,
            7,
            [2, 0, 0, 0, 0, 21]
        )
    );
    assert!(bed.table().solicited.contains(&rs(60)));
    bed.table().table.insert(rs(60), l2(60));
    bed.report(1);
    let d = bed.plane.maps().dests[&nat];
    assert_eq!(
        (d.flags, d.mac),
        (maps::dest_flags::NEXTHOP, [2, 0, 0, 0, 0, 60])
    );
}

#[test]
fn hash_tables_and_wrr_are_the_cores() {
    let mut bed = Bed::new();
    for (port, sched) in [(80, "mh"), (81, "sh"), (82, "dh"), (83, "wrr")] {
        bed.svc(port, sched).unwrap();
        for i in 1..6 {
            bed.dest(port, dr(i).weight(u32::from(i))).unwrap();
        }
        bed.run(Command::EditDest {
            service: key(port),
            dest: dr(3).weight(0),
        })
        .unwrap();
        bed.run(Command::DelDest {
            service: key(port),
            addr: rs(2),
            port: 80,
        })
        .unwrap();
        let want = expected(&bed, port);
        assert!(!want.1.is_empty(), "{sched}");
        assert!(bed.data(port) == want, "{sched}");
    }
    // A scheduler change rebuilds the table.
    bed.run(Command::EditService {
        key: key(80),
        config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Sh),
    })
    .unwrap();
    let want = expected(&bed, 80);
    assert!(bed.data(80) == want);
    let i = bed.plane.service_index(&key(80)).unwrap();
    assert_eq!(bed.plane.maps().svc_info[&i].sched, maps::sched::SH);
}

/// The program's wrr decisions (`slots` cycle at `rr_cursor % len`, the
/// cursor advanced per decision) are the kernel's: with real servers added
/// one by one the kernel first gives each one connection in list order
/// (its threshold stays 1 through the adds), then runs its cycle; a weight
/// edited and a server deleted between decisions keep the kernel's
/// threshold. The core's stateful wrr, updated as the kernel's is, is the
/// reference.
#[test]
fn wrr_cursor_follows_the_kernels_mark() {
    use rvs_core::sched::{ListChange, SchedInput, SchedParams, Scheduler, new_scheduler};
    let mut bed = Bed::new();
    bed.svc(83, "wrr").unwrap();
    let mut kernel = new_scheduler(Scheduler::Wrr, &SchedParams::default()).unwrap();
    let mut list: Vec<CoreDest> = Vec::new();
    for i in 1..=5u8 {
        let cfg = dr(i).weight(u32::from(i));
        bed.dest(83, cfg).unwrap();
        list.insert(0, CoreDest::new(rvs_core::dest::DestId(u32::from(i)), cfg));
        kernel.update(&list, ListChange::Added(0));
    }
    let svc = bed.plane.service_index(&key(83)).unwrap();
    let input = SchedInput {
        protocol: Protocol::Tcp,
        saddr: rs(200),
        sport: 1000,
        daddr: rs(100),
        dport: 83,
    };
    let compare = |bed: &mut Bed,
                   kernel: &mut dyn rvs_core::sched::Algorithm,
                   list: &[CoreDest],
                   n: usize,
                   what: &str| {
        // wrr steps through its cycle, rr through the list.
        let (order, table) = bed.data(83);
        let cycle = if table.is_empty() { order } else { table };
        let (mut want, mut got) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let p = kernel
                .schedule(list, &input, Instant::from_secs(1))
                .unwrap();
            want.push(list[p].config.addr);
            let m = bed.plane.maps();
            let c = m.cursors.get(&svc).copied().unwrap_or(0);
            m.cursors.insert(svc, c + 1);
            let idx = cycle[(c % cycle.len() as u64) as usize];
            let i = (1..=5u8).find(|&i| bed.plane.dest_index(&key(83), rs(i), 80) == Some(idx));
            got.push(rs(i.expect("a dest of the service")));
        }
        assert_eq!(got, want, "{what}");
    };
    compare(
        &mut bed,
        kernel.as_mut(),
        &list,
        5 + 15 + 3,
        "after the adds",
    );
    // rs(2) (position 3) to weight 7.
    bed.run(Command::EditDest {
        service: key(83),
        dest: dr(2).weight(7),
    })
    .unwrap();
    list[3].config.weight = 7;
    kernel.update(&list, ListChange::Edited(3));
    compare(&mut bed, kernel.as_mut(), &list, 30, "after an edit");
    bed.run(Command::DelDest {
        service: key(83),
        addr: rs(4),
        port: 80,
    })
    .unwrap();
    list.remove(1);
    kernel.update(&list, ListChange::Removed(1));
    compare(&mut bed, kernel.as_mut(), &list, 30, "after a deletion");
    // A service edit that keeps the list keeps the cursor.
    let before = bed.plane.maps().cursors.get(&svc).copied();
    bed.run(Command::EditService {
        key: key(83),
        config: ServiceConfig::new(AddrFamily::Inet).scheduler(Scheduler::Wrr),
    })
    .unwrap();
    assert_eq!(bed.plane.maps().cursors.get(&svc).copied(), before);
    compare(&mut bed, kernel.as_mut(), &list, 10, "after a service edit");
    // An edit that changes nothing is upd_dest all the same: the mark
    // goes back to the head, its threshold kept.
    bed.run(Command::EditDest {
        service: key(83),
        dest: dr(3).weight(3),
    })
    .unwrap();
    kernel.update(&list, ListChange::Edited(1));
    // (13: the cursor then stands off the list head for rr below.)
    compare(
        &mut bed,
        kernel.as_mut(),
        &list,
        13,
        "after -e with no change",
    );
    // Another scheduler, then wrr again: each bound afresh (init_service),
    // rr at the list head, wrr with a new mark.
    for sched in [Scheduler::Rr, Scheduler::Wrr] {
        bed.run(Command::EditService {
            key: key(83),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(sched),
        })
        .unwrap();
        kernel = new_scheduler(sched, &SchedParams::default()).unwrap();
        kernel.update(&list, ListChange::Reset);
        compare(
            &mut bed,
            kernel.as_mut(),
            &list,
            13,
            &format!("after -E -s {sched}"),
        );
    }
}

#[test]
fn old_regions_are_freed_only_after_the_grace_period() {
    let mut bed = Bed::new();
    let total = u64::from(bed.plane.maps().slots_len);
    bed.svc(80, "mh").unwrap();
    bed.dest(80, dr(1)).unwrap();
    let i = bed.plane.service_index(&key(80)).unwrap();
    let first = bed.plane.maps().svc_info[&i];
    bed.dest(80, dr(2)).unwrap();
    let second = bed.plane.maps().svc_info[&i];
    let region = |s: &Svc| (s.dests_off, s.dests_off + s.dests_len + s.table_len);
    let (a, b) = (region(&first), region(&second));
    assert!(a.1 <= b.0 || b.1 <= a.0, "a fresh region, not the live one");
    let used = |bed: &Bed| total - bed.plane.free_slots();
    let live = u64::from(b.1 - b.0);
    assert!(used(&bed) > live, "the old region is still reserved");
    bed.report(1);
    assert!(used(&bed) > live, "one report is not a full interval");
    bed.report(2);
    assert_eq!(used(&bed), live, "freed after the grace period");
    // Deleting the service retires its region and index the same way.
    bed.run(Command::DelService { key: key(80) }).unwrap();
    assert_eq!(bed.plane.maps().svc_info[&i].sched, maps::sched::NONE);
    assert!(bed.plane.maps().services.is_empty());
    bed.report(3);
    bed.report(4);
    assert_eq!(used(&bed), 0);
}

#[test]
fn deleted_real_servers_stay_unavailable_while_flows_use_them() {
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.dest(80, dr(1)).unwrap();
    bed.dest(80, dr(2)).unwrap();
    let idx = bed.index(80, 1);
    let flow_key = FlowKey::new(6, rs(200), 5555, "10.0.0.100".parse().unwrap(), 80);
    let now = bed.plane.maps().jiffies;
    bed.plane.maps().flows.insert(
        flow_key,
        Flow {
            last_seen: now,
            dest: idx,
            state: TcpState::Established as u8,
            flags: maps::FLOW_F_NOOUTPUT,
            ..Flow::default()
        },
    );
    let del = Command::DelDest {
        service: key(80),
        addr: rs(1),
        port: 80,
    };
    bed.run(del.clone()).unwrap();
    let d = bed.plane.maps().dests[&idx];
    assert_eq!(d.flags, maps::dest_flags::UNAVAILABLE);
    assert!(!bed.data(80).0.contains(&idx), "not scheduled");
    // Added back: resurrected with its index (flows find it again).
    bed.dest(80, dr(1)).unwrap();
    assert_eq!(bed.index(80, 1), idx);
    assert_eq!(bed.plane.maps().dests[&idx].flags, 0);
    bed.run(del).unwrap();
    for t in 1..5 {
        bed.report(t);
    }
    assert_eq!(
        bed.plane.dest_index(&key(80), rs(1), 80),
        Some(idx),
        "a flow uses it"
    );
    bed.plane.maps().flows.clear();
    bed.report(5);
    assert_eq!(bed.plane.dest_index(&key(80), rs(1), 80), None);
    assert_eq!(bed.plane.maps().dests[&idx], Dest::default());
    bed.dest(80, dr(3)).unwrap();
    assert_eq!(bed.index(80, 3), idx, "the index is reused");
}

/// Every write of a command fails in turn: the command reports the
/// error and the maps the program reads are as before; then the plane
/// converges to the model at the next report.
#[test]
fn a_failed_write_changes_nothing_and_the_next_report_converges() {
    let cmds = [
        Command::AddService {
            key: key(81),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Mh),
        },
        Command::AddDest {
            service: key(80),
            dest: dr(5),
        },
        Command::EditDest {
            service: key(80),
            dest: dr(1).weight(0),
        },
        Command::DelDest {
            service: key(80),
            addr: rs(2),
            port: 80,
        },
        Command::EditService {
            key: key(80),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Wrr),
        },
        Command::DelService { key: key(80) },
        Command::SetTimeouts {
            tcp: 5,
            tcpfin: 6,
            udp: 7,
        },
    ];
    fn visible(bed: &mut Bed) -> String {
        let m = bed.plane.maps().clone();
        let mut svcs: Vec<_> = m
            .services
            .iter()
            .map(|(k, i)| (format!("{k:?}"), m.svc_info[i], m.svc_data(*i)))
            .collect();
        svcs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut dests: Vec<_> = m
            .dests
            .iter()
            .filter(|(_, d)| **d != Dest::default())
            .collect();
        dests.sort_by_key(|(i, _)| **i);
        format!("{svcs:?} {dests:?} {:?}", m.config)
    }
    for cmd in &cmds {
        let (mut n, mut failed) = (0, 0);
        loop {
            let mut bed = Bed::new();
            bed.svc(80, "mh").unwrap();
            for i in 1..4 {
                bed.dest(80, dr(i)).unwrap();
            }
            let before = visible(&mut bed);
            let at = bed.plane.maps().writes + n;
            bed.plane.maps().fail_at = Some(at);
            let r = bed.run(cmd.clone());
            if bed.plane.maps().writes <= at {
                assert!(r.is_ok(), "{cmd:?}");
                break;
            }
            if r.is_err() {
                failed += 1;
                assert_eq!(visible(&mut bed), before, "{cmd:?} failing at write {n}");
            }
            // The model has the change: the plane converges.
            bed.report(1);
            bed.report(2);
            let mut fresh = Bed::new();
            fresh.svc(80, "mh").unwrap();
            for i in 1..4 {
                fresh.dest(80, dr(i)).unwrap();
            }
            fresh.run(cmd.clone()).unwrap();
            for port in [80, 81] {
                let has = bed.ipvs.service(&key(port)).is_some();
                assert_eq!(bed.plane.service_index(&key(port)).is_some(), has);
                if has {
                    assert!(bed.data(port) == expected(&bed, port), "{cmd:?} at {n}");
                }
            }
            assert_eq!(
                bed.plane.maps().config.tcp_timeouts,
                fresh.plane.maps().config.tcp_timeouts
            );
            n += 1;
        }
        assert!(failed > 0, "{cmd:?} never failed");
    }
}

#[test]
fn what_xdp_cannot_do_is_refused_clearly() {
    let mut bed = Bed::new();
    let fw = ServiceKey::Fwmark {
        mark: 7,
        af: AddrFamily::Inet,
    };
    let e = bed
        .run(Command::AddService {
            key: fw,
            config: ServiceConfig::new(AddrFamily::Inet),
        })
        .unwrap_err();
    assert!(e.to_string().contains("firewall marks"), "{e}");
    // Later commands about it are not errors again.
    bed.run(Command::AddDest {
        service: fw,
        dest: dr(1),
    })
    .unwrap();
    // Every scheduler of the core runs in the program.
    for (port, sched) in [(82, "twos"), (83, "lblc"), (84, "lblcr")] {
        bed.svc(port, sched).unwrap();
    }
    bed.svc(81, "rr").unwrap();
    let e = bed
        .dest(81, DestConfig::new(rs(1), 80).forward(ForwardMethod::Local))
        .unwrap_err();
    assert!(e.to_string().contains("Local"), "{e}");
    assert!(bed.plane.maps().dests.is_empty());
    assert_eq!(bed.plane.maps().services.len(), 4);
}

#[test]
fn unresolved_real_servers_wait_out_of_the_tables() {
    let mut bed = Bed::new();
    bed.table().table.remove(&rs(1));
    bed.svc(80, "rr").unwrap();
    bed.dest(80, dr(1)).unwrap();
    bed.dest(80, dr(2)).unwrap();
    let (a, b) = (bed.index(80, 1), bed.index(80, 2));
    assert_eq!(bed.data(80).0, vec![b], "only the resolved one");
    assert!(bed.table().solicited.contains(&rs(1)));
    assert!(bed.plane.wanted().unresolved.contains(&rs(1)));
    bed.report(1);
    assert_eq!(bed.data(80).0, vec![b], "still unresolved");
    bed.table().table.insert(rs(1), l2(1));
    bed.report(2);
    assert_eq!(bed.data(80).0, vec![b, a]);
    assert_eq!(bed.plane.maps().dests[&a].mac, l2(1).mac);
}

#[test]
fn real_servers_that_do_not_answer_hold_up_nothing() {
    // The plane never waits for a neighbour: a hundred real servers that
    // never answer are wanted from the resolver and stay out of the
    // tables; the commands after them apply as usual.
    let mut plane = Plane::new(MemMaps::new(1 << 16)).unwrap();
    let apply = |p: &mut MemPlane, c: Command| p.apply_command(&c).unwrap();
    apply(
        &mut plane,
        Command::AddService {
            key: key(80),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Rr),
        },
    );
    for i in 100..200 {
        apply(
            &mut plane,
            Command::AddDest {
                service: key(80),
                dest: dr(i),
            },
        );
    }
    apply(
        &mut plane,
        Command::SetTimeouts {
            tcp: 1,
            tcpfin: 1,
            udp: 1,
        },
    );
    let w = plane.wanted();
    assert_eq!(w.unresolved.len(), 100);
    assert!(w.nat.is_empty() && w.in_use.is_empty());
    let i = plane.service_index(&key(80)).unwrap();
    assert_eq!(plane.maps().svc_data(i).0, Vec::<u32>::new());
    assert_eq!(plane.maps().config.tcp_timeouts[1], 1);
    // One answers: it alone is scheduled.
    plane.on_neighbour(rs(150), l2(150));
    let d = plane.dest_index(&key(80), rs(150), 80).unwrap();
    assert_eq!(plane.maps().svc_data(i).0, vec![d]);
    assert_eq!(plane.maps().dests[&d].mac, l2(150).mac);
    let w = plane.wanted();
    assert_eq!(w.unresolved.len(), 99);
    assert_eq!(w.in_use.get(&rs(150)), Some(&l2(150)));
}

#[test]
fn a_changed_mac_is_followed() {
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.dest(80, dr(1)).unwrap();
    let i = bed.index(80, 1);
    let mut moved = l2(1);
    moved.mac = [2, 9, 9, 9, 9, 9];
    bed.table().table.insert(rs(1), moved);
    bed.report(1);
    assert_eq!(bed.plane.maps().dests[&i].mac, l2(1).mac, "not yet");
    // Next hops in use are looked up again every second.
    bed.report(2);
    assert_eq!(bed.plane.maps().dests[&i].mac, moved.mac);
    assert_eq!(bed.plane.wanted().in_use.get(&rs(1)), Some(&moved));
}

#[test]
fn config_carries_timeouts_and_tunnel_sources() {
    let mut bed = Bed::new();
    bed.run(Command::SetTimeouts {
        tcp: 30,
        tcpfin: 5,
        udp: 9,
    })
    .unwrap();
    let c = bed.plane.maps().config;
    assert_eq!(c.tcp_timeouts[TcpState::Established as usize], 30);
    assert_eq!(c.tcp_timeouts[TcpState::FinWait as usize], 5);
    assert_eq!(c.udp_timeout, 9);
    // Timeouts set on the director directly (keepalived.conf) follow at
    // the next report.
    bed.ipvs.set_timeouts(40, 0, 0);
    bed.report(1);
    assert_eq!(
        bed.plane.maps().config.tcp_timeouts[TcpState::Established as usize],
        40
    );
    bed.svc(80, "rr").unwrap();
    let tun = ForwardMethod::Tunnel(Tunnel {
        kind: TunnelType::Gue,
        port: 6080,
        ..Tunnel::default()
    });
    bed.dest(80, DestConfig::new(rs(3), 80).forward(tun))
        .unwrap();
    assert_eq!(
        bed.plane.maps().config.tun_src4,
        [10, 0, 0, 2],
        "route's source"
    );
    let i3 = bed.index(80, 3);
    let d = bed.plane.maps().dests[&i3];
    assert_eq!(
        (d.method, d.gue_port),
        (maps::fwd::TUN_GUE, 6080u16.to_be())
    );
    bed.plane
        .set_tunnel_sources(Some(Ipv4Addr::new(192, 0, 2, 1)), None)
        .unwrap();
    assert_eq!(bed.plane.maps().config.tun_src4, [192, 0, 2, 1]);
    assert_eq!(bed.plane.maps().config.tun_vary4, 0);
    // A prefix: masked, its host bits varied per flow by the program.
    bed.plane
        .set_tunnel_source_prefixes(Some((Ipv4Addr::new(192, 0, 2, 77), 24)), None)
        .unwrap();
    let c = bed.plane.maps().config;
    assert_eq!((c.tun_src4, c.tun_vary4), ([192, 0, 2, 0], 8));
    assert_eq!(c.tun_vary6, 0);
    let v6: std::net::Ipv6Addr = "fd00::1:2:3".parse().unwrap();
    bed.plane
        .set_tunnel_source_prefixes(None, Some((v6, 112)))
        .unwrap();
    let c = bed.plane.maps().config;
    assert_eq!(
        (c.tun_src6, c.tun_vary6),
        (
            "fd00::1:2:0"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
            16
        )
    );
    // Too wide to vary within the hash's bits: refused.
    for e in [
        bed.plane
            .set_tunnel_source_prefixes(Some((Ipv4Addr::new(10, 0, 0, 0), 8)), None),
        bed.plane.set_tunnel_source_prefixes(None, Some((v6, 64))),
    ] {
        assert!(e.unwrap_err().to_string().contains("must be"));
    }
}

#[test]
fn gre_and_geneve_tunnels_carry_the_checksum_flag_and_remcsum_is_refused() {
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    let tun = |kind, csum| {
        ForwardMethod::Tunnel(Tunnel {
            kind,
            port: 0,
            csum,
        })
    };
    bed.dest(
        80,
        DestConfig::new(rs(3), 80).forward(tun(TunnelType::Gre, TunnelCsum::Csum)),
    )
    .unwrap();
    bed.dest(
        80,
        DestConfig::new(rs(4), 80).forward(tun(TunnelType::Geneve, TunnelCsum::NoCsum)),
    )
    .unwrap();
    let (i3, i4) = (bed.index(80, 3), bed.index(80, 4));
    let d3 = bed.plane.maps().dests[&i3];
    let d4 = bed.plane.maps().dests[&i4];
    assert_eq!(
        (d3.method, d3.flags & maps::dest_flags::TUN_CSUM),
        (maps::fwd::TUN_GRE, maps::dest_flags::TUN_CSUM)
    );
    assert_eq!(
        (d4.method, d4.flags & maps::dest_flags::TUN_CSUM),
        (maps::fwd::TUN_GENEVE, 0)
    );
    // Remote checksum offload needs the sender's checksum-offload state,
    // which XDP does not have: refused with the reason, nothing changes.
    let before = bed.plane.maps().dests.len();
    let e = bed
        .dest(
            80,
            DestConfig::new(rs(5), 80).forward(ForwardMethod::Tunnel(Tunnel {
                kind: TunnelType::Gue,
                port: 6080,
                csum: TunnelCsum::RemCsum,
            })),
        )
        .unwrap_err();
    assert!(e.to_string().contains("--tun-remcsum"), "{e}");
    assert_eq!(bed.plane.maps().dests.len(), before);
}

/// The flow-walk tests' bed: service 80 scheduled by `sched` with DR real
/// servers 1 and 2 (their indexes `a` and `b`), walked two flows per
/// report; `flow(dest)` is an established flow to `dest` seen now, `vip`
/// the service's address.
struct WalkBed<F> {
    bed: Bed,
    a: u32,
    b: u32,
    flow: F,
    vip: IpAddr,
}

fn walk_bed(sched: &str) -> WalkBed<impl Fn(u32) -> Flow> {
    let mut bed = Bed::new();
    bed.plane.set_mirror_page(2);
    bed.svc(80, sched).unwrap();
    bed.dest(80, dr(1)).unwrap();
    bed.dest(80, dr(2)).unwrap();
    let (a, b) = (bed.index(80, 1), bed.index(80, 2));
    let now = bed.plane.maps().jiffies;
    let flow = move |dest: u32| Flow {
        last_seen: now,
        dest,
        state: TcpState::Established as u8,
        ..Flow::default()
    };
    let vip = "10.0.0.100".parse().unwrap();
    WalkBed {
        bed,
        a,
        b,
        flow,
        vip,
    }
}

#[test]
fn a_large_flow_table_is_walked_a_page_per_report() {
    let WalkBed {
        mut bed,
        a,
        b,
        flow,
        vip,
    } = walk_bed("rr");
    // Five flows: three pages of at most two.
    for (i, d) in [a, a, a, b, b].into_iter().enumerate() {
        bed.plane
            .maps()
            .flows
            .insert(FlowKey::new(6, rs(201 + i as u8), 1000, vip, 80), flow(d));
    }
    let active = |bed: &Bed| {
        let s = bed.ipvs.service(&key(80)).unwrap();
        let n = |x: u8| {
            s.dests()
                .iter()
                .find(|d| d.config.addr == rs(x))
                .unwrap()
                .active
        };
        (n(1), n(2))
    };
    bed.report(1);
    assert_eq!(bed.ipvs.conns().len(), 2, "one page");
    let set = |bed: &mut Bed, i: u32| bed.plane.maps().dest_conns.get(&i).map_or(0, |c| c.active);
    assert_eq!(set(&mut bed, a), 0, "not before the walk ends");
    bed.report(2);
    assert_eq!(bed.ipvs.conns().len(), 4);
    bed.report(3);
    assert_eq!(bed.ipvs.conns().len(), 5);
    assert_eq!(active(&bed), (3, 2));
    assert_eq!(set(&mut bed, a), 3, "set when the walk ends");
    assert_eq!(set(&mut bed, b), 2);
    // Flows gone from the table leave the view when the next walk ends,
    // not before; the entries still there stay throughout.
    bed.plane.maps().flows.retain(|_, f| f.dest != b);
    bed.report(4);
    assert_eq!(bed.ipvs.conns().len(), 5, "walk not complete yet");
    bed.report(5);
    assert_eq!(bed.ipvs.conns().len(), 3);
    assert_eq!(active(&bed), (3, 0));
    assert_eq!(bed.plane.maps().dest_conns[&b].active, 0);
    // A deleted real server's index comes back only after a whole walk
    // that began two reports after the deletion (generation 5) met no
    // flow using it: the walk of reports 6-7 began too early, the one
    // of reports 8-9 frees it.
    bed.run(Command::DelDest {
        service: key(80),
        addr: rs(2),
        port: 80,
    })
    .unwrap();
    for t in 6..=8 {
        bed.report(t);
        assert_eq!(
            bed.plane.dest_index(&key(80), rs(2), 80),
            Some(b),
            "report {t}"
        );
    }
    bed.report(9);
    assert_eq!(bed.plane.dest_index(&key(80), rs(2), 80), None);
    assert_eq!(bed.plane.maps().dests[&b], Dest::default());
}

/// `dest_conns` is the program's count, corrected by a completed flow walk
/// only where the program left it unchanged while the walk ran (issue 29):
/// a flow made during the walk that the walk missed stays counted, a count
/// the program did not touch is set to the live flows', and a real server
/// added during the walk keeps the program's count.
#[test]
fn a_walk_keeps_what_the_program_counted_while_it_ran() {
    let WalkBed {
        mut bed,
        a,
        b,
        flow,
        vip,
    } = walk_bed("wlc");
    let fk = |i: u8| FlowKey::new(6, rs(i), 1000, vip, 80);
    let active = |n: u32| DestConns {
        active: n,
        inactive: 0,
    };
    // What the program made and counted: two flows on b (the walk's
    // first page), two on a (its second).
    let m = bed.plane.maps();
    for (i, d) in [(210, b), (211, b), (212, a), (213, a)] {
        m.flows.insert(fk(i), flow(d));
    }
    m.dest_conns.insert(a, active(2));
    m.dest_conns.insert(b, active(2));
    bed.report(1);
    assert!(bed.plane.flow_walk.start.is_some(), "the walk goes on");
    // Meanwhile the LRU evicts b's two flows (the program does not
    // subtract them); the program makes a flow to a, and a real server c
    // is added and given one, both where the walk has passed (keys that
    // sort first; two in, two out: the second page is still 212-213).
    let m = bed.plane.maps();
    m.flows.remove(&fk(210));
    m.flows.remove(&fk(211));
    m.flows.insert(fk(200), flow(a));
    m.dest_conns.insert(a, active(3));
    bed.dest(80, dr(3)).unwrap();
    let c = bed.index(80, 3);
    let m = bed.plane.maps();
    assert_eq!(m.dest_conns[&c], active(0), "a fresh index starts at zero");
    m.flows.insert(fk(201), flow(c));
    m.dest_conns.insert(c, active(1));
    bed.report(2);
    assert!(bed.plane.flow_walk.start.is_none(), "the walk ended");
    let conns = |bed: &mut Bed, i: u32| bed.plane.maps().dest_conns[&i];
    // The walk counted two on a: the program's three stay.
    assert_eq!(conns(&mut bed, a), active(3), "a flow the walk missed");
    // c was not in use when the walk began: the program's count stays.
    assert_eq!(conns(&mut bed, c), active(1), "a server added meanwhile");
    // b unchanged: the walk's count (it met both flows before they went).
    assert_eq!(conns(&mut bed, b), active(2));
    // The next walk, with the program quiet: every count is the flows'.
    bed.report(3);
    bed.report(4);
    assert!(bed.plane.flow_walk.start.is_none(), "the walk ended");
    assert_eq!(conns(&mut bed, a), active(3));
    assert_eq!(conns(&mut bed, b), active(0), "the evictions corrected");
    assert_eq!(conns(&mut bed, c), active(1));
}

/// A flow walk reads `dest_conns` in one batched read when it begins and
/// one before its corrections, not one read per real server each time, and
/// writes only the counts that differ from the program's (issue 29).
#[test]
fn a_walk_reads_the_counts_in_batches_and_writes_only_changes() {
    let WalkBed {
        mut bed,
        a,
        b,
        flow,
        vip,
    } = walk_bed("wlc");
    bed.dest(80, dr(3)).unwrap();
    let c = bed.index(80, 3);
    let fk = |i: u8| FlowKey::new(6, rs(i), 1000, vip, 80);
    let active = |n: u32| DestConns {
        active: n,
        inactive: 0,
    };
    // Three flows (two pages): a's two counted right, b's one counted as
    // four (evictions the program never subtracted), c with none and
    // none counted.
    let m = bed.plane.maps();
    for (i, d) in [(210, a), (211, a), (212, b)] {
        m.flows.insert(fk(i), flow(d));
    }
    m.dest_conns.insert(a, active(2));
    m.dest_conns.insert(b, active(4));
    m.conns_reads = 0;
    m.conns_writes = 0;
    bed.report(1);
    assert!(bed.plane.flow_walk.start.is_some(), "the walk goes on");
    bed.report(2);
    assert!(bed.plane.flow_walk.start.is_none(), "the walk ended");
    let m = bed.plane.maps();
    assert_eq!(
        m.conns_reads, 2,
        "one read as the walk began, one at its end"
    );
    assert_eq!(m.conns_writes, 1, "b's count only");
    assert_eq!(m.dest_conns[&b], active(1));
    assert_eq!(m.dest_conns[&a], active(2));
    assert_eq!(m.dest_conns[&c], active(0));
    // A quiet walk: two reads, no write.
    bed.report(3);
    bed.report(4);
    assert!(bed.plane.flow_walk.start.is_none(), "the walk ended");
    let m = bed.plane.maps();
    assert_eq!((m.conns_reads, m.conns_writes), (4, 1));
}

/// A write that keeps failing (not for want of room) has the reports
/// retry that service, and only it: the other services are not compared
/// with the model again at every report (issue 29).
#[test]
fn a_write_that_keeps_failing_is_retried_for_its_service_only() {
    let mut bed = Bed::new();
    for port in 80..90 {
        bed.svc(port, "rr").unwrap();
        bed.dest(port, dr(1)).unwrap();
    }
    let i = bed.plane.service_index(&key(80)).unwrap();
    bed.plane.maps().fail_elem = Some(("svc_info", i));
    bed.dest(80, dr(2)).unwrap_err();
    let (diffed, replayed) = (bed.plane.diffed(), bed.plane.replayed());
    for t in 1..=3 {
        bed.report(t);
        assert_eq!(
            bed.plane.diffed() - diffed,
            t,
            "report {t}: the failing service alone compared"
        );
        assert_eq!(bed.plane.replayed() - replayed, t, "its AddDest again");
    }
    assert_eq!(bed.plane.dest_index(&key(80), rs(2), 80), None);
    // The write succeeds again: the next report brings the service to
    // the model, and the reports after it compare nothing.
    bed.plane.maps().fail_elem = None;
    bed.report(4);
    assert!(bed.plane.dest_index(&key(80), rs(2), 80).is_some());
    assert_eq!(expected(&bed, 80), bed.data(80));
    let diffed = bed.plane.diffed();
    bed.report(5);
    bed.report(6);
    assert_eq!(bed.plane.diffed(), diffed, "nothing left to compare");
}

#[test]
fn reports_mirror_flows_and_counters_into_the_director() {
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.dest(80, dr(1)).unwrap();
    bed.dest(80, dr(2)).unwrap();
    let a = bed.index(80, 1);
    let now = bed.plane.maps().jiffies;
    let vip: IpAddr = "10.0.0.100".parse().unwrap();
    let flow = |state: TcpState, age: u64| Flow {
        last_seen: now - age,
        dest: a,
        state: state as u8,
        flags: maps::FLOW_F_NOOUTPUT,
        ..Flow::default()
    };
    let m = bed.plane.maps();
    m.flows.insert(
        FlowKey::new(6, rs(201), 1000, vip, 80),
        flow(TcpState::Established, 0),
    );
    m.flows.insert(
        FlowKey::new(6, rs(202), 1000, vip, 80),
        flow(TcpState::FinWait, 250),
    );
    // Older than its state's timeout (SYN_RECV: 60 s at HZ 250).
    m.flows.insert(
        FlowKey::new(6, rs(203), 1000, vip, 80),
        flow(TcpState::SynRecv, 61 * 250),
    );
    m.dest_stats.insert(
        a,
        Stats {
            conns: 3,
            inpkts: 10,
            outpkts: 0,
            inbytes: 1000,
            outbytes: 0,
        },
    );
    bed.report(1);
    let d = |bed: &Bed| {
        let s = bed.ipvs.service(&key(80)).unwrap();
        let d = s.dests().iter().find(|d| d.config.addr == rs(1)).unwrap();
        (d.active, d.inactive, d.stats.conns, d.stats.inpkts)
    };
    assert_eq!(d(&bed), (1, 1, 3, 10));
    assert_eq!(bed.ipvs.conns().len(), 2);
    // The sweep: the expired entry is gone, the program's counters for
    // the least-connection schedulers say what the live flows say.
    assert_eq!(bed.plane.maps().flows.len(), 2);
    assert_eq!(
        bed.plane.maps().dest_conns[&a],
        DestConns {
            active: 1,
            inactive: 1
        }
    );
    let (id, c) = bed
        .ipvs
        .conns()
        .iter()
        .find(|(_, c)| c.state == TcpState::FinWait as u8)
        .unwrap();
    assert_eq!(c.daddr.to_ip(AddrFamily::Inet), rs(1));
    assert_eq!(
        bed.ipvs.conns().deadline(id),
        Some(Instant::from_secs(1 + 119)),
        "FIN_WAIT 120 s, 1 s idle"
    );
    // -Z zeroes the director's counters; growth is added afterwards.
    bed.run(Command::Zero { service: None }).unwrap();
    bed.plane.maps().dest_stats.get_mut(&a).unwrap().inpkts = 15;
    bed.report(2);
    assert_eq!(d(&bed), (1, 1, 0, 5));
    bed.plane.maps().flows.clear();
    bed.report(3);
    assert_eq!(d(&bed).0 + d(&bed).1, 0);
    assert_eq!(bed.ipvs.conns().len(), 0);
    bed.ipvs.audit().unwrap();
}

#[test]
fn connection_thresholds_flag_overload_from_the_mirrored_flows() {
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.dest(80, dr(1).thresholds(2, 1)).unwrap();
    let a = bed.index(80, 1);
    let now = bed.plane.maps().jiffies;
    let vip: IpAddr = "10.0.0.100".parse().unwrap();
    for c in 0..2u16 {
        bed.plane.maps().flows.insert(
            FlowKey::new(6, rs(200), 1000 + c, vip, 80),
            Flow {
                last_seen: now,
                dest: a,
                state: TcpState::Established as u8,
                ..Flow::default()
            },
        );
    }
    bed.report(1);
    let flags = |bed: &mut Bed| bed.plane.maps().dests[&a].flags;
    assert_eq!(
        flags(&mut bed),
        maps::dest_flags::OVERLOADED,
        "2 >= upper 2"
    );
    bed.plane.maps().flows.clear();
    bed.report(2);
    assert_eq!(flags(&mut bed), 0, "0 < lower 1");
    // Port-zero (any port) services are carried.
    let any = ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: rs(100),
        port: 0,
    };
    admit(&Command::AddService {
        key: any,
        config: ServiceConfig::new(AddrFamily::Inet).persistent(300),
    })
    .unwrap();
}

/// A persistent (300 s) rr service on port 80 with one DR real server:
/// (its index, the service's index).
fn persistent_service(bed: &mut Bed) -> (u32, u32) {
    bed.run(Command::AddService {
        key: key(80),
        config: ServiceConfig::new(AddrFamily::Inet)
            .scheduler(rvs_core::sched::Scheduler::Rr)
            .persistent(300),
    })
    .unwrap();
    bed.dest(80, dr(1)).unwrap();
    (bed.index(80, 1), bed.plane.service_index(&key(80)).unwrap())
}

#[test]
fn synced_connections_and_templates_are_loaded_for_the_same_real_server() {
    let mut bed = Bed::new();
    let (_, svc) = persistent_service(&mut bed);
    bed.dest(80, dr(2)).unwrap();
    let two = bed.index(80, 2);
    let id = bed
        .ipvs
        .service(&key(80))
        .unwrap()
        .dests()
        .iter()
        .find(|d| d.config.addr == rs(2))
        .unwrap()
        .id;
    let conn = MirroredConn {
        protocol: Protocol::Tcp,
        client: "192.0.2.7:4000".parse().unwrap(),
        vip: SocketAddr::new(rs(100), 80),
        dest: id,
        state: TcpState::Established as u8,
        output_seen: false,
        idle_left: Duration::from_secs(900),
        template: false,
        local: None,
    };
    bed.plane.load_synced_flow(&bed.ipvs, &conn).unwrap();
    let template = MirroredConn {
        client: "192.0.2.7:0".parse().unwrap(),
        template: true,
        state: 0,
        ..conn
    };
    bed.plane.load_synced_flow(&bed.ipvs, &template).unwrap();
    let jiffies = bed.plane.maps().jiffies;
    let flows: Vec<Flow> = bed.plane.maps().flows.values().copied().collect();
    assert_eq!(flows.len(), 1);
    assert_eq!((flows[0].dest, flows[0].svc), (two, svc));
    assert_eq!(flows[0].state, TcpState::Established as u8);
    assert_eq!(flows[0].flags, maps::FLOW_F_NOOUTPUT);
    assert_eq!(flows[0].last_seen, jiffies);
    let (k, t) = bed
        .plane
        .maps()
        .persist
        .iter()
        .next()
        .map(|(k, t)| (*k, *t))
        .unwrap();
    assert_eq!(k, pk(7));
    assert_eq!((t.dest, t.svc), (two, svc));
    // A real server this plane does not carry is skipped.
    let other = MirroredConn {
        dest: rvs_core::dest::DestId(9999),
        ..conn
    };
    bed.plane.load_synced_flow(&bed.ipvs, &other).unwrap();
    assert_eq!(bed.plane.maps().flows.len(), 1);
}

#[test]
fn synced_nat_connections_get_their_reply_entry_and_lose_it_with_the_flow() {
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    let masq = |i: u8, port: u16| DestConfig::new(rs(i), port).forward(ForwardMethod::Masq);
    bed.dest(80, masq(21, 8080)).unwrap();
    bed.dest(80, masq(22, 0)).unwrap();
    bed.dest(80, dr(11)).unwrap();
    let svc = bed.plane.service_index(&key(80)).unwrap();
    let id_of = |bed: &Bed, i: u8| {
        bed.ipvs
            .service(&key(80))
            .unwrap()
            .dests()
            .iter()
            .find(|d| d.config.addr == rs(i))
            .unwrap()
            .id
    };
    let conn = |dest, cport| MirroredConn {
        protocol: Protocol::Tcp,
        client: SocketAddr::new("192.0.2.7".parse().unwrap(), cport),
        vip: SocketAddr::new(rs(100), 80),
        dest,
        state: TcpState::Established as u8,
        output_seen: true,
        idle_left: Duration::from_secs(900),
        template: false,
        local: None,
    };
    let (a, b, c) = (id_of(&bed, 21), id_of(&bed, 22), id_of(&bed, 11));
    for (d, p) in [(a, 4000), (b, 4001), (c, 4002)] {
        bed.plane.load_synced_flow(&bed.ipvs, &conn(d, p)).unwrap();
    }
    assert_eq!(bed.plane.maps().flows.len(), 3);
    let nk = |i: u8, rport: u16, cport: u16| NatKey {
        raddr: maps::addr16(rs(i)),
        caddr: maps::addr16("192.0.2.7".parse().unwrap()),
        rport: rport.to_be(),
        cport: cport.to_be(),
        proto: maps::PROTO_TCP,
        family: maps::AF_INET,
        ..NatKey::default()
    };
    let nat = bed.plane.maps().nat_rev.clone();
    // The two NAT flows have their reply entries (port 0: the VIP's port,
    // as the program keys them); the DR flow has none.
    assert_eq!(nat.len(), 2, "{nat:?}");
    let e = nat[&nk(21, 8080, 4000)];
    assert_eq!(
        (e.vaddr, e.vport, e.svc, e.dest),
        (
            maps::addr16(rs(100)),
            80u16.to_be(),
            svc,
            bed.plane.dest_index(&key(80), rs(21), 8080).unwrap()
        )
    );
    assert_eq!(nat[&nk(22, 80, 4001)].vport, 80u16.to_be());
    // Expired flows go with their reply entries.
    let old = bed.plane.maps().jiffies;
    bed.plane.maps().jiffies = old + 100_000 * 250;
    bed.report(1);
    assert!(bed.plane.maps().flows.is_empty());
    assert!(bed.plane.maps().nat_rev.is_empty());
}

/// The template key of client network 192.0.2.`net` on the service.
fn pk(net: u8) -> PersistKey {
    PersistKey {
        caddr: maps::addr16(IpAddr::from([192, 0, 2, net])),
        vaddr: maps::addr16("10.0.0.100".parse().unwrap()),
        vport: 80u16.to_be(),
        proto: maps::PROTO_TCP,
        family: maps::AF_INET,
    }
}

#[test]
fn templates_are_walked_a_page_per_report_too() {
    let mut bed = Bed::new();
    bed.plane.set_mirror_page(1);
    let (a, si) = persistent_service(&mut bed);
    let now = bed.plane.maps().jiffies;
    for net in [1, 2, 3] {
        bed.plane.maps().persist.insert(
            pk(net),
            Persist {
                last_seen: now,
                dest: a,
                svc: si,
            },
        );
    }
    let persist = |bed: &Bed| bed.ipvs.service(&key(80)).unwrap().dests()[0].persist;
    bed.report(1);
    assert_eq!(persist(&bed), 1, "one page");
    bed.report(2);
    assert_eq!(persist(&bed), 2);
    bed.report(3);
    assert_eq!(persist(&bed), 3);
    // Gone from the map: gone from the view when a walk completes.
    bed.plane.maps().persist.remove(&pk(1));
    bed.report(4);
    assert_eq!(persist(&bed), 3, "walk not complete yet");
    bed.report(5);
    assert_eq!(persist(&bed), 2);
    assert_eq!(bed.ipvs.conns().len(), 2);
}

#[test]
fn persistence_templates_are_mirrored_and_pin_their_real_server() {
    let mut bed = Bed::new();
    let (a, si) = persistent_service(&mut bed);
    assert_eq!(
        bed.plane.maps().svc_info[&si].flags & maps::svc_flags::PERSISTENT,
        maps::svc_flags::PERSISTENT
    );
    let now = bed.plane.maps().jiffies;
    let m = bed.plane.maps();
    m.persist.insert(
        pk(0),
        Persist {
            last_seen: now - 250,
            dest: a,
            svc: si,
        },
    );
    m.persist.insert(
        pk(1),
        Persist {
            last_seen: now - 301 * 250,
            dest: a,
            svc: si,
        },
    );
    bed.report(1);
    let persist = |bed: &Bed| bed.ipvs.service(&key(80)).unwrap().dests()[0].persist;
    assert_eq!(persist(&bed), 1, "the live template");
    assert!(
        !bed.plane.maps().persist.contains_key(&pk(1)),
        "expired one swept"
    );
    let (id, c) = bed.ipvs.conns().iter().next().unwrap();
    assert!(c.is_template());
    assert_eq!(
        bed.ipvs.conns().deadline(id),
        Some(Instant::from_secs(1 + 299))
    );
    // Deleted, the real server's index stays while the template lives.
    bed.run(Command::DelDest {
        service: key(80),
        addr: rs(1),
        port: 80,
    })
    .unwrap();
    for t in 2..6 {
        bed.report(t);
    }
    assert_eq!(bed.plane.dest_index(&key(80), rs(1), 80), Some(a));
    bed.plane.maps().persist.clear();
    bed.report(6);
    assert_eq!(bed.plane.dest_index(&key(80), rs(1), 80), None);
    bed.ipvs.audit().unwrap();
}

#[test]
fn slot_allocator_coalesces() {
    let mut s = SlotAlloc::new(100);
    let a = s.alloc(30).unwrap();
    let b = s.alloc(30).unwrap();
    let c = s.alloc(40).unwrap();
    assert!(s.alloc(1).is_none());
    s.release(b);
    s.release(a);
    assert_eq!(s.alloc(60), Some(Region { off: 0, len: 60 }));
    s.release(c);
    assert_eq!(s.free_total(), 40);
}

#[test]
fn the_own_mac_table_follows_the_attached_interfaces() {
    use crate::own_mac::OwnMacs;
    const LINK: u32 = 3;
    const IF_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];
    // A VRRP use_vmac macvlan's virtual MAC (VRID 7).
    const VMAC: [u8; 6] = [0, 0, 0x5e, 0, 1, 7];
    let mut bed = Bed::new();
    let mut own = OwnMacs::default();
    own.add(LINK, IF_MAC).unwrap();
    bed.plane.set_links(vec![LINK], own.clone());
    assert_eq!(bed.plane.wanted().links.get(&LINK), Some(&vec![IF_MAC]));
    // The kernel says the interface also receives the macvlan's frames: the
    // resolver tells the plane, the table follows.
    bed.table().owned.insert(LINK, vec![VMAC, IF_MAC]);
    bed.settle();
    let want = |macs: &[[u8; 6]]| {
        let mut o = OwnMacs::default();
        for m in macs {
            o.add(LINK, *m).unwrap();
        }
        o
    };
    assert_eq!(bed.plane.maps().own_macs, want(&[IF_MAC, VMAC]));
    let mut both = vec![IF_MAC, VMAC];
    both.sort_unstable();
    assert_eq!(bed.plane.wanted().links.get(&LINK), Some(&both));
    // Asked again a second later: no change, no write.
    let writes = bed.plane.maps().writes;
    bed.now += super::resolver::REFRESH;
    bed.settle();
    assert_eq!(bed.plane.maps().writes, writes);
    // The macvlan goes (the VRRP instance stopped): so does its MAC.
    bed.table().owned.insert(LINK, vec![IF_MAC]);
    bed.now += super::resolver::REFRESH;
    bed.settle();
    assert_eq!(bed.plane.maps().own_macs, want(&[IF_MAC]));
    // A failed write leaves the table as it was; the answer comes again.
    bed.table().owned.insert(LINK, vec![IF_MAC, VMAC]);
    bed.plane.maps().fail_at = Some(bed.plane.maps().writes);
    bed.now += super::resolver::REFRESH;
    bed.settle();
    assert_eq!(bed.plane.maps().own_macs, want(&[IF_MAC]));
    assert_eq!(bed.plane.wanted().links.get(&LINK), Some(&vec![IF_MAC]));
    bed.now += super::resolver::REFRESH;
    bed.settle();
    assert_eq!(bed.plane.maps().own_macs, want(&[IF_MAC, VMAC]));
    // An interface the program is not attached to is not the director's.
    bed.plane.on_owned_macs(LINK + 1, vec![VMAC]);
    assert_eq!(bed.plane.maps().own_macs, want(&[IF_MAC, VMAC]));
}

/// A plane adopting the maps another plane filled (a restarted rvsd over
/// pinned maps): services and real servers keep their indexes whatever
/// order the configuration comes in, nothing a flow depends on is reset
/// or rewritten before the configuration claims it, counters continue,
/// flows are mirrored again, and what the configuration no longer has is
/// removed once it had its chance.
#[test]
fn an_adopting_plane_keeps_indexes_flows_and_counters() {
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    for i in 1..=3 {
        bed.dest(80, dr(i)).unwrap();
    }
    bed.svc(81, "mh").unwrap();
    bed.dest(81, dr(4)).unwrap();
    bed.dest(81, dr(5)).unwrap();
    bed.svc(82, "wlc").unwrap();
    bed.dest(82, dr(6)).unwrap();
    bed.report(1);
    let (s80, s81, s82) = (
        bed.plane.service_index(&key(80)).unwrap(),
        bed.plane.service_index(&key(81)).unwrap(),
        bed.plane.service_index(&key(82)).unwrap(),
    );
    let (d2, d3, d5) = (bed.index(80, 2), bed.index(80, 3), bed.index(81, 5));
    let vip: IpAddr = "10.0.0.100".parse().unwrap();
    let now = bed.plane.maps().jiffies;
    let flow = |dest, svc| Flow {
        last_seen: now,
        dest,
        svc,
        state: TcpState::Established as u8,
        flags: maps::FLOW_F_NOOUTPUT,
        ..Flow::default()
    };
    {
        let m = bed.plane.maps();
        m.flows
            .insert(FlowKey::new(6, rs(201), 1000, vip, 80), flow(d2, s80));
        m.flows
            .insert(FlowKey::new(6, rs(202), 1000, vip, 80), flow(d3, s80));
        m.flows
            .insert(FlowKey::new(6, rs(203), 1000, vip, 81), flow(d5, s81));
        m.cursors.insert(s80, 7);
        m.dest_stats.insert(
            d2,
            Stats {
                conns: 40,
                inpkts: 400,
                ..Stats::default()
            },
        );
    }
    bed.run(Command::DelDest {
        service: key(80),
        addr: rs(3),
        port: 80,
    })
    .unwrap();
    for t in 2..=4 {
        bed.report(t);
    }
    assert_eq!(bed.index(80, 3), d3, "draining: its flow holds the index");
    let (data80, data81) = (bed.data(80), bed.data(81));
    // rvsd restarts: a new plane over the same maps, a new director.
    let maps = bed.plane.maps().clone();
    let mut b = Bed::new();
    b.plane = Plane::adopt(maps.clone()).unwrap();
    assert!(b.plane.adopting());
    {
        let m = b.plane.maps();
        assert_eq!(m.writes, maps.writes, "adopting writes nothing");
        assert_eq!(m.svc_info, maps.svc_info);
    }
    // The configuration, in another order, without service 82.
    b.svc(81, "mh").unwrap();
    b.dest(81, dr(4)).unwrap();
    b.dest(81, dr(5)).unwrap();
    b.svc(80, "rr").unwrap();
    b.dest(80, dr(1)).unwrap();
    assert_eq!(b.data(80), data80, "the old data serves until all are back");
    b.dest(80, dr(2)).unwrap();
    assert_eq!(b.plane.service_index(&key(80)), Some(s80));
    assert_eq!(b.plane.service_index(&key(81)), Some(s81));
    assert_eq!(b.index(80, 2), d2);
    assert_eq!(b.index(81, 5), d5);
    assert_eq!(b.data(80), data80, "same list, same table");
    assert_eq!(b.data(81), data81);
    assert_eq!(b.plane.maps().cursors.get(&s80), Some(&7), "rr cursor kept");
    let el = b.plane.maps().dests[&d2];
    assert_eq!(el.mac, l2(2).mac, "next hop kept: ready at once");
    // A new real server does not take an index a flow still uses (d3:
    // deleted before the restart, its flow still draining).
    b.dest(80, dr(7)).unwrap();
    assert_ne!(b.index(80, 7), d3);
    assert_ne!(b.index(80, 7), s82);
    b.report(1);
    // Counters continue from the program's, flows are listed again.
    let s = b.ipvs.service(&key(80)).unwrap();
    let d = s.dests().iter().find(|d| d.config.addr == rs(2)).unwrap();
    assert_eq!((d.stats.conns, d.stats.inpkts), (40, 400));
    assert_eq!(b.ipvs.conns().len(), 2, "the flows of live real servers");
    // Service 82 is not in the configuration: removed once settled.
    for t in 2..=5 {
        b.report(t);
    }
    assert!(!b.plane.adopting());
    let skey = svc_key(&key(82)).unwrap();
    assert!(!b.plane.maps().services.contains_key(&skey), "82 removed");
    assert!(
        b.plane
            .maps()
            .services
            .contains_key(&svc_key(&key(80)).unwrap())
    );
    b.ipvs.audit().unwrap();
}

/// Issue 13: a next hop the program reports without a neighbour entry (a
/// NAT reply's client on a director that just took over) is solicited
/// until the kernel has it, then no longer wanted; one that never answers
/// is given up after REPLY_HOP_REPORTS reports.
#[test]
fn next_hops_the_program_misses_are_solicited_until_resolved() {
    let mut bed = Bed::new();
    let client = IpAddr::V4(Ipv4Addr::new(10, 0, 9, 1));
    let gone = IpAddr::V4(Ipv4Addr::new(10, 0, 9, 2));
    bed.plane.maps().missing_hops = vec![client, gone];
    assert!(bed.plane.take_missing_hops(), "the wanted set grew");
    assert!(bed.plane.maps().missing_hops.is_empty(), "drained");
    let w = bed.plane.wanted();
    assert_eq!(w.reply, [client, gone].into_iter().collect());
    assert!(!w.is_empty());
    bed.settle();
    assert!(bed.table().solicited.contains(&client));
    assert!(bed.table().solicited.contains(&gone));
    // The client answers: no longer wanted; `gone` is asked again.
    bed.table().table.insert(client, l2(9));
    bed.now += Duration::from_secs(2);
    bed.settle();
    assert_eq!(bed.plane.wanted().reply, [gone].into_iter().collect());
    let asked = |bed: &mut Bed| bed.table().solicited.iter().filter(|a| **a == gone).count();
    assert!(asked(&mut bed) >= 2, "re-solicited");
    // Reported again by the program meanwhile: wanted again for the whole
    // period; never answering, given up after it.
    for _ in 0..REPLY_HOP_REPORTS - 1 {
        bed.plane.age_missing_hops();
    }
    bed.plane.maps().missing_hops = vec![gone];
    assert!(!bed.plane.take_missing_hops(), "already wanted");
    for _ in 0..REPLY_HOP_REPORTS - 1 {
        bed.plane.age_missing_hops();
    }
    assert_eq!(bed.plane.wanted().reply, [gone].into_iter().collect());
    bed.plane.age_missing_hops();
    assert!(bed.plane.wanted().reply.is_empty(), "given up");
}

/// rvsd restarts over a FULLNAT director whose configuration no longer
/// has one of its services: once the adoption settles, that service's pool
/// is cleared from `fnat_pools` and its local addresses leave
/// `fnat_laddrs` (the program would hand packets to them to `xdp_fnat`,
/// and a later service at the index would find the old pool); the claimed
/// service's pool and addresses stay.
#[test]
fn an_unclaimed_fullnat_service_leaves_no_pool_behind() {
    use rvs_core::model::LocalAddrRange;
    let (kept, gone) = (
        LocalAddrRange::parse("10.9.0.1").unwrap(),
        LocalAddrRange::parse("10.9.0.7-8").unwrap(),
    );
    let mut bed = Bed::new();
    for (port, laddr, rs) in [(80, kept, 1), (81, gone, 2)] {
        bed.svc(port, "rr").unwrap();
        bed.run(Command::AddLaddr {
            service: key(port),
            laddr,
        })
        .unwrap();
        bed.dest(port, dr(rs).forward(ForwardMethod::FullNat))
            .unwrap();
    }
    let g = bed.plane.service_index(&key(81)).unwrap();
    assert_eq!(bed.plane.maps().fnat_laddrs.len(), 3);
    let maps = bed.plane.maps().clone();
    let mut b = Bed::new();
    b.plane = Plane::adopt(maps).unwrap();
    b.svc(80, "rr").unwrap();
    b.run(Command::AddLaddr {
        service: key(80),
        laddr: kept,
    })
    .unwrap();
    b.dest(80, dr(1).forward(ForwardMethod::FullNat)).unwrap();
    for t in 1..=5 {
        b.report(t);
    }
    assert!(!b.plane.adopting());
    let m = b.plane.maps();
    assert_eq!(m.fnat_pools.get(&g).map_or(0, |p| p.count), 0, "81's pool");
    let left: Vec<IpAddr> = m.fnat_laddrs.iter().copied().collect();
    assert_eq!(left, vec!["10.9.0.1".parse::<IpAddr>().unwrap()]);
}

/// rvsd restarts over a FULLNAT director: FULLNAT stays on in `config`
/// (the program hands replies to local addresses to `xdp_fnat`) from the
/// adoption until the configuration has given the pools back, whatever it
/// writes before (timeouts, the service without its pool yet); once the
/// adoption settles, the configuration decides.
#[test]
fn fullnat_stays_on_while_an_adopting_plane_waits_for_the_pools() {
    use rvs_core::model::LocalAddrRange;
    let fnat = |bed: &mut Bed| bed.plane.maps().config.flags & maps::CFG_F_FNAT != 0;
    let laddr = LocalAddrRange::parse("10.9.0.1-2").unwrap();
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.run(Command::AddLaddr {
        service: key(80),
        laddr,
    })
    .unwrap();
    bed.dest(80, dr(1).forward(ForwardMethod::FullNat)).unwrap();
    assert!(fnat(&mut bed));
    // rvsd restarts: a new plane over the same maps.
    let maps = bed.plane.maps().clone();
    let mut b = Bed::new();
    b.plane = Plane::adopt(maps).unwrap();
    assert!(fnat(&mut b), "as the maps had it");
    // A saved table's first command, then the service before its pool.
    b.run(Command::SetTimeouts {
        tcp: 900,
        tcpfin: 120,
        udp: 300,
    })
    .unwrap();
    assert!(fnat(&mut b), "kept across the timeouts' write");
    b.svc(80, "rr").unwrap();
    b.report(1);
    assert!(fnat(&mut b), "kept while the service has no pool yet");
    b.run(Command::AddLaddr {
        service: key(80),
        laddr,
    })
    .unwrap();
    b.dest(80, dr(1).forward(ForwardMethod::FullNat)).unwrap();
    for t in 2..=5 {
        b.report(t);
    }
    assert!(!b.plane.adopting());
    assert!(fnat(&mut b), "the configuration has the pool");
    // Settled, the configuration decides: without a pool, off.
    b.run(Command::DelLaddr {
        service: key(80),
        laddr,
    })
    .unwrap();
    assert!(!fnat(&mut b));
    // An adoption whose configuration never gives the pool back: off once
    // it settles.
    let maps = bed.plane.maps().clone();
    let mut c = Bed::new();
    c.plane = Plane::adopt(maps).unwrap();
    c.svc(80, "rr").unwrap();
    c.report(1);
    assert!(fnat(&mut c));
    for t in 2..=5 {
        c.report(t);
    }
    assert!(!c.plane.adopting());
    assert!(!fnat(&mut c), "off once the adoption settled");
}

#[test]
fn laddr_pools_are_written_and_fullnat_real_servers_accepted() {
    use rvs_core::model::LocalAddrRange;
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.svc(81, "rr").unwrap();
    let laddr = LocalAddrRange::parse("10.9.0.1-3").unwrap();
    let idx = bed.plane.services[&key(80)].index;
    bed.run(Command::AddLaddr {
        service: key(80),
        laddr,
    })
    .unwrap();
    assert_eq!(bed.plane.services[&key(80)].laddrs, [laddr]);
    let pool = bed.plane.maps().fnat_pools[&idx];
    assert_eq!((pool.count, pool.family), (3, maps::AF_INET));
    assert_eq!(pool.addrs[2], maps::addr16("10.9.0.3".parse().unwrap()));
    assert_eq!(
        (pool.port_min, pool.port_max),
        (maps::FNAT_PORT_MIN, maps::FNAT_PORT_MAX)
    );
    assert_eq!(bed.plane.maps().fnat_laddrs.len(), 3);
    assert_ne!(bed.plane.maps().config.flags & maps::CFG_F_FNAT, 0);
    // Another service sharing one address: removing it from one keeps it.
    let one = LocalAddrRange::parse("10.9.0.2").unwrap();
    bed.run(Command::AddLaddr {
        service: key(81),
        laddr: one,
    })
    .unwrap();
    // A FULLNAT real server is accepted and written with its method.
    bed.dest(80, dr(1).forward(ForwardMethod::FullNat)).unwrap();
    let d = bed.plane.services[&key(80)].dests[0].index;
    assert_eq!(bed.plane.maps().dests[&d].method, maps::fwd::FNAT);
    bed.run(Command::DelLaddr {
        service: key(80),
        laddr,
    })
    .unwrap();
    assert!(bed.plane.services[&key(80)].laddrs.is_empty());
    assert_eq!(bed.plane.maps().fnat_pools[&idx].count, 0);
    assert_eq!(
        bed.plane.maps().fnat_laddrs,
        ["10.9.0.2".parse().unwrap()].into_iter().collect()
    );
    bed.run(Command::DelService { key: key(81) }).unwrap();
    assert!(bed.plane.maps().fnat_laddrs.is_empty());
    assert_eq!(bed.plane.maps().config.flags & maps::CFG_F_FNAT, 0);
    assert!(matches!(
        bed.plane.apply_command(&Command::AddLaddr {
            service: key(82),
            laddr,
        }),
        Err(PlaneError::NoService(_))
    ));
}

#[test]
fn fullnat_pools_the_program_cannot_hold_are_refused_before_anything_changes() {
    use rvs_core::model::LocalAddrRange;
    // More addresses than one pool holds, in one range.
    let big = LocalAddrRange::parse("10.9.0.1-17").unwrap();
    let e = admit(&Command::AddLaddr {
        service: key(80),
        laddr: big,
    })
    .unwrap_err();
    assert!(e.to_string().contains("at most 16"), "{e}");
    // The other family than the service's.
    let v6 = LocalAddrRange::parse("fd00::1").unwrap();
    let e = admit(&Command::AddLaddr {
        service: key(80),
        laddr: v6,
    })
    .unwrap_err();
    assert!(e.to_string().contains("family"), "{e}");
    let e = admit(&Command::AddDest {
        service: key(80),
        dest: DestConfig::new("fd00::9".parse().unwrap(), 80).forward(ForwardMethod::FullNat),
    })
    .unwrap_err();
    assert!(e.to_string().contains("family"), "{e}");
    // Ranges that fit one by one but not together: refused by the batch
    // rule and, when applied anyway, with nothing written.
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    let a = LocalAddrRange::parse("10.9.0.1-10").unwrap();
    let b = LocalAddrRange::parse("10.9.1.1-10").unwrap();
    let cmds = [
        Command::AddLaddr {
            service: key(80),
            laddr: a,
        },
        Command::AddLaddr {
            service: key(80),
            laddr: b,
        },
    ];
    let (i, why) = check_pool_sizes(&bed.ipvs, &cmds).unwrap_err();
    assert_eq!(i, 1, "{why}");
    bed.run(cmds[0].clone()).unwrap();
    let before = bed.plane.maps().clone();
    let e = bed.plane.apply_command(&cmds[1]).unwrap_err();
    assert!(matches!(e, PlaneError::Refused(_)), "{e}");
    assert_eq!(bed.plane.services[&key(80)].laddrs, [a]);
    assert_eq!(bed.plane.maps().fnat_pools, before.fnat_pools);
    assert_eq!(bed.plane.maps().fnat_laddrs, before.fnat_laddrs);
}

/// A live FULLNAT flow is mirrored with its local address and port (what
/// `-Lcn` shows); once expired, its translation goes with it, so the pair
/// is free again.
#[test]
fn fullnat_flows_report_their_local_address_and_free_it_when_expired() {
    use rvs_core::model::LocalAddrRange;
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.run(Command::AddLaddr {
        service: key(80),
        laddr: LocalAddrRange::parse("10.9.0.1").unwrap(),
    })
    .unwrap();
    bed.dest(80, dr(1).forward(ForwardMethod::FullNat)).unwrap();
    let d = bed.index(80, 1);
    let now = bed.plane.maps().jiffies;
    let vip: IpAddr = "10.0.0.100".parse().unwrap();
    let client: IpAddr = "192.0.2.7".parse().unwrap();
    let fk = FlowKey::new(6, client, 4000, vip, 80);
    let rev = maps::FnatKey {
        raddr: maps::addr16(rs(1)),
        laddr: maps::addr16("10.9.0.1".parse().unwrap()),
        rport: 80u16.to_be(),
        lport: 31000u16.to_be(),
        proto: 6,
        family: maps::AF_INET,
        pad0: 0,
    };
    let m = bed.plane.maps();
    m.flows.insert(
        fk,
        Flow {
            last_seen: now,
            dest: d,
            state: TcpState::Established as u8,
            ..Flow::default()
        },
    );
    m.fnat_fwd.insert(fk, rev);
    m.fnat_rev.insert(rev, fnat_of_flow(&fk, d));
    bed.report(1);
    let (id, _) = bed.ipvs.conns().iter().next().expect("mirrored");
    let (addr, port) = bed.ipvs.conns().local(id).expect("local address reported");
    assert_eq!(
        (addr.to_ip(AddrFamily::Inet), port),
        ("10.9.0.1".parse().unwrap(), 31000)
    );
    bed.plane.maps().jiffies = now + 100_000 * 250;
    bed.report(2);
    assert!(bed.plane.maps().flows.is_empty());
    assert!(bed.plane.maps().fnat_fwd.is_empty());
    assert!(bed.plane.maps().fnat_rev.is_empty(), "the pair is free");
}

fn ukey(port: u16) -> ServiceKey {
    ServiceKey::Addr {
        protocol: Protocol::Udp,
        addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
        port,
    }
}

fn quic_config(specs: &[&str]) -> ServiceConfig {
    let mut c = ServiceConfig::new(AddrFamily::Inet).scheduler("rr".parse().unwrap());
    c.quic_lb = specs
        .iter()
        .map(|s| rvs_core::model::QuicLbConfig::parse_spec(s).unwrap())
        .collect();
    c
}

/// DR real server `i` with server ID `0a0i` (none for `None`).
fn quic_dest(i: u8, sid: Option<&str>) -> DestConfig {
    let mut d = dr(i);
    d.quic_server_id = sid.map(|s| s.parse().unwrap());
    d
}

fn sid_key(svc: u32, sid: &str) -> crate::quic_lb::QuicSidKey {
    let id: rvs_core::model::QuicServerId = sid.parse().unwrap();
    crate::quic_lb::QuicSidKey::new(svc, id.as_bytes()).unwrap()
}

const KEY1: &str = "8f95f09245765f80256934e50c66207f";
const KEY2: &str = "000102030405060708090a0b0c0d0e0f";

/// A QUIC-LB service: its key in `quic_services` (not `services`), its
/// configuration in `quic_lb`, every ready real server's server ID in
/// `quic_sids` — a quiesced one's too — and a deleted one's gone; its
/// counters reach the director from a baseline, so a service that reuses
/// an index starts at zero; deleting it leaves nothing behind.
#[test]
fn quic_lb_service_maps_are_written_and_follow_the_real_servers() {
    let mut bed = Bed::new();
    let k = ukey(443);
    let skey = svc_key(&k).unwrap();
    bed.run(Command::AddService {
        key: k,
        config: quic_config(&["cr=0,sid=2,nonce=6"]),
    })
    .unwrap();
    let idx = bed.plane.service_index(&k).unwrap();
    assert!(!bed.plane.maps().services.contains_key(&skey));
    assert_eq!(bed.plane.maps().quic_services.get(&skey), Some(&idx));
    let want = QuicSvc::new(&[(0, QuicCfg::new(2, 6, None))]);
    assert_eq!(bed.plane.maps().quic_lb.get(&idx), Some(&want));
    for i in 1..=3 {
        bed.run(Command::AddDest {
            service: k,
            dest: quic_dest(i, Some(&format!("0a0{i}"))),
        })
        .unwrap();
    }
    // A real server without a server ID takes fallback traffic only.
    bed.run(Command::AddDest {
        service: k,
        dest: quic_dest(4, None),
    })
    .unwrap();
    let dest = |bed: &Bed, i: u8| bed.plane.dest_index(&k, rs(i), 80).unwrap();
    let sids = |bed: &mut Bed| {
        let mut v: Vec<_> = bed.plane.maps().quic_sids.clone().into_iter().collect();
        v.sort_by_key(|(_, d)| *d);
        v
    };
    let mut all: Vec<_> = (1..=3)
        .map(|i| (sid_key(idx, &format!("0a0{i}")), dest(&bed, i)))
        .collect();
    all.sort_by_key(|(_, d)| *d);
    assert_eq!(sids(&mut bed), all);
    // Weight 0 drains: its QUIC connections stay (its ID stays).
    bed.run(Command::EditDest {
        service: k,
        dest: quic_dest(2, Some("0a02")).weight(0),
    })
    .unwrap();
    assert_eq!(sids(&mut bed), all);
    // Deleted: its ID goes (its datagrams take the fallback hash).
    bed.run(Command::DelDest {
        service: k,
        addr: rs(3),
        port: 80,
    })
    .unwrap();
    let three = sid_key(idx, "0a03");
    all.retain(|(s, _)| *s != three);
    assert_eq!(sids(&mut bed), all);
    // A changed server ID replaces the old one.
    bed.run(Command::EditDest {
        service: k,
        dest: quic_dest(1, Some("0b01")),
    })
    .unwrap();
    assert!(
        !bed.plane
            .maps()
            .quic_sids
            .contains_key(&sid_key(idx, "0a01"))
    );
    let one = dest(&bed, 1);
    assert_eq!(
        bed.plane.maps().quic_sids.get(&sid_key(idx, "0b01")),
        Some(&one)
    );

    // Counters: the growth reaches the director.
    let stats = |c, f, u| crate::quic_lb::QuicStats {
        by_cid: c,
        by_fallback: f,
        undecodable: u,
    };
    bed.plane.maps().quic_stats.insert(idx, stats(5, 2, 1));
    bed.report(1);
    let got = |bed: &Bed, k: &ServiceKey| *bed.ipvs.service(k).unwrap().quic_lb_counters();
    let counters = |c, f, u| rvs_core::stats::QuicLbCounters {
        by_cid: c,
        by_fallback: f,
        undecodable: u,
    };
    assert_eq!(got(&bed, &k), counters(5, 2, 1));
    bed.plane.maps().quic_stats.insert(idx, stats(9, 2, 1));
    bed.report(2);
    assert_eq!(got(&bed, &k), counters(9, 2, 1));

    // Deleted: nothing of it stays in the QUIC maps.
    bed.run(Command::DelService { key: k }).unwrap();
    let m = bed.plane.maps();
    assert!(m.quic_services.is_empty() && m.quic_lb.is_empty() && m.quic_sids.is_empty());
    // A new QUIC-LB service at the same index (after the grace period)
    // does not inherit the old counts.
    bed.report(3);
    bed.report(4);
    bed.run(Command::AddService {
        key: ukey(444),
        config: quic_config(&["cr=0,sid=2,nonce=6"]),
    })
    .unwrap();
    assert_eq!(
        bed.plane.service_index(&ukey(444)),
        Some(idx),
        "index reused"
    );
    bed.report(5);
    assert_eq!(got(&bed, &ukey(444)), counters(0, 0, 0));
    bed.plane.maps().quic_stats.insert(idx, stats(12, 3, 1));
    bed.report(6);
    assert_eq!(got(&bed, &ukey(444)), counters(3, 1, 0));
}

/// rvsd restarts over pinned maps with QUIC-LB services: the new plane
/// adopts them (the running program goes on routing by their keys,
/// configurations and server IDs, which adopting does not write); the
/// configuration's service and real servers claim the same index and leave
/// the maps as they were; the counters continue from what the program
/// counted; a QUIC-LB service the configuration no longer has goes at the
/// settling, with its configurations and server IDs.
#[test]
fn an_adopting_plane_keeps_quic_lb_services() {
    let mut bed = Bed::new();
    let (k, gone) = (ukey(443), ukey(444));
    let cfg = quic_config(&["cr=0,sid=2,nonce=6"]);
    for key in [k, gone] {
        bed.run(Command::AddService {
            key,
            config: cfg.clone(),
        })
        .unwrap();
    }
    for i in 1..=2 {
        bed.run(Command::AddDest {
            service: k,
            dest: quic_dest(i, Some(&format!("0a0{i}"))),
        })
        .unwrap();
    }
    bed.run(Command::AddDest {
        service: gone,
        dest: quic_dest(3, Some("0a03")),
    })
    .unwrap();
    bed.report(1);
    let (idx, gidx) = (
        bed.plane.service_index(&k).unwrap(),
        bed.plane.service_index(&gone).unwrap(),
    );
    let counted = crate::quic_lb::QuicStats {
        by_cid: 5,
        by_fallback: 2,
        undecodable: 1,
    };
    bed.plane.maps().quic_stats.insert(idx, counted);
    // rvsd restarts: a new plane over the same maps, a new director.
    let before = bed.plane.maps().clone();
    assert_eq!(before.quic_sids.len(), 3);
    let mut b = Bed::new();
    b.plane = Plane::adopt(before.clone()).unwrap();
    assert!(b.plane.adopting());
    assert_eq!(
        b.plane.maps().writes,
        before.writes,
        "adopting writes nothing"
    );
    // The configuration, without service 444.
    b.run(Command::AddService {
        key: k,
        config: cfg.clone(),
    })
    .unwrap();
    assert_eq!(b.plane.service_index(&k), Some(idx), "its index");
    for i in 1..=2 {
        b.run(Command::AddDest {
            service: k,
            dest: quic_dest(i, Some(&format!("0a0{i}"))),
        })
        .unwrap();
    }
    {
        let m = b.plane.maps();
        assert_eq!(m.quic_services, before.quic_services);
        assert_eq!(m.quic_lb, before.quic_lb);
        assert_eq!(
            m.quic_sids, before.quic_sids,
            "the same server IDs, same dests"
        );
    }
    for t in 2..=6 {
        b.report(t);
    }
    assert!(!b.plane.adopting());
    let m = b.plane.maps();
    assert_eq!(m.quic_services.len(), 1, "444 went at the settling");
    assert!(!m.quic_services.contains_key(&svc_key(&gone).unwrap()));
    assert!(!m.quic_lb.contains_key(&gidx));
    assert_eq!(m.quic_sids.len(), 2);
    assert!(m.quic_sids.keys().all(|s| s.svc == idx));
    assert_eq!(
        *b.ipvs.service(&k).unwrap().quic_lb_counters(),
        rvs_core::stats::QuicLbCounters {
            by_cid: 5,
            by_fallback: 2,
            undecodable: 1,
        },
        "the counters continue"
    );
}

/// A connection another director synced for a QUIC-LB service makes no
/// flow entry: the flow table is looked up first and would override the
/// routing by connection ID.
#[test]
fn synced_connections_of_quic_lb_services_make_no_flow() {
    let mut bed = Bed::new();
    let k = ukey(443);
    bed.run(Command::AddService {
        key: k,
        config: quic_config(&["cr=0,sid=2,nonce=6"]),
    })
    .unwrap();
    bed.run(Command::AddDest {
        service: k,
        dest: quic_dest(1, Some("0a01")),
    })
    .unwrap();
    let id = bed.ipvs.service(&k).unwrap().dests()[0].id;
    let flow = MirroredConn {
        protocol: Protocol::Udp,
        client: "192.0.2.7:5000".parse().unwrap(),
        vip: "10.0.0.100:443".parse().unwrap(),
        dest: id,
        state: 0,
        output_seen: true,
        idle_left: Duration::from_secs(60),
        template: false,
        local: None,
    };
    bed.plane.load_synced_flow(&bed.ipvs, &flow).unwrap();
    assert!(bed.plane.maps().flows.is_empty());
}

/// `-E` turning QUIC-LB on or off moves the key between `services` and
/// `quic_services`, adding it to the new map before removing it from the
/// old: whichever write fails, the key is in one of them, and the next
/// reports converge.
#[test]
fn an_edit_turns_quic_lb_on_and_off_and_no_packet_finds_neither_map() {
    let k = ukey(443);
    let skey = svc_key(&k).unwrap();
    let plain = ServiceConfig::new(AddrFamily::Inet).scheduler("rr".parse().unwrap());
    let quic = quic_config(&["cr=0,sid=2,nonce=6"]);
    for (from, to) in [(&plain, &quic), (&quic, &plain)] {
        let mut n = 0;
        loop {
            let mut bed = Bed::new();
            bed.run(Command::AddService {
                key: k,
                config: from.clone(),
            })
            .unwrap();
            bed.run(Command::AddDest {
                service: k,
                dest: quic_dest(1, None),
            })
            .unwrap();
            let at = bed.plane.maps().writes + n;
            bed.plane.maps().fail_at = Some(at);
            let r = bed.run(Command::EditService {
                key: k,
                config: to.clone(),
            });
            let m = bed.plane.maps().clone();
            assert!(
                m.services.contains_key(&skey) || m.quic_services.contains_key(&skey),
                "failing at write {n}: the service is in neither map"
            );
            assert!(
                !(m.services.contains_key(&skey) && m.quic_services.contains_key(&skey)),
                "failing at write {n}: left in both maps"
            );
            let done = bed.plane.maps().writes <= at;
            if r.is_err() {
                bed.report(1);
                bed.report(2);
            }
            let idx = bed.plane.service_index(&k).unwrap();
            let m = bed.plane.maps().clone();
            if is_quic(to) {
                assert_eq!(m.quic_services.get(&skey), Some(&idx), "at {n}");
                assert!(!m.services.contains_key(&skey), "at {n}");
                assert!(m.quic_lb.contains_key(&idx), "at {n}");
            } else {
                assert_eq!(m.services.get(&skey), Some(&idx), "at {n}");
                assert!(!m.quic_services.contains_key(&skey), "at {n}");
                // A leftover element (its removal failed) is never read.
                if done {
                    assert!(!m.quic_lb.contains_key(&idx), "at {n}");
                }
            }
            if done {
                assert!(r.is_ok());
                break;
            }
            n += 1;
        }
        assert!(n > 1, "the edit made several writes");
    }
}

/// Key rotation: both configurations live at once (two codepoints in one
/// `quic_lb` element), then the old one retired.
#[test]
fn key_rotation_keeps_two_configurations_live() {
    use crate::quic_lb::{QUIC_MODE_NONE, QUIC_MODE_PLAIN, QUIC_MODE_SINGLE};
    let mut bed = Bed::new();
    let k = ukey(443);
    let old = format!("cr=0,sid=3,nonce=13,key={KEY1}");
    let new = format!("cr=1,sid=3,nonce=13,key={KEY2}");
    bed.run(Command::AddService {
        key: k,
        config: quic_config(&[&old]),
    })
    .unwrap();
    bed.run(Command::AddDest {
        service: k,
        dest: quic_dest(1, Some("0a0001")),
    })
    .unwrap();
    let idx = bed.plane.service_index(&k).unwrap();
    bed.run(Command::EditService {
        key: k,
        config: quic_config(&[&old, &new]),
    })
    .unwrap();
    let v = bed.plane.maps().quic_lb[&idx];
    let key2 = rvs_core::model::QuicLbConfig::parse_key(KEY2).unwrap();
    assert_eq!(
        (v.cfg[0].mode, v.cfg[1].mode),
        (QUIC_MODE_SINGLE, QUIC_MODE_SINGLE)
    );
    assert_eq!(v.cfg[1].dk, crate::quic_lb::decrypt_round_keys(&key2));
    assert_ne!(v.cfg[0].dk, v.cfg[1].dk);
    assert_eq!(v.fallback_len, 17);
    // The real server's ID stays through the rotation.
    assert_eq!(bed.plane.maps().quic_sids.len(), 1);
    bed.run(Command::EditService {
        key: k,
        config: quic_config(&[&new]),
    })
    .unwrap();
    let v = bed.plane.maps().quic_lb[&idx];
    assert_eq!(
        (v.cfg[0].mode, v.cfg[1].mode),
        (QUIC_MODE_NONE, QUIC_MODE_SINGLE)
    );
    // And to plaintext.
    bed.run(Command::EditService {
        key: k,
        config: quic_config(&["cr=2,sid=3,nonce=6"]),
    })
    .unwrap();
    let v = bed.plane.maps().quic_lb[&idx];
    assert_eq!(v.cfg[2].mode, QUIC_MODE_PLAIN);
    assert_eq!(v.fallback_len, 10);
    assert_eq!(bed.plane.maps().quic_sids.len(), 1);
}

/// What the program cannot carry is refused with the reason before
/// anything changes: a port-zero QUIC-LB service, four-pass
/// configurations, a FULLNAT real server under QUIC-LB (added, or already
/// there when QUIC-LB is turned on).
#[test]
fn quic_lb_refusals_leave_the_maps_unchanged() {
    let mut bed = Bed::new();
    let four = format!("cr=0,sid=3,nonce=8,key={KEY1}");
    let refused = [
        (ukey(0), quic_config(&["cr=0,sid=2,nonce=6"]), "port-zero"),
        (ukey(443), quic_config(&[&four]), "four-pass"),
    ];
    for (k, config, why) in refused {
        let c = Command::AddService { key: k, config };
        let e = admit(&c).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
        let before = bed.plane.maps().clone();
        let e = bed.plane.apply_command(&c).unwrap_err();
        assert!(matches!(e, PlaneError::Refused(_)), "{e}");
        let after = bed.plane.maps().clone();
        assert_eq!(after.quic_services, before.quic_services);
        assert_eq!(after.quic_lb, before.quic_lb);
        assert_eq!(after.services, before.services);
        assert_eq!(after.writes, before.writes, "nothing written");
        assert!(bed.plane.service_index(&k).is_none());
    }
    // The secret key is not in the message.
    let e = admit(&Command::AddService {
        key: ukey(443),
        config: quic_config(&[&four]),
    })
    .unwrap_err();
    assert!(!e.to_string().contains(KEY1), "{e}");

    // FULLNAT under a QUIC-LB service.
    let k = ukey(443);
    bed.run(Command::AddService {
        key: k,
        config: quic_config(&["cr=0,sid=2,nonce=6"]),
    })
    .unwrap();
    let fnat = dr(5).forward(ForwardMethod::FullNat);
    let add = Command::AddDest {
        service: k,
        dest: fnat,
    };
    let (i, why) = check_quic_dests(&bed.ipvs, std::slice::from_ref(&add)).unwrap_err();
    assert_eq!(i, 0);
    assert!(why.contains("FULLNAT"), "{why}");
    let before = bed.plane.maps().clone();
    let e = bed.plane.apply_command(&add).unwrap_err();
    assert!(matches!(e, PlaneError::Refused(_)), "{e}");
    assert_eq!(bed.plane.maps().writes, before.writes, "nothing written");
    // A plain service with a FULLNAT real server cannot turn QUIC-LB on.
    let p = ukey(8443);
    bed.run(Command::AddService {
        key: p,
        config: ServiceConfig::new(AddrFamily::Inet).scheduler("rr".parse().unwrap()),
    })
    .unwrap();
    bed.run(Command::AddLaddr {
        service: p,
        laddr: rvs_core::model::LocalAddrRange::parse("10.9.0.1").unwrap(),
    })
    .unwrap();
    bed.run(Command::AddDest {
        service: p,
        dest: fnat,
    })
    .unwrap();
    let on = Command::EditService {
        key: p,
        config: quic_config(&["cr=0,sid=2,nonce=6"]),
    };
    let (i, why) = check_quic_dests(&bed.ipvs, std::slice::from_ref(&on)).unwrap_err();
    assert_eq!(i, 0);
    assert!(why.contains("FULLNAT"), "{why}");
    let before = bed.plane.maps().clone();
    let e = bed.plane.apply_command(&on).unwrap_err();
    assert!(matches!(e, PlaneError::Refused(_)), "{e}");
    assert_eq!(bed.plane.maps().writes, before.writes, "nothing written");
    assert!(
        bed.plane
            .maps()
            .services
            .contains_key(&svc_key(&p).unwrap())
    );
    // A batch that adds the service and its FULLNAT real server together.
    let batch = [
        Command::AddService {
            key: ukey(9443),
            config: quic_config(&["cr=0,sid=2,nonce=6"]),
        },
        Command::AddDest {
            service: ukey(9443),
            dest: fnat,
        },
    ];
    assert_eq!(check_quic_dests(&bed.ipvs, &batch).unwrap_err().0, 1);
    // DR, TUN and NAT real servers are fine.
    let ok = [
        Command::AddDest {
            service: k,
            dest: dr(6),
        },
        Command::AddDest {
            service: k,
            dest: dr(7).forward(ForwardMethod::Masq),
        },
    ];
    check_quic_dests(&bed.ipvs, &ok).unwrap();
}

/// The `fnat_rev` value of a flow `fk` of real server index `d`.
fn fnat_of_flow(fk: &FlowKey, d: u32) -> maps::Fnat {
    maps::Fnat {
        caddr: fk.caddr,
        vaddr: fk.vaddr,
        cport: fk.cport,
        vport: fk.vport,
        svc: 0,
        dest: d,
        toa_ack: 0,
    }
}

/// The orphan sweep: translations whose flow is gone from the flow tables
/// (the LRU evicted it), a pair its flow's `fnat_fwd` no longer names, and
/// the mark of a refused connection whose flow is gone are freed — two
/// reports after they were first seen orphaned, never at the first; a
/// live flow's translation stays.
#[test]
fn fullnat_sweep_frees_translations_whose_flow_is_gone() {
    use rvs_core::model::LocalAddrRange;
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.run(Command::AddLaddr {
        service: key(80),
        laddr: LocalAddrRange::parse("10.9.0.1").unwrap(),
    })
    .unwrap();
    bed.dest(80, dr(1).forward(ForwardMethod::FullNat)).unwrap();
    let d = bed.index(80, 1);
    let now = bed.plane.maps().jiffies;
    let vip: IpAddr = "10.0.0.100".parse().unwrap();
    let pair = |lport: u16| maps::FnatKey {
        raddr: maps::addr16(rs(1)),
        laddr: maps::addr16("10.9.0.1".parse().unwrap()),
        rport: 80u16.to_be(),
        lport: lport.to_be(),
        proto: 6,
        family: maps::AF_INET,
        pad0: 0,
    };
    let flow = |i: u16| FlowKey::new(6, "192.0.2.7".parse().unwrap(), 4000 + i, vip, 80);
    let m = bed.plane.maps();
    // 0: live. 1: its flow evicted. 2: a pair its flow no longer names
    // (the flow holds pair 3). 4: a refused connection's mark, flow gone.
    let live = Flow {
        last_seen: now,
        dest: d,
        state: TcpState::Established as u8,
        ..Flow::default()
    };
    m.flows.insert(flow(0), live);
    m.fnat_fwd.insert(flow(0), pair(31000));
    m.fnat_rev.insert(pair(31000), fnat_of_flow(&flow(0), d));
    m.fnat_fwd.insert(flow(1), pair(31001));
    m.fnat_rev.insert(pair(31001), fnat_of_flow(&flow(1), d));
    m.flows.insert(flow(2), live);
    m.fnat_fwd.insert(flow(2), pair(31003));
    m.fnat_rev.insert(pair(31003), fnat_of_flow(&flow(2), d));
    m.fnat_rev.insert(pair(31002), fnat_of_flow(&flow(2), d));
    let mark = maps::FnatKey {
        laddr: [0; 16],
        lport: 0,
        ..pair(1)
    };
    m.fnat_fwd.insert(flow(4), mark);
    bed.report(1);
    // Seen orphaned once: nothing freed yet.
    assert_eq!(bed.plane.maps().fnat_rev.len(), 4);
    assert_eq!(bed.plane.maps().fnat_fwd.len(), 4);
    bed.report(2);
    let m = bed.plane.maps();
    let mut rev: Vec<u16> = m.fnat_rev.keys().map(|k| u16::from_be(k.lport)).collect();
    rev.sort();
    assert_eq!(rev, [31000, 31003], "the orphaned pairs are free");
    let mut fwd: Vec<FlowKey> = m.fnat_fwd.keys().copied().collect();
    fwd.sort();
    assert_eq!(fwd, [flow(0), flow(2)], "the live flows keep theirs");
    // A live flow is never swept, however many reports pass.
    for t in 3..6 {
        bed.plane.maps().flows.get_mut(&flow(0)).unwrap().last_seen = now;
        bed.plane.maps().flows.get_mut(&flow(2)).unwrap().last_seen = now;
        bed.report(t);
    }
    assert_eq!(bed.plane.maps().fnat_rev.len(), 2);
    assert_eq!(bed.plane.maps().fnat_fwd.len(), 2);
}

/// A synced FULLNAT connection with its master's local address and port
/// gets that pair here as the program would have given it: `fnat_rev`
/// (the client side), `fnat_fwd`, and the pair recorded in its IPv4 flow
/// entry. A refresh keeps the program's `fnat_rev` entry; a new pair gives
/// the old one back. A pair another live flow holds here is not taken: the
/// synced flow is not loaded (counted). One an orphan holds is.
#[test]
fn synced_fullnat_flows_keep_their_masters_pair() {
    use rvs_core::model::LocalAddrRange;
    let mut bed = Bed::new();
    bed.svc(80, "rr").unwrap();
    bed.run(Command::AddLaddr {
        service: key(80),
        laddr: LocalAddrRange::parse("10.9.0.1-2").unwrap(),
    })
    .unwrap();
    bed.dest(80, dr(1).forward(ForwardMethod::FullNat)).unwrap();
    let d = bed.index(80, 1);
    let svc = bed.plane.service_index(&key(80)).unwrap();
    let dest = bed.ipvs.service(&key(80)).unwrap().dests()[0].id;
    let vip: IpAddr = "10.0.0.100".parse().unwrap();
    let client: IpAddr = "192.0.2.7".parse().unwrap();
    let local: SocketAddr = "10.9.0.2:40000".parse().unwrap();
    let conn = |cport: u16, local: SocketAddr| MirroredConn {
        protocol: Protocol::Tcp,
        client: SocketAddr::new(client, cport),
        vip: SocketAddr::new(vip, 80),
        dest,
        state: TcpState::Established as u8,
        output_seen: true,
        idle_left: Duration::from_secs(900),
        template: false,
        local: Some(local),
    };
    let rev = |local: SocketAddr| maps::FnatKey {
        raddr: maps::addr16(rs(1)),
        laddr: maps::addr16(local.ip()),
        rport: 80u16.to_be(),
        lport: local.port().to_be(),
        proto: 6,
        family: maps::AF_INET,
        pad0: 0,
    };
    let fk = FlowKey::new(6, client, 4000, vip, 80);
    bed.plane
        .load_synced_flow(&bed.ipvs, &conn(4000, local))
        .unwrap();
    let m = bed.plane.maps();
    assert_eq!(m.fnat_fwd.get(&fk), Some(&rev(local)));
    let want = maps::Fnat {
        svc,
        ..fnat_of_flow(&fk, d)
    };
    assert_eq!(m.fnat_rev.get(&rev(local)), Some(&want));
    let f = m.flows[&fk];
    assert_eq!((f.dest, f.svc), (d, svc));
    assert_eq!(
        (f.fnat_lport, f.fnat_laddr),
        (40000u16.to_be(), u32::from_ne_bytes([10, 9, 0, 2]))
    );
    // A refresh: the program's TOA state in fnat_rev is left alone.
    m.fnat_rev.get_mut(&rev(local)).unwrap().toa_ack = 77;
    bed.plane
        .load_synced_flow(&bed.ipvs, &conn(4000, local))
        .unwrap();
    assert_eq!(bed.plane.maps().fnat_rev[&rev(local)].toa_ack, 77);
    assert_eq!(bed.plane.maps().fnat_rev.len(), 1);
    // The master gave the flow a new pair: the old one is free here.
    let moved: SocketAddr = "10.9.0.1:40001".parse().unwrap();
    bed.plane
        .load_synced_flow(&bed.ipvs, &conn(4000, moved))
        .unwrap();
    let m = bed.plane.maps();
    assert_eq!(m.fnat_fwd.get(&fk), Some(&rev(moved)));
    assert_eq!(
        m.fnat_rev.keys().copied().collect::<Vec<_>>(),
        vec![rev(moved)]
    );
    assert_eq!(m.flows[&fk].fnat_lport, 40001u16.to_be());
    // Another client's synced flow with the same pair: not loaded, the
    // pair stays the live flow's.
    let fk2 = FlowKey::new(6, client, 4002, vip, 80);
    bed.plane
        .load_synced_flow(&bed.ipvs, &conn(4002, moved))
        .unwrap();
    let m = bed.plane.maps();
    assert!(!m.flows.contains_key(&fk2));
    assert!(!m.fnat_fwd.contains_key(&fk2));
    assert_eq!(
        m.fnat_rev[&rev(moved)],
        maps::Fnat {
            svc,
            ..fnat_of_flow(&fk, d)
        }
    );
    assert_eq!(bed.plane.synced_pairs_taken(), 1);
    // Once that flow is gone (an orphaned translation the sweep has not
    // freed yet), the pair can be claimed.
    bed.plane.maps().flows.remove(&fk);
    bed.plane
        .load_synced_flow(&bed.ipvs, &conn(4002, moved))
        .unwrap();
    let m = bed.plane.maps();
    assert_eq!(m.fnat_fwd.get(&fk2), Some(&rev(moved)));
    assert!(!m.fnat_fwd.contains_key(&fk), "the orphan's fnat_fwd goes");
    assert_eq!(
        m.fnat_rev[&rev(moved)],
        maps::Fnat {
            svc,
            ..fnat_of_flow(&fk2, d)
        }
    );
    assert_eq!(m.flows[&fk2].fnat_lport, 40001u16.to_be());
    assert_eq!(bed.plane.synced_pairs_taken(), 1);
    // Without a pair (an older master): loaded without one, as before.
    let fk3 = FlowKey::new(6, client, 4003, vip, 80);
    let mut plain = conn(4003, moved);
    plain.local = None;
    bed.plane.load_synced_flow(&bed.ipvs, &plain).unwrap();
    let m = bed.plane.maps();
    assert_eq!(m.flows[&fk3].fnat_lport, 0);
    assert!(!m.fnat_fwd.contains_key(&fk3));
}

#[test]
fn source_ranges_follow_the_service_into_the_trie() {
    use crate::maps::SrcKey;
    use rvs_core::model::SourceRange;
    let range = |a: &str, p| SourceRange::new(a.parse().unwrap(), p).unwrap();
    let config = |ranges: Vec<SourceRange>| {
        let mut c = ServiceConfig::new(AddrFamily::Inet).scheduler("rr".parse().unwrap());
        c.source_ranges = ranges;
        c
    };
    let (a, b) = (range("10.81.0.0", 24), range("192.0.2.7", 32));
    let mut bed = Bed::new();
    bed.run(Command::AddService {
        key: key(80),
        config: config(vec![a, b]),
    })
    .unwrap();
    bed.svc(81, "rr").unwrap();
    let (i, j) = (
        bed.plane.service_index(&key(80)).unwrap(),
        bed.plane.service_index(&key(81)).unwrap(),
    );
    let flag = |bed: &mut Bed, i| bed.plane.maps().svc_info[&i].flags & maps::svc_flags::SRC_RANGES;
    let trie = |bed: &mut Bed| bed.plane.maps().src_ranges.clone();
    assert_eq!(flag(&mut bed, i), maps::svc_flags::SRC_RANGES);
    assert_eq!(
        flag(&mut bed, j),
        0,
        "a service without ranges is not flagged"
    );
    assert_eq!(
        trie(&mut bed),
        [SrcKey::of(i, &a), SrcKey::of(i, &b)].into_iter().collect()
    );
    let k = SrcKey::of(i, &a);
    assert_eq!(
        (k.prefixlen, k.svc, &k.addr[..4]),
        (56, i, &[10, 81, 0, 0][..])
    );
    // Edited: the range that went is removed, the one that stays kept.
    bed.run(Command::EditService {
        key: key(80),
        config: config(vec![b]),
    })
    .unwrap();
    assert_eq!(trie(&mut bed), [SrcKey::of(i, &b)].into_iter().collect());
    // No ranges: open to everyone, the flag off, the trie empty.
    bed.run(Command::EditService {
        key: key(80),
        config: config(vec![]),
    })
    .unwrap();
    assert_eq!(flag(&mut bed, i), 0);
    assert!(trie(&mut bed).is_empty());
    // Ranges again, then the service deleted: they go with it.
    bed.run(Command::EditService {
        key: key(80),
        config: config(vec![a]),
    })
    .unwrap();
    assert_eq!(trie(&mut bed).len(), 1);
    bed.run(Command::DelService { key: key(80) }).unwrap();
    assert!(trie(&mut bed).is_empty());
    // A range left at an index (a removal that failed, an earlier rvsd's
    // adopted maps) goes when a service with ranges takes the index: it
    // would widen that service's clients.
    bed.svc(82, "rr").unwrap();
    let at = bed.plane.service_index(&key(82)).unwrap();
    let stale = SrcKey::of(at, &range("198.51.100.0", 24));
    bed.plane.maps().src_ranges.insert(stale);
    bed.run(Command::EditService {
        key: key(82),
        config: config(vec![b]),
    })
    .unwrap();
    assert_eq!(trie(&mut bed), [SrcKey::of(at, &b)].into_iter().collect());
}

/// A plane without room for a service refuses it once (`Full`) and
/// ignores the commands about it, real servers and edits alike (the
/// refusal was the service's: not one "no such service" per real server
/// of 5,904 refused services); a report installs it with its real servers
/// once a deletion made room.
#[test]
fn a_service_without_room_is_refused_once_and_installed_when_there_is_room() {
    let mut bed = Bed::new();
    let mut maps = MemMaps::new(1 << 16);
    maps.services_len = 2;
    bed.plane = Plane::new(maps).unwrap();
    bed.svc(1, "rr").unwrap();
    bed.svc(2, "rr").unwrap();
    assert!(matches!(
        bed.svc(3, "rr"),
        Err(PlaneError::Full("svc_info"))
    ));
    bed.dest(3, dr(1))
        .expect("a real server of a roomless service");
    bed.run(Command::EditDest {
        service: key(3),
        dest: dr(1).weight(3),
    })
    .expect("its edit");
    bed.run(Command::EditService {
        key: key(3),
        config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Wrr),
    })
    .expect("the service's edit");
    bed.dest(3, dr(2)).expect("another");
    bed.run(Command::DelDest {
        service: key(3),
        addr: rs(1),
        port: 80,
    })
    .expect("a deletion");
    assert_eq!(bed.plane.service_index(&key(3)), None);
    bed.run(Command::DelService { key: key(1) }).unwrap();
    // The freed index waits out its grace period; the reports retry.
    for secs in 1..=5 {
        bed.report(secs);
    }
    let i = bed.plane.service_index(&key(3)).expect("installed");
    assert_eq!(bed.plane.maps().svc_info[&i].sched, maps::sched::WRR);
    assert_eq!(bed.data(3).0, vec![bed.index(3, 2)], "with its real server");
    assert_eq!(bed.plane.dest_index(&key(3), rs(1), 80), None);
}

/// A plane whose `svc_info` is full does work in proportion to the
/// commands it is given, not to the services waiting for room: a report
/// with nothing freed replays nothing (at 10,000 services on 4,096 slots,
/// every report used to diff the whole model and retry the 5,904
/// services, so the plane managed about twenty commands a second). A
/// service deleted lets exactly one waiting service in, at the report
/// that frees its index, and that one is then served with its real
/// server.
#[test]
fn a_full_plane_replays_nothing_until_room_is_freed() {
    const ROOM: u32 = 100;
    const SERVICES: u16 = 1_000;
    let mut bed = Bed::new();
    let mut maps = MemMaps::new(1 << 16);
    maps.services_len = ROOM;
    bed.plane = Plane::new(maps).unwrap();
    let mut secs = 0;
    let mut full = 0;
    let mut writes_then = 0;
    for port in 1..=SERVICES {
        if bed.svc(port, "rr").is_err() {
            full += 1;
            if full == 1 {
                writes_then = bed.plane.maps().writes;
            }
        }
        bed.dest(port, dr(1)).unwrap();
        // A report every ten services, as the worker's every second.
        if port % 10 == 0 {
            secs += 1;
            bed.report(secs);
        }
    }
    assert_eq!(full, u32::from(SERVICES) - ROOM, "refused for want of room");
    assert_eq!(
        bed.plane.replayed(),
        0,
        "reports replayed commands while nothing was freed"
    );
    // The commands refused wrote nothing but what the reports write.
    let writes = bed.plane.maps().writes - writes_then;
    assert!(
        writes < 10 * usize::from(SERVICES),
        "{writes} map writes for {full} refused services"
    );
    // One service goes: once its index is past its grace period, the
    // oldest waiting service (the first refused) takes it, alone.
    let first_refused = ROOM as u16 + 1;
    bed.run(Command::DelService { key: key(1) }).unwrap();
    for _ in 0..4 {
        secs += 1;
        bed.report(secs);
    }
    assert_eq!(bed.plane.replayed(), 2, "its AddService and AddDest");
    let installed = (1..=SERVICES)
        .filter(|&p| bed.plane.service_index(&key(p)).is_some())
        .count();
    assert_eq!(installed, ROOM as usize);
    assert_eq!(
        bed.data(first_refused).0,
        vec![bed.index(first_refused, 1)],
        "served, with its real server"
    );
    // Nothing more freed: nothing more replayed.
    for _ in 0..4 {
        secs += 1;
        bed.report(secs);
    }
    assert_eq!(bed.plane.replayed(), 2);
}

/// Commands a second while full (a measurement, not a check: run with
/// `--ignored --nocapture`): 10,000 services on a plane with room for
/// 100, then 1,000 more commands (a real server each for a waiting
/// service) with a report every 50 commands; prints the rate and the
/// commands the reports replayed.
#[test]
#[ignore = "a measurement"]
fn bench_commands_while_full() {
    const ROOM: u32 = 100;
    let mut bed = Bed::new();
    let mut maps = MemMaps::new(1 << 16);
    maps.services_len = ROOM;
    bed.plane = Plane::new(maps).unwrap();
    let mut secs = 0;
    for port in 1..=10_000u16 {
        let _ = bed.svc(port, "rr");
        bed.dest(port, dr(1)).unwrap();
        if port % 1_000 == 0 {
            secs += 1;
            bed.report(secs);
        }
    }
    let before = bed.plane.replayed();
    let start = StdInstant::now();
    for n in 0..1_000u16 {
        bed.dest(9_000 + n, dr(2)).unwrap();
        if n % 50 == 49 {
            secs += 1;
            bed.report(secs);
        }
    }
    let took = start.elapsed();
    println!(
        "while full: 1000 commands and 20 reports in {took:?}: {:.0} commands/s; {} commands replayed",
        1_000.0 / took.as_secs_f64(),
        bed.plane.replayed() - before
    );
}
