//! IPVS connection synchronisation as a sans-IO endpoint, shaped like
//! `quinn-proto`: an [`Endpoint`] is one sync daemon (`ipvsadm
//! --start-daemon master|backup`, keepalived's `lvs_sync_daemon`) with its
//! timers and its memory (the master's walk, a bulk answer, the re-request,
//! what was heard), and no socket and no clock. rvsd's `sync` module owns
//! the sockets and the timers and drives it:
//!
//! * a datagram from the sync group goes in by [`Endpoint::handle`];
//! * when [`Endpoint::poll_timeout`]'s instant is reached,
//!   [`Endpoint::handle_timeout`];
//! * whenever [`Endpoint::needs_director`] says so, the caller lends the
//!   director (its table, through [`Director`]) and the entries this
//!   director entered from peers ([`Received`], shared by the master and
//!   backup endpoints of one director) to [`Endpoint::process`]: the
//!   master's walk, a bulk answer's page and the entering of peers'
//!   entries read and write the table there;
//! * datagrams to send come out of [`Endpoint::poll_transmit`], and what
//!   the daemon should know (peers heard, bulk requests asked and answered,
//!   entries of unknown services) out of [`Endpoint::poll_event`].
//!
//! The wire format is the kernel's (`rvs_wire::ipvs_sync`, version 1 sent,
//! 0 and 1 received) so a backup director — rvs or a kernel IPVS — knows
//! the master's connections and persistence templates when it takes over.
//!
//! The master reads the director's connection table once a [`PERIOD`] (a
//! [`PAGE`] of it) and sends what is new or changed (state, real server,
//! active/inactive, FULLNAT pair), and refreshes each entry every
//! [`REFRESH`] so a backup's timers never run out under a live connection;
//! the kernel instead counts packets (`sync_threshold`), which a table read
//! cannot see. A backup enters what it receives into its director as the
//! XDP plane's mirrored flows are (`Ipvs::mirror_conn`). Both daemons can
//! run at once, so a recovered master learns the current state too (with
//! the kernel, a recovered master comes back empty).
//!
//! # Bulk resync
//! A daemon that starts asks for the whole table at once instead of waiting
//! up to [`REFRESH`] for the peer's refresh round: it sends a bulk-resync
//! request (`rvs_wire::ipvs_sync::build_bulk_request`, 16 bytes that kernel
//! backups ignore) to the sync group, and again when an answer came with a
//! hole or none came whole within [`REQUEST_AGAIN`] (at most
//! [`ask::MAX_ASKS`] requests; see [`ask`]). A peer answers requests of its syncid
//! (either side 0: any) from its master daemon, or from its backup daemon
//! when it runs no master daemon ([`Endpoint::set_sibling`]), so one
//! director answers once: it walks its whole table [`BULK_PAGE`] slab
//! positions per [`BULK_TICK`] and sends every entry a master would sync
//! as ordinary v1 messages to the group. A request during a walk extends it
//! to cover the whole table again from where it is (a new answer, its
//! records numbered from 0 again); the answer ends with its count. A master endpoint
//! enters what it hears only when no backup daemon runs beside it.
//!
//! # N directors (a fleet behind ECMP)
//! With both daemons on every director, each sends its own flows and
//! enters everyone else's. A message from one of the sync interface's own
//! addresses is ignored; a flow entered from a peer ([`Received`]) is not
//! sent as our own until this director sees its traffic (ECMP moved it
//! here); an entry never replaces one this director holds itself unless it
//! is fresher (the peer saw the flow's traffic later than we did); and a
//! template of ours that a peer's bulk answer echoes back stays ours.

pub mod ask;
mod table;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rvs_core::ipvs::{Ipvs, MirroredConn};
use rvs_core::time::Instant;
use rvs_wire::ipvs_sync as wire;

pub use table::warming;
use table::{Bulk, Tuple, Verdict, Walk};

