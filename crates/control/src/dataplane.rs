//! The one trait every data plane implements.
//!
//! The control plane owns the desired state (an [`rvs_core::ipvs::Ipvs`]
//! holding services, real servers and policy); a data plane receives every
//! change that was accepted, in order, and carries traffic accordingly. It
//! owns no policy: a change the control plane rejected never reaches it.
//! `--dataplane none` is [`NoDataPlane`]: the control plane alone.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rvs_core::ipvs::Ipvs;
use rvs_core::model::ServiceKey;
use rvs_core::time::Instant;

use crate::protocol::Command;

/// Why a data plane could not apply a change.
#[derive(Debug, thiserror::Error)]
#[error("data plane {plane}: {message}")]
pub struct DataPlaneError {
    /// Which data plane.
    pub plane: &'static str,
    /// What went wrong.
    pub message: String,
}

/// A packet or connection forwarding engine driven by the control plane.
pub trait DataPlane: Send {
    /// Name as given to `--dataplane`.
    fn name(&self) -> &'static str;

    /// Apply one accepted change. Called in order, after the control plane
    /// applied it to its own model. An error is logged and reported; the
    /// model keeps the change (the data plane is expected to converge, e.g.
    /// retry binding a listener).
    fn apply(&mut self, command: &Command) -> Result<(), DataPlaneError>;

    /// Whether this data plane can carry `command` at all (the XDP program,
    /// for one, cannot match firewall marks). Asked before the control plane
    /// changes anything: a refusal fails the request with this text (as
    /// [`rvs_core::ipvs::CtlError::Unsupported`]) and nothing changes. The
    /// default admits everything.
    fn admit(&self, command: &Command) -> Result<(), String> {
        let _ = command;
        Ok(())
    }

    /// Whether this data plane refuses the clients outside a service's
    /// [`rvs_core::model::ServiceConfig::source_ranges`]. The default is no:
    /// the control plane then refuses such a service on this plane
    /// ([`admit_checked`]), so a plane that does not filter never carries
    /// one open to every client (fail closed).
    fn enforces_source_ranges(&self) -> bool {
        false
    }

    /// Whether this data plane can carry `commands`, applied in order to
    /// the table `ipvs` holds now: what the control plane asks before it
    /// changes anything (a refusal names the command's index and why). The
    /// default asks [`DataPlane::admit`] of each command; a data plane with
    /// rules that span commands (the XDP program's FULLNAT needs its
    /// service's local address pool: [`check_fullnat_pools`]) adds them.
    fn admit_all(&self, ipvs: &Ipvs, commands: &[Command]) -> Result<(), (usize, String)> {
        let _ = ipvs;
        for (i, c) in commands.iter().enumerate() {
            self.admit(c).map_err(|m| (i, m))?;
        }
        Ok(())
    }

    /// Report back: called periodically (every second by rvsd) with the
    /// control plane's director so the data plane can record what it carried
    /// since the last call — connections it created or closed and their
    /// counters (a packet data plane reads its maps here; a data plane that
    /// drives the director itself has nothing to add).
    fn report(&mut self, now: Instant, ipvs: &mut Ipvs) {
        let _ = (now, ipvs);
    }

    /// A connection or persistence template another director synced here
    /// (IPVS connection sync), already entered in `ipvs` as `flow.dest`: a
    /// packet data plane that keeps its own flow table loads it there, so
    /// the connection's packets keep going to the same real server after a
    /// failover. The default (a data plane whose table is the director's)
    /// has nothing to do.
    fn load_synced(
        &mut self,
        ipvs: &Ipvs,
        flow: &rvs_core::ipvs::MirroredConn,
    ) -> Result<(), DataPlaneError> {
        let _ = (ipvs, flow);
        Ok(())
    }

    /// Called once, before any [`DataPlane::apply`], with the way back to
    /// the control plane's director — for data planes that schedule
    /// connections themselves (the proxy calls `Ipvs::open` per accepted
    /// connection). Packet data planes that only read tables ignore it.
    fn attach(&mut self, director: DirectorHandle) {
        let _ = director;
    }

    /// For a data plane that carries commands out after [`DataPlane::apply`]
    /// returned (the XDP plane queues them for a worker thread, so the
    /// control plane's lock is never held over a syscall): a ticket for
    /// everything applied so far, done once the data plane has carried it
    /// out. The control socket waits on it (outside the lock, bounded)
    /// before answering, so `rvsadm` returns once its change is in the data
    /// plane, as `ipvsadm` does with the kernel. `None` (the default): the
    /// data plane is done when `apply` returns.
    fn applied(&self) -> Option<Applied> {
        None
    }

    /// `rvsd --takeover`: duplicates of the sockets this data plane carries
    /// traffic on, one per service, for the daemon taking over (this one
    /// keeps its own until it retires). A data plane without sockets (the
    /// XDP program, which outlives rvsd by pinning; `none`) hands over
    /// nothing — the default.
    fn handover_sockets(&self) -> Result<Vec<(ServiceKey, OwnedFd)>, DataPlaneError> {
        Ok(Vec::new())
    }

