//! Run-time statistics of loaded programs: `BPF_ENABLE_STATS` and the
//! `run_time_ns` / `run_cnt` of `struct bpf_prog_info`, for benchmarks that
//! read what the kernel itself measured of each program that ran.

use std::os::fd::OwnedFd;

use super::Error;

/// `BPF_PROG_TYPE_XDP`.
const PROG_TYPE_XDP: u32 = 6;

/// While this lives the kernel times every BPF program run (two clock
/// reads per run, added to its `run_time_ns`, and counts it in `run_cnt`);
/// dropped, it stops (unless another holder or the sysctl
/// `kernel.bpf_stats_enabled` keeps it on).
#[derive(Debug)]
pub struct RunTimeStats {
    /// Statistics stay on while this descriptor is open.
    _fd: OwnedFd,
}

impl RunTimeStats {
    /// `BPF_ENABLE_STATS(BPF_STATS_RUN_TIME)` (Linux 5.8, `CAP_SYS_ADMIN`).
    pub fn enable() -> Result<Self, Error> {
        aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .map(|fd| RunTimeStats { _fd: fd })
            .map_err(|e| Error::Syscall {
                call: "bpf_enable_stats",
                source: e.io_error,
            })
    }
}

/// One loaded program's identity and run-time statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramStats {
    /// The kernel's program id.
    pub id: u32,
    /// Its name (as loaded, at most 15 bytes).
    pub name: String,
    /// An XDP program.
    pub xdp: bool,
    /// Nanoseconds spent in its runs while statistics were on.
    pub run_time_ns: u64,
    /// Its runs while statistics were on.
    pub run_count: u64,
}

/// The statistics of every loaded program (those the kernel lets this
/// process see), in id order; programs that vanish while listed are left
/// out.
pub fn program_stats() -> Vec<ProgramStats> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|p| ProgramStats {
            id: p.id(),
            name: p.name_as_str().unwrap_or("").to_owned(),
            xdp: p.program_type() as u32 == PROG_TYPE_XDP,
            run_time_ns: u64::try_from(p.run_time().as_nanos()).unwrap_or(u64::MAX),
            run_count: p.run_count(),
        })
        .collect()
}
