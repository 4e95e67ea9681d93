//! ipvsadm's output formats, byte for byte (ipvsadm.c `list_all`,
//! `print_title`, `print_service_entry`, `print_largenum`, `list_conn`,
//! `print_conn`, `list_timeout`, `list_daemon`).
//!
//! Quirks kept on purpose because scripts parse this output: `%-Ns` pads by
//! bytes and never truncates, except that an IPv4 service column is cut at
//! 33 bytes and an IPv4 real-server column at 28 (IPv6 ones are not cut);
//! the dest line ends in the trailing spaces of `%-10u`; `-c` with
//! `--persistent-conn` pads the destination to 16 and the PE name to 18
//! (its title uses 18 and 16); a one-service listing has no version header;
//! a sh/mh service with only generic flag bits prints an empty ` ()`.
//!
//! Sorting follows libipvs (`ipvs_cmp_services`, `ipvs_cmp_dests`) but as a
//! true total order: libipvs subtracts 32-bit values and returns the
//! difference as an `int`, so addresses (or marks) 2^31 or more apart
//! compare backwards there, and a mixed IPv4/IPv6 real-server list compares
//! raw address words. rvs sorts by value (IPv4 before IPv6 among real
//! servers); the order differs from ipvsadm only in those cases.

use std::fmt::Write as _;
use std::net::IpAddr;

use rvs_core::sched::Scheduler;
use serde::{Deserialize, Serialize};

use crate::names::{Names, SystemNames};
use crate::snapshot::{
    ConnSnap, DestSnap, ForwardSnap, NetmaskSnap, ServiceKeySnap, ServiceSnap, Snapshot,
    TunCsumSnap, TunKindSnap,
};

/// `IP_VS_VERSION_CODE` 0x010201, printed in the header.
pub const IPVS_VERSION: (u32, u32, u32) = (1, 2, 1);

/// What a listing shows.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListTarget {
    /// All services (`-L`).
    #[default]
    All,
    /// One service (`-L -t addr:port`); no version header.
    Service(ServiceKeySnap),
    /// Connection entries (`-c`).
    Connections,
    /// `--timeout`.
    Timeout,
    /// `--daemon`.
    Daemon,
}

/// The list command's selection and format flags.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListOptions {
    /// What to list.
    pub target: ListTarget,
    /// `-n`: no name resolution.
    pub numeric: bool,
    /// `--stats`.
    pub stats: bool,
    /// `--rate`.
    pub rate: bool,
    /// `--thresholds`.
    pub thresholds: bool,
    /// `--persistent-conn`.
    pub persistent_conn: bool,
    /// `--tun-info`.
    pub tun_info: bool,
    /// `--nosort`.
    pub nosort: bool,
    /// `--exact`/`-X`: no K/M/G/T abbreviation.
    pub exact: bool,
    /// rvs `--quic-lb`: show QUIC-LB services' configs (keys as
    /// fingerprints), each real server's server ID, and the routing
    /// counters.
    pub quic_lb: bool,
}

/// A listing that fails the way ipvsadm's does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ListError {
    /// stderr text without the trailing newline.
    pub message: String,
    /// Exit status (1).
    pub exit_code: i32,
}

/// Left-justify `s` in `w` bytes (C `%-*s`, never truncates).
fn lpad(out: &mut String, s: &str, w: usize) {
    out.push_str(s);
    for _ in s.len()..w {
        out.push(' ');
    }
}

