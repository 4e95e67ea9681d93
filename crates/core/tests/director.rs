//! The director end to end with a virtual clock: control operations,
//! connection state and accounting, persistence, expiry and eviction.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use proptest::prelude::*;
use rvs_core::conn::{Conn, ConnId};
use rvs_core::dest::DestId;
use rvs_core::ipvs::{
    CtlError, DropReason, Forward, Ipvs, IpvsConfig, L4, MirroredConn, Packet, Tunables, Verdict,
};
use rvs_core::model::{
    AddrFamily, DestConfig, FamilyError, ForwardMethod, LocalAddrRange, PersistMask,
    PersistenceEngine, Protocol, ServiceConfig, ServiceKey, Tunnel, TunnelType,
};
use rvs_core::sched::Scheduler;
use rvs_core::state::{TcpFlags, TcpState};
use rvs_core::time::Instant;

const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn tcp_svc(port: u16) -> ServiceKey {
    ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: IpAddr::V4(VIP),
        port,
    }
}

fn udp_svc(port: u16) -> ServiceKey {
    ServiceKey::Addr {
        protocol: Protocol::Udp,
        addr: IpAddr::V4(VIP),
        port,
    }
}

fn rs(i: u8) -> IpAddr {
    v4(192, 168, 1, i)
}

const SYN: TcpFlags = TcpFlags::SYN;
const ACK: TcpFlags = TcpFlags::ACK;
const SYNACK: TcpFlags = TcpFlags::SYN_ACK;
const FIN: TcpFlags = TcpFlags::FIN_ACK;
const RST: TcpFlags = TcpFlags::RST;

fn pkt(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, l4: L4) -> Packet<'static> {
    Packet {
        src,
        sport,
        dst,
        dport,
        l4,
        fwmark: 0,
        len: 60,
        payload: b"",
    }
}

fn tcp_in(client: IpAddr, sport: u16, dport: u16, f: TcpFlags) -> Packet<'static> {
    pkt(client, sport, IpAddr::V4(VIP), dport, L4::Tcp(f))
}

/// A director with one TCP service on VIP:80 and real servers .1..=n
/// (added in that order, so list order is .n first).
fn director(sched: &str, n: u8, method: ForwardMethod) -> Ipvs {
    let dests = (1..=n).map(|i| DestConfig::new(rs(i), 80).forward(method));
    let cfg = svc_cfg(sched.parse().expect("scheduler"));
    with_service(IpvsConfig::default(), tcp_svc(80), cfg, dests)
}

/// A director (table settings `table`) with the one service `key` (`cfg`)
/// and the real servers `dests`, added one by one in that order.
fn with_service(
    table: IpvsConfig,
    key: ServiceKey,
    cfg: ServiceConfig,
    dests: impl IntoIterator<Item = DestConfig>,
) -> Ipvs {
    let mut ipvs = Ipvs::new(table);
    ipvs.add_service(key, cfg).unwrap();
    for d in dests {
        ipvs.add_dest(&key, d).unwrap();
    }
    ipvs
}

/// An IPv4 service scheduled by `sched`.
fn svc_cfg(sched: Scheduler) -> ServiceConfig {
    ServiceConfig::new(AddrFamily::Inet).scheduler(sched)
}

/// A table of `capacity` entries with an rr TCP service on VIP:80 and
/// the one real server .1.
fn one_server_table(capacity: usize) -> Ipvs {
    let table = IpvsConfig {
        conn_capacity: capacity,
        ..IpvsConfig::default()
    };
    let dest = DestConfig::new(rs(1), 80);
    with_service(table, tcp_svc(80), svc_cfg(Scheduler::Rr), [dest])
}

/// The persistence templates in the table.
fn templates(ipvs: &Ipvs) -> Vec<&Conn> {
    let all = ipvs.conns().iter();
    all.filter(|(_, c)| c.is_template())
        .map(|(_, c)| c)
        .collect()
}

/// A SYN from `client`:`sport` to VIP:`dport` at `at`, which must be forwarded.
fn syn(ipvs: &mut Ipvs, at: Instant, client: IpAddr, sport: u16, dport: u16) -> Forward {
    fwd(ipvs.process(at, &tcp_in(client, sport, dport, SYN)))
}

fn fwd(v: Verdict) -> Forward {
    match v {
        Verdict::Forward(f) => f,
        other => panic!("expected Forward, got {other:?}"),
    }
}

fn counts(ipvs: &Ipvs, key: &ServiceKey) -> Vec<(IpAddr, u32, u32)> {
    let mut v: Vec<_> = ipvs
        .service(key)
        .unwrap()
        .dests()
        .iter()
        .map(|d| (d.config.addr, d.active, d.inactive))
        .collect();
    v.sort();
    v
}

fn t(s: u64) -> Instant {
    Instant::from_secs(s)
}

#[test]
fn list_order_is_newest_first_and_rr_follows_it() {
    let mut ipvs = director("rr", 3, ForwardMethod::Masq);
    let order: Vec<IpAddr> = ipvs
        .service(&tcp_svc(80))
        .unwrap()
        .dests()
        .iter()
        .map(|d| d.config.addr)
        .collect();
    assert_eq!(order, vec![rs(3), rs(2), rs(1)]);
    let picks: Vec<IpAddr> = (0..6)
        .map(|i| syn(&mut ipvs, t(0), v4(1, 1, 1, i), 1000, 80).daddr)
        .collect();
    assert_eq!(picks, vec![rs(3), rs(2), rs(1), rs(3), rs(2), rs(1)]);
    ipvs.audit().unwrap();
}

/// wrr's mark through ipvsadm's edits, as the kernel moves it: every `-e`
/// (changed or not) is `upd_dest` (`ip_vs_wrr_dest_changed`: back to the
/// list head, the threshold kept); `-E` with the same scheduler leaves the
/// scheduler alone whatever else it changes (`-b flag-1` here); `-E`
/// naming another scheduler binds it anew (`init_service`: rr at the head,
/// wrr at the head with the threshold at its maximum). The sequences are
/// the kernel's, worked out by hand from ip_vs_wrr.c and ip_vs_rr.c.
#[test]
fn wrr_mark_follows_the_kernel_through_edits() {
    let key = tcp_svc(80);
    let w = [(1u8, 2u32), (2, 5), (3, 1)];
    let dests = w.iter().map(|&(i, w)| DestConfig::new(rs(i), 80).weight(w));
    let mut ipvs = with_service(IpvsConfig::default(), key, svc_cfg(Scheduler::Wrr), dests);
    let mut port = 1000u16;
    let mut picks = |ipvs: &mut Ipvs, n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                port += 1;
                let d = syn(ipvs, t(0), v4(1, 1, 1, 1), port, 80).daddr;
                (1..=3).find(|&i| rs(i) == d).expect("a real server")
            })
            .collect()
    };
    // List rs3:1 rs2:5 rs1:2. The adds leave the threshold at 1 (rs1's
    // add set it to mw = 1; the next adds kept it): each server once, then
    // the cycle from its first pass (5, 4, 3, 2, 1).
    assert_eq!(picks(&mut ipvs, 5), [3, 2, 1, 2, 2], "after -a -a -a");
    // The last decision was in the pass of threshold 4. An edit that
    // changes nothing restarts that pass from the head.
    ipvs.edit_dest(&key, DestConfig::new(rs(2), 80).weight(5))
        .unwrap();
    assert_eq!(
        picks(&mut ipvs, 8),
        [2, 2, 2, 1, 3, 2, 1, 2],
        "after -e with no change"
    );
    // Same scheduler, other flags: nothing happens to the mark (rs2 last,
    // threshold 5), so the cycle goes on (a fresh mark would give rs2 in
    // the passes 5, 4, 3 and 2: 2 2 2 2 1).
    let flagged = svc_cfg(Scheduler::Wrr).flags(rvs_core::model::SchedFlags::FLAG1);
    ipvs.edit_service(&key, flagged).unwrap();
    assert_eq!(picks(&mut ipvs, 5), [2, 2, 2, 1, 3], "after -E -b flag-1");
    // Another scheduler, then wrr again: each starts afresh.
    ipvs.edit_service(&key, svc_cfg(Scheduler::Rr)).unwrap();
    assert_eq!(picks(&mut ipvs, 4), [3, 2, 1, 3], "after -E -s rr");
    ipvs.edit_service(&key, svc_cfg(Scheduler::Wrr)).unwrap();
    assert_eq!(
        picks(&mut ipvs, 10),
        [2, 2, 2, 2, 1, 3, 2, 1, 2, 2],
        "after -E -s wrr"
    );
    ipvs.audit().unwrap();
}

