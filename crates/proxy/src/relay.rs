//! The byte pump of a TCP connection: both directions at once. Each
//! direction starts with recv/send through the runtime thread's scratch
//! buffer — the cheapest path for requests and responses that fit in one
//! read, and a connection holds no buffer of its own — and switches to
//! splice(2) (socket → pipe → socket, the bytes never enter user space)
//! once a read fills the buffer, i.e. for bulk transfers, like HAProxy's
//! `splice-auto`. Pipes come from a bounded pool of empty pipes, because
//! making one costs pipe2(2) plus two close(2) per direction.
//!
//! Measured with `scripts/bench-proxy` (see docs/benchmarks-history.md): per new
//! connection ~90 % of the proxy's CPU time is the kernel's (accept, connect,
//! TCP processing, close), so what this module saves is system calls.
//!
//! A half-close passes through (EOF from one side → `shutdown(SHUT_WR)` on
//! the other, and a FIN event for the director); a reset on either side
//! resets both; the connection ends when both directions are closed, when
//! it has been idle for the director's ESTABLISHED timeout, or when a drain
//! timer closes it.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rvs_core::ipvs::L4;
use rvs_core::state::Direction;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::sock;
use crate::tcp::{ConnGuard, FIN, RST};

/// Size asked for splice pipes (`/proc/sys/fs/pipe-max-size` is 1 MiB by
/// default), and the most one splice moves.
const PIPE_SIZE: usize = 1 << 20;
/// Report traffic to the director after this many bytes (and every second).
const FLUSH_BYTES: u64 = 1 << 20;

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Both sides closed their write side.
    Closed,
    /// One side reset (or failed); both were reset.
    Reset,
    /// No traffic for the idle timeout.
    Idle,
    /// Closed by a drain timer.
    Killed,
}

/// A pipe for one direction of splice.
#[derive(Debug)]
pub(crate) struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

/// Most empty pipes kept for reuse.
const POOL_MAX: usize = 64;

/// Empty pipes kept for reuse. A fresh pipe costs pipe2(2) now and two
/// close(2) later — a fifth of a short connection's system calls — so, as
/// HAProxy does, pipes whose connection ended cleanly (and so are empty) go
/// back here. Pooled pipes' descriptors are charged to the fd budget while
/// they wait; a connection's own charge covers the pipes it holds.
#[derive(Debug, Default)]
pub(crate) struct PipePool {
    idle: std::sync::Mutex<Vec<Pipe>>,
}

impl PipePool {
    fn take(&self, fds: &std::sync::atomic::AtomicUsize) -> Option<Pipe> {
        if let Some(p) = self.idle.lock().ok().and_then(|mut v| v.pop()) {
            fds.fetch_sub(2, Ordering::Relaxed);
            return Some(p);
        }
        pipe()
    }

    fn give(&self, p: Pipe, fds: &std::sync::atomic::AtomicUsize) {
        if let Ok(mut v) = self.idle.lock()
            && v.len() < POOL_MAX
        {
            fds.fetch_add(2, Ordering::Relaxed);
            v.push(p);
        }
    }
}

#[cfg(target_os = "linux")]
fn pipe() -> Option<Pipe> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let (r, w) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).ok()?;
    // A larger pipe moves a bulk transfer in fewer splice calls; pipes are
    // pooled, so this is paid once per pipe. Best effort: the default
    // 64 KiB remains when the system limit is lower.
    let _ = fcntl(&w, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as i32));
    Some(Pipe { r, w })
}

#[cfg(not(target_os = "linux"))]
fn pipe() -> Option<Pipe> {
    None
}

