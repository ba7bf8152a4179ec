//! The check after every capture run, whatever the agent: before the run almanac notes the state of the
//! repository outside `.almanac/`, after it compares. What changed is recorded in the run record
//! (`wroteOutsideWiki`, `alsoChangedDuringRun`, repo-relative paths) and never reverted: the user may be
//! editing the same tree.
//!
//! A file's state is its size, mtime and ctime (a program can set a file's mtime back, not its ctime)
//! and, for files up to `HASH_FILE_MAX` while the snapshot has hashed less than `HASH_BUDGET`, a hash
//! of its content: an edit that keeps size and mtime is seen.
//!
//! In a git work tree the state is:
//! - `git status` (untracked files included, ignored ones not) of the repo's directory, with the state
//!   of every file it lists, plus HEAD. A file already modified before the run and changed again is
//!   "also changed during the run" (most likely the user's work), not blamed on the agent; a file that
//!   was clean before and is not after is. A commit made during the run is judged the same way through
//!   the files it changed.
//! - the files inside untracked directories git lists whole (nested repositories), walked;
//! - git's own control files (`.git/config`, `hooks/`, `info/` with `exclude` and `attributes`,
//!   `objects/info/` alternates, submodules' config and hooks under `modules/`), which decide what git
//!   runs and what it shows: a planted hook or an `info/exclude` that hides a file is a write outside
//!   the wiki, listed as `.git/hooks/pre-commit`;
//! - the paths the index marks assume-unchanged or skip-worktree (`git ls-files -v`): a path newly
//!   marked during the run had its changes hidden from `git status`, and is listed.
//!
//! - what git ignores (`ls-files --others --ignored`): a file ignored after the run and not before is
//!   listed when the ignore file that makes it so (`check-ignore -v`) changed during the run or is itself
//!   newly ignored, so a file the agent adds and hides is seen (`newly_ignored`);
//! - whether git can still read the repository: when it cannot after the run, `.git` is listed.
//!
//! Not covered: files git ignored before the run (`.gitignore`, the user's global excludes); the work trees of
//! submodules (their recorded commit is compared); refs, the reflog and objects (a commit is judged by
//! HEAD); past `MAX_FILES` or `MAX_WALK`, files not walked (the record's log says so).
//!
//! git runs without any program the repository configures (`Git`): no fsmonitor hook, hooks, clean or
//! smudge filters, external diff, pager or ssh command, and without the system config; and with no
//! optional locks, so it never takes the index lock the user's git may want.
//!
//! Elsewhere the state is that of the repo's files, walking at most `MAX_FILES` files for at most
//! `MAX_WALK` each time; when the first walk hits a bound only the files it saw are compared (new files
//! are then not detected) and the record says so.

mod git;

use crate::ledger::record::RunRecord;
use crate::util::git::split_z;
pub use crate::util::git::Git;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Files walked at most (outside a git work tree; inside untracked directories and git's control files).
pub const MAX_FILES: usize = 20_000;
/// Time spent walking at most, each walk.
pub const MAX_WALK: Duration = Duration::from_secs(2);
/// Files larger than this are compared by size and times only.
pub const HASH_FILE_MAX: u64 = 8 << 20;
/// Content a snapshot hashes at most; past it, files are compared by size and times only.
pub const HASH_BUDGET: u64 = 128 << 20;
/// The tree object of an empty tree: what HEAD is compared against before the first commit.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// A file's state: size, mtime and ctime (ns), and its content's hash when it was hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    mtime: i128,
    ctime: i128,
    hash: Option<[u8; 32]>,
}

/// Each path's state, by path.
type Stamps = BTreeMap<String, Option<Stamp>>;

/// Whether two states of a path are the same: both absent, or equal in size and times and (when both
/// were hashed) content.
fn same(a: &Option<Stamp>, b: &Option<Stamp>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.len == b.len
                && a.mtime == b.mtime
                && a.ctime == b.ctime
                && (a.hash.is_none() || b.hash.is_none() || a.hash == b.hash)
        }
        _ => false,
    }
}

/// Takes stamps, hashing content within the budget.
struct Stamper {
    hashed: u64,
}

impl Stamper {
    fn new() -> Stamper {
        Stamper { hashed: 0 }
    }

