//! The real-transcript corpus: every file in `tests/fixtures/corpus/expected.yaml` yields the
//! session id, cwd, subagent verdict, prompt lines and latest prompt line that a person reading it sees.
//! Expectations come from reading the files; a field marked `known_bug` is reported, not failed.

use crate::common::*;
use std::collections::BTreeSet;
use std::path::Path;

fn run(w: &World, args: &[&str], app: &str, path: &Path) -> serde_json::Value {
    json_ok(w.almanac().args(args).args(["--app", app]).arg(path))
}

#[test]
fn real_transcript_corpus_matches_expected_yaml() {
    let w = World::new();
    let expected: serde_json::Value =
        serde_yaml::from_str(&fixture("corpus/expected.yaml")).expect("expected.yaml parses");
    let mut mismatches = Vec::new();
    let mut known = Vec::new();
    let mut versions: [BTreeSet<String>; 2] = Default::default();
    let mut files = 0;
    let mut indexed = Vec::new();
    for (rel, exp) in expected.as_object().unwrap() {
        let app = exp["app"].as_str().unwrap();
        let path = Path::new(FIXTURES).join("corpus").join(rel);
        assert!(path.is_file(), "{rel} is missing");
        files += 1;
        versions[usize::from(app == "codex")].insert(exp["version"].as_str().unwrap().to_string());
        let ex = run(&w, &["rules", "explain", "--json"], app, &path);
        let turns = run(&w, &["capture", "turns", "--json"], app, &path);
        let prompt_lines: Vec<serde_json::Value> = turns["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["user"].is_string())
            .map(|r| r["line"].clone())
            .collect();
        let got = [
            ("session_id", ex["sessionId"].clone()),
            ("cwd", ex["cwd"].clone()),
            (
                "subagent",
                serde_json::Value::Bool(!ex["subagent"].is_null()),
            ),
            // The latest prompt is the last turn that has one (`--latest` is the last *answered*
            // exchange, `{}` when the agent has not answered yet, so it is not this field).
            ("latest", prompt_lines.last().cloned().unwrap_or_default()),
            ("prompts", serde_json::Value::Array(prompt_lines)),
        ];
        // `capture sessions` counts through the turn index (a counts-only read): the same prompts.
        let stored = store_copy(&w, app, rel, &path);
        indexed.push((
            rel.clone(),
            stored,
            prompt_lines_len(&turns),
            latest_text(&turns),
        ));
        // Where the prompt's text is in question (a client's blocks around what was typed), the latest
        // prompt's text as a person reads it.
        if let Some(want) = exp.get("latest_text") {
            let got = turns["records"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .find_map(|r| r["user"].as_str());
            if got != want.as_str() {
                mismatches.push(format!("{rel}: latest_text: expected {want}, got {got:?}"));
            }
        }
        let known_bug = exp.get("known_bug");
        for (name, got) in got {
            if exp[name] != got {
                let line = format!("{rel}: {name}: expected {}, got {got}", exp[name]);
                match known_bug.and_then(|k| k.get(name)) {
                    Some(why) => known.push(format!("{line} (known bug: {why})")),
                    None => mismatches.push(line),
                }
            }
        }
    }
    // One `capture sessions` over every file, placed where its app keeps it.
    let listed = json_ok(
        w.almanac()
            .args(["capture", "sessions", "--json", "--apps"])
            .arg("claude,codex,copilot,qwen,droid"),
    );
    let by_path: std::collections::HashMap<String, &serde_json::Value> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["transcriptPath"].as_str().unwrap().to_string(), s))
        .collect();
    let mut compared = 0;
    for (rel, stored, count, latest) in &indexed {
        // A subagent's file is no root session: `capture sessions` does not list it.
        let Some(s) = by_path.get(&stored.display().to_string()) else {
            continue;
        };
        compared += 1;
        if s["userTurns"] != serde_json::json!(count) || s["lastPrompt"] != *latest {
            mismatches.push(format!(
                "{rel}: capture sessions says {} prompts, latest {}; capture turns {count}, latest {latest}",
                s["userTurns"], s["lastPrompt"]
            ));
        }
    }
    assert!(
        compared + 6 >= files,
        "capture sessions listed {compared} of {files} files"
    );
    for k in &known {
        eprintln!("KNOWN BUG {k}");
    }
    for m in &mismatches {
        eprintln!("MISMATCH {m}");
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(files >= 25, "the corpus holds {files} files, fewer than 25");
    assert!(
        versions[0].len() >= 4,
        "Claude Code versions: {:?}",
        versions[0]
    );
    // Four Codex versions: 0.77.0 (public), 0.104.0, 0.140.0 and 0.171.0 (made here).
    assert!(versions[1].len() >= 4, "Codex versions: {:?}", versions[1]);
}

fn prompt_lines_len(turns: &serde_json::Value) -> usize {
    let records = turns["records"].as_array().unwrap();
    records.iter().filter(|r| r["user"].is_string()).count()
}

/// The latest prompt's text as `capture sessions` shows it (cut to its checkpoint length).
fn latest_text(turns: &serde_json::Value) -> serde_json::Value {
    let records = turns["records"].as_array().unwrap();
    match records.iter().rev().find_map(|r| r["user"].as_str()) {
        Some(t) => serde_json::Value::String(cut_like_index(t)),
        None => serde_json::Value::Null,
    }
}

/// `capture sessions` keeps a prompt's first 120 bytes (at a char boundary).
fn cut_like_index(t: &str) -> String {
    let mut end = t.len().min(120);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    t[..end].to_string()
}

/// A copy of corpus file `rel` where `app` keeps its transcripts under the world's home, each in a
/// directory of its own (names repeat across versions).
fn store_copy(w: &World, app: &str, rel: &str, path: &Path) -> std::path::PathBuf {
    let slot = rel.replace(['/', '.'], "_");
    let name = path.file_name().unwrap();
    let dir = match app {
        "claude" => w.home().join(".claude/projects").join(&slot),
        "codex" => w.home().join(".codex/sessions/2026/01").join(&slot),
        // Copilot names the session by its directory; qwen keeps chats under a project's slug.
        "copilot" => w
            .home()
            .join(".copilot/session-state")
            .join(path.parent().unwrap().file_name().unwrap()),
        "qwen" => w.home().join(".qwen/projects").join(&slot).join("chats"),
        "droid" => w.home().join(".factory/sessions").join(&slot),
        other => panic!("no store layout for {other}"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    let to = dir.join(name);
    std::fs::copy(path, &to).unwrap();
    to
}
