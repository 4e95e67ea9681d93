//! The plane worker: a std thread that owns the [`Plane`] (and so every
//! map syscall), and the thin [`PlaneHandle`] the control plane holds.
//!
//! * [`DataPlane::apply`] on the handle clones the command into the
//!   worker's channel and returns: no syscall, no wait, whatever the
//!   command (a reload adding hundreds of real servers costs the control
//!   plane a few channel sends). The worker applies commands in order.
//! * [`DataPlane::applied`] is the apply barrier: a ticket (commands sent
//!   so far) done once the worker's count of applied commands reaches it.
//!   rvsd's control socket waits on it after releasing its lock, so
//!   `rvsadm` returns once the maps hold the change, as `ipvsadm` does.
//! * [`DataPlane::admit`] is the pure check ([`super::admit`]).
//! * [`DataPlane::load_synced`] takes what it needs from the director
//!   ([`SyncedFlow::resolve`], pure) and sends it.
//! * [`DataPlane::attach`] gives the worker the [`DirectorHandle`]; the
//!   worker then reports every [`REPORT_EVERY`] by itself
//!   ([`DataPlane::report`] on the handle does nothing): it reads the maps
//!   without the control plane's lock, borrows the director for the pure
//!   part only ([`Plane::report_decide`]) and makes the writes that part
//!   returned after giving the lock back.
//! * The worker sends the plane's [`Wanted`] set to the resolver task
//!   ([`super::resolver`]) whenever it changes and applies its answers
//!   ([`Plane::on_neighbour`]) as they come.
//!
//! Convergence (re-applying what the model has and the maps lack, after a
//! failed write) must not race commands still queued: the handle counts
//! the commands it sent (in `apply`, which the control plane calls under
//! its lock) and the worker those it applied; the report converges only
//! when, under the lock, the two are equal — then the plane has seen every
//! change the director has.
//!
//! The worker has no caller to return errors to: they are logged (as the
//! control plane logs a data plane's errors). Commands refused for want of
//! room in a map go through [`NoRoom`]: the first of each map named, the
//! rest counted, their total logged once it stops growing (every ten
//! seconds while it goes on) and published at every report for
//! `rvs_dataplane_refused_commands_total` (10,000 services on a plane of
//! 4,096 are about twenty lines, not 5,904).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant as StdInstant};

use rvs_control::dataplane::{Applied, DataPlane, DataPlaneError, DirectorHandle};
use rvs_control::protocol::Command;
use rvs_control::warnings::NoRoom;
use rvs_core::ipvs::{Ipvs, MirroredConn};
use rvs_core::time::Instant;

use super::forwarding::{ForwardingCheck, Sysctl, Sysctls};
use super::resolver::{self, Answer, Resolver};
use super::{Plane, PlaneError, SyncedFlow, Wanted};
use crate::maps::MapOps;
use crate::neigh::{L2, Resolve};

/// How often the worker reports (as rvsd's tick).
pub const REPORT_EVERY: Duration = Duration::from_secs(1);
/// How often the worker takes the next hops the program found unresolved
/// (`nh_missing`, see [`Plane::take_missing_hops`]) to the resolver: a
/// reply dropped meanwhile is retransmitted by TCP within its RTO.
pub const DRAIN_EVERY: Duration = Duration::from_millis(100);

type Lend<M> = Box<dyn FnOnce(&mut Plane<M>) + Send>;

/// What the worker is sent.
enum Msg<M: MapOps> {
    /// An accepted change, in order.
    Apply(Command),
    /// A synced connection to load.
    Synced(SyncedFlow),
    /// The way back to the director.
    Attach(DirectorHandle),
    /// The resolver's answer.
    Neighbour(IpAddr, L2),
    /// The MACs an attached interface receives frames for now.
    OwnMacs(u32, Vec<[u8; 6]>),
    /// Lend the plane (tests, tools).
    With(Lend<M>),
    /// The handle is gone (the resolver holds a sender too, so the
    /// channel alone never closes).
    Stop,
}

