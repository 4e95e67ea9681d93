//! The service table of an XDP rvsd kept beside its pinned data plane, so
//! a restart does not lose a table made with `rvsadm` (ipvsadm scripts):
//! kernel IPVS keeps its table whatever happens to the process that made
//! it, and the pinned XDP program keeps forwarding by it — the next rvsd
//! must come back with the same table, not prune it as unclaimed.
//!
//! `<--state-dir>/<instance>.table` (default `/run/rvs`, a tmpfs: like the
//! bpffs pins, it lasts until reboot) holds the table as JSON: the commands
//! that rebuild it ([`Controller::table_commands`]). rvsd writes it, when
//! it has no configuration file, a second after every change, from a
//! thread of its own (write to a temporary file, then rename: a reader
//! never sees half a table, and the daemon's lock is never held over the
//! write). A starting rvsd without `-f`/`--rules` that adopts a pinned
//! plane loads it first. `rvsd --remove` and `rvsadm --remove-director`
//! delete it with the pins.
//!
//! [`Controller::table_commands`]: rvs_control::state::Controller::table_commands

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Sender, channel};

use rvs_control::protocol::Command;

/// The table file of `instance` in `dir`.
pub fn path(dir: &Path, instance: &str) -> PathBuf {
    dir.join(format!("{instance}.table"))
}

/// Read a table file: `Ok(None)` when there is none; a file that does not
/// parse is an error naming `file:line:column`.
pub fn load(path: &Path) -> Result<Option<Vec<Command>>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        format!(
            "{}:{}:{}: not a saved service table: {e}",
            path.display(),
            e.line(),
            e.column()
        )
    })
}

/// Delete a table file (nothing to do when there is none).
pub fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Keeps the file in step with the table: [`Saver::update`] (called from
/// the daemon's tick, under its lock) only compares and queues; the writer
/// thread writes the newest table queued.
#[derive(Debug)]
pub struct Saver {
    last: Option<Vec<Command>>,
    tx: Sender<String>,
    thread: std::thread::JoinHandle<()>,
}

impl Saver {
    /// Start the writer thread for `path` (its directory is created).
    pub fn spawn(path: PathBuf) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let (tx, rx) = channel::<String>();
        let thread = std::thread::Builder::new()
            .name("rvsd-table-file".into())
            .spawn(move || {
                while let Ok(mut text) = rx.recv() {
                    // Only the newest of what is queued matters.
                    while let Ok(newer) = rx.try_recv() {
                        text = newer;
                    }
                    if let Err(e) = write(&path, &text) {
                        tracing::warn!("saving the service table to {}: {e}", path.display());
                    }
                }
            })?;
        Ok(Saver {
            last: None,
            tx,
            thread,
        })
    }

    /// No more updates: the writer thread ends once it has written what
    /// was queued (join it to know the file is on disk, as rvsd does when
    /// it stops).
    pub fn close(self) -> std::thread::JoinHandle<()> {
        let Saver { tx, thread, .. } = self;
        drop(tx);
        thread
    }

    /// The table as it is now (`None` when loading it at start: it is
    /// what the file already says).
    pub fn update(&mut self, table: Vec<Command>) {
        if self.last.as_ref() == Some(&table) {
            return;
        }
        match serde_json::to_string_pretty(&table) {
            Ok(text) => {
                let _ = self.tx.send(text);
                self.last = Some(table);
            }
            Err(e) => tracing::warn!("serialising the service table: {e}"),
        }
    }
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("table.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::model::{AddrFamily, DestConfig, Protocol, ServiceConfig, ServiceKey};

    fn table() -> Vec<Command> {
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().expect("addr"),
            port: 80,
        };
        vec![
            Command::AddService {
                key,
                config: ServiceConfig::new(AddrFamily::Inet),
            },
            Command::AddDest {
                service: key,
                dest: DestConfig::new("10.0.0.2".parse().expect("addr"), 80),
            },
        ]
    }

    #[test]
    fn a_saved_table_loads_back_and_a_bad_one_is_located() {
        let dir = std::env::temp_dir().join(format!("rvs-table-{}", std::process::id()));
        let p = path(&dir, "t");
        assert_eq!(load(&p), Ok(None), "no file, no table");
        let mut s = Saver::spawn(p.clone()).expect("saver");
        s.update(table());
        let start = std::time::Instant::now();
        let got = loop {
            if let Ok(Some(t)) = load(&p) {
                break t;
            }
            assert!(start.elapsed().as_secs() < 5, "never written");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(got, table());
        std::fs::write(&p, "[\n  {\"AddService\": 7}\n]").expect("write");
        let e = load(&p).expect_err("bad file");
        assert!(e.contains("t.table:2:"), "located: {e}");
        remove(&p).expect("remove");
        remove(&p).expect("removing nothing is fine");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
