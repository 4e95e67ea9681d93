//! A bounded UDP packet generator for the director benchmarks
//! (`scripts/bench-xdp --load packets`): prebuilt Ethernet/IPv4/UDP frames
//! from K distinct flows to one VIP:port, written to one interface through
//! an AF_PACKET raw socket with `sendmmsg` in batches, so the only work per
//! packet on the sending side is the socket's copy and the veth transmit.
//!
//! ```text
//! pktgen --interface IF --dst-mac MAC --src ADDR --dst VIP [--dport PORT]
//!        [--flows K] [--count N] [--seconds S] [--pps R] [--batch B]
//!        [--payload BYTES] [--no-qdisc-bypass]
//!        [--stall-cpu N [--burst B] [--gap-us G]]
//! ```
//!
//! Flow i (0 <= i < K) is source port 1024 + i % 64512 from the address
//! `--src` + i / 64512 (so K = 65536 uses two source addresses); the
//! frames are sent round-robin over the flows. Sending stops after N
//! packets or S seconds, whichever comes first; `--pps` paces to at most R
//! packets per second (in batches). Prints one line:
//! `sent=N errors=E seconds=T pps=P` (errors: messages the kernel refused).
//!
//! Burst mode (`--stall-cpu N`): a helper thread pinned to CPU N at
//! SCHED_FIFO 99 spins while each burst of B frames (default 200, under
//! veth's 256-entry ring) is sent, then lets go and the generator sleeps G
//! µs (default 1000). The director's NAPI thread on CPU N thus finds the
//! whole burst in its ring and drains it in full polls, one wake-up per
//! burst: its cost per packet is that of a director that is behind, i.e.
//! saturated, on a bed whose generator is too slow to saturate it.
//!
//! Root (CAP_NET_RAW); meant to run in the client's network namespace under
//! `ip netns exec`, pinned with `taskset`.

#![forbid(unsafe_code)]

use std::error::Error;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rvs_wire::frame::{Ip, ethernet};

/// Source ports per source address (1024..=65535).
const PORTS_PER_ADDR: u32 = 64512;
/// Ethernet + IPv4 + UDP headers.
const HEADERS: usize = 14 + 20 + 8;

struct Args {
    interface: String,
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    dport: u16,
    flows: u32,
    count: u64,
    seconds: f64,
    pps: Option<f64>,
    batch: usize,
    payload: usize,
    qdisc_bypass: bool,
    stall_cpu: Option<usize>,
    burst: usize,
    gap: Duration,
}

fn usage() -> String {
    "usage: pktgen --interface IF --dst-mac MAC --src ADDR --dst VIP [--dport PORT] \
     [--flows K] [--count N] [--seconds S] [--pps R] [--batch B] [--payload BYTES] \
     [--no-qdisc-bypass] [--stall-cpu N [--burst B] [--gap-us G]]"
        .to_string()
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        return Err(format!("bad MAC address {s:?}"));
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).map_err(|e| format!("bad MAC address {s:?}: {e}"))?;
    }
    Ok(mac)
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let mut a = std::env::args().skip(1);
    let (mut interface, mut dst_mac, mut src, mut dst) = (None, None, None, None);
    let mut args = Args {
        interface: String::new(),
        dst_mac: [0; 6],
        src: Ipv4Addr::UNSPECIFIED,
        dst: Ipv4Addr::UNSPECIFIED,
        dport: 9,
        flows: 64,
        count: 1_000_000,
        seconds: 5.0,
        pps: None,
        batch: 64,
        payload: 18,
        qdisc_bypass: true,
        stall_cpu: None,
        burst: 200,
        gap: Duration::from_micros(1000),
    };
    while let Some(flag) = a.next() {
        if flag == "--no-qdisc-bypass" {
            args.qdisc_bypass = false;
            continue;
        }
        if flag == "-h" || flag == "--help" {
            println!("{}", usage());
            std::process::exit(0);
        }
        let v = a
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))?;
        match flag.as_str() {
            "--interface" => interface = Some(v),
            "--dst-mac" => dst_mac = Some(parse_mac(&v)?),
            "--src" => src = Some(v.parse()?),
            "--dst" => dst = Some(v.parse()?),
            "--dport" => args.dport = v.parse()?,
            "--flows" => args.flows = v.parse()?,
            "--count" => args.count = v.parse()?,
            "--seconds" => args.seconds = v.parse()?,
            "--pps" => args.pps = Some(v.parse()?),
            "--batch" => args.batch = v.parse()?,
            "--payload" => args.payload = v.parse()?,
            "--stall-cpu" => args.stall_cpu = Some(v.parse()?),
            "--burst" => args.burst = v.parse()?,
            "--gap-us" => args.gap = Duration::from_micros(v.parse()?),
            _ => return Err(format!("unknown argument {flag}\n{}", usage()).into()),
        }
    }
    args.interface = interface.ok_or_else(usage)?;
    args.dst_mac = dst_mac.ok_or_else(usage)?;
    args.src = src.ok_or_else(usage)?;
    args.dst = dst.ok_or_else(usage)?;
    if args.flows == 0 || args.flows > 16 * PORTS_PER_ADDR {
        return Err(format!("--flows 1..={}", 16 * PORTS_PER_ADDR).into());
    }
    if !(args.seconds > 0.0 && args.seconds <= 120.0) {
        return Err("--seconds must be in (0, 120]".into());
    }
    if args.pps.is_some_and(|r| r.is_nan() || r <= 0.0) {
        return Err("--pps must be positive".into());
    }
    if args.batch == 0 || args.batch > 1024 {
        return Err("--batch 1..=1024".into());
    }
    if args.burst == 0 || args.burst > 4096 {
        return Err("--burst 1..=4096".into());
    }
    if HEADERS + args.payload > 1514 {
        return Err("--payload: the frame must fit a 1500-byte MTU".into());
    }
    Ok(args)
}

