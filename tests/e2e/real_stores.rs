//! The real Gemini CLI 0.61.0, opencode 1.18.33 and Kilo CLI 7.7.7, run offline against the mock model,
//! write the stores almanac reads into views (a replay log; SQLite databases). For each CLI, in a repo
//! of a live world (the fake capture agent of live.rs):
//! 1. one prompt; the mock answers with a tool call reading README.md, a subagent, then text;
//! 2. `capture sessions --apps <id>` lists the session under the id the CLI itself printed, in the
//!    repo, with one user turn whose text is the prompt; the subagent is not listed;
//! 3. a live sweep starts one run for it;
//! 4. the CLI resumes the same session with a second prompt; the next sweep starts exactly one run,
//!    for the messages after the ones captured, and the run's readable copy holds the second prompt
//!    there.
//!
//! Gemini CLI's resume is the odd one: it writes the session's messages again, with a synthetic
//! `<id>_response` record after each message that called tools (the rule set leaves those out, so the
//! captured messages stay where they were), and, in a later minute than the session
//! began, it first writes a second log with the same session id and no prompt (`capture sessions`
//! lists it; the sweep skips it as a copy). See `gemini_log_a_minute_older`.
//!
//! `.ci/run` installs the pinned CLIs under `$CLIENTS/node_modules` (ALMANAC_CLIENTS_BIN is its
//! `.bin`); locally `~/.cache/almanac-ci/more-a/node_modules` is tried too. Without them a test says
//! why it skips, and fails under ALMANAC_REQUIRE_REAL_CLIENTS=1. Nothing leaves 127.0.0.1: telemetry,
//! update checks and model-list fetches are off, and opencode's and Kilo's start-up install of their
//! plugin package from npm is found already done (see `Cli::env`). Each CLI run is bounded, and its
//! process group is killed once it exits.

use crate::common::*;
use crate::live::{live_world, Live};
use crate::mock_model::{MockModel, Turn};
use crate::real_clients::{find_client, require};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The prompt of the first run, and of the resumed one, and the mock's answers to them.
pub(crate) const FIRST: &str = "What is in this project? Look at the README.";
pub(crate) const FIRST_ANSWER: &str = "Answer one: the project holds a README.";
pub(crate) const SECOND: &str = "Thanks. Now check the README once more.";
pub(crate) const SECOND_ANSWER: &str = "Answer two: it still holds a README.";
/// What the mock asks the subagent to do, and the subagent's answer.
pub(crate) const SUB_PROMPT: &str = "List the files of the project and report them.";
pub(crate) const SUB_ANSWER: &str = "The subagent found README.md.";
/// The most one CLI run may take (Kilo takes about 15 s here).
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(90);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cli {
    Gemini,
    Opencode,
    Kilo,
}

/// A CLI found on this machine: the program to start and the arguments before the CLI's own.
struct Installed {
    cli: Cli,
    program: PathBuf,
    prefix: Vec<String>,
    /// The file the CLI ships as (gemini.js, or the binary).
    file: PathBuf,
}

/// One finished run.
/// Waits for `child` until `limit` from `start`, then kills its process group (the client was started
/// as a group leader: whatever it left, or at the limit the client itself, goes with it). None when it
/// was still running at the limit.
pub(crate) fn wait_then_kill_group(
    child: &mut std::process::Child,
    start: Instant,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGKILL);
    }
    let _ = child.wait();
    status
}

/// Runs the CLI in `cwd` with `args` (and `stdin` piped in, or /dev/null); output goes to files (a
/// process the CLI leaves behind cannot hold a pipe open), the run is killed at RUN_LIMIT, and its
/// process group is killed once it exits.
pub(crate) fn run_client(
    program: &Path,
    cwd: &Path,
    env: &[(String, String)],
    args: &[&str],
    stdin: Option<&str>,
) -> Ran {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = std::process::Command::new(program)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .expect("start the client");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(text.as_bytes());
    }
    let status = wait_then_kill_group(&mut child, Instant::now(), RUN_LIMIT);
    let ran = Ran {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "{} {args:?} did not finish within {RUN_LIMIT:?}: {}",
        program.display(),
        ran.stderr
    );
    ran
}

