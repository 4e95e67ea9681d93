//! Probes against real local servers on 127.0.0.0/8 (one test binary).

mod dns;
mod http;
mod misc;
mod ping;
mod smtp;
mod tcp;
mod udp;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rvs_check::probe::{ProbeResult, ProbeSpec, ProbeTarget};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;

/// A target with a short timeout.
pub fn target(addr: SocketAddr, timeout_ms: u64) -> ProbeTarget {
    ProbeTarget::new(addr, Duration::from_millis(timeout_ms))
}

/// Runs one probe on a fresh current-thread runtime, for tests that run
/// outside tokio (e.g. on an [`in_netns`] thread).
pub fn run_blocking(spec: &ProbeSpec, target: &ProbeTarget) -> ProbeResult {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rvs_check::probe::run(spec, target))
}

/// A TCP server on a fresh loopback port: every connection is handed to
/// `handle` on its own task with a sender for what the test wants to see;
/// returns the address and the receiving end.
pub async fn serve_tcp<T, F, Fut>(handle: F) -> (SocketAddr, mpsc::UnboundedReceiver<T>)
where
    T: Send + 'static,
    F: Fn(TcpStream, mpsc::UnboundedSender<T>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(handle(s, tx.clone()));
        }
    });
    (addr, rx)
}

/// A UDP server on a fresh loopback port: sends back to the peer every
/// datagram `answer` makes of a received one, for at most `limit`
/// datagrams (a test sends a handful).
pub async fn serve_udp(
    limit: usize,
    mut answer: impl FnMut(&[u8]) -> Vec<Vec<u8>> + Send + 'static,
) -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        for _ in 0..limit {
            let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
                return;
            };
            for out in answer(&buf[..n]) {
                let _ = sock.send_to(&out, peer).await;
            }
        }
    });
    addr
}

/// A loopback UDP port nothing listens on (bound, read, closed).
pub fn closed_udp_port() -> SocketAddr {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

/// Whether we run as root (some tests need it and say so when skipping).
pub fn is_root() -> bool {
    rvs_testbed::is_root()
}

/// True when running as root; otherwise skips `test` saying `why` needs
/// root ([`rvs_testbed::skip_or_fail`]: under CI a failure).
pub fn require_root(test: &str, why: &str) -> bool {
    rvs_testbed::require_root(test, why)
}

/// Runs `f` on a new thread inside a fresh network namespace with `lo` up
/// and `ping_group_range` set to `range` (None = the namespace default).
pub fn in_netns<T: Send + 'static>(
    range: Option<&'static str>,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let st = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(st.success());
        if let Some(r) = range {
            std::fs::write("/proc/sys/net/ipv4/ping_group_range", r).unwrap();
        }
        f()
    })
    .join()
    .unwrap()
}

/// Runs `cmd` (an `ip` command line) in the calling thread's namespace.
pub fn ip(args: &str) {
    let st = std::process::Command::new("ip")
        .args(args.split_whitespace())
        .status()
        .unwrap();
    assert!(st.success(), "ip {args}");
}

/// A private temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "rvs-check-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes an executable shell script and returns its path.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.0.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
