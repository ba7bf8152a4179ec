//! Discovery: resolve each store's roots, walk them, read the head of every transcript, map it to a repo.
//! Produces facts only; deciding what to do with them is `policy`'s job.

pub mod cache;
pub mod head;
pub mod repo;

use crate::context::Context;
use crate::rules::{RuleSet, Store};
use head::HeadScan;
use serde::Serialize;
use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A store root after environment expansion.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRoot {
    pub store: String,
    pub path: PathBuf,
    /// `$VAR` when the directory came from an environment variable, else `default`.
    pub from: String,
    pub exists: bool,
}

/// Resolves a store's roots: a root with `env` uses the variable's directories (split on `split`) when it
/// is set and non-empty, else its defaults; `join` is appended unless the directory already ends with it.
pub fn resolve_roots(store: &Store, cx: &Context) -> Vec<ResolvedRoot> {
    let mut out: Vec<ResolvedRoot> = Vec::new();
    for spec in &store.roots {
        let from_env = spec
            .env
            .as_ref()
            .and_then(|name| cx.var(name).map(|v| (name, v)))
            .filter(|(_, v)| !v.trim().is_empty());
        let (dirs, from): (Vec<String>, String) = match from_env {
            Some((name, value)) => {
                let parts = match &spec.split {
                    Some(sep) => value
                        .split(sep.as_str())
                        .map(|s| s.trim().to_string())
                        .collect(),
                    None => vec![value.trim().to_string()],
                };
                (
                    parts.into_iter().filter(|s| !s.is_empty()).collect(),
                    format!("${name}"),
                )
            }
            None => (spec.default.clone(), "default".into()),
        };
        for d in dirs {
            let mut path = crate::util::paths::expand_home(&d, &cx.home);
            if let Some(j) = &spec.join {
                if path.file_name().is_none_or(|n| n != j.as_str()) {
                    path.push(j);
                }
            }
            if out.iter().any(|r| r.path == path) {
                continue;
            }
            out.push(ResolvedRoot {
                store: store.name.clone(),
                exists: path.is_dir(),
                path,
                from: from.clone(),
            });
        }
    }
    out
}

/// A transcript file found in a store, before its head is read.
#[derive(Debug, Clone)]
pub struct FoundFile {
    /// Shared by every file of one rule set (a sweep may hold 100k of these).
    pub app: std::sync::Arc<str>,
    pub path: PathBuf,
    /// Where the path relative to its store root starts in `path` (as text).
    pub rel_offset: usize,
    pub size: u64,
    pub mtime: SystemTime,
    /// (device, inode): the same file reached twice is one candidate; a replaced file gets a new one.
    pub file_id: (u64, u64),
}

impl FoundFile {
    /// The path relative to the store root, `/`-separated (what store and subagent globs match).
    pub fn rel(&self) -> String {
        let text = self.path.to_string_lossy();
        text.get(self.rel_offset..)
            .unwrap_or(&text)
            .trim_start_matches('/')
            .replace('\\', "/")
    }

    /// What the discovery cache checks before trusting what it remembers.
    pub fn stamp(&self) -> cache::Stamp {
        let mtime_ns = match self.mtime.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        };
        cache::Stamp {
            size: self.size,
            mtime_ns,
            dev: self.file_id.0,
            ino: self.file_id.1,
        }
    }
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WalkStats {
    pub files_visited: u64,
    pub unreadable: u64,
    pub duplicates: u64,
}

/// Walks every store of `rule`, adding matching regular files to `out`. The same file reached twice (two
/// roots, a symlink) is kept once: `seen` holds (device, inode) across all rule sets of a sweep.
pub fn walk_rule_set(
    rule: &RuleSet,
    cx: &Context,
    seen: &mut HashSet<(u64, u64)>,
    stats: &mut WalkStats,
    out: &mut Vec<FoundFile>,
) {
    for store in &rule.stores {
        for root in resolve_roots(store, cx) {
            if !root.exists {
                continue;
            }
            walk_root(rule, store, &root.path, seen, stats, out);
        }
    }
}

fn walk_root(
    rule: &RuleSet,
    store: &Store,
    root: &Path,
    seen: &mut HashSet<(u64, u64)>,
    stats: &mut WalkStats,
    out: &mut Vec<FoundFile>,
) {
    let app: std::sync::Arc<str> = std::sync::Arc::from(rule.id.as_str());
    use std::os::unix::fs::MetadataExt;
    // walkdir detects symlink loops when following links and reports them as errors, which we count.
    let walker = walkdir::WalkDir::new(root)
        .follow_links(store.follow_symlinks)
        .sort_by_file_name();
    for entry in walker {
        let entry = match entry {
            Ok(e) => e,
            Err(_) => {
                stats.unreadable += 1;
                continue;
            }
        };
        if !entry.file_type().is_file() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if !store.include.is_match(&rel) || store.exclude.is_match(&rel) {
            continue;
        }
        stats.files_visited += 1;
        let meta = match entry.metadata() {
            Ok(m) => m,
            Err(_) => {
                stats.unreadable += 1;
                continue;
            }
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            stats.duplicates += 1;
            continue;
        }
        let path = entry.path().to_path_buf();
        let rel_offset = path.to_string_lossy().len() - rel.len();
        out.push(FoundFile {
            app: app.clone(),
            path,
            rel_offset,
            size: meta.len(),
            mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            file_id: (meta.dev(), meta.ino()),
        });
    }
}

/// Opens a transcript for reading without blocking on a FIFO or device that slipped through.
pub fn open_transcript(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

/// Reads the head of a found file with its rule set.
pub fn read_head(rule: &RuleSet, file: &FoundFile) -> std::io::Result<HeadScan> {
    let f = open_transcript(&file.path)?;
    let name = file
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    head::scan_head(rule, &name, &file.rel(), f)
}
