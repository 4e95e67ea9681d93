//! rvs-vrrp's network pieces against real namespaces (root only): raw VRRP
//! sockets between two hosts, virtual addresses, announcements, link state.

mod common;

use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{MAC_A, MAC_A_BYTES, Pair, block_on, sh, wait_for};
use rvs_vrrp::net::{
    NetError, VrrpSocket, add_address, add_vmac, announce, del_address, del_link, link_up,
    primary_v4,
};

const GROUP4: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 18);
/// The MAC a previous master announced the VIP with.
const OLD_MAC: &str = "02:00:00:00:00:ff";
const GROUP6: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x12);

/// The link-local address of `eth0` in `ns` (from iproute2, independently
/// of the code under test).
fn link_local(ns: &str) -> IpAddr {
    let out = sh(&[
        "ip", "-n", ns, "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link",
    ]);
    let addr = out
        .split_whitespace()
        .skip_while(|w| *w != "inet6")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .unwrap_or_else(|| panic!("no link-local in {out:?}"));
    addr.parse().expect("link-local parses")
}

/// A sends to the group, B receives it (source A, destination the group,
/// TTL 255) and answers A by unicast; A's first message must be that
/// answer: its own multicast is not looped back to it.
fn exchange(
    pair: &Pair,
    group: IpAddr,
    a_src: Option<IpAddr>,
    b_src: Option<IpAddr>,
    expect_a: IpAddr,
    expect_b: IpAddr,
    unicast_to_a: IpAddr,
) {
    let ipv6 = group.is_ipv6();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let b = pair.spawn_in(&pair.b, move || {
        block_on(async move {
            let sock = VrrpSocket::open("eth0", ipv6, group, b_src).expect("B opens");
            assert_eq!(sock.local_addr(), expect_b);
            ready_tx.send(()).expect("ready");
            let mut buf = [0u8; 1500];
            let got = tokio::time::timeout(Duration::from_secs(5), sock.recv(&mut buf))
                .await
                .expect("B receives A's advert within 5 s")
                .expect("B recv");
            assert_eq!(&buf[got.offset..got.offset + got.len], b"advert from A");
            assert_eq!(got.src, expect_a, "source is A's address");
            assert_eq!(got.dst, group, "destination is the group");
            assert_eq!(got.ttl, 255, "TTL / hop limit 255");
            if !ipv6 {
                assert_eq!(buf[1], 0xc0, "IPv4 TOS 0xc0 (network control)");
            }
            sock.send(b"unicast from B", unicast_to_a)
                .await
                .expect("B sends unicast");
        })
    });
    let a = pair.spawn_in(&pair.a, move || {
        block_on(async move {
            let sock = VrrpSocket::open("eth0", ipv6, group, a_src).expect("A opens");
            assert_eq!(sock.local_addr(), expect_a);
            ready_rx
                .recv_timeout(Duration::from_secs(5))
                .expect("B is ready");
            sock.send(b"advert from A", group).await.expect("A sends");
            let mut buf = [0u8; 1500];
            let got = tokio::time::timeout(Duration::from_secs(5), sock.recv(&mut buf))
                .await
                .expect("A receives B's unicast within 5 s")
                .expect("A recv");
            assert_eq!(
                &buf[got.offset..got.offset + got.len],
                b"unicast from B",
                "A's first message is B's answer, not its own advert"
            );
            assert_eq!(got.src, expect_b);
            assert_eq!(got.dst, unicast_to_a);
            assert_eq!(got.ttl, 255);
        })
    });
    let (ra, rb) = (a.join(), b.join());
    if let Err(p) = rb {
        std::panic::resume_unwind(p);
    }
    if let Err(p) = ra {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn vrrp_socket_ipv4_multicast_then_unicast() {
    let Some(pair) = Pair::new("vrrp_socket_ipv4_multicast_then_unicast") else {
        return;
    };
    // B sends from a configured secondary address (mcast_src_ip), A from
    // the interface's primary address.
    sh(&[
        "ip",
        "-n",
        &pair.b,
        "addr",
        "add",
        "10.0.0.3/24",
        "dev",
        "eth0",
    ]);
    exchange(
        &pair,
        GROUP4.into(),
        None,
        Some(Ipv4Addr::new(10, 0, 0, 3).into()),
        Ipv4Addr::new(10, 0, 0, 1).into(),
        Ipv4Addr::new(10, 0, 0, 3).into(),
        Ipv4Addr::new(10, 0, 0, 1).into(),
    );
}

#[test]
fn vrrp_socket_ipv6_multicast_then_unicast() {
    let Some(pair) = Pair::new("vrrp_socket_ipv6_multicast_then_unicast") else {
        return;
    };
    let lla = link_local(&pair.a);
    // A sends from its link-local address (the default); B from its
    // global one (unicast_src_ip), to A's global one.
    let global_b: IpAddr = "fd00::2".parse().expect("addr");
    exchange(
        &pair,
        GROUP6.into(),
        None,
        Some(global_b),
        lla,
        global_b,
        "fd00::1".parse().expect("addr"),
    );
}

#[test]
fn vrrp_socket_rejects_mixed_families_and_unknown_interfaces() {
    let Some(pair) = Pair::new("vrrp_socket_rejects_mixed_families_and_unknown_interfaces") else {
        return;
    };
    pair.block_in(&pair.a, async {
        let e = VrrpSocket::open("eth0", true, GROUP4.into(), None).expect_err("mixed");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        let e = VrrpSocket::open("nope0", false, GROUP4.into(), None).expect_err("no iface");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().contains("nope0"), "{e}");
        // A source address the host does not have fails at send.
        let sock = VrrpSocket::open("eth0", false, GROUP4.into(), Some([10, 0, 0, 9].into()))
            .expect("opens");
        let e = sock.send(b"x", GROUP4.into()).await.expect_err("not ours");
        assert!(
            e.to_string()
                .starts_with("VRRP send to 224.0.0.18 from 10.0.0.9 on eth0: "),
            "{e}"
        );
        let e = sock.send(b"x", GROUP6.into()).await.expect_err("family");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    });
}

fn addr_listed(ns: &str, cidr: &str) -> bool {
    sh(&["ip", "-n", ns, "addr", "show", "dev", "eth0"])
        .split_whitespace()
        .any(|w| w == cidr)
}

#[test]
fn add_and_del_address_are_idempotent() {
    let Some(pair) = Pair::new("add_and_del_address_are_idempotent") else {
        return;
    };
    let ns = pair.a.clone();
    pair.sysctl(&pair.a, "ipv6/conf/eth0/accept_dad", "1");
    pair.block_in(&pair.a, async move {
        for (addr, prefix, cidr) in [
            ("10.0.0.100", None, "10.0.0.100/32"),
            ("10.0.1.1", Some(24), "10.0.1.1/24"),
            ("fd00::100", None, "fd00::100/128"),
            ("fd01::1", Some(64), "fd01::1/64"),
        ] {
            let addr: IpAddr = addr.parse().expect("addr");
            assert!(!addr_listed(&ns, cidr), "{cidr} not there before");
            add_address("eth0", addr, prefix).await.expect("add");
            assert!(addr_listed(&ns, cidr), "{cidr} added");
            add_address("eth0", addr, prefix)
                .await
                .expect("adding again is Ok");
            del_address("eth0", addr, prefix).await.expect("del");
            assert!(!addr_listed(&ns, cidr), "{cidr} removed");
            del_address("eth0", addr, prefix)
                .await
                .expect("deleting again is Ok");
        }
        // An IPv6 virtual address is usable at once: no DAD, which the
        // test turned back on for this interface.
        let vip: IpAddr = "fd00::200".parse().expect("addr");
        add_address("eth0", vip, None).await.expect("add");
        let out = sh(&["ip", "-n", &ns, "-6", "addr", "show", "dev", "eth0"]);
        assert!(out.contains("fd00::200/128"), "{out}");
        assert!(!out.contains("tentative"), "{out}");
        del_address("eth0", vip, None).await.expect("del");
    });
}

#[test]
fn address_errors_are_clear() {
    let Some(pair) = Pair::new("address_errors_are_clear") else {
        return;
    };
    pair.block_in(&pair.a, async {
        let vip: IpAddr = "10.0.0.100".parse().expect("addr");
        let e = add_address("nope0", vip, None).await.expect_err("unknown");
        assert!(
            matches!(&e, NetError::InterfaceNotFound { ifname } if ifname == "nope0"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "interface \"nope0\" not found");
        let e = del_address("nope0", vip, None).await.expect_err("unknown");
        assert!(matches!(e, NetError::InterfaceNotFound { .. }), "{e:?}");
        let e = add_address("eth0", vip, Some(33))
            .await
            .expect_err("prefix");
        assert!(matches!(e, NetError::BadPrefix { prefix: 33, .. }), "{e:?}");
        // The kernel's refusal carries its errno: an IPv6 multicast
        // address cannot be an interface address.
        let e = add_address("eth0", GROUP6.into(), None)
            .await
            .expect_err("kernel refuses");
        assert!(
            matches!(e, NetError::Netlink { errno, op: "add address", .. } if errno > 0),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("netlink add address ff02::12/128 on eth0: "),
            "{text}"
        );
        assert!(text.contains("(errno "), "{text}");
    });
}

#[test]
fn announce_ipv4_gratuitous_arp_teaches_the_peer() {
    let Some(pair) = Pair::new("announce_ipv4_gratuitous_arp_teaches_the_peer") else {
        return;
    };
    // Linux only creates neighbour entries from gratuitous ARP with
    // arp_accept (per namespace).
    for key in ["all", "eth0"] {
        pair.sysctl(&pair.b, &format!("ipv4/conf/{key}/arp_accept"), "1");
    }
    let neigh = || {
        sh(&[
            "ip",
            "-n",
            &pair.b,
            "neigh",
            "show",
            "10.0.0.100",
            "dev",
            "eth0",
        ])
    };
    assert!(!neigh().contains(MAC_A), "B knows nothing of the VIP yet");
    pair.block_in(&pair.a, async {
        let vip: IpAddr = "10.0.0.100".parse().expect("addr");
        add_address("eth0", vip, None).await.expect("add VIP");
        announce("eth0", vip).expect("announce");
    });
    assert!(
        wait_for(Duration::from_secs(3), || neigh().contains(MAC_A)),
        "B learnt 10.0.0.100 at A's MAC: {}",
        neigh()
    );
}

/// In B: a raw ICMPv6 socket; the first neighbour advertisement for
/// `target` within `limit`, with its hop limit and destination.
fn capture_na(
    target: Ipv6Addr,
    limit: Duration,
    ready: mpsc::Sender<()>,
) -> (Vec<u8>, u8, Ipv6Addr) {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrIn6, recvmsg};
    use socket2::{Domain, Protocol, Socket, Type};
    use std::os::fd::AsRawFd;
    let sock = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6)).expect("icmpv6");
    sock.set_recv_hoplimit_v6(true).expect("hoplimit");
    rvs_sys::sock::set_recv_pktinfo_v6(std::os::fd::AsFd::as_fd(&sock), true)
        .expect("IPV6_RECVPKTINFO");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    ready.send(()).expect("ready");
    let end = Instant::now() + limit;
    while Instant::now() < end {
        let mut buf = [0u8; 1500];
        let mut cmsg = nix::cmsg_space!(libc::in6_pktinfo, libc::c_int);
        let (n, hl, dst) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let Ok(msg) = recvmsg::<SockaddrIn6>(
                sock.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::empty(),
            ) else {
                continue;
            };
            let (mut hl, mut dst) = (0u8, Ipv6Addr::UNSPECIFIED);
            for c in msg.cmsgs().expect("cmsgs") {
                match c {
                    ControlMessageOwned::Ipv6HopLimit(h) => hl = h as u8,
                    ControlMessageOwned::Ipv6PacketInfo(i) => dst = i.ipi6_addr.s6_addr.into(),
                    _ => {}
                }
            }
            (msg.bytes, hl, dst)
        };
        if n >= 24 && buf[0] == 136 && buf[8..24] == target.octets() {
            return (buf[..n].to_vec(), hl, dst);
        }
    }
    panic!("no neighbour advertisement for {target} within {limit:?}");
}

