//! Scheduler vectors: for many clients the BPF program's choice equals
//! rvs-core's choice, with tables built by the core (sh, dh, mh) and the
//! stateful walks (rr, wrr) compared decision by decision. Needs root.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use rvs_xdp::action;
use rvs_xdp::maps::{PROTO_TCP, SvcKey, dest_flags, fwd, svc_flags};

const VPORT: u16 = 443;
const CLIENTS: u32 = 160;

/// Five real servers: weights 1, 2, 3, quiesced (0, was 2), overloaded 2.
fn servers(v6: bool) -> Vec<Rs> {
    let mut rs: Vec<Rs> = (0..5)
        .map(|i| Rs::new(rs_addr(v6, i), fwd::DR, rs_mac(i)))
        .collect();
    rs[0] = rs[0].clone().weight(1);
    rs[1] = rs[1].clone().weight(2);
    rs[2] = rs[2].clone().weight(3);
    rs[3].weight = 0;
    rs[3].last_weight = 2;
    rs[4] = rs[4].clone().weight(2);
    rs[4].flags = dest_flags::OVERLOADED;
    rs
}

/// The BPF choice for a SYN: the flow's dest index, `None` when passed.
fn bpf_choice(lb: &mut Lb, c: IpAddr, cport: u16, v: IpAddr) -> Option<u32> {
    let r = lb.run(&tcp_frame(c, cport, v, VPORT, Flags::Syn, b""));
    match r.action {
        action::TX => lb.flow_dest(PROTO_TCP, c, cport, v, VPORT),
        action::PASS => None,
        a => panic!("unexpected action {a}"),
    }
}

fn hashing(sched: &str, flags: u32, v6: bool) {
    let Some(mut lb) = Lb::new("hashing vectors") else {
        return;
    };
    let v = vip(v6);
    lb.service(
        0,
        SvcKey::new(PROTO_TCP, v, VPORT),
        sched,
        flags,
        &servers(v6),
    );
    let (mut core, dests) = lb.core_scheduler(0);
    let (mut hits, mut misses) = (0, 0);
    for i in 0..CLIENTS {
        let c = client(v6, i.wrapping_mul(2_654_435_761) >> 8);
        let cport = (i as u16).wrapping_mul(977).wrapping_add(1024);
        let want = Lb::core_choice(core.as_mut(), &dests, 0, &sched_input(c, cport, v, VPORT));
        let got = bpf_choice(&mut lb, c, cport, v);
        assert_eq!(
            got, want,
            "{sched} flags {flags:#x} v6 {v6} client {c} port {cport}"
        );
        if got.is_some() {
            hits += 1
        } else {
            misses += 1
        }
    }
    // The vectors exercise both outcomes unless fallback finds a server.
    assert!(hits > 0, "{sched}: some clients scheduled");
    if flags & svc_flags::SCHED1 == 0 {
        assert!(
            misses > 0,
            "{sched}: some clients hash to an ineligible server"
        );
    }
}

#[test]
fn sh_matches_core() {
    for v6 in [false, true] {
        hashing("sh", 0, v6);
        hashing("sh", svc_flags::SCHED2, v6);
        hashing("sh", svc_flags::SCHED1 | svc_flags::SCHED2, v6);
    }
}

#[test]
fn mh_matches_core() {
    for v6 in [false, true] {
        hashing("mh", 0, v6);
        hashing("mh", svc_flags::SCHED2, v6);
        hashing("mh", svc_flags::SCHED1, v6);
    }
}

