//! What `capture status`, `capture reset` and `capture prune` read and change in a repo's run store. The
//! CLI renders the results; every change is made here, under the repo lock.

use super::record::{self, RunRecord, RunStatus};
use super::{cursor, key, ledger_path, lock_repo, runs_dir, EntryStatus, Loaded};
use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};

/// A repo's capture state as `capture status` shows it (read only: a dry look at a corrupt ledger).
pub struct Overview {
    pub loaded: Loaded,
    /// The ledger was written by a newer almanac (in words, with what to do); `loaded` is then empty.
    pub newer: Option<String>,
    pub runs: Vec<RunRecord>,
    /// Run records this user's almanac did not write: listed, never run or deleted.
    pub foreign: Vec<record::Foreign>,
    pub worker_alive: bool,
}

impl Overview {
    pub fn read(repo: &Path, now: DateTime<Utc>) -> Result<Overview, String> {
        super::guard::check_runs_dir(repo)
            .map_err(|why| format!("{}: {why}", crate::reason::Reason::RunsDirUnsafe))?;
        let (loaded, newer) = match super::load(repo, now, false) {
            Ok(l) => (l, None),
            Err(e) => match super::newer_version(&e) {
                Some(n) => {
                    let empty = Loaded {
                        ledger: Default::default(),
                        corrupt: None,
                        unsealed: None,
                    };
                    (empty, Some(n.to_string()))
                }
                None => return Err(format!("{}: {e}", ledger_path(repo).display())),
            },
        };
        Ok(Overview {
            loaded,
            newer,
            runs: record::list(&runs_dir(repo)),
            foreign: record::list_foreign(&runs_dir(repo)),
            worker_alive: super::worker_alive(repo),
        })
    }

    pub fn with_status(&self, status: RunStatus) -> Vec<&RunRecord> {
        self.runs.iter().filter(|r| r.status == status).collect()
    }

    /// The latest failed runs, newest first.
    pub fn recent_failures(&self, n: usize) -> Vec<&RunRecord> {
        self.runs
            .iter()
            .rev()
            .filter(|r| r.status == RunStatus::Failed)
            .take(n)
            .collect()
    }
}

/// Why a reset did not happen: the words say what to do.
pub enum ResetError {
    /// The transcript has no entry (a usage error).
    NotInLedger(String),
    Failed(String),
}

/// What `reset` does to the entry.
pub enum ResetMode<'a> {
    /// Forget it: the next sweep starts over from line 1.
    Forget,
    /// Mark every complete line as captured (the function reads the transcript).
    SkipExisting(&'a dyn Fn() -> Result<cursor::Scan, String>),
    /// Clear the failed attempts only: the cursor stays.
    Retries,
}