    fn stamp(&mut self, p: &Path) -> Option<Stamp> {
        let m = std::fs::symlink_metadata(p).ok()?;
        let (mtime, ctime) = crate::platform::times_ns(&m);
        let mut st = Stamp {
            len: m.len(),
            mtime,
            ctime,
            hash: None,
        };
        if m.file_type().is_symlink() {
            use sha2::Digest;
            let target = std::fs::read_link(p).ok()?;
            st.hash = Some(sha2::Sha256::digest(target.as_os_str().as_encoded_bytes()).into());
        } else if m.is_file() && m.len() <= HASH_FILE_MAX && self.hashed + m.len() <= HASH_BUDGET {
            self.hashed += m.len();
            st.hash = hash_file(p);
        }
        Some(st)
    }
}

fn hash_file(p: &Path) -> Option<[u8; 32]> {
    use sha2::Digest;
    let mut f = crate::util::untrusted::open_regular(p).ok()?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).ok()?;
    Some(h.finalize().into())
}

pub enum Snapshot {
    Git {
        git: Git,
        /// The repo's directory relative to the work tree's top ("" or "sub/dir/").
        prefix: String,
        head: Option<String>,
        /// Dirty paths relative to the repo, with their status code and state.
        dirty: BTreeMap<String, (String, Option<Stamp>)>,
        /// Files inside the untracked directories git lists whole (nested repositories).
        nested: BTreeMap<String, Option<Stamp>>,
        /// git's control files, named repo-relative (absolute when the git directory is elsewhere).
        control: BTreeMap<String, Option<Stamp>>,
        /// Paths the index marks assume-unchanged or skip-worktree.
        hidden: BTreeSet<String>,
        /// What git ignores, a directory it ignores whole as one entry (`dir/`).
        ignored: BTreeSet<String>,
        /// A walk hit its bound.
        partial: bool,
    },
    Files {
        files: BTreeMap<String, Option<Stamp>>,
        complete: bool,
    },
}

/// What changed outside `.almanac/` during a run.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    /// Changed by the agent, as far as almanac can tell.
    pub wrote: Vec<String>,
    /// Already modified before the run and changed again: not blamed.
    pub also: Vec<String>,
    pub note: Option<String>,
}

impl Snapshot {
    /// The repo's state outside `.almanac/` now.
    pub fn take(repo: &Path) -> Snapshot {
        let mut st = Stamper::new();
        let git = Git::new(repo);
        match git.layout() {
            Some(layout) => {
                let dirty = git.dirty(&layout.prefix, &mut st).unwrap_or_default();
                let (nested, n_partial) = walk_untracked_dirs(repo, &dirty, &mut st);
                let (control, c_partial) = control_files(repo, &layout.git_dirs, &mut st);
                Snapshot::Git {
                    head: git.head(),
                    hidden: git.hidden(),
                    ignored: git.ignored(),
                    prefix: layout.prefix,
                    dirty,
                    nested,
                    control,
                    partial: n_partial || c_partial,
                    git,
                }
            }
            None => {
                let (files, complete) = walk(repo, &mut st);
                Snapshot::Files { files, complete }
            }
        }
    }

    /// Compares with the repo now.
    pub fn changes(&self, repo: &Path) -> Changes {
        let mut c = Changes::default();
        let mut st = Stamper::new();
        match self {
            Snapshot::Git {
                git,
                prefix,
                head: before_head,
                dirty,
                nested,
                control,
                hidden,
                ignored,
                partial,
            } => {
                let now = match git.dirty(prefix, &mut st) {
                    Some(now) => now,
                    None => {
                        // git read the repo before the run and cannot now: the agent broke what
                        // git reads (the index, the config), and what it changed cannot be listed.
                        c.wrote.push(".git".into());
                        c.note = Some(
                            "git could not read the repository after the run, though it could before: \
                             the check is incomplete"
                                .into(),
                        );
                        BTreeMap::new()
                    }
                };
                for path in dirty.keys().chain(now.keys()).collect::<BTreeSet<_>>() {
                    match (dirty.get(path), now.get(path)) {
                        (Some(b), Some(a)) if b.0 == a.0 && same(&b.1, &a.1) => {}
                        (Some(_), _) => c.also.push(path.clone()),
                        (None, _) => c.wrote.push(path.clone()),
                    }
                }
                let (nested_now, _) = walk_untracked_dirs(repo, &now, &mut st);
                compare(nested, &nested_now, &mut c.wrote);
                let layout = git.layout();
                let dirs = layout.map(|l| l.git_dirs).unwrap_or_default();
                let (control_now, _) = control_files(repo, &dirs, &mut st);
                compare(control, &control_now, &mut c.wrote);
                for p in git.hidden().difference(hidden) {
                    c.wrote.push(p.clone());
                }
                newly_ignored(repo, git, ignored, (&control_now, control), &mut c, &mut st);
                let after_head = git.head();
                if after_head != *before_head {
                    let from = before_head.as_deref().unwrap_or(EMPTY_TREE);
                    let to = after_head.as_deref().unwrap_or(EMPTY_TREE);
                    let args = [
                        "diff",
                        "--no-ext-diff",
                        "--no-textconv",
                        "--name-only",
                        "-z",
                        from,
                        to,
                        "--",
                        ".",
                    ];
                    for p in git.run(&args).map(|o| split_z(&o)).unwrap_or_default() {
                        let Some(p) = outside_wiki(&p, prefix) else {
                            continue;
                        };
                        let list = if dirty.contains_key(&p) {
                            &mut c.also
                        } else {
                            &mut c.wrote
                        };
                        if !list.contains(&p) {
                            list.push(p);
                        }
                    }
                    c.note = Some(format!("HEAD moved from {from} to {to} during the run"));
                }
                if *partial {
                    c.note = Some(bounds_note(c.note.take()));
                }
            }
            Snapshot::Files { files, complete } => {
                let (now, _) = walk(repo, &mut st);
                for (path, stamp) in files {
                    let current = match now.get(path) {
                        Some(s) => *s,
                        None => st.stamp(&repo.join(path)),
                    };
                    if !same(&current, stamp) {
                        c.wrote.push(path.clone());
                    }
                }
                if *complete {
                    c.wrote
                        .extend(now.keys().filter(|p| !files.contains_key(*p)).cloned());
                } else {
                    c.note = Some(bounds_note(None));
                }
            }
        }
        c.wrote.sort();
        c.wrote.dedup();
        c.also.sort();
        c.also.dedup();
        c
    }

