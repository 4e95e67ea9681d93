//! Unit tests of the connection table: lookups, the timing wheel, expiry
//! and eviction, with property tests against a model.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn table(cap: usize) -> ConnTable {
    ConnTable::new(ConnTableConfig {
        capacity: cap,
        hash_seed: 0x1234_5678,
    })
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> Addr {
    Addr::from(Ipv4Addr::new(a, b, c, d))
}

fn key(client: u32, cport: u16) -> ConnKey {
    ConnKey {
        protocol: 6,
        af: AddrFamily::Inet,
        caddr: Addr::from(Ipv4Addr::from(client)),
        cport,
        vaddr: v4(10, 0, 0, 1),
        vport: 80,
    }
}

fn conn(k: &ConnKey, fwd: u16, secs: u64) -> Conn {
    Conn::new(
        k,
        v4(192, 168, 0, 2),
        8080,
        ConnFlags::with_fwd(fwd),
        Duration::from_secs(secs),
    )
}

/// Insert a connection of `k` with forwarding `fwd` and a `secs` timeout at
/// time 0, which the table must have room for.
fn add(tb: &mut ConnTable, k: &ConnKey, fwd: u16, secs: u64) -> ConnId {
    tb.insert(conn(k, fwd, secs), None, t(0)).unwrap()
}

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

#[test]
fn sizes() {
    assert!(
        core::mem::size_of::<Conn>() <= 104,
        "{}",
        core::mem::size_of::<Conn>()
    );
    assert_eq!(core::mem::size_of::<Conn>(), 96);
}

