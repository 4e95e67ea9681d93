//! The daemon as a task of its own: one owner task holds the [`Daemon`]
//! and serves typed requests ([`Msg`]) that the other tasks send through a
//! cloneable [`DaemonHandle`]; what the read-mostly tasks look at (the
//! HTTP endpoint, the BGP-daemon watch) the owner renders as a
//! [`Snapshot`] when a reader asks for it and something changed since the
//! last one ([`DaemonHandle::fresh`]): never per change (a script of N
//! `rvsadm` commands would render the whole table N times), and a reader
//! never waits long behind a reload (it takes the last snapshot then). Nothing slow runs in the owner: files are read
//! and sockets opened by the tasks that ask, netlink calls stay in their
//! tasks, the table file is written by its own thread.
//!
//! The one other user of the daemon is the data plane, which borrows the
//! director synchronously per connection (the proxy schedules at accept):
//! [`DirectorHandle`] locks the owner's cell for the length of one call,
//! as the owner does for one burst of requests.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_control::dataplane::{Applied, DirectorHandle};
use rvs_control::owner::{Change, Owner, Submitted};
use rvs_control::protocol::{Command, Request, Response};
use rvs_control::state::{DiffSummary, ExecError};
use rvs_control::sync::Endpoint;
use rvs_core::model::ServiceKey;
use rvs_core::time::Instant;
use tokio::sync::{mpsc, oneshot, watch};

use crate::announce::Settings;
use crate::daemon::Daemon;
use crate::metrics::Family;
use crate::source::{Loaded, Source};
use rvs_control::announce::VipState;

/// How long a reader waits for a fresh snapshot before it takes the last
/// one (the owner is busy, say with a large reload).
pub(crate) const FRESH_WAIT: Duration = Duration::from_millis(500);

/// How many requests may wait for the owner; senders wait beyond it.
const QUEUE: usize = 256;

/// At most this many requests are served per burst before the owner
/// publishes and answers them (so a flood of requests cannot delay every
/// answer).
const BURST: usize = 64;

