//! Golden tests: ipvsadm's output formats, byte for byte (trailing spaces included).

use std::net::{IpAddr, Ipv4Addr};

use TunCsumSnap::{Csum, NoCsum, RemCsum};
use TunKindSnap::{Geneve, Gre, Gue, Ipip};
use rvs_ipvsadm::names::{Names, OfflineNames};
use rvs_ipvsadm::snapshot::{
    ConnSnap, DaemonSnap, DestSnap, ForwardSnap, NetmaskSnap, RatesSnap, ServiceKeySnap,
    ServiceSnap, Snapshot, StatsSnap, TunCsumSnap, TunKindSnap,
};
use rvs_ipvsadm::{
    ListOptions, ListTarget, format_laddrs_with, format_list_with, format_save_with, largenum,
};

struct FakeNames;
impl Names for FakeNames {
    fn host_to_v4(&self, _: &str) -> Option<Ipv4Addr> {
        None
    }
    fn service_to_port(&self, _: &str, _: u8) -> Option<u16> {
        None
    }
    fn addr_to_host(&self, a: IpAddr) -> Option<String> {
        match a.to_string().as_str() {
            "192.168.1.5" => Some("dodo".into()),
            "192.168.1.6" => Some("a-very-long-host-name.example.com".into()),
            "10.1.1.1" => Some("virtual-service-name.example.org".into()),
            _ => None,
        }
    }
    fn port_to_service(&self, port: u16, proto: u8) -> Option<String> {
        match (port, proto) {
            (443, 6) => Some("https".into()),
            (6443, 6) => Some("sun-sr-https".into()),
            (80, 6) => Some("http".into()),
            _ => None,
        }
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn svc(proto: u8, addr: &str, port: u16, sched: &str) -> ServiceSnap {
    let a = ip(addr);
    ServiceSnap {
        key: ServiceKeySnap::Addr {
            protocol: proto,
            addr: a,
            port,
        },
        scheduler: sched.parse().expect("scheduler"),
        sched_flags: 0,
        persistent: None,
        netmask: if a.is_ipv4() {
            NetmaskSnap::V4(Ipv4Addr::BROADCAST)
        } else {
            NetmaskSnap::V6(128)
        },
        pe: None,
        one_packet: false,
        mh_table_size: 4093,
        proxy_protocol: None,
        max_conns: 0,
        laddrs: vec![],
        quic_lb: vec![],
        quic_lb_counters: Default::default(),
        owner: None,
        stats: StatsSnap::default(),
        rates: RatesSnap::default(),
        dests: vec![],
    }
}

fn dest(addr: &str, port: u16, fwd: ForwardSnap, weight: i32) -> DestSnap {
    DestSnap {
        addr: ip(addr),
        port,
        forward: fwd,
        weight,
        u_threshold: 0,
        l_threshold: 0,
        active: 0,
        inactive: 0,
        persist: 0,
        stats: StatsSnap::default(),
        rates: RatesSnap::default(),
        proxy_protocol: None,
        quic_server_id: None,
    }
}

/// Forwarding through a tunnel of `kind` (UDP `port` for GUE, else 0).
fn tun(kind: TunKindSnap, port: u16, csum: TunCsumSnap) -> ForwardSnap {
    ForwardSnap::Tunnel { kind, port, csum }
}

fn numeric() -> ListOptions {
    ListOptions {
        numeric: true,
        ..ListOptions::default()
    }
}

/// [`numeric`] with one more option set by `set`.
fn numeric_with(set: impl FnOnce(&mut ListOptions)) -> ListOptions {
    let mut o = numeric();
    set(&mut o);
    o
}

/// The first `n` lines of a listing.
/// A table of `services` whose connection table has ipvsadm's usual size
/// (4096), as most listings below show it.
fn table(services: Vec<ServiceSnap>) -> Snapshot {
    Snapshot {
        services,
        conn_tab_size: 4096,
        ..Snapshot::default()
    }
}

fn head(listing: &str, n: usize) -> String {
    listing.lines().take(n).collect::<Vec<_>>().join("\n")
}

fn list(s: &Snapshot, o: ListOptions) -> String {
    format_list_with(s, &o, &FakeNames).unwrap()
}

/// The spec's `-Ln` example, services given out of order.
fn spec_snapshot() -> Snapshot {
    let mut fwm = svc(0, "0.0.0.0", 0, "rr");
    fwm.key = ServiceKeySnap::Fwmark {
        mark: 256,
        ipv6: false,
    };
    fwm.dests = vec![dest("10.255.0.5", 0, ForwardSnap::Masq, 1)];
    let mut wrr = svc(6, "202.168.128.202", 80, "wrr");
    wrr.persistent = Some(60);
    wrr.dests = vec![dest("172.24.100.5", 80, ForwardSnap::Route, 3)];
    let mut rr = svc(6, "172.16.1.100", 80, "rr");
    rr.dests = vec![
        dest("172.16.1.6", 80, ForwardSnap::Masq, 1),
        dest("172.16.1.5", 80, ForwardSnap::Masq, 1),
    ];
    table(vec![fwm, wrr, rr])
}

#[test]
fn default_listing_matches_spec_example() {
    let expected = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  172.16.1.100:80 rr
  -> 172.16.1.5:80                Masq    1      0          0         
  -> 172.16.1.6:80                Masq    1      0          0         
TCP  202.168.128.202:80 wrr persistent 60
  -> 172.24.100.5:80              Route   3      0          0         
FWM  256 rr
  -> 10.255.0.5:0                 Masq    1      0          0         
";
    assert_eq!(list(&spec_snapshot(), numeric()), expected);
}

#[test]
fn nosort_keeps_table_order() {
    let o = numeric_with(|o| o.nosort = true);
    let out = list(&spec_snapshot(), o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[3], "FWM  256 rr");
    assert_eq!(lines[5], "TCP  202.168.128.202:80 wrr persistent 60");
    assert_eq!(lines[7], "TCP  172.16.1.100:80 rr");
    assert!(lines[8].starts_with("  -> 172.16.1.6:80 "));
}

#[test]
fn sorting_follows_libipvs() {
    // fwmark last, IPv4 before IPv6, TCP < UDP < SCTP, then address, then port.
    let mut f6 = svc(0, "0.0.0.0", 0, "rr");
    f6.key = ServiceKeySnap::Fwmark {
        mark: 1,
        ipv6: true,
    };
    let mut f4 = svc(0, "0.0.0.0", 0, "rr");
    f4.key = ServiceKeySnap::Fwmark {
        mark: 1,
        ipv6: false,
    };
    let mut f2 = svc(0, "0.0.0.0", 0, "rr");
    f2.key = ServiceKeySnap::Fwmark {
        mark: 2,
        ipv6: false,
    };
    let mut s = Snapshot {
        services: vec![
            f2,
            f6,
            f4,
            svc(132, "1.1.1.1", 1, "rr"),
            svc(6, "2001:db8::1", 80, "rr"),
            svc(17, "1.1.1.1", 1, "rr"),
            svc(6, "10.0.0.2", 80, "rr"),
            svc(6, "10.0.0.1", 443, "rr"),
            svc(6, "10.0.0.1", 80, "rr"),
        ],
        ..Snapshot::default()
    };
    s.services[6].dests = vec![
        dest("10.0.0.20", 80, ForwardSnap::Masq, 1),
        dest("10.0.0.3", 81, ForwardSnap::Masq, 1),
        dest("10.0.0.3", 80, ForwardSnap::Masq, 1),
    ];
    let out = list(&s, numeric());
    let svc_lines: Vec<&str> = out
        .lines()
        .skip(3)
        .filter(|l| !l.starts_with("  ->"))
        .collect();
    assert_eq!(
        svc_lines,
        [
            "TCP  10.0.0.1:80 rr",
            "TCP  10.0.0.1:443 rr",
            "TCP  10.0.0.2:80 rr",
            "UDP  1.1.1.1:1 rr",
            "SCTP 1.1.1.1:1 rr",
            "TCP  [2001:db8::1]:80 rr",
            "FWM  1 rr",
            "FWM  1 IPv6 rr",
            "FWM  2 rr",
        ]
    );
    let dests: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("  -> 10."))
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(dests, ["10.0.0.3:80", "10.0.0.3:81", "10.0.0.20:80"]);
}

#[test]
fn name_resolution_and_truncation() {
    let mut s1 = svc(6, "10.96.0.1", 443, "rr");
    s1.dests = vec![
        dest("192.168.1.5", 6443, ForwardSnap::Masq, 1),
        dest("192.168.1.6", 80, ForwardSnap::Masq, 1),
    ];
    let s2 = svc(6, "10.1.1.1", 80, "wlc");
    let snap = table(vec![s1, s2]);
    // 10.1.1.1 sorts first; the service column is cut at 33 bytes, the
    // real-server column at 28.
    let out = list(&snap, ListOptions::default());
    assert_eq!(
        out,
        "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  virtual-service-name.example wlc
TCP  10.96.0.1:https rr
  -> dodo:sun-sr-https            Masq    1      0          0         
  -> a-very-long-host-name.exampl Masq    1      0          0         
"
    );
}

#[test]
fn service_flags_persistence_and_ipv6() {
    let mut a = svc(17, "10.0.0.1", 5060, "sh");
    a.sched_flags = 0x18;
    a.persistent = Some(300);
    a.netmask = NetmaskSnap::V4(Ipv4Addr::new(255, 255, 255, 0));
    a.pe = Some("sip".into());
    a.one_packet = true;
    let mut b = svc(6, "2001:db8::1", 80, "rr");
    b.persistent = Some(60);
    b.netmask = NetmaskSnap::V6(64);
    b.dests = vec![dest("2001:db8:0:0:0:0:0:1000", 80, ForwardSnap::Route, 1)];
    let mut c = svc(6, "10.0.0.2", 80, "sh");
    c.sched_flags = 0x20; // flag-3 has no sh name
    let mut d = svc(6, "10.0.0.3", 80, "wrr");
    d.sched_flags = 0x28;
    let snap = Snapshot {
        services: vec![a, b, c, d],
        conn_tab_size: 1024,
        ..Snapshot::default()
    };
    let expected = "\
IP Virtual Server version 1.2.1 (size=1024)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.0.0.2:80 sh ()
TCP  10.0.0.3:80 wrr (flag-1,flag-3)
UDP  10.0.0.1:5060 sh (sh-fallback,sh-port) persistent 300 mask 255.255.255.0 pe sip ops
TCP  [2001:db8::1]:80 rr persistent 60 mask 64
  -> [2001:db8::1000]:80          Route   1      0          0         
";
    assert_eq!(list(&snap, numeric()), expected);
}

/// One TCP service on `vip`:80 with one routed real server 10.0.0.7:80,
/// each given its counters by `set`: what the `--stats` and `--rate`
/// listings are shown on.
fn counted(vip: &str, set: impl FnOnce(&mut ServiceSnap, &mut DestSnap)) -> Snapshot {
    let mut s = svc(6, vip, 80, "rr");
    let mut d = dest("10.0.0.7", 80, ForwardSnap::Route, 1);
    set(&mut s, &mut d);
    s.dests = vec![d];
    table(vec![s])
}

/// Counters in ipvsadm's column order: conns, inpkts, outpkts, inbytes,
/// outbytes.
fn stats([conns, inpkts, outpkts, inbytes, outbytes]: [u64; 5]) -> StatsSnap {
    StatsSnap {
        conns,
        inpkts,
        outpkts,
        inbytes,
        outbytes,
    }
}

fn stats_snapshot() -> Snapshot {
    counted("10.0.0.3", |s, d| {
        s.stats = stats([8, 132, 0, 34840, 0]);
        d.stats = stats([4, 90, 0, 24476, 0]);
    })
}

#[test]
fn stats_listing_matches_spec_example() {
    let o = numeric_with(|o| o.stats = true);
    let expected = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  10.0.0.3:80                         8      132        0    34840        0
  -> 10.0.0.7:80                         4       90        0    24476        0
";
    assert_eq!(list(&stats_snapshot(), o), expected);
}

#[test]
fn stats_large_numbers_and_exact() {
    let mut snap = stats_snapshot();
    snap.services[0].stats.inbytes = 123_456_789_012;
    snap.services[0].dests[0].stats.inbytes = 1_234_567_890;
    let o = numeric_with(|o| o.stats = true);
    let out = list(&snap, o);
    assert_eq!(
        out.lines().nth(3).unwrap(),
        "TCP  10.0.0.3:80                         8      132        0     123G        0"
    );
    assert_eq!(
        out.lines().nth(4).unwrap(),
        "  -> 10.0.0.7:80                         4       90        0    1234M        0"
    );
    let o = ListOptions {
        stats: true,
        exact: true,
        ..numeric()
    };
    let out = list(&snap, o);
    assert_eq!(
        out.lines().nth(3).unwrap(),
        "TCP  10.0.0.3:80                         8      132        0 123456789012        0"
    );
}

#[test]
fn rate_listing_matches_spec_example() {
    let rates = |[cps, inpps, outpps, inbps, outbps]: [u64; 5]| RatesSnap {
        cps,
        inpps,
        outpps,
        inbps,
        outbps,
    };
    let snap = counted("10.96.6.131", |s, d| {
        s.rates = rates([1, 4, 2, 234, 268]);
        d.rates = rates([123_456_789, 4, 2, 1_000_000_000, 268]);
    });
    let o = numeric_with(|o| o.rate = true);
    // The dest line prints cps/inpps/outpps raw (%8llu), bps through largenum.
    let expected = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port                 CPS    InPPS   OutPPS    InBPS   OutBPS
  -> RemoteAddress:Port
TCP  10.96.6.131:80                      1        4        2      234      268
  -> 10.0.0.7:80                  123456789        4        2    1000M      268
";
    assert_eq!(list(&snap, o), expected);
}

#[test]
fn thresholds_persistent_conn_and_tun_info() {
    let mut s = svc(6, "10.0.0.1", 80, "wlc");
    let mut d1 = dest("10.0.0.11", 80, ForwardSnap::Masq, 2);
    d1.u_threshold = 100;
    d1.l_threshold = 50;
    d1.active = 7;
    d1.inactive = 3;
    d1.persist = 12;
    let d2 = dest("10.0.0.12", 80, tun(Gue, 6080, RemCsum), 1);
    let d3 = dest("10.0.0.13", 80, tun(Gre, 0, Csum), 1);
    let d4 = dest("10.0.0.14", 80, tun(Ipip, 0, NoCsum), 1);
    s.dests = vec![d1, d2, d3, d4];
    let snap = table(vec![s]);
    let t = list(&snap, numeric_with(|o| o.thresholds = true));
    assert_eq!(
        head(&t, 5),
        "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port            Uthreshold Lthreshold ActiveConn InActConn 
  -> RemoteAddress:Port
TCP  10.0.0.1:80 wlc
  -> 10.0.0.11:80                 100        50         7          3         "
    );
    let p = list(&snap, numeric_with(|o| o.persistent_conn = true));
    assert_eq!(
        head(&p, 5),
        "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port            Weight    PersistConn ActiveConn InActConn 
  -> RemoteAddress:Port
TCP  10.0.0.1:80 wlc
  -> 10.0.0.11:80                 2         12          7          3         "
    );
    let ti = list(&snap, numeric_with(|o| o.tun_info = true));
    assert_eq!(
        ti,
        "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn
TCP  10.0.0.1:80 wlc
  -> 10.0.0.11:80                 Masq    n/a           2      7          3         
  -> 10.0.0.12:80                 Tunnel  gue:6080:r+c  1      0          0         
  -> 10.0.0.13:80                 Tunnel  gre:+c        1      0          0         
  -> 10.0.0.14:80                 Tunnel  ipip          1      0          0         
"
    );
}

#[test]
fn one_service_listing_has_no_header() {
    let snap = spec_snapshot();
    let o = ListOptions {
        target: ListTarget::Service(ServiceKeySnap::Fwmark {
            mark: 256,
            ipv6: false,
        }),
        ..numeric()
    };
    assert_eq!(
        list(&snap, o),
        "\
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
FWM  256 rr
  -> 10.255.0.5:0                 Masq    1      0          0         
"
    );
    let o = ListOptions {
        target: ListTarget::Service(ServiceKeySnap::Fwmark {
            mark: 257,
            ipv6: false,
        }),
        ..numeric()
    };
    let e = format_list_with(&snap, &o, &OfflineNames).unwrap_err();
    assert_eq!((e.message.as_str(), e.exit_code), ("No such service", 1));
}

fn conn(
    proto: &str,
    expire: u32,
    state: &str,
    c: (&str, u16),
    v: (&str, u16),
    d: (&str, u16),
) -> ConnSnap {
    ConnSnap {
        protocol: proto.into(),
        state: state.into(),
        expire_secs: expire,
        caddr: ip(c.0),
        cport: c.1,
        vaddr: ip(v.0),
        vport: v.1,
        daddr: ip(d.0),
        dport: d.1,
        pe_name: None,
        pe_data: None,
        local: None,
    }
}

#[test]
fn connection_listing_matches_spec_example() {
    let mut sip = conn(
        "UDP",
        10803,
        "UDP",
        ("10.0.0.5", 5060),
        ("10.0.0.1", 5060),
        ("10.0.0.9", 5060),
    );
    sip.pe_name = Some("sip".into());
    sip.pe_data = Some("abc@host".into());
    let snap = Snapshot {
        conns: vec![
            conn(
                "TCP",
                895,
                "ESTABLISHED",
                ("198.51.100.7", 51922),
                ("203.0.113.10", 80),
                ("10.0.0.11", 80),
            ),
            conn(
                "UDP",
                264,
                "UDP",
                ("192.168.127.89", 44117),
                ("192.168.127.89", 514),
                ("192.168.129.116", 514),
            ),
            sip,
            conn(
                "TCP",
                59,
                "SYN_RECV",
                ("2001:db8::7", 1234),
                ("2001:db8::1", 80),
                ("10.0.0.11", 80),
            ),
        ],
        ..Snapshot::default()
    };
    let o = ListOptions {
        target: ListTarget::Connections,
        ..numeric()
    };
    assert_eq!(
        list(&snap, o),
        "\
IPVS connection entries
pro expire state       source             virtual            destination
TCP 14:55  ESTABLISHED 198.51.100.7:51922 203.0.113.10:80    10.0.0.11:80
UDP 04:24  UDP         192.168.127.89:44117 192.168.127.89:514 192.168.129.116:514
UDP 180:03 UDP         10.0.0.5:5060      10.0.0.1:5060      10.0.0.9:5060
TCP 00:59  SYN_RECV    [2001:db8::7]:1234 [2001:db8::1]:80   10.0.0.11:80
"
    );
    let o = ListOptions {
        target: ListTarget::Connections,
        persistent_conn: true,
        ..numeric()
    };
    let out = list(&snap, o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[1],
        "pro expire state       source             virtual            destination        pe name          pe_data"
    );
    // Entries without PE data keep the plain layout; with it, dest %-16s and name %-18s.
    assert_eq!(
        lines[2],
        "TCP 14:55  ESTABLISHED 198.51.100.7:51922 203.0.113.10:80    10.0.0.11:80"
    );
    assert_eq!(
        lines[4],
        "UDP 180:03 UDP         10.0.0.5:5060      10.0.0.1:5060      10.0.0.9:5060    sip                abc@host"
    );
    // Without -n, ports and addresses are resolved.
    let o = ListOptions {
        target: ListTarget::Connections,
        ..ListOptions::default()
    };
    let out = list(&snap, o);
    assert_eq!(
        out.lines().nth(2).unwrap(),
        "TCP 14:55  ESTABLISHED 198.51.100.7:51922 203.0.113.10:http  10.0.0.11:http"
    );
}

#[test]
fn timeout_and_daemon_listing() {
    let snap = Snapshot {
        timeouts: (900, 120, 300),
        daemons: vec![
            DaemonSnap {
                master: true,
                mcast_ifn: "eth0".into(),
                syncid: 0,
                sync_maxlen: 1472,
                mcast_group: Some(ip("224.0.0.81")),
                mcast_port: 8848,
                mcast_ttl: 1,
            },
            DaemonSnap {
                master: false,
                mcast_ifn: "eth1".into(),
                syncid: 7,
                sync_maxlen: 0,
                mcast_group: None,
                mcast_port: 0,
                mcast_ttl: 0,
            },
        ],
        ..Snapshot::default()
    };
    let o = ListOptions {
        target: ListTarget::Timeout,
        ..ListOptions::default()
    };
    assert_eq!(list(&snap, o), "Timeout (tcp tcpfin udp): 900 120 300\n");
    let o = ListOptions {
        target: ListTarget::Daemon,
        ..ListOptions::default()
    };
    assert_eq!(
        list(&snap, o),
        "master sync daemon (mcast=eth0, syncid=0, maxlen=1472, group=224.0.0.81, port=8848, ttl=1)\nbackup sync daemon (mcast=eth1, syncid=7)\n"
    );
}

#[test]
fn save_matches_spec_example() {
    let mut s = svc(6, "10.254.0.1", 443, "rr");
    s.persistent = Some(10800);
    s.dests = vec![dest("192.168.123.250", 6443, ForwardSnap::Masq, 1)];
    let snap = Snapshot {
        services: vec![s],
        ..Snapshot::default()
    };
    assert_eq!(
        format_save_with(&snap, true, &FakeNames),
        "-A -t 10.254.0.1:443 -s rr -p 10800\n-a -t 10.254.0.1:443 -r 192.168.123.250:6443 -m -w 1\n"
    );
    // Without -n, names are used.
    assert_eq!(
        format_save_with(&snap, false, &FakeNames),
        "-A -t 10.254.0.1:https -s rr -p 10800\n-a -t 10.254.0.1:https -r 192.168.123.250:sun-sr-https -m -w 1\n"
    );
}

#[test]
fn save_every_option() {
    let mut a = svc(17, "10.0.0.1", 5060, "sh");
    a.persistent = Some(300);
    a.netmask = NetmaskSnap::V4(Ipv4Addr::new(255, 255, 255, 0));
    a.pe = Some("sip".into());
    a.one_packet = true;
    a.sched_flags = 0x18;
    a.dests = vec![
        dest("10.0.0.9", 5060, ForwardSnap::Local, 2),
        dest("10.0.0.10", 5060, tun(Gue, 6080, Csum), 1),
        dest("10.0.0.11", 5060, tun(Gre, 0, NoCsum), 1),
        dest("10.0.0.12", 5060, tun(Ipip, 0, NoCsum), 0),
    ];
    let mut b = svc(0, "0.0.0.0", 0, "mh");
    b.key = ServiceKeySnap::Fwmark {
        mark: 7,
        ipv6: true,
    };
    b.persistent = Some(60);
    b.netmask = NetmaskSnap::V6(64);
    b.mh_table_size = 65521;
    b.dests = vec![dest("2001:db8::5", 0, ForwardSnap::FullNat, 1)];
    let c = svc(132, "10.0.0.2", 9, "rr");
    let snap = Snapshot {
        services: vec![b, a, c],
        ..Snapshot::default()
    };
    let expected = "\
-A -u 10.0.0.1:5060 -s sh -p 300 -M 255.255.255.0 --pe sip -o -b sh-fallback,sh-port
-a -u 10.0.0.1:5060 -r 10.0.0.9:5060 -g -w 2
-a -u 10.0.0.1:5060 -r 10.0.0.10:5060 -i -w 1 --tun-type gue --tun-port 6080 --tun-csum
-a -u 10.0.0.1:5060 -r 10.0.0.11:5060 -i -w 1 --tun-type gre --tun-nocsum
-a -u 10.0.0.1:5060 -r 10.0.0.12:5060 -i -w 0 --tun-type ipip
-A --sctp-service 10.0.0.2:9 -s rr
-A -f 7 -6 -s mh -p 60 -M 64 --mh-table-size 65521
-a -f 7 -6 -r [2001:db8::5]:0 --fullnat -w 1
";
    let out = format_save_with(&snap, true, &FakeNames);
    assert_eq!(out, expected);
    // Every saved line parses back (offline).
    for line in out.lines() {
        let r = rvs_ipvsadm::parse_restore_line_with("ipvsadm", line, &OfflineNames);
        assert!(matches!(r, Ok(Some(_))), "{line}: {r:?}");
    }
}

#[test]
fn largenum_boundaries() {
    let f = |i: u64, exact: bool| {
        let mut s = String::new();
        largenum(&mut s, i, exact);
        s
    };
    assert_eq!(f(0, false), "        0");
    assert_eq!(f(99_999_999, false), " 99999999");
    assert_eq!(f(100_000_000, false), "  100000K");
    assert_eq!(f(999_999_999, false), "  999999K");
    assert_eq!(f(1_000_000_000, false), "    1000M");
    assert_eq!(f(99_999_999_999, false), "   99999M");
    assert_eq!(f(100_000_000_000, false), "     100G");
    assert_eq!(f(99_999_999_999_999, false), "   99999G");
    assert_eq!(f(100_000_000_000_000, false), "     100T");
    assert_eq!(f(u64::MAX, false), "18446744T");
    assert_eq!(f(12_345_678, true), " 12345678");
    assert_eq!(f(123_456_789, true), " 123456789");
    assert_eq!(f(u64::MAX, true), " 18446744073709551615");
}

fn assert_serde<T: serde::Serialize + serde::de::DeserializeOwned>() {}

#[test]
fn snapshot_and_list_options_are_serde() {
    assert_serde::<Snapshot>();
    assert_serde::<ListOptions>();
    assert_serde::<ListTarget>();
}

/// A FULLNAT service with a two-entry pool and two connections through it.
fn fnat_snapshot() -> Snapshot {
    let mut s = svc(6, "10.0.0.1", 80, "rr");
    s.laddrs = vec!["192.168.100.5-192.168.100.6".into(), "192.168.100.9".into()];
    s.dests = vec![dest("10.1.0.2", 80, ForwardSnap::FullNat, 1)];
    let mut a = conn(
        "TCP",
        895,
        "ESTABLISHED",
        ("198.51.100.7", 51922),
        ("10.0.0.1", 80),
        ("10.1.0.2", 80),
    );
    a.local = Some("192.168.100.6:1029".parse().unwrap());
    let mut b = a.clone();
    b.cport = 51923;
    b.local = Some("192.168.100.9:40000".parse().unwrap());
    let plain = conn(
        "UDP",
        264,
        "UDP",
        ("192.168.127.89", 44117),
        ("192.168.127.89", 514),
        ("192.168.129.116", 514),
    );
    Snapshot {
        services: vec![s],
        conns: vec![a, b, plain],
        ..Snapshot::default()
    }
}

#[test]
fn fullnat_connections_show_their_local_address() {
    let snap = fnat_snapshot();
    let o = ListOptions {
        target: ListTarget::Connections,
        ..numeric()
    };
    assert_eq!(
        list(&snap, o),
        "\
IPVS connection entries
pro expire state       source             virtual            local              destination
TCP 14:55  ESTABLISHED 198.51.100.7:51922 10.0.0.1:80        192.168.100.6:1029 10.1.0.2:80
TCP 14:55  ESTABLISHED 198.51.100.7:51923 10.0.0.1:80        192.168.100.9:40000 10.1.0.2:80
UDP 04:24  UDP         192.168.127.89:44117 192.168.127.89:514 -                  192.168.129.116:514
"
    );
}

#[test]
fn get_laddr_lists_pools_with_connections_per_entry() {
    let snap = fnat_snapshot();
    let out = format_laddrs_with(&snap, None, true, &FakeNames);
    assert_eq!(
        out,
        "\
VIP:VPORT                    TOTAL    LADDR                                    CONNS
TCP  10.0.0.1:80             2
                                      192.168.100.5-192.168.100.6              1
                                      192.168.100.9                            1
"
    );
    let other = ServiceKeySnap::Addr {
        protocol: 17,
        addr: ip("10.0.0.1"),
        port: 80,
    };
    assert_eq!(
        format_laddrs_with(&snap, Some(&other), true, &FakeNames)
            .lines()
            .count(),
        1
    );
}

#[test]
fn save_restores_the_pool_before_the_real_servers() {
    let snap = fnat_snapshot();
    assert_eq!(
        format_save_with(&snap, true, &FakeNames),
        "\
-A -t 10.0.0.1:80 -s rr
--add-laddr -t 10.0.0.1:80 -z 192.168.100.5-192.168.100.6
--add-laddr -t 10.0.0.1:80 -z 192.168.100.9
-a -t 10.0.0.1:80 -r 10.1.0.2:80 --fullnat -w 1
"
    );
}

/// GRE with and without the checksum as kernel IPVS's ipvsadm 1.31 lists
/// and saves it (`gre:-c` / `gre:+c`, `--tun-type gre --tun-nocsum|--tun-csum`),
/// and rvs's Geneve in the same form.
#[test]
fn gre_and_geneve_tunnel_info_and_save() {
    let mut s = svc(6, "10.0.0.1", 80, "rr");
    s.dests = vec![
        dest("10.0.0.21", 80, tun(Gre, 0, NoCsum), 1),
        dest("10.0.0.22", 80, tun(Gre, 0, Csum), 2),
        dest("10.0.0.23", 80, tun(Geneve, 0, NoCsum), 3),
        dest("10.0.0.24", 80, tun(Geneve, 0, Csum), 4),
    ];
    let snap = table(vec![s]);
    assert_eq!(
        list(&snap, numeric_with(|o| o.tun_info = true)),
        "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn
TCP  10.0.0.1:80 rr
  -> 10.0.0.21:80                 Tunnel  gre:-c        1      0          0         
  -> 10.0.0.22:80                 Tunnel  gre:+c        2      0          0         
  -> 10.0.0.23:80                 Tunnel  geneve:-c     3      0          0         
  -> 10.0.0.24:80                 Tunnel  geneve:+c     4      0          0         
"
    );
    let out = format_save_with(&snap, true, &FakeNames);
    assert_eq!(
        out,
        "\
-A -t 10.0.0.1:80 -s rr
-a -t 10.0.0.1:80 -r 10.0.0.21:80 -i -w 1 --tun-type gre --tun-nocsum
-a -t 10.0.0.1:80 -r 10.0.0.22:80 -i -w 2 --tun-type gre --tun-csum
-a -t 10.0.0.1:80 -r 10.0.0.23:80 -i -w 3 --tun-type geneve --tun-nocsum
-a -t 10.0.0.1:80 -r 10.0.0.24:80 -i -w 4 --tun-type geneve --tun-csum
"
    );
    // The saved lines parse back to the same tunnels.
    for line in out.lines() {
        let r = rvs_ipvsadm::parse_restore_line_with("ipvsadm", line, &OfflineNames);
        assert!(matches!(r, Ok(Some(_))), "{line}: {r:?}");
    }
}

/// `-Ln --quic-lb`: QUIC-LB services only, their configs with the key as a
/// fingerprint, the counters, each real server's server ID; `-S` saves the
/// configs (key included, for `-R`) and server IDs.
#[test]
fn quic_lb_listing_and_save() {
    let mut q = svc(17, "10.0.0.1", 443, "rr");
    q.quic_lb = vec![
        "cr=0,sid=3,nonce=6".into(),
        "cr=1,sid=3,nonce=13,key=8f95f09245765f80256934e50c66207f".into(),
    ];
    q.quic_lb_counters = rvs_ipvsadm::snapshot::QuicLbCountersSnap {
        by_cid: 1200,
        by_fallback: 7,
        undecodable: 1,
    };
    let mut a = dest("10.0.1.1", 4433, ForwardSnap::Masq, 1);
    a.quic_server_id = Some("0a0001".into());
    let b = dest("10.0.1.2", 4433, ForwardSnap::Masq, 1);
    q.dests = vec![a, b];
    let plain = svc(17, "10.0.0.2", 53, "rr");
    let snap = table(vec![q, plain]);
    let fp = rvs_core::model::QuicLbConfig::parse_spec(
        "cr=1,sid=3,nonce=13,key=8f95f09245765f80256934e50c66207f",
    )
    .unwrap()
    .key_fingerprint()
    .unwrap();
    let expected = format!(
        "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port               ByCID Fallback Undecodable
  => QUIC-LB config (key: fingerprint)
  -> RemoteAddress:Port           ServerID
UDP  10.0.0.1:443                     1200        7           1
  => cr=0 sid=3 nonce=6 plaintext
  => cr=1 sid=3 nonce=13 single-pass key=fp:{fp}
  -> 10.0.1.1:4433                0a0001
  -> 10.0.1.2:4433                -
"
    );
    assert_eq!(list(&snap, numeric_with(|o| o.quic_lb = true)), expected);
    let saved = format_save_with(&snap, true, &FakeNames);
    assert!(
        saved.contains("-A -u 10.0.0.1:443 -s rr --quic-lb cr=0,sid=3,nonce=6 --quic-lb cr=1,sid=3,nonce=13,key=8f95f09245765f80256934e50c66207f\n"),
        "{saved}"
    );
    assert!(
        saved.contains("-a -u 10.0.0.1:443 -r 10.0.1.1:4433 -m -w 1 --quic-sid 0a0001\n"),
        "{saved}"
    );
    // What -S writes, -R reads back.
    for line in saved.lines() {
        rvs_ipvsadm::parse_restore_line_with("ipvsadm", line, &FakeNames).expect(line);
    }
}