    /// Compares with the repo now, records the result in `record` and notes it in the run's log.
    pub fn check(&self, repo: &Path, record: &mut RunRecord) {
        let c = self.changes(repo);
        if !c.wrote.is_empty() {
            record.wrote_outside_wiki = Some(c.wrote.clone());
        }
        if !c.also.is_empty() {
            record.also_changed_during_run = Some(c.also.clone());
        }
        if c == Changes::default() {
            return;
        }
        // The run's own log, by its run id and never through a link the agent may have put there.
        let log_path =
            crate::ledger::record::log_path(&crate::ledger::runs_dir(repo), &record.run_id);
        if let Ok(mut log) = crate::util::atomic::open_append_private(&log_path) {
            let _ = writeln!(
                log,
                "almanac: outside .almanac/ the agent changed {:?}; also changed during the run (not blamed): {:?}{}",
                c.wrote,
                c.also,
                c.note.map(|n| format!("; {n}")).unwrap_or_default()
            );
        }
    }
}

/// Files the run's changes hide from `git status` by ignoring them. Of what git ignores after the run
/// and did not before, each path is asked which ignore file makes it so (`git check-ignore -v`); it is
/// listed when that file changed during the run (a `.gitignore` the agent wrote or edited,
/// `.git/info/exclude`), lies inside what is newly ignored (a `.gitignore` that ignores itself), or is
/// outside the repo while `.git/config` (where `core.excludesFile` is set) changed. A directory is listed
/// by its files, and whole when it has more than a walk takes. Ignored output of the user's own tools
/// (a build during the run) is not: its ignore file did not change.
fn newly_ignored(
    repo: &Path,
    git: &Git,
    before: &BTreeSet<String>,
    (control_now, control_before): (&Stamps, &Stamps),
    c: &mut Changes,
    st: &mut Stamper,
) {
    let now = git.ignored();
    let new: Vec<&String> = now.difference(before).collect();
    if new.is_empty() {
        return;
    }
    let changed_control = |p: &str| {
        !same(
            &control_now.get(p).copied().flatten(),
            &control_before.get(p).copied().flatten(),
        )
    };
    let config_changed = control_now
        .keys()
        .chain(control_before.keys())
        .any(|p| p.ends_with("config") && changed_control(p));
    let written: BTreeSet<String> = c.wrote.iter().chain(c.also.iter()).cloned().collect();
    let sources = git.ignore_sources(&new);
    let hides = |entry: &str| -> bool {
        let Some(sources) = &sources else {
            return true; // git could not say why: every new one is listed
        };
        let Some(source) = sources.get(entry) else {
            return false;
        };
        let inside_new = new
            .iter()
            .any(|n| n.ends_with('/') && source.starts_with(n.as_str()));
        let outside = Path::new(source).is_absolute();
        written.contains(source)
            || changed_control(source)
            || inside_new
            || (outside && config_changed)
    };
    let hidden: Vec<&&String> = new.iter().filter(|e| hides(e)).collect();
    for entry in hidden {
        match entry.strip_suffix('/') {
            Some(dir) => {
                let (found, complete) = walk_under(repo, &repo.join(dir), |_| true, st);
                c.wrote.extend(found.into_keys());
                if !complete {
                    c.wrote.push(entry.to_string());
                }
            }
            None => c.wrote.push(entry.to_string()),
        }
    }
}

