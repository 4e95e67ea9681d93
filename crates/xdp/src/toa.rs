//! The real server's TOA reader `bpf/toa.c`: unmodified programs see the
//! client address a FULLNAT director carried in the TCP option TOA (kind
//! 254, see `rvs_wire::toa`), with no kernel module. Three cgroup (v2)
//! programs: a sock_ops program that reads the option from the handshake
//! (the ACK that ends it, or the SYN, which it has the kernel save) into the
//! socket's storage, and getpeername4/getpeername6 programs that return it
//! — accept(2)'s peer address comes through the same hook.
//!
//! Attached like the decapsulator: [`ToaReader::attach`] through BPF links
//! owned by the value (detached on drop), or [`ToaReader::attach_pinned`],
//! whose links are pinned under [`PIN_ROOT`] so they outlive the process
//! (a one-shot `rvsd realserver --toa`); [`detach_pinned`] removes them.
//!
//! `ToaTestWriter` (feature `test-fixtures`) is the tests' client side: it
//! writes a TOA into the SYNs of its cgroup's sockets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use rvs_sys::bpf::{Cgroup, Error as BpfError, KernelVersion, Link, Loader, Object, PinnedMap};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::XdpError;
use crate::bpf::{self, embedded_object, map_err, prog_err};
use crate::pin::{self, PinError};

/// `struct rvs_toa_addr` of bpf/toa.h: a connection's TOA address (the
/// reader's sk_storage value) and the test writer's configuration.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ToaAddr {
    /// `AF_INET` or `AF_INET6`; 0: none.
    pub family: u8,
    /// Zero.
    pub pad0: u8,
    /// The port, network order.
    pub port: u16,
    /// The address, network order; IPv4 in the first 4 bytes.
    pub addr: [u8; 16],
}

const _: () = assert!(size_of::<ToaAddr>() == 20);

impl ToaAddr {
    /// The value for `client`.
    pub fn new(client: SocketAddr) -> Self {
        ToaAddr {
            family: crate::maps::family(client.ip()),
            pad0: 0,
            port: client.port().to_be(),
            addr: crate::maps::addr16(client.ip()),
        }
    }

    /// The address it holds (`None` for family 0 or an unknown one).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        let port = u16::from_be(self.port);
        let ip = match self.family {
            2 => IpAddr::V4(Ipv4Addr::new(
                self.addr[0],
                self.addr[1],
                self.addr[2],
                self.addr[3],
            )),
            10 => IpAddr::V6(Ipv6Addr::from(self.addr)),
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    }
}

bpf::counters! {
    /// Indexes of the reader's `toa_stats` counters (`RVS_TOA_*` of bpf/toa.h).
    pub mod stat;
    /// The reader's counters, summed over CPUs.
    pub struct ToaStats {
        /// A TOA read from the ACK that ended the handshake.
        FROM_ACK = 0 => from_ack,
        /// A TOA read from the saved SYN.
        FROM_SYN = 1 => from_syn,
        /// A passive connection without a TOA.
        NONE = 2 => none,
        /// Kind 254 of a length other than 8 or 20, or malformed options.
        BAD = 3 => bad,
        /// An IPv4 TOA returned v4-mapped on an IPv6 socket.
        MAPPED = 4 => mapped,
        /// An IPv6 TOA asked for through an IPv4 socket (not returned).
        V6_ON_V4 = 5 => v6_on_v4,
    }
}

/// Where [`ToaReader::attach_pinned`] pins, one directory per cgroup (named
/// by the cgroup directory's inode number).
pub const PIN_ROOT: &str = "/sys/fs/bpf/rvs/toa";

/// The default cgroup: the cgroup v2 root as this machine mounts it (the
/// hybrid layout's `unified`), else the plain v2 mount.
pub fn default_cgroup() -> PathBuf {
    let hybrid = Path::new("/sys/fs/cgroup/unified");
    if is_cgroup2(hybrid) {
        hybrid.to_owned()
    } else {
        PathBuf::from("/sys/fs/cgroup")
    }
}

