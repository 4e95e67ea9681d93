//! [`Loaded`]: one BPF object of this crate loaded into the kernel, with
//! typed access to its maps and `BPF_PROG_TEST_RUN`.

use rvs_sys::bpf::probe::{self, Feature, ProbeProgType};
use rvs_sys::bpf::{Error as BpfError, Loader, Object as BpfObject, Xdp, XdpMode};

use crate::bpf::{self, map_err};
use crate::maps::typed::{Plain, TypedArray, TypedHash, TypedPerCpuArray};
use crate::maps::{
    self, Config, Dest, DestConns, Flow, Flow4Key, Flow6Cache, FlowCache, FlowKey, Locality,
    LocalityKey, Nat, NatKey, Persist, PersistKey, Stats, Svc, SvcKey,
};
use crate::{LoadOptions, Object, RunResult, XdpError, kernel_hz};

/// Slots written per `BPF_MAP_UPDATE_BATCH` ([`Loaded::set_slots`]): the
/// kernel copies a batch's keys and values in, so a bound keeps that copy
/// small (32 KiB) while a Maglev table of 4,093 slots is one call.
pub(crate) const SLOTS_BATCH: usize = 4096;

/// The flow table holding `key`: `flows4` for IPv4, `flows` for IPv6.
pub fn flows_map(key: &FlowKey) -> &'static str {
    if key.family == maps::AF_INET {
        "flows4"
    } else {
        "flows"
    }
}

/// Which maps [`Loaded::load_pinned`] opens or creates pinned, and the
/// own-MAC table it starts with.
#[derive(Clone, Debug, Default)]
pub struct PinPlan {
    /// (map name, pin path).
    pub maps: Vec<(&'static str, std::path::PathBuf)>,
    /// The own-MAC table's initial content (the one already pinned, so
    /// loading does not clear the table a running program reads).
    pub own_macs: Option<crate::own_mac::OwnMacTable>,
}

/// What [`Loaded::attach_pinned`] did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Attached {
    /// Attached anew, in this mode, and its link pinned.
    New(XdpMode),
    /// The pinned link now runs this program (BPF_LINK_UPDATE).
    Updated,
    /// The pinned link runs a program with this one's tag: left alone.
    Kept,
}

/// What the director's programs need of the kernel that Linux 5.10 (Debian
/// 11) lacks, oldest first: probed only after the verifier refused one of
/// them ([`refused`]), to name what is missing. (`clang -mcpu=v3` turns a
/// `__sync_fetch_and_add` whose result is used into an atomic fetch;
/// `bpf_loop`'s callbacks are the subprograms 5.10 counts wrong: "number
/// of funcs in func_info doesn't match number of subprogs".)
pub(crate) const DIRECTOR_FEATURES: [Feature; 3] = [
    Feature::ATOMIC_FETCH,
    Feature::helper("bpf_loop", 181, "5.17", ProbeProgType::Xdp),
    Feature::helper("bpf_xdp_load_bytes", 189, "5.18", ProbeProgType::Xdp),
];

/// A program of `object` the kernel refused: for the director,
/// [`XdpError::KernelLacks`] when a probe finds one of
/// [`DIRECTOR_FEATURES`] missing; otherwise (or when the probes cannot
/// tell, logged) the refusal as it was.
fn refused(object: Object, program: &'static str, e: BpfError) -> XdpError {
    if object.is_director() && matches!(e, BpfError::Verifier { .. }) {
        match probe::lacking(&DIRECTOR_FEATURES) {
            Ok(Some(lacking)) => return XdpError::KernelLacks(lacking),
            Ok(None) => {}
            Err(pe) => tracing::warn!(
                error = %pe, program,
                "the kernel refused the program and its BPF features could not be probed"
            ),
        }
    }
    bpf::prog_err(program, "load (verifier)")(e)
}

/// One loaded BPF object with its (single) XDP program loaded into the
/// kernel, not attached.
#[derive(Debug)]
pub struct Loaded {
    ebpf: BpfObject,
    pub(crate) object: Object,
    /// The program test runs run (the object's main program unless the
    /// test fixture `Loaded::load_fnat_alone`, compiled with the
    /// `test-fixtures` feature only, chose another).
    entry: &'static str,
}

impl Loaded {
    /// Load `object`, sizing the flow and slot maps from `opts`, and load
    /// its program into the kernel (the verifier runs here).
    pub fn load(object: Object, opts: &LoadOptions) -> Result<Self, XdpError> {
        Self::load_pinned(object, opts, &PinPlan::default())
    }

    /// [`Loaded::load`] reusing or creating pinned maps as `plan` says:
    /// a map given a path is opened there if something is pinned there
    /// (the loader checks nothing: the caller compared its layout first),
    /// else created and pinned there; the own-MAC table starts as
    /// `plan.own_macs` (the loader rewrites a data section's initial bytes
    /// into its map at every load, pinned or not).
    pub fn load_pinned(
        object: Object,
        opts: &LoadOptions,
        plan: &PinPlan,
    ) -> Result<Self, XdpError> {
        use zerocopy::IntoBytes as _;
        let bytes = object.bytes()?;
        let mut loader = Loader::new();
        for (name, path) in &plan.maps {
            loader.map_pin_path(name, path.as_path());
        }
        let own = plan.own_macs.map(|t| t.as_bytes().to_vec());
        if let Some(own) = &own {
            loader.override_global("own_macs", own.as_slice(), true);
        }
        if object.is_director() {
            size_director_maps(&mut loader, opts);
        }
        #[cfg(feature = "bench")]
        if matches!(
            object,
            Object::BenchLru | Object::BenchLruHit | Object::BenchLruCycle
        ) {
            loader.map_max_entries("bench_flows", opts.flow_table_size);
        }
        #[cfg(feature = "bench")]
        if object == Object::RefLb {
            loader.map_max_entries("ref_flows", opts.flow_table_size);
        }
        let ebpf = bpf::load(object.name(), &mut loader, bytes)?;
        let mut me = Loaded {
            ebpf,
            object,
            entry: object.name(),
        };
        me.program()?
            .load()
            .map_err(|e| refused(object, object.name(), e))?;
        if object.is_director() {
            // FULLNAT (bpf/lib/fnat.h) and QUIC-LB (bpf/lib/quic_lb.h):
            // each its own program, tail-called by xdp_lb.
            me.load_tail("xdp_fnat", "fnat_prog", maps::FNAT_PROG)?;
            me.load_tail("xdp_quic", "quic_prog", crate::quic_lb::QUIC_PROG)?;
            // DSR by IP option (bpf/lib/dsr_opt.h).
            me.load_tail("xdp_dsr_opt", "dsr_prog", maps::dsr_opt::PROG)?;
        }
        Ok(me)
    }

