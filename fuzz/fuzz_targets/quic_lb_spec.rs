//! The `--quic-lb` spec and `--quic-sid` parsers (rvs-core's model): any
//! text gives a value or an error, never a panic; an accepted spec is a
//! valid configuration whose `to_spec` parses back to it; an accepted
//! server ID prints as hex that parses back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvs_core::model::{QuicLbConfig, QuicServerId};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = QuicLbConfig::parse_spec(text) {
        assert!(c.validate().is_ok());
        assert_eq!(QuicLbConfig::parse_spec(&c.to_spec()), Ok(c));
        assert!(c.cid_len() <= 20);
    }
    if let Ok(id) = text.parse::<QuicServerId>() {
        assert!((1..=15).contains(&id.len()));
        assert_eq!(id.to_string().parse::<QuicServerId>(), Ok(id));
    }
    let _ = QuicLbConfig::parse_key(text);
});
