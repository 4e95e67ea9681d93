//! Drive the rvs core with simulated clients and print what `ipvsadm -Ln`
//! and `ipvsadm -Ln --stats` would show.
//!
//! `cargo run --release -p rvs-core --example simulate [SCHEDULER] [CLIENTS]`
//!
//! One TCP virtual service 10.0.0.1:80 with four NAT real servers of weights
//! 4, 3, 2, 1; every client opens a connection (SYN, ACK, data, FIN) on a
//! virtual clock, and a third of them stay established.

use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;

use rvs_core::ipvs::{Ipvs, IpvsConfig, L4, Packet, Verdict};
use rvs_core::model::{AddrFamily, DestConfig, ForwardMethod, Protocol, ServiceConfig, ServiceKey};
use rvs_core::sched::Scheduler;
use rvs_core::state::TcpFlags;
use rvs_core::time::Instant;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let sched = args.next().unwrap_or_else(|| "wlc".to_owned());
    let clients: u32 = match args.next().map(|s| s.parse()) {
        None => 10_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("CLIENTS must be a number: {e}");
            return ExitCode::from(2);
        }
    };
    let sched: Scheduler = match sched.parse() {
        Ok(s) => s,
        Err(_) => {
            let all: Vec<&str> = Scheduler::all().map(Scheduler::name).collect();
            eprintln!("unknown scheduler `{sched}`; one of: {}", all.join(" "));
            return ExitCode::from(2);
        }
    };

    let vip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let key = ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: vip,
        port: 80,
    };
    let mut ipvs = Ipvs::new(IpvsConfig::default());
    let cfg = ServiceConfig::new(AddrFamily::Inet).scheduler(sched);
    if let Err(e) = ipvs.add_service(key, cfg) {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    for (i, w) in [(1u8, 4u32), (2, 3), (3, 2), (4, 1)] {
        let rs = DestConfig::new(IpAddr::V4(Ipv4Addr::new(192, 168, 1, i)), 8080)
            .weight(w)
            .forward(ForwardMethod::Masq);
        if let Err(e) = ipvs.add_dest(&key, rs) {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }

    let flags = |syn, fin, ack| {
        L4::Tcp(TcpFlags {
            syn,
            fin,
            ack,
            rst: false,
        })
    };
    let mut rejected = 0u32;
    for n in 0..clients {
        let now = Instant::from_millis(u64::from(n));
        let client = IpAddr::V4(Ipv4Addr::from(0x0a64_0000 + n));
        let pkt = |l4, len| Packet {
            src: client,
            sport: 40000,
            dst: vip,
            dport: 80,
            l4,
            fwmark: 0,
            len,
            payload: b"",
        };
        if !matches!(
            ipvs.process(now, &pkt(flags(true, false, false), 60)),
            Verdict::Forward(_)
        ) {
            rejected += 1;
            continue;
        }
        ipvs.process(now, &pkt(flags(false, false, true), 52));
        ipvs.process(now, &pkt(flags(false, false, true), 52 + 512));
        if n % 3 != 0 {
            ipvs.process(now, &pkt(flags(false, true, true), 52));
        }
        if n % 2000 == 0 {
            ipvs.update_estimators(now);
        }
    }

    println!("IP Virtual Server version 1.2.1 (size=4096)");
    println!("Prot LocalAddress:Port Scheduler Flags");
    println!("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn");
    for svc in ipvs.services() {
        println!("TCP  {vip}:80 {}", svc.config().scheduler);
        for d in svc.dests() {
            let addr = format!("{}:{}", d.config.addr, d.config.port);
            println!(
                "  -> {addr:<28} {:<7} {:<6} {:<10} {:<10}",
                d.config.forward.name(),
                d.weight(),
                d.active,
                d.inactive
            );
        }
        println!();
        println!(
            "{:<33} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "Prot LocalAddress:Port", "Conns", "InPkts", "OutPkts", "InBytes", "OutBytes"
        );
        let s = svc.stats();
        println!(
            "{:<33} {:>8} {:>8} {:>8} {:>8} {:>8}",
            format!("TCP  {vip}:80"),
            s.conns,
            s.inpkts,
            s.outpkts,
            s.inbytes,
            s.outbytes
        );
        for d in svc.dests() {
            let s = &d.stats;
            let addr = format!("  -> {}:{}", d.config.addr, d.config.port);
            println!(
                "{addr:<33} {:>8} {:>8} {:>8} {:>8} {:>8}",
                s.conns, s.inpkts, s.outpkts, s.inbytes, s.outbytes
            );
        }
    }
    println!();
    println!(
        "{clients} clients, {rejected} rejected, {} connection entries tracked",
        ipvs.conns().len()
    );
    ExitCode::SUCCESS
}
