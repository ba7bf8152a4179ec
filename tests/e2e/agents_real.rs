//! The real Claude Code and Codex CLIs complete turns against the mock model server (no network), and
//! the shipped agent profiles keep them inside `.almanac/`. Skipped with a message when the CLIs are
//! absent, unless ALMANAC_REQUIRE_REAL_CLIENTS=1 (as `.ci/run` sets).

use crate::common::*;
use crate::mock_model::{MockModel, Turn};
use crate::real_clients::client_or_skip;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const PAGE: &str = "# X\n\nWritten by the mock model.\n";
pub const ORIGINAL_MAIN: &str = "fn main() {}\n";

/// A scratch repo with `.almanac/pages/` and `src/main.rs`.
pub fn scratch_repo(w: &World) -> PathBuf {
    let repo = w.repo("scratch");
    std::fs::create_dir_all(repo.join(".almanac/pages")).unwrap();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/main.rs"), ORIGINAL_MAIN).unwrap();
    repo
}

/// Environment for a real CLI pointed at `mock`, with HOME (and CODEX_HOME) in the world.
pub fn client_env(w: &World, mock: &MockModel) -> Vec<(String, String)> {
    let codex_home = w.home().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"gpt-4.1\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"{}/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n",
            mock.url()
        ),
    )
    .unwrap();
    [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", w.home().display().to_string()),
        ("CODEX_HOME", codex_home.display().to_string()),
        ("ANTHROPIC_BASE_URL", mock.url()),
        ("ANTHROPIC_API_KEY", "sk-ant-dummy-for-tests".into()),
        ("OPENAI_API_KEY", "sk-dummy-for-tests".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Runs `program args` in `cwd` with the mock's environment; killed after 60 s.
pub fn run_client(
    w: &World,
    mock: &MockModel,
    program: &Path,
    args: &[&str],
    cwd: &Path,
) -> Output {
    run_client_stdin(w, mock, program, args, cwd, None)
}

/// `run_client` with `stdin` as the client's standard input (as the shipped profiles give the prompt).
pub fn run_client_stdin(
    w: &World,
    mock: &MockModel,
    program: &Path,
    args: &[&str],
    cwd: &Path,
    stdin: Option<&str>,
) -> Output {
    run_program(
        program,
        args,
        cwd,
        &client_env(w, mock),
        stdin,
        Duration::from_secs(60),
    )
}

/// Runs `program args` in `cwd` with exactly `env`, as a process group killed after `limit`.
pub fn run_program(
    program: &Path,
    args: &[&str],
    cwd: &Path,
    env: &[(String, String)],
    stdin: Option<&str>,
    limit: Duration,
) -> Output {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("start the client");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(text.as_bytes());
    }
    let pid = child.id() as i32;
    let start = Instant::now();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        while start.elapsed() < limit {
            if flag.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    out
}

pub fn describe(out: &Output, mock: &MockModel) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}\nrequests: {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        mock.requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect::<Vec<_>>()
    )
}

pub fn claude_write(path: &str, content: &str) -> Turn {
    Turn::Tool {
        name: "Write".into(),
        input: json!({"file_path": path, "content": content}),
    }
}

/// Codex 0.171's shell tool (`exec_command`, a `cmd` string) writing `content` to `rel`, relative to
/// its working directory.
pub fn codex_write(rel: &str, content: &str) -> Turn {
    Turn::Tool {
        name: "exec_command".into(),
        input: json!({"cmd": format!("mkdir -p \"$(dirname {rel})\" && printf '%s' '{content}' > {rel}")}),
    }
}

