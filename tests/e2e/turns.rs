//! Session turns read through the rules: `capture turns`, `capture sessions`, and `no-new-content`.

use crate::common::*;
use crate::live::{claude_line, live_world};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn turns_json(w: &World, path: &Path, extra: &[&str]) -> serde_json::Value {
    json_ok(
        w.almanac()
            .args(["capture", "turns", "--json"])
            .args(extra)
            .arg(path),
    )
}

fn place(w: &World, fixture_rel: &str, home_rel: &str) -> PathBuf {
    let p = w.home().join(home_rel);
    write_aged(&p, fixture(fixture_rel).as_bytes(), HOURS_2);
    p
}

fn users(v: &serde_json::Value) -> Vec<String> {
    v["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["user"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn real_transcripts_yield_the_user_prompt_for_both_apps() {
    let w = World::new();
    let cases = [
        ("real/claude/projects/-home-dev-proj-my-repo-x/11111111-2222-4333-8444-555555555555.jsonl", ".claude/projects/-p/11111111-2222-4333-8444-555555555555.jsonl", "Say hello"),
        ("real/claude/projects/-home-dev-proj-my-repo-x/11111111-2222-4333-8444-666666666666.jsonl", ".claude/projects/-p/11111111-2222-4333-8444-666666666666.jsonl", "Second run"),
        (
            "real/codex/sessions/2026/11/29/rollout-2026-11-29T16-30-04-01a22824-67fc-72a0-8696-7ffb0d4410c0.jsonl",
            ".codex/sessions/2026/11/29/rollout-2026-11-29T16-30-04-01a22824-67fc-72a0-8696-7ffb0d4410c0.jsonl",
            "Say hello",
        ),
    ];
    for (fx, home_rel, prompt) in cases {
        let p = place(&w, fx, home_rel);
        let v = turns_json(&w, &p, &[]);
        // Injected context (<environment_context>, system reminders, developer messages) is not a prompt.
        assert_eq!(users(&v), vec![prompt.to_string()], "{fx}: {v}");
        assert_eq!(v["userTurns"], 1);
        // Offline, the model never answered: no assistant turn, so the latest exchange is empty.
        let latest = turns_json(&w, &p, &["--latest"]);
        assert_eq!(latest["latest"], serde_json::json!({}), "{fx}");
    }
}

#[test]
fn tool_calls_are_named_for_claude_and_codex() {
    let w = World::new();
    let claude = place(
        &w,
        "synthetic/claude/projects/-home-dev-src-acme-api/7c1e2a90-3b4d-4f6a-9e21-5a8d0c3f1b77.jsonl",
        ".claude/projects/-a/7c1e2a90-3b4d-4f6a-9e21-5a8d0c3f1b77.jsonl",
    );
    let v = turns_json(&w, &claude, &[]);
    assert!(
        v["tools"].as_array().unwrap().contains(&"Agent".into()),
        "{v}"
    );
    let latest = turns_json(&w, &claude, &["--latest"]);
    assert!(
        latest["latest"]["assistant"]
            .as_str()
            .unwrap()
            .contains("REDIS_TIMEOUT_SECONDS"),
        "{latest}"
    );
    assert_eq!(latest["latest"]["tools"], serde_json::json!(["Agent"]));
    let legacy = place(
        &w,
        "synthetic/claude/projects/-home-dev-legacy-app/3f9a1c27-8e5b-4d60-a2f4-9b7c1e0d5a38.jsonl",
        ".claude/projects/-l/3f9a1c27-8e5b-4d60-a2f4-9b7c1e0d5a38.jsonl",
    );
    assert!(turns_json(&w, &legacy, &[])["tools"]
        .as_array()
        .unwrap()
        .contains(&"Task".into()));
    for (fx, name, tool) in [
        ("synthetic/codex/sessions/2026/03/14/rollout-2026-03-14T10-02-17-019ceb1a-7d42-7c11-a3b9-2f6e5d8c4a10.jsonl", "2026/03/14/rollout-2026-03-14T10-02-17-019ceb1a-7d42-7c11-a3b9-2f6e5d8c4a10.jsonl", "shell_command"),
        ("synthetic/codex/sessions/2025/08/21/rollout-2025-08-21T14-03-11-5b0e6c1d-2f4a-4b8e-9c7d-1a3e5f7b9d02.jsonl", "2025/08/21/rollout-2025-08-21T14-03-11-5b0e6c1d-2f4a-4b8e-9c7d-1a3e5f7b9d02.jsonl", "shell"),
    ] {
        let p = place(&w, fx, &format!(".codex/sessions/{name}"));
        let v = turns_json(&w, &p, &[]);
        assert!(v["tools"].as_array().unwrap().contains(&tool.into()), "{fx}: {v}");
        // Written twice (response_item and event_msg), the prompt is one turn.
        assert_eq!(v["userTurns"], 1, "{fx}: {v}");
    }
}

#[test]
fn a_subagent_rollout_skips_the_parent_history_it_copies() {
    let w = World::new();
    let p = place(
        &w,
        "synthetic/codex/sessions/2026/07/13/rollout-2026-07-13T22-21-37-019f624a-cc95-7c50-b9fa-1db381270b73.jsonl",
        ".codex/sessions/2026/07/13/rollout-2026-07-13T22-21-37-019f624a-cc95-7c50-b9fa-1db381270b73.jsonl",
    );
    let v = turns_json(&w, &p, &[]);
    let u = users(&v);
    assert!(
        !u.iter().any(|t| t.contains("spawn explorers")),
        "the parent's prompt is copied history: {u:?}"
    );
    assert!(u[0].starts_with("Audit app/billing"), "{u:?}");
}

#[test]
fn long_messages_are_cut_on_a_character_boundary_and_flagged() {
    let w = World::new();
    let repo = w.repo("r");
    let long = "é".repeat(5 * 1024) + "x"; // 10 KiB of two-byte characters, then one byte
    let answer = "ü".repeat(3000);
    let lines = format!(
        "{}{{\"type\":\"assistant\",\"sessionId\":\"s\",\"cwd\":\"{}\",\"message\":{{\"id\":\"m1\",\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"{answer}\"}}]}}}}\n",
        claude_line("s", &repo, &long),
        repo.display()
    );
    let p = w.write("home/.claude/projects/-r/s.jsonl", &lines, HOURS_2);
    let v = turns_json(&w, &p, &[]);
    let rec = &v["records"][0];
    let user = rec["user"].as_str().unwrap();
    assert!(user.len() <= 2048 && user.len() >= 2046, "{}", user.len());
    assert!(user.chars().all(|c| c == 'é'));
    let assistant = rec["assistant"].as_str().unwrap();
    assert!(assistant.len() <= 4096 && assistant.len() >= 4094);
    assert_eq!(rec["truncated"], serde_json::json!(["user", "assistant"]));
    let text = String::from_utf8(
        w.almanac()
            .args(["capture", "turns"])
            .arg(&p)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        text.contains("turn 1 (line 1") && text.contains("[cut]"),
        "{text}"
    );
}

#[test]
fn six_hundred_turns_keep_five_hundred_behind_one_marker() {
    let w = World::new();
    let repo = w.repo("r");
    let mut body = String::new();
    for i in 1..=600 {
        body.push_str(&claude_line("s", &repo, &format!("prompt {i}")));
        body.push_str(&format!(
            "{{\"type\":\"assistant\",\"message\":{{\"id\":\"m{i}\",\"content\":[{{\"type\":\"text\",\"text\":\"answer {i}\"}},{{\"type\":\"tool_use\",\"name\":\"Read\"}}]}}}}\n"
        ));
    }
    let p = w.write("home/.claude/projects/-r/s.jsonl", &body, HOURS_2);
    let v = turns_json(&w, &p, &[]);
    let records = v["records"].as_array().unwrap();
    let markers: Vec<_> = records.iter().filter(|r| r["kind"] == "overflow").collect();
    let turns: Vec<_> = records.iter().filter(|r| r["kind"] == "turn").collect();
    assert_eq!(turns.len(), 500);
    assert_eq!(markers.len(), 1);
    assert_eq!(markers[0]["dropped"], 100);
    assert_eq!(markers[0]["droppedTurns"], serde_json::json!([1, 100]));
    assert_eq!(turns[0]["user"], "prompt 101");
    assert_eq!(turns[499]["user"], "prompt 600");
    assert_eq!(v["userTurns"], 600);
    let latest = turns_json(&w, &p, &["--latest"]);
    assert_eq!(latest["latest"]["user"], "prompt 600");
    assert_eq!(latest["latest"]["assistant"], "answer 600");
    // --since-line: only the part after line 1198 (the last turn).
    let tail = turns_json(&w, &p, &["--since-line", "1198"]);
    assert_eq!(users(&tail), vec!["prompt 600".to_string()]);
    // A smaller bound.
    let small = turns_json(&w, &p, &["--max-turns", "150"]);
    let kinds: Vec<&str> = small["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == "turn").count(), 100);
    assert_eq!(small["records"][0]["dropped"], 500);
}

#[test]
fn appending_only_a_title_spends_no_run_and_keeps_the_cursor() {
    let l = live_world(3);
    let first = l.lines(0..3);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    let s = l.summary();
    let run1 = items(&s, "started")[0]["runId"]
        .as_str()
        .unwrap()
        .to_string();
    let p1 = l.prompt(&run1);
    assert!(p1.contains("The new part holds 3 user turns. First user prompt: \"message 0\". Last user prompt: \"message 2\"."), "{p1}");
    // Only a title (and a file-history snapshot) appended: no run, the cursor stays.
    let title = "{\"type\":\"ai-title\",\"aiTitle\":\"Fix the flaky test\",\"sessionId\":\"5e551011-aaaa-4bbb-8ccc-000000000001\"}\n{\"type\":\"file-history-snapshot\",\"messageId\":\"x\",\"snapshot\":{}}\n";
    write_aged(&l.transcript, format!("{first}{title}").as_bytes(), HOURS_2);
    let s = l.summary();
    let sk = find_by_path(&s, "skipped", &l.transcript).unwrap();
    assert_eq!(sk["reason"], "no-new-content");
    assert_eq!(l.calls().len(), 1);
    assert_eq!(l.entry()["lastCapturedLine"], 3);
    // A real prompt arrives: captured from the old cursor, title lines included.
    let more = l.lines(3..4);
    write_aged(
        &l.transcript,
        format!("{first}{title}{more}").as_bytes(),
        HOURS_2,
    );
    let s = l.summary();
    let st = items(&s, "started")[0];
    assert_eq!(
        (st["fromLine"].as_u64(), st["toLine"].as_u64()),
        (Some(4), Some(6))
    );
    assert!(l
        .prompt(st["runId"].as_str().unwrap())
        .contains("The new part holds 1 user turn. First user prompt: \"message 3\"."));
}

#[test]
fn sessions_are_listed_most_recent_first_and_filtered_by_age_and_repo() {
    let w = World::new();
    let a = w.repo("a");
    let b = w.repo("b");
    let mk = |name: &str, repo: &Path, age: Duration| {
        let id = format!("5e551011-aaaa-4bbb-8ccc-00000000000{name}");
        w.write(
            &format!("home/.claude/projects/-x/{id}.jsonl"),
            &format!(
                "{}{}",
                claude_line(&id, repo, "one"),
                claude_line(&id, repo, "two")
            ),
            age,
        )
    };
    mk("1", &a, Duration::from_secs(3 * 3600));
    mk("2", &a, Duration::from_secs(600));
    mk("3", &b, Duration::from_secs(60));
    mk("4", &a, Duration::from_secs(30 * 3600));
    let list = |args: &[&str]| -> Vec<String> {
        let v = json_ok(
            w.almanac()
                .args(["capture", "sessions", "--json"])
                .args(args),
        );
        v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["sessionId"].as_str().unwrap()[35..].to_string())
            .collect()
    };
    assert_eq!(list(&[]), vec!["3", "2", "1", "4"]);
    assert_eq!(list(&["--max-age", "2h"]), vec!["3", "2"]);
    assert_eq!(
        list(&["--max-age", "4h", "--repo", a.to_str().unwrap()]),
        vec!["2", "1"]
    );
    let out = w
        .almanac()
        .args(["capture", "sessions", "--json", "--max-age", "2h"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &v["sessions"][0];
    assert_eq!(first["userTurns"], 2);
    assert_eq!(first["status"], "not captured");
    assert_eq!(first["repoRoot"], b.display().to_string());
    let out = w
        .almanac()
        .args(["capture", "sessions", "--max-age", "5x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_third_app_gets_turns_from_yaml_alone() {
    let w = World::new();
    let repo = w.repo("r");
    let rules = w.root().join("rules");
    write_aged(
        &rules.join("acme.yaml"),
        b"id: acme\nstores:\n  - name: logs\n    roots: [ { default: [\"~/.acme\"] } ]\n    include: [\"*.jsonl\"]\nfields:\n  session_id: [ { value: \"$.conversation_id\" } ]\n  cwd: [ { value: \"$.workdir\" } ]\nturns:\n  user: [ { when: { equals: { path: \"$.role\", value: human } }, text: [\"$.body\"] } ]\n  assistant: [ { when: { equals: { path: \"$.role\", value: bot } }, text: [\"$.body\"] } ]\n  tools: [ { name: \"$.calls[*].tool\" } ]\n",
        HOURS_2,
    );
    let line = |role: &str, body: &str, calls: &str| {
        format!("{{\"conversation_id\":\"c1\",\"workdir\":\"{}\",\"role\":\"{role}\",\"body\":\"{body}\",\"calls\":[{calls}]}}\n", repo.display())
    };
    let p = w.write(
        "home/.acme/c1.jsonl",
        &format!(
            "{}{}{}",
            line("human", "deploy it", ""),
            line("bot", "deployed", "{\"tool\":\"kubectl\"}"),
            line("human", "thanks", "")
        ),
        HOURS_2,
    );
    let out = w
        .almanac()
        .args(["--rules-dir"])
        .arg(&rules)
        .args(["capture", "turns", "--json"])
        .arg(&p)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        users(&v),
        vec!["deploy it".to_string(), "thanks".to_string()]
    );
    assert_eq!(v["records"][0]["assistant"], "deployed");
    assert_eq!(v["records"][0]["tools"], serde_json::json!(["kubectl"]));
}
