//! A tournament tree that answers "which server would the kernel's
//! sequential least-cost loop pick?" in O(1), and follows one server's
//! counter change in O(log N).
//!
//! The least-connection family (ip_vs_lc.c, ip_vs_wlc.c, ip_vs_sed.c,
//! ip_vs_nq.c, ip_vs_fo.c, ip_vs_ovf.c and the fallbacks of ip_vs_lblc.c /
//! ip_vs_lblcr.c) all share one loop shape:
//!
//! ```text
//! least = first eligible d
//! for every later eligible d: if d is strictly better than least: least = d
//! ```
//!
//! The kernel runs it over the whole list on every new connection, O(N). When
//! "strictly better" is the strict part of a total preorder on eligible
//! servers, that loop returns the *earliest* position among the best ones, and
//! so does a tournament in which every match between a left (earlier) and a
//! right (later) subtree winner is decided by [`prefer_right`]: the right one
//! wins only if it is eligible and the left one is not, or both are eligible
//! and the right one is strictly better. Ineligible servers never win a match
//! against an eligible one, so the root is ineligible only when no server is
//! eligible.
//!
//! Internal nodes store the winning position. [`ArgminTree::rebuild`] is O(N)
//! (list edits), [`ArgminTree::fix`] replays one leaf-to-root path, O(log N)
//! (a server's counters or overload flag changed), and [`ArgminTree::best`]
//! reads the root.

use core::fmt;
use core::marker::PhantomData;

use super::{Algorithm, ListChange, SchedInput};
use crate::dest::Dest;
use crate::time::Instant;

/// A scheduler's preference order, as the kernel's loop applies it.
pub(crate) trait Order {
    /// May this server win at all? (Never true for weight 0, OVERLOAD or
    /// unavailable servers.)
    fn eligible(d: &Dest) -> bool;
    /// Is `right` (later in list order) strictly better than `left`? Both are
    /// eligible. Must be the strict part of a total preorder, so that the
    /// tournament agrees with the sequential loop.
    fn better(right: &Dest, left: &Dest) -> bool;
}

/// Marker for "no position" in a padding leaf.
const NONE: u32 = u32::MAX;

/// Does the later position `r` beat the earlier position `l`?
#[inline]
pub(crate) fn prefer_right<O: Order>(dests: &[Dest], l: u32, r: u32) -> bool {
    let Some(rd) = dests.get(r as usize) else {
        return false;
    };
    if !O::eligible(rd) {
        return false;
    }
    match dests.get(l as usize) {
        Some(ld) if O::eligible(ld) => O::better(rd, ld),
        _ => true,
    }
}

/// Tournament (segment) tree over list positions; see the module docs.
pub(crate) struct ArgminTree<O> {
    /// Number of servers the tree was built for.
    n: usize,
    /// Number of leaves (a power of two ≥ n, at least 1).
    cap: usize,
    /// Heap layout: node 1 is the root, node k has children 2k and 2k+1,
    /// leaves are cap..cap+cap. Each holds a position or [`NONE`].
    nodes: Vec<u32>,
    order: PhantomData<fn() -> O>,
}

impl<O> fmt::Debug for ArgminTree<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArgminTree")
            .field("n", &self.n)
            .field("root", &self.nodes.get(1))
            .finish()
    }
}

/// An empty tree; the first [`ArgminTree::best`] builds it.
impl<O: Order> Default for ArgminTree<O> {
    fn default() -> Self {
        ArgminTree {
            n: 0,
            cap: 1,
            nodes: vec![NONE; 2],
            order: PhantomData,
        }
    }
}

impl<O: Order> ArgminTree<O> {
    #[inline]
    fn play(dests: &[Dest], l: u32, r: u32) -> u32 {
        if prefer_right::<O>(dests, l, r) { r } else { l }
    }

    /// Rebuild from scratch, O(N): after the list itself changed.
    pub(crate) fn rebuild(&mut self, dests: &[Dest]) {
        let n = dests.len().min(NONE as usize);
        let cap = n.next_power_of_two().max(1);
        self.n = n;
        self.cap = cap;
        self.nodes.clear();
        self.nodes.resize(2 * cap, NONE);
        for (i, leaf) in self.nodes[cap..cap + n].iter_mut().enumerate() {
            // i < n ≤ u32::MAX, so the conversion cannot fail.
            *leaf = u32::try_from(i).unwrap_or(NONE);
        }
        for k in (1..cap).rev() {
            self.nodes[k] = Self::play(dests, self.nodes[2 * k], self.nodes[2 * k + 1]);
        }
    }

    /// The counters, flags or weight of `dests[pos]` changed: replay its
    /// path to the root, O(log N).
    pub(crate) fn fix(&mut self, dests: &[Dest], pos: usize) {
        if dests.len() != self.n || pos >= self.n {
            self.rebuild(dests);
            return;
        }
        let mut k = (self.cap + pos) / 2;
        while k >= 1 {
            // No early exit: a node's winner may keep its position while its
            // key changed, which can still change matches higher up.
            self.nodes[k] = Self::play(dests, self.nodes[2 * k], self.nodes[2 * k + 1]);
            k /= 2;
        }
    }

    /// Follow a list change: an edit of one server replays its path, any
    /// other change (positions moved) rebuilds.
    pub(crate) fn list_changed(&mut self, dests: &[Dest], change: ListChange) {
        match change {
            ListChange::Edited(p) => self.fix(dests, p),
            _ => self.rebuild(dests),
        }
    }

