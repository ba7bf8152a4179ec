//! `capture status`, `capture reset`, `capture prune`: inspecting and repairing a repo's capture state.

use super::output::Out;
use super::{Failure, EXIT_OK};
use crate::context::Context;
use crate::discover::repo::RepoMapper;
use crate::ledger::maintain::{self, Overview, ResetError};
use crate::ledger::{self, cursor, EntryStatus, RunStatus};
use crate::rules::Catalog;
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
            .map(|r| r.to_path_buf())
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "no .almanac/ at or above {}; pass --repo DIR or run `almanac init`",
                    cwd.display()
                ))
            }),
    }
}

pub fn status(cx: &Context, repo: Option<PathBuf>, out: &mut Out) -> Result<i32, Failure> {
    let repo = resolve_repo(cx, repo)?;
    let view = Overview::read(&repo, cx.now).map_err(Failure::Other)?;
    out.emit(
        || status_json(&repo, &view),
        |out| render_status(&repo, &view, out),
    );
    Ok(EXIT_OK)
}

/// `capture trust-prompt`: shows the repo's prompt override as it is now (the whole text, or what
/// changed since the last trusted copy) and makes it the one captures use once the user confirms exactly
/// that text: on a terminal by answering yes, elsewhere with `--sha256 <its hash>`. Refused while a run
/// is queued or running in the repo, whose agent could be rewriting the file as it is read.
pub fn trust_prompt(
    cx: &Context,
    repo: Option<PathBuf>,
    sha256: Option<String>,
    out: &mut Out,
) -> Result<i32, Failure> {
    use crate::capture::prompt;
    let repo = resolve_repo(cx, repo)?;
    no_run_in_flight(cx, &repo)?;
    let p = prompt::proposal(&cx.almanac_home, &repo).map_err(Failure::Other)?;
    let path = prompt::override_path(&repo);
    let diff = match (&p.trusted, &p.current) {
        (Some(old), Some(new)) => Some(crate::util::diff::lines(old.as_deref().unwrap_or(""), new)),
        _ => None,
    };
    let confirmed = match (&sha256, &p.sha256) {
        (Some(given), Some(actual)) if given.trim().eq_ignore_ascii_case(actual) => true,
        (Some(given), actual) => {
            return Err(Failure::Other(format!(
                "--sha256 {given}: {} is sha256 {} as it is now, not that: nothing trusted (look at it \
                 again with `almanac capture trust-prompt --repo {}`)",
                path.display(),
                actual.as_deref().unwrap_or("none (there is no such file)"),
                repo.display()
            )))
        }
        // Trusting that there is no override hands the agent nothing of the repo's.
        (None, None) => true,
        (None, Some(_)) => {
            show_proposal(&p, diff.as_deref(), &path, out);
            !out.is_json() && ask_yes(&format!("Trust this text for captures in {}?", repo.display()))
        }
    };
    if !confirmed {
        let hash = p.sha256.clone().unwrap_or_default();
        let how = format!(
            "nothing trusted; to trust exactly this text: almanac capture trust-prompt --repo {} --sha256 {hash}",
            repo.display()
        );
        out.emit(
            || serde_json::json!({"ok": false, "trusted": false, "repoRoot": repo.display().to_string(),
                "path": path.display().to_string(), "sha256": hash, "text": p.current, "diff": diff,
                "action": how}),
            |out| out.line(&format!("almanac: {how}")),
        );
        return Ok(super::EXIT_FAILURE);
    }
    no_run_in_flight(cx, &repo)?;
    let done = prompt::trust_exactly(&cx.almanac_home, &repo, p.sha256.as_deref(), cx.now)
        .map_err(Failure::Other)?;
    out.emit(
        || {
            serde_json::json!({"ok": true, "trusted": true, "repoRoot": repo.display().to_string(),
            "path": path.display().to_string(), "sha256": p.sha256, "action": done})
        },
        |out| out.line(&format!("almanac: {done}")),
    );
    Ok(EXIT_OK)
}

