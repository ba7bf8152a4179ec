//! git, run without what the repository could make it run: the snapshot's view of a git work tree
//! (`super`'s module docs say what is compared).

use super::{outside_wiki, Stamp, Stamper};
use crate::util::git::{split_z, Git};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

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
    ) -> BTreeMap<String, (String, Option<Stamp>)> {
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
        let Some(out) = self.run(&args) else {
            return BTreeMap::new();
        };
        split_z(&out)
            .into_iter()
            .filter(|e| e.len() > 3)
            .filter_map(|e| {
                let rel = outside_wiki(&e[3..], prefix)?;
                let stamp = st.stamp(&self.dir().join(&rel));
                Some((rel, (e[..2].to_string(), stamp)))
            })
            .collect()
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
}
