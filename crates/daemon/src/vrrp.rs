//! VRRP: rvsd runs keepalived.conf's `vrrp_instance` blocks itself, so a
//! director pair fails over with the file it already has and no keepalived.
//!
//! Each instance is one task: a raw VRRP socket on its interface
//! (`rvs_vrrp::net`), the election (`rvs_core::vrrp`, sans-IO, driven here
//! with the runtime's clock), the wire format (`rvs_wire::vrrp`, the same
//! bytes keepalived sends and accepts), and the side effects of the
//! election's actions: virtual addresses added or removed over netlink,
//! gratuitous ARP / unsolicited NA, notify scripts with keepalived's
//! arguments. A reload keeps the instances whose configuration did not
//! change running untouched (no flap); changed ones are stopped (a master
//! resigns with priority 0) and started again.
//!
//! Layout: [`rvs_control::vrrp::plan()`] turns the configuration into
//! one [`Spec`] per instance (sans-IO decisions only); this file holds the
//! running side (sync groups, the instance tasks, the async driver of the
//! election); `scripts` runs notify scripts, tracked scripts and track
//! files.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_core::time::Instant;
use rvs_core::vrrp::{Action, Config as Election, Heard, Instance, State};
use rvs_vrrp::net;
use rvs_wire::vrrp as wire;
use tokio::sync::watch;

mod scripts;

use rvs_control::vrrp::with_files;
pub use rvs_control::vrrp::{NOT_APPLIED, Notify, Spec, TrackFile, TrackScript, plan};
use scripts::{AbortOnDrop, run_notify, run_script, run_track_file};

/// The members of one `vrrp_sync_group`, running: each announces its own
/// transitions (from its election or its tracking) and the others follow;
/// `faulty` holds the members whose own tracking failed, and while it is
/// not empty every member stays in FAULT.
#[derive(Clone)]
struct Group {
    name: String,
    events: tokio::sync::broadcast::Sender<(String, State)>,
    faulty: Arc<Mutex<std::collections::BTreeSet<String>>>,
    /// Each member's state, the group's scripts and size, and the state
    /// the group was last reported in.
    settled: Arc<Mutex<Settled>>,
}

#[derive(Default)]
struct Settled {
    states: BTreeMap<String, State>,
    size: usize,
    notify: Notify,
    last: Option<State>,
}

impl Group {
    fn new(name: &str) -> Self {
        Group {
            name: name.to_owned(),
            events: tokio::sync::broadcast::Sender::new(64),
            faulty: Arc::default(),
            settled: Arc::default(),
        }
    }

    /// The group's scripts and how many members it has (from a (re)load).
    fn configure(&self, notify: &Notify, size: usize) {
        if let Ok(mut st) = self.settled.lock() {
            st.notify = notify.clone();
            st.size = size;
        }
    }

    /// Record a member's state; once every member is in the same state
    /// and the group was not reported in it yet, run the group's notify
    /// scripts (keepalived's `GROUP NAME STATE`).
    fn settle(&self, member: &str, state: State) {
        let Ok(mut st) = self.settled.lock() else {
            return;
        };
        if state == State::Stopped {
            st.states.remove(member);
            return;
        }
        st.states.insert(member.to_owned(), state);
        let all_same = st.states.len() == st.size && st.states.values().all(|s| *s == state);
        if !all_same
            || st.last == Some(state)
            || !matches!(state, State::Master | State::Backup | State::Fault)
        {
            return;
        }
        st.last = Some(state);
        tracing::info!(target: "rvs::vrrp", "VRRP_Group({}) Syncing instances to {} state", self.name, state.name());
        run_notify(&st.notify, "GROUP", &self.name, state, None);
    }

    /// Record this member's own fault; whether the group is faulty.
    fn fault(&self, member: &str, own: bool) -> bool {
        let Ok(mut f) = self.faulty.lock() else {
            return own;
        };
        if own {
            f.insert(member.to_owned());
        } else {
            f.remove(member);
        }
        !f.is_empty()
    }

    /// Tell the other members about this member's own transitions.
    fn announce(&self, member: &str, acts: &[Action]) {
        for a in acts {
            if let Action::Transition { to, .. } = a
                && matches!(to, State::Master | State::Backup | State::Fault)
            {
                let _ = self.events.send((member.to_owned(), *to));
            }
        }
    }
}

