//! The capture prompt: instructions (embedded default, overridden by `$ALMANAC_HOME/prompts/capture.md`,
//! then by `<repo>/.almanac/prompts/capture.md`), then the continuation over the original transcript.
//! The prompt points at the transcript; it never pastes or copies it.

use crate::ledger::RunRecord;
use std::path::Path;

pub const DEFAULT_TEMPLATE: &str = include_str!("../../prompts/capture.md");
pub const MARKER: &str = "almanac-capture-run:";

/// The instructions in force for `repo`, with where they came from.
pub fn template(almanac_home: &Path, repo: &Path) -> (String, String) {
    for p in [
        repo.join(".almanac/prompts/capture.md"),
        almanac_home.join("prompts/capture.md"),
    ] {
        if let Ok(t) = std::fs::read_to_string(&p) {
            if !t.trim().is_empty() {
                return (t, p.display().to_string());
            }
        }
    }
    (DEFAULT_TEMPLATE.to_string(), "built in".to_string())
}

pub fn render(
    template: &str,
    run: &RunRecord,
    summary: Option<&crate::turns::PartSummary>,
    context: Option<&str>,
) -> String {
    let mut p = template.trim_end().to_string();
    p.push_str("\n\n");
    // The agent may run elsewhere than the repo root (codex's workspace is the wiki itself).
    p.push_str(&format!(
        "The repository is {}; its wiki is {}/.almanac/.\n",
        run.repo_root, run.repo_root
    ));
    p.push_str(&format!(
        "This transcript is from app {}, session {}:\n  {}\n\n",
        run.app, run.session_id, run.transcript_path
    ));
    if run.from_start == Some(true) {
        p.push_str(&format!(
            "This capture was asked to start over from line 1 (`almanac capture now --from-start`): capture \
             lines 1 to {} (bytes 0 to {}) again. Earlier lines may already be in the wiki: update and correct \
             those pages rather than duplicating them.\n",
            run.to_line, run.to_byte
        ));
    } else if run.from_line <= 1 {
        p.push_str(&format!(
            "Nothing of this session has been captured yet. Capture lines 1 to {} (bytes 0 to {}).\n",
            run.to_line, run.to_byte
        ));
    } else {
        p.push_str(&format!(
            "This session was previously captured through line {} and byte {}. Focus on line {} onward \
             (lines {} to {}, bytes {} to {}). You may inspect earlier lines only for context. Do not \
             re-document decisions that were already captured unless newer lines amend, invalidate, or add \
             important nuance to them.\n",
            run.from_line - 1,
            run.from_byte,
            run.from_line,
            run.from_line,
            run.to_line,
            run.from_byte,
            run.to_byte
        ));
    }
    if let Some(c) = context {
        p.push_str(c);
        p.push('\n');
    }
    if let (Some((i, n)), Some((a, b))) = (run.chunk, run.part_lines) {
        p.push_str(&format!(
            "The new part of this session (lines {a} to {b}) is too long for one run, so it is captured in {n} \
             chunks; this is chunk {i} of {n}: capture only lines {} to {}.\n",
            run.from_line, run.to_line
        ));
    }
    if let Some(s) = summary {
        // A chunk's summary is of that chunk alone (`sweep::plan`).
        p.push_str(&format!(
            "\n{} holds {} user turn{}.",
            if run.chunk.is_some() {
                "This chunk"
            } else {
                "The new part"
            },
            s.user_turns,
            if s.user_turns == 1 { "" } else { "s" }
        ));
        if let Some(u) = &s.first_user {
            p.push_str(&format!(" First user prompt: {}.", quote(u)));
        }
        if let Some(u) = &s.last_user {
            p.push_str(&format!(" Last user prompt: {}.", quote(u)));
        }
        if !s.tools.is_empty() {
            p.push_str(&format!(" Tools used: {}.", s.tools.join(", ")));
        }
        p.push_str(" (A summary only: read the transcript itself.)\n");
    }
    p.push_str(&format!("\n{MARKER} {}\n", run.run_id));
    p
}

/// A prompt excerpt on one line and quoted.
fn quote(s: &str) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("\"{}\"", one_line.replace('"', "'"))
}
