//! Phase 2, decide: repo by repo (two at a time), lock (live) and load the ledger, reconcile it with its
//! run records, and ask the policy about each of the repo's transcripts from a small view of its entry.
//! Only the entries of eligible transcripts are kept, so memory does not grow with every ledger together.
//! A repo's lock is held for its pass only (the act phase takes it again), so a sweep holds at most one
//! lock per thread, whatever the number of repos.

use super::gather::Candidate;
use super::summary::{SkippedItem, Summary};
use crate::discover::{Examined, FoundFile};
use crate::ledger::{self, key, LedgerEntry, RepoState};
use crate::policy::{self, Decision, Facts, Settings, Step};
use crate::reason::Reason;
use crate::rules::{Catalog, RuleSet};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// What the policy needs of a transcript's ledger entry: a few numbers instead of the entry, so a sweep
/// over 100k transcripts need not hold every ledger at once.
#[derive(Debug, Clone, Copy)]
pub struct EntryView {
    captured_bytes: u64,
    same_file: bool,
    pending: bool,
    failed_attempts: u32,
    /// The uncaptured part was already read at this very size and held no content.
    no_content_at_this_size: bool,
}

impl EntryView {
    pub fn of(e: &LedgerEntry, file: &FoundFile) -> EntryView {
        let same = same_file(e, file);
        EntryView {
            captured_bytes: e.last_captured_size,
            same_file: same,
            pending: e.status == ledger::EntryStatus::Pending,
            failed_attempts: if e.status == ledger::EntryStatus::Failed {
                e.attempts
            } else {
                0
            },
            no_content_at_this_size: same && e.no_content_through == Some(file.size),
        }
    }
}

impl EntryView {
    /// `capture now --from-start`: nothing counts as captured (the entry still guards the act phase).
    pub fn starting_over(mut self, from_start: bool) -> EntryView {
        if from_start {
            self.captured_bytes = 0;
            self.no_content_at_this_size = false;
        }
        self
    }
}

