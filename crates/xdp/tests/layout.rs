//! The C/Rust ABI, checked from the C side's truth (no root needed):
//!
//! - every struct of the compiled objects' BTF (the director `xdp_lb.o`,
//!   the decapsulator `decap.o`, the TOA reader `toa.o` and the sock plane's
//!   `sock_lb.o`, whose mirrors are in rvs-sock) named `rvs_*`, used as a map key or value,
//!   or nested in one of those, has a Rust mirror with the same size and, for
//!   every member in order, the same name, offset, width and signedness
//!   (arrays: element type and length; nested structs: the mirror's name);
//! - every `RVS_*` constant (`#define` in any header under `bpf/`, and enum
//!   values in the BTF) has a Rust counterpart with the same value;
//! - the program's TCP state table `tcp_states`, read from the object's
//!   `.rodata`, equals rvs-core's state machine over every state, flag class
//!   and direction.
//!
//! The mirror list below names each Rust type once; the test enumerates the
//! C side and fails naming whatever has no counterpart, so nothing here is a
//! count to keep in step by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::mem::offset_of;
use std::path::{Path, PathBuf};

use btf_rs::{Btf, BtfType, Type};
use object::{Object as _, ObjectSection, ObjectSymbol};
use rvs_core::sched::Scheduler;
use rvs_core::state::{Direction, TcpFlags, TcpState, UdpState, tcp_next};
use rvs_xdp::decap::{self, DecapConfig, DecapVip};
use rvs_xdp::dsr_rs::{self, DsrKey, DsrSvc};
use rvs_xdp::maps::{
    self, Config, Dest, DestConns, Flood, Flow, Flow4Key, Flow6Cache, FlowCache, FlowKey, Locality,
    LocalityKey, Nat, NatKey, NhKey, Persist, PersistKey, SrcKey, Stats, Svc, SvcFlood, SvcKey,
};
use rvs_xdp::maps::{Fnat, FnatKey, FnatPool, FnatStats, FnatTmp};
use rvs_xdp::own_mac::{self, OwnMac, OwnMacTable};
use rvs_xdp::quic_lb::{self, QuicCfg, QuicSidKey, QuicStats, QuicSvc};
use rvs_xdp::toa::{self, ToaAddr};

use rvs_sock::maps as sock;
use rvs_sock::maps::{
    Dest as SockDest, DestStats as SockDestStats, Persist as SockPersist,
    PersistKey as SockPersistKey, SockRec, Svc as SockSvc, SvcKey as SockSvcKey,
};

// ------------------------------------------------------------- the types

/// A member's type as both sides describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ty {
    /// An integer (C: BTF `INT` through typedefs such as `__be16`; an enum
    /// counts as its integer).
    Int { bytes: usize, signed: bool },
    /// `T[N]` / `[T; N]`.
    Array(Box<Ty>, usize),
    /// A struct, by its C name (its own layout is checked on its own).
    Struct(String),
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Int { bytes, signed } => {
                write!(f, "{}{}", if *signed { 'i' } else { 'u' }, bytes * 8)
            }
            Ty::Array(t, n) => write!(f, "[{t}; {n}]"),
            Ty::Struct(n) => write!(f, "struct {n}"),
        }
    }
}

/// The Rust side's description of a type.
trait Abi {
    fn ty() -> Ty;
}

macro_rules! abi_int {
    ($($t:ty),*) => {$(
        impl Abi for $t {
            fn ty() -> Ty {
                Ty::Int { bytes: size_of::<$t>(), signed: <$t>::MIN != 0 }
            }
        }
    )*};
}
abi_int!(u8, u16, u32, u64, i8, i16, i32, i64);

impl<T: Abi, const N: usize> Abi for [T; N] {
    fn ty() -> Ty {
        Ty::Array(Box::new(T::ty()), N)
    }
}

/// The type of the field a projection closure returns.
fn ty_of<S, T: Abi>(_: impl Fn(&S) -> &T) -> Ty {
    T::ty()
}

