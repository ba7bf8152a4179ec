//! The capture prompt: instructions (embedded default, overridden by `$ALMANAC_HOME/prompts/capture.md`,
//! then by `<repo>/.almanac/prompts/capture.md`), then the continuation over the original transcript.
//! The prompt points at the transcript; it never pastes or copies it.
//!
//! The repo's override sits where the capture agent may write: one injected run could change the
//! instructions of every later capture. So the override is used only as almanac trusts it
//! (`$ALMANAC_HOME/state/prompts/<repo>.json`, with a copy of its text): when the first agent run in a
//! repo starts, the override as it is then (or its absence) becomes the trusted one. Any change after
//! that, whoever made it, is not used: captures go on with the last trusted text (or, when there was
//! none, the instructions that apply without it), and the sweep reports `agent-wrote-control-file` until
//! the user checks the file and confirms it with `almanac capture trust-prompt`. An override that is a
//! link, not a regular file or larger than `MAX_PROMPT_BYTES` is never read.

use crate::ledger::RunRecord;
use crate::turns::text::quoted;
use std::path::{Path, PathBuf};

pub const DEFAULT_TEMPLATE: &str = include_str!("../../prompts/capture.md");
pub const MARKER: &str = "almanac-capture-run:";
/// The largest prompt override almanac reads.
pub const MAX_PROMPT_BYTES: u64 = 1 << 20;

/// The instructions in force for a repo.
pub struct Template {
    pub text: String,
    /// Where they came from (a path, `built in`, or the trusted copy).
    pub source: String,
    /// Why the repo's override is not used as it is now (`agent-wrote-control-file`), if it is not.
    pub refused: Option<String>,
}

/// The repo's override file.
pub fn override_path(repo: &Path) -> PathBuf {
    repo.join(".almanac").join("prompts").join("capture.md")
}

