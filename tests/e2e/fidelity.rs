//! Which records are prompts, on real transcripts of more client versions (`tests/fixtures/corpus/`,
//! provenance in its PROVENANCE.md): a bare or instructed `/compact`, queued prompts (delivered,
//! withdrawn, still pending), Copilot's own user.message events, an image-only prompt, a Codex
//! multi-agent child's task, Qwen Code records without `provenance`. Expectations come from reading
//! each file (line numbers are the file's own).

use crate::common::*;
use crate::live::{claude_line, live_world};

/// `capture turns --json` of a corpus file read with `app`'s rules: (line, text) of each prompt.
fn prompts(app: &str, rel: &str) -> Vec<(u64, String)> {
    crate::prompts::prompts(&crate::prompts::turns_of(app, &format!("corpus/{rel}")))
}

fn lines(p: &[(u64, String)]) -> Vec<u64> {
    p.iter().map(|(l, _)| *l).collect()
}

#[test]
fn a_bare_or_instructed_compact_is_not_a_prompt() {
    // 2.1.12: a bare /compact (7) after an interrupted prompt.
    let p = prompts(
        "claude",
        "claude/2.1.12/5c1ad003-2910-4a33-ab76-1d35bd950219.jsonl",
    );
    assert_eq!(lines(&p), [2], "{p:?}");
    // 2.1.235: /compact (13) and /compact with instructions (25), which compacts: the client then
    // writes "No response requested." as the model's answer (21, model <synthetic>), which is no answer.
    let p = prompts(
        "claude",
        "claude/2.1.235/22222222-2222-4333-8444-bbbbbbbbbbbb.jsonl",
    );
    assert_eq!(p, [(3, "Say hello".to_string())]);
}

