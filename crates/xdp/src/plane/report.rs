//! The periodic report: grace periods, counters, the mirror of flows and
//! templates into the director (the program's sweep), overload flags and
//! convergence with the model.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rvs_control::state::{ServiceDef, current_defs, diff};
use rvs_core::conn::ConnId;
use rvs_core::dest::DestId;
use rvs_core::ipvs::{Ipvs, MirroredConn};
use rvs_core::model::Protocol;
use rvs_core::state::TcpState;
use rvs_core::stats::Counters;
use rvs_core::time::Instant;

use super::alloc::Retired;
use super::{L2_REFRESH_REPORTS, Plane, PlaneError, WalkDone, same, stats_delta};
use crate::maps::{self, Dest, Flow, FlowKey, MapOps, PersistKey};
use crate::neigh::Resolve;

impl<M: MapOps, R: Resolve> Plane<M, R> {
    /// Periodic work with the control plane's director (see the module
    /// doc): grace periods, MAC resolution, timeouts, convergence, counters
    /// and connections.
    pub fn report_to(&mut self, now: Instant, ipvs: &mut Ipvs) -> Result<(), PlaneError> {
        self.generation += 1;
        let g = self.generation;
        let (due, keep): (Vec<_>, Vec<_>) = self.retired.drain(..).partition(|(at, _)| g >= at + 2);
        self.retired = keep;
        for (_, r) in due {
            match r {
                Retired::Region(r) => self.slots.release(r),
                Retired::Svc(i) => self.svc_idx.release(i),
            }
        }
        self.resolve_pending(Duration::ZERO, None);
        if g.is_multiple_of(L2_REFRESH_REPORTS) {
            self.refresh_l2();
        }
        self.learn_nat_next_hops();
        if *ipvs.timeouts() != self.timeouts {
            let old = self.timeouts.clone();
            self.timeouts = ipvs.timeouts().clone();
            if self.write_config().is_err() {
                self.timeouts = old;
            }
        }
        if self.dirty {
            self.converge(ipvs);
        }
        self.count(ipvs)?;
        self.mirror(now, ipvs)?;
        self.sync_overload(ipvs);
        Ok(())
    }

    /// Apply the difference between the model and what is installed.
    pub(super) fn converge(&mut self, ipvs: &Ipvs) {
        self.dirty = false;
        let installed: Vec<ServiceDef> = self
            .services
            .iter()
            .map(|(k, s)| ServiceDef {
                key: *k,
                config: s.config.clone(),
                dests: s.dests.iter().rev().map(|d| d.core.config).collect(),
            })
            .collect();
        let target: Vec<ServiceDef> = current_defs(ipvs)
            .into_iter()
            .filter(|d| !self.refused.contains(&d.key))
            .collect();
        if let Ok((cmds, _)) = diff(&installed, &target) {
            for c in &cmds {
                // Errors set `dirty` again: the next report retries.
                let _ = self.apply_command(c);
            }
        }
    }

    /// The director's id of a dest index, with its service.
    pub(super) fn dest_ids(&self, ipvs: &Ipvs) -> HashMap<u32, DestId> {
        let mut out = HashMap::new();
        for (key, st) in &self.services {
            let Some(svc) = ipvs.service(key) else {
                continue;
            };
            for d in &st.dests {
                if let Some(x) = svc.dests().iter().find(|x| same(&x.config, &d.core.config)) {
                    out.insert(d.index, x.id);
                }
            }
        }
        // Deleted ones: the id they had when last seen live.
        for t in &self.trash {
            let id = t.dest.core.id;
            if ipvs
                .dest(id)
                .is_some_and(|x| same(&x.config, &t.dest.core.config) && !x.available)
            {
                out.insert(t.dest.index, id);
            }
        }
        out
    }

    pub(super) fn count(&mut self, ipvs: &mut Ipvs) -> Result<(), PlaneError> {
        // Remember the director's ids of live real servers for when they
        // are deleted (the id is what the director's trash keeps).
        let ids = self.dest_ids(ipvs);
        for st in self.services.values_mut() {
            for d in &mut st.dests {
                if let Some(id) = ids.get(&d.index) {
                    d.core.id = *id;
                }
            }
        }
        let indexes: Vec<u32> = self
            .services
            .values()
            .flat_map(|s| s.dests.iter().map(|d| d.index))
            .chain(self.trash.iter().map(|t| t.dest.index))
            .collect();
        for index in indexes {
            let cur = self.maps.dest_stats(index)?;
            let base = self.baselines.insert(index, cur).unwrap_or_default();
            let delta = stats_delta(&cur, &base);
            if delta != Counters::default()
                && let Some(id) = ids.get(&index)
            {
                ipvs.add_counters(*id, &delta);
            }
        }
        Ok(())
    }