/// What each instance is doing: state and priority by instance name.
pub type Status = Arc<Mutex<BTreeMap<String, (State, u8)>>>;

struct Task {
    spec: Spec,
    stop: watch::Sender<bool>,
    /// A new spec of the same identity, taken in place.
    update: watch::Sender<Spec>,
    handle: tokio::task::JoinHandle<()>,
}

/// Whether `new` differs from `old` only in what a running instance can
/// take in place (priority, intervals, preemption, tracked interfaces,
/// notify scripts, announcements, routes and rules): then a reload does
/// not restart it, and a master keeps its addresses (and reconciles its
/// routes and rules by difference).
fn same_identity(old: &Spec, new: &Spec) -> bool {
    let mut soft = old.clone();
    soft.priority = new.priority;
    soft.advert_int = new.advert_int;
    soft.preempt = new.preempt;
    soft.preempt_delay = new.preempt_delay;
    soft.track_interfaces = new.track_interfaces.clone();
    soft.track_primary = new.track_primary;
    soft.notify = new.notify.clone();
    soft.down_adverts = new.down_adverts;
    soft.garp_master_delay = new.garp_master_delay;
    soft.garp_repeat = new.garp_repeat;
    soft.garp_refresh = new.garp_refresh;
    soft.garp_refresh_repeat = new.garp_refresh_repeat;
    soft.initial_master = new.initial_master;
    soft.routes = new.routes.clone();
    soft == *new
}

/// The election's configuration for `spec` with our source address.
fn election(spec: &Spec, local: IpAddr) -> Election {
    let mut cfg = Election::new(spec.priority, spec.advert_int, local);
    cfg.version = spec.version;
    cfg.preempt = spec.preempt;
    cfg.preempt_delay = spec.preempt_delay;
    cfg.down_adverts = spec.down_adverts.max(1);
    cfg.garp_master_delay = spec.garp_master_delay;
    cfg.initial_master = spec.initial_master;
    cfg.garp_refresh = spec.garp_refresh;
    cfg
}

/// The running instances.
pub struct Vrrp {
    tasks: Vec<Task>,
    status: Status,
    groups: BTreeMap<String, Group>,
}

impl Vrrp {
    /// Run exactly `specs`: instances whose spec is unchanged keep running,
    /// those changed only in what can be taken in place
    /// ([`same_identity`]) are updated where they run, the others stop (a
    /// master resigns) and the new ones start.
    pub async fn apply(&mut self, specs: Vec<Spec>) {
        let mut keep = Vec::new();
        let mut gone = Vec::new();
        for mut t in std::mem::take(&mut self.tasks) {
            if specs.contains(&t.spec) {
                keep.push(t);
            } else if let Some(new) = specs.iter().find(|n| same_identity(&t.spec, n)) {
                tracing::info!(target: "rvs::vrrp", "VRRP_Instance({}): configuration changed, applied in place", new.name);
                let _ = t.update.send(new.clone());
                t.spec = new.clone();
                keep.push(t);
            } else {
                gone.push(t);
            }
        }
        stop_tasks(gone, &self.status).await;
        self.tasks = keep;
        for spec in specs {
            if self.tasks.iter().any(|t| t.spec == spec) {
                continue;
            }
            let (stop, rx) = watch::channel(false);
            let group = spec.sync_group.as_ref().map(|g| {
                self.groups
                    .entry(g.clone())
                    .or_insert_with(|| Group::new(g))
                    .clone()
            });
            let (update, updates) = watch::channel(spec.clone());
            let handle = tokio::spawn(run(spec.clone(), rx, updates, self.status.clone(), group));
            self.tasks.push(Task {
                spec,
                stop,
                update,
                handle,
            });
        }
        // Before any new member runs (nothing awaits in between).
        for (name, g) in &self.groups {
            let members: Vec<&Spec> = self
                .tasks
                .iter()
                .map(|t| &t.spec)
                .filter(|s| s.sync_group.as_deref() == Some(name))
                .collect();
            if let Some(first) = members.first() {
                g.configure(&first.group_notify, members.len());
            }
        }
    }