/// How often a master sends each live entry again.
pub const REFRESH: Duration = Duration::from_secs(30);
/// How often the master reads the table.
pub const PERIOD: Duration = Duration::from_secs(1);
/// Slab positions a master reads per period: the daemon's lock is held for
/// a bounded time however large the table (a page of a 1M-entry table took
/// 18–20 ms: `sync_page_cost`, BENCHMARKS.md); a table of N pages is swept
/// every N seconds.
pub const PAGE: usize = 1 << 16;
/// Slab positions a bulk answer reads per [`BULK_TICK`]: at most this many
/// entries (≈ 52 datagrams of 40) per tick, ≈ 100,000 entries a second.
pub const BULK_PAGE: usize = 2048;
/// Pace of a bulk answer.
pub const BULK_TICK: Duration = Duration::from_millis(20);
/// A starting daemon's second bulk-resync request comes this long after
/// the first.
pub const REQUEST_AGAIN: Duration = Duration::from_secs(2);
/// A starting backup daemon "warms up" (the announcer holds a first
/// announcement, docs/fleet.md) at most this long...
pub const WARM_MAX: Duration = Duration::from_secs(5);
/// ...or until the peers' bulk answers have gone quiet this long.
pub const WARM_QUIET: Duration = Duration::from_secs(1);
/// What a peer's entry was entered at is forgotten this long after (it has
/// certainly expired here)...
const RECEIVED_FOR: Duration = Duration::from_secs(3600);
/// ...checked at most this often.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Tables keyed by tuples: a fast hash (the keys are not chosen by
/// clients in a way that matters here: a collision only slows the sweep).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// What an endpoint reads and writes of its director while the caller
/// lends it ([`Endpoint::process`]).
pub trait Director {
    /// The director's table and services.
    fn ipvs(&self) -> &Ipvs;
    /// Enter a peer's entry at `now` (table and data plane); whether the
    /// table took it.
    fn enter(&mut self, now: Instant, flow: &MirroredConn) -> bool;
}

impl Director for crate::state::Controller {
    fn ipvs(&self) -> &Ipvs {
        crate::state::Controller::ipvs(self)
    }

    fn enter(&mut self, now: Instant, flow: &MirroredConn) -> bool {
        self.enter_synced(now, flow).is_some()
    }
}

impl Director for Ipvs {
    fn ipvs(&self) -> &Ipvs {
        self
    }

    fn enter(&mut self, now: Instant, flow: &MirroredConn) -> bool {
        self.mirror_conn(now, flow).is_some()
    }
}

/// The entries a director entered from its peers (tuple → when), so that
/// its master endpoint does not send them back; one per director, shared
/// by its master and backup endpoints.
#[derive(Default)]
pub struct Received(FastMap<Tuple, Instant>);

impl Received {
    /// How many entries are remembered.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An endpoint's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// A master daemon (sends its table) or a backup daemon (enters its
    /// peers' tables).
    pub master: bool,
    /// The sync id: 0 (any) or the one messages and requests must carry.
    pub syncid: u8,
    /// The largest datagram to send (`--sync-maxlen`).
    pub maxlen: u16,
    /// The sync group and port, where everything is sent.
    pub group: SocketAddr,
    /// This daemon's bulk-request nonce (tells its requests apart in logs).
    pub nonce: u32,
    /// The sync interface's own addresses: datagrams from them are ours,
    /// looped back, and ignored.
    pub own: Vec<IpAddr>,
}

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where to (the sync group).
    pub dest: SocketAddr,
    /// The datagram.
    pub contents: Vec<u8>,
}

/// What the driver should know or log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// This endpoint asked its peers for their whole tables.
    BulkRequested {
        /// Its nonce.
        nonce: u32,
    },
    /// A peer asked for the table; this endpoint answers it.
    BulkAsked {
        /// The peer's nonce.
        nonce: u32,
    },
    /// The bulk answer covered the whole table.
    BulkAnswered,
    /// Peers' entries came in (a starting backup warms until they go
    /// quiet, [`warming`]).
    Heard,
    /// A peer's entry names a service or real server this director does
    /// not have: not entered.
    Unresolved {
        /// The entry's virtual address.
        vip: SocketAddr,
        /// Its real server.
        dest: SocketAddr,
    },
    /// A datagram that is not a sync message.
    BadMessage(String),
    /// Entries that could not be put into a message.
    CannotSend(String),
}

