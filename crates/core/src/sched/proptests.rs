//! Property tests of the schedulers against the kernel's loops.
//!
//! The least-connection family is pinned by comparing the indexed
//! implementations with straightforward O(N) transcriptions of the kernel's
//! loops (ip_vs_lc.c, ip_vs_wlc.c, ip_vs_sed.c, ip_vs_nq.c, ip_vs_fo.c,
//! ip_vs_ovf.c), on fresh lists and after random counter changes.

use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::testutil::{dests, input};
use super::twos::SplitMix64;
use super::*;

/// One server: weight, active, inactive, overloaded, available.
type Spec = (u32, u32, u32, bool, bool);

fn spec() -> impl Strategy<Value = Spec> {
    (
        0u32..=10,
        prop_oneof![Just(0u32), 0u32..4, 0u32..30],
        prop_oneof![Just(0u32), 0u32..600],
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.95),
    )
}

fn build(specs: &[Spec]) -> Vec<Dest> {
    let weights: Vec<u32> = specs.iter().map(|s| s.0).collect();
    let mut d = dests(&weights);
    for (x, &(_, a, i, o, av)) in d.iter_mut().zip(specs) {
        x.active = a;
        x.inactive = i;
        x.overloaded = o;
        x.available = av;
    }
    d
}

/// A counter/flag change: position (mod len), field, value.
type Op = (usize, u8, u32);

fn op() -> impl Strategy<Value = Op> {
    (0usize..1000, 0u8..5, 0u32..40)
}

fn apply(d: &mut [Dest], (p, field, v): Op) -> usize {
    let p = p % d.len();
    match field {
        0 => d[p].active = v % 12,
        1 => d[p].inactive = v * 17,
        2 => d[p].overloaded = v.is_multiple_of(3),
        3 => d[p].active = d[p].active.saturating_sub(1),
        _ => d[p].inactive = d[p].inactive.saturating_add(1),
    }
    p
}

/// Skipped by every kernel loop (the kernel's list holds only available
/// servers, so `!available` stands for "not in the list").
fn skip(d: &Dest) -> bool {
    d.overloaded || !d.available
}

fn ref_lc(d: &[Dest]) -> Option<usize> {
    let mut least: Option<(usize, u64)> = None;
    for (i, x) in d.iter().enumerate() {
        if skip(x) || x.weight() == 0 {
            continue;
        }
        let doh = x.overhead();
        if least.is_none_or(|(_, loh)| doh < loh) {
            least = Some((i, doh));
        }
    }
    least.map(|(i, _)| i)
}

/// The wlc/sed loop shape with a cost function.
fn ref_weighted(d: &[Dest], cost: impl Fn(&Dest) -> u64) -> Option<usize> {
    let first = d.iter().position(|x| !skip(x) && x.weight() > 0)?;
    let mut least = first;
    for (i, x) in d.iter().enumerate().skip(first + 1) {
        if skip(x) {
            continue;
        }
        let l = &d[least];
        if u128::from(cost(l)) * u128::from(x.weight())
            > u128::from(cost(x)) * u128::from(l.weight())
        {
            least = i;
        }
    }
    Some(least)
}

fn ref_wlc(d: &[Dest]) -> Option<usize> {
    ref_weighted(d, Dest::overhead)
}

fn ref_sed(d: &[Dest]) -> Option<usize> {
    ref_weighted(d, |x| u64::from(x.active) + 1)
}

fn ref_nq(d: &[Dest]) -> Option<usize> {
    let mut least: Option<usize> = None;
    for (i, x) in d.iter().enumerate() {
        if skip(x) || x.weight() == 0 {
            continue;
        }
        if x.active == 0 {
            return Some(i);
        }
        let replace = match least {
            None => true,
            Some(l) => {
                let l = &d[l];
                (u128::from(l.active) + 1) * u128::from(x.weight())
                    > (u128::from(x.active) + 1) * u128::from(l.weight())
            }
        };
        if replace {
            least = Some(i);
        }
    }
    least
}

fn ref_fo(d: &[Dest]) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut hw = 0;
    for (i, x) in d.iter().enumerate() {
        if !skip(x) && x.weight() > hw {
            best = Some(i);
            hw = x.weight();
        }
    }
    best
}

