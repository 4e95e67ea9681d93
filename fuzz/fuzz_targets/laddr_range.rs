//! `LocalAddrRange::parse` (ipvsadm `-z`, keepalived `local_address_group`)
//! must never panic, and a range it accepts must be consistent: it prints
//! back to text that parses to itself, holds its ends, and its last
//! address is `nth(len - 1)`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rvs_core::model::{LocalAddrRange, MAX_LADDR_RANGE};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(r) = LocalAddrRange::parse(text) else {
        return;
    };
    assert!(r.len() >= 1 && r.len() <= MAX_LADDR_RANGE);
    assert!(r.contains(r.first) && r.contains(r.last));
    assert_eq!(r.nth(r.len() - 1), Some(r.last));
    assert_eq!(r.nth(r.len()), None);
    assert_eq!(LocalAddrRange::parse(&r.to_string()), Ok(r));
});
