//! keepalived's notify FIFOs: `notify_fifo`, `vrrp_notify_fifo` and
//! `lvs_notify_fifo` (global_defs), with their `*_script` forms.
//!
//! Which FIFOs is [`rvs_control::notify`]'s plan ([`Fifos::of`]); as
//! keepalived does, a FIFO that does not exist is created (mode 0644,
//! owned by the keyword's `USER [GROUP]` if given) and removed again when
//! rvsd stops or the keyword goes away; one that exists is used as it is.
//! The script, if any, is started with the FIFO's path as its last
//! argument, so it can read the events. The FIFO is opened read-write and
//! non-blocking: holding a read end means a FIFO nobody reads never makes
//! a write fail with EPIPE, and a full one (64 KiB unread) loses the line
//! rather than stall the VRRP runtime that writes it.
//!
//! Lines are keepalived's, byte for byte: `INSTANCE "VI_1" MASTER 100`,
//! `GROUP "G" BACKUP 0` (to `notify_fifo` and `vrrp_notify_fifo`), and
//! `VS [192.0.2.1]:tcp:80 UP`, `RS [10.0.0.2]:tcp:80 [192.0.2.1]:tcp:80
//! DOWN` (to `notify_fifo` and `lvs_notify_fifo`).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::sync::Mutex;

pub use rvs_control::notify::{FifoSpec, Fifos};

/// An open FIFO.
struct Open {
    spec: FifoSpec,
    file: File,
    /// rvsd created it, so it removes it when done.
    created: bool,
}

impl Drop for Open {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_file(&self.spec.path);
        }
    }
}

/// The open FIFOs: `notify_fifo`, `vrrp_notify_fifo`, `lvs_notify_fifo`.
static OPEN: Mutex<[Option<Open>; 3]> = Mutex::new([None, None, None]);

/// Open the FIFOs of a (re)loaded configuration: one whose settings did
/// not change stays open (its reader notices nothing), others are closed
/// (and removed if rvsd created them) or opened.
pub fn configure(f: &Fifos) {
    let Ok(mut open) = OPEN.lock() else {
        return;
    };
    let wanted = [&f.all, &f.vrrp, &f.lvs];
    let kinds = ["", "vrrp ", "lvs "];
    for i in 0..3 {
        if open[i].as_ref().map(|o| &o.spec) == wanted[i].as_ref() {
            continue;
        }
        open[i] = None;
        if let Some(w) = wanted[i] {
            open[i] = open_fifo(w, kinds[i]);
        }
    }
}

/// Close every FIFO (removing those rvsd created): rvsd is stopping.
pub fn close_all() {
    if let Ok(mut open) = OPEN.lock() {
        *open = [None, None, None];
    }
}

fn open_fifo(spec: &FifoSpec, kind: &str) -> Option<Open> {
    let path = std::path::Path::new(&spec.path);
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o644);
    let created = match nix::unistd::mkfifo(path, mode) {
        Ok(()) => true,
        Err(nix::errno::Errno::EEXIST) => false,
        Err(e) => {
            tracing::error!(target: "rvs::notify", "Unable to create {kind}notify fifo {}: {e}", spec.path);
            return None;
        }
    };
    if created && let Some(owner) = &spec.owner {
        match rvs_check::probe::misc::resolve_user(owner) {
            Ok((uid, gid)) => {
                if let Err(e) = nix::unistd::chown(
                    path,
                    Some(nix::unistd::Uid::from_raw(uid)),
                    Some(nix::unistd::Gid::from_raw(gid)),
                ) {
                    tracing::warn!(target: "rvs::notify", "Failed to set uid:gid for fifo {}: {e}", spec.path);
                }
            }
            Err(e) => {
                tracing::warn!(target: "rvs::notify", "fifo {}: {e}; left owned by rvsd", spec.path)
            }
        }
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc_flags())
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(target: "rvs::notify", "Unable to open {kind}notify fifo {}: {e}", spec.path);
            if created {
                let _ = std::fs::remove_file(path);
            }
            return None;
        }
    };
    // An existing path that is not a FIFO is not written over.
    match file.metadata() {
        Ok(m) if m.file_type().is_fifo() => {}
        _ => {
            tracing::error!(target: "rvs::notify", "{kind}notify fifo {} exists and is not a FIFO; not used", spec.path);
            return None;
        }
    }
    let open = Open {
        spec: spec.clone(),
        file,
        created,
    };
    if let Some(s) = &spec.script {
        let mut s = s.clone();
        s.command = format!("{} {}", s.command, quote(&spec.path));
        if tokio::runtime::Handle::try_current().is_ok() {
            rvs_check::runner::run_script(s, format!("{kind}notify fifo {}", spec.path));
        }
    }
    tracing::info!(target: "rvs::notify", "{kind}notify fifo {} open", spec.path);
    Some(open)
}

/// O_NONBLOCK | O_NOFOLLOW (std adds O_CLOEXEC itself).
fn libc_flags() -> i32 {
    use nix::fcntl::OFlag;
    (OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW).bits()
}

/// Quote a path for the script's command line (split into words later).
fn quote(w: &str) -> String {
    if w.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'' || c == '\\')
    {
        format!("'{}'", w.replace('\'', "'\\''"))
    } else {
        w.to_owned()
    }
}

/// keepalived's VRRP line: `INSTANCE "NAME" STATE PRIORITY` (a group's
/// priority is 0).
pub fn vrrp_line(kind: &str, name: &str, state: &str, priority: u8) -> String {
    format!("{kind} \"{name}\" {state} {priority}\n")
}

/// Write a VRRP event to `notify_fifo` and `vrrp_notify_fifo`.
pub fn vrrp_event(kind: &str, name: &str, state: &str, priority: u8) {
    write(&[0, 1], &vrrp_line(kind, name, state, priority));
}

/// Write an LVS event line to `notify_fifo` and `lvs_notify_fifo`.
pub fn lvs_event(line: &str) {
    write(&[0, 2], line);
}

fn write(which: &[usize], line: &str) {
    let Ok(mut open) = OPEN.lock() else {
        return;
    };
    for &i in which {
        if let Some(o) = open[i].as_mut() {
            // One write of less than PIPE_BUF bytes: all of it or nothing
            // (a full FIFO nobody reads: the line is lost, as keepalived
            // loses it).
            if let Err(e) = o.file.write(line.as_bytes()) {
                tracing::debug!(target: "rvs::notify", "notify fifo {}: {e}; line dropped", o.spec.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_keepalived_s() {
        assert_eq!(
            vrrp_line("INSTANCE", "VI_1", "MASTER", 100),
            "INSTANCE \"VI_1\" MASTER 100\n"
        );
        assert_eq!(
            vrrp_line("GROUP", "G", "BACKUP", 0),
            "GROUP \"G\" BACKUP 0\n"
        );
    }

    /// A FIFO nobody reads never blocks a writer: once full, lines are
    /// dropped and the call returns.
    #[test]
    fn a_fifo_nobody_reads_never_blocks() {
        let dir = std::env::temp_dir().join(format!("rvs-fifo-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("f");
        let spec = FifoSpec {
            path: path.to_string_lossy().into_owned(),
            owner: None,
            script: None,
        };
        let mut o = open_fifo(&spec, "").expect("open");
        assert!(o.created);
        let line = vrrp_line("INSTANCE", "VI_1", "MASTER", 100);
        let start = std::time::Instant::now();
        for _ in 0..20_000 {
            let _ = o.file.write(line.as_bytes());
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(20));
        drop(o);
        assert!(!path.exists(), "a FIFO rvsd created is removed");
        let _ = std::fs::remove_dir(&dir);
    }
}
