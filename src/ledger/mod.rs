//! The run store: everything under `<repo>/.almanac/runs/` has its one owner here.
//!
//! - `capture-ledger.json` (`file`): one entry per transcript (`entry`), keyed by app and session id
//!   (a Codex rollout moved to `archived_sessions/` keeps its cursor), written atomically under the repo
//!   lock. A ledger that does not parse is never silently replaced: it is renamed aside, reported, and
//!   rebuilt from the run records (`rebuild`). A ledger of a newer version is never touched.
//! - `<run-id>.json`, `.log`, `.prompt.md` (`record`): one capture run each.
//! - `ledger.journal` (`journal`): agent session ids appended while a worker drains, folded into the
//!   ledger by the next save.
//! - `worker.log`: the background worker's own output.
//! - `ledger.lock` (the repo lock: every read-modify-write of the ledger, and picking a run) and
//!   `worker.lock` (held by the repo's one background worker, which also holds its lock under
//!   `$ALMANAC_HOME/state/workers/`, the one an agent cannot delete).
//! - `repo`: a repo's ledger and run records brought into agreement (`RepoState::reconcile`), what the
//!   sweep and the worker both start from.
//! - `maintain`: `capture reset` and `capture prune`.
//! - `seal`: run records carry a MAC under this user's key; anything else is foreign and never run.
//! - `guard`: the store is used only when `.almanac` and `runs/` are this user's real directories
//!   (no symbolic links), so nothing outside it is written, chmod'ed or deleted.
//!
//! Crash safety: a run record is written before the ledger entry that follows from it, and the cursor
//! moves only when a run succeeded; whoever loads a repo next reconciles the two.

pub mod cursor;
mod entry;
mod file;
pub mod guard;
pub mod journal;
pub mod maintain;
pub mod rebuild;
pub mod record;
mod repo;
pub mod seal;

pub use entry::{EntryStatus, LedgerEntry, PendingChunk};
pub use file::{
    add_agent_session, entry_facts, is_newer, load, newer_version, save, save_bytes, Corrupt,
    Ledger, Loaded, NewerLedger, LEDGER_FILE, LEDGER_VERSION,
};
pub use record::{RunRecord, RunStatus};
pub use repo::{RepoState, StopOrphan};

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

/// A name for a repo in files under `$ALMANAC_HOME/state`: a hash of its canonical path.
pub fn repo_id(repo: &Path) -> String {
    use sha2::{Digest, Sha256};
    let canonical = repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf());
    let digest = Sha256::digest(canonical.as_os_str().as_encoded_bytes());
    crate::util::ids::hex(&digest[..12])
}

/// The repo's worker lock outside the repo: `$ALMANAC_HOME/state/workers/<repo_id>.lock`. The one-worker
/// rule rests on it, because an agent can delete anything under `.almanac/` (`runs/worker.lock` is
/// still taken, for almanac setups with another `ALMANAC_HOME`).
pub fn home_worker_lock_path(repo: &Path) -> Option<PathBuf> {
    let home = seal::almanac_home()?;
    Some(
        home.join("state")
            .join("workers")
            .join(format!("{}.lock", repo_id(repo))),
    )
}

/// Whether the repo's background worker is running now: either of its locks is held.
pub fn worker_alive(repo: &Path) -> bool {
    home_worker_lock_path(repo).is_some_and(|p| FileLock::is_held(&p))
        || FileLock::is_held(&worker_lock_path(repo))
}

/// The repo lock: held for every read-modify-write of the ledger and for picking a run. Refused when
/// the store is not safe to use (`guard`).
pub fn lock_repo(repo: &Path) -> std::io::Result<FileLock> {
    guard::ensure_safe(repo)?;
    FileLock::acquire(&runs_dir(repo).join("ledger.lock"))
}

/// How long a sweep waits in each of its phases for the repo locks other processes hold (a worker holds
/// one for an instant; a sweep of another `ALMANAC_HOME` for one repo's pass) before it leaves a repo to
/// the next sweep.
pub const REPO_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a writer could not open a repo's store.
pub enum OpenError {
    Io(std::io::Error),
    /// Another process held the repo lock for all of `REPO_LOCK_WAIT`.
    Busy(Option<crate::util::lock::Holder>),
}

/// The store's directory made private (0700) and the repo lock taken within `wait`: what a writer does
/// first.
pub fn open_for_writing(repo: &Path, wait: std::time::Duration) -> Result<FileLock, OpenError> {
    guard::ensure_safe(repo).map_err(OpenError::Io)?;
    crate::util::atomic::private_dir(&runs_dir(repo)).map_err(OpenError::Io)?;
    match FileLock::acquire_within(&runs_dir(repo).join("ledger.lock"), wait) {
        Ok(Ok(lock)) => Ok(lock),
        Ok(Err(holder)) => Err(OpenError::Busy(holder)),
        Err(e) => Err(OpenError::Io(e)),
    }
}