/// An Ethernet/IPv4/UDP frame between `macs` (source, destination) from
/// `from` to `to` with `payload` bytes (a-z repeated), with correct IPv4
/// and UDP checksums (DF, TTL 64, id 0).
fn frame(
    macs: ([u8; 6], [u8; 6]),
    from: SocketAddrV4,
    to: SocketAddrV4,
    payload: usize,
) -> Vec<u8> {
    let data: Vec<u8> = (0..payload).map(|i| b'a' + (i % 26) as u8).collect();
    let packet = Ip::new((*from.ip()).into(), (*to.ip()).into()).udp(from.port(), to.port(), &data);
    ethernet(macs.1, macs.0, None, &packet)
}

/// An AF_PACKET raw socket bound to one interface, for sending only.
struct PacketSocket {
    sock: std::os::fd::OwnedFd,
    batch: std::cell::RefCell<rvs_sys::sock::FrameBatch>,
}

impl PacketSocket {
    fn open(interface: &str, qdisc_bypass: bool) -> Result<Self, Box<dyn Error>> {
        let ifindex = rvs_sys::iface::ifindex(interface)?;
        let sock = rvs_sys::sock::packet_sender(ifindex)
            .map_err(|e| format!("AF_PACKET socket on {interface}: {e}"))?;
        if qdisc_bypass {
            rvs_sys::sock::set_packet_qdisc_bypass(sock.as_fd(), true)
                .map_err(|e| format!("setsockopt(PACKET_QDISC_BYPASS): {e}"))?;
        }
        Ok(PacketSocket {
            sock: sock.into(),
            batch: Default::default(),
        })
    }

    /// Sends `frames` with one sendmmsg(2): the number sent, or the error
    /// of the first frame when none was sent.
    fn send_batch(&self, frames: &[&[u8]]) -> std::io::Result<usize> {
        self.batch.borrow_mut().send(self.sock.as_fd(), frames)
    }
}

