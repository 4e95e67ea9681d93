//! New-connection latency, connect included: one client, one connection at
//! a time, each `connect()` + an HTTP/1.0 request + the whole response
//! (until the server closes) + `close()`, timed with the monotonic clock.
//! `scripts/bench_sock.py` runs it for the direct path and the sock plane
//! (inside the cgroup, to the VIP): unlike wrk's latency, which starts at
//! the request's first write, this includes the `connect()` call, where
//! the sock plane's programs run (connect4, sock_ops at the SYN), and the
//! `close()`, where sock_release runs.
//!
//! `connect_latency ADDR COUNT [WARMUP]` prints one line:
//! `connect_p50_us=.. connect_p99_us=.. cycle_p50_us=.. cycle_p99_us=.. n=..`
//! (COUNT measured cycles after WARMUP unmeasured ones; bounded: each
//! connection has a 5 s timeout and the run stops after 120 s).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort_unstable();
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: connect_latency ADDR COUNT [WARMUP]");
        std::process::exit(2);
    }
    let addr: SocketAddr = match args[1].parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("connect_latency: {}: {e}", args[1]);
            std::process::exit(2);
        }
    };
    let parse = |s: &str| -> usize {
        s.parse().unwrap_or_else(|e| {
            eprintln!("connect_latency: {s}: {e}");
            std::process::exit(2)
        })
    };
    let count = parse(&args[2]);
    let warmup = args.get(3).map_or(100, |s| parse(s));
    let limit = Instant::now() + Duration::from_secs(120);
    let timeout = Duration::from_secs(5);
    let request = format!("GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut connects = Vec::with_capacity(count);
    let mut cycles = Vec::with_capacity(count);
    let mut buf = [0u8; 4096];
    for i in 0..warmup + count {
        if Instant::now() > limit {
            eprintln!("connect_latency: stopped at the 120 s bound after {i} connections");
            break;
        }
        let t0 = Instant::now();
        let mut s = match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("connect_latency: connect {addr}: {e}");
                std::process::exit(1);
            }
        };
        let t1 = Instant::now();
        let ok =
            s.set_read_timeout(Some(timeout)).is_ok() && s.write_all(request.as_bytes()).is_ok();
        let mut got = 0;
        if ok {
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) => {
                        eprintln!("connect_latency: read: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
        drop(s);
        let t2 = Instant::now();
        if !ok || got == 0 {
            eprintln!("connect_latency: no response from {addr}");
            std::process::exit(1);
        }
        if i >= warmup {
            connects.push(t1 - t0);
            cycles.push(t2 - t0);
        }
    }
    let n = cycles.len();
    println!(
        "connect_p50_us={:.1} connect_p99_us={:.1} cycle_p50_us={:.1} cycle_p99_us={:.1} n={n}",
        pct(&mut connects, 0.5),
        pct(&mut connects, 0.99),
        pct(&mut cycles, 0.5),
        pct(&mut cycles, 0.99),
    );
}
