//! Stores inside projects (a known repo's `.crush/crush.db`, Aider's log at its root): what a repository
//! holds may be a stranger's commit as much as the user's work. So a store file there is read only when
//! it is where it seems to be and is not committed:
//! - a directory from the repo down to the store root that is a symbolic link (or a Windows reparse
//!   point) is not followed, and a store file whose real path is not below the repo's is not read
//!   (`store-behind-link`): a clone that commits `.crush -> ../private/.crush` gets nothing of another
//!   project's;
//! - a store file git tracks (asked with the hardened git the post-run check uses, never the repo's own
//!   config) is someone's committed session, not the user's (`store-tracked-by-git`), unless the user
//!   vouches for the repo in `[stores] read_tracked_in`. Untracked and ignored files are read; so is every
//!   store outside a git work tree. Inside one, a store git cannot list (git missing, an index it cannot
//!   read) is refused as a tracked one is.
//!
//! Links are checked for the roots of stores that live inside projects (`known_repos` roots). A root of
//! another kind that happens to lie inside a known repo (a home directory made a repo, with the agents'
//! stores in it) is the user's own configuration, links and all: only what git tracks there is refused.

use super::ResolvedRoot;
use crate::context::Context;
use crate::reason::Reason;
use std::path::{Path, PathBuf};

/// A store root inside a repo, checked.
pub struct InProject {
    repo: PathBuf,
    /// The repo's real path (links above it are the user's own).
    real_repo: Option<PathBuf>,
    root: PathBuf,
    read_tracked: bool,
    /// A root of stores that live inside projects: links from the repo are refused.
    links_refused: bool,
}

/// The repo a store root lies in: the known repo it came from (true: a root of stores that live inside
/// projects), or one it lies below.
pub fn repo_of(root: &ResolvedRoot, known: &[PathBuf]) -> Option<(PathBuf, bool)> {
    match &root.repo {
        Some(r) => Some((r.clone(), true)),
        None => known
            .iter()
            .find(|r| root.path.starts_with(r))
            .map(|r| (r.clone(), false)),
    }
}

impl InProject {
    /// The root checked: Err with what to say when a directory from the repo down to it is a link (for
    /// a root of stores that live inside projects).
    pub fn open(
        cx: &Context,
        (repo, links_refused): (&Path, bool),
        root: &Path,
    ) -> Result<InProject, String> {
        let below = root
            .ancestors()
            .take_while(|a| *a != repo && a.starts_with(repo));
        for dir in below.filter(|_| links_refused) {
            if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
                let to = std::fs::read_link(dir)
                    .map(|t| format!(" (to {})", t.display()))
                    .unwrap_or_default();
                return Err(format!(
                    "{} is a symbolic link{to}: a store inside a project is read only where it is, \
                     never through a link (one a repository commits may point at another project's)",
                    dir.display()
                ));
            }
        }
        let settings = cx.store_settings();
        let read_tracked = settings
            .read_tracked_in
            .iter()
            .any(|p| cx.config_path_value(p) == crate::util::paths::normalize(repo));
        Ok(InProject {
            repo: repo.to_path_buf(),
            real_repo: std::fs::canonicalize(repo).ok(),
            root: root.to_path_buf(),
            read_tracked,
            links_refused,
        })
    }

    /// Why a store file found under the root is not read, if it is not: it, or a file read with it
    /// (`companions`: a database's WAL, a log's input history; those that are there), reached through
    /// a link or tracked by git. git is asked about exactly these files, once.
    pub fn refuse(&self, file: &Path, companions: &[PathBuf]) -> Option<(Reason, String)> {
        let all: Vec<&Path> = std::iter::once(file)
            .chain(companions.iter().map(PathBuf::as_path))
            .collect();
        let beside = |f: &Path| match f == file {
            true => String::new(),
            false => format!(" (read with the store {})", file.display()),
        };
        for f in all.iter().filter(|_| self.links_refused) {
            let Ok(below) = f.strip_prefix(&self.repo) else {
                continue;
            };
            let real = std::fs::canonicalize(f).ok();
            if real.is_none() || real != self.real_repo.as_ref().map(|r| r.join(below)) {
                let at = real.map_or_else(|| "nowhere".to_string(), |r| r.display().to_string());
                return Some((
                    Reason::StoreBehindLink,
                    format!(
                        "{} is really {at}, not below {}{}: a store inside a project is read only \
                         where it is",
                        f.display(),
                        self.repo.display(),
                        beside(f)
                    ),
                ));
            }
        }
        if self.read_tracked {
            return None;
        }
        let rels: Vec<String> = all
            .iter()
            .filter_map(|f| f.strip_prefix(&self.root).ok())
            .map(|r| r.to_string_lossy().replace('\\', "/"))
            .collect();
        let vouch = format!(
            "if it is yours, add \"{}\" to [stores] read_tracked_in in config.toml",
            self.repo.display()
        );
        let why = match crate::util::git::Git::plain(&self.root).tracked(&rels) {
            Some(t) => {
                let (f, _) = all.iter().zip(&rels).find(|(_, r)| t.contains(*r))?;
                format!(
                    "{} is tracked by git in {}{}: a store file a repository commits is someone's \
                     session, not yours, and is not read ({vouch})",
                    f.display(),
                    self.repo.display(),
                    beside(f)
                )
            }
            // No git work tree: nothing is tracked. One git could not list (git missing, an index
            // it cannot read) may track the file: not read, as a tracked one is not.
            None if !in_work_tree(&self.root) => return None,
            None => format!(
                "{} is in a git work tree, {}, and git could not say whether it tracks it (is git \
                 installed?): not read, as a store a repository commits is not yours ({vouch})",
                file.display(),
                self.repo.display()
            ),
        };
        Some((Reason::StoreTrackedByGit, why))
    }
}

/// Whether git would find a work tree from `dir` (where it really is, as `git -C` goes there): a `.git`
/// at or above it.
fn in_work_tree(dir: &Path) -> bool {
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    real.ancestors().any(|a| a.join(".git").exists())
}

/// Notes a store file or root inside a project that is not read, and why (`capture sessions` and the
/// sweep list it; `doctor` shows it).
pub(super) fn note_refused(
    rule: &crate::rules::RuleSet,
    path: &Path,
    (reason, message): (crate::reason::Reason, String),
) {
    super::views::note_error(super::views::StoreError {
        app: rule.id.clone(),
        store: path.to_path_buf(),
        reason,
        busy: false,
        message,
    });
}

impl InProject {
    /// Whether a file found under the root (with the files read with it) is read; one that is not is
    /// noted with why.
    pub(super) fn keeps(
        &self,
        rule: &crate::rules::RuleSet,
        f: &super::FoundFile,
        companions: &[PathBuf],
    ) -> bool {
        match self.refuse(&f.path, companions) {
            None => true,
            Some(why) => {
                note_refused(rule, &f.path, why);
                false
            }
        }
    }
}
