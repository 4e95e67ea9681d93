//! Fuzz the keepalived.conf reader: any bytes (lossy UTF-8) must produce a
//! configuration or a located error, never a panic; conversion to services
//! must not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvs_config::{LoadOptions, parse_str};

fuzz_target!(|data: &[u8]| {
    // The first byte picks `--strict` and a config id (`@a` lines), so the
    // keyword audit and the conditional lines are explored too.
    let (opts, data) = match data.split_first() {
        Some((&b, rest)) => (
            LoadOptions {
                strict: b & 1 == 1,
                config_ids: if b & 2 == 2 { vec!["a".into()] } else { Vec::new() },
                ..LoadOptions::default()
            },
            rest,
        ),
        None => (LoadOptions::default(), data),
    };
    let text = String::from_utf8_lossy(data);
    if let Ok(loaded) = parse_str("fuzz.conf", &text, &opts) {
        let _ = loaded.config.lvs_services();
        let _ = loaded.config.lvs_timeouts();
    }
});