#[test]
fn dh_matches_core() {
    for v6 in [false, true] {
        let Some(mut lb) = Lb::new("dh_matches_core") else {
            return;
        };
        // dh hashes the destination: many VIPs share service 0.
        let vips: Vec<IpAddr> = (0..CLIENTS)
            .map(|i| {
                if v6 {
                    Ipv6Addr::new(0xfd77, 2, 0, 0, 0, 0, 0, i as u16 * 37 + 1).into()
                } else {
                    Ipv4Addr::from(0x0a4d_0200 + i * 37 + 1).into()
                }
            })
            .collect();
        lb.service(
            0,
            SvcKey::new(PROTO_TCP, vips[0], VPORT),
            "dh",
            0,
            &servers(v6),
        );
        for &v in &vips {
            lb.l.set_service(&SvcKey::new(PROTO_TCP, v, VPORT), 0)
                .unwrap();
        }
        let (mut core, dests) = lb.core_scheduler(0);
        let c = client(v6, 1);
        let mut hits = 0;
        for (i, &v) in vips.iter().enumerate() {
            let want = Lb::core_choice(
                core.as_mut(),
                &dests,
                0,
                &sched_input(c, 2000 + i as u16, v, VPORT),
            );
            let got = bpf_choice(&mut lb, c, 2000 + i as u16, v);
            assert_eq!(got, want, "dh v6 {v6} vip {v}");
            hits += usize::from(got.is_some());
        }
        assert!(hits > 0 && hits < vips.len());
    }
}

fn walk(sched: &str, weights: &[u32]) {
    let Some(mut lb) = Lb::new("walk vectors") else {
        return;
    };
    let v = vip(false);
    let rs: Vec<Rs> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| Rs::new(rs_addr(false, i as u8), fwd::DR, rs_mac(i as u8)).weight(w))
        .collect();
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), sched, 0, &rs);
    let (mut core, dests) = lb.core_scheduler(0);
    for i in 0..CLIENTS {
        let c = client(false, i);
        let want = Lb::core_choice(core.as_mut(), &dests, 0, &sched_input(c, 5000, v, VPORT));
        let got = bpf_choice(&mut lb, c, 5000, v);
        assert_eq!(got, want, "{sched} {weights:?} decision {i}");
    }
}

#[test]
fn rr_matches_core() {
    walk("rr", &[1, 1, 1]);
    walk("rr", &[5, 1, 2, 7, 1, 1, 1]);
}

#[test]
fn wrr_matches_core() {
    walk("wrr", &[4, 3, 2]);
    walk("wrr", &[8, 6, 4, 2]);
    walk("wrr", &[1, 5, 1, 9, 3]);
}

/// A small deterministic generator for the counter vectors.
fn lcg(x: &mut u64) -> u32 {
    *x = x
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (*x >> 33) as u32
}

/// lc, wlc, sed, nq, fo, ovf: with random ActiveConn/InActConn written both into
/// `dest_conns` and into the core's servers, the program picks what the core
/// picks, and counts the new flow as active on the chosen server.
fn least(sched: &str) {
    let Some(mut lb) = Lb::new("least-connection vectors") else {
        return;
    };
    let v = vip(false);
    let mut rs = servers(false);
    rs.push(Rs::new(rs_addr(false, 5), fwd::DR, rs_mac(5)).weight(7));
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), sched, 0, &rs);
    let (_, mut dests) = lb.core_scheduler(0);
    let mut seed = 42u64;
    for i in 0..CLIENTS {
        for (p, d) in dests.iter_mut().enumerate() {
            // Small ranges so ties and zero-active servers occur.
            d.active = lcg(&mut seed) % 4;
            d.inactive = lcg(&mut seed) % 600;
            let c = rvs_xdp::maps::DestConns {
                active: d.active,
                inactive: d.inactive,
            };
            lb.l.set_dest_conns(Lb::dest_index(0, p), &c).unwrap();
        }
        let mut core = rvs_core::sched::new_scheduler(sched, &Default::default()).unwrap();
        core.update(&dests, rvs_core::sched::ListChange::Reset);
        let c = client(false, i);
        let want = Lb::core_choice(core.as_mut(), &dests, 0, &sched_input(c, 7000, v, VPORT));
        let got = bpf_choice(&mut lb, c, 7000, v);
        assert_eq!(got, want, "{sched} decision {i}");
        if let Some(idx) = got {
            let p = (idx % 1000) as usize;
            let after = lb.l.dest_conns(idx).unwrap();
            assert_eq!(
                (after.active, after.inactive),
                (dests[p].active + 1, dests[p].inactive),
                "a SYN_RECV flow is active"
            );
        }
    }
}

