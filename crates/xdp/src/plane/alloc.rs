//! Allocation of map room: [`SlotAlloc`] over `slots`, [`IndexAlloc`] over
//! the `svc_info` and `dests` indexes, and what waits for its grace period
//! ([`Retired`]).

pub(super) use rvs_control::room::{Region, SlotAlloc};

/// Free list of map indexes `0..max`.
#[derive(Debug)]
pub(super) struct IndexAlloc {
    next: u32,
    max: u32,
    free: Vec<u32>,
}

impl IndexAlloc {
    pub(super) fn new(max: u32) -> Self {
        IndexAlloc {
            next: 0,
            max,
            free: Vec::new(),
        }
    }
    pub(super) fn alloc(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        (self.next < self.max).then(|| {
            self.next += 1;
            self.next - 1
        })
    }
    pub(super) fn release(&mut self, i: u32) {
        self.free.push(i);
    }
    /// How many indexes [`IndexAlloc::alloc`] can still give.
    pub(super) fn available(&self) -> u32 {
        self.free.len() as u32 + (self.max - self.next)
    }
    /// Take index `i` out of the free ones (found in use in adopted maps).
    /// False when it was not free.
    pub(super) fn reserve(&mut self, i: u32) -> bool {
        if i >= self.max {
            return false;
        }
        if let Some(p) = self.free.iter().position(|&f| f == i) {
            self.free.swap_remove(p);
            return true;
        }
        if i < self.next {
            return false;
        }
        self.free.extend(self.next..i);
        self.next = i + 1;
        true
    }
}

/// Something waiting for its grace period.
#[derive(Copy, Clone, Debug)]
pub(super) enum Retired {
    Region(Region),
    Svc(u32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_regions_and_indexes_are_not_handed_out() {
        let mut s = SlotAlloc::new(100);
        assert!(s.reserve(Region { off: 10, len: 5 }));
        assert!(!s.reserve(Region { off: 12, len: 1 }));
        assert_eq!(s.free_total(), 95);
        let a = s.alloc(10).expect("room");
        assert_eq!(a, Region { off: 0, len: 10 });
        let b = s.alloc(3).expect("room");
        assert_eq!(b.off, 15);
        let mut i = IndexAlloc::new(8);
        assert!(i.reserve(3));
        assert!(!i.reserve(3));
        assert!(i.reserve(0));
        let got: Vec<u32> = std::iter::from_fn(|| i.alloc()).collect();
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(sorted, vec![1, 2, 4, 5, 6, 7]);
    }
}
