//! `capture status`, `capture reset`, `capture prune`: inspecting and repairing a repo's capture state.

use super::output::Out;
use super::{Failure, EXIT_OK};
use crate::capture::run::{self, RunStatus};
use crate::context::Context;
use crate::discover::repo::RepoMapper;
use crate::ledger::{self, cursor, EntryStatus};
use crate::rules::Catalog;
use crate::util::lock::FileLock;
use std::path::{Path, PathBuf};

/// `--repo DIR`, else the nearest directory at or above the current one that holds `.almanac/`.
fn resolve_repo(cx: &Context, repo: Option<PathBuf>) -> Result<PathBuf, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::Other(format!("cannot read the current directory: {e}")))?;
    match repo {
        Some(r) => {
            let r = if r.is_absolute() { r } else { cwd.join(r) };
            let r = crate::util::paths::normalize(&r);
            if !r.join(".almanac").is_dir() {
                return Err(Failure::Usage(format!(
                    "--repo {}: no .almanac/ there; run `almanac init` in it first",
                    r.display()
                )));
            }
            Ok(r)
        }
        None => RepoMapper::new(&cx.almanac_home)
            .map(&cwd.to_string_lossy())
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "no .almanac/ at or above {}; pass --repo DIR or run `almanac init`",
                    cwd.display()
                ))
            }),
    }
}

pub fn status(
    cx: &Context,
    repo: Option<PathBuf>,
    json: bool,
    out: &mut Out,
) -> Result<i32, Failure> {
    let repo = resolve_repo(cx, repo)?;
    let loaded = ledger::load(&repo, cx.now, false)
        .map_err(|e| Failure::Other(format!("{}: {e}", ledger::ledger_path(&repo).display())))?;
    let runs_dir = ledger::runs_dir(&repo);
    let runs = run::list(&runs_dir);
    let worker_alive = FileLock::is_held(&crate::capture::worker::worker_lock_path(&repo));
    let queued: Vec<&run::RunRecord> = runs
        .iter()
        .filter(|r| r.status == RunStatus::Queued)
        .collect();
    let running: Vec<&run::RunRecord> = runs
        .iter()
        .filter(|r| r.status == RunStatus::Running)
        .collect();
    let failures: Vec<&run::RunRecord> = runs
        .iter()
        .rev()
        .filter(|r| r.status == RunStatus::Failed)
        .take(5)
        .collect();
    if json {
        let entries: Vec<_> = loaded
            .ledger
            .entries
            .iter()
            .map(|(k, e)| {
                let mut v = serde_json::to_value(e).unwrap_or_default();
                v["key"] = serde_json::Value::String(k.clone());
                v
            })
            .collect();
        out.json(&serde_json::json!({
            "ok": true,
            "repoRoot": repo.display().to_string(),
            "ledgerPath": ledger::ledger_path(&repo).display().to_string(),
            "ledgerCorrupt": loaded.corrupt.as_ref().map(|c| c.error.clone()),
            "entries": entries,
            "workerAlive": worker_alive,
            "queued": queued,
            "running": running,
            "recentFailures": failures,
        }));
        return Ok(EXIT_OK);
    }
    out.line(&format!("capture status for {}:", repo.display()));
    if let Some(c) = &loaded.corrupt {
        out.line(&format!(
            "  ledger does not parse ({}); the next sweep moves it aside and starts a fresh one",
            c.error
        ));
    }
    out.line(&format!(
        "  ledger: {} ({} transcripts)",
        ledger::ledger_path(&repo).display(),
        loaded.ledger.entries.len()
    ));
    for e in loaded.ledger.entries.values() {
        let state = match e.status {
            EntryStatus::Done => "done".to_string(),
            EntryStatus::Pending => {
                format!("pending ({})", e.pending_run_id.as_deref().unwrap_or("?"))
            }
            EntryStatus::Failed => format!(
                "failed ({} attempts): {}",
                e.attempts,
                e.last_error.as_deref().unwrap_or("")
            ),
            EntryStatus::NeedsAttention => format!(
                "needs attention ({}): {}",
                e.attention.as_deref().unwrap_or("?"),
                e.last_error.as_deref().unwrap_or("")
            ),
        };
        out.line(&format!(
            "  - {} {}: captured through line {} (byte {}){}; {state}",
            e.app,
            e.session_id,
            e.last_captured_line,
            e.last_captured_size,
            e.last_captured_at
                .as_ref()
                .map(|t| format!(" at {t}"))
                .unwrap_or_default()
        ));
        out.line(&format!("    {}", e.path));
    }
    out.line(&format!(
        "  runs: {} queued, {} running; worker {}",
        queued.len(),
        running.len(),
        if worker_alive {
            "running"
        } else {
            "not running"
        }
    ));
    if !failures.is_empty() {
        out.line("  recent failures:");
        for r in failures {
            out.line(&format!(
                "  - {} {} {}: {}",
                r.run_id,
                r.app,
                r.session_id,
                r.error.as_deref().unwrap_or("failed")
            ));
            out.line(&format!("    log: {}", r.log_path));
        }
    }
    Ok(EXIT_OK)
}

