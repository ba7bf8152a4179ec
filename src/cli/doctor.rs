//! `almanac doctor`: one screen that says why capture is or is not happening, each problem with the
//! command that fixes it. Exit 0 when nothing is wrong, 1 when something is.

use super::output::Out;
use super::{Failure, EXIT_FAILURE, EXIT_OK};
use crate::context::Context;
use crate::discover::{self, resolve_roots};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Check {
    /// `ok`, `warn` or `fail`.
    status: &'static str,
    name: String,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(status: &'static str, name: &str, detail: String, fix: Option<String>) -> Check {
    Check {
        status,
        name: name.to_string(),
        detail,
        fix,
    }
}

/// `<program> --version`, bounded in time.
fn version_of(program: &Path) -> Option<String> {
    let mut child = std::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let start = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut s = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut s).ok()?;
    s.lines()
        .next()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
}

pub fn doctor(
    cx: &Context,
    rules_dir: Option<&Path>,
    json: bool,
    out: &mut Out,
) -> Result<i32, Failure> {
    let mut checks = Vec::new();
    let config = match crate::config::load(&cx.config_path()) {
        Ok(c) => {
            checks.push(check(
                "ok",
                "config",
                format!("{} reads", cx.config_path().display()),
                None,
            ));
            Some(c)
        }
        Err(e) => {
            checks.push(check(
                "fail",
                "config",
                e.0,
                Some(format!("fix or move aside {}", cx.config_path().display())),
            ));
            None
        }
    };
    let catalog = match super::load_catalog(cx, rules_dir) {
        Ok(c) => {
            checks.push(check(
                "ok",
                "rules",
                format!(
                    "{} rule sets ({}), policy from {}",
                    c.sets.len(),
                    c.ids().join(", "),
                    c.policy.origin
                ),
                None,
            ));
            Some(c)
        }
        Err(f) => {
            let lines = match f {
                Failure::Config(l) => l,
                _ => vec!["rules did not load".into()],
            };
            checks.push(check(
                "fail",
                "rules",
                lines.join("; "),
                Some("almanac rules validate".into()),
            ));
            None
        }
    };
    if let (Some(config), Some(catalog)) = (&config, &catalog) {
        // Stores, with how many transcripts each holds.
        for rule in &catalog.sets {
            let mut found = Vec::new();
            for store in &rule.stores {
                for root in resolve_roots(store, cx).into_iter().filter(|r| r.exists) {
                    found.push(root.path.display().to_string());
                }
            }
            let mut files = Vec::new();
            discover::walk_rule_set(
                rule,
                cx,
                &mut Default::default(),
                &mut Default::default(),
                &mut files,
            );
            if found.is_empty() {
                checks.push(check("warn", &format!("{} stores", rule.id), "no store directory exists".into(), Some(format!("nothing to capture from {} yet; `almanac rules list` shows where almanac looks", rule.name))));
            } else {
                checks.push(check(
                    "ok",
                    &format!("{} stores", rule.id),
                    format!("{} transcripts in {}", files.len(), found.join(", ")),
                    None,
                ));
            }
        }
        // What a sweep would do now.
        let settings = crate::policy::Settings {
            now: cx.now,
            capture_since: config.capture_since,
            quiet_flag: None,
            quiet_config: config.quiet,
            max_attempts: config.capture.max_attempts,
        };
        let apps = config
            .apps
            .clone()
            .unwrap_or_else(|| catalog.ids().iter().map(|s| s.to_string()).collect());
        let summary = crate::sweep::run(
            catalog,
            cx,
            &crate::sweep::SweepOptions {
                apps,
                settings,
                dry_run: true,
                agent: config.capture.agent.clone(),
                budget: config.budget,
            },
        );
        let repos: BTreeSet<String> = summary
            .started
            .iter()
            .map(|s| s.repo_root.clone())
            .chain(
                summary
                    .skipped
                    .iter()
                    .chain(&summary.needs_attention)
                    .filter_map(|s| s.repo_root.clone()),
            )
            .collect();
        if repos.is_empty() {
            checks.push(check(
                "warn",
                "repos",
                "no transcript belongs to a repo with .almanac/".into(),
                Some("run `almanac init` in a repo you work on with an agent".into()),
            ));
        } else {
            checks.push(check(
                "ok",
                "repos",
                format!(
                    "{} repos with .almanac/: {}",
                    repos.len(),
                    repos.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
                None,
            ));
        }
        checks.push(check(
            "ok",
            "sweep",
            format!(
                "a sweep now would start {} runs ({} sessions scanned)",
                summary.started.len(),
                summary.scanned
            ),
            None,
        ));
        // Recent failed runs in each repo (they are retried by the next sweep, within max_attempts).
        for repo in &repos {
            let runs = crate::ledger::record::list(&crate::ledger::runs_dir(Path::new(repo)));
            for r in runs
                .iter()
                .rev()
                .filter(|r| r.status == crate::ledger::RunStatus::Failed)
                .take(3)
            {
                checks.push(check(
                    "warn",
                    &format!("failed run {}", r.run_id),
                    format!(
                        "{} {}: {} (log: {})",
                        r.app,
                        r.session_id,
                        r.error.as_deref().unwrap_or("failed"),
                        r.log_path
                    ),
                    Some(format!("almanac capture status --repo {repo}")),
                ));
            }
        }
        for item in &summary.needs_attention {
            let fix = match item.reason.code() {
                "prefix-mismatch" | "retry-budget-exhausted" => {
                    Some(format!("almanac capture reset {}", item.transcript_path))
                }
                "ledger-corrupt" => Some(format!(
                    "inspect {} (a fresh ledger took its place)",
                    item.transcript_path
                )),
                _ => None,
            };
            checks.push(check(
                "fail",
                &format!("needs attention: {}", item.reason),
                format!(
                    "{}: {}",
                    item.transcript_path,
                    item.detail.clone().unwrap_or_default()
                ),
                fix,
            ));
        }
        // The agent.
        match config.capture.agent_def(&config.capture.agent) {
            Some(def) => match crate::capture::agent::resolve_program(&def.command[0]) {
                Some(p) => checks.push(check("ok", "agent", format!("{} -> {} ({})", def.name, p.display(), if crate::config::builtin_agents().contains(def) {
                            version_of(&p).unwrap_or_else(|| "version unknown".into())
                        } else {
                            // A custom agent is not run just to ask its version: it may do anything.
                            "custom agent; version not checked".into()
                        }), None)),
                None => checks.push(check("fail", "agent", format!("{}: `{}` is not on PATH", def.name, def.command[0]), Some(format!("install it, or set [capture] agent / [capture.agents.{}] command in config.toml", def.name)))),
            },
            None => checks.push(check("fail", "agent", format!("agent \"{}\" is not defined", config.capture.agent), Some("set [capture] agent in config.toml".into()))),
        }
    }
    // Scheduler and last sweep, as `automation status` sees them.
    let mut status_out = Vec::new();
    let status = {
        let exe = std::env::current_exe().map_err(|e| Failure::Other(e.to_string()))?;
        let o = std::process::Command::new(exe)
            .args(["automation", "status", "--json"])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| Failure::Other(e.to_string()))?;
        status_out.extend(o.stdout);
        serde_json::from_slice::<serde_json::Value>(&status_out).ok()
    };
    match status {
        Some(v) => {
            let enabled = v["configured"]["enabled"].as_bool().unwrap_or(false);
            let installed: Vec<String> = v["installed"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|i| i["scheduler"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let drift: Vec<String> = v["drift"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|d| {
                            format!(
                                "{}: {}",
                                d["code"].as_str().unwrap_or(""),
                                d["message"].as_str().unwrap_or("")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !enabled && installed.is_empty() {
                checks.push(check(
                    "warn",
                    "scheduler",
                    "automatic capture is not enabled".into(),
                    Some("almanac automation install".into()),
                ));
            } else if drift.is_empty() {
                checks.push(check(
                    "ok",
                    "scheduler",
                    format!("installed ({}) and matching config", installed.join(", ")),
                    None,
                ));
            } else {
                checks.push(check(
                    "fail",
                    "scheduler",
                    drift.join("; "),
                    Some("almanac automation install".into()),
                ));
            }
            match v["lastSweep"].as_object() {
                Some(l) => checks.push(check(
                    if l.get("exit").and_then(|e| e.as_i64()) == Some(0) {
                        "ok"
                    } else {
                        "warn"
                    },
                    "last sweep",
                    format!(
                        "{} (exit {}, {} started, {} need attention)",
                        l.get("startedAt").and_then(|t| t.as_str()).unwrap_or("?"),
                        l.get("exit").cloned().unwrap_or_default(),
                        l.get("started").cloned().unwrap_or_default(),
                        l.get("needsAttention").cloned().unwrap_or_default()
                    ),
                    None,
                )),
                None => checks.push(check(
                    "warn",
                    "last sweep",
                    "none recorded".into(),
                    Some("almanac capture sweep".into()),
                )),
            }
            if v["breaker"]["tripped"].as_bool() == Some(true) {
                checks.push(check("fail", "circuit breaker", v["breaker"]["reason"].as_str().unwrap_or("tripped").to_string(), Some("see `almanac capture status` for the failures; the next sweep starts afresh".into())));
            }
        }
        None => checks.push(check(
            "warn",
            "scheduler",
            "could not read `almanac automation status`".into(),
            None,
        )),
    }
    let failed = checks.iter().any(|c| c.status == "fail");
    if json {
        out.json(&serde_json::json!({"ok": !failed, "checks": checks}));
    } else {
        for c in &checks {
            let mark = match c.status {
                "ok" => "ok  ",
                "warn" => "warn",
                _ => "FAIL",
            };
            out.line(&format!("{mark} {}: {}", c.name, c.detail));
            if let Some(f) = &c.fix {
                out.line(&format!("     fix: {f}"));
            }
        }
    }
    Ok(if failed { EXIT_FAILURE } else { EXIT_OK })
}
