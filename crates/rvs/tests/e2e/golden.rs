//! Golden tests: sequences of real ipvsadm commands (from the seed
//! documents) through rvsadm; output compared byte for byte with what
//! ipvsadm 1.31 prints for the same table (its printf formats, spec §4.3).

use crate::harness::{Rvsd, parts};

/// The seed's examples (service on 10.0.0.1 with NAT real servers, a
/// persistent /24 `sh` service, a fwmark service, IPv6, SIP persistence).
const SEED: &[&str] = &[
    "-A -t 10.0.0.1:443 -s wlc -p 300",
    "-a -t 10.0.0.1:443 -r 192.168.100.11:443 -m -w 2",
    "-a -t 10.0.0.1:443 -r 192.168.100.12:443 -m -w 1",
    "-A -t 10.0.0.1:80 -s sh -p 300 -M 255.255.255.0",
    "-A -f 1 -s wlc",
    "-a -f 1 -r 192.168.100.11:0 -m -w 1",
    "-A -t [2001:db8::1]:80 -s rr",
    "-a -t [2001:db8::1]:80 -r [2001:db8::11]:80 -m",
    "-A -u 10.0.0.1:5060 -s rr -p 360 --pe sip",
    "-a -u 10.0.0.1:5060 -r 192.168.100.11:5060 -m -w 1",
    "-a -u 10.0.0.1:5060 -r 192.168.100.12:5060 -m -w 1",
];

const LIST: &str = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.0.0.1:80 sh persistent 300 mask 255.255.255.0
TCP  10.0.0.1:443 wlc persistent 300
  -> 192.168.100.11:443           Masq    2      0          0         
  -> 192.168.100.12:443           Masq    1      0          0         
UDP  10.0.0.1:5060 rr persistent 360 pe sip
  -> 192.168.100.11:5060          Masq    1      0          0         
  -> 192.168.100.12:5060          Masq    1      0          0         
TCP  [2001:db8::1]:80 rr
  -> [2001:db8::11]:80            Masq    1      0          0         
FWM  1 wlc
  -> 192.168.100.11:0             Masq    1      0          0         
";

const SAVE: &str = "\
-A -t 10.0.0.1:80 -s sh -p 300 -M 255.255.255.0
-A -t 10.0.0.1:443 -s wlc -p 300
-a -t 10.0.0.1:443 -r 192.168.100.11:443 -m -w 2
-a -t 10.0.0.1:443 -r 192.168.100.12:443 -m -w 1
-A -u 10.0.0.1:5060 -s rr -p 360 --pe sip
-a -u 10.0.0.1:5060 -r 192.168.100.11:5060 -m -w 1
-a -u 10.0.0.1:5060 -r 192.168.100.12:5060 -m -w 1
-A -t [2001:db8::1]:80 -s rr
-a -t [2001:db8::1]:80 -r [2001:db8::11]:80 -m -w 1
-A -f 1 -s wlc
-a -f 1 -r 192.168.100.11:0 -m -w 1
";

fn seeded(tag: &str) -> Rvsd {
    let d = Rvsd::start(tag, &[]);
    for cmd in SEED {
        d.ok(cmd);
    }
    d
}

#[test]
fn seed_sequence_lists_like_ipvsadm() {
    let d = seeded("golden");
    assert_eq!(d.ok("-Ln"), LIST);
    assert_eq!(d.ok("-L -n"), LIST);
    assert_eq!(d.ok("-ln"), LIST);
    assert_eq!(d.ok("-S -n"), SAVE);
    assert_eq!(d.ok("-Sn"), SAVE);
}

#[test]
fn stats_rate_thresholds_and_one_service() {
    let d = seeded("golden-stats");
    let stats = d.ok("-Ln --stats -t 10.0.0.1:443");
    assert_eq!(
        stats,
        "\
Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  10.0.0.1:443                        0        0        0        0        0
  -> 192.168.100.11:443                  0        0        0        0        0
  -> 192.168.100.12:443                  0        0        0        0        0
"
    );
    let rate = d.ok("-Ln --rate -u 10.0.0.1:5060");
    assert_eq!(
        rate,
        "\
Prot LocalAddress:Port                 CPS    InPPS   OutPPS    InBPS   OutBPS
  -> RemoteAddress:Port
UDP  10.0.0.1:5060                       0        0        0        0        0
  -> 192.168.100.11:5060                 0        0        0        0        0
  -> 192.168.100.12:5060                 0        0        0        0        0
"
    );
    d.ok("-a -t 10.0.0.1:80 -r 192.168.100.21 -m -x 100 -y 50");
    let thr = d.ok("-Ln --thresholds -t 10.0.0.1:80");
    assert_eq!(
        thr,
        "\
Prot LocalAddress:Port            Uthreshold Lthreshold ActiveConn InActConn 
  -> RemoteAddress:Port
TCP  10.0.0.1:80 sh persistent 300 mask 255.255.255.0
  -> 192.168.100.21:80            100        50         0          0         
"
    );
    let pc = d.ok("-Ln --persistent-conn -t 10.0.0.1:80");
    assert_eq!(
        pc,
        "\
Prot LocalAddress:Port            Weight    PersistConn ActiveConn InActConn 
  -> RemoteAddress:Port
TCP  10.0.0.1:80 sh persistent 300 mask 255.255.255.0
  -> 192.168.100.21:80            1         0           0          0         
"
    );
}

