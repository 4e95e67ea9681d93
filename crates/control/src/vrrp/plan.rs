//! VRRP planning, sans-IO: keepalived.conf's `vrrp_instance` blocks (with
//! their sync groups, tracked scripts, files and processes, virtual
//! addresses, routes and rules) turned into one [`Spec`] per instance, the
//! plan the tasks run (rvsd's VRRP driver). No sockets, no tasks, no
//! clock: the decisions only.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use rvs_config::model::{KeepalivedConf as KaConfig, VrrpInstance, VrrpState};
use rvs_core::vrrp::State;
use rvs_wire::vrrp as wire;

use super::Process;
use crate::routes;
pub use crate::script::NOT_APPLIED;
use crate::script::ScriptSpec;

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
    /// `notify_master`.
    pub master: Option<ScriptSpec>,
    /// `notify_backup`.
    pub backup: Option<ScriptSpec>,
    /// `notify_fault`.
    pub fault: Option<ScriptSpec>,
    /// `notify_stop`.
    pub stop: Option<ScriptSpec>,
    /// `notify`: every transition, with keepalived's arguments.
    pub any: Option<ScriptSpec>,
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
    pub track_processes: Vec<(Process, i32, bool)>,
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
    pub routes: routes::Set,
}

impl Spec {
    /// Whether a transition to `to` is mailed: `smtp_alert`, and a FAULT
    /// only without the global `no_email_faults` (keepalived's rule).
    pub fn mails(&self, to: State) -> bool {
        self.smtp_alert && (to != State::Fault || self.email_faults)
    }

    /// Strict mode: whether an advertisement carrying `addrs` carries
    /// exactly this instance's advertised addresses (the count, and each
    /// of ours), as keepalived checks them.
    pub fn advertises_ours(&self, addrs: &[IpAddr]) -> bool {
        addrs.len() == self.vips.len() && self.vips.iter().all(|v| addrs.contains(&v.addr))
    }
}

impl Notify {
    /// The scripts of an instance's or a group's `notify*` keywords.
    fn of(n: &rvs_config::model::Notify) -> Self {
        Notify {
            master: ScriptSpec::of(&n.master),
            backup: ScriptSpec::of(&n.backup),
            fault: ScriptSpec::of(&n.fault),
            stop: ScriptSpec::of(&n.stop),
            any: ScriptSpec::of(&n.any),
        }
    }
}

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
        track_processes.push((Process::of(tp), weight, reverse));
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
        routes: routes::Set {
            addrs: Vec::new(),
            routes: v.virtual_routes.iter().map(routes::route).collect(),
            rules: v.virtual_rules.iter().map(routes::rule).collect(),
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
