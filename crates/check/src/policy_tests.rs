//! Virtual-clock tests of the policy: every keepalived rule, timed exactly.

use super::*;
use rvs_core::model::Protocol;
use std::net::Ipv4Addr;

fn s(x: u64) -> Duration {
    Duration::from_secs(x)
}

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn timing(delay_loop: u64, retry: u32, dbr: u64) -> Timing {
    Timing {
        delay_loop: s(delay_loop),
        retry,
        delay_before_retry: s(dbr),
        warmup: Duration::ZERO,
        alpha: false,
    }
}

fn chk(label: &str, t: Timing) -> CheckerSpec {
    CheckerSpec {
        label: label.into(),
        identity: format!("{label} {t:?}"),
        timing: t,
        log_all_failures: false,
        misc_dynamic: false,
        interval_from_start: false,
        mail: MailText::of("TCP_CHECK"),
    }
}

fn rs(i: u8, weight: u32, checkers: Vec<CheckerSpec>) -> RsSpec {
    RsSpec {
        name: format!("10.0.0.{i}:80"),
        weight,
        inhibit: false,
        notify_up: None,
        notify_down: None,
        smtp_alert: false,
        checkers,
    }
}

fn key() -> ServiceKey {
    ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
        port: 80,
    }
}

fn dest(i: u8) -> DestConfig {
    DestConfig::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)), 80)
}

fn vs(reals: Vec<RsSpec>) -> VsSpec {
    let dests = reals
        .iter()
        .enumerate()
        .map(|(i, r)| dest(i as u8 + 1).weight(r.weight))
        .collect();
    VsSpec {
        name: "192.168.0.1:80".into(),
        services: vec![ServiceSlot {
            key: key(),
            dests,
            sorry: None,
        }],
        quorum: 1,
        hysteresis: 0,
        quorum_up: None,
        quorum_down: None,
        sorry_inhibit: false,
        omega: false,
        smtp_alert: false,
        reals,
    }
}

fn script(name: &str) -> Option<ScriptSpec> {
    Some(ScriptSpec {
        command: name.into(),
        user: None,
    })
}

/// A policy plus a virtual clock and the actions seen so far.
struct Sim {
    p: Policy,
    t0: Instant,
    now: Instant,
    log: Vec<Action>,
}

impl Sim {
    fn new(cfg: HealthConfig) -> Sim {
        let t0 = Instant::now();
        let mut p = Policy::new(42);
        p.reconfigure(t0, cfg);
        let mut sim = Sim {
            p,
            t0,
            now: t0,
            log: Vec::new(),
        };
        sim.drain();
        sim
    }

    fn at(&self) -> Duration {
        self.now - self.t0
    }

    fn drain(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(a) = self.p.poll_action() {
            out.push(a);
        }
        self.log.extend(out.iter().cloned());
        out
    }

    /// Advance to the next due time; the probes started there.
    fn next_probes(&mut self) -> Vec<CheckerId> {
        let t = self.p.poll_timeout().expect("something scheduled");
        assert!(t >= self.now, "time goes forward");
        self.now = t;
        self.p.handle_timeout(t);
        self.drain()
            .into_iter()
            .filter_map(|a| match a {
                Action::Probe(id) => Some(id),
                _ => None,
            })
            .collect()
    }

    /// Run the next due probe of the only checker, taking `took`, with `o`.
    fn step(&mut self, o: Outcome, took: Duration) -> Vec<Action> {
        let ids = self.next_probes();
        assert_eq!(ids.len(), 1, "one probe due at {:?}", self.at());
        self.now += took;
        self.p.handle_result(self.now, ids[0], o);
        self.drain()
    }

    fn desired(&self) -> Vec<DestConfig> {
        self.p.desired(0).remove(0).1
    }

    fn scripts(&self) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|a| match a {
                Action::Script { script, .. } => Some(script.command.clone()),
                _ => None,
            })
            .collect()
    }
}

fn cfg(v: VsSpec) -> HealthConfig {
    HealthConfig {
        virtual_servers: vec![v],
        no_checker_emails: false,
        rs_init_notifies: false,
    }
}

fn is_down(a: &[Action]) -> bool {
    a.iter()
        .any(|a| matches!(a, Action::Event(Event::RealServerDown { .. })))
}

fn is_up(a: &[Action]) -> bool {
    a.iter()
        .any(|a| matches!(a, Action::Event(Event::RealServerUp { .. })))
}

#[test]
fn first_check_runs_at_start_and_success_keeps_delay_loop() {
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 1, vec![chk("TCP", timing(5, 1, 1))])])));
    let a = sim.step(Outcome::ok(), ms(3));
    assert!(
        a.is_empty(),
        "an UP checker confirmed: nothing changes: {a:?}"
    );
    assert_eq!(sim.at(), ms(3));
    sim.step(Outcome::ok(), ms(0));
    assert_eq!(
        sim.at(),
        s(5) + ms(3),
        "next check delay_loop after the result"
    );
}