    /// Connection thresholds (`-x`/`-y`): the director decides overload
    /// from the mirrored connections, with IPVS's hysteresis; the program
    /// skips a real server flagged `OVERLOADED` for new flows.
    pub(super) fn sync_overload(&mut self, ipvs: &Ipvs) {
        let mut changed = Vec::new();
        for st in self.services.values_mut() {
            for d in &mut st.dests {
                let Some(core) = ipvs.dest(d.core.id) else {
                    continue;
                };
                if same(&core.config, &d.core.config) && core.overloaded != d.core.overloaded {
                    d.core.overloaded = core.overloaded;
                    changed.push(d.clone());
                }
            }
        }
        for d in changed {
            let v = self.dest_value(&d, 0);
            if self.maps.set_dest(d.index, &v).is_err() {
                // Seen again at the next report.
                for st in self.services.values_mut() {
                    for x in st.dests.iter_mut().filter(|x| x.index == d.index) {
                        x.core.overloaded = !d.core.overloaded;
                    }
                }
            }
        }
    }

    pub(super) fn mirror(&mut self, now: Instant, ipvs: &mut Ipvs) -> Result<(), PlaneError> {
        let ids = self.dest_ids(ipvs);
        let (jiffies, hz) = self.maps.clock()?;
        let hz = u64::from(hz.max(1));
        let config = self.config;
        let g = self.generation;
        let flow_start = *self.flow_walk.start.get_or_insert(g);
        let persist_start = *self.persist_walk.start.get_or_insert(g);
        // This report's page of each walk.
        let mut flows = Vec::new();
        let mut expired = Vec::new();
        let users = &mut self.flow_walk.users;
        let flows_done =
            self.maps
                .flows_page(&mut self.flow_walk.cursor, self.mirror_page, &mut |k, f| {
                    let timeout = config.flow_timeout(k.proto, f.state);
                    let age = jiffies.saturating_sub(f.last_seen);
                    let limit = u64::from(timeout) * hz;
                    if age > limit {
                        expired.push(*k);
                        return;
                    }
                    let c = users.entry(f.dest).or_default();
                    let tcp_active = TcpState::from_u8(f.state).is_some_and(TcpState::is_active);
                    if k.proto == maps::PROTO_TCP && tcp_active {
                        c.active += 1;
                    } else {
                        c.inactive += 1;
                    }
                    flows.push((*k, *f, Duration::from_millis((limit - age) * 1000 / hz)));
                })?;
        // Persistence templates: live ones are mirrored (and keep their real
        // server's index from being reused), expired ones go.
        let timeouts: HashMap<u32, u32> = self
            .services
            .values()
            .map(|s| (s.index, s.config.persistent.unwrap_or(0)))
            .collect();
        let mut templates = Vec::new();
        let mut stale = Vec::new();
        let users = &mut self.persist_walk.users;
        let persist_done = self.maps.persist_page(
            &mut self.persist_walk.cursor,
            self.mirror_page,
            &mut |k, t| {
                let limit = timeouts.get(&t.svc).map_or(0, |&secs| u64::from(secs) * hz);
                let age = jiffies.saturating_sub(t.last_seen);
                if age > limit {
                    stale.push(*k);
                    return;
                }
                users.entry(t.dest).or_default();
                templates.push((*k, *t, Duration::from_millis((limit - age) * 1000 / hz)));
            },
        )?;
        for k in &stale {
            let _ = self.maps.remove_persist(k);
        }
        for (k, t, left) in templates {
            let Some(dest) = ids.get(&t.dest) else {
                continue;
            };
            let Some(m) = template_of(&k, *dest, left) else {
                continue;
            };
            if let Some(id) = ipvs.mirror_conn(now, &m) {
                self.persist_walk.seen.insert(id);
            }
        }
        for (k, f, left) in flows {
            let Some(dest) = ids.get(&f.dest) else {
                continue;
            };
            let Some(m) = mirrored_of(&k, &f, *dest, left) else {
                continue;
            };
            if let Some(id) = ipvs.mirror_conn(now, &m) {
                self.flow_walk.seen.insert(id);
            }
        }
        // Expired entries go (the program already treats them as absent;
        // this frees their room). Failures are retried next time.
        for k in &expired {
            let _ = self.maps.remove_flow(k);
        }
        // A complete walk: entries the previous walk of that table mirrored
        // and this one did not see are gone.
        if persist_done {
            let w = std::mem::take(&mut self.persist_walk);
            let other = [&self.mirrored_flows, &self.flow_walk.seen];
            close_gone(ipvs, &self.mirrored_templates, &w.seen, other);
            self.mirrored_templates = w.seen;
            self.persist_done = Some(WalkDone {
                start: persist_start,
                users: w.users.into_keys().collect(),
            });
        }
        if flows_done {
            let w = std::mem::take(&mut self.flow_walk);
            let other = [&self.mirrored_templates, &self.persist_walk.seen];
            close_gone(ipvs, &self.mirrored_flows, &w.seen, other);
            self.mirrored_flows = w.seen;
            // The ActiveConn/InActConn the program keeps for the
            // least-connection schedulers are set to what the live flows
            // say, which also repairs flows the LRU evicted without
            // telling. Increments made meanwhile may be overwritten; the
            // next walk corrects them.
            let indexes: Vec<u32> = self
                .services
                .values()
                .flat_map(|s| s.dests.iter().map(|d| d.index))
                .chain(self.trash.iter().map(|t| t.dest.index))
                .collect();
            for i in indexes {
                let c = w.users.get(&i).copied().unwrap_or_default();
                let _ = self.maps.set_dest_conns(i, &c);
            }
            self.flows_done = Some(WalkDone {
                start: flow_start,
                users: w.users.into_keys().collect(),
            });
        }
        if flows_done || persist_done {
            self.free_trash();
        }
        Ok(())
    }

