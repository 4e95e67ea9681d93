//! Compiles `bpf/sock_lb.c` with clang into `OUT_DIR` (through
//! rvs-bpf-build: without the toolchain the crate builds with the cfg
//! `rvs_no_bpf`, and loading returns a clear error; with `CI` set a missing
//! toolchain fails the build).

use rvs_bpf_build::{Toolchain, bpf_dir, rerun_if_changed};

fn main() {
    let bpf = bpf_dir();
    for f in ["sock_lb.c", "sock.h", "rvs.h", "lib"] {
        rerun_if_changed(&bpf.join(f));
    }
    if let Some(clang) = Toolchain::find("rvs-sock", "the sock data plane") {
        clang.compile("sock_lb", "sock_lb", &[]);
    }
}