#[test]
fn retries_only_while_up_then_down_then_single_success_restores() {
    // retry 2, delay_before_retry 1 s, delay_loop 5 s.
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 3, vec![chk("TCP", timing(5, 2, 1))])])));
    sim.step(Outcome::ok(), ms(0)); // t=0
    // t=5: first failure → retry 1 at t=6.
    assert!(
        sim.step(Outcome::fail("connection refused"), ms(0))
            .is_empty()
    );
    assert_eq!(sim.at(), s(5));
    // t=6: second failure → retry 2 at t=7.
    assert!(
        sim.step(Outcome::fail("connection refused"), ms(0))
            .is_empty()
    );
    assert_eq!(sim.at(), s(6));
    // t=7: third failure: accepted.
    let a = sim.step(Outcome::fail("connection refused"), ms(0));
    assert_eq!(sim.at(), s(7));
    assert!(is_down(&a), "{a:?}");
    assert!(
        a.iter().any(|x| matches!(x, Action::Event(Event::CheckerDown { retries: 2, reason, .. }) if reason == "connection refused"))
    );
    assert!(a.contains(&Action::Sync(0)));
    assert!(sim.desired().is_empty(), "removed from the pool");
    // Down: a failure waits delay_loop, no retries.
    assert!(sim.step(Outcome::fail("timeout"), ms(0)).is_empty());
    assert_eq!(sim.at(), s(12));
    assert!(sim.step(Outcome::fail("timeout"), ms(0)).is_empty());
    assert_eq!(sim.at(), s(17));
    // One success brings it back with its weight.
    let a = sim.step(Outcome::ok(), ms(0));
    assert!(is_up(&a));
    assert_eq!(sim.desired(), vec![dest(1).weight(3)]);
    let st = &sim.p.status()[0].reals[0];
    assert_eq!(
        st.checkers[0].last_failure.as_deref(),
        Some("timeout"),
        "the last failure stays visible after recovery"
    );
}

#[test]
fn success_resets_the_retry_count() {
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 1, vec![chk("TCP", timing(5, 1, 1))])])));
    sim.step(Outcome::ok(), ms(0));
    assert!(sim.step(Outcome::fail("x"), ms(0)).is_empty()); // t=5, retry at 6
    assert!(sim.step(Outcome::ok(), ms(0)).is_empty()); // t=6 ok → t=11
    assert_eq!(sim.at(), s(6));
    assert!(sim.step(Outcome::fail("x"), ms(0)).is_empty()); // t=11: retry again
    assert_eq!(sim.at(), s(11));
    assert!(is_down(&sim.step(Outcome::fail("x"), ms(0))));
    assert_eq!(sim.at(), s(12));
}

#[test]
fn retry_zero_fails_at_once() {
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 1, vec![chk("MISC", timing(5, 0, 1))])])));
    assert!(is_down(&sim.step(Outcome::fail("exit status 1"), ms(0))));
    assert_eq!(sim.at(), Duration::ZERO);
}

/// keepalived's detection time, measured from the death of a server that
/// had just passed a check: refused connections (instant failures) stay
/// within `delay_loop + retry × (connect_timeout + delay_before_retry)`;
/// a blackhole costs one more connect_timeout for the first probe.
#[test]
fn detection_time_matches_keepalived_formula() {
    for (retry, dbr, dl, ct_ms) in [(1u32, 1u64, 3u64, 500u64), (3, 2, 10, 1000), (0, 1, 2, 250)] {
        let ct = ms(ct_ms);
        let formula = s(dl) + (ct + s(dbr)) * retry;
        // Refused: failures take no time.
        let mut sim = Sim::new(cfg(vs(vec![rs(
            1,
            1,
            vec![chk("TCP", timing(dl, retry, dbr))],
        )])));
        sim.step(Outcome::ok(), ms(0));
        let died = sim.now;
        loop {
            if is_down(&sim.step(Outcome::fail("connection refused"), ms(0))) {
                break;
            }
        }
        let refused = sim.now - died;
        assert_eq!(refused, s(dl) + s(dbr) * retry);
        assert!(refused <= formula);
        // Blackhole: each probe takes connect_timeout.
        let mut sim = Sim::new(cfg(vs(vec![rs(
            1,
            1,
            vec![chk("TCP", timing(dl, retry, dbr))],
        )])));
        sim.step(Outcome::ok(), ms(0));
        let died = sim.now;
        loop {
            if is_down(&sim.step(Outcome::fail("timeout"), ct)) {
                break;
            }
        }
        let blackhole = sim.now - died;
        assert_eq!(blackhole, formula + ct);
    }
}