    /// Deleted real servers no flow or template uses any more give their
    /// index back: the last whole walk of each table began two reports
    /// after the deletion, when no new flow or template could be given
    /// that index any more, and met none using it.
    pub(super) fn free_trash(&mut self) {
        let (Some(flows), Some(persist)) = (&self.flows_done, &self.persist_done) else {
            return;
        };
        let (free, keep): (Vec<_>, Vec<_>) = self.trash.drain(..).partition(|t| {
            let i = t.dest.index;
            flows.start >= t.since + 2
                && persist.start >= t.since + 2
                && !flows.users.contains(&i)
                && !persist.users.contains(&i)
        });
        self.trash = keep;
        for t in free {
            if self.maps.set_dest(t.dest.index, &Dest::default()).is_ok() {
                self.dest_idx.release(t.dest.index);
                self.baselines.remove(&t.dest.index);
            } else {
                self.trash.push(t);
            }
        }
    }
}

/// Close the director's entries a table's previous walk mirrored and its
/// last one did not see, unless the other table's mirroring holds them.
fn close_gone(
    ipvs: &mut Ipvs,
    before: &HashSet<ConnId>,
    seen: &HashSet<ConnId>,
    other: [&HashSet<ConnId>; 2],
) {
    for id in before.difference(seen) {
        if !other.iter().any(|o| o.contains(id)) {
            ipvs.close(*id);
        }
    }
}

/// The director's view of one BPF flow.
fn mirrored_of(k: &FlowKey, f: &Flow, dest: DestId, left: Duration) -> Option<MirroredConn> {
    let ip = |b: &[u8; 16]| -> IpAddr {
        if k.family == maps::AF_INET {
            IpAddr::from([b[0], b[1], b[2], b[3]])
        } else {
            IpAddr::from(*b)
        }
    };
    let protocol = Protocol::from_number(k.proto)?;
    Some(MirroredConn {
        protocol,
        client: SocketAddr::new(ip(&k.caddr), u16::from_be(k.cport)),
        vip: SocketAddr::new(ip(&k.vaddr), u16::from_be(k.vport)),
        dest,
        state: if protocol == Protocol::Tcp {
            f.state
        } else {
            0
        },
        output_seen: f.flags & maps::FLOW_F_NOOUTPUT == 0,
        idle_left: left,
        template: false,
    })
}

/// The director's view of one persistence template.
fn template_of(k: &PersistKey, dest: DestId, left: Duration) -> Option<MirroredConn> {
    let ip = |b: &[u8; 16]| -> IpAddr {
        if k.family == maps::AF_INET {
            IpAddr::from([b[0], b[1], b[2], b[3]])
        } else {
            IpAddr::from(*b)
        }
    };
    Some(MirroredConn {
        protocol: Protocol::from_number(k.proto)?,
        client: SocketAddr::new(ip(&k.caddr), 0),
        vip: SocketAddr::new(ip(&k.vaddr), u16::from_be(k.vport)),
        dest,
        state: 0,
        output_seen: false,
        idle_left: left,
        template: true,
    })
}
