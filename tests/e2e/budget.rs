//! Cost guard: estimates, sweep budgets, chunked capture of large parts, and the circuit breaker.

use crate::common::*;
use crate::live::{claude_line, live_world};
use std::path::Path;
use std::time::Duration;

/// A run's estimate is what its agent reads: the conversation `capture turns --conversation` shows (the
/// prompts and answers, not the JSONL around them), its header and the prompt, at four bytes a token.
#[test]
fn estimates_for_a_known_transcript() {
    let w = World::new();
    let repo = w.repo("r");
    let id = "5e551011-aaaa-4bbb-8ccc-0000000000b1";
    let mut body = String::new();
    for i in 0..3 {
        body.push_str(&claude_line(id, &repo, &format!("prompt {i}")));
        body.push_str("{\"type\":\"assistant\",\"message\":{\"id\":\"m\",\"content\":[{\"type\":\"text\",\"text\":\"answer\"}]}}\n");
    }
    body.push_str("{\"type\":\"ai-title\",\"aiTitle\":\"t\"}\n");
    let p = w.write(
        &format!("home/.claude/projects/-r/{id}.jsonl"),
        &body,
        HOURS_2,
    );
    let s = w.dry_run(&[]);
    let st = find_by_path(&s, "started", &p).unwrap();
    assert_eq!(st["newBytes"], body.len());
    assert_eq!(st["newTurns"], 3);
    // The conversation: every prompt and answer with its line, the title record left out.
    let c = json_ok(
        w.almanac()
            .args(["capture", "turns", "--conversation", "--json"])
            .arg(&p),
    );
    let text = c["conversation"].as_str().unwrap();
    for (i, line) in [(0, 1), (1, 3), (2, 5)] {
        assert!(
            text.contains(&format!("[L{line}] user:\n  prompt {i}\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("[L{}] assistant:\n  answer\n", line + 1)),
            "{text}"
        );
    }
    assert!(
        text.contains("Left out: 1 record that is no prompt"),
        "{text}"
    );
    assert_eq!(c["shown"]["prompts"], 3);
    // Entries, the header allowance (1 KiB) and the prompt's (3 KiB), at four bytes a token.
    let part = c["partBytes"].as_u64().unwrap();
    assert_eq!(st["estimatedTokens"], (part + 1024 + 3 * 1024).div_ceil(4));
    assert!(st["chunk"].is_null());
    assert_eq!(s["totals"]["newBytes"], body.len());
    assert_eq!(s["totals"]["newTurns"], 3);
    assert_eq!(s["totals"]["estimatedTokens"], st["estimatedTokens"]);
    assert_eq!(s["totals"]["runs"], 1);
    // The words say it too.
    let out = w
        .almanac()
        .args(["capture", "sweep", "--dry-run"])
        .output()
        .unwrap();
    let words = String::from_utf8_lossy(&out.stdout);
    let want = format!("about {} tokens", st["estimatedTokens"]);
    assert!(words.contains(&want), "{words}");
}

#[test]
fn a_run_budget_starts_the_most_recent_and_defers_the_rest() {
    let l = live_world(3);
    let mut paths = Vec::new();
    for i in 0..5 {
        let id = format!("5e551011-aaaa-4bbb-8ccc-00000000020{i}");
        let p =
            l.w.home()
                .join(format!(".claude/projects/-work-app/{id}.jsonl"));
        write_aged(
            &p,
            claude_line(&id, &l.repo, "hi").as_bytes(),
            Duration::from_secs(3600 * (10 - i as u64)),
        );
        paths.push(p);
    }
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        std::fs::read_to_string(l.w.almanac_home().join("config.toml"))
            .unwrap()
            .replace(
                "[capture]\n",
                "[automation.capture]\nmax_runs_per_sweep = 2\n\n[capture]\n",
            ),
    )
    .unwrap();
    let s = l.summary();
    let started: Vec<String> = items(&s, "started")
        .iter()
        .map(|i| i["transcriptPath"].as_str().unwrap().to_string())
        .collect();
    let mut want = vec![
        paths[4].display().to_string(),
        paths[3].display().to_string(),
    ];
    want.sort();
    assert_eq!(started, want, "the two most recently active");
    let deferred: Vec<_> = items(&s, "skipped")
        .into_iter()
        .filter(|i| i["reason"] == "budget-deferred")
        .collect();
    assert_eq!(deferred.len(), 3);
    assert!(deferred[0]["detail"]
        .as_str()
        .unwrap()
        .contains("max_runs_per_sweep"));
    // The next sweeps pick them up.
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 2);
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1);
    assert_eq!(l.calls().len(), 5);
    // A token budget defers the same way, and flags override config.
    let out =
        l.w.almanac()
            .env("FAKE_DIR", &l.fake)
            .args(["capture", "sweep", "--dry-run", "--max-runs", "0"])
            .output()
            .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_large_part_is_captured_in_ordered_chunks_and_a_failure_keeps_the_cursor_after_the_last_good_one(
) {
    let l = live_world(3);
    let filler = "x".repeat(1000);
    let mut body = String::new();
    while body.len() < 5 << 20 {
        body.push_str(&claude_line(
            "5e551011-aaaa-4bbb-8ccc-000000000001",
            &l.repo,
            &filler,
        ));
    }
    write_aged(&l.transcript, body.as_bytes(), HOURS_2);
    // 250k tokens (about 1 MB of conversation) a run: four or five chunks; the agent fails on the third.
    std::fs::write(l.fake.join("fail-if"), "_c0003").unwrap();
    let v = serde_json::json!({"summary": l.sweep_args(&["--max-tokens-per-run", "250000"])});
    let started = items(&v["summary"], "started");
    let n = started.len();
    assert!((4..=6).contains(&n), "{n} chunks: {}", v["summary"]);
    for (i, st) in started.iter().enumerate() {
        assert_eq!(st["chunk"], serde_json::json!([i + 1, n]));
        if i > 0 {
            assert_eq!(
                st["fromLine"],
                started[i - 1]["toLine"].as_u64().unwrap() + 1,
                "consecutive"
            );
            assert_eq!(st["fromByte"], started[i - 1]["toByte"]);
        }
        assert_eq!(
            body.as_bytes()[st["toByte"].as_u64().unwrap() as usize - 1],
            b'\n',
            "each ends on a line boundary"
        );
        // A run's conversation reaches the limit (1 MB of rendering): each prompt is 1000 bytes of
        // text in about 1.2 KB of JSONL.
        let est = st["estimatedTokens"].as_u64().unwrap();
        assert!((250_000..260_000).contains(&est) || i == n - 1, "{est}");
    }
    l.wait_idle();
    let runs = l.runs();
    assert_eq!(runs.len(), n);
    assert_eq!(runs[0]["status"], "done");
    assert_eq!(runs[1]["status"], "done");
    assert_eq!(runs[2]["status"], "failed");
    for r in &runs[3..] {
        assert_eq!(r["status"], "failed");
        assert!(r["error"].as_str().unwrap().starts_with("cancelled"), "{r}");
    }
    let calls = l.calls();
    assert_eq!(
        calls.len(),
        3,
        "chunks after the failed one never ran: {calls:?}"
    );
    let e = l.entry();
    assert_eq!(e["status"], "failed");
    assert_eq!(
        e["lastCapturedLine"], started[1]["toLine"],
        "the cursor stops at the end of chunk 2"
    );
    assert_eq!(e["lastCapturedSize"], started[1]["toByte"]);
    let prompt = l.prompt(runs[1]["runId"].as_str().unwrap());
    assert!(
        prompt.contains(&format!("this is chunk 2 of {n}")),
        "{prompt}"
    );
    assert!(
        prompt.contains(&format!("(lines 1 to {})", started[n - 1]["toLine"])),
        "{prompt}"
    );
    // Fixed: the next sweep resumes from chunk 3's start.
    std::fs::remove_file(l.fake.join("fail-if")).unwrap();
    let v = serde_json::json!({"summary": l.sweep_args(&["--max-tokens-per-run", "250000"])});
    assert_eq!(
        items(&v["summary"], "started")[0]["fromByte"],
        started[2]["fromByte"]
    );
    l.wait_idle();
    assert_eq!(l.entry()["lastCapturedSize"], body.len());
}

