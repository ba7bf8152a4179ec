//! Discovery: resolve each store's roots, walk them, read the head of every transcript, map it to a repo.
//! Produces facts only; deciding what to do with them is `policy`'s job.

pub mod cache;
mod examined;
pub mod head;
mod in_project;
pub mod locate;
pub mod records;
pub mod registry;
pub mod repo;
mod roots;
pub mod sessions;
pub mod turn_index;
pub mod views;

pub use examined::{examine, Examined};
pub use roots::{idle_apps, resolve_roots, IdleApp, ResolvedRoot, KNOWN_REPOS};

use crate::context::Context;
use crate::rules::{RuleSet, Store};
use head::HeadScan;
use serde::Serialize;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

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

    /// The mtime in ns since the epoch (negative before it).
    pub fn mtime_ns(&self) -> i64 {
        match self.mtime.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i64,
            Err(e) => -(e.duration().as_nanos() as i64),
        }
    }

    /// What the discovery cache checks before trusting what it remembers.
    pub fn stamp(&self) -> cache::Stamp {
        cache::Stamp {
            size: self.size,
            mtime_ns: self.mtime_ns() as i128,
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
    /// Files the rule's `subagent.paths` name, counted instead of listed (`SubagentFiles::Count`).
    #[serde(skip)]
    pub subagents_by_path: u64,
}

/// What a walk does with a file its rule's `subagent.paths` globs name: a subagent whatever its records
/// say (`scan_head` settles it from the path), so a caller that never captures or lists one can have
/// it counted, leaving its path, head and cache slot out of memory (a third of a 150k-file home).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubagentFiles {
    /// Listed like any other file (`capture prune` keeps their sessions, `doctor` counts them).
    List,
    /// Counted in `WalkStats::subagents_by_path`, not listed.
    Count,
}

/// What a walk lists for each file: the file itself, or a caller's record made from it (the sweep's
/// candidate, whose head is then filled in where it lies: a second list of 100k files is never made).
pub trait WalkItem: Send {
    fn new(file: FoundFile) -> Self;
    fn file(&self) -> &FoundFile;
}

impl WalkItem for FoundFile {
    fn new(file: FoundFile) -> Self {
        file
    }
    fn file(&self) -> &FoundFile {
        self
    }
}

/// A file with its head, not read yet (`sessions::heads` fills it in).
impl WalkItem for (FoundFile, Examined) {
    fn new(file: FoundFile) -> Self {
        (file, Examined::unread())
    }
    fn file(&self) -> &FoundFile {
        &self.0
    }
}

/// What one store root's walk found: the files, and the (device, inode) of each subagent file it only
/// counted (so a file reached twice is still one).
struct Found<T> {
    files: Vec<T>,
    subagents: Vec<(u64, u64)>,
}

impl<T> Found<T> {
    fn new() -> Self {
        Found {
            files: Vec::new(),
            subagents: Vec::new(),
        }
    }

    fn append(&mut self, other: &mut Found<T>) {
        self.files.append(&mut other.files);
        self.subagents.append(&mut other.subagents);
    }
}

/// The files the stores of one or more rule sets hold, walked root by root (`rule_set`), then made one
/// (`finish`): the same file reached twice (two roots, a symlink, a hard link) is kept once, the first
/// in walk order, and a listed file wins over a subagent file its path names. That is sorted out once
/// every walk is done, from the list itself: a set of every (device, inode) seen took 4.5 MB at 100k.
pub struct Walk<T> {
    /// Every root's files, and the subagent files only counted (`SubagentFiles::Count`).
    found: Found<T>,
    stats: WalkStats,
}

impl<T: WalkItem> Default for Walk<T> {
    fn default() -> Self {
        Walk {
            found: Found::new(),
            stats: WalkStats::default(),
        }
    }
}