fn bounds_note(before: Option<String>) -> String {
    let bounds = format!(
        "the repo has more files than almanac compares ({MAX_FILES} files or {} s of walking): only those were checked",
        MAX_WALK.as_secs()
    );
    match before {
        Some(n) => format!("{n}; {bounds}"),
        None => bounds,
    }
}

/// Adds to `out` every path whose state differs between `before` and `after` (appeared, went or changed).
fn compare(
    before: &BTreeMap<String, Option<Stamp>>,
    after: &BTreeMap<String, Option<Stamp>>,
    out: &mut Vec<String>,
) {
    for path in before.keys().chain(after.keys()).collect::<BTreeSet<_>>() {
        let b = before.get(path).copied().flatten();
        let a = after.get(path).copied().flatten();
        if !same(&b, &a) {
            out.push(path.clone());
        }
    }
}

/// A path git printed (relative to the work tree's top) as relative to the repo, unless it is in the wiki.
fn outside_wiki(path: &str, prefix: &str) -> Option<String> {
    let rel = path.strip_prefix(prefix)?;
    (!(rel == ".almanac" || rel.starts_with(".almanac/"))).then(|| rel.to_string())
}

/// The files inside each untracked directory git listed whole (`?? dir/`: a nested repository).
fn walk_untracked_dirs(
    repo: &Path,
    dirty: &BTreeMap<String, (String, Option<Stamp>)>,
    st: &mut Stamper,
) -> (BTreeMap<String, Option<Stamp>>, bool) {
    let mut out = BTreeMap::new();
    let mut partial = false;
    for dir in dirty
        .iter()
        .filter(|(p, (code, _))| code == "??" && p.ends_with('/'))
        .map(|(p, _)| p)
    {
        let (files, complete) = walk_under(repo, &repo.join(dir), |_| true, st);
        partial |= !complete;
        out.extend(files);
    }
    (out, partial)
}

/// git's control files in `git_dirs`, named relative to the repo when they are inside it: everything
/// but what git rewrites on its own in everyday use (objects, refs, logs, the index, transient state).
fn control_files(
    repo: &Path,
    git_dirs: &[PathBuf],
    st: &mut Stamper,
) -> (BTreeMap<String, Option<Stamp>>, bool) {
    let mut out = BTreeMap::new();
    let mut complete = true;
    for dir in git_dirs {
        let (files, done) = walk_under(repo, dir, control_file, st);
        complete &= done;
        out.extend(files);
    }
    (out, !complete)
}

/// Whether a path inside a git directory (relative to it, `/`-separated) is one almanac compares.
fn control_file(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let Some(name) = parts.last() else {
        return false;
    };
    // Directories git fills on its own; `objects/info/` (alternates) is compared.
    let skipped_dir = |i: usize, d: &str| match d {
        "objects" => parts.get(i + 1) != Some(&"info"),
        "refs" | "logs" | "lfs" | "rebase-merge" | "rebase-apply" | "sequencer" => true,
        "fsmonitor--daemon" | "fsmonitor--daemon.ipc" => true,
        _ => false,
    };
    if parts[..parts.len() - 1]
        .iter()
        .enumerate()
        .any(|(i, d)| skipped_dir(i, d))
    {
        return false;
    }
    !(name.ends_with(".lock")
        || matches!(
            *name,
            "index"
                | "packed-refs"
                | "HEAD"
                | "ORIG_HEAD"
                | "FETCH_HEAD"
                | "COMMIT_EDITMSG"
                | "AUTO_MERGE"
                | "MERGE_HEAD"
                | "MERGE_MSG"
                | "MERGE_MODE"
                | "MERGE_RR"
                | "CHERRY_PICK_HEAD"
                | "REVERT_HEAD"
                | "REBASE_HEAD"
                | "gc.log"
                | "gc.pid"
                | "shallow"
        )
        || name.starts_with("BISECT_"))
}

/// The repo's files outside `.almanac/` (and git's object store, refs and logs), within the bounds;
/// whether the walk was complete.
fn walk(repo: &Path, st: &mut Stamper) -> (BTreeMap<String, Option<Stamp>>, bool) {
    walk_under(
        repo,
        repo,
        |rel| {
            let first = rel.split('/').next().unwrap_or("");
            if first == ".almanac" {
                return false;
            }
            // Inside a `.git` directory, only its control files.
            match rel.split_once(".git/") {
                Some((before, inside)) if before.is_empty() || before.ends_with('/') => {
                    control_file(inside)
                }
                _ => true,
            }
        },
        st,
    )
}

