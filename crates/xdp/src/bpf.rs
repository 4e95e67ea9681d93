//! Loading an embedded BPF object and naming what failed, in one place for
//! the director's loader, the decapsulator, the TOA reader and writer and
//! the TOA insertion fixture: each error says which object, program or map
//! (an operator's first question), and a build without clang says so. The
//! BPF calls themselves are rvs-sys's ([`rvs_sys::bpf`]).

use rvs_sys::bpf::{Error, Loader, Map, Object, Program, TestRunOutput, Xdp, XdpMode};

use crate::maps::typed::TypedPerCpuArray;
use crate::{RunResult, XdpError};

/// The compiled object `$file` in OUT_DIR (built by build.rs), aligned for
/// the loader, as a `Result<&'static [u8], XdpError>`: [`XdpError::NoBpf`]
/// in a build without clang (`rvs_no_bpf`).
macro_rules! embedded_object {
    ($file:literal) => {{
        #[cfg(not(rvs_no_bpf))]
        let bytes: Result<&'static [u8], $crate::XdpError> = Ok(rvs_sys::include_bytes_aligned!(
            concat!(env!("OUT_DIR"), "/", $file)
        ));
        #[cfg(rvs_no_bpf)]
        let bytes: Result<&'static [u8], $crate::XdpError> = Err($crate::XdpError::NoBpf);
        bytes
    }};
}
pub(crate) use embedded_object;

/// A program's per-CPU counters, each named once: the index module `$m`
/// (`pub const NAME: u32 = index` as the BPF header numbers them, and
/// `NSTATS`, the map's size), the struct `$stats` of their sums (one `u64`
/// field a counter, with the counter's doc) and `$stats::read`, which sums
/// a map's counters over the CPUs into it. The indexes must run 0, 1, 2…
/// in the order given (a const assertion checks it), as the fields are
/// filled in that order.
macro_rules! counters {
    (
        $(#[$mdoc:meta])* pub mod $m:ident;
        $(#[$sdoc:meta])* pub struct $stats:ident {
            $( $(#[$doc:meta])* $index:ident = $n:literal => $field:ident, )+
        }
    ) => {
        $(#[$mdoc])*
        pub mod $m {
            $( $(#[$doc])* pub const $index: u32 = $n; )+
            /// Number of counters (the map's size).
            pub const NSTATS: u32 = [$($n),+].len() as u32;
            const _: () = {
                let mut i = 0;
                $( assert!($index == i, "counters out of order"); i += 1; )+
                let _ = i;
            };
        }

        $(#[$sdoc])*
        #[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
        pub struct $stats {
            $( $(#[$doc])* pub $field: u64, )+
        }

        impl $stats {
            /// The counters of the per-CPU array `map` (called `name` in
            /// errors), each summed over the CPUs.
            pub(crate) fn read(
                map: rvs_sys::bpf::Map<'_>,
                name: &'static str,
            ) -> Result<Self, $crate::XdpError> {
                let [$($field),+]: [u64; $m::NSTATS as usize] =
                    $crate::bpf::percpu_sums(map, name)?;
                Ok(Self { $($field),+ })
            }
        }
    };
}
pub(crate) use counters;

/// Load `bytes` (the object called `object` in errors) with `loader`.
pub(crate) fn load(
    object: &'static str,
    loader: &mut Loader<'_>,
    bytes: &[u8],
) -> Result<Object, XdpError> {
    loader.load(bytes).map_err(|e| XdpError::Load {
        object,
        source: Box::new(e),
    })
}

/// The error of an operation on map `map`.
pub(crate) fn map_err(map: &'static str) -> impl Fn(Error) -> XdpError {
    move |e| XdpError::Map {
        map,
        source: Box::new(e),
    }
}

/// The error of doing `what` with program `program`.
pub(crate) fn prog_err(program: &'static str, what: &'static str) -> impl Fn(Error) -> XdpError {
    move |e| XdpError::Program {
        program,
        what,
        source: Box::new(e),
    }
}

/// Program `name` of `object`.
pub(crate) fn program<'a>(
    object: &'a mut Object,
    name: &'static str,
) -> Result<Program<'a>, XdpError> {
    object.program(name).ok_or(XdpError::Missing {
        kind: "program",
        name,
    })
}

/// Program `name` of `object` as an XDP program.
pub(crate) fn xdp<'a>(object: &'a mut Object, name: &'static str) -> Result<Xdp<'a>, XdpError> {
    program(object, name)?
        .xdp()
        .map_err(prog_err(name, "not an XDP program"))
}

/// Map `name` of `object`.
pub(crate) fn map<'a>(object: &'a Object, name: &'static str) -> Result<Map<'a>, XdpError> {
    object
        .map(name)
        .ok_or(XdpError::Missing { kind: "map", name })?
        .map_err(map_err(name))
}

/// The counters `0..N` of the per-CPU array `map` (called `name` in
/// errors), each summed over the CPUs: the programs' statistics.
pub(crate) fn percpu_sums<const N: usize>(
    map: Map<'_>,
    name: &'static str,
) -> Result<[u64; N], XdpError> {
    let a = TypedPerCpuArray::<u64>::new(map).map_err(map_err(name))?;
    let mut sums = [0; N];
    for (i, s) in (0u32..).zip(sums.iter_mut()) {
        *s = a.get(&i, 0).map_err(map_err(name))?.iter().sum();
    }
    Ok(sums)
}

/// One BPF_PROG_TEST_RUN of program `program` over `frame`, `repeat`
/// times: `run` is the program's `test_run` given the input and an output
/// buffer 64 bytes longer (room for headers the program adds). The
/// frame the program left, its action and time.
pub(crate) fn run_frame(
    program: &'static str,
    frame: &[u8],
    run: impl FnOnce(&[u8], &mut [u8]) -> Result<TestRunOutput, Error>,
) -> Result<RunResult, XdpError> {
    let mut out = vec![0u8; frame.len() + 64];
    let r = run(frame, &mut out).map_err(prog_err(program, "test run"))?;
    out.truncate(r.data_size_out as usize);
    Ok(RunResult {
        action: r.return_value,
        data: out,
        duration: r.duration,
    })
}

/// Attach the XDP program `prog` (called `program` in errors) to
/// `interface`: native (driver) mode first, generic (skb) mode when the
/// driver has no XDP support; `mode` forces one. The mode it got.
pub(crate) fn attach_xdp(
    prog: &mut Xdp<'_>,
    program: &'static str,
    interface: &str,
    mode: Option<XdpMode>,
) -> Result<XdpMode, XdpError> {
    let modes: &[XdpMode] = match mode {
        Some(ref m) => std::slice::from_ref(m),
        None => &[XdpMode::Driver, XdpMode::Skb],
    };
    let mut last = None;
    for &m in modes {
        match prog.attach(interface, m) {
            Ok(()) => return Ok(m),
            Err(e) => last = Some(e),
        }
    }
    Err(prog_err(program, "attach")(last.unwrap_or(
        Error::UnknownInterface {
            name: interface.to_owned(),
        },
    )))
}
