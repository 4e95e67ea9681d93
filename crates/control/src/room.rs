//! Room in a data plane's BPF arrays: the first-fit allocator of the
//! `slots` array where each service's scheduling table lies, shared by the
//! XDP and sock planes. A publish takes a new region and gives the old one
//! back after its grace period, so at 10,000 services a burst of changes
//! gives back tens of thousands of regions: the free runs are kept by
//! offset and merge with their neighbours in O(log n).

use std::collections::BTreeMap;

/// A region of a data plane's `slots` array: where one service's
/// scheduling table lies.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// First slot.
    pub off: u32,
    /// Number of slots.
    pub len: u32,
}

/// First-fit allocator over a `slots` array with coalescing of free
/// neighbours, kept by offset: a region given back merges in O(log n).
#[derive(Debug)]
pub struct SlotAlloc {
    /// Free runs: offset -> length.
    free: BTreeMap<u32, u32>,
}

impl SlotAlloc {
    /// All of `0..len` free.
    pub fn new(len: u32) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(0, len);
        }
        SlotAlloc { free }
    }

    /// The lowest free run of at least `len` (first fit): its first `len`
    /// slots; `None` when none fits.
    pub fn alloc(&mut self, len: u32) -> Option<Region> {
        let (&off, &run) = self.free.iter().find(|&(_, &run)| run >= len)?;
        self.free.remove(&off);
        if run > len {
            self.free.insert(off + len, run - len);
        }
        Some(Region { off, len })
    }

    /// Give `r` back (it must not be free already), merged with the free
    /// runs it touches.
    pub fn release(&mut self, r: Region) {
        if r.len == 0 {
            return;
        }
        let (mut off, mut len) = (r.off, r.len);
        if let Some((&p, &plen)) = self.free.range(..off).next_back()
            && p + plen == off
        {
            self.free.remove(&p);
            off = p;
            len += plen;
        }
        if let Some(&nlen) = self.free.get(&(off + len)) {
            self.free.remove(&(off + len));
            len += nlen;
        }
        self.free.insert(off, len);
    }

    /// Take `r` out of the free runs (a region found in use in adopted
    /// maps). False when part of it is not free.
    pub fn reserve(&mut self, r: Region) -> bool {
        if r.len == 0 {
            return true;
        }
        let Some((&off, &run)) = self.free.range(..=r.off).next_back() else {
            return false;
        };
        if off + run < r.off + r.len {
            return false;
        }
        self.free.remove(&off);
        if r.off > off {
            self.free.insert(off, r.off - off);
        }
        let end = r.off + r.len;
        if off + run > end {
            self.free.insert(end, off + run - end);
        }
        true
    }

    /// Slots free in all.
    pub fn free_total(&self) -> u64 {
        self.free.values().map(|&l| u64::from(l)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::{Region, SlotAlloc};

    fn ranges(s: &SlotAlloc) -> Vec<(u32, u32)> {
        s.free.iter().map(|(&o, &l)| (o, l)).collect()
    }

    fn take(s: &mut SlotAlloc, len: u32) -> Option<u32> {
        s.alloc(len).map(|r| r.off)
    }

    fn give(s: &mut SlotAlloc, off: u32, len: u32) {
        s.release(Region { off, len });
    }

    #[test]
    fn first_fit_and_merging_with_both_neighbours() {
        let mut f = SlotAlloc::new(100);
        assert_eq!(take(&mut f, 10), Some(0));
        assert_eq!(take(&mut f, 20), Some(10));
        assert_eq!(take(&mut f, 30), Some(30));
        assert_eq!(ranges(&f), vec![(60, 40)]);
        give(&mut f, 0, 10);
        assert_eq!(take(&mut f, 11), Some(60), "the hole at 0 is too small");
        give(&mut f, 30, 30);
        assert_eq!(ranges(&f), vec![(0, 10), (30, 30), (71, 29)]);
        assert_eq!(take(&mut f, 5), Some(0), "the lowest that fits");
        give(&mut f, 0, 5);
        give(&mut f, 10, 20);
        assert_eq!(ranges(&f), vec![(0, 60), (71, 29)], "merged both ways");
        give(&mut f, 60, 11);
        assert_eq!(ranges(&f), vec![(0, 100)]);
        assert_eq!(take(&mut f, 101), None);
        assert_eq!(take(&mut f, 100), Some(0));
        assert_eq!(take(&mut f, 1), None);
    }

    /// The same answers as a sorted list merged at each give-back (what the
    /// sock plane kept before it shared this), over a long run
    /// of takes and gives in a fragmenting order.
    #[test]
    fn agrees_with_a_sorted_list() {
        let mut f = SlotAlloc::new(10_000);
        let mut list: Vec<(u32, u32)> = vec![(0, 10_000)];
        let mut held: Vec<(u32, u32)> = Vec::new();
        let mut x: u32 = 7;
        for step in 0..5_000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let len = 1 + (x >> 16) % 40;
            if step % 3 != 2 || held.is_empty() {
                let want = list.iter().position(|&(_, l)| l >= len).map(|p| {
                    let (o, l) = list[p];
                    if l == len {
                        list.remove(p);
                    } else {
                        list[p] = (o + len, l - len);
                    }
                    o
                });
                let got = take(&mut f, len);
                assert_eq!(got, want, "take {len} at step {step}");
                if let Some(o) = got {
                    held.push((o, len));
                }
            } else {
                let (o, l) = held.swap_remove((x as usize >> 8) % held.len());
                give(&mut f, o, l);
                list.push((o, l));
                list.sort_unstable();
                let mut merged: Vec<(u32, u32)> = Vec::new();
                for &(o, l) in &list {
                    match merged.last_mut() {
                        Some(last) if last.0 + last.1 == o => last.1 += l,
                        _ => merged.push((o, l)),
                    }
                }
                list = merged;
            }
            assert_eq!(ranges(&f), list, "step {step}");
        }
    }
}
