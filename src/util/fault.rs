//! Fault injection for crash-safety tests: debug builds abort at the point named by
//! `ALMANAC_FAULT=<point>`; release builds compile this to nothing.

#[cfg(debug_assertions)]
pub fn point(name: &str) {
    if std::env::var("ALMANAC_FAULT").is_ok_and(|v| v == name) {
        eprintln!("almanac: fault injected at {name}");
        std::process::abort();
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn point(_name: &str) {}
