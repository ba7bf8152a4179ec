//! The discovery cache and the cost of a sweep that finds nothing new (the numbers are measured by
//! scripts/bench.py; these tests pin the behaviour).

use crate::common::*;
use crate::live::{claude_line, live_world};

fn strip_timing(mut s: serde_json::Value) -> serde_json::Value {
    s["stats"] = serde_json::Value::Null;
    s
}

#[test]
fn an_unchanged_transcript_costs_no_read_and_the_cache_changes_no_result() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..4).as_bytes(), HOURS_2);
    // An unmapped session and a subagent: their verdicts are cached too.
    let other = l.w.root().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    l.w.write(
        "home/.claude/projects/-x/5e551011-aaaa-4bbb-8ccc-0000000000aa.jsonl",
        &claude_line("5e551011-aaaa-4bbb-8ccc-0000000000aa", &other, "hi"),
        HOURS_2,
    );
    l.w.write("home/.claude/projects/-work-app/5e551011-aaaa-4bbb-8ccc-000000000001/subagents/agent-1.jsonl", &claude_line("5e551011-aaaa-4bbb-8ccc-000000000001", &l.repo, "sub"), HOURS_2);
    l.summary(); // captures and writes the cache
    let cache = l.w.almanac_home().join("state/discovery-cache.tsv");
    assert!(cache.is_file());

    let warm = l.summary();
    assert_eq!(
        warm["stats"]["bytesRead"], 0,
        "nothing changed, nothing read: {warm}"
    );
    assert_eq!(warm["counts"]["unchanged"], 1);
    let dry = l.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(dry["stats"]["bytesRead"], 0);

    // Corrupt, then delete: same result, only more reading.
    std::fs::write(
        &cache,
        "# almanac discovery cache v1\nrules x\nclaude\tgarbage\n\u{0}\n",
    )
    .unwrap();
    let corrupt = l.w.dry_run(&["--quiet", "0m"]);
    assert!(corrupt["stats"]["bytesRead"].as_u64().unwrap() > 0);
    assert_eq!(strip_timing(corrupt), strip_timing(dry.clone()));
    std::fs::remove_file(&cache).unwrap();
    let cold = l.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(strip_timing(cold), strip_timing(dry.clone()));
    assert!(!cache.exists(), "a dry run does not write the cache");

    // A grown transcript is read again: only its new part after the verified prefix.
    l.summary();
    let before = std::fs::metadata(&l.transcript).unwrap().len();
    let grown = format!(
        "{}{}",
        std::fs::read_to_string(&l.transcript).unwrap(),
        l.lines(4..5)
    );
    write_aged(&l.transcript, grown.as_bytes(), HOURS_2);
    let s = l.w.dry_run(&["--quiet", "0m"]);
    let read = s["stats"]["bytesRead"].as_u64().unwrap();
    assert!(
        read >= grown.len() as u64 && read < 4 * grown.len() as u64 + 200_000,
        "read {read} for a {before}-byte prefix and one new line"
    );
    assert_eq!(items(&s, "started").len(), 1, "{s}");
}

#[test]
fn a_changed_rule_file_invalidates_cached_verdicts() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    l.summary();
    // The user now excludes everything that mentions "message": the cached verdict must not hide it.
    let rules = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/claude.yaml"))
        .unwrap()
        .replace("regex: \"almanac-capture-run: \" } }\n        - { matches: { path: \"$.message.content[*].text\"", "regex: \"message\" } }\n        - { matches: { path: \"$.message.content[*].text\"");
    std::fs::create_dir_all(l.w.almanac_home().join("rules")).unwrap();
    std::fs::write(l.w.almanac_home().join("rules/claude.yaml"), rules).unwrap();
    // The transcript is unchanged: only the rule changed, so only the fingerprint can expose it (a stale
    // cached verdict would report `unchanged`).
    let s = l.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(
        find_by_path(&s, "skipped", &l.transcript).unwrap()["reason"],
        "excluded-by-rule",
        "{s}"
    );
}

#[test]
fn a_current_cache_is_not_rewritten_and_a_deleted_transcript_leaves_it() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let gone = l.w.write(
        "home/.claude/projects/-work-app/5e551011-aaaa-4bbb-8ccc-0000000000bb.jsonl",
        &claude_line("5e551011-aaaa-4bbb-8ccc-0000000000bb", &l.repo, "hi"),
        HOURS_2,
    );
    l.summary();
    let cache = l.w.almanac_home().join("state/discovery-cache.tsv");
    let text = std::fs::read_to_string(&cache).unwrap();
    assert!(text.contains("0000000000bb"), "{text}");
    // Nothing changed: the cache file is left as it is (same inode: never replaced).
    let ino =
        |p: &std::path::Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let before = ino(&cache);
    let warm = l.summary();
    assert_eq!(warm["stats"]["bytesRead"], 0);
    assert_eq!(
        ino(&cache),
        before,
        "an up-to-date cache is not written again"
    );
    // A transcript is deleted: the cache is written without it.
    std::fs::remove_file(&gone).unwrap();
    l.summary();
    assert_ne!(ino(&cache), before);
    let text = std::fs::read_to_string(&cache).unwrap();
    assert!(!text.contains("0000000000bb"), "{text}");
    assert!(text.contains("000000000001"), "{text}");
}
