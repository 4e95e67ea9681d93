//! The director outlives rvsd: its program is attached through BPF links
//! pinned under bpffs, and its maps are pinned beside them, one directory
//! per rvsd instance ([`Instance`]):
//!
//! ```text
//! /sys/fs/bpf/rvs/<INSTANCE>/
//!     maps/<map>       every map of the director (`flows4`, `nat_rev`,
//!                      `svc_stats`, ..., `data_own_macs`), see director_maps
//!     links/<ifname>   one XDP link per interface the program runs on
//! ```
//!
//! A link pinned there keeps the program attached, and so its maps alive,
//! when rvsd stops or dies; removing the link's pin (with no process
//! holding it) detaches it. A starting rvsd adopts what it finds (see
//! [`crate::plane::Plane::start`]): the pinned maps whose layout
//! ([`MapLayout`]) is its own are reused as they are; one whose layout
//! differs (another `--flow-table-size`, a struct grown in a newer build)
//! is replaced by a fresh map its entries are copied into ([`copy_map`]),
//! before and after the link update that swaps the program.
//!
//! The FULLNAT tail-call slot, the prog array `fnat_prog` ([`TAIL_ARRAYS`]),
//! is not shared that way: each loaded director fills its own with its own
//! `xdp_fnat`. The running program's is pinned too (`maps/fnat_prog`): the
//! kernel empties a prog array when the last file descriptor or pin of it
//! goes (a program referring to it does not count), so without the pin the
//! running program's FULLNAT would stop the moment the rvsd that loaded it
//! exits (replies and new flows passed to the kernel, `fnat_missed`). A
//! starting rvsd keeps the running program only when its array is pinned
//! and filled; otherwise it swaps in its own (a link update) and pins its
//! array ([`Instance::tails_pinned`], `Loaded::pin_tails`).
//! The QUIC-LB program's slot, `quic_prog`, is pinned the same way, with
//! the QUIC-LB maps: a restarted rvsd adopts the QUIC-LB services as it
//! adopts the others (plane/adopt.rs).

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use crate::maps::{self, typed::Plain};

/// Where bpffs is mounted.
pub const BPFFS: &str = "/sys/fs/bpf";
/// The directory of every rvsd instance's pins.
pub const ROOT: &str = "/sys/fs/bpf/rvs";

/// Why pinning, adopting or removing failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// An instance name that is not a plain file name.
    #[error(
        "instance name `{0}`: use letters, digits, `.`, `_` and `-` (at most 64, not `.` or `..`)"
    )]
    BadName(String),
    /// A file operation on bpffs failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// rvsd runs in a mount namespace of its own (as under `ip netns
    /// exec`) and the host has no bpffs to pin into: pins would vanish with
    /// rvsd, and a restart would reset every flow.
    #[error(
        "rvsd runs in a mount namespace of its own (as under `ip netns exec`) and the host has no bpffs on {BPFFS}: pins made here would vanish with rvsd and a restart would reset every flow; mount it on the host (`mount -t bpf bpf {BPFFS}`) or start rvsd with `nsenter --net=/run/netns/NS`"
    )]
    PrivateMountNamespace,
    /// A pinned map cannot be carried into the new one.
    #[error("migrating map `{map}`: {why}")]
    Migrate {
        /// Which map.
        map: &'static str,
        /// Why.
        why: String,
    },
}

/// The error of doing `what` (a file operation) on `path`.
pub(crate) fn io<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> PinError + 'a {
    move |source| PinError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// The error of pinning a map or a link at `path`.
pub(crate) fn pin_failed(path: &Path) -> impl FnOnce(rvs_sys::bpf::Error) -> PinError + '_ {
    move |e| PinError::Io {
        what: "pinning",
        path: path.to_owned(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Remove a directory of pins the real servers' programs left (the TOA
/// reader's, the DSR programs'): its pins `files`, then `dir`, then `root`
/// and [`ROOT`] where that leaves them empty. The links go with their last
/// reference. A pin already gone is no error. Whether `dir` was there.
pub(crate) fn remove_pins<'a>(
    dir: &Path,
    files: impl IntoIterator<Item = &'a str>,
    root: &str,
) -> Result<bool, PinError> {
    if !dir.exists() {
        return Ok(false);
    }
    for f in files {
        let p = dir.join(f);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("unpinning", &p)(e)),
        }
    }
    std::fs::remove_dir(dir).map_err(io("removing", dir))?;
    let _ = std::fs::remove_dir(root);
    let _ = std::fs::remove_dir(ROOT);
    Ok(true)
}

/// One rvsd instance's pin directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    name: String,
    dir: PathBuf,
}

