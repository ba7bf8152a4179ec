//! `capture sweep`: flags and config become the sweep's apps, settings and budget (`sweep::setup`
//! decides), then the sweep runs and its summary is rendered.

use super::args::SweepArgs;
use super::output::{self, Out};
use super::{automation_cmds, duration_flag, load_catalog, load_config, select_apps, Failure};
use super::{EXIT_FAILURE, EXIT_LOCKED, EXIT_OK};
use crate::context::Context;
use crate::sweep::{self, setup};
use std::path::Path;

pub(super) fn sweep_command(
    cx: &Context,
    rules_dir: Option<&Path>,
    args: SweepArgs,
    out: &mut Out,
) -> Result<i32, Failure> {
    // Flags are checked before anything is read, so a typo never costs a scan.
    let quiet = duration_flag("--quiet", args.quiet.as_deref())?;
    let config = load_config(cx)?;
    let catalog = load_catalog(cx, rules_dir)?;
    let apps = select_apps(args.apps.as_deref(), &config, &catalog)?;
    let settings = setup::settings(cx.now, &config, quiet);
    let flags = setup::BudgetFlags {
        max_runs: args.max_runs,
        max_tokens: args.max_tokens,
        max_tokens_per_run: args.max_tokens_per_run,
    };
    let budget = setup::budget(config.budget, flags).map_err(Failure::Usage)?;
    // One live sweep at a time, machine-wide. A dry run reads only and takes no lock.
    let _lock = match args.dry_run {
        true => None,
        false => match setup::lock(&cx.almanac_home) {
            Ok(l) => Some(l),
            Err(e @ setup::LockError::Held { .. }) => return Ok(refuse_locked(&e, out)),
            Err(e) => return Err(Failure::Other(e.to_string())),
        },
    };
    if args.scheduled {
        if let Err(not_due) = automation_cmds::scheduled_due(cx, &config) {
            // One line for the scheduler's log, and success: not being due is normal.
            let why = not_due.to_string();
            out.emit(
                || serde_json::json!({"ok": true, "due": false, "reason": why}),
                |out| out.line(&format!("{} almanac: {why}", crate::policy::iso(cx.now))),
            );
            return Ok(EXIT_OK);
        }
    }
    if !args.dry_run {
        setup::remove_stale_temps(&cx.almanac_home);
    }
    let options = sweep::SweepOptions {
        apps,
        settings,
        dry_run: args.dry_run,
        agent: config.capture.agent.clone(),
        budget,
        manual: None,
        // Words show skipped transcripts only as counts (what the scheduler runs); JSON lists them.
        list_skipped: out.is_json(),
    };
    let summary = sweep::run(&catalog, cx, &options);
    let code = if args.strict && !summary.needs_attention.is_empty() {
        EXIT_FAILURE
    } else {
        EXIT_OK
    };
    if !args.dry_run {
        record(cx, &summary, code, args.scheduled && args.apps.is_none());
    }
    #[derive(serde::Serialize)]
    struct Output<'a> {
        ok: bool,
        summary: &'a sweep::Summary,
    }
    out.emit(
        || Output {
            ok: true,
            summary: &summary,
        },
        |out| output::sweep_human(&summary, out),
    );
    Ok(code)
}

/// A second sweep while one runs: it says so and does nothing (exit 75, try again later).
fn refuse_locked(e: &setup::LockError, out: &mut Out) -> i32 {
    let msg = e.to_string();
    let reason = setup::LockError::HELD_REASON;
    out.emit(
        || serde_json::json!({"ok": false, "error": msg, "reason": reason}),
        |_| {},
    );
    eprintln!("almanac: {msg}");
    EXIT_LOCKED
}

/// Records the sweep in `state/last-sweep.json` (what `--scheduled` and `automation status` read).
fn record(cx: &Context, summary: &sweep::Summary, code: i32, full_scheduled: bool) {
    if let Err(e) = sweep::write_last_sweep(cx, summary, code, full_scheduled) {
        eprintln!(
            "almanac: cannot write {}: {e}",
            cx.almanac_home.join("state/last-sweep.json").display()
        );
    }
}
