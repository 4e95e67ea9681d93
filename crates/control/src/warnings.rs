//! Warnings that scale with the table: the first [`NAMED`] occurrences of a
//! kind are named one by one, the next one says that more follow, and the
//! rest are only counted, their total given by [`WarnLimit::tick`] (the
//! caller's period: a data plane's report, every second) once they stop
//! growing, and every [`SUMMARY_TICKS`] periods while they go on. A plane
//! with room for 4,096 services that is given 10,000 then logs about twenty
//! lines, not 5,904, and the operator still sees the total.
//!
//! Sans-IO: the caller says what happened and when a period passed, and
//! logs what it is told to; the limiter neither formats nor reads a clock.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::SocketAddr;

use crate::owner::service_name;
use crate::protocol::Command;

/// Occurrences of one kind named one by one before the rest are counted.
pub const NAMED: u64 = 16;

/// Periods ([`WarnLimit::tick`]) between two totals of a kind that keeps
/// growing (ten seconds at a report a second).
pub const SUMMARY_TICKS: u32 = 10;

/// What to do with one occurrence ([`WarnLimit::note`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Say {
    /// Name it: one of the first [`NAMED`] of its kind.
    Name,
    /// Name it, and say that the rest of its kind will be counted, not
    /// named: the first past [`NAMED`].
    NameAndMore,
    /// Count it only (a later summary gives the total).
    Count,
}

/// The count of a kind that grew past what was said of it
/// ([`WarnLimit::tick`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary<K> {
    /// The kind.
    pub kind: K,
    /// Its occurrences since the last [`WarnLimit::reset`], named or not.
    pub count: u64,
    /// How many of them were named.
    pub named: u64,
}

/// One kind's tally.
#[derive(Clone, Debug, Default)]
struct Tally {
    /// Occurrences ever (never reset: a counter for metrics).
    total: u64,
    /// Occurrences since the last reset (the first `NAMED + 1` named).
    window: u64,
    /// `window` when last said (named, or summed up).
    said: u64,
    /// `window` at the last tick.
    at_tick: u64,
    /// Ticks since it grew past `said`.
    unsaid_ticks: u32,
}

/// Per kind `K`: how many occurrences there were and how many were named
/// (see the module doc). Every operation is O(1) but
/// [`WarnLimit::tick`], O(kinds).
#[derive(Clone, Debug)]
pub struct WarnLimit<K> {
    kinds: HashMap<K, Tally>,
}

