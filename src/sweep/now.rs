//! `capture now`: the sweep's phases over one session chosen by hand. The stores are walked as a sweep
//! walks them (heads from the discovery cache), one root session is chosen (a transcript path, a session
//! id, or the latest of a repo), then it is decided, planned and queued exactly as a sweep would, under
//! the same repo lock and ledger re-check, with only the quiet window and the run budget lifted.

use super::gather::{self, Candidate};
use super::{phases, SweepOptions};
use super::{SkippedItem, StartedItem, Summary};
use crate::context::Context;
use crate::rules::Catalog;
use crate::util::trace::Trace;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Which session `capture now` captures.
pub enum Target {
    Transcript(PathBuf),
    Session(String),
    /// The most recently modified root session that maps to this repo.
    Latest(PathBuf),
}

/// What became of the chosen session.
pub struct Outcome {
    pub app: String,
    pub session_id: String,
    pub transcript_path: PathBuf,
    pub repo_root: PathBuf,
    pub mtime: std::time::SystemTime,
    /// Runs queued for it (none: see `skipped`).
    pub started: Vec<StartedItem>,
    /// Why nothing was queued: the reason code and words for a person.
    pub skipped: Option<(String, Option<String>)>,
}

/// Chooses the session (a usage error names what was searched), then decides, plans and queues it.
pub fn now(
    catalog: &Catalog,
    cx: &Context,
    opts: &SweepOptions,
    target: &Target,
) -> Result<Outcome, String> {
    let trace = Trace::new(Instant::now());
    let mut scratch = Summary::new(opts.dry_run, None);
    let gathered = gather::gather(catalog, cx, &opts.apps, false, &mut scratch, &trace);
    let idx = choose(&gathered.candidates, target, &opts.apps)?;
    let mut all = gathered.candidates;
    let candidates = vec![all.swap_remove(idx)];
    drop(all);
    let (file, ex) = &candidates[0];
    let repo = ex.repo.as_deref().map(Path::to_path_buf).ok_or_else(|| {
        format!(
            "{}: its working directory ({}) is in no repo with .almanac/; run `almanac init` there",
            file.path.display(),
            ex.cwd.as_deref().unwrap_or("unknown")
        )
    })?;
    let mut summary = Summary::new(opts.dry_run, None);
    phases(catalog, cx, &candidates, opts, &mut summary, &trace);
    summary.settle(&candidates);
    let skipped = summary
        .skipped
        .iter()
        .chain(summary.needs_attention)
        .next()
        .map(|s: SkippedItem| (s.reason.code().to_string(), s.detail))
        // Some policy skips are only counted.
        .or_else(|| summary.counts.keys().next().map(|r| (r.to_string(), None)));
    Ok(Outcome {
        app: file.app.to_string(),
        session_id: ex.session_id.as_deref().unwrap_or_default().to_string(),
        transcript_path: file.path.clone(),
        repo_root: repo,
        mtime: file.mtime,
        started: summary.started,
        skipped,
    })
}

/// The index of the one candidate `target` names.
fn choose(candidates: &[Candidate], target: &Target, apps: &[String]) -> Result<usize, String> {
    let searched = || {
        format!(
            "searched {} root sessions of {}",
            candidates.len(),
            if apps.is_empty() {
                "no app".to_string()
            } else {
                apps.join(", ")
            }
        )
    };
    let found: Vec<(usize, &Candidate)> = match target {
        Target::Transcript(p) => {
            let want = p.canonicalize().unwrap_or_else(|_| p.clone());
            let same = |f: &Path| f == want || f.canonicalize().is_ok_and(|c| c == want);
            candidates
                .iter()
                .enumerate()
                .filter(|(_, (f, _))| same(&f.path))
                .collect()
        }
        Target::Session(id) => candidates
            .iter()
            .enumerate()
            .filter(|(_, (_, ex))| ex.session_id.as_deref() == Some(id.as_str()))
            .collect(),
        Target::Latest(repo) => {
            let want = repo.canonicalize().unwrap_or_else(|_| repo.clone());
            let mut mine: Vec<(usize, &Candidate)> = candidates
                .iter()
                .enumerate()
                .filter(|(_, (_, ex))| {
                    ex.repo
                        .as_deref()
                        .is_some_and(|r| r == want || r.canonicalize().is_ok_and(|c| c == want))
                })
                .collect();
            mine.sort_by_key(|(_, c)| std::cmp::Reverse(c.0.mtime));
            mine.truncate(1);
            mine
        }
    };
    match (found.as_slice(), target) {
        ([(i, _)], _) => Ok(*i),
        ([], Target::Transcript(p)) => Err(format!(
            "{}: not a root session transcript in any store ({}); pass --app ID if it is another app's",
            p.display(),
            searched()
        )),
        ([], Target::Session(id)) => Err(format!(
            "no session \"{id}\" ({}); `almanac capture sessions` lists them",
            searched()
        )),
        ([], Target::Latest(repo)) => Err(format!(
            "no session maps to {} ({}); pass a transcript or --session ID",
            repo.display(),
            searched()
        )),
        (many, _) => Err(format!(
            "ambiguous: {} sessions match ({}); pass --app ID or the transcript path",
            many.len(),
            many.iter()
                .map(|(_, (f, _))| format!("{}: {}", f.app, f.path.display()))
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}