/// One sync daemon's state machine (see the module doc).
pub struct Endpoint {
    cfg: Config,
    /// Whether the other daemon of this director runs: beside a master, a
    /// backup enters what is heard; beside a backup, a master answers
    /// bulk requests.
    sibling: bool,
    walk: Walk,
    /// When the master's next period is due.
    walk_at: Instant,
    walk_due: bool,
    bulk: Bulk,
    /// When the bulk answer's next page is due (while it is active).
    bulk_at: Instant,
    bulk_due: bool,
    /// This daemon's own bulk requests: whether the answers came whole.
    asking: ask::Asking,
    /// The bulk answer being sent: its number, and the next record's index.
    answer: u32,
    answer_index: u32,
    /// When `Received` was last pruned.
    pruned: Instant,
    /// Peers' entries waiting for the director.
    inbox: Vec<wire::SyncConn>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
}

impl Endpoint {
    /// A daemon starting at `now`: its bulk request is the first datagram
    /// to send.
    pub fn new(cfg: Config, now: Instant) -> Self {
        let answer = cfg.nonce;
        let mut ep = Endpoint {
            cfg,
            sibling: false,
            walk: Walk::default(),
            walk_at: now,
            walk_due: false,
            bulk: Bulk::default(),
            bulk_at: now,
            bulk_due: false,
            asking: ask::Asking::new(now),
            answer,
            answer_index: 0,
            pruned: Instant::ZERO,
            inbox: Vec::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        };
        ep.ask();
        ep
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Set the sync interface's own addresses (their datagrams are ignored).
    pub fn set_own(&mut self, own: Vec<IpAddr>) {
        self.cfg.own = own;
    }

    /// Whether the director's other daemon runs (a backup endpoint beside
    /// a master does not answer bulk requests; a master endpoint beside a
    /// backup does not enter what it hears). Set before [`Self::handle`].
    pub fn set_sibling(&mut self, runs: bool) {
        self.sibling = runs;
    }

    fn ask(&mut self) {
        let req = wire::build_bulk_request(&wire::BulkRequest {
            syncid: self.cfg.syncid,
            nonce: self.cfg.nonce,
        });
        self.transmits.push_back(Transmit {
            dest: self.cfg.group,
            contents: req.to_vec(),
        });
        self.events.push_back(Event::BulkRequested {
            nonce: self.cfg.nonce,
        });
    }

    /// A datagram from `from` on the sync group at `now` (bulk requests
    /// and peers' entries; what needs the director waits for
    /// [`Self::process`]). No rule reads `now` here yet: it is in the
    /// signature so the driver's calls do not change when one does.
    pub fn handle(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        if table::from_self(from.ip(), &self.cfg.own) {
            return;
        }
        if let Some(r) = wire::parse_bulk_request(data) {
            if !table::syncid_matches(self.cfg.syncid, r.syncid) {
                return;
            }
            // One answer per director: its master daemon's, else its backup's.
            if self.cfg.master || !self.sibling {
                self.events.push_back(Event::BulkAsked { nonce: r.nonce });
                self.bulk.restart = true;
            }
            return;
        }
        if let Some(d) = wire::parse_bulk_done(data) {
            if table::syncid_matches(self.cfg.syncid, d.syncid) {
                self.asking.done(now, from.ip(), d);
            }
            return;
        }
        let msg = match wire::parse(data) {
            Ok(m) => m,
            Err(e) => {
                self.events.push_back(Event::BadMessage(e.to_string()));
                return;
            }
        };
        if self.cfg.syncid != 0 && msg.syncid != self.cfg.syncid {
            return;
        }
        for m in msg.conns.iter().filter_map(|c| c.bulk) {
            self.asking.mark(from.ip(), m);
        }
        // A master enters what it hears only when no backup daemon runs
        // beside it (which then does).
        if self.cfg.master && self.sibling {
            return;
        }
        if !msg.conns.is_empty() {
            self.events.push_back(Event::Heard);
        }
        self.inbox.extend(msg.conns);
    }

    /// When [`Self::handle_timeout`] is next due (`None`: never, until a
    /// datagram comes).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let walk = (self.cfg.master && !self.walk_due).then_some(self.walk_at);
        let bulk = (self.bulk.active() && !self.bulk_due).then_some(self.bulk_at);
        [walk, bulk, self.asking.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Time passed to `now`: what is due is done (a request sent again) or
    /// marked for [`Self::process`] (a walk period, a bulk page).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.cfg.master && !self.walk_due && now >= self.walk_at {
            self.walk_due = true;
            self.walk_at = self.walk_at + PERIOD;
        }
        if self.bulk.active() && !self.bulk_due && now >= self.bulk_at {
            self.bulk_due = true;
        }
        if self.asking.handle_timeout(now) {
            self.ask();
        }
    }

