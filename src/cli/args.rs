//! The command line as clap sees it: every command, its flags and their help text.

use super::automation_cmds;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "almanac",
    // The version and the commit it was built from (build.rs).
    version = env!("ALMANAC_VERSION_TEXT"),
    about = "Keeps a repository's .almanac/ wiki up to date from coding-agent transcripts"
)]
pub(super) struct Cli {
    /// Extra directory of rule files; they replace built-in rule sets with the same id, or add apps.
    #[arg(long, global = true, value_name = "DIR")]
    pub rules_dir: Option<PathBuf>,
    /// Set an environment variable before anything runs (`--env ALMANAC_HOME=/x`): how a Windows Task
    /// Scheduler entry, which has no environment of its own, carries the installer's.
    #[arg(long = "env", value_name = "NAME=VALUE", hide = true)]
    pub env: Vec<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
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
pub(super) enum AutomationCommand {
    /// Write config ([automation] capture_since, [automation.capture]) and register the scheduler job.
    Install {
        /// How often a sweep is due (default 5h, or the configured value).
        #[arg(long, value_name = "DURATION")]
        every: Option<String>,
        /// Quiet window the sweeps use (default 45m, or the configured value).
        #[arg(long, value_name = "DURATION")]
        quiet: Option<String>,
        /// Apps the sweeps cover, comma-separated; written to [automation.capture] apps (default: the
        /// configured apps, else the rule sets enabled by default).
        #[arg(long, value_name = "LIST")]
        apps: Option<String>,
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
pub(super) enum CaptureCommand {
    /// Find new transcript content and start background capture runs (or, with --dry-run, report).
    Sweep(SweepArgs),
    /// Capture one session now (default: the latest of this repo), in the background or --foreground.
    Now(NowArgs),
    /// Show a repo's capture ledger, pending runs and recent failures.
    Status {
        /// The repo (default: the nearest directory at or above the current one holding .almanac/).
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Show the repo's .almanac/prompts/capture.md (or what changed since it was last trusted) and use
    /// it once confirmed: after almanac's capture agent first ran in a repo, a changed prompt override is
    /// not used until it is confirmed here, on a terminal or with --sha256. Refused while a run is queued
    /// or running in the repo.
    TrustPrompt {
        /// The repo (default: the nearest directory at or above the current one holding .almanac/).
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        /// Trust the text only if this is its full sha256 (as the command shows it): for scripts, and
        /// wherever there is no terminal to confirm on.
        #[arg(long, value_name = "HASH")]
        sha256: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Forget a transcript's capture state: the next sweep starts it over (or, with --skip-existing,
    /// treats what it holds now as captured; with --retries, goes on from where capture stopped).
    /// Clears prefix-mismatch and retry-budget-exhausted. With --store, forgets why a store could not
    /// be read instead: the next sweep reads it again.
    Reset {
        #[arg(required_unless_present = "store")]
        transcript: Option<PathBuf>,
        /// A store file (a database, a JSON document, a log) whose remembered read failure to forget.
        #[arg(long, value_name = "PATH", conflicts_with_all = ["transcript", "repo", "skip_existing", "retries"])]
        store: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        /// Mark the transcript's current complete lines as captured instead of starting over.
        #[arg(long, conflicts_with = "retries")]
        skip_existing: bool,
        /// Only clear the failed attempts (retry-budget-exhausted): the cursor stays, and the next sweep
        /// captures from where the last successful capture ended.
        #[arg(long)]
        retries: bool,
        #[arg(long)]
        json: bool,
    },
    /// Delete finished run records and logs older than a duration, and ledger entries of sessions no
    /// transcript in any store holds any more.
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
        /// Read the file with this app's rule set, even outside its stores.
        #[arg(long, value_name = "ID")]
        app: Option<String>,
        /// The conversation a capture run of the lines after --since-line reads, as almanac renders it.
        #[arg(long, conflicts_with_all = ["latest"])]
        conversation: bool,
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
pub(super) struct SweepArgs {
    /// Report what would be captured; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Apps to sweep, comma-separated (default: [automation.capture] apps, else the rule sets enabled
    /// by default: claude, codex and any of your own).
    #[arg(long, value_name = "LIST")]
    pub apps: Option<String>,
    /// Quiet window: skip transcripts modified more recently than this (e.g. 45m, 0m).
    #[arg(long, value_name = "DURATION")]
    pub quiet: Option<String>,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when some transcript needs attention (for scripts and monitoring).
    #[arg(long)]
    pub strict: bool,
    /// Run by the OS scheduler: sweep only when [automation.capture] every has passed since the last one.
    #[arg(long)]
    pub scheduled: bool,
    /// Most runs this sweep starts (default: [automation.capture] max_runs_per_sweep, else 20).
    #[arg(long, value_name = "N")]
    pub max_runs: Option<u64>,
    /// Most estimated tokens this sweep spends (default: max_tokens_per_sweep, else unlimited).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// Larger new parts are captured in chunks of about this many tokens (default 150000).
    #[arg(long, value_name = "N")]
    pub max_tokens_per_run: Option<u64>,
}

#[derive(Args, Debug)]
pub(super) struct NowArgs {
    /// The session's transcript.
    #[arg(conflicts_with_all = ["session", "latest"])]
    pub transcript: Option<PathBuf>,
    /// The session with this id (of any app, or of --app).
    #[arg(long, value_name = "ID", conflicts_with = "latest")]
    pub session: Option<String>,
    /// The most recently modified session of the repo of the current directory (the default).
    #[arg(long)]
    pub latest: bool,
    /// Only this app's sessions.
    #[arg(long, value_name = "ID")]
    pub app: Option<String>,
    /// Run the capture in this process, show the agent's output, exit with its result.
    #[arg(long)]
    pub foreground: bool,
    /// The agent profile for this run (default: [capture] agent).
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Capture from line 1, whatever was captured before.
    #[arg(long)]
    pub from_start: bool,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub(super) enum RulesCommand {
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

impl Command {
    /// The command's `--json`, read once: every output of the run, an error's included, takes that form.
    pub fn json(&self) -> bool {
        match self {
            Command::Capture(CaptureCommand::Sweep(a)) => a.json,
            Command::Capture(CaptureCommand::Now(a)) => a.json,
            Command::Capture(
                CaptureCommand::Status { json, .. }
                | CaptureCommand::TrustPrompt { json, .. }
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
        }
    }
}