    /// `rvsd --takeover`, in the new daemon, once its configuration is
    /// applied: close the sockets it was handed for services it does not
    /// have (their keys are returned, for the log).
    fn release_handed(&mut self) -> Vec<ServiceKey> {
        Vec::new()
    }

    /// `rvsd --takeover`, in the old daemon: stop accepting connections
    /// and reading datagrams on the shared sockets without closing them
    /// for the new daemon (no shutdown: the kernel's accept queue stays
    /// open), and let established connections and flows run.
    fn retire(&mut self) {}

    /// Connections and flows this data plane still carries in this
    /// process (a retiring daemon exits when none are left).
    fn live(&self) -> u64 {
        0
    }

    /// A retiring daemon's drain bound was reached: end what is left.
    fn abort_live(&mut self) {}

    /// What the data plane did that the operator should know of but that
    /// is no error, since the last call (a [`Composite`] reports each
    /// service one of its planes skips, once): the daemon logs them as
    /// warnings. The default has none.
    fn take_notices(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// For a [`Composite`]: each plane's name and how many live services it
    /// skips (carried by the other planes only). The default: none.
    fn services_skipped(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// The refusal of a command no plane of a [`Composite`] admits: the one
/// reason, or each plane's.
fn refusal(why: Vec<String>) -> String {
    if why.len() == 1 {
        why.into_iter().next().unwrap_or_default()
    } else {
        format!("no data plane can carry it: {}", why.join("; "))
    }
}

/// Why `plane` may not carry `command` for want of source filtering: a
/// service with source ranges on a plane that does not enforce them.
fn source_ranges_refused(plane: &dyn DataPlane, command: &Command) -> Result<(), String> {
    match command {
        Command::AddService { config, .. } | Command::EditService { config, .. }
            if !config.source_ranges.is_empty() && !plane.enforces_source_ranges() =>
        {
            Err(format!(
                "client source ranges ({}) are not enforced by the {} data plane: refused rather than open to every client",
                config
                    .source_ranges
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                plane.name()
            ))
        }
        _ => Ok(()),
    }
}

/// [`DataPlane::admit`], after refusing a service with source ranges on a
/// plane that does not enforce them: how the control plane (and
/// [`Composite`], for each of its planes) asks.
pub fn admit_checked(plane: &dyn DataPlane, command: &Command) -> Result<(), String> {
    source_ranges_refused(plane, command)?;
    plane.admit(command)
}

/// [`DataPlane::admit_all`], after [`admit_checked`]'s source-range rule
/// for each command.
pub fn admit_all_checked(
    plane: &dyn DataPlane,
    ipvs: &Ipvs,
    commands: &[Command],
) -> Result<(), (usize, String)> {
    for (i, c) in commands.iter().enumerate() {
        source_ranges_refused(plane, c).map_err(|m| (i, m))?;
    }
    plane.admit_all(ipvs, commands)
}

/// The rule of a data plane that carries FULLNAT only from a local address
/// pool: after every command of `commands`, applied in order to `ipvs`,
/// each service with a FULLNAT real server has a pool entry. So a FULLNAT
/// real server comes after its service's first `--add-laddr` (a reload
/// orders them so), and the last entry goes only after the last FULLNAT
/// real server. Commands the director itself would refuse are not judged
/// here. Returns the index of the first command that breaks the rule.
pub fn check_fullnat_pools(ipvs: &Ipvs, commands: &[Command]) -> Result<(), (usize, String)> {
    use rvs_core::model::ForwardMethod;
    use std::collections::{HashMap, HashSet};
    use std::net::IpAddr;

    #[derive(Default)]
    struct Svc {
        pool: usize,
        fnat: HashSet<(IpAddr, u16)>,
    }
    let mut seen: HashMap<ServiceKey, Svc> = HashMap::new();
    let mut cleared = false;
    let live = |key: &ServiceKey, cleared: bool| -> Svc {
        match ipvs.service(key) {
            Some(s) if !cleared => Svc {
                pool: s.laddrs().len(),
                fnat: s
                    .dests()
                    .iter()
                    .filter(|d| d.config.forward == ForwardMethod::FullNat)
                    .map(|d| (d.config.addr, d.config.port))
                    .collect(),
            },
            _ => Svc::default(),
        }
    };
    for (i, c) in commands.iter().enumerate() {
        match c {
            Command::Clear => {
                seen.clear();
                cleared = true;
            }
            Command::AddService { key, .. } => {
                seen.entry(*key).or_insert_with(|| live(key, cleared));
            }
            Command::DelService { key } => {
                seen.insert(*key, Svc::default());
            }
            Command::AddDest { service, dest } | Command::EditDest { service, dest } => {
                let s = seen
                    .entry(*service)
                    .or_insert_with(|| live(service, cleared));
                if dest.forward == ForwardMethod::FullNat {
                    if s.pool == 0 {
                        return Err((
                            i,
                            format!(
                                "FULLNAT real server {} needs a local address pool:                                  add one with --add-laddr -z ADDR first",
                                std::net::SocketAddr::new(dest.addr, dest.port)
                            ),
                        ));
                    }
                    s.fnat.insert((dest.addr, dest.port));
                } else {
                    s.fnat.remove(&(dest.addr, dest.port));
                }
            }
            Command::DelDest {
                service,
                addr,
                port,
            } => {
                seen.entry(*service)
                    .or_insert_with(|| live(service, cleared))
                    .fnat
                    .remove(&(*addr, *port));
            }
            Command::AddLaddr { service, .. } => {
                seen.entry(*service)
                    .or_insert_with(|| live(service, cleared))
                    .pool += 1;
            }
            Command::DelLaddr { service, laddr } => {
                let s = seen
                    .entry(*service)
                    .or_insert_with(|| live(service, cleared));
                s.pool = s.pool.saturating_sub(1);
                if s.pool == 0 && !s.fnat.is_empty() {
                    return Err((
                        i,
                        format!(
                            "{laddr} is the last local address of a service with                              FULLNAT real servers: delete or change them first"
                        ),
                    ));
                }
            }
            Command::EditService { .. } | Command::Zero { .. } | Command::SetTimeouts { .. } => {}
        }
    }
    Ok(())
}

/// How far an asynchronous data plane has got (see
/// [`DataPlane::applied`]): done once the plane's count of carried-out
/// commands reaches the count sent when the ticket was taken.
#[derive(Debug, Clone)]
pub struct Applied {
    /// (target, the count that must reach it), one per data plane (more
    /// than one for a [`Composite`]).
    parts: Vec<(u64, Arc<AtomicU64>)>,
}

impl Applied {
    /// A ticket for the first `target` commands, done when `processed`
    /// (which the data plane raises as it carries them out) reaches it.
    pub fn new(target: u64, processed: Arc<AtomicU64>) -> Self {
        Applied {
            parts: vec![(target, processed)],
        }
    }

    /// One ticket for several data planes' (a [`Composite`]'s): done once
    /// each of them is.
    pub fn all(tickets: impl IntoIterator<Item = Applied>) -> Self {
        Applied {
            parts: tickets.into_iter().flat_map(|t| t.parts).collect(),
        }
    }

    /// Whether every command the ticket covers has been carried out.
    pub fn done(&self) -> bool {
        self.parts
            .iter()
            .all(|(target, processed)| processed.load(Ordering::Acquire) >= *target)
    }
}

type DirectorFn = dyn Fn(&mut dyn FnMut(&mut Ipvs, Instant)) + Send + Sync;

/// A data plane's access to the control plane's director: runs a closure
/// with the director and the control plane's clock, under the control
/// plane's lock. Cheap to clone; hold it for the life of the data plane.
/// Closures must not block or await: every control request waits for them.
#[derive(Clone)]
pub struct DirectorHandle(std::sync::Arc<DirectorFn>);

impl std::fmt::Debug for DirectorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirectorHandle")
    }
}

impl DirectorHandle {
    /// Wrap the control plane's way of lending its director: `lend` calls
    /// its argument with the director and the current time (or not at all
    /// when the control plane is gone).
    pub fn new(lend: impl Fn(&mut dyn FnMut(&mut Ipvs, Instant)) + Send + Sync + 'static) -> Self {
        DirectorHandle(std::sync::Arc::new(lend))
    }

