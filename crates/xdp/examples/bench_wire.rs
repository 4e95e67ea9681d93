//! The wire benchmark's helper (`scripts/bench-wire`): the reference
//! balancer and the floor attached to an interface, a small TCP server for
//! the real servers, and the bounded client loads, each measured by the
//! kernel's run-time statistics of the director's XDP programs.
//!
//! ```text
//! bench_wire attach ref --interface IF --vip ADDR:PORT --real MAC,MAC,MAC [--mode native|skb]
//! bench_wire attach pass --interface IF [--mode native|skb]
//! bench_wire serve --port PORT [--workers N]
//! bench_wire load short|paced|bulk --target ADDR:PORT --prog ID[,ID...]
//!            [--seconds S] [--warmup S] [--conns C] [--rate R] [--count N]
//! ```
//!
//! `attach` loads `bpf/ref_lb.c` (the minimal balancer: the VIP, the three
//! real servers' MACs) or its XDP_PASS floor, attaches it (native mode by
//! default) through a BPF link, prints `attached` and sleeps: the program
//! stays attached until this process is killed.
//!
//! `serve`: `--workers` threads accept on `PORT` (any address: the VIP on
//! lo in DR, the real server's own under NAT). A connection's first byte
//! says what it is: `S` one request (a line) answered, then the server
//! closes (HTTP/1.0-like); `K` every request line answered (keep-alive);
//! `B` bytes read and dropped until the client closes.
//!
//! `load` (in the client's namespace) turns the kernel's run-time
//! statistics on (`BPF_ENABLE_STATS`, held while it runs), warms up, then
//! reads `run_time_ns` / `run_cnt` of every loaded XDP program before and
//! after the measured interval: `short` connections in `--conns` threads
//! (connect, one request, read the answer to the server's close, close),
//! `paced` requests at `--rate` per second in total over `--conns`
//! keep-alive connections opened before the interval, `bulk` one stream
//! written for `--seconds` (at most 64 GiB). Prints one line: `kind=…
//! requests=… seconds=… bytes=… errors=… runs=… run_ns=…` summed over the
//! `--prog` ids (the programs attached on the director), then `xdp id=…
//! name=… runs=… run_ns=…` for every XDP program that ran meanwhile
//! (whether a tail-called program is counted apart shows there).

use std::error::Error;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rvs_sys::bpf::{ProgramStats, RunTimeStats, program_stats};
use rvs_xdp::{AttachMode, LoadOptions, Loaded, Object, ref_lb};

/// A request line, about an HTTP/1.0 GET's size (the first byte is the kind).
const REQUEST: &[u8] = b" GET /index.html HTTP/1.0 Host: vip User-Agent: bench-wire/1\n";
/// The answer to every request.
const ANSWER: [u8; 200] = [b'a'; 200];
/// Socket timeouts: a lost packet fails one request, never hangs the run.
const IO_TIMEOUT: Duration = Duration::from_secs(3);
/// The bulk stream's bound.
const BULK_MAX: u64 = 64 << 30;

type Res<T> = Result<T, Box<dyn Error>>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run = match args.first().map(String::as_str) {
        Some("attach") => attach(&args[1..]),
        Some("serve") => serve(&args[1..]),
        Some("load") => load(&args[1..]),
        _ => Err("usage: bench_wire attach|serve|load … (see the source's header)".into()),
    };
    if let Err(e) = run {
        eprintln!("bench_wire: {e}");
        std::process::exit(1);
    }
}

/// The value of option `name` in `args`, if given.
fn opt<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// Option `name` parsed, or `default`.
fn num<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Res<T> {
    match opt(args, name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("{name}: bad value {v:?}").into()),
    }
}

/// `aa:bb:cc:dd:ee:ff` as bytes.
fn mac(s: &str) -> Res<[u8; 6]> {
    let hex = s.trim().replace(':', "");
    if hex.len() != 12 {
        return Err(format!("bad MAC {s:?}").into());
    }
    let v = u64::from_str_radix(&hex, 16).map_err(|e| format!("bad MAC {s:?}: {e}"))?;
    let b = v.to_be_bytes();
    Ok([b[2], b[3], b[4], b[5], b[6], b[7]])
}

fn attach(args: &[String]) -> Res<()> {
    let interface = opt(args, "--interface").ok_or("attach: --interface IF")?;
    let mode = match opt(args, "--mode").unwrap_or("native") {
        "native" => AttachMode::Driver,
        "skb" => AttachMode::Skb,
        m => return Err(format!("--mode native|skb, not {m}").into()),
    };
    let mut lb = match args.first().map(String::as_str) {
        Some("ref") => {
            let vip: SocketAddr = opt(args, "--vip").ok_or("--vip ADDR:PORT")?.parse()?;
            let reals = opt(args, "--real").ok_or("--real MAC,MAC,MAC")?;
            let reals = reals.split(',').map(mac).collect::<Res<Vec<_>>>()?;
            if reals.len() != ref_lb::REALS as usize {
                return Err(format!("--real: {} MACs", ref_lb::REALS).into());
            }
            let opts = LoadOptions {
                flow_table_size: 1 << 20,
                ..LoadOptions::default()
            };
            let mut lb = Loaded::load(Object::RefLb, &opts)?;
            ref_lb::set_vip(&mut lb, vip.ip(), vip.port(), false)?;
            ref_lb::set_vip(&mut lb, vip.ip(), vip.port(), true)?;
            for (i, m) in (0..).zip(reals) {
                ref_lb::set_real(&mut lb, i, m)?;
            }
            lb
        }
        Some("pass") => Loaded::load(Object::RefPass, &LoadOptions::default())?,
        _ => return Err("attach ref|pass".into()),
    };
    lb.attach(interface, Some(mode))?;
    println!("attached");
    std::io::stdout().flush()?;
    // Attached while this process lives (the link closes with it); a day
    // at the most.
    thread::sleep(Duration::from_secs(86_400));
    Ok(())
}

