//! Property tests of the hashing schedulers (`sh`, `dh`, `mh`): for any
//! configuration, two fresh instances make identical decisions (the whole
//! point of hashing schedulers: several directors agree), and no decision is
//! ever an ineligible server.

use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::testutil::dests;
use super::{Algorithm, ListChange, SchedInput, SchedParams, new_scheduler};
use crate::dest::Dest;
use crate::model::{Protocol, SchedFlags};
use crate::time::Instant;

fn arb_addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
    ]
}

fn arb_input() -> impl Strategy<Value = SchedInput> {
    (arb_addr(), any::<u16>(), arb_addr(), any::<u16>()).prop_map(|(s, sp, d, dp)| SchedInput {
        protocol: Protocol::Tcp,
        saddr: s,
        sport: sp,
        daddr: d,
        dport: dp,
    })
}

/// A server list: weights, plus per-server overloaded / quiesced marks.
fn arb_dests() -> impl Strategy<Value = Vec<Dest>> {
    prop::collection::vec((0u32..20, any::<bool>(), 0u32..20), 0..24).prop_map(|v| {
        let weights: Vec<u32> = v.iter().map(|x| x.0).collect();
        let mut d = dests(&weights);
        for (x, (w, over, lw)) in d.iter_mut().zip(v) {
            x.overloaded = over && w % 3 == 0;
            // A quiesced server keeps an older non-zero last weight.
            x.last_weight = if w == 0 { lw } else { w };
        }
        d
    })
}

fn arb_flags() -> impl Strategy<Value = SchedFlags> {
    (0u32..4).prop_map(|b| {
        SchedFlags(((b & 1) * SchedFlags::FLAG1.0) | ((b >> 1) * SchedFlags::FLAG2.0))
    })
}

fn make(name: &str, flags: SchedFlags, m: u32, d: &[Dest]) -> Box<dyn Algorithm> {
    let params = SchedParams {
        flags,
        mh_table_size: m,
        ..SchedParams::default()
    };
    let mut s = new_scheduler(name.parse().expect("scheduler name"), &params)
        .unwrap_or_else(|e| panic!("{e}"));
    s.update(d, ListChange::Reset);
    s
}

proptest! {
    #[test]
    fn hashing_schedulers_are_deterministic_and_eligible(
        d in arb_dests(),
        flags in arb_flags(),
        m in prop::sample::select(vec![2u32, 13, 251, 4093]),
        inputs in prop::collection::vec(arb_input(), 1..32),
    ) {
        for name in ["sh", "dh", "mh"] {
            let mut a = make(name, flags, m, &d);
            let mut b = make(name, flags, m, &d);
            for inp in &inputs {
                let x = a.schedule(&d, inp, Instant::ZERO);
                let y = b.schedule(&d, inp, Instant::ZERO);
                prop_assert_eq!(x, y, "{} {:?}", name, inp);
                if let Some(p) = x {
                    prop_assert!(p < d.len());
                    prop_assert!(d[p].is_eligible(), "{} chose ineligible {}", name, p);
                }
            }
        }
    }

    #[test]
    fn fallback_keeps_an_eligible_hashed_server(
        d in arb_dests(),
        inp in arb_input(),
    ) {
        // Fallback only changes decisions the plain lookup would refuse.
        for (name, fb_flag) in [("sh", SchedFlags::SH_FALLBACK), ("mh", SchedFlags::MH_FALLBACK)] {
            let mut plain = make(name, SchedFlags::default(), 251, &d);
            let mut fb = make(name, fb_flag, 251, &d);
            let x = plain.schedule(&d, &inp, Instant::ZERO);
            let y = fb.schedule(&d, &inp, Instant::ZERO);
            if x.is_some() {
                prop_assert_eq!(x, y, "{}", name);
            }
        }
    }
}
