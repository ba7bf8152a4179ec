//! `almanac rules explain <transcript>`: the maintainer's debugger. Shows which rule set and store matched,
//! each field source and what it found, the subagent verdict, the repo mapping and the policy decision.

use super::output::Out;
use super::{Failure, EXIT_OK};
use crate::context::Context;
use crate::discover::head::HeadScan;
use crate::discover::locate::Match;
use crate::discover::repo::RepoMapper;
use crate::discover::{self, FoundFile};
use crate::discover::{examine, Examined};
use crate::policy::{Decision, Settings, Step};
use crate::rules::{Catalog, RuleSet};
use crate::sweep::explain_decision;
use std::path::{Path, PathBuf};

/// Locates a transcript for a command (`rules explain`, `capture turns`, `capture reset`), with
/// locating's errors as the command's failure.
pub(super) fn locate<'a>(
    catalog: &'a Catalog,
    cx: &Context,
    transcript: &Path,
    forced: Option<&str>,
) -> Result<(Match<'a>, FoundFile), Failure> {
    discover::locate::locate(catalog, cx, transcript, forced).map_err(|e| {
        if e.is_usage() {
            Failure::Usage(e.to_string())
        } else {
            Failure::Other(e.to_string())
        }
    })
}

/// What `rules explain` found about one transcript: where it lies, its head, and the policy's verdict.
struct Explained<'a> {
    m: Match<'a>,
    path: PathBuf,
    ex: Examined,
    head: Result<HeadScan, String>,
    steps: Vec<Step>,
    decision: String,
}

fn examine_one<'a>(
    catalog: &'a Catalog,
    cx: &Context,
    settings: &Settings,
    transcript: &Path,
    forced: Option<&str>,
) -> Result<Explained<'a>, Failure> {
    let (m, file) = locate(catalog, cx, transcript, forced)?;
    let mut mapper = RepoMapper::new(&cx.almanac_home);
    let ex = examine(m.rule, &file, &mut mapper);
    let head: Result<HeadScan, String> = match (&ex.scan, ex.error()) {
        (Some(h), _) => Ok((**h).clone()),
        (None, e) => Err(e.unwrap_or_default().to_string()),
    };
    let (policy_decision, steps) = if head.is_ok() && !ex.subagent {
        let (d, s) = explain_decision(catalog, m.rule, &file, &ex, settings, cx.now);
        (Some(d), s)
    } else {
        (None, Vec::new())
    };
    let decision = match (&head, ex.subagent, &policy_decision) {
        (Err(e), _, _) => format!("needs attention (read-failed: {e})"),
        (_, true, _) => "not a candidate (subagent transcript)".to_string(),
        (_, _, Some(Decision::Eligible)) => "eligible".to_string(),
        (_, _, Some(Decision::Skip(code))) => format!("skip ({code})"),
        _ => "unknown".to_string(),
    };
    Ok(Explained {
        m,
        path: file.path,
        ex,
        head,
        steps,
        decision,
    })
}

pub fn explain(
    catalog: &Catalog,
    cx: &Context,
    settings: &Settings,
    transcript: &Path,
    forced: Option<&str>,
    out: &mut Out,
) -> Result<i32, Failure> {
    let e = examine_one(catalog, cx, settings, transcript, forced)?;
    out.emit(
        || explain_json(catalog, &e),
        |out| {
            explain_where(&e, out);
            match &e.head {
                Err(err) => out.line(&format!("head:       could not be read: {err}")),
                Ok(h) => explain_head(e.m.rule, h, e.m.rule.is_view(&e.path), out),
            }
            explain_verdict(catalog, &e, out);
        },
    );
    Ok(EXIT_OK)
}