/// One thing a task asks of the daemon. Each variant is one thing a task
/// does; a reply goes back on its `oneshot` when the asker needs one.
pub enum Msg {
    /// Start-up is done (the configuration or the saved table applied):
    /// the owner starts its one-second tick (expiry, rate estimators, the
    /// data plane's reports, the table file), which must not run over the
    /// empty table of a daemon still starting.
    StartTicking,
    /// A control-socket request ([`Daemon::handle`]); the answer and the
    /// data plane's ticket for the change, if it carries changes out later.
    Control {
        /// The request.
        req: Request,
        /// The answer.
        reply: oneshot::Sender<(Response, Option<Applied>)>,
    },
    /// Apply a configuration read outside ([`Daemon::apply_loaded`]).
    Load {
        /// The file it came from.
        src: Source,
        /// The file as read and parsed.
        loaded: Box<Result<Loaded, String>>,
        /// The difference applied, or why nothing was.
        reply: oneshot::Sender<Result<DiffSummary, String>>,
    },
    /// A change of desired state from a source ([`Daemon::submit`]).
    Submit {
        /// The source.
        owner: Owner,
        /// The change.
        change: Change,
        /// The outcome.
        reply: oneshot::Sender<Result<Submitted, ExecError>>,
    },
    /// A write of the HTTP API ([`crate::api::write`]): its plan checks
    /// the request against the table as it is and states the change,
    /// submitted as the API's in the same turn.
    ApiWrite {
        /// The plan.
        plan: crate::api::Plan,
        /// The outcome, and the data plane's ticket for the change.
        reply: oneshot::Sender<(Result<Submitted, crate::api::ApiError>, Option<Applied>)>,
    },
    /// One service as `/api/v1/state` shows it ([`crate::view::api_service`]):
    /// the REST API's read of one service or real server, rendered alone.
    ApiService {
        /// The service.
        key: ServiceKey,
        /// It, or `None` if there is no such service.
        reply: oneshot::Sender<Option<rvs_ipvsadm::snapshot::ServiceSnap>>,
    },
    /// Render and publish the snapshot if it is behind (a reader wants
    /// it fresh).
    Refresh {
        /// Done.
        reply: oneshot::Sender<()>,
    },
    /// `--takeover`: close the handed sockets no service claims.
    ReleaseHanded {
        /// The services whose sockets were not claimed.
        reply: oneshot::Sender<Vec<ServiceKey>>,
    },
    /// One step of the health checker ([`rvs_check::runner::step`]).
    Health {
        /// Probe results since the last step.
        results: Vec<(rvs_check::policy::CheckerId, rvs_check::policy::Outcome)>,
        /// What to start outside.
        reply: oneshot::Sender<Option<rvs_check::runner::Stepped>>,
    },
    /// One round of the announcer: its decision given the routes read.
    AnnounceDecide {
        /// The routes of the announcement table (`None`: not read).
        current: Option<BTreeSet<IpAddr>>,
        /// Each VIP's state, and whether the director is drained.
        reply: oneshot::Sender<(BTreeMap<IpAddr, VipState>, bool)>,
    },
    /// What an announcer round did.
    AnnounceRecord {
        /// The routes now in the table, when known.
        routes: Option<BTreeSet<IpAddr>>,
        /// What failed, if anything.
        error: Option<String>,
    },
    /// What the BGP-daemon watch saw.
    SetBgp(serde_json::Value),
    /// Removing the director: drain at once; the announcement settings.
    DrainForRemoval {
        /// The settings, when VIPs are announced.
        reply: oneshot::Sender<Option<Settings>>,
    },
    /// A sync daemon's sockets are open: record it unless one runs.
    SyncStarted {
        /// Its configuration.
        cfg: rvs_ipvsadm::DaemonConfig,
        /// Its message size.
        maxlen: u16,
        /// Started for `lvs_sync_daemon`.
        managed: bool,
        /// Turns true to stop its task.
        stop: watch::Sender<bool>,
        /// Its start in the daemon's time, or why it may not run.
        reply: oneshot::Sender<Result<Instant, String>>,
    },
    /// `ipvsadm --stop-daemon`.
    SyncStop {
        /// The master's (else the backup's).
        master: bool,
        /// Done, or why not.
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// A sync task's endpoint needs the director: a datagram to handle
    /// and the endpoint's work on the table; the endpoint comes back.
    SyncStep {
        /// The endpoint, lent for the step.
        ep: Box<Endpoint>,
        /// Whether it is the master's.
        master: bool,
        /// A datagram and its sender.
        input: Option<(Vec<u8>, SocketAddr)>,
        /// The task's time.
        now: Instant,
        /// The endpoint back.
        reply: oneshot::Sender<Box<Endpoint>>,
    },
    /// The backup heard its peers at this time.
    SyncHeard(Instant),
    /// What `lvs_sync_daemon` asks and what runs ([`crate::sync::follow_config`]).
    SyncWanted {
        /// The answer.
        reply: oneshot::Sender<crate::sync::Wanted>,
    },
    /// Taken over: stop accepting.
    RetirePlane,
    /// Taken over, past the bound: end what is left.
    AbortPlane,
    /// `/api/v1/state?conns=1`: the view with the connection table.
    ApiState {
        /// The view.
        reply: oneshot::Sender<serde_json::Value>,
    },
    /// A page of the connection table (`GET /api/v1/connections`):
    /// [`crate::view::conn_page`].
    ApiConns {
        /// The slab position to start at (the previous page's cursor).
        from: usize,
        /// Most entries.
        limit: usize,
        /// Which entries to list.
        keep: Box<dyn Fn(&rvs_ipvsadm::snapshot::ConnSnap) -> bool + Send>,
        /// The page.
        reply: oneshot::Sender<crate::view::ConnPage>,
    },
    /// Connections the data plane still carries.
    PlaneLive {
        /// How many.
        reply: oneshot::Sender<u64>,
    },
    /// `HandOver`: duplicates of the data plane's sockets and the table.
    HandOver {
        /// The sockets and the table, or why not.
        reply: oneshot::Sender<Result<HandedOver, String>>,
    },
    /// The Kubernetes source's counters, for the metrics.
    KubernetesStats(Arc<crate::kubernetes::Stats>),
    /// rvsd stops: the `omega` notifiers run and the table file is saved.
    Shutdown {
        /// The table file's writer, to join.
        reply: oneshot::Sender<Option<std::thread::JoinHandle<()>>>,
    },
}

/// The data plane's sockets and the table, for the daemon taking over.
pub type HandedOver = (Vec<(ServiceKey, std::os::fd::OwnedFd)>, Vec<Command>);

/// What the owner publishes for the read-mostly tasks.
#[derive(Clone)]
pub struct Snapshot {
    /// The director's, health checkers' and announcement's metric
    /// families (the counters the data planes keep themselves are read at
    /// scrape time, from [`Snapshot::live`]).
    pub families: Arc<Families>,
    /// The VIP announcement's view (`/api/v1/announce`), which
    /// `/api/v1/state` carries beside the table.
    pub announce: Arc<serde_json::Value>,
    /// The table, typed: the REST API's reads and write answers take
    /// their service or real server from it (parsing the state's JSON
    /// text per request was the largest single cost of an API request).
    pub table: Arc<rvs_ipvsadm::snapshot::Snapshot>,
    /// `/api/v1/checks`, as JSON text.
    pub checks: Arc<str>,
    /// VIPs announced now.
    pub announced: usize,
    /// Counters other tasks keep (atomics), read at scrape time.
    pub live: Live,
    /// The sync daemons' state beyond `-L --daemon` (how long ago the
    /// backup last entered its peers' entries, whether it still gathers
    /// their tables), as JSON text ([`crate::sync::SyncDaemons::view`]).
    pub sync: Arc<str>,
    /// The owner's change count it was rendered at.
    pub generation: u64,
}

impl Snapshot {
    /// `/api/v1/state` without the connections, as JSON text: rendered
    /// from [`Snapshot::table`] when asked (kept once, typed, rather than
    /// also as text).
    pub fn api_state(&self) -> String {
        crate::view::with_announce(&self.table, &self.announce).to_string()
    }
}

/// The metric families the owner renders, in exposition order around the
/// live ones ([`crate::metrics::families`]).
#[derive(Default)]
pub struct Families {
    /// The director's and the control plane's.
    pub director: Vec<Family>,
    /// Each data plane's skipped services.
    pub planes_skipped: Vec<Family>,
    /// The health checkers'.
    pub health: Vec<Family>,
    /// The announcement's.
    pub announce: Vec<Family>,
    /// The running connection-sync daemons'.
    pub sync: Vec<Family>,
}

/// Counters kept by other tasks, shared with the daemon at start.
#[derive(Clone, Default)]
pub struct Live {
    /// The proxy data plane's.
    pub proxy: Option<Arc<rvs_proxy::ProxyStats>>,
    /// The XDP data plane's SYN-flood counters.
    pub xdp_flood: Option<Arc<rvs_xdp::plane::FloodStats>>,
    /// The sock data plane's.
    pub sock: Option<rvs_sock::plane::SockStats>,
    /// VRRP instances' states.
    pub vrrp: crate::vrrp::Status,
    /// The Kubernetes source's.
    pub kubernetes: Option<Arc<crate::kubernetes::Stats>>,
    /// The connection-sync daemons' traffic.
    pub sync: Arc<crate::sync::SyncStats>,
}

/// A task's way to the daemon: requests over a bounded channel, the
/// snapshot through a watch. Cheap to clone.
#[derive(Clone)]
pub struct DaemonHandle {
    tx: mpsc::Sender<Msg>,
    snapshot: watch::Receiver<Snapshot>,
    /// The owner's changes, so a reader can wait for the next one
    /// ([`Self::changes`]).
    changes: watch::Receiver<Changes>,
    source: Option<Source>,
}

impl DaemonHandle {
    /// Send `msg`; false when the owner is gone.
    pub async fn send(&self, msg: Msg) -> bool {
        self.tx.send(msg).await.is_ok()
    }

