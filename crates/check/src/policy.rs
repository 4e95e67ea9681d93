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

mod reconfigure;
mod transitions;
mod view;

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

/// A script to run (notify_up/down, quorum_up/down): the control plane's
/// type, re-exported for the callers that name it here.
pub use rvs_control::script::ScriptSpec;

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
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
