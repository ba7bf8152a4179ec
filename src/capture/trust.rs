//! What the worker trusts of a repo's run store: only a safe `runs/` directory (`ledger::guard`), only
//! run records this user's almanac sealed (`ledger::seal`), and never a path a record names: the prompt
//! and log of a run are always `runs/<run-id>.prompt.md` and `runs/<run-id>.log`.

use crate::ledger::record::{self as run, RunRecord};
use std::path::Path;

/// Ok when the worker may use the repo's store; otherwise why not (the worker then leaves).
pub fn store_usable(repo: &Path) -> Result<(), String> {
    crate::ledger::guard::check_runs_dir(repo)
        .map_err(|why| format!("{}: {why}", crate::reason::Reason::RunsDirUnsafe))
}

/// Writes one line per foreign run record to the worker's log: they stay as they are and never run.
pub fn report_foreign(repo: &Path, note: impl Fn(&str)) {
    for f in run::list_foreign(&crate::ledger::runs_dir(repo)) {
        note(&format!(
            "ignoring foreign run record {} ({}): not queued by this user's almanac; never run, changed or deleted",
            f.path, f.why
        ));
    }
}

/// The record's prompt and log paths, derived from its run id inside `runs` whatever it says.
pub fn paths_from_id(runs: &Path, r: &mut RunRecord) {
    r.prompt_path = run::prompt_path(runs, &r.run_id).display().to_string();
    r.log_path = run::log_path(runs, &r.run_id).display().to_string();
}