/// The repo's override as it is now: None when there is none; `Err` when it may not be read.
fn read_override(repo: &Path) -> Result<Option<String>, String> {
    let path = override_path(repo);
    match crate::util::untrusted::read_optional(&path, MAX_PROMPT_BYTES) {
        Ok(Some(b)) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
        Ok(None) => Ok(None),
        Err(e) if e.to_string().contains(&path.display().to_string()) => Err(e.to_string()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// What almanac trusts of a repo's override: its text's hash (None: no override), kept under
/// `$ALMANAC_HOME`, out of the agent's reach, with a copy of the text.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Trusted {
    repo: String,
    sha256: Option<String>,
    since: String,
}

fn trust_paths(almanac_home: &Path, repo: &Path) -> (PathBuf, PathBuf) {
    let dir = almanac_home.join("state").join("prompts");
    let id = crate::ledger::repo_id(repo);
    (dir.join(format!("{id}.json")), dir.join(format!("{id}.md")))
}

fn load_trusted(almanac_home: &Path, repo: &Path) -> Option<(Trusted, Option<String>)> {
    let (json, md) = trust_paths(almanac_home, repo);
    let t: Trusted = serde_json::from_slice(&std::fs::read(json).ok()?).ok()?;
    let text = match t.sha256 {
        Some(_) => Some(std::fs::read_to_string(md).ok()?),
        None => None,
    };
    Some((t, text))
}

fn sha256(text: &str) -> String {
    use sha2::Digest;
    crate::util::ids::hex(&sha2::Sha256::digest(text.as_bytes()))
}

/// What a run record keeps of its prompt's text (`promptSha256`).
pub fn digest(text: &str) -> String {
    format!("sha256:{}", sha256(text))
}

/// Records `text` (None: no override) as the repo's trusted override.
fn store_trusted(
    almanac_home: &Path,
    repo: &Path,
    text: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> std::io::Result<()> {
    let (json, md) = trust_paths(almanac_home, repo);
    if let Some(t) = text {
        crate::util::atomic::write_atomic(&md, t.as_bytes())?;
    }
    crate::util::atomic::write_json_atomic(
        &json,
        &Trusted {
            repo: repo.display().to_string(),
            sha256: text.map(sha256),
            since: crate::policy::iso(now),
        },
    )
}

/// The instructions in force for `repo`, with where they came from.
pub fn template(almanac_home: &Path, repo: &Path) -> Template {
    let fallback = || {
        let p = almanac_home.join("prompts/capture.md");
        match std::fs::File::open(&p).and_then(|f| {
            let mut t = String::new();
            std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_PROMPT_BYTES), &mut t)?;
            Ok(t)
        }) {
            Ok(t) if !t.trim().is_empty() => (t, p.display().to_string()),
            _ => (DEFAULT_TEMPLATE.to_string(), "built in".to_string()),
        }
    };
    let current = read_override(repo);
    let trusted = load_trusted(almanac_home, repo);
    let refused = refusal(repo, &current, trusted.as_ref().map(|t| &t.0));
    let (text, source) = match (&refused, current, trusted) {
        (None, Ok(Some(t)), _) if !t.trim().is_empty() => {
            (t, override_path(repo).display().to_string())
        }
        (Some(_), _, Some((_, Some(t)))) if !t.trim().is_empty() => (
            t,
            format!("the last trusted copy of {}", override_path(repo).display()),
        ),
        _ => fallback(),
    };
    Template {
        text,
        source,
        refused,
    }
}

/// Why the override as it is now is not used, if it is not.
fn refusal(
    repo: &Path,
    current: &Result<Option<String>, String>,
    trusted: Option<&Trusted>,
) -> Option<String> {
    let path = override_path(repo);
    let confirm = format!(
        "check it, then `almanac capture trust-prompt --repo {}` uses it",
        repo.display()
    );
    match (current, trusted) {
        (Err(why), _) => Some(format!(
            "{why}; it is not used (captures use the last trusted instructions); {confirm} once it is a regular file"
        )),
        (Ok(now), Some(t)) if now.as_deref().map(sha256) != t.sha256 => Some(format!(
            "{} changed after almanac's capture agent first ran in this repo (since {}): captures go on \
             with the last trusted instructions until you confirm the change; {confirm}",
            path.display(),
            t.since
        )),
        _ => None,
    }
}

/// Why the repo's override is not used, if it is not: what the sweep and `doctor` report.
pub fn override_refused(almanac_home: &Path, repo: &Path) -> Option<String> {
    let current = read_override(repo);
    let trusted = load_trusted(almanac_home, repo);
    refusal(repo, &current, trusted.as_ref().map(|t| &t.0))
}

/// Before an agent runs in `repo`: the first time, the override as it is now (or its absence) becomes
/// the trusted one. Later runs change nothing.
pub fn note_agent_start(almanac_home: &Path, repo: &Path, now: chrono::DateTime<chrono::Utc>) {
    if load_trusted(almanac_home, repo).is_some() {
        return;
    }
    if let Ok(current) = read_override(repo) {
        let _ = store_trusted(almanac_home, repo, current.as_deref(), now);
    }
}

/// What `capture trust-prompt` shows before it trusts anything: the override as it is now (None: there
/// is none) with its full sha256, and the last trusted text to compare it with (None: nothing trusted
/// yet; `Some(None)`: the absence of an override was).
pub struct Proposal {
    pub current: Option<String>,
    pub sha256: Option<String>,
    pub trusted: Option<Option<String>>,
}

/// The override as it is now and the last trusted copy.
pub fn proposal(almanac_home: &Path, repo: &Path) -> Result<Proposal, String> {
    let current = read_override(repo)?;
    Ok(Proposal {
        sha256: current.as_deref().map(sha256),
        current,
        trusted: load_trusted(almanac_home, repo).map(|(_, text)| text),
    })
}

/// `capture trust-prompt`, once the user confirmed what they were shown: the override becomes the
/// trusted one only if it is still exactly the text whose sha256 is `shown` (None: that there is none),
/// read again now. Returns what was done.
pub fn trust_exactly(
    almanac_home: &Path,
    repo: &Path,
    shown: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<String, String> {
    let current = read_override(repo)?;
    let now_sha = current.as_deref().map(sha256);
    if now_sha.as_deref() != shown {
        return Err(format!(
            "{} is not the text that was shown (its sha256 is {}): nothing trusted; look at it again",
            override_path(repo).display(),
            now_sha.as_deref().unwrap_or("none: the file is gone")
        ));
    }
    store_trusted(almanac_home, repo, current.as_deref(), now)
        .map_err(|e| format!("cannot record the trusted prompt: {e}"))?;
    Ok(match now_sha {
        Some(h) => format!(
            "{} (sha256 {h}) is now the trusted capture prompt for {}",
            override_path(repo).display(),
            repo.display()
        ),
        None => format!(
            "{} has no prompt override; captures use the default instructions",
            repo.display()
        ),
    })
}

/// The prompt of `run`: the instructions, where the conversation is and which part to capture, where
/// it came from (`context`), which chunk it is, and a summary of the part. `conversation`: the rendering
/// the agent reads (`capture::conversation`), of a view (`views`: its messages are numbered) or of a
/// JSONL transcript (whose lines its entries cite); None: the prompt points at the transcript alone.
pub fn render(
    template: &str,
    run: &RunRecord,
    summary: Option<&crate::turns::PartSummary>,
    context: Option<&str>,
    conversation: Option<&Path>,
    views: bool,
) -> String {
    let mut p = template.trim_end().to_string();
    p.push_str("\n\n");
    // The agent may run elsewhere than the repo root (codex's workspace is the wiki itself).
    p.push_str(&format!(
        "The repository is {}; its wiki is {}.\n",
        quoted(&run.repo_root),
        quoted(&format!("{}/.almanac/", run.repo_root))
    ));
    match conversation {
        Some(path) if views => p.push_str(&messages_range(run, path)),
        Some(path) => {
            p.push_str(&rendered(run, path));
            p.push_str(&lines_range(run));
        }
        None => {
            p.push_str(&transcript_is(run));
            p.push_str(&lines_range(run));
        }
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
        p.push_str(match conversation {
            Some(_) => " (A summary only: read the conversation itself.)\n",
            None => " (A summary only: read the transcript itself.)\n",
        });
    }
    p.push_str(&format!("\n{MARKER} {}\n", run.run_id));
    p
}

fn transcript_is(run: &RunRecord) -> String {
    format!(
        "This transcript is from app {}, session {}:\n  {}\n\n",
        run.app,
        quoted(&run.session_id),
        quoted(&run.transcript_path)
    )
}

/// The transcript, and the rendering of its new part the agent reads.
fn rendered(run: &RunRecord, conversation: &Path) -> String {
    format!(
        "{}almanac rendered the part to capture as readable text, at the end of this prompt (a copy is in \
         {}). It holds the whole new \
         part (lines {} to {}) in full: every prompt and answer, each tool call with its main argument, the \
         start and size of each tool result, and, for context, the session's earlier prompts. Each entry \
         names its line in the transcript ([L123] is line 123); open the transcript at that line only for \
         what an entry shows cut.\n\n",
        transcript_is(run),
        quoted(&conversation.display().to_string()),
        run.from_line,
        run.to_line
    )
}

/// Where the transcript is and which of its lines to capture.
fn lines_range(run: &RunRecord) -> String {
    let mut p = String::new();
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
    p
}

/// Where the readable conversation of a view is and which of its messages to capture: message N is
/// line N + 1 of the view (line 1 is its header).
fn messages_range(run: &RunRecord, path: &Path) -> String {
    let first = run.from_line.saturating_sub(1).max(1);
    let last = run.to_line.saturating_sub(1);
    let mut p = format!(
        "This conversation is from app {}, session {}; almanac wrote it out as readable text, each entry \
         naming its message ([M12] is message 12), at the end of this prompt (a copy is in {}).\n\n",
        run.app,
        quoted(&run.session_id),
        quoted(&path.display().to_string())
    );
    if run.from_start == Some(true) || first <= 1 {
        let again = if run.from_start == Some(true) {
            " again; earlier messages may already be in the wiki: update and correct those pages rather than duplicating them"
        } else {
            ""
        };
        p.push_str(&format!("Capture messages 1 to {last}{again}.\n"));
    } else {
        p.push_str(&format!(
            "This session was previously captured through message {}. Focus on messages {first} to {last}. \
             You may read earlier messages only for context. Do not re-document decisions that were already \
             captured unless newer messages amend, invalidate, or add important nuance to them.\n",
            first - 1
        ));
    }
    p
}

/// A prompt excerpt on one line and quoted.
fn quote(s: &str) -> String {
    let one_line = crate::turns::text::one_line(s, usize::MAX);
    format!("\"{}\"", one_line.replace('"', "'"))
}
