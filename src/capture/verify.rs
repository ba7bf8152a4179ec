//! The check after every capture run, whatever the agent: before the run almanac notes the state of the
//! repository outside `.almanac/`, after it compares. What changed is recorded in the run record
//! (`wroteOutsideWiki`, `alsoChangedDuringRun`) and never reverted: the user may be editing the same tree.
//!
//! In a git work tree the state is `git status` (untracked files included, ignored ones not) of the
//! repo's directory plus HEAD, with the size and mtime of every file it lists. A file that was already
//! modified before the run and changed again is "also changed during the run" (most likely the user's
//! work), not blamed on the agent; a file that was clean before and is not after is. A commit made during
//! the run is judged the same way through the files it changed. Files git ignores are not seen.
//!
//! Elsewhere the state is the size and mtime of the repo's files, walking at most `MAX_FILES` files for at
//! most `MAX_WALK` each time; when the first walk hits a bound only the files it saw are compared (new
//! files are then not detected) and the record says so.

use crate::ledger::record::RunRecord;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, UNIX_EPOCH};

/// Files walked at most, outside a git work tree.
pub const MAX_FILES: usize = 20_000;
/// Time spent walking at most, outside a git work tree.
pub const MAX_WALK: Duration = Duration::from_secs(2);
/// git gets this long per command.
const GIT_TIMEOUT: Duration = Duration::from_secs(10);
/// The tree object of an empty tree: what HEAD is compared against before the first commit.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// (size, mtime in ns) of a file, or None when it does not exist.
type Stamp = Option<(u64, u128)>;

pub enum Snapshot {
    Git {
        /// The repo's directory relative to the work tree's top ("" or "sub/dir/").
        prefix: String,
        head: Option<String>,
        /// Dirty paths relative to the repo, with their status code and stamp.
        dirty: BTreeMap<String, (String, Stamp)>,
    },
    Files {
        files: BTreeMap<String, Stamp>,
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
        match git(repo, &["rev-parse", "--show-prefix"]) {
            Some(prefix) => {
                let prefix = String::from_utf8_lossy(&prefix).trim().to_string();
                Snapshot::Git {
                    head: head(repo),
                    dirty: git_dirty(repo, &prefix),
                    prefix,
                }
            }
            None => {
                let (files, complete) = walk(repo);
                Snapshot::Files { files, complete }
            }
        }
    }

    /// Compares with the repo now.
    pub fn changes(&self, repo: &Path) -> Changes {
        let mut c = Changes::default();
        match self {
            Snapshot::Git {
                prefix,
                head: before_head,
                dirty,
            } => {
                let now = git_dirty(repo, prefix);
                for path in dirty.keys().chain(now.keys()).collect::<BTreeSet<_>>() {
                    match (dirty.get(path), now.get(path)) {
                        (Some(b), Some(a)) if b == a => {}
                        (Some(_), _) => c.also.push(path.clone()),
                        (None, _) => c.wrote.push(path.clone()),
                    }
                }
                let after_head = head(repo);
                if after_head != *before_head {
                    let from = before_head.as_deref().unwrap_or(EMPTY_TREE);
                    let to = after_head.as_deref().unwrap_or(EMPTY_TREE);
                    let args = ["diff", "--name-only", "-z", from, to, "--", "."];
                    for p in git(repo, &args).map(|o| split_z(&o)).unwrap_or_default() {
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
            }
            Snapshot::Files { files, complete } => {
                let (now, _) = walk(repo);
                for (path, stamp) in files {
                    let current = now
                        .get(path)
                        .copied()
                        .unwrap_or_else(|| stat(&repo.join(path)));
                    if current != *stamp {
                        c.wrote.push(path.clone());
                    }
                }
                if *complete {
                    c.wrote
                        .extend(now.keys().filter(|p| !files.contains_key(*p)).cloned());
                } else {
                    c.note = Some(format!(
                        "the repo has more files than almanac compares ({MAX_FILES} files or {} s of walking): only those were checked",
                        MAX_WALK.as_secs()
                    ));
                }
            }
        }
        c.wrote.sort();
        c.also.sort();
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

/// Runs git in `repo` (no optional locks: it must not take the index lock the user's git may want);
/// its stdout when it exits 0 within `GIT_TIMEOUT`.
fn git(repo: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let mut child = Command::new("git")
        .arg("--no-optional-locks")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut buf);
        buf
    });
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let out = reader.join().ok()?;
                return status.success().then_some(out);
            }
            Ok(None) if start.elapsed() < GIT_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

fn head(repo: &Path) -> Option<String> {
    git(repo, &["rev-parse", "-q", "--verify", "HEAD"])
        .map(|o| String::from_utf8_lossy(&o).trim().to_string())
}

fn split_z(out: &[u8]) -> Vec<String> {
    out.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// A path git printed (relative to the work tree's top) as relative to the repo, unless it is in the wiki.
fn outside_wiki(path: &str, prefix: &str) -> Option<String> {
    let rel = path.strip_prefix(prefix)?;
    (!(rel == ".almanac" || rel.starts_with(".almanac/"))).then(|| rel.to_string())
}

fn git_dirty(repo: &Path, prefix: &str) -> BTreeMap<String, (String, Stamp)> {
    let args = [
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--no-renames",
        "--",
        ".",
    ];
    let Some(out) = git(repo, &args) else {
        return BTreeMap::new();
    };
    split_z(&out)
        .into_iter()
        .filter(|e| e.len() > 3)
        .filter_map(|e| {
            let rel = outside_wiki(&e[3..], prefix)?;
            let stamp = stat(&repo.join(&rel));
            Some((rel, (e[..2].to_string(), stamp)))
        })
        .collect()
}

fn stat(p: &Path) -> Stamp {
    let m = std::fs::symlink_metadata(p).ok()?;
    let mtime = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Some((m.len(), mtime))
}

/// The repo's files outside `.almanac/` (and `.git/`), within the bounds; whether the walk was complete.
fn walk(repo: &Path) -> (BTreeMap<String, Stamp>, bool) {
    let start = Instant::now();
    let mut files = BTreeMap::new();
    let it = walkdir::WalkDir::new(repo)
        .min_depth(1)
        .into_iter()
        .filter_entry(|e| {
            !(e.depth() == 1 && e.file_name() == ".almanac") && e.file_name() != ".git"
        });
    for e in it.flatten() {
        if files.len() >= MAX_FILES || start.elapsed() >= MAX_WALK {
            return (files, false);
        }
        if e.file_type().is_dir() {
            continue;
        }
        if let Ok(rel) = e.path().strip_prefix(repo) {
            files.insert(rel.display().to_string(), stat(e.path()));
        }
    }
    (files, true)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn without_git_every_change_outside_the_wiki_counts() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        sh(
            r,
            "mkdir -p src .almanac/pages && echo a > src/a.rs && echo b > src/b.rs",
        );
        let s = Snapshot::take(r);
        assert!(matches!(s, Snapshot::Files { complete: true, .. }));
        sh(
            r,
            "echo x > .almanac/pages/p.md && echo aa > src/a.rs && rm src/b.rs && echo n > new.txt",
        );
        let c = s.changes(r);
        assert_eq!(c.wrote, ["new.txt", "src/a.rs", "src/b.rs"]);
        assert!(c.also.is_empty());
    }

    #[test]
    fn in_git_files_dirty_before_the_run_are_not_blamed() {
        if git(Path::new("."), &["--version"]).is_none() {
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
}