/// Resets one transcript's entry, found by its path or by `app` and `session_id`, as `mode` says.
/// Returns what was done, in words. A pending entry is left alone: its run is still to finish.
pub fn reset(
    repo: &Path,
    transcript: (&str, (u64, u64)),
    id: Option<(&str, &str)>,
    mode: ResetMode<'_>,
    now: DateTime<Utc>,
) -> Result<String, ResetError> {
    let (path_text, file_id) = transcript;
    let _guard = lock_repo(repo).map_err(|e| {
        ResetError::Failed(format!("cannot lock {}: {e}", runs_dir(repo).display()))
    })?;
    let mut loaded = super::load(repo, now, true).map_err(|e| ResetError::Failed(e.to_string()))?;
    let by_id = id.map(|(app, sid)| key(app, sid));
    let k = loaded
        .ledger
        .entries
        .iter()
        .find(|(k, e)| e.path == path_text || Some(*k) == by_id.as_ref())
        .map(|(k, _)| k.clone())
        .ok_or_else(|| {
            ResetError::NotInLedger(format!(
                "{path_text}: not in the ledger of {}; nothing to reset",
                repo.display()
            ))
        })?;
    let entry = loaded.ledger.entries.get_mut(&k).expect("found above");
    if entry.status == EntryStatus::Pending {
        return Err(ResetError::Failed(format!(
            "{path_text}: capture run {} is pending; wait for it (see `almanac capture status`) and reset afterwards",
            entry.pending_run_id.as_deref().unwrap_or("?")
        )));
    }
    let action = match mode {
        ResetMode::Retries => {
            let n = entry.attempts;
            entry.clear_failures();
            format!(
                "cleared {n} failed attempt{}; the next sweep captures from line {} on",
                if n == 1 { "" } else { "s" },
                entry.last_captured_line + 1
            )
        }
        ResetMode::SkipExisting(scan) => {
            let scan = scan().map_err(ResetError::Failed)?;
            entry.reset_cursor(
                scan.complete_end,
                scan.new_lines,
                scan.hash_at_end,
                (path_text.to_string(), file_id),
            );
            format!(
                "marked lines 1-{} as captured; only later lines will be captured",
                scan.new_lines
            )
        }
        ResetMode::Forget => {
            loaded.ledger.entries.remove(&k);
            "forgot its capture state; the next sweep starts it over".to_string()
        }
    };
    super::save(repo, &mut loaded.ledger, now)
        .map_err(|e| ResetError::Failed(format!("cannot save the ledger: {e}")))?;
    Ok(action)
}

/// What `capture prune` removed (or, in a dry run, would remove).
pub struct Pruned {
    pub runs_removed: Vec<String>,
    pub entries_removed: Vec<String>,
}

/// Removes finished run records (and their logs and prompts) that finished before `cutoff` and that no
/// entry waits for, and the entries of sessions that no longer exist: an entry is identified by app and
/// session id, so it goes only when `live` (the ledger keys of every session in the stores) lacks it and
/// its recorded file is gone too (a moved file keeps its entry). A dry run changes nothing.
pub fn prune(
    repo: &Path,
    cutoff: DateTime<Utc>,
    live: &std::collections::HashSet<String>,
    dry_run: bool,
    now: DateTime<Utc>,
) -> Result<Pruned, String> {
    let runs = runs_dir(repo);
    let _guard = match dry_run {
        true => None,
        false => Some(lock_repo(repo).map_err(|e| format!("cannot lock {}: {e}", runs.display()))?),
    };
    let mut loaded = super::load(repo, now, !dry_run).map_err(|e| e.to_string())?;
    let waited: std::collections::HashSet<String> = loaded
        .ledger
        .entries
        .values()
        .filter_map(|e| e.pending_run_id.clone())
        .collect();
    let mut runs_removed = Vec::new();
    for r in record::list(&runs) {
        if !r.status.finished() || waited.contains(&r.run_id) {
            continue;
        }
        let when = r
            .finished_at
            .as_deref()
            .or(Some(r.created_at.as_str()))
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
        if when.is_some_and(|t| t < cutoff) {
            if !dry_run {
                for p in [
                    record::record_path(&runs, &r.run_id),
                    PathBuf::from(&r.log_path),
                    PathBuf::from(&r.prompt_path),
                    record::conversation_path(&runs, &r.run_id),
                ] {
                    // Only files inside this repo's runs/ directory are ever deleted.
                    if p.parent() == Some(runs.as_path()) {
                        let _ = std::fs::remove_file(p);
                    }
                }
            }
            runs_removed.push(r.run_id);
        }
    }
    let entries_removed: Vec<String> = loaded
        .ledger
        .entries
        .iter()
        .filter(|(k, e)| {
            e.status != EntryStatus::Pending && !live.contains(*k) && !Path::new(&e.path).exists()
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in &entries_removed {
        loaded.ledger.entries.remove(k);
    }
    if !dry_run && !entries_removed.is_empty() {
        super::save(repo, &mut loaded.ledger, now)
            .map_err(|e| format!("cannot save the ledger: {e}"))?;
    }
    Ok(Pruned {
        runs_removed,
        entries_removed,
    })
}
