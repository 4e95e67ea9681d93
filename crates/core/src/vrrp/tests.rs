use super::*;
use std::net::Ipv4Addr;

const SEC: Duration = Duration::from_secs(1);

fn addr(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn cfg(priority: u8) -> Config {
    Config::new(priority, SEC, addr(1))
}

/// An instance of `c`, started at 0 (its start's actions dropped).
fn started(c: Config) -> Instance {
    let mut i = Instance::new(c);
    i.start(at(0));
    i
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn heard(priority: u8, last: u8) -> Heard {
    Heard {
        src: addr(last),
        priority,
        interval: SEC,
    }
}

fn transitions(actions: &[Action]) -> Vec<(State, State)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Transition { from, to } => Some((*from, *to)),
            _ => None,
        })
        .collect()
}

/// Run every timer up to and including `until`, collecting the actions.
fn run_until(i: &mut Instance, until: Instant) -> Vec<(Instant, Action)> {
    let mut out = Vec::new();
    while let Some(t) = i.poll_timeout() {
        if t > until {
            break;
        }
        for a in i.on_timeout(t) {
            out.push((t, a));
        }
    }
    out
}

#[test]
fn the_owner_is_master_at_once_and_everyone_else_waits_master_down_interval() {
    let mut owner = Instance::new(cfg(255));
    let a = owner.start(at(0));
    assert_eq!(transitions(&a), [(State::Init, State::Master)]);
    assert!(a.contains(&Action::Send { priority: 255 }));
    assert!(a.contains(&Action::Announce));

    let mut b = Instance::new(cfg(100));
    let a = b.start(at(0));
    assert_eq!(transitions(&a), [(State::Init, State::Backup)]);
    // v2: 3 × 1 s + (256 − 100) / 256 s = 3609 ms (milliseconds, rounded down).
    assert_eq!(b.master_down_interval(), Duration::from_micros(3_609_375));
    assert_eq!(b.poll_timeout(), Some(at(3609)));
    assert!(b.on_timeout(at(3608)).is_empty());
    let a = b.on_timeout(at(3609));
    assert_eq!(transitions(&a), [(State::Backup, State::Master)]);
}

#[test]
fn a_backup_that_hears_its_master_stays_backup() {
    let mut b = started(cfg(100));
    for s in 1..20u64 {
        let a = b.on_advert(at(s * 1000), heard(150, 2)).unwrap();
        assert!(a.is_empty());
        assert_eq!(b.state(), State::Backup);
    }
    // Silence: master down 3609 ms after the last advertisement.
    assert_eq!(b.poll_timeout(), Some(at(19_000 + 3609)));
}

#[test]
fn a_master_sends_every_interval_and_announces_again_after_the_garp_delay() {
    let mut m = started(cfg(255));
    let acts = run_until(&mut m, at(6000));
    let sends: Vec<_> = acts
        .iter()
        .filter(|(_, a)| matches!(a, Action::Send { .. }))
        .map(|(t, _)| t.as_millis())
        .collect();
    assert_eq!(sends, [1000, 2000, 3000, 4000, 5000, 6000]);
    let announces: Vec<_> = acts
        .iter()
        .filter(|(_, a)| *a == Action::Announce)
        .map(|(t, _)| t.as_millis())
        .collect();
    assert_eq!(announces, [5000]);
}

#[test]
fn a_master_yields_to_a_higher_priority_and_to_an_equal_one_from_a_higher_address() {
    let mut m = started(cfg(255));
    // Lower priority: assert ourselves at once (RFC 9568), stay master.
    let a = m.on_advert(at(100), heard(50, 9)).unwrap();
    assert_eq!(a, [Action::Send { priority: 255 }]);
    assert_eq!(m.state(), State::Master);

    let mut m = started(cfg(100));
    run_until(&mut m, at(4000));
    assert_eq!(m.state(), State::Master);
    // Equal priority from a lower address: we win.
    m.on_advert(at(4100), heard(100, 0)).unwrap();
    assert_eq!(m.state(), State::Master);
    // Equal priority from a higher address: it wins.
    let a = m.on_advert(at(4200), heard(100, 2)).unwrap();
    assert_eq!(transitions(&a), [(State::Master, State::Backup)]);
    assert_eq!(m.poll_timeout(), Some(at(4200 + 3609)));

    let mut m = started(cfg(100));
    run_until(&mut m, at(4000));
    let a = m.on_advert(at(4100), heard(101, 0)).unwrap();
    assert_eq!(transitions(&a), [(State::Master, State::Backup)]);
}