#[test]
fn announce_ipv6_unsolicited_na_overrides_the_peer_entry() {
    let Some(pair) = Pair::new("announce_ipv6_unsolicited_na_overrides_the_peer_entry") else {
        return;
    };
    let vip: Ipv6Addr = "fd00::100".parse().expect("addr");
    // `ip -n B -6 neigh ARGS...`
    let neigh_b = |args: &[&str]| sh(&[&["ip", "-n", &pair.b, "-6", "neigh"], args].concat());
    let neigh = || neigh_b(&["show", "fd00::100", "dev", "eth0"]);
    // B still has the VIP at the old master's MAC: the NA's override flag
    // must replace it (hosts ignore unsolicited NAs for addresses they have
    // no entry for).
    let old = [
        "replace",
        "fd00::100",
        "lladdr",
        OLD_MAC,
        "dev",
        "eth0",
        "nud",
        "stale",
    ];
    neigh_b(&old);
    assert!(neigh().contains(OLD_MAC), "{}", neigh());
    let (tx, rx) = mpsc::channel();
    let capture = pair.spawn_in(&pair.b, move || capture_na(vip, Duration::from_secs(3), tx));
    rx.recv_timeout(Duration::from_secs(5))
        .expect("capture ready");
    pair.block_in(&pair.a, async move {
        add_address("eth0", vip.into(), None)
            .await
            .expect("add VIP");
        announce("eth0", vip.into()).expect("announce");
    });
    let (na, hop_limit, dst) = match capture.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    };
    assert_eq!(hop_limit, 255);
    assert_eq!(dst, Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1));
    assert_eq!(na.len(), 32);
    assert_eq!(na[1], 0, "code 0");
    assert_eq!(
        na[4] & 0xe0,
        0x20,
        "override set, router and solicited clear"
    );
    assert_eq!(&na[24..26], &[2, 1], "target link-layer address option");
    assert_eq!(&na[26..32], &MAC_A_BYTES);
    assert_ne!(&na[2..4], &[0, 0], "the kernel filled the checksum");
    assert!(
        wait_for(Duration::from_secs(3), || neigh().contains(MAC_A)),
        "B learnt fd00::100 at A's MAC: {}",
        neigh()
    );
}

