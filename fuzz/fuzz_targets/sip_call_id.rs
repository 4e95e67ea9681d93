//! The SIP Call-ID extractor must never panic and must return a slice of
//! its input that is non-empty, at most 255 bytes, and free of line breaks.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(v) = rvs_core::pe_sip::call_id(data) {
        assert!(!v.is_empty() && v.len() <= rvs_core::pe_sip::MAX_PE_DATA);
        assert!(!v.contains(&b'\r') && !v.contains(&b'\n'));
    }
});