impl<T: WalkItem> Walk<T> {
    /// Walks every store of `rule`. A root inside a repo is checked first (`in_project`): one reached
    /// through a link is not walked, and its files git tracks are not read.
    pub fn rule_set(&mut self, rule: &RuleSet, cx: &Context, subagents: SubagentFiles) {
        let known = registry::known(cx);
        for store in &rule.stores {
            for root in resolve_roots(store, cx) {
                if !root.exists {
                    continue;
                }
                let inside = match in_project::repo_of(&root, &known) {
                    None => None,
                    Some((repo, strict)) => {
                        match in_project::InProject::open(cx, (&repo, strict), &root.path) {
                            Ok(p) => Some(p),
                            Err(why) => {
                                let reason = crate::reason::Reason::StoreBehindLink;
                                in_project::note_refused(rule, &root.path, (reason, why));
                                continue;
                            }
                        }
                    }
                };
                match (store.kind.view(), inside.as_ref()) {
                    (None, None) => self.root(rule, store, &root.path, subagents),
                    (None, Some(p)) => {
                        let before = self.found.files.len();
                        self.root(rule, store, &root.path, subagents);
                        let mut walked = self.found.files.split_off(before);
                        walked.retain(|f| p.keeps(rule, f.file(), &[]));
                        self.found.files.append(&mut walked);
                    }
                    (Some(spec), p) => {
                        let root = (store, root.path.as_path());
                        self.view_root(rule, spec, root, p, (cx, &known));
                    }
                }
            }
        }
    }

    fn root(&mut self, rule: &RuleSet, store: &Store, root: &Path, subagents: SubagentFiles) {
        let at = StoreRoot {
            store,
            root,
            app: std::sync::Arc::from(rule.id.as_str()),
            subagent_paths: match subagents {
                SubagentFiles::List => None,
                SubagentFiles::Count => rule.subagent_paths.as_ref(),
            },
        };
        let stats = &mut self.stats;
        // Each piece of the walk joins the list as it is: a second list of the root's files is never made.
        let pieces = walk_parallel(&at, stats).unwrap_or_else(|| vec![walk_sequential(&at, stats)]);
        // Room for them all at once: grown by doubling, the list's last copy could be twice its length
        // (at 100k rows of about 200 bytes, 26 MB where 20 MB is needed).
        let more: usize = pieces.iter().map(|p| p.files.len()).sum();
        self.found.files.reserve_exact(more);
        for mut piece in pieces {
            self.found.append(&mut piece);
        }
    }

    /// A store read into views: each store file the root holds (those a root inside a project keeps)
    /// gives the views of its sessions.
    fn view_root(
        &mut self,
        rule: &RuleSet,
        spec: &crate::rules::views::ViewSpec,
        (store, root): (&Store, &Path),
        inside: Option<&in_project::InProject>,
        (cx, known): (&Context, &[PathBuf]),
    ) {
        let at = StoreRoot {
            store,
            root,
            app: std::sync::Arc::from(rule.id.as_str()),
            subagent_paths: None,
        };
        let mut stores: Found<FoundFile> = walk_sequential(&at, &mut self.stats);
        if let Some(p) = inside {
            stores
                .files
                .retain(|f| p.keeps(rule, f, &views::companions(spec, &f.path)));
        }
        for file in stores.files {
            let rel = file.rel();
            let by_path = rule.subagent_path(&rel);
            let made = views::views_of(cx, (&rule.id, spec, by_path), &file.path, &rel, known);
            for (busy, message) in made.errors {
                views::note_error(views::StoreError {
                    app: rule.id.clone(),
                    store: file.path.clone(),
                    reason: crate::reason::Reason::ReadFailed,
                    busy,
                    message,
                });
            }
            for path in made.files {
                if let Some(found) = views::found(&at.app, path) {
                    self.found.files.push(T::new(found));
                }
            }
        }
    }