/// One finished client run.
pub(crate) struct Ran {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Where the pinned CLIs' npm packages are: `$ALMANAC_CLIENTS_BIN/..` (CI), then the local cache.
fn node_modules_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(bin) = std::env::var("ALMANAC_CLIENTS_BIN") {
        out.push(Path::new(&bin).join(".."));
    }
    if let Some(home) = std::env::var_os("HOME") {
        out.push(Path::new(&home).join(".cache/almanac-ci/more-a/node_modules"));
    }
    out
}

impl Cli {
    fn id(self) -> &'static str {
        match self {
            Cli::Gemini => "gemini",
            Cli::Opencode => "opencode",
            Cli::Kilo => "kilo",
        }
    }

    /// The CLI's file inside node_modules.
    fn package_file(self) -> &'static str {
        match self {
            Cli::Gemini => "@google/gemini-cli/bundle/gemini.js",
            Cli::Opencode => "opencode-linux-x64/bin/opencode",
            Cli::Kilo => "@kilocode/cli-linux-x64/bin/kilo",
        }
    }

    /// The installed CLI, or None with a message; a panic when ALMANAC_REQUIRE_REAL_CLIENTS=1.
    fn installed_or_skip(self) -> Option<Installed> {
        let file = node_modules_dirs()
            .into_iter()
            .map(|d| d.join(self.package_file()))
            .find(|p| p.is_file());
        let found = match (self, file) {
            // Gemini CLI is a Node bundle: ALMANAC_CLIENTS_BIN's `node` (Node 22 in CI), else PATH's.
            (Cli::Gemini, Some(js)) => find_client("node").map(|node| Installed {
                cli: self,
                program: node,
                prefix: vec![js.display().to_string()],
                file: js,
            }),
            (_, Some(bin)) => Some(Installed {
                cli: self,
                program: bin.clone(),
                prefix: Vec::new(),
                file: bin,
            }),
            (_, None) => None,
        };
        if found.is_none() {
            let node = if self == Cli::Gemini {
                " (and a `node` on ALMANAC_CLIENTS_BIN or PATH)"
            } else {
                ""
            };
            let why = format!(
                "`{}` under $ALMANAC_CLIENTS_BIN/.. or ~/.cache/almanac-ci/more-a/node_modules{node}",
                self.package_file()
            );
            if require() {
                panic!("ALMANAC_REQUIRE_REAL_CLIENTS=1 but {why} is not installed; .ci/run installs it");
            }
            eprintln!("skipping: no {why}; .ci/run installs it");
        }
        found
    }

    /// The mock's script for the first prompt: read README.md, start a subagent (its one answer comes
    /// in between), then the answer.
    fn first_script(self, repo: &Path) -> Vec<Turn> {
        let readme = repo.join("README.md").display().to_string();
        let tool = |name: &str, input: Value| Turn::Tool {
            name: name.into(),
            input,
        };
        match self {
            // Gemini CLI's `invoke_agent` runs a subagent that must end by calling `complete_task`.
            Cli::Gemini => vec![
                tool("read_file", json!({"file_path": readme})),
                tool(
                    "invoke_agent",
                    json!({"agent_name": "generalist", "prompt": SUB_PROMPT}),
                ),
                tool("complete_task", json!({"result": {"response": SUB_ANSWER}})),
                Turn::Text(FIRST_ANSWER.into()),
            ],
            // opencode's and Kilo's `task` tool runs the subagent as a child session.
            Cli::Opencode | Cli::Kilo => vec![
                tool("read", json!({"filePath": readme})),
                tool(
                    "task",
                    json!({"description": "List the files", "prompt": SUB_PROMPT,
                        "subagent_type": "general"}),
                ),
                Turn::Text(SUB_ANSWER.into()),
                Turn::Text(FIRST_ANSWER.into()),
            ],
        }
    }

    /// The mock's script for the resumed prompt: read README.md again, then the answer.
    fn second_script(self, repo: &Path) -> Vec<Turn> {
        let readme = repo.join("README.md").display().to_string();
        let (name, input) = match self {
            Cli::Gemini => ("read_file", json!({"file_path": readme})),
            Cli::Opencode | Cli::Kilo => ("read", json!({"filePath": readme})),
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
    /// everything that would leave 127.0.0.1 turned off.
    fn env(self, inst: &Installed, w: &World, mock: &MockModel) -> Vec<(String, String)> {
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
            Cli::Gemini => {
                add("GEMINI_API_KEY", "dummy-for-tests");
                add("GOOGLE_GEMINI_BASE_URL", &mock.url());
                add("GEMINI_TELEMETRY_ENABLED", "false");
                add("CI", "1");
                write_config(
                    &home.join(".gemini/settings.json"),
                    &json!({
                        "security": {"auth": {"selectedType": "gemini-api-key"}},
                        "privacy": {"usageStatisticsEnabled": false},
                        "telemetry": {"enabled": false},
                        "general": {"enableAutoUpdate": false,
                            "enableAutoUpdateNotification": false}
                    }),
                );
            }
            Cli::Opencode | Cli::Kilo => {
                let (name, prefix, plugin, version) = match self {
                    Cli::Opencode => ("opencode", "OPENCODE", "@opencode-ai/plugin", "1.18.33"),
                    _ => ("kilo", "KILO", "@kilocode/plugin", "7.7.7"),
                };
                for var in [
                    "DISABLE_MODELS_FETCH",
                    "DISABLE_AUTOUPDATE",
                    "DISABLE_SHARE",
                    "DISABLE_LSP_DOWNLOAD",
                    "DISABLE_TERMINAL_TITLE",
                ] {
                    add(&format!("{prefix}_{var}"), "1");
                }
                let mut config = json!({
                    "autoupdate": false,
                    "share": "disabled",
                    "model": "mock/mock-model",
                    "small_model": "mock/mock-model",
                    "provider": {"mock": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Mock",
                        "options": {"baseURL": format!("{}/v1", mock.url()), "apiKey": "dummy-for-tests"},
                        "models": {"mock-model": {"name": "Mock Model", "tool_call": true}}
                    }},
                    "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"}
                });
                let dir = home.join(".config").join(name);
                if self == Cli::Kilo {
                    add("KILO_TELEMETRY_LEVEL", "off");
                    add("KILO_DISABLE_SESSION_INGEST", "1");
                    add("KILO_DISABLE_PRESENCE", "1");
                    add("KILO_NO_DAEMON", "1");
                    // What the npm wrapper (`.bin/kilo`) sets before it starts the binary.
                    let wasm = inst.file.parent().unwrap().join("tree-sitter");
                    add("KILO_TREE_SITTER_WASM_DIR", &wasm.display().to_string());
                    // Kilo's own providers fetch their model lists over the network whatever
                    // KILO_DISABLE_MODELS_FETCH says; turned off, they do not.
                    config["disabled_providers"] = json!(["kilo", "apertis"]);
                    write_config(&dir.join("kilo.jsonc"), &config);
                } else {
                    write_config(&dir.join("opencode.json"), &config);
                }
                // On start both install their plugin package into the config directory with npm's
                // Arborist unless that directory has node_modules/ and a package-lock.json naming it
                // (their `Npm.install`): found so, nothing is fetched.
                std::fs::create_dir_all(dir.join("node_modules")).unwrap();
                write_config(
                    &dir.join("package-lock.json"),
                    &json!({"packages": {"": {"dependencies": {plugin: version}}}}),
                );
            }
        }
        env
    }

    /// The arguments for one prompt (a new session, or `resume` continued), and what goes on stdin.
    /// opencode and Kilo get the prompt on stdin: `run` joins its message arguments and wraps each one
    /// that holds a space in literal double quotes, which would then be the prompt's text in the store.
    fn args(self, prompt: &str, resume: Option<&str>) -> (Vec<String>, Option<String>) {
        let mut args: Vec<String> = Vec::new();
        let stdin = match self {
            Cli::Gemini => {
                if let Some(id) = resume {
                    args.extend(["--resume".to_string(), id.to_string()]);
                }
                args.extend(
                    [
                        "-p",
                        prompt,
                        "--skip-trust",
                        "--approval-mode",
                        "yolo",
                        "-o",
                        "json",
                    ]
                    .map(str::to_string),
                );
                None
            }
            Cli::Opencode | Cli::Kilo => {
                args.extend(["run", "--format", "json"].map(str::to_string));
                if let Some(id) = resume {
                    args.extend(["--session".to_string(), id.to_string()]);
                }
                Some(prompt.to_string())
            }
        };
        (args, stdin)
    }

    /// The session id the CLI printed: Gemini's `-o json` object's `session_id`; the `sessionID` of
    /// opencode's and Kilo's JSON events (all of one session).
    fn printed_session_id(self, ran: &Ran) -> Option<String> {
        match self {
            Cli::Gemini => serde_json::from_str::<Value>(ran.stdout.trim()).ok()?["session_id"]
                .as_str()
                .map(str::to_string),
            Cli::Opencode | Cli::Kilo => {
                let ids: Vec<String> = events(ran)
                    .iter()
                    .filter_map(|e| e["sessionID"].as_str().map(str::to_string))
                    .collect();
                let first = ids.first()?.clone();
                ids.iter().all(|i| *i == first).then_some(first)
            }
        }
    }

    /// The subagent's session id, as the CLI wrote it: the `task` tool's result names the child
    /// session (opencode, Kilo); Gemini CLI writes the subagent's log under chats/<session id>/.
    fn subagent_id(self, ran: &Ran, w: &World, session: &str) -> Option<String> {
        match self {
            Cli::Gemini => {
                let logs: Vec<PathBuf> = walkdir::WalkDir::new(w.home().join(".gemini/tmp"))
                    .into_iter()
                    .filter_map(|e| e.ok())
                    .map(|e| e.into_path())
                    .filter(|p| {
                        p.extension().is_some_and(|x| x == "jsonl")
                            && p.parent()
                                .and_then(|d| d.file_name())
                                .is_some_and(|d| d == session)
                    })
                    .collect();
                assert_eq!(logs.len(), 1, "one subagent log: {logs:?}");
                let text = std::fs::read_to_string(&logs[0]).unwrap();
                let header: Value = serde_json::from_str(text.lines().next()?).ok()?;
                assert_eq!(header["kind"], "subagent", "{header}");
                header["sessionId"].as_str().map(str::to_string)
            }
            Cli::Opencode | Cli::Kilo => events(ran)
                .iter()
                .find(|e| e["type"] == "tool_use" && e["part"]["tool"] == "task")
                .and_then(|e| e["part"]["state"]["metadata"]["sessionId"].as_str())
                .map(str::to_string),
        }
    }
}