#[test]
fn alpha_starts_down_and_first_success_adds() {
    let mut t = timing(5, 1, 1);
    t.alpha = true;
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 2, vec![chk("TCP", t)])])));
    assert!(sim.desired().is_empty(), "alpha: not in the pool at start");
    assert_eq!(sim.p.is_alive(0, 0), Some(false));
    // A failure of a never-run DOWN checker: no retry, delay_loop; only
    // keepalived's first-check notifier (its FIFO line).
    assert_eq!(
        sim.step(Outcome::fail("refused"), ms(0)),
        [Action::Fifo(
            "RS [10.0.0.1]:tcp:80 [192.168.0.1]:tcp:80 DOWN\n".into()
        )]
    );
    assert!(
        sim.step(Outcome::ok(), ms(0))
            .iter()
            .any(|a| a == &Action::Sync(0))
    );
    assert_eq!(sim.at(), s(5));
    assert_eq!(sim.desired(), vec![dest(1).weight(2)]);
}

#[test]
fn warmup_delays_first_check_deterministically() {
    let mk = |seed| {
        let mut t = timing(5, 1, 1);
        t.warmup = s(10);
        let mut p = Policy::new(seed);
        let now = Instant::now();
        p.reconfigure(
            now,
            cfg(vs((1..=20)
                .map(|i| rs(i, 1, vec![chk("TCP", t.clone())]))
                .collect())),
        );
        let mut dues = Vec::new();
        while let Some(t) = p.poll_timeout() {
            p.handle_timeout(t);
            while let Some(a) = p.poll_action() {
                if let Action::Probe(_) = a {
                    dues.push(t - now);
                }
            }
        }
        dues
    };
    let a = mk(1);
    assert_eq!(a.len(), 20);
    assert!(a.iter().all(|d| *d <= s(10)));
    assert!(a.windows(2).any(|w| w[0] != w[1]), "spread: {a:?}");
    assert!(*a.last().unwrap() > s(2), "spread over the warmup: {a:?}");
    assert_eq!(a, mk(1), "same seed, same schedule");
    assert_ne!(a, mk(2));
}

#[test]
fn real_server_up_only_when_all_checkers_up() {
    let mut sim = Sim::new(cfg(vs(vec![rs(
        1,
        1,
        vec![chk("TCP", timing(5, 0, 1)), chk("HTTP", timing(5, 0, 1))],
    )])));
    let ids = sim.next_probes();
    assert_eq!(ids.len(), 2);
    sim.p
        .handle_result(sim.now, ids[0], Outcome::fail("refused"));
    assert!(is_down(&sim.drain()));
    sim.p
        .handle_result(sim.now, ids[1], Outcome::fail("status 503"));
    let a = sim.drain();
    assert!(!is_down(&a), "already down: no second transition");
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Event(Event::CheckerDown { .. })))
    );
    let ids = sim.next_probes();
    sim.p.handle_result(sim.now, ids[0], Outcome::ok());
    assert!(!is_up(&sim.drain()), "one of two checkers up: still down");
    assert!(sim.desired().is_empty());
    sim.p.handle_result(sim.now, ids[1], Outcome::ok());
    assert!(is_up(&sim.drain()));
    assert_eq!(sim.desired(), vec![dest(1)]);
}

#[test]
fn server_without_checkers_is_always_up() {
    let sim = Sim::new(cfg(vs(vec![rs(1, 4, vec![]), rs(2, 1, vec![])])));
    assert_eq!(sim.p.poll_timeout(), None);
    assert_eq!(sim.desired(), vec![dest(1).weight(4), dest(2)]);
}

#[test]
fn inhibit_on_failure_sets_weight_zero_and_restores() {
    let mut r = rs(1, 5, vec![chk("TCP", timing(5, 0, 1))]);
    r.inhibit = true;
    let mut sim = Sim::new(cfg(vs(vec![r, rs(2, 1, vec![])])));
    sim.step(Outcome::fail("timeout"), ms(0));
    assert_eq!(sim.desired(), vec![dest(1).weight(0), dest(2)]);
    sim.step(Outcome::ok(), ms(0));
    assert_eq!(sim.desired(), vec![dest(1).weight(5), dest(2)]);
    let a = &sim.log;
    let downs: Vec<String> = a
        .iter()
        .filter_map(|x| match x {
            Action::Event(e @ Event::RealServerDown { .. }) => Some(sim.p.describe(e)),
            _ => None,
        })
        .collect();
    assert!(
        downs[0].starts_with("Disabling real server 10.0.0.1:80"),
        "{downs:?}"
    );
}

fn misc(t: Timing) -> CheckerSpec {
    let mut c = chk("MISC", t);
    c.misc_dynamic = true;
    c.interval_from_start = true;
    c
}

