//! Compiles the BPF programs under `bpf/` with clang into `OUT_DIR`.
//!
//! The production objects (the director `xdp_lb`, `clock`, the decapsulator
//! `decap`, the real servers' TOA reader `toa`) are always built; the benchmark objects (`BENCH_PROGRAMS`)
//! only with the cargo feature `bench` (which the crate's own tests, benches
//! and examples turn on through its self dev-dependency), so rvsd neither
//! compiles nor embeds them.
//!
//! Without clang (or without the libbpf headers) the crate still builds, so a
//! newcomer can build rvsd for the proxy data plane: a cargo warning is
//! printed and the cfg `rvs_no_bpf` is set, and loading a program then
//! returns a clear error. With the environment variable `CI` set, a missing
//! toolchain fails the build instead, so CI can never silently skip the BPF
//! tests. A compile error in the C sources always fails the build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The production objects: `(output stem, source stem, extra clang flags)`.
/// `xdp_lb` is the director (`bpf/xdp_lb.c` over `bpf/lib/*.h`), `clock`
/// reads jiffies (`kernel_hz`), `decap` the real servers' decapsulator.
const PROGRAMS: &[Build<'static>] = &[
    ("xdp_lb", "xdp_lb", &[]),
    ("clock", "clock", &[]),
    ("decap", "decap", &[]),
    ("toa", "toa", &[]),
];

/// The benchmark objects, built only with the feature `bench`. The director
/// variants are their own sources, which set benchmark hooks and include the
/// director (so the production object holds no benchmark code):
/// `xdp_lb_bench` a different client per run (the new-flow benchmark),
/// `xdp_lb_cycle` cycling through N client keys (the many-flows established
/// benchmark, `bpf/bench_cycle.h`), `xdp_lb_cycle_miss` the same with every
/// flow-cache entry born stale. `bench_tx` and `bench_lru*` are the floors
/// the benchmark compares the director with. They are never loaded outside
/// the benchmark.
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
];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(rvs_no_bpf)");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=CLANG");
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("../../bpf");
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
    let mut headers = vec!["rvs.h", "decap.h", "toa.h", "lib"];
    if bench {
        programs.extend_from_slice(BENCH_PROGRAMS);
        headers.push("bench_cycle.h");
    }
    for header in headers {
        println!("cargo::rerun-if-changed={}", bpf_dir.join(header).display());
    }
    for (_, src, _) in &programs {
        println!(
            "cargo::rerun-if-changed={}",
            bpf_dir.join(format!("{src}.c")).display()
        );
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());

    if let Err(why) = toolchain_present(&clang) {
        if env::var_os("CI").is_some() {
            panic!(
                "CI is set and the BPF toolchain is missing: {why}; scripts/install-deps installs clang and libbpf-dev"
            );
        }
        println!(
            "cargo::warning=rvs-xdp: {why}; building without the XDP data plane (install clang and libbpf-dev and rebuild)"
        );
        println!("cargo::rustc-cfg=rvs_no_bpf");
        return;
    }
    let multiarch = multiarch();
    for build in programs {
        compile(&clang, &bpf_dir, &out, build, &multiarch);
    }
}

/// Ok when clang runs and the libbpf headers are installed.
fn toolchain_present(clang: &str) -> Result<(), String> {
    match Command::new(clang).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => return Err(format!("`{clang}` not found")),
    }
    let has_headers = ["/usr/include", "/usr/local/include"]
        .iter()
        .any(|d| Path::new(d).join("bpf/bpf_helpers.h").exists());
    if has_headers {
        Ok(())
    } else {
        Err("libbpf headers (bpf/bpf_helpers.h) not found".to_owned())
    }
}

/// The Debian multiarch include directory name (`asm/types.h` lives there).
fn multiarch() -> String {
    if let Ok(o) = Command::new("gcc").arg("-print-multiarch").output()
        && o.status.success()
    {
        let s = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        if !s.is_empty() {
            return s;
        }
    }
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".to_owned());
    format!("{arch}-linux-gnu")
}

/// One object: `(output stem, source stem, extra flags)`.
type Build<'a> = (&'a str, &'a str, &'a [&'a str]);

fn compile(clang: &str, bpf_dir: &Path, out: &Path, build: Build<'_>, multiarch: &str) {
    let (name, src, flags) = build;
    let src = bpf_dir.join(format!("{src}.c"));
    let obj = out.join(format!("{name}.o"));
    let output = Command::new(clang)
        .args([
            "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror",
        ])
        .args(flags)
        .arg(format!("-I/usr/include/{multiarch}"))
        .arg("-I")
        .arg(bpf_dir)
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .unwrap_or_else(|e| panic!("running {clang}: {e}"));
    if !output.status.success() {
        panic!(
            "clang failed on {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