fn serve(args: &[String]) -> Res<()> {
    let port: u16 = num(args, "--port", 80)?;
    let workers: usize = num(args, "--workers", 16)?;
    let listener = TcpListener::bind(("0.0.0.0", port))?;
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let l = listener.try_clone()?;
            Ok(thread::spawn(move || {
                for conn in l.incoming().flatten() {
                    // A failed connection is the client's to count.
                    let _ = answer(conn);
                }
            }))
        })
        .collect::<std::io::Result<_>>()?;
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

/// Serve one connection as its first byte says (see the header).
fn answer(mut c: TcpStream) -> std::io::Result<()> {
    c.set_nodelay(true)?;
    let mut buf = vec![0u8; 64 << 10];
    let n = c.read(&mut buf)?;
    if n == 0 {
        return Ok(());
    }
    let kind = buf[0];
    let mut lines = buf[..n].iter().filter(|&&b| b == b'\n').count();
    loop {
        match kind {
            b'S' if lines > 0 => {
                c.write_all(&ANSWER)?;
                return Ok(());
            }
            b'K' => {
                for _ in 0..lines {
                    c.write_all(&ANSWER)?;
                }
            }
            _ => {}
        }
        let n = c.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        lines = buf[..n].iter().filter(|&&b| b == b'\n').count();
    }
}

/// The kernel's counters of every XDP program.
fn xdp_stats() -> Vec<ProgramStats> {
    program_stats().into_iter().filter(|p| p.xdp).collect()
}

/// What one measured interval did.
#[derive(Default)]
struct Done {
    requests: u64,
    bytes: u64,
    errors: u64,
}

fn load(args: &[String]) -> Res<()> {
    let kind = args.first().map(String::as_str).unwrap_or("");
    let target: SocketAddr = opt(args, "--target").ok_or("--target ADDR:PORT")?.parse()?;
    let progs = opt(args, "--prog").ok_or("--prog ID[,ID...]")?;
    let progs = progs
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<u32>, _>>()?;
    let seconds: f64 = num(args, "--seconds", 2.0)?;
    let warmup: f64 = num(args, "--warmup", 0.5)?;
    let conns: usize = num(args, "--conns", 1)?;
    if !(0.1..=600.0).contains(&seconds) || !(0.0..=60.0).contains(&warmup) || conns == 0 {
        return Err("--seconds 0.1..600, --warmup 0..60, --conns >= 1".into());
    }
    let dur = Duration::from_secs_f64(seconds);
    let _stats = RunTimeStats::enable()?;
    let (done, before, after, took) = match kind {
        "short" => {
            let count: u64 = num(args, "--count", u64::MAX)?;
            short(target, conns, Duration::from_secs_f64(warmup), u64::MAX);
            let before = xdp_stats();
            let t = Instant::now();
            let done = short(target, conns, dur, count);
            (done, before, xdp_stats(), t.elapsed())
        }
        "paced" => {
            let rate: f64 = num(args, "--rate", 1000.0)?;
            if !(1.0..=1e6).contains(&rate) {
                return Err("--rate 1..1000000".into());
            }
            paced(target, conns, rate, Duration::from_secs_f64(warmup), dur)?
        }
        "bulk" => bulk(target, Duration::from_secs_f64(warmup), dur)?,
        _ => return Err("load short|paced|bulk".into()),
    };
    let delta = |id: u32| -> (u64, u64) {
        let b = before.iter().find(|p| p.id == id);
        let a = after.iter().find(|p| p.id == id);
        match (b, a) {
            (Some(b), Some(a)) => (
                a.run_count.saturating_sub(b.run_count),
                a.run_time_ns.saturating_sub(b.run_time_ns),
            ),
            _ => (0, 0),
        }
    };
    let (mut runs, mut ns) = (0, 0);
    for &id in &progs {
        if !after.iter().any(|p| p.id == id) {
            return Err(format!("no loaded program with id {id}").into());
        }
        let (r, t) = delta(id);
        runs += r;
        ns += t;
    }
    println!(
        "kind={kind} requests={} seconds={:.3} bytes={} errors={} runs={runs} run_ns={ns}",
        done.requests,
        took.as_secs_f64(),
        done.bytes,
        done.errors
    );
    for p in &after {
        let (r, t) = delta(p.id);
        if r > 0 {
            println!("xdp id={} name={} runs={r} run_ns={t}", p.id, p.name);
        }
    }
    Ok(())
}

