//! Program handles of a loaded [`Object`](super::Object): XDP programs
//! (load, attach in a mode, attach through a BPF link that can be pinned,
//! update a pinned link, `BPF_PROG_TEST_RUN`), tc programs (sched_cls: load,
//! attach through a TCX link that can be pinned, `BPF_PROG_TEST_RUN`) and
//! cgroup programs (sock_ops, sock_addr, sock: load, attach, attach through
//! a link).

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::TcAttachOptions;
use aya::programs::xdp::XdpLink;
use aya::programs::{CgroupAttachMode, LinkOrder, TcAttachType, TestRun, TestRunOptions};

use super::Error;
pub use crate::netlink::XdpMode;

fn aya_mode(mode: XdpMode) -> aya::programs::XdpMode {
    match mode {
        XdpMode::Skb => aya::programs::XdpMode::Skb,
        XdpMode::Driver => aya::programs::XdpMode::Driver,
    }
}

/// A program of an object, of a type not yet checked.
#[derive(Debug)]
pub struct Program<'a> {
    inner: &'a mut aya::programs::Program,
}

impl<'a> Program<'a> {
    pub(crate) fn new(inner: &'a mut aya::programs::Program) -> Self {
        Program { inner }
    }

    /// The program as an XDP program ([`Error::UnexpectedProgramType`]
    /// when it is not one).
    pub fn xdp(self) -> Result<Xdp<'a>, Error> {
        Ok(Xdp {
            inner: self.inner.try_into()?,
        })
    }

    /// The program as a tc classifier (`BPF_PROG_TYPE_SCHED_CLS`).
    pub fn sched_cls(self) -> Result<SchedClassifier<'a>, Error> {
        Ok(SchedClassifier {
            inner: self.inner.try_into()?,
        })
    }

    /// The program as a cgroup sock_ops program.
    pub fn sock_ops(self) -> Result<Cgroup<'a>, Error> {
        Ok(Cgroup {
            inner: CgroupInner::SockOps(self.inner.try_into()?),
        })
    }

    /// The program as a cgroup sock_addr program (connect, sendmsg,
    /// recvmsg, getpeername hooks).
    pub fn sock_addr(self) -> Result<Cgroup<'a>, Error> {
        Ok(Cgroup {
            inner: CgroupInner::SockAddr(self.inner.try_into()?),
        })
    }

    /// The program as a cgroup sock program (socket create/release).
    pub fn sock(self) -> Result<Cgroup<'a>, Error> {
        Ok(Cgroup {
            inner: CgroupInner::Sock(self.inner.try_into()?),
        })
    }
}

/// A BPF link taken from its program: the attachment lasts while this value
/// (or its pin) does.
#[derive(Debug)]
pub struct Link {
    inner: FdLink,
}

impl Link {
    /// Pin the link at `path`, so the program stays attached after this
    /// process ends (until the pin is removed).
    pub fn pin(self, path: &Path) -> Result<(), Error> {
        self.inner.pin(path).map(drop).map_err(Error::from)
    }
}

/// What a `BPF_PROG_TEST_RUN` gave back.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TestRunOutput {
    /// The program's return value (for XDP, the action).
    pub return_value: u32,
    /// Bytes the program left in the output buffer.
    pub data_size_out: u32,
    /// The kernel's average time per run.
    pub duration: Duration,
}

/// An XDP program.
#[derive(Debug)]
pub struct Xdp<'a> {
    inner: &'a mut aya::programs::Xdp,
}

