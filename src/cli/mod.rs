//! Command-line arguments, their validation, and rendering. Raw clap arguments become validated options
//! in one step per command; the work itself lives in the stage modules.

mod args;
mod automation_cmds;
mod capture_cmds;
mod doctor;
mod explain;
mod now_cmd;
mod output;
mod rules_cmds;
mod sweep_cmd;
mod turns_cmds;

use crate::config;
use crate::context::Context;
use crate::rules::{self, Catalog};
use crate::sweep::setup;
use crate::util::duration::parse_duration;
use args::{AutomationCommand, CaptureCommand, Cli, Command, RulesCommand};
use clap::{CommandFactory, Parser};
use output::Out;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Exit codes (sysexits where one fits).
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
/// EX_TEMPFAIL: another sweep holds the lock; try again later.
pub const EXIT_LOCKED: i32 = 75;
pub const EXIT_CONFIG: i32 = 78;

/// A failure with the exit code it maps to.
pub enum Failure {
    Usage(String),
    Config(Vec<String>),
    Other(String),
}

impl Failure {
    fn code(&self) -> i32 {
        match self {
            Failure::Usage(_) => EXIT_USAGE,
            Failure::Config(_) => EXIT_CONFIG,
            Failure::Other(_) => EXIT_FAILURE,
        }
    }

    fn lines(&self) -> Vec<String> {
        match self {
            Failure::Usage(m) | Failure::Other(m) => vec![m.clone()],
            Failure::Config(ms) => ms.clone(),
        }
    }
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
        }
    };
    let mut out = Out::stdout(cli.command.json());
    match dispatch(cli, &mut out) {
        Ok(code) => code,
        Err(f) => {
            let lines = f.lines();
            out.emit(
                || serde_json::json!({"ok": false, "error": lines.join("\n")}),
                |_| {},
            );
            for l in &lines {
                eprintln!("almanac: {}", crate::util::term::visible(l));
            }
            f.code()
        }
    }
}

fn dispatch(cli: Cli, out: &mut Out) -> Result<i32, Failure> {
    for kv in &cli.env {
        match kv.split_once('=') {
            // Still one thread: nothing reads the environment concurrently.
            Some((k, v)) if !k.is_empty() && !k.contains('\0') && !v.contains('\0') => {
                std::env::set_var(k, v)
            }
            _ => return Err(Failure::Usage(format!("--env {kv:?}: expected NAME=VALUE"))),
        }
    }
    let cx = Context::from_env().map_err(|e| Failure::Other(e.to_string()))?;
    let rules_dir = cli.rules_dir.as_deref();
    if let Some(d) = rules_dir {
        if !d.is_dir() {
            return Err(Failure::Usage(format!(
                "--rules-dir {}: not a directory",
                d.display()
            )));
        }
    }
    match cli.command {
        Command::Capture(c) => capture_command(&cx, rules_dir, c, out),
        Command::Rules(c) => rules_command(&cx, rules_dir, c, out),
        Command::Automation(c) => automation_command(&cx, rules_dir, c, out),
        Command::Setup {
            yes,
            skip_automation,
            auto_capture_every,
            job,
        } => automation_cmds::setup(
            &cx,
            rules_dir,
            automation_cmds::SetupArgs {
                yes,
                skip_automation,
                every: auto_capture_every,
                job,
            },
            out,
        ),
        Command::Doctor { .. } => doctor::doctor(&cx, rules_dir, out),
        Command::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "almanac", &mut buf);
            out.line(String::from_utf8_lossy(&buf).trim_end());
            Ok(EXIT_OK)
        }
        Command::Man { out: dir } => man(dir, out),
        Command::Init { dir } => init_command(dir, out),
    }
}