#[test]
fn nat_connection_lifecycle_moves_counters_and_expires() {
    let mut ipvs = director("wlc", 1, ForwardMethod::Masq);
    let c = v4(1, 1, 1, 1);
    let f = syn(&mut ipvs, t(0), c, 5000, 80);
    assert!(f.new);
    assert_eq!(
        (f.daddr, f.dport, f.method),
        (rs(1), 80, ForwardMethod::Masq)
    );
    let id = f.conn.unwrap();
    assert_eq!(ipvs.conns().get(id).unwrap().state, TcpState::SynRecv as u8);
    // SYN_RECV is an active state.
    assert_eq!(counts(&ipvs, &tcp_svc(80)), vec![(rs(1), 1, 0)]);

    // The real server's SYN+ACK comes back through the director (NAT).
    let reply = ipvs.process(t(0), &pkt(rs(1), 80, c, 5000, L4::Tcp(SYNACK)));
    let Verdict::Reply(r) = reply else {
        panic!("expected Reply, got {reply:?}")
    };
    assert_eq!((r.vaddr, r.vport), (IpAddr::V4(VIP), 80));
    ipvs.process(t(0), &tcp_in(c, 5000, 80, ACK));
    assert_eq!(
        ipvs.conns().get(id).unwrap().state,
        TcpState::Established as u8
    );
    assert_eq!(ipvs.conns().deadline(id), Some(t(900)));

    // Client FIN on a NAT connection: ESTABLISHED -> CLOSE_WAIT (inactive).
    ipvs.process(t(10), &tcp_in(c, 5000, 80, FIN));
    assert_eq!(
        ipvs.conns().get(id).unwrap().state,
        TcpState::CloseWait as u8
    );
    assert_eq!(counts(&ipvs, &tcp_svc(80)), vec![(rs(1), 0, 1)]);
    ipvs.audit().unwrap();

    // CLOSE_WAIT times out after 60 s, not before.
    assert_eq!(ipvs.expire(t(69)), 0);
    assert_eq!(ipvs.expire(t(70)), 1);
    assert!(ipvs.conns().is_empty());
    assert_eq!(counts(&ipvs, &tcp_svc(80)), vec![(rs(1), 0, 0)]);
    let st = ipvs.service(&tcp_svc(80)).unwrap().stats();
    assert_eq!(
        (st.conns, st.inpkts, st.outpkts, st.inbytes),
        (1, 3, 1, 180)
    );
}

#[test]
fn direct_routing_uses_input_only_table() {
    let mut ipvs = director("rr", 1, ForwardMethod::Route);
    let c = v4(1, 1, 1, 1);
    let id = syn(&mut ipvs, t(0), c, 5000, 80).conn.unwrap();
    ipvs.process(t(0), &tcp_in(c, 5000, 80, ACK));
    ipvs.process(t(0), &tcp_in(c, 5000, 80, FIN));
    // INPUT_ONLY: client FIN in ESTABLISHED -> FIN_WAIT.
    assert_eq!(ipvs.conns().get(id).unwrap().state, TcpState::FinWait as u8);
    // No reply index for DR: a packet from the real server is not ours.
    let p = pkt(rs(1), 80, c, 5000, L4::Tcp(ACK));
    assert_eq!(ipvs.process(t(0), &p), Verdict::Pass);
}

#[test]
fn only_syn_creates_tcp_connections_unless_sloppy() {
    let mut ipvs = director("rr", 1, ForwardMethod::Masq);
    let c = v4(1, 1, 1, 1);
    assert_eq!(ipvs.process(t(0), &tcp_in(c, 1, 80, ACK)), Verdict::Pass);
    assert_eq!(ipvs.process(t(0), &tcp_in(c, 1, 80, RST)), Verdict::Pass);
    let mut tun = *ipvs.tunables();
    tun.sloppy_tcp = true;
    ipvs.set_tunables(tun);
    assert!(fwd(ipvs.process(t(0), &tcp_in(c, 1, 80, ACK))).new);
    assert_eq!(ipvs.process(t(0), &tcp_in(c, 2, 80, RST)), Verdict::Pass);
}

#[test]
fn no_destination_rejects_and_unknown_vip_passes() {
    let mut ipvs = director("wlc", 0, ForwardMethod::Masq);
    assert_eq!(
        ipvs.process(t(0), &tcp_in(v4(1, 1, 1, 1), 1, 80, SYN)),
        Verdict::Reject
    );
    let other = pkt(v4(1, 1, 1, 1), 1, v4(10, 9, 9, 9), 80, L4::Tcp(SYN));
    assert_eq!(ipvs.process(t(0), &other), Verdict::Pass);
    // A weight-0 server is never picked.
    ipvs.add_dest(&tcp_svc(80), DestConfig::new(rs(1), 80).weight(0))
        .unwrap();
    assert_eq!(
        ipvs.process(t(0), &tcp_in(v4(1, 1, 1, 1), 1, 80, SYN)),
        Verdict::Reject
    );
}

#[test]
fn reused_port_after_time_wait_is_rescheduled_at_once() {
    let mut ipvs = director("rr", 2, ForwardMethod::Route);
    let c = v4(1, 1, 1, 1);
    let first = syn(&mut ipvs, t(0), c, 7, 80);
    ipvs.process(t(0), &tcp_in(c, 7, 80, ACK));
    ipvs.process(t(0), &tcp_in(c, 7, 80, FIN));
    ipvs.process(t(0), &tcp_in(c, 7, 80, RST)); // FIN_WAIT + RST -> CLOSE
    let id = first.conn.unwrap();
    assert_eq!(
        ipvs.conns().get(id).map(|c| c.state),
        Some(TcpState::Close as u8)
    );
    // No one-second SYN drop: the new SYN gets a fresh connection now.
    let second = syn(&mut ipvs, t(1), c, 7, 80);
    assert!(second.new);
    assert_ne!(second.daddr, first.daddr, "rr moved on");
    assert_eq!(ipvs.conns().len(), 1);
    ipvs.audit().unwrap();
}

