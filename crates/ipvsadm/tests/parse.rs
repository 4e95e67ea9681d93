//! Parser tests: every command, popt quirks, every error text and exit code.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rvs_core::model::{
    AddrFamily, DestConfig, ForwardMethod, PersistMask, PersistenceEngine, Protocol, SchedFlags,
    ServiceKey, Tunnel, TunnelCsum, TunnelType,
};
use rvs_core::sched::Scheduler;
use rvs_ipvsadm::names::{Names, OfflineNames};
use rvs_ipvsadm::snapshot::ServiceKeySnap;
use rvs_ipvsadm::{
    Command, DaemonConfig, DestSpec, Invocation, ListOptions, ListTarget, ParseError, ServiceSpec,
    SyncState, Timeouts, parse_args_with, parse_restore_line_with,
};

/// Offline names plus one host name, so resolution paths are testable.
struct TestNames;
impl Names for TestNames {
    fn host_to_v4(&self, name: &str) -> Option<Ipv4Addr> {
        (name == "web1").then_some(Ipv4Addr::new(192, 0, 2, 7))
    }
    fn service_to_port(&self, name: &str, proto: u8) -> Option<u16> {
        OfflineNames.service_to_port(name, proto)
    }
    fn addr_to_host(&self, _: IpAddr) -> Option<String> {
        None
    }
    fn port_to_service(&self, port: u16, proto: u8) -> Option<String> {
        OfflineNames.port_to_service(port, proto)
    }
}

fn p(line: &str) -> Result<Invocation, ParseError> {
    parse_args_with(
        "ipvsadm",
        line.split_whitespace().map(str::to_owned),
        &TestNames,
    )
}

fn cmd(line: &str) -> Command {
    match p(line) {
        Ok(i) => i.command,
        Err(e) => panic!("{line}: unexpected error {e:?}"),
    }
}

/// The service an add-service `line` asks for.
fn added_service(line: &str) -> ServiceSpec {
    match cmd(line) {
        Command::AddService(s) => s,
        c => panic!("{line}: not an add-service: {c:?}"),
    }
}

/// The real server an add-server `line` asks for.
fn added_server(line: &str) -> DestSpec {
    match cmd(line) {
        Command::AddServer(d) => d,
        c => panic!("{line}: not an add-server: {c:?}"),
    }
}

/// The service a delete-service `line` names.
fn deleted(line: &str) -> ServiceKey {
    match cmd(line) {
        Command::DeleteService(k) => k,
        c => panic!("{line}: not a delete-service: {c:?}"),
    }
}

fn err(line: &str) -> (String, i32) {
    match p(line) {
        Ok(i) => panic!("{line}: expected error, got {i:?}"),
        Err(e) => (e.to_string(), e.exit_code),
    }
}

