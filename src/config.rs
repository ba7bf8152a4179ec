//! `$ALMANAC_HOME/config.toml`: the user's settings. A file that does not parse, or a known key with a
//! wrong value, is an error naming the file and the key; the sweep never runs with half a config.

use crate::util::duration::parse_duration;
use chrono::{DateTime, Utc};
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Default, Clone)]
pub struct Config {
    /// `[automation] capture_since`: transcripts last modified before it are never captured.
    pub capture_since: Option<DateTime<Utc>>,
    /// `[automation.capture] quiet`.
    pub quiet: Option<Duration>,
    /// `[automation.capture] apps`.
    pub apps: Option<Vec<String>>,
}

#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

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
    let doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        let msg = e.to_string().replace('\n', " ").trim().to_string();
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
    Ok(cfg)
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
