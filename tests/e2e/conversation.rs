//! What a capture run's agent reads (`runs/<run-id>.transcript.md`), on real transcripts of every JSONL
//! app: the real Claude Code, Codex, Copilot CLI, Qwen Code, pi and Droid fixtures (made by the CLIs
//! against the mock model) and the public and made-here sessions of `tests/fixtures/corpus/`. Each is
//! captured twice by a live sweep with a fake agent, its first half and then, grown, the rest: every user
//! prompt and every assistant text of each new part is in that run's conversation, under its own line;
//! the earlier prompts are listed for context; the prompt names the original transcript and the range.
//! Prompt lines come from the corpus's expected.yaml and the mock fixtures' manifest, answers from
//! reading each record here: what a person reading the file would say, not what almanac says.

use crate::common::*;
use crate::live::{live_world, Live};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One transcript to capture: its app, file, cwd as recorded, and its prompts' lines (None: the prompts
/// are the records whose text is in `prompt_texts`).
struct Case {
    app: String,
    file: PathBuf,
    cwd: String,
    prompt_lines: Option<Vec<u64>>,
    prompt_texts: Vec<String>,
}

/// Where each app keeps a session, under the home (the fixture's own file name kept).
fn store_path(l: &Live, app: &str, file: &Path) -> PathBuf {
    let name = file.file_name().unwrap().to_str().unwrap();
    let parent = file
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let h = l.w.home();
    match app {
        "claude" => h.join(".claude/projects/-work-app").join(name),
        "codex" => h.join(".codex/sessions/2026/01/01").join(name),
        "copilot" => h.join(".copilot/session-state").join(parent).join(name),
        "qwen" => h.join(".qwen/projects/-work-app/chats").join(name),
        "pi" => h.join(".pi/agent/sessions/--work-app--").join(name),
        _ => h.join(".factory/sessions/-work-app").join(name),
    }
}

/// A record's text: a string, or the text of its text blocks.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => {
            let t: Vec<&str> = a
                .iter()
                .filter(|b| {
                    matches!(
                        b["type"].as_str(),
                        Some("text" | "input_text" | "output_text")
                    ) || (b.get("text").is_some()
                        && b["thought"] != true
                        && b.get("type").is_none())
                })
                .filter_map(|b| b["text"].as_str())
                .collect();
            (!t.is_empty()).then(|| t.join("\n\n"))
        }
        _ => None,
    }
}

/// The assistant text a record holds, as a person reading the app's records sees it.
fn answer(app: &str, r: &Value) -> Option<String> {
    let t = match app {
        "claude" if r["type"] == "assistant" && r["message"]["model"] != "<synthetic>" => {
            text_of(&r["message"]["content"])
        }
        "codex" if r["type"] == "event_msg" && r["payload"]["type"] == "agent_message" => {
            r["payload"]["message"].as_str().map(str::to_string)
        }
        "codex" if r["payload"]["type"] == "message" && r["payload"]["role"] == "assistant" => {
            text_of(&r["payload"]["content"])
        }
        "copilot" if r["type"] == "assistant.message" && r.get("agentId").is_none() => {
            r["data"]["content"].as_str().map(str::to_string)
        }
        "qwen" if r["type"] == "assistant" => text_of(&r["message"]["parts"]),
        "pi" | "droid" if r["type"] == "message" && r["message"]["role"] == "assistant" => {
            text_of(&r["message"]["content"])
        }
        _ => None,
    };
    t.filter(|t| !t.trim().is_empty())
}

/// A user record's prompt text (for a line a person said holds a prompt).
fn prompt(app: &str, r: &Value) -> Option<String> {
    let t = match app {
        "claude" => match r["type"].as_str() {
            Some("queue-operation") => r["content"].as_str().map(str::to_string),
            Some("attachment") => text_of(&r["attachment"]["prompt"]),
            _ => text_of(&r["message"]["content"]),
        },
        "codex" => r["payload"]["message"]
            .as_str()
            .map(str::to_string)
            .or_else(|| text_of(&r["payload"]["content"]))
            .or_else(|| text_of(&r["content"])),
        "copilot" => r["data"]["content"].as_str().map(str::to_string),
        "qwen" => text_of(&r["message"]["parts"]),
        _ => text_of(&r["message"]["content"]),
    };
    t.filter(|t| !t.trim().is_empty())
}

/// The start of a text as the conversation shows it (prompts and answers are verbatim).
fn start(t: &str) -> String {
    t.trim().chars().take(60).collect()
}

