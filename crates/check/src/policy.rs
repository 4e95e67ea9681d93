//! keepalived's health-check semantics as a sans-IO state machine.
//!
//! No sockets, no clock, no tasks: time is an argument and everything the
//! policy wants done comes out as an [`Action`] (quinn-proto style). A
//! driver (the [`crate::runner`]) calls:
//! * [`Policy::reconfigure`] with the checkers of a configuration (at start
//!   and on every reload; state of unchanged checkers and real servers is
//!   kept);
//! * [`Policy::poll_timeout`] / [`Policy::handle_timeout`] to learn when the
//!   next probe is due and to start due probes ([`Action::Probe`]);
//! * [`Policy::handle_result`] with each probe's outcome;
//! * [`Policy::poll_action`] to drain what to do: probes to start, virtual
//!   servers whose real-server set changed ([`Action::Sync`], read the new set
//!   with [`Policy::desired`]), scripts to run, transitions to log.
//!
//! The rules are keepalived's (keepalived/check/check_*.c `*_epilog`,
//! ipwrapper.c):
//! * after a success, or a failure that is accepted, the next check runs
//!   `delay_loop` later;
//! * a failure of a checker that is UP is retried up to `retry` times,
//!   `delay_before_retry` apart, before it is accepted (checker DOWN); a
//!   failure of a checker that is already DOWN just waits `delay_loop`;
//!   a success resets the retry count;
//! * a checker starts UP, or DOWN with `alpha`; its first check is delayed
//!   by a random time up to `warmup`; until it has run, one failure is
//!   enough (no retries at start);
//! * a real server is alive when all its checkers are UP (one without
//!   checkers is always alive); alive → in the pool with its weight; not
//!   alive → out of the pool, or in with weight 0 with `inhibit_on_failure`;
//! * `misc_dynamic` results set the real server's weight (exit code − 2;
//!   exit 0 restores the configured weight, check_misc.c); a MISC_CHECK
//!   times its next run from the start of the previous one, the others
//!   from the end;
//! * per virtual server, `sum` = total weight of alive real servers; quorum is
//!   lost when `sum == 0 || sum < quorum - hysteresis` and gained when
//!   `sum >= quorum + hysteresis`; a new virtual server starts with quorum
//!   iff `sum >= quorum + hysteresis` (silently, unless it has a sorry
//!   server to put in). On loss `quorum_down` runs and, with a
//!   `sorry_server`, the sorry server replaces the alive real servers; on
//!   gain the real servers come back and `quorum_up` runs. With
//!   `sorry_server_inhibit` the sorry server stays listed with weight 0 while
//!   it is not needed;
//! * `notify_up` / `notify_down` run when a real server changes (keepalived
//!   runs them with no extra arguments; the command line is the script's);
//! * with `omega`, [`Policy::shutdown`] runs the down notifiers of alive real
//!   servers, then `quorum_down`, as keepalived does on exit.
//!
//! Detection time: a server that dies right after a successful check is
//! declared down `delay_loop + retry × delay_before_retry + (retry + 1) × T`
//! later, where `T` is how long one failing probe takes (near zero for a
//! refused connection, `connect_timeout` for a blackhole). keepalived states
//! it as `delay_loop + retry × (connect_timeout + delay_before_retry)`, which
//! counts the first probe inside `delay_loop`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use rvs_control::state::ServiceDef;
use rvs_core::model::{DestConfig, ServiceKey};
use serde::Serialize;

/// Stable identity of a checker: kept across reloads for checkers that did
/// not change, so an in-flight probe's result still lands on its checker.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct CheckerId(pub u64);

impl fmt::Display for CheckerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A checker's timing, resolved (keepalived's inheritance already applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Interval between checks.
    pub delay_loop: Duration,
    /// Retries of a failing UP checker before the failure is accepted.
    pub retry: u32,
    /// Delay between those retries.
    pub delay_before_retry: Duration,
    /// Maximum random delay before the first check.
    pub warmup: Duration,
    /// Start DOWN (until the first success).
    pub alpha: bool,
}

/// A script to run (notify_up/down, quorum_up/down).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScriptSpec {
    /// The command line as written.
    pub command: String,
    /// `user [group]` as written, if any.
    pub user: Option<String>,
}

/// One checker of a real server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckerSpec {
    /// Human label for logs and `rvsadm`, e.g. `TCP_CHECK 10.0.0.2:80`.
    pub label: String,
    /// What identifies this checker across reloads (its type and every
    /// option): a checker whose identity is unchanged keeps its state.
    pub identity: String,
    /// Timing.
    pub timing: Timing,
    /// `log_all_failures` (or the global `checker_log_all_failures`): log
    /// every failure of an UP checker, not only the accepted one.
    pub log_all_failures: bool,
    /// `MISC_CHECK` with `misc_dynamic`: a success carries the weight (exit
    /// code − 2), and exit 0 (no weight) restores the configured weight.
    pub misc_dynamic: bool,
    /// `MISC_CHECK` times its next run from the start of the previous one
    /// (keepalived's `last_ran`); the other checkers from its end.
    pub interval_from_start: bool,
    /// The body of the `smtp_alert` mail this checker's changes send
    /// (keepalived's words differ by checker).
    pub mail: MailText,
}