fn ref_ovf(d: &[Dest]) -> Option<usize> {
    let mut h: Option<usize> = None;
    for (i, x) in d.iter().enumerate() {
        let w = x.weight();
        if skip(x) || x.active > w || w == 0 {
            continue;
        }
        if h.is_none_or(|h| w > d[h].weight()) {
            h = Some(i);
        }
    }
    h
}

type Reference = fn(&[Dest]) -> Option<usize>;

const INDEXED: &[(&str, Reference)] = &[
    ("lc", ref_lc),
    ("wlc", ref_wlc),
    ("sed", ref_sed),
    ("nq", ref_nq),
    ("fo", ref_fo),
    ("ovf", ref_ovf),
];

const ALL: &[&str] = &[
    "rr", "wrr", "lc", "wlc", "sed", "nq", "fo", "ovf", "twos", "lblc", "lblcr",
];

fn make(name: &str, d: &[Dest]) -> Box<dyn Algorithm> {
    let mut s = match new_scheduler(
        name.parse().expect("scheduler name"),
        &SchedParams::default(),
    ) {
        Ok(s) => s,
        Err(e) => panic!("{name}: {e}"),
    };
    s.update(d, ListChange::Reset);
    s
}

fn to(i: usize) -> SchedInput {
    SchedInput {
        daddr: IpAddr::V4(Ipv4Addr::new(192, 0, 2, (i % 7) as u8)),
        ..input(i as u32, 1000)
    }
}

/// What the scheduler may return at all.
fn allowed(name: &str, x: &Dest) -> bool {
    x.is_eligible() && (name != "ovf" || x.active <= x.weight())
}

/// One decision: the pick is allowed, and `None` means nothing was.
fn check(
    name: &str,
    s: &mut Box<dyn Algorithm>,
    d: &[Dest],
    i: usize,
) -> Result<(), TestCaseError> {
    match s.schedule(d, &to(i), Instant::from_secs(i as u64 * 7)) {
        Some(p) => prop_assert!(allowed(name, &d[p]), "{} picked {}: {:?}", name, p, d[p]),
        None => prop_assert!(!d.iter().any(|x| allowed(name, x)), "{} gave None", name),
    }
    Ok(())
}

