//! Eligibility: a pure function from facts about one transcript (no I/O) and the sweep's settings to a
//! decision with a stable reason code. The checks, their order and their parameters come from
//! `rules/policy.yaml`.

use crate::reason::Reason;
use crate::rules::{CheckKind, Policy};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// What the sweep knows about a transcript when it asks the policy.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    pub app: &'a str,
    pub session_id: Option<&'a str>,
    pub cwd: Option<&'a str>,
    pub repo: Option<&'a Path>,
    /// Set when one of the rule set's `exclude_when` tests held.
    pub excluded_by: Option<&'a str>,
    pub mtime: DateTime<Utc>,
    pub size: u64,
    /// Bytes already captured (the ledger cursor); 0 when never captured.
    pub captured_bytes: u64,
    /// The file is the one the cursor was set on (same path, device and inode).
    pub same_file: bool,
    /// The session id is the agent session of one of almanac's own capture runs.
    pub internal: bool,
    /// A capture run for this transcript is queued or running.
    pub pending: bool,
    /// Failed runs in a row (the ledger entry's attempts).
    pub failed_attempts: u32,
    /// Turns with content (a prompt, assistant text or a tool call) in the uncaptured part, once it has
    /// been read; None before (or without turn rules).
    pub new_content_turns: Option<u64>,
}

/// Settings for one sweep, from flags and config.
#[derive(Debug, Clone)]
pub struct Settings {
    pub now: DateTime<Utc>,
    pub capture_since: Option<DateTime<Utc>>,
    /// `--quiet`: wins over everything.
    pub quiet_flag: Option<Duration>,
    /// `[automation.capture] quiet`: wins over the policy's default, not over its per-app values.
    pub quiet_config: Option<Duration>,
    /// `[capture] max_attempts`.
    pub max_attempts: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Eligible,
    Skip(Reason),
}

/// Whether a skip for `reason` is reported under needsAttention (a person must look at it).
pub fn needs_attention(policy: &Policy, reason: Reason) -> bool {
    policy
        .checks
        .iter()
        .any(|c| c.kind.reason() == reason && c.kind.needs_attention())
}

/// One check as evaluated, for `rules explain`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub check: Reason,
    pub enabled: bool,
    pub passed: bool,
    pub detail: String,
}

/// The quiet window that applies to `app`: `--quiet`, else the policy's per-app value, else the config
/// value, else the policy's default.
pub fn quiet_window(
    quiet: Duration,
    apps: &std::collections::BTreeMap<String, Duration>,
    app: &str,
    s: &Settings,
) -> Duration {
    s.quiet_flag
        .or_else(|| apps.get(app).copied())
        .or(s.quiet_config)
        .unwrap_or(quiet)
}

pub fn decide(policy: &Policy, f: &Facts<'_>, s: &Settings) -> (Decision, Vec<Step>) {
    let mut steps = Vec::new();
    let mut decision = Decision::Eligible;
    for check in &policy.checks {
        let (passed, detail) = evaluate(&check.kind, f, s);
        let code = check.kind.reason();
        steps.push(Step {
            check: code,
            enabled: check.enabled,
            passed,
            detail,
        });
        if (check.enabled || check.kind.required()) && !passed && decision == Decision::Eligible {
            decision = Decision::Skip(code);
        }
    }
    (decision, steps)
}

/// The decision alone, with the failing check's detail: what the sweep asks for each of thousands of
/// transcripts, so only one detail is ever put into words.
pub fn decide_fast(policy: &Policy, f: &Facts<'_>, s: &Settings) -> (Decision, Option<String>) {
    decide_worded(policy, f, s, |_| true)
}

/// As `decide_fast`, the detail put into words only for a reason `words` asks for: a sweep that only
/// counts what it skips holds no detail for each of 100k unchanged transcripts.
pub fn decide_worded(
    policy: &Policy,
    f: &Facts<'_>,
    s: &Settings,
    words: impl Fn(Reason) -> bool,
) -> (Decision, Option<String>) {
    for check in &policy.checks {
        if (check.enabled || check.kind.required()) && !passes(&check.kind, f, s) {
            let reason = check.kind.reason();
            let detail = words(reason).then(|| evaluate(&check.kind, f, s).1);
            return (Decision::Skip(reason), detail);
        }
    }
    (Decision::Eligible, None)
}