/// The entries of a conversation's new part, and the earlier prompts it lists.
fn sections(conv: &str) -> (&str, &str) {
    let at = conv
        .find("\n## The new part, to capture:")
        .unwrap_or_else(|| panic!("no new part: {conv}"));
    let earlier = conv.find("\n## Earlier in this session").unwrap_or(at);
    (&conv[earlier..at], &conv[at..])
}

/// Lines `lines` of `records` (1-based numbers) as (line, record).
fn numbered(records: &[Value], lines: std::ops::RangeInclusive<u64>) -> Vec<(u64, &Value)> {
    lines
        .filter_map(|n| records.get(n as usize - 1).map(|r| (n, r)))
        .collect()
}

/// Checks one run's conversation of lines `from..=to`: every prompt and answer under its line (or the
/// line of a twin record holding the same text: an app writing one message twice), the earlier prompts
/// listed, and the prompt naming the original and the range.
fn check_run(c: &Case, l: &Live, run: &Value, records: &[Value], original: &Path) {
    let (from, to) = (
        run["fromLine"].as_u64().unwrap(),
        run["toLine"].as_u64().unwrap(),
    );
    let id = run["runId"].as_str().unwrap();
    let what = format!("{} lines {from}-{to}", c.file.display());
    let file = l.repo.join(format!(".almanac/runs/{id}.transcript.md"));
    let conv =
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{what}: no conversation: {e}"));
    // It quotes the session: only you may read it.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{what}: mode {mode:o}");
    let asked = l.prompt(id);
    assert!(
        asked.contains(&original.display().to_string())
            && asked.contains(&format!("(lines {from} to {to})"))
            && asked.contains(&format!(".almanac/runs/{id}.transcript.md")),
        "{what}: the prompt names the original, the range and the conversation: {asked}"
    );
    let (earlier, new) = sections(&conv);
    let part = numbered(records, from..=to);
    let cited = |lines: &[u64], who: &str, text: &str| {
        lines.iter().any(|n| {
            let head = format!("[L{n}] {who}");
            new.match_indices(&head).any(|(i, _)| {
                let entry = &new[i..];
                let entry = &entry[..entry[1..].find("\n[L").map_or(entry.len(), |e| e + 1)];
                let entry = crate::common::unindented(entry);
                entry.contains(&start(text)) || entry.contains("the queued prompt of")
            })
        })
    };
    // Every line of the part that holds the same text (a twin record of one message).
    let twins = |text: &str, of: &dyn Fn(&Value) -> Option<String>| -> Vec<u64> {
        part.iter()
            .filter(|(_, r)| of(r).is_some_and(|t| start(&t) == start(text)))
            .map(|(n, _)| *n)
            .collect()
    };
    let prompt_of = |r: &Value| prompt(&c.app, r);
    let said: Vec<(u64, String)> = match &c.prompt_lines {
        Some(lines) => lines
            .iter()
            .filter(|n| (from..=to).contains(*n))
            .map(|n| {
                (
                    *n,
                    prompt(&c.app, &records[*n as usize - 1]).unwrap_or_default(),
                )
            })
            .collect(),
        None => part
            .iter()
            .filter_map(|(n, r)| prompt(&c.app, r).map(|t| (*n, t)))
            .filter(|(_, t)| c.prompt_texts.iter().any(|p| start(p) == start(t)))
            .collect(),
    };
    for (n, text) in &said {
        let mut lines = twins(text, &prompt_of);
        lines.push(*n);
        assert!(
            cited(&lines, "user", text),
            "{what}: prompt of line {n} ({}) is not in the conversation:\n{conv}",
            start(text)
        );
    }
    let answer_of = |r: &Value| answer(&c.app, r);
    for (n, r) in &part {
        if let Some(text) = answer(&c.app, r) {
            let mut lines = twins(&text, &answer_of);
            lines.push(*n);
            assert!(
                cited(&lines, "assistant:", &text),
                "{what}: the answer of line {n} ({}) is not in the conversation:\n{conv}",
                start(&text)
            );
        }
    }
    // The earlier part's prompts, for context: the latest one at least.
    let latest_before = match &c.prompt_lines {
        Some(lines) => lines.iter().filter(|n| **n < from).max().copied(),
        None => None,
    };
    if let Some(n) = latest_before {
        assert!(
            earlier.contains(&format!("[L{n}] ")),
            "{what}: the latest earlier prompt (line {n}) is not listed:\n{conv}"
        );
    }
    // What the agent reads is smaller than the JSONL it stands for.
    let raw = run["toByte"].as_u64().unwrap() - run["fromByte"].as_u64().unwrap();
    assert!(
        (conv.len() as u64) < raw + 4096,
        "{what}: {} bytes of conversation for {raw} of JSONL",
        conv.len()
    );
}

