//! Services waiting for room in the maps ([`RoomWait`]): a service or a
//! change of one (a real server, an edit) the maps had no room for waits,
//! in the order it found none, and is retried from the director's model
//! only once room is freed (a service's index or a region of `slots` past
//! its grace period, a deleted real server's index given back) — not at
//! every report: at 10,000 services on a plane of 4,096, retrying the
//! 5,904 waiting ones at every report was most of the plane's work.

use std::collections::{HashSet, VecDeque};

use rvs_core::model::ServiceKey;

/// Whether the service at the head of the queue can be let in now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Fit {
    /// There is room for what it lacks: retry it.
    Yes,
    /// Not enough room yet: it and those behind it wait on.
    No,
    /// The model no longer has it: it waits no more.
    Gone,
}

/// The services waiting for room (sans-IO: the plane records, decides,
/// and replays what [`RoomWait::take`] returns).
#[derive(Debug, Default)]
pub(super) struct RoomWait {
    /// Not installed, for want of room for the service itself: commands
    /// about it are ignored (the refusal was the service's).
    roomless: HashSet<ServiceKey>,
    /// Installed, with a change (a real server, an edit) that found no
    /// room.
    short: HashSet<ServiceKey>,
    /// Both, in the order they found no room (entries of services that
    /// wait no more are skipped when met).
    queue: VecDeque<ServiceKey>,
    /// Room was freed since the last [`RoomWait::take`].
    freed: bool,
}

impl RoomWait {
    /// Whether `key` is not installed for want of room.
    pub(super) fn roomless(&self, key: &ServiceKey) -> bool {
        self.roomless.contains(key)
    }

    /// Whether `key` waits for room (installed or not).
    pub(super) fn waits(&self, key: &ServiceKey) -> bool {
        self.roomless.contains(key) || self.short.contains(key)
    }

    /// A command about `key` found no room; `installed` says whether the
    /// service itself is in the maps.
    pub(super) fn no_room(&mut self, key: ServiceKey, installed: bool) {
        let was = self.waits(&key);
        if installed {
            self.roomless.remove(&key);
            self.short.insert(key);
        } else {
            self.short.remove(&key);
            self.roomless.insert(key);
        }
        if !was {
            self.queue.push_back(key);
        }
    }

    /// `key` was installed (its add succeeded).
    pub(super) fn installed(&mut self, key: &ServiceKey) {
        self.roomless.remove(key);
    }

    /// `key` was deleted: it waits no more. Returns whether it was not
    /// installed for want of room (then there is nothing to delete).
    pub(super) fn forget(&mut self, key: &ServiceKey) -> bool {
        self.short.remove(key);
        self.roomless.remove(key)
    }

    /// Everything was deleted.
    pub(super) fn clear(&mut self) {
        *self = RoomWait {
            freed: self.freed,
            ..RoomWait::default()
        };
    }

    /// Room was freed: the next [`RoomWait::take`] looks at the queue.
    pub(super) fn freed(&mut self) {
        self.freed = true;
    }

    /// The services to retry now, oldest first: none unless room was
    /// freed since the last call; then those at the head of the queue that
    /// `fits` (told whether the service itself is to be installed) lets
    /// in, up to the first it does not. Those returned wait no more (a
    /// retry that finds no room again queues them anew, at the back).
    pub(super) fn take(
        &mut self,
        mut fits: impl FnMut(&ServiceKey, bool) -> Fit,
    ) -> Vec<ServiceKey> {
        if !std::mem::take(&mut self.freed) {
            return Vec::new();
        }
        let mut out = Vec::new();
        while let Some(key) = self.queue.front().copied() {
            if !self.waits(&key) || out.contains(&key) {
                self.queue.pop_front();
                continue;
            }
            match fits(&key, self.roomless.contains(&key)) {
                Fit::No => break,
                Fit::Gone => {}
                Fit::Yes => out.push(key),
            }
            self.queue.pop_front();
            self.forget(&key);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::model::Protocol;
    use std::net::{IpAddr, Ipv4Addr};

    fn key(port: u16) -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            port,
        }
    }

    /// Nothing is retried until room is freed; then the oldest first, as
    /// many as fit, each once.
    #[test]
    fn waiting_services_are_retried_only_when_room_is_freed_oldest_first() {
        let mut w = RoomWait::default();
        for p in 1..=5 {
            w.no_room(key(p), false);
        }
        // A second refusal of a waiting service does not queue it twice.
        w.no_room(key(2), false);
        w.no_room(key(3), true);
        let mut asked = 0;
        assert!(
            w.take(|_, _| {
                asked += 1;
                Fit::Yes
            })
            .is_empty()
        );
        assert_eq!(asked, 0, "nothing freed: nothing looked at");
        w.freed();
        let mut room = 2;
        let got = w.take(|k, roomless| {
            assert_eq!(roomless, *k != key(3));
            if room == 0 {
                return Fit::No;
            }
            room -= 1;
            Fit::Yes
        });
        assert_eq!(got, vec![key(1), key(2)]);
        assert!(!w.waits(&key(1)) && w.waits(&key(3)) && !w.roomless(&key(3)));
        // Deleted while waiting: skipped.
        assert!(!w.forget(&key(3)));
        w.freed();
        let got = w.take(|k, _| if *k == key(4) { Fit::Gone } else { Fit::Yes });
        assert_eq!(got, vec![key(5)]);
        assert!(!w.waits(&key(4)));
        w.freed();
        assert!(w.take(|_, _| Fit::Yes).is_empty());
    }
}
