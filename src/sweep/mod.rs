//! `capture sweep`: gather facts (discover), ask the policy, act. In this version the sweep only reports
//! (dry run): it computes each eligible transcript's line and byte range and writes nothing anywhere.

use crate::context::Context;
use crate::discover::head::HeadScan;
use crate::discover::repo::RepoMapper;
use crate::discover::{self, FoundFile, WalkStats};
use crate::policy::{self, Decision, Facts, Settings, Step};
use crate::rules::{Catalog, RuleSet};
use crate::util::lines::count_complete_lines;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

pub struct SweepOptions {
    pub apps: Vec<String>,
    pub settings: Settings,
    pub dry_run: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartedItem {
    pub app: String,
    pub session_id: String,
    pub transcript_path: String,
    pub repo_root: String,
    pub run_id: String,
    pub from_line: u64,
    pub to_line: u64,
    pub from_byte: u64,
    pub to_byte: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedItem {
    pub app: String,
    pub session_id: Option<String>,
    pub transcript_path: String,
    pub repo_root: Option<String>,
    pub reason: String,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub files_visited: u64,
    pub bytes_read: u64,
    pub elapsed_ms: u64,
    pub unreadable: u64,
    pub duplicates: u64,
    pub subagents: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub scanned: u64,
    pub eligible: u64,
    pub dry_run: bool,
    pub capture_since: Option<String>,
    pub started: Vec<StartedItem>,
    pub skipped: Vec<SkippedItem>,
    pub needs_attention: Vec<SkippedItem>,
    pub counts: BTreeMap<String, u64>,
    pub stats: Stats,
}

/// Everything known about one transcript after discovery and the policy; shared by the sweep and
/// `rules explain`.
pub struct Examined {
    pub head: Result<HeadScan, String>,
    pub session_id: Option<String>,
    pub cwd: Option<String>,
    pub repo: Option<PathBuf>,
    pub subagent: bool,
    /// None for subagents and unreadable files, which the policy never sees.
    pub decision: Option<Decision>,
    pub steps: Vec<Step>,
}

pub fn examine(
    rule: &RuleSet,
    catalog: &Catalog,
    file: &FoundFile,
    mapper: &mut RepoMapper,
    settings: &Settings,
) -> Examined {
    let head = discover::read_head(rule, file).map_err(|e| e.to_string());
    let Ok(scan) = &head else {
        return Examined {
            head,
            session_id: None,
            cwd: None,
            repo: None,
            subagent: false,
            decision: None,
            steps: Vec::new(),
        };
    };
    let session_id = scan.get("session_id").map(str::to_string);
    let cwd = scan.get("cwd").map(str::to_string);
    let subagent = scan.subagent.is_some();
    let repo = cwd.as_deref().and_then(|c| mapper.map(c));
    if subagent {
        return Examined {
            head,
            session_id,
            cwd,
            repo,
            subagent,
            decision: None,
            steps: Vec::new(),
        };
    }
    let excluded_by = scan.excluded.as_ref().map(|v| v.reason.clone());
    let facts = Facts {
        app: &rule.id,
        session_id: session_id.as_deref(),
        cwd: cwd.as_deref(),
        repo: repo.as_deref(),
        excluded_by: excluded_by.as_deref(),
        mtime: DateTime::<Utc>::from(file.mtime),
        size: file.size,
        captured_bytes: 0,
    };
    let (decision, steps) = policy::decide(&catalog.policy, &facts, settings);
    Examined {
        head,
        session_id,
        cwd,
        repo,
        subagent,
        decision: Some(decision),
        steps,
    }
}

pub fn run(catalog: &Catalog, cx: &Context, opts: &SweepOptions) -> Summary {
    let started_at = Instant::now();
    let mut walk = WalkStats::default();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for id in &opts.apps {
        if let Some(rule) = catalog.get(id) {
            discover::walk_rule_set(rule, cx, &mut seen, &mut walk, &mut files);
        }
    }
    files.sort_by(|a, b| (&a.app, &a.path).cmp(&(&b.app, &b.path)));

    let mut mapper = RepoMapper::new(&cx.almanac_home);
    let mut summary = Summary {
        scanned: 0,
        eligible: 0,
        dry_run: opts.dry_run,
        capture_since: opts.settings.capture_since.map(policy::iso),
        started: Vec::new(),
        skipped: Vec::new(),
        needs_attention: Vec::new(),
        counts: BTreeMap::new(),
        stats: Stats {
            files_visited: walk.files_visited,
            unreadable: walk.unreadable,
            duplicates: walk.duplicates,
            ..Stats::default()
        },
    };
    for file in &files {
        let rule = catalog.get(&file.app).expect("walked apps exist");
        let ex = examine(rule, catalog, file, &mut mapper, &opts.settings);
        if let Ok(h) = &ex.head {
            summary.stats.bytes_read += h.bytes_read;
        }
        let item = |reason: &str| SkippedItem {
            app: file.app.clone(),
            session_id: ex.session_id.clone(),
            transcript_path: file.path.display().to_string(),
            repo_root: ex.repo.as_ref().map(|r| r.display().to_string()),
            reason: reason.to_string(),
        };
        if let Err(e) = &ex.head {
            summary.scanned += 1;
            summary
                .needs_attention
                .push(item(&format!("read-failed: {e}")));
            *summary.counts.entry("read-failed".into()).or_default() += 1;
            continue;
        }
        if ex.subagent {
            summary.stats.subagents += 1;
            *summary.counts.entry("subagent".into()).or_default() += 1;
            continue;
        }
        summary.scanned += 1;
        let reason = match ex.decision {
            Some(Decision::Skip(code)) => code,
            _ => {
                // Eligible: the range is every complete line (a line still being written is left for later).
                match discover::open_transcript(&file.path).and_then(|f| count_complete_lines(f, 0))
                {
                    Ok(c) if c.lines > 0 => {
                        summary.stats.bytes_read += c.bytes_read;
                        summary.eligible += 1;
                        summary.started.push(StartedItem {
                            app: file.app.clone(),
                            session_id: ex.session_id.clone().unwrap_or_default(),
                            transcript_path: file.path.display().to_string(),
                            repo_root: ex
                                .repo
                                .as_ref()
                                .map(|r| r.display().to_string())
                                .unwrap_or_default(),
                            run_id: "dry-run".into(),
                            from_line: 1,
                            to_line: c.lines,
                            from_byte: 0,
                            to_byte: c.end,
                        });
                        continue;
                    }
                    Ok(c) => {
                        summary.stats.bytes_read += c.bytes_read;
                        "unchanged"
                    }
                    Err(e) => {
                        summary
                            .needs_attention
                            .push(item(&format!("read-failed: {e}")));
                        *summary.counts.entry("read-failed".into()).or_default() += 1;
                        continue;
                    }
                }
            }
        };
        summary.skipped.push(item(reason));
        *summary.counts.entry(reason.to_string()).or_default() += 1;
    }
    summary.stats.elapsed_ms = started_at.elapsed().as_millis() as u64;
    summary
}
