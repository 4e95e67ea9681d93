//! The free ranges of the `slots` array, kept by offset so that a range
//! given back merges with its neighbours in O(log n). A publish takes a
//! new region for its service and gives the old one back after the grace
//! period, so at 10,000 services a burst of changes gives back tens of
//! thousands of regions: sorting the whole list at each (as this did
//! before) made such a burst take seconds.

use std::collections::BTreeMap;

/// Free ranges, offset → length; no two adjacent or overlapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FreeRanges {
    by_off: BTreeMap<u32, u32>,
}

impl FreeRanges {
    /// All of `0..len` free.
    pub(super) fn new(len: u32) -> Self {
        let mut by_off = BTreeMap::new();
        if len > 0 {
            by_off.insert(0, len);
        }
        FreeRanges { by_off }
    }

    /// The lowest range of at least `len` (first fit): its first `len`
    /// offsets are taken and the start returned; `None` when none fits.
    pub(super) fn take(&mut self, len: u32) -> Option<u32> {
        let (&off, &l) = self.by_off.iter().find(|&(_, &l)| l >= len)?;
        self.by_off.remove(&off);
        if l > len {
            self.by_off.insert(off + len, l - len);
        }
        Some(off)
    }

    /// Give `off..off + len` back (it must not be free already), merged
    /// with the free ranges it touches.
    pub(super) fn give(&mut self, off: u32, len: u32) {
        if len == 0 {
            return;
        }
        let (mut start, mut end) = (off, off + len);
        if let Some((&o, &l)) = self.by_off.range(..off).next_back()
            && o + l == off
        {
            self.by_off.remove(&o);
            start = o;
        }
        if let Some(l) = self.by_off.remove(&end) {
            end += l;
        }
        self.by_off.insert(start, end - start);
    }

    /// The free ranges in order (offset, length).
    #[cfg(test)]
    fn ranges(&self) -> Vec<(u32, u32)> {
        self.by_off.iter().map(|(&o, &l)| (o, l)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::FreeRanges;

    #[test]
    fn first_fit_and_merging_with_both_neighbours() {
        let mut f = FreeRanges::new(100);
        assert_eq!(f.take(10), Some(0));
        assert_eq!(f.take(20), Some(10));
        assert_eq!(f.take(30), Some(30));
        assert_eq!(f.ranges(), vec![(60, 40)]);
        f.give(0, 10);
        assert_eq!(f.take(11), Some(60), "the hole at 0 is too small");
        f.give(30, 30);
        assert_eq!(f.ranges(), vec![(0, 10), (30, 30), (71, 29)]);
        assert_eq!(f.take(5), Some(0), "the lowest that fits");
        f.give(0, 5);
        f.give(10, 20);
        assert_eq!(f.ranges(), vec![(0, 60), (71, 29)], "merged both ways");
        f.give(60, 11);
        assert_eq!(f.ranges(), vec![(0, 100)]);
        assert_eq!(f.take(101), None);
        assert_eq!(f.take(100), Some(0));
        assert_eq!(f.take(1), None);
    }

    /// The same answers as the sorted list this replaced, over a long run
    /// of takes and gives in a fragmenting order.
    #[test]
    fn agrees_with_a_sorted_list() {
        let mut f = FreeRanges::new(10_000);
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
                let got = f.take(len);
                assert_eq!(got, want, "take {len} at step {step}");
                if let Some(o) = got {
                    held.push((o, len));
                }
            } else {
                let (o, l) = held.swap_remove((x as usize >> 8) % held.len());
                f.give(o, l);
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
            assert_eq!(f.ranges(), list, "step {step}");
        }
    }
}