    /// Run `f` with the director; `None` when the control plane could not
    /// lend it (shutting down, or its lock poisoned by a panic).
    pub fn with<R>(&self, f: impl FnOnce(&mut Ipvs, Instant) -> R) -> Option<R> {
        let mut f = Some(f);
        let mut out = None;
        (self.0)(&mut |ipvs, now| {
            if let Some(f) = f.take() {
                out = Some(f(ipvs, now));
            }
        });
        out
    }
}

/// `--dataplane none`: the control plane alone, for scripting and tests.
#[derive(Debug, Default)]
pub struct NoDataPlane;

impl DataPlane for NoDataPlane {
    fn name(&self) -> &'static str {
        "none"
    }

    fn apply(&mut self, _command: &Command) -> Result<(), DataPlaneError> {
        Ok(())
    }
}

/// Several data planes driven as one (`--dataplane xdp,sock`: external
/// clients through the XDP program, local ones at the socket, one service
/// table). Each service goes to every plane that admits it — its service
/// command, real servers and local addresses together, as
/// [`DataPlane::admit_all`] judges them — and is refused only when no plane
/// does (the refusal gives each plane's reason). So a service one plane
/// cannot carry (the sock plane has no FULLNAT pools, so no SNAT NodePort)
/// is carried by the others, as Cilium carries ClusterIP at the socket and
/// NodePort in XDP. A plane that skips a service is reported once
/// ([`DataPlane::take_notices`]) and counted ([`DataPlane::services_skipped`]).
/// A later change of a service one of its planes refuses takes the service
/// off that plane (while another carries it); it comes back to the plane
/// only when the service is added again. Real-server, local-address and
/// delete commands go to the service's planes; commands of no service
/// (`-C`, timeouts, `-Z` of all) go to every plane. Reports, synced flows
/// and the director handle go to each plane; each adds its own connections
/// and counters to the director, so `-Ln --stats` and `-Lcn` show the sum.
pub struct Composite {
    name: &'static str,
    planes: Vec<Box<dyn DataPlane>>,
    /// The planes carrying each service (bit `i`: `planes[i]`).
    routes: HashMap<ServiceKey, u64>,
    /// The planes skipping each service, with their reasons.
    skipped: HashMap<ServiceKey, Vec<(usize, String)>>,
    /// What the last [`DataPlane::admit_all`] decided for the services of
    /// its request, for the [`DataPlane::apply`] calls that follow it.
    plan: RefCell<HashMap<ServiceKey, Route>>,
    /// Skips not yet reported.
    notices: Vec<String>,
}

