//! # rvs-xdp
//!
//! The XDP data plane of rvs: the director program `bpf/xdp_lb.c` (C,
//! compiled by `build.rs` with clang and embedded in this crate), the Rust
//! mirrors of its maps ([`maps`]), the loader ([`Loaded`]), the data plane
//! that keeps the maps in step with the control plane ([`plane`]), the
//! real-server decapsulator ([`decap`]), next-hop resolution ([`neigh`]) and
//! the scheduling tables copied from rvs-core ([`tables`]), and the real
//! server's TOA reader ([`toa`]).
//!
//! Loading needs root (CAP_BPF + CAP_NET_ADMIN); the layout checks and the
//! table builders do not. When the crate was built without clang, every
//! loading function returns [`XdpError::NoBpf`].
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod bpf;
pub mod decap;
pub mod dsr_rs;
mod loader;
pub mod maps;
pub mod neigh;
pub mod own_mac;
pub mod pin;
pub mod plane;
pub mod quic_lb;
#[cfg(feature = "bench")]
pub mod ref_lb;
pub mod tables;
pub mod toa;
#[cfg(feature = "test-fixtures")]
pub mod toa_insert;

use std::time::Duration;

pub use loader::{Attached, Loaded, PinPlan, flows_map};
/// XDP attach modes (native or generic), rvs-sys's, for [`Loaded::attach`].
pub use rvs_sys::bpf::XdpMode as AttachMode;

