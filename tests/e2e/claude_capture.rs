//! A real Claude session, written by the real CLI against the mock model, captured by a live sweep whose
//! agent is the real CLI too (the default `claude` profile): the run ends `done`, the cursor equals the
//! captured size, the agent's own transcript is recorded and skipped afterwards; an agent whose API fails
//! ends `failed`, one whose API never answers is stopped at the timeout. Skipped with a message when the
//! CLI is absent, unless ALMANAC_REQUIRE_REAL_CLIENTS=1.

use crate::agents_real::{claude_write, client_env, run_client, PAGE};
use crate::common::*;
use crate::live::Live;
use crate::mock_model::{MockModel, Turn};
use crate::real_clients::client_or_skip;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Runs `claude -p <prompt> --output-format json [extra]` in `repo`; returns its session id.
pub fn claude_turn(
    l: &Live,
    mock: &MockModel,
    claude: &Path,
    prompt: &str,
    extra: &[&str],
) -> String {
    let mut args = vec!["-p", prompt, "--output-format", "json"];
    args.extend_from_slice(extra);
    let out = run_client(&l.w, mock, claude, &args, &l.repo);
    let why = crate::agents_real::describe(&out, mock);
    assert!(out.status.success(), "{why}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect(&why);
    v["session_id"].as_str().expect(&why).to_string()
}

/// The transcript Claude Code wrote for `session`, anywhere under `$HOME/.claude/projects/`.
pub fn claude_transcript(home: &Path, session: &str) -> Option<PathBuf> {
    walkdir::WalkDir::new(home.join(".claude/projects"))
        .into_iter()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy() == format!("{session}.jsonl"))
        .map(|e| e.into_path())
}

/// A live world whose config is `capture` (the default agent, the shipped `claude` profile).
fn world(capture: &str) -> Live {
    let l = crate::live::live_world(1);
    std::fs::write(l.w.almanac_home().join("config.toml"), capture).unwrap();
    std::fs::create_dir_all(l.repo.join(".almanac/pages")).unwrap();
    std::fs::create_dir_all(l.repo.join("src")).unwrap();
    std::fs::write(l.repo.join("src/main.rs"), "fn main() {}\n").unwrap();
    l
}

/// A live sweep with the real CLI on PATH and pointed at `mock`; its summary.
fn sweep(l: &Live, mock: &MockModel, claude: &Path) -> serde_json::Value {
    sweep_apps(l, mock, claude, "claude")
}

