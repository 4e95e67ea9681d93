//! The tiny servers of the beds, once: a TCP accept loop and a UDP answer
//! loop on a thread of their own, stopped (and joined) on drop, and the
//! echo/stream server's side of a connection (a greeting that names the
//! server, then the client's bytes echoed back until EOF).
//!
//! The sockets are bound by the caller (inside a namespace when it needs
//! one: [`crate::Host::run`]); the loops themselves run anywhere.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A thread that runs until the stop flag it is given is set: by
/// [`Worker::finish`] (which returns what the thread returned) or on drop
/// (also when the test fails), which joins it.
pub struct Worker<T> {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<T>>,
}

/// A server thread ([`Server::tcp`], [`Server::udp`]), stopped and joined
/// on drop.
pub type Server = Worker<()>;

impl<T: Send + 'static> Worker<T> {
    /// Run `work` on a thread of its own; it is to return once its flag
    /// is set.
    pub fn spawn(work: impl FnOnce(&AtomicBool) -> T + Send + 'static) -> Worker<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        Worker {
            stop,
            thread: Some(std::thread::spawn(move || work(&flag))),
        }
    }

    /// Set the flag and wait for the thread: what it returned (panics when
    /// the thread panicked).
    pub fn finish(mut self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        let t = self.thread.take().expect("a worker runs until finished");
        t.join().expect("worker thread")
    }
}

impl Server {
    /// Accept on `listener` (made non-blocking here) until stopped; each
    /// connection, with its peer's address, goes to `serve` on a thread of
    /// its own.
    pub fn tcp(
        listener: TcpListener,
        serve: impl Fn(TcpStream, SocketAddr) + Send + Sync + 'static,
    ) -> Server {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = accept_loop(listener, stop.clone(), serve);
        Worker {
            stop,
            thread: Some(thread),
        }
    }

    /// Answer datagrams on `sock` until stopped: `answer(payload, sender)`,
    /// when it gives one, is sent back to the sender.
    pub fn udp(
        sock: UdpSocket,
        answer: impl Fn(&[u8], SocketAddr) -> Option<Vec<u8>> + Send + 'static,
    ) -> Server {
        // The read timeout is what lets the loop see the stop flag.
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("udp read timeout");
        Worker::spawn(move |stop| {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf)
                    && let Some(reply) = answer(&buf[..n], from)
                {
                    let _ = sock.send_to(&reply, from);
                }
            }
        })
    }
}

impl<T> Drop for Worker<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accept on `listener` (made non-blocking here) until `stop` is set, on a
/// thread of its own; each connection, with its peer's address, goes to
/// `serve` on a thread of its own. For a server whose stop flag the caller
/// shares; otherwise [`Server::tcp`].
pub fn accept_loop(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    serve: impl Fn(TcpStream, SocketAddr) + Send + Sync + 'static,
) -> JoinHandle<()> {
    listener.set_nonblocking(true).expect("nonblocking");
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, peer)) => {
                    let serve = serve.clone();
                    std::thread::spawn(move || serve(s, peer));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    })
}

/// The echo/stream server's side of connection `s`: `greeting`, then every
/// byte the client sends echoed back, until EOF, an error, or `idle` without
/// input.
pub fn echo(mut s: TcpStream, greeting: &str, idle: Duration) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(idle));
    if s.write_all(greeting.as_bytes()).is_err() {
        return;
    }
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 || s.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}