#[test]
fn real_claude_completes_a_turn_against_the_mock() {
    let Some(claude) = client_or_skip("claude") else {
        return;
    };
    let w = World::new();
    let repo = scratch_repo(&w);
    let page = repo.join(".almanac/pages/x.md");
    let mock = MockModel::start(vec![
        claude_write(&page.display().to_string(), PAGE),
        Turn::Text("Wrote the page.".into()),
    ]);
    let start = Instant::now();
    let out = run_client(
        &w,
        &mock,
        &claude,
        &[
            "-p",
            "Write the page",
            "--output-format",
            "json",
            "--permission-mode",
            "acceptEdits",
        ],
        &repo,
    );
    assert!(out.status.success(), "{}", describe(&out, &mock));
    assert_eq!(
        std::fs::read_to_string(&page).ok().as_deref(),
        Some(PAGE),
        "{}",
        describe(&out, &mock)
    );
    assert_eq!(mock.remaining(), 0, "{}", describe(&out, &mock));
    let prompts = mock.requests();
    assert!(
        prompts
            .iter()
            .any(|r| r.body.to_string().contains("Write the page")),
        "the mock saw the prompt"
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn real_codex_completes_a_turn_against_the_mock() {
    let Some(codex) = client_or_skip("codex") else {
        return;
    };
    let w = World::new();
    let repo = scratch_repo(&w);
    let mock = MockModel::start(vec![
        codex_write(".almanac/pages/x.md", PAGE),
        Turn::Text("Wrote the page.".into()),
    ]);
    let start = Instant::now();
    let out = run_client(
        &w,
        &mock,
        &codex,
        &[
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--sandbox",
            "workspace-write",
            "Write the page",
        ],
        &repo,
    );
    assert!(out.status.success(), "{}", describe(&out, &mock));
    let tools: Vec<_> = mock
        .requests()
        .iter()
        .flat_map(|r| r.body["tools"].as_array().cloned().unwrap_or_default())
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(
        std::fs::read_to_string(repo.join(".almanac/pages/x.md"))
            .ok()
            .as_deref(),
        Some(PAGE),
        "tools offered: {tools:?}\n{}",
        describe(&out, &mock)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("thread.started"));
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

/// The argv of a shipped profile (`agents/<name>.yaml`), placeholders filled (`{name:toml}` as a TOML
/// string).
pub fn shipped_argv(name: &str, vars: &[(&str, &str)]) -> Vec<String> {
    let path = format!("{}/agents/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    let v: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let mut a = a.as_str().unwrap().to_string();
            for (k, val) in vars {
                let toml = format!("\"{}\"", val.replace('\\', "\\\\").replace('"', "\\\""));
                a = a.replace(&format!("{{{k}:toml}}"), &toml);
                a = a.replace(&format!("{{{k}}}"), val);
            }
            assert!(
                !a.contains("{repo") && !a.contains("{wiki") && !a.contains("{key_dir"),
                "a placeholder left unfilled: {a}"
            );
            a
        })
        .collect()
}

/// The tool results the client sent back to the mock, as text, in order.
pub fn tool_results(mock: &MockModel) -> Vec<String> {
    mock.requests()
        .iter()
        .filter_map(|r| {
            let msgs = r.body["messages"]
                .as_array()
                .or(r.body["input"].as_array())?;
            Some(msgs.last()?.to_string())
        })
        .filter(|m| m.contains("tool_result") || m.contains("function_call_output"))
        .collect()
}

#[test]
fn shipped_claude_profile_refuses_writes_outside_the_wiki() {
    let Some(claude) = client_or_skip("claude") else {
        return;
    };
    let w = World::new();
    let repo = scratch_repo(&w);
    // A user whose own settings say acceptEdits: the profile must not inherit it.
    std::fs::create_dir_all(w.home().join(".claude")).unwrap();
    std::fs::write(
        w.home().join(".claude/settings.json"),
        r#"{"permissions":{"defaultMode":"acceptEdits"}}"#,
    )
    .unwrap();
    let main = repo.join("src/main.rs").display().to_string();
    let page = repo.join(".almanac/pages/x.md");
    let mock = MockModel::start(vec![
        claude_write(&main, "evil\n"),
        Turn::Tool {
            name: "Edit".into(),
            input: json!({"file_path": main, "old_string": "fn", "new_string": "evil"}),
        },
        Turn::Tool {
            name: "Bash".into(),
            input: json!({"command": format!("echo evil > {main}")}),
        },
        claude_write(&page.display().to_string(), PAGE),
        Turn::Text("Done.".into()),
    ]);
    let key_dir = w.home().join(".codealmanac/state").display().to_string();
    let argv = shipped_argv(
        "claude",
        &[
            ("session_id", "0b6f3c2e-58a1-4e0f-9d7c-2a4b6c8d0e10"),
            ("key_dir", &key_dir),
        ],
    );
    assert!(!argv.iter().any(|a| a == "acceptEdits"), "{argv:?}");
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    // The shipped profile gives the prompt on stdin, as almanac does.
    let out = run_client_stdin(&w, &mock, &claude, &args, &repo, Some("Update the wiki"));
    let why = describe(&out, &mock);
    assert!(out.status.success(), "{why}");
    assert_eq!(mock.remaining(), 0, "every scripted turn was taken: {why}");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/main.rs")).unwrap(),
        ORIGINAL_MAIN,
        "{why}"
    );
    assert_eq!(
        std::fs::read_to_string(&page).ok().as_deref(),
        Some(PAGE),
        "{why}"
    );
    // The refusals reach the model as errors, and the result lists them.
    let results = tool_results(&mock);
    assert_eq!(results.len(), 4, "{results:?}");
    for r in &results[..3] {
        assert!(r.contains("\"is_error\":true"), "refused: {r}");
    }
    assert!(
        !results[3].contains("\"is_error\":true"),
        "allowed: {}",
        results[3]
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON result");
    let denied = result["permission_denials"].to_string();
    assert!(denied.contains("src/main.rs"), "{result}");
}

#[test]
fn shipped_codex_profile_refuses_writes_outside_the_wiki() {
    let Some(codex) = client_or_skip("codex") else {
        return;
    };
    let w = World::new();
    let repo = scratch_repo(&w);
    let main = repo.join("src/main.rs").display().to_string();
    let mock = MockModel::start(vec![
        Turn::Tool {
            name: "exec_command".into(),
            input: json!({"cmd": format!("echo evil > {main}")}),
        },
        Turn::Tool {
            name: "exec_command".into(),
            input: json!({"cmd": format!("echo evil > {main}"), "sandbox_permissions": "require_escalated", "justification": "fix it"}),
        },
        Turn::Tool {
            name: "exec_command".into(),
            input: json!({"cmd": format!("echo evil > {}", w.root().join("outside.txt").display())}),
        },
        // Its working directory is the wiki.
        codex_write("pages/x.md", PAGE),
        Turn::Text("Done.".into()),
    ]);
    let repo_s = repo.display().to_string();
    let wiki_s = repo.join(".almanac").display().to_string();
    let key_dir = w.home().join(".codealmanac/state").display().to_string();
    let argv = shipped_argv(
        "codex",
        &[("repo", &repo_s), ("wiki", &wiki_s), ("key_dir", &key_dir)],
    );
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    let out = run_client_stdin(&w, &mock, &codex, &args, &repo, Some("Update the wiki"));
    let why = describe(&out, &mock);
    assert!(out.status.success(), "{why}");
    assert_eq!(mock.remaining(), 0, "every scripted turn was taken: {why}");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/main.rs")).unwrap(),
        ORIGINAL_MAIN,
        "{why}"
    );
    assert!(!w.root().join("outside.txt").exists(), "{why}");
    assert_eq!(
        std::fs::read_to_string(repo.join(".almanac/pages/x.md"))
            .ok()
            .as_deref(),
        Some(PAGE),
        "{why}"
    );
    let results = tool_results(&mock);
    assert!(results[0].contains("Read-only file system"), "{results:?}");
    assert!(results[1].contains("reject"), "{results:?}");
    assert!(results[2].contains("Read-only file system"), "{results:?}");
}

#[test]
fn real_claude_capture_run_writes_only_the_wiki() {
    let Some(claude) = client_or_skip("claude") else {
        return;
    };
    let l = crate::live::live_world(1);
    // The default agent: the shipped `claude` profile.
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        "[capture]\ntimeout = \"1m\"\nmax_attempts = 1\n",
    )
    .unwrap();
    std::fs::create_dir_all(l.repo.join("src")).unwrap();
    std::fs::write(l.repo.join("src/main.rs"), ORIGINAL_MAIN).unwrap();
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let main = l.repo.join("src/main.rs").display().to_string();
    let page = l.repo.join(".almanac/pages/x.md");
    let mock = MockModel::start(vec![
        Turn::Tool {
            name: "Read".into(),
            input: json!({"file_path": l.transcript.display().to_string()}),
        },
        claude_write(&main, "evil\n"),
        claude_write(&page.display().to_string(), PAGE),
        Turn::Text("Updated the wiki.".into()),
    ]);
    let path = format!(
        "{}:{}",
        claude.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = l.w.almanac();
    for (k, v) in client_env(&l.w, &mock) {
        cmd.env(k, v);
    }
    cmd.env("PATH", &path).args([
        "capture", "sweep", "--json", "--quiet", "0m", "--apps", "claude",
    ]);
    let s = json_ok(&mut cmd)["summary"].clone();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    l.wait_idle();
    let run = &l.runs()[0];
    let log = std::fs::read_to_string(run["logPath"].as_str().unwrap()).unwrap_or_default();
    assert_eq!(run["status"], "done", "{run}\n{log}");
    assert_eq!(
        std::fs::read_to_string(&page).ok().as_deref(),
        Some(PAGE),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(&main).unwrap(),
        ORIGINAL_MAIN,
        "{log}"
    );
    assert!(run.get("wroteOutsideWiki").is_none(), "{run}");
    // The refusal is in the run's log (the JSON result's permission_denials).
    assert!(
        log.contains("permission_denials") && log.contains("src/main.rs"),
        "{log}"
    );
    // The agent got the capture prompt and could read the transcript outside the repo.
    let reqs = mock.requests();
    assert!(
        reqs.iter()
            .any(|r| r.body.to_string().contains("almanac-capture-run: ")),
        "the mock saw the capture prompt"
    );
    let results = tool_results(&mock);
    assert!(
        results[0].contains("message 2") && !results[0].contains("\"is_error\":true"),
        "{results:?}"
    );
    assert!(results[1].contains("\"is_error\":true"), "{results:?}");
    assert!(attention_free(&l));
}

fn attention_free(l: &crate::live::Live) -> bool {
    let s = l.w.dry_run(&["--quiet", "0m"]);
    items(&s, "needsAttention")
        .iter()
        .all(|i| i["reason"] != "agent-wrote-outside-wiki")
}