/// The planes a request's service goes to, and why the others do not
/// take it.
#[derive(Debug, Clone)]
struct Route {
    planes: u64,
    skipped: Vec<(usize, String)>,
}

impl std::fmt::Debug for Composite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Composite")
            .field("name", &self.name)
            .field(
                "planes",
                &self.planes.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The service a command changes (`None`: a command of the whole table).
fn service_of(c: &Command) -> Option<ServiceKey> {
    match c {
        Command::AddService { key, .. }
        | Command::EditService { key, .. }
        | Command::DelService { key } => Some(*key),
        Command::AddDest { service, .. }
        | Command::EditDest { service, .. }
        | Command::DelDest { service, .. }
        | Command::AddLaddr { service, .. }
        | Command::DelLaddr { service, .. } => Some(*service),
        Command::Zero { service } => *service,
        Command::Clear | Command::SetTimeouts { .. } => None,
    }
}

impl Composite {
    /// `planes` under `name` (what `--dataplane` said, e.g. `xdp,sock`).
    pub fn new(name: &'static str, planes: Vec<Box<dyn DataPlane>>) -> Self {
        Composite {
            name,
            planes,
            routes: HashMap::new(),
            skipped: HashMap::new(),
            plan: RefCell::new(HashMap::new()),
            notices: Vec::new(),
        }
    }

    /// Every plane.
    fn all(&self) -> u64 {
        (1u64 << self.planes.len()) - 1
    }

    /// A refusal of one of the planes, naming it (once).
    fn named(plane: &dyn DataPlane, m: String) -> String {
        if m.starts_with(plane.name()) || m.contains(&format!("data plane {}", plane.name())) {
            m
        } else {
            format!("{} data plane: {m}", plane.name())
        }
    }

    /// The first error of `results`, with the others' messages appended.
    fn first_error(
        results: impl Iterator<Item = Result<(), DataPlaneError>>,
    ) -> Result<(), DataPlaneError> {
        let mut out: Option<DataPlaneError> = None;
        for r in results {
            if let Err(e) = r {
                match &mut out {
                    None => out = Some(e),
                    Some(first) => first.message.push_str(&format!("; {e}")),
                }
            }
        }
        out.map_or(Ok(()), Err)
    }

    /// Send `command` to the planes of `mask`.
    fn send(&mut self, mask: u64, command: &Command) -> Result<(), DataPlaneError> {
        let results: Vec<_> = self
            .planes
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, p)| p.apply(command))
            .collect();
        Self::first_error(results.into_iter())
    }

    /// Record that the planes of `route.skipped` do not carry `key`, with a
    /// notice for each that did not skip it already.
    fn note_skips(&mut self, key: ServiceKey, route: &Route) {
        let known = self.skipped.entry(key).or_default();
        for (i, why) in &route.skipped {
            if known.iter().any(|(k, _)| k == i) {
                continue;
            }
            known.push((*i, why.clone()));
            let carried: Vec<&str> = self
                .planes
                .iter()
                .enumerate()
                .filter(|(j, _)| route.planes & (1 << j) != 0)
                .map(|(_, p)| p.name())
                .collect();
            self.notices.push(format!(
                "service {} is not carried by the {} data plane, only by {}: {why}",
                crate::owner::service_name(&key),
                self.planes[*i].name(),
                carried.join(",")
            ));
        }
    }
}