fn e2(line: &str, msg: &str) {
    assert_eq!(err(line), (msg.to_owned(), 2), "{line}");
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn key(protocol: Protocol, addr: IpAddr, port: u16) -> ServiceKey {
    ServiceKey::Addr {
        protocol,
        addr,
        port,
    }
}

fn tcp(a: IpAddr, port: u16) -> ServiceKey {
    key(Protocol::Tcp, a, port)
}

const TRY: &str = "Try `ipvsadm -h' or 'ipvsadm --help' for more information.";

#[test]
fn no_arguments_lists_non_numeric() {
    let i = parse_args_with("ipvsadm", Vec::<String>::new(), &OfflineNames).unwrap();
    assert_eq!(i.command, Command::List(ListOptions::default()));
}

#[test]
fn add_service_defaults() {
    let s = added_service("-A -t 10.0.0.1:80");
    assert_eq!(s.key, tcp(v4(10, 0, 0, 1), 80));
    assert_eq!(s.config.scheduler, Scheduler::Wlc);
    assert_eq!(s.config.persistent, None);
    assert_eq!(s.config.flags, SchedFlags(0));
    assert_eq!(
        s.config.netmask,
        PersistMask::V4(Ipv4Addr::new(255, 255, 255, 255))
    );
    assert!(!s.config.one_packet);
    assert_eq!(s.config.mh_table_size, 4093);
    assert_eq!(s.pe_name, None);
}

#[test]
fn add_service_all_options() {
    let Command::AddService(s) =
        cmd("-A -u 10.0.0.1:5060 -s sh -p 120 -M 255.255.255.0 --pe sip -o -b sh-port,sh-fallback")
    else {
        panic!()
    };
    assert_eq!(s.key, key(Protocol::Udp, v4(10, 0, 0, 1), 5060));
    assert_eq!(s.config.scheduler, Scheduler::Sh);
    assert_eq!(s.config.persistent, Some(120));
    assert_eq!(
        s.config.netmask,
        PersistMask::V4(Ipv4Addr::new(255, 255, 255, 0))
    );
    assert_eq!(s.config.pe, Some(PersistenceEngine::Sip));
    assert_eq!(s.pe_name.as_deref(), Some("sip"));
    assert!(s.config.one_packet);
    assert_eq!(s.config.flags, SchedFlags(0x18));
}

#[test]
fn every_scheduler_parses_and_an_unknown_one_is_left_to_the_daemon() {
    for sched in Scheduler::all() {
        let s = added_service(&format!("-A -t 10.0.0.1:80 -s {sched}"));
        assert_eq!((s.config.scheduler, s.sched_name), (sched, None));
    }
    // ipvsadm sends any name to the kernel, which answers ENOENT; rvsadm
    // keeps the name for the daemon side to refuse the same way.
    let s = added_service("-A -t 10.0.0.1:80 -s nosuch");
    assert_eq!(s.sched_name.as_deref(), Some("nosuch"));
    // sh's flags need sh (by name, as ipvsadm checks them).
    assert!(p("-A -t 10.0.0.1:80 -s sh -b sh-port").is_ok());
    assert!(p("-A -t 10.0.0.1:80 -s mh -b sh-port").is_err());
    assert!(p("-A -t 10.0.0.1:80 -s nosuch -b sh-port").is_err());
}

#[test]
fn edit_and_delete_service() {
    let Command::EditService(s) = cmd("-E -t 10.0.0.1:80 -s rr") else {
        panic!()
    };
    assert_eq!(s.config.scheduler, Scheduler::Rr);
    assert_eq!(
        deleted("-D --tcp-service 10.0.0.1:80"),
        tcp(v4(10, 0, 0, 1), 80)
    );
    assert_eq!(
        deleted("--delete-service --sctp-service=10.0.0.1:80"),
        key(Protocol::Sctp, v4(10, 0, 0, 1), 80)
    );
}

#[test]
fn persistent_optional_argument_like_popt() {
    let pers = |line: &str| match cmd(line) {
        Command::AddService(s) => (s.config.persistent, s.config.scheduler),
        c => panic!("{c:?}"),
    };
    assert_eq!(pers("-A -t 1.2.3.4:80 -p 60"), (Some(60), Scheduler::Wlc));
    assert_eq!(pers("-A -t 1.2.3.4:80 -p"), (Some(360), Scheduler::Wlc));
    assert_eq!(
        pers("-A -t 1.2.3.4:80 -p -s rr"),
        (Some(360), Scheduler::Rr)
    );
    assert_eq!(pers("-A -t 1.2.3.4:80 -p60"), (Some(60), Scheduler::Wlc));
    assert_eq!(
        pers("-A -t 1.2.3.4:80 --persistent=90"),
        (Some(90), Scheduler::Wlc)
    );
    assert_eq!(
        pers("-A -t 1.2.3.4:80 --persistent 90"),
        (Some(90), Scheduler::Wlc)
    );
    // Port zero is fine once persistent.
    assert_eq!(pers("-A -t 1.2.3.4 -p"), (Some(360), Scheduler::Wlc));
    e2(
        "-A -t 1.2.3.4:80 -p 0",
        "invalid timeout value `0' specified",
    );
    e2(
        "-A -t 1.2.3.4:80 -p 2678401",
        "invalid timeout value `2678401' specified",
    );
    assert_eq!(pers("-A -t 1.2.3.4:80 -p 2678400").0, Some(2_678_400));
}

#[test]
fn combined_short_options_and_list_flags() {
    let list = |line: &str| match cmd(line) {
        Command::List(o) => o,
        c => panic!("{c:?}"),
    };
    let o = list("-Ln");
    assert!(o.numeric);
    assert_eq!(o.target, ListTarget::All);
    let o = list("-Lcn");
    assert!(o.numeric);
    assert_eq!(o.target, ListTarget::Connections);
    let o = list("-l --stats --exact --nosort --sort");
    assert!(o.stats && o.exact && o.nosort && !o.numeric);
    let o = list("-L -X --rate");
    assert!(o.rate && o.exact);
    let o = list("-L --thresholds");
    assert!(o.thresholds);
    let o = list("-L --persistent-conn --tun-info");
    assert!(o.persistent_conn && o.tun_info);
    assert_eq!(list("-L --timeout").target, ListTarget::Timeout);
    assert_eq!(list("-L --daemon").target, ListTarget::Daemon);
    assert_eq!(
        list("-Lc --persistent-conn").target,
        ListTarget::Connections
    );
    let o = list("-Ln -t 10.0.0.1:80");
    assert_eq!(
        o.target,
        ListTarget::Service(ServiceKeySnap::Addr {
            protocol: 6,
            addr: v4(10, 0, 0, 1),
            port: 80
        })
    );
    // A short option's argument in the same word, with or without '='.
    let s = added_service("-At10.0.0.1:80 -srr");
    assert_eq!(s.key, tcp(v4(10, 0, 0, 1), 80));
    assert_eq!(s.config.scheduler, Scheduler::Rr);
    let s = added_service("-A -t 10.0.0.1:80 -s=rr");
    assert_eq!(s.config.scheduler, Scheduler::Rr);
}

#[test]
fn ipv6_services_and_fwmark() {
    let s = added_service("-A -t [2001:db8::1]:443 -p -M 64");
    let a6: IpAddr = "2001:db8::1".parse().unwrap();
    assert_eq!(s.key, tcp(a6, 443));
    assert_eq!(s.config.netmask, PersistMask::V6(64));
    // Bare IPv6 has no port.
    let Command::DeleteService(k) = cmd("-D -t 2001:db8::1") else {
        panic!()
    };
    assert_eq!(k, tcp(a6, 0));
    // [::1] without ":port" is refused.
    e2(
        "-A -t [::1] -p",
        "illegal virtual server address[:port] specified",
    );
    // Brackets around IPv4 lose the port, as in ipvsadm.
    assert_eq!(deleted("-D -t [1.2.3.4]:80"), tcp(v4(1, 2, 3, 4), 0));
    let s = added_service("-A -f 7 -6 -s rr");
    assert_eq!(
        s.key,
        ServiceKey::Fwmark {
            mark: 7,
            af: AddrFamily::Inet6
        }
    );
    assert_eq!(s.config.netmask, PersistMask::V6(128));
    let s = added_service("-A -f 4294967295");
    assert_eq!(
        s.key,
        ServiceKey::Fwmark {
            mark: u32::MAX,
            af: AddrFamily::Inet
        }
    );
    e2("-A -f 0", "invalid fwmark value `0' specified");
    e2(
        "-A -f 4294967296",
        "invalid fwmark value `4294967296' specified",
    );
    e2("-A -f x", "invalid fwmark value `x' specified");
    e2("-A -t 1.2.3.4:80 -6", "-6 used before -f\n");
    e2("-A -f 1 -6 -p -M 129", "illegal ipv6 netmask specified");
    e2(
        "-A -t 1.2.3.4:80 -p -M nonsense",
        "illegal virtual server persistent mask specified",
    );
}

#[test]
fn service_names_and_host_names() {
    assert_eq!(deleted("-D -t 10.0.0.1:https"), tcp(v4(10, 0, 0, 1), 443));
    assert_eq!(
        deleted("-D -u 10.0.0.1:syslog"),
        key(Protocol::Udp, v4(10, 0, 0, 1), 514)
    );
    assert_eq!(deleted("-D -t web1:http"), tcp(v4(192, 0, 2, 7), 80));
    // inet_aton forms.
    assert_eq!(deleted("-D -t 10.1:80"), tcp(v4(10, 0, 0, 1), 80));
    e2(
        "-D -t 10.0.0.1:nosuchservice",
        "illegal virtual server address[:port] specified",
    );
    e2(
        "-D -t 10.0.0.1:65536",
        "illegal virtual server address[:port] specified",
    );
    e2(
        "-D -t 80",
        "illegal virtual server address[:port] specified",
    );
    e2(
        "-D -t nosuchhost:80",
        "illegal virtual server address[:port] specified",
    );
    e2(
        "-a -t 1.2.3.4:80 -r nosuchhost",
        "illegal real server address[:port] specified",
    );
}

#[test]
fn real_server_defaults_and_port_rules() {
    let dest = |line: &str| match cmd(line) {
        Command::AddServer(d) | Command::EditServer(d) | Command::DeleteServer(d) => d,
        c => panic!("{c:?}"),
    };
    // Default: direct routing, weight 1, port forced to the service port.
    let d = dest("-a -t 10.0.0.1:80 -r 192.168.1.2:8080");
    assert_eq!(d.service, tcp(v4(10, 0, 0, 1), 80));
    assert_eq!(d.dest, DestConfig::new(v4(192, 168, 1, 2), 80));
    // NAT keeps the given port; missing port = service port.
    let d = dest("-a -t 10.0.0.1:80 -r 192.168.1.2:8080 -m -w 3 -x 100 -y 50");
    assert_eq!(
        d.dest,
        DestConfig::new(v4(192, 168, 1, 2), 8080)
            .forward(ForwardMethod::Masq)
            .weight(3)
            .thresholds(100, 50)
    );
    assert_eq!(dest("-a -t 10.0.0.1:80 -r 192.168.1.2 -m").dest.port, 80);
    // -r before -t does not see the service port yet.
    assert_eq!(dest("-a -r 192.168.1.2 -m -t 10.0.0.1:80").dest.port, 0);
    // fwmark services keep the given port even with -g.
    assert_eq!(dest("-a -f 5 -r 192.168.1.2:8080 -g").dest.port, 8080);
    let d = dest("-e -t 10.0.0.1:80 -r 192.168.1.2 -w 0");
    assert_eq!(d.dest.weight, 0);
    let d = dest("-d -t 10.0.0.1:80 -r 192.168.1.2:8080");
    assert_eq!((d.dest.addr, d.dest.port), (v4(192, 168, 1, 2), 8080));
    let d = dest("-a -t 10.0.0.1:80 -r 192.168.1.2 --fullnat");
    assert_eq!(d.dest.forward, ForwardMethod::FullNat);
    // Tunnels.
    let d = dest("-a -t 10.0.0.1:80 -r 192.168.1.2 -i");
    assert_eq!(d.dest.forward, ForwardMethod::Tunnel(Tunnel::default()));
    let d =
        dest("-a -t 10.0.0.1:80 -r 192.168.1.2 -i --tun-type gue --tun-port 6080 --tun-remcsum");
    assert_eq!(
        d.dest.forward,
        ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Gue,
            port: 6080,
            csum: TunnelCsum::RemCsum
        })
    );
    let d = dest("-a -t 10.0.0.1:80 -r 192.168.1.2 -i --tun-type gre --tun-csum");
    assert_eq!(
        d.dest.forward,
        ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Gre,
            port: 0,
            csum: TunnelCsum::Csum
        })
    );
    // rvs's Geneve: UDP 6081 always, the checksum like GRE's.
    let d = dest("-a -t 10.0.0.1:80 -r 192.168.1.2 -i --tun-type geneve --tun-csum");
    assert_eq!(
        d.dest.forward,
        ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Geneve,
            port: 0,
            csum: TunnelCsum::Csum
        })
    );
    let d = dest("-a -t 10.0.0.1:80 -r 192.168.1.2 -i --tun-type geneve");
    assert_eq!(
        d.dest.forward,
        ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Geneve,
            port: 0,
            csum: TunnelCsum::NoCsum
        })
    );
    // IPv6 real server behind an IPv4 service: tunnel only.
    let d = dest("-a -t 10.0.0.1:80 -r [2001:db8::5]:80 -i");
    assert_eq!(
        d.dest.addr,
        IpAddr::V6("2001:db8::5".parse::<Ipv6Addr>().unwrap())
    );
}

