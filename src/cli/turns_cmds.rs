//! `capture turns` (a transcript's turns, bounded) and `capture sessions` (discovered root sessions, most
//! recent first).

use super::output::Out;
use super::{Failure, EXIT_OK};
use crate::context::Context;
use crate::discover;
use crate::ledger::{self, key};
use crate::rules::Catalog;
use crate::turns::{self, Options, TurnRecord};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct TurnsArgs<'a> {
    pub transcript: &'a Path,
    pub since_line: u64,
    pub latest: bool,
    pub max_turns: usize,
    /// `--app`: the rule set to read it with, even outside its stores.
    pub app: Option<&'a str>,
    /// `--conversation`: the rendering a capture run of the part after `since_line` reads.
    pub conversation: bool,
}

pub fn turns(
    catalog: &Catalog,
    cx: &Context,
    a: TurnsArgs<'_>,
    out: &mut Out,
) -> Result<i32, Failure> {
    let TurnsArgs {
        transcript,
        since_line,
        latest,
        max_turns,
        app,
        conversation,
    } = a;
    if max_turns == 0 {
        return Err(Failure::Usage("--max-turns: must be at least 1".into()));
    }
    let (m, file) = super::explain::locate(catalog, cx, transcript, app)?;
    let Some(rules) = &m.rule.turns else {
        return Err(Failure::Other(format!(
            "rule set {} ({}) has no `turns` section; add one to read turns",
            m.rule.id, m.rule.origin
        )));
    };
    if conversation {
        return render_conversation(m.rule, cx, &file, since_line, out);
    }
    let f = discover::open_transcript(&file.path)
        .map_err(|e| Failure::Other(format!("{}: {e}", file.path.display())))?;
    let opts = Options {
        max_turns,
        ..Options::default()
    };
    let t = turns::extract(m.rule, rules, f, 1, since_line, &opts)
        .map_err(|e| Failure::Other(format!("{}: {e}", file.path.display())))?;
    let path = file.path.display().to_string();
    if latest {
        let ex = turns::latest_exchange(&t);
        out.emit(
            || serde_json::json!({"ok": true, "transcriptPath": path, "latest": ex.map(|r| serde_json::to_value(r).unwrap_or_default()).unwrap_or(serde_json::json!({}))}),
            |out| match ex {
                Some(r) => print_turn(r, out),
                None => out.line("no assistant turn yet"),
            },
        );
        return Ok(EXIT_OK);
    }
    out.emit(
        || {
            serde_json::json!({
                "ok": true,
                "transcriptPath": path,
                "app": m.rule.id,
                "sinceLine": since_line,
                "userTurns": t.user_turns,
                "totalTurns": t.total_turns,
                "tools": t.tools,
                "records": t.records,
            })
        },
        |out| {
            out.line(&format!(
                "{path} ({}): {} turns, {} with a user prompt{}",
                m.rule.id,
                t.total_turns,
                t.user_turns,
                if since_line > 0 {
                    format!(", after line {since_line}")
                } else {
                    String::new()
                }
            ));
            for r in &t.records {
                out.line("");
                print_turn(r, out);
            }
        },
    );
    Ok(EXIT_OK)
}

/// `capture turns --conversation`: what a capture run of the complete lines after `since_line` reads.
fn render_conversation(
    rule: &crate::rules::RuleSet,
    cx: &Context,
    file: &discover::FoundFile,
    since_line: u64,
    out: &mut Out,
) -> Result<i32, Failure> {
    let failed = |e: std::io::Error| Failure::Other(format!("{}: {e}", file.path.display()));
    let (from_byte, to_line, to_byte) = line_bounds(&file.path, since_line).map_err(failed)?;
    if to_line <= since_line {
        return Err(Failure::Other(format!(
            "{}: no complete line after line {since_line}",
            file.path.display()
        )));
    }
    let mut mapper = discover::repo::RepoMapper::new(&cx.almanac_home);
    let ex = discover::examine(rule, file, &mut mapper);
    let sid = ex.session_id.as_deref().unwrap_or("(unknown)");
    let part = crate::capture::conversation::Part {
        rule,
        transcript: &file.path,
        session_id: sid,
        from_line: since_line + 1,
        to_line,
        from_byte,
        to_byte,
    };
    let mut text = Vec::new();
    let w = crate::capture::conversation::write(&part, &mut text).map_err(failed)?;
    let text = String::from_utf8_lossy(&text);
    let path = file.path.display().to_string();
    out.emit(
        || {
            serde_json::json!({
                "ok": true,
                "transcriptPath": path,
                "app": rule.id,
                "fromLine": since_line + 1,
                "toLine": to_line,
                "fromByte": from_byte,
                "toByte": to_byte,
                "bytes": w.bytes,
                "partBytes": w.part_bytes,
                "shown": w.shown,
                "conversation": text,
            })
        },
        |out| out.line(text.trim_end()),
    );
    Ok(EXIT_OK)
}

