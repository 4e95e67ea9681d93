//! The requester's side of bulk resync: whether the peers' answers came
//! whole, and when to ask again.
//!
//! An answer's records carry their index ([`wire::BulkMark`]) and the
//! answer ends with its count ([`wire::BulkDone`]). [`SETTLE`] after an
//! answer's end (datagrams overtake each other), the answer is checked:
//! an index missing below the count is a lost datagram, and the daemon asks
//! again at once rather than leave the hole until the peer's next refresh
//! round. Without any whole answer (the end lost, or only kernel peers,
//! which never answer), it asks again every [`REQUEST_AGAIN`]. At most
//! [`MAX_ASKS`] requests in all: over a link that loses something of every
//! answer, the refresh rounds fill the holes.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use rvs_core::time::Instant;
use rvs_wire::ipvs_sync as wire;

use super::REQUEST_AGAIN;

/// How long after an answer's end its lost datagrams are taken as lost.
pub const SETTLE: Duration = Duration::from_millis(200);
/// Requests a starting daemon sends at most.
pub const MAX_ASKS: u32 = 4;

/// What came of one peer's answer.
#[derive(Default)]
struct Answer {
    /// Indices received, a bit each.
    got: Vec<u64>,
    /// The count its end gave, once it came.
    entries: Option<u32>,
    /// When it is checked (its end came).
    check_at: Option<Instant>,
}

impl Answer {
    fn set(&mut self, index: u32) {
        let (word, bit) = ((index / 64) as usize, index % 64);
        if self.got.len() <= word {
            self.got.resize(word + 1, 0);
        }
        self.got[word] |= 1 << bit;
    }

    fn whole(&self, entries: u32) -> bool {
        (0..entries).all(|i| {
            self.got
                .get((i / 64) as usize)
                .is_some_and(|w| w & (1 << (i % 64)) != 0)
        })
    }
}

/// A requester's state: asking, or done with asking.
pub(crate) struct Asking {
    /// Requests sent so far.
    asks: u32,
    /// When to ask again if no whole answer came (`None`: done asking).
    again: Option<Instant>,
    /// The answers being received, by peer and answer.
    answers: HashMap<(IpAddr, u32), Answer>,
    /// Answers already checked (a duplicated end is not checked twice).
    checked: HashSet<(IpAddr, u32)>,
    /// Some answer came whole since the last request.
    whole: bool,
}