    /// Tests: the director's maps with only its FULLNAT program `xdp_fnat`
    /// loaded, the program test runs run; what `xdp_lb` would hand it
    /// across the tail call is written with [`Loaded::set_fnat_tmp`]. For
    /// checking the FULLNAT program by itself (on a kernel whose verifier
    /// refuses `xdp_lb`, too).
    #[cfg(feature = "test-fixtures")]
    pub fn load_fnat_alone(opts: &LoadOptions) -> Result<Self, XdpError> {
        let object = Object::Director;
        let mut loader = Loader::new();
        size_director_maps(&mut loader, opts);
        let ebpf = bpf::load(object.name(), &mut loader, object.bytes()?)?;
        let mut me = Loaded {
            ebpf,
            object,
            entry: "xdp_fnat",
        };
        me.program()?
            .load()
            .map_err(bpf::prog_err("xdp_fnat", "load (verifier)"))?;
        Ok(me)
    }

    /// Tests: `fnat_tmp[0]` on every CPU, what `xdp_lb` hands `xdp_fnat`
    /// (see [`Loaded::load_fnat_alone`]).
    #[cfg(feature = "test-fixtures")]
    pub fn set_fnat_tmp(&mut self, tmp: &maps::FnatTmp) -> Result<(), XdpError> {
        self.per_cpu_array::<maps::FnatTmp>("fnat_tmp")?
            .set_all(&0, tmp)
            .map_err(map_err("fnat_tmp"))
    }

    /// Load one of the director's tail-called programs (`xdp_fnat`, the
    /// FULLNAT program; `xdp_quic`, the QUIC-LB program; the verifier runs
    /// here) and put it into `slot` of the prog array `array`, the slot
    /// xdp_lb tail-calls.
    fn load_tail(
        &mut self,
        name: &'static str,
        array: &'static str,
        slot: u32,
    ) -> Result<(), XdpError> {
        let err = |what| bpf::prog_err(name, what);
        let object = self.object;
        let fd = {
            let mut p = bpf::xdp(&mut self.ebpf, name)?;
            p.load().map_err(|e| refused(object, name, e))?;
            p.fd_owned().map_err(err("fd"))?
        };
        let mut pa = self.map(array)?.program_array().map_err(map_err(array))?;
        use std::os::fd::AsFd as _;
        pa.set(slot, fd.as_fd(), 0).map_err(map_err(array))
    }

    /// Map a QUIC-LB service to its index in `svc_info` (in
    /// `quic_services`; it must not also be in `services`).
    pub fn set_quic_service(&mut self, key: &SvcKey, index: u32) -> Result<(), XdpError> {
        self.hash::<SvcKey, u32>("quic_services")?
            .insert(key, index, 0)
            .map_err(map_err("quic_services"))
    }

    /// Remove a QUIC-LB service from `quic_services`.
    pub fn remove_quic_service(&mut self, key: &SvcKey) -> Result<(), XdpError> {
        self.hash::<SvcKey, u32>("quic_services")?
            .remove(key)
            .map_err(map_err("quic_services"))
    }

    /// Write service `svc`'s QUIC-LB configurations (`quic_lb`).
    pub fn set_quic_lb(
        &mut self,
        svc: u32,
        value: &crate::quic_lb::QuicSvc,
    ) -> Result<(), XdpError> {
        self.hash::<u32, crate::quic_lb::QuicSvc>("quic_lb")?
            .insert(svc, value, 0)
            .map_err(map_err("quic_lb"))
    }

    /// Forget service `svc`'s QUIC-LB configurations (`quic_lb`; absent
    /// is not an error).
    pub fn remove_quic_lb(&mut self, svc: u32) -> Result<(), XdpError> {
        let r = self
            .hash::<u32, crate::quic_lb::QuicSvc>("quic_lb")?
            .remove(&svc);
        absent_ok(r).map_err(map_err("quic_lb"))
    }

    /// Name the real server (dest index) of a server ID (`quic_sids`).
    pub fn set_quic_sid(
        &mut self,
        key: &crate::quic_lb::QuicSidKey,
        dest: u32,
    ) -> Result<(), XdpError> {
        self.hash::<crate::quic_lb::QuicSidKey, u32>("quic_sids")?
            .insert(key, dest, 0)
            .map_err(map_err("quic_sids"))
    }

    /// Forget a server ID (`quic_sids`; absent is not an error).
    pub fn remove_quic_sid(&mut self, key: &crate::quic_lb::QuicSidKey) -> Result<(), XdpError> {
        let r = self
            .hash::<crate::quic_lb::QuicSidKey, u32>("quic_sids")?
            .remove(key);
        absent_ok(r).map_err(map_err("quic_sids"))
    }

    /// Service `svc`'s QUIC-LB counters, summed over CPUs.
    pub fn quic_stats(&mut self, svc: u32) -> Result<crate::quic_lb::QuicStats, XdpError> {
        let a = self.per_cpu_array::<crate::quic_lb::QuicStats>("quic_stats")?;
        let v = a.get(&svc, 0).map_err(map_err("quic_stats"))?;
        Ok(v.iter()
            .fold(crate::quic_lb::QuicStats::default(), |a, c| a.add(c)))
    }

    /// Datagrams passed because the tail call into `xdp_quic` failed,
    /// summed over CPUs.
    pub fn quic_missed(&mut self) -> Result<u64, XdpError> {
        let a = self.per_cpu_array::<u64>("quic_missed")?;
        let v = a.get(&0, 0).map_err(map_err("quic_missed"))?;
        Ok(v.iter().sum())
    }

