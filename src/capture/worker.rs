//! The per-repo worker (`almanac capture worker --repo DIR`, started by the sweep): runs the repo's
//! queued captures one after another, so two captures never run in one repo at once. It holds
//! `runs/worker.lock` while it works; a second worker finds it held and leaves.

use super::agent;
use crate::context::Context;
use crate::ledger::record::{self as run, RunRecord, RunStatus};
use crate::ledger::{self, key, runs_dir, worker_lock_path, RepoState};
use crate::reason::Reason;
use crate::util::lock::FileLock;
use std::collections::HashMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn now_iso() -> String {
    crate::policy::iso(chrono::Utc::now())
}

fn note(msg: &str) {
    eprintln!("{} worker {}: {msg}", now_iso(), std::process::id());
}

/// The repo's ledger as this worker last read or wrote it. A worker draining many runs would otherwise
/// parse and rewrite the whole ledger twice per run. The file is read again only when another process
/// (a sweep, `capture reset`, an agent session being recorded) wrote it since, and is then reconciled
/// with the run records, so nothing this worker finished is lost. Saving is deferred (at most
/// `SAVE_EVERY` apart, and always before the worker lets go of the queue): the run record is written
/// first and is what counts; a sweep reconciles any entry the worker did not get to save.
struct Held {
    /// The file's bytes when this worker last read or wrote it.
    bytes: Option<Vec<u8>>,
    ledger: ledger::Ledger,
    dirty: bool,
    saved_at: Instant,
}

const SAVE_EVERY: Duration = Duration::from_secs(2);

impl Held {
    fn new() -> Held {
        Held {
            bytes: None,
            ledger: ledger::Ledger::default(),
            dirty: false,
            saved_at: Instant::now(),
        }
    }

    /// The current ledger; the caller holds the repo lock.
    fn current(&mut self, repo: &Path) -> std::io::Result<&mut ledger::Ledger> {
        let on_disk = match std::fs::read(ledger::ledger_path(repo)) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if on_disk.is_none() || on_disk != self.bytes {
            let now = chrono::Utc::now();
            let mut state = RepoState::load(repo, now, true)?;
            state.reconcile(now, true);
            self.dirty = state.changed();
            self.ledger = state.ledger;
            self.bytes = on_disk;
        }
        Ok(&mut self.ledger)
    }

    /// Saves when changed and `force` or due; the caller holds the repo lock.
    fn save(&mut self, repo: &Path, force: bool) {
        if !self.dirty || !(force || self.saved_at.elapsed() >= SAVE_EVERY) {
            return;
        }
        match ledger::save_bytes(repo, &mut self.ledger, chrono::Utc::now()) {
            Ok(bytes) => {
                self.bytes = Some(bytes);
                self.dirty = false;
                self.saved_at = Instant::now();
            }
            Err(e) => note(&format!("cannot save the ledger: {e}")),
        }
    }
}