#[test]
fn lc_matches_core() {
    least("lc");
}

#[test]
fn wlc_matches_core() {
    least("wlc");
}

#[test]
fn sed_matches_core() {
    least("sed");
}

#[test]
fn nq_matches_core() {
    least("nq");
}

#[test]
fn fo_matches_core() {
    least("fo");
}

#[test]
fn ovf_matches_core() {
    least("ovf");
}

#[test]
fn connection_counters_follow_tcp_states() {
    let Some(mut lb) = Lb::new("connection_counters_follow_tcp_states") else {
        return;
    };
    let rs = [Rs::new(rs_addr(false, 0), fwd::DR, rs_mac(0))];
    let v = vip(false);
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), "wlc", 0, &rs);
    let idx = Lb::dest_index(0, 0);
    let conns = |lb: &mut Lb| {
        let c = lb.l.dest_conns(idx).unwrap();
        (c.active, c.inactive)
    };
    let (a, b) = (client(false, 1), client(false, 2));
    lb.run(&tcp_frame(a, 1, v, VPORT, Flags::Syn, b""));
    lb.run(&tcp_frame(b, 1, v, VPORT, Flags::Syn, b""));
    assert_eq!(conns(&mut lb), (2, 0)); // SYN_RECV x2
    lb.run(&tcp_frame(a, 1, v, VPORT, Flags::Ack, b""));
    assert_eq!(conns(&mut lb), (2, 0)); // ESTABLISHED is active too
    lb.run(&tcp_frame(a, 1, v, VPORT, Flags::Fin, b""));
    assert_eq!(conns(&mut lb), (1, 1)); // FIN_WAIT: inactive
    // IPVS keeps a SYN_RECV flow in SYN_RECV on a client RST; from
    // ESTABLISHED a RST closes.
    lb.run(&tcp_frame(b, 1, v, VPORT, Flags::Rst, b""));
    assert_eq!(conns(&mut lb), (1, 1));
    lb.run(&tcp_frame(b, 1, v, VPORT, Flags::Ack, b""));
    lb.run(&tcp_frame(b, 1, v, VPORT, Flags::Rst, b""));
    assert_eq!(conns(&mut lb), (0, 2)); // CLOSE
    // A new SYN on the closed flow replaces it: the old one leaves the
    // inactive count, the new one is active.
    lb.run(&tcp_frame(b, 1, v, VPORT, Flags::Syn, b""));
    assert_eq!(conns(&mut lb), (1, 1));
}

/// `n` VIPs sharing service 0 (lblc/lblcr key their tables by the
/// packet's destination address).
fn shared_vips(lb: &mut Lb, v6: bool, n: u32) -> Vec<IpAddr> {
    let vips: Vec<IpAddr> = (0..n)
        .map(|i| {
            if v6 {
                Ipv6Addr::new(0xfd77, 3, 0, 0, 0, 0, 0, i as u16 * 11 + 1).into()
            } else {
                Ipv4Addr::from(0x0a4d_0300 + i * 11 + 1).into()
            }
        })
        .collect();
    for &v in &vips {
        lb.l.set_service(&SvcKey::new(PROTO_TCP, v, VPORT), 0)
            .unwrap();
    }
    vips
}

