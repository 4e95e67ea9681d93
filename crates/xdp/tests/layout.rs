//! The Rust mirrors in `maps.rs` against the truth: the BTF of the compiled
//! object (sizes and every field offset, as Cilium's alignchecker does) and
//! the `#define`s of `bpf/rvs.h`. No root needed.

use btf_rs::{Btf, Type};
use object::{Object, ObjectSection};
use rvs_xdp::maps::{self, Layout, layouts};

/// The `.BTF` section of a compiled object.
fn btf_of(obj: rvs_xdp::Object) -> Option<Btf> {
    let bytes = match obj.bytes() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipping: {e}");
            return None;
        }
    };
    let elf = object::File::parse(bytes).expect("object parses");
    let sec = elf.section_by_name(".BTF").expect("object has BTF (-g)");
    Some(Btf::from_bytes(sec.data().expect("BTF data")).expect("BTF parses"))
}

/// Compare one Rust layout with the struct of the same name in the BTF.
fn check(btf: &Btf, l: &Layout) -> Result<(), String> {
    let types = btf
        .resolve_types_by_name(l.c_name)
        .map_err(|e| format!("{}: not in BTF: {e}", l.c_name))?;
    let s = types
        .iter()
        .find_map(|t| match t {
            Type::Struct(s) => Some(s),
            _ => None,
        })
        .ok_or_else(|| format!("{}: no struct of that name", l.c_name))?;
    if s.size() != l.size {
        return Err(format!("{}: size C {} Rust {}", l.c_name, s.size(), l.size));
    }
    if s.members.len() != l.fields.len() {
        return Err(format!(
            "{}: {} fields in C, {} in Rust",
            l.c_name,
            s.members.len(),
            l.fields.len()
        ));
    }
    for (m, (name, off)) in s.members.iter().zip(&l.fields) {
        let cname = btf.resolve_name(m).map_err(|e| e.to_string())?;
        if cname != *name {
            return Err(format!("{}: field C `{cname}` vs Rust `{name}`", l.c_name));
        }
        if m.bit_offset() as usize != off * 8 {
            return Err(format!(
                "{}.{name}: offset C {} Rust {off}",
                l.c_name,
                m.bit_offset() / 8
            ));
        }
    }
    Ok(())
}

#[test]
fn btf_layout_matches_rust_mirrors() {
    let Some(btf) = btf_of(rvs_xdp::Object::Director) else {
        return;
    };
    let all = layouts();
    assert_eq!(all.len(), 18, "every struct of rvs.h is mirrored");
    for l in &all {
        check(&btf, l).unwrap();
    }
}

#[test]
fn own_mac_table_layout_matches_btf_and_header() {
    let Some(btf) = btf_of(rvs_xdp::Object::Director) else {
        return;
    };
    for l in &rvs_xdp::own_mac::layouts() {
        check(&btf, l).unwrap();
    }
    let max = header_defines()
        .into_iter()
        .find(|(n, _)| n == "RVS_OWN_MACS_MAX")
        .map(|(_, v)| v);
    assert_eq!(max, Some(rvs_xdp::own_mac::OWN_MACS_MAX as u64));
}

#[test]
fn btf_layout_check_catches_swapped_fields() {
    let Some(btf) = btf_of(rvs_xdp::Object::Director) else {
        return;
    };
    // What the layout of `Dest` would be with `port` and `family` swapped
    // (family: u8 at 16, port: u16 at 18).
    let mut l = layouts()
        .into_iter()
        .find(|l| l.c_name == "rvs_dest")
        .unwrap();
    l.fields[1] = ("family", 16);
    l.fields[2] = ("port", 18);
    assert!(check(&btf, &l).is_err());
    // Same names, offsets of two same-sized fields swapped.
    let mut l = layouts()
        .into_iter()
        .find(|l| l.c_name == "rvs_svc")
        .unwrap();
    l.fields.swap(4, 5);
    let err = check(&btf, &l).unwrap_err();
    assert!(err.contains("field"), "{err}");
    let mut l = layouts()
        .into_iter()
        .find(|l| l.c_name == "rvs_svc")
        .unwrap();
    let (a, b) = (l.fields[4].1, l.fields[5].1);
    l.fields[4].1 = b;
    l.fields[5].1 = a;
    let err = check(&btf, &l).unwrap_err();
    assert!(err.contains("offset"), "{err}");
}

