#![no_main]
//! Bytes in: ledger parsing.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    almanac::fuzzing::ledger(data);
});
