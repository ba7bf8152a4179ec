//! Reads each transcript in `tests/fixtures/real/mock/` (made by the real CLIs against the mock model,
//! see `make_fixtures.rs` and `manifest.json`) as a person would: whose session it is, where it ran,
//! which prompts it holds, what a resume, a fork and a subagent look like; then a dry-run sweep over them.

use crate::common::*;
use crate::make_fixtures::MOCK_DIR;
use serde_json::Value;
use std::path::Path;

fn manifest() -> Vec<Value> {
    serde_json::from_str(&fixture(&format!("{MOCK_DIR}/manifest.json"))).unwrap()
}

fn records(rel: &str) -> Vec<Value> {
    fixture(&format!("{MOCK_DIR}/{rel}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{rel}: {e}: {l}")))
        .collect()
}

/// The text of a Claude `user` record that is a prompt (a string, or text blocks; not tool results).
fn claude_prompt(r: &Value) -> Option<String> {
    if r["type"] != "user" {
        return None;
    }
    match &r["message"]["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) if a.iter().all(|b| b["type"] == "text") => Some(
            a.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<String>(),
        ),
        _ => None,
    }
}

/// The text of the Codex `response_item` user messages, excluding injected context.
fn codex_prompts(recs: &[Value]) -> Vec<String> {
    recs.iter()
        .filter(|r| r["type"] == "response_item" && r["payload"]["role"] == "user")
        .filter_map(|r| {
            let parts = r["payload"]["content"].as_array()?;
            Some(parts.iter().filter_map(|p| p["text"].as_str()).collect())
        })
        .collect()
}

fn check_claude(m: &Value) {
    let file = m["file"].as_str().unwrap();
    let id = m["sessionId"].as_str().unwrap();
    assert!(file.ends_with(&format!("/{id}.jsonl")), "{file}");
    let recs = records(file);
    for r in &recs {
        if let Some(s) = r.get("sessionId") {
            assert_eq!(s, id, "{file}: {r}");
        }
        if let Some(c) = r.get("cwd") {
            assert_eq!(c, REAL_CWD, "{file}");
        }
    }
    let prompts: Vec<String> = recs.iter().filter_map(claude_prompt).collect();
    for p in m["prompts"].as_array().unwrap() {
        assert!(
            prompts.iter().any(|x| x == p.as_str().unwrap()),
            "{file}: {p} in {prompts:?}"
        );
    }
    if let Some(parent) = m["forkedFrom"].as_str() {
        // A fork copies the parent's conversation first, with the same uuids, under its own id.
        let parent_file = file.replace(id, parent);
        let uuids: Vec<Value> = records(&parent_file)
            .iter()
            .map(|r| r["uuid"].clone())
            .filter(|u| u.is_string())
            .collect();
        assert!(
            recs.iter().any(|r| uuids.contains(&r["uuid"])),
            "{file} copies {parent}"
        );
        assert!(
            prompts.iter().any(|p| p == "What is in src/main.rs?"),
            "{prompts:?}"
        );
    }
    if let Some(sub) = m["subagentPrompt"].as_str() {
        // Claude Code 2.1 writes the subagent in `<session>/subagents/agent-<id>.jsonl`.
        let dir = Path::new(FIXTURES)
            .join(MOCK_DIR)
            .join(file.trim_end_matches(".jsonl"))
            .join("subagents");
        let subs: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(subs.len(), 1, "{dir:?}");
        let rel = subs[0]
            .path()
            .strip_prefix(Path::new(FIXTURES).join(MOCK_DIR))
            .unwrap()
            .display()
            .to_string();
        let srecs = records(&rel);
        assert!(srecs
            .iter()
            .filter(|r| r.get("isSidechain").is_some())
            .all(|r| r["isSidechain"] == true));
        assert!(
            srecs
                .iter()
                .filter_map(|r| r.get("sessionId"))
                .all(|s| s == id),
            "{rel}"
        );
        assert!(
            srecs.iter().filter_map(claude_prompt).any(|p| p == sub),
            "{rel}"
        );
        assert!(
            recs.iter()
                .any(|r| r.to_string().contains("\"name\":\"Task\"")),
            "the main file holds the Task call"
        );
    }
}

fn check_codex(m: &Value) {
    let file = m["file"].as_str().unwrap();
    let id = m["sessionId"].as_str().unwrap();
    assert!(file.ends_with(&format!("-{id}.jsonl")), "{file}");
    let recs = records(file);
    let meta = &recs[0];
    assert_eq!(meta["type"], "session_meta", "{file}");
    assert_eq!(meta["payload"]["id"], id, "{file}");
    assert_eq!(meta["payload"]["cwd"], REAL_CWD, "{file}");
    let prompts = codex_prompts(&recs);
    for p in m["prompts"].as_array().unwrap() {
        assert!(
            prompts.iter().any(|x| x.contains(p.as_str().unwrap())),
            "{file}: {p} in {prompts:?}"
        );
    }
    if let Some(parent) = m["forkedFrom"].as_str() {
        assert_eq!(meta["payload"]["forked_from_id"], parent, "{meta}");
        assert!(
            !prompts
                .iter()
                .any(|p| p.contains("What is in src/main.rs?")),
            "a Codex fork does not copy its parent"
        );
    } else {
        assert_eq!(
            recs.iter().filter(|r| r["type"] == "session_meta").count(),
            1,
            "resume appends to the same rollout"
        );
    }
}

