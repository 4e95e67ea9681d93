//! The desired service table, differences between tables, and applying
//! changes atomically.
//!
//! A configuration source (keepalived.conf, an ipvsadm-save file, a batch of
//! `rvsadm -R` lines) yields a list of [`ServiceDef`]s. [`Controller`] owns
//! the live director and the data plane and guarantees:
//! * a request that fails changes nothing (it is first tried on a scratch
//!   copy when it holds more than one command);
//! * a reload applies only the difference ([`diff`]): services and real
//!   servers that did not change keep their connections, counters and
//!   scheduler state;
//! * every accepted change reaches the data plane, in order.

use std::collections::HashMap;
use std::fmt;

use rvs_core::ipvs::{CtlError, Ipvs, IpvsConfig};
use rvs_core::model::{DestConfig, LocalAddrRange, ServiceConfig, ServiceKey};

use crate::dataplane::DataPlane;
use crate::protocol::Command;

/// A service as a configuration source states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceDef {
    /// Identity.
    pub key: ServiceKey,
    /// Options.
    pub config: ServiceConfig,
    /// Real servers in the order they are added (the last one heads the
    /// kernel-order list).
    pub dests: Vec<DestConfig>,
    /// The FULLNAT local address pool, in the order entries are added
    /// (keepalived's `laddr_group_name`; empty for most services).
    pub laddrs: Vec<LocalAddrRange>,
}

/// A `virtual_server` of keepalived.conf as a definition: its key,
/// options, every configured real server and its local address pool (the
/// spec's health-check and sorry-server parts are not the table's).
impl From<rvs_config::ServiceSpec> for ServiceDef {
    fn from(s: rvs_config::ServiceSpec) -> ServiceDef {
        ServiceDef {
            key: s.key,
            config: s.config,
            dests: s.dests,
            laddrs: s.laddrs,
        }
    }
}

/// The service table the live director holds now, as definitions (real
/// servers in add order), sorted by nothing in particular.
pub fn current_defs(ipvs: &Ipvs) -> Vec<ServiceDef> {
    ipvs.services()
        .map(|s| ServiceDef {
            key: *s.key(),
            config: s.config().clone(),
            dests: s.dests().iter().rev().map(|d| d.config).collect(),
            laddrs: s.laddrs().to_vec(),
        })
        .collect()
}

/// Apply one command to a director.
pub fn apply(ipvs: &mut Ipvs, cmd: &Command) -> Result<(), CtlError> {
    match cmd {
        Command::AddService { key, config } => ipvs.add_service(*key, config.clone()),
        Command::EditService { key, config } => ipvs.edit_service(key, config.clone()),
        Command::DelService { key } => ipvs.del_service(key),
        Command::Clear => {
            ipvs.flush();
            Ok(())
        }
        Command::AddDest { service, dest } => ipvs.add_dest(service, *dest).map(|_| ()),
        Command::EditDest { service, dest } => ipvs.edit_dest(service, *dest),
        Command::DelDest {
            service,
            addr,
            port,
        } => ipvs.del_dest(service, *addr, *port),
        Command::AddLaddr { service, laddr } => ipvs.add_laddr(service, *laddr),
        Command::DelLaddr { service, laddr } => ipvs.del_laddr(service, *laddr),
        Command::Zero { service } => ipvs.zero(service.as_ref()),
        Command::SetTimeouts { tcp, tcpfin, udp } => {
            ipvs.set_timeouts(*tcp, *tcpfin, *udp);
            Ok(())
        }
    }
}

/// Two real servers are the same one when address and port match.
fn dest_id(d: &DestConfig) -> (std::net::IpAddr, u16) {
    (d.addr, d.port)
}

/// What a difference does, for logs and the reload answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiffSummary {
    /// Services added.
    pub services_added: usize,
    /// Services removed.
    pub services_removed: usize,
    /// Services whose options changed.
    pub services_edited: usize,
    /// Real servers added (to services that existed before).
    pub dests_added: usize,
    /// Real servers removed (from services that stay).
    pub dests_removed: usize,
    /// Real servers whose weight, method or thresholds changed.
    pub dests_edited: usize,
}

impl DiffSummary {
    /// Nothing changes.
    pub fn is_empty(&self) -> bool {
        *self == DiffSummary::default()
    }
}

impl fmt::Display for DiffSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "services +{} -{} ~{}, real servers +{} -{} ~{}",
            self.services_added,
            self.services_removed,
            self.services_edited,
            self.dests_added,
            self.dests_removed,
            self.dests_edited
        )
    }
}

/// Real servers of a service in add order, from definitions or from the
/// live list (which the kernel keeps newest first).
#[derive(Clone, Copy)]
enum DestsRef<'a> {
    Defs(&'a [DestConfig]),
    Live(&'a [rvs_core::dest::Dest]),
}

impl<'a> DestsRef<'a> {
    fn len(self) -> usize {
        match self {
            DestsRef::Defs(d) => d.len(),
            DestsRef::Live(d) => d.len(),
        }
    }

    fn get(self, i: usize) -> &'a DestConfig {
        match self {
            DestsRef::Defs(d) => &d[i],
            DestsRef::Live(d) => &d[d.len() - 1 - i].config,
        }
    }

    fn iter(self) -> impl Iterator<Item = &'a DestConfig> {
        (0..self.len()).map(move |i| self.get(i))
    }
}

