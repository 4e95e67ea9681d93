//! Entering a named network namespace (keepalived's `net_namespace NAME`):
//! the namespace `ip netns add NAME` made, `/run/netns/NAME`.
//!
//! `setns(2)` moves the calling thread only; threads it creates afterwards
//! inherit its namespace. [`enter`] is therefore for a process that has not
//! started any other thread yet (rvsd calls it before its runtime exists),
//! and refuses otherwise: a daemon half in one namespace and half in
//! another would run in the wrong one.

use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Why a namespace could not be entered.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// The name is not a plain file name (`/`, `.`, `..`, empty).
    #[error("`{0}` is not a network namespace name (a file name under /run/netns)")]
    BadName(String),
    /// No such namespace (or it cannot be opened).
    #[error("cannot open {path}: {source} (create it with `ip netns add {name}`)")]
    Open {
        /// The namespace's name.
        name: String,
        /// The file tried.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// Other threads run already: they would stay behind.
    #[error("the process runs {0} threads; a namespace is entered before any other starts")]
    Threads(usize),
    /// `setns(2)` failed.
    #[error("setns({path}, CLONE_NEWNET): {source}")]
    Setns {
        /// The file.
        path: String,
        /// The error.
        source: io::Error,
    },
}

/// The file of namespace `name`: `/run/netns/NAME` (where iproute2 makes
/// it), else `/var/run/netns/NAME` on systems where /var/run is not /run.
pub fn path(name: &str) -> PathBuf {
    let run = PathBuf::from("/run/netns").join(name);
    if run.exists() {
        return run;
    }
    let var = PathBuf::from("/var/run/netns").join(name);
    if var.exists() { var } else { run }
}

/// Move this (single-threaded) process into network namespace `name`.
pub fn enter(name: &str) -> Result<(), NetnsError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(NetnsError::BadName(name.to_owned()));
    }
    let p = path(name);
    let shown = p.display().to_string();
    let f = std::fs::File::open(&p).map_err(|source| NetnsError::Open {
        name: name.to_owned(),
        path: shown.clone(),
        source,
    })?;
    let threads = std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count());
    if threads > 1 {
        return Err(NetnsError::Threads(threads));
    }
    // SAFETY: setns takes a file descriptor and a flag; `f` is an open
    // file for the whole call, and CLONE_NEWNET makes the kernel check it
    // is a network namespace (EINVAL otherwise). No memory is shared.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(NetnsError::Setns {
            path: shown,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_file_names_are_refused() {
        for bad in ["", ".", "..", "a/b", "/run/netns/x"] {
            assert!(matches!(enter(bad), Err(NetnsError::BadName(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_missing_namespace_is_named_in_the_error() {
        let name = format!("rvs-ns-missing-{}", std::process::id());
        match enter(&name) {
            Err(e @ NetnsError::Open { .. }) => {
                let text = e.to_string();
                assert!(text.contains(&format!("/netns/{name}")), "{text}");
                assert!(text.contains(&format!("ip netns add {name}")), "{text}");
            }
            other => panic!("{other:?}"),
        }
    }
}
