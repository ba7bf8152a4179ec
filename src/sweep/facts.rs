//! What the policy is told of one transcript: its head, its file, and a small view of its ledger entry.

use crate::discover::{Examined, FoundFile};
use crate::ledger::{self, key, LedgerEntry, RepoState};
use crate::policy::{self, Decision, Facts, Settings, Step};
use crate::rules::{Catalog, RuleSet};
use chrono::{DateTime, Utc};

/// What the policy needs of a transcript's ledger entry: a few numbers instead of the entry, so a sweep
/// over 100k transcripts need not hold every ledger at once.
#[derive(Debug, Clone, Copy)]
pub struct EntryView {
    captured_bytes: u64,
    same_file: bool,
    pending: bool,
    failed_attempts: u32,
    /// The uncaptured part was already read at this very size and held no content.
    no_content_at_this_size: bool,
}

impl EntryView {
    pub fn of(e: &LedgerEntry, file: &FoundFile) -> EntryView {
        let same = same_file(e, file);
        EntryView {
            captured_bytes: e.last_captured_size,
            same_file: same,
            pending: e.status == ledger::EntryStatus::Pending,
            failed_attempts: if e.status == ledger::EntryStatus::Failed {
                e.attempts
            } else {
                0
            },
            no_content_at_this_size: same && e.no_content_through == Some(file.size),
        }
    }
}

impl EntryView {
    /// `capture now --from-start`: nothing counts as captured (the entry still guards the act phase).
    pub fn starting_over(mut self, from_start: bool) -> EntryView {
        if from_start {
            self.captured_bytes = 0;
            self.no_content_at_this_size = false;
        }
        self
    }
}

/// Whether the entry's cursor was set on this very file, as it still is: the same path and identity, and
/// (when known) the same mtime. A file rewritten in place to the same size is not the same: its prefix is
/// verified again.
fn same_file(e: &LedgerEntry, file: &FoundFile) -> bool {
    e.file_id == Some(file.file_id)
        && e.seen_mtime_ns.is_none_or(|m| m == file.mtime_ns())
        && match file.path.to_str() {
            Some(p) => e.path == p,
            None => e.path.as_str() == file.path.to_string_lossy(),
        }
}

/// The policy's facts for one transcript, given its ledger entry (as a view).
pub fn facts<'a>(
    rule: &'a RuleSet,
    file: &FoundFile,
    ex: &'a Examined,
    entry: Option<EntryView>,
    internal: bool,
) -> Facts<'a> {
    Facts {
        app: &rule.id,
        session_id: ex.session_id.as_deref(),
        cwd: ex.cwd.as_deref(),
        repo: ex.repo.as_deref(),
        excluded_by: ex.excluded(),
        mtime: DateTime::<Utc>::from(file.mtime),
        size: file.size,
        captured_bytes: entry.map(|e| e.captured_bytes).unwrap_or(0),
        same_file: entry.is_none_or(|e| e.same_file),
        internal,
        pending: entry.is_some_and(|e| e.pending),
        failed_attempts: entry.map(|e| e.failed_attempts).unwrap_or(0),
        // Already read at this size and found without a user turn: no need to read it again.
        new_content_turns: entry.filter(|e| e.no_content_at_this_size).map(|_| 0),
    }
}

/// Evaluates the policy for `rules explain`, with the repo's ledger read (never written).
pub fn explain_decision(
    catalog: &Catalog,
    rule: &RuleSet,
    file: &FoundFile,
    ex: &Examined,
    settings: &Settings,
    now: DateTime<Utc>,
) -> (Decision, Vec<Step>) {
    let state = ex
        .repo
        .as_ref()
        .filter(|r| ledger::guard::check_runs_dir(r).is_ok())
        .and_then(|r| RepoState::load(r, now, false).ok());
    let (view, internal) = match (&state, &ex.session_id) {
        (Some(s), Some(sid)) => (
            s.ledger
                .entries
                .get(&key(&rule.id, sid))
                .map(|e| EntryView::of(e, file)),
            s.ledger.agent_sessions.contains(&**sid),
        ),
        _ => (None, false),
    };
    policy::decide(
        &catalog.policy,
        &facts(rule, file, ex, view, internal),
        settings,
    )
}