const SOCKOPS: &str = "rvs_toa_sockops";
const PEER4: &str = "rvs_toa_getpeername4";
const PEER6: &str = "rvs_toa_getpeername6";
/// The pinned links (file names) and the programs behind them.
const LINKS: [(&str, &str); 3] = [
    ("sockops", SOCKOPS),
    ("getpeername4", PEER4),
    ("getpeername6", PEER6),
];
const STATS_PIN: &str = "toa_stats";

/// Errors of the TOA reader.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToaError {
    /// Loading, a map or a program failed.
    #[error(transparent)]
    Bpf(#[from] XdpError),
    /// This kernel cannot run the reader.
    #[error("TOA without a kernel module needs {0}")]
    Unsupported(String),
    /// The path is not a cgroup v2 directory.
    #[error("{}: not a cgroup v2 directory (mount cgroup2, or give --cgroup PATH)", .0.display())]
    NotCgroup2(PathBuf),
    /// A file operation (the cgroup, bpffs) failed.
    #[error(transparent)]
    Io(#[from] PinError),
}

fn is_cgroup2(p: &Path) -> bool {
    nix::sys::statfs::statfs(p)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
}

/// The directory the pins of `cgroup` live in.
pub fn pin_dir(cgroup: &Path) -> Result<PathBuf, ToaError> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(cgroup)
        .map_err(pin::io("reading", cgroup))?
        .ino();
    Ok(Path::new(PIN_ROOT).join(ino.to_string()))
}

/// Whether the reader is attached to `cgroup` with pinned links (all
/// three present).
pub fn is_pinned(cgroup: &Path) -> Result<bool, ToaError> {
    let dir = pin_dir(cgroup)?;
    Ok(LINKS.iter().all(|(f, _)| dir.join(f).exists()))
}

/// Detach the reader attached with [`ToaReader::attach_pinned`] from
/// `cgroup`: remove its pins (the links go with the last reference).
/// Returns whether anything was there.
pub fn detach_pinned(cgroup: &Path) -> Result<bool, ToaError> {
    let files = LINKS.iter().map(|(f, _)| *f).chain([STATS_PIN]);
    Ok(pin::remove_pins(&pin_dir(cgroup)?, files, PIN_ROOT)?)
}

/// The counters of the reader pinned on `cgroup` (`None` when none is).
pub fn pinned_stats(cgroup: &Path) -> Result<Option<ToaStats>, ToaError> {
    let p = pin_dir(cgroup)?.join(STATS_PIN);
    if !p.exists() {
        return Ok(None);
    }
    let pinned = PinnedMap::open(&p).map_err(map_err("toa_stats"))?;
    ToaStats::read(pinned.map(), "toa_stats")
        .map(Some)
        .map_err(ToaError::from)
}

/// The reader object's bytes (for BTF checks).
pub fn object() -> Result<&'static [u8], XdpError> {
    embedded_object!("toa.o")
}

/// What the kernel needs, checked before loading so an old kernel gets the
/// reason rather than a verifier log: the cgroup getpeername hooks (5.8)
/// and TCP header options in sock_ops with TCP_BPF_SYN (5.10).
pub fn probe() -> Result<(), ToaError> {
    match KernelVersion::current() {
        Ok(v) if v < KernelVersion::new(5, 10, 0) => Err(ToaError::Unsupported(format!(
            "Linux 5.10 or later (sock_ops TCP header options and TCP_BPF_SYN since 5.10, cgroup getpeername hooks since 5.8); this kernel is {v}"
        ))),
        _ => Ok(()),
    }
}

