//! The state changes behind a probe's result, keepalived's
//! `update_svr_checker_state` and what follows it: checker up/down, real
//! server alive or not, notify FIFO lines, dynamic weights, quorum up/down
//! with the sorry server, and marking virtual servers whose set changed.

use super::*;

impl Policy {
    /// keepalived's update_svr_checker_state.
    pub(super) fn checker_state(&mut self, i: usize, up: bool, reason: String, retries: u32) {
        let c = &mut self.checkers[i];
        let (id, vs, rs, was_up, first, alpha) =
            (c.id, c.vs, c.rs, c.is_up, !c.has_run, c.spec.timing.alpha);
        c.is_up = up;
        if was_up == up {
            // The first run confirming the initial state changes nothing;
            // keepalived still runs the real server's notifier when an
            // alpha checker confirms it down.
            if first && (alpha || !up) {
                let alive = self.vs[vs].rs[rs].alive;
                let spec = &self.config.virtual_servers[vs];
                let r = &spec.reals[rs];
                let script = if alive { &r.notify_up } else { &r.notify_down };
                if let Some(script) = script.clone() {
                    let why = format!(
                        "real server {} of {} {} (first check)",
                        r.name,
                        spec.name,
                        if alive { "up" } else { "down" }
                    );
                    self.actions.push_back(Action::Script { script, why });
                }
                self.push_rs_fifo(vs, rs, alive);
            }
            return;
        }
        let label = c.spec.label.clone();
        let mail = c.spec.mail;
        let rs_was_alive = self.vs[vs].rs[rs].alive;
        let st = &mut self.vs[vs].rs[rs];
        if up {
            self.actions.push_back(Action::Event(Event::CheckerUp {
                checker: id,
                vs,
                rs,
            }));
            st.failed = st.failed.saturating_sub(1);
            if st.failed == 0 {
                self.rs_state(vs, rs, true, String::new());
            }
        } else {
            self.actions.push_back(Action::Event(Event::CheckerDown {
                checker: id,
                vs,
                rs,
                reason: reason.clone(),
                retries,
            }));
            st.failed += 1;
            if st.failed == 1 {
                self.rs_state(vs, rs, false, format!("{label}: {reason}"));
            }
        }
        // keepalived mails after the real server's notifiers (and any
        // quorum mail), when the checker changed and either its real
        // server did too or `no_checker_emails` is off.
        let spec = &self.config.virtual_servers[vs];
        let alive = self.vs[vs].rs[rs].alive;
        if spec.reals[rs].smtp_alert && (rs_was_alive != alive || !self.config.no_checker_emails) {
            let subject = format!(
                "Realserver {} of virtual server {} - {}",
                fmt_rs(spec, rs),
                fmt_vs(spec),
                up_down(alive)
            );
            let body = mail.body(up, &reason);
            self.actions.push_back(Action::Mail { subject, body });
        }
    }

    /// keepalived's perform_svr_state.
    fn rs_state(&mut self, vs: usize, rs: usize, alive: bool, reason: String) {
        let st = &mut self.vs[vs].rs[rs];
        if st.alive == alive {
            return;
        }
        st.alive = alive;
        st.down_reason = if alive { None } else { Some(reason.clone()) };
        let spec = &self.config.virtual_servers[vs].reals[rs];
        let vs_name = &self.config.virtual_servers[vs].name;
        let (event, script) = if alive {
            (Event::RealServerUp { vs, rs }, spec.notify_up.clone())
        } else {
            (
                Event::RealServerDown { vs, rs, reason },
                spec.notify_down.clone(),
            )
        };
        let why = format!(
            "real server {} of {} {}",
            spec.name,
            vs_name,
            if alive { "up" } else { "down" }
        );
        self.actions.push_back(Action::Event(event));
        self.mark_dirty(vs);
        if let Some(script) = script {
            self.actions.push_back(Action::Script { script, why });
        }
        self.push_rs_fifo(vs, rs, alive);
        self.update_quorum(vs, false);
    }

    /// The FIFO line of real server `rs` of `vs` now `alive` (keepalived's
    /// notify_fifo_rs).
    pub(super) fn push_rs_fifo(&mut self, vs: usize, rs: usize, alive: bool) {
        let spec = &self.config.virtual_servers[vs];
        let line = format!(
            "RS {} {} {}\n",
            fmt_rs(spec, rs),
            fmt_vs(spec),
            up_down(alive)
        );
        self.actions.push_back(Action::Fifo(line));
    }