/// A service table to compare against.
trait View {
    fn lookup(&self, key: &ServiceKey) -> Option<(&ServiceConfig, DestsRef<'_>)>;
    fn laddrs(&self, key: &ServiceKey) -> &[LocalAddrRange];
    fn keys(&self) -> Vec<ServiceKey>;
    fn len(&self) -> usize;
}

impl View for HashMap<&ServiceKey, &ServiceDef> {
    fn lookup(&self, key: &ServiceKey) -> Option<(&ServiceConfig, DestsRef<'_>)> {
        self.get(key).map(|d| (&d.config, DestsRef::Defs(&d.dests)))
    }
    fn laddrs(&self, key: &ServiceKey) -> &[LocalAddrRange] {
        self.get(key).map(|d| &d.laddrs[..]).unwrap_or(&[])
    }
    fn keys(&self) -> Vec<ServiceKey> {
        HashMap::keys(self).map(|k| **k).collect()
    }
    fn len(&self) -> usize {
        HashMap::len(self)
    }
}

impl View for Ipvs {
    fn lookup(&self, key: &ServiceKey) -> Option<(&ServiceConfig, DestsRef<'_>)> {
        self.service(key)
            .map(|s| (s.config(), DestsRef::Live(s.dests())))
    }
    fn laddrs(&self, key: &ServiceKey) -> &[LocalAddrRange] {
        self.service(key).map(|s| s.laddrs()).unwrap_or(&[])
    }
    fn keys(&self) -> Vec<ServiceKey> {
        self.services().map(|s| *s.key()).collect()
    }
    fn len(&self) -> usize {
        self.services().count()
    }
}

/// Same real servers with the same settings. Lists in the same order (the
/// usual case) compare without allocating.
fn same_dests(cur: DestsRef<'_>, target: &[DestConfig]) -> bool {
    if cur.len() != target.len() {
        return false;
    }
    let in_order = match cur {
        DestsRef::Defs(d) => d == target,
        DestsRef::Live(d) => d.iter().rev().map(|x| &x.config).eq(target.iter()),
    };
    if in_order {
        return true;
    }
    let set: HashMap<_, &DestConfig> = cur.iter().map(|d| (dest_id(d), d)).collect();
    target
        .iter()
        .all(|d| set.get(&dest_id(d)).is_some_and(|x| **x == *d))
}

/// A planned change: the commands, their summary, and which target
/// services are new or changed (the only ones that need validating).
struct Plan {
    cmds: Vec<Command>,
    summary: DiffSummary,
    changed: Vec<usize>,
}

/// Compare `target` with `cur`; a service listed twice in `target` is an error.
fn plan(cur: &impl View, target: &[ServiceDef]) -> Result<Plan, ExecError> {
    let mut cmds = Vec::new();
    let mut sum = DiffSummary::default();
    let mut changed = Vec::new();
    // foldhash: service keys come from the operator's file, not from clients.
    let mut seen: std::collections::HashSet<ServiceKey, foldhash::fast::FixedState> =
        std::collections::HashSet::with_capacity_and_hasher(target.len(), Default::default());
    for (index, t) in target.iter().enumerate() {
        if !seen.insert(t.key) {
            return Err(ExecError {
                index,
                error: CtlError::ServiceExists,
            });
        }
    }
    // Every live service the target names is matched; only when some are
    // not is the live table scanned for the ones to remove.
    let mut matched = 0;
    for (index, t) in target.iter().enumerate() {
        let Some((config, dests)) = cur.lookup(&t.key) else {
            cmds.push(Command::AddService {
                key: t.key,
                config: t.config.clone(),
            });
            // The pool before the real servers: a data plane that carries
            // FULLNAT only with a pool admits its real servers after it.
            cmds.extend(t.laddrs.iter().map(|l| Command::AddLaddr {
                service: t.key,
                laddr: *l,
            }));
            cmds.extend(t.dests.iter().map(|d| Command::AddDest {
                service: t.key,
                dest: *d,
            }));
            sum.services_added += 1;
            changed.push(index);
            continue;
        };
        matched += 1;
        let cur_laddrs = cur.laddrs(&t.key);
        let same_laddrs =
            cur_laddrs.len() == t.laddrs.len() && cur_laddrs.iter().all(|l| t.laddrs.contains(l));
        if *config == t.config && same_dests(dests, &t.dests) && same_laddrs {
            continue;
        }
        changed.push(index);
        if *config != t.config {
            cmds.push(Command::EditService {
                key: t.key,
                config: t.config.clone(),
            });
            sum.services_edited += 1;
        }
        // New pool entries before the real servers, removed ones after.
        for l in &t.laddrs {
            if !cur_laddrs.contains(l) {
                cmds.push(Command::AddLaddr {
                    service: t.key,
                    laddr: *l,
                });
            }
        }
        let cd: HashMap<_, &DestConfig> = dests.iter().map(|d| (dest_id(d), d)).collect();
        let td: HashMap<_, &DestConfig> = t.dests.iter().map(|d| (dest_id(d), d)).collect();
        for d in dests.iter() {
            if !td.contains_key(&dest_id(d)) {
                cmds.push(Command::DelDest {
                    service: t.key,
                    addr: d.addr,
                    port: d.port,
                });
                sum.dests_removed += 1;
            }
        }
        for d in &t.dests {
            match cd.get(&dest_id(d)) {
                Some(old) if **old == *d => {}
                Some(_) => {
                    cmds.push(Command::EditDest {
                        service: t.key,
                        dest: *d,
                    });
                    sum.dests_edited += 1;
                }
                None => {
                    cmds.push(Command::AddDest {
                        service: t.key,
                        dest: *d,
                    });
                    sum.dests_added += 1;
                }
            }
        }
        for l in cur_laddrs {
            if !t.laddrs.contains(l) {
                cmds.push(Command::DelLaddr {
                    service: t.key,
                    laddr: *l,
                });
            }
        }
    }
    if matched < cur.len() {
        let removed: Vec<Command> = cur
            .keys()
            .into_iter()
            .filter(|k| !seen.contains(k))
            .map(|key| Command::DelService { key })
            .collect();
        sum.services_removed = removed.len();
        // Removals first: a data plane frees what goes before taking more.
        cmds.splice(0..0, removed);
    }
    Ok(Plan {
        cmds,
        summary: sum,
        changed,
    })
}

/// The commands that turn `current` into `target`, touching nothing that is
/// equal in both. Order: removed services, then per new or changed service
/// (in `target` order) its option edit, removed, edited and added real
/// servers, or for a new one the service and its real servers in add order.
/// A service listed twice in `target` is an error.
pub fn diff(
    current: &[ServiceDef],
    target: &[ServiceDef],
) -> Result<(Vec<Command>, DiffSummary), ExecError> {
    let cur: HashMap<&ServiceKey, &ServiceDef> = current.iter().map(|s| (&s.key, s)).collect();
    plan(&cur, target).map(|p| (p.cmds, p.summary))
}

/// A failed request: which command and why. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct ExecError {
    /// Index of the failing command in the request (for a reload: of the
    /// failing service definition).
    pub index: usize,
    /// The director's error (its text is what ipvsadm prints).
    pub error: CtlError,
}

