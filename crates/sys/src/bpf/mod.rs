//! BPF: loading objects, programs and maps, the one place of rvs that does.
//!
//! - [`Loader`] / [`Object`]: an ELF object parsed, its maps created
//!   (pinned where asked, sized, globals set); its [`Program`]s as
//!   [`Xdp`] (attach in a [`XdpMode`], through a pinnable [`Link`], link
//!   update, `BPF_PROG_TEST_RUN`), tc [`SchedClassifier`]s (a pinnable
//!   TCX [`Link`] on a [`TcHook`], `BPF_PROG_TEST_RUN`) or [`Cgroup`]
//!   programs; its [`Map`]s as
//!   typed [`Array`], [`PerCpuArray`], [`HashMap`] and [`ProgramArray`]
//!   views over [`Pod`] keys and values; [`PinnedMap`] for a map another
//!   process pinned; [`KernelVersion`]; one [`Error`].
//! - [`probe`]: which of a program's kernel features the running kernel
//!   lacks, asked after a load failed, to name them.
//! - run-time statistics: [`RunTimeStats`] (`BPF_ENABLE_STATS`) and each
//!   loaded program's `run_time_ns` / `run_cnt` ([`program_stats`]).
//! - byte-level bpf(2) calls on the file descriptors of programs and maps:
//!   map element operations (lookup, update, delete, key walk),
//!   `BPF_MAP_LOOKUP_BATCH`, per-CPU value sizes and
//!   `BPF_OBJ_GET_INFO_BY_FD` (aya 0.14 wraps neither the batch nor the
//!   program's translated instructions, and its typed maps need an
//!   `unsafe impl Pod` per type).
//!
//! aya does the ELF, BTF, relocation and attach work inside this module; no
//! aya type appears in its API, so the crates above depend on rvs-sys only.
//! Every buffer passed to the byte-level calls is checked against the sizes
//! the kernel reports for the map ([`BpfMap::new`] asks it), so a wrong
//! length is an `InvalidInput` error, never an out-of-bounds kernel write.

mod error;
mod map;
mod object;
pub mod probe;
mod program;
mod stats;

pub use error::Error;
pub use map::{Array, HashMap, LpmTrie, Map, PerCpuArray, PinnedMap, Pod, ProgramArray};
pub use object::{KernelVersion, Loader, Object, loaded_program_tag};
pub use program::{Cgroup, Link, Program, SchedClassifier, TcHook, TestRunOutput, Xdp, XdpMode};
pub use stats::{ProgramStats, RunTimeStats, program_stats};

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_MAP_TYPE_LRU_PERCPU_HASH: u32 = 10;
const BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE: u32 = 21;

/// Size of a [`BatchToken`]: the kernel's batch position is the bucket
/// index for hash maps and a key for arrays; maps with larger keys cannot
/// be read in batches here.
pub const BATCH_TOKEN: usize = 64;

/// Where a batched read of a map stands (opaque, map-specific bytes).
pub type BatchToken = [u8; BATCH_TOKEN];

/// `bpf(cmd, attr, sizeof attr)`.
///
/// # Safety
/// `attr` must be the attribute struct of `cmd`, and every pointer in it
/// must point at a live buffer at least as large as the kernel will read
/// or write for that command on that object.
unsafe fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: the caller guarantees `attr` is `cmd`'s attribute struct
    // with valid pointers; its size is passed so the kernel copies exactly
    // that struct.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `union bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The head of `struct bpf_map_info` (the kernel fills what fits).
#[repr(C)]
#[derive(Default)]
struct MapInfoHead {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

/// The head of `struct bpf_prog_info` (the kernel fills what fits).
#[repr(C)]
#[derive(Default)]
struct ProgInfoHead {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
}

fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    // An open descriptor is never negative.
    fd.as_raw_fd() as u32
}