/// The data plane the control plane holds: a handle on the plane worker
/// and the resolver task (see the module doc). Dropping it stops both
/// (dropping the plane detaches the program).
pub struct PlaneHandle<M: MapOps> {
    tx: Option<Sender<Msg<M>>>,
    /// Commands sent to the worker.
    sent: Arc<AtomicU64>,
    /// Commands the worker has carried out (the [`Applied`] tickets').
    processed: Arc<AtomicU64>,
    worker: Option<JoinHandle<()>>,
    resolver: Option<JoinHandle<()>>,
}

impl<M: MapOps> std::fmt::Debug for PlaneHandle<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaneHandle")
            .field("sent", &self.sent.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<M: MapOps + Send + 'static> PlaneHandle<M> {
    /// Start the plane worker over `plane` and the resolver task over
    /// `resolve`, each on its own thread.
    pub fn spawn<R: Resolve + Send + 'static>(
        plane: Plane<M>,
        resolve: R,
    ) -> Result<Self, PlaneError> {
        let (tx, rx) = channel::<Msg<M>>();
        let (wants_tx, wants_rx) = channel::<Wanted>();
        let answers = tx.clone();
        let thread_err = |what: &str, e: std::io::Error| {
            PlaneError::Refused(format!("starting the xdp {what} thread: {e}"))
        };
        let resolver = resolver::spawn(Resolver::new(resolve), wants_rx, move |a| {
            let m = match a {
                Answer::Neighbour(a, l2) => Msg::Neighbour(a, l2),
                Answer::Links(link, macs) => Msg::OwnMacs(link, macs),
            };
            answers.send(m).is_ok()
        })
        .map_err(|e| thread_err("neighbour", e))?;
        let sent = Arc::new(AtomicU64::new(0));
        let processed = Arc::new(AtomicU64::new(0));
        let worker = Worker {
            plane,
            director: None,
            sent: sent.clone(),
            processed: 0,
            done: processed.clone(),
            wants: wants_tx,
            last_wanted: None,
            forwarding: ForwardingCheck::default(),
            sysctls: Sysctls::default(),
            read_sysctl,
            no_room: NoRoom::default(),
        };
        let worker = std::thread::Builder::new()
            .name("rvs-xdp-plane".into())
            .spawn(move || worker.run(rx))
            .map_err(|e| thread_err("plane", e))?;
        Ok(PlaneHandle {
            tx: Some(tx),
            sent,
            processed,
            worker: Some(worker),
            resolver: Some(resolver),
        })
    }

    /// Run `f` with the worker's plane once the worker has done everything
    /// sent before, and return its result; `None` when the worker is gone.
    /// Waits for the worker: for tests and tools, never the control path.
    pub fn with_plane<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Plane<M>) -> T + Send + 'static,
    ) -> Option<T> {
        let (back, got) = channel();
        let lend: Lend<M> = Box::new(move |p| {
            let _ = back.send(f(p));
        });
        self.tx.as_ref()?.send(Msg::With(lend)).ok()?;
        got.recv().ok()
    }

    fn send(&self, m: Msg<M>) -> Result<(), DataPlaneError> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(m).ok())
            .ok_or_else(|| DataPlaneError {
                plane: "xdp",
                message: "the xdp plane worker is gone".into(),
            })
    }
}

impl<M: MapOps> Drop for PlaneHandle<M> {
    fn drop(&mut self) {
        // The worker ends, which ends the resolver (its wanted channel
        // closes).
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Msg::Stop);
        }
        // The worker may hold the last reference to the control plane for
        // a moment (lending the director), and so drop this handle itself:
        // then it must not wait for itself, nor for the resolver (which
        // ends when the worker does). It ends after this turn.
        let me = std::thread::current().id();
        if self.worker.as_ref().is_some_and(|t| t.thread().id() == me) {
            return;
        }
        for t in [self.worker.take(), self.resolver.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.join();
        }
    }
}

