//! `capture sweep`: gather facts (discover, ledgers, run records), ask the policy, act. A dry run reports
//! and writes nothing; a live sweep queues capture runs, records them in each repo's ledger, and starts at
//! most one background worker per repo.

pub mod setup;

use crate::capture::run::{RunRecord, RunStatus};
use crate::capture::{self, RunSpec};
use crate::context::Context;
use crate::discover::head::HeadScan;
use crate::discover::repo::RepoMapper;
use crate::discover::{self, cache, FoundFile, WalkStats};
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
    pub budget: crate::config::Budget,
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
    /// Bytes of the range, user turns in what this sweep starts of the new part (all its chunks that fit
    /// the budget), and the estimated tokens of the range.
    pub new_bytes: u64,
    pub new_turns: Option<u64>,
    pub est_tokens: u64,
    /// (this chunk, chunks) when the new part is captured in several runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk: Option<(u32, u32)>,
}

/// What the started runs will read, summed.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub runs: u64,
    pub new_bytes: u64,
    pub new_turns: u64,
    pub est_tokens: u64,
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
    pub totals: Totals,
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

/// What discovery learnt about one transcript; shared by the sweep and the commands that explain one.
pub struct Examined {
    /// The full head scan when the head was read now (None when it came from the discovery cache).
    pub scan: Option<Box<HeadScan>>,
    /// Why the head could not be read.
    pub error: Option<String>,
    pub session_id: Option<String>,
    pub cwd: Option<String>,
    pub repo: Option<PathBuf>,
    pub subagent: bool,
    /// The exclude_when test that held, if any.
    pub excluded: Option<String>,
}

impl Examined {
    fn from_head(scan: Result<HeadScan, String>) -> Examined {
        match scan {
            Ok(h) => Examined {
                session_id: h.get("session_id").map(str::to_string),
                cwd: h.get("cwd").map(str::to_string),
                subagent: h.subagent.is_some(),
                excluded: h.excluded.as_ref().map(|v| v.reason.clone()),
                scan: Some(Box::new(h)),
                error: None,
                repo: None,
            },
            Err(e) => Examined {
                scan: None,
                error: Some(e),
                session_id: None,
                cwd: None,
                repo: None,
                subagent: false,
                excluded: None,
            },
        }
    }

    fn from_cache(c: &cache::Cached) -> Examined {
        Examined {
            scan: None,
            error: None,
            session_id: c.session_id.clone(),
            cwd: c.cwd.clone(),
            repo: None,
            subagent: c.subagent,
            excluded: c.excluded.clone(),
        }
    }
}

/// Reads one transcript's head and maps its repo.
pub fn examine(rule: &RuleSet, file: &FoundFile, mapper: &mut RepoMapper) -> Examined {
    let mut ex = Examined::from_head(discover::read_head(rule, file).map_err(|e| e.to_string()));
    ex.repo = ex.cwd.as_deref().and_then(|c| mapper.map(c));
    ex
}

/// A repo's ledger (and the run records of its pending entries) as one sweep sees them.
pub struct RepoState {
    pub repo: PathBuf,
    pub ledger: Ledger,
    /// Set when anything in the ledger may have changed: an unchanged ledger is not rewritten.
    pub dirty: bool,
    pub corrupt: Option<ledger::Corrupt>,
    pub worker_alive: bool,
}

impl RepoState {
    /// Reads the repo's ledger. `live` renames a corrupt ledger aside; a dry run only reports it.
    pub fn load(repo: &Path, now: DateTime<Utc>, live: bool) -> std::io::Result<RepoState> {
        if live {
            crate::util::atomic::remove_stale_temps(&ledger::runs_dir(repo));
        }
        let loaded = ledger::load(repo, now, live)?;
        Ok(RepoState {
            repo: repo.to_path_buf(),
            dirty: loaded.corrupt.is_some(),
            ledger: loaded.ledger,
            corrupt: loaded.corrupt,
            worker_alive: FileLock::is_held(&crate::capture::worker::worker_lock_path(repo)),
        })
    }

    pub fn changed(&self) -> bool {
        self.dirty
    }

    /// Brings pending entries and their run records into agreement before any decision: a finished run
    /// moves or fails its entry's cursor (the worker may have died between the two writes); a `running`
    /// run with no live worker failed (`worker-lost`). Only pending entries' records are read. Returns the
    /// run records it changed (a live sweep writes them). Queued runs that no entry waits for are left to
    /// the worker, which fails them as orphans.
    pub fn reconcile(&mut self, now: DateTime<Utc>) -> Vec<RunRecord> {
        let runs_dir = ledger::runs_dir(&self.repo);
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
                let Some(mut r) = crate::capture::run::read(&runs_dir, &run_id) else {
                    cancelled.extend(entry.fail(&run_id, "the run record is missing"));
                    break;
                };
                if r.status == RunStatus::Running && !self.worker_alive {
                    r.status = RunStatus::Failed;
                    r.finished_at = Some(policy::iso(now));
                    r.error = Some(format!(
                        "worker-lost: the worker (pid {}) ended before the run finished",
                        r.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
                    ));
                    changed.push(r.clone());
                }
                match r.status {
                    RunStatus::Done => entry.complete(
                        &run_id,
                        r.finished_at.as_deref().unwrap_or(&policy::iso(now)),
                    ),
                    RunStatus::Failed => {
                        cancelled.extend(
                            entry.fail(&run_id, r.error.as_deref().unwrap_or("the run failed")),
                        );
                        break;
                    }
                    RunStatus::Queued | RunStatus::Running => break,
                }
            }
        }
        for id in cancelled {
            if let Some(mut r) = crate::capture::run::read(&runs_dir, &id) {
                if r.status == RunStatus::Queued {
                    r.status = RunStatus::Failed;
                    r.error = Some("cancelled: an earlier chunk of this transcript failed".into());
                    r.finished_at = Some(policy::iso(now));
                    changed.push(r);
                }
            }
        }
        changed
    }

    /// Whether a run is waiting for a worker.
    pub fn has_pending(&self) -> bool {
        self.ledger
            .entries
            .values()
            .any(|e| e.status == EntryStatus::Pending)
    }
}

