//! The daemon's state: the controller (desired state + data plane), where
//! the configuration came from, and the request handlers. One task owns it
//! ([`crate::handle`]); the others ask through a handle.

use std::sync::Arc;
use std::time::Instant as StdInstant;

use rvs_control::owner::{Change, Owner};
use rvs_control::protocol::{Request, Response};
use rvs_control::state::{Controller, DiffSummary};
use rvs_core::time::Instant;

use crate::source::{Loaded, Source};
use crate::view;

/// Everything the daemon's tasks ask about or change, owned by one task
/// ([`crate::handle::spawn`]).
pub struct Daemon {
    ctl: Controller,
    source: Option<Source>,
    epoch: StdInstant,
    reloads: u64,
    reload_failures: u64,
    proxy_stats: Option<std::sync::Arc<rvs_proxy::ProxyStats>>,
    xdp_flood: Option<std::sync::Arc<rvs_xdp::plane::FloodStats>>,
    sock_stats: Option<rvs_sock::plane::SockStats>,
    /// The configuration file has been applied once (later ones are reloads).
    loaded: bool,
    /// The health checkers of the configuration (keepalived.conf).
    health: rvs_check::Health,
    /// Wakes the health runner after a reconfiguration.
    health_wake: Arc<tokio::sync::Notify>,
    /// The VRRP instances the configuration asks for (the VRRP task runs them).
    vrrp: tokio::sync::watch::Sender<Vec<crate::vrrp::Spec>>,
    /// `static_ipaddress` / `static_routes` / `static_rules`.
    statics: tokio::sync::watch::Sender<rvs_control::routes::Set>,
    /// What the VRRP instances are doing (for metrics).
    vrrp_status: crate::vrrp::Status,
    /// The connection-sync daemons.
    sync: crate::sync::SyncDaemons,
    /// keepalived.conf's `lvs_sync_daemon`, if the file has one.
    sync_wanted: Option<rvs_config::model::LvsSyncDaemon>,
    /// `rvsadm --remove-director` asked rvsd to remove its data plane and
    /// exit: the main loop waits on this.
    remove: Arc<tokio::sync::Notify>,
    /// Where the table goes for the next rvsd ([`crate::table_file`]).
    table_saver: Option<crate::table_file::Saver>,
    /// The controller's generation the saver last saw (`None`: not yet).
    table_saved: Option<u64>,
    /// VIP announcement through a BGP daemon ([`crate::announce`]).
    announce: crate::announce::Announce,
    /// The Kubernetes source's counters (`--kubernetes`).
    kubernetes: Option<Arc<crate::kubernetes::Stats>>,
}

impl Daemon {
    /// A daemon around `ctl`, configured from `source` if any (already loaded).
    pub fn new(ctl: Controller, source: Option<Source>) -> Self {
        Daemon {
            ctl,
            source,
            epoch: StdInstant::now(),
            reloads: 0,
            reload_failures: 0,
            proxy_stats: None,
            xdp_flood: None,
            sock_stats: None,
            loaded: false,
            health: rvs_check::Health::new(crate::random_seed()),
            health_wake: Arc::new(tokio::sync::Notify::new()),
            vrrp: tokio::sync::watch::Sender::new(Vec::new()),
            statics: tokio::sync::watch::Sender::new(rvs_control::routes::Set::default()),
            vrrp_status: crate::vrrp::Status::default(),
            sync: crate::sync::SyncDaemons::default(),
            sync_wanted: None,
            remove: Arc::new(tokio::sync::Notify::new()),
            table_saver: None,
            table_saved: None,
            announce: crate::announce::Announce::new(None, false),
            kubernetes: None,
        }
    }

    /// Announce VIPs by `settings` (`--announce-table`); `drained`: the
    /// drained file said so at start.
    pub fn set_announce(&mut self, settings: crate::announce::Settings, drained: bool) {
        self.announce = crate::announce::Announce::new(Some(settings), drained);
    }

    /// The announcement state.
    pub fn announce(&self) -> &crate::announce::Announce {
        &self.announce
    }

    /// The announcement state, to change.
    pub fn announce_mut(&mut self) -> &mut crate::announce::Announce {
        &mut self.announce
    }

    /// The health checkers.
    pub fn health(&self) -> &rvs_check::Health {
        &self.health
    }

    /// Queue the table for its file if it changed (every tick, and when
    /// rvsd stops; not per request: a restore of N commands would build the
    /// table N times): the controller's generation compared, the table
    /// built only when it moved, written on the saver's thread.
    pub fn save_table(&mut self) {
        let generation = self.ctl.generation();
        if let Some(s) = &mut self.table_saver
            && self.table_saved != Some(generation)
        {
            s.update(self.ctl.table_commands());
            self.table_saved = Some(generation);
        }
    }

