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

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_check::policy::ScriptSpec;
use rvs_config::model::{KeepalivedConf as KaConfig, Script, VrrpInstance, VrrpState};
use rvs_core::time::Instant;
use rvs_core::vrrp::{Action, Config as Election, Heard, Instance, State};
use rvs_vrrp::net;
use rvs_wire::vrrp as wire;
use tokio::sync::watch;

/// One virtual address and where it lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vip {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length (keepalived's default: /32, /128).
    pub prefix: Option<u8>,
    /// Interface (`dev`), else the instance's.
    pub dev: String,
}

/// Notify scripts of an instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Notify {
    master: Option<ScriptSpec>,
    backup: Option<ScriptSpec>,
    fault: Option<ScriptSpec>,
    stop: Option<ScriptSpec>,
    any: Option<ScriptSpec>,
}

/// A `vrrp_script` as one instance tracks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackScript {
    /// Script name (for logs).
    pub name: String,
    /// Command line (run without a shell, as keepalived does).
    pub command: String,
    /// Run every `interval`.
    pub interval: Duration,
    /// Killed (and failed) after this long.
    pub timeout: Duration,
    /// Weight (the instance's `track_script NAME weight W`, else the
    /// script's): 0 = failure is a fault; > 0 added while it succeeds;
    /// < 0 added (subtracted) while it fails.
    pub weight: i32,
    /// Successes in a row that make a failed script good again.
    pub rise: u32,
    /// Failures in a row that make a good script fail.
    pub fall: u32,
    /// `user USER [GROUP]`.
    pub user: Option<String>,
    /// Start as failed (`init_fail`) rather than good.
    pub init_fail: bool,
}

/// A `track_file` as one instance follows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackFile {
    /// The `track_file` block's name (for logs).
    pub name: String,
    /// The file holding a number.
    pub path: String,
    /// The weight with `reverse` folded in (negated): 0 = a non-zero
    /// number is a fault; else number × weight is added to the priority,
    /// and a result below -253 is a fault.
    pub weight: i64,
    /// `init_file VALUE [overwrite]`.
    pub init: Option<(i64, bool)>,
}

/// One instance, resolved from the file and ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Instance name.
    pub name: String,
    /// Interface the advertisements use.
    pub interface: String,
    /// Virtual router id.
    pub vrid: u8,
    /// VRRP version (2, or 3; IPv6 is always 3).
    pub version: u8,
    /// Whether the instance is IPv6.
    pub ipv6: bool,
    /// Configured priority.
    pub priority: u8,
    /// Advertisement interval.
    pub advert_int: Duration,
    /// Preempt a lower-priority master.
    pub preempt: bool,
    /// keepalived's `preempt_delay`.
    pub preempt_delay: Duration,
    /// v2 simple-text password (PASS), padded to 8 bytes.
    pub auth: Option<[u8; 8]>,
    /// Advertised virtual addresses.
    pub vips: Vec<Vip>,
    /// `virtual_ipaddress_excluded`: managed alike, not advertised.
    pub excluded: Vec<Vip>,
    /// Source address (`unicast_src_ip` / `mcast_src_ip`).
    pub src: Option<IpAddr>,
    /// Unicast peers; empty = multicast to `group`.
    pub peers: Vec<IpAddr>,
    /// Multicast group.
    pub group: IpAddr,
    /// v3 over IPv4: checksum with the pseudo-header (keepalived's default)
    /// or without (`v3_checksum_as_v2`, RFC 9568).
    pub checksum_form: wire::ChecksumForm,
    /// `track_interface`: name and weight (0 = fault when down).
    pub track_interfaces: Vec<(String, i32)>,
    /// The instance's own interface going down is a fault (keepalived's
    /// default; `dont_track_primary` turns it off).
    pub track_primary: bool,
    /// `track_script`: the `vrrp_script`s this instance follows.
    pub track_scripts: Vec<TrackScript>,
    /// `track_file`: the files this instance follows.
    pub track_files: Vec<TrackFile>,
    /// `track_process`: (process, weight, reverse) this instance follows.
    pub track_processes: Vec<(crate::track::Process, i32, bool)>,
    /// Notify scripts.
    pub notify: Notify,
    /// keepalived's `down_timer_adverts`.
    pub down_adverts: u32,
    /// keepalived's `garp_master_delay`.
    pub garp_master_delay: Duration,
    /// keepalived's `garp_master_repeat`: announcements per address each
    /// time (default 5).
    pub garp_repeat: u32,
    /// keepalived's `garp_master_refresh` (zero = off).
    pub garp_refresh: Duration,
    /// keepalived's `garp_master_refresh_repeat` (default 1).
    pub garp_refresh_repeat: u32,
    /// `state MASTER`: take the addresses at start (keepalived's behaviour).
    pub initial_master: bool,
    /// `use_vmac`: the macvlan interface carrying the virtual MAC.
    pub vmac: Option<String>,
    /// `vmac_xmit_base`: advertisements leave by the base interface.
    pub vmac_xmit_base: bool,
    /// The `vrrp_sync_group` this instance belongs to.
    pub sync_group: Option<String>,
    /// That group's notify scripts (run once per group transition).
    pub group_notify: Notify,
    /// `vrrp_strict` / `strict_mode`: an advertisement must carry exactly
    /// this instance's addresses (RFC 5798 §6.4.2/§6.4.3), or it is
    /// dropped.
    pub strict: bool,
    /// `smtp_alert` (else the global `smtp_alert_vrrp`, else `smtp_alert`):
    /// mail each transition.
    pub smtp_alert: bool,
    /// Not `no_email_faults` (global): FAULT transitions are mailed too.
    pub email_faults: bool,
    /// `virtual_routes` and `virtual_rules`: installed while MASTER.
    pub routes: crate::routes::Set,
}