    /// The FIFO line of `vs`'s quorum (keepalived's notify_fifo_vs).
    pub(super) fn push_vs_fifo(&mut self, vs: usize, up: bool) {
        let spec = &self.config.virtual_servers[vs];
        let line = format!("VS {} {}\n", fmt_vs(spec), up_down(up));
        self.actions.push_back(Action::Fifo(line));
    }

    /// keepalived's update_svr_wgt.
    pub(super) fn set_weight(&mut self, vs: usize, rs: usize, w: u32) {
        let st = &mut self.vs[vs].rs[rs];
        if st.weight == w {
            return;
        }
        let from = st.weight;
        st.weight = w;
        let alive = st.alive;
        self.actions.push_back(Action::Event(Event::Weight {
            vs,
            rs,
            from,
            to: w,
        }));
        if alive {
            self.mark_dirty(vs);
        }
        self.update_quorum(vs, false);
    }

    pub(super) fn alive_weight(&self, vs: usize) -> u64 {
        self.vs[vs]
            .rs
            .iter()
            .filter(|r| r.alive)
            .map(|r| u64::from(r.weight.min(65535)))
            .sum()
    }

    pub(super) fn has_sorry(&self, vs: usize) -> bool {
        self.config.virtual_servers[vs]
            .services
            .iter()
            .any(|s| s.sorry.is_some())
    }

    /// keepalived's update_quorum_state. `init`: a virtual server starting
    /// with quorum down adds its sorry server (and runs `quorum_down`);
    /// without a sorry server it starts down silently.
    pub(super) fn update_quorum(&mut self, vs: usize, init: bool) {
        let sum = self.alive_weight(vs);
        let spec = self.config.virtual_servers[vs].clone();
        let up_threshold = u64::from(spec.quorum) + u64::from(spec.hysteresis);
        let down_threshold = u64::from(spec.quorum).saturating_sub(u64::from(spec.hysteresis));
        let q = self.vs[vs].quorum_up;
        // keepalived's do_vs_notifies mail: the threshold it compared with
        // (quorum ± hysteresis, written `Q+H=T` either way).
        let quorum_mail = |up: bool, threshold: u64| Action::Mail {
            subject: format!("Virtualserver {} - {}", fmt_vs(&spec), up_down(up)),
            body: format!(
                "=> {} {}+{}={threshold} <= {sum} <=",
                match (up, init) {
                    (true, true) => "Starting with quorum up",
                    (true, false) => "Gained quorum",
                    (false, true) => "Starting with quorum down",
                    (false, false) => "Lost quorum",
                },
                spec.quorum,
                spec.hysteresis
            ),
        };
        if !q && sum >= up_threshold {
            self.vs[vs].quorum_up = true;
            self.actions
                .push_back(Action::Event(Event::QuorumGained { vs, sum }));
            if self.has_sorry(vs) {
                self.mark_dirty(vs);
            }
            if let Some(script) = spec.quorum_up.clone() {
                let why = format!("quorum gained for {}", spec.name);
                self.actions.push_back(Action::Script { script, why });
            }
            self.push_vs_fifo(vs, true);
            if spec.smtp_alert {
                self.actions.push_back(quorum_mail(true, up_threshold));
            }
        } else if (q && (sum == 0 || sum < down_threshold)) || (init && !q && self.has_sorry(vs)) {
            self.vs[vs].quorum_up = false;
            self.actions
                .push_back(Action::Event(Event::QuorumLost { vs, sum }));
            if let Some(script) = spec.quorum_down.clone() {
                let why = format!("quorum lost for {}", spec.name);
                self.actions.push_back(Action::Script { script, why });
            }
            self.push_vs_fifo(vs, false);
            if spec.smtp_alert {
                let threshold = if q { down_threshold } else { up_threshold };
                self.actions.push_back(quorum_mail(false, threshold));
            }
            if self.has_sorry(vs) {
                self.mark_dirty(vs);
            }
        }
    }

    fn mark_dirty(&mut self, vs: usize) {
        if let Some(d) = self.dirty.get_mut(vs)
            && !*d
        {
            *d = true;
            self.actions.push_back(Action::Sync(vs));
        }
    }
}
