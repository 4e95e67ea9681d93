//! [`Ipvs`]'s packet path ([`Ipvs::process`]): the connection lookup, the
//! scheduling of a new connection (plain and persistent), the connection
//! entry it makes and the state transitions of every packet — the kernel's
//! `ip_vs_in`/`ip_vs_out`, `ip_vs_schedule` and `ip_vs_sched_persist`.

use super::*;

impl Ipvs {
    /// Decide what to do with one packet: a client packet of a known or new
    /// connection, a NAT reply, or neither.
    pub fn process(&mut self, now: Instant, pkt: &Packet<'_>) -> Verdict {
        let key = pkt.conn_key();
        if let Some(id) = self.conns.lookup(&key) {
            return self.process_known(now, pkt, id);
        }
        // A reply comes from a real server (`caddr:cport` here) to a client.
        let (src, sport, dst, dport) = (key.caddr, key.cport, key.vaddr, key.vport);
        if let Some(id) = self
            .conns
            .lookup_reply(key.protocol, key.af, src, sport, dst, dport)
        {
            return self.process_reply(now, pkt, id);
        }
        self.process_new(now, pkt)
    }

    /// A client packet matching an existing connection.
    fn process_known(&mut self, now: Instant, pkt: &Packet<'_>, id: ConnId) -> Verdict {
        let Some(cp) = self.conns.get(id) else {
            return Verdict::Pass;
        };
        let (dest_id, controlled) = (cp.dest, cp.control != NONE);
        let dest = self.dest(DestId(dest_id));
        let dest_available = dest.is_some_and(|d| d.available);
        let dest_weight = dest.map_or(0, |d| d.weight());
        if is_new_conn(pkt) && !controlled {
            let reuse = self.tunables.expire_nodest_conn && dest_weight == 0
                || self.tunables.conn_reuse_mode != 0 && self.new_conn_expected(cp);
            if reuse {
                self.expire_now(id);
                return self.process_new(now, pkt);
            }
        }
        if !dest_available && !self.tunables.drain_deleted {
            if self.tunables.expire_nodest_conn {
                self.expire_now(id);
                return self.process_new(now, pkt);
            }
            return Verdict::Drop(DropReason::DestUnavailable);
        }
        let fwd = self.input_packet(now, pkt, id, false);
        Verdict::Forward(fwd)
    }

    /// `is_new_conn_expected`: the old connection is finished, so a new SYN
    /// (or SCTP INIT) with the same tuple starts a new connection.
    fn new_conn_expected(&self, cp: &Conn) -> bool {
        match Protocol::from_number(cp.protocol) {
            Some(Protocol::Tcp) => {
                let s = TcpState::from_u8(cp.state);
                matches!(s, Some(TcpState::TimeWait | TcpState::Close))
                    || (self.tunables.conn_reuse_mode & 2 != 0
                        && s == Some(TcpState::FinWait)
                        && cp.flags.contains(ConnFlags::NOOUTPUT))
            }
            Some(Protocol::Sctp) => SctpState::from_u8(cp.state) == Some(SctpState::Closed),
            _ => false,
        }
    }

    /// A NAT reply matching an existing connection.
    fn process_reply(&mut self, now: Instant, pkt: &Packet<'_>, id: ConnId) -> Verdict {
        let Some(cp) = self.conns.get_mut(id) else {
            return Verdict::Pass;
        };
        cp.flags.remove(ConnFlags::NOOUTPUT);
        let dest = DestId(cp.dest);
        self.transition(now, id, pkt, Direction::Output);
        self.count(dest, |c| c.count_out(u64::from(pkt.len)));
        match self.forward_of(id, false) {
            Some(f) => Verdict::Reply(f),
            None => Verdict::Pass,
        }
    }