#[test]
fn persistence_spans_client_ports_and_outlives_connections() {
    let key = tcp_svc(443);
    let dests = (1..=3).map(|i| DestConfig::new(rs(i), 8443));
    let cfg = svc_cfg(Scheduler::Rr).persistent(360);
    let mut ipvs = with_service(IpvsConfig::default(), key, cfg, dests);
    let c = v4(1, 1, 1, 1);
    let a = syn(&mut ipvs, t(0), c, 1000, 443);
    assert_eq!(a.dport, 8443);
    for p in 1001..1010 {
        assert_eq!(syn(&mut ipvs, t(0), c, p, 443).daddr, a.daddr);
    }
    // Another client is scheduled afresh (rr moves on).
    assert_ne!(
        syn(&mut ipvs, t(0), v4(1, 1, 1, 2), 1000, 443).daddr,
        a.daddr
    );
    // The template is listed like ipvsadm -Lcn shows it: client port 0, NONE.
    let tpl = templates(&ipvs);
    assert_eq!(tpl.len(), 2);
    assert!(
        tpl.iter()
            .all(|c| c.cport == 0 && c.vport == 443 && c.dport == 8443)
    );
    assert_eq!(ipvs.dest(a.dest).unwrap().persist, 1);

    // Connections die (SYN_RECV times out after 60 s) but the template lives
    // on: 300 s later the client still lands on the same server.
    ipvs.expire(t(100));
    assert_eq!(
        ipvs.conns()
            .iter()
            .filter(|(_, c)| !c.is_template())
            .count(),
        0
    );
    assert_eq!(syn(&mut ipvs, t(300), c, 2000, 443).daddr, a.daddr);
    ipvs.audit().unwrap();
    // After the template's 360 s (restarted at t=300 by its use) and the
    // connection's expiry, the template goes too.
    ipvs.expire(t(300 + 359));
    // The other client's template (last used at t=0) is gone; ours remains.
    assert_eq!(templates(&ipvs).len(), 1);
    ipvs.expire(t(300 + 360));
    assert!(ipvs.conns().is_empty());
    assert_eq!(ipvs.dest(a.dest).unwrap().persist, 0);
}

#[test]
fn persistence_netmask_groups_a_subnet() {
    let cfg = svc_cfg(Scheduler::Rr)
        .persistent(60)
        .netmask(PersistMask::V4(Ipv4Addr::new(255, 255, 255, 0)));
    let dests = (1..=4).map(|i| DestConfig::new(rs(i), 80));
    let mut ipvs = with_service(IpvsConfig::default(), tcp_svc(80), cfg, dests);
    let first = syn(&mut ipvs, t(0), v4(7, 7, 7, 1), 1, 80).daddr;
    for h in 2..=254 {
        assert_eq!(syn(&mut ipvs, t(0), v4(7, 7, 7, h), 1, 80).daddr, first);
    }
    assert_ne!(syn(&mut ipvs, t(0), v4(7, 7, 8, 1), 1, 80).daddr, first);
}

/// A template turns ASSURED (the kernel's `IP_VS_CTPL_S_ASSURED`, listed
/// by `-Lcn`) when a TCP connection it controls is established, and when a
/// UDP flow it controls gets a reply, as `ip_vs_control_assure_ct`.
#[test]
fn templates_are_assured_by_an_established_tcp_conn_and_a_udp_reply() {
    let template_state = |ipvs: &Ipvs| -> Vec<&'static str> {
        let tpl = templates(ipvs);
        tpl.iter().map(|c| c.template_state_name()).collect()
    };
    for udp in [false, true] {
        let key = if udp { udp_svc(80) } else { tcp_svc(80) };
        let cfg = svc_cfg(Scheduler::Rr).persistent(360);
        let dest = DestConfig::new(rs(1), 80).forward(ForwardMethod::Masq);
        let mut ipvs = with_service(IpvsConfig::default(), key, cfg, [dest]);
        let c = v4(1, 1, 1, 1);
        let (first, reply) = if udp {
            (L4::Udp, L4::Udp)
        } else {
            (L4::Tcp(SYN), L4::Tcp(SYNACK))
        };
        fwd(ipvs.process(t(0), &pkt(c, 5000, IpAddr::V4(VIP), 80, first)));
        assert_eq!(template_state(&ipvs), ["NONE"], "udp={udp}");
        let r = ipvs.process(t(0), &pkt(rs(1), 80, c, 5000, reply));
        assert!(matches!(r, Verdict::Reply(_)), "{r:?}");
        if !udp {
            assert_eq!(template_state(&ipvs), ["NONE"], "SYN_RECV does not assure");
            ipvs.process(t(0), &tcp_in(c, 5000, 80, ACK));
        }
        assert_eq!(template_state(&ipvs), ["ASSURED"], "udp={udp}");
    }
}

#[test]
fn port_zero_persistent_service_spans_ports() {
    let key = tcp_svc(0);
    // Without persistence a port-zero service refuses to schedule.
    let dests = [DestConfig::new(rs(1), 0), DestConfig::new(rs(2), 0)];
    let mut ipvs = with_service(IpvsConfig::default(), key, svc_cfg(Scheduler::Rr), dests);
    assert_eq!(
        ipvs.process(t(0), &tcp_in(v4(1, 1, 1, 1), 1, 80, SYN)),
        Verdict::Reject
    );
    ipvs.edit_service(&key, svc_cfg(Scheduler::Rr).persistent(60))
        .unwrap();
    let c = v4(1, 1, 1, 1);
    let a = syn(&mut ipvs, t(0), c, 1, 80);
    let b = syn(&mut ipvs, t(0), c, 2, 443);
    assert_eq!(a.daddr, b.daddr);
    assert_eq!(
        (a.dport, b.dport),
        (80, 443),
        "dest port 0 keeps the packet's port"
    );
    let tpl = templates(&ipvs);
    assert_eq!(tpl.len(), 1);
    assert_eq!((tpl[0].vport, tpl[0].dport), (0, 0));
}

#[test]
fn fwmark_persistence_spans_protocols() {
    let key = ServiceKey::Fwmark {
        mark: 7,
        af: AddrFamily::Inet,
    };
    let cfg = svc_cfg(Scheduler::Rr).persistent(60);
    let dests = (1..=3).map(|i| DestConfig::new(rs(i), 0));
    let mut ipvs = with_service(IpvsConfig::default(), key, cfg, dests);
    let c = v4(1, 1, 1, 1);
    let mut p = tcp_in(c, 1, 80, SYN);
    p.fwmark = 7;
    let a = fwd(ipvs.process(t(0), &p));
    let mut u = pkt(c, 5, v4(10, 0, 0, 9), 53, L4::Udp);
    u.fwmark = 7;
    let b = fwd(ipvs.process(t(0), &u));
    assert_eq!(a.daddr, b.daddr);
    let tpl = templates(&ipvs);
    assert_eq!(tpl.len(), 1);
    assert_eq!(tpl[0].protocol, 0, "fwmark templates use IPPROTO_IP");
    // Unmarked traffic to the same address is not the service's.
    assert_eq!(ipvs.process(t(0), &tcp_in(c, 9, 80, SYN)), Verdict::Pass);
}

#[test]
fn quiescent_template_kept_by_default_broken_by_sysctl() {
    let key = tcp_svc(80);
    let cfg = svc_cfg(Scheduler::Rr).persistent(60);
    let dests = [DestConfig::new(rs(1), 80), DestConfig::new(rs(2), 80)];
    let mut ipvs = with_service(IpvsConfig::default(), key, cfg, dests);
    let c = v4(1, 1, 1, 1);
    let a = syn(&mut ipvs, t(0), c, 1, 80).daddr;
    ipvs.edit_dest(&key, DestConfig::new(a, 80).weight(0))
        .unwrap();
    assert_eq!(syn(&mut ipvs, t(0), c, 2, 80).daddr, a);
    let mut tun = *ipvs.tunables();
    tun.expire_quiescent_template = true;
    ipvs.set_tunables(tun);
    assert_ne!(syn(&mut ipvs, t(0), c, 3, 80).daddr, a);
    ipvs.audit().unwrap();
}

