//! Which frames the director acts on: the control side of the MAC filter
//! (`bpf/lib/own_mac.h`, the `own_macs` table of `bpf/rvs.h`, map
//! [`OWN_MACS_MAP`]).
//!
//! The director only looks at unicast frames sent to a MAC it owns on the
//! interface they came in on: the interface's own MAC, written by
//! [`Loaded::attach`], and extra MACs the control side adds, such as the
//! VRRP virtual MAC ([`vrrp_vmac`]) of a `use_vmac` macvlan on top of the
//! interface (the macvlan's frames arrive on the lower interface, where the
//! program is attached). Anything else (a frame a bridge flooded, or a
//! promiscuous NIC picked up, multicast, broadcast) goes to the kernel
//! unchanged: forwarding it would duplicate another host's packets and, on
//! XDP_TX, put that host's MAC in the source (MAC flapping between
//! directors).
//!
//! Also here: [`Loaded::run_on`], a BPF_PROG_TEST_RUN with the ingress
//! interface given in the context, as the program sees a frame on the wire.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{Loaded, RunResult, XdpError};

/// The table's map: the program's global `own_macs` in a section of its
/// own, which the loader makes a one-element array (the program reads it
/// with plain loads, no map lookup per packet).
pub const OWN_MACS_MAP: &str = ".data.own_macs";

/// Entries of the table (`RVS_OWN_MACS_MAX`).
pub const OWN_MACS_MAX: usize = 16;

/// One owned MAC: `struct rvs_own_mac`.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct OwnMac {
    /// The interface it is owned on (the frame's ingress interface).
    pub ifindex: u32,
    /// The MAC.
    pub mac: [u8; 6],
    /// Zero.
    pub pad0: [u8; 2],
}

/// The whole table: `struct rvs_own_macs`, element 0 of [`OWN_MACS_MAP`].
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct OwnMacTable {
    /// Entries in use, from the first.
    pub count: u32,
    /// Zero.
    pub pad0: u32,
    /// The entries.
    pub e: [OwnMac; OWN_MACS_MAX],
}

const _: () = assert!(size_of::<OwnMac>() == 12);
const _: () = assert!(size_of::<OwnMacTable>() == 8 + 12 * OWN_MACS_MAX);

/// Why an owned MAC could not be added or found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OwnMacError {
    /// The table holds [`OWN_MACS_MAX`] entries already.
    #[error("the director owns {OWN_MACS_MAX} MACs already; cannot add {mac} on ifindex {ifindex}")]
    Full {
        /// The interface.
        ifindex: u32,
        /// The MAC, printed.
        mac: String,
    },
    /// A group (multicast or broadcast) MAC: never a frame's destination
    /// the director acts on.
    #[error("{0} is not a unicast MAC")]
    NotUnicast(String),
    /// The interface has no link-layer (AF_PACKET) address.
    #[error("interface `{0}` not found or has no Ethernet address")]
    NoLink(String),
    /// getifaddrs(3) failed.
    #[error("reading the interfaces' link addresses (getifaddrs): {0}")]
    Ifaddrs(#[source] nix::Error),
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_string(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The VRRP (IPv4) virtual router MAC of `vrid`: 00:00:5e:00:01:VRID
/// (RFC 5798 section 7.3).
pub fn vrrp_vmac(vrid: u8) -> [u8; 6] {
    [0x00, 0x00, 0x5e, 0x00, 0x01, vrid]
}

/// The set of owned (ifindex, MAC) pairs, in table order. No I/O: the
/// loader writes it with [`Loaded::set_own_macs`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnMacs {
    entries: Vec<(u32, [u8; 6])>,
}

impl OwnMacs {
    /// An empty set (a director with it acts on every frame: not attached).
    pub fn new() -> Self {
        Self::default()
    }

    /// Own `mac` on `ifindex`; false when it was owned already.
    pub fn add(&mut self, ifindex: u32, mac: [u8; 6]) -> Result<bool, OwnMacError> {
        // The all-zero MAC is the loopback device's own (and its frames'
        // destination): allowed. Group addresses never are a director's.
        if mac[0] & 1 != 0 {
            return Err(OwnMacError::NotUnicast(mac_string(&mac)));
        }
        if self.entries.contains(&(ifindex, mac)) {
            return Ok(false);
        }
        if self.entries.len() >= OWN_MACS_MAX {
            return Err(OwnMacError::Full {
                ifindex,
                mac: mac_string(&mac),
            });
        }
        self.entries.push((ifindex, mac));
        Ok(true)
    }

    /// Stop owning `mac` on `ifindex`; false when it was not owned.
    pub fn remove(&mut self, ifindex: u32, mac: [u8; 6]) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| *e != (ifindex, mac));
        self.entries.len() != before
    }

    /// The owned pairs, in table order.
    pub fn entries(&self) -> &[(u32, [u8; 6])] {
        &self.entries
    }

    /// The map value.
    pub fn table(&self) -> OwnMacTable {
        let mut t = OwnMacTable {
            count: self.entries.len() as u32,
            ..OwnMacTable::default()
        };
        for (slot, (ifindex, mac)) in t.e.iter_mut().zip(&self.entries) {
            slot.ifindex = *ifindex;
            slot.mac = *mac;
        }
        t
    }

    /// The set a map value holds (entries past `count` ignored).
    pub fn from_table(t: &OwnMacTable) -> Self {
        let n = (t.count as usize).min(OWN_MACS_MAX);
        OwnMacs {
            entries: t.e[..n].iter().map(|e| (e.ifindex, e.mac)).collect(),
        }
    }
}

