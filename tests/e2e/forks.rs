//! Issue 18, never capture the same conversation twice: a Claude Code fork (real, `--fork-session`)
//! starts after the records it copied from a session already captured; the old Claude resume shape
//! (first records under the old session id) is captured under its own id from its first new record; a
//! Codex fork (real, `codex exec fork`) is captured from line 1 with its parent named in the prompt.

use crate::common::*;
use crate::live::{live_world, Live};
use crate::make_fixtures::MOCK_DIR;
use std::path::PathBuf;

const ORIGINAL: &str = "22222222-3333-4444-8555-666666666666";
const FORK: &str = "2d3b0fa0-6f35-40b8-93db-f926107f123d";
const CLAUDE_DIR: &str = "claude/projects/-home-dev-proj-my-repo-x";
const CODEX_DIR: &str = "codex/sessions/2026/11/30";
const CODEX_PARENT: &str = "01a22b7b-287d-72b0-be7c-86738f6e1c4f";
const CODEX_FORK: &str = "01a22b7b-2beb-7001-9648-9d4d9a1a6bfa";

/// A real fixture with its cwd moved into the live world's repo.
fn real(l: &Live, rel: &str) -> String {
    fixture(&format!("{MOCK_DIR}/{rel}")).replace(REAL_CWD, &l.repo.display().to_string())
}

fn claude_path(l: &Live, sid: &str) -> PathBuf {
    l.w.home()
        .join(format!(".claude/projects/-work-app/{sid}.jsonl"))
}

fn entry(l: &Live, key: &str) -> serde_json::Value {
    l.ledger()["entries"][key].clone()
}

fn started_for<'a>(s: &'a serde_json::Value, sid: &str) -> Vec<&'a serde_json::Value> {
    items(s, "started")
        .into_iter()
        .filter(|i| i["sessionId"] == sid)
        .collect()
}