    /// The files found, each once, in walk order, with the walk's counts.
    pub fn finish(self) -> (Vec<T>, WalkStats) {
        let Walk {
            found:
                Found {
                    mut files,
                    subagents: mut subagent_ids,
                },
            mut stats,
        } = self;
        let id = |i: u32| files[i as usize].file().file_id;
        // Indices by (device, inode), then walk order: the first of each run of equal ids stays.
        let mut order: Vec<u32> = (0..u32::try_from(files.len()).expect("< 4G files")).collect();
        order.sort_unstable_by_key(|&i| (id(i), i));
        let mut keep = vec![true; files.len()];
        for w in order.windows(2) {
            if id(w[0]) == id(w[1]) {
                keep[w[1] as usize] = false;
                stats.duplicates += 1;
            }
        }
        subagent_ids.sort_unstable();
        let before = subagent_ids.len();
        subagent_ids.dedup();
        stats.duplicates += (before - subagent_ids.len()) as u64;
        for sub in &subagent_ids {
            match order.binary_search_by_key(sub, |&i| id(i)) {
                Ok(_) => stats.duplicates += 1,
                Err(_) => stats.subagents_by_path += 1,
            }
        }
        drop(order);
        let mut keep = keep.into_iter();
        files.retain(|_| keep.next().unwrap_or(true));
        // Grown by doubling: what is left over is given back (a resize in place, as the list is mapped).
        files.shrink_to_fit();
        (files, stats)
    }
}

/// One store root being walked: what every file found under it shares.
struct StoreRoot<'a> {
    store: &'a Store,
    root: &'a Path,
    app: std::sync::Arc<str>,
    /// Set when subagent files are counted, not listed.
    subagent_paths: Option<&'a globset::GlobSet>,
}

fn walker(store: &Store, dir: &Path) -> walkdir::WalkDir {
    // walkdir detects symlink loops when following links and reports them as errors, which we count.
    let w = walkdir::WalkDir::new(dir)
        .follow_links(store.follow_symlinks)
        .sort_by_file_name();
    // Deeper files cannot match `include`: the walk's result is the same, without the rest of the tree.
    match store.max_depth {
        Some(d) => w.max_depth(d),
        None => w,
    }
}

/// The whole store root in one walk: the reference the parallel walk must equal. Matching files before
/// duplicates (the same file reached twice) are dropped.
fn walk_sequential<T: WalkItem>(at: &StoreRoot, stats: &mut WalkStats) -> Found<T> {
    let mut out = Found::new();
    for entry in walker(at.store, at.root) {
        consider(at, &entry, stats, &mut out);
    }
    out
}

/// The same walk on every core: the top levels are walked here, in order, down to a depth that leaves
/// enough directories to share out; those subtrees are walked in parallel and their results handed
/// back piece by piece in the walk's order, so together they are exactly the sequential walk's. A
/// symlink to a directory (which only the sequential walk can check for loops against every ancestor)
/// makes it give up: None, with `stats` untouched.
fn walk_parallel<T: WalkItem>(at: &StoreRoot, stats: &mut WalkStats) -> Option<Vec<Found<T>>> {
    /// What the top levels' walk found, in walk order: a file to look at (a flat directory of many
    /// transcripts is shared out too), or a directory whose subtree is walked as one piece.
    #[allow(clippy::large_enum_variant)] // `Seen`'s size: see there.
    enum Part {
        File(Seen),
        Subtree(PathBuf),
    }
    /// The top levels, down to `depth`, listed with std's directory reads: walkdir reads (and sorts)
    /// every directory it meets, even one at its `max_depth`, so it listed each of 120 project
    /// directories on one thread before the parallel walk listed them again (a fifth of a 100k walk).
    fn top_levels(
        at: &StoreRoot,
        dir: &Path,
        (level, depth): (usize, usize),
        parts: &mut Vec<Part>,
        stats: &mut WalkStats,
    ) -> Option<()> {
        each_entry(at, dir, stats, |seen, stats| {
            match seen {
                Seen::Dir(p) if level == depth => parts.push(Part::Subtree(p)),
                Seen::Dir(p) => return top_levels(at, &p, (level + 1, depth), parts, stats),
                file => parts.push(Part::File(file)),
            }
            Some(())
        })
    }
    if crate::util::par::threads() < 2 || !at.root.is_dir() {
        return None; // one core: nothing to share (a root that is a file is the sequential walk's)
    }
    let want = 4 * crate::util::par::threads();
    let mut depth = 1;
    let (parts, top) = loop {
        let (mut parts, mut top) = (Vec::new(), WalkStats::default());
        top_levels(at, at.root, (1, depth), &mut parts, &mut top)?;
        let subtrees = parts
            .iter()
            .filter(|p| matches!(p, Part::Subtree(_)))
            .count();
        if subtrees >= want || subtrees == 0 || depth >= 4 {
            break (parts, top);
        }
        depth += 1;
    };
    let walked = crate::util::par::map(&parts, |part| {
        let mut st = WalkStats::default();
        let mut out = Found::new();
        match part {
            Part::File(seen) => consider_seen(at, seen, &mut st, &mut out),
            Part::Subtree(dir) => walk_subtree(at, dir, &mut st, &mut out)?,
        }
        Some((out, st))
    });
    let walked: Vec<(Found<T>, WalkStats)> = walked.into_iter().collect::<Option<_>>()?;
    stats.unreadable += top.unreadable;
    let pieces = walked.into_iter().map(|(found, st)| {
        stats.files_visited += st.files_visited;
        stats.unreadable += st.unreadable;
        found
    });
    Some(pieces.collect())
}

