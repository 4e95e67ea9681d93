//! The real server's node side of DSR by IP option (`bpf/dsr_rs.c`): two
//! tc programs on the node's interface toward the director and the
//! clients. Ingress records each flow's service address:port from the
//! option the director's `--tun-type opt` inserted and removes the option;
//! egress rewrites the replies' source from the real server to that service
//! (and lowers a SYN-ACK's MSS by the option's length), so the replies go
//! straight to the client and the server's socket sees the client's
//! address and no option.
//!
//! Attached with TCX links (Linux 6.6) pinned under [`PIN_ROOT`], one
//! directory per network namespace and interface, so a one-shot `rvsd
//! realserver --mode dsr-opt` leaves them attached; [`detach_pinned`]
//! removes them. The flow map is pinned beside them, so a second run keeps
//! the attached programs (and the flows they know).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rvs_sys::bpf::{Error as BpfError, Loader, Object, PinnedMap, SchedClassifier, TcHook};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::bpf::{self, embedded_object, map_err, prog_err};
use crate::maps::typed::TypedHash;
use crate::maps::{addr16, family};
use crate::pin::{self, PinError};
use crate::{RunResult, XdpError};

/// Key of `dsr_flows` (`struct rvs_dsr_key` of bpf/dsr_rs.h): a flow as it
/// reaches the real server.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DsrKey {
    /// The client's address, network order, IPv4 in the first 4 bytes.
    pub caddr: [u8; 16],
    /// The real server's (backend's) address.
    pub baddr: [u8; 16],
    /// The client's port, network order.
    pub cport: u16,
    /// The real server's port, network order.
    pub bport: u16,
    /// `IPPROTO_TCP` or `IPPROTO_UDP`.
    pub proto: u8,
    /// `AF_INET` or `AF_INET6`.
    pub family: u8,
    /// Zero.
    pub pad0: u16,
}

impl DsrKey {
    /// The key of the flow `client` -> `backend` over `proto`.
    pub fn new(proto: u8, client: std::net::SocketAddr, backend: std::net::SocketAddr) -> Self {
        DsrKey {
            caddr: addr16(client.ip()),
            baddr: addr16(backend.ip()),
            cport: client.port().to_be(),
            bport: backend.port().to_be(),
            proto,
            family: family(client.ip()),
            pad0: 0,
        }
    }
}

/// Value of `dsr_flows` (`struct rvs_dsr_svc`): the service address:port
/// the replies leave from.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DsrSvc {
    /// The service's address, network order, IPv4 in the first 4 bytes.
    pub addr: [u8; 16],
    /// The service's port, network order.
    pub port: u16,
    /// Zero.
    pub pad0: u16,
}

impl DsrSvc {
    /// The value naming `service`.
    pub fn new(service: std::net::SocketAddr) -> Self {
        DsrSvc {
            addr: addr16(service.ip()),
            port: service.port().to_be(),
            pad0: 0,
        }
    }

    /// The service address as an [`IpAddr`] of `family`.
    pub fn ip(&self, family: u8) -> IpAddr {
        if family == crate::maps::AF_INET {
            IpAddr::from([self.addr[0], self.addr[1], self.addr[2], self.addr[3]])
        } else {
            IpAddr::from(self.addr)
        }
    }
}

const _: () = assert!(size_of::<DsrKey>() == 40);
const _: () = assert!(size_of::<DsrSvc>() == 20);

/// Entries of `dsr_flows` (`RVS_DSR_RS_MAX_FLOWS`): the least recently
/// used flow is evicted first.
pub const MAX_FLOWS: u32 = 65536;

bpf::counters! {
    /// Indexes of the `dsr_stats` counters (`RVS_DSR_RS_*` of bpf/dsr_rs.h).
    pub mod stat;
    /// The counters, summed over CPUs.
    pub struct DsrStats {
        /// Packets whose option was recorded and removed.
        STRIPPED = 0 => stripped,
        /// Replies whose source became the service.
        REPLIED = 1 => replied,
        /// SYN-ACKs whose MSS was lowered by the option's length.
        MSS = 2 => mss,
        /// Option packets the kernel refused to shrink (passed as they were).
        FAILED = 3 => failed,
    }
}

const INGRESS: &str = "rvs_dsr_ingress";
const EGRESS: &str = "rvs_dsr_egress";
/// The pinned links (file names), the programs and their hooks.
const LINKS: [(&str, &str, TcHook); 2] = [
    ("ingress", INGRESS, TcHook::Ingress),
    ("egress", EGRESS, TcHook::Egress),
];
const FLOWS_PIN: &str = "dsr_flows";
const STATS_PIN: &str = "dsr_stats";

/// Where [`DsrRealServer::attach_pinned`] pins: one directory per network
/// namespace and interface (`<netns inode>-<interface>`).
pub const PIN_ROOT: &str = "/sys/fs/bpf/rvs/dsr";

/// Errors of the DSR real-server programs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DsrError {
    /// Loading, a map or a program failed.
    #[error(transparent)]
    Bpf(#[from] XdpError),
    /// A file operation (bpffs, the namespace) failed.
    #[error(transparent)]
    Io(#[from] PinError),
}

/// The object's bytes (for BTF checks).
pub fn object() -> Result<&'static [u8], XdpError> {
    embedded_object!("dsr_rs.o")
}

/// The directory the pins for `interface` of this network namespace live in.
pub fn pin_dir(interface: &str) -> Result<PathBuf, DsrError> {
    use std::os::unix::fs::MetadataExt;
    // This thread's namespace (a test's thread may have entered another).
    let ns = Path::new("/proc/thread-self/ns/net");
    let ino = std::fs::metadata(ns).map_err(pin::io("reading", ns))?.ino();
    Ok(Path::new(PIN_ROOT).join(format!("{ino}-{interface}")))
}

