//! The socket options and sends that socket2, nix and std do not wrap:
//! `TCP_INFO`, a few `setsockopt(2)` options VRRP needs, `AF_PACKET`
//! `sendto(2)`, tokio registration of an owned socket, and descriptor
//! passing (`SCM_RIGHTS`) for `rvsd --takeover`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use tokio::io::unix::AsyncFd;

/// `setsockopt(2)` with a plain C value.
fn setsockopt<T: Copy>(fd: BorrowedFd<'_>, level: i32, name: i32, value: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<T>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is an open socket for the borrow's lifetime; `value`
    // points to a live, initialised `T` of exactly `len` bytes that the
    // kernel only reads (copies) during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(value).cast::<libc::c_void>(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `IP_BIND_ADDRESS_NO_PORT` (Linux 4.2; not in the libc crate).
const IP_BIND_ADDRESS_NO_PORT: i32 = 24;

/// `IP_BIND_ADDRESS_NO_PORT`: a later `bind(addr, 0)` fixes only the
/// address and `connect(2)` picks the port, unique per 4-tuple, so one
/// local address gives a full port range toward every destination (rather
/// than one range shared by all, as bind-time port picking gives). The
/// proxy binds its connections to real servers from a local address pool
/// so. The option is at the IP level for IPv6 sockets too.
pub fn set_bind_address_no_port(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    setsockopt(
        fd,
        libc::IPPROTO_IP,
        IP_BIND_ADDRESS_NO_PORT,
        &libc::c_int::from(on),
    )
}

/// `IPV6_RECVPKTINFO`: receive each packet's destination address and
/// interface as ancillary data.
pub fn set_recv_pktinfo_v6(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    setsockopt(
        fd,
        libc::IPPROTO_IPV6,
        libc::IPV6_RECVPKTINFO,
        &libc::c_int::from(on),
    )
}

/// `IPV6_CHECKSUM` on a raw IPv6 socket: the offset of the checksum the
/// kernel fills and verifies, or `None` for none (the caller's).
pub fn set_checksum_v6(fd: BorrowedFd<'_>, offset: Option<u16>) -> io::Result<()> {
    let v: libc::c_int = offset.map_or(-1, libc::c_int::from);
    setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_CHECKSUM, &v)
}

/// `IP_MULTICAST_IF` by interface index (`struct ip_mreqn`), which socket2
/// only offers by address.
pub fn set_multicast_if_v4_index(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    let mreqn = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr { s_addr: 0 },
        imr_address: libc::in_addr { s_addr: 0 },
        imr_ifindex: libc::c_int::try_from(ifindex)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
    };
    setsockopt(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &mreqn)
}

/// `PACKET_QDISC_BYPASS` on an `AF_PACKET` socket: frames go straight to
/// the driver (traffic generators).
pub fn set_packet_qdisc_bypass(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    setsockopt(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_QDISC_BYPASS,
        &libc::c_int::from(on),
    )
}

/// Send one Ethernet `frame` on an `AF_PACKET` socket out of interface
/// `ifindex` (`sockaddr_ll` with EtherType `protocol` and destination
/// `dst`). Returns the bytes sent.
pub fn send_frame(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    protocol: u16,
    dst: [u8; 6],
    frame: &[u8],
) -> io::Result<usize> {
    let mut sll_addr = [0u8; 8];
    sll_addr[..6].copy_from_slice(&dst);
    let to = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: protocol.to_be(),
        sll_ifindex: i32::try_from(ifindex)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 6,
        sll_addr,
    };
    // SAFETY: the socket is open for the borrow; `frame` is a live buffer
    // of `frame.len()` bytes the kernel only reads; `to` is an initialised
    // `sockaddr_ll` and the length passed is its exact size.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            frame.as_ptr().cast::<libc::c_void>(),
            frame.len(),
            0,
            std::ptr::from_ref(&to).cast::<libc::sockaddr>(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    usize::try_from(sent).map_err(|_| io::Error::last_os_error())
}