fn capture_command(
    cx: &Context,
    rules_dir: Option<&Path>,
    command: CaptureCommand,
    out: &mut Out,
) -> Result<i32, Failure> {
    match command {
        CaptureCommand::Sweep(args) => sweep_cmd::sweep_command(cx, rules_dir, args, out),
        CaptureCommand::Now(args) => now_cmd::now_command(cx, rules_dir, args, out),
        CaptureCommand::Turns {
            transcript,
            since_line,
            latest,
            max_turns,
            app,
            conversation,
            ..
        } => {
            let catalog = load_catalog(cx, rules_dir)?;
            let args = turns_cmds::TurnsArgs {
                transcript: &transcript,
                since_line,
                latest,
                max_turns,
                app: app.as_deref(),
                conversation,
            };
            turns_cmds::turns(&catalog, cx, args, out)
        }
        CaptureCommand::Sessions {
            apps,
            repo,
            max_age,
            ..
        } => {
            let max_age = duration_flag("--max-age", max_age.as_deref())?;
            let config = load_config(cx)?;
            let catalog = load_catalog(cx, rules_dir)?;
            let apps = select_apps(apps.as_deref(), &config, &catalog)?;
            let args = turns_cmds::SessionsArgs {
                apps,
                repo,
                max_age,
            };
            turns_cmds::sessions(&catalog, cx, args, out)
        }
        CaptureCommand::Worker { repo } => Ok(crate::capture::worker::run_worker(cx, &repo)),
        CaptureCommand::Status { repo, .. } => capture_cmds::status(cx, repo, out),
        CaptureCommand::TrustPrompt { repo, sha256, .. } => {
            capture_cmds::trust_prompt(cx, repo, sha256, out)
        }
        CaptureCommand::Reset {
            transcript,
            store,
            repo,
            skip_existing,
            retries,
            ..
        } => {
            let Some(transcript) = transcript else {
                let store = store.unwrap_or_default();
                return capture_cmds::reset_store(cx, &store, out);
            };
            let catalog = load_catalog(cx, rules_dir)?;
            let how = match (skip_existing, retries) {
                (true, _) => capture_cmds::ResetHow::SkipExisting,
                (false, true) => capture_cmds::ResetHow::Retries,
                (false, false) => capture_cmds::ResetHow::Forget,
            };
            capture_cmds::reset(cx, &catalog, &transcript, repo, how, out)
        }
        CaptureCommand::Prune {
            older_than,
            repo,
            dry_run,
            ..
        } => {
            let age = parse_duration(&older_than)
                .map_err(|e| Failure::Usage(format!("--older-than: {e}")))?;
            let catalog = load_catalog(cx, rules_dir)?;
            capture_cmds::prune(cx, &catalog, repo, age, dry_run, out)
        }
    }
}

fn rules_command(
    cx: &Context,
    rules_dir: Option<&Path>,
    command: RulesCommand,
    out: &mut Out,
) -> Result<i32, Failure> {
    match command {
        RulesCommand::List { .. } => {
            let catalog = load_catalog(cx, rules_dir)?;
            // A config that does not read leaves the defaults (doctor and sweeps report the config).
            let config = config::load(&cx.config_path()).unwrap_or_default();
            let enabled = setup::configured_apps(&config, &catalog);
            output::rules_list(&catalog, cx, &enabled, out);
            Ok(EXIT_OK)
        }
        RulesCommand::Validate { files, .. } => {
            rules_cmds::validate_command(cx, rules_dir, files, out)
        }
        RulesCommand::Explain {
            transcript,
            app,
            quiet,
            ..
        } => {
            let catalog = load_catalog(cx, rules_dir)?;
            let config = load_config(cx)?;
            let quiet = duration_flag("--quiet", quiet.as_deref())?;
            let settings = setup::settings(cx.now, &config, quiet);
            explain::explain(&catalog, cx, &settings, &transcript, app.as_deref(), out)
        }
    }
}

fn automation_command(
    cx: &Context,
    rules_dir: Option<&Path>,
    command: AutomationCommand,
    out: &mut Out,
) -> Result<i32, Failure> {
    match command {
        AutomationCommand::Install {
            every,
            quiet,
            apps,
            job,
            ..
        } => {
            let args = automation_cmds::InstallArgs {
                every,
                quiet,
                apps,
                job,
            };
            automation_cmds::install(cx, rules_dir, args, out)
        }
        AutomationCommand::Status { check, .. } => {
            automation_cmds::status(cx, rules_dir, check, out)
        }
        AutomationCommand::Uninstall { .. } => automation_cmds::uninstall(cx, out),
    }
}

