//! The health checker as the daemon holds it: the [`Policy`], the probe of
//! each checker, and the statistics behind the metrics. Synchronous (it
//! lives inside the daemon's state); the [`crate::runner`] drives it.

use std::collections::HashMap;
use std::time::Instant;

use rvs_control::state::ServiceDef;
use rvs_core::model::{DestConfig, ServiceKey};

use crate::build::{HealthPlan, ProbeJob};
use crate::policy::{Action, CheckerId, Event, Outcome, Policy, ScriptSpec, VsStatus};

/// Upper bounds of the check-latency histogram, seconds.
pub const LATENCY_BUCKETS: [f64; 10] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

/// A histogram over [`LATENCY_BUCKETS`]: what the metrics endpoint reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    buckets: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (i, b) in LATENCY_BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.buckets[i] += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    /// Observations at or below each bound of [`LATENCY_BUCKETS`]
    /// (cumulative, as Prometheus buckets are).
    pub fn cumulative(&self) -> &[u64; LATENCY_BUCKETS.len()] {
        &self.buckets
    }

    /// How many observations there were.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Their sum, seconds.
    pub fn sum(&self) -> f64 {
        self.sum
    }
}

/// What the runner must do after a [`Health::step`].
#[derive(Debug, Default)]
pub struct Work {
    /// Probes to start now.
    pub probes: Vec<(CheckerId, ProbeJob)>,
    /// Services whose real servers must become these (apply the difference).
    pub syncs: Vec<(ServiceKey, Vec<DestConfig>)>,
    /// Scripts to run, with what triggered them.
    pub scripts: Vec<(ScriptSpec, String)>,
    /// Lines for the LVS notify FIFOs ([`Action::Fifo`]).
    pub fifo: Vec<String>,
    /// `smtp_alert` mails to send: (subject after `[ROUTER_ID] `, body)
    /// ([`Action::Mail`]).
    pub mail: Vec<(String, String)>,
    /// Whether a checker, real server or quorum changed state (not a
    /// failure about to be retried): what an operator watching must see
    /// at once (the dashboard pushes it without waiting for its next
    /// regular event).
    pub transitioned: bool,
}

/// Labels of a checker in metrics: (virtual server, real server, checker).
pub type Labels = (String, String, String);

/// Policy + probes + statistics.
#[derive(Clone, Debug)]
pub struct Health {
    policy: Policy,
    jobs: HashMap<CheckerId, ProbeJob>,
    latency: HashMap<Labels, Histogram>,
    lateness: Histogram,
    transitions: HashMap<(Labels, &'static str), u64>,
}

impl Health {
    /// Nothing to check yet; `seed` drives the warmup jitter.
    pub fn new(seed: u64) -> Self {
        Health {
            policy: Policy::new(seed),
            jobs: HashMap::new(),
            latency: HashMap::new(),
            lateness: Histogram::default(),
            transitions: HashMap::new(),
        }
    }

    /// The policy (read-only).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Install a configuration's checkers (see [`Policy::reconfigure`]).
    /// Statistics are kept by name, so they survive reloads.
    pub fn reconfigure(&mut self, now: Instant, plan: HealthPlan) {
        self.policy.reconfigure(now, plan.config);
        self.jobs = self
            .policy
            .checker_ids()
            .map(|(id, _, _)| id)
            .zip(plan.jobs)
            .collect();
    }

    /// Apply the health state to a service table about to be installed.
    pub fn overlay(&self, defs: &mut [ServiceDef]) {
        self.policy.overlay(defs);
    }

    /// When the next probe is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.policy.poll_timeout()
    }

    fn labels(&self, id: CheckerId) -> Option<Labels> {
        let (vs, rs) = self.policy.checker_owner(id)?;
        Some((
            self.policy.vs_name(vs).to_owned(),
            self.policy.rs_name(vs, rs).to_owned(),
            self.policy.checker_label(id).to_owned(),
        ))
    }

    /// Feed finished probes, start due ones, and collect what to do. Each
    /// transition is logged with its reason.
    pub fn step(&mut self, now: Instant, results: Vec<(CheckerId, Outcome)>) -> Work {
        for (id, o) in results {
            if let Some(l) = self.labels(id) {
                self.latency
                    .entry(l)
                    .or_default()
                    .observe(o.latency.as_secs_f64());
            }
            self.policy.handle_result(now, id, o);
        }
        self.policy.handle_timeout(now);
        let mut work = Work::default();
        while let Some(a) = self.policy.poll_action() {
            match a {
                Action::Probe(id) => {
                    if let Some(late) = self.policy.lateness(id, now) {
                        self.lateness.observe(late.as_secs_f64());
                    }
                    if let Some(j) = self.jobs.get(&id) {
                        work.probes.push((id, j.clone()));
                    }
                }
                Action::Sync(vs) => work.syncs.extend(self.policy.desired(vs)),
                Action::Script { script, why } => work.scripts.push((script, why)),
                Action::Event(e) => {
                    work.transitioned |= !matches!(e, Event::CheckFailed { .. });
                    self.event(&e);
                }
                Action::Fifo(line) => work.fifo.push(line),
                Action::Mail { subject, body } => work.mail.push((subject, body)),
            }
        }
        work
    }