    /// Stop every instance (masters resign and give their addresses up).
    pub async fn stop(&mut self) {
        stop_tasks(std::mem::take(&mut self.tasks), &self.status).await;
    }
}

/// The VRRP task: runs what `specs` says, follows its changes (reloads),
/// and on `stop` stops every instance. Returns the stop switch and the task.
pub fn spawn(
    mut specs: watch::Receiver<Vec<Spec>>,
    status: Status,
) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let mut running = Vrrp {
            tasks: Vec::new(),
            status,
            groups: BTreeMap::new(),
        };
        loop {
            let want = specs.borrow_and_update().clone();
            running.apply(want).await;
            tokio::select! {
                r = specs.changed() => if r.is_err() { break },
                _ = stopped.changed() => break,
            }
        }
        running.stop().await;
    });
    (stop, task)
}

async fn stop_tasks(tasks: Vec<Task>, status: &Status) {
    for t in &tasks {
        let _ = t.stop.send(true);
    }
    for t in tasks {
        if tokio::time::timeout(Duration::from_secs(3), t.handle)
            .await
            .is_err()
        {
            tracing::warn!(target: "rvs::vrrp", "VRRP_Instance({}) did not stop in 3 s", t.spec.name);
        }
        if let Ok(mut s) = status.lock() {
            s.remove(&t.spec.name);
        }
    }
}

/// The runtime's clock as the election's [`Instant`].
struct Clock(tokio::time::Instant);

impl Clock {
    fn now(&self) -> Instant {
        Instant::from_millis(self.0.elapsed().as_millis() as u64)
    }
    fn at(&self, t: Instant) -> tokio::time::Instant {
        self.0 + Duration::from_millis(t.as_millis())
    }
}