#[test]
fn other_commands() {
    assert_eq!(cmd("-C"), Command::Flush);
    assert_eq!(cmd("--clear"), Command::Flush);
    assert_eq!(cmd("-R"), Command::Restore);
    assert_eq!(cmd("-S"), Command::Save { numeric: false });
    assert_eq!(cmd("-Sn"), Command::Save { numeric: true });
    assert_eq!(cmd("-Z"), Command::Zero(None));
    assert_eq!(
        cmd("-Z -t 1.2.3.4:80"),
        Command::Zero(Some(tcp(v4(1, 2, 3, 4), 80)))
    );
    assert_eq!(cmd("-h"), Command::Help);
    assert_eq!(cmd("--help"), Command::Help);
    assert_eq!(cmd("-v"), Command::Version);
    assert_eq!(cmd("--reload"), Command::Reload);
    assert_eq!(
        cmd("--set 900 120 300"),
        Command::SetTimeouts(Timeouts {
            tcp: 900,
            tcp_fin: 120,
            udp: 300
        })
    );
    // popt collects plain arguments wherever they are.
    assert_eq!(
        cmd("--set 900 -- 0 300"),
        Command::SetTimeouts(Timeouts {
            tcp: 900,
            tcp_fin: 0,
            udp: 300
        })
    );
    assert_eq!(
        cmd("--start-daemon master"),
        Command::StartDaemon(DaemonConfig {
            state: SyncState::Master,
            mcast_ifn: "eth0".into(),
            syncid: 0,
            sync_maxlen: None,
            mcast_group: None,
            mcast_port: None,
            mcast_ttl: None
        })
    );
    assert_eq!(
        cmd(
            "--start-daemon=backup --mcast-interface eth1 --syncid 9 --sync-maxlen 1400 --mcast-group 224.0.0.82 --mcast-port 8849 --mcast-ttl 2"
        ),
        Command::StartDaemon(DaemonConfig {
            state: SyncState::Backup,
            mcast_ifn: "eth1".into(),
            syncid: 9,
            sync_maxlen: Some(1400),
            mcast_group: Some(v4(224, 0, 0, 82)),
            mcast_port: Some(8849),
            mcast_ttl: Some(2)
        })
    );
    let Command::StartDaemon(d) = cmd("--start-daemon master --mcast-group ff02::1") else {
        panic!()
    };
    assert_eq!(d.mcast_group, Some("ff02::1".parse().unwrap()));
    let Command::StopDaemon(d) = cmd("--stop-daemon backup --syncid 3") else {
        panic!()
    };
    assert_eq!(
        (d.state, d.syncid, d.mcast_ifn.as_str()),
        (SyncState::Backup, 3, "")
    );
    let s = added_service("-A -t 1.2.3.4:80 -s mh --mh-table-size 65521");
    assert_eq!(s.config.mh_table_size, 65521);
}