/// What a checker's `smtp_alert` mail says (keepalived's check_*.c): the
/// body is `=> UP <=` when the checker succeeds again and `=> DOWN <=`
/// (with ` : REASON` before the `<=` when `reason`) when it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MailText {
    /// e.g. `TCP CHECK succeed on service`.
    pub up: &'static str,
    /// e.g. `TCP CHECK failed on service`.
    pub down: &'static str,
    /// Whether the failure's reason is part of the body (HTTP_GET, SSL_GET,
    /// SMTP_CHECK: `=> CHECK failed on service : REASON <=`).
    pub reason: bool,
}

impl MailText {
    /// keepalived's texts for a checker of this `keyword` (`TCP_CHECK`, ...).
    pub fn of(keyword: &str) -> MailText {
        let (up, down, reason) = match keyword {
            "TCP_CHECK" => (
                "TCP CHECK succeed on service",
                "TCP CHECK failed on service",
                false,
            ),
            "UDP_CHECK" => (
                "UDP CHECK succeed on service",
                "UDP CHECK failed on service",
                false,
            ),
            "PING_CHECK" => (
                "ICMP CHECK succeed on service",
                "ICMP CHECK failed on service",
                false,
            ),
            "DNS_CHECK" => (
                "DNS_CHECK: succeed on service",
                "DNS_CHECK: failed on service",
                false,
            ),
            "MISC_CHECK" => (
                "MISC CHECK succeeded on service",
                "MISC CHECK failed on service",
                false,
            ),
            "HTTP_GET" | "SSL_GET" | "SMTP_CHECK" => {
                ("CHECK succeed on service", "CHECK failed on service", true)
            }
            _ => ("CHECK succeed on service", "CHECK failed on service", false),
        };
        MailText { up, down, reason }
    }

    /// The body for a checker now `up` (else failed with `reason`).
    pub fn body(&self, up: bool, reason: &str) -> String {
        if up {
            format!("=> {} <=", self.up)
        } else if self.reason && !reason.is_empty() {
            format!("=> {} : {reason} <=", self.down)
        } else {
            format!("=> {} <=", self.down)
        }
    }
}

/// A real server as the policy sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RsSpec {
    /// `addr:port` for logs (also its identity within its virtual server).
    pub name: String,
    /// Configured weight.
    pub weight: u32,
    /// `inhibit_on_failure`: weight 0 instead of removal.
    pub inhibit: bool,
    /// `notify_up`.
    pub notify_up: Option<ScriptSpec>,
    /// `notify_down`.
    pub notify_down: Option<ScriptSpec>,
    /// `smtp_alert` (else the global `smtp_alert_checker`, else
    /// `smtp_alert`, else on, as keepalived): mail its checkers' changes.
    pub smtp_alert: bool,
    /// Checkers (none = always alive).
    pub checkers: Vec<CheckerSpec>,
}

/// One IPVS service a virtual server expands to (a `virtual_server group`
/// gives several), with its real servers as configured for that service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSlot {
    /// The service.
    pub key: ServiceKey,
    /// Real servers, aligned with [`VsSpec::reals`] (same index, same server).
    pub dests: Vec<DestConfig>,
    /// The sorry server for this service.
    pub sorry: Option<DestConfig>,
}

/// A virtual server as the policy sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VsSpec {
    /// Name for logs (also its identity across reloads).
    pub name: String,
    /// The services it expands to.
    pub services: Vec<ServiceSlot>,
    /// `quorum` (already sanity-adjusted).
    pub quorum: u32,
    /// `hysteresis` (already sanity-adjusted).
    pub hysteresis: u32,
    /// `quorum_up`.
    pub quorum_up: Option<ScriptSpec>,
    /// `quorum_down`.
    pub quorum_down: Option<ScriptSpec>,
    /// `sorry_server_inhibit`.
    pub sorry_inhibit: bool,
    /// `omega`.
    pub omega: bool,
    /// `smtp_alert` (else the global `smtp_alert_checker`, else
    /// `smtp_alert`, else off, as keepalived): mail its quorum changes.
    pub smtp_alert: bool,
    /// Real servers.
    pub reals: Vec<RsSpec>,
}

/// The health-check part of a configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthConfig {
    /// Virtual servers.
    pub virtual_servers: Vec<VsSpec>,
    /// `no_checker_emails`: a checker's change is mailed only when it
    /// changes its real server's state.
    pub no_checker_emails: bool,
    /// `rs_init_notifies`: a real server added alive (at start or by a
    /// reload) runs its `notify_up` and writes its FIFO line.
    pub rs_init_notifies: bool,
}

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Success, or why it failed ("timeout", "connection refused", ...).
    pub result: Result<(), String>,
    /// A weight reported by a `misc_dynamic` check (exit code − 2).
    pub weight: Option<u32>,
    /// How long the probe took.
    pub latency: Duration,
}

impl Outcome {
    /// A success.
    pub fn ok() -> Self {
        Outcome {
            result: Ok(()),
            weight: None,
            latency: Duration::ZERO,
        }
    }