    /// rvsd stops: queue the table as it is and stop saving; the writer
    /// thread to join, if there is one.
    pub fn close_table(&mut self) -> Option<std::thread::JoinHandle<()>> {
        self.save_table();
        self.table_saver.take().map(crate::table_file::Saver::close)
    }

    /// Keep the service table in a file from now on (an XDP rvsd without
    /// a configuration file: [`crate::table_file`]).
    pub fn set_table_saver(&mut self, saver: crate::table_file::Saver) {
        self.table_saver = Some(saver);
        self.table_saved = None;
    }

    /// Notified when `rvsadm --remove-director` asks rvsd to remove its
    /// data plane and exit.
    pub fn remove_requested(&self) -> Arc<tokio::sync::Notify> {
        self.remove.clone()
    }

    /// The VRRP instances to run, updated by every accepted (re)load.
    pub fn vrrp_specs(&self) -> tokio::sync::watch::Receiver<Vec<crate::vrrp::Spec>> {
        self.vrrp.subscribe()
    }

    /// The static addresses, routes and rules to keep installed (the
    /// routes task follows it).
    pub fn static_routes(&self) -> tokio::sync::watch::Receiver<rvs_control::routes::Set> {
        self.statics.subscribe()
    }

    /// Where the VRRP task reports its instances' states.
    pub fn vrrp_status(&self) -> crate::vrrp::Status {
        self.vrrp_status.clone()
    }

    /// What the health runner waits on for reconfigurations.
    pub fn health_wake(&self) -> Arc<tokio::sync::Notify> {
        self.health_wake.clone()
    }

    /// The health checkers' state as JSON (`rvsadm -L --checks`,
    /// `/api/v1/checks`).
    pub fn checks(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(self.health.status())
    }

    /// Shutting down: run the `omega` notifiers.
    pub fn shutdown_health(&mut self) {
        let work = self.health.shutdown();
        for line in &work.fifo {
            crate::notify::lvs_event(line);
        }
        for (script, why) in work.scripts {
            rvs_check::runner::run_script(script, why);
        }
    }