#[test]
fn syntax_errors_exit_255() {
    // First option must be the command.
    assert_eq!(err("-n -L"), (TRY.into(), 255));
    assert_eq!(err("-t 1.2.3.4:80"), (TRY.into(), 255));
    assert_eq!(err("--bogus"), (TRY.into(), 255));
    assert_eq!(err("foo"), (TRY.into(), 255));
    assert_eq!(err("-A-t"), ("-A-t: unknown option".into(), 255));
    // popt errors after the command.
    assert_eq!(err("-L --bogus"), ("--bogus: unknown option".into(), 255));
    assert_eq!(err("-Lq"), ("-Lq: unknown option".into(), 255));
    assert_eq!(err("-A -t"), ("-t: missing argument".into(), 255));
    assert_eq!(
        err("-L --stats=1"),
        ("--stats=1: option does not take an argument".into(), 255)
    );
    let e = p("-L --bogus").unwrap_err();
    assert!(!e.aborts_restore);
    assert!(p("-L -n -n").unwrap_err().aborts_restore);
    // The program name is a parameter.
    let e = parse_args_with("rvsadm", ["-x".to_owned()], &OfflineNames).unwrap_err();
    assert_eq!(
        e.message,
        "Try `rvsadm -h' or 'rvsadm --help' for more information."
    );
}