/// One entry of a walkdir walk: a regular file the store's globs select is added to `out`.
fn consider<T: WalkItem>(
    at: &StoreRoot,
    entry: &walkdir::Result<walkdir::DirEntry>,
    stats: &mut WalkStats,
    out: &mut Found<T>,
) {
    let entry = match entry {
        Ok(e) => e,
        Err(_) => {
            stats.unreadable += 1;
            return;
        }
    };
    if entry.file_type().is_file() {
        consider_file(at, entry.path(), || entry.metadata(), stats, out);
    } else if entry.file_type().is_symlink() && linked_files_named(at) {
        if let Some(m) = std::fs::metadata(entry.path()).ok().filter(|m| m.is_file()) {
            consider_file(at, entry.path(), || Ok::<_, ()>(m), stats, out);
        }
    }
}

/// A store read into views that does not follow links still hands out a linked file: its reader opens
/// files without following links and refuses that one by name, so the refusal is seen.
fn linked_files_named(at: &StoreRoot) -> bool {
    !at.store.follow_symlinks && at.store.kind.view().is_some()
}

/// A regular file: added to `out` when the store's globs select it (its metadata is only read then).
fn consider_file<E, T: WalkItem>(
    at: &StoreRoot,
    path: &Path,
    meta: impl FnOnce() -> Result<std::fs::Metadata, E>,
    stats: &mut WalkStats,
    out: &mut Found<T>,
) {
    // Walked paths are the root joined with names, so the root is a byte prefix followed by `/`
    // (`strip_prefix` compares component by component: a tenth of a 100k-file walk); any other
    // shape takes the component-wise way.
    let (bytes, root) = (
        path.as_os_str().as_encoded_bytes(),
        at.root.as_os_str().as_encoded_bytes(),
    );
    let rel = match bytes.strip_prefix(root) {
        // SAFETY: split right after an ASCII `/`, as `from_encoded_bytes_unchecked` allows.
        Some(rest) if root.ends_with(b"/") || rest.first() == Some(&b'/') => Path::new(unsafe {
            std::ffi::OsStr::from_encoded_bytes_unchecked(rest.strip_prefix(b"/").unwrap_or(rest))
        }),
        _ => match path.strip_prefix(at.root) {
            Ok(rel) => rel,
            Err(_) => return,
        },
    };
    let rel = rel.to_string_lossy();
    let rel = if rel.contains('\\') {
        std::borrow::Cow::Owned(rel.replace('\\', "/"))
    } else {
        rel
    };
    if !at.store.include.is_match(&*rel) || at.store.exclude.is_match(&*rel) {
        return;
    }
    stats.files_visited += 1;
    let meta = match meta() {
        Ok(m) => m,
        Err(_) => {
            stats.unreadable += 1;
            return;
        }
    };
    if at.subagent_paths.is_some_and(|g| g.is_match(&*rel)) {
        out.subagents.push(crate::platform::file_id(path, &meta));
        return;
    }
    let rel_offset = path.to_string_lossy().len() - rel.len();
    out.files.push(T::new(FoundFile {
        app: at.app.clone(),
        rel_offset,
        size: meta.len(),
        mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        file_id: crate::platform::file_id(path, &meta),
        path: path.to_path_buf(),
    }));
}