#[test]
fn deleted_dest_drops_by_default_reschedules_or_drains_by_choice() {
    for (tun, expect) in [
        (Tunables::default(), "drop"),
        (
            Tunables {
                expire_nodest_conn: true,
                ..Tunables::default()
            },
            "resched",
        ),
        (
            Tunables {
                drain_deleted: true,
                ..Tunables::default()
            },
            "drain",
        ),
    ] {
        let mut ipvs = director("rr", 2, ForwardMethod::Masq);
        ipvs.set_tunables(tun);
        let c = v4(1, 1, 1, 1);
        let a = syn(&mut ipvs, t(0), c, 1, 80);
        ipvs.process(t(0), &tcp_in(c, 1, 80, ACK));
        ipvs.del_dest(&tcp_svc(80), a.daddr, 80).unwrap();
        ipvs.audit().unwrap();
        let v = ipvs.process(t(1), &tcp_in(c, 1, 80, ACK));
        match expect {
            "drop" => assert_eq!(v, Verdict::Drop(DropReason::DestUnavailable)),
            // An ACK cannot start a connection: expired, then passed.
            "resched" => {
                assert_eq!(v, Verdict::Pass);
                assert!(ipvs.conns().is_empty());
            }
            _ => assert_eq!(fwd(v).daddr, a.daddr),
        }
        ipvs.audit().unwrap();
        // The trashed dest is freed once its last connection is gone.
        ipvs.expire(t(10_000));
        assert!(ipvs.dest(a.dest).is_none());
        ipvs.audit().unwrap();
    }
}

#[test]
fn re_adding_a_deleted_dest_resurrects_it() {
    let mut ipvs = director("rr", 1, ForwardMethod::Masq);
    let c = v4(1, 1, 1, 1);
    let a = syn(&mut ipvs, t(0), c, 1, 80);
    ipvs.del_dest(&tcp_svc(80), rs(1), 80).unwrap();
    let id = ipvs
        .add_dest(
            &tcp_svc(80),
            DestConfig::new(rs(1), 80).forward(ForwardMethod::Masq),
        )
        .unwrap();
    assert_eq!(id, a.dest);
    assert_eq!(ipvs.dest(id).unwrap().active, 1);
    assert_eq!(fwd(ipvs.process(t(0), &tcp_in(c, 1, 80, ACK))).daddr, rs(1));
    ipvs.audit().unwrap();
}

#[test]
fn thresholds_overload_and_recover() {
    let key = tcp_svc(80);
    let dests = [
        DestConfig::new(rs(1), 80).weight(100).thresholds(2, 1),
        DestConfig::new(rs(2), 80).weight(1),
    ];
    let mut ipvs = with_service(IpvsConfig::default(), key, svc_cfg(Scheduler::Wlc), dests);
    let picks: Vec<IpAddr> = (0..4)
        .map(|i| syn(&mut ipvs, t(0), v4(1, 1, 1, i), 1, 80).daddr)
        .collect();
    // rs1 (weight 100) takes two, then is overloaded; rs2 gets the rest.
    assert_eq!(picks.iter().filter(|&&a| a == rs(1)).count(), 2);
    let d1 = ipvs
        .service(&key)
        .unwrap()
        .dests()
        .iter()
        .find(|d| d.config.addr == rs(1))
        .unwrap()
        .id;
    assert!(ipvs.dest(d1).unwrap().overloaded);
    // Overload clears only below the lower threshold (1): both must go.
    for i in 0..4 {
        ipvs.process(t(1), &tcp_in(v4(1, 1, 1, i), 1, 80, RST));
    }
    ipvs.expire(t(100));
    assert!(!ipvs.dest(d1).unwrap().overloaded);
    ipvs.audit().unwrap();
}

#[test]
fn udp_is_always_inactive_and_one_packet_keeps_no_entry() {
    let key = udp_svc(53);
    let dest = DestConfig::new(rs(1), 53).forward(ForwardMethod::Masq);
    let mut ipvs = with_service(IpvsConfig::default(), key, svc_cfg(Scheduler::Rr), [dest]);
    let p = pkt(v4(1, 1, 1, 1), 999, IpAddr::V4(VIP), 53, L4::Udp);
    let f = fwd(ipvs.process(t(0), &p));
    assert!(f.new);
    assert!(!fwd(ipvs.process(t(1), &p)).new);
    assert_eq!(counts(&ipvs, &key), vec![(rs(1), 0, 1)]);
    assert_eq!(ipvs.conns().deadline(f.conn.unwrap()), Some(t(301)));
    ipvs.set_timeouts(0, 0, 30);
    ipvs.process(t(2), &p);
    assert_eq!(ipvs.conns().deadline(f.conn.unwrap()), Some(t(32)));

    let mut cfg = svc_cfg(Scheduler::Rr);
    cfg.one_packet = true;
    ipvs.edit_service(&key, cfg).unwrap();
    let q = pkt(v4(1, 1, 1, 2), 999, IpAddr::V4(VIP), 53, L4::Udp);
    let f = fwd(ipvs.process(t(3), &q));
    assert_eq!(f.conn, None);
    assert_eq!(ipvs.conns().len(), 1);
    assert_eq!(ipvs.service(&key).unwrap().stats().conns, 2);
}

#[test]
fn sip_call_id_persistence() {
    let mut cfg = svc_cfg(Scheduler::Rr).persistent(60);
    cfg.pe = Some(PersistenceEngine::Sip);
    let dests = (1..=3).map(|i| DestConfig::new(rs(i), 5060));
    let mut ipvs = with_service(IpvsConfig::default(), udp_svc(5060), cfg, dests);
    let msg =
        |call: &str| format!("INVITE sip:a@b SIP/2.0\r\nCall-ID: {call}\r\n\r\n").into_bytes();
    let (m1, m2) = (msg("call-one"), msg("call-two"));
    let c = v4(1, 1, 1, 1);
    let send = |ipvs: &mut Ipvs, sport: u16, m: &[u8]| {
        let p = Packet {
            payload: m,
            ..pkt(c, sport, IpAddr::V4(VIP), 5060, L4::Udp)
        };
        fwd(ipvs.process(t(0), &p)).daddr
    };
    let a = send(&mut ipvs, 1, &m1);
    let b = send(&mut ipvs, 2, &m2);
    assert_ne!(a, b, "different calls from one client are scheduled apart");
    assert_eq!(send(&mut ipvs, 3, &m1), a);
    assert_eq!(send(&mut ipvs, 4, &m2), b);
    let with_pe = ipvs
        .conns()
        .iter()
        .filter(|(id, _)| ipvs.conns().pe_data(*id).is_some())
        .count();
    assert_eq!(with_pe, 2);
}

#[test]
fn full_table_evicts_half_open_before_established() {
    let mut ipvs = one_server_table(50);
    let mut established = Vec::new();
    for i in 0..10 {
        let c = v4(1, 1, 1, i);
        established.push(syn(&mut ipvs, t(0), c, 1, 80).conn.unwrap());
        ipvs.process(t(0), &tcp_in(c, 1, 80, ACK));
    }
    // A SYN flood from 1000 sources.
    for i in 0..1000u32 {
        let c = IpAddr::V4(Ipv4Addr::from(0x0505_0000 + i));
        let v = ipvs.process(t(1), &tcp_in(c, 1, 80, SYN));
        assert!(matches!(v, Verdict::Forward(_)), "{v:?}");
    }
    assert_eq!(ipvs.conns().len(), 50);
    assert_eq!(ipvs.evictions(), 960);
    for id in established {
        assert_eq!(
            ipvs.conns().get(id).map(|c| c.state),
            Some(TcpState::Established as u8)
        );
    }
    ipvs.audit().unwrap();
}