/// A connection to `target` with the benchmark's socket options.
fn connect(target: SocketAddr) -> std::io::Result<TcpStream> {
    let c = TcpStream::connect_timeout(&target, IO_TIMEOUT)?;
    c.set_read_timeout(Some(IO_TIMEOUT))?;
    c.set_write_timeout(Some(IO_TIMEOUT))?;
    c.set_nodelay(true)?;
    Ok(c)
}

/// Write a request of `kind` and read its answer.
fn request(c: &mut TcpStream, kind: u8, buf: &mut [u8]) -> std::io::Result<()> {
    let mut req = [0u8; REQUEST.len() + 1];
    req[0] = kind;
    req[1..].copy_from_slice(REQUEST);
    c.write_all(&req)?;
    c.read_exact(&mut buf[..ANSWER.len()])
}

/// Short connections in `conns` threads for `dur` or `count` in all.
fn short(target: SocketAddr, conns: usize, dur: Duration, count: u64) -> Done {
    let end = Instant::now() + dur;
    let started = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..conns)
        .map(|_| {
            let started = Arc::clone(&started);
            thread::spawn(move || {
                let mut d = Done::default();
                let mut buf = [0u8; 1024];
                while Instant::now() < end && started.fetch_add(1, Ordering::Relaxed) < count {
                    let one = connect(target).and_then(|mut c| {
                        request(&mut c, b'S', &mut buf)?;
                        // The server closes: read to its FIN, then close.
                        while c.read(&mut buf)? > 0 {}
                        Ok(())
                    });
                    match one {
                        Ok(()) => d.requests += 1,
                        Err(_) => d.errors += 1,
                    }
                }
                d
            })
        })
        .collect();
    sum(threads)
}

fn sum(threads: Vec<thread::JoinHandle<Done>>) -> Done {
    let mut all = Done::default();
    for t in threads {
        let d = t.join().unwrap_or(Done {
            errors: 1,
            ..Done::default()
        });
        all.requests += d.requests;
        all.bytes += d.bytes;
        all.errors += d.errors;
    }
    all
}

type Measured = (Done, Vec<ProgramStats>, Vec<ProgramStats>, Duration);

/// Keep-alive requests at `rate` per second over `conns` connections,
/// opened and warmed before the interval and closed after it.
fn paced(
    target: SocketAddr,
    conns: usize,
    rate: f64,
    warmup: Duration,
    dur: Duration,
) -> Res<Measured> {
    let mut streams = Vec::new();
    for _ in 0..conns {
        let mut c = connect(target)?;
        c.write_all(b"K")?;
        streams.push(c);
    }
    let gap = Duration::from_secs_f64(conns as f64 / rate);
    let run = |streams: Vec<TcpStream>, dur: Duration| {
        let stop = Arc::new(AtomicBool::new(false));
        let end = Instant::now() + dur;
        let threads: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(i, mut c)| {
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    let mut d = Done::default();
                    let mut buf = [0u8; 1024];
                    // Spread the connections' requests over the gap.
                    let mut next = Instant::now() + gap.mul_f64(i as f64 / conns as f64);
                    while next < end && !stop.load(Ordering::Relaxed) {
                        thread::sleep(next.saturating_duration_since(Instant::now()));
                        match request(&mut c, b' ', &mut buf) {
                            Ok(()) => d.requests += 1,
                            Err(_) => {
                                d.errors += 1;
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                        next += gap;
                    }
                    (c, d)
                })
            })
            .collect();
        let mut back = Vec::new();
        let mut all = Vec::new();
        for t in threads {
            if let Ok((c, d)) = t.join() {
                back.push(c);
                all.push(d);
            }
        }
        let done = all.into_iter().fold(Done::default(), |mut a, d| {
            a.requests += d.requests;
            a.errors += d.errors;
            a
        });
        (back, done)
    };
    let (streams, _) = run(streams, warmup);
    let before = xdp_stats();
    let t = Instant::now();
    let (streams, done) = run(streams, dur);
    let (after, took) = (xdp_stats(), t.elapsed());
    drop(streams);
    Ok((done, before, after, took))
}

/// One stream written for `dur` (the connection opened and warmed first).
fn bulk(target: SocketAddr, warmup: Duration, dur: Duration) -> Res<Measured> {
    let mut c = connect(target)?;
    c.write_all(b"B")?;
    let chunk = vec![b'b'; 64 << 10];
    let mut write_for = |d: Duration| -> std::io::Result<u64> {
        let end = Instant::now() + d;
        let mut n = 0;
        while Instant::now() < end && n < BULK_MAX {
            c.write_all(&chunk)?;
            n += chunk.len() as u64;
        }
        Ok(n)
    };
    write_for(warmup)?;
    let before = xdp_stats();
    let t = Instant::now();
    let bytes = write_for(dur)?;
    let (after, took) = (xdp_stats(), t.elapsed());
    c.shutdown(Shutdown::Write)?;
    let done = Done {
        requests: 1,
        bytes,
        errors: 0,
    };
    Ok((done, before, after, took))
}