#[test]
fn connections_timeouts_and_tunnels() {
    let d = seeded("golden-conn");
    assert_eq!(
        d.ok("-Lcn"),
        "IPVS connection entries\npro expire state       source             virtual            destination\n"
    );
    assert_eq!(
        d.ok("-L --timeout"),
        "Timeout (tcp tcpfin udp): 900 120 300\n"
    );
    d.ok("--set 3600 60 0");
    assert_eq!(
        d.ok("-L --timeout"),
        "Timeout (tcp tcpfin udp): 3600 60 300\n"
    );
    assert_eq!(d.ok("-L --daemon"), "");
    d.ok("-A -t 10.0.0.1:8080 -s rr");
    d.ok("-a -t 10.0.0.1:8080 -r 203.0.113.11 -i -w 1");
    d.ok("-a -t 10.0.0.1:8080 -r 203.0.113.12 -i --tun-type gue --tun-port 6080 --tun-csum");
    assert_eq!(
        d.ok("-Ln --tun-info -t 10.0.0.1:8080"),
        "\
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn
TCP  10.0.0.1:8080 rr
  -> 203.0.113.11:8080            Tunnel  ipip          1      0          0         
  -> 203.0.113.12:8080            Tunnel  gue:6080:+c   1      0          0         
"
    );
}

#[test]
fn save_clear_restore_reproduces_the_listing() {
    let d = seeded("golden-restore");
    d.ok("-a -t 10.0.0.1:80 -r 192.168.100.31:80 -g -w 5");
    d.ok("-E -t 10.0.0.1:443 -s wrr -p 60");
    d.ok("-e -t 10.0.0.1:443 -r 192.168.100.12:443 -m -w 7");
    // rvs-only options survive the round trip too.
    d.ok("-A -t 10.0.0.5:80 -s rr --proxy-protocol v2 --max-conns 100");
    d.ok("-a -t 10.0.0.5:80 -r 192.168.100.40:80 -m --proxy-protocol v1");
    assert!(d.ok("-S -n").contains(
        "-A -t 10.0.0.5:80 -s rr --proxy-protocol v2 --max-conns 100\n-a -t 10.0.0.5:80 -r 192.168.100.40:80 -m -w 1 --proxy-protocol v1\n"
    ));
    let before = d.ok("-Ln");
    let saved = d.ok("-S -n");
    d.ok("-C");
    assert_eq!(
        d.ok("-Ln"),
        "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n"
    );
    let out = d.adm_args(&["-R"], Some(&saved));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(d.ok("-Ln"), before);
    assert_eq!(d.ok("-S -n"), saved);
}

#[test]
fn kernel_errors_have_ipvsadm_texts_and_exit_codes() {
    let d = seeded("golden-errors");
    for (cmd, text) in [
        ("-A -t 10.0.0.1:443 -s rr", "Service already exists\n"),
        ("-E -t 10.0.0.9:80 -s rr", "No such service\n"),
        ("-D -t 10.0.0.9:80", "No such service\n"),
        ("-Z -t 10.0.0.9:80", "No such service\n"),
        ("-a -t 10.0.0.9:80 -r 1.2.3.4", "Service not defined\n"),
        ("-e -t 10.0.0.9:80 -r 1.2.3.4", "Service not defined\n"),
        ("-d -t 10.0.0.9:80 -r 1.2.3.4", "Service not defined\n"),
        (
            "-a -t 10.0.0.1:443 -r 192.168.100.11:443 -m",
            "Destination already exists\n",
        ),
        (
            "-e -t 10.0.0.1:443 -r 192.168.100.99:443 -m",
            "No such destination\n",
        ),
        (
            "-d -t 10.0.0.1:443 -r 192.168.100.99:443",
            "No such destination\n",
        ),
        (
            "-A -t 10.0.0.2:80 -s nosuch",
            "Scheduler or persistence engine not found\n",
        ),
        (
            "-A -u 10.0.0.2:5060 -p --pe nosuch",
            "Scheduler or persistence engine not found\n",
        ),
        (
            "-a -t 10.0.0.1:443 -r 192.168.100.50:443 -m -x 10 -y 20",
            "Numerical result out of range\n",
        ),
    ] {
        let (out, err, code) = parts(&d.adm(cmd));
        assert_eq!(
            (out.as_str(), err.as_str(), code),
            ("", text, 255),
            "rvsadm {cmd}"
        );
    }
    // Listing a missing service: ipvsadm's own check, exit 1.
    let (out, err, code) = parts(&d.adm("-Ln -t 10.0.0.9:80"));
    assert_eq!(
        (out.as_str(), err.as_str(), code),
        ("", "No such service\n", 1)
    );
    // Failed commands changed nothing.
    assert_eq!(d.ok("-Ln"), LIST);
}

