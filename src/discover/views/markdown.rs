//! An append-only Markdown chat log holding many sessions (Aider's `.aider.chat.history.md`), with an
//! optional log beside it of what the user typed (`.aider.input.history`). Each session is a view:
//! its blocks in order (`prompt`: consecutive prompt lines; `status`: the tool's own lines; `text`: the
//! answers), each known by its byte offset, and the typed entries whose time falls in the session,
//! each known by its time, placed before the prompt block that echoes it (at the end when none does).
//! A session with typed entries takes its prompts from them (the log's prompt lines then echo them:
//! `echo: true`), as a prompt line may also be a command's echo or a line of an answer. The log is read
//! line by line, a session at a time, each held to the bounds of one session.

use super::read::{Bounds, Messages, ReadError, SessionRead, Sink};
use crate::rules::views::{MarkdownInput, MarkdownSpec};
use serde_json::{json, Value};
use std::path::Path;

struct Block {
    kind: &'static str,
    offset: u64,
    text: String,
}

struct Entry {
    time: String,
    text: String,
}

/// The session being read: its blocks, or why it is not read (a bound passed: what is left of it is
/// passed over).
struct Session {
    key: String,
    blocks: Vec<Block>,
    bytes: u64,
    refused: Option<String>,
}

/// The log's lines, one at a time, into its sessions' blocks.
struct Blocks<'a> {
    spec: &'a MarkdownSpec,
    current: Option<Session>,
    /// A blank line ends a prompt or status block (an answer keeps its blank lines).
    closed: bool,
    bounds: Bounds,
}

