//! Scale run of the health runner as rvsd drives it (one current-thread
//! tokio runtime, the same `Health` + `runner::run` + `Controller` path):
//! N real servers with TCP_CHECK at `delay_loop 1` against loopback
//! listeners served by a child process, for S seconds. Prints how late
//! probes started compared to their schedule (from the runner's own
//! `rvs_check_lateness_seconds` histogram) and the CPU time of the checking
//! process (the listeners' accept work is in the child, not counted).
//!
//! `cargo run --release -p rvs-check --example runner_scale -- [N] [SECONDS]`
//! (defaults 5000 and 20).

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rvs_control::dataplane::NoDataPlane;

#[path = "../tests/support/mod.rs"]
mod support;
use support::{ControllerHost, load, start};

/// Real servers per virtual server (each listener serves one per VS).
const PER_VS: usize = 500;

/// utime + stime of this process, seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the ')'.
    (ticks(11) + ticks(12)) / 100.0
}

fn serve(n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut ports = Vec::new();
        for _ in 0..n {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            ports.push(l.local_addr().expect("addr").port());
            tokio::spawn(async move {
                loop {
                    if let Ok((s, _)) = l.accept().await {
                        drop(s);
                    }
                }
            });
        }
        let line: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
        println!("{}", line.join(" "));
        std::future::pending::<()>().await;
    });
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("serve") {
        serve(args.get(1).and_then(|x| x.parse().ok()).unwrap_or(PER_VS));
        return;
    }
    let n: usize = args.first().and_then(|x| x.parse().ok()).unwrap_or(5000);
    let secs: u64 = args.get(1).and_then(|x| x.parse().ok()).unwrap_or(20);
    let listeners = n.min(PER_VS);
    let exe = std::env::current_exe().expect("exe");
    let mut child = Command::new(exe)
        .args(["serve", &listeners.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn listeners");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("ports");
    let ports: Vec<u16> = line
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();

    let mut text = String::new();
    let vss = n.div_ceil(PER_VS);
    for v in 0..vss {
        text.push_str(&format!(
            "virtual_server 10.9.{}.{} 80 {{\n  delay_loop 1\n  lb_algo rr\n  protocol TCP\n",
            v / 250,
            v % 250 + 1
        ));
        for p in ports.iter().take((n - v * PER_VS).min(PER_VS)) {
            text.push_str(&format!(
                "  real_server 127.0.0.1 {p} {{\n    TCP_CHECK {{\n      connect_timeout 1\n    }}\n  }}\n"
            ));
        }
        text.push_str("}\n");
    }
    let (defs, plan) = load(&text, "runner-scale");
    let checkers = plan.jobs.len();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let result = rt.block_on(async move {
        let host = Arc::new(Mutex::new(start(defs, plan, 1, Box::new(NoDataPlane))));
        let task = tokio::spawn(rvs_check::runner::run(
            host.clone(),
            Arc::new(tokio::sync::Notify::new()),
        ));
        // Warmup spreads first checks over delay_loop; measure after it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let base = metrics(&host);
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let cpu = cpu_seconds() - cpu0;
        let wall = t0.elapsed().as_secs_f64();
        let end = metrics(&host);
        task.abort();
        let down = end.1;
        (base.0, end.0, cpu, wall, down)
    });
    let _ = child.kill();
    let _ = child.wait();
    let (base, end, cpu, wall, down) = result;
    let (b0, b1) = (base, end);
    let delta: Vec<(String, f64)> = b1
        .iter()
        .zip(b0.iter())
        .map(|((le, a), (_, b))| (le.clone(), a - b))
        .collect();
    let total = delta.last().map(|x| x.1).unwrap_or(0.0);
    let quantile = |q: f64| {
        delta
            .iter()
            .find(|(_, c)| *c >= q * total)
            .map(|(le, _)| le.clone())
            .unwrap_or_default()
    };
    println!(
        "{checkers} TCP checkers, delay_loop 1 s, {wall:.1} s measured: {total} probes ({:.0}/s), \
         lateness p50 <= {} s, p99 <= {} s, max bucket {}; CPU {cpu:.2} s ({:.1}% of one core); \
         real servers down at the end: {down}",
        total / wall,
        quantile(0.5),
        quantile(0.99),
        delta
            .iter()
            .rev()
            .find(|(_, c)| *c < total)
            .map(|(le, _)| format!("> {le} s"))
            .unwrap_or_else(|| "none".into()),
        100.0 * cpu / wall
    );
}

/// The lateness histogram's cumulative buckets (`le`, count; `+Inf` last)
/// and how many real servers are down.
fn metrics(host: &Arc<Mutex<ControllerHost>>) -> (Vec<(String, f64)>, usize) {
    let Ok(h) = host.lock() else {
        return (Vec::new(), 0);
    };
    let late = h.health.lateness();
    let mut hist: Vec<(String, f64)> = rvs_check::health::LATENCY_BUCKETS
        .iter()
        .zip(late.cumulative())
        .map(|(le, n)| (le.to_string(), *n as f64))
        .collect();
    hist.push(("+Inf".into(), late.count() as f64));
    let down = h
        .health
        .status()
        .iter()
        .flat_map(|vs| &vs.reals)
        .filter(|rs| !rs.alive)
        .count();
    (hist, down)
}
