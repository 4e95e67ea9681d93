//! Compiles the BPF programs under `bpf/` with clang into `OUT_DIR`.
//!
//! The production objects (the director `xdp_lb`, `clock`, the decapsulator
//! `decap`, the real servers' TOA reader `toa`, the real servers' DSR
//! option programs `dsr_rs`) are always built; the benchmark objects (`BENCH_PROGRAMS`)
//! only with the cargo feature `bench` (which the crate's own tests, benches
//! and examples turn on through its self dev-dependency), so rvsd neither
//! compiles nor embeds them.
//!
//! Through rvs-bpf-build: without clang (or without the libbpf headers)
//! the crate still builds with the cfg `rvs_no_bpf` (loading a program then
//! returns a clear error); with `CI` set a missing toolchain fails the build.

use std::env;

use rvs_bpf_build::{Toolchain, bpf_dir, rerun_if_changed};

/// The production objects: `(output stem, source stem, extra clang flags)`.
/// `xdp_lb` is the director (`bpf/xdp_lb.c` over `bpf/lib/*.h`), `clock`
/// reads jiffies (`kernel_hz`), `decap` the real servers' decapsulator.
const PROGRAMS: &[Build<'static>] = &[
    ("xdp_lb", "xdp_lb", &[]),
    ("clock", "clock", &[]),
    ("decap", "decap", &[]),
    ("toa", "toa", &[]),
    ("dsr_rs", "dsr_rs", &[]),
];

/// The benchmark objects, built only with the feature `bench`. The director
/// variants are their own sources, which set benchmark hooks and include the
/// director (so the production object holds no benchmark code):
/// `xdp_lb_bench` a different client per run (the new-flow benchmark),
/// `xdp_lb_cycle` cycling through N client keys (the many-flows established
/// benchmark, `bpf/bench_cycle.h`), `xdp_lb_cycle_miss` the same with every
/// flow-cache entry born stale. `bench_tx` and `bench_lru*` are the floors
/// the benchmark compares the director with. `ref_lb` is the wire benchmark's
/// minimal reference balancer and `ref_pass` its XDP_PASS floor
/// (`scripts/bench-wire`). They are never loaded outside the benchmarks.
const BENCH_PROGRAMS: &[Build<'static>] = &[
    ("xdp_lb_bench", "xdp_lb_bench", &[]),
    ("xdp_lb_cycle", "xdp_lb_cycle", &[]),
    ("xdp_lb_cycle_miss", "xdp_lb_cycle_miss", &[]),
    ("bench_tx", "bench_tx", &[]),
    ("bench_lru", "bench_lru", &[]),
    ("bench_lru_hit", "bench_lru", &["-DBENCH_LRU_HIT"]),
    (
        "bench_lru_cycle",
        "bench_lru",
        &["-DBENCH_LRU_HIT", "-DRVS_BENCH_CYCLE_FLOWS"],
    ),
    ("ref_lb", "ref_lb", &[]),
    ("ref_pass", "ref_lb", &["-DREF_PASS"]),
];

fn main() {
    let bpf_dir = bpf_dir();
    // Cargo sets `CARGO_FEATURE_<NAME>` for each enabled feature.
    let bench = env::var_os("CARGO_FEATURE_BENCH").is_some();
    let mut programs = PROGRAMS.to_vec();
    // The director with a different tag, for the restart tests' upgrade.
    if env::var_os("CARGO_FEATURE_UPGRADE_PROBE").is_some() {
        programs.push(("xdp_lb_probe", "xdp_lb_probe", &[]));
    }
    // The tests' TOA writer (a fixture, never in rvsd).
    if env::var_os("CARGO_FEATURE_TEST_FIXTURES").is_some() {
        programs.push(("toa_test_writer", "toa_test_writer", &[]));
        // The director's TOA insertion (bpf/lib/toa_insert.h) alone.
        programs.push(("toa_insert_test", "toa_insert_test", &[]));
    }
    let mut headers = vec!["rvs.h", "decap.h", "toa.h", "dsr_rs.h", "lib"];
    if bench {
        programs.extend_from_slice(BENCH_PROGRAMS);
        headers.push("bench_cycle.h");
    }
    for header in headers {
        rerun_if_changed(&bpf_dir.join(header));
    }
    for (_, src, _) in &programs {
        rerun_if_changed(&bpf_dir.join(format!("{src}.c")));
    }
    let Some(clang) = Toolchain::find("rvs-xdp", "the XDP data plane") else {
        return;
    };
    for (name, src, flags) in programs {
        clang.compile(name, src, flags);
    }
}

/// One object: `(output stem, source stem, extra flags)`.
type Build<'a> = (&'a str, &'a str, &'a [&'a str]);