/// Whether a check passes; `evaluate` gives the same answer with words (a test keeps them equal).
fn passes(kind: &CheckKind, f: &Facts<'_>, s: &Settings) -> bool {
    match kind {
        CheckKind::NoSessionId => f.session_id.is_some(),
        CheckKind::NoCwd => f.cwd.is_some(),
        CheckKind::NoAlmanacRepo => f.repo.is_some(),
        CheckKind::InternalAlmanacSession => !f.internal,
        CheckKind::CaptureAlreadyPending => !f.pending,
        CheckKind::RetryBudgetExhausted => f.failed_attempts < s.max_attempts,
        CheckKind::ExcludedByRule => f.excluded_by.is_none(),
        CheckKind::BeforeAutomationActivation => {
            s.capture_since.is_none_or(|since| f.mtime >= since)
        }
        CheckKind::QuietWindow { quiet, apps } => {
            // A future mtime counts as now: idle for zero.
            let idle = s.now.signed_duration_since(f.mtime).to_std();
            idle.unwrap_or(Duration::ZERO) >= quiet_window(*quiet, apps, f.app, s)
        }
        CheckKind::NoNewContent => f.new_content_turns != Some(0),
        CheckKind::Unchanged => !(f.size == f.captured_bytes && f.same_file),
    }
}

fn evaluate(kind: &CheckKind, f: &Facts<'_>, s: &Settings) -> (bool, String) {
    match kind {
        CheckKind::NoSessionId => match f.session_id {
            Some(id) => (true, format!("session id {id}")),
            None => (false, "no session id in the head or the file name".into()),
        },
        CheckKind::NoCwd => match f.cwd {
            Some(c) => (true, format!("cwd {c}")),
            None => (false, "no cwd in the head of the transcript".into()),
        },
        CheckKind::NoAlmanacRepo => match (f.repo, f.cwd) {
            (Some(r), _) => (true, format!("repo {}", r.display())),
            (None, Some(c)) => (false, no_repo_words(c)),
            (None, None) => (false, "no cwd to map".into()),
        },
        CheckKind::InternalAlmanacSession => {
            if f.internal {
                (
                    false,
                    "the session of one of almanac's own capture runs".into(),
                )
            } else {
                (true, "not an almanac capture run".into())
            }
        }
        CheckKind::CaptureAlreadyPending => {
            if f.pending {
                (
                    false,
                    "a capture run for this transcript is queued or running".into(),
                )
            } else {
                (true, "no capture run pending".into())
            }
        }
        CheckKind::RetryBudgetExhausted => {
            if f.failed_attempts >= s.max_attempts {
                (
                    false,
                    format!(
                        "{} failed runs in a row (max_attempts {}); run `almanac capture reset <transcript>` after fixing the cause",
                        f.failed_attempts, s.max_attempts
                    ),
                )
            } else {
                (
                    true,
                    format!("{} of {} attempts used", f.failed_attempts, s.max_attempts),
                )
            }
        }
        CheckKind::ExcludedByRule => match f.excluded_by {
            Some(why) => (false, format!("exclude_when: {why}")),
            None => (true, "no exclude_when test holds".into()),
        },
        CheckKind::BeforeAutomationActivation => activation_detail(f, s),
        CheckKind::QuietWindow { quiet, apps } => {
            quiet_detail(quiet_window(*quiet, apps, f.app, s), f, s)
        }
        CheckKind::NoNewContent => match f.new_content_turns {
            None => (
                true,
                "not known before the new part is read (or the rule set has no turns section)"
                    .into(),
            ),
            Some(0) => (
                false,
                "the new part holds no user prompt, assistant text or tool call (only titles, snapshots, token counts, interrupt markers, local command output…)".into(),
            ),
            Some(n) => (true, format!("{n} new turns with content")),
        },
        CheckKind::Unchanged => unchanged_detail(f),
    }
}

fn activation_detail(f: &Facts<'_>, s: &Settings) -> (bool, String) {
    match s.capture_since {
        None => (true, "no [automation] capture_since set".into()),
        Some(since) if f.mtime < since => (
            false,
            format!(
                "modified {} before capture_since {}",
                iso(f.mtime),
                iso(since)
            ),
        ),
        Some(since) => (
            true,
            format!(
                "modified {} at or after capture_since {}",
                iso(f.mtime),
                iso(since)
            ),
        ),
    }
}

/// An mtime in the future (a clock moved back, a restored copy) counts as "now": idle for zero, so
/// `--quiet 0m` still takes it and a longer window waits as for a file written just now.
fn quiet_detail(window: Duration, f: &Facts<'_>, s: &Settings) -> (bool, String) {
    let idle = s.now.signed_duration_since(f.mtime);
    let fmt = crate::util::duration::format_duration;
    let w = fmt(window);
    let (idle_std, ahead) = match idle.to_std() {
        Ok(d) => (d, None),
        Err(_) => (Duration::ZERO, (-idle).to_std().ok()),
    };
    let eligible = idle_std >= window;
    let detail = match (ahead, eligible) {
        (Some(a), true) => format!(
            "mtime {} is in the future ({} ahead), counted as now (window {w})",
            iso(f.mtime),
            fmt(a)
        ),
        (Some(a), false) => format!(
            "mtime {} is in the future ({} ahead), counted as now: within the {w} quiet window",
            iso(f.mtime),
            fmt(a)
        ),
        (None, true) => format!("quiet for {} (window {w})", fmt(idle_std)),
        (None, false) => format!(
            "modified {} ago, within the {w} quiet window",
            fmt(idle_std)
        ),
    };
    (eligible, detail)
}