impl Spec {
    /// Whether a transition to `to` is mailed: `smtp_alert`, and a FAULT
    /// only without the global `no_email_faults` (keepalived's rule).
    pub fn mails(&self, to: State) -> bool {
        self.smtp_alert && (to != State::Fault || self.email_faults)
    }
}

impl Notify {
    /// The scripts of an instance's or a group's `notify*` keywords.
    fn of(n: &rvs_config::model::Notify) -> Self {
        let script = |s: &Option<Script>| {
            s.as_ref().map(|s| ScriptSpec {
                command: s.command.clone(),
                user: s.user.clone(),
            })
        };
        Notify {
            master: script(&n.master),
            backup: script(&n.backup),
            fault: script(&n.fault),
            stop: script(&n.stop),
            any: script(&n.any),
        }
    }
}

/// The words marking a warning about something the file asks for that rvs
/// does not carry out: `rvsd --strict` refuses such a file.
pub const NOT_APPLIED: &str = rvs_check::build::NOT_APPLIED;

/// The instances of a file, or the first reason one cannot run (named by
/// file:line:column). Warnings for what is accepted but not acted on.
pub fn plan(conf: &KaConfig) -> Result<(Vec<Spec>, Vec<String>), String> {
    let mut specs: Vec<Spec> = Vec::new();
    let mut warnings = Vec::new();
    for v in &conf.vrrp_instances {
        specs.push(one(conf, v, &mut warnings)?);
    }
    let mut seen = BTreeMap::new();
    for s in &specs {
        if let Some(other) = seen.insert((s.interface.clone(), s.vrid, s.ipv6), s.name.clone()) {
            return Err(format!(
                "vrrp_instance {} and {}: the same virtual_router_id {} on {}",
                other, s.name, s.vrid, s.interface
            ));
        }
    }
    if specs.iter().any(|s| s.strict) {
        // keepalived's vrrp_strict also installs firewall rules dropping
        // traffic to the VIPs (no accept mode); rvs installs none.
        warnings.push(
            "vrrp_strict: the firewall rules keepalived adds for it (no accept mode: traffic to the VIPs dropped) are not applied by rvs"
                .into(),
        );
    }
    for g in &conf.vrrp_sync_groups {
        let at = |what: String| format!("{}: vrrp_sync_group {}: {what}", g.loc, g.name);
        if g.smtp_alert {
            warnings.push(at(format!("smtp_alert {NOT_APPLIED}")));
        }
        let group_notify = Notify::of(&g.notify);
        let mut group_scripts = Vec::new();
        for t in &g.track_script {
            match resolve_script(conf, t, &mut warnings, &at) {
                Some(mut ts) => {
                    ts.weight = 0;
                    group_scripts.push(ts);
                }
                None => continue,
            }
        }
        for m in &g.members {
            let Some(spec) = specs.iter_mut().find(|s| &s.name == m) else {
                warnings.push(at(format!("no vrrp_instance {m}, ignored")));
                continue;
            };
            if let Some(other) = &spec.sync_group {
                warnings.push(at(format!(
                    "{m} is already in vrrp_sync_group {other}, ignored"
                )));
                continue;
            }
            spec.sync_group = Some(g.name.clone());
            spec.group_notify = group_notify.clone();
            // Members move together, so tracking cannot shift one member's
            // priority: a tracked failure is a fault of the group (keepalived
            // ignores members' weights too).
            let weighted = spec.track_interfaces.iter().any(|(_, w)| *w != 0)
                || spec.track_scripts.iter().any(|t| t.weight != 0)
                || spec.track_files.iter().any(|t| t.weight != 0)
                || spec.track_processes.iter().any(|t| t.1 != 0);
            if weighted {
                warnings.push(at(format!(
                    "{m}: tracking weights are ignored in a sync group (a failure is a fault)"
                )));
            }
            for t in &mut spec.track_interfaces {
                t.1 = 0;
            }
            for t in &mut spec.track_scripts {
                t.weight = 0;
            }
            for t in &mut spec.track_files {
                t.weight = 0;
            }
            for t in &mut spec.track_processes {
                t.1 = 0;
            }
            spec.track_interfaces
                .extend(g.track_interface.iter().map(|t| (t.name.clone(), 0)));
            spec.track_scripts.extend(group_scripts.iter().cloned());
        }
    }
    Ok((specs, warnings))
}

