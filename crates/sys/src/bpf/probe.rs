//! Naming the kernel feature a program lacks, after the kernel refused it.
//!
//! A kernel older than a program's needs refuses it with a verifier log
//! that rarely says why in words an operator can act on (Linux 5.10 answers
//! rvs's director with "number of funcs in func_info doesn't match number
//! of subprogs": its verifier does not know the callbacks of `bpf_loop`).
//! A plane whose load failed asks [`lacking`] which of the features it
//! needs this kernel has, each probed with a two-to-five-instruction
//! program as libbpf's `libbpf_probe_bpf_helper` does, and names the
//! missing ones with the kernel that added them ([`Lacking`]). The probes
//! run on that failure path only: a start that loads costs nothing more.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use super::{KernelVersion, bpf};

const BPF_PROG_LOAD: libc::c_long = 5;

/// `BPF_PROG_TYPE_*` of the probe programs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ProbeProgType {
    /// `BPF_PROG_TYPE_SOCKET_FILTER`.
    SocketFilter,
    /// `BPF_PROG_TYPE_XDP`.
    Xdp,
    /// `BPF_PROG_TYPE_CGROUP_SOCK` at `BPF_CGROUP_INET_SOCK_RELEASE`.
    CgroupSockRelease,
    /// `BPF_PROG_TYPE_CGROUP_SOCK_ADDR` at `BPF_CGROUP_INET4_CONNECT`.
    CgroupSockAddrConnect4,
    /// `BPF_PROG_TYPE_SOCK_OPS`.
    SockOps,
}

impl ProbeProgType {
    /// (`prog_type`, `expected_attach_type`).
    fn raw(self) -> (u32, u32) {
        match self {
            ProbeProgType::SocketFilter => (1, 0),
            ProbeProgType::Xdp => (6, 0),
            ProbeProgType::CgroupSockRelease => (9, 34),
            ProbeProgType::CgroupSockAddrConnect4 => (18, 10),
            ProbeProgType::SockOps => (13, 0),
        }
    }
}

/// How a [`Feature`] is probed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Probe {
    /// `BPF_ATOMIC` with `BPF_FETCH` (`r2 = atomic_fetch_add(...)`).
    AtomicFetch,
    /// Helper `id` callable from programs of this type.
    Helper(ProbeProgType, i32),
}

/// A kernel feature a BPF program may need: its name, the first Linux
/// release that has it, and how to tell whether the running kernel does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Feature {
    /// What an operator reads (`bpf_loop`).
    pub name: &'static str,
    /// The first Linux release with it (`5.17`).
    pub since: &'static str,
    probe: Probe,
}

impl Feature {
    /// The atomic fetch instructions (`BPF_ATOMIC | BPF_FETCH`: clang's
    /// `__sync_fetch_and_add` whose result is used), Linux 5.12.
    pub const ATOMIC_FETCH: Feature = Feature {
        name: "BPF atomic fetch instructions (__sync_fetch_and_add's result)",
        since: "5.12",
        probe: Probe::AtomicFetch,
    };

    /// Helper `name` (number `id`, added in Linux `since`) in programs of
    /// type `prog`.
    pub const fn helper(
        name: &'static str,
        id: i32,
        since: &'static str,
        prog: ProbeProgType,
    ) -> Feature {
        Feature {
            name,
            since,
            probe: Probe::Helper(prog, id),
        }
    }

    /// Whether the running kernel has it: `Err` when the probe itself
    /// could not tell (no privilege, no memory).
    pub fn present(&self) -> io::Result<bool> {
        match self.probe {
            Probe::AtomicFetch => {
                // *(u64 *)(r10 - 8) = 0; r2 = 1;
                // r2 = atomic_fetch_add((u64 *)(r10 - 8), r2); r0 = 0; exit
                let insns = [
                    insn(0x7a, 10, 0, -8, 0),
                    insn(0xb7, 2, 0, 0, 1),
                    insn(0xdb, 10, 2, -8, 0x01),
                    insn(0xb7, 0, 0, 0, 0),
                    insn(0x95, 0, 0, 0, 0),
                ];
                match load(ProbeProgType::SocketFilter, &insns, None) {
                    Ok(_) => Ok(true),
                    // 5.10: "BPF_XADD uses reserved fields".
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Probe::Helper(prog, id) => {
                // call id; exit: refused on every kernel (the arguments
                // are not set up), with "invalid func"/"unknown func"
                // where the helper does not exist for this program type.
                let insns = [insn(0x85, 0, 0, 0, id), insn(0x95, 0, 0, 0, 0)];
                let mut log = vec![0u8; 4096];
                match load(prog, &insns, Some(&mut log)) {
                    Ok(_) => Ok(true),
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => Err(e),
                    Err(_) => Ok(!helper_unknown(&log)),
                }
            }
        }
    }
}

/// Whether a helper probe's verifier log says the helper does not exist
/// for the program's type (libbpf reads the same phrases: older kernels
/// say "invalid func" or "unknown func", newer ones "program of this type
/// cannot use helper").
fn helper_unknown(log: &[u8]) -> bool {
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    [
        "invalid func ",
        "unknown func ",
        "program of this type cannot use helper ",
    ]
    .iter()
    .any(|p| text.contains(p))
}

/// One BPF instruction: opcode, dst and src registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let o = off.to_ne_bytes();
    let i = imm.to_ne_bytes();
    // The register byte: dst in the low nibble, src in the high one
    // (little-endian x86_64, rvs's only target).
    [
        code,
        (src << 4) | (dst & 0x0f),
        o[0],
        o[1],
        i[0],
        i[1],
        i[2],
        i[3],
    ]
}

/// The head of `union bpf_attr` for `BPF_PROG_LOAD`, up to
/// `expected_attach_type` (the kernel zero-fills the rest).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `BPF_PROG_LOAD` of `insns` (a GPL program); the verifier's log into
/// `log` when given.
fn load(prog: ProbeProgType, insns: &[[u8; 8]], log: Option<&mut Vec<u8>>) -> io::Result<OwnedFd> {
    let (prog_type, expected_attach_type) = prog.raw();
    let license = c"GPL";
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type,
        ..ProgLoadAttr::default()
    };
    attr.prog_name = *b"rvs_probe\0\0\0\0\0\0\0";
    if let Some(log) = log {
        attr.log_level = 1;
        attr.log_size = log.len() as u32;
        attr.log_buf = log.as_mut_ptr() as u64;
    }
    // SAFETY: `attr` is BPF_PROG_LOAD's attribute head; `insns` points at
    // `insn_cnt` 8-byte instructions, `license` at a NUL-terminated string
    // and `log_buf` (when set) at a live buffer of `log_size` bytes, all of
    // which outlive the call; the kernel reads the first two and writes at
    // most `log_size` bytes of the third.
    let fd = unsafe { bpf(BPF_PROG_LOAD, &mut attr) }?;
    // SAFETY: on success BPF_PROG_LOAD returns a new descriptor this
    // process owns; dropping it unloads the probe.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The features of a list the running kernel lacks, named with the kernel
/// that has them: "this kernel (5.10.262) lacks bpf_loop (Linux 5.17)".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lacking {
    /// The running kernel's version, when it could be read.
    pub kernel: Option<String>,
    /// What it lacks, in the order asked.
    pub features: Vec<Feature>,
}

