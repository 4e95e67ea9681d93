//! Scheduling data for the `slots` map, computed by rvs-core.
//!
//! The BPF program never builds tables: the control side asks the core's
//! own schedulers for them (sh/dh buckets, the Maglev table, one weighted
//! round-robin cycle), translates list positions into `dests` indexes and
//! writes them into a fresh region of `slots`. So the program's choices are
//! the core's choices (the scheduler-vector tests check it).

use rvs_core::dest::Dest;
use rvs_core::sched::{
    ListChange, SchedError, SchedParams, Scheduler, new_scheduler, wrr_sequence,
};

use crate::maps::SLOT_EMPTY;

/// Why a table could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The core refused the scheduler or its parameters.
    #[error(transparent)]
    Sched(#[from] SchedError),
    /// The scheduler is not (yet) run by the XDP program.
    #[error("scheduler `{0}` is not supported by the XDP data plane yet")]
    Unsupported(Scheduler),
    /// `index_of` has no `dests` index for this list position.
    #[error("no dests index for list position {0}")]
    MissingIndex(usize),
}

/// The `slots` values of scheduler `sched` over `dests` (IPVS list order),
/// with list position `p` stored as `index_of[p]`:
/// * `sh`, `dh`: 256 buckets; `mh`: the M-slot table ([`SLOT_EMPTY`] for
///   empty slots);
/// * `wrr`: one cycle of the weighted round-robin sequence;
/// * `rr`, `lc`, `wlc`, `sed`, `nq`, `fo`, `ovf`, `twos`, `lblc`, `lblcr`:
///   nothing (the program walks the real-server list itself).
pub fn scheduling_table(
    sched: Scheduler,
    params: &SchedParams,
    dests: &[Dest],
    index_of: &[u32],
) -> Result<Vec<u32>, TableError> {
    use Scheduler as S;
    let positions: Vec<Option<u32>> = match sched {
        // The program walks the real-server list itself (with the counters
        // of `dest_conns` for the least-connection family).
        // twos, lblc and lblcr too (lblc/lblcr keep their destination-address
        // table in the `locality` map).
        S::Rr | S::Lc | S::Wlc | S::Sed | S::Nq | S::Fo | S::Ovf | S::Twos | S::Lblc | S::Lblcr => {
            return Ok(Vec::new());
        }
        S::Wrr => wrr_sequence(dests).into_iter().map(Some).collect(),
        S::Sh | S::Dh | S::Mh => {
            let mut s = new_scheduler(sched, params)?;
            s.update(dests, ListChange::Reset);
            s.lookup_table().ok_or(TableError::Unsupported(sched))?
        }
    };
    positions
        .into_iter()
        .map(|p| match p {
            None => Ok(SLOT_EMPTY),
            Some(p) => index_of
                .get(p as usize)
                .copied()
                .ok_or(TableError::MissingIndex(p as usize)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::dest::DestId;
    use rvs_core::model::DestConfig;
    use std::net::{IpAddr, Ipv4Addr};

    fn dests(weights: &[u32]) -> Vec<Dest> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1));
                Dest::new(DestId(i as u32), DestConfig::new(ip, 80).weight(w))
            })
            .collect()
    }

    #[test]
    fn tables_have_the_kernel_sizes_and_translate_positions() {
        let d = dests(&[1, 2, 3]);
        let idx = [100, 200, 300];
        let p = SchedParams::default();
        let sh = scheduling_table(Scheduler::Sh, &p, &d, &idx).unwrap();
        assert_eq!(sh.len(), 256);
        assert_eq!(&sh[..6], &[100, 200, 200, 300, 300, 300]);
        let dh = scheduling_table(Scheduler::Dh, &p, &d, &idx).unwrap();
        assert_eq!(&dh[..4], &[100, 200, 300, 100]);
        let mh = scheduling_table(Scheduler::Mh, &p, &d, &idx).unwrap();
        assert_eq!(mh.len() as u32, p.mh_table_size);
        assert!(mh.iter().all(|v| idx.contains(v)));
        let wrr = scheduling_table(Scheduler::Wrr, &p, &d, &idx).unwrap();
        assert_eq!(wrr, vec![300, 200, 300, 100, 200, 300]);
        for s in Scheduler::all() {
            let t = scheduling_table(s, &p, &d, &idx).unwrap();
            assert_eq!(
                t.is_empty(),
                !matches!(
                    s,
                    Scheduler::Sh | Scheduler::Dh | Scheduler::Mh | Scheduler::Wrr
                ),
                "{s}"
            );
        }
        let bad_m = SchedParams {
            mh_table_size: 4094,
            ..p
        };
        assert!(matches!(
            scheduling_table(Scheduler::Mh, &bad_m, &d, &idx),
            Err(TableError::Sched(_))
        ));
        assert_eq!(
            scheduling_table(Scheduler::Dh, &p, &d, &idx[..2]),
            Err(TableError::MissingIndex(2))
        );
    }

    /// Directors of a fleet with the same configuration hash a flow to the
    /// same real server: two planes built independently — other DestIds
    /// (another history of adds and deletes), other `dests` indexes — give
    /// tables that name the same real-server address in every slot, for
    /// every hashing scheduler and with `mh-port`. (The list order is the
    /// configuration's: rebuilt from scratch each time, no history.)
    #[test]
    fn two_directors_with_one_configuration_build_the_same_tables() {
        let weights = [1, 3, 2, 0, 5, 1, 1];
        let director = |id0: u32, index0: u32| {
            let d: Vec<Dest> = dests(&weights)
                .into_iter()
                .enumerate()
                .map(|(i, mut x)| {
                    x.id = DestId(id0 + i as u32);
                    x
                })
                .collect();
            let idx: Vec<u32> = (0..d.len() as u32).map(|i| index0 + 7 * i).collect();
            (d, idx)
        };
        let (da, ia) = director(0, 10);
        let (db, ib) = director(500, 3000);
        let addr = |d: &[Dest], idx: &[u32], v: u32| {
            (v != SLOT_EMPTY).then(|| {
                let p = idx
                    .iter()
                    .position(|&i| i == v)
                    .expect("an index of the list");
                d[p].config.addr
            })
        };
        let port = SchedParams {
            flags: rvs_core::model::SchedFlags::MH_PORT,
            ..SchedParams::default()
        };
        for (s, p) in [
            (Scheduler::Mh, SchedParams::default()),
            (Scheduler::Mh, port),
            (Scheduler::Sh, SchedParams::default()),
            (Scheduler::Dh, SchedParams::default()),
        ] {
            let ta = scheduling_table(s, &p, &da, &ia).unwrap();
            let tb = scheduling_table(s, &p, &db, &ib).unwrap();
            assert_eq!(ta.len(), tb.len(), "{s}");
            let aa: Vec<_> = ta.iter().map(|&v| addr(&da, &ia, v)).collect();
            let ab: Vec<_> = tb.iter().map(|&v| addr(&db, &ib, v)).collect();
            assert_eq!(aa, ab, "{s}: same real server in every slot");
            assert!(aa.iter().all(Option::is_some), "{s}");
        }
    }
}