/// What the kernel says about a map.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MapInfo {
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// The kernel's id of the map.
    pub id: u32,
    /// Bytes of a key.
    pub key_size: u32,
    /// Bytes of a value (of one CPU's value for per-CPU maps).
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
    /// `BPF_F_*` creation flags.
    pub map_flags: u32,
}

impl MapInfo {
    /// Whether values are per CPU (a lookup returns one per possible CPU).
    pub fn is_per_cpu(&self) -> bool {
        matches!(
            self.map_type,
            BPF_MAP_TYPE_PERCPU_HASH
                | BPF_MAP_TYPE_PERCPU_ARRAY
                | BPF_MAP_TYPE_LRU_PERCPU_HASH
                | BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE
        )
    }
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a map.
pub fn map_info(fd: BorrowedFd<'_>) -> io::Result<MapInfo> {
    MAP_INFO_QUERIES.fetch_add(1, Ordering::Relaxed);
    let mut head = MapInfoHead::default();
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(fd),
        info_len: size_of::<MapInfoHead>() as u32,
        info: std::ptr::from_mut(&mut head) as u64,
    };
    // SAFETY: `attr.info` points at `head`, a live struct of `info_len`
    // bytes the kernel may write.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(MapInfo {
        map_type: head.map_type,
        id: head.id,
        key_size: head.key_size,
        value_size: head.value_size,
        max_entries: head.max_entries,
        map_flags: head.map_flags,
    })
}

/// [`map_info`] calls so far, for [`map_info_queries`].
static MAP_INFO_QUERIES: AtomicU64 = AtomicU64::new(0);

/// How many times this process has asked the kernel for a map's info
/// ([`map_info`], `BPF_OBJ_GET_INFO_BY_FD`; [`BpfMap::new`] does): tests
/// check with it that a plane builds its map handles once, not per write.
pub fn map_info_queries() -> u64 {
    MAP_INFO_QUERIES.load(Ordering::Relaxed)
}

/// `union bpf_attr` for `BPF_OBJ_GET`.
#[repr(C)]
#[derive(Default)]
struct ObjGetAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
    path_fd: i32,
    pad: u32,
}

/// `BPF_OBJ_GET`: open the object (map, program or link) pinned at `path`
/// on a bpffs.
pub fn obj_get(path: &std::path::Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| invalid(format!("{}: a NUL in the path", path.display())))?;
    let mut attr = ObjGetAttr {
        pathname: c.as_ptr() as u64,
        ..ObjGetAttr::default()
    };
    // SAFETY: `attr.pathname` points at `c`, a NUL-terminated string that
    // outlives the call; the kernel only reads it.
    let fd = unsafe { bpf(BPF_OBJ_GET, &mut attr) }?;
    // SAFETY: on success BPF_OBJ_GET returns a new descriptor this process
    // owns and nothing else refers to.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `struct bpf_link_info` up to its XDP member (the kernel fills what
/// fits): type, ids, and the union whose `xdp.ifindex` is at offset 16.
#[repr(C)]
#[derive(Default)]
struct LinkInfoHead {
    link_type: u32,
    id: u32,
    prog_id: u32,
    pad: u32,
    /// First word of the union: `xdp.ifindex` for XDP links.
    union0: u32,
    union1: u32,
}

/// `BPF_LINK_TYPE_XDP`.
pub const BPF_LINK_TYPE_XDP: u32 = 6;

/// What the kernel says about a BPF link.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// `BPF_LINK_TYPE_*` ([`BPF_LINK_TYPE_XDP`] for XDP).
    pub link_type: u32,
    /// The link's id.
    pub id: u32,
    /// The id of the program it runs.
    pub prog_id: u32,
    /// XDP links: the interface it is attached to, 0 once that interface
    /// is gone (the link is then defunct). Other links: 0.
    pub xdp_ifindex: u32,
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a link (aya 0.14's `LinkInfo` has no
/// interface index, which tells a live XDP link from a defunct one).
pub fn link_info(fd: BorrowedFd<'_>) -> io::Result<LinkInfo> {
    let mut head = LinkInfoHead::default();
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(fd),
        info_len: size_of::<LinkInfoHead>() as u32,
        info: std::ptr::from_mut(&mut head) as u64,
    };
    // SAFETY: `attr.info` points at `head`, a live struct of `info_len`
    // bytes the kernel may write.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(LinkInfo {
        link_type: head.link_type,
        id: head.id,
        prog_id: head.prog_id,
        xdp_ifindex: if head.link_type == BPF_LINK_TYPE_XDP {
            head.union0
        } else {
            0
        },
    })
}