impl DataPlane for Composite {
    fn name(&self) -> &'static str {
        self.name
    }

    /// Yes: each of its planes is asked with [`admit_checked`], so a
    /// service with source ranges goes only to the planes that enforce them.
    fn enforces_source_ranges(&self) -> bool {
        true
    }

    /// The command goes to its service's planes (see [`Composite`]); an
    /// error of one does not keep it from the others (each converges on
    /// its own, as a single plane does).
    fn apply(&mut self, command: &Command) -> Result<(), DataPlaneError> {
        let Some(key) = service_of(command) else {
            if matches!(command, Command::Clear) {
                self.routes.clear();
                self.skipped.clear();
            }
            return self.send(self.all(), command);
        };
        let planned = self.plan.borrow().get(&key).cloned();
        match command {
            Command::AddService { .. } => {
                // Planned by admit_all; else (not asked first) whichever
                // planes admit the command itself.
                let route = planned.unwrap_or_else(|| {
                    let mut r = Route {
                        planes: 0,
                        skipped: Vec::new(),
                    };
                    for (i, p) in self.planes.iter().enumerate() {
                        match admit_checked(p.as_ref(), command) {
                            Ok(()) => r.planes |= 1 << i,
                            Err(m) => r.skipped.push((i, Self::named(p.as_ref(), m))),
                        }
                    }
                    r
                });
                self.routes.insert(key, route.planes);
                self.skipped.remove(&key);
                self.note_skips(key, &route);
                self.send(route.planes, command)
            }
            Command::DelService { .. } => {
                let mask = self.routes.remove(&key).unwrap_or(self.all());
                self.skipped.remove(&key);
                self.send(mask, command)
            }
            _ => {
                let mut mask = self.routes.get(&key).copied().unwrap_or(self.all());
                let mut out = Ok(());
                if let Some(route) = planned {
                    let off = mask & !route.planes;
                    if off != 0 {
                        // A change this plane refuses: off it, before the
                        // change reaches the others.
                        out = self.send(off, &Command::DelService { key });
                        mask &= route.planes;
                        self.routes.insert(key, mask);
                        self.note_skips(key, &route);
                    }
                }
                Self::first_error([out, self.send(mask, command)].into_iter())
            }
        }
    }

    /// Admitted when any plane admits it (the routing is
    /// [`Composite::admit_all`]'s): otherwise each plane's reason.
    fn admit(&self, command: &Command) -> Result<(), String> {
        let mut why = Vec::new();
        for p in &self.planes {
            match admit_checked(p.as_ref(), command) {
                Ok(()) => return Ok(()),
                Err(m) => why.push(Self::named(p.as_ref(), m)),
            }
        }
        Err(refusal(why))
    }

    /// Each service's commands (with any `-C` of the request) are put to
    /// each plane that may carry it (every plane for a new service, its
    /// planes for a live one): the planes that admit them carry it. A
    /// service no plane admits refuses the request, with every plane's
    /// reason; so does a command of no service that any plane refuses.
    fn admit_all(&self, ipvs: &Ipvs, commands: &[Command]) -> Result<(), (usize, String)> {
        let mut order: Vec<ServiceKey> = Vec::new();
        let mut groups: HashMap<ServiceKey, Vec<usize>> = HashMap::new();
        let mut global = Vec::new();
        let mut clears = Vec::new();
        for (i, c) in commands.iter().enumerate() {
            match service_of(c) {
                Some(k) => groups
                    .entry(k)
                    .or_insert_with(|| {
                        order.push(k);
                        Vec::new()
                    })
                    .push(i),
                None => {
                    global.push(i);
                    if matches!(c, Command::Clear) {
                        clears.push(i);
                    }
                }
            }
        }
        let pick =
            |idx: &[usize]| -> Vec<Command> { idx.iter().map(|&i| commands[i].clone()).collect() };
        let globals = pick(&global);
        for p in &self.planes {
            p.admit_all(ipvs, &globals)
                .map_err(|(j, m)| (global[j], Self::named(p.as_ref(), m)))?;
        }
        let mut plan = HashMap::new();
        for key in order {
            let mut idx = groups.remove(&key).unwrap_or_default();
            let fresh = !clears.is_empty()
                || idx
                    .iter()
                    .any(|&i| matches!(commands[i], Command::DelService { .. }));
            if !clears.is_empty() {
                idx.extend(&clears);
                idx.sort_unstable();
            }
            let candidates = match self.routes.get(&key) {
                Some(&mask) if !fresh => mask,
                _ => self.all(),
            };
            let sub = pick(&idx);
            let mut route = Route {
                planes: 0,
                skipped: Vec::new(),
            };
            let mut first = usize::MAX;
            for (i, p) in self.planes.iter().enumerate() {
                if candidates & (1 << i) == 0 {
                    continue;
                }
                match admit_all_checked(p.as_ref(), ipvs, &sub) {
                    Ok(()) => route.planes |= 1 << i,
                    Err((j, m)) => {
                        first = first.min(idx[j]);
                        route.skipped.push((i, Self::named(p.as_ref(), m)));
                    }
                }
            }
            if route.planes == 0 {
                let why = route.skipped.into_iter().map(|(_, m)| m).collect();
                return Err((first, refusal(why)));
            }
            plan.insert(key, route);
        }
        *self.plan.borrow_mut() = plan;
        Ok(())
    }

    fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notices)
    }

    fn services_skipped(&self) -> Vec<(&'static str, u64)> {
        let mut n = vec![0u64; self.planes.len()];
        for skips in self.skipped.values() {
            for (i, _) in skips {
                n[*i] += 1;
            }
        }
        self.planes.iter().map(|p| p.name()).zip(n).collect()
    }

    fn report(&mut self, now: Instant, ipvs: &mut Ipvs) {
        for p in &mut self.planes {
            p.report(now, ipvs);
        }
    }

    fn load_synced(
        &mut self,
        ipvs: &Ipvs,
        flow: &rvs_core::ipvs::MirroredConn,
    ) -> Result<(), DataPlaneError> {
        let results: Vec<_> = self
            .planes
            .iter_mut()
            .map(|p| p.load_synced(ipvs, flow))
            .collect();
        Self::first_error(results.into_iter())
    }

    fn attach(&mut self, director: DirectorHandle) {
        for p in &mut self.planes {
            p.attach(director.clone());
        }
    }

    /// Done once every asynchronous plane is.
    fn applied(&self) -> Option<Applied> {
        let tickets: Vec<Applied> = self.planes.iter().filter_map(|p| p.applied()).collect();
        (!tickets.is_empty()).then(|| Applied::all(tickets))
    }

    fn handover_sockets(&self) -> Result<Vec<(ServiceKey, OwnedFd)>, DataPlaneError> {
        let mut out = Vec::new();
        for p in &self.planes {
            out.extend(p.handover_sockets()?);
        }
        Ok(out)
    }

    fn release_handed(&mut self) -> Vec<ServiceKey> {
        self.planes
            .iter_mut()
            .flat_map(|p| p.release_handed())
            .collect()
    }

    fn retire(&mut self) {
        for p in &mut self.planes {
            p.retire();
        }
    }

    fn live(&self) -> u64 {
        self.planes.iter().map(|p| p.live()).sum()
    }

    fn abort_live(&mut self) {
        for p in &mut self.planes {
            p.abort_live();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::ipvs::{CtlError, IpvsConfig};
    use std::sync::{Arc, Mutex};

    /// A plane that carries FULLNAT only from a pool.
    struct Pooled;
    impl DataPlane for Pooled {
        fn name(&self) -> &'static str {
            "pooled"
        }
        fn apply(&mut self, _: &Command) -> Result<(), DataPlaneError> {
            Ok(())
        }
        fn admit_all(&self, ipvs: &Ipvs, c: &[Command]) -> Result<(), (usize, String)> {
            check_fullnat_pools(ipvs, c)
        }
    }

    #[test]
    fn fullnat_without_a_pool_is_refused_and_changes_nothing() {
        use crate::state::Controller;
        use rvs_core::model::{
            AddrFamily, DestConfig, ForwardMethod, LocalAddrRange, Protocol, ServiceConfig,
        };
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
        };
        let add = Command::AddService {
            key,
            config: ServiceConfig::new(AddrFamily::Inet),
        };
        let fnat = Command::AddDest {
            service: key,
            dest: DestConfig::new("10.1.0.2".parse().unwrap(), 80).forward(ForwardMethod::FullNat),
        };
        let laddr = LocalAddrRange::parse("10.2.0.1-3").unwrap();
        let pool = Command::AddLaddr {
            service: key,
            laddr,
        };
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(Pooled));
        let e = ctl.exec(&[add.clone(), fnat.clone()], true).unwrap_err();
        assert_eq!(e.index, 1);
        assert!(
            matches!(&e.error, CtlError::Unsupported(m) if m.contains("--add-laddr")),
            "{e}"
        );
        assert_eq!(ctl.ipvs().services().count(), 0);
        // The pool first, in the same request: admitted.
        ctl.exec(&[add, pool, fnat], true).unwrap();
        let del = Command::DelLaddr {
            service: key,
            laddr,
        };
        let e = ctl.exec(std::slice::from_ref(&del), false).unwrap_err();
        assert!(matches!(&e.error, CtlError::Unsupported(m) if m.contains("last local address")));
        assert_eq!(ctl.ipvs().service(&key).unwrap().laddrs(), &[laddr]);
        // Once the FULLNAT real server goes, so may the pool.
        let deldest = Command::DelDest {
            service: key,
            addr: "10.1.0.2".parse().unwrap(),
            port: 80,
        };
        ctl.exec(&[deldest, del], true).unwrap();
        assert!(ctl.ipvs().service(&key).unwrap().laddrs().is_empty());
    }

    /// A plane that records what it is given and refuses services on the
    /// ports of `refuse` (and, with `no_pools`, local addresses, as the sock
    /// plane does); its commands are carried out when `done` says so.
    struct Rec {
        name: &'static str,
        got: Arc<Mutex<Vec<Command>>>,
        refuse: &'static [u16],
        no_pools: bool,
        /// Whether it enforces source ranges.
        enforces: bool,
        sent: u64,
        done: Arc<AtomicU64>,
    }
    impl DataPlane for Rec {
        fn name(&self) -> &'static str {
            self.name
        }
        fn enforces_source_ranges(&self) -> bool {
            self.enforces
        }
        fn apply(&mut self, c: &Command) -> Result<(), DataPlaneError> {
            self.got.lock().unwrap().push(c.clone());
            self.sent += 1;
            Ok(())
        }
        fn admit(&self, c: &Command) -> Result<(), String> {
            match c {
                Command::AddService {
                    key: ServiceKey::Addr { port, .. },
                    ..
                } if self.refuse.contains(port) => Err(format!("port {port} is not carried")),
                Command::AddLaddr { .. } if self.no_pools => Err("no pools here".into()),
                _ => Ok(()),
            }
        }
        fn applied(&self) -> Option<Applied> {
            Some(Applied::new(self.sent, self.done.clone()))
        }
    }

    type Got = Arc<Mutex<Vec<Command>>>;

    fn rec(
        name: &'static str,
        refuse: &'static [u16],
        no_pools: bool,
    ) -> (Rec, Got, Arc<AtomicU64>) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(AtomicU64::new(0));
        let r = Rec {
            name,
            got: got.clone(),
            refuse,
            no_pools,
            enforces: false,
            sent: 0,
            done: done.clone(),
        };
        (r, got, done)
    }

    fn svc(port: u16) -> ServiceKey {
        use rvs_core::model::Protocol;
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port,
        }
    }

    fn add(port: u16) -> Command {
        use rvs_core::model::{AddrFamily, ServiceConfig};
        Command::AddService {
            key: svc(port),
            config: ServiceConfig::new(AddrFamily::Inet),
        }
    }

    fn dest(port: u16) -> Command {
        use rvs_core::model::DestConfig;
        Command::AddDest {
            service: svc(port),
            dest: DestConfig::new("10.1.0.2".parse().unwrap(), 8080),
        }
    }

    /// Source ranges fail closed: a plane that does not enforce them
    /// refuses a service that has them (and nothing changes); in a
    /// Composite the service goes to the planes that enforce them only:
    /// in the Cilium-like `sock,xdp` (both enforce them: node-local clients
    /// at connect(), the wire in the program) to both.
    #[test]
    fn source_ranges_go_only_to_planes_that_enforce_them() {
        use crate::state::Controller;
        use rvs_core::model::{AddrFamily, ServiceConfig, SourceRange};
        let ranged = |port| Command::AddService {
            key: svc(port),
            config: ServiceConfig {
                source_ranges: vec![SourceRange::new("10.81.0.0".parse().unwrap(), 24).unwrap()],
                ..ServiceConfig::new(AddrFamily::Inet)
            },
        };
        let (open, got, _) = rec("open", &[], false);
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(open));
        let e = ctl.exec(&[ranged(80), dest(80)], true).unwrap_err();
        assert!(
            matches!(&e.error, CtlError::Unsupported(m)
                if m.contains("10.81.0.0/24") && m.contains("not enforced by the open data plane")),
            "{e}"
        );
        assert_eq!(ctl.ipvs().services().count(), 0);
        assert!(got.lock().unwrap().is_empty());
        ctl.exec(&[add(80)], true).unwrap();

        let ports = |g: &Got| -> Vec<u16> {
            g.lock()
                .unwrap()
                .iter()
                .filter_map(|c| match c {
                    Command::AddService { key, .. } => Some(key.port()),
                    _ => None,
                })
                .collect()
        };
        let (o, got_o, _) = rec("open", &[], false);
        let (mut p, got_p, _) = rec("proxy", &[], false);
        p.enforces = true;
        let both = Composite::new("open,proxy", vec![Box::new(o), Box::new(p)]);
        assert!(both.enforces_source_ranges());
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(both));
        ctl.exec(&[ranged(80), dest(80), add(81)], true).unwrap();
        assert_eq!(ports(&got_o), vec![81], "the ranged service kept off open");
        assert_eq!(ports(&got_p), vec![80, 81]);
        assert_eq!(got_p.lock().unwrap().len(), 3, "its real server with it");

        // sock and xdp both enforce them: the service goes to both.
        let (mut s, got_s, _) = rec("sock", &[], false);
        let (mut x, got_x, _) = rec("xdp", &[], false);
        s.enforces = true;
        x.enforces = true;
        let cilium = Composite::new("sock,xdp", vec![Box::new(s), Box::new(x)]);
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(cilium));
        ctl.exec(&[ranged(80), dest(80)], true).unwrap();
        for g in [&got_s, &got_x] {
            assert_eq!(ports(g), vec![80]);
            assert_eq!(g.lock().unwrap().len(), 2, "its real server with it");
        }
    }

    /// `--dataplane xdp,sock`: a service goes to the planes that admit it,
    /// its real servers with it; a service no plane admits is refused with
    /// each plane's reason and changes nothing; a skip is reported once and
    /// counted; the ticket is done only when every plane has carried out
    /// what it was given.
    #[test]
    fn composite_routes_each_service_to_the_planes_that_admit_it() {
        use crate::state::Controller;
        let (a, got_a, done_a) = rec("xdp", &[81, 83], false);
        let (b, got_b, done_b) = rec("sock", &[82, 83], true);
        let both = Composite::new("xdp,sock", vec![Box::new(a), Box::new(b)]);
        assert_eq!(both.name(), "xdp,sock");
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(both));
        // Neither plane admits the second service: nothing changes.
        let e = ctl.exec(&[add(80), add(83)], true).unwrap_err();
        assert_eq!(e.index, 1);
        assert!(
            matches!(&e.error, CtlError::Unsupported(m) if m == "no data plane can carry it: \
                xdp data plane: port 83 is not carried; sock data plane: port 83 is not carried"),
            "{e}"
        );
        assert_eq!(ctl.ipvs().services().count(), 0);
        assert!(got_a.lock().unwrap().is_empty());
        assert!(got_b.lock().unwrap().is_empty());
        // One plane each skips 81 and 82: the other carries it, with its
        // real servers; 80 goes to both, in order.
        ctl.exec(
            &[add(80), dest(80), add(81), dest(81), add(82), dest(82)],
            true,
        )
        .unwrap();
        assert_eq!(ctl.ipvs().services().count(), 3);
        assert_eq!(
            *got_a.lock().unwrap(),
            vec![add(80), dest(80), add(82), dest(82)]
        );
        assert_eq!(
            *got_b.lock().unwrap(),
            vec![add(80), dest(80), add(81), dest(81)]
        );
        let notices = ctl.take_plane_errors();
        assert_eq!(
            notices,
            vec![
                "service TCP 10.0.0.1:81 is not carried by the xdp data plane, only by sock: \
                 xdp data plane: port 81 is not carried"
                    .to_owned(),
                "service TCP 10.0.0.1:82 is not carried by the sock data plane, only by xdp: \
                 sock data plane: port 82 is not carried"
                    .to_owned(),
            ]
        );
        assert!(ctl.take_plane_errors().is_empty(), "reported once");
        assert_eq!(ctl.plane_services_skipped(), vec![("xdp", 1), ("sock", 1)]);
        let ticket = ctl.plane_applied().expect("both planes are asynchronous");
        assert!(!ticket.done());
        done_a.store(4, Ordering::Release);
        assert!(!ticket.done(), "the sock plane has not carried it out yet");
        done_b.store(4, Ordering::Release);
        assert!(ticket.done());
        // A delete follows the service's planes.
        got_a.lock().unwrap().clear();
        got_b.lock().unwrap().clear();
        let del = Command::DelService { key: svc(82) };
        ctl.exec(std::slice::from_ref(&del), false).unwrap();
        assert_eq!(*got_a.lock().unwrap(), vec![del]);
        assert!(got_b.lock().unwrap().is_empty());
        assert_eq!(ctl.plane_services_skipped(), vec![("xdp", 1), ("sock", 0)]);
    }

    /// A change of a live service that one of its planes refuses takes it
    /// off that plane (reported), and later commands go to the others only;
    /// when no plane of the service admits the change, it is refused.
    #[test]
    fn composite_takes_a_service_off_a_plane_that_refuses_its_change() {
        use crate::state::Controller;
        use rvs_core::model::LocalAddrRange;
        let (a, got_a, _) = rec("xdp", &[], false);
        let (b, got_b, _) = rec("sock", &[], true);
        let mut ctl = Controller::new(
            IpvsConfig::default(),
            Box::new(Composite::new("xdp,sock", vec![Box::new(a), Box::new(b)])),
        );
        ctl.exec(&[add(80), add(81)], true).unwrap();
        got_a.lock().unwrap().clear();
        got_b.lock().unwrap().clear();
        let pool = Command::AddLaddr {
            service: svc(80),
            laddr: LocalAddrRange::parse("10.2.0.1").unwrap(),
        };
        ctl.exec(&[pool.clone(), dest(80), dest(81)], true).unwrap();
        assert_eq!(*got_a.lock().unwrap(), vec![pool, dest(80), dest(81)]);
        assert_eq!(
            *got_b.lock().unwrap(),
            vec![Command::DelService { key: svc(80) }, dest(81)]
        );
        assert_eq!(ctl.take_plane_errors().len(), 1);
        assert_eq!(ctl.plane_services_skipped(), vec![("xdp", 0), ("sock", 1)]);
    }

    /// A single plane's refusal still refuses: the composite of one plane
    /// that refuses is that plane's refusal, word for word.
    #[test]
    fn composite_refusal_of_one_plane_keeps_its_words() {
        use crate::state::Controller;
        let (a, got_a, _) = rec("xdp", &[81], false);
        let mut ctl = Controller::new(
            IpvsConfig::default(),
            Box::new(Composite::new("xdp", vec![Box::new(a)])),
        );
        let e = ctl.exec(&[add(81)], false).unwrap_err();
        assert!(
            matches!(&e.error, CtlError::Unsupported(m) if m == "xdp data plane: port 81 is not carried"),
            "{e}"
        );
        assert!(got_a.lock().unwrap().is_empty());
    }

    #[test]
    fn handle_lends_the_director_or_reports_none() {
        let shared = Arc::new(Mutex::new(Ipvs::new(IpvsConfig::default())));
        let s = shared.clone();
        let h = DirectorHandle::new(move |f| {
            if let Ok(mut ipvs) = s.lock() {
                f(&mut ipvs, Instant::from_secs(7));
            }
        });
        assert_eq!(
            h.with(|ipvs, now| (ipvs.services().count(), now)),
            Some((0, Instant::from_secs(7)))
        );
        let gone = DirectorHandle::new(|_| {});
        assert_eq!(gone.with(|_, _| 1), None);
    }
}