impl Instance {
    /// The instance `name` under [`ROOT`].
    pub fn new(name: &str) -> Result<Self, PinError> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name != "."
            && name != ".."
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !ok {
            return Err(PinError::BadName(name.to_owned()));
        }
        Ok(Instance {
            name: name.to_owned(),
            dir: Path::new(ROOT).join(name),
        })
    }

    /// The default instance name of an rvsd serving `socket`: `default`
    /// for the default socket, else the socket's file stem and a hash of
    /// its whole path, so two rvsds with different sockets (tests running
    /// in parallel) never share pins.
    pub fn default_name(socket: &Path) -> String {
        if socket == Path::new(rvs_control::protocol::DEFAULT_SOCKET) {
            return "default".into();
        }
        let stem: String = socket
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        // FNV-1a over the path's bytes.
        use std::os::unix::ffi::OsStrExt as _;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in socket.as_os_str().as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{stem}-{h:016x}")
    }

    /// The instance's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where its maps are pinned.
    pub fn maps_dir(&self) -> PathBuf {
        self.dir.join("maps")
    }

    /// Where its links are pinned.
    pub fn links_dir(&self) -> PathBuf {
        self.dir.join("links")
    }

    /// The pin of map `name` (bpffs refuses names with a `.`: a leading
    /// one, as in `.data.own_macs`, is left out, the others become `_`).
    pub fn map_path(&self, name: &str) -> PathBuf {
        self.maps_dir()
            .join(name.trim_start_matches('.').replace('.', "_"))
    }

    /// The pin of the link on `interface` (named after it, a `.` as in
    /// `eth0.100` written `:`, which no interface name has and bpffs
    /// accepts).
    pub fn link_path(&self, interface: &str) -> PathBuf {
        self.links_dir().join(interface.replace('.', ":"))
    }

    /// Whether the tail-call arrays ([`TAIL_ARRAYS`]) of the running
    /// program are pinned and hold their programs: a later rvsd can leave
    /// that program running (else it swaps its own in, see the module doc).
    pub fn tails_pinned(&self) -> bool {
        TAIL_ARRAYS
            .iter()
            .all(|(name, slot)| tail_filled(&self.map_path(name), *slot))
    }

    /// Whether the directory exists.
    pub fn exists(&self) -> bool {
        self.dir.exists()
    }

    /// Make [`BPFFS`] a bpffs whose pins outlive this rvsd (see
    /// `bpffs_plan`), then create the instance's directories.
    pub fn prepare(&self) -> Result<(), PinError> {
        let bpffs = Path::new(BPFFS);
        if self.dir.starts_with(bpffs) && !is_bpffs(bpffs) {
            let ns = |pid: &str| {
                let m = std::fs::metadata(format!("/proc/{pid}/ns/mnt")).ok()?;
                Some((
                    std::os::unix::fs::MetadataExt::dev(&m),
                    std::os::unix::fs::MetadataExt::ino(&m),
                ))
            };
            let init = ns("1");
            let host = Path::new(HOST_BPFFS);
            let plan = bpffs_plan(
                init.map(|i| Some(i) == ns("self")),
                init.is_some() && is_bpffs(host),
            )?;
            std::fs::create_dir_all(bpffs).map_err(io("creating", bpffs))?;
            let mount = |src: &str, fstype: &str| {
                nix::mount::mount(
                    Some(src),
                    bpffs,
                    Some(fstype),
                    nix::mount::MsFlags::empty(),
                    Some("mode=700"),
                )
                .map_err(|e| PinError::Io {
                    what: "mounting on",
                    path: bpffs.to_owned(),
                    source: e.into(),
                })
            };
            match plan {
                BpffsPlan::BindHost => {
                    // A bind mount from another mount namespace is refused
                    // (EINVAL); a path through PID 1's root is not: a tmpfs
                    // here holds one symlink, `rvs`, to the host's
                    // directory, and every pin path goes through it.
                    tracing::info!(
                        "rvsd runs in a mount namespace of its own (as under `ip netns exec`): pinning in the host's bpffs through {HOST_BPFFS}, so the pins outlive rvsd"
                    );
                    let host_root = host.join("rvs");
                    std::fs::create_dir_all(&host_root).map_err(io("creating", &host_root))?;
                    mount("tmpfs", "tmpfs")?;
                    let link = Path::new(ROOT);
                    std::os::unix::fs::symlink(&host_root, link).map_err(io("linking", link))?;
                }
                BpffsPlan::Mount => mount("bpf", "bpf")?,
                BpffsPlan::MountUnsure => {
                    tracing::warn!(
                        "no bpffs on {BPFFS} and /proc/1/ns/mnt cannot be read, so whether this mount namespace is the host's is unknown: mounting one here; if rvsd runs in a mount namespace of its own (`ip netns exec`), its pins vanish with it and a restart resets every flow (start it with `nsenter --net=/run/netns/NS`)"
                    );
                    mount("bpf", "bpf")?;
                }
            }
        }
        for d in [self.maps_dir(), self.links_dir()] {
            std::fs::create_dir_all(&d).map_err(io("creating", &d))?;
        }
        Ok(())
    }

    /// Nothing is pinned: no directory, or no map and no link in it.
    pub fn is_empty(&self) -> bool {
        let none = |d: PathBuf| std::fs::read_dir(d).map_or(true, |mut rd| rd.next().is_none());
        none(self.maps_dir()) && none(self.links_dir())
    }

    /// The interfaces with a pinned link.
    pub fn linked_interfaces(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(self.links_dir()) else {
            return Vec::new();
        };
        let mut v: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().replace(':', "."))
            .collect();
        v.sort();
        v
    }

    /// Remove the link pin of `interface` (detaching the program there
    /// once no process holds the link).
    pub fn unpin_link(&self, interface: &str) -> Result<(), PinError> {
        let p = self.link_path(interface);
        match std::fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("unpinning", &p)(e)),
        }
    }

    /// Unpin everything (links first: the program is detached from every
    /// interface as soon as no process holds its links; then the maps) and
    /// remove the directory. `Ok(false)` when there was nothing.
    pub fn remove(&self) -> Result<bool, PinError> {
        if !self.dir.exists() {
            return Ok(false);
        }
        for ifname in self.linked_interfaces() {
            self.unpin_link(&ifname)?;
        }
        if let Ok(rd) = std::fs::read_dir(self.maps_dir()) {
            for e in rd.filter_map(|e| e.ok()) {
                let p = e.path();
                std::fs::remove_file(&p).map_err(io("unpinning", &p))?;
            }
        }
        for d in [self.maps_dir(), self.links_dir(), self.dir.clone()] {
            match std::fs::remove_dir(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("removing", &d)(e)),
            }
        }
        // The parent goes when it was the last instance.
        let _ = std::fs::remove_dir(ROOT);
        Ok(true)
    }
}