/// The tag of a loaded program (`bpf_prog_info.tag`: a hash of its
/// instructions as loaded, map references left out, so the same program
/// loaded twice has the same tag).
pub fn prog_tag(fd: BorrowedFd<'_>) -> io::Result<[u8; 8]> {
    let mut head = ProgInfoHead::default();
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(fd),
        info_len: size_of::<ProgInfoHead>() as u32,
        info: std::ptr::from_mut(&mut head) as u64,
    };
    // SAFETY: `attr.info` points at `head`, a live struct of `info_len`
    // bytes the kernel may write; its instruction pointers are zero, so
    // the kernel copies no instructions.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(head.tag)
}

/// The program as the verifier rewrote it: its "xlated" instructions, 8
/// bytes each (`BPF_OBJ_GET_INFO_BY_FD`). Call targets are only given to a
/// caller allowed to see kernel addresses (root); otherwise they read as 0.
pub fn prog_xlated_insns(fd: BorrowedFd<'_>) -> io::Result<Vec<[u8; 8]>> {
    let call = |info: &mut ProgInfoHead| -> io::Result<()> {
        let mut attr = InfoAttr {
            bpf_fd: fd_u32(fd),
            info_len: size_of::<ProgInfoHead>() as u32,
            info: std::ptr::from_mut(info) as u64,
        };
        // SAFETY: `attr` points at `info`, a live `ProgInfoHead` of
        // `info_len` bytes the kernel may write; its `xlated_prog_insns`,
        // when set, points at a buffer of `xlated_prog_len` bytes that
        // outlives the call (the kernel writes at most that many).
        unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }.map(drop)
    };
    let mut head = ProgInfoHead::default();
    call(&mut head)?;
    let mut insns = vec![[0u8; 8]; head.xlated_prog_len as usize / 8];
    let mut info = ProgInfoHead {
        xlated_prog_len: (insns.len() * 8) as u32,
        xlated_prog_insns: insns.as_mut_ptr() as u64,
        ..ProgInfoHead::default()
    };
    call(&mut info)?;
    insns.truncate(info.xlated_prog_len as usize / 8);
    Ok(insns)
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`): the
/// number of values a per-CPU map holds per key.
pub fn possible_cpus() -> io::Result<usize> {
    static CPUS: OnceLock<usize> = OnceLock::new();
    if let Some(n) = CPUS.get() {
        return Ok(*n);
    }
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let n = parse_cpu_list(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unreadable possible CPU list {text:?}"),
        )
    })?;
    Ok(*CPUS.get_or_init(|| n))
}

/// The highest CPU of a list like `0-3,8-11` plus one.
fn parse_cpu_list(text: &str) -> Option<usize> {
    let mut max = None;
    for part in text.trim().split(',') {
        let last = part.rsplit('-').next()?;
        let n: usize = last.trim().parse().ok()?;
        max = Some(max.map_or(n, |m: usize| m.max(n)));
    }
    max.map(|m| m + 1)
}

/// `union bpf_attr` for the element commands.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_MAP_LOOKUP_BATCH`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// One batch of a map read by [`BpfMap::lookup_batch`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Entries stored at the start of the key and value buffers.
    pub count: usize,
    /// The whole map has been read (the kernel's `ENOENT`): `count` may
    /// still be non-zero.
    pub end: bool,
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// A map handle that owns its descriptor (a duplicate of the one it was
/// opened from) and the sizes the kernel reported, asked once at
/// [`OwnedBpfMap::new`]: each element call made through
/// [`OwnedBpfMap::map`] is then one `bpf()` syscall, where building a
/// [`BpfMap`] per call costs a `BPF_OBJ_GET_INFO_BY_FD` more. For a worker
/// that writes a map many times and cannot keep a [`BpfMap`] borrowing the
/// object it is kept beside (the sock plane's).
#[derive(Debug)]
pub struct OwnedBpfMap {
    fd: OwnedFd,
    info: MapInfo,
    value_len: usize,
}

