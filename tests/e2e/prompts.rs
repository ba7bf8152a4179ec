//! Which records are user prompts, and the no-new-content check. Expectations come from reading
//! the fixtures: the line numbers below are the records a person typed as a prompt.

use crate::common::*;
use crate::live::{claude_line, live_world};
use std::path::Path;

const SHOP: &str =
    "synthetic/claude/projects/-home-dev-shop/9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d.jsonl";
const INLINE_SIDECHAIN: &str =
    "synthetic/claude/projects/-home-dev-legacy-app/2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182.jsonl";
const CODEX_DESKTOP: &str = "synthetic/codex/sessions/2026/02/20/rollout-2026-02-20T10-00-00-019a0b1c-2d3e-7f40-8a51-6b7c8d9e0f12.jsonl";
const CODEX_EXEC: &str = "real/codex/sessions/2026/11/29/rollout-2026-11-29T16-30-04-01a22824-67fc-72a0-8696-7ffb0d4410c0.jsonl";

/// `capture turns --app APP --json` on a fixture read where it lies (outside any store).
pub fn turns_of(app: &str, rel: &str) -> serde_json::Value {
    let w = World::new();
    json_ok(
        w.almanac()
            .args(["capture", "turns", "--json", "--app", app])
            .arg(Path::new(FIXTURES).join(rel)),
    )
}

