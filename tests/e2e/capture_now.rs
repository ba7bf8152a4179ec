//! `capture now`: one session captured by hand through the sweep's queue, ledger and worker, with the
//! fake agent.

use crate::common::*;
use crate::live::{claude_line, live_world, Live};
use std::time::Duration;

const SID: &str = "5e551011-aaaa-4bbb-8ccc-000000000001";
const HOURS_2: Duration = Duration::from_secs(7200);

/// `almanac capture now ARGS --json` run in `dir`: exit code and JSON.
fn now_in(l: &Live, dir: &std::path::Path, args: &[&str]) -> (i32, serde_json::Value) {
    let out =
        l.w.almanac()
            .env("FAKE_DIR", &l.fake)
            .current_dir(dir)
            .args(["capture", "now", "--json"])
            .args(args)
            .output()
            .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "stdout is JSON: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    if out.status.code() != Some(2) {
        crate::polish::validate("capture-now.schema.json", &v);
    }
    (out.status.code().unwrap_or(-1), v)
}

fn now(l: &Live, args: &[&str]) -> (i32, serde_json::Value) {
    now_in(l, &l.repo, args)
}

#[test]
fn now_captures_the_latest_session_of_the_repo_then_says_nothing_new() {
    let l = live_world(3);
    // An older session of the same repo: the latest one is chosen.
    let old = l
        .transcript
        .with_file_name("5e551011-aaaa-4bbb-8ccc-000000000009.jsonl");
    let old_line = claude_line("5e551011-aaaa-4bbb-8ccc-000000000009", &l.repo, "old");
    write_aged(&old, old_line.as_bytes(), HOURS_2 * 2);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let (code, v) = now(&l, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["result"], "started", "{v}");
    assert_eq!(v["sessionId"], SID);
    assert_eq!(v["runs"][0]["fromLine"], 1);
    assert_eq!(v["runs"][0]["toLine"], 3);
    l.wait_idle();
    let e = l.entry();
    assert_eq!(e["lastCapturedLine"], 3, "{e}");
    let runs = l.runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["trigger"], "manual");
    assert_eq!(runs[0]["status"], "done");
    // capture status shows it as manual.
    let status = json_ok(
        l.w.almanac()
            .args(["capture", "status", "--json", "--repo"])
            .arg(&l.repo),
    );
    assert!(status.to_string().contains("manual"), "{status}");
    let human =
        l.w.almanac()
            .args(["capture", "status", "--repo"])
            .arg(&l.repo)
            .output()
            .unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human.contains("started by hand: capture now"),
        "the words show it too: {human}"
    );

    let (code, v) = now(&l, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["result"], "nothing-new", "{v}");
    assert_eq!(l.runs().len(), 1, "nothing started");
}

#[test]
fn now_by_session_id_of_each_app() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let cid = "01a22824-67fc-72a0-8696-7ffb0d4410c0";
    let meta = format!(
        "{{\"timestamp\":\"2026-11-29T16:30:04.336Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"{cid}\",\"cwd\":\"{}\"}}}}\n{{\"timestamp\":\"2026-11-29T16:30:05.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"hi\"}}}}\n",
        l.repo.display()
    );
    let rollout = l.w.home().join(format!(
        ".codex/sessions/2026/11/29/rollout-2026-11-29T16-30-04-{cid}.jsonl"
    ));
    write_aged(&rollout, meta.as_bytes(), HOURS_2);
    // From anywhere: the id is searched in every app's stores.
    let (code, v) = now_in(&l, l.w.root(), &["--session", SID, "--foreground"]);
    assert_eq!((code, &v["result"]), (0, &"done".into()), "{v}");
    assert_eq!(v["app"], "claude");
    let (code, v) = now_in(&l, l.w.root(), &["--session", cid, "--foreground"]);
    assert_eq!((code, &v["result"]), (0, &"done".into()), "{v}");
    assert_eq!(v["app"], "codex");
    assert_eq!(v["runs"][0]["toLine"], 2);
}

#[test]
fn now_captures_a_session_being_written_through_its_last_complete_line() {
    let l = live_world(3);
    let content = format!("{}{{\"type\":\"user\",\"partial", l.lines(0..2));
    write_aged(&l.transcript, content.as_bytes(), Duration::from_secs(2));
    let (code, v) = now(&l, &["--foreground"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["runs"][0]["toLine"], 2, "{v}");
    let out =
        l.w.almanac()
            .env("FAKE_DIR", &l.fake)
            .current_dir(&l.repo)
            .args(["capture", "now", "--json"])
            .output()
            .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"], "nothing-new", "{v}");
    assert_eq!(l.entry()["lastCapturedLine"], 2);
    // A note says it may still be written (when something was started).
    std::fs::OpenOptions::new()
        .append(true)
        .open(&l.transcript)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"\n"))
        .unwrap();
    let (_, v) = now(&l, &[]);
    assert!(
        v["note"]
            .as_str()
            .unwrap_or("")
            .contains("still be written"),
        "{v}"
    );
}

#[test]
fn foreground_returns_the_agent_exit_status_and_output() {
    let l = live_world(1);
    let agent = l.fake.join("fake-agent");
    let script = std::fs::read_to_string(&agent).unwrap();
    let script = script.replacen(
        "dir=\"$FAKE_DIR\"\n",
        "dir=\"$FAKE_DIR\"\necho \"agent says: working on $3\"\n",
        1,
    );
    std::fs::write(&agent, script).unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    std::fs::write(l.fake.join("exit-code"), "7").unwrap();
    let out =
        l.w.almanac()
            .env("FAKE_DIR", &l.fake)
            .current_dir(&l.repo)
            .args(["capture", "now", "--foreground"])
            .output()
            .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("agent says: working on run_"), "{stdout}");
    assert_eq!(l.entry()["lastCapturedLine"], 0, "cursor unmoved");
}