/// The JSON lines of a run's stdout.
fn events(ran: &Ran) -> Vec<Value> {
    ran.stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub(crate) fn write_config(path: &Path, v: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// What a failed run said, with the requests the mock got.
pub(crate) fn describe(ran: &Ran, mock: &MockModel) -> String {
    let requests: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| {
            format!(
                "{} {} tools={}",
                r.method,
                r.path,
                r.body["tools"].as_array().map_or(0, |t| t.len())
            )
        })
        .collect();
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}\nrequests: {requests:#?}",
        ran.code, ran.stdout, ran.stderr
    )
}

impl Installed {
    /// Runs one prompt in `cwd`; output goes to files (a process the CLI leaves behind cannot hold a
    /// pipe open), the run is killed at RUN_LIMIT, and its process group is killed once it exits.
    fn run(&self, cwd: &Path, env: &[(String, String)], prompt: &str, resume: Option<&str>) -> Ran {
        let (args, stdin) = self.cli.args(prompt, resume);
        let args: Vec<&str> = self
            .prefix
            .iter()
            .chain(&args)
            .map(String::as_str)
            .collect();
        run_client(&self.program, cwd, env, &args, stdin.as_deref())
    }
}

/// The repo the CLIs work in: a git repo (as a user's would be) holding README.md.
pub(crate) fn prepare_repo(repo: &Path) {
    std::fs::write(repo.join("README.md"), "# app\nA tiny project.\n").unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "README.md"],
        &[
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "commit",
            "-q",
            "-m",
            "init",
        ],
    ] {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(repo)
            .env("HOME", repo)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

pub(crate) fn sessions(l: &Live, app: &str) -> Vec<Value> {
    let mut cmd = l.w.almanac();
    cmd.args(["capture", "sessions", "--json", "--apps", app]);
    json_ok(&mut cmd)["sessions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The number of the conversation's entry (`[M12] user:`) that holds `needle`.
pub(crate) fn message_holding(text: &str, needle: &str) -> Option<u64> {
    let at = text.find(needle)?;
    let head = text[..at].rfind("[M")?;
    text[head + "[M".len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The one run a sweep started, for `session`.
pub(crate) fn one_started(s: &Value, session: &str) -> Value {
    let started = items(s, "started");
    assert_eq!(started.len(), 1, "exactly one run: {s}");
    assert_eq!(started[0]["sessionId"], session, "{s}");
    started[0].clone()
}

/// The number after `label` in `text` (`... message 7.` gives 7).
pub(crate) fn number_after(text: &str, label: &str) -> Option<u64> {
    let at = text.find(label)? + label.len();
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Gemini CLI names a session's log for the UTC minute it was made (`session-<YYYY-MM-DDTHH-MM>-<id8>
/// .jsonl`), and `--resume` first writes the header and the session context to a log named for the
/// current minute before it goes on in the session's own log: in a later minute, the usual case, that
/// is a second file with the same session id. The first run's log is named for the minute before, as if
/// that prompt were a minute older, so the resume always takes that path. Returns the log.
fn gemini_log_a_minute_older(w: &World, session: &str) -> PathBuf {
    let suffix = format!("-{}.jsonl", &session[..8]);
    let logs: Vec<PathBuf> = walkdir::WalkDir::new(w.home().join(".gemini/tmp"))
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.into_path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("session-") && n.ends_with(&suffix))
        })
        .collect();
    assert_eq!(logs.len(), 1, "one log for {session}: {logs:?}");
    let name = logs[0].file_name().unwrap().to_str().unwrap().to_string();
    let stamp = &name["session-".len()..name.len() - suffix.len()];
    let made = chrono::NaiveDateTime::parse_from_str(&format!("{stamp}-00"), "%Y-%m-%dT%H-%M-%S")
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let older = (made - chrono::Duration::minutes(1)).format("%Y-%m-%dT%H-%M");
    let to = logs[0].with_file_name(format!("session-{older}{suffix}"));
    std::fs::rename(&logs[0], &to).unwrap();
    to
}

/// Step 2 of a real store's run: `capture sessions` lists the one session (not its subagent, when there
/// is one) under `session`, in the repo, with the first prompt; a dry run counts the subagent and lists
/// it nowhere.
pub(crate) fn found_once(l: &Live, app: &str, session: &str, sub: Option<&str>) {
    let repo = l.repo.display().to_string();
    let rows = sessions(l, app);
    assert_eq!(
        rows.len(),
        1,
        "only the session, not its subagent: {rows:?}"
    );
    let row = &rows[0];
    assert_eq!(row["sessionId"], session, "{row}");
    assert_eq!(row["projectDir"], repo.as_str(), "{row}");
    assert_eq!(row["repoRoot"], repo.as_str(), "{row}");
    assert_eq!(row["userTurns"], 1, "{row}");
    assert_eq!(row["firstPrompt"], FIRST, "{row}");
    let dry = l.w.dry_run(&["--apps", app, "--quiet", "0m"]);
    if let Some(sub) = sub {
        assert_eq!(dry["stats"]["subagents"], 1, "{dry}");
        assert!(
            ["started", "skipped", "needsAttention"]
                .iter()
                .all(|list| items(&dry, list).iter().all(|i| i["sessionId"] != sub)),
            "the subagent {sub} is nowhere: {dry}"
        );
    }
}

/// Step 3: a live sweep starts one run for the whole conversation so far, through the first answer,
/// whose copy names each of `tools`; the run ends done. Its run id and the messages captured.
pub(crate) fn captured_first(l: &Live, app: &str, session: &str, tools: &[&str]) -> (String, u64) {
    let s = l.sweep_args(&["--apps", app]);
    l.wait_idle();
    let first = one_started(&s, session);
    let run1 = first["runId"].as_str().unwrap().to_string();
    let captured = first["toLine"].as_u64().unwrap() - 1;
    let p1 = l.prompt(&run1);
    assert!(
        p1.contains(&format!("Capture messages 1 to {captured}.")),
        "{p1}"
    );
    let copy1 = l.conversation(&run1);
    assert!(
        message_holding(&copy1, FIRST).is_some_and(|m| m < captured),
        "{copy1}"
    );
    assert_eq!(
        message_holding(&copy1, FIRST_ANSWER),
        Some(captured),
        "{copy1}"
    );
    // The tool calls the mock asked for are in the store as the CLI ran them.
    for tool in tools {
        assert!(copy1.contains(&format!("] tool {tool}")), "{tool}: {copy1}");
    }
    let runs = l.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "done", "{runs:?}");
    assert_eq!(
        l.ledger()["entries"][format!("{app}:{session}")]["status"],
        "done"
    );
    (run1, captured)
}

/// Step 5, after the session was resumed with the second prompt: the next live sweep starts exactly
/// one run, whose range starts right after the first run's last message (`captured`) and ends with the
/// second answer. The sweep's summary.
pub(crate) fn captured_second(
    l: &Live,
    app: &str,
    session: &str,
    (run1, captured): (&str, u64),
) -> Value {
    let s = l.sweep_args(&["--apps", app]);
    l.wait_idle();
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
    let second = one_started(&s, session);
    let run2 = second["runId"].as_str().unwrap().to_string();
    assert_ne!(run2, run1);
    let last = second["toLine"].as_u64().unwrap() - 1;
    let p2 = l.prompt(&run2);
    let through =
        number_after(&p2, "previously captured through message ").unwrap_or_else(|| panic!("{p2}"));
    assert!(
        p2.contains(&format!("Focus on messages {} to {last}.", through + 1)),
        "{p2}"
    );
    assert_eq!(through, captured, "{p2}");
    let copy2 = l.conversation(&run2);
    // The conversation lists the earlier prompts and the agent's latest answer before the new part
    // for context, once, before the new part; the second prompt and its answer are in the range to
    // capture.
    assert!(
        message_holding(&copy2, FIRST).is_some_and(|m| m < through),
        "{copy2}"
    );
    let new_part = copy2
        .find("\n## The new part")
        .unwrap_or_else(|| panic!("{copy2}"));
    assert!(
        copy2.find(FIRST_ANSWER).is_some_and(|at| at < new_part)
            && copy2.matches(FIRST_ANSWER).count() == 1,
        "{p2}\n{copy2}"
    );
    assert!(
        message_holding(&copy2, FIRST_ANSWER).is_some_and(|m| m <= through),
        "{copy2}"
    );
    let asked = message_holding(&copy2, SECOND).unwrap_or_else(|| panic!("{copy2}"));
    assert!(asked > through && asked <= last, "{p2}\n{copy2}");
    assert_eq!(
        message_holding(&copy2, SECOND_ANSWER),
        Some(last),
        "{copy2}"
    );
    assert!(items(&s, "recovered").is_empty(), "{s}");
    let entry = &l.ledger()["entries"][format!("{app}:{session}")];
    assert_eq!(entry["status"], "done", "{entry}");
    assert_eq!(entry["lastRunId"], run2.as_str(), "{entry}");
    assert_eq!(l.runs().len(), 2);
    s
}

fn prompt_run_resume_capture(cli: Cli) {
    let Some(inst) = cli.installed_or_skip() else {
        return;
    };
    let l = live_world(3);
    prepare_repo(&l.repo);
    let mock = MockModel::start(cli.first_script(&l.repo));
    let env = cli.env(&inst, &l.w, &mock);

    // 1. One prompt.
    let ran = inst.run(&l.repo, &env, FIRST, None);
    let said = describe(&ran, &mock);
    assert_eq!(ran.code, Some(0), "{} failed: {said}", cli.id());
    assert_eq!(mock.remaining(), 0, "every scripted turn was taken: {said}");
    let session = cli
        .printed_session_id(&ran)
        .unwrap_or_else(|| panic!("{} printed no session id: {said}", cli.id()));
    let sub = cli
        .subagent_id(&ran, &l.w, &session)
        .unwrap_or_else(|| panic!("{} ran no subagent: {said}", cli.id()));
    assert_ne!(sub, session);
    let gemini_log = (cli == Cli::Gemini).then(|| gemini_log_a_minute_older(&l.w, &session));

    // 2. Found under the id the CLI printed, in the repo, one prompt; the subagent is not a session.
    found_once(&l, cli.id(), &session, Some(&sub));

    // 3. A live capture: one run, for the whole conversation so far, through the answer.
    // The tool calls the mock asked for are in the store as the CLI ran them.
    let tools: &[&str] = match cli {
        Cli::Gemini => &["read_file", "invoke_agent"],
        Cli::Opencode | Cli::Kilo => &["read", "task"],
    };
    let (run1, captured) = captured_first(&l, cli.id(), &session, tools);

    // 4. The same session resumed with a second prompt.
    mock.queue(cli.second_script(&l.repo));
    let ran = inst.run(&l.repo, &env, SECOND, Some(&session));
    let said = describe(&ran, &mock);
    assert_eq!(ran.code, Some(0), "{} resume failed: {said}", cli.id());
    assert_eq!(mock.remaining(), 0, "{said}");
    assert_eq!(
        cli.printed_session_id(&ran).as_deref(),
        Some(session.as_str()),
        "the resumed run is the same session: {said}"
    );
    let rows: Vec<Value> = sessions(&l, cli.id())
        .into_iter()
        .filter(|r| r["sessionId"] == session.as_str())
        .collect();
    let (full, other): (Vec<&Value>, Vec<&Value>) = rows.iter().partition(|r| r["userTurns"] != 0);
    assert_eq!(
        full.len(),
        1,
        "one listing holds the conversation: {rows:?}"
    );
    assert_eq!(full[0]["userTurns"], 2, "{rows:?}");
    assert_eq!(full[0]["firstPrompt"], FIRST, "{rows:?}");
    assert_eq!(full[0]["lastPrompt"], SECOND, "{rows:?}");
    if let Some(log) = &gemini_log {
        // The resume's log of its own minute, beside the session's: the same id, no prompt. almanac
        // lists it too today (a second row, with no user turn); the sweep skips it as a copy (below).
        let beside: Vec<PathBuf> = std::fs::read_dir(log.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                *p != *log
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with(&format!("-{}.jsonl", &session[..8])))
            })
            .collect();
        assert_eq!(beside.len(), 1, "the resume's own log: {beside:?}");
        assert!(
            std::fs::read_to_string(&beside[0])
                .unwrap()
                .lines()
                .next()
                .is_some_and(|l| l.contains(&session)),
            "{}",
            beside[0].display()
        );
        assert!(other.len() <= 1, "{rows:?}");
    } else {
        assert!(other.is_empty(), "{rows:?}");
    }

    // ... then captured from where the first run ended. Gemini CLI's `--resume` writes the session's
    // messages again (`$set messages`) with a synthetic `<message id>_response` copy after each message
    // that called tools; the rule set leaves those out (`drop_message_ids`), so for all three the
    // captured messages are where they were.
    let s = captured_second(&l, cli.id(), &session, (&run1, captured));
    if !other.is_empty() {
        assert!(
            items(&s, "skipped")
                .iter()
                .any(|i| i["sessionId"] == session.as_str() && i["reason"] == "duplicate-session"),
            "the resume's own log is skipped as a copy: {s}"
        );
    }
}

#[test]
fn real_gemini_session_is_captured_then_resumed_and_captured_again() {
    prompt_run_resume_capture(Cli::Gemini);
}

#[test]
fn real_opencode_session_is_captured_then_resumed_and_captured_again() {
    prompt_run_resume_capture(Cli::Opencode);
}

#[test]
fn real_kilo_session_is_captured_then_resumed_and_captured_again() {
    prompt_run_resume_capture(Cli::Kilo);
}
