//! `rvsd --takeover`: upgrade in place. The new daemon asks the running one
//! for its listening sockets over the control socket ([`Request::HandOver`];
//! the descriptors come attached to the answer as `SCM_RIGHTS`), serves the
//! same services on them, takes the control socket's path (a temporary
//! socket renamed over it: `rvsadm` always finds a daemon), then tells the
//! old one to retire ([`Request::Retire`]) on the same connection. The old
//! one stops accepting and reading — the sockets stay open in the new one,
//! so the kernel's accept queue never closes and no connection is refused —
//! finishes its established connections (bounded by `--drain-grace`,
//! default [`DEFAULT_RETIRE_BOUND`]) and exits 0.
//!
//! Both sides run on tokio: nothing here blocks the runtime, and the
//! daemon lock is held only to list (duplicate) the sockets.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use rvs_control::protocol::{
    Command, HandedSocket, MAX_LINE, Request, Response, SocketKind, parse_handover,
};
use rvs_core::model::ServiceKey;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::UnixStream;

use crate::handle::{DaemonHandle, Msg};

/// How long a retiring rvsd lets its connections run when `--drain-grace`
/// is not given; what is left then is reset, and it exits.
pub const DEFAULT_RETIRE_BOUND: Duration = Duration::from_secs(60);

/// How long each step of the conversation with the old daemon may take.
const STEP: Duration = Duration::from_secs(10);

/// What the daemon being taken over handed to this one.
pub struct Taken {
    /// Its process id.
    pub pid: u32,
    /// The virtual services' sockets.
    pub services: Vec<(ServiceKey, OwnedFd)>,
    /// The HTTP endpoint's listener, if it had one.
    pub http: Option<(SocketAddr, OwnedFd)>,
    /// Its service table, for a daemon without a configuration file.
    pub table: Vec<Command>,
    /// The connection the handover happened on; `Retire` goes on it.
    conn: UnixStream,
}

/// Why [`fetch`] found nothing to take over.
pub enum FetchError {
    /// No daemon answers on the path (no socket file, or a stale one).
    NoDaemon(std::io::Error),
    /// A daemon answered but the handover failed; it keeps running.
    Failed(anyhow::Error),
}

/// Connect to the daemon at `path` and take its sockets (step 1). Nothing
/// changes in it until [`retire_old`].
pub async fn fetch(path: &Path) -> Result<Taken, FetchError> {
    let mut conn = match UnixStream::connect(path).await {
        Ok(c) => c,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(FetchError::NoDaemon(e));
        }
        Err(e) => {
            return Err(FetchError::Failed(
                anyhow::Error::new(e).context(format!("connecting to {}", path.display())),
            ));
        }
    };
    let step = async {
        send_line(&mut conn, &Request::HandOver).await?;
        let (line, fds) = read_line_with_fds(&conn).await?;
        let h = parse_handover(&line, fds.len())?;
        let mut services = Vec::new();
        let mut http = None;
        for (s, fd) in h.sockets.into_iter().zip(fds) {
            match s {
                HandedSocket::Service { key, .. } => services.push((key, fd)),
                HandedSocket::Http { addr } => http = Some((addr, fd)),
            }
        }
        anyhow::Ok((h.pid, services, http, h.table))
    };
    match tokio::time::timeout(STEP, step).await {
        Ok(Ok((pid, services, http, table))) => Ok(Taken {
            pid,
            services,
            http,
            table,
            conn,
        }),
        Ok(Err(e)) => Err(FetchError::Failed(e)),
        Err(_) => Err(FetchError::Failed(anyhow::anyhow!(
            "the running rvsd did not answer the handover within {STEP:?}"
        ))),
    }
}

/// Step 2, once this daemon serves the control socket's path: tell the old
/// daemon to retire. Returns its process id.
pub async fn retire_old(taken: Taken) -> anyhow::Result<u32> {
    let Taken { pid, mut conn, .. } = taken;
    let step = async {
        send_line(&mut conn, &Request::Retire).await?;
        let (line, _) = read_line_with_fds(&conn).await?;
        match serde_json::from_slice::<Response>(&line)? {
            Response::Ok => anyhow::Ok(()),
            Response::Error { message, .. } => anyhow::bail!("it refused: {message}"),
            other => anyhow::bail!("unexpected answer {other:?}"),
        }
    };
    tokio::time::timeout(STEP, step)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {STEP:?}"))?
        .with_context(|| format!("asking rvsd {pid} to retire"))?;
    Ok(pid)
}