fn same_file(e: &LedgerEntry, file: &FoundFile) -> bool {
    e.file_id == Some(file.file_id)
        && match file.path.to_str() {
            Some(p) => e.path == p,
            None => e.path.as_str() == file.path.to_string_lossy(),
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
        new_content_turns: entry.filter(|e| e.no_content_at_this_size).map(|_| 0),
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
        .filter(|r| ledger::guard::check_runs_dir(r).is_ok())
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

/// One transcript's decision, made while its repo's ledger was loaded.
pub struct Decided {
    pub view: Option<EntryView>,
    pub decision: Decision,
    pub detail: Option<String>,
    /// The ledger entry, kept only for an eligible transcript (its new part is read against it).
    pub entry: Option<Box<LedgerEntry>>,
}

fn decide_one(
    catalog: &Catalog,
    (file, ex): &Candidate,
    entry: Option<&LedgerEntry>,
    internal: bool,
    settings: &Settings,
    from_start: bool,
) -> Decided {
    let rule = catalog.get(&file.app).expect("walked apps exist");
    let view = entry.map(|e| EntryView::of(e, file).starting_over(from_start));
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

/// An eligible transcript: its new part is read next.
pub struct Work {
    pub idx: usize,
    /// Boxed: thousands of eligible transcripts (a first sweep) mostly have no entry.
    pub entry: Option<Box<LedgerEntry>>,
}

/// A repo whose ledger was read: what the act phase needs to know of it.
pub struct RepoDone {
    pub repo: PathBuf,
    pub known: Vec<super::overlap::Known>, // record ids for the first-sight check
    pub worker_alive: bool,
    pub has_pending: bool,
}

pub struct Decisions {
    pub work: Vec<Work>,
    pub repos: Vec<RepoDone>,
}

/// Decides every candidate; skips and attention items go to the summary, eligible ones come back.
/// `from_start` (`capture now --from-start`): every entry's cursor is taken as line 1.
pub fn decide(
    catalog: &Catalog,
    candidates: &[Candidate],
    settings: &Settings,
    live: bool,
    summary: &mut Summary,
    from_start: bool,
) -> Decisions {
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
    // One wait for the whole phase: a sweep never waits more than `REPO_LOCK_WAIT` for its repos.
    let deadline = std::time::Instant::now() + ledger::REPO_LOCK_WAIT;
    let mut passes = crate::util::par::map(&groups, |(repo, idxs)| {
        repo_pass(
            repo,
            idxs,
            candidates,
            catalog,
            settings,
            live.then_some(deadline),
            from_start,
        )
    });
    drop(groups);
    let internal: HashSet<String> = passes
        .iter_mut()
        .flat_map(|p| std::mem::take(&mut p.agent_sessions))
        .collect();
    let mut decided: Vec<Option<Decided>> = (0..candidates.len()).map(|_| None).collect();
    let mut out = Decisions {
        work: Vec::new(),
        repos: Vec::with_capacity(passes.len()),
    };
    for mut pass in passes {
        report_store_problems(&pass, live, summary);
        for (i, d) in pass.decided {
            decided[i] = Some(d);
        }
        if pass.error.is_none() {
            out.repos.push(RepoDone {
                known: std::mem::take(&mut pass.known),
                repo: pass.repo,
                worker_alive: pass.worker_alive,
                has_pending: pass.has_pending,
            });
        }
    }
    // Report the decisions in order; collect the transcripts whose new part must be read.
    for (i, c) in candidates.iter().enumerate() {
        let d = match &c.1.repo {
            Some(_) => match decided[i].take() {
                Some(d) => d,
                None => continue, // the repo's ledger could not be read or locked; reported above
            },
            None => decide_one(catalog, c, None, false, settings, from_start),
        };
        if let Some(w) = settle(catalog, c, i, d, &internal, settings, summary) {
            out.work.push(w);
        }
    }
    out
}

/// The final word on one transcript: an agent session recorded in another repo's ledger is ours too (a
/// duplicate stays one); a skip is reported; an eligible transcript becomes work.
fn settle(
    catalog: &Catalog,
    (file, ex): &Candidate,
    idx: usize,
    d: Decided,
    internal: &HashSet<String>,
    settings: &Settings,
    summary: &mut Summary,
) -> Option<Work> {
    let Decided {
        view,
        mut decision,
        mut detail,
        entry,
    } = d;
    if decision != Decision::Skip(Reason::DuplicateSession)
        && ex
            .session_id
            .as_deref()
            .is_some_and(|s| internal.contains(s))
    {
        let rule = catalog.get(&file.app).expect("walked apps exist");
        (decision, detail) = policy::decide_fast(
            &catalog.policy,
            &facts(rule, file, ex, view, true),
            settings,
        );
    }
    match decision {
        Decision::Skip(reason) => {
            let item = SkippedItem::of(file, ex, reason, detail);
            if policy::needs_attention(&catalog.policy, reason) || reason == Reason::CursorLost {
                summary.attention(item);
            } else {
                summary.skip(item);
            }
            None
        }
        Decision::Eligible => Some(Work { idx, entry }),
    }
}

/// What one repo's pass leaves for the rest of the sweep.
struct RepoPass {
    repo: PathBuf,
    /// Why the ledger could not be read or written (its transcripts are then not decided).
    error: Option<(Reason, String)>,
    corrupt: Option<ledger::Corrupt>,
    /// Transcripts held as `cursor-lost` after a rebuild (see `ledger::rebuild`).
    held: usize,
    worker_alive: bool,
    has_pending: bool,
    agent_sessions: BTreeSet<String>,
    decided: Vec<(usize, Decided)>,
    known: Vec<super::overlap::Known>,
    /// Transcripts whose last capture run changed files outside `.almanac/`.
    outside_wiki: Vec<SkippedItem>,
}

/// An item for each entry whose last capture run changed files outside `.almanac/`; listed by every
/// sweep until `capture reset`.
fn outside_wiki(repo: &Path, ledger: &ledger::Ledger) -> Vec<SkippedItem> {
    ledger
        .entries
        .values()
        .filter_map(|e| {
            let o = e.wrote_outside_wiki.as_ref()?;
            let mut detail = format!(
                "capture run {} changed {} outside .almanac/ (not reverted; see its log); `almanac capture reset --skip-existing` once checked",
                o.run_id,
                o.paths.join(", ")
            );
            if !o.also_changed_during_run.is_empty() {
                detail.push_str(&format!(
                    "; also changed during the run, already modified before it (not blamed): {}",
                    o.also_changed_during_run.join(", ")
                ));
            }
            Some(SkippedItem {
                app: e.app.clone(),
                session_id: Some(e.session_id.clone()),
                transcript_path: e.path.clone(),
                repo_root: Some(repo.display().to_string()),
                reason: Reason::AgentWroteOutsideWiki,
                detail: Some(detail),
            })
        })
        .collect()
}

fn report_store_problems(pass: &RepoPass, live: bool, summary: &mut Summary) {
    let repo = &pass.repo;
    for item in &pass.outside_wiki {
        summary.attention(item.clone());
    }
    if let Some(c) = &pass.corrupt {
        let detail = format!(
            "{} did not parse ({}); {} it aside and rebuilt {} cursors and {} of almanac's own sessions \
             from the run records; {} transcripts no run record knows are held (cursor-lost) until you \
             decide, each with the command that releases it",
            ledger::ledger_path(repo).display(),
            c.error,
            if live {
                "moved"
            } else {
                "a live sweep would move"
            },
            c.rebuilt.cursors,
            c.rebuilt.agent_sessions,
            pass.held,
        );
        summary.attention(SkippedItem::of_store(
            repo,
            &c.moved_to,
            Reason::LedgerCorrupt,
            detail,
        ));
    }
    if let Some((reason, detail)) = &pass.error {
        summary.attention(SkippedItem::of_store(
            repo,
            &ledger::ledger_path(repo),
            *reason,
            detail.clone(),
        ));
    }
}

/// Locks (live: within `deadline`) and loads one repo's ledger, reconciles it with its run records (a live
/// sweep saves the result at once), and decides each of the repo's transcripts. The ledger is dropped and
/// the lock released on return.
fn repo_pass(
    repo: &Path,
    idxs: &[usize],
    candidates: &[Candidate],
    catalog: &Catalog,
    settings: &Settings,
    deadline: Option<std::time::Instant>,
    from_start: bool,
) -> RepoPass {
    let live = deadline.is_some();
    let mut pass = RepoPass {
        repo: repo.to_path_buf(),
        error: None,
        corrupt: None,
        held: 0,
        worker_alive: false,
        has_pending: false,
        agent_sessions: Default::default(),
        decided: Vec::new(),
        known: Vec::new(),
        outside_wiki: Vec::new(),
    };
    let _guard = match deadline.map(|d| super::store::open(repo, d)).transpose() {
        Ok(g) => g,
        Err(e) => {
            pass.error = Some(e);
            return pass;
        }
    };
    let mut state = match load_reconciled(repo, settings.now, live, &mut pass) {
        Ok(s) => s,
        Err(e) => {
            pass.error = Some(e);
            return pass;
        }
    };
    if state.ledger.rebuilt_from.is_some() {
        if let Err(e) = hold_unknown(&mut state, idxs, candidates, settings, live, &mut pass) {
            pass.error = Some(e);
            return pass;
        }
    }
    pass.worker_alive = state.worker_alive;
    pass.has_pending = state.has_pending();
    pass.outside_wiki.extend(outside_wiki(repo, &state.ledger));
    let entries = &state.ledger.entries;
    let keys: Vec<Option<String>> = idxs
        .iter()
        .map(|&i| {
            let (file, ex) = &candidates[i];
            ex.session_id.as_deref().map(|sid| key(&file.app, sid))
        })
        .collect();
    // Only a transcript the ledger does not know is compared with the known sessions' records.
    if keys
        .iter()
        .any(|k| k.as_ref().is_none_or(|k| !entries.contains_key(k)))
    {
        pass.known = super::overlap::known(entries);
    }
    let chosen = choose_among_copies(idxs, &keys, candidates, entries);
    pass.decided = idxs
        .iter()
        .zip(&keys)
        .map(|(&i, k)| {
            if let Some(k) = k {
                if chosen.get(k.as_str()) != Some(&i) {
                    return (i, duplicate());
                }
            }
            let entry = k.as_ref().and_then(|k| entries.get(k));
            if let Some(e) = entry.filter(|e| ledger::rebuild::is_held(e)) {
                return (i, held(e));
            }
            let internal = candidates[i]
                .1
                .session_id
                .as_ref()
                .is_some_and(|s| state.ledger.agent_sessions.contains(s));
            (
                i,
                decide_one(
                    catalog,
                    &candidates[i],
                    entry,
                    internal,
                    settings,
                    from_start,
                ),
            )
        })
        .collect();
    drop(chosen);
    pass.agent_sessions = std::mem::take(&mut state.ledger.agent_sessions);
    pass
}

/// The repo's ledger (locked by `repo_pass` when live), loaded and reconciled; a live sweep writes
/// what reconciling changed at once.
fn load_reconciled(
    repo: &Path,
    now: DateTime<Utc>,
    live: bool,
    pass: &mut RepoPass,
) -> Result<RepoState, (Reason, String)> {
    // A stranger's commit may have made runs/ (or a file in it) a link out of the repo: use nothing there.
    ledger::guard::check_runs_dir(repo).map_err(|why| (Reason::RunsDirUnsafe, why))?;
    let mut state =
        RepoState::load(repo, now, live).map_err(|e| match ledger::newer_version(&e) {
            Some(n) => (Reason::LedgerNewerVersion, n.to_string()),
            None => (Reason::LedgerUnreadable, e.to_string()),
        })?;
    state.reconcile(now, live);
    pass.corrupt = state.corrupt.take();
    let overwritten = state.take_overwritten(live).into_iter();
    (pass.outside_wiki).extend(overwritten.map(|why| SkippedItem::overwritten(repo, why)));
    if live && state.changed() {
        state
            .save(now)
            .map_err(|e| (Reason::LedgerUnwritable, e.to_string()))?;
    }
    Ok(state)
}

/// After a corrupt ledger was rebuilt from run records: the repo's transcripts that no run record knows
/// are held (`cursor-lost`) instead of being captured again from line 1. With `capture_since` set they
/// are first-seen transcripts as usual (placed at its baseline). A live sweep saves the result at once.
fn hold_unknown(
    state: &mut RepoState,
    idxs: &[usize],
    candidates: &[Candidate],
    settings: &Settings,
    live: bool,
    pass: &mut RepoPass,
) -> Result<(), (Reason, String)> {
    let found = idxs.iter().filter_map(|&i| {
        let (file, ex) = &candidates[i];
        let sid = ex.session_id.as_deref()?;
        let path = file.path.display().to_string();
        Some((key(&file.app, sid), &*file.app, sid, path))
    });
    pass.held = match settings.capture_since {
        None => ledger::rebuild::hold_unknown(&mut state.ledger, found),
        Some(_) => ledger::rebuild::hold_unknown(&mut state.ledger, std::iter::empty()),
    };
    if live {
        state
            .save(settings.now)
            .map_err(|e| (Reason::LedgerUnwritable, e.to_string()))?;
    }
    Ok(())
}

fn held(e: &LedgerEntry) -> Decided {
    Decided {
        view: None,
        decision: Decision::Skip(Reason::CursorLost),
        detail: e.last_error.clone(),
        entry: None,
    }
}

/// Several files with one session id (a Codex rollout copied to archived_sessions/): the one the cursor
/// was set on wins, else the most recently modified. Returns the chosen candidate per ledger key.
fn choose_among_copies<'k>(
    idxs: &[usize],
    keys: &'k [Option<String>],
    candidates: &[Candidate],
    entries: &BTreeMap<String, LedgerEntry>,
) -> HashMap<&'k str, usize> {
    let mut chosen: HashMap<&str, usize> = HashMap::new();
    for (&i, k) in idxs.iter().zip(keys) {
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
    chosen
}

fn duplicate() -> Decided {
    Decided {
        view: None,
        decision: Decision::Skip(Reason::DuplicateSession),
        detail: Some("another file holds the same session; that one is captured".into()),
        entry: None,
    }
}