/// The text of the prompts in a GitHub Copilot CLI, Qwen Code, pi or Factory Droid transcript, read
/// the way each CLI writes what was typed (and not what it adds: subagent events, tool results,
/// injected context).
fn chat_prompts(app: &str, recs: &[Value]) -> Vec<String> {
    let texts = |v: &Value| -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Array(a) => a.iter().filter_map(|b| b["text"].as_str()).collect(),
            _ => String::new(),
        }
    };
    recs.iter()
        .filter(|r| match app {
            "copilot" => r["type"] == "user.message" && r.get("agentId").is_none(),
            "qwen" => r["type"] == "user" && r["provenance"] == "real_user",
            "pi" => r["type"] == "message" && r["message"]["role"] == "user",
            _ => {
                r["type"] == "message"
                    && r["message"]["role"] == "user"
                    && !r["id"].as_str().unwrap_or("").starts_with("context-")
                    && !r.to_string().contains("tool_result")
                    && !texts(&r["message"]["content"]).starts_with("Error: Your custom model")
            }
        })
        .map(|r| match app {
            "copilot" => r["data"]["content"].as_str().unwrap_or("").to_string(),
            "qwen" => texts(&r["message"]["parts"]),
            _ => texts(&r["message"]["content"]),
        })
        .collect()
}

