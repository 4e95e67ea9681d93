//! The real-server decapsulator `bpf/decap.c`: strips IPIP (IPv4 in IPv4,
//! IPv6 in IPv6), GUE, GRE and Geneve from packets whose inner destination
//! is one of the host's VIPs and passes the inner packet to the kernel.
//! Kernels without the ipip/fou/ip_gre/geneve modules cannot receive the
//! director's TUN method otherwise.
//!
//! Two ways to attach: [`Decap::attach`] through rvs-sys (detached when the
//! [`Decap`] is dropped: for tests and long-running owners), and
//! [`Decap::attach_persistent`] through a netlink link change (`IFLA_XDP`,
//! rvs-sys), which the kernel keeps after the process exits, so a
//! one-shot `rvsd realserver` can prepare a host and leave. Its maps live as
//! long as the attached program.

use std::net::IpAddr;

use rvs_sys::bpf::{Error as BpfError, Loader, Map, Object, Xdp, XdpMode};
use rvs_sys::netlink::{Netlink, NetlinkError};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::bpf::{self, embedded_object, map_err};
use crate::maps::typed::{TypedArray, TypedHash};
use crate::maps::{addr16, family};
use crate::{RunResult, XdpError};

/// Key of `decap_vips` (`struct rvs_decap_vip` of bpf/decap.h).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DecapVip {
    /// `AF_INET` or `AF_INET6`.
    pub family: u8,
    /// Zero.
    pub pad0: [u8; 3],
    /// The address, network order, IPv4 in the first 4 bytes.
    pub addr: [u8; 16],
}

impl DecapVip {
    /// The key of `vip`.
    pub fn new(vip: IpAddr) -> Self {
        DecapVip {
            family: family(vip),
            pad0: [0; 3],
            addr: addr16(vip),
        }
    }
}

/// Value of `decap_config[0]` (`struct rvs_decap_config`).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DecapConfig {
    /// GUE's UDP destination port, network order; 0 turns GUE off.
    pub gue_port: u16,
    /// Geneve's UDP destination port, network order; 0 turns Geneve off.
    pub geneve_port: u16,
    /// Zero.
    pub pad1: u32,
}

const _: () = assert!(size_of::<DecapVip>() == 20);
const _: () = assert!(size_of::<DecapConfig>() == 8);

/// Entries of `decap_vips` (`RVS_DECAP_MAX_VIPS`).
pub const MAX_VIPS: u32 = 1024;

bpf::counters! {
    /// Indexes of the `decap_stats` counters (`RVS_DECAP_*` of bpf/decap.h).
    pub mod stat;
    /// The decapsulator's counters, summed over CPUs.
    pub struct DecapStats {
        /// IPIP / IPv6-in-IPv6 packets stripped.
        IPIP = 0 => ipip,
        /// GUE packets stripped.
        GUE = 1 => gue,
        /// Tunnel packets for an inner destination that is not a VIP (passed).
        NOT_VIP = 2 => not_vip,
        /// Tunnel packets with a bad inner header (not IP; passed).
        BAD = 3 => bad,
        /// GRE packets stripped.
        GRE = 4 => gre,
        /// Geneve packets stripped.
        GENEVE = 5 => geneve,
    }
}

const PROGRAM: &str = "rvs_decap";

/// Errors of the decapsulator: the BPF side, or the netlink attach.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecapError {
    /// Loading, a map or the program failed.
    #[error(transparent)]
    Bpf(#[from] XdpError),
    /// The netlink request (attach/detach, interface lookup) failed.
    #[error("{what} on `{interface}`: {source}")]
    Netlink {
        /// What was being done.
        what: &'static str,
        /// The interface.
        interface: String,
        /// Why (the kernel's errno).
        #[source]
        source: std::io::Error,
    },
}

/// The decap object's bytes (for BTF checks).
pub fn object() -> Result<&'static [u8], XdpError> {
    embedded_object!("decap.o")
}

fn prog_err(what: &'static str) -> impl Fn(BpfError) -> XdpError {
    bpf::prog_err(PROGRAM, what)
}

/// The decapsulator loaded into the kernel (verified), not yet attached.
#[derive(Debug)]
pub struct Decap {
    ebpf: Object,
}

impl Decap {
    /// Load the object and its program (the verifier runs here).
    pub fn load() -> Result<Self, XdpError> {
        let ebpf = bpf::load(PROGRAM, &mut Loader::new(), object()?)?;
        let mut me = Decap { ebpf };
        me.program()?.load().map_err(prog_err("load (verifier)"))?;
        Ok(me)
    }