    /// A failure with its reason.
    pub fn fail(reason: &str) -> Self {
        Outcome {
            result: Err(reason.to_owned()),
            weight: None,
            latency: Duration::ZERO,
        }
    }
}

/// A state change, for logs and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A checker went UP.
    CheckerUp {
        /// The checker.
        checker: CheckerId,
        /// Virtual server index.
        vs: usize,
        /// Real server index.
        rs: usize,
    },
    /// A checker went DOWN.
    CheckerDown {
        /// The checker.
        checker: CheckerId,
        /// Virtual server index.
        vs: usize,
        /// Real server index.
        rs: usize,
        /// The last failure.
        reason: String,
        /// Retries made before accepting the failure.
        retries: u32,
    },
    /// A failure of an UP checker that is going to be retried (reported
    /// only with `log_all_failures`).
    CheckFailed {
        /// The checker.
        checker: CheckerId,
        /// The failure.
        reason: String,
        /// Retry about to be made (1-based).
        retry: u32,
    },
    /// A real server became alive.
    RealServerUp {
        /// Virtual server index.
        vs: usize,
        /// Real server index.
        rs: usize,
    },
    /// A real server is no longer alive.
    RealServerDown {
        /// Virtual server index.
        vs: usize,
        /// Real server index.
        rs: usize,
        /// Why (the failing checker and its reason).
        reason: String,
    },
    /// A real server's weight changed (misc_dynamic).
    Weight {
        /// Virtual server index.
        vs: usize,
        /// Real server index.
        rs: usize,
        /// Old weight.
        from: u32,
        /// New weight.
        to: u32,
    },
    /// Quorum gained.
    QuorumGained {
        /// Virtual server index.
        vs: usize,
        /// Alive weight.
        sum: u64,
    },
    /// Quorum lost.
    QuorumLost {
        /// Virtual server index.
        vs: usize,
        /// Alive weight.
        sum: u64,
    },
}

/// Something for the driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start this checker's probe now; report with [`Policy::handle_result`].
    Probe(CheckerId),
    /// The real servers that should be in this virtual server's services
    /// changed: read them with [`Policy::desired`] and apply the difference.
    Sync(usize),
    /// Run a script.
    Script {
        /// The script.
        script: ScriptSpec,
        /// What triggered it, for the log.
        why: String,
    },
    /// A transition to log and count.
    Event(Event),
    /// A line for the LVS notify FIFOs (`notify_fifo`, `lvs_notify_fifo`),
    /// keepalived's: `RS [10.0.0.2]:tcp:80 [192.0.2.1]:tcp:80 UP` or
    /// `VS [192.0.2.1]:tcp:80 DOWN`, newline-terminated.
    Fifo(String),
    /// keepalived's `smtp_alert` mail: the subject after `[ROUTER_ID] `
    /// (`Realserver [10.0.0.2]:tcp:80 of virtual server [192.0.2.1]:tcp:80 -
    /// DOWN`, `Virtualserver [192.0.2.1]:tcp:80 - UP`) and the body.
    Mail {
        /// The subject without the `[ROUTER_ID] ` the mailer puts first.
        subject: String,
        /// The body (`=> TCP CHECK failed on service <=`).
        body: String,
    },
}

/// keepalived's `[ADDR]:PROTO:PORT` of an address in a service of
/// `protocol`.
fn trio(addr: std::net::IpAddr, protocol: rvs_core::model::Protocol, port: u16) -> String {
    let proto = match protocol {
        rvs_core::model::Protocol::Tcp => "tcp",
        rvs_core::model::Protocol::Udp => "udp",
        rvs_core::model::Protocol::Sctp => "sctp",
    };
    format!("[{addr}]:{proto}:{port}")
}

/// keepalived's name of a virtual server in its FIFO lines (`FMT_VS`):
/// `[ADDR]:PROTO:PORT`, `FWM MARK`, or `[GROUP]:0` for a group.
fn fmt_vs(spec: &VsSpec) -> String {
    if let Some(group) = spec.name.strip_prefix("group ") {
        return format!("[{group}]:0");
    }
    match spec.services.first().map(|s| s.key) {
        Some(ServiceKey::Addr {
            protocol,
            addr,
            port,
        }) => trio(addr, protocol, port),
        Some(ServiceKey::Fwmark { mark, .. }) => format!("FWM {mark}"),
        None => spec.name.clone(),
    }
}

/// keepalived's name of a real server in its FIFO lines (`FMT_RS`):
/// `[ADDR]:PROTO:PORT`, the protocol the virtual server's (a fwmark
/// service has none: `none`).
fn fmt_rs(spec: &VsSpec, rs: usize) -> String {
    let Some(slot) = spec.services.first() else {
        return spec
            .reals
            .get(rs)
            .map_or_else(String::new, |r| r.name.clone());
    };
    let Some(d) = slot.dests.get(rs) else {
        return spec
            .reals
            .get(rs)
            .map_or_else(String::new, |r| r.name.clone());
    };
    match slot.key {
        ServiceKey::Addr { protocol, .. } => trio(d.addr, protocol, d.port),
        ServiceKey::Fwmark { .. } => format!("[{}]:none:{}", d.addr, d.port),
    }
}