    pub(crate) fn program(&mut self) -> Result<Xdp<'_>, XdpError> {
        bpf::xdp(&mut self.ebpf, self.entry)
    }

    /// Attach to `interface`: native (driver) mode first, generic (skb)
    /// mode when the driver has no XDP support; `mode` forces one.
    pub fn attach(&mut self, interface: &str, mode: Option<XdpMode>) -> Result<XdpMode, XdpError> {
        let name = self.object.name();
        self.own_before_attach(interface)?;
        bpf::attach_xdp(&mut self.program()?, name, interface, mode)
    }

    /// Attach to `interface` through the BPF link pinned at `link` (see
    /// [`crate::pin`]): a live link there (on this interface) is updated
    /// to this program atomically when the program it runs has another tag
    /// (different instructions), else left running; otherwise the program
    /// is attached as by [`Loaded::attach`] and its link pinned at `link`,
    /// so it stays attached when this process ends. With `swap`, a live
    /// link is updated whatever its program (this one's maps are not all
    /// the running one's: a migration).
    pub fn attach_pinned(
        &mut self,
        interface: &str,
        mode: Option<XdpMode>,
        link: &std::path::Path,
        swap: bool,
    ) -> Result<Attached, XdpError> {
        use std::os::fd::AsFd as _;
        let name = self.object.name();
        let perr = |what: &'static str| {
            move |e: BpfError| XdpError::Program {
                program: name,
                what,
                source: Box::new(e),
            }
        };
        let pin_err = |what: &'static str, e: std::io::Error| {
            XdpError::Pin(crate::pin::PinError::Io {
                what,
                path: link.to_owned(),
                source: e,
            })
        };
        self.own_before_attach(interface)?;
        let ifindex = rvs_sys::iface::ifindex(interface).map_err(|_| XdpError::Program {
            program: name,
            what: "attach",
            source: Box::new(BpfError::UnknownInterface {
                name: interface.to_owned(),
            }),
        })?;
        if let Ok(fd) = rvs_sys::bpf::obj_get(link) {
            let live = rvs_sys::bpf::link_info(fd.as_fd()).is_ok_and(|i| {
                i.link_type == rvs_sys::bpf::BPF_LINK_TYPE_XDP && i.xdp_ifindex == ifindex
            });
            if live {
                let running = rvs_sys::bpf::link_info(fd.as_fd())
                    .ok()
                    .and_then(|i| rvs_sys::bpf::loaded_program_tag(i.prog_id));
                let mut prog = self.program()?;
                let mine = prog.tag().ok();
                if !swap && running.is_some() && running == mine {
                    return Ok(Attached::Kept);
                }
                prog.update_link(link)
                    .map_err(perr("link update (BPF_LINK_UPDATE)"))?;
                return Ok(Attached::Updated);
            }
            // Defunct (its interface went away) or another kind: replace.
            std::fs::remove_file(link).map_err(|e| pin_err("unpinning", e))?;
        }
        let mut prog = self.program()?;
        let modes: &[XdpMode] = match mode {
            Some(ref m) => std::slice::from_ref(m),
            None => &[XdpMode::Driver, XdpMode::Skb],
        };
        let mut last = None;
        for &m in modes {
            match prog.attach_link(interface, m) {
                Ok(owned) => {
                    owned.pin(link).map_err(|e| {
                        pin_err("pinning the link at", std::io::Error::other(e.to_string()))
                    })?;
                    return Ok(Attached::New(m));
                }
                Err(BpfError::NoLink(e)) => {
                    return Err(XdpError::Program {
                        program: name,
                        what: "the kernel attached without a BPF link (needs Linux 5.9+), so \
                               the program could not outlive rvsd",
                        source: Box::new(BpfError::Syscall {
                            call: "bpf_link_create",
                            source: std::io::Error::other(e),
                        }),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(XdpError::Program {
            program: name,
            what: "attach",
            source: Box::new(last.unwrap_or(BpfError::UnknownInterface {
                name: interface.to_owned(),
            })),
        })
    }

    /// The file descriptor of map `name` (migration copies).
    pub(crate) fn map_fd(
        &mut self,
        name: &'static str,
    ) -> Result<std::os::fd::BorrowedFd<'_>, XdpError> {
        Ok(self.map(name)?.fd())
    }

    /// Pin map `name` at `path` (replacing what was pinned there).
    pub(crate) fn pin_map(
        &mut self,
        name: &'static str,
        path: &std::path::Path,
    ) -> Result<(), XdpError> {
        let _ = std::fs::remove_file(path);
        self.map(name)?.pin(path).map_err(|e| {
            XdpError::Pin(crate::pin::PinError::Io {
                what: "pinning",
                path: path.to_owned(),
                source: std::io::Error::other(e.to_string()),
            })
        })
    }

    /// Pin this director's tail-call arrays ([`crate::pin::TAIL_ARRAYS`])
    /// in `inst`, in place of what is pinned there: once the links run
    /// this director's program, so that its FULLNAT program stays in its
    /// slot after this process ends.
    pub(crate) fn pin_tails(&mut self, inst: &crate::pin::Instance) -> Result<(), XdpError> {
        for (name, _) in crate::pin::TAIL_ARRAYS {
            self.pin_map(name, &inst.map_path(name))?;
        }
        Ok(())
    }

    /// Run the program once per `repeat` on `frame` with BPF_PROG_TEST_RUN.
    pub fn run(&mut self, frame: &[u8], repeat: u32) -> Result<RunResult, XdpError> {
        self.test_run(frame, repeat, None)
    }

    /// BPF_PROG_TEST_RUN with an optional `struct xdp_md` context (what
    /// [`Loaded::run`] and [`Loaded::run_on`] share).
    pub(crate) fn test_run(
        &mut self,
        frame: &[u8],
        repeat: u32,
        ctx: Option<&[u8]>,
    ) -> Result<RunResult, XdpError> {
        let name = self.entry;
        let mut prog = self.program()?;
        // Room for the largest encapsulation the program pushes.
        let mut out = vec![0u8; frame.len() + 256];
        let r = prog
            .test_run(frame, &mut out, ctx, repeat)
            .map_err(|e| XdpError::Program {
                program: name,
                what: "test run",
                source: Box::new(e),
            })?;
        out.truncate(r.data_size_out as usize);
        Ok(RunResult {
            action: r.return_value,
            data: out,
            duration: r.duration,
        })
    }

    /// The program as the verifier rewrote it (its "xlated" instructions,
    /// 8 bytes each, read with `BPF_OBJ_GET_INFO_BY_FD`): shows which helper calls the verifier inlined and which it
    /// left as calls. Call targets are only given to a caller allowed to see
    /// kernel addresses (root); otherwise they read as zero.
    pub fn translated(&mut self) -> Result<Vec<[u8; 8]>, XdpError> {
        let name = self.object.name();
        self.translated_of(name)
    }

    /// [`Loaded::translated`] of the object's program `name` (the
    /// director's FULLNAT program is `xdp_fnat`).
    pub fn translated_of(&mut self, name: &'static str) -> Result<Vec<[u8; 8]>, XdpError> {
        let prog = bpf::xdp(&mut self.ebpf, name)?;
        prog.translated().map_err(|e| XdpError::Program {
            program: name,
            what: "BPF_OBJ_GET_INFO_BY_FD",
            source: Box::new(e),
        })
    }

    pub(crate) fn map(&mut self, name: &'static str) -> Result<rvs_sys::bpf::Map<'_>, XdpError> {
        bpf::map(&self.ebpf, name)
    }

    pub(crate) fn array<V: Plain>(
        &mut self,
        name: &'static str,
    ) -> Result<TypedArray<'_, V>, XdpError> {
        TypedArray::new(self.map(name)?).map_err(map_err(name))
    }

    pub(crate) fn hash<K: Plain, V: Plain>(
        &mut self,
        name: &'static str,
    ) -> Result<TypedHash<'_, K, V>, XdpError> {
        TypedHash::new(self.map(name)?).map_err(map_err(name))
    }

    fn per_cpu_array<V: Plain>(
        &mut self,
        name: &'static str,
    ) -> Result<TypedPerCpuArray<'_, V>, XdpError> {
        TypedPerCpuArray::new(self.map(name)?).map_err(map_err(name))
    }

    /// Map a virtual service to its index in `svc_info`.
    pub fn set_service(&mut self, key: &SvcKey, index: u32) -> Result<(), XdpError> {
        self.hash::<SvcKey, u32>("services")?
            .insert(key, index, 0)
            .map_err(map_err("services"))
    }

    /// Remove a virtual service (its flows stay until they expire).
    pub fn remove_service(&mut self, key: &SvcKey) -> Result<(), XdpError> {
        self.hash::<SvcKey, u32>("services")?
            .remove(key)
            .map_err(map_err("services"))
    }

    /// Write one service's scheduling description (atomic per element).
    pub fn set_svc(&mut self, index: u32, svc: &Svc) -> Result<(), XdpError> {
        self.array::<Svc>("svc_info")?
            .set(index, svc, 0)
            .map_err(map_err("svc_info"))
    }

    /// Write `values` into `slots` from position `offset` on: in batches
    /// of `SLOTS_BATCH` (`BPF_MAP_UPDATE_BATCH` through rvs-sys: a
    /// Maglev table of 4,093 slots is one system call, not 4,093), or one
    /// element at a time on kernels without batch operations on arrays
    /// (before 5.6). The region is not yet visible to the program (the
    /// service's `svc_info` flips to it afterwards), so a batch that fails
    /// half-way is simply written again.
    pub fn set_slots(&mut self, offset: u32, values: &[u32]) -> Result<(), XdpError> {
        match self.set_slots_batched(offset, values) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => {
                return Err(map_err("slots")(BpfError::Syscall {
                    call: "bpf_map_update_batch",
                    source: e,
                }));
            }
        }
        self.set_slots_one_by_one(offset, values)
    }

    /// [`Loaded::set_slots`] in batches; `EINVAL` where the kernel has no
    /// batch updates of arrays.
    pub(crate) fn set_slots_batched(&mut self, offset: u32, values: &[u32]) -> std::io::Result<()> {
        let Ok(m) = self.map("slots") else {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        };
        let map = rvs_sys::bpf::BpfMap::new(m.fd())?;
        let last = u32::try_from(values.len())
            .ok()
            .and_then(|n| offset.checked_add(n))
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::E2BIG))?;
        let keys: Vec<u8> = (offset..last).flat_map(u32::to_ne_bytes).collect();
        let vals: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        for (k, v) in keys
            .chunks(SLOTS_BATCH * 4)
            .zip(vals.chunks(SLOTS_BATCH * 4))
        {
            map.update_batch(k, v, 0)?;
        }
        Ok(())
    }

    /// [`Loaded::set_slots`] one element per system call.
    pub(crate) fn set_slots_one_by_one(
        &mut self,
        offset: u32,
        values: &[u32],
    ) -> Result<(), XdpError> {
        let mut a = self.array::<u32>("slots")?;
        for (i, v) in (offset..).zip(values) {
            a.set(i, v, 0).map_err(map_err("slots"))?;
        }
        Ok(())
    }

    /// Write one real server.
    pub fn set_dest(&mut self, index: u32, dest: &Dest) -> Result<(), XdpError> {
        self.array::<Dest>("dests")?
            .set(index, dest, 0)
            .map_err(map_err("dests"))
    }

    /// Write the director's configuration; `hz` 0 is replaced by the
    /// kernel's measured HZ ([`kernel_hz`]).
    pub fn set_config(&mut self, config: &Config) -> Result<(), XdpError> {
        let mut c = *config;
        if c.hz == 0 {
            c.hz = kernel_hz()?;
        }
        self.array::<Config>("config")?
            .set(0, c, 0)
            .map_err(map_err("config"))
    }

    pub(crate) fn jiffies(&mut self) -> Result<u64, XdpError> {
        self.run(&[0u8; 64], 1)?;
        self.array::<u64>("clock_jiffies")?
            .get(&0, 0)
            .map_err(map_err("clock_jiffies"))
    }

    /// Every flow entry, IPv4 (`flows4`) then IPv6 (`flows`) (for listings
    /// such as `-Lcn`; one syscall pair per entry, so meant for the control
    /// side's periodic work, not per packet).
    pub fn flows(&mut self) -> Result<Vec<(FlowKey, Flow)>, XdpError> {
        let mut out = Vec::new();
        for r in self.hash::<Flow4Key, Flow>("flows4")?.iter() {
            match r {
                Ok((k, f)) => out.push((k.widen(), f)),
                // Deleted by the program between the key walk and the read.
                Err(BpfError::KeyNotFound) => {}
                Err(e) => return Err(map_err("flows4")(e)),
            }
        }
        for r in self.hash::<FlowKey, Flow>("flows")?.iter() {
            match r {
                Ok(kv) => out.push(kv),
                Err(BpfError::KeyNotFound) => {}
                Err(e) => return Err(map_err("flows")(e)),
            }
        }
        Ok(out)
    }

    /// Benchmark builds with `RVS_BENCH_CYCLE_FLOWS` ([`Object::DirectorCycle`],
    /// [`Object::DirectorCycleMiss`], [`Object::BenchLruCycle`]): from the
    /// next run on, run k replaces the client address by 10.0.0.0 + i, where
    /// i = k × `stride` mod `n` (so every one of the `n` keys once per `n`
    /// runs). `n` = 0 turns the cycle off. `stride` must be below `n` and
    /// coprime with it (0 for `n` = 1); `n` at most 2^24 (10.0.0.0/8).
    #[cfg(feature = "bench")]
    pub fn set_bench_cycle(&mut self, n: u32, stride: u32) -> Result<(), XdpError> {
        fn gcd(a: u32, b: u32) -> u32 {
            if b == 0 { a } else { gcd(b, a % b) }
        }
        if n > 1 << 24 {
            return Err(XdpError::BenchCycle("more than 2^24 keys"));
        }
        if n > 0 && (stride >= n || gcd(n, stride) != 1) {
            return Err(XdpError::BenchCycle(
                "the stride must be below n and coprime with it",
            ));
        }
        self.array::<[u32; 4]>("bench_cycle")?
            .set(0, [n, stride, 0, 0], 0)
            .map_err(map_err("bench_cycle"))
    }

    /// Set a service's rr/wrr cursor.
    pub fn set_cursor(&mut self, svc: u32, value: u64) -> Result<(), XdpError> {
        self.array::<u64>("rr_cursor")?
            .set(svc, value, 0)
            .map_err(map_err("rr_cursor"))
    }

    /// A service's rr/wrr cursor.
    pub fn cursor(&mut self, svc: u32) -> Result<u64, XdpError> {
        self.array::<u64>("rr_cursor")?
            .get(&svc, 0)
            .map_err(map_err("rr_cursor"))
    }

    /// The flow entry of a client 5-tuple, if any (`flows4` for IPv4,
    /// `flows` for IPv6; else, for a TCP flow whose handshake has not
    /// completed, `embryonic4` / `embryonic`).
    pub fn flow(&mut self, key: &FlowKey) -> Result<Option<Flow>, XdpError> {
        match self.table_flow(key, false)? {
            Some(f) => Ok(Some(f)),
            None => self.table_flow(key, true),
        }
    }

    /// The entry of `key` in the flow table (`embryonic`: the embryonic
    /// table) of its family.
    pub fn table_flow(&mut self, key: &FlowKey, embryonic: bool) -> Result<Option<Flow>, XdpError> {
        let (m4, m6) = if embryonic {
            ("embryonic4", "embryonic")
        } else {
            ("flows4", "flows")
        };
        let (r, name) = match Flow4Key::of(key) {
            Some(k4) => (self.hash::<Flow4Key, Flow>(m4)?.get(&k4, 0), m4),
            None => (self.hash::<FlowKey, Flow>(m6)?.get(key, 0), m6),
        };
        match r {
            Ok(f) => Ok(Some(f)),
            Err(BpfError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err(name)(e)),
        }
    }

    /// Insert or replace `key`'s entry in the flow table (`embryonic`:
    /// the embryonic table) of its family, as it is: no epoch bump, no
    /// stamp of `embryonic_seen` (for tests: [`Loaded::set_flow`] is the
    /// control side's write).
    pub fn set_table_flow(
        &mut self,
        key: &FlowKey,
        flow: &Flow,
        embryonic: bool,
    ) -> Result<(), XdpError> {
        let (m4, m6) = if embryonic {
            ("embryonic4", "embryonic")
        } else {
            ("flows4", "flows")
        };
        match Flow4Key::of(key) {
            Some(k4) => self
                .hash::<Flow4Key, Flow>(m4)?
                .insert(k4, flow, 0)
                .map_err(map_err(m4)),
            None => self
                .hash::<FlowKey, Flow>(m6)?
                .insert(key, flow, 0)
                .map_err(map_err(m6)),
        }
    }

    /// `embryonic_seen[0]`: the latest jiffy at which the program wrote an
    /// embryonic entry (0: never; [`maps::EMBRYONIC_SEEN_UNKNOWN`]: not
    /// known, see there).
    pub fn embryonic_seen(&mut self) -> Result<u64, XdpError> {
        self.array::<u64>("embryonic_seen")?
            .get(&0, 0)
            .map_err(map_err("embryonic_seen"))
    }

    /// Set `embryonic_seen[0]` (see [`Loaded::embryonic_seen`]).
    pub fn set_embryonic_seen(&mut self, jiffy: u64) -> Result<(), XdpError> {
        self.array::<u64>("embryonic_seen")?
            .set(0, jiffy, 0)
            .map_err(map_err("embryonic_seen"))
    }

    /// Zero every CPU's `flood` window (new flows this second, armed
    /// until): the embryonic tables unarmed, as after a quiet minute.
    pub fn reset_flood(&mut self) -> Result<(), XdpError> {
        self.per_cpu_array::<maps::Flood>("flood")?
            .set_all(&0, &maps::Flood::default())
            .map_err(map_err("flood"))
    }

    /// Take up to `max` of the next hops the program found unresolved
    /// (`nh_missing`): read, then deleted, so the program reports each
    /// again if it is still missing later.
    pub fn take_missing_hops(&mut self, max: usize) -> Result<Vec<std::net::IpAddr>, XdpError> {
        let mut h = self.hash::<maps::NhKey, u32>("nh_missing")?;
        let found: Vec<maps::NhKey> = h
            .iter()
            .take(max)
            .filter_map(Result::ok)
            .map(|(k, _)| k)
            .collect();
        for k in &found {
            // Gone already is fine.
            let _ = h.remove(k);
        }
        Ok(found.iter().filter_map(maps::NhKey::addr).collect())
    }

    /// Next hops the program could not report because `nh_missing` was
    /// full, summed over CPUs.
    pub fn missing_hops_full(&mut self) -> Result<u64, XdpError> {
        let a = self.per_cpu_array::<u64>("nh_missing_full")?;
        let v = a.get(&0, 0).map_err(map_err("nh_missing_full"))?;
        Ok(v.iter().sum())
    }

    /// Service `svc`'s SYN-flood counters, summed over CPUs.
    pub fn svc_flood(&mut self, svc: u32) -> Result<maps::SvcFlood, XdpError> {
        let a = self.per_cpu_array::<maps::SvcFlood>("svc_flood")?;
        let v = a.get(&svc, 0).map_err(map_err("svc_flood"))?;
        Ok(v.iter().fold(maps::SvcFlood::default(), |a, c| a.add(c)))
    }

    /// Zero service `svc`'s SYN-flood counters on every CPU.
    pub fn reset_svc_flood(&mut self, svc: u32) -> Result<(), XdpError> {
        self.per_cpu_array::<maps::SvcFlood>("svc_flood")?
            .set_all(&svc, &maps::SvcFlood::default())
            .map_err(map_err("svc_flood"))
    }

    /// Insert or replace a flow entry. The flow's epoch slot is bumped
    /// after the write, so no CPU's flow cache (IPv4 or IPv6) keeps serving
    /// the flow's previous real server.
    pub fn set_flow(&mut self, key: &FlowKey, flow: &Flow) -> Result<(), XdpError> {
        match Flow4Key::of(key) {
            Some(k4) => {
                self.hash::<Flow4Key, Flow>("flows4")?
                    .insert(k4, flow, 0)
                    .map_err(map_err("flows4"))?;
                self.bump_flow_epoch(&k4)
            }
            None => {
                self.hash::<FlowKey, Flow>("flows")?
                    .insert(key, flow, 0)
                    .map_err(map_err("flows"))?;
                self.bump_epoch_slot(maps::flow_key_epoch_slot(key))
            }
        }
    }

    /// Invalidate every CPU's flow-cache entries of `key`'s epoch slot.
    /// The program bumps slots with atomic adds; this side can only read and
    /// write, so it adds a large odd constant: an add of the program that
    /// lands between the read and the write is lost, but the value written
    /// still differs from every value the slot held meanwhile, which is all
    /// an epoch needs.
    pub fn bump_flow_epoch(&mut self, key: &Flow4Key) -> Result<(), XdpError> {
        self.bump_epoch_slot(maps::flow_epoch_slot(key))
    }

    /// Bump one `flow_epochs` slot (see [`Loaded::bump_flow_epoch`]).
    fn bump_epoch_slot(&mut self, slot: u32) -> Result<(), XdpError> {
        let mut a = self.array::<u32>("flow_epochs")?;
        let e = a.get(&slot, 0).map_err(map_err("flow_epochs"))?;
        a.set(slot, e.wrapping_add(0x9e37_79b9), 0)
            .map_err(map_err("flow_epochs"))
    }

    /// The epoch of an IPv4 flow key's slot in `flow_epochs`.
    pub fn flow_epoch(&mut self, key: &Flow4Key) -> Result<u32, XdpError> {
        self.array::<u32>("flow_epochs")?
            .get(&maps::flow_epoch_slot(key), 0)
            .map_err(map_err("flow_epochs"))
    }

    /// The epoch of a flow key's slot in `flow_epochs`, either family.
    pub fn flow_key_epoch(&mut self, key: &FlowKey) -> Result<u32, XdpError> {
        self.array::<u32>("flow_epochs")?
            .get(&maps::flow_key_epoch_slot(key), 0)
            .map_err(map_err("flow_epochs"))
    }

    /// The `flow6_cache` element an IPv6 flow key maps to, per CPU (index =
    /// CPU number); as [`Loaded::flow_cache`] for IPv4.
    pub fn flow6_cache(&mut self, key: &FlowKey) -> Result<Vec<Flow6Cache>, XdpError> {
        let a = self.per_cpu_array::<Flow6Cache>("flow6_cache")?;
        let v = a
            .get(&maps::flow6_cache_index(key), 0)
            .map_err(map_err("flow6_cache"))?;
        Ok(v)
    }

    /// The `flow_cache` element an IPv4 flow key maps to, per CPU (index =
    /// CPU number). It holds another key, or a stale entry, as often as not:
    /// compare [`FlowCache::key`], epoch and stamp. For tests and debugging.
    pub fn flow_cache(&mut self, key: &Flow4Key) -> Result<Vec<FlowCache>, XdpError> {
        let a = self.per_cpu_array::<FlowCache>("flow_cache")?;
        let v = a
            .get(&maps::flow_cache_index(key), 0)
            .map_err(map_err("flow_cache"))?;
        Ok(v)
    }

    /// Remove a flow entry, from the flow table and the embryonic table
    /// (no error when absent).
    pub fn remove_flow(&mut self, key: &FlowKey) -> Result<(), XdpError> {
        for (m4, m6) in [("flows4", "flows"), ("embryonic4", "embryonic")] {
            let (r, name) = match Flow4Key::of(key) {
                Some(k4) => (self.hash::<Flow4Key, Flow>(m4)?.remove(&k4), m4),
                None => (self.hash::<FlowKey, Flow>(m6)?.remove(key), m6),
            };
            match r {
                Ok(()) | Err(BpfError::KeyNotFound) => {}
                // The kernel's "no such entry" (the key is in the other table).
                Err(e) if e.is_absent() => {}
                Err(e) => return Err(map_err(name)(e)),
            }
        }
        Ok(())
    }

    /// Insert or replace the NAT reply entry of a (real server, client)
    /// pair.
    pub fn set_nat(&mut self, key: &NatKey, nat: &Nat) -> Result<(), XdpError> {
        self.hash::<NatKey, Nat>("nat_rev")?
            .insert(key, nat, 0)
            .map_err(map_err("nat_rev"))
    }

    /// Delete the NAT reply entry of a (real server, client) pair (absent
    /// is not an error).
    pub fn remove_nat(&mut self, key: &NatKey) -> Result<(), XdpError> {
        match self.hash::<NatKey, Nat>("nat_rev")?.remove(key) {
            Ok(()) | Err(BpfError::KeyNotFound) => Ok(()),
            Err(e) => Err(map_err("nat_rev")(e)),
        }
    }

    /// The NAT reply entry of a (real server, client) pair, if any.
    pub fn nat(&mut self, key: &NatKey) -> Result<Option<Nat>, XdpError> {
        match self.hash::<NatKey, Nat>("nat_rev")?.get(key, 0) {
            Ok(n) => Ok(Some(n)),
            Err(BpfError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err("nat_rev")(e)),
        }
    }

    /// Write service `svc`'s FULLNAT pool.
    pub fn set_fnat_pool(&mut self, svc: u32, pool: &maps::FnatPool) -> Result<(), XdpError> {
        self.array::<maps::FnatPool>("fnat_pools")?
            .set(svc, pool, 0)
            .map_err(map_err("fnat_pools"))
    }

    /// Make `addr` a local address (packets to it that are no VIP traffic
    /// go to the FULLNAT reply path).
    pub fn add_fnat_laddr(&mut self, addr: std::net::IpAddr) -> Result<(), XdpError> {
        self.hash::<maps::NhKey, u32>("fnat_laddrs")?
            .insert(maps::NhKey::of(addr), 0, 0)
            .map_err(map_err("fnat_laddrs"))
    }

    /// Remove a local address (absent is not an error).
    pub fn remove_fnat_laddr(&mut self, addr: std::net::IpAddr) -> Result<(), XdpError> {
        match self
            .hash::<maps::NhKey, u32>("fnat_laddrs")?
            .remove(&maps::NhKey::of(addr))
        {
            Ok(()) | Err(BpfError::KeyNotFound) => Ok(()),
            Err(e) => Err(map_err("fnat_laddrs")(e)),
        }
    }

    /// Add (`present`) or remove one client source range of a service in
    /// `src_ranges` (absent is not an error).
    pub fn set_src_range(&mut self, key: &maps::SrcKey, present: bool) -> Result<(), XdpError> {
        let mut t = self
            .map("src_ranges")?
            .lpm_trie::<maps::SrcKey, u8>()
            .map_err(map_err("src_ranges"))?;
        let r = if present {
            t.insert(key, &1)
        } else {
            t.remove(key)
        };
        match r {
            Ok(()) | Err(BpfError::KeyNotFound) => Ok(()),
            Err(e) => Err(map_err("src_ranges")(e)),
        }
    }

    /// The client source ranges `src_ranges` holds for service `svc`
    /// (what a previous rvsd, or a service that held the index before,
    /// left there).
    pub fn src_ranges_of(&mut self, svc: u32) -> Result<Vec<maps::SrcKey>, XdpError> {
        let t = self
            .map("src_ranges")?
            .lpm_trie::<maps::SrcKey, u8>()
            .map_err(map_err("src_ranges"))?;
        t.keys()
            .filter(|k| !matches!(k, Ok(k) if k.svc != svc))
            .collect::<Result<_, _>>()
            .map_err(map_err("src_ranges"))
    }

    /// The local addresses in `fnat_laddrs`.
    pub fn fnat_laddrs(&mut self) -> Result<Vec<std::net::IpAddr>, XdpError> {
        let h = self.hash::<maps::NhKey, u32>("fnat_laddrs")?;
        Ok(h.iter()
            .filter_map(Result::ok)
            .filter_map(|(k, _)| k.addr())
            .collect())
    }

    /// The FULLNAT translation a real server's packet `key` finds, if any.
    pub fn fnat(&mut self, key: &maps::FnatKey) -> Result<Option<maps::Fnat>, XdpError> {
        match self
            .hash::<maps::FnatKey, maps::Fnat>("fnat_rev")?
            .get(key, 0)
        {
            Ok(n) => Ok(Some(n)),
            Err(BpfError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err("fnat_rev")(e)),
        }
    }

    /// The FULLNAT translation of a flow (its `fnat_rev` key), if any.
    pub fn fnat_of(&mut self, flow: &FlowKey) -> Result<Option<maps::FnatKey>, XdpError> {
        match self
            .hash::<FlowKey, maps::FnatKey>("fnat_fwd")?
            .get(flow, 0)
        {
            Ok(n) => Ok(Some(n)),
            Err(BpfError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err("fnat_fwd")(e)),
        }
    }

    /// Every FULLNAT translation (`fnat_rev`; one syscall pair per entry:
    /// the control side's periodic work).
    pub fn fnat_entries(&mut self) -> Result<Vec<(maps::FnatKey, maps::Fnat)>, XdpError> {
        let mut out = Vec::new();
        for r in self.hash::<maps::FnatKey, maps::Fnat>("fnat_rev")?.iter() {
            match r {
                Ok(e) => out.push(e),
                Err(BpfError::KeyNotFound) => {}
                Err(e) => return Err(map_err("fnat_rev")(e)),
            }
        }
        Ok(out)
    }

    /// Remove a flow's FULLNAT translation both ways (`fnat_rev` and the
    /// flow's `fnat_fwd` entry; absent is not an error): its pair is free.
    pub fn remove_fnat(&mut self, key: &maps::FnatKey, n: &maps::Fnat) -> Result<(), XdpError> {
        let flow = FlowKey {
            caddr: n.caddr,
            vaddr: n.vaddr,
            cport: n.cport,
            vport: n.vport,
            proto: key.proto,
            family: key.family,
            pad0: 0,
        };
        self.remove_fnat_of(&flow, key)
    }

    /// Remove flow `flow`'s FULLNAT translation `rev` both ways (absent is
    /// not an error).
    pub fn remove_fnat_of(&mut self, flow: &FlowKey, rev: &maps::FnatKey) -> Result<(), XdpError> {
        self.remove_fnat_fwd(flow)?;
        self.remove_fnat_rev(rev)
    }

    /// Remove `fnat_fwd[flow]` (absent is not an error).
    pub fn remove_fnat_fwd(&mut self, flow: &FlowKey) -> Result<(), XdpError> {
        match self
            .hash::<FlowKey, maps::FnatKey>("fnat_fwd")?
            .remove(flow)
        {
            Ok(()) | Err(BpfError::KeyNotFound) => Ok(()),
            Err(e) => Err(map_err("fnat_fwd")(e)),
        }
    }

    /// Claim pair `rev` for the flow `n` names: `fnat_rev[rev] = n` with
    /// `BPF_NOEXIST`, as the program claims one. False (nothing written)
    /// when a flow already holds the pair.
    pub fn claim_fnat(&mut self, rev: &maps::FnatKey, n: &maps::Fnat) -> Result<bool, XdpError> {
        /// `bpf_map_update_elem`'s "only if absent" flag.
        const BPF_NOEXIST: u64 = 1;
        match self
            .hash::<maps::FnatKey, maps::Fnat>("fnat_rev")?
            .insert(rev, n, BPF_NOEXIST)
        {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(map_err("fnat_rev")(e)),
        }
    }

    /// `fnat_fwd[flow] = rev` (the flow's translation; claim `rev` first).
    pub fn set_fnat_fwd(&mut self, flow: &FlowKey, rev: &maps::FnatKey) -> Result<(), XdpError> {
        self.hash::<FlowKey, maps::FnatKey>("fnat_fwd")?
            .insert(flow, rev, 0)
            .map_err(map_err("fnat_fwd"))
    }

    /// Remove `fnat_rev[rev]` (absent is not an error): the pair is free.
    pub fn remove_fnat_rev(&mut self, rev: &maps::FnatKey) -> Result<(), XdpError> {
        match self
            .hash::<maps::FnatKey, maps::Fnat>("fnat_rev")?
            .remove(rev)
        {
            Ok(()) | Err(BpfError::KeyNotFound) => Ok(()),
            Err(e) => Err(map_err("fnat_rev")(e)),
        }
    }

    /// Service `svc`'s FULLNAT counters, summed over CPUs.
    pub fn fnat_stats(&mut self, svc: u32) -> Result<maps::FnatStats, XdpError> {
        let a = self.per_cpu_array::<maps::FnatStats>("fnat_stats")?;
        let v = a.get(&svc, 0).map_err(map_err("fnat_stats"))?;
        Ok(v.iter().fold(maps::FnatStats::default(), |a, c| a.plus(c)))
    }

    /// Zero service `svc`'s FULLNAT counters on every CPU.
    pub fn reset_fnat_stats(&mut self, svc: u32) -> Result<(), XdpError> {
        self.per_cpu_array::<maps::FnatStats>("fnat_stats")?
            .set_all(&svc, &maps::FnatStats::default())
            .map_err(map_err("fnat_stats"))
    }

    /// Packets passed because the tail call into `xdp_fnat` failed,
    /// summed over CPUs.
    pub fn fnat_missed(&mut self) -> Result<u64, XdpError> {
        let a = self.per_cpu_array::<u64>("fnat_missed")?;
        let v = a.get(&0, 0).map_err(map_err("fnat_missed"))?;
        Ok(v.iter().sum())
    }

    /// Empty `fnat_prog` (tests: the failed tail call).
    pub fn clear_fnat_prog(&mut self) -> Result<(), XdpError> {
        let mut pa = self
            .map("fnat_prog")?
            .program_array()
            .map_err(map_err("fnat_prog"))?;
        match pa.clear_index(&maps::FNAT_PROG) {
            Ok(()) | Err(BpfError::KeyNotFound) => Ok(()),
            Err(e) => Err(map_err("fnat_prog")(e)),
        }
    }

    /// A persistence template, if any.
    pub fn persist(&mut self, key: &PersistKey) -> Result<Option<Persist>, XdpError> {
        match self.hash::<PersistKey, Persist>("persist")?.get(key, 0) {
            Ok(t) => Ok(Some(t)),
            Err(BpfError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err("persist")(e)),
        }
    }

    /// The lblc/lblcr entry of a service's destination address, if any.
    pub fn locality(&mut self, key: &LocalityKey) -> Result<Option<Locality>, XdpError> {
        match self.hash::<LocalityKey, Locality>("locality")?.get(key, 0) {
            Ok(t) => Ok(Some(t)),
            Err(BpfError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err("locality")(e)),
        }
    }

    /// Write an lblc/lblcr entry (tests: age an entry).
    pub fn set_locality(&mut self, key: &LocalityKey, value: &Locality) -> Result<(), XdpError> {
        self.hash::<LocalityKey, Locality>("locality")?
            .insert(key, value, 0)
            .map_err(map_err("locality"))
    }

    /// A real server's connection counters.
    pub fn dest_conns(&mut self, index: u32) -> Result<DestConns, XdpError> {
        self.array::<DestConns>("dest_conns")?
            .get(&index, 0)
            .map_err(map_err("dest_conns"))
    }

    /// Set a real server's connection counters (a control-side sweep, tests).
    pub fn set_dest_conns(&mut self, index: u32, c: &DestConns) -> Result<(), XdpError> {
        self.array::<DestConns>("dest_conns")?
            .set(index, c, 0)
            .map_err(map_err("dest_conns"))
    }

    fn stats(&mut self, name: &'static str, index: u32) -> Result<Stats, XdpError> {
        let a = self.per_cpu_array::<Stats>(name)?;
        let per_cpu = a.get(&index, 0).map_err(map_err(name))?;
        Ok(per_cpu.iter().fold(Stats::default(), |s, c| Stats {
            conns: s.conns + c.conns,
            inpkts: s.inpkts + c.inpkts,
            outpkts: s.outpkts + c.outpkts,
            inbytes: s.inbytes + c.inbytes,
            outbytes: s.outbytes + c.outbytes,
        }))
    }

    /// A service's counters summed over CPUs.
    pub fn svc_stats(&mut self, index: u32) -> Result<Stats, XdpError> {
        self.stats("svc_stats", index)
    }

    /// A real server's counters summed over CPUs.
    pub fn dest_stats(&mut self, index: u32) -> Result<Stats, XdpError> {
        self.stats("dest_stats", index)
    }
}

/// A deletion whose key was absent (`KeyNotFound` or the kernel's
/// `ENOENT`) as done.
fn absent_ok(r: Result<(), BpfError>) -> Result<(), BpfError> {
    match r {
        Err(e) if e.is_absent() => Ok(()),
        r => r,
    }
}

/// The director's table sizes from `opts` (flow tables, translations,
/// persistence, scheduling slots, services), for every way the director is
/// loaded.
fn size_director_maps(loader: &mut Loader<'_>, opts: &LoadOptions) {
    loader
        .map_max_entries("flows", opts.flow_table_size)
        .map_max_entries("flows4", opts.flow_table_size)
        .map_max_entries("embryonic", opts.embryonic_entries())
        .map_max_entries("embryonic4", opts.embryonic_entries())
        .map_max_entries("nat_rev", opts.flow_table_size)
        .map_max_entries("fnat_rev", opts.flow_table_size)
        .map_max_entries("fnat_fwd", opts.flow_table_size)
        .map_max_entries("persist", opts.flow_table_size)
        .map_max_entries("slots", opts.slots);
    for name in crate::pin::SERVICE_MAPS {
        loader.map_max_entries(name, opts.max_services);
    }
}
