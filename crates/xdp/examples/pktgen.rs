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
//! ```
//!
//! Flow i (0 <= i < K) is source port 1024 + i % 64512 from the address
//! `--src` + i / 64512 (so K = 65536 uses two source addresses); the
//! frames are sent round-robin over the flows. Sending stops after N
//! packets or S seconds, whichever comes first; `--pps` paces to at most R
//! packets per second (in batches). Prints one line:
//! `sent=N errors=E seconds=T pps=P` (errors: messages the kernel refused).
//!
//! Root (CAP_NET_RAW); meant to run in the client's network namespace under
//! `ip netns exec`, pinned with `taskset`.

use std::error::Error;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

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
}

fn usage() -> String {
    "usage: pktgen --interface IF --dst-mac MAC --src ADDR --dst VIP [--dport PORT] \
     [--flows K] [--count N] [--seconds S] [--pps R] [--batch B] [--payload BYTES] \
     [--no-qdisc-bypass]"
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
    if HEADERS + args.payload > 1514 {
        return Err("--payload: the frame must fit a 1500-byte MTU".into());
    }
    Ok(args)
}

/// One's-complement sum of `data` (big-endian 16-bit words) added to `acc`.
fn sum16(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// An Ethernet/IPv4/UDP frame with correct IPv4 and UDP checksums.
fn frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    payload: usize,
) -> Vec<u8> {
    let udp_len = 8 + payload;
    let ip_len = 20 + udp_len;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    // IPv4: version 4, IHL 5, DSCP 0, length, id 0, DF, TTL 64, UDP.
    let ip_start = f.len();
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(ip_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    let ip_sum = fold(sum16(0, &f[ip_start..]));
    f[ip_start + 10..ip_start + 12].copy_from_slice(&ip_sum.to_be_bytes());
    // UDP, checksum over the pseudo-header.
    let udp_start = f.len();
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..payload).map(|i| b'a' + (i % 26) as u8));
    let mut acc = sum16(0, &src.octets());
    acc = sum16(acc, &dst.octets());
    acc += 17 + udp_len as u32;
    acc = sum16(acc, &f[udp_start..]);
    let mut udp_sum = fold(acc);
    if udp_sum == 0 {
        udp_sum = 0xffff;
    }
    f[udp_start + 6..udp_start + 8].copy_from_slice(&udp_sum.to_be_bytes());
    f
}

/// An AF_PACKET raw socket bound to one interface, for sending only.
struct PacketSocket {
    fd: libc::c_int,
}

impl PacketSocket {
    fn open(interface: &str, qdisc_bypass: bool) -> Result<Self, Box<dyn Error>> {
        let name = std::ffi::CString::new(interface)?;
        // SAFETY: `name` is a valid NUL-terminated string for the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(
                format!("interface {interface}: {}", std::io::Error::last_os_error()).into(),
            );
        }
        // Protocol 0: the socket receives nothing, it only sends.
        // SAFETY: plain socket(2) call, no pointers.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(format!("socket(AF_PACKET): {}", std::io::Error::last_os_error()).into());
        }
        let s = PacketSocket { fd };
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = 0;
        sll.sll_ifindex = i32::try_from(ifindex)?;
        // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
        let r = unsafe {
            libc::bind(
                s.fd,
                (&raw const sll).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(format!("bind to {interface}: {}", std::io::Error::last_os_error()).into());
        }
        if qdisc_bypass {
            let one: libc::c_int = 1;
            // SAFETY: the option value is a c_int and its size is passed.
            let r = unsafe {
                libc::setsockopt(
                    s.fd,
                    libc::SOL_PACKET,
                    libc::PACKET_QDISC_BYPASS,
                    (&raw const one).cast::<libc::c_void>(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r < 0 {
                return Err(format!(
                    "setsockopt(PACKET_QDISC_BYPASS): {}",
                    std::io::Error::last_os_error()
                )
                .into());
            }
        }
        Ok(s)
    }

    /// Sends `msgs` with one sendmmsg(2): the number sent, or the error of
    /// the first message when none was sent.
    fn send_batch(&self, msgs: &mut [libc::mmsghdr]) -> std::io::Result<usize> {
        let n = u32::try_from(msgs.len()).unwrap_or(u32::MAX);
        // SAFETY: every mmsghdr points to one iovec that points into a frame
        // buffer the caller keeps alive and unmoved for the call; no name,
        // no control data.
        let r = unsafe { libc::sendmmsg(self.fd, msgs.as_mut_ptr(), n, 0) };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        // SAFETY: `fd` is a socket this value owns; closed once.
        unsafe { libc::close(self.fd) };
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
                src_mac,
                args.dst_mac,
                addr,
                args.dst,
                sport,
                args.dport,
                args.payload,
            )
        })
        .collect();
    // The kernel only reads through these pointers (sendmsg).
    let mut iovs: Vec<libc::iovec> = frames
        .iter()
        .map(|f| libc::iovec {
            iov_base: f.as_ptr() as *mut libc::c_void,
            iov_len: f.len(),
        })
        .collect();
    let sock = PacketSocket::open(&args.interface, args.qdisc_bypass)?;

    let limit = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let (mut sent, mut errors, mut next) = (0u64, 0u64, 0usize);
    // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
    let zero: libc::mmsghdr = unsafe { std::mem::zeroed() };
    let mut msgs = vec![zero; args.batch];
    let mut last_error = None;
    while sent + errors < args.count {
        let elapsed = start.elapsed();
        if elapsed >= limit {
            break;
        }
        if let Some(pps) = args.pps {
            let due = Duration::from_secs_f64((sent + errors) as f64 / pps);
            if due > elapsed {
                std::thread::sleep((due - elapsed).min(limit - elapsed));
                continue;
            }
        }
        let want = args.batch.min((args.count - sent - errors) as usize);
        for (k, m) in msgs[..want].iter_mut().enumerate() {
            *m = zero;
            m.msg_hdr.msg_iov = &raw mut iovs[(next + k) % frames.len()];
            m.msg_hdr.msg_iovlen = 1;
        }
        match sock.send_batch(&mut msgs[..want]) {
            Ok(n) => {
                sent += n as u64;
                next = (next + n) % frames.len();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                // The first message was refused (e.g. ENOBUFS): count it, go on.
                errors += 1;
                next = (next + 1) % frames.len();
                last_error = Some(e);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "sent={sent} errors={errors} seconds={secs:.3} pps={:.0}",
        sent as f64 / secs
    );
    if let Some(e) = last_error {
        eprintln!("pktgen: last send error: {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    /// The frame parses as Ethernet/IPv4/UDP, and both checksums agree
    /// with etherparse's own computation.
    #[test]
    fn frames_have_valid_checksums() {
        let src = Ipv4Addr::new(10, 76, 0, 10);
        let dst = Ipv4Addr::new(10, 76, 0, 100);
        for (sport, payload) in [(1024u16, 18usize), (65535, 0), (4321, 1)] {
            let f = frame(
                [2, 0, 0, 0, 0, 1],
                [2, 0, 0, 0, 0, 2],
                src,
                dst,
                sport,
                9,
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