#[test]
fn addr_roundtrip() {
    let a: IpAddr = "1.2.3.4".parse().unwrap();
    let b: IpAddr = "2001:db8::1".parse().unwrap();
    assert_eq!(Addr::from_ip(a).to_ip(AddrFamily::Inet), a);
    assert_eq!(Addr::from_ip(b).to_ip(AddrFamily::Inet6), b);
    assert_eq!(
        Addr::from_ip(a).0,
        [1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(format!("{:?}", Addr::from_ip(a)), "1.2.3.4");
    assert_eq!(format!("{:?}", Addr::from_ip(b)), "2001:db8::1");
}

#[test]
fn insert_lookup_remove() {
    let mut tb = table(16);
    let k = key(1, 1000);
    let id = add(&mut tb, &k, ConnFlags::DROUTE, 10);
    assert_eq!(tb.len(), 1);
    assert_eq!(tb.lookup(&k), Some(id));
    assert_eq!(tb.lookup(&key(1, 1001)), None);
    assert_eq!(tb.get(id).unwrap().key(), k);
    assert_eq!(tb.deadline(id), Some(t(10_000)));
    let c = tb.remove(id).unwrap();
    assert_eq!(c.key(), k);
    assert_eq!(tb.lookup(&k), None);
    assert!(tb.get(id).is_none());
    assert!(tb.remove(id).is_none());
    assert!(tb.is_empty());
    assert_eq!(tb.poll_expired(t(1_000_000)), None);
}

#[test]
fn reply_lookup_only_for_masq() {
    let mut tb = table(16);
    let k1 = key(1, 1000);
    let k2 = key(2, 1000);
    let nat = add(&mut tb, &k1, ConnFlags::MASQ, 10);
    let _dr = add(&mut tb, &k2, ConnFlags::DROUTE, 10);
    let d = v4(192, 168, 0, 2);
    assert_eq!(
        tb.lookup_reply(6, AddrFamily::Inet, d, 8080, k1.caddr, 1000),
        Some(nat)
    );
    assert_eq!(
        tb.lookup_reply(6, AddrFamily::Inet, d, 8080, k2.caddr, 1000),
        None
    );
    assert_eq!(
        tb.lookup_reply(17, AddrFamily::Inet, d, 8080, k1.caddr, 1000),
        None
    );
    assert_eq!(
        tb.lookup_reply(6, AddrFamily::Inet, d, 8081, k1.caddr, 1000),
        None
    );
    // A MASQ template is not a reply target.
    let mut tk = key(3, 0);
    tk.cport = 0;
    let mut tpl = conn(&tk, ConnFlags::MASQ, 10);
    tpl.flags.insert(ConnFlags::TEMPLATE);
    tb.insert(tpl, None, t(0)).unwrap();
    assert_eq!(
        tb.lookup_reply(6, AddrFamily::Inet, d, 8080, tk.caddr, 0),
        None
    );
    tb.remove(nat);
    assert_eq!(
        tb.lookup_reply(6, AddrFamily::Inet, d, 8080, k1.caddr, 1000),
        None
    );
}

#[test]
fn templates_and_conns_do_not_collide_and_pe_data_matches() {
    let mut tb = table(16);
    let k = key(1, 0);
    let c = add(&mut tb, &k, ConnFlags::DROUTE, 10);
    let mut tpl = conn(&k, ConnFlags::DROUTE, 360);
    tpl.flags.insert(ConnFlags::TEMPLATE);
    let tp = tb.insert(tpl.clone(), None, t(0)).unwrap();
    let sip = tb.insert(tpl, Some(b"call-1@host"), t(0)).unwrap();
    assert_eq!(tb.lookup(&k), Some(c));
    assert_eq!(tb.lookup_template(&k, None), Some(tp));
    assert_eq!(tb.lookup_template(&k, Some(b"call-1@host")), Some(sip));
    assert_eq!(tb.lookup_template(&k, Some(b"call-2@host")), None);
    assert_eq!(tb.lookup_template(&k, Some(b"call-1@hos")), None);
    assert_eq!(tb.pe_data(sip), Some(&b"call-1@host"[..]));
    assert_eq!(tb.pe_data(tp), None);
    tb.remove(c);
    assert_eq!(tb.lookup(&k), None);
    assert_eq!(tb.lookup_template(&k, None), Some(tp));
    tb.remove(sip);
    assert_eq!(tb.lookup_template(&k, Some(b"call-1@host")), None);
}

#[test]
fn fullnat_local_address_lives_and_dies_with_its_entry() {
    let mut tb = table(16);
    let k = key(1, 0);
    let c = add(&mut tb, &k, ConnFlags::MASQ, 10);
    let l = Addr::from_ip("192.168.100.5".parse().unwrap());
    assert_eq!(tb.local(c), None);
    assert!(tb.set_local(c, l, 1029));
    assert_eq!(tb.local(c), Some((l, 1029)));
    tb.remove(c);
    assert_eq!(tb.local(c), None);
    assert!(!tb.set_local(c, l, 1029), "no entry, nothing recorded");
    // The slot's next entry starts without one.
    let d = add(&mut tb, &key(2, 0), ConnFlags::MASQ, 10);
    assert_eq!(tb.local(d), None);
}

#[test]
fn invalidated_template_never_matches() {
    let mut tb = table(16);
    let k = key(1, 0);
    let mut tpl = conn(&k, ConnFlags::DROUTE, 360);
    tpl.flags.insert(ConnFlags::TEMPLATE);
    let tp = tb.insert(tpl, None, t(0)).unwrap();
    tb.invalidate_template(tp);
    assert_eq!(tb.lookup_template(&k, None), None);
    let c = tb.get(tp).unwrap();
    assert_eq!((c.cport, c.vport, c.dport), (0, 0xffff, 0xffff));
    // A fresh template for the same client is independent of the dead one.
    let mut tpl2 = conn(&k, ConnFlags::DROUTE, 360);
    tpl2.flags.insert(ConnFlags::TEMPLATE);
    let tp2 = tb.insert(tpl2, None, t(0)).unwrap();
    assert_eq!(tb.lookup_template(&k, None), Some(tp2));
    // It still expires normally.
    assert_eq!(tb.poll_expired(t(359_999)), None);
    let mut due = [tb.poll_expired(t(360_000)), tb.poll_expired(t(360_000))];
    due.sort();
    assert_eq!(due, [Some(tp), Some(tp2)]);
}

#[test]
fn expiry_exact_and_touch_postpones() {
    let mut tb = table(16);
    let a = tb
        .insert(conn(&key(1, 1), ConnFlags::MASQ, 10), None, t(5))
        .unwrap();
    let b = tb
        .insert(conn(&key(2, 1), ConnFlags::MASQ, 1), None, t(5))
        .unwrap();
    assert_eq!(tb.next_deadline().map(|d| d <= t(1005)), Some(true));
    assert_eq!(tb.poll_expired(t(1004)), None);
    assert_eq!(tb.poll_expired(t(1005)), Some(b));
    assert_eq!(tb.poll_expired(t(1005)), None);
    tb.remove(b);
    // touch a at 9000: now due at 19000.
    tb.touch(a, t(9000));
    assert_eq!(tb.poll_expired(t(10_005)), None);
    assert_eq!(tb.poll_expired(t(18_999)), None);
    assert_eq!(tb.poll_expired(t(19_000)), Some(a));
    // Re-arm after poll with a shorter timeout.
    tb.set_timeout(a, Duration::from_millis(3), t(19_000));
    assert_eq!(tb.poll_expired(t(19_002)), None);
    assert_eq!(tb.poll_expired(t(19_003)), Some(a));
    // Moving a deadline earlier is honoured (not late).
    tb.set_timeout(a, Duration::from_secs(900), t(19_003));
    tb.set_timeout(a, Duration::from_secs(2), t(20_000));
    assert_eq!(tb.poll_expired(t(21_999)), None);
    assert_eq!(tb.poll_expired(t(22_000)), Some(a));
    assert_eq!(tb.remove(a).map(|c| c.timeout_ms), Some(2000));
    assert_eq!(tb.next_deadline(), None);
}

#[test]
fn many_random_timeouts_come_out_in_order_once() {
    let n = 100_000u32;
    let mut tb = table(n as usize);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut want = HashMap::new();
    for i in 0..n {
        let start = next() % 1000;
        let ms = next() % 3_000_000; // up to 50 min
        let mut c = conn(&key(i, 1), ConnFlags::DROUTE, 0);
        c.timeout_ms = ms as u32;
        let id = tb.insert(c, None, t(start)).unwrap();
        want.insert(id, start + ms);
    }
    let mut now = 0;
    let mut last = 0;
    let mut out = 0;
    while out < n {
        now += 1 + next() % 5000;
        while let Some(id) = tb.poll_expired(t(now)) {
            let d = want.remove(&id).expect("expired twice or unknown");
            assert!(d <= now, "early: deadline {d} now {now}");
            assert!(d >= last, "out of order: {d} after {last}");
            last = d;
            assert_eq!(tb.deadline(id), Some(t(d)));
            tb.remove(id);
            out += 1;
        }
        // Nothing left that was due.
        assert!(want.values().all(|d| *d > now));
    }
    assert!(tb.is_empty());
}

#[test]
fn expiry_at_most_one_ms_late_when_polled_every_ms() {
    let mut tb = table(64);
    let ids: Vec<(ConnId, u64)> = [1u64, 63, 64, 65, 4095, 4096, 70_000, 262_145]
        .iter()
        .enumerate()
        .map(|(i, ms)| {
            let mut c = conn(&key(i as u32, 1), ConnFlags::DROUTE, 0);
            c.timeout_ms = *ms as u32;
            (tb.insert(c, None, t(7)).unwrap(), 7 + ms)
        })
        .collect();
    let mut got = Vec::new();
    for now in 0..=262_200u64 {
        while let Some(id) = tb.poll_expired(t(now)) {
            got.push((id, now));
            tb.remove(id);
        }
    }
    assert_eq!(got, ids);
}

#[test]
fn capacity_bound_and_slot_reuse() {
    let mut tb = table(3);
    let a = add(&mut tb, &key(1, 1), 0, 1);
    let b = add(&mut tb, &key(2, 1), 0, 1);
    let _c = add(&mut tb, &key(3, 1), 0, 1);
    assert_eq!(
        tb.insert(conn(&key(4, 1), 0, 1), None, t(0)),
        Err(TableFull)
    );
    assert_eq!(TableFull.to_string(), "connection table full");
    tb.remove(b);
    let d = add(&mut tb, &key(4, 1), 0, 1);
    assert_eq!(d, b, "freed slot reused");
    assert_eq!(tb.lookup(&key(4, 1)), Some(d));
    assert_eq!(tb.lookup(&key(2, 1)), None);
    assert_eq!(tb.iter().count(), 3);
    assert!(tb.get(a).is_some());
    assert!(tb.memory_bytes() >= 3 * 96);
}

#[test]
fn eviction_candidate_is_earliest_deadline() {
    let mut tb = table(16);
    let est = add(&mut tb, &key(1, 1), 3, 900);
    let half1 = tb.insert(conn(&key(2, 1), 3, 60), None, t(1000)).unwrap();
    let half2 = add(&mut tb, &key(3, 1), 3, 60);
    let mut tpl = conn(&key(4, 0), 3, 10);
    tpl.flags.insert(ConnFlags::TEMPLATE);
    tpl.n_control = 1;
    let busy = tb.insert(tpl, None, t(0)).unwrap();
    assert_eq!(tb.eviction_candidate(t(2000)), Some(half2));
    tb.remove(half2);
    assert_eq!(tb.eviction_candidate(t(2000)), Some(half1));
    // Refreshing half1 far into the future makes est the victim.
    tb.set_timeout(half1, Duration::from_secs(900), t(5000));
    assert_eq!(tb.eviction_candidate(t(5000)), Some(est));
    // Due entries go first; the busy template (due at 10 s) never.
    assert_eq!(tb.eviction_candidate(t(20_000)), Some(est));
    tb.remove(est);
    tb.remove(half1);
    assert_eq!(tb.eviction_candidate(t(20_000)), None);
    tb.get_mut(busy).unwrap().n_control = 0;
    assert_eq!(tb.eviction_candidate(t(20_000)), Some(busy));
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, u32),
    Touch(u16),
    SetTimeout(u16, u32),
    Remove(u16),
    Advance(u32),
    Poll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u16..64, 0u32..200_000).prop_map(|(k, ms)| Op::Insert(k, ms)),
        (0u16..64).prop_map(Op::Touch),
        (0u16..64, 0u32..200_000).prop_map(|(k, ms)| Op::SetTimeout(k, ms)),
        (0u16..64).prop_map(Op::Remove),
        (0u32..100_000).prop_map(Op::Advance),
        Just(Op::Poll),
    ]
}

