//! What the policy reports: the real-server sets each service should hold
//! ([`Policy::desired`], [`Policy::overlay`]), the shutdown sequence, the
//! names and lookups the runner and the logs use, the text of an
//! [`Event`] ([`Policy::describe`]) and the status tree ([`Policy::status`]).

use super::*;

impl Policy {
    /// The real servers each service of virtual server `vs` should hold now:
    /// alive ones with their current weight, failed ones with
    /// `inhibit_on_failure` at weight 0, and the sorry server when quorum is
    /// lost (or at weight 0 with `sorry_server_inhibit` when it is not).
    pub fn desired(&self, vs: usize) -> Vec<(ServiceKey, Vec<DestConfig>)> {
        let Some(spec) = self.config.virtual_servers.get(vs) else {
            return Vec::new();
        };
        spec.services
            .iter()
            .map(|slot| (slot.key, self.desired_slot(vs, slot)))
            .collect()
    }

    fn desired_slot(&self, vs: usize, slot: &ServiceSlot) -> Vec<DestConfig> {
        let spec = &self.config.virtual_servers[vs];
        let st = &self.vs[vs];
        let sorry_active = !st.quorum_up && slot.sorry.is_some();
        let mut out = Vec::with_capacity(slot.dests.len() + 1);
        for (i, d) in slot.dests.iter().enumerate() {
            let (Some(r), Some(rspec)) = (st.rs.get(i), spec.reals.get(i)) else {
                out.push(*d);
                continue;
            };
            if r.alive && !sorry_active {
                out.push(d.weight(r.weight));
            } else if rspec.inhibit {
                out.push(d.weight(0));
            }
        }
        if let Some(s) = slot.sorry
            && !out.iter().any(|d| dest_id(d) == dest_id(&s))
        {
            if sorry_active {
                out.push(s);
            } else if spec.sorry_inhibit {
                out.push(s.weight(0));
            }
        }
        out
    }

    /// Replace the real servers of every service the policy knows with what
    /// it wants there ([`Policy::desired`]); other services are left alone.
    pub fn overlay(&self, defs: &mut [ServiceDef]) {
        let mut slots: HashMap<ServiceKey, (usize, &ServiceSlot)> = HashMap::new();
        for (vi, vs) in self.config.virtual_servers.iter().enumerate() {
            for s in &vs.services {
                slots.insert(s.key, (vi, s));
            }
        }
        for def in defs {
            if let Some((vi, slot)) = slots.get(&def.key) {
                def.dests = self.desired_slot(*vi, slot);
            }
        }
    }

    /// Shutting down: with `omega`, run keepalived's exit notifiers (each
    /// alive real server's `notify_down`, then the virtual server's
    /// `quorum_down`, and their FIFO lines). Emits [`Action::Script`]s and
    /// [`Action::Fifo`]s only; the data plane is being torn down anyway.
    pub fn shutdown(&mut self) {
        for vi in 0..self.vs.len() {
            let spec = &self.config.virtual_servers[vi];
            if !spec.omega {
                continue;
            }
            let mut downs = Vec::new();
            for ri in 0..self.vs[vi].rs.len() {
                if !self.vs[vi].rs[ri].alive {
                    continue;
                }
                self.vs[vi].rs[ri].alive = false;
                let rspec = &spec.reals[ri];
                if let Some(script) = rspec.notify_down.clone() {
                    let why = format!("shutdown (omega): {} of {}", rspec.name, spec.name);
                    self.actions.push_back(Action::Script { script, why });
                }
                downs.push(ri);
            }
            let quorum_down = spec.quorum_down.clone();
            let name = spec.name.clone();
            for ri in downs {
                self.push_rs_fifo(vi, ri, false);
            }
            // keepalived's update_vs_notifies(stopping): the quorum is
            // down once the virtual server is gone.
            self.vs[vi].quorum_up = false;
            if let Some(script) = quorum_down {
                let why = format!("shutdown (omega): {name}");
                self.actions.push_back(Action::Script { script, why });
            }
            self.push_vs_fifo(vi, false);
        }
    }

    /// How late checker `id`'s running probe started at `now` compared to
    /// its schedule (for the lateness histogram).
    pub fn lateness(&self, id: CheckerId, now: Instant) -> Option<Duration> {
        let c = &self.checkers[*self.by_id.get(&id)?];
        c.started_due.map(|t| now.saturating_duration_since(t))
    }

    /// Name of virtual server `vs`.
    pub fn vs_name(&self, vs: usize) -> &str {
        self.config
            .virtual_servers
            .get(vs)
            .map_or("?", |v| v.name.as_str())
    }

    /// Name of real server `rs` of virtual server `vs`.
    pub fn rs_name(&self, vs: usize, rs: usize) -> &str {
        self.real(vs, rs).map_or("?", |r| r.name.as_str())
    }

    /// "Adding real server X to VS" as keepalived logs it: `verbs` are the
    /// verb for a server that is added or removed and the one for a server
    /// with `inhibit_on_failure`, which is only given weight 0 or back.
    fn rs_change(&self, vs: usize, rs: usize, verbs: [&str; 2], preposition: &str) -> String {
        let inhibit = self.real(vs, rs).is_some_and(|r| r.inhibit);
        format!(
            "{} real server {} {preposition} {}",
            verbs[usize::from(inhibit)],
            self.rs_name(vs, rs),
            self.vs_name(vs)
        )
    }