#[test]
fn a_part_holding_only_compact_starts_no_run() {
    let l = live_world(3);
    let fixture = fixture("corpus/claude/2.1.235/22222222-2222-4333-8444-bbbbbbbbbbbb.jsonl")
        .replace("/home/dev/proj/compact", &l.repo.display().to_string());
    let path =
        l.w.home()
            .join(".claude/projects/-work-app/22222222-2222-4333-8444-bbbbbbbbbbbb.jsonl");
    // Captured through line 9: the prompt and its answer.
    let head: String = fixture.split_inclusive('\n').take(9).collect();
    write_aged(&path, head.as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(
        find_by_path(&s, "started", &path).unwrap()["toLine"],
        9,
        "{s}"
    );
    assert_eq!(l.calls().len(), 1);
    // The rest is two /compact commands, a compaction, its summary and the client's own answer.
    write_aged(&path, fixture.as_bytes(), HOURS_2);
    let s = l.summary();
    let skipped = find_by_path(&s, "skipped", &path).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(skipped["reason"], "no-new-content", "{s}");
    assert_eq!(l.calls().len(), 1, "no agent run");
}

#[test]
fn queued_prompts_count_when_delivered_not_when_queued() {
    // 11 queued, handed on (`dequeue`) and written as the prompt record 16; 22 queued and taken into the
    // running turn (`remove`); 32, 33, 34 still queued at the end of the file: not prompts yet.
    let p = prompts(
        "claude",
        "claude/2.1.47/db4e505b-d74a-40ca-8c57-f84785043f05.jsonl",
    );
    assert_eq!(lines(&p), [2, 16, 22], "{p:?}");
    assert_eq!(
        p[2].1, "最近的apk",
        "the latest prompt is the last one sent, not one still queued"
    );
    // `popAll` takes a queued prompt back (8, 10); the user sends the same text by hand (14).
    let p = prompts(
        "claude",
        "claude/2.1.80/eb9cc61d-d95f-47f4-9254-511f78288c42.jsonl",
    );
    assert_eq!(lines(&p), [3, 14], "{p:?}");
    // An IDE queues without text; the prompts reach the running turn as queued_command attachments.
    let p = prompts(
        "claude",
        "claude/2.1.141/b1a20bf7-cc71-4994-a79e-dcef58964424.jsonl",
    );
    assert_eq!(lines(&p), [3, 21, 24], "{p:?}");
    assert_eq!(p[1].1, "不用同步数据");
}

#[test]
fn a_prompt_still_queued_waits_until_it_is_delivered() {
    let l = live_world(3);
    let sid = "5e551011-aaaa-4bbb-8ccc-000000000001";
    let first = l.lines(0..2);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    l.summary();
    // A prompt typed while the agent is busy, queued; the file ends there (the agent still works).
    let queued = format!(
        "{{\"type\":\"queue-operation\",\"operation\":\"enqueue\",\"timestamp\":\"2026-11-29T10:00:00.000Z\",\"sessionId\":\"{sid}\",\"content\":\"also clamp it\"}}\n"
    );
    write_aged(
        &l.transcript,
        format!("{first}{queued}").as_bytes(),
        HOURS_2,
    );
    let s = l.summary();
    assert_eq!(
        find_by_path(&s, "skipped", &l.transcript).unwrap()["reason"],
        "no-new-content",
        "{s}"
    );
    // Delivered: handed on and written as the prompt record.
    let dequeue = format!(
        "{{\"type\":\"queue-operation\",\"operation\":\"dequeue\",\"timestamp\":\"2026-11-29T10:00:01.000Z\",\"sessionId\":\"{sid}\"}}\n"
    );
    let delivered = claude_line(sid, &l.repo, "also clamp it");
    write_aged(
        &l.transcript,
        format!("{first}{queued}{dequeue}{delivered}").as_bytes(),
        HOURS_2,
    );
    let s = l.summary();
    let st = find_by_path(&s, "started", &l.transcript).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(
        (st["fromLine"].as_u64(), st["toLine"].as_u64()),
        (Some(3), Some(5))
    );
    assert_eq!(st["newTurns"], 1, "{s}");
}

#[test]
fn copilots_own_user_messages_are_not_prompts() {
    // 10: instruction-discovery (sub/AGENTS.md); 18: a hook's guidance (`source: system`).
    let p = prompts(
        "copilot",
        "copilot/1.0.70/182dbdda-4ef3-4a4c-9d8e-6bf4e1856ac5/events.jsonl",
    );
    assert_eq!(lines(&p), [4], "{p:?}");
    let p = prompts(
        "copilot",
        "copilot/1.0.71/9e5d1142-4fc1-4d60-b932-85f2e87ba11b/events.jsonl",
    );
    assert_eq!(lines(&p), [4], "{p:?}");
}

#[test]
fn an_image_only_prompt_is_a_prompt() {
    let p = prompts(
        "claude",
        "claude/2.1.81/85666e6b-d6eb-4c4a-ac7b-f087a35b6baa.jsonl",
    );
    assert_eq!(lines(&p), [2, 20, 27, 39], "{p:?}");
    assert_eq!(p[1].1, "[image]");
    // Pasted while the agent was busy (queued without text, handed on, then written as 8).
    let p = prompts(
        "claude",
        "claude/2.1.47/74724cbc-f899-46e3-9da6-576329ed87f3.jsonl",
    );
    assert_eq!(p[1], (8, "[image]".to_string()), "{p:?}");
}

#[test]
fn a_codex_multi_agent_child_reports_its_own_task() {
    // v1 (0.145): the parent's turn is copied in (its prompt at 8-9); the child's task is 12.
    let p = prompts(
        "codex",
        "codex/0.145.0/rollout-2026-12-02T23-21-27-01a23910-1d92-7e20-87a7-27cc3edd888d.jsonl",
    );
    assert_eq!(lines(&p), [12], "{p:?}");
    assert!(p[0].1.starts_with("CHILD TASK: count the lines"), "{p:?}");
    // v2 (0.149): the task is a NEW_TASK agent_message (16); the parent's copied prompt (8) is not.
    let p = prompts(
        "codex",
        "codex/0.149.1/rollout-2026-12-02T23-24-07-01a23912-9140-76f1-967b-5cf9715f461d.jsonl",
    );
    assert_eq!(lines(&p), [16], "{p:?}");
    assert!(p[0].1.starts_with("Message Type: NEW_TASK"), "{p:?}");
    // Its parent: the child's FINAL_ANSWER (21) is not a prompt.
    let p = prompts(
        "codex",
        "codex/0.149.1/rollout-2026-12-02T23-24-07-01a23912-8ff7-7321-b821-c2b96447d4ff.jsonl",
    );
    assert_eq!(lines(&p), [9], "{p:?}");
}

#[test]
fn qwen_records_without_provenance_are_read() {
    for rel in [
        "qwen/0.10.1/197606fd-5b61-4b46-9ce3-b9b468fd396f.jsonl",
        "qwen/0.15.6/e54ee4ae-0f40-47ff-bb7e-a30790af0688.jsonl",
    ] {
        let p = prompts("qwen", rel);
        assert_eq!(lines(&p), [1, 11], "{rel}: {p:?}");
        assert_eq!(p[1].1, "Thanks. Now list the directory yourself.");
    }
}
