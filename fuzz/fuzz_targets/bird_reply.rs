//! The BGP daemon watch's parsers of what BIRD's control socket and FRR's
//! vtysh say must never panic: the BIRD reply splitter, `show protocols`,
//! the route count, FRR's `show bgp summary json`. Cross-checks: a split
//! reply ends with its final line (the only line whose code ends a reply)
//! and every line's code is below the error codes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rvs_control::bgp::{bird_count, bird_protocols, bird_reply, frr_summary};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(lines) = bird_reply(&text) {
        assert!(!lines.is_empty());
        assert!(lines.iter().all(|l| l.code < 8000));
        let _ = bird_protocols(&lines);
        let _ = bird_count(&lines);
    }
    let _ = frr_summary(&text);
});