#[test]
fn link_up_follows_admin_state_and_carrier() {
    let Some(pair) = Pair::new("link_up_follows_admin_state_and_carrier") else {
        return;
    };
    let up = |pair: &Pair| pair.run_in(&pair.a, || link_up("eth0").expect("link_up"));
    let settle = |pair: &Pair, want: bool| wait_for(Duration::from_secs(3), || up(pair) == want);
    assert!(settle(&pair, true), "up veth with an up peer");
    sh(&["ip", "-n", &pair.a, "link", "set", "eth0", "down"]);
    assert!(settle(&pair, false), "admin down");
    sh(&["ip", "-n", &pair.a, "link", "set", "eth0", "up"]);
    assert!(settle(&pair, true), "up again");
    sh(&["ip", "-n", &pair.b, "link", "set", "eth0", "down"]);
    assert!(settle(&pair, false), "peer down: no carrier");
    assert!(
        !pair.run_in(&pair.a, || link_up("nope0").expect("link_up")),
        "a missing interface is not up"
    );
}

/// `use_vmac`'s macvlan: created on eth0 with the virtual MAC, counted
/// among the MACs eth0 owns (what the XDP plane asks), idempotent both
/// ways, and gone after `del_link`.
#[test]
fn vmac_is_created_owned_and_removed() {
    let Some(pair) = Pair::new("vmac_is_created_owned_and_removed") else {
        return;
    };
    let vmac = [0, 0, 0x5e, 0, 1, 51];
    pair.block_in(&pair.a, async move {
        add_vmac("eth0", "vrrp.51", vmac).await.expect("add");
        add_vmac("eth0", "vrrp.51", vmac)
            .await
            .expect("again: kept");
        let e = add_vmac("nope0", "vrrp.52", vmac)
            .await
            .expect_err("no base");
        assert!(matches!(e, NetError::InterfaceNotFound { .. }), "{e:?}");
        let eth0 = rvs_sys::iface::ifindex("eth0").expect("eth0");
        let mut nl = rvs_sys::netlink::Netlink::open().expect("netlink");
        let owned = nl.owned_macs(eth0).expect("owned MACs");
        assert_eq!(
            owned,
            vec![MAC_A_BYTES, vmac],
            "eth0's own MAC, then the vmac"
        );
        let link = nl.link_by_name("vrrp.51").expect("link").expect("exists");
        assert!(link.up, "created up");
        assert_eq!(link.parent, Some(eth0));
        assert_eq!(link.kind.as_deref(), Some("macvlan"));
        assert_eq!(
            primary_v4("eth0").expect("addresses"),
            Some(Ipv4Addr::new(10, 0, 0, 1))
        );
        assert_eq!(primary_v4("nope0").expect("missing is none"), None);
        del_link("vrrp.51").await.expect("delete");
        del_link("vrrp.51").await.expect("again: gone is fine");
        assert!(nl.link_by_name("vrrp.51").expect("link").is_none());
        assert_eq!(nl.owned_macs(eth0).expect("owned"), vec![MAC_A_BYTES]);
    });
}
