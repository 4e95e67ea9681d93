//! The election of one VRRP instance (RFC 3768 v2, RFC 5798 / 9568 v3, with
//! keepalived's preemption rules), sans-IO.
//!
//! An [`Instance`] is driven by three inputs — an advertisement received
//! ([`Instance::on_advert`]), the clock reaching [`Instance::poll_timeout`]
//! ([`Instance::on_timeout`]), and changes the operator's tracking makes
//! (priority, fault, shutdown) — and answers with [`Action`]s: send an
//! advertisement, announce the addresses again, or a state transition,
//! on which the driver adds or removes the virtual addresses and runs the
//! notify scripts. Time is an argument; nothing here reads a clock or
//! touches a socket, so every timer rule is unit-tested with a virtual clock.
//!
//! Timers, as the RFCs and keepalived define them:
//! * `Skew_Time` = (256 − priority) / 256 s (v2), or that fraction of
//!   `Master_Adver_Interval` (v3);
//! * `Master_Down_Interval` = `down_adverts` (3) × `Master_Adver_Interval`
//!   plus `Skew_Time`; v2 uses its own interval, a v3 backup learns the
//!   master's from its advertisements.

use core::time::Duration;
use std::net::IpAddr;

use crate::time::Instant;

/// The owner of the virtual addresses: becomes master at once and is never
/// preempted.
pub const PRIORITY_OWNER: u8 = 255;

/// What one instance is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// VRRP version, 2 or 3 (decides the skew formula and interval learning).
    pub version: u8,
    /// Configured priority, 1..=255 (255 = address owner).
    pub priority: u8,
    /// Our advertisement interval.
    pub advert_int: Duration,
    /// Take over from a lower-priority master (keepalived's default;
    /// `nopreempt` clears it).
    pub preempt: bool,
    /// Wait this long after first seeing a lower-priority master before
    /// preempting it (keepalived's `preempt_delay`).
    pub preempt_delay: Duration,
    /// Our primary address, the source of our advertisements: breaks a tie
    /// between equal priorities (the higher address wins).
    pub local_addr: IpAddr,
    /// Missed advertisements before a backup takes over (keepalived's
    /// `down_timer_adverts`, RFC: 3).
    pub down_adverts: u32,
    /// After becoming master, announce the addresses once more after this
    /// delay (keepalived's `garp_master_delay`, default 5 s; zero = never).
    pub garp_master_delay: Duration,
    /// keepalived's `garp_master_refresh`: while master, announce the
    /// addresses again this often ([`Action::Refresh`]; zero = never).
    pub garp_refresh: Duration,
    /// keepalived's `state MASTER`: become master at start without waiting
    /// for `Master_Down_Interval` (a higher-priority master heard later
    /// still wins).
    pub initial_master: bool,
}

impl Config {
    /// A v2 instance with keepalived's defaults around the given essentials.
    pub fn new(priority: u8, advert_int: Duration, local_addr: IpAddr) -> Self {
        Config {
            version: 2,
            priority,
            advert_int,
            preempt: true,
            preempt_delay: Duration::ZERO,
            local_addr,
            down_adverts: 3,
            garp_master_delay: Duration::from_secs(5),
            initial_master: false,
            garp_refresh: Duration::ZERO,
        }
    }
}

/// Where an instance stands.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Not started yet.
    Init,
    /// Listening to a master; takes over when it falls silent.
    Backup,
    /// Owns the virtual addresses and advertises.
    Master,
    /// A tracked interface or script failed: neither owns nor contends.
    Fault,
    /// Shut down.
    Stopped,
}

impl State {
    /// keepalived's name for the state, as notify scripts receive it.
    pub fn name(self) -> &'static str {
        match self {
            State::Init => "INIT",
            State::Backup => "BACKUP",
            State::Master => "MASTER",
            State::Fault => "FAULT",
            State::Stopped => "STOP",
        }
    }
}

