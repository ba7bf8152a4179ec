//! An append-only Markdown chat log holding many sessions (Aider's `.aider.chat.history.md`), with an
//! optional log beside it of what the user typed (`.aider.input.history`). Each session is a view:
//! its blocks in order (`prompt`: consecutive prompt lines; `status`: the tool's own lines; `text`: the
//! answers), each known by its byte offset, and the typed entries whose time falls in the session,
//! each known by its time, placed before the prompt block that echoes it (at the end when none does).
//! A session with typed entries takes its prompts from them (the log's prompt lines then echo them:
//! `echo: true`), as a prompt line may also be a command's echo or a line of an answer.

use super::read::{ReadError, SessionRead};
use crate::rules::views::{MarkdownInput, MarkdownSpec};
use serde_json::{json, Value};
use std::path::Path;

struct Block {
    kind: &'static str,
    offset: usize,
    text: String,
}

struct Session {
    key: String,
    blocks: Vec<Block>,
}

struct Entry {
    time: String,
    text: String,
}

/// The log's sessions, each with its blocks.
fn sessions(spec: &MarkdownSpec, text: &str) -> Vec<Session> {
    let mut out: Vec<Session> = Vec::new();
    let mut offset = 0;
    // A blank line ends a prompt or status block (an answer keeps its blank lines).
    let mut closed = false;
    for raw in text.split_inclusive('\n') {
        let at = offset;
        offset += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        if let Some(c) = spec.session.captures(line) {
            out.push(Session {
                key: c.get(1).map_or("", |g| g.as_str()).trim().to_string(),
                blocks: Vec::new(),
            });
            continue;
        }
        let Some(s) = out.last_mut() else { continue };
        let (kind, value) = if let Some(c) = spec.prompt.captures(line) {
            (
                "prompt",
                c.get(1).map_or("", |g| g.as_str()).trim_end().to_string(),
            )
        } else if spec.status.as_ref().is_some_and(|r| r.is_match(line)) {
            ("status", line.trim_end().to_string())
        } else if line.trim().is_empty() {
            match s.blocks.last_mut().filter(|b| b.kind == "text") {
                Some(b) => b.text.push('\n'),
                None => closed = true,
            }
            continue;
        } else {
            ("text", line.to_string())
        };
        match s.blocks.last_mut() {
            Some(b) if b.kind == kind && (kind == "text" || !closed) => {
                if kind == "text" {
                    while b.text.ends_with("\n\n") {
                        b.text.pop();
                    }
                }
                b.text.push('\n');
                b.text.push_str(&value);
            }
            _ => s.blocks.push(Block {
                kind,
                offset: at,
                text: value,
            }),
        }
        closed = false;
    }
    for s in &mut out {
        for b in &mut s.blocks {
            let t = b.text.trim_end().to_string();
            b.text = t;
        }
    }
    out
}