fn one(conf: &KaConfig, v: &VrrpInstance, warnings: &mut Vec<String>) -> Result<Spec, String> {
    let g = &conf.global;
    let at = |what: &str| format!("{}: vrrp_instance {}: {what}", v.loc, v.name);
    let strict = v.strict_mode.unwrap_or(g.vrrp_strict);
    let interface = v.interface.clone().ok_or_else(|| at("no `interface`"))?;
    let vrid = v
        .virtual_router_id
        .ok_or_else(|| at("no `virtual_router_id`"))?;
    let v6_first = v
        .virtual_ipaddress
        .first()
        .or(v.virtual_ipaddress_excluded.first())
        .is_some_and(|x| x.addr.is_ipv6());
    // use_vmac: the virtual addresses (those without a `dev`) live on a
    // macvlan carrying the virtual MAC.
    let vmac = match &v.use_vmac {
        Some(_) if v6_first => {
            warnings.push(at(&format!(
                "use_vmac on an IPv6 instance {NOT_APPLIED} (IPv4 instances only); ignored"
            )));
            None
        }
        Some(name) => Some(name.clone().unwrap_or_else(|| format!("vrrp.{vrid}"))),
        None => None,
    };
    let home = vmac.clone().unwrap_or_else(|| interface.clone());
    let vip = |x: &rvs_config::model::VirtualIp| Vip {
        addr: x.addr,
        prefix: x.prefix,
        dev: x.dev.clone().unwrap_or_else(|| home.clone()),
    };
    let vips: Vec<Vip> = v.virtual_ipaddress.iter().map(vip).collect();
    let excluded: Vec<Vip> = v.virtual_ipaddress_excluded.iter().map(vip).collect();
    let ipv6 = vips
        .first()
        .or(excluded.first())
        .is_some_and(|x| x.addr.is_ipv6());
    if vips.iter().any(|x| x.addr.is_ipv6() != ipv6) {
        return Err(at(
            "virtual_ipaddress mixes IPv4 and IPv6 (use virtual_ipaddress_excluded for the other family)",
        ));
    }
    let version = if ipv6 {
        3
    } else {
        v.version.unwrap_or(g.vrrp_version)
    };
    if version == 2 && v.advert_int.subsec_millis() != 0 {
        return Err(at(
            "VRRPv2 carries whole seconds: advert_int must be a whole number",
        ));
    }
    // keepalived's vrrp_strict checks (vrrp.c, vrrp_complete_instance),
    // with its messages.
    let mut preempt_delay = v.preempt_delay.unwrap_or_default();
    let mut down_adverts = v
        .down_timer_adverts
        .or(g.vrrp_down_timer_adverts)
        .unwrap_or(3);
    let mut initial_master = v.state == Some(VrrpState::Master);
    if strict {
        if vips.is_empty() {
            return Err(at("No VIP specified; at least one is required"));
        }
        if !v.unicast_peer.is_empty() {
            return Err(at("Unicast peers are not supported in strict mode"));
        }
        if initial_master != (v.priority == 255) {
            warnings.push(at("State MASTER must match being address owner"));
            initial_master = v.priority == 255;
        }
        if v.authentication.is_some() {
            warnings.push(at("Strict mode does not support authentication. Ignoring."));
        }
        if !preempt_delay.is_zero() {
            warnings.push(at(
                "preempt_delay is incompatible with strict mode - resetting",
            ));
            preempt_delay = Duration::ZERO;
        }
        if down_adverts != 3 {
            warnings.push(at(
                "down_timer_adverts is incompatible with strict mode - resetting",
            ));
            down_adverts = 3;
        }
        if let Some(IpAddr::V6(first)) = vips.first().map(|x| x.addr)
            && !first.is_unicast_link_local()
        {
            warnings.push(at("the first IPv6 VIP address must be link local"));
        }
    }
    let auth = match &v.authentication {
        None => None,
        Some(_) if strict => None,
        Some(a) if a.ah => return Err(at("auth_type AH is not supported (use PASS, or none)")),
        Some(a) => {
            if version == 3 {
                warnings.push(at("authentication is ignored with VRRPv3"));
                None
            } else {
                let mut p = [0u8; 8];
                let pass = a.pass.as_deref().unwrap_or("");
                for (d, s) in p.iter_mut().zip(pass.bytes()) {
                    *d = s;
                }
                Some(p)
            }
        }
    };
    let track_scripts = v
        .track_script
        .iter()
        .filter_map(|t| resolve_script(conf, t, warnings, &|w| at(&w)))
        .collect();
    let mut track_files = Vec::new();
    for t in &v.track_file {
        let Some(tf) = conf.track_files.iter().find(|f| f.name == t.name) else {
            // keepalived ignores a reference to a file it does not have.
            warnings.push(at(&format!(
                "track_file {}: no such track_file, ignored",
                t.name
            )));
            continue;
        };
        let mut weight = t.weight.map(i64::from).unwrap_or(tf.weight);
        if t.reverse || (t.weight.is_none() && tf.reverse) {
            weight = -weight;
        }
        if v.priority == 255 && weight != 0 {
            warnings.push(at(&format!(
                "track_file {}: the address owner (priority 255) must use weight 0; weight 0 applies",
                t.name
            )));
            weight = 0;
        }
        track_files.push(TrackFile {
            name: tf.name.clone(),
            path: tf.file.clone().unwrap_or_default(),
            weight,
            init: tf.init_file,
        });
    }
    let mut track_processes = Vec::new();
    for t in &v.track_process {
        let Some(tp) = conf.track_processes.iter().find(|p| p.name == t.name) else {
            warnings.push(at(&format!(
                "track_process {}: no such vrrp_track_process, ignored",
                t.name
            )));
            continue;
        };
        let mut weight = t.weight.unwrap_or(tp.weight);
        let reverse = if t.weight.is_some() {
            t.reverse
        } else {
            tp.reverse || t.reverse
        };
        if v.priority == 255 && weight != 0 {
            warnings.push(at(&format!(
                "track_process {}: the address owner (priority 255) must use weight 0; weight 0 applies",
                t.name
            )));
            weight = 0;
        }
        track_processes.push((crate::track::Process::of(tp), weight, reverse));
    }
    let src = v.unicast_src_ip.or(v.mcast_src_ip);
    let peers: Vec<IpAddr> = v.unicast_peer.iter().map(|p| p.addr).collect();
    Ok(Spec {
        name: v.name.clone(),
        vrid,
        version,
        ipv6,
        priority: v.priority,
        advert_int: v.advert_int,
        preempt: !v.nopreempt,
        preempt_delay,
        auth,
        vips,
        excluded,
        src,
        peers,
        group: if ipv6 {
            IpAddr::V6(g.vrrp_mcast_group6)
        } else {
            IpAddr::V4(g.vrrp_mcast_group4)
        },
        checksum_form: if g.v3_checksum_as_v2 {
            wire::ChecksumForm::Message
        } else {
            wire::ChecksumForm::WithPseudoHeader
        },
        track_interfaces: v
            .track_interface
            .iter()
            .map(|t| (t.name.clone(), t.weight.unwrap_or(0)))
            .collect(),
        track_scripts,
        track_files,
        track_processes,
        track_primary: !v.dont_track_primary,
        notify: Notify::of(&v.notify),
        down_adverts,
        garp_master_delay: v.garp_master_delay.unwrap_or(g.vrrp_garp_master_delay),
        garp_repeat: v
            .garp_master_repeat
            .unwrap_or(g.vrrp_garp_master_repeat)
            .clamp(1, 255),
        garp_refresh: v.garp_master_refresh.unwrap_or(g.vrrp_garp_master_refresh),
        garp_refresh_repeat: v
            .garp_master_refresh_repeat
            .unwrap_or(g.vrrp_garp_master_refresh_repeat)
            .clamp(1, 255),
        initial_master,
        vmac,
        vmac_xmit_base: v.vmac_xmit_base,
        sync_group: None,
        group_notify: Notify::default(),
        strict,
        smtp_alert: v.smtp_alert || g.smtp_alert_vrrp.or(g.smtp_alert).unwrap_or(false),
        email_faults: !g.no_email_faults,
        routes: crate::routes::Set {
            addrs: Vec::new(),
            routes: v.virtual_routes.iter().map(crate::routes::route).collect(),
            rules: v.virtual_rules.iter().map(crate::routes::rule).collect(),
        },
        interface,
    })
}