fn explain_json(catalog: &Catalog, e: &Explained<'_>) -> serde_json::Value {
    let (m, ex) = (&e.m, &e.ex);
    let fields: Vec<_> = match &e.head {
        Ok(h) => m
            .rule
            .fields
            .iter()
            .zip(&h.fields)
            .map(|(f, r)| {
                serde_json::json!({
                    "name": f.name,
                    "value": r.value,
                    "source": r.source,
                    "line": r.line,
                    "sources": f.sources.iter().zip(&r.first_seen).map(|(s, seen)| serde_json::json!({"describe": s.describe, "firstRecordLine": seen})).collect::<Vec<_>>(),
                })
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    let head_error = e.head.as_ref().err().cloned();
    let head = e.head.as_ref().ok();
    serde_json::json!({
        "ok": true,
        "transcript": e.path.display().to_string(),
        "app": m.rule.id,
        "ruleSource": m.rule.origin.to_string(),
        "store": m.store,
        "root": m.root.display().to_string(),
        "rootFrom": m.root_from,
        "relativePath": m.rel,
        "head": head.map(|h| serde_json::json!({"records": h.records, "skippedLines": h.skipped_lines, "bytesRead": h.bytes_read})),
        "headError": head_error,
        "fields": fields,
        "sessionId": ex.session_id,
        "cwd": ex.cwd.as_deref(),
        "subagent": head.and_then(|h| h.subagent.clone()),
        "excluded": head.and_then(|h| h.excluded.clone()),
        "repoRoot": ex.repo.as_ref().map(|r| r.display().to_string()),
        "policySource": catalog.policy.origin.to_string(),
        "steps": e.steps,
        "decision": e.decision,
    })
}

fn explain_where(e: &Explained<'_>, out: &mut Out) {
    let m = &e.m;
    out.line(&format!("transcript: {}", e.path.display()));
    out.line(&format!("rule set:   {} from {}", m.rule.id, m.rule.origin));
    if let Some(e) = &m.rule.extends {
        out.line(&format!("            {e}"));
    }
    out.line(&format!(
        "store:      {} root {} [{}], relative path {}",
        m.store,
        m.root.display(),
        m.root_from,
        m.rel
    ));
}

/// `view`: the transcript is one of the set's views (a JSONL transcript reads no header source).
fn explain_head(rule: &RuleSet, h: &HeadScan, view: bool, out: &mut Out) {
    out.line(&format!(
        "head:       {} records read, {} other lines skipped, {} bytes (limits: {} records, {} bytes)",
        h.records, h.skipped_lines, h.bytes_read, rule.head.max_records, rule.head.max_bytes
    ));
    out.line("fields:");
    for (f, r) in rule.fields.iter().zip(&h.fields) {
        match &r.value {
            Some(v) => out.line(&format!("  {} = {v}", f.name)),
            None => out.line(&format!("  {} = (not found)", f.name)),
        }
        for (i, (s, seen)) in f.sources.iter().zip(&r.first_seen).enumerate() {
            let status = if r.source == Some(i) {
                match (r.line, &s.kind) {
                    (Some(l), _) => format!("<- value from line {l}"),
                    (None, crate::rules::SourceKind::Path(_)) => "<- value from the path".into(),
                    (None, crate::rules::SourceKind::Sidecar { .. }) => {
                        "<- value from the file beside it".into()
                    }
                    (None, _) => "<- value from the file name".to_string(),
                }
            } else if s.header && !view {
                "(a view's header: not read from a JSONL transcript)".to_string()
            } else if r.source.is_some_and(|w| w < i) {
                "(not needed)".to_string()
            } else {
                match seen {
                    Some(l) => format!("no value (first matching record: line {l})"),
                    None => "no matching record".to_string(),
                }
            };
            out.line(&format!("    {}. {}  {status}", i + 1, s.describe));
        }
    }
    match &h.subagent {
        Some(v) => out.line(&format!(
            "subagent:   yes: {}{}",
            v.reason,
            v.line.map(|l| format!(" (line {l})")).unwrap_or_default()
        )),
        None => out.line("subagent:   no"),
    }
    if let Some(v) = &h.excluded {
        out.line(&format!(
            "excluded:   yes: {}{}",
            v.reason,
            v.line.map(|l| format!(" (line {l})")).unwrap_or_default()
        ));
    }
}

fn explain_verdict(catalog: &Catalog, e: &Explained<'_>, out: &mut Out) {
    match (&e.ex.repo, &e.ex.cwd) {
        (Some(r), _) => out.line(&format!(
            "repo:       {} (nearest .almanac/ at or above the cwd)",
            r.display()
        )),
        (None, Some(c)) => out.line(&format!("repo:       none: no .almanac/ at or above {c}")),
        (None, None) => out.line("repo:       none: no cwd"),
    }
    if !e.steps.is_empty() {
        out.line(&format!("policy:     {}", catalog.policy.origin));
        let mut decided = false;
        for s in &e.steps {
            let mark = if !s.enabled {
                "off "
            } else if s.passed {
                "ok  "
            } else if !decided {
                decided = true;
                "FAIL"
            } else {
                "fail"
            };
            out.line(&format!("  {mark} {}: {}", s.check, s.detail));
        }
    }
    out.line(&format!("decision:   {}", e.decision));
}
