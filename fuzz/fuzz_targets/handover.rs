//! The answer to `rvsd --takeover`'s handover request (a JSON line that
//! describes the descriptors sent with it) must never panic the new daemon:
//! any bytes with any descriptor count give a result, and an accepted one
//! describes exactly that many sockets.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rvs_control::protocol::parse_handover;

fuzz_target!(|data: &[u8]| {
    let (n, line) = match data.split_first() {
        Some((n, rest)) => (usize::from(*n % 8), rest),
        None => (0, data),
    };
    if let Ok(h) = parse_handover(line, n) {
        assert_eq!(h.sockets.len(), n);
    }
});