#[test]
fn parse_errors_are_ipvsadm_s() {
    let d = Rvsd::start("golden-parse", &[]);
    for (cmd, text, code) in [
        (
            "-A -t 10.0.0.1:0 -s rr",
            "Zero port specified for non-persistent service\n",
            2,
        ),
        (
            "-A -t 10.0.0.1:80 -o",
            "One-Packet Scheduling is only for UDP virtual services\n",
            2,
        ),
        (
            "-A -t 10.0.0.1:80 -s rr -b sh-port",
            "incompatible scheduler flag `sh-port'\n",
            2,
        ),
        (
            "-A -t 10.0.0.1:80 -b bogus",
            "invalid scheduler flag `bogus'\n",
            2,
        ),
        (
            "-a -t 10.0.0.1:80",
            "You need to supply the 'real-server' option for the 'add-server' command\n",
            2,
        ),
        (
            "-D -t 10.0.0.1:80 -s rr",
            "Illegal 'scheduler' option with the 'delete-service' command\n",
            2,
        ),
        (
            "-Ln -c --stats",
            "options conflicts in the list command\n",
            2,
        ),
        (
            "-a -t 10.0.0.1:80 -r 1.2.3.4 -m --tun-type gue",
            "Tunnel options conflict with forward method\n",
            2,
        ),
        (
            "-A -t 10.0.0.1:80 -t 10.0.0.2:80",
            "multiple 'service-address' options specified\n",
            2,
        ),
        (
            "--bogus",
            "Try `rvsadm -h' or 'rvsadm --help' for more information.\n",
            255,
        ),
    ] {
        let (out, err, c) = parts(&d.adm(cmd));
        assert_eq!(
            (out.as_str(), err.as_str(), c),
            ("", text, code),
            "rvsadm {cmd}"
        );
    }
}

/// `-R` as the kernel's ipvsadm 1.31 does it (checked against it in the
/// kernel-IPVS guest, `ipvs_parity`): each line applied on its own, a line
/// the kernel refuses printed and passed over, the exit status the last
/// line's; a line ipvsadm's parser exits on ends the restore there.
#[test]
fn restore_goes_on_past_refused_lines_like_ipvsadm() {
    let d = seeded("golden-restore");
    let batch = "-A -t 10.0.0.7:80 -s rr\n-A -t 10.0.0.1:443 -s rr\n\
                 -a -t 10.0.0.7:80 -r 192.168.1.1 -m\n-a -t 10.9.9.9:80 -r 192.168.1.2\n";
    let (_, err, code) = parts(&d.adm_args(&["-R"], Some(batch)));
    assert_eq!(
        (err.as_str(), code),
        ("Service already exists\nService not defined\n", 255),
        "errors printed, the last line's status"
    );
    let list = d.ok("-Sn");
    assert!(
        list.contains("-A -t 10.0.0.7:80 -s rr\n-a -t 10.0.0.7:80 -r 192.168.1.1:80 -m -w 1\n"),
        "{list}"
    );
    // A last line that succeeds: status 0 though an earlier line failed.
    let (_, err, code) =
        parts(&d.adm_args(&["-R"], Some("-A -t 10.0.0.7:80\n-A -t 10.0.0.8:80\n")));
    assert_eq!((err.as_str(), code), ("Service already exists\n", 0));
    // A parse error ends the restore: the lines before it stay applied.
    let (_, err, code) = parts(&d.adm_args(
        &["-R"],
        Some("-A -t 10.0.0.9:80\n-A -t 10.0.0.10:80 -p abc\n-A -t 10.0.0.11:80\n"),
    ));
    assert_eq!(
        (err.as_str(), code),
        ("invalid timeout value `abc' specified\n", 2)
    );
    let list = d.ok("-Sn");
    assert!(
        list.contains("10.0.0.9:80") && !list.contains("10.0.0.11:80"),
        "{list}"
    );
}