/// An `AF_PACKET` raw socket bound to interface `ifindex` that only
/// sends (protocol 0: it receives nothing), for traffic generators.
pub fn packet_sender(ifindex: u32) -> io::Result<socket2::Socket> {
    let sock = socket2::Socket::new(
        socket2::Domain::PACKET,
        socket2::Type::RAW.cloexec(),
        Some(socket2::Protocol::from(0)),
    )?;
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex =
        i32::try_from(ifindex).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the socket is open; `sll` is an initialised sockaddr_ll and
    // the length passed is its exact size; bind only reads it.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&raw const sll).cast::<libc::sockaddr>(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// Reusable buffers for [`FrameBatch::send`]: many frames, one
/// `sendmmsg(2)`.
#[derive(Debug, Default)]
pub struct FrameBatch {
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl FrameBatch {
    /// Send `frames` on the connected or bound socket `fd` with one
    /// `sendmmsg(2)`: the number sent (the first ones), or the error of
    /// the first frame when none was sent.
    pub fn send(&mut self, fd: BorrowedFd<'_>, frames: &[&[u8]]) -> io::Result<usize> {
        self.iovs.clear();
        self.iovs.extend(frames.iter().map(|f| libc::iovec {
            // The kernel only reads through this pointer (sendmmsg).
            iov_base: f.as_ptr().cast_mut().cast::<libc::c_void>(),
            iov_len: f.len(),
        }));
        // SAFETY: mmsghdr is plain old data; all-zero is a valid value (no
        // name, no control data).
        let zero: libc::mmsghdr = unsafe { std::mem::zeroed() };
        self.msgs.clear();
        self.msgs.resize(frames.len(), zero);
        for (m, iov) in self.msgs.iter_mut().zip(self.iovs.iter_mut()) {
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        let n = u32::try_from(self.msgs.len()).unwrap_or(u32::MAX);
        // SAFETY: every mmsghdr points at one iovec of `self.iovs`, which
        // points into a frame of `frames`, borrowed (alive, unmoved) for
        // the whole call; the kernel writes only the `msg_len` fields.
        let r = unsafe { libc::sendmmsg(fd.as_raw_fd(), self.msgs.as_mut_ptr(), n, 0) };
        usize::try_from(r).map_err(|_| io::Error::last_os_error())
    }
}

/// Segments received and sent on a TCP socket (`tcpi_segs_in`,
/// `tcpi_segs_out`, Linux ≥ 4.2), or `None` when the kernel does not
/// report them (or `fd` is not a TCP socket).
pub fn tcp_segs(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    // SAFETY: `tcp_info` is a plain C struct of integers, so all-zero is a
    // valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the fd is open for the duration of the borrow; `info` and
    // `len` are valid, writable and describe the buffer's true size, and the
    // kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    // Older kernels return a shorter struct without the segment counters.
    let needed = std::mem::offset_of!(libc::tcp_info, tcpi_segs_in)
        .max(std::mem::offset_of!(libc::tcp_info, tcpi_segs_out))
        + 4;
    (rc == 0 && len as usize >= needed)
        .then_some((u64::from(info.tcpi_segs_in), u64::from(info.tcpi_segs_out)))
}

/// Register `sock` with the current tokio runtime's reactor (read and
/// write readiness). Must run inside a runtime.
pub fn async_socket(sock: socket2::Socket) -> io::Result<AsyncFd<socket2::Socket>> {
    // SAFETY: a `socket2::Socket` owns its open descriptor and closes it
    // only when dropped, which happens inside the `AsyncFd`'s drop; its
    // `as_raw_fd` always returns that same descriptor.
    unsafe { AsyncFd::register(sock) }.map_err(Into::into)
}

/// Most descriptors one `SCM_RIGHTS` message may carry (the kernel's
/// `SCM_MAX_FD` is 253): callers send more in several messages.
pub const MAX_FDS_PER_MESSAGE: usize = 250;

/// `sendmsg(2)` on a Unix stream socket: `bytes` with `fds` attached as
/// `SCM_RIGHTS` (at most [`MAX_FDS_PER_MESSAGE`]). The receiver gets its
/// own descriptors for the same open files; this process keeps its own.
/// Returns the bytes sent (fewer than `bytes.len()` on a full socket
/// buffer; the descriptors travel with the first byte). A non-blocking
/// socket answers `WouldBlock` when nothing could be sent.
pub fn send_with_fds(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<usize> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    if fds.len() > MAX_FDS_PER_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} descriptors in one message (at most {MAX_FDS_PER_MESSAGE})",
                fds.len()
            ),
        ));
    }
    let raw: Vec<std::os::fd::RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() {
        &[]
    } else {
        &[ControlMessage::ScmRights(&raw)]
    };
    let iov = [io::IoSlice::new(bytes)];
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
        .map_err(io::Error::from)
}

