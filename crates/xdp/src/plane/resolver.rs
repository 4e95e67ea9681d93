//! Neighbour resolution as its own task: [`Resolver`] owns the
//! [`Resolve`] implementation (the kernel's tables over netlink in rvsd),
//! takes the plane's [`Wanted`] set and answers with what it learns, so
//! no netlink call and no wait ever runs where the plane's commands are
//! applied.
//!
//! [`Resolver`] is a state machine over an explicit clock (tests drive it
//! with any `Instant`); [`spawn`] runs it on its own thread, where waiting
//! for the next due look-up is fine.
//!
//! * An unresolved DR/TUN real server is looked up at once, then with a
//!   backoff from [`FIRST_RETRY`] doubling up to [`MAX_RETRY`]; the kernel
//!   is asked to resolve it (a datagram to its discard port, see
//!   [`crate::neigh`]) at the first look-up and again at most every
//!   [`MAX_RETRY`]. Hundreds of real servers that never answer cost one
//!   look-up each per [`MAX_RETRY`] on this thread, nothing anywhere else.
//! * A NAT real server's next hop is looked up the same way, solicited
//!   once (its packets go through the FIB meanwhile, which resolves it).
//! * A next hop the program found unresolved ([`Wanted::reply`]: a NAT
//!   reply's client after a failover) is handled like a DR/TUN real
//!   server: the kernel drops the packets passed to it meanwhile.
//! * Next hops in use are looked up again every [`REFRESH`]: a change is
//!   sent; a missing entry makes the kernel resolve it again (the plane
//!   keeps the last known MAC).
//!
//! * The MACs of the interfaces the program is attached to (their own and
//!   their macvlans', such as a VRRP `use_vmac` interface) are looked up
//!   every [`REFRESH`]; a difference from what the plane owns is sent.
//!
//! An answer is repeated (every [`MAX_RETRY`], or [`REFRESH`] for a
//! change) until the plane's wanted set shows it taken: an answer the plane
//! failed to install is not lost.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::Wanted;
use crate::neigh::{L2, Resolve};

/// First retry of a look-up that found nothing.
pub const FIRST_RETRY: Duration = Duration::from_millis(10);
/// Longest wait between look-ups of an unresolved address (and between
/// solicitations of a DR/TUN one).
pub const MAX_RETRY: Duration = Duration::from_secs(1);
/// How often next hops in use are looked up again.
pub const REFRESH: Duration = Duration::from_secs(1);

/// An address waiting for its first answer.
#[derive(Clone, Debug)]
struct Pending {
    /// A NAT real server (solicited once only).
    nat: bool,
    /// When to look it up next.
    next: Instant,
    /// The wait after the next look-up that finds nothing.
    backoff: Duration,
    /// When the kernel was last asked to resolve it.
    solicited: Option<Instant>,
}

/// The resolver's state machine (see the module doc).
#[derive(Debug)]
pub struct Resolver<R: Resolve> {
    inner: R,
    pending: BTreeMap<IpAddr, Pending>,
    in_use: BTreeMap<IpAddr, L2>,
    next_refresh: Option<Instant>,
    links: BTreeMap<u32, Vec<[u8; 6]>>,
    next_links: Option<Instant>,
}

/// What the resolver learnt, for the plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The next hop of a real server.
    Neighbour(IpAddr, L2),
    /// The MACs an attached interface receives frames for now.
    Links(u32, Vec<[u8; 6]>),
}

impl<R: Resolve> Resolver<R> {
    /// A resolver asking `inner`.
    pub fn new(inner: R) -> Self {
        Resolver {
            inner,
            pending: BTreeMap::new(),
            in_use: BTreeMap::new(),
            next_refresh: None,
            links: BTreeMap::new(),
            next_links: None,
        }
    }

    /// The [`Resolve`] implementation (tests change a static table).
    pub fn inner_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// The plane now wants `w` (see [`super::Plane::wanted`]): addresses
    /// new to it are due at `now`, ones it no longer wants are forgotten.
    pub fn set_wanted(&mut self, w: &Wanted, now: Instant) {
        let mut pending = BTreeMap::new();
        let tagged = w
            .unresolved
            .iter()
            .chain(&w.reply)
            .map(|a| (a, false))
            .chain(w.nat.iter().map(|a| (a, true)));
        for (a, nat) in tagged {
            let p = match self.pending.remove(a) {
                Some(p) if p.nat == nat => p,
                _ => Pending {
                    nat,
                    next: now,
                    backoff: FIRST_RETRY,
                    solicited: None,
                },
            };
            pending.entry(*a).or_insert(p);
        }
        self.pending = pending;
        self.in_use = w.in_use.clone();
        self.links = w.links.clone();
        if self.links.is_empty() {
            self.next_links = None;
        } else if self.next_links.is_none() {
            self.next_links = Some(now);
        }
        if self.in_use.is_empty() {
            self.next_refresh = None;
        } else if self.next_refresh.is_none() {
            self.next_refresh = Some(now + REFRESH);
        }
    }

