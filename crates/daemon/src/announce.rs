//! VIP announcement through a BGP daemon (`--announce-table N`).
//!
//! rvsd never speaks BGP. It keeps one host route per announced VIP (`/32`,
//! `/128`, type `blackhole`, protocol [`PROTO`] — `rvs` in rt_protos) in
//! kernel routing table N of its own; the BGP daemon (BIRD's `protocol
//! kernel { kernel table N; learn; }`, FRR's `ip import-table N`) exports
//! those routes to the routers. A blackhole route in a table no rule
//! consults has no forwarding effect.
//!
//! Which VIPs are wanted is [`rvs_control::announce::Announcer`]'s
//! decision (sans-IO, time an argument) over the service table, the health checkers' quorum and the drain state; the
//! decision is made under the daemon's lock (plain data, no I/O), the
//! netlink work by [`run`] on the runtime with the lock released, once a
//! second and at once after a change ([`Announce::wake`]). A failure is
//! logged with what was tried and retried on the next round.
//!
//! A restart is not a drain: the routes stay in the table when rvsd stops
//! or dies, and a starting rvsd keeps the ones it finds for its VIPs until
//! the health checkers' first verdict. `rvsadm --drain` withdraws every VIP
//! and keeps forwarding (`draining` for the grace, then `drained`); the
//! drained state is kept in `<state-dir>/<instance>.drained` so it survives
//! a restart, until `rvsadm --undrain`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rvs_control::announce::{self, Announcer, Quorum, ServiceInput, VipState};

use crate::daemon::Daemon;
use crate::handle::{DaemonHandle, Msg};

/// The route protocol number of rvs's announce routes (`rvs` in
/// `/etc/iproute2/rt_protos.d/rvs.conf`; unused by the kernel and by the
/// routing daemons, whose numbers are 2-99 and 186-192).
pub const PROTO: u8 = 250;

/// How often the table is reconciled when nothing wakes the announcer.
const ROUND: Duration = Duration::from_secs(1);

/// What `--announce-table` set up.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The routing table.
    pub table: u32,
    /// The routes' protocol number.
    pub proto: u8,
    /// `<state-dir>/<instance>.drained`.
    pub drained_file: PathBuf,
}

/// The director's drain state (rvs-control's).
pub use rvs_control::announce::Drain;

/// The announcement state, inside the daemon: the decisions are
/// [`Announcer`]'s (rvs-control, sans-IO); this adds the settings, what
/// the last round found in the table, its error and the wake-up (the
/// netlink work is [`run`]'s).
#[derive(Debug)]
pub struct Announce {
    settings: Option<Settings>,
    core: Announcer,
    /// The epoch of the instants [`Announcer`] is given.
    epoch: Instant,
    routes: BTreeSet<IpAddr>,
    error: Option<String>,
    bgp: Option<serde_json::Value>,
    wake: Arc<tokio::sync::Notify>,
}

