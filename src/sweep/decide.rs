//! Phase 2, decide: repo by repo (two at a time), lock (live) and load the ledger, reconcile it with its
//! run records, and ask the policy about each of the repo's transcripts from a small view of its entry.
//! Only the entries of eligible transcripts are kept, so memory does not grow with every ledger together.
//! A repo's lock is held for its pass only (the act phase takes it again), so a sweep holds at most one
//! lock per thread, whatever the number of repos.

use super::facts::{facts, EntryView};
use super::gather::Candidate;
use super::summary::{SkipDetail, SkippedItem, Summary};
use crate::discover::FoundFile;
use crate::ledger::{self, key, LedgerEntry, RepoState};
use crate::policy::{self, Decision, Settings};
use crate::reason::Reason;
use crate::rules::Catalog;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// One transcript's decision, made while its repo's ledger was loaded: 32 bytes with its index, as a
/// sweep holds one for every transcript of every repo until all the ledgers are read.
pub struct Decided {
    pub view: Option<EntryView>,
    /// What few decisions carry, boxed.
    pub extra: Option<Box<Extra>>,
    /// The transcript's index among the candidates.
    pub idx: u32,
    pub decision: Decision,
    /// The skip's detail is put into words again from the candidate when the summary is written
    /// (`summary::derivable`): not held for each of 100k unchanged transcripts.
    pub derived: bool,
}

// Held for every transcript of every repo until the ledgers are all read.
const _: () = assert!(std::mem::size_of::<Decided>() <= 32);

pub struct Extra {
    pub detail: Option<String>,
    /// The ledger entry, kept only for an eligible transcript (its new part is read against it).
    pub entry: Option<Box<LedgerEntry>>,
}

impl Decided {
    fn new(
        idx: usize,
        decision: Decision,
        view: Option<EntryView>,
        extra: Extra,
        derived: bool,
    ) -> Decided {
        let has = extra.detail.is_some() || extra.entry.is_some();
        Decided {
            view,
            extra: has.then(|| Box::new(extra)),
            idx: u32::try_from(idx).expect("fewer than 4 billion transcripts"),
            decision,
            derived,
        }
    }
}

