//! `automation install|status|uninstall` and `setup`: the scheduler commands only manage the OS job;
//! the sweep logic stays in `capture sweep`.

use super::output::Out;
use super::{load_catalog, load_config, Failure, EXIT_FAILURE, EXIT_OK};
use crate::automation::due::{self, NotDue};
use crate::automation::{self, drift, Installed, JobSpec, Kind};
use crate::config::{self, AutomationSettings, Config};
use crate::context::Context;
use crate::sweep::setup;
use crate::util::duration::{format_duration, parse_duration};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::automation::DEFAULT_EVERY;
pub use crate::rules::DEFAULT_QUIET;

/// Where the scheduled sweep is registered and what it runs: flags `automation install` and `setup` share.
#[derive(clap::Args, Debug, Clone)]
pub struct JobArgs {
    #[arg(
        long,
        default_value = "auto",
        value_name = "auto|launchd|systemd|cron|schtasks"
    )]
    pub scheduler: String,
    /// The almanac binary the scheduler runs (default: this one, via a stable PATH entry if any).
    #[arg(long, value_name = "PATH")]
    pub program: Option<PathBuf>,
    /// Use a program path that would vanish (target/, a temp dir), with a warning.
    #[arg(long)]
    pub force: bool,
}

pub struct InstallArgs {
    pub every: Option<String>,
    pub quiet: Option<String>,
    /// `--apps a,b`: the apps to write to `[automation.capture] apps`.
    pub apps: Option<String>,
    pub job: JobArgs,
}

fn duration_flag(name: &str, v: Option<&str>, zero_ok: bool) -> Result<Option<Duration>, Failure> {
    let Some(v) = v else { return Ok(None) };
    let d = parse_duration(v).map_err(|e| Failure::Usage(format!("{name}: {e}")))?;
    if !zero_ok && d.is_zero() {
        return Err(Failure::Usage(format!("{name}: must be greater than zero")));
    }
    Ok(Some(d))
}

/// What `automation install` did, for rendering.
struct Installation {
    kind: Kind,
    changed: bool,
    file: String,
    every: Duration,
    quiet: Duration,
    apps: Vec<String>,
    since: Option<String>,
    spec: JobSpec,
    removed: Vec<String>,
}

pub fn install(
    cx: &Context,
    rules_dir: Option<&Path>,
    a: InstallArgs,
    out: &mut Out,
) -> Result<i32, Failure> {
    let every_flag = duration_flag("--every", a.every.as_deref(), false)?;
    let quiet_flag = duration_flag("--quiet", a.quiet.as_deref(), true)?;
    let kind = automation::choose(&a.job.scheduler).map_err(Failure::Usage)?;
    let config = load_config(cx)?;
    let catalog = load_catalog(cx, rules_dir)?;
    let (program, mut warnings) =
        automation::resolve_program(a.job.program.as_deref(), a.job.force)
            .map_err(Failure::Usage)?;
    let every = every_flag.or(config.every).unwrap_or(DEFAULT_EVERY);
    let quiet = quiet_flag.or(config.quiet).unwrap_or(DEFAULT_QUIET);
    let apps = match a.apps.as_deref() {
        Some(raw) => super::select_apps(Some(raw), &config, &catalog)?,
        None => setup::configured_apps(&config, &catalog),
    };
    // Config first: capture_since must exist before the scheduler's first (RunAtLoad) sweep.
    let settings = AutomationSettings {
        enabled: true,
        every,
        quiet,
        apps: apps.clone(),
        program: program.display().to_string(),
    };
    let (config_changed, since) =
        config::write_automation(&cx.config_path(), cx.now, Some(&settings), None)
            .map_err(|e| Failure::Config(vec![e.0]))?;
    let spec = JobSpec::for_home(
        cx,
        program.clone(),
        every,
        &automation::store_vars(&catalog),
    );
    let mut removed = Vec::new();
    for other in automation::kinds_here().into_iter().filter(|k| *k != kind) {
        match automation::uninstall(other, &spec) {
            Ok(Some(what)) => removed.push(format!("removed from {}: {what}", other.name())),
            Ok(None) => {}
            Err(e) => warnings.push(format!("could not remove ours from {}: {e}", other.name())),
        }
    }
    let report = automation::install(kind, &spec).map_err(Failure::Other)?;
    warnings.extend(report.warnings);
    let done = Installation {
        kind,
        changed: report.changed || config_changed || !removed.is_empty(),
        file: report.file,
        every,
        quiet,
        apps,
        since,
        spec,
        removed,
    };
    out.emit(
        || {
            serde_json::json!({
                "ok": true, "changed": done.changed, "scheduler": done.kind, "file": done.file,
                "every": format_duration(done.every), "quiet": format_duration(done.quiet), "apps": done.apps,
                "captureSince": done.since, "command": done.spec.argv(), "logs": [done.spec.out_log, done.spec.err_log],
                "removed": done.removed, "warnings": warnings,
            })
        },
        |out| install_human(&done, out),
    );
    for w in &warnings {
        eprintln!("almanac: warning: {w}");
    }
    Ok(EXIT_OK)
}