#[test]
fn a_sweep_and_capture_now_started_together_give_one_run() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let (code, v) = std::thread::scope(|sc| {
        let sweep = sc.spawn(|| l.sweep_args(&[]));
        let now = now(&l, &[]);
        sweep.join().unwrap();
        now
    });
    assert_eq!(code, 0, "{v}");
    l.wait_idle();
    assert_eq!(l.runs().len(), 1, "one run: {:?}", l.runs());
    assert_eq!(l.entry()["lastCapturedLine"], 3);
}

#[test]
fn from_start_recaptures_from_line_one_and_the_prompt_says_so() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let (code, v) = now(&l, &["--foreground"]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = now(&l, &["--foreground", "--from-start"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["runs"][0]["fromLine"], 1, "{v}");
    assert_eq!(v["runs"][0]["toLine"], 3, "{v}");
    let id = v["runs"][0]["runId"].as_str().unwrap();
    let prompt = std::fs::read_to_string(l.fake.join(format!("prompt-{id}.md"))).unwrap();
    assert!(prompt.contains("start over from line 1"), "{prompt}");
    assert_eq!(l.entry()["lastCapturedLine"], 3);
    assert_eq!(l.runs().len(), 2);
}

#[test]
fn an_unknown_or_missing_session_is_a_usage_error() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..1).as_bytes(), HOURS_2);
    let (code, v) = now(&l, &["--session", "no-such-id"]);
    assert_eq!(code, 2, "{v}");
    let err = v["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("no-such-id") && err.contains("searched"),
        "{v}"
    );
    assert!(err.contains("claude"), "{v}");
    // Outside any repo, with no session named.
    let (code, v) = now_in(&l, l.w.root(), &[]);
    assert_eq!(code, 2, "{v}");
}

/// `capture now --foreground` in `l`'s repo, interrupted with Ctrl-C once its agent runs; the exit
/// status, after the agent was checked to be gone.
fn now_interrupted(l: &crate::live::Live) -> std::process::ExitStatus {
    let _ = std::fs::remove_file(l.fake.join("agent.pid"));
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("almanac"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", l.w.home())
        .env("ALMANAC_HOME", l.w.almanac_home())
        .env("FAKE_DIR", &l.fake)
        .current_dir(&l.repo)
        .args(["capture", "now", "--foreground"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let agent = wait_for_pid(&l.fake.join("agent.pid"));
    // Ctrl-C at a terminal sends SIGINT to almanac's process group; the agent has a group of its own.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            unsafe { libc::kill(-agent, libc::SIGKILL) };
            panic!("capture now --foreground did not stop on Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        unsafe { libc::kill(agent, 0) } != 0,
        "the agent was stopped with the command"
    );
    status
}

#[test]
fn ctrl_c_in_the_foreground_cancels_without_spending_an_attempt() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    // The fake agent records its pid and sleeps (see FAKE_AGENT in live.rs).
    std::fs::write(l.fake.join("sleep"), "60").unwrap();
    // More Ctrl-Cs than the retry budget (3): none of them is a failure.
    for i in 1..=4 {
        let status = now_interrupted(&l);
        assert_eq!(status.code(), Some(130), "interruption {i}");
        let run = l.runs().pop().unwrap();
        assert_eq!(run["status"], "cancelled", "{run}");
        assert!(
            run["error"]
                .as_str()
                .unwrap_or_default()
                .contains("cancelled (Ctrl-C)"),
            "{run}"
        );
        let e = l.entry();
        assert_eq!(
            e["lastCapturedLine"], 0,
            "the cursor stays where it was: {e}"
        );
        assert_eq!(e["attempts"], 0, "no attempt spent: {e}");
    }
    // The next sweep captures it, from the cursor.
    std::fs::remove_file(l.fake.join("sleep")).unwrap();
    let s = l.summary();
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(started[0]["fromLine"], 1, "{s}");
    assert_eq!(l.entry()["lastCapturedLine"], 2);
}

#[test]
fn reset_retries_clears_an_exhausted_budget_and_keeps_the_cursor() {
    let l = live_world(2);
    let first = l.lines(0..2);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    l.summary();
    assert_eq!(l.entry()["lastCapturedLine"], 2);
    // Two more lines, and the agent now fails: the budget (2) runs out.
    write_aged(
        &l.transcript,
        format!("{first}{}", l.lines(2..4)).as_bytes(),
        HOURS_2,
    );
    l.set_exit(9);
    l.summary();
    l.summary();
    let s = l.summary();
    assert_eq!(
        find_by_path(&s, "needsAttention", &l.transcript).unwrap_or_else(|| panic!("{s}"))
            ["reason"],
        "retry-budget-exhausted"
    );
    let out =
        l.w.almanac()
            .args(["capture", "reset", "--retries"])
            .arg(&l.transcript)
            .output()
            .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("cleared 2 failed attempts") && text.contains("from line 3"),
        "{text}"
    );
    let e = l.entry();
    assert_eq!(
        (e["attempts"].as_u64(), e["lastCapturedLine"].as_u64()),
        (Some(0), Some(2)),
        "{e}"
    );
    l.set_exit(0);
    let s = l.summary();
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(
        (
            started[0]["fromLine"].as_u64(),
            started[0]["toLine"].as_u64()
        ),
        (Some(3), Some(4)),
        "it goes on from the cursor"
    );
    // --retries and --skip-existing do not go together.
    let out =
        l.w.almanac()
            .args(["capture", "reset", "--retries", "--skip-existing"])
            .arg(&l.transcript)
            .output()
            .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
