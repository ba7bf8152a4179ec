//! A real Codex capture run through almanac: `[capture] agent = "codex"` with the shipped
//! profile, Codex 0.171.0 pointed at the mock model server. Skipped with a message when the CLI is absent,
//! unless ALMANAC_REQUIRE_REAL_CLIENTS=1.

use crate::agents_real::{client_env, codex_write, ORIGINAL_MAIN, PAGE};
use crate::common::*;
use crate::mock_model::{MockModel, Turn};
use crate::real_clients::client_or_skip;
use serde_json::json;

/// The `thread_id` of the `thread.started` event in the run's log (Codex's stdout).
fn thread_started(log: &str) -> Option<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "thread.started")
        .and_then(|v| v["thread_id"].as_str().map(str::to_string))
}

/// Codex's rollouts under `$CODEX_HOME/sessions/`.
fn rollouts(codex_home: &std::path::Path) -> Vec<std::path::PathBuf> {
    walkdir::WalkDir::new(codex_home.join("sessions"))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "jsonl"))
        .map(|e| e.into_path())
        .collect()
}

#[test]
fn real_codex_capture_run_writes_only_the_wiki_and_skips_its_own_rollout() {
    let Some(codex) = client_or_skip("codex") else {
        return;
    };
    let l = crate::live::live_world(1);
    // The shipped `codex` profile.
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        "[capture]\nagent = \"codex\"\ntimeout = \"1m\"\nmax_attempts = 1\n",
    )
    .unwrap();
    std::fs::create_dir_all(l.repo.join("src")).unwrap();
    let main = l.repo.join("src/main.rs");
    std::fs::write(&main, ORIGINAL_MAIN).unwrap();
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let mock = MockModel::start(vec![
        // The agent reads the conversation file its prompt names.
        Turn::ToolOnRequest {
            name: "exec_command".into(),
            input: json!({"cmd": "cat {}"}),
            pattern: r#"(/[^\s"\\]+\.transcript\.md)"#.into(),
        },
        Turn::Tool {
            name: "exec_command".into(),
            input: json!({"cmd": format!("echo evil > {}", main.display())}),
        },
        // Its working directory is the wiki.
        codex_write("pages/x.md", PAGE),
        Turn::Text("Updated the wiki.".into()),
    ]);
    let path = format!(
        "{}:{}",
        codex.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The sweeps, the worker and the agent share one environment, so one CODEX_HOME: the sweep after
    // the run sees the rollout the agent wrote.
    let env = client_env(&l.w, &mock);
    let codex_home =
        std::path::PathBuf::from(&env.iter().find(|(k, _)| k == "CODEX_HOME").unwrap().1);
    let sweep = |extra: &[&str]| {
        let mut cmd = l.w.almanac();
        for (k, v) in &env {
            cmd.env(k, v);
        }
        cmd.env("PATH", &path)
            .args(["capture", "sweep", "--json", "--quiet", "0m"])
            .args(extra);
        json_ok(&mut cmd)["summary"].clone()
    };
    let s = sweep(&[]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(
        started[0]["transcriptPath"],
        l.transcript.display().to_string()
    );
    l.wait_idle();
    let run = &l.runs()[0];
    let log = std::fs::read_to_string(run["logPath"].as_str().unwrap()).unwrap_or_default();
    let why = format!("{run}\n{log}");
    assert_eq!(run["status"], "done", "{why}");
    assert_eq!(run["agent"], "codex", "{why}");
    assert_eq!(mock.remaining(), 0, "every scripted turn was taken: {why}");
    assert_eq!(
        std::fs::read_to_string(l.repo.join(".almanac/pages/x.md"))
            .ok()
            .as_deref(),
        Some(PAGE),
        "{why}"
    );
    assert_eq!(
        std::fs::read_to_string(&main).unwrap(),
        ORIGINAL_MAIN,
        "{why}"
    );
    assert!(run.get("wroteOutsideWiki").is_none(), "{why}");
    assert_eq!(l.entry()["lastCapturedLine"], 3, "the cursor moved: {why}");
    // The agent got the capture prompt, read the transcript, and its write outside was refused.
    assert!(
        mock.requests()
            .iter()
            .any(|r| r.body.to_string().contains("almanac-capture-run: ")),
        "the mock saw the capture prompt"
    );
    let outputs: Vec<String> = mock
        .requests()
        .iter()
        .filter_map(|r| Some(r.body["input"].as_array()?.last()?.to_string()))
        .filter(|m| m.contains("function_call_output"))
        .collect();
    // What it read is the new part's conversation: its first prompt under its line, the last one too.
    assert!(
        outputs[0].contains("[L1] user:")
            && outputs[0].contains("message 0")
            && outputs[0].contains("message 2"),
        "{outputs:?}"
    );
    assert!(outputs[1].contains("Read-only file system"), "{outputs:?}");
    // The run's agent session is Codex's thread.
    let thread = thread_started(&log).expect("Codex printed thread.started");
    assert_eq!(run["agentSessionId"], thread.as_str(), "{why}");
    // Codex wrote its rollout under CODEX_HOME; the next sweep sees it and skips it as almanac's own.
    let own: Vec<_> = rollouts(&codex_home)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(&thread))
        .collect();
    assert_eq!(own.len(), 1, "{:?}", rollouts(&codex_home));
    // It ran with the wiki as its working directory (`--cd {repo}/.almanac`): the rollout's cwd is
    // inside the repo, so it maps to the repo like any session there.
    let meta: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&own[0])
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(meta["type"], "session_meta", "{meta}");
    assert_eq!(meta["payload"]["id"], thread.as_str(), "{meta}");
    assert_eq!(
        meta["payload"]["cwd"],
        l.repo.join(".almanac").display().to_string(),
        "{meta}"
    );
    set_age(&own[0], HOURS_2);
    let s = sweep(&[]);
    let skipped = find_by_path(&s, "skipped", &own[0]).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(skipped["reason"], "internal-almanac-session", "{s}");
    assert_eq!(skipped["repoRoot"], l.repo.display().to_string(), "{s}");
    assert!(items(&s, "started").is_empty(), "{s}");
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
    assert_eq!(l.runs().len(), 1);
}