#[test]
fn misc_dynamic_sets_weights_and_counts_for_quorum() {
    let mut v = vs(vec![rs(1, 1, vec![misc(timing(5, 0, 1))])]);
    v.quorum = 3;
    v.quorum_down = script("qdown");
    v.quorum_up = script("qup");
    let mut sim = Sim::new(cfg(v));
    // weight 1 < quorum 3: starts without quorum, silently (no sorry server).
    assert_eq!(sim.p.quorum_up(0), Some(false));
    assert!(sim.scripts().is_empty());
    let mut o = Outcome::ok();
    o.weight = Some(7);
    let a = sim.step(o.clone(), ms(0));
    assert!(a.contains(&Action::Event(Event::Weight {
        vs: 0,
        rs: 0,
        from: 1,
        to: 7
    })));
    assert!(a.contains(&Action::Sync(0)));
    assert_eq!(sim.desired(), vec![dest(1).weight(7)]);
    assert_eq!(sim.scripts(), vec!["qup"]);
    // Same weight again: nothing.
    assert!(sim.step(o, ms(0)).is_empty());
    // Weight 0 from the script (exit 2): alive with weight 0, quorum lost.
    let mut o = Outcome::ok();
    o.weight = Some(0);
    sim.step(o, ms(0));
    assert_eq!(sim.desired(), vec![dest(1).weight(0)]);
    assert_eq!(sim.scripts(), vec!["qup", "qdown"]);
    // Exit 0 restores the configured weight (keepalived: rs->iweight).
    let a = sim.step(Outcome::ok(), ms(0));
    assert!(a.contains(&Action::Event(Event::Weight {
        vs: 0,
        rs: 0,
        from: 0,
        to: 1
    })));
    assert_eq!(sim.desired(), vec![dest(1).weight(1)]);
}

#[test]
fn misc_check_times_its_next_run_from_the_previous_start() {
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 1, vec![misc(timing(5, 1, 1))])])));
    sim.step(Outcome::ok(), s(2)); // started 0, took 2 s
    sim.step(Outcome::fail("exit status 1"), s(3)); // started 5, ended 8
    assert_eq!(sim.at(), s(8), "started at 5: start-to-start delay_loop");
    sim.step(Outcome::ok(), ms(0));
    assert_eq!(sim.at(), s(8), "retry due at 6, but the script ran until 8");
    sim.step(Outcome::ok(), ms(0));
    assert_eq!(sim.at(), s(13));
    // A TCP check times from the end instead.
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 1, vec![chk("TCP", timing(5, 1, 1))])])));
    sim.step(Outcome::ok(), s(2));
    sim.step(Outcome::ok(), ms(0));
    assert_eq!(sim.at(), s(7));
}

fn quorum_vs(sorry_inhibit: bool) -> VsSpec {
    let mut v = vs((1..=4)
        .map(|i| rs(i, 1, vec![chk("TCP", timing(5, 0, 1))]))
        .collect());
    v.quorum = 3;
    v.hysteresis = 1;
    v.quorum_up = script("quorum_up.sh");
    v.quorum_down = script("quorum_down.sh");
    v.sorry_inhibit = sorry_inhibit;
    v.services[0].sorry = Some(dest(99).weight(1));
    v
}

/// Fail or restore real server `i` (0-based) at the next round.
fn round(sim: &mut Sim, up: &[bool]) -> Vec<Action> {
    let ids = sim.next_probes();
    assert_eq!(ids.len(), up.len());
    for (id, ok) in ids.iter().zip(up) {
        let o = if *ok {
            Outcome::ok()
        } else {
            Outcome::fail("refused")
        };
        sim.p.handle_result(sim.now, *id, o);
    }
    sim.drain()
}

#[test]
fn quorum_with_hysteresis_swaps_sorry_server_in_and_out() {
    let mut sim = Sim::new(cfg(quorum_vs(false)));
    assert_eq!(sim.desired().len(), 4);
    // quorum 3, hysteresis 1: lost below 2, gained at 4.
    round(&mut sim, &[true, true, true, false]); // sum 3
    assert_eq!(sim.p.quorum_up(0), Some(true));
    round(&mut sim, &[true, true, false, false]); // sum 2: not < 2
    assert_eq!(sim.p.quorum_up(0), Some(true));
    assert_eq!(sim.desired(), vec![dest(1), dest(2)]);
    let a = round(&mut sim, &[true, false, false, false]); // sum 1 < 2: lost
    assert_eq!(sim.p.quorum_up(0), Some(false));
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Event(Event::QuorumLost { sum: 1, .. })))
    );
    assert_eq!(
        sim.desired(),
        vec![dest(99)],
        "sorry server replaces the alive ones"
    );
    assert_eq!(sim.scripts(), vec!["quorum_down.sh"]);
    round(&mut sim, &[true, true, true, false]); // sum 3 < 4: still lost
    assert_eq!(sim.p.quorum_up(0), Some(false));
    assert_eq!(sim.desired(), vec![dest(99)]);
    let a = round(&mut sim, &[true, true, true, true]); // sum 4: gained
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Event(Event::QuorumGained { sum: 4, .. })))
    );
    assert_eq!(sim.desired(), vec![dest(1), dest(2), dest(3), dest(4)]);
    assert_eq!(sim.scripts(), vec!["quorum_down.sh", "quorum_up.sh"]);
    let st = &sim.p.status()[0];
    assert!(st.quorum_up && !st.sorry_active && st.alive_weight == 4);
}