/// The typed entries of the input log.
fn entries(input: &MarkdownInput, log: &Path) -> Result<Vec<Entry>, ReadError> {
    let path = super::project::sidecar_path(&input.file, log, "");
    let bytes = match crate::util::untrusted::read_optional(&path, super::read::MAX_DOCUMENT_BYTES)
    {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(Vec::new()),
        Err(e) => return Err(ReadError::Bad(e.to_string())),
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut out: Vec<Entry> = Vec::new();
    for line in text.lines() {
        if let Some(c) = input.entry.captures(line) {
            out.push(Entry {
                time: c.get(1).map_or("", |g| g.as_str()).to_string(),
                text: String::new(),
            });
        } else if let (Some(c), Some(e)) = (input.line.captures(line), out.last_mut()) {
            if !e.text.is_empty() {
                e.text.push('\n');
            }
            e.text.push_str(c.get(1).map_or("", |g| g.as_str()));
        }
    }
    Ok(out)
}

pub fn read(spec: &MarkdownSpec, path: &Path, bytes: &[u8]) -> Result<Vec<SessionRead>, ReadError> {
    let text = String::from_utf8_lossy(bytes);
    let mut found = sessions(spec, &text);
    let typed = match &spec.input {
        Some(i) => entries(i, path)?,
        None => Vec::new(),
    };
    // Each entry belongs to the last session that started at or before it (times compared as text,
    // to the session time's precision: an entry in the same second as its session's start is its).
    let mut per: Vec<Vec<&Entry>> = found.iter().map(|_| Vec::new()).collect();
    for e in &typed {
        let owner = found.iter().rposition(|s| {
            let n = s.key.len().min(e.time.len());
            s.key.as_str() <= &e.time[..n]
        });
        if let Some(i) = owner {
            per[i].push(e);
        }
    }
    let file = path.to_string_lossy().into_owned();
    let mut out = Vec::new();
    for (s, entries) in found.iter_mut().zip(per) {
        let echo = !entries.is_empty();
        let mut queue = entries.into_iter().peekable();
        let mut messages: Vec<Value> = Vec::new();
        for b in &s.blocks {
            if b.kind == "prompt" {
                if let Some(e) = queue.next_if(|e| e.text.trim_end() == b.text) {
                    messages.push(json!({"id": format!("in:{}", e.time), "kind": "input", "time": e.time, "text": e.text}));
                }
            }
            let mut m = json!({"id": format!("md:{}", b.offset), "kind": b.kind, "text": b.text});
            if b.kind == "prompt" {
                m["echo"] = json!(echo);
            }
            messages.push(m);
        }
        for e in queue {
            messages.push(json!({"id": format!("in:{}", e.time), "kind": "input", "time": e.time, "text": e.text}));
        }
        out.push(SessionRead {
            id: format!("{file}#{}", s.key),
            session: json!({"file": file, "started": s.key}),
            messages: Some(messages),
            updated: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> MarkdownSpec {
        let re = |s: &str| regex::Regex::new(s).unwrap();
        MarkdownSpec {
            session: re(r"^# aider chat started at (.+)$"),
            prompt: re(r"^#### ?(.*)$"),
            status: Some(re(r"^> ")),
            input: Some(MarkdownInput {
                file: "{dir}/.aider.input.history".into(),
                entry: re(r"^# (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"),
                line: re(r"^\+(.*)$"),
            }),
        }
    }

    #[test]
    fn sessions_blocks_and_typed_entries_line_up() {
        let d = tempfile::tempdir().unwrap();
        let md = "\n# aider chat started at 2026-12-03 05:59:50\n\n> Aider v0.86.2  \n\n#### /ask What is it?  \n\n#### What is it?  \n> hello.py  \n\nIt is a greeting.\n\n#### not a prompt, part of the answer\n\n> Tokens: 1k  \n\n# aider chat started at 2026-12-03 06:01:55\n\n#### First line.  \n#### Second line.  \n\nDone.\n";
        std::fs::write(d.path().join(".aider.input.history"), "\n# 2026-12-03 05:59:53.855943\n+/ask What is it?\n\n# 2026-12-03 06:01:55.985151\n+First line.\n+Second line.\n").unwrap();
        let log = d.path().join(".aider.chat.history.md");
        let got = read(&spec(), &log, md.as_bytes()).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got[0].id.ends_with("#2026-12-03 05:59:50"));
        let kinds = |s: &SessionRead| -> Vec<String> {
            s.messages
                .as_ref()
                .unwrap()
                .iter()
                .map(|m| {
                    format!(
                        "{}:{}",
                        m["kind"].as_str().unwrap(),
                        m["text"].as_str().unwrap()
                    )
                })
                .collect()
        };
        assert_eq!(
            kinds(&got[0]),
            [
                "status:> Aider v0.86.2",
                "input:/ask What is it?",
                "prompt:/ask What is it?",
                "prompt:What is it?",
                "status:> hello.py",
                "text:It is a greeting.",
                "prompt:not a prompt, part of the answer",
                "status:> Tokens: 1k",
            ]
        );
        // The entry in the same second as its session's start is that session's.
        assert_eq!(kinds(&got[1])[0], "input:First line.\nSecond line.");
        assert_eq!(kinds(&got[1])[1], "prompt:First line.\nSecond line.");
        assert_eq!(got[1].messages.as_ref().unwrap()[1]["echo"], true);
    }
}