impl Announce {
    /// Off (`settings` None) or on; `drained` is what the drained file
    /// said at start.
    pub fn new(settings: Option<Settings>, drained: bool) -> Self {
        Announce {
            settings,
            core: Announcer::new(drained),
            epoch: Instant::now(),
            routes: BTreeSet::new(),
            error: None,
            bgp: None,
            wake: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// `now` as the decisions count time (milliseconds since `epoch`).
    fn at(&self, now: Instant) -> rvs_core::time::Instant {
        let ms = now.saturating_duration_since(self.epoch).as_millis();
        rvs_core::time::Instant::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// The settings, when announcing is on.
    pub fn settings(&self) -> Option<&Settings> {
        self.settings.as_ref()
    }

    /// Wakes the announcer (a change to the table or the drain state).
    pub fn wake(&self) -> Arc<tokio::sync::Notify> {
        self.wake.clone()
    }

    /// `rvsadm --drain`: withdraw everything now, `drained` after `grace`.
    pub fn drain(&mut self, now: Instant, grace: Duration) -> Result<(), String> {
        self.require()?;
        let at = self.at(now);
        self.core.drain(at, grace);
        tracing::info!(?grace, "drain requested: withdrawing every VIP");
        self.wake.notify_one();
        Ok(())
    }

    /// `rvsadm --undrain`: announce again.
    pub fn undrain(&mut self) -> Result<(), String> {
        self.require()?;
        self.core.undrain();
        tracing::info!("undrain requested: announcing the VIPs again");
        self.wake.notify_one();
        Ok(())
    }

    fn require(&self) -> Result<(), String> {
        match self.settings {
            Some(_) => Ok(()),
            None => Err("rvsd announces nothing (started without --announce-table)".into()),
        }
    }

    /// The drain state at `now` (draining turns drained when its grace is
    /// over).
    pub fn drain_state(&mut self, now: Instant) -> Drain {
        let before = self.core.drain_now();
        let at = self.at(now);
        let after = self.core.drain_state(at);
        if before != after {
            tracing::info!("drained");
        }
        after
    }

    /// One round's decision: the state of every VIP given the services
    /// and the routes read from the table (`None`: the read failed).
    fn decide(
        &mut self,
        now: Instant,
        services: &[ServiceInput],
        current: Option<&BTreeSet<IpAddr>>,
    ) -> BTreeMap<IpAddr, VipState> {
        let before = self.core.drain_now();
        let at = self.at(now);
        let (states, changed) = self.core.decide(at, services, current);
        if before == Drain::Draining && self.core.drain_now() == Drain::Drained {
            tracing::info!("drained");
        }
        for (vip, st) in changed {
            match st {
                VipState::Announced => tracing::info!(%vip, "VIP announced"),
                VipState::Withdrawn(r) => {
                    tracing::info!(%vip, reason = r.as_str(), "VIP withdrawn")
                }
            }
        }
        states
    }

    /// Record what a round did.
    pub(crate) fn record(&mut self, routes: Option<BTreeSet<IpAddr>>, error: Option<String>) {
        if let Some(r) = routes {
            self.routes = r;
        }
        if error != self.error {
            match &error {
                Some(e) => tracing::warn!("announce: {e}; retrying every {ROUND:?}"),
                None if self.error.is_some() => {
                    tracing::info!("announce: the routing table is in step again")
                }
                None => {}
            }
        }
        self.error = error;
    }

    /// What the BGP daemon watch last saw (`--bgp-daemon`).
    pub fn set_bgp(&mut self, bgp: serde_json::Value) {
        self.bgp = Some(bgp);
    }

    /// The VIPs and whether each is announced (for metrics).
    pub fn vips(&self) -> impl Iterator<Item = (IpAddr, bool)> + '_ {
        self.core.states().iter().map(|(v, s)| (*v, s.announced()))
    }

    /// Whether the director is draining or drained.
    pub fn drained(&self) -> bool {
        self.core.drain_now() != Drain::Serving
    }

    /// The `announce` object of `/api/v1/state` and `rvsadm -L
    /// --announce`.
    pub fn view(&self) -> serde_json::Value {
        let Some(s) = &self.settings else {
            return serde_json::json!({ "enabled": false });
        };
        let vips: Vec<serde_json::Value> = self
            .core
            .states()
            .iter()
            .map(|(vip, st)| {
                let (state, reason) = match st {
                    VipState::Announced => ("announced", None),
                    VipState::Withdrawn(r) => ("withdrawn", Some(r.as_str())),
                };
                serde_json::json!({
                    "vip": vip.to_string(),
                    "state": state,
                    "reason": reason,
                    "route": self.routes.contains(vip),
                })
            })
            .collect();
        serde_json::json!({
            "enabled": true,
            "table": s.table,
            "proto": s.proto,
            "director": self.core.drain_now().as_str(),
            "vips": vips,
            "error": self.error,
            "bgp_daemon": self.bgp,
        })
    }
}

/// The services of the table as the decision sees them: per service with
/// an address, its quorum from the health checkers where a virtual server
/// of the configuration covers it (`Pending` until all its checkers ran),
/// else from the table (at least one real server with weight above 0);
/// `Pending` too while a just-started backup sync daemon gathers its peers'
/// tables ([`Daemon::sync_warming`]).
pub fn inputs(d: &Daemon) -> Vec<ServiceInput> {
    use rvs_core::model::ServiceKey;
    let health = d.health();
    let policy = health.policy();
    let status = health.status();
    let warming = d.sync_warming();
    let mut checked: std::collections::HashMap<&ServiceKey, Quorum> =
        std::collections::HashMap::new();
    for (vs, spec) in policy.config().virtual_servers.iter().enumerate() {
        let ran = status.get(vs).is_none_or(|st| {
            st.reals
                .iter()
                .all(|r| r.checkers.iter().all(|c| c.has_run))
        });
        let q = match (ran, policy.quorum_up(vs)) {
            (false, _) => Quorum::Pending,
            (true, Some(true)) => Quorum::Up,
            (true, _) => Quorum::Down,
        };
        for slot in &spec.services {
            checked.insert(&slot.key, q);
        }
    }
    d.controller()
        .ipvs()
        .services()
        .filter_map(|s| {
            let ServiceKey::Addr { addr, .. } = s.key() else {
                return None;
            };
            let quorum = checked.get(s.key()).copied().unwrap_or_else(|| {
                if s.dests().iter().any(|x| x.config.weight > 0) {
                    Quorum::Up
                } else {
                    Quorum::Down
                }
            });
            // A joining director of a fleet waits for its peers' tables
            // (sync bulk resync) before it takes traffic.
            let quorum = if warming && quorum == Quorum::Up {
                Quorum::Pending
            } else {
                quorum
            };
            Some(ServiceInput { vip: *addr, quorum })
        })
        .collect()
}

fn describe(s: &Settings, vip: IpAddr) -> String {
    let len = if vip.is_ipv4() { 32 } else { 128 };
    format!("blackhole {vip}/{len} table {} proto {}", s.table, s.proto)
}

/// One round's decision on the daemon (served by its owner): each VIP's
/// state given the routes read, and whether the director is drained.
pub fn round(
    d: &mut Daemon,
    current: Option<&BTreeSet<IpAddr>>,
) -> (BTreeMap<IpAddr, VipState>, bool) {
    let services = inputs(d);
    let states = d.announce_mut().decide(Instant::now(), &services, current);
    (states, d.announce().drained())
}

/// The announcer: reconcile the table with the decision every [`ROUND`]
/// and when woken; the netlink work is this task's, the decision the
/// daemon's owner's. `settings` and `wake`: the daemon's
/// ([`Announce::settings`], [`Announce::wake`]).
pub async fn run(daemon: DaemonHandle, settings: Settings, wake: Arc<tokio::sync::Notify>) {
    let mut nl: Option<rvs_sys::netlink::AsyncNetlink> = None;
    let mut persisted: Option<bool> = None;
    loop {
        let mut errors: Vec<String> = Vec::new();
        if nl.is_none() {
            match rvs_sys::netlink::AsyncNetlink::open() {
                Ok(n) => nl = Some(n),
                Err(e) => errors.push(format!("opening a netlink socket: {e}")),
            }
        }
        let mut current = None;
        if let Some(n) = nl.as_mut() {
            match n.host_routes(settings.table, settings.proto).await {
                Ok(r) => current = Some(r.into_iter().collect::<BTreeSet<_>>()),
                Err(e) => {
                    errors.push(format!(
                        "reading the routes of table {} proto {}: {e}",
                        settings.table, settings.proto
                    ));
                    nl = None;
                }
            }
        }
        let c = current.clone();
        let decided = daemon
            .ask(|reply| Msg::AnnounceDecide { current: c, reply })
            .await;
        let Some((states, drained)) = decided else {
            return;
        };
        let mut routes = current.clone();
        if let (Some(n), Some(cur)) = (nl.as_mut(), current.as_ref()) {
            let (add, del) = announce::reconcile(&states, cur);
            let mut now_routes = cur.clone();
            for vip in add {
                match n.add_host_route(settings.table, settings.proto, vip).await {
                    Ok(_) => {
                        now_routes.insert(vip);
                    }
                    Err(e) => errors.push(format!(
                        "announcing {vip} (adding the route {}): {e}",
                        describe(&settings, vip)
                    )),
                }
            }
            for vip in del {
                match n.del_host_route(settings.table, settings.proto, vip).await {
                    Ok(_) => {
                        now_routes.remove(&vip);
                    }
                    Err(e) => errors.push(format!(
                        "withdrawing {vip} (deleting the route {}): {e}",
                        describe(&settings, vip)
                    )),
                }
            }
            routes = Some(now_routes);
        }
        if persisted != Some(drained) {
            match persist(&settings.drained_file, drained).await {
                Ok(()) => persisted = Some(drained),
                Err(e) => errors.push(format!(
                    "keeping the drain state in {}: {e}",
                    settings.drained_file.display()
                )),
            }
        }
        let error = (!errors.is_empty()).then(|| errors.join("; "));
        if !daemon.send(Msg::AnnounceRecord { routes, error }).await {
            return;
        }
        let _ = tokio::time::timeout(ROUND, wake.notified()).await;
    }
}

/// Write (drained) or delete the drained file.
async fn persist(path: &std::path::Path, drained: bool) -> std::io::Result<()> {
    if drained {
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        tokio::fs::write(path, "drained\n").await
    } else {
        match tokio::fs::remove_file(path).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Whether the drained file says drained (read once at start).
pub fn drained_at_start(path: &std::path::Path) -> bool {
    path.exists()
}

/// The drained file of `instance` in `dir`.
pub fn drained_path(dir: &std::path::Path, instance: &str) -> PathBuf {
    dir.join(format!("{instance}.drained"))
}

/// Withdraw every route of ours from the table (the stop-and-remove's
/// first step): how many were deleted.
pub async fn withdraw_all(s: &Settings) -> Result<usize, String> {
    let mut nl = rvs_sys::netlink::AsyncNetlink::open().map_err(|e| e.to_string())?;
    let routes = nl.host_routes(s.table, s.proto).await.map_err(|e| {
        format!(
            "reading the routes of table {} proto {}: {e}",
            s.table, s.proto
        )
    })?;
    let mut n = 0;
    for vip in routes {
        nl.del_host_route(s.table, s.proto, vip)
            .await
            .map_err(|e| format!("deleting the route {}: {e}", describe(s, vip)))?;
        n += 1;
    }
    Ok(n)
}

/// [`withdraw_all`] outside any runtime (`rvsd --remove`): the same
/// netlink work on a one-shot current-thread runtime.
pub fn withdraw_all_blocking(s: &Settings) -> Result<usize, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| format!("starting a runtime to withdraw the routes: {e}"))?
        .block_on(withdraw_all(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            table: 100,
            proto: PROTO,
            drained_file: PathBuf::from("/nonexistent/x.drained"),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn drained_at_start_stays_drained_and_off_refuses_drain() {
        let mut a = Announce::new(Some(settings()), true);
        assert_eq!(a.drain_state(Instant::now()), Drain::Drained);
        assert_eq!(a.view()["director"], "drained");
        a.undrain().unwrap();
        let t0 = Instant::now();
        let s = [ServiceInput {
            vip: ip("10.0.0.1"),
            quorum: Quorum::Up,
        }];
        assert!(a.decide(t0, &s, Some(&BTreeSet::new()))[&ip("10.0.0.1")].announced());
        a.drain(t0, Duration::from_secs(5)).unwrap();
        assert_eq!(a.drain_state(t0 + Duration::from_secs(5)), Drain::Drained);
        assert_eq!(a.vips().collect::<Vec<_>>(), [(ip("10.0.0.1"), true)]);
        let mut off = Announce::new(None, false);
        assert!(off.drain(Instant::now(), Duration::ZERO).is_err());
        assert!(off.undrain().is_err());
        assert_eq!(off.view()["enabled"], false);
    }
}
