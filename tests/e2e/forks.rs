//! Never capture the same conversation twice: a Claude Code fork (real, `--fork-session`)
//! starts after the records it copied from a session already captured; the old Claude resume shape
//! (first records under the old session id) is captured under its own id from its first new record; a
//! Codex fork (real, `codex exec fork`) is captured from line 1 with its parent named in the prompt; a
//! rewrite before the cursor resumes after the last captured record while that record is still there.

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

/// The original's lines as a person numbers them (1-based), rewritten by `edit`.
fn rewritten(l: &Live, edit: impl Fn(usize, &str) -> Option<String>) -> String {
    let original = real(l, &format!("{CLAUDE_DIR}/{ORIGINAL}.jsonl"));
    original
        .lines()
        .enumerate()
        .filter_map(|(i, line)| edit(i + 1, line))
        .map(|line| line + "\n")
        .collect()
}

const LAST_CAPTURED: &str = "7795ad1a-756d-462d-9a5a-fd956ecd1a68";

fn new_prompt(l: &Live, uuid: &str, text: &str) -> String {
    format!(
        "{{\"type\":\"user\",\"uuid\":\"{uuid}\",\"sessionId\":\"{ORIGINAL}\",\"cwd\":\"{}\",\"timestamp\":\"2026-11-30T10:00:00.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"{text}\"}}}}\n",
        l.repo.display()
    )
}

#[test]
fn an_in_place_rewrite_before_the_cursor_with_ids_intact_resumes_after_the_last_captured_id() {
    let l = live_world(3);
    original_captured(&l);
    let path = claude_path(&l, ORIGINAL);
    // A client compacts the file in place: the 38 KB api-request-shape record (line 14) is dropped and
    // an attachment (line 4) is edited, uuids kept; then the user types a new prompt. The file is now
    // shorter than the 37 lines captured, and the last captured record (line 34) is line 33.
    let mut text = rewritten(&l, |n, line| match n {
        14 => None,
        4 => Some(line.replacen(
            "\"type\":\"attachment\"",
            "\"type\":\"attachment\",\"edited\":true",
            1,
        )),
        _ => Some(line.to_string()),
    });
    let new_uuid = "aaaaaaaa-0000-4000-8000-000000000001";
    text.push_str(&new_prompt(&l, new_uuid, "A prompt after the rewrite"));
    assert!(
        (text.len() as u64)
            < entry(&l, &format!("claude:{ORIGINAL}"))["lastCapturedSize"]
                .as_u64()
                .unwrap()
    );
    write_aged(&path, text.as_bytes(), HOURS_2);
    let s = l.summary();
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
    let runs = started_for(&s, ORIGINAL);
    assert_eq!(runs.len(), 1, "{s}");
    assert_eq!(
        runs[0]["fromLine"], 34,
        "resumes after line 33: {}",
        runs[0]
    );
    assert_eq!(runs[0]["toLine"], 37, "{}", runs[0]);
    let rec = items(&s, "recovered");
    assert_eq!(rec.len(), 1, "{s}");
    assert_eq!(rec[0]["reason"], "recovered-prefix");
    let detail = rec[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains(LAST_CAPTURED) && detail.contains("line 33"),
        "{detail}"
    );
    assert_eq!(s["counts"]["recovered-prefix"], 1, "{s}");
    let prompt = l.prompt(runs[0]["runId"].as_str().unwrap());
    assert!(prompt.contains("Focus on line 34 onward"), "{prompt}");
    assert!(
        prompt.contains("rewritten before the part already captured"),
        "{prompt}"
    );
    assert!(prompt.contains("A prompt after the rewrite"), "{prompt}");
    let e = entry(&l, &format!("claude:{ORIGINAL}"));
    assert_eq!(e["status"], "done", "{e}");
    assert_eq!(e["lastCapturedLine"], 37, "{e}");
    assert_eq!(e["lastCapturedSize"], text.len() as u64, "{e}");
    assert_eq!(e["lastRecordId"], new_uuid, "{e}");
    // The next sweep: the new prefix matches, nothing to recover or capture.
    let s = l.summary();
    assert!(items(&s, "started").is_empty(), "{s}");
    assert!(items(&s, "recovered").is_empty(), "{s}");
    assert_eq!(s["counts"]["unchanged"], 1, "{s}");

    // An edit with nothing new after it: no run, the cursor follows the record, reported once. (An
    // edit that keeps the size is not looked for: an unchanged size is `unchanged` without a read.)
    let edited = text.replacen(
        "What is in src/main.rs?",
        "What is in src/main.rs, again?",
        1,
    );
    write_aged(&path, edited.as_bytes(), HOURS_2);
    let s = l.summary();
    assert!(items(&s, "started").is_empty(), "{s}");
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
    assert_eq!(items(&s, "recovered").len(), 1, "{s}");
    assert_eq!(
        l.calls().len(),
        2,
        "two runs in all: the original and the new prompt"
    );
    let s = l.summary();
    assert!(items(&s, "recovered").is_empty(), "{s}");
    assert_eq!(s["counts"]["unchanged"], 1, "{s}");
}

