//! `capture now`: one session captured by hand, through the sweep's phases (`sweep::now`), the same
//! ledger, run queue and one worker per repo. Background by default; `--foreground` drains the repo's
//! queue in this process and follows the session's runs to their end.

use super::args::NowArgs;
use super::output::Out;
use super::{load_catalog, load_config, Failure, EXIT_FAILURE, EXIT_OK};
use crate::context::Context;
use crate::discover::repo::RepoMapper;
use crate::ledger::{self, record, RunStatus};
use crate::rules::compiled::CheckKind;
use crate::sweep::{self, now::Outcome, now::Target, setup};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) fn now_command(
    cx: &Context,
    rules_dir: Option<&Path>,
    args: NowArgs,
    out: &mut Out,
) -> Result<i32, Failure> {
    let config = load_config(cx)?;
    let catalog = load_catalog(cx, rules_dir)?;
    let apps: Vec<String> = match &args.app {
        Some(a) if catalog.get(a).is_none() => {
            let loaded: Vec<&str> = catalog.sets.iter().map(|r| r.id.as_str()).collect();
            return Err(Failure::Usage(format!(
                "--app \"{a}\": no such rule set (loaded: {})",
                loaded.join(", ")
            )));
        }
        Some(a) => vec![a.clone()],
        // The repo's latest session is one of the apps the sweeps cover (a shipped set that is off
        // stays off); a named transcript or session id may be of any app.
        None if args.transcript.is_none() && args.session.is_none() => {
            setup::configured_apps(&config, &catalog)
        }
        None => catalog.sets.iter().map(|r| r.id.clone()).collect(),
    };
    let agent = args.agent.unwrap_or_else(|| config.capture.agent.clone());
    let builtin = ["claude", "codex"].contains(&agent.as_str());
    if !builtin && !config.capture.agents.iter().any(|a| a.name == agent) {
        return Err(Failure::Usage(format!(
            "--agent \"{agent}\": no such agent (claude, codex, or a [capture.agents.<name>] in {})",
            cx.config_path().display()
        )));
    }
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::Other(format!("cannot read the current directory: {e}")))?;
    let target = match (args.transcript, args.session) {
        (Some(t), _) => Target::Transcript(cwd.join(t)),
        (None, Some(id)) => Target::Session(id),
        (None, None) => Target::Latest(
            RepoMapper::new(&cx.almanac_home)
                .map(&cwd.to_string_lossy())
                .map(|r| r.to_path_buf())
                .ok_or_else(|| {
                    Failure::Usage(format!(
                        "no .almanac/ at or above {}: pass a transcript or --session ID",
                        cwd.display()
                    ))
                })?,
        ),
    };
    // Only the quiet window and the run budget are lifted.
    let settings = setup::settings(cx.now, &config, Some(Duration::ZERO));
    let mut budget = config.budget;
    budget.max_runs = u64::MAX;
    budget.max_tokens = None;
    let manual = crate::capture::Manual {
        from_start: args.from_start,
        foreground: args.foreground,
    };
    let options = sweep::SweepOptions {
        apps,
        settings,
        dry_run: false,
        agent,
        budget,
        manual: Some(manual),
        list_skipped: true,
    };
    let outcome = sweep::now::now(&catalog, cx, &options, &target).map_err(Failure::Usage)?;
    let note = still_written(&catalog, cx, &config, &outcome);
    if outcome.started.is_empty() {
        return Ok(report_nothing(&outcome, note.as_deref(), out));
    }
    if !args.foreground {
        return Ok(report_started(&outcome, note.as_deref(), out));
    }
    if let Some(n) = &note {
        eprintln!("almanac: {}", crate::util::term::visible(n));
    }
    Ok(foreground(cx, &outcome, out))
}