fn decide_one(
    catalog: &Catalog,
    idx: usize,
    candidate @ (file, ex): &Candidate,
    entry: Option<&LedgerEntry>,
    internal: bool,
    settings: &Settings,
    ask: Ask,
) -> Decided {
    let rule = catalog.get(&file.app).expect("walked apps exist");
    let view = entry.map(|e| EntryView::of(e, file).starting_over(ask.from_start));
    // A skip the summary only counts needs no words (attention items always have them).
    let words = |r: Reason| ask.details || attention(catalog, r);
    let (decision, mut detail) = policy::decide_worded(
        &catalog.policy,
        &facts(rule, file, ex, view, internal),
        settings,
        words,
    );
    // A view whose store gave no project says why in its header (a hash or slug no known repo has).
    if decision == Decision::Skip(Reason::NoCwd) && detail.is_some() && rule.is_view(&file.path) {
        if let Some(why) = crate::discover::views::unplaced(&file.path) {
            detail = Some(format!(
                "the store does not say where the session ran: {why}"
            ));
        }
    }
    let derived = match (&decision, &detail) {
        (Decision::Skip(r), Some(d)) => {
            let r = *r;
            !attention(catalog, r) && super::summary::derivable(r, candidate, d)
        }
        _ => false,
    };
    if derived {
        detail = None;
    }
    let entry = entry
        .filter(|_| decision == Decision::Eligible)
        .map(|e| Box::new(e.clone()));
    Decided::new(idx, decision, view, Extra { detail, entry }, derived)
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

/// What is asked of each transcript's decision.
#[derive(Debug, Clone, Copy)]
struct Ask {
    /// `capture now --from-start`: every entry's cursor is taken as line 1.
    from_start: bool,
    /// The summary lists skipped transcripts, each with its detail (else it counts them).
    details: bool,
}

/// Whether a skip for `reason` is listed as needing attention (with its detail) whatever is asked.
fn attention(catalog: &Catalog, reason: Reason) -> bool {
    policy::needs_attention(&catalog.policy, reason) || reason == Reason::CursorLost
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
    let ask = Ask {
        from_start,
        details: summary.list_skipped,
    };
    let mut passes = crate::util::par::map(&groups, |(repo, idxs)| {
        repo_pass(
            repo,
            idxs,
            candidates,
            catalog,
            settings,
            live.then_some(deadline),
            ask,
        )
    });
    drop(groups);
    let internal: HashSet<String> = passes
        .iter_mut()
        .flat_map(|p| std::mem::take(&mut p.agent_sessions))
        .collect();
    let mut out = Decisions {
        work: Vec::new(),
        repos: Vec::with_capacity(passes.len()),
    };
    // Settled repo by repo, each pass's decisions dropped with it: a list of every transcript's
    // decision is never held beside them (9 MB at 100k).
    for mut pass in passes {
        report_store_problems(&pass, live, summary);
        for d in std::mem::take(&mut pass.decided) {
            if let Some(w) = settle(catalog, candidates, d, &internal, settings, summary) {
                out.work.push(w);
            }
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
    // A transcript no repo holds; one whose repo's ledger could not be read or locked was reported above.
    for (i, c) in candidates.iter().enumerate() {
        if c.1.repo.is_none() {
            let d = decide_one(catalog, i, c, None, false, settings, ask);
            if let Some(w) = settle(catalog, candidates, d, &internal, settings, summary) {
                out.work.push(w);
            }
        }
    }
    // The new parts are read, and reported, in the transcripts' order.
    out.work.sort_unstable_by_key(|w| w.idx);
    out
}

/// The final word on one transcript: an agent session recorded in another repo's ledger is ours too (a
/// duplicate stays one); a skip is reported; an eligible transcript becomes work.
fn settle(
    catalog: &Catalog,
    candidates: &[Candidate],
    d: Decided,
    internal: &HashSet<String>,
    settings: &Settings,
    summary: &mut Summary,
) -> Option<Work> {
    let Decided {
        view,
        mut decision,
        extra,
        idx,
        mut derived,
    } = d;
    let idx = idx as usize;
    let (file, ex) = &candidates[idx];
    let (mut detail, entry) = extra.map(|x| (x.detail, x.entry)).unwrap_or_default();
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
        derived = false;
    }
    match decision {
        Decision::Skip(reason) => {
            if attention(catalog, reason) {
                summary.attention(SkippedItem::of(file, ex, reason, detail));
            } else if derived {
                summary.skip_listed(idx, reason, SkipDetail::Derived);
            } else {
                summary.skip_candidate(idx, &candidates[idx], reason, detail);
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
    /// The ledger's seal did not hold: what checking it against the run records found.
    unsealed: Option<ledger::rebuild::Unsealed>,
    /// Transcripts held as `cursor-lost` after a rebuild (see `ledger::rebuild`).
    held: usize,
    worker_alive: bool,
    has_pending: bool,
    agent_sessions: BTreeSet<String>,
    decided: Vec<Decided>,
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
    if let Some(u) = &pass.unsealed {
        let path = ledger::ledger_path(repo);
        let detail = u.detail(&path, live);
        summary.attention(SkippedItem::of_store(
            repo,
            &path,
            Reason::LedgerUnsealed,
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
    ask: Ask,
) -> RepoPass {
    let live = deadline.is_some();
    let mut pass = RepoPass {
        repo: repo.to_path_buf(),
        error: None,
        corrupt: None,
        unsealed: None,
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
    // A prompt override changed after an agent ran here (or not readable as a regular file).
    if let Some(home) = ledger::seal::almanac_home() {
        if let Some(why) = crate::capture::prompt::override_refused(home, repo) {
            pass.outside_wiki.push(SkippedItem::of_store(
                repo,
                &crate::capture::prompt::override_path(repo),
                Reason::AgentWroteControlFile,
                why,
            ));
        }
    }
    let entries = &state.ledger.entries;
    let keys: Vec<Option<String>> = idxs
        .iter()
        .map(|&i| {
            let (file, ex) = &candidates[i];
            ex.session_id.as_deref().map(|sid| key(&file.app, sid))
        })
        .collect();
    // A first-seen transcript, and the entry of one of a session family (its records may have been
    // claimed by another member since), are compared with the sessions' claimed records.
    let families = || {
        let mut firsts = std::collections::HashSet::new();
        entries
            .values()
            .filter_map(|e| e.first_record_id.as_deref().map(|f| (e.app.as_str(), f)))
            .any(|f| !firsts.insert(f))
    };
    if keys
        .iter()
        .any(|k| k.as_ref().is_none_or(|k| !entries.contains_key(k)))
        || families()
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
                    return duplicate(i);
                }
            }
            let entry = k.as_ref().and_then(|k| entries.get(k));
            if let Some(e) = entry.filter(|e| ledger::rebuild::is_held(e)) {
                return held(i, e);
            }
            let internal = candidates[i]
                .1
                .session_id
                .as_ref()
                .is_some_and(|s| state.ledger.agent_sessions.contains(&**s));
            decide_one(catalog, i, &candidates[i], entry, internal, settings, ask)
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
    let stop: crate::ledger::StopOrphan<'_> = &crate::capture::orphan::settle;
    state.reconcile(now, live.then_some(stop));
    pass.corrupt = state.corrupt.take();
    pass.unsealed = state.unsealed.take();
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

fn held(idx: usize, e: &LedgerEntry) -> Decided {
    let extra = Extra {
        detail: e.last_error.clone(),
        entry: None,
    };
    Decided::new(idx, Decision::Skip(Reason::CursorLost), None, extra, false)
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

fn duplicate(idx: usize) -> Decided {
    let extra = Extra {
        detail: Some("another file holds the same session; that one is captured".into()),
        entry: None,
    };
    Decided::new(
        idx,
        Decision::Skip(Reason::DuplicateSession),
        None,
        extra,
        false,
    )
}
