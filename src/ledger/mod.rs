//! The run store: everything under `<repo>/.almanac/runs/` has its one owner here.
//!
//! - `capture-ledger.json` (`file`): one entry per transcript (`entry`), keyed by app and session id
//!   (a Codex rollout moved to `archived_sessions/` keeps its cursor), written atomically under the repo
//!   lock. A ledger that does not parse is never silently replaced: it is renamed aside and reported.
//! - `<run-id>.json`, `.log`, `.prompt.md` (`record`): one capture run each.
//! - `ledger.journal` (`journal`): agent session ids appended while a worker drains, folded into the
//!   ledger by the next save.
//! - `worker.log`: the background worker's own output.
//! - `ledger.lock` (the repo lock: every read-modify-write of the ledger, and picking a run) and
//!   `worker.lock` (held by the repo's one background worker).
//! - `repo`: a repo's ledger and run records brought into agreement (`RepoState::reconcile`), what the
//!   sweep and the worker both start from.
//! - `maintain`: `capture reset` and `capture prune`.
//!
//! Crash safety: a run record is written before the ledger entry that follows from it, and the cursor
//! moves only when a run succeeded; whoever loads a repo next reconciles the two.

pub mod cursor;
mod entry;
mod file;
pub mod journal;
pub mod maintain;
pub mod record;
mod repo;

pub use entry::{EntryStatus, LedgerEntry, PendingChunk};
pub use file::{
    add_agent_session, load, save, save_bytes, Corrupt, Ledger, Loaded, LEDGER_FILE, LEDGER_VERSION,
};
pub use record::{RunRecord, RunStatus};
pub use repo::RepoState;

use crate::util::lock::FileLock;
use std::path::{Path, PathBuf};

/// A ledger key: `<app>:<session id>`.
pub fn key(app: &str, session_id: &str) -> String {
    format!("{app}:{session_id}")
}

pub fn runs_dir(repo: &Path) -> PathBuf {
    repo.join(".almanac").join("runs")
}

pub fn ledger_path(repo: &Path) -> PathBuf {
    runs_dir(repo).join(LEDGER_FILE)
}

pub fn worker_lock_path(repo: &Path) -> PathBuf {
    runs_dir(repo).join("worker.lock")
}

/// The background worker's own output (what it ran, and why it left).
pub fn worker_log_path(repo: &Path) -> PathBuf {
    runs_dir(repo).join("worker.log")
}

/// Whether the repo's background worker is running now.
pub fn worker_alive(repo: &Path) -> bool {
    FileLock::is_held(&worker_lock_path(repo))
}

/// The repo lock: held for every read-modify-write of the ledger and for picking a run.
pub fn lock_repo(repo: &Path) -> std::io::Result<FileLock> {
    FileLock::acquire(&runs_dir(repo).join("ledger.lock"))
}

/// The store's directory made private (0700) and the repo lock taken: what a writer does first.
pub fn open_for_writing(repo: &Path) -> std::io::Result<FileLock> {
    crate::util::atomic::private_dir(&runs_dir(repo))?;
    lock_repo(repo)
}