    /// Ask: `make` builds the request around the reply's sender; `None`
    /// when the owner is gone.
    pub async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Msg) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        if !self.send(make(tx)).await {
            return None;
        }
        rx.await.ok()
    }

    /// The latest snapshot, as rendered (it may be behind the owner's
    /// last changes: [`Self::fresh`] for one that is not).
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot.borrow().clone()
    }

    /// A snapshot that shows every change the owner made before the call:
    /// the owner renders it if the last one is behind; the last one when
    /// the owner does not answer within [`FRESH_WAIT`] (busy) or is gone.
    pub async fn fresh(&self) -> Snapshot {
        let wanted = self.changes.borrow().generation;
        if self.snapshot.borrow().generation < wanted {
            let _ =
                tokio::time::timeout(FRESH_WAIT, self.ask(|reply| Msg::Refresh { reply })).await;
        }
        self.snapshot()
    }

    /// The owner's changes, to wait for the next one (the dashboard's
    /// event stream: an event per change, not a poll), and which of them
    /// should reach the operator at once ([`Changes::urgent`]).
    pub fn changes(&self) -> watch::Receiver<Changes> {
        self.changes.clone()
    }

    /// The configuration source, if rvsd was started with one (fixed for
    /// the daemon's life).
    pub fn source(&self) -> Option<&Source> {
        self.source.as_ref()
    }

    /// A change of desired state from `owner`; an error when the owner
    /// task is gone is reported as the change's.
    pub async fn submit(
        &self,
        owner: Owner,
        change: Change,
    ) -> Option<Result<Submitted, ExecError>> {
        self.ask(|reply| Msg::Submit {
            owner,
            change,
            reply,
        })
        .await
    }
}