impl Asking {
    /// A daemon that sent its first request at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Asking {
            asks: 1,
            again: Some(now + REQUEST_AGAIN),
            answers: HashMap::new(),
            checked: HashSet::new(),
            whole: false,
        }
    }

    /// Whether the daemon still waits for answers.
    pub(crate) fn active(&self) -> bool {
        self.again.is_some()
    }

    /// How many requests were sent.
    #[cfg(test)]
    pub(crate) fn asks(&self) -> u32 {
        self.asks
    }

    /// A record of answer `m` from `from`.
    pub(crate) fn mark(&mut self, from: IpAddr, m: wire::BulkMark) {
        if self.active() && !self.checked.contains(&(from, m.answer)) {
            self.answers
                .entry((from, m.answer))
                .or_default()
                .set(m.index);
        }
    }

    /// The end of an answer from `from`, at `now`.
    pub(crate) fn done(&mut self, now: Instant, from: IpAddr, d: wire::BulkDone) {
        if !self.active() || self.checked.contains(&(from, d.answer)) {
            return;
        }
        let a = self.answers.entry((from, d.answer)).or_default();
        if a.entries.is_none() {
            a.entries = Some(d.entries);
            a.check_at = Some(now + SETTLE);
        }
    }

    /// When [`Self::handle_timeout`] is next due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let checks = self.answers.values().filter_map(|a| a.check_at);
        checks.chain(self.again).min()
    }

    /// Time passed to `now`: true when the daemon must ask again now.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> bool {
        let mut holes = false;
        let due: Vec<(IpAddr, u32)> = self
            .answers
            .iter()
            .filter(|(_, a)| a.check_at.is_some_and(|t| now >= t))
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            if let Some(a) = self.answers.remove(&k) {
                self.checked.insert(k);
                match a.entries {
                    Some(n) if a.whole(n) => self.whole = true,
                    _ => holes = true,
                }
            }
        }
        let timed_out = self.again.is_some_and(|t| now >= t);
        if !holes && !timed_out {
            return false;
        }
        if (holes || !self.whole) && self.asks < MAX_ASKS {
            self.asks += 1;
            self.again = Some(now + REQUEST_AGAIN);
            self.answers.clear();
            self.whole = false;
            return true;
        }
        if timed_out || self.asks >= MAX_ASKS {
            self.again = None;
            self.answers.clear();
            self.checked.clear();
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn peer() -> IpAddr {
        IpAddr::from([10, 0, 0, 2])
    }

    fn answer(a: &mut Asking, now: Instant, answer: u32, indices: &[u32], entries: u32) {
        for &index in indices {
            a.mark(peer(), wire::BulkMark { answer, index });
        }
        a.done(
            now,
            peer(),
            wire::BulkDone {
                syncid: 0,
                answer,
                entries,
            },
        );
    }

    #[test]
    fn a_whole_answer_ends_the_asking_at_the_next_deadline() {
        let mut a = Asking::new(at(0));
        answer(&mut a, at(100), 7, &[2, 0, 1, 1], 3);
        assert_eq!(a.poll_timeout(), Some(at(300)));
        assert!(!a.handle_timeout(at(300)));
        assert!(a.active());
        assert!(!a.handle_timeout(at(2000)));
        assert!(!a.active());
        assert_eq!(a.asks(), 1);
    }

    #[test]
    fn a_hole_asks_again_once_the_answer_settled() {
        let mut a = Asking::new(at(0));
        answer(&mut a, at(100), 7, &[0, 2], 3);
        assert!(!a.handle_timeout(at(299)));
        assert!(a.handle_timeout(at(300)));
        assert_eq!(a.asks(), 2);
        assert_eq!(a.poll_timeout(), Some(at(2300)));
        // The late datagram and a duplicated end of the old answer change
        // nothing; the new answer comes whole.
        answer(&mut a, at(400), 7, &[1], 3);
        answer(&mut a, at(500), 8, &[0, 1, 2], 3);
        assert!(!a.handle_timeout(at(700)));
        assert!(!a.handle_timeout(at(2300)));
        assert!(!a.active());
        assert_eq!(a.asks(), 2);
    }

    #[test]
    fn without_an_answer_it_asks_every_two_seconds_at_most_four_times() {
        let mut a = Asking::new(at(0));
        let mut asked = vec![];
        let mut now = at(0);
        while let Some(t) = a.poll_timeout() {
            now = t;
            if a.handle_timeout(now) {
                asked.push(now);
            }
        }
        assert_eq!(asked, vec![at(2000), at(4000), at(6000)]);
        assert_eq!(a.asks(), MAX_ASKS);
        assert_eq!(now, at(8000));
        // An empty table answers with an end of 0 entries: whole.
        let mut a = Asking::new(at(0));
        answer(&mut a, at(50), 1, &[], 0);
        assert!(!a.handle_timeout(at(250)));
        assert!(!a.handle_timeout(at(2000)));
        assert!(!a.active());
    }

    #[test]
    fn records_before_the_request_or_after_the_asking_are_not_tracked() {
        let mut a = Asking::new(at(0));
        answer(&mut a, at(10), 1, &[0], 1);
        assert!(!a.handle_timeout(at(210)));
        assert!(!a.handle_timeout(at(2000)));
        assert!(!a.active());
        answer(&mut a, at(3000), 2, &[], 5);
        assert_eq!(a.poll_timeout(), None);
    }
}
