//! Phase 4, act: queue the planned runs (a prompt and a run record each), record them and every other
//! changed entry in each repo's ledger, and start one background worker per repo that has runs waiting.
//! A dry run only lists what it would start.

use super::decide::RepoDone;
use super::gather::Candidate;
use super::plan::Planned;
use super::range::{est_tokens, Chunk, Range};
use super::summary::{SkippedItem, StartedItem, Summary};
use super::SweepOptions;
use crate::capture::{self, RunSpec};
use crate::context::Context;
use crate::discover::FoundFile;
use crate::ledger::{self, key, record, LedgerEntry, PendingChunk, RepoState};
use crate::policy;
use crate::reason::Reason;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The entries a sweep changes, by repo and ledger key: applied to each ledger, one at a time, at the end.
#[derive(Default)]
pub struct Updates(BTreeMap<PathBuf, BTreeMap<String, LedgerEntry>>);

impl Updates {
    /// The entry this sweep changes for a transcript: the one it found (or a fresh one), copied once.
    /// Only a repo with a changed entry gets its ledger written.
    pub fn entry(
        &mut self,
        repo: &Path,
        k: &str,
        found: Option<&LedgerEntry>,
        file: &FoundFile,
        sid: &str,
    ) -> &mut LedgerEntry {
        if !self.0.contains_key(repo) {
            self.0.insert(repo.to_path_buf(), BTreeMap::new());
        }
        let repo_updates = self.0.get_mut(repo).expect("inserted above");
        repo_updates.entry(k.to_string()).or_insert_with(|| {
            found.cloned().unwrap_or_else(|| {
                LedgerEntry::fresh(&file.app, sid, &file.path.display().to_string())
            })
        })
    }

    /// The entry a new part is recorded against: the one found, or for a first capture a fresh one whose
    /// cursor is where the range starts (the capture_since baseline, or line 1).
    pub fn entry_for_range(
        &mut self,
        repo: &Path,
        k: &str,
        found: Option<&LedgerEntry>,
        file: &FoundFile,
        sid: &str,
        r: &Range,
    ) -> &mut LedgerEntry {
        let e = self.entry(repo, k, found, file, sid);
        if found.is_none() {
            e.place_cursor(
                r.from_byte,
                r.from_line_before,
                r.hash_at_cursor.clone(),
                r.from_byte > 0,
            );
        }
        e
    }
}

/// Runs queued so far, by repo.
pub type Started = BTreeMap<PathBuf, Vec<StartedItem>>;

/// Queues the planned runs (live) or lists them (dry run). The circuit breaker starts counting for this
/// sweep before its first run is queued.
pub fn queue_runs(
    cx: &Context,
    candidates: &[Candidate],
    planned: Vec<Planned>,
    opts: &SweepOptions,
    updates: &mut Updates,
    summary: &mut Summary,
) -> Started {
    let now = opts.settings.now;
    let sweep_id = format!(
        "sweep_{}_{}",
        now.format("%Y%m%dT%H%M%S%3fZ"),
        crate::util::ids::random_hex(4)
    );
    let mut started = Started::new();
    let mut breaker_started = false;
    for p in planned {
        let c = &candidates[p.idx];
        if opts.dry_run {
            for (i, chunk) in p.chunks.iter().enumerate() {
                summary.started.push(started_item(c, &p, chunk, i));
            }
            continue;
        }
        if !breaker_started {
            breaker_started = true;
            let max = opts.budget.breaker_failures;
            if let Err(e) = crate::capture::breaker::start(&cx.almanac_home, &sweep_id, max) {
                eprintln!("almanac: cannot write the circuit breaker state: {e}");
            }
        }
        queue_part(cx, c, &p, opts, &sweep_id, updates, &mut started, summary);
    }
    started
}

fn started_item((file, ex): &Candidate, p: &Planned, c: &Chunk, i: usize) -> StartedItem {
    StartedItem {
        app: file.app.to_string(),
        session_id: ex.session_id.clone().unwrap_or_default(),
        transcript_path: file.path.display().to_string(),
        repo_root: ex
            .repo
            .as_ref()
            .map(|r| r.display().to_string())
            .unwrap_or_default(),
        run_id: "dry-run".into(),
        from_line: c.from_line_before + 1,
        to_line: c.to_line,
        from_byte: c.from,
        to_byte: c.to,
        new_bytes: c.to - c.from,
        new_turns: p.part.as_ref().map(|s| s.user_turns),
        est_tokens: est_tokens(c.to - c.from),
        chunk: (p.of > 1).then_some((p.first + i as u32, p.of)),
    }
}