impl Blocks<'_> {
    /// Takes one line (without its newline) at byte offset `at`; a session that ends with it is given.
    fn line(&mut self, line: &str, at: u64) -> Option<Session> {
        if let Some(c) = self.spec.session.captures(line) {
            self.bounds = Bounds::default();
            return self.current.replace(Session {
                key: c.get(1).map_or("", |g| g.as_str()).trim().to_string(),
                blocks: Vec::new(),
                bytes: 0,
                refused: None,
            });
        }
        let s = self.current.as_mut().filter(|s| s.refused.is_none())?;
        let (kind, value) = if let Some(c) = self.spec.prompt.captures(line) {
            (
                "prompt",
                c.get(1).map_or("", |g| g.as_str()).trim_end().to_string(),
            )
        } else if self.spec.status.as_ref().is_some_and(|r| r.is_match(line)) {
            ("status", line.trim_end().to_string())
        } else if line.trim().is_empty() {
            match s.blocks.last_mut().filter(|b| b.kind == "text") {
                Some(b) => b.text.push('\n'),
                None => self.closed = true,
            }
            return None;
        } else {
            ("text", line.to_string())
        };
        s.bytes += value.len() as u64 + 1;
        match s.blocks.last_mut() {
            Some(b) if b.kind == kind && (kind == "text" || !self.closed) => {
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
        self.closed = false;
        if let Err(why) = self.bounds.set(s.blocks.len(), s.bytes) {
            s.refused = Some(why);
            s.blocks = Vec::new();
        }
        None
    }

    /// A line too long to hold: the session it is in passes the bound of one session.
    fn oversized(&mut self, max: u64) {
        if let Some(s) = self.current.as_mut() {
            if s.refused.is_none() {
                s.refused = Some(super::read::too_large(max));
                s.blocks = Vec::new();
            }
        }
    }
}

/// The typed entries of the input log.
fn entries(input: &MarkdownInput, log: &Path, max: u64) -> Result<Vec<Entry>, ReadError> {
    let path = super::project::sidecar_path(&input.file, log, "");
    let bytes = match crate::util::untrusted::read_optional(&path, max) {
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

/// The log's lines, each with its byte offset, read up to `len` bytes (`f` is handed each).
fn each_line(
    path: &Path,
    len: u64,
    f: &mut dyn FnMut(Option<&str>, u64),
) -> Result<u64, ReadError> {
    let bad = |e: std::io::Error| ReadError::Bad(format!("{}: {e}", path.display()));
    let file = crate::util::untrusted::open_regular(path).map_err(bad)?;
    let max_line = usize::try_from(super::read::max_session_bytes()).unwrap_or(usize::MAX);
    let mut lines =
        crate::util::lines::LineReader::with_max_line(std::io::Read::take(file, len), max_line);
    let mut end = 0;
    while let Some(line) = lines.next_line().map_err(bad)? {
        end = line.end;
        match line.oversized {
            true => f(None, line.start),
            false => f(Some(&String::from_utf8_lossy(line.bytes)), line.start),
        }
    }
    Ok(end)
}

/// The log's sessions, each handed to `sink` as it ends. The log is read twice, line by line: once for
/// when each session started (a typed entry belongs to the last session that started at or before it),
/// then for their blocks; one session's blocks are held at a time.
pub fn read(spec: &MarkdownSpec, path: &Path, max: u64, sink: &mut Sink) -> Result<(), ReadError> {
    let size = std::fs::metadata(path)
        .map_err(|e| ReadError::Bad(format!("{}: {e}", path.display())))?
        .len();
    if size > max {
        return Err(ReadError::Bad(format!(
            "{} is larger than {}; almanac reads at most that much of it",
            path.display(),
            crate::util::duration::format_size(max)
        )));
    }
    let mut keys: Vec<String> = Vec::new();
    let len = each_line(path, max, &mut |line, _| {
        if let Some(c) = line.and_then(|l| spec.session.captures(l)) {
            keys.push(c.get(1).map_or("", |g| g.as_str()).trim().to_string());
        }
    })?;
    // What the user typed is held whole: at most one session's bound of it.
    let typed = match &spec.input {
        Some(i) => entries(i, path, super::read::max_session_bytes())?,
        None => Vec::new(),
    };
    // Each entry belongs to the last session that started at or before it (times compared as text,
    // to the session time's precision: an entry in the same second as its session's start is its).
    let mut per: Vec<Vec<&Entry>> = keys.iter().map(|_| Vec::new()).collect();
    let starts_by = |k: &str, e: &Entry| {
        let n = k.len().min(e.time.len());
        k <= &e.time[..n]
    };
    // Sessions start in time order in a log that only grows: a binary search; else one scan each.
    let sorted = keys.windows(2).all(|w| w[0] <= w[1]);
    for e in &typed {
        let owner = match sorted {
            true => keys.partition_point(|k| starts_by(k, e)).checked_sub(1),
            false => keys.iter().rposition(|k| starts_by(k, e)),
        };
        if let Some(i) = owner {
            per[i].push(e);
        }
    }
    let file = path.to_string_lossy().into_owned();
    let mut per = per.into_iter();
    let mut emit = |s: Session| {
        let entries = per.next().unwrap_or_default();
        sink(session_read(&file, s, entries));
    };
    let mut blocks = Blocks {
        spec,
        current: None,
        closed: false,
        bounds: Bounds::default(),
    };
    each_line(path, len, &mut |line, at| match line {
        Some(l) => {
            if let Some(done) = blocks.line(l, at) {
                emit(done);
            }
        }
        None => blocks.oversized(super::read::max_session_bytes()),
    })?;
    if let Some(last) = blocks.current.take() {
        emit(last);
    }
    Ok(())
}

/// One session's messages: its blocks in order, each typed entry before the prompt block that echoes
/// it (the rest at the end).
fn session_read(file: &str, mut s: Session, entries: Vec<&Entry>) -> SessionRead {
    let id = format!("{file}#{}", s.key);
    let session = json!({"file": file, "started": s.key});
    if let Some(why) = s.refused.take() {
        return SessionRead {
            id,
            session,
            messages: Messages::Refused(why),
            updated: None,
        };
    }
    let echo = !entries.is_empty();
    let mut queue = entries.into_iter().peekable();
    let mut messages: Vec<Value> = Vec::new();
    for b in &mut s.blocks {
        b.text.truncate(b.text.trim_end().len());
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
    let typed: u64 = messages
        .iter()
        .filter(|m| m["kind"] == "input")
        .filter_map(|m| m["text"].as_str())
        .map(|t| t.len() as u64 + 1)
        .sum();
    let messages = match Bounds::default().set(messages.len(), s.bytes + typed) {
        Ok(()) => Messages::Read(messages),
        Err(why) => Messages::Refused(why),
    };
    SessionRead {
        id,
        session,
        messages,
        updated: None,
    }
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
        std::fs::write(&log, md).unwrap();
        let mut got = Vec::new();
        read(&spec(), &log, 1 << 20, &mut |s| got.push(s)).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got[0].id.ends_with("#2026-12-03 05:59:50"));
        let kinds = |s: &SessionRead| -> Vec<String> {
            let Messages::Read(list) = &s.messages else {
                panic!("refused")
            };
            list.iter()
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
        let Messages::Read(list) = &got[1].messages else {
            panic!("refused")
        };
        assert_eq!(list[1]["echo"], true);
    }
}