impl OwnedBpfMap {
    /// Ask the kernel for the map's sizes and keep a duplicate of `fd`.
    pub fn new(fd: BorrowedFd<'_>) -> io::Result<Self> {
        let m = BpfMap::new(fd)?;
        Ok(OwnedBpfMap {
            fd: fd.try_clone_to_owned()?,
            info: m.info,
            value_len: m.value_len,
        })
    }

    /// The handle, with the sizes asked at [`OwnedBpfMap::new`] (no
    /// syscall).
    pub fn map(&self) -> BpfMap<'_> {
        BpfMap {
            fd: self.fd.as_fd(),
            info: self.info,
            value_len: self.value_len,
        }
    }
}

/// A map file descriptor with the sizes the kernel reported for it.
#[derive(Debug, Clone, Copy)]
pub struct BpfMap<'fd> {
    fd: BorrowedFd<'fd>,
    info: MapInfo,
    value_len: usize,
}

impl<'fd> BpfMap<'fd> {
    /// Ask the kernel for the map's sizes.
    pub fn new(fd: BorrowedFd<'fd>) -> io::Result<Self> {
        let info = map_info(fd)?;
        let value_len = if info.is_per_cpu() {
            (info.value_size as usize).next_multiple_of(8) * possible_cpus()?
        } else {
            info.value_size as usize
        };
        Ok(BpfMap {
            fd,
            info,
            value_len,
        })
    }

    /// The map's info.
    pub fn info(&self) -> &MapInfo {
        &self.info
    }

    /// Bytes of a key.
    pub fn key_len(&self) -> usize {
        self.info.key_size as usize
    }

    /// Bytes of the value of one key as lookups return it: `value_size`,
    /// or for per-CPU maps one 8-byte aligned value per possible CPU.
    pub fn value_len(&self) -> usize {
        self.value_len
    }

    fn check(&self, key: usize, value: Option<usize>) -> io::Result<()> {
        if key != self.key_len() {
            return Err(invalid(format!(
                "BPF map {}: key of {key} bytes, the map's are {}",
                self.info.id,
                self.key_len()
            )));
        }
        if let Some(v) = value
            && v != self.value_len
        {
            return Err(invalid(format!(
                "BPF map {}: value of {v} bytes, the map's are {}",
                self.info.id, self.value_len
            )));
        }
        Ok(())
    }

    /// `BPF_MAP_LOOKUP_ELEM`: fill `value` (of [`BpfMap::value_len`]
    /// bytes); `false` when the key is not there.
    pub fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
        self.check(key.len(), Some(value.len()))?;
        let mut attr = ElemAttr {
            map_fd: fd_u32(self.fd),
            key: key.as_ptr() as u64,
            value: value.as_mut_ptr() as u64,
            ..ElemAttr::default()
        };
        // SAFETY: `key` and `value` are live buffers of exactly the map's
        // key size and lookup value size (checked above); the kernel reads
        // the key and writes at most the value.
        match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `BPF_MAP_UPDATE_ELEM` with `flags` (`BPF_ANY` = 0, `BPF_NOEXIST`,
    /// `BPF_EXIST`).
    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
        self.check(key.len(), Some(value.len()))?;
        let mut attr = ElemAttr {
            map_fd: fd_u32(self.fd),
            key: key.as_ptr() as u64,
            value: value.as_ptr() as u64,
            flags,
            ..ElemAttr::default()
        };
        // SAFETY: `key` and `value` are live buffers of exactly the map's
        // sizes (checked above), only read by the kernel.
        unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
    }