    /// A packet of no known connection: find a service and schedule.
    pub(super) fn process_new(&mut self, now: Instant, pkt: &Packet<'_>) -> Verdict {
        let Some(svc_idx) = self.find_service(pkt) else {
            return Verdict::Pass;
        };
        if !self.may_schedule(pkt) {
            return Verdict::Pass;
        }
        let svc = self.service_at(svc_idx);
        let persistent = svc.config.persistent.is_some();
        if !persistent && !svc.key.is_fwmark() && svc.key.port() != pkt.dport {
            // "Schedule: port zero only supported in persistent services"
            return Verdict::Reject;
        }
        let result = if persistent {
            self.schedule_persist(now, svc_idx, pkt)
        } else {
            self.schedule_plain(now, svc_idx, pkt)
        };
        match result {
            Ok(Some(fwd)) => Verdict::Forward(fwd),
            Ok(None) => Verdict::Reject,
            Err(reason) => Verdict::Drop(reason),
        }
    }

    /// TCP: SYN without RST (any non-RST with `sloppy_tcp`); SCTP: INIT
    /// (any non-ABORT with `sloppy_sctp`); UDP: always.
    fn may_schedule(&self, pkt: &Packet<'_>) -> bool {
        match pkt.l4 {
            L4::Tcp(f) => !f.rst && (f.syn || self.tunables.sloppy_tcp),
            L4::Udp => true,
            L4::Sctp(ev) => {
                ev == SctpEvent::Init || (self.tunables.sloppy_sctp && ev != SctpEvent::Abort)
            }
        }
    }

    fn sched_input(pkt: &Packet<'_>) -> SchedInput {
        SchedInput {
            protocol: pkt.l4.protocol(),
            saddr: pkt.src,
            sport: pkt.sport,
            daddr: pkt.dst,
            dport: pkt.dport,
        }
    }

    /// Run the service's scheduler: the chosen dest's id.
    fn run_scheduler(&mut self, now: Instant, svc_idx: usize, pkt: &Packet<'_>) -> Option<DestId> {
        let input = Self::sched_input(pkt);
        let svc = self.service_at_mut(svc_idx);
        let pos = svc.sched.schedule(&svc.dests, &input, now)?;
        svc.dests.get(pos).map(|d| d.id)
    }

    fn schedule_plain(
        &mut self,
        now: Instant,
        svc_idx: usize,
        pkt: &Packet<'_>,
    ) -> Result<Option<Forward>, DropReason> {
        let Some(dest) = self.run_scheduler(now, svc_idx, pkt) else {
            return Ok(None);
        };
        let dport = match self.dest(dest).map(|d| d.config.port) {
            Some(p) if p != 0 => p,
            _ => pkt.dport,
        };
        self.new_conn(now, svc_idx, pkt, dest, NONE, dport)
            .map(Some)
    }

    /// `ip_vs_sched_persist`: reuse the client's template or create one.
    fn schedule_persist(
        &mut self,
        now: Instant,
        svc_idx: usize,
        pkt: &Packet<'_>,
    ) -> Result<Option<Forward>, DropReason> {
        let svc = self.service_at(svc_idx);
        let af = svc.key.af();
        let snet = svc.config.netmask.apply(pkt.src);
        let timeout = Duration::from_secs(u64::from(svc.config.persistent.unwrap_or(0)));
        let svc_port_branch =
            !svc.key.is_fwmark() && pkt.dport == svc.key.port() && svc.key.port() != 0;
        let (protocol, vaddr, vport) = match svc.key {
            ServiceKey::Fwmark { mark, .. } => (0u8, fwmark_addr(mark), 0u16),
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => {
                let vport = if svc_port_branch && port != 21 {
                    port
                } else {
                    0
                };
                (protocol.number(), Addr::from_ip(addr), vport)
            }
        };
        let callid: Option<Vec<u8>> = match (svc.config.pe, pkt.l4) {
            (Some(PersistenceEngine::Sip), L4::Udp) => {
                pe_sip::call_id(pkt.payload).map(<[u8]>::to_vec)
            }
            _ => None,
        };
        let tkey = ConnKey {
            protocol,
            af,
            caddr: Addr::from_ip(snet),
            cport: 0,
            vaddr,
            vport,
        };
        let mut dest = None;
        let mut template = NONE;
        if let Some(ct) = self.conns.lookup_template(&tkey, callid.as_deref()) {
            if self.template_valid(ct) {
                let c = self.conns.get(ct).map(|c| c.dest);
                dest = c.map(DestId);
                template = ct.0;
                // Using a template restarts its timer.
                self.conns.set_timeout(ct, timeout, now);
            } else {
                self.conns.invalidate_template(ct);
            }
        }
        if dest.is_none() {
            let Some(d) = self.run_scheduler(now, svc_idx, pkt) else {
                return Ok(None);
            };
            let Some(dcfg) = self.dest(d).map(|x| x.config) else {
                return Ok(None);
            };
            let dport = if svc_port_branch { dcfg.port } else { 0 };
            let conn = Conn::new(
                &tkey,
                Addr::from_ip(dcfg.addr),
                dport,
                ConnFlags::TEMPLATE,
                timeout,
            );
            let ct = self.insert_conn(conn, callid.as_deref(), now)?;
            if let Some(c) = self.conns.get_mut(ct) {
                c.dest = d.0;
                c.fwmark = pkt.fwmark;
            }
            self.bind(d, ConnFlags::TEMPLATE);
            dest = Some(d);
            template = ct.0;
        }
        let Some(dest) = dest else { return Ok(None) };
        // `dport = (dst_port == svc.port && dest.port) ? dest.port : dst_port`
        let dport = match self.dest(dest).map(|d| d.config.port) {
            Some(p) if p != 0 && svc_port_branch => p,
            _ => pkt.dport,
        };
        // If this fails the template stays and simply expires unused.
        self.new_conn(now, svc_idx, pkt, dest, template, dport)
            .map(Some)
    }