fn up_down(up: bool) -> &'static str {
    if up { "UP" } else { "DOWN" }
}

#[derive(Clone, Debug)]
struct Chk {
    id: CheckerId,
    vs: usize,
    rs: usize,
    nth: usize,
    spec: CheckerSpec,
    is_up: bool,
    has_run: bool,
    retry_it: u32,
    due: Option<Instant>,
    /// When the running probe was due (its start minus this = lateness).
    started_due: Option<Instant>,
    /// When the running probe started.
    started_at: Option<Instant>,
    in_flight: bool,
    last_failure: Option<String>,
    last_latency: Option<Duration>,
    last_result_ok: Option<bool>,
}

#[derive(Clone, Debug)]
struct Rs {
    alive: bool,
    weight: u32,
    failed: usize,
    down_reason: Option<String>,
}

#[derive(Clone, Debug)]
struct Vs {
    quorum_up: bool,
    rs: Vec<Rs>,
}

/// Status of one checker, for `rvsadm --checks` and the JSON view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckerStatus {
    /// Id.
    pub id: CheckerId,
    /// Label.
    pub label: String,
    /// UP?
    pub up: bool,
    /// Has it run at least once?
    pub has_run: bool,
    /// Retries made in the current failure streak.
    pub retries: u32,
    /// The last failure reason seen (kept after recovery, for diagnosis).
    pub last_failure: Option<String>,
    /// The last result: true success, false failure, none yet.
    pub last_ok: Option<bool>,
    /// Last probe latency in microseconds.
    pub last_latency_us: Option<u64>,
}

/// Status of one real server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RsStatus {
    /// `addr:port`.
    pub name: String,
    /// Alive (all checkers up)?
    pub alive: bool,
    /// Current weight (configured or from misc_dynamic).
    pub weight: u32,
    /// Configured weight.
    pub configured_weight: u32,
    /// inhibit_on_failure.
    pub inhibit: bool,
    /// Why it is down, if it is.
    pub down_reason: Option<String>,
    /// Checkers.
    pub checkers: Vec<CheckerStatus>,
}

/// Status of one virtual server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VsStatus {
    /// Name.
    pub name: String,
    /// Quorum held?
    pub quorum_up: bool,
    /// Quorum setting.
    pub quorum: u32,
    /// Hysteresis setting.
    pub hysteresis: u32,
    /// Total weight of alive real servers.
    pub alive_weight: u64,
    /// The sorry server is in the pool.
    pub sorry_active: bool,
    /// Real servers.
    pub reals: Vec<RsStatus>,
}

/// splitmix64: a well-mixed 64-bit hash for deterministic jitter.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The health-check state machine of a whole configuration.
#[derive(Clone, Debug)]
pub struct Policy {
    config: HealthConfig,
    vs: Vec<Vs>,
    checkers: Vec<Chk>,
    by_id: HashMap<CheckerId, usize>,
    queue: BTreeSet<(Instant, CheckerId)>,
    actions: VecDeque<Action>,
    dirty: Vec<bool>,
    next_id: u64,
    seed: u64,
}

fn dest_id(d: &DestConfig) -> (IpAddr, u16) {
    (d.addr, d.port)
}