/// An entry of a directory listed with std's reads, as the walk treats it. (On Windows a `DirEntry`
/// holds its find data, 600 bytes; boxing it would cost every platform an allocation per file.)
#[allow(clippy::large_enum_variant)]
enum Seen {
    Dir(PathBuf),
    /// A regular file: its metadata (a `statx` on the open directory) is only read if it is selected.
    File(PathBuf, std::fs::DirEntry),
    /// A link to a regular file, followed (the store follows links).
    Linked(PathBuf, std::fs::Metadata),
}

/// Lists `dir` by file name and hands each directory, file and followed file link to `f`, as walkdir
/// orders them. None on a directory symlink (only the sequential walk checks those for loops), or
/// when `f` gives up.
fn each_entry(
    at: &StoreRoot,
    dir: &Path,
    stats: &mut WalkStats,
    mut f: impl FnMut(Seen, &mut WalkStats) -> Option<()>,
) -> Option<()> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(_) => {
            stats.unreadable += 1;
            return Some(());
        }
    };
    let mut entries: Vec<(std::ffi::OsString, std::fs::DirEntry)> = Vec::new();
    for e in rd {
        match e {
            Ok(e) => entries.push((e.file_name(), e)),
            Err(_) => stats.unreadable += 1,
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, e) in entries {
        let path = e.path();
        let Ok(ft) = e.file_type() else {
            stats.unreadable += 1;
            continue;
        };
        if ft.is_dir() {
            f(Seen::Dir(path), stats)?;
        } else if ft.is_file() {
            f(Seen::File(path, e), stats)?;
        } else if ft.is_symlink() && (at.store.follow_symlinks || linked_files_named(at)) {
            match std::fs::metadata(&path) {
                Err(_) => stats.unreadable += 1,
                Ok(m) if m.is_dir() && at.store.follow_symlinks => return None,
                Ok(m) if m.is_file() => f(Seen::Linked(path, m), stats)?,
                Ok(_) => {}
            }
        }
    }
    Some(())
}

/// A file `each_entry` handed out: added to `out` when the store's globs select it.
fn consider_seen<T: WalkItem>(
    at: &StoreRoot,
    seen: &Seen,
    stats: &mut WalkStats,
    out: &mut Found<T>,
) {
    match seen {
        Seen::File(p, e) => consider_file(at, p, || e.metadata(), stats, out),
        Seen::Linked(p, m) => consider_file(at, p, || Ok::<_, ()>(m.clone()), stats, out),
        Seen::Dir(_) => {}
    }
}

/// Walks what is inside `dir` as walkdir does (by file name, depth first, each directory before what it
/// holds), with std's directory reads: their `metadata` is a `statx` on the open directory, not a
/// lookup of the whole path, which at 100k files is most of a walk's time. None on a directory symlink.
fn walk_subtree<T: WalkItem>(
    at: &StoreRoot,
    dir: &Path,
    stats: &mut WalkStats,
    out: &mut Found<T>,
) -> Option<()> {
    each_entry(at, dir, stats, |seen, stats| {
        match &seen {
            Seen::Dir(p) => walk_subtree(at, p, stats, out)?,
            file => consider_seen(at, file, stats, out),
        }
        Some(())
    })
}

