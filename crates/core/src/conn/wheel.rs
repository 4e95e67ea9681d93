//! The hierarchical timing wheel that files every connection by its
//! deadline: its heads and occupancy bitmaps ([`Wheel`]; the links live in
//! the table's entries) and the level arithmetic.

use super::*;

pub(super) const LEVELS: usize = 6;

pub(super) const SLOT_BITS: u32 = 6;

pub(super) const SLOTS: usize = 64;

/// Wheel list index of the pending (due) list.
pub(super) const PENDING: usize = LEVELS * SLOTS;

/// Farthest position the wheel can represent, relative to `elapsed`.
pub(super) const MAX_AHEAD: u64 = (1 << (SLOT_BITS as u64 * LEVELS as u64)) - 1;

/// The hierarchical timing wheel's heads and bitmaps (links live in entries).
#[derive(Clone, Debug)]
pub(super) struct Wheel {
    pub(super) heads: [u32; PENDING + 1],
    pub(super) occupied: [u64; LEVELS],
    /// Time (ms) the wheel has been advanced to.
    pub(super) elapsed: u64,
}

/// A slot due to fire: level, slot, start time.
#[derive(Copy, Clone, Debug)]
pub(super) struct Expiration {
    pub(super) level: usize,
    pub(super) slot: usize,
    pub(super) start: u64,
}

pub(super) const fn slot_range(level: usize) -> u64 {
    1u64 << (SLOT_BITS as u64 * level as u64)
}

/// The level at which a position `when` (> `elapsed`) is filed: the level of
/// the highest bit in which the two differ.
pub(super) fn level_for(elapsed: u64, when: u64) -> usize {
    let masked = ((elapsed ^ when) | (SLOTS as u64 - 1)).min(MAX_AHEAD);
    let significant = 63 - masked.leading_zeros();
    (significant / SLOT_BITS) as usize
}

impl Wheel {
    pub(super) fn new() -> Self {
        Wheel {
            heads: [NIL; PENDING + 1],
            occupied: [0; LEVELS],
            elapsed: 0,
        }
    }

    /// Earliest occupied slot, searching level 0 up: every time a lower level
    /// can hold lies before the next slot of any higher level.
    pub(super) fn next_expiration(&self) -> Option<Expiration> {
        (0..LEVELS).find_map(|level| self.next_in_level(level, 0))
    }

    /// The `skip`-th-or-later occupied slot of `level` in ring order from the
    /// current slot (`skip` counts slots from the current one).
    pub(super) fn next_in_level(&self, level: usize, skip: u32) -> Option<Expiration> {
        let occ = self.occupied[level];
        if occ == 0 || skip >= SLOTS as u32 {
            return None;
        }
        let range = slot_range(level);
        let now_slot = ((self.elapsed / range) % SLOTS as u64) as u32;
        let rotated = occ.rotate_right(now_slot) & (u64::MAX << skip);
        if rotated == 0 {
            return None;
        }
        let slot = ((rotated.trailing_zeros() + now_slot) % SLOTS as u32) as usize;
        let level_range = range << SLOT_BITS;
        let level_start = self.elapsed & !(level_range - 1);
        let mut start = level_start + slot as u64 * range;
        if start <= self.elapsed && level == LEVELS - 1 {
            // The top level is a ring: a slot "behind" the current one holds
            // times one rotation ahead.
            start = start.saturating_add(level_range);
        }
        Some(Expiration { level, slot, start })
    }
}
