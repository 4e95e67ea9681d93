//! The control socket: a Unix stream socket, mode 0600, one JSON request per
//! line, one JSON response per line.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use rvs_control::protocol::{MAX_LINE, Request, Response, parse_request};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::handle::DaemonHandle;
use crate::takeover::{self, ConnState, Handover};

/// Bind the control socket at `path`: create its directory, replace a stale
/// socket file left by a dead daemon, refuse to start when a live daemon
/// answers there, and restrict the socket to its owner (root).
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                bail!("another rvsd is already listening on {}", path.display());
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing stale socket {}", path.display()))?;
            tracing::info!(socket = %path.display(), "removed stale control socket");
        }
        Ok(_) => bail!(
            "{} exists and is not a socket; refusing to replace it",
            path.display()
        ),
        Err(_) => {}
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))?;
    Ok(listener)
}

/// Removes the socket file when the daemon exits — if it is still this
/// daemon's: after `rvsd --takeover` the path holds the new daemon's socket.
pub struct SocketGuard {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl SocketGuard {
    /// Guard the socket file bound at `path` just now.
    pub fn new(path: PathBuf) -> Self {
        let id = file_id(&path);
        SocketGuard { path, id }
    }
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        if self.id.is_some() && file_id(&self.path) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Accept control connections forever.
pub async fn serve(listener: UnixListener, daemon: DaemonHandle, handover: Arc<Handover>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let d = daemon.clone();
                let h = handover.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, d, &h).await {
                        tracing::debug!("control connection: {e}");
                    }
                });
            }
            Err(e) => {
                // EMFILE and friends: keep accepting after a pause.
                tracing::warn!("control socket accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(
    stream: UnixStream,
    daemon: DaemonHandle,
    handover: &Handover,
) -> anyhow::Result<()> {
    let mut st = ConnState::default();
    let r = requests(stream, &daemon, handover, &mut st).await;
    st.close(handover);
    r
}

async fn requests(
    stream: UnixStream,
    daemon: &DaemonHandle,
    handover: &Handover,
    st: &mut ConnState,
) -> anyhow::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        let resp = if line.len() > MAX_LINE {
            Response::Error {
                message: "request too long".into(),
                index: None,
                ctl: None,
            }
        } else {
            match parse_request(&line) {
                // The handover writes its own answer (descriptors attached).
                Ok(Request::HandOver) => {
                    takeover::hand_over(&mut w, daemon, handover, st).await?;
                    continue;
                }
                Ok(Request::Retire) => {
                    takeover::retire(&mut w, handover, st).await?;
                    continue;
                }
                Ok(req) => crate::handle::answer(daemon, req).await,
                Err(e) => Response::Error {
                    message: format!("bad request: {e}"),
                    index: None,
                    ctl: None,
                },
            }
        };
        let mut out = serde_json::to_vec(&resp)?;
        out.push(b'\n');
        w.write_all(&out).await?;
        if line.len() > MAX_LINE {
            return Ok(());
        }
    }
}
