//! One transcript's ledger entry: its captured cursor, the run(s) it waits for, and why it failed or needs
//! attention. Callers say what happened (a run was queued, succeeded, failed; the file moved) and the
//! entry keeps its fields consistent; the JSON format is the ledger's.

use super::cursor;
use crate::reason::Reason;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryStatus {
    Done,
    Pending,
    Failed,
    NeedsAttention,
}

impl EntryStatus {
    /// The status as the ledger and `--json` outputs write it.
    pub const fn code(self) -> &'static str {
        match self {
            EntryStatus::Done => "done",
            EntryStatus::Pending => "pending",
            EntryStatus::Failed => "failed",
            EntryStatus::NeedsAttention => "needs_attention",
        }
    }
}

/// A capture run that changed files outside the wiki (see `capture::verify`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OutsideWiki {
    pub run_id: String,
    pub paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_changed_during_run: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub path: String,
    pub app: String,
    pub session_id: String,
    pub status: EntryStatus,
    pub last_captured_size: u64,
    pub last_captured_line: u64,
    pub last_captured_prefix_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_captured_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_to_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_to_line: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_prefix_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_started_at: Option<String>,
    /// Consecutive failed runs since the last success or reset.
    #[serde(default)]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The reason code while status is needs_attention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<String>,
    /// (device, inode) of the transcript when the cursor was last set: a replaced file is re-verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<(u64, u64)>,
    /// The transcript's mtime (ns since the epoch) when a sweep last saw it at `path` and `fileId`. The
    /// same size with another mtime means the file was rewritten in place (a line replaced by one of the
    /// same length): its prefix is verified again instead of the file being called unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_mtime_ns: Option<i64>,
    /// The cursor came from the `capture_since` baseline, not from a capture run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub baseline: bool,
    /// The last run that changed files outside `.almanac/` (`agent-wrote-outside-wiki` until
    /// `capture reset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrote_outside_wiki: Option<OutsideWiki>,
    /// The file's size when its uncaptured part was found to hold no content (no prompt, assistant text
    /// or tool call): while the same file has this size, the sweep skips it (`no-new-content`) without
    /// reading it again. (`noTurnsThrough`, which earlier versions wrote for "no prompt", is not read:
    /// such a part may hold assistant text, so it is read again.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_content_through: Option<u64>,
    /// Later chunks of a new part captured in several runs, in order; each becomes the pending run when
    /// the one before it succeeds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_rest: Vec<PendingChunk>,
    /// The rule's `record_id` of the transcript's first record, and of the last record before the
    /// captured cursor (docs/state.md, "Identity and overlap"): a fork that copied them starts after them; a
    /// rewrite before the cursor that kept them resumes after the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_record_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_record_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_last_record_id: Option<String>,
    /// The spans of bytes (from, to) the cursor skipped because another session of the transcript's
    /// family (a fork, an old-style resume, the session they came from) claimed their records first:
    /// they are that session's, so this one does not claim them (docs/state.md, "Identity and overlap").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copied_spans: Vec<(u64, u64)>,
    /// Fields this version does not know (written by a later minor change): kept on rewrite.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PendingChunk {
    pub run_id: String,
    pub to_size: u64,
    pub to_line: u64,
    pub prefix_hash: String,
    /// The record id of the chunk's last record with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_record_id: Option<String>,
}

impl LedgerEntry {
    /// The cursor skipped bytes `from..to`: records another session of its family claimed first.
    pub fn skip_copied(&mut self, from: u64, to: u64) {
        if to > from {
            self.copied_spans.push((from, to));
        }
    }

    /// The spans of its transcript's first `to` bytes this session claims: all, less those it skipped
    /// as copied.
    pub fn claims_before(&self, to: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = 0;
        for &(a, b) in &self.copied_spans {
            if a.min(to) > at {
                out.push((at, a.min(to)));
            }
            at = at.max(b);
        }
        if to > at {
            out.push((at, to));
        }
        out
    }

    /// The bytes of its transcript this session captured or has queued runs for.
    pub fn claimed_to(&self) -> u64 {
        match self.status {
            EntryStatus::Pending => self
                .pending_rest
                .last()
                .map(|c| c.to_size)
                .or(self.pending_to_size)
                .unwrap_or(self.last_captured_size),
            _ => self.last_captured_size,
        }
    }