/// Cut to at most `n` bytes (on a character boundary).
fn cut(s: &mut String, n: usize) {
    if s.len() > n {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// `print_largenum`: 9 columns, abbreviated with K/M/G/T unless `exact`.
pub fn largenum(out: &mut String, i: u64, exact: bool) {
    if exact {
        let digits = i.to_string();
        let w = if digits.len() <= 8 {
            9
        } else {
            digits.len() + 1
        };
        let _ = write!(out, "{i:>w$}");
        return;
    }
    let _ = if i < 100_000_000 {
        write!(out, "{i:>9}")
    } else if i < 1_000_000_000 {
        write!(out, "{:>8}K", i / 1_000)
    } else if i < 100_000_000_000 {
        write!(out, "{:>8}M", i / 1_000_000)
    } else if i < 100_000_000_000_000 {
        write!(out, "{:>8}G", i / 1_000_000_000)
    } else {
        write!(out, "{:>8}T", i / 1_000_000_000_000)
    };
}

/// `addrport_to_anyname`: `addr:port`, IPv6 in brackets, names unless
/// numeric; at most 59 bytes (ipvsadm's 60-byte buffer).
fn addrport(addr: IpAddr, port: u16, proto: u8, numeric: bool, names: &dyn Names) -> String {
    let (l, r) = if addr.is_ipv4() { ("", "") } else { ("[", "]") };
    let mut s = if numeric {
        format!("{l}{addr}{r}:{port}")
    } else {
        let host = names.addr_to_host(addr).unwrap_or_else(|| addr.to_string());
        let serv = names
            .port_to_service(port, proto)
            .unwrap_or_else(|| port.to_string());
        format!("{l}{host}{r}:{serv}")
    };
    cut(&mut s, 59);
    s
}

fn protocol_name(p: u8) -> &'static str {
    match p {
        6 => "TCP",
        17 => "UDP",
        132 => "SCTP",
        _ => "?",
    }
}

fn protocol_option(p: u8) -> &'static str {
    match p {
        6 => "-t",
        17 => "-u",
        132 => "--sctp-service",
        _ => "--xxx-service",
    }
}

const SCHED_FLAGS_MASK: u32 = 0x08 | 0x10 | 0x20;

/// `print_sched_flags`: names depend on the scheduler.
fn sched_flags_text(s: &ServiceSnap) -> String {
    let names: [(u32, &str); 3] = match s.scheduler {
        Scheduler::Sh => [(0x08, "sh-fallback"), (0x10, "sh-port"), (0, "")],
        Scheduler::Mh => [(0x08, "mh-fallback"), (0x10, "mh-port"), (0, "")],
        _ => [(0x08, "flag-1"), (0x10, "flag-2"), (0x20, "flag-3")],
    };
    names
        .iter()
        .filter(|(bit, _)| *bit != 0 && s.sched_flags & bit != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(",")
}

fn svc_sort_key(k: &ServiceKeySnap) -> (i32, u8, u8, u128, u16) {
    let addr_key = |a: &IpAddr| match a {
        IpAddr::V4(v) => u128::from(u32::from(*v)),
        IpAddr::V6(v) => u128::from(*v),
    };
    match k {
        ServiceKeySnap::Addr {
            protocol,
            addr,
            port,
        } => (
            0,
            if addr.is_ipv4() { 2 } else { 10 },
            *protocol,
            addr_key(addr),
            *port,
        ),
        // libipvs compares `fwmark` by an int difference and ipvsadm prints
        // it with `%d`: marks from 2^31 up sort first and print negative.
        ServiceKeySnap::Fwmark { mark, ipv6 } => {
            (*mark as i32, if *ipv6 { 10 } else { 2 }, 0, 0, 0)
        }
    }
}

fn dest_sort_key(d: &DestSnap) -> (bool, u128, u16) {
    match d.addr {
        IpAddr::V4(v) => (false, u128::from(u32::from(v)), d.port),
        IpAddr::V6(v) => (true, u128::from(v), d.port),
    }
}

/// Services in listing order (sorted unless `nosort`).
fn ordered_services(snap: &Snapshot, nosort: bool) -> Vec<&ServiceSnap> {
    let mut v: Vec<&ServiceSnap> = snap.services.iter().collect();
    if !nosort {
        v.sort_by_key(|s| svc_sort_key(&s.key));
    }
    v
}

fn ordered_dests(s: &ServiceSnap, nosort: bool) -> Vec<&DestSnap> {
    let mut v: Vec<&DestSnap> = s.dests.iter().collect();
    if !nosort {
        v.sort_by_key(|d| dest_sort_key(d));
    }
    v
}

fn fwd_name(f: &ForwardSnap) -> &'static str {
    match f {
        ForwardSnap::Masq => "Masq",
        ForwardSnap::Local => "Local",
        ForwardSnap::Route => "Route",
        ForwardSnap::Tunnel { .. } => "Tunnel",
        ForwardSnap::FullNat => "FullNat",
    }
}

fn fwd_switch(f: &ForwardSnap) -> &'static str {
    match f {
        ForwardSnap::Masq => "-m",
        ForwardSnap::Tunnel { .. } => "-i",
        ForwardSnap::Local | ForwardSnap::Route => "-g",
        ForwardSnap::FullNat => "--fullnat",
    }
}