#[test]
fn a_rewrite_that_lost_the_last_captured_record_is_a_prefix_mismatch() {
    let l = live_world(3);
    original_captured(&l);
    // Line 34 (the last captured record) is gone and line 4 is edited; a new prompt follows.
    let mut text = rewritten(&l, |n, line| match n {
        34 => None,
        4 => Some(line.replacen(
            "\"type\":\"attachment\"",
            "\"type\":\"attachment\",\"edited\":true",
            1,
        )),
        _ => Some(line.to_string()),
    });
    text.push_str(&new_prompt(
        &l,
        "aaaaaaaa-0000-4000-8000-000000000002",
        "After the loss",
    ));
    write_aged(&claude_path(&l, ORIGINAL), text.as_bytes(), HOURS_2);
    let s = l.summary();
    assert!(started_for(&s, ORIGINAL).is_empty(), "{s}");
    assert!(items(&s, "recovered").is_empty(), "{s}");
    let att = items(&s, "needsAttention");
    assert_eq!(att.len(), 1, "{s}");
    assert_eq!(att[0]["reason"], "prefix-mismatch");
    let detail = att[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("({LAST_CAPTURED}) is gone")),
        "{detail}"
    );
    assert!(detail.contains("capture reset"), "{detail}");
    let e = entry(&l, &format!("claude:{ORIGINAL}"));
    assert_eq!(e["status"], "needs_attention", "{e}");
    assert_eq!(e["lastCapturedLine"], 37, "the cursor is kept: {e}");
    assert_eq!(l.calls().len(), 1, "no run on the rewritten transcript");
}

#[test]
fn a_fork_seen_before_its_first_prompt_remembers_the_copied_record_and_captures_only_its_own_lines()
{
    let l = live_world(3);
    original_captured(&l);
    let fork = real(&l, &format!("{CLAUDE_DIR}/{FORK}.jsonl"));
    // The sweep runs while the fork holds only the 21 records it copied.
    let copied: String = fork.split_inclusive('\n').take(21).collect();
    write_aged(&claude_path(&l, FORK), copied.as_bytes(), HOURS_2);
    let s = l.summary();
    assert!(started_for(&s, FORK).is_empty(), "{s}");
    let e = entry(&l, &format!("claude:{FORK}"));
    assert_eq!(e["lastCapturedLine"], 21, "{e}");
    assert_eq!(e["lastRecordId"], LAST_CAPTURED, "{e}");
    // Then its own prompt arrives: only that is captured.
    write_aged(&claude_path(&l, FORK), fork.as_bytes(), HOURS_2);
    let s = l.summary();
    let runs = started_for(&s, FORK);
    assert_eq!(runs.len(), 1, "{s}");
    assert_eq!(
        (runs[0]["fromLine"].as_u64(), runs[0]["toLine"].as_u64()),
        (Some(22), Some(31))
    );
}