/// `SIGUSR2`: start the installed binary (this process's `argv[0]`, which
/// a package upgrade has replaced) with this process's arguments plus
/// `--takeover`, to take over from this one. The child inherits what this
/// process has from its supervisor — under systemd the unit's cgroup,
/// limits, sandbox and `NOTIFY_SOCKET`, which is why the takeover is
/// started from here rather than from a package script. A child that fails
/// to take over exits and this daemon keeps running (the failure is
/// logged). Returns the child's pid.
pub fn spawn_successor() -> anyhow::Result<u32> {
    let mut args = std::env::args_os();
    let exe = args
        .next()
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
    let rest: Vec<std::ffi::OsString> = args.collect();
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(&rest).stdin(std::process::Stdio::null());
    let has_takeover = rest.iter().any(|a| {
        a.to_str()
            .is_some_and(|s| s == "--takeover" || s.starts_with("--takeover="))
    });
    if !has_takeover {
        cmd.arg("--takeover");
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let pid = child.id();
    // Reaped here if it ends while this daemon runs (it failed); a child
    // that took over outlives this process.
    std::thread::Builder::new()
        .name("rvsd-successor".into())
        .spawn(move || {
            if let Ok(status) = child.wait() {
                tracing::error!(pid, %status, "SIGUSR2: the new rvsd exited without taking over");
            }
        })
        .context("reaper thread")?;
    Ok(pid)
}

/// Under a service manager (`NOTIFY_SOCKET` set: systemd with
/// `NotifyAccess=all`), tell it that this process is the service's main
/// process now (`MAINPID=`), before the old one is told to retire, so it
/// never sees the service's main process exit. Returns whether the message
/// was sent; a failure is logged.
pub fn notify_main_pid() -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let msg = format!("MAINPID={}\nREADY=1\n", std::process::id());
    let sent = (|| -> std::io::Result<usize> {
        use std::os::unix::ffi::OsStrExt;
        let sock = std::os::unix::net::UnixDatagram::unbound()?;
        match path.as_bytes().strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(msg.as_bytes(), &addr)
            }
            None => sock.send_to(msg.as_bytes(), &path),
        }
    })();
    match sent {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(
                "--takeover: telling the service manager (NOTIFY_SOCKET {}) the new main pid: {e}",
                path.to_string_lossy()
            );
            false
        }
    }
}

async fn send_line<T: serde::Serialize>(conn: &mut UnixStream, msg: &T) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(msg)?;
    line.push(b'\n');
    conn.write_all(&line).await?;
    Ok(())
}

/// Read one line and the descriptors that came with its bytes.
async fn read_line_with_fds(conn: &UnixStream) -> anyhow::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut line = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = conn
            .async_io(Interest::READABLE, || {
                rvs_sys::sock::recv_with_fds(conn.as_fd(), &mut buf, &mut fds)
            })
            .await
            .context("reading the answer")?;
        if n == 0 {
            anyhow::bail!("the running rvsd closed the connection without answering");
        }
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            // The old daemon writes nothing after its answer.
            line.truncate(end);
            return Ok((line, fds));
        }
        if line.len() > MAX_LINE {
            anyhow::bail!("the answer is longer than {MAX_LINE} bytes");
        }
    }
}

/// The old daemon's side: what the control server needs to hand this
/// daemon over.
#[derive(Default)]
pub struct Handover {
    /// The HTTP endpoint's listener (a duplicate kept for handing over).
    http: Mutex<Option<(SocketAddr, OwnedFd)>>,
    /// A new daemon holds the sockets (one takeover at a time).
    taken: AtomicBool,
    /// Set by `Retire`: the daemon's main loop waits for it.
    retire: tokio::sync::Notify,
    retiring: AtomicBool,
}

impl Handover {
    /// Remember the HTTP endpoint's listener for a later handover.
    pub fn set_http(&self, addr: SocketAddr, fd: OwnedFd) {
        if let Ok(mut h) = self.http.lock() {
            *h = Some((addr, fd));
        }
    }

