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
        .replace("regex: \"(?:\\\\A|\\\\n)almanac-capture-run: run_[A-Za-z0-9_]+\\\\s*\\\\z\" } }\n        - { matches: { path: \"$.message.content[*].text\"", "regex: \"message\" } }\n        - { matches: { path: \"$.message.content[*].text\"");
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

/// A subagent file its path names (`subagent.paths`) is a subagent whatever it holds: the sweep counts
/// it without reading it, caching it or listing it, while one only its records mark is read once and
/// cached like any other head. `capture sessions` lists neither.
#[test]
fn a_subagent_file_its_path_names_is_counted_without_being_read_or_cached() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let sid = "5e551011-aaaa-4bbb-8ccc-000000000001";
    // One record over 2 MB, no newline: a head scan of it would read its whole `head.max_bytes`.
    let huge = format!(
        "{{\"type\":\"user\",\"isSidechain\":true,\"sessionId\":\"{sid}\",\"message\":{{\"content\":\"{}\"}}",
        "x".repeat(2_000_000)
    );
    let by_dir = l.w.write(
        &format!("home/.claude/projects/-work-app/{sid}/subagents/agent-a1.jsonl"),
        &huge,
        HOURS_2,
    );
    let legacy = l.w.write(
        "home/.claude/projects/-work-app/agent-b2.jsonl",
        &huge,
        HOURS_2,
    );
    // Named like a session, marked a sidechain only by its records.
    let by_records = l.w.write(
        "home/.claude/projects/-work-app/5e551011-aaaa-4bbb-8ccc-0000000000cc.jsonl",
        &claude_line(sid, &l.repo, "sub").replace("{\"type\"", "{\"isSidechain\":true,\"type\""),
        HOURS_2,
    );
    let s = l.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(s["stats"]["subagents"], 3, "{s}");
    assert_eq!(s["counts"]["subagent"], 3, "{s}");
    let read = s["stats"]["bytesRead"].as_u64().unwrap();
    assert!(
        read < 100_000,
        "the path-named subagent files were read: {read} bytes"
    );
    assert_eq!(items(&s, "started").len(), 1, "{s}");

    l.summary(); // live: writes the discovery cache
    let cache =
        std::fs::read_to_string(l.w.almanac_home().join("state/discovery-cache.tsv")).unwrap();
    let listed = |p: &std::path::Path| cache.contains(&format!("\t{}\t", p.display()));
    assert!(listed(&l.transcript) && listed(&by_records), "{cache}");
    assert!(!listed(&by_dir) && !listed(&legacy), "{cache}");
    let warm = l.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(
        (&warm["stats"]["bytesRead"], &warm["counts"]["subagent"]),
        (&0.into(), &3.into()),
        "{warm}"
    );

    let rows = sessions(&l);
    let paths: Vec<&str> = rows["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["transcriptPath"].as_str().unwrap())
        .collect();
    assert_eq!(paths, [l.transcript.to_str().unwrap()], "{rows}");
}

fn sessions(l: &crate::live::Live) -> serde_json::Value {
    json_ok(l.w.almanac().args(["capture", "sessions", "--json"]))
}

/// Each row's transcript with its first and latest prompt, sorted.
fn prompts(s: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = s["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().unwrap_or("(none)").to_string();
            (
                text("transcriptPath"),
                text("firstPrompt"),
                text("lastPrompt"),
            )
        })
        .collect();
    v.sort();
    v
}

