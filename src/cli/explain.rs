//! `almanac rules explain <transcript>`: the maintainer's debugger. Shows which rule set and store matched,
//! each field source and what it found, the subagent verdict, the repo mapping and the policy decision.

use super::output::Out;
use super::{Failure, EXIT_OK};
use crate::context::Context;
use crate::discover::examine;
use crate::discover::repo::RepoMapper;
use crate::discover::{resolve_roots, FoundFile};
use crate::policy::{Decision, Settings};
use crate::rules::{Catalog, RuleSet};
use crate::sweep::explain_decision;
use std::path::{Path, PathBuf};

pub(super) struct Match<'a> {
    pub rule: &'a RuleSet,
    pub store: String,
    pub root: PathBuf,
    pub root_from: String,
    pub rel: String,
}

fn find_store<'a>(
    catalog: &'a Catalog,
    cx: &Context,
    path: &Path,
    forced: Option<&str>,
) -> Option<Match<'a>> {
    let canonical = path.canonicalize().ok();
    for rule in &catalog.sets {
        if forced.is_some_and(|f| f != rule.id) {
            continue;
        }
        for store in &rule.stores {
            for root in resolve_roots(store, cx) {
                let root_canon = root.path.canonicalize().ok();
                let rel = path.strip_prefix(&root.path).ok().or_else(|| {
                    match (&canonical, &root_canon) {
                        (Some(p), Some(r)) => p.strip_prefix(r).ok(),
                        _ => None,
                    }
                });
                if let Some(rel) = rel {
                    let rel = rel.to_string_lossy().replace('\\', "/");
                    if store.include.is_match(&rel) && !store.exclude.is_match(&rel) {
                        return Some(Match {
                            rule,
                            store: store.name.clone(),
                            root: root.path.clone(),
                            root_from: root.from.clone(),
                            rel,
                        });
                    }
                }
            }
        }
    }
    None
}

/// Finds the rule set and store a transcript belongs to (or applies `forced`), as a found file.
pub(super) fn locate<'a>(
    catalog: &'a Catalog,
    cx: &Context,
    transcript: &Path,
    forced: Option<&str>,
) -> Result<(Match<'a>, FoundFile), Failure> {
    let path = if transcript.is_absolute() {
        transcript.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Failure::Other(format!("cannot read the current directory: {e}")))?
            .join(transcript)
    };
    let meta =
        std::fs::metadata(&path).map_err(|e| Failure::Other(format!("{}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(Failure::Other(format!(
            "{}: not a regular file",
            path.display()
        )));
    }
    if let Some(id) = forced {
        if catalog.get(id).is_none() {
            return Err(Failure::Usage(format!(
                "--app \"{id}\": no such rule set (loaded: {})",
                catalog.ids().join(", ")
            )));
        }
    }
    let m = match find_store(catalog, cx, &path, forced) {
        Some(m) => m,
        None => match forced.and_then(|id| catalog.get(id)) {
            // Forced onto a file outside the stores: relative path = file name.
            Some(rule) => Match {
                rule,
                store: "(none)".into(),
                root: path.parent().unwrap_or(Path::new("/")).to_path_buf(),
                root_from: "--app".into(),
                rel: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            },
            None => {
                let mut roots = Vec::new();
                for rule in &catalog.sets {
                    for store in &rule.stores {
                        for r in resolve_roots(store, cx) {
                            roots.push(format!("{}: {}", rule.id, r.path.display()));
                        }
                    }
                }
                return Err(Failure::Other(format!(
                    "{} is not a transcript in any store ({}); pass --app ID to apply a rule set anyway",
                    path.display(),
                    roots.join("; ")
                )));
            }
        },
    };
    let rel_offset = path.to_string_lossy().len().saturating_sub(m.rel.len());
    let file = FoundFile {
        app: std::sync::Arc::from(m.rule.id.as_str()),
        path: path.clone(),
        rel_offset,
        size: meta.len(),
        mtime: meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH),
        file_id: {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        },
    };
    Ok((m, file))
}

pub fn explain(
    catalog: &Catalog,
    cx: &Context,
    settings: &Settings,
    transcript: &Path,
    forced: Option<&str>,
    json: bool,
    out: &mut Out,
) -> Result<i32, Failure> {
    let (m, file) = locate(catalog, cx, transcript, forced)?;
    let path = file.path.clone();
    let mut mapper = RepoMapper::new(&cx.almanac_home);
    let ex = examine(m.rule, &file, &mut mapper);
    let head: Result<crate::discover::head::HeadScan, String> = match (&ex.scan, &ex.error) {
        (Some(h), _) => Ok((**h).clone()),
        (None, e) => Err(e.clone().unwrap_or_default()),
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

    if json {
        let fields: Vec<_> = match &head {
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
        let head_error = head.as_ref().err().cloned();
        let head = head.as_ref().ok();
        out.json(&serde_json::json!({
            "ok": true,
            "transcript": path.display().to_string(),
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
            "cwd": ex.cwd,
            "subagent": head.and_then(|h| h.subagent.clone()),
            "excluded": head.and_then(|h| h.excluded.clone()),
            "repoRoot": ex.repo.as_ref().map(|r| r.display().to_string()),
            "policySource": catalog.policy.origin.to_string(),
            "steps": steps,
            "decision": decision,
        }));
        return Ok(EXIT_OK);
    }

    out.line(&format!("transcript: {}", path.display()));
    out.line(&format!("rule set:   {} from {}", m.rule.id, m.rule.origin));
    out.line(&format!(
        "store:      {} root {} [{}], relative path {}",
        m.store,
        m.root.display(),
        m.root_from,
        m.rel
    ));
    match &head {
        Err(e) => out.line(&format!("head:       could not be read: {e}")),
        Ok(h) => {
            out.line(&format!(
                "head:       {} records read, {} other lines skipped, {} bytes (limits: {} records, {} bytes)",
                h.records, h.skipped_lines, h.bytes_read, m.rule.head.max_records, m.rule.head.max_bytes
            ));
            out.line("fields:");
            for (f, r) in m.rule.fields.iter().zip(&h.fields) {
                match &r.value {
                    Some(v) => out.line(&format!("  {} = {v}", f.name)),
                    None => out.line(&format!("  {} = (not found)", f.name)),
                }
                for (i, (s, seen)) in f.sources.iter().zip(&r.first_seen).enumerate() {
                    let status = if r.source == Some(i) {
                        match r.line {
                            Some(l) => format!("<- value from line {l}"),
                            None => "<- value from the file name".to_string(),
                        }
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
    }
    match (&ex.repo, &ex.cwd) {
        (Some(r), _) => out.line(&format!(
            "repo:       {} (nearest .almanac/ at or above the cwd)",
            r.display()
        )),
        (None, Some(c)) => out.line(&format!("repo:       none: no .almanac/ at or above {c}")),
        (None, None) => out.line("repo:       none: no cwd"),
    }
    if !steps.is_empty() {
        out.line(&format!("policy:     {}", catalog.policy.origin));
        let mut decided = false;
        for s in &steps {
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
    out.line(&format!("decision:   {decision}"));
    Ok(EXIT_OK)
}