impl std::fmt::Display for Lacking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kernel {
            Some(v) => write!(f, "this kernel ({v}) lacks ")?,
            None => write!(f, "this kernel lacks ")?,
        }
        for (i, x) in self.features.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} (Linux {})", x.name, x.since)?;
        }
        Ok(())
    }
}

/// Probe each of `features` (a program's needs, after the kernel refused
/// it): `Ok(None)` when the kernel has them all (the refusal has another
/// cause), `Err` when a probe could not tell.
pub fn lacking(features: &[Feature]) -> io::Result<Option<Lacking>> {
    let mut missing = Vec::new();
    for f in features {
        if !f.present()? {
            missing.push(*f);
        }
    }
    if missing.is_empty() {
        return Ok(None);
    }
    Ok(Some(Lacking {
        kernel: KernelVersion::current().ok().map(|v| v.to_string()),
        features: missing,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_each_feature_with_its_kernel() {
        let l = Lacking {
            kernel: Some("5.10.262".into()),
            features: vec![
                Feature::ATOMIC_FETCH,
                Feature::helper("bpf_loop", 181, "5.17", ProbeProgType::Xdp),
            ],
        };
        assert_eq!(
            l.to_string(),
            "this kernel (5.10.262) lacks BPF atomic fetch instructions \
             (__sync_fetch_and_add's result) (Linux 5.12), bpf_loop (Linux 5.17)"
        );
        let l = Lacking {
            kernel: None,
            features: vec![Feature::helper("bpf_loop", 181, "5.17", ProbeProgType::Xdp)],
        };
        assert_eq!(l.to_string(), "this kernel lacks bpf_loop (Linux 5.17)");
    }

    #[test]
    fn reads_the_verifier_log_as_libbpf_does() {
        let mut log =
            b"0: R1=ctx(off=0,imm=0) R10=fp0\n0: (85) call unknown#181\ninvalid func unknown#181\n"
                .to_vec();
        log.extend([0u8; 16]);
        assert!(helper_unknown(&log));
        assert!(helper_unknown(
            b"0: (85) call bpf_skb_store_bytes#9\nprogram of this type cannot use helper bpf_skb_store_bytes#9\n"
        ));
        assert!(!helper_unknown(
            b"0: (85) call bpf_loop#181\nR1 !read_ok\n\0garbage invalid func "
        ));
    }

    #[test]
    fn encodes_instructions() {
        // r2 = atomic_fetch_add((u64 *)(r10 - 8), r2)
        assert_eq!(
            insn(0xdb, 10, 2, -8, 1),
            [0xdb, 0x2a, 0xf8, 0xff, 1, 0, 0, 0]
        );
    }

    /// On this machine's kernel (6.18) every feature rvs's planes use is
    /// there; root only (BPF_PROG_LOAD).
    #[test]
    fn this_kernel_has_them() {
        if !rvs_testbed::is_root() {
            rvs_testbed::skip_or_fail("this_kernel_has_them", "BPF_PROG_LOAD needs root");
            return;
        }
        for f in [
            Feature::ATOMIC_FETCH,
            Feature::helper("bpf_loop", 181, "5.17", ProbeProgType::Xdp),
            Feature::helper("bpf_xdp_load_bytes", 189, "5.18", ProbeProgType::Xdp),
            Feature::helper(
                "bpf_loop",
                181,
                "5.17",
                ProbeProgType::CgroupSockAddrConnect4,
            ),
            Feature::helper(
                "bpf_get_socket_cookie",
                46,
                "5.?",
                ProbeProgType::CgroupSockRelease,
            ),
        ] {
            assert!(f.present().expect("probe"), "{f:?}");
        }
        assert_eq!(lacking(&[Feature::ATOMIC_FETCH]).expect("probe"), None);
        // A helper no kernel has for XDP (bpf_skb_store_bytes is for
        // socket buffers) reads as missing: the probe does tell.
        let none = Feature::helper("bpf_skb_store_bytes", 9, "never", ProbeProgType::Xdp);
        assert!(!none.present().expect("probe"));
    }
}