/// A Rust mirror as the compiler laid it out.
#[derive(Clone, Debug)]
struct Mirror {
    c_name: &'static str,
    rust: &'static str,
    size: usize,
    members: Vec<(&'static str, usize, Ty)>,
}

/// `"c_name" => RustType { every, field, in, order }`. The struct pattern
/// without `..` makes leaving a Rust field out of the list a compile error.
macro_rules! mirrors {
    ($($c:literal => $t:ident { $($f:ident),* $(,)? })*) => {
        $(impl Abi for $t {
            fn ty() -> Ty {
                Ty::Struct($c.to_owned())
            }
        })*

        fn mirrors() -> Vec<Mirror> {
            vec![$({
                let _every_field_listed = |v: &$t| {
                    let $t { $($f: _),* } = v;
                };
                Mirror {
                    c_name: $c,
                    rust: stringify!($t),
                    size: size_of::<$t>(),
                    members: vec![$(
                        (stringify!($f), offset_of!($t, $f), ty_of(|s: &$t| &s.$f))
                    ),*],
                }
            }),*]
        }
    };
}

mirrors! {
    "rvs_own_mac" => OwnMac { ifindex, mac, pad0 }
    "rvs_own_macs" => OwnMacTable { count, pad0, e }
    "rvs_svc_key" => SvcKey { proto, family, port, vip }
    "rvs_svc" => Svc {
        sched, family, pad0, flags, table_off, table_len, dests_off, dests_len,
        persist_timeout, persist_mask,
    }
    "rvs_dest" => Dest {
        addr, port, family, method, flags, weight, ifindex, mac, smac, gue_port, pad0,
    }
    "rvs_flow_key" => FlowKey { caddr, vaddr, cport, vport, proto, family, pad0 }
    "rvs_flow4_key" => Flow4Key { caddr, vaddr, cport, vport, proto, pad0, pad1 }
    "rvs_flow" => Flow { last_seen, dest, svc, state, flags, fnat_lport, fnat_laddr }
    "rvs_flow_cache" => FlowCache { key, stamp, dest, svc, epoch, pad0 }
    "rvs_flow6_cache" => Flow6Cache { key, stamp, dest, svc, epoch, pad0 }
    "rvs_nat_key" => NatKey { raddr, caddr, rport, cport, proto, family, pad0 }
    "rvs_nat" => Nat { vaddr, vport, pad0, svc, dest }
    "rvs_stats" => Stats { conns, inpkts, outpkts, inbytes, outbytes }
    "rvs_config" => Config {
        tun_src4, tun_src6, tcp_timeouts, udp_timeout, flags, hz, max_new_flows, tun_mtu,
        tun_vary4, tun_vary6, pad0, locality_expiration,
    }
    "rvs_flood" => Flood { second, count, completed, armed_until }
    "rvs_svc_flood" => SvcFlood { embryonic, promoted, guarded, unknown, adopted, refused }
    "rvs_src_key" => SrcKey { prefixlen, svc, addr }
    "rvs_dest_conns" => DestConns { active, inactive }
    "rvs_nh_key" => NhKey { addr, family, pad0 }
    "rvs_persist_key" => PersistKey { caddr, vaddr, vport, proto, family }
    "rvs_persist" => Persist { last_seen, dest, svc }
    "rvs_locality_key" => LocalityKey { svc, family, pad0, daddr }
    "rvs_locality" => Locality { lastuse, lastmod, count, members, pad0 }
    "rvs_decap_vip" => DecapVip { family, pad0, addr }
    "rvs_decap_config" => DecapConfig { gue_port, geneve_port, pad1 }
    "rvs_dsr_key" => DsrKey { caddr, baddr, cport, bport, proto, family, pad0 }
    "rvs_dsr_svc" => DsrSvc { addr, port, pad0 }
    "rvs_toa_addr" => ToaAddr { family, pad0, port, addr }
    "rvs_fnat_pool" => FnatPool { count, port_min, port_max, family, pad0, addrs }
    "rvs_fnat_key" => FnatKey { raddr, laddr, rport, lport, proto, family, pad0 }
    "rvs_fnat" => Fnat { caddr, vaddr, cport, vport, svc, dest, toa_ack }
    "rvs_fnat_tmp" => FnatTmp { kind, dest, svc, laddr, lport, table, flags, pad0 }
    "rvs_fnat_stats" => FnatStats {
        exhausted, allocated, toa_inserted, toa_noroom, toa_mtu, toa_error, mss_clamped,
        probes, icmp_to_rs, icmp_to_client, icmp_mtu_lowered
    }
    "rvs_quic_cfg" => QuicCfg { mode, sid_len, nonce_len, pad0, dk }
    "rvs_quic_svc" => QuicSvc { fallback_len, pad0, cfg }
    "rvs_quic_sid_key" => QuicSidKey { svc, len, sid }
    "rvs_quic_stats" => QuicStats { by_cid, by_fallback, undecodable }
    "rvs_sock_svc_key" => SockSvcKey { addr, port, proto, family }
    "rvs_sock_svc" => SockSvc {
        id, sched, flags, list_off, list_len, table_off, table_len, persist_secs,
    }
    "rvs_sock_dest" => SockDest { addr, port, family, flags, weight }
    "rvs_sock_dest_stats" => SockDestStats { active, total }
    "rvs_sock_rec" => SockRec { vip, dest, client, client_port, pad }
    "rvs_sock_persist_key" => SockPersistKey { svc, client }
    "rvs_sock_persist" => SockPersist { dest, pad, expires_ns }
}

/// Map value types only the program reads and writes (the control side
/// never touches these maps), with the reason: they need no mirror.
const PROGRAM_PRIVATE: &[(&str, &str)] = &[
    (
        "locality_scratch",
        "value of the per-CPU scratch map `locality_tmp` (lblc/lblcr working room)",
    ),
    (
        "quic_scratch",
        "value of the per-CPU scratch map `quic_tmp` (QUIC-LB decoding room, the service xdp_lb hands to xdp_quic)",
    ),
    (
        "csum_scratch",
        "value of the per-CPU scratch map `tun_csum_tmp` (the tunnel checksum's copy of a chunk)",
    ),
];

// --------------------------------------------------------------- the BTF

/// The objects whose ABI rvs-xdp mirrors: `(file name, bytes)`; `None` when
/// this build has no BPF objects (the crate was built without clang).
fn objects() -> Option<Vec<(&'static str, &'static [u8])>> {
    let director = match rvs_xdp::Object::Director.bytes() {
        Ok(b) => b,
        Err(e) => {
            rvs_testbed::skip_or_fail("layout of the BPF objects", e);
            return None;
        }
    };
    let decap = decap::object().expect("decap object built with the director");
    let toa = toa::object().expect("TOA reader object built with the director");
    let sock = rvs_sock::object().expect("sock_lb.o built with the director");
    Some(vec![
        ("xdp_lb.o", director),
        ("decap.o", decap),
        ("toa.o", toa),
        (
            "dsr_rs.o",
            dsr_rs::object().expect("DSR real-server object built with the director"),
        ),
        ("sock_lb.o", sock),
    ])
}

/// Skip (no BPF toolchain at build time), or fail where a skip must not hide.
/// The `.BTF` section of an object.
fn btf_of(bytes: &[u8]) -> Btf {
    let elf = object::File::parse(bytes).expect("object parses");
    let sec = elf.section_by_name(".BTF").expect("object has BTF (-g)");
    Btf::from_bytes(sec.data().expect("BTF data")).expect("BTF parses")
}

/// Every type of a BTF, by id.
fn all_types(btf: &Btf) -> Vec<Type> {
    (1..)
        .map_while(|id| btf.resolve_type_by_id(id).ok())
        .collect()
}

/// `t` with typedefs and qualifiers peeled off.
fn peel(btf: &Btf, mut t: Type) -> Type {
    loop {
        t = match &t {
            Type::Typedef(x) => btf.resolve_chained_type(x),
            Type::Const(x) | Type::Volatile(x) | Type::Restrict(x) => btf.resolve_chained_type(x),
            Type::TypeTag(x) => btf.resolve_chained_type(x),
            _ => return t,
        }
        .expect("chained type resolves");
    }
}

/// The type `r` refers to, peeled.
fn target<T: BtfType + ?Sized>(btf: &Btf, r: &T) -> Type {
    peel(
        btf,
        btf.resolve_chained_type(r).expect("chained type resolves"),
    )
}

fn name_of(btf: &Btf, t: &dyn BtfType) -> String {
    btf.resolve_name(t).unwrap_or_default()
}

/// A member type as C describes it.
fn c_ty(btf: &Btf, t: &Type) -> Result<Ty, String> {
    Ok(match t {
        Type::Int(i) => Ty::Int {
            bytes: i.size(),
            signed: i.is_signed(),
        },
        Type::Enum(e) => Ty::Int {
            bytes: e.size(),
            signed: e.is_signed(),
        },
        Type::Array(a) => Ty::Array(Box::new(c_ty(btf, &target(btf, a))?), a.len()),
        Type::Struct(s) => {
            let n = name_of(btf, s);
            if n.is_empty() {
                return Err("an anonymous struct (name it, so it can be mirrored)".into());
            }
            Ty::Struct(n)
        }
        other => return Err(format!("a {} (not mirrorable as plain data)", other.name())),
    })
}

/// A struct of the C side.
struct CStruct {
    size: usize,
    members: Vec<CMember>,
}

/// A member of a C struct.
struct CMember {
    name: String,
    bit_offset: u32,
    /// Bits, for a bitfield.
    bitfield: Option<u32>,
    /// Its type, or why it has none a mirror could match.
    ty: Result<Ty, String>,
}

fn c_struct(btf: &Btf, s: &btf_rs::Struct) -> CStruct {
    CStruct {
        size: s.size(),
        members: s
            .members
            .iter()
            .map(|m| CMember {
                name: name_of(btf, m),
                bit_offset: m.bit_offset(),
                bitfield: m.bitfield_size().filter(|&b| b != 0),
                ty: c_ty(btf, &target(btf, m)),
            })
            .collect(),
    }
}

/// The structs of one object that cross the C/Rust boundary: every struct
/// named `rvs_*`, every struct that is a key or value of a map in `.maps`,
/// and every struct nested in one of those. Program-private map values
/// ([`PROGRAM_PRIVATE`]) are left out, with what they contain.
fn shared_structs(btf: &Btf) -> BTreeMap<String, CStruct> {
    let types = all_types(btf);
    let mut todo: Vec<btf_rs::Struct> = Vec::new();
    for t in &types {
        match t {
            Type::Struct(s) if name_of(btf, s).starts_with("rvs_") => todo.push(s.clone()),
            Type::Datasec(ds) if name_of(btf, ds) == ".maps" => {
                for v in &ds.variables {
                    let Type::Var(var) = btf.resolve_chained_type(v).expect("datasec var") else {
                        continue;
                    };
                    let Type::Struct(def) = target(btf, &var) else {
                        continue;
                    };
                    for m in &def.members {
                        let field = name_of(btf, m);
                        if field != "key" && field != "value" {
                            continue;
                        }
                        // `__type(key, T)` is a pointer to T.
                        if let Type::Ptr(p) = target(btf, m)
                            && let Type::Struct(s) = target(btf, &p)
                        {
                            todo.push(s);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    while let Some(s) = todo.pop() {
        let name = name_of(btf, &s);
        if out.contains_key(&name) || PROGRAM_PRIVATE.iter().any(|(n, _)| *n == name) {
            continue;
        }
        for m in &s.members {
            let mut t = target(btf, m);
            while let Type::Array(a) = t {
                t = target(btf, &a);
            }
            if let Type::Struct(inner) = t {
                todo.push(inner);
            }
        }
        out.insert(name, c_struct(btf, &s));
    }
    out
}

/// Every difference between a C struct and its mirror.
fn compare(obj: &str, name: &str, c: &CStruct, r: &Mirror) -> Vec<String> {
    let at = format!("{obj}: struct {name} vs {}", r.rust);
    let mut errs = Vec::new();
    if c.size != r.size {
        errs.push(format!("{at}: size C {} Rust {}", c.size, r.size));
    }
    if c.members.len() != r.members.len() {
        errs.push(format!(
            "{at}: {} members in C, {} in Rust",
            c.members.len(),
            r.members.len()
        ));
    }
    for (cm, (rn, off, rty)) in c.members.iter().zip(&r.members) {
        let (cn, bits) = (&cm.name, cm.bit_offset);
        if cn != rn {
            errs.push(format!("{at}: member C `{cn}` where Rust has `{rn}`"));
            continue;
        }
        if let Some(b) = cm.bitfield {
            errs.push(format!(
                "{at}.{cn}: a {b}-bit bitfield (cannot be mirrored)"
            ));
        }
        if bits as usize != off * 8 {
            errs.push(format!(
                "{at}.{cn}: offset C {}{} Rust {off}",
                bits / 8,
                if bits % 8 != 0 { "+bits" } else { "" }
            ));
        }
        match &cm.ty {
            Ok(t) if t == rty => {}
            Ok(t) => errs.push(format!("{at}.{cn}: type C {t} Rust {rty}")),
            Err(e) => errs.push(format!("{at}.{cn}: C member is {e}")),
        }
    }
    errs
}

/// Every mismatch between the objects' shared structs and the mirrors.
fn struct_errors(objects: &[(&str, Btf)], mirrors: &[Mirror]) -> Vec<String> {
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (obj, btf) in objects {
        for (name, c) in shared_structs(btf) {
            seen.insert(name.clone());
            match mirrors.iter().find(|m| m.c_name == name) {
                Some(m) => errs.extend(compare(obj, &name, &c, m)),
                None => errs.push(format!(
                    "{obj}: struct {name} has no Rust mirror (add one to crates/xdp/src, \
                     and to `mirrors!` in this test)"
                )),
            }
        }
    }
    for m in mirrors {
        if !seen.contains(m.c_name) {
            errs.push(format!(
                "{} mirrors struct {}, which no object has",
                m.rust, m.c_name
            ));
        }
    }
    errs
}

fn btfs() -> Option<Vec<(&'static str, Btf)>> {
    Some(
        objects()?
            .into_iter()
            .map(|(n, b)| (n, btf_of(b)))
            .collect(),
    )
}

#[test]
fn every_shared_struct_has_a_matching_rust_mirror() {
    let Some(btfs) = btfs() else { return };
    let errs = struct_errors(&btfs, &mirrors());
    assert!(errs.is_empty(), "C/Rust layout:\n{}", errs.join("\n"));
    // The enumeration found what it must (a guard against a BTF walk that
    // silently finds nothing).
    let found: BTreeSet<String> = btfs
        .iter()
        .flat_map(|(_, b)| shared_structs(b).into_keys())
        .collect();
    assert_eq!(found.len(), mirrors().len(), "{found:?}");
}

/// Structs of the benchmark objects that the Rust side writes as a plain
/// array: `(C name, object, Rust side, the array)`. Each member must be one
/// element, in order, with nothing between.
fn array_mirrors() -> Vec<(&'static str, rvs_xdp::Object, &'static str, Ty)> {
    vec![(
        "rvs_bench_cycle",
        rvs_xdp::Object::DirectorCycle,
        "Loaded::set_bench_cycle's [u32; 4]",
        <[u32; 4]>::ty(),
    )]
}

/// Every mismatch between a struct and the array the Rust side uses for it.
fn array_mirror_errors() -> Vec<String> {
    let mut errs = Vec::new();
    for (name, obj, rust, ty) in array_mirrors() {
        let btf = btf_of(
            obj.bytes()
                .expect("benchmark object built with the director"),
        );
        let structs = shared_structs(&btf);
        let Some(c) = structs.get(name) else {
            errs.push(format!("{obj:?}: no struct {name}"));
            continue;
        };
        let Ty::Array(elem, n) = &ty else {
            unreachable!("an array")
        };
        let Ty::Int { bytes, .. } = **elem else {
            unreachable!("of integers")
        };
        if c.size != bytes * n || c.members.len() != *n {
            errs.push(format!(
                "{obj:?}: struct {name} ({} bytes, {} members) vs {rust}",
                c.size,
                c.members.len()
            ));
        }
        for (i, m) in c.members.iter().enumerate() {
            if m.bit_offset as usize != i * bytes * 8 || m.ty.as_ref() != Ok(&**elem) {
                errs.push(format!(
                    "{obj:?}: struct {name}.{} is not element {i} of {rust}",
                    m.name
                ));
            }
        }
    }
    errs
}

#[test]
fn benchmark_structs_match_the_arrays_rust_writes() {
    if btfs().is_none() {
        return;
    }
    let errs = array_mirror_errors();
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

/// `struct rvs_* {` definitions in the headers under `bpf/`: `(name, where)`.
fn header_structs() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in sources(&bpf_dir(), &["h"]) {
        let src = strip_comments(&std::fs::read_to_string(&p).expect("header reads"));
        let file = p
            .strip_prefix(bpf_dir())
            .unwrap_or(&p)
            .display()
            .to_string();
        for (i, line) in src.lines().enumerate() {
            let Some(rest) = line.trim_start().strip_prefix("struct ") else {
                continue;
            };
            let rest = rest.trim_start();
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let (name, tail) = rest.split_at(end);
            if name.starts_with("rvs_") && tail.trim_start().starts_with('{') {
                out.push((name.to_owned(), format!("bpf/{file}:{}", i + 1)));
            }
        }
    }
    out
}

#[test]
fn every_rvs_struct_of_the_headers_is_in_an_object() {
    let Some(btfs) = btfs() else { return };
    let mut in_btf: BTreeSet<String> = btfs
        .iter()
        .flat_map(|(_, b)| shared_structs(b).into_keys())
        .collect();
    in_btf.extend(array_mirrors().into_iter().map(|(n, ..)| n.to_owned()));
    let defined = header_structs();
    assert!(defined.len() >= mirrors().len(), "{defined:?}");
    let missing: Vec<String> = defined
        .iter()
        .filter(|(n, _)| !in_btf.contains(n))
        .map(|(n, at)| {
            format!("{at}: struct {n} is in no object's BTF (no program uses it, so no mirror can be checked; use it or remove it)")
        })
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn layout_check_catches_each_kind_of_difference() {
    let Some(btfs) = btfs() else { return };
    let good = mirrors();
    let with = |name: &str, f: &dyn Fn(&mut Mirror)| {
        let mut all = good.clone();
        f(all.iter_mut().find(|m| m.c_name == name).expect("mirror"));
        struct_errors(&btfs, &all).join("\n")
    };
    // Two fields swapped (names in another order).
    let e = with("rvs_svc", &|m| m.members.swap(4, 5));
    assert!(
        e.contains("member C `table_off` where Rust has `table_len`"),
        "{e}"
    );
    // Two same-sized fields' offsets swapped.
    let e = with("rvs_svc", &|m| {
        let (a, b) = (m.members[4].1, m.members[5].1);
        m.members[4].1 = b;
        m.members[5].1 = a;
    });
    assert!(
        e.contains("rvs_svc vs Svc.table_off: offset C 8 Rust 12"),
        "{e}"
    );
    // Width (u16 where C has u32).
    let e = with("rvs_flow", &|m| {
        m.members[1].2 = Ty::Int {
            bytes: 2,
            signed: false,
        }
    });
    assert!(e.contains("Flow.dest: type C u32 Rust u16"), "{e}");
    // Signedness (i32 where C has u32).
    let e = with("rvs_dest", &|m| {
        m.members[5].2 = Ty::Int {
            bytes: 4,
            signed: true,
        }
    });
    assert!(e.contains("Dest.weight: type C u32 Rust i32"), "{e}");
    // Array length and element type.
    let e = with("rvs_dest", &|m| m.members[7].2 = <[u8; 8]>::ty());
    assert!(e.contains("Dest.mac: type C [u8; 6] Rust [u8; 8]"), "{e}");
    let e = with("rvs_config", &|m| m.members[2].2 = <[u16; 11]>::ty());
    assert!(
        e.contains("tcp_timeouts: type C [u32; 11] Rust [u16; 11]"),
        "{e}"
    );
    // Size.
    let e = with("rvs_nat", &|m| m.size += 4);
    assert!(
        e.contains("struct rvs_nat vs Nat: size C 28 Rust 32"),
        "{e}"
    );
    // A struct on the C side only.
    let mut fewer = good.clone();
    fewer.retain(|m| m.c_name != "rvs_decap_config");
    let e = struct_errors(&btfs, &fewer).join("\n");
    assert!(
        e.contains("decap.o: struct rvs_decap_config has no Rust mirror"),
        "{e}"
    );
    // A mirror of nothing.
    let mut more = good.clone();
    more.push(Mirror {
        c_name: "rvs_gone",
        ..good[0].clone()
    });
    let e = struct_errors(&btfs, &more).join("\n");
    assert!(e.contains("struct rvs_gone, which no object has"), "{e}");
}

// --------------------------------------------------------- the constants

/// The `bpf/` directory.
fn bpf_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bpf")
}

/// Every file under `dir` (recursively) whose name ends in one of `exts`.
fn sources(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                todo.push(p);
            } else if exts.iter().any(|x| p.extension().is_some_and(|e| e == *x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// C source with comments replaced by spaces and line continuations joined.
fn strip_comments(src: &str) -> String {
    let src = src.replace("\\\n", " ");
    let mut out = String::with_capacity(src.len());
    let mut rest = src.as_str();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            let end = r.find("*/").map_or(r.len(), |i| i + 2);
            out.extend(r[..end].chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("//") {
            let end = r.find('\n').unwrap_or(r.len());
            rest = &r[end..];
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Object-like `#define NAME BODY` lines of a source: `(name, body, line)`.
fn defines(src: &str) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    for (i, line) in strip_comments(src).lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix("define") else {
            continue;
        };
        if !rest.starts_with([' ', '\t']) {
            continue;
        }
        let rest = rest.trim_start();
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (name, body) = rest.split_at(end);
        if body.starts_with('(') {
            continue; // function-like
        }
        out.push((name.to_owned(), body.trim().to_owned(), i + 1));
    }
    out
}

/// A tiny evaluator for the integer expressions of `#define`s: literals
/// (decimal, hex, `u`/`l` suffixes), other defines, parentheses, unary `-`
/// `~`, and `* / + - << >> & ^ |` with C's precedence.
struct Eval<'a> {
    toks: Vec<String>,
    pos: usize,
    known: &'a BTreeMap<String, u64>,
}

impl Eval<'_> {
    fn run(body: &str, known: &BTreeMap<String, u64>) -> Option<u64> {
        let mut toks = Vec::new();
        let b = body.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if c.is_ascii_whitespace() {
                i += 1;
            } else if c.is_ascii_alphanumeric() || c == b'_' {
                let s = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                toks.push(body[s..i].to_owned());
            } else if body[i..].starts_with("<<") || body[i..].starts_with(">>") {
                toks.push(body[i..i + 2].to_owned());
                i += 2;
            } else if b"()+-*/&|^~".contains(&c) {
                toks.push((c as char).to_string());
                i += 1;
            } else {
                return None;
            }
        }
        let mut e = Eval {
            toks,
            pos: 0,
            known,
        };
        let v = e.binary(0)?;
        (e.pos == e.toks.len()).then_some(v)
    }

    fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(String::as_str)
    }

    fn binary(&mut self, level: usize) -> Option<u64> {
        const LEVELS: &[&[&str]] = &[
            &["|"],
            &["^"],
            &["&"],
            &["<<", ">>"],
            &["+", "-"],
            &["*", "/"],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut v = self.binary(level + 1)?;
        while let Some(op) = self.peek().filter(|t| LEVELS[level].contains(t)) {
            let op = op.to_owned();
            self.pos += 1;
            let r = self.binary(level + 1)?;
            v = match op.as_str() {
                "|" => v | r,
                "^" => v ^ r,
                "&" => v & r,
                "<<" => v.checked_shl(u32::try_from(r).ok()?)?,
                ">>" => v.checked_shr(u32::try_from(r).ok()?)?,
                "+" => v.wrapping_add(r),
                "-" => v.wrapping_sub(r),
                "*" => v.wrapping_mul(r),
                _ => v.checked_div(r)?,
            };
        }
        Some(v)
    }

    fn unary(&mut self) -> Option<u64> {
        let t = self.peek()?.to_owned();
        self.pos += 1;
        match t.as_str() {
            "-" => Some(self.unary()?.wrapping_neg()),
            "~" => Some(!self.unary()?),
            "(" => {
                let v = self.binary(0)?;
                (self.peek() == Some(")")).then(|| self.pos += 1)?;
                Some(v)
            }
            _ if t.as_bytes()[0].is_ascii_digit() => {
                let n = t.trim_end_matches(['u', 'U', 'l', 'L']);
                match n.strip_prefix("0x").or_else(|| n.strip_prefix("0X")) {
                    Some(h) => u64::from_str_radix(h, 16).ok(),
                    None => n.parse().ok(),
                }
            }
            _ => self.known.get(&t).copied(),
        }
    }
}

/// Every `RVS_*` constant of the headers under `bpf/` (recursively) and
/// of the objects' BTF enums: name -> (value, where). An include guard or a
/// flag with no body is not a constant; a body that looks like an integer
/// expression (starts with a digit, `(`, `-`, `~` or another `RVS_` name) but
/// does not evaluate is an error, as is one name with two values.
fn c_constants(btfs: &[(&str, Btf)]) -> Result<BTreeMap<String, (u64, String)>, Vec<String>> {
    let mut raw = Vec::new();
    for p in sources(&bpf_dir(), &["h"]) {
        let src = std::fs::read_to_string(&p).expect("header reads");
        let file = p
            .strip_prefix(bpf_dir())
            .unwrap_or(&p)
            .display()
            .to_string();
        for (name, body, line) in defines(&src) {
            if name.starts_with("RVS_") && !body.is_empty() {
                raw.push((name, body, format!("bpf/{file}:{line}")));
            }
        }
    }
    let mut errs = Vec::new();
    let mut values = BTreeMap::new();
    let mut out: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut add = |name: String, v: u64, at: String, errs: &mut Vec<String>| {
        if let Some((old, old_at)) = out.get(&name) {
            if *old != v {
                errs.push(format!("{name}: {old} at {old_at}, {v} at {at}"));
            }
        } else {
            out.insert(name, (v, at));
        }
    };
    // Defines may refer to each other in any order: evaluate until stable.
    let mut left = raw;
    loop {
        let before = left.len();
        left.retain(|(name, body, at)| match Eval::run(body, &values) {
            Some(v) => {
                values.insert(name.clone(), v);
                add(name.clone(), v, at.clone(), &mut errs);
                false
            }
            None => true,
        });
        if left.len() == before {
            break;
        }
    }
    for (name, body, at) in left {
        let looks_numeric = body.starts_with(|c: char| c.is_ascii_digit() || "(-~".contains(c))
            || body.starts_with("RVS_");
        if looks_numeric {
            errs.push(format!("{at}: {name} = `{body}` does not evaluate"));
        }
    }
    for (obj, btf) in btfs {
        for t in all_types(btf) {
            if let Type::Enum(e) = t {
                for m in &e.members {
                    let n = name_of(btf, m);
                    if n.starts_with("RVS_") {
                        add(n, u64::from(m.val()), format!("{obj} BTF enum"), &mut errs);
                    }
                }
            }
        }
    }
    if errs.is_empty() { Ok(out) } else { Err(errs) }
}

/// The Rust counterpart of every `RVS_*` constant.
fn rust_constants() -> Vec<(String, u64)> {
    use maps::{dest_flags, fwd, sched, svc_flags};
    use rvs_core::sched::hash;
    let mut v: Vec<(String, u64)> = [
        ("RVS_OWN_MACS_MAX", own_mac::OWN_MACS_MAX as u64),
        ("RVS_MAX_SERVICES", maps::MAX_SERVICES.into()),
        ("RVS_MAX_DESTS", maps::MAX_DESTS.into()),
        ("RVS_SLOTS_DEFAULT", maps::SLOTS_DEFAULT.into()),
        ("RVS_FLOWS_DEFAULT", maps::FLOWS_DEFAULT.into()),
        ("RVS_EMBRYONIC_DEFAULT", maps::EMBRYONIC_DEFAULT.into()),
        ("RVS_MAX_SVC_DESTS", maps::MAX_SVC_DESTS.into()),
        ("RVS_LOCALITY_MAX", maps::LOCALITY_MAX.into()),
        ("RVS_SRC_RANGES_MAX", maps::SRC_RANGES_MAX.into()),
        ("RVS_NH_MISSING_MAX", maps::NH_MISSING_MAX.into()),
        ("RVS_LBLCR_SET_MAX", maps::LBLCR_SET_MAX as u64),
        ("RVS_SLOT_EMPTY", maps::SLOT_EMPTY.into()),
        ("RVS_SLOT_REFUSED", maps::SLOT_REFUSED.into()),
        ("RVS_AF_INET", maps::AF_INET.into()),
        ("RVS_AF_INET6", maps::AF_INET6.into()),
        ("RVS_PROTO_TCP", maps::PROTO_TCP.into()),
        ("RVS_PROTO_UDP", maps::PROTO_UDP.into()),
        ("RVS_SCHED_NONE", sched::NONE.into()),
        ("RVS_FWD_NAT", fwd::NAT.into()),
        ("RVS_FWD_DR", fwd::DR.into()),
        ("RVS_FWD_TUN_IPIP", fwd::TUN_IPIP.into()),
        ("RVS_FWD_TUN_GUE", fwd::TUN_GUE.into()),
        ("RVS_FWD_TUN_GRE", fwd::TUN_GRE.into()),
        ("RVS_FWD_TUN_GENEVE", fwd::TUN_GENEVE.into()),
        ("RVS_FWD_FNAT", fwd::FNAT.into()),
        ("RVS_CFG_F_FNAT", maps::CFG_F_FNAT.into()),
        ("RVS_FNAT_POOL_MAX", maps::FNAT_POOL_MAX as u64),
        ("RVS_FNAT_PORT_MIN", maps::FNAT_PORT_MIN.into()),
        ("RVS_FNAT_PORT_MAX", maps::FNAT_PORT_MAX.into()),
        ("RVS_FNAT_PROG", maps::FNAT_PROG.into()),
        ("RVS_FNAT_INBOUND", maps::FNAT_INBOUND.into()),
        ("RVS_FNAT_REPLY", maps::FNAT_REPLY.into()),
        ("RVS_FNAT_REC_NONE", maps::FNAT_REC_NONE.into()),
        ("RVS_FNAT_REC_FLOWS", maps::FNAT_REC_FLOWS.into()),
        ("RVS_FNAT_REC_EMBRYONIC", maps::FNAT_REC_EMBRYONIC.into()),
        ("RVS_FNAT_ICMP_IN", maps::FNAT_ICMP_IN.into()),
        ("RVS_FNAT_ICMP_OUT", maps::FNAT_ICMP_OUT.into()),
        ("RVS_FNAT_LADDRS_MAX", maps::FNAT_LADDRS_MAX.into()),
        ("RVS_FNAT_FULL_MAX", maps::FNAT_FULL_MAX.into()),
        ("RVS_FNAT_SEED", maps::FNAT_SEED),
        ("RVS_FNAT_MUL", maps::FNAT_MUL),
        ("RVS_FNAT_STEP_PRIME", maps::FNAT_STEP_PRIME.into()),
        ("RVS_SVC_F_PERSISTENT", svc_flags::PERSISTENT.into()),
        ("RVS_SVC_F_HASHED", svc_flags::HASHED.into()),
        ("RVS_SVC_F_ONEPACKET", svc_flags::ONEPACKET.into()),
        ("RVS_SVC_F_SCHED1", svc_flags::SCHED1.into()),
        ("RVS_SVC_F_SCHED2", svc_flags::SCHED2.into()),
        ("RVS_SVC_F_SRC_RANGES", svc_flags::SRC_RANGES.into()),
        ("RVS_DEST_F_UNAVAILABLE", dest_flags::UNAVAILABLE.into()),
        ("RVS_DEST_F_OVERLOADED", dest_flags::OVERLOADED.into()),
        ("RVS_DEST_F_NEXTHOP", dest_flags::NEXTHOP.into()),
        ("RVS_DEST_F_TUN_CSUM", dest_flags::TUN_CSUM.into()),
        ("RVS_CFG_F_NAT", maps::CFG_F_NAT.into()),
        ("RVS_FLOW_F_NOOUTPUT", maps::FLOW_F_NOOUTPUT.into()),
        ("RVS_FLOW_F_TOA", maps::FLOW_F_TOA.into()),
        ("RVS_TCP_S_LAST", maps::TCP_S_LAST as u64),
        ("RVS_UDP_S_NORMAL", UdpState::Normal as u64),
        ("RVS_GUE_HDR_LEN", maps::GUE_HDR_LEN as u64),
        ("RVS_GRE_HDR_LEN", maps::GRE_HDR_LEN as u64),
        ("RVS_GRE_CSUM_LEN", maps::GRE_CSUM_LEN as u64),
        ("RVS_GENEVE_HDR_LEN", maps::GENEVE_HDR_LEN as u64),
        ("RVS_GENEVE_PORT", maps::GENEVE_PORT.into()),
        ("RVS_CSUM_CHUNK", maps::CSUM_CHUNK as u64),
        ("RVS_CSUM_CHUNKS", maps::CSUM_CHUNKS as u64),
        ("RVS_TUN_TTL", maps::TUN_TTL.into()),
        ("RVS_FLOW_CACHE_SIZE", maps::FLOW_CACHE_SIZE.into()),
        ("RVS_FLOW6_CACHE_SIZE", maps::FLOW6_CACHE_SIZE.into()),
        ("RVS_FLOW_EPOCHS", maps::FLOW_EPOCHS.into()),
        ("RVS_FLOW_CACHE_JIFFIES", maps::FLOW_CACHE_JIFFIES),
        ("RVS_EMBRYONIC_ARM_RATE", maps::EMBRYONIC_ARM_RATE),
        ("RVS_EMBRYONIC_ARM_SECS", maps::EMBRYONIC_ARM_SECS),
        ("RVS_EMBRYONIC_SEEN_UNKNOWN", maps::EMBRYONIC_SEEN_UNKNOWN),
        ("RVS_FLOW_CACHE_SEED", maps::FLOW_CACHE_SEED),
        ("RVS_FLOW_CACHE_MUL", maps::FLOW_CACHE_MUL),
        ("RVS_GOLDEN_RATIO_32", hash::GOLDEN_RATIO_32.into()),
        ("RVS_SH_TAB_BITS", hash::SH_TAB_BITS.into()),
        ("RVS_DH_TAB_BITS", hash::DH_TAB_BITS.into()),
        ("RVS_MH_HASH1_KEY", hash::HASH1_KEY),
        ("RVS_MH_HASH2_KEY", hash::HASH2_KEY),
        ("RVS_BENCH_CYCLE_BASE", maps::BENCH_CYCLE_BASE.into()),
        ("RVS_DECAP_MAX_VIPS", decap::MAX_VIPS.into()),
        ("RVS_DECAP_IPIP", decap::stat::IPIP.into()),
        ("RVS_DECAP_GUE", decap::stat::GUE.into()),
        ("RVS_DECAP_NOT_VIP", decap::stat::NOT_VIP.into()),
        ("RVS_DECAP_BAD", decap::stat::BAD.into()),
        ("RVS_DECAP_GRE", decap::stat::GRE.into()),
        ("RVS_DECAP_GENEVE", decap::stat::GENEVE.into()),
        ("RVS_DECAP_NSTATS", decap::stat::NSTATS.into()),
        ("RVS_FWD_TUN_OPT", fwd::TUN_OPT.into()),
        ("RVS_DSR_OPT4_TYPE", maps::dsr_opt::TYPE4.into()),
        ("RVS_DSR_OPT4_LEN", maps::dsr_opt::LEN4.into()),
        ("RVS_DSR_OPT6_TYPE", maps::dsr_opt::TYPE6.into()),
        ("RVS_DSR_OPT6_LEN", maps::dsr_opt::LEN6.into()),
        ("RVS_DSR_OPT6_OPTLEN", maps::dsr_opt::OPTLEN6.into()),
        ("RVS_DSR_PROG", maps::dsr_opt::PROG.into()),
        ("RVS_DSR_RS_MAX_FLOWS", dsr_rs::MAX_FLOWS.into()),
        ("RVS_DSR_RS_STRIPPED", dsr_rs::stat::STRIPPED.into()),
        ("RVS_DSR_RS_REPLIED", dsr_rs::stat::REPLIED.into()),
        ("RVS_DSR_RS_MSS", dsr_rs::stat::MSS.into()),
        ("RVS_DSR_RS_FAILED", dsr_rs::stat::FAILED.into()),
        ("RVS_DSR_RS_NSTATS", dsr_rs::stat::NSTATS.into()),
        ("RVS_TOA_KIND", rvs_wire::toa::KIND.into()),
        ("RVS_TOA_LEN4", rvs_wire::toa::LEN_V4.into()),
        ("RVS_TOA_LEN6", rvs_wire::toa::LEN_V6.into()),
        ("RVS_TOA_FROM_ACK", toa::stat::FROM_ACK.into()),
        ("RVS_TOA_FROM_SYN", toa::stat::FROM_SYN.into()),
        ("RVS_TOA_NONE", toa::stat::NONE.into()),
        ("RVS_TOA_BAD", toa::stat::BAD.into()),
        ("RVS_TOA_MAPPED", toa::stat::MAPPED.into()),
        ("RVS_TOA_V6_ON_V4", toa::stat::V6_ON_V4.into()),
        ("RVS_TOA_NSTATS", toa::stat::NSTATS.into()),
        ("RVS_QUIC_CONFIGS", quic_lb::QUIC_CONFIGS as u64),
        ("RVS_QUIC_SID_MAX", quic_lb::QUIC_SID_MAX as u64),
        ("RVS_QUIC_DCID_MAX", quic_lb::QUIC_DCID_MAX.into()),
        ("RVS_QUIC_VERSION_2", quic_lb::QUIC_VERSION_2.into()),
        ("RVS_QUIC_SVCS_MAX", quic_lb::QUIC_SVCS_MAX.into()),
        ("RVS_QUIC_SIDS_MAX", quic_lb::QUIC_SIDS_MAX.into()),
        ("RVS_QUIC_PROG", quic_lb::QUIC_PROG.into()),
        ("RVS_QUIC_MODE_NONE", quic_lb::QUIC_MODE_NONE.into()),
        ("RVS_QUIC_MODE_PLAIN", quic_lb::QUIC_MODE_PLAIN.into()),
        ("RVS_QUIC_MODE_SINGLE", quic_lb::QUIC_MODE_SINGLE.into()),
        ("RVS_QUIC_MODE_FOUR", quic_lb::QUIC_MODE_FOUR.into()),
        ("RVS_QUIC_HASH_SEED", quic_lb::QUIC_HASH_SEED),
        ("RVS_SOCK_SVC_MAX", sock::cap::SERVICES.into()),
        ("RVS_SOCK_DEST_MAX", sock::cap::DESTS.into()),
        ("RVS_SOCK_SLOTS", sock::cap::SLOTS.into()),
        ("RVS_SOCK_SOCKS_MAX", sock::cap::SOCKS.into()),
        ("RVS_SOCK_PERSIST_MAX", sock::cap::PERSIST.into()),
        ("RVS_SOCK_LIST_MAX", sock::cap::LIST as u64),
        ("RVS_SOCK_SVC_F_FALLBACK", sock::SVC_F_FALLBACK.into()),
        ("RVS_SOCK_SVC_F_PORT", sock::SVC_F_PORT.into()),
        ("RVS_SOCK_SVC_F_SRC_RANGES", sock::SVC_F_SRC_RANGES.into()),
        ("RVS_SOCK_SVC_F_NODE_OK", sock::SVC_F_NODE_OK.into()),
        ("RVS_SOCK_DEST_F_PRESENT", sock::DEST_F_PRESENT.into()),
        ("RVS_SOCK_CNT_TCP", sock::counter::TCP.into()),
        ("RVS_SOCK_CNT_UDP", sock::counter::UDP.into()),
        ("RVS_SOCK_CNT_UDP_KEPT", sock::counter::UDP_KEPT.into()),
        ("RVS_SOCK_CNT_NO_DEST", sock::counter::NO_DEST.into()),
        (
            "RVS_SOCK_CNT_REFUSED_SRC",
            sock::counter::REFUSED_SOURCE.into(),
        ),
        ("RVS_SOCK_CNT_MAX", sock::counter::COUNT.into()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v))
    .collect();
    // The TCP states are rvs-core's, by their ipvsadm names.
    for s in TcpState::ALL {
        v.push((format!("RVS_TCP_S_{}", s.name()), s as u64));
    }
    // Scheduler ids: one per scheduler of the core, by its ipvsadm name.
    for s in Scheduler::all() {
        v.push((
            format!("RVS_SCHED_{}", s.name().to_uppercase()),
            sched::id(s).into(),
        ));
    }
    v
}

/// Every mismatch between the C constants and their Rust counterparts.
fn constant_errors(c: &BTreeMap<String, (u64, String)>, rust: &[(String, u64)]) -> Vec<String> {
    let mut errs = Vec::new();
    for (name, (v, at)) in c {
        match rust.iter().find(|(n, _)| n == name) {
            None => errs.push(format!(
                "{name} ({at}) has no Rust counterpart (add one, and to `rust_constants` in this test)"
            )),
            Some((_, r)) if r != v => {
                errs.push(format!("{name} ({at}): C {v:#x}, Rust {r:#x}"));
            }
            Some(_) => {}
        }
    }
    for (n, _) in rust {
        if !c.contains_key(n) {
            errs.push(format!("{n}: a Rust counterpart of no C constant"));
        }
        if rust.iter().filter(|(m, _)| m == n).count() > 1 {
            errs.push(format!("{n}: two Rust counterparts"));
        }
    }
    errs
}

#[test]
fn every_rvs_constant_has_a_rust_counterpart_with_its_value() {
    let Some(btfs) = btfs() else { return };
    let c = c_constants(&btfs).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    let errs = constant_errors(&c, &rust_constants());
    assert!(errs.is_empty(), "RVS_* constants:\n{}", errs.join("\n"));
    assert_eq!(maps::TCP_S_LAST, TcpState::COUNT);
    // rvs-sock's own copies of the families and of the scheduler ids (it
    // does not depend on rvs-xdp; its programs run the director's
    // schedulers, lib/sched_pick.h, on RVS_SCHED_* ids). fo runs as rr over
    // its one highest-weight server.
    assert_eq!(
        (sock::AF_INET, sock::AF_INET6),
        (maps::AF_INET, maps::AF_INET6)
    );
    for s in Scheduler::all() {
        if let Ok(id) = sock::sched_id(s)
            && s != Scheduler::Fo
        {
            assert_eq!(id, u32::from(maps::sched::id(s)), "{s:?}");
        }
    }
}

#[test]
fn constant_check_catches_a_changed_missing_or_stale_constant() {
    let Some(btfs) = btfs() else { return };
    let mut c = c_constants(&btfs).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    let rust = rust_constants();
    assert!(constant_errors(&c, &rust).is_empty());
    c.get_mut("RVS_FWD_DR").expect("RVS_FWD_DR").0 = 7;
    let e = constant_errors(&c, &rust).join("\n");
    assert!(e.contains("RVS_FWD_DR (bpf/rvs.h:"), "{e}");
    assert!(e.contains("C 0x7, Rust 0x2"), "{e}");
    c.insert("RVS_NEW_THING".into(), (1, "bpf/lib/new.h:1".into()));
    let e = constant_errors(&c, &rust).join("\n");
    assert!(
        e.contains("RVS_NEW_THING (bpf/lib/new.h:1) has no Rust counterpart"),
        "{e}"
    );
    c.remove("RVS_DECAP_BAD");
    let e = constant_errors(&c, &rust).join("\n");
    assert!(
        e.contains("RVS_DECAP_BAD: a Rust counterpart of no C constant"),
        "{e}"
    );
}

#[test]
fn define_parser_reads_what_the_headers_write() {
    let src = "#define RVS_A (1u << 20)\n#  define RVS_B 0x10u /* c */\n\
               #define RVS_C (RVS_A | RVS_B)\n#define RVS_G\n#define RVS_F(x) (x)\n\
               #define RVS_D 2654435761ull // c\n#define RVS_E -1\n";
    let mut known = BTreeMap::new();
    let mut got = Vec::new();
    for (n, body, _) in defines(src) {
        if let Some(v) = Eval::run(&body, &known) {
            known.insert(n.clone(), v);
            got.push((n, v));
        } else {
            got.push((n, 0xdead));
        }
    }
    assert_eq!(
        got,
        [
            ("RVS_A".to_owned(), 1 << 20),
            ("RVS_B".to_owned(), 16),
            ("RVS_C".to_owned(), (1 << 20) | 16),
            ("RVS_G".to_owned(), 0xdead),
            ("RVS_D".to_owned(), 2_654_435_761),
            ("RVS_E".to_owned(), u64::MAX),
        ]
    );
}

// ------------------------------------------------------ the TCP state table

/// The program's `tcp_states` table as the object holds it: its dimensions
/// (from the BTF) and bytes (from the ELF symbol's place in its section).
fn tcp_states_table(bytes: &[u8], btf: &Btf) -> (Vec<usize>, Vec<u8>) {
    let elf = object::File::parse(bytes).expect("object parses");
    let sym = elf
        .symbols()
        .find(|s| s.name() == Ok("tcp_states"))
        .expect("symbol tcp_states in the object");
    let sec = elf
        .section_by_index(sym.section_index().expect("tcp_states is in a section"))
        .expect("section");
    let data = sec.data().expect("section data");
    let off = usize::try_from(sym.address()).expect("offset");
    let len = usize::try_from(sym.size()).expect("size");
    let table = data[off..off + len].to_vec();

    let var = all_types(btf)
        .into_iter()
        .find_map(|t| match t {
            Type::Var(v) if name_of(btf, &v) == "tcp_states" => Some(v),
            _ => None,
        })
        .expect("tcp_states in the BTF");
    let mut dims = Vec::new();
    let mut t = target(btf, &var);
    while let Type::Array(a) = t {
        dims.push(a.len());
        t = target(btf, &a);
    }
    assert_eq!(
        c_ty(btf, &t),
        Ok(Ty::Int {
            bytes: 1,
            signed: false
        }),
        "tcp_states holds u8 state ids"
    );
    (dims, table)
}

/// The value of a `#define NAME` in any source under `bpf/` (the program's
/// direction indexes are private to it, not `RVS_*` constants).
fn program_define(names: &[&str]) -> u64 {
    for p in sources(&bpf_dir(), &["h", "c"]) {
        let src = std::fs::read_to_string(&p).expect("source reads");
        for (n, body, _) in defines(&src) {
            if names.contains(&n.as_str())
                && let Some(v) = Eval::run(&body, &BTreeMap::new())
            {
                return v;
            }
        }
    }
    panic!("none of {names:?} is defined under bpf/");
}

/// Every entry of the C table that differs from rvs-core's `tcp_next`.
fn tcp_table_errors(
    dims: &[usize],
    table: &[u8],
    c: &BTreeMap<String, (u64, String)>,
) -> Vec<String> {
    let id = |s: TcpState| {
        c.get(&format!("RVS_TCP_S_{}", s.name()))
            .map(|(v, _)| *v)
            .unwrap_or_else(|| panic!("RVS_TCP_S_{} in the headers", s.name()))
    };
    let name_of_id = |v: u8| {
        TcpState::ALL
            .into_iter()
            .find(|&s| id(s) == u64::from(v))
            .map_or_else(|| format!("id {v}"), |s| s.name().to_owned())
    };
    let dirs = [
        (Direction::Input, ["DIR_INPUT", "RVS_DIR_INPUT"]),
        (Direction::Output, ["DIR_OUTPUT", "RVS_DIR_OUTPUT"]),
        (
            Direction::InputOnly,
            ["DIR_INPUT_ONLY", "RVS_DIR_INPUT_ONLY"],
        ),
    ];
    // The rows of the kernel's tables (tcp_state_idx): syn, fin, ack, rst.
    let rows = [
        ("syn", TcpFlags::from_bits(TcpFlags::SYN_BIT)),
        ("fin", TcpFlags::from_bits(TcpFlags::FIN_BIT)),
        ("ack", TcpFlags::from_bits(TcpFlags::ACK_BIT)),
        ("rst", TcpFlags::from_bits(TcpFlags::RST_BIT)),
    ];
    let n = TcpState::COUNT;
    assert_eq!(dims, [dirs.len(), rows.len(), n], "tcp_states dimensions");
    assert_eq!(table.len(), dirs.len() * rows.len() * n);
    let mut errs = Vec::new();
    for (dir, names) in dirs {
        let d = usize::try_from(program_define(&names)).expect("direction index");
        for (r, (row, flags)) in rows.iter().enumerate() {
            for s in TcpState::ALL {
                let at = (d * rows.len() + r) * n + usize::try_from(id(s)).expect("state id");
                let got = table[at];
                let want = tcp_next(s, dir, *flags, false);
                if u64::from(got) != id(want) {
                    errs.push(format!(
                        "tcp_states[{dir:?}][{row}][{}] = {}, rvs-core says {}",
                        s.name(),
                        name_of_id(got),
                        want.name()
                    ));
                }
            }
        }
    }
    errs
}

#[test]
fn bpf_tcp_state_table_equals_the_core_state_machine() {
    let Some(objs) = objects() else { return };
    let (obj, bytes) = objs[0];
    let btfs = btfs().expect("objects");
    let btf = &btfs[0].1;
    let c = c_constants(&btfs).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    let (dims, table) = tcp_states_table(bytes, btf);
    let errs = tcp_table_errors(&dims, &table, &c);
    assert!(errs.is_empty(), "{obj}: {}", errs.join("\n"));

    // One entry changed is caught, and named.
    let mut bad = table.clone();
    let d = usize::try_from(program_define(&["DIR_OUTPUT", "RVS_DIR_OUTPUT"])).unwrap();
    let es = usize::try_from(c["RVS_TCP_S_ESTABLISHED"].0).unwrap();
    let at = (d * 4 + 1) * TcpState::COUNT + es; // OUTPUT, fin, ESTABLISHED
    bad[at] = u8::try_from(c["RVS_TCP_S_CLOSE"].0).unwrap();
    let errs = tcp_table_errors(&dims, &bad, &c);
    assert_eq!(
        errs,
        ["tcp_states[Output][fin][ESTABLISHED] = CLOSE, rvs-core says FIN_WAIT"]
    );
}

/// The sock plane keys `sock_src_ranges` with the director's
/// `struct rvs_src_key` (checked above as [`SrcKey`]): its own mirror must
/// be that layout, byte for byte, and its trie the director's size.
#[test]
fn the_sock_planes_source_range_key_is_the_directors() {
    let r =
        rvs_core::model::SourceRange::new("10.81.0.48".parse().expect("addr"), 29).expect("range");
    let sock_key = sock::SrcKey::of(7, &r);
    assert_eq!(
        zerocopy::IntoBytes::as_bytes(&sock_key),
        zerocopy::IntoBytes::as_bytes(&SrcKey::of(7, &r))
    );
    assert_eq!(sock::cap::SRC_RANGES, rvs_xdp::maps::SRC_RANGES_MAX);
}
