//! The conversation of a view (`discover::views`) as the capture agent reads it: the store itself is a
//! database or a document the agent cannot read as text, so each run gets the whole conversation, one
//! block a message (its number, its role as the rule set's `turns` say, its text, the tools it called),
//! in the run's own `runs/<run-id>.transcript.md`, removed when the run is pruned.

use crate::rules::views::VIEW_HEADER;
use crate::rules::RuleSet;
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;

/// The most of one message's text written (a longer one is cut, and says so).
const MAX_MESSAGE_CHARS: usize = 64 * 1024;
/// The most of a record written as JSON (one that is neither a prompt nor an answer: a tool result).
const MAX_RECORD_CHARS: usize = 4 * 1024;

/// A message's role, text and tool names by the rule set's `turns`.
fn describe(rule: &RuleSet, m: &Value) -> (&'static str, Option<String>, Vec<String>) {
    let Some(t) = &rule.turns else {
        return ("message", None, Vec::new());
    };
    // What the app wrote in the user's place (its context, a shell command's record): not the user's.
    if t.ignore.iter().any(|p| p.holds(m)) {
        return ("context, not a prompt", None, Vec::new());
    }
    let tools: Vec<String> = t
        .tools
        .iter()
        .filter(|(when, _)| when.as_ref().is_none_or(|w| w.holds(m)))
        .flat_map(|(_, p)| p.select(m))
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    if let Some(u) = t.user.iter().find(|u| u.applies(m) && u.has_text(m)) {
        return ("user", u.text(m), tools);
    }
    if let Some(a) = t.assistant.iter().find(|a| a.applies(m) && a.has_text(m)) {
        return ("assistant", a.text(m), tools);
    }
    if !tools.is_empty() {
        return ("assistant", None, tools);
    }
    ("other", None, tools)
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[… {} more bytes not shown]",
        &text[..end],
        text.len() - end
    )
}

/// Writes the readable conversation of the view at `view` to `out`; message N is line N + 1 of the view.
pub fn write(rule: &RuleSet, view: &Path, out: &Path) -> std::io::Result<()> {
    let r = std::io::BufReader::new(crate::discover::open_transcript(view)?);
    crate::util::atomic::write_atomic_with(out, |w| {
        for (i, line) in r.split(b'\n').enumerate() {
            let line = line?;
            let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if i == 0 {
                let h = &v[VIEW_HEADER];
                writeln!(
                    w,
                    "# Session {} ({})\n\nStore: {}\nProject: {}\n\nEach message below is numbered; the prompt names the messages to capture.\n",
                    h["session_id"].as_str().unwrap_or("?"),
                    rule.name,
                    h["store"].as_str().unwrap_or("?"),
                    h["project"].as_str().unwrap_or("(not placed)")
                )?;
                continue;
            }
            let (role, text, tools) = describe(rule, &v);
            writeln!(w, "## Message {i} ({role})\n")?;
            match text {
                Some(t) => writeln!(w, "{}\n", cut(&t, MAX_MESSAGE_CHARS))?,
                None if tools.is_empty() => writeln!(
                    w,
                    "```json\n{}\n```\n",
                    cut(&v.to_string(), MAX_RECORD_CHARS)
                )?,
                None => {}
            }
            if !tools.is_empty() {
                writeln!(w, "Tools called: {}\n", tools.join(", "))?;
            }
        }
        Ok(())
    })
}