/// Opens a transcript for reading without blocking on a FIFO or device that slipped through.
pub fn open_transcript(path: &Path) -> std::io::Result<File> {
    let f = crate::platform::open_no_wait(std::fs::OpenOptions::new().read(true), path)?;
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
    // A view's path is almanac's, not the app's: `subagent.paths` matched the store file's when the
    // view was made, and its header says so.
    let rel = match rule.is_view(&file.path) {
        true => None,
        false => Some(file.rel()),
    };
    let at = rel.as_deref().map(|r| (file.path.as_path(), r));
    head::scan_head(rule, &name, at, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_file(p: &Path, len: usize) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x".repeat(len)).unwrap();
    }

    fn at<'a>(store: &'a Store, root: &'a Path) -> StoreRoot<'a> {
        StoreRoot {
            store,
            root,
            app: "claude".into(),
            subagent_paths: None,
        }
    }

    #[cfg(unix)]
    fn listing(v: &[FoundFile]) -> Vec<(PathBuf, usize, u64)> {
        v.iter()
            .map(|s| (s.path.clone(), s.rel_offset, s.size))
            .collect()
    }

    /// The parallel walk's pieces, in order, as one.
    #[cfg(unix)]
    fn joined(pieces: Vec<Found<FoundFile>>) -> Found<FoundFile> {
        let mut all = Found::new();
        for mut p in pieces {
            all.append(&mut p);
        }
        all
    }

    #[test]
    #[cfg(unix)]
    fn the_parallel_walk_equals_the_sequential_one() {
        let cat = crate::rules::load(&[]).unwrap();
        let store = &cat.get("claude").unwrap().stores[0];
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("projects");
        for p in 0..12 {
            let proj = root.join(format!("-p{p:02}"));
            std::fs::create_dir_all(proj.join("s1/subagents")).unwrap();
            std::fs::write(proj.join(format!("{p}.jsonl")), "x".repeat(p)).unwrap();
            std::fs::write(proj.join("s1/subagents/agent-1.jsonl"), "y").unwrap();
            std::fs::write(proj.join("notes.txt"), "not a transcript").unwrap();
        }
        std::fs::write(root.join("top.jsonl"), "top").unwrap();
        std::os::unix::fs::symlink(dir.path().join("nowhere"), root.join("-p05/broken.jsonl"))
            .unwrap();
        std::os::unix::fs::symlink(root.join("-p01/1.jsonl"), root.join("-p02/link.jsonl"))
            .unwrap();
        let (mut a, mut b) = (WalkStats::default(), WalkStats::default());
        let par = joined(walk_parallel(&at(store, &root), &mut a).expect("no directory links"));
        let seq: Found<FoundFile> = walk_sequential(&at(store, &root), &mut b);
        assert_eq!(listing(&par.files), listing(&seq.files));
        assert!(seq.files.len() >= 25, "{}", seq.files.len());
        assert_eq!(
            (a.files_visited, a.unreadable),
            (b.files_visited, b.unreadable)
        );

        // A flat directory (Codex's archived_sessions/) is shared out file by file, same result.
        let flat = dir.path().join("flat");
        for i in 0..50 {
            write_file(&flat.join(format!("r{i:02}.jsonl")), i);
        }
        let (mut a, mut b) = (WalkStats::default(), WalkStats::default());
        let par = joined(walk_parallel(&at(store, &flat), &mut a).unwrap());
        assert_eq!(
            listing(&par.files),
            listing(&walk_sequential::<FoundFile>(&at(store, &flat), &mut b).files)
        );
        assert_eq!((par.files.len(), a.files_visited), (50, b.files_visited));

        // A directory link leaves the walk to the sequential one, which checks loops against every
        // ancestor: a link elsewhere, then a loop.
        let ext = dir.path().join("ext");
        std::fs::create_dir_all(&ext).unwrap();
        std::fs::write(ext.join("e.jsonl"), "e").unwrap();
        std::os::unix::fs::symlink(&ext, root.join("-p04/s1/ext")).unwrap();
        assert!(walk_parallel::<FoundFile>(&at(store, &root), &mut WalkStats::default()).is_none());
        std::fs::remove_file(root.join("-p04/s1/ext")).unwrap();
        std::os::unix::fs::symlink(&root, root.join("-p03/s1/loop")).unwrap();
        let mut untouched = WalkStats::default();
        assert!(walk_parallel::<FoundFile>(&at(store, &root), &mut untouched).is_none());
        assert_eq!((untouched.files_visited, untouched.unreadable), (0, 0));
        let rule = cat.get("claude").unwrap();
        let mut walk = Walk::<FoundFile>::default();
        walk.root(rule, store, &root, SubagentFiles::List);
        let (out, st) = walk.finish();
        let mut b = WalkStats::default();
        let seq: Found<FoundFile> = walk_sequential(&at(store, &root), &mut b);
        assert!(b.unreadable >= 1, "the loop is reported");
        assert_eq!(st.unreadable, b.unreadable);
        assert_eq!(out.len() as u64 + st.duplicates, seq.files.len() as u64);
    }

    /// A root written with a trailing `/` or a `.` component gives every file the same relative
    /// path (what the store's globs match) as the plain root.
    #[test]
    fn a_roots_spelling_does_not_change_what_its_files_are_called() {
        let cat = crate::rules::load(&[]).unwrap();
        let store = &cat.get("claude").unwrap().stores[0];
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("projects");
        write_file(&root.join("-p/a.jsonl"), 1);
        write_file(&root.join("-p/s/subagents/agent-1.jsonl"), 2);
        let rels = |r: &Path| -> Vec<String> {
            let mut st = WalkStats::default();
            let mut v: Vec<String> = walk_sequential::<FoundFile>(&at(store, r), &mut st)
                .files
                .iter()
                .map(FoundFile::rel)
                .collect();
            v.sort();
            v
        };
        let plain = rels(&root);
        assert_eq!(plain, ["-p/a.jsonl", "-p/s/subagents/agent-1.jsonl"]);
        let slash = PathBuf::from(format!("{}/", root.display()));
        let dotted = dir.path().join(".").join("projects");
        assert_eq!(rels(&slash), plain);
        assert_eq!(rels(&dotted), plain);
    }

    /// One file reached by two paths (a hard link) is one: the first in walk order is listed, the
    /// other counted as a duplicate, across roots too; a listed file wins over a subagent file its path
    /// names; two subagent paths of one file count one subagent.
    #[test]
    fn a_file_reached_twice_is_listed_once_the_first_in_walk_order() {
        let cat = crate::rules::load(&[]).unwrap();
        let rule = cat.get("claude").unwrap();
        let store = &rule.stores[0];
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("one"), dir.path().join("two"));
        write_file(&one.join("-p/a.jsonl"), 1);
        std::fs::hard_link(one.join("-p/a.jsonl"), one.join("-p/b.jsonl")).unwrap();
        std::fs::create_dir_all(two.join("-q/s/subagents")).unwrap();
        std::fs::hard_link(one.join("-p/a.jsonl"), two.join("-q/c.jsonl")).unwrap();
        // Listed as c.jsonl in the second root, and a subagent path in the first.
        std::fs::create_dir_all(one.join("-p/s/subagents")).unwrap();
        std::fs::hard_link(
            two.join("-q/c.jsonl"),
            one.join("-p/s/subagents/agent-1.jsonl"),
        )
        .unwrap();
        write_file(&two.join("-q/s/subagents/agent-2.jsonl"), 2);
        let sub = two.join("-q/s/subagents/agent-2.jsonl");
        std::fs::hard_link(&sub, two.join("-q/s/subagents/agent-3.jsonl")).unwrap();
        write_file(&two.join("-q/d.jsonl"), 3);

        let mut walk = Walk::<FoundFile>::default();
        walk.root(rule, store, &one, SubagentFiles::Count);
        walk.root(rule, store, &two, SubagentFiles::Count);
        let (files, st) = walk.finish();
        let names: Vec<String> = files.iter().map(FoundFile::rel).collect();
        assert_eq!(names, ["-p/a.jsonl", "-q/d.jsonl"]);
        // b and c are a again; agent-1 is a too (listed wins); agent-3 is agent-2.
        assert_eq!((st.duplicates, st.subagents_by_path), (4, 1));
        assert_eq!(st.files_visited, 7);
    }
}