/// Errors of loading, attaching and driving the BPF programs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XdpError {
    /// The crate was compiled without the BPF toolchain.
    #[error("rvs was built without clang; install clang and libbpf-dev and rebuild")]
    NoBpf,
    /// Pinning, adopting or migrating the director's pins (see [`pin`]).
    #[error(transparent)]
    Pin(#[from] pin::PinError),
    /// The director's own-MAC table (see [`own_mac`]).
    #[error(transparent)]
    OwnMac(#[from] own_mac::OwnMacError),
    /// The kernel or the loader refused the object (parse, map creation,
    /// BTF).
    #[error("loading BPF object `{object}`: {source}")]
    Load {
        /// Which object.
        object: &'static str,
        /// Why.
        #[source]
        source: Box<rvs_sys::bpf::Error>,
    },
    /// A program operation failed (verifier, attach, test run).
    #[error("BPF program `{program}`: {what}: {source}")]
    Program {
        /// Which program.
        program: &'static str,
        /// What was being done.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<rvs_sys::bpf::Error>,
    },
    /// A map operation failed.
    #[error("BPF map `{map}`: {source}")]
    Map {
        /// Which map.
        map: &'static str,
        /// Why.
        #[source]
        source: Box<rvs_sys::bpf::Error>,
    },
    /// [`Loaded::set_bench_cycle`] was given a cycle it cannot walk.
    #[cfg(feature = "bench")]
    #[error("benchmark key cycle: {0}")]
    BenchCycle(&'static str),
    /// The kernel lacks a feature the director's programs need, probed
    /// after the verifier refused one (the ones Linux 5.10 lacks: atomic
    /// fetch, `bpf_loop`, `bpf_xdp_load_bytes`): a one-line refusal naming
    /// them, instead of the verifier's log.
    #[error("XDP plane: {0}; the proxy plane runs here")]
    KernelLacks(rvs_sys::bpf::probe::Lacking),
    /// The object lacks a map or program rvs expects (a build mismatch).
    #[error("BPF object has no {kind} `{name}`")]
    Missing {
        /// "map" or "program".
        kind: &'static str,
        /// Its name.
        name: &'static str,
    },
}

use bpf::map_err;

/// The BPF objects this crate embeds. The benchmark objects exist only with
/// the feature `bench` (rvsd never loads them).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Object {
    /// `bpf/xdp_lb.c`: the director (program `xdp_lb`).
    Director,
    /// `bpf/xdp_lb_bench.c` (the director with a benchmark hook): every run sees
    /// another client (address and port from a per-CPU counter), so a
    /// repeated test run measures the new-flow path. Benchmarks only.
    #[cfg(feature = "bench")]
    DirectorBench,
    /// `bpf/xdp_lb_cycle.c` (the director with a benchmark hook): every run takes
    /// the next of N client addresses (set by [`Loaded::set_bench_cycle`]),
    /// so a repeated test run measures a working set of N flows rather than
    /// one flow repeated. Benchmarks only.
    #[cfg(feature = "bench")]
    DirectorCycle,
    /// `bpf/xdp_lb_cycle_miss.c`, [`Object::DirectorCycle`] whose
    /// per-CPU flow cache is filled as on any miss but every entry is born
    /// stale, so every established packet misses it and looks up `flows4`.
    /// Benchmarks only.
    #[cfg(feature = "bench")]
    DirectorCycleMiss,
    /// `bpf/bench_tx.c`: the XDP_TX floor of the benchmarks (program `bench_tx`).
    #[cfg(feature = "bench")]
    BenchTx,
    /// `bpf/bench_lru.c`: the bare LRU-insert floor (program `bench_lru`).
    #[cfg(feature = "bench")]
    BenchLru,
    /// `bpf/bench_lru.c` with `BENCH_LRU_HIT`: the bare parse + LRU-hit
    /// floor (program `bench_lru`).
    #[cfg(feature = "bench")]
    BenchLruHit,
    /// `bpf/bench_lru.c` with `BENCH_LRU_HIT` and `RVS_BENCH_CYCLE_FLOWS`:
    /// the bare parse + LRU-hit floor cycling through N client addresses
    /// like [`Object::DirectorCycle`] (program `bench_lru`).
    #[cfg(feature = "bench")]
    BenchLruCycle,
    /// `bpf/ref_lb.c`: the wire benchmark's minimal reference balancer
    /// (parse, a per-CPU LRU flow table, a hash to one of three real
    /// servers, MAC rewrite, XDP_TX; program `ref_lb`). Benchmarks only.
    #[cfg(feature = "bench")]
    RefLb,
    /// `bpf/ref_lb.c` with `REF_PASS`: the wire benchmark's floor, XDP_PASS
    /// after nothing (program `ref_pass`). Benchmarks only.
    #[cfg(feature = "bench")]
    RefPass,
    /// `bpf/xdp_lb_probe.c`: the director with another program tag and the
    /// same maps (feature `upgrade-probe`; the restart tests' upgrade).
    #[cfg(feature = "upgrade-probe")]
    DirectorProbe,
    /// `bpf/clock.c`: reads jiffies, for [`kernel_hz`] (program `clock`).
    Clock,
}

impl Object {
    /// `Object::DirectorProbe` when this build has it (feature
    /// `upgrade-probe`), else `None`.
    pub fn upgrade_probe() -> Option<Object> {
        #[cfg(feature = "upgrade-probe")]
        return Some(Object::DirectorProbe);
        #[cfg(not(feature = "upgrade-probe"))]
        None
    }

    /// The program's name.
    pub fn name(self) -> &'static str {
        match self {
            Object::Director => "xdp_lb",
            #[cfg(feature = "upgrade-probe")]
            Object::DirectorProbe => "xdp_lb",
            #[cfg(feature = "bench")]
            Object::DirectorBench | Object::DirectorCycle | Object::DirectorCycleMiss => "xdp_lb",
            #[cfg(feature = "bench")]
            Object::BenchTx => "bench_tx",
            #[cfg(feature = "bench")]
            Object::BenchLru | Object::BenchLruHit | Object::BenchLruCycle => "bench_lru",
            #[cfg(feature = "bench")]
            Object::RefLb => "ref_lb",
            #[cfg(feature = "bench")]
            Object::RefPass => "ref_pass",
            Object::Clock => "clock",
        }
    }

    /// The director or one of its benchmark variants: the objects with the
    /// director's maps (flow tables, slots, the own-MAC table).
    pub(crate) fn is_director(self) -> bool {
        match self {
            Object::Director => true,
            #[cfg(feature = "upgrade-probe")]
            Object::DirectorProbe => true,
            #[cfg(feature = "bench")]
            Object::DirectorBench | Object::DirectorCycle | Object::DirectorCycleMiss => true,
            #[cfg(feature = "bench")]
            Object::BenchTx
            | Object::BenchLru
            | Object::BenchLruHit
            | Object::BenchLruCycle
            | Object::RefLb
            | Object::RefPass => false,
            Object::Clock => false,
        }
    }

    /// The compiled ELF object.
    pub fn bytes(self) -> Result<&'static [u8], XdpError> {
        match self {
            Object::Director => bpf::embedded_object!("xdp_lb.o"),
            #[cfg(feature = "upgrade-probe")]
            Object::DirectorProbe => bpf::embedded_object!("xdp_lb_probe.o"),
            #[cfg(feature = "bench")]
            Object::DirectorBench => bpf::embedded_object!("xdp_lb_bench.o"),
            #[cfg(feature = "bench")]
            Object::DirectorCycle => bpf::embedded_object!("xdp_lb_cycle.o"),
            #[cfg(feature = "bench")]
            Object::DirectorCycleMiss => bpf::embedded_object!("xdp_lb_cycle_miss.o"),
            #[cfg(feature = "bench")]
            Object::BenchTx => bpf::embedded_object!("bench_tx.o"),
            #[cfg(feature = "bench")]
            Object::BenchLru => bpf::embedded_object!("bench_lru.o"),
            #[cfg(feature = "bench")]
            Object::BenchLruHit => bpf::embedded_object!("bench_lru_hit.o"),
            #[cfg(feature = "bench")]
            Object::BenchLruCycle => bpf::embedded_object!("bench_lru_cycle.o"),
            #[cfg(feature = "bench")]
            Object::RefLb => bpf::embedded_object!("ref_lb.o"),
            #[cfg(feature = "bench")]
            Object::RefPass => bpf::embedded_object!("ref_pass.o"),
            Object::Clock => bpf::embedded_object!("clock.o"),
        }
    }
}

