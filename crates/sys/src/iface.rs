//! Interface names and indexes: the one `if_nametoindex(3)` of rvs.

use std::ffi::{CStr, CString};
use std::io;

/// The index of interface `name` in the calling thread's network
/// namespace. `InvalidInput` for a name that cannot be one (empty, too
/// long, with a NUL); `NotFound` naming the interface when it is missing.
pub fn ifindex(name: &str) -> io::Result<u32> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name {name:?}"),
        ));
    }
    let c = CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name {name:?}"),
        )
    })?;
    // SAFETY: `c` is a NUL-terminated string that lives across the call;
    // if_nametoindex only reads it.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("interface {name:?}: {e}"),
        ));
    }
    Ok(index)
}

/// The name of interface `index`; `NotFound` when there is none.
pub fn ifname(index: u32) -> io::Result<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` is IF_NAMESIZE bytes, the size if_indextoname writes
    // at most (the name and its NUL).
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("interface index {index}: {e}"),
        ));
    }
    // SAFETY: on success `buf` holds a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Ok(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_round_trips() {
        let i = ifindex("lo").unwrap();
        assert!(i > 0);
        assert_eq!(ifname(i).unwrap(), "lo");
    }

    #[test]
    fn bad_and_missing_names() {
        assert_eq!(ifindex("").unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            ifindex("a\0b").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            ifindex("0123456789abcdef").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let e = ifindex("rvs-no-such0").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("rvs-no-such0"));
        assert_eq!(
            ifname(u32::MAX).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
