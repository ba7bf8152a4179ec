//! The per-repo worker (`almanac capture worker --repo DIR`, started by the sweep): runs the repo's
//! queued captures one after another, so two captures never run in one repo at once. It holds its lock
//! under `$ALMANAC_HOME/state/workers/` (and `runs/worker.lock`) while it works; a second worker finds it
//! held and leaves. Before each run it takes an agent slot (`slots`), so at most `max_parallel_agents`
//! agents run at once across repos.

use super::agent;
use super::held::Held;
use crate::context::Context;
use crate::ledger::record::{self as run, RunEnd, RunRecord, RunStatus};
use crate::ledger::{self, key, runs_dir, worker_lock_path};
use crate::reason::Reason;
use crate::util::lock::FileLock;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

fn now_iso() -> String {
    crate::policy::iso(chrono::Utc::now())
}

pub(super) fn note(msg: &str) {
    eprintln!("{} worker {}: {msg}", now_iso(), std::process::id());
}

/// Runs until no queued run is left. Returns the process exit code.
pub fn run_worker(cx: &Context, repo: &Path) -> i32 {
    if let Err(why) = super::trust::store_usable(repo) {
        note(&format!("{why}; leaving"));
        return 1;
    }
    let mut known = HashMap::new();
    let mut held = Held::new();
    let mut rules = super::copied::Rules::new(&cx.almanac_home);
    loop {
        // A ledger this version cannot read is left alone: nothing runs and nothing is rewritten here.
        if let Some(n) = ledger::is_newer(repo) {
            note(&format!("{n}; leaving"));
            return 0;
        }
        let mut locks = match WorkerLocks::take(repo) {
            Ok(Some(l)) => l,
            Ok(None) => return 0,
            Err(e) => {
                note(&e);
                return 1;
            }
        };
        super::trust::report_foreign(repo, note);
        loop {
            // A slot first (it may mean waiting for other repos' agents), then the run: waiting is not
            // part of any run's time.
            let slot = take_slot(cx);
            // Interrupted (Ctrl-C on `capture now --foreground`): start nothing more; what is queued
            // stays queued for the next worker.
            if super::agent::interrupted() {
                break;
            }
            let Some(record) = pick_next(repo, &mut known, &mut held, &mut rules) else {
                break;
            };
            execute(cx, repo, record, &mut held, slot.as_ref());
            drop(slot);
            locks.retake_repo_lock(repo);
        }
        if held.dirty {
            if let Ok(_guard) = ledger::lock_repo(repo) {
                if held.current(repo).is_ok() {
                    held.save(repo, true);
                }
            }
        }
        drop(locks);
        // A sweep may have queued a run between our last look and the unlock; it saw our lock held and
        // started no worker, so look once more.
        if super::agent::interrupted() || queued_ids(repo, &mut known).is_empty() {
            return 0;
        }
    }
}

/// An agent slot (`slots`), waited for; None when the slots cannot be used at all.
fn take_slot(cx: &Context) -> Option<super::slots::Slot> {
    let max = crate::config::load(&cx.config_path())
        .map(|c| c.capture.max_parallel_agents)
        .unwrap_or(2);
    match super::slots::acquire(&cx.almanac_home, max, note) {
        Ok(l) => Some(l),
        Err(e) => {
            note(&format!(
                "cannot use the agent slots: {e}; running without one"
            ));
            None
        }
    }
}

/// The worker's locks: the one under `$ALMANAC_HOME` (keyed by the repo, out of the agent's reach: what
/// the one-worker rule rests on) and `runs/worker.lock` (seen by almanac setups with another home).
struct WorkerLocks {
    _home: Option<FileLock>,
    repo: Option<FileLock>,
}