/// lblc / lblcr: decision by decision against one core scheduler that
/// keeps its destination-address table, with random counters written into
/// both (small ranges, so the "more active than weight while some server is
/// half idle" rule fires both ways) and destinations drawn from six VIPs.
fn locality(sched: &str, v6: bool) {
    let Some(mut lb) = Lb::new("locality vectors") else {
        return;
    };
    let mut rs = servers(v6);
    rs.push(Rs::new(rs_addr(v6, 5), fwd::DR, rs_mac(5)).weight(7));
    lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), VPORT), sched, 0, &rs);
    let vips = shared_vips(&mut lb, v6, 6);
    let (mut core, mut dests) = lb.core_scheduler(0);
    let mut seed = 7u64;
    let (mut sticky, mut fallback) = (0, 0);
    for i in 0..CLIENTS {
        for (p, d) in dests.iter_mut().enumerate() {
            d.active = lcg(&mut seed) % 5;
            d.inactive = lcg(&mut seed) % 300;
            let c = rvs_xdp::maps::DestConns {
                active: d.active,
                inactive: d.inactive,
            };
            lb.l.set_dest_conns(Lb::dest_index(0, p), &c).unwrap();
        }
        core.update(&dests, rvs_core::sched::ListChange::Reset);
        let v = vips[(lcg(&mut seed) % 6) as usize];
        let c = client(v6, i);
        let input = sched_input(c, 7000, v, VPORT);
        let want = Lb::core_choice(core.as_mut(), &dests, 0, &input);
        let got = bpf_choice(&mut lb, c, 7000, v);
        assert_eq!(got, want, "{sched} v6 {v6} decision {i} to {v}");
        let mut wlc = rvs_core::sched::new_scheduler("wlc", &Default::default()).unwrap();
        wlc.update(&dests, rvs_core::sched::ListChange::Reset);
        if Lb::core_choice(wlc.as_mut(), &dests, 0, &input) == got {
            fallback += 1;
        } else {
            sticky += 1;
        }
    }
    // Both the cached choice (not what WLC says) and WLC happen.
    assert!(sticky > 10 && fallback > 10, "{sched}: {sticky} {fallback}");
    // Every VIP has its entry; lblc names one server, lblcr a set.
    for &v in &vips {
        let e =
            lb.l.locality(&rvs_xdp::maps::LocalityKey::new(0, v))
                .unwrap()
                .expect("entry");
        let m = e.members();
        assert!(!m.is_empty() && m.iter().all(|&d| d < 6), "{m:?}");
        if sched == "lblc" {
            assert_eq!(m.len(), 1);
        }
    }
}

#[test]
fn lblc_matches_core() {
    locality("lblc", false);
    locality("lblc", true);
}

#[test]
fn lblcr_matches_core() {
    locality("lblcr", false);
    locality("lblcr", true);
}

fn set_conns(lb: &mut Lb, idx: u32, active: u32) {
    let c = rvs_xdp::maps::DestConns {
        active,
        inactive: 0,
    };
    lb.l.set_dest_conns(idx, &c).unwrap();
}

/// Age an entry by `secs` seconds (lastuse and lastmod).
fn age(lb: &mut Lb, key: &rvs_xdp::maps::LocalityKey, secs: u64) {
    let hz = u64::from(rvs_xdp::kernel_hz().unwrap());
    let mut e = lb.l.locality(key).unwrap().expect("entry");
    e.lastuse -= secs * hz;
    e.lastmod -= secs * hz;
    lb.l.set_locality(key, &e).unwrap();
}