    /// The position the kernel's loop would pick, or `None` when no server
    /// is eligible. O(1) (rebuilds first if the list length changed without
    /// notice).
    pub(crate) fn best(&mut self, dests: &[Dest]) -> Option<usize> {
        if dests.len() != self.n {
            self.rebuild(dests);
        }
        let root = self.nodes[1] as usize;
        dests.get(root).filter(|d| O::eligible(d)).map(|_| root)
    }
}

/// An [`Order`] that is a whole scheduler (lc, wlc, sed, nq, fo, ovf): the
/// kernel's loop and nothing else, so its file only states the order.
pub(crate) trait NamedOrder: Order + fmt::Debug + Send + 'static {
    /// Which scheduler.
    const SCHEDULER: super::Scheduler;
}

/// Declares a [`NamedOrder`]: the unit struct (its doc comment comes first),
/// the scheduler it is, its `better` rule and, when it is not plain
/// [`Dest::is_eligible`], its `eligible` rule. The six tree schedulers differ
/// only in these, so each file states them and nothing else.
macro_rules! named_order {
    (
        $(#[$doc:meta])*
        $order:ident for $sched:ident,
        better($right:ident, $left:ident) $better:block
    ) => {
        $crate::sched::argmin::named_order! {
            $(#[$doc])*
            $order for $sched,
            eligible(d) { d.is_eligible() }
            better($right, $left) $better
        }
    };
    (
        $(#[$doc:meta])*
        $order:ident for $sched:ident,
        eligible($d:ident) $eligible:block
        better($right:ident, $left:ident) $better:block
    ) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub(crate) struct $order;

        impl $crate::sched::argmin::Order for $order {
            #[inline]
            fn eligible($d: &$crate::dest::Dest) -> bool $eligible
            #[inline]
            fn better($right: &$crate::dest::Dest, $left: &$crate::dest::Dest) -> bool $better
        }

        impl $crate::sched::argmin::NamedOrder for $order {
            const SCHEDULER: $crate::sched::Scheduler = $crate::sched::Scheduler::$sched;
        }
    };
}
pub(crate) use named_order;

/// The scheduler of a [`NamedOrder`]: list changes rebuild (or replay one
/// path of) the tree, counter changes replay one path, a decision reads the
/// root.
pub(crate) struct TreeScheduler<O> {
    tree: ArgminTree<O>,
}

impl<O: NamedOrder> TreeScheduler<O> {
    pub(crate) fn new() -> Self {
        TreeScheduler {
            tree: ArgminTree::default(),
        }
    }
}

impl<O: NamedOrder> fmt::Debug for TreeScheduler<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(O::SCHEDULER.name())
            .field("tree", &self.tree)
            .finish()
    }
}

impl<O: NamedOrder> Algorithm for TreeScheduler<O> {
    fn scheduler(&self) -> super::Scheduler {
        O::SCHEDULER
    }

    fn update(&mut self, dests: &[Dest], change: ListChange) {
        self.tree.list_changed(dests, change);
    }

    fn counts_changed(&mut self, dests: &[Dest], pos: usize) {
        self.tree.fix(dests, pos);
    }

    fn schedule(&mut self, dests: &[Dest], _input: &SchedInput, _now: Instant) -> Option<usize> {
        self.tree.best(dests)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::dests;
    use super::*;

    /// Plain least overhead, for exercising the tree.
    struct Ovh;
    impl Order for Ovh {
        fn eligible(d: &Dest) -> bool {
            d.is_eligible()
        }
        fn better(r: &Dest, l: &Dest) -> bool {
            r.overhead() < l.overhead()
        }
    }

    fn reference(d: &[Dest]) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, x) in d.iter().enumerate() {
            if !x.is_eligible() {
                continue;
            }
            match best {
                Some(b) if x.overhead() >= d[b].overhead() => {}
                _ => best = Some(i),
            }
        }
        best
    }

    #[test]
    fn empty_and_all_ineligible_give_none() {
        let mut t = ArgminTree::<Ovh>::default();
        assert_eq!(t.best(&[]), None);
        let d = dests(&[0, 0, 0]);
        t.rebuild(&d);
        assert_eq!(t.best(&d), None);
    }

    #[test]
    fn ties_go_to_earliest_and_fix_follows_changes() {
        let mut d = dests(&[1, 1, 1, 1, 1]);
        let mut t = ArgminTree::<Ovh>::default();
        t.rebuild(&d);
        assert_eq!(t.best(&d), Some(0));
        d[0].inactive = 1;
        t.fix(&d, 0);
        assert_eq!(t.best(&d), Some(1));
        d[1].active = 1;
        t.fix(&d, 1);
        assert_eq!(t.best(&d), Some(2));
        d[4].overloaded = true;
        t.fix(&d, 4);
        d[0].inactive = 0;
        t.fix(&d, 0);
        assert_eq!(t.best(&d), Some(0));
        // Pseudo-random walk of changes against the O(N) loop.
        let mut x: u64 = 12345;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let p = (x >> 33) as usize % d.len();
            match (x >> 20) % 4 {
                0 => d[p].active = ((x >> 40) % 4) as u32,
                1 => d[p].inactive = ((x >> 40) % 300) as u32,
                2 => d[p].overloaded = (x >> 40).is_multiple_of(3),
                _ => d[p].config.weight = ((x >> 40) % 3) as u32,
            }
            t.fix(&d, p);
            assert_eq!(t.best(&d), reference(&d));
        }
    }
}