impl Policy {
    /// An empty policy. `seed` drives the random `warmup` delays (take it
    /// from the OS in the daemon, fix it in tests).
    pub fn new(seed: u64) -> Self {
        Policy {
            config: HealthConfig::default(),
            vs: Vec::new(),
            checkers: Vec::new(),
            by_id: HashMap::new(),
            queue: BTreeSet::new(),
            actions: VecDeque::new(),
            dirty: Vec::new(),
            next_id: 1,
            seed,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &HealthConfig {
        &self.config
    }

    /// Install a (new) configuration at `now`. Checkers whose virtual
    /// server, real server and identity are unchanged keep their state (up or
    /// down, retries, next due time, an in-flight probe); real servers keep
    /// their alive state and dynamic weight (a configured weight change
    /// wins), so a server that is down stays out after a reload. New
    /// checkers start UP (DOWN with `alpha`) and run after their warmup.
    /// Quorum is re-evaluated for every virtual server.
    ///
    /// The caller applies [`Policy::overlay`] to the new service table.
    pub fn reconfigure(&mut self, now: Instant, config: HealthConfig) {
        // Old state by identity.
        let mut old_chk: HashMap<(&str, &str, &str, usize), &Chk> = HashMap::new();
        for c in &self.checkers {
            let vs = &self.config.virtual_servers[c.vs];
            let rs = &vs.reals[c.rs];
            old_chk.insert(
                (
                    vs.name.as_str(),
                    rs.name.as_str(),
                    c.spec.identity.as_str(),
                    c.nth,
                ),
                c,
            );
        }
        let mut old_rs: HashMap<(&str, &str), (&Rs, &RsSpec)> = HashMap::new();
        let mut old_vs: HashMap<&str, &Vs> = HashMap::new();
        for (vi, vs) in self.config.virtual_servers.iter().enumerate() {
            old_vs.insert(vs.name.as_str(), &self.vs[vi]);
            for (ri, rs) in vs.reals.iter().enumerate() {
                old_rs.insert(
                    (vs.name.as_str(), rs.name.as_str()),
                    (&self.vs[vi].rs[ri], rs),
                );
            }
        }

        let mut vs_states = Vec::with_capacity(config.virtual_servers.len());
        let mut new_vs = Vec::with_capacity(config.virtual_servers.len());
        let mut checkers = Vec::new();
        let mut next_id = self.next_id;
        let mut added_alive = Vec::new();
        for (vi, vs) in config.virtual_servers.iter().enumerate() {
            let mut rs_states = Vec::with_capacity(vs.reals.len());
            for (ri, rs) in vs.reals.iter().enumerate() {
                let mut failed = 0;
                let mut reason = None;
                let kept = old_rs.get(&(vs.name.as_str(), rs.name.as_str()));
                // keepalived's migrate_checkers: a checker new to a kept
                // server starts down with alpha only if the server is not
                // alive; on an alive server it does not take it down.
                let kept_alive = kept.is_some_and(|(old, _)| old.alive);
                for (ci, spec) in rs.checkers.iter().enumerate() {
                    let key = (
                        vs.name.as_str(),
                        rs.name.as_str(),
                        spec.identity.as_str(),
                        ci,
                    );
                    let chk = match old_chk.get(&key) {
                        Some(old) => Chk {
                            vs: vi,
                            rs: ri,
                            nth: ci,
                            spec: spec.clone(),
                            ..(*old).clone()
                        },
                        None => {
                            let id = CheckerId(next_id);
                            next_id += 1;
                            let warmup = spec.timing.warmup.as_millis() as u64;
                            let delay = if warmup == 0 {
                                0
                            } else {
                                mix(self.seed ^ mix(id.0)) % (warmup + 1)
                            };
                            Chk {
                                id,
                                vs: vi,
                                rs: ri,
                                nth: ci,
                                spec: spec.clone(),
                                is_up: !spec.timing.alpha || kept_alive,
                                has_run: false,
                                // keepalived: at start "one failure is
                                // enough" (retries begin once it has run).
                                retry_it: spec.timing.retry,
                                due: Some(now + Duration::from_millis(delay)),
                                started_due: None,
                                started_at: None,
                                in_flight: false,
                                last_failure: None,
                                last_latency: None,
                                last_result_ok: None,
                            }
                        }
                    };
                    if !chk.is_up {
                        failed += 1;
                        if reason.is_none() {
                            reason = Some(match &chk.last_failure {
                                Some(r) => format!("{}: {r}", chk.spec.label),
                                None => format!("{}: not yet checked (alpha)", chk.spec.label),
                            });
                        }
                    }
                    checkers.push(chk);
                }
                let (alive, weight) = match kept {
                    Some((old, old_spec)) => {
                        let weight = if old_spec.weight != rs.weight {
                            rs.weight
                        } else {
                            old.weight
                        };
                        // A kept server keeps its state, unless the checkers
                        // that made it fail are gone.
                        (old.alive || failed == 0, weight)
                    }
                    None => {
                        if failed == 0 {
                            added_alive.push((vi, ri));
                        }
                        (failed == 0, rs.weight)
                    }
                };
                rs_states.push(Rs {
                    alive,
                    weight,
                    failed,
                    down_reason: if alive { None } else { reason },
                });
            }
            // keepalived's set_quorum_states for a new virtual server;
            // a kept one keeps its state (re-evaluated below).
            let quorum_up = match old_vs.get(vs.name.as_str()) {
                Some(v) => v.quorum_up,
                None => {
                    let sum: u64 = rs_states
                        .iter()
                        .filter(|r| r.alive)
                        .map(|r| u64::from(r.weight.min(65535)))
                        .sum();
                    sum >= u64::from(vs.quorum) + u64::from(vs.hysteresis)
                }
            };
            let was_known = old_vs.contains_key(vs.name.as_str());
            new_vs.push(!was_known);
            vs_states.push(Vs {
                quorum_up,
                rs: rs_states,
            });
        }
        self.next_id = next_id;
        self.config = config;
        self.vs = vs_states;
        self.checkers = checkers;
        self.by_id = self
            .checkers
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id, i))
            .collect();
        self.queue = self
            .checkers
            .iter()
            .filter(|c| !c.in_flight)
            .filter_map(|c| c.due.map(|d| (d, c.id)))
            .collect();
        self.dirty = vec![false; self.vs.len()];
        // Indices in pending transitions refer to the old table; probes and
        // scripts stay valid.
        self.actions
            .retain(|a| matches!(a, Action::Probe(_) | Action::Script { .. }));
        // keepalived's init_service_rs: with `rs_init_notifies`, a server
        // that starts alive gets its up notifiers.
        if self.config.rs_init_notifies {
            for (vi, ri) in added_alive {
                let spec = &self.config.virtual_servers[vi];
                let r = &spec.reals[ri];
                if let Some(script) = r.notify_up.clone() {
                    let why = format!(
                        "real server {} of {} up (rs_init_notifies)",
                        r.name, spec.name
                    );
                    self.actions.push_back(Action::Script { script, why });
                }
                self.push_rs_fifo(vi, ri, true);
            }
        }
        for (vi, fresh) in new_vs.into_iter().enumerate() {
            self.update_quorum(vi, fresh);
        }
        // The caller installs the overlay itself: nothing is dirty yet.
        self.actions.retain(|a| !matches!(a, Action::Sync(_)));
        self.dirty.iter_mut().for_each(|d| *d = false);
    }

