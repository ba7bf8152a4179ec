//! Ledgers this version did not write: a newer version is left alone, unknown fields survive a rewrite,
//! a corrupt ledger is rebuilt from the run records instead of capturing everything again, and `capture
//! prune` forgets an entry only when its session is gone from the stores (not when its file moved).

use crate::common::*;
use crate::live::{live_world, Live};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const SESSION: &str = "claude:5e551011-aaaa-4bbb-8ccc-000000000001";

fn ledger_file(l: &Live) -> PathBuf {
    l.repo.join(".almanac/runs/capture-ledger.json")
}

/// The files in `runs/`, lock files aside (taking the repo lock is not touching the ledger).
fn runs_dir_names(l: &Live) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(l.repo.join(".almanac/runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    v.sort();
    v
}

fn run_cmd(l: &Live, args: &[&str]) -> std::process::Output {
    let mut cmd = l.w.almanac();
    cmd.env("FAKE_DIR", &l.fake).args(args);
    cmd.output().unwrap()
}

const NEWER: &str = "{\"version\": 2, \"updatedAt\": \"2031-01-01T00:00:00.000Z\",\n \"entries\": {\"claude:5e551011-aaaa-4bbb-8ccc-000000000001\": {\"cursor\": {\"bytes\": 999}}},\n \"somethingNew\": [1, 2, 3]}\n";

#[test]
fn a_newer_ledger_is_left_alone_and_nothing_is_captured_in_its_repo() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    std::fs::write(ledger_file(&l), NEWER).unwrap();
    let before = runs_dir_names(&l);

    let s = l.summary();
    let att = items(&s, "needsAttention");
    assert_eq!(att.len(), 1, "{s}");
    assert_eq!(att[0]["reason"], "ledger-newer-version");
    assert_eq!(
        att[0]["transcriptPath"],
        ledger_file(&l).display().to_string()
    );
    assert!(att[0]["detail"].as_str().unwrap().contains("upgrade"));
    assert!(items(&s, "started").is_empty(), "{s}");
    assert_eq!(std::fs::read_to_string(ledger_file(&l)).unwrap(), NEWER);
    assert_eq!(runs_dir_names(&l), before, "nothing moved aside or queued");
    assert!(l.calls().is_empty());

    // capture status says so; reset and prune refuse, naming the file and what to do.
    let repo = l.repo.to_str().unwrap();
    let status = run_cmd(&l, &["capture", "status", "--json", "--repo", repo]);
    assert!(status.status.success());
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(v["ledgerNewerVersion"]
        .as_str()
        .is_some_and(|m| m.contains("upgrade")));
    let words = run_cmd(&l, &["capture", "status", "--repo", repo]);
    assert!(String::from_utf8_lossy(&words.stdout).contains("newer almanac"));
    for args in [
        vec!["capture", "prune", "--older-than", "0s", "--repo", repo],
        vec![
            "capture",
            "reset",
            l.transcript.to_str().unwrap(),
            "--repo",
            repo,
        ],
    ] {
        let out = run_cmd(&l, &args);
        assert!(!out.status.success(), "{args:?} refuses");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&ledger_file(&l).display().to_string()) && err.contains("upgrade"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(std::fs::read_to_string(ledger_file(&l)).unwrap(), NEWER);
    assert_eq!(runs_dir_names(&l), before);
}

#[test]
fn a_worker_runs_nothing_in_a_repo_whose_ledger_is_newer() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    l.summary();
    assert_eq!(l.calls().len(), 1);
    // A queued run, and a newer almanac has since rewritten the ledger.
    let run = l.runs()[0].clone();
    let run_file = l.repo.join(format!(
        ".almanac/runs/{}.json",
        run["runId"].as_str().unwrap()
    ));
    let mut queued = run.clone();
    queued["status"] = "queued".into();
    std::fs::write(&run_file, serde_json::to_vec(&queued).unwrap()).unwrap();
    std::fs::write(ledger_file(&l), NEWER).unwrap();
    let started = Instant::now();
    let out = run_cmd(
        &l,
        &["capture", "worker", "--repo", l.repo.to_str().unwrap()],
    );
    assert!(out.status.success());
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the worker left"
    );
    assert_eq!(l.calls().len(), 1, "no agent ran");
    assert_eq!(std::fs::read_to_string(ledger_file(&l)).unwrap(), NEWER);
    assert!(!runs_dir_names(&l).iter().any(|n| n.contains(".corrupt-")));
}

#[test]
fn unknown_fields_survive_a_sweep_that_updates_the_entry() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    l.summary();
    let mut ledger = l.ledger();
    ledger["futureTop"] = serde_json::json!({"kept": true});
    ledger["entries"][SESSION]["futureField"] = serde_json::json!([42, "x"]);
    std::fs::write(ledger_file(&l), serde_json::to_vec(&ledger).unwrap()).unwrap();
    let grown = std::fs::read_to_string(&l.transcript).unwrap() + &l.lines(2..4);
    write_aged(&l.transcript, grown.as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    let after = l.ledger();
    assert_eq!(after["entries"][SESSION]["lastCapturedLine"], 4);
    assert_eq!(after["futureTop"], serde_json::json!({"kept": true}));
    assert_eq!(
        after["entries"][SESSION]["futureField"],
        serde_json::json!([42, "x"])
    );
}

