//! A repo's run store as both sweep phases that write it open it: checked, then locked within the
//! sweep's one wait.

use crate::ledger;
use crate::reason::Reason;
use crate::util::lock::FileLock;
use std::path::Path;

/// A repo's run store checked (no link out of the repo) and locked, waiting until `deadline` at most: a
/// repo another process holds longer is `ledger-busy` and left to the next sweep. A sweep holds one
/// repo lock per thread at a time and waits for no other lock while holding it, so two sweeps (two
/// `ALMANAC_HOME`s on one machine) never deadlock on each other's repos.
pub(super) fn open(
    repo: &Path,
    deadline: std::time::Instant,
) -> Result<FileLock, (Reason, String)> {
    ledger::guard::check_runs_dir(repo).map_err(|why| (Reason::RunsDirUnsafe, why))?;
    let wait = deadline.saturating_duration_since(std::time::Instant::now());
    ledger::open_for_writing(repo, wait).map_err(|e| match e {
        ledger::OpenError::Busy(holder) => (
            Reason::LedgerBusy,
            format!(
                "another almanac process{} held the repo's ledger lock for {}; nothing was started in this repo, the next sweep tries again",
                holder.map(|h| format!(" (pid {})", h.pid)).unwrap_or_default(),
                crate::util::duration::format_duration(ledger::REPO_LOCK_WAIT)
            ),
        ),
        ledger::OpenError::Io(e) => (
            Reason::LedgerUnwritable,
            format!("cannot lock {}: {e}", ledger::runs_dir(repo).display()),
        ),
    })
}