#[test]
fn sorry_server_inhibit_keeps_it_listed_at_weight_zero() {
    let mut sim = Sim::new(cfg(quorum_vs(true)));
    assert_eq!(
        sim.desired(),
        vec![dest(1), dest(2), dest(3), dest(4), dest(99).weight(0)]
    );
    round(&mut sim, &[false, false, false, false]);
    assert_eq!(sim.desired(), vec![dest(99)]);
}

#[test]
fn all_down_loses_quorum_even_without_sorry_server_and_inhibited_stay_listed() {
    let mut v = vs(vec![rs(1, 1, vec![chk("TCP", timing(5, 0, 1))])]);
    v.reals[0].inhibit = true;
    v.quorum_down = script("qd");
    let mut sim = Sim::new(cfg(v));
    sim.step(Outcome::fail("timeout"), ms(0));
    assert_eq!(sim.p.quorum_up(0), Some(false));
    assert_eq!(sim.scripts(), vec!["qd"]);
    assert_eq!(sim.desired(), vec![dest(1).weight(0)]);
}

#[test]
fn notify_scripts_run_on_real_server_transitions_only() {
    let mut r = rs(1, 1, vec![chk("TCP", timing(5, 1, 1))]);
    r.notify_up = script("/bin/up arg");
    r.notify_down = script("/bin/down");
    let mut sim = Sim::new(cfg(vs(vec![r, rs(2, 1, vec![])])));
    sim.step(Outcome::ok(), ms(0)); // confirms UP: no script
    sim.step(Outcome::fail("x"), ms(0)); // retry
    assert!(sim.scripts().is_empty());
    sim.step(Outcome::fail("x"), ms(0));
    sim.step(Outcome::fail("x"), ms(0));
    sim.step(Outcome::ok(), ms(0));
    assert_eq!(sim.scripts(), vec!["/bin/down", "/bin/up arg"]);
}

#[test]
fn omega_runs_down_notifiers_on_shutdown() {
    let mut v = vs(vec![rs(1, 1, vec![]), rs(2, 1, vec![])]);
    v.reals[0].notify_down = script("d1");
    v.reals[1].notify_down = script("d2");
    v.quorum = 2;
    v.quorum_down = script("qd");
    v.omega = true;
    let mut sim = Sim::new(cfg(v.clone()));
    sim.p.shutdown();
    sim.drain();
    assert_eq!(sim.scripts(), vec!["d1", "d2", "qd"]);
    v.omega = false;
    let mut sim = Sim::new(cfg(v));
    sim.p.shutdown();
    sim.drain();
    assert!(sim.scripts().is_empty(), "without omega nothing runs");
}

#[test]
fn omega_flag_is_required() {
    let mut v = vs(vec![rs(1, 1, vec![])]);
    v.omega = true;
    v.reals[0].notify_down = script("d1");
    let mut sim = Sim::new(cfg(v));
    sim.p.shutdown();
    sim.drain();
    assert_eq!(sim.scripts(), vec!["d1"]);
}

#[test]
fn reload_keeps_state_of_unchanged_servers() {
    let mut v = vs(vec![
        rs(1, 1, vec![chk("TCP", timing(5, 0, 1))]),
        rs(2, 1, vec![chk("TCP", timing(5, 0, 1))]),
    ]);
    let mut sim = Sim::new(cfg(v.clone()));
    let ids = sim.next_probes();
    sim.p
        .handle_result(sim.now, ids[0], Outcome::fail("refused"));
    sim.p.handle_result(sim.now, ids[1], Outcome::ok());
    sim.drain();
    assert_eq!(sim.desired(), vec![dest(2)]);
    // Start rs2's next probe so a result is in flight across the reload.
    let ids = sim.next_probes();
    assert_eq!(ids.len(), 2);
    // Reload: a third server added, weights unchanged.
    v.reals.push(rs(3, 1, vec![chk("TCP", timing(5, 0, 1))]));
    v.services[0].dests.push(dest(3));
    sim.p.reconfigure(sim.now, cfg(v.clone()));
    let a = sim.drain();
    assert!(!a.iter().any(|x| matches!(x, Action::Sync(_))), "{a:?}");
    assert_eq!(
        sim.desired(),
        vec![dest(2), dest(3)],
        "the down one stays out"
    );
    let mut defs = vec![ServiceDef {
        key: key(),
        config: rvs_core::model::ServiceConfig::new(rvs_core::model::AddrFamily::Inet),
        dests: vec![dest(1), dest(2), dest(3)],
        laddrs: Vec::new(),
    }];
    sim.p.overlay(&mut defs);
    assert_eq!(defs[0].dests, vec![dest(2), dest(3)]);
    // The in-flight result lands on the kept checker.
    sim.p.handle_result(sim.now, ids[0], Outcome::ok());
    assert!(is_up(&sim.drain()));
    // A changed checker is a new one (starts up); the old id is ignored.
    v.reals[1].checkers[0] = chk("TCP", timing(7, 0, 1));
    sim.p.reconfigure(sim.now, cfg(v));
    sim.p.handle_result(sim.now, ids[1], Outcome::fail("late"));
    assert!(sim.drain().is_empty());
    assert!(sim.p.status()[0].reals[1].checkers[0].id > ids[1]);
}

