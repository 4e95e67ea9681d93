//! # rvs-bpf-build
//!
//! The build-script side of the crates that embed BPF objects (rvs-xdp,
//! rvs-sock): one clang invocation and one toolchain check instead of a
//! copy in each `build.rs`.
//!
//! Without clang (or without the libbpf headers) such a crate still builds,
//! so a newcomer can build rvsd for the proxy data plane: [`Toolchain::find`]
//! prints a cargo warning, sets the cfg `rvs_no_bpf` (loading a program then
//! returns a clear error) and returns `None`. With the environment variable
//! `CI` set, a missing toolchain fails the build instead, so CI can never
//! silently skip the BPF tests. A compile error in the C sources always
//! fails the build.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's `bpf/` directory, seen from the building crate
/// (`crates/NAME`).
pub fn bpf_dir() -> PathBuf {
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    manifest.join("../../bpf")
}

/// Tell cargo to run the build script again when `path` changes.
pub fn rerun_if_changed(path: &Path) {
    println!("cargo::rerun-if-changed={}", path.display());
}

/// clang with the libbpf headers, ready to compile `bpf/*.c` into OUT_DIR.
#[derive(Debug, Clone)]
pub struct Toolchain {
    clang: String,
    multiarch: String,
    bpf_dir: PathBuf,
    out: PathBuf,
}

impl Toolchain {
    /// The toolchain (`$CLANG` or `clang`), or `None` after the warning and
    /// the cfg `rvs_no_bpf` when it is missing; `crate_name` and `without`
    /// (what the crate lacks then, e.g. "the XDP data plane") word the
    /// warning.
    ///
    /// # Panics
    /// When the toolchain is missing and `CI` is set.
    pub fn find(crate_name: &str, without: &str) -> Option<Toolchain> {
        println!("cargo::rustc-check-cfg=cfg(rvs_no_bpf)");
        println!("cargo::rerun-if-env-changed=CI");
        println!("cargo::rerun-if-env-changed=CLANG");
        let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
        if let Err(why) = toolchain_present(&clang) {
            if env::var_os("CI").is_some() {
                panic!(
                    "CI is set and the BPF toolchain is missing: {why}; scripts/install-deps installs clang and libbpf-dev"
                );
            }
            println!(
                "cargo::warning={crate_name}: {why}; building without {without} (install clang and libbpf-dev and rebuild)"
            );
            println!("cargo::rustc-cfg=rvs_no_bpf");
            return None;
        }
        Some(Toolchain {
            clang,
            multiarch: multiarch(),
            bpf_dir: bpf_dir(),
            out: PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")),
        })
    }

    /// Compile `bpf/{src}.c` with the extra `flags` into `OUT_DIR/{name}.o`
    /// (`-O2 -g -target bpf -mcpu=v3 -Wall -Werror`, `bpf/` on the include
    /// path).
    ///
    /// # Panics
    /// When clang cannot run or fails (the build fails with its output).
    pub fn compile(&self, name: &str, src: &str, flags: &[&str]) {
        let src = self.bpf_dir.join(format!("{src}.c"));
        let obj = self.out.join(format!("{name}.o"));
        let output = Command::new(&self.clang)
            .args([
                "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror",
            ])
            .args(flags)
            .arg(format!("-I/usr/include/{}", self.multiarch))
            .arg("-I")
            .arg(&self.bpf_dir)
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.clang));
        if !output.status.success() {
            panic!(
                "clang failed on {}:\n{}",
                src.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
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
