//! Before a sweep runs: which apps it covers, the settings and budget it decides with (flags over config),
//! and the machine-wide lock that keeps one live sweep at a time.

use crate::config::{Budget, Config};
use crate::policy::Settings;
use crate::rules::Catalog;
use crate::util::lock::{FileLock, Holder};
use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The policy settings a sweep (or `rules explain`) decides with: `quiet_flag` is `--quiet`, if given.
pub fn settings(now: DateTime<Utc>, config: &Config, quiet_flag: Option<Duration>) -> Settings {
    Settings {
        now,
        capture_since: config.capture_since,
        quiet_flag,
        quiet_config: config.quiet,
        max_attempts: config.capture.max_attempts,
    }
}

/// The apps config names (`[automation.capture] apps`), else every rule set enabled by default;
/// unchecked.
pub fn configured_apps(config: &Config, catalog: &Catalog) -> Vec<String> {
    config.apps.clone().unwrap_or_else(|| catalog.default_ids())
}

/// Why an app selection is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppsError {
    /// `--apps` is empty or names an unknown app (the message names the flag).
    Flag(String),
    /// `[automation.capture] apps` names an unknown app.
    Config(String),
}

/// The apps a sweep covers: `--apps a,b` (trimmed, de-duplicated in order), else the configured apps,
/// else every rule set enabled by default.
pub fn select_apps(
    raw: Option<&str>,
    config: &Config,
    catalog: &Catalog,
) -> Result<Vec<String>, AppsError> {
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
        return Err(AppsError::Flag(format!(
            "invalid --apps \"{}\" ({})",
            raw.unwrap_or(""),
            accepted()
        )));
    }
    for t in tokens {
        if !known.contains(&t.as_str()) {
            return Err(AppsError::Flag(format!(
                "invalid --apps \"{}\": unknown app \"{t}\" ({})",
                raw.unwrap_or(""),
                accepted()
            )));
        }
        if !apps.contains(&t) {
            apps.push(t);
        }
    }
    if !apps.is_empty() {
        return Ok(apps);
    }
    let Some(list) = &config.apps else {
        return Ok(catalog.default_ids());
    };
    for a in list {
        if !known.contains(&a.as_str()) {
            return Err(AppsError::Config(format!(
                "config file {}: automation.capture.apps: unknown app \"{a}\" ({})",
                "config.toml",
                accepted()
            )));
        }
        if !apps.contains(a) {
            apps.push(a.clone());
        }
    }
    Ok(apps)
}

/// The budget flags of `capture sweep`; each overrides its config value when given.
#[derive(Debug, Clone, Copy, Default)]
pub struct BudgetFlags {
    pub max_runs: Option<u64>,
    pub max_tokens: Option<u64>,
    pub max_tokens_per_run: Option<u64>,
}

/// What one sweep may spend: the configured budget with the flags given laid over it. A zero flag is
/// refused (the message names the flag).
pub fn budget(config: Budget, flags: BudgetFlags) -> Result<Budget, String> {
    for (name, v) in [
        ("--max-runs", flags.max_runs),
        ("--max-tokens", flags.max_tokens),
        ("--max-tokens-per-run", flags.max_tokens_per_run),
    ] {
        if v == Some(0) {
            return Err(format!("{name}: must be greater than zero"));
        }
    }
    Ok(Budget {
        max_runs: flags.max_runs.unwrap_or(config.max_runs),
        max_tokens: flags.max_tokens.or(config.max_tokens),
        max_tokens_per_run: flags
            .max_tokens_per_run
            .unwrap_or(config.max_tokens_per_run),
        ..config
    })
}

/// Why the sweep lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Another live sweep holds it: this one does nothing.
    Held {
        path: PathBuf,
        holder: Option<Holder>,
    },
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl LockError {
    /// The code a second sweep reports (`--json`'s `reason`).
    pub const HELD_REASON: &'static str = "sweep-already-running";
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held { path, holder } => {
                let who = holder
                    .as_ref()
                    .map(|h| format!(" (pid {} since {})", h.pid, h.started_at))
                    .unwrap_or_default();
                write!(
                    f,
                    "another capture sweep holds {}{who}; this one does nothing",
                    path.display()
                )
            }
            LockError::Io { path, error } => {
                write!(f, "cannot open the sweep lock {}: {error}", path.display())
            }
        }
    }
}

/// One live sweep at a time, machine-wide: the lock under the almanac home, held until dropped.
pub fn lock(almanac_home: &Path) -> Result<FileLock, LockError> {
    let path = almanac_home.join("capture-sweep.lock");
    match FileLock::try_acquire(&path) {
        Ok(Ok(l)) => Ok(l),
        Ok(Err(holder)) => Err(LockError::Held { path, holder }),
        Err(error) => Err(LockError::Io { path, error }),
    }
}

/// Removes temp files a crashed write left behind in the almanac home (ours only: their writer is dead).
pub fn remove_stale_temps(almanac_home: &Path) {
    crate::util::atomic::remove_stale_temps(almanac_home);
    crate::util::atomic::remove_stale_temps(&almanac_home.join("state"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_configured_budget_and_zero_is_refused() {
        let config = Budget::default();
        let b = budget(
            config,
            BudgetFlags {
                max_runs: Some(3),
                ..BudgetFlags::default()
            },
        )
        .unwrap();
        assert_eq!(b.max_runs, 3);
        assert_eq!(b.max_tokens_per_run, config.max_tokens_per_run);
        assert_eq!(b.breaker_failures, config.breaker_failures);
        let zero = BudgetFlags {
            max_tokens: Some(0),
            ..BudgetFlags::default()
        };
        assert_eq!(
            budget(config, zero).unwrap_err(),
            "--max-tokens: must be greater than zero"
        );
    }

    #[test]
    fn a_second_lock_is_refused_while_the_first_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path()).unwrap();
        match lock(dir.path()) {
            Err(e @ LockError::Held { .. }) => {
                assert!(e.to_string().starts_with("another capture sweep holds "))
            }
            Err(e) => panic!("expected Held, got {e}"),
            Ok(_) => panic!("a second lock was taken"),
        }
        drop(first);
        assert!(lock(dir.path()).is_ok());
    }
}