#[test]
fn errors_exit_2_with_ipvsadm_texts() {
    e2("-L -A", "invalid option `-A'");
    e2("-L -h", "invalid option `-h'");
    e2("-L --start-daemon master", "invalid option `master'");
    e2("-L foo", "unexpected argument foo");
    e2("--set 1 2", "--set option requires 3 timeout values");
    e2("--set 1 2 x", "invalid timeout value `x' specified");
    e2("--set 1 2 3 4", "unexpected argument 4");
    e2(
        "--start-daemon slave",
        "illegal start-daemon parameter specified",
    );
    e2("--stop-daemon slave", "illegal start_daemon specified");
    e2("-L -n -n", "multiple 'numeric' options specified");
    e2(
        "-A -t 1.2.3.4:80 -u 1.2.3.4:80",
        "multiple 'service-address' options specified",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -m -g",
        "multiple 'forwarding-method' options specified",
    );
    e2(
        "-A -t 1.2.3.4",
        "Zero port specified for non-persistent service",
    );
    e2(
        "-A -t 1.2.3.4:80 -o",
        "One-Packet Scheduling is only for UDP virtual services",
    );
    assert!(p("-A -f 3 -o").is_ok());
    e2(
        "-A -t 1.2.3.4:80 -s rr -b sh-port",
        "incompatible scheduler flag `sh-port'",
    );
    e2(
        "-A -t 1.2.3.4:80 -b mh-fallback",
        "incompatible scheduler flag `mh-fallback'",
    );
    e2(
        "-A -t 1.2.3.4:80 -b flag-1,foo",
        "invalid scheduler flag `foo'",
    );
    // -b is checked against the final -s, whatever the order.
    assert!(p("-A -t 1.2.3.4:80 -b sh-port -s sh").is_ok());
    // -b is checked before the legality table.
    e2("-L -b foo", "invalid scheduler flag `foo'");
    e2(
        "-A -t 1.2.3.4:80 -r 1.1.1.1",
        "Illegal 'real-server' option with the 'add-service' command",
    );
    e2(
        "-A -s rr",
        "You need to supply the 'service-address' option for the 'add-service' command",
    );
    e2(
        "-a -t 1.2.3.4:80",
        "You need to supply the 'real-server' option for the 'add-server' command",
    );
    e2(
        "-e -t 1.2.3.4:80",
        "You need to supply the 'real-server' option for the 'edit-server' command",
    );
    e2(
        "-d -t 1.2.3.4:80 -r 1.1.1.1 -w 2",
        "Illegal 'weight' option with the 'delete-server' command",
    );
    e2("-C -n", "Illegal 'numeric' option with the 'flush' command");
    e2(
        "-S -c",
        "Illegal 'connection' option with the 'save' command",
    );
    e2("-Z -n", "Illegal 'numeric' option with the 'zero' command");
    e2(
        "--set 1 2 3 -n",
        "Illegal 'numeric' option with the 'set' command",
    );
    e2(
        "-R -n",
        "Illegal 'numeric' option with the 'restore' command",
    );
    e2(
        "--reload -n",
        "Illegal 'numeric' option with the 'reload' command",
    );
    e2(
        "--start-daemon master --stats",
        "Illegal 'stats' option with the 'start-daemon' command",
    );
    e2(
        "--stop-daemon master --mcast-interface eth0",
        "Illegal 'mcast-interface' option with the 'stop-daemon' command",
    );
    e2(
        "-L -c -t 1.2.3.4:80",
        "The option 'service-address' conflicts with the 'connection' option in the 'list' command",
    );
    e2(
        "-L --daemon --timeout",
        "The option 'daemon' conflicts with the 'timeout' option in the 'list' command",
    );
    e2("-L -c --stats", "options conflicts in the list command");
    e2(
        "-L --timeout --rate",
        "options conflicts in the list command",
    );
    e2(
        "-L --daemon --persistent-conn",
        "options conflicts in the list command",
    );
    e2(
        "-L -s rr",
        "Illegal 'scheduler' option with the 'list' command",
    );
    e2(
        "-L --mh-table-size 4093",
        "Illegal 'mh-table-size' option with the 'list' command",
    );
    e2(
        "-A -t 1.2.3.4:80 -s mh --mh-table-size 4095",
        "illegal mh-table-size specified",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -w 65536",
        "illegal weight specified",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -w -1",
        "illegal weight specified",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -x 2147483648",
        "illegal u_threshold specified",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -y x",
        "illegal l_threshold specified",
    );
    e2(
        "--start-daemon master --syncid 256",
        "illegal syncid specified",
    );
    e2(
        "--start-daemon master --mcast-port 0",
        "illegal mcast-port specified",
    );
    e2(
        "--start-daemon master --mcast-ttl 256",
        "illegal mcast-ttl specified",
    );
    e2(
        "--start-daemon master --sync-maxlen 65508",
        "illegal sync-maxlen specified",
    );
    e2(
        "--start-daemon master --mcast-group 1.2.3.4",
        "invalid IPv4 mcast-group `1.2.3.4'",
    );
    e2(
        "--start-daemon master --mcast-group 2001:db8::1",
        "invalid IPv6 mcast-group `2001:db8::1'",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -i --tun-type vxlan",
        "illegal tunnel type specified",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -i --tun-port 0",
        "illegal tunnel port specified",
    );
    e2(
        "-a -t 1.2.3.4:80 -r [::1]:80",
        "Different address family is allowed only for tunneling servers",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 --tun-type gue",
        "Tunnel options conflict with forward method",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -m --tun-csum",
        "Tunnel options conflict with forward method",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -i --tun-type gue",
        "You need to supply the 'tun-port' option for the 'gue' tunnel type",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -i --tun-port 6080",
        "Illegal 'tun-port' option with the 'ipip' tunnel type",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -i --tun-type gre --tun-remcsum",
        "Illegal 'tun-remcsum' option with the 'gre' tunnel type",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -i --tun-type geneve --tun-remcsum",
        "Illegal 'tun-remcsum' option with the 'geneve' tunnel type",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -i --tun-type geneve --tun-port 6081",
        "Illegal 'tun-port' option with the 'geneve' tunnel type",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -i --tun-type gre --tun-nocsum --tun-csum",
        "The option 'tun-csum' conflicts with the 'tun-nocsum' option in the 'gre' tunnel type",
    );
    e2(
        "-a -t 1.2.3.4:80 -r 1.1.1.1 -i --tun-type gue --tun-port 1 --tun-csum --tun-remcsum",
        "The option 'tun-remcsum' conflicts with the 'tun-csum' option in the 'gue' tunnel type",
    );
}