    pub fn fresh(app: &str, session_id: &str, path: &str) -> LedgerEntry {
        LedgerEntry {
            path: path.to_string(),
            app: app.to_string(),
            session_id: session_id.to_string(),
            status: EntryStatus::Done,
            last_captured_size: 0,
            last_captured_line: 0,
            last_captured_prefix_hash: cursor::EMPTY_HASH.to_string(),
            last_captured_at: None,
            last_run_id: None,
            pending_run_id: None,
            pending_to_size: None,
            pending_to_line: None,
            pending_prefix_hash: None,
            pending_started_at: None,
            attempts: 0,
            last_error: None,
            attention: None,
            file_id: None,
            seen_mtime_ns: None,
            baseline: false,
            no_content_through: None,
            wrote_outside_wiki: None,
            pending_rest: Vec::new(),
            copied_spans: Vec::new(),
            first_record_id: None,
            last_record_id: None,
            pending_last_record_id: None,
            extra: Default::default(),
        }
    }

    /// Places the cursor of an entry that was never captured: at the `capture_since` baseline (`baseline`
    /// true), or where a first capture's range starts.
    pub fn place_cursor(&mut self, bytes: u64, lines: u64, hash: String, baseline: bool) {
        self.last_captured_size = bytes;
        self.last_captured_line = lines;
        self.last_captured_prefix_hash = hash;
        self.baseline = baseline;
    }

    /// The captured prefix was rewritten, and the last captured record (`last_record_id`, kept) now ends
    /// at this cursor: the cursor moves there, and a `prefix-mismatch` ends.
    pub fn recover_cursor(&mut self, bytes: u64, lines: u64, hash: String) {
        self.last_captured_size = bytes;
        self.last_captured_line = lines;
        self.last_captured_prefix_hash = hash;
        self.no_content_through = None;
        // Where the skipped copies now lie is unknown: the session claims all it captured.
        self.copied_spans.clear();
        self.end_prefix_mismatch();
    }

    /// The entry now describes this file: path and identity follow a moved or verified transcript. A
    /// prefix that was found to match again ends a `prefix-mismatch`.
    pub fn follow_file(&mut self, path: String, file_id: (u64, u64), mtime_ns: i64) {
        self.path = path;
        self.file_id = Some(file_id);
        self.seen_mtime_ns = Some(mtime_ns);
        self.end_prefix_mismatch();
    }

    fn end_prefix_mismatch(&mut self) {
        if self.status == EntryStatus::NeedsAttention
            && self.attention.as_deref() == Some(Reason::PrefixMismatch.code())
        {
            self.status = EntryStatus::Done;
            self.attention = None;
            self.last_error = None;
        }
    }

    /// Something a person must look at; the cursor stays where it is.
    pub fn needs_attention(&mut self, reason: Reason, detail: String) {
        self.status = EntryStatus::NeedsAttention;
        self.attention = Some(reason.code().to_string());
        self.last_error = Some(detail);
    }

    /// The uncaptured part, read at this file size, holds no content.
    pub fn no_content_at(&mut self, size: u64) {
        self.no_content_through = Some(size);
    }

    /// A run for the first chunk of the new part was queued: the entry waits for it.
    pub fn mark_pending(&mut self, chunk: PendingChunk, now: &str) {
        self.status = EntryStatus::Pending;
        self.no_content_through = None;
        self.last_run_id = Some(chunk.run_id.clone());
        self.pending_run_id = Some(chunk.run_id);
        self.pending_to_size = Some(chunk.to_size);
        self.pending_to_line = Some(chunk.to_line);
        self.pending_prefix_hash = Some(chunk.prefix_hash);
        self.pending_last_record_id = chunk.last_record_id;
        self.pending_started_at = Some(now.to_string());
        self.pending_rest.clear();
    }

    /// A run for a later chunk was queued: it becomes pending when the chunks before it succeed.
    pub fn add_later_chunk(&mut self, chunk: PendingChunk) {
        self.pending_rest.push(chunk);
    }

    /// The run could not even be queued: a failed attempt, the cursor stays.
    pub fn fail_to_start(&mut self, error: &str) {
        self.status = EntryStatus::Failed;
        self.attempts += 1;
        self.last_error = Some(error.to_string());
    }

    /// `capture reset --skip-existing`: everything up to `bytes` counts as captured, with a clean slate.
    pub fn reset_cursor(
        &mut self,
        bytes: u64,
        lines: u64,
        hash: String,
        file: (String, (u64, u64)),
    ) {
        self.status = EntryStatus::Done;
        self.place_cursor(bytes, lines, hash, true);
        self.copied_spans.clear();
        self.last_record_id = None;
        self.attempts = 0;
        self.last_error = None;
        self.attention = None;
        self.wrote_outside_wiki = None;
        self.path = file.0;
        self.file_id = Some(file.1);
        self.seen_mtime_ns = None;
    }

