//! Where configuration text comes from: the file system, or (for tests and
//! for callers that already hold the files) memory.
//!
//! `include` needs three things: read a file, list a directory (globs) and
//! identify a file uniquely (include-loop detection). Putting them behind a
//! trait keeps the lexer free of I/O decisions and lets tests build virtual
//! trees of included files.

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};

/// A source of configuration files.
pub trait Resolver: Send + Sync {
    /// The whole text of a file.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// The names (not paths) of the entries of a directory.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// A name that is equal for equal files (used to detect include loops).
    fn identity(&self, path: &Path) -> PathBuf {
        normalize(path)
    }
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsResolver;

impl Resolver for FsResolver {
    fn read(&self, path: &Path) -> io::Result<String> {
        let bytes = std::fs::read(path)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            out.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }

    fn identity(&self, path: &Path) -> PathBuf {
        std::fs::canonicalize(path).unwrap_or_else(|_| normalize(path))
    }
}

/// Files held in memory, keyed by (lexically normalised) path.
#[derive(Clone, Debug, Default)]
pub struct MemResolver {
    files: BTreeMap<PathBuf, String>,
}

impl MemResolver {
    /// An empty set of files.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builder: add a file.
    pub fn with(mut self, path: impl AsRef<Path>, text: impl Into<String>) -> Self {
        self.insert(path, text);
        self
    }

    /// Add or replace a file.
    pub fn insert(&mut self, path: impl AsRef<Path>, text: impl Into<String>) {
        self.files.insert(normalize(path.as_ref()), text.into());
    }
}

impl Resolver for MemResolver {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.files
            .get(&normalize(path))
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "No such file or directory"))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let dir = normalize(dir);
        let mut out = Vec::new();
        for path in self.files.keys() {
            let Ok(rest) = path.strip_prefix(&dir) else {
                continue;
            };
            if let Some(Component::Normal(first)) = rest.components().next() {
                let name = first.to_string_lossy().into_owned();
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
        Ok(out)
    }
}

/// Lexical normalisation: drop `.`, resolve `..` against earlier components.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}