/// A session modified within its normal quiet window is still being written: captured through its
/// last complete line.
fn still_written(
    catalog: &crate::rules::Catalog,
    cx: &Context,
    config: &crate::config::Config,
    o: &Outcome,
) -> Option<String> {
    let normal = setup::settings(cx.now, config, None);
    let window = catalog.policy.checks.iter().find_map(|c| match &c.kind {
        CheckKind::QuietWindow { quiet, apps } => {
            Some(crate::policy::quiet_window(*quiet, apps, &o.app, &normal))
        }
        _ => None,
    })?;
    let mtime = chrono::DateTime::<chrono::Utc>::from(o.mtime);
    let age = cx
        .now
        .signed_duration_since(mtime)
        .to_std()
        .unwrap_or_default();
    (age < window).then(|| {
        format!(
            "the session was modified {}s ago, within its quiet window: it may still be written, and is captured through its last complete line",
            age.as_secs()
        )
    })
}

fn base_json(o: &Outcome, result: &str, note: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "ok": true,
        "result": result,
        "app": o.app,
        "sessionId": o.session_id,
        "transcriptPath": o.transcript_path.display().to_string(),
        "repoRoot": o.repo_root.display().to_string(),
        "runs": o.started,
        "note": note,
    })
}

fn report_nothing(o: &Outcome, note: Option<&str>, out: &mut Out) -> i32 {
    let (code, detail) = o
        .skipped
        .clone()
        .unwrap_or_else(|| ("unchanged".into(), None));
    let nothing_new = ["unchanged", "no-new-turns"].contains(&code.as_str());
    let queued = ["capture-already-pending", "changed-during-sweep"].contains(&code.as_str());
    let result = match (nothing_new, queued) {
        (true, _) => "nothing-new",
        (_, true) => "already-queued",
        _ => "not-captured",
    };
    out.emit(
        || {
            let mut v = base_json(o, result, note);
            v["reason"] = code.clone().into();
            v["detail"] = detail.clone().into();
            v
        },
        |out| {
            let what = match result {
                "nothing-new" => "nothing new to capture".to_string(),
                "already-queued" => {
                    "already queued by another capture; nothing started".to_string()
                }
                _ => format!("not captured ({code})"),
            };
            out.line(&format!("{} session {}: {what}", o.app, o.session_id));
            if let Some(d) = &detail {
                out.line(&format!("  {d}"));
            }
        },
    );
    match result {
        "not-captured" => EXIT_FAILURE,
        _ => EXIT_OK,
    }
}

fn report_started(o: &Outcome, note: Option<&str>, out: &mut Out) -> i32 {
    out.emit(
        || base_json(o, "started", note),
        |out| {
            if let Some(n) = note {
                out.line(&format!("note: {n}"));
            }
            for s in &o.started {
                out.line(&format!(
                    "started {} for {} session {} (lines {} to {})",
                    s.run_id, o.app, o.session_id, s.from_line, s.to_line
                ));
            }
            out.line(&format!(
                "follow it: almanac capture status --repo {}  (log: {})",
                o.repo_root.display(),
                ledger::runs_dir(&o.repo_root).display()
            ));
        },
    );
    EXIT_OK
}