/// A `track_script` reference resolved to its `vrrp_script`, or `None`
/// (with a warning) where keepalived ignores it.
fn resolve_script(
    conf: &KaConfig,
    t: &rvs_config::model::Tracked,
    warnings: &mut Vec<String>,
    at: &dyn Fn(String) -> String,
) -> Option<TrackScript> {
    let Some(vs) = conf.vrrp_scripts.iter().find(|s| s.name == t.name) else {
        // keepalived ignores a reference to a script it does not have.
        warnings.push(at(format!(
            "track_script {}: no such vrrp_script, ignored",
            t.name
        )));
        return None;
    };
    let Some(command) = vs.script.clone() else {
        warnings.push(format!(
            "{}: vrrp_script {}: no `script`, ignored",
            vs.loc, vs.name
        ));
        return None;
    };
    if t.reverse || vs.weight_reverse {
        warnings.push(at(format!(
            "track_script {}: `reverse` {NOT_APPLIED}: the weight applies as written",
            t.name
        )));
    }
    Some(TrackScript {
        name: vs.name.clone(),
        command,
        interval: vs.interval.max(Duration::from_millis(100)),
        timeout: vs
            .timeout
            .unwrap_or(vs.interval)
            .max(Duration::from_millis(100)),
        weight: t.weight.unwrap_or(vs.weight),
        rise: vs.rise.unwrap_or(1).max(1),
        fall: vs.fall.unwrap_or(1).max(1),
        user: vs.user.clone(),
        init_fail: vs.init_fail,
    })
}

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