/// The ifindex and MAC of `interface`, from its AF_PACKET address
/// (getifaddrs(3), which reads them over netlink).
pub fn link_mac(interface: &str) -> Result<(u32, [u8; 6]), OwnMacError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(OwnMacError::Ifaddrs)?;
    for a in addrs {
        if a.interface_name != interface {
            continue;
        }
        let Some(link) = a.address.as_ref().and_then(|s| s.as_link_addr()) else {
            continue;
        };
        if let Some(mac) = link.addr() {
            return Ok((link.ifindex() as u32, mac));
        }
    }
    Err(OwnMacError::NoLink(interface.to_owned()))
}

/// `struct xdp_md` as BPF_PROG_TEST_RUN takes it in `ctx_in`.
fn xdp_md(frame_len: usize, ingress_ifindex: u32) -> [u8; 24] {
    // data, data_end, data_meta, ingress_ifindex, rx_queue_index,
    // egress_ifindex. data_end must be the frame's length: older kernels
    // refuse anything else, and since Linux 6.17 it is the size of the
    // linear part (0 would hand the program an empty frame, the rest in
    // fragments it cannot read: XDP_PASS for everything).
    let words = [0, frame_len as u32, 0, ingress_ifindex, 0, 0];
    let mut out = [0u8; 24];
    for (chunk, w) in out.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    out
}

