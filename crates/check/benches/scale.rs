//! Scale benchmark: N real servers with TCP_CHECK at `delay_loop` 1 s.
//!
//! ```text
//! cargo bench -p rvs-check --bench scale -- [--checks 5000] [--secs 20]
//!     [--interval-ms 1000] [--threads 1]
//!     [--mode all|grid|keepalived|ka-warmup0|grid-sync]
//! ```
//! A child process (this binary re-executed) listens on N loopback
//! listeners spread over 50 addresses 127.1.0.1-50 (ephemeral ports) and
//! accepts and closes every connection. The parent runs one task per real
//! server: sleep until the checker's [`Schedule`] says it is due, note how
//! late it woke (lateness of the check start against its schedule), run
//! `probe::run(ProbeSpec::Tcp)`, advance the schedule. It reports lateness
//! percentiles, failures, and the CPU seconds the checker process used
//! (getrusage, user + system), separately from the listener child's.
//!
//! Several modes run in the same invocation so the numbers come with their
//! comparison (`--mode all`, the default, or one of them):
//! - `grid` (rvs): each checker on its own grid, phase = [`phase`] of its
//!   index spread over the interval; next due = next grid slot.
//! - `keepalived`: keepalived's own timing: first check after a random
//!   `warmup` in `[0, delay_loop)` (its default warmup is delay_loop), then
//!   the next check `delay_loop` after the previous one ENDED.
//! - `ka-warmup0`: keepalived with `warmup 0`: all first checks together,
//!   then `delay_loop` after each end.
//! - `grid-sync`: a fixed grid with no phase: every checker due at the same
//!   instant each interval (a naive fixed-rate scheduler).
//!
//! Lateness is always measured against the due time the mode itself set.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::resource::{Resource, UsageWho, getrlimit, getrusage, setrlimit};
use rvs_check::probe::{ProbeSpec, ProbeTarget, Schedule, phase, run};

const CHILD_ENV: &str = "RVS_CHECK_SCALE_LISTENERS";
const ADDRESSES: usize = 50;

fn raise_nofile() -> u64 {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((_, hard)) => {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
            hard
        }
        Err(_) => 0,
    }
}

fn cpu_seconds(who: UsageWho) -> f64 {
    match getrusage(who) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => f64::NAN,
    }
}

/// The listener process: binds, prints the addresses, serves until stdin closes.
fn child(n: usize) {
    raise_nofile();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut out = std::io::stdout().lock();
        for i in 0..n {
            let ip = format!("127.1.0.{}", i % ADDRESSES + 1);
            let l = tokio::net::TcpListener::bind((ip.as_str(), 0))
                .await
                .expect("bind listener");
            writeln!(out, "{}", l.local_addr().expect("addr")).expect("stdout");
            tokio::spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    drop(s);
                }
            });
        }
        writeln!(out, "READY").expect("stdout");
        out.flush().expect("stdout");
        drop(out);
        // Serve until the parent closes our stdin.
        let _ = tokio::task::spawn_blocking(|| {
            let mut b = [0u8; 1];
            let _ = std::io::stdin().read(&mut b);
        })
        .await;
    });
}

struct Args {
    checks: usize,
    secs: u64,
    interval: Duration,
    threads: usize,
    modes: Vec<Mode>,
}

/// How due times are set (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Grid,
    Keepalived,
    KaWarmup0,
    GridSync,
}

impl Mode {
    const ALL: [Mode; 4] = [
        Mode::Grid,
        Mode::Keepalived,
        Mode::KaWarmup0,
        Mode::GridSync,
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::Grid => "grid",
            Mode::Keepalived => "keepalived",
            Mode::KaWarmup0 => "ka-warmup0",
            Mode::GridSync => "grid-sync",
        }
    }

    /// The first check's offset from the start.
    fn first(self, i: usize, interval: Duration) -> Duration {
        match self {
            Mode::Grid => phase(i as u64, 0x5eed, interval),
            // A different seed: keepalived's random() warmup.
            Mode::Keepalived => phase(i as u64, 0xca11ab1e, interval),
            Mode::KaWarmup0 | Mode::GridSync => Duration::ZERO,
        }
    }

    /// Whether the next check is `interval` after the previous one ended
    /// (keepalived) rather than the next grid slot.
    fn after_end(self) -> bool {
        matches!(self, Mode::Keepalived | Mode::KaWarmup0)
    }
}