fn sweep_apps(l: &Live, mock: &MockModel, claude: &Path, apps: &str) -> serde_json::Value {
    let path = format!(
        "{}:{}",
        claude.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = l.w.almanac();
    for (k, v) in client_env(&l.w, mock) {
        cmd.env(k, v);
    }
    cmd.env("PATH", &path).args([
        "capture", "sweep", "--json", "--quiet", "0m", "--apps", apps,
    ]);
    json_ok(&mut cmd)["summary"].clone()
}

/// The capture agent reads the conversation file its prompt names (`runs/<run-id>.transcript.md`).
fn read_conversation() -> Turn {
    Turn::ToolOnRequest {
        name: "Read".into(),
        input: json!({"file_path": "{}"}),
        pattern: r#"(/[^\s"\\]+\.transcript\.md)"#.into(),
    }
}

fn run_log(run: &serde_json::Value) -> String {
    std::fs::read_to_string(run["logPath"].as_str().unwrap_or_default()).unwrap_or_default()
}

/// What the mock received from requests that offered tools (the agents' main loops), as text.
fn prompts(mock: &MockModel) -> Vec<String> {
    mock.requests()
        .iter()
        .filter(|r| r.has_tools())
        .map(|r| r.body["messages"].to_string())
        .collect()
}

#[test]
fn real_claude_session_is_captured_by_the_real_claude_agent() {
    let Some(claude) = client_or_skip("claude") else {
        return;
    };
    let l = world("[capture]\ntimeout = \"1m\"\nmax_attempts = 1\n");
    let page = |n: &str| l.repo.join(format!(".almanac/pages/{n}.md"));
    let main = l.repo.join("src/main.rs").display().to_string();
    let mock = MockModel::start(vec![
        // The user's session: turn 1 reads a file, turn 2 answers.
        Turn::Tool {
            name: "Read".into(),
            input: json!({"file_path": main}),
        },
        Turn::Text("main.rs is empty.".into()),
        Turn::Text("Then add a flag.".into()),
        // Capture run 1: the agent reads the conversation the prompt names, then writes a page.
        read_conversation(),
        claude_write(&page("first").display().to_string(), PAGE),
        Turn::Text("Wrote the page.".into()),
        // The user's turn 3, then capture run 2.
        Turn::Text("Done.".into()),
        read_conversation(),
        claude_write(&page("second").display().to_string(), PAGE),
        Turn::Text("Wrote the second page.".into()),
    ]);
    let start = Instant::now();
    let s = claude_turn(&l, &mock, &claude, "What is in src/main.rs?", &[]);
    assert_eq!(
        claude_turn(
            &l,
            &mock,
            &claude,
            "Add a --verbose flag",
            &["--resume", &s]
        ),
        s,
        "--resume appends to the same session"
    );
    let user = claude_transcript(&l.w.home(), &s).expect("the CLI wrote the session");
    let size = std::fs::metadata(&user).unwrap().len();
    let text = std::fs::read_to_string(&user).unwrap();
    assert!(text.contains("\"tool_use\"") && text.contains("Add a --verbose flag"));

    let summary = sweep(&l, &mock, &claude);
    let started = items(&summary, "started");
    assert_eq!(started.len(), 1, "{summary}");
    assert_eq!(started[0]["transcriptPath"], user.display().to_string());
    l.wait_idle();
    let run = l.runs()[0].clone();
    let why = format!("{run}\n{}", run_log(&run));
    assert_eq!(run["status"], "done", "{why}");
    assert_eq!(
        std::fs::read_to_string(page("first")).ok().as_deref(),
        Some(PAGE),
        "{why}"
    );
    let entry = l.ledger()["entries"][format!("claude:{s}")].clone();
    assert_eq!(
        entry["lastCapturedSize"], size,
        "the cursor is the captured size: {entry}"
    );
    // The agent read the conversation almanac rendered: the new part's first prompt, under its line.
    let read = crate::agents_real::tool_results(&mock);
    assert!(
        read.iter().any(|r| r.contains("What is in src/main.rs?")
            && r.contains("] user:")
            && r.contains("The new part, to capture: lines 1 to")),
        "{read:?}"
    );
    // The run's agent session is the transcript the agent itself wrote, in the same project folder.
    let agent = run["agentSessionId"].as_str().expect(&why).to_string();
    let own = claude_transcript(&l.w.home(), &agent).expect("the agent wrote its transcript");
    assert_eq!(own.parent(), user.parent());
    assert!(std::fs::read_to_string(&own)
        .unwrap()
        .contains("almanac-capture-run: "));

    // Turn 3, then a sweep: only the new part is captured, and the agent's transcript is skipped.
    set_age(&own, HOURS_2);
    claude_turn(&l, &mock, &claude, "Thanks", &["--resume", &s]);
    let summary = sweep(&l, &mock, &claude);
    let skipped = find_by_path(&summary, "skipped", &own).unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(skipped["reason"], "internal-almanac-session", "{summary}");
    let started = items(&summary, "started");
    assert_eq!(started.len(), 1, "{summary}");
    assert_eq!(started[0]["transcriptPath"], user.display().to_string());
    l.wait_idle();
    let runs = l.runs();
    assert_eq!(runs[1]["status"], "done", "{}", run_log(&runs[1]));
    assert!(page("second").exists(), "{}", run_log(&runs[1]));
    // Run 2 read its own part, the earlier prompts listed for context.
    let read = crate::agents_real::tool_results(&mock);
    assert!(
        read.iter().any(|r| r.contains("Thanks")
            && r.contains("Earlier in this session")
            && r.contains("Add a --verbose flag")),
        "{read:?}"
    );
    let second = prompts(&mock)
        .into_iter()
        .find(|p| p.contains(&runs[1]["runId"].as_str().unwrap().to_string()))
        .expect("the mock saw run 2's prompt");
    assert!(
        second.contains("almanac-capture-run: ") && second.contains("Focus on line"),
        "{second}"
    );
    assert_eq!(mock.remaining(), 0);
    assert!(
        start.elapsed() < Duration::from_secs(90),
        "{:?}",
        start.elapsed()
    );
}

/// A session of two lines and a sweep whose real agent meets `turns`; the one run record, after it ended.
fn failing_run(capture: &str, turns: Vec<Turn>) -> Option<(Live, serde_json::Value, MockModel)> {
    let claude = client_or_skip("claude")?;
    let l = world(capture);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let mock = MockModel::start(turns);
    let s = sweep(&l, &mock, &claude);
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    l.wait_idle();
    let run = l.runs()[0].clone();
    Some((l, run, mock))
}

#[test]
fn real_claude_agent_whose_api_fails_ends_failed_and_keeps_the_cursor() {
    // No retries, set through the profile's env (Claude Code retries a 500 with backoff by default).
    let Some((l, run, mock)) = failing_run(
        "[capture]\ntimeout = \"1m\"\nmax_attempts = 1\n[capture.agents.claude]\nenv = { CLAUDE_CODE_MAX_RETRIES = \"0\" }\n",
        vec![Turn::Error(500)],
    ) else {
        return;
    };
    let log = run_log(&run);
    let why = format!("{run}\n{log}");
    assert_eq!(run["status"], "failed", "{why}");
    assert!(
        run["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{why}"
    );
    assert!(log.contains("500") || log.contains("mock failure"), "{why}");
    assert_eq!(mock.remaining(), 0, "{why}");
    assert_eq!(
        l.entry()["lastCapturedLine"].as_u64().unwrap_or(0),
        0,
        "{}",
        l.entry()
    );
    assert!(prompts(&mock)
        .iter()
        .any(|p| p.contains("almanac-capture-run: ")));
}

#[test]
fn real_claude_agent_whose_api_never_answers_is_stopped_at_the_timeout() {
    let start = Instant::now();
    let Some((l, run, mock)) = failing_run(
        "[capture]\ntimeout = \"3s\"\nmax_attempts = 1\n",
        vec![Turn::Hang],
    ) else {
        return;
    };
    let why = format!("{run}\n{}", run_log(&run));
    assert_eq!(run["status"], "failed", "{why}");
    assert!(
        run["error"].to_string().contains("timed out")
            || run["error"].to_string().contains("timeout"),
        "{why}"
    );
    assert_eq!(mock.remaining(), 0, "the agent reached the mock: {why}");
    assert_eq!(l.entry()["lastCapturedLine"].as_u64().unwrap_or(0), 0);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn real_codex_session_is_captured_by_the_real_claude_agent() {
    let (Some(claude), Some(codex)) = (client_or_skip("claude"), client_or_skip("codex")) else {
        return;
    };
    let l = world("[capture]\ntimeout = \"1m\"\nmax_attempts = 1\n");
    let page = l.repo.join(".almanac/pages/codex.md");
    let mock = MockModel::start(vec![
        Turn::Tool {
            name: "exec_command".into(),
            input: json!({"cmd": "cat src/main.rs"}),
        },
        Turn::Text("main.rs is empty.".into()),
        Turn::Text("Then add a flag.".into()),
        claude_write(&page.display().to_string(), PAGE),
        Turn::Text("Wrote the page.".into()),
    ]);
    let exec = |args: &[&str]| {
        let mut a = vec!["exec", "--json", "--skip-git-repo-check"];
        a.extend_from_slice(args);
        let out = run_client(&l.w, &mock, &codex, &a, &l.repo);
        assert!(
            out.status.success(),
            "{}",
            crate::agents_real::describe(&out, &mock)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = exec(&["What is in src/main.rs?"]);
    let thread = out
        .lines()
        .filter_map(|x| serde_json::from_str::<serde_json::Value>(x).ok())
        .find(|e| e["type"] == "thread.started")
        .and_then(|e| e["thread_id"].as_str().map(str::to_string))
        .expect("thread.started");
    exec(&["resume", &thread, "Add a --verbose flag"]);
    let rollout = walkdir::WalkDir::new(l.w.home().join(".codex/sessions"))
        .into_iter()
        .filter_map(|e| e.ok())
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(&format!("{thread}.jsonl"))
        })
        .expect("the rollout")
        .into_path();
    let size = std::fs::metadata(&rollout).unwrap().len();
    let s = sweep_apps(&l, &mock, &claude, "codex");
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(started[0]["transcriptPath"], rollout.display().to_string());
    l.wait_idle();
    let run = l.runs()[0].clone();
    let why = format!("{run}\n{}", run_log(&run));
    assert_eq!(run["status"], "done", "{why}");
    assert_eq!(
        std::fs::read_to_string(&page).ok().as_deref(),
        Some(PAGE),
        "{why}"
    );
    let entry = l.ledger()["entries"][format!("codex:{thread}")].clone();
    assert_eq!(entry["lastCapturedSize"], size, "{entry}");
    let agent = run["agentSessionId"].as_str().expect(&why).to_string();
    let own = claude_transcript(&l.w.home(), &agent).expect("the agent wrote its transcript");
    set_age(&own, HOURS_2);
    let s = sweep_apps(&l, &mock, &claude, "claude,codex");
    let skipped = find_by_path(&s, "skipped", &own).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(skipped["reason"], "internal-almanac-session", "{s}");
    assert!(items(&s, "started").is_empty(), "{s}");
    assert_eq!(mock.remaining(), 0);
}
