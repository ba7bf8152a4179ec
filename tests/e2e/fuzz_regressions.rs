//! Every input saved under tests/fuzz_regressions/<target>/ (fuzzer crashes once fixed, and seeds worth
//! keeping) is replayed through the same code the fuzz target runs (see FUZZING.md).

use std::path::Path;

fn replay(target: &str, f: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let data = std::fs::read(&p).unwrap();
        let ok = std::panic::catch_unwind(|| f(&data));
        assert!(ok.is_ok(), "{} panics again", p.display());
        n += 1;
    }
    assert!(n > 0, "no inputs in {}", dir.display());
}

#[test]
fn head_inputs() {
    replay("head", almanac::fuzzing::head);
}

#[test]
fn rule_inputs() {
    replay("rules", almanac::fuzzing::rules);
}

#[test]
fn ledger_inputs() {
    replay("ledger", almanac::fuzzing::ledger);
}

#[test]
fn config_inputs() {
    replay("config", almanac::fuzzing::config);
}