pub fn reset(
    cx: &Context,
    catalog: &Catalog,
    transcript: &Path,
    repo: Option<PathBuf>,
    skip_existing: bool,
    json: bool,
    out: &mut Out,
) -> Result<i32, Failure> {
    let (m, file) = super::explain::locate(catalog, cx, transcript, None)?;
    let mut mapper = RepoMapper::new(&cx.almanac_home);
    let ex = crate::sweep::examine(m.rule, &file, &mut mapper);
    let repo = match repo {
        Some(r) => resolve_repo(cx, Some(r))?,
        None => ex.repo.clone().ok_or_else(|| {
            Failure::Usage(format!(
                "{}: no repo with .almanac/ for this transcript's cwd; pass --repo DIR",
                file.path.display()
            ))
        })?,
    };
    let _guard = ledger::lock_repo(&repo).map_err(|e| {
        Failure::Other(format!(
            "cannot lock {}: {e}",
            ledger::runs_dir(&repo).display()
        ))
    })?;
    let mut loaded =
        ledger::load(&repo, cx.now, true).map_err(|e| Failure::Other(e.to_string()))?;
    let path_text = file.path.display().to_string();
    let by_id = ex
        .session_id
        .as_ref()
        .map(|sid| ledger::key(&m.rule.id, sid));
    let k = loaded
        .ledger
        .entries
        .iter()
        .find(|(k, e)| e.path == path_text || Some(*k) == by_id.as_ref())
        .map(|(k, _)| k.clone());
    let Some(k) = k else {
        return Err(Failure::Usage(format!(
            "{path_text}: not in the ledger of {}; nothing to reset",
            repo.display()
        )));
    };
    let entry = loaded.ledger.entries.get(&k).cloned().expect("found above");
    if entry.status == EntryStatus::Pending {
        return Err(Failure::Other(format!(
            "{path_text}: capture run {} is pending; wait for it (see `almanac capture status`) and reset afterwards",
            entry.pending_run_id.as_deref().unwrap_or("?")
        )));
    }
    let action = if skip_existing {
        let f = crate::discover::open_transcript(&file.path)
            .map_err(|e| Failure::Other(format!("{path_text}: {e}")))?;
        let scan = cursor::scan(f, 0).map_err(|e| Failure::Other(format!("{path_text}: {e}")))?;
        let e = loaded.ledger.entries.get_mut(&k).expect("found above");
        e.status = EntryStatus::Done;
        e.last_captured_size = scan.complete_end;
        e.last_captured_line = scan.new_lines;
        e.last_captured_prefix_hash = scan.hash_at_end;
        e.attempts = 0;
        e.last_error = None;
        e.attention = None;
        e.path = path_text.clone();
        e.file_id = Some(file.file_id);
        e.baseline = true;
        format!(
            "marked lines 1-{} as captured; only later lines will be captured",
            scan.new_lines
        )
    } else {
        loaded.ledger.entries.remove(&k);
        "forgot its capture state; the next sweep starts it over".to_string()
    };
    ledger::save(&repo, &mut loaded.ledger, cx.now)
        .map_err(|e| Failure::Other(format!("cannot save the ledger: {e}")))?;
    if json {
        out.json(&serde_json::json!({"ok": true, "transcriptPath": path_text, "repoRoot": repo.display().to_string(), "action": action}));
    } else {
        out.line(&format!("almanac: {path_text}: {action}"));
    }
    Ok(EXIT_OK)
}

pub fn prune(
    cx: &Context,
    repo: Option<PathBuf>,
    older_than: std::time::Duration,
    dry_run: bool,
    json: bool,
    out: &mut Out,
) -> Result<i32, Failure> {
    let repo = resolve_repo(cx, repo)?;
    let runs_dir = ledger::runs_dir(&repo);
    let cutoff = cx.now - chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::MAX);
    let _guard = if dry_run {
        None
    } else {
        Some(
            ledger::lock_repo(&repo)
                .map_err(|e| Failure::Other(format!("cannot lock {}: {e}", runs_dir.display())))?,
        )
    };
    let mut loaded =
        ledger::load(&repo, cx.now, !dry_run).map_err(|e| Failure::Other(e.to_string()))?;
    let waited: std::collections::HashSet<String> = loaded
        .ledger
        .entries
        .values()
        .filter_map(|e| e.pending_run_id.clone())
        .collect();
    let mut removed_runs = Vec::new();
    for r in run::list(&runs_dir) {
        if !matches!(r.status, RunStatus::Done | RunStatus::Failed) || waited.contains(&r.run_id) {
            continue;
        }
        let when = r
            .finished_at
            .as_deref()
            .or(Some(r.created_at.as_str()))
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        if when.is_some_and(|t| t < cutoff) {
            if !dry_run {
                for p in [
                    run::record_path(&runs_dir, &r.run_id),
                    PathBuf::from(&r.log_path),
                    PathBuf::from(&r.prompt_path),
                ] {
                    // Only files inside this repo's runs/ directory are ever deleted.
                    if p.parent() == Some(runs_dir.as_path()) {
                        let _ = std::fs::remove_file(p);
                    }
                }
            }
            removed_runs.push(r.run_id);
        }
    }
    let gone: Vec<String> = loaded
        .ledger
        .entries
        .iter()
        .filter(|(_, e)| e.status != EntryStatus::Pending && !Path::new(&e.path).exists())
        .map(|(k, _)| k.clone())
        .collect();
    for k in &gone {
        loaded.ledger.entries.remove(k);
    }
    if !dry_run && !gone.is_empty() {
        ledger::save(&repo, &mut loaded.ledger, cx.now)
            .map_err(|e| Failure::Other(format!("cannot save the ledger: {e}")))?;
    }
    if json {
        out.json(&serde_json::json!({"ok": true, "dryRun": dry_run, "repoRoot": repo.display().to_string(), "runsRemoved": removed_runs, "entriesRemoved": gone}));
    } else {
        let verb = if dry_run { "would remove" } else { "removed" };
        out.line(&format!(
            "almanac: {verb} {} run records older than {} and {} ledger entries of deleted transcripts in {}",
            removed_runs.len(),
            crate::util::duration::format_duration(older_than),
            gone.len(),
            repo.display()
        ));
    }
    Ok(EXIT_OK)
}