/// `rvsadm -Ln | head` ends as `ipvsadm -Ln | head` does: the write to the
/// closed pipe kills it with SIGPIPE, with nothing on stderr (Rust's
/// runtime ignores SIGPIPE, so without rvsadm restoring it the write
/// panicked: "failed printing to stdout: Broken pipe", exit 101).
#[test]
fn a_closed_pipe_ends_rvsadm_quietly_as_it_ends_ipvsadm() {
    use std::os::unix::process::ExitStatusExt;
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = std::process::Command::new(crate::harness::RVSADM)
        .arg("-h")
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("rvsadm");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(13), "{:?}: {err}", out.status);
    assert!(err.is_empty(), "{err}");
}

#[test]
fn help_and_version() {
    let d = Rvsd::start("golden-help", &[]);
    let (out, _, code) = parts(&d.adm("-h"));
    assert_eq!(code, 0);
    assert!(
        out.contains("Usage:\n  rvsadm -A|E virtual-service"),
        "{out}"
    );
    assert!(out.contains("--tcp-service|-t  service-address"));
    let (out, _, code) = parts(&d.adm("-v"));
    assert_eq!(code, 0);
    assert!(
        out.starts_with("ipvsadm v1.31") || out.contains("1.2.1"),
        "{out}"
    );
}

/// Without -n, addresses and ports are shown by name as ipvsadm does
/// (`localhost` from /etc/hosts, `http`/`https` from /etc/services or the
/// built-in table), in listings and in -S.
#[test]
fn names_without_numeric() {
    let d = Rvsd::start("golden-names", &[]);
    d.ok("-A -t 127.0.0.1:80 -s rr");
    d.ok("-a -t 127.0.0.1:80 -r 127.0.0.1:443 -m");
    assert_eq!(
        d.ok("-L"),
        "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  localhost:http rr
  -> localhost:https              Masq    1      0          0         
"
    );
    assert_eq!(
        d.ok("-S"),
        "-A -t localhost:http -s rr\n-a -t localhost:http -r localhost:https -m -w 1\n"
    );
    // Names are accepted on input too.
    d.ok("-A -t localhost:https -s wlc");
    assert!(d.ok("-Ln").contains("TCP  127.0.0.1:443 wlc\n"));
}

#[test]
fn laddr_pools_list_save_and_restore() {
    let d = Rvsd::start("golden-laddr", &[]);
    d.ok("-A -t 10.0.0.1:80 -s rr");
    d.ok("--add-laddr -t 10.0.0.1:80 -z 192.168.100.5-192.168.100.6");
    d.ok("--add-laddr -t 10.0.0.1:80 -z 192.168.100.9");
    d.ok("-a -t 10.0.0.1:80 -r 10.1.0.2:80 --fullnat -w 1");
    let (_, err, code) = parts(&d.adm("--add-laddr -t 10.0.0.1:80 -z 192.168.100.6"));
    assert_eq!((err.trim(), code), ("Local address already exists", 255));
    // -E leaves the pool alone.
    d.ok("-E -t 10.0.0.1:80 -s wlc");
    assert_eq!(
        d.ok("--get-laddr"),
        "\
VIP:VPORT                    TOTAL    LADDR                                    CONNS
TCP  10.0.0.1:80             2
                                      192.168.100.5-192.168.100.6              0
                                      192.168.100.9                            0
"
    );
    let save = d.ok("-Sn");
    assert_eq!(
        save,
        "\
-A -t 10.0.0.1:80 -s wlc
--add-laddr -t 10.0.0.1:80 -z 192.168.100.5-192.168.100.6
--add-laddr -t 10.0.0.1:80 -z 192.168.100.9
-a -t 10.0.0.1:80 -r 10.1.0.2:80 --fullnat -w 1
"
    );
    let e = Rvsd::start("golden-laddr-restore", &[]);
    let (_, err, code) = parts(&e.adm_args(&["-R"], Some(&save)));
    assert_eq!((err.as_str(), code), ("", 0));
    assert_eq!(e.ok("-Sn"), save);
    d.ok("--del-laddr -t 10.0.0.1:80 -z 192.168.100.9");
    let (_, err, code) = parts(&d.adm("--del-laddr -t 10.0.0.1:80 -z 192.168.100.9"));
    assert_eq!((err.trim(), code), ("No such local address", 255));
    assert_eq!(d.ok("--get-laddr -t 10.0.0.1:80").lines().count(), 3);
}