fn init_command(dir: Option<PathBuf>, out: &mut Out) -> Result<i32, Failure> {
    // Absolute, so the repo is remembered (known repos are absolute paths) wherever it was named from.
    let start = match dir {
        Some(d) => std::path::absolute(&d)
            .map(|p| crate::util::paths::normalize(&p))
            .map_err(|e| Failure::Usage(format!("{}: {e}", d.display())))?,
        None => std::env::current_dir()
            .map_err(|e| Failure::Other(format!("cannot read the current directory: {e}")))?,
    };
    let root = crate::init::repo_root(&start);
    let outcome = crate::init::init(&root)
        .map_err(|e| Failure::Other(format!("cannot create {}/.almanac: {e}", root.display())))?;
    // Remembered so stores inside projects are looked for here and a hashed project path is placed.
    if let Ok(cx) = Context::from_env() {
        if let Err(e) = crate::discover::registry::remember(&cx, [root.as_path()]) {
            out.line(&format!(
                "almanac: warning: cannot remember {}: {e}",
                root.display()
            ));
        }
    }
    if outcome.created.is_empty() {
        out.line(&format!(
            "almanac: {} is already initialised",
            outcome.wiki.display()
        ));
    } else {
        out.line(&format!("almanac: initialised {}", outcome.wiki.display()));
        for c in &outcome.created {
            out.line(&format!("  created {}", c.display()));
        }
    }
    Ok(EXIT_OK)
}

pub fn load_catalog(cx: &Context, rules_dir: Option<&Path>) -> Result<Catalog, Failure> {
    rules::load(&rules::rule_dirs(&cx.almanac_home, rules_dir))
        .map_err(|diags| Failure::Config(diags.iter().map(|d| d.to_string()).collect()))
}

pub fn load_config(cx: &Context) -> Result<config::Config, Failure> {
    config::load(&cx.config_path()).map_err(|e| Failure::Config(vec![e.0]))
}

/// A duration flag (`--quiet 45m`), when given; a malformed one is a usage error naming the flag.
fn duration_flag(name: &str, v: Option<&str>) -> Result<Option<Duration>, Failure> {
    v.map(|v| parse_duration(v).map_err(|e| Failure::Usage(format!("{name}: {e}"))))
        .transpose()
}

/// `--apps a,b`, else the configured apps, else every rule set enabled by default (see
/// `sweep::setup::select_apps`).
pub(super) fn select_apps(
    raw: Option<&str>,
    config: &config::Config,
    catalog: &Catalog,
) -> Result<Vec<String>, Failure> {
    setup::select_apps(raw, config, catalog).map_err(|e| match e {
        setup::AppsError::Flag(m) => Failure::Usage(m),
        setup::AppsError::Config(m) => Failure::Config(vec![m]),
    })
}

/// The man page from the same clap definitions as `--help`: the main page on stdout, or one page per
/// command (almanac.1, almanac-capture-sweep.1, ...) in `dir`.
fn man(dir: Option<PathBuf>, out: &mut Out) -> Result<i32, Failure> {
    let render = |cmd: clap::Command| -> Vec<u8> {
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut buf)
            .expect("rendering to memory");
        buf
    };
    let Some(dir) = dir else {
        out.line(String::from_utf8_lossy(&render(Cli::command())).trim_end());
        return Ok(EXIT_OK);
    };
    std::fs::create_dir_all(&dir).map_err(|e| Failure::Other(format!("{}: {e}", dir.display())))?;
    fn walk(cmd: &clap::Command, prefix: &str, pages: &mut Vec<(String, clap::Command)>) {
        let name = if prefix.is_empty() {
            cmd.get_name().to_string()
        } else {
            format!("{prefix}-{}", cmd.get_name())
        };
        // clap wants a static name; this runs once per command of a short-lived process.
        let static_name: &'static str = Box::leak(name.clone().into_boxed_str());
        pages.push((name.clone(), cmd.clone().name(static_name)));
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            walk(sub, &name, pages);
        }
    }
    let mut root = Cli::command();
    root.build();
    let mut pages = Vec::new();
    walk(&root, "", &mut pages);
    for (name, cmd) in pages {
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, render(cmd))
            .map_err(|e| Failure::Other(format!("{}: {e}", path.display())))?;
        out.line(&path.display().to_string());
    }
    Ok(EXIT_OK)
}