fn install_human(d: &Installation, out: &mut Out) {
    out.line(&if d.changed {
        format!("almanac: automatic capture installed ({})", d.kind.name())
    } else {
        format!(
            "almanac: automatic capture already installed ({}); nothing changed",
            d.kind.name()
        )
    });
    out.line(&format!("  every: {}", format_duration(d.every)));
    out.line(&format!("  quiet: {}", format_duration(d.quiet)));
    out.line(&format!("  apps: {}", d.apps.join(", ")));
    if let Some(s) = &d.since {
        out.line(&format!("  capturing transcripts after: {s}"));
    }
    out.line(&format!("  command: {}", d.spec.argv().join(" ")));
    out.line(&format!("  file: {}", d.file));
    out.line(&format!(
        "  logs: {} and {}",
        d.spec.out_log.display(),
        d.spec.err_log.display()
    ));
    for r in &d.removed {
        out.line(&format!("  {r}"));
    }
}

pub fn uninstall(cx: &Context, out: &mut Out) -> Result<i32, Failure> {
    let config = load_config(cx)?;
    let program = config
        .program
        .clone()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("almanac"));
    let spec = JobSpec::for_home(cx, program, config.every.unwrap_or(DEFAULT_EVERY), &[]);
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for kind in automation::kinds_here() {
        match automation::uninstall(kind, &spec) {
            Ok(Some(what)) => removed.push(format!("{}: {what}", kind.name())),
            Ok(None) => {}
            Err(e) => errors.push(format!("{}: {e}", kind.name())),
        }
    }
    if config.automation_enabled == Some(true) {
        config::write_automation(&cx.config_path(), cx.now, None, Some(false))
            .map_err(|e| Failure::Config(vec![e.0]))?;
    }
    out.emit(
        || serde_json::json!({"ok": errors.is_empty(), "removed": removed, "errors": errors}),
        |out| {
            if removed.is_empty() && errors.is_empty() {
                out.line("almanac: automatic capture is not installed; nothing to remove");
                return;
            }
            for r in &removed {
                out.line(&format!("almanac: removed {r}"));
            }
            out.line(&format!(
                "  logs and state are kept in {}",
                cx.almanac_home.display()
            ));
        },
    );
    if !errors.is_empty() {
        return Err(Failure::Other(errors.join("; ")));
    }
    Ok(EXIT_OK)
}

fn configured_json(config: &Config) -> serde_json::Value {
    serde_json::json!({
        "enabled": config.automation_enabled.unwrap_or(false),
        "every": format_duration(config.every.unwrap_or(DEFAULT_EVERY)),
        "quiet": format_duration(config.quiet.unwrap_or(DEFAULT_QUIET)),
        "apps": config.apps,
        "captureSince": config.capture_since.map(crate::policy::iso),
        "program": config.program,
    })
}

