//! The bodies of the fuzz targets (`fuzz/`), kept in the library so `cargo test` replays every saved
//! input (`tests/fuzz_regressions/<target>/`) through exactly the same code.

use std::sync::OnceLock;

fn catalog() -> &'static crate::rules::Catalog {
    static C: OnceLock<crate::rules::Catalog> = OnceLock::new();
    C.get_or_init(|| crate::rules::load(&[]).expect("built-in rules load"))
}

/// A transcript's bytes through both built-in rule sets: head fields, subagent and exclusion verdicts,
/// turns, the capture_since baseline and the cursor scan.
pub fn head(data: &[u8]) {
    let cat = catalog();
    for rule in &cat.sets {
        let _ = crate::discover::head::scan_head(
            rule,
            "rollout-2026-01-01T00-00-00-x.jsonl",
            Some((std::path::Path::new("/nonexistent/p/x.jsonl"), "p/x.jsonl")),
            data,
        );
        if let Some(t) = &rule.turns {
            if let Ok(turns) =
                crate::turns::extract(rule, t, data, 1, 0, &crate::turns::Options::default())
            {
                let _ = crate::turns::summarize(&turns);
                let _ = crate::turns::latest_exchange(&turns);
            }
        }
        let since = chrono::DateTime::parse_from_rfc3339("2026-05-11T11:00:00Z")
            .expect("constant")
            .with_timezone(&chrono::Utc);
        let _ = crate::ledger::cursor::baseline(data, since, |v| rule.record_time(v));
    }
    let cursor = data.len() as u64 / 2;
    let _ = crate::ledger::cursor::scan(data, cursor);
}

pub fn rules(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::rules::check_source(text, false);
        let _ = crate::rules::check_source(text, true);
    }
}

pub fn ledger(data: &[u8]) {
    if let Ok(l) = serde_json::from_slice::<crate::ledger::Ledger>(data) {
        // What a sweep does with a parsed ledger: serialise it back.
        let _ = serde_json::to_vec_pretty(&l);
    }
}

pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::config::parse(text, std::path::Path::new("config.toml"));
        let _ = crate::util::duration::parse_duration(text);
        let _ = crate::util::duration::parse_size(text);
    }
}