fn check_chat(m: &Value) {
    let (app, file) = (m["app"].as_str().unwrap(), m["file"].as_str().unwrap());
    let id = m["sessionId"].as_str().unwrap();
    let recs = records(file);
    let head = &recs[0];
    match app {
        // One directory a session, named by its id; line 1 is session.start.
        "copilot" => {
            assert!(file.ends_with(&format!("/{id}/events.jsonl")), "{file}");
            assert_eq!(head["type"], "session.start", "{file}");
            assert_eq!(head["data"]["sessionId"], id, "{file}");
            assert_eq!(head["data"]["context"]["cwd"], REAL_CWD, "{file}");
        }
        // Every record carries the session id and cwd.
        "qwen" => {
            assert!(file.ends_with(&format!("/chats/{id}.jsonl")), "{file}");
            assert!(recs
                .iter()
                .all(|r| r["sessionId"] == id && r["cwd"] == REAL_CWD));
        }
        // Line 1 is the session header, and only that.
        "pi" => {
            assert!(file.ends_with(&format!("_{id}.jsonl")), "{file}");
            assert_eq!(
                (&head["type"], &head["id"]),
                (&"session".into(), &id.into())
            );
            assert_eq!(head["cwd"], REAL_CWD, "{file}");
        }
        _ => {
            assert!(file.ends_with(&format!("/{id}.jsonl")), "{file}");
            assert_eq!(
                (&head["type"], &head["id"]),
                (&"session_start".into(), &id.into())
            );
            assert_eq!(head["cwd"], REAL_CWD, "{file}");
            assert!(recs
                .iter()
                .any(|r| r["id"].as_str().is_some_and(|i| i.starts_with("context-"))));
        }
    }
    let want: Vec<String> = m["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert_eq!(chat_prompts(app, &recs), want, "{file}");
    if let Some(sub) = m["subagentPrompt"].as_str() {
        // Copilot writes the subagent into the session's file (events with agentId); Qwen into its own
        // file, every record isSidechain with the parent's sessionId.
        let srecs = match m["subagentFile"].as_str() {
            Some(f) => {
                let srecs = records(f);
                assert!(srecs
                    .iter()
                    .all(|r| r["isSidechain"] == true && r["sessionId"] == id));
                srecs
            }
            None => recs
                .iter()
                .filter(|r| r["agentId"].is_string())
                .cloned()
                .collect(),
        };
        assert!(srecs.iter().any(|r| r.to_string().contains(sub)), "{file}");
    }
}

#[test]
fn real_mock_fixtures_read_as_their_commands_say() {
    let m = manifest();
    let kinds = |app: &str| m.iter().filter(|x| x["app"] == app).count();
    assert_eq!((kinds("claude"), kinds("codex")), (3, 2), "{m:?}");
    for app in ["copilot", "qwen", "pi", "droid"] {
        assert_eq!(kinds(app), 1, "{app}: {m:?}");
    }
    for f in &m {
        assert!(f["version"].is_string() && f["command"].is_string(), "{f}");
        assert!(!f["version"].as_str().unwrap().is_empty(), "{f}");
        match f["app"].as_str() {
            Some("claude") => check_claude(f),
            Some("codex") => check_codex(f),
            _ => check_chat(f),
        }
    }
}

/// Copies the fixtures into a home with `REAL_CWD` rewritten to a repo of the world's own.
fn install(w: &World, repo: &Path) {
    let root = Path::new(FIXTURES).join(MOCK_DIR);
    for (from, to) in [
        ("claude", ".claude"),
        ("codex", ".codex"),
        ("copilot", ".copilot"),
        ("qwen", ".qwen"),
        ("pi", ".pi/agent"),
        ("droid", ".factory"),
    ] {
        for e in walkdir::WalkDir::new(root.join(from)).into_iter().flatten() {
            if e.file_type().is_file() {
                let rel = e.path().strip_prefix(root.join(from)).unwrap();
                let text = std::fs::read_to_string(e.path())
                    .unwrap()
                    .replace(REAL_CWD, &repo.display().to_string());
                write_aged(&w.home().join(to).join(rel), text.as_bytes(), HOURS_2);
            }
        }
    }
}

#[test]
fn a_dry_run_sweep_maps_every_real_mock_session_to_the_repo() {
    let w = World::new();
    let repo = w.repo("proj/app");
    install(&w, &repo);
    let apps = "claude,codex,copilot,qwen,pi,droid";
    let s = w.dry_run(&["--apps", apps, "--quiet", "0m"]);
    let started = items(&s, "started");
    for f in manifest() {
        let id = f["sessionId"].as_str().unwrap();
        let hit = started
            .iter()
            .find(|i| i["sessionId"] == id)
            .unwrap_or_else(|| panic!("{id} not started: {s}"));
        assert_eq!(hit["repoRoot"], repo.display().to_string(), "{hit}");
        assert_eq!(hit["app"], f["app"], "{hit}");
        if !["claude", "codex"].contains(&f["app"].as_str().unwrap()) {
            // One prompt typed, one turn: subagent prompts, injected context and tool results are not.
            assert_eq!(
                hit["newTurns"],
                f["prompts"].as_array().unwrap().len(),
                "{hit}"
            );
        }
    }
    // Claude Code's and Qwen Code's subagent files are counted, never started.
    assert_eq!(s["counts"]["subagent"], 2, "{s}");
    assert_eq!(started.len(), manifest().len(), "{s}");
}

/// `rules explain` on each GitHub Copilot CLI, Qwen Code, pi and Factory Droid fixture, installed in the
/// stores those CLIs use (no `--app`: the file's place picks the rule set): the CLI's own session id and
/// cwd, the repo, and which file is a subagent.
#[test]
fn rules_explain_reads_each_chat_client_fixture_as_its_cli_wrote_it() {
    let w = World::new();
    let repo = w.repo("proj/app");
    install(&w, &repo);
    let home_of = |app: &str| match app {
        "copilot" => ".copilot",
        "qwen" => ".qwen",
        "pi" => ".pi/agent",
        _ => ".factory",
    };
    let installed = |app: &str, rel: &str| {
        let under = rel.split_once('/').unwrap().1;
        w.home().join(home_of(app)).join(under)
    };
    let explain = |p: &Path| json_ok(w.almanac().args(["rules", "explain", "--json"]).arg(p));
    let chat: Vec<Value> = manifest()
        .into_iter()
        .filter(|m| !["claude", "codex"].contains(&m["app"].as_str().unwrap()))
        .collect();
    assert_eq!(chat.len(), 4);
    for m in chat {
        let app = m["app"].as_str().unwrap();
        let ex = explain(&installed(app, m["file"].as_str().unwrap()));
        assert_eq!(ex["app"], app, "{ex}");
        assert_eq!(ex["sessionId"], m["sessionId"], "{ex}");
        assert_eq!(ex["cwd"], repo.display().to_string(), "{ex}");
        assert_eq!(ex["repoRoot"], repo.display().to_string(), "{ex}");
        assert!(ex["subagent"].is_null(), "{ex}");
        // `capture turns`: the one typed prompt, with the tool the mock called in it.
        let file = installed(app, m["file"].as_str().unwrap());
        let t = json_ok(w.almanac().args(["capture", "turns", "--json"]).arg(&file));
        let records = t["records"].as_array().unwrap();
        assert_eq!(records.len(), 1, "{t}");
        assert_eq!(records[0]["user"], m["prompts"][0], "{t}");
        let tools: Vec<&str> = records[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_str())
            .collect();
        let read = ["view", "read_file", "read", "Read"];
        assert!(tools.iter().any(|x| read.contains(x)), "{t}");
        assert!(
            !records[0]["assistant"].as_str().unwrap_or("").is_empty(),
            "{t}"
        );
        if let Some(sub) = m["subagentFile"].as_str() {
            let ex = explain(&installed(app, sub));
            assert!(ex["subagent"].is_object(), "{ex}");
            // Qwen's subagent carries its parent's session id.
            assert_eq!(ex["sessionId"], m["sessionId"], "{ex}");
        }
    }
}