async fn run(
    spec: Spec,
    mut stop: watch::Receiver<bool>,
    mut updates: watch::Receiver<Spec>,
    status: Status,
    group: Option<Group>,
) {
    let clock = Clock(tokio::time::Instant::now());
    if let Some(vmac) = &spec.vmac {
        let mac = wire::virtual_mac(spec.vrid, false);
        match net::add_vmac(&spec.interface, vmac, mac).await {
            Ok(()) => {
                tracing::info!(target: "rvs::vrrp", "VRRP_Instance({}): vmac {vmac} on {}", spec.name, spec.interface)
            }
            Err(e) => {
                tracing::error!(target: "rvs::vrrp", "VRRP_Instance({}): creating vmac {vmac}: {e}", spec.name)
            }
        }
    }
    // With a vmac, advertisements leave by it (so their source MAC is the
    // virtual one) from the base interface's address, as keepalived sends
    // them.
    let (sock_if, sock_src) = match &spec.vmac {
        Some(vmac) if !spec.vmac_xmit_base => (
            vmac.clone(),
            spec.src.or_else(|| {
                net::primary_v4(&spec.interface)
                    .ok()
                    .flatten()
                    .map(IpAddr::V4)
            }),
        ),
        _ => (spec.interface.clone(), spec.src),
    };
    let mut failures = 0u32;
    let sock = loop {
        match net::VrrpSocket::open(&sock_if, spec.ipv6, spec.group, sock_src) {
            Ok(s) => break s,
            Err(e) => {
                // Said once, then once a minute (an interface that appears
                // later, or rvsd without CAP_NET_RAW).
                if failures.is_multiple_of(60) {
                    tracing::error!(target: "rvs::vrrp", "VRRP_Instance({}): cannot open a VRRP socket on {}: {e}; retrying every second", spec.name, spec.interface);
                }
                failures += 1;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    };
    let local = sock.local_addr();
    let mut inst = Instance::new(election(&spec, local));
    // The tracked scripts run beside the instance and stop with it.
    let mut _script_tasks = Vec::new();
    let mut scripts = Vec::new();
    for t in &spec.track_scripts {
        let (tx, rx) = watch::channel(!t.init_fail);
        _script_tasks.push(AbortOnDrop(tokio::spawn(run_script(t.clone(), tx))));
        scripts.push((t.weight, rx));
    }
    let mut files = Vec::new();
    for t in &spec.track_files {
        let (tx, rx) = watch::channel(0i64);
        _script_tasks.push(AbortOnDrop(tokio::spawn(run_track_file(t.clone(), tx))));
        files.push((t.weight, rx));
    }
    let mut processes = Vec::new();
    for (p, weight, reverse) in &spec.track_processes {
        let (tx, rx) = watch::channel(false);
        _script_tasks.push(AbortOnDrop(tokio::spawn(crate::track::run(p.clone(), tx))));
        processes.push((*weight, *reverse, rx));
    }
    let mut drv = Driver {
        spec: spec.clone(),
        sock: &sock,
        local,
        scripts,
        files,
        processes,
        peer_form: None,
    };
    let mut events = group.as_ref().map(|g| g.events.subscribe());
    // This member's own tracking result (the group's fault is wider).
    let mut own_fault = false;
    let mut acts = inst.start(clock.now());
    let mut followed = Vec::new();
    let mut buf = vec![0u8; 2048];
    let mut track = tokio::time::interval(Duration::from_secs(1));
    loop {
        // Transitions of our own election or tracking are announced to the
        // group; those that follow another member (`followed`) are not.
        if let Some(g) = &group {
            g.announce(&spec.name, &acts);
        }
        acts.append(&mut followed);
        drv.perform(&inst, std::mem::take(&mut acts)).await;
        if let Some(g) = &group {
            g.settle(&spec.name, inst.state());
        }
        if let Ok(mut st) = status.lock() {
            st.insert(spec.name.clone(), (inst.state(), inst.priority()));
        }
        let wake = inst
            .poll_timeout()
            .map(|t| clock.at(t))
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            r = sock.recv(&mut buf) => match r {
                Ok(rx) => {
                    if let Some(h) = drv.heard(&rx, &buf) {
                        match inst.on_advert(clock.now(), h) {
                            Ok(a) => acts = a,
                            Err(e) => tracing::debug!(target: "rvs::vrrp", "VRRP_Instance({}): advert from {} ignored: {e}", spec.name, h.src),
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(target: "rvs::vrrp", "VRRP_Instance({}): receive: {e}", spec.name);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = tokio::time::sleep_until(wake) => acts = inst.on_timeout(clock.now()),
            _ = track.tick() => {
                let (fault, prio) = drv.tracking();
                let now = clock.now();
                let changed = fault != own_fault;
                own_fault = fault;
                let group_fault = group.as_ref().is_some_and(|g| g.fault(&spec.name, fault));
                acts = inst.set_fault(now, fault || group_fault);
                if !fault && !group_fault {
                    acts.extend(inst.set_priority(now, prio));
                }
                if changed && let Some(g) = &group {
                    // Wake the others now rather than at their next tick.
                    let _ = g.events.send((spec.name.clone(), if fault { State::Fault } else { State::Backup }));
                }
            }
            ev = async {
                match events.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                if let (Ok((member, state)), Some(g)) = (ev, &group)
                    && member != spec.name
                {
                    let now = clock.now();
                    let group_fault = g.fault(&spec.name, own_fault);
                    followed = inst.set_fault(now, group_fault);
                    if !group_fault {
                        followed.extend(inst.follow(now, state));
                    }
                }
            }
            r = updates.changed() => {
                if r.is_ok() {
                    let new = updates.borrow_and_update().clone();
                    if inst.state() == State::Master {
                        // A master keeps what stays, and takes the difference.
                        let who = format!("VRRP_Instance({})", spec.name);
                        crate::routes::remove(&drv.spec.routes.minus(&new.routes), &who).await;
                        crate::routes::install(&new.routes.minus(&drv.spec.routes), &who).await;
                    }
                    let now = clock.now();
                    acts = inst.reconfigure(now, election(&new, local));
                    drv.spec = new;
                    let (fault, prio) = drv.tracking();
                    if !fault {
                        acts.extend(inst.set_priority(now, prio));
                    }
                }
            }
            _ = stop.changed() => {
                let a = inst.shutdown();
                drv.perform(&inst, a).await;
                if let Some(vmac) = &spec.vmac
                    && let Err(e) = net::del_link(vmac).await
                {
                    tracing::warn!(target: "rvs::vrrp", "VRRP_Instance({}): removing vmac {vmac}: {e}", spec.name);
                }
                return;
            }
        }
    }
}

struct Driver<'a> {
    spec: Spec,
    sock: &'a net::VrrpSocket,
    local: IpAddr,
    /// Weight and current result (true = good) of each tracked script.
    scripts: Vec<(i32, watch::Receiver<bool>)>,
    /// Weight and current number of each tracked file.
    files: Vec<(i64, watch::Receiver<i64>)>,
    /// Weight, `reverse` and current quorum state of each tracked process.
    processes: Vec<(i32, bool, watch::Receiver<bool>)>,
    /// The v3/IPv4 checksum form the peers use, once heard: answered in
    /// kind, whatever `v3_checksum_as_v2` says (keepalived before 2.3
    /// ignores that keyword, so a mixed pair would otherwise drop each
    /// other's adverts).
    peer_form: Option<wire::ChecksumForm>,
}

impl Driver<'_> {
    /// Fault (own interface or a weight-0 tracked one down) and the
    /// priority the tracked interfaces' weights give.
    fn tracking(&self) -> (bool, u8) {
        let up = |i: &str| net::link_up(i).unwrap_or(false);
        if self.spec.track_primary && !up(&self.spec.interface) {
            return (true, self.spec.priority);
        }
        let mut prio = i32::from(self.spec.priority);
        for (name, w) in &self.spec.track_interfaces {
            let is_up = up(name);
            match *w {
                0 if !is_up => return (true, self.spec.priority),
                w if w > 0 && is_up => prio += w,
                w if w < 0 && !is_up => prio += w,
                _ => {}
            }
        }
        for (w, good) in &self.scripts {
            let good = *good.borrow();
            match *w {
                0 if !good => return (true, self.spec.priority),
                w if w > 0 && good => prio += w,
                w if w < 0 && !good => prio += w,
                _ => {}
            }
        }
        for (w, reverse, up) in &self.processes {
            // `reverse` turns the state and the weight around: a
            // positive weight lowers the priority while the quorum is
            // up, `weight 0 reverse` is a fault while it is up.
            let good = *up.borrow() != *reverse;
            let w = if *reverse { -*w } else { *w };
            match w {
                0 if !good => return (true, self.spec.priority),
                w if w > 0 && good => prio += w,
                w if w < 0 && !good => prio += w,
                _ => {}
            }
        }
        let files = self.files.iter().map(|(w, v)| (*w, *v.borrow()));
        let Some(prio) = with_files(i64::from(prio), files) else {
            return (true, self.spec.priority);
        };
        if self.spec.priority == 255 {
            return (false, 255);
        }
        (false, prio.clamp(1, 254) as u8)
    }

    /// An advertisement for this instance, checked as keepalived does.
    fn heard(&mut self, rx: &net::Received, buf: &[u8]) -> Option<Heard> {
        let s = &self.spec;
        let payload = buf.get(rx.offset..rx.offset + rx.len)?;
        let multicast = rx.dst.is_multicast();
        if multicast && rx.ttl != 255 {
            tracing::debug!(target: "rvs::vrrp", "VRRP_Instance({}): advert from {} with TTL {} dropped", s.name, rx.src, rx.ttl);
            return None;
        }
        let (ad, form) = match wire::parse(payload, rx.src, rx.dst) {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(target: "rvs::vrrp", "VRRP_Instance({}): bad packet from {}: {e}", s.name, rx.src);
                return None;
            }
        };
        if ad.vrid != s.vrid {
            return None;
        }
        if s.strict && !s.advertises_ours(&ad.addrs) {
            tracing::info!(target: "rvs::vrrp", "VRRP_Instance({}): ip addresses of the advert from {} do not match ours; dropped (strict mode)", s.name, rx.src);
            return None;
        }
        if ad.version != s.version {
            tracing::warn!(target: "rvs::vrrp", "VRRP_Instance({}): VRRPv{} advert from {} (we speak v{})", s.name, ad.version, rx.src, s.version);
            return None;
        }
        if s.version == 3 && !s.ipv6 && self.peer_form != Some(form) {
            if form != s.checksum_form {
                tracing::info!(target: "rvs::vrrp", "VRRP_Instance({}): {} uses the {form:?} checksum form; answering in kind", s.name, rx.src);
            }
            self.peer_form = Some(form);
        }
        if s.version == 2 {
            let ok = match &s.auth {
                None => ad.auth_type == 0,
                Some(p) => ad.auth_type == 1 && &ad.auth_data == p,
            };
            if !ok {
                tracing::warn!(target: "rvs::vrrp", "VRRP_Instance({}): advert from {} fails authentication", s.name, rx.src);
                return None;
            }
        }
        Some(Heard {
            src: rx.src,
            priority: ad.priority,
            interval: Duration::from_millis(u64::from(ad.interval_cs) * 10),
        })
    }

    async fn perform(&mut self, inst: &Instance, acts: Vec<Action>) {
        for a in acts {
            match a {
                Action::Send { priority } => self.send(priority).await,
                Action::Announce => self.announce(self.spec.garp_repeat),
                Action::Refresh => self.announce(self.spec.garp_refresh_repeat),
                Action::Transition { to, .. } => self.transition(inst, to).await,
            }
        }
    }

    /// Announce every address `times` times.
    fn announce(&self, times: u32) {
        let each = self.spec.vips.iter().chain(&self.spec.excluded);
        for v in each.flat_map(|v| std::iter::repeat_n(v, times as usize)) {
            if let Err(e) = net::announce(&v.dev, v.addr) {
                tracing::warn!(target: "rvs::vrrp", "VRRP_Instance({}): announcing {} on {}: {e}", self.spec.name, v.addr, v.dev);
            }
        }
    }

    async fn send(&self, priority: u8) {
        let s = &self.spec;
        let ad = wire::Advert {
            version: s.version,
            vrid: s.vrid,
            priority,
            interval_cs: (s.advert_int.as_millis() / 10).clamp(1, 4095) as u16,
            auth_type: u8::from(s.auth.is_some()),
            auth_data: s.auth.unwrap_or_default(),
            addrs: s.vips.iter().map(|v| v.addr).collect(),
        };
        let dsts: Vec<IpAddr> = if s.peers.is_empty() {
            vec![s.group]
        } else {
            s.peers.clone()
        };
        for dst in dsts {
            let form = self.peer_form.unwrap_or(s.checksum_form);
            match wire::build(&ad, self.local, dst, form) {
                Ok(bytes) => {
                    if let Err(e) = self.sock.send(&bytes, dst).await {
                        tracing::warn!(target: "rvs::vrrp", "VRRP_Instance({}): sending to {dst}: {e}", s.name);
                    }
                }
                Err(e) => {
                    tracing::error!(target: "rvs::vrrp", "VRRP_Instance({}): cannot build an advert: {e}", s.name)
                }
            }
        }
    }

    async fn transition(&mut self, inst: &Instance, to: State) {
        let s = &self.spec;
        tracing::info!(target: "rvs::vrrp", "VRRP_Instance({}) Entering {} STATE", s.name, to.name());
        if to == State::Master {
            for v in s.vips.iter().chain(&s.excluded) {
                if let Err(e) = net::add_address(&v.dev, v.addr, v.prefix).await {
                    tracing::error!(target: "rvs::vrrp", "VRRP_Instance({}): adding {} on {}: {e}", s.name, v.addr, v.dev);
                }
            }
            // After the addresses: a route's `src` must be local.
            crate::routes::install(&s.routes, &format!("VRRP_Instance({})", s.name)).await;
        } else {
            // Routes and rules first (they may use the addresses).
            crate::routes::remove(&s.routes, &format!("VRRP_Instance({})", s.name)).await;
            // Not master (a backup, a fault, a stop — and also the start
            // of a backup, whatever state came before): no address of the
            // instance stays. keepalived does the same at start, so
            // addresses a killed predecessor left behind do not make this
            // host answer for the VIP beside the real master; removing an
            // address that is not there is a no-op.
            for v in s.vips.iter().chain(&s.excluded) {
                if let Err(e) = net::del_address(&v.dev, v.addr, v.prefix).await {
                    tracing::error!(target: "rvs::vrrp", "VRRP_Instance({}): removing {} from {}: {e}", s.name, v.addr, v.dev);
                }
            }
        }
        run_notify(&s.notify, "INSTANCE", &s.name, to, Some(inst.priority()));
        if s.mails(to) {
            crate::smtp::vrrp_alert(&s.name, to);
        }
    }
}