    /// `ip_vs_check_template`.
    fn template_valid(&self, ct: ConnId) -> bool {
        let Some(c) = self.conns.get(ct) else {
            return false;
        };
        match self.dest(DestId(c.dest)) {
            Some(d) => d.available && !(self.tunables.expire_quiescent_template && d.weight() == 0),
            None => false,
        }
    }

    /// Create the connection entry for a scheduled packet and process the
    /// packet on it.
    pub(super) fn new_conn(
        &mut self,
        now: Instant,
        svc_idx: usize,
        pkt: &Packet<'_>,
        dest_id: DestId,
        template: u32,
        dport: u16,
    ) -> Result<Forward, DropReason> {
        let svc = self.service_at(svc_idx);
        let one_packet = svc.config.one_packet && pkt.l4 == L4::Udp;
        let Some(dcfg) = self.dest(dest_id).map(|d| d.config) else {
            return Err(DropReason::DestUnavailable);
        };
        let mut flags = conn_flags_of(&dcfg.forward).union(ConnFlags::INACTIVE);
        if !dcfg.forward.sees_replies() {
            flags = flags.union(ConnFlags::NOOUTPUT);
        }
        if one_packet {
            // One-packet scheduling keeps no entry: count and forward.
            self.count(dest_id, |c| {
                c.conns += 1;
                c.count_in(u64::from(pkt.len));
            });
            return Ok(Forward {
                conn: None,
                dest: dest_id,
                daddr: dcfg.addr,
                dport,
                vaddr: pkt.dst,
                vport: pkt.dport,
                method: dcfg.forward,
                new: true,
            });
        }
        let key = pkt.conn_key();
        let initial = match pkt.l4 {
            L4::Tcp(_) => self.timeouts.tcp(TcpState::None),
            L4::Udp => self.timeouts.udp(),
            L4::Sctp(_) => self.timeouts.sctp(SctpState::None),
        };
        let mut conn = Conn::new(&key, Addr::from_ip(dcfg.addr), dport, flags, initial);
        conn.dest = dest_id.0;
        conn.fwmark = pkt.fwmark;
        conn.control = template;
        // Take the template's reference before inserting: a full table
        // evicts the entry closest to expiry, which must never be the
        // template this connection is about to hang from.
        self.adjust_control(template, true);
        let id = match self.insert_conn(conn, None, now) {
            Ok(id) => id,
            Err(e) => {
                self.adjust_control(template, false);
                return Err(e);
            }
        };
        self.bind(dest_id, flags);
        self.count(dest_id, |c| c.conns += 1);
        Ok(self.input_packet(now, pkt, id, true))
    }

    /// Count a connection in (or out of) its template's `n_control`.
    fn adjust_control(&mut self, template: u32, up: bool) {
        if template == NONE {
            return;
        }
        if let Some(t) = self.conns.get_mut(ConnId(template)) {
            t.n_control = if up {
                t.n_control + 1
            } else {
                t.n_control.saturating_sub(1)
            };
        }
    }