#[test]
fn reload_with_new_weight_uses_it() {
    let mut v = vs(vec![rs(1, 1, vec![chk("TCP", timing(5, 0, 1))])]);
    let mut sim = Sim::new(cfg(v.clone()));
    v.reals[0].weight = 9;
    v.services[0].dests[0] = dest(1).weight(9);
    sim.p.reconfigure(sim.now, cfg(v));
    assert_eq!(sim.desired(), vec![dest(1).weight(9)]);
}

#[test]
fn a_flapping_server_touches_only_its_virtual_server() {
    let mut a = vs(vec![rs(1, 1, vec![chk("TCP", timing(1, 0, 1))])]);
    let mut b = vs(vec![rs(2, 1, vec![])]);
    a.name = "A".into();
    b.name = "B".into();
    let mut sim = Sim::new(HealthConfig {
        virtual_servers: vec![a, b],
        no_checker_emails: false,
        rs_init_notifies: false,
    });
    for i in 0..10 {
        let o = if i % 2 == 0 {
            Outcome::fail("x")
        } else {
            Outcome::ok()
        };
        let acts = sim.step(o, ms(0));
        let syncs: Vec<&Action> = acts
            .iter()
            .filter(|x| matches!(x, Action::Sync(_)))
            .collect();
        assert_eq!(syncs, vec![&Action::Sync(0)]);
    }
}

#[test]
fn log_all_failures_reports_retried_failures() {
    let mut c = chk("TCP", timing(5, 2, 1));
    c.log_all_failures = true;
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 1, vec![c])])));
    sim.step(Outcome::ok(), ms(0));
    let a = sim.step(Outcome::fail("timeout"), ms(0));
    assert!(
        matches!(&a[..], [Action::Event(Event::CheckFailed { retry: 1, reason, .. })] if reason == "timeout"),
        "{a:?}"
    );
    assert_eq!(
        sim.p.describe(match &a[0] {
            Action::Event(e) => e,
            _ => unreachable!(),
        }),
        "TCP failed (timeout); retry 1"
    );
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 1, vec![chk("TCP", timing(5, 2, 1))])])));
    sim.step(Outcome::ok(), ms(0));
    assert!(
        sim.step(Outcome::fail("timeout"), ms(0)).is_empty(),
        "silent by default"
    );
}

#[test]
fn before_the_first_run_one_failure_is_enough() {
    // retry 3, but a checker that has never run fails at once (keepalived
    // sets retry_it = retry at start); later failures are retried.
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 1, vec![chk("TCP", timing(5, 3, 1))])])));
    assert!(is_down(
        &sim.step(Outcome::fail("connection refused"), ms(0))
    ));
    assert_eq!(sim.at(), Duration::ZERO);
    assert!(is_up(&sim.step(Outcome::ok(), ms(0))));
    for _ in 0..3 {
        assert!(sim.step(Outcome::fail("x"), ms(0)).is_empty());
    }
    assert!(is_down(&sim.step(Outcome::fail("x"), ms(0))));
}

#[test]
fn starting_without_quorum_puts_the_sorry_server_in() {
    let mut t = timing(5, 0, 1);
    t.alpha = true;
    let mut v = vs(vec![
        rs(1, 1, vec![chk("TCP", t.clone())]),
        rs(2, 1, vec![chk("TCP", t)]),
    ]);
    v.quorum = 2;
    v.quorum_down = script("qd");
    v.quorum_up = script("qu");
    v.services[0].sorry = Some(dest(99));
    let mut sim = Sim::new(cfg(v));
    assert_eq!(
        sim.desired(),
        vec![dest(99)],
        "alpha: nothing alive, sorry server in"
    );
    assert_eq!(sim.scripts(), vec!["qd"]);
    round(&mut sim, &[true, true]);
    assert_eq!(sim.desired(), vec![dest(1), dest(2)]);
    assert_eq!(sim.scripts(), vec!["qd", "qu"]);
    // Hysteresis at start: sum 2 with quorum 2 ± 1 starts down (2 < 3).
    let mut v2 = vs(vec![rs(1, 1, vec![]), rs(2, 1, vec![])]);
    v2.quorum = 2;
    v2.hysteresis = 1;
    let sim = Sim::new(cfg(v2));
    assert_eq!(sim.p.quorum_up(0), Some(false));
    assert!(
        sim.scripts().is_empty(),
        "no sorry server: starts down silently"
    );
}

