//! [`Error`]: the one error of loading, attaching and map access.

use std::io;

/// Why a BPF object, program or map operation failed. The messages are
/// the ones aya gives for the same failures (callers and tests read them),
/// and the variants callers act on (an absent key, a syscall's errno) are
/// typed; anything else aya reports is carried as its message chain in
/// [`Error::Other`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is not in the map (a lookup or a delete).
    #[error("key not found")]
    KeyNotFound,
    /// An array index past the map's end.
    #[error("the index is {index} but `max_entries` is {max_entries}")]
    OutOfBounds {
        /// The index asked for.
        index: u32,
        /// The array's length.
        max_entries: u32,
    },
    /// The Rust key type's size is not the map's key size.
    #[error("invalid key size {size}, expected {expected}")]
    InvalidKeySize {
        /// The Rust type's size.
        size: usize,
        /// The map's.
        expected: usize,
    },
    /// The Rust value type's size is not the map's value size.
    #[error("invalid value size {size}, expected {expected}")]
    InvalidValueSize {
        /// The Rust type's size.
        size: usize,
        /// The map's.
        expected: usize,
    },
    /// A system call failed (its errno in `source`).
    #[error("`{call}` failed")]
    Syscall {
        /// Which call (`bpf_map_update_elem`, `bpf_link_create`, …).
        call: &'static str,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The verifier refused a program.
    #[error("the BPF_PROG_LOAD syscall returned {source}. Verifier output: {verifier_log}")]
    Verifier {
        /// The syscall's error.
        #[source]
        source: io::Error,
        /// The verifier's log.
        verifier_log: String,
    },
    /// No network interface of that name.
    #[error("unknown network interface {name}")]
    UnknownInterface {
        /// The name given.
        name: String,
    },
    /// The kernel attached a program without a BPF link (before Linux
    /// 5.7 for cgroups, 5.9 for XDP), so it cannot outlive its process;
    /// the loader's message.
    #[error("{0}")]
    NoLink(String),
    /// The program is not of the type asked for.
    #[error("unexpected program type")]
    UnexpectedProgramType,
    /// Anything else the loader refused (ELF parse, BTF, relocation, map
    /// creation, pinning), with its message and causes.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl Error {
    /// The errno of a failed system call (a syscall or the verifier's
    /// load), if that is what failed.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Syscall { source, .. } | Error::Verifier { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The key was absent: [`Error::KeyNotFound`] or the kernel's `ENOENT`
    /// (a delete of an absent key, as the kernel reports it).
    pub fn is_absent(&self) -> bool {
        matches!(self, Error::KeyNotFound) || self.raw_os_error() == Some(libc::ENOENT)
    }

    pub(crate) fn syscall(call: &'static str) -> impl Fn(io::Error) -> Error {
        move |source| Error::Syscall { call, source }
    }
}

impl From<aya::maps::MapError> for Error {
    fn from(e: aya::maps::MapError) -> Self {
        use aya::maps::MapError as M;
        match e {
            M::KeyNotFound => Error::KeyNotFound,
            M::OutOfBounds { index, max_entries } => Error::OutOfBounds { index, max_entries },
            M::InvalidKeySize { size, expected } => Error::InvalidKeySize { size, expected },
            M::InvalidValueSize { size, expected } => Error::InvalidValueSize { size, expected },
            M::SyscallError(s) => Error::Syscall {
                call: s.call,
                source: s.io_error,
            },
            e => Error::Other(Box::new(e)),
        }
    }
}

impl From<aya::programs::ProgramError> for Error {
    fn from(e: aya::programs::ProgramError) -> Self {
        use aya::programs::ProgramError as P;
        match e {
            P::SyscallError(s) => Error::Syscall {
                call: s.call,
                source: s.io_error,
            },
            P::LoadError {
                io_error,
                verifier_log,
            } => Error::Verifier {
                source: io_error,
                verifier_log: verifier_log.to_string(),
            },
            P::UnknownInterface { name } => Error::UnknownInterface { name },
            P::UnexpectedProgramType => Error::UnexpectedProgramType,
            P::MapError(m) => m.into(),
            e => Error::Other(Box::new(e)),
        }
    }
}

impl From<aya::EbpfError> for Error {
    fn from(e: aya::EbpfError) -> Self {
        Error::Other(Box::new(e))
    }
}

impl From<aya::pin::PinError> for Error {
    fn from(e: aya::pin::PinError) -> Self {
        Error::Other(Box::new(e))
    }
}

impl From<aya::programs::links::LinkError> for Error {
    fn from(e: aya::programs::links::LinkError) -> Self {
        Error::Other(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aya_errors_keep_their_messages_and_errnos() {
        let e = Error::from(aya::maps::MapError::KeyNotFound);
        assert!(matches!(e, Error::KeyNotFound));
        let e = Error::from(aya::programs::ProgramError::SyscallError(
            aya::sys::SyscallError {
                call: "bpf_link_create",
                io_error: io::Error::from_raw_os_error(libc::EINVAL),
            },
        ));
        assert_eq!(e.to_string(), "`bpf_link_create` failed");
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert!(!e.is_absent());
        let e = Error::from(aya::programs::ProgramError::UnknownInterface {
            name: "nope0".into(),
        });
        assert_eq!(e.to_string(), "unknown network interface nope0");
        // Anything else keeps aya's message.
        let e = Error::from(aya::programs::ProgramError::AlreadyAttached);
        assert_eq!(e.to_string(), "the program was already attached");
        assert_eq!(e.raw_os_error(), None);
    }
}
