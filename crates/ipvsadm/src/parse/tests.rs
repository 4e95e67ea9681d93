//! Unit tests of the command-line parser.

use super::apply::is_prime;
use super::options::NUM_OPT;
use super::*;

#[test]
fn legality_rows_match_ipvsadm_columns() {
    // Spot checks against commands_v_options in ipvsadm.c.
    assert_eq!(&Cmd::List.legality()[..3], b" 11");
    assert_eq!(Cmd::List.legality()[C_TIMEOUT], b'1');
    assert_eq!(Cmd::List.legality()[C_DAEMON], b'1');
    assert_eq!(Cmd::List.legality()[C_TUN_INFO], b' ');
    assert_eq!(Cmd::List.legality()[C_ONEPACKET], b'x');
    assert_eq!(Cmd::Add.legality()[C_SCHED_FLAGS], b' ');
    assert_eq!(Cmd::Add.legality()[C_MCAST_GROUP], b'x');
    assert_eq!(Cmd::Add.legality()[C_MH_TABLE_SIZE], b' ');
    assert_eq!(Cmd::AddDest.legality()[C_LTHRESHOLD], b' ');
    assert_eq!(Cmd::AddDest.legality()[C_MCAST], b'x');
    assert_eq!(Cmd::AddDest.legality()[C_TUN_INFO], b'x');
    assert_eq!(Cmd::AddDest.legality()[C_TUN_TYPE], b' ');
    assert_eq!(Cmd::AddDest.legality()[C_TUN_REMCSUM], b' ');
    assert_eq!(Cmd::StartDaemon.legality()[C_MCAST], b' ');
    assert_eq!(Cmd::StartDaemon.legality()[C_SYNCID], b' ');
    assert_eq!(Cmd::StartDaemon.legality()[C_EXACT], b'x');
    assert_eq!(Cmd::StartDaemon.legality()[C_SYNC_MAXLEN], b' ');
    assert_eq!(Cmd::StartDaemon.legality()[C_TUN_INFO], b'x');
    assert_eq!(Cmd::StopDaemon.legality()[C_SYNCID], b' ');
    assert_eq!(Cmd::StopDaemon.legality()[C_MCAST], b'x');
    assert_eq!(Cmd::Save.legality()[C_NUMERIC], b' ');
    assert_eq!(Cmd::Zero.legality()[C_SERVICE], b' ');
    assert_eq!(Cmd::AddLaddr.legality()[C_LADDR], b'+');
    assert_eq!(Cmd::Add.legality()[C_LADDR], b'x');
    assert_eq!(Cmd::Add.legality()[C_QUIC_LB], b' ');
    assert_eq!(Cmd::List.legality()[C_QUIC_LB], b' ');
    assert_eq!(Cmd::AddDest.legality()[C_QUIC_LB], b'x');
    assert_eq!(Cmd::AddDest.legality()[C_QUIC_SID], b' ');
    assert_eq!(Cmd::Edit.legality()[C_QUIC_SID], b'x');
    assert_eq!(C_QUIC_SID + 1, NUM_OPT);
}

#[test]
fn primes() {
    assert!(is_prime(4093));
    assert!(is_prime(2));
    assert!(!is_prime(4095));
    assert!(!is_prime(1));
}

#[test]
fn check_tunnel_says_what_the_command_line_says() {
    let cli = |opts: &str| {
        parse_args(
            format!("-a -t 10.0.0.1:80 -r 10.0.0.2 -i {opts}")
                .split_whitespace()
                .map(str::to_owned),
        )
        .map(|_| ())
        .map_err(|e| e.message)
    };
    let cases: [(&str, TunnelType, Option<u16>, Option<TunnelCsum>); 7] = [
        ("--tun-type ipip", TunnelType::Ipip, None, None),
        (
            "--tun-type gue --tun-port 6080 --tun-remcsum",
            TunnelType::Gue,
            Some(6080),
            Some(TunnelCsum::RemCsum),
        ),
        (
            "--tun-type gre --tun-csum",
            TunnelType::Gre,
            None,
            Some(TunnelCsum::Csum),
        ),
        (
            "--tun-type ipip --tun-port 6080",
            TunnelType::Ipip,
            Some(6080),
            None,
        ),
        ("--tun-type gue", TunnelType::Gue, None, None),
        (
            "--tun-type gre --tun-remcsum",
            TunnelType::Gre,
            None,
            Some(TunnelCsum::RemCsum),
        ),
        (
            "--tun-type gue --tun-port 0",
            TunnelType::Gue,
            Some(0),
            None,
        ),
    ];
    for (opts, kind, port, csum) in cases {
        assert_eq!(
            check_tunnel(kind, port, csum).map_err(|e| e.message),
            cli(opts),
            "{opts}"
        );
    }
    assert!(check_tunnel(TunnelType::Gue, None, None).is_err());
}

/// The family check the REST API shares gives the command line's answer:
/// another family only behind an encapsulating tunnel, never `opt`.
#[test]
fn check_family_says_what_the_command_line_says() {
    let cli = |svc: &str, rs: &str, opts: &str| {
        parse_args(
            format!("-a {svc} -r {rs} {opts}")
                .split_whitespace()
                .map(str::to_owned),
        )
        .map(|_| ())
        .map_err(|e| e.message)
    };
    let v4 = "-t 10.0.0.1:80";
    let v6 = "-t [2001:db8::1]:80";
    let tunnel = |kind| {
        ForwardMethod::Tunnel(Tunnel {
            kind,
            ..Tunnel::default()
        })
    };
    let cases = [
        (v4, "[2001:db8::2]:80", "-g", ForwardMethod::Route),
        (v4, "[2001:db8::2]:80", "-m", ForwardMethod::Masq),
        (v4, "[2001:db8::2]:80", "-i", tunnel(TunnelType::Ipip)),
        (
            v4,
            "[2001:db8::2]:80",
            "-i --tun-type opt",
            tunnel(TunnelType::Opt),
        ),
        (v6, "10.0.0.2:80", "-m", ForwardMethod::Masq),
        (v6, "10.0.0.2:80", "-i", tunnel(TunnelType::Ipip)),
        (v4, "10.0.0.2:80", "-m", ForwardMethod::Masq),
        (
            v6,
            "[2001:db8::2]:80",
            "-i --tun-type opt",
            tunnel(TunnelType::Opt),
        ),
    ];
    let mut refused = 0;
    for (svc, rs, opts, forward) in cases {
        let af = if svc == v4 {
            AddrFamily::Inet
        } else {
            AddrFamily::Inet6
        };
        let addr: IpAddr = rs
            .rsplit_once(':')
            .map(|(a, _)| a.trim_matches(['[', ']']))
            .and_then(|a| a.parse().ok())
            .expect("an address");
        let shared = check_family(af, addr, &forward).map_err(|e| e.message);
        refused += usize::from(shared.is_err());
        assert_eq!(shared, cli(svc, rs, opts), "{svc} -r {rs} {opts}");
    }
    assert_eq!(refused, 4);
}
