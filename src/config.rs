//! `$ALMANAC_HOME/config.toml`: the user's settings. A file that does not parse, or a known key with a
//! wrong value, is an error naming the file and the key; the sweep never runs with half a config.

use crate::util::duration::parse_duration;
use chrono::{DateTime, Utc};
use std::path::Path;
use std::time::Duration;

/// An agent that captures: an argv run without a shell in the repo root.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDef {
    pub name: String,
    pub command: Vec<String>,
    /// When set, the agent's session id is read from its stdout JSON lines: the `field` of the first line
    /// whose `type` is `event` (Codex: `thread.started` / `thread_id`).
    pub stdout_session: Option<(String, String)>,
}

pub const PLACEHOLDERS: &[&str] = &[
    "prompt",
    "prompt_file",
    "session_id",
    "transcript",
    "repo",
    "run_id",
];

/// The built-in agents. Flags checked against `claude --help` 2.1.332 and `codex exec --help` 0.171.0.
pub fn builtin_agents() -> Vec<AgentDef> {
    let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        AgentDef {
            name: "claude".into(),
            command: argv(&[
                "claude",
                "-p",
                "{prompt}",
                "--session-id",
                "{session_id}",
                "--permission-mode",
                "acceptEdits",
            ]),
            stdout_session: None,
        },
        AgentDef {
            name: "codex".into(),
            // --skip-git-repo-check: a wiki repo need not be a git repo (almanac init allows that).
            command: argv(&[
                "codex",
                "exec",
                "--json",
                "--sandbox",
                "workspace-write",
                "--skip-git-repo-check",
                "{prompt}",
            ]),
            stdout_session: Some(("thread.started".into(), "thread_id".into())),
        },
    ]
}

#[derive(Debug, Clone)]
pub struct CaptureConfig {
    /// `[capture] agent`, default `claude`.
    pub agent: String,
    /// `[capture] timeout`, default 30m.
    pub timeout: Duration,
    /// `[capture] max_attempts`, default 3: failed runs before `retry-budget-exhausted`.
    pub max_attempts: u32,
    pub agents: Vec<AgentDef>,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            agent: "claude".into(),
            timeout: Duration::from_secs(30 * 60),
            max_attempts: 3,
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

pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let file = path.display();
    let doc = parse_toml(text).map_err(|msg| {
        ConfigError(format!("config file {file}: not valid TOML: {msg}\n  help: fix the file or move it aside; nothing runs with a half-read config"))
    })?;
    let bad = |key: &str, what: String| ConfigError(format!("config file {file}: {key}: {what}"));
    let mut cfg = Config::default();
    let automation = doc.get("automation");
    if let Some(item) = automation.and_then(|a| a.get("capture_since")) {
        let s = item.as_str().ok_or_else(|| {
            bad(
                "automation.capture_since",
                "expected an RFC 3339 timestamp string".into(),
            )
        })?;
        let t = DateTime::parse_from_rfc3339(s).map_err(|e| {
            bad(
                "automation.capture_since",
                format!(
                    "\"{s}\" is not an RFC 3339 timestamp ({e}); e.g. \"2026-05-12T05:10:00Z\""
                ),
            )
        })?;
        cfg.capture_since = Some(t.with_timezone(&Utc));
    }
    if let Some(capture) = automation.and_then(|a| a.get("capture")) {
        if let Some(item) = capture.get("quiet") {
            let s = item.as_str().ok_or_else(|| {
                bad(
                    "automation.capture.quiet",
                    "expected a duration string like \"45m\"".into(),
                )
            })?;
            cfg.quiet = Some(parse_duration(s).map_err(|e| bad("automation.capture.quiet", e))?);
        }
        if let Some(item) = capture.get("enabled") {
            cfg.automation_enabled = Some(item.as_bool().ok_or_else(|| {
                bad(
                    "automation.capture.enabled",
                    "expected true or false".into(),
                )
            })?);
        }
        if let Some(item) = capture.get("every") {
            let s = item.as_str().ok_or_else(|| {
                bad(
                    "automation.capture.every",
                    "expected a duration string like \"5h\"".into(),
                )
            })?;
            let d = parse_duration(s).map_err(|e| bad("automation.capture.every", e))?;
            if d.is_zero() {
                return Err(bad(
                    "automation.capture.every",
                    "must be greater than zero".into(),
                ));
            }
            cfg.every = Some(d);
        }
        if let Some(item) = capture.get("program") {
            cfg.program = Some(
                item.as_str()
                    .ok_or_else(|| {
                        bad(
                            "automation.capture.program",
                            "expected an absolute path string".into(),
                        )
                    })?
                    .to_string(),
            );
        }
        let positive = |key: &str, item: &toml_edit::Item| -> Result<u64, ConfigError> {
            item.as_integer()
                .filter(|n| *n > 0)
                .map(|n| n as u64)
                .ok_or_else(|| {
                    bad(
                        &format!("automation.capture.{key}"),
                        "expected a whole number greater than zero".into(),
                    )
                })
        };
        if let Some(item) = capture.get("max_runs_per_sweep") {
            cfg.budget.max_runs = positive("max_runs_per_sweep", item)?;
        }
        if let Some(item) = capture.get("max_tokens_per_sweep") {
            cfg.budget.max_tokens = Some(positive("max_tokens_per_sweep", item)?);
        }
        if let Some(item) = capture.get("max_tokens_per_run") {
            cfg.budget.max_tokens_per_run = positive("max_tokens_per_run", item)?;
        }
        if let Some(item) = capture.get("breaker_failures") {
            cfg.budget.breaker_failures = positive("breaker_failures", item)?.min(10_000) as u32;
        }
        if let Some(item) = capture.get("apps") {
            let arr = item.as_array().ok_or_else(|| {
                bad(
                    "automation.capture.apps",
                    "expected a list like [\"claude\", \"codex\"]".into(),
                )
            })?;
            let mut apps = Vec::new();
            for v in arr.iter() {
                apps.push(
                    v.as_str()
                        .ok_or_else(|| {
                            bad(
                                "automation.capture.apps",
                                "every entry must be a string".into(),
                            )
                        })?
                        .to_string(),
                );
            }
            cfg.apps = Some(apps);
        }
    }
    if let Some(capture) = doc.get("capture") {
        parse_capture(capture, &mut cfg.capture, &bad)?;
    }
    if cfg.capture.agent_def(&cfg.capture.agent).is_none() {
        let names: Vec<&str> = cfg.capture.agents.iter().map(|a| a.name.as_str()).collect();
        return Err(bad(
            "capture.agent",
            format!(
                "unknown agent \"{}\" (defined: {}; add [capture.agents.{}] command = [...])",
                cfg.capture.agent,
                names.join(", "),
                cfg.capture.agent
            ),
        ));
    }
    Ok(cfg)
}

