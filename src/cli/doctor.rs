//! `almanac doctor`: one screen that says why capture is or is not happening, each problem with the
//! command that fixes it. Exit 0 when nothing is wrong, 1 when something is. Each area (config, rules,
//! stores, repos, the sweep, failed runs, the agent, the scheduler) has a function that returns its
//! checks; `doctor` lists them in order and renders them.

use super::output::Out;
use super::{Failure, EXIT_FAILURE, EXIT_OK};
use crate::config::Config;
use crate::context::Context;
use crate::discover::{self, resolve_roots};
use crate::rules::Catalog;
use crate::sweep::Summary;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
}

/// One finding: what was looked at, what is wrong (if anything) and the command that fixes it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Check {
    status: Status,
    name: String,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(status: Status, name: &str, detail: String, fix: Option<String>) -> Check {
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

/// The repos almanac knows (`discover::registry`): where stores inside projects are looked for and
/// hashed project paths placed.
fn known_repos_check(cx: &Context) -> Check {
    let known = crate::discover::registry::known(cx);
    let list: Vec<String> = known.iter().map(|p| p.display().to_string()).collect();
    check(
        Status::Ok,
        "known-repos",
        match list.is_empty() {
            true => "almanac knows no repo yet (`almanac init` and live sweeps add them)".into(),
            false => format!("{} known repo(s): {}", list.len(), list.join(", ")),
        },
        None,
    )
}

pub fn doctor(cx: &Context, rules_dir: Option<&Path>, out: &mut Out) -> Result<i32, Failure> {
    let mut checks = Vec::new();
    let config = config_check(cx, &mut checks);
    let catalog = rules_check(cx, rules_dir, &mut checks);
    if let (Some(config), Some(catalog)) = (&config, &catalog) {
        checks.extend(store_checks(cx, config, catalog));
        let summary = dry_sweep(cx, config, catalog);
        let repos = repos_of(&summary);
        checks.push(repos_check(&repos));
        checks.push(known_repos_check(cx));
        checks.push(check(
            Status::Ok,
            "sweep",
            format!(
                "a sweep now would start {} runs ({} sessions scanned)",
                summary.started.len(),
                summary.scanned
            ),
            None,
        ));
        checks.extend(failed_run_checks(&repos));
        checks.extend(foreign_run_checks(&repos));
        checks.extend(attention_checks(&summary));
        checks.extend(unread_store_checks(&summary));
        checks.push(agent_check(config));
    }
    checks.extend(scheduler_checks()?);
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    out.emit(
        || serde_json::json!({"ok": !failed, "checks": checks}),
        |out| render(&checks, out),
    );
    Ok(if failed { EXIT_FAILURE } else { EXIT_OK })
}

fn render(checks: &[Check], out: &mut Out) {
    for c in checks {
        let mark = match c.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        out.line(&format!("{mark} {}: {}", c.name, c.detail));
        if let Some(f) = &c.fix {
            out.line(&format!("     fix: {f}"));
        }
    }
}

fn config_check(cx: &Context, checks: &mut Vec<Check>) -> Option<Config> {
    match crate::config::load(&cx.config_path()) {
        Ok(c) => {
            checks.push(check(
                Status::Ok,
                "config",
                format!("{} reads", cx.config_path().display()),
                None,
            ));
            Some(c)
        }
        Err(e) => {
            checks.push(check(
                Status::Fail,
                "config",
                e.0,
                Some(format!("fix or move aside {}", cx.config_path().display())),
            ));
            None
        }
    }
}

fn rules_check(cx: &Context, rules_dir: Option<&Path>, checks: &mut Vec<Check>) -> Option<Catalog> {
    match super::load_catalog(cx, rules_dir) {
        Ok(c) => {
            checks.push(check(
                Status::Ok,
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
                Status::Fail,
                "rules",
                lines.join("; "),
                Some("almanac rules validate".into()),
            ));
            None
        }
    }
}

/// The stores of each app the sweeps cover, with how many transcripts they hold; then each app they
/// leave out that has transcripts on this machine, with the command that enables it.
fn store_checks(cx: &Context, config: &Config, catalog: &Catalog) -> Vec<Check> {
    let mut checks = Vec::new();
    let enabled = crate::sweep::setup::configured_apps(config, catalog);
    for rule in catalog.sets.iter().filter(|s| enabled.contains(&s.id)) {
        let mut found = Vec::new();
        for store in &rule.stores {
            for root in resolve_roots(store, cx).into_iter().filter(|r| r.exists) {
                found.push(root.path.display().to_string());
            }
        }
        let mut walk = discover::Walk::<discover::FoundFile>::default();
        walk.rule_set(rule, cx, discover::SubagentFiles::List);
        let (files, _) = walk.finish();
        let name = format!("{} stores", rule.id);
        checks.push(if found.is_empty() {
            check(Status::Warn, &name, "no store directory exists".into(), Some(format!("nothing to capture from {} yet; `almanac rules list` shows where almanac looks", rule.name)))
        } else {
            check(
                Status::Ok,
                &name,
                format!("{} transcripts in {}", files.len(), found.join(", ")),
                None,
            )
        });
    }
    for idle in discover::idle_apps(catalog, cx, &enabled) {
        let roots: Vec<String> = idle.roots.iter().map(|r| r.display().to_string()).collect();
        checks.push(check(
            Status::Warn,
            &format!("{} stores", idle.rule.id),
            format!(
                "{}'s store exists here ({}), but {} is not enabled: its sessions are not captured",
                idle.rule.name,
                roots.join(", "),
                idle.rule.id
            ),
            Some(super::output::enable_hint(cx, &enabled, &idle.rule.id)),
        ));
    }
    checks
}

/// What a sweep would do now (a dry run with the configured apps, settings and budget).
fn dry_sweep(cx: &Context, config: &Config, catalog: &Catalog) -> Summary {
    crate::sweep::run(
        catalog,
        cx,
        &crate::sweep::SweepOptions {
            apps: crate::sweep::setup::configured_apps(config, catalog),
            settings: crate::sweep::setup::settings(cx.now, config, None),
            dry_run: true,
            agent: config.capture.agent.clone(),
            budget: config.budget,
            manual: None,
            list_skipped: true,
        },
    )
}

/// The repos (with .almanac/) the transcripts a sweep saw belong to.
fn repos_of(summary: &Summary) -> BTreeSet<String> {
    summary
        .started
        .iter()
        .map(|s| s.repo_root.clone())
        .chain(
            summary.skipped.iter().filter_map(|s| s.repo_root).chain(
                summary
                    .needs_attention
                    .iter()
                    .filter_map(|s| s.repo_root.clone()),
            ),
        )
        .collect()
}

fn repos_check(repos: &BTreeSet<String>) -> Check {
    if repos.is_empty() {
        return check(
            Status::Warn,
            "repos",
            "no transcript belongs to a repo with .almanac/".into(),
            Some("run `almanac init` in a repo you work on with an agent".into()),
        );
    }
    check(
        Status::Ok,
        "repos",
        format!(
            "{} repos with .almanac/: {}",
            repos.len(),
            repos.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
        None,
    )
}

/// Recent failed runs in each repo (they are retried by the next sweep, within max_attempts).
fn failed_run_checks(repos: &BTreeSet<String>) -> Vec<Check> {
    let mut checks = Vec::new();
    for repo in repos {
        let runs = crate::ledger::record::list(&crate::ledger::runs_dir(Path::new(repo)));
        for r in runs
            .iter()
            .rev()
            .filter(|r| r.status == crate::ledger::RunStatus::Failed)
            .take(3)
        {
            checks.push(check(
                Status::Warn,
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
    checks
}

/// Run records this user's almanac did not write (planted by a commit, copied from elsewhere): never run.
fn foreign_run_checks(repos: &BTreeSet<String>) -> Vec<Check> {
    let mut checks = Vec::new();
    for repo in repos {
        if crate::ledger::guard::check_runs_dir(Path::new(repo)).is_err() {
            continue; // reported as runs-dir-unsafe
        }
        let foreign =
            crate::ledger::record::list_foreign(&crate::ledger::runs_dir(Path::new(repo)));
        if foreign.is_empty() {
            continue;
        }
        let ids: Vec<&str> = foreign.iter().map(|f| f.run_id.as_str()).collect();
        checks.push(check(
            Status::Warn,
            &format!("foreign run records in {repo}"),
            format!(
                "{} run records not queued by your almanac, never run or deleted: {}",
                ids.len(),
                ids.join(", ")
            ),
            Some(format!(
                "inspect them (almanac capture status --repo {repo}) and delete them by hand"
            )),
        ));
    }
    checks
}

/// Transcripts a sweep cannot capture until someone acts, with the command that clears each.
fn attention_checks(summary: &Summary) -> Vec<Check> {
    let mut checks = Vec::new();
    for item in &summary.needs_attention {
        let fix = match item.reason.code() {
            "prefix-mismatch" | "retry-budget-exhausted" => {
                Some(format!("almanac capture reset {}", item.transcript_path))
            }
            "agent-wrote-outside-wiki" => Some(format!(
                "check those files, then: almanac capture reset --skip-existing {}",
                item.transcript_path
            )),
            "ledger-corrupt" => Some(format!(
                "inspect {} (a ledger rebuilt from the run records took its place)",
                item.transcript_path
            )),
            "cursor-lost" => Some(format!(
                "almanac capture reset --skip-existing {} (or without --skip-existing to capture it from line 1)",
                item.transcript_path
            )),
            "read-failed" => Some(format!(
                "mend the file (its permissions, or what the detail names); a store is read again \
                 when it changes, or on the next sweep after: almanac capture reset --store {}",
                item.transcript_path
            )),
            "ledger-newer-version" => {
                Some("upgrade almanac: a newer version wrote this repo's ledger".to_string())
            }
            _ => None,
        };
        checks.push(check(
            Status::Fail,
            &format!("needs attention: {}", item.reason),
            format!(
                "{}: {}",
                item.transcript_path,
                item.detail.clone().unwrap_or_default()
            ),
            fix,
        ));
    }
    checks
}

/// Stores inside projects that are not read at all: committed to git, or reached through a link. A
/// warning each: nothing is wrong with almanac, but the user may expect those sessions.
fn unread_store_checks(summary: &Summary) -> Vec<Check> {
    use crate::reason::Reason;
    summary
        .skipped
        .iter()
        .filter(|i| matches!(i.reason, Reason::StoreTrackedByGit | Reason::StoreBehindLink))
        .map(|item| {
            let fix = match item.reason {
                Reason::StoreTrackedByGit => "if git could not tell (the detail says so), install git or \
                    mend the repository; if these sessions are yours (a repository only you commit to), \
                    list the repo in [stores] read_tracked_in in config.toml",
                _ => "nothing, unless the store is yours: then keep it in the repo itself, not behind a link",
            };
            check(
                Status::Warn,
                &format!("store not read: {}", item.reason),
                format!(
                    "{}: {}",
                    item.transcript_path,
                    item.detail.clone().unwrap_or_default()
                ),
                Some(fix.to_string()),
            )
        })
        .collect()
}

/// The configured agent: defined, on PATH, and (for a built-in one) its version.
fn agent_check(config: &Config) -> Check {
    let Some(def) = config.capture.agent_def(&config.capture.agent) else {
        return check(
            Status::Fail,
            "agent",
            format!("agent \"{}\" is not defined", config.capture.agent),
            Some("set [capture] agent in config.toml".into()),
        );
    };
    let Some(p) = crate::capture::agent::resolve_agent_program(def, &def.command[0]) else {
        return check(
            Status::Fail,
            "agent",
            format!("{}: `{}` is not on PATH", def.name, def.command[0]),
            Some(format!(
                "install it, or set [capture] agent / [capture.agents.{}] command in config.toml",
                def.name
            )),
        );
    };
    let version = if crate::config::builtin_agents().contains(def) {
        version_of(&p).unwrap_or_else(|| "version unknown".into())
    } else {
        // A custom agent is not run just to ask its version: it may do anything.
        "custom agent; version not checked".into()
    };
    check(
        Status::Ok,
        "agent",
        format!("{} -> {} ({version})", def.name, p.display()),
        None,
    )
}

/// Scheduler and last sweep, as `automation status` sees them.
fn scheduler_checks() -> Result<Vec<Check>, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::Other(e.to_string()))?;
    let o = std::process::Command::new(exe)
        .args(["automation", "status", "--json"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Failure::Other(e.to_string()))?;
    let Some(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout).ok() else {
        return Ok(vec![check(
            Status::Warn,
            "scheduler",
            "could not read `almanac automation status`".into(),
            None,
        )]);
    };
    let mut checks = vec![scheduler_check(&v), last_sweep_check(&v)];
    if v["breaker"]["tripped"].as_bool() == Some(true) {
        checks.push(check(
            Status::Fail,
            "circuit breaker",
            v["breaker"]["reason"]
                .as_str()
                .unwrap_or("tripped")
                .to_string(),
            Some(
                "see `almanac capture status` for the failures; the next sweep starts afresh"
                    .into(),
            ),
        ));
    }
    Ok(checks)
}

/// `status` is `automation status --json`.
fn scheduler_check(status: &serde_json::Value) -> Check {
    let enabled = status["configured"]["enabled"].as_bool().unwrap_or(false);
    let installed: Vec<String> = status["installed"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["scheduler"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let drift: Vec<String> = status["drift"]
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
        check(
            Status::Warn,
            "scheduler",
            "automatic capture is not enabled".into(),
            Some("almanac automation install".into()),
        )
    } else if drift.is_empty() {
        check(
            Status::Ok,
            "scheduler",
            format!("installed ({}) and matching config", installed.join(", ")),
            None,
        )
    } else {
        check(
            Status::Fail,
            "scheduler",
            drift.join("; "),
            Some("almanac automation install".into()),
        )
    }
}

/// `status` is `automation status --json`.
fn last_sweep_check(status: &serde_json::Value) -> Check {
    let Some(l) = status["lastSweep"].as_object() else {
        return check(
            Status::Warn,
            "last sweep",
            "none recorded".into(),
            Some("almanac capture sweep".into()),
        );
    };
    check(
        if l.get("exit").and_then(|e| e.as_i64()) == Some(0) {
            Status::Ok
        } else {
            Status::Warn
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
    )
}
