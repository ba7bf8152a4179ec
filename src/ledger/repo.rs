//! A repo's ledger and run records as a sweep or the worker starts from them: loaded, then reconciled so
//! that a run that finished (or whose worker died) is reflected in its entry before any decision.

use super::record::{self, RunRecord, RunStatus};
use super::{runs_dir, EntryStatus, Ledger};
use crate::reason::Reason;
use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};

/// Stops the agent a lost worker left running for a run; whether it is gone (`capture::orphan`).
pub type StopOrphan<'a> = &'a dyn Fn(&RunRecord) -> bool;

pub struct RepoState {
    pub repo: PathBuf,
    pub ledger: Ledger,
    /// Set when anything in the ledger may have changed: an unchanged ledger is not rewritten.
    pub dirty: bool,
    pub corrupt: Option<super::Corrupt>,
    /// Set when the ledger parsed but its seal did not hold: what checking it against the run records
    /// found (the next save seals it).
    pub unsealed: Option<super::rebuild::Unsealed>,
    pub worker_alive: bool,
}

impl RepoState {
    /// Reads the repo's ledger. `live` renames a corrupt ledger aside; a dry run only reports it.
    pub fn load(repo: &Path, now: DateTime<Utc>, live: bool) -> std::io::Result<RepoState> {
        let loaded = super::load(repo, now, live)?;
        Ok(RepoState {
            repo: repo.to_path_buf(),
            dirty: loaded.corrupt.is_some() || loaded.unsealed.is_some(),
            ledger: loaded.ledger,
            corrupt: loaded.corrupt,
            unsealed: loaded.unsealed,
            worker_alive: super::worker_alive(repo),
        })
    }

    pub fn changed(&self) -> bool {
        self.dirty
    }

    /// Brings pending entries and their run records into agreement before any decision: a finished run
    /// moves or fails its entry's cursor (the worker may have died between the two writes); a `running`
    /// run with no live worker failed (`worker-lost`), once `stop_orphan` (the capture stage's: it stops
    /// the agent the lost worker left, and says whether it is gone) has let it. Only pending entries'
    /// records are read. A live caller passes `stop_orphan` and the run records it changes are written;
    /// a dry run (None) writes and stops nothing. Queued runs that no entry waits for are left to the
    /// worker, which fails them as orphans.
    pub fn reconcile(&mut self, now: DateTime<Utc>, stop_orphan: Option<StopOrphan<'_>>) {
        let write = stop_orphan.is_some();
        let runs = runs_dir(&self.repo);
        let now_iso = crate::policy::iso(now);
        let mut changed = Vec::new();
        let mut cancelled = Vec::new();
        for entry in self.ledger.entries.values_mut() {
            // A chunked part has several runs: follow them while they are finished.
            while entry.status == EntryStatus::Pending {
                self.dirty = true;
                let Some(run_id) = entry.pending_run_id.clone() else {
                    entry.status = EntryStatus::Done;
                    break;
                };
                let mut r = match record::find(&runs, &run_id) {
                    record::Found::Ours(r) => *r,
                    record::Found::Missing => {
                        cancelled.extend(entry.fail(&run_id, "the run record is missing"));
                        break;
                    }
                    // Never run and never changed; the entry stops waiting for it without spending an
                    // attempt, so this sweep captures the transcript from its cursor with a run of ours.
                    record::Found::Foreign(why) => {
                        cancelled.extend(entry.cancel(&run_id, &foreign(&run_id, &why)));
                        break;
                    }
                };
                if r.status == RunStatus::Running && !self.worker_alive {
                    // Never two agents in one repo: the agent the dead worker left is stopped first
                    // (a dry run stops nothing); one that cannot be stopped keeps the run pending.
                    if stop_orphan.is_some_and(|stop| !stop(&r)) {
                        break;
                    }
                    r.fail(worker_lost(&r), &now_iso);
                    changed.push(r.clone());
                }
                match r.status {
                    RunStatus::Done => {
                        entry.complete_run(&r, r.finished_at.as_deref().unwrap_or(&now_iso))
                    }
                    RunStatus::Failed => {
                        cancelled.extend(
                            entry.fail_run(&r, r.error.as_deref().unwrap_or("the run failed")),
                        );
                        break;
                    }
                    RunStatus::Cancelled => {
                        let why = r.error.as_deref().unwrap_or("the run was cancelled");
                        cancelled.extend(entry.cancel(&r.run_id, why));
                        break;
                    }
                    RunStatus::Queued | RunStatus::Running => break,
                }
            }
        }
        for id in cancelled {
            if let Some(mut r) = record::read(&runs, &id) {
                if r.cancel_if_queued(CANCELLED_AFTER_FAILED_CHUNK, &now_iso) {
                    changed.push(r);
                }
            }
        }
        if write {
            for r in &changed {
                let _ = record::write(&runs, r);
            }
        }
    }