/// Refuses while a capture run is queued or running in the repo, or its worker is alive (its lock is
/// under `$ALMANAC_HOME`, out of the agent's reach, while run records are not): its agent may be writing
/// the very file the user is about to trust. A worker whose last run just ended is given a moment to
/// leave. Refused outright inside a capture agent's own environment.
fn no_run_in_flight(cx: &Context, repo: &Path) -> Result<(), Failure> {
    if cx.var(crate::capture::agent::AGENT_MARKER).is_some() {
        return Err(Failure::Other(
            "a capture agent may not trust a prompt: run `almanac capture trust-prompt` yourself"
                .into(),
        ));
    }
    let view = Overview::read(repo, cx.now).map_err(Failure::Other)?;
    let busy: Vec<String> = view
        .with_status(RunStatus::Queued)
        .into_iter()
        .chain(view.with_status(RunStatus::Running))
        .map(|r| r.run_id.clone())
        .collect();
    if busy.is_empty() {
        let start = std::time::Instant::now();
        while crate::ledger::worker_alive(repo) {
            if start.elapsed() > std::time::Duration::from_secs(5) {
                return Err(Failure::Other(format!(
                    "{}: its capture worker is running, and an agent of it may be rewriting {}: wait \
                     until `almanac capture status` shows no worker, then run this again",
                    repo.display(),
                    crate::capture::prompt::override_path(repo).display()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        return Ok(());
    }
    Err(Failure::Other(format!(
        "{}: capture run {} is queued or running, and its agent may be rewriting {} right now: wait \
         until `almanac capture status` shows none, then run this again",
        repo.display(),
        busy.join(", "),
        crate::capture::prompt::override_path(repo).display()
    )))
}

/// The override as it is now (or what changed since the last trusted copy), for the user to read.
fn show_proposal(
    p: &crate::capture::prompt::Proposal,
    diff: Option<&str>,
    path: &Path,
    out: &mut Out,
) {
    if out.is_json() {
        return;
    }
    let hash = p.sha256.as_deref().unwrap_or("");
    match (diff, &p.current) {
        (Some(d), _) => {
            out.line(&format!(
                "almanac: {} changed since it was last trusted (- the trusted copy, + now; sha256 {hash}):",
                path.display()
            ));
            out.line(d);
        }
        (None, Some(text)) => {
            out.line(&format!(
                "almanac: {} as it is now (sha256 {hash}):",
                path.display()
            ));
            out.line(text.trim_end());
        }
        (None, None) => {}
    }
}

/// Asks on the terminal; false (nothing asked) when stdin or stderr is not one.
fn ask_yes(question: &str) -> bool {
    use std::io::{BufRead, IsTerminal, Write};
    // The text was shown on stdout: only a person who saw it is asked.
    if ![
        std::io::stdin().is_terminal(),
        std::io::stdout().is_terminal(),
        std::io::stderr().is_terminal(),
    ]
    .iter()
    .all(|t| *t)
    {
        return false;
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{question} [y/N] ");
    let _ = err.flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// Who started the entry's latest run: `sweep`, or `manual` for `capture now` (None without a run).
fn last_run_trigger(repo: &Path, e: &ledger::LedgerEntry) -> Option<String> {
    let last = e.last_run_id.as_deref().or(e.pending_run_id.as_deref())?;
    let r = ledger::record::read(&ledger::runs_dir(repo), last)?;
    Some(r.trigger.unwrap_or_else(|| "sweep".into()))
}

fn status_json(repo: &Path, view: &Overview) -> serde_json::Value {
    let loaded = &view.loaded;
    let entries: Vec<_> = loaded
        .ledger
        .entries
        .iter()
        .map(|(k, e)| {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["key"] = serde_json::Value::String(k.clone());
            if let Some(trigger) = last_run_trigger(repo, e) {
                v["lastRunTrigger"] = trigger.into();
            }
            v
        })
        .collect();
    serde_json::json!({
        "ok": true,
        "repoRoot": repo.display().to_string(),
        "ledgerPath": ledger::ledger_path(repo).display().to_string(),
        "ledgerCorrupt": loaded.corrupt.as_ref().map(|c| c.error.clone()),
        "ledgerNewerVersion": view.newer,
        "entries": entries,
        "workerAlive": view.worker_alive,
        "queued": view.with_status(RunStatus::Queued),
        "running": view.with_status(RunStatus::Running),
        "recentFailures": view.recent_failures(5),
        "foreign": view.foreign,
    })
}

fn render_status(repo: &Path, view: &Overview, out: &mut Out) {
    let loaded = &view.loaded;
    out.line(&format!("capture status for {}:", repo.display()));
    if let Some(c) = &loaded.corrupt {
        out.line(&format!(
            "  ledger does not parse ({}); the next sweep moves it aside and rebuilds it from the run records",
            c.error
        ));
    }
    if let Some(n) = &view.newer {
        out.line(&format!("  {n}"));
    }
    out.line(&format!(
        "  ledger: {} ({} transcripts)",
        ledger::ledger_path(repo).display(),
        loaded.ledger.entries.len()
    ));
    for e in loaded.ledger.entries.values() {
        render_entry(
            e,
            last_run_trigger(repo, e).as_deref() == Some("manual"),
            out,
        );
    }
    out.line(&format!(
        "  runs: {} queued, {} running; worker {}",
        view.with_status(RunStatus::Queued).len(),
        view.with_status(RunStatus::Running).len(),
        if view.worker_alive {
            "running"
        } else {
            "not running"
        }
    ));
    render_foreign(view, out);
    let failures = view.recent_failures(5);
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
}

fn render_foreign(view: &Overview, out: &mut Out) {
    if view.foreign.is_empty() {
        return;
    }
    out.line(&format!(
        "  foreign run records ({}): not queued by your almanac (planted by a commit, copied, or written before records were sealed); never run, changed or deleted:",
        view.foreign.len()
    ));
    for f in &view.foreign {
        out.line(&format!("  - {}: {}", f.run_id, f.why));
    }
}

fn render_entry(e: &ledger::LedgerEntry, manual: bool, out: &mut Out) {
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
        "  - {} {}: captured through line {} (byte {}){}; {state}{}",
        e.app,
        e.session_id,
        e.last_captured_line,
        e.last_captured_size,
        e.last_captured_at
            .as_ref()
            .map(|t| format!(" at {t}"))
            .unwrap_or_default(),
        if manual {
            " (last run started by hand: capture now)"
        } else {
            ""
        }
    ));
    out.line(&format!("    {}", e.path));
    if let Some(o) = &e.wrote_outside_wiki {
        out.line(&format!(
            "    {}: run {} changed {} outside .almanac/ (not reverted)",
            crate::reason::Reason::AgentWroteOutsideWiki,
            o.run_id,
            o.paths.join(", ")
        ));
        if !o.also_changed_during_run.is_empty() {
            out.line(&format!(
                "    also changed during the run, already modified before it (not blamed): {}",
                o.also_changed_during_run.join(", ")
            ));
        }
    }
}

/// What `capture reset` does to the entry.
pub enum ResetHow {
    /// Forget it: the next sweep starts over from line 1.
    Forget,
    /// `--skip-existing`: what the transcript holds now counts as captured.
    SkipExisting,
    /// `--retries`: only the failed attempts are cleared; the cursor stays.
    Retries,
}

pub fn reset(
    cx: &Context,
    catalog: &Catalog,
    transcript: &Path,
    repo: Option<PathBuf>,
    how: ResetHow,
    out: &mut Out,
) -> Result<i32, Failure> {
    let (m, file) = super::explain::locate(catalog, cx, transcript, None)?;
    let mut mapper = RepoMapper::new(&cx.almanac_home);
    let ex = crate::discover::examine(m.rule, &file, &mut mapper);
    let repo = match repo {
        Some(r) => resolve_repo(cx, Some(r))?,
        None => ex.repo.as_deref().map(Path::to_path_buf).ok_or_else(|| {
            Failure::Usage(format!(
                "{}: no repo with .almanac/ for this transcript's cwd; pass --repo DIR",
                file.path.display()
            ))
        })?,
    };
    let path_text = file.path.display().to_string();
    let scan = || {
        let f = crate::discover::open_transcript(&file.path)
            .map_err(|e| format!("{path_text}: {e}"))?;
        cursor::scan(f, 0).map_err(|e| format!("{path_text}: {e}"))
    };
    let mode = match how {
        ResetHow::Forget => maintain::ResetMode::Forget,
        ResetHow::SkipExisting => maintain::ResetMode::SkipExisting(&scan),
        ResetHow::Retries => maintain::ResetMode::Retries,
    };
    let action = maintain::reset(
        &repo,
        (&path_text, file.file_id),
        ex.session_id
            .as_deref()
            .map(|sid| (m.rule.id.as_str(), sid)),
        mode,
        cx.now,
    )
    .map_err(|e| match e {
        ResetError::NotInLedger(msg) => Failure::Usage(msg),
        ResetError::Failed(msg) => Failure::Other(msg),
    })?;
    out.emit(
        || serde_json::json!({"ok": true, "transcriptPath": path_text, "repoRoot": repo.display().to_string(), "action": action}),
        |out| out.line(&format!("almanac: {path_text}: {action}")),
    );
    Ok(EXIT_OK)
}

/// `capture reset --store PATH`: forgets why a store could not be read (a fault of the store that is
/// remembered until it changes, or a session past a bound): the next sweep reads it again.
pub fn reset_store(cx: &Context, store: &Path, out: &mut Out) -> Result<i32, Failure> {
    let store = match store.is_absolute() {
        true => crate::util::paths::normalize(store),
        false => std::env::current_dir()
            .map(|d| crate::util::paths::normalize(&d.join(store)))
            .map_err(|e| Failure::Other(format!("cannot read the current directory: {e}")))?,
    };
    let forgot = crate::discover::views::forget(cx, &store).map_err(Failure::Other)?;
    let path_text = store.display().to_string();
    let action = match forgot.is_empty() {
        true => {
            "almanac remembers no read failure of it; the next sweep reads it as usual".to_string()
        }
        false => format!(
            "forgot why it could not be read ({}); the next sweep reads it again",
            forgot.join("; ")
        ),
    };
    out.emit(
        || serde_json::json!({"ok": true, "store": path_text, "forgot": forgot, "action": action}),
        |out| {
            out.line(&format!(
                "almanac: {}: {}",
                crate::util::term::visible(&path_text),
                crate::util::term::visible(&action)
            ))
        },
    );
    Ok(EXIT_OK)
}

pub fn prune(
    cx: &Context,
    catalog: &Catalog,
    repo: Option<PathBuf>,
    older_than: std::time::Duration,
    dry_run: bool,
    out: &mut Out,
) -> Result<i32, Failure> {
    let repo = resolve_repo(cx, repo)?;
    let cutoff = cx.now - chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::MAX);
    let maintain::Pruned {
        runs_removed: removed_runs,
        entries_removed: gone,
    } = {
        // The sessions the stores still hold, wherever their files now are.
        let live = crate::discover::sessions::live_sessions(catalog, cx)
            .into_iter()
            .map(|(app, sid)| ledger::key(&app, &sid))
            .collect();
        maintain::prune(&repo, cutoff, &live, dry_run, cx.now).map_err(Failure::Other)?
    };
    out.emit(
        || serde_json::json!({"ok": true, "dryRun": dry_run, "repoRoot": repo.display().to_string(), "runsRemoved": removed_runs, "entriesRemoved": gone}),
        |out| {
        let verb = if dry_run { "would remove" } else { "removed" };
        out.line(&format!(
            "almanac: {verb} {} run records older than {} and {} ledger entries of sessions no longer in any store in {}",
            removed_runs.len(),
            crate::util::duration::format_duration(older_than),
            gone.len(),
            repo.display()
        ));
        },
    );
    Ok(EXIT_OK)
}