/// What the owner counts for its readers, in one watch: its changes, and
/// the last of them an operator must see at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// The owner's change count (a snapshot of a lower one is behind).
    pub generation: u64,
    /// The `generation` of the last urgent change (0: none yet): a health
    /// check that turned a checker, real server or quorum up or down. The
    /// dashboard pushes these without waiting out its minimum gap; a
    /// generation rather than a flag, so that an ordinary change after an
    /// urgent one does not hide it.
    pub urgent: u64,
}

/// Start the owner task for `daemon` on the current runtime: the data
/// plane gets its way back to the director first. The task ends when
/// every handle is dropped.
pub fn spawn(daemon: Daemon) -> DaemonHandle {
    let source = daemon.source();
    let (tx, rx) = mpsc::channel(QUEUE);
    let (publish, snapshot) = watch::channel(snapshot(&daemon, 0));
    let (counts, changes) = watch::channel(Changes::default());
    // The cell first: a data plane may borrow the director as soon as it
    // is attached (the XDP plane adopting a pinned flow table does).
    let cell = Arc::new(Mutex::new(daemon));
    if let Ok(mut d) = cell.lock() {
        d.attach_director(director(Arc::downgrade(&cell)));
    }
    tokio::spawn(run(cell, rx, publish, counts));
    DaemonHandle {
        tx,
        snapshot,
        changes,
        source,
    }
}

/// The data plane's way back to the director: a handle that locks the
/// owner's cell for one call (through a weak reference, so the data plane
/// does not keep the daemon alive) and lends the director with the
/// daemon's clock.
fn director(weak: std::sync::Weak<Mutex<Daemon>>) -> DirectorHandle {
    DirectorHandle::new(move |f| {
        if let Some(d) = weak.upgrade()
            && let Ok(mut d) = d.lock()
        {
            d.lend_director(f);
        }
    })
}