/// (line, prompt) of each turn that has a prompt.
pub fn prompts(v: &serde_json::Value) -> Vec<(u64, String)> {
    v["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| Some((r["line"].as_u64()?, r["user"].as_str()?.to_string())))
        .collect()
}

fn lines(v: &serde_json::Value) -> Vec<u64> {
    prompts(v).into_iter().map(|(l, _)| l).collect()
}

#[test]
fn claude_interrupts_local_commands_and_notifications_are_not_prompts() {
    let v = turns_of("claude", SHOP);
    // 4: the prompt (its queue-operation enqueue on line 2 is the same prompt); 9: typed after an
    // interrupt; 18: /review, a command that expands into a prompt; 21: typed while the agent was busy,
    // written only as a queue-operation enqueue and taken into the running turn (`remove`, 22). Not
    // prompts: interrupt markers (8, 11), the local-command caveat (12, 15), /model and /cost and their
    // output (13-14, 16-17), the /review expansion (19, isMeta), a queued and a written
    // <task-notification> (24, 25), bash mode and its output (28, 29).
    assert_eq!(lines(&v), [4, 9, 18, 21], "{v}");
    let p = prompts(&v);
    assert_eq!(p[0].1, "add a discount field to the cart");
    assert!(p[2].1.contains("<command-name>/review</command-name>"));
    assert_eq!(p[3].1, "also clamp it to 0..100");
    assert_eq!(v["userTurns"], 4);
    // The assistant text after the notification is kept (in the last turn).
    assert!(v["records"][3]["assistant"]
        .as_str()
        .unwrap()
        .contains("Tests pass."));
}

#[test]
fn a_claude_1_0_sidechain_inside_the_main_file_is_not_a_prompt() {
    let v = turns_of("claude", INLINE_SIDECHAIN);
    // Line 4 is the Task subagent's prompt (isSidechain: true), 5-7 its work.
    assert_eq!(lines(&v), [2, 10], "{v}");
    assert_eq!(v["tools"], serde_json::json!(["Task"]));
    // A subagent's own file, every record a sidechain, is read whole.
    for sub in [
        "synthetic/claude/projects/-home-dev-legacy-app/agent-4e7b19c2.jsonl",
        "synthetic/claude/projects/-home-dev-src-acme-api/7c1e2a90-3b4d-4f6a-9e21-5a8d0c3f1b77/subagents/agent-a3f9c2d17b8e4051.jsonl",
    ] {
        assert_eq!(lines(&turns_of("claude", sub)), [1], "{sub}");
    }
}

#[test]
fn codex_agents_md_skills_and_image_twins_are_not_extra_prompts() {
    let v = turns_of("codex", CODEX_DESKTOP);
    // 3 and 18: the AGENTS.md block (again after compaction); 4: environment context; 14: a skill body;
    // 6, 12, 16: the event_msg twins of 5, 11 (an image prompt) and 15.
    assert_eq!(lines(&v), [5, 11, 15], "{v}");
    assert_eq!(prompts(&v)[1].1, "this is what I see in the checkout");
    assert_eq!(v["userTurns"], 3);
}

#[test]
fn exit_appended_after_a_capture_starts_no_run() {
    let l = live_world(3);
    let first = l.lines(0..3);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    // The session is closed with /exit: caveat, command, "Goodbye!".
    let sid = "5e551011-aaaa-4bbb-8ccc-000000000001";
    let repo = l.repo.display().to_string();
    let tail = fixture("synthetic/claude/projects/-home-dev-shop/exit-tail.jsonl.part")
        .replace("9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d", sid)
        .replace("/home/dev/shop", &repo);
    write_aged(&l.transcript, format!("{first}{tail}").as_bytes(), HOURS_2);
    let s = l.summary();
    let sk = find_by_path(&s, "skipped", &l.transcript).unwrap();
    assert_eq!(sk["reason"], "no-new-content", "{s}");
    assert_eq!(l.calls().len(), 1);
    assert_eq!(l.entry()["lastCapturedLine"], 3);
}

/// Claude Code 2.1.232 writes a bare `/compact` user record (`"content": "/compact"`) before the
/// compaction (shape as read in a real session; this record is written here, synthetic). A local
/// command: mid-session it is no prompt, and as the new part's last record it starts no run.
#[test]
fn a_bare_compact_user_record_is_no_prompt_and_starts_no_run() {
    let l = live_world(3);
    let first = l.lines(0..3);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    assert_eq!(items(&l.summary(), "started").len(), 1);
    let sid = "5e551011-aaaa-4bbb-8ccc-000000000001";
    let compact = claude_line(sid, &l.repo, "/compact");
    let blocks = compact.replace(
        "\"content\":\"/compact\"",
        "\"content\":[{\"type\":\"text\",\"text\":\"/compact focus on the parser\"}]",
    );
    assert_ne!(compact, blocks);
    write_aged(
        &l.transcript,
        format!("{first}{compact}{blocks}").as_bytes(),
        HOURS_2,
    );
    let s = l.summary();
    let sk = find_by_path(&s, "skipped", &l.transcript).unwrap();
    assert_eq!(sk["reason"], "no-new-content", "{s}");
    assert_eq!(l.calls().len(), 1);
    // Mid-session, between prompts: the prompt after it is the latest, and the only new one.
    let after = claude_line(sid, &l.repo, "now fix the parser");
    write_aged(
        &l.transcript,
        format!("{first}{compact}{blocks}{after}").as_bytes(),
        HOURS_2,
    );
    let v = json_ok(
        l.w.almanac()
            .args(["capture", "turns", "--json", "--app", "claude"])
            .arg(&l.transcript),
    );
    let typed: Vec<String> = prompts(&v).into_iter().map(|(_, t)| t).collect();
    assert!(!typed.iter().any(|t| t.contains("/compact")), "{typed:?}");
    assert_eq!(typed.len(), 4, "{typed:?}");
    assert_eq!(typed.last().map(String::as_str), Some("now fix the parser"));
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    assert_eq!(s["totals"]["newTurns"], 1, "{s}");
}

/// `/exit` typed while the agent is busy: Claude Code 2.1.42 queues it as bare text, then removes it
/// (the records of a real session, `corpus/claude/2.1.42/e8811ad6-…`, lines 978 and 983). A local
/// command, not a prompt: it starts no run.
#[test]
fn exit_queued_while_the_agent_is_busy_starts_no_run() {
    let l = live_world(3);
    let first = l.lines(0..3);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    assert_eq!(items(&l.summary(), "started").len(), 1);
    let sid = "5e551011-aaaa-4bbb-8ccc-000000000001";
    let tail = format!(
        "{{\"type\":\"queue-operation\",\"operation\":\"enqueue\",\"timestamp\":\"2026-02-15T06:21:31.674Z\",\"sessionId\":\"{sid}\",\"content\":\"/exit\"}}\n\
         {{\"type\":\"queue-operation\",\"operation\":\"remove\",\"timestamp\":\"2026-02-15T06:21:37.753Z\",\"sessionId\":\"{sid}\"}}\n"
    );
    write_aged(&l.transcript, format!("{first}{tail}").as_bytes(), HOURS_2);
    let s = l.summary();
    let sk = find_by_path(&s, "skipped", &l.transcript).unwrap();
    assert_eq!(sk["reason"], "no-new-content", "{s}");
    assert_eq!(l.calls().len(), 1);
    // A prompt queued the same way is one.
    let more = tail.replace("/exit", "and the tests too");
    write_aged(
        &l.transcript,
        format!("{first}{tail}{more}").as_bytes(),
        HOURS_2,
    );
    assert_eq!(items(&l.summary(), "started").len(), 1);
    assert_eq!(l.calls().len(), 2);
}

#[test]
fn a_mid_turn_captures_tail_of_assistant_text_is_captured() {
    let l = live_world(3);
    let first = l.lines(0..3);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    assert_eq!(items(&l.summary(), "started").len(), 1);
    // The capture came while the agent waited on a permission prompt; the rest of the turn (its
    // conclusion, no new prompt) follows.
    let answer = "{\"type\":\"assistant\",\"sessionId\":\"5e551011-aaaa-4bbb-8ccc-000000000001\",\"message\":{\"id\":\"m9\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Root cause: the cache key omits the tenant.\"}]}}\n";
    write_aged(
        &l.transcript,
        format!("{first}{answer}").as_bytes(),
        HOURS_2,
    );
    let s = l.summary();
    let st = items(&s, "started");
    assert_eq!(st.len(), 1, "{s}");
    assert_eq!(
        (st[0]["fromLine"].as_u64(), st[0]["toLine"].as_u64()),
        (Some(4), Some(4))
    );
    assert_eq!(l.calls().len(), 2);
}

#[test]
fn a_codex_exec_capture_rollout_is_excluded_by_rule_alone() {
    // What `codex exec` 0.171 writes (the prompt only as a response_item), with almanac's marker in
    // the prompt; no ledger anywhere.
    let w = World::new();
    let body = fixture(CODEX_EXEC).replace(
        "Say hello",
        "Update the wiki.\\n\\nalmanac-capture-run: run_20261129T000000000Z_abcd1234",
    );
    let p = w.write(
        "home/.codex/sessions/2026/11/29/rollout-2026-11-29T16-30-04-01a22824-67fc-72a0-8696-7ffb0d4410c0.jsonl",
        &body,
        HOURS_2,
    );
    let v = json_ok(w.almanac().args(["rules", "explain", "--json"]).arg(&p));
    assert_eq!(v["excluded"]["line"], 12, "{v}");
    // The unmarked original is not excluded.
    write_aged(&p, fixture(CODEX_EXEC).as_bytes(), HOURS_2);
    let v = json_ok(w.almanac().args(["rules", "explain", "--json"]).arg(&p));
    assert!(v["excluded"].is_null(), "{v}");
}

#[test]
fn stores_find_any_codex_session_file_and_any_claude_subagent_file() {
    let w = World::new();
    let repo = w.repo("r");
    let codex = w.write(
        "home/.codex/sessions/2026/02/20/session-019a0b1c.jsonl",
        &fixture(CODEX_DESKTOP),
        HOURS_2,
    );
    let v = json_ok(w.almanac().args(["rules", "explain", "--json"]).arg(&codex));
    assert_eq!(
        (v["app"].as_str(), v["store"].as_str()),
        (Some("codex"), Some("sessions")),
        "{v}"
    );
    let sid = "5e551011-aaaa-4bbb-8ccc-000000000002";
    let aside = w.write(
        &format!("home/.claude/projects/-r/{sid}/subagents/aside_question-1f2e.jsonl"),
        &claude_line(sid, &repo, "what does this flag do?"),
        HOURS_2,
    );
    let v = json_ok(w.almanac().args(["rules", "explain", "--json"]).arg(&aside));
    assert!(!v["subagent"].is_null(), "{v}");
}

#[test]
fn rules_explain_names_the_exclude_glob_that_refuses_a_file() {
    let w = World::new();
    let repo = w.repo("r");
    let sid = "5e551011-aaaa-4bbb-8ccc-000000000003";
    let compact = w.write(
        &format!("home/.claude/projects/-r/{sid}/subagents/agent-acompact-9f.jsonl"),
        &claude_line(sid, &repo, "summarize"),
        HOURS_2,
    );
    let out = w
        .almanac()
        .args(["rules", "explain"])
        .arg(&compact)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("excluded by claude projects.exclude `**/agent-acompact-*.jsonl`"),
        "{err}"
    );
}