#[test]
fn the_breaker_trips_after_consecutive_failures_and_cancels_the_rest() {
    let l = live_world(3);
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        std::fs::read_to_string(l.w.almanac_home().join("config.toml"))
            .unwrap()
            .replace(
                "[capture]\n",
                "[automation.capture]\nbreaker_failures = 3\n\n[capture]\n",
            ),
    )
    .unwrap();
    l.set_exit(4);
    for i in 0..6 {
        let id = format!("5e551011-aaaa-4bbb-8ccc-00000000030{i}");
        write_aged(
            &l.w.home()
                .join(format!(".claude/projects/-work-app/{id}.jsonl")),
            claude_line(&id, &l.repo, "hi").as_bytes(),
            HOURS_2,
        );
    }
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 6);
    let runs = l.runs();
    let failed_by_agent = runs.iter().filter(|r| r["exitCode"] == 4).count();
    let cancelled: Vec<_> = runs
        .iter()
        .filter(|r| {
            r["error"]
                .as_str()
                .is_some_and(|e| e.contains("circuit breaker"))
        })
        .collect();
    assert_eq!(failed_by_agent, 3, "{runs:?}");
    assert_eq!(cancelled.len(), 3);
    assert_eq!(
        l.calls().len(),
        3,
        "no agent started after the breaker tripped"
    );
    let b: serde_json::Value = serde_json::from_slice(
        &std::fs::read(l.w.almanac_home().join("state/breaker.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(b["tripped"], true);
    assert_eq!(b["failuresInARow"], 3);
    // Cancelled sessions spent no attempt.
    let ledger = l.ledger();
    let attempts: Vec<u64> = ledger["entries"]
        .as_object()
        .unwrap()
        .values()
        .map(|e| e["attempts"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts.iter().filter(|a| **a == 1).count(), 3);
    assert_eq!(attempts.iter().filter(|a| **a == 0).count(), 3);
    // automation status tells.
    let out =
        l.w.almanac()
            .args(["automation", "status"])
            .output()
            .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("circuit breaker: tripped"), "{text}");
}

#[test]
fn a_repo_whose_transcripts_all_wait_for_the_budget_keeps_its_ledger_untouched() {
    let l = live_world(3);
    let b = l.w.repo("work/b");
    let sid_b = "5e551011-aaaa-4bbb-8ccc-0000000000b1";
    let tb =
        l.w.home()
            .join(format!(".claude/projects/-work-b/{sid_b}.jsonl"));
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    write_aged(
        &tb,
        claude_line(sid_b, &b, "in b").as_bytes(),
        Duration::from_secs(3 * 3600),
    );
    l.summary();
    let ledger_b = b.join(".almanac/runs/capture-ledger.json");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&ledger_b).is_ok_and(|t| t.contains("\"done\"")) {
        assert!(
            std::time::Instant::now() < deadline,
            "repo b's capture ends"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Both grow; only the most recent one fits a one-run budget.
    let append = |p: &std::path::Path, line: String, age: Duration| {
        let grown = format!("{}{line}", std::fs::read_to_string(p).unwrap());
        write_aged(p, grown.as_bytes(), age);
    };
    append(&l.transcript, l.lines(2..3), HOURS_2);
    append(
        &tb,
        claude_line(sid_b, &b, "more"),
        Duration::from_secs(3 * 3600),
    );
    let ino =
        |p: &std::path::Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let before = ino(&ledger_b);
    let s = l.sweep_args(&["--max-runs", "1"]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(started[0]["repoRoot"], l.repo.display().to_string());
    assert_eq!(s["counts"]["budget-deferred"], 1, "{s}");
    assert_eq!(
        ino(&ledger_b),
        before,
        "a deferred transcript changes nothing in its ledger"
    );
    l.wait_idle();
}

/// A run is sized by what its agent reads. A real 3.3 MB Claude Code session (2.1.42, 25 prompts) is
/// 830,000 tokens of JSONL at four bytes a token, far past `max_tokens_per_run` (150,000 by default),
/// but its conversation is about 27,000: one run. Cut to 10,000 tokens a run, it is chunked by its
/// conversation, each chunk's estimate near the limit; a Codex 0.58 session likewise.
#[test]
fn a_real_session_whose_conversation_fits_one_run_is_one_run_however_large_its_jsonl() {
    for (app, rel, cwd, per_run) in [
        (
            "claude",
            "claude/2.1.42/e8811ad6-93d9-4ee6-997d-2447a5d496f3.jsonl",
            "/Users/alex/workspace/cli/.worktrees/2",
            150_000,
        ),
        (
            "codex",
            "codex/0.58.0/rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl",
            "/home/user/projects/temp/chatbot-ui",
            40_000,
        ),
    ] {
        let w = World::new();
        let repo = w.repo("work/app");
        let body = fixture(&format!("corpus/{rel}")).replace(cwd, &repo.display().to_string());
        let name = Path::new(rel).file_name().unwrap().to_str().unwrap();
        let store = match app {
            "claude" => ".claude/projects/-work-app",
            _ => ".codex/sessions/2025/11/17",
        };
        let p = w.write(&format!("home/{store}/{name}"), &body, HOURS_2);
        let limit = per_run.to_string();
        let s = w.dry_run(&["--max-tokens-per-run", &limit]);
        let runs: Vec<_> = items(&s, "started")
            .into_iter()
            .filter(|i| i["transcriptPath"] == p.display().to_string())
            .collect();
        assert_eq!(runs.len(), 1, "{app}: {s}");
        let run = runs[0];
        assert!(run["chunk"].is_null(), "{run}");
        let raw = run["newBytes"].as_u64().unwrap();
        let est = run["estimatedTokens"].as_u64().unwrap();
        assert!(raw / 4 > per_run, "{app}: the JSONL alone is {raw} bytes");
        assert!(
            est < per_run && est * 6 < raw / 4,
            "{app}: {est} tokens for {raw} bytes"
        );
        // Far below its conversation, the limit cuts it: by conversation, not by JSONL.
        let s = w.dry_run(&["--max-tokens-per-run", &(est / 3).to_string()]);
        let chunks: Vec<_> = items(&s, "started")
            .into_iter()
            .filter(|i| i["transcriptPath"] == p.display().to_string())
            .collect();
        // (Cut by its JSONL, it would be dozens.)
        assert!((2..=5).contains(&chunks.len()), "{app}: {s}");
        let sum: u64 = chunks
            .iter()
            .map(|c| c["estimatedTokens"].as_u64().unwrap())
            .sum();
        assert!(sum >= est && sum < est * 2, "{app}: {sum} against {est}");
        // A dry run writes nothing in the repo: no conversation, no prompt.
        let written: Vec<String> = tree(&repo.join(".almanac"))
            .into_iter()
            .filter(|f| f.ends_with(".md") || f.ends_with(".json"))
            .collect();
        assert!(written.is_empty(), "{app}: {written:?}");
    }
}
