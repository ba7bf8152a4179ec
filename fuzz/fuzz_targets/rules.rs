#![no_main]
//! YAML in: rule-set and policy loading (parse, schema, compile).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    almanac::fuzzing::rules(data);
});