    fn event(&mut self, e: &Event) {
        let line = self.policy.describe(e);
        match e {
            Event::CheckerUp { checker, .. } | Event::CheckerDown { checker, .. } => {
                let to = if matches!(e, Event::CheckerUp { .. }) {
                    "up"
                } else {
                    "down"
                };
                if let Some(l) = self.labels(*checker) {
                    *self.transitions.entry((l, to)).or_default() += 1;
                }
                tracing::info!(target: "rvs::check", "{line}");
            }
            Event::CheckFailed { checker, .. } => {
                if let Some(l) = self.labels(*checker) {
                    tracing::info!(target: "rvs::check", "{line} (real server {} in {})", l.1, l.0);
                }
            }
            Event::RealServerDown { .. } | Event::QuorumLost { .. } => {
                tracing::warn!(target: "rvs::check", "{line}")
            }
            _ => tracing::info!(target: "rvs::check", "{line}"),
        }
    }

    /// Shutting down: the `omega` scripts to run and FIFO lines to write
    /// (in [`Work::scripts`] and [`Work::fifo`]).
    pub fn shutdown(&mut self) -> Work {
        self.policy.shutdown();
        let mut out = Work::default();
        while let Some(a) = self.policy.poll_action() {
            match a {
                Action::Script { script, why } => out.scripts.push((script, why)),
                Action::Fifo(line) => out.fifo.push(line),
                _ => {}
            }
        }
        out
    }

    /// Every virtual server's check state.
    pub fn status(&self) -> Vec<VsStatus> {
        self.policy.status()
    }

    /// Probe latency per checker (`rvs_check_latency_seconds`), sorted by
    /// labels.
    pub fn latency(&self) -> Vec<(&Labels, &Histogram)> {
        let mut lat: Vec<_> = self.latency.iter().collect();
        lat.sort_by(|a, b| a.0.cmp(b.0));
        lat
    }

    /// How late probes started against their schedule
    /// (`rvs_check_lateness_seconds`).
    pub fn lateness(&self) -> &Histogram {
        &self.lateness
    }

    /// Checker state changes per checker and new state (`up`/`down`),
    /// sorted (`rvs_check_transitions_total`).
    pub fn transitions(&self) -> Vec<(&Labels, &'static str, u64)> {
        let mut tr: Vec<_> = self
            .transitions
            .iter()
            .map(|((l, to), n)| (l, *to, *n))
            .collect();
        tr.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        tr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// One probe due now: its id (the test feeds its outcome).
    fn due(h: &mut Health, now: Instant) -> CheckerId {
        let w = h.step(now, Vec::new());
        assert!(!w.transitioned, "no result, no transition");
        assert_eq!(w.probes.len(), 1, "{:?}", w.probes);
        w.probes[0].0
    }

    #[test]
    fn a_retried_failure_is_no_transition_the_accepted_one_is() {
        let (conf, specs) = crate::build::tests::load(
            "virtual_server 10.0.0.1 80 {\n  delay_loop 2\n  lb_algo rr\n  protocol TCP\n\
             real_server 10.0.0.2 80 {\n    TCP_CHECK {\n      retry 1\n      \
             delay_before_retry 1\n      warmup 0\n    }\n  }\n}\n",
        );
        let mut h = Health::new(1);
        let t0 = Instant::now();
        h.reconfigure(t0, crate::build::plan(&conf, &specs));
        let id = due(&mut h, t0);
        assert!(!h.step(t0, vec![(id, Outcome::ok())]).transitioned);
        let t1 = t0 + Duration::from_secs(2);
        let id = due(&mut h, t1);
        let w = h.step(t1, vec![(id, Outcome::fail("connection refused"))]);
        assert!(!w.transitioned && w.syncs.is_empty(), "{w:?}");
        let t2 = t1 + Duration::from_secs(1);
        let id = due(&mut h, t2);
        let w = h.step(t2, vec![(id, Outcome::fail("connection refused"))]);
        assert!(w.transitioned && !w.syncs.is_empty(), "{w:?}");
        assert_eq!(h.policy().is_alive(0, 0), Some(false));
    }
}
