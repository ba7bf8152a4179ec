//! The real Cline CLI 3.0.65 and Continue CLI (`cn`) 1.5.47, run offline against the mock model, write
//! the JSON stores almanac reads into views (rules/cline.yaml, rules/continue.yaml). For each CLI, in a
//! repo of a live world (the fake capture agent of live.rs), as in real_stores.rs:
//! 1. one prompt; the mock answers with a tool call reading README.md (Cline: then a `spawn_agent`
//!    subagent, whose one answer comes in between), then text;
//! 2. `capture sessions --apps <id>` lists the session under the id the CLI itself lists (`cline
//!    history --json`, `cn ls --json`), in the repo, with one user turn whose text is the prompt; Cline's
//!    subagent (`agent_<id>.messages.json` beside the session's) is not listed;
//! 3. a live sweep starts one run for it;
//! 4. the CLI resumes the same session with a second prompt; the next sweep starts exactly one run,
//!    for the messages after the ones captured, and the run's readable copy holds the second prompt
//!    there.
//!
//! Resuming: `cn -p --resume` goes on in the most recent session headless. Cline 3.0.65's `--id` always
//! opens the TUI (it refuses without a terminal), but its Agent Client Protocol mode (`cline --acp`:
//! JSON-RPC over stdio, as editors drive it) loads a saved session (`session/load`) and takes a prompt
//! in it (`session/prompt`), appending to the same `<id>.messages.json`. ACP asks the client before
//! each tool call (`session/request_permission`): the test allows it. ACP reads the provider from the
//! environment (CLINE_PROVIDER, CLINE_API_KEY), the base URL from what `cline auth` saved.
//!
//! Continue has no subagent here: `--beta-subagent-tool` offers a `Subagent` tool, but it can only run
//! agents defined on Continue's hub, and none is (it answers "Unknown agent type").
//!
//! Cline starts a detached hub daemon (`cline --cline-hub-daemon`, on the fixed port 25463) that
//! outlives the run and would be shared by parallel runs: CLINE_SESSION_BACKEND_MODE=local runs every
//! session in the CLI's own process, so none starts. The test checks that no Cline process of its home
//! is left (and ends any it finds, by pid) and that no hub discovery file was written.
//!
//! `.ci/run` installs the pinned CLIs under `$CLIENTS/node_modules` (ALMANAC_CLIENTS_BIN is its
//! `.bin`); locally `~/.cache/almanac-ci/more-b/node_modules/.bin` is tried too. Without them a test
//! says why it skips, and fails under ALMANAC_REQUIRE_REAL_CLIENTS=1. Nothing leaves 127.0.0.1 (checked
//! once with `strace -f -e trace=connect,sendto,sendmmsg`: loopback connections only, not even a DNS
//! query): Cline's update check, OpenTelemetry export (otel.cline.bot) and feature-flag poll
//! (data.cline.bot) are off; Continue's telemetry, metrics and auto-update are off, and its start-up
//! version lookup (api.continue.dev), which no setting turns off, is refused by a preloaded `fetch`
//! wrapper (`Cli::env`). Each CLI run is bounded, and its process group is killed once it exits.

use crate::common::*;
use crate::live::{live_world, Live};
use crate::mock_model::{MockModel, Turn};
use crate::real_clients::require;
use crate::real_stores::{
    captured_first, captured_second, describe, found_once, prepare_repo, run_client as run,
    sessions, write_config, FIRST, FIRST_ANSWER, RUN_LIMIT, SECOND, SECOND_ANSWER, SUB_ANSWER,
    SUB_PROMPT,
};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// Preloaded into `cn` (NODE_OPTIONS): `fetch` refuses every host but the loopback.
const LOOPBACK_ONLY_FETCH: &str = r#"'use strict';
const realFetch = globalThis.fetch;
globalThis.fetch = function (input, init) {
  const url = typeof input === 'string' || input instanceof URL ? String(input) : input.url;
  const host = new URL(url).hostname;
  if (host !== '127.0.0.1' && host !== 'localhost' && host !== '[::1]') {
    return Promise.reject(new TypeError('fetch to ' + host + ' refused by the test (loopback only)'));
  }
  return realFetch.call(this, input, init);
};
"#;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cli {
    Cline,
    Continue,
}