proptest! {
    #[test]
    fn never_ineligible_and_none_only_when_nothing_eligible(
        specs in prop::collection::vec(spec(), 0..24),
        ops in prop::collection::vec(op(), 0..30),
    ) {
        let d0 = build(&specs);
        for &name in ALL {
            let mut s = make(name, &d0);
            let mut d = d0.clone();
            for i in 0..12 {
                check(name, &mut s, &d, i)?;
            }
            for (k, &o) in ops.iter().enumerate() {
                if d.is_empty() {
                    break;
                }
                let p = apply(&mut d, o);
                s.counts_changed(&d, p);
                check(name, &mut s, &d, 100 + k)?;
            }
        }
    }

    #[test]
    fn indexed_schedulers_equal_the_kernel_loops(
        specs in prop::collection::vec(spec(), 0..40),
        ops in prop::collection::vec(op(), 0..60),
    ) {
        for &(name, reference) in INDEXED {
            let mut d = build(&specs);
            let mut s = make(name, &d);
            let t = Instant::ZERO;
            prop_assert_eq!(s.schedule(&d, &to(0), t), reference(&d), "{} fresh", name);
            for (k, &o) in ops.iter().enumerate() {
                if d.is_empty() {
                    break;
                }
                let p = apply(&mut d, o);
                s.counts_changed(&d, p);
                prop_assert_eq!(s.schedule(&d, &to(k), t), reference(&d), "{} after {:?}", name, o);
            }
        }
    }

    #[test]
    fn indexed_schedulers_follow_list_edits(
        specs in prop::collection::vec(spec(), 1..30),
        edits in prop::collection::vec((0usize..1000, 0u8..3, 0u32..=10), 0..20),
    ) {
        for &(name, reference) in INDEXED {
            let mut d = build(&specs);
            let mut s = make(name, &d);
            let t = Instant::ZERO;
            let mut next_id = d.len() as u32;
            for &(p, kind, w) in &edits {
                match kind {
                    0 if !d.is_empty() => {
                        let p = p % d.len();
                        d[p].config.weight = w;
                        s.update(&d, ListChange::Edited(p));
                    }
                    1 if !d.is_empty() => {
                        let p = p % d.len();
                        d.remove(p);
                        s.update(&d, ListChange::Removed(p));
                    }
                    _ => {
                        let mut x = dests(&[w]).remove(0);
                        x.id = crate::dest::DestId(next_id);
                        next_id += 1;
                        d.insert(0, x);
                        s.update(&d, ListChange::Added(0));
                    }
                }
                prop_assert_eq!(s.schedule(&d, &to(0), t), reference(&d), "{}", name);
            }
        }
    }

    #[test]
    fn wrr_shares_equal_weights_over_whole_cycles(
        weights in prop::collection::vec(0u32..=6, 1..8),
        scale in 1u32..=3,
        cycles in 1usize..4,
    ) {
        let weights: Vec<u32> = weights.iter().map(|w| w * scale).collect();
        let d = dests(&weights);
        let mut s = make("wrr", &d);
        let g = weights.iter().copied().filter(|&w| w > 0).fold(0, |a, b| {
            let (mut a, mut b) = (a, b);
            while b != 0 { (a, b) = (b, a % b); }
            a
        });
        if g == 0 {
            prop_assert_eq!(s.schedule(&d, &to(0), Instant::ZERO), None);
            return Ok(());
        }
        let per_cycle: u32 = weights.iter().map(|w| w / g).sum();
        let mut counts = vec![0usize; d.len()];
        for i in 0..per_cycle as usize * cycles {
            match s.schedule(&d, &to(i), Instant::ZERO) {
                Some(p) => counts[p] += 1,
                None => prop_assert!(false, "wrr gave None"),
            }
        }
        let want: Vec<usize> = weights.iter().map(|w| (w / g) as usize * cycles).collect();
        prop_assert_eq!(counts, want);
    }

    #[test]
    fn twos_equals_the_kernel_walk(
        specs in prop::collection::vec(spec(), 0..30),
        seed in any::<u64>(),
    ) {
        let d = build(&specs);
        let mut s = make_twos(seed, &d);
        let mut rng = SplitMix64(seed);
        for i in 0..20 {
            let got = s.schedule(&d, &to(i), Instant::ZERO);
            prop_assert_eq!(got, ref_twos(&d, &mut rng));
        }
    }
}

fn make_twos(seed: u64, d: &[Dest]) -> Box<dyn Algorithm> {
    let params = SchedParams {
        seed,
        ..SchedParams::default()
    };
    let mut s = match new_scheduler(super::Scheduler::Twos, &params) {
        Ok(s) => s,
        Err(e) => panic!("twos: {e}"),
    };
    s.update(d, ListChange::Reset);
    s
}

/// ip_vs_twos.c's two walks, with signed arithmetic as in the kernel.
fn ref_twos(d: &[Dest], rng: &mut SplitMix64) -> Option<usize> {
    let total: i64 = d
        .iter()
        .filter(|x| !skip(x) && x.weight() > 0)
        .map(|x| i64::from(x.weight()))
        .sum();
    if total == 0 {
        return None;
    }
    let total = total + 1;
    let mut r1 = i64::from(rng.next_u32()) % total;
    let mut r2 = i64::from(rng.next_u32()) % total;
    let (mut c1, mut c2) = (None, None);
    for (i, x) in d.iter().enumerate() {
        if skip(x) || x.weight() == 0 {
            continue;
        }
        r1 -= i64::from(x.weight());
        r2 -= i64::from(x.weight());
        if r1 <= 0 && c1.is_none() {
            c1 = Some(i);
        }
        if r2 <= 0 && c2.is_none() {
            c2 = Some(i);
        }
        if c1.is_some() && c2.is_some() {
            break;
        }
    }
    let (c1, c2) = (c1?, c2?);
    let (a, b) = (&d[c1], &d[c2]);
    if u128::from(b.weight()) * u128::from(a.overhead())
        > u128::from(a.weight()) * u128::from(b.overhead())
    {
        Some(c2)
    } else {
        Some(c1)
    }
}
