//! `capture sweep`, as a pipeline of phases, each a module with typed input and output:
//!
//! 1. `gather`: walk the stores, heads from the discovery cache or read, repos mapped;
//! 2. `decide`: repo by repo, the ledger loaded and reconciled, the policy asked about each transcript;
//! 3. `plan`: the new parts read (`range`), then the run and token budget spent over them;
//! 4. `act`: repo by repo under its lock again, the entries still as found updated, their runs queued,
//!    ledgers saved, one background worker started per repo;
//! 5. report: the discovery cache saved, the `Summary` sorted (`write_last_sweep` for the scheduler).
//!
//! A dry run reports and writes nothing.

mod act;
mod decide;
mod facts;
mod gather;
pub mod measure;
pub mod now;
mod overlap;
mod plan;
pub mod range;
pub mod setup;
mod store;
pub mod summary;
mod view_cursor;

pub use facts::{explain_decision, facts, EntryView};
pub use summary::{SkippedItem, StartedItem, Stats, Summary, Totals};

use crate::capture::Manual;
use crate::context::Context;
use crate::policy::{self, Settings};
use crate::rules::Catalog;
use crate::util::trace::Trace;
use chrono::Utc;
use std::time::Instant;

pub struct SweepOptions {
    pub apps: Vec<String>,
    pub settings: Settings,
    pub dry_run: bool,
    /// The agent new runs use (`[capture] agent`).
    pub agent: String,
    pub budget: crate::config::Budget,
    /// `capture now`: one session, by hand (None for a sweep).
    pub manual: Option<Manual>,
    /// List every skipped transcript in the summary (else only count them by reason).
    pub list_skipped: bool,
}

pub fn run(catalog: &Catalog, cx: &Context, opts: &SweepOptions) -> Summary {
    let started_at = Instant::now();
    let trace = Trace::new(started_at);
    let live = !opts.dry_run;
    let since = opts.settings.capture_since.map(policy::iso);
    let mut summary = Summary::new(opts.dry_run, since);
    summary.list_skipped = opts.list_skipped;
    if live {
        // An agent whose worker died holds its slot until it ends; past its timeout it is stopped here.
        crate::capture::slots::reap(&cx.almanac_home, |m| eprintln!("almanac: {m}"));
    }
    let gathered = gather::gather(catalog, cx, &opts.apps, live, &mut summary, &trace);
    phases(
        catalog,
        cx,
        &gathered.candidates,
        opts,
        &mut summary,
        &trace,
    );
    gather::save_cache(catalog, &gathered);
    trace.mark("acted and saved");
    summary.sort();
    summary.attach(gathered.candidates);
    let roots: Vec<(std::path::PathBuf, bool)> = catalog
        .sets
        .iter()
        .filter(|s| opts.apps.contains(&s.id))
        .flat_map(|s| s.stores.iter())
        .flat_map(|st| crate::discover::resolve_roots(st, cx))
        .map(|r| (r.path, r.exists))
        .collect();
    summary.add_next_steps(&roots);
    summary.stats.elapsed_ms = started_at.elapsed().as_millis() as u64;
    summary
}

/// Decide, plan and act over gathered candidates (all of a sweep's, or the one of `capture now`).
fn phases(
    catalog: &Catalog,
    cx: &Context,
    candidates: &[gather::Candidate],
    opts: &SweepOptions,
    summary: &mut Summary,
    trace: &Trace,
) {
    let live = !opts.dry_run;
    let from_start = opts.manual.is_some_and(|m| m.from_start);
    let settings = &opts.settings;
    let decisions = decide::decide(catalog, candidates, settings, live, summary, from_start);
    trace.mark("ledgers and decisions");
    if live {
        // The repos sessions ran in: stores inside projects are looked for there, hashed paths placed.
        let repos = decisions.repos.iter().map(|r| r.repo.as_path());
        if let Err(e) = crate::discover::registry::remember(cx, repos) {
            eprintln!("almanac: cannot update the list of known repos: {e}");
        }
    }

    let mut updates = act::Updates::default();
    let plans = plan::read_new_parts(
        catalog,
        candidates,
        decisions.work,
        &decisions.repos,
        opts,
        &mut updates,
        summary,
    );
    trace.mark("new parts read");
    let planned = plan::spend_budget(catalog, candidates, plans, opts, summary);

    if live {
        crate::util::fault::pause("before-act");
        let repos = &decisions.repos;
        act::act(
            cx, catalog, candidates, repos, planned, updates, opts, summary,
        );
    } else {
        act::list_runs(candidates, planned, summary);
    }
}

/// `$ALMANAC_HOME/state/last-sweep.json`, for `automation status` and `doctor`; `full_scheduled` when
/// this was a `--scheduled` sweep of every configured app, the one kind that moves the schedule's due
/// time (`automation::due`), which is otherwise carried over from the file.
pub fn write_last_sweep(
    cx: &Context,
    summary: &Summary,
    exit: i32,
    full_scheduled: bool,
) -> std::io::Result<()> {
    let path = cx.almanac_home.join("state").join("last-sweep.json");
    let scheduled = match full_scheduled {
        true => Some(policy::iso(cx.now)),
        false => std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                v[crate::automation::due::SCHEDULED_STARTED]
                    .as_str()
                    .map(str::to_string)
            }),
    };
    let mut v = serde_json::json!({
        "finishedAt": policy::iso(Utc::now()),
        "startedAt": policy::iso(cx.now),
        "durationMs": summary.stats.elapsed_ms,
        "exit": exit,
        "scanned": summary.scanned,
        "eligible": summary.eligible,
        "started": summary.started.len(),
        "skipped": summary.skipped_total(),
        "needsAttention": summary.needs_attention.len(),
        "counts": summary.counts,
    });
    if let Some(t) = scheduled {
        v[crate::automation::due::SCHEDULED_STARTED] = t.into();
    }
    crate::util::atomic::write_json_atomic(&path, &v)
}
