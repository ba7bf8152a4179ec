//! `capture sweep`: gather facts (discover, ledgers, run records), ask the policy, act. A dry run reports
//! and writes nothing; a live sweep queues capture runs, records them in each repo's ledger, and starts at
//! most one background worker per repo.

use crate::capture::run::{RunRecord, RunStatus};
use crate::capture::{self, RunSpec};
use crate::context::Context;
use crate::discover::head::HeadScan;
use crate::discover::repo::RepoMapper;
use crate::discover::{self, FoundFile, WalkStats};
use crate::ledger::{self, cursor, key, EntryStatus, Ledger, LedgerEntry};
use crate::policy::{self, Decision, Facts, Settings, Step};
use crate::rules::{Catalog, RuleSet};
use crate::util::lock::FileLock;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub struct SweepOptions {
    pub apps: Vec<String>,
    pub settings: Settings,
    pub dry_run: bool,
    /// The agent new runs use (`[capture] agent`).
    pub agent: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartedItem {
    pub app: String,
    pub session_id: String,
    pub transcript_path: String,
    pub repo_root: String,
    pub run_id: String,
    pub from_line: u64,
    pub to_line: u64,
    pub from_byte: u64,
    pub to_byte: u64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedItem {
    pub app: String,
    pub session_id: Option<String>,
    pub transcript_path: String,
    pub repo_root: Option<String>,
    /// A stable kebab-case reason code.
    pub reason: String,
    /// Words for a person: what exactly went wrong, or what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub files_visited: u64,
    pub bytes_read: u64,
    pub elapsed_ms: u64,
    pub unreadable: u64,
    pub duplicates: u64,
    pub subagents: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub scanned: u64,
    pub eligible: u64,
    pub dry_run: bool,
    pub capture_since: Option<String>,
    pub started: Vec<StartedItem>,
    pub skipped: Vec<SkippedItem>,
    pub needs_attention: Vec<SkippedItem>,
    pub counts: BTreeMap<String, u64>,
    pub stats: Stats,
}

impl Summary {
    fn skip(&mut self, item: SkippedItem) {
        *self.counts.entry(item.reason.clone()).or_default() += 1;
        self.skipped.push(item);
    }

    fn attention(&mut self, item: SkippedItem) {
        *self.counts.entry(item.reason.clone()).or_default() += 1;
        self.needs_attention.push(item);
    }
}

/// What discovery learnt about one transcript; shared by the sweep and `rules explain`.
pub struct Examined {
    pub head: Result<HeadScan, String>,
    pub session_id: Option<String>,
    pub cwd: Option<String>,
    pub repo: Option<PathBuf>,
    pub subagent: bool,
}

pub fn examine(rule: &RuleSet, file: &FoundFile, mapper: &mut RepoMapper) -> Examined {
    let head = discover::read_head(rule, file).map_err(|e| e.to_string());
    let (session_id, cwd, subagent) = match &head {
        Ok(scan) => (
            scan.get("session_id").map(str::to_string),
            scan.get("cwd").map(str::to_string),
            scan.subagent.is_some(),
        ),
        Err(_) => (None, None, false),
    };
    let repo = cwd.as_deref().and_then(|c| mapper.map(c));
    Examined {
        head,
        session_id,
        cwd,
        repo,
        subagent,
    }
}

/// A repo's ledger and run records as one sweep sees them.
pub struct RepoState {
    pub repo: PathBuf,
    pub ledger: Ledger,
    pub corrupt: Option<ledger::Corrupt>,
    pub runs: Vec<RunRecord>,
    pub worker_alive: bool,
}

impl RepoState {
    /// Reads the repo's ledger and runs. `live` renames a corrupt ledger aside; a dry run only reports it.
    pub fn load(repo: &Path, now: DateTime<Utc>, live: bool) -> std::io::Result<RepoState> {
        let runs_dir = ledger::runs_dir(repo);
        if live {
            crate::util::atomic::remove_stale_temps(&runs_dir);
        }
        let loaded = ledger::load(repo, now, live)?;
        Ok(RepoState {
            repo: repo.to_path_buf(),
            ledger: loaded.ledger,
            corrupt: loaded.corrupt,
            runs: crate::capture::run::list(&runs_dir),
            worker_alive: FileLock::is_held(&crate::capture::worker::worker_lock_path(repo)),
        })
    }

    /// Brings ledger entries and run records into agreement before any decision: finished runs move or
    /// fail their entry's cursor (the worker may have died between the two writes); a `running` run with
    /// no live worker failed (`worker-lost`); a queued run that no entry waits for is an orphan. Returns
    /// the run records it changed (a live sweep writes them).
    pub fn reconcile(&mut self, now: DateTime<Utc>) -> Vec<RunRecord> {
        let mut changed = Vec::new();
        let waited: HashSet<String> = self
            .ledger
            .entries
            .values()
            .filter_map(|e| e.pending_run_id.clone())
            .collect();
        for r in &mut self.runs {
            let lost = r.status == RunStatus::Running && !self.worker_alive;
            let orphan = matches!(r.status, RunStatus::Queued | RunStatus::Running)
                && !waited.contains(&r.run_id);
            if lost || orphan {
                r.status = RunStatus::Failed;
                r.finished_at = Some(policy::iso(now));
                r.error = Some(if orphan {
                    "orphaned: no ledger entry waits for this run (a sweep ended before recording it)".into()
                } else {
                    format!(
                        "worker-lost: the worker (pid {}) ended before the run finished",
                        r.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
                    )
                });
                changed.push(r.clone());
            }
        }
        for entry in self.ledger.entries.values_mut() {
            if entry.status != EntryStatus::Pending {
                continue;
            }
            let Some(run_id) = entry.pending_run_id.clone() else {
                entry.status = EntryStatus::Done;
                continue;
            };
            match self.runs.iter().find(|r| r.run_id == run_id) {
                None => entry.fail(&run_id, "the run record is missing"),
                Some(r) if r.status == RunStatus::Done => entry.complete(
                    &run_id,
                    r.finished_at.as_deref().unwrap_or(&policy::iso(now)),
                ),
                Some(r) if r.status == RunStatus::Failed => {
                    entry.fail(&run_id, r.error.as_deref().unwrap_or("the run failed"))
                }
                Some(_) => {}
            }
        }
        changed
    }

    pub fn has_queued(&self) -> bool {
        self.runs.iter().any(|r| r.status == RunStatus::Queued)
    }
}

/// Session ids of almanac's own agents, from the run records of every repo involved.
fn internal_sessions(states: &BTreeMap<PathBuf, RepoState>) -> HashSet<String> {
    states
        .values()
        .flat_map(|s| s.runs.iter())
        .filter_map(|r| r.agent_session_id.clone())
        .collect()
}

fn item(file: &FoundFile, ex: &Examined, reason: &str, detail: Option<String>) -> SkippedItem {
    SkippedItem {
        app: file.app.clone(),
        session_id: ex.session_id.clone(),
        transcript_path: file.path.display().to_string(),
        repo_root: ex.repo.as_ref().map(|r| r.display().to_string()),
        reason: reason.to_string(),
        detail,
    }
}

/// The policy's facts for one transcript, given its ledger entry.
pub fn facts<'a>(
    rule: &'a RuleSet,
    file: &FoundFile,
    ex: &'a Examined,
    entry: Option<&LedgerEntry>,
    internal: &HashSet<String>,
) -> Facts<'a> {
    Facts {
        app: &rule.id,
        session_id: ex.session_id.as_deref(),
        cwd: ex.cwd.as_deref(),
        repo: ex.repo.as_deref(),
        excluded_by: ex
            .head
            .as_ref()
            .ok()
            .and_then(|h| h.excluded.as_ref())
            .map(|v| v.reason.as_str()),
        mtime: DateTime::<Utc>::from(file.mtime),
        size: file.size,
        captured_bytes: entry.map(|e| e.last_captured_size).unwrap_or(0),
        same_file: entry.is_none_or(|e| {
            e.path == file.path.display().to_string() && e.file_id == Some(file.file_id)
        }),
        internal: ex.session_id.as_ref().is_some_and(|s| internal.contains(s)),
        pending: entry.is_some_and(|e| e.status == EntryStatus::Pending),
        failed_attempts: entry
            .filter(|e| e.status == EntryStatus::Failed)
            .map(|e| e.attempts)
            .unwrap_or(0),
        new_user_turns: None,
    }
}