#[test]
fn control_errors_leave_state_unchanged() {
    let mut ipvs = director("wlc", 2, ForwardMethod::Masq);
    let before = format!("{:?}", counts(&ipvs, &tcp_svc(80)));
    let cfg = ServiceConfig::new(AddrFamily::Inet);
    assert_eq!(
        ipvs.add_service(tcp_svc(80), cfg.clone()),
        Err(CtlError::ServiceExists)
    );
    assert_eq!(
        ipvs.edit_service(&tcp_svc(81), cfg.clone()),
        Err(CtlError::NoService)
    );
    // A scheduler that refuses its parameters (an unknown scheduler cannot
    // reach the core: it is a `Scheduler`, parsed where the name is read).
    let mut bad_mh = cfg.clone().scheduler(Scheduler::Mh);
    bad_mh.mh_table_size = 4094; // not a prime
    assert!(matches!(
        ipvs.edit_service(&tcp_svc(80), bad_mh.clone()),
        Err(CtlError::Invalid(_))
    ));
    assert!(matches!(
        ipvs.add_service(tcp_svc(81), bad_mh),
        Err(CtlError::Invalid(_))
    ));
    assert_eq!(
        "nope".parse::<Scheduler>().map_err(CtlError::from),
        Err(CtlError::SchedulerNotFound)
    );
    assert!(ipvs.service(&tcp_svc(81)).is_none());
    assert_eq!(
        ipvs.add_dest(&tcp_svc(80), DestConfig::new(rs(1), 80)),
        Err(CtlError::DestExists)
    );
    assert_eq!(
        ipvs.edit_dest(&tcp_svc(80), DestConfig::new(rs(9), 80)),
        Err(CtlError::NoDest)
    );
    assert_eq!(
        ipvs.del_dest(&tcp_svc(80), rs(9), 80),
        Err(CtlError::NoDest)
    );
    assert!(matches!(
        ipvs.add_dest(&tcp_svc(80), DestConfig::new(rs(5), 80).weight(65536)),
        Err(CtlError::Range(_))
    ));
    assert!(matches!(
        ipvs.add_dest(&tcp_svc(80), DestConfig::new(rs(5), 80).thresholds(1, 2)),
        Err(CtlError::Range(_))
    ));
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    assert!(matches!(
        ipvs.add_dest(&tcp_svc(80), DestConfig::new(v6, 80)),
        Err(CtlError::Invalid(_))
    ));
    assert_eq!(before, format!("{:?}", counts(&ipvs, &tcp_svc(80))));
    assert_eq!(
        ipvs.service(&tcp_svc(80)).unwrap().config().scheduler,
        Scheduler::Wlc
    );
    ipvs.audit().unwrap();
}

/// A real server of the other family is legal only behind an
/// encapsulating tunnel, never behind `opt` (which rewrites the packet):
/// the core holds the one rule, in rvsadm's words, for every source of
/// real servers, on an add as on an edit.
#[test]
fn a_real_server_of_the_other_family_needs_an_encapsulating_tunnel() {
    let mut ipvs = director("rr", 1, ForwardMethod::Route);
    let v6 = IpAddr::V6("2001:db8::2".parse().unwrap());
    let tunnel = |kind| {
        ForwardMethod::Tunnel(Tunnel {
            kind,
            ..Tunnel::default()
        })
    };
    let refused = |e: FamilyError| Some(CtlError::Invalid(e.to_string()));
    let before = format!("{:?}", counts(&ipvs, &tcp_svc(80)));
    for (forward, why) in [
        (ForwardMethod::Route, FamilyError::NotTunnel),
        (ForwardMethod::Masq, FamilyError::NotTunnel),
        (ForwardMethod::FullNat, FamilyError::NotTunnel),
        (tunnel(TunnelType::Opt), FamilyError::OptTunnel),
    ] {
        let d = DestConfig::new(v6, 80).forward(forward);
        assert_eq!(
            ipvs.add_dest(&tcp_svc(80), d).err(),
            refused(why),
            "{forward:?}"
        );
    }
    assert_eq!(before, format!("{:?}", counts(&ipvs, &tcp_svc(80))));
    assert_eq!(
        FamilyError::OptTunnel.to_string(),
        "Different address family is not allowed for --tun-type opt \
         (the packet is rewritten, not encapsulated)"
    );
    for kind in [
        TunnelType::Ipip,
        TunnelType::Gue,
        TunnelType::Gre,
        TunnelType::Geneve,
    ] {
        let port = if kind == TunnelType::Gue { 6080 } else { 0 };
        let fwd = ForwardMethod::Tunnel(Tunnel {
            kind,
            port,
            ..Tunnel::default()
        });
        ipvs.add_dest(&tcp_svc(80), DestConfig::new(v6, 80).forward(fwd))
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        ipvs.del_dest(&tcp_svc(80), v6, 80).unwrap();
    }
    // An edit of a tunnel server to opt meets the same rule.
    ipvs.add_dest(
        &tcp_svc(80),
        DestConfig::new(v6, 80).forward(tunnel(TunnelType::Ipip)),
    )
    .unwrap();
    assert_eq!(
        ipvs.edit_dest(
            &tcp_svc(80),
            DestConfig::new(v6, 80).forward(tunnel(TunnelType::Opt))
        )
        .err(),
        refused(FamilyError::OptTunnel)
    );
    // The same family is always legal, opt included.
    ipvs.add_dest(
        &tcp_svc(80),
        DestConfig::new(rs(7), 80).forward(tunnel(TunnelType::Opt)),
    )
    .unwrap();
    ipvs.audit().unwrap();
}

#[test]
fn ipv6_service_and_zeroing() {
    let mut ipvs = Ipvs::new(IpvsConfig::default());
    let vip = IpAddr::V6("2001:db8::1".parse().unwrap());
    let key = ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: vip,
        port: 80,
    };
    let cfg = ServiceConfig::new(AddrFamily::Inet6)
        .scheduler(Scheduler::Sh)
        .persistent(30)
        .netmask(PersistMask::V6(64));
    ipvs.add_service(key, cfg).unwrap();
    for i in 1..=3u16 {
        let a = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, i));
        ipvs.add_dest(&key, DestConfig::new(a, 80).forward(ForwardMethod::Masq))
            .unwrap();
    }
    let c1 = IpAddr::V6("2001:db8:aa:bb::1".parse().unwrap());
    let c2 = IpAddr::V6("2001:db8:aa:bb::ffff".parse().unwrap());
    let a = fwd(ipvs.process(t(0), &pkt(c1, 1, vip, 80, L4::Tcp(SYN))));
    let b = fwd(ipvs.process(t(0), &pkt(c2, 1, vip, 80, L4::Tcp(SYN))));
    assert_eq!(a.daddr, b.daddr, "same /64 -> same template");
    let r = ipvs.process(t(0), &pkt(a.daddr, 80, c1, 1, L4::Tcp(SYNACK)));
    assert!(matches!(r, Verdict::Reply(f) if f.vaddr == vip));
    assert_eq!(ipvs.service(&key).unwrap().stats().conns, 2);
    ipvs.zero(Some(&key)).unwrap();
    assert_eq!(ipvs.service(&key).unwrap().stats().conns, 0);
    assert_eq!(ipvs.dest(a.dest).map(|d| d.stats.inpkts), Some(0));
    assert_eq!(ipvs.zero(Some(&tcp_svc(1))), Err(CtlError::NoService));
}