fn args() -> Args {
    let mut a = Args {
        checks: 5000,
        secs: 20,
        interval: Duration::from_secs(1),
        threads: 1,
        modes: Mode::ALL.to_vec(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let next = v.get(i + 1).cloned().unwrap_or_default();
        match v[i].as_str() {
            "--checks" => a.checks = next.parse().expect("--checks N"),
            "--secs" => a.secs = next.parse().expect("--secs S"),
            "--interval-ms" => {
                a.interval = Duration::from_millis(next.parse().expect("--interval-ms MS"))
            }
            "--threads" => a.threads = next.parse().expect("--threads T"),
            "--mode" => {
                a.modes = match Mode::ALL.iter().find(|m| m.name() == next) {
                    Some(m) => vec![*m],
                    None => Mode::ALL.to_vec(),
                }
            }
            _ => {
                // cargo bench passes `--bench`; ignore what is not ours.
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

struct Outcome {
    late_us: Vec<u64>,
    checks: u64,
    failures: u64,
    first_failure: Option<String>,
    cpu: f64,
    wall: f64,
}

fn measure(a: &Args, addrs: &[SocketAddr], mode: Mode) -> Outcome {
    let mut b = if a.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(a.threads);
        b
    };
    let rt = b.enable_all().build().expect("runtime");
    let interval = a.interval;
    let run_for = Duration::from_secs(a.secs);
    let cpu0 = cpu_seconds(UsageWho::RUSAGE_SELF);
    let wall0 = Instant::now();
    let results = rt.block_on(async {
        let start = Instant::now() + Duration::from_millis(200);
        let end = start + run_for;
        let mut tasks = Vec::with_capacity(addrs.len());
        for (i, &addr) in addrs.iter().enumerate() {
            let ph = mode.first(i, interval);
            tasks.push(tokio::spawn(async move {
                let target = ProbeTarget::new(addr, Duration::from_secs(1));
                let mut sched = Schedule::new(start, interval, ph);
                let mut late = Vec::with_capacity(32);
                let (mut n, mut fail, mut first) = (0u64, 0u64, None);
                loop {
                    tokio::time::sleep_until(sched.due().into()).await;
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    late.push(u64::try_from(sched.lateness(now).as_micros()).unwrap_or(u64::MAX));
                    let r = run(&ProbeSpec::Tcp, &target).await;
                    n += 1;
                    if let Err(f) = r.outcome {
                        fail += 1;
                        first.get_or_insert_with(|| format!("{addr}: {f}"));
                    }
                    let done = Instant::now();
                    if mode.after_end() {
                        sched.defer(done + interval);
                    } else {
                        sched.advance(done);
                    }
                }
                (late, n, fail, first)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.expect("task"));
        }
        all
    });
    let wall = wall0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(UsageWho::RUSAGE_SELF) - cpu0;
    let mut o = Outcome {
        late_us: Vec::new(),
        checks: 0,
        failures: 0,
        first_failure: None,
        cpu,
        wall,
    };
    for (late, n, fail, first) in results {
        o.late_us.extend(late);
        o.checks += n;
        o.failures += fail;
        if o.first_failure.is_none() {
            o.first_failure = first;
        }
    }
    o.late_us.sort_unstable();
    o
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)] as f64 / 1000.0
}

fn main() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        child(n.parse().expect("listener count"));
        return;
    }
    let a = args();
    let nofile = raise_nofile();
    let exe = std::env::current_exe().expect("current exe");
    let mut ch = Command::new(exe)
        .env(CHILD_ENV, a.checks.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn listener child");
    let mut addrs = Vec::with_capacity(a.checks);
    let out = ch.stdout.take().expect("child stdout");
    for line in BufReader::new(out).lines() {
        let line = line.expect("child output");
        if line == "READY" {
            break;
        }
        addrs.push(line.parse::<SocketAddr>().expect("address"));
    }
    assert_eq!(
        addrs.len(),
        a.checks,
        "listener child did not start them all"
    );
    println!(
        "scale: {} TCP checks, interval {:?}, {} s per mode, checker runtime {}, RLIMIT_NOFILE {}, {} CPUs",
        a.checks,
        a.interval,
        a.secs,
        if a.threads <= 1 {
            "current_thread".to_string()
        } else {
            format!("multi_thread x{}", a.threads)
        },
        nofile,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!(
        "{:<10} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>10}",
        "mode",
        "checks",
        "fail",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "cpu s",
        "cpu %",
        "us/check"
    );
    for mode in &a.modes {
        let o = measure(&a, &addrs, *mode);
        println!(
            "{:<10} {:>8} {:>6} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8.2} {:>8.1} {:>10.1}",
            mode.name(),
            o.checks,
            o.failures,
            pct(&o.late_us, 0.50),
            pct(&o.late_us, 0.99),
            pct(&o.late_us, 0.999),
            pct(&o.late_us, 1.0),
            o.cpu,
            100.0 * o.cpu / o.wall,
            1e6 * o.cpu / o.checks.max(1) as f64,
        );
        if let Some(f) = o.first_failure {
            println!("        first failure: {f}");
        }
    }
    drop(ch.stdin.take());
    let _ = ch.wait();
    println!(
        "listener child (accept + close, all modes): {:.2} CPU s",
        cpu_seconds(UsageWho::RUSAGE_CHILDREN)
    );
}
