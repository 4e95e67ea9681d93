//! A cgroup v2 guard: a child cgroup with a unique name under the unified
//! hierarchy's root, for tests that attach cgroup BPF programs (the sock
//! data plane) to it and run processes inside it. Dropping the guard moves
//! whatever is left in it back to the root and removes it, also when the
//! test panics, so programs attached to it go with it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::netns::unique_name;

/// Where the unified (v2) hierarchy is mounted: `/sys/fs/cgroup/unified`
/// on hybrid systems, `/sys/fs/cgroup` on pure v2 ones; `None` without.
pub fn unified_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir))
    })
}

/// A child cgroup this test created; removed on drop.
#[derive(Debug)]
pub struct Cgroup {
    root: PathBuf,
    path: PathBuf,
}

impl Cgroup {
    /// A new cgroup named [`unique_name`]`(tag)` under the unified root.
    /// Panics when there is no cgroup v2 hierarchy or it cannot be made.
    pub fn new(tag: &str) -> Cgroup {
        let root = unified_root().expect("no cgroup v2 (unified) hierarchy mounted");
        let path = root.join(unique_name(tag));
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("creating cgroup {}: {e}", path.display()));
        Cgroup { root, path }
    }

    /// For `test`: a new cgroup as [`Cgroup::new`] makes it, when the test
    /// can have one (root, a cgroup v2 hierarchy: what tests of the sock
    /// data plane's cgroup programs need); otherwise `None`, the test
    /// skipped (or failed under CI) saying why
    /// ([`crate::require_root_and_cgroup2`]).
    pub fn for_test(test: &str, tag: &str) -> Option<Cgroup> {
        crate::skip::require_root_and_cgroup2(test, "needs root (cgroup BPF programs)")
            .then(|| Cgroup::new(tag))
    }

    /// Its directory (to attach programs to).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A command that runs `program` inside this cgroup: a shell moves
    /// itself into the cgroup, then executes the program with `args` (so
    /// the program's every socket belongs to the cgroup from its start).
    pub fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"echo $$ > "$0/cgroup.procs" && shift && exec "$@""#)
            .arg(&self.path)
            .arg("--")
            .arg(program)
            .args(args);
        c
    }

    /// The processes in it now.
    pub fn procs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.path.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Processes left behind go back to the root; rmdir then succeeds
        // (retried briefly: a moved process leaves asynchronously).
        for _ in 0..50 {
            for pid in self.procs() {
                let _ = std::fs::write(self.root.join("cgroup.procs"), pid.to_string());
            }
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "rvs-testbed: could not remove cgroup {}",
            self.path.display()
        );
    }
}