impl Xdp<'_> {
    /// A descriptor of the loaded program of its own (to put it into a
    /// program array of the same object).
    pub fn fd_owned(&self) -> Result<OwnedFd, Error> {
        self.fd()?
            .try_clone_to_owned()
            .map_err(Error::syscall("dup"))
    }

    /// The loaded program's tag (the hash of its instructions).
    pub fn tag(&self) -> Result<[u8; 8], Error> {
        super::prog_tag(self.fd()?).map_err(Error::syscall("bpf_obj_get_info_by_fd"))
    }

    /// The program as the verifier rewrote it (see
    /// [`prog_xlated_insns`](super::prog_xlated_insns)).
    pub fn translated(&self) -> Result<Vec<[u8; 8]>, Error> {
        super::prog_xlated_insns(self.fd()?).map_err(Error::syscall("bpf_obj_get_info_by_fd"))
    }

    /// Attach to `interface` in `mode`; the attachment belongs to the
    /// object (detached when it is dropped).
    pub fn attach(&mut self, interface: &str, mode: XdpMode) -> Result<(), Error> {
        self.inner.attach(interface, aya_mode(mode)).map(drop)?;
        Ok(())
    }

    /// Attach to `interface` in `mode` through a BPF link (Linux 5.9+) and
    /// take the link, to pin it. A kernel that attached without a link is
    /// [`Error::NoLink`] (the program is then detached).
    pub fn attach_link(&mut self, interface: &str, mode: XdpMode) -> Result<Link, Error> {
        let id = self.inner.attach(interface, aya_mode(mode))?;
        let owned = self.inner.take_link(id)?;
        let inner = FdLink::try_from(owned).map_err(|e| Error::NoLink(e.to_string()))?;
        Ok(Link { inner })
    }

    /// Make the XDP link pinned at `path` run this program
    /// (`BPF_LINK_UPDATE`, atomic); the pin keeps the link.
    pub fn update_link(&mut self, path: &Path) -> Result<(), Error> {
        let pinned = PinnedLink::from_pin(path)?;
        let link = XdpLink::try_from(FdLink::from(pinned))?;
        let id = self.inner.attach_to_link(link)?;
        // The pin keeps the link; this program's copy of it must not
        // detach it when dropped.
        drop(self.inner.take_link(id)?);
        Ok(())
    }
}

/// The methods both single-type program wrappers (`inner`: the aya
/// program) have alike: load, the descriptor, `BPF_PROG_TEST_RUN`.
/// `$input` and `$ctx` name, for the docs, what the run is given.
macro_rules! load_and_run {
    ($ty:ident, $input:literal, $ctx:literal) => {
        impl $ty<'_> {
            /// Load the program into the kernel (the verifier runs here).
            pub fn load(&mut self) -> Result<(), Error> {
                self.inner.load().map_err(Error::from)
            }

            /// The loaded program's file descriptor.
            pub fn fd(&self) -> Result<BorrowedFd<'_>, Error> {
                Ok(self.inner.fd()?.as_fd())
            }

            #[doc = concat!(
                        "Run the program `repeat` times (at least once) on `data_in` with\n",
                        "`BPF_PROG_TEST_RUN` (", $input, "), the frame it leaves written into\n",
                        "`data_out`; `ctx_in` is a `", $ctx, "` when given."
                    )]
            pub fn test_run(
                &mut self,
                data_in: &[u8],
                data_out: &mut [u8],
                ctx_in: Option<&[u8]>,
                repeat: u32,
            ) -> Result<TestRunOutput, Error> {
                test_run(&*self.inner, data_in, data_out, ctx_in, repeat)
            }
        }
    };
}

load_and_run!(Xdp, "the frame as it is", "struct xdp_md");
load_and_run!(
    SchedClassifier,
    "an skb built from the frame",
    "struct __sk_buff"
);

/// `BPF_PROG_TEST_RUN` of `prog`, the one way both program types run it.
fn test_run<P>(
    prog: &P,
    data_in: &[u8],
    data_out: &mut [u8],
    ctx_in: Option<&[u8]>,
    repeat: u32,
) -> Result<TestRunOutput, Error>
where
    P: for<'o> TestRun<Opts<'o> = TestRunOptions<'o>, Result = aya::TestRunResult>,
{
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(data_in);
    opts.data_out = Some(data_out);
    opts.ctx_in = ctx_in;
    opts.repeat = repeat.max(1);
    let r = prog.test_run(opts)?;
    Ok(TestRunOutput {
        return_value: r.return_value,
        data_size_out: r.data_size_out,
        duration: r.duration,
    })
}