#[test]
fn a_corrupt_ledger_is_rebuilt_from_run_records_not_captured_again() {
    let l = live_world(3);
    let store = l.w.home().join(".claude/projects/-work-app");
    let env = [("FAKE_TRANSCRIPTS", store.to_str().unwrap())];
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let (code, v) = l.sweep(&env);
    assert_eq!(code, 0, "{v}");
    l.wait_idle();
    let agent_session = l.runs()[0]["agentSessionId"].as_str().unwrap().to_string();
    let own = store.join(format!("{agent_session}.jsonl"));
    set_age(&own, HOURS_2);
    // A transcript no run record knows (its runs were pruned, or it was never captured).
    let unknown = store.join("5e551011-aaaa-4bbb-8ccc-0000000000b0.jsonl");
    write_aged(
        &unknown,
        crate::live::claude_line("5e551011-aaaa-4bbb-8ccc-0000000000b0", &l.repo, "hello")
            .as_bytes(),
        HOURS_2,
    );
    std::fs::write(ledger_file(&l), "{\"version\": 1, \"entries\": {").unwrap();
    let grown = std::fs::read_to_string(&l.transcript).unwrap() + &l.lines(3..5);
    write_aged(&l.transcript, grown.as_bytes(), HOURS_2);

    let (code, v) = l.sweep(&env);
    assert_eq!(code, 0, "{v}");
    l.wait_idle();
    let s = &v["summary"];
    let started = items(s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(
        started[0]["transcriptPath"],
        l.transcript.display().to_string()
    );
    assert_eq!(
        (
            started[0]["fromLine"].as_u64(),
            started[0]["toLine"].as_u64()
        ),
        (Some(4), Some(5)),
        "continues from the done run's end"
    );
    assert_eq!(
        find_by_path(s, "skipped", &own).unwrap()["reason"],
        "internal-almanac-session",
        "almanac's own session is still known"
    );
    let held = find_by_path(s, "needsAttention", &unknown).expect("the rest is reported");
    assert_eq!(held["reason"], "cursor-lost");
    assert!(held["detail"]
        .as_str()
        .unwrap()
        .contains("capture reset --skip-existing"));
    assert!(items(s, "needsAttention")
        .iter()
        .any(|i| i["reason"] == "ledger-corrupt"));
    assert_eq!(l.calls().len(), 2);

    // Still held on the next sweep, until the user decides.
    let s = l.summary();
    assert!(
        find_by_path(&s, "needsAttention", &unknown).is_some(),
        "{s}"
    );
    assert!(items(&s, "started").is_empty());
    let out = run_cmd(
        &l,
        &[
            "capture",
            "reset",
            "--skip-existing",
            unknown.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = l.summary();
    assert!(
        find_by_path(&s, "needsAttention", &unknown).is_none(),
        "{s}"
    );
    assert!(items(&s, "started").is_empty(), "{s}");
}

#[test]
fn prune_keeps_the_entry_of_a_codex_rollout_moved_to_the_archive() {
    let l = live_world(3);
    let name = "rollout-2026-11-29T16-30-04-01a22824-67fc-72a0-8696-7ffb0d4410c0.jsonl";
    let meta = format!(
        "{{\"timestamp\":\"2026-11-29T16:30:04.336Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"01a22824-67fc-72a0-8696-7ffb0d4410c0\",\"cwd\":\"{}\"}}}}\n",
        l.repo.display()
    );
    let turn = |t: &str| {
        format!("{{\"timestamp\":\"2026-11-29T16:30:05.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"{t}\"}}}}\n")
    };
    let live_path =
        l.w.home()
            .join(format!(".codex/sessions/2026/11/29/{name}"));
    write_aged(
        &live_path,
        format!("{meta}{}", turn("one")).as_bytes(),
        HOURS_2,
    );
    assert_eq!(items(&l.summary(), "started").len(), 1);
    let archived = l.w.home().join(format!(".codex/archived_sessions/{name}"));
    std::fs::create_dir_all(archived.parent().unwrap()).unwrap();
    std::fs::rename(&live_path, &archived).unwrap();

    let out = run_cmd(
        &l,
        &[
            "capture",
            "prune",
            "--older-than",
            "30d",
            "--json",
            "--repo",
            l.repo.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["entriesRemoved"], serde_json::json!([]), "{v}");

    write_aged(
        &archived,
        format!("{meta}{}{}", turn("one"), turn("two")).as_bytes(),
        HOURS_2,
    );
    let s = l.summary();
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(
        (
            started[0]["fromLine"].as_u64(),
            started[0]["toLine"].as_u64()
        ),
        (Some(3), Some(3))
    );
}