fn parse_capture(
    capture: &toml_edit::Item,
    out: &mut CaptureConfig,
    bad: &dyn Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if let Some(item) = capture.get("agent") {
        out.agent = item
            .as_str()
            .ok_or_else(|| {
                bad(
                    "capture.agent",
                    "expected an agent name like \"claude\"".into(),
                )
            })?
            .to_string();
    }
    if let Some(item) = capture.get("timeout") {
        let s = item.as_str().ok_or_else(|| {
            bad(
                "capture.timeout",
                "expected a duration string like \"30m\"".into(),
            )
        })?;
        out.timeout = parse_duration(s).map_err(|e| bad("capture.timeout", e))?;
        if out.timeout.is_zero() {
            return Err(bad("capture.timeout", "must be greater than zero".into()));
        }
    }
    if let Some(item) = capture.get("max_attempts") {
        let n = item
            .as_integer()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                bad(
                    "capture.max_attempts",
                    "expected a whole number from 1 to 1000".into(),
                )
            })?;
        out.max_attempts = n as u32;
    }
    if let Some(agents) = capture.get("agents") {
        let table = agents.as_table_like().ok_or_else(|| {
            bad(
                "capture.agents",
                "expected tables like [capture.agents.mine]".into(),
            )
        })?;
        for (name, def) in table.iter() {
            let key = format!("capture.agents.{name}");
            let command = def
                .get("command")
                .and_then(|c| c.as_array())
                .ok_or_else(|| {
                    bad(
                        &key,
                        "expected command = [\"program\", \"arg\", \"{prompt}\", ...]".into(),
                    )
                })?;
            let mut argv = Vec::new();
            for v in command.iter() {
                let s = v.as_str().ok_or_else(|| {
                    bad(
                        &format!("{key}.command"),
                        "every entry must be a string".into(),
                    )
                })?;
                check_placeholders(s).map_err(|e| bad(&format!("{key}.command"), e))?;
                argv.push(s.to_string());
            }
            if argv.is_empty() || argv[0].is_empty() {
                return Err(bad(
                    &format!("{key}.command"),
                    "the first entry must name the program".into(),
                ));
            }
            let event = def.get("stdout_session_event").and_then(|v| v.as_str());
            let field = def.get("stdout_session_field").and_then(|v| v.as_str());
            let stdout_session = match (event, field) {
                (Some(e), Some(f)) => Some((e.to_string(), f.to_string())),
                (None, None) => None,
                _ => {
                    return Err(bad(
                        &key,
                        "set both stdout_session_event and stdout_session_field, or neither".into(),
                    ))
                }
            };
            let agent = AgentDef {
                name: name.to_string(),
                command: argv,
                stdout_session,
            };
            match out.agents.iter_mut().find(|a| a.name == name) {
                Some(existing) => *existing = agent,
                None => out.agents.push(agent),
            }
        }
    }
    Ok(())
}

