//! Mirrored connections, for packet data planes that schedule themselves
//! (the XDP plane): their flows and templates mirrored into the connection
//! table ([`Ipvs::mirror_conn`]) and their counters added to the director's.

use super::*;

impl Ipvs {
    /// A packet data plane that schedules and tracks flows itself (the XDP
    /// program) reports one of its flows, so `-Lcn`, ActiveConn/InActConn
    /// and expiry see it: the entry for the flow's tuple is created bound to
    /// `flow.dest` when absent (re-created when it names another real
    /// server), its state is set — moving it between the real server's
    /// active and inactive counts as a state change does — and its timer is
    /// set to `flow.idle_left`. Counters are not touched (the data plane
    /// reports traffic with [`Ipvs::add_counters`]). A connection's
    /// `flow.local`, when given, is recorded as its FULLNAT local address
    /// and port ([`Ipvs::set_conn_local`]). `None` when `flow.dest`
    /// is not a known real server or the table is full of entries that
    /// cannot be evicted.
    pub fn mirror_conn(&mut self, now: Instant, flow: &MirroredConn) -> Option<ConnId> {
        let id = self.mirror_conn_entry(now, flow)?;
        if let Some(local) = flow.local
            && !flow.template
        {
            self.set_conn_local(id, local);
        }
        Some(id)
    }

    fn mirror_conn_entry(&mut self, now: Instant, flow: &MirroredConn) -> Option<ConnId> {
        let dcfg = self.dest(flow.dest)?.config;
        // The entries of a fwmark service carry its mark (as the packet
        // path's do), and its templates are keyed by protocol 0
        // (IPPROTO_IP), as `schedule_persist` keys them and the kernel
        // syncs them.
        let mark = self.mark_of_dest(flow.dest);
        let key = ConnKey {
            protocol: if flow.template && mark.is_some() {
                0
            } else {
                flow.protocol.number()
            },
            af: AddrFamily::of(&flow.client.ip()),
            caddr: Addr::from_ip(flow.client.ip()),
            cport: flow.client.port(),
            vaddr: Addr::from_ip(flow.vip.ip()),
            vport: flow.vip.port(),
        };
        let mark = mark.unwrap_or(0);
        if flow.template {
            return self.mirror_template(now, flow, key, dcfg, mark);
        }
        let active = match flow.protocol {
            Protocol::Tcp => TcpState::from_u8(flow.state).is_some_and(TcpState::is_active),
            Protocol::Sctp => SctpState::from_u8(flow.state).is_some_and(SctpState::is_active),
            Protocol::Udp => false,
        };
        if let Some(id) = self.conns.lookup(&key) {
            let same = self.conns.get(id).is_some_and(|c| c.dest == flow.dest.0);
            if same {
                let mut was_inactive = false;
                if let Some(c) = self.conns.get_mut(id) {
                    was_inactive = c.flags.contains(ConnFlags::INACTIVE);
                    c.state = flow.state;
                    if active {
                        c.flags.remove(ConnFlags::INACTIVE);
                    } else {
                        c.flags.insert(ConnFlags::INACTIVE);
                    }
                    if flow.output_seen {
                        c.flags.remove(ConnFlags::NOOUTPUT);
                    }
                }
                if was_inactive == active {
                    self.move_between_counts(flow.dest, active);
                }
                self.conns.set_timeout(id, flow.idle_left, now);
                return Some(id);
            }
            self.remove_conn(id, true);
        }
        let mut flags = conn_flags_of(&dcfg.forward);
        if !active {
            flags = flags.union(ConnFlags::INACTIVE);
        }
        if !flow.output_seen {
            flags = flags.union(ConnFlags::NOOUTPUT);
        }
        let dport = self.scheduled_dport(flow.dest, dcfg.port, flow.vip.port());
        let mut conn = Conn::new(&key, Addr::from_ip(dcfg.addr), dport, flags, flow.idle_left);
        conn.dest = flow.dest.0;
        conn.state = flow.state;
        conn.fwmark = mark;
        let id = self.insert_conn(conn, None, now).ok()?;
        self.bind(flow.dest, flags);
        self.conns.set_timeout(id, flow.idle_left, now);
        Some(id)
    }

