//! Drift: where what the schedulers hold differs from what config says. Each finding has a stable code
//! (shown by `automation status` and `doctor`) and a message naming the command that fixes it.

use super::{Installed, Kind, SWEEP_ARGS};
use crate::config::Config;
use crate::util::duration::format_duration;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::time::Duration;

/// Why installed and configured state differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriftCode {
    NotInstalled,
    InstalledButDisabled,
    ForeignScheduler,
    ProgramMissing,
    ProgramMismatch,
    FileModified,
    IntervalMismatch,
    /// The entry's environment (ALMANAC_HOME, store variables) differs from this one.
    EnvironmentMismatch,
    /// A problem only one scheduler can see, with the code its adapter gave it.
    Scheduler(String),
}

impl DriftCode {
    pub fn as_str(&self) -> &str {
        match self {
            DriftCode::NotInstalled => "not-installed",
            DriftCode::InstalledButDisabled => "installed-but-disabled",
            DriftCode::ForeignScheduler => "foreign-scheduler",
            DriftCode::ProgramMissing => "program-missing",
            DriftCode::ProgramMismatch => "program-mismatch",
            DriftCode::FileModified => "file-modified",
            DriftCode::IntervalMismatch => "interval-mismatch",
            DriftCode::EnvironmentMismatch => "environment-mismatch",
            DriftCode::Scheduler(code) => code,
        }
    }
}

impl std::fmt::Display for DriftCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DriftCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    pub code: DriftCode,
    pub message: String,
}

fn drift(code: DriftCode, message: String) -> Drift {
    Drift { code, message }
}

/// Every difference between `config` and what the schedulers hold (`installed`); `every` is the
/// configured interval (or its default), `env` the variables a job installed from this environment carries.
pub fn drifts(
    config: &Config,
    installed: &[Installed],
    every: Duration,
    env: &BTreeMap<String, String>,
) -> Vec<Drift> {
    let mut out = Vec::new();
    let enabled = config.automation_enabled.unwrap_or(false);
    if enabled && installed.is_empty() {
        out.push(drift(DriftCode::NotInstalled, "config enables automatic capture but no scheduler holds it; run `almanac automation install`".into()));
    }
    if !enabled && !installed.is_empty() {
        out.push(drift(DriftCode::InstalledButDisabled, "a scheduler holds the sweep but config does not enable it; run `almanac automation install` or `uninstall`".into()));
    }
    if installed.len() > 1 {
        let names: Vec<&str> = installed.iter().map(|i| i.scheduler.name()).collect();
        out.push(drift(DriftCode::ForeignScheduler, format!("installed in more than one scheduler ({}); run `almanac automation install` to keep one", names.join(", "))));
    }
    for i in installed {
        out.extend(scheduler_drifts(config, i, every));
        out.extend(env_drift(i, env));
    }
    out
}

/// The entry's variables against this environment's: one finding listing every difference.
fn env_drift(i: &Installed, env: &BTreeMap<String, String>) -> Option<Drift> {
    let shown = |v: Option<&String>| v.map_or("unset".to_string(), |v| format!("{v:?}"));
    let diffs: Vec<String> = env
        .keys()
        .chain(i.env.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| env.get(*k) != i.env.get(*k))
        .map(|k| {
            format!(
                "{k} is {} there, {} here",
                shown(i.env.get(k)),
                shown(env.get(k))
            )
        })
        .collect();
    (!diffs.is_empty()).then(|| {
        drift(
            DriftCode::EnvironmentMismatch,
            format!(
                "{} runs with another environment ({}); run `almanac automation install` from the environment scheduled sweeps should use",
                i.scheduler.name(),
                diffs.join("; ")
            ),
        )
    })
}

/// What one scheduler's job gets wrong: its program, its command, its interval, its own problems.
fn scheduler_drifts(config: &Config, i: &Installed, every: Duration) -> Vec<Drift> {
    let mut out = Vec::new();
    let name = i.scheduler.name();
    match &i.program {
        Some(p) => {
            if !crate::platform::is_executable(std::path::Path::new(p)) {
                out.push(drift(DriftCode::ProgramMissing, format!("{name} runs {p}, which does not exist or is not executable; reinstall almanac or run `almanac automation install --program PATH`")));
            } else if config.program.as_deref().is_some_and(|c| c != p) {
                out.push(drift(
                    DriftCode::ProgramMismatch,
                    format!(
                        "{name} runs {p} but config records {}; run `almanac automation install`",
                        config.program.as_deref().unwrap_or("")
                    ),
                ));
            }
        }
        None => out.push(drift(
            DriftCode::ProgramMissing,
            format!("{name}: no program in {}", i.file),
        )),
    }
    if i.args != SWEEP_ARGS {
        out.push(drift(DriftCode::FileModified, format!("{name} runs `{}`, not `capture sweep --scheduled`; run `almanac automation install`", i.args.join(" "))));
    }
    if matches!(i.scheduler, Kind::Launchd | Kind::Schtasks)
        && i.interval_secs != Some(every.as_secs())
    {
        out.push(drift(
            DriftCode::IntervalMismatch,
            format!("{name} repeats every {}s but config says every {}; run `almanac automation install`", i.interval_secs.unwrap_or(0), format_duration(every)),
        ));
    }
    for p in &i.problems {
        let (code, msg) = p.split_once(": ").unwrap_or(("scheduler-problem", p));
        out.push(drift(
            DriftCode::Scheduler(code.to_string()),
            format!("{name}: {msg}"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installed(kind: Kind, args: &[&str]) -> Installed {
        Installed {
            scheduler: kind,
            file: "/f".into(),
            program: Some("/bin/sh".into()),
            args: args.iter().map(|s| s.to_string()).collect(),
            interval_secs: Some(3600),
            env: BTreeMap::new(),
            live: serde_json::Value::Null,
            problems: vec!["not-loaded: the job is not loaded".into(), "odd".into()],
        }
    }

    #[test]
    fn enabled_but_nowhere_is_not_installed() {
        let config = Config {
            automation_enabled: Some(true),
            ..Config::default()
        };
        let d = drifts(&config, &[], Duration::from_secs(3600), &BTreeMap::new());
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].code, DriftCode::NotInstalled);
    }

    #[test]
    fn scheduler_findings_keep_their_codes() {
        let config = Config {
            automation_enabled: Some(true),
            ..Config::default()
        };
        let d = drifts(
            &config,
            &[installed(Kind::Cron, &["capture", "sweep"])],
            Duration::from_secs(3600),
            &BTreeMap::new(),
        );
        let codes: Vec<&str> = d.iter().map(|d| d.code.as_str()).collect();
        assert_eq!(codes, ["file-modified", "not-loaded", "scheduler-problem"]);
        assert_eq!(
            serde_json::to_value(&d[1]).unwrap(),
            serde_json::json!({"code": "not-loaded", "message": "cron: the job is not loaded"})
        );
    }
}
