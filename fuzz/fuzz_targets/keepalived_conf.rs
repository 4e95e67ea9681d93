//! Fuzz the keepalived.conf reader: any bytes (lossy UTF-8) must produce a
//! configuration or a located error, never a panic; conversion to services
//! must not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvs_config::{LoadOptions, parse_str};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(loaded) = parse_str("fuzz.conf", &text, &LoadOptions::default()) {
        let _ = loaded.config.lvs_services();
        let _ = loaded.config.lvs_timeouts();
    }
});