/// Evaluates the policy for `rules explain`, with the repo's ledger read (never written).
pub fn explain_decision(
    catalog: &Catalog,
    rule: &RuleSet,
    file: &FoundFile,
    ex: &Examined,
    settings: &Settings,
    now: DateTime<Utc>,
) -> (Decision, Vec<Step>) {
    let state = ex
        .repo
        .as_ref()
        .and_then(|r| RepoState::load(r, now, false).ok());
    let mut states = BTreeMap::new();
    if let Some(s) = state {
        states.insert(s.repo.clone(), s);
    }
    let internal = internal_sessions(&states);
    let entry = match (&ex.repo, &ex.session_id) {
        (Some(r), Some(sid)) => states
            .get(r)
            .and_then(|s| s.ledger.entries.get(&key(&rule.id, sid))),
        _ => None,
    };
    policy::decide(
        &catalog.policy,
        &facts(rule, file, ex, entry, &internal),
        settings,
    )
}

pub fn run(catalog: &Catalog, cx: &Context, opts: &SweepOptions) -> Summary {
    let started_at = Instant::now();
    let live = !opts.dry_run;
    let now = opts.settings.now;
    let mut walk = WalkStats::default();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for id in &opts.apps {
        if let Some(rule) = catalog.get(id) {
            discover::walk_rule_set(rule, cx, &mut seen, &mut walk, &mut files);
        }
    }
    files.sort_by(|a, b| (&a.app, &a.path).cmp(&(&b.app, &b.path)));

    let mut summary = Summary {
        scanned: 0,
        eligible: 0,
        dry_run: opts.dry_run,
        capture_since: opts.settings.capture_since.map(policy::iso),
        started: Vec::new(),
        skipped: Vec::new(),
        needs_attention: Vec::new(),
        counts: BTreeMap::new(),
        stats: Stats {
            files_visited: walk.files_visited,
            unreadable: walk.unreadable,
            duplicates: walk.duplicates,
            ..Stats::default()
        },
    };

    // Gather: heads, ids, repos.
    let mut mapper = RepoMapper::new(&cx.almanac_home);
    let mut candidates: Vec<(FoundFile, Examined)> = Vec::new();
    for file in files {
        let rule = catalog.get(&file.app).expect("walked apps exist");
        let ex = examine(rule, &file, &mut mapper);
        match &ex.head {
            Ok(h) => summary.stats.bytes_read += h.bytes_read,
            Err(e) => {
                summary.scanned += 1;
                summary.attention(item(&file, &ex, "read-failed", Some(e.clone())));
                continue;
            }
        }
        if ex.subagent {
            summary.stats.subagents += 1;
            *summary.counts.entry("subagent".into()).or_default() += 1;
            continue;
        }
        summary.scanned += 1;
        candidates.push((file, ex));
    }

    // Ledgers and run records of every repo involved, reconciled before any decision.
    let mut states: BTreeMap<PathBuf, RepoState> = BTreeMap::new();
    let mut guards = Vec::new();
    let repos: Vec<PathBuf> = candidates
        .iter()
        .filter_map(|(_, ex)| ex.repo.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for repo in repos {
        if live {
            match crate::util::atomic::ensure_private_dir(&ledger::runs_dir(&repo))
                .and_then(|_| ledger::lock_repo(&repo))
            {
                Ok(g) => guards.push(g),
                Err(e) => {
                    summary.attention(SkippedItem {
                        app: "almanac".into(),
                        session_id: None,
                        transcript_path: ledger::ledger_path(&repo).display().to_string(),
                        repo_root: Some(repo.display().to_string()),
                        reason: "ledger-unwritable".into(),
                        detail: Some(format!(
                            "cannot lock {}: {e}",
                            ledger::runs_dir(&repo).display()
                        )),
                    });
                    continue;
                }
            }
        }
        match RepoState::load(&repo, now, live) {
            Ok(mut state) => {
                if let Some(c) = &state.corrupt {
                    summary.attention(SkippedItem {
                        app: "almanac".into(),
                        session_id: None,
                        transcript_path: c.moved_to.display().to_string(),
                        repo_root: Some(repo.display().to_string()),
                        reason: "ledger-corrupt".into(),
                        detail: Some(format!(
                            "{} did not parse ({}); {} it and started a fresh ledger",
                            ledger::ledger_path(&repo).display(),
                            c.error,
                            if live {
                                "moved"
                            } else {
                                "a live sweep would move"
                            }
                        )),
                    });
                }
                let changed = state.reconcile(now);
                if live {
                    for r in &changed {
                        let _ = crate::capture::run::write(&ledger::runs_dir(&repo), r);
                    }
                }
                states.insert(repo, state);
            }
            Err(e) => summary.attention(SkippedItem {
                app: "almanac".into(),
                session_id: None,
                transcript_path: ledger::ledger_path(&repo).display().to_string(),
                repo_root: Some(repo.display().to_string()),
                reason: "ledger-unreadable".into(),
                detail: Some(e.to_string()),
            }),
        }
    }
    let internal = internal_sessions(&states);

    // Several files with one session id in one repo (a Codex rollout copied to archived_sessions/): the
    // one the cursor was set on wins, else the most recently modified.
    let mut chosen: BTreeMap<(PathBuf, String), usize> = BTreeMap::new();
    for (i, (file, ex)) in candidates.iter().enumerate() {
        let (Some(repo), Some(sid)) = (&ex.repo, &ex.session_id) else {
            continue;
        };
        let k = (repo.clone(), key(&file.app, sid));
        let entry_path = states
            .get(repo)
            .and_then(|s| s.ledger.entries.get(&k.1))
            .map(|e| e.path.clone());
        let better = |a: &FoundFile, b: &FoundFile| {
            let on_cursor =
                |f: &FoundFile| entry_path.as_deref() == Some(f.path.to_str().unwrap_or(""));
            (on_cursor(a), a.mtime) > (on_cursor(b), b.mtime)
        };
        match chosen.get(&k) {
            Some(&j) if !better(file, &candidates[j].0) => {}
            _ => {
                chosen.insert(k, i);
            }
        }
    }

    // Decide and act, repo by repo.
    let mut started_by_repo: BTreeMap<PathBuf, Vec<StartedItem>> = BTreeMap::new();
    for (i, (file, ex)) in candidates.iter().enumerate() {
        let rule = catalog.get(&file.app).expect("walked apps exist");
        if let (Some(repo), Some(sid)) = (&ex.repo, &ex.session_id) {
            if chosen.get(&(repo.clone(), key(&file.app, sid))) != Some(&i) {
                summary.skip(item(
                    file,
                    ex,
                    "duplicate-session",
                    Some("another file holds the same session; that one is captured".into()),
                ));
                continue;
            }
        }
        let state = ex.repo.as_ref().and_then(|r| states.get_mut(r));
        if ex.repo.is_some() && state.is_none() {
            continue; // the repo's ledger could not be read or locked; reported above
        }
        let entry = match (&state, &ex.session_id) {
            (Some(s), Some(sid)) => s.ledger.entries.get(&key(&file.app, sid)).cloned(),
            _ => None,
        };
        let base_facts = facts(rule, file, ex, entry.as_ref(), &internal);
        let (decision, steps) = policy::decide(&catalog.policy, &base_facts, &opts.settings);
        if let Decision::Skip(code) = decision {
            let detail = steps
                .iter()
                .find(|s| s.check == code)
                .map(|s| s.detail.clone());
            let attention = catalog
                .policy
                .checks
                .iter()
                .any(|c| c.kind.code() == code && c.kind.needs_attention());
            if attention {
                summary.attention(item(file, ex, code, detail));
            } else {
                summary.skip(item(file, ex, code, detail));
            }
            continue;
        }
        let (Some(state), Some(sid)) = (state, ex.session_id.as_deref()) else {
            continue; // the policy always skips these (no-almanac-repo and no-session-id cannot be disabled)
        };
        let outcome = decide_range(
            rule,
            file,
            entry.as_ref(),
            &opts.settings,
            &mut summary.stats.bytes_read,
        );
        let k = key(&file.app, sid);
        let path_text = file.path.display().to_string();
        let r = match outcome {
            Err(e) => {
                summary.attention(item(file, ex, "read-failed", Some(e)));
                continue;
            }
            Ok(RangeOutcome::PrefixMismatch(detail)) => {
                if let Some(e) = state.ledger.entries.get_mut(&k) {
                    e.status = EntryStatus::NeedsAttention;
                    e.attention = Some("prefix-mismatch".into());
                    e.last_error = Some(detail.clone());
                }
                summary.attention(item(file, ex, "prefix-mismatch", Some(detail)));
                continue;
            }
            Ok(RangeOutcome::Unchanged { baseline }) => {
                // Remember where the file stands so the next sweep need not read it again.
                let e = state
                    .ledger
                    .entries
                    .entry(k.clone())
                    .or_insert_with(|| LedgerEntry::fresh(&file.app, sid, &path_text));
                if let Some(b) = baseline {
                    e.last_captured_size = b.bytes;
                    e.last_captured_line = b.lines;
                    e.last_captured_prefix_hash = b.hash;
                    e.baseline = true;
                }
                verified(e, file);
                summary.skip(item(
                    file,
                    ex,
                    "unchanged",
                    Some("no complete new line since the captured cursor".into()),
                ));
                continue;
            }
            Ok(RangeOutcome::Capture(r)) => r,
        };
        // Now that the new part is known, read its turns and ask the policy again (no-new-turns).
        let part = match new_part_turns(rule, file, &r, &mut summary.stats.bytes_read) {
            Ok(p) => p,
            Err(e) => {
                summary.attention(item(file, ex, "read-failed", Some(e)));
                continue;
            }
        };
        if let Some(p) = &part {
            let mut f = base_facts.clone();
            f.new_user_turns = Some(p.user_turns);
            let (decision, steps) = policy::decide(&catalog.policy, &f, &opts.settings);
            if let Decision::Skip(code) = decision {
                let detail = steps
                    .iter()
                    .find(|s| s.check == code)
                    .map(|s| s.detail.clone());
                summary.skip(item(file, ex, code, detail));
                continue;
            }
        }
        summary.eligible += 1;
        let repo = state.repo.clone();
        let mut started = StartedItem {
            app: file.app.clone(),
            session_id: sid.to_string(),
            transcript_path: path_text.clone(),
            repo_root: repo.display().to_string(),
            run_id: "dry-run".into(),
            from_line: r_from_line(&r),
            to_line: r.to_line,
            from_byte: r.from_byte,
            to_byte: r.to_byte,
        };
        if live {
            let spec = RunSpec {
                repo: &repo,
                app: &file.app,
                session_id: sid,
                transcript: &file.path,
                from_line: started.from_line,
                to_line: r.to_line,
                from_byte: r.from_byte,
                to_byte: r.to_byte,
                prefix_hash: &r.hash_at_end,
                agent: &opts.agent,
                summary: part.as_ref(),
            };
            let e = state
                .ledger
                .entries
                .entry(k.clone())
                .or_insert_with(|| LedgerEntry::fresh(&file.app, sid, &path_text));
            if entry.is_none() {
                // A first capture starts at the capture_since baseline (or line 1).
                e.last_captured_size = r.from_byte;
                e.last_captured_line = r.from_line_before;
                e.last_captured_prefix_hash = r.hash_at_cursor.clone();
                e.baseline = r.from_byte > 0;
            }
            verified(e, file);
            match capture::queue(&spec, &cx.almanac_home, now) {
                Ok(record) => {
                    e.status = EntryStatus::Pending;
                    e.pending_run_id = Some(record.run_id.clone());
                    e.pending_to_size = Some(r.to_byte);
                    e.pending_to_line = Some(r.to_line);
                    e.pending_prefix_hash = Some(r.hash_at_end.clone());
                    e.pending_started_at = Some(policy::iso(now));
                    e.last_run_id = Some(record.run_id.clone());
                    started.run_id = record.run_id.clone();
                    state.runs.push(record);
                    started_by_repo.entry(repo).or_default().push(started);
                }
                Err(err) => {
                    let msg = format!("cannot write the run record: {err}");
                    e.status = EntryStatus::Failed;
                    e.attempts += 1;
                    e.last_error = Some(msg.clone());
                    summary.eligible -= 1;
                    summary.attention(item(file, ex, "capture-start-failed", Some(msg)));
                }
            }
        } else {
            summary.started.push(started);
        }
    }

    if live {
        for (repo, state) in &mut states {
            let mut new_runs = started_by_repo.remove(repo).unwrap_or_default();
            if !state.worker_alive && state.has_queued() {
                if let Err(err) = capture::spawn_worker(repo) {
                    let msg = format!("cannot start the background worker: {err}");
                    for s in new_runs.drain(..) {
                        if let Some(r) = state.runs.iter_mut().find(|r| r.run_id == s.run_id) {
                            r.status = RunStatus::Failed;
                            r.error = Some(msg.clone());
                            r.finished_at = Some(policy::iso(now));
                            let _ = crate::capture::run::write(&ledger::runs_dir(repo), r);
                        }
                        if let Some(e) = state.ledger.entries.get_mut(&key(&s.app, &s.session_id)) {
                            e.fail(&s.run_id, &msg);
                        }
                        summary.eligible -= 1;
                        summary.attention(SkippedItem {
                            app: s.app,
                            session_id: Some(s.session_id),
                            transcript_path: s.transcript_path,
                            repo_root: Some(s.repo_root),
                            reason: "capture-start-failed".into(),
                            detail: Some(msg.clone()),
                        });
                    }
                }
            }
            summary.started.extend(new_runs);
            if let Err(err) = ledger::save(repo, &mut state.ledger, now) {
                summary.attention(SkippedItem {
                    app: "almanac".into(),
                    session_id: None,
                    transcript_path: ledger::ledger_path(repo).display().to_string(),
                    repo_root: Some(repo.display().to_string()),
                    reason: "ledger-unwritable".into(),
                    detail: Some(err.to_string()),
                });
            }
        }
    }
    drop(guards);
    summary
        .started
        .sort_by(|a, b| (&a.app, &a.transcript_path).cmp(&(&b.app, &b.transcript_path)));
    summary
        .skipped
        .sort_by(|a, b| (&a.app, &a.transcript_path).cmp(&(&b.app, &b.transcript_path)));
    summary
        .needs_attention
        .sort_by(|a, b| (&a.app, &a.transcript_path).cmp(&(&b.app, &b.transcript_path)));
    summary.stats.elapsed_ms = started_at.elapsed().as_millis() as u64;
    summary
}

/// The turns of the uncaptured part, summarised; None when the rule set has no turns section.
fn new_part_turns(
    rule: &RuleSet,
    file: &FoundFile,
    r: &Range,
    bytes_read: &mut u64,
) -> Result<Option<crate::turns::PartSummary>, String> {
    use std::io::{Read, Seek, SeekFrom};
    let Some(turn_rules) = &rule.turns else {
        return Ok(None);
    };
    let mut f = discover::open_transcript(&file.path).map_err(|e| e.to_string())?;
    f.seek(SeekFrom::Start(r.from_byte))
        .map_err(|e| e.to_string())?;
    let part = f.take(r.to_byte - r.from_byte);
    let t = crate::turns::extract(
        rule,
        turn_rules,
        part,
        r.from_line_before + 1,
        0,
        &crate::turns::Options::default(),
    )
    .map_err(|e| e.to_string())?;
    *bytes_read += t.bytes_read;
    Ok(Some(crate::turns::summarize(&t)))
}

fn r_from_line(r: &Range) -> u64 {
    r.from_line_before + 1
}

/// The entry now describes this file: path and identity follow a moved or verified transcript.
fn verified(e: &mut LedgerEntry, file: &FoundFile) {
    e.path = file.path.display().to_string();
    e.file_id = Some(file.file_id);
    if e.status == EntryStatus::NeedsAttention && e.attention.as_deref() == Some("prefix-mismatch")
    {
        // The prefix matches again: back to normal.
        e.status = EntryStatus::Done;
        e.attention = None;
        e.last_error = None;
    }
}

pub struct BaselineCursor {
    pub bytes: u64,
    pub lines: u64,
    pub hash: String,
}

/// The uncaptured range of an eligible transcript.
pub struct Range {
    /// Lines already captured (the new range starts at the next one).
    pub from_line_before: u64,
    pub to_line: u64,
    pub from_byte: u64,
    pub to_byte: u64,
    pub hash_at_cursor: String,
    pub hash_at_end: String,
}

pub enum RangeOutcome {
    Capture(Range),
    Unchanged { baseline: Option<BaselineCursor> },
    PrefixMismatch(String),
}

/// Reads the transcript once: verifies the captured prefix (or places a first-seen transcript at its
/// `capture_since` baseline), then finds the complete lines after the cursor.
pub fn decide_range(
    rule: &RuleSet,
    file: &FoundFile,
    entry: Option<&LedgerEntry>,
    settings: &Settings,
    bytes_read: &mut u64,
) -> Result<RangeOutcome, String> {
    let open = || discover::open_transcript(&file.path).map_err(|e| e.to_string());
    let (cursor_bytes, cursor_lines, baseline) = match (entry, settings.capture_since) {
        (Some(e), _) => {
            if file.size < e.last_captured_size {
                return Ok(RangeOutcome::PrefixMismatch(format!(
                    "the transcript is {} bytes, shorter than the {} already captured: it was truncated or replaced; `almanac capture reset {}` starts over",
                    file.size,
                    e.last_captured_size,
                    file.path.display()
                )));
            }
            (e.last_captured_size, e.last_captured_line, false)
        }
        (None, Some(since)) => {
            let b = cursor::baseline(open()?, since, |v| rule.record_time(v))
                .map_err(|e| e.to_string())?;
            *bytes_read += b.bytes_read;
            (b.bytes, b.lines, true)
        }
        (None, None) => (0, 0, false),
    };
    let scan = cursor::scan(open()?, cursor_bytes).map_err(|e| e.to_string())?;
    *bytes_read += scan.bytes_read;
    let Some(hash_at_cursor) = scan.hash_at_cursor.clone() else {
        return Ok(RangeOutcome::PrefixMismatch(format!(
            "the transcript became shorter than the captured {cursor_bytes} bytes while being read"
        )));
    };
    if let Some(e) = entry {
        if hash_at_cursor != e.last_captured_prefix_hash {
            return Ok(RangeOutcome::PrefixMismatch(format!(
                "the first {} bytes changed since they were captured (rewritten or replaced); `almanac capture reset {}` starts over",
                e.last_captured_size,
                file.path.display()
            )));
        }
    }
    if scan.complete_end <= cursor_bytes {
        return Ok(RangeOutcome::Unchanged {
            baseline: baseline.then(|| BaselineCursor {
                bytes: cursor_bytes,
                lines: cursor_lines,
                hash: hash_at_cursor.clone(),
            }),
        });
    }
    Ok(RangeOutcome::Capture(Range {
        from_line_before: cursor_lines,
        to_line: cursor_lines + scan.new_lines,
        from_byte: cursor_bytes,
        to_byte: scan.complete_end,
        hash_at_cursor,
        hash_at_end: scan.hash_at_end,
    }))
}

/// `$ALMANAC_HOME/state/last-sweep.json`, for `automation status` and `doctor`.
pub fn write_last_sweep(cx: &Context, summary: &Summary, exit: i32) -> std::io::Result<()> {
    let v = serde_json::json!({
        "finishedAt": policy::iso(Utc::now()),
        "startedAt": policy::iso(cx.now),
        "durationMs": summary.stats.elapsed_ms,
        "exit": exit,
        "scanned": summary.scanned,
        "eligible": summary.eligible,
        "started": summary.started.len(),
        "skipped": summary.skipped.len(),
        "needsAttention": summary.needs_attention.len(),
        "counts": summary.counts,
    });
    crate::util::atomic::write_json_atomic(
        &cx.almanac_home.join("state").join("last-sweep.json"),
        &v,
    )
}