    fn real(&self, vs: usize, rs: usize) -> Option<&RsSpec> {
        self.config.virtual_servers.get(vs)?.reals.get(rs)
    }

    /// Label of a checker.
    pub fn checker_label(&self, id: CheckerId) -> &str {
        self.by_id
            .get(&id)
            .map_or("?", |&i| self.checkers[i].spec.label.as_str())
    }

    /// Where checker `id` belongs: (virtual server, real server) indices.
    pub fn checker_owner(&self, id: CheckerId) -> Option<(usize, usize)> {
        self.by_id
            .get(&id)
            .map(|&i| (self.checkers[i].vs, self.checkers[i].rs))
    }

    /// Every checker id with its (virtual server, real server) indices.
    pub fn checker_ids(&self) -> impl Iterator<Item = (CheckerId, usize, usize)> + '_ {
        self.checkers.iter().map(|c| (c.id, c.vs, c.rs))
    }

    /// Is real server `rs` of `vs` alive?
    pub fn is_alive(&self, vs: usize, rs: usize) -> Option<bool> {
        self.vs.get(vs).and_then(|v| v.rs.get(rs)).map(|r| r.alive)
    }

    /// Does virtual server `vs` hold quorum?
    pub fn quorum_up(&self, vs: usize) -> Option<bool> {
        self.vs.get(vs).map(|v| v.quorum_up)
    }

    /// One line for the log about an event.
    pub fn describe(&self, ev: &Event) -> String {
        match ev {
            Event::CheckerUp { checker, vs, rs } => format!(
                "{} of real server {} in {}: UP",
                self.checker_label(*checker),
                self.rs_name(*vs, *rs),
                self.vs_name(*vs)
            ),
            Event::CheckerDown {
                checker,
                vs,
                rs,
                reason,
                retries,
            } => format!(
                "{} of real server {} in {}: DOWN ({reason}{})",
                self.checker_label(*checker),
                self.rs_name(*vs, *rs),
                self.vs_name(*vs),
                if *retries > 0 {
                    format!(", after {retries} retries")
                } else {
                    String::new()
                }
            ),
            Event::CheckFailed {
                checker,
                reason,
                retry,
            } => format!(
                "{} failed ({reason}); retry {retry}",
                self.checker_label(*checker)
            ),
            Event::RealServerUp { vs, rs } => {
                self.rs_change(*vs, *rs, ["Adding", "Enabling"], "to")
            }
            Event::RealServerDown { vs, rs, reason } => format!(
                "{} ({reason})",
                self.rs_change(*vs, *rs, ["Removing", "Disabling"], "from")
            ),
            Event::Weight { vs, rs, from, to } => format!(
                "Changing weight from {from} to {to} for real server {} of {}",
                self.rs_name(*vs, *rs),
                self.vs_name(*vs)
            ),
            Event::QuorumGained { vs, sum } => {
                let s = &self.config.virtual_servers[*vs];
                format!(
                    "Gained quorum {}+{}={} <= {sum} for {}",
                    s.quorum,
                    s.hysteresis,
                    u64::from(s.quorum) + u64::from(s.hysteresis),
                    s.name
                )
            }
            Event::QuorumLost { vs, sum } => {
                let s = &self.config.virtual_servers[*vs];
                format!(
                    "Lost quorum {}-{}={} > {sum} for {}",
                    s.quorum,
                    s.hysteresis,
                    u64::from(s.quorum).saturating_sub(u64::from(s.hysteresis)),
                    s.name
                )
            }
        }
    }

    /// The whole state, for `rvsadm --checks` and the JSON view.
    pub fn status(&self) -> Vec<VsStatus> {
        let mut by_rs: HashMap<(usize, usize), Vec<&Chk>> = HashMap::new();
        for c in &self.checkers {
            by_rs.entry((c.vs, c.rs)).or_default().push(c);
        }
        self.config
            .virtual_servers
            .iter()
            .enumerate()
            .map(|(vi, vs)| VsStatus {
                name: vs.name.clone(),
                quorum_up: self.vs[vi].quorum_up,
                quorum: vs.quorum,
                hysteresis: vs.hysteresis,
                alive_weight: self.alive_weight(vi),
                sorry_active: !self.vs[vi].quorum_up && self.has_sorry(vi),
                reals: vs
                    .reals
                    .iter()
                    .enumerate()
                    .map(|(ri, rs)| {
                        let st = &self.vs[vi].rs[ri];
                        RsStatus {
                            name: rs.name.clone(),
                            alive: st.alive,
                            weight: st.weight,
                            configured_weight: rs.weight,
                            inhibit: rs.inhibit,
                            down_reason: st.down_reason.clone(),
                            checkers: by_rs
                                .get(&(vi, ri))
                                .map(Vec::as_slice)
                                .unwrap_or_default()
                                .iter()
                                .map(|c| CheckerStatus {
                                    id: c.id,
                                    label: c.spec.label.clone(),
                                    up: c.is_up,
                                    has_run: c.has_run,
                                    retries: c.retry_it,
                                    last_failure: c.last_failure.clone(),
                                    last_ok: c.last_result_ok,
                                    last_latency_us: c.last_latency.map(|l| l.as_micros() as u64),
                                })
                                .collect(),
                        }
                    })
                    .collect(),
            })
            .collect()
    }
}