/// Runs until no queued run is left. Returns the process exit code.
pub fn run_worker(cx: &Context, repo: &Path) -> i32 {
    let lock_path = worker_lock_path(repo);
    let mut known = HashMap::new();
    let mut held = Held::new();
    loop {
        // A sweep may hold the lock for an instant while checking whether a worker is alive.
        let deadline = Instant::now() + Duration::from_secs(5);
        let lock = loop {
            match FileLock::try_acquire(&lock_path) {
                Ok(Ok(l)) => break Some(l),
                Ok(Err(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Ok(Err(holder)) => {
                    note(&format!(
                        "another worker holds the lock (pid {}); leaving",
                        holder.map(|h| h.pid).unwrap_or(0)
                    ));
                    break None;
                }
                Err(e) => {
                    note(&format!("cannot open {}: {e}", lock_path.display()));
                    return 1;
                }
            }
        };
        let Some(lock) = lock else { return 0 };
        while let Some(record) = pick_next(repo, &mut known, &mut held) {
            execute(cx, repo, record, &mut held);
        }
        if held.dirty {
            if let Ok(_guard) = ledger::lock_repo(repo) {
                if held.current(repo).is_ok() {
                    held.save(repo, true);
                }
            }
        }
        drop(lock);
        // A sweep may have queued a run between our last look and the unlock; it saw our lock held and
        // started no worker, so look once more.
        if queued_ids(repo, &mut known).is_empty() {
            return 0;
        }
    }
}

/// Ids of the runs last seen queued, oldest first. Each record is read once per worker when first
/// listed: `known` remembers the status of every record seen, and the record is read again only when
/// it is about to run (a sweep may have cancelled it), so draining many runs stays linear.
fn queued_ids(repo: &Path, known: &mut HashMap<String, RunStatus>) -> Vec<String> {
    let runs = runs_dir(repo);
    let mut out = Vec::new();
    for id in run::list_ids(&runs) {
        let status = match known.get(&id) {
            Some(s) => *s,
            None => match run::read(&runs, &id) {
                Some(r) => {
                    known.insert(id.clone(), r.status);
                    r.status
                }
                None => continue,
            },
        };
        if status == RunStatus::Queued {
            out.push(id);
        }
    }
    out
}

/// Under the repo lock: the oldest queued run that the ledger is waiting for, marked running. A queued
/// run no ledger entry waits for (a sweep died between writing it and the ledger) is marked failed.
fn pick_next(
    repo: &Path,
    known: &mut HashMap<String, RunStatus>,
    held: &mut Held,
) -> Option<RunRecord> {
    let runs = runs_dir(repo);
    let _guard = match ledger::lock_repo(repo) {
        Ok(g) => g,
        Err(e) => {
            note(&format!("cannot lock the ledger: {e}"));
            return None;
        }
    };
    let ledger = match held.current(repo) {
        Ok(l) => l,
        Err(e) => {
            note(&format!("cannot read the ledger: {e}"));
            return None;
        }
    };
    for id in queued_ids(repo, known) {
        let Some(mut r) = run::read(&runs, &id) else {
            known.remove(&id);
            continue;
        };
        known.insert(id, r.status);
        if r.status != RunStatus::Queued {
            continue;
        }
        let waited_for = ledger
            .entries
            .get(&key(&r.app, &r.session_id))
            .is_some_and(|e| e.waits_for(&r.run_id));
        if !waited_for {
            r.fail(
                format!(
                    "{}: no ledger entry waits for this run (a sweep ended before recording it)",
                    Reason::Orphaned
                ),
                &now_iso(),
            );
            let _ = run::write(&runs, &r);
            known.insert(r.run_id.clone(), RunStatus::Failed);
            continue;
        }
        r.start(std::process::id(), &now_iso());
        if run::write(&runs, &r).is_ok() {
            known.insert(r.run_id.clone(), RunStatus::Running);
            return Some(r);
        }
    }
    None
}

fn execute(cx: &Context, repo: &Path, mut record: RunRecord, held: &mut Held) {
    if let Some(b) = super::breaker::tripped(&cx.almanac_home, record.sweep_id.as_deref()) {
        cancel_by_breaker(
            repo,
            held,
            record,
            b.reason.as_deref().unwrap_or("too many failures in a row"),
        );
        return;
    }
    let runs = runs_dir(repo);
    note(&format!(
        "running {} ({} {} lines {}-{})",
        record.run_id, record.app, record.session_id, record.from_line, record.to_line
    ));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&record.log_path);
    let outcome = match (log, crate::config::load(&cx.config_path())) {
        (Err(e), _) => Err(format!("cannot open the run log {}: {e}", record.log_path)),
        (_, Err(e)) => Err(e.0),
        (Ok(log), Ok(config)) => match config.capture.agent_def(&record.agent) {
            None => Err(format!(
                "agent \"{}\" is not defined in config.toml",
                record.agent
            )),
            Some(def) => {
                // The agent reads this copy; `record` itself takes the session id as it is learned.
                let queued = record.clone();
                let timeout = config.capture.timeout;
                let before = super::verify::Snapshot::take(repo);
                let out =
                    agent::invoke(def, &queued, repo, &log, timeout, |learned| match learned {
                        agent::Learned::Preset(id) => {
                            record.agent_session_id = Some(id.to_string());
                            let _ = run::write(&runs, &record);
                            if let Err(e) = ledger::add_agent_session(repo, id) {
                                note(&format!("cannot record agent session {id}: {e}"));
                            }
                        }
                        agent::Learned::FromStdout(id) => {
                            record.agent_session_id = Some(id.to_string());
                            let _ = ledger::add_agent_session(repo, id);
                            let _ = run::write(&runs, &record);
                        }
                    });
                record.agent_pid = out.agent_pid;
                record.exit_code = out.exit_code;
                before.check(repo, &mut record);
                match out.error {
                    None => Ok(()),
                    Some(e) => Err(e),
                }
            }
        },
    };
    let failed = outcome.is_err();
    let sweep_id = record.sweep_id.clone();
    finish(repo, held, record, outcome);
    super::breaker::record(&cx.almanac_home, sweep_id.as_deref(), failed);
}

/// Records the outcome: run record first, then (same lock) the ledger entry. The cursor moves only when
/// the agent exited 0.
fn finish(repo: &Path, held: &mut Held, mut record: RunRecord, outcome: Result<(), String>) {
    let runs = runs_dir(repo);
    let _guard = ledger::lock_repo(repo).ok();
    let now = chrono::Utc::now();
    record.finish(&outcome, &crate::policy::iso(now));
    if let Err(e) = run::write(&runs, &record) {
        note(&format!("cannot write run record {}: {e}", record.run_id));
    }
    crate::util::fault::point("before-cursor-commit");
    let cancelled = update_entry(repo, held, &record, |entry| match &outcome {
        Ok(()) => {
            entry.complete_run(&record, &crate::policy::iso(now));
            Vec::new()
        }
        Err(e) => entry.fail(&record.run_id, e),
    });
    run::cancel_queued(
        &runs,
        &cancelled,
        "cancelled: an earlier chunk of this transcript failed; the next sweep retries from it",
        &now_iso(),
    );
    note(&format!(
        "{} {}",
        record.run_id,
        if outcome.is_ok() { "done" } else { "failed" }
    ));
}

/// Applies `f` to the ledger entry waiting for `record` (if it still is); the ledger is saved when due.
/// The caller holds the repo lock. Returns what `f` returns: run ids that must not run now.
fn update_entry(
    repo: &Path,
    held: &mut Held,
    record: &RunRecord,
    f: impl FnOnce(&mut ledger::LedgerEntry) -> Vec<String>,
) -> Vec<String> {
    let ledger = match held.current(repo) {
        Ok(l) => l,
        Err(e) => {
            note(&format!("cannot read the ledger: {e}"));
            return Vec::new();
        }
    };
    let Some(entry) = ledger
        .entries
        .get_mut(&key(&record.app, &record.session_id))
    else {
        return Vec::new();
    };
    if !entry.waits_for(&record.run_id) {
        return Vec::new();
    }
    let out = f(entry);
    held.dirty = true;
    held.save(repo, false);
    out
}

/// The circuit breaker tripped for this run's sweep: cancel it (and its entry's later chunks) without
/// running, spending no attempt.
fn cancel_by_breaker(repo: &Path, held: &mut Held, mut record: RunRecord, reason: &str) {
    let runs = runs_dir(repo);
    let _guard = ledger::lock_repo(repo).ok();
    let now = chrono::Utc::now();
    let why = format!("cancelled by the circuit breaker: {reason}");
    record.fail(why.clone(), &crate::policy::iso(now));
    let _ = run::write(&runs, &record);
    let rest = update_entry(repo, held, &record, |entry| {
        entry.cancel(&record.run_id, &why)
    });
    run::cancel_queued(&runs, &rest, &why, &crate::policy::iso(now));
    note(&format!(
        "{} cancelled by the circuit breaker",
        record.run_id
    ));
}