/// Build a director holding exactly `defs`, or say which definition is
/// invalid. Used to validate a whole configuration before touching the live
/// state.
pub fn build(defs: &[ServiceDef], config: IpvsConfig) -> Result<Ipvs, ExecError> {
    let mut ipvs = Ipvs::new(config);
    for (index, s) in defs.iter().enumerate() {
        ipvs.add_service_with(s.key, s.config.clone(), &s.dests)
            .map_err(|error| ExecError { index, error })?;
        for l in &s.laddrs {
            ipvs.add_laddr(&s.key, *l)
                .map_err(|error| ExecError { index, error })?;
        }
    }
    Ok(ipvs)
}

/// The live director plus its data plane.
pub struct Controller {
    ipvs: Ipvs,
    plane: Box<dyn DataPlane>,
    config: IpvsConfig,
    plane_errors: Vec<String>,
    /// Bumped by every change to what [`Controller::table_commands`]
    /// returns ([`Controller::generation`]).
    generation: u64,
    /// Which source states each service ([`crate::owner`]).
    pub(crate) owners: HashMap<ServiceKey, crate::owner::Owner>,
}

impl fmt::Debug for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("plane", &self.plane.name())
            .finish_non_exhaustive()
    }
}

/// Whether `cmd`, applied, changes the services or real servers (timeouts
/// are compared before and after instead: `--set 0 0 0` changes nothing).
fn changes_table(cmd: &Command) -> bool {
    match cmd {
        Command::AddService { .. }
        | Command::EditService { .. }
        | Command::DelService { .. }
        | Command::Clear
        | Command::AddDest { .. }
        | Command::EditDest { .. }
        | Command::DelDest { .. }
        | Command::AddLaddr { .. }
        | Command::DelLaddr { .. } => true,
        Command::Zero { .. } | Command::SetTimeouts { .. } => false,
    }
}

/// Scratch copies only need room for the service table, not for traffic.
fn scratch_config(config: IpvsConfig) -> IpvsConfig {
    IpvsConfig {
        conn_capacity: 16,
        preallocate: false,
        ..config
    }
}

impl Controller {
    /// An empty director with this configuration, driving `plane`.
    pub fn new(config: IpvsConfig, plane: Box<dyn DataPlane>) -> Self {
        Controller {
            ipvs: Ipvs::new(config),
            plane,
            config,
            plane_errors: Vec::new(),
            generation: 0,
            owners: HashMap::new(),
        }
    }

    /// A counter that moves whenever the service table may have changed
    /// (what [`Controller::table_commands`] returns): a service, a real
    /// server or the timeouts added, edited or removed through
    /// [`Controller::submit`] or [`Controller::set_timeouts`]. A request that changes nothing (a
    /// failed command, `-Z`, a reload without a difference, timeouts set to
    /// what they are) leaves it where it was, so a caller that keeps a copy
    /// of the table compares two numbers instead of two tables.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Set the `--set` timeouts (0 leaves one unchanged) outside a command,
    /// as a reload does with its configuration's values.
    pub fn set_timeouts(&mut self, tcp: u32, tcpfin: u32, udp: u32) {
        let before = self.ipvs.timeouts().ipvsadm();
        self.ipvs.set_timeouts(tcp, tcpfin, udp);
        if self.ipvs.timeouts().ipvsadm() != before {
            self.generation += 1;
        }
    }