/// What the driver must do.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send an advertisement with this priority (0 = the master resigns)
    /// and our interval.
    Send {
        /// Priority to advertise.
        priority: u8,
    },
    /// Announce the virtual addresses (gratuitous ARP / unsolicited NA).
    Announce,
    /// The periodic re-announcement of a master (`garp_master_refresh`).
    Refresh,
    /// The state changed: on `to == Master` add the addresses and announce
    /// them; on leaving Master remove them; run the notify scripts.
    Transition {
        /// The state left.
        from: State,
        /// The state entered.
        to: State,
    },
}

/// An advertisement as the election sees it (the driver has checked the
/// VRID, the checksum and the TTL).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Heard {
    /// Source address of the packet.
    pub src: IpAddr,
    /// Advertised priority.
    pub priority: u8,
    /// Advertised interval.
    pub interval: Duration,
}

/// Why an advertisement was not used.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    /// A v2 advertisement must carry our own interval (RFC 3768 §7.1).
    #[error("advertisement interval {heard:?} differs from ours ({ours:?})")]
    IntervalMismatch {
        /// Interval in the advertisement.
        heard: Duration,
        /// Ours.
        ours: Duration,
    },
    /// Faulty or stopped instances do not take part.
    #[error("instance is {0:?}")]
    NotRunning(State),
}

/// One VRRP instance's election.
#[derive(Clone, Debug)]
pub struct Instance {
    cfg: Config,
    state: State,
    /// Priority now: the configured one moved by tracking weights.
    priority: u8,
    /// The master's interval (v3 learns it; v2 is always ours).
    master_adver_int: Duration,
    /// Backup: when the master is declared down.
    down_at: Option<Instant>,
    /// Master: when the next advertisement is due.
    advert_at: Option<Instant>,
    /// Master: the delayed second announcement, then each refresh.
    garp_at: Option<Instant>,
    /// Master: when the last announcement round ran (`None` until the
    /// delayed second one has).
    refresh_at: Option<Instant>,
    /// Backup with a preempt delay: when a lower-priority master may be
    /// preempted (set on first seeing it).
    preempt_at: Option<Instant>,
}