/// Where line `after` ends, and the last complete line and where it ends.
fn line_bounds(path: &Path, after: u64) -> std::io::Result<(u64, u64, u64)> {
    let mut lines = crate::util::lines::LineReader::new(discover::open_transcript(path)?);
    let (mut from, mut last, mut end) = (0, 0, 0);
    while let Some(l) = lines.next_line()? {
        if !l.terminated {
            break;
        }
        if l.number == after {
            from = l.end;
        }
        (last, end) = (l.number, l.end);
    }
    Ok((from.min(end), last, end))
}

fn print_turn(r: &TurnRecord, out: &mut Out) {
    if r.kind == "overflow" {
        let (a, b) = r.dropped_turns.unwrap_or((0, 0));
        out.line(&format!(
            "… {} older turns ({a}-{b}) dropped to stay within the bound",
            r.dropped.unwrap_or(0)
        ));
        return;
    }
    out.line(&format!(
        "turn {} (line {}{})",
        r.turn,
        r.line,
        r.ts.as_ref().map(|t| format!(", {t}")).unwrap_or_default()
    ));
    let block = |label: &str, text: &str, cut: bool, out: &mut Out| {
        let mut lines = text.lines();
        out.line(&format!("  {label}: {}", lines.next().unwrap_or("")));
        for l in lines {
            out.line(&format!("    {l}"));
        }
        if cut {
            out.line("    [cut]");
        }
    };
    if let Some(u) = &r.user {
        block("user", u, r.truncated.contains(&"user"), out);
    }
    if let Some(a) = &r.assistant {
        block("assistant", a, r.truncated.contains(&"assistant"), out);
    }
    if !r.tools.is_empty() {
        out.line(&format!("  tools: {}", r.tools.join(", ")));
    }
}

pub struct SessionsArgs {
    pub apps: Vec<String>,
    pub repo: Option<PathBuf>,
    pub max_age: Option<Duration>,
}

pub fn sessions(
    catalog: &Catalog,
    cx: &Context,
    a: SessionsArgs,
    out: &mut Out,
) -> Result<i32, Failure> {
    let repo_filter = match &a.repo {
        Some(r) => {
            let abs = if r.is_absolute() {
                r.clone()
            } else {
                std::env::current_dir()
                    .map_err(|e| Failure::Other(e.to_string()))?
                    .join(r)
            };
            Some(crate::util::paths::normalize(&abs))
        }
        None => None,
    };
    let trace = crate::util::trace::Trace::new(std::time::Instant::now());
    let listing = discover::sessions::list(
        catalog,
        cx,
        &a.apps,
        a.max_age,
        repo_filter.as_deref(),
        &trace,
    );
    let captured = captured_states(cx, &listing.sessions);
    trace.mark("ledgers read");
    let rows = Rows(&listing.sessions, &captured, &listing.index);
    // Stores read into views that could not be read now (their sessions are those of the last read).
    let errors: Vec<StoreErrorRow> = discover::views::take_errors()
        .into_iter()
        .map(|e| StoreErrorRow {
            app: e.app,
            store: e.store.display().to_string(),
            reason: e.reason,
            read_again_next_sweep: e.busy,
            message: e.message,
        })
        .collect();
    // Streamed, each row made as it is written: 100k rows are never all in memory at once.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Sessions<'a> {
        ok: bool,
        sessions: &'a Rows<'a>,
        stats: &'a discover::sessions::ListStats,
        store_errors: &'a [StoreErrorRow],
    }
    out.emit(
        || Sessions {
            ok: true,
            sessions: &rows,
            stats: &listing.stats,
            store_errors: &errors,
        },
        |out| {
            sessions_human(&rows, out);
            for e in &errors {
                out.line(&format!(
                    "store not read ({}, {}): {}",
                    e.app,
                    e.reason,
                    crate::util::term::visible(&e.message)
                ));
            }
        },
    );
    trace.mark("written");
    // The process ends here: freeing 100k rows one by one cost a tenth of a second at 100k sessions.
    std::mem::forget(listing);
    Ok(EXIT_OK)
}

/// A store `capture sessions` could not read, as its JSON lists it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct StoreErrorRow {
    app: String,
    store: String,
    reason: crate::reason::Reason,
    /// Busy (being written): read again on the next sweep, nothing lost.
    read_again_next_sweep: bool,
    message: String,
}

/// What a session's ledger entry says: the line captured through and the status.
struct Captured {
    through_line: Option<u64>,
    status: &'static str,
}