impl<M: MapOps + Send + 'static> DataPlane for PlaneHandle<M> {
    fn name(&self) -> &'static str {
        "xdp"
    }

    /// Queue the command for the worker (counted, see the module doc).
    fn apply(&mut self, command: &Command) -> Result<(), DataPlaneError> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.send(Msg::Apply(command.clone()))
    }

    fn admit(&self, command: &Command) -> Result<(), String> {
        super::admit(command).map_err(|e| e.to_string())
    }

    /// Yes: a new flow of a service with source ranges is scheduled only
    /// for a client inside one of them (`bpf/lib/src_range.h`); any other
    /// is dropped and counted (`rvs_xdp_refused_source_total`).
    fn enforces_source_ranges(&self) -> bool {
        true
    }

    /// Each command on its own (what the program cannot carry at all is
    /// refused first, with that reason), then the pool rules: a FULLNAT real
    /// server needs its service's local address pool, and a pool must fit
    /// the program's ([`crate::maps::FNAT_POOL_MAX`] addresses).
    fn admit_all(&self, ipvs: &Ipvs, commands: &[Command]) -> Result<(), (usize, String)> {
        for (i, c) in commands.iter().enumerate() {
            self.admit(c).map_err(|m| (i, m))?;
        }
        rvs_control::dataplane::check_fullnat_pools(ipvs, commands)?;
        super::check_quic_dests(ipvs, commands)?;
        super::check_pool_sizes(ipvs, commands)
    }

    /// Nothing: the worker reports by itself, outside the caller's lock.
    fn report(&mut self, now: Instant, ipvs: &mut Ipvs) {
        let _ = (now, ipvs);
    }

    fn load_synced(&mut self, ipvs: &Ipvs, flow: &MirroredConn) -> Result<(), DataPlaneError> {
        match SyncedFlow::resolve(ipvs, flow) {
            Some(s) => self.send(Msg::Synced(s)),
            None => Ok(()),
        }
    }

    fn attach(&mut self, director: DirectorHandle) {
        if let Err(e) = self.send(Msg::Attach(director)) {
            tracing::warn!("{e}");
        }
    }

    /// Done once the worker has applied every command sent so far (its
    /// map writes made; a real server whose MAC is still unresolved is
    /// applied as unscheduled and scheduled when the answer comes, as
    /// before).
    fn applied(&self) -> Option<Applied> {
        Some(Applied::new(
            self.sent.load(Ordering::SeqCst),
            self.processed.clone(),
        ))
    }
}

/// The worker thread's state.
struct Worker<M: MapOps> {
    plane: Plane<M>,
    director: Option<DirectorHandle>,
    /// Commands the handle sent (see the module doc).
    sent: Arc<AtomicU64>,
    /// Commands applied here.
    processed: u64,
    /// `processed`, published for [`Applied`] tickets.
    done: Arc<AtomicU64>,
    wants: Sender<Wanted>,
    last_wanted: Option<Wanted>,
    /// Which services were warned about forwarding that is off.
    forwarding: ForwardingCheck,
    /// The forwarding sysctls as read in this batch of commands.
    sysctls: Sysctls,
    /// How they are read ([`read_sysctl`]; tests count the reads).
    read_sysctl: fn(Sysctl) -> Option<bool>,
    /// The commands refused for want of room: named, counted, summed up.
    no_room: NoRoom,
}