fn tun_name(k: TunKindSnap) -> &'static str {
    match k {
        TunKindSnap::Ipip => "ipip",
        TunKindSnap::Gue => "gue",
        TunKindSnap::Gre => "gre",
        TunKindSnap::Geneve => "geneve",
        TunKindSnap::Opt => "opt",
    }
}

fn tun_flag_short(c: TunCsumSnap) -> &'static str {
    match c {
        TunCsumSnap::NoCsum => "-c",
        TunCsumSnap::Csum => "+c",
        TunCsumSnap::RemCsum => "r+c",
    }
}

fn tun_flag_opt(c: TunCsumSnap) -> &'static str {
    match c {
        TunCsumSnap::NoCsum => "--tun-nocsum",
        TunCsumSnap::Csum => "--tun-csum",
        TunCsumSnap::RemCsum => "--tun-remcsum",
    }
}

/// `fwd_tun_info`: `ipip`, `gue:PORT:FLAG`, `gre:FLAG`, else `n/a`; rvs's
/// Geneve prints like GRE, `geneve:FLAG`; DSR by IP option as `opt`.
fn tun_info(f: &ForwardSnap) -> String {
    match f {
        ForwardSnap::Tunnel {
            kind: TunKindSnap::Ipip,
            ..
        } => "ipip".to_owned(),
        ForwardSnap::Tunnel {
            kind: TunKindSnap::Gue,
            port,
            csum,
        } => format!("gue:{port}:{}", tun_flag_short(*csum)),
        ForwardSnap::Tunnel {
            kind: TunKindSnap::Gre,
            csum,
            ..
        } => format!("gre:{}", tun_flag_short(*csum)),
        ForwardSnap::Tunnel {
            kind: TunKindSnap::Geneve,
            csum,
            ..
        } => format!("geneve:{}", tun_flag_short(*csum)),
        ForwardSnap::Tunnel {
            kind: TunKindSnap::Opt,
            ..
        } => "opt".to_owned(),
        _ => "n/a".to_owned(),
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Mode {
    Rule,
    Stats,
    Rate,
    Thresholds,
    PersistentConn,
    TunInfo,
    QuicLb,
    Plain,
}

fn mode_of(o: &ListOptions) -> Mode {
    if o.stats {
        Mode::Stats
    } else if o.rate {
        Mode::Rate
    } else if o.thresholds {
        Mode::Thresholds
    } else if o.persistent_conn {
        Mode::PersistentConn
    } else if o.tun_info {
        Mode::TunInfo
    } else if o.quic_lb {
        Mode::QuicLb
    } else {
        Mode::Plain
    }
}

fn print_title(out: &mut String, mode: Mode) {
    let cols = |out: &mut String, names: [&str; 5], w: usize, right: bool| {
        lpad(out, "Prot LocalAddress:Port", 33);
        for n in names.iter().filter(|n| !n.is_empty()) {
            out.push(' ');
            if right {
                let _ = write!(out, "{n:>w$}");
            } else {
                lpad(out, n, w);
            }
        }
        out.push_str("\n  -> RemoteAddress:Port\n");
    };
    match mode {
        Mode::Stats => cols(
            out,
            ["Conns", "InPkts", "OutPkts", "InBytes", "OutBytes"],
            8,
            true,
        ),
        Mode::Rate => cols(out, ["CPS", "InPPS", "OutPPS", "InBPS", "OutBPS"], 8, true),
        Mode::Thresholds => cols(
            out,
            ["Uthreshold", "Lthreshold", "ActiveConn", "InActConn", ""],
            10,
            false,
        ),
        Mode::PersistentConn => {
            lpad(out, "Prot LocalAddress:Port", 33);
            out.push(' ');
            lpad(out, "Weight", 9);
            out.push(' ');
            lpad(out, "PersistConn", 11);
            out.push(' ');
            lpad(out, "ActiveConn", 10);
            out.push(' ');
            lpad(out, "InActConn", 10);
            out.push_str("\n  -> RemoteAddress:Port\n");
        }
        Mode::TunInfo => out.push_str(
            "Prot LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn\n",
        ),
        Mode::Plain => out.push_str(
            "Prot LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n",
        ),
        Mode::QuicLb => {
            lpad(out, "Prot LocalAddress:Port", 33);
            out.push_str("    ByCID Fallback Undecodable\n");
            out.push_str("  => QUIC-LB config (key: fingerprint)\n");
            out.push_str("  -> RemoteAddress:Port           ServerID\n");
        }
        Mode::Rule => {}
    }
}

/// The service column (`TCP  1.2.3.4:80`, `FWM  7`) or, in rule mode, the
/// service options (`-t 1.2.3.4:80`, `-f 7 -6`).
fn svc_name(s: &ServiceSnap, rule: bool, numeric: bool, names: &dyn Names) -> String {
    match s.key {
        ServiceKeySnap::Fwmark { mark, ipv6 } => match (rule, ipv6) {
            (true, true) => format!("-f {} -6", mark as i32),
            (true, false) => format!("-f {}", mark as i32),
            (false, true) => format!("FWM  {} IPv6", mark as i32),
            (false, false) => format!("FWM  {}", mark as i32),
        },
        ServiceKeySnap::Addr {
            protocol,
            addr,
            port,
        } => {
            let v = addrport(addr, port, protocol, numeric, names);
            if rule {
                format!("{} {v}", protocol_option(protocol))
            } else {
                let mut n = String::new();
                lpad(&mut n, protocol_name(protocol), 4);
                n.push(' ');
                n.push_str(&v);
                if addr.is_ipv4() {
                    cut(&mut n, 33);
                }
                n
            }
        }
    }
}

fn svc_proto(s: &ServiceSnap) -> u8 {
    match s.key {
        ServiceKeySnap::Addr { protocol, .. } => protocol,
        ServiceKeySnap::Fwmark { .. } => 0,
    }
}

fn print_service(
    out: &mut String,
    s: &ServiceSnap,
    mode: Mode,
    o: &ListOptions,
    names: &dyn Names,
) {
    let rule = mode == Mode::Rule;
    let name = svc_name(s, rule, o.numeric, names);
    let mask_text = |out: &mut String, word: &str| match s.netmask {
        NetmaskSnap::V4(m) if !s.key.is_ipv6() && m != std::net::Ipv4Addr::BROADCAST => {
            let _ = write!(out, " {word} {m}");
        }
        NetmaskSnap::V6(p) if s.key.is_ipv6() && p != 128 => {
            let _ = write!(out, " {word} {p}");
        }
        _ => {}
    };
    match mode {
        Mode::Rule => {
            let _ = write!(out, "-A {name} -s {}", s.scheduler);
            if let Some(t) = s.persistent {
                let _ = write!(out, " -p {t}");
                mask_text(out, "-M");
            }
            if let Some(pe) = s.pe.as_deref().filter(|p| !p.is_empty()) {
                let _ = write!(out, " --pe {pe}");
            }
            if s.one_packet {
                out.push_str(" -o");
            }
            if s.sched_flags & SCHED_FLAGS_MASK != 0 {
                out.push_str(" -b ");
                out.push_str(&sched_flags_text(s));
            }
            if s.mh_table_size != rvs_core::model::DEFAULT_MH_TABLE_SIZE {
                let _ = write!(out, " --mh-table-size {}", s.mh_table_size);
            }
            if let Some(pp) = &s.proxy_protocol {
                let _ = write!(out, " --proxy-protocol {pp}");
            }
            if s.max_conns != 0 {
                let _ = write!(out, " --max-conns {}", s.max_conns);
            }
            for q in &s.quic_lb {
                let _ = write!(out, " --quic-lb {q}");
            }
        }
        Mode::QuicLb => {
            lpad(out, &name, 33);
            let q = &s.quic_lb_counters;
            largenum(out, q.by_cid, o.exact);
            largenum(out, q.by_fallback, o.exact);
            out.push(' ');
            let _ = write!(out, "{:>11}", q.undecodable);
            for spec in &s.quic_lb {
                out.push_str("\n  => ");
                out.push_str(&quic_lb_text(spec));
            }
        }
        Mode::Stats | Mode::Rate => {
            lpad(out, &name, 33);
            let v = if mode == Mode::Stats {
                let st = &s.stats;
                [st.conns, st.inpkts, st.outpkts, st.inbytes, st.outbytes]
            } else {
                let r = &s.rates;
                [r.cps, r.inpps, r.outpps, r.inbps, r.outbps]
            };
            for x in v {
                largenum(out, x, o.exact);
            }
        }
        _ => {
            let _ = write!(out, "{name} {}", s.scheduler);
            if s.sched_flags & SCHED_FLAGS_MASK != 0 {
                let _ = write!(out, " ({})", sched_flags_text(s));
            }
            if let Some(t) = s.persistent {
                let _ = write!(out, " persistent {t}");
                mask_text(out, "mask");
                if let Some(pe) = s.pe.as_deref().filter(|p| !p.is_empty()) {
                    let _ = write!(out, " pe {pe}");
                }
            }
            if s.one_packet {
                out.push_str(" ops");
            }
        }
    }
    out.push('\n');
    if rule {
        // The pool before the real servers: FULLNAT ones need it.
        for l in &s.laddrs {
            let _ = writeln!(out, "--add-laddr {name} -z {l}");
        }
    }

    let proto = svc_proto(s);
    for d in ordered_dests(s, o.nosort) {
        let mut dname = addrport(d.addr, d.port, proto, o.numeric, names);
        if !rule && d.addr.is_ipv4() {
            cut(&mut dname, 28);
        }
        if !rule {
            // Every listing but the rule form starts a server's line alike.
            out.push_str("  -> ");
            lpad(out, &dname, 28);
        }
        match mode {
            Mode::Rule => {
                let _ = write!(
                    out,
                    "-a {name} -r {dname} {} -w {}",
                    fwd_switch(&d.forward),
                    d.weight
                );
                if let ForwardSnap::Tunnel { kind, port, csum } = d.forward {
                    let _ = write!(out, " --tun-type {}", tun_name(kind));
                    match kind {
                        TunKindSnap::Ipip | TunKindSnap::Opt => {}
                        TunKindSnap::Gue => {
                            let _ = write!(out, " --tun-port {port} {}", tun_flag_opt(csum));
                        }
                        TunKindSnap::Gre | TunKindSnap::Geneve => {
                            let _ = write!(out, " {}", tun_flag_opt(csum));
                        }
                    }
                }
                if let Some(pp) = &d.proxy_protocol {
                    let _ = write!(out, " --proxy-protocol {pp}");
                }
                if let Some(sid) = &d.quic_server_id {
                    let _ = write!(out, " --quic-sid {sid}");
                }
                out.push('\n');
            }
            Mode::QuicLb => {
                let _ = writeln!(out, " {}", d.quic_server_id.as_deref().unwrap_or("-"));
            }
            Mode::Stats => {
                let st = &d.stats;
                for x in [st.conns, st.inpkts, st.outpkts, st.inbytes, st.outbytes] {
                    largenum(out, x, o.exact);
                }
                out.push('\n');
            }
            Mode::Rate => {
                let r = &d.rates;
                let _ = write!(out, " {:>8} {:>8} {:>8}", r.cps, r.inpps, r.outpps);
                largenum(out, r.inbps, o.exact);
                largenum(out, r.outbps, o.exact);
                out.push('\n');
            }
            Mode::Thresholds => {
                let _ = writeln!(
                    out,
                    " {:<10} {:<10} {:<10} {:<10}",
                    d.u_threshold, d.l_threshold, d.active, d.inactive
                );
            }
            Mode::PersistentConn => {
                let _ = writeln!(
                    out,
                    " {:<9} {:<11} {:<10} {:<10}",
                    d.weight, d.persist, d.active, d.inactive
                );
            }
            Mode::TunInfo => {
                out.push(' ');
                lpad(out, fwd_name(&d.forward), 7);
                out.push(' ');
                lpad(out, &tun_info(&d.forward), 13);
                let _ = writeln!(out, " {:<6} {:<10} {:<10}", d.weight, d.active, d.inactive);
            }
            Mode::Plain => {
                out.push(' ');
                lpad(out, fwd_name(&d.forward), 7);
                let _ = writeln!(out, " {:<6} {:<10} {:<10}", d.weight, d.active, d.inactive);
            }
        }
    }
}

/// A QUIC-LB config for `-L --quic-lb`: `cr=0 sid=3 nonce=6 plaintext`,
/// or with a key its mode and a fingerprint (`single-pass key=fp:1a2b3c4d`),
/// never the key itself.
fn quic_lb_text(spec: &str) -> String {
    match rvs_core::model::QuicLbConfig::parse_spec(spec) {
        Ok(c) => {
            let mut t = format!(
                "cr={} sid={} nonce={} {}",
                c.rotation,
                c.server_id_len,
                c.nonce_len,
                c.mode().name()
            );
            if let Some(fp) = c.key_fingerprint() {
                let _ = write!(t, " key=fp:{fp}");
            }
            t
        }
        Err(_) => "(unreadable config)".to_owned(),
    }
}

fn conn_proto_number(name: &str) -> u8 {
    match name {
        "TCP" => 6,
        "UDP" => 17,
        "SCTP" => 132,
        _ => 0,
    }
}

fn print_conn(
    out: &mut String,
    c: &ConnSnap,
    o: &ListOptions,
    names: &dyn Names,
    local_column: bool,
) {
    let proto = conn_proto_number(&c.protocol);
    let cname = addrport(c.caddr, c.cport, proto, o.numeric, names);
    let vname = addrport(c.vaddr, c.vport, proto, o.numeric, names);
    let dname = addrport(c.daddr, c.dport, proto, o.numeric, names);
    let expire = format!("{:02}:{:02}", c.expire_secs / 60, c.expire_secs % 60);
    lpad(out, &c.protocol, 3);
    out.push(' ');
    lpad(out, &expire, 6);
    out.push(' ');
    lpad(out, &c.state, 11);
    out.push(' ');
    lpad(out, &cname, 18);
    out.push(' ');
    lpad(out, &vname, 18);
    out.push(' ');
    if local_column {
        let lname = match c.local {
            Some(l) => addrport(l.ip(), l.port(), proto, o.numeric, names),
            None => "-".to_owned(),
        };
        lpad(out, &lname, 18);
        out.push(' ');
    }
    match (
        o.persistent_conn,
        c.pe_name.as_deref(),
        c.pe_data.as_deref(),
    ) {
        (true, Some(pn), Some(pd)) => {
            lpad(out, &dname, 16);
            out.push(' ');
            lpad(out, pn, 18);
            out.push(' ');
            out.push_str(pd);
        }
        _ => out.push_str(&dname),
    }
    out.push('\n');
}

/// `ipvsadm -L ...` output, resolving names through the system (unless `-n`).
pub fn format_list(snap: &Snapshot, opts: &ListOptions) -> Result<String, ListError> {
    format_list_with(snap, opts, &SystemNames)
}

/// [`format_list`] with the name resolver given.
///
/// Fails only for a one-service listing of a service that does not exist:
/// ipvsadm prints "No such service" and exits 1 without any stdout output.
pub fn format_list_with(
    snap: &Snapshot,
    opts: &ListOptions,
    names: &dyn Names,
) -> Result<String, ListError> {
    let mut out = String::new();
    match opts.target {
        ListTarget::Connections => {
            out.push_str("IPVS connection entries\n");
            // FULLNAT connections (rvs, as DPVS lists them) add the local
            // address column; without one the output is the kernel's.
            let local = snap.conns.iter().any(|c| c.local.is_some());
            // The padded columns, then the last one as it is.
            let mut cols = vec![("state", 11), ("source", 18), ("virtual", 18)];
            if local {
                cols.push(("local", 18));
            }
            let last = if opts.persistent_conn {
                cols.extend([("destination", 18), ("pe name", 16)]);
                "pe_data"
            } else {
                "destination"
            };
            out.push_str("pro expire ");
            for (s, w) in cols {
                lpad(&mut out, s, w);
                out.push(' ');
            }
            out.push_str(last);
            out.push('\n');
            for c in &snap.conns {
                print_conn(&mut out, c, opts, names, local);
            }
        }
        ListTarget::Timeout => {
            let (a, b, c) = snap.timeouts;
            let _ = writeln!(
                out,
                "Timeout (tcp tcpfin udp): {} {} {}",
                a as i32, b as i32, c as i32
            );
        }
        ListTarget::Daemon => {
            for d in &snap.daemons {
                let _ = write!(
                    out,
                    "{} sync daemon (mcast={}, syncid={}",
                    if d.master { "master" } else { "backup" },
                    d.mcast_ifn,
                    d.syncid
                );
                if d.sync_maxlen != 0 {
                    let _ = write!(out, ", maxlen={}", d.sync_maxlen);
                }
                if let Some(g) = d.mcast_group {
                    let _ = write!(out, ", group={g}");
                }
                if d.mcast_port != 0 {
                    let _ = write!(out, ", port={}", d.mcast_port);
                }
                if d.mcast_ttl != 0 {
                    let _ = write!(out, ", ttl={}", d.mcast_ttl);
                }
                out.push_str(")\n");
            }
        }
        ListTarget::Service(key) => {
            let Some(s) = snap.services.iter().find(|s| s.key == key) else {
                return Err(ListError {
                    message: "No such service".to_owned(),
                    exit_code: 1,
                });
            };
            let mode = mode_of(opts);
            print_title(&mut out, mode);
            print_service(&mut out, s, mode, opts, names);
        }
        ListTarget::All => {
            let (a, b, c) = IPVS_VERSION;
            let _ = writeln!(
                out,
                "IP Virtual Server version {a}.{b}.{c} (size={})",
                snap.conn_tab_size
            );
            let mode = mode_of(opts);
            print_title(&mut out, mode);
            for s in ordered_services(snap, opts.nosort) {
                // `--quic-lb` lists the QUIC-LB services only.
                if mode == Mode::QuicLb && s.quic_lb.is_empty() {
                    continue;
                }
                print_service(&mut out, s, mode, opts, names);
            }
        }
    }
    Ok(out)
}

/// `--get-laddr [SERVICE]` output (rvs-only, in the shape of DPVS's
/// listing): a title, then per service its name and the number of pool
/// entries, then one line per entry with the connections that use one of
/// its addresses as their local address (counted from `snap.conns`, so
/// the snapshot must include connections).
pub fn format_laddrs(snap: &Snapshot, only: Option<&ServiceKeySnap>, numeric: bool) -> String {
    format_laddrs_with(snap, only, numeric, &SystemNames)
}

/// [`format_laddrs`] with the name resolver given.
pub fn format_laddrs_with(
    snap: &Snapshot,
    only: Option<&ServiceKeySnap>,
    numeric: bool,
    names: &dyn Names,
) -> String {
    let mut out = String::new();
    for (s, w) in [("VIP:VPORT", 28), ("TOTAL", 8), ("LADDR", 40)] {
        lpad(&mut out, s, w);
        out.push(' ');
    }
    out.push_str("CONNS\n");
    for s in ordered_services(snap, false) {
        if only.is_some_and(|k| *k != s.key) || s.laddrs.is_empty() {
            continue;
        }
        let name = svc_name(s, false, numeric, names);
        lpad(&mut out, &name, 28);
        out.push(' ');
        let _ = writeln!(out, "{}", s.laddrs.len());
        for l in &s.laddrs {
            let range = rvs_core::model::LocalAddrRange::parse(l).ok();
            let conns = snap
                .conns
                .iter()
                .filter(|c| {
                    conn_of(c, &s.key)
                        && c.local
                            .is_some_and(|a| range.is_some_and(|r| r.contains(a.ip())))
                })
                .count();
            lpad(&mut out, "", 28);
            out.push(' ');
            lpad(&mut out, "", 8);
            out.push(' ');
            lpad(&mut out, l, 40);
            out.push(' ');
            let _ = writeln!(out, "{conns}");
        }
    }
    out
}

/// Whether connection `c` belongs to service `key` (fwmark services:
/// never, a connection names no mark).
fn conn_of(c: &ConnSnap, key: &ServiceKeySnap) -> bool {
    match key {
        ServiceKeySnap::Addr {
            protocol,
            addr,
            port,
        } => conn_proto_number(&c.protocol) == *protocol && c.vaddr == *addr && c.vport == *port,
        ServiceKeySnap::Fwmark { .. } => false,
    }
}

/// `ipvsadm -S [-n]` output (also what `ipvsadm-save` writes), resolving
/// names through the system unless `numeric`.
pub fn format_save(snap: &Snapshot, numeric: bool) -> String {
    format_save_with(snap, numeric, &SystemNames)
}

/// [`format_save`] with the name resolver given.
pub fn format_save_with(snap: &Snapshot, numeric: bool, names: &dyn Names) -> String {
    let opts = ListOptions {
        numeric,
        ..ListOptions::default()
    };
    let mut out = String::new();
    for s in ordered_services(snap, false) {
        print_service(&mut out, s, Mode::Rule, &opts, names);
    }
    out
}