#[test]
fn alpha_first_failure_runs_notify_down() {
    let mut t = timing(5, 1, 1);
    t.alpha = true;
    let mut r = rs(1, 1, vec![chk("TCP", t)]);
    r.notify_down = script("down");
    let mut sim = Sim::new(cfg(vs(vec![r])));
    sim.step(Outcome::fail("refused"), ms(0));
    sim.step(Outcome::fail("refused"), ms(0));
    assert_eq!(sim.scripts(), vec!["down"], "once, on the first run");
}

#[test]
fn reload_adding_checkers_follows_keepalived_migration() {
    let mut alpha = timing(5, 0, 1);
    alpha.alpha = true;
    let mut v = vs(vec![
        rs(1, 1, vec![chk("TCP", timing(5, 0, 1))]),
        rs(2, 1, vec![chk("TCP", timing(5, 0, 1))]),
    ]);
    let mut sim = Sim::new(cfg(v.clone()));
    let ids = sim.next_probes();
    sim.p.handle_result(sim.now, ids[0], Outcome::ok());
    sim.p
        .handle_result(sim.now, ids[1], Outcome::fail("refused"));
    sim.drain();
    // An alpha checker added to an alive server does not take it down; added
    // to a down server it starts down.
    v.reals[0].checkers.push(chk("HTTP", alpha.clone()));
    v.reals[1].checkers.push(chk("HTTP", alpha));
    sim.p.reconfigure(sim.now, cfg(v.clone()));
    assert_eq!(sim.desired(), vec![dest(1)]);
    let st = sim.p.status();
    assert!(st[0].reals[0].checkers[1].up && !st[0].reals[1].checkers[1].up);
    // Removing the failing checker of a down server brings it back.
    v.reals[1].checkers.clear();
    sim.p.reconfigure(sim.now, cfg(v));
    assert_eq!(sim.desired(), vec![dest(1), dest(2)]);
}

fn fifo_lines(a: &[Action]) -> Vec<String> {
    a.iter()
        .filter_map(|x| match x {
            Action::Fifo(l) => Some(l.clone()),
            _ => None,
        })
        .collect()
}

/// keepalived's LVS FIFO lines (ipwrapper.c's notify_fifo_rs/_vs): the
/// real server's change, then the quorum's it causes.
#[test]
fn real_server_and_quorum_changes_write_keepalived_s_fifo_lines() {
    let mut sim = Sim::new(cfg(vs(vec![rs(1, 1, vec![chk("TCP", timing(5, 0, 1))])])));
    assert!(fifo_lines(&sim.step(Outcome::ok(), ms(0))).is_empty());
    let a = sim.step(Outcome::fail("connection refused"), ms(0));
    assert_eq!(
        fifo_lines(&a),
        [
            "RS [10.0.0.1]:tcp:80 [192.168.0.1]:tcp:80 DOWN\n",
            "VS [192.168.0.1]:tcp:80 DOWN\n"
        ]
    );
    let a = sim.step(Outcome::ok(), ms(0));
    assert_eq!(
        fifo_lines(&a),
        [
            "RS [10.0.0.1]:tcp:80 [192.168.0.1]:tcp:80 UP\n",
            "VS [192.168.0.1]:tcp:80 UP\n"
        ]
    );
}

fn mails(a: &[Action]) -> Vec<(String, String)> {
    a.iter()
        .filter_map(|x| match x {
            Action::Mail { subject, body } => Some((subject.clone(), body.clone())),
            _ => None,
        })
        .collect()
}

fn mail(subject: &str, body: &str) -> (String, String) {
    (subject.to_owned(), body.to_owned())
}

