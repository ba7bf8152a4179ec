#![no_main]
//! Bytes in: the head extractor and turn reader of both built-in rule sets, as on a transcript file.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    almanac::fuzzing::head(data);
});
