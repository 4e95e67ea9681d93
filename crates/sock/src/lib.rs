//! rvs's socket-level data plane (`rvsd --dataplane sock`).
//!
//! cgroup v2 BPF programs (`bpf/sock_lb.c`) choose the real server when a
//! process of the cgroup calls `connect(2)` (TCP, connected UDP) or
//! `sendmsg(2)` with an address (unconnected UDP) on a virtual service's
//! address, and put the real server's address into the call: the socket is
//! connected to (or sends to) the real server from the start. No packet is
//! ever rewritten, so there is no NAT, no connection tracking and no proxy;
//! the traffic costs what a direct connection costs. `getpeername(2)` and
//! `recvmsg(2)` give the application the VIP back. Addresses that are not
//! VIPs, and processes outside the cgroup, are never touched.
//!
//! # Semantics at the socket, compared with a packet-level director
//! * **Schedulers**: rr and wrr (one atomic counter per service shared by
//!   all CPUs: the n-th socket gets position n, so counts are exact), lc,
//!   wlc, sed, nq (on the number of *open sockets* per real server, counted
//!   at connect/first sendmsg and uncounted at `sock_release`: there is no
//!   inactive/TIME_WAIT state, so `InActConn` plays no part), fo (the
//!   first real server of the highest weight), sh, dh, mh (rvs-core's own
//!   tables). sh/mh hash the *socket's bound source address* (and port with
//!   sh-port/mh-port): an unbound socket has none yet at connect time, so
//!   every unbound local socket is one client — the host, as a director
//!   would see it. With sh-fallback/mh-fallback an unavailable bucket's
//!   server is replaced by IPVS's bucket walk. The schedulers are the XDP
//!   director's own code (`bpf/lib/sched_pick.h`). ovf, twos, lblc and
//!   lblcr are refused.
//! * **Weights and drain**: only real servers of weight > 0 are in a
//!   service's schedulable list; weight 0 takes no new sockets, and sockets
//!   already connected are untouched (they never pass the director again).
//!   A health check that fails changes the weight or deletes the real
//!   server through the control plane, which reaches the maps through
//!   [`DataPlane::apply`](rvs_control::dataplane::DataPlane::apply).
//! * **Persistence** (`-p`): per client = per bound source address (0 for
//!   unbound sockets, i.e. the host), per service; the template lives for
//!   the timeout after the last new socket. The netmask is not applied.
//! * **UDP**: an unconnected socket keeps the real server it was given for
//!   a VIP (one socket is one flow, as its source port is fixed) until that
//!   real server is deleted; each new VIP re-schedules. A connected socket
//!   whose real server is deleted is destroyed (sock_diag `SOCK_DESTROY`,
//!   from the plane's worker): its `recv` fails with `ECONNABORTED` and a
//!   new `connect` gets a live real server (sockets of rvsd's own network
//!   namespace only).
//! * **Port mapping**: the real server's port replaces the VIP's.
//! * **Forwarding methods** (`-g`/`-m`/`-i`) mean nothing here: the socket
//!   is connected to the real server itself.
//! * **No real server**: `connect`/`sendmsg` fail with `EPERM`.
//! * **Client source ranges** (`source_ranges`, Kubernetes'
//!   `loadBalancerSourceRanges`): a socket bound to a source (or a
//!   `sendmsg` with a `PKTINFO` source) passes when a range of the service
//!   holds it (`sock_src_ranges`, an LPM trie); an unbound one when the
//!   source the kernel picks by route toward the VIP is in a range (the
//!   worker asks the kernel: [`maps::node_allowed`]; again at each report
//!   for [`plane::RECHECK_PER_REPORT`] services in turn). Anything else
//!   fails at once with `EPERM` and is counted (`REFUSED_SOURCE`).
//! * **Counters**: connections per real server (`--stats` Conns) are the
//!   programs'; packets and bytes are not seen at this level (zero). The
//!   programs also keep per-CPU event counters (`sock_counters`: TCP
//!   sockets and UDP sessions scheduled, UDP sends that kept their real
//!   server, refusals for want of one), which rvsd exports as metrics
//!   through [`plane::SockStats`].
//! * **Connections** (`-Lcn`, ActiveConn/InActConn): every open socket the
//!   programs gave a real server whose own address is known (TCP from its
//!   SYN, noted by a sock_ops program; UDP from its first receive) is
//!   mirrored into the director every report with 3 s to live, so a closed
//!   socket leaves the view within about 3 s. TCP sockets show as
//!   ESTABLISHED (the programs see no TCP states).
//!
//! # Parts
//! * [`maps`]: the layouts shared with the programs, and the pure part of
//!   publishing a service (schedulable list, tables).
//! * [`Loaded`]: the object loaded (verified) and attached to a cgroup;
//!   dropping it detaches the programs (connected sockets keep working: they
//!   are connected to the real servers).
//! * [`plane::SockPlane`]: the [`DataPlane`](rvs_control::dataplane::DataPlane);
//!   map writes happen on its own worker thread, never under rvsd's lock.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod maps;
pub mod plane;

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use rvs_sys::bpf::probe::{self, Feature, ProbeProgType};
use rvs_sys::bpf::{Cgroup, Object};