/// keepalived's `smtp_alert` mails (check_tcp.c, ipwrapper.c's
/// do_vs_notifies): the quorum's mail first, then the checker's, each
/// with keepalived's subject and body; none where `smtp_alert` is off.
#[test]
fn checker_and_quorum_changes_mail_keepalived_s_alerts() {
    let mut v = vs(vec![rs(1, 1, vec![chk("TCP", timing(5, 0, 1))])]);
    v.reals[0].smtp_alert = true;
    v.smtp_alert = true;
    let mut sim = Sim::new(cfg(v.clone()));
    assert!(mails(&sim.step(Outcome::ok(), ms(0))).is_empty());
    let a = sim.step(Outcome::fail("connection refused"), ms(0));
    assert_eq!(
        mails(&a),
        [
            mail(
                "Virtualserver [192.168.0.1]:tcp:80 - DOWN",
                "=> Lost quorum 1+0=1 <= 0 <="
            ),
            mail(
                "Realserver [10.0.0.1]:tcp:80 of virtual server [192.168.0.1]:tcp:80 - DOWN",
                "=> TCP CHECK failed on service <="
            ),
        ]
    );
    let a = sim.step(Outcome::ok(), ms(0));
    assert_eq!(
        mails(&a),
        [
            mail(
                "Virtualserver [192.168.0.1]:tcp:80 - UP",
                "=> Gained quorum 1+0=1 <= 1 <="
            ),
            mail(
                "Realserver [10.0.0.1]:tcp:80 of virtual server [192.168.0.1]:tcp:80 - UP",
                "=> TCP CHECK succeed on service <="
            ),
        ]
    );
    // Off for both: the same changes send nothing.
    v.reals[0].smtp_alert = false;
    v.smtp_alert = false;
    let mut sim = Sim::new(cfg(v));
    sim.step(Outcome::ok(), ms(0));
    assert!(mails(&sim.step(Outcome::fail("refused"), ms(0))).is_empty());
    assert!(mails(&sim.step(Outcome::ok(), ms(0))).is_empty());
}

/// `no_checker_emails`: a checker whose change leaves its real server's
/// state alone (another checker still failing) sends no mail; without it,
/// it does.
#[test]
fn no_checker_emails_mails_only_real_server_changes() {
    for quiet in [false, true] {
        let mut v = vs(vec![rs(
            1,
            1,
            vec![chk("A", timing(5, 0, 1)), chk("B", timing(5, 0, 1))],
        )]);
        v.reals[0].smtp_alert = true;
        let mut sim = Sim::new(HealthConfig {
            virtual_servers: vec![v],
            no_checker_emails: quiet,
            rs_init_notifies: false,
        });
        let ids = sim.next_probes();
        assert_eq!(ids.len(), 2);
        // A fails: the real server goes down (mailed either way).
        sim.p
            .handle_result(sim.now, ids[0], Outcome::fail("connection refused"));
        sim.p.handle_result(sim.now, ids[1], Outcome::ok());
        assert_eq!(mails(&sim.drain()).len(), 1);
        // B fails too: the server stays down.
        let ids = sim.next_probes();
        sim.p
            .handle_result(sim.now, ids[0], Outcome::fail("refused"));
        sim.p
            .handle_result(sim.now, ids[1], Outcome::fail("refused"));
        let m = mails(&sim.drain());
        assert_eq!(m.len(), usize::from(!quiet), "no_checker_emails {quiet}");
    }
}

#[test]
fn mail_texts_are_keepalived_s_per_checker() {
    assert_eq!(
        MailText::of("HTTP_GET").body(false, "status code 503"),
        "=> CHECK failed on service : status code 503 <="
    );
    assert_eq!(
        MailText::of("HTTP_GET").body(true, ""),
        "=> CHECK succeed on service <="
    );
    assert_eq!(
        MailText::of("DNS_CHECK").body(false, "timeout"),
        "=> DNS_CHECK: failed on service <="
    );
    assert_eq!(
        MailText::of("PING_CHECK").body(true, ""),
        "=> ICMP CHECK succeed on service <="
    );
}

/// `rs_init_notifies` (keepalived's init_service_rs): a real server that
/// starts alive runs `notify_up` and writes its FIFO line; one that starts
/// down (alpha) does not; without the flag, nothing runs at start.
#[test]
fn rs_init_notifies_runs_up_notifiers_for_servers_starting_alive() {
    for on in [false, true] {
        let mut up = rs(1, 1, vec![chk("TCP", timing(5, 0, 1))]);
        up.notify_up = script("up.sh");
        let mut t = timing(5, 0, 1);
        t.alpha = true;
        let mut alpha = rs(2, 1, vec![chk("TCP2", t)]);
        alpha.notify_up = script("alpha_up.sh");
        let sim = Sim::new(HealthConfig {
            virtual_servers: vec![vs(vec![up, alpha])],
            no_checker_emails: false,
            rs_init_notifies: on,
        });
        let want: Vec<String> = if on { vec!["up.sh".into()] } else { vec![] };
        assert_eq!(sim.scripts(), want, "rs_init_notifies {on}");
        assert_eq!(
            fifo_lines(&sim.log),
            if on {
                vec!["RS [10.0.0.1]:tcp:80 [192.168.0.1]:tcp:80 UP\n".to_owned()]
            } else {
                vec![]
            },
            "rs_init_notifies {on}"
        );
    }
}
