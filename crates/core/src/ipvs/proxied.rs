//! [`Ipvs`]'s connection-oriented API, for proxy data planes that see
//! connections rather than packets: open a connection ([`Ipvs::open`],
//! [`Ipvs::open_to`]), report its events and traffic, retry elsewhere, close.

use super::*;

impl Ipvs {
    /// A proxy accepted a connection (TCP) or a new flow (UDP) from `client`
    /// to `vip`: schedule it as the packet that opens it would be, and hold
    /// the entry for the life of the proxy's socket (timers re-arm it,
    /// eviction skips it) until [`Ipvs::close`]. Persistence, thresholds,
    /// weight 0 and every scheduler apply exactly as on the packet path.
    /// `Err` carries the verdict that refused it (no service: `Pass`; no
    /// real server: `Reject`; table full of held entries: `Drop`).
    pub fn open(
        &mut self,
        now: Instant,
        protocol: Protocol,
        client: std::net::SocketAddr,
        vip: std::net::SocketAddr,
    ) -> Result<Forward, Verdict> {
        let l4 = match protocol {
            Protocol::Tcp => L4::Tcp(TcpFlags::SYN),
            Protocol::Udp => L4::Udp,
            Protocol::Sctp => L4::Sctp(SctpEvent::Init),
        };
        let pkt = Packet {
            src: client.ip(),
            sport: client.port(),
            dst: vip.ip(),
            dport: vip.port(),
            l4,
            fwmark: 0,
            len: 0,
            payload: &[],
        };
        self.clear_stale(&pkt)?;
        match self.process_new(now, &pkt) {
            Verdict::Forward(f) => {
                if let Some(c) = f.conn.and_then(|id| self.conns.get_mut(id)) {
                    c.flags.insert(ConnFlags::HELD);
                }
                Ok(f)
            }
            other => Err(other),
        }
    }

    /// A stale entry with the packet's tuple (a socket the proxy already
    /// closed but whose entry lingers) is not ours to reuse: expire it. A
    /// held one (a live socket of the proxy) refuses the new one.
    fn clear_stale(&mut self, pkt: &Packet<'_>) -> Result<(), Verdict> {
        let key = pkt.conn_key();
        if let Some(old) = self.conns.lookup(&key) {
            if self
                .conns
                .get(old)
                .is_some_and(|c| c.flags.contains(ConnFlags::HELD))
            {
                return Err(Verdict::Drop(DropReason::TableFull));
            }
            self.expire_now(old);
        }
        Ok(())
    }

    /// Like [`Ipvs::open`] for a UDP flow whose real server the data plane
    /// chose itself (QUIC-LB: the server ID in the connection ID names it):
    /// the held entry is bound to the service's real server `daddr:dport`
    /// without asking the scheduler or persistence. Its weight is not
    /// looked at (a quiesced server keeps the connections it has; choosing
    /// it is the caller's decision). `Err` as for [`Ipvs::open`]: no such
    /// service `Pass`, no such real server `Reject`, the client's tuple
    /// held by another live flow `Drop`.
    pub fn open_to(
        &mut self,
        now: Instant,
        client: std::net::SocketAddr,
        vip: std::net::SocketAddr,
        daddr: IpAddr,
        dport: u16,
    ) -> Result<Forward, Verdict> {
        let key = ServiceKey::Addr {
            protocol: Protocol::Udp,
            addr: vip.ip(),
            port: vip.port(),
        };
        let svc_idx = self.service_index(&key).ok_or(Verdict::Pass)?;
        let svc = self.service_at(svc_idx);
        let dest = svc
            .find_dest(daddr, dport)
            .map(|pos| svc.dests[pos].id)
            .ok_or(Verdict::Reject)?;
        let pkt = Packet {
            src: client.ip(),
            sport: client.port(),
            dst: vip.ip(),
            dport: vip.port(),
            l4: L4::Udp,
            fwmark: 0,
            len: 0,
            payload: &[],
        };
        self.clear_stale(&pkt)?;
        let port = if dport != 0 { dport } else { vip.port() };
        let f = self
            .new_conn(now, svc_idx, &pkt, dest, NONE, port)
            .map_err(Verdict::Drop)?;
        if let Some(c) = f.conn.and_then(|id| self.conns.get_mut(id)) {
            c.flags.insert(ConnFlags::HELD);
        }
        Ok(f)
    }