impl<M: MapOps> Worker<M> {
    fn run(mut self, rx: Receiver<Msg<M>>) {
        let mut next_report = StdInstant::now() + REPORT_EVERY;
        let mut next_drain = StdInstant::now() + DRAIN_EVERY;
        loop {
            let now = StdInstant::now();
            if now >= next_drain {
                next_drain = now + DRAIN_EVERY;
                if self.plane.take_missing_hops() {
                    self.publish_wanted();
                }
            }
            if now >= next_report {
                self.report();
                self.sum_up_refusals();
                self.plane.age_missing_hops();
                self.publish_wanted();
                next_report += REPORT_EVERY;
                if next_report <= StdInstant::now() {
                    next_report = StdInstant::now() + REPORT_EVERY;
                }
                continue;
            }
            match rx.recv_timeout(next_report.min(next_drain).saturating_duration_since(now)) {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(m) => self.handle(m),
                Err(RecvTimeoutError::Timeout) => continue,
            }
            // What else is queued, then tell the resolver once (and read the
            // sysctls again in the next batch).
            while StdInstant::now() < next_report {
                match rx.try_recv() {
                    Ok(Msg::Stop) | Err(TryRecvError::Disconnected) => return,
                    Ok(m) => self.handle(m),
                    Err(TryRecvError::Empty) => break,
                }
            }
            self.sysctls.forget();
            self.publish_wanted();
        }
    }

    fn handle(&mut self, m: Msg<M>) {
        match m {
            Msg::Apply(c) => {
                self.no_room.given(&c);
                match self.plane.apply_command(&c) {
                    Ok(()) => {}
                    Err(PlaneError::Full(map)) => {
                        for line in self.no_room.refused(&c, map) {
                            tracing::warn!("data plane xdp: {line}");
                        }
                    }
                    Err(e) => tracing::warn!("data plane xdp: {e}"),
                }
                let (batch, read) = (&mut self.sysctls, self.read_sysctl);
                for w in self.forwarding.on_command(&c, |s| batch.get(s, read)) {
                    tracing::warn!(sysctl = w.sysctl.name(), "data plane xdp: {w}");
                }
                self.processed += 1;
                self.done.store(self.processed, Ordering::Release);
            }
            Msg::Synced(s) => {
                if let Err(e) = self.plane.load_synced(&s) {
                    tracing::warn!("data plane xdp: loading a synced connection: {e}");
                }
            }
            Msg::Attach(d) => self.director = Some(d),
            Msg::Neighbour(a, l2) => self.plane.on_neighbour(a, l2),
            Msg::OwnMacs(link, macs) => self.plane.on_owned_macs(link, macs),
            Msg::With(f) => f(&mut self.plane),
            Msg::Stop => {}
        }
    }

    /// A report passed: the totals due of the refusals for want of room
    /// and of the services warned about forwarding, to the log (see
    /// [`rvs_control::warnings::WarnLimit::tick`]); the refusals to the
    /// metrics.
    fn sum_up_refusals(&mut self) {
        for line in self.no_room.tick() {
            tracing::warn!("data plane xdp: {line}");
        }
        for w in self.forwarding.tick() {
            tracing::warn!(sysctl = w.sysctl.name(), "data plane xdp: {w}");
        }
        self.plane
            .flood_stats()
            .publish_refused(self.no_room.totals());
    }

    fn publish_wanted(&mut self) {
        let w = self.plane.wanted();
        if self.last_wanted.as_ref() != Some(&w) {
            // The resolver gone (it cannot fail otherwise) only stops
            // resolution; the plane keeps going.
            let _ = self.wants.send(w.clone());
            self.last_wanted = Some(w);
        }
    }

    /// One report in three phases (see [`super::report`]): the director
    /// is borrowed for the pure part only.
    fn report(&mut self) {
        let Some(director) = self.director.clone() else {
            return;
        };
        let read = match self.plane.report_read() {
            Ok(r) => r,
            Err(e) => {
                // Transient (a map read failed): the next report retries.
                tracing::warn!("xdp data plane report: {e}");
                return;
            }
        };
        let (sent, processed, plane) = (&self.sent, self.processed, &mut self.plane);
        let writes = director.with(move |ipvs, now| {
            let converge = sent.load(Ordering::SeqCst) == processed;
            plane.report_decide(read, now, ipvs, converge)
        });
        if let Some(w) = writes {
            self.plane.report_write(w);
        }
    }
}