    /// When the next probe is due (none when nothing is scheduled).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.queue.first().map(|(t, _)| *t)
    }

    /// Start every probe due at `now` (as [`Action::Probe`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, id)) = self.queue.first() {
            if t > now {
                break;
            }
            self.queue.pop_first();
            if let Some(&i) = self.by_id.get(&id) {
                let c = &mut self.checkers[i];
                c.due = None;
                c.started_due = Some(t);
                c.started_at = Some(now);
                c.in_flight = true;
                self.actions.push_back(Action::Probe(id));
            }
        }
    }

    /// The next thing to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        let a = self.actions.pop_front()?;
        if let Action::Sync(vs) = a
            && let Some(d) = self.dirty.get_mut(vs)
        {
            *d = false;
        }
        Some(a)
    }

    /// A probe finished at `now`. Results of checkers that no longer exist
    /// (removed by a reload) are ignored.
    pub fn handle_result(&mut self, now: Instant, id: CheckerId, outcome: Outcome) {
        let Some(&i) = self.by_id.get(&id) else {
            return;
        };
        let (vs, rs) = (self.checkers[i].vs, self.checkers[i].rs);
        let ok = outcome.result.is_ok();
        {
            let c = &mut self.checkers[i];
            c.in_flight = false;
            c.last_latency = Some(outcome.latency);
            c.last_result_ok = Some(ok);
            if let Err(r) = &outcome.result {
                c.last_failure = Some(r.clone());
            }
        }
        // misc_dynamic: the weight is set before the success is handled;
        // exit 0 (no weight) means the configured weight.
        if ok {
            let configured = self.config.virtual_servers[vs].reals[rs].weight;
            match (outcome.weight, self.checkers[i].spec.misc_dynamic) {
                (Some(w), _) => self.set_weight(vs, rs, w),
                (None, true) => self.set_weight(vs, rs, configured),
                (None, false) => {}
            }
        }
        let t = self.checkers[i].spec.timing.clone();
        let (is_up, has_run, retry_it) = {
            let c = &self.checkers[i];
            (c.is_up, c.has_run, c.retry_it)
        };
        let mut delay = t.delay_loop;
        if ok || ((is_up || !has_run) && retry_it >= t.retry) {
            self.checkers[i].retry_it = 0;
            if ok && (!is_up || !has_run) {
                self.checker_state(i, true, String::new(), retry_it);
            } else if !ok && (is_up || !has_run) {
                let reason = outcome.result.err().unwrap_or_default();
                self.checker_state(i, false, reason, retry_it);
            }
        } else if is_up {
            delay = t.delay_before_retry;
            self.checkers[i].retry_it += 1;
            if self.checkers[i].spec.log_all_failures {
                self.actions.push_back(Action::Event(Event::CheckFailed {
                    checker: id,
                    reason: outcome.result.err().unwrap_or_default(),
                    retry: retry_it + 1,
                }));
            }
        }
        let c = &mut self.checkers[i];
        c.has_run = true;
        let base = match (c.spec.interval_from_start, c.started_at) {
            (true, Some(start)) => start,
            _ => now,
        };
        let due = (base + delay).max(now);
        c.due = Some(due);
        self.queue.insert((due, id));
    }

    /// keepalived's update_svr_checker_state.
    fn checker_state(&mut self, i: usize, up: bool, reason: String, retries: u32) {
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
    fn push_rs_fifo(&mut self, vs: usize, rs: usize, alive: bool) {
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
    fn push_vs_fifo(&mut self, vs: usize, up: bool) {
        let spec = &self.config.virtual_servers[vs];
        let line = format!("VS {} {}\n", fmt_vs(spec), up_down(up));
        self.actions.push_back(Action::Fifo(line));
    }

    /// keepalived's update_svr_wgt.
    fn set_weight(&mut self, vs: usize, rs: usize, w: u32) {
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

    fn alive_weight(&self, vs: usize) -> u64 {
        self.vs[vs]
            .rs
            .iter()
            .filter(|r| r.alive)
            .map(|r| u64::from(r.weight.min(65535)))
            .sum()
    }

    fn has_sorry(&self, vs: usize) -> bool {
        self.config.virtual_servers[vs]
            .services
            .iter()
            .any(|s| s.sorry.is_some())
    }

    /// keepalived's update_quorum_state. `init`: a virtual server starting
    /// with quorum down adds its sorry server (and runs `quorum_down`);
    /// without a sorry server it starts down silently.
    fn update_quorum(&mut self, vs: usize, init: bool) {
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

    /// The real servers each service of virtual server `vs` should hold now:
    /// alive ones with their current weight, failed ones with
    /// `inhibit_on_failure` at weight 0, and the sorry server when quorum is
    /// lost (or at weight 0 with `sorry_server_inhibit` when it is not).
    pub fn desired(&self, vs: usize) -> Vec<(ServiceKey, Vec<DestConfig>)> {
        let Some(spec) = self.config.virtual_servers.get(vs) else {
            return Vec::new();
        };
        spec.services
            .iter()
            .map(|slot| (slot.key, self.desired_slot(vs, slot)))
            .collect()
    }

    fn desired_slot(&self, vs: usize, slot: &ServiceSlot) -> Vec<DestConfig> {
        let spec = &self.config.virtual_servers[vs];
        let st = &self.vs[vs];
        let sorry_active = !st.quorum_up && slot.sorry.is_some();
        let mut out = Vec::with_capacity(slot.dests.len() + 1);
        for (i, d) in slot.dests.iter().enumerate() {
            let (Some(r), Some(rspec)) = (st.rs.get(i), spec.reals.get(i)) else {
                out.push(*d);
                continue;
            };
            if r.alive && !sorry_active {
                out.push(d.weight(r.weight));
            } else if rspec.inhibit {
                out.push(d.weight(0));
            }
        }
        if let Some(s) = slot.sorry
            && !out.iter().any(|d| dest_id(d) == dest_id(&s))
        {
            if sorry_active {
                out.push(s);
            } else if spec.sorry_inhibit {
                out.push(s.weight(0));
            }
        }
        out
    }

    /// Replace the real servers of every service the policy knows with what
    /// it wants there ([`Policy::desired`]); other services are left alone.
    pub fn overlay(&self, defs: &mut [ServiceDef]) {
        let mut slots: HashMap<ServiceKey, (usize, &ServiceSlot)> = HashMap::new();
        for (vi, vs) in self.config.virtual_servers.iter().enumerate() {
            for s in &vs.services {
                slots.insert(s.key, (vi, s));
            }
        }
        for def in defs {
            if let Some((vi, slot)) = slots.get(&def.key) {
                def.dests = self.desired_slot(*vi, slot);
            }
        }
    }

    /// Shutting down: with `omega`, run keepalived's exit notifiers (each
    /// alive real server's `notify_down`, then the virtual server's
    /// `quorum_down`, and their FIFO lines). Emits [`Action::Script`]s and
    /// [`Action::Fifo`]s only; the data plane is being torn down anyway.
    pub fn shutdown(&mut self) {
        for vi in 0..self.vs.len() {
            let spec = &self.config.virtual_servers[vi];
            if !spec.omega {
                continue;
            }
            let mut downs = Vec::new();
            for ri in 0..self.vs[vi].rs.len() {
                if !self.vs[vi].rs[ri].alive {
                    continue;
                }
                self.vs[vi].rs[ri].alive = false;
                let rspec = &spec.reals[ri];
                if let Some(script) = rspec.notify_down.clone() {
                    let why = format!("shutdown (omega): {} of {}", rspec.name, spec.name);
                    self.actions.push_back(Action::Script { script, why });
                }
                downs.push(ri);
            }
            let quorum_down = spec.quorum_down.clone();
            let name = spec.name.clone();
            for ri in downs {
                self.push_rs_fifo(vi, ri, false);
            }
            // keepalived's update_vs_notifies(stopping): the quorum is
            // down once the virtual server is gone.
            self.vs[vi].quorum_up = false;
            if let Some(script) = quorum_down {
                let why = format!("shutdown (omega): {name}");
                self.actions.push_back(Action::Script { script, why });
            }
            self.push_vs_fifo(vi, false);
        }
    }

    /// How late checker `id`'s running probe started at `now` compared to
    /// its schedule (for the lateness histogram).
    pub fn lateness(&self, id: CheckerId, now: Instant) -> Option<Duration> {
        let c = &self.checkers[*self.by_id.get(&id)?];
        c.started_due.map(|t| now.saturating_duration_since(t))
    }

    /// Name of virtual server `vs`.
    pub fn vs_name(&self, vs: usize) -> &str {
        self.config
            .virtual_servers
            .get(vs)
            .map_or("?", |v| v.name.as_str())
    }

    /// Name of real server `rs` of virtual server `vs`.
    pub fn rs_name(&self, vs: usize, rs: usize) -> &str {
        self.config
            .virtual_servers
            .get(vs)
            .and_then(|v| v.reals.get(rs))
            .map_or("?", |r| r.name.as_str())
    }

    /// Label of a checker.
    pub fn checker_label(&self, id: CheckerId) -> &str {
        self.by_id
            .get(&id)
            .map_or("?", |&i| self.checkers[i].spec.label.as_str())
    }

    /// Where checker `id` belongs: (virtual server, real server) indices.
    pub fn checker_owner(&self, id: CheckerId) -> Option<(usize, usize)> {
        self.by_id
            .get(&id)
            .map(|&i| (self.checkers[i].vs, self.checkers[i].rs))
    }

    /// Every checker id with its (virtual server, real server) indices.
    pub fn checker_ids(&self) -> impl Iterator<Item = (CheckerId, usize, usize)> + '_ {
        self.checkers.iter().map(|c| (c.id, c.vs, c.rs))
    }

    /// Is real server `rs` of `vs` alive?
    pub fn is_alive(&self, vs: usize, rs: usize) -> Option<bool> {
        self.vs.get(vs).and_then(|v| v.rs.get(rs)).map(|r| r.alive)
    }

    /// Does virtual server `vs` hold quorum?
    pub fn quorum_up(&self, vs: usize) -> Option<bool> {
        self.vs.get(vs).map(|v| v.quorum_up)
    }

    /// One line for the log about an event.
    pub fn describe(&self, ev: &Event) -> String {
        match ev {
            Event::CheckerUp { checker, vs, rs } => format!(
                "{} of real server {} in {}: UP",
                self.checker_label(*checker),
                self.rs_name(*vs, *rs),
                self.vs_name(*vs)
            ),
            Event::CheckerDown {
                checker,
                vs,
                rs,
                reason,
                retries,
            } => format!(
                "{} of real server {} in {}: DOWN ({reason}{})",
                self.checker_label(*checker),
                self.rs_name(*vs, *rs),
                self.vs_name(*vs),
                if *retries > 0 {
                    format!(", after {retries} retries")
                } else {
                    String::new()
                }
            ),
            Event::CheckFailed {
                checker,
                reason,
                retry,
            } => format!(
                "{} failed ({reason}); retry {retry}",
                self.checker_label(*checker)
            ),
            Event::RealServerUp { vs, rs } => {
                let inhibit = self
                    .config
                    .virtual_servers
                    .get(*vs)
                    .and_then(|v| v.reals.get(*rs))
                    .is_some_and(|r| r.inhibit);
                format!(
                    "{} real server {} to {}",
                    if inhibit { "Enabling" } else { "Adding" },
                    self.rs_name(*vs, *rs),
                    self.vs_name(*vs)
                )
            }
            Event::RealServerDown { vs, rs, reason } => {
                let inhibit = self
                    .config
                    .virtual_servers
                    .get(*vs)
                    .and_then(|v| v.reals.get(*rs))
                    .is_some_and(|r| r.inhibit);
                format!(
                    "{} real server {} from {} ({reason})",
                    if inhibit { "Disabling" } else { "Removing" },
                    self.rs_name(*vs, *rs),
                    self.vs_name(*vs)
                )
            }
            Event::Weight { vs, rs, from, to } => format!(
                "Changing weight from {from} to {to} for real server {} of {}",
                self.rs_name(*vs, *rs),
                self.vs_name(*vs)
            ),
            Event::QuorumGained { vs, sum } => {
                let s = &self.config.virtual_servers[*vs];
                format!(
                    "Gained quorum {}+{}={} <= {sum} for {}",
                    s.quorum,
                    s.hysteresis,
                    u64::from(s.quorum) + u64::from(s.hysteresis),
                    s.name
                )
            }
            Event::QuorumLost { vs, sum } => {
                let s = &self.config.virtual_servers[*vs];
                format!(
                    "Lost quorum {}-{}={} > {sum} for {}",
                    s.quorum,
                    s.hysteresis,
                    u64::from(s.quorum).saturating_sub(u64::from(s.hysteresis)),
                    s.name
                )
            }
        }
    }

    /// The whole state, for `rvsadm --checks` and the JSON view.
    pub fn status(&self) -> Vec<VsStatus> {
        let mut by_rs: HashMap<(usize, usize), Vec<&Chk>> = HashMap::new();
        for c in &self.checkers {
            by_rs.entry((c.vs, c.rs)).or_default().push(c);
        }
        self.config
            .virtual_servers
            .iter()
            .enumerate()
            .map(|(vi, vs)| VsStatus {
                name: vs.name.clone(),
                quorum_up: self.vs[vi].quorum_up,
                quorum: vs.quorum,
                hysteresis: vs.hysteresis,
                alive_weight: self.alive_weight(vi),
                sorry_active: !self.vs[vi].quorum_up && self.has_sorry(vi),
                reals: vs
                    .reals
                    .iter()
                    .enumerate()
                    .map(|(ri, rs)| {
                        let st = &self.vs[vi].rs[ri];
                        RsStatus {
                            name: rs.name.clone(),
                            alive: st.alive,
                            weight: st.weight,
                            configured_weight: rs.weight,
                            inhibit: rs.inhibit,
                            down_reason: st.down_reason.clone(),
                            checkers: by_rs
                                .get(&(vi, ri))
                                .map(Vec::as_slice)
                                .unwrap_or_default()
                                .iter()
                                .map(|c| CheckerStatus {
                                    id: c.id,
                                    label: c.spec.label.clone(),
                                    up: c.is_up,
                                    has_run: c.has_run,
                                    retries: c.retry_it,
                                    last_failure: c.last_failure.clone(),
                                    last_ok: c.last_result_ok,
                                    last_latency_us: c.last_latency.map(|l| l.as_micros() as u64),
                                })
                                .collect(),
                        }
                    })
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