    /// Whether [`Self::process`] has work (entries to enter, a walk period
    /// or a bulk page due): the caller lends the director then.
    pub fn needs_director(&self) -> bool {
        self.walk_due || self.bulk_due || !self.inbox.is_empty()
    }

    /// The work that reads or writes the director at `now`: enter peers'
    /// entries (and remember them in `received`), read the next page of
    /// the master's walk, and the next page of a bulk answer.
    pub fn process(&mut self, now: Instant, director: &mut impl Director, received: &mut Received) {
        if !self.inbox.is_empty() {
            for c in std::mem::take(&mut self.inbox) {
                let t = Tuple::of_wire(&c);
                match table::verdict(director.ipvs(), &c, now, Some(&mut received.0)) {
                    Verdict::Keep => {}
                    Verdict::Unresolved => self.events.push_back(Event::Unresolved {
                        vip: c.vip,
                        dest: c.dest,
                    }),
                    Verdict::Enter(m) => {
                        if director.enter(now, &m) {
                            received.0.insert(t, now);
                        }
                    }
                }
            }
            // Once a minute, forget what has certainly expired here.
            if now.saturating_since(self.pruned) >= PRUNE_EVERY {
                received
                    .0
                    .retain(|_, at| now.saturating_since(*at) < RECEIVED_FOR);
                self.pruned = now;
            }
        }
        if std::mem::take(&mut self.walk_due) {
            let batch = table::changes(director.ipvs(), now, &mut self.walk, &mut received.0);
            self.send(&batch);
        }
        if std::mem::take(&mut self.bulk_due) {
            if self.bulk.restart {
                // A new answer: numbered apart from the last, from 0.
                self.answer = self.answer.wrapping_add(1);
                self.answer_index = 0;
            }
            let mut page = table::bulk_page(director.ipvs(), &mut self.bulk);
            for c in &mut page {
                c.bulk = Some(wire::BulkMark {
                    answer: self.answer,
                    index: self.answer_index,
                });
                self.answer_index = self.answer_index.wrapping_add(1);
            }
            self.send(&page);
            self.bulk_at = now + BULK_TICK;
            if !self.bulk.active() {
                let done = wire::build_bulk_done(&wire::BulkDone {
                    syncid: self.cfg.syncid,
                    answer: self.answer,
                    entries: self.answer_index,
                });
                self.transmits.push_back(Transmit {
                    dest: self.cfg.group,
                    contents: done.to_vec(),
                });
                self.events.push_back(Event::BulkAnswered);
            }
        }
    }

    /// Queue `conns` as v1 messages.
    fn send(&mut self, conns: &[wire::SyncConn]) {
        if conns.is_empty() {
            return;
        }
        match wire::build_v1(self.cfg.syncid, conns, usize::from(self.cfg.maxlen)) {
            Ok(datagrams) => self
                .transmits
                .extend(datagrams.into_iter().map(|d| Transmit {
                    dest: self.cfg.group,
                    contents: d,
                })),
            Err(e) => self.events.push_back(Event::CannotSend(e.to_string())),
        }
    }

    /// The next datagram to send (in the order they were queued; `now`
    /// is not read yet, as in [`Self::handle`]).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let _ = now;
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}