    /// Insert, evicting the documented victim when the table is full.
    pub(super) fn insert_conn(
        &mut self,
        conn: Conn,
        pe: Option<&[u8]>,
        now: Instant,
    ) -> Result<ConnId, DropReason> {
        if self.conns.len() >= self.conns.capacity() {
            let victim = self
                .conns
                .eviction_candidate(now)
                .ok_or(DropReason::TableFull)?;
            self.remove_conn(victim, true);
            self.evictions += 1;
        }
        self.conns
            .insert(conn, pe, now)
            .map_err(|_| DropReason::TableFull)
    }

    /// A client→server packet on connection `id`: state, timer, counters.
    fn input_packet(&mut self, now: Instant, pkt: &Packet<'_>, id: ConnId, new: bool) -> Forward {
        let dir = match self.conns.get(id) {
            Some(c) if c.flags.contains(ConnFlags::NOOUTPUT) => Direction::InputOnly,
            _ => Direction::Input,
        };
        self.transition(now, id, pkt, dir);
        if let Some(dest) = self.conns.get(id).map(|c| DestId(c.dest)) {
            self.count(dest, |c| c.count_in(u64::from(pkt.len)));
        }
        self.forward_of(id, new).unwrap_or(Forward {
            conn: Some(id),
            dest: DestId(NONE),
            daddr: pkt.dst,
            dport: pkt.dport,
            vaddr: pkt.dst,
            vport: pkt.dport,
            method: ForwardMethod::Route,
            new,
        })
    }

    fn forward_of(&self, id: ConnId, new: bool) -> Option<Forward> {
        let c = self.conns.get(id)?;
        let dest = self.dest(DestId(c.dest))?;
        Some(Forward {
            conn: Some(id),
            dest: dest.id,
            daddr: c.daddr.to_ip(c.af),
            dport: c.dport,
            vaddr: c.vaddr.to_ip(c.af),
            vport: c.vport,
            method: dest.config.forward,
            new,
        })
    }

    /// Run the protocol state machine for one packet and re-arm the timer,
    /// moving the connection between the active and inactive counters.
    pub(super) fn transition(
        &mut self,
        now: Instant,
        id: ConnId,
        pkt: &Packet<'_>,
        dir: Direction,
    ) {
        let Some(c) = self.conns.get(id) else { return };
        let (old, flags, dest, control) = (c.state, c.flags, DestId(c.dest), c.control);
        let (new_state, active, timeout) = match pkt.l4 {
            L4::Tcp(f) => {
                let s = TcpState::from_u8(old).unwrap_or(TcpState::None);
                let n = crate::state::tcp_next(s, dir, f, self.tunables.secure_tcp);
                (n as u8, n.is_active(), self.timeouts.tcp(n))
            }
            L4::Udp => (old, false, self.timeouts.udp()),
            L4::Sctp(ev) => {
                let s = SctpState::from_u8(old).unwrap_or(SctpState::None);
                let n = crate::state::sctp_next(s, dir, ev);
                (n as u8, n.is_active(), self.timeouts.sctp(n))
            }
        };
        let was_inactive = flags.contains(ConnFlags::INACTIVE);
        if let Some(c) = self.conns.get_mut(id) {
            c.state = new_state;
            if was_inactive && active {
                c.flags.remove(ConnFlags::INACTIVE);
            } else if !was_inactive && !active {
                c.flags.insert(ConnFlags::INACTIVE);
            }
        }
        self.conns.set_timeout(id, timeout, now);
        if was_inactive == active {
            self.move_between_counts(dest, active);
        }
        // The kernel's ip_vs_control_assure_ct: TCP and SCTP assure the
        // controlling template on ESTABLISHED, UDP on a reply.
        let assures = match pkt.l4 {
            L4::Tcp(_) => new_state == TcpState::Established as u8,
            L4::Sctp(_) => new_state == SctpState::Established as u8,
            L4::Udp => dir == Direction::Output,
        };
        if assures
            && control != NONE
            && let Some(t) = self.conns.get_mut(ConnId(control))
        {
            t.flags.insert(ConnFlags::ASSURED);
        }
    }
}