/// Whether the programs are attached to `interface` with pinned links.
pub fn is_pinned(interface: &str) -> Result<bool, DsrError> {
    let dir = pin_dir(interface)?;
    Ok(LINKS.iter().all(|(f, _, _)| dir.join(f).exists()))
}

/// Detach the programs [`DsrRealServer::attach_pinned`] attached to
/// `interface`: remove the pins (the links go with the last reference).
/// Returns whether anything was there.
pub fn detach_pinned(interface: &str) -> Result<bool, DsrError> {
    let files = LINKS.iter().map(|(f, _, _)| *f);
    Ok(pin::remove_pins(
        &pin_dir(interface)?,
        files.chain([FLOWS_PIN, STATS_PIN]),
        PIN_ROOT,
    )?)
}

/// The counters of the programs pinned on `interface` (`None`: none are).
pub fn pinned_stats(interface: &str) -> Result<Option<DsrStats>, DsrError> {
    let p = pin_dir(interface)?.join(STATS_PIN);
    if !p.exists() {
        return Ok(None);
    }
    let pinned = PinnedMap::open(&p).map_err(map_err("dsr_stats"))?;
    Ok(Some(DsrStats::read(pinned.map(), "dsr_stats")?))
}

/// The two programs loaded into the kernel (verified), not yet attached.
#[derive(Debug)]
pub struct DsrRealServer {
    ebpf: Object,
}

impl DsrRealServer {
    /// Load the object and both programs (the verifier runs here).
    pub fn load() -> Result<Self, XdpError> {
        let ebpf = bpf::load("dsr_rs", &mut Loader::new(), object()?)?;
        let mut me = DsrRealServer { ebpf };
        for p in [INGRESS, EGRESS] {
            me.program(p)?
                .load()
                .map_err(prog_err(p, "load (verifier)"))?;
        }
        Ok(me)
    }

    fn program(&mut self, name: &'static str) -> Result<SchedClassifier<'_>, XdpError> {
        bpf::program(&mut self.ebpf, name)?
            .sched_cls()
            .map_err(prog_err(name, "not a tc (sched_cls) program"))
    }

    /// The counters summed over CPUs.
    pub fn stats(&mut self) -> Result<DsrStats, XdpError> {
        DsrStats::read(bpf::map(&self.ebpf, "dsr_stats")?, "dsr_stats")
    }

    /// The service recorded for `key`, if any.
    pub fn flow(&mut self, key: &DsrKey) -> Result<Option<DsrSvc>, XdpError> {
        let m = TypedHash::<DsrKey, DsrSvc>::new(bpf::map(&self.ebpf, "dsr_flows")?)
            .map_err(map_err("dsr_flows"))?;
        match m.get(key, 0) {
            Ok(v) => Ok(Some(v)),
            Err(BpfError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err("dsr_flows")(e)),
        }
    }

    /// Record `svc` for `key` (as the ingress program does).
    pub fn insert_flow(&mut self, key: DsrKey, svc: DsrSvc) -> Result<(), XdpError> {
        let mut m = TypedHash::<DsrKey, DsrSvc>::new(bpf::map(&self.ebpf, "dsr_flows")?)
            .map_err(map_err("dsr_flows"))?;
        m.insert(key, svc, 0).map_err(map_err("dsr_flows"))
    }

    /// Attach both programs to `interface` with TCX links pinned under
    /// [`pin_dir`], with the flow map and the counters, so they stay after
    /// this process exits. Returns `false` (and changes nothing) when they
    /// are pinned there already: replacing them would forget the flows of
    /// open connections, whose replies would then leave from the server's
    /// own address.
    pub fn attach_pinned(&mut self, interface: &str) -> Result<bool, DsrError> {
        if is_pinned(interface)? {
            return Ok(false);
        }
        detach_pinned(interface)?; // leftovers of an interrupted run
        let dir = pin_dir(interface)?;
        std::fs::create_dir_all(&dir).map_err(pin::io("creating", &dir))?;
        let r = self.attach_and_pin(interface, &dir);
        if r.is_err() {
            let _ = detach_pinned(interface);
        }
        r.map(|()| true)
    }

    fn attach_and_pin(&mut self, interface: &str, dir: &Path) -> Result<(), DsrError> {
        for m in [FLOWS_PIN, STATS_PIN] {
            let p = dir.join(m);
            bpf::map(&self.ebpf, m)?
                .pin(&p)
                .map_err(pin::pin_failed(&p))?;
        }
        for (file, name, hook) in LINKS {
            let link = self
                .program(name)?
                .attach_link(interface, hook)
                .map_err(prog_err(name, "attach through a TCX link (Linux 6.6)"))?;
            let p = dir.join(file);
            link.pin(&p).map_err(pin::pin_failed(&p))?;
        }
        Ok(())
    }

    /// Run the ingress program on `frame` (BPF_PROG_TEST_RUN).
    pub fn run_ingress(&mut self, frame: &[u8]) -> Result<RunResult, XdpError> {
        self.run(INGRESS, frame)
    }

    /// Run the egress program on `frame` (BPF_PROG_TEST_RUN).
    pub fn run_egress(&mut self, frame: &[u8]) -> Result<RunResult, XdpError> {
        self.run(EGRESS, frame)
    }

    fn run(&mut self, name: &'static str, frame: &[u8]) -> Result<RunResult, XdpError> {
        let mut prog = self.program(name)?;
        bpf::run_frame(name, frame, |i, o| prog.test_run(i, o, None, 1))
    }
}