#[test]
fn rates_follow_traffic() {
    let mut ipvs = director("rr", 2, ForwardMethod::Masq);
    ipvs.update_estimators(t(0));
    let mut n = 0u32;
    for s in 1..=60u64 {
        for _ in 0..10 {
            n += 1;
            let c = IpAddr::V4(Ipv4Addr::from(0x0101_0000 + n));
            ipvs.process(t(s), &tcp_in(c, 1, 80, SYN));
        }
        if s % 2 == 0 {
            ipvs.update_estimators(t(s));
        }
    }
    let r = ipvs.service(&tcp_svc(80)).unwrap().rates();
    assert_eq!((r.cps, r.inpps, r.inbps), (10, 10, 600));
    assert_eq!(ipvs.total_rates().cps, 10);
    let d = ipvs.service(&tcp_svc(80)).unwrap().dests()[0].id;
    assert_eq!(ipvs.dest_rates(d).cps, 5);
}

#[test]
fn unused_dest_ids_are_recycled() {
    let mut ipvs = director("rr", 1, ForwardMethod::Masq);
    for _ in 0..100 {
        ipvs.del_dest(&tcp_svc(80), rs(1), 80).unwrap();
        ipvs.add_dest(&tcp_svc(80), DestConfig::new(rs(1), 80))
            .unwrap();
    }
    assert_eq!(ipvs.service(&tcp_svc(80)).unwrap().dests()[0].id, DestId(0));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// Arbitrary control operations and packets never break the accounting.
    #[test]
    fn director_scripts_keep_invariants(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        rvs_core::fuzzing::run_director_script(&data);
    }
}

#[test]
fn timeouts_set_like_ipvsadm() {
    let mut ipvs = director("rr", 1, ForwardMethod::Route);
    assert_eq!(ipvs.timeouts().ipvsadm(), (900, 120, 300));
    ipvs.set_timeouts(10, 0, 0);
    assert_eq!(ipvs.timeouts().ipvsadm(), (10, 120, 300));
    let c = v4(1, 1, 1, 1);
    let id = syn(&mut ipvs, t(0), c, 1, 80).conn.unwrap();
    ipvs.process(t(0), &tcp_in(c, 1, 80, ACK));
    assert_eq!(ipvs.expire(t(9)), 0);
    assert_eq!(ipvs.expire(t(10)), 1);
    assert!(ipvs.conns().get(id).is_none());
}

#[test]
fn add_service_with_equals_one_by_one_and_is_all_or_nothing() {
    let dests: Vec<DestConfig> = (1..=5)
        .map(|i| DestConfig::new(rs(i), 80).weight(u32::from(i)))
        .collect();
    let mut a = Ipvs::new(IpvsConfig::default());
    let cfg = ServiceConfig::new(AddrFamily::Inet).scheduler(Scheduler::Mh);
    a.add_service_with(tcp_svc(80), cfg.clone(), &dests)
        .unwrap();
    let mut b = Ipvs::new(IpvsConfig::default());
    b.add_service(tcp_svc(80), cfg.clone()).unwrap();
    for d in &dests {
        b.add_dest(&tcp_svc(80), *d).unwrap();
    }
    let order = |x: &Ipvs| {
        x.service(&tcp_svc(80))
            .unwrap()
            .dests()
            .iter()
            .map(|d| d.config)
            .collect::<Vec<_>>()
    };
    assert_eq!(order(&a), order(&b));
    for i in 0..200u32 {
        let c = IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i * 7919));
        let p = tcp_in(c, 1, 80, SYN);
        assert_eq!(
            fwd(a.process(t(0), &p)).daddr,
            fwd(b.process(t(0), &p)).daddr
        );
    }
    a.audit().unwrap();
    // A duplicate or an invalid server rejects the whole service.
    let mut bad = dests.clone();
    bad.push(DestConfig::new(rs(1), 80));
    assert_eq!(
        a.add_service_with(tcp_svc(81), cfg.clone(), &bad),
        Err(CtlError::DestExists)
    );
    bad.pop();
    bad.push(DestConfig::new(rs(9), 80).weight(70_000));
    assert!(matches!(
        a.add_service_with(tcp_svc(81), cfg.clone(), &bad),
        Err(CtlError::Range(_))
    ));
    assert!(a.service(&tcp_svc(81)).is_none());
    assert_eq!(
        a.add_service_with(tcp_svc(80), cfg, &[]),
        Err(CtlError::ServiceExists)
    );
    a.audit().unwrap();
}

/// Found by the `director` fuzz target: with the table full, creating a
/// connection under an existing template must not evict that template.
#[test]
fn full_table_never_evicts_the_template_in_use() {
    let table = IpvsConfig {
        conn_capacity: 2,
        ..IpvsConfig::default()
    };
    let cfg = svc_cfg(Scheduler::Rr).persistent(1);
    let mut ipvs = with_service(table, udp_svc(53), cfg, [DestConfig::new(rs(1), 53)]);
    let c = v4(1, 1, 1, 1);
    // Template (1 s) + connection (300 s) fill the table.
    fwd(ipvs.process(t(0), &pkt(c, 1, IpAddr::V4(VIP), 53, L4::Udp)));
    // Another client port: the template (deadline soonest) is the natural
    // victim, but it is in use for this very connection.
    for sport in 2..6 {
        let f = fwd(ipvs.process(t(0), &pkt(c, sport, IpAddr::V4(VIP), 53, L4::Udp)));
        let conn = ipvs.conns().get(f.conn.unwrap()).unwrap();
        assert_ne!(conn.control, f.conn.unwrap().0);
        ipvs.audit().unwrap();
    }
}

mod proxy_api {
    use super::*;
    use rvs_core::state::Direction;
    use std::net::SocketAddr;

    fn sa(ip: IpAddr, port: u16) -> SocketAddr {
        SocketAddr::new(ip, port)
    }

    /// The proxy's socket accepted at `at` from 1.1.1.1:`port` to VIP:80,
    /// and its connection.
    fn open(ipvs: &mut Ipvs, at: Instant, port: u16) -> (Forward, ConnId) {
        let vip = sa(IpAddr::V4(VIP), 80);
        let f = ipvs
            .open(at, Protocol::Tcp, sa(v4(1, 1, 1, 1), port), vip)
            .unwrap();
        (f, f.conn.expect("a TCP connection has an entry"))
    }

    /// The connection `id` connected at `at`: the server's SYN+ACK, then
    /// the client's ACK.
    fn connect(ipvs: &mut Ipvs, at: Instant, id: ConnId) {
        ipvs.conn_event(at, id, Direction::Output, L4::Tcp(SYNACK), 0);
        ipvs.conn_event(at, id, Direction::Input, L4::Tcp(ACK), 0);
    }

    /// The connection `id` closed from both sides at `at`: the client's
    /// FIN, then the server's.
    fn close_both(ipvs: &mut Ipvs, at: Instant, id: ConnId) {
        ipvs.conn_event(at, id, Direction::Input, L4::Tcp(FIN), 0);
        ipvs.conn_event(at, id, Direction::Output, L4::Tcp(FIN), 0);
    }

