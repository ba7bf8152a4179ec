//! When `capture sweep --scheduled` sweeps: the OS only wakes us; a sweep is due when `every` has passed
//! since the last *full scheduled* sweep started (with a little slack, so a tick exactly one interval
//! later is due). A manual sweep, or one narrowed with `--apps`, does not count: it may have left out
//! apps (or repos' sessions) the schedule is for, so it never postpones the next scheduled sweep.

use crate::config::Config;
use crate::util::duration::format_duration;
use chrono::{DateTime, Utc};
use std::path::Path;
use std::time::Duration;

/// Why a scheduled sweep does nothing this time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotDue {
    /// `[automation.capture] enabled = false`.
    Disabled,
    /// The last sweep started `since` ago; the next is due after `next`.
    TooSoon {
        since: Duration,
        every: Duration,
        next: DateTime<Utc>,
    },
}

impl std::fmt::Display for NotDue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotDue::Disabled => f.write_str(
                "automatic capture is disabled ([automation.capture] enabled = false); nothing to do",
            ),
            NotDue::TooSoon { since, every, next } => write!(
                f,
                "capture sweep not due: last sweep {} ago, every {}; next after {}",
                format_duration(*since),
                format_duration(*every),
                crate::policy::iso(*next)
            ),
        }
    }
}

/// The member of `state/last-sweep.json` that says when the last full scheduled sweep started (the
/// file's `startedAt` is the last sweep of any kind, for `automation status`).
pub const SCHEDULED_STARTED: &str = "scheduledStartedAt";

/// When the last full scheduled sweep started (`state/last-sweep.json` under the almanac home).
pub fn last_sweep_started(almanac_home: &Path) -> Option<DateTime<Utc>> {
    std::fs::read(almanac_home.join("state/last-sweep.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| {
            v[SCHEDULED_STARTED]
                .as_str()
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        })
        .map(|t| t.with_timezone(&Utc))
}

/// A note for `automation status` when the recorded last sweep lies in the future, which the due check ignores.
pub fn future_note(last: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<String> {
    let last = last.filter(|l| *l > now)?;
    let ahead = (last - now).to_std().unwrap_or_default();
    Some(format!(
        "the last sweep is recorded at {}, {} in the future (clock moved back or a restored backup); it is ignored and the next scheduled tick sweeps",
        crate::policy::iso(last),
        format_duration(ahead)
    ))
}

/// Whether a scheduled sweep runs now: `every` is the configured interval (or its default), `last` when
/// the previous sweep started.
pub fn scheduled_due(
    config: &Config,
    every: Duration,
    last: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<(), NotDue> {
    if config.automation_enabled == Some(false) {
        return Err(NotDue::Disabled);
    }
    let slack = (every / 10).min(Duration::from_secs(300));
    // A last sweep in the future (clock moved back, a restored backup) is ignored, not waited for.
    let Some(last) = last.filter(|l| *l <= now) else {
        return Ok(());
    };
    let since = now
        .signed_duration_since(last)
        .to_std()
        .unwrap_or(Duration::ZERO);
    if since + slack >= every {
        return Ok(());
    }
    let next = last + chrono::Duration::from_std(every - slack).unwrap_or_default();
    Err(NotDue::TooSoon { since, every, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn due_without_a_last_sweep_and_not_when_disabled() {
        let now = at("2025-01-01T12:00:00Z");
        assert_eq!(scheduled_due(&Config::default(), HOUR, None, now), Ok(()));
        let off = Config {
            automation_enabled: Some(false),
            ..Config::default()
        };
        assert_eq!(scheduled_due(&off, HOUR, None, now), Err(NotDue::Disabled));
    }

    #[test]
    fn a_last_sweep_in_the_future_is_ignored() {
        let now = at("2025-01-01T12:00:00Z");
        let future = Some(at("2025-03-01T12:00:00Z"));
        assert_eq!(scheduled_due(&Config::default(), HOUR, future, now), Ok(()));
        let note = future_note(future, now).unwrap();
        assert!(
            note.contains("in the future") && note.contains("ignored"),
            "{note}"
        );
        assert_eq!(future_note(Some(now), now), None);
    }

    #[test]
    fn slack_makes_a_tick_just_short_of_the_interval_due() {
        let c = Config::default();
        let last = at("2025-01-01T10:00:00Z");
        // every 5h: slack is 5 minutes.
        let every = 5 * HOUR;
        assert_eq!(
            scheduled_due(&c, every, Some(last), at("2025-01-01T14:55:00Z")),
            Ok(())
        );
        let not = scheduled_due(&c, every, Some(last), at("2025-01-01T14:00:00Z")).unwrap_err();
        assert_eq!(
            not.to_string(),
            "capture sweep not due: last sweep 4h ago, every 5h; next after 2025-01-01T14:55:00.000Z"
        );
    }
}
