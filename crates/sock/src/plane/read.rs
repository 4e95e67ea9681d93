//! The sock worker's reads of the programs' maps at each report: real
//! server counters, event counters and the sockets the programs
//! translated.

use std::sync::Mutex;

use rvs_core::model::Protocol;
use rvs_sys::bpf::BpfMap;
use zerocopy::{FromBytes, IntoBytes};

use super::{Counts, SocketEntry, Tables, diff_stats, map_err};
use crate::SockError;
use crate::maps::{self, DestStats, EventCounts, SockRec, cap, counter, name};

impl Tables {
    /// Read `sock_stats` (every index ever given out) and bring `counts`
    /// up to date: the real servers added and gone since the last read,
    /// and those whose counters changed, also into `counts.changed` for
    /// the next report.
    pub(super) fn read_stats(&mut self, counts: &Mutex<Counts>) -> Result<(), SockError> {
        let now = self.stats_array()?;
        let changed = diff_stats(&mut self.last, &now);
        let Ok(mut c) = counts.lock() else {
            return Ok(());
        };
        for k in self.gone.drain(..) {
            c.all.remove(&k);
            c.changed.remove(&k);
        }
        for index in self.fresh.drain(..).chain(changed) {
            let Some(k) = self.owner.get(&index) else {
                continue;
            };
            let st = self.last.get(index as usize).copied().unwrap_or_default();
            c.all.insert(*k, st);
            c.changed.insert(*k, st);
        }
        Ok(())
    }

    /// `sock_stats` from index 0 to `next_dest`, in batches
    /// (`BPF_MAP_LOOKUP_BATCH`; one lookup per index on kernels without).
    fn stats_array(&self) -> Result<Vec<DestStats>, SockError> {
        const CHUNK: usize = 4096;
        let n = self.next_dest as usize;
        let m = self.map(name::STATS)?;
        let vlen = std::mem::size_of::<DestStats>();
        let mut out = Vec::with_capacity(n);
        let mut keys = vec![0u8; CHUNK * 4];
        let mut values = vec![0u8; CHUNK * vlen];
        let mut token_in: Option<rvs_sys::bpf::BatchToken> = None;
        let mut token_out = [0u8; rvs_sys::bpf::BATCH_TOKEN];
        while out.len() < n {
            let want = (n - out.len()).min(CHUNK);
            let b = match m.lookup_batch(
                token_in.as_ref(),
                &mut token_out,
                &mut keys[..want * 4],
                &mut values[..want * vlen],
            ) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput && out.is_empty() => {
                    return self.stats_one_by_one(&m, n);
                }
                Err(e) => return Err(map_err(name::STATS)(e)),
            };
            for v in values.chunks_exact(vlen).take(b.count) {
                out.push(DestStats::read_from_bytes(v).unwrap_or_default());
            }
            if b.end || b.count == 0 {
                break;
            }
            token_in = Some(token_out);
        }
        out.truncate(n);
        Ok(out)
    }

    fn stats_one_by_one(&self, m: &BpfMap<'_>, n: usize) -> Result<Vec<DestStats>, SockError> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n as u32 {
            let mut st = DestStats::default();
            m.lookup(i.as_bytes(), st.as_mut_bytes())
                .map_err(map_err(name::STATS))?;
            out.push(st);
        }
        Ok(out)
    }

    /// `sock_counters`, summed over the CPUs.
    pub(super) fn read_events(&self) -> Result<EventCounts, SockError> {
        let m = self.map(name::COUNTERS)?;
        let mut buf = vec![0u8; m.value_len()];
        let mut out = EventCounts::default();
        for i in 0..counter::COUNT {
            if m.lookup(i.as_bytes(), &mut buf)
                .map_err(map_err(name::COUNTERS))?
            {
                out.set(i, maps::sum_per_cpu(&buf));
            }
        }
        Ok(out)
    }

    /// Walk `sock_socks` (bounded by its capacity).
    pub(super) fn read_sockets(&self) -> Result<Vec<SocketEntry>, SockError> {
        let socks = self.map(name::SOCKS)?;
        let dests = self.map(name::DESTS)?;
        let mut out = Vec::new();
        let mut key: Option<u64> = None;
        let mut next = 0u64;
        while socks
            .next_key(key.as_ref().map(|k| k.as_bytes()), next.as_mut_bytes())
            .map_err(map_err(name::SOCKS))?
        {
            key = Some(next);
            let mut rec = SockRec::default();
            if !socks
                .lookup(next.as_bytes(), rec.as_mut_bytes())
                .map_err(map_err(name::SOCKS))?
            {
                continue;
            }
            let mut d = maps::Dest::default();
            if !dests
                .lookup(rec.dest.as_bytes(), d.as_mut_bytes())
                .map_err(map_err(name::DESTS))?
            {
                continue;
            }
            let (Some(vip), Some(daddr), Some(protocol)) = (
                maps::words_addr(rec.vip.addr, rec.vip.family),
                maps::words_addr(d.addr, d.family),
                Protocol::from_number(rec.vip.proto),
            ) else {
                continue;
            };
            out.push(SocketEntry {
                cookie: next,
                protocol,
                vip: (vip, maps::port_host(rec.vip.port)).into(),
                dest: (daddr, maps::port_host(d.port)).into(),
                client: (rec.client_port != 0)
                    .then(|| maps::words_addr(rec.client, rec.vip.family))
                    .flatten()
                    .map(|a| (a, maps::port_host(rec.client_port)).into()),
            });
            if out.len() >= cap::SOCKS as usize {
                break;
            }
        }
        Ok(out)
    }
}
