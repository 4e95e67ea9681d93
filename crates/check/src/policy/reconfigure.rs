//! [`Policy::reconfigure`]: installing a (new) configuration, keeping the
//! state of unchanged checkers and real servers across a reload.

use super::*;

impl Policy {
    /// Install a (new) configuration at `now`. Checkers whose virtual
    /// server, real server and identity are unchanged keep their state (up or
    /// down, retries, next due time, an in-flight probe); real servers keep
    /// their alive state and dynamic weight (a configured weight change
    /// wins), so a server that is down stays out after a reload. New
    /// checkers start UP (DOWN with `alpha`) and run after their warmup.
    /// Quorum is re-evaluated for every virtual server.
    ///
    /// The caller applies [`Policy::overlay`] to the new service table.
    pub fn reconfigure(&mut self, now: Instant, config: HealthConfig) {
        // Old state by identity.
        let mut old_chk: HashMap<(&str, &str, &str, usize), &Chk> = HashMap::new();
        for c in &self.checkers {
            let vs = &self.config.virtual_servers[c.vs];
            let rs = &vs.reals[c.rs];
            old_chk.insert(
                (
                    vs.name.as_str(),
                    rs.name.as_str(),
                    c.spec.identity.as_str(),
                    c.nth,
                ),
                c,
            );
        }
        let mut old_rs: HashMap<(&str, &str), (&Rs, &RsSpec)> = HashMap::new();
        let mut old_vs: HashMap<&str, &Vs> = HashMap::new();
        for (vi, vs) in self.config.virtual_servers.iter().enumerate() {
            old_vs.insert(vs.name.as_str(), &self.vs[vi]);
            for (ri, rs) in vs.reals.iter().enumerate() {
                old_rs.insert(
                    (vs.name.as_str(), rs.name.as_str()),
                    (&self.vs[vi].rs[ri], rs),
                );
            }
        }

        let mut vs_states = Vec::with_capacity(config.virtual_servers.len());
        let mut new_vs = Vec::with_capacity(config.virtual_servers.len());
        let mut checkers = Vec::new();
        let mut next_id = self.next_id;
        let mut added_alive = Vec::new();
        for (vi, vs) in config.virtual_servers.iter().enumerate() {
            let mut rs_states = Vec::with_capacity(vs.reals.len());
            for (ri, rs) in vs.reals.iter().enumerate() {
                let mut failed = 0;
                let mut reason = None;
                let kept = old_rs.get(&(vs.name.as_str(), rs.name.as_str()));
                // keepalived's migrate_checkers: a checker new to a kept
                // server starts down with alpha only if the server is not
                // alive; on an alive server it does not take it down.
                let kept_alive = kept.is_some_and(|(old, _)| old.alive);
                for (ci, spec) in rs.checkers.iter().enumerate() {
                    let key = (
                        vs.name.as_str(),
                        rs.name.as_str(),
                        spec.identity.as_str(),
                        ci,
                    );
                    let chk = match old_chk.get(&key) {
                        Some(old) => Chk {
                            vs: vi,
                            rs: ri,
                            nth: ci,
                            spec: spec.clone(),
                            ..(*old).clone()
                        },
                        None => {
                            let id = CheckerId(next_id);
                            next_id += 1;
                            let warmup = spec.timing.warmup.as_millis() as u64;
                            let delay = if warmup == 0 {
                                0
                            } else {
                                mix(self.seed ^ mix(id.0)) % (warmup + 1)
                            };
                            Chk {
                                id,
                                vs: vi,
                                rs: ri,
                                nth: ci,
                                spec: spec.clone(),
                                is_up: !spec.timing.alpha || kept_alive,
                                has_run: false,
                                // keepalived: at start "one failure is
                                // enough" (retries begin once it has run).
                                retry_it: spec.timing.retry,
                                due: Some(now + Duration::from_millis(delay)),
                                started_due: None,
                                started_at: None,
                                in_flight: false,
                                last_failure: None,
                                last_latency: None,
                                last_result_ok: None,
                            }
                        }
                    };
                    if !chk.is_up {
                        failed += 1;
                        if reason.is_none() {
                            reason = Some(match &chk.last_failure {
                                Some(r) => format!("{}: {r}", chk.spec.label),
                                None => format!("{}: not yet checked (alpha)", chk.spec.label),
                            });
                        }
                    }
                    checkers.push(chk);
                }
                let (alive, weight) = match kept {
                    Some((old, old_spec)) => {
                        let weight = if old_spec.weight != rs.weight {
                            rs.weight
                        } else {
                            old.weight
                        };
                        // A kept server keeps its state, unless the checkers
                        // that made it fail are gone.
                        (old.alive || failed == 0, weight)
                    }
                    None => {
                        if failed == 0 {
                            added_alive.push((vi, ri));
                        }
                        (failed == 0, rs.weight)
                    }
                };
                rs_states.push(Rs {
                    alive,
                    weight,
                    failed,
                    down_reason: if alive { None } else { reason },
                });
            }
            // keepalived's set_quorum_states for a new virtual server;
            // a kept one keeps its state (re-evaluated below).
            let quorum_up = match old_vs.get(vs.name.as_str()) {
                Some(v) => v.quorum_up,
                None => {
                    let sum: u64 = rs_states
                        .iter()
                        .filter(|r| r.alive)
                        .map(|r| u64::from(r.weight.min(65535)))
                        .sum();
                    sum >= u64::from(vs.quorum) + u64::from(vs.hysteresis)
                }
            };
            let was_known = old_vs.contains_key(vs.name.as_str());
            new_vs.push(!was_known);
            vs_states.push(Vs {
                quorum_up,
                rs: rs_states,
            });
        }
        self.next_id = next_id;
        self.config = config;
        self.vs = vs_states;
        self.checkers = checkers;
        self.by_id = self
            .checkers
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id, i))
            .collect();
        self.queue = self
            .checkers
            .iter()
            .filter(|c| !c.in_flight)
            .filter_map(|c| c.due.map(|d| (d, c.id)))
            .collect();
        self.dirty = vec![false; self.vs.len()];
        // Indices in pending transitions refer to the old table; probes and
        // scripts stay valid.
        self.actions
            .retain(|a| matches!(a, Action::Probe(_) | Action::Script { .. }));
        // keepalived's init_service_rs: with `rs_init_notifies`, a server
        // that starts alive gets its up notifiers.
        if self.config.rs_init_notifies {
            for (vi, ri) in added_alive {
                let spec = &self.config.virtual_servers[vi];
                let r = &spec.reals[ri];
                if let Some(script) = r.notify_up.clone() {
                    let why = format!(
                        "real server {} of {} up (rs_init_notifies)",
                        r.name, spec.name
                    );
                    self.actions.push_back(Action::Script { script, why });
                }
                self.push_rs_fifo(vi, ri, true);
            }
        }
        for (vi, fresh) in new_vs.into_iter().enumerate() {
            self.update_quorum(vi, fresh);
        }
        // The caller installs the overlay itself: nothing is dirty yet.
        self.actions.retain(|a| !matches!(a, Action::Sync(_)));
        self.dirty.iter_mut().for_each(|d| *d = false);
    }
}
