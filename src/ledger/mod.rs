//! The per-repo capture ledger `<repo>/.almanac/runs/capture-ledger.json`: one entry per transcript,
//! keyed by app and session id (a Codex rollout moved to `archived_sessions/` keeps its cursor). Written
//! atomically while holding the repo lock. A ledger that does not parse is never silently replaced: it
//! is renamed aside and reported.

pub mod cursor;

use crate::util::lock::FileLock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const LEDGER_VERSION: u32 = 1;
pub const LEDGER_FILE: &str = "capture-ledger.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryStatus {
    Done,
    Pending,
    Failed,
    NeedsAttention,
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
    /// The cursor came from the `capture_since` baseline, not from a capture run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub baseline: bool,
    /// The file's size when its uncaptured part was found to hold no user turn: while the same file has
    /// this size, the sweep skips it (`no-new-turns`) without reading it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_turns_through: Option<u64>,
    /// Later chunks of a new part captured in several runs, in order; each becomes the pending run when
    /// the one before it succeeds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_rest: Vec<PendingChunk>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PendingChunk {
    pub run_id: String,
    pub to_size: u64,
    pub to_line: u64,
    pub prefix_hash: String,
}

impl LedgerEntry {
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
            baseline: false,
            no_turns_through: None,
            pending_rest: Vec::new(),
        }
    }

    pub fn clear_pending(&mut self) {
        self.pending_run_id = None;
        self.pending_to_size = None;
        self.pending_to_line = None;
        self.pending_prefix_hash = None;
        self.pending_started_at = None;
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
        }
        self.last_captured_at = Some(now.to_string());
        self.last_run_id = Some(run_id.to_string());
        self.status = EntryStatus::Done;
        self.attempts = 0;
        self.last_error = None;
        self.attention = None;
        self.baseline = false;
        self.no_turns_through = None;
        self.clear_pending();
        let mut rest = rest.into_iter();
        if let Some(next) = rest.next() {
            self.status = EntryStatus::Pending;
            self.pending_run_id = Some(next.run_id);
            self.pending_to_size = Some(next.to_size);
            self.pending_to_line = Some(next.to_line);
            self.pending_prefix_hash = Some(next.prefix_hash);
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    pub version: u32,
    pub updated_at: String,
    /// Keyed `<app>:<session id>`.
    pub entries: BTreeMap<String, LedgerEntry>,
    /// Session ids of almanac's own capture agents in this repo: never captured. Kept here (as well as in
    /// run records) so a sweep need not read every run record, and so pruning runs forgets nothing.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub agent_sessions: std::collections::BTreeSet<String>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            version: LEDGER_VERSION,
            updated_at: String::new(),
            entries: BTreeMap::new(),
            agent_sessions: Default::default(),
        }
    }
}

pub fn key(app: &str, session_id: &str) -> String {
    format!("{app}:{session_id}")
}

pub fn runs_dir(repo: &Path) -> PathBuf {
    repo.join(".almanac").join("runs")
}

pub fn ledger_path(repo: &Path) -> PathBuf {
    runs_dir(repo).join(LEDGER_FILE)
}

/// The repo lock: held for every read-modify-write of the ledger and for picking a run.
pub fn lock_repo(repo: &Path) -> std::io::Result<FileLock> {
    FileLock::acquire(&runs_dir(repo).join("ledger.lock"))
}

/// A ledger as loaded, with what happened to a corrupt file.
pub struct Loaded {
    pub ledger: Ledger,
    /// Set when the file did not parse: where it was (or, in a dry run, would be) moved.
    pub corrupt: Option<Corrupt>,
}

pub struct Corrupt {
    pub moved_to: PathBuf,
    pub error: String,
}

/// Loads the ledger. A file that does not parse (or has an unknown version) is renamed to
/// `capture-ledger.json.corrupt-<UTC timestamp>` when `rename` is true, and a fresh ledger is returned.
pub fn load(
    repo: &Path,
    now: chrono::DateTime<chrono::Utc>,
    rename: bool,
) -> std::io::Result<Loaded> {
    let path = ledger_path(repo);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Loaded {
                ledger: Ledger::default(),
                corrupt: None,
            })
        }
        Err(e) => return Err(e),
    };
    let error = match serde_json::from_slice::<Ledger>(&text) {
        Ok(l) if l.version == LEDGER_VERSION => {
            return Ok(Loaded {
                ledger: l,
                corrupt: None,
            })
        }
        Ok(l) => format!("unknown ledger version {}", l.version),
        Err(e) => e.to_string(),
    };
    let moved_to = path.with_file_name(format!(
        "{LEDGER_FILE}.corrupt-{}",
        now.format("%Y%m%dT%H%M%S%3fZ")
    ));
    if rename {
        std::fs::rename(&path, &moved_to)?;
    }
    Ok(Loaded {
        ledger: Ledger::default(),
        corrupt: Some(Corrupt { moved_to, error }),
    })
}

pub fn save(
    repo: &Path,
    ledger: &mut Ledger,
    now: chrono::DateTime<chrono::Utc>,
) -> std::io::Result<()> {
    save_bytes(repo, ledger, now).map(drop)
}

/// As `save`, returning the bytes written.
pub fn save_bytes(
    repo: &Path,
    ledger: &mut Ledger,
    now: chrono::DateTime<chrono::Utc>,
) -> std::io::Result<Vec<u8>> {
    ledger.updated_at = crate::policy::iso(now);
    let text = crate::util::atomic::json_bytes(ledger)?;
    crate::util::atomic::write_atomic(&ledger_path(repo), &text)?;
    crate::util::fault::point("ledger-saved");
    Ok(text)
}

/// Records an agent session id as ours, under the repo lock (the worker calls this before the agent can
/// write a transcript, or as soon as the agent reports its id).
pub fn add_agent_session(repo: &Path, session_id: &str) -> std::io::Result<()> {
    let _guard = lock_repo(repo)?;
    let now = chrono::Utc::now();
    let mut loaded = load(repo, now, true)?;
    if loaded.ledger.agent_sessions.insert(session_id.to_string()) {
        save(repo, &mut loaded.ledger, now)?;
    }
    Ok(())
}