/// The files under `dir` (not following links) whose path relative to it passes `keep`, stamped and
/// named relative to `repo` (absolute when outside it); whether the walk was complete.
fn walk_under(
    repo: &Path,
    dir: &Path,
    keep: impl Fn(&str) -> bool,
    st: &mut Stamper,
) -> (BTreeMap<String, Option<Stamp>>, bool) {
    let start = Instant::now();
    let mut files = BTreeMap::new();
    let it = walkdir::WalkDir::new(dir).min_depth(1).into_iter();
    for e in it.flatten() {
        if files.len() >= MAX_FILES || start.elapsed() >= MAX_WALK {
            return (files, false);
        }
        if e.file_type().is_dir() {
            continue;
        }
        let Ok(inside) = e.path().strip_prefix(dir) else {
            continue;
        };
        if !keep(&inside.to_string_lossy().replace('\\', "/")) {
            continue;
        }
        let name = match e.path().strip_prefix(repo) {
            Ok(rel) => rel.display().to_string(),
            Err(_) => e.path().display().to_string(),
        };
        files.insert(name, st.stamp(e.path()));
    }
    (files, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(repo: &Path, script: &str) {
        let ok = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(repo)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@e")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@e")
            .status()
            .unwrap()
            .success();
        assert!(ok, "{script}");
    }

    fn have_git() -> bool {
        Command::new("git").arg("--version").output().is_ok()
    }

    #[test]
    fn without_git_every_change_outside_the_wiki_counts() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        sh(
            r,
            "mkdir -p src .almanac/pages && echo a > src/a.rs && echo b > src/b.rs && echo c > src/c.rs",
        );
        let s = Snapshot::take(r);
        assert!(matches!(s, Snapshot::Files { complete: true, .. }));
        // c.rs: same size, mtime put back.
        sh(
            r,
            "echo x > .almanac/pages/p.md && echo aa > src/a.rs && rm src/b.rs && echo n > new.txt \
             && touch -r src/c.rs /tmp/.almanac-verify-ref-$$ && echo C > src/c.rs \
             && touch -r /tmp/.almanac-verify-ref-$$ src/c.rs && rm /tmp/.almanac-verify-ref-$$",
        );
        let c = s.changes(r);
        assert_eq!(c.wrote, ["new.txt", "src/a.rs", "src/b.rs", "src/c.rs"]);
        assert!(c.also.is_empty());
    }

    #[test]
    fn in_git_files_dirty_before_the_run_are_not_blamed() {
        if !have_git() {
            eprintln!("skipping: no git");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        sh(
            r,
            "git init -q && mkdir -p src .almanac && echo a > src/a.rs && echo b > src/b.rs && echo c > c.rs \
             && git add . && git commit -qm init && echo user > src/b.rs && echo u2 > c.rs",
        );
        let s = Snapshot::take(r);
        sh(
            r,
            "echo agent > src/a.rs && echo more >> src/b.rs && echo w > .almanac/x.md && echo n > new.rs",
        );
        let c = s.changes(r);
        assert_eq!(c.wrote, ["new.rs", "src/a.rs"]);
        assert_eq!(
            c.also,
            ["src/b.rs"],
            "c.rs was dirty before and did not change"
        );
        // A commit by the agent during the run names the files it committed.
        let s = Snapshot::take(r);
        sh(r, "echo z > z.rs && git add z.rs && git commit -qm agent");
        let c = s.changes(r);
        assert_eq!(c.wrote, ["z.rs"]);
        assert!(c.note.unwrap().contains("HEAD moved"));
    }

    #[test]
    fn control_files_are_what_git_does_not_rewrite_on_its_own() {
        for yes in [
            "config",
            "hooks/pre-commit",
            "info/exclude",
            "info/attributes",
            "objects/info/alternates",
            "modules/sub/config",
            "modules/sub/hooks/post-checkout",
            "description",
        ] {
            assert!(control_file(yes), "{yes}");
        }
        for no in [
            "index",
            "HEAD",
            "objects/ab/cdef",
            "objects/pack/p.pack",
            "refs/heads/main",
            "logs/HEAD",
            "index.lock",
            "modules/sub/objects/ab/cd",
            "modules/sub/index",
            "COMMIT_EDITMSG",
        ] {
            assert!(!control_file(no), "{no}");
        }
    }
}