/// Queues the runs of one new part and records them in its entry: the first chunk's run is pending, the
/// later ones wait behind it. A run record that cannot be written fails the entry (first chunk) or
/// leaves the rest to the next sweep.
#[allow(clippy::too_many_arguments)]
fn queue_part(
    cx: &Context,
    c: &Candidate,
    p: &Planned,
    opts: &SweepOptions,
    sweep_id: &str,
    updates: &mut Updates,
    started: &mut Started,
    summary: &mut Summary,
) {
    let (file, ex) = c;
    let (Some(repo), Some(sid)) = (ex.repo.as_deref(), ex.session_id.as_deref()) else {
        return;
    };
    let now = opts.settings.now;
    let k = key(&file.app, sid);
    let e = updates.entry_for_range(repo, &k, p.entry.as_deref(), file, sid, &p.r);
    e.follow_file(file.path.display().to_string(), file.file_id);
    let id_base = crate::util::ids::run_id(now);
    let chunked = p.of > 1;
    for (i, chunk) in p.chunks.iter().enumerate() {
        let spec = RunSpec {
            repo,
            app: &file.app,
            session_id: sid,
            transcript: &file.path,
            from_line: chunk.from_line_before + 1,
            to_line: chunk.to_line,
            from_byte: chunk.from,
            to_byte: chunk.to,
            prefix_hash: &chunk.hash,
            agent: &opts.agent,
            summary: p.summaries.get(i).and_then(Option::as_ref),
            sweep_id: Some(sweep_id),
            chunk: chunked.then_some((p.first + i as u32, p.of)),
            part_lines: chunked.then_some(p.part_lines),
            id_base: chunked.then_some(id_base.as_str()),
        };
        match capture::queue(&spec, &cx.almanac_home, now) {
            Ok(record) => {
                let pending = PendingChunk {
                    run_id: record.run_id.clone(),
                    to_size: chunk.to,
                    to_line: chunk.to_line,
                    prefix_hash: chunk.hash.clone(),
                };
                match i {
                    0 => e.mark_pending(pending, &policy::iso(now)),
                    _ => e.add_later_chunk(pending),
                }
                let mut item = started_item(c, p, chunk, i);
                item.run_id = record.run_id;
                started.entry(repo.to_path_buf()).or_default().push(item);
            }
            Err(err) => {
                if i == 0 {
                    let msg = format!("cannot write the run record: {err}");
                    e.fail_to_start(&msg);
                    summary.eligible -= 1;
                    summary.attention(SkippedItem::of(
                        file,
                        ex,
                        Reason::CaptureStartFailed,
                        Some(msg),
                    ));
                }
                // Later chunks that could not be queued are captured by the next sweep.
                break;
            }
        }
    }
}

/// Applies each repo's changed entries to its ledger (the ledger first: a worker only runs what the
/// ledger waits for), then starts the repo's worker when runs wait and none is alive.
pub fn save_and_start(
    repos: &[RepoDone],
    mut updates: Updates,
    mut started: Started,
    now: DateTime<Utc>,
    summary: &mut Summary,
) {
    for done in repos {
        let repo = &done.repo;
        let new_runs = started.remove(repo).unwrap_or_default();
        // Read again (this sweep holds the repo lock, so it is as the repo's pass left it) and dropped
        // when done.
        let mut loaded = None;
        if let Some(u) = updates.0.remove(repo) {
            let saved = RepoState::load(repo, now, true).and_then(|mut state| {
                state.ledger.entries.extend(u);
                state.save(now)?;
                Ok(state)
            });
            match saved {
                Ok(state) => loaded = Some(state),
                Err(err) => {
                    summary.attention(SkippedItem::of_store(
                        repo,
                        &ledger::ledger_path(repo),
                        Reason::LedgerUnwritable,
                        err.to_string(),
                    ));
                    continue;
                }
            }
        }
        let has_pending = done.has_pending || loaded.as_ref().is_some_and(|s| s.has_pending());
        if !done.worker_alive && has_pending {
            if let Err(err) = capture::spawn_worker(repo) {
                let msg = format!("cannot start the background worker: {err}");
                fail_started(repo, loaded, new_runs, &msg, now, summary);
                continue;
            }
        }
        summary.started.extend(new_runs);
    }
}

/// The worker could not start: the runs this sweep queued fail (record and entry), and are reported.
fn fail_started(
    repo: &Path,
    loaded: Option<RepoState>,
    runs: Vec<StartedItem>,
    msg: &str,
    now: DateTime<Utc>,
    summary: &mut Summary,
) {
    let runs_dir = ledger::runs_dir(repo);
    let mut state = match loaded {
        Some(s) => Ok(s),
        None => RepoState::load(repo, now, true),
    };
    for s in runs {
        if let Some(mut r) = record::read(&runs_dir, &s.run_id) {
            r.fail(msg, &policy::iso(now));
            let _ = record::write(&runs_dir, &r);
        }
        if let Ok(state) = &mut state {
            if let Some(e) = state.ledger.entries.get_mut(&key(&s.app, &s.session_id)) {
                e.fail(&s.run_id, msg);
            }
        }
        summary.eligible -= 1;
        summary.attention(SkippedItem {
            app: s.app,
            session_id: Some(s.session_id),
            transcript_path: s.transcript_path,
            repo_root: Some(s.repo_root),
            reason: Reason::CaptureStartFailed,
            detail: Some(msg.to_string()),
        });
    }
    if let Ok(state) = &mut state {
        let _ = state.save(now);
    }
}