#[test]
fn preemption_takes_over_from_a_lower_master_and_nopreempt_does_not() {
    // preempt (default): a lower master's adverts do not reset the timer.
    let mut b = started(cfg(100));
    for s in 1..4u64 {
        b.on_advert(at(s * 1000), heard(50, 2)).unwrap();
    }
    let acts = run_until(&mut b, at(3609));
    assert_eq!(b.state(), State::Master, "{acts:?}");

    // nopreempt: a lower master is kept as long as it speaks.
    let mut c = cfg(100);
    c.preempt = false;
    let mut b = started(c);
    for s in 1..30u64 {
        b.on_advert(at(s * 1000), heard(50, 2)).unwrap();
        run_until(&mut b, at(s * 1000 + 999));
        assert_eq!(b.state(), State::Backup);
    }
}

#[test]
fn preempt_delay_waits_before_taking_over_from_a_lower_master() {
    let mut c = cfg(100);
    c.preempt_delay = Duration::from_secs(10);
    let mut b = started(c);
    let mut became = None;
    for s in 1..30u64 {
        if b.state() == State::Backup {
            b.on_advert(at(s * 1000), heard(50, 2)).unwrap();
        }
        for (t, a) in run_until(&mut b, at(s * 1000 + 999)) {
            if let Action::Transition {
                to: State::Master, ..
            } = a
            {
                became.get_or_insert(t);
            }
        }
    }
    // First lower advert at 1 s → delay until 11 s; the advert at 10 s is
    // the last one honoured, so the master is declared down 3609 ms later.
    assert_eq!(became, Some(at(10_000 + 3609)));
}

#[test]
fn a_resigning_master_is_replaced_after_the_skew_time_only() {
    let mut b = started(cfg(100));
    b.on_advert(at(1000), heard(150, 2)).unwrap();
    b.on_advert(at(1500), heard(0, 2)).unwrap();
    // Skew (256 − 100) / 256 s = 609 ms.
    assert_eq!(b.poll_timeout(), Some(at(1500 + 609)));
    run_until(&mut b, at(2109));
    assert_eq!(b.state(), State::Master);
}

#[test]
fn a_stopping_master_resigns_with_priority_zero() {
    let mut m = started(cfg(255));
    let a = m.shutdown();
    assert_eq!(a[0], Action::Send { priority: 0 });
    assert_eq!(transitions(&a), [(State::Master, State::Stopped)]);
    assert_eq!(m.poll_timeout(), None);
    // A stopped backup sends nothing.
    let mut b = started(cfg(100));
    let a = b.shutdown();
    assert!(!a.iter().any(|a| matches!(a, Action::Send { .. })));
}

#[test]
fn a_master_answers_a_resigning_peer_at_once() {
    let mut m = started(cfg(255));
    let a = m.on_advert(at(300), heard(0, 2)).unwrap();
    assert_eq!(a, [Action::Send { priority: 255 }]);
    assert_eq!(m.poll_timeout(), Some(at(1300)));
}

#[test]
fn v2_drops_a_different_interval_and_v3_learns_the_masters() {
    let mut b = started(cfg(100));
    let h = Heard {
        interval: Duration::from_secs(2),
        ..heard(150, 2)
    };
    assert!(matches!(
        b.on_advert(at(1000), h),
        Err(Ignored::IntervalMismatch { .. })
    ));

    let mut c = cfg(100);
    c.version = 3;
    let mut b = started(c);
    b.on_advert(at(1000), h).unwrap();
    assert_eq!(b.master_adver_int(), Duration::from_secs(2));
    // v3: 3 × 2 s + (156 × 2 s) / 256 = 6000 + 1218.75 ms.
    assert_eq!(b.poll_timeout(), Some(at(1000 + 7218)));
}

#[test]
fn a_fault_gives_the_addresses_up_and_recovery_starts_over() {
    let mut m = started(cfg(100));
    run_until(&mut m, at(4000));
    assert_eq!(m.state(), State::Master);
    let a = m.set_fault(at(4100), true);
    assert_eq!(a[0], Action::Send { priority: 0 });
    assert_eq!(transitions(&a), [(State::Master, State::Fault)]);
    assert_eq!(m.poll_timeout(), None);
    assert!(matches!(
        m.on_advert(at(4200), heard(50, 2)),
        Err(Ignored::NotRunning(State::Fault))
    ));
    let a = m.set_fault(at(5000), false);
    assert_eq!(transitions(&a), [(State::Fault, State::Backup)]);
    assert_eq!(m.poll_timeout(), Some(at(5000 + 3609)));
}

#[test]
fn a_master_whose_priority_drops_says_so_at_once_and_a_higher_backup_takes_over() {
    let mut m = started(cfg(150));
    run_until(&mut m, at(4000));
    let mut b = started(Config::new(100, SEC, addr(2)));
    b.on_advert(at(3500), heard(150, 1)).unwrap();
    // A tracked script fails: 150 − 60 = 90.
    let a = m.set_priority(at(4100), 90);
    assert_eq!(a, [Action::Send { priority: 90 }]);
    // The backup (100) no longer resets its timer on the lower master.
    b.on_advert(at(4100), heard(90, 1)).unwrap();
    run_until(&mut b, at(3500 + 3609));
    assert_eq!(b.state(), State::Master);
    // ... and the old master yields to it.
    let a = m.on_advert(at(7200), heard(100, 2)).unwrap();
    assert_eq!(transitions(&a), [(State::Master, State::Backup)]);
}

