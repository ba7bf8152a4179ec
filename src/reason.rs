//! Every reason code almanac reports: why a transcript was skipped, why it needs attention, why a run
//! failed. One type for the policy's checks, the sweep, `rules explain`, `capture status` and `doctor`;
//! each serialises to its stable kebab-case code, the string the JSON output and the docs use.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    // The policy's checks (rules/policy.yaml), in their default order.
    NoSessionId,
    NoCwd,
    NoAlmanacRepo,
    InternalAlmanacSession,
    ExcludedByRule,
    CaptureAlreadyPending,
    RetryBudgetExhausted,
    BeforeAutomationActivation,
    QuietWindow,
    Unchanged,
    NoNewContent,
    // What the sweep finds beyond the policy.
    /// A subagent's transcript: part of its parent session, never captured on its own.
    Subagent,
    /// Another file in the same repo holds the same session; that one is captured.
    DuplicateSession,
    ReadFailed,
    /// A store file inside a project that git tracks: someone's commit, not the user's own session.
    StoreTrackedByGit,
    /// A store inside a project reached through a symbolic link, or whose real path is not below the
    /// repo: not followed.
    StoreBehindLink,
    PrefixMismatch,
    /// The captured part was rewritten but still holds the last captured record: the capture resumed
    /// after it (reported, not a problem).
    RecoveredPrefix,
    BudgetDeferred,
    CaptureStartFailed,
    /// The transcript's ledger entry changed between the sweep's decide and act passes (another process
    /// wrote it); nothing was started, the next sweep decides again.
    ChangedDuringSweep,
    // The run store.
    LedgerCorrupt,
    /// While an agent ran, the ledger was overwritten or deleted (or `runs/` with it); the worker wrote
    /// back the copy it held.
    LedgerOverwritten,
    /// The ledger was written by a newer almanac: left alone, nothing in its repo is captured.
    LedgerNewerVersion,
    /// The ledger does not carry this user's seal (an earlier almanac wrote it, or someone or something
    /// else did): checked against the sealed run records, and sealed by the next live sweep.
    LedgerUnsealed,
    /// A file almanac takes instructions from (the repo's prompt override, a queued run's prompt)
    /// changed after almanac's agent ran in the repo: not used until the user confirms it.
    AgentWroteControlFile,
    /// A corrupt ledger was rebuilt from run records, and none showed how much of this transcript was
    /// captured: held until `capture reset`.
    CursorLost,
    LedgerUnreadable,
    LedgerUnwritable,
    /// Another process held the repo's ledger lock too long; the next sweep tries again.
    LedgerBusy,
    /// `.almanac` or `.almanac/runs` is a symbolic link or not the user's, or a fixed-name file in it is
    /// a link: nothing is read, written or run there.
    RunsDirUnsafe,
    /// A capture run changed files outside `.almanac/`.
    AgentWroteOutsideWiki,
    // A run that ended without the agent finishing it.
    /// The worker ended before the run finished.
    WorkerLost,
    /// A queued run no ledger entry waits for.
    Orphaned,
    /// The transcript changed (rewritten, truncated) between queuing the run and starting its agent.
    TranscriptChanged,
    /// Another session of the transcript's family (a fork, its source) claimed records of the run first.
    CapturedElsewhere,
    /// The run record an entry waited for was not written by this user's almanac (no valid MAC).
    ForeignRun,
}

impl Reason {
    pub const fn code(self) -> &'static str {
        match self {
            Reason::NoSessionId => "no-session-id",
            Reason::NoCwd => "no-cwd",
            Reason::NoAlmanacRepo => "no-almanac-repo",
            Reason::InternalAlmanacSession => "internal-almanac-session",
            Reason::ExcludedByRule => "excluded-by-rule",
            Reason::CaptureAlreadyPending => "capture-already-pending",
            Reason::RetryBudgetExhausted => "retry-budget-exhausted",
            Reason::BeforeAutomationActivation => "before-automation-activation",
            Reason::QuietWindow => "quiet-window",
            Reason::Unchanged => "unchanged",
            Reason::NoNewContent => "no-new-content",
            Reason::Subagent => "subagent",
            Reason::DuplicateSession => "duplicate-session",
            Reason::ReadFailed => "read-failed",
            Reason::StoreTrackedByGit => "store-tracked-by-git",
            Reason::StoreBehindLink => "store-behind-link",
            Reason::PrefixMismatch => "prefix-mismatch",
            Reason::RecoveredPrefix => "recovered-prefix",
            Reason::BudgetDeferred => "budget-deferred",
            Reason::CaptureStartFailed => "capture-start-failed",
            Reason::ChangedDuringSweep => "changed-during-sweep",
            Reason::LedgerCorrupt => "ledger-corrupt",
            Reason::LedgerOverwritten => "ledger-overwritten",
            Reason::LedgerNewerVersion => "ledger-newer-version",
            Reason::LedgerUnsealed => "ledger-unsealed",
            Reason::AgentWroteControlFile => "agent-wrote-control-file",
            Reason::CursorLost => "cursor-lost",
            Reason::LedgerUnreadable => "ledger-unreadable",
            Reason::LedgerUnwritable => "ledger-unwritable",
            Reason::LedgerBusy => "ledger-busy",
            Reason::RunsDirUnsafe => "runs-dir-unsafe",
            Reason::AgentWroteOutsideWiki => "agent-wrote-outside-wiki",
            Reason::WorkerLost => "worker-lost",
            Reason::Orphaned => "orphaned",
            Reason::TranscriptChanged => "transcript-changed",
            Reason::CapturedElsewhere => "captured-elsewhere",
            Reason::ForeignRun => "foreign-run",
        }
    }

    /// Every reason, for docs and tests.
    pub const ALL: [Reason; 37] = [
        Reason::NoSessionId,
        Reason::NoCwd,
        Reason::NoAlmanacRepo,
        Reason::InternalAlmanacSession,
        Reason::ExcludedByRule,
        Reason::CaptureAlreadyPending,
        Reason::RetryBudgetExhausted,
        Reason::BeforeAutomationActivation,
        Reason::QuietWindow,
        Reason::Unchanged,
        Reason::NoNewContent,
        Reason::Subagent,
        Reason::DuplicateSession,
        Reason::ReadFailed,
        Reason::StoreTrackedByGit,
        Reason::StoreBehindLink,
        Reason::PrefixMismatch,
        Reason::RecoveredPrefix,
        Reason::BudgetDeferred,
        Reason::CaptureStartFailed,
        Reason::ChangedDuringSweep,
        Reason::LedgerCorrupt,
        Reason::LedgerOverwritten,
        Reason::LedgerNewerVersion,
        Reason::LedgerUnsealed,
        Reason::AgentWroteControlFile,
        Reason::CursorLost,
        Reason::LedgerUnreadable,
        Reason::LedgerUnwritable,
        Reason::LedgerBusy,
        Reason::RunsDirUnsafe,
        Reason::AgentWroteOutsideWiki,
        Reason::WorkerLost,
        Reason::Orphaned,
        Reason::TranscriptChanged,
        Reason::CapturedElsewhere,
        Reason::ForeignRun,
    ];

    /// The reason a code names, if any (codes in files and flags are read through this).
    pub fn from_code(code: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.code() == code)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_to_its_code_and_back() {
        for r in Reason::ALL {
            assert_eq!(
                serde_json::to_value(r).unwrap(),
                serde_json::Value::String(r.code().into())
            );
            assert_eq!(Reason::from_code(r.code()), Some(r));
        }
        assert_eq!(Reason::from_code("nope"), None);
    }
}
