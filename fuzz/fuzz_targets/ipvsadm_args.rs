//! The ipvsadm command-line parser must never panic: arbitrary bytes are
//! split into arguments at NUL bytes (as argv would be) and also parsed as
//! one `-R` line. Names are resolved offline so the fuzzer does no DNS.
//! Every error must carry ipvsadm's exit codes (2 or 255) and a message.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rvs_ipvsadm::names::OfflineNames;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let args: Vec<String> = text.split('\0').map(str::to_owned).collect();
    if let Err(e) = rvs_ipvsadm::parse_args_with("ipvsadm", args, &OfflineNames) {
        assert!(e.exit_code == 2 || e.exit_code == 255);
        assert!(!e.message.is_empty());
    }
    for line in text.split('\n') {
        if let Err(e) = rvs_ipvsadm::parse_restore_line_with("ipvsadm", line, &OfflineNames) {
            assert!(e.exit_code == 2 || e.exit_code == 255);
        }
    }
});
