//! Edits `config.toml` in place for `automation install` / `uninstall`.

use super::{parse, parse_toml, ConfigError};
use crate::util::duration::parse_duration;
use chrono::{DateTime, Utc};
use std::path::Path;
use std::time::Duration;

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