/// Drains the repo's queue here (unless another worker already does) and follows this session's runs:
/// their log streamed to a terminal, else a progress line with the elapsed time on stderr and the log
/// printed at the end. Exit 0 when every run is done, 1 when one failed.
fn foreground(cx: &Context, o: &Outcome, out: &mut Out) -> i32 {
    let runs = ledger::runs_dir(&o.repo_root);
    let ids: Vec<String> = o.started.iter().map(|s| s.run_id.clone()).collect();
    let tty = std::io::stdout().is_terminal() && !out.is_json();
    let start = Instant::now();
    let mut shown: std::collections::HashMap<String, u64> = Default::default();
    let mut last_progress = Instant::now();
    on_ctrl_c();
    let mut stopped = false;
    let finals = std::thread::scope(|sc| {
        let worker = sc.spawn(|| crate::capture::worker::run_worker(cx, &o.repo_root));
        loop {
            let recs: Vec<Option<record::RunRecord>> =
                ids.iter().map(|id| record::read(&runs, id)).collect();
            if crate::capture::agent::interrupted() && !stopped {
                stopped = stop_agents(&recs);
            }
            let terminal =
                |r: &Option<record::RunRecord>| r.as_ref().is_some_and(|r| r.status.finished());
            if tty {
                if let Some(r) = recs
                    .iter()
                    .flatten()
                    .find(|r| r.status == RunStatus::Running)
                {
                    let at = shown.entry(r.run_id.clone()).or_default();
                    *at = stream(Path::new(&r.log_path), *at);
                }
            } else if last_progress.elapsed() >= Duration::from_secs(5) {
                last_progress = Instant::now();
                eprintln!("almanac: capturing... {}s", start.elapsed().as_secs());
            }
            // Interrupted: done once our worker has stopped (a run it never started stays queued).
            if recs.iter().all(terminal)
                || (crate::capture::agent::interrupted() && worker.is_finished())
            {
                return recs;
            }
            // Our worker left with runs still queued and none alive (another took them, then died).
            if worker.is_finished() && !ledger::worker_alive(&o.repo_root) {
                let _ = crate::capture::spawn_worker(&o.repo_root);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let failed = finals
        .iter()
        .flatten()
        .any(|r| r.status == RunStatus::Failed);
    let cancelled = finals
        .iter()
        .flatten()
        .any(|r| r.status == RunStatus::Cancelled);
    let result = match (failed, cancelled) {
        (true, _) => "failed",
        (false, true) => "cancelled",
        (false, false) => "done",
    };
    out.emit(
        || {
            let mut v = base_json(o, result, None);
            v["ok"] = (!failed && !cancelled).into();
            v["runs"] = finals.iter().flatten().map(run_json).collect();
            v
        },
        |out| {
            for r in finals.iter().flatten() {
                if !tty {
                    let log = std::fs::read_to_string(&r.log_path).unwrap_or_default();
                    out.line(log.trim_end());
                }
                let how = match (&r.status, &r.error) {
                    (RunStatus::Done, _) => "done".to_string(),
                    (RunStatus::Cancelled, Some(e)) => e.clone(),
                    (_, Some(e)) => format!("failed: {e}"),
                    _ => "failed".to_string(),
                };
                out.line(&format!(
                    "{} {how} ({}s)",
                    r.run_id,
                    start.elapsed().as_secs()
                ));
            }
        },
    );
    if crate::capture::agent::interrupted() {
        EXIT_INTERRUPTED
    } else if failed {
        EXIT_FAILURE
    } else {
        EXIT_OK
    }
}

/// The exit code of a command stopped by Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: i32 = 130;

/// Ctrl-C reaches almanac, not the agent (which runs in a process group of its own): it is recorded,
/// and the follow loop stops the running agent.
fn on_ctrl_c() {
    crate::platform::on_interrupt(crate::capture::agent::interrupt);
}

/// Stops the agent of each running run by its recorded process group (SIGTERM; the worker's own
/// end-of-run kill takes care of the rest). Returns whether one was found to stop.
fn stop_agents(recs: &[Option<record::RunRecord>]) -> bool {
    let mut any = false;
    for r in recs.iter().flatten() {
        if let (RunStatus::Running, Some(p)) = (r.status, r.agent_process) {
            crate::platform::stop_group(p.pgid, crate::platform::Stop::Term);
            any = true;
        }
    }
    any
}

fn run_json(r: &record::RunRecord) -> serde_json::Value {
    serde_json::json!({
        "runId": r.run_id,
        "status": r.status,
        "exitCode": r.exit_code,
        "error": r.error,
        "fromLine": r.from_line,
        "toLine": r.to_line,
        "logPath": r.log_path,
    })
}

/// Prints what the log gained since byte `from`; returns where it now ends.
fn stream(log: &Path, from: u64) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(log) else {
        return from;
    };
    if f.seek(SeekFrom::Start(from)).is_err() {
        return from;
    }
    let mut buf = Vec::new();
    let n = f.read_to_end(&mut buf).unwrap_or(0) as u64;
    let mut stdout = std::io::stdout();
    let _ = stdout.write_all(&buf);
    let _ = stdout.flush();
    from + n
}