    /// `BPF_MAP_DELETE_ELEM`; `false` when the key was not there.
    pub fn delete(&self, key: &[u8]) -> io::Result<bool> {
        self.check(key.len(), None)?;
        let mut attr = ElemAttr {
            map_fd: fd_u32(self.fd),
            key: key.as_ptr() as u64,
            ..ElemAttr::default()
        };
        // SAFETY: `key` is a live buffer of the map's key size (checked
        // above), only read by the kernel.
        match unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut attr) } {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `BPF_MAP_GET_NEXT_KEY`: the key after `key` (`None`: the first)
    /// into `next`; `false` after the last key.
    pub fn next_key(&self, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
        self.check(next.len(), None)?;
        if let Some(k) = key {
            self.check(k.len(), None)?;
        }
        let mut attr = ElemAttr {
            map_fd: fd_u32(self.fd),
            key: key.map_or(0, |k| k.as_ptr() as u64),
            value: next.as_mut_ptr() as u64,
            ..ElemAttr::default()
        };
        // SAFETY: `key` (when given) and `next` are live buffers of the
        // map's key size (checked above); the kernel reads the first and
        // writes the second.
        match unsafe { bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) } {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One `BPF_MAP_LOOKUP_BATCH`: up to as many entries as `keys` holds
    /// keys (and `values` values of [`BpfMap::value_len`] bytes), from
    /// `token_in` (`None`: the start); the position after them is written
    /// to `token_out`. `EINVAL` from kernels or map types without batch
    /// lookups.
    pub fn lookup_batch(
        &self,
        token_in: Option<&BatchToken>,
        token_out: &mut BatchToken,
        keys: &mut [u8],
        values: &mut [u8],
    ) -> io::Result<Batch> {
        let (klen, vlen) = (self.key_len(), self.value_len);
        if klen == 0 || vlen == 0 || klen > BATCH_TOKEN {
            return Err(invalid(format!(
                "BPF map {}: no batch reads of {klen}-byte keys",
                self.info.id
            )));
        }
        if !keys.len().is_multiple_of(klen) || !values.len().is_multiple_of(vlen) {
            return Err(invalid(format!(
                "BPF map {}: batch buffers are not whole keys / values",
                self.info.id
            )));
        }
        let count = (keys.len() / klen).min(values.len() / vlen);
        let mut attr = BatchAttr {
            in_batch: token_in.map_or(0, |t| t.as_ptr() as u64),
            out_batch: token_out.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: u32::try_from(count).map_err(|_| invalid("batch too large".into()))?,
            map_fd: fd_u32(self.fd),
            ..BatchAttr::default()
        };
        // SAFETY: `keys` and `values` hold `count` whole keys and values of
        // the map's sizes (checked above) and live across the call; the
        // tokens are BATCH_TOKEN bytes, at least a key (checked) and more
        // than a hash map's bucket index. The kernel writes at most `count`
        // entries and updates `count`.
        let r = unsafe { bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) };
        let got = (attr.count as usize).min(count);
        match r {
            Ok(_) => Ok(Batch {
                count: got,
                end: false,
            }),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Batch {
                count: got,
                end: true,
            }),
            Err(e) => Err(e),
        }
    }
    /// One `BPF_MAP_UPDATE_BATCH`: every entry of `keys` and `values`
    /// (whole keys and values of the map's sizes, as many of each) written
    /// with `elem_flags` (`BPF_ANY` = 0, ...) in one system call. On an
    /// error some entries may have been written; a caller that falls back
    /// to [`BpfMap::update`] writes them all again. `EINVAL` from kernels
    /// or map types without batch updates (arrays and hashes have them
    /// from 5.6 on).
    pub fn update_batch(&self, keys: &[u8], values: &[u8], elem_flags: u64) -> io::Result<()> {
        let (klen, vlen) = (self.key_len(), self.value_len);
        if klen == 0 || vlen == 0 {
            return Err(invalid(format!(
                "BPF map {}: no batch writes of {klen}-byte keys",
                self.info.id
            )));
        }
        let count = keys.len() / klen;
        if !keys.len().is_multiple_of(klen) || values.len() != count * vlen {
            return Err(invalid(format!(
                "BPF map {}: batch buffers are not as many whole keys as values",
                self.info.id
            )));
        }
        if count == 0 {
            return Ok(());
        }
        let mut attr = BatchAttr {
            keys: keys.as_ptr() as u64,
            values: values.as_ptr() as u64,
            count: u32::try_from(count).map_err(|_| invalid("batch too large".into()))?,
            map_fd: fd_u32(self.fd),
            elem_flags,
            ..BatchAttr::default()
        };
        // SAFETY: `keys` and `values` hold exactly `count` whole keys and
        // values of the map's sizes (checked above) and live across the
        // call; the kernel only reads them (and writes `attr.count`).
        unsafe { bpf(BPF_MAP_UPDATE_BATCH, &mut attr) }.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0\n"), Some(1));
        assert_eq!(parse_cpu_list("0-3\n"), Some(4));
        assert_eq!(parse_cpu_list("0-3,8-11"), Some(12));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert!(possible_cpus().unwrap() >= 1);
    }

    #[test]
    fn not_a_bpf_object_is_an_error() {
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        assert!(map_info(f.as_fd()).is_err());
        assert!(prog_xlated_insns(f.as_fd()).is_err());
    }

    /// `BPF_MAP_CREATE` for the tests (production maps come from an
    /// [`Object`]); `None` after [`rvs_testbed::skip_or_fail`] for `test`
    /// when refused.
    pub(super) fn create(
        test: &str,
        map_type: u32,
        key: u32,
        value: u32,
        max: u32,
    ) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        #[repr(C)]
        #[derive(Default)]
        struct CreateAttr {
            map_type: u32,
            key_size: u32,
            value_size: u32,
            max_entries: u32,
            map_flags: u32,
        }
        let mut attr = CreateAttr {
            map_type,
            key_size: key,
            value_size: value,
            max_entries: max,
            map_flags: 0,
        };
        // SAFETY: BPF_MAP_CREATE (0) reads this attribute struct only.
        match unsafe { bpf(0, &mut attr) } {
            // SAFETY: a fresh descriptor the kernel returned, owned by no one else.
            Ok(fd) => Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }),
            Err(e) => {
                rvs_testbed::skip_or_fail(
                    test,
                    format!("BPF_MAP_CREATE failed ({e}): needs root / CAP_BPF"),
                );
                None
            }
        }
    }

    /// An owned handle asks for the map's info once and works on after the
    /// descriptor it was opened from is closed (it holds a duplicate).
    #[test]
    fn an_owned_handle_asks_once_and_outlives_its_source() {
        use std::os::fd::AsFd;
        const HASH: u32 = 1;
        let test = "an_owned_handle_asks_once_and_outlives_its_source";
        let Some(fd) = create(test, HASH, 4, 8, 16) else {
            return;
        };
        let before = map_info_queries();
        let owned = OwnedBpfMap::new(fd.as_fd()).unwrap();
        drop(fd);
        for k in 0u32..10 {
            owned
                .map()
                .update(&k.to_ne_bytes(), &u64::from(k).to_ne_bytes(), 0)
                .unwrap();
        }
        let mut v = [0u8; 8];
        assert!(owned.map().lookup(&3u32.to_ne_bytes(), &mut v).unwrap());
        assert_eq!(u64::from_ne_bytes(v), 3);
        // Other tests of this binary may ask meanwhile: at least ours.
        assert!(map_info_queries() > before);
    }

    #[test]
    fn hash_elements_keys_and_batches() {
        use std::os::fd::AsFd;
        const HASH: u32 = 1;
        let Some(fd) = create("hash_elements_keys_and_batches", HASH, 4, 8, 1024) else {
            return;
        };
        let m = BpfMap::new(fd.as_fd()).unwrap();
        assert_eq!((m.key_len(), m.value_len()), (4, 8));
        assert!(!m.info().is_per_cpu());
        for k in 0u32..1000 {
            m.update(&k.to_ne_bytes(), &u64::from(k * 3).to_ne_bytes(), 0)
                .unwrap();
        }
        let mut v = [0u8; 8];
        assert!(m.lookup(&7u32.to_ne_bytes(), &mut v).unwrap());
        assert_eq!(u64::from_ne_bytes(v), 21);
        assert!(!m.lookup(&5000u32.to_ne_bytes(), &mut v).unwrap());
        assert!(m.delete(&7u32.to_ne_bytes()).unwrap());
        assert!(!m.delete(&7u32.to_ne_bytes()).unwrap());
        assert_eq!(
            m.lookup(&[0u8; 3], &mut v).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            m.update(&[0u8; 4], &[0u8; 4], 0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // The key walk sees every key once.
        let mut seen = 0;
        let mut key = None;
        let mut next = [0u8; 4];
        while m
            .next_key(key.as_ref().map(|k: &[u8; 4]| &k[..]), &mut next)
            .unwrap()
        {
            seen += 1;
            key = Some(next);
        }
        assert_eq!(seen, 999);
        // Batches of 64 until the end; every entry once, with its value.
        let (mut keys, mut values) = (vec![0u8; 64 * 4], vec![0u8; 64 * 8]);
        let mut token = [0u8; BATCH_TOKEN];
        let mut out = [0u8; BATCH_TOKEN];
        let mut first = true;
        let mut got = std::collections::HashMap::new();
        loop {
            let b = match m.lookup_batch(
                (!first).then_some(&token),
                &mut out,
                &mut keys,
                &mut values,
            ) {
                Ok(b) => b,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    rvs_testbed::skip_or_fail(
                        "hash_elements_keys_and_batches",
                        "the kernel has no batch lookups (BPF_MAP_LOOKUP_BATCH: EINVAL)",
                    );
                    return;
                }
                Err(e) => panic!("{e}"),
            };
            for i in 0..b.count {
                let k = u32::from_ne_bytes(keys[i * 4..i * 4 + 4].try_into().unwrap());
                let v = u64::from_ne_bytes(values[i * 8..i * 8 + 8].try_into().unwrap());
                assert!(got.insert(k, v).is_none(), "key {k} twice");
            }
            if b.end {
                break;
            }
            token = out;
            first = false;
        }
        assert_eq!(got.len(), 999);
        assert!(got.iter().all(|(k, v)| u64::from(*k) * 3 == *v));
    }

    #[test]
    fn per_cpu_values_are_one_per_possible_cpu() {
        use std::os::fd::AsFd;
        const PERCPU_ARRAY: u32 = 6;
        let Some(fd) = create(
            "per_cpu_values_are_one_per_possible_cpu",
            PERCPU_ARRAY,
            4,
            12,
            4,
        ) else {
            return;
        };
        let m = BpfMap::new(fd.as_fd()).unwrap();
        let cpus = possible_cpus().unwrap();
        assert!(m.info().is_per_cpu());
        assert_eq!(m.value_len(), 16 * cpus, "12 bytes rounded to 8, per CPU");
        let mut v = vec![0u8; m.value_len()];
        for c in 0..cpus {
            v[c * 16] = c as u8 + 1;
        }
        m.update(&1u32.to_ne_bytes(), &v, 0).unwrap();
        let mut back = vec![0u8; m.value_len()];
        assert!(m.lookup(&1u32.to_ne_bytes(), &mut back).unwrap());
        assert_eq!(back, v);
    }
}
