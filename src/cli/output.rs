//! Rendering: stdout carries results, stderr diagnostics. A closed pipe (`almanac ... | head`) ends the
//! program quietly with success, as ripgrep does.

use crate::context::Context;
use crate::discover::resolve_roots;
use crate::rules::Catalog;
use crate::sweep::Summary;
use std::io::Write;

/// Where results go, and in which form: `--json` is read once, when the command line is parsed.
pub struct Out {
    inner: std::io::Stdout,
    json: bool,
}

impl Out {
    pub fn stdout(json: bool) -> Self {
        Out {
            inner: std::io::stdout(),
            json,
        }
    }

    /// Whether the command was asked for JSON (`--json`).
    pub fn is_json(&self) -> bool {
        self.json
    }

    /// The one place that chooses a command's output form: with `--json`, the value `value` builds,
    /// as JSON; otherwise `human` renders it for a person.
    pub fn emit<T: serde::Serialize>(
        &mut self,
        value: impl FnOnce() -> T,
        human: impl FnOnce(&mut Out),
    ) {
        if self.json {
            let v = value();
            self.json(&v);
        } else {
            human(self)
        }
    }

    /// One line for a person: what would act on a terminal is shown escaped (`util::term`).
    pub fn line(&mut self, s: &str) {
        let s = crate::util::term::visible(s);
        let mut lock = self.inner.lock();
        if let Err(e) = writeln!(lock, "{s}").and_then(|_| lock.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            eprintln!("almanac: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }

    /// Streams `v` as pretty JSON (no intermediate string: a sweep's summary can be large).
    pub fn json(&mut self, v: &impl serde::Serialize) {
        let lock = self.inner.lock();
        let mut w = std::io::BufWriter::with_capacity(64 * 1024, lock);
        let result = serde_json::to_writer_pretty(&mut w, v)
            .map_err(std::io::Error::from)
            .and_then(|_| w.write_all(b"\n"))
            .and_then(|_| w.flush());
        if let Err(e) = result {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            eprintln!("almanac: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}

pub fn sweep_human(s: &Summary, out: &mut Out) {
    let verb = if s.dry_run { "would start" } else { "started" };
    out.line(if s.dry_run {
        "capture sweep (dry run):"
    } else {
        "capture sweep:"
    });
    out.line(&format!("  scanned: {} sessions", s.scanned));
    if let Some(since) = &s.capture_since {
        out.line(&format!("  capturing transcripts after: {since}"));
    }
    out.line(&format!("  eligible: {}", s.eligible));
    out.line(&format!("  {verb}: {}", s.started.len()));
    out.line(&format!("  skipped: {}", s.skipped_total()));
    for (reason, n) in &s.skipped_by_reason {
        out.line(&format!("    {reason}: {n}"));
    }
    out.line(&format!("  needs attention: {}", s.needs_attention.len()));
    if s.stats.subagents > 0 {
        out.line(&format!(
            "  subagent transcripts (not captured): {}",
            s.stats.subagents
        ));
    }
    if s.stats.unreadable > 0 {
        out.line(&format!("  unreadable entries: {}", s.stats.unreadable));
    }
    if !s.started.is_empty() {
        out.line(&format!(
            "  estimated tokens: {} (what the agents read: each run's rendered conversation and prompt)",
            s.totals.estimated_tokens
        ));
    }
    for item in &s.started {
        out.line(&format!(
            "  - {verb} {} {} in {}: lines {}-{} (bytes {}-{}){}, about {} tokens",
            item.app,
            item.session_id,
            item.repo_root,
            item.from_line,
            item.to_line,
            item.from_byte,
            item.to_byte,
            item.chunk
                .map(|(i, n)| format!(", chunk {i} of {n}"))
                .unwrap_or_default(),
            item.estimated_tokens
        ));
    }
    for item in &s.needs_attention {
        out.line(&format!(
            "  - needs attention {} {}: {}",
            item.app, item.transcript_path, item.reason
        ));
    }
    for item in &s.recovered {
        out.line(&format!(
            "  - {} {} {}: {}",
            item.reason,
            item.app,
            item.transcript_path,
            item.detail.as_deref().unwrap_or_default()
        ));
    }
    for h in &s.hints {
        out.line(&format!("  next: {h}"));
    }
}

/// How to turn on `id`, an app the sweeps leave out (`enabled` is what they cover now): the command
/// that writes `[automation.capture] apps`, the config line itself, and a one-off sweep.
pub fn enable_hint(cx: &Context, enabled: &[String], id: &str) -> String {
    let mut apps = enabled.to_vec();
    apps.push(id.to_string());
    let quoted: Vec<String> = apps.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "`almanac automation install --apps {}`, or `apps = [{}]` under [automation.capture] in {}; one sweep: `almanac capture sweep --apps {id}`",
        apps.join(","),
        quoted.join(", "),
        cx.config_path().display()
    )
}

/// `rules list`: every rule set, whether the sweeps cover it (`enabled`), and for one that is off but
/// has transcripts on this machine, how to turn it on.
pub fn rules_list(catalog: &Catalog, cx: &Context, enabled: &[String], out: &mut Out) {
    let idle: Vec<String> = crate::discover::idle_apps(catalog, cx, enabled)
        .iter()
        .map(|i| i.rule.id.clone())
        .collect();
    let hint = |id: &str| {
        idle.iter()
            .any(|i| i == id)
            .then(|| enable_hint(cx, enabled, id))
    };
    out.emit(
        || rules_list_json(catalog, cx, enabled, &hint),
        |out| rules_list_human(catalog, cx, enabled, &hint, out),
    );
}

fn rules_list_json(
    catalog: &Catalog,
    cx: &Context,
    enabled: &[String],
    hint: &dyn Fn(&str) -> Option<String>,
) -> serde_json::Value {
    let sets: Vec<_> = catalog
        .sets
        .iter()
        .map(|s| {
            let stores: Vec<_> = s
                .stores
                .iter()
                .map(|st| {
                    serde_json::json!({
                        "name": st.name,
                        "include": st.include_patterns,
                        "exclude": st.exclude_patterns,
                        "roots": resolve_roots(st, cx),
                    })
                })
                .collect();
            let mut set = serde_json::json!({
                "id": s.id,
                "name": s.name,
                "source": s.origin.to_string(),
                "extends": s.extends.as_ref().map(|e| serde_json::json!({"base": e.base, "baseSource": e.base_origin, "own": e.own})),
                "enabled": enabled.contains(&s.id),
                "fields": s.fields.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
                "stores": stores,
            });
            if let Some(h) = hint(&s.id) {
                set["enableWith"] = serde_json::json!(h);
            }
            set
        })
        .collect();
    serde_json::json!({
        "ok": true,
        "ruleSets": sets,
        "policy": {
            "source": catalog.policy.origin.to_string(),
            "checks": catalog.policy.checks.iter().map(|c| serde_json::json!({"check": c.kind.code(), "enabled": c.enabled})).collect::<Vec<_>>(),
        }
    })
}

fn rules_list_human(
    catalog: &Catalog,
    cx: &Context,
    enabled: &[String],
    hint: &dyn Fn(&str) -> Option<String>,
    out: &mut Out,
) {
    for s in &catalog.sets {
        let state = if enabled.contains(&s.id) {
            ""
        } else {
            " [off]"
        };
        out.line(&format!("{} ({}) from {}{state}", s.id, s.name, s.origin));
        if let Some(e) = &s.extends {
            out.line(&format!("  {e}"));
        }
        if let Some(h) = hint(&s.id) {
            out.line(&format!(
                "  its store exists here, but {} is not enabled: {h}",
                s.name
            ));
        }
        for st in &s.stores {
            out.line(&format!(
                "  store {}: include {}",
                st.name,
                st.include_patterns.join(", ")
            ));
            for r in resolve_roots(st, cx) {
                let state = if r.exists { "" } else { " (missing)" };
                out.line(&format!(
                    "    root {} [{}]{state}",
                    r.path.display(),
                    r.from
                ));
            }
        }
    }
    let checks: Vec<String> = catalog
        .policy
        .checks
        .iter()
        .map(|c| {
            if c.enabled {
                c.kind.code().to_string()
            } else {
                format!("{} (disabled)", c.kind.code())
            }
        })
        .collect();
    out.line(&format!(
        "policy from {}: {}",
        catalog.policy.origin,
        checks.join(" -> ")
    ));
}