fn item(file: &FoundFile, ex: &Examined, reason: &str, detail: Option<String>) -> SkippedItem {
    SkippedItem {
        app: file.app.to_string(),
        session_id: ex.session_id.clone(),
        transcript_path: file.path.display().to_string(),
        repo_root: ex.repo.as_ref().map(|r| r.display().to_string()),
        reason: reason.to_string(),
        detail,
    }
}

/// What the policy needs of a transcript's ledger entry: a few numbers instead of the entry, so a sweep
/// over 100k transcripts need not hold every ledger at once.
#[derive(Debug, Clone, Copy)]
pub struct EntryView {
    captured_bytes: u64,
    same_file: bool,
    pending: bool,
    failed_attempts: u32,
    /// The uncaptured part was already read at this very size and held no user turn.
    no_turns_at_this_size: bool,
}

impl EntryView {
    pub fn of(e: &LedgerEntry, file: &FoundFile) -> EntryView {
        let same = same_file(e, file);
        EntryView {
            captured_bytes: e.last_captured_size,
            same_file: same,
            pending: e.status == EntryStatus::Pending,
            failed_attempts: if e.status == EntryStatus::Failed {
                e.attempts
            } else {
                0
            },
            no_turns_at_this_size: same && e.no_turns_through == Some(file.size),
        }
    }
}

/// The policy's facts for one transcript, given its ledger entry (as a view).
pub fn facts<'a>(
    rule: &'a RuleSet,
    file: &FoundFile,
    ex: &'a Examined,
    entry: Option<EntryView>,
    internal: bool,
) -> Facts<'a> {
    Facts {
        app: &rule.id,
        session_id: ex.session_id.as_deref(),
        cwd: ex.cwd.as_deref(),
        repo: ex.repo.as_deref(),
        excluded_by: ex.excluded.as_deref(),
        mtime: DateTime::<Utc>::from(file.mtime),
        size: file.size,
        captured_bytes: entry.map(|e| e.captured_bytes).unwrap_or(0),
        same_file: entry.is_none_or(|e| e.same_file),
        internal,
        pending: entry.is_some_and(|e| e.pending),
        failed_attempts: entry.map(|e| e.failed_attempts).unwrap_or(0),
        // Already read at this size and found without a user turn: no need to read it again.
        new_user_turns: entry.filter(|e| e.no_turns_at_this_size).map(|_| 0),
    }
}