    fn mirror_template(
        &mut self,
        now: Instant,
        flow: &MirroredConn,
        key: ConnKey,
        dcfg: DestConfig,
        mark: u32,
    ) -> Option<ConnId> {
        // A peer's assured template (state 1, the kernel's
        // IP_VS_CTPL_S_ASSURED) is assured here too; one already assured
        // stays so.
        let assured = flow.state & 1 != 0;
        if let Some(id) = self.conns.lookup_template(&key, None) {
            if let Some(c) = self.conns.get_mut(id)
                && c.dest == flow.dest.0
            {
                if assured {
                    c.flags.insert(ConnFlags::ASSURED);
                }
                self.conns.set_timeout(id, flow.idle_left, now);
                return Some(id);
            }
            self.remove_conn(id, true);
        }
        let dport = if key.vport == 0 { 0 } else { dcfg.port };
        let mut conn = Conn::new(
            &key,
            Addr::from_ip(dcfg.addr),
            dport,
            ConnFlags::TEMPLATE,
            flow.idle_left,
        );
        conn.dest = flow.dest.0;
        conn.fwmark = mark;
        if assured {
            conn.flags.insert(ConnFlags::ASSURED);
        }
        let id = self.insert_conn(conn, None, now).ok()?;
        self.bind(flow.dest, ConnFlags::TEMPLATE);
        self.conns.set_timeout(id, flow.idle_left, now);
        Some(id)
    }

    /// The service of real server `dest` (`None` once it is trashed).
    fn service_of_dest(&self, dest: DestId) -> Option<&Service> {
        let Some(DestLoc::Service { svc, .. }) = self.locator.get(dest.0 as usize) else {
            return None;
        };
        self.services.get(*svc as usize)?.as_ref()
    }

    /// The mark of real server `dest`'s service when that is a fwmark
    /// service.
    fn mark_of_dest(&self, dest: DestId) -> Option<u32> {
        match self.service_of_dest(dest)?.key {
            ServiceKey::Fwmark { mark, .. } => Some(mark),
            ServiceKey::Addr { .. } => None,
        }
    }

    /// The real-server port the scheduler gives a connection to `vport`
    /// through `dest` (configured port `port`), as the kernel's: a
    /// persistent service uses the real server's port only for packets to
    /// its own port (`ip_vs_sched_persist`: a fwmark or port-zero service
    /// keeps the packet's port), any other the real server's port when it
    /// has one (`ip_vs_schedule`).
    fn scheduled_dport(&self, dest: DestId, port: u16, vport: u16) -> u16 {
        let (persistent, svc_port) = match self.service_of_dest(dest) {
            Some(s) => (s.config.persistent.is_some(), s.key.port()),
            None => (false, vport),
        };
        if port == 0 || (persistent && (svc_port == 0 || svc_port != vport)) {
            vport
        } else {
            port
        }
    }

    /// Add traffic a packet data plane counted (e.g. the per-CPU counters of
    /// the XDP program since its last report) to a real server, its service
    /// and the director total, as the packet path counts its own.
    pub fn add_counters(&mut self, dest: DestId, delta: &Counters) {
        self.count(dest, |c| c.add(delta));
    }

    /// Add the QUIC-LB routing counts a data plane made for a service since
    /// its last report. False when there is no such service (it was
    /// deleted meanwhile; the counts go with it).
    pub fn add_quic_lb_counters(&mut self, key: &ServiceKey, delta: &QuicLbCounters) -> bool {
        let Some(idx) = self.service_index(key) else {
            return false;
        };
        self.service_at_mut(idx).quic_lb.add(delta);
        true
    }
}