    /// Something happened on a held connection: `dir` is `Input` for the
    /// client's side and `Output` for the real server's; `l4` carries what
    /// the socket saw (SYN+ACK/ACK when connected, FIN on a half-close, RST
    /// on a reset); `bytes` were relayed in that direction (counted as one
    /// packet). Drives the state machine, the timers and the counters, so
    /// `-Lcn`, ActiveConn/InActConn and `--stats` follow the socket.
    pub fn conn_event(&mut self, now: Instant, id: ConnId, dir: Direction, l4: L4, bytes: u64) {
        let Some(c) = self.conns.get(id) else { return };
        let dest = DestId(c.dest);
        let pkt = Packet {
            src: c.caddr.to_ip(c.af),
            sport: c.cport,
            dst: c.vaddr.to_ip(c.af),
            dport: c.vport,
            l4,
            fwmark: 0,
            len: 0,
            payload: &[],
        };
        self.transition(now, id, &pkt, dir);
        if bytes > 0 {
            match dir {
                Direction::Output => self.count(dest, |s| s.count_out(bytes)),
                _ => self.count(dest, |s| s.count_in(bytes)),
            }
        }
    }

    /// Account relayed traffic without a state change (bulk data).
    pub fn conn_traffic(
        &mut self,
        id: ConnId,
        in_pkts: u64,
        in_bytes: u64,
        out_pkts: u64,
        out_bytes: u64,
    ) {
        let Some(dest) = self.conns.get(id).map(|c| DestId(c.dest)) else {
            return;
        };
        self.count(dest, |s| {
            s.inpkts = s.inpkts.wrapping_add(in_pkts);
            s.inbytes = s.inbytes.wrapping_add(in_bytes);
            s.outpkts = s.outpkts.wrapping_add(out_pkts);
            s.outbytes = s.outbytes.wrapping_add(out_bytes);
        });
    }

    /// The real server of a held connection could not be reached: forget
    /// the attempt and schedule the client again, leaving out that server
    /// and every server in `also_avoid` (earlier failures of the same
    /// attempt), with its persistence template invalidated — what IPVS
    /// cannot do and a proxy can. `Err` as for [`Ipvs::open`].
    pub fn retry_elsewhere(
        &mut self,
        now: Instant,
        id: ConnId,
        also_avoid: &[DestId],
        protocol: Protocol,
        client: std::net::SocketAddr,
        vip: std::net::SocketAddr,
    ) -> Result<Forward, Verdict> {
        let Some(c) = self.conns.get(id) else {
            return Err(Verdict::Pass);
        };
        let (failed, control) = (DestId(c.dest), c.control);
        if control != NONE {
            self.conns.invalidate_template(ConnId(control));
        }
        self.close(id);
        // Mark the servers to avoid overloaded for this one decision (every
        // scheduler skips overloaded servers), then restore the marks.
        let mut saved = Vec::new();
        for d in std::iter::once(failed).chain(also_avoid.iter().copied()) {
            if let Some(was) = self.dest(d).map(|x| x.overloaded)
                && !saved.iter().any(|(x, _)| *x == d)
            {
                saved.push((d, was));
                self.with_dest(d, |x| x.overloaded = true);
            }
        }
        let result = self.open(now, protocol, client, vip);
        for (d, was) in saved {
            self.with_dest(d, |x| x.overloaded = was);
        }
        result
    }

    /// The proxy's sockets of a connection are closed: a TCP entry the
    /// close moved into a closing state (FIN_WAIT, TIME_WAIT, CLOSE,
    /// CLOSE_WAIT, LAST_ACK: the FIN or RST events [`Ipvs::conn_event`]
    /// reported) is no longer held and stays until that state's timer ends,
    /// as the kernel keeps it: `-Lcn` lists it, it counts as inactive, and
    /// a sync master sends the closing state, so a backup does not keep the
    /// connection ESTABLISHED for the full established timeout. Any other
    /// entry is removed now, as by [`Ipvs::close`]. A new connection of
    /// the same client tuple replaces a lingering entry.
    ///
    /// Unlike the kernel's, a lingering entry no longer holds its
    /// persistence template: the sockets are gone, and the template's own
    /// timer runs from the last live connection. In the kernel a closed
    /// connection in TIME_WAIT keeps its template for up to two more
    /// minutes, so `-p 10` (or Kubernetes' `sessionAffinity` with
    /// `timeoutSeconds: 10`) would not time out for two minutes.
    pub fn release(&mut self, id: ConnId) {
        let closing = self.conns.get(id).is_some_and(|c| {
            c.protocol == Protocol::Tcp.number()
                && TcpState::from_u8(c.state).is_some_and(|s| {
                    matches!(
                        s,
                        TcpState::FinWait
                            | TcpState::TimeWait
                            | TcpState::Close
                            | TcpState::CloseWait
                            | TcpState::LastAck
                    )
                })
        });
        if !closing {
            self.close(id);
            return;
        }
        let control = match self.conns.get_mut(id) {
            Some(c) => {
                c.flags.remove(ConnFlags::HELD);
                std::mem::replace(&mut c.control, NONE)
            }
            None => return,
        };
        if control != NONE
            && let Some(t) = self.conns.get_mut(ConnId(control))
        {
            t.n_control = t.n_control.saturating_sub(1);
        }
    }

    /// The proxy's socket is gone: remove the entry now (counters follow).
    pub fn close(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(id) {
            c.flags.remove(ConnFlags::HELD);
        }
        self.remove_conn(id, true);
    }
}
