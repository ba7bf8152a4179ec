//! Phase 4, act: repo by repo, under the repo lock taken again, check that each entry this sweep changes
//! is still as the decide pass found it (another process may have changed it since), queue the planned
//! runs of the unchanged ones (a prompt and a run record each), record them and every other changed entry
//! in the ledger, and start the repo's background worker when runs wait. A dry run only lists what it
//! would start.

use super::decide::RepoDone;
use super::gather::Candidate;
use super::plan::Planned;
use super::range::{Chunk, Range};
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

/// The entries a sweep changes, by repo and ledger key, each with the entry as the sweep found it (None:
/// there was none): applied to each ledger, one at a time, at the end, if the entry is still as found.
#[derive(Default)]
pub struct Updates(BTreeMap<PathBuf, BTreeMap<String, Update>>);

pub struct Update {
    found: Option<LedgerEntry>,
    new: LedgerEntry,
}

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
        let u = repo_updates.entry(k.to_string()).or_insert_with(|| Update {
            found: found.cloned(),
            new: found.cloned().unwrap_or_else(|| {
                LedgerEntry::fresh(&file.app, sid, &file.path.display().to_string())
            }),
        });
        &mut u.new
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
            e.last_record_id = r.copied.as_ref().map(|c| c.last_id.clone());
            if let Some(c) = &r.copied {
                e.skip_copied(c.from, c.bytes);
            }
        } else if r.recovered.is_some() {
            e.recover_cursor(r.from_byte, r.from_line_before, r.hash_at_cursor.clone());
        } else if let Some(c) = &r.copied {
            // A copy's cursor moves past the lines the session it copied captured or queued since.
            let baseline = e.baseline;
            e.place_cursor(
                r.from_byte,
                r.from_line_before,
                r.hash_at_cursor.clone(),
                baseline,
            );
            e.last_record_id = Some(c.last_id.clone());
            e.skip_copied(c.from, c.bytes);
        }
        e
    }
}

/// Runs queued so far, by repo.
pub type Started = BTreeMap<PathBuf, Vec<StartedItem>>;

/// A dry run lists the runs a live sweep would start.
pub fn list_runs(candidates: &[Candidate], planned: Vec<Planned>, summary: &mut Summary) {
    for p in planned {
        for (i, chunk) in p.chunks.iter().enumerate() {
            summary
                .started
                .push(started_item(&candidates[p.idx], &p, chunk, i));
        }
    }
}

/// What the act phase shares across repos.
struct Acting<'a> {
    cx: &'a Context,
    catalog: &'a crate::rules::Catalog,
    candidates: &'a [Candidate],
    opts: &'a SweepOptions,
    sweep_id: String,
    breaker_started: bool,
    /// One wait for the whole phase, as in the decide phase.
    deadline: std::time::Instant,
}

/// Live: repo by repo (one repo lock at a time), applies this sweep's entry updates that still hold,
/// queues their runs and starts the workers. The circuit breaker starts counting for this sweep before
/// its first run is queued.
#[allow(clippy::too_many_arguments)]
pub fn act(
    cx: &Context,
    catalog: &crate::rules::Catalog,
    candidates: &[Candidate],
    repos: &[RepoDone],
    planned: Vec<Planned>,
    mut updates: Updates,
    opts: &SweepOptions,
    summary: &mut Summary,
) {
    let now = opts.settings.now;
    let mut by_repo: BTreeMap<&Path, Vec<Planned>> = BTreeMap::new();
    for p in planned {
        if let Some(repo) = candidates[p.idx].1.repo.as_deref() {
            by_repo.entry(repo).or_default().push(p);
        }
    }
    let mut acting = Acting {
        cx,
        catalog,
        candidates,
        opts,
        sweep_id: format!(
            "sweep_{}_{}",
            now.format("%Y%m%dT%H%M%S%3fZ"),
            crate::util::ids::random_hex(4)
        ),
        breaker_started: false,
        deadline: std::time::Instant::now() + ledger::REPO_LOCK_WAIT,
    };
    for done in repos {
        let plans = by_repo.remove(done.repo.as_path()).unwrap_or_default();
        match updates.0.remove(&done.repo) {
            None if plans.is_empty() => start_waiting(done),
            u => act_repo(&mut acting, done, plans, u.unwrap_or_default(), summary),
        }
    }
}

