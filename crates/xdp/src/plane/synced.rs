//! Synced flows: loading the connections and templates another director
//! synced here (IPVS connection sync) into the program's tables, FULLNAT
//! ones with their master's local address and port ([`SyncedFlow`],
//! [`Plane::load_synced`]).

use super::*;

impl<M: MapOps> Plane<M> {
    /// Load a connection or template another director synced (IPVS
    /// connection sync) into the program's tables — `flows4`/`flows`, or
    /// `persist` — bound to the same real server, stamped as seen now: its
    /// packets then go where they went before the failover, whatever a new
    /// scheduling decision here would say. Skipped (Ok) when the real
    /// server is not one this plane carries, and for QUIC-LB services
    /// (routed by connection ID, without flows).
    pub fn load_synced_flow(&mut self, ipvs: &Ipvs, flow: &MirroredConn) -> Result<(), PlaneError> {
        match SyncedFlow::resolve(ipvs, flow) {
            Some(s) => self.load_synced(&s),
            None => Ok(()),
        }
    }

    /// Synced FULLNAT flows not loaded because their local address and
    /// port was held here by another live flow (since the plane started).
    pub fn synced_pairs_taken(&self) -> u64 {
        self.synced_pairs_taken
    }

    /// [`Plane::load_synced_flow`] with what it needs of the director
    /// already taken ([`SyncedFlow::resolve`]).
    ///
    /// A connection of a FULLNAT real server that comes with its master's
    /// local address and port (`MirroredConn::local`) gets that pair here
    /// as the program would have given it: claimed in `fnat_rev` (never
    /// over another live flow's claim), then `fnat_fwd`, then the flow
    /// entry with the pair recorded (IPv4), so its packets leave from the
    /// same laddr:lport and the real server's replies to it find the
    /// client. If another live flow holds the pair here, the synced flow is
    /// not loaded (counted in [`Plane::synced_pairs_taken`], logged): its
    /// next packet is scheduled anew. Without a pair the flow is loaded
    /// without one (the program then gives it a new pair).
    pub fn load_synced(&mut self, synced: &SyncedFlow) -> Result<(), PlaneError> {
        let (flow, cfg) = (&synced.flow, &synced.dest);
        let found = self.services.iter().find_map(|(key, st)| {
            // A QUIC-LB service keeps no flows: its datagrams go by their
            // connection ID, and a flow entry would override that.
            if !synced.services.contains(key) || is_quic(&st.config) {
                return None;
            }
            let d = st.dests.iter().find(|x| same(&x.core.config, cfg))?;
            let fnat = matches!(d.core.config.forward, ForwardMethod::FullNat);
            Some((st.index, d.index, d.is_nat(), fnat))
        });
        let Some((svc, dest, nat, fnat)) = found else {
            return Ok(());
        };
        let (jiffies, _) = self.maps.clock()?;
        let family = if flow.client.is_ipv4() {
            maps::AF_INET
        } else {
            maps::AF_INET6
        };
        let proto = flow.protocol.number();
        if flow.template {
            let key = PersistKey {
                caddr: maps::addr16(flow.client.ip()),
                vaddr: maps::addr16(flow.vip.ip()),
                vport: flow.vip.port().to_be(),
                proto,
                family,
            };
            let value = Persist {
                last_seen: jiffies,
                dest,
                svc,
            };
            self.maps.set_persist(&key, &value)?;
        } else {
            let key = FlowKey {
                caddr: maps::addr16(flow.client.ip()),
                vaddr: maps::addr16(flow.vip.ip()),
                cport: flow.client.port().to_be(),
                vport: flow.vip.port().to_be(),
                proto,
                family,
                ..FlowKey::default()
            };
            let mut value = Flow {
                last_seen: jiffies,
                dest,
                svc,
                state: flow.state,
                flags: if flow.output_seen {
                    0
                } else {
                    maps::FLOW_F_NOOUTPUT
                },
                ..Flow::default()
            };
            if fnat && let Some(local) = flow.local {
                match self.claim_synced_pair(&key, local, cfg, svc, dest)? {
                    SyncedPair::Claimed(rk) => {
                        // Recorded in the entry as xdp_fnat records it
                        // (IPv4 only: no room for an IPv6 address).
                        if family == maps::AF_INET {
                            let [a, b, c, d, ..] = rk.laddr;
                            value.fnat_laddr = u32::from_ne_bytes([a, b, c, d]);
                            value.fnat_lport = rk.lport;
                        }
                    }
                    SyncedPair::Without => {}
                    SyncedPair::Taken => {
                        self.synced_pairs_taken += 1;
                        tracing::warn!(
                            client = %flow.client,
                            vip = %flow.vip,
                            local = %local,
                            real_server = %cfg.addr,
                            "synced FULLNAT flow not loaded: its local address and port is \
                             held here by another live flow (its next packet is scheduled anew)"
                        );
                        return Ok(());
                    }
                }
            }
            self.maps.set_flow(&key, &value)?;
            // A NAT flow also needs its reply entry, or the real server's
            // replies would leave with its own address (the program writes
            // it only for the flows it schedules itself).
            if nat {
                let nk = nat_key(&key, cfg.addr, cfg.port);
                let nv = Nat {
                    vaddr: key.vaddr,
                    vport: key.vport,
                    svc,
                    dest,
                    ..Nat::default()
                };
                self.maps.set_nat(&nk, &nv)?;
            }
        }
        Ok(())
    }