/// Whether `sysctl` is on, as `/proc/sys` says (`None`: unreadable).
fn read_sysctl(sysctl: Sysctl) -> Option<bool> {
    let v = std::fs::read_to_string(sysctl.proc_path()).ok()?;
    Some(v.trim() != "0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::MemMaps;
    use crate::neigh::StaticResolver;
    use rvs_core::ipvs::IpvsConfig;
    use rvs_core::model::ServiceKey;
    use rvs_core::model::{AddrFamily, DestConfig, ForwardMethod, Protocol, ServiceConfig};
    use std::net::Ipv4Addr;
    use std::sync::Mutex;

    fn key() -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
            port: 80,
        }
    }

    fn rs(i: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
    }

    /// Poll `f` (through the worker) for up to 5 s.
    fn eventually(h: &PlaneHandle<MemMaps>, what: &str, f: fn(&mut Plane<MemMaps>) -> bool) {
        let start = StdInstant::now();
        while !h.with_plane(f).expect("worker") {
            assert!(start.elapsed() < Duration::from_secs(5), "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The apply barrier: a ticket taken after `apply` is not done while
    /// the worker has yet to write the command (here it is held up on
    /// purpose), and is done once the maps hold it.
    #[test]
    fn an_applied_ticket_is_done_once_the_worker_wrote_the_command() {
        let plane = Plane::new(MemMaps::new(1 << 12)).expect("plane");
        let mut h = PlaneHandle::spawn(plane, StaticResolver::default()).expect("spawn");
        assert!(h.applied().expect("a ticket").done(), "nothing sent yet");
        // Hold the worker until `go` says so.
        let (go, wait) = channel::<()>();
        let hold: Lend<MemMaps> = Box::new(move |_| {
            let _ = wait.recv_timeout(Duration::from_secs(10));
        });
        h.send(Msg::With(hold)).expect("worker");
        h.apply(&Command::AddService {
            key: key(),
            config: ServiceConfig::new(AddrFamily::Inet),
        })
        .expect("queued");
        let ticket = h.applied().expect("a ticket");
        assert!(!ticket.done(), "the worker has not applied it yet");
        go.send(()).expect("release");
        let start = StdInstant::now();
        while !ticket.done() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "ticket never done"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Done means written: the service has its index in the maps now.
        assert!(
            h.with_plane(|p| p.service_index(&key()).is_some())
                .expect("worker"),
            "a done ticket means the service is in the maps"
        );
    }

    /// The worker and the resolver on their threads, as in rvsd: commands
    /// are queued (the resolver answers for one real server, never for the
    /// other), a write that fails leaves its service to retry, and the
    /// worker's own report converges it with the director's model.
    #[test]
    fn the_worker_applies_resolves_and_converges() {
        let mut neigh = StaticResolver::default();
        let l2 = L2 {
            ifindex: 7,
            mac: [2, 0, 0, 0, 0, 1],
            smac: [2, 0, 0, 0, 0, 9],
            src: None,
        };
        neigh.table.insert(rs(1), l2);
        let plane = Plane::new(MemMaps::new(1 << 12)).expect("plane");
        let mut h = PlaneHandle::spawn(plane, neigh).expect("spawn");
        let ipvs = Arc::new(Mutex::new(Ipvs::new(IpvsConfig::default())));
        let shared = ipvs.clone();
        h.attach(DirectorHandle::new(move |f| {
            if let Ok(mut i) = shared.lock() {
                f(&mut i, Instant::from_secs(1));
            }
        }));
        let exec = |h: &mut PlaneHandle<MemMaps>, c: Command| {
            let mut model = ipvs.lock().expect("lock");
            rvs_control::state::apply(&mut model, &c).expect("model");
            h.apply(&c).expect("queued");
        };
        exec(
            &mut h,
            Command::AddService {
                key: key(),
                config: ServiceConfig::new(AddrFamily::Inet)
                    .scheduler(rvs_core::sched::Scheduler::Rr),
            },
        );
        for i in [1, 2] {
            exec(
                &mut h,
                Command::AddDest {
                    service: key(),
                    dest: DestConfig::new(rs(i), 80).forward(ForwardMethod::Route),
                },
            );
        }
        eventually(&h, "the resolved one is scheduled alone", |p| {
            let (Some(i), Some(d)) = (p.service_index(&key()), p.dest_index(&key(), rs(1), 80))
            else {
                return false;
            };
            p.maps().svc_data(i).0 == vec![d] && p.wanted().unresolved.len() == 1
        });
        // The edit is in the model; the worker's write of it fails.
        let edit = Command::EditDest {
            service: key(),
            dest: DestConfig::new(rs(1), 80)
                .forward(ForwardMethod::Route)
                .weight(7),
        };
        rvs_control::state::apply(&mut ipvs.lock().expect("lock"), &edit).expect("model");
        let failed = h
            .with_plane(move |p| {
                p.maps().fail_at = Some(p.maps().writes);
                p.apply_command(&edit).is_err()
            })
            .expect("worker");
        assert!(failed, "the write failed");
        // The worker's report (every second) converges.
        eventually(&h, "converged", |p| {
            let d = p.dest_index(&key(), rs(1), 80);
            d.is_some_and(|d| p.maps().dests.get(&d).is_some_and(|x| x.weight == 7))
        });
        drop(h);
    }

    /// Commands queued at once are one batch: `net.ipv4.ip_forward` is
    /// read once for it, not once per NAT real server (200 here, 10,000 in
    /// a Kubernetes cluster). A batch ends when the queue is empty or at a
    /// report (every second), so a few reads at most.
    #[test]
    fn the_worker_reads_the_forwarding_sysctl_once_a_batch() {
        static READS: AtomicU64 = AtomicU64::new(0);
        fn forwarding_on(_: Sysctl) -> Option<bool> {
            READS.fetch_add(1, Ordering::SeqCst);
            Some(true)
        }
        let (tx, rx) = channel();
        let (wants, _wanted) = channel();
        let worker = Worker {
            plane: Plane::new(MemMaps::new(1 << 16)).expect("plane"),
            director: None,
            sent: Arc::default(),
            processed: 0,
            done: Arc::default(),
            wants,
            last_wanted: None,
            forwarding: ForwardingCheck::default(),
            sysctls: Sysctls::default(),
            read_sysctl: forwarding_on,
            no_room: NoRoom::default(),
        };
        for port in 1..=200 {
            let key = ServiceKey::Addr {
                protocol: Protocol::Tcp,
                addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
                port,
            };
            let config = ServiceConfig::new(AddrFamily::Inet);
            let dest = DestConfig::new(rs(1), 80).forward(ForwardMethod::Masq);
            for c in [
                Command::AddService { key, config },
                Command::AddDest { service: key, dest },
            ] {
                tx.send(Msg::Apply(c)).expect("queued");
            }
        }
        tx.send(Msg::Stop).expect("queued");
        worker.run(rx);
        let reads = READS.load(Ordering::SeqCst);
        assert!(
            (1..10).contains(&reads),
            "{reads} reads of the sysctl for 200 NAT services queued at once"
        );
    }

    /// A report never converges while commands the director already has
    /// are still queued: it would replay them out of order.
    #[test]
    fn a_report_converges_only_when_told_to() {
        let mut p = Plane::new(MemMaps::new(1 << 12)).expect("plane");
        let mut ipvs = Ipvs::new(IpvsConfig::default());
        let add = Command::AddService {
            key: key(),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Rr),
        };
        rvs_control::state::apply(&mut ipvs, &add).expect("model");
        p.maps().fail_at = Some(p.maps().writes);
        assert!(p.apply_command(&add).is_err());
        let read = p.report_read().expect("read");
        let w = p.report_decide(read, Instant::from_secs(1), &mut ipvs, false);
        p.report_write(w);
        assert_eq!(p.service_index(&key()), None, "commands in flight: no");
        let read = p.report_read().expect("read");
        let w = p.report_decide(read, Instant::from_secs(2), &mut ipvs, true);
        p.report_write(w);
        assert!(p.service_index(&key()).is_some(), "converged");
    }
}