impl Cli {
    fn id(self) -> &'static str {
        match self {
            Cli::Cline => "cline",
            Cli::Continue => "continue",
        }
    }

    /// The command npm links into `.bin`.
    fn command(self) -> &'static str {
        match self {
            Cli::Cline => "cline",
            Cli::Continue => "cn",
        }
    }

    /// The installed CLI (`$ALMANAC_CLIENTS_BIN/<cmd>`, then the local cache), or None with a
    /// message; a panic when ALMANAC_REQUIRE_REAL_CLIENTS=1.
    fn installed_or_skip(self) -> Option<PathBuf> {
        let mut dirs = Vec::new();
        if let Ok(bin) = std::env::var("ALMANAC_CLIENTS_BIN") {
            dirs.push(PathBuf::from(bin));
        }
        if let Some(home) = std::env::var_os("HOME") {
            dirs.push(Path::new(&home).join(".cache/almanac-ci/more-b/node_modules/.bin"));
        }
        let found = dirs
            .into_iter()
            .map(|d| d.join(self.command()))
            .find(|p| p.is_file());
        if found.is_none() {
            let why = format!(
                "`{}` in $ALMANAC_CLIENTS_BIN or ~/.cache/almanac-ci/more-b/node_modules/.bin",
                self.command()
            );
            if require() {
                panic!("ALMANAC_REQUIRE_REAL_CLIENTS=1 but {why} is not installed; .ci/run installs it");
            }
            eprintln!("skipping: no {why}; .ci/run installs it");
        }
        found
    }

    /// The mock's script for the first prompt: read README.md (Cline: then start a subagent, whose one
    /// answer comes in between), then the answer.
    fn first_script(self, repo: &Path) -> Vec<Turn> {
        let readme = repo.join("README.md").display().to_string();
        let tool = |name: &str, input: Value| Turn::Tool {
            name: name.into(),
            input,
        };
        match self {
            Cli::Cline => vec![
                tool("read_files", json!({"files": [{"path": readme}]})),
                tool(
                    "spawn_agent",
                    json!({"systemPrompt": "You are a careful helper.", "task": SUB_PROMPT}),
                ),
                Turn::Text(SUB_ANSWER.into()),
                Turn::Text(FIRST_ANSWER.into()),
            ],
            Cli::Continue => vec![
                tool("Read", json!({"filepath": readme})),
                Turn::Text(FIRST_ANSWER.into()),
            ],
        }
    }

    /// The mock's script for the resumed prompt: read README.md again, then the answer.
    fn second_script(self, repo: &Path) -> Vec<Turn> {
        let readme = repo.join("README.md").display().to_string();
        let (name, input) = match self {
            Cli::Cline => ("read_files", json!({"files": [{"path": readme}]})),
            Cli::Continue => ("Read", json!({"filepath": readme})),
        };
        vec![
            Turn::Tool {
                name: name.into(),
                input,
            },
            Turn::Text(SECOND_ANSWER.into()),
        ]
    }

    /// The environment (and config files in the world's home) that point the CLI at the mock, with
    /// everything that would leave 127.0.0.1 turned off. Cline's provider is set by `cline auth`
    /// (`prepare`).
    fn env(self, w: &World, mock: &MockModel) -> Vec<(String, String)> {
        let home = w.home();
        let at = |rel: &str| home.join(rel).display().to_string();
        let mut env: Vec<(String, String)> = vec![
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".into(), home.display().to_string()),
            ("XDG_CONFIG_HOME".into(), at(".config")),
            ("XDG_DATA_HOME".into(), at(".local/share")),
            ("XDG_CACHE_HOME".into(), at(".cache")),
            ("XDG_STATE_HOME".into(), at(".local/state")),
            ("NO_COLOR".into(), "1".into()),
        ];
        let mut add = |k: &str, v: &str| env.push((k.to_string(), v.to_string()));
        match self {
            Cli::Cline => {
                add("CLINE_NO_AUTO_UPDATE", "1");
                // No hub daemon: sessions run in the CLI's own process.
                add("CLINE_SESSION_BACKEND_MODE", "local");
                // The only switch for the PostHog feature-flag poll (data.cline.bot): it is made
                // only when neither IS_TEST nor E2E_TEST is "true".
                add("E2E_TEST", "true");
                // The OpenTelemetry export (otel.cline.bot) is on unless the user opted out.
                write_config(
                    &home.join(".cline/data/settings/global-settings.json"),
                    &json!({"telemetryOptOut": true, "autoUpdateEnabled": false}),
                );
            }
            Cli::Continue => {
                add("CONTINUE_CLI_ENABLE_TELEMETRY", "0");
                add("CONTINUE_METRICS_ENABLED", "0");
                // Tells cn it was just updated: it does not look for (and npm-install) a newer one.
                add("CONTINUE_CLI_AUTO_UPDATED", "true");
                // cn asks https://api.continue.dev/cn/info for the latest version on every start,
                // whatever the settings: Node's fetch is wrapped to refuse any host but the loopback
                // (cn logs the failure at debug level and goes on).
                let guard = w.root().join("loopback-only-fetch.cjs");
                std::fs::write(&guard, LOOPBACK_ONLY_FETCH).unwrap();
                add("NODE_OPTIONS", &format!("--require={}", guard.display()));
                let config = home.join(".continue/config.yaml");
                std::fs::create_dir_all(config.parent().unwrap()).unwrap();
                std::fs::write(
                    &config,
                    format!(
                        "name: Local Mock\nversion: 1.0.0\nschema: v1\nmodels:\n  - name: Mock GPT\n    \
                         provider: openai\n    model: gpt-4.1\n    apiBase: {}/v1\n    apiKey: dummy-for-tests\n    \
                         roles: [chat, edit, apply]\n    capabilities: [tool_use]\n",
                        mock.url()
                    ),
                )
                .unwrap();
            }
        }
        env
    }

    /// The arguments for one prompt, a new session or (`resume`) the last one continued: `cline
    /// --json <prompt>`; `cn -p [--resume] <prompt> --config <file>`. Cline resumes over ACP instead.
    fn args(self, w: &World, prompt: &str, resume: bool) -> Vec<String> {
        match self {
            Cli::Cline => {
                assert!(!resume, "Cline resumes with `cline_acp_prompt`");
                vec!["--json".into(), prompt.into()]
            }
            Cli::Continue => {
                let mut args = vec!["-p".to_string()];
                if resume {
                    args.push("--resume".into());
                }
                args.push(prompt.into());
                args.push("--config".into());
                args.push(w.home().join(".continue/config.yaml").display().to_string());
                args
            }
        }
    }

    /// The sessions the CLI itself lists, as (id, first prompt): `cline history --json` (lead sessions
    /// only), `cn ls --json`.
    fn listed(self, program: &Path, cwd: &Path, env: &[(String, String)]) -> Vec<(String, String)> {
        let (args, list, id, prompt): (&[&str], _, _, _) = match self {
            Cli::Cline => (&["history", "--json"], "", "sessionId", "prompt"),
            Cli::Continue => (&["ls", "--json"], "sessions", "id", "firstUserMessage"),
        };
        let ran = run(program, cwd, env, args, None);
        assert_eq!(ran.code, Some(0), "{args:?}: {}", ran.stderr);
        let v: Value = serde_json::from_str(ran.stdout.trim())
            .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {}", ran.stdout));
        let rows = if list.is_empty() { &v } else { &v[list] };
        rows.as_array()
            .unwrap_or_else(|| panic!("{args:?}: {v}"))
            .iter()
            .map(|r| {
                (
                    r[id].as_str().unwrap_or_default().to_string(),
                    r[prompt].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

/// The Cline processes (pid, command line) whose HOME is `home`: a hub daemon would be one, detached
/// from the run's process group.
fn cline_processes(home: &Path) -> Vec<(i32, String)> {
    let want = format!("HOME={}", home.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .unwrap_or_default();
        if cmdline.contains("cline") {
            out.push((pid, cmdline));
        }
    }
    out
}

/// Ends (by pid) every Cline process of the home when dropped, so a failed assertion leaves none.
struct EndCline(PathBuf);

impl Drop for EndCline {
    fn drop(&mut self) {
        for (pid, _) in cline_processes(&self.0) {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// A `cline --acp` process driven as an editor would drive it: JSON-RPC lines on stdin and stdout.
struct Acp {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: Receiver<String>,
    deadline: Instant,
    next_id: u64,
    /// Everything the agent sent.
    seen: Vec<Value>,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Acp {
    fn start(program: &Path, cwd: &Path, env: &[(String, String)]) -> Acp {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr");
        let mut child = std::process::Command::new(program)
            .arg("--acp")
            .current_dir(cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .process_group(0)
            .spawn()
            .expect("start cline --acp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Acp {
            stdin: child.stdin.take(),
            child,
            lines,
            deadline: Instant::now() + RUN_LIMIT,
            next_id: 0,
            seen: Vec::new(),
            stderr,
            _dir: dir,
        }
    }

    fn send(&mut self, v: Value) {
        let pipe = self.stdin.as_mut().unwrap();
        writeln!(pipe, "{v}").and_then(|_| pipe.flush()).unwrap();
    }

    /// Calls `method` and waits for its result, allowing every tool call the agent asks about.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .map_err(|e| format!("{method}: no answer within {RUN_LIMIT:?} ({e})"))?;
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            self.seen.push(msg.clone());
            match (msg.get("method"), msg.get("id")) {
                (Some(m), Some(req)) => {
                    let reply = if m == "session/request_permission" {
                        let options = msg["params"]["options"].as_array().cloned();
                        let allow = options
                            .unwrap_or_default()
                            .into_iter()
                            .find(|o| o["kind"].as_str().is_some_and(|k| k.starts_with("allow")));
                        let allow = allow.unwrap_or_else(|| panic!("no allow option: {msg}"));
                        json!({"jsonrpc": "2.0", "id": req, "result": {"outcome":
                            {"outcome": "selected", "optionId": allow["optionId"]}}})
                    } else {
                        json!({"jsonrpc": "2.0", "id": req,
                            "error": {"code": -32601, "message": "not supported by the test"}})
                    };
                    self.send(reply);
                }
                (None, Some(got)) if *got == id => {
                    return match msg.get("error") {
                        Some(e) => Err(format!("{method}: {e}")),
                        None => Ok(msg["result"].clone()),
                    };
                }
                _ => {}
            }
        }
    }

    /// Closes stdin (the agent then exits), waits a while, and kills the process group.
    fn finish(mut self) -> (Vec<Value>, String) {
        self.stdin = None;
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until && self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        (std::mem::take(&mut self.seen), stderr)
    }
}

/// Cline's headless resume: `cline --acp`, `session/load` of `session` in `cwd`, then one
/// `session/prompt`. Returns the session ids the agent's notifications named.
fn cline_acp_prompt(
    program: &Path,
    cwd: &Path,
    env: &[(String, String)],
    session: &str,
    prompt: &str,
) -> Vec<String> {
    let mut env = env.to_vec();
    for (k, v) in [
        ("CLINE_PROVIDER", "openai-compatible"),
        ("CLINE_API_KEY", "dummy-for-tests"),
        ("CLINE_MODEL", "gpt-4.1"),
    ] {
        env.push((k.into(), v.into()));
    }
    let mut acp = Acp::start(program, cwd, &env);
    let cwd = cwd.display().to_string();
    let steps = [
        (
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities":
                {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}}),
        ),
        (
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
        ),
        (
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": prompt}]}),
        ),
    ];
    let mut results = Vec::new();
    let mut failed = None;
    for (method, params) in steps {
        match acp.call(method, params) {
            Ok(r) => results.push(r),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let (seen, stderr) = acp.finish();
    if let Some(e) = failed {
        panic!("cline --acp: {e}\nstderr: {stderr}\nreceived: {seen:#?}");
    }
    assert_eq!(
        results[2]["stopReason"], "end_turn",
        "{results:?}\n{stderr}"
    );
    seen.iter()
        .filter(|m| m["method"] == "session/update")
        .filter_map(|m| m["params"]["sessionId"].as_str().map(str::to_string))
        .collect()
}

/// Cline's subagent: the `agent_<id>.messages.json` beside the session's, naming it as its parent.
/// Returns the subagent's session id.
fn cline_subagent(w: &World, session: &str) -> Option<String> {
    let dir = w.home().join(".cline/data/sessions").join(session);
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("agent_") && n.ends_with(".messages.json"))
        })
        .collect();
    assert_eq!(files.len(), 1, "one subagent file in {}", dir.display());
    let v: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(v["origin"]["parentThreadId"], session, "{v}");
    v["sessionId"].as_str().map(str::to_string)
}

fn prompt_run_resume_capture(cli: Cli) {
    let Some(program) = cli.installed_or_skip() else {
        return;
    };
    let l: Live = live_world(3);
    prepare_repo(&l.repo);
    let mock = MockModel::start(cli.first_script(&l.repo));
    let env = cli.env(&l.w, &mock);
    let _end = EndCline(l.w.home());

    if cli == Cli::Cline {
        let url = format!("{}/v1", mock.url());
        let args = [
            "auth",
            "-p",
            "openai",
            "-k",
            "dummy-for-tests",
            "-m",
            "gpt-4.1",
            "-b",
            &url,
        ];
        let ran = run(&program, &l.repo, &env, &args, None);
        assert_eq!(ran.code, Some(0), "cline auth: {}", describe(&ran, &mock));
    }

    // 1. One prompt.
    let args = cli.args(&l.w, FIRST, false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = run(&program, &l.repo, &env, &args, None);
    let said = describe(&ran, &mock);
    assert_eq!(ran.code, Some(0), "{} failed: {said}", cli.id());
    assert_eq!(mock.remaining(), 0, "every scripted turn was taken: {said}");
    let listed = cli.listed(&program, &l.repo, &env);
    assert_eq!(
        listed.len(),
        1,
        "{} lists one session: {listed:?}",
        cli.id()
    );
    let (session, prompt) = listed[0].clone();
    assert_eq!(prompt, FIRST, "{listed:?}");
    let sub = (cli == Cli::Cline).then(|| {
        let sub = cline_subagent(&l.w, &session)
            .unwrap_or_else(|| panic!("cline ran no subagent: {said}"));
        assert_ne!(sub, session);
        sub
    });

    // 2. Found under the id the CLI lists, in the repo, one prompt; the subagent is not a session.
    found_once(&l, cli.id(), &session, sub.as_deref());

    // 3. A live capture: one run, for the whole conversation so far, through the answer.
    // The tool calls the mock asked for are in the store as the CLI ran them.
    let tools: &[&str] = match cli {
        Cli::Cline => &["read_files", "spawn_agent"],
        Cli::Continue => &["Read"],
    };
    let (run1, captured) = captured_first(&l, cli.id(), &session, tools);

    // 4. The same session resumed with a second prompt.
    mock.queue(cli.second_script(&l.repo));
    match cli {
        Cli::Cline => {
            let named = cline_acp_prompt(&program, &l.repo, &env, &session, SECOND);
            assert!(
                !named.is_empty() && named.iter().all(|n| *n == session),
                "the resumed run is the same session: {named:?}"
            );
            assert_eq!(mock.remaining(), 0, "{:#?}", mock.requests().len());
        }
        Cli::Continue => {
            let args = cli.args(&l.w, SECOND, true);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ran = run(&program, &l.repo, &env, &args, None);
            let said = describe(&ran, &mock);
            assert_eq!(ran.code, Some(0), "cn resume failed: {said}");
            assert_eq!(mock.remaining(), 0, "{said}");
            assert!(ran.stdout.contains(SECOND_ANSWER), "{said}");
        }
    }
    let listed = cli.listed(&program, &l.repo, &env);
    assert_eq!(
        listed,
        vec![(session.clone(), FIRST.to_string())],
        "still the one session"
    );
    let rows = sessions(&l, cli.id());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["sessionId"], session.as_str(), "{rows:?}");
    assert_eq!(rows[0]["userTurns"], 2, "{rows:?}");
    assert_eq!(rows[0]["firstPrompt"], FIRST, "{rows:?}");
    assert_eq!(rows[0]["lastPrompt"], SECOND, "{rows:?}");

    // ... then captured from where the first run ended: exactly one run, whose range starts right
    // after the first run's last message.
    captured_second(&l, cli.id(), &session, (&run1, captured));

    if cli == Cli::Cline {
        // No hub daemon was started, and no Cline process is left.
        let left = cline_processes(&l.w.home());
        assert!(left.is_empty(), "Cline processes left: {left:?}");
        let hub = l.w.home().join(".cline/data/locks/hub");
        assert!(!hub.exists(), "a hub was started: {}", hub.display());
    }
}

#[test]
fn real_cline_session_is_captured_then_resumed_and_captured_again() {
    prompt_run_resume_capture(Cli::Cline);
}

#[test]
fn real_continue_session_is_captured_then_resumed_and_captured_again() {
    prompt_run_resume_capture(Cli::Continue);
}