    /// `capture reset --retries`: the failed attempts are forgotten, the cursor stays where it is.
    pub fn clear_failures(&mut self) {
        self.attempts = 0;
        if self.status == EntryStatus::Failed {
            self.status = EntryStatus::Done;
            self.last_error = None;
        }
    }

    /// The run this entry waits for, if it is `run_id`.
    pub fn waits_for(&self, run_id: &str) -> bool {
        self.pending_run_id.as_deref() == Some(run_id)
    }

    fn clear_pending(&mut self) {
        self.pending_run_id = None;
        self.pending_to_size = None;
        self.pending_to_line = None;
        self.pending_prefix_hash = None;
        self.pending_last_record_id = None;
        self.pending_started_at = None;
    }

    /// `record`'s run succeeded: `complete`, and remember whether it changed files outside the wiki (kept
    /// until `capture reset`, whatever later runs do).
    pub fn complete_run(&mut self, record: &super::record::RunRecord, now: &str) {
        self.complete(&record.run_id, now);
        self.note_outside_wiki(record);
    }

    /// `record`'s run failed: `fail`, and remember whether it changed files outside the wiki before it
    /// ended, as for a run that succeeded. Returns the later chunks' run ids, which must not run now.
    pub fn fail_run(&mut self, record: &super::record::RunRecord, error: &str) -> Vec<String> {
        let cancelled = self.fail(&record.run_id, error);
        self.note_outside_wiki(record);
        cancelled
    }

    /// Keeps `record`'s changes outside the wiki, if any (until `capture reset`, whatever later runs do).
    fn note_outside_wiki(&mut self, record: &super::record::RunRecord) {
        if let Some(paths) = record.wrote_outside_wiki.clone().filter(|p| !p.is_empty()) {
            self.wrote_outside_wiki = Some(OutsideWiki {
                run_id: record.run_id.clone(),
                paths,
                also_changed_during_run: record.also_changed_during_run.clone().unwrap_or_default(),
            });
        }
    }

    /// The pending run succeeded: move the cursor to its end, and make the next chunk (if any) pending.
    pub fn complete(&mut self, run_id: &str, now: &str) {
        let rest = std::mem::take(&mut self.pending_rest);
        if let (Some(size), Some(line), Some(hash)) = (
            self.pending_to_size,
            self.pending_to_line,
            self.pending_prefix_hash.clone(),
        ) {
            self.last_captured_size = size;
            self.last_captured_line = line;
            self.last_captured_prefix_hash = hash;
            self.last_record_id = self.pending_last_record_id.take();
        }
        self.last_captured_at = Some(now.to_string());
        self.last_run_id = Some(run_id.to_string());
        self.status = EntryStatus::Done;
        self.attempts = 0;
        self.last_error = None;
        self.attention = None;
        self.baseline = false;
        self.no_content_through = None;
        self.clear_pending();
        let mut rest = rest.into_iter();
        if let Some(next) = rest.next() {
            self.status = EntryStatus::Pending;
            self.pending_run_id = Some(next.run_id);
            self.pending_to_size = Some(next.to_size);
            self.pending_to_line = Some(next.to_line);
            self.pending_prefix_hash = Some(next.prefix_hash);
            self.pending_last_record_id = next.last_record_id;
            self.pending_started_at = Some(now.to_string());
            self.pending_rest = rest.collect();
        }
    }

    /// The pending run failed: the cursor stays; the next sweep retries within the budget. Returns the
    /// later chunks' run ids, which must not run now.
    pub fn fail(&mut self, run_id: &str, error: &str) -> Vec<String> {
        self.attempts += 1;
        self.cancel(run_id, error)
    }