fn interface_mac(interface: &str) -> Result<[u8; 6], Box<dyn Error>> {
    let path = format!("/sys/class/net/{interface}/address");
    let s = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    Ok(parse_mac(&s)?)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let src_mac = interface_mac(&args.interface)?;
    let frames: Vec<Vec<u8>> = (0..args.flows)
        .map(|i| {
            let addr = Ipv4Addr::from(u32::from(args.src).wrapping_add(i / PORTS_PER_ADDR));
            let sport = (1024 + i % PORTS_PER_ADDR) as u16;
            frame(
                (src_mac, args.dst_mac),
                SocketAddrV4::new(addr, sport),
                SocketAddrV4::new(args.dst, args.dport),
                args.payload,
            )
        })
        .collect();
    let sock = PacketSocket::open(&args.interface, args.qdisc_bypass)?;
    let mut tx = Sender::new(&sock, &frames, args.batch);

    let limit = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let deadline = start + limit;
    if let Some(cpu) = args.stall_cpu {
        let hold = Hold::start(cpu)?;
        while tx.done() < args.count && Instant::now() < deadline {
            // The burst lands in the director's ring while its CPU is held.
            hold.acquire();
            let want = args.burst.min((args.count - tx.done()) as usize);
            tx.send(want, deadline);
            hold.release();
            std::thread::sleep(args.gap);
        }
        hold.stop();
    } else {
        while tx.done() < args.count {
            let elapsed = start.elapsed();
            if elapsed >= limit {
                break;
            }
            if let Some(pps) = args.pps {
                let due = Duration::from_secs_f64(tx.done() as f64 / pps);
                if due > elapsed {
                    std::thread::sleep((due - elapsed).min(limit - elapsed));
                    continue;
                }
            }
            let want = args.batch.min((args.count - tx.done()) as usize);
            tx.send(want, deadline);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "sent={} errors={} seconds={secs:.3} pps={:.0}",
        tx.sent,
        tx.errors,
        tx.sent as f64 / secs
    );
    if let Some(e) = tx.last_error {
        eprintln!("pktgen: last send error: {e}");
    }
    Ok(())
}

/// Sends the prebuilt frames round-robin, `batch` per sendmmsg(2).
struct Sender<'a> {
    sock: &'a PacketSocket,
    frames: &'a [Vec<u8>],
    batch: usize,
    picked: Vec<&'a [u8]>,
    next: usize,
    sent: u64,
    errors: u64,
    last_error: Option<std::io::Error>,
}

impl<'a> Sender<'a> {
    fn new(sock: &'a PacketSocket, frames: &'a [Vec<u8>], batch: usize) -> Self {
        Sender {
            sock,
            frames,
            batch: batch.max(1),
            picked: Vec::with_capacity(batch.max(1)),
            next: 0,
            sent: 0,
            errors: 0,
            last_error: None,
        }
    }

    /// Packets sent or refused so far.
    fn done(&self) -> u64 {
        self.sent + self.errors
    }

    /// Sends `n` frames (refused ones count as errors), or fewer at `deadline`.
    fn send(&mut self, n: usize, deadline: Instant) {
        let stop = self.done() + n as u64;
        while self.done() < stop && Instant::now() < deadline {
            let want = self.batch.min((stop - self.done()) as usize);
            let len = self.frames.len();
            self.picked.clear();
            self.picked
                .extend((0..want).map(|k| self.frames[(self.next + k) % len].as_slice()));
            match self.sock.send_batch(&self.picked) {
                Ok(n) => {
                    self.sent += n as u64;
                    self.next = (self.next + n) % len;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The first message was refused (e.g. ENOBUFS): count it, go on.
                    self.errors += 1;
                    self.next = (self.next + 1) % len;
                    self.last_error = Some(e);
                }
            }
        }
    }
}

/// A thread pinned to one CPU at SCHED_FIFO 99 that, on request, spins
/// there until released: nothing else runs on that CPU in between (the
/// director's NAPI thread included), so a burst sent meanwhile waits in the
/// director's receive ring and is then processed as a saturated director
/// would: full polls, one wake-up per burst.
struct Hold {
    state: Arc<AtomicU32>,
    thread: std::thread::JoinHandle<()>,
}

const IDLE: u32 = 0;
const WANTED: u32 = 1;
const HELD: u32 = 2;
const QUIT: u32 = 3;

impl Hold {
    fn start(cpu: usize) -> Result<Self, Box<dyn Error>> {
        // The sender must keep a CPU of its own, or it would wait for the
        // hold it started.
        let mine = allowed_cpus()?;
        if mine.iter().all(|&c| c == cpu) {
            return Err(format!(
                "--stall-cpu {cpu}: the generator may only run there; pin it elsewhere"
            )
            .into());
        }
        let state = Arc::new(AtomicU32::new(IDLE));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let st = Arc::clone(&state);
        let thread = std::thread::spawn(move || {
            let _ = ready_tx.send(pin_fifo(cpu));
            loop {
                match st.load(Ordering::Acquire) {
                    QUIT => return,
                    WANTED => {
                        st.store(HELD, Ordering::Release);
                        while st.load(Ordering::Acquire) == HELD {
                            std::hint::spin_loop();
                        }
                    }
                    _ => std::thread::park(),
                }
            }
        });
        ready_rx
            .recv()?
            .map_err(|e| format!("--stall-cpu {cpu}: {e}"))?;
        Ok(Hold { state, thread })
    }