/// Each session's capture state, reading each repo's ledger once and keeping only these two facts.
fn captured_states(cx: &Context, sessions: &[discover::sessions::Listed]) -> Vec<Captured> {
    let mut out: Vec<Captured> = sessions
        .iter()
        .map(|s| Captured {
            through_line: None,
            status: match s.examined.repo {
                None => "no-almanac-repo",
                Some(_) => "not captured",
            },
        })
        .collect();
    let mut by_repo: HashMap<&Path, Vec<usize>> = HashMap::new();
    for (i, s) in sessions.iter().enumerate() {
        if let (Some(r), Some(_)) = (&s.examined.repo, &s.examined.session_id) {
            by_repo.entry(&**r).or_default().push(i);
        }
    }
    // Ledgers are read on every core (at 100k sessions, reading 50 ledgers one after the other was a
    // fifth of the listing), each kept only while its sessions take their two facts.
    let repos: Vec<(&Path, Vec<usize>)> = by_repo.into_iter().collect();
    let found = crate::util::par::map(&repos, |(repo, idx)| {
        let Ok(facts) = ledger::entry_facts(repo, cx.now) else {
            return Vec::new();
        };
        idx.iter()
            .filter_map(|&i| {
                let s = &sessions[i];
                let sid = s.examined.session_id.as_deref().unwrap_or_default();
                let &(line, status) = facts.get(&key(&s.file.app, sid))?;
                Some((i, line, status))
            })
            .collect()
    });
    for (i, line, status) in found.into_iter().flatten() {
        out[i] = Captured {
            through_line: Some(line),
            status,
        };
    }
    out
}

/// The rows, their capture states, and the turn index their prompts are read from as each is written.
struct Rows<'a>(
    &'a [discover::sessions::Listed],
    &'a [Captured],
    &'a discover::turn_index::TurnIndex,
);

/// Rows are written a batch at a time, each batch's prompts read from the turn index on every core
/// first (one after the other, reading them tripled the time rows took to write at 100k).
const BATCH: usize = 2048;

type RowPrompts = (Option<crate::turns::Prompt>, Option<crate::turns::Prompt>);

impl Rows<'_> {
    fn row(&self, i: usize, (first_prompt, last_prompt): RowPrompts) -> SessionRow<'_> {
        let (s, c) = (&self.0[i], &self.1[i]);
        SessionRow {
            app: &s.file.app,
            session_id: s.examined.session_id.as_deref(),
            transcript_path: s.file.path.display().to_string(),
            repo_root: s.examined.repo.as_ref().map(|r| r.display().to_string()),
            project_dir: s.examined.cwd.as_deref(),
            modified: crate::policy::iso(chrono::DateTime::<chrono::Utc>::from(s.file.mtime)),
            size: s.file.size,
            user_turns: s.user_turns,
            first_prompt,
            last_prompt,
            captured_through_line: c.through_line,
            status: c.status,
        }
    }

    /// Each row in order, made as it is handed to `f`.
    fn each<E>(&self, mut f: impl FnMut(SessionRow<'_>) -> Result<(), E>) -> Result<(), E> {
        for from in (0..self.0.len()).step_by(BATCH) {
            let to = (from + BATCH).min(self.0.len());
            let parts: Vec<&[discover::sessions::Listed]> = self.0[from..to].chunks(256).collect();
            let prompts = crate::util::par::map(&parts, |rows| {
                rows.iter()
                    .map(|s| self.2.prompts(&s.prompts))
                    .collect::<Vec<_>>()
            });
            for (i, p) in (from..to).zip(prompts.into_iter().flatten()) {
                f(self.row(i, p))?;
            }
        }
        Ok(())
    }
}

impl serde::Serialize for Rows<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = ser.serialize_seq(Some(self.0.len()))?;
        self.each(|r| seq.serialize_element(&r))?;
        seq.end()
    }
}

/// One session as `capture sessions` shows it: where it is, its user turns and its capture state.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionRow<'a> {
    app: &'a str,
    session_id: Option<&'a str>,
    transcript_path: String,
    repo_root: Option<String>,
    /// Where the session ran, as its rule set derived it (None when it could not be placed).
    project_dir: Option<&'a str>,
    modified: String,
    size: u64,
    user_turns: Option<u64>,
    /// The first and the latest prompt, cut to 120 bytes (None without one).
    first_prompt: Option<crate::turns::Prompt>,
    last_prompt: Option<crate::turns::Prompt>,
    captured_through_line: Option<u64>,
    status: &'static str,
}

fn sessions_human(rows: &Rows, out: &mut Out) {
    if rows.0.is_empty() {
        out.line("no sessions found");
    }
    let _ = rows.each(|r| -> Result<(), ()> {
        out.line(&format!(
            "{}  {} {}  {}  {} bytes, {} user turns, captured through line {}, {}",
            r.modified,
            r.app,
            r.session_id.unwrap_or("?"),
            r.repo_root.as_deref().unwrap_or("(no repo)"),
            r.size,
            r.user_turns
                .map(|n| n.to_string())
                .unwrap_or_else(|| "?".into()),
            r.captured_through_line.unwrap_or(0),
            r.status
        ));
        out.line(&format!("    {}", r.transcript_path));
        if let (Some(first), Some(last)) = (r.first_prompt.as_deref(), r.last_prompt.as_deref()) {
            let one_line = |p: &str| p.split_whitespace().collect::<Vec<_>>().join(" ");
            out.line(&format!("    first: {}", one_line(first)));
            if r.user_turns.unwrap_or(0) > 1 {
                out.line(&format!("    last:  {}", one_line(last)));
            }
        }
        Ok(())
    });
}