/// lblc: an entry unused for the expiration time is gone (WLC decides
/// again); a cached server that left the service is never used, even when
/// its index is an eligible server of another service.
#[test]
fn lblc_entries_expire_and_foreign_members_are_ignored() {
    let Some(mut lb) = Lb::new("lblc_entries_expire_and_foreign_members_are_ignored") else {
        return;
    };
    let mut cfg = rvs_xdp::maps::Config::ipvs_defaults();
    cfg.tun_src4 = TUN4.octets();
    cfg.locality_expiration = 60;
    lb.l.set_config(&cfg).unwrap();
    let rs: Vec<Rs> = (0..2)
        .map(|i| Rs::new(rs_addr(false, i), fwd::DR, rs_mac(i)).weight(4))
        .collect();
    let v = vip(false);
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), "lblc", 0, &rs);
    let other = [Rs::new(rs_addr(false, 9), fwd::DR, rs_mac(9)).weight(100)];
    lb.service(
        1,
        SvcKey::new(PROTO_TCP, vip(true), VPORT),
        "lblc",
        0,
        &other,
    );
    let key = rvs_xdp::maps::LocalityKey::new(0, v);
    let (s0, s1) = (Lb::dest_index(0, 0), Lb::dest_index(0, 1));
    assert_eq!(bpf_choice(&mut lb, client(false, 1), 1, v), Some(s0));
    // Server 0 busier than 1 but within its weight: still cached.
    set_conns(&mut lb, s0, 3);
    set_conns(&mut lb, s1, 0);
    assert_eq!(bpf_choice(&mut lb, client(false, 2), 1, v), Some(s0));
    age(&mut lb, &key, 59);
    assert_eq!(bpf_choice(&mut lb, client(false, 3), 1, v), Some(s0));
    set_conns(&mut lb, s0, 3);
    age(&mut lb, &key, 61);
    assert_eq!(bpf_choice(&mut lb, client(false, 4), 1, v), Some(s1));
    assert_eq!(lb.l.locality(&key).unwrap().unwrap().members(), &[s1]);
    // An entry naming service 1's server: not a member, WLC decides.
    let mut e = lb.l.locality(&key).unwrap().unwrap();
    e.members[0] = Lb::dest_index(1, 0);
    lb.l.set_locality(&key, &e).unwrap();
    set_conns(&mut lb, s0, 0);
    set_conns(&mut lb, s1, 1);
    assert_eq!(bpf_choice(&mut lb, client(false, 5), 1, v), Some(s0));
    assert_eq!(lb.l.locality(&key).unwrap().unwrap().members(), &[s0]);
}

/// lblcr: an overloaded set grows by the WLC choice (at its head); a set
/// unchanged for the expiration time sheds its most loaded member.
#[test]
fn lblcr_set_grows_and_sheds() {
    let Some(mut lb) = Lb::new("lblcr_set_grows_and_sheds") else {
        return;
    };
    let mut cfg = rvs_xdp::maps::Config::ipvs_defaults();
    cfg.locality_expiration = 100;
    lb.l.set_config(&cfg).unwrap();
    let rs: Vec<Rs> = (0..3)
        .map(|i| Rs::new(rs_addr(false, i), fwd::DR, rs_mac(i)).weight(2))
        .collect();
    let v = vip(false);
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), "lblcr", 0, &rs);
    let key = rvs_xdp::maps::LocalityKey::new(0, v);
    let s: Vec<u32> = (0..3).map(|p| Lb::dest_index(0, p)).collect();
    assert_eq!(bpf_choice(&mut lb, client(false, 1), 1, v), Some(s[0]));
    // 0 above its weight while 1 and 2 are idle: replicate to WLC's pick.
    set_conns(&mut lb, s[0], 3);
    set_conns(&mut lb, s[1], 0);
    assert_eq!(bpf_choice(&mut lb, client(false, 2), 1, v), Some(s[1]));
    assert_eq!(
        lb.l.locality(&key).unwrap().unwrap().members(),
        &[s[1], s[0]]
    );
    // The set's minimum (1, one active) is used: no growth.
    set_conns(&mut lb, s[0], 2);
    set_conns(&mut lb, s[1], 1);
    set_conns(&mut lb, s[2], 0);
    assert_eq!(bpf_choice(&mut lb, client(false, 3), 1, v), Some(s[1]));
    assert_eq!(lb.l.locality(&key).unwrap().unwrap().members().len(), 2);
    // Unchanged for longer than the expiration: the most loaded (0) goes,
    // this decision still takes the minimum found before.
    age(&mut lb, &key, 99);
    set_conns(&mut lb, s[0], 2);
    set_conns(&mut lb, s[1], 1);
    assert_eq!(bpf_choice(&mut lb, client(false, 4), 1, v), Some(s[1]));
    assert_eq!(lb.l.locality(&key).unwrap().unwrap().members().len(), 2);
    age(&mut lb, &key, 2);
    set_conns(&mut lb, s[0], 2);
    set_conns(&mut lb, s[1], 1);
    assert_eq!(bpf_choice(&mut lb, client(false, 5), 1, v), Some(s[1]));
    assert_eq!(lb.l.locality(&key).unwrap().unwrap().members(), &[s[1]]);
}