    /// Resolves once a new daemon told this one to retire.
    pub async fn retired(&self) {
        loop {
            let notified = self.retire.notified();
            if self.retiring.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    /// True once retiring.
    pub fn is_retiring(&self) -> bool {
        self.retiring.load(Ordering::SeqCst)
    }
}

/// One control connection's part in a handover.
#[derive(Default)]
pub struct ConnState {
    /// This connection took the sockets.
    took: bool,
}

impl ConnState {
    /// The connection ends: a handover that never reached `Retire` is
    /// abandoned (the new daemon failed), so another may start.
    pub fn close(&mut self, h: &Handover) {
        if std::mem::take(&mut self.took) && !h.is_retiring() {
            h.taken.store(false, Ordering::SeqCst);
            tracing::warn!("takeover abandoned by the new rvsd; still serving");
        }
    }
}

fn error(message: String) -> Response {
    Response::Error {
        message,
        index: None,
        ctl: None,
    }
}

/// Answer `HandOver`: write the answer line with the descriptors attached.
pub async fn hand_over(
    w: &mut tokio::net::unix::OwnedWriteHalf,
    daemon: &DaemonHandle,
    h: &Handover,
    st: &mut ConnState,
) -> anyhow::Result<()> {
    if h.is_retiring() {
        return write_resp(
            w,
            &error("this rvsd is retiring (already taken over)".into()),
        )
        .await;
    }
    if h.taken.swap(true, Ordering::SeqCst) {
        return write_resp(w, &error("another rvsd is taking this one over".into())).await;
    }
    st.took = true;
    // Only duplicating descriptors and copying the table in the owner.
    let listed = daemon
        .ask(|reply| Msg::HandOver { reply })
        .await
        .unwrap_or_else(|| Err("rvsd is stopping".into()));
    let (socks, table) = match listed {
        Ok(x) => x,
        Err(m) => {
            st.close(h);
            return write_resp(w, &error(m)).await;
        }
    };
    let mut sockets = Vec::with_capacity(socks.len() + 1);
    let mut fds = Vec::with_capacity(socks.len() + 1);
    for (key, fd) in socks {
        let socket = match key {
            ServiceKey::Addr {
                protocol: rvs_core::model::Protocol::Udp,
                ..
            } => SocketKind::Udp,
            _ => SocketKind::TcpListener,
        };
        sockets.push(HandedSocket::Service { key, socket });
        fds.push(fd);
    }
    let http = h
        .http
        .lock()
        .ok()
        .and_then(|g| g.as_ref().map(|(a, fd)| (*a, fd.try_clone())));
    if let Some((addr, Ok(fd))) = http {
        sockets.push(HandedSocket::Http { addr });
        fds.push(fd);
    }
    let n = fds.len();
    let resp = Response::HandOver(rvs_control::protocol::HandOver {
        pid: std::process::id(),
        sockets,
        table,
    });
    let mut line = serde_json::to_vec(&resp)?;
    line.push(b'\n');
    // The descriptors ride on the line's first bytes, at most 250 per byte.
    let mut sent = 0;
    for chunk in fds.chunks(rvs_sys::sock::MAX_FDS_PER_MESSAGE) {
        let borrowed: Vec<_> = chunk.iter().map(AsFd::as_fd).collect();
        let byte = line
            .get(sent..=sent)
            .context("more descriptor batches than bytes")?;
        let stream: &UnixStream = w.as_ref();
        stream
            .async_io(Interest::WRITABLE, || {
                rvs_sys::sock::send_with_fds(stream.as_fd(), byte, &borrowed)
            })
            .await
            .context("sending the sockets")?;
        sent += 1;
    }
    w.write_all(&line[sent..]).await?;
    tracing::info!(sockets = n, "handed the sockets to a new rvsd");
    Ok(())
}

/// Answer `Retire`: only on the connection that took the sockets.
pub async fn retire(
    w: &mut tokio::net::unix::OwnedWriteHalf,
    h: &Handover,
    st: &ConnState,
) -> anyhow::Result<()> {
    if !st.took {
        return write_resp(
            w,
            &error("Retire: only the rvsd that took the sockets (HandOver on this connection) may retire this one".into()),
        )
        .await;
    }
    write_resp(w, &Response::Ok).await?;
    h.retiring.store(true, Ordering::SeqCst);
    h.retire.notify_waiters();
    Ok(())
}

async fn write_resp(w: &mut tokio::net::unix::OwnedWriteHalf, r: &Response) -> anyhow::Result<()> {
    let mut out = serde_json::to_vec(r)?;
    out.push(b'\n');
    w.write_all(&out).await?;
    Ok(())
}

/// Bind the control socket at `path` over the socket of the daemon being
/// taken over: a temporary socket in the same directory renamed over it,
/// so the path always leads to a live daemon.
pub fn bind_over(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "rvsd.sock".into());
    let tmp: PathBuf = path.with_file_name(format!(".{name}.{}.new", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = tokio::net::UnixListener::bind(&tmp)
        .with_context(|| format!("binding {}", tmp.display()))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", tmp.display()))
        .and_then(|()| {
            std::fs::rename(&tmp, path)
                .with_context(|| format!("renaming {} over {}", tmp.display(), path.display()))
        });
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// The retiring daemon's drain: wait until its data plane carries nothing,
/// or the bound passes (then end what is left). Returns (connections left
/// when retiring, connections cut at the bound).
pub async fn drain(daemon: &DaemonHandle, bound: Duration) -> (u64, u64) {
    let live = || async {
        daemon
            .ask(|reply| Msg::PlaneLive { reply })
            .await
            .unwrap_or(0)
    };
    let at_start = live().await;
    let deadline = tokio::time::Instant::now() + bound;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        if live().await == 0 {
            return (at_start, 0);
        }
        let stop = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = tokio::time::sleep_until(deadline) => break,
            _ = stop => break,
        }
    }
    let cut = live().await;
    daemon.send(Msg::AbortPlane).await;
    // The connections' tasks close their sockets on their next poll.
    for _ in 0..40 {
        if live().await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (at_start, cut)
}