/// The detail of `no-almanac-repo` for a transcript whose cwd maps to no repo (a sweep's summary puts
/// it into words again from the cwd, `sweep::summary`).
pub fn no_repo_words(cwd: &str) -> String {
    format!("no directory holding .almanac/ at or above {cwd}")
}

/// The detail of `unchanged` for a transcript of `size` bytes, all captured (as `no_repo_words`).
pub fn unchanged_words(size: u64) -> String {
    format!("size {size} equals the captured cursor")
}

/// A shorter file is not "unchanged": it was truncated or replaced, which the prefix check reports.
fn unchanged_detail(f: &Facts<'_>) -> (bool, String) {
    if f.size == f.captured_bytes && f.same_file {
        (false, unchanged_words(f.size))
    } else if f.size > f.captured_bytes {
        (
            true,
            format!(
                "{} bytes after the captured cursor",
                f.size - f.captured_bytes
            ),
        )
    } else {
        (
            true,
            "the file changed identity or size; its prefix will be verified".into(),
        )
    }
}

pub fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Check, Origin};
    use std::collections::BTreeMap;

    fn policy() -> Policy {
        crate::rules::load(&[]).unwrap().policy
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn facts<'a>(repo: Option<&'a Path>, mtime: &str) -> Facts<'a> {
        Facts {
            app: "codex",
            session_id: Some("s1"),
            cwd: Some("/r"),
            repo,
            excluded_by: None,
            mtime: at(mtime),
            size: 100,
            captured_bytes: 0,
            same_file: true,
            internal: false,
            pending: false,
            failed_attempts: 0,
            new_content_turns: None,
        }
    }

    fn settings() -> Settings {
        Settings {
            now: at("2026-05-11T12:00:00Z"),
            capture_since: None,
            quiet_flag: None,
            quiet_config: None,
            max_attempts: 3,
        }
    }

    #[test]
    fn order_and_reasons() {
        let p = policy();
        let repo = Path::new("/r");
        assert_eq!(
            decide(&p, &facts(Some(repo), "2026-05-11T10:00:00Z"), &settings()).0,
            Decision::Eligible
        );
        assert_eq!(
            decide(&p, &facts(None, "2026-05-11T10:00:00Z"), &settings()).0,
            Decision::Skip(Reason::NoAlmanacRepo)
        );
        // Exactly quiet-old is eligible; a minute less is not.
        assert_eq!(
            decide(&p, &facts(Some(repo), "2026-05-11T11:15:00Z"), &settings()).0,
            Decision::Eligible
        );
        assert_eq!(
            decide(&p, &facts(Some(repo), "2026-05-11T11:16:00Z"), &settings()).0,
            Decision::Skip(Reason::QuietWindow)
        );
        let mut s = settings();
        s.capture_since = Some(at("2026-05-11T11:00:00Z"));
        assert_eq!(
            decide(&p, &facts(Some(repo), "2026-05-11T10:00:00Z"), &s).0,
            Decision::Skip(Reason::BeforeAutomationActivation)
        );
        let mut f = facts(Some(repo), "2026-05-11T10:00:00Z");
        f.captured_bytes = 100;
        assert_eq!(
            decide(&p, &f, &settings()).0,
            Decision::Skip(Reason::Unchanged)
        );
        // Truncated, or the same size in another file: not unchanged; the prefix check decides.
        f.captured_bytes = 200;
        assert_eq!(decide(&p, &f, &settings()).0, Decision::Eligible);
        f.captured_bytes = 100;
        f.same_file = false;
        assert_eq!(decide(&p, &f, &settings()).0, Decision::Eligible);
        let mut f = facts(Some(repo), "2026-05-11T10:00:00Z");
        f.internal = true;
        f.pending = true;
        assert_eq!(
            decide(&p, &f, &settings()).0,
            Decision::Skip(Reason::InternalAlmanacSession)
        );
        f.internal = false;
        assert_eq!(
            decide(&p, &f, &settings()).0,
            Decision::Skip(Reason::CaptureAlreadyPending)
        );
        f.pending = false;
        f.failed_attempts = 3;
        assert_eq!(
            decide(&p, &f, &settings()).0,
            Decision::Skip(Reason::RetryBudgetExhausted)
        );
        f.failed_attempts = 2;
        assert_eq!(decide(&p, &f, &settings()).0, Decision::Eligible);
        f.new_content_turns = Some(0);
        assert_eq!(
            decide(&p, &f, &settings()).0,
            Decision::Skip(Reason::NoNewContent)
        );
        f.new_content_turns = Some(1);
        assert_eq!(decide(&p, &f, &settings()).0, Decision::Eligible);
    }

    #[test]
    fn a_future_mtime_counts_as_now() {
        let p = policy();
        let f = facts(Some(Path::new("/r")), "2026-05-11T13:00:00Z");
        let mut s = settings();
        s.quiet_flag = Some(Duration::ZERO);
        assert_eq!(decide(&p, &f, &s).0, Decision::Eligible);
        assert_eq!(decide_fast(&p, &f, &s).0, Decision::Eligible);
        s.quiet_flag = Some(Duration::from_secs(45 * 60));
        let (d, detail) = decide_fast(&p, &f, &s);
        assert_eq!(d, Decision::Skip(Reason::QuietWindow));
        let detail = detail.unwrap();
        assert!(
            detail.contains("is in the future (1h ahead), counted as now")
                && !detail.contains("0s ago"),
            "{detail}"
        );
    }

    #[test]
    fn fast_and_explained_decisions_agree() {
        let p = policy();
        let repo = Path::new("/r");
        let mut cases = Vec::new();
        for mtime in [
            "2026-05-11T10:00:00Z",
            "2026-05-11T11:59:00Z",
            "2026-05-11T12:30:00Z",
        ] {
            for (size, captured, same, pending, internal, attempts, turns, repo) in [
                (100, 0, true, false, false, 0, None, Some(repo)),
                (100, 100, true, false, false, 0, None, Some(repo)),
                (100, 100, false, false, false, 0, Some(0), Some(repo)),
                (50, 100, true, true, false, 3, Some(2), Some(repo)),
                (100, 0, true, false, true, 0, None, None),
            ] {
                let mut f = facts(repo, mtime);
                f.size = size;
                f.captured_bytes = captured;
                f.same_file = same;
                f.pending = pending;
                f.internal = internal;
                f.failed_attempts = attempts;
                f.new_content_turns = turns;
                cases.push(f);
            }
        }
        let mut s = settings();
        s.capture_since = Some(at("2026-05-11T11:00:00Z"));
        for f in &cases {
            for st in [&settings(), &s] {
                let (slow, _) = decide(&p, f, st);
                let (fast, detail) = decide_fast(&p, f, st);
                assert_eq!(slow, fast, "{f:?}");
                assert_eq!(detail.is_some(), fast != Decision::Eligible);
                for c in &p.checks {
                    assert_eq!(
                        passes(&c.kind, f, st),
                        evaluate(&c.kind, f, st).0,
                        "{:?} {f:?}",
                        c.kind
                    );
                }
            }
        }
    }

    #[test]
    fn quiet_precedence_flag_then_app_then_config_then_default() {
        let mut apps = BTreeMap::new();
        apps.insert("codex".to_string(), Duration::from_secs(60));
        let q = Duration::from_secs(2700);
        let mut s = settings();
        assert_eq!(quiet_window(q, &apps, "claude", &s), q);
        s.quiet_config = Some(Duration::from_secs(600));
        assert_eq!(
            quiet_window(q, &apps, "claude", &s),
            Duration::from_secs(600)
        );
        assert_eq!(quiet_window(q, &apps, "codex", &s), Duration::from_secs(60));
        s.quiet_flag = Some(Duration::ZERO);
        assert_eq!(quiet_window(q, &apps, "codex", &s), Duration::ZERO);
    }

    #[test]
    fn disabled_checks_do_not_skip_and_order_is_data() {
        let mut p = policy();
        for c in &mut p.checks {
            if c.kind.code() == "quiet-window" {
                c.enabled = false;
            }
        }
        let repo = Path::new("/r");
        assert_eq!(
            decide(&p, &facts(Some(repo), "2026-05-11T11:59:00Z"), &settings()).0,
            Decision::Eligible
        );
        // Put unchanged before quiet-window: an unchanged, active file reports unchanged.
        let p2 = Policy {
            origin: Origin::Builtin("test"),
            checks: vec![
                Check {
                    kind: CheckKind::NoSessionId,
                    enabled: true,
                },
                Check {
                    kind: CheckKind::Unchanged,
                    enabled: true,
                },
                Check {
                    kind: CheckKind::QuietWindow {
                        quiet: Duration::from_secs(2700),
                        apps: BTreeMap::new(),
                    },
                    enabled: true,
                },
            ],
        };
        let mut f = facts(Some(repo), "2026-05-11T11:59:00Z");
        f.captured_bytes = 100;
        assert_eq!(
            decide(&p2, &f, &settings()).0,
            Decision::Skip(Reason::Unchanged)
        );
    }
}
