//! Regenerates `tests/fixtures/real/mock/`: transcripts written by the real Claude Code and Codex CLIs
//! against the mock model server (resume, fork, a Task subagent), with the scratch home rewritten to
//! `/home/dev` so every cwd is `REAL_CWD`. Ignored; run it on purpose:
//! `ALMANAC_CLIENTS_BIN=... cargo test --test e2e make_real_fixtures -- --ignored`
//! (or `scripts/make_fixtures.sh`). It also writes `manifest.json`: each file, the CLI version, the
//! command that made it and what a reader should find in it (checked by `fixtures_real_mock.rs`).

use crate::agents_real::{client_env, describe, run_client};
use crate::common::*;
use crate::mock_model::{MockModel, Turn};
use crate::real_clients::client_or_skip;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

pub const MOCK_DIR: &str = "real/mock";
const CLAUDE_SESSION: &str = "22222222-3333-4444-8555-666666666666";
const SUBAGENT_SESSION: &str = "22222222-3333-4444-8555-777777777777";

struct Gen {
    w: World,
    mock: MockModel,
    repo: PathBuf,
    manifest: Vec<Value>,
}

impl Gen {
    fn run(&self, program: &Path, args: &[&str]) -> String {
        let out = run_client(&self.w, &self.mock, program, args, &self.repo);
        assert!(out.status.success(), "{}", describe(&out, &self.mock));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn version(program: &Path) -> String {
    let out = std::process::Command::new(program)
        .arg("--version")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn claude_fixtures(g: &mut Gen, claude: &Path) {
    let v = version(claude);
    let main = g.repo.join("src/main.rs").display().to_string();
    let read = Turn::Tool {
        name: "Read".into(),
        input: json!({"file_path": main}),
    };
    // Session S: a tool call, then `--resume S` appends a second prompt to the same file.
    g.push(vec![
        read,
        Turn::Text("It is empty.".into()),
        Turn::Text("Resumed.".into()),
    ]);
    g.run(
        claude,
        &[
            "-p",
            "What is in src/main.rs?",
            "--session-id",
            CLAUDE_SESSION,
            "--output-format",
            "json",
        ],
    );
    g.run(
        claude,
        &[
            "-p",
            "Second prompt, resumed",
            "--resume",
            CLAUDE_SESSION,
            "--output-format",
            "json",
        ],
    );
    g.manifest.push(json!({"app": "claude", "version": v, "file": format!("{CLAUDE_SESSION}.jsonl"),
        "command": format!("claude -p \"What is in src/main.rs?\" --session-id {CLAUDE_SESSION} --output-format json; claude -p \"Second prompt, resumed\" --resume {CLAUDE_SESSION} --output-format json"),
        "sessionId": CLAUDE_SESSION, "prompts": ["What is in src/main.rs?", "Second prompt, resumed"]}));
    // A fork of S: a new file, a new session id, S's records copied first.
    g.push(vec![Turn::Text("Forked.".into())]);
    let out = g.run(
        claude,
        &[
            "-p",
            "Third prompt, forked",
            "--resume",
            CLAUDE_SESSION,
            "--fork-session",
            "--output-format",
            "json",
        ],
    );
    let fork = serde_json::from_str::<Value>(&out).unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(fork, CLAUDE_SESSION);
    g.manifest.push(json!({"app": "claude", "version": v, "file": format!("{fork}.jsonl"),
        "command": format!("claude -p \"Third prompt, forked\" --resume {CLAUDE_SESSION} --fork-session --output-format json"),
        "sessionId": fork, "forkedFrom": CLAUDE_SESSION, "prompts": ["Third prompt, forked"]}));
    // A Task subagent: the main loop calls the Task tool, the subagent answers, the main loop answers.
    g.push(vec![
        Turn::Tool { name: "Task".into(), input: json!({"description": "Look around", "prompt": "List the files in src", "subagent_type": "general-purpose"}) },
        Turn::Text("src holds main.rs.".into()),
        Turn::Text("The subagent looked.".into()),
    ]);
    g.run(
        claude,
        &[
            "-p",
            "Use a subagent to look at src",
            "--session-id",
            SUBAGENT_SESSION,
            "--output-format",
            "json",
        ],
    );
    g.manifest.push(json!({"app": "claude", "version": v, "file": format!("{SUBAGENT_SESSION}.jsonl"),
        "command": format!("claude -p \"Use a subagent to look at src\" --session-id {SUBAGENT_SESSION} --output-format json (the mock answers with a Task tool call)"),
        "sessionId": SUBAGENT_SESSION, "prompts": ["Use a subagent to look at src"], "subagentPrompt": "List the files in src"}));
}

fn thread_started(out: &str) -> String {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "thread.started")
        .and_then(|e| e["thread_id"].as_str().map(str::to_string))
        .expect("thread.started")
}

/// One `codex exec` session (a tool call, then a text answer) and a `codex exec resume` of it.
fn codex_session(g: &mut Gen, codex: &Path, v: &str) -> String {
    let cat = Turn::Tool {
        name: "exec_command".into(),
        input: json!({"cmd": "cat src/main.rs"}),
    };
    g.push(vec![
        cat,
        Turn::Text("It is empty.".into()),
        Turn::Text("Resumed.".into()),
    ]);
    let out = g.run(
        codex,
        &[
            "exec",
            "--json",
            "--skip-git-repo-check",
            "What is in src/main.rs?",
        ],
    );
    let thread = thread_started(&out);
    g.run(
        codex,
        &[
            "exec",
            "--json",
            "--skip-git-repo-check",
            "resume",
            &thread,
            "Second prompt, resumed",
        ],
    );
    g.manifest.push(json!({"app": "codex", "version": v, "sessionId": thread,
        "command": format!("codex exec --json --skip-git-repo-check \"What is in src/main.rs?\"; codex exec --json --skip-git-repo-check resume {thread} \"Second prompt, resumed\""),
        "prompts": ["What is in src/main.rs?", "Second prompt, resumed"]}));
    thread
}

/// The 2025 "bare format" Codex (0.20-era codex-rs): `codex exec` has no `--json` thread id and no
/// `resume` subcommand, so the second prompt resumes the rollout with `-c experimental_resume=<path>`.
fn codex_bare_session(g: &mut Gen, codex: &Path, v: &str) -> String {
    let cat = Turn::Tool {
        name: "shell".into(),
        input: json!({"command": ["cat", "src/main.rs"]}),
    };
    // A git repository, so that line 1 carries the `git` object the bare format has.
    for args in [
        &["init", "-q", "-b", "main"][..],
        &[
            "-c",
            "user.name=dev",
            "-c",
            "user.email=dev@example.com",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
    ] {
        let st = std::process::Command::new("git")
            .args(args)
            .current_dir(&g.repo)
            .status()
            .unwrap();
        assert!(st.success());
    }
    g.push(vec![cat, Turn::Text("It is empty.".into())]);
    g.run(
        codex,
        &["exec", "--skip-git-repo-check", "What is in src/main.rs?"],
    );
    let rollouts: Vec<PathBuf> = walkdir::WalkDir::new(g.w.home().join(".codex/sessions"))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect();
    assert_eq!(rollouts.len(), 1, "{rollouts:?}");
    let path = rollouts[0].display().to_string();
    let name = rollouts[0]
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let thread = name[name.len() - 36..].to_string();
    g.push(vec![Turn::Text("Resumed.".into())]);
    let resume = format!("experimental_resume=\"{path}\"");
    g.run(
        codex,
        &[
            "exec",
            "--skip-git-repo-check",
            "-c",
            &resume,
            "Second prompt, resumed",
        ],
    );
    g.manifest.push(json!({"app": "codex", "version": v, "sessionId": thread,
        "command": "codex exec --skip-git-repo-check \"What is in src/main.rs?\"; codex exec --skip-git-repo-check -c experimental_resume=\"<that rollout>\" \"Second prompt, resumed\"",
        "prompts": ["What is in src/main.rs?", "Second prompt, resumed"]}));
    thread
}

/// Adds one Claude Code 1.0.x session to the real-transcript corpus, `tests/fixtures/corpus/claude/<version>/`:
/// a `-p` prompt whose answer reads a file and runs a `Task` subagent (1.0.x writes the subagent's records
/// into the main file with `isSidechain: true`), then a `--resume` with a second prompt. The binary is
/// `ALMANAC_CLAUDE_BIN`, the label `ALMANAC_CLAUDE_VERSION` (default: `claude --version`). Every file the
/// CLI wrote (under `~/.claude/projects` or `~/.config/claude/projects`) is copied.
#[test]
#[ignore = "adds real Claude Code sessions to tests/fixtures/corpus"]
fn make_corpus_claude() {
    let Ok(claude) = std::env::var("ALMANAC_CLAUDE_BIN") else {
        eprintln!("skipping: set ALMANAC_CLAUDE_BIN to a claude binary");
        return;
    };
    let claude = PathBuf::from(claude);
    let v = std::env::var("ALMANAC_CLAUDE_VERSION").unwrap_or_else(|_| {
        version(&claude)
            .trim_end_matches(" (Claude Code)")
            .to_string()
    });
    let g = new_gen();
    let main = g.repo.join("src/main.rs").display().to_string();
    g.push(vec![
        Turn::Tool {
            name: "Read".into(),
            input: json!({"file_path": main}),
        },
        Turn::Tool { name: "Task".into(), input: json!({"description": "Look around", "prompt": "List the files in src", "subagent_type": "general-purpose"}) },
        Turn::Text("src holds main.rs.".into()),
        Turn::Text("The subagent looked.".into()),
    ]);
    let out = g.run(
        &claude,
        &[
            "-p",
            "Use a subagent to look at src",
            "--output-format",
            "json",
        ],
    );
    let session = serde_json::from_str::<Value>(&out).unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    g.push(vec![Turn::Text("Resumed.".into())]);
    let out = g.run(
        &claude,
        &[
            "-p",
            "Second prompt, resumed",
            "--resume",
            &session,
            "--output-format",
            "json",
        ],
    );
    let resumed = serde_json::from_str::<Value>(&out).unwrap()["session_id"].clone();
    eprintln!("claude {v}: session {session}, resumed as {resumed}");
    eprintln!("commands: claude -p \"Use a subagent to look at src\" --output-format json; claude -p \"Second prompt, resumed\" --resume {session} --output-format json");
    let tmp = g.w.home().parent().unwrap().join("corpus-out");
    for root in [".claude/projects", ".config/claude/projects"] {
        let r = g.w.home().join(root);
        if r.is_dir() {
            rewrite_tree(&r, &tmp, &g.w.home());
        }
    }
    let out = Path::new(FIXTURES).join("corpus/claude").join(&v);
    std::fs::create_dir_all(&out).unwrap();
    for e in walkdir::WalkDir::new(&tmp)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
    {
        let dest = out.join(e.file_name());
        std::fs::copy(e.path(), &dest).unwrap();
        eprintln!("wrote {} (from {})", dest.display(), e.path().display());
    }
}

fn codex_fixtures(g: &mut Gen, codex: &Path) {
    let v = version(codex);
    let thread = codex_session(g, codex, &v);
    g.push(vec![Turn::Text("Forked.".into())]);
    let out = g.run(
        codex,
        &[
            "exec",
            "--json",
            "--skip-git-repo-check",
            "fork",
            &thread,
            "Third prompt, forked",
        ],
    );
    let fork = thread_started(&out);
    g.manifest.push(json!({"app": "codex", "version": v, "sessionId": fork, "forkedFrom": thread,
        "command": format!("codex exec --json --skip-git-repo-check fork {thread} \"Third prompt, forked\""),
        "prompts": ["Third prompt, forked"]}));
}

impl Gen {
    fn push(&self, turns: Vec<Turn>) {
        assert_eq!(self.mock.remaining(), 0, "every earlier turn was taken");
        self.mock.queue(turns);
    }
}

/// Copies `from` to `to`, rewriting the scratch home to `/home/dev` in paths and contents.
/// Copies every `.jsonl` under `from` to `to`, with the scratch home rewritten to `/home/dev` in text and
/// in directory names: as Claude Code and Qwen Code encode a cwd (every non-alphanumeric -> `-`) and as
/// pi and Factory Droid do (`/` -> `-`).
pub fn rewrite_tree(from: &Path, to: &Path, home: &Path) {
    let home_s = home.display().to_string();
    let slug = |p: &str| p.replace(|c: char| !c.is_ascii_alphanumeric(), "-");
    let (home_slug, dev_slug) = (slug(&home_s), "-home-dev".to_string());
    let dash_slug = home_s.replace('/', "-");
    let kernel = std::process::Command::new("uname")
        .arg("-r")
        .output()
        .unwrap()
        .stdout;
    let kernel = String::from_utf8_lossy(&kernel).trim().to_string();
    for e in walkdir::WalkDir::new(from)
        .into_iter()
        .filter_map(|e| e.ok())
    {
        if !e.file_type().is_file() || e.path().extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        let rel = e.path().strip_prefix(from).unwrap().display().to_string();
        let dest = to.join(
            rel.replace(&home_slug, &dev_slug)
                .replace(&dash_slug, &dev_slug),
        );
        let text = std::fs::read_to_string(e.path()).unwrap();
        let text = text
            .replace(&home_s, "/home/dev")
            .replace(&home_slug, &dev_slug)
            .replace(&kernel, "6.0.0-fixture");
        let root = home.parent().unwrap().display().to_string();
        assert!(
            !text.contains(&root) && !dest.display().to_string().contains(&root),
            "{} still names {root}",
            dest.display()
        );
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(dest, text).unwrap();
    }
}

fn new_gen() -> Gen {
    let w = World::new();
    let repo = w.home().join("proj/my_repo.x");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::create_dir_all(repo.join(".almanac/pages")).unwrap();
    std::fs::write(repo.join("src/main.rs"), "fn main() {}\n").unwrap();
    let mock = MockModel::start(vec![]);
    let _ = client_env(&w, &mock);
    Gen {
        w,
        mock,
        repo,
        manifest: vec![],
    }
}

/// Adds rollouts of one (older) Codex CLI to the real-transcript corpus, `tests/fixtures/corpus/codex/<version>/`:
/// `codex exec` with a tool call and a text answer, then `codex exec resume`. The binary is
/// `ALMANAC_CODEX_BIN` (e.g. `/root/.cache/almanac-codex-old/0.104.0/node_modules/.bin/codex`), the label
/// `ALMANAC_CODEX_VERSION` (default: what `codex --version` prints). Prints each file and the commands;
/// PROVENANCE.md and expected.yaml are then written by hand, from reading the files.
#[test]
#[ignore = "adds real Codex rollouts to tests/fixtures/corpus"]
fn make_corpus_codex() {
    let Ok(codex) = std::env::var("ALMANAC_CODEX_BIN") else {
        eprintln!("skipping: set ALMANAC_CODEX_BIN to a codex binary");
        return;
    };
    let codex = PathBuf::from(codex);
    let v = std::env::var("ALMANAC_CODEX_VERSION")
        .unwrap_or_else(|_| version(&codex).trim_start_matches("codex-cli ").to_string());
    let mut g = new_gen();
    let thread = if std::env::var("ALMANAC_CODEX_BARE").is_ok() {
        codex_bare_session(&mut g, &codex, &v)
    } else {
        codex_session(&mut g, &codex, &v)
    };
    let tmp = g.w.home().parent().unwrap().join("corpus-out");
    rewrite_tree(&g.w.home().join(".codex/sessions"), &tmp, &g.w.home());
    let out = Path::new(FIXTURES).join("corpus/codex").join(&v);
    std::fs::create_dir_all(&out).unwrap();
    for e in walkdir::WalkDir::new(&tmp)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
    {
        let dest = out.join(e.file_name());
        std::fs::copy(e.path(), &dest).unwrap();
        eprintln!("wrote {}", dest.display());
    }
    eprintln!("{}", serde_json::to_string_pretty(&g.manifest).unwrap());
    assert!(out.read_dir().unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(&format!("{thread}.jsonl"))));
}

#[test]
#[ignore = "regenerates tests/fixtures/real/mock with the real CLIs"]
fn make_real_fixtures() {
    let (Some(claude), Some(codex)) = (client_or_skip("claude"), client_or_skip("codex")) else {
        return;
    };
    let mut g = new_gen();
    claude_fixtures(&mut g, &claude);
    codex_fixtures(&mut g, &codex);
    let out = Path::new(FIXTURES).join(MOCK_DIR);
    let _ = std::fs::remove_dir_all(&out);
    rewrite_tree(
        &g.w.home().join(".claude/projects"),
        &out.join("claude/projects"),
        &g.w.home(),
    );
    rewrite_tree(
        &g.w.home().join(".codex/sessions"),
        &out.join("codex/sessions"),
        &g.w.home(),
    );
    // Codex files are named by time and id: record each one's path.
    for m in g.manifest.iter_mut().filter(|m| m["app"] == "codex") {
        let id = m["sessionId"].as_str().unwrap().to_string();
        let f = walkdir::WalkDir::new(out.join("codex"))
            .into_iter()
            .filter_map(|e| e.ok())
            .find(|e| {
                e.file_name()
                    .to_string_lossy()
                    .ends_with(&format!("{id}.jsonl"))
            })
            .expect("the rollout");
        m["file"] = json!(f.path().strip_prefix(&out).unwrap().display().to_string());
    }
    for m in g.manifest.iter_mut().filter(|m| m["app"] == "claude") {
        m["file"] = json!(format!(
            "claude/projects/-home-dev-proj-my-repo-x/{}",
            m["file"].as_str().unwrap()
        ));
    }
    std::fs::write(
        out.join("manifest.json"),
        serde_json::to_string_pretty(&g.manifest).unwrap() + "\n",
    )
    .unwrap();
}