impl WorkerLocks {
    /// Both locks, waiting a moment (a sweep holds one for an instant while checking whether a worker is
    /// alive). `Ok(None)` when another worker holds one; `Err` when a lock file cannot be opened.
    fn take(repo: &Path) -> Result<Option<WorkerLocks>, String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let try_one = |path: &Path| match FileLock::try_acquire(path) {
            Ok(r) => Ok(r),
            Err(e) => Err(format!("cannot open {}: {e}", path.display())),
        };
        loop {
            let home = match ledger::home_worker_lock_path(repo) {
                Some(p) => try_one(&p)?.map(Some),
                None => Ok(None),
            };
            let both = match home {
                Ok(home) => try_one(&worker_lock_path(repo))?.map(|r| (home, r)),
                Err(holder) => Err(holder),
            };
            match both {
                Ok((home, r)) => {
                    return Ok(Some(WorkerLocks {
                        _home: home,
                        repo: Some(r),
                    }))
                }
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(holder) => {
                    note(&format!(
                        "another worker holds the lock (pid {}); leaving",
                        holder.map(|h| h.pid).unwrap_or(0)
                    ));
                    return Ok(None);
                }
            }
        }
    }

    /// `runs/worker.lock` again when the agent deleted it (the lock under `$ALMANAC_HOME` still holds).
    fn retake_repo_lock(&mut self, repo: &Path) {
        let path = worker_lock_path(repo);
        if self.repo.is_some() && FileLock::is_held(&path) {
            return;
        }
        if crate::ledger::guard::check_runs_dir(repo).is_ok() {
            self.repo = FileLock::try_acquire(&path).ok().and_then(Result::ok);
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
                // Foreign (reported when the worker took the queue) or gone: never run, not read again.
                None => {
                    known.insert(id, RunStatus::Failed);
                    continue;
                }
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
    rules: &mut super::copied::Rules,
) -> Option<RunRecord> {
    let runs = runs_dir(repo);
    let _guard = match ledger::lock_repo(repo) {
        Ok(g) => g,
        Err(e) => {
            note(&format!("cannot lock the ledger: {e}"));
            return None;
        }
    };
    if let Err(e) = held.current(repo) {
        note(&format!("cannot read the ledger: {e}"));
        return None;
    }
    for id in queued_ids(repo, known) {
        let Some(mut r) = run::read(&runs, &id) else {
            known.remove(&id);
            continue;
        };
        known.insert(id, r.status);
        if r.status != RunStatus::Queued {
            continue;
        }
        let waited_for = held
            .ledger
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
        // Records another session of its family claimed first are not this run's to capture.
        if let Some(why) = super::copied::claimed_elsewhere(rules, &held.ledger, &r) {
            note(&format!("{}: not run: {why}", r.run_id));
            r.finish(&RunEnd::Cancelled(why.clone()), &now_iso());
            let _ = run::write(&runs, &r);
            known.insert(r.run_id.clone(), RunStatus::Cancelled);
            // The entry stops waiting (saved with the next outcome; a sweep before that settles it
            // from the record), and so do its later chunks.
            let entry = held.ledger.entries.get_mut(&key(&r.app, &r.session_id));
            let later = entry.map(|e| e.cancel(&r.run_id, &why)).unwrap_or_default();
            run::cancel_queued(&runs, &later, &why, &now_iso());
            for id in later {
                known.insert(id, RunStatus::Failed);
            }
            held.dirty = true;
            continue;
        }
        super::trust::paths_from_id(&runs, &mut r);
        r.start(std::process::id(), &now_iso());
        if run::write(&runs, &r).is_ok() {
            known.insert(r.run_id.clone(), RunStatus::Running);
            return Some(r);
        }
    }
    None
}

fn execute(
    cx: &Context,
    repo: &Path,
    mut record: RunRecord,
    held: &mut Held,
    slot: Option<&super::slots::Slot>,
) {
    if let Some(b) = super::breaker::tripped(&cx.almanac_home, record.sweep_id.as_deref()) {
        cancel_by_breaker(
            repo,
            held,
            record,
            b.reason.as_deref().unwrap_or("too many failures in a row"),
        );
        return;
    }
    if let Err(why) = transcript_unchanged(&record) {
        note(&format!("{}: not run: {why}", record.run_id));
        return finish(repo, held, record, RunEnd::Cancelled(why));
    }
    let runs = runs_dir(repo);
    super::logs::rotate_worker_log(repo);
    note(&format!(
        "running {} ({} {} lines {}-{})",
        record.run_id, record.app, record.session_id, record.from_line, record.to_line
    ));
    let log = crate::util::atomic::open_append_private(&run::log_path(&runs, &record.run_id));
    let outcome = match (log, crate::config::load(&cx.config_path())) {
        (Err(e), _) => RunEnd::Failed(format!("cannot open the run log {}: {e}", record.log_path)),
        (_, Err(e)) => RunEnd::Failed(e.0),
        (Ok(log), Ok(config)) => match config.capture.agent_def(&record.agent) {
            None => RunEnd::Failed(format!(
                "agent \"{}\" is not defined in config.toml",
                record.agent
            )),
            Some(def) => {
                // The agent reads this copy; `record` itself takes the session id as it is learned.
                let queued = record.clone();
                let limits = agent::Limits {
                    timeout: config.capture.timeout,
                    max_log_bytes: config.capture.max_log_bytes,
                };
                let before = super::verify::Snapshot::take(repo);
                super::prompt::note_agent_start(&cx.almanac_home, repo, chrono::Utc::now());
                let out = agent::invoke(def, &queued, repo, &log, limits, |learned| {
                    // The slot names its agent, to be stopped at its timeout should this worker die.
                    if let (agent::Learned::Spawned(p), Some(slot)) = (&learned, slot) {
                        let until = chrono::Utc::now()
                            + chrono::Duration::from_std(limits.timeout).unwrap_or_default();
                        if let Err(e) = slot.occupy(*p, until, &record.run_id) {
                            note(&format!("cannot note the agent in its slot: {e}"));
                        }
                    }
                    learn(repo, &runs, &mut record, held, learned)
                });
                record.agent_pid = out.agent_pid;
                record.exit_code = out.exit_code;
                before.check(repo, &mut record);
                match out.error {
                    None => RunEnd::Done,
                    // Ctrl-C on `capture now --foreground`: the user stopped it, nothing failed; a
                    // prompt changed after it was queued: nothing ran.
                    Some(e) if super::agent::interrupted() || out.prompt_changed => {
                        RunEnd::Cancelled(e)
                    }
                    Some(e) => RunEnd::Failed(e),
                }
            }
        },
    };
    let failed = matches!(outcome, RunEnd::Failed(_));
    let sweep_id = record.sweep_id.clone();
    finish(repo, held, record, outcome);
    super::breaker::record(&cx.almanac_home, sweep_id.as_deref(), failed);
}

/// The transcript still holds the lines the run was queued for, as they were when the sweep read them
/// (and rendered them for the agent): the same prefix hash up to the run's end (a view: the same message
/// ids). A transcript rewritten or truncated while the run waited is the next sweep's to handle (a
/// prefix mismatch, or a recovery after the last captured record), so the run is cancelled, spending no
/// attempt, and the cursor stays.
fn transcript_unchanged(record: &RunRecord) -> Result<(), String> {
    use crate::discover::views::ids;
    let path = Path::new(&record.transcript_path);
    let changed = |what: String| {
        format!(
            "{}: {} changed after this run was queued ({what}); the next sweep reads it again",
            Reason::TranscriptChanged,
            path.display()
        )
    };
    let now = match record.prefix_hash.starts_with(ids::IDS_PREFIX) {
        true => ids::hashes(path, &[record.to_line]).map(|mut h| h.pop().flatten().map(|x| x.1)),
        false => crate::discover::open_transcript(path)
            .and_then(|f| crate::ledger::cursor::prefix_hash(f, record.to_byte)),
    };
    match now {
        Ok(Some(h)) if h == record.prefix_hash => Ok(()),
        Ok(Some(_)) => Err(changed(format!(
            "its first {} bytes are not the ones queued",
            record.to_byte
        ))),
        Ok(None) => Err(changed(format!(
            "it no longer holds the {} lines queued",
            record.to_line
        ))),
        Err(e) => Err(changed(format!("it cannot be read: {e}"))),
    }
}

/// Records the outcome: run record first, then (under the repo lock) the ledger entry. The cursor moves
/// only when the agent exited 0; a cancelled run spends no attempt.
fn finish(repo: &Path, held: &mut Held, mut record: RunRecord, outcome: RunEnd) {
    let runs = runs_dir(repo);
    // The agent may have deleted runs/ (made again here) or left a link in its place (nothing written).
    if let Err(why) = held.check_store(repo, &record.run_id) {
        return note(&format!(
            "{}: cannot record the outcome of {}: {why}",
            Reason::RunsDirUnsafe,
            record.run_id
        ));
    }
    let now = chrono::Utc::now();
    record.finish(&outcome, &crate::policy::iso(now));
    // The record and the entry are written under one hold of the repo lock, so no sweep reconciles the
    // entry from the record in between (the worker would take that for a ledger someone replaced). Only
    // when the record cannot be written (a full disk) is the lock let go while the worker retries: sweeps
    // go on meanwhile, and one that reconciles the run is told apart from a lost ledger (`held`).
    let mut guard = ledger::lock_repo(repo).ok();
    let written =
        crate::util::fault::disk_full("post-run").and_then(|()| run::write(&runs, &record));
    if let Err(e) = written {
        note(&format!(
            "cannot write run record {} (exit code {:?}): {e}; retrying",
            record.run_id, record.exit_code
        ));
        drop(guard.take());
        persist_finished(&runs, &record);
        guard = ledger::lock_repo(repo).ok();
    }
    let _guard = guard;
    crate::util::fault::pause("run-recorded");
    crate::util::fault::point("before-cursor-commit");
    let cancelled = update_entry(repo, held, &record, |entry| match &outcome {
        RunEnd::Done => {
            entry.complete_run(&record, &crate::policy::iso(now));
            Vec::new()
        }
        RunEnd::Failed(e) => entry.fail_run(&record, e),
        RunEnd::Cancelled(e) => entry.cancel(&record.run_id, e),
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
        match outcome {
            RunEnd::Done => "done",
            RunEnd::Failed(_) => "failed",
            RunEnd::Cancelled(_) => "cancelled",
        }
    ));
}

/// How long the worker keeps trying to write a finished run's record (a full disk, a quota) before it
/// gives up and leaves the run to the next sweep, which then retries it as `worker-lost`.
const PERSIST_FOR: Duration = Duration::from_secs(3600);
const PERSIST_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Writes the finished record ("the agent exited with code C"), which a first try could not, retrying
/// with backoff while it fails. The worker keeps its lock meanwhile, so no sweep takes the run for lost
/// and runs the agent on the same lines again; the repo lock is not held, so sweeps go on.
fn persist_finished(runs: &Path, record: &RunRecord) {
    let start = Instant::now();
    let mut delay = Duration::from_millis(50);
    let mut tries = 1u32;
    loop {
        std::thread::sleep(delay);
        delay = (delay * 2).min(PERSIST_BACKOFF_MAX);
        let written =
            crate::util::fault::disk_full("post-run").and_then(|()| run::write(runs, record));
        let e = match written {
            Ok(()) => return note(&format!("{}: run record written", record.run_id)),
            Err(e) => e,
        };
        tries += 1;
        if start.elapsed() >= PERSIST_FOR {
            return note(&format!(
                "giving up on run record {} after {tries} tries: {e}",
                record.run_id
            ));
        }
    }
}

/// What the agent told about itself, recorded as it is learned. A preset session id goes to the journal
/// (under the repo lock, synced) before the agent starts, so its transcript is known as ours even if
/// the worker dies; the run record gets it with the agent's process group as soon as the agent's
/// process exists, and the agent is let start only once that is written (an `Err` keeps it from
/// starting).
fn learn(
    repo: &Path,
    runs: &Path,
    record: &mut RunRecord,
    held: &mut Held,
    learned: agent::Learned<'_>,
) -> Result<(), String> {
    let id = match learned {
        agent::Learned::Spawned(p) => {
            record.agent_pid = Some(p.pgid);
            record.agent_process = Some(p);
            // Never written through a link put in place of runs/ (by an agent that ran before).
            ledger::guard::check_runs_dir(repo)?;
            return crate::util::fault::disk_full("agent-record")
                .and_then(|()| run::write(runs, record))
                .map_err(|e| {
                    format!(
                        "cannot write {}: {e}",
                        run::record_path(runs, &record.run_id).display()
                    )
                });
        }
        agent::Learned::Preset(id) | agent::Learned::FromStdout(id) => id,
    };
    record.agent_session_id = Some(id.to_string());
    if let Err(e) = ledger::add_agent_session(repo, id) {
        note(&format!("cannot record agent session {id}: {e}"));
    }
    held.ledger.agent_sessions.insert(id.to_string());
    held.dirty = true;
    if matches!(learned, agent::Learned::FromStdout(_))
        && ledger::guard::check_runs_dir(repo).is_ok()
    {
        let _ = run::write(runs, record);
    }
    Ok(())
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
