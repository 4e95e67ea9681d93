//! [`Ipvs`]'s control operations, the ipvsadm commands: services and real
//! servers added, edited and deleted (`-A -E -D -C -a -e -d`), FULLNAT local
//! addresses, zeroing (`-Z`), timeouts (`--set`) and tunables.

use super::*;

impl Ipvs {
    /// `-A`: add a virtual service.
    pub fn add_service(&mut self, key: ServiceKey, config: ServiceConfig) -> Result<(), CtlError> {
        if self.by_key.contains_key(&key) {
            return Err(CtlError::ServiceExists);
        }
        config.check_quic_lb(&key).map_err(quic_err)?;
        let sched = self.make_scheduler(&config)?;
        let svc = Service {
            key,
            config,
            dests: Vec::new(),
            sched,
            stats: Counters::default(),
            est: Estimator::default(),
            laddrs: Vec::new(),
            quic_lb: QuicLbCounters::default(),
        };
        let idx = put_in_free_slot(&mut self.services, svc);
        self.by_key.insert(key, idx as u32);
        if key.is_fwmark() {
            self.fwmark_services += 1;
        }
        Ok(())
    }

    /// Add a service together with its real servers in one step, as a
    /// configuration file states them: `dests` in the order they would be
    /// added with `-a` (so the last one heads the list). All or nothing, and
    /// the scheduler builds its tables once instead of once per server.
    pub fn add_service_with(
        &mut self,
        key: ServiceKey,
        config: ServiceConfig,
        dests: &[DestConfig],
    ) -> Result<(), CtlError> {
        if self.by_key.contains_key(&key) {
            return Err(CtlError::ServiceExists);
        }
        for (i, d) in dests.iter().enumerate() {
            validate_dest(&key, d)?;
            if dests[..i]
                .iter()
                .any(|x| x.addr == d.addr && x.port == d.port)
            {
                return Err(CtlError::DestExists);
            }
        }
        check_dest_count(&config, dests.len())?;
        config.check_quic_lb(&key).map_err(quic_err)?;
        config.check_quic_server_ids(dests).map_err(quic_err)?;
        // Nothing below can fail once the service itself is accepted.
        self.add_service(key, config)?;
        let list: Vec<Dest> = dests
            .iter()
            .rev()
            .map(|d| {
                let id = self.alloc_dest_id();
                Dest::new(id, *d)
            })
            .collect();
        let idx = self.service_index(&key).ok_or(CtlError::NoService)?;
        let svc = self.service_at_mut(idx);
        svc.dests = list;
        svc.sched.update(&svc.dests, ListChange::Reset);
        self.relocate(idx);
        Ok(())
    }