/// What `automation status` reports: the job as configured and as installed, and the drift between.
struct Status {
    config: Config,
    every: Duration,
    spec: JobSpec,
    installed: Vec<Installed>,
    drift: Vec<drift::Drift>,
    last: Option<serde_json::Value>,
    /// Facts worth saying that are not drift (a last sweep stamped in the future).
    notes: Vec<String>,
}

fn read_status(cx: &Context, rules_dir: Option<&Path>) -> Result<Status, Failure> {
    let config = load_config(cx)?;
    let store_vars = automation::store_vars(&load_catalog(cx, rules_dir)?);
    let every = config.every.unwrap_or(DEFAULT_EVERY);
    let program = config
        .program
        .clone()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("almanac"));
    let spec = JobSpec::for_home(cx, program, every, &store_vars);
    let installed: Vec<Installed> = automation::kinds_here()
        .into_iter()
        .filter_map(|k| automation::installed(k, &spec))
        .collect();
    let drift = drift::drifts(&config, &installed, every, &spec.env_map());
    let last: Option<serde_json::Value> =
        std::fs::read(cx.almanac_home.join("state/last-sweep.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
    let notes = due::future_note(due::last_sweep_started(&cx.almanac_home), cx.now)
        .into_iter()
        .collect();
    Ok(Status {
        config,
        every,
        spec,
        installed,
        drift,
        last,
        notes,
    })
}

pub fn status(
    cx: &Context,
    rules_dir: Option<&Path>,
    check: bool,
    out: &mut Out,
) -> Result<i32, Failure> {
    let st = read_status(cx, rules_dir)?;
    out.emit(
        || {
            serde_json::json!({
                "ok": true,
                "configured": configured_json(&st.config),
                "installed": st.installed,
                "drift": st.drift,
                "lastSweep": st.last,
                "notes": st.notes,
                "breaker": crate::capture::breaker::read(&cx.almanac_home),
                "logs": [st.spec.out_log, st.spec.err_log],
            })
        },
        |out| status_human(cx, &st, out),
    );
    Ok(if check && !st.drift.is_empty() {
        EXIT_FAILURE
    } else {
        EXIT_OK
    })
}

fn status_human(cx: &Context, st: &Status, out: &mut Out) {
    let config = &st.config;
    let enabled = config.automation_enabled.unwrap_or(false);
    out.line(&format!(
        "automatic capture: {}",
        if enabled { "enabled" } else { "not enabled" }
    ));
    out.line(&format!(
        "  every: {}, quiet: {}",
        format_duration(st.every),
        format_duration(config.quiet.unwrap_or(DEFAULT_QUIET))
    ));
    if let Some(s) = config.capture_since {
        out.line(&format!(
            "  capturing transcripts after: {}",
            crate::policy::iso(s)
        ));
    }
    if st.installed.is_empty() {
        out.line("  installed: nowhere");
    }
    for i in &st.installed {
        out.line(&format!("  installed: {} ({})", i.scheduler.name(), i.file));
        out.line(&format!(
            "    command: {} {}",
            i.program.as_deref().unwrap_or("?"),
            i.args.join(" ")
        ));
        out.line(&format!("    state: {}", i.live));
    }
    match &st.last {
        Some(l) => out.line(&format!(
            "  last sweep: {} (exit {}, {} started, {} need attention)",
            l["startedAt"].as_str().unwrap_or("?"),
            l["exit"],
            l["started"],
            l["needsAttention"]
        )),
        None => out.line("  last sweep: none recorded"),
    }
    for n in &st.notes {
        out.line(&format!("  note: {n}"));
    }
    out.line(&format!(
        "  logs: {} and {}",
        st.spec.out_log.display(),
        st.spec.err_log.display()
    ));
    if let Some(b) = crate::capture::breaker::read(&cx.almanac_home).filter(|b| b.tripped) {
        out.line(&format!(
            "  circuit breaker: tripped at {} ({}); the next sweep starts afresh",
            b.tripped_at.as_deref().unwrap_or("?"),
            b.reason.as_deref().unwrap_or("")
        ));
    }
    if st.drift.is_empty() {
        out.line("  drift: none");
    }
    for d in &st.drift {
        out.line(&format!("  drift: {}: {}", d.code, d.message));
    }
}

/// `capture sweep --scheduled`: whether a sweep is due now (see `automation::due`).
pub fn scheduled_due(cx: &Context, config: &Config) -> Result<(), NotDue> {
    let every = config.every.unwrap_or(DEFAULT_EVERY);
    due::scheduled_due(
        config,
        every,
        due::last_sweep_started(&cx.almanac_home),
        cx.now,
    )
}

pub struct SetupArgs {
    pub yes: bool,
    pub skip_automation: bool,
    pub every: Option<String>,
    pub job: JobArgs,
}

fn ask(question: &str, yes: bool) -> Option<bool> {
    if yes {
        return Some(true);
    }
    if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return None;
    }
    eprint!("{question} [Y/n] ");
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line).is_err() {
        return None;
    }
    let a = line.trim().to_lowercase();
    Some(a.is_empty() || a == "y" || a == "yes")
}