/// A task aborted when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Run a `vrrp_script` every interval and publish its result with
/// keepalived's rise/fall hysteresis.
async fn run_script(t: TrackScript, result: watch::Sender<bool>) {
    let user = match t.user.as_deref().map(rvs_check::probe::misc::resolve_user) {
        Some(Err(e)) => {
            tracing::error!(target: "rvs::vrrp", "VRRP_Script({}): {e}; treated as failing", t.name);
            let _ = result.send(false);
            return;
        }
        Some(Ok(u)) => Some(u),
        None => None,
    };
    let (mut ups, mut downs) = (0u32, 0u32);
    let mut every = tokio::time::interval(t.interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let ok = rvs_check::probe::misc::check(&t.command, t.timeout, false, user)
            .await
            .is_ok();
        if ok {
            ups += 1;
            downs = 0;
        } else {
            downs += 1;
            ups = 0;
        }
        let was = *result.borrow();
        let now = if was { downs < t.fall } else { ups >= t.rise };
        if now != was {
            tracing::info!(target: "rvs::vrrp", "VRRP_Script({}) {}", t.name, if now { "succeeded" } else { "failed" });
            let _ = result.send(now);
        }
    }
}

/// How often a tracked file is read (keepalived reads it on inotify
/// events; reading it this often on the runtime's blocking pool, through
/// `tokio::fs`, costs as little and never blocks the VRRP driver).
const TRACK_FILE_POLL: Duration = Duration::from_millis(500);

/// The number in a tracked file's text as keepalived reads it (decimal,
/// blanks around it; anything else reads as 0), limited to ±254.
fn track_file_value(text: &str) -> Option<i64> {
    let v: i64 = text.trim().parse().ok()?;
    Some(v.clamp(-254, 254))
}