proptest! {
    #[test]
    fn table_matches_model(ops in proptest::collection::vec(op(), 1..200)) {
        let mut tb = ConnTable::with_lazy_reserve(ConnTableConfig { capacity: 40, hash_seed: 7 });
        // model: client key -> (id, timeout_ms, deadline, armed)
        let mut model: BTreeMap<u16, (ConnId, u32, u64, bool)> = BTreeMap::new();
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Insert(k, ms) => {
                    if model.contains_key(&k) { continue; }
                    let mut c = conn(&key(u32::from(k), 9), ConnFlags::MASQ, 0);
                    c.timeout_ms = ms;
                    match tb.insert(c, None, t(now)) {
                        Ok(id) => { model.insert(k, (id, ms, now + u64::from(ms), true)); }
                        Err(TableFull) => prop_assert_eq!(model.len(), 40),
                    }
                }
                Op::Touch(k) => if let Some(e) = model.get_mut(&k) {
                    tb.touch(e.0, t(now));
                    e.2 = now + u64::from(e.1);
                    e.3 = true;
                },
                Op::SetTimeout(k, ms) => if let Some(e) = model.get_mut(&k) {
                    tb.set_timeout(e.0, Duration::from_millis(u64::from(ms)), t(now));
                    e.1 = ms;
                    e.2 = now + u64::from(ms);
                    e.3 = true;
                },
                Op::Remove(k) => if let Some(e) = model.remove(&k) {
                    prop_assert!(tb.remove(e.0).is_some());
                },
                Op::Advance(ms) => now += u64::from(ms),
                Op::Poll => {
                    let mut last = 0;
                    while let Some(id) = tb.poll_expired(t(now)) {
                        let (k, e) = model.iter_mut().find(|(_, e)| e.0 == id)
                            .map(|(k, e)| (*k, e)).expect("unknown id");
                        prop_assert!(e.3, "detached entry expired again");
                        prop_assert!(e.2 <= now);
                        prop_assert!(e.2 >= last);
                        last = e.2;
                        e.3 = false;
                        // Remove odd keys, leave even ones detached.
                        if k % 2 == 1 {
                            model.remove(&k);
                            tb.remove(id);
                        }
                    }
                    for e in model.values() {
                        prop_assert!(!e.3 || e.2 > now, "missed expiry");
                    }
                }
            }
            prop_assert_eq!(tb.len(), model.len());
            for (k, e) in &model {
                prop_assert_eq!(tb.lookup(&key(u32::from(*k), 9)), Some(e.0));
                prop_assert_eq!(tb.deadline(e.0), Some(t(e.2)));
                prop_assert_eq!(
                    tb.lookup_reply(6, AddrFamily::Inet, v4(192, 168, 0, 2), 8080,
                        Addr::from(Ipv4Addr::from(u32::from(*k))), 9),
                    Some(e.0)
                );
            }
            if let Some(nd) = tb.next_deadline() {
                let min = model.values().filter(|e| e.3).map(|e| e.2).min();
                prop_assert!(min.is_some_and(|m| nd <= t(m)), "next_deadline late");
            } else {
                prop_assert!(model.values().all(|e| !e.3));
            }
        }
    }
}