    /// When [`Resolver::poll`] has something to do next; `None`: nothing
    /// until the wanted set changes.
    pub fn next_due(&self) -> Option<Instant> {
        let p = self.pending.values().map(|p| p.next).min();
        [p, self.next_refresh, self.next_links]
            .into_iter()
            .flatten()
            .min()
    }

    /// The attached interfaces whose MACs differ from what the plane owns
    /// there, looked up when due (every [`REFRESH`]); repeated until the
    /// plane's wanted set shows them taken.
    pub fn poll_links(&mut self, now: Instant) -> Vec<(u32, Vec<[u8; 6]>)> {
        if self.next_links.is_none_or(|t| t > now) {
            return Vec::new();
        }
        self.next_links = Some(now + REFRESH);
        let mut out = Vec::new();
        for (link, have) in &self.links {
            // A failed look-up (the interface is going away) changes nothing.
            if let Ok(mut macs) = self.inner.owned_macs(*link) {
                macs.sort_unstable();
                macs.dedup();
                if macs != *have {
                    out.push((*link, macs));
                }
            }
        }
        out
    }

    /// Do what is due at `now`: look up (and solicit) pending addresses,
    /// refresh next hops in use. Returns the answers for the plane
    /// ([`super::Plane::on_neighbour`]).
    pub fn poll(&mut self, now: Instant) -> Vec<(IpAddr, L2)> {
        let mut out = HashMap::new();
        for (a, p) in self.pending.iter_mut().filter(|(_, p)| p.next <= now) {
            if let Ok(Some(l2)) = self.inner.lookup(*a) {
                out.insert(*a, l2);
                // Repeated while the plane still wants it (an install
                // that failed).
                p.next = now + MAX_RETRY;
                continue;
            }
            let resolicit = !p.nat && p.solicited.is_none_or(|t| now >= t + MAX_RETRY);
            if p.solicited.is_none() || resolicit {
                // Best effort: a failure (no route) shows as no answer.
                let _ = self.inner.solicit(*a);
                p.solicited = Some(now);
            }
            p.next = now + p.backoff;
            p.backoff = (p.backoff * 2).min(MAX_RETRY);
        }
        if self.next_refresh.is_some_and(|t| t <= now) {
            for (a, have) in &self.in_use {
                match self.inner.lookup(*a) {
                    Ok(Some(l2)) if l2 != *have => {
                        out.insert(*a, l2);
                    }
                    Ok(None) => {
                        let _ = self.inner.solicit(*a);
                    }
                    _ => {}
                }
            }
            self.next_refresh = Some(now + REFRESH);
        }
        let mut out: Vec<(IpAddr, L2)> = out.into_iter().collect();
        out.sort_by_key(|(a, _)| *a);
        out
    }
}