impl Instance {
    /// An instance in [`State::Init`]; [`Instance::start`] runs it.
    pub fn new(cfg: Config) -> Self {
        let priority = cfg.priority;
        let master_adver_int = cfg.advert_int;
        Instance {
            cfg,
            state: State::Init,
            priority,
            master_adver_int,
            down_at: None,
            advert_at: None,
            garp_at: None,
            refresh_at: None,
            preempt_at: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Current (effective) priority.
    pub fn priority(&self) -> u8 {
        self.priority
    }

    /// The master's advertisement interval as last learnt.
    pub fn master_adver_int(&self) -> Duration {
        self.master_adver_int
    }

    /// Start: the address owner (or an instance configured `state MASTER`)
    /// becomes master at once, anyone else a backup waiting
    /// `Master_Down_Interval` for a master to speak.
    pub fn start(&mut self, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        if self.state != State::Init {
            return out;
        }
        if self.priority == PRIORITY_OWNER || self.cfg.initial_master {
            self.become_master(now, &mut out);
        } else {
            self.become_backup(now, &mut out);
        }
        out
    }

    /// The earliest instant at which [`Instance::on_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.down_at, self.advert_at, self.garp_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Run the timers that are due at `now`.
    pub fn on_timeout(&mut self, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        match self.state {
            State::Backup if self.down_at.is_some_and(|t| t <= now) => {
                self.become_master(now, &mut out);
            }
            State::Master => {
                if self.advert_at.is_some_and(|t| t <= now) {
                    out.push(Action::Send {
                        priority: self.priority,
                    });
                    self.advert_at = Some(now + self.cfg.advert_int);
                }
                if let Some(at) = self.garp_at.filter(|t| *t <= now) {
                    // The delayed second announcement, then the refreshes.
                    let first = self.refresh_at.is_none();
                    out.push(if first {
                        Action::Announce
                    } else {
                        Action::Refresh
                    });
                    self.refresh_at = Some(at);
                    self.garp_at =
                        (!self.cfg.garp_refresh.is_zero()).then(|| now + self.cfg.garp_refresh);
                }
            }
            _ => {}
        }
        out
    }

    /// An advertisement from another router of this virtual router.
    pub fn on_advert(&mut self, now: Instant, heard: Heard) -> Result<Vec<Action>, Ignored> {
        if !matches!(self.state, State::Backup | State::Master) {
            return Err(Ignored::NotRunning(self.state));
        }
        if self.cfg.version == 2 && heard.interval != self.cfg.advert_int {
            return Err(Ignored::IntervalMismatch {
                heard: heard.interval,
                ours: self.cfg.advert_int,
            });
        }
        let mut out = Vec::new();
        match self.state {
            State::Backup => {
                if heard.priority == 0 {
                    // The master resigns: take over after the skew only.
                    self.down_at = Some(now + self.skew());
                } else if !self.cfg.preempt
                    || heard.priority >= self.priority
                    || self.preempt_waits(now)
                {
                    if self.cfg.version == 3 {
                        self.master_adver_int = heard.interval;
                    }
                    if heard.priority >= self.priority {
                        // A master we would not preempt: forget any delay.
                        self.preempt_at = None;
                    }
                    self.down_at = Some(now + self.master_down_interval());
                }
                // Else: a lower-priority master we preempt — let the timer run out.
            }
            State::Master => {
                if heard.priority == 0 {
                    out.push(Action::Send {
                        priority: self.priority,
                    });
                    self.advert_at = Some(now + self.cfg.advert_int);
                } else if self.yields_to(&heard) {
                    if self.cfg.version == 3 {
                        self.master_adver_int = heard.interval;
                    }
                    self.become_backup(now, &mut out);
                } else {
                    // RFC 9568: assert ourselves at once to the lower one.
                    out.push(Action::Send {
                        priority: self.priority,
                    });
                    self.advert_at = Some(now + self.cfg.advert_int);
                }
            }
            _ => {}
        }
        Ok(out)
    }

    /// Set the effective priority (the configured one moved by tracking
    /// weights; the driver clamps it to 1..=254 unless the owner's 255). A
    /// master advertises it from its next advertisement on; a backup
    /// compares with it.
    pub fn set_priority(&mut self, now: Instant, priority: u8) -> Vec<Action> {
        let mut out = Vec::new();
        let priority = priority.max(1);
        if priority == self.priority {
            return out;
        }
        self.priority = priority;
        if self.state == State::Master {
            // Say it now, so a higher backup can take over at once.
            out.push(Action::Send { priority });
            self.advert_at = Some(now + self.cfg.advert_int);
        }
        out
    }

    /// A tracked interface or script failed (`true`) or recovered (`false`).
    /// A faulty master resigns (priority-0 advertisement) and gives the
    /// addresses up; a recovered instance starts over as at
    /// [`Instance::start`].
    pub fn set_fault(&mut self, now: Instant, fault: bool) -> Vec<Action> {
        let mut out = Vec::new();
        match (fault, self.state) {
            (true, State::Backup | State::Master | State::Init) => {
                if self.state == State::Master {
                    out.push(Action::Send { priority: 0 });
                }
                self.enter(State::Fault, &mut out);
                self.clear_timers();
            }
            (false, State::Fault) => {
                self.state = State::Init;
                out.extend(self.start(now));
                // Report the whole step as Fault → new state.
                for a in &mut out {
                    if let Action::Transition { from, .. } = a {
                        *from = State::Fault;
                    }
                }
            }
            _ => {}
        }
        out
    }

    /// Take a new configuration in place (a reload that changed only the
    /// priority, intervals or preemption): the state and its timers carry
    /// on, so a master keeps its addresses. A master advertises a changed
    /// priority at once.
    pub fn reconfigure(&mut self, now: Instant, cfg: Config) -> Vec<Action> {
        let priority = cfg.priority;
        let changed = priority != self.cfg.priority;
        self.cfg = cfg;
        if self.cfg.version == 2 || self.state == State::Master {
            self.master_adver_int = self.cfg.advert_int;
        }
        if changed {
            return self.set_priority(now, priority);
        }
        Vec::new()
    }

    /// Follow another member of a sync group (keepalived's
    /// `vrrp_sync_group`): when one member becomes master, backup or
    /// faulty by its own election, the others are moved to that state too,
    /// so addresses that belong together (a NAT director's outside and
    /// inside addresses) move together. Only `Master` and `Backup` are
    /// followed here; a group's fault is [`Instance::set_fault`]. A faulty
    /// or stopped instance does not follow.
    pub fn follow(&mut self, now: Instant, to: State) -> Vec<Action> {
        let mut out = Vec::new();
        match (self.state, to) {
            (State::Backup, State::Master) => self.become_master(now, &mut out),
            (State::Master, State::Backup) => self.become_backup(now, &mut out),
            _ => {}
        }
        out
    }

    /// Stop: a master resigns with a priority-0 advertisement so a backup
    /// takes over after its skew time instead of `Master_Down_Interval`.
    pub fn shutdown(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        if self.state == State::Master {
            out.push(Action::Send { priority: 0 });
        }
        if self.state != State::Stopped {
            self.enter(State::Stopped, &mut out);
        }
        self.clear_timers();
        out
    }

    fn skew(&self) -> Duration {
        let weight = 256 - u32::from(self.priority);
        let base = if self.cfg.version == 3 {
            self.master_adver_int
        } else {
            Duration::from_secs(1)
        };
        base * weight / 256
    }

    /// `down_adverts` × the master's interval + the skew.
    pub fn master_down_interval(&self) -> Duration {
        self.master_adver_int * self.cfg.down_adverts + self.skew()
    }

    /// Whether a backup must still wait before preempting a lower-priority
    /// master (keepalived's `preempt_delay`), starting the wait on the
    /// first such advertisement.
    fn preempt_waits(&mut self, now: Instant) -> bool {
        if self.cfg.preempt_delay.is_zero() {
            return false;
        }
        let at = *self.preempt_at.get_or_insert(now + self.cfg.preempt_delay);
        now < at
    }

    /// A master gives way to a higher priority, or to an equal one from a
    /// higher address.
    fn yields_to(&self, heard: &Heard) -> bool {
        heard.priority > self.priority
            || (heard.priority == self.priority && addr_gt(heard.src, self.cfg.local_addr))
    }

    fn become_master(&mut self, now: Instant, out: &mut Vec<Action>) {
        self.enter(State::Master, out);
        out.push(Action::Send {
            priority: self.priority,
        });
        out.push(Action::Announce);
        self.down_at = None;
        self.preempt_at = None;
        self.master_adver_int = self.cfg.advert_int;
        self.advert_at = Some(now + self.cfg.advert_int);
        self.refresh_at = None;
        self.garp_at = if !self.cfg.garp_master_delay.is_zero() {
            Some(now + self.cfg.garp_master_delay)
        } else if !self.cfg.garp_refresh.is_zero() {
            // No delayed round: refreshes only.
            self.refresh_at = Some(now);
            Some(now + self.cfg.garp_refresh)
        } else {
            None
        };
    }

    fn become_backup(&mut self, now: Instant, out: &mut Vec<Action>) {
        self.enter(State::Backup, out);
        self.advert_at = None;
        self.garp_at = None;
        self.down_at = Some(now + self.master_down_interval());
    }

    fn enter(&mut self, to: State, out: &mut Vec<Action>) {
        let from = self.state;
        self.state = to;
        out.push(Action::Transition { from, to });
    }

    fn clear_timers(&mut self) {
        self.down_at = None;
        self.advert_at = None;
        self.garp_at = None;
        self.preempt_at = None;
    }
}

/// `a > b` as unsigned numbers of the same family (RFC: "the primary IP
/// address of the sender is greater than the local primary IP address").
/// Mixed families never happen on one instance; they compare as "not greater".
fn addr_gt(a: IpAddr, b: IpAddr) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => u32::from(a) > u32::from(b),
        (IpAddr::V6(a), IpAddr::V6(b)) => u128::from(a) > u128::from(b),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