#[test]
fn two_instances_elect_one_master_on_a_virtual_wire() {
    // Every send reaches the other at once; clocks agree.
    let mut r = [
        Instance::new(Config::new(100, SEC, addr(1))),
        Instance::new(Config::new(200, SEC, addr(2))),
    ];
    let mut pending: Vec<(usize, Action)> = Vec::new();
    for (k, i) in r.iter_mut().enumerate() {
        pending.extend(i.start(at(0)).into_iter().map(|a| (k, a)));
    }
    let mut now = 0;
    while now <= 20_000 {
        for (k, a) in std::mem::take(&mut pending) {
            if let Action::Send { priority } = a {
                let other = 1 - k;
                let h = Heard {
                    src: addr(k as u8 + 1),
                    priority,
                    interval: SEC,
                };
                if let Ok(acts) = r[other].on_advert(at(now), h) {
                    pending.extend(acts.into_iter().map(|a| (other, a)));
                }
            }
        }
        for (k, i) in r.iter_mut().enumerate() {
            if i.poll_timeout().is_some_and(|t| t <= at(now)) {
                pending.extend(i.on_timeout(at(now)).into_iter().map(|a| (k, a)));
            }
        }
        now += 10;
    }
    assert_eq!(r[0].state(), State::Backup);
    assert_eq!(r[1].state(), State::Master);
}

#[test]
fn state_master_starts_as_master_and_still_yields_to_a_higher_priority() {
    let mut c = cfg(100);
    c.initial_master = true;
    let mut m = Instance::new(c);
    let a = m.start(at(0));
    assert_eq!(transitions(&a), [(State::Init, State::Master)]);
    let a = m.on_advert(at(500), heard(150, 2)).unwrap();
    assert_eq!(transitions(&a), [(State::Master, State::Backup)]);
}

#[test]
fn a_sync_group_member_follows_master_and_backup_but_not_out_of_fault() {
    let mut m = started(cfg(100));
    let a = m.follow(at(10), State::Master);
    assert_eq!(transitions(&a), [(State::Backup, State::Master)]);
    assert!(a.contains(&Action::Send { priority: 100 }));
    assert_eq!(m.poll_timeout(), Some(at(1010)));
    assert!(m.follow(at(20), State::Master).is_empty());
    let a = m.follow(at(30), State::Backup);
    assert_eq!(transitions(&a), [(State::Master, State::Backup)]);
    assert_eq!(m.poll_timeout(), Some(at(30 + 3609)));
    m.set_fault(at(40), true);
    assert!(m.follow(at(50), State::Master).is_empty());
    assert_eq!(m.state(), State::Fault);
}

#[test]
fn reconfiguring_keeps_the_state_and_announces_a_new_priority() {
    let mut m = started(cfg(100));
    run_until(&mut m, at(4000));
    assert_eq!(m.state(), State::Master);
    let a = m.reconfigure(at(4100), cfg(120));
    assert_eq!(a, [Action::Send { priority: 120 }]);
    assert_eq!(m.state(), State::Master);
    assert!(m.reconfigure(at(4200), cfg(120)).is_empty());
    // A backup raised above its master stops resetting its timer on it.
    let mut b = started(cfg(100));
    b.on_advert(at(1000), heard(150, 2)).unwrap();
    assert!(b.reconfigure(at(1500), cfg(200)).is_empty());
    b.on_advert(at(2000), heard(150, 2)).unwrap();
    assert_eq!(b.poll_timeout(), Some(at(1000 + 3609)));
}

#[test]
fn a_master_refreshes_its_announcements_after_the_delayed_round() {
    let mut c = cfg(255);
    c.garp_refresh = Duration::from_secs(60);
    let mut m = started(c);
    let acts = run_until(&mut m, at(130_000));
    let rounds: Vec<_> = acts
        .iter()
        .filter(|(_, a)| matches!(a, Action::Announce | Action::Refresh))
        .map(|(t, a)| (t.as_millis(), *a))
        .collect();
    assert_eq!(
        rounds,
        [
            (5000, Action::Announce),
            (65_000, Action::Refresh),
            (125_000, Action::Refresh)
        ]
    );
    // Leaving master stops them (while the new master speaks).
    m.on_advert(at(130_100), heard(255, 9)).unwrap();
    assert_eq!(m.state(), State::Backup);
    for t in (131_000..=300_000).step_by(1000) {
        m.on_advert(at(t), heard(255, 9)).unwrap();
    }
    assert!(
        !run_until(&mut m, at(300_500))
            .iter()
            .any(|(_, a)| *a == Action::Refresh)
    );
}