#[test]
fn restore_lines() {
    let r = |line: &str| parse_restore_line_with("ipvsadm", line, &OfflineNames);
    assert_eq!(r("").unwrap(), None);
    assert_eq!(r("  \t \r").unwrap(), None);
    assert_eq!(r("ipvsadm").unwrap(), None);
    assert_eq!(r("# saved by rvs").unwrap(), None);
    let i = r("ipvsadm -A -t 10.254.0.1:443 -s rr -p 10800\r")
        .unwrap()
        .unwrap();
    let Command::AddService(s) = i.command else {
        panic!()
    };
    assert_eq!(s.config.persistent, Some(10800));
    let i = r("-a\t-t 10.254.0.1:443 -r 192.168.123.250:6443 -m -w 1 ipvsadm")
        .unwrap()
        .unwrap();
    let Command::AddServer(d) = i.command else {
        panic!()
    };
    assert_eq!(d.dest.port, 6443);
    // -R inside a restore is refused with the hint.
    let e = r("-R").unwrap_err();
    assert_eq!((e.message.as_str(), e.exit_code), (TRY, 255));
    let e = r("-A -t 1.2.3.4").unwrap_err();
    assert_eq!(e.exit_code, 2);
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    #[test]
    fn parser_never_panics(words in proptest::collection::vec(
        prop_oneof![
            proptest::sample::select(vec![
                "-A", "-E", "-D", "-a", "-e", "-d", "-L", "-Ln", "-Lcn", "-C", "-R", "-S", "-Z",
                "--set", "-t", "-u", "-f", "-6", "-s", "-p", "-M", "-r", "-g", "-i", "-m", "-w",
                "-x", "-y", "--tun-type", "gue", "--tun-port", "--tun-csum", "-b", "sh-port",
                "1.2.3.4:80", "[::1]:80", "10.0.0.1", "rr", "60", "--", "-", "", "=", "-p=",
                "--stats", "--rate", "-c", "--timeout", "--daemon", "--start-daemon", "master",
                "--mh-table-size", "4093", "--pe", "sip", "-o",
            ]).prop_map(|s: &str| s.to_owned()),
            "[ -~]{0,12}",
        ],
        0..8,
    )) {
        let _ = parse_args_with("ipvsadm", words.clone(), &OfflineNames);
        let _ = parse_restore_line_with("ipvsadm", &words.join(" "), &OfflineNames);
    }
}