/// Whether a prog array is pinned at `path` with a program in `slot`.
fn tail_filled(path: &Path, slot: u32) -> bool {
    use std::os::fd::AsFd as _;
    let Ok(fd) = rvs_sys::bpf::obj_get(path) else {
        return false;
    };
    let Ok(m) = rvs_sys::bpf::BpfMap::new(fd.as_fd()) else {
        return false;
    };
    // A prog array's value, read from user space, is the program's id.
    let mut id = [0u8; 4];
    m.info().map_type == MAP_PROG_ARRAY
        && m.value_len() == id.len()
        && m.lookup(&slot.to_ne_bytes(), &mut id).unwrap_or(false)
}

/// The host's bpffs seen from another mount namespace of the same PID
/// namespace: through PID 1's root.
const HOST_BPFFS: &str = "/proc/1/root/sys/fs/bpf";

/// How [`Instance::prepare`] gets a bpffs on [`BPFFS`] when none is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BpffsPlan {
    /// Mount one: this is the host's mount namespace, where it stays.
    Mount,
    /// Pin into the host's ([`HOST_BPFFS`]): this mount namespace (`ip
    /// netns exec`'s) dies with rvsd, the host's bpffs does not.
    BindHost,
    /// Mount one, warning: whether it outlives rvsd is unknown.
    MountUnsure,
}

/// The decision of [`Instance::prepare`], without I/O: `same_as_init` is
/// whether this mount namespace is PID 1's (`None`: PID 1's cannot be
/// read, as in some containers); `host_bpffs` whether PID 1's root has a
/// bpffs on `/sys/fs/bpf`.
fn bpffs_plan(same_as_init: Option<bool>, host_bpffs: bool) -> Result<BpffsPlan, PinError> {
    match same_as_init {
        Some(true) => Ok(BpffsPlan::Mount),
        Some(false) if host_bpffs => Ok(BpffsPlan::BindHost),
        Some(false) => Err(PinError::PrivateMountNamespace),
        None => Ok(BpffsPlan::MountUnsure),
    }
}

fn is_bpffs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::BPF_FS_MAGIC)
}