/// The side of an interface a tc program runs on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TcHook {
    /// Packets the interface receives.
    Ingress,
    /// Packets the interface sends.
    Egress,
}

/// A tc classifier (sched_cls) program.
#[derive(Debug)]
pub struct SchedClassifier<'a> {
    inner: &'a mut aya::programs::SchedClassifier,
}

impl SchedClassifier<'_> {
    /// Attach to `hook` of `interface` through a TCX link (Linux 6.6+; no
    /// qdisc, and other programs there are kept, this one run after them)
    /// and take the link, to pin it. An older kernel refuses the link
    /// (the error's errno; nothing is attached).
    pub fn attach_link(&mut self, interface: &str, hook: TcHook) -> Result<Link, Error> {
        let hook = match hook {
            TcHook::Ingress => TcAttachType::Ingress,
            TcHook::Egress => TcAttachType::Egress,
        };
        let id = self.inner.attach_with_options(
            interface,
            hook,
            TcAttachOptions::TcxOrder(LinkOrder::default()),
        )?;
        let owned = self.inner.take_link(id)?;
        let inner = FdLink::try_from(owned).map_err(|e| Error::NoLink(e.to_string()))?;
        Ok(Link { inner })
    }
}

#[derive(Debug)]
enum CgroupInner<'a> {
    SockOps(&'a mut aya::programs::SockOps),
    SockAddr(&'a mut aya::programs::CgroupSockAddr),
    Sock(&'a mut aya::programs::CgroupSock),
}

/// A cgroup program (sock_ops, sock_addr or sock). Attachments are BPF
/// links without flags (Linux 5.7+), which never replace other programs
/// attached to the cgroup.
#[derive(Debug)]
pub struct Cgroup<'a> {
    inner: CgroupInner<'a>,
}

impl Cgroup<'_> {
    /// Load the program into the kernel (the verifier runs here).
    pub fn load(&mut self) -> Result<(), Error> {
        match &mut self.inner {
            CgroupInner::SockOps(p) => p.load(),
            CgroupInner::SockAddr(p) => p.load(),
            CgroupInner::Sock(p) => p.load(),
        }
        .map_err(Error::from)
    }

    /// Attach to the cgroup v2 directory `cgroup` (opened); the attachment
    /// belongs to the object (detached when it is dropped).
    pub fn attach(&mut self, cgroup: &std::fs::File) -> Result<(), Error> {
        let m = CgroupAttachMode::Single;
        match &mut self.inner {
            CgroupInner::SockOps(p) => p.attach(cgroup, m).map(drop),
            CgroupInner::SockAddr(p) => p.attach(cgroup, m).map(drop),
            CgroupInner::Sock(p) => p.attach(cgroup, m).map(drop),
        }
        .map_err(Error::from)
    }

    /// Attach to `cgroup` and take the link, to hold or pin it; a link
    /// that is not a BPF link (before Linux 5.7) is [`Error::NoLink`].
    pub fn attach_link(&mut self, cgroup: &std::fs::File) -> Result<Link, Error> {
        let m = CgroupAttachMode::Single;
        let link = match &mut self.inner {
            CgroupInner::SockOps(p) => {
                let id = p.attach(cgroup, m)?;
                FdLink::try_from(p.take_link(id)?)
            }
            CgroupInner::SockAddr(p) => {
                let id = p.attach(cgroup, m)?;
                FdLink::try_from(p.take_link(id)?)
            }
            CgroupInner::Sock(p) => {
                let id = p.attach(cgroup, m)?;
                FdLink::try_from(p.take_link(id)?)
            }
        };
        let inner = link.map_err(|e| Error::NoLink(e.to_string()))?;
        Ok(Link { inner })
    }
}