impl Loaded {
    fn own_macs_map(
        &mut self,
    ) -> Result<crate::maps::typed::TypedArray<'_, OwnMacTable>, XdpError> {
        self.array::<OwnMacTable>(OWN_MACS_MAP)
    }

    /// The owned (ifindex, MAC) pairs the program filters on.
    pub fn own_macs(&mut self) -> Result<OwnMacs, XdpError> {
        let t = self
            .own_macs_map()?
            .get(&0, 0)
            .map_err(crate::map_err(OWN_MACS_MAP))?;
        Ok(OwnMacs::from_table(&t))
    }

    /// Replace the owned pairs (one map write; the kernel copies the value
    /// while packets may read it, so a packet racing the write can see part
    /// of the old table and part of the new: at worst a frame to a MAC
    /// being added or moved is passed to the kernel once).
    pub fn set_own_macs(&mut self, macs: &OwnMacs) -> Result<(), XdpError> {
        self.own_macs_map()?
            .set(0, macs.table(), 0)
            .map_err(crate::map_err(OWN_MACS_MAP))
    }

    /// Own `mac` on `ifindex` too (e.g. the VRRP virtual MAC of a
    /// `use_vmac` macvlan whose lower interface is `ifindex`); false when
    /// it was owned already.
    pub fn add_own_mac(&mut self, ifindex: u32, mac: [u8; 6]) -> Result<bool, XdpError> {
        let mut macs = self.own_macs()?;
        let added = macs.add(ifindex, mac)?;
        if added {
            self.set_own_macs(&macs)?;
        }
        Ok(added)
    }

    /// Stop owning `mac` on `ifindex`; false when it was not owned.
    pub fn remove_own_mac(&mut self, ifindex: u32, mac: [u8; 6]) -> Result<bool, XdpError> {
        let mut macs = self.own_macs()?;
        let removed = macs.remove(ifindex, mac);
        if removed {
            self.set_own_macs(&macs)?;
        }
        Ok(removed)
    }

    /// Own `interface`'s MAC on it (what [`Loaded::attach`] does before it
    /// attaches a director); its (ifindex, MAC).
    pub fn own_interface(&mut self, interface: &str) -> Result<(u32, [u8; 6]), XdpError> {
        let (ifindex, mac) = link_mac(interface)?;
        self.add_own_mac(ifindex, mac)?;
        Ok((ifindex, mac))
    }

    /// [`Loaded::attach`]'s first step: a director owns the interface's
    /// MAC before it sees a frame. Other programs have no table.
    pub(crate) fn own_before_attach(&mut self, interface: &str) -> Result<(), XdpError> {
        if self.object.is_director() {
            self.own_interface(interface)?;
        }
        Ok(())
    }

    /// Unicast frames passed because they were sent to another host's MAC,
    /// summed over CPUs.
    pub fn foreign_frames(&mut self) -> Result<u64, XdpError> {
        let m = self
            .map("foreign_frames")?
            .per_cpu_array::<u64>()
            .map_err(crate::map_err("foreign_frames"))?;
        let v = m.get(&0, 0).map_err(crate::map_err("foreign_frames"))?;
        Ok(v.iter().sum())
    }

    /// [`Loaded::run`] as the frame would arrive on the wire: the context
    /// names `ingress_ifindex` as the interface it came in on (it must exist
    /// in the caller's network namespace). Without it a test run's ingress
    /// is the loopback device, so a frame the attached program sends back
    /// with XDP_TX is redirected instead, and a frame to a MAC owned on the
    /// real interface is not the director's.
    pub fn run_on(
        &mut self,
        frame: &[u8],
        repeat: u32,
        ingress_ifindex: u32,
    ) -> Result<RunResult, XdpError> {
        let ctx = xdp_md(frame.len(), ingress_ifindex);
        self.test_run(frame, repeat, Some(&ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

    #[test]
    fn the_table_holds_the_set_in_order() {
        let mut m = OwnMacs::new();
        assert!(m.add(2, A).unwrap());
        assert!(!m.add(2, A).unwrap(), "already owned");
        assert!(m.add(2, vrrp_vmac(51)).unwrap());
        assert!(m.add(3, A).unwrap(), "another interface");
        let t = m.table();
        assert_eq!(t.count, 3);
        assert_eq!((t.e[1].ifindex, t.e[1].mac), (2, [0, 0, 0x5e, 0, 1, 51]));
        assert_eq!(t.e[3], OwnMac::default());
        assert_eq!(OwnMacs::from_table(&t), m);
        assert!(m.remove(2, A));
        assert!(!m.remove(2, A));
        assert_eq!(m.entries(), &[(2, vrrp_vmac(51)), (3, A)]);
    }

    #[test]
    fn group_macs_are_refused_and_the_table_is_bounded() {
        let mut m = OwnMacs::new();
        assert!(matches!(
            m.add(2, [0xff; 6]),
            Err(OwnMacError::NotUnicast(_))
        ));
        assert!(matches!(
            m.add(2, [0x01, 0, 0x5e, 0, 0, 1]),
            Err(OwnMacError::NotUnicast(_))
        ));
        for i in 0..OWN_MACS_MAX as u8 {
            m.add(2, vrrp_vmac(i + 1)).unwrap();
        }
        assert!(matches!(
            m.add(2, vrrp_vmac(200)),
            Err(OwnMacError::Full { .. })
        ));
        assert!(
            !m.add(2, vrrp_vmac(1)).unwrap(),
            "a present pair is no error"
        );
    }

    #[test]
    fn the_test_run_context_carries_the_frame_length_and_ingress() {
        let c = xdp_md(66, 7);
        assert_eq!(&c[4..8], &66u32.to_ne_bytes());
        assert_eq!(&c[12..16], &7u32.to_ne_bytes());
        assert_eq!(c.iter().filter(|b| **b != 0).count(), 2);
    }

    #[test]
    fn loopback_is_found_with_its_zero_mac() {
        // getifaddrs lists lo with a zero MAC, its frames' destination: a
        // director attached to lo owns it.
        if let Ok((ifindex, mac)) = link_mac("lo") {
            assert!(ifindex > 0);
            assert_eq!(mac, [0; 6]);
            assert!(OwnMacs::new().add(ifindex, mac).unwrap());
        }
        assert!(matches!(
            link_mac("rvs-no-such-if0"),
            Err(OwnMacError::NoLink(_))
        ));
    }
}
