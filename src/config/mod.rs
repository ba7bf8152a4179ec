//! `$ALMANAC_HOME/config.toml`: the user's settings. A file that does not parse, or a known key with a
//! wrong value, is an error naming the file and the key; the sweep never runs with half a config.
//!
//! `parse.rs` reads the file, `edit.rs` writes `automation install`'s keys back into it, and
//! `agents.rs` holds the capture agents (built-in profiles from `agents/*.yaml`).

mod agents;
mod edit;
mod parse;

pub use agents::{
    builtin_agents, placeholder_at, AgentDef, AgentStdin, SessionIdSource, StdoutEvent,
    PLACEHOLDERS,
};
pub use edit::{write_automation, AutomationSettings};
pub use parse::parse;

use chrono::{DateTime, Utc};
use std::path::Path;
use std::time::Duration;

/// The default `[capture] max_log_bytes`.
pub const DEFAULT_MAX_LOG_BYTES: u64 = 8 << 20;

#[derive(Debug, Clone)]
pub struct CaptureConfig {
    /// `[capture] agent`, default `claude`.
    pub agent: String,
    /// `[capture] timeout`, default 30m.
    pub timeout: Duration,
    /// `[capture] max_attempts`, default 3: failed runs before `retry-budget-exhausted`.
    pub max_attempts: u32,
    /// `[capture] max_parallel_agents`, default 2: agents running at once across all repos.
    pub max_parallel_agents: u32,
    /// `[capture] max_log_bytes`, default 8 MiB: the most of an agent's output a run log keeps.
    pub max_log_bytes: u64,
    pub agents: Vec<AgentDef>,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            agent: "claude".into(),
            timeout: Duration::from_secs(30 * 60),
            max_attempts: 3,
            max_parallel_agents: 2,
            max_log_bytes: DEFAULT_MAX_LOG_BYTES,
            agents: builtin_agents(),
        }
    }
}

impl CaptureConfig {
    pub fn agent_def(&self, name: &str) -> Option<&AgentDef> {
        self.agents.iter().find(|a| a.name == name)
    }
}

#[derive(Debug, Default, Clone)]
pub struct Config {
    pub capture: CaptureConfig,
    /// `[automation] capture_since`: transcripts last modified before it are never captured.
    pub capture_since: Option<DateTime<Utc>>,
    /// `[automation.capture] quiet`.
    pub quiet: Option<Duration>,
    /// `[automation.capture] apps`.
    pub apps: Option<Vec<String>>,
    /// `[automation.capture] enabled`: set by `automation install` / `uninstall`.
    pub automation_enabled: Option<bool>,
    /// `[automation.capture] every`: how often a scheduled sweep is due (default 5h).
    pub every: Option<Duration>,
    /// `[automation.capture] program`: the almanac binary the scheduler runs, recorded at install.
    pub program: Option<String>,
    pub budget: Budget,
    /// `[stores]`: how stores inside projects and lossy project names are trusted.
    pub stores: StoreSettings,
}

/// `[stores]`: what the user vouches for about stores that a repository may hold or that name a project
/// lossily. Paths as written (`~` expanded where they are used).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StoreSettings {
    /// `read_tracked_in`: repos whose agent stores that git tracks are the user's own sessions (by
    /// default a store file a repo commits is a stranger's and not read).
    pub read_tracked_in: Vec<String>,
    /// `[stores.slug_repos]`: a project slug (Cursor's `~/.cursor/projects/<slug>`) and the repo it
    /// stands for, placing sessions whose own content does not confirm the repo.
    pub slug_repos: Vec<(String, String)>,
}

/// What one sweep may spend (`[automation.capture]`; sweep flags override).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// `max_runs_per_sweep`, default 20: runs (chunks count one each) a sweep may start.
    pub max_runs: u64,
    /// `max_tokens_per_sweep`, default unlimited.
    pub max_tokens: Option<u64>,
    /// `max_tokens_per_run`, default 150000: a larger new part is captured in chunks.
    pub max_tokens_per_run: u64,
    /// `breaker_failures`, default 5: this many failed runs in a row stop a sweep's remaining runs.
    pub breaker_failures: u32,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_runs: 20,
            max_tokens: None,
            max_tokens_per_run: 150_000,
            breaker_failures: 5,
        }
    }
}

/// The documented heuristic: about four bytes of transcript JSON per token.
pub const BYTES_PER_TOKEN: u64 = 4;

#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Parses TOML into an editable document. toml_edit 0.23 can panic on some malformed input (found by
/// fuzzing: tests/fuzz_regressions/config/toml-edit-span-panic); such a file is reported as invalid TOML
/// like any other, without the panic's message.
fn parse_toml(text: &str) -> Result<toml_edit::DocumentMut, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(|| text.parse::<toml_edit::DocumentMut>());
    std::panic::set_hook(hook);
    match result {
        Ok(Ok(doc)) => Ok(doc),
        Ok(Err(e)) => Err(e.to_string().replace('\n', " ").trim().to_string()),
        Err(_) => Err("the TOML parser could not read it (it stopped on malformed input)".into()),
    }
}

pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
        Err(e) => {
            return Err(ConfigError(format!(
                "config file {}: cannot read: {e}",
                path.display()
            )))
        }
    };
    parse(&text, path)
}