/// Relay between `client` and `server` until the connection ends.
pub(crate) async fn relay(
    client: &TcpStream,
    server: &TcpStream,
    guard: &ConnGuard,
    idle: Duration,
    kill: &Notify,
    ctx: &crate::plane::Ctx,
) -> End {
    let start = tokio::time::Instant::now();
    let last = AtomicU64::new(0);
    let (pool, fds) = (&ctx.pipes, &ctx.stats.fds_in_use);
    let shared = Shared {
        guard,
        last: &last,
        start,
        pool,
        fds,
        splice: ctx.config.splice,
        one_done: std::sync::atomic::AtomicBool::new(false),
    };
    let c2s = pump(client, server, Direction::Input, &shared);
    let s2c = pump(server, client, Direction::Output, &shared);
    let watchdog = async {
        let tick = idle
            .min(Duration::from_secs(1))
            .max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(tick).await;
            refresh_pkts(client, guard);
            guard.flush();
            let since = start.elapsed().as_millis() as u64;
            let quiet = since.saturating_sub(last.load(Ordering::Relaxed));
            // The limit follows the connection's state, as IPVS's timers do:
            // a half-closed connection waits FIN_WAIT/CLOSE_WAIT, not 900 s.
            let limit = guard.state_timeout().unwrap_or(idle);
            if Duration::from_millis(quiet) >= limit {
                return;
            }
        }
    };
    let end = tokio::select! {
        r = async { tokio::try_join!(c2s, s2c) } => match r {
            Ok((a, b)) => {
                // Both directions ended at EOF: their pipes are empty.
                for p in [a, b].into_iter().flatten() {
                    pool.give(p, fds);
                }
                End::Closed
            }
            Err(dir) => {
                guard.event(dir, L4::Tcp(RST));
                End::Reset
            }
        },
        _ = watchdog => End::Idle,
        _ = kill.notified() => End::Killed,
    };
    if matches!(end, End::Reset | End::Killed) {
        sock::abort_on_close(client);
        sock::abort_on_close(server);
    }
    refresh_pkts(client, guard);
    end
}

/// The client-facing socket's TCP_INFO holds both counters IPVS reports:
/// segments from the client (InPkts) and segments to the client (OutPkts).
/// One getsockopt per refresh; kept as they are when the kernel does not say.
fn refresh_pkts(client: &TcpStream, guard: &ConnGuard) {
    if let Some((inp, outp)) = sock::tcp_segs(client) {
        guard.meter.in_pkts.fetch_max(inp, Ordering::Relaxed);
        guard.meter.out_pkts.fetch_max(outp, Ordering::Relaxed);
    }
}

/// What both directions of one connection share.
struct Shared<'a> {
    guard: &'a ConnGuard,
    last: &'a AtomicU64,
    start: tokio::time::Instant,
    pool: &'a PipePool,
    fds: &'a std::sync::atomic::AtomicUsize,
    splice: bool,
    /// One direction has reached EOF.
    one_done: std::sync::atomic::AtomicBool,
}

/// Bytes read per copy: requests and responses that fit are relayed with
/// recv/send; one that fills it marks a bulk transfer, which switches that
/// direction to splice (as HAProxy's `splice-auto` does).
const COPY_CHUNK: usize = 16 * 1024;

/// One direction, `from` → `to`, until EOF (then half-close `to`). Starts
/// with a copy through the thread's scratch buffer (so a connection holds no
/// buffer of its own) and moves to splice through a pooled pipe once a read
/// fills it. At EOF the (empty) pipe is handed back for the
/// pool. An error (a reset, a broken pipe) is returned as its direction.
async fn pump(
    from: &TcpStream,
    to: &TcpStream,
    dir: Direction,
    sh: &Shared<'_>,
) -> Result<Option<Pipe>, Direction> {
    let mut pending: Vec<u8> = Vec::new();
    let mut pipe: Option<Pipe> = None;
    let bytes = match dir {
        Direction::Output => &sh.guard.meter.out_bytes,
        _ => &sh.guard.meter.in_bytes,
    };
    loop {
        let moved = match &pipe {
            Some(p) => splice_chunk(from, to, p).await.map(|n| (n, false)),
            None => copy_chunk(from, to, &mut pending).await,
        };
        let (n, eof_next) = match moved {
            Ok(m) => m,
            Err(e) => {
                tracing::trace!("proxy: relay {dir:?}: {e}");
                return Err(dir);
            }
        };
        if n == 0 {
            // Pass the half-close on. When the other direction has ended
            // already, both sockets are closed next — which sends the FIN
            // (everything was read, so no RST) — and the shutdown is saved.
            if !sh.one_done.swap(true, Ordering::Relaxed) {
                sock::shutdown_write(to);
            }
            sh.guard.event(dir, L4::Tcp(FIN));
            return Ok(pipe);
        }
        if pipe.is_none() && sh.splice && n == COPY_CHUNK {
            pipe = sh.pool.take(sh.fds);
        }
        bytes.fetch_add(n as u64, Ordering::Relaxed);
        sh.last
            .store(sh.start.elapsed().as_millis() as u64, Ordering::Relaxed);
        if sh.guard.meter.pending_bytes() >= FLUSH_BYTES {
            sh.guard.flush();
        }
        if eof_next {
            // The peer's FIN is known to follow the data just relayed (see
            // `copy_chunk`): pass it on now, without the read that would
            // return 0. The shutdown puts the FIN on the segment that still
            // holds that data.
            if !sh.one_done.swap(true, Ordering::Relaxed) {
                sock::shutdown_write(to);
            }
            sh.guard.event(dir, L4::Tcp(FIN));
            return Ok(pipe);
        }
    }
}

