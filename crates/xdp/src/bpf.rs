//! Loading an embedded BPF object and naming what failed, in one place for
//! the director's loader, the decapsulator, the TOA reader and writer and
//! the TOA insertion fixture: each error says which object, program or map
//! (an operator's first question), and a build without clang says so.

use aya::maps::{Map, MapError};
use aya::programs::{Program, ProgramError, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};

use crate::XdpError;

/// The compiled object `$file` in OUT_DIR (built by build.rs), aligned for
/// aya, as a `Result<&'static [u8], XdpError>`: [`XdpError::NoBpf`] in a
/// build without clang (`rvs_no_bpf`).
macro_rules! embedded_object {
    ($file:literal) => {{
        #[cfg(not(rvs_no_bpf))]
        let bytes: Result<&'static [u8], $crate::XdpError> = Ok(aya::include_bytes_aligned!(
            concat!(env!("OUT_DIR"), "/", $file)
        ));
        #[cfg(rvs_no_bpf)]
        let bytes: Result<&'static [u8], $crate::XdpError> = Err($crate::XdpError::NoBpf);
        bytes
    }};
}
pub(crate) use embedded_object;

/// Load `bytes` (the object called `object` in errors) with `loader`.
pub(crate) fn load(
    object: &'static str,
    loader: &mut EbpfLoader,
    bytes: &[u8],
) -> Result<Ebpf, XdpError> {
    loader.load(bytes).map_err(|e| XdpError::Load {
        object,
        source: Box::new(e),
    })
}

/// The error of an operation on map `map`.
pub(crate) fn map_err(map: &'static str) -> impl Fn(MapError) -> XdpError {
    move |e| XdpError::Map {
        map,
        source: Box::new(e),
    }
}

/// The error of doing `what` with program `program`.
pub(crate) fn prog_err(
    program: &'static str,
    what: &'static str,
) -> impl Fn(ProgramError) -> XdpError {
    move |e| XdpError::Program {
        program,
        what,
        source: Box::new(e),
    }
}

/// Program `name` of `ebpf` as its type `P` (`Xdp`, `SockOps`, …); `what`
/// names the type for the error ("not an XDP program").
pub(crate) fn program_mut<'a, P>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
    what: &'static str,
) -> Result<&'a mut P, XdpError>
where
    &'a mut P: TryFrom<&'a mut Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(XdpError::Missing {
            kind: "program",
            name,
        })?
        .try_into()
        .map_err(prog_err(name, what))
}

/// Map `name` of `ebpf`.
pub(crate) fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Map, XdpError> {
    ebpf.map_mut(name)
        .ok_or(XdpError::Missing { kind: "map", name })
}

/// Attach the XDP program `prog` (called `program` in errors) to
/// `interface`: native (driver) mode first, generic (skb) mode when the
/// driver has no XDP support; `mode` forces one. The mode it got.
pub(crate) fn attach_xdp(
    prog: &mut Xdp,
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
            Ok(_) => return Ok(m),
            Err(e) => last = Some(e),
        }
    }
    Err(prog_err(program, "attach")(
        last.unwrap_or(ProgramError::AlreadyLoaded),
    ))
}