/// `#define NAME VALUE` lines of rvs.h with a plain integer value (decimal,
/// hex, optional u/ull suffix, or `(1u << N)`).
fn header_defines() -> Vec<(String, u64)> {
    let h = include_str!("../../../bpf/rvs.h");
    let mut out = Vec::new();
    for line in h.lines() {
        let mut it = line.split_whitespace();
        if it.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(first)) = (it.next(), it.next()) else {
            continue;
        };
        let value = if first.starts_with("(1u") {
            let shift: String = it.next().into_iter().chain(it.next()).collect();
            shift
                .trim_start_matches("<<")
                .trim_end_matches(')')
                .parse::<u32>()
                .ok()
                .map(|s| 1u64 << s)
        } else {
            let v = first.trim_end_matches(['u', 'U', 'l', 'L']);
            match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => v.parse().ok(),
            }
        };
        if let Some(v) = value {
            out.push((name.to_owned(), v));
        }
    }
    out
}

#[test]
fn header_constants_match_rust() {
    use maps::{dest_flags, fwd, sched, svc_flags};
    let want: &[(&str, u64)] = &[
        ("RVS_MAX_SERVICES", maps::MAX_SERVICES.into()),
        ("RVS_MAX_DESTS", maps::MAX_DESTS.into()),
        ("RVS_SLOTS_DEFAULT", maps::SLOTS_DEFAULT.into()),
        ("RVS_FLOWS_DEFAULT", maps::FLOWS_DEFAULT.into()),
        ("RVS_MAX_SVC_DESTS", maps::MAX_SVC_DESTS.into()),
        ("RVS_SLOT_EMPTY", maps::SLOT_EMPTY.into()),
        ("RVS_AF_INET", maps::AF_INET.into()),
        ("RVS_AF_INET6", maps::AF_INET6.into()),
        ("RVS_PROTO_TCP", maps::PROTO_TCP.into()),
        ("RVS_PROTO_UDP", maps::PROTO_UDP.into()),
        ("RVS_SCHED_NONE", sched::NONE.into()),
        ("RVS_SCHED_RR", sched::RR.into()),
        ("RVS_SCHED_WRR", sched::WRR.into()),
        ("RVS_SCHED_LC", sched::LC.into()),
        ("RVS_SCHED_WLC", sched::WLC.into()),
        ("RVS_SCHED_LBLC", sched::LBLC.into()),
        ("RVS_SCHED_LBLCR", sched::LBLCR.into()),
        ("RVS_SCHED_DH", sched::DH.into()),
        ("RVS_SCHED_SH", sched::SH.into()),
        ("RVS_SCHED_SED", sched::SED.into()),
        ("RVS_SCHED_NQ", sched::NQ.into()),
        ("RVS_SCHED_FO", sched::FO.into()),
        ("RVS_SCHED_OVF", sched::OVF.into()),
        ("RVS_SCHED_MH", sched::MH.into()),
        ("RVS_SCHED_TWOS", sched::TWOS.into()),
        ("RVS_FWD_NAT", fwd::NAT.into()),
        ("RVS_FWD_DR", fwd::DR.into()),
        ("RVS_FWD_TUN_IPIP", fwd::TUN_IPIP.into()),
        ("RVS_FWD_TUN_GUE", fwd::TUN_GUE.into()),
        ("RVS_SVC_F_PERSISTENT", svc_flags::PERSISTENT.into()),
        ("RVS_SVC_F_HASHED", svc_flags::HASHED.into()),
        ("RVS_SVC_F_ONEPACKET", svc_flags::ONEPACKET.into()),
        ("RVS_SVC_F_SCHED1", svc_flags::SCHED1.into()),
        ("RVS_SVC_F_SCHED2", svc_flags::SCHED2.into()),
        ("RVS_DEST_F_UNAVAILABLE", dest_flags::UNAVAILABLE.into()),
        ("RVS_DEST_F_OVERLOADED", dest_flags::OVERLOADED.into()),
        ("RVS_CFG_F_NAT", maps::CFG_F_NAT.into()),
        ("RVS_FLOW_F_NOOUTPUT", maps::FLOW_F_NOOUTPUT.into()),
        ("RVS_TCP_S_LAST", maps::TCP_S_LAST as u64),
        ("RVS_GUE_HDR_LEN", maps::GUE_HDR_LEN as u64),
        ("RVS_TUN_TTL", maps::TUN_TTL.into()),
        ("RVS_FLOW_CACHE_SIZE", maps::FLOW_CACHE_SIZE.into()),
        ("RVS_FLOW_EPOCHS", maps::FLOW_EPOCHS.into()),
        ("RVS_FLOW_CACHE_JIFFIES", maps::FLOW_CACHE_JIFFIES),
        ("RVS_FLOW_CACHE_SEED", maps::FLOW_CACHE_SEED),
        ("RVS_FLOW_CACHE_MUL", maps::FLOW_CACHE_MUL),
    ];
    let defs = header_defines();
    for (name, v) in want {
        let got = defs.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        assert_eq!(got, Some(*v), "{name}");
    }
    // Scheduler ids follow the core's names.
    for (i, n) in rvs_core::sched::SCHEDULER_NAMES.iter().enumerate() {
        assert_eq!(sched::id(n), Some(i as u8 + 1));
    }
}