    /// What a worker found done to the ledger while an agent ran (`capture::held`), to report once:
    /// cleared when `live` (the ledger is then rewritten).
    pub fn take_overwritten(&mut self, live: bool) -> Vec<String> {
        if !live {
            return self.ledger.overwritten.clone();
        }
        let events = std::mem::take(&mut self.ledger.overwritten);
        self.dirty |= !events.is_empty();
        events
    }

    /// Whether a run is waiting for a worker.
    pub fn has_pending(&self) -> bool {
        self.ledger
            .entries
            .values()
            .any(|e| e.status == EntryStatus::Pending)
    }

    /// Writes the ledger, first removing temp files an interrupted write left in the runs directory
    /// (here, not on every load: listing a runs directory of thousands of records cost a no-change sweep
    /// a fifth of its ledger time at 100k sessions, and a temp file harms nothing until then).
    pub fn save(&mut self, now: DateTime<Utc>) -> std::io::Result<()> {
        crate::util::atomic::remove_stale_temps(&runs_dir(&self.repo));
        super::save(&self.repo, &mut self.ledger, now)
    }
}

const CANCELLED_AFTER_FAILED_CHUNK: &str = "cancelled: an earlier chunk of this transcript failed";

fn foreign(run_id: &str, why: &str) -> String {
    format!(
        "{}: run record {run_id} was not queued by this user's almanac ({why}); it is never run",
        Reason::ForeignRun
    )
}