#[test]
fn rvs_proxy_options() {
    use rvs_core::model::ProxyProtocol;
    let line = "-A -t 10.0.0.1:80 -s rr --proxy-protocol v2 --max-conns 100";
    let s = added_service(line);
    assert_eq!(
        (s.config.proxy_protocol, s.config.max_conns),
        (Some(ProxyProtocol::V2), 100)
    );
    let line = "-a -t 10.0.0.1:80 -r 10.0.0.2 -m --proxy-protocol v1";
    let d = added_server(line);
    assert_eq!(d.dest.proxy_protocol, Some(ProxyProtocol::V1));
    for (args, msg) in [
        (
            "-A -t 10.0.0.1:80 --proxy-protocol v3",
            "illegal proxy-protocol `v3' specified (v1 or v2)",
        ),
        (
            "-A -t 10.0.0.1:80 --max-conns -1",
            "illegal max-conns specified",
        ),
        (
            "-a -t 10.0.0.1:80 -r 10.0.0.2 --max-conns 3",
            "Illegal 'max-conns' option with the 'add-server' command",
        ),
        (
            "-D -t 10.0.0.1:80 --proxy-protocol v1",
            "Illegal 'proxy-protocol' option with the 'delete-service' command",
        ),
    ] {
        e2(args, msg);
    }
}

#[test]
fn laddr_commands_parse_like_dpvs() {
    use rvs_core::model::LocalAddrRange;
    use rvs_ipvsadm::LaddrSpec;
    let key = ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        port: 80,
    };
    let spec = |l: &str| LaddrSpec {
        service: key,
        laddr: LocalAddrRange::parse(l).unwrap(),
    };
    assert_eq!(
        cmd("--add-laddr -t 10.0.0.1:80 -z 192.168.100.5"),
        Command::AddLaddr(spec("192.168.100.5"))
    );
    assert_eq!(
        cmd("--add-laddr -t 10.0.0.1:80 --laddr 192.168.100.5-192.168.100.9"),
        Command::AddLaddr(spec("192.168.100.5-9"))
    );
    assert_eq!(
        cmd("--del-laddr -z 192.168.100.5 -t 10.0.0.1:80"),
        Command::DelLaddr(spec("192.168.100.5"))
    );
    assert_eq!(cmd("--get-laddr"), Command::GetLaddr(None));
    assert_eq!(
        cmd("--get-laddr -t 10.0.0.1:80"),
        Command::GetLaddr(Some(key))
    );
    // A restore line carries the pool, as -S writes it.
    assert_eq!(
        parse_restore_line_with(
            "ipvsadm-restore",
            "--add-laddr -t 10.0.0.1:80 -z 192.168.100.9",
            &TestNames
        )
        .unwrap()
        .unwrap()
        .command,
        Command::AddLaddr(spec("192.168.100.9"))
    );
    e2(
        "--add-laddr -t 10.0.0.1:80",
        "You need to supply the 'laddr' option for the 'add-laddr' command",
    );
    e2(
        "--add-laddr -z 192.168.100.5",
        "You need to supply the 'service-address' option for the 'add-laddr' command",
    );
    e2(
        "--add-laddr -t 10.0.0.1:80 -z 10.9.9.9-10.9.9.1",
        "illegal local address specified",
    );
    e2(
        "--add-laddr -t 10.0.0.1:80 -z 2001:db8::1",
        "local address and virtual service are of different families",
    );
    e2(
        "--get-laddr -z 192.168.100.5",
        "Illegal 'laddr' option with the 'get-laddr' command",
    );
    e2(
        "-A -t 10.0.0.1:80 -z 192.168.100.5",
        "Illegal 'laddr' option with the 'add-service' command",
    );
}