    /// Returns once the hold thread is spinning on its CPU.
    fn acquire(&self) {
        self.state.store(WANTED, Ordering::Release);
        self.thread.thread().unpark();
        while self.state.load(Ordering::Acquire) != HELD {
            std::hint::spin_loop();
        }
    }

    fn release(&self) {
        self.state.store(IDLE, Ordering::Release);
    }

    fn stop(self) {
        self.state.store(QUIT, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

/// The CPUs the calling thread may run on.
fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    rvs_sys::sched::allowed_cpus()
}

/// Pins the calling thread to `cpu` and makes it SCHED_FIFO 99.
fn pin_fifo(cpu: usize) -> std::io::Result<()> {
    rvs_sys::sched::pin_to_cpu(cpu)?;
    rvs_sys::sched::set_fifo(99)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    use std::sync::atomic::{AtomicBool, AtomicU64};

    /// While held, nothing else runs on the held CPU (a thread pinned there
    /// makes no progress); after release it runs again. Root, 2 CPUs.
    #[test]
    fn hold_keeps_other_threads_off_its_cpu() {
        if !nix::unistd::geteuid().is_root() {
            rvs_testbed::skip_or_fail(
                "hold_keeps_other_threads_off_its_cpu",
                "SCHED_FIFO needs root",
            );
            return;
        }
        let cpus = allowed_cpus().expect("affinity");
        if cpus.len() < 2 {
            rvs_testbed::skip_or_fail(
                "hold_keeps_other_threads_off_its_cpu",
                format!("needs 2 CPUs, this thread may use {cpus:?}"),
            );
            return;
        }
        let (here, held) = (cpus[0], cpus[1]);
        // The test thread (the "sender") keeps to its own CPU.
        pin(here);
        let hold = match Hold::start(held) {
            Ok(h) => h,
            Err(e) => {
                rvs_testbed::skip_or_fail(
                    "hold_keeps_other_threads_off_its_cpu",
                    format!("cannot run a SCHED_FIFO thread here: {e}"),
                );
                return;
            }
        };
        let count = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, st) = (Arc::clone(&count), Arc::clone(&stop));
        let probe = std::thread::spawn(move || {
            pin(held);
            while !st.load(Ordering::Relaxed) {
                c.fetch_add(1, Ordering::Relaxed);
            }
        });
        let progress = |what: &str| {
            let a = count.load(Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(20));
            let b = count.load(Ordering::Relaxed);
            eprintln!("{what}: probe counted {}", b - a);
            b - a
        };
        assert!(progress("before") > 0, "the probe never ran");
        hold.acquire();
        let during = progress("held");
        hold.release();
        let after = progress("released");
        stop.store(true, Ordering::Relaxed);
        probe.join().expect("probe");
        hold.stop();
        assert_eq!(during, 0, "the probe ran on the held CPU");
        assert!(after > 0, "the probe did not run again after release");
    }

    fn pin(cpu: usize) {
        rvs_sys::sched::pin_to_cpu(cpu).unwrap_or_else(|e| panic!("sched_setaffinity({cpu}): {e}"));
    }

    /// The frame parses as Ethernet/IPv4/UDP, and both checksums agree
    /// with etherparse's own computation.
    #[test]
    fn frames_have_valid_checksums() {
        let src = Ipv4Addr::new(10, 76, 0, 10);
        let dst = Ipv4Addr::new(10, 76, 0, 100);
        for (sport, payload) in [(1024u16, 18usize), (65535, 0), (4321, 1)] {
            let f = frame(
                ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]),
                SocketAddrV4::new(src, sport),
                SocketAddrV4::new(dst, 9),
                payload,
            );
            assert_eq!(f.len(), HEADERS + payload);
            let p = SlicedPacket::from_ethernet(&f).expect("parses");
            let Some(NetSlice::Ipv4(ip)) = p.net else {
                panic!("not IPv4")
            };
            let h = ip.header().to_header();
            assert_eq!(h.header_checksum, h.calc_header_checksum());
            assert_eq!(h.source, src.octets());
            let Some(TransportSlice::Udp(u)) = p.transport else {
                panic!("not UDP")
            };
            assert_eq!(u.source_port(), sport);
            let want = u
                .to_header()
                .calc_checksum_ipv4(&h, u.payload())
                .expect("checksum");
            assert_eq!(u.checksum(), want);
        }
    }
}