/// Map sizes chosen at load time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Entries of each flow table (IPv4 `flows4` and IPv6 `flows`: N flows
    /// of each family), the NAT reply table and the persistence templates.
    pub flow_table_size: u32,
    /// Entries (u32) of the `slots` array holding scheduling tables.
    pub slots: u32,
    /// Entries of each embryonic table (`embryonic4`, `embryonic`: TCP
    /// flows between their SYN and their handshake's ACK, the only entries
    /// a SYN flood can evict); 0 = a quarter of `flow_table_size`.
    pub embryonic_table_size: u32,
    /// Entries of the services map and of every array indexed by service
    /// (see [`maps::MAX_SERVICES`]): the virtual services the plane holds.
    pub max_services: u32,
}

impl LoadOptions {
    /// The embryonic tables' size these options give (see
    /// [`LoadOptions::embryonic_table_size`]).
    pub fn embryonic_entries(&self) -> u32 {
        match self.embryonic_table_size {
            0 => (self.flow_table_size / 4).max(1),
            n => n,
        }
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            flow_table_size: maps::FLOWS_DEFAULT,
            slots: maps::SLOTS_DEFAULT,
            embryonic_table_size: 0,
            max_services: maps::MAX_SERVICES,
        }
    }
}

/// What one `BPF_PROG_TEST_RUN` returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunResult {
    /// The XDP action (`XDP_PASS` = 2, `XDP_TX` = 3, ...).
    pub action: u32,
    /// The frame after the program (including pushed headers).
    pub data: Vec<u8>,
    /// Average time per run as the kernel measured it.
    pub duration: Duration,
}

/// XDP action numbers (`enum xdp_action`).
pub mod action {
    /// Error in the program.
    pub const ABORTED: u32 = 0;
    /// Dropped.
    pub const DROP: u32 = 1;
    /// Given to the kernel's stack.
    pub const PASS: u32 = 2;
    /// Sent back out of the ingress interface.
    pub const TX: u32 = 3;
    /// Redirected to another interface.
    pub const REDIRECT: u32 = 4;
}

/// The kernel's HZ (jiffies per second), measured once per process: the
/// jiffies counter read through the `clock` program 100 ms apart, rounded to
/// the nearest usual value (100, 250, 300, 1000). The director keeps flow
/// ages in jiffies because reading them costs one load per packet.
pub fn kernel_hz() -> Result<u32, XdpError> {
    static HZ: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    if let Some(&hz) = HZ.get() {
        return Ok(hz);
    }
    let mut clock = Loaded::load(Object::Clock, &LoadOptions::default())?;
    let (j0, t0) = (clock.jiffies()?, std::time::Instant::now());
    std::thread::sleep(Duration::from_millis(100));
    let (j1, t1) = (clock.jiffies()?, std::time::Instant::now());
    let rate = (j1.saturating_sub(j0)) as f64 / (t1 - t0).as_secs_f64();
    let hz = [100u32, 250, 300, 1000]
        .into_iter()
        .min_by(|a, b| {
            (f64::from(*a) - rate)
                .abs()
                .total_cmp(&(f64::from(*b) - rate).abs())
        })
        .unwrap_or(250);
    Ok(*HZ.get_or_init(|| hz))
}

/// The kernel's jiffies counter now (the clock of [`maps::Flow::last_seen`]),
/// read through the `clock` program (loaded once per process).
pub fn jiffies_now() -> Result<u64, XdpError> {
    static CLOCK: std::sync::Mutex<Option<Loaded>> = std::sync::Mutex::new(None);
    let mut guard = CLOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if guard.is_none() {
        *guard = Some(Loaded::load(Object::Clock, &LoadOptions::default())?);
    }
    match guard.as_mut() {
        Some(clock) => clock.jiffies(),
        None => Err(XdpError::Missing {
            kind: "program",
            name: "clock",
        }),
    }
}