    /// The live director (read-only: changes go through
    /// [`Controller::submit`] so the data plane sees them).
    pub fn ipvs(&self) -> &Ipvs {
        &self.ipvs
    }

    /// The live director for the packet path and timers (a data plane
    /// driver calls `process`/`expire` through this), not for configuration.
    pub fn ipvs_mut(&mut self) -> &mut Ipvs {
        &mut self.ipvs
    }

    /// The data plane's name.
    pub fn plane_name(&self) -> &'static str {
        self.plane.name()
    }

    /// A ticket for every change applied so far, done once the data plane
    /// has carried them out ([`DataPlane::applied`]); `None` when the data
    /// plane is synchronous.
    pub fn plane_applied(&self) -> Option<crate::dataplane::Applied> {
        self.plane.applied()
    }

    /// Apply commands. With `atomic` (or more than one command) they are
    /// first tried on a scratch copy of the service table, so a failure at
    /// command `i` leaves the live state untouched. Without `atomic`, a
    /// single command is applied directly: the core's operations are
    /// themselves all-or-nothing.
    pub(crate) fn exec(&mut self, cmds: &[Command], atomic: bool) -> Result<(), ExecError> {
        crate::dataplane::admit_all_checked(self.plane.as_ref(), &self.ipvs, cmds).map_err(
            |(index, m)| ExecError {
                index,
                error: CtlError::Unsupported(m),
            },
        )?;
        if atomic || cmds.len() > 1 {
            let defs = current_defs(&self.ipvs);
            let mut scratch = build(&defs, scratch_config(self.config)).map_err(|e| ExecError {
                index: 0,
                error: e.error,
            })?;
            for (index, c) in cmds.iter().enumerate() {
                apply(&mut scratch, c).map_err(|error| ExecError { index, error })?;
            }
        }
        for (index, c) in cmds.iter().enumerate() {
            let timeouts = self.ipvs.timeouts().ipvsadm();
            apply(&mut self.ipvs, c).map_err(|error| ExecError { index, error })?;
            if changes_table(c) || self.ipvs.timeouts().ipvsadm() != timeouts {
                self.generation += 1;
            }
            self.notify(c);
        }
        Ok(())
    }

    /// Make the live table equal `target` (a reload): validate `target` as a
    /// whole first, then apply only the difference. On error nothing changed.
    pub(crate) fn replace(&mut self, target: &[ServiceDef]) -> Result<DiffSummary, ExecError> {
        let Plan {
            cmds,
            summary,
            changed,
        } = plan(&self.ipvs, target)?;
        if let Err((i, m)) =
            crate::dataplane::admit_all_checked(self.plane.as_ref(), &self.ipvs, &cmds)
        {
            let key = cmds[i].service_key();
            return Err(ExecError {
                index: key
                    .and_then(|k| target.iter().position(|t| t.key == *k))
                    .unwrap_or(0),
                error: CtlError::Unsupported(m),
            });
        }
        // Services do not constrain each other, and unchanged ones are
        // already live: validating the new or changed ones on their own
        // is validating the whole table.
        for &index in &changed {
            let t = &target[index];
            let mut scratch = Ipvs::new(scratch_config(self.config));
            scratch
                .add_service_with(t.key, t.config.clone(), &t.dests)
                .map_err(|error| ExecError { index, error })?;
            for l in &t.laddrs {
                scratch
                    .add_laddr(&t.key, *l)
                    .map_err(|error| ExecError { index, error })?;
            }
        }
        // Validated: from here on the commands apply (a difference at all
        // is a change of the table).
        if !cmds.is_empty() {
            self.generation += 1;
        }
        // Fast path for new services: one scheduler build per service.
        let mut i = 0;
        while i < cmds.len() {
            if let Command::AddService { key, config } = &cmds[i] {
                let n = cmds[i + 1..]
                    .iter()
                    .take_while(|c| {
                        matches!(c, Command::AddDest { service, .. }
                            | Command::AddLaddr { service, .. } if service == key)
                    })
                    .count();
                let dests: Vec<DestConfig> = cmds[i + 1..=i + n]
                    .iter()
                    .filter_map(|c| match c {
                        Command::AddDest { dest, .. } => Some(*dest),
                        _ => None,
                    })
                    .collect();
                self.ipvs
                    .add_service_with(*key, config.clone(), &dests)
                    .map_err(|error| ExecError { index: i, error })?;
                for (j, c) in cmds[i + 1..=i + n].iter().enumerate() {
                    if let Command::AddLaddr { service, laddr } = c {
                        self.ipvs
                            .add_laddr(service, *laddr)
                            .map_err(|error| ExecError {
                                index: i + 1 + j,
                                error,
                            })?;
                    }
                }
                for c in &cmds[i..=i + n] {
                    self.notify(c);
                }
                i += n + 1;
            } else {
                apply(&mut self.ipvs, &cmds[i]).map_err(|error| ExecError { index: i, error })?;
                self.notify(&cmds[i]);
                i += 1;
            }
        }
        Ok(summary)
    }

    /// Give the data plane its way back to the director (see
    /// [`DataPlane::attach`]); call before the first change.
    pub fn attach_director(&mut self, director: crate::dataplane::DirectorHandle) {
        self.plane.attach(director);
    }

    /// Periodic work at `now`: let the data plane report connections and
    /// counters, expire connections, run the rate estimators.
    pub fn tick(&mut self, now: rvs_core::time::Instant) {
        self.plane.report(now, &mut self.ipvs);
        self.ipvs.expire(now);
        self.ipvs.update_estimators(now);
    }

    /// Enter a connection or template another director synced here: into
    /// the director's table, then into the data plane's own table if it
    /// keeps one ([`DataPlane::load_synced`]). `None` when the director has
    /// no room or no such real server.
    pub fn enter_synced(
        &mut self,
        now: rvs_core::time::Instant,
        flow: &rvs_core::ipvs::MirroredConn,
    ) -> Option<rvs_core::conn::ConnId> {
        let id = self.ipvs.mirror_conn(now, flow)?;
        if let Err(e) = self.plane.load_synced(&self.ipvs, flow) {
            self.plane_errors.push(e.to_string());
        }
        Some(id)
    }

    /// The data plane's sockets for a daemon taking over
    /// ([`DataPlane::handover_sockets`]).
    pub fn handover_sockets(
        &self,
    ) -> Result<Vec<(ServiceKey, std::os::fd::OwnedFd)>, crate::dataplane::DataPlaneError> {
        self.plane.handover_sockets()
    }

    /// Close handed sockets no service claimed ([`DataPlane::release_handed`]).
    pub fn release_handed(&mut self) -> Vec<ServiceKey> {
        self.plane.release_handed()
    }

    /// Stop taking new traffic; established connections run on
    /// ([`DataPlane::retire`]).
    pub fn retire_plane(&mut self) {
        self.plane.retire();
    }

    /// Connections and flows the data plane still carries ([`DataPlane::live`]).
    pub fn plane_live(&self) -> u64 {
        self.plane.live()
    }

    /// End what the data plane still carries ([`DataPlane::abort_live`]).
    pub fn abort_plane(&mut self) {
        self.plane.abort_live();
    }

    /// The live table as commands that rebuild it on an empty director:
    /// the timeouts, then each service followed by its real servers in add
    /// order (what a daemon hands to the one taking it over).
    pub fn table_commands(&self) -> Vec<Command> {
        let (tcp, tcpfin, udp) = self.ipvs.timeouts().ipvsadm();
        let mut out = vec![Command::SetTimeouts { tcp, tcpfin, udp }];
        for d in current_defs(&self.ipvs) {
            out.push(Command::AddService {
                key: d.key,
                config: d.config,
            });
            out.extend(d.laddrs.into_iter().map(|laddr| Command::AddLaddr {
                service: d.key,
                laddr,
            }));
            out.extend(d.dests.into_iter().map(|dest| Command::AddDest {
                service: d.key,
                dest,
            }));
        }
        out
    }

    /// Data plane errors since the last call, and the data plane's notices
    /// ([`DataPlane::take_notices`]: a service a plane skips), for the daemon
    /// to log as warnings.
    pub fn take_plane_errors(&mut self) -> Vec<String> {
        let mut out = std::mem::take(&mut self.plane_errors);
        out.extend(self.plane.take_notices());
        out
    }

    /// Each plane's count of the live services it skips
    /// ([`DataPlane::services_skipped`]; empty for a single plane).
    pub fn plane_services_skipped(&self) -> Vec<(&'static str, u64)> {
        self.plane.services_skipped()
    }

    fn notify(&mut self, cmd: &Command) {
        // A data plane error does not undo the model change; the data plane
        // is expected to converge. The daemon logs it.
        if let Err(e) = self.plane.apply(cmd) {
            self.plane_errors.push(e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::{DataPlaneError, NoDataPlane};
    use crate::testutil::{Picky, tcp_key};
    use proptest::prelude::*;
    use rvs_core::ipvs::{L4, Packet, Verdict};
    use rvs_core::model::AddrFamily;
    use rvs_core::sched::Scheduler;
    use rvs_core::state::TcpFlags;
    use rvs_core::time::Instant;
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::{Arc, Mutex};

    fn key(port: u16) -> ServiceKey {
        tcp_key(Ipv4Addr::new(10, 0, 0, 1), port)
    }

    fn rs(i: u8) -> DestConfig {
        DestConfig::new(IpAddr::V4(Ipv4Addr::new(192, 168, 0, i)), 80)
    }

    fn def(port: u16, sched: &str, dests: &[u8]) -> ServiceDef {
        ServiceDef {
            key: key(port),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(sched.parse().unwrap()),
            dests: dests.iter().map(|&i| rs(i)).collect(),
            laddrs: Vec::new(),
        }
    }

    /// Records what the data plane was told.
    struct Recorder(Arc<Mutex<Vec<Command>>>);
    impl DataPlane for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn apply(&mut self, c: &Command) -> Result<(), DataPlaneError> {
            self.0
                .lock()
                .map_err(|_| DataPlaneError {
                    plane: "recorder",
                    message: "poisoned".into(),
                })?
                .push(c.clone());
            Ok(())
        }
    }

    fn normalized(mut defs: Vec<ServiceDef>) -> Vec<(String, Vec<String>)> {
        defs.sort_by_key(|d| format!("{:?}", d.key));
        defs.into_iter()
            .map(|d| {
                let mut ds: Vec<String> = d.dests.iter().map(|x| format!("{x:?}")).collect();
                ds.sort();
                let mut ls = d.laddrs.clone();
                ls.sort();
                (format!("{:?}{:?}{ls:?}", d.key, d.config), ds)
            })
            .collect()
    }

    fn syn(ctl: &mut Controller, client: u8, port: u16) -> Verdict {
        let p = Packet {
            src: IpAddr::V4(Ipv4Addr::new(1, 1, 1, client)),
            sport: 1000,
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dport: port,
            l4: L4::Tcp(TcpFlags::SYN),
            fwmark: 0,
            len: 60,
            payload: b"",
        };
        ctl.ipvs_mut().process(Instant::ZERO, &p)
    }

    /// A daemon taken over hands its table as commands; they rebuild the
    /// same table, real-server order and timeouts included.
    #[test]
    fn table_commands_rebuild_the_table() {
        let mut old = Controller::new(IpvsConfig::default(), Box::new(NoDataPlane));
        old.replace(&[def(80, "wrr", &[3, 1, 2]), def(443, "mh", &[4])])
            .unwrap();
        old.exec(
            &[Command::SetTimeouts {
                tcp: 60,
                tcpfin: 7,
                udp: 9,
            }],
            false,
        )
        .unwrap();
        let table = old.table_commands();
        let mut new = Controller::new(IpvsConfig::default(), Box::new(NoDataPlane));
        new.exec(&table, true).unwrap();
        assert_eq!(
            normalized(current_defs(new.ipvs())),
            normalized(current_defs(old.ipvs()))
        );
        let order = |c: &Controller| {
            current_defs(c.ipvs())
                .into_iter()
                .find(|d| d.key == key(80))
                .map(|d| d.dests)
        };
        assert_eq!(order(&new), order(&old));
        assert_eq!(new.ipvs().timeouts().ipvsadm(), (60, 7, 9));
    }

    #[test]
    fn diff_touches_only_what_changed() {
        let a = vec![
            def(80, "rr", &[1, 2, 3]),
            def(81, "wlc", &[1]),
            def(82, "rr", &[1]),
        ];
        let mut b = vec![
            def(80, "rr", &[1, 3, 4]),
            def(81, "wrr", &[1]),
            def(83, "rr", &[5, 6]),
        ];
        b[0].dests[1] = rs(3).weight(7);
        let (cmds, sum) = diff(&a, &b).unwrap();
        assert_eq!(
            sum,
            DiffSummary {
                services_added: 1,
                services_removed: 1,
                services_edited: 1,
                dests_added: 1,
                dests_removed: 1,
                dests_edited: 1
            }
        );
        assert_eq!(cmds.len(), 1 + 1 + 1 + 1 + 1 + 1 + 2);
        assert_eq!(diff(&b, &b).unwrap().0, vec![]);
    }

    #[test]
    fn reload_keeps_connections_and_counters_of_unchanged_parts() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(Recorder(log.clone())));
        ctl.replace(&[def(80, "rr", &[1, 2]), def(81, "rr", &[1])])
            .unwrap();
        for c in 0..10 {
            assert!(matches!(syn(&mut ctl, c, 80), Verdict::Forward(_)));
        }
        let conns_before = ctl.ipvs().conns().len();
        let before = |ctl: &Controller, i: u8| {
            let svc = ctl.ipvs().service(&key(80)).unwrap();
            svc.dests()
                .iter()
                .find(|d| d.config.addr == rs(i).addr)
                .map(|d| (d.id, d.active, d.stats.conns))
        };
        let rs1 = before(&ctl, 1).unwrap();
        log.lock().unwrap().clear();

        // One real server added, one removed; the other service untouched.
        let sum = ctl
            .replace(&[def(80, "rr", &[1, 3]), def(81, "rr", &[1])])
            .unwrap();
        assert_eq!(
            (sum.dests_added, sum.dests_removed, sum.services_edited),
            (1, 1, 0)
        );
        assert_eq!(
            before(&ctl, 1),
            Some(rs1),
            "rs1 keeps id, counters and stats"
        );
        assert_eq!(
            ctl.ipvs().conns().len(),
            conns_before,
            "no connection dropped"
        );
        assert_eq!(ctl.ipvs().service(&key(80)).unwrap().stats().conns, 10);
        assert_eq!(
            log.lock().unwrap().len(),
            2,
            "the data plane saw exactly the difference"
        );
        ctl.ipvs().audit().unwrap();
    }

    /// keepalived.conf meets the core's one family rule, opt included: a
    /// real server of the other family behind `lvs_method TUN type opt` is
    /// refused in rvsadm's words, as `rvsadm -a ... --tun-type opt` refuses
    /// it (and `rvsd --check`, which builds the table this way); the same
    /// server behind ipip is legal.
    #[test]
    fn keepalived_conf_real_server_of_the_other_family_behind_opt_is_refused() {
        let defs = |method: &str| -> Vec<ServiceDef> {
            let text = format!(
                "virtual_server 10.0.0.1 80 {{\n protocol TCP\n lvs_method DR\n\
                 real_server 192.168.0.1 80 {{\n }}\n\
                 real_server 2001:db8::2 80 {{\n  lvs_method TUN type {method}\n }}\n}}\n"
            );
            rvs_config::parse_str("k.conf", &text, &rvs_config::LoadOptions::default())
                .unwrap()
                .config
                .lvs_services()
                .unwrap()
                .into_iter()
                .map(ServiceDef::from)
                .collect()
        };
        let e = build(&defs("opt"), IpvsConfig::default()).unwrap_err();
        assert_eq!(e.index, 0);
        assert_eq!(
            e.error,
            CtlError::Invalid(rvs_core::model::FamilyError::OptTunnel.to_string())
        );
        assert!(
            e.error.to_string().ends_with(
                "Different address family is not allowed for --tun-type opt \
                 (the packet is rewritten, not encapsulated)"
            ),
            "{}",
            e.error
        );
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(NoDataPlane));
        assert_eq!(ctl.replace(&defs("opt")).unwrap_err().error, e.error);
        assert_eq!(ctl.ipvs().services().count(), 0, "nothing applied");
        ctl.replace(&defs("ipip")).unwrap();
        assert_eq!(ctl.ipvs().service(&key(80)).unwrap().dests().len(), 2);
    }

    #[test]
    fn bad_reload_and_bad_batch_change_nothing() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(Recorder(log.clone())));
        ctl.replace(&[def(80, "rr", &[1, 2])]).unwrap();
        let snapshot = normalized(current_defs(ctl.ipvs()));
        log.lock().unwrap().clear();

        // A Maglev table size that is not a prime: the scheduler refuses it.
        let mut bad = vec![def(80, "rr", &[1]), def(81, "mh", &[1])];
        bad[1].config.mh_table_size = 4094;
        let e = ctl.replace(&bad).unwrap_err();
        assert_eq!(e.index, 1);
        assert!(matches!(e.error, CtlError::Invalid(_)), "{:?}", e.error);
        bad[1] = def(81, "rr", &[1, 1]);
        assert_eq!(ctl.replace(&bad).unwrap_err().error, CtlError::DestExists);
        bad[1] = def(80, "wlc", &[2]);
        let e = ctl.replace(&bad).unwrap_err();
        assert_eq!(
            (e.index, e.error),
            (1, CtlError::ServiceExists),
            "a service twice"
        );

        let batch = vec![
            Command::AddDest {
                service: key(80),
                dest: rs(3),
            },
            Command::DelService { key: key(80) },
            Command::DelService { key: key(80) },
        ];
        let e = ctl.exec(&batch, true).unwrap_err();
        assert_eq!((e.index, e.error), (2, CtlError::NoService));
        assert_eq!(normalized(current_defs(ctl.ipvs())), snapshot);
        assert!(log.lock().unwrap().is_empty(), "the data plane saw nothing");
    }

    #[test]
    fn what_the_data_plane_refuses_changes_nothing() {
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(Picky));
        let e = ctl
            .replace(&[def(80, "rr", &[1]), def(99, "rr", &[1])])
            .unwrap_err();
        assert_eq!(
            (e.index, e.error),
            (1, CtlError::Unsupported("not 99".into()))
        );
        assert_eq!(ctl.ipvs().services().count(), 0);
        let add = |port| Command::AddService {
            key: key(port),
            config: ServiceConfig::new(AddrFamily::Inet),
        };
        let e = ctl.exec(&[add(80), add(99)], false).unwrap_err();
        assert_eq!(e.index, 1);
        assert_eq!(
            ctl.ipvs().services().count(),
            0,
            "refused before anything applied"
        );
        ctl.exec(&[add(80)], false).unwrap();
    }

    #[test]
    fn single_commands_apply_directly() {
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(NoDataPlane));
        let add = Command::AddService {
            key: key(80),
            config: ServiceConfig::new(AddrFamily::Inet),
        };
        ctl.exec(std::slice::from_ref(&add), false).unwrap();
        assert_eq!(
            ctl.exec(&[add], false).unwrap_err().error,
            CtlError::ServiceExists
        );
        ctl.exec(
            &[Command::SetTimeouts {
                tcp: 5,
                tcpfin: 0,
                udp: 0,
            }],
            false,
        )
        .unwrap();
        assert_eq!(ctl.ipvs().timeouts().ipvsadm(), (5, 120, 300));
    }

    /// The generation moves with the table and only with it: a request that
    /// changes nothing leaves it, so rvsd does not rebuild the table to
    /// compare it.
    #[test]
    fn generation_moves_only_when_the_table_changes() {
        let mut ctl = Controller::new(IpvsConfig::default(), Box::new(NoDataPlane));
        let set = |tcp| Command::SetTimeouts {
            tcp,
            tcpfin: 0,
            udp: 0,
        };
        let service = ServiceDef {
            key: key(80),
            config: ServiceConfig::new(AddrFamily::Inet),
            dests: Vec::new(),
            laddrs: Vec::new(),
        };
        let g0 = ctl.generation();
        ctl.replace(std::slice::from_ref(&service)).unwrap();
        let g1 = ctl.generation();
        assert_ne!(g1, g0, "a service added");
        // No-ops: a refused command, -Z, --set 0 0 0, timeouts set to what
        // they are, a reload to the same table.
        let again = Command::AddService {
            key: key(80),
            config: service.config.clone(),
        };
        ctl.exec(&[again], false).unwrap_err();
        ctl.exec(&[Command::Zero { service: None }], false).unwrap();
        ctl.exec(&[set(0)], true).unwrap();
        let (tcp, tcpfin, udp) = ctl.ipvs().timeouts().ipvsadm();
        ctl.set_timeouts(tcp, tcpfin, udp);
        ctl.replace(std::slice::from_ref(&service)).unwrap();
        assert_eq!(ctl.generation(), g1, "nothing changed");
        // Changes: a real server, the timeouts (as a command and as a
        // reload sets them), a reload with a difference.
        let dest = Command::AddDest {
            service: key(80),
            dest: rs(1),
        };
        ctl.exec(&[dest], false).unwrap();
        let g2 = ctl.generation();
        assert_ne!(g2, g1, "a real server added");
        ctl.exec(&[set(5)], false).unwrap();
        let g3 = ctl.generation();
        assert_ne!(g3, g2, "a timeout changed");
        ctl.set_timeouts(0, 0, 7);
        let g4 = ctl.generation();
        assert_ne!(g4, g3, "a timeout changed outside a command");
        ctl.replace(&[service]).unwrap();
        assert_ne!(ctl.generation(), g4, "a reload removed the real server");
    }

    fn arb_defs() -> impl Strategy<Value = Vec<ServiceDef>> {
        proptest::collection::btree_map(
            0u16..6,
            (
                prop::sample::select(vec![
                    Scheduler::Rr,
                    Scheduler::Wlc,
                    Scheduler::Sh,
                    Scheduler::Mh,
                ]),
                proptest::collection::btree_map(1u8..8, 0u32..4, 0..5),
                prop::sample::subsequence(vec![1u8, 2, 3, 4], 0..=4).prop_shuffle(),
            ),
            0..5,
        )
        .prop_map(|m| {
            m.into_iter()
                .map(|(port, (sched, ds, ls))| ServiceDef {
                    key: key(80 + port),
                    config: ServiceConfig::new(AddrFamily::Inet).scheduler(sched),
                    dests: ds.into_iter().map(|(i, w)| rs(i).weight(w)).collect(),
                    laddrs: ls
                        .into_iter()
                        .map(|i| LocalAddrRange::single(IpAddr::V4(Ipv4Addr::new(10, 9, 0, i))))
                        .collect(),
                })
                .collect()
        })
    }

    proptest! {
        /// Applying diff(a, b) to a director holding `a` yields `b`.
        #[test]
        fn diff_then_apply_reaches_target(a in arb_defs(), b in arb_defs()) {
            let mut ctl = Controller::new(IpvsConfig::default(), Box::new(NoDataPlane));
            ctl.replace(&a).unwrap();
            prop_assert_eq!(normalized(current_defs(ctl.ipvs())), normalized(a.clone()));
            ctl.replace(&b).unwrap();
            prop_assert_eq!(normalized(current_defs(ctl.ipvs())), normalized(b.clone()));
            ctl.ipvs().audit().unwrap();
        }

        /// Whatever a request does to the table moves the generation: a
        /// table that differs from the one before always comes with a new
        /// generation (rvsd saves the table only then).
        #[test]
        fn a_changed_table_always_has_a_new_generation(
            a in arb_defs(),
            b in arb_defs(),
            port in 0u16..6,
            server in 1u8..8,
            weight in 0u32..4,
            tcp in 0u32..3,
        ) {
            let mut ctl = Controller::new(IpvsConfig::default(), Box::new(NoDataPlane));
            ctl.replace(&a).unwrap();
            let requests: Vec<Vec<Command>> = vec![
                vec![Command::AddDest { service: key(80 + port), dest: rs(server).weight(weight) }],
                vec![Command::EditDest { service: key(80 + port), dest: rs(server).weight(weight) }],
                vec![Command::DelDest { service: key(80 + port), addr: rs(server).addr, port: 80 }],
                vec![Command::DelService { key: key(80 + port) }],
                vec![Command::Zero { service: Some(key(80 + port)) }],
                vec![Command::SetTimeouts { tcp, tcpfin: 0, udp: 0 }],
                vec![Command::Clear],
            ];
            for r in &requests {
                let (table, generation) = (ctl.table_commands(), ctl.generation());
                let _ = ctl.exec(r, false);
                if ctl.table_commands() != table {
                    prop_assert_ne!(ctl.generation(), generation, "{:?}", r);
                }
            }
            let (table, generation) = (ctl.table_commands(), ctl.generation());
            ctl.replace(&b).unwrap();
            if ctl.table_commands() != table {
                prop_assert_ne!(ctl.generation(), generation);
            }
        }
    }
}