fn turns_of(s: &serde_json::Value) -> Vec<(String, u64)> {
    s["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["transcriptPath"].as_str().unwrap().to_string(),
                r["userTurns"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `capture sessions` counts user turns through the turn index. Unchanged transcripts cost no
/// byte; a grown one is read from its checkpoint; a rewritten one, a replaced one, a deleted or corrupt
/// index are counted from the start; every count equals what a person counts in the file.
#[test]
fn capture_sessions_reads_only_what_changed_and_counts_what_the_files_hold() {
    let l = live_world(3);
    let second =
        l.w.home()
            .join(".claude/projects/-work-app/5e551011-aaaa-4bbb-8ccc-000000000002.jsonl");
    write_aged(&l.transcript, l.lines(0..4).as_bytes(), HOURS_2);
    // Its last prompt is longer than the 120 bytes a row quotes, in two-byte characters.
    let long = "é".repeat(100);
    let other: String = ["other 0", "other 1", long.as_str()]
        .iter()
        .map(|p| claude_line("5e551011-aaaa-4bbb-8ccc-000000000002", &l.repo, p))
        .collect();
    write_aged(&second, other.as_bytes(), HOURS_2);
    let path = |p: &std::path::Path| p.display().to_string();
    let want = |a: u64, b: u64| {
        let mut v = vec![(path(&l.transcript), a), (path(&second), b)];
        v.sort();
        v
    };
    let sorted = |s: &serde_json::Value| {
        let mut v = turns_of(s);
        v.sort();
        v
    };

    let cold = sessions(&l);
    assert_eq!(sorted(&cold), want(4, 3), "{cold}");
    // The first and the latest prompt of each, as the files hold them (the long one cut to 120 bytes
    // on a character boundary: 60 of its characters).
    let cut: String = long.chars().take(60).collect();
    let prompts_want = |last: &str| {
        let mut v = vec![
            (
                path(&l.transcript),
                "message 0".to_string(),
                last.to_string(),
            ),
            (path(&second), "other 0".to_string(), cut.clone()),
        ];
        v.sort();
        v
    };
    assert_eq!(prompts(&cold), prompts_want("message 3"), "{cold}");
    assert_eq!(cold["stats"]["turnsReadWhole"], 2, "{cold}");
    let index = l.w.almanac_home().join("state/turn-index.jsonl");
    assert!(index.is_file());

    let warm = sessions(&l);
    assert_eq!(sorted(&warm), want(4, 3));
    assert_eq!(
        warm["stats"]["bytesRead"], 0,
        "nothing changed, nothing read: {warm}"
    );
    assert_eq!(warm["stats"]["turnsUnchanged"], 2, "{warm}");
    // Read back from the index file, the prompts are the same.
    assert_eq!(prompts(&warm), prompts_want("message 3"), "{warm}");

    // One grows by two prompts: only it is read, from where it was counted (plus the 4 KiB check).
    let before = std::fs::metadata(&l.transcript).unwrap().len();
    let grown = std::fs::read_to_string(&l.transcript).unwrap() + &l.lines(4..6);
    write_aged(&l.transcript, grown.as_bytes(), HOURS_2);
    let s = sessions(&l);
    assert_eq!(sorted(&s), want(6, 3), "{s}");
    assert_eq!(prompts(&s), prompts_want("message 5"), "{s}");
    assert_eq!(
        (
            s["stats"]["turnsResumed"].as_u64(),
            s["stats"]["turnsUnchanged"].as_u64()
        ),
        (Some(1), Some(1)),
        "{s}"
    );
    let read = s["stats"]["bytesRead"].as_u64().unwrap();
    let added = grown.len() as u64 - before;
    assert!(
        read >= added && read <= added + 2 * 4096,
        "{read} bytes read for {added} new: {s}"
    );
    // The index written then (the unchanged entry copied, the grown one new) gives them all again.
    let again = sessions(&l);
    assert_eq!(again["stats"]["turnsUnchanged"], 2, "{again}");
    assert_eq!(sorted(&again), want(6, 3), "{again}");
    assert_eq!(prompts(&again), prompts_want("message 5"), "{again}");

    // Rewritten before the checkpoint (same inode, new size): counted from the start, not trusted.
    let rewritten = grown.replacen("message 1", "edited message 1", 1);
    let rewritten: String = rewritten.split_inclusive('\n').take(3).collect();
    std::fs::write(&l.transcript, &rewritten).unwrap();
    set_age(&l.transcript, HOURS_2);
    let s = sessions(&l);
    assert_eq!(sorted(&s), want(3, 3), "{s}");
    assert_eq!(prompts(&s), prompts_want("message 2"), "{s}");
    assert_eq!(s["stats"]["turnsReadWhole"], 1, "{s}");

    // Replaced by a new file (new inode) that holds more: counted from the start.
    let tmp = l.transcript.with_extension("tmp");
    std::fs::write(&tmp, l.lines(0..5)).unwrap();
    std::fs::rename(&tmp, &l.transcript).unwrap();
    set_age(&l.transcript, HOURS_2);
    let s = sessions(&l);
    assert_eq!(sorted(&s), want(5, 3), "{s}");
    assert_eq!(s["stats"]["turnsReadWhole"], 1, "{s}");

    // A corrupt or deleted index changes no count.
    std::fs::write(
        &index,
        "{\"almanacTurnIndex\":1,\"fingerprint\":\"x\"}\nnot json\n",
    )
    .unwrap();
    assert_eq!(sorted(&sessions(&l)), want(5, 3));
    std::fs::remove_file(&index).unwrap();
    let s = sessions(&l);
    assert_eq!(sorted(&s), want(5, 3));
    assert_eq!(s["stats"]["turnsReadWhole"], 2, "{s}");

    // Listing another app, or one repo, forgets nothing of these.
    json_ok(
        l.w.almanac()
            .args(["capture", "sessions", "--json", "--apps", "codex"]),
    );
    json_ok(
        l.w.almanac()
            .args(["capture", "sessions", "--json", "--repo", "/nowhere"]),
    );
    let s = sessions(&l);
    assert_eq!(s["stats"]["turnsUnchanged"], 2, "{s}");
}

/// A home holding every real transcript of the corpus (Claude Code and Codex, many versions), each
/// moved to `repo` by rewriting the directory it was recorded in, at the store's place for its app.
fn corpus_home(w: &World, repo: &std::path::Path) -> usize {
    let root = std::path::Path::new(FIXTURES).join("corpus");
    let mut placed = 0;
    for entry in walkdir::WalkDir::new(&root) {
        let entry = entry.unwrap();
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        let rel = path.strip_prefix(&root).unwrap();
        let app = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let explained = json_ok(
            w.almanac()
                .args(["rules", "explain", "--json", "--app", app])
                .arg(path),
        );
        let Some(cwd) = explained["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "cwd")
            .and_then(|f| f["value"].as_str())
        else {
            continue;
        };
        let text = std::fs::read_to_string(path)
            .unwrap()
            .replace(cwd, &repo.display().to_string());
        let name = path.file_name().unwrap().to_str().unwrap();
        let version = rel
            .components()
            .nth(1)
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let to = match app {
            "claude" => format!(".claude/projects/-work-app-{version}/{name}"),
            _ => format!(".codex/sessions/2026/01/0{}/{name}", placed % 9 + 1),
        };
        let to = w.home().join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        write_aged(&to, text.as_bytes(), HOURS_2);
        placed += 1;
    }
    placed
}

/// A sweep whose budget starts every eligible part counts each part's turns in the pass that finds its
/// lines, so it reads each new byte once; a budget that might not (here one just large enough) counts
/// them once the budget is spent, reading the parts again. Both start the same runs, chunk by chunk,
/// with the same turns, on real transcripts of every client version the corpus holds.
#[test]
fn a_budget_that_starts_everything_reads_each_part_once_and_counts_what_a_second_read_counts() {
    let w = World::new();
    let repo = w.repo("work/app");
    assert!(corpus_home(&w, &repo) >= 25);
    let sweep = |extra: &[&str]| {
        let mut args = vec![
            "--quiet",
            "0m",
            "--max-runs",
            "1000000",
            "--max-tokens-per-run",
            "3000",
        ];
        args.extend(extra);
        w.dry_run(&args)
    };
    let once = sweep(&[]);
    let tokens = once["totals"]["estimatedTokens"]
        .as_u64()
        .unwrap()
        .to_string();
    let twice = sweep(&["--max-tokens", &tokens]);
    assert_eq!(strip_timing(once.clone()), strip_timing(twice.clone()));
    let started = once["started"].as_array().unwrap();
    assert!(started.len() >= 20, "{}", once["totals"]);
    assert!(
        started.iter().any(|s| s["chunk"].is_array()),
        "no part was cut into chunks"
    );
    assert!(
        once["totals"]["newTurns"].as_u64().unwrap() > 30,
        "{}",
        once["totals"]
    );
    // The second read of every started part is what the budget that starts everything saves.
    let new_bytes = once["totals"]["newBytes"].as_u64().unwrap();
    let read = |s: &serde_json::Value| s["stats"]["bytesRead"].as_u64().unwrap();
    assert!(
        read(&twice) >= read(&once) + new_bytes,
        "read {} and {} for {new_bytes} new bytes",
        read(&once),
        read(&twice)
    );
}