/// Captures `c` in two parts (its first half, then the whole file) and checks both runs.
fn capture_twice(c: &Case) {
    let l = live_world(3);
    let text = std::fs::read_to_string(&c.file).unwrap();
    let repo = l.repo.display().to_string();
    // The recorded cwd, as JSON writes it, becomes the world's repo.
    let esc = |s: &str| {
        serde_json::to_string(s)
            .unwrap()
            .trim_matches('"')
            .to_string()
    };
    let text = text.replace(&esc(&c.cwd), &esc(&repo));
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    let records: Vec<Value> = complete
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
        .collect();
    let half: String = complete
        .split_inclusive('\n')
        .take(records.len() / 2)
        .collect();
    let path = store_path(&l, &c.app, &c.file);
    let apps = ["--apps", c.app.as_str(), "--max-runs", "1000"];
    let mut runs = Vec::new();
    for body in [half.as_str(), complete] {
        write_aged(&path, body.as_bytes(), HOURS_2);
        let s = l.sweep_args(&apps);
        l.wait_idle();
        runs.extend(
            items(&s, "started")
                .into_iter()
                .filter(|r| r["transcriptPath"] == path.display().to_string())
                .cloned(),
        );
    }
    let what = c.file.display();
    assert!(!runs.is_empty(), "{what}: never captured");
    // Every line holding a prompt or an answer is in a run.
    let said: Vec<u64> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| answer(&c.app, r).is_some())
        .map(|(i, _)| i as u64 + 1)
        .chain(c.prompt_lines.iter().flatten().copied())
        .collect();
    for n in said {
        assert!(
            runs.iter().any(
                |r| (r["fromLine"].as_u64().unwrap()..=r["toLine"].as_u64().unwrap()).contains(&n)
            ),
            "{what}: line {n} is in no run: {runs:?}"
        );
    }
    for run in &runs {
        check_run(c, &l, run, &records, &path);
    }
}

/// The corpus files of `apps` named in expected.yaml (not subagents: they are never captured).
fn corpus(apps: &[&str]) -> Vec<Case> {
    let expected: Value = serde_yaml::from_str(&fixture("corpus/expected.yaml")).unwrap();
    expected
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, e)| apps.contains(&e["app"].as_str().unwrap()) && e["subagent"] != true)
        .filter(|(_, e)| e["cwd"].is_string())
        .map(|(rel, e)| Case {
            app: e["app"].as_str().unwrap().to_string(),
            file: Path::new(FIXTURES).join("corpus").join(rel),
            cwd: e["cwd"].as_str().unwrap().to_string(),
            prompt_lines: Some(
                e["prompts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_u64().unwrap())
                    .collect(),
            ),
            prompt_texts: Vec::new(),
        })
        .collect()
}

#[test]
fn claude_code_sessions_of_many_versions_read_whole_in_their_conversations() {
    let cases = corpus(&["claude"]);
    assert!(cases.len() >= 25, "{}", cases.len());
    cases.iter().for_each(capture_twice);
}

#[test]
fn codex_copilot_and_qwen_sessions_of_many_versions_read_whole_in_their_conversations() {
    let cases = corpus(&["codex", "copilot", "qwen"]);
    assert!(cases.len() >= 10, "{}", cases.len());
    cases.iter().for_each(capture_twice);
}

/// The sessions the real CLIs wrote against the mock model (`tests/fixtures/real/mock/manifest.json`),
/// resumed ones included; forks start from their parent's lines and are left to forks.rs.
#[test]
fn every_real_clients_session_reads_whole_in_its_conversation() {
    let manifest: Vec<Value> = serde_json::from_str(&fixture("real/mock/manifest.json")).unwrap();
    let mut apps = std::collections::BTreeSet::new();
    for m in manifest {
        let file = m["file"].as_str().unwrap();
        if m["forkOf"].is_string() || file.contains("2d3b0fa0") || file.contains("T08-03-42") {
            continue;
        }
        let app = m["app"].as_str().unwrap().to_string();
        apps.insert(app.clone());
        capture_twice(&Case {
            app,
            file: Path::new(FIXTURES).join("real/mock").join(file),
            cwd: REAL_CWD.to_string(),
            prompt_lines: None,
            prompt_texts: m["prompts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string())
                .collect(),
        });
    }
    assert_eq!(
        apps.into_iter().collect::<Vec<_>>(),
        ["claude", "codex", "copilot", "droid", "pi", "qwen"]
    );
}
