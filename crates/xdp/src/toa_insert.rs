//! TEST FIXTURE (feature `test-fixtures`, never in rvsd): the director's
//! TOA insertion `bpf/lib/toa_insert.h` (`toa_insert`, `toa_mss_clamp`)
//! wrapped in the XDP program `bpf/toa_insert_test.c`, so tests run it on
//! frames with BPF_PROG_TEST_RUN. The FULLNAT program calls the same
//! functions; this fixture lets them be checked alone, byte by byte.
//!
//! The program's return value is the function's code ([`code`]), not an
//! XDP action. [`ToaInsertTest::attach_live`] attaches it to an interface
//! instead (a test namespace's loopback), where it inserts the TOA into the
//! TCP segments to one port, counts the codes and passes every frame, so a
//! real kernel's TCP receives the director's output.

use std::net::{IpAddr, SocketAddr};

use rvs_sys::bpf::{Error as BpfError, Loader, Object, Xdp, XdpMode};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::bpf::{self, embedded_object, map_err};
use crate::maps::typed::TypedArray;
use crate::{RunResult, XdpError};

/// The codes the fixture returns (`TOA_*` of bpf/lib/toa_insert.h, and
/// the fixture's own).
pub mod code {
    /// Inserted (or, for the MSS clamp, lowered).
    pub const OK: u32 = 0;
    /// The options would pass 40 bytes (the clamp: the MSS would go below
    /// 88).
    pub const NOROOM: u32 = 1;
    /// The IP packet would pass the MTU.
    pub const MTU: u32 = 2;
    /// Not a TCP segment the parser described, or inconsistent lengths.
    pub const PKT: u32 = 3;
    /// `bpf_xdp_adjust_head` refused.
    pub const ADJUST: u32 = 4;
    /// A bounds check failed after the frame grew (never expected).
    pub const MOVED: u32 = 5;
    /// The clamp found no MSS option.
    pub const MSS_NONE: u32 = 6;
    /// The fixture's configuration was unreadable or bad.
    pub const BAD_CFG: u32 = 98;
    /// `parse()` did not take the frame.
    pub const NOT_PARSED: u32 = 99;
}

const PROGRAM: &str = "rvs_toa_insert_test";
const CFG: &str = "toa_insert_cfg";
const OP_INSERT: u8 = 0;
const OP_MSS_CLAMP: u8 = 1;
const OP_LIVE: u8 = 2;
const CODES: &str = "toa_insert_codes";
/// Entries of `toa_insert_codes`.
const NCODES: u32 = 8;

/// `struct toa_insert_cfg` of bpf/toa_insert_test.c.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
struct Cfg {
    op: u8,
    family: u8,
    port: u16,
    addr: [u8; 16],
    mtu: u16,
    reduce: u16,
    dport: u16,
    pad: u16,
}

const _: () = assert!(size_of::<Cfg>() == 28);

impl Cfg {
    /// Operation `op` for `client` (its family picks the form: a v4-mapped
    /// IPv6 address gives the IPv6 form of an IPv4 client) within `mtu`.
    fn client(op: u8, client: SocketAddr, mtu: u16) -> Cfg {
        let (family, addr) = match client.ip() {
            IpAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                (2, b)
            }
            IpAddr::V6(a) => (10, a.octets()),
        };
        Cfg {
            op,
            family,
            port: client.port().to_be(),
            addr,
            mtu,
            ..Cfg::default()
        }
    }
}

/// The loaded fixture program.
#[derive(Debug)]
pub struct ToaInsertTest {
    ebpf: Object,
}

impl ToaInsertTest {
    /// Load the program (through the verifier).
    pub fn load() -> Result<Self, XdpError> {
        let ebpf = bpf::load(
            "toa_insert_test",
            &mut Loader::new(),
            embedded_object!("toa_insert_test.o")?,
        )?;
        let mut me = ToaInsertTest { ebpf };
        me.program()?.load().map_err(prog_err("load (verifier)"))?;
        Ok(me)
    }

    fn program(&mut self) -> Result<Xdp<'_>, XdpError> {
        bpf::xdp(&mut self.ebpf, PROGRAM)
    }

    fn configure(&mut self, cfg: Cfg) -> Result<(), XdpError> {
        let m = bpf::map(&self.ebpf, CFG)?;
        let mut a = TypedArray::<Cfg>::new(m).map_err(map_err(CFG))?;
        a.set(0, cfg, 0).map_err(map_err(CFG))
    }

    /// `toa_insert` on `frame` with `client` (its family picks the form:
    /// give a v4-mapped IPv6 address for the IPv6 form of an IPv4
    /// client) and `mtu`. The result's action is the [`code`].
    pub fn insert(
        &mut self,
        frame: &[u8],
        client: SocketAddr,
        mtu: u16,
    ) -> Result<RunResult, XdpError> {
        self.configure(Cfg::client(OP_INSERT, client, mtu))?;
        self.run(frame)
    }

    /// Attach to `interface` (generic mode, in the calling thread's network
    /// namespace; detached when this value is dropped) to insert a TOA for
    /// `client` into every TCP segment to port `dport` that fits `mtu`,
    /// passing every frame on.
    pub fn attach_live(
        &mut self,
        interface: &str,
        client: SocketAddr,
        mtu: u16,
        dport: u16,
    ) -> Result<(), XdpError> {
        self.configure(Cfg {
            dport: dport.to_be(),
            ..Cfg::client(OP_LIVE, client, mtu)
        })?;
        self.program()?
            .attach(interface, XdpMode::Skb)
            .map_err(prog_err("attach"))?;
        Ok(())
    }

    /// How many segments the attached program gave each [`code`] (index =
    /// code), summed over CPUs.
    pub fn live_codes(&mut self) -> Result<Vec<u64>, XdpError> {
        let sums: [u64; NCODES as usize] = bpf::percpu_sums(bpf::map(&self.ebpf, CODES)?, CODES)?;
        Ok(sums.to_vec())
    }

    /// `toa_mss_clamp` on `frame`, lowering its MSS by `reduce`.
    pub fn mss_clamp(&mut self, frame: &[u8], reduce: u16) -> Result<RunResult, XdpError> {
        self.configure(Cfg {
            op: OP_MSS_CLAMP,
            reduce,
            ..Cfg::default()
        })?;
        self.run(frame)
    }

    fn run(&mut self, frame: &[u8]) -> Result<RunResult, XdpError> {
        let mut prog = self.program()?;
        bpf::run_frame(PROGRAM, frame, |i, o| prog.test_run(i, o, None, 1))
    }
}

fn prog_err(what: &'static str) -> impl Fn(BpfError) -> XdpError {
    bpf::prog_err(PROGRAM, what)
}
