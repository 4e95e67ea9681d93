//! What the verifier makes of the director: no map lookup or update and no
//! bpf_loop may be left to the generic helper. clang can merge calls of one helper from
//! sibling branches into one call taking the map or the callback in a
//! register; the verifier then keeps a real helper call, which reaches the
//! map or the callback through a retpoline (measured: +12 ns per packet on
//! the flow lookup, +600 ns for a wlc choice among 64 servers). Needs root
//! (the xlated program's call targets are kernel addresses); skips
//! otherwise.

mod common;

use std::collections::HashMap;

use rvs_xdp::{LoadOptions, Loaded, Object};

/// Kernel symbol addresses from /proc/kallsyms (zero when hidden).
fn kallsyms(names: &[&str]) -> HashMap<String, u64> {
    let text = std::fs::read_to_string("/proc/kallsyms").expect("/proc/kallsyms");
    let mut out = HashMap::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(addr), Some(_kind), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if it.next().is_none() && names.contains(&name) && !out.contains_key(name) {
            out.insert(name.to_owned(), u64::from_str_radix(addr, 16).unwrap_or(0));
        }
    }
    out
}

/// The helpers a call of the xlated program goes to, by name, for the
/// helpers in `watch` (a helper call is `BPF_JMP|BPF_CALL` with source 0,
/// its immediate the target's offset from `__bpf_call_base`).
fn calls_to(insns: &[[u8; 8]], syms: &HashMap<String, u64>, watch: &[&str]) -> Vec<String> {
    let base = syms["__bpf_call_base"];
    let mut out = Vec::new();
    for i in insns {
        let (code, src) = (i[0], i[1] >> 4);
        if code != 0x85 || src != 0 {
            continue;
        }
        let imm = i32::from_le_bytes([i[4], i[5], i[6], i[7]]);
        let target = base.wrapping_add(imm as i64 as u64);
        for w in watch {
            if syms.get(*w) == Some(&target) {
                out.push((*w).to_owned());
            }
        }
    }
    out
}

#[test]
fn no_map_call_or_loop_is_left_to_the_generic_helper() {
    if !common::root_or_skip("no_map_call_or_loop_is_left_to_the_generic_helper") {
        return;
    }
    // The generic helpers: a call to one of them means the verifier could
    // not tie the call to one map or one callback. (Direct calls of a map's
    // own lookup depend on the kernel version, e.g. per-CPU arrays are
    // inlined since 6.10, and are not what this guards against.)
    let watch = ["bpf_map_lookup_elem", "bpf_map_update_elem", "bpf_loop"];
    let mut names = vec![
        "__bpf_call_base",
        "htab_lru_map_update_elem",
        "htab_map_update_elem",
    ];
    names.extend(watch);
    let syms = kallsyms(&names);
    if syms.get("__bpf_call_base").copied().unwrap_or(0) == 0 {
        rvs_testbed::skip_or_fail(
            "no_map_call_or_loop_is_left_to_the_generic_helper",
            "kernel addresses hidden (/proc/kallsyms)",
        );
        return;
    }
    for object in [
        Object::Director,
        Object::DirectorBench,
        Object::DirectorCycle,
        Object::DirectorCycleMiss,
    ] {
        let mut l = match Loaded::load(
            object,
            &LoadOptions {
                flow_table_size: 4096,
                slots: 4096,
                ..LoadOptions::default()
            },
        ) {
            Ok(l) => l,
            Err(e) => panic!("{object:?}: {e}"),
        };
        // The director, then the programs it tail-calls (loaded with it):
        // FULLNAT's translations are plain hashes (fnat_rev, fnat_fwd);
        // QUIC-LB's NAT reply entry is an LRU update. The check sees calls:
        // each one's update stays a direct call, its lookups inlined.
        for (prog, min_insns, update) in [
            (None, 1000, "htab_lru_map_update_elem"),
            (Some("xdp_fnat"), 200, "htab_map_update_elem"),
            (Some("xdp_quic"), 200, "htab_lru_map_update_elem"),
        ] {
            let insns = match prog {
                None => l.translated(),
                Some(p) => l.translated_of(p),
            }
            .unwrap();
            let what = format!("{object:?} {}", prog.unwrap_or("director"));
            assert!(insns.len() > min_insns, "{what}: {} insns", insns.len());
            let all = calls_to(&insns, &syms, &[update]);
            assert!(!all.is_empty(), "{what}: no call resolved");
            let slow = calls_to(&insns, &syms, &watch);
            assert!(
                slow.is_empty(),
                "{what}: helper calls the verifier did not inline: {slow:?}"
            );
        }
    }
}
