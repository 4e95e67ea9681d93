//! [`Object`]: one BPF object (an ELF file compiled by clang) loaded with
//! its maps created, and [`Loader`], the options of that load (pinned maps,
//! map sizes, initial global data). aya does the ELF, BTF and relocation
//! work here and nowhere else in rvs.

use std::path::Path;

use super::Error;
use super::map::Map;
use super::program::Program;

/// Embed the file at `$path` 32-byte aligned, as the ELF parser wants
/// (`include_bytes!` gives 1-byte alignment): a `&'static [u8]` to give
/// [`Loader::load`].
#[macro_export]
macro_rules! include_bytes_aligned {
    ($path:expr) => {{
        #[repr(align(32))]
        struct Aligned32;
        #[repr(C)]
        struct Aligned<Bytes: ?Sized> {
            _align: [Aligned32; 0],
            bytes: Bytes,
        }
        const ALIGNED: &Aligned<[u8]> = &Aligned {
            _align: [],
            bytes: *include_bytes!($path),
        };
        &ALIGNED.bytes
    }};
}

/// How to load an object: which maps to open or create pinned, map sizes
/// other than the object's, global data to start with.
#[derive(Debug, Default)]
pub struct Loader<'a> {
    inner: aya::EbpfLoader<'a>,
}

impl<'a> Loader<'a> {
    /// The object's own maps, sizes and data.
    pub fn new() -> Self {
        Loader {
            inner: aya::EbpfLoader::new(),
        }
    }

    /// Map `name` lives pinned at `path`: opened there if something is
    /// pinned there (its layout is not checked: the caller compares it
    /// first), else created and pinned there.
    pub fn map_pin_path(&mut self, name: &'a str, path: &'a Path) -> &mut Self {
        self.inner.map_pin_path(name, path);
        self
    }

    /// Create map `name` with `max_entries` entries.
    pub fn map_max_entries(&mut self, name: &'a str, max_entries: u32) -> &mut Self {
        self.inner.map_max_entries(name, max_entries);
        self
    }

    /// Start the global (a `.data`/`.rodata` variable) `name` as `bytes`
    /// (rewritten into its map at every load, pinned or not); with
    /// `must_exist`, an object without it is an error.
    pub fn override_global(
        &mut self,
        name: &'a str,
        bytes: &'a [u8],
        must_exist: bool,
    ) -> &mut Self {
        self.inner.override_global(name, bytes, must_exist);
        self
    }

    /// Parse `bytes` (an ELF object, aligned: see
    /// [`include_bytes_aligned!`](crate::include_bytes_aligned)) and create
    /// its maps. Its programs are not loaded into the kernel yet.
    pub fn load(&mut self, bytes: &[u8]) -> Result<Object, Error> {
        Ok(Object {
            ebpf: self.inner.load(bytes)?,
        })
    }
}

/// A loaded BPF object: its maps created, its programs to load and attach.
/// Dropping it closes every descriptor: programs attached without a pinned
/// link are detached and maps that are not pinned are freed.
#[derive(Debug)]
pub struct Object {
    ebpf: aya::Ebpf,
}

impl Object {
    /// [`Loader::load`] with the object's own maps, sizes and data.
    pub fn load(bytes: &[u8]) -> Result<Self, Error> {
        Loader::new().load(bytes)
    }

    /// Program `name`, if the object has one.
    pub fn program(&mut self, name: &str) -> Option<Program<'_>> {
        self.ebpf.program_mut(name).map(Program::new)
    }

    /// Map `name`, if the object has one: `Some(Err)` when it is of a type
    /// rvs has no view of.
    pub fn map(&self, name: &str) -> Option<Result<Map<'_>, Error>> {
        self.ebpf.map(name).map(Map::of)
    }
}

/// The tag (hash of the instructions) of the loaded program with id `id`,
/// if there is one.
pub fn loaded_program_tag(id: u32) -> Option<[u8; 8]> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .find(|p| p.id() == id)
        .map(|p| p.tag().to_be_bytes())
}

/// The running kernel's version (major.minor.patch), for the features a
/// program needs that the verifier would only refuse with a log.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd)]
pub struct KernelVersion(aya::util::KernelVersion);

impl KernelVersion {
    /// Version `major.minor.patch`.
    pub fn new(major: u8, minor: u8, patch: u16) -> Self {
        KernelVersion(aya::util::KernelVersion::new(major, minor, patch))
    }

    /// The running kernel's (from uname and the distribution's files).
    pub fn current() -> Result<Self, Error> {
        aya::util::KernelVersion::current()
            .map(KernelVersion)
            .map_err(|e| Error::Other(e.to_string().into()))
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