    /// FULLNAT: give synced flow `fk` (to real server `cfg`, service and
    /// real-server indexes `svc`, `dest`) the pair `local` its master used:
    /// claimed in `fnat_rev` as the program claims (a pair another live
    /// flow holds is never taken; one an orphaned translation holds — its
    /// flow is gone — is), the flow's previous pair here given back, then
    /// `fnat_fwd`. The flow entry itself is the caller's.
    fn claim_synced_pair(
        &mut self,
        fk: &FlowKey,
        local: std::net::SocketAddr,
        cfg: &DestConfig,
        svc: u32,
        dest: u32,
    ) -> Result<SyncedPair, PlaneError> {
        if maps::family(local.ip()) != fk.family {
            // The program keeps the family (admit refuses the rest): a
            // pair of the other family cannot be this flow's here.
            tracing::warn!(
                local = %local,
                "synced FULLNAT flow's local address is not of its family: loaded without it"
            );
            return Ok(SyncedPair::Without);
        }
        let rk = FnatKey {
            raddr: maps::addr16(cfg.addr),
            laddr: maps::addr16(local.ip()),
            rport: if cfg.port == 0 {
                fk.vport
            } else {
                cfg.port.to_be()
            },
            lport: local.port().to_be(),
            proto: fk.proto,
            family: fk.family,
            pad0: 0,
        };
        let n = Fnat {
            caddr: fk.caddr,
            vaddr: fk.vaddr,
            cport: fk.cport,
            vport: fk.vport,
            svc,
            dest,
            toa_ack: 0,
        };
        match self.maps.fnat_rev(&rk)? {
            // Already this flow's (a refresh): the program's entry stays.
            Some(held) if fnat::flow_of(&rk, &held) == *fk => {}
            Some(held) => {
                let holder = fnat::flow_of(&rk, &held);
                let live =
                    self.maps.fnat_of(&holder)? == Some(rk) && self.maps.has_flow(&holder)?;
                if live {
                    return Ok(SyncedPair::Taken);
                }
                // An orphan the sweep has not freed yet: free it now.
                if self.maps.fnat_of(&holder)? == Some(rk) {
                    self.maps.remove_fnat_fwd(&holder)?;
                }
                self.maps.remove_fnat_rev(&rk)?;
                if !self.maps.claim_fnat(&rk, &n)? {
                    return Ok(SyncedPair::Taken);
                }
            }
            None => {
                if !self.maps.claim_fnat(&rk, &n)? {
                    return Ok(SyncedPair::Taken);
                }
            }
        }
        // The flow's previous pair here (another one), given back.
        if let Some(old) = self.maps.fnat_of(fk)?
            && old != rk
            && old.lport != 0
            && self
                .maps
                .fnat_rev(&old)?
                .is_some_and(|h| fnat::flow_of(&old, &h) == *fk)
        {
            self.maps.remove_fnat_rev(&old)?;
        }
        self.maps.set_fnat_fwd(fk, &rk)?;
        Ok(SyncedPair::Claimed(rk))
    }
}

/// What [`Plane::claim_synced_pair`] did.
enum SyncedPair {
    /// The flow holds this pair here now.
    Claimed(FnatKey),
    /// Another live flow holds it here: the flow is not loaded.
    Taken,
    /// No pair for it (one this plane cannot carry): loaded without.
    Without,
}

/// A connection or template another director synced here, with what the
/// plane needs of the director to load it: the real server's address and
/// the services that have it.
#[derive(Clone, Debug)]
pub struct SyncedFlow {
    flow: MirroredConn,
    dest: DestConfig,
    services: Vec<ServiceKey>,
}

impl SyncedFlow {
    /// Take from the director what loading `flow` needs (pure); `None`
    /// when the director does not know its real server.
    pub fn resolve(ipvs: &Ipvs, flow: &MirroredConn) -> Option<Self> {
        let dest = ipvs.dest(flow.dest)?.config;
        let services = ipvs
            .services()
            .filter(|s| s.dests().iter().any(|x| x.id == flow.dest))
            .map(|s| *s.key())
            .collect();
        Some(SyncedFlow {
            flow: *flow,
            dest,
            services,
        })
    }
}