/// Run `resolver` on its own thread: it takes wanted sets from `wants`
/// (the latest counts) and sends every answer through `answer` (false
/// when the other side is gone: the thread ends, as it does when `wants`
/// is closed).
pub fn spawn<R: Resolve + Send + 'static>(
    mut resolver: Resolver<R>,
    wants: Receiver<Wanted>,
    answer: impl Fn(Answer) -> bool + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("rvs-xdp-neigh".into())
        .spawn(move || {
            loop {
                let now = Instant::now();
                let wait = resolver.next_due().map_or(Duration::from_secs(3600), |t| {
                    t.saturating_duration_since(now)
                });
                match wants.recv_timeout(wait) {
                    Ok(mut w) => {
                        while let Ok(newer) = wants.try_recv() {
                            w = newer;
                        }
                        resolver.set_wanted(&w, Instant::now());
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                let now = Instant::now();
                let neighbours = resolver.poll(now).into_iter();
                let links = resolver.poll_links(now).into_iter();
                let answers = neighbours
                    .map(|(a, l2)| Answer::Neighbour(a, l2))
                    .chain(links.map(|(i, m)| Answer::Links(i, m)));
                for a in answers {
                    if !answer(a) {
                        return;
                    }
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neigh::StaticResolver;
    use std::net::Ipv4Addr;

    fn a(i: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
    }

    fn l2(i: u8) -> L2 {
        L2 {
            ifindex: 3,
            mac: [2, 0, 0, 0, 0, i],
            smac: [2, 0, 0, 0, 0, 1],
            src: None,
        }
    }

    #[test]
    fn unresolved_addresses_are_solicited_and_polled_with_a_backoff() {
        let t0 = Instant::now();
        let mut r = Resolver::new(StaticResolver::default());
        let mut w = Wanted::default();
        w.unresolved.insert(a(1));
        r.set_wanted(&w, t0);
        assert_eq!(r.next_due(), Some(t0));
        assert!(r.poll(t0).is_empty());
        assert_eq!(r.inner_mut().solicited, vec![a(1)]);
        // 10 ms, then 20, 40, ... up to a second; solicited again after a
        // second.
        let mut t = t0;
        let mut waits = Vec::new();
        for _ in 0..10 {
            let next = r.next_due().unwrap();
            waits.push(next - t);
            t = next;
            assert!(r.poll(t).is_empty());
        }
        assert_eq!(waits[0], FIRST_RETRY);
        assert_eq!(waits[1], FIRST_RETRY * 2);
        assert_eq!(*waits.last().unwrap(), MAX_RETRY);
        assert!(r.inner_mut().solicited.len() >= 2, "solicited again");
        // Nothing is done before it is due.
        let n = r.inner_mut().solicited.len();
        r.inner_mut().table.insert(a(1), l2(1));
        assert!(r.poll(t).is_empty());
        assert_eq!(r.inner_mut().solicited.len(), n);
        let found = r.next_due().unwrap();
        assert_eq!(r.poll(found), vec![(a(1), l2(1))]);
        // Repeated until the plane's wanted set shows it taken.
        let t = r.next_due().unwrap();
        assert_eq!(t, found + MAX_RETRY);
        assert_eq!(r.poll(t), vec![(a(1), l2(1))]);
        let mut taken = Wanted::default();
        taken.in_use.insert(a(1), l2(1));
        r.set_wanted(&taken, t);
        assert_eq!(r.next_due(), Some(t + REFRESH));
        assert!(r.poll(t + REFRESH).is_empty(), "unchanged");
    }

    #[test]
    fn nat_next_hops_are_solicited_once() {
        let t0 = Instant::now();
        let mut r = Resolver::new(StaticResolver::default());
        let mut w = Wanted::default();
        w.nat.insert(a(2));
        r.set_wanted(&w, t0);
        let mut t = t0;
        for _ in 0..20 {
            assert!(r.poll(t).is_empty());
            t = r.next_due().unwrap();
        }
        assert_eq!(r.inner_mut().solicited, vec![a(2)]);
        r.inner_mut().table.insert(a(2), l2(2));
        assert_eq!(r.poll(t), vec![(a(2), l2(2))]);
    }

    #[test]
    fn next_hops_in_use_are_followed() {
        let t0 = Instant::now();
        let mut r = Resolver::new(StaticResolver::default());
        r.inner_mut().table.insert(a(3), l2(3));
        let mut w = Wanted::default();
        w.in_use.insert(a(3), l2(3));
        r.set_wanted(&w, t0);
        assert!(r.poll(t0).is_empty(), "not due yet");
        assert!(r.poll(t0 + REFRESH).is_empty(), "unchanged");
        let mut moved = l2(3);
        moved.mac = [2, 9, 9, 9, 9, 9];
        r.inner_mut().table.insert(a(3), moved);
        assert_eq!(r.poll(t0 + REFRESH * 2), vec![(a(3), moved)]);
        // Gone from the kernel's table: asked to resolve it again, the
        // plane keeps what it has.
        r.inner_mut().table.clear();
        assert!(r.poll(t0 + REFRESH * 3).is_empty());
        assert_eq!(r.inner_mut().solicited, vec![a(3)]);
    }

    #[test]
    fn forgotten_addresses_are_dropped() {
        let t0 = Instant::now();
        let mut r = Resolver::new(StaticResolver::default());
        let mut w = Wanted::default();
        for i in 1..=200 {
            w.unresolved.insert(a(i));
        }
        r.set_wanted(&w, t0);
        assert!(r.poll(t0).is_empty());
        assert_eq!(r.inner_mut().solicited.len(), 200);
        r.set_wanted(&Wanted::default(), t0);
        assert_eq!(r.next_due(), None);
    }
}