    /// Issue 29: a closed connection of the proxy plane lingers in its
    /// closing state as the kernel's does (listed, inactive, and so sent by
    /// a sync master), instead of vanishing at once; one closed while still
    /// established goes at once.
    /// A lingering closed connection does not hold its persistence
    /// template: the template ends at its own timeout (what Kubernetes'
    /// `sessionAffinity.clientIP.timeoutSeconds` needs), while the closed
    /// entry stays listed until its closing state's timer.
    #[test]
    fn a_released_connection_does_not_hold_its_template() {
        let cfg = svc_cfg(Scheduler::Rr).persistent(10);
        let dest = DestConfig::new(rs(1), 80).forward(ForwardMethod::FullNat);
        let mut ipvs = with_service(IpvsConfig::default(), tcp_svc(80), cfg, [dest]);
        let (_, id) = open(&mut ipvs, t(0), 5000);
        connect(&mut ipvs, t(0), id);
        close_both(&mut ipvs, t(1), id);
        ipvs.release(id);
        ipvs.audit().unwrap();
        assert_eq!(templates(&ipvs).len(), 1);
        // Past the template's 10 s, within TIME_WAIT's 2 minutes.
        ipvs.expire(t(30));
        assert_eq!(templates(&ipvs).len(), 0, "the template timed out");
        assert!(ipvs.conns().get(id).is_some(), "the closed entry lingers");
        ipvs.audit().unwrap();
    }

    #[test]
    fn a_released_connection_stays_in_its_closing_state_until_its_timer() {
        let mut ipvs = director("rr", 1, ForwardMethod::FullNat);
        let (f, id) = open(&mut ipvs, t(0), 5000);
        connect(&mut ipvs, t(0), id);
        close_both(&mut ipvs, t(1), id);
        let closing = ipvs.conns().get(id).unwrap().state;
        assert_ne!(closing, TcpState::Established as u8);
        ipvs.release(id);
        let c = ipvs.conns().get(id).expect("listed after the close");
        assert_eq!(c.state, closing);
        let d = ipvs.dest(f.dest).unwrap();
        assert_eq!((d.active, d.inactive), (0, 1));
        // No longer held: its state's timer ends it.
        ipvs.expire(t(3600));
        assert!(ipvs.conns().is_empty());
        let d = ipvs.dest(f.dest).unwrap();
        assert_eq!((d.active, d.inactive), (0, 0));
        // Released while established (no FIN seen): removed now.
        let (_, id) = open(&mut ipvs, t(4000), 5001);
        connect(&mut ipvs, t(4000), id);
        ipvs.release(id);
        assert!(ipvs.conns().is_empty());
        ipvs.audit().unwrap();
    }

    #[test]
    fn open_event_close_follow_the_socket() {
        let mut ipvs = director("rr", 2, ForwardMethod::FullNat);
        let (f, id) = open(&mut ipvs, t(0), 5000);
        assert_eq!(ipvs.conns().get(id).unwrap().state, TcpState::SynRecv as u8);
        connect(&mut ipvs, t(0), id);
        assert_eq!(
            ipvs.conns().get(id).unwrap().state,
            TcpState::Established as u8
        );
        ipvs.conn_traffic(id, 3, 300, 5, 5000);
        // Held: an idle hour later it is still there.
        ipvs.expire(t(3600));
        assert!(ipvs.conns().get(id).is_some());
        ipvs.conn_event(t(3600), id, Direction::Input, L4::Tcp(FIN), 0);
        assert_eq!(
            ipvs.conns().get(id).unwrap().state,
            TcpState::CloseWait as u8
        );
        ipvs.close(id);
        assert!(ipvs.conns().is_empty());
        let d = ipvs.dest(f.dest).unwrap();
        assert_eq!((d.active, d.inactive), (0, 0));
        assert_eq!(
            (
                d.stats.conns,
                d.stats.inbytes,
                d.stats.outbytes,
                d.stats.outpkts
            ),
            (1, 300, 5000, 5)
        );
        ipvs.audit().unwrap();
    }

    #[test]
    fn retry_elsewhere_skips_the_failed_server_and_its_template() {
        let key = tcp_svc(80);
        let cfg = svc_cfg(Scheduler::Wlc).persistent(60);
        let dests = (1..=3).map(|i| DestConfig::new(rs(i), 80).forward(ForwardMethod::FullNat));
        let mut ipvs = with_service(IpvsConfig::default(), key, cfg, dests);
        let (client, vip) = (sa(v4(1, 1, 1, 1), 5000), sa(IpAddr::V4(VIP), 80));
        let first = ipvs.open(t(0), Protocol::Tcp, client, vip).unwrap();
        let second = ipvs
            .retry_elsewhere(t(0), first.conn.unwrap(), &[], Protocol::Tcp, client, vip)
            .unwrap();
        assert_ne!(second.daddr, first.daddr);
        let third = ipvs
            .retry_elsewhere(
                t(0),
                second.conn.unwrap(),
                &[first.dest],
                Protocol::Tcp,
                client,
                vip,
            )
            .unwrap();
        assert!(third.daddr != first.daddr && third.daddr != second.daddr);
        // The new template now pins the client to the third server.
        let (again, _) = open(&mut ipvs, t(1), 5001);
        assert_eq!(again.daddr, third.daddr);
        // Overload marks used for the retries are gone.
        assert!(
            ipvs.service(&key)
                .unwrap()
                .dests()
                .iter()
                .all(|d| !d.overloaded)
        );
        ipvs.audit().unwrap();
    }

    #[test]
    fn a_table_full_of_held_sockets_refuses_instead_of_evicting() {
        let mut ipvs = one_server_table(4);
        let vip = sa(IpAddr::V4(VIP), 80);
        let held: Vec<_> = (0..4)
            .map(|i| {
                ipvs.open(t(0), Protocol::Tcp, sa(v4(1, 1, 1, i), 1), vip)
                    .unwrap()
                    .conn
                    .unwrap()
            })
            .collect();
        assert_eq!(
            ipvs.open(t(0), Protocol::Tcp, sa(v4(1, 1, 1, 9), 1), vip),
            Err(Verdict::Drop(DropReason::TableFull))
        );
        assert!(held.iter().all(|id| ipvs.conns().get(*id).is_some()));
        assert_eq!(ipvs.evictions(), 0);
        // No service / no server are told apart.
        assert_eq!(
            ipvs.open(
                t(0),
                Protocol::Tcp,
                sa(v4(1, 1, 1, 9), 1),
                sa(v4(9, 9, 9, 9), 80)
            ),
            Err(Verdict::Pass)
        );
        ipvs.close(held[0]);
        ipvs.edit_dest(&tcp_svc(80), DestConfig::new(rs(1), 80).weight(0))
            .unwrap();
        assert_eq!(
            ipvs.open(t(0), Protocol::Tcp, sa(v4(1, 1, 1, 9), 1), vip),
            Err(Verdict::Reject)
        );
        ipvs.audit().unwrap();
    }

