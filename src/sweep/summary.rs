//! What a sweep reports: the runs it started, what it skipped and why, what needs a person, the totals
//! and the cost of the sweep itself. Each phase records into one `Summary`.

use crate::discover::{Examined, FoundFile};
use crate::reason::Reason;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartedItem {
    pub app: String,
    pub session_id: String,
    pub transcript_path: String,
    pub repo_root: String,
    pub run_id: String,
    pub from_line: u64,
    pub to_line: u64,
    pub from_byte: u64,
    pub to_byte: u64,
    /// Bytes of the range, user turns in what this sweep starts of the new part (all its chunks that fit
    /// the budget), and the estimated tokens of the range.
    pub new_bytes: u64,
    pub new_turns: Option<u64>,
    pub est_tokens: u64,
    /// (this chunk, chunks) when the new part is captured in several runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk: Option<(u32, u32)>,
}

/// What the started runs will read, summed.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub runs: u64,
    pub new_bytes: u64,
    pub new_turns: u64,
    pub est_tokens: u64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedItem {
    pub app: String,
    pub session_id: Option<String>,
    pub transcript_path: String,
    pub repo_root: Option<String>,
    pub reason: Reason,
    /// Words for a person: what exactly went wrong, or what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl SkippedItem {
    /// A transcript skipped (or needing attention) for `reason`.
    pub fn of(file: &FoundFile, ex: &Examined, reason: Reason, detail: Option<String>) -> Self {
        SkippedItem {
            app: file.app.to_string(),
            session_id: ex.session_id.as_deref().map(str::to_string),
            transcript_path: file.path.display().to_string(),
            repo_root: ex.repo.as_ref().map(|r| r.display().to_string()),
            reason,
            detail,
        }
    }

    /// A problem with a repo's run store rather than with a transcript.
    /// A ledger the worker found overwritten or deleted while an agent ran, and wrote back.
    pub fn overwritten(repo: &Path, why: String) -> Self {
        let detail = format!("{why}; check what the capture agent did (its run log)");
        let path = crate::ledger::ledger_path(repo);
        Self::of_store(repo, &path, Reason::LedgerOverwritten, detail)
    }

    pub fn of_store(repo: &Path, path: &Path, reason: Reason, detail: String) -> Self {
        SkippedItem {
            app: "almanac".into(),
            session_id: None,
            transcript_path: path.display().to_string(),
            repo_root: Some(repo.display().to_string()),
            reason,
            detail: Some(detail),
        }
    }
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub files_visited: u64,
    pub bytes_read: u64,
    pub elapsed_ms: u64,
    pub unreadable: u64,
    pub duplicates: u64,
    pub subagents: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub scanned: u64,
    pub eligible: u64,
    pub dry_run: bool,
    pub capture_since: Option<String>,
    pub started: Vec<StartedItem>,
    pub skipped: Vec<SkippedItem>,
    pub needs_attention: Vec<SkippedItem>,
    /// Transcripts rewritten before their cursor that still held the last captured record: the capture
    /// resumed after it (`recovered-prefix`). They also appear as started or skipped as usual.
    pub recovered: Vec<SkippedItem>,
    pub counts: BTreeMap<&'static str, u64>,
    pub totals: Totals,
    pub stats: Stats,
    /// Whether skipped transcripts are listed (`--json`, `doctor`, `capture now`) or only counted (a
    /// sweep's words, what the scheduler runs: 100k unchanged sessions are a line, not 40 MB held).
    #[serde(skip)]
    pub list_skipped: bool,
    /// Skipped transcripts by reason, listed or not.
    #[serde(skip)]
    pub skipped_by_reason: BTreeMap<&'static str, u64>,
}

impl Summary {
    pub fn new(dry_run: bool, capture_since: Option<String>) -> Summary {
        Summary {
            scanned: 0,
            eligible: 0,
            dry_run,
            capture_since,
            started: Vec::new(),
            skipped: Vec::new(),
            needs_attention: Vec::new(),
            recovered: Vec::new(),
            counts: BTreeMap::new(),
            totals: Totals::default(),
            stats: Stats::default(),
            list_skipped: true,
            skipped_by_reason: BTreeMap::new(),
        }
    }

    /// How many transcripts were skipped, listed or not.
    pub fn skipped_total(&self) -> u64 {
        self.skipped_by_reason.values().sum()
    }

    pub fn count(&mut self, reason: Reason) {
        self.count_n(reason, 1);
    }

    /// `n` more transcripts skipped for `reason` (none: the reason is not listed).
    pub fn count_n(&mut self, reason: Reason, n: u64) {
        if n > 0 {
            *self.counts.entry(reason.code()).or_default() += n;
        }
    }

    pub fn skip(&mut self, item: SkippedItem) {
        self.count(item.reason);
        *self
            .skipped_by_reason
            .entry(item.reason.code())
            .or_default() += 1;
        if self.list_skipped {
            self.skipped.push(item);
        }
    }

    pub fn attention(&mut self, item: SkippedItem) {
        self.count(item.reason);
        self.needs_attention.push(item);
    }

    pub fn recover(&mut self, item: SkippedItem) {
        self.count(item.reason);
        self.recovered.push(item);
    }

    /// Lists in a stable order (app, then transcript path), whatever order the phases worked in.
    pub fn sort(&mut self) {
        self.started
            .sort_by(|a, b| (&a.app, &a.transcript_path).cmp(&(&b.app, &b.transcript_path)));
        for list in [
            &mut self.skipped,
            &mut self.needs_attention,
            &mut self.recovered,
        ] {
            list.sort_by(|a, b| (&a.app, &a.transcript_path).cmp(&(&b.app, &b.transcript_path)));
        }
    }
}