/// `recvmsg(2)` on a Unix stream socket: reads into `buf` and appends the
/// descriptors that came with the bytes (`SCM_RIGHTS`, received
/// close-on-exec) to `fds`. Returns the bytes read (0 at end of stream).
/// A message whose descriptors did not all fit is an error (the kernel
/// has closed the ones that did not).
pub fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<std::os::fd::OwnedFd>,
) -> io::Result<usize> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut space =
        vec![0u8; nix::sys::socket::cmsg_space::<[std::os::fd::RawFd; MAX_FDS_PER_MESSAGE]>()];
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let n = msg.bytes;
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for r in raw {
                // SAFETY: the kernel installed `r` in this process's fd table
                // by this very recvmsg call (SCM_RIGHTS); nothing else in the
                // process knows the number, so the OwnedFd is its only owner.
                fds.push(unsafe { OwnedFd::from_raw_fd(r) });
            }
        }
    }
    if truncated {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "descriptors were truncated in transit (MSG_CTRUNC)",
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn tcp_info_counts_segments() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        let (rx, tx) = tcp_segs(c.as_fd()).expect("kernel reports segments");
        assert!(tx >= 2, "SYN + data at least: {tx}");
        assert!(rx >= 1, "SYN-ACK at least: {rx}");
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(tcp_segs(u.as_fd()), None);
    }

    #[test]
    fn options_apply_to_sockets_of_the_right_kind() {
        let v6 = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::DGRAM, None).unwrap();
        set_recv_pktinfo_v6(v6.as_fd(), true).unwrap();
        let v4 = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        set_multicast_if_v4_index(v4.as_fd(), crate::iface::ifindex("lo").unwrap()).unwrap();
        assert!(set_recv_pktinfo_v6(v4.as_fd(), true).is_err());
    }

    /// Root only: frames sent on loopback come back on a capturing socket.
    #[test]
    fn frames_go_out_on_a_packet_socket() {
        let lo = crate::iface::ifindex("lo").unwrap();
        let tx = match packet_sender(lo) {
            Ok(s) => s,
            Err(e) => {
                rvs_testbed::skip_or_fail(
                    "frames_go_out_on_a_packet_socket",
                    format!("AF_PACKET needs CAP_NET_RAW ({e})"),
                );
                return;
            }
        };
        let mut frame = vec![0u8; 60];
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // local experimental
        let frames: Vec<&[u8]> = vec![&frame; 3];
        let mut batch = FrameBatch::default();
        assert_eq!(batch.send(tx.as_fd(), &frames).unwrap(), 3);
        assert_eq!(
            send_frame(tx.as_fd(), lo, 0x88b5, [0; 6], &frame).unwrap(),
            60
        );
    }

    #[test]
    fn sockets_register_with_tokio() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
            s.set_nonblocking(true).unwrap();
            let a = async_socket(s).unwrap();
            let _ready = a.writable().await.unwrap();
        });
    }

    #[test]
    fn descriptors_travel_with_their_bytes() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(
            send_with_fds(a.as_fd(), b"two", &[l.as_fd(), u.as_fd()]).unwrap(),
            3
        );
        assert_eq!(send_with_fds(a.as_fd(), b"none", &[]).unwrap(), 4);
        let mut fds = Vec::new();
        let mut buf = [0u8; 16];
        // The kernel stops a read after bytes that carried descriptors.
        assert_eq!(recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap(), 3);
        assert_eq!(&buf[..3], b"two");
        assert_eq!(fds.len(), 2);
        let got = socket2::Socket::from(fds.remove(0));
        assert_eq!(
            got.local_addr().unwrap().as_socket(),
            Some(l.local_addr().unwrap())
        );
        assert!(got.is_listener().unwrap());
        let got = socket2::Socket::from(fds.remove(0));
        assert_eq!(got.r#type().unwrap(), socket2::Type::DGRAM);
        assert_eq!(recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap(), 4);
        assert!(fds.is_empty());
        drop(a);
        assert_eq!(recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap(), 0);
        let too_many = vec![l.as_fd(); MAX_FDS_PER_MESSAGE + 1];
        let (c, _d) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(send_with_fds(c.as_fd(), b"x", &too_many).is_err());
    }
}