/// Why the sock data plane could not start or write its maps.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SockError {
    /// Built without the BPF toolchain.
    #[error("rvs-sock was built without clang/libbpf headers: no sock data plane in this build")]
    NotBuilt,
    /// The object could not be parsed or its maps created.
    #[error("loading sock_lb.o: {0}")]
    Load(String),
    /// The kernel lacks a feature the plane's programs need, probed after
    /// the verifier refused one ([`FEATURES`]): a one-line refusal naming
    /// it, instead of the verifier's log.
    #[error("sock plane: {0}; the proxy plane runs here")]
    KernelLacks(rvs_sys::bpf::probe::Lacking),
    /// A program was refused by the kernel (verifier, unknown hook).
    #[error("program {program}: {what}: {message} (the kernel lacks the cgroup socket hooks?)")]
    Program {
        /// Program name.
        program: &'static str,
        /// What was being done.
        what: &'static str,
        /// The kernel's or the loader's message.
        message: String,
    },
    /// The cgroup path is unusable.
    #[error("--cgroup {}: {message}", path.display())]
    Cgroup {
        /// The path given.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A map is missing from the object.
    #[error("map {0} missing from sock_lb.o")]
    MissingMap(&'static str),
    /// A map operation failed.
    #[error("map {map}: {source}")]
    Map {
        /// Map name.
        map: &'static str,
        /// The syscall's error.
        source: std::io::Error,
    },
    /// A map or region is full.
    #[error("no room in {0}")]
    Full(&'static str),
}

/// The default cgroup: the unified (v2) hierarchy's root. Systems with the
/// hybrid layout mount it at `/sys/fs/cgroup/unified`, pure v2 systems at
/// `/sys/fs/cgroup`.
pub fn default_cgroup() -> PathBuf {
    let unified = Path::new("/sys/fs/cgroup/unified");
    if is_cgroup2(unified) {
        unified.to_path_buf()
    } else {
        PathBuf::from("/sys/fs/cgroup")
    }
}

fn is_cgroup2(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
}

/// The socket-address programs: (name in the object, what it serves).
const ADDR_PROGRAMS: [&str; 8] = [
    "sock_connect4",
    "sock_connect6",
    "sock_sendmsg4",
    "sock_sendmsg6",
    "sock_recvmsg4",
    "sock_recvmsg6",
    "sock_getpeername4",
    "sock_getpeername6",
];
const RELEASE_PROGRAM: &str = "sock_release";
/// Notes a TCP socket's own address at its SYN (for `-Lcn`).
const OPS_PROGRAM: &str = "sock_ops";

/// The compiled `sock_lb.o` as embedded in this crate (for the layout test,
/// which checks [`maps`]' mirrors against its BTF); [`SockError::NotBuilt`]
/// when the crate was built without the BPF toolchain.
#[cfg(not(rvs_no_bpf))]
pub fn object() -> Result<&'static [u8], SockError> {
    Ok(rvs_sys::include_bytes_aligned!(concat!(
        env!("OUT_DIR"),
        "/sock_lb.o"
    )))
}

/// See the other `object`: this build has no BPF object.
#[cfg(rvs_no_bpf)]
pub fn object() -> Result<&'static [u8], SockError> {
    Err(SockError::NotBuilt)
}

/// What the plane's programs need of the kernel that Linux 5.10 (Debian 11)
/// lacks, oldest first: probed only after the verifier refused one of them
/// (`Loaded::load`), to name what is missing. (`clang -mcpu=v3` turns a
/// `__sync_fetch_and_add` whose result is used into an atomic fetch;
/// `bpf_loop`'s callbacks are the subprograms 5.10 counts wrong: "number
/// of funcs in func_info doesn't match number of subprogs".)
pub const FEATURES: [Feature; 2] = [
    Feature::ATOMIC_FETCH,
    Feature::helper(
        "bpf_loop",
        181,
        "5.17",
        ProbeProgType::CgroupSockAddrConnect4,
    ),
];