#[test]
fn rvs_quic_lb_options() {
    use rvs_core::model::{QuicLbConfig, QuicServerId};
    let line = "-A -u 10.0.0.1:443 -s rr --quic-lb cr=0,sid=3,nonce=6 --quic-lb cr=1,sid=3,nonce=13,key=8f95f09245765f80256934e50c66207f";
    let s = added_service(line);
    assert_eq!(
        s.config.quic_lb,
        vec![
            QuicLbConfig::parse_spec("cr=0,sid=3,nonce=6").unwrap(),
            QuicLbConfig::parse_spec("cr=1,sid=3,nonce=13,key=8f95f09245765f80256934e50c66207f")
                .unwrap(),
        ]
    );
    let line = "-e -u 10.0.0.1:443 -r 10.0.0.2:4433 -m --quic-sid 0a0b0c";
    let Command::EditServer(d) = cmd(line) else {
        panic!("{line}")
    };
    assert_eq!(
        d.dest.quic_server_id,
        Some("0a0b0c".parse::<QuicServerId>().unwrap())
    );
    let Command::List(o) = cmd("-Ln --quic-lb") else {
        panic!("-Ln --quic-lb")
    };
    assert!(o.quic_lb && o.numeric);
    let Command::List(o) = cmd("-L --quic-lb -n") else {
        panic!("-L --quic-lb -n")
    };
    assert!(o.quic_lb && o.numeric);
    for (args, msg) in [
        (
            "-A -u 10.0.0.1:443 --quic-lb cr=9,sid=3,nonce=6",
            "illegal quic-lb: QUIC-LB config rotation codepoint 9 is not 0..=6 (7 marks unroutable connection IDs)",
        ),
        (
            "-A -u 10.0.0.1:443 --quic-lb cr=0,sid=3",
            "illegal quic-lb: QUIC-LB spec `cr=0,sid=3`: cr, sid and nonce are all required (expected cr=N,sid=N,nonce=N[,key=32 hex digits])",
        ),
        (
            "-A -u 10.0.0.1:443 --quic-lb cr=0,sid=3,nonce=6,key=abc",
            "illegal quic-lb: QUIC-LB spec `cr=0,sid=3,nonce=6,key=abc`: the key is not 32 hex digits (16 bytes) (expected cr=N,sid=N,nonce=N[,key=32 hex digits])",
        ),
        (
            "-A -u 10.0.0.1:443 --quic-lb",
            "--quic-lb needs a SPEC with -A/-E (cr=N,sid=N,nonce=N[,key=HEX32])",
        ),
        (
            "-L --quic-lb cr=0,sid=3,nonce=6",
            "--quic-lb takes no SPEC with -L",
        ),
        (
            "-a -u 10.0.0.1:443 -r 10.0.0.2 --quic-sid xyz",
            "illegal quic-sid: QUIC server ID `xyz` is not 1 to 15 bytes in hex (2 to 30 hex digits)",
        ),
        (
            "-a -u 10.0.0.1:443 -r 10.0.0.2 --quic-lb cr=0,sid=3,nonce=6",
            "Illegal 'quic-lb' option with the 'add-server' command",
        ),
        (
            "-A -u 10.0.0.1:443 --quic-sid 01",
            "Illegal 'quic-sid' option with the 'add-service' command",
        ),
        (
            "-a -u 10.0.0.1:443 -r 10.0.0.2 --quic-sid 01 --quic-sid 02",
            "multiple 'quic-sid' options specified",
        ),
    ] {
        e2(args, msg);
    }
}