/// Turn a load/attach failure on a kernel that lacks a hook into
/// [`ToaError::Unsupported`] naming it.
fn unsupported(program: &'static str, what: &'static str) -> impl Fn(BpfError) -> ToaError {
    move |e| {
        let hook = match program {
            SOCKOPS => "the cgroup sock_ops hook with sk_storage (BPF_PROG_TYPE_SOCK_OPS)",
            _ => "the cgroup getpeername hooks (BPF_CGROUP_INET4/6_GETPEERNAME)",
        };
        match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
                ToaError::Unsupported(format!("{hook}, which this kernel refused ({what}: {e})"))
            }
            _ => ToaError::Bpf(prog_err(program, what)(e)),
        }
    }
}

/// A link that is not a BPF link (the kernel predates them: 5.7).
fn link_err(program: &'static str, e: String) -> ToaError {
    ToaError::Unsupported(format!(
        "BPF links (Linux 5.7) to pin `{program}` to the cgroup: {e}"
    ))
}

/// The TOA reader loaded into the kernel (verified), not yet attached.
#[derive(Debug)]
pub struct ToaReader {
    ebpf: Object,
    /// The links of [`ToaReader::attach`]: held here, so the programs stay
    /// attached until this value is dropped.
    links: Vec<Link>,
}

impl ToaReader {
    /// Load the object and its three programs (the verifier runs here).
    /// Refused with the reason on a kernel without the hooks.
    pub fn load() -> Result<Self, ToaError> {
        probe()?;
        let ebpf = bpf::load("toa", &mut Loader::new(), object()?)?;
        let mut me = ToaReader {
            ebpf,
            links: Vec::new(),
        };
        me.sockops()?
            .load()
            .map_err(unsupported(SOCKOPS, "load (verifier)"))?;
        for p in [PEER4, PEER6] {
            me.peer(p)?
                .load()
                .map_err(unsupported(p, "load (verifier)"))?;
        }
        Ok(me)
    }

    fn sockops(&mut self) -> Result<Cgroup<'_>, XdpError> {
        bpf::program(&mut self.ebpf, SOCKOPS)?
            .sock_ops()
            .map_err(prog_err(SOCKOPS, "not a sock_ops program"))
    }

    fn peer(&mut self, name: &'static str) -> Result<Cgroup<'_>, XdpError> {
        bpf::program(&mut self.ebpf, name)?
            .sock_addr()
            .map_err(prog_err(name, "not a cgroup sock_addr program"))
    }

    /// The counters summed over CPUs.
    pub fn stats(&mut self) -> Result<ToaStats, XdpError> {
        ToaStats::read(bpf::map(&self.ebpf, "toa_stats")?, "toa_stats")
    }

    /// Attach to `cgroup` (a cgroup v2 directory) through BPF links: the links
    /// belong to this value and are detached when it is dropped.
    pub fn attach(&mut self, cgroup: &Path) -> Result<(), ToaError> {
        let links = self.attach_links(cgroup)?;
        self.links.extend(links.into_iter().map(|(_, l)| l));
        Ok(())
    }

    fn attach_links(&mut self, cgroup: &Path) -> Result<Vec<(&'static str, Link)>, ToaError> {
        if !is_cgroup2(cgroup) {
            return Err(ToaError::NotCgroup2(cgroup.to_owned()));
        }
        let cg = std::fs::File::open(cgroup).map_err(pin::io("opening", cgroup))?;
        let mut links = Vec::new();
        let attach = |p: &mut Cgroup<'_>, name: &'static str| match p.attach_link(&cg) {
            Ok(l) => Ok(l),
            Err(BpfError::NoLink(e)) => Err(link_err(name, e)),
            Err(e) => Err(unsupported(name, "attach")(e)),
        };
        links.push((LINKS[0].0, attach(&mut self.sockops()?, SOCKOPS)?));
        for (file, name) in &LINKS[1..] {
            links.push((*file, attach(&mut self.peer(name)?, name)?));
        }
        Ok(links)
    }

    /// Attach to `cgroup` with links pinned under [`pin_dir`], so the
    /// reader stays after this process exits; its counters are pinned
    /// beside them. Returns `false` (and changes nothing) when a reader is
    /// already pinned there: replacing it would lose the addresses the
    /// running one holds for open connections.
    pub fn attach_pinned(&mut self, cgroup: &Path) -> Result<bool, ToaError> {
        if is_pinned(cgroup)? {
            return Ok(false);
        }
        // Leftovers of an interrupted run.
        detach_pinned(cgroup)?;
        let dir = pin_dir(cgroup)?;
        std::fs::create_dir_all(&dir).map_err(pin::io("creating", &dir))?;
        let links = match self.attach_links(cgroup) {
            Ok(l) => l,
            Err(e) => {
                let _ = detach_pinned(cgroup);
                return Err(e);
            }
        };
        let pin_all = || -> Result<(), ToaError> {
            let stats = bpf::map(&self.ebpf, "toa_stats")?;
            let p = dir.join(STATS_PIN);
            stats.pin(&p).map_err(pin::pin_failed(&p))?;
            for (file, link) in links {
                let p = dir.join(file);
                link.pin(&p).map_err(pin::pin_failed(&p))?;
            }
            Ok(())
        };
        if let Err(e) = pin_all() {
            let _ = detach_pinned(cgroup);
            return Err(e);
        }
        Ok(true)
    }
}