/// Program `name` the kernel refused: [`SockError::KernelLacks`] when a
/// probe finds one of [`FEATURES`] missing; otherwise (or when the probes
/// cannot tell, logged) the refusal as it was.
fn refused(name: &'static str, e: rvs_sys::bpf::Error) -> SockError {
    if matches!(e, rvs_sys::bpf::Error::Verifier { .. }) {
        match probe::lacking(&FEATURES) {
            Ok(Some(lacking)) => return SockError::KernelLacks(lacking),
            Ok(None) => {}
            Err(pe) => tracing::warn!(
                error = %pe, program = name,
                "the kernel refused the program and its BPF features could not be probed"
            ),
        }
    }
    prog_err(name, "load (verifier)")(e)
}

/// The programs loaded into the kernel and, after [`Loaded::attach`],
/// attached to one cgroup. Dropping it detaches them and frees the maps.
#[derive(Debug)]
pub struct Loaded {
    ebpf: Object,
    cgroup: Option<PathBuf>,
}

impl Loaded {
    /// Parse the object, create the maps and load every program (the
    /// verifier runs here: a kernel without a hook refuses its program).
    pub fn load() -> Result<Self, SockError> {
        let mut ebpf = Object::load(object()?).map_err(|e| SockError::Load(e.to_string()))?;
        for (name, kind) in programs() {
            program(&mut ebpf, name, kind)?
                .load()
                .map_err(|e| refused(name, e))?;
        }
        Ok(Loaded { ebpf, cgroup: None })
    }

    /// Attach every program to the cgroup v2 directory `cgroup` (sockets of
    /// its processes and of its descendants'). The attachments are BPF links
    /// (kernel 5.7+) without flags (the kernel refuses flags on cgroup
    /// links), which never replace other programs attached there.
    pub fn attach(&mut self, cgroup: &Path) -> Result<(), SockError> {
        let bad = |message: String| SockError::Cgroup {
            path: cgroup.to_path_buf(),
            message,
        };
        if !is_cgroup2(cgroup) {
            return Err(bad(
                "not a cgroup v2 directory (the socket hooks attach to the unified hierarchy only)"
                    .into(),
            ));
        }
        let dir = std::fs::File::open(cgroup).map_err(|e| bad(e.to_string()))?;
        for (name, kind) in programs() {
            program(&mut self.ebpf, name, kind)?
                .attach(&dir)
                .map_err(prog_err(name, "attach"))?;
        }
        self.cgroup = Some(cgroup.to_path_buf());
        Ok(())
    }

    /// The cgroup the programs are attached to.
    pub fn cgroup(&self) -> Option<&Path> {
        self.cgroup.as_deref()
    }

    /// The file descriptor of map `name`.
    pub fn map_fd(&self, name: &'static str) -> Result<BorrowedFd<'_>, SockError> {
        match self.ebpf.map(name) {
            Some(Ok(m)) => Ok(m.fd()),
            _ => Err(SockError::MissingMap(name)),
        }
    }
}

/// The kinds of cgroup program `sock_lb.o` holds.
#[derive(Copy, Clone)]
enum Kind {
    /// connect, sendmsg, recvmsg, getpeername.
    SockAddr,
    /// Socket release.
    Sock,
    /// sock_ops.
    SockOps,
}

/// Every program of the object with its kind, in attach order.
fn programs() -> impl Iterator<Item = (&'static str, Kind)> {
    ADDR_PROGRAMS
        .into_iter()
        .map(|n| (n, Kind::SockAddr))
        .chain([(RELEASE_PROGRAM, Kind::Sock), (OPS_PROGRAM, Kind::SockOps)])
}

fn program<'a>(
    ebpf: &'a mut Object,
    name: &'static str,
    kind: Kind,
) -> Result<Cgroup<'a>, SockError> {
    let p = ebpf.program(name).ok_or(SockError::Program {
        program: name,
        what: "find",
        message: "not in sock_lb.o".into(),
    })?;
    match kind {
        Kind::SockAddr => p.sock_addr(),
        Kind::Sock => p.sock(),
        Kind::SockOps => p.sock_ops(),
    }
    .map_err(prog_err(name, "type"))
}

fn prog_err(
    program: &'static str,
    what: &'static str,
) -> impl FnOnce(rvs_sys::bpf::Error) -> SockError {
    move |e| {
        let mut message = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            message.push_str(": ");
            message.push_str(&s.to_string());
            src = s.source();
        }
        SockError::Program {
            program,
            what,
            message,
        }
    }
}