/// A repo where this sweep changes nothing: its worker is started if runs wait and none is alive.
fn start_waiting(done: &RepoDone) {
    if done.worker_alive || !done.has_pending || ledger::worker_alive(&done.repo) {
        return;
    }
    // The runs waiting were queued by an earlier sweep; if no worker starts now, the next sweep tries.
    if let Err(err) = capture::spawn_worker(&done.repo) {
        eprintln!(
            "almanac: cannot start the background worker in {}: {err}",
            done.repo.display()
        );
    }
}

fn started_item((file, ex): &Candidate, p: &Planned, c: &Chunk, i: usize) -> StartedItem {
    StartedItem {
        app: file.app.to_string(),
        session_id: ex.session_id.as_deref().unwrap_or_default().to_string(),
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
        estimated_tokens: c.tokens(),
        chunk: (p.of > 1).then_some((p.first + i as u32, p.of)),
    }
}

/// Queues the runs of one new part and records them in its entry: the first chunk's run is pending, the
/// later ones wait behind it. A run record that cannot be written fails the entry (first chunk) or
/// leaves the rest to the next sweep.
#[allow(clippy::too_many_arguments)]
fn queue_part(
    cx: &Context,
    render_with: Option<&crate::rules::RuleSet>,
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
    e.follow_file(
        file.path.display().to_string(),
        file.file_id,
        file.mtime_ns(),
    );
    if e.first_record_id.is_none() {
        e.first_record_id = p.ids.first.clone();
    }
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
            // A manual run is none of a sweep's: the circuit breaker does not count it.
            sweep_id: opts.manual.is_none().then_some(sweep_id),
            chunk: chunked.then_some((p.first + i as u32, p.of)),
            part_lines: chunked.then_some(p.part_lines),
            id_base: chunked.then_some(id_base.as_str()),
            manual: opts.manual,
            context: p.context.as_deref().filter(|_| i == 0),
            render_with,
        };
        match capture::queue(&spec, &cx.almanac_home, now) {
            Ok(record) => {
                let pending = PendingChunk {
                    run_id: record.run_id.clone(),
                    to_size: chunk.to,
                    to_line: chunk.to_line,
                    prefix_hash: chunk.hash.clone(),
                    last_record_id: p.ids.last.get(i).cloned().flatten(),
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

/// One repo, under its lock taken again: an entry another process changed since the decide pass (a
/// worker finished a run, `capture reset`, another almanac's sweep queued the transcript) is left as it is
/// now and gets no run (`changed-during-sweep`); the others are applied, their runs queued (the records
/// only now, under the lock, so a worker never sees a run no entry waits for), the ledger saved, and the
/// worker started when runs wait and none is alive.
fn act_repo(
    a: &mut Acting,
    done: &RepoDone,
    plans: Vec<Planned>,
    mut found: BTreeMap<String, Update>,
    summary: &mut Summary,
) {
    let repo = &done.repo;
    let now = a.opts.settings.now;
    let unstarted = |summary: &mut Summary, plans: &[Planned]| {
        for p in plans {
            not_started(summary, p);
        }
    };
    let loaded = super::store::open(repo, a.deadline).and_then(|guard| {
        let state = RepoState::load(repo, now, true)
            .map_err(|e| (Reason::LedgerUnreadable, e.to_string()))?;
        Ok((guard, state))
    });
    let (_guard, mut state) = match loaded {
        Ok(l) => l,
        Err((reason, detail)) => {
            unstarted(summary, &plans);
            let path = ledger::ledger_path(repo);
            summary.attention(SkippedItem::of_store(repo, &path, reason, detail));
            return;
        }
    };
    let mut changed = std::collections::HashSet::new();
    found.retain(|k, u| {
        let same = state.ledger.entries.get(k) == u.found.as_ref();
        if !same {
            changed.insert(k.clone());
        }
        same
    });
    let mut updates = Updates(BTreeMap::from([(repo.clone(), found)]));
    let mut started = Started::new();
    for p in plans {
        let (file, ex) = &a.candidates[p.idx];
        let sid = ex.session_id.as_deref().unwrap_or_default();
        let k = key(&file.app, sid);
        if changed.contains(&k) || state.ledger.entries.get(&k) != p.entry.as_deref() {
            not_started(summary, &p);
            let reason = Reason::ChangedDuringSweep;
            summary.skip_candidate(p.idx, &a.candidates[p.idx], reason, Some(CHANGED.into()));
            continue;
        }
        if !a.breaker_started && a.opts.manual.is_none() {
            a.breaker_started = true;
            let max = a.opts.budget.breaker_failures;
            let home = &a.cx.almanac_home;
            if let Err(e) = crate::capture::breaker::start(home, &a.sweep_id, max) {
                eprintln!("almanac: cannot write the circuit breaker state: {e}");
            }
        }
        let c = &a.candidates[p.idx];
        let rule = a.catalog.get(&c.0.app).filter(|r| r.turns.is_some());
        queue_part(
            a.cx,
            rule,
            c,
            &p,
            a.opts,
            &a.sweep_id,
            &mut updates,
            &mut started,
            summary,
        );
    }
    let new_runs = started.remove(repo).unwrap_or_default();
    let apply = updates.0.remove(repo).unwrap_or_default();
    if !apply.is_empty() {
        state
            .ledger
            .entries
            .extend(apply.into_iter().map(|(k, u)| (k, u.new)));
        if let Err(err) = state.save(now) {
            // No ledger waits for the runs just queued: they never run.
            let ids: Vec<String> = new_runs.iter().map(|s| s.run_id.clone()).collect();
            let why = format!("cancelled: the ledger could not be saved: {err}");
            record::cancel_queued(&ledger::runs_dir(repo), &ids, &why, &policy::iso(now));
            summary.eligible -= new_runs.len().min(summary.eligible as usize) as u64;
            let path = ledger::ledger_path(repo);
            summary.attention(SkippedItem::of_store(
                repo,
                &path,
                Reason::LedgerUnwritable,
                err.to_string(),
            ));
            return;
        }
    }
    // Checked after the runs were queued: a worker that leaves now looks at the queue once more.
    let foreground = a.opts.manual.is_some_and(|m| m.foreground);
    if state.has_pending() && !foreground && !ledger::worker_alive(repo) {
        if let Err(err) = capture::spawn_worker(repo) {
            let msg = format!("cannot start the background worker: {err}");
            fail_started(repo, Some(state), new_runs, &msg, now, summary);
            return;
        }
    }
    summary.started.extend(new_runs);
}

const CHANGED: &str = "its ledger entry changed after this sweep read it (a worker finished a run, \
    `capture reset`, or another almanac's sweep queued it); nothing was started, the next sweep decides again";

/// A planned part whose runs this sweep does not start after all: it leaves the eligible count and the
/// totals.
fn not_started(summary: &mut Summary, p: &Planned) {
    summary.eligible = summary.eligible.saturating_sub(1);
    let t = &mut summary.totals;
    t.runs = t.runs.saturating_sub(p.chunks.len() as u64);
    let bytes: u64 = p.chunks.iter().map(|c| c.to - c.from).sum();
    t.new_bytes = t.new_bytes.saturating_sub(bytes);
    let tokens: u64 = p.chunks.iter().map(Chunk::tokens).sum();
    t.estimated_tokens = t.estimated_tokens.saturating_sub(tokens);
    let turns = p.part.as_ref().map(|s| s.user_turns).unwrap_or(0);
    t.new_turns = t.new_turns.saturating_sub(turns);
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