    #[test]
    fn weight_zero_and_delete_drain_held_connections() {
        let mut ipvs = director("rr", 1, ForwardMethod::FullNat);
        let mut tun = *ipvs.tunables();
        tun.drain_deleted = true;
        ipvs.set_tunables(tun);
        let (f, id) = open(&mut ipvs, t(0), 1);
        ipvs.conn_event(t(0), id, Direction::Input, L4::Tcp(ACK), 0);
        ipvs.del_dest(&tcp_svc(80), rs(1), 80).unwrap();
        // The deleted server's connection keeps working and counting.
        ipvs.conn_event(t(1), id, Direction::Input, L4::Tcp(ACK), 100);
        assert_eq!(ipvs.dest(f.dest).map(|d| d.stats.inbytes), Some(100));
        ipvs.expire(t(10_000));
        assert!(ipvs.conns().get(id).is_some());
        ipvs.close(id);
        assert!(
            ipvs.dest(f.dest).is_none(),
            "freed with its last connection"
        );
        ipvs.audit().unwrap();
    }
}

/// A data plane's TCP flow 1.2.3.4:5555 -> VIP:80 on `dest` in `state`,
/// idle for 50 s more, as it reports it to be mirrored.
fn mirrored(dest: DestId, state: TcpState) -> MirroredConn {
    MirroredConn {
        protocol: Protocol::Tcp,
        client: "1.2.3.4:5555".parse().unwrap(),
        vip: std::net::SocketAddr::new(IpAddr::V4(VIP), 80),
        dest,
        state: state as u8,
        output_seen: false,
        idle_left: Duration::from_secs(50),
        template: false,
        local: None,
    }
}

/// A packet data plane's flows mirrored into the table: created bound to
/// the chosen server, moved between active and inactive as their state
/// changes, expired by the table's timer, counters added separately.
#[test]
fn mirrored_flows_follow_the_data_plane() {
    use rvs_core::stats::Counters;
    let mut ipvs = director("rr", 2, ForwardMethod::Route);
    let key = tcp_svc(80);
    let dest = ipvs.service(&key).unwrap().dests()[0].id;
    let daddr = ipvs.service(&key).unwrap().dests()[0].config.addr;
    let mut flow = mirrored(dest, TcpState::SynRecv);
    let id = ipvs.mirror_conn(t(0), &flow).unwrap();
    let of = |ipvs: &Ipvs| counts(ipvs, &key).into_iter().find(|c| c.0 == daddr);
    assert_eq!(of(&ipvs), Some((daddr, 1, 0)), "SYN_RECV is active");
    flow.state = TcpState::FinWait as u8;
    flow.idle_left = Duration::from_secs(100);
    assert_eq!(ipvs.mirror_conn(t(1), &flow), Some(id), "same entry");
    assert_eq!(of(&ipvs), Some((daddr, 0, 1)), "FIN_WAIT is inactive");
    assert_eq!(ipvs.conns().get(id).unwrap().state, TcpState::FinWait as u8);
    assert_eq!(ipvs.conns().deadline(id), Some(t(101)));
    ipvs.add_counters(
        dest,
        &Counters {
            conns: 1,
            inpkts: 3,
            outpkts: 0,
            inbytes: 180,
            outbytes: 0,
        },
    );
    assert_eq!(ipvs.service(&key).unwrap().stats().inpkts, 3);
    assert_eq!(ipvs.total_stats().inbytes, 180);
    ipvs.audit().unwrap();
    assert_eq!(ipvs.expire(t(102)), 1);
    assert_eq!(of(&ipvs), Some((daddr, 0, 0)));
    // A persistence template: counted in the real server's persistent
    // connections, expired by its own timer.
    let tpl = MirroredConn {
        client: "1.2.3.0:0".parse().unwrap(),
        template: true,
        state: 0,
        idle_left: Duration::from_secs(300),
        ..flow
    };
    let tid = ipvs.mirror_conn(t(102), &tpl).unwrap();
    assert!(ipvs.conns().get(tid).unwrap().is_template());
    assert_eq!(ipvs.mirror_conn(t(103), &tpl), Some(tid), "same template");
    let persist = |ipvs: &Ipvs| {
        let s = ipvs.service(&key).unwrap();
        s.dests().iter().find(|d| d.id == dest).unwrap().persist
    };
    assert_eq!(persist(&ipvs), 1);
    assert_eq!(ipvs.expire(t(404)), 1);
    assert_eq!(persist(&ipvs), 0);
    flow.dest = rvs_core::dest::DestId(9999);
    assert_eq!(ipvs.mirror_conn(t(103), &flow), None, "unknown server");
    ipvs.audit().unwrap();
}

/// A mirrored (or synced) FULLNAT flow's local address and port is
/// recorded on its entry (what `-Lcn` shows); a later report without one
/// leaves it; a template never gets one.
#[test]
fn mirrored_flows_keep_their_fullnat_local_pair() {
    let mut ipvs = director("rr", 2, ForwardMethod::FullNat);
    let dest = ipvs.service(&tcp_svc(80)).unwrap().dests()[0].id;
    let local: std::net::SocketAddr = "10.3.0.1:40000".parse().unwrap();
    let mut flow = MirroredConn {
        output_seen: true,
        local: Some(local),
        ..mirrored(dest, TcpState::Established)
    };
    let id = ipvs.mirror_conn(t(0), &flow).unwrap();
    let pair = |ipvs: &Ipvs, id| {
        ipvs.conns()
            .local(id)
            .map(|(a, p)| std::net::SocketAddr::new(a.to_ip(AddrFamily::Inet), p))
    };
    assert_eq!(pair(&ipvs, id), Some(local));
    flow.local = None;
    assert_eq!(ipvs.mirror_conn(t(1), &flow), Some(id));
    assert_eq!(pair(&ipvs, id), Some(local), "kept without a new one");
    let moved: std::net::SocketAddr = "10.3.0.2:40001".parse().unwrap();
    flow.local = Some(moved);
    assert_eq!(ipvs.mirror_conn(t(2), &flow), Some(id));
    assert_eq!(pair(&ipvs, id), Some(moved), "a new pair replaces it");
    let tpl = MirroredConn {
        client: "1.2.3.0:0".parse().unwrap(),
        template: true,
        state: 0,
        local: Some(local),
        ..flow
    };
    let tid = ipvs.mirror_conn(t(2), &tpl).unwrap();
    assert_eq!(pair(&ipvs, tid), None);
    ipvs.audit().unwrap();
}

#[test]
fn laddr_pool_is_the_services_and_survives_edit() {
    let key = tcp_svc(80);
    let mut ipvs = director("rr", 1, ForwardMethod::FullNat);
    let a = LocalAddrRange::parse("10.9.0.1-10.9.0.4").unwrap();
    assert_eq!(ipvs.add_laddr(&tcp_svc(81), a), Err(CtlError::NoService));
    ipvs.add_laddr(&key, a).unwrap();
    assert_eq!(
        ipvs.add_laddr(&key, LocalAddrRange::parse("10.9.0.4").unwrap()),
        Err(CtlError::LaddrExists)
    );
    assert!(matches!(
        ipvs.add_laddr(&key, LocalAddrRange::parse("2001:db8::1").unwrap()),
        Err(CtlError::Invalid(_))
    ));
    let b = LocalAddrRange::single(v4(10, 9, 0, 9));
    ipvs.add_laddr(&key, b).unwrap();
    let cfg = ipvs.service(&key).unwrap().config().clone();
    ipvs.edit_service(&key, cfg).unwrap();
    assert_eq!(ipvs.service(&key).unwrap().laddrs(), &[a, b]);
    // Deleting names an entry exactly as added.
    assert_eq!(
        ipvs.del_laddr(&key, LocalAddrRange::single(v4(10, 9, 0, 2))),
        Err(CtlError::NoLaddr)
    );
    ipvs.del_laddr(&key, a).unwrap();
    assert_eq!(ipvs.service(&key).unwrap().laddrs(), &[b]);
}
