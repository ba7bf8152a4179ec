//! Command-line arguments, their validation, and rendering. Raw clap arguments become validated options
//! in one step per command; the work itself lives in the stage modules.

mod automation_cmds;
mod capture_cmds;
mod doctor;
mod explain;
mod output;
mod turns_cmds;

use crate::config;
use crate::context::Context;
use crate::rules::{self, Catalog};
use crate::sweep;
use crate::util::duration::parse_duration;
use clap::{Args, CommandFactory, Parser, Subcommand};
use output::Out;
use std::path::PathBuf;

/// Exit codes (sysexits where one fits).
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
/// EX_TEMPFAIL: another sweep holds the lock; try again later.
pub const EXIT_LOCKED: i32 = 75;
pub const EXIT_CONFIG: i32 = 78;

#[derive(Parser, Debug)]
#[command(
    name = "almanac",
    version,
    about = "Keeps a repository's .almanac/ wiki up to date from coding-agent transcripts"
)]
struct Cli {
    /// Extra directory of rule files; they replace built-in rule sets with the same id, or add apps.
    #[arg(long, global = true, value_name = "DIR")]
    rules_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Find new transcript content and capture it into repo wikis.
    #[command(subcommand)]
    Capture(CaptureCommand),
    /// Inspect and check the rule sets that describe each agent app.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// Install, inspect or remove the OS scheduler job that runs `capture sweep --scheduled`.
    #[command(subcommand)]
    Automation(AutomationCommand),
    /// Guided set-up: enable automatic wiki updates and create .almanac/ for the current repo.
    Setup {
        /// Answer yes to every question (no prompts).
        #[arg(long)]
        yes: bool,
        /// Do not enable automatic capture.
        #[arg(long)]
        skip_automation: bool,
        /// How often the scheduled sweep runs (default 5h).
        #[arg(long, value_name = "DURATION")]
        auto_capture_every: Option<String>,
        #[command(flatten)]
        job: automation_cmds::JobArgs,
    },
    /// Why capture is or is not happening: rules, stores, repos, agent, scheduler, last sweep, problems.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (or, with --out DIR, write one page per command there).
    Man {
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Create .almanac/ at the git root (or the given directory).
    Init {
        /// Directory to initialise; default: the git root above the current directory, else the current directory.
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum AutomationCommand {
    /// Write config ([automation] capture_since, [automation.capture]) and register the scheduler job.
    Install {
        /// How often a sweep is due (default 5h, or the configured value).
        #[arg(long, value_name = "DURATION")]
        every: Option<String>,
        /// Quiet window the sweeps use (default 45m, or the configured value).
        #[arg(long, value_name = "DURATION")]
        quiet: Option<String>,
        #[command(flatten)]
        job: automation_cmds::JobArgs,
        #[arg(long)]
        json: bool,
    },
    /// What is configured, what is installed, the drift between them, and the last sweep.
    Status {
        #[arg(long)]
        json: bool,
        /// Exit 1 when installed and configured state differ.
        #[arg(long)]
        check: bool,
    },
    /// Remove the job from every scheduler (logs and state are kept).
    Uninstall {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum CaptureCommand {
    /// Find new transcript content and start background capture runs (or, with --dry-run, report).
    Sweep(SweepArgs),
    /// Show a repo's capture ledger, pending runs and recent failures.
    Status {
        /// The repo (default: the nearest directory at or above the current one holding .almanac/).
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Forget a transcript's capture state: the next sweep starts it over (or, with --skip-existing,
    /// treats what it holds now as captured). Clears prefix-mismatch and retry-budget-exhausted.
    Reset {
        transcript: PathBuf,
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        /// Mark the transcript's current complete lines as captured instead of starting over.
        #[arg(long)]
        skip_existing: bool,
        #[arg(long)]
        json: bool,
    },
    /// Delete finished run records and logs older than a duration, and ledger entries of transcripts
    /// that no longer exist.
    Prune {
        #[arg(long, value_name = "DURATION")]
        older_than: String,
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        /// Report what would be deleted.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
    /// A transcript's turns: user prompt, assistant text and tools, bounded (user 2 KiB, assistant 4 KiB).
    Turns {
        transcript: PathBuf,
        /// Only the part after this line.
        #[arg(long, value_name = "N", default_value_t = 0)]
        since_line: u64,
        /// Only the most recent user -> assistant exchange.
        #[arg(long)]
        latest: bool,
        /// Most turn records kept; older ones are dropped 100 at a time behind a marker.
        #[arg(long, value_name = "N", default_value_t = crate::turns::MAX_TURNS)]
        max_turns: usize,
        #[arg(long)]
        json: bool,
    },
    /// Discovered root sessions, most recent first, with their capture state.
    Sessions {
        /// Apps, comma-separated (default: as for capture sweep).
        #[arg(long, value_name = "LIST")]
        apps: Option<String>,
        /// Only sessions of this repo.
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        /// Only sessions modified within this long (e.g. 2h).
        #[arg(long, value_name = "DURATION")]
        max_age: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Runs a repo's queued captures (started by the sweep; not for direct use).
    #[command(hide = true)]
    Worker {
        #[arg(long, value_name = "DIR")]
        repo: PathBuf,
    },
}

#[derive(Args, Debug)]
struct SweepArgs {
    /// Report what would be captured; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Apps to sweep, comma-separated (default: [automation.capture] apps, else every loaded rule set).
    #[arg(long, value_name = "LIST")]
    apps: Option<String>,
    /// Quiet window: skip transcripts modified more recently than this (e.g. 45m, 0m).
    #[arg(long, value_name = "DURATION")]
    quiet: Option<String>,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Exit 1 when some transcript needs attention (for scripts and monitoring).
    #[arg(long)]
    strict: bool,
    /// Run by the OS scheduler: sweep only when [automation.capture] every has passed since the last one.
    #[arg(long)]
    scheduled: bool,
    /// Most runs this sweep starts (default: [automation.capture] max_runs_per_sweep, else 20).
    #[arg(long, value_name = "N")]
    max_runs: Option<u64>,
    /// Most estimated tokens this sweep spends (default: max_tokens_per_sweep, else unlimited).
    #[arg(long, value_name = "N")]
    max_tokens: Option<u64>,
    /// Larger new parts are captured in chunks of about this many tokens (default 150000).
    #[arg(long, value_name = "N")]
    max_tokens_per_run: Option<u64>,
}

#[derive(Subcommand, Debug)]
enum RulesCommand {
    /// List the loaded rule sets, where they come from, and their store roots.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Validate rule files (default: every loaded file) and report every problem.
    Validate {
        files: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Show how one transcript is read, classified, mapped and decided.
    Explain {
        transcript: PathBuf,
        /// Apply this rule set even when the file is not under one of its store roots.
        #[arg(long, value_name = "ID")]
        app: Option<String>,
        /// Quiet window to evaluate with (as for capture sweep).
        #[arg(long, value_name = "DURATION")]
        quiet: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

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
    let json = match &cli.command {
        Command::Capture(CaptureCommand::Sweep(a)) => a.json,
        Command::Capture(
            CaptureCommand::Status { json, .. }
            | CaptureCommand::Reset { json, .. }
            | CaptureCommand::Prune { json, .. }
            | CaptureCommand::Turns { json, .. }
            | CaptureCommand::Sessions { json, .. },
        ) => *json,
        Command::Capture(CaptureCommand::Worker { .. }) => false,
        Command::Rules(
            RulesCommand::List { json }
            | RulesCommand::Validate { json, .. }
            | RulesCommand::Explain { json, .. },
        ) => *json,
        Command::Init { .. }
        | Command::Setup { .. }
        | Command::Completions { .. }
        | Command::Man { .. } => false,
        Command::Doctor { json } => *json,
        Command::Automation(
            AutomationCommand::Install { json, .. }
            | AutomationCommand::Status { json, .. }
            | AutomationCommand::Uninstall { json },
        ) => *json,
    };
    let mut out = Out::stdout();
    match dispatch(cli, &mut out) {
        Ok(code) => code,
        Err(f) => {
            let lines = f.lines();
            if json {
                let v = serde_json::json!({"ok": false, "error": lines.join("\n")});
                out.json(&v);
            }
            for l in &lines {
                eprintln!("almanac: {l}");
            }
            f.code()
        }
    }
}

fn dispatch(cli: Cli, out: &mut Out) -> Result<i32, Failure> {
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
        Command::Capture(CaptureCommand::Sweep(args)) => sweep_command(&cx, rules_dir, args, out),
        Command::Capture(CaptureCommand::Turns {
            transcript,
            since_line,
            latest,
            max_turns,
            json,
        }) => {
            let catalog = load_catalog(&cx, rules_dir)?;
            turns_cmds::turns(
                &catalog,
                &cx,
                turns_cmds::TurnsArgs {
                    transcript: &transcript,
                    since_line,
                    latest,
                    max_turns,
                    json,
                },
                out,
            )
        }
        Command::Capture(CaptureCommand::Sessions {
            apps,
            repo,
            max_age,
            json,
        }) => {
            let max_age = match max_age {
                Some(m) => Some(
                    parse_duration(&m).map_err(|e| Failure::Usage(format!("--max-age: {e}")))?,
                ),
                None => None,
            };
            let config = load_config(&cx)?;
            let catalog = load_catalog(&cx, rules_dir)?;
            let apps = select_apps(apps.as_deref(), &config, &catalog)?;
            turns_cmds::sessions(
                &catalog,
                &cx,
                turns_cmds::SessionsArgs {
                    apps,
                    repo,
                    max_age,
                    json,
                },
                out,
            )
        }
        Command::Capture(CaptureCommand::Worker { repo }) => {
            Ok(crate::capture::worker::run_worker(&cx, &repo))
        }
        Command::Capture(CaptureCommand::Status { repo, json }) => {
            capture_cmds::status(&cx, repo, json, out)
        }
        Command::Capture(CaptureCommand::Reset {
            transcript,
            repo,
            skip_existing,
            json,
        }) => {
            let catalog = load_catalog(&cx, rules_dir)?;
            capture_cmds::reset(&cx, &catalog, &transcript, repo, skip_existing, json, out)
        }
        Command::Capture(CaptureCommand::Prune {
            older_than,
            repo,
            dry_run,
            json,
        }) => {
            let age = parse_duration(&older_than)
                .map_err(|e| Failure::Usage(format!("--older-than: {e}")))?;
            capture_cmds::prune(&cx, repo, age, dry_run, json, out)
        }
        Command::Rules(RulesCommand::List { json }) => {
            let catalog = load_catalog(&cx, rules_dir)?;
            output::rules_list(&catalog, &cx, json, out);
            Ok(EXIT_OK)
        }
        Command::Rules(RulesCommand::Validate { files, json }) => {
            validate_command(&cx, rules_dir, files, json, out)
        }
        Command::Rules(RulesCommand::Explain {
            transcript,
            app,
            quiet,
            json,
        }) => {
            let catalog = load_catalog(&cx, rules_dir)?;
            let config = load_config(&cx)?;
            let settings = settings(&cx, &config, quiet.as_deref())?;
            explain::explain(
                &catalog,
                &cx,
                &settings,
                &transcript,
                app.as_deref(),
                json,
                out,
            )
        }
        Command::Automation(AutomationCommand::Install {
            every,
            quiet,
            job,
            json,
        }) => automation_cmds::install(
            &cx,
            rules_dir,
            automation_cmds::InstallArgs {
                every,
                quiet,
                job,
                json,
            },
            out,
        ),
        Command::Automation(AutomationCommand::Status { json, check }) => {
            automation_cmds::status(&cx, json, check, out)
        }
        Command::Automation(AutomationCommand::Uninstall { json }) => {
            automation_cmds::uninstall(&cx, json, out)
        }
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
        Command::Doctor { json } => doctor::doctor(&cx, rules_dir, json, out),
        Command::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "almanac", &mut buf);
            out.line(String::from_utf8_lossy(&buf).trim_end());
            Ok(EXIT_OK)
        }
        Command::Man { out: dir } => man(dir, out),
        Command::Init { dir } => {
            let start = match dir {
                Some(d) => d,
                None => std::env::current_dir().map_err(|e| {
                    Failure::Other(format!("cannot read the current directory: {e}"))
                })?,
            };
            let root = crate::init::repo_root(&start);
            let outcome = crate::init::init(&root).map_err(|e| {
                Failure::Other(format!("cannot create {}/.almanac: {e}", root.display()))
            })?;
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
    }
}

pub fn load_catalog(cx: &Context, rules_dir: Option<&std::path::Path>) -> Result<Catalog, Failure> {
    rules::load(&rules::rule_dirs(&cx.almanac_home, rules_dir))
        .map_err(|diags| Failure::Config(diags.iter().map(|d| d.to_string()).collect()))
}

pub fn load_config(cx: &Context) -> Result<config::Config, Failure> {
    config::load(&cx.config_path()).map_err(|e| Failure::Config(vec![e.0]))
}

fn settings(
    cx: &Context,
    config: &config::Config,
    quiet: Option<&str>,
) -> Result<crate::policy::Settings, Failure> {
    let quiet_flag = match quiet {
        None => None,
        Some(q) => Some(parse_duration(q).map_err(|e| Failure::Usage(format!("--quiet: {e}")))?),
    };
    Ok(crate::policy::Settings {
        now: cx.now,
        capture_since: config.capture_since,
        quiet_flag,
        quiet_config: config.quiet,
        max_attempts: config.capture.max_attempts,
    })
}

/// `--apps a,b`: trimmed, de-duplicated in order; empty means the default.
fn select_apps(
    raw: Option<&str>,
    config: &config::Config,
    catalog: &Catalog,
) -> Result<Vec<String>, Failure> {
    let known = catalog.ids();
    let accepted = || format!("expected a comma-separated list of: {}", known.join(", "));
    let mut apps: Vec<String> = Vec::new();
    let tokens: Vec<String> = match raw {
        Some(r) => r
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        None => Vec::new(),
    };
    if raw.is_some() && tokens.is_empty() {
        return Err(Failure::Usage(format!(
            "invalid --apps \"{}\" ({})",
            raw.unwrap_or(""),
            accepted()
        )));
    }
    for t in tokens {
        if !known.contains(&t.as_str()) {
            return Err(Failure::Usage(format!(
                "invalid --apps \"{}\": unknown app \"{t}\" ({})",
                raw.unwrap_or(""),
                accepted()
            )));
        }
        if !apps.contains(&t) {
            apps.push(t);
        }
    }
    if apps.is_empty() {
        match &config.apps {
            Some(list) => {
                for a in list {
                    if !known.contains(&a.as_str()) {
                        return Err(Failure::Config(vec![format!(
                            "config file {}: automation.capture.apps: unknown app \"{a}\" ({})",
                            "config.toml",
                            accepted()
                        )]));
                    }
                    if !apps.contains(a) {
                        apps.push(a.clone());
                    }
                }
            }
            None => apps = known.iter().map(|s| s.to_string()).collect(),
        }
    }
    Ok(apps)
}

fn sweep_command(
    cx: &Context,
    rules_dir: Option<&std::path::Path>,
    args: SweepArgs,
    out: &mut Out,
) -> Result<i32, Failure> {
    // Flags are checked before anything is read, so a typo never costs a scan.
    if let Some(q) = &args.quiet {
        parse_duration(q).map_err(|e| Failure::Usage(format!("--quiet: {e}")))?;
    }
    let config = load_config(cx)?;
    let catalog = load_catalog(cx, rules_dir)?;
    let apps = select_apps(args.apps.as_deref(), &config, &catalog)?;
    let settings = settings(cx, &config, args.quiet.as_deref())?;
    let mut budget = config.budget;
    for (name, v) in [
        ("--max-runs", args.max_runs),
        ("--max-tokens", args.max_tokens),
        ("--max-tokens-per-run", args.max_tokens_per_run),
    ] {
        if v == Some(0) {
            return Err(Failure::Usage(format!("{name}: must be greater than zero")));
        }
    }
    budget.max_runs = args.max_runs.unwrap_or(budget.max_runs);
    budget.max_tokens = args.max_tokens.or(budget.max_tokens);
    budget.max_tokens_per_run = args.max_tokens_per_run.unwrap_or(budget.max_tokens_per_run);
    // One live sweep at a time, machine-wide. A dry run reads only and takes no lock.
    let _lock = if args.dry_run {
        None
    } else {
        let path = cx.almanac_home.join("capture-sweep.lock");
        match crate::util::lock::FileLock::try_acquire(&path) {
            Ok(Ok(l)) => Some(l),
            Ok(Err(holder)) => {
                let who = holder
                    .map(|h| format!(" (pid {} since {})", h.pid, h.started_at))
                    .unwrap_or_default();
                let msg = format!(
                    "another capture sweep holds {}{who}; this one does nothing",
                    path.display()
                );
                if args.json {
                    out.json(&serde_json::json!({"ok": false, "error": msg, "reason": "sweep-already-running"}));
                }
                eprintln!("almanac: {msg}");
                return Ok(EXIT_LOCKED);
            }
            Err(e) => {
                return Err(Failure::Other(format!(
                    "cannot open the sweep lock {}: {e}",
                    path.display()
                )))
            }
        }
    };
    if args.scheduled {
        if let Err(not_due) = automation_cmds::scheduled_due(cx, &config) {
            let why = not_due.to_string();
            // One line for the scheduler's log, and success: not being due is normal.
            if args.json {
                out.json(&serde_json::json!({"ok": true, "due": false, "reason": why}));
            } else {
                out.line(&format!("{} almanac: {why}", crate::policy::iso(cx.now)));
            }
            return Ok(EXIT_OK);
        }
    }
    if !args.dry_run {
        // Temp files a crashed write left behind (ours only: their writer is dead).
        crate::util::atomic::remove_stale_temps(&cx.almanac_home);
        crate::util::atomic::remove_stale_temps(&cx.almanac_home.join("state"));
    }
    let summary = sweep::run(
        &catalog,
        cx,
        &sweep::SweepOptions {
            apps,
            settings,
            dry_run: args.dry_run,
            agent: config.capture.agent.clone(),
            budget,
        },
    );
    let code = if args.strict && !summary.needs_attention.is_empty() {
        EXIT_FAILURE
    } else {
        EXIT_OK
    };
    if !args.dry_run {
        if let Err(e) = sweep::write_last_sweep(cx, &summary, code) {
            eprintln!(
                "almanac: cannot write {}: {e}",
                cx.almanac_home.join("state/last-sweep.json").display()
            );
        }
    }
    if args.json {
        #[derive(serde::Serialize)]
        struct Output<'a> {
            ok: bool,
            summary: &'a sweep::Summary,
        }
        out.json(&Output {
            ok: true,
            summary: &summary,
        });
    } else {
        output::sweep_human(&summary, out);
    }
    Ok(code)
}

fn validate_command(
    cx: &Context,
    rules_dir: Option<&std::path::Path>,
    files: Vec<PathBuf>,
    json: bool,
    out: &mut Out,
) -> Result<i32, Failure> {
    let (checked, diags): (Vec<String>, Vec<rules::Diagnostic>) = if files.is_empty() {
        let mut checked: Vec<String> = rules::BUILTIN_RULES
            .iter()
            .map(|(n, _)| format!("{n} (built in)"))
            .collect();
        checked.push(format!("{} (built in)", rules::BUILTIN_POLICY.0));
        for dir in rules::rule_dirs(&cx.almanac_home, rules_dir) {
            if let Ok(rd) = std::fs::read_dir(&dir) {
                let mut fs: Vec<String> = rd
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                    .map(|p| p.display().to_string())
                    .collect();
                fs.sort();
                checked.extend(fs);
            }
        }
        let diags = match rules::load(&rules::rule_dirs(&cx.almanac_home, rules_dir)) {
            Ok(_) => Vec::new(),
            Err(d) => d,
        };
        (checked, diags)
    } else {
        (
            files.iter().map(|f| f.display().to_string()).collect(),
            rules::validate_files(&files),
        )
    };
    if json {
        let items: Vec<_> = diags
            .iter()
            .map(|d| serde_json::json!({"file": d.file, "field": d.field, "message": d.message, "help": d.help}))
            .collect();
        out.json(&serde_json::json!({"ok": diags.is_empty(), "checked": checked, "errors": items}));
    } else if diags.is_empty() {
        for c in &checked {
            out.line(&format!("ok {c}"));
        }
    }
    if diags.is_empty() {
        Ok(EXIT_OK)
    } else {
        let mut lines: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
        lines.push(format!("{} problem(s) in rule files", diags.len()));
        if json {
            for l in &lines {
                eprintln!("almanac: {l}");
            }
            Ok(EXIT_CONFIG)
        } else {
            Err(Failure::Config(lines))
        }
    }
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