/// What one served request did to what the snapshot shows.
#[derive(Clone, Copy, Default)]
struct Touched {
    /// It may have changed what the snapshot shows.
    changed: bool,
    /// A change the operator should see at once ([`Changes::urgent`]).
    urgent: bool,
}

impl From<bool> for Touched {
    fn from(changed: bool) -> Touched {
        Touched {
            changed,
            urgent: false,
        }
    }
}

/// The owner: serve requests in bursts, tick every second, count the
/// changes, render the snapshot when a reader asks and it is behind.
async fn run(
    cell: Arc<Mutex<Daemon>>,
    mut rx: mpsc::Receiver<Msg>,
    publish: watch::Sender<Snapshot>,
    counts: watch::Sender<Changes>,
) {
    let mut gen_now = 0u64;
    let mut every: Option<tokio::time::Interval> = None;
    loop {
        let tick = async {
            match every.as_mut() {
                Some(i) => {
                    i.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        let first = tokio::select! {
            m = rx.recv() => match m {
                Some(m) => Some(m),
                None => return,
            },
            () = tick => None,
        };
        let mut answers: Vec<Answer> = Vec::new();
        let Ok(mut d) = cell.lock() else { return };
        let mut changed = false;
        let mut urgent = false;
        let mut refresh = false;
        let mut next = first;
        let mut served = 0;
        loop {
            match next {
                None => {
                    d.tick();
                    changed = true;
                }
                Some(Msg::StartTicking) => every = Some(ticker()),
                Some(Msg::Refresh { reply }) => {
                    refresh = true;
                    later(&mut answers, reply, ());
                }
                Some(m) => {
                    let t = serve(&mut d, m, &mut answers);
                    changed |= t.changed;
                    urgent |= t.urgent;
                }
            }
            served += 1;
            if served >= BURST {
                break;
            }
            match rx.try_recv() {
                Ok(m) => next = Some(m),
                Err(_) => break,
            }
        }
        if changed || urgent {
            gen_now += 1;
            counts.send_modify(|c| {
                c.generation = gen_now;
                if urgent {
                    c.urgent = gen_now;
                }
            });
        }
        if refresh && publish.borrow().generation < gen_now {
            publish.send_replace(snapshot(&d, gen_now));
        }
        drop(d);
        // Answered once the change is counted (a reader asking after it
        // gets a snapshot that shows it).
        for a in answers {
            a();
        }
    }
}

/// The owner's one-second tick.
fn ticker() -> tokio::time::Interval {
    let mut i = tokio::time::interval(std::time::Duration::from_secs(1));
    i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    i
}

/// An answer held until the burst is published.
type Answer = Box<dyn FnOnce() + Send>;

fn later<T: Send + 'static>(answers: &mut Vec<Answer>, reply: oneshot::Sender<T>, value: T) {
    answers.push(Box::new(move || {
        let _ = reply.send(value);
    }));
}

/// Serve one request; whether it may have changed what the snapshot
/// shows, and whether urgently.
fn serve(d: &mut Daemon, msg: Msg, answers: &mut Vec<Answer>) -> Touched {
    let changed = match msg {
        // Handled by [`run`].
        Msg::StartTicking | Msg::Refresh { .. } => false,
        Msg::Control { req, reply } => {
            // Queries (rvsadm -L, --checks, ping) change nothing shown.
            let changes = !matches!(req, Request::Ping | Request::State { .. } | Request::Checks);
            let resp = d.handle(req);
            let applied = d.controller().plane_applied();
            later(answers, reply, (resp, applied));
            changes
        }
        Msg::Load { src, loaded, reply } => {
            let r = d.apply_loaded(&src, *loaded);
            later(answers, reply, r);
            true
        }
        Msg::Submit {
            owner,
            change,
            reply,
        } => {
            let r = d.submit(owner, change);
            later(answers, reply, r);
            true
        }
        Msg::ApiWrite { plan, reply } => {
            let r = crate::api::write(d, plan);
            let applied = d.controller().plane_applied();
            later(answers, reply, (r, applied));
            true
        }
        Msg::ReleaseHanded { reply } => {
            let _ = reply.send(d.controller_mut().release_handed());
            true
        }
        Msg::Health { results, reply } => {
            let r = rvs_check::runner::step(d, results);
            let urgent = r.as_ref().is_some_and(|s| s.transitioned);
            later(answers, reply, r);
            return Touched {
                changed: true,
                urgent,
            };
        }
        Msg::AnnounceDecide { current, reply } => {
            let r = crate::announce::round(d, current.as_ref());
            later(answers, reply, r);
            true
        }
        Msg::AnnounceRecord { routes, error } => {
            d.announce_record(routes, error);
            true
        }
        Msg::SetBgp(v) => {
            d.announce_mut().set_bgp(v);
            true
        }
        Msg::DrainForRemoval { reply } => {
            let s = d.announce().settings().cloned();
            if s.is_some() {
                let _ = d
                    .announce_mut()
                    .drain(std::time::Instant::now(), std::time::Duration::ZERO);
            }
            later(answers, reply, s);
            true
        }
        Msg::SyncStarted {
            cfg,
            maxlen,
            managed,
            stop,
            reply,
        } => {
            let now = d.now();
            let r = d
                .sync_daemons()
                .record_started(cfg, maxlen, managed, stop, now);
            later(answers, reply, r);
            true
        }
        Msg::SyncStop { master, reply } => {
            let r = d.sync_daemons().stop(master);
            later(answers, reply, r);
            true
        }
        Msg::SyncStep {
            mut ep,
            master,
            input,
            now,
            reply,
        } => {
            crate::sync::step(d, &mut ep, master, input, now);
            let _ = reply.send(ep);
            false
        }
        Msg::SyncHeard(at) => {
            d.sync_daemons().set_heard(at);
            false
        }
        Msg::SyncWanted { reply } => {
            let _ = reply.send(crate::sync::wanted(d));
            false
        }
        Msg::RetirePlane => {
            d.controller_mut().retire_plane();
            false
        }
        Msg::AbortPlane => {
            d.controller_mut().abort_plane();
            false
        }
        Msg::ApiService { key, reply } => {
            let _ = reply.send(crate::view::api_service(d, &key));
            false
        }
        Msg::ApiState { reply } => {
            let _ = reply.send(crate::view::api_state(d, true));
            false
        }
        Msg::ApiConns {
            from,
            limit,
            keep,
            reply,
        } => {
            let table = d.controller().ipvs().conns();
            let _ = reply.send(crate::view::conn_page(table, d.now(), from, limit, &*keep));
            false
        }
        Msg::PlaneLive { reply } => {
            let _ = reply.send(d.controller().plane_live());
            false
        }
        Msg::HandOver { reply } => {
            // Only duplicating descriptors and copying the table here.
            let r = d
                .controller()
                .handover_sockets()
                .map(|s| (s, d.controller().table_commands()))
                .map_err(|e| e.to_string());
            let _ = reply.send(r);
            false
        }
        Msg::KubernetesStats(s) => {
            d.set_kubernetes_stats(s);
            true
        }
        Msg::Shutdown { reply } => {
            d.shutdown_health();
            let writer = d.close_table();
            later(answers, reply, writer);
            false
        }
    };
    changed.into()
}

fn json(v: &serde_json::Value) -> Arc<str> {
    Arc::from(v.to_string())
}

/// What the owner publishes, from the daemon as it is at change count
/// `generation`.
fn snapshot(d: &Daemon, generation: u64) -> Snapshot {
    let table = crate::view::api_table(d, false);
    Snapshot {
        generation,
        families: Arc::new(d.families()),
        announce: Arc::new(d.announce().view()),
        table: Arc::new(table),
        checks: json(&d.checks().unwrap_or(serde_json::Value::Null)),
        announced: d.announce().vips().filter(|(_, on)| *on).count(),
        live: d.live(),
        sync: Arc::from(d.sync_view().to_string()),
    }
}

fn error(message: String) -> Response {
    Response::Error {
        message,
        index: None,
        ctl: None,
    }
}

/// Re-read the configuration file and apply the difference. The file is
/// read and parsed on a blocking thread (a 10,000-service file takes a good
/// part of a second); only the comparison and the application are the
/// owner's.
pub async fn reload(daemon: &DaemonHandle) -> Result<DiffSummary, String> {
    let Some(src) = daemon.source().cloned() else {
        return Err("no configuration file to reload (rvsd was started without -f/--rules)".into());
    };
    let read_src = src.clone();
    let loaded = tokio::task::spawn_blocking(move || crate::source::load(&read_src))
        .await
        .unwrap_or_else(|e| Err(format!("reading the configuration: {e}")));
    load(daemon, src, loaded).await
}

/// Apply a configuration read from `src` ([`Daemon::apply_loaded`]).
pub async fn load(
    daemon: &DaemonHandle,
    src: Source,
    loaded: Result<Loaded, String>,
) -> Result<DiffSummary, String> {
    daemon
        .ask(|reply| Msg::Load {
            src,
            loaded: Box::new(loaded),
            reply,
        })
        .await
        .unwrap_or_else(|| Err("rvsd is stopping".into()))
}

/// Answer one control request: a reload reads its file first ([`reload`]),
/// a sync daemon opens its sockets first ([`crate::sync::start`]);
/// everything else is the owner's ([`Daemon::handle`]). A change is
/// answered once the data plane carried it out ([`applied`]).
pub async fn answer(daemon: &DaemonHandle, req: Request) -> Response {
    match req {
        Request::StartDaemon(cfg) => match crate::sync::start(daemon, cfg).await {
            Ok(()) => Response::Ok,
            Err(message) => error(message),
        },
        Request::StopDaemon { master } => {
            match daemon.ask(|reply| Msg::SyncStop { master, reply }).await {
                Some(Ok(())) => Response::Ok,
                Some(Err(message)) => error(message),
                None => error("rvsd is stopping".into()),
            }
        }
        Request::Reload => {
            let r = reload(daemon).await;
            if let Some((_, ticket)) = daemon
                .ask(|reply| Msg::Control {
                    req: Request::Ping,
                    reply,
                })
                .await
            {
                applied(ticket).await;
            }
            match r {
                Ok(s) => Response::Reloaded {
                    summary: s.to_string(),
                },
                Err(message) => error(message),
            }
        }
        other => match daemon.ask(|reply| Msg::Control { req: other, reply }).await {
            Some((resp, ticket)) => {
                applied(ticket).await;
                resp
            }
            None => error("rvsd is stopping".into()),
        },
    }
}

/// The longest a control request waits for the data plane to carry out
/// its change (a reload adding thousands of real servers takes the XDP
/// plane's worker a moment); past it, the answer goes out anyway and the
/// change lands shortly after.
const APPLIED_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Wait, without blocking the runtime or the owner, until the data plane
/// has carried out every change the ticket covers
/// ([`rvs_control::dataplane::DataPlane::applied`]), so a request is
/// answered once its change is in effect, as `ipvsadm` returns once the
/// kernel has it. Bounded by [`APPLIED_WAIT`].
pub(crate) async fn applied(ticket: Option<Applied>) {
    let Some(ticket) = ticket else {
        return;
    };
    let start = std::time::Instant::now();
    let mut pause = std::time::Duration::from_micros(200);
    while !ticket.done() {
        if start.elapsed() >= APPLIED_WAIT {
            tracing::warn!(
                "the data plane has not carried out the last change after {APPLIED_WAIT:?}; answering anyway"
            );
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(10));
    }
}