impl<K> Default for WarnLimit<K> {
    fn default() -> Self {
        WarnLimit {
            kinds: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash + Ord> WarnLimit<K> {
    /// Count one occurrence of `kind`: whether to name it.
    pub fn note(&mut self, kind: K) -> Say {
        let t = self.kinds.entry(kind).or_default();
        t.total += 1;
        t.window += 1;
        if t.window > NAMED + 1 {
            return Say::Count;
        }
        t.said = t.window;
        if t.window == NAMED + 1 {
            Say::NameAndMore
        } else {
            Say::Name
        }
    }

    /// A period passed: the totals due, in `K`'s order — of each kind whose
    /// count grew past what was said and then stood still for a period
    /// (the burst is over), or has grown for [`SUMMARY_TICKS`] periods
    /// without a total (it goes on). A kind that does not grow is not
    /// summed up again.
    pub fn tick(&mut self) -> Vec<Summary<K>> {
        let mut out = Vec::new();
        for (k, t) in &mut self.kinds {
            let still = t.window == t.at_tick;
            t.at_tick = t.window;
            if t.window <= t.said {
                continue;
            }
            t.unsaid_ticks += 1;
            if still || t.unsaid_ticks >= SUMMARY_TICKS {
                t.said = t.window;
                t.unsaid_ticks = 0;
                out.push(Summary {
                    kind: k.clone(),
                    count: t.window,
                    named: t.window.min(NAMED + 1),
                });
            }
        }
        out.sort_unstable_by(|a, b| a.kind.cmp(&b.kind));
        out
    }

    /// Name again from the first occurrence of every kind (the table they
    /// were about was cleared); [`WarnLimit::totals`] keep counting.
    pub fn reset(&mut self) {
        for t in self.kinds.values_mut() {
            *t = Tally {
                total: t.total,
                ..Tally::default()
            };
        }
    }

    /// Occurrences of each kind ever noted, resets included, in `K`'s
    /// order (for a counter metric).
    pub fn totals(&self) -> Vec<(K, u64)> {
        let mut out: Vec<(K, u64)> = self
            .kinds
            .iter()
            .map(|(k, t)| (k.clone(), t.total))
            .collect();
        out.sort_unstable();
        out
    }
}

/// A data plane's commands refused for want of room in one of its maps
/// (a full `svc_info`, `dests`, `slots`…): per map, the first [`NAMED`]
/// named (service, real server, map), then one line saying the rest are
/// counted, then the totals as [`NoRoom::tick`] gives them. The lines
/// leave out the plane's name: the caller logs them after it.
#[derive(Clone, Debug, Default)]
pub struct NoRoom {
    limit: WarnLimit<&'static str>,
}

impl NoRoom {
    /// `command` was not carried out: `map` had no room for it. The lines
    /// to log (none once past the named ones).
    pub fn refused(&mut self, command: &Command, map: &'static str) -> Vec<String> {
        let say = self.limit.note(map);
        let mut out = Vec::new();
        if say != Say::Count {
            out.push(format!("{}: no room in `{map}`", subject(command)));
        }
        if say == Say::NameAndMore {
            out.push(format!(
                "more than {NAMED} commands found no room in `{map}`: the others are counted, \
                 not named (rvs_dataplane_refused_commands_total); their total follows while it grows"
            ));
        }
        out
    }

    /// A command the plane was given: after a `Clear` the refusals are
    /// named again from the first.
    pub fn given(&mut self, command: &Command) {
        if matches!(command, Command::Clear) {
            self.limit.reset();
        }
    }

    /// A period passed: the totals due (see [`WarnLimit::tick`]), as the
    /// lines to log.
    pub fn tick(&mut self) -> Vec<String> {
        self.limit
            .tick()
            .into_iter()
            .map(|s| {
                format!(
                    "{} commands in all found no room in `{}` ({} named): the table holds more \
                     than this plane can carry",
                    s.count, s.kind, s.named
                )
            })
            .collect()
    }

    /// Commands refused per map since the plane started (for
    /// `rvs_dataplane_refused_commands_total`), by map name.
    pub fn totals(&self) -> Vec<(&'static str, u64)> {
        self.limit.totals()
    }
}

/// What a command is about, as a refusal names it: `service TCP
/// 10.0.0.1:80`, with `, real server 10.1.0.1:80` or `, local address
/// 10.2.0.1` where it is one of those.
fn subject(command: &Command) -> String {
    let Some(key) = command.service_key() else {
        return "a table-wide command".into();
    };
    let service = format!("service {}", service_name(key));
    match command {
        Command::AddDest { dest, .. } | Command::EditDest { dest, .. } => format!(
            "{service}, real server {}",
            SocketAddr::new(dest.addr, dest.port)
        ),
        Command::DelDest { addr, port, .. } => {
            format!("{service}, real server {}", SocketAddr::new(*addr, *port))
        }
        Command::AddLaddr { laddr, .. } | Command::DelLaddr { laddr, .. } => {
            format!("{service}, local address {}", laddr.first)
        }
        _ => service,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::model::{AddrFamily, DestConfig, Protocol, ServiceConfig, ServiceKey};

    #[test]
    fn the_first_of_a_kind_are_named_then_one_more_line_then_only_counted() {
        let mut w = WarnLimit::default();
        let said: Vec<Say> = (0..10_000).map(|_| w.note("svc_info")).collect();
        let named = said.iter().filter(|s| **s == Say::Name).count() as u64;
        assert_eq!(named, NAMED);
        assert_eq!(said[NAMED as usize], Say::NameAndMore);
        assert!(said[NAMED as usize + 1..].iter().all(|s| *s == Say::Count));
        // Another kind has its own window.
        assert_eq!(w.note("slots"), Say::Name);
        assert_eq!(w.totals(), vec![("slots", 1), ("svc_info", 10_000)]);
    }

    #[test]
    fn a_total_once_the_count_stands_still_or_every_few_periods_while_it_grows() {
        let none = Vec::<Summary<u8>>::new;
        let mut w = WarnLimit::default();
        for _ in 0..NAMED + 1 {
            w.note(1u8);
        }
        // All of them were named (the last with the "more" line).
        assert_eq!(w.tick(), none());
        assert_eq!(w.tick(), none());
        // A burst: summed up at the first period it stands still.
        for _ in 0..100 {
            w.note(1u8);
        }
        w.note(2u8);
        assert_eq!(w.tick(), none(), "still growing");
        let total = Summary {
            kind: 1u8,
            count: NAMED + 101,
            named: NAMED + 1,
        };
        assert_eq!(w.tick(), vec![total]);
        assert_eq!(w.tick(), none(), "said once while it does not grow");
        // A trickle that never stands still: a total every SUMMARY_TICKS.
        let mut said = Vec::new();
        for period in 1..=3 * SUMMARY_TICKS {
            w.note(1u8);
            said.extend(w.tick().into_iter().map(|s| (period, s.count)));
        }
        let n = NAMED + 101;
        let every = u64::from(SUMMARY_TICKS);
        assert_eq!(
            said,
            vec![
                (SUMMARY_TICKS, n + every),
                (2 * SUMMARY_TICKS, n + 2 * every),
                (3 * SUMMARY_TICKS, n + 3 * every)
            ]
        );
    }

    #[test]
    fn a_reset_names_again_and_the_totals_keep_counting() {
        let mut w = WarnLimit::default();
        for _ in 0..100 {
            w.note('a');
        }
        w.reset();
        assert_eq!(
            w.tick(),
            Vec::<Summary<char>>::new(),
            "nothing since the reset"
        );
        assert_eq!(w.note('a'), Say::Name);
        assert_eq!(w.totals(), vec![('a', 101)]);
    }

    fn svc(port: u16) -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().expect("addr"),
            port,
        }
    }

    #[test]
    fn refusals_for_want_of_room_name_the_first_of_each_map_then_sum_up() {
        let mut r = NoRoom::default();
        let add = |port| Command::AddService {
            key: svc(port),
            config: ServiceConfig::new(AddrFamily::Inet),
        };
        assert_eq!(
            r.refused(&add(1), "svc_info"),
            vec!["service TCP 10.0.0.1:1: no room in `svc_info`"]
        );
        let dest = Command::AddDest {
            service: svc(2),
            dest: DestConfig::new("10.1.0.1".parse().expect("addr"), 80),
        };
        assert_eq!(
            r.refused(&dest, "dests"),
            vec!["service TCP 10.0.0.1:2, real server 10.1.0.1:80: no room in `dests`"]
        );
        // 5,904 services on a full plane: 16 named, the 17th with the line
        // that says the rest are counted, then nothing until the summary.
        let lines: Vec<String> = (2..5_905)
            .flat_map(|p| r.refused(&add(p), "svc_info"))
            .collect();
        assert_eq!(lines.len(), NAMED as usize + 1, "{lines:?}");
        assert!(
            lines[NAMED as usize].starts_with("more than 16 commands found no room in `svc_info`")
        );
        assert!(r.tick().is_empty(), "still growing");
        assert_eq!(
            r.tick(),
            vec![
                "5904 commands in all found no room in `svc_info` (17 named): the table holds \
                 more than this plane can carry"
            ]
        );
        assert!(r.tick().is_empty(), "said once while it does not grow");
        assert_eq!(r.totals(), vec![("dests", 1), ("svc_info", 5_904)]);
        // Cleared: named again; the totals go on.
        r.given(&Command::Clear);
        assert_eq!(r.refused(&add(1), "svc_info").len(), 1);
        assert_eq!(r.totals(), vec![("dests", 1), ("svc_info", 5_905)]);
    }
}