fn same_file(e: &LedgerEntry, file: &FoundFile) -> bool {
    e.file_id == Some(file.file_id)
        && match file.path.to_str() {
            Some(p) => e.path == p,
            None => e.path.as_str() == file.path.to_string_lossy(),
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
    let (view, internal) = match (&state, &ex.session_id) {
        (Some(s), Some(sid)) => (
            s.ledger
                .entries
                .get(&key(&rule.id, sid))
                .map(|e| EntryView::of(e, file)),
            s.ledger.agent_sessions.contains(sid),
        ),
        _ => (None, false),
    };
    policy::decide(
        &catalog.policy,
        &facts(rule, file, ex, view, internal),
        settings,
    )
}

fn ledger_item(repo: &Path, path: &Path, reason: &str, detail: String) -> SkippedItem {
    SkippedItem {
        app: "almanac".into(),
        session_id: None,
        transcript_path: path.display().to_string(),
        repo_root: Some(repo.display().to_string()),
        reason: reason.into(),
        detail: Some(detail),
    }
}

/// The skip reason of a file whose session another file in the same repo holds.
const DUPLICATE: &str = "duplicate-session";

/// One transcript's decision, made while its repo's ledger was loaded.
struct Decided {
    view: Option<EntryView>,
    decision: Decision,
    detail: Option<String>,
    /// The ledger entry, kept only for an eligible transcript (its new part is read against it).
    entry: Option<Box<LedgerEntry>>,
}

fn decide_one(
    catalog: &Catalog,
    rule: &RuleSet,
    file: &FoundFile,
    ex: &Examined,
    entry: Option<&LedgerEntry>,
    internal: bool,
    settings: &Settings,
) -> Decided {
    let view = entry.map(|e| EntryView::of(e, file));
    let (decision, detail) = policy::decide_fast(
        &catalog.policy,
        &facts(rule, file, ex, view, internal),
        settings,
    );
    Decided {
        view,
        entry: if decision == Decision::Eligible {
            entry.map(|e| Box::new(e.clone()))
        } else {
            None
        },
        decision,
        detail,
    }
}

/// What one repo's pass leaves for the rest of the sweep.
struct RepoPass {
    repo: PathBuf,
    guard: Option<FileLock>,
    /// Why the ledger could not be locked, read or written (its transcripts are then not decided).
    error: Option<(&'static str, String)>,
    corrupt: Option<ledger::Corrupt>,
    worker_alive: bool,
    has_pending: bool,
    agent_sessions: std::collections::BTreeSet<String>,
    decided: Vec<(usize, Decided)>,
}

/// A repo whose ledger was read: what the act phase needs to know of it.
struct RepoDone {
    repo: PathBuf,
    worker_alive: bool,
    has_pending: bool,
}

/// Locks (live) and loads one repo's ledger, reconciles it with its run records (a live sweep saves the
/// result at once), and decides each of the repo's transcripts. The ledger is dropped on return.
fn repo_pass(
    repo: &Path,
    idxs: &[usize],
    candidates: &[(FoundFile, Examined)],
    catalog: &Catalog,
    settings: &Settings,
    now: DateTime<Utc>,
    live: bool,
) -> RepoPass {
    let mut pass = RepoPass {
        repo: repo.to_path_buf(),
        guard: None,
        error: None,
        corrupt: None,
        worker_alive: false,
        has_pending: false,
        agent_sessions: Default::default(),
        decided: Vec::new(),
    };
    if live {
        match crate::util::atomic::private_dir(&ledger::runs_dir(repo))
            .and_then(|_| ledger::lock_repo(repo))
        {
            Ok(g) => pass.guard = Some(g),
            Err(e) => {
                pass.error = Some((
                    "ledger-unwritable",
                    format!("cannot lock {}: {e}", ledger::runs_dir(repo).display()),
                ));
                return pass;
            }
        }
    }
    let mut state = match RepoState::load(repo, now, live) {
        Ok(s) => s,
        Err(e) => {
            pass.error = Some(("ledger-unreadable", e.to_string()));
            return pass;
        }
    };
    let changed = state.reconcile(now);
    pass.corrupt = state.corrupt.take();
    if live {
        for r in &changed {
            let _ = crate::capture::run::write(&ledger::runs_dir(repo), r);
        }
        if state.changed() {
            if let Err(e) = ledger::save(repo, &mut state.ledger, now) {
                pass.error = Some(("ledger-unwritable", e.to_string()));
                return pass;
            }
        }
    }
    pass.worker_alive = state.worker_alive;
    pass.has_pending = state.has_pending();
    let entries = &state.ledger.entries;

    // Several files with one session id (a Codex rollout copied to archived_sessions/): the one the
    // cursor was set on wins, else the most recently modified.
    let keys: Vec<Option<String>> = idxs
        .iter()
        .map(|&i| {
            let (file, ex) = &candidates[i];
            ex.session_id.as_deref().map(|sid| key(&file.app, sid))
        })
        .collect();
    let mut chosen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (&i, k) in idxs.iter().zip(&keys) {
        let Some(k) = k else { continue };
        let entry_path = entries.get(k).map(|e| e.path.as_str());
        let on_cursor = |f: &FoundFile| entry_path == Some(f.path.to_str().unwrap_or(""));
        let better =
            |a: &FoundFile, b: &FoundFile| (on_cursor(a), a.mtime) > (on_cursor(b), b.mtime);
        match chosen.get(k.as_str()) {
            Some(&j) if !better(&candidates[i].0, &candidates[j].0) => {}
            _ => {
                chosen.insert(k, i);
            }
        }
    }
    pass.decided = idxs
        .iter()
        .zip(&keys)
        .map(|(&i, k)| {
            let (file, ex) = &candidates[i];
            let rule = catalog.get(&file.app).expect("walked apps exist");
            if let Some(k) = k {
                if chosen.get(k.as_str()) != Some(&i) {
                    return (
                        i,
                        Decided {
                            view: None,
                            decision: Decision::Skip(DUPLICATE),
                            detail: Some(
                                "another file holds the same session; that one is captured".into(),
                            ),
                            entry: None,
                        },
                    );
                }
            }
            let entry = k.as_ref().and_then(|k| entries.get(k));
            let internal = ex
                .session_id
                .as_ref()
                .is_some_and(|s| state.ledger.agent_sessions.contains(s));
            (
                i,
                decide_one(catalog, rule, file, ex, entry, internal, settings),
            )
        })
        .collect();
    drop(chosen);
    pass.agent_sessions = std::mem::take(&mut state.ledger.agent_sessions);
    pass
}

/// An eligible transcript whose new part was read, waiting for the budget.
struct Plan {
    idx: usize,
    /// The ledger entry as the sweep found it.
    entry: Option<Box<LedgerEntry>>,
    r: Range,
    /// The rule set has turn rules: the part's turns are summarised for the runs this sweep starts.
    has_turns: bool,
}

/// One run's share of a new part: it ends on a newline.
struct Chunk {
    from: u64,
    from_line_before: u64,
    to: u64,
    to_line: u64,
    /// `sha256:` of `[0, to)`.
    hash: String,
}

fn chunks_of(r: &Range) -> Vec<Chunk> {
    let mut out = Vec::new();
    let (mut from, mut lines) = (r.from_byte, r.from_line_before);
    for (end, n, hash) in &r.boundaries {
        let to_line = r.from_line_before + n;
        out.push(Chunk {
            from,
            from_line_before: lines,
            to: *end,
            to_line,
            hash: hash.clone(),
        });
        from = *end;
        lines = to_line;
    }
    out.push(Chunk {
        from,
        from_line_before: lines,
        to: r.to_byte,
        to_line: r.to_line,
        hash: r.hash_at_end.clone(),
    });
    out
}

/// Estimated tokens for a number of transcript bytes (the documented four bytes per token).
pub fn est_tokens(bytes: u64) -> u64 {
    bytes.div_ceil(crate::config::BYTES_PER_TOKEN)
}

/// What the parallel phase computes for one eligible transcript.
struct Work {
    idx: usize,
    /// Boxed: thousands of eligible transcripts (a first sweep) mostly have no entry.
    entry: Option<Box<LedgerEntry>>,
}

struct WorkResult {
    outcome: Result<RangeOutcome, String>,
    /// Whether the new part holds a user turn (None without turn rules); the summary itself waits for
    /// the budget, so thousands of eligible transcripts hold no prompt text.
    part: Result<Option<u64>, String>,
    bytes_read: u64,
}

pub fn run(catalog: &Catalog, cx: &Context, opts: &SweepOptions) -> Summary {
    let started_at = Instant::now();
    let trace = Trace::new(started_at);
    let live = !opts.dry_run;
    let now = opts.settings.now;
    let mut walk = WalkStats::default();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    // The discovery cache loads while the stores are walked.
    let cache_file = cache::path(&cx.almanac_home);
    let head_cache = std::thread::scope(|sc| {
        let loader = sc.spawn(|| cache::Cache::load(&cache_file, &catalog.fingerprint));
        for id in &opts.apps {
            if let Some(rule) = catalog.get(id) {
                discover::walk_rule_set(rule, cx, &mut seen, &mut walk, &mut files);
            }
        }
        loader.join().unwrap_or_default()
    });
    // By the paths' bytes: `Path`'s own order parses components, several times slower on 100k files.
    files.sort_by(|a, b| (&a.app, a.path.as_os_str()).cmp(&(&b.app, b.path.as_os_str())));
    trace.mark("walk and cache load");

    let mut summary = Summary {
        scanned: 0,
        eligible: 0,
        dry_run: opts.dry_run,
        capture_since: opts.settings.capture_since.map(policy::iso),
        started: Vec::new(),
        skipped: Vec::new(),
        needs_attention: Vec::new(),
        counts: BTreeMap::new(),
        totals: Totals::default(),
        stats: Stats {
            files_visited: walk.files_visited,
            unreadable: walk.unreadable,
            duplicates: walk.duplicates,
            ..Stats::default()
        },
    };

    // Gather heads: from the discovery cache when the file is unchanged, else read (in parallel).
    let heads: Vec<(Examined, Option<u64>)> = crate::util::par::map(&files, |file| {
        let rule = catalog.get(&file.app).expect("walked apps exist");
        match head_cache.get(&file.path, &file.app, &file.stamp()) {
            Some(c) => (Examined::from_cache(&c), None),
            None => {
                let scan = discover::read_head(rule, file).map_err(|e| e.to_string());
                let read = scan.as_ref().map(|h| h.bytes_read).unwrap_or(0);
                let mut ex = Examined::from_head(scan);
                ex.scan = None; // only `rules explain` shows the scan; keep memory flat
                (ex, Some(read))
            }
        }
    });
    // Every file came from the cache and the cache holds nothing else: it need not be written again.
    let cache_current =
        heads.iter().all(|(_, read)| read.is_none()) && head_cache.len() == files.len();
    let save_cache = live && !cache_current;
    let mut mapper = RepoMapper::new(&cx.almanac_home);
    let roots = heads.iter().filter(|(e, _)| !e.subagent).count();
    let mut candidates: Vec<(FoundFile, Examined)> = Vec::with_capacity(roots);
    // Subagent verdicts are cached too (live), so a subagent file costs one stat next time.
    let mut subagents: Vec<(FoundFile, Examined)> =
        Vec::with_capacity(if save_cache { files.len() / 2 } else { 0 });
    for (file, (mut ex, read)) in files.into_iter().zip(heads) {
        summary.stats.bytes_read += read.unwrap_or(0);
        if let Some(e) = &ex.error {
            summary.scanned += 1;
            summary.attention(item(&file, &ex, "read-failed", Some(e.clone())));
            continue;
        }
        if ex.subagent {
            summary.stats.subagents += 1;
            *summary.counts.entry("subagent".into()).or_default() += 1;
            if save_cache {
                subagents.push((file, ex));
            }
            continue;
        }
        summary.scanned += 1;
        ex.repo = ex.cwd.as_deref().and_then(|c| mapper.map(c));
        candidates.push((file, ex));
    }
    drop(head_cache);
    trace.mark("heads and repo mapping");

    // Repo by repo (two at a time): lock (live) and load the ledger, reconcile it, and decide each of the
    // repo's transcripts from a small view of its entry. Only the entries of eligible transcripts are
    // kept, so memory does not grow with the size of every ledger together.
    let mut by_repo: BTreeMap<&std::ffi::OsStr, Vec<usize>> = BTreeMap::new();
    for (i, (_, ex)) in candidates.iter().enumerate() {
        if let Some(r) = &ex.repo {
            by_repo.entry(r.as_os_str()).or_default().push(i);
        }
    }
    let groups: Vec<(&Path, Vec<usize>)> = by_repo
        .into_iter()
        .map(|(r, v)| (Path::new(r), v))
        .collect();
    let mut passes = crate::util::par::map(&groups, |(repo, idxs)| {
        repo_pass(repo, idxs, &candidates, catalog, &opts.settings, now, live)
    });
    drop(groups);
    let internal: HashSet<String> = passes
        .iter_mut()
        .flat_map(|p| std::mem::take(&mut p.agent_sessions))
        .collect();
    let mut decided: Vec<Option<Decided>> = (0..candidates.len()).map(|_| None).collect();
    let mut repos: Vec<RepoDone> = Vec::with_capacity(passes.len());
    let mut guards = Vec::new();
    for pass in passes {
        let repo = &pass.repo;
        if let Some(c) = &pass.corrupt {
            let detail = format!(
                "{} did not parse ({}); {} it and started a fresh ledger",
                ledger::ledger_path(repo).display(),
                c.error,
                if live {
                    "moved"
                } else {
                    "a live sweep would move"
                }
            );
            summary.attention(ledger_item(repo, &c.moved_to, "ledger-corrupt", detail));
        }
        if let Some((code, detail)) = &pass.error {
            summary.attention(ledger_item(
                repo,
                &ledger::ledger_path(repo),
                code,
                detail.clone(),
            ));
        }
        guards.extend(pass.guard);
        for (i, d) in pass.decided {
            decided[i] = Some(d);
        }
        if pass.error.is_none() {
            repos.push(RepoDone {
                repo: pass.repo,
                worker_alive: pass.worker_alive,
                has_pending: pass.has_pending,
            });
        }
    }
    trace.mark("ledgers and decisions");

    // Report the decisions in order; collect the transcripts whose new part must be read.
    let mut work = Vec::new();
    for (i, (file, ex)) in candidates.iter().enumerate() {
        let rule = catalog.get(&file.app).expect("walked apps exist");
        let d = match &ex.repo {
            Some(_) => match decided[i].take() {
                Some(d) => d,
                None => continue, // the repo's ledger could not be read or locked; reported above
            },
            None => decide_one(catalog, rule, file, ex, None, false, &opts.settings),
        };
        let Decided {
            view,
            mut decision,
            mut detail,
            entry,
        } = d;
        // An agent session recorded in another repo's ledger is ours too (a duplicate stays one).
        if decision != Decision::Skip(DUPLICATE)
            && ex
                .session_id
                .as_deref()
                .is_some_and(|s| internal.contains(s))
        {
            (decision, detail) = policy::decide_fast(
                &catalog.policy,
                &facts(rule, file, ex, view, true),
                &opts.settings,
            );
        }
        match decision {
            Decision::Skip(code) => {
                if catalog
                    .policy
                    .checks
                    .iter()
                    .any(|c| c.kind.code() == code && c.kind.needs_attention())
                {
                    summary.attention(item(file, ex, code, detail));
                } else {
                    summary.skip(item(file, ex, code, detail));
                }
            }
            Decision::Eligible => work.push(Work { idx: i, entry }),
        }
    }
    drop(decided);
    drop(internal);

    // Read the new parts, in parallel: prefix check, complete lines, turns.
    let results: Vec<WorkResult> = crate::util::par::map(&work, |w| {
        let (file, _) = &candidates[w.idx];
        let rule = catalog.get(&file.app).expect("walked apps exist");
        let mut bytes_read = 0;
        // Hash when a prefix must be verified, or when a live run needs the new prefix's hash.
        let hash = live || w.entry.is_some();
        let outcome = decide_range(
            rule,
            file,
            w.entry.as_deref(),
            &opts.settings,
            hash,
            Some(opts.budget.max_tokens_per_run * crate::config::BYTES_PER_TOKEN),
            &mut bytes_read,
        );
        let part = match &outcome {
            // Only whether the part holds a prompt; the full count waits for the budget.
            Ok(RangeOutcome::Capture(r)) => {
                new_part_turns(rule, file, r, r.to_byte, true, &mut bytes_read)
                    .map(|p| p.map(|p| p.user_turns))
            }
            _ => Ok(None),
        };
        WorkResult {
            outcome,
            part,
            bytes_read,
        }
    });

    // Act on them, in order.
    trace.mark("new parts read");
    let mut started_by_repo: BTreeMap<PathBuf, Vec<StartedItem>> = BTreeMap::new();
    let mut plans: Vec<Plan> = Vec::new();
    let mut updates = Updates::new();
    for (w, res) in work.into_iter().zip(results) {
        let (file, ex) = &candidates[w.idx];
        let rule = catalog.get(&file.app).expect("walked apps exist");
        summary.stats.bytes_read += res.bytes_read;
        let (Some(repo), Some(sid)) = (ex.repo.clone(), ex.session_id.as_deref()) else {
            continue; // the policy always skips these (no-almanac-repo and no-session-id cannot be disabled)
        };
        let k = key(&file.app, sid);
        let r = match res.outcome {
            Err(e) => {
                summary.attention(item(file, ex, "read-failed", Some(e)));
                continue;
            }
            Ok(RangeOutcome::PrefixMismatch(detail)) => {
                if w.entry.is_some() {
                    let e = to_update(&mut updates, &repo, &k, w.entry.as_deref(), file, sid);
                    e.status = EntryStatus::NeedsAttention;
                    e.attention = Some("prefix-mismatch".into());
                    e.last_error = Some(detail.clone());
                }
                summary.attention(item(file, ex, "prefix-mismatch", Some(detail)));
                continue;
            }
            Ok(RangeOutcome::Unchanged { baseline }) => {
                // Remember where the file stands so the next sweep need not read it again.
                let e = to_update(&mut updates, &repo, &k, w.entry.as_deref(), file, sid);
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
        let part = match res.part {
            Ok(p) => p,
            Err(e) => {
                summary.attention(item(file, ex, "read-failed", Some(e)));
                continue;
            }
        };
        // Now that the new part is known, ask the policy again (no-new-turns).
        if let Some(user_turns) = part {
            let view = w.entry.as_deref().map(|e| EntryView::of(e, file));
            let mut f = facts(rule, file, ex, view, false);
            f.new_user_turns = Some(user_turns);
            let (decision, detail) = policy::decide_fast(&catalog.policy, &f, &opts.settings);
            if let Decision::Skip(code) = decision {
                if live && code == "no-new-turns" {
                    let found = w.entry.as_deref();
                    let e = entry_for_range(&mut updates, &repo, &k, found, file, sid, &r);
                    verified(e, file);
                    e.no_turns_through = Some(file.size);
                }
                summary.skip(item(file, ex, code, detail));
                continue;
            }
        }
        plans.push(Plan {
            idx: w.idx,
            entry: w.entry,
            r,
            has_turns: part.is_some(),
        });
    }

    // Spend the budget, most recently active first: what does not fit waits for the next sweep.
    plans.sort_by(|a, b| {
        candidates[b.idx]
            .0
            .mtime
            .cmp(&candidates[a.idx].0.mtime)
            .then(a.idx.cmp(&b.idx))
    });
    let budget = opts.budget;
    let mut runs_left = budget.max_runs;
    let mut tokens_left = budget.max_tokens;
    let sweep_id = format!(
        "sweep_{}_{}",
        now.format("%Y%m%dT%H%M%S%3fZ"),
        crate::util::ids::random_hex(4)
    );
    let mut breaker_started = false;
    for plan in plans {
        let (file, ex) = &candidates[plan.idx];
        let rule = catalog.get(&file.app).expect("walked apps exist");
        let (Some(repo), Some(sid)) = (ex.repo.clone(), ex.session_id.as_deref()) else {
            continue;
        };
        let r = &plan.r;
        summary.eligible += 1;
        let chunks = chunks_of(r);
        let n = chunks.len() as u32;
        let mut take = 0usize;
        let mut tokens = 0u64;
        for c in &chunks {
            let t = est_tokens(c.to - c.from);
            if runs_left <= take as u64 || tokens_left.is_some_and(|left| tokens + t > left) {
                break;
            }
            tokens += t;
            take += 1;
        }
        if take == 0 {
            let why = if runs_left == 0 {
                format!(
                    "this sweep's {} runs are spent (max_runs_per_sweep); the next sweep starts it",
                    budget.max_runs
                )
            } else {
                format!("{} estimated tokens do not fit what is left of max_tokens_per_sweep; the next sweep starts it", est_tokens(chunks[0].to - chunks[0].from))
            };
            summary.skip(item(file, ex, "budget-deferred", Some(why)));
            continue;
        }
        runs_left -= take as u64;
        tokens_left = tokens_left.map(|l| l - tokens);
        // Full turn counts only for what this sweep starts (reading a huge part's turns costs).
        let part = match plan.has_turns {
            true => new_part_turns(
                rule,
                file,
                r,
                chunks[take - 1].to,
                false,
                &mut summary.stats.bytes_read,
            )
            .ok()
            .flatten(),
            false => None,
        };
        let new_turns = part.as_ref().map(|p| p.user_turns);
        summary.totals.new_bytes += chunks[..take].iter().map(|c| c.to - c.from).sum::<u64>();
        summary.totals.est_tokens += tokens;
        summary.totals.new_turns += new_turns.unwrap_or(0);
        summary.totals.runs += take as u64;
        let path_text = file.path.display().to_string();
        let item_for = |c: &Chunk, i: usize| StartedItem {
            app: file.app.to_string(),
            session_id: sid.to_string(),
            transcript_path: path_text.clone(),
            repo_root: repo.display().to_string(),
            run_id: "dry-run".into(),
            from_line: c.from_line_before + 1,
            to_line: c.to_line,
            from_byte: c.from,
            to_byte: c.to,
            new_bytes: c.to - c.from,
            new_turns,
            est_tokens: est_tokens(c.to - c.from),
            chunk: (n > 1).then_some((i as u32 + 1, n)),
        };
        if !live {
            for (i, c) in chunks[..take].iter().enumerate() {
                summary.started.push(item_for(c, i));
            }
            continue;
        }
        if !breaker_started {
            breaker_started = true;
            if let Err(e) =
                crate::capture::breaker::start(&cx.almanac_home, &sweep_id, budget.breaker_failures)
            {
                eprintln!("almanac: cannot write the circuit breaker state: {e}");
            }
        }
        let k = key(&file.app, sid);
        let e = entry_for_range(&mut updates, &repo, &k, plan.entry.as_deref(), file, sid, r);
        verified(e, file);
        let id_base = crate::util::ids::run_id(now);
        for (i, c) in chunks[..take].iter().enumerate() {
            let spec = RunSpec {
                repo: &repo,
                app: &file.app,
                session_id: sid,
                transcript: &file.path,
                from_line: c.from_line_before + 1,
                to_line: c.to_line,
                from_byte: c.from,
                to_byte: c.to,
                prefix_hash: &c.hash,
                agent: &opts.agent,
                summary: part.as_ref(),
                sweep_id: Some(&sweep_id),
                chunk: (n > 1).then_some((i as u32 + 1, n)),
                part_lines: (n > 1).then_some((r.from_line_before + 1, r.to_line)),
                id_base: (n > 1).then_some(id_base.as_str()),
            };
            match capture::queue(&spec, &cx.almanac_home, now) {
                Ok(record) => {
                    if i == 0 {
                        e.status = EntryStatus::Pending;
                        e.no_turns_through = None;
                        e.pending_run_id = Some(record.run_id.clone());
                        e.pending_to_size = Some(c.to);
                        e.pending_to_line = Some(c.to_line);
                        e.pending_prefix_hash = Some(c.hash.clone());
                        e.pending_started_at = Some(policy::iso(now));
                        e.last_run_id = Some(record.run_id.clone());
                        e.pending_rest.clear();
                    } else {
                        e.pending_rest.push(ledger::PendingChunk {
                            run_id: record.run_id.clone(),
                            to_size: c.to,
                            to_line: c.to_line,
                            prefix_hash: c.hash.clone(),
                        });
                    }
                    let mut started = item_for(c, i);
                    started.run_id = record.run_id;
                    started_by_repo
                        .entry(repo.clone())
                        .or_default()
                        .push(started);
                }
                Err(err) => {
                    if i == 0 {
                        let msg = format!("cannot write the run record: {err}");
                        e.status = EntryStatus::Failed;
                        e.attempts += 1;
                        e.last_error = Some(msg.clone());
                        summary.eligible -= 1;
                        summary.attention(item(file, ex, "capture-start-failed", Some(msg)));
                    }
                    // Later chunks that could not be queued are captured by the next sweep.
                    break;
                }
            }
        }
    }

    if live {
        for done in &repos {
            let repo = &done.repo;
            let mut new_runs = started_by_repo.remove(repo).unwrap_or_default();
            let repo_updates = updates.remove(repo);
            // The ledger first: a worker only runs what the ledger waits for. It is read again (this
            // sweep holds the repo lock, so it is as the repo's pass left it) and dropped when done.
            let mut loaded = None;
            if let Some(u) = repo_updates {
                let saved = RepoState::load(repo, now, true).and_then(|mut state| {
                    state.ledger.entries.extend(u);
                    ledger::save(repo, &mut state.ledger, now)?;
                    Ok(state)
                });
                match saved {
                    Ok(state) => loaded = Some(state),
                    Err(err) => {
                        summary.attention(ledger_item(
                            repo,
                            &ledger::ledger_path(repo),
                            "ledger-unwritable",
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
                    let mut state = match loaded.take() {
                        Some(s) => Ok(s),
                        None => RepoState::load(repo, now, true),
                    };
                    for s in new_runs.drain(..) {
                        if let Some(mut r) =
                            crate::capture::run::read(&ledger::runs_dir(repo), &s.run_id)
                        {
                            r.status = RunStatus::Failed;
                            r.error = Some(msg.clone());
                            r.finished_at = Some(policy::iso(now));
                            let _ = crate::capture::run::write(&ledger::runs_dir(repo), &r);
                        }
                        if let Ok(state) = &mut state {
                            if let Some(e) =
                                state.ledger.entries.get_mut(&key(&s.app, &s.session_id))
                            {
                                e.fail(&s.run_id, &msg);
                            }
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
                    if let Ok(state) = &mut state {
                        let _ = ledger::save(repo, &mut state.ledger, now);
                    }
                }
            }
            summary.started.extend(new_runs);
        }
    }
    if save_cache {
        let entries = candidates
            .iter()
            .chain(subagents.iter())
            .map(|(file, ex)| cache::Entry {
                path: &file.path,
                app: &file.app,
                stamp: file.stamp(),
                session_id: ex.session_id.as_deref(),
                cwd: ex.cwd.as_deref(),
                subagent: ex.subagent,
                excluded: ex.excluded.as_deref(),
            });
        cache::Cache::save(&cache_file, &catalog.fingerprint, entries);
    }
    drop(guards);
    trace.mark("acted and saved");
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

/// The turns of the uncaptured part up to `to_byte`, summarised; None when the rule set has no turns
/// section. `first_only` stops at the first prompt (all the no-new-turns check needs).
fn new_part_turns(
    rule: &RuleSet,
    file: &FoundFile,
    r: &Range,
    to_byte: u64,
    first_only: bool,
    bytes_read: &mut u64,
) -> Result<Option<crate::turns::PartSummary>, String> {
    use std::io::{Read, Seek, SeekFrom};
    let Some(turn_rules) = &rule.turns else {
        return Ok(None);
    };
    let mut f = discover::open_transcript(&file.path).map_err(|e| e.to_string())?;
    f.seek(SeekFrom::Start(r.from_byte))
        .map_err(|e| e.to_string())?;
    let part = f.take(to_byte - r.from_byte);
    let opts = crate::turns::Options {
        stop_after_users: first_only.then_some(1),
        ..crate::turns::Options::default()
    };
    let t = crate::turns::extract(rule, turn_rules, part, r.from_line_before + 1, 0, &opts)
        .map_err(|e| e.to_string())?;
    *bytes_read += t.bytes_read;
    Ok(Some(crate::turns::summarize(&t)))
}

/// The entries a sweep changes, by repo and ledger key: applied to each ledger, one at a time, at the end.
type Updates = BTreeMap<PathBuf, BTreeMap<String, LedgerEntry>>;

/// The entry this sweep changes for a transcript: the one it found (or a fresh one), copied once. Only a
/// repo with a changed entry gets its ledger written.
fn to_update<'m>(
    updates: &'m mut Updates,
    repo: &Path,
    k: &str,
    found: Option<&LedgerEntry>,
    file: &FoundFile,
    sid: &str,
) -> &'m mut LedgerEntry {
    if !updates.contains_key(repo) {
        updates.insert(repo.to_path_buf(), BTreeMap::new());
    }
    let repo_updates = updates.get_mut(repo).expect("inserted above");
    repo_updates.entry(k.to_string()).or_insert_with(|| {
        found
            .cloned()
            .unwrap_or_else(|| LedgerEntry::fresh(&file.app, sid, &file.path.display().to_string()))
    })
}

/// The entry a new part is recorded against: the one found, or for a first capture a fresh one whose
/// cursor is where the range starts (the capture_since baseline, or line 1).
fn entry_for_range<'m>(
    updates: &'m mut Updates,
    repo: &Path,
    k: &str,
    found: Option<&LedgerEntry>,
    file: &FoundFile,
    sid: &str,
    r: &Range,
) -> &'m mut LedgerEntry {
    let e = to_update(updates, repo, k, found, file, sid);
    if found.is_none() {
        e.last_captured_size = r.from_byte;
        e.last_captured_line = r.from_line_before;
        e.last_captured_prefix_hash = r.hash_at_cursor.clone();
        e.baseline = r.from_byte > 0;
    }
    e
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
    /// Chunk ends inside the range (see `cursor::scan_chunked`).
    pub boundaries: Vec<(u64, u64, String)>,
}

pub enum RangeOutcome {
    Capture(Range),
    Unchanged { baseline: Option<BaselineCursor> },
    PrefixMismatch(String),
}

/// Reads the transcript once: verifies the captured prefix (or places a first-seen transcript at its
/// `capture_since` baseline), then finds the complete lines after the cursor. `hash` off skips hashing
/// (a dry run's first look at a transcript needs only where lines end).
pub fn decide_range(
    rule: &RuleSet,
    file: &FoundFile,
    entry: Option<&LedgerEntry>,
    settings: &Settings,
    hash: bool,
    chunk_bytes: Option<u64>,
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
    let scan = cursor::scan_chunked(open()?, cursor_bytes, hash, chunk_bytes)
        .map_err(|e| e.to_string())?;
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
        boundaries: scan.boundaries,
    }))
}

/// `ALMANAC_TRACE=timing` prints how long each phase of a sweep took, to stderr.
struct Trace {
    start: Instant,
    on: bool,
}

impl Trace {
    fn new(start: Instant) -> Trace {
        Trace {
            start,
            on: std::env::var("ALMANAC_TRACE").is_ok_and(|v| v.split(',').any(|t| t == "timing")),
        }
    }

    fn mark(&self, phase: &str) {
        if self.on {
            let hwm = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmHWM:"))
                        .map(|l| l[6..].trim().to_string())
                })
                .unwrap_or_default();
            eprintln!(
                "almanac: trace: {:>8.1} ms  peak {hwm:>10}  {phase}",
                self.start.elapsed().as_secs_f64() * 1000.0
            );
        }
    }
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