pub fn setup(
    cx: &Context,
    rules_dir: Option<&Path>,
    a: SetupArgs,
    out: &mut Out,
) -> Result<i32, Failure> {
    duration_flag("--auto-capture-every", a.every.as_deref(), false)?;
    if a.skip_automation {
        out.line("almanac: automatic wiki updates skipped (--skip-automation); enable later with `almanac automation install`");
    } else {
        let every = a
            .every
            .clone()
            .unwrap_or_else(|| format_duration(DEFAULT_EVERY));
        let q = format!(
            "Enable automatic wiki updates?\nRuns a local scheduled sweep every {} and captures new Claude/Codex session transcript updates for repos that have .almanac/.",
            humanize(&every)
        );
        match ask(&q, a.yes) {
            Some(true) => {
                install(
                    cx,
                    rules_dir,
                    InstallArgs {
                        every: Some(every),
                        quiet: None,
                        apps: None,
                        job: a.job.clone(),
                    },
                    out,
                )?;
            }
            Some(false) => out.line("almanac: automatic wiki updates not enabled; enable later with `almanac automation install`"),
            None => out.line("almanac: not a terminal, so not asking: automatic wiki updates not enabled; run `almanac setup --yes` or `almanac automation install`"),
        }
    }
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::Other(format!("cannot read the current directory: {e}")))?;
    let root = crate::init::repo_root(&cwd);
    if root.join(".almanac").is_dir() {
        out.line(&format!(
            "almanac: {} already has a wiki (.almanac/)",
            root.display()
        ));
    } else {
        match ask(
            &format!("Create a wiki (.almanac/) in {}?", root.display()),
            a.yes,
        ) {
            Some(true) => {
                crate::init::init(&root).map_err(|e| {
                    Failure::Other(format!("cannot create {}/.almanac: {e}", root.display()))
                })?;
                out.line(&format!(
                    "almanac: initialised {}",
                    root.join(".almanac").display()
                ));
            }
            _ => out.line(&format!(
                "almanac: no wiki created here; `almanac init` in a repo creates one ({})",
                root.display()
            )),
        }
    }
    Ok(EXIT_OK)
}

/// `5h` -> `5 hours` for the question a person reads.
fn humanize(d: &str) -> String {
    match parse_duration(d) {
        Ok(x) if x.as_secs() % 3600 == 0 => {
            let h = x.as_secs() / 3600;
            format!("{h} hour{}", if h == 1 { "" } else { "s" })
        }
        Ok(x) if x.as_secs() % 60 == 0 => format!("{} minutes", x.as_secs() / 60),
        _ => d.to_string(),
    }
}