/// The original session captured by a live sweep, with its record ids remembered.
fn original_captured(l: &Live) {
    let original = real(l, &format!("{CLAUDE_DIR}/{ORIGINAL}.jsonl"));
    write_aged(&claude_path(l, ORIGINAL), original.as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(started_for(&s, ORIGINAL).len(), 1, "{s}");
    let e = entry(l, &format!("claude:{ORIGINAL}"));
    assert_eq!(e["status"], "done", "{e}");
    assert_eq!(e["lastCapturedLine"], 37, "{e}");
    assert_eq!(
        e["firstRecordId"], "b60accd3-828b-419d-b42b-a3607f3a2c11",
        "{e}"
    );
    assert_eq!(
        e["lastRecordId"], "7795ad1a-756d-462d-9a5a-fd956ecd1a68",
        "{e}"
    );
}

#[test]
fn a_claude_fork_after_its_original_was_captured_starts_after_the_copied_records() {
    let l = live_world(3);
    original_captured(&l);
    // The real `--fork-session` file: lines 1-21 copy the original's records (same uuids), line 22 is
    // the new prompt.
    let fork = real(&l, &format!("{CLAUDE_DIR}/{FORK}.jsonl"));
    write_aged(&claude_path(&l, FORK), fork.as_bytes(), HOURS_2);
    let s = l.summary();
    let runs = started_for(&s, FORK);
    assert_eq!(runs.len(), 1, "{s}");
    assert_eq!(runs[0]["fromLine"], 22, "{}", runs[0]);
    assert_eq!(runs[0]["toLine"], 31, "{}", runs[0]);
    assert!(started_for(&s, ORIGINAL).is_empty(), "{s}");
    let prompt = l.prompt(runs[0]["runId"].as_str().unwrap());
    assert!(
        prompt.contains(&format!(
            "Lines 1 to 21 of this transcript are copied from session {ORIGINAL}"
        )),
        "{prompt}"
    );
    assert!(prompt.contains("Third prompt, forked"), "{prompt}");
    assert!(
        !prompt.contains("First user prompt: \"What is in src/main.rs?\""),
        "{prompt}"
    );
    let e = entry(&l, &format!("claude:{FORK}"));
    assert_eq!(e["status"], "done", "{e}");
    assert_eq!(e["lastCapturedLine"], 31, "{e}");
}

/// Older Claude Code resumed into a new file named for the new session whose first records still carry
/// the old sessionId (copied with their uuids); later records carry the new one.
fn old_resume_shape(l: &Live, new_sid: &str) -> String {
    let mut out = real(l, &format!("{CLAUDE_DIR}/{ORIGINAL}.jsonl"));
    for (i, text) in ["Resumed in an old client", "And a second new prompt"]
        .iter()
        .enumerate()
    {
        out.push_str(&format!(
            "{{\"type\":\"user\",\"uuid\":\"99999999-0000-4000-8000-00000000000{i}\",\"sessionId\":\"{new_sid}\",\"cwd\":\"{}\",\"timestamp\":\"2026-11-30T09:00:0{i}.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"{text}\"}}}}\n",
            l.repo.display()
        ));
    }
    out
}

#[test]
fn the_old_claude_resume_shape_is_captured_under_its_own_id_from_its_first_new_record() {
    let l = live_world(3);
    original_captured(&l);
    let new_sid = "33333333-4444-4555-8666-777777777777";
    let resumed = old_resume_shape(&l, new_sid);
    write_aged(&claude_path(&l, new_sid), resumed.as_bytes(), HOURS_2);
    let s = l.summary();
    let dup: Vec<_> = items(&s, "skipped")
        .into_iter()
        .filter(|i| i["reason"] == "duplicate-session")
        .collect();
    assert!(dup.is_empty(), "{s}");
    let runs = started_for(&s, new_sid);
    assert_eq!(runs.len(), 1, "{s}");
    // The original's last captured record is line 34 of it, copied as line 34 here.
    assert_eq!(runs[0]["fromLine"], 35, "{}", runs[0]);
    assert_eq!(runs[0]["toLine"], 39, "{}", runs[0]);
    let prompt = l.prompt(runs[0]["runId"].as_str().unwrap());
    assert!(prompt.contains("Resumed in an old client"), "{prompt}");
    assert!(
        prompt.contains(&format!("copied from session {ORIGINAL}")),
        "{prompt}"
    );
    // The next sweep: nothing new, never a duplicate.
    let s = l.summary();
    assert!(items(&s, "started").is_empty(), "{s}");
    assert!(
        !s.to_string().contains("duplicate-session"),
        "never reported as a duplicate: {s}"
    );
}

#[test]
fn a_codex_fork_is_captured_from_line_1_with_its_parent_named_in_the_prompt() {
    let l = live_world(3);
    let dir = l.w.home().join(".codex/sessions/2026/11/30");
    for sid in [CODEX_PARENT, CODEX_FORK] {
        let name = std::fs::read_dir(
            std::path::Path::new(FIXTURES)
                .join(MOCK_DIR)
                .join(CODEX_DIR),
        )
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(&format!("-{sid}.jsonl")))
        .unwrap();
        let text = real(&l, &format!("{CODEX_DIR}/{name}"));
        write_aged(&dir.join(&name), text.as_bytes(), HOURS_2);
    }
    let s = l.summary();
    let runs = started_for(&s, CODEX_FORK);
    assert_eq!(runs.len(), 1, "{s}");
    assert_eq!(runs[0]["fromLine"], 1, "{}", runs[0]);
    let prompt = l.prompt(runs[0]["runId"].as_str().unwrap());
    assert!(
        prompt.contains(&format!("forked from session {CODEX_PARENT}")),
        "{prompt}"
    );
    assert!(
        prompt.contains(&format!("rollout-2026-11-30T08-03-41-{CODEX_PARENT}.jsonl")),
        "the parent rollout is named: {prompt}"
    );
    assert!(prompt.contains("record 29"), "the branch point: {prompt}");
}