fn worker_lost(r: &RunRecord) -> String {
    format!(
        "{}: the worker (pid {}) ended before the run finished",
        Reason::WorkerLost,
        r.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{key, record, LedgerEntry, PendingChunk};

    fn run(id: &str, status: RunStatus) -> RunRecord {
        RunRecord {
            version: 1,
            run_id: id.into(),
            status,
            repo_root: "/r".into(),
            app: "claude".into(),
            session_id: "s1".into(),
            transcript_path: "/t/s1.jsonl".into(),
            from_line: 1,
            to_line: 30,
            from_byte: 0,
            to_byte: 300,
            prefix_hash: "sha256:300".into(),
            agent: "claude".into(),
            agent_session_id: None,
            pid: Some(4_000_000),
            agent_pid: None,
            agent_process: None,
            created_at: "2026-11-30T00:00:00.000Z".into(),
            started_at: None,
            finished_at: None,
            exit_code: None,
            error: None,
            prompt_path: String::new(),
            log_path: String::new(),
            sweep_id: None,
            chunk: None,
            part_lines: None,
            trigger: None,
            from_start: None,
            mac: None,
            wrote_outside_wiki: None,
            also_changed_during_run: None,
            prompt_sha256: None,
            conversation_sha256: None,
        }
    }

    /// A repo whose one entry waits for `run_1` (and `run_2` behind it), with the given run records.
    fn repo_waiting(records: &[RunRecord]) -> (tempfile::TempDir, RepoState) {
        let dir = tempfile::tempdir().unwrap();
        let runs = runs_dir(dir.path());
        std::fs::create_dir_all(&runs).unwrap();
        for r in records {
            record::write(&runs, r).unwrap();
        }
        let mut e = LedgerEntry::fresh("claude", "s1", "/t/s1.jsonl");
        let c = |id: &str, to: u64| PendingChunk {
            run_id: id.into(),
            to_size: to,
            to_line: to / 10,
            prefix_hash: format!("sha256:{to}"),
            last_record_id: None,
        };
        e.mark_pending(c("run_1", 300), "2026-11-30T00:00:00.000Z");
        e.add_later_chunk(c("run_2", 600));
        let mut ledger = Ledger::default();
        ledger.entries.insert(key("claude", "s1"), e);
        crate::ledger::save(dir.path(), &mut ledger, Utc::now()).unwrap();
        let state = RepoState::load(dir.path(), Utc::now(), true).unwrap();
        (dir, state)
    }

    fn entry(state: &RepoState) -> &LedgerEntry {
        &state.ledger.entries[&key("claude", "s1")]
    }

    #[test]
    fn a_running_run_whose_worker_died_fails_as_worker_lost() {
        let (dir, mut state) = repo_waiting(&[
            run("run_1", RunStatus::Running),
            run("run_2", RunStatus::Queued),
        ]);
        assert!(!state.worker_alive);
        state.reconcile(Utc::now(), Some(&|_| true));
        assert!(state.changed());
        let e = entry(&state);
        assert_eq!(e.status, EntryStatus::Failed);
        assert_eq!((e.attempts, e.last_captured_size), (1, 0));
        let runs = runs_dir(dir.path());
        let r1 = record::read(&runs, "run_1").unwrap();
        assert_eq!(r1.status, RunStatus::Failed);
        assert!(r1
            .error
            .unwrap()
            .starts_with("worker-lost: the worker (pid 4000000)"));
        let r2 = record::read(&runs, "run_2").unwrap();
        assert_eq!(r2.status, RunStatus::Failed, "the later chunk is cancelled");
    }

    #[test]
    fn finished_runs_move_the_cursor_through_every_done_chunk() {
        let mut done = run("run_1", RunStatus::Done);
        done.finished_at = Some("2026-11-30T01:00:00.000Z".into());
        let (_dir, mut state) = repo_waiting(&[done, run("run_2", RunStatus::Queued)]);
        state.reconcile(Utc::now(), Some(&|_| true));
        let e = entry(&state);
        assert_eq!(e.status, EntryStatus::Pending, "the second chunk now waits");
        assert!(e.waits_for("run_2"));
        assert_eq!(e.last_captured_size, 300);
        assert_eq!(
            e.last_captured_at.as_deref(),
            Some("2026-11-30T01:00:00.000Z")
        );
    }

    #[test]
    fn a_failed_run_that_wrote_outside_the_wiki_leaves_its_paths_in_the_entry() {
        let mut failed = run("run_1", RunStatus::Failed);
        failed.error = Some("agent exited with code 1".into());
        failed.wrote_outside_wiki = Some(vec!["src/main.rs".into()]);
        let (_dir, mut state) = repo_waiting(&[failed, run("run_2", RunStatus::Queued)]);
        state.reconcile(Utc::now(), Some(&|_| true));
        let e = entry(&state);
        assert_eq!((e.status, e.attempts), (EntryStatus::Failed, 1));
        let o = e.wrote_outside_wiki.as_ref().expect("kept in the entry");
        assert_eq!(
            (o.run_id.as_str(), o.paths.clone()),
            ("run_1", vec!["src/main.rs".to_string()])
        );
    }

    #[test]
    fn a_dry_reconcile_writes_no_run_record() {
        let (dir, mut state) = repo_waiting(&[run("run_1", RunStatus::Running)]);
        state.reconcile(Utc::now(), None);
        assert_eq!(entry(&state).status, EntryStatus::Failed);
        let r1 = record::read(&runs_dir(dir.path()), "run_1").unwrap();
        assert_eq!(r1.status, RunStatus::Running, "nothing on disk changed");
    }
}
