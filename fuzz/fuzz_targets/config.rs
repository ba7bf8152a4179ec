#![no_main]
//! Text in: config.toml and duration parsing.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    almanac::fuzzing::config(data);
});
