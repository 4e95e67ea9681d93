//! Long-lived TCP streams checked byte for byte: the content ([`Pattern`],
//! shared with failover.rs) and an echo stream at a bounded rate
//! ([`echo_stream`]) that says how far it got, how long it stalled and
//! why it ended.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A stream's content: a pseudo-random block repeated, each chunk starting
/// with its offset (so a chunk repeated or out of place shows).
pub struct Pattern {
    block: Vec<u8>,
    chunk: usize,
}

impl Pattern {
    /// A `block`-byte block from `seed` (xorshift), cut into `chunk`-byte
    /// chunks (`chunk` divides `block`, at least 8).
    pub fn new(block: usize, chunk: usize, seed: u64) -> Self {
        assert!(
            chunk >= 8 && block.is_multiple_of(chunk),
            "chunk {chunk} of block {block}"
        );
        let mut x = seed | 1;
        let block = (0..block)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        Pattern { block, chunk }
    }

    /// Chunk `k` (at offset `k * chunk`).
    pub fn chunk(&self, k: u64) -> Vec<u8> {
        let off = k * self.chunk as u64;
        let at = (off as usize) % self.block.len();
        let mut c = self.block[at..at + self.chunk].to_vec();
        c[..8].copy_from_slice(&off.to_be_bytes());
        c
    }

    /// Whether `data`, read at stream offset `off`, is the pattern there;
    /// `Err` with the offset of the first differing byte.
    pub fn check(&self, off: u64, data: &[u8]) -> Result<(), u64> {
        let mut i = 0;
        while i < data.len() {
            let at = off + i as u64;
            let k = at / self.chunk as u64;
            let want = self.chunk(k);
            let within = (at % self.chunk as u64) as usize;
            let len = (self.chunk - within).min(data.len() - i);
            if let Some(j) = (0..len).find(|&j| data[i + j] != want[within + j]) {
                return Err(at + j as u64);
            }
            i += len;
        }
        Ok(())
    }
}

/// What the test can watch of a running echo stream.
#[derive(Default)]
pub struct Progress {
    /// Bytes written so far.
    pub written: AtomicU64,
    /// Bytes echoed back identical, in order, so far.
    pub good: AtomicU64,
    /// The longest time between two reads since the test last took it
    /// (`swap(0)`), in milliseconds.
    pub gap_ms: AtomicU64,
    /// Set when the stream failed (reset, mismatch, stall, early EOF).
    pub failed: AtomicBool,
}

/// How an echo stream ended.
#[derive(Debug)]
pub struct Outcome {
    /// Bytes written.
    pub written: u64,
    /// Bytes echoed back identical, in order.
    pub good: u64,
    /// The longest time between two reads over the whole stream.
    pub longest_gap: Duration,
    /// The first error (a reset, a mismatch, a stall, an early EOF).
    pub error: Option<String>,
}

/// Write a `chunk`-byte chunk of `pattern` every `period` on `s` until
/// `stop`, then half-close; read the echo back and check it, each read
/// waiting at most `stall`. The echo must end exactly at what was written.
pub fn echo_stream(
    s: TcpStream,
    pattern: Arc<Pattern>,
    period: Duration,
    stall: Duration,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> std::thread::JoinHandle<Outcome> {
    std::thread::spawn(move || {
        let fail = |e: String, p: &Progress| {
            p.failed.store(true, Ordering::Relaxed);
            Some(e)
        };
        let mut w = match s.try_clone() {
            Ok(w) => w,
            Err(e) => {
                progress.failed.store(true, Ordering::Relaxed);
                return Outcome {
                    written: 0,
                    good: 0,
                    longest_gap: Duration::ZERO,
                    error: Some(format!("clone: {e}")),
                };
            }
        };
        let _ = s.set_read_timeout(Some(stall));
        let (p2, pr2) = (pattern.clone(), progress.clone());
        let writer = std::thread::spawn(move || -> Result<u64, String> {
            let t0 = Instant::now();
            let mut k = 0u64;
            let mut wrote = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let c = p2.chunk(k);
                w.write_all(&c)
                    .map_err(|e| format!("write at {wrote}: {e}"))?;
                wrote += c.len() as u64;
                pr2.written.store(wrote, Ordering::Relaxed);
                k += 1;
                let due = t0 + period * u32::try_from(k).unwrap_or(u32::MAX);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            w.shutdown(Shutdown::Write).map_err(|e| e.to_string())?;
            Ok(wrote)
        });
        let mut r = s;
        let mut buf = vec![0u8; 64 << 10];
        let (mut good, mut longest, mut last) = (0u64, Duration::ZERO, Instant::now());
        let mut error = None;
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    error = fail(format!("read after {good} bytes: {e}"), &progress);
                    break;
                }
            };
            let now = Instant::now();
            let gap = now - last;
            longest = longest.max(gap);
            progress
                .gap_ms
                .fetch_max(gap.as_millis() as u64, Ordering::Relaxed);
            last = now;
            if let Err(at) = pattern.check(good, &buf[..n]) {
                error = fail(format!("bytes differ at offset {at}"), &progress);
                break;
            }
            good += n as u64;
            progress.good.store(good, Ordering::Relaxed);
        }
        // A failed read leaves the writer blocked at most until the peer
        // resets; shut the socket so it ends.
        if error.is_some() {
            let _ = r.shutdown(Shutdown::Both);
        }
        let written = match writer.join() {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                if error.is_none() {
                    error = fail(e, &progress);
                }
                progress.written.load(Ordering::Relaxed)
            }
            Err(_) => {
                if error.is_none() {
                    error = fail("writer panicked".into(), &progress);
                }
                progress.written.load(Ordering::Relaxed)
            }
        };
        if error.is_none() && good != written {
            error = fail(format!("EOF after {good} of {written} bytes"), &progress);
        }
        Outcome {
            written,
            good,
            longest_gap: longest,
            error,
        }
    })
}

#[test]
fn a_pattern_checks_what_it_wrote_and_finds_a_changed_byte() {
    let p = Pattern::new(1 << 12, 256, 7);
    let data: Vec<u8> = (0..40).flat_map(|k| p.chunk(k)).collect();
    assert_eq!(p.check(0, &data), Ok(()));
    assert_eq!(p.check(300, &data[300..1000]), Ok(()));
    let mut bad = data.clone();
    bad[777] ^= 1;
    assert_eq!(p.check(0, &bad), Err(777));
    // A chunk out of place shows by its offset.
    assert!(p.check(256, &data[..256]).is_err());
}
