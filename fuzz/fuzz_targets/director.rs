//! Drive the director with an arbitrary sequence of control operations and
//! packets over a virtual clock. It must never panic, and after every step
//! the real servers' connection counters must agree with the connection
//! table (no counter ever drifts or goes negative).
#![no_main]
use libfuzzer_sys::fuzz_target;
use rvs_core::fuzzing::run_director_script;

fuzz_target!(|data: &[u8]| {
    run_director_script(data);
});
