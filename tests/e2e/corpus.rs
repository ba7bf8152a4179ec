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