    fn program(&mut self) -> Result<Xdp<'_>, XdpError> {
        bpf::xdp(&mut self.ebpf, PROGRAM)
    }

    fn map(&mut self, name: &'static str) -> Result<Map<'_>, XdpError> {
        bpf::map(&self.ebpf, name)
    }

    /// Decapsulate traffic for `vip` (no error when already present).
    pub fn add_vip(&mut self, vip: IpAddr) -> Result<(), XdpError> {
        let mut m = TypedHash::<DecapVip, u8>::new(self.map("decap_vips")?)
            .map_err(map_err("decap_vips"))?;
        m.insert(DecapVip::new(vip), 1, 0)
            .map_err(map_err("decap_vips"))
    }

    /// Stop decapsulating traffic for `vip` (no error when absent).
    pub fn remove_vip(&mut self, vip: IpAddr) -> Result<(), XdpError> {
        let mut m = TypedHash::<DecapVip, u8>::new(self.map("decap_vips")?)
            .map_err(map_err("decap_vips"))?;
        match m.remove(&DecapVip::new(vip)) {
            Ok(()) => Ok(()),
            Err(e) if e.is_absent() => Ok(()),
            Err(e) => Err(map_err("decap_vips")(e)),
        }
    }

    /// Accept GUE on UDP destination port `port` (0: GUE off).
    pub fn set_gue_port(&mut self, port: u16) -> Result<(), XdpError> {
        self.update_config(|c| c.gue_port = port.to_be())
    }

    /// Accept Geneve on UDP destination port `port` (0: Geneve off; the
    /// director sends to [`GENEVE_PORT`](crate::maps::GENEVE_PORT)). IPIP
    /// and GRE need no switch: they are IP protocols of their own.
    pub fn set_geneve_port(&mut self, port: u16) -> Result<(), XdpError> {
        self.update_config(|c| c.geneve_port = port.to_be())
    }

    fn update_config(&mut self, f: impl FnOnce(&mut DecapConfig)) -> Result<(), XdpError> {
        let mut a = TypedArray::<DecapConfig>::new(self.map("decap_config")?)
            .map_err(map_err("decap_config"))?;
        let mut c = a.get(&0, 0).map_err(map_err("decap_config"))?;
        f(&mut c);
        a.set(0, c, 0).map_err(map_err("decap_config"))
    }

    /// The counters summed over CPUs.
    pub fn stats(&mut self) -> Result<DecapStats, XdpError> {
        DecapStats::read(self.map("decap_stats")?, "decap_stats")
    }

    /// Attach through rvs-sys, owned by this value (dropping the
    /// [`Decap`] detaches). Native mode first, generic when the driver has
    /// no XDP; `mode` forces one.
    pub fn attach(&mut self, interface: &str, mode: Option<XdpMode>) -> Result<XdpMode, XdpError> {
        bpf::attach_xdp(&mut self.program()?, PROGRAM, interface, mode)
    }

    /// Attach to `interface` with netlink so the attachment outlives this
    /// process (replacing any program attached the same way before).
    /// Native mode first, then generic. Returns the mode used.
    pub fn attach_persistent(&mut self, interface: &str) -> Result<XdpMode, DecapError> {
        let ifindex = ifindex(interface)?;
        let prog = self.program()?;
        let fd = prog.fd().map_err(prog_err("program fd"))?;
        let mut nl = netlink(interface, "attach")?;
        let mut last = None;
        for mode in [XdpMode::Driver, XdpMode::Skb] {
            match nl.attach_xdp(ifindex, fd, mode) {
                Ok(()) => return Ok(mode),
                Err(e) => last = Some(e),
            }
        }
        Err(DecapError::Netlink {
            what: "attach",
            interface: interface.to_owned(),
            source: last.map_or_else(
                || std::io::Error::other("no mode tried"),
                NetlinkError::into_io,
            ),
        })
    }

    /// Run the program on `frame` with BPF_PROG_TEST_RUN.
    pub fn run(&mut self, frame: &[u8], repeat: u32) -> Result<RunResult, XdpError> {
        let mut prog = self.program()?;
        bpf::run_frame(PROGRAM, frame, |i, o| prog.test_run(i, o, None, repeat))
    }
}

/// Remove an XDP program attached with netlink (native or generic) from
/// `interface`; no error when none is attached.
pub fn detach_persistent(interface: &str) -> Result<(), DecapError> {
    let ifindex = ifindex(interface)?;
    let mut nl = netlink(interface, "detach")?;
    for mode in [XdpMode::Driver, XdpMode::Skb] {
        nl.detach_xdp(ifindex, mode)
            .map_err(|e| DecapError::Netlink {
                what: "detach",
                interface: interface.to_owned(),
                source: e.into_io(),
            })?;
    }
    Ok(())
}

fn netlink(interface: &str, what: &'static str) -> Result<Netlink, DecapError> {
    Netlink::open().map_err(|e| DecapError::Netlink {
        what,
        interface: interface.to_owned(),
        source: e.into_io(),
    })
}

fn ifindex(interface: &str) -> Result<u32, DecapError> {
    rvs_sys::iface::ifindex(interface).map_err(|source| DecapError::Netlink {
        what: "interface lookup",
        interface: interface.to_owned(),
        source,
    })
}