/// Move one chunk with splice: socket → pipe, then pipe → socket until the
/// pipe is empty. Returns the bytes moved, 0 at EOF.
#[cfg(target_os = "linux")]
async fn splice_chunk(from: &TcpStream, to: &TcpStream, p: &Pipe) -> io::Result<usize> {
    use nix::fcntl::{SpliceFFlags, splice};
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
    // The pipe is empty here, so EAGAIN can only mean "socket has no data".
    let n = loop {
        from.readable().await?;
        match from.try_io(Interest::READABLE, || {
            splice(from, None, &p.w, None, PIPE_SIZE, flags).map_err(io::Error::from)
        }) {
            // No short-read shortcut here: a splice can stop at the pipe's
            // slots with data still queued.
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    };
    let mut left = n;
    // The pipe holds data here, so EAGAIN can only mean "socket buffer full".
    while left > 0 {
        to.writable().await?;
        match to.try_io(Interest::WRITABLE, || {
            // No SPLICE_F_MORE: it corks the socket like MSG_MORE and
            // delays small writes by up to 200 ms.
            splice(&p.r, None, to, None, left, flags).map_err(io::Error::from)
        }) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(m) => left = left.saturating_sub(m),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(not(target_os = "linux"))]
async fn splice_chunk(from: &TcpStream, to: &TcpStream, _p: &Pipe) -> io::Result<usize> {
    let mut buf = Vec::new();
    copy_chunk(from, to, &mut buf).await.map(|(n, _)| n)
}

/// A read returned less than asked: the socket's receive queue is empty
/// now. Tell the runtime so, without the extra read that would return
/// EAGAIN — one system call saved per message and direction, as HAProxy
/// does. Safe with edge-triggered epoll on a current-thread runtime (rvsd's):
/// the I/O driver cannot run between the read and this call, and data
/// arriving afterwards raises a new edge. On a multi-thread runtime the
/// driver could mark new data readable in between and this would clear it,
/// so there the extra read is kept.
fn drained(s: &TcpStream) {
    if single_threaded() {
        let _ = s.try_io(Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }
}

fn single_threaded() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

thread_local! {
    /// One read buffer per runtime thread: a chunk is read into it and
    /// written on at once, with no await in between, so connections —
    /// idle or between requests — hold no buffer of their own.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; COPY_CHUNK]);
}

/// Move one chunk `from` → `to` by copy. Data the peer could not take at
/// once is kept in `pending` (the only per-connection buffer, and only
/// while the receiver is slow) and written before the next read. Returns
/// the bytes moved (0 at EOF) and whether EOF is known to come next.
///
/// That last case is the end of a typical short exchange: a server writes
/// its response and closes, and both arrive before we read. The readiness
/// event then carries the peer's shutdown (EPOLLRDHUP), and a read shorter
/// than the buffer has taken everything before the FIN. The data goes out
/// with `MSG_MORE` and the caller's `shutdown(SHUT_WR)` follows at once, so
/// the kernel puts the FIN on the same segment (as HAProxy does when it
/// sees data and shutdown together): one segment, one ACK and one wakeup
/// of the receiver fewer, and no read that would only return 0.
async fn copy_chunk(
    from: &TcpStream,
    to: &TcpStream,
    pending: &mut Vec<u8>,
) -> io::Result<(usize, bool)> {
    let (n, eof_next) = loop {
        let ready = from.ready(Interest::READABLE).await?;
        let closing = ready.is_read_closed();
        let step = SCRATCH.with(|cell| -> io::Result<Option<(usize, bool)>> {
            let mut guard = cell.borrow_mut();
            let b = &mut guard[..];
            let n = match from.try_read(b) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e),
            };
            if n == 0 {
                return Ok(Some((0, false)));
            }
            let eof_next = closing && n < b.len();
            if n < b.len() {
                drained(from);
            }
            let sent = if eof_next {
                sock::try_send_more(to, &b[..n])
            } else {
                to.try_write(&b[..n])
            };
            match sent {
                Ok(m) => pending.extend_from_slice(&b[m..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    pending.extend_from_slice(&b[..n])
                }
                Err(e) => return Err(e),
            }
            Ok(Some((n, eof_next)))
        })?;
        if let Some(step) = step {
            break step;
        }
    };
    while !pending.is_empty() {
        to.writable().await?;
        match to.try_write(pending) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(m) => {
                pending.drain(..m);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    // Give back what a slow receiver made us hold.
    if pending.capacity() > 0 {
        *pending = Vec::new();
    }
    Ok((n, eof_next))
}