/// Rejects `{unknown}` placeholders so a typo fails loudly instead of reaching the agent.
fn check_placeholders(arg: &str) -> Result<(), String> {
    let mut rest = arg;
    while let Some(start) = rest.find('{') {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let name = &rest[start + 1..start + len];
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!(
                "unknown placeholder {{{name}}} in \"{arg}\" (known: {})",
                PLACEHOLDERS
                    .iter()
                    .map(|p| format!("{{{p}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        rest = &rest[start + len + 1..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_known_keys() {
        let c = parse(
            "# mine\n[automation]\ncapture_since = \"2026-05-12T05:10:00.000Z\"\n[automation.capture]\nquiet = \"10m\"\napps = [\"codex\"]\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(
            c.capture_since.unwrap().to_rfc3339(),
            "2026-05-12T05:10:00+00:00"
        );
        assert_eq!(c.quiet, Some(Duration::from_secs(600)));
        assert_eq!(c.apps, Some(vec!["codex".to_string()]));
    }

    #[test]
    fn agents_from_config() {
        let c = parse(
            "[capture]\nagent = \"fake\"\ntimeout = \"2m\"\nmax_attempts = 2\n[capture.agents.fake]\ncommand = [\"/bin/fake\", \"{prompt_file}\", \"{session_id}\"]\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(c.capture.agent, "fake");
        assert_eq!(c.capture.timeout, Duration::from_secs(120));
        assert_eq!(c.capture.max_attempts, 2);
        assert_eq!(
            c.capture.agent_def("fake").unwrap().command[1],
            "{prompt_file}"
        );
        assert!(c.capture.agent_def("claude").is_some());
        let e = parse("[capture]\nagent = \"nope\"\n", Path::new("c.toml")).unwrap_err();
        assert!(e.0.contains("capture.agent") && e.0.contains("nope"), "{e}");
        let e = parse(
            "[capture.agents.x]\ncommand = [\"x\", \"{promt}\"]\n",
            Path::new("c.toml"),
        )
        .unwrap_err();
        assert!(e.0.contains("{promt}"), "{e}");
    }

    #[test]
    fn errors_name_file_and_key() {
        let e = parse("[automation\n", Path::new("/x/config.toml")).unwrap_err();
        assert!(
            e.0.contains("/x/config.toml") && e.0.contains("not valid TOML"),
            "{e}"
        );
        let e = parse(
            "[automation]\ncapture_since = \"yesterday\"\n",
            Path::new("c.toml"),
        )
        .unwrap_err();
        assert!(
            e.0.contains("automation.capture_since") && e.0.contains("yesterday"),
            "{e}"
        );
    }
}

/// What `automation install` records in `config.toml`.
pub struct AutomationSettings {
    pub enabled: bool,
    pub every: Duration,
    pub quiet: Duration,
    pub apps: Vec<String>,
    pub program: String,
}

/// Edits `config.toml` in place with toml_edit, so the user's comments, order and other keys survive:
/// sets `[automation] capture_since` to `now` unless a valid one exists, and `[automation.capture]`
/// keys whose value differs. Writes atomically, and only when something changed. Returns
/// (changed, capture_since).
pub fn write_automation(
    path: &Path,
    now: DateTime<Utc>,
    settings: Option<&AutomationSettings>,
    enabled_only: Option<bool>,
) -> Result<(bool, Option<String>), ConfigError> {
    use toml_edit::{value, Array, Item, Table};
    let file = path.display();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(ConfigError(format!("config file {file}: cannot read: {e}"))),
    };
    // Refuse to edit what we cannot read: the user's file is never replaced by a guess.
    parse(&text, path)?;
    if let Some(dir) = path.parent() {
        crate::util::atomic::remove_stale_temps(dir);
    }
    let mut doc = parse_toml(&text).map_err(|e| ConfigError(format!("config file {file}: {e}")))?;
    if !doc.contains_key("automation") {
        let mut t = Table::new();
        t.set_implicit(true);
        doc.insert("automation", Item::Table(t));
    }
    let automation = doc["automation"]
        .as_table_mut()
        .ok_or_else(|| ConfigError(format!("config file {file}: automation: expected a table")))?;
    let mut since = automation
        .get("capture_since")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    if settings.is_some()
        && since
            .as_deref()
            .is_none_or(|s| DateTime::parse_from_rfc3339(s).is_err())
    {
        let iso = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        automation.insert("capture_since", value(iso.clone()));
        since = Some(iso);
    }
    if !automation.contains_key("capture") {
        automation.insert("capture", Item::Table(Table::new()));
    }
    let capture = automation["capture"].as_table_mut().ok_or_else(|| {
        ConfigError(format!(
            "config file {file}: automation.capture: expected a table"
        ))
    })?;
    let enabled = settings.map(|s| s.enabled).or(enabled_only);
    if let Some(e) = enabled {
        if capture.get("enabled").and_then(|v| v.as_bool()) != Some(e) {
            capture.insert("enabled", value(e));
        }
    }
    if let Some(s) = settings {
        let same_duration = |item: Option<&Item>, d: Duration| {
            item.and_then(|v| v.as_str())
                .and_then(|t| parse_duration(t).ok())
                == Some(d)
        };
        if !same_duration(capture.get("every"), s.every) {
            capture.insert(
                "every",
                value(crate::util::duration::format_duration(s.every)),
            );
        }
        if !same_duration(capture.get("quiet"), s.quiet) {
            capture.insert(
                "quiet",
                value(crate::util::duration::format_duration(s.quiet)),
            );
        }
        let current_apps: Option<Vec<String>> =
            capture.get("apps").and_then(|v| v.as_array()).map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            });
        if current_apps.as_ref() != Some(&s.apps) {
            let mut arr = Array::new();
            for a in &s.apps {
                arr.push(a.as_str());
            }
            capture.insert("apps", value(arr));
        }
        if capture.get("program").and_then(|v| v.as_str()) != Some(s.program.as_str()) {
            capture.insert("program", value(s.program.clone()));
        }
    }
    let new_text = doc.to_string();
    if new_text == text {
        return Ok((false, since));
    }
    crate::util::fault::point("config-edit");
    crate::util::atomic::write_atomic(path, new_text.as_bytes())
        .map_err(|e| ConfigError(format!("config file {file}: cannot write: {e}")))?;
    Ok((true, since))
}

#[cfg(test)]
mod edit_tests {
    use super::*;

    #[test]
    fn edits_keep_comments_and_other_keys_and_are_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        std::fs::write(&p, "# my settings\n[capture]\nagent = \"codex\" # I prefer codex\n\n[automation]\n# keep me\ncapture_since = \"2026-01-01T00:00:00.000Z\"\n").unwrap();
        let s = AutomationSettings {
            enabled: true,
            every: Duration::from_secs(5 * 3600),
            quiet: Duration::from_secs(2700),
            apps: vec!["claude".into(), "codex".into()],
            program: "/usr/local/bin/almanac".into(),
        };
        let now = Utc::now();
        let (changed, since) = write_automation(&p, now, Some(&s), None).unwrap();
        assert!(changed);
        assert_eq!(
            since.as_deref(),
            Some("2026-01-01T00:00:00.000Z"),
            "an existing activation time is kept"
        );
        let text = std::fs::read_to_string(&p).unwrap();
        for kept in [
            "# my settings",
            "agent = \"codex\" # I prefer codex",
            "# keep me",
        ] {
            assert!(text.contains(kept), "{text}");
        }
        let c = parse(&text, &p).unwrap();
        assert_eq!(c.every, Some(Duration::from_secs(18000)));
        assert_eq!(c.automation_enabled, Some(true));
        assert_eq!(c.program.as_deref(), Some("/usr/local/bin/almanac"));
        assert_eq!(c.capture.agent, "codex");
        let (changed, _) = write_automation(&p, now, Some(&s), None).unwrap();
        assert!(!changed, "re-running changes nothing");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), text);
    }
}