/// Follow one `track_file`: write its `init_file` value, then publish the
/// number it holds whenever it changes. A missing or unreadable file, or
/// one that holds no number, counts as 0 (said once per change).
async fn run_track_file(t: TrackFile, value: watch::Sender<i64>) {
    if let Some((v, overwrite)) = t.init {
        let exists = tokio::fs::try_exists(&t.path).await.unwrap_or(false);
        if (overwrite || !exists)
            && let Err(e) = tokio::fs::write(&t.path, format!("{v}\n")).await
        {
            tracing::error!(target: "rvs::vrrp", "track_file {}: writing {}: {e}", t.name, t.path);
        }
    }
    let mut every = tokio::time::interval(TRACK_FILE_POLL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut said = None;
    loop {
        every.tick().await;
        let (v, problem) = match tokio::fs::read_to_string(&t.path).await {
            Ok(text) => match track_file_value(&text) {
                Some(v) => (v, None),
                None => (0, Some(format!("{} holds no number", t.path))),
            },
            Err(e) => (0, Some(format!("reading {}: {e}", t.path))),
        };
        if problem != said {
            if let Some(p) = &problem {
                tracing::warn!(target: "rvs::vrrp", "track_file {}: {p}; its value is 0", t.name);
            }
            said = problem;
        }
        value.send_if_modified(|old| {
            let changed = *old != v;
            if changed {
                tracing::info!(target: "rvs::vrrp", "track_file {}: value {v}", t.name);
            }
            *old = v;
            changed
        });
    }
}

/// `prio` with the tracked files' (weight, number) added as keepalived
/// adds them; `None` when one puts the instance in FAULT (weight 0 and a
/// non-zero number, or number × weight below -253).
fn with_files(mut prio: i64, files: impl Iterator<Item = (i64, i64)>) -> Option<i64> {
    for (w, v) in files {
        if w == 0 {
            if v != 0 {
                return None;
            }
            continue;
        }
        let r = v.saturating_mul(w);
        if r < -253 {
            return None;
        }
        prio += r.min(253);
    }
    Some(prio)
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
        if s.strict && !advertises_ours(s, &ad.addrs) {
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

/// Strict mode: the advertisement carries exactly this instance's
/// advertised addresses (the count, and each of ours), as keepalived checks
/// them.
fn advertises_ours(s: &Spec, addrs: &[IpAddr]) -> bool {
    addrs.len() == s.vips.len() && s.vips.iter().all(|v| addrs.contains(&v.addr))
}

/// Run the notify scripts for `to`: the state's own script, then the
/// generic `notify` with keepalived's arguments (`TYPE NAME STATE`, plus
/// the priority for an instance).
fn run_notify(n: &Notify, kind: &str, name: &str, to: State, priority: Option<u8>) {
    let one = match to {
        State::Master => &n.master,
        State::Backup => &n.backup,
        State::Fault => &n.fault,
        State::Stopped => &n.stop,
        State::Init => &None,
    };
    if to != State::Init {
        crate::notify::vrrp_event(kind, name, to.name(), priority.unwrap_or(0));
    }
    let why = format!("{kind} {name} {}", to.name());
    if let Some(script) = one {
        rvs_check::runner::run_script(script.clone(), why.clone());
    }
    if let Some(any) = &n.any {
        let mut script = any.clone();
        script.command = format!("{} {kind} {} {}", script.command, quote(name), to.name());
        if let Some(p) = priority {
            script.command = format!("{} {p}", script.command);
        }
        rvs_check::runner::run_script(script, why);
    }
}

/// Quote a word for the script command line (split on whitespace later).
fn quote(w: &str) -> String {
    if w.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'')
    {
        format!("\"{}\"", w.replace('"', "\\\""))
    } else {
        w.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(text: &str) -> Result<(Vec<Spec>, Vec<String>), String> {
        let loaded = rvs_config::parse_str("k.conf", text, &rvs_config::LoadOptions::default())
            .map_err(|e| e.to_string())?;
        plan(&loaded.config)
    }

    /// keepalived's `vrrp_down_timer_adverts`: the default of every
    /// instance's `down_timer_adverts`, which an instance's own overrides.
    #[test]
    fn vrrp_down_timer_adverts_is_the_instances_default() {
        let inst = |extra: &str| {
            format!(
                "global_defs {{\n vrrp_down_timer_adverts 7\n}}\nvrrp_instance VI_1 {{\n state BACKUP\n interface lo\n virtual_router_id 9\n priority 100\n{extra}}}\n"
            )
        };
        let (specs, warnings) = plan_of(&inst("")).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(specs[0].down_adverts, 7);
        let (specs, _) = plan_of(&inst(" down_timer_adverts 4\n")).unwrap();
        assert_eq!(specs[0].down_adverts, 4);
        let (specs, _) = plan_of(&inst("").replace(" vrrp_down_timer_adverts 7\n", "")).unwrap();
        assert_eq!(specs[0].down_adverts, 3);
    }

    /// The instance, script, sync group and global keywords no other test
    /// exercises, as the running instance takes them: its source address,
    /// whether its own interface is tracked, how its gratuitous ARPs repeat
    /// (the instance's, else the global defaults), its and its group's
    /// notify scripts, the VMAC's transmit interface, a script that starts
    /// failed, VRRP mail.
    #[test]
    fn instance_keywords_reach_the_running_instance() {
        let (specs, warnings) = plan_of(
            "global_defs {\n vrrp_garp_master_repeat 3\n vrrp_garp_master_refresh_repeat 2\n smtp_alert_vrrp\n}\n\
             vrrp_script S {\n script /bin/true\n init_fail\n}\n\
             vrrp_instance VI_1 {\n state BACKUP\n interface lo\n virtual_router_id 9\n priority 100\n\
             mcast_src_ip 127.0.0.2\n dont_track_primary\n nopreempt\n garp_master_delay 2\n garp_master_refresh 10\n garp_master_refresh_repeat 4\n\
             use_vmac\n vmac_xmit_base\n track_script {\n  S\n }\n\
             notify_master /bin/m\n notify_backup /bin/b\n notify_fault /bin/f\n notify_stop /bin/s\n}\n\
             vrrp_instance VI_2 {\n state BACKUP\n interface lo\n virtual_router_id 10\n priority 100\n nopreempt\n preempt\n}\n\
             vrrp_sync_group G {\n group {\n  VI_2\n }\n\
             notify_master /bin/gm\n notify_backup /bin/gb\n notify_fault /bin/gf\n notify_stop /bin/gs\n}\n",
        )
        .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let (a, b) = (&specs[0], &specs[1]);
        // mcast_src_ip: the advertisements' source.
        assert_eq!(a.src, Some("127.0.0.2".parse().unwrap()));
        assert_eq!(b.src, None);
        // dont_track_primary.
        assert!(!a.track_primary && b.track_primary);
        // nopreempt, and preempt after it.
        assert!(!a.preempt && b.preempt);
        // garp_master_delay.
        assert_eq!(a.garp_master_delay, Duration::from_secs(2));
        // garp_master_refresh(_repeat), else vrrp_garp_master_*_repeat.
        assert_eq!(
            (a.garp_refresh, a.garp_refresh_repeat, a.garp_repeat),
            (Duration::from_secs(10), 4, 3)
        );
        assert_eq!((b.garp_refresh_repeat, b.garp_repeat), (2, 3));
        // use_vmac + vmac_xmit_base.
        assert_eq!(a.vmac.as_deref(), Some("vrrp.9"));
        assert!(a.vmac_xmit_base && !b.vmac_xmit_base);
        // init_fail: the tracked script starts as failed.
        assert!(a.track_scripts[0].init_fail);
        // smtp_alert_vrrp: transitions are mailed without smtp_alert.
        assert!(a.mails(State::Master) && b.mails(State::Backup));
        let cmd = |s: &Option<ScriptSpec>| s.as_ref().map(|s| s.command.clone());
        let scripts = |n: &Notify| [cmd(&n.master), cmd(&n.backup), cmd(&n.fault), cmd(&n.stop)];
        let some = |v: [&str; 4]| v.map(|c| Some(c.to_owned()));
        // The instance's notify_* ...
        assert_eq!(
            scripts(&a.notify),
            some(["/bin/m", "/bin/b", "/bin/f", "/bin/s"])
        );
        // ... and the sync group's, run for its member's group.
        assert_eq!(b.sync_group.as_deref(), Some("G"));
        assert_eq!(
            scripts(&b.group_notify),
            some(["/bin/gm", "/bin/gb", "/bin/gf", "/bin/gs"])
        );
        assert_eq!(scripts(&a.group_notify), [None, None, None, None]);
    }

    /// keepalived's `no_email_faults`: an instance with `smtp_alert` mails
    /// every transition but FAULT; `email_faults` after it undoes it.
    #[test]
    fn no_email_faults_leaves_fault_transitions_unmailed() {
        let inst = "vrrp_instance VI_1 {\n state BACKUP\n interface lo\n virtual_router_id 9\n priority 100\n smtp_alert\n}\n";
        for (global, faults) in [
            ("", true),
            ("no_email_faults", false),
            ("no_email_faults\n email_faults", true),
        ] {
            let (specs, _) = plan_of(&format!("global_defs {{\n {global}\n}}\n{inst}")).unwrap();
            let s = &specs[0];
            assert_eq!(s.mails(State::Fault), faults, "{global:?}");
            assert!(
                s.mails(State::Master) && s.mails(State::Backup),
                "{global:?}"
            );
        }
        let (specs, _) = plan_of(&inst.replace(" smtp_alert\n", "")).unwrap();
        assert!(!specs[0].mails(State::Master));
    }

    #[test]
    fn track_files_are_resolved_with_keepalived_weights() {
        let (specs, warnings) = plan_of(
            "track_file up {
    file /run/rvs-test/up
    weight 5
    init_file 2 overwrite
}
vrrp_track_file down {
    file /run/rvs-test/down
    weight 3 reverse
}
vrrp_instance VI_1 {
    interface eth0
    virtual_router_id 51
    virtual_ipaddress {
        10.0.0.100
    }
    track_file {
        up
        down
        up weight -2 reverse
        gone
    }
}",
        )
        .unwrap();
        let t = &specs[0].track_files;
        assert_eq!(t.len(), 3);
        assert_eq!(
            (t[0].path.as_str(), t[0].weight, t[0].init),
            ("/run/rvs-test/up", 5, Some((2, true)))
        );
        assert_eq!((t[1].weight, t[1].init), (-3, None));
        assert_eq!(t[2].weight, 2, "the instance's reverse weight");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("track_file gone: no such track_file")),
            "{warnings:?}"
        );
        // keepalived's arithmetic: number × weight added; weight 0 and a
        // non-zero number, or a result below -253, is a fault.
        assert_eq!(with_files(100, [(5, 2), (-3, 1)].into_iter()), Some(107));
        assert_eq!(with_files(100, [(0, 0)].into_iter()), Some(100));
        assert_eq!(with_files(100, [(0, 1)].into_iter()), None);
        assert_eq!(with_files(100, [(254, -1)].into_iter()), None);
        assert_eq!(with_files(100, [(1, -253)].into_iter()), Some(-153));
        assert_eq!(with_files(100, [(200, 200)].into_iter()), Some(353));
        assert_eq!(track_file_value(" 12\n"), Some(12));
        assert_eq!(track_file_value("-999"), Some(-254));
        assert_eq!(track_file_value("x"), None);
        assert_eq!(track_file_value(""), None);
    }

    #[test]
    fn an_instance_is_resolved_with_keepalived_defaults() {
        let (specs, warnings) = plan_of(
            "global_defs { vrrp_garp_master_delay 3 }
vrrp_instance VI_1 {
    state MASTER
    interface eth0
    virtual_router_id 51
    priority 150
    nopreempt
    authentication {
        auth_type PASS
        auth_pass 0123456789
    }
    virtual_ipaddress {
        10.0.0.100/24
        10.0.1.1 dev eth1
    }
    virtual_ipaddress_excluded {
        2001:db8::1
    }
    track_interface {
        eth1 weight -20
    }
    notify \"/bin/true x\"
}",
        )
        .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let s = &specs[0];
        assert_eq!((s.vrid, s.version, s.priority, s.ipv6), (51, 2, 150, false));
        assert!(!s.preempt && s.initial_master);
        // keepalived sends the first 8 characters of the password.
        assert_eq!(s.auth, Some(*b"01234567"));
        assert_eq!(s.vips[1].dev, "eth1");
        assert_eq!(s.vips[0].prefix, Some(24));
        assert_eq!(s.excluded.len(), 1);
        assert_eq!(s.group, "224.0.0.18".parse::<IpAddr>().unwrap());
        assert_eq!(s.garp_master_delay, Duration::from_secs(3));
        assert_eq!(s.garp_repeat, 5);
        assert_eq!(s.garp_refresh, Duration::ZERO);
        assert_eq!(s.garp_refresh_repeat, 1);
        assert!(s.track_primary);
        assert_eq!(s.track_interfaces, [("eth1".to_string(), -20)]);
        assert_eq!(
            s.notify.any.as_ref().map(|n| n.command.as_str()),
            Some("/bin/true x")
        );
    }

    #[test]
    fn ipv6_instances_speak_v3_and_v3_ignores_authentication() {
        let (specs, warnings) = plan_of(
            "vrrp_instance V6 {
    interface eth0
    virtual_router_id 7
    authentication {
        auth_type PASS
        auth_pass x
    }
    virtual_ipaddress { 2001:db8::10/64 }
}",
        )
        .unwrap();
        assert_eq!((specs[0].version, specs[0].ipv6), (3, true));
        assert_eq!(specs[0].auth, None);
        assert!(warnings[0].contains("ignored with VRRPv3"), "{warnings:?}");
    }

    #[test]
    fn sync_group_members_share_the_group_and_its_tracking_as_faults() {
        let (specs, warnings) = plan_of(
            "vrrp_sync_group G {
    group {
        A
        NOPE
    }
    track_interface {
        eth9
    }
}
vrrp_instance A {
    interface eth0
    virtual_router_id 1
    track_interface {
        eth1 weight 10
    }
}
vrrp_instance B {
    interface eth0
    virtual_router_id 2
}",
        )
        .unwrap();
        assert_eq!(specs[0].sync_group.as_deref(), Some("G"));
        assert_eq!(specs[1].sync_group, None);
        assert_eq!(
            specs[0].track_interfaces,
            [("eth1".to_string(), 0), ("eth9".to_string(), 0)]
        );
        assert!(
            warnings.iter().any(|w| w.contains("no vrrp_instance NOPE")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("weights are ignored")),
            "{warnings:?}"
        );
    }

    #[test]
    fn what_cannot_run_is_refused_with_its_location() {
        let e = plan_of("vrrp_instance A {\n virtual_router_id 1\n}").unwrap_err();
        assert!(
            e.starts_with("k.conf:1:1") && e.contains("no `interface`"),
            "{e}"
        );
        let e = plan_of("vrrp_instance A {\n interface eth0\n}").unwrap_err();
        assert!(e.contains("no `virtual_router_id`"), "{e}");
        let head = "vrrp_instance A {\n interface eth0\n virtual_router_id 1\n";
        let e = plan_of(&format!(
            "{head} virtual_ipaddress {{\n 10.0.0.1\n 2001:db8::1\n }}\n}}"
        ))
        .unwrap_err();
        assert!(e.contains("mixes IPv4 and IPv6"), "{e}");
        let e = plan_of(&format!("{head} authentication {{\n auth_type AH\n }}\n}}")).unwrap_err();
        assert!(e.contains("AH"), "{e}");
        let e = plan_of(&format!(
            "{head}}}\nvrrp_instance B {{\n interface eth0\n virtual_router_id 1\n}}"
        ))
        .unwrap_err();
        assert!(e.contains("the same virtual_router_id 1"), "{e}");
    }
}