    /// `-E`: change a service's options; its real servers and connections stay.
    ///
    /// Like `ip_vs_edit_service`, the scheduler's state is replaced only
    /// when another scheduler is named (its `init_service` on the current
    /// list: rr and wrr start again at the list head); the same scheduler
    /// keeps its state (rr's and wrr's cursors, the locality tables), as
    /// the kernel, which only stores the new flags, keeps it. rvs builds
    /// sh's and mh's tables with their `-b` flags (and mh's with its table
    /// size), so those are rebuilt when they change: a pure function of
    /// the list, as the kernel reading the flags per decision.
    pub fn edit_service(
        &mut self,
        key: &ServiceKey,
        config: ServiceConfig,
    ) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        config.check_quic_lb(key).map_err(quic_err)?;
        config
            .check_quic_server_ids(self.service_at(idx).dests.iter().map(|d| &d.config))
            .map_err(quic_err)?;
        let new_sched = {
            let svc = self.service_at(idx);
            let sched = config.scheduler;
            if svc.config.scheduler != sched
                || (sched.takes_flags() && svc.config.flags != config.flags)
                || (sched == Scheduler::Mh && svc.config.mh_table_size != config.mh_table_size)
            {
                let mut s = self.make_scheduler(&config)?;
                check_dest_count(&config, svc.dests.len())?;
                s.update(&svc.dests, ListChange::Reset);
                Some(s)
            } else {
                None
            }
        };
        let svc = self.service_at_mut(idx);
        if let Some(s) = new_sched {
            svc.sched = s;
        }
        svc.config = config;
        Ok(())
    }

    /// `-D`: delete a service. Its real servers move to the trash while
    /// connections still use them.
    pub fn del_service(&mut self, key: &ServiceKey) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        self.by_key.remove(key);
        if key.is_fwmark() {
            self.fwmark_services -= 1;
        }
        let svc = self.services[idx].take();
        if let Some(svc) = svc {
            for dest in svc.dests {
                self.trash_dest(dest, svc.key);
            }
        }
        Ok(())
    }

    /// `-C`: delete every service. Connections stay until they expire.
    pub fn flush(&mut self) {
        let keys: Vec<ServiceKey> = self.by_key.keys().copied().collect();
        for k in keys {
            let _ = self.del_service(&k);
        }
    }

    /// `-a`: add a real server at the head of the service's list. A real
    /// server deleted earlier and still referenced by connections is
    /// resurrected with its counters.
    pub fn add_dest(&mut self, key: &ServiceKey, config: DestConfig) -> Result<DestId, CtlError> {
        validate_dest(key, &config)?;
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let svc = self.service_at(idx);
        if svc.find_dest(config.addr, config.port).is_some() {
            return Err(CtlError::DestExists);
        }
        check_dest_count(&svc.config, svc.dests.len() + 1)?;
        svc.config
            .check_quic_server_ids(svc.dests.iter().map(|d| &d.config).chain([&config]))
            .map_err(quic_err)?;
        let resurrect = self.trash.iter().position(|t| {
            t.as_ref().is_some_and(|t| {
                t.svc_key == *key
                    && t.dest.config.addr == config.addr
                    && t.dest.config.port == config.port
            })
        });
        let dest = match resurrect {
            Some(slot) => {
                let t = self.trash[slot].take().ok_or(CtlError::NoDest)?;
                let mut d = t.dest;
                d.available = true;
                d.apply_edit(config);
                self.dest_est[d.id.0 as usize] = t.est;
                d
            }
            None => {
                let id = self.alloc_dest_id();
                Dest::new(id, config)
            }
        };
        let id = dest.id;
        let svc = self.service_at_mut(idx);
        svc.dests.insert(0, dest);
        svc.sched.update(&svc.dests, ListChange::Added(0));
        self.relocate(idx);
        Ok(id)
    }

    /// `-e`: edit a real server's weight, method and thresholds.
    pub fn edit_dest(&mut self, key: &ServiceKey, config: DestConfig) -> Result<(), CtlError> {
        validate_dest(key, &config)?;
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let svc = self.service_at_mut(idx);
        let pos = svc
            .find_dest(config.addr, config.port)
            .ok_or(CtlError::NoDest)?;
        svc.config
            .check_quic_server_ids(
                svc.dests.iter().enumerate().map(
                    |(i, d)| {
                        if i == pos { &config } else { &d.config }
                    },
                ),
            )
            .map_err(quic_err)?;
        svc.dests[pos].apply_edit(config);
        svc.sched.update(&svc.dests, ListChange::Edited(pos));
        Ok(())
    }

    /// `-d`: delete a real server. Connections keep referring to it (see
    /// [`Tunables::drain_deleted`] and `expire_nodest_conn`).
    pub fn del_dest(&mut self, key: &ServiceKey, addr: IpAddr, port: u16) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let svc = self.service_at_mut(idx);
        let pos = svc.find_dest(addr, port).ok_or(CtlError::NoDest)?;
        let dest = svc.dests.remove(pos);
        svc.sched.update(&svc.dests, ListChange::Removed(pos));
        let svc_key = svc.key;
        self.relocate(idx);
        self.trash_dest(dest, svc_key);
        Ok(())
    }

    /// Record the FULLNAT local address and port of connection `id`, as
    /// the data plane that chose them reports it (for `ipvsadm -Lcn`).
    /// False when there is no such connection.
    pub fn set_conn_local(&mut self, id: ConnId, local: std::net::SocketAddr) -> bool {
        self.conns
            .set_local(id, Addr::from_ip(local.ip()), local.port())
    }

    /// `--add-laddr -z ADDR`: add an address or range to the service's
    /// FULLNAT local address pool. The pool is the service's, not its
    /// options': `-E` leaves it as it is. An entry of the other family, or
    /// one sharing an address with an entry, is refused.
    pub fn add_laddr(&mut self, key: &ServiceKey, range: LocalAddrRange) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let checked = LocalAddrRange::new(range.first, range.last)
            .map_err(|e| CtlError::Invalid(e.to_string()))?;
        let svc = self.service_at_mut(idx);
        if checked.af() != svc.key.af() {
            return Err(CtlError::Invalid(format!(
                "local address {checked} is not of the service's family"
            )));
        }
        if svc.laddrs.iter().any(|l| l.overlaps(&checked)) {
            return Err(CtlError::LaddrExists);
        }
        svc.laddrs.push(checked);
        Ok(())
    }

    /// `--del-laddr -z ADDR`: remove an entry of the pool, named exactly as
    /// it was added (a single address or the same range).
    pub fn del_laddr(&mut self, key: &ServiceKey, range: LocalAddrRange) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let svc = self.service_at_mut(idx);
        let pos = svc
            .laddrs
            .iter()
            .position(|l| *l == range)
            .ok_or(CtlError::NoLaddr)?;
        svc.laddrs.remove(pos);
        Ok(())
    }

    /// `-Z`: zero the counters of one service (and its real servers), or of
    /// everything.
    pub fn zero(&mut self, key: Option<&ServiceKey>) -> Result<(), CtlError> {
        let idxs: Vec<usize> = match key {
            Some(k) => vec![self.service_index(k).ok_or(CtlError::NoService)?],
            None => (0..self.services.len()).collect(),
        };
        for idx in idxs {
            let Some(svc) = self.services[idx].as_mut() else {
                continue;
            };
            svc.stats = Counters::default();
            svc.est.reset(&svc.stats);
            svc.quic_lb = QuicLbCounters::default();
            for d in &mut svc.dests {
                d.stats = Counters::default();
                self.dest_est[d.id.0 as usize].reset(&d.stats);
            }
        }
        if key.is_none() {
            self.total = Counters::default();
            self.total_est.reset(&self.total);
        }
        Ok(())
    }

    /// `--set tcp tcpfin udp` (seconds; 0 leaves a value unchanged).
    pub fn set_timeouts(&mut self, tcp: u32, tcpfin: u32, udp: u32) {
        self.timeouts.set_ipvsadm(tcp, tcpfin, udp);
    }

    /// The protocol timeouts in force.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Mutable access to every per-state timeout (keepalived's `lvs_timeouts`
    /// and rvs options go beyond the three of `--set`).
    pub fn timeouts_mut(&mut self) -> &mut Timeouts {
        &mut self.timeouts
    }

    /// The behaviour switches in force.
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// Change behaviour switches.
    pub fn set_tunables(&mut self, tunables: Tunables) {
        self.tunables = tunables;
    }
}
