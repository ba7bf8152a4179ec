//! Reads `config.toml` into a `Config`, one function per section. Keys are checked in a fixed order and
//! the first problem is the error, naming the file and the key.

use super::agents::check_placeholders;
use super::{
    parse_toml, AgentDef, AgentStdin, CaptureConfig, Config, ConfigError, SessionIdSource,
    StdoutEvent,
};
use crate::util::duration::parse_duration;
use chrono::{DateTime, Utc};
use std::path::Path;

/// Makes the error for a key: `config file <path>: <key>: <what>`.
type Bad<'a> = &'a dyn Fn(&str, String) -> ConfigError;

pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let file = path.display();
    let doc = parse_toml(text).map_err(|msg| {
        ConfigError(format!("config file {file}: not valid TOML: {msg}\n  help: fix the file or move it aside; nothing runs with a half-read config"))
    })?;
    let bad = |key: &str, what: String| ConfigError(format!("config file {file}: {key}: {what}"));
    let mut cfg = Config::default();
    if let Some(automation) = doc.get("automation") {
        parse_automation(automation, &mut cfg, &bad)?;
    }
    if let Some(capture) = doc.get("capture") {
        parse_capture(capture, &mut cfg.capture, &bad)?;
    }
    if let Some(stores) = doc.get("stores") {
        parse_stores(stores, &mut cfg.stores, &bad)?;
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

/// `[automation]`: `capture_since`, then `[automation.capture]`.
fn parse_automation(
    automation: &toml_edit::Item,
    cfg: &mut Config,
    bad: Bad<'_>,
) -> Result<(), ConfigError> {
    if let Some(item) = automation.get("capture_since") {
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
    if let Some(capture) = automation.get("capture") {
        parse_schedule(capture, cfg, bad)?;
        parse_budget(capture, cfg, bad)?;
        parse_apps(capture, cfg, bad)?;
    }
    Ok(())
}

/// `[automation.capture]` `quiet`, `enabled`, `every`, `program`.
fn parse_schedule(
    capture: &toml_edit::Item,
    cfg: &mut Config,
    bad: Bad<'_>,
) -> Result<(), ConfigError> {
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
    Ok(())
}

/// `[automation.capture]` `max_runs_per_sweep`, `max_tokens_per_sweep`, `max_tokens_per_run`,
/// `breaker_failures`.
fn parse_budget(
    capture: &toml_edit::Item,
    cfg: &mut Config,
    bad: Bad<'_>,
) -> Result<(), ConfigError> {
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
    Ok(())
}

/// `[automation.capture]` `apps`.
fn parse_apps(
    capture: &toml_edit::Item,
    cfg: &mut Config,
    bad: Bad<'_>,
) -> Result<(), ConfigError> {
    let Some(item) = capture.get("apps") else {
        return Ok(());
    };
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
    Ok(())
}

/// `[stores]`: `read_tracked_in` (a list of repo paths), `[stores.slug_repos]` (slug = repo path).
fn parse_stores(
    stores: &toml_edit::Item,
    out: &mut super::StoreSettings,
    bad: Bad<'_>,
) -> Result<(), ConfigError> {
    let absolute = |s: &str| s.starts_with('/') || s.starts_with('~') || Path::new(s).is_absolute();
    if let Some(item) = stores.get("read_tracked_in") {
        let what = "expected a list of absolute repo paths, e.g. [\"~/src/my-repo\"]";
        let list = item
            .as_array()
            .ok_or_else(|| bad("stores.read_tracked_in", what.into()))?;
        for v in list.iter() {
            match v.as_str() {
                Some(s) if absolute(s) => out.read_tracked_in.push(s.to_string()),
                _ => return Err(bad("stores.read_tracked_in", what.into())),
            }
        }
    }
    if let Some(item) = stores.get("slug_repos") {
        let what = "expected a table of slug = \"absolute repo path\", e.g. \"home-u-my-app\" = \"/home/u/my-app\"";
        let table = item
            .as_table_like()
            .ok_or_else(|| bad("stores.slug_repos", what.into()))?;
        for (slug, v) in table.iter() {
            match v.as_str() {
                Some(s) if absolute(s) && !slug.is_empty() => {
                    out.slug_repos.push((slug.to_string(), s.to_string()))
                }
                _ => return Err(bad(&format!("stores.slug_repos.{slug}"), what.into())),
            }
        }
    }
    Ok(())
}

/// `[capture]`: `agent`, `timeout`, `max_attempts`, `max_parallel_agents`, `max_log_bytes`, then
/// `[capture.agents.*]`.
fn parse_capture(
    capture: &toml_edit::Item,
    out: &mut CaptureConfig,
    bad: Bad<'_>,
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
    if let Some(item) = capture.get("max_parallel_agents") {
        let n = item
            .as_integer()
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| {
                bad(
                    "capture.max_parallel_agents",
                    "expected a whole number from 1 to 64".into(),
                )
            })?;
        out.max_parallel_agents = n as u32;
    }
    if let Some(item) = capture.get("max_log_bytes") {
        let n = item
            .as_integer()
            .filter(|n| (4096..=1 << 40).contains(n))
            .ok_or_else(|| {
                bad(
                    "capture.max_log_bytes",
                    "expected a whole number of bytes, at least 4096 (default 8388608)".into(),
                )
            })?;
        out.max_log_bytes = n as u64;
    }
    if let Some(agents) = capture.get("agents") {
        let table = agents.as_table_like().ok_or_else(|| {
            bad(
                "capture.agents",
                "expected tables like [capture.agents.mine]".into(),
            )
        })?;
        for (name, def) in table.iter() {
            let env = parse_env(name, def, bad)?;
            // A table with only `env` adds variables to the agent of that name (e.g. the built-in).
            match (
                out.agents.iter_mut().find(|a| a.name == name),
                def.get("command"),
            ) {
                (Some(existing), None) => existing.env = env,
                (Some(existing), Some(_)) => {
                    *existing = AgentDef {
                        env,
                        ..parse_agent(name, def, bad)?
                    }
                }
                (None, _) => out.agents.push(AgentDef {
                    env,
                    ..parse_agent(name, def, bad)?
                }),
            }
        }
    }
    Ok(())
}

/// `[capture.agents.<name>] env = { KEY = "value", ... }`: variables the agent gets on top of the
/// environment the worker inherited from the sweep. Names must be non-empty without `=` or NUL; values
/// strings without NUL.
fn parse_env(
    name: &str,
    def: &toml_edit::Item,
    bad: Bad<'_>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let key = format!("capture.agents.{name}.env");
    let Some(item) = def.get("env") else {
        return Ok(Vec::new());
    };
    let table = item.as_table_like().ok_or_else(|| {
        bad(
            &key,
            "expected a table of strings, e.g. env = { HTTPS_PROXY = \"http://proxy:3128\" }"
                .into(),
        )
    })?;
    let mut out = Vec::new();
    for (var, value) in table.iter() {
        let what = format!("{key}.{var}");
        if var.is_empty() || var.contains(['=', '\0']) {
            return Err(bad(
                &what,
                "a variable name must be non-empty, without '=' or NUL".into(),
            ));
        }
        let v = value.as_str().ok_or_else(|| {
            bad(
                &what,
                "expected a string value (quote numbers and booleans: \"1\")".into(),
            )
        })?;
        if v.contains('\0') {
            return Err(bad(&what, "the value contains a NUL byte".into()));
        }
        out.push((var.to_string(), v.to_string()));
    }
    Ok(out)
}

/// `[capture.agents.<name>]`: `command`, optionally `stdin` ("prompt" or "none"; by default the prompt
/// goes to stdin unless the command passes `{prompt}`), and optionally `stdout_session_event` with
/// `stdout_session_field`. A config-defined agent declares how almanac learns its session id in
/// these keys, translated here, once, to the explicit `SessionIdSource` a built-in profile states:
/// a `{session_id}` placeholder anywhere in `command` means the agent accepts a preset id (almanac
/// generates one and passes it); the two `stdout_session_*` keys mean it is read from stdout.
fn parse_agent(name: &str, def: &toml_edit::Item, bad: Bad<'_>) -> Result<AgentDef, ConfigError> {
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
    let from_stdout = match (event, field) {
        (Some(e), Some(f)) => Some(StdoutEvent {
            event: e.to_string(),
            field: f.to_string(),
        }),
        (None, None) => None,
        _ => {
            return Err(bad(
                &key,
                "set both stdout_session_event and stdout_session_field, or neither".into(),
            ))
        }
    };
    let preset = argv.iter().any(|a| a.contains("{session_id}"));
    let stdin = match def.get("stdin").map(|v| v.as_str()) {
        None => AgentStdin::default_for(&argv),
        Some(Some("prompt")) => AgentStdin::Prompt,
        Some(Some("none")) => AgentStdin::Null,
        Some(_) => {
            return Err(bad(
                &format!("{key}.stdin"),
                "expected \"prompt\" or \"none\"".into(),
            ))
        }
    };
    Ok(AgentDef {
        name: name.to_string(),
        command: argv,
        stdin,
        session_id: SessionIdSource {
            preset,
            from_stdout,
        },
        env: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn session_id_capability_is_translated_once_at_load() {
        let c = parse(
            "[capture.agents.pre]\ncommand = [\"pre\", \"--id={session_id}\"]\n[capture.agents.out]\ncommand = [\"out\", \"{prompt}\"]\nstdout_session_event = \"start\"\nstdout_session_field = \"id\"\n[capture.agents.none]\ncommand = [\"none\"]\n",
            Path::new("c.toml"),
        )
        .unwrap();
        let source = |name: &str| c.capture.agent_def(name).unwrap().session_id.clone();
        assert_eq!(
            source("pre"),
            SessionIdSource {
                preset: true,
                from_stdout: None
            }
        );
        assert_eq!(
            source("out"),
            SessionIdSource {
                preset: false,
                from_stdout: Some(StdoutEvent {
                    event: "start".into(),
                    field: "id".into()
                })
            }
        );
        assert_eq!(source("none"), SessionIdSource::default());
        // Redefining a built-in with its own command is the built-in again.
        let builtin = crate::config::builtin_agents()
            .into_iter()
            .find(|a| a.name == "claude")
            .unwrap();
        let quoted: Vec<String> = builtin.command.iter().map(|a| format!("{a:?}")).collect();
        let c = parse(
            &format!(
                "[capture.agents.claude]\ncommand = [{}]\n",
                quoted.join(", ")
            ),
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(c.capture.agent_def("claude"), Some(&builtin));
        let e = parse(
            "[capture.agents.x]\ncommand = [\"x\"]\nstdout_session_event = \"e\"\n",
            Path::new("c.toml"),
        )
        .unwrap_err();
        assert!(
            e.0.contains("capture.agents.x") && e.0.contains("or neither"),
            "{e}"
        );
    }

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
        assert_eq!(c.capture.max_parallel_agents, 2, "the default");
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