    /// The core's notion of now: milliseconds since the daemon started.
    pub fn now(&self) -> Instant {
        Instant::from_millis(u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// The XDP plane's SYN-flood counters, exported as `rvs_xdp_*`.
    pub fn set_xdp_flood(&mut self, stats: Option<std::sync::Arc<rvs_xdp::plane::FloodStats>>) {
        self.xdp_flood = stats;
    }

    /// The sock data plane's counters, for the metrics.
    pub fn set_sock_stats(&mut self, stats: Option<rvs_sock::plane::SockStats>) {
        self.sock_stats = stats;
    }

    /// The Kubernetes source's counters, exported as `rvs_kubernetes_*`.
    pub fn set_kubernetes_stats(&mut self, stats: Arc<crate::kubernetes::Stats>) {
        self.kubernetes = Some(stats);
    }

    /// The proxy data plane's counters, exported as `rvs_proxy_*`.
    pub fn set_proxy_stats(&mut self, stats: Option<std::sync::Arc<rvs_proxy::ProxyStats>>) {
        self.proxy_stats = stats;
    }

    /// The controller, for changes that do not go through commands (the
    /// sync backup's entries).
    pub fn controller_mut(&mut self) -> &mut Controller {
        &mut self.ctl
    }

    /// The connection-sync daemons.
    pub fn sync_daemons(&mut self) -> &mut crate::sync::SyncDaemons {
        &mut self.sync
    }

    /// Whether a just-started backup sync daemon is still gathering its
    /// peers' tables ([`crate::sync::SyncDaemons::warming`]).
    pub fn sync_warming(&self) -> bool {
        self.sync.warming(self.now())
    }

    /// The sync daemons' state for the dashboard ([`crate::sync::SyncDaemons::view`]).
    pub fn sync_view(&self) -> serde_json::Value {
        self.sync.view(self.now())
    }

    /// keepalived.conf's `lvs_sync_daemon`.
    pub fn sync_wanted(&self) -> Option<rvs_config::model::LvsSyncDaemon> {
        self.sync_wanted.clone()
    }

    /// A VRRP instance's state, if it runs.
    pub fn vrrp_state(&self, name: &str) -> Option<rvs_core::vrrp::State> {
        self.vrrp_status.lock().ok()?.get(name).map(|(s, _)| *s)
    }

    /// A configured VRRP instance's VRID.
    pub fn vrrp_vrid(&self, name: &str) -> Option<u8> {
        self.vrrp
            .borrow()
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.vrid)
    }

    /// The running sync daemons as `-L --daemon` lists them.
    pub fn daemon_snaps(&self) -> Vec<rvs_ipvsadm::snapshot::DaemonSnap> {
        self.sync.snaps()
    }

    /// The controller.
    pub fn controller(&self) -> &Controller {
        &self.ctl
    }

    /// Give the data plane its way back to the director
    /// ([`crate::handle`] builds the handle).
    pub fn attach_director(&mut self, handle: rvs_control::dataplane::DirectorHandle) {
        self.ctl.attach_director(handle);
    }

    /// Lend the director and the daemon's clock to `f` (a data plane's
    /// [`rvs_control::dataplane::DirectorHandle`] call).
    pub fn lend_director(&mut self, f: &mut dyn FnMut(&mut rvs_core::ipvs::Ipvs, Instant)) {
        let now = self.now();
        f(self.ctl.ipvs_mut(), now);
    }

    /// The counters other tasks keep, for the metrics.
    pub fn live(&self) -> crate::handle::Live {
        crate::handle::Live {
            proxy: self.proxy_stats.clone(),
            xdp_flood: self.xdp_flood.clone(),
            sock: self.sock_stats.clone(),
            vrrp: self.vrrp_status.clone(),
            kubernetes: self.kubernetes.clone(),
            sync: self.sync.stats(),
        }
    }

    /// Record what an announcer round did.
    pub fn announce_record(
        &mut self,
        routes: Option<std::collections::BTreeSet<std::net::IpAddr>>,
        error: Option<String>,
    ) {
        self.announce.record(routes, error);
    }

    /// Periodic work: expire connections, run the rate estimators, log data
    /// plane errors.
    pub fn tick(&mut self) {
        let now = self.now();
        self.ctl.tick(now);
        for e in self.ctl.take_plane_errors() {
            tracing::warn!("{e}");
        }
        self.save_table();
    }

    /// The configuration source, if rvsd was started with one.
    pub fn source(&self) -> Option<Source> {
        self.source.clone()
    }

    /// Apply a freshly read configuration (read by the asking task,
    /// [`crate::handle::reload`]): only the difference; on error the running state is
    /// untouched.
    pub fn apply_loaded(
        &mut self,
        src: &Source,
        loaded: Result<Loaded, String>,
    ) -> Result<DiffSummary, String> {
        let mut vrrp = None;
        let mut statics = None;
        let mut sync_wanted = None;
        let mut fifos = None;
        let mut mailer = None;
        let result = loaded.and_then(|mut loaded| {
            vrrp = Some(std::mem::take(&mut loaded.vrrp));
            fifos = Some(std::mem::take(&mut loaded.fifos));
            mailer = Some(loaded.mailer.take());
            statics = Some(std::mem::take(&mut loaded.statics));
            sync_wanted = Some(loaded.sync.take());
            for w in &loaded.warnings {
                tracing::warn!("{w}");
            }
            // The health state goes over the new table (a server that is
            // down stays out); it is kept only if the table is accepted.
            let mut health = self.health.clone();
            health.reconfigure(
                std::time::Instant::now(),
                loaded.health.take().unwrap_or_default(),
            );
            health.overlay(&mut loaded.defs);
            let summary = self
                .ctl
                .submit(
                    Owner::File,
                    Change::Replace {
                        services: std::mem::take(&mut loaded.defs),
                        partial: false,
                    },
                )
                .map_err(|e| src.service_error(&e))?
                .summary;
            self.health = health;
            self.health_wake.notify_one();
            self.announce.wake().notify_one();
            if let Some((tcp, tcpfin, udp)) = loaded.timeouts {
                self.ctl.set_timeouts(tcp, tcpfin, udp);
            }
            Ok(summary)
        });
        // The FIFOs first, so the instances' first lines find them.
        if let (Ok(_), Some(f)) = (&result, fifos) {
            crate::notify::configure(&f);
        }
        if let (Ok(_), Some(m)) = (&result, mailer) {
            crate::smtp::configure(m);
        }
        if let (Ok(_), Some(v)) = (&result, vrrp) {
            self.vrrp.send_replace(v);
        }
        if let (Ok(_), Some(s)) = (&result, statics) {
            self.statics.send_replace(s);
        }
        if let (Ok(_), Some(w)) = (&result, sync_wanted) {
            self.sync_wanted = w;
        }
        // The first successful application is the initial load, not a reload.
        match (&result, self.loaded) {
            (Ok(s), true) => {
                self.reloads += 1;
                tracing::info!(source = %src.path().display(), "reloaded: {s}");
            }
            (Ok(_), false) => self.loaded = true,
            (Err(e), true) => {
                self.reload_failures += 1;
                tracing::error!("reload rejected, running state unchanged: {e}");
            }
            // At start-up the caller reports the error and exits.
            (Err(_), false) => {}
        }
        result
    }

    /// Answer one control request. Reloads, sync daemons and handovers come
    /// through [`crate::handle::answer`], which does their slow parts first.
    pub fn handle(&mut self, req: Request) -> Response {
        match req {
            Request::Ping => Response::Ok,
            Request::State { conns } => Response::State(view::state(self, conns)),
            Request::Checks => match self.checks() {
                Ok(v) => Response::State(v),
                Err(e) => Response::Error {
                    message: format!("health state: {e}"),
                    index: None,
                    ctl: None,
                },
            },
            Request::RemoveDirector => {
                tracing::info!("removal of the director requested");
                self.remove.notify_one();
                Response::Ok
            }
            Request::Drain { grace_ms } => {
                let grace = std::time::Duration::from_millis(grace_ms);
                match self.announce.drain(StdInstant::now(), grace) {
                    Ok(()) => Response::Ok,
                    Err(message) => Response::Error {
                        message,
                        index: None,
                        ctl: None,
                    },
                }
            }
            Request::Undrain => match self.announce.undrain() {
                Ok(()) => Response::Ok,
                Err(message) => Response::Error {
                    message,
                    index: None,
                    ctl: None,
                },
            },
            Request::Announce => {
                let now = StdInstant::now();
                self.announce.drain_state(now);
                Response::State(self.announce.view())
            }
            Request::Reload
            | Request::StartDaemon(_)
            | Request::StopDaemon { .. }
            | Request::HandOver
            | Request::Retire => Response::Error {
                message: "this request must go through handle::answer".into(),
                index: None,
                ctl: None,
            },
            Request::ExecEach { commands } => Response::Each(
                commands
                    .into_iter()
                    .map(|c| {
                        self.handle(Request::Exec {
                            commands: vec![c],
                            atomic: false,
                        })
                    })
                    .collect(),
            ),
            Request::Exec { commands, atomic } => {
                match self.submit(Owner::Rvsadm, Change::Commands { commands, atomic }) {
                    Ok(_) => {
                        tracing::debug!("applied");
                        Response::Ok
                    }
                    Err(e) => Response::Error {
                        message: e.error.to_string(),
                        index: Some(e.index),
                        ctl: Some(e.error),
                    },
                }
            }
        }
    }

    /// Apply a change of desired state from `owner` through the control
    /// plane's one entry point ([`Controller::submit`]); what the data plane
    /// reports is logged. The table file follows at the next tick.
    pub fn submit(
        &mut self,
        owner: Owner,
        change: Change,
    ) -> Result<rvs_control::owner::Submitted, rvs_control::state::ExecError> {
        let r = self.ctl.submit(owner, change);
        if r.is_ok() {
            self.announce.wake().notify_one();
        }
        for e in self.ctl.take_plane_errors() {
            tracing::warn!("{e}");
        }
        r
    }

    /// The metric families this daemon renders itself (the counters other
    /// tasks keep are read at scrape time: [`crate::handle::Live`]).
    pub fn families(&self) -> crate::handle::Families {
        crate::handle::Families {
            director: crate::metrics::director(self.ctl.ipvs(), self.reloads, self.reload_failures),
            planes_skipped: crate::metrics::planes_skipped(&self.ctl.plane_services_skipped()),
            health: crate::metrics::health(&self.health),
            announce: crate::metrics::announce(&self.announce),
            sync: crate::metrics::sync_running(&self.sync.running_at(self.now())),
        }
    }
}

impl rvs_check::runner::Host for Daemon {
    fn health(&mut self) -> Option<&mut rvs_check::Health> {
        Some(&mut self.health)
    }

    fn notify_fifo(&mut self, line: &str) {
        crate::notify::lvs_event(line);
    }

    fn smtp_alert(&mut self, subject: &str, body: &str) {
        crate::smtp::checker_alert(subject, body);
    }

    fn apply_health(
        &mut self,
        key: rvs_core::model::ServiceKey,
        dests: Vec<rvs_core::model::DestConfig>,
    ) {
        let Some(cmds) = rvs_check::runner::commands_for(self.ctl.ipvs(), key, dests) else {
            return;
        };
        if cmds.is_empty() {
            return;
        }
        // A single change applies directly (the core's operations are all
        // or nothing); several (a sorry-server swap) are tried on a scratch
        // copy first. Either way a failure changes nothing.
        let change = Change::Commands {
            commands: cmds,
            atomic: false,
        };
        if let Err(e) = self.submit(Owner::File, change) {
            tracing::error!(target: "rvs::check", "applying a health change: {}", e.error);
        }
    }
}