/// TEST FIXTURE (`bpf/toa_test_writer.c`, feature `test-fixtures`): a
/// sock_ops program that writes a TOA carrying a configured address into
/// the SYN of every connection its cgroup's sockets open, so tests put a
/// real option on the wire without a FULLNAT director. Detached on drop.
#[cfg(feature = "test-fixtures")]
#[derive(Debug)]
pub struct ToaTestWriter {
    ebpf: Object,
}

#[cfg(feature = "test-fixtures")]
impl ToaTestWriter {
    const PROGRAM: &'static str = "rvs_toa_test_writer";

    /// Load the writer, attach it to `cgroup` and make it write `client`.
    pub fn attach(cgroup: &Path, client: SocketAddr) -> Result<Self, ToaError> {
        if !is_cgroup2(cgroup) {
            return Err(ToaError::NotCgroup2(cgroup.to_owned()));
        }
        let ebpf = bpf::load(
            "toa_test_writer",
            &mut Loader::new(),
            embedded_object!("toa_test_writer.o")?,
        )?;
        let mut me = ToaTestWriter { ebpf };
        me.set(client)?;
        let cg = std::fs::File::open(cgroup).map_err(pin::io("opening", cgroup))?;
        let mut p = bpf::program(&mut me.ebpf, Self::PROGRAM)?
            .sock_ops()
            .map_err(prog_err(Self::PROGRAM, "not a sock_ops program"))?;
        p.load()
            .map_err(prog_err(Self::PROGRAM, "load (verifier)"))?;
        p.attach(&cg).map_err(prog_err(Self::PROGRAM, "attach"))?;
        Ok(me)
    }

    /// Write the TOA into every segment after the SYN (the handshake's last
    /// ACK among them, where the Alibaba LVS and DPVS put it) rather than
    /// into the SYN.
    pub fn set_in_ack(&mut self, in_ack: bool) -> Result<(), XdpError> {
        let m = bpf::map(&self.ebpf, "toa_writer_in_ack")?;
        let mut a =
            crate::maps::typed::TypedArray::<u32>::new(m).map_err(map_err("toa_writer_in_ack"))?;
        a.set(0, u32::from(in_ack), 0)
            .map_err(map_err("toa_writer_in_ack"))
    }

    /// Write `client` into the SYNs from now on.
    pub fn set(&mut self, client: SocketAddr) -> Result<(), XdpError> {
        let m = bpf::map(&self.ebpf, "toa_writer_addr")?;
        let mut a = crate::maps::typed::TypedArray::<ToaAddr>::new(m)
            .map_err(map_err("toa_writer_addr"))?;
        a.set(0, ToaAddr::new(client), 0)
            .map_err(map_err("toa_writer_addr"))
    }
}
