//! Compiles `bpf/sock_lb.c` with clang into `OUT_DIR`.
//!
//! As rvs-xdp's build script: without clang or the libbpf headers the crate
//! still builds (a cargo warning, the cfg `rvs_no_bpf`, and loading returns
//! a clear error); with `CI` set a missing toolchain fails the build. A
//! compile error in the C source always fails the build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(rvs_no_bpf)");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=CLANG");
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("../../bpf");
    let src = bpf_dir.join("sock_lb.c");
    println!("cargo::rerun-if-changed={}", src.display());
    println!(
        "cargo::rerun-if-changed={}",
        bpf_dir.join("lib/map.h").display()
    );
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    if let Err(why) = toolchain_present(&clang) {
        if env::var_os("CI").is_some() {
            panic!(
                "CI is set and the BPF toolchain is missing: {why}; scripts/install-deps installs clang and libbpf-dev"
            );
        }
        println!(
            "cargo::warning=rvs-sock: {why}; building without the sock data plane (install clang and libbpf-dev and rebuild)"
        );
        println!("cargo::rustc-cfg=rvs_no_bpf");
        return;
    }
    let multiarch = multiarch();
    let obj = out.join("sock_lb.o");
    let output = Command::new(&clang)
        .args([
            "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror",
        ])
        .arg(format!("-I/usr/include/{multiarch}"))
        .arg("-I")
        .arg(&bpf_dir)
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