#[cfg(test)]
mod strict_tests {
    use super::*;

    fn plan_of(text: &str) -> Result<(Vec<Spec>, Vec<String>), String> {
        let loaded = rvs_config::parse_str("k.conf", text, &rvs_config::LoadOptions::default())
            .map_err(|e| e.to_string())?;
        plan(&loaded.config)
    }

    const BODY: &str = "    interface eth0\n    virtual_router_id 51\n    advert_int 1\n";

    /// keepalived's vrrp_strict (vrrp.c's vrrp_complete_instance): no
    /// authentication, preempt_delay or other down_timer_adverts, state
    /// MASTER only for the address owner, and neither unicast peers nor an
    /// instance without addresses.
    #[test]
    fn vrrp_strict_applies_keepalived_s_checks_and_refusals() {
        let (specs, warnings) = plan_of(&format!(
            "global_defs {{\n vrrp_strict\n}}\nvrrp_instance VI_1 {{\n{BODY}    state MASTER\n    priority 100\n    preempt_delay 5\n    down_timer_adverts 5\n    authentication {{\n        auth_type PASS\n        auth_pass secret\n    }}\n    virtual_ipaddress {{\n        10.0.0.100/24\n    }}\n}}\n"
        ))
        .unwrap();
        let s = &specs[0];
        assert!(s.strict);
        assert_eq!(s.auth, None);
        assert_eq!(s.preempt_delay, Duration::ZERO);
        assert_eq!(s.down_adverts, 3);
        assert!(!s.initial_master, "MASTER only for priority 255");
        for w in [
            "State MASTER must match being address owner",
            "Strict mode does not support authentication. Ignoring.",
            "preempt_delay is incompatible with strict mode - resetting",
            "down_timer_adverts is incompatible with strict mode - resetting",
            "firewall rules",
        ] {
            assert!(warnings.iter().any(|x| x.contains(w)), "{w}: {warnings:?}");
        }
        // Received adverts must carry exactly our addresses.
        let ours: IpAddr = "10.0.0.100".parse().unwrap();
        let other: IpAddr = "10.0.0.101".parse().unwrap();
        assert!(advertises_ours(s, &[ours]));
        assert!(!advertises_ours(s, &[other]));
        assert!(!advertises_ours(s, &[ours, other]));

        let e = plan_of(&format!(
            "vrrp_instance VI_1 {{\n{BODY}    strict_mode\n    priority 100\n    unicast_peer {{\n        10.0.0.2\n    }}\n    virtual_ipaddress {{\n        10.0.0.100/24\n    }}\n}}\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("Unicast peers are not supported in strict mode"),
            "{e}"
        );
        let e = plan_of(&format!(
            "global_defs {{\n vrrp_strict\n}}\nvrrp_instance VI_1 {{\n{BODY}    priority 100\n}}\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("No VIP specified; at least one is required"),
            "{e}"
        );

        // Without strict mode, none of it.
        let (specs, _) = plan_of(&format!(
            "vrrp_instance VI_1 {{\n{BODY}    priority 100\n    preempt_delay 5\n    unicast_peer {{\n        10.0.0.2\n    }}\n    virtual_ipaddress {{\n        10.0.0.100/24\n    }}\n}}\n"
        ))
        .unwrap();
        assert!(!specs[0].strict);
        assert_eq!(specs[0].preempt_delay, Duration::from_secs(5));
    }
}
