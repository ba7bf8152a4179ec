//! git, run without what the repository could make it run: the snapshot's view of a git work tree
//! (`super`'s module docs say what is compared).

use super::{outside_wiki, Stamp, Stamper};
use crate::util::git::{split_z, Git};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where the repo sits in its work tree and where git keeps its files.
pub(super) struct Layout {
    pub(super) prefix: String,
    pub(super) git_dirs: Vec<PathBuf>,
}

impl Git {
    /// None outside a git work tree.
    pub(super) fn layout(&self) -> Option<Layout> {
        let out = self.run(&[
            "rev-parse",
            "--show-prefix",
            "--absolute-git-dir",
            "--path-format=absolute",
            "--git-common-dir",
        ])?;
        let text = String::from_utf8_lossy(&out);
        let mut lines = text.split('\n');
        let prefix = lines.next()?.trim().to_string();
        let mut git_dirs: Vec<PathBuf> = lines
            .filter(|l| !l.trim().is_empty())
            .map(|l| PathBuf::from(l.trim()))
            .collect();
        git_dirs.dedup();
        Some(Layout { prefix, git_dirs })
    }

    pub(super) fn head(&self) -> Option<String> {
        self.run(&["rev-parse", "-q", "--verify", "HEAD"])
            .map(|o| String::from_utf8_lossy(&o).trim().to_string())
    }

    pub(super) fn dirty(
        &self,
        prefix: &str,
        st: &mut Stamper,
    ) -> Option<BTreeMap<String, (String, Option<Stamp>)>> {
        let args = [
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--ignore-submodules=dirty",
            "--",
            ".",
        ];
        let out = self.run(&args)?;
        let dirty = split_z(&out)
            .into_iter()
            .filter(|e| e.len() > 3)
            .filter_map(|e| {
                let rel = outside_wiki(&e[3..], prefix)?;
                let stamp = st.stamp(&self.dir().join(&rel));
                Some((rel, (e[..2].to_string(), stamp)))
            })
            .collect();
        Some(dirty)
    }

    /// Paths (relative to the repo, outside the wiki) the index marks assume-unchanged (a lower-case tag)
    /// or skip-worktree (`S`): `git status` does not look at them.
    pub(super) fn hidden(&self) -> BTreeSet<String> {
        let Some(out) = self.run(&["ls-files", "-v", "-z", "--", "."]) else {
            return BTreeSet::new();
        };
        split_z(&out)
            .into_iter()
            .filter_map(|e| {
                let (tag, path) = e.split_once(' ')?;
                let marked =
                    tag.len() == 1 && (tag.chars().all(|c| c.is_ascii_lowercase()) || tag == "S");
                marked.then(|| outside_wiki(path, "")).flatten()
            })
            .collect()
    }

    /// What git ignores now (relative to the repo, outside the wiki), a directory it ignores whole as
    /// one entry ending in `/`.
    pub(super) fn ignored(&self) -> BTreeSet<String> {
        let args = [
            "ls-files",
            "--others",
            "--ignored",
            "--exclude-standard",
            "--directory",
            "-z",
            "--",
            ".",
        ];
        let Some(out) = self.run(&args) else {
            return BTreeSet::new();
        };
        split_z(&out)
            .into_iter()
            .filter_map(|p| outside_wiki(&p, ""))
            .collect()
    }

    /// For each of `paths` (relative to the repo) that git ignores, the ignore file that makes it so:
    /// relative to the repo when it is in it (`.gitignore`, `sub/.gitignore`, `.git/info/exclude`),
    /// else absolute (the user's global excludes). None when git could not say.
    pub(super) fn ignore_sources(&self, paths: &[&String]) -> Option<BTreeMap<String, String>> {
        let mut args = vec![
            "--literal-pathspecs",
            "check-ignore",
            "-v",
            "-z",
            "--no-index",
            "--",
        ];
        args.extend(paths.iter().map(|p| p.as_str()));
        // Exit 1 is "nothing ignored", as good an answer as 0.
        let out = self.run_allowing(&args, &[0, 1])?;
        let fields = split_z_keep_empty(&out);
        let mut map = BTreeMap::new();
        for rec in fields.chunks(4).filter(|r| r.len() == 4) {
            let source = rec[0].clone();
            let source = match Path::new(&source).is_absolute() {
                true => std::path::Path::new(&source)
                    .strip_prefix(self.dir())
                    .map(|r| r.to_string_lossy().into_owned())
                    .unwrap_or(source),
                false => source,
            };
            map.insert(rec[3].clone(), source);
        }
        Some(map)
    }
}

/// git's `-z` output, one string a field, empty fields kept (`check-ignore -v` writes some).
fn split_z_keep_empty(out: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = out
        .split(|b| *b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    if v.last().is_some_and(String::is_empty) {
        v.pop();
    }
    v
}