    /// As `fail` without spending an attempt (the run never ran: the circuit breaker stopped it).
    pub fn cancel(&mut self, run_id: &str, error: &str) -> Vec<String> {
        self.last_run_id = Some(run_id.to_string());
        self.status = EntryStatus::Failed;
        self.last_error = Some(error.to_string());
        self.clear_pending();
        std::mem::take(&mut self.pending_rest)
            .into_iter()
            .map(|c| c.run_id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_status_code_is_what_serde_writes() {
        for st in [
            EntryStatus::Done,
            EntryStatus::Pending,
            EntryStatus::Failed,
            EntryStatus::NeedsAttention,
        ] {
            assert_eq!(serde_json::to_value(st).unwrap(), st.code());
        }
    }

    use super::*;

    /// A session claims what it captured, less the spans its cursor skipped as its family's records; an
    /// empty skip is not remembered, and the spans survive the ledger's JSON.
    #[test]
    fn a_session_claims_what_it_captured_less_what_it_skipped() {
        let mut e = LedgerEntry::fresh("claude", "s", "/t.jsonl");
        assert_eq!(e.claims_before(100), [(0, 100)]);
        e.skip_copied(0, 30);
        e.skip_copied(50, 50);
        e.skip_copied(60, 70);
        assert_eq!(e.copied_spans, [(0, 30), (60, 70)]);
        assert_eq!(e.claims_before(100), [(30, 60), (70, 100)]);
        assert_eq!(e.claims_before(65), [(30, 60)]);
        assert_eq!(e.claims_before(20), []);
        let back: LedgerEntry = serde_json::from_value(serde_json::to_value(&e).unwrap()).unwrap();
        assert_eq!(back.copied_spans, e.copied_spans);
        assert_eq!(serde_json::to_value(&e).unwrap()["copiedSpans"][1][0], 60);
    }

    fn chunk(id: &str, to: u64) -> PendingChunk {
        PendingChunk {
            run_id: id.into(),
            to_size: to,
            to_line: to / 10,
            prefix_hash: format!("sha256:{to}"),
            last_record_id: None,
        }
    }

    fn captured_through(bytes: u64) -> LedgerEntry {
        let mut e = LedgerEntry::fresh("claude", "s1", "/t/s1.jsonl");
        e.place_cursor(bytes, bytes / 10, format!("sha256:{bytes}"), false);
        e
    }

    #[test]
    fn the_cursor_advances_only_when_the_run_succeeds() {
        let mut e = captured_through(100);
        e.mark_pending(chunk("run_a", 300), "2026-11-30T00:00:00.000Z");
        assert_eq!(e.status, EntryStatus::Pending);
        assert_eq!(e.last_captured_size, 100, "queued is not captured");
        e.complete("run_a", "2026-11-30T01:00:00.000Z");
        assert_eq!(e.status, EntryStatus::Done);
        assert_eq!(
            (e.last_captured_size, e.last_captured_line),
            (300, 30),
            "success moves the cursor to the run's end"
        );
        assert_eq!(e.last_captured_prefix_hash, "sha256:300");
        assert!(e.pending_run_id.is_none());
    }

    #[test]
    fn a_failure_spends_an_attempt_and_keeps_the_cursor() {
        let mut e = captured_through(100);
        for n in 1..=2 {
            e.mark_pending(chunk("run_a", 300), "2026-11-30T00:00:00.000Z");
            let cancelled = e.fail("run_a", "agent exited with code 1");
            assert!(cancelled.is_empty());
            assert_eq!(e.status, EntryStatus::Failed);
            assert_eq!(e.attempts, n);
            assert_eq!(e.last_captured_size, 100);
            assert_eq!(e.last_error.as_deref(), Some("agent exited with code 1"));
        }
        // A circuit-breaker cancel spends no attempt; a success clears them.
        e.mark_pending(chunk("run_b", 300), "2026-11-30T00:00:00.000Z");
        e.cancel("run_b", "cancelled by the circuit breaker");
        assert_eq!(e.attempts, 2);
        e.mark_pending(chunk("run_c", 300), "2026-11-30T00:00:00.000Z");
        e.complete("run_c", "2026-11-30T01:00:00.000Z");
        assert_eq!((e.attempts, e.last_error.as_deref()), (0, None));
    }

    #[test]
    fn chunks_become_pending_in_order_and_a_failure_cancels_the_rest() {
        let mut e = captured_through(0);
        e.mark_pending(chunk("run_1", 100), "t0");
        e.add_later_chunk(chunk("run_2", 200));
        e.add_later_chunk(chunk("run_3", 300));
        e.complete("run_1", "t1");
        assert_eq!(e.status, EntryStatus::Pending);
        assert!(e.waits_for("run_2") && !e.waits_for("run_1"));
        assert_eq!(e.last_captured_size, 100);
        let cancelled = e.fail("run_2", "timed out");
        assert_eq!(cancelled, vec!["run_3".to_string()]);
        assert_eq!(
            e.last_captured_size, 100,
            "the failed chunk is retried from its start"
        );
        assert!(e.pending_rest.is_empty());
    }

    #[test]
    fn a_prefix_that_matches_again_ends_the_mismatch_only() {
        let mut e = captured_through(100);
        e.needs_attention(Reason::PrefixMismatch, "rewritten".into());
        e.follow_file("/t/moved.jsonl".into(), (1, 2), 0);
        assert_eq!(e.status, EntryStatus::Done);
        assert_eq!(
            (e.path.as_str(), e.file_id),
            ("/t/moved.jsonl", Some((1, 2)))
        );
        let mut other = captured_through(100);
        other.needs_attention(Reason::ReadFailed, "unreadable".into());
        other.follow_file("/t/s1.jsonl".into(), (1, 2), 0);
        assert_eq!(other.status, EntryStatus::NeedsAttention);
    }
}