/// twos: the program draws with bpf_get_prandom_u32, so the rule is checked
/// through the distribution: with fixed counters, server i is chosen with
/// probability p_i² + 2·p_i·Σ(p_j, j more loaded than i) where p_i is the
/// chance one draw picks it (r uniform in 0..=total, r = 0 counting as 1).
/// The core (seeded) must land on the same distribution. Never an
/// ineligible server.
#[test]
fn twos_picks_the_less_loaded_of_two_weighted_draws() {
    let Some(mut lb) = Lb::new("twos_picks_the_less_loaded_of_two_weighted_draws") else {
        return;
    };
    let v = vip(false);
    // Weights 1, 2, 3 (+ a quiesced and an overloaded one); loads: server 0
    // the most loaded per weight, server 2 idle.
    let rs = servers(false);
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), "twos", 0, &rs);
    let (mut core, mut dests) = lb.core_scheduler(0);
    let load = [(5u32, 0u32), (2, 100), (0, 0), (0, 0), (0, 0)];
    for (p, &(a, i)) in load.iter().enumerate() {
        dests[p].active = a;
        dests[p].inactive = i;
    }
    core.update(&dests, rvs_core::sched::ListChange::Reset);
    let write = |lb: &mut Lb| {
        for (p, &(a, i)) in load.iter().enumerate() {
            let c = rvs_xdp::maps::DestConns {
                active: a,
                inactive: i,
            };
            lb.l.set_dest_conns(Lb::dest_index(0, p), &c).unwrap();
        }
    };
    // One draw: r in 0..=6; r 0, 1 → server 0; 2, 3 → 1; 4, 5, 6 → 2.
    let p = [2.0 / 7.0, 2.0 / 7.0, 3.0 / 7.0];
    let want = [
        p[0] * p[0],
        p[1] * p[1] + 2.0 * p[1] * p[0],
        p[2] * p[2] + 2.0 * p[2] * (p[0] + p[1]),
    ];
    const N: u32 = 1400;
    let (mut bpf, mut cor) = ([0u32; 5], [0u32; 5]);
    for i in 0..N {
        write(&mut lb);
        let c = client(false, i);
        let got = bpf_choice(&mut lb, c, 9000, v).expect("scheduled");
        bpf[(got % 1000) as usize] += 1;
        let want = Lb::core_choice(core.as_mut(), &dests, 0, &sched_input(c, 9000, v, VPORT))
            .expect("core schedules");
        cor[(want % 1000) as usize] += 1;
    }
    for (name, counts) in [("bpf", bpf), ("core", cor)] {
        assert_eq!(counts[3] + counts[4], 0, "{name}: ineligible chosen");
        for s in 0..3 {
            let f = f64::from(counts[s]) / f64::from(N);
            // 5 standard deviations at most (σ ≤ 0.0134 here).
            assert!(
                (f - want[s]).abs() < 0.05,
                "{name}: server {s} chosen {f:.3}, expected {:.3} ({counts:?})",
                want[s]
            );
        }
    }
    // Equal loads per weight (active = weight): the first draw always wins,
    // so choices follow one draw.
    let mut even = [0u32; 5];
    for i in 0..N {
        for (p, r) in rs.iter().enumerate() {
            set_conns(&mut lb, Lb::dest_index(0, p), r.weight);
        }
        let got = bpf_choice(&mut lb, client(false, N + i), 9000, v).expect("scheduled");
        even[(got % 1000) as usize] += 1;
    }
    for s in 0..3 {
        let f = f64::from(even[s]) / f64::from(N);
        assert!((f - p[s]).abs() < 0.05, "even: {s} {f:.3} {even:?}");
    }
}