/// `BPF_MAP_TYPE_HASH`.
pub const MAP_HASH: u32 = 1;
/// `BPF_MAP_TYPE_ARRAY`.
pub const MAP_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_PROG_ARRAY`.
pub const MAP_PROG_ARRAY: u32 = 3;
/// `BPF_MAP_TYPE_PERCPU_ARRAY`.
pub const MAP_PERCPU_ARRAY: u32 = 6;
/// `BPF_MAP_TYPE_LRU_HASH`.
pub const MAP_LRU_HASH: u32 = 9;
/// `BPF_MAP_TYPE_LPM_TRIE`.
pub const MAP_LPM_TRIE: u32 = 11;

/// What the director expects of one of its maps: the kernel's
/// `bpf_map_info` fields a pinned map must match to be reused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MapLayout {
    /// The map's name in the object.
    pub name: &'static str,
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// Bytes of a key.
    pub key_size: u32,
    /// Bytes of a value (one CPU's for per-CPU maps).
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
}

impl MapLayout {
    fn of<K: Plain, V: Plain>(name: &'static str, map_type: u32, max_entries: u32) -> Self {
        MapLayout {
            name,
            map_type,
            key_size: size_of::<K>() as u32,
            value_size: size_of::<V>() as u32,
            max_entries,
        }
    }

    /// Whether a pinned map with `info` is this one.
    pub fn matches(&self, info: &rvs_sys::bpf::MapInfo) -> bool {
        info.map_type == self.map_type
            && info.key_size == self.key_size
            && info.value_size == self.value_size
            && info.max_entries == self.max_entries
    }

    /// Whether the state of a map with `info` can be copied into this one
    /// (same type, or a hash into a hash of the other kind — LRU or plain,
    /// as `fnat_rev` became plain —, and the same key; values are cut or
    /// zero-extended: a struct only ever grows at its end).
    pub fn can_take(&self, info: &rvs_sys::bpf::MapInfo) -> bool {
        same_kind(info.map_type, self.map_type) && info.key_size == self.key_size
    }

    /// Whether this map's entries are carried across a migration (state);
    /// the others (per-CPU caches and scratch) start empty.
    pub fn is_state(&self) -> bool {
        !matches!(
            self.name,
            "flow_cache"
                | "flow6_cache"
                | "locality_tmp"
                | "flood"
                | "flow_epochs"
                | "nh_missing"
                | "tun_csum_tmp"
                | "fnat_tmp"
                | "dsr_tmp"
        )
    }
}

/// Whether entries of a map of type `a` can be written into one of type
/// `b`: the same type, or hash and LRU hash either way (the same key and
/// value layout, only the eviction differs).
fn same_kind(a: u32, b: u32) -> bool {
    let hash = |t| t == MAP_HASH || t == MAP_LRU_HASH;
    a == b || (hash(a) && hash(b))
}

/// The director's prog arrays pinned beside the maps, and the slot
/// `xdp_lb` tail-calls in each: never shared with another load, pinned for
/// the program the links run (see the module doc).
pub const TAIL_ARRAYS: [(&str, u32); 3] = [
    ("fnat_prog", maps::FNAT_PROG),
    ("quic_prog", crate::quic_lb::QUIC_PROG),
    ("dsr_prog", maps::dsr_opt::PROG),
];

/// The kernel's bytes for one element of a hash or LRU hash map beside its
/// key and value (`struct htab_elem`: its list node, LRU node and hash).
const HTAB_ELEM_HEADER: u64 = 48;

/// The director's maps sized by [`crate::LoadOptions::max_services`]: the
/// services hash and the arrays indexed by service.
pub const SERVICE_MAPS: [&str; 8] = [
    "services",
    "svc_info",
    "svc_flood",
    "rr_cursor",
    "svc_stats",
    "fnat_pools",
    "fnat_stats",
    "quic_stats",
];

/// An estimate of the kernel memory the director's maps take with `opts`
/// on a machine of `cpus` possible CPUs: hash and LRU maps preallocate
/// every element (header, key and value, each 8-byte aligned), arrays
/// their values, per-CPU maps a value per CPU.
pub fn director_bytes(opts: &crate::LoadOptions, cpus: u32) -> u64 {
    maps_bytes(&director_maps(opts), cpus)
}

/// [`director_bytes`] of the [`SERVICE_MAPS`] alone: what `opts.max_services`
/// costs (about 25.5 MiB for 65,536 services plus 12.5 MiB per CPU: 825 MiB on
/// 64 CPUs, 1.6 GiB on 128).
pub fn service_maps_bytes(opts: &crate::LoadOptions, cpus: u32) -> u64 {
    let all = director_maps(opts);
    let svc: Vec<MapLayout> = all
        .into_iter()
        .filter(|m| SERVICE_MAPS.contains(&m.name))
        .collect();
    maps_bytes(&svc, cpus)
}

fn maps_bytes(maps: &[MapLayout], cpus: u32) -> u64 {
    let r8 = |n: u32| u64::from(n.div_ceil(8) * 8);
    maps.iter()
        .map(|m| {
            let n = u64::from(m.max_entries);
            match m.map_type {
                MAP_HASH | MAP_LRU_HASH => {
                    n * (HTAB_ELEM_HEADER + r8(m.key_size) + r8(m.value_size))
                }
                MAP_PERCPU_ARRAY => n * r8(m.value_size) * u64::from(cpus.max(1)),
                _ => n * r8(m.value_size),
            }
        })
        .sum()
}

/// The default `--max-services`: the largest power of two up to
/// [`crate::maps::MAX_SERVICES`] (65,536) whose maps
/// ([`service_maps_bytes`]) take at most a sixteenth of the machine's
/// `mem_total` bytes (half of the eighth the director's maps may take, see
/// [`default_flow_table_size`]), and at least 4,096 (the size before it
/// was configurable). Four of these maps are per-CPU: 65,536 services cost
/// 825 MiB on 64 CPUs, so a director needs 13 GiB for the full size there,
/// 26 GiB on 128 CPUs, 1 GiB on 2.
pub fn default_max_services(mem_total: u64, cpus: u32) -> u32 {
    let mut n = crate::maps::MAX_SERVICES;
    while n > 1 << 12 {
        let opts = crate::LoadOptions {
            max_services: n,
            ..crate::LoadOptions::default()
        };
        if service_maps_bytes(&opts, cpus) <= mem_total / 16 {
            break;
        }
        n /= 2;
    }
    n
}

/// The default `--flow-table-size` with `max_services` services: the
/// largest power of two up to [`crate::maps::FLOWS_DEFAULT`] (2^20) whose
/// maps ([`director_bytes`], the service maps included) take at most an
/// eighth of the machine's `mem_total` bytes, and at least 2^12. On a 1 GiB
/// machine the 2^20 default (about 600 MiB of preallocated maps) would
/// have the kernel's OOM killer end rvsd; a director with 8 GiB or more
/// gets 2^20 (Cilium sizes its maps by memory the same way:
/// `bpf-map-dynamic-size-ratio`).
pub fn default_flow_table_size(mem_total: u64, cpus: u32, max_services: u32) -> u32 {
    let mut n = crate::maps::FLOWS_DEFAULT;
    while n > 1 << 12 {
        let opts = crate::LoadOptions {
            flow_table_size: n,
            max_services,
            ..crate::LoadOptions::default()
        };
        if director_bytes(&opts, cpus) <= mem_total / 8 {
            break;
        }
        n /= 2;
    }
    n
}

/// Every map of the director loaded with `opts`, as the Rust mirrors of
/// `bpf/rvs.h` and `bpf/lib/maps.h` describe them (the `director_maps_are_the_object_s`
/// test checks the list against a loaded director).
pub fn director_maps(opts: &crate::LoadOptions) -> Vec<MapLayout> {
    use crate::maps::*;
    use crate::own_mac::{OWN_MACS_MAP, OwnMacTable};
    use crate::quic_lb::{QUIC_SIDS_MAX, QUIC_SVCS_MAX, QuicSidKey, QuicStats, QuicSvc};
    let n = opts.flow_table_size;
    let s = opts.max_services;
    vec![
        MapLayout::of::<SvcKey, u32>("services", MAP_HASH, s),
        MapLayout::of::<u32, Svc>("svc_info", MAP_ARRAY, s),
        MapLayout::of::<u32, u32>("slots", MAP_ARRAY, opts.slots),
        MapLayout::of::<u32, Dest>("dests", MAP_ARRAY, MAX_DESTS),
        MapLayout::of::<FlowKey, Flow>("flows", MAP_LRU_HASH, n),
        MapLayout::of::<Flow4Key, Flow>("flows4", MAP_LRU_HASH, n),
        MapLayout::of::<FlowKey, Flow>("embryonic", MAP_LRU_HASH, opts.embryonic_entries()),
        MapLayout::of::<Flow4Key, Flow>("embryonic4", MAP_LRU_HASH, opts.embryonic_entries()),
        MapLayout::of::<u32, SvcFlood>("svc_flood", MAP_PERCPU_ARRAY, s),
        MapLayout::of::<u32, FlowCache>("flow_cache", MAP_PERCPU_ARRAY, FLOW_CACHE_SIZE),
        MapLayout::of::<u32, Flow6Cache>("flow6_cache", MAP_PERCPU_ARRAY, FLOW6_CACHE_SIZE),
        MapLayout::of::<u32, u32>("flow_epochs", MAP_ARRAY, FLOW_EPOCHS),
        MapLayout::of::<NatKey, Nat>("nat_rev", MAP_LRU_HASH, n),
        MapLayout::of::<PersistKey, Persist>("persist", MAP_LRU_HASH, n),
        MapLayout::of::<u32, u64>("rr_cursor", MAP_ARRAY, s),
        MapLayout::of::<u32, Stats>("svc_stats", MAP_PERCPU_ARRAY, s),
        MapLayout::of::<u32, Stats>("dest_stats", MAP_PERCPU_ARRAY, MAX_DESTS),
        MapLayout::of::<u32, Config>("config", MAP_ARRAY, 1),
        MapLayout::of::<u32, Flood>("flood", MAP_PERCPU_ARRAY, 1),
        MapLayout::of::<u32, u64>("embryonic_seen", MAP_ARRAY, 1),
        MapLayout::of::<u32, DestConns>("dest_conns", MAP_ARRAY, MAX_DESTS),
        MapLayout::of::<LocalityKey, Locality>("locality", MAP_LRU_HASH, LOCALITY_MAX),
        MapLayout {
            name: "locality_tmp",
            map_type: MAP_PERCPU_ARRAY,
            key_size: 4,
            value_size: locality_scratch_size(),
            max_entries: 1,
        },
        MapLayout::of::<u32, OwnMacTable>(OWN_MACS_MAP, MAP_ARRAY, 1),
        MapLayout::of::<u32, u64>("foreign_frames", MAP_PERCPU_ARRAY, 1),
        // `struct csum_scratch` of bpf/lib/encap.h: the tunnel checksum's
        // per-CPU copy of one chunk of the packet.
        MapLayout::of::<u32, [u8; CSUM_CHUNK]>("tun_csum_tmp", MAP_PERCPU_ARRAY, 1),
        MapLayout::of::<NhKey, u32>("nh_missing", MAP_HASH, NH_MISSING_MAX),
        MapLayout::of::<u32, u64>("nh_missing_full", MAP_PERCPU_ARRAY, 1),
        // FULLNAT (bpf/lib/fnat.h). `fnat_prog` (the tail-call slot) is
        // not shared: each loaded director has its own, holding the
        // xdp_fnat of its object, which uses these pinned maps (it is
        // pinned apart, see TAIL_ARRAYS).
        MapLayout::of::<u32, FnatPool>("fnat_pools", MAP_ARRAY, s),
        // Plain hashes (no eviction: a pair is never taken from a live
        // flow); an older build's LRU ones are migrated into them.
        MapLayout::of::<FnatKey, Fnat>("fnat_rev", MAP_HASH, n),
        MapLayout::of::<FlowKey, FnatKey>("fnat_fwd", MAP_HASH, n),
        MapLayout::of::<NhKey, u32>("fnat_laddrs", MAP_HASH, FNAT_LADDRS_MAX),
        MapLayout::of::<u32, FnatTmp>("fnat_tmp", MAP_PERCPU_ARRAY, 1),
        MapLayout::of::<u32, FnatStats>("fnat_stats", MAP_PERCPU_ARRAY, s),
        MapLayout::of::<u32, u64>("fnat_missed", MAP_PERCPU_ARRAY, 1),
        MapLayout::of::<FnatKey, u64>("fnat_full", MAP_LRU_HASH, FNAT_FULL_MAX),
        // QUIC-LB (bpf/lib/quic_lb.h): a restarted rvsd adopts its services
        // (plane/adopt.rs), so the running program's xdp_quic, its slot
        // pinned too (TAIL_ARRAYS), goes on routing with them meanwhile.
        MapLayout::of::<SvcKey, u32>("quic_services", MAP_HASH, QUIC_SVCS_MAX),
        MapLayout::of::<u32, QuicSvc>("quic_lb", MAP_HASH, QUIC_SVCS_MAX),
        MapLayout::of::<QuicSidKey, u32>("quic_sids", MAP_HASH, QUIC_SIDS_MAX),
        MapLayout::of::<u32, QuicStats>("quic_stats", MAP_PERCPU_ARRAY, s),
        MapLayout::of::<u32, u64>("quic_missed", MAP_PERCPU_ARRAY, 1),
        // DSR by IP option (bpf/lib/dsr_opt.h): the real server handed to
        // the tail-called xdp_dsr_opt (per-CPU scratch; its slot
        // `dsr_prog` is pinned apart, TAIL_ARRAYS).
        MapLayout::of::<u32, Dest>("dsr_tmp", MAP_PERCPU_ARRAY, 1),
        // Client source ranges (bpf/lib/src_range.h) and the per-CPU room
        // for the trie's key.
        MapLayout::of::<SrcKey, u8>("src_ranges", MAP_LPM_TRIE, SRC_RANGES_MAX),
        MapLayout::of::<u32, SrcKey>("src_key_tmp", MAP_PERCPU_ARRAY, 1),
    ]
}

/// `struct locality_scratch` of `bpf/lib/maps.h` (per-CPU scratch, no
/// Rust mirror): the pass (32 bytes), a key, an entry, the members and
/// their flags, 8-byte aligned.
fn locality_scratch_size() -> u32 {
    let n =
        32 + size_of::<maps::LocalityKey>() + size_of::<maps::Locality>() + 5 * maps::LBLCR_SET_MAX;
    n.next_multiple_of(8) as u32
}

/// The kernel's description of the map pinned at `path`; `None` when
/// nothing (or no map) is pinned there.
pub fn pinned_map_info(path: &Path) -> Option<rvs_sys::bpf::MapInfo> {
    use std::os::fd::AsFd as _;
    let fd = rvs_sys::bpf::obj_get(path).ok()?;
    rvs_sys::bpf::map_info(fd.as_fd()).ok()
}

const BPF_NOEXIST: u64 = 1;

/// Copy the entries of map `from` into map `to` (same type and key size;
/// each value cut or zero-extended to `to`'s size, per CPU for per-CPU
/// maps; array indexes beyond `to`'s end are dropped, a full LRU hash
/// evicts as the program's inserts would, a full plain hash takes no more:
/// warned). With `only_absent`, keys
/// `to` has already are left alone (the second pass of a migration: the
/// new program's own updates win). Returns the entries written.
pub fn copy_map(
    name: &'static str,
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    only_absent: bool,
) -> Result<usize, PinError> {
    let err = |why: String| PinError::Migrate { map: name, why };
    let src = rvs_sys::bpf::BpfMap::new(from).map_err(|e| err(e.to_string()))?;
    let dst = rvs_sys::bpf::BpfMap::new(to).map_err(|e| err(e.to_string()))?;
    let (si, di) = (*src.info(), *dst.info());
    if !same_kind(si.map_type, di.map_type) || si.key_size != di.key_size {
        return Err(err(format!(
            "type {} key {} bytes into type {} key {} bytes",
            si.map_type, si.key_size, di.map_type, di.key_size
        )));
    }
    let per_cpu = si.is_per_cpu();
    let convert = |v: &[u8]| -> Vec<u8> {
        if !per_cpu {
            let mut out = vec![0u8; dst.value_len()];
            let n = out.len().min(v.len());
            out[..n].copy_from_slice(&v[..n]);
            return out;
        }
        let (ss, ds) = (
            (si.value_size as usize).next_multiple_of(8),
            (di.value_size as usize).next_multiple_of(8),
        );
        let mut out = vec![0u8; dst.value_len()];
        for (o, i) in out.chunks_exact_mut(ds).zip(v.chunks_exact(ss)) {
            let n = (di.value_size as usize).min(si.value_size as usize);
            o[..n].copy_from_slice(&i[..n]);
        }
        out
    };
    let mut written = 0usize;
    let mut value = vec![0u8; src.value_len()];
    let is_array = matches!(si.map_type, MAP_ARRAY | MAP_PERCPU_ARRAY);
    if is_array {
        for i in 0..si.max_entries.min(di.max_entries) {
            let k = i.to_ne_bytes();
            if !src.lookup(&k, &mut value).map_err(|e| err(e.to_string()))? {
                continue;
            }
            if value.iter().all(|&b| b == 0) {
                continue;
            }
            dst.update(&k, &convert(&value), 0)
                .map_err(|e| err(e.to_string()))?;
            written += 1;
        }
        return Ok(written);
    }
    let mut key: Option<Vec<u8>> = None;
    let mut next = vec![0u8; src.key_len()];
    let flags = if only_absent { BPF_NOEXIST } else { 0 };
    let mut dropped = 0usize;
    loop {
        match src.next_key(key.as_deref(), &mut next) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(err(e.to_string())),
        }
        // An entry deleted (expired, evicted) between the two calls is
        // skipped.
        if src.lookup(&next, &mut value).unwrap_or(false) {
            match dst.update(&next, &convert(&value), flags) {
                Ok(()) => written += 1,
                Err(e) if only_absent && e.raw_os_error() == Some(libc::EEXIST) => {}
                // A plain hash that is full (a smaller table): the rest
                // cannot be carried.
                Err(e) if e.raw_os_error() == Some(libc::E2BIG) => dropped += 1,
                Err(e) => return Err(err(e.to_string())),
            }
        }
        key = Some(next.clone());
    }
    if dropped > 0 {
        tracing::warn!(
            map = name,
            dropped,
            "the new map is full: entries of the pinned one were not carried over"
        );
    }
    Ok(written)
}

/// A director loaded over an instance's pins by [`load_director`].
#[derive(Debug)]
pub struct PinnedDirector {
    /// The loaded object (not attached yet).
    pub director: crate::Loaded,
    /// The instance had maps pinned: the plane adopts them.
    pub adopted: bool,
    /// Maps whose pinned layout differed: the old map (still what the
    /// running program uses) to copy from again after the swap.
    pub migrating: Vec<(&'static str, std::os::fd::OwnedFd)>,
}

/// Load the director over `inst`'s pins: a pinned map with this build's
/// layout is reused; a missing one is created and pinned; one whose
/// layout differs gets a fresh map, filled with a copy of the old one's
/// entries ([`copy_map`]), that [`finish_migration`] pins in its place
/// once the program has been swapped.
pub fn load_director(
    inst: &Instance,
    object: crate::Object,
    opts: &crate::LoadOptions,
) -> Result<PinnedDirector, crate::XdpError> {
    use std::os::fd::AsFd as _;
    use zerocopy::FromBytes as _;
    inst.prepare()?;
    let mut plan = crate::PinPlan::default();
    let mut migrating = Vec::new();
    let mut adopted = false;
    for want in director_maps(opts) {
        let path = inst.map_path(want.name);
        match pinned_map_info(&path) {
            None => plan.maps.push((want.name, path)),
            Some(info) if want.matches(&info) => {
                adopted = true;
                if want.name == crate::own_mac::OWN_MACS_MAP
                    && let Ok(fd) = rvs_sys::bpf::obj_get(&path)
                    && let Ok(m) = rvs_sys::bpf::BpfMap::new(fd.as_fd())
                {
                    let mut v = vec![0u8; m.value_len()];
                    if m.lookup(&0u32.to_ne_bytes(), &mut v).unwrap_or(false) {
                        plan.own_macs = crate::own_mac::OwnMacTable::read_from_bytes(&v).ok();
                    }
                }
                plan.maps.push((want.name, path));
            }
            Some(info) => {
                adopted = true;
                tracing::info!(
                    map = want.name,
                    pinned = ?(info.map_type, info.key_size, info.value_size, info.max_entries),
                    wanted = ?(want.map_type, want.key_size, want.value_size, want.max_entries),
                    "pinned map has another layout: migrating its entries into a new one"
                );
                if want.is_state() && want.can_take(&info) {
                    let fd = rvs_sys::bpf::obj_get(&path).map_err(io("opening", &path))?;
                    migrating.push((want.name, fd));
                } else {
                    if want.is_state() {
                        tracing::warn!(
                            map = want.name,
                            "pinned map's keys differ from this build's: its entries cannot be \
                             carried over"
                        );
                    }
                    // Replaced after the swap, starting empty.
                    let fd = rvs_sys::bpf::obj_get(&path).map_err(io("opening", &path))?;
                    migrating.push((want.name, fd));
                }
            }
        }
    }
    let mut director = crate::Loaded::load_pinned(object, opts, &plan)?;
    for (name, old) in &migrating {
        let want = director_maps(opts).into_iter().find(|m| m.name == *name);
        let Some(want) = want else { continue };
        let Some(info) = rvs_sys::bpf::map_info(old.as_fd()).ok() else {
            continue;
        };
        if want.is_state() && want.can_take(&info) {
            let n = copy_map(name, old.as_fd(), director.map_fd(name)?, false)?;
            tracing::debug!(map = name, entries = n, "migrated (first pass)");
        }
    }
    Ok(PinnedDirector {
        director,
        adopted,
        migrating,
    })
}

/// After the program swap: copy again what the old program added to the
/// migrated hash maps since the first copy (keys the new program has are
/// left alone), then pin the new maps in the old ones' place.
pub fn finish_migration(
    inst: &Instance,
    director: &mut crate::Loaded,
    migrating: Vec<(&'static str, std::os::fd::OwnedFd)>,
    opts: &crate::LoadOptions,
) -> Result<(), crate::XdpError> {
    use std::os::fd::AsFd as _;
    for (name, old) in migrating {
        let want = director_maps(opts).into_iter().find(|m| m.name == name);
        let hash =
            want.is_some_and(|w| w.is_state() && matches!(w.map_type, MAP_HASH | MAP_LRU_HASH));
        if hash
            && let Ok(info) = rvs_sys::bpf::map_info(old.as_fd())
            && want.is_some_and(|w| w.can_take(&info))
        {
            let n = copy_map(name, old.as_fd(), director.map_fd(name)?, true)?;
            tracing::debug!(map = name, entries = n, "migrated (second pass)");
        }
        director.pin_map(name, &inst.map_path(name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under `ip netns exec` (a mount namespace that dies with rvsd) the
    /// host's bpffs is bound in, or rvsd refuses when the host has none; in
    /// the host's namespace one is mounted; unknown, mounted with a warning.
    /// The default flow table fits the machine: 2^20 from 8 GiB up, less
    /// on small machines (a 1 GiB guest), never below 2^12.
    #[test]
    fn default_flow_table_size_follows_memory() {
        const GIB: u64 = 1 << 30;
        let full = crate::maps::MAX_SERVICES;
        assert_eq!(default_flow_table_size(8 * GIB, 2, full), 1 << 20);
        assert_eq!(default_flow_table_size(64 * GIB, 64, full), 1 << 20);
        let small = default_flow_table_size(GIB, 2, default_max_services(GIB, 2));
        assert!((1 << 15..1 << 20).contains(&small), "{small}");
        let opts = |n| crate::LoadOptions {
            flow_table_size: n,
            max_services: default_max_services(GIB, 2),
            ..crate::LoadOptions::default()
        };
        assert!(director_bytes(&opts(small), 2) <= GIB / 8);
        assert!(director_bytes(&opts(small * 2), 2) > GIB / 8);
        assert!(
            director_bytes(&opts(1 << 20), 2) > 512 << 20,
            "the full default is over 512 MiB"
        );
        assert_eq!(default_flow_table_size(0, 1, 1 << 12), 1 << 12);
    }

    /// 65,536 services where their maps take at most a sixteenth of the
    /// memory, fewer (never under 4,096) where they would not; the
    /// figures of the docs.
    #[test]
    fn default_max_services_follows_memory_and_cpus() {
        const GIB: u64 = 1 << 30;
        const MIB: u64 = 1 << 20;
        let bytes = |n, cpus| {
            let opts = crate::LoadOptions {
                max_services: n,
                ..crate::LoadOptions::default()
            };
            service_maps_bytes(&opts, cpus)
        };
        let full = crate::maps::MAX_SERVICES;
        // 200 bytes a service per CPU, about 25.5 MiB besides.
        assert_eq!(bytes(full, 2) - bytes(full, 1), 200 * u64::from(full));
        assert_eq!(bytes(full, 64) / MIB, 825);
        assert_eq!(bytes(full, 128) / MIB, 1625);
        assert_eq!(default_max_services(GIB, 2), full);
        assert_eq!(default_max_services(16 * GIB, 64), full);
        assert_eq!(default_max_services(8 * GIB, 64), full / 2);
        assert_eq!(default_max_services(32 * GIB, 128), full);
        assert_eq!(default_max_services(0, 128), 1 << 12);
        for (mem, cpus) in [(GIB / 2, 2), (4 * GIB, 64), (16 * GIB, 128)] {
            let n = default_max_services(mem, cpus);
            assert!(bytes(n, cpus) <= mem / 16, "{mem} {cpus}: {n}");
            assert!(bytes(n * 2, cpus) > mem / 16, "{mem} {cpus}: {n}");
        }
    }

    #[test]
    fn bpffs_plan_keeps_pins_beyond_a_private_mount_namespace() {
        assert_eq!(bpffs_plan(Some(true), false).ok(), Some(BpffsPlan::Mount));
        assert_eq!(bpffs_plan(Some(true), true).ok(), Some(BpffsPlan::Mount));
        assert_eq!(
            bpffs_plan(Some(false), true).ok(),
            Some(BpffsPlan::BindHost)
        );
        let refused = bpffs_plan(Some(false), false).expect_err("refused");
        assert!(refused.to_string().contains("nsenter --net"), "{refused}");
        assert_eq!(bpffs_plan(None, false).ok(), Some(BpffsPlan::MountUnsure));
    }

    fn info(map_type: u32, layout: &MapLayout) -> rvs_sys::bpf::MapInfo {
        rvs_sys::bpf::MapInfo {
            map_type,
            id: 1,
            key_size: layout.key_size,
            value_size: layout.value_size,
            max_entries: layout.max_entries,
            map_flags: 0,
        }
    }

    /// `fnat_rev` and `fnat_fwd` are plain hashes now: an older build's
    /// pinned LRU ones are migrated (their entries copied), not reused;
    /// a map of another kind is not taken.
    #[test]
    fn fnat_translations_pinned_as_lru_are_migrated_into_plain_hashes() {
        let maps = director_maps(&crate::LoadOptions::default());
        for name in ["fnat_rev", "fnat_fwd"] {
            let want = maps.iter().find(|m| m.name == name).expect(name);
            assert_eq!(want.map_type, MAP_HASH, "{name}");
            let old = info(MAP_LRU_HASH, want);
            assert!(
                !want.matches(&old),
                "{name}: an LRU pin is not reused as is"
            );
            assert!(
                want.is_state() && want.can_take(&old),
                "{name}: entries carried"
            );
            assert!(!want.can_take(&info(MAP_ARRAY, want)), "{name}");
            assert!(want.matches(&info(MAP_HASH, want)));
        }
    }
}
